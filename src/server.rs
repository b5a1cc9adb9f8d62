//! The status socket: HTTP on a Unix socket, serving the [`crate::api`]
//! documents and Prometheus metrics.
//!
//! It never waits on the event loop or on file I/O: the loop publishes a
//! [`Snapshot`] (a `tokio::sync::watch` channel) after its work, the audit
//! trail is a bounded ring behind a mutex held only to push or copy, and what
//! can change while the loop itself waits on a hung read (the hung paths, the
//! I/O threads left) is read live from the [`IoPool`] at each request. So a
//! status query is answered at once even while the loop is stuck.
//!
//! Its clients are other people's processes, so what a connection may take is
//! bounded ([`Limits`]): at most [`Limits::max_connections`] at once, a number
//! well below the process's file descriptor limit, so idle connections can
//! never take the descriptors the daemon needs for the cgroup files (they
//! once did: every write then failed with EMFILE and no new workload was
//! pinned). A connection beyond the cap is closed as soon as it is accepted,
//! and counted. A request's header must arrive within
//! [`Limits::header_timeout`] (which also ends idle keep-alive connections),
//! and no connection lives longer than [`Limits::connection_timeout`].

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
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use serde::Deserialize;
use tokio::net::UnixListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;

use crate::api;
use crate::io::IoPool;
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

/// A label value, escaped as the OpenMetrics and Prometheus text formats
/// require when encoded. prometheus-client writes `String` label values raw,
/// and ours carry text other people choose (a workload key is a cgroup's
/// path or a pod's container name): a cgroup named `a",evil="1` would forge a
/// label, and one ending in `\` would break the whole scrape. Every label
/// struct holds its values as this type, so none can be written raw.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct LabelValue(String);

impl LabelValue {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<String> for LabelValue {
    fn from(s: String) -> Self {
        LabelValue(s)
    }
}

impl From<&str> for LabelValue {
    fn from(s: &str) -> Self {
        LabelValue(s.to_string())
    }
}

impl EncodeLabelValue for LabelValue {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
        // Only the text encoder is compiled in (prometheus-client's
        // `protobuf` feature is off), so this is the text format's escaping.
        escape_label_value(&self.0, encoder)
    }
}

/// Writes `value` with the three escapes of the text formats' label values
/// (`\\`, `\"`, `\n`). Nothing else is escaped: the formats define no
/// other escape, and any other character, control characters included, is
/// legal as it is.
fn escape_label_value(value: &str, out: &mut impl std::fmt::Write) -> std::fmt::Result {
    let mut rest = value;
    while let Some(at) = rest.find(['\\', '"', '\n']) {
        out.write_str(&rest[..at])?;
        // The three are ASCII: one byte each.
        out.write_str(match rest.as_bytes()[at] {
            b'\\' => "\\\\",
            b'"' => "\\\"",
            _ => "\\n",
        })?;
        rest = &rest[at + 1..];
    }
    out.write_str(rest)
}

/// Labels of the per-workload gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WorkloadLabel {
    pub workload: LabelValue,
}

/// Labels of the per-CPU gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CpuLabel {
    pub cpu: LabelValue,
    /// `exclusive`, `shared`, `reserved` or `offline`.
    pub pool: LabelValue,
}

/// Labels of the health gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabel {
    pub state: LabelValue,
}

/// Labels of the configuration reload and systemd counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    /// `ok` or `failed`.
    pub result: LabelValue,
}

/// The daemon's metrics. Counters and histograms are updated by the loop as
/// things happen; gauges are set from each snapshot.
pub struct Metrics {
    registry: Registry,
    pub exclusive_cpus: Family<WorkloadLabel, Gauge>,
    pub shared_pool: Gauge,
    pub cpu_pool: Family<CpuLabel, Gauge>,
    pub pending: Gauge,
    pub reconcile_seconds: Histogram,
    pub event_to_pin_seconds: Histogram,
    pub writes: Counter,
    pub write_errors: Counter,
    pub repairs: Counter,
    pub hung_paths: Gauge,
    pub dstate_tasks: Gauge,
    pub frozen_cgroups: Gauge,
    pub health: Family<StateLabel, Gauge>,
    pub config_reloads: Family<ResultLabel, Counter>,
    /// Scopes whose `AllowedCPUs=` systemd was told, by result.
    pub systemd_told: Family<ResultLabel, Counter>,
    /// Cgroups whose CFS quota is lifted now (`unthrottle_exclusive`).
    pub quotas_lifted: Gauge,
    /// Interrupts kept off exclusive CPUs now (`irq_affinity`).
    pub irqs_steered: Gauge,
    /// Interrupts whose affinity the kernel refused or could not be read.
    pub irqs_refused: Gauge,
    /// Exclusive workloads' cgroups that are isolated partitions now.
    pub partitions_isolated: Gauge,
    /// Exclusive workloads whose partition could not be made or is invalid.
    pub partitions_failing: Gauge,
    pub state_save_failures: Counter,
    pub unwatched_cgroups: Gauge,
    /// Connections to the socket open now.
    pub socket_connections: Gauge,
    /// Connections closed at once because [`Limits::max_connections`] were
    /// open.
    pub socket_connections_refused: Counter,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("pinctl");
        let m = Metrics {
            registry: Registry::default(),
            exclusive_cpus: Family::default(),
            shared_pool: Gauge::default(),
            cpu_pool: Family::default(),
            pending: Gauge::default(),
            // 1 ms to ~65 s.
            reconcile_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 17)),
            // 100 µs to ~3 s.
            event_to_pin_seconds: Histogram::new(exponential_buckets(0.0001, 2.0, 16)),
            writes: Counter::default(),
            write_errors: Counter::default(),
            repairs: Counter::default(),
            hung_paths: Gauge::default(),
            dstate_tasks: Gauge::default(),
            frozen_cgroups: Gauge::default(),
            health: Family::default(),
            config_reloads: Family::default(),
            systemd_told: Family::default(),
            quotas_lifted: Gauge::default(),
            irqs_steered: Gauge::default(),
            irqs_refused: Gauge::default(),
            partitions_isolated: Gauge::default(),
            partitions_failing: Gauge::default(),
            state_save_failures: Counter::default(),
            unwatched_cgroups: Gauge::default(),
            socket_connections: Gauge::default(),
            socket_connections_refused: Counter::default(),
        };
        registry.register(
            "state_save_failures",
            "Saves of the state file that failed",
            m.state_save_failures.clone(),
        );
        registry.register(
            "unwatched_cgroups",
            "Cgroups without an inotify watch (max_user_watches reached)",
            m.unwatched_cgroups.clone(),
        );
        registry.register(
            "workload_exclusive_cpus",
            "Exclusive CPUs held by each workload",
            m.exclusive_cpus.clone(),
        );
        registry.register(
            "shared_pool_cpus",
            "CPUs in the shared pool",
            m.shared_pool.clone(),
        );
        registry.register(
            "cpu_pool",
            "Which pool each CPU is in (1 for its pool)",
            m.cpu_pool.clone(),
        );
        registry.register(
            "pending_workloads",
            "Workloads waiting for exclusive CPUs",
            m.pending.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Duration of full reconciles",
            m.reconcile_seconds.clone(),
        );
        registry.register(
            "event_to_pin_seconds",
            "From an inotify event to its cpuset writes done",
            m.event_to_pin_seconds.clone(),
        );
        registry.register("cgroup_writes", "Cgroup file writes", m.writes.clone());
        registry.register(
            "cgroup_write_errors",
            "Cgroup file writes that failed",
            m.write_errors.clone(),
        );
        registry.register(
            "config_reloads",
            "Configuration reloads (SIGHUP), by result",
            m.config_reloads.clone(),
        );
        registry.register(
            "systemd_told",
            "Scopes whose AllowedCPUs= systemd was told the pin of, by result",
            m.systemd_told.clone(),
        );
        registry.register(
            "quotas_lifted",
            "Cgroups whose CFS quota is lifted for an exclusive workload",
            m.quotas_lifted.clone(),
        );
        registry.register(
            "irqs_steered",
            "Interrupts moved off exclusive CPUs (irq_affinity)",
            m.irqs_steered.clone(),
        );
        registry.register(
            "irqs_refused",
            "Interrupts whose affinity could not be set (kernel-managed ones refuse)",
            m.irqs_refused.clone(),
        );
        registry.register(
            "partitions_isolated",
            "Exclusive workloads' cgroups made isolated partitions (isolation = \"partition\")",
            m.partitions_isolated.clone(),
        );
        registry.register(
            "partitions_failing",
            "Exclusive workloads whose isolated partition could not be made or is invalid",
            m.partitions_failing.clone(),
        );
        registry.register(
            "repairs",
            "Required cgroup paths made again",
            m.repairs.clone(),
        );
        registry.register(
            "hung_paths",
            "Paths whose I/O timed out and has not returned",
            m.hung_paths.clone(),
        );
        registry.register(
            "dstate_tasks",
            "Tasks of managed cgroups in D state past the threshold",
            m.dstate_tasks.clone(),
        );
        registry.register(
            "frozen_cgroups",
            "Workloads frozen past the threshold",
            m.frozen_cgroups.clone(),
        );
        registry.register(
            "health",
            "The daemon's health (1 for the current state)",
            m.health.clone(),
        );
        registry.register(
            "socket_connections",
            "Connections to the status socket open now",
            m.socket_connections.clone(),
        );
        registry.register(
            "socket_connections_refused",
            "Connections to the status socket closed at once: the cap was reached",
            m.socket_connections_refused.clone(),
        );
        Metrics { registry, ..m }
    }

    /// Sets the gauges from a status document.
    pub fn set_from(&self, status: &api::Status) {
        self.exclusive_cpus.clear();
        for w in &status.workloads {
            if let Some(cpus) = &w.cpus {
                self.exclusive_cpus
                    .get_or_create(&WorkloadLabel {
                        workload: w.key.as_str().into(),
                    })
                    .set(cpus.len() as i64);
            }
        }
        self.shared_pool.set(status.shared_pool.len() as i64);
        self.unwatched_cgroups
            .set(status.watchdog.unwatched_cgroups as i64);
        self.pending.set(
            status
                .workloads
                .iter()
                .filter(|w| w.pending.is_some())
                .count() as i64,
        );
        self.cpu_pool.clear();
        let exclusive: crate::cpuset::CpuSet = status
            .workloads
            .iter()
            .filter_map(|w| w.cpus.as_ref())
            .flat_map(|c| c.iter())
            .collect();
        for info in &status.topology.cpus {
            let pool = if exclusive.contains(info.cpu) {
                "exclusive"
            } else if status.reserved.contains(info.cpu) {
                "reserved"
            } else {
                "shared"
            };
            self.cpu_pool
                .get_or_create(&CpuLabel {
                    cpu: info.cpu.to_string().into(),
                    pool: pool.into(),
                })
                .set(1);
        }
        if let Some(offline) = &status.topology.offline {
            for cpu in offline {
                self.cpu_pool
                    .get_or_create(&CpuLabel {
                        cpu: cpu.to_string().into(),
                        pool: "offline".into(),
                    })
                    .set(1);
            }
        }
        self.dstate_tasks
            .set(status.watchdog.stuck_tasks.len() as i64);
        self.frozen_cgroups
            .set(status.watchdog.frozen.iter().filter(|f| !f.thawed).count() as i64);
        for state in ["healthy", "degraded", "failed"] {
            self.health
                .get_or_create(&StateLabel {
                    state: state.into(),
                })
                .set(i64::from(status.health.state == state));
        }
    }

    /// The OpenMetrics text.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
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

/// What the socket's connections may take (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections served at once; more are closed as soon as accepted.
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
        metrics: metrics.clone(),
        pool,
    };
    let router = Router::new()
        .route("/v1/status", get(status))
        .route("/v1/workloads", get(workloads))
        .route("/v1/topology", get(topology))
        .route("/v1/health", get(health))
        .route("/v1/events", get(events_since))
        .route("/metrics", get(metrics_text))
        .with_state(app);
    tokio::spawn(accept(listener, router, metrics, limits))
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
async fn accept(listener: UnixListener, router: Router, metrics: Arc<Metrics>, limits: Limits) {
    let places = Arc::new(Semaphore::new(limits.max_connections));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    let mut connections = JoinSet::new();
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
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

    /// A sample: its metric name, labels and value.
    type Sample = (String, Vec<(String, String)>, f64);

    /// A strict parser of one OpenMetrics sample line,
    /// `name{key="value",...} number`: label values may hold only the three
    /// escapes the format defines, and a raw `"` ends them. `None` for
    /// anything else.
    fn parse_sample(line: &str) -> Option<Sample> {
        let name_end = line.find(['{', ' '])?;
        let (name, mut rest) = line.split_at(name_end);
        let mut labels = Vec::new();
        if let Some(body) = rest.strip_prefix('{') {
            let mut chars = body.char_indices().peekable();
            loop {
                // A key: [a-zA-Z_][a-zA-Z0-9_]*, then `="`.
                let start = chars.peek()?.0;
                let mut end = start;
                while let Some(&(i, c)) = chars.peek() {
                    if c.is_ascii_alphanumeric() || c == '_' {
                        end = i + 1;
                        chars.next();
                    } else {
                        break;
                    }
                }
                let key = &body[start..end];
                if key.is_empty() || key.starts_with(|c: char| c.is_ascii_digit()) {
                    return None;
                }
                if chars.next()?.1 != '=' || chars.next()?.1 != '"' {
                    return None;
                }
                let mut value = String::new();
                loop {
                    match chars.next()?.1 {
                        '"' => break,
                        '\\' => value.push(match chars.next()?.1 {
                            '\\' => '\\',
                            '"' => '"',
                            'n' => '\n',
                            _ => return None,
                        }),
                        '\n' => return None,
                        c => value.push(c),
                    }
                }
                labels.push((key.to_string(), value));
                match chars.next()?.1 {
                    ',' => continue,
                    '}' => {
                        rest = &body[chars.peek().map_or(body.len(), |&(i, _)| i)..];
                        break;
                    }
                    _ => return None,
                }
            }
        }
        let value = rest.strip_prefix(' ')?.parse().ok()?;
        Some((name.to_string(), labels, value))
    }

    #[test]
    fn the_socket_never_takes_more_than_a_quarter_of_the_open_files_limit() {
        assert_eq!(connection_cap(1024), MAX_CONNECTIONS);
        assert_eq!(connection_cap(u64::MAX), MAX_CONNECTIONS);
        assert_eq!(connection_cap(128), 32);
        assert_eq!(connection_cap(3), 1, "never none at all");
        assert_eq!(connection_cap(0), 1);
    }

    #[test]
    fn hostile_workload_keys_neither_forge_labels_nor_break_the_scrape() {
        let hostile = [
            "cgroup:a\",evil=\"1",
            "cgroup:ends\\",
            "cgroup:line\nbreak",
            "cgroup:\\\"",
            "cgroup:\x1b[2J\r\x07\x00\u{9b}\x7f\t",
            "pod:\u{e9}t\u{e9}/\u{1F600}\u{202e}",
            "cgroup:\\n is not a newline",
            "cgroup:} 1\npinctl_health{state=\"failed\"} 1",
        ];
        let metrics = Metrics::new();
        for (i, key) in hostile.iter().enumerate() {
            metrics
                .exclusive_cpus
                .get_or_create(&WorkloadLabel {
                    workload: (*key).into(),
                })
                .set(i as i64 + 1);
        }
        let text = metrics.encode();
        assert!(text.ends_with("# EOF\n"), "{text}");
        let mut seen = Vec::new();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((name, labels, value)) = parse_sample(line) else {
                panic!("unparsable sample line {line:?} in:\n{text}");
            };
            if name == "pinctl_workload_exclusive_cpus" {
                let [(key, workload)] = labels.as_slice() else {
                    panic!("not exactly one label: {labels:?} in {line:?}");
                };
                assert_eq!(key, "workload", "{line:?}");
                let i = hostile.iter().position(|h| h == workload);
                assert_eq!(i.map(|i| i as f64 + 1.0), Some(value), "{line:?}");
                seen.push(workload.clone());
            } else {
                // Nothing was set but the workloads: only the histograms'
                // buckets carry a label, and the forged health line is not
                // there.
                assert_ne!(name, "pinctl_health", "{line:?}");
                assert!(
                    labels.iter().all(|(k, _)| k == "le"),
                    "a label on {name}: {line:?}"
                );
            }
        }
        seen.sort();
        let mut want: Vec<String> = hostile.iter().map(|h| h.to_string()).collect();
        want.sort();
        assert_eq!(seen, want, "each key once, exactly as it was:\n{text}");
    }
}
