//! The socket API's documents: what `pinctld` serves under `/v1/` and what
//! `pinctl` reads. One set of types, serialised by the daemon and parsed by the
//! CLI, so the two cannot drift; `SCHEMA` is bumped on any incompatible change.
//!
//! Endpoints (HTTP/1.1 on the Unix socket of the `socket` key):
//! - `GET /v1/status`: [`Status`], everything below in one document;
//! - `GET /v1/workloads`: `[Workload]`;
//! - `GET /v1/topology`: the topology file format ([`TopologyFile`]);
//! - `GET /v1/health`: [`Health`] (HTTP 200 when healthy or degraded, 503
//!   when failed);
//! - `GET /v1/events?since=SEQ`: `[Event]`, oldest first, those after `SEQ`;
//! - `GET /metrics`: Prometheus / OpenMetrics text.
//!
//! Sets of CPUs are strings in the kernel's list format (`"0-3,8"`); times are
//! seconds or milliseconds since the Unix epoch, as each field says.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::cgroup::Hierarchy;
use crate::cpuset::CpuSet;
use crate::topology::{Topology, TopologyFile};

mod events;
mod workload;

pub use events::{Event, EventKind};
pub use workload::{Alignment, Device, Near, Pending, Source, Workload};

/// Now, in seconds since the Unix epoch (the documents' times).
pub fn unix_secs() -> u64 {
    unix_ms() / 1000
}

/// Now, in milliseconds since the Unix epoch.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The version of these documents.
pub const SCHEMA: u32 = 1;

/// `GET /v1/status`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Status {
    /// [`SCHEMA`].
    pub schema: u32,
    pub daemon: Daemon,
    pub health: Health,
    /// `"v1"` or `"v2"`.
    pub hierarchy: String,
    /// v1 with a v2 tree beside it.
    pub hybrid: bool,
    pub topology: TopologyFile,
    /// Online CPUs.
    pub online: CpuSet,
    /// Never exclusive.
    pub reserved: CpuSet,
    /// What every non-exclusive cgroup gets: online minus all assignments.
    pub shared_pool: CpuSet,
    /// With `strict_reservation`: what the non-exclusive cgroups of the
    /// managed subtrees get instead (absent when it is off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict_reservation: Option<Strict>,
    /// Every workload that asks for exclusive CPUs, pinned or pending.
    pub workloads: Vec<Workload>,
    /// Cgroups whose last write or verification failed.
    pub failing: Vec<Failing>,
    pub watchdog: Watchdog,
    pub counters: Counters,
    /// The configuration in force (absent from a daemon older than this
    /// field: then all defaults).
    #[serde(default)]
    pub config: RunningConfig,
    /// The cgroups whose CFS quota is lifted for an exclusive workload
    /// (`unthrottle_exclusive`); absent when there are none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub quotas_lifted: Vec<String>,
    /// Device interrupts kept off exclusive CPUs (`irq_affinity`); absent
    /// when that is off and nothing is left to put back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupts: Option<Interrupts>,
    /// Isolated cgroup v2 partitions (`isolation = "partition"`); absent
    /// when that is off and none is left to undo.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitions: Option<Partitions>,
    /// CPU power classes (`[power]`); absent when that is off and nothing
    /// is left to put back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power: Option<Power>,
    /// The kernel's own movable work kept off exclusive CPUs
    /// (`housekeeping`); absent when that is off and nothing is left to put
    /// back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub housekeeping: Option<Housekeeping>,
    /// Slurm's jobs on this node; absent when there are none.
    #[serde(default, skip_serializing_if = "Slurm::is_empty")]
    pub slurm: Slurm,
    /// `pinctl run`'s runs and the asks in line; absent when there are none.
    #[serde(default, skip_serializing_if = "Runs::is_empty")]
    pub runs: Runs,
    /// The NRI front end (`[nri]`); absent when it is off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nri: Option<Nri>,
    /// The other CPU owners on the node, and what pinctld leaves to each;
    /// absent when there is none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub other_owners: Vec<OtherOwner>,
}

/// Another CPU owner on the node: the kubelet's static CPU manager, or
/// another NRI plugin that set a container's CPUs after pinctld.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OtherOwner {
    /// Who, and where pinctld learned it.
    pub what: String,
    /// The CPUs it is known to hold exclusively: no workload of pinctld's
    /// gets them, and pinctld's shared pool leaves them (none known of
    /// another NRI plugin: `nri.disagreements` lists what it set).
    pub cpus: CpuSet,
    /// The subtrees and cgroups pinctld leaves to it.
    pub left: Vec<String>,
}

/// The link to the container runtime as an NRI plugin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Nri {
    /// The runtime's NRI socket.
    pub socket: PathBuf,
    /// Registered with the runtime now.
    pub connected: bool,
    /// The runtime's name and version, once it configured pinctld.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
    /// Why there is no link, while there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Exclusive containers announced whose cgroup has not been read yet.
    pub announced: usize,
    /// Containers whose cgroup the runtime made with other CPUs than
    /// pinctld answered, the latest last (at most 16).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disagreements: Vec<NriDisagreement>,
}

/// A container made with other CPUs than pinctld answered over NRI.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NriDisagreement {
    pub container: String,
    pub cgroup: String,
    /// What pinctld answered.
    pub answered: CpuSet,
    /// What the cgroup held when it was first read.
    pub found: CpuSet,
}

/// `strict_reservation` in force: the pool of the non-exclusive cgroups of
/// the managed subtrees (Burstable and BestEffort pods, containers without
/// exclusive CPUs). `shared_cgroups` keep the whole shared pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Strict {
    /// The shared pool without the reserved CPUs; the shared pool itself
    /// when `fallback`.
    pub pool: CpuSet,
    /// Every CPU but the reserved ones is exclusive: rather than an empty
    /// set (which the kernel refuses to a cgroup with tasks), they keep the
    /// reserved CPUs until one frees up.
    pub fallback: bool,
}

impl Strict {
    /// The strict pool of `shared_pool` (online minus every assignment)
    /// with `reserved` the reserved CPUs in force: the daemon's and
    /// `--offline`'s one rule.
    pub fn of(shared_pool: &CpuSet, reserved: &CpuSet) -> Strict {
        let pool = shared_pool.difference(reserved);
        if pool.is_empty() {
            Strict {
                pool: shared_pool.clone(),
                fallback: true,
            }
        } else {
            Strict {
                pool,
                fallback: false,
            }
        }
    }
}

/// `pinctl run`'s runs ([`crate::run`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Runs {
    /// The runs set up, in cgroup order.
    pub running: Vec<Run>,
    /// The asks waiting for CPUs (`--wait`), first in line first.
    pub waiting: Vec<Waiter>,
}

impl Runs {
    pub fn is_empty(&self) -> bool {
        self.running.is_empty() && self.waiting.is_empty()
    }
}

/// One run: its workload (`run:<name>`), who asked, and for what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
    pub key: String,
    pub cgroup: String,
    pub uid: u32,
    /// The CPUs it asked for.
    pub cpus: usize,
    /// The command, as the client said it.
    pub command: Vec<String>,
}

/// An ask waiting in line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Waiter {
    pub uid: u32,
    pub cpus: usize,
    /// How long it has waited, in seconds.
    pub waited: u64,
    pub command: Vec<String>,
}

/// Slurm's jobs and where its trees sit ([`crate::slurm`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Slurm {
    /// Every job found by the last round of checks.
    pub jobs: Vec<crate::slurm::Job>,
    /// Slurm's trees inside the daemon's own subtrees: their holders are
    /// never narrowed, and their other children are confined one by one.
    pub inside: Vec<String>,
    /// `[slurm] housekeeping` is on.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub housekeeping: bool,
    /// The job cores kept quiet: the online CPUs of the running jobs, but
    /// reserved ones ([`crate::engine::Engine::job_cores`]).
    #[serde(default, skip_serializing_if = "CpuSet::is_empty")]
    pub cores: CpuSet,
}

impl Slurm {
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty() && self.inside.is_empty()
    }
}

impl Status {
    /// The one builder of a status document, the daemon's and `--offline`'s:
    /// `daemon`, judged `health`, drives `hierarchy` on `topology` with
    /// `config`. Every online CPU is in the shared pool, none is reserved, and
    /// there are no workloads, failures, watchdog findings or counts: the
    /// caller sets what it knows of those with struct update syntax
    /// (`Status { workloads, ..Status::new(..) }`).
    pub fn new(
        daemon: Daemon,
        health: Health,
        hierarchy: &Hierarchy,
        topology: &Topology,
        config: RunningConfig,
    ) -> Status {
        let online = topology.online().clone();
        Status {
            hierarchy: hierarchy.version.as_str().to_string(),
            hybrid: hierarchy.hybrid,
            topology: topology.to_file(),
            shared_pool: online.clone(),
            online,
            config,
            ..Status::blank(daemon, health)
        }
    }

    /// This daemon's document before it has read anything: no hierarchy, no
    /// CPUs, summary `"starting"` (never served: the first real one is
    /// published before the socket is read).
    pub fn starting() -> Status {
        let health = Health {
            state: "healthy".into(),
            reasons: Vec::new(),
        };
        let daemon = Daemon::new(std::process::id(), 0, false, "starting".into());
        Status::blank(daemon, health)
    }

    /// A document that says nothing but who made it and its health.
    fn blank(daemon: Daemon, health: Health) -> Status {
        Status {
            schema: SCHEMA,
            daemon,
            health,
            hierarchy: String::new(),
            hybrid: false,
            topology: TopologyFile {
                cpus: Vec::new(),
                isolated: None,
                offline: None,
            },
            online: CpuSet::new(),
            reserved: CpuSet::new(),
            shared_pool: CpuSet::new(),
            strict_reservation: None,
            workloads: Vec::new(),
            failing: Vec::new(),
            watchdog: Watchdog::default(),
            counters: Counters::default(),
            config: RunningConfig::default(),
            quotas_lifted: Vec::new(),
            interrupts: None,
            power: None,
            housekeeping: None,
            partitions: None,
            slurm: Slurm::default(),
            runs: Runs::default(),
            nri: None,
            other_owners: Vec::new(),
        }
    }
}

/// The configuration the daemon runs with, which can differ from its file:
/// keys waiting for a restart, or a file that failed to reload.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunningConfig {
    /// The file it was read from (absent: none, as in tests that build the
    /// daemon directly).
    pub file: Option<PathBuf>,
    /// When it was last read, at start or by a reload (SIGHUP), seconds since
    /// the Unix epoch.
    pub loaded: u64,
    pub cgroup_root: PathBuf,
    pub proc_root: PathBuf,
    pub sysfs_root: PathBuf,
    /// The `managed` subtrees.
    pub managed: Vec<String>,
    pub shared_cgroups: Vec<String>,
    /// Keys the file changes that wait for a restart.
    pub restart_pending: Vec<String>,
    /// Why the last reload failed (the file, line and key); absent once a
    /// reload succeeds.
    pub reload_error: Option<String>,
    /// `shared_cgroups` entries that confine nothing: on cgroup v1, those
    /// not in the cpuset hierarchy (systemd keeps its services in the root
    /// cpuset there). Absent when there are none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unconfined: Vec<String>,
}

impl RunningConfig {
    /// The roots and subtrees of `config`; nothing known of its file or
    /// reloads.
    pub fn of(config: &crate::config::Config) -> Self {
        RunningConfig {
            cgroup_root: config.cgroup_root.clone(),
            proc_root: config.proc_root.clone(),
            sysfs_root: config.sysfs_root.clone(),
            managed: config.managed.clone(),
            shared_cgroups: config.shared_cgroups.clone(),
            ..RunningConfig::default()
        }
    }

    /// Whether a daemon said it (one older than this section did not).
    pub fn is_known(&self) -> bool {
        !self.cgroup_root.as_os_str().is_empty()
    }
}

/// The daemon itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Daemon {
    pub version: String,
    pub pid: u32,
    /// Start time, seconds since the Unix epoch.
    pub started: u64,
    /// Whether the first full reconcile is done (`READY=1` was sent).
    pub ready: bool,
    /// The one-line summary also sent as systemd's `STATUS=`.
    pub summary: String,
}

impl Daemon {
    /// This program (its version) as process `pid`, started at `started`
    /// (seconds since the Unix epoch; 0 when it is no daemon).
    pub fn new(pid: u32, started: u64, ready: bool, summary: String) -> Daemon {
        Daemon {
            version: env!("CARGO_PKG_VERSION").to_string(),
            pid,
            started,
            ready,
            summary,
        }
    }
}

/// The health state and its reasons.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    /// `"healthy"`, `"degraded"` or `"failed"`.
    pub state: String,
    /// One short phrase each (`"1 hung path"`); empty when healthy.
    pub reasons: Vec<String>,
}

/// A cgroup whose last write or verification failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failing {
    pub cgroup: String,
    pub error: String,
    pub errno: Option<i32>,
}

/// The watchdog's findings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Watchdog {
    /// Paths whose I/O timed out and has not returned.
    pub hung_paths: Vec<HungPath>,
    /// Tasks of managed cgroups in D state longer than `dstate_threshold`.
    pub stuck_tasks: Vec<StuckTask>,
    /// Workloads frozen longer than `frozen_threshold`.
    pub frozen: Vec<Frozen>,
    /// Required cgroup paths missing and not repaired.
    pub missing_paths: Vec<MissingPath>,
    /// Repairs made since start.
    pub repairs: u64,
    /// Cgroups the daemon could not watch (inotify's `max_user_watches`
    /// reached): it reconciles every [`UNWATCHED_RECONCILE_SECS`] seconds
    /// until they are watched again.
    #[serde(default)]
    pub unwatched_cgroups: u64,
    /// Why the last save of the state file failed, when it did.
    #[serde(default)]
    pub state_error: Option<String>,
}

/// CPU power classes (`[power]`, issue #35).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Power {
    /// Whether `[power]` is enabled (off: what is listed is being put back).
    pub on: bool,
    /// Each class in use and the CPUs it is for.
    pub classes: Vec<PowerClass>,
    /// Every file a class holds, with the value read back.
    pub files: Vec<PowerFile>,
    /// How many originals are kept (files to put back one day).
    pub originals: usize,
    /// Class values that could not be planned, each with why.
    pub refused: Vec<String>,
    /// Writes that failed, each with its error: tried again by the next
    /// pass.
    pub failed: Vec<String>,
    /// No CPU has any power file (a VM without cpufreq, cpuidle or
    /// pm_qos): nothing can be set.
    pub unsupported: bool,
    /// Why the power files or the originals file could not be used.
    pub error: Option<String>,
    /// What the operator should change.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub advice: Vec<String>,
}

/// One class in use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PowerClass {
    pub name: String,
    pub cpus: CpuSet,
}

/// One file a class holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PowerFile {
    /// Relative to the sysfs root.
    pub file: String,
    /// The class (for uncore: the highest of its die).
    pub class: String,
    /// What the class wants.
    pub value: String,
    /// What the file read after the last pass (`None`: not read back).
    pub read: Option<String>,
    /// The CPU, for a CPU's file.
    pub cpu: Option<u32>,
}

/// The kernel's own movable work kept off exclusive CPUs (`housekeeping`,
/// issue #42), and what stays there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Housekeeping {
    /// Whether `housekeeping` is on (off: what is listed is being put back).
    pub on: bool,
    /// The CPUs kept clear: the exclusive ones at the last pass.
    pub away: CpuSet,
    /// What was moved off them, with what each had.
    pub moved: Vec<Moved>,
    /// Reads or writes that failed, each with its error: tried again by the
    /// next pass.
    pub failed: Vec<String>,
    /// Per exclusive CPU, the kernel's work that cannot move off it at run
    /// time.
    pub stays: Vec<Stays>,
    /// The kernel command line parameters that would remove what stays,
    /// for these exclusive CPUs (they take a reboot).
    pub boot: Option<String>,
    /// How many originals are kept (things to put back one day).
    pub originals: usize,
    /// Why the kernel's files could not be used, or the originals file
    /// read or saved.
    pub error: Option<String>,
}

/// One thing moved off the exclusive CPUs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Moved {
    /// What it is: `workqueue cpumask`, `workqueue writeback`, `kthread 12
    /// (rcu_preempt)`, `rps eth0 rx-0`, `xps eth0 tx-0`.
    pub what: String,
    /// What it had before the daemon first changed it.
    pub was: CpuSet,
    /// What the daemon wrote.
    pub set: CpuSet,
}

/// The kernel's work that stays on one exclusive CPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stays {
    pub cpu: u32,
    /// Kernel threads bound to it (`ksoftirqd/3`, `kworker/3:1H`), by name.
    pub threads: Vec<String>,
    /// Interrupts the kernel will not move off it (managed ones), by number
    /// and name.
    pub interrupts: Vec<String>,
}

/// Device interrupts kept off exclusive CPUs (`irq_affinity`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Interrupts {
    /// Whether `irq_affinity` is on (off: what is listed is being put back).
    pub on: bool,
    /// The CPUs interrupts are kept off: the exclusive ones when the last
    /// pass over `/proc/irq` was made.
    pub away: CpuSet,
    /// Interrupts moved off them, with what each had.
    pub steered: Vec<SteeredIrq>,
    /// Interrupts the kernel refuses to move off the exclusive CPUs (EIO,
    /// EPERM: kernel-managed ones, x86's timer and cascade), with its
    /// error: not written again while they should move.
    pub refused: Vec<RefusedIrq>,
    /// Interrupts whose affinity could not be read or set otherwise, with
    /// the error: tried again by each pass.
    #[serde(default)]
    pub failed: Vec<RefusedIrq>,
    /// How many times a steered interrupt was found written over by
    /// someone else (irqbalance, the operator), and steered again.
    pub overwritten: u64,
    /// A running irqbalance, with the CPUs it bans.
    pub irqbalance: Option<crate::irq::Irqbalance>,
    /// What the operator should change, when anything.
    pub advice: Vec<String>,
    /// Why `/proc/irq` could not be listed, when it could not.
    pub error: Option<String>,
}

/// Isolated partitions (`isolation = "partition"`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Partitions {
    /// Whether `isolation = "partition"` is on (off: what is listed is
    /// being undone).
    pub on: bool,
    /// Why partitions cannot be made here (cgroup v1, a kernel without
    /// remote partitions): workloads are pinned without them.
    pub refused: Option<String>,
    /// The workloads' cgroups made isolated partitions, with their CPUs.
    pub isolated: Vec<Partition>,
    /// Those that could not be made, or that the kernel made invalid, with
    /// why: pinned by their cpuset alone, tried again when their CPUs or
    /// the online CPUs change.
    pub failing: Vec<FailingPartition>,
    /// CPUs the kernel lists in isolated partitions (the root's
    /// `cpuset.cpus.isolated`) that are none of the daemon's: made by
    /// someone else, or left by a daemon whose state file was lost.
    pub foreign: CpuSet,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Partition {
    pub cgroup: String,
    pub cpus: CpuSet,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailingPartition {
    pub cgroup: String,
    pub cpus: CpuSet,
    /// The kernel's reason (`Parent is not a partition root`) or the error.
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SteeredIrq {
    /// Its number, or `"default"` for `default_smp_affinity`.
    pub irq: String,
    pub was: CpuSet,
    pub now: CpuSet,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusedIrq {
    pub irq: String,
    pub error: String,
}

/// How often the daemon reconciles while some cgroups are unwatched.
pub const UNWATCHED_RECONCILE_SECS: u64 = 10;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HungPath {
    pub path: PathBuf,
    /// The operation that hung (`"read"`, ...).
    pub op: String,
    /// How long ago it was marked, in seconds.
    pub secs: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StuckTask {
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    pub cgroup: String,
    pub wchan: Option<String>,
    /// Whose task it is (the owner of `/proc/PID/task/TID`).
    #[serde(default)]
    pub uid: Option<u32>,
    pub secs: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Frozen {
    pub cgroup: String,
    /// Whose cgroup it is (the owner of its directory).
    #[serde(default)]
    pub owner: Option<u32>,
    pub secs: u64,
    pub thawed: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MissingPath {
    pub path: PathBuf,
    pub problem: String,
}

/// Counters since start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Counters {
    /// Reconciles ended: each part of the periodic reconcile, and each
    /// read of the whole tree.
    pub reconciles: u64,
    /// The last reconcile's duration, in milliseconds.
    pub last_reconcile_ms: u64,
    pub writes: u64,
    pub write_errors: u64,
    pub repairs: u64,
    /// Cgroups known.
    pub cgroups: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::Version;
    use crate::topology::synthetic::Shape;

    /// Aligned is the fewest groups a set's size allows: one NUMA node for
    /// what fits in one, two for what needs two.
    #[test]
    fn alignment_is_the_fewest_groups_the_size_allows() {
        let topo = Shape {
            sockets: 1,
            numa_per_socket: 2,
            l3_per_numa: 1,
            cores_per_l3: 2,
            threads_per_core: 2,
        }
        .build();
        let nodes: Vec<&CpuSet> = topo.numa_nodes().values().collect();
        let one_node = Alignment::of(&topo, nodes[0]);
        assert!(one_node.numa_aligned && one_node.l3_aligned && one_node.whole_cores);
        assert_eq!((one_node.whole_core_count, one_node.shared_cores), (2, 0));
        // Five CPUs need two nodes of four: spanning two is aligned.
        let five = nodes[0].union(&nodes[1].iter().take(1).collect());
        let a = Alignment::of(&topo, &five);
        assert!(a.numa_aligned && a.l3_aligned && !a.whole_cores, "{a:?}");
        // Two CPUs over two nodes are not.
        let two: CpuSet = nodes.iter().filter_map(|n| n.iter().next()).collect();
        let a = Alignment::of(&topo, &two);
        assert!(!a.numa_aligned && !a.l3_aligned, "{a:?}");
        assert_eq!(a.shared_cores, 2);
    }

    #[test]
    fn a_new_status_says_the_machine_and_leaves_the_rest_to_its_builder() {
        let topo = Shape {
            sockets: 1,
            numa_per_socket: 1,
            l3_per_numa: 1,
            cores_per_l3: 4,
            threads_per_core: 2,
        }
        .build();
        let hier = Hierarchy {
            version: Version::V1,
            root: "/sys/fs/cgroup".into(),
            cpuset: "/sys/fs/cgroup/cpuset".into(),
            cpu: None,
            hybrid: true,
        };
        let health = Health {
            state: "unknown".into(),
            reasons: vec!["offline".into()],
        };
        let daemon = Daemon::new(0, 0, false, "offline".into());
        let config = RunningConfig {
            managed: vec!["kubepods".into()],
            ..RunningConfig::default()
        };
        let s = Status::new(daemon.clone(), health.clone(), &hier, &topo, config.clone());
        assert_eq!(
            (s.schema, s.hierarchy.as_str(), s.hybrid),
            (SCHEMA, "v1", true)
        );
        assert_eq!(s.daemon.version, env!("CARGO_PKG_VERSION"));
        assert_eq!((s.daemon, s.health, s.config), (daemon, health, config));
        assert_eq!(s.online.to_string(), "0-7");
        assert_eq!(s.shared_pool, s.online, "nothing assigned");
        assert!(s.reserved.is_empty() && s.workloads.is_empty() && s.failing.is_empty());
        assert_eq!(
            Topology::from_file(s.topology).unwrap().online(),
            topo.online()
        );
        assert_eq!((s.watchdog, s.counters), Default::default());

        let start = Status::starting();
        assert_eq!(start.daemon.summary, "starting");
        assert_eq!(start.daemon.pid, std::process::id());
        assert_eq!(start.health.state, "healthy");
        assert!(start.online.is_empty() && start.hierarchy.is_empty());
    }
}
