//! `pinctld` end to end on this machine's real cgroup v1 hierarchy: the daemon
//! binary, the kernel's cpuset controller and real processes.
//!
//! Opt-in: unless `PINCTL_REAL_CGROUP=1`, every test prints one line saying it
//! is skipped and returns. With `PINCTL_REAL_CGROUP=1` a test fails when it is
//! not root or when `/sys/fs/cgroup/cpuset/cpuset.cpus` is missing: whoever
//! set the variable asked for these tests to run. Run them one at a time:
//! `PINCTL_REAL_CGROUP=1 cargo test --test real_cgroup_v1 -- --test-threads=1`
//! (they also take a lock, so a parallel run is serialised anyway).
//!
//! Safety: each test creates its own top cgroup `pinctl-test-<pid>-<n>` in the
//! cpuset and cpu hierarchies and points the daemon's `managed` and
//! `shared_cgroups` only below it, so the daemon never touches a system cgroup.
//! (Its watchdog makes the required paths `<top>/kubepods/{burstable,besteffort}`
//! in every other hierarchy too; cleanup covers all of them.)
//! [`Rig`]'s `Drop` runs even when a test panics: it stops the daemon (SIGTERM,
//! then SIGKILL), kills every `sleep` the test started, moves any task left in
//! a test cgroup back to the root cgroup, and removes the test cgroups bottom-up
//! with `rmdir` (the only way to remove a cgroup). On failure it prints the
//! daemon's log.
//!
//! Layout (cgroupfs driver naming), below the top cgroup:
//! `kubepods`, `kubepods/burstable/pod<uid>/<id>`, `kubepods/pod<uid>/<id>`
//! (Guaranteed) and `system.slice`. The test initialises the top cgroup's
//! cpuset itself; below it, it only makes directories, as a runtime would, and
//! waits for the daemon to set `cpuset.mems` and `cpuset.cpus` before it moves
//! a task in (v1 refuses a task in a cgroup with an empty set with ENOSPC).
//!
//! CPUs: the daemon reserves every online CPU but the highest, which leaves
//! exactly one CPU to hand out exclusively. On a 2-CPU machine that is
//! `reserved_cpus = "0"`: Guaranteed containers get CPU 1 and the shared pool is
//! CPU 0.

use std::fs::{self, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::thread::sleep;
use std::time::{Duration, Instant};

use inotify::{Inotify, WatchMask};
use nix::sys::signal::{Signal, kill};
use nix::unistd::{Pid, geteuid};
use pinctl::CpuSet;

const ENV: &str = "PINCTL_REAL_CGROUP";
const CPUSET: &str = "/sys/fs/cgroup/cpuset";
const CPU: &str = "/sys/fs/cgroup/cpu";

/// How long the daemon may take to react to an inotify event. Events are
/// handled in milliseconds; this only absorbs a loaded CI machine.
const EVENT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long start-up (topology, first full reconcile, `READY=1`) may take.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// The brief's bound for undoing a foreign write to a pinned cpuset.
const REVERT_TIMEOUT: Duration = Duration::from_secs(1);

/// One test at a time, even without `--test-threads=1`: they share the
/// machine's CPUs and the foreign-write test measures a deadline.
static SERIAL: Mutex<()> = Mutex::new(());
/// Numbers the top cgroups of this test process.
static NEXT_TOP: AtomicUsize = AtomicUsize::new(0);
/// Numbers pod UIDs and container ids.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Whether the real-cgroup tests run. Prints why not, or fails when they were
/// asked for and cannot run.
fn enabled(test: &str) -> bool {
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

fn read(path: &Path) -> String {
    match fs::read_to_string(path) {
        Ok(text) => text.trim().to_string(),
        Err(e) => panic!("cannot read {}: {e}", path.display()),
    }
}

fn read_set(path: &Path) -> CpuSet {
    let text = read(path);
    text.parse()
        .unwrap_or_else(|e| panic!("{} holds {text:?}, not a CPU list: {e}", path.display()))
}

/// One `write(2)` of `data` to an existing control file, as `echo` does.
fn write(path: &Path, data: &str) -> io::Result<()> {
    let mut f = OpenOptions::new().write(true).open(path)?;
    f.write_all(data.as_bytes())
}

fn must_write(path: &Path, data: &str) {
    if let Err(e) = write(path, data) {
        panic!("cannot write {data:?} to {}: {e}", path.display());
    }
}

fn mkdir(path: &Path) {
    if let Err(e) = fs::create_dir(path) {
        panic!("cannot mkdir {}: {e}", path.display());
    }
}

/// `Cpus_allowed_list` of a process: the kernel's view of where it may run.
fn cpus_allowed(pid: u32) -> Result<CpuSet, String> {
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
fn wait_for(what: &str, timeout: Duration, mut check: impl FnMut() -> Result<(), String>) {
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
fn cgroups_bottom_up(dir: &Path, out: &mut Vec<PathBuf>) {
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
fn evacuate(dir: &Path, root: &str) {
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
fn hierarchies() -> Vec<String> {
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
/// hierarchy: tasks out to the root, then `rmdir` bottom-up (retried while a
/// dying task still holds a cgroup). Returns what could not be removed.
fn remove_test_cgroups(top: &str) -> Vec<String> {
    // Never anything but a test's own top cgroup.
    assert!(
        top.starts_with("pinctl-test-") && !top.contains('/'),
        "refusing to remove cgroup {top:?}"
    );
    let mut left = Vec::new();
    for root in hierarchies() {
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
enum Qos {
    Guaranteed,
    Burstable,
}

/// A container cgroup made by the test; paths relative to the top cgroup.
struct Container {
    pod: String,
    rel: String,
}

/// One test's world: its top cgroup, the daemon, its config and log, and the
/// processes it started. Dropping it cleans everything up.
struct Rig {
    test: &'static str,
    /// `pinctl-test-<pid>-<n>`, directly below both hierarchies' roots.
    top: String,
    tmp: tempfile::TempDir,
    config: PathBuf,
    log: PathBuf,
    notify: UnixDatagram,
    daemon: Option<Child>,
    sleeps: Vec<Child>,
    /// Online CPUs.
    all: CpuSet,
    /// The one CPU the daemon may hand out.
    exclusive: CpuSet,
    /// The shared pool while that CPU is taken (the reserved CPUs).
    shared: CpuSet,
    /// The root cgroup's memory nodes.
    mems: CpuSet,
    _serial: MutexGuard<'static, ()>,
}

impl Rig {
    /// Creates the top cgroup and the empty `kubepods` and `system.slice`, and
    /// writes the daemon's config; `None` when the real-cgroup tests are off.
    fn new(test: &'static str) -> Option<Rig> {
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
        let bundles = rig.tmp.path().join("bundles");
        fs::create_dir(&bundles).expect("bundle dir");
        let config = format!(
            r#"# Written by tests/real_cgroup_v1.rs ({test}).
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

    /// The cpuset directory of `rel`, relative to the top cgroup.
    fn cs(&self, rel: &str) -> PathBuf {
        Path::new(CPUSET).join(&self.top).join(rel)
    }

    /// The cpu-controller directory of `rel`, relative to the top cgroup.
    fn cpu(&self, rel: &str) -> PathBuf {
        Path::new(CPU).join(&self.top).join(rel)
    }

    /// Appends a marker to the daemon's log, so that a failure's log shows
    /// what the test did between the daemon's lines.
    fn note(&self, what: &str) {
        let Ok(mut log) = OpenOptions::new().create(true).append(true).open(&self.log) else {
            return;
        };
        let _ = writeln!(log, "----- test {}: {what}", self.test);
    }

    /// Starts pinctld and waits for `READY=1` on the NOTIFY_SOCKET.
    fn start_daemon(&mut self) {
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
    fn notify_message(&self) -> Option<String> {
        let mut buf = [0u8; 4096];
        let n = self.notify.recv(&mut buf).ok()?;
        Some(String::from_utf8_lossy(&buf[..n]).into_owned())
    }

    fn daemon_exited(&mut self) -> Option<ExitStatus> {
        self.daemon.as_mut()?.try_wait().ok().flatten()
    }

    fn daemon_pid(&self) -> Pid {
        let child = self.daemon.as_ref().expect("the daemon is running");
        Pid::from_raw(child.id() as i32)
    }

    /// SIGKILL, as a crash or the OOM killer would.
    fn crash_daemon(&mut self) {
        self.note("SIGKILL to pinctld");
        let pid = self.daemon_pid();
        kill(pid, Signal::SIGKILL).expect("SIGKILL pinctld");
        let mut child = self.daemon.take().expect("running");
        child.wait().expect("reap pinctld");
    }

    /// SIGTERM, then SIGKILL if it has not exited within 5 s.
    fn stop_daemon(&mut self) {
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
    fn wait_joinable(&mut self, rel: &str) {
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
    fn add_container(&mut self, qos: Qos, quota_us: Option<u64>) -> Container {
        self.add_container_sorted(qos, quota_us, std::process::id())
    }

    /// [`Rig::add_container`] with `uid_head` as the first group of the pod
    /// UID, which decides where the pod's path sorts among its siblings.
    fn add_container_sorted(
        &mut self,
        qos: Qos,
        quota_us: Option<u64>,
        uid_head: u32,
    ) -> Container {
        let n = NEXT_ID.fetch_add(1, Ordering::Relaxed);
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
    fn attach(&mut self, c: &Container) -> u32 {
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
    fn remove_container(&mut self, c: &Container) {
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
    fn expect_cpus_within(&self, rel: &str, want: &CpuSet, timeout: Duration) {
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

    fn expect_cpus(&self, rel: &str, want: &CpuSet) {
        self.expect_cpus_within(rel, want, EVENT_TIMEOUT);
    }

    /// Checks for `hold` that `cpuset.cpus` of `rel` stays `want`.
    fn expect_cpus_stay(&self, rel: &str, want: &CpuSet, hold: Duration) {
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
    fn expect_allowed_within(&self, pid: u32, want: &CpuSet, timeout: Duration) {
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

    fn expect_allowed(&self, pid: u32, want: &CpuSet) {
        self.expect_allowed_within(pid, want, EVENT_TIMEOUT);
    }

    /// Asserts that process `pid` (a `sleep` of this test) is still running
    /// and still in the container `c`.
    fn expect_still_in(&mut self, pid: u32, c: &Container) {
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

/// Scenario 1: a Guaranteed container with a 1-CPU limit gets the exclusive
/// CPU, and everything else in the managed tree and the shared cgroups is
/// confined to the rest; deleting it gives the CPU back to the shared pool.
#[test]
fn guaranteed_container_gets_an_exclusive_cpu_and_gives_it_back() {
    let Some(mut rig) = Rig::new("guaranteed_container_gets_an_exclusive_cpu_and_gives_it_back")
    else {
        return;
    };
    let (all, exclusive, shared) = (rig.all.clone(), rig.exclusive.clone(), rig.shared.clone());
    rig.start_daemon();
    // Nothing pinned yet: the shared pool is every CPU.
    rig.expect_cpus("kubepods", &all);
    rig.expect_cpus("system.slice", &all);

    let burstable = rig.add_container(Qos::Burstable, None);
    let b_pid = rig.attach(&burstable);
    rig.expect_cpus(&burstable.rel, &all);
    rig.expect_allowed(b_pid, &all);

    // 100000 µs per 100000 µs period: a limit of exactly 1 CPU.
    let guaranteed = rig.add_container(Qos::Guaranteed, Some(100_000));
    rig.expect_cpus(&guaranteed.rel, &exclusive);
    let g_pid = rig.attach(&guaranteed);
    rig.expect_allowed(g_pid, &exclusive);

    rig.expect_cpus(&burstable.rel, &shared);
    rig.expect_allowed(b_pid, &shared);
    rig.expect_cpus("system.slice", &shared);
    // Structural cgroups are never shrunk.
    rig.expect_cpus("kubepods", &all);
    rig.expect_cpus("kubepods/burstable", &all);
    rig.expect_cpus(&burstable.pod, &all);
    rig.expect_cpus(&guaranteed.pod, &all);

    rig.remove_container(&guaranteed);
    rig.expect_cpus(&burstable.rel, &all);
    rig.expect_allowed(b_pid, &all);
    rig.expect_cpus("system.slice", &all);
    rig.expect_cpus("kubepods", &all);
}

/// Scenario 2: after a crash (SIGKILL) and a restart, the pinned container
/// keeps its CPU and the daemon writes nothing: its processes never move.
#[test]
fn pinned_cpu_survives_a_daemon_crash_and_restart() {
    let Some(mut rig) = Rig::new("pinned_cpu_survives_a_daemon_crash_and_restart") else {
        return;
    };
    let (exclusive, shared) = (rig.exclusive.clone(), rig.shared.clone());
    rig.start_daemon();
    let guaranteed = rig.add_container(Qos::Guaranteed, Some(100_000));
    rig.expect_cpus(&guaranteed.rel, &exclusive);
    let g_pid = rig.attach(&guaranteed);
    let burstable = rig.add_container(Qos::Burstable, None);
    rig.expect_cpus(&burstable.rel, &shared);
    let b_pid = rig.attach(&burstable);
    rig.expect_allowed(g_pid, &exclusive);
    rig.expect_allowed(b_pid, &shared);

    rig.crash_daemon();
    // Every successful write to cpuset.cpus raises IN_MODIFY, even when the
    // value does not change: a restart that rewrites anything is seen.
    let mut inotify = Inotify::init().expect("inotify");
    let watched = [
        guaranteed.rel.as_str(),
        burstable.rel.as_str(),
        "system.slice",
        "kubepods",
    ];
    for rel in watched {
        inotify
            .watches()
            .add(rig.cs(rel), WatchMask::MODIFY)
            .expect("watch a test cgroup");
    }

    rig.start_daemon();
    rig.expect_cpus(&guaranteed.rel, &exclusive);
    rig.expect_cpus(&burstable.rel, &shared);
    // Give a late write the time to show.
    sleep(Duration::from_millis(500));
    let mut buf = [0u8; 4096];
    let written: Vec<String> = match inotify.read_events(&mut buf) {
        Ok(events) => events
            .filter_map(|e| e.name.map(|n| n.to_string_lossy().into_owned()))
            .filter(|n| n.starts_with("cpuset."))
            .collect(),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Vec::new(),
        Err(e) => panic!("inotify read: {e}"),
    };
    assert!(
        written.is_empty(),
        "the restarted daemon rewrote control files of {watched:?}: {written:?}"
    );
    rig.expect_still_in(g_pid, &guaranteed);
    rig.expect_still_in(b_pid, &burstable);
    rig.expect_allowed(g_pid, &exclusive);
    rig.expect_allowed(b_pid, &shared);
    rig.expect_cpus("system.slice", &shared);
}

/// Scenario 3: a second Guaranteed container, while the only exclusive CPU is
/// taken, waits in the shared pool, and gets the CPU once the first is deleted.
#[test]
fn second_guaranteed_container_waits_in_the_shared_pool_until_the_cpu_is_free() {
    let Some(mut rig) =
        Rig::new("second_guaranteed_container_waits_in_the_shared_pool_until_the_cpu_is_free")
    else {
        return;
    };
    let (exclusive, shared) = (rig.exclusive.clone(), rig.shared.clone());
    rig.start_daemon();
    let first = rig.add_container(Qos::Guaranteed, Some(100_000));
    rig.expect_cpus(&first.rel, &exclusive);
    let first_pid = rig.attach(&first);
    rig.expect_allowed(first_pid, &exclusive);

    let second = rig.add_container(Qos::Guaranteed, Some(100_000));
    rig.expect_cpus(&second.rel, &shared);
    let second_pid = rig.attach(&second);
    rig.expect_allowed(second_pid, &shared);
    rig.expect_cpus_stay(&second.rel, &shared, Duration::from_millis(500));
    rig.expect_cpus(&first.rel, &exclusive);
    rig.expect_allowed(first_pid, &exclusive);

    rig.remove_container(&first);
    rig.expect_cpus(&second.rel, &exclusive);
    rig.expect_allowed(second_pid, &exclusive);
    rig.expect_cpus("system.slice", &shared);
    rig.expect_cpus(&second.pod, &rig.all);
}

/// Scenario 4: another writer widens a pinned cpuset (the kubelet's CPU
/// manager, `systemctl daemon-reload`); the daemon sees the write through
/// inotify and puts the exclusive CPU back within a second.
#[test]
fn foreign_write_to_a_pinned_cpuset_is_reverted_within_a_second() {
    let Some(mut rig) = Rig::new("foreign_write_to_a_pinned_cpuset_is_reverted_within_a_second")
    else {
        return;
    };
    let (all, exclusive) = (rig.all.clone(), rig.exclusive.clone());
    rig.start_daemon();
    let guaranteed = rig.add_container(Qos::Guaranteed, Some(100_000));
    rig.expect_cpus(&guaranteed.rel, &exclusive);
    let pid = rig.attach(&guaranteed);
    rig.expect_allowed(pid, &exclusive);

    rig.note(&format!("foreign write of {all} to {}", guaranteed.rel));
    let start = Instant::now();
    // As `echo 0-1 > cpuset.cpus` does it.
    must_write(
        &rig.cs(&guaranteed.rel).join("cpuset.cpus"),
        &format!("{all}\n"),
    );
    rig.expect_cpus_within(&guaranteed.rel, &exclusive, REVERT_TIMEOUT);
    let left = REVERT_TIMEOUT.saturating_sub(start.elapsed());
    rig.expect_allowed_within(pid, &exclusive, left);
    // And it stays put: the daemon's own write does not start a loop.
    rig.expect_cpus_stay(&guaranteed.rel, &exclusive, Duration::from_millis(300));
}

/// Scenarios 2 and 3 together: a restart while one Guaranteed container holds
/// the exclusive CPU and a second one waits for it. The pinned container must
/// keep its CPU; the waiting one must stay in the shared pool. The waiting
/// pod's path sorts first (pod UIDs are random, so on a node this is a coin
/// toss), which is the order in which a restarted daemon reads them.
#[test]
fn restart_keeps_the_cpu_with_the_pinned_container_not_the_waiting_one() {
    let Some(mut rig) =
        Rig::new("restart_keeps_the_cpu_with_the_pinned_container_not_the_waiting_one")
    else {
        return;
    };
    let (exclusive, shared) = (rig.exclusive.clone(), rig.shared.clone());
    rig.start_daemon();
    let pinned = rig.add_container_sorted(Qos::Guaranteed, Some(100_000), 0xffff_ffff);
    rig.expect_cpus(&pinned.rel, &exclusive);
    let pinned_pid = rig.attach(&pinned);
    let waiting = rig.add_container_sorted(Qos::Guaranteed, Some(100_000), 0);
    rig.expect_cpus(&waiting.rel, &shared);
    let waiting_pid = rig.attach(&waiting);
    rig.expect_allowed(pinned_pid, &exclusive);
    rig.expect_allowed(waiting_pid, &shared);

    rig.crash_daemon();
    rig.start_daemon();
    rig.expect_cpus_stay(&pinned.rel, &exclusive, Duration::from_millis(500));
    rig.expect_cpus(&waiting.rel, &shared);
    rig.expect_allowed(pinned_pid, &exclusive);
    rig.expect_allowed(waiting_pid, &shared);
}

/// The watchdog makes the required kubepods paths in every hierarchy: the
/// QoS parents missing at start-up, a path removed from the cpuset tree at
/// once (inotify), one removed from the memory tree within its interval. A
/// repaired v1 cpuset has its parent's cpus and mems, so a task can join.
#[test]
fn missing_kubepods_paths_are_repaired_in_every_hierarchy() {
    let Some(mut rig) = Rig::new("missing_kubepods_paths_are_repaired_in_every_hierarchy") else {
        return;
    };
    rig.start_daemon();
    let all = hierarchies();
    assert!(all.len() > 2, "hierarchies: {all:?}");
    let required = ["kubepods", "kubepods/burstable", "kubepods/besteffort"];
    wait_for(
        "every required path in every hierarchy",
        EVENT_TIMEOUT,
        || {
            for h in &all {
                for rel in required {
                    let dir = Path::new(h).join(&rig.top).join(rel);
                    if !dir.is_dir() {
                        return Err(format!("{} missing", dir.display()));
                    }
                }
            }
            Ok(())
        },
    );
    let besteffort = rig.cs("kubepods/besteffort");
    assert!(!read(&besteffort.join("cpuset.mems")).trim().is_empty());
    assert!(!read_set(&besteffort.join("cpuset.cpus")).is_empty());

    rig.note("rmdir kubepods/besteffort in cpuset");
    fs::remove_dir(&besteffort).expect("rmdir besteffort");
    wait_for("besteffort repaired in cpuset", EVENT_TIMEOUT, || {
        if besteffort.join("cpuset.cpus").exists()
            && !read_set(&besteffort.join("cpuset.cpus")).is_empty()
            && !read(&besteffort.join("cpuset.mems")).trim().is_empty()
        {
            Ok(())
        } else {
            Err("not yet".into())
        }
    });
    // A task can join the repaired cgroup (v1 refuses one with empty sets).
    let mut sleep_child = Command::new("sleep").arg("30").spawn().expect("sleep");
    let pid = sleep_child.id();
    let joined = write(&besteffort.join("cgroup.procs"), &pid.to_string());
    let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
    let _ = sleep_child.wait();
    joined.expect("a task joins the repaired cpuset");

    let memory = Path::new("/sys/fs/cgroup/memory")
        .join(&rig.top)
        .join("kubepods/burstable");
    if memory.exists() {
        rig.note("rmdir kubepods/burstable in memory");
        fs::remove_dir(&memory).expect("rmdir memory burstable");
        wait_for(
            "burstable repaired in memory",
            Duration::from_secs(5),
            || {
                if memory.is_dir() {
                    Ok(())
                } else {
                    Err("not yet".into())
                }
            },
        );
    }
    let log = fs::read_to_string(&rig.log).unwrap_or_default();
    assert!(
        log.contains("required cgroup path was missing; repaired"),
        "{log}"
    );
}

/// As uid and gid 65534 (nobody), the way a user with a subtree systemd
/// delegated to it would: makes cgroup directory `dir` and sets its
/// `user.pinctl.cpus` to `value`. A forked child that calls only
/// async-signal-safe functions between `fork` and `_exit`; its exit code
/// names the step that failed.
fn as_nobody_mkdir_and_mark(dir: &Path, value: &str) -> Result<(), String> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt as _;

    use nix::sys::wait::{WaitStatus, waitpid};
    use nix::unistd::ForkResult;

    let path = CString::new(dir.as_os_str().as_bytes()).expect("no NUL in the path");
    let name = c"user.pinctl.cpus";
    let value = value.as_bytes();
    // SAFETY: the child only makes raw system calls on memory prepared
    // before the fork, then `_exit`s; it never returns into Rust code.
    match unsafe { nix::unistd::fork() }.expect("fork") {
        // SAFETY: as above: raw system calls on memory prepared before the
        // fork, and `_exit`.
        ForkResult::Child => unsafe {
            let code = if libc::setgroups(0, std::ptr::null()) != 0 {
                10
            } else if libc::setgid(65534) != 0 {
                11
            } else if libc::setuid(65534) != 0 {
                12
            } else if libc::mkdir(path.as_ptr(), 0o755) != 0 {
                13
            } else if libc::setxattr(
                path.as_ptr(),
                name.as_ptr(),
                value.as_ptr().cast(),
                value.len(),
                0,
            ) != 0
            {
                14
            } else {
                0
            };
            libc::_exit(code)
        },
        ForkResult::Parent { child } => match waitpid(child, None) {
            Ok(WaitStatus::Exited(_, 0)) => Ok(()),
            Ok(WaitStatus::Exited(_, code)) => Err(format!(
                "as uid 65534, {} failed (step {code}: 10 setgroups, 11 setgid, 12 setuid, \
                 13 mkdir, 14 setxattr)",
                dir.display()
            )),
            other => Err(format!("the uid-65534 child ended with {other:?}")),
        },
    }
}

/// The audit, on the real kernel: uid 65534 made a cgroup in a subtree
/// delegated to it and asked for exclusive CPUs with one `setxattr`; it
/// took 26 of 30 CPUs and left the next Guaranteed pod pending. Now the
/// request is refused and logged, the cgroup stays in the shared pool, and
/// the Guaranteed container gets the CPU.
#[test]
fn an_unprivileged_user_cannot_take_exclusive_cpus() {
    let Some(mut rig) = Rig::new("an_unprivileged_user_cannot_take_exclusive_cpus") else {
        return;
    };
    let (all, exclusive, shared) = (rig.all.clone(), rig.exclusive.clone(), rig.shared.clone());
    let delegated = "system.slice/user@65534.service";
    mkdir(&rig.cs(delegated));
    std::os::unix::fs::chown(rig.cs(delegated), Some(65534), Some(65534)).expect("chown");
    rig.start_daemon();
    rig.expect_cpus(delegated, &all);

    let greedy = format!("{delegated}/greedy");
    rig.note("uid 65534 makes greedy and sets user.pinctl.cpus = 1");
    as_nobody_mkdir_and_mark(&rig.cs(&greedy), "1").unwrap();
    // v1 gives a new cgroup empty sets: the daemon fills them with the
    // shared pool, which is still every CPU.
    rig.expect_cpus(&greedy, &all);
    rig.expect_cpus_stay(&greedy, &all, Duration::from_millis(300));

    let guaranteed = rig.add_container(Qos::Guaranteed, Some(100_000));
    rig.expect_cpus(&guaranteed.rel, &exclusive);
    rig.expect_cpus(&greedy, &shared);
    let log = fs::read_to_string(&rig.log).unwrap_or_default();
    let refused = log
        .lines()
        .filter(|l| l.contains("greedy") && l.contains("only root may give CPUs away"))
        .count();
    assert_eq!(refused, 1, "one line refusing greedy's request:\n{log}");
}

/// The audit, on the real kernel: a cgroup whose name is not UTF-8 was
/// invisible to the daemon. Below `system.slice`, holding every CPU and a
/// task, it kept `system.slice` from narrowing (v1 refuses a parent write
/// that drops a child's CPU with EBUSY) and its task ran on the exclusive
/// CPU. Now it is narrowed first, like any shared cgroup.
#[test]
fn a_cgroup_whose_name_is_not_utf8_keeps_off_the_exclusive_cpu() {
    use std::os::unix::ffi::OsStrExt as _;
    let Some(mut rig) = Rig::new("a_cgroup_whose_name_is_not_utf8_keeps_off_the_exclusive_cpu")
    else {
        return;
    };
    let (exclusive, shared, all) = (rig.exclusive.clone(), rig.shared.clone(), rig.all.clone());
    // system.slice exists before the daemon, as on a node: set it up.
    must_write(
        &rig.cs("system.slice").join("cpuset.cpus"),
        &all.to_string(),
    );
    must_write(
        &rig.cs("system.slice").join("cpuset.mems"),
        &rig.mems.to_string(),
    );
    let odd = rig
        .cs("system.slice")
        .join(std::ffi::OsStr::from_bytes(b"odd-\xff\xfe"));
    fs::create_dir(&odd).expect("mkdir the odd cgroup");
    must_write(&odd.join("cpuset.cpus"), &all.to_string());
    must_write(&odd.join("cpuset.mems"), &rig.mems.to_string());
    let sleeper = Command::new("sleep")
        .arg("600")
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn sleep");
    let pid = sleeper.id();
    rig.sleeps.push(sleeper);
    must_write(&odd.join("tasks"), &pid.to_string());
    rig.start_daemon();

    let guaranteed = rig.add_container(Qos::Guaranteed, Some(100_000));
    rig.expect_cpus(&guaranteed.rel, &exclusive);
    rig.expect_cpus("system.slice", &shared);
    rig.expect_allowed(pid, &shared);
    assert_eq!(read_set(&odd.join("cpuset.cpus")), shared);
}

/// How many cgroups the storm makes and removes in all
/// (`PINCTL_STORM_CGROUPS`, default 10,000), in bursts of
/// [`STORM_BURST`] pods with one container each.
fn storm_cgroups() -> usize {
    std::env::var("PINCTL_STORM_CGROUPS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10_000)
}
const STORM_BURST: usize = 1_000;
/// How long the daemon may take to catch up with a whole burst.
const STORM_SETTLE: Duration = Duration::from_secs(120);

/// The daemon's peak resident size (`VmHWM`), in KiB.
fn peak_rss_kib(pid: Pid) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// A storm on the real kernel: thousands of cgroups (burstable pods with a
/// container each) made and removed in bursts, while one Guaranteed
/// container holds the exclusive CPU throughout and another is made and
/// removed in every burst, waiting for it. Checked all along by a sampler:
/// the pinned container never loses its CPU (its process never moves) and
/// the waiting one never gets it. After each burst every new cgroup is
/// confined to the shared pool; the daemon's inotify queue is kept short so
/// that bursts overflow it (each overflow is a full reconcile); at the end
/// the daemon's peak RSS is bounded and the tree is right. Prints the
/// figures.
#[test]
fn a_storm_of_cgroups_never_shares_the_exclusive_cpu() {
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;
    let Some(mut rig) = Rig::new("a_storm_of_cgroups_never_shares_the_exclusive_cpu") else {
        return;
    };
    let (exclusive, shared) = (rig.exclusive.clone(), rig.shared.clone());
    // A short inotify queue for the daemon's instances (the limit is read
    // when an instance is made, so it is put back once the daemon is up):
    // a burst then overflows it, and the daemon must resynchronise.
    struct Restore(String);
    impl Drop for Restore {
        fn drop(&mut self) {
            let _ = write(Path::new(QUEUE), &self.0);
        }
    }
    const QUEUE: &str = "/proc/sys/fs/inotify/max_queued_events";
    let queue = Restore(read(Path::new(QUEUE)));
    must_write(Path::new(QUEUE), "256");
    rig.start_daemon();
    drop(queue);
    let pinned = rig.add_container(Qos::Guaranteed, Some(100_000));
    rig.expect_cpus(&pinned.rel, &exclusive);
    let pinned_pid = rig.attach(&pinned);

    let total = storm_cgroups();
    let bursts = total.div_ceil(2 * STORM_BURST).max(1);
    let stop = Arc::new(AtomicBool::new(false));
    let waiting_rel = Arc::new(Mutex::new(None::<PathBuf>));
    let sampler = {
        let (stop, waiting_rel) = (stop.clone(), waiting_rel.clone());
        let pinned_file = rig.cs(&pinned.rel).join("cpuset.cpus");
        let exclusive = exclusive.clone();
        std::thread::spawn(move || {
            let (mut samples, mut problems) = (0u64, Vec::new());
            while !stop.load(Ordering::Relaxed) {
                samples += 1;
                match fs::read_to_string(&pinned_file).map(|t| t.parse::<CpuSet>()) {
                    Ok(Ok(c)) if c == exclusive => {}
                    other => problems.push(format!("the pinned container had {other:?}")),
                }
                match cpus_allowed(pinned_pid) {
                    Ok(c) if c == exclusive => {}
                    other => problems.push(format!("its process could run on {other:?}")),
                }
                let waiting = waiting_rel.lock().unwrap().clone();
                if let Some(file) = waiting
                    && let Ok(Ok(c)) = fs::read_to_string(&file).map(|t| t.parse::<CpuSet>())
                    && !c.intersection(&exclusive).is_empty()
                {
                    problems.push(format!("the waiting container got {c}"));
                }
                sleep(Duration::from_millis(5));
            }
            (samples, problems)
        })
    };

    let started = Instant::now();
    let mut figures = Vec::new();
    for burst in 0..bursts {
        let waiting = rig.add_container(Qos::Guaranteed, Some(100_000));
        *waiting_rel.lock().unwrap() = Some(rig.cs(&waiting.rel).join("cpuset.cpus"));
        rig.note(&format!("storm burst {burst}: {STORM_BURST} pods"));
        let t0 = Instant::now();
        let mut made = Vec::with_capacity(STORM_BURST);
        for i in 0..STORM_BURST {
            let pod = format!("kubepods/burstable/pod{burst:08x}-{i:04x}-4000-8000-5702c0ffee00");
            let ctr = format!("{pod}/{:032x}{:032x}", burst, i);
            mkdir(&rig.cs(&pod));
            mkdir(&rig.cs(&ctr));
            made.push((pod, ctr));
        }
        let made_ms = t0.elapsed().as_millis();
        // Settled: every new container confined to the shared pool.
        let deadline = Instant::now() + STORM_SETTLE;
        let mut next = 0;
        while next < made.len() {
            let file = rig.cs(&made[next].1).join("cpuset.cpus");
            if fs::read_to_string(&file).is_ok_and(|t| t.parse::<CpuSet>() == Ok(shared.clone())) {
                next += 1;
                continue;
            }
            assert!(
                Instant::now() < deadline,
                "burst {burst}: {} still has {:?} after {STORM_SETTLE:?}",
                made[next].1,
                fs::read_to_string(&file)
            );
            sleep(Duration::from_millis(20));
        }
        let settled_ms = t0.elapsed().as_millis();
        rig.expect_cpus(&waiting.rel, &shared);
        // Removed as a runtime does, container then pod.
        let t1 = Instant::now();
        for (pod, ctr) in made.iter().rev() {
            fs::remove_dir(rig.cs(ctr)).expect("rmdir container");
            fs::remove_dir(rig.cs(pod)).expect("rmdir pod");
        }
        *waiting_rel.lock().unwrap() = None;
        rig.remove_container(&waiting);
        figures.push(format!(
            "burst {burst}: {} cgroups made in {made_ms} ms, all in the shared pool after {settled_ms} ms, removed in {} ms",
            2 * STORM_BURST,
            t1.elapsed().as_millis()
        ));
    }
    // Every removal seen (or reconciled): the pinned one still alone.
    rig.expect_cpus(&pinned.rel, &exclusive);
    rig.expect_cpus("system.slice", &shared);
    stop.store(true, Ordering::Relaxed);
    let (samples, problems) = sampler.join().expect("the sampler");
    let log = fs::read_to_string(&rig.log).unwrap_or_default();
    let overflows = log.lines().filter(|l| l.contains("overflow")).count();
    assert!(overflows > 0, "a 256-event queue never overflowed:\n{log}");
    let rss = peak_rss_kib(rig.daemon_pid());
    let report = format!(
        "storm: {} cgroups in {bursts} bursts, {:.1} s; {samples} samples, {} problems; \
         inotify overflows logged: {overflows}; pinctld peak RSS {:.1} MB\n  {}\n",
        bursts * 2 * STORM_BURST,
        started.elapsed().as_secs_f64(),
        problems.len(),
        rss as f64 / 1024.0,
        figures.join("\n  ")
    );
    let _ = io::stderr().lock().write_all(report.as_bytes());
    assert!(
        problems.is_empty(),
        "{report}{:#?}",
        &problems[..problems.len().min(20)]
    );
    assert!(rss < 64 * 1024, "peak RSS {rss} KiB\n{report}");
}
