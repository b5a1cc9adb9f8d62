//! The front door of `pinctl run` (issue #33): the run socket, where a
//! command's client asks for exclusive CPUs for itself.
//!
//! A connection is read in a task of its own: the peer by `SO_PEERCRED`,
//! its groups from `/proc/<pid>/status` (through the I/O threads), one
//! JSON line of [`run::Ask`]. The ask goes to the event loop
//! ([`super::Event::Run`]), which decides ([`run::Policy`], the engine's
//! room), makes the run's cgroup `<slice>/<name>` with the xattr
//! `user.pinctl.cpus`, reads it as it reads any new cgroup (so it is
//! pinned by the one pipeline: plan, write, verify, state), then moves the
//! peer's own pid in and answers. The daemon moves no pid but the peer's.
//!
//! A run ends when its cgroup is empty: each round of the watchdog's
//! checks removes the empty run cgroups (`remove_empty`), which releases
//! their CPUs. A client gone before it was moved leaves its cgroup empty,
//! removed at once.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot};
use tracing::{info, warn};

use super::Daemon;
use crate::cgroup::{self, Rel, XATTR_CPUS};
use crate::io::{IoPool, chain};
use crate::run::{self, Answer, Ask, Grant, Peer, Policy, Refusal};
use crate::watch::Change;

/// How long a client may take to send its ask.
const ASK_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a client waits for the daemon's answer at most.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);
/// Asks queued for the event loop; beyond, an ask is refused at once.
const QUEUE: usize = 64;
/// Connections served at once; one beyond is closed as it comes, so that
/// nobody can take the daemon's descriptors with idle connections.
const MAX_CONNECTIONS: usize = 16;

/// One ask, on its way to the event loop.
pub(super) struct Asked {
    peer: Peer,
    ask: Ask,
    reply: oneshot::Sender<Answer>,
}

/// A run the daemon set up.
struct Held {
    uid: u32,
    cpus: usize,
}

/// The run socket's side of the daemon.
pub(super) struct Door {
    policy: Policy,
    pub(super) rx: Option<mpsc::Receiver<Asked>>,
    task: Option<tokio::task::JoinHandle<()>>,
    socket: Option<PathBuf>,
    /// The runs set up since start, by cgroup.
    held: BTreeMap<Rel, Held>,
    /// Runs named by the daemon: `<uid>-<n>`.
    next: u64,
}

impl Door {
    /// A closed door: `[run]` is off.
    pub(super) fn closed() -> Door {
        Door {
            policy: Policy::default(),
            rx: None,
            task: None,
            socket: None,
            held: BTreeMap::new(),
            next: 1,
        }
    }

    /// Opens the run socket at `path` (mode 0666: the daemon decides who
    /// may ask) with `policy`, reading peers' groups under `proc_root`.
    pub(super) fn open(
        path: &Path,
        policy: Policy,
        pool: IoPool,
        proc_root: PathBuf,
    ) -> std::io::Result<Door> {
        use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        // A socket a previous daemon left; anything else stays.
        if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
            std::fs::remove_file(path)?;
        }
        let listener = UnixListener::bind(path)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))?;
        let (tx, rx) = mpsc::channel(QUEUE);
        let task = tokio::spawn(accept(listener, tx, pool, proc_root));
        Ok(Door {
            policy,
            rx: Some(rx),
            task: Some(task),
            socket: Some(path.to_path_buf()),
            ..Door::closed()
        })
    }

    /// Stops serving and removes the socket.
    pub(super) fn close(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
        if let Some(path) = self.socket.take() {
            let _ = std::fs::remove_file(path);
        }
    }

    /// The CPUs the runs of `uid` hold.
    fn held_by(&self, uid: u32) -> usize {
        self.held
            .values()
            .filter(|h| h.uid == uid)
            .map(|h| h.cpus)
            .sum()
    }
}

/// The `[run]` policy of `cfg`, its names resolved to ids (a name the
/// system does not know is left out, with a warning).
pub(super) fn policy(cfg: &crate::config::Run) -> Policy {
    let users = cfg
        .users
        .iter()
        .filter_map(|n| match nix::unistd::User::from_name(n) {
            Ok(Some(u)) => Some((n.clone(), u.uid.as_raw())),
            _ => {
                warn!(user = %n, "[run] users names a user this system does not know");
                None
            }
        })
        .collect();
    let groups = cfg
        .groups
        .iter()
        .filter_map(|n| match nix::unistd::Group::from_name(n) {
            Ok(Some(g)) => Some((n.clone(), g.gid.as_raw())),
            _ => {
                warn!(group = %n, "[run] groups names a group this system does not know");
                None
            }
        })
        .collect();
    Policy {
        enabled: cfg.enabled,
        users,
        groups,
        max_cpus: cfg.max_cpus,
        max_cpus_per_user: cfg.max_cpus_per_user,
    }
}

/// Accepts connections for good, each in a task of its own.
async fn accept(listener: UnixListener, tx: mpsc::Sender<Asked>, pool: IoPool, proc_root: PathBuf) {
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

/// One client: its ask in, the answer out.
async fn serve(stream: UnixStream, tx: mpsc::Sender<Asked>, pool: IoPool, proc_root: PathBuf) {
    let cred = match stream.peer_cred() {
        Ok(c) => c,
        Err(e) => {
            warn!(error = %e, "run socket: no peer credentials");
            return;
        }
    };
    let (read, mut write) = stream.into_split();
    let answer = match peer_and_ask(read, &cred, &pool, &proc_root).await {
        Err(refusal) => Answer::Refused(refusal),
        Ok((peer, ask)) => {
            let (reply, answer) = oneshot::channel();
            match tx.try_send(Asked { peer, ask, reply }) {
                Err(_) => Answer::Refused(Refusal::Failed {
                    why: "too many asks at once; try again".into(),
                }),
                Ok(()) => match tokio::time::timeout(ANSWER_TIMEOUT, answer).await {
                    Ok(Ok(a)) => a,
                    _ => Answer::Refused(Refusal::Failed {
                        why: "no answer from the daemon's loop".into(),
                    }),
                },
            }
        }
    };
    let mut line = serde_json::to_string(&answer).unwrap_or_default();
    line.push('\n');
    let _ = write.write_all(line.as_bytes()).await;
}

/// The peer as the kernel says, and what it asks.
async fn peer_and_ask(
    read: tokio::net::unix::OwnedReadHalf,
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
    let mut reader = BufReader::new(read.take(run::MAX_LINE as u64));
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
        },
        ask,
    ))
}

/// When process `pid` started, if it runs.
async fn start_of(pool: &IoPool, proc_root: &Path, pid: u32) -> Option<u64> {
    let stat = proc_root.join(pid.to_string()).join("stat");
    let text = pool.read(&stat).await.ok()?;
    crate::procfs::parse_stat(pid, &text).map(|s| s.start)
}

impl Daemon {
    /// An ask from the run socket: decided, set up, answered.
    pub(super) async fn run_asked(&mut self, asked: Asked) {
        let Asked { peer, ask, reply } = asked;
        let answer = match self.grant(&peer, &ask).await {
            Ok(grant) => {
                info!(run = %grant.key, uid = peer.uid, pid = peer.pid, cpus = %grant.cpus, command = ?ask.command, "run granted");
                Answer::Granted(grant)
            }
            Err(refusal) => {
                info!(uid = peer.uid, pid = peer.pid, cpus = ask.cpus, why = %refusal, "run refused");
                Answer::Refused(refusal)
            }
        };
        let _ = reply.send(answer);
    }

    async fn grant(&mut self, peer: &Peer, ask: &Ask) -> Result<Grant, Refusal> {
        let held = self.door.held_by(peer.uid);
        self.door.policy.admit(peer, ask, held)?;
        self.engine
            .room_for(ask.cpus)
            .map_err(|(free, holders)| Refusal::NotEnough {
                asked: ask.cpus,
                free,
                holders,
            })?;
        let name = match &ask.name {
            Some(n) => n.clone(),
            None => {
                self.door.next += 1;
                format!("{}-{}", peer.uid, self.door.next - 1)
            }
        };
        let slice = self.cfg.run.slice.clone();
        let rel = cgroup::child(&slice, &name);
        let dir = self.hier.dir(&rel);
        if self.engine.knows(&rel) || std::fs::symlink_metadata(&dir).is_ok() {
            return Err(Refusal::Bad {
                why: format!("a run named {name} is running"),
            });
        }
        let failed = |what: &str, e: crate::io::IoError| Refusal::Failed {
            why: format!("{what}: {}", chain(&e)),
        };
        // The slice, once: the daemon then enables the controller below it.
        let slice_dir = self.hier.dir(&slice);
        if !matches!(self.pool.exists(&slice_dir).await, Ok(true)) {
            self.pool
                .mkdir(&slice_dir)
                .await
                .map_err(|e| failed("cannot make the slice", e))?;
            self.handle(vec![Change::Created(Rel::from(slice.as_str()))])
                .await;
            // Its sets now, not when the tree is quiet: v1 refuses a child
            // a CPU or memory node its parent lacks.
            self.drain().await;
        }
        self.pool
            .mkdir(&dir)
            .await
            .map_err(|e| failed("cannot make the run's cgroup", e))?;
        let count = ask.cpus.to_string();
        if let Err(e) = self
            .pool
            .set_xattr(&dir, XATTR_CPUS, count.as_bytes())
            .await
        {
            self.remove_run(&rel).await;
            return Err(failed("cannot mark the run's cgroup", e));
        }
        let rel = Rel::from(rel.as_str());
        self.handle(vec![Change::Created(rel.clone())]).await;
        let Some((key, cpus)) = self
            .engine
            .cpus_of(&rel)
            .map(|(k, c)| (k.to_string(), c.clone()))
        else {
            self.remove_run(&rel).await;
            let (free, holders) = self.engine.room_for(ask.cpus).err().unwrap_or_default();
            return Err(Refusal::NotEnough {
                asked: ask.cpus,
                free,
                holders,
            });
        };
        // The kernel's word, not the engine's: the run's cgroup really has
        // its CPUs (a write can fail; v2 falls back to the parent's set).
        let effective = self.hier.effective_file(&rel);
        let has = match self.pool.read(&effective).await {
            Ok(t) => Some(t),
            // A v1 kernel before 4.17 enforces cpuset.cpus itself.
            Err(e) if e.is_not_found() && self.hier.version == crate::cgroup::Version::V1 => {
                self.pool.read(&self.hier.cpus_file(&rel)).await.ok()
            }
            Err(_) => None,
        };
        if has
            .as_deref()
            .and_then(|t| t.parse::<crate::cpuset::CpuSet>().ok())
            .as_ref()
            != Some(&cpus)
        {
            self.remove_run(&rel).await;
            return Err(Refusal::Failed {
                why: format!(
                    "its cgroup {rel} has CPUs {:?} ({}), not its {cpus}",
                    has.unwrap_or_default().trim(),
                    effective.display()
                ),
            });
        }
        // The pid is the peer's still (not reused by another process).
        if start_of(&self.pool, &self.cfg.proc_root, peer.pid).await != Some(peer.start) {
            self.remove_run(&rel).await;
            return Err(Refusal::Failed {
                why: "the asking process is gone".into(),
            });
        }
        let procs = dir.join(cgroup::file::PROCS);
        if let Err(e) = self.pool.write(&procs, &peer.pid.to_string()).await {
            self.remove_run(&rel).await;
            return Err(failed("cannot move the process into the run's cgroup", e));
        }
        self.door.held.insert(
            rel.clone(),
            Held {
                uid: peer.uid,
                cpus: ask.cpus,
            },
        );
        Ok(Grant {
            key,
            cgroup: rel.to_string(),
            cpus,
        })
    }

    /// Removes a run's cgroup (empty: its process never came, or ended),
    /// and gives its CPUs back.
    async fn remove_run(&mut self, rel: &str) {
        let dir = self.hier.dir(rel);
        if let Err(e) = self.pool.rmdir(&dir).await {
            warn!(cgroup = %rel, error = %chain(&e), "cannot remove a run's cgroup");
            return;
        }
        self.door.held.remove(rel);
        self.handle(vec![Change::Removed(Rel::from(rel))]).await;
    }

    /// Removes the run cgroups that are empty: their runs ended.
    pub(super) async fn remove_empty_runs(&mut self) {
        if !self.cfg.run.enabled {
            return;
        }
        let slice = self.cfg.run.slice.clone();
        let runs: Vec<Rel> = self
            .engine
            .known()
            .filter(|r| cgroup::parent(r) == Some(slice.as_str()))
            .cloned()
            .collect();
        for rel in runs {
            let procs = self.hier.dir(&rel).join(cgroup::file::PROCS);
            match self.pool.read(&procs).await {
                Ok(text) if text.trim().is_empty() => {
                    info!(cgroup = %rel, "run ended: its cgroup is empty");
                    self.remove_run(&rel).await;
                }
                _ => {}
            }
        }
    }
}
