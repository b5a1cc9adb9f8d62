//! The status socket: HTTP on a Unix socket, serving the [`crate::api`]
//! documents and Prometheus metrics.
//!
//! - Must never wait on the event loop or on file I/O: the loop publishes a
//!   [`Snapshot`] (a `watch` channel), the audit trail is a ring behind a
//!   short-held mutex, and the hung paths are read live from the [`IoPool`].
//!   So status answers at once even while the loop is stuck.
//! - Its clients are other people's processes, so a connection's share is
//!   bounded ([`Limits`]): idle clients must never take the descriptors the
//!   daemon needs for cgroup files (they once did: every write failed with
//!   EMFILE).

use std::collections::VecDeque;
use std::io;
use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use serde::Deserialize;
use tokio::net::UnixListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;

use crate::api;
use crate::io::IoPool;
use crate::metrics::Metrics;
use crate::watchdog;

/// How many events the audit trail keeps.
pub const EVENTS_KEPT: usize = 512;

/// What the loop publishes for the socket: the status document, and the
/// facts its health was judged on (re-judged at each request with live I/O
/// facts).
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub status: api::Status,
    pub facts: watchdog::Facts,
}

/// The audit trail: every cpuset write and repair, newest last, bounded.
#[derive(Debug, Default)]
pub struct Events {
    ring: Mutex<VecDeque<api::Event>>,
}

impl Events {
    fn lock(&self) -> MutexGuard<'_, VecDeque<api::Event>> {
        self.ring.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Appends an event, dropping the oldest beyond [`EVENTS_KEPT`].
    pub fn push(&self, what: api::EventKind) {
        let mut ring = self.lock();
        let seq = ring.back().map_or(1, |e| e.seq + 1);
        if ring.len() >= EVENTS_KEPT {
            ring.pop_front();
        }
        ring.push_back(api::Event {
            seq,
            at_ms: api::unix_ms(),
            what,
        });
    }

    /// The events after `since`, oldest first.
    pub fn since(&self, since: u64) -> Vec<api::Event> {
        self.lock()
            .iter()
            .filter(|e| e.seq > since)
            .cloned()
            .collect()
    }
}

/// What the handlers share.
#[derive(Clone)]
struct App {
    snapshot: watch::Receiver<Arc<Snapshot>>,
    events: Arc<Events>,
    metrics: Arc<Metrics>,
    pool: IoPool,
}

impl App {
    /// The latest status with the I/O facts read now.
    fn status(&self) -> api::Status {
        let snap = self.snapshot.borrow().clone();
        let mut status = snap.status.clone();
        let stats = self.pool.stats();
        let hung = self.pool.hung();
        let facts = watchdog::Facts {
            io_threads: stats.threads,
            hung_paths: hung.len(),
            ..snap.facts.clone()
        };
        let health = watchdog::assess(&facts);
        status.health = health_doc(&health);
        status.watchdog.hung_paths = hung
            .into_iter()
            .map(|h| api::HungPath {
                path: h.path,
                op: h.op.to_string(),
                secs: h.since.elapsed().as_secs(),
            })
            .collect();
        self.metrics.hung_paths.set(facts.hung_paths as i64);
        status
    }
}

/// The API form of a [`watchdog::Health`].
pub fn health_doc(h: &watchdog::Health) -> api::Health {
    let state = match h.state {
        watchdog::HealthState::Healthy => "healthy",
        watchdog::HealthState::Degraded => "degraded",
        watchdog::HealthState::Failed => "failed",
    };
    api::Health {
        state: state.into(),
        reasons: h.reasons.clone(),
    }
}

/// Why the socket could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    #[error("another pinctld is already serving {path}")]
    InUse { path: PathBuf },
    #[error("{path} exists and is not a socket; not removing it")]
    NotASocket { path: PathBuf },
    #[error("cannot {op} {path}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// Binds the socket at `path`: a stale socket left by a crash (nobody
/// answers on it) is removed first; a live one means another daemon runs.
/// Mode 0660 with the group `pinctl` when that group exists, else 0600 (root
/// only). Needs a tokio runtime.
pub fn bind(path: &Path) -> Result<UnixListener, SocketError> {
    let io_err = |op, source| SocketError::Io {
        op,
        path: path.to_path_buf(),
        source,
    };
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            match std::os::unix::net::UnixStream::connect(path) {
                Ok(_) => {
                    return Err(SocketError::InUse {
                        path: path.to_path_buf(),
                    });
                }
                Err(_) => {
                    std::fs::remove_file(path).map_err(|e| io_err("remove the stale socket", e))?
                }
            }
        }
        Ok(_) => {
            return Err(SocketError::NotASocket {
                path: path.to_path_buf(),
            });
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err("stat", e)),
    }
    if let Some(dir) = path.parent()
        && !dir.as_os_str().is_empty()
    {
        std::fs::create_dir_all(dir).map_err(|e| io_err("create the directory of", e))?;
    }
    let listener = UnixListener::bind(path).map_err(|e| io_err("bind", e))?;
    let group = nix::unistd::Group::from_name("pinctl").ok().flatten();
    let mode = match &group {
        Some(g) => {
            nix::unistd::chown(path, None, Some(g.gid))
                .map_err(|e| io_err("give the group pinctl", io::Error::from(e)))?;
            0o660
        }
        None => 0o600,
    };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| io_err("set the mode of", e))?;
    Ok(listener)
}

/// The most connections the socket serves at once. The CLI opens one at a
/// time and a scraper one more; 64 leaves room for many operators at once
/// and is far below any file descriptor limit a daemon runs with.
pub const MAX_CONNECTIONS: usize = 64;

/// How long a client may take to send a request's header, counted from the
/// moment the connection waits for one: right after connecting, and after
/// each answer on a keep-alive connection (so this is also the idle
/// timeout). `pinctl` sends its request at once; a client that says nothing
/// for this long only holds a descriptor.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest a connection lives, whatever it does. Every answer is built in
/// memory at once, so only a client that reads slowly or keeps sending
/// requests reaches it; `pinctl` uses one connection per request, each
/// bounded by its own 10 s timeout (`client::DEFAULT_TIMEOUT`), and
/// `events --follow` polls with new connections, so it never does.
pub const CONNECTION_TIMEOUT: Duration = Duration::from_secs(30);

/// What the socket's connections may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections served at once, well below the open-files limit; more
    /// are closed as soon as accepted, and counted.
    pub max_connections: usize,
    /// For a request's header, and for the next one on an idle connection.
    pub header_timeout: Duration,
    /// For the whole connection.
    pub connection_timeout: Duration,
}

impl Limits {
    /// The limits for this process: [`HEADER_TIMEOUT`], [`CONNECTION_TIMEOUT`]
    /// and at most [`MAX_CONNECTIONS`] connections, fewer when the soft limit
    /// of open files is low, so that the socket never takes more than a
    /// quarter of the daemon's descriptors.
    pub fn for_this_process() -> Limits {
        let soft = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
            .map_or(1024, |(soft, _)| soft);
        Limits {
            max_connections: connection_cap(soft),
            header_timeout: HEADER_TIMEOUT,
            connection_timeout: CONNECTION_TIMEOUT,
        }
    }
}

/// [`MAX_CONNECTIONS`], or a quarter of `nofile` descriptors when that is
/// fewer (at least one).
pub fn connection_cap(nofile: u64) -> usize {
    usize::try_from(nofile / 4)
        .unwrap_or(usize::MAX)
        .clamp(1, MAX_CONNECTIONS)
}

/// Raises the soft limit of open files to the hard limit, so the daemon's own
/// work (cgroup files on many I/O threads, the socket's connections) has the
/// room the administrator allows; systemd starts services with a soft limit
/// of 1024 for the sake of programs that use `select(2)`, which pinctld does
/// not. Returns the soft limit in force afterwards.
pub fn raise_fd_limit() -> nix::Result<u64> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard)?;
    }
    Ok(hard.max(soft))
}

/// Serves the API on `listener` until the returned task is aborted, with the
/// [`Limits::for_this_process`].
pub fn serve(
    listener: UnixListener,
    snapshot: watch::Receiver<Arc<Snapshot>>,
    events: Arc<Events>,
    metrics: Arc<Metrics>,
    pool: IoPool,
) -> tokio::task::JoinHandle<()> {
    serve_with(
        listener,
        snapshot,
        events,
        metrics,
        pool,
        Limits::for_this_process(),
    )
}

/// Serves `/metrics` alone on a TCP listener (`metrics_listen`), for
/// Prometheus, under the same limits as the socket. The status documents
/// stay on the Unix socket, where its mode decides who may read them.
pub fn serve_metrics(
    listener: tokio::net::TcpListener,
    snapshot: watch::Receiver<Arc<Snapshot>>,
    events: Arc<Events>,
    metrics: Arc<Metrics>,
    pool: IoPool,
) -> tokio::task::JoinHandle<()> {
    let app = App {
        snapshot,
        events,
        metrics,
        pool,
    };
    let routes = Router::new().route("/metrics", get(metrics_text));
    spawn_served(listener, routes, app, Limits::for_this_process())
}

/// Serves `routes` on `listener` with what the handlers share, bounded by
/// `limits`: the accept loop, in a task of its own.
fn spawn_served(
    listener: impl Listen,
    routes: Router<App>,
    app: App,
    limits: Limits,
) -> tokio::task::JoinHandle<()> {
    let metrics = app.metrics.clone();
    tokio::spawn(accept(listener, routes.with_state(app), metrics, limits))
}

/// A listener the accept loop serves: the status socket, or the metrics
/// port.
trait Listen: Send + 'static {
    type Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static;
    fn accept_one(&self) -> impl std::future::Future<Output = io::Result<Self::Stream>> + Send;
}

impl Listen for UnixListener {
    type Stream = tokio::net::UnixStream;
    async fn accept_one(&self) -> io::Result<Self::Stream> {
        self.accept().await.map(|(stream, _)| stream)
    }
}

impl Listen for tokio::net::TcpListener {
    type Stream = tokio::net::TcpStream;
    async fn accept_one(&self) -> io::Result<Self::Stream> {
        self.accept().await.map(|(stream, _)| stream)
    }
}

/// [`serve`] with the given limits (tests use short ones). Aborting the
/// returned task closes every connection too.
pub fn serve_with(
    listener: UnixListener,
    snapshot: watch::Receiver<Arc<Snapshot>>,
    events: Arc<Events>,
    metrics: Arc<Metrics>,
    pool: IoPool,
    limits: Limits,
) -> tokio::task::JoinHandle<()> {
    let app = App {
        snapshot,
        events,
        metrics,
        pool,
    };
    let routes = Router::new()
        .route("/v1/status", get(status))
        .route("/v1/workloads", get(workloads))
        .route("/v1/topology", get(topology))
        .route("/v1/health", get(health))
        .route("/v1/events", get(events_since))
        .route("/metrics", get(metrics_text));
    spawn_served(listener, routes, app, limits)
}

/// One open connection: holds its place under the cap and keeps the gauge,
/// also when the connection's task is aborted.
struct Open {
    _permit: OwnedSemaphorePermit,
    metrics: Arc<Metrics>,
}

impl Drop for Open {
    fn drop(&mut self) {
        self.metrics.socket_connections.dec();
    }
}

/// The accept loop: each connection is served by a task of its own, in a
/// `JoinSet` so that they end with this one.
async fn accept(listener: impl Listen, router: Router, metrics: Arc<Metrics>, limits: Limits) {
    let places = Arc::new(Semaphore::new(limits.max_connections));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    let mut connections = JoinSet::new();
    loop {
        let stream = tokio::select! {
            accepted = listener.accept_one() => match accepted {
                Ok(stream) => stream,
                Err(e) => {
                    accept_failed(&e).await;
                    continue;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        // Closed at once rather than left waiting: a waiting connection
        // would still hold a descriptor, and the client learns now that it
        // should come back.
        let Ok(permit) = places.clone().try_acquire_owned() else {
            metrics.socket_connections_refused.inc();
            drop(stream);
            continue;
        };
        metrics.socket_connections.inc();
        let open = Open {
            _permit: permit,
            metrics: metrics.clone(),
        };
        let conn = http.serve_connection(
            TokioIo::new(stream),
            TowerToHyperService::new(router.clone()),
        );
        connections.spawn(async move {
            let _open = open;
            match tokio::time::timeout(limits.connection_timeout, conn).await {
                Ok(Ok(())) => {}
                // A client that went away or sent garbage, or a header that
                // did not come in time: the connection's own business.
                Ok(Err(e)) => tracing::debug!(error = %e, "a status socket connection failed"),
                Err(_) => tracing::debug!("a status socket connection outlived its time; closed"),
            }
        });
    }
}

/// After a failed `accept`: a connection that went away before it was
/// accepted is nothing; anything else (out of descriptors or memory) is
/// warned about and waited out for a second, rather than retried in a busy
/// loop.
async fn accept_failed(e: &io::Error) {
    if matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionRefused
            | io::ErrorKind::Interrupted
    ) {
        return;
    }
    tracing::warn!(error = %e, "cannot accept on the status socket; trying again in 1 s");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

async fn status(State(app): State<App>) -> Response {
    axum::Json(app.status()).into_response()
}

async fn workloads(State(app): State<App>) -> Response {
    axum::Json(app.snapshot.borrow().status.workloads.clone()).into_response()
}

async fn topology(State(app): State<App>) -> Response {
    axum::Json(app.snapshot.borrow().status.topology.clone()).into_response()
}

async fn health(State(app): State<App>) -> Response {
    let health = app.status().health;
    let code = if health.state == "failed" {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    (code, axum::Json(health)).into_response()
}

#[derive(Deserialize)]
struct Since {
    since: Option<u64>,
}

async fn events_since(State(app): State<App>, Query(q): Query<Since>) -> Response {
    axum::Json(app.events.since(q.since.unwrap_or(0))).into_response()
}

async fn metrics_text(State(app): State<App>) -> Response {
    // Refreshes the live gauges (hung paths, health) first.
    let status = app.status();
    app.metrics.set_from(&status);
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        app.metrics.encode(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_socket_never_takes_more_than_a_quarter_of_the_open_files_limit() {
        assert_eq!(connection_cap(1024), MAX_CONNECTIONS);
        assert_eq!(connection_cap(u64::MAX), MAX_CONNECTIONS);
        assert_eq!(connection_cap(128), 32);
        assert_eq!(connection_cap(3), 1, "never none at all");
        assert_eq!(connection_cap(0), 1);
    }
}
