//! pinctld: the event loop that turns cgroup events into exclusive CPUs.
//!
//! - One loop in the rust-analyzer shape: `Event` names every trigger,
//!   `next_event` holds the one `select!`, `handle_event` acts on one, and a
//!   room per concern does the work (ARCHITECTURE.md, "Code map").
//! - The loop never waits on a kernel file: every read and write goes
//!   through the [`IoPool`], so a hung cgroup degrades only its workloads.
//! - A failure in one cgroup is logged with its path and errno, kept as its
//!   status and retried by the next plan. Only start-up errors are fatal.

mod apply;
mod checks;
mod configure;
mod housekeeping;
mod irq;
mod noise;
mod notify;
mod nri;
mod partition;
mod power;
mod quota;
mod report;
mod resize;
mod run;
mod slurm;
mod stall;
mod startup;
mod sweep;
mod sync;
mod systemd;
mod unsure;

pub use sweep::PARTS as RECONCILE_PARTS;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tracing::{info, warn};

use crate::api;
use crate::cgroup::{Hierarchy, Rel, Version};
use crate::config::{Config, LogLevel};
use crate::engine::Engine;
use crate::io::{IoPool, chain};
use crate::server;
use crate::state::{StateFile, StateLock};
use crate::watch::{Change, Watcher};
use apply::Rest;
use checks::{Findings, Watch};
use notify::{Note, Notifier};
use report::{Loads, Socket};
use unsure::Unsure;

/// The longest the rest of a plan, or a background reconcile's next batch,
/// waits behind a steady stream of events for a turn of the loop; then it
/// goes first, once.
const OVERDUE: Duration = Duration::from_millis(20);

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
    /// Cgroups read in part, read again soon.
    unsure: Unsure,
    cfg: Arc<Config>,
    pool: IoPool,
    hier: Arc<Hierarchy>,
    /// The model and its decisions; its settings hold the scope.
    engine: Engine,
    state: StateFile,
    watcher: Watcher,
    /// In v1 the CPU limits live in the cpu controller's own tree: a second
    /// watcher mirrors it so that a limit written after the cpuset directory
    /// appeared (runc's order) is seen at once.
    cpu_watcher: Option<Watcher>,
    ready: bool,
    last_status: String,
    notifier: Notifier,
    /// The watchdog's findings and memory.
    dog: Watch,
    /// `WATCHDOG=1` every this long, when systemd asked for it.
    ping_every: Option<Duration>,
    last_ping: Instant,
    /// When the last full reconcile that read every `cpuset.mems` began
    /// (`sync::MEMS_AGE`).
    all_mems_read: Option<Instant>,
    /// The part of the tree the next periodic reconcile reads
    /// ([`sweep::PARTS`]).
    next_part: u32,
    /// The loop's own stall report, while the loop runs ([`stall`]).
    stall: Option<stall::Stall>,
    /// Test hook (`PINCTL_TEST_WEDGE`): SIGUSR2 wedges the event loop.
    wedge_on_usr2: bool,
    /// What the status socket serves: the loop publishes, the server reads.
    socket: Socket,
    /// Cgroups a reload took out of the subtrees. The next reconcile gives
    /// back what the daemon pinned there (as for an opt-out), then they are
    /// forgotten; what they have then stays as it is.
    leaving: Vec<Rel>,
    /// What waits of the last plan: the quota pass and the shared pool
    /// ([`Event::Rest`]).
    rest: Rest,
    /// A plan changed assignments: the state file is saved when its urgent
    /// writes are made.
    save_due: bool,
    /// Each workload's place as last logged.
    logged: std::collections::BTreeMap<String, apply::Logged>,
    /// A save of the state file runs in the background ([`Event::Saved`]).
    saving: bool,
    /// The kernel refused a baseline xattr with `EOPNOTSUPP` (no user
    /// xattrs on cgroupfs before 5.7): none is written any more.
    baselines_unsupported: bool,
    /// Another save was asked for while one ran: it follows.
    save_again: bool,
    saved_tx: tokio::sync::mpsc::UnboundedSender<Option<String>>,
    saved_rx: tokio::sync::mpsc::UnboundedReceiver<Option<String>>,
    /// The CFS quotas lifted for exclusive workloads ([`quota::Quotas`]).
    quotas: quota::Quotas,
    /// A full reconcile under way in the background ([`Event::Swept`]).
    sweep: Option<sweep::Sweep>,
    /// The isolated partitions made for exclusive workloads
    /// ([`partition::Partitions`]).
    partitions: partition::Partitions,
    /// The interrupts kept off exclusive CPUs ([`irq::Irqs`]).
    irqs: irq::Irqs,
    /// The CPU power classes and the originals ([`power::Powers`]).
    powers: power::Powers,
    /// The kernel's movable work kept off exclusive CPUs
    /// ([`housekeeping::Housekeeping`]).
    housekeeping: housekeeping::Housekeeping,
    /// Which scopes systemd is told of ([`systemd::Teller`]).
    systemd: systemd::Teller,
    /// Its exchanges' outcomes ([`Event::Told`]).
    told_rx: tokio::sync::mpsc::UnboundedReceiver<systemd::Told>,
    /// The configuration file read again on SIGHUP ([`Self::reload_from`]).
    config_path: Option<PathBuf>,
    /// How the configuration was last read.
    loaded: Loads,
    /// Applies a reloaded `log_level` ([`Self::on_log_level`]).
    log_level_hook: Option<Box<dyn Fn(LogLevel)>>,
    /// The run socket of `pinctl run` ([`run::Door`]).
    door: run::Door,
    /// The runtime's calls as an NRI plugin ([`nri::Front`]).
    nri: nri::Front,
}

/// Everything the event loop acts on.
enum Event {
    /// Changes in the cpuset tree (the one tree of v2).
    Cgroups(std::io::Result<Vec<Change>>),
    /// Changes in the v1 cpu controller's tree (CPU limits).
    CpuTree(std::io::Result<Vec<Change>>),
    /// The periodic full reconcile (`reconcile_interval`).
    Reconcile,
    /// Some cgroups are unwatched: a reconcile finds what they missed.
    Unwatched,
    /// Some cgroups were read in part: read them again.
    Unsure,
    /// The rest of the last plan is due: the quota pass, its planning or
    /// its next writes.
    Rest,
    /// A batch of a background reconcile was read (`None`: none was in
    /// flight).
    Swept(Option<sweep::Batch>),
    /// A save of the state file ended, with its error if it failed.
    Saved(Option<String>),
    /// An exchange with systemd ended.
    Told(systemd::Told),
    /// A pass over the interrupts ended.
    Steered(irq::Passed),
    /// A pass over the power files ended.
    Powered(crate::power::sysfs::Pass),
    /// A pass over the kernel's movable work ended.
    Housekept(crate::housekeeping::kernel::Pass),
    /// systemd's watchdog wants to hear from us.
    Ping,
    /// The status socket's snapshot is stale.
    Publish,
    /// A round of the watchdog's checks is due (`watchdog_interval`).
    ChecksDue,
    /// A round of checks ended, with the generation it was started in.
    Checked(u64, Findings),
    /// SIGHUP: read the configuration again.
    Reload,
    /// SIGUSR2, with the test hook on.
    Wedge,
    /// SIGTERM or SIGINT.
    Stop,
    /// An ask from the run socket.
    Run(run::Asked),
    /// An ask's wait for CPUs ended (the line is served after every turn).
    WaitEnds,
    /// Runs are held: look whether any has ended ([`run::RUN_END_CHECK`]).
    RunsDue,
    /// Slurm's job cores are kept quiet: look at the jobs
    /// ([`slurm::JOB_CHECK`]).
    JobsDue,
    /// A call of the container runtime (`[nri]`).
    Nri(Box<crate::nri::Asked>),
    /// The link to the runtime changed.
    NriLink(crate::nri::Link),
    /// An announced container's time to make its cgroup ran out
    /// ([`nri::ANNOUNCED_FOR`]).
    AnnouncementsDue,
    /// The runtime answered an `UpdateContainers`.
    NriUpdated(nri::Updated),
}

impl Event {
    /// Its name in the log.
    fn name(&self) -> &'static str {
        match self {
            Event::Cgroups(_) => "cgroup changes",
            Event::CpuTree(_) => "cpu tree changes",
            Event::Reconcile => "periodic reconcile",
            Event::Unwatched => "reconcile for unwatched cgroups",
            Event::Unsure => "cgroups read in part, read again",
            Event::Swept(_) => "batch of a background reconcile",
            Event::Rest => "rest of a plan",
            Event::Saved(_) => "state saved",
            Event::Told(_) => "systemd told",
            Event::Steered(_) => "interrupts steered",
            Event::Housekept(_) => "housekeeping pass",
            Event::Powered(_) => "power files written",
            Event::Ping => "watchdog ping",
            Event::Publish => "status publish",
            Event::ChecksDue => "watchdog checks due",
            Event::Checked(..) => "watchdog checks ended",
            Event::Reload => "reload (SIGHUP)",
            Event::Wedge => "wedge (test hook)",
            Event::Stop => "stop",
            Event::Run(_) => "run asked",
            Event::WaitEnds => "a run's wait ended",
            Event::RunsDue => "runs looked at for their end",
            Event::JobsDue => "Slurm's jobs looked at",
            Event::Nri(asked) => match asked.call {
                crate::nri::Call::Create(_) => "NRI CreateContainer",
                _ => "NRI call",
            },
            Event::NriLink(_) => "NRI link changed",
            Event::AnnouncementsDue => "NRI announcements ran out",
            Event::NriUpdated(_) => "NRI containers updated",
        }
    }
}

/// The loop's timers, made in one place from the configuration.
struct Timers {
    reconcile: tokio::time::Interval,
    checks: tokio::time::Interval,
    unwatched: tokio::time::Interval,
    ping: tokio::time::Interval,
    publish: tokio::time::Interval,
    /// While runs are held ([`run::RUN_END_CHECK`]).
    runs: tokio::time::Interval,
    /// With `[slurm] housekeeping` ([`slurm::JOB_CHECK`]).
    jobs: tokio::time::Interval,
    /// The intervals they were made with.
    periods: (Duration, Duration),
}

impl Timers {
    fn new(cfg: &Config, ping_every: Option<Duration>) -> Self {
        // The status socket's snapshot follows at most this late.
        let mut publish = tokio::time::interval(report::PUBLISH_EVERY);
        publish.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Timers {
            reconcile: every(sweep::part_period(cfg.reconcile_interval)),
            checks: every(cfg.watchdog_interval),
            unwatched: every(Duration::from_secs(api::UNWATCHED_RECONCILE_SECS)),
            // Twice a ping period, as a beat sends once half a period has
            // passed: a quiet loop pings at most a period apart. (Ticking
            // once a period against a beat that waited a whole one, a tick
            // a hair early skipped, and the next ping came two periods
            // after the last: when systemd's watchdog kills.)
            ping: tokio::time::interval(ping_every.map_or(Duration::from_secs(3600), half_ping)),
            publish,
            runs: every(run::RUN_END_CHECK),
            jobs: every(slurm::JOB_CHECK),
            periods: (cfg.reconcile_interval, cfg.watchdog_interval),
        }
    }

    /// After a reload: the timers whose interval changed start afresh.
    fn follow(&mut self, cfg: &Config) {
        if self.periods.0 != cfg.reconcile_interval {
            self.reconcile = every(sweep::part_period(cfg.reconcile_interval));
        }
        if self.periods.1 != cfg.watchdog_interval {
            self.checks = every(cfg.watchdog_interval);
        }
        self.periods = (cfg.reconcile_interval, cfg.watchdog_interval);
    }
}

/// The signals the loop handles, installed before anything else: until a
/// handler exists, SIGHUP and SIGTERM would end the process (`systemctl
/// start` then `reload` at once). A signal that comes during start-up waits
/// for the loop.
struct Signals {
    term: Signal,
    int: Signal,
    hup: Signal,
    usr2: Signal,
}

impl Signals {
    fn install() -> std::io::Result<Self> {
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
            usr2: signal(SignalKind::user_defined2())?,
        })
    }
}

/// Half a ping period: a beat sends `WATCHDOG=1` once this has passed since
/// the last, and the ping timer ticks this often, so the pings of a loop
/// that turns are at most a ping period apart.
fn half_ping(every: Duration) -> Duration {
    (every / 2).max(Duration::from_millis(1))
}

/// A timer that first fires one `period` from now and, when the loop was
/// busy, waits a whole period after the late tick.
fn every(period: Duration) -> tokio::time::Interval {
    let mut t = tokio::time::interval(period);
    t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    t.reset();
    t
}

impl Daemon {
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

    /// Test hook for the soak's mutation check (`tests/soak`), debug builds
    /// only: every release also forgets another pinned workload
    /// ([`crate::engine::Engine::forget_at_release`]).
    #[cfg(debug_assertions)]
    pub fn forget_at_release(&mut self, on: bool) {
        if on {
            warn!(
                "test hook: PINCTL_TEST_FORGET_RELEASE=1: each release forgets another pinned workload"
            );
        }
        self.engine.forget_at_release(on);
    }

    /// Test hook: a write over a scope's pin is told to systemd once the pin
    /// is `settle` old, instead of 10 s (`daemon/systemd.rs`).
    pub fn systemd_settle(&mut self, settle: Duration) {
        self.systemd.settle = settle;
    }

    /// Runs until SIGTERM or SIGINT.
    pub async fn run(mut self) -> Result<()> {
        let started = Instant::now();
        let mut signals = Signals::install()?;
        if self.hier.version == Version::V2 {
            self.enable_cpuset_controller().await;
        }
        let listener = server::bind(&self.cfg.socket).context("cannot set up the status socket")?;
        info!(socket = %self.cfg.socket.display(), "serving the status socket");
        if self.cfg.run.enabled {
            let policy = run::policy(&self.cfg.run);
            self.door = run::Door::open(
                &self.cfg.run.socket,
                policy,
                self.pool.clone(),
                self.cfg.proc_root.clone(),
                self.cfg
                    .systemd_bus
                    .as_deref()
                    .map(|b| crate::systemd::Bus::new(b, self.cfg.read_timeout)),
            )
            .with_context(|| {
                format!(
                    "cannot set up the run socket {}",
                    self.cfg.run.socket.display()
                )
            })?;
            info!(socket = %self.cfg.run.socket.display(), "serving the run socket");
        }
        self.open_nri();
        let server = server::serve(
            listener,
            self.socket.snapshot.subscribe(),
            self.socket.events.clone(),
            self.socket.metrics.clone(),
            self.pool.clone(),
        );
        // Metrics never stop pinning: a port that cannot be bound is warned
        // about (and Prometheus sees the target down).
        let metrics_port = match self.cfg.metrics_listen {
            Some(addr) => match tokio::net::TcpListener::bind(addr).await {
                Ok(listener) => {
                    info!(address = %addr, "serving /metrics");
                    Some(server::serve_metrics(
                        listener,
                        self.socket.snapshot.subscribe(),
                        self.socket.events.clone(),
                        self.socket.metrics.clone(),
                        self.pool.clone(),
                    ))
                }
                Err(e) => {
                    warn!(address = %addr, error = %e, "cannot serve /metrics (metrics_listen); pinning goes on without it");
                    None
                }
            },
            None => None,
        };
        self.ping_every = notify::watchdog_period();
        // Required paths first: a repaired kubepods tree is then scanned too.
        let found = checks::gather(self.check_input(true)).await;
        self.act(found).await;
        self.reconcile(false).await;
        // READY=1 means the tree is as the first plan wants it.
        self.drain().await;
        // Runs that ended while no daemon ran give their CPUs back; those
        // still running count against their users again.
        self.remove_empty_runs().await;
        // Each slice's set, told to systemd: a daemon before this one may
        // have widened one above a pin and not told it.
        for (rel, cpus) in self.engine.held_sets() {
            self.systemd.holds(rel, cpus);
        }
        self.engine.end_startup();
        self.ready = true;
        info!(
            elapsed_ms = started.elapsed().as_millis() as u64,
            "first reconcile done"
        );
        self.warn_unconfined();
        self.notify_status(true);
        self.publish();

        let mut timers = Timers::new(&self.cfg, self.ping_every);
        // systemd kills the daemon two ping periods after its last
        // `WATCHDOG=1`, and a beat sends one once half a period has passed
        // since the last: at any beat the kill is at least a period and a
        // half away. A turn that shows no sign of life (its beginning, a
        // beat) for half a period is named a period before it.
        let after = self.ping_every.map_or(Duration::from_secs(10), |p| {
            half_ping(p).max(Duration::from_millis(10))
        });
        self.stall = Some(stall::Stall::start(after, &self.cfg.proc_root));
        loop {
            self.beat();
            let event = self.next_event(&mut timers, &mut signals).await;
            // A beat as the turn begins: the wait for the event (up to a
            // ping period) is not the turn's, and must not eat its margin.
            self.beat();
            if let Some(s) = &self.stall {
                s.begin(event.name());
            }
            let go_on = self.handle_event(event, &mut timers).await;
            // Any turn may have freed CPUs (or ended a wait).
            if self.door.has_waiting() {
                self.serve_waiting().await;
            }
            self.follow_nri();
            if let Some(s) = &self.stall {
                s.end();
            }
            if !go_on {
                break;
            }
        }
        // The stall thread ends with it.
        self.stall = None;
        info!("stopping");
        self.notifier.send(Note::Stopping);
        // The shared pool's last writes: what is left of a plan is made
        // before the daemon goes.
        self.drain().await;
        server.abort();
        if let Some(port) = metrics_port {
            port.abort();
        }
        self.door.close();
        self.nri.close();
        let _ = std::fs::remove_file(&self.cfg.socket);
        self.finish_irqs().await;
        self.finish_power().await;
        self.finish_housekeeping().await;
        self.finish_saves().await;
        self.pool.shutdown();
        Ok(())
    }

    /// Waits for the next thing to act on: the loop's one `select!`.
    async fn next_event(&mut self, timers: &mut Timers, signals: &mut Signals) -> Event {
        // The select! below is biased: behind a steady stream of events the
        // rest of a plan and a background reconcile would wait for good.
        // One that has had no turn for OVERDUE takes one first (the sweep's
        // batch only if it has been read).
        if self.rest.overdue(Instant::now()) {
            return Event::Rest;
        }
        if let Some(sweep) = self.sweep.as_mut().filter(|s| s.overdue()) {
            tokio::select! {
                biased;
                batch = sweep.walk().next() => return Event::Swept(batch),
                () = std::future::ready(()) => {}
            }
        }
        let follows_jobs = self.follows_jobs();
        let cpu_tree = async {
            match self.cpu_watcher.as_mut() {
                Some(w) => w.next().await,
                None => std::future::pending().await,
            }
        };
        let unsure = at(self.unsure.due());
        // The rest of a plan waits for the tree to be quiet.
        let rest = at(self.rest.due());
        let sweep = async {
            match self.sweep.as_mut() {
                Some(sweep) => sweep.walk().next().await,
                None => std::future::pending().await,
            }
        };
        let wait_ends = self.door.next_deadline();
        let holds_runs = self.door.holds_runs();
        let wait_ends = async move {
            match wait_ends {
                Some(_) => at(wait_ends).await,
                None => std::future::pending().await,
            }
        };
        let asked = async {
            match self.door.rx.as_mut() {
                Some(rx) => rx.recv().await,
                None => std::future::pending().await,
            }
        };
        let announced = at(self.nri.next_deadline());
        let nri_call = async {
            match self.nri.rx.as_mut() {
                Some(rx) => rx.recv().await,
                None => std::future::pending().await,
            }
        };
        let nri_link = async {
            match self.nri.links.as_mut() {
                Some(rx) => rx.recv().await,
                None => std::future::pending().await,
            }
        };
        let nri_updated = async {
            match self.nri.updated.as_mut() {
                Some(rx) => rx.recv().await,
                None => std::future::pending().await,
            }
        };

        // In this order: what the kernel and the operator say comes before
        // the rest of a plan and a background reconcile, so a new pin never
        // waits behind the shared pool's writes or the reading of the whole
        // tree; those go a chunk per turn when nothing else is ready.
        tokio::select! {
            biased;
            // A container waits on the runtime's side for this answer.
            Some(asked) = nri_call => Event::Nri(Box::new(asked)),
            changes = self.watcher.next() => Event::Cgroups(changes),
            changes = cpu_tree => Event::CpuTree(changes),
            _ = signals.term.recv() => Event::Stop,
            _ = signals.int.recv() => Event::Stop,
            _ = signals.hup.recv() => Event::Reload,
            _ = signals.usr2.recv(), if self.wedge_on_usr2 => Event::Wedge,
            _ = timers.ping.tick(), if self.ping_every.is_some() => Event::Ping,
            Some((generation, found)) = self.dog.rx.recv() => Event::Checked(generation, found),
            Some(error) = self.saved_rx.recv() => Event::Saved(error),
            Some(told) = self.told_rx.recv() => Event::Told(told),
            Some(passed) = self.irqs.rx.recv() => Event::Steered(passed),
            Some(done) = self.powers.rx.recv() => Event::Powered(done),
            Some(done) = self.housekeeping.rx.recv() => Event::Housekept(done),
            Some(asked) = asked => Event::Run(asked),
            Some(link) = nri_link => Event::NriLink(link),
            Some(updated) = nri_updated => Event::NriUpdated(updated),
            () = announced => Event::AnnouncementsDue,
            () = wait_ends => Event::WaitEnds,
            _ = timers.runs.tick(), if holds_runs => Event::RunsDue,
            _ = timers.jobs.tick(), if follows_jobs => Event::JobsDue,
            _ = timers.reconcile.tick() => Event::Reconcile,
            _ = timers.unwatched.tick(), if !self.unwatched.is_empty() => Event::Unwatched,
            _ = unsure => Event::Unsure,
            _ = timers.checks.tick() => Event::ChecksDue,
            _ = timers.publish.tick(), if self.socket.dirty => Event::Publish,
            _ = rest => Event::Rest,
            batch = sweep => Event::Swept(batch),
        }
    }

    /// Acts on one event; `false` ends the loop.
    async fn handle_event(&mut self, event: Event, timers: &mut Timers) -> bool {
        match event {
            Event::Cgroups(Ok(changes)) => self.handle(changes).await,
            Event::CpuTree(Ok(changes)) => self.handle_cpu_tree(changes).await,
            Event::Cgroups(Err(e)) | Event::CpuTree(Err(e)) => {
                warn!(error = %e, "inotify read failed; full reconcile");
                self.ask_sweep(true).await;
            }
            Event::Reconcile => self.reconcile_part().await,
            Event::Unwatched => self.ask_sweep(false).await,
            Event::Unsure => {
                let again = self.unsure.round();
                self.handle(again.into_iter().map(Change::Changed).collect())
                    .await;
            }
            Event::Rest => self.rest().await,
            Event::Swept(batch) => self.swept(batch).await,
            Event::Saved(error) => self.saved(error),
            Event::Told(told) => self.told(told),
            Event::Steered(passed) => self.steered(passed),
            Event::Powered(done) => self.powered(done),
            Event::Housekept(done) => self.housekept(done),
            Event::Ping => self.beat(),
            Event::Publish => self.publish(),
            Event::Run(asked) => self.run_asked(asked).await,
            Event::WaitEnds => {}
            Event::RunsDue => {
                self.remove_empty_held_runs().await;
            }
            Event::JobsDue => self.look_at_jobs().await,
            Event::Nri(asked) => self.nri_asked(*asked).await,
            Event::NriLink(link) => self.nri_link(link),
            Event::AnnouncementsDue => self.announcements_due().await,
            Event::NriUpdated(updated) => self.nri_updated(updated),
            Event::ChecksDue => {
                self.start_checks(false);
                self.follow_irqs(true);
                self.follow_power(true);
                self.follow_housekeeping(true);
                self.check_partitions().await;
            }
            Event::Checked(generation, found) => self.checked(generation, found).await,
            Event::Reload => {
                info!("SIGHUP: reloading the configuration, then a full reconcile");
                self.reload().await;
                timers.follow(&self.cfg);
                self.reconcile(true).await;
            }
            Event::Wedge => {
                warn!("test hook: SIGUSR2 wedges the event loop");
                loop {
                    std::thread::sleep(Duration::from_secs(3600));
                }
            }
            Event::Stop => return false,
        }
        true
    }

    /// Tells systemd "alive" when a ping is due. Called from the event loop
    /// and from inside long steps (a scan, a run of writes) as they progress,
    /// never from anywhere else: a wedged loop stops the pings.
    fn beat(&mut self) {
        if let Some(s) = &self.stall {
            s.progress();
        }
        if let Some(every) = self.ping_every
            && self.last_ping.elapsed() >= half_ping(every)
        {
            self.notifier.send(Note::Watchdog);
            self.last_ping = Instant::now();
        }
    }
}

/// Completes at `deadline` (at once when it has passed); never without one.
async fn at(deadline: Option<Instant>) {
    match deadline {
        Some(at) if at > Instant::now() => {
            tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await
        }
        Some(_) => {}
        None => std::future::pending().await,
    }
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
