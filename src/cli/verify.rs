//! `pinctl verify`: the live kernel checked against the intent.
//!
//! - The intent is an [`api::Status`] (the daemon's, or built offline).
//! - Each [`Problem`] variant is a check (exit 1); warnings exit 0. For
//!   operators: `docs/src/cli.md`, "pinctl verify".
//! - The kernel is read under roots passed in ([`Roots`]), as the daemon
//!   reads it ([`cgroup::observe`], [`procfs`]), through an [`Fs`]
//!   ([`RealFs`] by [`verify`], another by [`verify_with`]).
//! - Reads block the CLI's thread: a hang hangs this command, never the
//!   daemon. Nothing is written.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::Serialize;

use crate::api;
use crate::cgroup::{self, Hierarchy, HierarchyMode, Observed, Reads, Rel, Scope, Version, layout};
use crate::cpuset::CpuSet;
use crate::io::{Fs, RealFs};
use crate::procfs;
use crate::slurm;

/// Where the live kernel's files are.
#[derive(Debug, Clone)]
pub struct Roots {
    pub cgroup_root: PathBuf,
    pub proc_root: PathBuf,
    pub sysfs_root: PathBuf,
}

/// One mismatch between the intent and the kernel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Problem {
    /// A workload's cgroup (or one below it) does not get exactly its CPUs.
    Effective {
        workload: String,
        cgroup: String,
        file: PathBuf,
        expected: CpuSet,
        actual: CpuSet,
    },
    /// A file that must be read could not be.
    Unreadable {
        workload: Option<String>,
        path: PathBuf,
        error: String,
    },
    /// A task may run outside its workload's CPUs.
    TaskOutside {
        workload: String,
        cgroup: String,
        pid: u32,
        comm: String,
        allowed: CpuSet,
        expected: CpuSet,
    },
    /// Two workloads hold the same CPUs.
    Overlap { a: String, b: String, cpus: CpuSet },
    /// A workload holds reserved CPUs.
    Reserved { workload: String, cpus: CpuSet },
    /// A cgroup outside every workload may run on exclusive CPUs.
    SharedOnExclusive {
        cgroup: String,
        effective: CpuSet,
        exclusive: CpuSet,
        workloads: Vec<String>,
    },
    /// With `strict_reservation`, a cgroup of a managed subtree outside
    /// every workload (a Burstable or BestEffort container) may run on
    /// reserved CPUs.
    SharedOnReserved {
        cgroup: String,
        effective: CpuSet,
        reserved: CpuSet,
    },
    /// One of Slurm's jobs meets an exclusive workload, or lost CPUs.
    Slurm(slurm::Conflict),
    /// With `[slurm] housekeeping`, a cgroup pinctld confines may run on
    /// the cores of a running Slurm job.
    OnJobCores {
        cgroup: String,
        effective: CpuSet,
        cores: CpuSet,
        jobs: Vec<String>,
    },
    /// The runtime made a container with other CPUs than pinctld answered
    /// over NRI: another CPU owner on the node.
    NriDisagreed(api::NriDisagreement),
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Effective {
                workload,
                cgroup,
                file,
                expected,
                actual,
            } => write!(
                f,
                "{workload}: {cgroup} gets CPUs {actual} ({}), expected {expected}",
                file.file_name().unwrap_or_default().to_string_lossy()
            ),
            Problem::Unreadable {
                workload,
                path,
                error,
            } => match workload {
                Some(w) => write!(f, "{w}: cannot read {}: {error}", path.display()),
                None => write!(f, "cannot read {}: {error}", path.display()),
            },
            Problem::TaskOutside {
                workload,
                cgroup,
                pid,
                comm,
                allowed,
                expected,
            } => write!(
                f,
                "{workload}: task {pid} ({comm}) in {cgroup} may run on CPUs {allowed} (Cpus_allowed_list), outside {expected}"
            ),
            Problem::Overlap { a, b, cpus } => {
                write!(f, "workloads {a} and {b} both hold CPUs {cpus}")
            }
            Problem::Reserved { workload, cpus } => {
                write!(f, "{workload} holds reserved CPUs {cpus}")
            }
            Problem::SharedOnExclusive {
                cgroup,
                effective,
                exclusive,
                workloads,
            } => write!(
                f,
                "{cgroup} is not a workload but gets CPUs {effective}, including exclusive CPUs {exclusive} of {}",
                workloads.join(", ")
            ),
            Problem::SharedOnReserved {
                cgroup,
                effective,
                reserved,
            } => write!(
                f,
                "{cgroup} gets CPUs {effective}, including reserved CPUs {reserved}, which strict_reservation keeps for shared_cgroups"
            ),
            Problem::Slurm(c) => c.fmt(f),
            Problem::OnJobCores {
                cgroup,
                effective,
                cores,
                jobs,
            } => write!(
                f,
                "{cgroup} gets CPUs {effective}, including CPUs {cores} of Slurm's {}, which [slurm] housekeeping keeps quiet",
                jobs.join(", ")
            ),
            Problem::NriDisagreed(d) => write!(
                f,
                "the runtime made container {} ({}) on CPUs {}, not {} as pinctld answered over NRI: another CPU owner (an NRI plugin after pinctld?)",
                d.container, d.cgroup, d.found, d.answered
            ),
        }
    }
}

/// What was looked at.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Checked {
    /// Exclusive workloads.
    pub workloads: usize,
    /// Their cgroups and those below them.
    pub workload_cgroups: usize,
    /// Their tasks (threads).
    pub tasks: usize,
    /// Other cgroups of the managed and shared subtrees.
    pub other_cgroups: usize,
    /// Slurm's jobs.
    pub slurm_jobs: usize,
}

/// The outcome: problems make `pinctl verify` exit 1, warnings do not.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    /// `"v1"` or `"v2"`: what was found at the cgroup root.
    pub hierarchy: String,
    pub cgroup_root: PathBuf,
    pub checked: Checked,
    pub problems: Vec<Problem>,
    pub warnings: Vec<String>,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Reads a kernel file; `Ok(None)` when it does not exist.
fn read(fs: &dyn Fs, path: &Path) -> io::Result<Option<String>> {
    match fs.read(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// What the kernel says a cgroup's CPUs are.
enum Effective {
    /// The cgroup no longer exists.
    Gone,
    /// It has no cpuset files: its parent does not enable `+cpuset` for its
    /// children (v2), so it runs on the nearest ancestor's set.
    Inherited,
    /// Its effective set, and the file that said it.
    Set(PathBuf, CpuSet),
}

/// The live kernel under the roots, read through [`Fs`].
struct Kernel<'a> {
    fs: &'a dyn Fs,
    h: Hierarchy,
    proc_root: &'a Path,
}

impl Kernel<'_> {
    /// The cgroups at and below `rel` as [`cgroup::observe`] reads them,
    /// parents first; nothing when it is gone.
    fn walk(&self, rel: &str) -> Vec<Observed> {
        let reads = Reads {
            effective: true,
            mems: false,
            limit: false,
            known_children: None,
        };
        let mut out = Vec::new();
        let mut stack: Vec<Rel> = vec![rel.into()];
        while let Some(rel) = stack.pop() {
            let Some(obs) = cgroup::observe(self.fs, &self.h, &rel, reads) else {
                continue;
            };
            for c in obs.children.iter().rev() {
                stack.push(cgroup::child(&rel, c).into());
            }
            out.push(obs);
        }
        out
    }

    /// The effective CPUs of the cgroup `obs` read. Old v1 kernels have no
    /// `cpuset.effective_cpus`; there the kernel enforces `cpuset.cpus` itself
    /// (a write outside the parent fails), so it is the effective set.
    fn effective(&self, obs: &Observed) -> Result<Effective, (PathBuf, String)> {
        let mut file = self.h.effective_file(&obs.rel);
        if let Some(set) = &obs.effective {
            return Ok(Effective::Set(file, set.clone()));
        }
        // `observe` keeps only its first error: the file itself says why it
        // gave no set.
        let mut text = read(self.fs, &file).map_err(|e| (file.clone(), e.to_string()))?;
        if text.is_none() && self.h.version == Version::V1 {
            file = self.h.cpus_file(&obs.rel);
            text = read(self.fs, &file).map_err(|e| (file.clone(), e.to_string()))?;
        }
        match text {
            None if !self.fs.exists(&self.h.dir(&obs.rel)).unwrap_or(true) => Ok(Effective::Gone),
            None if self.h.version == Version::V2 => Ok(Effective::Inherited),
            None => Err((file, "no such file".into())),
            Some(t) => t
                .parse::<CpuSet>()
                .map(|set| Effective::Set(file.clone(), set))
                .map_err(|e| (file, e.to_string())),
        }
    }

    /// The threads of cgroup `rel`, as (pid, tid) pairs: v1 `tasks` lists every
    /// thread; v2 `cgroup.procs` lists processes, whose threads procfs lists
    /// ([`procfs::threads`]).
    fn threads(&self, rel: &str) -> io::Result<Vec<(u32, u32)>> {
        let Some(text) = read(self.fs, &self.h.tasks_file(rel))? else {
            return Ok(Vec::new());
        };
        let ids = text
            .split_whitespace()
            .filter_map(|t| t.parse::<u32>().ok());
        Ok(match self.h.version {
            Version::V1 => ids.map(|id| (id, id)).collect(),
            Version::V2 => ids
                .flat_map(|pid| {
                    procfs::threads(self.fs, self.proc_root, pid)
                        .into_iter()
                        .map(move |tid| (pid, tid))
                })
                .collect(),
        })
    }
}

/// The hierarchy at the cgroup root of `roots`, which must be the one
/// `status` says the daemon drives.
fn detect(fs: &dyn Fs, status: &api::Status, roots: &Roots) -> Result<Hierarchy> {
    let h = Hierarchy::detect(fs, &roots.cgroup_root, HierarchyMode::Auto).with_context(|| {
        format!(
            "cannot read the cgroup tree at {}",
            roots.cgroup_root.display()
        )
    })?;
    let found = h.version.as_str();
    if found != status.hierarchy {
        bail!(
            "pinctld drives cgroup {} but {} is cgroup {found}: is --cgroup-root right?",
            status.hierarchy,
            roots.cgroup_root.display()
        );
    }
    Ok(h)
}

/// The threads of each pinned workload of `status` now, by key: those of
/// its cgroups and the cgroups below them, read as [`verify_with`] reads
/// them (`pinctl verify --noise` knows them so). A cgroup that cannot be
/// read adds none.
pub fn workload_threads(
    fs: &dyn Fs,
    status: &api::Status,
    roots: &Roots,
) -> Result<BTreeMap<String, BTreeSet<u32>>> {
    let kernel = Kernel {
        fs,
        h: detect(fs, status, roots)?,
        proc_root: &roots.proc_root,
    };
    let mut out: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
    for w in status.workloads.iter().filter(|w| w.cpus.is_some()) {
        let tids = out.entry(w.key.clone()).or_default();
        for obs in w.cgroups.iter().flat_map(|rel| kernel.walk(rel)) {
            if let Ok(threads) = kernel.threads(&obs.rel) {
                tids.extend(threads.into_iter().map(|(_, tid)| tid));
            }
        }
    }
    Ok(out)
}

/// Checks the live kernel under `roots` against `status`, reading the real
/// files ([`RealFs`]); see [`verify_with`].
pub fn verify(status: &api::Status, roots: &Roots, scope: &Scope) -> Result<Report> {
    verify_with(&RealFs, status, roots, scope)
}

/// Checks the live kernel under `roots`, read through `fs`, against
/// `status`; the roots of `scope` are the subtrees whose other cgroups must
/// keep off exclusive CPUs: the configuration's `managed` and
/// `shared_cgroups` (the rules' roots are not among them: the status
/// document does not carry the rules).
pub fn verify_with(
    fs: &dyn Fs,
    status: &api::Status,
    roots: &Roots,
    scope: &Scope,
) -> Result<Report> {
    let h = detect(fs, status, roots)?;
    let found = h.version.as_str();
    let mut report = Report {
        hierarchy: found.to_string(),
        cgroup_root: roots.cgroup_root.clone(),
        ..Report::default()
    };
    let pinned: Vec<(&api::Workload, &CpuSet)> = status
        .workloads
        .iter()
        .filter_map(|w| Some((w, w.cpus.as_ref()?)))
        .collect();
    report.checked.workloads = pinned.len();

    // Overlaps and reserved CPUs: the intent itself.
    let mut owner: BTreeMap<u32, &str> = BTreeMap::new();
    let mut overlaps: BTreeMap<(&str, &str), CpuSet> = BTreeMap::new();
    for (w, cpus) in &pinned {
        for cpu in cpus.iter() {
            match owner.get(&cpu) {
                Some(first) => {
                    overlaps.entry((first, &w.key)).or_default().insert(cpu);
                }
                None => {
                    owner.insert(cpu, &w.key);
                }
            }
        }
        let reserved = cpus.intersection(&status.reserved);
        if !reserved.is_empty() {
            report.problems.push(Problem::Reserved {
                workload: w.key.clone(),
                cpus: reserved,
            });
        }
    }
    for ((a, b), cpus) in overlaps {
        report.problems.push(Problem::Overlap {
            a: a.to_string(),
            b: b.to_string(),
            cpus,
        });
    }
    if let Some(nri) = &status.nri {
        report
            .problems
            .extend(nri.disagreements.iter().cloned().map(Problem::NriDisagreed));
    }

    let kernel = Kernel {
        fs,
        h,
        proc_root: &roots.proc_root,
    };
    // Each workload's cgroups, those below them and their tasks.
    let mut inside: HashSet<String> = HashSet::new();
    let mut workload_roots: Vec<&str> = Vec::new();
    for (w, cpus) in &pinned {
        for rel in &w.cgroups {
            workload_roots.push(rel);
            let cgroups = kernel.walk(rel);
            if cgroups.is_empty() {
                report.warnings.push(format!(
                    "{}: cgroup {rel} is gone (it may just have ended)",
                    w.key
                ));
                continue;
            }
            for obs in cgroups {
                report.checked.workload_cgroups += 1;
                let is_root = *obs.rel == **rel;
                check_cgroup(&kernel, w, cpus, &obs, is_root, &mut report);
                inside.insert(obs.rel.to_string());
            }
        }
    }

    // Everything else in the managed and shared subtrees.
    let exclusive: CpuSet = pinned
        .iter()
        .fold(CpuSet::new(), |acc, (_, c)| acc.union(c));
    let mut above: HashSet<&str> = HashSet::new();
    for rel in &workload_roots {
        let mut p = cgroup::parent(rel);
        while let Some(up) = p {
            above.insert(up);
            p = cgroup::parent(up);
        }
    }
    // Slurm's jobs: never on an exclusive workload's CPUs, never clipped.
    // Its trees (those `slurm::find` finds, and any in the subtrees walked
    // below) and the cgroups that hold them are judged by that alone.
    let walked: Vec<Vec<Observed>> = scope.roots().iter().map(|r| kernel.walk(r)).collect();
    let met: Vec<String> = walked
        .iter()
        .flatten()
        .filter(|obs| slurm::is_root(&obs.rel))
        .map(|obs| obs.rel.to_string())
        .collect();
    let found = match slurm::find(fs, &kernel.h, &met) {
        Ok(found) => found,
        Err(e) => {
            report.problems.push(Problem::Unreadable {
                workload: None,
                path: kernel.h.cpuset.clone(),
                error: format!("looking for Slurm's jobs: {e}"),
            });
            slurm::Found::default()
        }
    };
    report.checked.slurm_jobs = found.jobs.len();
    let keys = pinned.iter().map(|(w, c)| (w.key.as_str(), *c));
    report.problems.extend(
        slurm::conflicts(&found.jobs, keys, &status.online)
            .into_iter()
            .map(Problem::Slurm),
    );

    // [slurm] housekeeping: the other cgroups keep off the running jobs'
    // cores (reserved ones excepted, as the daemon keeps them shared).
    let job_cores = if status.slurm.housekeeping {
        slurm::job_cores(&found.jobs, &status.online).difference(&status.reserved)
    } else {
        CpuSet::new()
    };
    // strict_reservation (not falling back): the managed subtrees' other
    // cgroups keep off the reserved CPUs.
    let strict_reserved = status
        .strict_reservation
        .as_ref()
        .filter(|s| !s.fallback)
        .map(|_| &status.reserved);
    let mut seen: HashSet<Rel> = HashSet::new();
    for cgroups in walked {
        for obs in cgroups {
            let rel = &*obs.rel;
            if inside.contains(rel)
                || above.contains(rel)
                || found.covers(rel)
                || !seen.insert(obs.rel.clone())
            {
                continue;
            }
            // The kubepods root, QoS parents and pod cgroups keep every CPU by
            // design: their children hold the workloads.
            if matches!(
                layout::classify(rel),
                layout::Kind::KubepodsRoot { .. }
                    | layout::Kind::QosParent { .. }
                    | layout::Kind::Pod(_)
            ) {
                continue;
            }
            report.checked.other_cgroups += 1;
            match kernel.effective(&obs) {
                // An inheriting cgroup is as its ancestor, checked itself.
                Ok(Effective::Gone | Effective::Inherited) => {}
                Ok(Effective::Set(_, set)) => {
                    if let Some(reserved) = &strict_reserved
                        && scope.managed(rel)
                        && !set.is_disjoint(reserved)
                    {
                        report.problems.push(Problem::SharedOnReserved {
                            cgroup: rel.to_string(),
                            reserved: set.intersection(reserved),
                            effective: set.clone(),
                        });
                    }
                    let on_jobs = set.intersection(&job_cores);
                    if !on_jobs.is_empty() {
                        report.problems.push(Problem::OnJobCores {
                            cgroup: rel.to_string(),
                            effective: set.clone(),
                            jobs: found
                                .jobs
                                .iter()
                                .filter(|j| !j.cpus.is_disjoint(&on_jobs))
                                .map(|j| j.name.clone())
                                .collect(),
                            cores: on_jobs,
                        });
                    }
                    let hit = set.intersection(&exclusive);
                    if !hit.is_empty() {
                        let workloads = pinned
                            .iter()
                            .filter(|(_, c)| !c.is_disjoint(&hit))
                            .map(|(w, _)| w.key.clone())
                            .collect();
                        report.problems.push(Problem::SharedOnExclusive {
                            cgroup: rel.to_string(),
                            effective: set,
                            exclusive: hit,
                            workloads,
                        });
                    }
                }
                Err((path, error)) => report.problems.push(Problem::Unreadable {
                    workload: None,
                    path,
                    error,
                }),
            }
        }
    }

    // Isolated CPUs in the shared pool.
    let isolated_file = roots.sysfs_root.join("devices/system/cpu/isolated");
    match read(fs, &isolated_file) {
        Ok(Some(text)) => match text.parse::<CpuSet>() {
            Ok(isolated) => {
                let shared = isolated.intersection(&status.shared_pool);
                if !shared.is_empty() {
                    report.warnings.push(format!(
                        "isolated CPUs {shared} (isolcpus) are in the shared pool: the scheduler does not balance shared tasks onto them; they serve exclusive workloads best"
                    ));
                }
            }
            Err(e) => report
                .warnings
                .push(format!("{}: {e}", isolated_file.display())),
        },
        Ok(None) => {}
        Err(e) => report
            .warnings
            .push(format!("cannot read {}: {e}", isolated_file.display())),
    }
    Ok(report)
}

/// The effective set and the tasks of the cgroup `obs` read, a cgroup of
/// workload `w` (`is_root`) or one below it.
fn check_cgroup(
    kernel: &Kernel<'_>,
    w: &api::Workload,
    cpus: &CpuSet,
    obs: &Observed,
    is_root: bool,
    report: &mut Report,
) {
    let rel = &*obs.rel;
    match kernel.effective(obs) {
        Ok(Effective::Gone) => return,
        // Below the workload's own cgroup, a cgroup without cpuset files runs
        // on the workload's set (its tasks are checked below); the workload's
        // cgroup itself without them was never pinned.
        Ok(Effective::Inherited) if is_root => {
            report.problems.push(Problem::Unreadable {
                workload: Some(w.key.clone()),
                path: kernel.h.effective_file(rel),
                error: "no such file: the cpuset controller is not enabled for it".into(),
            });
        }
        Ok(Effective::Inherited) => {}
        Ok(Effective::Set(file, actual)) => {
            if &actual != cpus {
                report.problems.push(Problem::Effective {
                    workload: w.key.clone(),
                    cgroup: rel.to_string(),
                    file,
                    expected: cpus.clone(),
                    actual,
                });
            }
        }
        Err((path, error)) => report.problems.push(Problem::Unreadable {
            workload: Some(w.key.clone()),
            path,
            error,
        }),
    }
    let tasks = match kernel.threads(rel) {
        Ok(t) => t,
        Err(e) => {
            report.problems.push(Problem::Unreadable {
                workload: Some(w.key.clone()),
                path: kernel.h.dir(rel),
                error: format!("its tasks: {e}"),
            });
            return;
        }
    };
    for (pid, tid) in tasks {
        match procfs::affinity(kernel.fs, kernel.proc_root, pid, tid) {
            // The task ended since the list was read.
            Ok(None) => {}
            Ok(Some(procfs::Affinity { comm, allowed })) => {
                report.checked.tasks += 1;
                if !allowed.is_subset(cpus) {
                    report.problems.push(Problem::TaskOutside {
                        workload: w.key.clone(),
                        cgroup: rel.to_string(),
                        pid: tid,
                        comm,
                        allowed,
                        expected: cpus.clone(),
                    });
                }
            }
            Err(e) => report.problems.push(Problem::Unreadable {
                workload: Some(w.key.clone()),
                path: kernel.proc_root.join(tid.to_string()),
                error: e.to_string(),
            }),
        }
    }
}

/// The report as `pinctl verify` prints it.
pub fn render(report: &Report, style: super::style::Style) -> String {
    use super::style::visible;
    use std::fmt::Write as _;
    let mut s = String::new();
    let c = &report.checked;
    let n = |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    let _ = writeln!(
        s,
        "Checked {} ({}, {}) and {} in {} (cgroup {})",
        n(c.workloads, "exclusive workload", "exclusive workloads"),
        n(c.workload_cgroups, "cgroup", "cgroups"),
        n(c.tasks, "task", "tasks"),
        n(c.other_cgroups, "other cgroup", "other cgroups"),
        visible(&report.cgroup_root.display().to_string()),
        report.hierarchy
    );
    if c.slurm_jobs > 0 {
        let _ = writeln!(s, "Checked {}", n(c.slurm_jobs, "Slurm job", "Slurm jobs"));
    }
    for p in &report.problems {
        // A problem quotes keys, cgroups, task names and paths.
        let _ = writeln!(s, "{} {}", style.red("problem:"), visible(&p.to_string()));
    }
    for w in &report.warnings {
        let _ = writeln!(s, "{} {}", style.yellow("warning:"), visible(w));
    }
    if report.ok() {
        let _ = writeln!(s, "{}", style.green("OK: the kernel matches the intent"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use crate::io::{Entry, Owner};

    /// Files in memory, under paths that exist nowhere on disk: what verify
    /// finds there it can only have read through its [`Fs`]. Every directory
    /// is root's; nothing can be written.
    #[derive(Default)]
    struct MemFs(BTreeMap<PathBuf, String>);

    impl MemFs {
        fn put(&mut self, path: &str, text: &str) {
            self.0.insert(PathBuf::from(path), text.to_string());
        }

        /// Cgroup `rel` (`""` or ending in `/`) of the v2 tree under
        /// `/nowhere/cgroup` with its `cpuset.cpus` and effective set.
        fn put_sets(&mut self, rel: &str, cpus: &str, effective: &str) {
            self.put(&format!("/nowhere/cgroup/{rel}cpuset.cpus"), cpus);
            self.put(
                &format!("/nowhere/cgroup/{rel}cpuset.cpus.effective"),
                effective,
            );
        }

        fn is_dir(&self, path: &Path) -> bool {
            self.0.keys().any(|f| f != path && f.starts_with(path))
        }
    }

    impl Fs for MemFs {
        fn read(&self, path: &Path) -> io::Result<String> {
            self.0
                .get(path)
                .cloned()
                .ok_or_else(|| io::ErrorKind::NotFound.into())
        }
        fn write(&self, _: &Path, _: &str) -> io::Result<()> {
            Err(io::ErrorKind::PermissionDenied.into())
        }
        fn read_dir(&self, path: &Path) -> io::Result<Vec<Entry>> {
            if !self.is_dir(path) {
                return Err(io::ErrorKind::NotFound.into());
            }
            let mut names: Vec<Entry> = self
                .0
                .keys()
                .filter_map(|f| f.strip_prefix(path).ok()?.components().next())
                .map(|c| {
                    let name = c.as_os_str().to_string_lossy().into_owned();
                    let is_dir = self.is_dir(&path.join(&name));
                    Entry { name, is_dir }
                })
                .collect();
            names.dedup();
            Ok(names)
        }
        fn get_xattr(&self, _: &Path, _: &str) -> io::Result<Option<Vec<u8>>> {
            Ok(None)
        }
        fn set_xattr(&self, _: &Path, _: &str, _: &[u8]) -> io::Result<()> {
            Err(io::ErrorKind::PermissionDenied.into())
        }
        fn mkdir(&self, _: &Path) -> io::Result<()> {
            Err(io::ErrorKind::PermissionDenied.into())
        }
        fn exists(&self, path: &Path) -> io::Result<bool> {
            Ok(self.0.contains_key(path) || self.is_dir(path))
        }
        fn owner(&self, path: &Path) -> io::Result<Owner> {
            match self.exists(path)? {
                true => Ok(Owner {
                    uid: 0,
                    mode: 0o755,
                }),
                false => Err(io::ErrorKind::NotFound.into()),
            }
        }
    }

    const JOB: &str = "hpc.slice/job.scope";

    fn roots() -> Roots {
        Roots {
            cgroup_root: "/nowhere/cgroup".into(),
            proc_root: "/nowhere/proc".into(),
            sysfs_root: "/nowhere/sys".into(),
        }
    }

    /// One workload, the job, on CPUs 2-3 of 0-3.
    fn intent(hierarchy: &str) -> api::Status {
        api::Status {
            hierarchy: hierarchy.into(),
            online: "0-3".parse().unwrap(),
            reserved: "0".parse().unwrap(),
            shared_pool: "0-1".parse().unwrap(),
            workloads: vec![api::Workload {
                key: format!("cgroup:{JOB}"),
                requested: 2,
                source: api::Source::Xattr,
                numa: Vec::new(),
                cgroups: vec![JOB.into()],
                cpus: Some("2-3".parse().unwrap()),
                pending: None,
                alignment: None,
                resize: None,
                near: None,
            }],
            ..api::Status::starting()
        }
    }

    fn scope() -> Scope {
        Scope::new(Vec::new(), vec!["system.slice".into()], Vec::new())
    }

    /// A v1 kernel old enough to have no `cpuset.effective_cpus`: the kernel
    /// enforces `cpuset.cpus` itself, so that is the set judged. The job's
    /// process (v1 `tasks` lists threads) may run on CPU 0.
    #[test]
    fn an_old_v1_kernel_is_judged_by_cpuset_cpus_and_read_only_through_fs() {
        let mut fs = MemFs::default();
        fs.put("/nowhere/cgroup/cpuset/cpuset.cpus", "0-3\n");
        fs.put("/nowhere/cgroup/cpuset/hpc.slice/cpuset.cpus", "0-3\n");
        fs.put(
            "/nowhere/cgroup/cpuset/hpc.slice/job.scope/cpuset.cpus",
            "2-3\n",
        );
        fs.put(
            "/nowhere/cgroup/cpuset/hpc.slice/job.scope/tasks",
            "40\n41\n",
        );
        fs.put("/nowhere/cgroup/cpuset/system.slice/cpuset.cpus", "0-1\n");
        fs.put(
            "/nowhere/cgroup/cpuset/system.slice/a.service/cpuset.cpus",
            "1-2\n",
        );
        fs.put(
            "/nowhere/proc/40/status",
            "Name:\tjob\nCpus_allowed_list:\t2-3\n",
        );
        fs.put(
            "/nowhere/proc/41/status",
            "Name:\tjob-io\nCpus_allowed_list:\t0,2\n",
        );
        fs.put("/nowhere/sys/devices/system/cpu/isolated", "\n");
        let r = verify_with(&fs, &intent("v1"), &roots(), &scope()).unwrap();
        let text = render(&r, super::super::style::Style::OFF);
        assert_eq!(
            (
                r.checked.workload_cgroups,
                r.checked.tasks,
                r.checked.other_cgroups
            ),
            (1, 2, 2),
            "{text}"
        );
        assert_eq!(
            text,
            "Checked 1 exclusive workload (1 cgroup, 2 tasks) and 2 other cgroups in /nowhere/cgroup (cgroup v1)\n\
             problem: cgroup:hpc.slice/job.scope: task 41 (job-io) in hpc.slice/job.scope may run on CPUs 0,2 (Cpus_allowed_list), outside 2-3\n\
             problem: system.slice/a.service is not a workload but gets CPUs 1-2, including exclusive CPUs 2 of cgroup:hpc.slice/job.scope\n"
        );
    }

    /// `cgroup::observe` keeps only a cgroup's first error; the file that gave
    /// no set is still the one named.
    #[test]
    fn a_garbled_effective_set_is_named_even_beside_a_garbled_cpuset_cpus() {
        let mut fs = MemFs::default();
        fs.put("/nowhere/cgroup/cgroup.controllers", "cpuset cpu\n");
        fs.put("/nowhere/cgroup/hpc.slice/job.scope/cpuset.cpus", "x\n");
        fs.put(
            "/nowhere/cgroup/hpc.slice/job.scope/cpuset.cpus.effective",
            "y\n",
        );
        let r = verify_with(&fs, &intent("v2"), &roots(), &scope()).unwrap();
        assert_eq!(
            r.problems,
            [Problem::Unreadable {
                workload: Some(format!("cgroup:{JOB}")),
                path: "/nowhere/cgroup/hpc.slice/job.scope/cpuset.cpus.effective".into(),
                error: "y\n".parse::<CpuSet>().unwrap_err().to_string(),
            }]
        );
    }

    /// `[slurm] housekeeping`: a service on a running job's core fails
    /// (naming the job), one off it passes; without the switch, neither.
    #[test]
    fn with_slurm_housekeeping_a_service_on_a_job_core_fails() {
        let mut fs = MemFs::default();
        let mut put = |rel: &str, cpus: &str, effective: &str| fs.put_sets(rel, cpus, effective);
        put("", "", "0-3");
        put("hpc.slice/", "", "0-3");
        put("hpc.slice/job.scope/", "2-3", "2-3");
        put("system.slice/", "", "0-3");
        put("system.slice/a.service/", "0", "0");
        put("system.slice/b.service/", "0-1", "0-1");
        put("system.slice/slurmstepd.scope/", "", "0-3");
        put("system.slice/slurmstepd.scope/job_9/", "1", "1");
        fs.put("/nowhere/cgroup/cgroup.controllers", "cpuset cpu\n");
        let mut status = intent("v2");
        let r = verify_with(&fs, &status, &roots(), &scope()).unwrap();
        assert!(r.ok(), "{}", render(&r, super::super::style::Style::OFF));
        status.slurm.housekeeping = true;
        let r = verify_with(&fs, &status, &roots(), &scope()).unwrap();
        let problems: Vec<String> = r.problems.iter().map(ToString::to_string).collect();
        assert_eq!(
            problems,
            [
                "system.slice/b.service gets CPUs 0-1, including CPUs 1 of Slurm's job_9, which [slurm] housekeeping keeps quiet"
            ]
        );
    }

    /// Slurm's jobs in `system.slice` (a shared subtree): one holds the
    /// workload's CPU 3, one lost CPU 3 to an ancestor. Each is a problem;
    /// `system.slice`, which holds the tree and keeps every CPU by design,
    /// is not, nor are the tree's own cgroups; a service beside it is
    /// judged as ever.
    #[test]
    fn a_slurm_job_on_exclusive_cpus_or_clipped_fails_and_its_holder_does_not() {
        let mut fs = MemFs::default();
        let mut put = |rel: &str, cpus: &str, effective: &str| fs.put_sets(rel, cpus, effective);
        put("", "", "0-3");
        put("hpc.slice/", "", "0-3");
        put("hpc.slice/job.scope/", "2-3", "2-3");
        put("system.slice/", "", "0-3");
        put("system.slice/a.service/", "0-1", "0-1");
        put("system.slice/slurmstepd.scope/", "", "0-3");
        put("system.slice/slurmstepd.scope/system/", "", "0-3");
        put("system.slice/slurmstepd.scope/job_7/", "3", "3");
        put("system.slice/slurmstepd.scope/job_8/", "1,3", "1");
        fs.put("/nowhere/cgroup/cgroup.controllers", "cpuset cpu\n");
        let r = verify_with(&fs, &intent("v2"), &roots(), &scope()).unwrap();
        let text = render(&r, super::super::style::Style::OFF);
        assert_eq!(r.checked.slurm_jobs, 2, "{text}");
        assert_eq!(r.checked.other_cgroups, 1, "a.service alone: {text}");
        let problems: Vec<String> = r.problems.iter().map(ToString::to_string).collect();
        assert_eq!(
            problems,
            [
                "Slurm job job_7 (system.slice/slurmstepd.scope/job_7) has CPUs 3 that exclusive workload cgroup:hpc.slice/job.scope holds",
                "Slurm job job_8 (system.slice/slurmstepd.scope/job_8) has CPUs 3 that exclusive workload cgroup:hpc.slice/job.scope holds",
                "Slurm job job_8 (system.slice/slurmstepd.scope/job_8) lost CPUs 3: Slurm gave it 1,3, the kernel gives it 1 (an ancestor lacks them)",
            ],
            "{text}"
        );
    }

    /// `strict_reservation`: a Burstable container on the reserved CPU 0
    /// is a problem; one off it, `system.slice` on it and the kubepods
    /// structure are not. Falling back (no other CPU left), none is.
    #[test]
    fn with_strict_reservation_a_burstable_container_on_a_reserved_cpu_fails() {
        let mut fs = MemFs::default();
        let mut put = |rel: &str, effective: &str| {
            fs.put(&format!("/nowhere/cgroup/{rel}cpuset.cpus"), "");
            fs.put(
                &format!("/nowhere/cgroup/{rel}cpuset.cpus.effective"),
                effective,
            );
        };
        let pod = "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod00000001_1111_4222_8333_0123456789ab.slice/";
        put("", "0-3");
        put("hpc.slice/job.scope/", "2-3");
        put("system.slice/", "0-1");
        put("kubepods.slice/", "0-1");
        put("kubepods.slice/kubepods-burstable.slice/", "0-1");
        put(pod, "0-1");
        put(&format!("{pod}cri-containerd-a.scope/"), "0-1");
        put(&format!("{pod}cri-containerd-b.scope/"), "1");
        fs.put("/nowhere/cgroup/cgroup.controllers", "cpuset cpu\n");
        let scope = Scope::new(
            vec!["kubepods.slice".into()],
            vec!["system.slice".into()],
            Vec::new(),
        );
        let mut status = intent("v2");
        let r = verify_with(&fs, &status, &roots(), &scope).unwrap();
        assert!(r.ok(), "strict_reservation is off: {:?}", r.problems);
        status.strict_reservation = Some(api::Strict::of(&status.shared_pool, &status.reserved));
        let r = verify_with(&fs, &status, &roots(), &scope).unwrap();
        let problems: Vec<String> = r.problems.iter().map(ToString::to_string).collect();
        assert_eq!(
            problems,
            [format!(
                "{pod}cri-containerd-a.scope gets CPUs 0-1, including reserved CPUs 0, which strict_reservation keeps for shared_cgroups"
            )]
        );
        status.strict_reservation = Some(api::Strict {
            pool: "0-1".parse().unwrap(),
            fallback: true,
        });
        let r = verify_with(&fs, &status, &roots(), &scope).unwrap();
        assert!(r.ok(), "falling back: {:?}", r.problems);
    }

    /// A Slurm tree where `slurm::find` does not look (inside a container's
    /// scope) but in a subtree verify walks: judged as Slurm's, not as a
    /// shared cgroup on exclusive CPUs.
    #[test]
    fn a_slurm_tree_met_in_the_walk_is_judged_as_slurms() {
        let mut fs = MemFs::default();
        let mut put = |rel: &str, cpus: &str| {
            fs.put(&format!("/nowhere/cgroup/{rel}cpuset.cpus"), cpus);
            fs.put(&format!("/nowhere/cgroup/{rel}cpuset.cpus.effective"), cpus);
        };
        put("hpc.slice/job.scope/", "2-3");
        put("system.slice/", "");
        put("system.slice/box.scope/", "");
        put("system.slice/box.scope/slurmstepd.scope/", "");
        put("system.slice/box.scope/slurmstepd.scope/job_9/", "2");
        fs.put("/nowhere/cgroup/cgroup.controllers", "cpuset cpu\n");
        let r = verify_with(&fs, &intent("v2"), &roots(), &scope()).unwrap();
        let problems: Vec<String> = r.problems.iter().map(ToString::to_string).collect();
        assert_eq!(
            problems,
            [
                "Slurm job job_9 (system.slice/box.scope/slurmstepd.scope/job_9) has CPUs 2 that exclusive workload cgroup:hpc.slice/job.scope holds"
            ],
        );
        assert_eq!(r.checked.slurm_jobs, 1);
    }
}
