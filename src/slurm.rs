//! Slurm's cgroup trees: named, found and compared, never written.
//!
//! Slurm makes `slurmstepd.scope` (in `system.slice`; from Slurm 25.11 in its `CgroupSlice=`),
//! a cgroup per job below it, and writes each job's `cpuset.cpus` once
//! (`docs/src/hpc.md`, "Beside Slurm"). So:
//! - the tree is *foreign*: the engine never writes in it;
//! - a cgroup that holds it is a *holder*: never narrowed (on v2 a job would
//!   lose CPUs without Slurm knowing);
//! - [`find`] lists the jobs, [`conflicts`] says where `pinctl verify` fails.
//!
//! Only the names are known here; the cgroup root comes in as an argument.

use std::io;

use serde::{Deserialize, Serialize};

use crate::cgroup::{self, Hierarchy, Version};
use crate::cpuset::CpuSet;
use crate::io::Fs;

/// The name of the unit under which Slurm keeps its jobs: alone, or after
/// the node's name and `_` (`node1_slurmstepd.scope`: Debian 12's Slurm
/// 22.05, seen in the VM bed; a build for several slurmd per host).
pub const SCOPE: &str = "slurmstepd.scope";

/// The cgroup below [`SCOPE`] that holds slurmstepd itself, not a job
/// (`job_<id>`, a SLUID since Slurm 26.05, each with its steps).
const OWN: &str = "system";

/// How many slices deep [`find`] looks for [`SCOPE`]: a slice's path
/// has a component per dash of its name (`a-b-c.slice`: three).
pub const MAX_SLICE_DEPTH: usize = 4;

/// At most this many jobs are listed (a node runs a few dozen).
pub const MAX_JOBS: usize = 1024;

/// Whether cgroup `rel` is the root of a Slurm tree.
pub fn is_root(rel: &str) -> bool {
    rel.rsplit('/').next().is_some_and(is_scope_name)
}

/// Whether cgroup `rel` is where Slurm's cgroup/v1 plugin keeps its jobs
/// in a v1 hierarchy: `slurm` or `slurm_<node>` at its root, with
/// `uid_<uid>/job_<id>` below.
fn is_v1_root(rel: &str) -> bool {
    rel == "slurm"
        || rel
            .strip_prefix("slurm_")
            .is_some_and(|node| !node.is_empty() && !node.contains('/'))
}

/// Whether a cgroup's name is [`SCOPE`]'s, with or without a node's name.
fn is_scope_name(name: &str) -> bool {
    name == SCOPE
        || name
            .strip_suffix(SCOPE)
            .and_then(|node| node.strip_suffix('_'))
            .is_some_and(|node| !node.is_empty())
}

/// The Slurm job a process runs in, from its `/proc/<pid>/cgroup`: the
/// job's cgroup (relative to its hierarchy's root) and name; `None` when
/// it is in none. On v2 a job is a cgroup just below [`SCOPE`] (not
/// slurmstepd's own); on v1, Slurm's cgroup plugin makes
/// `/slurm[_<node>]/uid_<uid>/job_<id>` in each controller.
pub fn job_of(proc_cgroup: &str) -> Option<(String, String)> {
    for line in proc_cgroup.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(_), Some(_), Some(path)) = (fields.next(), fields.next(), fields.next()) else {
            continue;
        };
        let names: Vec<&str> = path.split('/').filter(|n| !n.is_empty()).collect();
        let at = |i: usize| names[..=i].join("/");
        for (i, name) in names.iter().enumerate() {
            let next = names.get(i + 1).copied();
            if is_scope_name(name)
                && let Some(job) = next.filter(|n| *n != OWN)
            {
                return Some((at(i + 1), job.to_string()));
            }
            let v1_root = *name == "slurm" || name.starts_with("slurm_");
            if v1_root
                && i == 0
                && names.get(1).is_some_and(|n| n.starts_with("uid_"))
                && let Some(job) = names.get(2).filter(|n| n.starts_with("job_"))
            {
                return Some((at(2), job.to_string()));
            }
        }
    }
    None
}

/// One of Slurm's jobs, as the kernel shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    /// Its cgroup, relative to the cpuset hierarchy.
    pub cgroup: String,
    /// What Slurm named it: `job_<id>`, or its SLUID.
    pub name: String,
    /// The CPUs Slurm gave it (`cpuset.cpus`; empty: its parent's).
    pub cpus: CpuSet,
    /// The CPUs it really has (the effective set).
    pub effective: CpuSet,
}

impl Job {
    /// The `online` CPUs Slurm wrote that the kernel does not give it: an
    /// ancestor lacks them (v2 falls back silently; it keeps offline CPUs
    /// in `cpuset.cpus`).
    pub fn clipped(&self, online: &CpuSet) -> CpuSet {
        self.cpus.intersection(online).difference(&self.effective)
    }
}

/// What [`find`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Found {
    /// The roots of Slurm's trees ([`SCOPE`]), in path order.
    pub roots: Vec<String>,
    /// Their jobs, at most [`MAX_JOBS`].
    pub jobs: Vec<Job>,
}

impl Found {
    /// Whether cgroup `rel` lies in a Slurm tree or holds one: judged by
    /// the Slurm checks, not as a shared cgroup.
    pub fn covers(&self, rel: &str) -> bool {
        self.roots
            .iter()
            .any(|r| cgroup::is_within(rel, r) || cgroup::is_within(r, rel))
    }
}

/// Finds Slurm's trees under the cpuset hierarchy `h` and reads their jobs.
///
/// It looks at the root and at slices (`*.slice`) down to
/// [`MAX_SLICE_DEPTH`], not into the kubepods tree, and takes the trees in
/// `known` too (those a walk of the daemon's subtrees met). On v1 it also
/// takes `slurm/` at the root (Slurm's cgroup/v1 plugin). A directory
/// that vanishes meanwhile is skipped; any other error is returned.
pub fn find(fs: &dyn Fs, h: &Hierarchy, known: &[String]) -> io::Result<Found> {
    let mut found = Found {
        roots: known.to_vec(),
        jobs: Vec::new(),
    };
    let mut slices: Vec<(String, usize)> = vec![(String::new(), 0)];
    while let Some((rel, depth)) = slices.pop() {
        let entries = match fs.read_dir(&h.dir(&rel)) {
            Ok(e) => e,
            Err(e) if cgroup::gone(&e) && !rel.is_empty() => continue,
            Err(e) => return Err(e),
        };
        for e in entries.into_iter().filter(|e| e.is_dir) {
            let child = cgroup::child(&rel, &e.name);
            if is_scope_name(&e.name) || (h.version == Version::V1 && is_v1_root(&child)) {
                found.roots.push(child);
            } else if depth < MAX_SLICE_DEPTH
                && e.name.ends_with(".slice")
                && !e.name.contains("kubepods")
            {
                slices.push((child, depth + 1));
            }
        }
    }
    found.roots.sort();
    found.roots.dedup();
    found.jobs = jobs_under(fs, h, &found.roots, &[])?;
    Ok(found)
}

/// Reads the jobs below the Slurm trees rooted at `roots` (at most
/// [`MAX_JOBS`]). A job in `known` whose CPUs Slurm has written is taken
/// as it is, unread: Slurm writes a job's `cpuset.cpus` once, and the
/// daemon looks every half second with `[slurm] housekeeping`. A root or
/// job that vanishes meanwhile is skipped; any other error is returned.
pub fn jobs_under(
    fs: &dyn Fs,
    h: &Hierarchy,
    roots: &[String],
    known: &[Job],
) -> io::Result<Vec<Job>> {
    let mut jobs = Vec::new();
    // The cgroups that hold jobs: the roots on v2; on v1 the users'
    // cgroups below `slurm/` (`uid_<uid>`).
    let mut parents: Vec<String> = Vec::new();
    for root in roots {
        if h.version == Version::V1 && is_v1_root(root) {
            match fs.read_dir(&h.dir(root)) {
                Ok(e) => parents.extend(
                    e.into_iter()
                        .filter(|e| e.is_dir && e.name.starts_with("uid_"))
                        .map(|e| cgroup::child(root, &e.name)),
                ),
                Err(e) if cgroup::gone(&e) => {}
                Err(e) => return Err(e),
            }
        } else {
            parents.push(root.clone());
        }
    }
    for parent in &parents {
        let entries = match fs.read_dir(&h.dir(parent)) {
            Ok(e) => e,
            Err(e) if cgroup::gone(&e) => continue,
            Err(e) => return Err(e),
        };
        let v1 = h.version == Version::V1 && cgroup::parent(parent).is_some_and(is_v1_root);
        for e in entries
            .into_iter()
            .filter(|e| e.is_dir && e.name != OWN && (!v1 || e.name.starts_with("job_")))
        {
            if jobs.len() == MAX_JOBS {
                return Ok(jobs);
            }
            let rel = cgroup::child(parent, &e.name);
            if let Some(job) = known.iter().find(|j| j.cgroup == rel && !j.cpus.is_empty()) {
                jobs.push(job.clone());
                continue;
            }
            match read_job(fs, h, &rel, &e.name) {
                Ok(job) => jobs.push(job),
                Err(e) if cgroup::gone(&e) => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(jobs)
}

/// The CPUs of running `jobs` among the `online` ones: what Slurm wrote
/// for each (a job whose `cpuset.cpus` is still empty, just made, has
/// none yet: its effective set is its parent's, every CPU).
pub fn job_cores(jobs: &[Job], online: &CpuSet) -> CpuSet {
    jobs.iter()
        .fold(CpuSet::new(), |acc, j| acc.union(&j.cpus))
        .intersection(online)
}

fn read_job(fs: &dyn Fs, h: &Hierarchy, rel: &str, name: &str) -> io::Result<Job> {
    let set = |path: std::path::PathBuf| -> io::Result<CpuSet> {
        let text = fs.read(&path)?;
        text.parse().map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: {e}", path.display()),
            )
        })
    };
    let cpus = set(h.cpus_file(rel))?;
    // A v1 kernel before 4.17 has no effective set: it enforces
    // `cpuset.cpus` itself.
    let effective = match set(h.effective_file(rel)) {
        Err(e) if e.kind() == io::ErrorKind::NotFound && h.version == Version::V1 => cpus.clone(),
        other => other?,
    };
    Ok(Job {
        cgroup: rel.to_string(),
        name: name.to_string(),
        cpus,
        effective,
    })
}

/// Something wrong between one of Slurm's jobs and pinctl.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "slurm", rename_all = "snake_case")]
pub enum Conflict {
    /// The job's CPUs include an exclusive workload's.
    Overlap {
        job: String,
        cgroup: String,
        workload: String,
        cpus: CpuSet,
    },
    /// The kernel gives the job fewer CPUs than Slurm wrote.
    Clipped {
        job: String,
        cgroup: String,
        given: CpuSet,
        effective: CpuSet,
        /// The online CPUs it lost.
        lost: CpuSet,
    },
}

impl std::fmt::Display for Conflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Conflict::Overlap {
                job,
                cgroup,
                workload,
                cpus,
            } => write!(
                f,
                "Slurm job {job} ({cgroup}) has CPUs {cpus} that exclusive workload {workload} holds"
            ),
            Conflict::Clipped {
                job,
                cgroup,
                given,
                effective,
                lost,
            } => write!(
                f,
                "Slurm job {job} ({cgroup}) lost CPUs {lost}: Slurm gave it {given}, the kernel gives it {effective} (an ancestor lacks them)"
            ),
        }
    }
}

/// What is wrong between Slurm's `jobs` and the exclusive workloads
/// (`key`, CPUs): a job whose CPUs an exclusive workload holds too, and a
/// job the kernel gives fewer of the `online` CPUs than Slurm wrote.
pub fn conflicts<'a>(
    jobs: &[Job],
    exclusive: impl IntoIterator<Item = (&'a str, &'a CpuSet)> + Clone,
    online: &CpuSet,
) -> Vec<Conflict> {
    let mut out = Vec::new();
    for job in jobs {
        let had = if job.cpus.is_empty() {
            &job.effective
        } else {
            &job.cpus
        };
        for (key, cpus) in exclusive.clone() {
            let both = had.intersection(cpus);
            if !both.is_empty() {
                out.push(Conflict::Overlap {
                    job: job.name.clone(),
                    cgroup: job.cgroup.clone(),
                    workload: key.to_string(),
                    cpus: both,
                });
            }
        }
        let lost = job.clipped(online);
        if !lost.is_empty() {
            out.push(Conflict::Clipped {
                job: job.name.clone(),
                cgroup: job.cgroup.clone(),
                given: job.cpus.clone(),
                effective: job.effective.clone(),
                lost,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(name: &str, cpus: &str, effective: &str) -> Job {
        Job {
            cgroup: format!("system.slice/{SCOPE}/{name}"),
            name: name.into(),
            cpus: cpus.parse().unwrap(),
            effective: effective.parse().unwrap(),
        }
    }

    /// A task of a job on v2 (Slurm 24.11's `task_0` in its step) and on
    /// v1 (the cgroup plugin's tree in each controller); slurmstepd itself,
    /// a user's session and a look-alike are in no job.
    #[test]
    fn a_process_in_a_job_is_named_by_its_cgroup_file() {
        let v2 = "0::/system.slice/slurmstepd.scope/job_42/step_0/user/task_0\n";
        assert_eq!(
            job_of(v2),
            Some((
                "system.slice/slurmstepd.scope/job_42".to_string(),
                "job_42".to_string()
            ))
        );
        let node = "0::/system.slice/node1_slurmstepd.scope/job_7/step_batch/user/task_0";
        assert_eq!(job_of(node).unwrap().1, "job_7");
        let v1 = "12:cpuset:/slurm/uid_1000/job_9/step_0/task_0\n11:memory:/slurm/uid_1000/job_9/step_0\n1:name=systemd:/system.slice/slurmd.service\n";
        assert_eq!(
            job_of(v1),
            Some(("slurm/uid_1000/job_9".to_string(), "job_9".to_string()))
        );
        assert_eq!(
            job_of("5:cpuset:/slurm_node2/uid_0/job_3/step_1")
                .unwrap()
                .1,
            "job_3"
        );
        for none in [
            "0::/system.slice/slurmstepd.scope/system",
            "0::/system.slice/slurmstepd.scope",
            "0::/user.slice/user-1000.slice/session-3.scope",
            "12:cpuset:/kubepods/slurm/uid_1/job_2",
            "0::/slurm/job_1",
            "",
            "garbage",
        ] {
            assert_eq!(job_of(none), None, "{none}");
        }
    }

    #[test]
    fn a_root_is_the_scope_by_its_whole_name() {
        assert!(is_root("system.slice/slurmstepd.scope"));
        assert!(is_root("slurm.slice/slurm-jobs.slice/slurmstepd.scope"));
        assert!(is_root("slurmstepd.scope"));
        assert!(is_root("system.slice/pinctl-vm_slurmstepd.scope"));
        assert!(!is_root("system.slice/_slurmstepd.scope"));
        assert!(!is_root("system.slice/xslurmstepd.scope.d"));
        assert!(!is_root("system.slice/slurmstepd.scope/job_1"));
        assert!(!is_root("system.slice/xslurmstepd.scope"));
    }

    #[test]
    fn an_overlap_and_a_clipped_job_are_each_named() {
        let jobs = [job("job_1", "4-7", "4-7"), job("job_2", "8-11", "8-9")];
        let a: CpuSet = "6-7".parse().unwrap();
        let b: CpuSet = "12-13".parse().unwrap();
        let online: CpuSet = "0-15".parse().unwrap();
        let found: Vec<String> = conflicts(&jobs, [("pod-a", &a), ("pod-b", &b)], &online)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(
            found[0].contains("job_1") && found[0].contains("6-7") && found[0].contains("pod-a")
        );
        assert!(found[1].contains("job_2") && found[1].contains("lost CPUs 10-11"));
        assert!(conflicts(&jobs[..1], [("pod-b", &b)], &online).is_empty());
        // v2 keeps offline CPUs in cpuset.cpus: those are not lost.
        let offline = [job("job_3", "8-11", "8-9")];
        let some: CpuSet = "0-9".parse().unwrap();
        assert!(conflicts(&offline, [("pod-b", &b)], &some).is_empty());
    }
}
