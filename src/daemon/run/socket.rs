//! The run socket's connections: a task per client that reads its peer
//! (`SO_PEERCRED`, its groups and start time from `/proc` through the I/O
//! threads) and its one JSON line of [`Ask`], hands them to the loop
//! ([`Asked`]) and writes the answers back. It never decides an ask and
//! never touches a cgroup: the loop does.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;
use tracing::{info, warn};

use super::{Asked, start_of};
use crate::io::{IoPool, chain};
use crate::run::{self, Answer, Ask, Peer, Refusal};

/// How long a client may take to send its ask.
const ASK_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a client waits for the daemon's answer at most.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);
/// Connections served at once; one beyond is closed as it comes, so that
/// nobody can take the daemon's descriptors with idle connections.
const MAX_CONNECTIONS: usize = 16;

/// Accepts connections for good, each in a task of its own.
pub(super) async fn accept(
    listener: UnixListener,
    tx: mpsc::Sender<Asked>,
    pool: IoPool,
    proc_root: PathBuf,
) {
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let Ok(slot) = slots.clone().try_acquire_owned() else {
                    warn!("run socket: too many connections; one closed");
                    continue;
                };
                let (tx, pool, proc_root) = (tx.clone(), pool.clone(), proc_root.clone());
                tokio::spawn(async move {
                    serve(stream, tx, pool, proc_root).await;
                    drop(slot);
                });
            }
            Err(e) => {
                warn!(error = %e, "run socket: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// One client: its ask in, the answers out. A client that closes its end
/// while it waits leaves the line.
async fn serve(stream: UnixStream, tx: mpsc::Sender<Asked>, pool: IoPool, proc_root: PathBuf) {
    let cred = match stream.peer_cred() {
        Ok(c) => c,
        Err(e) => {
            warn!(error = %e, "run socket: no peer credentials");
            return;
        }
    };
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read.take(run::MAX_LINE as u64));
    let send = async |write: &mut tokio::net::unix::OwnedWriteHalf, answer: &Answer| {
        let mut line = serde_json::to_string(answer).unwrap_or_default();
        line.push('\n');
        let _ = write.write_all(line.as_bytes()).await;
    };
    let (peer, ask) = match peer_and_ask(&mut reader, &cred, &pool, &proc_root).await {
        Ok(asked) => asked,
        Err(refusal) => return send(&mut write, &Answer::Refused(refusal)).await,
    };
    // Beyond any wait, the loop answers within a minute.
    let limit = ANSWER_TIMEOUT + Duration::from_secs(ask.wait.unwrap_or(0));
    let (reply, mut answers) = mpsc::channel(4);
    if tx.try_send(Asked { peer, ask, reply }).is_err() {
        let busy = Refusal::Failed {
            why: "too many asks at once; try again".into(),
        };
        return send(&mut write, &Answer::Refused(busy)).await;
    }
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let mut byte = [0u8; 1];
        let answer = tokio::select! {
            a = answers.recv() => a,
            // The client sends nothing more: a read ends only when it is gone.
            _ = reader.read(&mut byte) => {
                info!(pid = cred.pid(), "run socket: a client went away before its answer");
                return;
            }
            () = tokio::time::sleep_until(deadline) => None,
        };
        let answer = answer.unwrap_or_else(|| {
            Answer::Refused(Refusal::Failed {
                why: "no answer from the daemon's loop".into(),
            })
        });
        send(&mut write, &answer).await;
        if !matches!(answer, Answer::Queued(_)) {
            return;
        }
    }
}

/// The peer as the kernel says, and what it asks.
async fn peer_and_ask(
    reader: &mut BufReader<tokio::io::Take<tokio::net::unix::OwnedReadHalf>>,
    cred: &tokio::net::unix::UCred,
    pool: &IoPool,
    proc_root: &Path,
) -> Result<(Peer, Ask), Refusal> {
    let failed = |why: String| Refusal::Failed { why };
    let pid = cred
        .pid()
        .and_then(|p| u32::try_from(p).ok())
        .ok_or_else(|| failed("the peer's pid is unknown".into()))?;
    let mut line = String::new();
    match tokio::time::timeout(ASK_TIMEOUT, reader.read_line(&mut line)).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => return Err(failed(format!("cannot read the ask: {e}"))),
        Err(_) => return Err(failed("no ask within 5 s".into())),
    }
    let ask: Ask = serde_json::from_str(&line).map_err(|e| Refusal::Bad {
        why: format!("not an ask: {e}"),
    })?;
    let status = proc_root.join(pid.to_string()).join("status");
    let text = pool
        .read(&status)
        .await
        .map_err(|e| failed(format!("cannot read the peer's groups: {}", chain(&e))))?;
    let start = start_of(pool, proc_root, pid)
        .await
        .ok_or_else(|| failed("the asking process is gone".into()))?;
    // Whether it runs in a Slurm job (a process has this file; one that
    // cannot be read is in none this daemon can name).
    let slurm_job = pool
        .read(&proc_root.join(pid.to_string()).join("cgroup"))
        .await
        .ok()
        .and_then(|text| crate::slurm::job_of(&text));
    let mut groups = vec![cred.gid()];
    groups.extend(
        text.lines()
            .find_map(|l| l.strip_prefix("Groups:"))
            .unwrap_or("")
            .split_whitespace()
            .filter_map(|g| g.parse::<u32>().ok()),
    );
    Ok((
        Peer {
            uid: cred.uid(),
            pid,
            start,
            groups,
            slurm_job,
        },
        ask,
    ))
}
