//! procfs: everything pinctl reads about processes and threads under `/proc`.
//!
//! - Owns the watchdog's look for tasks in D state (`stat`, `cgroup`,
//!   `wchan`), the process list, and `pinctl verify`'s threads and
//!   affinities (`task/`, `Cpus_allowed_list`).
//! - Every reader takes the procfs root and an [`Fs`]. The daemon runs them
//!   on its I/O threads, one call per process: a D-state task's file can
//!   hang (KERNEL-NOTES, "Reads that hang"). The parsers are pure; a
//!   `stat` line's is [`crate::task::parse_stat`].
//! - Must never write, nor decide what a finding means: the watchdog and
//!   `verify` do.

use std::io;
use std::path::{Path, PathBuf};

use crate::cgroup::Version;
use crate::cpuset::CpuSet;
use crate::io::Fs;
use crate::task::{TaskStat, parse_stat};

/// The cgroup of a task from its `/proc/.../cgroup`, relative to the cpuset
/// hierarchy: the v2 line (`0::/path`) or the v1 line naming `cpuset`.
pub fn parse_cgroup(text: &str, version: Version) -> Option<String> {
    text.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let ours = match version {
            Version::V2 => controllers.is_empty(),
            Version::V1 => controllers.split(',').any(|c| c == "cpuset"),
        };
        ours.then(|| path.trim().trim_start_matches('/').to_string())
    })
}

/// A task found in uninterruptible sleep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sleeper {
    pub stat: TaskStat,
    /// Its cgroup in the cpuset hierarchy, when readable.
    pub cgroup: Option<String>,
    /// The kernel function it sleeps in, when readable.
    pub wchan: Option<String>,
    /// Whose task it is: the owner of its `/proc` directory.
    pub uid: Option<u32>,
}

/// Reads the tasks of process `pid` under `proc_root` and returns those in
/// uninterruptible sleep (state `D`), each with its cgroup and `wchan` when
/// readable. `Ok(vec![])` when the process is gone.
///
/// The process's own `stat` is read first: most processes have one thread,
/// and then it is that thread's, so one read answers (a walk of `task/`
/// costs a directory and a read per thread). A process of more threads, or
/// whose `stat` cannot be read or parsed, has its `task/` walked.
pub fn read_dstate(
    fs: &dyn Fs,
    proc_root: &Path,
    pid: u32,
    version: Version,
) -> io::Result<Vec<Sleeper>> {
    let dir = proc_root.join(pid.to_string());
    if let Some(stat) = fs
        .read(&dir.join("stat"))
        .ok()
        .and_then(|text| parse_stat(pid, &text))
        .filter(|s| s.threads == 1)
    {
        return Ok(sleeper(fs, &dir, stat, version).into_iter().collect());
    }
    let tasks = match fs.read_dir(&dir.join("task")) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for task in tasks {
        let tdir = dir.join("task").join(&task.name);
        let Ok(text) = fs.read(&tdir.join("stat")) else {
            continue; // exited
        };
        if let Some(stat) = parse_stat(pid, &text) {
            out.extend(sleeper(fs, &tdir, stat, version));
        }
    }
    Ok(out)
}

/// The task whose directory is `tdir` and whose `stat` is `stat`, as a
/// [`Sleeper`] when it is in D state, with what else its directory says.
fn sleeper(fs: &dyn Fs, tdir: &Path, stat: TaskStat, version: Version) -> Option<Sleeper> {
    if stat.state != 'D' {
        return None;
    }
    let cgroup = fs
        .read(&tdir.join("cgroup"))
        .ok()
        .and_then(|t| parse_cgroup(&t, version));
    let wchan = fs
        .read(&tdir.join("wchan"))
        .ok()
        .map(|w| w.trim().to_string())
        .filter(|w| !w.is_empty() && w != "0");
    let uid = fs.owner(tdir).ok().map(|o| o.uid);
    Some(Sleeper {
        stat,
        cgroup,
        wchan,
        uid,
    })
}

/// The process ids under `proc_root` (its numeric entries), sorted.
pub fn list_pids(fs: &dyn Fs, proc_root: &Path) -> io::Result<Vec<u32>> {
    let mut pids: Vec<u32> = fs
        .read_dir(proc_root)?
        .into_iter()
        .filter_map(|e| e.name.parse().ok())
        .collect();
    pids.sort_unstable();
    Ok(pids)
}

/// The processes under `proc_root` whose command (`comm`, as their `stat`
/// says) is `comm`, in pid order. One gone or unreadable meanwhile is not
/// among them.
pub fn with_comm(fs: &dyn Fs, proc_root: &Path, comm: &str) -> io::Result<Vec<u32>> {
    let mut found = Vec::new();
    for pid in list_pids(fs, proc_root)? {
        let Ok(text) = fs.read(&proc_root.join(pid.to_string()).join("stat")) else {
            continue;
        };
        if parse_stat(pid, &text).is_some_and(|s| s.comm == comm) {
            found.push(pid);
        }
    }
    Ok(found)
}

/// Runs `job` for every process under `proc_root` that `keep` keeps, on
/// the I/O pool: the list in one job ([`listed`]), then [`each_of`] them.
/// `Err` when the list could not be read.
pub async fn each_pid<T, F>(
    pool: &crate::io::IoPool,
    proc_root: &Path,
    keep: impl Fn(u32) -> bool,
    job: F,
) -> Result<Vec<(u32, Result<T, crate::io::IoError>)>, crate::io::IoError>
where
    T: Send + 'static,
    F: Fn(&dyn Fs, &Path, u32) -> io::Result<T> + Send + Sync + 'static,
{
    let mut pids = listed(pool, proc_root).await?;
    pids.retain(|&pid| keep(pid));
    Ok(each_of(pool, proc_root, pids, job).await)
}

/// [`list_pids`] on the I/O pool, in one timed job.
pub async fn listed(
    pool: &crate::io::IoPool,
    proc_root: &Path,
) -> Result<Vec<u32>, crate::io::IoError> {
    let root = proc_root.to_path_buf();
    pool.run_op("list", proc_root, move |fs| list_pids(fs, &root))
        .await
}

/// Runs `job` for each process of `pids` under `proc_root`, on the I/O
/// pool: one timed step per process (a process whose files hang costs its
/// own step). Each result beside its pid.
pub async fn each_of<T, F>(
    pool: &crate::io::IoPool,
    proc_root: &Path,
    pids: Vec<u32>,
    job: F,
) -> Vec<(u32, Result<T, crate::io::IoError>)>
where
    T: Send + 'static,
    F: Fn(&dyn Fs, &Path, u32) -> io::Result<T> + Send + Sync + 'static,
{
    let items: Vec<(PathBuf, u32)> = pids
        .iter()
        .map(|pid| (proc_root.join(pid.to_string()), *pid))
        .collect();
    let root = proc_root.to_path_buf();
    let results = pool
        .run_batch("read", items, move |fs, _, pid| job(fs, &root, *pid))
        .await;
    pids.into_iter().zip(results).collect()
}

/// The thread ids of process `pid`: the entries of `/proc/PID/task`. When
/// that cannot be listed (a fake tree may have only `/proc/PID/status`) the
/// process counts as its one thread.
pub fn threads(fs: &dyn Fs, proc_root: &Path, pid: u32) -> Vec<u32> {
    let dir = proc_root.join(pid.to_string()).join("task");
    match fs.read_dir(&dir) {
        Ok(entries) => entries.iter().filter_map(|e| e.name.parse().ok()).collect(),
        Err(_) => vec![pid],
    }
}

/// Where a task may run, from its `status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Affinity {
    /// Its command (`Name:`); empty when the file has none.
    pub comm: String,
    /// `Cpus_allowed_list:`.
    pub allowed: CpuSet,
}

/// The `status` file of thread `tid` of process `pid`: the process's own
/// for its main thread, `task/TID/status` for the others.
pub fn status_file(proc_root: &Path, pid: u32, tid: u32) -> PathBuf {
    let dir = proc_root.join(pid.to_string());
    if pid == tid {
        dir.join("status")
    } else {
        dir.join("task").join(tid.to_string()).join("status")
    }
}

/// Reads `Name:` and `Cpus_allowed_list:` of thread `tid` of process `pid`;
/// `Ok(None)` when the task is gone. Every error names the file.
pub fn affinity(fs: &dyn Fs, proc_root: &Path, pid: u32, tid: u32) -> io::Result<Option<Affinity>> {
    let path = status_file(proc_root, pid, tid);
    let invalid = |what: String| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: {what}", path.display()),
        )
    };
    let text = match fs.read(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
    };
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().to_string())
    };
    let comm = field("Name:").unwrap_or_default();
    let allowed = field("Cpus_allowed_list:")
        .ok_or_else(|| invalid("no Cpus_allowed_list".into()))?
        .parse::<CpuSet>()
        .map_err(|e| invalid(e.to_string()))?;
    Ok(Some(Affinity { comm, allowed }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::RealFs;

    #[test]
    fn cgroup_lines_pick_the_cpuset_hierarchy() {
        let v1 = "12:pids:/a\n5:cpuset,cpu:/kubepods/pod1/c1\n1:name=systemd:/x\n";
        assert_eq!(
            parse_cgroup(v1, Version::V1).as_deref(),
            Some("kubepods/pod1/c1")
        );
        assert_eq!(
            parse_cgroup("0::/kubepods.slice/x\n", Version::V2).as_deref(),
            Some("kubepods.slice/x")
        );
        assert_eq!(parse_cgroup("0::/\n", Version::V2).as_deref(), Some(""));
        assert_eq!(parse_cgroup("", Version::V2), None);
    }

    /// Writes `text` to `rel` under `root`, making its directories.
    fn put(root: &Path, rel: &str, text: &str) {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn stat(tid: u32, comm: &str, state: char) -> String {
        format!("{tid} ({comm}) {state} 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 777 0 0\n")
    }

    #[test]
    fn dstate_tasks_of_a_process_with_their_cgroup_and_wchan() {
        let tmp = tempfile::tempdir().unwrap();
        let proc = tmp.path();
        put(proc, "10/task/10/stat", &stat(10, "app", 'S'));
        put(proc, "10/task/11/stat", &stat(11, "app io", 'D'));
        put(proc, "10/task/11/cgroup", "0::/kubepods.slice/c1\n");
        put(proc, "10/task/11/wchan", "io_schedule");
        put(proc, "10/task/12/stat", &stat(12, "idle", 'D'));
        put(proc, "10/task/12/wchan", "0");
        put(proc, "self/status", "");
        assert_eq!(list_pids(&RealFs, proc).unwrap(), [10]);
        let mut got = read_dstate(&RealFs, proc, 10, Version::V2).unwrap();
        got.sort_by_key(|s| s.stat.tid);
        let summary: Vec<_> = got
            .iter()
            .map(|s| {
                (
                    s.stat.tid,
                    s.stat.comm.as_str(),
                    s.cgroup.as_deref(),
                    s.wchan.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                (11, "app io", Some("kubepods.slice/c1"), Some("io_schedule")),
                (12, "idle", None, None)
            ]
        );
        assert!(got.iter().all(|s| s.uid.is_some()));
        assert_eq!(read_dstate(&RealFs, proc, 99, Version::V2).unwrap(), []);
    }

    #[test]
    fn a_process_of_one_thread_is_read_from_its_own_stat() {
        let tmp = tempfile::tempdir().unwrap();
        let proc = tmp.path();
        // One thread, in D: its own directory says all, no task/ needed.
        put(proc, "20/stat", &stat(20, "one", 'D'));
        put(proc, "20/cgroup", "0::/kubepods.slice/c2\n");
        put(proc, "20/wchan", "nfs_wait");
        let got = read_dstate(&RealFs, proc, 20, Version::V2).unwrap();
        assert_eq!(
            got.iter()
                .map(|s| (s.stat.tid, s.cgroup.as_deref(), s.wchan.as_deref()))
                .collect::<Vec<_>>(),
            [(20, Some("kubepods.slice/c2"), Some("nfs_wait"))]
        );
        // One thread, sleeping: nothing, and task/ is not read (a stray
        // D-state entry there would be found otherwise).
        put(proc, "21/stat", &stat(21, "idle", 'S'));
        put(proc, "21/task/21/stat", &stat(21, "idle", 'D'));
        assert_eq!(read_dstate(&RealFs, proc, 21, Version::V2).unwrap(), []);
        // More threads: the process's stat (its leader's) is not enough.
        let three = stat(30, "many", 'S').replace(" 20 0 1 0 777", " 20 0 3 0 777");
        put(proc, "30/stat", &three);
        put(proc, "30/task/30/stat", &stat(30, "many", 'S'));
        put(proc, "30/task/31/stat", &stat(31, "many io", 'D'));
        let got = read_dstate(&RealFs, proc, 30, Version::V2).unwrap();
        assert_eq!(got.iter().map(|s| s.stat.tid).collect::<Vec<_>>(), [31]);
    }

    #[test]
    fn processes_are_found_by_their_command() {
        let tmp = tempfile::tempdir().unwrap();
        let proc = tmp.path();
        put(proc, "7/stat", &stat(7, "kubelet", 'S'));
        put(proc, "8/stat", &stat(8, "kubelet-helper", 'S'));
        put(proc, "9/stat", "garbage");
        put(proc, "10/status", "no stat: gone meanwhile");
        put(proc, "12/stat", &stat(12, "kubelet", 'S'));
        assert_eq!(with_comm(&RealFs, proc, "kubelet").unwrap(), [7, 12]);
        assert!(with_comm(&RealFs, proc, "kube").unwrap().is_empty());
        assert!(with_comm(&RealFs, &proc.join("none"), "kubelet").is_err());
    }

    #[test]
    fn threads_and_their_affinity() {
        let tmp = tempfile::tempdir().unwrap();
        let proc = tmp.path();
        put(proc, "20/status", "Name:\tdb\nCpus_allowed_list:\t3,11\n");
        put(proc, "30/status", "Name:\tweb\nCpus_allowed_list:\t0-15\n");
        put(proc, "30/task/30/status", "");
        put(
            proc,
            "30/task/31/status",
            "Name:\tworker\nCpus_allowed_list:\t2\n",
        );
        put(proc, "40/status", "Name:\tbad\n");
        put(proc, "50/status", "Name:\tbad\nCpus_allowed_list:\tx\n");

        assert_eq!(threads(&RealFs, proc, 20), [20], "no task/: one thread");
        let mut tids = threads(&RealFs, proc, 30);
        tids.sort_unstable();
        assert_eq!(tids, [30, 31]);

        let a = affinity(&RealFs, proc, 30, 31).unwrap().unwrap();
        assert_eq!(
            (a.comm.as_str(), a.allowed.to_string()),
            ("worker", "2".into())
        );
        let a = affinity(&RealFs, proc, 30, 30).unwrap().unwrap();
        assert_eq!(a.comm, "web", "the main thread reads the process's file");
        assert_eq!(affinity(&RealFs, proc, 60, 60).unwrap(), None, "gone");

        let e = affinity(&RealFs, proc, 40, 40).unwrap_err().to_string();
        assert_eq!(
            e,
            format!("{}: no Cpus_allowed_list", proc.join("40/status").display())
        );
        let e = affinity(&RealFs, proc, 50, 50).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!(
                "{}: invalid CPU list",
                proc.join("50/status").display()
            )),
            "{e}"
        );
    }
}
