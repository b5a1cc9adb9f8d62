//! The daemon's configuration: `/etc/pinctl/pinctld.toml` in, a validated
//! [`Config`] out.
//!
//! This module owns the configuration keys, their defaults, their validation and
//! the error messages that point at a file, line, column and key. It works in two
//! stages: serde reads the TOML into raw structs that reject unknown keys and
//! keep the position of every value ([`toml::Spanned`]); validation then turns
//! them into a [`Config`] that holds only legal states (CPU lists parsed, globs
//! compiled, durations checked, paths absolute or relative as each key demands).
//! It never does I/O beyond reading the one config file in [`load`]: it does not
//! look at the cgroup tree, sysfs or the topology, so a `Config` says nothing
//! about whether the paths exist or the CPUs are online; that is for the daemon
//! to check at start-up.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};
use toml::Spanned;
use toml::de::{DeTable, DeValue};

use crate::alloc::Options;
use crate::cpuset::{CpuSet, MAX_CPU};
use crate::topology::Topology;

/// Where `pinctld` reads its configuration unless told otherwise.
pub const DEFAULT_PATH: &str = "/etc/pinctl/pinctld.toml";

/// The longest duration any duration key accepts.
pub const MAX_DURATION: Duration = Duration::from_secs(24 * 60 * 60);

/// The most CPUs a `[[rule]]` may ask for, and the largest `reserved_cpus`
/// count: one more than the highest CPU number [`CpuSet`] accepts.
pub const MAX_CPUS: usize = MAX_CPU as usize + 1;

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

const DEFAULT_BUNDLE_DIRS: &[&str] = &[
    "/run/containerd/io.containerd.runtime.v2.task/k8s.io",
    "/run/containerd/io.containerd.runtime.v2.task/moby",
    "/run/containers/storage/overlay-containers",
    "/var/lib/containers/storage/overlay-containers",
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
    /// CPUs never handed out exclusively; they keep the shared pool non-empty.
    pub reserved_cpus: Reserved,
    /// How often the whole tree is reconciled even without events (0 < d <= 24h).
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
    /// Allocator option: whole physical cores only (never with `spread_cores`).
    pub full_pcpus_only: bool,
    /// Allocator option: split requests evenly across NUMA nodes.
    pub distribute_across_numa: bool,
    /// Allocator option: one thread per core before any sibling (never with
    /// `full_pcpus_only`).
    pub spread_cores: bool,
    /// Set `cpuset.mems` to the NUMA nodes of the exclusive CPUs.
    pub align_memory: bool,
    /// Directories holding OCI bundles by container id (absolute).
    pub bundle_dirs: Vec<PathBuf>,
    /// The least severe level the daemon logs.
    pub log_level: LogLevel,
    /// The `[[rule]]` tables, in file order.
    pub rules: Vec<Rule>,
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

/// The `hierarchy` key: which cgroup hierarchy the daemon drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HierarchyMode {
    /// Detect it at start-up.
    Auto,
    /// The v1 `cpuset` controller hierarchy.
    V1,
    /// The unified v2 hierarchy.
    V2,
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
    /// A set of the one glob: unlike `GlobMatcher`, whose construction
    /// panics when the regex cannot be built, a set reports it.
    matcher: GlobSet,
    /// The line of the file the rule starts on (its `[[rule]]` header).
    pub line: usize,
}

/// Why the configuration could not be loaded.
///
/// Messages name the file and, for everything but a read failure, the line and
/// column (1-based, columns in characters) and the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {}: {reason}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The kind of the I/O error, so callers can tell a missing file apart.
        kind: std::io::ErrorKind,
        /// The operating system's description, without the error number.
        reason: String,
    },
    /// The file is larger than [`MAX_FILE_SIZE`]; none of it was parsed.
    #[error("{}: {}larger than the {MAX_FILE_SIZE} bytes a config file may hold", .path.display(), size_of(.size))]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size in bytes, when known (`load` of something other than a
        /// regular file stops reading past the bound).
        size: Option<u64>,
    },
    /// The file is not well-formed TOML.
    #[error("{}:{line}:{column}: invalid TOML: {message}", .path.display())]
    Syntax {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column, in characters.
        column: usize,
        /// What the TOML parser said.
        message: String,
    },
    /// A key the daemon does not know (often a typo).
    #[error("{}:{line}:{column}: unknown key `{key}`{}", .path.display(), in_table(.table))]
    UnknownKey {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column, in characters.
        column: usize,
        /// The key as written.
        key: String,
        /// The table it is in (`rule`), or `None` at the top level.
        table: Option<String>,
    },
    /// A value of the wrong type, or one that fails validation.
    #[error("{}:{line}:{column}: {key}: {message}", .path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column, in characters.
        column: usize,
        /// The key, dotted for keys of a table (`rule.cpus`).
        key: String,
        /// What is wrong with the value.
        message: String,
    },
}

fn size_of(size: &Option<u64>) -> String {
    size.map(|n| format!("{n} bytes, ")).unwrap_or_default()
}

fn in_table(table: &Option<String>) -> String {
    match table {
        Some(t) => format!(" in [[{t}]]"),
        None => String::new(),
    }
}

/// Why a duration string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {input:?}: {reason}")]
pub struct ParseDurationError {
    /// The whole input, as given.
    pub input: String,
    /// What is wrong with it.
    pub reason: String,
}

/// Reads and validates the config file at `path`, reading no more than
/// [`MAX_FILE_SIZE`] bytes and one.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    use std::io::Read;
    let read_error = |e: std::io::Error| ConfigError::Read {
        path: path.to_path_buf(),
        kind: e.kind(),
        reason: io_reason(&e),
    };
    let file = std::fs::File::open(path).map_err(read_error)?;
    let mut bytes = Vec::new();
    (&file)
        .take(MAX_FILE_SIZE as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() > MAX_FILE_SIZE {
        let size = file
            .metadata()
            .ok()
            .filter(|m| m.is_file())
            .map(|m| m.len());
        return Err(ConfigError::TooLarge {
            path: path.to_path_buf(),
            size,
        });
    }
    let text = String::from_utf8(bytes).map_err(|_| {
        read_error(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "stream did not contain valid UTF-8",
        ))
    })?;
    parse(&text, path)
}

/// `io::Error`'s message without the ` (os error N)` suffix.
fn io_reason(e: &std::io::Error) -> String {
    let text = e.to_string();
    match e.raw_os_error() {
        Some(code) => text
            .strip_suffix(&format!(" (os error {code})"))
            .map(str::to_string)
            .unwrap_or(text),
        None => text,
    }
}

/// Validates the configuration in `text`. `path` is used only in error
/// messages. An empty text gives [`Config::default`].
///
/// The work is bounded by the input: a text over [`MAX_FILE_SIZE`] is refused
/// before it is parsed, and a document with an array over [`MAX_ITEMS`] or a
/// string or key over [`MAX_STRING`] before any value is validated (globs
/// compiled, CPU lists parsed).
pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
    if text.len() > MAX_FILE_SIZE {
        return Err(ConfigError::TooLarge {
            path: path.to_path_buf(),
            size: Some(text.len() as u64),
        });
    }
    let validator = Validator { text, path };
    let doc = DeTable::parse(text).map_err(|e| toml_error(text, path, &e))?;
    validator.check_bounds(doc.get_ref())?;
    let raw = RawConfig::deserialize(toml::de::Deserializer::from(doc))
        .map_err(|e| toml_error(text, path, &e))?;
    validator.config(raw)
}

/// Parses a duration written as `<integer><unit>` with unit `ms`, `s`, `m` or
/// `h` (`"500ms"`, `"10s"`, `"2m"`). Strict: no spaces, no sign, no fractions,
/// no missing unit. Zero and anything over [`MAX_DURATION`] are rejected.
pub fn parse_duration(text: &str) -> Result<Duration, ParseDurationError> {
    let err = |reason: String| ParseDurationError {
        input: text.to_string(),
        reason,
    };
    if text.is_empty() {
        return Err(err(
            "empty; write an integer and a unit, e.g. \"10s\"".into()
        ));
    }
    if text.chars().any(char::is_whitespace) {
        return Err(err("spaces are not allowed".into()));
    }
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    if digits.is_empty() {
        return Err(err("must start with an integer, e.g. \"10s\"".into()));
    }
    if unit.starts_with(['.', ',']) {
        return Err(err(
            "fractions are not supported; use a smaller unit, e.g. \"1500ms\"".into(),
        ));
    }
    let millis_per_unit: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "" => return Err(err("missing unit: use ms, s, m or h".into())),
        other => return Err(err(format!("unknown unit {other:?}: use ms, s, m or h"))),
    };
    let too_long = || err("longer than the maximum of 24h".into());
    // Digits that overflow u64 are certainly longer than a day.
    let count: u64 = digits.parse().map_err(|_| too_long())?;
    let millis = count.checked_mul(millis_per_unit).ok_or_else(too_long)?;
    if millis == 0 {
        return Err(err("must be greater than zero".into()));
    }
    let duration = Duration::from_millis(millis);
    if duration > MAX_DURATION {
        return Err(too_long());
    }
    Ok(duration)
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
            reserved_cpus: Reserved::List(CpuSet::from_range(0, 0)),
            reconcile_interval: Duration::from_secs(10),
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
            full_pcpus_only: false,
            distribute_across_numa: false,
            spread_cores: false,
            align_memory: false,
            bundle_dirs: DEFAULT_BUNDLE_DIRS.iter().map(PathBuf::from).collect(),
            log_level: LogLevel::Info,
            rules: Vec::new(),
        }
    }
}

/// What a running daemon makes of a changed configuration file
/// ([`Config::reload`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reload {
    /// The configuration to run with from now on.
    pub config: Config,
    /// The keys whose new value is in force, in [`Config`]'s order.
    pub applied: Vec<&'static str>,
    /// The keys whose new value waits for a restart ([`Config::RESTART_KEYS`]),
    /// in [`Config`]'s order; `config` keeps their running values.
    pub deferred: Vec<&'static str>,
}

impl Config {
    /// The keys a running daemon keeps until it restarts: where the kernel's
    /// files, the state and the socket are and which hierarchy is driven (its
    /// I/O threads, watchers and socket were set up for them), the I/O
    /// timeout, and where bundles are found (a bundle once read is
    /// remembered). In [`Config`]'s order.
    pub const RESTART_KEYS: &[&str] = &[
        "cgroup_root",
        "sysfs_root",
        "proc_root",
        "state_file",
        "socket",
        "read_timeout",
        "hierarchy",
        "bundle_dirs",
    ];

    /// The running configuration `self` updated to `new`, a configuration
    /// read again from the file (SIGHUP): every key takes its new value but
    /// the [`Self::RESTART_KEYS`], which keep their running one.
    pub fn reload(&self, new: Config) -> Reload {
        let mut config = new;
        let mut applied = Vec::new();
        let mut deferred = Vec::new();
        macro_rules! compare {
            ($key:ident) => {
                if config.$key != *$key {
                    let name = stringify!($key);
                    if Self::RESTART_KEYS.contains(&name) {
                        config.$key = $key.clone();
                        deferred.push(name);
                    } else {
                        applied.push(name);
                    }
                }
            };
        }
        // Every key bound by name, and each binding used by `compare!`: a new
        // key fails to compile here, and one not compared is an unused
        // variable (denied by clippy in CI).
        let Config {
            cgroup_root,
            sysfs_root,
            proc_root,
            state_file,
            socket,
            reserved_cpus,
            reconcile_interval,
            read_timeout,
            dstate_threshold,
            frozen_threshold,
            thaw_frozen,
            watchdog_interval,
            repair,
            repair_cooldown,
            required_paths,
            shared_cgroups,
            managed,
            hierarchy,
            kubelet_rule,
            full_pcpus_only,
            distribute_across_numa,
            spread_cores,
            align_memory,
            bundle_dirs,
            log_level,
            rules,
        } = self;
        compare!(cgroup_root);
        compare!(sysfs_root);
        compare!(proc_root);
        compare!(state_file);
        compare!(socket);
        compare!(reserved_cpus);
        compare!(reconcile_interval);
        compare!(read_timeout);
        compare!(dstate_threshold);
        compare!(frozen_threshold);
        compare!(thaw_frozen);
        compare!(watchdog_interval);
        compare!(repair);
        compare!(repair_cooldown);
        compare!(required_paths);
        compare!(shared_cgroups);
        compare!(managed);
        compare!(hierarchy);
        compare!(kubelet_rule);
        compare!(full_pcpus_only);
        compare!(distribute_across_numa);
        compare!(spread_cores);
        compare!(align_memory);
        compare!(bundle_dirs);
        compare!(log_level);
        compare!(rules);
        Reload {
            config,
            applied,
            deferred,
        }
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

impl HierarchyMode {
    /// The value as written in the file.
    pub fn as_str(self) -> &'static str {
        match self {
            HierarchyMode::Auto => "auto",
            HierarchyMode::V1 => "v1",
            HierarchyMode::V2 => "v2",
        }
    }
}

impl fmt::Display for HierarchyMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
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
            && self.line == other.line
    }
}

impl Eq for Rule {}

// ---------------------------------------------------------------------------
// Stage 1: the raw file, as serde reads it.

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    cgroup_root: Option<Spanned<String>>,
    sysfs_root: Option<Spanned<String>>,
    proc_root: Option<Spanned<String>>,
    state_file: Option<Spanned<String>>,
    socket: Option<Spanned<String>>,
    reserved_cpus: Option<Spanned<RawReserved>>,
    reconcile_interval: Option<Spanned<String>>,
    read_timeout: Option<Spanned<String>>,
    dstate_threshold: Option<Spanned<String>>,
    frozen_threshold: Option<Spanned<String>>,
    thaw_frozen: Option<bool>,
    watchdog_interval: Option<Spanned<String>>,
    repair: Option<bool>,
    repair_cooldown: Option<Spanned<String>>,
    required_paths: Option<Vec<Spanned<String>>>,
    shared_cgroups: Option<Vec<Spanned<String>>>,
    managed: Option<Vec<Spanned<String>>>,
    hierarchy: Option<Spanned<String>>,
    kubelet_rule: Option<bool>,
    full_pcpus_only: Option<Spanned<bool>>,
    distribute_across_numa: Option<bool>,
    spread_cores: Option<Spanned<bool>>,
    align_memory: Option<bool>,
    bundle_dirs: Option<Vec<Spanned<String>>>,
    log_level: Option<Spanned<String>>,
    #[serde(default)]
    rule: Vec<Spanned<RawRule>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    #[serde(rename = "match")]
    pattern: Spanned<String>,
    cpus: Spanned<RawInt>,
    numa: Option<Spanned<String>>,
}

/// Any TOML integer, range-checked later so the message can say which range.
struct RawInt(i128);

/// `reserved_cpus`: a CPU list string or a CPU count.
enum RawReserved {
    List(String),
    Count(i128),
}

struct IntVisitor;

impl Visitor<'_> for IntVisitor {
    type Value = i128;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an integer")
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<i128, E> {
        Ok(v.into())
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<i128, E> {
        Ok(v.into())
    }
    fn visit_i128<E: de::Error>(self, v: i128) -> Result<i128, E> {
        Ok(v)
    }
    fn visit_u128<E: de::Error>(self, v: u128) -> Result<i128, E> {
        Ok(i128::try_from(v).unwrap_or(i128::MAX))
    }
}

impl<'de> Deserialize<'de> for RawInt {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(IntVisitor).map(RawInt)
    }
}

struct ReservedVisitor;

impl Visitor<'_> for ReservedVisitor {
    type Value = RawReserved;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a CPU list such as \"0-1\" or a CPU count such as 2")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<RawReserved, E> {
        Ok(RawReserved::List(v.to_string()))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<RawReserved, E> {
        IntVisitor.visit_i64(v).map(RawReserved::Count)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<RawReserved, E> {
        IntVisitor.visit_u64(v).map(RawReserved::Count)
    }
    fn visit_i128<E: de::Error>(self, v: i128) -> Result<RawReserved, E> {
        IntVisitor.visit_i128(v).map(RawReserved::Count)
    }
    fn visit_u128<E: de::Error>(self, v: u128) -> Result<RawReserved, E> {
        IntVisitor.visit_u128(v).map(RawReserved::Count)
    }
}

impl<'de> Deserialize<'de> for RawReserved {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ReservedVisitor)
    }
}

// ---------------------------------------------------------------------------
// Turning toml's errors (a message and a byte span) into `ConfigError`.

/// The 1-based line and column (in characters) of byte `offset` of `text`.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

fn toml_error(text: &str, path: &Path, err: &toml::de::Error) -> ConfigError {
    let span = err.span().unwrap_or(0..0);
    let (line, column) = line_col(text, span.start);
    let path = path.to_path_buf();
    let message = err.message();
    let keys = match DeTable::parse(text) {
        Ok(doc) => key_at(doc.get_ref(), span.start),
        // Not well-formed TOML: there are no keys to speak of.
        Err(_) => Vec::new(),
    };
    if keys.is_empty() {
        let mut message = message.to_string();
        if message == "duplicate key"
            && let Some(key) = text.get(span.clone()).filter(|k| !k.is_empty())
        {
            message = format!("duplicate key `{key}`");
        }
        return ConfigError::Syntax {
            path,
            line,
            column,
            message,
        };
    }
    if let Some(key) = backticked(message, "unknown field `") {
        let table = (keys.len() > 1).then(|| keys[..keys.len() - 1].join("."));
        return ConfigError::UnknownKey {
            path,
            line,
            column,
            key: key.to_string(),
            table,
        };
    }
    let key = keys.join(".");
    let message = match backticked(message, "missing field `") {
        Some(missing) => format!("missing required key `{missing}`"),
        None if key == "rule" && message.starts_with("invalid type: map,") => {
            "expected an array of tables: write [[rule]], not [rule]".to_string()
        }
        None => humanize(message),
    };
    ConfigError::Invalid {
        path,
        line,
        column,
        key,
        message,
    }
}

/// The text between `prefix` (which ends in a backtick) and the next backtick.
fn backticked<'a>(message: &'a str, prefix: &str) -> Option<&'a str> {
    let rest = message.strip_prefix(prefix)?;
    rest.split_once('`').map(|(name, _)| name)
}

/// The dotted key path of the innermost key or value whose span holds `offset`.
fn key_at(doc: &DeTable<'_>, offset: usize) -> Vec<String> {
    let mut best: Option<(usize, Vec<String>)> = None;
    walk_table(doc, offset, &mut Vec::new(), &mut best);
    best.map(|(_, keys)| keys).unwrap_or_default()
}

fn walk_table(
    table: &DeTable<'_>,
    offset: usize,
    keys: &mut Vec<String>,
    best: &mut Option<(usize, Vec<String>)>,
) {
    for (key, value) in table.iter() {
        keys.push(key.get_ref().to_string());
        consider(key.span(), offset, keys, best);
        walk_value(value, offset, keys, best);
        keys.pop();
    }
}

fn walk_value(
    value: &Spanned<DeValue<'_>>,
    offset: usize,
    keys: &mut Vec<String>,
    best: &mut Option<(usize, Vec<String>)>,
) {
    consider(value.span(), offset, keys, best);
    match value.get_ref() {
        DeValue::Table(table) => walk_table(table, offset, keys, best),
        DeValue::Array(items) => {
            for item in items.iter() {
                walk_value(item, offset, keys, best);
            }
        }
        _ => {}
    }
}

/// Keeps `keys` if `span` holds `offset` and is narrower than the best so far;
/// on a tie the deeper path wins, since it was visited later.
fn consider(
    span: Range<usize>,
    offset: usize,
    keys: &[String],
    best: &mut Option<(usize, Vec<String>)>,
) {
    let holds = span.contains(&offset) || (span.is_empty() && span.start == offset);
    let width = span.len();
    if holds && best.as_ref().is_none_or(|(w, _)| width <= *w) {
        *best = Some((width, keys.to_vec()));
    }
}

/// Rewrites serde's `invalid type: X, expected Y` in TOML's words.
fn humanize(message: &str) -> String {
    let rest = message
        .strip_prefix("invalid type: ")
        .or_else(|| message.strip_prefix("invalid value: "));
    if let Some((found, expected)) = rest.and_then(|r| r.rsplit_once(", expected ")) {
        return format!(
            "expected {}, found {}",
            toml_noun(expected),
            toml_noun(found)
        );
    }
    message.to_string()
}

fn toml_noun(serde_noun: &str) -> &str {
    match serde_noun {
        "sequence" | "a sequence" => "an array",
        "map" | "a map" => "a table",
        s if s.starts_with("struct ") => "a table",
        s => s,
    }
}

// ---------------------------------------------------------------------------
// Stage 2: validation.

struct Validator<'a> {
    text: &'a str,
    path: &'a Path,
}

/// A validated value and where the file wrote it (`None` for a default).
struct Located<T> {
    value: T,
    span: Option<Range<usize>>,
}

/// The validation errors found so far. Every key is validated, and the one
/// reported is the first in the file, so fixing errors top to bottom works.
#[derive(Default)]
struct Errors(Vec<ConfigError>);

impl Errors {
    /// The value, or `None` with the error kept.
    fn keep<T>(&mut self, result: Result<T, ConfigError>) -> Option<T> {
        result.map_err(|e| self.0.push(e)).ok()
    }

    fn first_in_file(self) -> Result<(), ConfigError> {
        let position = |e: &ConfigError| match e {
            ConfigError::Invalid { line, column, .. }
            | ConfigError::UnknownKey { line, column, .. }
            | ConfigError::Syntax { line, column, .. } => (*line, *column),
            ConfigError::Read { .. } | ConfigError::TooLarge { .. } => (0, 0),
        };
        match self.0.into_iter().min_by_key(position) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Validator<'_> {
    fn error(&self, span: &Range<usize>, key: &str, message: impl Into<String>) -> ConfigError {
        let (line, column) = line_col(self.text, span.start);
        ConfigError::Invalid {
            path: self.path.to_path_buf(),
            line,
            column,
            key: key.to_string(),
            message: message.into(),
        }
    }

    fn line(&self, span: &Range<usize>) -> usize {
        line_col(self.text, span.start).0
    }

    /// Refuses a document that holds more than any legitimate configuration:
    /// an array over [`MAX_ITEMS`] entries, a string or key over
    /// [`MAX_STRING`] bytes. One walk over the whole document, for every key
    /// (including unknown ones, which would otherwise be quoted whole), so no
    /// key can forget it.
    fn check_bounds(&self, doc: &DeTable<'_>) -> Result<(), ConfigError> {
        let mut errors = Errors::default();
        self.bound_table(doc, &mut Vec::new(), &mut errors);
        errors.first_in_file()
    }

    fn bound_table(&self, table: &DeTable<'_>, keys: &mut Vec<String>, errors: &mut Errors) {
        for (key, value) in table.iter() {
            let name = key.get_ref();
            if name.len() > MAX_STRING {
                let shown: String = name.chars().take(32).collect();
                errors.0.push(self.error(
                    &key.span(),
                    &format!("{shown}…"),
                    format!(
                        "a key of {} bytes; at most {MAX_STRING} are allowed",
                        name.len()
                    ),
                ));
                continue;
            }
            keys.push(name.to_string());
            self.bound_value(value, keys, errors);
            keys.pop();
        }
    }

    fn bound_value(
        &self,
        value: &Spanned<DeValue<'_>>,
        keys: &mut Vec<String>,
        errors: &mut Errors,
    ) {
        match value.get_ref() {
            DeValue::String(s) if s.len() > MAX_STRING => errors.0.push(self.error(
                &value.span(),
                &keys.join("."),
                format!(
                    "a string of {} bytes; at most {MAX_STRING} are allowed",
                    s.len()
                ),
            )),
            DeValue::Table(table) => self.bound_table(table, keys, errors),
            DeValue::Array(items) => {
                if let Some(first_too_many) = items.get(MAX_ITEMS) {
                    errors.0.push(self.error(
                        &first_too_many.span(),
                        &keys.join("."),
                        format!("{} entries; at most {MAX_ITEMS} are allowed", items.len()),
                    ));
                }
                for item in items.iter() {
                    self.bound_value(item, keys, errors);
                }
            }
            _ => {}
        }
    }

    fn config(&self, raw: RawConfig) -> Result<Config, ConfigError> {
        let d = Config::default();
        let mut errors = Errors::default();

        let mut paths = |raw: Option<Spanned<String>>, key: &str, default: PathBuf| {
            let result = raw.map_or(Ok(default.clone()), |p| self.abs_path(&p, key));
            errors.keep(result).unwrap_or(default)
        };
        let cgroup_root = paths(raw.cgroup_root, "cgroup_root", d.cgroup_root);
        let sysfs_root = paths(raw.sysfs_root, "sysfs_root", d.sysfs_root);
        let proc_root = paths(raw.proc_root, "proc_root", d.proc_root);
        let state_file = paths(raw.state_file, "state_file", d.state_file);
        let socket = match raw.socket {
            Some(s) => errors.keep(self.socket(&s)).unwrap_or(d.socket),
            None => d.socket,
        };
        let reserved_cpus = match raw.reserved_cpus {
            Some(r) => errors.keep(self.reserved(&r)).unwrap_or(d.reserved_cpus),
            None => d.reserved_cpus,
        };
        let mut durations = |raw: Option<Spanned<String>>, key: &str, default: Duration| {
            let result = raw.map_or(Ok(default), |t| self.duration(&t, key));
            errors.keep(result).unwrap_or(default)
        };
        let reconcile_interval = durations(
            raw.reconcile_interval,
            "reconcile_interval",
            d.reconcile_interval,
        );
        let read_timeout = durations(raw.read_timeout, "read_timeout", d.read_timeout);
        let dstate_threshold =
            durations(raw.dstate_threshold, "dstate_threshold", d.dstate_threshold);
        let frozen_threshold =
            durations(raw.frozen_threshold, "frozen_threshold", d.frozen_threshold);
        let watchdog_interval = durations(
            raw.watchdog_interval,
            "watchdog_interval",
            d.watchdog_interval,
        );
        let repair_cooldown = durations(raw.repair_cooldown, "repair_cooldown", d.repair_cooldown);
        let required = self.cgroup_paths(raw.required_paths, "required_paths", &d.required_paths);
        let required = errors.keep(required).unwrap_or_default();
        let shared = self.cgroup_paths(raw.shared_cgroups, "shared_cgroups", &d.shared_cgroups);
        let shared = errors.keep(shared).unwrap_or_default();
        let managed = self.cgroup_paths(raw.managed, "managed", &d.managed);
        let managed = errors.keep(managed).unwrap_or_default();
        let hierarchy = match raw.hierarchy {
            Some(h) => errors.keep(self.hierarchy(&h)).unwrap_or(d.hierarchy),
            None => d.hierarchy,
        };
        let bundle_dirs = match raw.bundle_dirs {
            Some(dirs) => dirs
                .iter()
                .filter_map(|dir| errors.keep(self.abs_path(dir, "bundle_dirs")))
                .collect(),
            None => d.bundle_dirs,
        };
        let log_level = match raw.log_level {
            Some(l) => errors.keep(self.log_level(&l)).unwrap_or(d.log_level),
            None => d.log_level,
        };
        let rules: Vec<Located<Rule>> = raw
            .rule
            .into_iter()
            .filter_map(|r| errors.keep(self.rule(r)))
            .collect();
        // Combinations are judged only on values that are valid one by one, so
        // a conflict is never reported against a default standing in for a
        // rejected value.
        errors.first_in_file()?;

        let mut errors = Errors::default();
        errors.keep(self.check_cpu_options(&raw.full_pcpus_only, &raw.spread_cores));
        errors.keep(self.check_shared_nesting(&shared, &managed, &rules));
        errors.first_in_file()?;

        Ok(Config {
            cgroup_root,
            sysfs_root,
            proc_root,
            state_file,
            socket,
            reserved_cpus,
            reconcile_interval,
            read_timeout,
            dstate_threshold,
            frozen_threshold,
            thaw_frozen: raw.thaw_frozen.unwrap_or(d.thaw_frozen),
            watchdog_interval,
            repair: raw.repair.unwrap_or(d.repair),
            repair_cooldown,
            required_paths: required.into_iter().map(|p| p.value).collect(),
            shared_cgroups: shared.into_iter().map(|p| p.value).collect(),
            managed: managed.into_iter().map(|p| p.value).collect(),
            hierarchy,
            kubelet_rule: raw.kubelet_rule.unwrap_or(d.kubelet_rule),
            full_pcpus_only: raw
                .full_pcpus_only
                .map_or(d.full_pcpus_only, Spanned::into_inner),
            distribute_across_numa: raw
                .distribute_across_numa
                .unwrap_or(d.distribute_across_numa),
            spread_cores: raw.spread_cores.map_or(d.spread_cores, Spanned::into_inner),
            align_memory: raw.align_memory.unwrap_or(d.align_memory),
            bundle_dirs,
            log_level,
            rules: rules.into_iter().map(|r| r.value).collect(),
        })
    }

    fn abs_path(&self, raw: &Spanned<String>, key: &str) -> Result<PathBuf, ConfigError> {
        let text = raw.get_ref();
        let reason = if text.is_empty() {
            "empty"
        } else if text.contains('\0') {
            "contains a NUL byte"
        } else if !text.starts_with('/') {
            "must be absolute"
        } else {
            return Ok(PathBuf::from(text));
        };
        Err(self.error(&raw.span(), key, format!("invalid path {text:?}: {reason}")))
    }

    fn socket(&self, raw: &Spanned<String>) -> Result<PathBuf, ConfigError> {
        let path = self.abs_path(raw, "socket")?;
        let len = raw.get_ref().len();
        if len > MAX_SOCKET_PATH {
            return Err(self.error(
                &raw.span(),
                "socket",
                format!(
                    "invalid path {:?}: {len} bytes, longer than the {MAX_SOCKET_PATH} a Unix socket address holds",
                    raw.get_ref()
                ),
            ));
        }
        Ok(path)
    }

    fn reserved(&self, raw: &Spanned<RawReserved>) -> Result<Reserved, ConfigError> {
        let span = raw.span();
        let key = "reserved_cpus";
        // At least one CPU: the reserved CPUs are what keeps exclusive
        // allocations from ever taking the whole shared pool.
        match raw.get_ref() {
            RawReserved::List(text) => {
                let set: CpuSet = text
                    .parse()
                    .map_err(|e| self.error(&span, key, format!("{e}")))?;
                if set.is_empty() {
                    return Err(self.error(
                        &span,
                        key,
                        format!(
                            "invalid CPU list {text:?}: reserve at least one CPU, so the shared pool is never empty"
                        ),
                    ));
                }
                Ok(Reserved::List(set))
            }
            RawReserved::Count(n) => match usize::try_from(*n) {
                Ok(n) if (1..=MAX_CPUS).contains(&n) => Ok(Reserved::Count(n)),
                _ => Err(self.error(
                    &span,
                    key,
                    format!(
                        "invalid CPU count {n}: must be from 1 to {MAX_CPUS}, so the shared pool is never empty"
                    ),
                )),
            },
        }
    }

    fn duration(&self, raw: &Spanned<String>, key: &str) -> Result<Duration, ConfigError> {
        parse_duration(raw.get_ref()).map_err(|e| self.error(&raw.span(), key, e.to_string()))
    }

    fn cgroup_paths(
        &self,
        raw: Option<Vec<Spanned<String>>>,
        key: &str,
        default: &[String],
    ) -> Result<Vec<Located<String>>, ConfigError> {
        let Some(raw) = raw else {
            let located = default.iter().map(|p| Located {
                value: p.clone(),
                span: None,
            });
            return Ok(located.collect());
        };
        raw.into_iter()
            .map(|p| {
                let span = p.span();
                let text = p.into_inner();
                match relative_path_problem(&text) {
                    Some(reason) => Err(self.error(
                        &span,
                        key,
                        format!("invalid cgroup path {text:?}: {reason}"),
                    )),
                    None => Ok(Located {
                        value: text,
                        span: Some(span),
                    }),
                }
            })
            .collect()
    }

    fn hierarchy(&self, raw: &Spanned<String>) -> Result<HierarchyMode, ConfigError> {
        match raw.get_ref().as_str() {
            "auto" => Ok(HierarchyMode::Auto),
            "v1" => Ok(HierarchyMode::V1),
            "v2" => Ok(HierarchyMode::V2),
            other => Err(self.error(
                &raw.span(),
                "hierarchy",
                format!("invalid hierarchy {other:?}: expected one of auto, v1, v2"),
            )),
        }
    }

    fn log_level(&self, raw: &Spanned<String>) -> Result<LogLevel, ConfigError> {
        match raw.get_ref().as_str() {
            "error" => Ok(LogLevel::Error),
            "warn" => Ok(LogLevel::Warn),
            "info" => Ok(LogLevel::Info),
            "debug" => Ok(LogLevel::Debug),
            "trace" => Ok(LogLevel::Trace),
            other => Err(self.error(
                &raw.span(),
                "log_level",
                format!(
                    "invalid log level {other:?}: expected one of error, warn, info, debug, trace"
                ),
            )),
        }
    }

    /// A validated rule, located at its `match` value.
    fn rule(&self, raw: Spanned<RawRule>) -> Result<Located<Rule>, ConfigError> {
        let line = self.line(&raw.span());
        let raw = raw.into_inner();

        let pattern_span = raw.pattern.span();
        let pattern = raw.pattern.into_inner();
        let invalid_glob = |reason: &dyn fmt::Display| {
            self.error(
                &pattern_span,
                "rule.match",
                format!("invalid glob {pattern:?}: {reason}"),
            )
        };
        // Cgroup paths are relative and normalised, so a pattern that is not
        // could never match.
        if let Some(reason) = relative_path_problem(&pattern) {
            return Err(invalid_glob(&reason));
        }
        // Checked before globset parses the pattern: globset and regex
        // recurse into each nested alternation.
        let depth = alternation_depth(&pattern);
        if depth > MAX_GLOB_NESTING {
            return Err(invalid_glob(&format!(
                "alternations nest {depth} deep; at most {MAX_GLOB_NESTING} are allowed"
            )));
        }
        // `literal_separator` keeps `*` and `?` within one path component, so
        // `hpc.slice/*` does not match `hpc.slice/job-1.scope/child`.
        let glob = GlobBuilder::new(&pattern)
            .literal_separator(true)
            .build()
            .map_err(|e| invalid_glob(e.kind()))?;
        // Whatever else the regex build refuses (its size limit) is an error
        // of the rule too.
        let matcher = GlobSetBuilder::new()
            .add(glob)
            .build()
            .map_err(|e| invalid_glob(e.kind()))?;

        let cpus = match usize::try_from(raw.cpus.get_ref().0) {
            Ok(n) if (1..=MAX_CPUS).contains(&n) => n,
            _ => {
                return Err(self.error(
                    &raw.cpus.span(),
                    "rule.cpus",
                    format!(
                        "invalid CPU count {}: must be from 1 to {MAX_CPUS}",
                        raw.cpus.get_ref().0
                    ),
                ));
            }
        };

        let numa = match raw.numa {
            None => Vec::new(),
            Some(numa) => self.numa(&numa)?,
        };
        Ok(Located {
            value: Rule {
                pattern,
                cpus,
                numa,
                matcher,
                line,
            },
            span: Some(pattern_span),
        })
    }

    fn numa(&self, raw: &Spanned<String>) -> Result<Vec<u32>, ConfigError> {
        let text = raw.get_ref();
        let invalid = |reason: &str| {
            self.error(
                &raw.span(),
                "rule.numa",
                format!("invalid NUMA node list {text:?}: {reason}"),
            )
        };
        // NUMA node lists use the kernel's CPU list format (`0-1,3`).
        let nodes: CpuSet = text.parse().map_err(|e: crate::cpuset::ParseCpuSetError| {
            invalid(&e.reason.replace("CPU", "NUMA node"))
        })?;
        if nodes.is_empty() {
            return Err(invalid("empty; leave `numa` out for no preference"));
        }
        Ok(nodes.iter().collect())
    }

    /// A cgroup confined to the shared pool cannot hold a cgroup with exclusive
    /// CPUs: a child's `cpuset.cpus` must lie within its parent's (v1 refuses
    /// the write, v2 clips `cpuset.cpus.effective` to the parent's). Checked for
    /// the managed subtrees and for the literal part of each rule's pattern.
    fn check_shared_nesting(
        &self,
        shared: &[Located<String>],
        managed: &[Located<String>],
        rules: &[Located<Rule>],
    ) -> Result<(), ConfigError> {
        let mut errors = Errors::default();
        for s in shared {
            let holds = |m: &str| {
                format!(
                    "{:?} holds managed subtree {m:?}; {SHARED_NESTING}",
                    s.value
                )
            };
            let inside = |path: &str| {
                format!(
                    "{path:?} lies inside shared cgroup {:?}; {SHARED_NESTING}",
                    s.value
                )
            };
            for m in managed.iter().filter(|m| is_within(&m.value, &s.value)) {
                // Report at whichever of the two the file wrote last: that is
                // the line that made the combination wrong.
                let error = match (&s.span, &m.span) {
                    (Some(ss), Some(ms)) if ss.start > ms.start => {
                        self.error(ss, "shared_cgroups", holds(&m.value))
                    }
                    (_, Some(ms)) => self.error(ms, "managed", inside(&m.value)),
                    (Some(ss), None) => self.error(ss, "shared_cgroups", holds(&m.value)),
                    (None, None) => continue,
                };
                errors.0.push(error);
            }
            for r in rules {
                let literal = literal_components(&r.value.pattern).join("/");
                if literal.is_empty() || !is_within(&literal, &s.value) {
                    continue;
                }
                if let Some(span) = &r.span {
                    errors
                        .0
                        .push(self.error(span, "rule.match", inside(&r.value.pattern)));
                }
            }
        }
        errors.first_in_file()
    }

    fn check_cpu_options(
        &self,
        full_pcpus_only: &Option<Spanned<bool>>,
        spread_cores: &Option<Spanned<bool>>,
    ) -> Result<(), ConfigError> {
        let (Some(full), Some(spread)) = (full_pcpus_only, spread_cores) else {
            return Ok(());
        };
        if !(*full.get_ref() && *spread.get_ref()) {
            return Ok(());
        }
        let (later, key, other, earlier) = if spread.span().start > full.span().start {
            (spread, "spread_cores", "full_pcpus_only", full)
        } else {
            (full, "full_pcpus_only", "spread_cores", spread)
        };
        Err(self.error(
            &later.span(),
            key,
            format!(
                "cannot be true together with {other} (line {}): whole physical cores only and one thread per core exclude each other",
                self.line(&earlier.span())
            ),
        ))
    }
}

const SHARED_NESTING: &str = "a cgroup confined to the shared pool cannot hold exclusive CPUs";

/// Whether cgroup path `path` is `ancestor` or lies below it.
fn is_within(path: &str, ancestor: &str) -> bool {
    path.strip_prefix(ancestor)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// Why `text` is not a clean path relative to the cgroup root, if it is not.
fn relative_path_problem(text: &str) -> Option<&'static str> {
    let mut components = text.split('/');
    if text.is_empty() {
        Some("empty")
    } else if text.contains('\0') {
        Some("contains a NUL byte")
    } else if text.starts_with('/') {
        Some("must be relative to cgroup_root, not absolute")
    } else if components.clone().any(|c| c == "..") {
        Some("`..` components are not allowed")
    } else if components.clone().any(|c| c == ".") {
        Some("`.` components are not allowed")
    } else if components.any(str::is_empty) {
        Some("empty component (a doubled or trailing `/`)")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_col_counts_lines_and_characters_and_never_panics() {
        let cases: &[(&str, usize, (usize, usize))] = &[
            ("", 0, (1, 1)),
            ("", 5, (1, 1)),
            ("ab\ncd", 1, (1, 2)),
            ("ab\ncd", 3, (2, 1)),
            ("ab\ncd", 99, (2, 3)),
            ("ab\n", 3, (2, 1)),
            ("é = 1", 3, (1, 3)),
            // Inside a multi-byte character: the character's own column.
            ("xé", 2, (1, 2)),
            ("a\r\nb", 3, (2, 1)),
        ];
        for &(text, offset, want) in cases {
            assert_eq!(line_col(text, offset), want, "{text:?} at {offset}");
        }
    }

    #[test]
    fn key_at_finds_the_innermost_key() {
        let text = "a = 1\n[[rule]]\nmatch = \"x\"\ncpus = 2\n";
        let doc = DeTable::parse(text).unwrap();
        let at = |needle: &str| key_at(doc.get_ref(), text.find(needle).unwrap());
        assert_eq!(at("1"), ["a"]);
        assert_eq!(at("[[rule]]"), ["rule"]);
        assert_eq!(at("\"x\""), ["rule", "match"]);
        assert_eq!(at("cpus"), ["rule", "cpus"]);
        assert!(key_at(doc.get_ref(), 5).is_empty(), "the newline is no key");
    }

    #[test]
    fn serde_messages_read_as_toml() {
        let cases = [
            (
                "invalid type: map, expected a sequence",
                "expected an array, found a table",
            ),
            (
                "invalid type: sequence, expected struct RawRule",
                "expected a table, found an array",
            ),
            (
                "invalid type: string \"x\", expected a boolean",
                "expected a boolean, found string \"x\"",
            ),
            ("something else", "something else"),
        ];
        for (serde, want) in cases {
            assert_eq!(humanize(serde), want);
        }
    }

    #[test]
    fn io_reason_drops_the_error_number() {
        let e = std::io::Error::from_raw_os_error(libc::ENOENT);
        assert_eq!(io_reason(&e), "No such file or directory");
        let e = std::io::Error::other("custom");
        assert_eq!(io_reason(&e), "custom");
    }

    #[test]
    fn literal_components_stop_at_the_first_glob() {
        assert_eq!(literal_components("a/b/c"), ["a", "b", "c"]);
        assert_eq!(literal_components("a/b-*/c"), ["a"]);
        assert_eq!(literal_components("a/[bc]/d"), ["a"]);
        assert_eq!(literal_components("a/{b,c}"), ["a"]);
        assert_eq!(literal_components("a/b\\*"), ["a"]);
        assert!(literal_components("**/x").is_empty());
    }

    #[test]
    fn is_within_respects_component_boundaries() {
        assert!(is_within("system.slice", "system.slice"));
        assert!(is_within("system.slice/a", "system.slice"));
        assert!(!is_within("system.slice2", "system.slice"));
        assert!(!is_within("system", "system.slice"));
    }
}
