//! The watchdog's checks: cgroup paths that must exist (and their repair),
//! tasks stuck in uninterruptible sleep (found by [`crate::procfs`]), and
//! cgroups left frozen.
//!
//! Split like the rest of the daemon: the functions that touch the kernel take
//! a [`Fs`] and the roots as arguments and run on the I/O threads (one call per
//! item, so a hung path costs only its own item); what to report and when to
//! repair is decided by the plain trackers here ([`Repairs`], [`Stuck`]), which
//! take the time as an argument.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::api;
use crate::cgroup::layout::{Driver, Kind, classify};
use crate::cgroup::{self, Hierarchy, Version, file};
use crate::io::Fs;

/// One mounted cgroup hierarchy: in v1 one per controller (or named
/// hierarchy such as `systemd`), in v2 the one tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mount {
    /// Its directory (`/sys/fs/cgroup/memory`, or `/sys/fs/cgroup` in v2).
    pub dir: PathBuf,
    /// How a new cgroup in it is set up.
    pub kind: MountKind,
}

/// What a new cgroup needs in a hierarchy before anything can join it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MountKind {
    /// v1 cpuset: `cpuset.cpus` and `cpuset.mems` start empty, and a task
    /// cannot join until both are set (`ENOSPC`).
    V1Cpuset,
    /// v1 freezer: `freezer.state` lives here.
    V1Freezer,
    /// Any other v1 hierarchy: the directory is enough.
    V1,
    /// v2: the parent must enable the controllers for its children.
    V2,
}

/// The controllers a repaired v2 cgroup is given (those its parent has): what
/// the kubelet enables on the kubepods tree.
const V2_CONTROLLERS: [&str; 6] = ["cpuset", "cpu", "io", "memory", "hugetlb", "pids"];

/// Lists the hierarchies under the cgroup root: in v2 the root itself; in v1
/// every directory under the root that is a hierarchy (holds `cgroup.procs`),
/// except the hybrid mode's `unified` v2 tree and the links that name a
/// shared mount twice (`cpu -> cpu,cpuacct`).
pub fn mounts(fs: &dyn Fs, hier: &Hierarchy) -> io::Result<Vec<Mount>> {
    if hier.version == Version::V2 {
        return Ok(vec![Mount {
            dir: hier.root.clone(),
            kind: MountKind::V2,
        }]);
    }
    let entries = fs.read_dir(&hier.root)?;
    // `cpu` and `cpuacct` are links to `cpu,cpuacct`: one hierarchy.
    let joined: Vec<&str> = entries
        .iter()
        .filter(|e| e.name.contains(','))
        .flat_map(|e| e.name.split(','))
        .collect();
    let mut out = Vec::new();
    for entry in &entries {
        if !entry.is_dir || entry.name == "unified" || joined.contains(&entry.name.as_str()) {
            continue;
        }
        let dir = hier.root.join(&entry.name);
        if !fs.exists(&dir.join(file::PROCS))? {
            continue;
        }
        let controllers: Vec<&str> = entry.name.split(',').collect();
        let kind = if controllers.contains(&"cpuset") {
            MountKind::V1Cpuset
        } else if controllers.contains(&"freezer") {
            MountKind::V1Freezer
        } else {
            MountKind::V1
        };
        out.push(Mount { dir, kind });
    }
    out.sort_by(|a, b| a.dir.cmp(&b.dir));
    Ok(out)
}

/// The cgroups (relative paths) that must exist in every hierarchy, parents
/// first: for each `managed` kubepods root present in at least one hierarchy
/// (`present`), the root and its QoS parents in the naming of its driver;
/// then `extra` as configured. A node runs one cgroup driver, so the other
/// driver's root is absent everywhere and nothing of it is required.
pub fn required(
    managed: &[String],
    extra: &[String],
    present: impl Fn(&str) -> bool,
) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut add = |rel: String| {
        if !out.contains(&rel) {
            out.push(rel);
        }
    };
    for root in managed {
        let Kind::KubepodsRoot { driver } = classify(root) else {
            continue;
        };
        if !present(root) {
            continue;
        }
        add(root.clone());
        for qos in ["burstable", "besteffort"] {
            let child = match driver {
                Driver::Systemd => {
                    let name = root.rsplit('/').next().unwrap_or(root);
                    let stem = name.strip_suffix(".slice").unwrap_or(name);
                    format!("{stem}-{qos}.slice")
                }
                Driver::Cgroupfs => qos.to_string(),
            };
            add(cgroup::child(root, &child));
        }
    }
    for rel in extra {
        add(rel.clone());
    }
    out
}

/// What [`repair`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repaired {
    /// The directories made, parents first.
    pub created: Vec<PathBuf>,
}

/// Makes `rel` exist in `mount`, with each missing directory on the way set
/// up before the next is made: in v1 cpuset its `cpuset.mems` and then
/// `cpuset.cpus` copied from its parent (so a task can join at once; the
/// daemon narrows them as for any cgroup it manages), in v2 the controllers
/// the kubelet uses (cpuset, cpu, io, memory, hugetlb, pids) that the parent
/// has, enabled by the parent. Stops at the first error, which names the file
/// and, for writes, the data.
pub fn repair(fs: &dyn Fs, mount: &Mount, rel: &str) -> io::Result<Repaired> {
    let mut created = Vec::new();
    let mut at = String::new();
    for part in rel.split('/').filter(|p| !p.is_empty()) {
        let parent = mount.dir.join(&at);
        at = cgroup::child(&at, part);
        let dir = mount.dir.join(&at);
        if fs.exists(&dir)? {
            continue;
        }
        if mount.kind == MountKind::V2 {
            enable_controllers(fs, &parent)?;
        }
        fs.mkdir(&dir).map_err(|e| with_path(e, &dir, None))?;
        created.push(dir.clone());
        if mount.kind == MountKind::V1Cpuset {
            for name in [file::MEMS, file::CPUS] {
                let from = parent.join(name);
                let value = fs.read(&from).map_err(|e| with_path(e, &from, None))?;
                let value = value.trim();
                let to = dir.join(name);
                fs.write(&to, value)
                    .map_err(|e| with_path(e, &to, Some(value)))?;
            }
        }
    }
    if mount.kind == MountKind::V2 && !created.is_empty() {
        // The last one's children (pods) need the controllers too.
        enable_controllers(fs, &mount.dir.join(&at))?;
    }
    Ok(Repaired { created })
}

/// Enables in `dir`'s `cgroup.subtree_control` those of [`V2_CONTROLLERS`]
/// that `dir` has and has not enabled yet.
fn enable_controllers(fs: &dyn Fs, dir: &Path) -> io::Result<()> {
    let available = dir.join(file::CONTROLLERS);
    let available = fs
        .read(&available)
        .map_err(|e| with_path(e, &available, None))?;
    let control = dir.join(file::SUBTREE_CONTROL);
    let enabled = fs
        .read(&control)
        .map_err(|e| with_path(e, &control, None))?;
    let missing: Vec<String> = V2_CONTROLLERS
        .iter()
        .filter(|c| available.split_whitespace().any(|a| a == **c))
        .filter(|c| !enabled.split_whitespace().any(|e| e == **c))
        .map(|c| format!("+{c}"))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let data = missing.join(" ");
    fs.write(&control, &data)
        .map_err(|e| with_path(e, &control, Some(&data)))
}

/// `e` with the file (and the data written) in its message.
fn with_path(e: io::Error, path: &Path, data: Option<&str>) -> io::Error {
    let what = match data {
        Some(d) => format!("write {d:?} to {}", path.display()),
        None => format!("{}", path.display()),
    };
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// Decides when a missing path is repaired: at once, but not again within
/// the cooldown, and never with `repair = false`.
#[derive(Debug)]
pub struct Repairs {
    enabled: bool,
    cooldown: Duration,
    last: HashMap<PathBuf, Instant>,
    /// Repairs made since start.
    pub count: u64,
    /// Required paths missing at the last check and not repaired.
    pub missing: Vec<api::MissingPath>,
}

/// What to do about one missing path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Repair,
    /// Report it: the reason it is left alone.
    Leave(String),
}

impl Repairs {
    pub fn new(enabled: bool, cooldown: Duration) -> Self {
        Repairs {
            enabled,
            cooldown,
            last: HashMap::new(),
            count: 0,
            missing: Vec::new(),
        }
    }

    /// A reloaded configuration's switch and cooldown; the repairs already
    /// made still count.
    pub fn configure(&mut self, enabled: bool, cooldown: Duration) {
        self.enabled = enabled;
        self.cooldown = cooldown;
    }

    /// What to do about `path`, found missing at `now`.
    pub fn decide(&self, path: &Path, now: Instant) -> Decision {
        if !self.enabled {
            return Decision::Leave("missing; repair = false".into());
        }
        match self.last.get(path) {
            Some(&at) if now.saturating_duration_since(at) < self.cooldown => {
                Decision::Leave(format!(
                    "missing again {}s after its repair; next repair after the {}s cooldown",
                    now.saturating_duration_since(at).as_secs(),
                    self.cooldown.as_secs()
                ))
            }
            _ => Decision::Repair,
        }
    }

    /// A repair of `path` was attempted at `now` (counted when it worked).
    pub fn attempted(&mut self, path: &Path, now: Instant, worked: bool) {
        self.last.insert(path.to_path_buf(), now);
        if worked {
            self.count += 1;
        }
    }
}

/// Remembers since when each thing (a task, a cgroup) has been seen in a bad
/// state, and reports those past the threshold. Things not seen in the latest
/// check are forgotten: a task that woke up, a cgroup that thawed.
#[derive(Debug)]
pub struct Stuck<K> {
    threshold: Duration,
    since: BTreeMap<K, Instant>,
}

impl<K: Ord + Clone> Stuck<K> {
    pub fn new(threshold: Duration) -> Self {
        Stuck {
            threshold,
            since: BTreeMap::new(),
        }
    }

    /// A reloaded configuration's threshold; what is stuck stays stuck since
    /// when it was first seen.
    pub fn set_threshold(&mut self, threshold: Duration) {
        self.threshold = threshold;
    }

    /// Whether `key` was in the bad state at the last update.
    pub fn tracks(&self, key: &K) -> bool {
        self.since.contains_key(key)
    }

    /// The things in the bad state at the last update.
    pub fn tracked(&self) -> impl Iterator<Item = &K> {
        self.since.keys()
    }

    /// Takes the things in the bad state at `now`; returns those in it for
    /// at least the threshold, with how long. Whatever was in it before
    /// must have been looked at again: what is not in `seen` is forgotten.
    pub fn update(
        &mut self,
        now: Instant,
        seen: impl IntoIterator<Item = K>,
    ) -> Vec<(K, Duration)> {
        let mut next = BTreeMap::new();
        for key in seen {
            let at = self.since.get(&key).copied().unwrap_or(now);
            next.insert(key, at);
        }
        self.since = next;
        self.since
            .iter()
            .map(|(k, at)| (k.clone(), now.saturating_duration_since(*at)))
            .filter(|(_, d)| *d >= self.threshold)
            .collect()
    }
}

/// Whether a freezer file's text says frozen: v2 `1`, v1 `FROZEN` (a v1
/// `FREEZING` that lasts is stuck too).
pub fn is_frozen(text: &str) -> bool {
    matches!(text.trim(), "1" | "FROZEN" | "FREEZING")
}

/// How the daemon is doing, for status, `STATUS=` and the socket API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HealthState {
    /// Everything works.
    Healthy,
    /// It works, but something needs an operator's look; the reasons say what.
    Degraded,
    /// It cannot do its job (every I/O thread is stuck).
    Failed,
}

/// The health state and the reasons for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Health {
    pub state: HealthState,
    /// One short phrase each ("1 hung path"); empty when healthy.
    pub reasons: Vec<String>,
}

/// The facts health is judged on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    /// I/O threads not stuck.
    pub io_threads: usize,
    pub hung_paths: usize,
    pub dstate_tasks: usize,
    pub frozen_cgroups: usize,
    /// Cgroups whose last write or verification failed.
    pub failing_cgroups: usize,
    /// Required paths missing and not repaired.
    pub missing_paths: usize,
    /// Cgroups without an inotify watch (`max_user_watches` reached): their
    /// changes wait for a reconcile.
    pub unwatched_cgroups: usize,
    /// The last save of the state file failed (a read-only or full disk).
    pub state_unsaved: bool,
}

/// Judges `facts`: failed when no I/O thread is left, degraded when anything
/// else is wrong, healthy otherwise.
pub fn assess(facts: &Facts) -> Health {
    fn count(n: usize, one: &str, many: &str) -> Option<String> {
        match n {
            0 => None,
            1 => Some(format!("1 {one}")),
            n => Some(format!("{n} {many}")),
        }
    }
    let mut reasons = Vec::new();
    if facts.io_threads == 0 {
        reasons.push("all I/O threads are stuck".to_string());
    }
    reasons.extend(
        [
            count(facts.hung_paths, "hung path", "hung paths"),
            count(facts.dstate_tasks, "D-state task", "D-state tasks"),
            count(facts.frozen_cgroups, "frozen cgroup", "frozen cgroups"),
            count(facts.failing_cgroups, "cgroup failing", "cgroups failing"),
            count(facts.missing_paths, "missing path", "missing paths"),
            count(
                facts.unwatched_cgroups,
                "cgroup unwatched",
                "cgroups unwatched",
            ),
            facts
                .state_unsaved
                .then(|| "state file not saved".to_string()),
        ]
        .into_iter()
        .flatten(),
    );
    let state = if facts.io_threads == 0 {
        HealthState::Failed
    } else if reasons.is_empty() {
        HealthState::Healthy
    } else {
        HealthState::Degraded
    };
    Health { state, reasons }
}

impl std::fmt::Display for Health {
    /// `healthy`, or `degraded: 1 hung path, 2 D-state tasks`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match self.state {
            HealthState::Healthy => "healthy",
            HealthState::Degraded => "degraded",
            HealthState::Failed => "failed",
        };
        if self.reasons.is_empty() {
            f.write_str(state)
        } else {
            write!(f, "{state}: {}", self.reasons.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn required_follows_the_driver_present() {
        let managed = vec!["kubepods.slice".to_string(), "kubepods".to_string()];
        let got = required(&managed, &["machine.slice".into()], |r| {
            r == "kubepods.slice"
        });
        assert_eq!(
            got,
            [
                "kubepods.slice",
                "kubepods.slice/kubepods-burstable.slice",
                "kubepods.slice/kubepods-besteffort.slice",
                "machine.slice"
            ]
        );
        let got = required(&managed, &[], |r| r == "kubepods");
        assert_eq!(
            got,
            ["kubepods", "kubepods/burstable", "kubepods/besteffort"]
        );
        assert!(required(&managed, &[], |_| false).is_empty());
        let kubelet = vec!["kubelet.slice/kubelet-kubepods.slice".to_string()];
        assert_eq!(
            required(&kubelet, &[], |_| true)[1],
            "kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice"
        );
    }

    #[test]
    fn stuck_reports_only_past_the_threshold_and_forgets_what_recovered() {
        let t0 = Instant::now();
        let mut s: Stuck<u32> = Stuck::new(Duration::from_secs(10));
        assert!(s.update(t0, [1, 2]).is_empty());
        let later = t0 + Duration::from_secs(10);
        assert_eq!(
            s.update(later, [1, 2, 3]),
            [(1, Duration::from_secs(10)), (2, Duration::from_secs(10))]
        );
        // 2 woke up; when it sleeps again its clock starts over.
        assert_eq!(s.update(later + Duration::from_secs(1), [1, 3]).len(), 1);
        assert!(s.update(later + Duration::from_secs(2), [2]).is_empty());
    }

    #[test]
    fn repairs_respect_the_switch_and_the_cooldown() {
        let t0 = Instant::now();
        let p = Path::new("/cg/cpuset/kubepods");
        assert!(matches!(
            Repairs::new(false, Duration::from_secs(60)).decide(p, t0),
            Decision::Leave(_)
        ));
        let mut r = Repairs::new(true, Duration::from_secs(60));
        assert_eq!(r.decide(p, t0), Decision::Repair);
        r.attempted(p, t0, true);
        assert!(matches!(
            r.decide(p, t0 + Duration::from_secs(59)),
            Decision::Leave(_)
        ));
        assert_eq!(r.decide(p, t0 + Duration::from_secs(60)), Decision::Repair);
        assert_eq!(r.count, 1);
    }

    #[test]
    fn health_names_each_degradation() {
        let ok = Facts {
            io_threads: 2,
            ..Facts::default()
        };
        assert_eq!(assess(&ok).to_string(), "healthy");
        let bad = Facts {
            hung_paths: 1,
            dstate_tasks: 2,
            ..ok.clone()
        };
        assert_eq!(
            assess(&bad).to_string(),
            "degraded: 1 hung path, 2 D-state tasks"
        );
        let blind = Facts {
            unwatched_cgroups: 3,
            state_unsaved: true,
            ..ok.clone()
        };
        assert_eq!(
            assess(&blind).to_string(),
            "degraded: 3 cgroups unwatched, state file not saved"
        );
        let dead = Facts {
            io_threads: 0,
            hung_paths: 8,
            ..Facts::default()
        };
        assert_eq!(assess(&dead).state, HealthState::Failed);
        assert_eq!(
            assess(&dead).to_string(),
            "failed: all I/O threads are stuck, 8 hung paths"
        );
    }

    #[test]
    fn freezer_texts() {
        assert!(is_frozen("1\n") && is_frozen("FROZEN\n") && is_frozen("FREEZING"));
        assert!(!is_frozen("0\n") && !is_frozen("THAWED\n"));
    }
}
