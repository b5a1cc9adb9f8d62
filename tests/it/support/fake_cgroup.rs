//! A fake cgroup filesystem in a directory, for running the real `pinctld` on
//! it: cgroup v2 (one tree) or v1 (a `cpuset` and a `cpu` hierarchy), with the
//! kubelet's two naming drivers.
//!
//! Control files are regular files. The kernel's rules are not enforced on
//! writes (a regular file takes anything); instead [`FakeCgroup::effective`]
//! computes what the kernel would give a cgroup, and tests check the rules on
//! the resulting tree. Cgroups appear atomically, as `mkdir` on cgroupfs makes
//! a directory with all its files at once: each one is built in a staging
//! directory outside the watched trees, then renamed into place.
//!
//! A v1 tree can also be laid out with every hierarchy a node mounts
//! ([`FakeCgroup::mount_v1_hierarchies`]), for the watchdog. What no fake tree
//! can do is what the kernel does on the daemon's own `mkdir`: a directory the
//! daemon makes has no control files, and the daemon writes only existing
//! files (no `O_CREAT`).

/// One `#[test]` per cgroup version for a scenario function:
/// `on_both_versions!(name => scenario(args))` makes `name::v1` and
/// `name::v2`, each calling `scenario(Version::V1 or V2, args)`. In scope in
/// every module declared after `support` in `main.rs` (`#[macro_use]`).
macro_rules! on_both_versions {
    ($name:ident => $scenario:ident($($arg:expr),*)) => {
        mod $name {
            use super::*;
            #[test]
            fn v1() {
                $scenario(Version::V1 $(, $arg)*);
            }
            #[test]
            fn v2() {
                $scenario(Version::V2 $(, $arg)*);
            }
        }
    };
}

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use pinctl::CpuSet;

/// Which cgroup version the fake tree imitates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

/// The kubelet's cgroup driver, which decides the names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    Systemd,
    Cgroupfs,
}

/// A pod's QoS class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Qos {
    Guaranteed,
    Burstable,
    BestEffort,
}

/// The online CPUs of the fake machine (the `intel-2s-smt` sysfs fixture).
pub const ONLINE: &str = "0-31";
/// The memory nodes of the fake machine.
pub const MEMS: &str = "0-1";

/// How a new cgroup is made.
#[derive(Debug, Clone, Default)]
pub struct Spec {
    /// A CPU limit in whole CPUs (`cpu.max` = `"N00000 100000"`); `None` is
    /// unlimited.
    pub limit: Option<u32>,
    /// The `user.pinctl.cpus` xattr, set before the cgroup appears.
    pub xattr: Option<String>,
    /// The initial `cpuset.cpus` and `cpuset.mems`; empty (a new cgroup's) by
    /// default.
    pub cpus: String,
    pub mems: String,
    /// v2: the controllers its `cgroup.subtree_control` enables for its
    /// children (`None`: `cpuset cpu`; systemd makes a slice with none).
    pub subtree: Option<String>,
}

impl Spec {
    /// A cgroup with a CPU limit of `n` whole CPUs.
    pub fn limit(n: u32) -> Spec {
        Spec {
            limit: Some(n),
            ..Spec::default()
        }
    }

    /// The same, with the `user.pinctl.cpus` xattr set to `value`.
    pub fn xattr(mut self, value: &str) -> Spec {
        self.xattr = Some(value.to_string());
        self
    }

    /// The same, with initial `cpuset.cpus` and `cpuset.mems`.
    pub fn cpuset(mut self, cpus: &str, mems: &str) -> Spec {
        self.cpus = cpus.to_string();
        self.mems = mems.to_string();
        self
    }
}

/// A fake cgroup tree rooted at a directory (the daemon's `cgroup_root`).
#[derive(Debug)]
pub struct FakeCgroup {
    root: PathBuf,
    version: Version,
    staged: AtomicU64,
}

fn write(path: &Path, text: &str) {
    fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

fn join(base: &Path, rel: &str) -> PathBuf {
    if rel.is_empty() {
        base.to_path_buf()
    } else {
        base.join(rel)
    }
}

/// The parent of a relative cgroup path (`""` for a top-level cgroup).
pub fn parent(rel: &str) -> Option<&str> {
    if rel.is_empty() {
        return None;
    }
    Some(rel.rsplit_once('/').map_or("", |(p, _)| p))
}

/// Parses a CPU list, panicking with the text on garbage.
/// What a v2 cgroup whose own `cpuset.cpus` is `own` gets below a parent
/// that gets `up`: their intersection, or all of `up` when that is empty
/// (an empty `own` inherits).
pub fn v2_gets(own: &CpuSet, up: &CpuSet) -> CpuSet {
    let both = own.intersection(up);
    if both.is_empty() { up.clone() } else { both }
}

pub fn set(text: &str) -> CpuSet {
    text.parse()
        .unwrap_or_else(|e| panic!("not a CPU list: {text:?}: {e}"))
}

impl FakeCgroup {
    /// Makes the root of a fake hierarchy under `root` (which must exist).
    pub fn new(root: &Path, version: Version) -> FakeCgroup {
        let tree = FakeCgroup {
            root: root.to_path_buf(),
            version,
            staged: AtomicU64::new(0),
        };
        fs::create_dir_all(tree.staging_dir()).unwrap();
        match version {
            Version::V2 => {
                write(
                    &root.join("cgroup.controllers"),
                    "cpuset cpu io memory pids\n",
                );
                write(&root.join("cgroup.subtree_control"), "cpuset cpu\n");
                write(&root.join("cpuset.cpus.effective"), &format!("{ONLINE}\n"));
                write(&root.join("cpuset.mems.effective"), &format!("{MEMS}\n"));
            }
            Version::V1 => {
                let cpuset = root.join("cpuset");
                let cpu = root.join("cpu");
                fs::create_dir_all(&cpuset).unwrap();
                fs::create_dir_all(&cpu).unwrap();
                write(&cpuset.join("cpuset.cpus"), &format!("{ONLINE}\n"));
                write(&cpuset.join("cpuset.mems"), &format!("{MEMS}\n"));
                write(&cpu.join("cpu.cfs_quota_us"), "-1\n");
                write(&cpu.join("cpu.cfs_period_us"), "100000\n");
            }
        }
        tree
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn version(&self) -> Version {
        self.version
    }

    /// Where cgroups are built before they appear: on the same filesystem,
    /// outside every watched tree.
    fn staging_dir(&self) -> PathBuf {
        self.root.join(".staging")
    }

    /// The base of the cpuset hierarchy (`root` in v2, `root/cpuset` in v1).
    pub fn cpuset_base(&self) -> PathBuf {
        match self.version {
            Version::V2 => self.root.clone(),
            Version::V1 => self.root.join("cpuset"),
        }
    }

    /// The cpuset directory of `rel`.
    pub fn dir(&self, rel: &str) -> PathBuf {
        join(&self.cpuset_base(), rel)
    }

    /// The cpu-controller directory of `rel` (the same as [`Self::dir`] in v2).
    pub fn cpu_dir(&self, rel: &str) -> PathBuf {
        match self.version {
            Version::V2 => join(&self.root, rel),
            Version::V1 => join(&self.root.join("cpu"), rel),
        }
    }

    fn stage(&self) -> PathBuf {
        let n = self.staged.fetch_add(1, Ordering::Relaxed);
        let dir = self.staging_dir().join(format!("cg-{n}"));
        fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        dir
    }

    fn publish(&self, staged: &Path, to: &Path) {
        assert!(
            to.parent().is_some_and(Path::is_dir),
            "the parent of {} must exist",
            to.display()
        );
        fs::rename(staged, to)
            .unwrap_or_else(|e| panic!("rename {} to {}: {e}", staged.display(), to.display()));
    }

    /// Creates cgroup `rel` as `mkdir` on cgroupfs would: in one step, with its
    /// control files. In v1 the cpu-controller side appears first (the limit is
    /// there when the cpuset side is seen).
    pub fn create(&self, rel: &str, spec: &Spec) {
        self.create_edited(rel, spec, |_| {});
    }

    /// [`Self::create`], with `edit` given the new cgroup's directory before
    /// it appears (a control file the kernel would refuse to write, say).
    pub fn create_edited(&self, rel: &str, spec: &Spec, edit: impl FnOnce(&Path)) {
        assert!(
            !rel.is_empty() && !self.exists(rel),
            "cannot create {rel:?}"
        );
        let limit = spec.limit.map(|n| u64::from(n) * 100_000);
        match self.version {
            Version::V2 => {
                let dir = self.stage();
                write(&dir.join("cpuset.cpus"), &spec.cpus);
                write(&dir.join("cpuset.mems"), &spec.mems);
                let subtree = spec.subtree.as_deref().unwrap_or("cpuset cpu\n");
                write(&dir.join("cgroup.subtree_control"), subtree);
                let max = limit.map_or("max".to_string(), |q| q.to_string());
                write(&dir.join("cpu.max"), &format!("{max} 100000\n"));
                // Linux 6.7's partition files; the root's
                // cpuset.cpus.isolated (what says a kernel has them) is the
                // test's to write.
                write(&dir.join("cpuset.cpus.exclusive"), "\n");
                write(&dir.join("cpuset.cpus.partition"), "member\n");
                if let Some(x) = &spec.xattr {
                    xattr::set(&dir, "user.pinctl.cpus", x.as_bytes()).unwrap();
                }
                edit(&dir);
                self.publish(&dir, &self.dir(rel));
            }
            Version::V1 => {
                let cpu = self.stage();
                let quota = limit.map_or("-1".to_string(), |q| q.to_string());
                write(&cpu.join("cpu.cfs_quota_us"), &format!("{quota}\n"));
                write(&cpu.join("cpu.cfs_period_us"), "100000\n");
                self.publish(&cpu, &self.cpu_dir(rel));
                let dir = self.stage();
                write(&dir.join("cpuset.cpus"), &spec.cpus);
                write(&dir.join("cpuset.mems"), &spec.mems);
                if let Some(x) = &spec.xattr {
                    xattr::set(&dir, "user.pinctl.cpus", x.as_bytes()).unwrap();
                }
                edit(&dir);
                self.publish(&dir, &self.dir(rel));
            }
        }
    }

    /// Removes cgroup `rel` (and, in v1, its cpu-controller side).
    pub fn remove(&self, rel: &str) {
        let dir = self.dir(rel);
        fs::remove_dir_all(&dir).unwrap_or_else(|e| panic!("remove {}: {e}", dir.display()));
        if self.version == Version::V1 {
            let cpu = self.cpu_dir(rel);
            fs::remove_dir_all(&cpu).unwrap_or_else(|e| panic!("remove {}: {e}", cpu.display()));
        }
    }

    pub fn exists(&self, rel: &str) -> bool {
        self.dir(rel).is_dir()
    }

    /// The text of a control file of `rel`. A writer truncates before it
    /// writes, so an empty read of a file that had content is retried a few
    /// times rather than taken as the truth.
    fn read(&self, rel: &str, file: &str) -> String {
        let path = self.dir(rel).join(file);
        let mut text = String::new();
        for _ in 0..5 {
            text = fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
            if !text.trim().is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        text
    }

    /// `cpuset.cpus` of `rel`, as written.
    pub fn cpus(&self, rel: &str) -> CpuSet {
        self.read_set(rel, "cpuset.cpus")
    }

    /// `cpuset.mems` of `rel`.
    pub fn mems(&self, rel: &str) -> CpuSet {
        self.read_set(rel, "cpuset.mems")
    }

    /// A CPU or node list file of `rel`. A control file is written and read
    /// whole by the kernel; a regular file is not: a read while the test
    /// and the daemon both write it (a foreign write and its revert) can see
    /// a torn file (seen once in about 40 runs: "0-31\n7-18"). Such a read is
    /// made again; a file that stays garbage panics with its text.
    fn read_set(&self, rel: &str, file: &str) -> CpuSet {
        for _ in 0..5 {
            if let Ok(s) = self.read(rel, file).parse() {
                return s;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        set(&self.read(rel, file))
    }

    /// Writes `cpuset.cpus` of `rel` as another program would (`echo > file`).
    pub fn write_cpus(&self, rel: &str, text: &str) {
        write(&self.dir(rel).join("cpuset.cpus"), text);
    }

    /// Writes a CFS quota of `quota` µs per 100 ms period on `rel`
    /// (`cpu.max` on v2, `cpu.cfs_quota_us` on v1) in one write, never
    /// truncating the file: a fake tree's truncated file would be read
    /// empty for a moment (no limit), which the kernel's never is. Padded
    /// with blanks to the old text's length.
    pub fn write_quota(&self, rel: &str, quota: &str) {
        use std::io::Write as _;
        let (path, text) = match self.version {
            Version::V2 => (self.dir(rel).join("cpu.max"), format!("{quota} 100000")),
            Version::V1 => (
                self.cpu_dir(rel).join("cpu.cfs_quota_us"),
                quota.to_string(),
            ),
        };
        let old = fs::read_to_string(&path).map_or(0, |t| t.len());
        let text = format!("{text:<0$}\n", old.saturating_sub(1));
        fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    }

    /// Sets the `user.pinctl.cpus` xattr on the cgroup directory.
    pub fn set_xattr(&self, rel: &str, value: &str) {
        xattr::set(self.dir(rel), "user.pinctl.cpus", value.as_bytes()).unwrap();
    }

    /// CPU hot-plug as the kernel applies it to cgroups. v2: the root's
    /// effective set follows the online CPUs and every `cpuset.cpus` stays as
    /// written. v1: the root's `cpuset.cpus` follows them, and a CPU going
    /// offline is removed from every cpuset (and not given back when it
    /// returns).
    pub fn set_online(&self, online: &CpuSet) {
        match self.version {
            Version::V2 => write(
                &self.root.join("cpuset.cpus.effective"),
                &format!("{online}\n"),
            ),
            Version::V1 => {
                write(&self.dir("").join("cpuset.cpus"), &format!("{online}\n"));
                for rel in self.cgroups() {
                    let cpus = self.cpus(&rel);
                    let kept = cpus.intersection(online);
                    if kept != cpus {
                        write(&self.dir(&rel).join("cpuset.cpus"), &format!("{kept}\n"));
                    }
                }
            }
        }
    }

    /// The CPUs the kernel would let the tasks of `rel` use. v2: `cpuset.cpus`
    /// ∩ the parent's effective set, where an empty `cpuset.cpus` or an empty
    /// intersection falls back to the parent's effective set. v1: `cpuset.cpus`
    /// (the kernel refuses writes that leave the parent).
    pub fn effective(&self, rel: &str) -> CpuSet {
        match self.version {
            Version::V1 => self.cpus(rel),
            Version::V2 => match parent(rel) {
                None => set(&self.read("", "cpuset.cpus.effective")),
                Some(p) => v2_gets(&self.cpus(rel), &self.effective(p)),
            },
        }
    }

    /// Every cgroup of the cpuset hierarchy below the root (relative paths,
    /// parents before children).
    pub fn cgroups(&self) -> Vec<String> {
        cgroups_below(&self.cpuset_base())
    }

    /// One line per cgroup: its path, `cpuset.cpus`, `cpuset.mems` and the
    /// xattr when it has them; with [`Self::mount_v1_hierarchies`], every
    /// hierarchy under its own heading.
    pub fn dump(&self) -> String {
        let mut s = String::new();
        let bases: Vec<(Option<&str>, PathBuf)> = if self.has_v1_hierarchies() {
            V1_HIERARCHIES
                .iter()
                .map(|h| (Some(*h), self.hier_dir(h, "")))
                .collect()
        } else {
            vec![(None, self.cpuset_base())]
        };
        for (name, base) in bases {
            if let Some(name) = name {
                let _ = writeln!(s, "  {name}:");
            }
            for rel in cgroups_below(&base) {
                let dir = join(&base, &rel);
                // Only regular files: a FIFO put there by a test would block.
                let file = |f: &str| {
                    let path = dir.join(f);
                    if !fs::symlink_metadata(&path).is_ok_and(|m| m.is_file()) {
                        return None;
                    }
                    fs::read_to_string(path).ok().map(|t| t.trim().to_string())
                };
                let _ = write!(s, "  {rel}:");
                if let Some(c) = file("cpuset.cpus") {
                    let _ = write!(s, " cpus={c:?}");
                }
                if let Some(m) = file("cpuset.mems") {
                    let _ = write!(s, " mems={m:?}");
                }
                if let Ok(Some(x)) = xattr::get(&dir, "user.pinctl.cpus") {
                    let _ = write!(s, " xattr={}", String::from_utf8_lossy(&x));
                }
                let _ = writeln!(s);
            }
        }
        s
    }
}

/// The v1 hierarchies of a node as systemd mounts them, by their directory
/// under the cgroup root: one per controller (or named hierarchy), `cpu` and
/// `cpuacct` joined in `cpu,cpuacct` (with `cpu` and `cpuacct` links to it).
/// [`FakeCgroup::mount_v1_hierarchies`] makes them.
pub const V1_HIERARCHIES: [&str; 6] = [
    "cpuset",
    "cpu,cpuacct",
    "memory",
    "pids",
    "freezer",
    "systemd",
];

/// The v1 hierarchies [`FakeCgroup::create`] does not make cgroups in.
pub const V1_OTHERS: [&str; 4] = ["memory", "pids", "freezer", "systemd"];

impl FakeCgroup {
    /// v1 only: lays the root out as systemd mounts v1 on a node, with every
    /// hierarchy of [`V1_HIERARCHIES`]. Each hierarchy's root gets
    /// `cgroup.procs`, which is how the daemon tells a mounted hierarchy from
    /// any directory; the cpu controller's tree moves to `cpu,cpuacct`, and
    /// `cpu` and `cpuacct` become links to it, so [`Self::cpu_dir`] still works
    /// (through the link) and the cgroups already made stay. Without this a
    /// fake v1 root has only `cpuset` and `cpu`, neither with `cgroup.procs`,
    /// and the watchdog sees no hierarchy at all.
    pub fn mount_v1_hierarchies(&self) {
        assert_eq!(self.version, Version::V1, "v1 hierarchies on a v2 tree");
        let cpu = self.root.join("cpu");
        let joined = self.root.join("cpu,cpuacct");
        if !joined.exists() {
            fs::rename(&cpu, &joined).unwrap_or_else(|e| panic!("rename {}: {e}", cpu.display()));
            std::os::unix::fs::symlink("cpu,cpuacct", &cpu).unwrap();
            std::os::unix::fs::symlink("cpu,cpuacct", self.root.join("cpuacct")).unwrap();
        }
        for name in V1_HIERARCHIES {
            let dir = self.root.join(name);
            fs::create_dir_all(&dir).unwrap();
            write(&dir.join("cgroup.procs"), "1\n");
        }
    }

    /// Whether [`Self::mount_v1_hierarchies`] laid the root out.
    fn has_v1_hierarchies(&self) -> bool {
        self.version == Version::V1 && self.root.join("cpu,cpuacct").is_dir()
    }

    /// v1: the directory of `rel` in hierarchy `name` (an entry of
    /// [`V1_HIERARCHIES`]).
    pub fn hier_dir(&self, name: &str, rel: &str) -> PathBuf {
        join(&self.root.join(name), rel)
    }

    /// v1: makes cgroup `rel` in the hierarchies of [`V1_OTHERS`], as the
    /// kubelet and runc do besides the cpuset and cpu ones ([`Self::create`]);
    /// the freezer's copy has `freezer.state` `THAWED`, as the kernel gives it.
    pub fn create_in_others(&self, rel: &str) {
        for name in V1_OTHERS {
            let dir = self.hier_dir(name, rel);
            fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
            if name == "freezer" {
                write(&dir.join("freezer.state"), "THAWED\n");
            }
        }
    }

    /// Writes any control file of cgroup `rel` in the cpuset hierarchy (the
    /// one tree in v2), creating it if need be: the files [`Self::create`]
    /// does not make (v2 `cgroup.controllers`, `cgroup.freeze`), or a new
    /// value as another program would write it.
    pub fn write_file(&self, rel: &str, file: &str, text: &str) {
        write(&self.dir(rel).join(file), text);
    }

    /// The text of any control file of cgroup `rel` in the cpuset hierarchy.
    pub fn read_file(&self, rel: &str, file: &str) -> String {
        let path = self.dir(rel).join(file);
        fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
    }
}

/// The kubelet's cgroup names under one driver.
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    pub driver: Driver,
}

impl Layout {
    pub fn new(driver: Driver) -> Layout {
        Layout { driver }
    }

    /// The kubepods root.
    pub fn root(&self) -> String {
        match self.driver {
            Driver::Systemd => "kubepods.slice".into(),
            Driver::Cgroupfs => "kubepods".into(),
        }
    }

    /// The QoS parent of `qos` (the root for Guaranteed).
    pub fn qos_parent(&self, qos: Qos) -> String {
        let name = match qos {
            Qos::Guaranteed => return self.root(),
            Qos::Burstable => "burstable",
            Qos::BestEffort => "besteffort",
        };
        match self.driver {
            Driver::Systemd => format!("kubepods.slice/kubepods-{name}.slice"),
            Driver::Cgroupfs => format!("kubepods/{name}"),
        }
    }

    /// The pod cgroup of pod `uid` (canonical, with dashes).
    pub fn pod(&self, qos: Qos, uid: &str) -> String {
        let parent = self.qos_parent(qos);
        match self.driver {
            Driver::Systemd => {
                let uid = uid.replace('-', "_");
                let infix = match qos {
                    Qos::Guaranteed => String::new(),
                    Qos::Burstable => "burstable-".into(),
                    Qos::BestEffort => "besteffort-".into(),
                };
                format!("{parent}/kubepods-{infix}pod{uid}.slice")
            }
            Driver::Cgroupfs => format!("{parent}/pod{uid}"),
        }
    }

    /// The container cgroup of container `id` (hex) in pod cgroup `pod`.
    pub fn container(&self, pod: &str, id: &str) -> String {
        match self.driver {
            Driver::Systemd => format!("{pod}/cri-containerd-{id}.scope"),
            Driver::Cgroupfs => format!("{pod}/{id}"),
        }
    }

    /// The root and the QoS parents, which exist on every node.
    pub fn skeleton(&self) -> Vec<String> {
        vec![
            self.root(),
            self.qos_parent(Qos::Burstable),
            self.qos_parent(Qos::BestEffort),
        ]
    }
}

/// A canonical pod UID, distinct for each `n`; UIDs sort by `n`.
pub fn uid(n: u32) -> String {
    format!("{n:08x}-1111-4222-8333-0123456789ab")
}

/// A 64-hex-digit container id, distinct for each `n`.
pub fn container_id(n: u32) -> String {
    format!("{n:08x}{}", "c0ffee00".repeat(7))
}

/// Every cgroup below hierarchy root `base` (relative paths, parents before
/// children).
pub fn cgroups_below(base: &Path) -> Vec<String> {
    fn walk(base: &Path, rel: &str, out: &mut Vec<String>) {
        let Ok(entries) = fs::read_dir(join(base, rel)) else {
            return;
        };
        let mut names: Vec<String> = entries
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| !n.starts_with('.'))
            .collect();
        names.sort();
        for n in names {
            let child = if rel.is_empty() {
                n
            } else {
                format!("{rel}/{n}")
            };
            out.push(child.clone());
            walk(base, &child, out);
        }
    }
    let mut out = Vec::new();
    walk(base, "", &mut out);
    out
}
