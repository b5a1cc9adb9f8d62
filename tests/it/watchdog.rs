//! The watchdog of `pinctld` (issue #5), end to end: the real daemon binary on
//! fake cgroup trees and a fake procfs in tempdirs, with short intervals.
//!
//! - Required paths: the kubepods root and QoS slices of the driver present,
//!   and `required_paths`, are made in every hierarchy (v1: cpuset,
//!   cpu,cpuacct, memory, pids, freezer, systemd) when missing at start or
//!   removed while running; `repair = false` only reports; a path removed again
//!   within `repair_cooldown` is reported until the cooldown passes; the other
//!   driver's root is never made.
//! - A read that hangs (a FIFO with no writer in place of a control file)
//!   marks its path hung and nothing else: events are still served, `STATUS=`
//!   says `1 hung path`, and all is well again once the read returns.
//! - Tasks in D state in managed cgroups (fake `/proc`), and frozen cgroups
//!   (v2 `cgroup.freeze`, v1 `freezer.state`), reported after their threshold;
//!   `thaw_frozen` thaws.
//! - `WATCHDOG=1` goes on while only a path hangs and stops when the event loop
//!   is wedged (the `PINCTL_TEST_WEDGE` hook).
//!
//! A fake tree cannot do what the kernel does on the daemon's own `mkdir`: fill
//! the new directory with control files. Where that matters (v1 cpuset: the new
//! cgroup's `cpuset.cpus` and `cpuset.mems` copied from its parent) the test
//! plays the kernel: a FIFO in place of the parent's `cpuset.mems` holds the
//! daemon between its `mkdir` and its copy, and the test makes the files
//! meanwhile (see [`Env::gate_mems`]). In v2 there is no such pause (the
//! daemon reads the new directory's `cgroup.controllers` right after its
//! `mkdir`), so on a fake v2 tree a repair makes the directory and then fails
//! on that read; the v2 tests check the directory and the parent's
//! `cgroup.subtree_control`, and the full v2 repair is checked against a
//! kernel-like [`Fs`] at the end of this file and in the VM test bed
//! (`tests/vm/scenarios/9-repair.sh`).
//!
//! Every test polls with a generous deadline for what must happen, holds for a
//! while for what must not, and stops its daemon and removes its tempdir even
//! when it fails. On failure the message carries the trees, the sd-notify
//! messages and the daemon's log.

use std::fs;
use std::io::{self, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use nix::sys::stat::Mode;
use pinctl::io::{Entry, Fs, RealFs};
use pinctl::watchdog::{self, Mount, MountKind};

use crate::support::fake_cgroup::{
    self, Driver, Layout, MEMS, ONLINE, Qos, Spec, V1_HIERARCHIES, Version, container_id, uid,
};
use crate::support::pinctld::Launch;
use crate::support::world::{self, World};

/// How long a test watches for something that must not happen: several
/// watchdog intervals of [`Options::default`].
const HOLD: Duration = Duration::from_millis(1200);

const REPAIRED: &str = "required cgroup path was missing; repaired";
const LEFT_MISSING: &str = "required cgroup path missing";
const MARKED_HUNG: &str = "I/O call did not return in time; path marked hung";
const HUNG_RETURNED: &str = "hung I/O call returned; path no longer marked hung";
const STUCK_TASK: &str = "task stuck in uninterruptible sleep (D state)";
const STALLED: &str = "the event loop has been handling one event (wedge (test hook))";

// ---------------------------------------------------------------------------
// The world of one test
// ---------------------------------------------------------------------------

/// The watchdog's keys, short for tests.
#[derive(Debug, Clone)]
struct Options {
    watchdog_interval: &'static str,
    read_timeout: &'static str,
    repair: bool,
    repair_cooldown: &'static str,
    dstate_threshold: &'static str,
    frozen_threshold: &'static str,
    thaw_frozen: bool,
    required_paths: Vec<&'static str>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            watchdog_interval: "200ms",
            read_timeout: "5s",
            repair: true,
            repair_cooldown: "1h",
            dstate_threshold: "300ms",
            frozen_threshold: "300ms",
            thaw_frozen: false,
            required_paths: Vec::new(),
        }
    }
}

impl Options {
    /// The world's options: these keys after the common ones.
    fn world(&self) -> world::Options {
        world::Options {
            keys: vec![
                format!("watchdog_interval = {:?}", self.watchdog_interval),
                format!("read_timeout = {:?}", self.read_timeout),
                format!("repair = {}", self.repair),
                format!("repair_cooldown = {:?}", self.repair_cooldown),
                format!("dstate_threshold = {:?}", self.dstate_threshold),
                format!("frozen_threshold = {:?}", self.frozen_threshold),
                format!("thaw_frozen = {}", self.thaw_frozen),
                format!("required_paths = {:?}", self.required_paths),
            ],
            ..world::Options::default()
        }
    }
}

/// One test's [`World`], with what only this suite needs: v1 trees with
/// every hierarchy of [`V1_HIERARCHIES`] (the kubepods skeleton and
/// `system.slice` in each), v2 trees with the `cgroup.controllers` a repair
/// reads, and tasks in the world's fake `/proc`.
struct Env {
    w: World,
    proc: FakeProc,
}

env_of_world!(Env);

impl Env {
    fn new(version: Version, driver: Driver, opts: Options) -> Env {
        let w = World::new("pinctld-watchdog", version, driver, &opts.world());
        let env = Env {
            proc: FakeProc {
                root: w.proc_root.clone(),
                version,
            },
            w,
        };
        // The world made its cgroups in the cpuset (and v1 cpu) hierarchy:
        // the rest of each, parents first.
        if env.v1() {
            env.tree.mount_v1_hierarchies();
        }
        for rel in env.tree.cgroups() {
            env.make_elsewhere(&rel);
        }
        env
    }

    fn v1(&self) -> bool {
        self.tree.version() == Version::V1
    }

    /// Makes cgroup `rel` in every hierarchy.
    fn make(&self, rel: &str, spec: &Spec) {
        self.tree.create(rel, spec);
        self.make_elsewhere(rel);
    }

    /// What the kubelet and the kernel add to cgroup `rel` made in the cpuset
    /// hierarchy. v1: `rel` in every other hierarchy. v2: the
    /// `cgroup.controllers` the kernel shows (its parent's
    /// `cgroup.subtree_control`), which a repair below it reads.
    fn make_elsewhere(&self, rel: &str) {
        if self.v1() {
            self.tree.create_in_others(rel);
        } else {
            let parent = fake_cgroup::parent(rel).unwrap();
            let enabled = self.tree.read_file(parent, "cgroup.subtree_control");
            self.tree.write_file(rel, "cgroup.controllers", &enabled);
        }
    }

    /// The directories of `rel` in every hierarchy (v2: the one).
    fn everywhere(&self, rel: &str) -> Vec<PathBuf> {
        if self.v1() {
            V1_HIERARCHIES
                .iter()
                .map(|h| self.tree.hier_dir(h, rel))
                .collect()
        } else {
            vec![self.tree.dir(rel)]
        }
    }

    /// Removes `rel` (and what is below it) from every hierarchy.
    fn remove_everywhere(&self, rel: &str) {
        for dir in self.everywhere(rel) {
            remove(&dir);
        }
    }

    /// Waits until every directory of `dirs` exists.
    fn wait_dirs(&self, what: &str, dirs: &[PathBuf]) {
        self.wait_for(what, || match dirs.iter().find(|d| !d.is_dir()) {
            None => Ok(()),
            Some(d) => Err(format!("{} is missing", d.display())),
        });
    }

    // --- workloads ------------------------------------------------------------

    /// A Guaranteed pod `n` with one container asking for `cpus` CPUs (a CPU
    /// limit), in every hierarchy; returns the container's cgroup.
    fn guaranteed(&self, n: u32, cpus: u32) -> String {
        let pod = self.k.pod(Qos::Guaranteed, &uid(n));
        self.make(&pod, &self.existing());
        let ctr = self.k.container(&pod, &container_id(n));
        self.make(&ctr, &Spec::limit(cpus));
        ctr
    }

    /// A burstable pod `n` with one container without a limit.
    fn burstable(&self, n: u32) -> String {
        let pod = self.k.pod(Qos::Burstable, &uid(n));
        self.make(&pod, &self.existing());
        let ctr = self.k.container(&pod, &container_id(n));
        self.make(&ctr, &self.existing());
        ctr
    }

    // --- playing the kernel -------------------------------------------------------

    /// Puts a FIFO in place of `cpuset.mems` of `parent` in the cpuset
    /// hierarchy: the daemon's next read of it blocks until
    /// [`Env::open_gate`]. A v1 repair reads it right after its `mkdir` of a
    /// child, which lets the test make the child's control files, as the
    /// kernel does on `mkdir`, before the daemon writes them.
    fn gate_mems(&self, parent: &str) -> Gate {
        let file = self.tree.dir(parent).join("cpuset.mems");
        let value = fs::read_to_string(&file).unwrap();
        let fifo = self.tmp.path().join(format!("gate-{}", self.logs.len()));
        nix::unistd::mkfifo(&fifo, Mode::S_IRUSR | Mode::S_IWUSR).unwrap();
        fs::rename(&fifo, &file).unwrap();
        Gate { file, value }
    }

    /// Plays the kernel for the daemon's `mkdir` of `child` (in the cpuset
    /// hierarchy) held by `gate`: waits for the directory, gives it empty
    /// `cpuset.cpus` and `cpuset.mems` as the kernel does, then lets the
    /// daemon's read of the gate return the parent's value and puts a regular
    /// file back in its place.
    fn open_gate(&self, gate: Gate, child: &str) {
        let dir = self.tree.dir(child);
        self.wait_dirs(
            &format!("the daemon's mkdir of {child}"),
            std::slice::from_ref(&dir),
        );
        for f in ["cpuset.cpus", "cpuset.mems"] {
            fs::write(dir.join(f), "").unwrap();
        }
        // O_NONBLOCK: ENXIO until the daemon's read has the FIFO open.
        let mut writer = self.wait_for("the daemon to read the gated cpuset.mems", || {
            fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&gate.file)
                .map_err(|e| e.to_string())
        });
        let regular = self.tmp.path().join("gate-regular");
        fs::write(&regular, &gate.value).unwrap();
        fs::rename(&regular, &gate.file).unwrap();
        writer.write_all(gate.value.as_bytes()).unwrap();
    }

    /// Puts a FIFO with no writer in place of `file` of cgroup `rel` (cpuset
    /// hierarchy): every read of it blocks until [`Env::release`].
    fn hang(&self, rel: &str, file: &str) -> Hang {
        let path = self.tree.dir(rel).join(file);
        let value = fs::read_to_string(&path).unwrap();
        let fifo = self.tmp.path().join("hang-fifo");
        nix::unistd::mkfifo(&fifo, Mode::S_IRUSR | Mode::S_IWUSR).unwrap();
        fs::rename(&fifo, &path).unwrap();
        Hang { path, value }
    }

    /// Lets the stuck read of `hang` return what the file held, and puts the
    /// regular file back.
    fn release(&self, hang: Hang) {
        let mut writer = self.wait_for("a reader stuck on the FIFO", || {
            fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&hang.path)
                .map_err(|e| e.to_string())
        });
        let regular = self.tmp.path().join("hang-regular");
        fs::write(&regular, &hang.value).unwrap();
        fs::rename(&regular, &hang.path).unwrap();
        writer.write_all(hang.value.as_bytes()).unwrap();
    }
}

/// See [`Env::gate_mems`].
struct Gate {
    file: PathBuf,
    value: String,
}

/// See [`Env::hang`].
struct Hang {
    path: PathBuf,
    value: String,
}

fn remove(dir: &Path) {
    fs::remove_dir_all(dir).unwrap_or_else(|e| panic!("remove {}: {e}", dir.display()));
}

/// The other driver's kubepods root.
fn other_root(k: Layout) -> String {
    match k.driver {
        Driver::Systemd => Layout::new(Driver::Cgroupfs).root(),
        Driver::Cgroupfs => Layout::new(Driver::Systemd).root(),
    }
}

/// Tasks in the world's fake `/proc`: `<pid>/task/<tid>/{stat,cgroup,wchan}`.
struct FakeProc {
    root: PathBuf,
    version: Version,
}

impl FakeProc {
    /// Writes a file whole, so the daemon never reads half of it.
    fn put(&self, path: &Path, text: &str) {
        let tmp = path.with_extension("new");
        fs::write(&tmp, text).unwrap();
        fs::rename(&tmp, path).unwrap();
    }

    /// Task `tid` of process `pid`, in state `state`, in cgroup `rel`
    /// (relative to the hierarchy), sleeping in `wchan`.
    fn task(&self, pid: u32, tid: u32, comm: &str, state: char, rel: &str, wchan: &str) {
        let dir = self
            .root
            .join(pid.to_string())
            .join("task")
            .join(tid.to_string());
        fs::create_dir_all(&dir).unwrap();
        self.set_state(pid, tid, comm, state);
        let cgroup = match self.version {
            Version::V2 => format!("0::/{rel}\n"),
            Version::V1 => format!(
                "12:pids:/{rel}\n11:freezer:/{rel}\n5:cpuset:/{rel}\n3:cpu,cpuacct:/{rel}\n1:name=systemd:/{rel}\n"
            ),
        };
        self.put(&dir.join("cgroup"), &cgroup);
        self.put(&dir.join("wchan"), wchan);
    }

    /// Changes the state of a task made by [`Self::task`].
    fn set_state(&self, pid: u32, tid: u32, comm: &str, state: char) {
        let dir = self
            .root
            .join(pid.to_string())
            .join("task")
            .join(tid.to_string());
        // starttime (field 22) tells a reused tid from the task seen before.
        let stat = format!(
            "{tid} ({comm}) {state} 1 {pid} {pid} 0 -1 4194560 100 0 0 0 5 6 0 0 20 0 2 0 {} 1000 100 18446744073709551615\n",
            10_000 + tid
        );
        self.put(&dir.join("stat"), &stat);
    }
}

// ---------------------------------------------------------------------------
// 1. Missing at start: made in every hierarchy
// ---------------------------------------------------------------------------

#[test]
fn missing_qos_slice_is_made_in_every_v1_hierarchy_systemd() {
    missing_qos_slice_v1(Driver::Systemd);
}

#[test]
fn missing_qos_slice_is_made_in_every_v1_hierarchy_cgroupfs() {
    missing_qos_slice_v1(Driver::Cgroupfs);
}

/// v1: the best-effort QoS slice is missing in all six hierarchies at start.
/// The daemon makes it in each before `READY=1`, the cpuset one with its
/// parent's `cpuset.cpus` and `cpuset.mems` (so a task can join at once),
/// logs each repair with its path and counts them in `STATUS=`; the other
/// driver's root, absent everywhere, is never made.
fn missing_qos_slice_v1(driver: Driver) {
    let mut env = Env::new(Version::V1, driver, Options::default());
    let root = env.k.root();
    let besteffort = env.k.qos_parent(Qos::BestEffort);
    env.remove_everywhere(&besteffort);
    let gate = env.gate_mems(&root);
    env.spawn(&Launch::default());
    env.open_gate(gate, &besteffort);
    env.wait_ready();

    let dirs = env.everywhere(&besteffort);
    for dir in &dirs {
        if !dir.is_dir() {
            env.fail(&format!("{} was not made before READY=1", dir.display()));
        }
    }
    let (cpus, mems) = (env.tree.effective(&besteffort), env.tree.mems(&besteffort));
    if (cpus.to_string().as_str(), mems.to_string().as_str()) != (ONLINE, MEMS) {
        env.fail(&format!(
            "the repaired cpuset has cpus {cpus} mems {mems}, not its parent's {ONLINE} {MEMS}"
        ));
    }
    let log = env.log();
    for dir in &dirs {
        let line = format!("{REPAIRED} path={}", dir.display());
        if !log.contains(&line) {
            env.fail(&format!("no log line {line:?}"));
        }
    }
    let status = env.d().status();
    if !status.ends_with("; 6 repairs") || status.contains("degraded") {
        env.fail(&format!("STATUS={status}: expected healthy with 6 repairs"));
    }
    let other = env.everywhere(&other_root(env.k));
    env.hold("the other driver's root stays absent", HOLD, || match other
        .iter()
        .find(|d| d.exists())
    {
        Some(d) => Err(format!("{} was made", d.display())),
        None => Ok(()),
    });
}

/// BUG (fails as of this writing). v1: the kubepods root is missing in one
/// hierarchy (memory) at start, with a one-hour `watchdog_interval`: the root
/// and the QoS slices below it must all be made before `READY=1`.
///
/// The daemon makes the root and leaves the slices to the next check (here an
/// hour, 10 s by default): `Daemon::check_paths` skips every required path
/// below one it has just repaired ("a repair of a parent made its children
/// too"), but `watchdog::repair` makes only the path asked and its missing
/// parents, never its children.
#[test]
fn a_kubepods_root_missing_in_one_hierarchy_is_made_with_its_qos_slices() {
    let opts = Options {
        watchdog_interval: "1h",
        ..Options::default()
    };
    let mut env = Env::new(Version::V1, Driver::Systemd, opts);
    remove(&env.tree.hier_dir("memory", &env.k.root()));
    let wanted: Vec<PathBuf> = env
        .k
        .skeleton()
        .iter()
        .map(|rel| env.tree.hier_dir("memory", rel))
        .collect();
    env.start();
    env.wait_dirs("the missing root and its QoS slices", &wanted);
}

/// BUG (fails as of this writing). A repair that fails is logged with its
/// cause: the file and the error. Here (v1, a fake tree) the copy of the
/// parent's `cpuset.mems` into the new best-effort cpuset fails with `ENOENT`
/// (a fake directory gets no control files), standing in for any refusal of
/// the kernel.
///
/// The daemon logs only `repair failed: failed to repair <path>`: it formats
/// the `IoError` with `{:#}`, which prints a `thiserror` error's own message
/// and not its source, where `watchdog::repair` put the file, the data and the
/// errno.
#[test]
fn a_failed_repair_is_logged_with_its_cause() {
    let mut env = Env::new(Version::V1, Driver::Systemd, Options::default());
    let besteffort = env.k.qos_parent(Qos::BestEffort);
    remove(&env.tree.dir(&besteffort));
    env.start();
    env.wait_log(&format!("{LEFT_MISSING}: repair failed"), 1);
    let log = env.log();
    let line = log
        .lines()
        .find(|l| l.contains("repair failed"))
        .unwrap_or_default();
    let file = env.tree.dir(&besteffort).join("cpuset.mems");
    if !line.contains(&format!("{}: No such file or directory", file.display())) {
        env.fail(&format!(
            "the failed repair does not name {} and its error: {line}",
            file.display()
        ));
    }
}

#[test]
fn missing_qos_slice_is_made_on_v2_systemd() {
    missing_qos_slice_v2(Driver::Systemd);
}

#[test]
fn missing_qos_slice_is_made_on_v2_cgroupfs() {
    missing_qos_slice_v2(Driver::Cgroupfs);
}

/// v2: the best-effort QoS slice is missing at start. The daemon enables, in
/// the kubepods root's `cgroup.subtree_control`, the controllers of its list
/// the root has and has not enabled (here `io`, `memory` and `pids`; not
/// `hugetlb`, which the root lacks), and makes the slice; the other driver's
/// root is never made. (On a fake tree the repair then fails reading the new
/// slice's `cgroup.controllers`, which only the kernel makes: not checked.)
fn missing_qos_slice_v2(driver: Driver) {
    let mut env = Env::new(Version::V2, driver, Options::default());
    let root = env.k.root();
    let besteffort = env.k.qos_parent(Qos::BestEffort);
    env.tree
        .write_file(&root, "cgroup.controllers", "cpuset cpu io memory pids\n");
    env.tree
        .write_file(&root, "cgroup.subtree_control", "cpuset cpu\n");
    env.remove_everywhere(&besteffort);
    env.start();
    env.wait_dirs("the best-effort slice", &env.everywhere(&besteffort));
    let enabled = env.tree.read_file(&root, "cgroup.subtree_control");
    if enabled != "+io +memory +pids" {
        env.fail(&format!(
            "{root}/cgroup.subtree_control was written {enabled:?}, not \"+io +memory +pids\""
        ));
    }
    let other = env.tree.dir(&other_root(env.k));
    env.hold("the other driver's root stays absent", HOLD, || {
        if other.exists() {
            Err(format!("{} was made", other.display()))
        } else {
            Ok(())
        }
    });
}

// ---------------------------------------------------------------------------
// 2. Removed while running
// ---------------------------------------------------------------------------

on_both_versions!(removed_from_the_watched_trees_is_made_again_at_once => removed_at_once(Driver::Systemd));

/// With a one-hour `watchdog_interval`, a QoS slice removed from the cpuset
/// tree, and in v1 from the cpu,cpuacct tree (which the daemon watches too),
/// is made again at once, through inotify. v1: the cpuset one with its
/// parent's CPUs and memory nodes.
fn removed_at_once(version: Version, driver: Driver) {
    let opts = Options {
        watchdog_interval: "1h",
        ..Options::default()
    };
    let mut env = Env::new(version, driver, opts);
    let root = env.k.root();
    let besteffort = env.k.qos_parent(Qos::BestEffort);
    env.start();
    let dir = env.tree.dir(&besteffort);
    match version {
        Version::V1 => {
            let gate = env.gate_mems(&root);
            remove(&dir);
            env.open_gate(gate, &besteffort);
            env.wait_log(&format!("{REPAIRED} path={}", dir.display()), 1);
            let (cpus, mems) = (env.tree.effective(&besteffort), env.tree.mems(&besteffort));
            if (cpus.to_string().as_str(), mems.to_string().as_str()) != (ONLINE, MEMS) {
                env.fail(&format!(
                    "the repaired cpuset has cpus {cpus} mems {mems}, not {ONLINE} {MEMS}"
                ));
            }
            let cpu = env.tree.hier_dir("cpu,cpuacct", &besteffort);
            remove(&cpu);
            env.wait_log(&format!("{REPAIRED} path={}", cpu.display()), 1);
            env.wait_dirs("the cpu,cpuacct slice", &[cpu]);
        }
        Version::V2 => {
            remove(&dir);
            env.wait_dirs("the best-effort slice made again", &[dir]);
        }
    }
}

#[test]
fn removed_from_other_v1_hierarchies_is_made_again_within_the_interval() {
    let mut env = Env::new(Version::V1, Driver::Cgroupfs, Options::default());
    let root = env.k.root();
    let burstable = env.k.qos_parent(Qos::Burstable);
    let besteffort = env.k.qos_parent(Qos::BestEffort);
    env.start();
    let gone = [
        env.tree.hier_dir("memory", &besteffort),
        env.tree.hier_dir("pids", &burstable),
        env.tree.hier_dir("freezer", &besteffort),
        env.tree.hier_dir("systemd", &burstable),
    ];
    for dir in &gone {
        remove(dir);
    }
    env.wait_dirs("every removed slice made again", &gone);
    for dir in &gone {
        env.wait_log(&format!("{REPAIRED} path={}", dir.display()), 1);
    }
    env.wait_status("with 4 repairs", |s| s.ends_with("; 4 repairs"));
    for dir in env.everywhere(&root) {
        if !dir.is_dir() {
            env.fail(&format!("{} went", dir.display()));
        }
    }
}

// ---------------------------------------------------------------------------
// 3. repair = false, and the cooldown
// ---------------------------------------------------------------------------

on_both_versions!(with_repair_off_a_missing_path_is_only_reported => repair_off(Driver::Systemd));

/// `repair = false`: a QoS slice missing at start (v1: in memory and pids) is
/// logged and counted in `STATUS=` as missing, and never made.
fn repair_off(version: Version, driver: Driver) {
    let opts = Options {
        repair: false,
        ..Options::default()
    };
    let mut env = Env::new(version, driver, opts);
    let besteffort = env.k.qos_parent(Qos::BestEffort);
    let gone = match version {
        Version::V1 => vec![
            env.tree.hier_dir("memory", &besteffort),
            env.tree.hier_dir("pids", &besteffort),
        ],
        Version::V2 => vec![env.tree.dir(&besteffort)],
    };
    for dir in &gone {
        remove(dir);
    }
    env.start();
    let want = match gone.len() {
        1 => "degraded: 1 missing path".to_string(),
        n => format!("degraded: {n} missing paths"),
    };
    env.wait_status(&format!("saying {want:?}"), |s| s.ends_with(&want));
    for dir in &gone {
        env.wait_log(
            &format!(
                "{LEFT_MISSING}: missing; repair = false path={}",
                dir.display()
            ),
            1,
        );
    }
    env.hold("the missing slices stay missing", HOLD, || {
        match gone.iter().find(|d| d.exists()) {
            Some(d) => Err(format!("{} was made", d.display())),
            None => Ok(()),
        }
    });
    if env.log().contains(REPAIRED) {
        env.fail("a repair with repair = false");
    }
}

/// A path removed again right after its repair is left missing and reported
/// until `repair_cooldown` has passed since that repair, then made again.
/// (v1 memory hierarchy: there a repair on a fake tree does all a kernel's
/// would.)
#[test]
fn removed_again_within_the_cooldown_is_reported_until_it_passes() {
    let opts = Options {
        repair_cooldown: "4s",
        ..Options::default()
    };
    let mut env = Env::new(Version::V1, Driver::Systemd, opts);
    let besteffort = env.k.qos_parent(Qos::BestEffort);
    let dir = env.tree.hier_dir("memory", &besteffort);
    env.start();
    let repaired = format!("{REPAIRED} path={}", dir.display());

    remove(&dir);
    env.wait_log(&repaired, 1);
    env.wait_dirs("the first repair", std::slice::from_ref(&dir));
    let first = Instant::now();

    remove(&dir);
    let again = format!("{LEFT_MISSING}: missing again");
    // A check found it missing and left it, logged once however many checks
    // see it during the cooldown.
    env.wait_log(&again, 1);
    std::thread::sleep(Duration::from_millis(600));
    let logged = env.log().matches(&again).count();
    if logged != 1 {
        env.fail(&format!(
            "the cooldown warning was logged {logged} times, not once"
        ));
    }
    if dir.exists() || first.elapsed() >= Duration::from_secs(4) {
        env.fail("the path was not left missing within the cooldown");
    }
    let status = env.d().status();
    if !status.contains("degraded: 1 missing path") {
        env.fail(&format!("STATUS={status}: expected 1 missing path"));
    }
    let line = env
        .log()
        .lines()
        .find(|l| l.contains(&again))
        .unwrap_or_default()
        .to_string();
    if !line.contains("next repair after the 4s cooldown")
        || !line.contains(&dir.display().to_string())
    {
        env.fail(&format!(
            "the cooldown line names neither the cooldown nor the path: {line}"
        ));
    }

    // After the cooldown: made again, and healthy.
    env.wait_log(&repaired, 2);
    env.wait_dirs("the second repair", &[dir]);
    if first.elapsed() < Duration::from_secs(3) {
        env.fail(&format!(
            "repaired again {:?} after the first repair",
            first.elapsed()
        ));
    }
    env.wait_status("healthy with 2 repairs", |s| {
        s.ends_with("; 2 repairs") && !s.contains("degraded")
    });
}

// ---------------------------------------------------------------------------
// 4. required_paths
// ---------------------------------------------------------------------------

on_both_versions!(required_paths_from_the_config_are_made => required_paths(Driver::Systemd));

/// `required_paths` are made in every hierarchy like the kubepods ones (v1:
/// a slice and a scope below it; v2: a slice, with the controllers the root
/// has enabled for it in the root's `cgroup.subtree_control`). Only the
/// directories are checked: on a fake tree the v1 cpuset copy and the v2
/// `cgroup.controllers` read after the `mkdir` fail (no control files).
fn required_paths(version: Version, driver: Driver) {
    let paths = match version {
        Version::V1 => vec!["machine.slice", "machine.slice/pinctl.scope"],
        Version::V2 => vec!["machine.slice"],
    };
    let opts = Options {
        required_paths: paths.clone(),
        ..Options::default()
    };
    let mut env = Env::new(version, driver, opts);
    env.start();
    let dirs: Vec<PathBuf> = paths.iter().flat_map(|p| env.everywhere(p)).collect();
    env.wait_dirs("every required path in every hierarchy", &dirs);
    if version == Version::V2 {
        let enabled = env.tree.read_file("", "cgroup.subtree_control");
        if enabled != "+io +memory +pids" {
            env.fail(&format!(
                "the root's cgroup.subtree_control was written {enabled:?}, not \"+io +memory +pids\""
            ));
        }
    }
}

// ---------------------------------------------------------------------------
// 5. A read that hangs
// ---------------------------------------------------------------------------

on_both_versions!(a_hung_read_marks_its_path_and_nothing_else => hung_read(Driver::Systemd));

/// The cgroup whose reads hang in the tests below: a pod whose containers are
/// yet to come. The daemon never writes it (a pod keeps every CPU) and reads it
/// only when it scans, so the one read that hangs is the test's.
fn quiet_pod(env: &Env) -> String {
    let pod = env.k.pod(Qos::Burstable, &uid(9));
    env.make(&pod, &env.existing());
    pod
}

/// A pod's `cpuset.cpus` becomes a FIFO with no writer and a full reconcile
/// (SIGHUP) reads it: the read times out, the pod's directory is marked hung
/// and `STATUS=` says `degraded: 1 hung path`, nothing else. Meanwhile a new
/// Guaranteed container is pinned (events are still served), the pinned one
/// keeps its CPUs, and another reconcile passes the hung path by without
/// waiting on it again. When the read returns, the mark goes, `STATUS=` is
/// healthy, and a reconcile reads the pod as before.
fn hung_read(version: Version, driver: Driver) {
    let opts = Options {
        read_timeout: "400ms",
        ..Options::default()
    };
    let mut env = Env::new(version, driver, opts);
    let first = env.guaranteed(1, 2);
    let pod = quiet_pod(&env);
    env.start();
    let x1 = env.wait_pinned(&first, 2);
    env.wait_status("healthy with one workload", |s| {
        s.starts_with("1 exclusive workloads") && !s.contains("degraded")
    });

    let hang = env.hang(&pod, "cpuset.cpus");
    let reconciles = |env: &Env| env.log().matches("reconcile done").count();
    let before = reconciles(&env);
    env.d().signal(Signal::SIGHUP);
    env.wait_log(MARKED_HUNG, 1);
    let hung_dir = env.tree.dir(&pod);
    if !env
        .log()
        .lines()
        .any(|l| l.contains(MARKED_HUNG) && l.contains(&format!("path={} ", hung_dir.display())))
    {
        env.fail(&format!(
            "the path marked hung is not {}",
            hung_dir.display()
        ));
    }
    env.wait_status("saying 1 hung path and nothing else", |s| {
        s.starts_with("1 exclusive workloads") && s.ends_with("; degraded: 1 hung path")
    });
    env.wait_for("the reconcile to finish", || {
        if reconciles(&env) > before {
            Ok(())
        } else {
            Err("not yet".into())
        }
    });

    // Still serving events: a new workload is pinned, away from the first.
    let second = env.guaranteed(2, 4);
    let x2 = env.wait_pinned(&second, 4);
    if !x2.is_disjoint(&x1) || env.tree.effective(&first) != x1 {
        env.fail(&format!(
            "pinned {x2} next to {}; the first had {x1}",
            env.tree.effective(&first)
        ));
    }
    env.wait_status("2 workloads, 1 hung path", |s| {
        s.starts_with("2 exclusive workloads") && s.ends_with("; degraded: 1 hung path")
    });
    // A reconcile while the path is hung does not wait on it again.
    let before = reconciles(&env);
    env.d().signal(Signal::SIGHUP);
    env.wait_for("a reconcile past the hung path", || {
        if reconciles(&env) > before {
            Ok(())
        } else {
            Err("not yet".into())
        }
    });
    if env.log().matches(MARKED_HUNG).count() != 1 {
        env.fail("the hung path was read again (a second timeout)");
    }

    env.release(hang);
    env.wait_log(HUNG_RETURNED, 1);
    env.wait_status("healthy again", |s| {
        s.starts_with("2 exclusive workloads") && !s.contains("degraded")
    });
    let before = reconciles(&env);
    env.d().signal(Signal::SIGHUP);
    env.wait_for("a full reconcile", || {
        if reconciles(&env) > before {
            Ok(())
        } else {
            Err("not yet".into())
        }
    });
    if env.log().matches("cannot read cgroup").count() != 2 {
        env.fail("expected one timeout and one refusal of the hung pod, no more");
    }
    if env.tree.effective(&first) != x1 || env.tree.effective(&second) != x2 {
        env.fail("a workload lost its CPUs after the hang");
    }
    env.hold("healthy after the hang", Duration::from_millis(600), || {
        let s = env.d().status();
        if s.contains("degraded") {
            Err(s)
        } else {
            Ok(())
        }
    });
    if !env.d().pings().is_empty() {
        env.fail("WATCHDOG=1 without WATCHDOG_USEC");
    }
}

// ---------------------------------------------------------------------------
// 6. Tasks in D state
// ---------------------------------------------------------------------------

on_both_versions!(a_task_in_d_state_is_reported_until_it_wakes => dstate(Driver::Systemd));

/// A fake `/proc` with a thread of a container's process in D state, a task in
/// D state in `user.slice` (not managed) and a running one. After
/// `dstate_threshold` the daemon logs the container's thread (pid, tid,
/// command, cgroup, wchan) once and `STATUS=` says `1 D-state task`; the other
/// task is never reported. When the thread wakes, the report goes.
fn dstate(version: Version, driver: Driver) {
    let mut env = Env::new(version, driver, Options::default());
    let ctr = env.burstable(1);
    let user = "user.slice/user-1000.slice/session-1.scope";
    env.proc
        .task(4242, 4242, "stuck-app", 'S', &ctr, "do_epoll_wait");
    env.proc
        .task(4242, 4243, "stuck-app", 'D', &ctr, "io_schedule");
    env.proc.task(5000, 5000, "other-d", 'D', user, "nfs_wait");
    // The audit: anyone can put a task of their own in D state (a `vfork`
    // parent) in a shared cgroup such as a user's delegated subtree; that
    // is not the node's health.
    let shared = "system.slice/user@1000.service/app.scope";
    env.proc.task(
        5001,
        5001,
        "vfork-parent",
        'D',
        shared,
        "wait_for_vfork_done",
    );
    env.proc.task(6000, 6000, "runner", 'R', &ctr, "0");
    env.start();

    env.wait_status("saying 1 D-state task", |s| {
        s.contains("degraded: 1 D-state task")
    });
    env.wait_log(STUCK_TASK, 1);
    let log = env.log();
    let line = log.lines().find(|l| l.contains(STUCK_TASK)).unwrap();
    for want in [
        "pid=4242 ",
        "tid=4243 ",
        "comm=stuck-app ",
        &format!("cgroup={ctr} "),
        "wchan=Some(\"io_schedule\")",
        "uid=Some(",
    ] {
        if !line.contains(want) {
            env.fail(&format!("the D-state line lacks {want:?}: {line}"));
        }
    }
    env.hold("one D-state task, logged once", HOLD, || {
        let s = env.d().status();
        let log = env.log();
        if !s.contains("degraded: 1 D-state task") {
            return Err(format!("STATUS={s}"));
        }
        if log.matches(STUCK_TASK).count() != 1
            || log.contains("pid=5000")
            || log.contains("pid=5001")
        {
            return Err("logged again, or an unmanaged or shared task logged".into());
        }
        Ok(())
    });

    env.proc.set_state(4242, 4243, "stuck-app", 'S');
    env.wait_status("healthy once the task woke", |s| !s.contains("degraded"));
}

/// The processes are listed once per pass over the watchdog's parts: one
/// that appears later, stuck, is found by a later pass. Fails if the list
/// is never taken again.
#[test]
fn a_process_stuck_after_the_start_is_found_by_a_later_pass() {
    let mut env = Env::new(Version::V2, Driver::Systemd, Options::default());
    let ctr = env.burstable(1);
    env.proc.task(4242, 4242, "app", 'S', &ctr, "do_epoll_wait");
    env.start();
    // Two passes (six rounds each, 200 ms apart): the first list is old.
    std::thread::sleep(Duration::from_millis(2600));
    env.proc.task(7000, 7000, "late", 'D', &ctr, "io_schedule");
    env.wait_status("saying 1 D-state task", |s| {
        s.contains("degraded: 1 D-state task")
    });
    env.wait_log(STUCK_TASK, 1);
    if !env.log().contains("pid=7000 ") {
        env.fail("the late process is not the one reported");
    }
}

// ---------------------------------------------------------------------------
// 7. Frozen cgroups
// ---------------------------------------------------------------------------

/// The freezer file of `rel` and what frozen and thawed read there.
fn freezer(env: &Env, rel: &str) -> (PathBuf, &'static str, &'static str) {
    match env.tree.version() {
        Version::V2 => (env.tree.dir(rel).join("cgroup.freeze"), "1\n", "0"),
        Version::V1 => (
            env.tree.hier_dir("freezer", rel).join("freezer.state"),
            "FROZEN\n",
            "THAWED",
        ),
    }
}

on_both_versions!(a_frozen_container_is_reported => frozen_reported(Driver::Systemd));

/// A container left frozen (v2 `cgroup.freeze` 1, v1 `freezer.state` FROZEN)
/// longer than `frozen_threshold` is logged and `STATUS=` says `1 frozen
/// cgroup`; without `thaw_frozen` it stays frozen. Thawed by its owner, it is
/// no longer reported.
fn frozen_reported(version: Version, driver: Driver) {
    let mut env = Env::new(version, driver, Options::default());
    let ctr = env.burstable(1);
    let (file, frozen, thawed) = freezer(&env, &ctr);
    // The audit: a user who freezes a cgroup of their own delegated subtree
    // does not make the node "degraded"; only what the operator asked to be
    // watched counts.
    let users = "system.slice/user@1000.service";
    env.make(users, &env.existing());
    let (users_file, _, _) = freezer(&env, users);
    fs::create_dir_all(users_file.parent().unwrap()).unwrap();
    fs::write(&users_file, frozen).unwrap();
    if version == Version::V2 {
        fs::write(&file, "0\n").unwrap();
    }
    env.start();
    fs::write(&file, frozen).unwrap();
    env.wait_status("saying 1 frozen cgroup", |s| {
        s.contains("degraded: 1 frozen cgroup")
    });
    env.wait_log(
        &format!("cgroup frozen longer than frozen_threshold cgroup={ctr} owner=Some("),
        1,
    );
    let log = env.log();
    let said: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("frozen longer") && l.contains(users))
        .collect();
    if !said.is_empty() {
        env.fail(&format!(
            "a user's own frozen cgroup was reported: {said:?}"
        ));
    }
    env.hold("left frozen without thaw_frozen", HOLD, || {
        let now = fs::read_to_string(&file).unwrap();
        if now == frozen {
            Ok(())
        } else {
            Err(format!("it reads {now:?}"))
        }
    });
    fs::write(&file, format!("{thawed}\n")).unwrap();
    env.wait_status("healthy once thawed", |s| !s.contains("degraded"));
}

on_both_versions!(thaw_frozen_thaws_a_frozen_container => frozen_thawed(Driver::Systemd));

/// With `thaw_frozen = true` the daemon writes the thawed value (v2 `0`, v1
/// `THAWED`) to a container frozen longer than `frozen_threshold`, and logs it.
fn frozen_thawed(version: Version, driver: Driver) {
    let opts = Options {
        thaw_frozen: true,
        ..Options::default()
    };
    let mut env = Env::new(version, driver, opts);
    let ctr = env.burstable(1);
    let (file, frozen, thawed) = freezer(&env, &ctr);
    env.start();
    fs::write(&file, frozen).unwrap();
    env.wait_for(&format!("{thawed} in {}", file.display()), || {
        let now = fs::read_to_string(&file).unwrap();
        if now == thawed {
            Ok(())
        } else {
            Err(format!("it reads {now:?}"))
        }
    });
    env.wait_log(
        &format!("cgroup was frozen too long; thawed cgroup={ctr}"),
        1,
    );
    env.wait_status("healthy", |s| !s.contains("degraded"));
}

// ---------------------------------------------------------------------------
// 8. WATCHDOG=1
// ---------------------------------------------------------------------------

/// How many `WATCHDOG=1` arrive in `long`, starting now.
fn pings_during(env: &Env, long: Duration) -> usize {
    let before = env.d().pings().len();
    std::thread::sleep(long);
    env.d().pings().len() - before
}

/// Under `WATCHDOG_USEC=200000` (a ping due every 100 ms) the pings come
/// regularly, and go on while a path hangs; after SIGUSR2 with
/// `PINCTL_TEST_WEDGE=1` the event loop is wedged and they stop, though the
/// process lives. SIGKILL then leaves nothing running.
#[test]
fn watchdog_pings_go_on_while_a_path_hangs_and_stop_when_the_loop_wedges() {
    let opts = Options {
        read_timeout: "400ms",
        ..Options::default()
    };
    let mut env = Env::new(Version::V2, Driver::Systemd, opts);
    let pod = quiet_pod(&env);
    env.spawn(&Launch {
        watchdog_usec: Some(200_000),
        env: vec![("PINCTL_TEST_WEDGE".into(), "1".into())],
        ..Launch::default()
    });
    env.wait_ready();
    // 15 are due in 1.5 s; a busy machine may delay a few.
    let n = pings_during(&env, Duration::from_millis(1500));
    if n < 5 {
        env.fail(&format!("{n} WATCHDOG=1 in 1.5 s, expected about 15"));
    }
    // systemd kills at two periods without a ping: the pings of a quiet
    // loop are at most a period apart (they were two periods apart half
    // the time, a tick a hair early skipping its ping: gaps of 199-200
    // ms). A busy machine may stretch a few.
    let pings = env.d().pings();
    let gaps: Vec<u128> = pings[pings.len().saturating_sub(n)..]
        .windows(2)
        .map(|w| (w[1] - w[0]).as_millis())
        .collect();
    if gaps.iter().filter(|&&g| g >= 150).count() * 4 > gaps.len() {
        env.fail(&format!(
            "WATCHDOG=1 gaps {gaps:?} ms reach systemd's 200 ms limit"
        ));
    }

    let _hang = env.hang(&pod, "cpuset.cpus");
    env.d().signal(Signal::SIGHUP);
    env.wait_status("saying 1 hung path", |s| {
        s.ends_with("degraded: 1 hung path")
    });
    let n = pings_during(&env, Duration::from_millis(1500));
    if n < 5 {
        env.fail(&format!(
            "{n} WATCHDOG=1 in 1.5 s while a path hangs, expected about 15"
        ));
    }

    env.d().signal(Signal::SIGUSR2);
    env.wait_log("test hook: SIGUSR2 wedges the event loop", 1);
    // A ping already on its way may still arrive.
    std::thread::sleep(Duration::from_millis(300));
    let n = pings_during(&env, Duration::from_millis(1200));
    if n != 0 {
        env.fail(&format!("{n} WATCHDOG=1 from a wedged event loop"));
    }
    // The loop's own stall report names the event it is stuck in, after
    // half a ping period without a sign of life, before systemd's watchdog
    // would act (two periods after the last ping).
    env.wait_log(STALLED, 1);
    let mut d = env.daemon.take().unwrap();
    if let Some(status) = d.exited() {
        env.daemon = Some(d);
        env.fail(&format!(
            "the wedged daemon exited ({status}) instead of hanging"
        ));
    }
    let pid = d.pid();
    let status = d.kill();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGKILL),
        "{status}"
    );
    drop(d);
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "pid {pid} is still there"
    );
    let config = env.config.display().to_string();
    let left: Vec<String> = fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter_map(|e| {
            let cmdline = fs::read(e.path().join("cmdline")).ok()?;
            String::from_utf8_lossy(&cmdline)
                .contains(&config)
                .then(|| e.file_name().to_string_lossy().into_owned())
        })
        .collect();
    assert!(
        left.is_empty(),
        "processes with our config still run: {left:?}"
    );
}

// ---------------------------------------------------------------------------
// 9. The repair itself, on a kernel-like filesystem
// ---------------------------------------------------------------------------

/// `RealFs` on a tempdir, plus what the kernel does that a plain directory
/// does not: `mkdir` of a cgroup makes its control files (v1 cpuset: empty
/// `cpuset.cpus` and `cpuset.mems`; v2: `cgroup.controllers`, the controllers
/// its parent enables, and an empty `cgroup.subtree_control`), and a write to
/// v2 `cgroup.subtree_control` takes `+name` and `-name` and refuses
/// (`EINVAL`) a controller the cgroup does not have. Every `mkdir` and write
/// is recorded, in order.
struct KernelFs {
    v2: bool,
    ops: Mutex<Vec<String>>,
}

impl KernelFs {
    fn record(&self, op: String) {
        self.ops.lock().unwrap().push(op);
    }
}

impl Fs for KernelFs {
    fn read(&self, path: &Path) -> io::Result<String> {
        RealFs.read(path)
    }

    fn write(&self, path: &Path, data: &str) -> io::Result<()> {
        self.record(format!("write {data:?} {}", path.display()));
        if !(self.v2 && path.ends_with("cgroup.subtree_control")) {
            return RealFs.write(path, data);
        }
        let dir = path.parent().unwrap();
        let have = RealFs.read(&dir.join("cgroup.controllers"))?;
        let mut on: Vec<String> = RealFs
            .read(path)?
            .split_whitespace()
            .map(str::to_string)
            .collect();
        for word in data.split_whitespace() {
            let (add, name) = match word.split_at(1) {
                ("+", n) => (true, n),
                ("-", n) => (false, n),
                _ => return Err(io::Error::from_raw_os_error(libc::EINVAL)),
            };
            if !have.split_whitespace().any(|c| c == name) {
                return Err(io::Error::from_raw_os_error(libc::EINVAL));
            }
            on.retain(|c| c != name);
            if add {
                on.push(name.to_string());
            }
        }
        // The kernel lists them in its own order: that of cgroup.controllers.
        let listed: Vec<&str> = have
            .split_whitespace()
            .filter(|c| on.iter().any(|o| o == c))
            .collect();
        RealFs.write(path, &format!("{}\n", listed.join(" ")))
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<Entry>> {
        RealFs.read_dir(path)
    }

    fn get_xattr(&self, path: &Path, name: &str) -> io::Result<Option<Vec<u8>>> {
        RealFs.get_xattr(path, name)
    }

    fn set_xattr(&self, path: &Path, name: &str, value: &[u8]) -> io::Result<()> {
        RealFs.set_xattr(path, name, value)
    }

    fn mkdir(&self, path: &Path) -> io::Result<()> {
        self.record(format!("mkdir {}", path.display()));
        RealFs.mkdir(path)?;
        if self.v2 {
            let parent = RealFs.read(&path.parent().unwrap().join("cgroup.subtree_control"))?;
            fs::write(path.join("cgroup.controllers"), parent)?;
            fs::write(path.join("cgroup.subtree_control"), "")?;
        } else {
            fs::write(path.join("cpuset.cpus"), "")?;
            fs::write(path.join("cpuset.mems"), "")?;
        }
        Ok(())
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        RealFs.exists(path)
    }
}

/// v1 cpuset: a kubepods root missing with its QoS slice. `repair` makes both,
/// parents first, and gives each its parent's `cpuset.mems` and then
/// `cpuset.cpus` before making the next, so a task can join each at once.
#[test]
fn repair_on_a_kernel_like_v1_cpuset_copies_mems_then_cpus_from_the_parent() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("cpuset");
    fs::create_dir(&base).unwrap();
    fs::write(base.join("cpuset.cpus"), "0-7\n").unwrap();
    fs::write(base.join("cpuset.mems"), "0-1\n").unwrap();
    let fs_ = KernelFs {
        v2: false,
        ops: Mutex::new(Vec::new()),
    };
    let mount = Mount {
        dir: base.clone(),
        kind: MountKind::V1Cpuset,
    };
    let repaired = watchdog::repair(&fs_, &mount, "kubepods/besteffort").unwrap();
    let (a, b) = (base.join("kubepods"), base.join("kubepods/besteffort"));
    assert_eq!(repaired.created, [a.clone(), b.clone()]);
    for dir in [&a, &b] {
        assert_eq!(fs::read_to_string(dir.join("cpuset.cpus")).unwrap(), "0-7");
        assert_eq!(fs::read_to_string(dir.join("cpuset.mems")).unwrap(), "0-1");
    }
    let ops = fs_.ops.lock().unwrap().clone();
    let want = [
        format!("mkdir {}", a.display()),
        format!("write \"0-1\" {}/cpuset.mems", a.display()),
        format!("write \"0-7\" {}/cpuset.cpus", a.display()),
        format!("mkdir {}", b.display()),
        format!("write \"0-1\" {}/cpuset.mems", b.display()),
        format!("write \"0-7\" {}/cpuset.cpus", b.display()),
    ];
    assert_eq!(ops, want);
    // Present: nothing to do.
    let again = watchdog::repair(&fs_, &mount, "kubepods/besteffort").unwrap();
    assert!(again.created.is_empty());
    assert_eq!(fs_.ops.lock().unwrap().len(), want.len());
}

/// v2: a kubepods root missing with its QoS slice, under a root that has
/// `hugetlb` and `rdma` but enables only `cpu` and `memory`. `repair` enables
/// in each parent, before the `mkdir` below it, the controllers of its list the
/// parent has (never `rdma`), and in the new slice too, for the pods to come.
#[test]
fn repair_on_a_kernel_like_v2_tree_enables_the_parents_controllers() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    fs::write(
        root.join("cgroup.controllers"),
        "cpuset cpu io memory hugetlb pids rdma\n",
    )
    .unwrap();
    fs::write(root.join("cgroup.subtree_control"), "cpu memory\n").unwrap();
    let fs_ = KernelFs {
        v2: true,
        ops: Mutex::new(Vec::new()),
    };
    let mount = Mount {
        dir: root.clone(),
        kind: MountKind::V2,
    };
    let rel = "kubepods.slice/kubepods-besteffort.slice";
    let repaired = watchdog::repair(&fs_, &mount, rel).unwrap();
    let (a, b) = (root.join("kubepods.slice"), root.join(rel));
    assert_eq!(repaired.created, [a.clone(), b.clone()]);
    let all = "cpuset cpu io memory hugetlb pids\n";
    for dir in [&root, &a, &b] {
        assert_eq!(
            fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap(),
            all,
            "{}",
            dir.display()
        );
    }
    let ops = fs_.ops.lock().unwrap().clone();
    assert_eq!(
        ops,
        [
            format!(
                "write \"+cpuset +io +hugetlb +pids\" {}/cgroup.subtree_control",
                root.display()
            ),
            format!("mkdir {}", a.display()),
            format!(
                "write \"+cpuset +cpu +io +memory +hugetlb +pids\" {}/cgroup.subtree_control",
                a.display()
            ),
            format!("mkdir {}", b.display()),
            format!(
                "write \"+cpuset +cpu +io +memory +hugetlb +pids\" {}/cgroup.subtree_control",
                b.display()
            ),
        ]
    );
}

/// `WATCHDOG_USEC=1` (a period no event loop can serve) once made the daemon
/// panic at start-up on a zero-period timer. It starts, says why it cannot
/// honour the period, and pings at the floor of 1 ms.
#[test]
fn a_watchdog_period_too_short_to_serve_is_logged_not_a_panic() {
    let mut env = Env::new(Version::V2, Driver::Systemd, Options::default());
    env.spawn(&Launch {
        watchdog_usec: Some(1),
        ..Launch::default()
    });
    env.wait_ready();
    env.wait_log("WATCHDOG_USEC is shorter than the 2 ms", 1);
    let n = pings_during(&env, Duration::from_millis(300));
    if n < 10 {
        env.fail(&format!("{n} WATCHDOG=1 in 300 ms, expected one per ms"));
    }
    if let Some(status) = env.daemon.as_mut().unwrap().exited() {
        env.fail(&format!("the daemon exited: {status}"));
    }
}
