//! The real cgroup hierarchy of this machine, for the benchmark on the
//! kernel's cgroupfs (`benches/real_cgroup.rs`) and the soak
//! (`tests/soak`, which includes this file by `#[path]`, as the README's
//! tour does, `tests/tour`, for the hierarchies): where the cpuset
//! and cpu controllers are (v1, or v2 at the mount), cgroups made as runc
//! makes them, CFS quotas, and the removal of a run's top cgroup from every
//! hierarchy, also of earlier runs that were killed. Run as root.

use std::fs::{self, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

impl Version {
    pub fn name(self) -> &'static str {
        match self {
            Version::V1 => "cgroup v1",
            Version::V2 => "cgroup v2",
        }
    }

    pub fn short(self) -> &'static str {
        match self {
            Version::V1 => "v1",
            Version::V2 => "v2",
        }
    }
}

/// Where the cpuset and cpu controllers are, and their file names.
pub struct Hier {
    pub version: Version,
    pub mount: PathBuf,
    /// The cpuset hierarchy's root (v2: the mount).
    pub cpuset: PathBuf,
    /// The cpu hierarchy's root (v2: the mount).
    pub cpu: PathBuf,
}

impl Hier {
    pub fn detect(mount: &Path) -> Result<Hier, String> {
        if !nix::unistd::geteuid().is_root() {
            return Err(format!(
                "not root (euid {}): it makes cgroups under {}",
                nix::unistd::geteuid(),
                mount.display()
            ));
        }
        let v2 = fs::read_to_string(mount.join("cgroup.controllers")).ok();
        if let Some(c) = v2 {
            if !c.split_whitespace().any(|c| c == "cpuset") {
                return Err(format!(
                    "{} is cgroup v2 without the cpuset controller",
                    mount.display()
                ));
            }
            return Ok(Hier {
                version: Version::V2,
                mount: mount.into(),
                cpuset: mount.into(),
                cpu: mount.into(),
            });
        }
        let cpuset = mount.join("cpuset");
        if !cpuset.join("cpuset.cpus").exists() {
            return Err(format!(
                "no cgroup v1 cpuset hierarchy at {}",
                cpuset.display()
            ));
        }
        // `cpu`, or `cpu,cpuacct` where both are mounted together.
        let Some(cpu) = ["cpu", "cpu,cpuacct"]
            .iter()
            .map(|name| mount.join(name))
            .find(|dir| dir.join("cpu.cfs_quota_us").exists())
        else {
            return Err(format!(
                "no cgroup v1 cpu hierarchy below {}",
                mount.display()
            ));
        };
        Ok(Hier {
            version: Version::V1,
            mount: mount.into(),
            cpuset,
            cpu,
        })
    }

    /// The hierarchies a cgroup is made in.
    pub fn roots(&self) -> Vec<&Path> {
        match self.version {
            Version::V1 => vec![&self.cpuset, &self.cpu],
            Version::V2 => vec![&self.cpuset],
        }
    }

    /// Every hierarchy below the mount: the daemon's watchdog repairs its
    /// required paths in all of them (v1), so all are cleaned up.
    pub fn all_roots(&self) -> Vec<PathBuf> {
        hierarchies(&self.mount)
    }

    pub fn effective(&self) -> &'static str {
        match self.version {
            Version::V1 => "cpuset.effective_cpus",
            Version::V2 => "cpuset.cpus.effective",
        }
    }

    /// Makes cgroup `rel` as runc does; `parent` says it will have children.
    pub fn make(&self, rel: &str, parent: bool) -> Result<()> {
        let dir = self.cpuset.join(rel);
        fs::create_dir(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        match self.version {
            Version::V1 => {
                // runc's cpuset: a new v1 cgroup has empty sets; copy the parent's.
                let up = dir.parent().expect("below the top");
                for f in ["cpuset.cpus", "cpuset.mems"] {
                    let text = fs::read_to_string(up.join(f))?;
                    write(&dir.join(f), text.trim())?;
                }
                let cpu = self.cpu.join(rel);
                fs::create_dir(&cpu).with_context(|| format!("cannot create {}", cpu.display()))?;
            }
            Version::V2 => {
                if parent {
                    write(&dir.join("cgroup.subtree_control"), "+cpuset +cpu")?;
                }
            }
        }
        Ok(())
    }

    /// One CPU's worth of CFS quota on cgroup `rel`: a Guaranteed container.
    pub fn one_cpu_quota(&self, rel: &str) -> Result<()> {
        self.quota(rel, 100_000)
    }

    /// A CFS quota of `quota_us` per 100 ms period on cgroup `rel`, as runc
    /// writes a container's CPU limit (100000: one CPU).
    pub fn quota(&self, rel: &str, quota_us: u64) -> Result<()> {
        match self.version {
            Version::V1 => {
                let dir = self.cpu.join(rel);
                write(&dir.join("cpu.cfs_period_us"), "100000")?;
                write(&dir.join("cpu.cfs_quota_us"), &quota_us.to_string())
            }
            Version::V2 => write(
                &self.cpu.join(rel).join("cpu.max"),
                &format!("{quota_us} 100000"),
            ),
        }
    }

    /// Makes the top cgroup `top` of a run (outside every subtree the
    /// daemon manages, so set up here): on v1 its cpuset gets `online` and
    /// the root's memory nodes; on v2 the cpuset and cpu controllers are
    /// enabled for it and below it.
    pub fn make_top(&self, top: &str, online: &str) -> Result<()> {
        for root in self.roots() {
            let dir = root.join(top);
            fs::create_dir(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        }
        match self.version {
            Version::V1 => {
                let dir = self.cpuset.join(top);
                write(&dir.join("cpuset.cpus"), online)?;
                let mems = fs::read_to_string(self.cpuset.join("cpuset.mems"))?;
                write(&dir.join("cpuset.mems"), mems.trim())
            }
            Version::V2 => {
                write(&self.mount.join("cgroup.subtree_control"), "+cpuset +cpu")?;
                write(
                    &self.cpuset.join(top).join("cgroup.subtree_control"),
                    "+cpuset +cpu",
                )
            }
        }
    }

    /// Removes cgroup `rel` and everything below it, in the hierarchies it
    /// was made in.
    pub fn remove(&self, rel: &str) {
        for root in self.roots() {
            remove_tree(&root.join(rel));
        }
    }

    /// Removes cgroup `rel` and everything below it, in every hierarchy.
    pub fn remove_everywhere(&self, rel: &str) {
        for root in self.all_roots() {
            remove_tree(&root.join(rel));
        }
    }

    /// Removes the top cgroups of earlier runs that were killed
    /// (`<prefix><pid>`, [`stale_runs`]).
    pub fn remove_stale(&self, prefix: &str) {
        for root in self.all_roots() {
            for top in stale_runs(&root, prefix) {
                remove_tree(&top);
            }
        }
    }
}

/// The roots of the hierarchies mounted at `mount`: the mount itself on v2
/// (it has `cgroup.controllers`); each controller's directory, and the
/// unified tree beside them, on v1. In path order.
pub fn hierarchies(mount: &Path) -> Vec<PathBuf> {
    if mount.join("cgroup.controllers").exists() {
        return vec![mount.to_path_buf()];
    }
    let mut out: Vec<PathBuf> = fs::read_dir(mount)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// `rmdir` bottom-up: the only way to remove a cgroup.
pub fn remove_tree(dir: &Path) {
    if let Ok(entries) = fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_tree(&e.path());
            }
        }
    }
    let _ = fs::remove_dir(dir);
}

/// One `write(2)`, as `echo` does, to an existing control file.
pub fn write(path: &Path, data: &str) -> Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .open(path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    f.write_all(data.as_bytes())
        .with_context(|| format!("cannot write {data:?} to {}", path.display()))
}

/// The entries of `dir` named `<prefix><pid>` whose process is gone: what
/// a run killed outright left behind.
pub fn stale_runs(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_prefix(prefix))
                .and_then(|p| p.parse::<u32>().ok())
                .is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists())
        })
        .map(|e| e.path())
        .collect()
}
