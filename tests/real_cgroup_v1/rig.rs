//! The real-cgroup rig: one test's top cgroup in this machine's v1
//! hierarchies, the daemon it runs, the processes it starts, and the
//! clean-up that removes all of them (see `main.rs` for the safety rules).

use std::fs::{self, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::thread::sleep;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::{Pid, geteuid};
use pinctl::CpuSet;

pub(crate) const ENV: &str = "PINCTL_REAL_CGROUP";
pub(crate) const CPUSET: &str = "/sys/fs/cgroup/cpuset";
pub(crate) const CPU: &str = "/sys/fs/cgroup/cpu";

/// How long the daemon may take to react to an inotify event. Events are
/// handled in milliseconds; this only absorbs a loaded CI machine.
pub(crate) const EVENT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long start-up (topology, first full reconcile, `READY=1`) may take.
pub(crate) const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// The brief's bound for undoing a foreign write to a pinned cpuset.
pub(crate) const REVERT_TIMEOUT: Duration = Duration::from_secs(1);

/// One test at a time, even without `--test-threads=1`: they share the
/// machine's CPUs and the foreign-write test measures a deadline.
pub(crate) static SERIAL: Mutex<()> = Mutex::new(());
/// Numbers the top cgroups of this test process.
pub(crate) static NEXT_TOP: AtomicUsize = AtomicUsize::new(0);
/// Numbers pod UIDs and container ids.
pub(crate) static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A number no other pod or container of this test process has.
pub(crate) fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// A pod UID of this test process, as the kubelet writes one.
pub(crate) fn pod_uid() -> String {
    let n = next_id();
    format!(
        "{:08x}-{:04x}-4000-8000-{n:012x}",
        std::process::id(),
        n & 0xffff
    )
}

/// Whether the real-cgroup tests run. Prints why not, or fails when they were
/// asked for and cannot run.
pub(crate) fn enabled(test: &str) -> bool {
    if std::env::var_os(ENV).is_none_or(|v| v != "1") {
        // Straight to the stream, not `println!`: the harness would capture
        // that, and a skipped test should say so in a plain `cargo test`. One
        // write, so that parallel tests do not interleave within the line.
        let line = format!(
            "{test}: skipped: {ENV} is not 1; set {ENV}=1 to run pinctld against this machine's \
             real cgroup v1 cpuset hierarchy (needs root and {CPUSET}/cpuset.cpus)\n"
        );
        let _ = io::stderr().lock().write_all(line.as_bytes());
        return false;
    }
    assert!(
        geteuid().is_root(),
        "{test}: {ENV}=1 asks for the real cgroup tests, but they need root (euid is {}): \
         they create cgroups under {CPUSET} and move processes between them",
        geteuid()
    );
    assert!(
        Path::new(CPUSET).join("cpuset.cpus").exists(),
        "{test}: {ENV}=1 asks for the real cgroup tests, but {CPUSET}/cpuset.cpus does not exist: \
         no cgroup v1 cpuset hierarchy is mounted at {CPUSET}"
    );
    assert!(
        Path::new(CPU).join("cpu.cfs_quota_us").exists(),
        "{test}: {ENV}=1 asks for the real cgroup tests, but {CPU}/cpu.cfs_quota_us does not \
         exist: the Guaranteed containers' CPU limits live in the v1 cpu controller there"
    );
    true
}

pub(crate) fn read(path: &Path) -> String {
    match fs::read_to_string(path) {
        Ok(text) => text.trim().to_string(),
        Err(e) => panic!("cannot read {}: {e}", path.display()),
    }
}

pub(crate) fn read_set(path: &Path) -> CpuSet {
    let text = read(path);
    text.parse()
        .unwrap_or_else(|e| panic!("{} holds {text:?}, not a CPU list: {e}", path.display()))
}

/// One `write(2)` of `data` to an existing control file, as `echo` does.
pub(crate) fn write(path: &Path, data: &str) -> io::Result<()> {
    let mut f = OpenOptions::new().write(true).open(path)?;
    f.write_all(data.as_bytes())
}

pub(crate) fn must_write(path: &Path, data: &str) {
    if let Err(e) = write(path, data) {
        panic!("cannot write {data:?} to {}: {e}", path.display());
    }
}

pub(crate) fn mkdir(path: &Path) {
    if let Err(e) = fs::create_dir(path) {
        panic!("cannot mkdir {}: {e}", path.display());
    }
}

/// `Cpus_allowed_list` of a process: the kernel's view of where it may run.
pub(crate) fn cpus_allowed(pid: u32) -> Result<CpuSet, String> {
    let path = format!("/proc/{pid}/status");
    let status = fs::read_to_string(&path).map_err(|e| format!("cannot read {path}: {e}"))?;
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .ok_or_else(|| format!("{path} has no Cpus_allowed_list"))?;
    line.trim()
        .parse()
        .map_err(|e| format!("{path}: Cpus_allowed_list {line:?}: {e}"))
}

/// Polls `check` every 10 ms until it returns `Ok`, or panics after `timeout`
/// with what it last returned.
pub(crate) fn wait_for(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> Result<(), String>,
) {
    let start = Instant::now();
    loop {
        let last = match check() {
            Ok(()) => return,
            Err(last) => last,
        };
        if start.elapsed() >= timeout {
            panic!("timed out after {timeout:?} waiting until {what}: {last}");
        }
        sleep(Duration::from_millis(10));
    }
}

/// The cgroups below `dir`, and `dir` itself, children before parents.
pub(crate) fn cgroups_bottom_up(dir: &Path, out: &mut Vec<PathBuf>) {
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                cgroups_bottom_up(&entry.path(), out);
            }
        }
    }
    out.push(dir.to_path_buf());
}

/// Moves every task of the cgroup `dir` to the root cgroup `root`.
pub(crate) fn evacuate(dir: &Path, root: &str) {
    let Ok(tasks) = fs::read_to_string(dir.join("tasks")) else {
        return;
    };
    let root_tasks = Path::new(root).join("tasks");
    for tid in tasks.split_whitespace() {
        // A task that exited in between gives ESRCH; nothing to move then.
        let _ = write(&root_tasks, tid);
    }
}

/// The v1 hierarchies under `/sys/fs/cgroup` (the daemon's watchdog makes
/// the required kubepods paths in each of them).
pub(crate) fn hierarchies() -> Vec<String> {
    let mut out: Vec<String> = fs::read_dir("/sys/fs/cgroup")
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .filter(|e| e.file_name() != "unified")
                .map(|e| e.path().display().to_string())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// Removes the top cgroup `top` and everything below it from every
/// hierarchy, the unified one of a hybrid host too (runc makes its
/// containers' cgroups there): tasks out to the root, then `rmdir`
/// bottom-up (retried while a dying task still holds a cgroup). Returns
/// what could not be removed.
pub(crate) fn remove_test_cgroups(top: &str) -> Vec<String> {
    // Never anything but a test's own top cgroup.
    assert!(
        top.starts_with("pinctl-test-") && !top.contains('/'),
        "refusing to remove cgroup {top:?}"
    );
    let mut left = Vec::new();
    let mut roots = hierarchies();
    roots.push("/sys/fs/cgroup/unified".to_string());
    for root in roots {
        let root = root.as_str();
        let base = Path::new(root).join(top);
        if !base.exists() {
            continue;
        }
        let mut dirs = Vec::new();
        cgroups_bottom_up(&base, &mut dirs);
        for dir in &dirs {
            evacuate(dir, root);
        }
        for dir in &dirs {
            let mut tries = 0;
            loop {
                match fs::remove_dir(dir) {
                    Ok(()) => break,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                    Err(_) if tries < 100 => {
                        tries += 1;
                        evacuate(dir, root);
                        sleep(Duration::from_millis(20));
                    }
                    Err(e) => {
                        left.push(format!("{}: {e}", dir.display()));
                        break;
                    }
                }
            }
        }
    }
    left
}

/// Kubernetes QoS classes, as the cgroupfs driver lays them out.
#[derive(Clone, Copy)]
pub(crate) enum Qos {
    Guaranteed,
    Burstable,
}

/// A container cgroup made by the test; paths relative to the top cgroup.
pub(crate) struct Container {
    pub(crate) pod: String,
    pub(crate) rel: String,
}

/// One test's world: its top cgroup, the daemon, its config and log, and the
/// processes it started. Dropping it cleans everything up.
pub(crate) struct Rig {
    pub(crate) test: &'static str,
    /// `pinctl-test-<pid>-<n>`, directly below both hierarchies' roots.
    pub(crate) top: String,
    pub(crate) tmp: tempfile::TempDir,
    pub(crate) config: PathBuf,
    pub(crate) log: PathBuf,
    pub(crate) notify: UnixDatagram,
    pub(crate) daemon: Option<Child>,
    pub(crate) sleeps: Vec<Child>,
    /// Online CPUs.
    pub(crate) all: CpuSet,
    /// The one CPU the daemon may hand out.
    pub(crate) exclusive: CpuSet,
    /// The shared pool while that CPU is taken (the reserved CPUs).
    pub(crate) shared: CpuSet,
    /// The root cgroup's memory nodes.
    pub(crate) mems: CpuSet,
    pub(crate) _serial: MutexGuard<'static, ()>,
}

impl Rig {
    /// Creates the top cgroup and the empty `kubepods` and `system.slice`, and
    /// writes the daemon's config; `None` when the real-cgroup tests are off.
    pub(crate) fn new(test: &'static str) -> Option<Rig> {
        if !enabled(test) {
            return None;
        }
        let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let all = read_set(Path::new("/sys/devices/system/cpu/online"));
        assert!(
            all.len() >= 2,
            "{test}: needs at least 2 online CPUs (one reserved, one exclusive), found {all}"
        );
        let last = all.last().expect("not empty");
        let exclusive: CpuSet = [last].into_iter().collect();
        let shared = all.difference(&exclusive);
        let mems = read_set(&Path::new(CPUSET).join("cpuset.mems"));
        let top = format!(
            "pinctl-test-{}-{}",
            std::process::id(),
            NEXT_TOP.fetch_add(1, Ordering::Relaxed)
        );
        let tmp = tempfile::Builder::new()
            .prefix("pinctl-real-")
            .tempdir()
            .expect("tempdir");
        let notify_path = tmp.path().join("notify.sock");
        let notify = UnixDatagram::bind(&notify_path).expect("bind the NOTIFY_SOCKET");
        notify
            .set_read_timeout(Some(Duration::from_millis(50)))
            .expect("socket timeout");
        let rig = Rig {
            test,
            config: tmp.path().join("pinctld.toml"),
            log: tmp.path().join("pinctld.log"),
            top,
            tmp,
            notify,
            daemon: None,
            sleeps: Vec::new(),
            all,
            exclusive,
            shared,
            mems,
            _serial: serial,
        };
        // From here on, `Drop` removes whatever was made.
        for root in [CPUSET, CPU] {
            mkdir(&Path::new(root).join(&rig.top));
        }
        // v1: a new cgroup has empty cpus and mems. The top cgroup is outside
        // the managed subtree, so the test sets it up.
        must_write(&rig.cs("").join("cpuset.cpus"), &rig.all.to_string());
        must_write(&rig.cs("").join("cpuset.mems"), &rig.mems.to_string());
        mkdir(&rig.cs("kubepods"));
        mkdir(&rig.cpu("kubepods"));
        mkdir(&rig.cs("system.slice"));
        let bundles = rig.bundles();
        fs::create_dir_all(&bundles).expect("bundle dir");
        let config = format!(
            r#"# Written by tests/real_cgroup_v1/rig.rs ({test}).
cgroup_root = "/sys/fs/cgroup"
sysfs_root = "/sys"
proc_root = "/proc"
state_file = "{state}"
socket = "{socket}"
reserved_cpus = "{reserved}"
reconcile_interval = "1h"
watchdog_interval = "1s"
repair_cooldown = "1s"
log_level = "debug"
managed = ["{top}/kubepods"]
shared_cgroups = ["{top}/system.slice"]
# Only the test's own (empty) bundle directory: never the host's containers.
bundle_dirs = ["{bundles}"]
"#,
            state = rig.tmp.path().join("state.json").display(),
            socket = rig.tmp.path().join("pinctl.sock").display(),
            reserved = rig.shared,
            top = rig.top,
            bundles = bundles.display(),
        );
        fs::write(&rig.config, config).expect("write the config");
        rig.note(&format!("top cgroup {} created", rig.top));
        Some(rig)
    }

    /// Turns `pinctl run` on: its socket in the test's directory, its runs
    /// in `<top>/run.slice`, root alone allowed.
    pub(crate) fn add_run_table(&self) {
        let table = format!(
            "\n[run]\nenabled = true\nsocket = \"{}\"\nslice = \"{}/run.slice\"\n",
            self.tmp.path().join("run.sock").display(),
            self.top
        );
        let mut f = OpenOptions::new()
            .append(true)
            .open(&self.config)
            .expect("open the config");
        f.write_all(table.as_bytes())
            .expect("write the [run] table");
    }

    /// The daemon's one bundle directory, laid out as containerd's:
    /// `<dir>/<id>/config.json`.
    pub(crate) fn bundles(&self) -> PathBuf {
        self.tmp.path().join("io.containerd.runtime.v2.task/k8s.io")
    }

    /// The cpuset directory of `rel`, relative to the top cgroup.
    pub(crate) fn cs(&self, rel: &str) -> PathBuf {
        Path::new(CPUSET).join(&self.top).join(rel)
    }

    /// The cpu-controller directory of `rel`, relative to the top cgroup.
    pub(crate) fn cpu(&self, rel: &str) -> PathBuf {
        Path::new(CPU).join(&self.top).join(rel)
    }

    /// Appends a marker to the daemon's log, so that a failure's log shows
    /// what the test did between the daemon's lines.
    pub(crate) fn note(&self, what: &str) {
        let Ok(mut log) = OpenOptions::new().create(true).append(true).open(&self.log) else {
            return;
        };
        let _ = writeln!(log, "----- test {}: {what}", self.test);
    }

    /// Starts pinctld and waits for `READY=1` on the NOTIFY_SOCKET.
    pub(crate) fn start_daemon(&mut self) {
        assert!(self.daemon.is_none(), "the daemon is already running");
        // Messages of an earlier daemon must not count.
        while self.notify_message().is_some() {}
        self.note("starting pinctld");
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("open the daemon log");
        let child = Command::new(env!("CARGO_BIN_EXE_pinctld"))
            .arg("--config")
            .arg(&self.config)
            .env("NOTIFY_SOCKET", self.tmp.path().join("notify.sock"))
            .env_remove("RUST_LOG")
            .env_remove("WATCHDOG_USEC")
            .env_remove("WATCHDOG_PID")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("dup the log"))
            .stderr(log)
            .spawn()
            .expect("spawn pinctld");
        self.daemon = Some(child);
        let start = Instant::now();
        loop {
            if let Some(msg) = self.notify_message()
                && msg.lines().any(|l| l == "READY=1")
            {
                break;
            }
            if let Some(status) = self.daemon_exited() {
                panic!("pinctld exited before READY=1: {status}");
            }
            if start.elapsed() > READY_TIMEOUT {
                panic!("pinctld sent no READY=1 within {READY_TIMEOUT:?}");
            }
        }
        self.note("pinctld sent READY=1");
    }

    /// One datagram from the daemon, waiting at most the socket's timeout.
    pub(crate) fn notify_message(&self) -> Option<String> {
        let mut buf = [0u8; 4096];
        let n = self.notify.recv(&mut buf).ok()?;
        Some(String::from_utf8_lossy(&buf[..n]).into_owned())
    }

    pub(crate) fn daemon_exited(&mut self) -> Option<ExitStatus> {
        self.daemon.as_mut()?.try_wait().ok().flatten()
    }

    pub(crate) fn daemon_pid(&self) -> Pid {
        let child = self.daemon.as_ref().expect("the daemon is running");
        Pid::from_raw(child.id() as i32)
    }

    /// SIGKILL, as a crash or the OOM killer would.
    pub(crate) fn crash_daemon(&mut self) {
        self.note("SIGKILL to pinctld");
        let pid = self.daemon_pid();
        kill(pid, Signal::SIGKILL).expect("SIGKILL pinctld");
        let mut child = self.daemon.take().expect("running");
        child.wait().expect("reap pinctld");
    }

    /// SIGTERM, then SIGKILL if it has not exited within 5 s.
    pub(crate) fn stop_daemon(&mut self) {
        let Some(mut child) = self.daemon.take() else {
            return;
        };
        if child.try_wait().ok().flatten().is_some() {
            return;
        }
        let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(5) {
            if child.try_wait().ok().flatten().is_some() {
                return;
            }
            sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Waits until the daemon has set both `cpuset.cpus` and `cpuset.mems` of
    /// `rel`, so that a task can join it.
    pub(crate) fn wait_joinable(&mut self, rel: &str) {
        let (cpus, mems) = (
            self.cs(rel).join("cpuset.cpus"),
            self.cs(rel).join("cpuset.mems"),
        );
        let want_mems = self.mems.clone();
        wait_for(
            &format!("pinctld set cpuset.cpus and cpuset.mems of {rel}"),
            EVENT_TIMEOUT,
            || {
                let (c, m) = (read(&cpus), read(&mems));
                if c.is_empty() || m.is_empty() {
                    Err(format!("cpuset.cpus = {c:?}, cpuset.mems = {m:?}"))
                } else {
                    Ok(())
                }
            },
        );
        let m = read_set(&mems);
        assert_eq!(
            m, want_mems,
            "cpuset.mems of {rel}: pinctld should give a new cgroup the root's memory nodes"
        );
    }

    /// Makes a container the way the kubelet and a runtime would with the
    /// cgroupfs driver: the cpu-controller directories (and the CPU limit)
    /// first, then the cpuset directories, one `mkdir` per level. Waits until
    /// the daemon has made the new cgroups joinable.
    pub(crate) fn add_container(&mut self, qos: Qos, quota_us: Option<u64>) -> Container {
        self.add_container_sorted(qos, quota_us, std::process::id())
    }

    /// [`Rig::add_container`] with `uid_head` as the first group of the pod
    /// UID, which decides where the pod's path sorts among its siblings.
    pub(crate) fn add_container_sorted(
        &mut self,
        qos: Qos,
        quota_us: Option<u64>,
        uid_head: u32,
    ) -> Container {
        let n = next_id();
        let pid = std::process::id();
        let uid = format!("{uid_head:08x}-{:04x}-4000-8000-{n:012x}", n & 0xffff);
        let id = format!("{:016x}{:016x}{:016x}{n:016x}", 0xc0ffee_u64, pid, n);
        let parent = match qos {
            Qos::Guaranteed => "kubepods".to_string(),
            Qos::Burstable => "kubepods/burstable".to_string(),
        };
        let pod = format!("{parent}/pod{uid}");
        let rel = format!("{pod}/{id}");
        self.note(&format!("creating container {rel}"));
        for dir in [&parent, &pod, &rel] {
            if !self.cpu(dir).exists() {
                mkdir(&self.cpu(dir));
            }
        }
        if let Some(quota) = quota_us {
            must_write(&self.cpu(&rel).join("cpu.cfs_period_us"), "100000");
            must_write(&self.cpu(&rel).join("cpu.cfs_quota_us"), &quota.to_string());
        }
        for dir in [&parent, &pod, &rel] {
            if !self.cs(dir).exists() {
                mkdir(&self.cs(dir));
            }
        }
        self.wait_joinable(&rel);
        Container { pod, rel }
    }

    /// Starts `sleep 600` and moves it into the container (cpuset and cpu),
    /// as a runtime does with the container's first process.
    pub(crate) fn attach(&mut self, c: &Container) -> u32 {
        let child = Command::new("sleep")
            .arg("600")
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn sleep");
        let pid = child.id();
        self.sleeps.push(child);
        self.note(&format!("moving sleep {pid} into {}", c.rel));
        for dir in [self.cs(&c.rel), self.cpu(&c.rel)] {
            let tasks = dir.join("tasks");
            if let Err(e) = write(&tasks, &pid.to_string()) {
                panic!(
                    "cannot move pid {pid} into {}: {e} (cpuset.cpus {:?}, cpuset.mems {:?})",
                    tasks.display(),
                    fs::read_to_string(self.cs(&c.rel).join("cpuset.cpus")),
                    fs::read_to_string(self.cs(&c.rel).join("cpuset.mems")),
                );
            }
        }
        pid
    }

    /// Deletes a container as a runtime does: its tasks out first, then
    /// `rmdir` of the container and its pod, in both hierarchies.
    pub(crate) fn remove_container(&mut self, c: &Container) {
        self.note(&format!("removing container {}", c.rel));
        for (dir, root) in [(self.cs(&c.rel), CPUSET), (self.cpu(&c.rel), CPU)] {
            evacuate(&dir, root);
            let left = read(&dir.join("tasks"));
            assert!(left.is_empty(), "tasks left in {}: {left}", dir.display());
        }
        for rel in [&c.rel, &c.pod] {
            for dir in [self.cs(rel), self.cpu(rel)] {
                if let Err(e) = fs::remove_dir(&dir) {
                    panic!("cannot rmdir {}: {e}", dir.display());
                }
            }
        }
    }

    /// Waits until `cpuset.cpus` of `rel` is `want`, then checks that the
    /// kernel agrees: `cpuset.effective_cpus` is the same set.
    pub(crate) fn expect_cpus_within(&self, rel: &str, want: &CpuSet, timeout: Duration) {
        let path = self.cs(rel).join("cpuset.cpus");
        wait_for(
            &format!("cpuset.cpus of {rel} is {want}"),
            timeout,
            || match read(&path) {
                t if t.parse::<CpuSet>().as_ref() == Ok(want) => Ok(()),
                t => Err(format!("it is {t:?}")),
            },
        );
        let effective = read_set(&self.cs(rel).join("cpuset.effective_cpus"));
        assert_eq!(
            &effective, want,
            "cpuset.effective_cpus of {rel} differs from its cpuset.cpus"
        );
    }

    pub(crate) fn expect_cpus(&self, rel: &str, want: &CpuSet) {
        self.expect_cpus_within(rel, want, EVENT_TIMEOUT);
    }

    /// Checks for `hold` that `cpuset.cpus` of `rel` stays `want`.
    pub(crate) fn expect_cpus_stay(&self, rel: &str, want: &CpuSet, hold: Duration) {
        let path = self.cs(rel).join("cpuset.cpus");
        let start = Instant::now();
        while start.elapsed() < hold {
            let now = read_set(&path);
            assert!(
                &now == want,
                "cpuset.cpus of {rel} should stay {want}, but it became {now} after {:?}",
                start.elapsed()
            );
            sleep(Duration::from_millis(20));
        }
        self.expect_cpus(rel, want);
    }

    /// Waits until the kernel lets process `pid` run on `want` only.
    pub(crate) fn expect_allowed_within(&self, pid: u32, want: &CpuSet, timeout: Duration) {
        wait_for(
            &format!("Cpus_allowed_list of pid {pid} is {want}"),
            timeout,
            || match cpus_allowed(pid) {
                Ok(now) if &now == want => Ok(()),
                Ok(now) => Err(format!("it is {now}")),
                Err(e) => Err(e),
            },
        );
    }

    pub(crate) fn expect_allowed(&self, pid: u32, want: &CpuSet) {
        self.expect_allowed_within(pid, want, EVENT_TIMEOUT);
    }

    /// Asserts that process `pid` (a `sleep` of this test) is still running
    /// and still in the container `c`.
    pub(crate) fn expect_still_in(&mut self, pid: u32, c: &Container) {
        let child = self
            .sleeps
            .iter_mut()
            .find(|s| s.id() == pid)
            .expect("a sleep of this test");
        assert_eq!(
            child.try_wait().expect("try_wait"),
            None,
            "sleep {pid} exited"
        );
        let tasks = read(&self.cs(&c.rel).join("tasks"));
        assert!(
            tasks.split_whitespace().any(|t| t == pid.to_string()),
            "pid {pid} is no longer in {}: tasks {tasks:?}",
            c.rel
        );
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        let failed = std::thread::panicking();
        self.stop_daemon();
        for child in &mut self.sleeps {
            let _ = child.kill();
            let _ = child.wait();
        }
        let left = remove_test_cgroups(&self.top);
        if failed {
            let log = fs::read_to_string(&self.log).unwrap_or_default();
            eprintln!(
                "===== pinctld log of {} ({}) =====\n{log}===== end of log =====",
                self.test,
                self.log.display()
            );
            if !log.contains("cgroup hierarchy detected") {
                eprintln!(
                    "(no daemon lines: where /run/systemd/journal/socket exists, pinctld logs to \
                     the journal instead of stderr)"
                );
            }
        }
        if !left.is_empty() {
            let msg = format!(
                "{}: test cgroups left behind after cleanup: {}",
                self.test,
                left.join("; ")
            );
            if failed {
                eprintln!("{msg}");
            } else {
                panic!("{msg}");
            }
        }
    }
}
