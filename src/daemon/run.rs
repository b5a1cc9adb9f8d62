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

use tokio::net::UnixListener;
use tokio::sync::mpsc;
use tracing::{info, warn};

use super::Daemon;
use crate::cgroup::{self, Rel, XATTR_CPUS};
use crate::io::{IoPool, chain};
use crate::run::{self, Answer, Ask, Grant, Peer, Policy, Refusal};
use crate::systemd::Bus;
use crate::watch::Change;

mod scope;
mod socket;

/// Who asked for a run, and for what ([`Held`] as JSON), on its cgroup.
const XATTR_RUN: &str = "user.pinctl.run";

/// Asks queued for the event loop; beyond, an ask is refused at once.
const QUEUE: usize = 64;

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
        let task = tokio::spawn(socket::accept(listener, tx, pool, proc_root));
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
