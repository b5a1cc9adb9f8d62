//! The front door of `pinctl run` (issue #33): the run socket, where a
//! command's client asks for exclusive CPUs for itself.
//!
//! - A task per connection reads the peer (`SO_PEERCRED`, its groups from
//!   `/proc/<pid>/status` through the I/O threads) and one JSON line of
//!   [`run::Ask`], then hands it to the loop ([`super::Event::Run`]).
//! - The loop decides ([`run::Policy`]), makes `<slice>/run-<name>.scope`
//!   ([`run::unit`]) with the xattr `user.pinctl.cpus`, reads it as any new
//!   cgroup (so the one pipeline pins it), then moves the peer in and answers.
//! - Must never move a pid but the peer's.
//! - A run ends when its cgroup is empty: each watchdog round removes the
//!   empty ones (`remove_empty`), which releases their CPUs.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;
use tracing::{info, warn};

use super::Daemon;
use crate::cgroup::{self, Rel, Version, XATTR_CPUS};
use crate::io::{IoPool, chain};
use crate::run::{self, Answer, Ask, Grant, Peer, Policy, Refusal};
use crate::systemd::{Bus, SystemdError};
use crate::watch::Change;

/// Who asked for a run, and for what ([`Held`] as JSON), on its cgroup.
const XATTR_RUN: &str = "user.pinctl.run";

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
    /// The client's connection: [`Answer::Queued`] words, then the answer.
    /// Closed when the client went away.
    reply: mpsc::Sender<Answer>,
}

/// An ask waiting in line for CPUs (`pinctl run --wait`).
struct Waiting {
    asked: Asked,
    since: Instant,
    until: Instant,
}

/// A run the daemon set up: who asked, and for what. Kept on the run's
/// cgroup too ([`XATTR_RUN`]), for a restarted daemon.
#[derive(serde::Serialize, serde::Deserialize)]
struct Held {
    uid: u32,
    cpus: usize,
    #[serde(default)]
    command: Vec<String>,
}

impl Held {
    /// The xattr's value: the command cut to fit in a few KiB.
    fn to_xattr(&self) -> String {
        let mut kept = Held {
            command: Vec::new(),
            ..*self
        };
        let mut len = 0;
        for word in &self.command {
            len += word.len() + 1;
            if len > 2048 {
                break;
            }
            kept.command.push(word.clone());
        }
        serde_json::to_string(&kept).unwrap_or_default()
    }
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
    /// systemd's bus, where runs get a transient scope (`None`: no bus
    /// configured; the daemon makes their cgroups itself).
    bus: Option<Bus>,
    /// Asks waiting for CPUs, served in the order they came.
    waiting: VecDeque<Waiting>,
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
            bus: None,
            waiting: VecDeque::new(),
        }
    }

    /// Opens the run socket at `path` (mode 0666: the daemon decides who
    /// may ask) with `policy`, reading peers' groups under `proc_root`;
    /// runs get a transient scope from systemd on `bus`, if any.
    pub(super) fn open(
        path: &Path,
        policy: Policy,
        pool: IoPool,
        proc_root: PathBuf,
        bus: Option<Bus>,
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
            bus,
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

    /// Whether asks wait in line.
    pub(super) fn has_waiting(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// Whether runs hold CPUs: their cgroups are looked at every
    /// [`RUN_END_CHECK`].
    pub(super) fn holds_runs(&self) -> bool {
        !self.held.is_empty()
    }

    /// When the first ask in line stops waiting.
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.waiting.iter().map(|w| w.until).min()
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

/// How often the cgroups of held runs are read for their end. A run the
/// daemon made itself (no systemd) leaves an empty cgroup behind, which
/// inotify does not tell of on v1: its CPUs, and its count against its
/// user, come back within this (one small read per run).
pub(super) const RUN_END_CHECK: Duration = Duration::from_millis(500);

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
        allow_slurm_jobs: cfg.allow_slurm_jobs,
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

/// Whether `engine` has room for `ask` now: its count, on its NUMA nodes,
/// in whole cores if it says so ([`crate::engine::Engine::room_for`]).
fn room(engine: &crate::engine::Engine, ask: &Ask) -> Result<(), (usize, Vec<(String, usize)>)> {
    engine.room_for(ask.cpus, &ask.numa, ask.full_cores)
}

/// The workload key of the run cgroup `rel`: `run:<name>`.
fn run_key_of(rel: &str) -> String {
    rel.rsplit('/')
        .next()
        .and_then(run::name_of_unit)
        .map_or_else(|| rel.to_string(), |n| format!("run:{n}"))
}

/// Whether the `cgroup.procs` file `procs` lists process `pid`.
async fn holds(pool: &IoPool, procs: &Path, pid: u32) -> bool {
    let pid = pid.to_string();
    pool.read(procs)
        .await
        .is_ok_and(|t| t.lines().any(|l| l.trim() == pid))
}

/// When process `pid` started, if it runs.
async fn start_of(pool: &IoPool, proc_root: &Path, pid: u32) -> Option<u64> {
    let stat = proc_root.join(pid.to_string()).join("stat");
    let text = pool.read(&stat).await.ok()?;
    crate::task::parse_stat(pid, &text).map(|s| s.start)
}

impl Daemon {
    /// An ask from the run socket: decided, set up, answered; or, with
    /// `--wait` and not enough CPUs free, put in line.
    pub(super) async fn run_asked(&mut self, mut asked: Asked) {
        if let Err(refusal) = self.near_nodes(&mut asked.ask).await {
            self.answer(asked, Err(refusal));
            return;
        }
        let ahead = self.door.waiting.len();
        let result = if ahead == 0 {
            self.grant(&asked.peer, &asked.ask).await
        } else {
            // Asks are served in the order they came: this one is behind.
            let held = self.door.held_by(asked.peer.uid);
            self.door
                .policy
                .admit(&asked.peer, &asked.ask, held)
                .and_then(|()| Err(self.not_enough(&asked.ask, 0, ahead)))
        };
        match (result, asked.ask.wait) {
            (Err(Refusal::NotEnough { free, .. }), Some(secs)) if secs > 0 => {
                let now = Instant::now();
                let until = now
                    .checked_add(Duration::from_secs(secs))
                    .unwrap_or(now + Duration::from_secs(365 * 86_400));
                info!(
                    uid = asked.peer.uid,
                    pid = asked.peer.pid,
                    cpus = asked.ask.cpus,
                    ahead,
                    "run waits for CPUs"
                );
                let _ = asked
                    .reply
                    .try_send(Answer::Queued(run::Queued { ahead, free }));
                self.door.waiting.push_back(Waiting {
                    asked,
                    since: now,
                    until,
                });
            }
            (result, _) => self.answer(asked, result),
        }
    }

    /// Serves the line: asks whose client went away or whose wait ended
    /// leave it; then the first ones get their CPUs while there is room.
    pub(super) async fn serve_waiting(&mut self) {
        let now = Instant::now();
        let mut line = std::mem::take(&mut self.door.waiting);
        line.retain(|w| !w.asked.reply.is_closed());
        let (done, kept): (Vec<_>, Vec<_>) = line.into_iter().partition(|w| w.until <= now);
        for w in done {
            let waited = now.duration_since(w.since).as_secs().max(1);
            let refusal = self.not_enough(&w.asked.ask, waited, 0);
            self.answer(w.asked, Err(refusal));
        }
        self.door.waiting = kept.into();
        while let Some(first) = self.door.waiting.front() {
            if room(&self.engine, &first.asked.ask).is_err() {
                break;
            }
            let Some(w) = self.door.waiting.pop_front() else {
                break;
            };
            match self.grant(&w.asked.peer, &w.asked.ask).await {
                Err(Refusal::NotEnough { .. }) => {
                    self.door.waiting.push_front(w);
                    break;
                }
                result => self.answer(w.asked, result),
            }
        }
    }

    /// Where the devices an ask names (`--near`) sit. Each must be placed,
    /// or the ask is refused saying why. With `require` (its own, else the
    /// configuration's) and no `--numa-node`, their nodes become the ask's
    /// NUMA nodes, which it takes its CPUs from alone (or waits for); with
    /// `prefer` the run's cgroup names them (`user.pinctl.near`) and the
    /// allocator takes them first.
    async fn near_nodes(&self, ask: &mut Ask) -> Result<(), Refusal> {
        let bad = |why: String| Refusal::Bad { why };
        let near = crate::devices::parse_list(&ask.near.join(","))
            .map_err(|e| bad(format!("--near: {e}")))?;
        let alignment = match &ask.device_alignment {
            Some(a) => a
                .parse::<crate::config::DeviceAlignment>()
                .map_err(|why| bad(format!("--device-alignment: {why}")))?,
            None => self.cfg.device_alignment,
        };
        ask.near = near.iter().map(ToString::to_string).collect();
        if near.is_empty() || alignment == crate::config::DeviceAlignment::None {
            return Ok(());
        }
        let cfg = self.cfg.clone();
        let topo = self.engine.topology().clone();
        // sysfs can hang: an I/O job.
        let nodes = self
            .pool
            .run(&self.cfg.sysfs_root, move |fs| {
                Ok(crate::devices::nodes_named(
                    fs,
                    cfg.device_roots(),
                    &topo,
                    &near,
                ))
            })
            .await
            .map_err(|e| Refusal::Failed {
                why: format!("cannot look up --near's devices: {}", chain(&e)),
            })?
            .map_err(bad)?;
        if alignment == crate::config::DeviceAlignment::Require && ask.numa.is_empty() {
            ask.numa = nodes;
        }
        Ok(())
    }

    /// Sends an ask its answer, and says so in the log.
    fn answer(&self, asked: Asked, result: Result<Grant, Refusal>) {
        let Asked { peer, ask, reply } = asked;
        let answer = match result {
            Ok(grant) => {
                info!(run = %grant.key, uid = peer.uid, pid = peer.pid, cpus = %grant.cpus, command = ?ask.command, "run granted");
                Answer::Granted(grant)
            }
            Err(refusal) => {
                info!(uid = peer.uid, pid = peer.pid, cpus = ask.cpus, why = %refusal, "run refused");
                Answer::Refused(refusal)
            }
        };
        let _ = reply.try_send(answer);
    }

    /// Not enough CPUs for `ask`: how many are free (on its NUMA nodes) and
    /// who holds the rest.
    fn not_enough(&self, ask: &Ask, waited: u64, ahead: usize) -> Refusal {
        let (free, holders) = room(&self.engine, ask).err().unwrap_or_default();
        Refusal::NotEnough {
            asked: ask.cpus,
            free,
            holders,
            waited,
            ahead,
        }
    }

    async fn grant(&mut self, peer: &Peer, ask: &Ask) -> Result<Grant, Refusal> {
        let mut admitted = self
            .door
            .policy
            .admit(peer, ask, self.door.held_by(peer.uid));
        // The user's run that ended a moment ago (a script's steps back to
        // back) still counts until it is looked at: look first.
        if let Err(Refusal::OverUserCap { .. }) = admitted
            && self.remove_empty_held_runs().await
        {
            admitted = self
                .door
                .policy
                .admit(peer, ask, self.door.held_by(peer.uid));
        }
        admitted?;
        let tpc = self.engine.topology().threads_per_core();
        if ask.full_cores && !ask.cpus.is_multiple_of(tpc) {
            return Err(Refusal::Bad {
                why: format!(
                    "--full-cores: {} CPUs is not whole cores of {tpc} threads",
                    ask.cpus
                ),
            });
        }
        let nodes = self.engine.topology().numa_nodes();
        if let Some(n) = ask.numa.iter().find(|n| !nodes.contains_key(n)) {
            let have: crate::cpuset::CpuSet = nodes.keys().copied().collect();
            return Err(Refusal::Bad {
                why: format!("NUMA node {n}: this machine has nodes {have}"),
            });
        }
        // A run that ended since the last round of checks still holds its
        // CPUs (rounds remove the empty run cgroups): look first.
        if room(&self.engine, ask).is_err()
            && (!self.remove_empty_runs().await || room(&self.engine, ask).is_err())
        {
            return Err(self.not_enough(ask, 0, 0));
        }
        let name = match &ask.name {
            Some(n) => n.clone(),
            None => {
                self.door.next += 1;
                format!("{}-{}", peer.uid, self.door.next - 1)
            }
        };
        let slice = self.cfg.run.slice.clone();
        let unit = run::unit(&name);
        let rel = Rel::from(cgroup::child(&slice, &unit).as_str());
        let dir = self.hier.dir(&rel);
        // Through the I/O threads: a cgroupfs lookup can hang.
        let running = match self.pool.exists(&dir).await {
            Ok(there) => there || self.engine.knows(&rel),
            Err(e) => {
                return Err(Refusal::Failed {
                    why: format!("cannot look for the run's cgroup: {}", chain(&e)),
                });
            }
        };
        if running {
            return Err(Refusal::Bad {
                why: format!("a run named {name} is running"),
            });
        }
        // The peer's pidfd, opened before its start time is checked again:
        // it then names the peer, never a process that took its number.
        let pidfd = rustix::process::Pid::from_raw(peer.pid as i32).and_then(|p| {
            rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok()
        });
        if start_of(&self.pool, &self.cfg.proc_root, peer.pid).await != Some(peer.start) {
            return Err(Refusal::Failed {
                why: "the asking process is gone".into(),
            });
        }
        let by_systemd = self
            .start_scope(peer, ask, &slice, &unit, pidfd.as_ref())
            .await?;
        let setup = self.set_up(peer, ask, &rel, by_systemd).await;
        match setup {
            Ok(cpus) => {
                let held = Held {
                    uid: peer.uid,
                    cpus: ask.cpus,
                    command: ask.command.clone(),
                };
                self.run_event(&rel, &held, cpus.clone());
                self.door.held.insert(rel.clone(), held);
                let nodes = self.engine.topology().numa_of(&cpus).into_iter().collect();
                Ok(Grant {
                    key: format!("run:{name}"),
                    cgroup: rel.to_string(),
                    cpus,
                    nodes,
                    mem: ask.mem.unwrap_or(self.cfg.run.mem),
                })
            }
            Err(refusal) => {
                self.undo_run(&rel, by_systemd).await;
                Err(refusal)
            }
        }
    }

    /// Under systemd, starts the run's transient scope `unit` in `slice`
    /// around the peer. `Ok(true)`: systemd made the run's cgroup (v2; on v1
    /// its scope holds no cpuset, the daemon makes that). `Ok(false)`: no
    /// systemd (no bus, or nobody on it): the daemon makes the cgroup.
    async fn start_scope(
        &mut self,
        peer: &Peer,
        ask: &Ask,
        slice: &str,
        unit: &str,
        pidfd: Option<&std::os::fd::OwnedFd>,
    ) -> Result<bool, Refusal> {
        let Some(bus) = self.door.bus.as_mut() else {
            return Ok(false);
        };
        let slice_unit = slice.rsplit('/').next().unwrap_or(slice);
        let mut description = format!("pinctl run: {}", ask.command.join(" "));
        if description.len() > 200 {
            let mut end = 200;
            while !description.is_char_boundary(end) {
                end -= 1;
            }
            description.truncate(end);
        }
        // v2: the scope starts on the shared pool, as any new cgroup.
        let v2 = self.hier.version == Version::V2;
        let shared = v2.then(|| self.engine.shared_pool());
        match bus
            .start_scope(
                unit,
                slice_unit,
                peer.pid,
                pidfd.map(std::os::fd::AsFd::as_fd),
                shared.as_ref(),
                &description,
            )
            .await
        {
            Ok(()) => Ok(v2),
            Err(SystemdError::Connect { bus, source }) => {
                info!(bus = %bus.display(), error = %source, "no systemd on the bus: the run's cgroup is the daemon's own");
                Ok(false)
            }
            Err(e) => Err(Refusal::Failed {
                why: format!("systemd: {}", chain(&e)),
            }),
        }
    }

    /// The run's cgroup `rel` made (unless systemd made it), marked, pinned
    /// by the one pipeline, checked through the kernel, and the peer in it.
    async fn set_up(
        &mut self,
        peer: &Peer,
        ask: &Ask,
        rel: &Rel,
        by_systemd: bool,
    ) -> Result<crate::cpuset::CpuSet, Refusal> {
        let failed = |what: &str, e: crate::io::IoError| Refusal::Failed {
            why: format!("{what}: {}", chain(&e)),
        };
        let dir = self.hier.dir(rel);
        let slice = Rel::from(self.cfg.run.slice.as_str());
        if by_systemd {
            // systemd makes the scope's cgroup, then moves the process in.
            if !self.joined(&dir, peer.pid).await {
                return Err(Refusal::Failed {
                    why: format!("systemd did not move the asking process into {rel}"),
                });
            }
        } else {
            let slice_dir = self.hier.dir(&slice);
            if !matches!(self.pool.exists(&slice_dir).await, Ok(true)) {
                self.pool
                    .mkdir(&slice_dir)
                    .await
                    .map_err(|e| failed("cannot make the slice", e))?;
            }
        }
        // The slice's sets before the run's: v1 refuses a child a CPU or
        // memory node its parent lacks, and v2 enables the controller below
        // a managed root as it appears.
        if !self.engine.knows(&slice) {
            self.handle(vec![Change::Created(slice)]).await;
            self.drain().await;
        }
        if !by_systemd {
            self.pool
                .mkdir(&dir)
                .await
                .map_err(|e| failed("cannot make the run's cgroup", e))?;
        }
        // Whose it is first: a restarted daemon counts it against its user.
        let held = Held {
            uid: peer.uid,
            cpus: ask.cpus,
            command: ask.command.clone(),
        }
        .to_xattr();
        let mut count = ask.cpus.to_string();
        if !ask.numa.is_empty() {
            let nodes: crate::cpuset::CpuSet = ask.numa.iter().copied().collect();
            count = format!("{count}@{nodes}");
        }
        if ask.full_cores {
            count.push_str(crate::intent::FULL_CORES);
        }
        let mut marks = vec![(XATTR_RUN, held)];
        if !ask.near.is_empty() {
            marks.push((cgroup::XATTR_NEAR, ask.near.join(",")));
        }
        if let Some(a) = &ask.device_alignment {
            marks.push((cgroup::XATTR_DEVICE_ALIGNMENT, a.clone()));
        }
        marks.push((XATTR_CPUS, count));
        for (name, value) in marks {
            self.pool
                .set_xattr(&dir, name, value.as_bytes())
                .await
                .map_err(|e| failed("cannot mark the run's cgroup", e))?;
        }
        self.handle(vec![Change::Created(rel.clone())]).await;
        // Past the room check, a refusal is a failure, never a wait in line:
        // the run's cgroup exists already.
        let Some(cpus) = self.engine.cpus_of(rel).map(|(_, c)| c.clone()) else {
            return Err(Refusal::Failed {
                why: format!("{} CPUs were free, but none were given to {rel}", ask.cpus),
            });
        };
        // The nodes asked for are a preference to the allocator: the run
        // takes them alone, or nothing.
        if !ask.numa.is_empty() && !cpus.is_subset(&self.engine.numa_cpus(&ask.numa)) {
            return Err(Refusal::Failed {
                why: format!("the CPUs free for it ({cpus}) are not all on the NUMA nodes asked"),
            });
        }
        self.has_cpus(rel, &cpus).await?;
        if by_systemd {
            // systemd holds the pin too: a daemon-reload writes it, not "".
            let told = self.tell_scope(rel, &cpus).await;
            self.systemd
                .own(rel, &std::sync::Arc::new(cpus.clone()), told);
            if !holds(&self.pool, &dir.join(cgroup::file::PROCS), peer.pid).await {
                return Err(Refusal::Failed {
                    why: format!("the asking process is not in {rel}"),
                });
            }
        } else {
            // The pid is the peer's still (not reused by another process).
            if start_of(&self.pool, &self.cfg.proc_root, peer.pid).await != Some(peer.start) {
                return Err(Refusal::Failed {
                    why: "the asking process is gone".into(),
                });
            }
            let procs = dir.join(cgroup::file::PROCS);
            self.pool
                .write(&procs, &peer.pid.to_string())
                .await
                .map_err(|e| failed("cannot move the process into the run's cgroup", e))?;
        }
        Ok(cpus)
    }

    /// Tells systemd the run scope `rel`'s pin and memory nodes (what the
    /// kernel gives it) as its `AllowedCPUs=` and `AllowedMemoryNodes=`, so
    /// a daemon-reload writes those. Whether systemd took them.
    async fn tell_scope(&mut self, rel: &Rel, cpus: &crate::cpuset::CpuSet) -> bool {
        let mems_file = self.hier.dir(rel).join("cpuset.mems.effective");
        let mems = self.pool.read(&mems_file).await.ok();
        let mems = (mems.and_then(|t| t.trim().parse::<crate::cpuset::CpuSet>().ok()))
            .filter(|m| !m.is_empty());
        let (Some(bus), Some(unit)) = (self.door.bus.as_mut(), crate::systemd::scope_unit(rel))
        else {
            return false;
        };
        match bus.set_allowed(unit, cpus, mems.as_ref()).await {
            Ok(told) => told,
            Err(e) => {
                warn!(cgroup = %rel, error = %chain(&e), "cannot tell systemd a run's CPUs and memory nodes");
                false
            }
        }
    }

    /// Whether the cgroup `dir` (one systemd is making) holds process
    /// `pid` within the I/O timeout.
    async fn joined(&self, dir: &Path, pid: u32) -> bool {
        let deadline = tokio::time::Instant::now() + self.cfg.read_timeout;
        let procs = dir.join(cgroup::file::PROCS);
        loop {
            if holds(&self.pool, &procs, pid).await {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The kernel's word, not the engine's: the run's cgroup really has its
    /// CPUs (a write can fail; v2 falls back to the parent's set).
    async fn has_cpus(&self, rel: &Rel, cpus: &crate::cpuset::CpuSet) -> Result<(), Refusal> {
        let effective = self.hier.effective_file(rel);
        let has = match self.pool.read(&effective).await {
            // A v1 kernel before 4.17 enforces cpuset.cpus itself.
            Err(e) if e.is_not_found() && self.hier.version == Version::V1 => {
                self.pool.read(&self.hier.cpus_file(rel)).await
            }
            r => r,
        };
        let why = match has {
            Ok(t) if t.trim().parse::<crate::cpuset::CpuSet>().ok().as_ref() == Some(cpus) => {
                return Ok(());
            }
            Ok(t) => format!(
                "its cgroup {rel} has CPUs {:?} ({}), not its {cpus}",
                t.trim(),
                effective.display()
            ),
            Err(e) => format!("cannot check its cgroup's CPUs: {}", chain(&e)),
        };
        Err(Refusal::Failed { why })
    }

    /// Undoes a run that was not granted. The daemon's own cgroup is
    /// removed (empty: the peer was not moved); systemd's scope holds the
    /// peer, which ends on the refusal, and systemd then removes it: its
    /// ask is withdrawn now, so its CPUs go back at once.
    async fn undo_run(&mut self, rel: &Rel, by_systemd: bool) {
        if !by_systemd {
            self.remove_run(rel).await;
            return;
        }
        let dir = self.hier.dir(rel);
        if let Err(e) = self.pool.set_xattr(&dir, XATTR_CPUS, b"0").await {
            warn!(cgroup = %rel, error = %chain(&e), "cannot withdraw a refused run's ask");
        }
        self.handle(vec![Change::Changed(rel.clone())]).await;
    }

    /// Counts the run of cgroup `rel`, set up by a daemon before this one,
    /// against its user ([`XATTR_RUN`]).
    async fn adopt_run(&mut self, rel: Rel) {
        if self.engine.cpus_of(&rel).is_none() {
            return;
        }
        let value = self.pool.get_xattr(&self.hier.dir(&rel), XATTR_RUN).await;
        let Some(held) = value
            .ok()
            .flatten()
            .and_then(|v| serde_json::from_slice::<Held>(&v).ok())
        else {
            return;
        };
        self.door.held.insert(rel, held);
    }

    /// A run set up on `cpus`, or ended (empty), in `pinctl events`.
    fn run_event(&mut self, rel: &Rel, held: &Held, cpus: crate::cpuset::CpuSet) {
        self.socket.events.push(crate::api::EventKind::Run {
            key: run_key_of(rel),
            cgroup: rel.to_string(),
            uid: held.uid,
            cpus,
            command: held.command.clone(),
        });
    }

    /// Runs and asks in line, for the status.
    pub(super) fn run_status(&self) -> crate::api::Runs {
        let now = Instant::now();
        crate::api::Runs {
            running: (self.door.held.iter())
                .map(|(rel, h)| crate::api::Run {
                    key: run_key_of(rel),
                    cgroup: rel.to_string(),
                    uid: h.uid,
                    cpus: h.cpus,
                    command: h.command.clone(),
                })
                .collect(),
            waiting: (self.door.waiting.iter())
                .map(|w| crate::api::Waiter {
                    uid: w.asked.peer.uid,
                    cpus: w.asked.ask.cpus,
                    waited: now.duration_since(w.since).as_secs(),
                    command: w.asked.ask.command.clone(),
                })
                .collect(),
        }
    }

    /// Removes a run's cgroup (empty: its process never came, or ended),
    /// and gives its CPUs back.
    async fn remove_run(&mut self, rel: &str) {
        let dir = self.hier.dir(rel);
        if let Err(e) = self.pool.rmdir(&dir).await
            && !e.is_not_found()
        {
            warn!(cgroup = %rel, error = %chain(&e), "cannot remove a run's cgroup");
            return;
        }
        let rel = Rel::from(rel);
        if let Some(held) = self.door.held.remove(&rel) {
            self.run_event(&rel, &held, crate::cpuset::CpuSet::new());
        }
        self.handle(vec![Change::Removed(rel)]).await;
    }

    /// Removes the run cgroups that are empty: their runs ended. Runs set
    /// up by a daemon before this one are counted against their user.
    /// Whether any was removed.
    pub(super) async fn remove_empty_runs(&mut self) -> bool {
        if !self.cfg.run.enabled {
            return false;
        }
        let slice = self.cfg.run.slice.clone();
        let runs: Vec<Rel> = self
            .engine
            .known()
            .filter(|r| cgroup::parent(r) == Some(slice.as_str()))
            .cloned()
            .collect();
        self.remove_empty_of(runs).await
    }

    /// [`Self::remove_empty_runs`] over the runs held alone: what the
    /// loop does every [`RUN_END_CHECK`], without a walk of every cgroup
    /// known.
    pub(super) async fn remove_empty_held_runs(&mut self) -> bool {
        if !self.cfg.run.enabled {
            return false;
        }
        let runs: Vec<Rel> = self.door.held.keys().cloned().collect();
        self.remove_empty_of(runs).await
    }

    /// Forgets the held runs the engine no longer knows, then removes
    /// those of `runs` whose cgroup is empty and adopts the others not
    /// held yet. Whether any was removed.
    async fn remove_empty_of(&mut self, runs: Vec<Rel>) -> bool {
        let mut removed = false;
        let gone: Vec<Rel> = (self.door.held.keys())
            .filter(|r| !self.engine.knows(r))
            .cloned()
            .collect();
        for rel in gone {
            if let Some(held) = self.door.held.remove(&rel) {
                self.run_event(&rel, &held, crate::cpuset::CpuSet::new());
            }
        }
        for rel in runs {
            let ours = rel.rsplit('/').next().and_then(run::name_of_unit);
            if ours.is_none() || !self.engine.knows(&rel) {
                continue;
            }
            let procs = self.hier.dir(&rel).join(cgroup::file::PROCS);
            match self.pool.read(&procs).await {
                Ok(text) if text.trim().is_empty() => {
                    info!(cgroup = %rel, "run ended: its cgroup is empty");
                    self.remove_run(&rel).await;
                    removed = true;
                }
                _ if !self.door.held.contains_key(&rel) => self.adopt_run(rel).await,
                _ => {}
            }
        }
        removed
    }
}
