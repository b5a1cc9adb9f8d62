//! `pinctld` on the kernel's own cgroupfs (issue #14): the figures that count.
//!
//! A fake tree in tmpfs makes a cgroup write free; on a real kernel a v1
//! `cpuset.cpus` write rebuilds the scheduler domains over every cpuset.
//! This benchmark runs the real daemon on this machine's cgroup hierarchy
//! (v1: `cpuset` and `cpu` mounted under the root; v2: the unified tree),
//! below a top cgroup of its own, `pinctl-bench-<pid>`, which it removes at
//! the end (and on the next run, if a run was killed).
//!
//! Run as root: `sudo cargo bench --bench real_cgroup` (about 5 minutes on 2
//! CPUs). Not root, or no cpuset hierarchy: it says why and exits 0. Without
//! `--bench` (as `cargo test --benches` runs it) it does one quick pass at 10
//! containers.
//!
//! For each size N (10, 1,000, 5,000 live containers by default):
//! - N Burstable pods with one container each, cgroupfs driver naming
//!   (`kubepods/burstable/pod<uid>/<64-hex id>`), made as runc makes them: on
//!   v1 a directory in the cpuset and the cpu hierarchy, the cpuset one
//!   given its parent's `cpuset.cpus` and `cpuset.mems` (runc copies them); on
//!   v2 one directory, `+cpuset +cpu` enabled in its parent.
//! - The daemon reserves every online CPU but the highest, which it hands out
//!   exclusively: the shared pool is the rest.
//! - Settled rounds: a Guaranteed pod with one container
//!   (`kubepods/pod<uid>/<id>`, CFS quota = period: 1 CPU) is made; *pin* is
//!   the time from the container's cpuset `mkdir` to its `cpuset.cpus`
//!   reading the exclusive CPU; *narrowed* from the same `mkdir` until every
//!   Burstable container's effective set (`cpuset.effective_cpus`,
//!   `cpuset.cpus.effective`) has lost that CPU; then the pod is removed, and
//!   *released* runs from its `rmdir` until every one has it back.
//! - Where a pin's time goes: *steps* from that `mkdir` until the runtime's
//!   last write (the quota), *reaction* from there until pinned; and the
//!   kernel's *floor*, the same pod and container made in a cgroup the
//!   daemon does not manage (`<top>/floor`) with the pin's one write made by
//!   the benchmark itself as soon as the quota is in, each round after the
//!   same wait for an idle daemon as a settled round (the kernel's cpuset
//!   writes are slower on caches gone cold in an idle spell).
//! - Churn: the same rounds back to back, the next pod made as soon as the
//!   last one is pinned and removed, without waiting for the shared pool:
//!   *pin under churn* is what a new pin costs while the daemon is still busy
//!   with the last change. It is split as a settled pin is, against the
//!   churn's floor: the same rounds back to back in `<top>/floor`, the pin's
//!   write the benchmark's, the daemon idle beside them.
//! - A warm restart with debug logging, then SIGHUPs: each full reconcile's
//!   time is the daemon's own `reconcile done ... elapsed_us=` line. Its
//!   floor: the daemon stopped, every cgroup directory it scans read by the
//!   benchmark with the daemon's own read of a cgroup it knows
//!   (`cgroup::observe` of what `intent::reads` names) on as many threads,
//!   and only opened and closed.
//! - Memory: `VmRSS`/`VmHWM` after start-up and at the end of the rounds.
//! - Idle: a `sleep` started in every container, the daemon started again
//!   with the shipped intervals (every cgroup read once a minute, a sixth
//!   every 10 s; a watchdog round every 10 s), nothing changing for
//!   `PINCTL_BENCH_IDLE` seconds (60; none in the quick pass): the CPU its
//!   threads used (`schedstat`), as a share of one core.
//!
//! The waits read the effective sets: after each inotify event on a
//! container's `cpuset.cpus` (a write raises `IN_MODIFY`) that container's,
//! and every 2 ms without events all that are still waiting (v2 narrows a
//! child through its parent, with no event on the child).
//!
//! Knobs (environment): `PINCTL_BENCH_SIZES` (comma-separated container
//! counts), `PINCTL_BENCH_ROUNDS` (settled rounds per size, default 30),
//! `PINCTL_BENCH_CHURN` (churn rounds, default 200), `PINCTL_BENCH_BUDGET`
//! (seconds per phase, default 30; at least 5 rounds regardless),
//! `PINCTL_BENCH_HUPS` (full reconciles, default 5), `PINCTL_BENCH_CGROUP`
//! (the cgroup mount, default `/sys/fs/cgroup`), `PINCTL_BENCH_PERF=<dir>`
//! (`perf record` each phase), `PINCTL_BENCH_PINCTLD` (the daemon to run;
//! the VM test bed's `bench` scenario runs this benchmark in a guest).
//!
//! A full run also appends its figures to `target/bench/real_cgroup.csv`
//! (`support::record`): `PINCTL_BENCH_CSV_DIR` names another directory,
//! `PINCTL_BENCH_MACHINE` the machine.

mod support;

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};
use nix::sys::signal::Signal;
use support::cgroupfs::{Hier, Version, write};
use support::{Daemon, Figures, Knobs, Perf, STEP_TIMEOUT, Stats, mb, mix, ms, poll_in, record};

/// The targets at 1,000 live containers (issue #14).
const TARGET_AT: usize = 1_000;
const TARGET_PIN_P50: Duration = Duration::from_millis(1);
const TARGET_PIN_P99: Duration = Duration::from_millis(10);
const TARGET_NARROWED_V1: Duration = Duration::from_millis(150);
const TARGET_NARROWED_V2: Duration = Duration::from_millis(100);

struct Options {
    full: bool,
    sizes: Vec<usize>,
    rounds: usize,
    churn: usize,
    budget: Duration,
    hups: usize,
    /// Seconds of the idle phase (0: none).
    idle: u64,
    mount: PathBuf,
    perf: Option<PathBuf>,
}

impl Options {
    /// Whether a phase goes on after `done` of its `limit` rounds begun at
    /// `started`: at least 5 rounds, then only within the budget.
    fn phase_ok(&self, done: usize, limit: usize, started: Instant) -> bool {
        done < limit && (done < 5 || started.elapsed() < self.budget)
    }

    fn from_env() -> Result<Self> {
        let k = Knobs::new();
        let full = k.full;
        let number = |name: &str, default: usize| k.number(name, default);
        let var = |name: &str| k.var(name);
        let sizes = k.sizes(&[10, 1_000, 5_000])?;
        Ok(Options {
            full,
            sizes,
            rounds: number("PINCTL_BENCH_ROUNDS", if full { 30 } else { 5 })?.max(1),
            churn: number("PINCTL_BENCH_CHURN", if full { 200 } else { 5 })?.max(1),
            budget: Duration::from_secs(number("PINCTL_BENCH_BUDGET", 30)? as u64),
            hups: number("PINCTL_BENCH_HUPS", if full { 5 } else { 1 })?.max(1),
            idle: number("PINCTL_BENCH_IDLE", if full { 60 } else { 0 })? as u64,
            mount: var("PINCTL_BENCH_CGROUP").map_or("/sys/fs/cgroup".into(), PathBuf::from),
            perf: var("PINCTL_BENCH_PERF").map(PathBuf::from),
        })
    }
}

fn main() -> Result<()> {
    let run = record::Run::here();
    let opts = Options::from_env()?;
    let hier = match Hier::detect(&opts.mount) {
        Ok(h) => h,
        Err(why) => {
            println!("real cgroupfs benchmark: skipped: {why}");
            return Ok(());
        }
    };
    // Inside the VM test bed the daemon is not where cargo built it.
    let pinctld = std::env::var_os("PINCTL_BENCH_PINCTLD")
        .map_or_else(|| PathBuf::from(support::PINCTLD), PathBuf::from);
    ensure!(pinctld.is_file(), "{} is missing", pinctld.display());
    hier.remove_stale("pinctl-bench-");
    let online = read_list(Path::new("/sys/devices/system/cpu/online"))?;
    ensure!(
        online.len() >= 2,
        "needs at least 2 online CPUs (one reserved, one exclusive)"
    );
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    println!(
        "pinctld on REAL cgroupfs: {} ({}), kernel {}, {} online CPUs, {}",
        hier.version.name(),
        hier.cpuset.display(),
        kernel.trim(),
        online.len(),
        if opts.full {
            "full run"
        } else {
            "quick pass (cargo bench runs the full one)"
        }
    );
    let mut results = Vec::new();
    for &n in &opts.sizes {
        let r = run_size(&hier, &pinctld, &online, n, &opts)
            .with_context(|| format!("at {n} live containers"))?;
        eprintln!(
            "[{n}] pin p50 {} ms, under churn p50 {} ms, narrowed p50 {} ms",
            ms(r.pin.median),
            ms(r.churn.median),
            ms(r.narrowed.median)
        );
        results.push(r);
    }
    report(&hier, &results);
    let figures: Vec<Figures<'_>> = results
        .iter()
        .map(|r| Figures {
            hierarchy: hier.version.short(),
            live: r.n,
            pin: &r.pin,
            churn: Some(&r.churn),
            narrowed: &r.narrowed,
            released: &r.released,
            floor: Some(r.floor_steps.median + r.floor_write.median),
            reconcile: r.reconcile.as_ref().map(|s| s.median),
            cgroups: r.cgroups,
            rss_peak_kb: r.mem_start.1.max(r.mem_end.1),
        })
        .collect();
    support::record("real_cgroup", &run, opts.full, &figures)
}

/// A CPU list file, as a sorted list of CPUs.
fn read_list(path: &Path) -> Result<Vec<u32>> {
    let text =
        fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    parse_list(&text).with_context(|| format!("{} holds {text:?}", path.display()))
}

fn parse_list(text: &str) -> Result<Vec<u32>> {
    let mut out = Vec::new();
    for item in text.trim().split(',').filter(|s| !s.is_empty()) {
        let (a, b) = item.split_once('-').unwrap_or((item, item));
        let (a, b): (u32, u32) = (a.parse()?, b.parse()?);
        out.extend(a..=b);
    }
    Ok(out)
}

fn list(cpus: &[u32]) -> String {
    let mut out = String::new();
    for (i, c) in cpus.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{c}");
    }
    out
}

// ---------------------------------------------------------------------------
// One size's tree and daemon

/// A pod UID and a container id, from a number.
fn names(i: u64) -> (String, String) {
    let a = mix(i);
    let b = mix(a ^ 0x5bd1_e995);
    let uid = format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xffff,
        b >> 48,
        b & 0xffff_ffff_ffff
    );
    let id = (0..4).map(|k| format!("{:016x}", mix(b ^ k))).collect();
    (uid, id)
}

/// Processes in the containers, killed and reaped on drop (before their
/// cgroups can be removed).
struct Sleepers(Vec<std::process::Child>);

impl Drop for Sleepers {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
        }
        for child in &mut self.0 {
            let _ = child.wait();
        }
    }
}

/// The top cgroup of one size, removed on drop (the daemon first).
struct Rig<'a> {
    hier: &'a Hier,
    top: String,
    tmp: tempfile::TempDir,
    /// The effective-set file of every Burstable container.
    shared: Vec<PathBuf>,
    /// Their `cpuset.cpus`, whose writes wake the waits.
    shared_cpus: Vec<PathBuf>,
    exclusive: u32,
    reserved: Vec<u32>,
    next: u64,
    daemon: Option<Daemon>,
    /// The daemon's `reconcile_interval` (`None`: the shipped default).
    reconcile_every: Option<&'static str>,
}

impl Drop for Rig<'_> {
    fn drop(&mut self) {
        drop(self.daemon.take());
        self.hier.remove_everywhere(&self.top);
        if std::env::var_os("PINCTL_BENCH_KEEP").is_some() {
            let kept = std::env::temp_dir().join(format!("{}-kept", self.top));
            let _ = fs::rename(self.tmp.path(), &kept);
            eprintln!("kept the daemon's files in {}", kept.display());
        }
    }
}

impl<'a> Rig<'a> {
    fn build(hier: &'a Hier, online: &[u32], n: usize) -> Result<Rig<'a>> {
        let top = format!("pinctl-bench-{}", std::process::id());
        let (&exclusive, reserved) = online.split_last().expect("two CPUs or more");
        let mut rig = Rig {
            hier,
            top: top.clone(),
            tmp: tempfile::Builder::new()
                .prefix("pinctl-real-bench")
                .tempdir()?,
            shared: Vec::with_capacity(n),
            shared_cpus: Vec::with_capacity(n),
            exclusive,
            reserved: reserved.to_vec(),
            next: 1 << 40,
            daemon: None,
            reconcile_every: Some("1h"),
        };
        hier.remove_everywhere(&top);
        hier.make_top(&top, &list(online))?;
        for rel in ["kubepods", "kubepods/burstable", "kubepods/besteffort"] {
            hier.make(&format!("{top}/{rel}"), true)?;
        }
        hier.make(&format!("{top}/system.slice"), false)?;
        for i in 0..n {
            let (uid, id) = names(i as u64);
            let pod = format!("{top}/kubepods/burstable/pod{uid}");
            hier.make(&pod, true)?;
            let c = format!("{pod}/{id}");
            hier.make(&c, false)?;
            rig.shared.push(hier.cpuset.join(&c).join(hier.effective()));
            rig.shared_cpus
                .push(hier.cpuset.join(&c).join("cpuset.cpus"));
        }
        fs::create_dir(rig.tmp.path().join("bundles"))?;
        Ok(rig)
    }

    /// Starts a `sleep` in every Burstable container (its cpuset's
    /// `cgroup.procs`), ended when the result is dropped.
    fn populate(&self) -> Result<Sleepers> {
        let mut sleepers = Sleepers(Vec::with_capacity(self.shared_cpus.len()));
        for cpus in &self.shared_cpus {
            let child = std::process::Command::new("sleep")
                .arg("100000")
                .stdin(std::process::Stdio::null())
                .spawn()
                .context("cannot start sleep")?;
            let pid = child.id();
            sleepers.0.push(child);
            let procs = cpus.with_file_name("cgroup.procs");
            write(&procs, &pid.to_string())?;
        }
        Ok(sleepers)
    }

    fn config(&self, log_level: &str) -> String {
        let p = |name: &str| self.tmp.path().join(name).display().to_string();
        format!(
            r#"# Written by benches/real_cgroup.rs.
cgroup_root = "{mount}"
sysfs_root = "/sys"
proc_root = "/proc"
state_file = "{state}"
socket = "{socket}"
reserved_cpus = "{reserved}"
{reconcile_every}log_level = "{log_level}"
managed = ["{top}/kubepods"]
shared_cgroups = ["{top}/system.slice"]
# Only the benchmark's own (empty) bundle directory: never the host's containers.
bundle_dirs = ["{bundles}"]
"#,
            mount = self.hier.mount.display(),
            reconcile_every = self
                .reconcile_every
                .map_or(String::new(), |d| format!("reconcile_interval = \"{d}\"\n")),
            state = p("state/state.json"),
            socket = p("pinctl.sock"),
            reserved = list(&self.reserved),
            top = self.top,
            bundles = p("bundles"),
        )
    }

    fn start(&mut self, pinctld: &Path, run: &str, debug: bool) -> Result<(Duration, &mut Daemon)> {
        let config = self.config(if debug { "debug" } else { "info" });
        let mut d = Daemon::spawn(pinctld, self.tmp.path(), &config, run, debug)?;
        let ready = d.wait_notify("READY=1", |m| m.lines().any(|l| l == "READY=1"))?;
        let took = ready - d.spawned;
        d.wait_idle()?;
        d.pump_logs();
        Ok((took, self.daemon.insert(d)))
    }

    fn daemon(&mut self) -> &mut Daemon {
        self.daemon.as_mut().expect("the daemon runs")
    }

    /// Churn rounds below `parent`: a Guaranteed pod made as soon as the
    /// last one is pinned and removed; each pin's time from its container's
    /// `mkdir`, split as a settled round's. With `own_write` (the churn's
    /// floor, below the unmanaged `floor`) the benchmark makes the pin's
    /// write itself the moment the quota is in.
    fn churn(
        &mut self,
        pinned: &mut Pinned,
        opts: &Options,
        parent: &str,
        own_write: bool,
    ) -> Result<Churn> {
        let mut churn = Churn::default();
        let started = Instant::now();
        while opts.phase_ok(churn.pin.len(), opts.churn, started) {
            let made = self.guaranteed(parent, pinned)?;
            if own_write {
                write(
                    &self.hier.cpuset.join(&made.container).join("cpuset.cpus"),
                    &self.exclusive.to_string(),
                )?;
            }
            let Some(at) = pinned.wait(self.exclusive)? else {
                return Err(self
                    .daemon()
                    .fail("the Guaranteed container was not pinned under churn"));
            };
            churn.pin.push(at - made.mkdir);
            churn.steps.push(made.quota - made.mkdir);
            churn.reaction.push(at - made.quota);
            self.hier.remove(&made.pod);
        }
        Ok(churn)
    }

    /// A full reconcile's floor: every cgroup directory the daemon scans
    /// (the managed and the shared subtrees, in the cpuset hierarchy) read by
    /// the benchmark itself with the daemon's own call (`RealFs::scan_dir`:
    /// the directory, its xattr and owner, `cpuset.cpus` and on v1
    /// `cpuset.mems`, its listing when it has subdirectories) on as many
    /// threads as the daemon has for I/O, `rounds` times, the daemon stopped.
    /// What a reconcile costs above it is the daemon's (watches, planning,
    /// the v1 cpu tree).
    fn read_floor(&self, rounds: usize) -> Result<ReadFloor> {
        use pinctl::cgroup::layout::classify;
        use pinctl::cgroup::{Hierarchy, Reads, Rel, observe};
        use std::sync::atomic::{AtomicUsize, Ordering};
        let mut dirs: Vec<PathBuf> = Vec::new();
        let mut todo: Vec<PathBuf> = ["kubepods", "system.slice"]
            .iter()
            .map(|rel| self.hier.cpuset.join(&self.top).join(rel))
            .collect();
        while let Some(dir) = todo.pop() {
            for entry in fs::read_dir(&dir)? {
                let entry = entry?;
                if entry.file_type()?.is_dir() {
                    todo.push(entry.path());
                }
            }
            dirs.push(dir);
        }
        // The daemon's own read of a cgroup it knows, as a reconcile makes
        // it (`intent::reads`: not the memory nodes it knows).
        let h = Hierarchy {
            version: match self.hier.version {
                Version::V1 => pinctl::cgroup::Version::V1,
                Version::V2 => pinctl::cgroup::Version::V2,
            },
            root: self.hier.mount.clone(),
            cpuset: self.hier.cpuset.clone(),
            cpu: Some(self.hier.cpu.clone()),
            hybrid: false,
        };
        let cfg = pinctl::config::parse("", Path::new("pinctld.toml"))?;
        let items: Vec<(&Path, Rel, Reads)> = dirs
            .iter()
            .map(|dir| {
                let rel: Rel = dir
                    .strip_prefix(&h.cpuset)
                    .unwrap_or(dir)
                    .to_string_lossy()
                    .as_ref()
                    .into();
                let known = pinctl::intent::Known {
                    mems: true,
                    children: None,
                };
                let reads = pinctl::intent::reads(&h, &cfg, &classify(&rel), known);
                (dir.as_path(), rel, reads)
            })
            .collect();
        let threads = pinctl::io::IoConfig::default().threads;
        // As the daemon's scan: batches of 128, taken in turn by the threads.
        let batches: Vec<&[(&Path, Rel, Reads)]> = items.chunks(128).collect();
        let time = |read: &(dyn Fn(&(&Path, Rel, Reads)) + Sync)| -> Result<Stats> {
            let mut took = Vec::with_capacity(rounds);
            for _ in 0..rounds {
                let next = AtomicUsize::new(0);
                let started = Instant::now();
                std::thread::scope(|s| {
                    for _ in 0..threads {
                        s.spawn(|| {
                            while let Some(batch) =
                                batches.get(next.fetch_add(1, Ordering::Relaxed))
                            {
                                batch.iter().for_each(read);
                            }
                        });
                    }
                });
                took.push(started.elapsed());
                // As between SIGHUPs: the daemon idles between reconciles.
                std::thread::sleep(Duration::from_millis(100));
            }
            Stats::of(took).context("no floor rounds")
        };
        let read = time(&|(_, rel, reads)| {
            let _ = observe(&pinctl::io::RealFs, &h, rel, *reads);
        })?;
        // The part of it no reading can avoid: opening each directory.
        let open = time(&|(dir, ..)| {
            let _ = fs::File::open(dir);
        })?;
        Ok(ReadFloor {
            read,
            open,
            dirs: dirs.len(),
        })
    }

    /// Makes a Guaranteed pod with one container below `parent` (a path
    /// under the top), as runc does: the cpuset directory first, then the
    /// CPU quota. Says when the container's cpuset `mkdir` started and when
    /// its quota was in (from then on only the daemon can make the pin).
    fn guaranteed(&mut self, parent: &str, watch: &mut Pinned) -> Result<Made> {
        self.next += 1;
        let (uid, id) = names(self.next);
        let pod = format!("{}/{parent}/pod{uid}", self.top);
        self.hier.make(&pod, true)?;
        self.hier.one_cpu_quota(&pod)?;
        let container = format!("{pod}/{id}");
        let mkdir = Instant::now();
        self.hier.make(&container, false)?;
        watch.arm(&self.hier.cpuset.join(&container).join("cpuset.cpus"))?;
        self.hier.one_cpu_quota(&container)?;
        Ok(Made {
            pod,
            container,
            mkdir,
            quota: Instant::now(),
        })
    }
}

/// Churn rounds' times: mkdir to pinned, and its two parts (mkdir to
/// quota written, quota written to pinned).
#[derive(Default)]
struct Churn {
    pin: Vec<Duration>,
    steps: Vec<Duration>,
    reaction: Vec<Duration>,
}

/// A Guaranteed pod the benchmark made, and when.
struct Made {
    pod: String,
    container: String,
    /// The container's cpuset `mkdir` started.
    mkdir: Instant,
    /// The runtime's last step, its CPU quota, was written.
    quota: Instant,
}

/// Waits for one container's `cpuset.cpus` to read a given CPU.
struct Pinned {
    ino: Inotify,
    wd: Option<WatchDescriptor>,
    file: PathBuf,
    buf: Vec<u8>,
}

impl Pinned {
    fn new() -> Result<Self> {
        Ok(Pinned {
            ino: Inotify::init()?,
            wd: None,
            file: PathBuf::new(),
            buf: vec![0; 4096],
        })
    }

    fn arm(&mut self, file: &Path) -> Result<()> {
        if let Some(wd) = self.wd.take() {
            let _ = self.ino.watches().remove(wd);
        }
        self.wd = Some(self.ino.watches().add(file, WatchMask::MODIFY)?);
        self.file = file.into();
        Ok(())
    }

    /// When the file first read `cpu`, checked now and at each write.
    fn wait(&mut self, cpu: u32) -> Result<Option<Instant>> {
        let want = cpu.to_string();
        let deadline = Instant::now() + STEP_TIMEOUT;
        loop {
            if fs::read_to_string(&self.file).is_ok_and(|t| t.trim() == want) {
                return Ok(Some(Instant::now()));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            if poll_in(&self.ino, left.min(Duration::from_millis(5)))? {
                let _ = self.ino.read_events(&mut self.buf)?.count();
            }
        }
    }
}

/// Waits until every shared container's effective set has, or lacks, a CPU.
struct Pool {
    ino: Inotify,
    by_wd: HashMap<WatchDescriptor, usize>,
    files: Vec<PathBuf>,
    buf: Vec<u8>,
}

impl Pool {
    fn new(effective: &[PathBuf], cpus: &[PathBuf]) -> Result<Self> {
        let ino = Inotify::init()?;
        let mut by_wd = HashMap::new();
        for (i, f) in cpus.iter().enumerate() {
            by_wd.insert(ino.watches().add(f, WatchMask::MODIFY)?, i);
        }
        Ok(Pool {
            ino,
            by_wd,
            files: effective.to_vec(),
            buf: vec![0; 64 * 1024],
        })
    }

    fn drain(&mut self) {
        while self
            .ino
            .read_events(&mut self.buf)
            .is_ok_and(|e| e.count() > 0)
        {}
    }

    fn holds(&self, i: usize, cpu: u32) -> Option<bool> {
        let text = fs::read_to_string(&self.files[i]).ok()?;
        Some(parse_list(&text).ok()?.contains(&cpu))
    }

    /// When every file first agreed that it `has` `cpu` (or not).
    fn wait(&mut self, cpu: u32, has: bool) -> Result<Option<Instant>> {
        let mut waiting: BTreeSet<usize> = (0..self.files.len()).collect();
        let deadline = Instant::now() + STEP_TIMEOUT;
        let mut check: Vec<usize> = (0..self.files.len()).collect();
        loop {
            for i in check.drain(..) {
                if waiting.contains(&i) && self.holds(i, cpu) == Some(has) {
                    waiting.remove(&i);
                }
            }
            if waiting.is_empty() {
                return Ok(Some(Instant::now()));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            if poll_in(&self.ino, left.min(Duration::from_millis(2)))? {
                match self.ino.read_events(&mut self.buf) {
                    Ok(events) => check.extend(
                        events
                            .filter(|e| e.mask.contains(EventMask::MODIFY))
                            .filter_map(|e| self.by_wd.get(&e.wd).copied()),
                    ),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e).context("reading inotify events"),
                }
            } else {
                // Nothing written: on v2 the containers follow their QoS
                // slice. Read them in order up to the first one not there
                // yet (a pass over every file would cost more than the
                // daemon, under emulation).
                let there: Vec<usize> = waiting
                    .iter()
                    .copied()
                    .take_while(|&i| self.holds(i, cpu) == Some(has))
                    .collect();
                for i in there {
                    waiting.remove(&i);
                }
            }
        }
    }
}

/// A full reconcile's floor ([`Rig::read_floor`]).
struct ReadFloor {
    /// Every directory read with the daemon's own call.
    read: Stats,
    /// Every directory only opened and closed.
    open: Stats,
    dirs: usize,
}

/// Where a full reconcile's time went, by thread (the median reconcile's):
/// on a CPU, and runnable but waiting for one (`schedstat`), for the event
/// loop and the I/O threads together.
#[derive(Clone, Copy, Default)]
struct ThreadTimes {
    loop_run: Duration,
    loop_wait: Duration,
    io_run: Duration,
    io_wait: Duration,
}

impl ThreadTimes {
    fn between(
        before: &std::collections::BTreeMap<String, (u64, u64)>,
        after: &std::collections::BTreeMap<String, (u64, u64)>,
    ) -> Self {
        let delta = |name: &str| {
            let (r0, w0) = before.get(name).copied().unwrap_or_default();
            let (r1, w1) = after.get(name).copied().unwrap_or_default();
            (
                Duration::from_nanos(r1.saturating_sub(r0)),
                Duration::from_nanos(w1.saturating_sub(w0)),
            )
        };
        let (loop_run, loop_wait) = delta("pinctld");
        let (io_run, io_wait) = delta("pinctl-io");
        ThreadTimes {
            loop_run,
            loop_wait,
            io_run,
            io_wait,
        }
    }
}

struct SizeResult {
    n: usize,
    build: Duration,
    ready: Duration,
    pin: Stats,
    narrowed: Stats,
    released: Stats,
    churn: Stats,
    /// Of a settled pin: the runtime's steps (mkdir to quota written) and
    /// the daemon's reaction (quota written to pinned).
    steps: Stats,
    reaction: Stats,
    /// The kernel's floor: the same steps, and the pin's one write made at
    /// once by the benchmark (quota written to pinned).
    floor_steps: Stats,
    floor_write: Stats,
    /// The same split of a pin under churn, and the churn's floor: the same
    /// rounds back to back in the unmanaged cgroup, the pin's write made by
    /// the benchmark.
    churn_steps: Stats,
    churn_reaction: Stats,
    churn_floor_steps: Stats,
    churn_floor_write: Stats,
    reconcile: Option<Stats>,
    /// The same directories read by the benchmark with the daemon's own calls.
    reconcile_floor: ReadFloor,
    /// The median reconcile's thread times.
    reconcile_threads: ThreadTimes,
    /// Pin under churn with a full reconcile every second, and how long
    /// those rounds took (about as many reconciles as seconds).
    churn_reconciling: Stats,
    reconciling_for: Duration,
    cgroups: u64,
    mem_start: (u64, u64),
    mem_end: (u64, u64),
    /// The share of one core the idle daemon used, with the shipped
    /// intervals, and its threads' times.
    idle: Option<(f64, ThreadTimes)>,
    warnings: Vec<String>,
}

fn run_size(
    hier: &Hier,
    pinctld: &Path,
    online: &[u32],
    n: usize,
    opts: &Options,
) -> Result<SizeResult> {
    let t = Instant::now();
    let mut rig = Rig::build(hier, online, n)?;
    let build = t.elapsed();
    eprintln!(
        "[{n}] {n} Burstable containers made in {:.1} s; starting pinctld",
        build.as_secs_f64()
    );
    let cpu = rig.exclusive;
    let (ready, d) = rig.start(
        pinctld,
        "a",
        std::env::var_os("PINCTL_BENCH_DEBUG").is_some(),
    )?;
    let mem_start = d.memory()?;
    let mut pinned = Pinned::new()?;
    let mut pool = Pool::new(&rig.shared, &rig.shared_cpus)?;

    // The kernel's floor: the same runtime steps in a cgroup the daemon
    // does not manage, and the pin's one write made by the benchmark itself
    // at once, the daemon idle beside it. What a pin costs above this is
    // the daemon's. Each round starts as a settled round does, after the
    // wait for an idle daemon: on real v1 the kernel's walk over every
    // cpuset runs on cold caches after an idle spell (a `cpuset.cpus` write
    // at 1,000 cpusets: 114 µs back to back, 200 µs after 20 ms idle, 360
    // µs after 50 ms on this machine), and a floor made back to back would
    // count that against the daemon.
    let (mut floor_steps, mut floor_write) = (Vec::new(), Vec::new());
    hier.make(&format!("{}/floor", rig.top), true)?;
    let started = Instant::now();
    while opts.phase_ok(floor_steps.len(), opts.rounds, started) {
        rig.daemon().wait_idle()?;
        let made = rig.guaranteed("floor", &mut pinned)?;
        write(
            &hier.cpuset.join(&made.container).join("cpuset.cpus"),
            &cpu.to_string(),
        )?;
        let Some(at) = pinned.wait(cpu)? else {
            return Err(rig
                .daemon()
                .fail("the benchmark's own pin did not read back"));
        };
        floor_steps.push(made.quota - made.mkdir);
        floor_write.push(at - made.quota);
        hier.remove(&made.pod);
    }

    // Settled rounds.
    let (mut pin, mut narrowed, mut released) = (Vec::new(), Vec::new(), Vec::new());
    let (mut steps, mut reaction) = (Vec::new(), Vec::new());
    let perf = Perf::start(opts.perf.as_deref(), rig.daemon(), &format!("n{n}-rounds"))?;
    let started = Instant::now();
    while opts.phase_ok(pin.len(), opts.rounds, started) {
        pool.drain();
        let Made {
            pod,
            mkdir: t0,
            quota,
            ..
        } = rig.guaranteed("kubepods", &mut pinned)?;
        let Some(at) = pinned.wait(cpu)? else {
            return Err(rig.daemon().fail("the Guaranteed container was not pinned"));
        };
        pin.push(at - t0);
        steps.push(quota - t0);
        reaction.push(at - quota);
        let Some(at) = pool.wait(cpu, false)? else {
            return Err(rig
                .daemon()
                .fail("the shared pool did not lose the pinned CPU"));
        };
        narrowed.push(at - t0);
        rig.daemon().wait_idle()?;
        pool.drain();
        let t1 = Instant::now();
        hier.remove(&pod);
        let Some(at) = pool.wait(cpu, true)? else {
            return Err(rig
                .daemon()
                .fail("the shared pool did not get the CPU back"));
        };
        released.push(at - t1);
        rig.daemon().wait_idle()?;
    }
    drop(perf);

    // Churn: back to back.
    let perf = Perf::start(opts.perf.as_deref(), rig.daemon(), &format!("n{n}-churn"))?;
    let churn = rig.churn(&mut pinned, opts, "kubepods", false)?;
    drop(perf);
    // The churn's floor, the daemon idle beside it.
    rig.daemon().wait_idle()?;
    let churn_floor = rig.churn(&mut pinned, opts, "floor", true)?;
    if pool.wait(cpu, true)?.is_none() {
        return Err(rig
            .daemon()
            .fail("the shared pool did not settle after the churn"));
    }
    let d = rig.daemon();
    d.wait_idle()?;
    let mem_end = d.memory()?;
    d.pump_logs();
    let mut warnings = std::mem::take(&mut d.warnings);
    d.stop()?;
    rig.daemon = None;

    // Full reconciles, with debug logging for the daemon's own timing.
    let (_, d) = rig.start(pinctld, "b", true)?;
    d.reconciles.clear();
    let perf = Perf::start(opts.perf.as_deref(), d, &format!("n{n}-reconcile"))?;
    let mut threads = Vec::new();
    for _ in 0..opts.hups {
        let before = d.sched()?;
        d.signal(Signal::SIGHUP)?;
        d.wait_reconcile()?;
        threads.push(ThreadTimes::between(&before, &d.sched()?));
        d.wait_idle()?;
    }
    drop(perf);
    let reconciles = std::mem::take(&mut d.reconciles);
    d.pump_logs();
    warnings.append(&mut d.warnings);
    d.stop()?;
    rig.daemon = None;
    let reconcile_floor = rig.read_floor(opts.hups)?;

    // Churn again, with a full reconcile every second (the shipped default
    // is every 10 s): what a pin that comes during one waits for.
    rig.reconcile_every = Some("1s");
    let (_, d) = rig.start(pinctld, "c", false)?;
    let perf = Perf::start(opts.perf.as_deref(), d, &format!("n{n}-churn-reconciling"))?;
    let started = Instant::now();
    let churn_reconciling = rig.churn(&mut pinned, opts, "kubepods", false)?.pin;
    let reconciling_for = started.elapsed();
    drop(perf);
    let d = rig.daemon();
    d.pump_logs();
    warnings.append(&mut d.warnings);
    d.stop()?;
    rig.daemon = None;
    rig.reconcile_every = Some("1h");

    // Idle, with the shipped intervals: what the daemon costs when nothing
    // happens.
    let idle = if opts.idle > 0 {
        // Live containers run something: the daemon's watchdog reads every
        // process's threads (stuck tasks).
        let sleepers = rig.populate()?;
        rig.reconcile_every = None;
        let (_, d) = rig.start(pinctld, "d", false)?;
        let perf = Perf::start(opts.perf.as_deref(), d, &format!("n{n}-idle"))?;
        let (t0, c0, s0) = (Instant::now(), d.cpu_ns(), d.sched()?);
        std::thread::sleep(Duration::from_secs(opts.idle));
        drop(perf);
        let used = Duration::from_nanos(d.cpu_ns().saturating_sub(c0));
        let threads = ThreadTimes::between(&s0, &d.sched()?);
        let share = used.as_secs_f64() / t0.elapsed().as_secs_f64();
        d.pump_logs();
        warnings.append(&mut d.warnings);
        d.stop()?;
        rig.daemon = None;
        rig.reconcile_every = Some("1h");
        drop(sleepers);
        Some((share, threads))
    } else {
        None
    };
    let reconcile = Stats::of(
        reconciles
            .iter()
            .map(|&(us, _)| Duration::from_micros(us))
            .collect(),
    );
    let mut by_time: Vec<(u64, ThreadTimes)> =
        reconciles.iter().map(|&(us, _)| us).zip(threads).collect();
    by_time.sort_by_key(|&(us, _)| us);
    let reconcile_threads = by_time
        .get(by_time.len() / 2)
        .map_or_else(ThreadTimes::default, |&(_, t)| t);
    let some = |v: Vec<Duration>| Stats::of(v).context("no samples");
    Ok(SizeResult {
        n,
        build,
        ready,
        pin: some(pin)?,
        narrowed: some(narrowed)?,
        released: some(released)?,
        churn: some(churn.pin)?,
        churn_steps: some(churn.steps)?,
        churn_reaction: some(churn.reaction)?,
        churn_floor_steps: some(churn_floor.steps)?,
        churn_floor_write: some(churn_floor.reaction)?,
        steps: some(steps)?,
        reaction: some(reaction)?,
        floor_steps: some(floor_steps)?,
        floor_write: some(floor_write)?,
        reconcile,
        reconcile_floor,
        reconcile_threads,
        churn_reconciling: some(churn_reconciling)?,
        reconciling_for,
        cgroups: reconciles.first().map_or(0, |&(_, c)| c),
        mem_start,
        mem_end,
        idle,
        warnings,
    })
}

// ---------------------------------------------------------------------------
// The report

fn report(hier: &Hier, results: &[SizeResult]) {
    let pair = |s: &Stats| format!("{}/{}", ms(s.median), ms(s.p99));
    println!();
    println!(
        "REAL {} (times in ms, median/p99; memory in MB)",
        hier.version.name()
    );
    println!(
        "{:>6} {:>7} | {:>15} {:>15} {:>15} | {:>15} {:>4} | {:>9} {:>7} {:>11} | {:>5} {:>5} {:>5}",
        "live",
        "tree",
        "pin",
        "narrowed",
        "released",
        "pin (churn)",
        "n",
        "→READY",
        "cgroups",
        "reconcile",
        "RSS",
        "HWM",
        "RSS end",
    );
    for r in results {
        println!(
            "{:>6} {:>7} | {:>15} {:>15} {:>15} | {:>15} {:>4} | {:>9} {:>7} {:>11} | {:>5} {:>5} {:>5}",
            r.n,
            format!("{:.1}s", r.build.as_secs_f64()),
            pair(&r.pin),
            pair(&r.narrowed),
            pair(&r.released),
            pair(&r.churn),
            r.churn.n,
            ms(r.ready),
            r.cgroups,
            r.reconcile.as_ref().map_or("-".into(), |s| ms(s.median)),
            mb(r.mem_start.0),
            mb(r.mem_start.1.max(r.mem_end.1)),
            mb(r.mem_end.0),
        );
    }
    for r in results {
        if let Some((share, t)) = &r.idle {
            println!(
                "  idle at {} live containers, the shipped intervals: {:.2} % of a core \
                 (on a CPU: the loop {} ms, the I/O threads {} ms)",
                r.n,
                share * 100.0,
                ms(t.loop_run),
                ms(t.io_run),
            );
        }
    }
    println!(
        "  pin: container's cpuset mkdir → its cpuset.cpus reads the exclusive CPU ({} settled rounds);",
        results.first().map_or(0, |r| r.pin.n)
    );
    println!(
        "  narrowed: the same mkdir → every Burstable container's effective set lacks it; released: pod rmdir → all have it back;"
    );
    println!(
        "  pin (churn): rounds back to back, the shared pool never waited for; reconcile: SIGHUP, the daemon's `reconcile done elapsed_us`"
    );
    println!(
        "  where a settled pin's time goes (p50 ms): the runtime's steps (mkdir to quota written) + the daemon's reaction (quota to pinned),"
    );
    println!(
        "  against the kernel's floor: the same steps in an unmanaged cgroup + the pin's one write made at once by the benchmark"
    );
    // A pin split into the runtime's steps and the daemon's reaction,
    // against its floor's steps and write (medians).
    let split = |n: usize,
                 pin: &Stats,
                 steps: &Stats,
                 reaction: &Stats,
                 floor: (&Stats, &Stats)| {
        let (floor_steps, floor_write) = floor;
        println!(
            "  {:>6}: pin {} = steps {} + reaction {}; floor {} = steps {} + write {}; the daemon's share {}",
            n,
            ms(pin.median),
            ms(steps.median),
            ms(reaction.median),
            ms(floor_steps.median + floor_write.median),
            ms(floor_steps.median),
            ms(floor_write.median),
            ms(reaction.median.saturating_sub(floor_write.median)),
        );
    };
    for r in results {
        split(
            r.n,
            &r.pin,
            &r.steps,
            &r.reaction,
            (&r.floor_steps, &r.floor_write),
        );
    }
    println!(
        "  the same under churn, against the churn's floor (the same rounds back to back in the unmanaged cgroup, the write the benchmark's):"
    );
    for r in results {
        split(
            r.n,
            &r.churn,
            &r.churn_steps,
            &r.churn_reaction,
            (&r.churn_floor_steps, &r.churn_floor_write),
        );
    }
    println!(
        "  a full reconcile's floor (ms, median): every cgroup it scans read by the benchmark with the daemon's own call on {} threads",
        pinctl::io::IoConfig::default().threads
    );
    for r in results {
        println!(
            "  {:>6}: reconcile {} ({} cgroups); floor {} ({} directories read), of which opening them {}",
            r.n,
            r.reconcile.as_ref().map_or("-".into(), |s| ms(s.median)),
            r.cgroups,
            ms(r.reconcile_floor.read.median),
            r.reconcile_floor.dirs,
            ms(r.reconcile_floor.open.median),
        );
        let t = &r.reconcile_threads;
        println!(
            "          the median reconcile's threads: the loop on a CPU {}, waiting for one {}; the I/O threads on a CPU {}, waiting for one {}",
            ms(t.loop_run),
            ms(t.loop_wait),
            ms(t.io_run),
            ms(t.io_wait),
        );
    }
    println!("  pin under churn with a full reconcile every second (ms, median/p99):");
    for r in results {
        println!(
            "  {:>6}: {} over {} rounds in {:.1} s",
            r.n,
            pair(&r.churn_reconciling),
            r.churn_reconciling.n,
            r.reconciling_for.as_secs_f64(),
        );
    }
    for r in results {
        if let Some(w) = r.warnings.first() {
            println!(
                "  {} warnings from pinctld at {}, first: {w}",
                r.warnings.len(),
                r.n
            );
        }
    }
    println!();
    println!("Targets (issue #14), at {TARGET_AT} live containers");
    let verdict = |ok: bool| if ok { "PASS" } else { "FAIL" };
    let Some(r) = results.iter().find(|r| r.n == TARGET_AT) else {
        println!("  not measured");
        return;
    };
    let narrowed_target = match hier.version {
        Version::V1 => TARGET_NARROWED_V1,
        Version::V2 => TARGET_NARROWED_V2,
    };
    for (what, s) in [("pin, settled", &r.pin), ("pin, churn", &r.churn)] {
        println!(
            "  {what}: p50 {} ms ≤ {} ms: {}; p99 {} ms ≤ {} ms: {}",
            ms(s.median),
            ms(TARGET_PIN_P50),
            verdict(s.median <= TARGET_PIN_P50),
            ms(s.p99),
            ms(TARGET_PIN_P99),
            verdict(s.p99 <= TARGET_PIN_P99),
        );
    }
    println!(
        "  whole shared pool narrowed: p50 {} ms, p99 {} ms ≤ {} ms: {}",
        ms(r.narrowed.median),
        ms(r.narrowed.p99),
        ms(narrowed_target),
        verdict(r.narrowed.p99 <= narrowed_target),
    );
}
