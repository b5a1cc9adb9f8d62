//! pinctld: the event loop that turns cgroup events into exclusive CPUs.
//!
//! One loop, one `select!`: inotify changes, the reconcile tick, the systemd
//! watchdog tick and signals. Each turn feeds what it read into the
//! [`Engine`], asks for a plan, performs the writes in the plan's order through
//! the I/O threads, reads effective sets back, and saves the state when
//! assignments changed.
//!
//! Every read and write of cgroupfs and sysfs goes through [`IoPool`]: the loop
//! itself never waits on a kernel file, so a hung cgroup degrades only the
//! workloads behind it. A failure in one cgroup is logged with its path and
//! errno, kept as that cgroup's status and retried by the next plan; it never
//! stops the daemon. Only start-up errors are fatal.

use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use tokio::signal::unix::{SignalKind, signal};
use tracing::{debug, info, warn};

use crate::api;
use crate::cgroup::{self, Hierarchy, Rel, Version};
use crate::config::{self, Config, LogLevel};
use crate::cpuset::CpuSet;
use crate::engine::{Engine, Failure, File, Reading, SavedState, Settings};
use crate::intent::{self, Bundle};
use crate::io::{IoConfig, IoError, IoPool, RealFs};
use crate::server;
use crate::state::{Loaded, StateFile, StateLock};
use crate::sysfs::Sysfs;
use crate::topology::Topology;
use crate::watch::{Change, Watcher};
use crate::watchdog::{self, Decision, Health, Mount, Repairs, Stuck};

/// Cgroups read by one job on an I/O thread during a scan.
const SCAN_BATCH: usize = 128;
/// Scan batches in flight at once: enough to keep every I/O thread busy
/// while the event loop takes in the last batch's readings.
const SCAN_BATCHES: usize = 4;

/// A message for systemd.
enum Note {
    Status(String, bool),
    Watchdog,
    Stopping,
}

/// Sends sd-notify messages from a thread of its own: `sd_notify` sends on a
/// blocking socket, and a socket whose buffer is full must not freeze the event
/// loop. Messages that find the queue full are dropped; a wedged socket then
/// also stops the watchdog pings, which is the truth.
struct Notifier {
    tx: std::sync::mpsc::SyncSender<Note>,
}

impl Notifier {
    fn new() -> Self {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Note>(16);
        let spawned = std::thread::Builder::new()
            .name("pinctl-notify".into())
            .spawn(move || {
                for note in rx {
                    let _ = match &note {
                        Note::Status(s, ready) => {
                            let mut states = vec![sd_notify::NotifyState::Status(s)];
                            if *ready {
                                states.push(sd_notify::NotifyState::Ready);
                            }
                            sd_notify::notify(false, &states)
                        }
                        Note::Watchdog => {
                            sd_notify::notify(false, &[sd_notify::NotifyState::Watchdog])
                        }
                        Note::Stopping => {
                            sd_notify::notify(false, &[sd_notify::NotifyState::Stopping])
                        }
                    };
                }
            });
        if let Err(e) = spawned {
            warn!(error = %e, "cannot start the sd-notify thread; systemd will not hear from us");
        }
        Notifier { tx }
    }

    fn send(&self, note: Note) {
        let _ = self.tx.try_send(note);
    }
}

/// The running daemon.
pub struct Daemon {
    /// Held while the daemon lives: one daemon per state file.
    _lock: StateLock,
    /// Why the last save of the state file failed, while it does.
    state_error: Option<String>,
    /// Cgroups whose inotify watch could not be added (`max_user_watches`
    /// reached): while there are any, the daemon reconciles every
    /// [`api::UNWATCHED_RECONCILE_SECS`] seconds, and each reconcile tries
    /// to watch them again.
    unwatched: BTreeSet<Rel>,
    cfg: Arc<Config>,
    pool: IoPool,
    hier: Arc<Hierarchy>,
    engine: Engine,
    state: StateFile,
    watcher: Watcher,
    /// In v1 the CPU limits live in the cpu controller's own tree: a second
    /// watcher mirrors it so that a limit written after the cpuset directory
    /// appeared (runc's order) is seen at once.
    cpu_watcher: Option<Watcher>,
    /// Subtrees scanned and watched.
    roots: Vec<Rel>,
    ready: bool,
    last_status: String,
    notifier: Notifier,
    /// The watchdog's findings and memory.
    dog: Watch,
    /// `WATCHDOG=1` every this long, when systemd asked for it.
    ping_every: Option<Duration>,
    last_ping: Instant,
    /// Test hook (`PINCTL_TEST_WEDGE`): SIGUSR2 wedges the event loop.
    wedge_on_usr2: bool,
    /// What the status socket serves: the loop publishes, the server reads.
    socket: Socket,
    /// Cgroups a reload took out of the subtrees. The next reconcile gives
    /// back what the daemon pinned there (as for an opt-out), then they are
    /// forgotten; what they have then stays as it is.
    leaving: Vec<Rel>,
    /// The configuration file read again on SIGHUP ([`Self::reload_from`]).
    config_path: Option<PathBuf>,
    /// How the configuration was last read.
    loaded: Loads,
    /// Applies a reloaded `log_level` ([`Self::on_log_level`]).
    log_level_hook: Option<Box<dyn Fn(LogLevel)>>,
}

/// How the configuration was last read (for the status).
#[derive(Debug, Default)]
struct Loads {
    /// Seconds since the Unix epoch.
    at: u64,
    /// Keys the file changes that wait for a restart.
    restart_pending: Vec<String>,
    /// Why the last reload failed.
    error: Option<String>,
}

/// The loop's side of the status socket.
struct Socket {
    snapshot: tokio::sync::watch::Sender<Arc<server::Snapshot>>,
    events: Arc<server::Events>,
    metrics: Arc<server::Metrics>,
    /// Something changed since the last snapshot.
    dirty: bool,
    /// The topology in the API's form; `None` after the topology changed.
    topology: Option<crate::topology::TopologyFile>,
    started: u64,
    reconciles: u64,
    last_reconcile_ms: u64,
}

/// What the watchdog knows between its checks.
struct Watch {
    /// The mounted hierarchies, listed at start-up.
    mounts: Vec<Mount>,
    /// Every path that can be required (each driver's, present or not): a
    /// removal at or above one starts a check.
    may_require: Vec<String>,
    repairs: Repairs,
    dstate: Stuck<(u32, u32, u64)>,
    stuck_tasks: Vec<api::StuckTask>,
    frozen: Stuck<Rel>,
    frozen_cgroups: Vec<api::Frozen>,
    /// A round of checks is running ([`Daemon::start_checks`]).
    running: bool,
    /// Another round was asked for meanwhile (`true`: paths only).
    again: Option<bool>,
    /// Bumped by a reload: a round started before it checked what the old
    /// configuration required, and its findings are dropped.
    generation: u64,
    tx: tokio::sync::mpsc::Sender<(u64, Findings)>,
    rx: tokio::sync::mpsc::Receiver<(u64, Findings)>,
}

/// A timer that first fires one `period` from now and, when the loop was
/// busy, waits a whole period after the late tick.
fn every(period: Duration) -> tokio::time::Interval {
    let mut t = tokio::time::interval(period);
    t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    t.reset();
    t
}

/// The shortest `WATCHDOG=1` period: tokio's timers tick in whole
/// milliseconds (and a zero period panics), so systemd's watchdog cannot be
/// served below 2 ms.
const MIN_PING: Duration = Duration::from_millis(1);

/// How often to send `WATCHDOG=1` under systemd's `WATCHDOG_USEC`: at half the
/// period (sd_watchdog_enabled(3)), so one late ping is not fatal, but never
/// more often than [`MIN_PING`].
fn ping_period(watchdog_usec: u64) -> Duration {
    Duration::from_micros(watchdog_usec / 2).max(MIN_PING)
}

/// How stale the status socket's snapshot may be.
const PUBLISH_EVERY: Duration = Duration::from_millis(200);

/// Freezer files read per batch by a round of checks.
const FREEZER_CHUNK: usize = 512;

/// What the engine needs of the configuration `cfg`, with its reserved CPUs
/// resolved.
fn settings(cfg: &Config, reserved: CpuSet, mems_all: CpuSet, empty_inherits: bool) -> Settings {
    Settings {
        alloc: cfg.alloc_options(reserved.clone()),
        reserved,
        scope: cgroup::Scope::of(cfg),
        align_memory: cfg.align_memory,
        mems_all,
        empty_inherits,
    }
}

/// The subtrees scanned and watched: the managed ones, the directories of the
/// rules' patterns, and the shared cgroups.
fn roots(cfg: &Config) -> Vec<Rel> {
    let mut roots = cfg.watch_roots();
    roots.extend(cfg.shared_cgroups.iter().cloned());
    roots.sort();
    roots.dedup();
    roots.into_iter().map(Rel::from).collect()
}

/// Reads the CPU topology on an I/O thread.
async fn read_topology(pool: &IoPool, sysfs_root: &Path) -> Result<Topology> {
    let root = sysfs_root.to_path_buf();
    let topo = pool
        .run(sysfs_root, move |_fs| {
            Sysfs::new(&root)
                .topology()
                .map_err(|e| std::io::Error::other(format!("{:#}", anyhow::Error::from(e))))
        })
        .await?;
    Ok(topo)
}

impl Daemon {
    /// Start-up: detect the hierarchy, read the topology, load the state hint.
    /// Errors here are fatal.
    pub async fn start(cfg: Config) -> Result<Self> {
        let cfg = Arc::new(cfg);
        // First of all: a second daemon must change nothing, neither the
        // state file nor the cgroups, before it finds out it is the second.
        let state = StateFile::new(&cfg.state_file);
        let lock = state
            .lock()
            .context("cannot take the single-instance lock")?;
        let pool = IoPool::new(
            Arc::new(RealFs),
            IoConfig {
                timeout: cfg.read_timeout,
                ..IoConfig::default()
            },
        );
        let root = cfg.cgroup_root.clone();
        let mode = cfg.hierarchy;
        let hier = pool
            .run(&cfg.cgroup_root, move |fs| {
                Hierarchy::detect(fs, &root, mode)
                    .map_err(|e| std::io::Error::other(format!("{:#}", anyhow::Error::from(e))))
            })
            .await
            .context("cannot use the cgroup hierarchy")?;
        info!(
            version = ?hier.version,
            hybrid = hier.hybrid,
            cpuset = %hier.cpuset.display(),
            "cgroup hierarchy detected"
        );
        let topo = read_topology(&pool, &cfg.sysfs_root)
            .await
            .context("cannot read the CPU topology")?;
        let mems_all = pool
            .read(&hier.mems_file(""))
            .await
            .ok()
            .and_then(|t| t.parse::<CpuSet>().ok())
            .unwrap_or_default();
        let reserved = cfg.reserved_cpus.resolve(&topo);
        let settings = settings(&cfg, reserved, mems_all, hier.version == Version::V2);
        let saved = match state.load::<SavedState>() {
            Ok(Loaded::Fresh(s)) => {
                info!(path = %state.path().display(), assignments = s.assignments.len(), "state loaded as a hint");
                Some(s)
            }
            Ok(Loaded::Missing) => None,
            Ok(Loaded::Quarantined { reason, moved_to }) => {
                warn!(path = %state.path().display(), moved_to = %moved_to.display(), %reason,
                    "state file unusable; moved aside, rebuilding from the live cgroups");
                None
            }
            Err(e) => {
                warn!(error = %format!("{:#}", anyhow::Error::from(e)), "cannot read the state file; rebuilding from the live cgroups");
                None
            }
        };
        info!(
            cpus = %topo.online(),
            numa_nodes = topo.numa_nodes().len(),
            reserved = %settings.reserved,
            "topology read"
        );
        let engine = Engine::new(topo, settings, saved);
        let limit_files = match hier.version {
            Version::V2 => hier.limit_names().to_vec(),
            Version::V1 => Vec::new(),
        };
        let watcher = Watcher::new(&hier.cpuset, limit_files).context("cannot start inotify")?;
        let cpu_watcher = match (&hier.version, &hier.cpu) {
            (Version::V1, Some(cpu)) => Some(
                Watcher::new(cpu, hier.limit_names().to_vec()).context("cannot start inotify")?,
            ),
            _ => None,
        };
        let roots = roots(&cfg);
        let mounts = {
            let hier = hier.clone();
            pool.run(&cfg.cgroup_root, move |fs| watchdog::mounts(fs, &hier))
                .await
                .unwrap_or_else(|e| {
                    warn!(error = %chain(&e), "cannot list the cgroup hierarchies; the watchdog checks only the cpuset tree");
                    Vec::new()
                })
        };
        let socket = Socket {
            snapshot: tokio::sync::watch::Sender::new(Arc::new(server::Snapshot {
                status: empty_status(),
                facts: watchdog::Facts::default(),
            })),
            events: Arc::new(server::Events::default()),
            metrics: Arc::new(server::Metrics::new()),
            dirty: true,
            topology: None,
            started: api::unix_secs(),
            reconciles: 0,
            last_reconcile_ms: 0,
        };
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        let dog = Watch {
            mounts,
            may_require: watchdog::required(&cfg.managed, &cfg.required_paths, |_| true),
            repairs: Repairs::new(cfg.repair, cfg.repair_cooldown),
            dstate: Stuck::new(cfg.dstate_threshold),
            stuck_tasks: Vec::new(),
            frozen: Stuck::new(cfg.frozen_threshold),
            frozen_cgroups: Vec::new(),
            running: false,
            again: None,
            generation: 0,
            tx,
            rx,
        };
        Ok(Daemon {
            _lock: lock,
            state_error: None,
            unwatched: BTreeSet::new(),
            cfg,
            pool,
            hier: Arc::new(hier),
            engine,
            state,
            watcher,
            cpu_watcher,
            roots,
            ready: false,
            last_status: String::new(),
            notifier: Notifier::new(),
            dog,
            ping_every: None,
            last_ping: Instant::now(),
            wedge_on_usr2: false,
            socket,
            leaving: Vec::new(),
            config_path: None,
            loaded: Loads {
                at: api::unix_secs(),
                ..Loads::default()
            },
            log_level_hook: None,
        })
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// SIGHUP reads the configuration again from `path` and applies what
    /// changed ([`Config::reload`]); without it, SIGHUP only reconciles.
    pub fn reload_from(&mut self, path: PathBuf) {
        self.config_path = Some(path);
    }

    /// `hook` changes the log level when a reload changes `log_level`.
    pub fn on_log_level(&mut self, hook: impl Fn(LogLevel) + 'static) {
        self.log_level_hook = Some(Box::new(hook));
    }

    /// Test hook: SIGUSR2 makes the event loop block its thread for good, as a
    /// wedged loop would, so tests can see the `WATCHDOG=1` pings stop.
    pub fn wedge_on_sigusr2(&mut self, on: bool) {
        self.wedge_on_usr2 = on;
    }

    /// Runs until SIGTERM or SIGINT.
    pub async fn run(mut self) -> Result<()> {
        let started = Instant::now();
        // Before anything else: until a handler exists, SIGHUP and SIGTERM
        // would end the process (`systemctl start` then `reload` at once).
        // A signal that comes during start-up waits for the loop.
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        let mut hup = signal(SignalKind::hangup())?;
        let mut usr2 = signal(SignalKind::user_defined2())?;
        if self.hier.version == Version::V2 {
            self.enable_cpuset_controller().await;
        }
        let listener = server::bind(&self.cfg.socket).context("cannot set up the status socket")?;
        info!(socket = %self.cfg.socket.display(), "serving the status socket");
        let server = server::serve(
            listener,
            self.socket.snapshot.subscribe(),
            self.socket.events.clone(),
            self.socket.metrics.clone(),
            self.pool.clone(),
        );
        let mut usec = 0u64;
        self.ping_every = sd_notify::watchdog_enabled(false, &mut usec).then(|| {
            let every = ping_period(usec);
            if every > Duration::from_micros(usec / 2) {
                tracing::error!(
                    watchdog_usec = usec,
                    ping_ms = every.as_millis() as u64,
                    "WATCHDOG_USEC is shorter than the 2 ms the event loop can serve; pinging every 1 ms, raise WatchdogSec="
                );
            }
            every
        });
        // Required paths first: a repaired kubepods tree is then scanned too.
        let found = gather(self.check_input(true)).await;
        self.act(found).await;
        self.reconcile(false).await;
        self.engine.end_startup();
        self.ready = true;
        info!(
            elapsed_ms = started.elapsed().as_millis() as u64,
            "first reconcile done"
        );
        self.notify_status(true);
        self.publish();

        let mut tick = every(self.cfg.reconcile_interval);
        let mut ping = tokio::time::interval(self.ping_every.unwrap_or(Duration::from_secs(3600)));
        let mut dog = every(self.cfg.watchdog_interval);
        let mut blind = every(Duration::from_secs(api::UNWATCHED_RECONCILE_SECS));
        // The status socket's snapshot follows at most this late.
        let mut publish = tokio::time::interval(PUBLISH_EVERY);
        publish.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            self.beat();
            tokio::select! {
                changes = self.watcher.next() => match changes {
                    Ok(changes) => self.handle(changes).await,
                    Err(e) => {
                        warn!(error = %e, "inotify read failed; full reconcile");
                        self.reconcile(true).await;
                    }
                },
                changes = async {
                    match self.cpu_watcher.as_mut() {
                        Some(w) => w.next().await,
                        None => std::future::pending().await,
                    }
                } => match changes {
                    Ok(changes) => self.handle_cpu_tree(changes).await,
                    Err(e) => {
                        warn!(error = %e, "inotify read failed; full reconcile");
                        self.reconcile(true).await;
                    }
                },
                _ = tick.tick() => self.reconcile(true).await,
                _ = blind.tick(), if !self.unwatched.is_empty() => self.reconcile(false).await,
                _ = ping.tick(), if self.ping_every.is_some() => self.beat(),
                _ = publish.tick(), if self.socket.dirty => self.publish(),
                _ = dog.tick() => self.start_checks(false),
                Some((generation, found)) = self.dog.rx.recv() => {
                    self.dog.running = false;
                    if generation == self.dog.generation {
                        self.act(found).await;
                    }
                    if let Some(paths_only) = self.dog.again.take() {
                        self.start_checks(paths_only);
                    }
                }
                _ = usr2.recv(), if self.wedge_on_usr2 => {
                    warn!("test hook: SIGUSR2 wedges the event loop");
                    loop {
                        std::thread::sleep(Duration::from_secs(3600));
                    }
                }
                _ = hup.recv() => {
                    info!("SIGHUP: reloading the configuration, then a full reconcile");
                    let before = (self.cfg.reconcile_interval, self.cfg.watchdog_interval);
                    self.reload().await;
                    if before.0 != self.cfg.reconcile_interval {
                        tick = every(self.cfg.reconcile_interval);
                    }
                    if before.1 != self.cfg.watchdog_interval {
                        dog = every(self.cfg.watchdog_interval);
                    }
                    self.reconcile(true).await;
                }
                _ = term.recv() => break,
                _ = int.recv() => break,
            }
        }
        info!("stopping");
        self.notifier.send(Note::Stopping);
        server.abort();
        let _ = std::fs::remove_file(&self.cfg.socket);
        self.save_state().await;
        self.pool.shutdown();
        Ok(())
    }

    /// Reads the configuration file again and applies it. An invalid file
    /// changes nothing: the error (file, line, key) is logged and the running
    /// configuration stays. Keys only a restart can apply keep their running
    /// value, with a warning each. The caller reconciles afterwards.
    async fn reload(&mut self) {
        let Some(path) = self.config_path.clone() else {
            return;
        };
        let file = path.clone();
        let read = self
            .pool
            .run(&path, move |_fs| Ok(config::load(&file)))
            .await
            .map_err(|e| chain(&e))
            .and_then(|r| r.map_err(|e| e.to_string()));
        let new = match read {
            Ok(new) => new,
            Err(error) => {
                tracing::error!(path = %path.display(), %error,
                    "configuration not reloaded; the running one stays");
                self.count_reload("failed");
                self.loaded.error = Some(error);
                self.socket.dirty = true;
                return;
            }
        };
        let config::Reload {
            config: new,
            applied,
            deferred,
        } = self.cfg.reload(new);
        for key in &deferred {
            warn!(path = %path.display(), key, "changed in the configuration file; applied at the next restart");
        }
        self.count_reload("ok");
        self.loaded = Loads {
            at: api::unix_secs(),
            restart_pending: deferred.iter().map(|k| k.to_string()).collect(),
            error: None,
        };
        self.socket.dirty = true;
        if applied.is_empty() {
            info!(path = %path.display(), "configuration reloaded; nothing to apply");
            return;
        }
        info!(path = %path.display(), changed = %applied.join(", "), "configuration reloaded");
        let old = std::mem::replace(&mut self.cfg, Arc::new(new));
        let cfg = self.cfg.clone();
        if old.log_level != cfg.log_level
            && let Some(hook) = &self.log_level_hook
        {
            hook(cfg.log_level);
        }
        let current = self.engine.settings();
        // A count of reserved CPUs is chosen again only when it changed: the
        // topology may have changed since (hot-plug), and a reload of other
        // keys must not move workloads.
        let reserved = if applied.contains(&"reserved_cpus") {
            cfg.reserved_cpus.resolve(self.engine.topology())
        } else {
            current.reserved.clone()
        };
        let settings = settings(
            &cfg,
            reserved,
            current.mems_all.clone(),
            current.empty_inherits,
        );
        self.engine.set_settings(settings);
        // The subtrees: what leaves them is no longer the daemon's (its
        // cpusets stay as they are); what joins is found by the reconcile.
        let roots = roots(&cfg);
        if roots != self.roots {
            let was_within: Vec<Rel> = self
                .engine
                .known()
                .filter(|rel| self.within_roots(rel))
                .cloned()
                .collect();
            self.roots = roots;
            let leaving: Vec<Rel> = was_within
                .into_iter()
                .filter(|rel| !self.within_roots(rel))
                .collect();
            self.leaving.extend(leaving);
            if self.hier.version == Version::V2 {
                self.enable_cpuset_controller().await;
            }
        }
        self.dog.may_require = watchdog::required(&cfg.managed, &cfg.required_paths, |_| true);
        self.dog.repairs.configure(cfg.repair, cfg.repair_cooldown);
        self.dog.dstate.set_threshold(cfg.dstate_threshold);
        self.dog.frozen.set_threshold(cfg.frozen_threshold);
        // The required paths under the new configuration, now (a round
        // already running is dropped when it ends, and this one follows).
        self.dog.generation += 1;
        self.start_checks(true);
    }

    fn count_reload(&self, result: &str) {
        self.socket
            .metrics
            .config_reloads
            .get_or_create(&server::ResultLabel {
                result: result.into(),
            })
            .inc();
    }

    /// In v2 the cpuset files of a cgroup exist only if every ancestor enables
    /// the controller for its children: enable it from the root down to each
    /// managed subtree.
    async fn enable_cpuset_controller(&mut self) {
        let mut dirs: BTreeSet<String> = BTreeSet::new();
        for root in &self.roots {
            dirs.insert(String::new());
            let mut p = cgroup::parent(root);
            while let Some(anc) = p {
                dirs.insert(anc.to_string());
                p = cgroup::parent(anc);
            }
            dirs.insert(root.to_string());
        }
        for rel in dirs {
            let path = self.hier.subtree_control_file(&rel);
            let Ok(current) = self.pool.read(&path).await else {
                continue;
            };
            if current.split_whitespace().any(|c| c == "cpuset") {
                continue;
            }
            match self.pool.write(&path, "+cpuset").await {
                Ok(()) => info!(path = %path.display(), "enabled the cpuset controller"),
                Err(e) => {
                    warn!(path = %path.display(), error = %chain(&e), "cannot enable the cpuset controller")
                }
            }
        }
    }

    /// Reads the cgroups `seeds` and every cgroup below them not seen before,
    /// in batches of [`SCAN_BATCH`] on the I/O threads ([`IoPool::run_batch`]),
    /// [`SCAN_BATCHES`] in flight. Each directory is watched before its batch
    /// lists it, so a child made in between is seen by one or the other. A
    /// cgroup that is gone is forgotten; one that cannot be read keeps what
    /// was known of it.
    async fn scan(&mut self, seeds: Vec<Rel>) {
        let mut queued: HashSet<Rel> = seeds.iter().cloned().collect();
        let mut pending: VecDeque<Rel> = seeds.into();
        let mut set = tokio::task::JoinSet::new();
        loop {
            while set.len() < SCAN_BATCHES && !pending.is_empty() {
                let mut rels = Vec::with_capacity(SCAN_BATCH.min(pending.len()));
                let mut items = Vec::with_capacity(rels.capacity());
                while rels.len() < SCAN_BATCH
                    && let Some(rel) = pending.pop_front()
                {
                    match self.watcher.watch(&rel) {
                        Ok(()) => {
                            if self.unwatched.remove(&rel) && self.unwatched.is_empty() {
                                info!("every cgroup is watched again");
                            }
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                            self.forget(&rel);
                            continue;
                        }
                        Err(e) => {
                            // Said once per spell, not per cgroup: at the
                            // limit, every new cgroup fails the same way.
                            if self.unwatched.is_empty() {
                                warn!(path = %self.hier.dir(&rel).display(), error = %e,
                                    every_secs = api::UNWATCHED_RECONCILE_SECS,
                                    "cannot watch a cgroup (is fs.inotify.max_user_watches reached?); reconciling often until every cgroup is watched");
                            }
                            self.unwatched.insert(rel.clone());
                        }
                    }
                    if let Some(cw) = self.cpu_watcher.as_mut() {
                        // The cpu side may appear later; its parent's watch reports it.
                        let _ = cw.watch(&rel);
                    }
                    items.push((self.hier.dir(&rel), (rel.clone(), self.bundle_of(&rel))));
                    rels.push(rel);
                }
                let (pool, hier, cfg) = (self.pool.clone(), self.hier.clone(), self.cfg.clone());
                set.spawn(async move {
                    let results = pool
                        .run_batch("read", items, move |fs, _, (rel, bundle)| {
                            Ok(intent::read(fs, &hier, &cfg, rel, bundle.clone()))
                        })
                        .await;
                    (rels, results)
                });
            }
            let Some(joined) = set.join_next().await else {
                break;
            };
            self.beat();
            let (rels, results) = match joined {
                Ok(r) => r,
                Err(e) => {
                    warn!(error = %e, "cgroup read task failed");
                    continue;
                }
            };
            for (rel, result) in rels.into_iter().zip(results) {
                match result {
                    Ok(Some(r)) => {
                        for name in &r.obs.children {
                            let child = cgroup::child(&rel, name);
                            if queued.contains(child.as_str()) {
                                continue;
                            }
                            // Below a cgroup a reload took out of the
                            // subtrees: only the way down to one.
                            if !self.within_roots(&child) && self.roots_below(&child).is_empty() {
                                continue;
                            }
                            let child: Rel = match self.engine.rel(&child) {
                                Some(known) => known.clone(),
                                None => child.into(),
                            };
                            queued.insert(child.clone());
                            pending.push_back(child);
                        }
                        self.upsert(r);
                    }
                    Ok(None) => self.forget(&rel),
                    // Unreadable (hung, say): keep what we knew.
                    Err(e) => warn!(error = %chain(&e), "cannot read cgroup"),
                }
            }
        }
    }

    /// The bundle already read for cgroup `rel`, if any: it never changes.
    fn bundle_of(&self, rel: &str) -> Option<Arc<Bundle>> {
        self.engine.bundle(rel)
    }

    /// Forgets cgroup `rel` and everything below it (they are gone): the
    /// engine's entries and the watches of both trees.
    fn forget(&mut self, rel: &str) {
        if !self.unwatched.is_empty() {
            self.unwatched.retain(|r| !cgroup::is_within(r, rel));
        }
        self.engine.forget(rel);
        self.watcher.unwatch(rel);
        if let Some(cw) = self.cpu_watcher.as_mut() {
            cw.unwatch(rel);
        }
    }

    fn upsert(&mut self, mut r: Reading) {
        // A problem is logged when it appears or changes, not at every read:
        // a bad xattr would otherwise be logged again at every reconcile.
        if let Some(p) = &r.problem
            && self.engine.problem(&r.obs.rel) != Some(p.as_str())
        {
            warn!(cgroup = %r.obs.rel, problem = %p);
        }
        // Only a reload leaves a known cgroup outside the subtrees: whatever
        // its xattr or bundle asks, it is no longer the daemon's to pin.
        if !self.within_roots(&r.obs.rel) {
            r.intent = None;
        }
        self.engine.upsert(r);
    }

    /// A full reconcile: rescan every subtree, forget what vanished, re-read the
    /// topology (CPU hot-plug), plan and write.
    async fn reconcile(&mut self, reread_topology: bool) {
        let started = Instant::now();
        let online_file = self.cfg.sysfs_root.join("devices/system/cpu/online");
        // Hot-plug changes the online list: one small read instead of the
        // whole topology (hundreds of files per socket) when it did not.
        let unchanged = reread_topology
            && self
                .pool
                .read(&online_file)
                .await
                .ok()
                .and_then(|t| t.parse::<CpuSet>().ok())
                .is_some_and(|o| &o == self.engine.topology().online());
        if reread_topology && !unchanged {
            match read_topology(&self.pool, &self.cfg.sysfs_root).await {
                Ok(topo) if topo.cpus() != self.engine.topology().cpus() => {
                    info!(before = %self.engine.topology().online(), after = %topo.online(), "CPU topology changed; re-planning");
                    self.engine.set_topology(topo);
                    self.socket.topology = None;
                }
                Ok(_) => {}
                Err(e) => warn!(error = %format!("{e:#}"), "cannot re-read the topology"),
            }
        }
        // Every subtree root and every cgroup known: what is gone is forgotten,
        // what is new is found below them.
        let mut seeds: Vec<Rel> = self.roots.clone();
        seeds.extend(self.engine.known().cloned());
        let scan_started = Instant::now();
        self.scan(seeds).await;
        let scan_us = scan_started.elapsed().as_micros() as u64;
        self.engine.replan_all();
        self.watch_above_roots();
        self.apply().await;
        self.forget_leaving();
        release_free_memory();
        let took = started.elapsed();
        self.socket.reconciles += 1;
        self.socket.last_reconcile_ms = took.as_millis() as u64;
        self.socket
            .metrics
            .reconcile_seconds
            .observe(took.as_secs_f64());
        self.publish();
        debug!(
            elapsed_us = took.as_micros() as u64,
            scan_us,
            cgroups = self.engine.len(),
            "reconcile done"
        );
    }

    /// Forgets the cgroups a reload took out of the subtrees, once what the
    /// daemon pinned there is given back (until then, a failed write is
    /// retried by the next reconcile).
    fn forget_leaving(&mut self) {
        for rel in std::mem::take(&mut self.leaving) {
            if !self.engine.knows(&rel) || self.within_roots(&rel) {
                continue;
            }
            let holding = self.engine.holds_ours(&rel);
            if holding {
                self.leaving.push(rel);
            } else if self.roots_below(&rel).is_empty() {
                self.forget(&rel);
            } else {
                // Above a subtree still scanned: only itself.
                self.engine.forget_one(&rel);
                self.watcher.unwatch_one(&rel);
                if let Some(cw) = self.cpu_watcher.as_mut() {
                    cw.unwatch_one(&rel);
                }
            }
        }
    }

    /// Watches the existing ancestors of every subtree root, so that a root
    /// created after start-up (the daemon starting before the kubelet) is seen
    /// at once. Their own events are ignored ([`Self::within_roots`]).
    fn watch_above_roots(&mut self) {
        for root in &self.roots {
            let mut ancestors: Vec<Rel> = Vec::new();
            let mut p = cgroup::parent(root);
            while let Some(anc) = p {
                ancestors.push(anc.into());
                p = cgroup::parent(anc);
            }
            for anc in ancestors.iter().rev() {
                if self.watcher.watch(anc).is_err() {
                    break;
                }
            }
        }
    }

    /// Whether `rel` is a subtree root or below one.
    /// Whether the watchdog holds what happens in cgroup `rel` (tasks in D
    /// state, a freeze) against the node's health: the managed subtrees and
    /// the exclusive workloads, which the operator asked to be watched. Not
    /// the shared cgroups: in `user.slice` anyone can put a task of their own
    /// in D state (a `vfork` parent) or freeze a cgroup delegated to them.
    fn watched(&self, rel: &str) -> bool {
        self.cfg.managed.iter().any(|m| cgroup::is_within(rel, m)) || self.engine.is_exclusive(rel)
    }

    fn within_roots(&self, rel: &str) -> bool {
        self.roots.iter().any(|r| cgroup::is_within(rel, r))
    }

    /// The subtree roots at or below `rel` (a created directory above a root
    /// may bring the root with it).
    fn roots_below(&self, rel: &str) -> Vec<Rel> {
        self.roots
            .iter()
            .filter(|r| cgroup::is_within(r, rel))
            .cloned()
            .collect()
    }

    /// Changes in the v1 cpu controller's tree: mirror its directories and
    /// re-read a cgroup whose limit changed.
    async fn handle_cpu_tree(&mut self, changes: Vec<Change>) {
        let mut reread = Vec::new();
        for change in changes {
            match change {
                Change::Created(rel) if self.within_roots(&rel) => {
                    if let Some(cw) = self.cpu_watcher.as_mut() {
                        let _ = cw.watch(&rel);
                    }
                    reread.push(Change::Changed(rel));
                }
                Change::Removed(rel) => {
                    self.note_removed(&rel);
                    if let Some(cw) = self.cpu_watcher.as_mut() {
                        cw.unwatch(&rel);
                    }
                }
                Change::Changed(rel) => reread.push(Change::Changed(rel)),
                Change::Overflow => reread.push(Change::Overflow),
                _ => {}
            }
        }
        if !reread.is_empty() {
            self.handle(reread).await;
        }
    }

    /// Acts on a batch of inotify changes, then plans once.
    async fn handle(&mut self, changes: Vec<Change>) {
        let arrived = Instant::now();
        let mut created = false;
        let mut overflow = false;
        // Whether the batch changed what the engine knows; the echo of our own
        // writes does not, and then there is nothing to plan.
        let mut changed = false;
        for change in changes {
            match change {
                Change::Created(rel) => {
                    created = true;
                    let tops = if self.within_roots(&rel) {
                        vec![rel]
                    } else {
                        self.roots_below(&rel)
                    };
                    self.scan(tops).await;
                    self.watch_above_roots();
                    changed = true;
                }
                Change::Removed(rel) => {
                    changed |= self.engine.knows(&rel);
                    self.note_removed(&rel);
                    self.forget(&rel);
                }
                Change::CpusWritten(rel) => {
                    if !self.engine.knows(&rel) {
                        continue;
                    }
                    // An unreadable file (hung, say) tells nothing: keep what
                    // is known rather than plan a rewrite.
                    let Ok(text) = self.pool.read(&self.hier.cpus_file(&rel)).await else {
                        continue;
                    };
                    let cpus: Option<CpuSet> = text.parse().ok();
                    changed |= self.engine.observe_cpus(&rel, cpus);
                }
                Change::Changed(rel) => {
                    if !self.within_roots(&rel) || !self.engine.knows(&rel) {
                        continue;
                    }
                    let bundle = self.bundle_of(&rel);
                    let (rel, r) = read_cgroup(
                        self.pool.clone(),
                        self.hier.clone(),
                        self.cfg.clone(),
                        bundle,
                        rel,
                    )
                    .await;
                    changed = true;
                    match r {
                        Ok(Some(r)) => self.upsert(r),
                        Ok(None) => self.forget(&rel),
                        Err(e) => warn!(error = %chain(&e), "cannot read cgroup"),
                    }
                }
                Change::Overflow => overflow = true,
            }
        }
        if overflow {
            warn!("inotify queue overflowed; full reconcile");
            self.reconcile(false).await;
        } else if changed {
            let writes = self.socket.metrics.writes.get();
            self.apply().await;
            if created && self.socket.metrics.writes.get() > writes {
                self.socket
                    .metrics
                    .event_to_pin_seconds
                    .observe(arrived.elapsed().as_secs_f64());
            }
        }
    }

    /// Plans and performs the writes, in order; reads effective sets back.
    async fn apply(&mut self) {
        // A plan that gave new workloads their CPUs first is followed at once
        // by the rest of the change (the shared pool).
        while self.apply_once().await {}
    }

    async fn apply_once(&mut self) -> bool {
        let plan = self.engine.plan();
        let mut written: BTreeSet<Rel> = BTreeSet::new();
        for w in &plan.writes {
            self.beat();
            let path = match w.file {
                File::Cpus => self.hier.cpus_file(&w.rel),
                File::Mems => self.hier.mems_file(&w.rel),
            };
            let data = w.set.to_string();
            let result = self.pool.write(&path, &data).await;
            if !matches!(&result, Err(e) if e.is_not_found()) {
                self.record_write(w, result.as_ref().err());
            }
            match result {
                Ok(()) => {
                    debug!(path = %path.display(), data = %data, "written");
                    if w.file == File::Cpus {
                        written.insert(w.rel.clone());
                    }
                    self.engine.written(w, Ok(()));
                }
                Err(e) => {
                    if e.is_not_found() {
                        // Removed under us: the delete event follows.
                        continue;
                    }
                    warn!(path = %path.display(), data = %data, errno = e.raw_os_error(), error = %chain(&e), "cgroup write failed; will retry");
                    self.engine.written(
                        w,
                        Err(Failure {
                            message: chain(&e),
                            errno: e.raw_os_error(),
                        }),
                    );
                }
            }
        }
        for rel in written {
            if let Ok(text) = self.pool.read(&self.hier.effective_file(&rel)).await
                && let Ok(eff) = text.parse::<CpuSet>()
            {
                self.engine.verified(&rel, eff);
            }
        }
        // A save that failed is tried again with each plan.
        if plan.assignments_changed || self.state_error.is_some() {
            for w in self.engine.workloads().values() {
                match (&w.cpus, &w.pending) {
                    (Some(cpus), _) => {
                        info!(workload = %w.key, cpus = %cpus, source = %w.source, "exclusive CPUs")
                    }
                    (None, Some(p)) => {
                        info!(workload = %w.key, requested = p.requested, available = p.available, "pending: {}", p.reason)
                    }
                    _ => {}
                }
            }
            self.save_state().await;
        }
        self.notify_status(false);
        self.socket.dirty = true;
        plan.more
    }

    /// Tells systemd "alive" when a ping is due. Called from the event loop
    /// and from inside long steps (a scan, a run of writes) as they progress,
    /// never from anywhere else: a wedged loop stops the pings.
    fn beat(&mut self) {
        if let Some(every) = self.ping_every
            && self.last_ping.elapsed() >= every
        {
            self.notifier.send(Note::Watchdog);
            self.last_ping = Instant::now();
        }
    }

    /// A cgroup directory `rel` was removed: if a required path was at or
    /// below it, the watchdog checks the paths before the next event.
    fn note_removed(&mut self, rel: &str) {
        if self
            .dog
            .may_require
            .iter()
            .any(|r| cgroup::is_within(r, rel))
        {
            self.start_checks(true);
        }
    }

    /// Starts a round of the watchdog's checks (required paths and, unless
    /// `paths_only`, stuck tasks and frozen cgroups). Its reads run in a task
    /// of their own, so events keep being handled meanwhile; the findings come
    /// back to the event loop ([`Self::act`]). One round at a time: a request
    /// while one runs is remembered and started after it.
    fn start_checks(&mut self, paths_only: bool) {
        if self.dog.running {
            self.dog.again = Some(self.dog.again.unwrap_or(true) && paths_only);
            return;
        }
        self.dog.running = true;
        let input = self.check_input(paths_only);
        let tx = self.dog.tx.clone();
        let generation = self.dog.generation;
        tokio::spawn(async move {
            let _ = tx.send((generation, gather(input).await)).await;
        });
    }

    /// What a round of checks needs to know, copied off the daemon.
    fn check_input(&self, paths_only: bool) -> CheckInput {
        let has_freezer = self.hier.version == Version::V2
            || self
                .dog
                .mounts
                .iter()
                .any(|m| m.kind == watchdog::MountKind::V1Freezer);
        // Workloads are the cgroups without children: those a runtime freezes.
        let freezer = (!paths_only && has_freezer).then(|| {
            self.engine
                .known()
                .filter(|rel| !self.engine.is_structural(rel) && self.watched(rel))
                .cloned()
                .collect()
        });
        CheckInput {
            pool: self.pool.clone(),
            mounts: self.dog.mounts.clone(),
            managed: self.cfg.managed.clone(),
            required_paths: self.cfg.required_paths.clone(),
            proc_root: (!paths_only).then(|| self.cfg.proc_root.clone()),
            hier: self.hier.clone(),
            freezer,
        }
    }

    /// Acts on a round's findings: repairs missing paths (or reports them),
    /// reports tasks and cgroups stuck past their thresholds, thaws with
    /// `thaw_frozen`; then the status.
    async fn act(&mut self, found: Findings) {
        self.act_on_paths(found.missing).await;
        if let Some(sleepers) = found.sleepers {
            self.act_on_sleepers(sleepers);
        }
        if let Some(frozen) = found.frozen {
            self.act_on_frozen(frozen).await;
        }
        // A round over every workload allocates about as much as a reconcile.
        release_free_memory();
        self.notify_status(false);
        self.socket.dirty = true;
    }

    async fn act_on_paths(&mut self, missing_now: Vec<(PathBuf, Option<String>)>) {
        let now = Instant::now();
        let mut missing = Vec::new();
        for (path, unreadable) in missing_now {
            if let Some(e) = unreadable {
                missing.push(api::MissingPath {
                    path,
                    problem: format!("cannot check: {e}"),
                });
                continue;
            }
            let Some(mount) = self
                .dog
                .mounts
                .iter()
                .find(|m| path.starts_with(&m.dir))
                .cloned()
            else {
                continue;
            };
            let rel = path
                .strip_prefix(&mount.dir)
                .unwrap_or(&path)
                .to_string_lossy()
                .into_owned();
            match self.dog.repairs.decide(&path, now) {
                Decision::Leave(why) => {
                    // Once per path, not at every check.
                    if !self.dog.repairs.missing.iter().any(|m| m.path == path) {
                        warn!(path = %path.display(), "required cgroup path missing: {why}");
                    }
                    missing.push(api::MissingPath { path, problem: why });
                }
                Decision::Repair => {
                    let result = self
                        .pool
                        .run_op("repair", &path, move |fs| {
                            watchdog::repair(fs, &mount, &rel)
                        })
                        .await;
                    self.dog.repairs.attempted(&path, now, result.is_ok());
                    match result {
                        Ok(repaired) => {
                            warn!(path = %path.display(), created = ?repaired.created, repairs = self.dog.repairs.count, "required cgroup path was missing; repaired");
                            self.socket.metrics.repairs.inc();
                            self.socket.events.push(api::EventKind::Repair {
                                path,
                                created: repaired.created,
                            });
                        }
                        Err(e) => {
                            let why = format!("repair failed: {}", chain(&e));
                            warn!(path = %path.display(), "required cgroup path missing: {why}");
                            missing.push(api::MissingPath { path, problem: why });
                        }
                    }
                }
            }
        }
        self.dog.repairs.missing = missing;
    }

    /// Tasks of the managed cgroups in D state longer than `dstate_threshold`.
    fn act_on_sleepers(&mut self, sleepers: Vec<watchdog::Sleeper>) {
        let mut seen = Vec::new();
        let mut info = BTreeMap::new();
        for watchdog::Sleeper {
            stat,
            cgroup,
            wchan,
            uid,
        } in sleepers
        {
            let Some(cgroup) = cgroup else { continue };
            if !self.watched(&cgroup) {
                continue;
            }
            let key = (stat.pid, stat.tid, stat.start);
            seen.push(key);
            info.insert(key, (stat.comm, cgroup, wchan, uid));
        }
        let mut stuck = Vec::new();
        for (key, long) in self.dog.dstate.update(Instant::now(), seen) {
            let Some((comm, cgroup, wchan, uid)) = info.remove(&key) else {
                continue;
            };
            stuck.push(api::StuckTask {
                pid: key.0,
                tid: key.1,
                comm,
                cgroup,
                wchan,
                uid,
                secs: long.as_secs(),
            });
        }
        for t in &stuck {
            if !self
                .dog
                .stuck_tasks
                .iter()
                .any(|o| (o.pid, o.tid) == (t.pid, t.tid))
            {
                warn!(pid = t.pid, tid = t.tid, uid = ?t.uid, comm = %t.comm, cgroup = %t.cgroup, wchan = ?t.wchan, secs = t.secs, "task stuck in uninterruptible sleep (D state)");
            }
        }
        self.dog.stuck_tasks = stuck;
    }

    /// Cgroups frozen longer than `frozen_threshold`; thawed with `thaw_frozen`.
    async fn act_on_frozen(&mut self, frozen: Vec<(Rel, Option<u32>)>) {
        let mut out = Vec::new();
        let owners: BTreeMap<Rel, Option<u32>> = frozen.iter().cloned().collect();
        let frozen: Vec<Rel> = frozen.into_iter().map(|(rel, _)| rel).collect();
        for (rel, long) in self.dog.frozen.update(Instant::now(), frozen) {
            let owner = owners.get(&rel).copied().flatten();
            let mut thawed = false;
            if self.cfg.thaw_frozen {
                let path = self.hier.freezer_file(&rel);
                match self.pool.write(&path, self.hier.thaw_value()).await {
                    Ok(()) => {
                        warn!(cgroup = %rel, secs = long.as_secs(), "cgroup was frozen too long; thawed");
                        thawed = true;
                    }
                    Err(e) => {
                        warn!(cgroup = %rel, error = %chain(&e), "cannot thaw a cgroup frozen too long")
                    }
                }
            } else if !self.dog.frozen_cgroups.iter().any(|f| *f.cgroup == *rel) {
                warn!(cgroup = %rel, owner = ?owner, secs = long.as_secs(), "cgroup frozen longer than frozen_threshold");
            }
            out.push(api::Frozen {
                cgroup: rel.to_string(),
                owner,
                secs: long.as_secs(),
                thawed,
            });
        }
        self.dog.frozen_cgroups = out;
    }

    /// The daemon's health, judged on what it knows now.
    pub fn health(&self) -> Health {
        watchdog::assess(&self.facts())
    }

    /// The facts health is judged on.
    fn facts(&self) -> watchdog::Facts {
        let stats = self.pool.stats();
        watchdog::Facts {
            io_threads: stats.threads,
            hung_paths: self.pool.hung().len(),
            dstate_tasks: self.dog.stuck_tasks.len(),
            frozen_cgroups: self.dog.frozen_cgroups.iter().filter(|f| !f.thawed).count(),
            failing_cgroups: self.engine.failing_count(),
            missing_paths: self.dog.repairs.missing.len(),
            unwatched_cgroups: self.unwatched.len(),
            state_unsaved: self.state_error.is_some(),
        }
    }

    /// Adds a write to the audit trail and the counters, with its reason.
    fn record_write(&mut self, w: &crate::engine::Write, error: Option<&IoError>) {
        let metrics = &self.socket.metrics;
        metrics.writes.inc();
        if error.is_some() {
            metrics.write_errors.inc();
        }
        let why = self.engine.explain(w);
        self.socket.events.push(api::EventKind::Write {
            cgroup: w.rel.to_string(),
            file: match w.file {
                File::Cpus => "cpuset.cpus",
                File::Mems => "cpuset.mems",
            }
            .to_string(),
            old: why.old,
            new: (*w.set).clone(),
            reason: why.reason,
            error: error.map(|e| chain(e)),
            workload: why.workload,
        });
    }

    /// Publishes a new snapshot for the status socket.
    fn publish(&mut self) {
        let facts = self.facts();
        let status = self.status(&facts);
        self.socket.metrics.set_from(&status);
        self.socket
            .snapshot
            .send_replace(Arc::new(server::Snapshot { status, facts }));
        self.socket.dirty = false;
    }

    /// The status document, its health judged on `facts`.
    pub fn status(&mut self, facts: &watchdog::Facts) -> api::Status {
        let topo = self.engine.topology();
        let topology = self
            .socket
            .topology
            .get_or_insert_with(|| topo.to_file())
            .clone();
        let workloads = self.engine.status_workloads();
        let failing = self.engine.failing();
        let health = watchdog::assess(facts);
        let metrics = &self.socket.metrics;
        api::Status {
            schema: api::SCHEMA,
            daemon: api::Daemon {
                version: env!("CARGO_PKG_VERSION").to_string(),
                pid: std::process::id(),
                started: self.socket.started,
                ready: self.ready,
                summary: self.summary(&health),
            },
            health: server::health_doc(&health),
            hierarchy: match self.hier.version {
                Version::V1 => "v1",
                Version::V2 => "v2",
            }
            .to_string(),
            hybrid: self.hier.hybrid,
            topology,
            online: topo.online().clone(),
            reserved: self.engine.reserved().clone(),
            shared_pool: self.engine.shared_pool(),
            workloads,
            failing,
            watchdog: api::Watchdog {
                hung_paths: Vec::new(),
                stuck_tasks: self.dog.stuck_tasks.clone(),
                frozen: self.dog.frozen_cgroups.clone(),
                missing_paths: self.dog.repairs.missing.clone(),
                repairs: self.dog.repairs.count,
                unwatched_cgroups: self.unwatched.len() as u64,
                state_error: self.state_error.clone(),
            },
            counters: api::Counters {
                reconciles: self.socket.reconciles,
                last_reconcile_ms: self.socket.last_reconcile_ms,
                writes: metrics.writes.get(),
                write_errors: metrics.write_errors.get(),
                repairs: self.dog.repairs.count,
                cgroups: self.engine.len() as u64,
            },
            config: api::RunningConfig {
                file: self.config_path.clone(),
                loaded: self.loaded.at,
                restart_pending: self.loaded.restart_pending.clone(),
                reload_error: self.loaded.error.clone(),
                ..api::RunningConfig::of(&self.cfg)
            },
        }
    }

    /// Saves the state file. A failure (a read-only or full disk) degrades
    /// health until a save works again: the next plan's apply tries again.
    async fn save_state(&mut self) {
        let body = self.engine.saved_state();
        let state = StateFile::new(self.state.path());
        let result = tokio::task::spawn_blocking(move || state.save(&body)).await;
        let error = match result {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(format!("{:#}", anyhow::Error::from(e))),
            Err(e) => Some(format!("the save task failed: {e}")),
        };
        match (&self.state_error, &error) {
            (None, Some(e)) => {
                warn!(error = %e, "cannot save the state file; trying again at each change")
            }
            (Some(_), None) => info!(path = %self.state.path().display(), "state file saved again"),
            _ => {}
        }
        if error.is_some() {
            self.socket.metrics.state_save_failures.inc();
        }
        if error != self.state_error {
            self.socket.dirty = true;
        }
        self.state_error = error;
    }

    /// One line for systemd's `STATUS=` and the log.
    pub fn summary(&self, health: &Health) -> String {
        let workloads = self.engine.workloads();
        let pinned: Vec<_> = workloads.values().filter(|w| w.cpus.is_some()).collect();
        let exclusive: usize = pinned
            .iter()
            .filter_map(|w| w.cpus.as_ref())
            .map(|c| c.len())
            .sum();
        let pending = workloads.values().filter(|w| w.pending.is_some()).count();
        let mut s = format!(
            "{} exclusive workloads on {} CPUs, {} pending, shared pool {} CPUs",
            pinned.len(),
            exclusive,
            pending,
            self.engine.shared_pool().len()
        );
        if health.state != watchdog::HealthState::Healthy {
            s.push_str(&format!("; {health}"));
        }
        if self.dog.repairs.count > 0 {
            s.push_str(&format!("; {} repairs", self.dog.repairs.count));
        }
        s
    }

    fn notify_status(&mut self, ready: bool) {
        let status = self.summary(&self.health());
        if status == self.last_status && !ready {
            return;
        }
        self.notifier.send(Note::Status(status.clone(), ready));
        info!(status = %status, ready = self.ready);
        self.last_status = status;
    }
}

/// The status before the first snapshot (never served: the first one is
/// published before the socket is read).
fn empty_status() -> api::Status {
    api::Status {
        schema: api::SCHEMA,
        daemon: api::Daemon {
            version: env!("CARGO_PKG_VERSION").to_string(),
            pid: std::process::id(),
            started: 0,
            ready: false,
            summary: "starting".into(),
        },
        health: api::Health {
            state: "healthy".into(),
            reasons: Vec::new(),
        },
        hierarchy: String::new(),
        hybrid: false,
        topology: crate::topology::TopologyFile {
            cpus: Vec::new(),
            isolated: None,
            offline: None,
        },
        online: CpuSet::new(),
        reserved: CpuSet::new(),
        shared_pool: CpuSet::new(),
        workloads: Vec::new(),
        failing: Vec::new(),
        watchdog: api::Watchdog::default(),
        counters: api::Counters::default(),
        config: api::RunningConfig::default(),
    }
}

/// What a round of the watchdog's checks reads with.
struct CheckInput {
    pool: IoPool,
    mounts: Vec<Mount>,
    managed: Vec<String>,
    required_paths: Vec<String>,
    /// `None`: no stuck-task check this round.
    proc_root: Option<PathBuf>,
    hier: Arc<Hierarchy>,
    /// The workloads whose freezer to read; `None`: no frozen check this round.
    freezer: Option<Vec<Rel>>,
}

/// What a round of the watchdog's checks found.
struct Findings {
    /// Required paths missing, or (with the error) that could not be checked.
    missing: Vec<(PathBuf, Option<String>)>,
    /// Tasks in D state, if the round looked.
    sleepers: Option<Vec<watchdog::Sleeper>>,
    /// Frozen cgroups, if the round looked.
    frozen: Option<Vec<(Rel, Option<u32>)>>,
}

/// The reads of one round of checks, every one a timed I/O call of its own
/// (batched): a `/proc` file of a stuck task can hang as well.
async fn gather(input: CheckInput) -> Findings {
    let CheckInput {
        pool,
        mounts,
        managed,
        required_paths,
        proc_root,
        hier,
        freezer,
    } = input;
    let version = hier.version;
    // Which managed kubepods roots exist anywhere: that tells the driver.
    let probes: Vec<(PathBuf, String)> = mounts
        .iter()
        .flat_map(|m| managed.iter().map(|root| (m.dir.join(root), root.clone())))
        .collect();
    let items = probes.iter().map(|(p, _)| (p.clone(), ())).collect();
    let present = pool
        .run_batch("stat", items, |fs, path, _| fs.exists(path))
        .await;
    let present: Vec<&String> = probes
        .iter()
        .zip(&present)
        .filter(|(_, r)| matches!(r, Ok(true)))
        .map(|((_, root), _)| root)
        .collect();
    let required = watchdog::required(&managed, &required_paths, |r| {
        present.iter().any(|p| p.as_str() == r)
    });
    let wanted: Vec<PathBuf> = mounts
        .iter()
        .flat_map(|m| required.iter().map(|rel| m.dir.join(rel)))
        .collect();
    let items = wanted.iter().map(|p| (p.clone(), ())).collect();
    let exists = pool
        .run_batch("stat", items, |fs, path, _| fs.exists(path))
        .await;
    let missing = wanted
        .into_iter()
        .zip(exists)
        .filter_map(|(path, r)| match r {
            Ok(true) => None,
            Ok(false) => Some((path, None)),
            Err(e) => Some((path, Some(chain(&e)))),
        })
        .collect();

    let sleepers = match proc_root {
        None => None,
        Some(proc_root) => {
            let root = proc_root.clone();
            match pool
                .run_op("list", &proc_root, move |fs| watchdog::list_pids(fs, &root))
                .await
            {
                Ok(pids) => {
                    let items: Vec<(PathBuf, u32)> = pids
                        .into_iter()
                        .map(|pid| (proc_root.join(pid.to_string()), pid))
                        .collect();
                    let root = proc_root.clone();
                    let read = pool
                        .run_batch("read", items, move |fs, _, pid| {
                            watchdog::read_dstate(fs, &root, *pid, version)
                        })
                        .await;
                    Some(read.into_iter().flatten().flatten().collect())
                }
                Err(e) => {
                    warn!(error = %chain(&e), "cannot list processes");
                    None
                }
            }
        }
    };

    // In chunks: the paths of every workload's freezer at once would be the
    // daemon's biggest allocation.
    let frozen = match freezer {
        None => None,
        Some(rels) => {
            let mut frozen = Vec::new();
            for chunk in rels.chunks(FREEZER_CHUNK) {
                let items = chunk
                    .iter()
                    .map(|rel| (hier.freezer_file(rel), ()))
                    .collect();
                // A frozen one with its owner: whose it is, for the report.
                let read = pool
                    .run_batch("read", items, |fs, path, _| match fs.read(path) {
                        Ok(t) if watchdog::is_frozen(&t) => {
                            let dir = path.parent().unwrap_or(path);
                            Ok(Some(fs.owner(dir).ok().map(|o| o.uid)))
                        }
                        Ok(_) => Ok(None),
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                        Err(e) => Err(e),
                    })
                    .await;
                frozen.extend(chunk.iter().zip(read).filter_map(|(rel, r)| match r {
                    Ok(Some(owner)) => Some((rel.clone(), owner)),
                    _ => None,
                }));
            }
            Some(frozen)
        }
    };
    Findings {
        missing,
        sleepers,
        frozen,
    }
}

/// An error and its causes, `: `-separated (what anyhow's `{:#}` prints):
/// the `IoError`s keep the errno and the file in their source.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}

/// Gives the memory freed after a full reconcile (or a round of watchdog
/// checks) back to the system. A reconcile of tens of thousands of cgroups
/// allocates about as much again as the daemon keeps (readings, sets of
/// paths, the plan); glibc keeps freed memory in its heap, so without this
/// the daemon's resident size would stay at that peak.
fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free heap pages to the kernel; it has
    // no preconditions and is thread-safe.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Reads one cgroup in a job on an I/O thread; see [`intent::read`].
async fn read_cgroup(
    pool: IoPool,
    hier: Arc<Hierarchy>,
    cfg: Arc<Config>,
    bundle: Option<Arc<Bundle>>,
    rel: Rel,
) -> (Rel, Result<Option<Reading>, IoError>) {
    let dir: PathBuf = hier.dir(&rel);
    let r = rel.clone();
    let result = pool
        .run(&dir, move |fs| {
            Ok(intent::read(fs, &hier, &cfg, &r, bundle))
        })
        .await;
    (rel, result)
}

#[cfg(test)]
mod ping_period_tests {
    use super::*;

    #[test]
    fn a_watchdog_period_too_short_to_serve_pings_every_millisecond_not_zero() {
        assert_eq!(ping_period(200_000), Duration::from_millis(100));
        assert_eq!(ping_period(2_000), MIN_PING);
        for usec in [0, 1, 2, 1_999] {
            assert_eq!(ping_period(usec), MIN_PING, "WATCHDOG_USEC={usec}");
        }
        assert_eq!(
            ping_period(u64::MAX),
            Duration::from_micros(u64::MAX / 2),
            "no overflow"
        );
    }
}
