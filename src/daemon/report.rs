//! What the daemon says about itself: the status document and its health,
//! the snapshot the status socket serves, systemd's `STATUS=` line.

use std::sync::Arc;
use std::time::Duration;

use tracing::{info, warn};

use super::Daemon;
use super::notify::Note;
use crate::api;
use crate::watchdog::{self, Health};
use crate::{metrics, server};

/// How the configuration was last read (for the status).
#[derive(Debug, Default)]
pub(super) struct Loads {
    /// Seconds since the Unix epoch.
    pub(super) at: u64,
    /// Keys the file changes that wait for a restart.
    pub(super) restart_pending: Vec<String>,
    /// Why the last reload failed.
    pub(super) error: Option<String>,
}

/// The loop's side of the status socket.
pub(super) struct Socket {
    pub(super) snapshot: tokio::sync::watch::Sender<Arc<server::Snapshot>>,
    pub(super) events: Arc<server::Events>,
    pub(super) metrics: Arc<metrics::Metrics>,
    /// Something changed since the last snapshot.
    pub(super) dirty: bool,
    pub(super) started: u64,
    pub(super) reconciles: u64,
    pub(super) last_reconcile_ms: u64,
}

/// How stale the status socket's snapshot may be.
pub(super) const PUBLISH_EVERY: Duration = Duration::from_millis(200);

impl Socket {
    pub(super) fn new() -> Self {
        Socket {
            snapshot: tokio::sync::watch::Sender::new(Arc::new(server::Snapshot {
                status: api::Status::starting(),
                facts: watchdog::Facts::default(),
            })),
            events: Arc::new(server::Events::default()),
            metrics: Arc::new(metrics::Metrics::new()),
            dirty: true,
            started: api::unix_secs(),
            reconciles: 0,
            last_reconcile_ms: 0,
        }
    }
}

impl Daemon {
    /// The other CPU owners on the node, and what pinctld leaves each.
    fn other_owners(&self) -> Vec<api::OtherOwner> {
        let mut owners = Vec::new();
        if let Some(m) = &self.dog.kubelet {
            owners.push(api::OtherOwner {
                what: format!(
                    "the kubelet's static CPU manager ({}, {} containers)",
                    self.cfg
                        .kubelet_cpu_manager_state
                        .as_deref()
                        .unwrap_or(std::path::Path::new(""))
                        .display(),
                    m.containers
                ),
                cpus: m.exclusive.clone(),
                left: self
                    .cfg
                    .managed
                    .iter()
                    .filter(|r| !self.scope().managed(r))
                    .cloned()
                    .collect(),
            });
        }
        if !self.nri.yielded.is_empty() {
            owners.push(api::OtherOwner {
                what: format!(
                    "another NRI plugin, after pinctld's (plugin_index {})",
                    self.cfg.nri.plugin_index
                ),
                cpus: crate::cpuset::CpuSet::new(),
                left: self
                    .nri
                    .yielded
                    .values()
                    .map(|rel| rel.to_string())
                    .collect(),
            });
        }
        owners
    }

    /// On cgroup v1, a `shared_cgroups` entry that is not in the cpuset
    /// hierarchy confines nothing: systemd keeps its services in the root
    /// cpuset there, on every CPU (the VM bed's systemd boots show it). Said
    /// once, at start, with what the operator can do.
    pub(super) fn warn_unconfined(&self) {
        for rel in self.unconfined() {
            warn!(
                cgroup = %rel,
                hierarchy = %self.hier.cpuset.display(),
                "shared cgroup is not in the cpuset hierarchy, so it confines nothing: on cgroup v1 systemd \
                 keeps its services in the root cpuset, on every CPU (CPUAffinity= in \
                 /etc/systemd/system.conf keeps them off exclusive CPUs)"
            );
        }
    }

    /// The `shared_cgroups` entries that confine nothing: on v1, those the
    /// cpuset hierarchy does not have (the daemon knows every cgroup of its
    /// subtrees there).
    fn unconfined(&self) -> Vec<String> {
        if self.hier.version != crate::cgroup::Version::V1 {
            return Vec::new();
        }
        let shared = self.cfg.shared_cgroups.iter();
        shared
            .filter(|rel| self.engine.rel(rel).is_none())
            .cloned()
            .collect()
    }

    /// The daemon's health, judged on what it knows now.
    pub fn health(&self) -> Health {
        watchdog::assess(&self.facts())
    }

    /// The facts health is judged on.
    pub(super) fn facts(&self) -> watchdog::Facts {
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

    /// Publishes a new snapshot for the status socket.
    pub(super) fn publish(&mut self) {
        let facts = self.facts();
        let status = self.status(&facts);
        self.socket.metrics.set_from(&status);
        self.socket
            .snapshot
            .send_replace(Arc::new(server::Snapshot { status, facts }));
        self.socket.dirty = false;
    }

    /// The status document, its health judged on `facts`.
    pub fn status(&self, facts: &watchdog::Facts) -> api::Status {
        let health = watchdog::assess(facts);
        let metrics = &self.socket.metrics;
        api::Status {
            reserved: self.engine.reserved().clone(),
            shared_pool: self.engine.shared_pool(),
            strict_reservation: self.engine.strict(),
            workloads: self.engine.status_workloads(),
            failing: self.engine.failing(),
            watchdog: api::Watchdog {
                hung_paths: Vec::new(),
                stuck_tasks: self.dog.stuck_tasks.clone(),
                frozen: self.dog.frozen_cgroups.clone(),
                missing_paths: self.dog.repairs.missing.clone(),
                repairs: self.dog.repairs.count,
                unwatched_cgroups: self.unwatched.len() as u64,
                state_error: self.state_error.clone(),
            },
            quotas_lifted: self.quotas.lifted().map(|r| r.to_string()).collect(),
            interrupts: self.irq_status(),
            power: self.power_status(),
            housekeeping: self.housekeeping_status(),
            partitions: self.partition_status(),
            slurm: api::Slurm {
                jobs: self.dog.slurm_jobs.clone(),
                inside: self.engine.slurm_held().map(|r| r.to_string()).collect(),
                housekeeping: self.cfg.slurm.housekeeping,
                cores: self.engine.job_cores(),
            },
            runs: self.run_status(),
            nri: self.nri_status(),
            other_owners: self.other_owners(),
            counters: api::Counters {
                reconciles: self.socket.reconciles,
                last_reconcile_ms: self.socket.last_reconcile_ms,
                writes: metrics.writes.get(),
                write_errors: metrics.write_errors.get(),
                repairs: self.dog.repairs.count,
                cgroups: self.engine.len() as u64,
            },
            ..api::Status::new(
                api::Daemon::new(
                    std::process::id(),
                    self.socket.started,
                    self.ready,
                    self.summary(&health),
                ),
                server::health_doc(&health),
                &self.hier,
                self.engine.topology(),
                api::RunningConfig {
                    file: self.config_path.clone(),
                    loaded: self.loaded.at,
                    restart_pending: self.loaded.restart_pending.clone(),
                    reload_error: self.loaded.error.clone(),
                    unconfined: self.unconfined(),
                    ..api::RunningConfig::of(&self.cfg)
                },
            )
        }
    }

    /// One line for systemd's `STATUS=` and the log.
    pub fn summary(&self, health: &Health) -> String {
        let t = self.engine.tally();
        let mut s = format!(
            "{} exclusive workloads on {} CPUs, {} pending, shared pool {} CPUs",
            t.pinned, t.exclusive_cpus, t.pending, t.shared
        );
        if health.state != watchdog::HealthState::Healthy {
            s.push_str(&format!("; {health}"));
        }
        if self.dog.repairs.count > 0 {
            s.push_str(&format!("; {} repairs", self.dog.repairs.count));
        }
        s
    }

    pub(super) fn notify_status(&mut self, ready: bool) {
        let status = self.summary(&self.health());
        if status == self.last_status && !ready {
            return;
        }
        self.notifier.send(Note::Status(status.clone(), ready));
        info!(status = %status, ready = self.ready);
        self.last_status = status;
    }

    pub(super) fn count_reload(&self, result: &str) {
        self.socket
            .metrics
            .config_reloads
            .get_or_create(&metrics::ResultLabel {
                result: result.into(),
            })
            .inc();
    }
}
