//! The daemon's configuration: `/etc/pinctl/pinctld.toml` in, a validated
//! [`Config`] out.
//!
//! - Owns the keys, their defaults, their validation, and errors that name
//!   the file, line, column and key.
//! - Two stages: serde reads raw structs that reject unknown keys and keep
//!   each value's position ([`toml::Spanned`]); validation makes a
//!   [`Config`] that holds only legal states.
//! - Must never do I/O beyond reading the one file in [`load`]: whether paths
//!   exist or CPUs are online is the daemon's to check at start-up.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use globset::GlobSet;

use crate::alloc::Options;
use crate::cgroup::{HierarchyMode, Scope};
use crate::cpuset::{CpuSet, MAX_CPUS};
use crate::topology::Topology;

mod file;
mod power;
mod raw;
mod reload;
mod validate;

pub use power::{
    Class, EPP_NAMES, Freq, MAX_CLASSES, MAX_FREQ_KHZ, MAX_RESUME_LATENCY_US, Power, ResumeLatency,
    parse_freq,
};

pub use file::{ConfigError, ParseDurationError, load, parse, parse_duration};
pub use reload::Reload;

/// Where `pinctld` reads its configuration unless told otherwise.
pub const DEFAULT_PATH: &str = "/etc/pinctl/pinctld.toml";

/// The longest duration any duration key accepts.
pub const MAX_DURATION: Duration = Duration::from_secs(24 * 60 * 60);

/// The largest config file accepted, in bytes (1 MiB). The shipped file is
/// about 9 KiB; the bound is checked before anything is parsed, and `load`
/// reads no further, so neither a huge file nor a device that never ends costs
/// more than this.
pub const MAX_FILE_SIZE: usize = 1 << 20;

/// The most entries any array may hold, the `[[rule]]` tables included. The
/// work of validating (and the daemon's of matching every cgroup against every
/// rule) grows with it; a node needs a handful.
pub const MAX_ITEMS: usize = 1024;

/// The longest string value or key, in bytes: `PATH_MAX` (4096), the most a
/// path, a cgroup path or a glob on one can usefully be, and the page a sysfs
/// CPU list is printed into.
pub const MAX_STRING: usize = 4096;

/// How deep `{a,{b,c}}` alternations may nest in a rule's glob. Each level is
/// two levels of groups in the regex globset builds, and past about 125 levels
/// regex's nesting limit makes globset fail; a real glob nests one or two.
pub const MAX_GLOB_NESTING: usize = 32;

/// The longest socket path a Unix socket address holds (`sun_path` is 108 bytes,
/// one of them the terminating NUL).
const MAX_SOCKET_PATH: usize = 107;

const DEFAULT_CDI_SPEC_DIRS: &[&str] = &["/etc/cdi", "/var/run/cdi"];

const DEFAULT_BUNDLE_DIRS: &[&str] = &[
    "/run/containerd/io.containerd.runtime.v2.task/k8s.io",
    "/run/containerd/io.containerd.runtime.v2.task/moby",
    "/run/containers/storage/overlay-containers",
    "/var/lib/containers/storage/overlay-containers",
    "/var/lib/containers/storage/vfs-containers",
    "/var/lib/containers/storage/btrfs-containers",
    "/var/lib/containers/storage/zfs-containers",
    "/run/docker/containerd/daemon/io.containerd.runtime.v2.task/moby",
];

/// The validated daemon configuration.
///
/// Built by [`parse`] or [`load`], or [`Config::default`] for the documented
/// defaults (what the shipped `etc/pinctl/pinctld.toml` gives). The fields are
/// public so that tests can point the roots at fake trees; every value
/// [`parse`] produces satisfies the rules documented on each field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Where the cgroup filesystem is mounted (absolute).
    pub cgroup_root: PathBuf,
    /// Where sysfs is mounted (absolute).
    pub sysfs_root: PathBuf,
    /// Where procfs is mounted (absolute).
    pub proc_root: PathBuf,
    /// The daemon's state file (absolute).
    pub state_file: PathBuf,
    /// The control socket the `pinctl` CLI talks to (absolute, at most 107
    /// bytes).
    pub socket: PathBuf,
    /// A TCP address that serves `/metrics` alone, for Prometheus (which
    /// cannot scrape a Unix socket); `None`: none (the default).
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// CPUs never handed out exclusively; they keep the shared pool non-empty.
    pub reserved_cpus: Reserved,
    /// The cgroups of the managed subtrees that run on the shared pool
    /// (Burstable and BestEffort pods, any container without exclusive
    /// CPUs) never get the reserved CPUs, which stay for the
    /// `shared_cgroups` (the kubelet's `strict-cpu-reservation`).
    pub strict_reservation: bool,
    /// How often every cgroup is read whole even without events, in
    /// parts spread evenly over it (0 < d <= 24h).
    pub reconcile_interval: Duration,
    /// How long one read or write of a kernel file may take before it is
    /// abandoned (0 < d <= 24h).
    pub read_timeout: Duration,
    /// How long a task may sit in uninterruptible sleep (D state) before the
    /// daemon reports it (0 < d <= 24h).
    pub dstate_threshold: Duration,
    /// How long a cgroup may stay frozen before the daemon reports it
    /// (0 < d <= 24h).
    pub frozen_threshold: Duration,
    /// Thaw a cgroup that stayed frozen longer than `frozen_threshold`.
    pub thaw_frozen: bool,
    /// How often the watchdog checks the required paths, stuck tasks and
    /// frozen cgroups (0 < d <= 24h).
    pub watchdog_interval: Duration,
    /// Recreate a missing required path (else only report it).
    pub repair: bool,
    /// The shortest time between two repairs of the same path (0 < d <= 24h).
    pub repair_cooldown: Duration,
    /// Cgroups, relative to `cgroup_root`, that must exist in every hierarchy,
    /// besides the kubepods paths the watchdog derives from `managed`. Same
    /// rules as `shared_cgroups`.
    pub required_paths: Vec<String>,
    /// Cgroups, relative to `cgroup_root`, confined to the shared pool. Never
    /// absolute, empty, or with empty, `.` or `..` components; no managed
    /// subtree lies inside one.
    pub shared_cgroups: Vec<String>,
    /// Subtrees, relative to `cgroup_root`, that the daemon watches and manages:
    /// every cgroup under them gets its exclusive CPUs or the shared pool. Same
    /// rules as `shared_cgroups`.
    pub managed: Vec<String>,
    /// Which cgroup hierarchy to drive.
    pub hierarchy: HierarchyMode,
    /// Give exclusive CPUs to the containers of Guaranteed pods with a
    /// whole-number CPU limit, as the kubelet's static policy does.
    pub kubelet_rule: bool,
    /// The kubelet's CPU manager checkpoint (`None`: not looked at). With
    /// the `static` policy there, the kubelet owns the CPUs of its pods:
    /// pinctld leaves the kubepods subtrees and the kubelet's exclusive
    /// CPUs alone, and says so ([`crate::kubelet`]).
    pub kubelet_cpu_manager_state: Option<PathBuf>,
    /// Allocator option: whole physical cores only (never with `spread_cores`).
    pub full_pcpus_only: bool,
    /// Allocator option: split requests evenly across NUMA nodes.
    pub distribute_across_numa: bool,
    /// Allocator option: one thread per core before any sibling (never with
    /// `full_pcpus_only`).
    pub spread_cores: bool,
    /// Set `cpuset.mems` to the NUMA nodes of the exclusive CPUs.
    pub align_memory: bool,
    /// Whose CFS quota is lifted while they hold exclusive CPUs.
    pub unthrottle_exclusive: Unthrottle,
    /// Keep device interrupts off exclusive CPUs (`/proc/irq`), and put
    /// back what they had when the CPUs stop being exclusive.
    pub irq_affinity: bool,
    /// Move the kernel's own movable work (unbound workqueues, kernel
    /// threads, new interrupts, RPS and XPS) off exclusive CPUs, and put it
    /// back when they stop being exclusive ([`crate::housekeeping`]).
    pub housekeeping: bool,
    /// Whether an exclusive workload's cgroup becomes an isolated cgroup v2
    /// partition.
    pub isolation: Isolation,
    /// How a workload's CPUs follow the NUMA nodes of the devices it drives
    /// ([`crate::devices`]), unless it says otherwise.
    pub device_alignment: DeviceAlignment,
    /// Directories of CDI spec files (absolute), in CDI's order: a device
    /// named in a later one wins ([`crate::devices::cdi`]).
    pub cdi_spec_dirs: Vec<PathBuf>,
    /// Directories holding OCI bundles by container id (absolute).
    pub bundle_dirs: Vec<PathBuf>,
    /// The Unix socket of the bus systemd is on (absolute, at most 107
    /// bytes), over which a scope's `AllowedCPUs=` is told the pin on cgroup
    /// v2 ([`crate::systemd`]); `None` (`""` in the file) tells systemd
    /// nothing.
    pub systemd_bus: Option<PathBuf>,
    /// The least severe level the daemon logs.
    pub log_level: LogLevel,
    /// The `[[rule]]` tables, in file order.
    pub rules: Vec<Rule>,
    /// The `[run]` table: who may ask for CPUs with `pinctl run`.
    pub run: Run,
    /// The `[slurm]` table: what pinctld does beside Slurm's jobs.
    pub slurm: Slurm,
    /// The `[nri]` table: pinctld as a plugin of the container runtime.
    pub nri: Nri,
    /// Where the original value of every power file is kept before the
    /// daemon first writes it (absolute): on the runtime directory, which a
    /// reboot empties exactly when sysfs forgets what was written.
    pub power_originals: PathBuf,
    /// Where what `housekeeping` moved had before is kept (absolute): on
    /// the runtime directory, as `power_originals`.
    pub housekeeping_originals: PathBuf,
    /// The `[[class]]` tables, in file order, names unique.
    pub classes: Vec<Class>,
    /// The `[power]` table: the switch and the default class of each kind
    /// of CPU (each names one of `classes`).
    pub power: Power,
}

/// The `[run]` table (issue #33): the front door of `pinctl run`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    /// Serve the run socket at all (off by default).
    pub enabled: bool,
    /// The run socket (absolute, at most 107 bytes): 0666, since the
    /// daemon decides who may ask by the peer's credentials.
    pub socket: PathBuf,
    /// Users who may ask, by name (root always may).
    pub users: Vec<String>,
    /// Groups whose members may ask, by name.
    pub groups: Vec<String>,
    /// The most CPUs of one run (0: no cap).
    pub max_cpus: usize,
    /// The most CPUs one user's runs hold at once (0: no cap).
    pub max_cpus_per_user: usize,
    /// The cgroup runs are made in, relative to the cgroup root; its last
    /// name ends in `.slice`.
    pub slice: String,
    /// Where a run's memory goes when it does not say (`--mem`).
    pub mem: crate::run::MemPolicy,
    /// Serve an ask from a process in a Slurm job (by default refused: the
    /// run would leave the job's cgroup).
    pub allow_slurm_jobs: bool,
}

impl Default for Run {
    fn default() -> Self {
        Run {
            enabled: false,
            socket: "/run/pinctl/run.sock".into(),
            users: Vec::new(),
            groups: Vec::new(),
            max_cpus: 0,
            max_cpus_per_user: 0,
            slice: "pinctl.slice".into(),
            mem: crate::run::MemPolicy::Prefer,
            allow_slurm_jobs: false,
        }
    }
}

/// The `[nri]` table: pinctld as an NRI plugin of containerd or CRI-O, so
/// that a container is made with its CPUs ([`crate::nri`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nri {
    /// Register with the runtime at all (off by default).
    pub enabled: bool,
    /// The runtime's NRI socket (absolute, at most 107 bytes).
    pub socket: PathBuf,
    /// The name pinctld registers as.
    pub plugin_name: String,
    /// Its place among the runtime's plugins: two digits, lower first.
    pub plugin_index: String,
    /// A container that asks for exclusive CPUs and gets no decision (no
    /// CPUs free, or none in time) is refused rather than made on the
    /// shared pool.
    pub required: bool,
}

impl Default for Nri {
    fn default() -> Self {
        Nri {
            enabled: false,
            socket: "/var/run/nri/nri.sock".into(),
            plugin_name: "pinctl".into(),
            plugin_index: "10".into(),
            required: false,
        }
    }
}

/// The `[slurm]` table.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Slurm {
    /// Keep the CPUs of Slurm's running jobs quiet (off by default): no
    /// workload or run gets them, every cgroup pinctld confines leaves them,
    /// and so do interrupts (`irq_affinity`) and the kernel's movable work
    /// ([`crate::slurm`]).
    pub housekeeping: bool,
}

/// The `reserved_cpus` key: CPUs kept out of every exclusive allocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reserved {
    /// Exactly these CPUs (never empty).
    List(CpuSet),
    /// This many CPUs (1 to [`MAX_CPUS`]), taken from the lowest-numbered whole
    /// cores when the daemon starts, and again by a reload that changes it.
    Count(usize),
}

/// The `unthrottle_exclusive` key: the exclusive workloads whose CFS quota
/// (`cpu.max`, `cpu.cfs_quota_us`) is lifted while they hold their CPUs, and
/// put back when they stop, as the kubelet does since 1.33
/// (`DisableCPUQuotaWithExclusiveCPUs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unthrottle {
    /// None: every quota stays as it is.
    None,
    /// The kubelet rule's workloads (the default), whose quota is their
    /// limit's own CPUs: the quota can only throttle them.
    Kubelet,
    /// Every exclusive workload, whatever asked for its CPUs.
    All,
}

impl Unthrottle {
    /// The value as written in the file.
    pub fn as_str(self) -> &'static str {
        match self {
            Unthrottle::None => "none",
            Unthrottle::Kubelet => "kubelet",
            Unthrottle::All => "all",
        }
    }
}

/// The `isolation` key: what, beyond its cpuset, keeps the scheduler off
/// an exclusive workload's CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Isolation {
    /// Nothing (the default): the CPUs are the workload's by `cpuset.cpus`.
    None,
    /// Its top cgroup is made an isolated partition (cgroup v2, Linux 6.7
    /// and later; [`crate::partition`]): the kernel takes the CPUs out of
    /// every other cgroup and out of load balancing.
    Partition,
}

impl Isolation {
    /// The value as written in the file.
    pub fn as_str(self) -> &'static str {
        match self {
            Isolation::None => "none",
            Isolation::Partition => "partition",
        }
    }
}

/// The `device_alignment` key: how a workload's CPUs follow the NUMA
/// nodes of the devices it drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum DeviceAlignment {
    /// On those nodes when there is room there, else as near as the rest
    /// allows (the default).
    #[default]
    Prefer,
    /// On those nodes alone: it waits in the shared pool until they have
    /// room.
    Require,
    /// Its devices are not looked at.
    None,
}

impl DeviceAlignment {
    /// The value as written in the file.
    pub fn as_str(self) -> &'static str {
        match self {
            DeviceAlignment::Prefer => "prefer",
            DeviceAlignment::Require => "require",
            DeviceAlignment::None => "none",
        }
    }
}

impl std::str::FromStr for DeviceAlignment {
    type Err = String;

    fn from_str(s: &str) -> Result<DeviceAlignment, String> {
        match s {
            "prefer" => Ok(DeviceAlignment::Prefer),
            "require" => Ok(DeviceAlignment::Require),
            "none" => Ok(DeviceAlignment::None),
            other => Err(format!(
                "invalid value {:?}: expected one of prefer, require, none",
                other.chars().take(40).collect::<String>()
            )),
        }
    }
}

/// The `log_level` key, from least to most verbose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LogLevel {
    /// Only errors.
    Error,
    /// Errors and warnings.
    Warn,
    /// The default: also what the daemon changes.
    Info,
    /// Also why it decides what it does.
    Debug,
    /// Everything.
    Trace,
}

/// One validated `[[rule]]`: cgroups whose path matches `pattern` get `cpus`
/// exclusive CPUs.
#[derive(Debug, Clone)]
pub struct Rule {
    /// The glob as written in the file, relative to the cgroup root.
    pub pattern: String,
    /// How many exclusive CPUs a matching cgroup gets (1 to [`MAX_CPUS`]).
    pub cpus: usize,
    /// NUMA nodes to prefer, ascending; empty for no preference.
    pub numa: Vec<u32>,
    /// The power class its cgroups' CPUs get, instead of `[power]`'s
    /// `exclusive` (one of [`Config::classes`]).
    pub class: Option<String>,
    /// The devices its cgroups drive ([`crate::devices`]): their CPUs go
    /// on those devices' NUMA nodes.
    pub near: Vec<crate::devices::DeviceRef>,
    /// Its own `device_alignment`, over the file's.
    pub device_alignment: Option<DeviceAlignment>,
    /// A set of the one glob: unlike `GlobMatcher`, whose construction
    /// panics when the regex cannot be built, a set reports it.
    matcher: GlobSet,
    /// The line of the file the rule starts on (its `[[rule]]` header).
    pub line: usize,
}

/// The documented defaults, which the shipped `etc/pinctl/pinctld.toml` spells
/// out key by key (a test holds the two equal).
impl Default for Config {
    fn default() -> Self {
        Config {
            cgroup_root: "/sys/fs/cgroup".into(),
            sysfs_root: "/sys".into(),
            proc_root: "/proc".into(),
            state_file: "/var/lib/pinctl/state.json".into(),
            socket: "/run/pinctl/pinctl.sock".into(),
            metrics_listen: None,
            reserved_cpus: Reserved::List(CpuSet::from_range(0, 0)),
            strict_reservation: false,
            reconcile_interval: Duration::from_secs(60),
            read_timeout: Duration::from_secs(5),
            dstate_threshold: Duration::from_secs(60),
            frozen_threshold: Duration::from_secs(300),
            thaw_frozen: false,
            watchdog_interval: Duration::from_secs(10),
            repair: true,
            repair_cooldown: Duration::from_secs(60),
            required_paths: Vec::new(),
            shared_cgroups: vec!["system.slice".into(), "user.slice".into()],
            managed: vec!["kubepods.slice".into(), "kubepods".into()],
            hierarchy: HierarchyMode::Auto,
            kubelet_rule: true,
            kubelet_cpu_manager_state: Some("/var/lib/kubelet/cpu_manager_state".into()),
            full_pcpus_only: false,
            distribute_across_numa: false,
            spread_cores: false,
            align_memory: false,
            unthrottle_exclusive: Unthrottle::Kubelet,
            irq_affinity: false,
            housekeeping: false,
            isolation: Isolation::None,
            device_alignment: DeviceAlignment::Prefer,
            cdi_spec_dirs: DEFAULT_CDI_SPEC_DIRS.iter().map(PathBuf::from).collect(),
            bundle_dirs: DEFAULT_BUNDLE_DIRS.iter().map(PathBuf::from).collect(),
            systemd_bus: Some("/run/dbus/system_bus_socket".into()),
            log_level: LogLevel::Info,
            rules: Vec::new(),
            run: Run::default(),
            nri: Nri::default(),
            slurm: Slurm::default(),
            power_originals: "/run/pinctl/power.json".into(),
            housekeeping_originals: "/run/pinctl/housekeeping.json".into(),
            classes: Vec::new(),
            power: Power::default(),
        }
    }
}

impl Config {
    /// Where devices are looked up ([`crate::devices::locate_all`]): its
    /// sysfs, `/proc` and CDI spec directories.
    pub fn device_roots(&self) -> crate::devices::Roots<'_> {
        crate::devices::Roots {
            sys: &self.sysfs_root,
            proc_root: &self.proc_root,
            cdi_dirs: &self.cdi_spec_dirs,
        }
    }

    /// The class called `name`, if one is defined.
    pub fn class(&self, name: &str) -> Option<&Class> {
        self.classes.iter().find(|c| c.name == name)
    }

    /// The first rule, in file order, whose pattern matches `rel_path` (a cgroup
    /// path relative to the cgroup root, without a leading `/`).
    pub fn rule_for(&self, rel_path: &str) -> Option<&Rule> {
        self.rules.iter().find(|r| r.matches(rel_path))
    }

    /// The allocator options this configuration asks for, with `reserved` (the
    /// resolved [`Reserved`]) and no NUMA preference; a rule's `numa` is the
    /// caller's to add.
    pub fn alloc_options(&self, reserved: CpuSet) -> Options {
        Options {
            reserved,
            full_pcpus_only: self.full_pcpus_only,
            distribute_across_numa: self.distribute_across_numa,
            spread_cores: self.spread_cores,
            numa_preference: Vec::new(),
            align_by_socket: false,
            prefer: CpuSet::new(),
        }
    }

    /// The directories, relative to the cgroup root, that the watcher must
    /// watch: the `managed` subtrees, then for each rule the literal directory
    /// part of its pattern (`hpc.slice/job-*.scope` gives `hpc.slice`; `""` is the
    /// root itself). In that order, without duplicates; a root may lie inside
    /// another.
    pub fn watch_roots(&self) -> Vec<String> {
        let mut roots: Vec<String> = Vec::new();
        let candidates = self
            .managed
            .iter()
            .cloned()
            .chain(self.rules.iter().map(|r| r.watch_root()));
        for root in candidates {
            if !roots.contains(&root) {
                roots.push(root);
            }
        }
        roots
    }
}

// The scope of a configuration is built here, not in `cgroup::scope`: the
// configuration knows cgroups, and cgroups know nothing of it.
impl Scope {
    /// The scope of a configuration.
    pub fn of(cfg: &Config) -> Scope {
        // The managed subtrees and the rules' roots; with `[run]` on, the
        // slice runs are made in is managed too.
        let mut managed = cfg.managed.clone();
        if cfg.run.enabled && !managed.contains(&cfg.run.slice) {
            managed.push(cfg.run.slice.clone());
        }
        let watched = managed.iter().cloned().chain(cfg.watch_roots()).collect();
        Scope::new(managed, cfg.shared_cgroups.clone(), watched)
    }
}

impl Reserved {
    /// The reserved CPUs on `topology`: the list as given, or the first `n` CPUs
    /// of the lowest-numbered cores, whole cores first (see
    /// [`Topology::lowest_cores`]).
    pub fn resolve(&self, topology: &Topology) -> CpuSet {
        match self {
            Reserved::List(set) => set.clone(),
            Reserved::Count(n) => topology.lowest_cores(*n),
        }
    }
}

impl fmt::Display for Reserved {
    /// As it would be written in the file: `"0-1"` or `2`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reserved::List(set) => write!(f, "\"{set}\""),
            Reserved::Count(n) => write!(f, "{n}"),
        }
    }
}

impl LogLevel {
    /// The value as written in the file, which is also a `tracing` filter
    /// directive.
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
            LogLevel::Trace => "trace",
        }
    }
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Rule {
    /// Whether the rule applies to the cgroup at `rel_path` (relative to the
    /// cgroup root, without a leading `/`). `*`, `?` and `[..]` never match a
    /// `/`; `**` spans directories.
    pub fn matches(&self, rel_path: &str) -> bool {
        self.matcher.is_match(rel_path)
    }

    /// The literal directory part of the pattern: the components before the
    /// first one holding a glob metacharacter, and never the last component,
    /// since the matching cgroup is created inside that directory.
    fn watch_root(&self) -> String {
        let components: Vec<&str> = self.pattern.split('/').collect();
        let literal = literal_components(&self.pattern);
        literal[..literal.len().min(components.len() - 1)].join("/")
    }
}

/// How deep `{..}` alternations nest in `pattern`, read as globset reads it:
/// a `\` escapes the next character, and braces inside a `[..]` class are
/// literal. A class left unclosed hides the rest, but globset refuses that
/// pattern before it builds anything.
fn alternation_depth(pattern: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                chars.next();
            }
            '[' => {
                // One `!` or `^` negates; a `]` first after that is a member,
                // not the end of the class.
                chars.next_if(|&c| c == '!' || c == '^');
                chars.next();
                for c in chars.by_ref() {
                    if c == ']' {
                        break;
                    }
                }
            }
            '{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// The leading components of `pattern` that hold no glob metacharacter.
fn literal_components(pattern: &str) -> Vec<&str> {
    pattern
        .split('/')
        .take_while(|c| !c.contains(['*', '?', '[', ']', '{', '}', '\\']))
        .collect()
}

impl PartialEq for Rule {
    /// Rules are equal when they were written the same on the same line; the
    /// matcher follows from the pattern.
    fn eq(&self, other: &Self) -> bool {
        self.pattern == other.pattern
            && self.cpus == other.cpus
            && self.numa == other.numa
            && self.class == other.class
            && self.near == other.near
            && self.device_alignment == other.device_alignment
            && self.line == other.line
    }
}

impl Eq for Rule {}

#[cfg(test)]
mod tests;
