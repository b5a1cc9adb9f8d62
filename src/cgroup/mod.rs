//! The cgroup filesystem: which hierarchy is mounted, where each control file of
//! a cgroup lives, and reading one cgroup's state.
//!
//! Everything here is synchronous and takes the file operations as a
//! [`crate::io::Fs`] and the cgroup root as data: the daemon runs these functions
//! as jobs on its I/O threads (a cgroupfs read can hang), tests run them on fake
//! trees in a tempdir. Nothing here decides anything: [`crate::engine`] does.
//!
//! Paths of cgroups are relative to the hierarchy (`kubepods.slice/...`), never
//! absolute, so the same name addresses the cgroup in the cpuset and cpu
//! controllers of cgroup v1 and in the one tree of v2.

pub mod layout;
mod path;
pub mod scope;

pub use path::{Rel, child, depth, is_within, parent, subtree};
pub use scope::Scope;

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::cpuset::CpuSet;
use crate::io::{Fs, Owner};

/// The names of the control files pinctl reads and writes: spelled here
/// alone, so that a reader finds every file the daemon touches in one place.
pub mod file {
    /// The CPUs a cgroup asks for (v1 and v2).
    pub const CPUS: &str = "cpuset.cpus";
    /// The memory nodes of a cgroup (v1 and v2).
    pub const MEMS: &str = "cpuset.mems";
    /// The CPUs a cgroup really gets, in v1.
    pub const EFFECTIVE_V1: &str = "cpuset.effective_cpus";
    /// v1: whether the cpuset forms a scheduler load-balancing domain; the
    /// root's `1` makes the whole machine one domain and every other
    /// cpuset's flag moot (KERNEL-NOTES).
    pub const SCHED_LOAD_BALANCE: &str = "cpuset.sched_load_balance";
    /// The CPUs a cgroup really gets, in v2.
    pub const EFFECTIVE_V2: &str = "cpuset.cpus.effective";
    /// The CPU limit in v2: `"<quota|max> <period>"`.
    pub const CPU_MAX: &str = "cpu.max";
    /// The CPU limit's quota in v1 (`-1`: none).
    pub const CFS_QUOTA: &str = "cpu.cfs_quota_us";
    /// The CPU limit's period in v1.
    pub const CFS_PERIOD: &str = "cpu.cfs_period_us";
    /// The controllers a v2 cgroup may enable for its children.
    pub const CONTROLLERS: &str = "cgroup.controllers";
    /// The controllers a v2 cgroup enables for its children.
    pub const SUBTREE_CONTROL: &str = "cgroup.subtree_control";
    /// The processes of a cgroup (v2; in v1 every hierarchy has one too).
    pub const PROCS: &str = "cgroup.procs";
    /// The threads of a cgroup, in v1.
    pub const TASKS: &str = "tasks";
    /// Freezes a v2 cgroup (`1`) or thaws it (`0`).
    pub const FREEZE_V2: &str = "cgroup.freeze";
    /// The v1 freezer's state (`FROZEN`, `FREEZING`, `THAWED`).
    pub const FREEZER_STATE: &str = "freezer.state";
}

/// The extended attribute that asks for exclusive CPUs (`"4"`; `"0"` keeps a
/// cgroup in the shared pool).
pub const XATTR_CPUS: &str = "user.pinctl.cpus";

/// The extended attribute in which the daemon keeps the CPU limit of a
/// cgroup whose quota it lifted (`unthrottle_exclusive`), as `cpu.max`
/// spells a limit (`"200000 100000"`); empty once the quota is put back. On
/// the cgroup itself, so that the live tree stays the truth: a lost state
/// file or a restart cannot make a lifted quota unpin its workload.
pub const XATTR_QUOTA: &str = "user.pinctl.quota";

/// The extended attribute in which the daemon keeps a pinned workload's
/// baseline: the CPUs it was first given, which a resize keeps (`"4-5"`).
/// On each of its cgroups, emptied once it holds none. On the cgroup, like
/// [`XATTR_QUOTA`], so a lost state file cannot lose it: a restart adopts
/// a live set that holds it, whatever its size.
pub const XATTR_BASELINE: &str = "user.pinctl.baseline";

/// The extended attribute that chooses the power class of a workload's
/// CPUs (`"latency"`), read where the cgroup asks for CPUs and may.
pub const XATTR_CLASS: &str = "user.pinctl.class";

/// The extended attribute that names the devices a workload drives
/// (`"ib0,0000:3b:00.0"`, [`crate::devices::parse_list`]), read where the
/// cgroup asks for CPUs and may. `pinctl run --near` writes it.
pub const XATTR_NEAR: &str = "user.pinctl.near";

/// The extended attribute that chooses a workload's `device_alignment`
/// (`prefer`, `require`, `none`), read as [`XATTR_NEAR`] is.
pub const XATTR_DEVICE_ALIGNMENT: &str = "user.pinctl.device-alignment";

/// Which cgroup version manages cpusets here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Version {
    V1,
    V2,
}

impl Version {
    /// `"v1"` or `"v2"`, as the status document and `verify` say it.
    pub fn as_str(self) -> &'static str {
        match self {
            Version::V1 => "v1",
            Version::V2 => "v2",
        }
    }
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

/// Where the cgroup controllers pinctl uses are mounted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Hierarchy {
    pub version: Version,
    /// The configured cgroup root (`/sys/fs/cgroup`).
    pub root: PathBuf,
    /// The directory cpuset files live under: `root/cpuset` in v1, `root` in v2.
    pub cpuset: PathBuf,
    /// The directory CPU-limit files live under: `root/cpu` (or `cpu,cpuacct`)
    /// in v1, `root` in v2. `None` in v1 when the cpu controller is not mounted.
    pub cpu: Option<PathBuf>,
    /// v1 hierarchies that also carry a v2 mount (`root/unified`): hybrid.
    pub hybrid: bool,
}

/// Why the hierarchy could not be used.
#[derive(Debug, thiserror::Error)]
pub enum HierarchyError {
    #[error(
        "no cpuset controller under {root}: neither a cgroup v1 cpuset hierarchy ({root}/cpuset/cpuset.cpus) nor cgroup v2 with cpuset in {root}/cgroup.controllers"
    )]
    NoCpuset { root: PathBuf },
    #[error("hierarchy = \"{mode}\" was configured, but {root} is not cgroup {mode}")]
    Mismatch { mode: &'static str, root: PathBuf },
    #[error("failed to read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl Hierarchy {
    /// Detects the hierarchy under `root`: cgroup v1 when a cpuset controller is
    /// mounted at `root/cpuset` (hybrid systems included: their cpuset is v1),
    /// otherwise v2 when `root/cgroup.controllers` lists `cpuset`.
    pub fn detect(fs: &dyn Fs, root: &Path, mode: HierarchyMode) -> Result<Self, HierarchyError> {
        let exists = |p: &Path| {
            fs.exists(p).map_err(|source| HierarchyError::Read {
                path: p.to_path_buf(),
                source,
            })
        };
        let v1 = exists(&root.join("cpuset").join(file::CPUS))?;
        let v2 = !v1 && {
            let path = root.join(file::CONTROLLERS);
            exists(&path)?
                && fs
                    .read(&path)
                    .map_err(|source| HierarchyError::Read { path, source })?
                    .split_whitespace()
                    .any(|c| c == "cpuset")
        };
        let version = match (mode, v1, v2) {
            (HierarchyMode::V1, false, _) => {
                return Err(HierarchyError::Mismatch {
                    mode: "v1",
                    root: root.to_path_buf(),
                });
            }
            (HierarchyMode::V2, _, false) => {
                return Err(HierarchyError::Mismatch {
                    mode: "v2",
                    root: root.to_path_buf(),
                });
            }
            (_, true, _) => Version::V1,
            (_, _, true) => Version::V2,
            _ => {
                return Err(HierarchyError::NoCpuset {
                    root: root.to_path_buf(),
                });
            }
        };
        Ok(match version {
            Version::V1 => {
                let mut cpu = None;
                for name in ["cpu", "cpu,cpuacct", "cpuacct,cpu"] {
                    let dir = root.join(name);
                    if exists(&dir.join(file::CFS_QUOTA))? {
                        cpu = Some(dir);
                        break;
                    }
                }
                Hierarchy {
                    version,
                    root: root.to_path_buf(),
                    cpuset: root.join("cpuset"),
                    cpu,
                    hybrid: exists(&root.join("unified").join(file::CONTROLLERS))?,
                }
            }
            Version::V2 => Hierarchy {
                version,
                root: root.to_path_buf(),
                cpuset: root.to_path_buf(),
                cpu: Some(root.to_path_buf()),
                hybrid: false,
            },
        })
    }

    /// The cpuset directory of the cgroup `rel`.
    pub fn dir(&self, rel: &str) -> PathBuf {
        join(&self.cpuset, rel)
    }

    /// `cpuset.cpus` of `rel`: what was asked for.
    pub fn cpus_file(&self, rel: &str) -> PathBuf {
        self.dir(rel).join(file::CPUS)
    }

    /// What the cgroup really gets: `cpuset.cpus.effective` (v2) or
    /// `cpuset.effective_cpus` (v1).
    pub fn effective_file(&self, rel: &str) -> PathBuf {
        self.dir(rel).join(self.effective_name())
    }

    /// The name of the effective-CPUs file in this version.
    pub fn effective_name(&self) -> &'static str {
        match self.version {
            Version::V1 => file::EFFECTIVE_V1,
            Version::V2 => file::EFFECTIVE_V2,
        }
    }

    pub fn mems_file(&self, rel: &str) -> PathBuf {
        self.dir(rel).join(file::MEMS)
    }

    /// `cgroup.subtree_control` of `rel` (v2).
    pub fn subtree_control_file(&self, rel: &str) -> PathBuf {
        self.dir(rel).join(file::SUBTREE_CONTROL)
    }

    /// The file that lists the tasks of `rel` in the cpuset hierarchy: its
    /// threads in v1 (`tasks`), its processes in v2 (`cgroup.procs`).
    pub fn tasks_file(&self, rel: &str) -> PathBuf {
        self.dir(rel).join(match self.version {
            Version::V1 => file::TASKS,
            Version::V2 => file::PROCS,
        })
    }

    /// The freezer state of `rel`: `cgroup.freeze` in v2, `freezer.state`
    /// in the v1 freezer hierarchy.
    pub fn freezer_file(&self, rel: &str) -> PathBuf {
        match self.version {
            Version::V2 => self.dir(rel).join(file::FREEZE_V2),
            Version::V1 => join(&self.root.join("freezer"), rel).join(file::FREEZER_STATE),
        }
    }

    /// What thaws a cgroup when written to [`Self::freezer_file`].
    pub fn thaw_value(&self) -> &'static str {
        match self.version {
            Version::V2 => "0",
            Version::V1 => "THAWED",
        }
    }

    /// The names of the CPU-limit files in the cpu controller, the ones
    /// [`Self::limit_files`] returns the paths of.
    pub fn limit_names(&self) -> &'static [&'static str] {
        match self.version {
            Version::V1 => &[file::CFS_QUOTA, file::CFS_PERIOD],
            Version::V2 => &[file::CPU_MAX],
        }
    }

    /// The file whose write sets (or lifts) the CFS quota of `rel`:
    /// `cpu.max` (v2) or `cpu.cfs_quota_us` (v1), in the cpu controller.
    pub fn quota_file(&self, rel: &str) -> Option<PathBuf> {
        let name = match self.version {
            Version::V1 => file::CFS_QUOTA,
            Version::V2 => file::CPU_MAX,
        };
        self.cpu.as_deref().map(|cpu| join(cpu, rel).join(name))
    }

    /// What [`Self::quota_file`] is written to lift the quota: `max` (which
    /// keeps v2's period) or `-1`.
    pub fn unlimited_quota(&self) -> &'static str {
        match self.version {
            Version::V2 => "max",
            Version::V1 => "-1",
        }
    }

    /// What [`Self::quota_file`] is written to put `limit` there (v1's
    /// period lives in a file of its own, which the daemon never writes).
    pub fn quota_text(&self, limit: &CpuLimit) -> String {
        match (self.version, limit.quota) {
            (_, None) => self.unlimited_quota().to_string(),
            (Version::V2, Some(_)) => limit.to_text(),
            (Version::V1, Some(q)) => q.to_string(),
        }
    }

    /// The files that hold the CPU limit of `rel`, in the cpu controller.
    pub fn limit_files(&self, rel: &str) -> Vec<PathBuf> {
        let Some(cpu) = &self.cpu else {
            return Vec::new();
        };
        let dir = join(cpu, rel);
        self.limit_names().iter().map(|n| dir.join(n)).collect()
    }
}

fn join(base: &Path, rel: &str) -> PathBuf {
    crate::io::name::path(base, rel)
}

/// A CPU limit as the kernel states it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CpuLimit {
    /// Microseconds per period; `None` is unlimited.
    pub quota: Option<u64>,
    pub period: u64,
}

/// Why a CPU limit that looks whole cannot be a request for CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum UnusableLimit {
    /// A period of 0 (the kernel never shows one): no number of CPUs.
    #[error("CPU limit of {quota} µs per period of 0 µs: no number of CPUs")]
    ZeroPeriod { quota: u64 },
    /// A whole number of CPUs beyond any machine pinctl supports.
    #[error(
        "CPU limit of {quota} µs per {period} µs period: {cpus} CPUs, more than the {max} supported",
        max = MAX_CPUS
    )]
    TooManyCpus { quota: u64, period: u64, cpus: u64 },
}

/// The most CPUs a limit can ask for: one more than the highest CPU number.
const MAX_CPUS: u64 = crate::cpuset::MAX_CPU as u64 + 1;

impl CpuLimit {
    /// The limit as a whole number of CPUs (400000/100000 → 4): `Ok(None)`
    /// when it is unlimited or not a whole number (the kubelet leaves those in
    /// the shared pool), an error when it is no request a machine can serve
    /// (a period of 0, more than [`crate::cpuset::MAX_CPU`] + 1 CPUs). Only a
    /// division and a remainder, on a non-zero period: no overflow.
    pub fn whole_cpus(&self) -> Result<Option<usize>, UnusableLimit> {
        let Some(quota) = self.quota else {
            return Ok(None);
        };
        if self.period == 0 {
            return Err(UnusableLimit::ZeroPeriod { quota });
        }
        if quota == 0 || quota % self.period != 0 {
            return Ok(None);
        }
        let cpus = quota / self.period;
        match usize::try_from(cpus) {
            Ok(n) if cpus <= MAX_CPUS => Ok(Some(n)),
            _ => Err(UnusableLimit::TooManyCpus {
                quota,
                period: self.period,
                cpus,
            }),
        }
    }

    /// Parses v2 `cpu.max`: `"400000 100000"` or `"max 100000"`.
    pub fn parse_v2(text: &str) -> Option<CpuLimit> {
        let mut it = text.split_whitespace();
        let quota = it.next()?;
        let period = it.next().map_or(Some(100_000), |p| p.parse().ok())?;
        let quota = if quota == "max" {
            None
        } else {
            Some(quota.parse().ok()?)
        };
        Some(CpuLimit { quota, period })
    }

    /// The limit as `cpu.max` spells it (`"200000 100000"`, `"max 100000"`):
    /// what [`XATTR_QUOTA`] holds, read back by [`Self::parse_v2`].
    pub fn to_text(&self) -> String {
        match self.quota {
            Some(q) => format!("{q} {}", self.period),
            None => format!("max {}", self.period),
        }
    }

    /// Parses v1 `cpu.cfs_quota_us` (`-1` is unlimited) and `cpu.cfs_period_us`.
    pub fn parse_v1(quota: &str, period: &str) -> Option<CpuLimit> {
        let quota: i64 = quota.trim().parse().ok()?;
        let period: u64 = period.trim().parse().ok()?;
        Some(CpuLimit {
            quota: u64::try_from(quota).ok(),
            period,
        })
    }
}

/// One cgroup as read from the filesystem. Fields that could not be read are
/// `None`; the first read error is kept in `error`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    pub rel: Rel,
    pub cpus: Option<CpuSet>,
    pub effective: Option<CpuSet>,
    pub mems: Option<CpuSet>,
    /// The raw value of [`XATTR_CPUS`], when set.
    pub xattr: Option<String>,
    pub limit: Option<CpuLimit>,
    /// The names of its child cgroups, sorted; none when they were not
    /// listed ([`Reads::known_children`]).
    pub children: Vec<String>,
    /// Who owns its directory: whether its requests can be trusted
    /// ([`crate::intent::trusted`]).
    pub owner: Option<Owner>,
    pub error: Option<String>,
    /// Something its request is decided by (its directory, the xattr, the
    /// owner, the CPU limit read) could not be read, and not because the
    /// cgroup is gone: what this reading asks is not what the cgroup asks,
    /// and the request known before stands
    /// ([`crate::engine::Engine::upsert`]). A transient error (EMFILE,
    /// ENOMEM, EIO) never unpins a workload.
    pub unsure: bool,
}

/// Which of a cgroup's optional files [`observe`] reads. `cpuset.cpus`, the
/// xattr and the children are always read; the rest only where they are
/// used, since a full reconcile reads every cgroup and each file is an
/// open, a read and a close (about a tenth of a real v1 reconcile each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reads {
    /// The effective set: what `pinctl verify` checks. The daemon reads it
    /// back after its own writes instead.
    pub effective: bool,
    /// `cpuset.mems`: needed where an empty set must be filled (v1) or where
    /// memory follows the exclusive CPUs (`align_memory`).
    pub mems: bool,
    /// The CPU limit: needed only where the kubelet's rule can apply.
    pub limit: bool,
    /// How many child cgroups the caller knows it has: its children are not
    /// listed when its link count says it has just those ([`Fs::scan_dir`]).
    /// `None`: listed whenever it has any.
    pub known_children: Option<usize>,
}

impl Reads {
    /// Everything.
    pub const ALL: Reads = Reads {
        effective: true,
        mems: true,
        limit: true,
        known_children: None,
    };
}

/// The CPU limit of cgroup `rel` alone, from its files in the cpu
/// controller (`None` when they cannot be read: the controller is not
/// there, or the cgroup is gone).
pub fn read_limit(fs: &dyn Fs, h: &Hierarchy, rel: &str) -> Option<CpuLimit> {
    limit_of(fs, h, rel).ok().flatten()
}

/// [`read_limit`], with the first error other than a file that is not
/// there (no such controller, or the cgroup is gone: no limit).
fn limit_of(
    fs: &dyn Fs,
    h: &Hierarchy,
    rel: &str,
) -> Result<Option<CpuLimit>, (PathBuf, std::io::Error)> {
    let mut texts = Vec::new();
    for file in h.limit_files(rel) {
        match fs.read(&file) {
            Ok(text) => texts.push(Some(text)),
            Err(e) if gone(&e) => texts.push(None),
            Err(e) => return Err((file, e)),
        }
    }
    Ok(match (h.version, texts.as_slice()) {
        (Version::V1, [Some(q), Some(p)]) => CpuLimit::parse_v1(q, p),
        (Version::V2, [Some(max)]) => CpuLimit::parse_v2(max),
        _ => None,
    })
}

/// The limit the daemon kept on `rel` when it lifted its quota
/// ([`XATTR_QUOTA`]), looked for only while the limit `read` from its files
/// is unlimited. That kept limit, where there is one, is what decides the
/// cgroup's request (`kept.or(read)`), so a lifted quota never unpins.
pub fn lifted_limit(
    fs: &dyn Fs,
    h: &Hierarchy,
    rel: &str,
    read: Option<CpuLimit>,
) -> Option<CpuLimit> {
    read.filter(|l| l.quota.is_none())?;
    let raw = fs.get_xattr(&h.dir(rel), XATTR_QUOTA).ok()??;
    let text = std::str::from_utf8(&raw).ok()?;
    CpuLimit::parse_v2(text).filter(|l| l.quota.is_some())
}

/// The baseline kept on `rel` ([`XATTR_BASELINE`]): `None` when there is
/// none, or it cannot be read or parsed (the state file may still know it).
pub fn kept_baseline(fs: &dyn Fs, h: &Hierarchy, rel: &str) -> Option<CpuSet> {
    let raw = fs.get_xattr(&h.dir(rel), XATTR_BASELINE).ok()??;
    let set: CpuSet = std::str::from_utf8(&raw).ok()?.trim().parse().ok()?;
    (!set.is_empty()).then_some(set)
}

/// The power class chosen on `rel` ([`XATTR_CLASS`]): `None` when there is
/// none, or it cannot be read or is not a class name.
pub fn kept_class(fs: &dyn Fs, h: &Hierarchy, rel: &str) -> Option<String> {
    let raw = fs.get_xattr(&h.dir(rel), XATTR_CLASS).ok()??;
    let name = std::str::from_utf8(&raw).ok()?.trim();
    class_name_problem(name).is_none().then(|| name.to_string())
}

/// Whether `name` is a legal class name.
pub fn class_name_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() || name.len() > 64 {
        Some("1 to 64 characters")
    } else if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
    {
        Some("letters, digits, '_', '.' and '-' only")
    } else {
        None
    }
}

/// The text of extended attribute `name` on `rel`, trimmed: `None` when it
/// is absent, empty, or cannot be read or is not UTF-8.
pub fn kept_text(fs: &dyn Fs, h: &Hierarchy, rel: &str, name: &str) -> Option<String> {
    let raw = fs.get_xattr(&h.dir(rel), name).ok()??;
    let text = std::str::from_utf8(&raw).ok()?.trim();
    (!text.is_empty()).then(|| text.to_string())
}

/// Parses a CPU or memory node list read from `path`; one that does not
/// parse is `None`, and the first such error of a reading is noted.
fn parse_set(text: &str, path: &Path, error: &mut Option<String>) -> Option<CpuSet> {
    text.parse::<CpuSet>()
        .map_err(|e| {
            error.get_or_insert_with(|| format!("{}: {e}", path.display()));
        })
        .ok()
}

/// Reads `cpuset.mems` of `rel` on its own into `obs` (a reading by
/// [`observe`] that did not read it), as `observe` would have: a file that
/// is gone leaves it `None`, one that cannot be read or parsed is noted in
/// `obs.error`.
pub fn observe_mems(fs: &dyn Fs, h: &Hierarchy, rel: &str, obs: &mut Observed) {
    let file = h.mems_file(rel);
    obs.mems = match fs.read(&file) {
        Ok(text) => parse_set(&text, &file, &mut obs.error),
        Err(e) => {
            note_read_error(&e, &file, &mut obs.error);
            None
        }
    };
}

/// Whether a failed call says the file or the cgroup is gone: not there
/// (`ENOENT`), or removed while open (kernfs answers `ENODEV`).
pub fn gone(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENODEV)
}

/// Notes a failed read of `path` as a reading's first error; a file that
/// is gone is none (the cgroup is going, or has no such controller).
fn note_read_error(e: &std::io::Error, path: &Path, error: &mut Option<String>) {
    if !gone(e) {
        error.get_or_insert_with(|| format!("{}: {e}", path.display()));
    }
}

/// Reads the state of cgroup `rel` and lists its children, opening its
/// directory once ([`Fs::scan_dir`]); `reads` says which optional files to
/// read (those not read are `None`). Never fails as a whole: an unreadable
/// file leaves its field `None` and notes the error. A cgroup that no longer
/// exists returns `None`.
pub fn observe(fs: &dyn Fs, h: &Hierarchy, rel: &Rel, reads: Reads) -> Option<Observed> {
    let mut obs = Observed {
        rel: rel.clone(),
        ..Observed::default()
    };
    let dir = h.dir(rel);
    // In v2 the CPU limit sits next to the cpuset files; in v1 it lives in the
    // cpu controller's own tree and is read on its own below.
    let v2 = h.version == Version::V2 && h.cpu.as_deref() == Some(h.cpuset.as_path());
    let mut names = vec![file::CPUS];
    if reads.effective {
        names.push(h.effective_name());
    }
    if reads.mems {
        names.push(file::MEMS);
    }
    if reads.limit && v2 {
        names.push(file::CPU_MAX);
    }
    let scan = match fs.scan_dir(&dir, &names, XATTR_CPUS, reads.known_children) {
        Ok(scan) => scan,
        Err(e) if gone(&e) => return None,
        Err(e) => {
            obs.error = Some(format!("{}: {e}", dir.display()));
            obs.unsure = true;
            return Some(obs);
        }
    };
    let mut error: Option<String> = None;
    let mut unsure = false;
    let mut texts = scan.files.into_iter().zip(&names).map(|(r, name)| match r {
        Ok(text) => Some((text, *name)),
        Err(e) => {
            unsure |= *name == file::CPU_MAX && !gone(&e);
            note_read_error(&e, &dir.join(name), &mut error);
            None
        }
    });
    let cpus = texts.next().flatten();
    let effective = if reads.effective {
        texts.next().flatten()
    } else {
        None
    };
    let mems = if reads.mems {
        texts.next().flatten()
    } else {
        None
    };
    let max = if reads.limit && v2 {
        texts.next().flatten()
    } else {
        None
    };
    drop(texts);
    let mut parsed = |r: Option<(String, &str)>| -> Option<CpuSet> {
        let (text, name) = r?;
        parse_set(&text, &dir.join(name), &mut error)
    };
    obs.cpus = parsed(cpus);
    obs.effective = parsed(effective);
    obs.mems = parsed(mems);
    obs.limit = match max {
        _ if !reads.limit => None,
        Some((text, _)) => CpuLimit::parse_v2(&text),
        None if v2 => None,
        None => limit_of(fs, h, rel).unwrap_or_else(|(file, e)| {
            note_read_error(&e, &file, &mut error);
            unsure |= !gone(&e);
            None
        }),
    };
    obs.xattr = match scan.xattr {
        Ok(v) => v.map(|v| String::from_utf8_lossy(&v).trim().to_string()),
        Err(e) => {
            error.get_or_insert_with(|| format!("{}: xattr {XATTR_CPUS}: {e}", dir.display()));
            unsure |= !gone(&e);
            None
        }
    };
    obs.owner = match scan.owner {
        Ok(owner) => Some(owner),
        Err(e) => {
            error.get_or_insert_with(|| format!("{}: owner: {e}", dir.display()));
            unsure |= !gone(&e);
            None
        }
    };
    obs.unsure = unsure;
    obs.children = scan.dirs;
    obs.children.sort();
    obs.error = error;
    Some(obs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(quota: Option<u64>, period: u64) -> Result<Option<usize>, UnusableLimit> {
        CpuLimit { quota, period }.whole_cpus()
    }

    #[test]
    fn whole_cpus_of_ordinary_limits() {
        assert_eq!(limit(Some(400_000), 100_000), Ok(Some(4)));
        assert_eq!(limit(Some(150_000), 100_000), Ok(None), "1.5 CPUs");
        assert_eq!(limit(Some(0), 100_000), Ok(None));
        assert_eq!(limit(None, 100_000), Ok(None), "unlimited");
        assert_eq!(limit(Some(16_384 * 1_000), 1_000), Ok(Some(16_384)));
    }

    /// A pending request for 18446744073709551615 CPUs once came from a
    /// `cpu.max` of `18446744073709551615 1`: a count no machine has is
    /// refused with the numbers, never requested.
    #[test]
    fn a_limit_of_more_cpus_than_supported_is_refused_not_requested() {
        assert_eq!(
            limit(Some(16_385 * 1_000), 1_000),
            Err(UnusableLimit::TooManyCpus {
                quota: 16_385_000,
                period: 1_000,
                cpus: 16_385
            })
        );
        let huge = CpuLimit::parse_v2("18446744073709551615 1").unwrap();
        let e = huge.whole_cpus().unwrap_err();
        assert_eq!(
            e.to_string(),
            "CPU limit of 18446744073709551615 µs per 1 µs period: 18446744073709551615 CPUs, more than the 16384 supported"
        );
        let v1 = CpuLimit::parse_v1("9223372036854775807", "1").unwrap();
        assert!(matches!(
            v1.whole_cpus(),
            Err(UnusableLimit::TooManyCpus { .. })
        ));
    }

    #[test]
    fn extreme_quotas_and_periods_neither_overflow_nor_divide_by_zero() {
        assert_eq!(limit(Some(u64::MAX), u64::MAX), Ok(Some(1)));
        assert_eq!(limit(Some(u64::MAX - 1), u64::MAX), Ok(None));
        assert_eq!(
            limit(Some(u64::MAX), 0),
            Err(UnusableLimit::ZeroPeriod { quota: u64::MAX })
        );
        assert_eq!(limit(None, 0), Ok(None), "unlimited, whatever the period");
        let zero = CpuLimit::parse_v2("400000 0").unwrap();
        assert!(matches!(
            zero.whole_cpus(),
            Err(UnusableLimit::ZeroPeriod { .. })
        ));
        // Beyond u64 the text is not a limit at all.
        assert_eq!(CpuLimit::parse_v2("18446744073709551616 100000"), None);
        assert_eq!(CpuLimit::parse_v2("400000 18446744073709551616"), None);
        assert_eq!(
            CpuLimit::parse_v1("-1", "0").map(|l| l.whole_cpus()),
            Some(Ok(None))
        );
    }
}
