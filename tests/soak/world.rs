//! The soak's containers on the real cgroupfs: the kubelet's layout under
//! the soak's own top cgroup, in both cgroup drivers' names, made and
//! removed as runc does, each with a real process; and the list of live
//! workloads the sampler reads ([`Live`]).
//!
//! Safety: everything is made below `<top>` (`pinctl-soak-<pid>`), and
//! [`Top`]'s `Drop` removes it from every hierarchy. [`World`]'s `Drop`
//! kills every `sleep` it started (they also die with the thread that
//! started them: `PR_SET_PDEATHSIG`).

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::thread::sleep;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use pinctl::CpuSet;

use crate::cgroupfs::{Hier, Version, write};
use crate::rng::Rng;
use crate::vm::{self, Units};

/// Container ids that start so are matched by the soak's `[[rule]]`s.
pub const RULE_PREFIX: &str = "5ca1ab1e";

/// How a container asks for exclusive CPUs, if it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ask {
    /// A Burstable pod's container: the shared pool.
    Shared,
    /// A Guaranteed pod's container whose CPU limit is not a whole number
    /// of CPUs (half a CPU): the shared pool too.
    Fraction,
    /// A Guaranteed pod's container with a whole-number CPU limit: the
    /// kubelet rule.
    Kubelet,
    /// A Burstable container with the xattr `user.pinctl.cpus`.
    Xattr,
    /// A Burstable container whose OCI bundle has `pinctl.io/cpus`.
    Annotation,
    /// A Burstable container a `[[rule]]` matches (its id's prefix).
    Rule,
}

impl Ask {
    pub const EXCLUSIVE: [Ask; 4] = [Ask::Kubelet, Ask::Xattr, Ask::Annotation, Ask::Rule];

    pub fn exclusive(self) -> bool {
        !matches!(self, Ask::Shared | Ask::Fraction)
    }

    fn guaranteed(self) -> bool {
        matches!(self, Ask::Kubelet | Ask::Fraction)
    }
}

/// One container the soak made.
pub struct Container {
    pub n: u64,
    pub ask: Ask,
    /// The pod's and the container's cgroups, relative to the mount.
    pub pod: String,
    pub rel: String,
    pub id: String,
    /// CPUs its limit says (kubelet rule).
    pub cpus: u64,
    pub sleep: Option<Child>,
    /// Its pod's slice, when systemd made its cgroups (a scope and a slice).
    pub unit: Option<String>,
}

/// A workload the sampler reads: a container of the soak's, a `pinctl
/// run`, the shared cgroup.
pub struct Entry {
    /// What a failure calls it: its cgroup, relative to the mount.
    pub name: String,
    /// Its effective set (v1 `cpuset.effective_cpus`, v2
    /// `cpuset.cpus.effective`).
    pub file: PathBuf,
    /// It asks for exclusive CPUs.
    pub asks: bool,
    /// The soak changed its CPU limit last then (a resize).
    pub resized: Option<Instant>,
    /// A container (not a run or the shared cgroup): counted as live.
    pub container: bool,
}

impl Entry {
    /// The workload of cgroup `rel` (relative to the mount).
    pub fn new(top: &Top, rel: &str, asks: bool, container: bool) -> Entry {
        Entry {
            name: rel.to_string(),
            file: top.effective(rel),
            asks,
            resized: None,
            container,
        }
    }
}

/// The live workloads, by number. The soak takes one out before it
/// removes it, under the lock the sampler holds while it reads them, so a
/// removal never falls inside a sample.
#[derive(Default)]
pub struct Live {
    pub entries: BTreeMap<u64, Entry>,
}

/// The soak's top cgroup in every hierarchy, removed on drop; and with
/// `PINCTL_SOAK_RELOADS=1` its systemd tree, where systemd makes the
/// systemd driver's containers (stopped on drop).
pub struct Top {
    pub hier: Hier,
    pub name: String,
    pub units: Option<Units>,
}

impl Top {
    /// Removes what killed runs left, then makes `pinctl-soak-<pid>` with
    /// the kubelet's structure in both drivers' names, `system.slice` (the
    /// shared cgroup) and the bundle directory.
    pub fn make(hier: Hier, online: &CpuSet, systemd: bool) -> Result<Top> {
        hier.remove_stale("pinctl-soak-");
        // From here on, dropped on an error too: what was made is removed.
        let top = Top {
            name: format!("pinctl-soak-{}", std::process::id()),
            hier,
            units: systemd.then(Units::new),
        };
        top.hier.remove_everywhere(&top.name);
        top.hier.make_top(&top.name, &online.to_string())?;
        let mut rels = vec!["kubepods", "kubepods/burstable", "kubepods/besteffort"];
        if !systemd {
            rels.extend([
                "kubepods.slice",
                "kubepods.slice/kubepods-burstable.slice",
                "kubepods.slice/kubepods-besteffort.slice",
            ]);
        }
        for rel in rels {
            top.hier.make(&top.rel(rel), true)?;
        }
        top.hier.make(&top.rel("system.slice"), false)?;
        Ok(top)
    }

    /// `rel` below the top, relative to the mount.
    pub fn rel(&self, rel: &str) -> String {
        format!("{}/{rel}", self.name)
    }

    /// The systemd driver's kubepods root, relative to the mount.
    pub fn kubepods_slice(&self) -> String {
        match &self.units {
            Some(u) => u.kubepods(),
            None => self.rel("kubepods.slice"),
        }
    }

    /// The systemd driver's burstable QoS slice, relative to the mount.
    pub fn burstable_slice(&self) -> String {
        match &self.units {
            Some(u) => u.burstable(),
            None => self.rel("kubepods.slice/kubepods-burstable.slice"),
        }
    }

    /// `pinctl run`'s slice, relative to the mount.
    pub fn run_slice(&self) -> String {
        match &self.units {
            Some(u) => u.run_slice(),
            None => self.rel("run.slice"),
        }
    }

    /// The effective-set file of cgroup `rel` (relative to the mount).
    pub fn effective(&self, rel: &str) -> PathBuf {
        self.hier.cpuset.join(rel).join(self.hier.effective())
    }

    /// The cpuset directory of `rel` (relative to the mount).
    pub fn cpuset(&self, rel: &str) -> PathBuf {
        self.hier.cpuset.join(rel)
    }

    /// Moves process `pid` into cgroup `rel`, in each hierarchy it was made
    /// in. On v1 its cpuset has its parent's CPUs and memory nodes already
    /// ([`Hier::make`]), as a runtime's has before the first task joins.
    pub fn attach(&self, rel: &str, pid: u32) -> Result<()> {
        for root in self.hier.roots() {
            write(&root.join(rel).join("cgroup.procs"), &pid.to_string())?;
        }
        Ok(())
    }
}

impl Drop for Top {
    fn drop(&mut self) {
        // Tasks left behind (a sleep killed but not yet gone) hold a
        // cgroup for a moment: try again a few times.
        for _ in 0..50 {
            self.hier.remove_everywhere(&self.name);
            if self
                .hier
                .all_roots()
                .iter()
                .all(|r| !r.join(&self.name).exists())
            {
                return;
            }
            sleep(Duration::from_millis(100));
        }
        eprintln!(
            "soak: could not remove every {} cgroup (see /sys/fs/cgroup/*/{0})",
            self.name
        );
    }
}

/// `sleep 100000`, which dies with the thread that started it.
pub fn spawn_sleep() -> Result<Child> {
    let mut cmd = Command::new("sleep");
    cmd.arg("100000")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    die_with_parent(&mut cmd);
    cmd.spawn().context("cannot start sleep")
}

/// The child gets SIGKILL when the thread that started it ends.
pub fn die_with_parent(cmd: &mut Command) {
    // SAFETY: prctl is async-signal-safe and touches no memory of ours.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// A process killed (and reaped) when dropped.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        kill(&mut self.0);
    }
}

/// SIGKILL and reap.
pub fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// The containers of a run, and how new ones are named and made.
pub struct World<'a> {
    pub top: &'a Top,
    pub live: &'a Mutex<Live>,
    pub bundles: PathBuf,
    pub containers: BTreeMap<u64, Container>,
    rng: Rng,
    next: u64,
}

impl Drop for World<'_> {
    fn drop(&mut self) {
        for c in self.containers.values_mut() {
            if let Some(s) = &mut c.sleep {
                kill(s);
            }
        }
    }
}

impl<'a> World<'a> {
    pub fn new(top: &'a Top, live: &'a Mutex<Live>, bundles: PathBuf, rng: Rng) -> Self {
        World {
            top,
            live,
            bundles,
            containers: BTreeMap::new(),
            rng,
            next: 1,
        }
    }

    /// A pod UID and a container id, the rule's prefix on the id when
    /// `rule`.
    fn names(&mut self, rule: bool) -> (String, String) {
        let (a, b) = (self.rng.next(), self.rng.next());
        let uid = format!(
            "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xfff,
            b >> 52,
            b & 0xffff_ffff_ffff
        );
        let mut id: String = (0..4)
            .map(|_| format!("{:016x}", self.rng.next()))
            .collect();
        if rule {
            id.replace_range(..RULE_PREFIX.len(), RULE_PREFIX);
        } else if id.starts_with(RULE_PREFIX) {
            id.replace_range(..1, "0");
        }
        (uid, id)
    }

    /// Makes a container that asks as `ask`, in a pod of its own, named
    /// by one of the two drivers, with a `sleep` in it; it joins the live
    /// list. As runc: the bundle first, then the pod's and the container's
    /// cgroups (on v1 each cpuset given its parent's CPUs and memory nodes),
    /// the CPU limit, and the process.
    pub fn add(&mut self, ask: Ask) -> Result<u64> {
        let n = self.next;
        self.next += 1;
        let c = self.make(n, ask, true)?;
        let entry = Entry::new(self.top, &c.rel, ask.exclusive(), true);
        self.containers.insert(n, c);
        self.live.lock().unwrap().entries.insert(n, entry);
        Ok(n)
    }

    /// Makes a container (see [`Self::add`]); `process`: with its `sleep`.
    pub fn make(&mut self, n: u64, ask: Ask, process: bool) -> Result<Container> {
        let (uid, id) = self.names(ask == Ask::Rule);
        // A container without a process is made only by the cgroupfs
        // driver where systemd makes scopes: systemd makes none without one.
        let systemd = self.rng.chance(0.5) && (process || self.top.units.is_none());
        let mut unit = None;
        let (pod, rel) = match (systemd, ask.guaranteed()) {
            (false, true) => {
                let pod = self.top.rel(&format!("kubepods/pod{uid}"));
                let rel = format!("{pod}/{id}");
                (pod, rel)
            }
            (false, false) => {
                let pod = self.top.rel(&format!("kubepods/burstable/pod{uid}"));
                let rel = format!("{pod}/{id}");
                (pod, rel)
            }
            (true, g) if self.top.units.is_some() => {
                let units = self.top.units.as_ref().expect("matched");
                let (u, pod) = units.pod(&uid.replace('-', "_"), g);
                unit = Some(u);
                let rel = format!("{pod}/cri-containerd-{id}.scope");
                (pod, rel)
            }
            (true, g) => {
                let uid_ = uid.replace('-', "_");
                let pod = match g {
                    true => format!("kubepods.slice/kubepods-pod{uid_}.slice"),
                    false => format!(
                        "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid_}.slice"
                    ),
                };
                let pod = self.top.rel(&pod);
                let rel = format!("{pod}/cri-containerd-{id}.scope");
                (pod, rel)
            }
        };
        if ask == Ask::Annotation {
            let dir = self.bundles.join(&id);
            fs::create_dir_all(&dir)?;
            fs::write(
                dir.join("config.json"),
                r#"{"ociVersion":"1.0.2","annotations":{"pinctl.io/cpus":"1","io.kubernetes.cri.container-type":"container"}}"#,
            )?;
        }
        let quota = match ask {
            Ask::Kubelet => Some(100_000),
            Ask::Fraction => Some(50_000),
            _ => None,
        };
        if let Some(pod_unit) = unit {
            return self.start_scope(n, ask, pod, rel, id, pod_unit, quota);
        }
        let hier = &self.top.hier;
        hier.make(&pod, true)?;
        if let Some(q) = quota {
            hier.quota(&pod, q)?;
        }
        hier.make(&rel, false)?;
        if let Some(q) = quota {
            hier.quota(&rel, q)?;
        }
        if ask == Ask::Xattr {
            xattr::set(self.top.cpuset(&rel), pinctl::cgroup::XATTR_CPUS, b"1")
                .with_context(|| format!("cannot set the xattr of {rel}"))?;
        }
        let mut c = Container {
            n,
            ask,
            pod,
            rel,
            id,
            cpus: 1,
            sleep: None,
            unit: None,
        };
        if process {
            let mut child = spawn_sleep()?;
            if let Err(e) = self.top.attach(&c.rel, child.id()) {
                kill(&mut child);
                return Err(e);
            }
            c.sleep = Some(child);
        }
        Ok(c)
    }

    /// A systemd driver's container: its scope started around its `sleep`
    /// in its pod's slice (both made by systemd), then, once its cgroup is
    /// there, the xattr when it asks so.
    #[allow(clippy::too_many_arguments)]
    fn start_scope(
        &mut self,
        n: u64,
        ask: Ask,
        pod: String,
        rel: String,
        id: String,
        pod_unit: String,
        quota: Option<u64>,
    ) -> Result<Container> {
        let units = self.top.units.as_ref().expect("systemd's tree");
        let mut cmd = units.scope_command(&pod_unit, &id, quota);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        die_with_parent(&mut cmd);
        let mut child = cmd.spawn().context("cannot start systemd-run")?;
        let mut c = Container {
            n,
            ask,
            pod,
            rel,
            id,
            cpus: 1,
            sleep: None,
            unit: Some(pod_unit),
        };
        // systemd-run execs sleep once systemd moved it into the scope.
        let procs = self.top.cpuset(&c.rel).join("cgroup.procs");
        let pid = child.id().to_string();
        let started = Instant::now();
        loop {
            if fs::read_to_string(&procs).is_ok_and(|t| t.lines().any(|l| l == pid)) {
                break;
            }
            if let Ok(Some(status)) = child.try_wait() {
                anyhow::bail!("systemd-run for {} exited: {status}", c.rel);
            }
            if started.elapsed() > Duration::from_secs(30) {
                kill(&mut child);
                anyhow::bail!("systemd did not start the scope {} within 30 s", c.rel);
            }
            sleep(Duration::from_millis(10));
        }
        c.sleep = Some(child);
        if ask == Ask::Xattr {
            xattr::set(self.top.cpuset(&c.rel), pinctl::cgroup::XATTR_CPUS, b"1")
                .with_context(|| format!("cannot set the xattr of {}", c.rel))?;
        }
        Ok(c)
    }

    /// Takes container `n` out of the live list, kills its process, and
    /// removes its cgroups and bundle.
    pub fn remove(&mut self, n: u64) -> Result<()> {
        self.live.lock().unwrap().entries.remove(&n);
        let Some(mut c) = self.containers.remove(&n) else {
            return Ok(());
        };
        if let Some(s) = &mut c.sleep {
            kill(s);
        }
        self.unmake(&c)
    }

    /// Removes the cgroups of `c` (its process gone) and its bundle. A task
    /// just killed may hold its cgroup for a moment: tried again.
    pub fn unmake(&self, c: &Container) -> Result<()> {
        if let Some(unit) = &c.unit {
            // Its scope ends with its process; its pod's slice is stopped.
            vm::run("systemctl", &["stop", unit])?;
            let _ = fs::remove_dir_all(self.bundles.join(&c.id));
            return Ok(());
        }
        let hier = &self.top.hier;
        for _ in 0..100 {
            hier.remove(&c.pod);
            if !hier.roots().iter().any(|r| r.join(&c.pod).exists()) {
                let _ = fs::remove_dir_all(self.bundles.join(&c.id));
                return Ok(());
            }
            sleep(Duration::from_millis(10));
        }
        anyhow::bail!("cannot remove {}", c.pod)
    }

    /// A random live container of the class `exclusive`, if any.
    pub fn pick(&mut self, exclusive: bool) -> Option<u64> {
        let of: Vec<u64> = (self.containers.values())
            .filter(|c| c.ask.exclusive() == exclusive)
            .map(|c| c.n)
            .collect();
        (!of.is_empty()).then(|| of[self.rng.below(of.len())])
    }

    /// True with probability `p`, from the world's own stream.
    pub fn chance(&mut self, p: f64) -> bool {
        self.rng.chance(p)
    }

    /// A random exclusive kind.
    pub fn exclusive_kind(&mut self) -> Ask {
        self.rng.pick(&Ask::EXCLUSIVE)
    }

    /// A random shared kind: mostly Burstable.
    pub fn shared_kind(&mut self) -> Ask {
        match self.rng.chance(0.1) {
            true => Ask::Fraction,
            false => Ask::Shared,
        }
    }

    /// Resizes a random kubelet-rule container in place, 1 CPU to 2 or 2 to
    /// 1, as the kubelet does (a grow: the pod's limit first; a shrink: the
    /// container's first). Says which, and its new count.
    pub fn resize(&mut self) -> Result<Option<(String, u64)>> {
        let of: Vec<u64> = (self.containers.values())
            .filter(|c| c.ask == Ask::Kubelet)
            .map(|c| c.n)
            .collect();
        if of.is_empty() {
            return Ok(None);
        }
        let n = of[self.rng.below(of.len())];
        let c = self.containers.get_mut(&n).expect("listed");
        let to = if c.cpus == 1 { 2 } else { 1 };
        if let Some(e) = self.live.lock().unwrap().entries.get_mut(&n) {
            e.resized = Some(Instant::now());
        }
        if c.unit.is_some() {
            // As runc's systemd driver: the scope's CPUQuota=.
            let scope = format!("cri-containerd-{}.scope", c.id);
            let quota = format!("CPUQuota={}%", to * 100);
            vm::run("systemctl", &["set-property", "--runtime", &scope, &quota])?;
            c.cpus = to;
            return Ok(Some((c.rel.clone(), to)));
        }
        let hier = &self.top.hier;
        let order = match to > c.cpus {
            true => [&c.pod, &c.rel],
            false => [&c.rel, &c.pod],
        };
        for rel in order {
            hier.quota(rel, to * 100_000)?;
        }
        c.cpus = to;
        Ok(Some((c.rel.clone(), to)))
    }
}

/// Whether `dir` exists in the hierarchy rooted at `root`, as a cgroup a
/// task could join: on v1's cpuset, with CPUs and memory nodes.
pub fn joinable(hier: &Hier, root: &Path, rel: &str) -> bool {
    let dir = root.join(rel);
    if !dir.is_dir() {
        return false;
    }
    if hier.version == Version::V1 && root == hier.cpuset {
        let read = |f: &str| fs::read_to_string(dir.join(f)).unwrap_or_default();
        return !read("cpuset.cpus").trim().is_empty() && !read("cpuset.mems").trim().is_empty();
    }
    true
}
