//! The NRI front end (issue #45): pinctld as a plugin of the container
//! runtime (containerd 1.7+ with NRI on, CRI-O 1.26+), so that a container
//! that asks for exclusive CPUs is made with them: the runtime writes them
//! in its `cpuset.cpus` before its first instruction runs.
//!
//! - [`mux`]: NRI's two connections over one socket;
//! - [`ttrpc`]: ttRPC's framing and envelopes;
//! - [`api`]: the NRI messages pinctld reads and sends;
//! - [`container`]: what a container being made asks for;
//! - [`plugin`]: one session with the runtime;
//! - [`told`]: what the runtime holds of each container's CPUs, and the
//!   updates that keep it true;
//! - [`keep_connected`]: sessions one after another, as the runtime
//!   comes and goes.
//!
//! What the calls are answered with is decided by the daemon
//! (`daemon::nri`) with the same engine as every cgroup. The cgroup
//! watcher stays the truth: it sees every container, NRI or not.

pub mod api;
pub mod container;
pub mod mux;
pub mod plugin;
pub mod told;
pub mod ttrpc;

use std::path::PathBuf;
use std::time::Duration;

use tokio::net::UnixStream;
use tokio::sync::mpsc;

pub use plugin::{Answer, Asked, Call, Fallback, Outgoing, Registration, Settings};

/// How long to wait before dialling the runtime again.
pub const REDIAL: Duration = Duration::from_secs(1);

/// The state of the link to the runtime, as the daemon is told it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Link {
    /// Registered on the socket.
    Up,
    /// Lost or not made, with why; dialled again after [`REDIAL`].
    Down(String),
}

/// Dials `socket` and runs a session, again and again, until the daemon
/// stops listening. Each change of the link is sent on `links` (a failure
/// that repeats is sent once).
pub async fn keep_connected(
    socket: PathBuf,
    settings: Settings,
    daemon: mpsc::Sender<Asked>,
    mut outgoing: mpsc::Receiver<Outgoing>,
    links: mpsc::Sender<Link>,
) {
    let mut last: Option<Link> = None;
    loop {
        let link = match UnixStream::connect(&socket).await {
            Err(e) => Link::Down(format!("cannot connect to {}: {e}", socket.display())),
            Ok(stream) => {
                if links.send(Link::Up).await.is_err() {
                    return;
                }
                last = Some(Link::Up);
                match plugin::run(stream, settings.clone(), daemon.clone(), &mut outgoing).await {
                    Err(plugin::SessionError::DaemonGone) => return,
                    Ok(()) => Link::Down("the session ended".to_string()),
                    Err(e) => Link::Down(e.to_string()),
                }
            }
        };
        if last.as_ref() != Some(&link) {
            if links.send(link.clone()).await.is_err() {
                return;
            }
            last = Some(link);
        }
        tokio::time::sleep(REDIAL).await;
    }
}
