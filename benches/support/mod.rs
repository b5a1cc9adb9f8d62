//! What the benchmarks of the `pinctld` binary share (`benches/daemon.rs` on
//! a fake tree, `benches/real_cgroup.rs` on the kernel's cgroupfs): the
//! tests' own launcher (`tests/it/support/pinctld.rs`: the process, its log,
//! its `sd_notify` messages) with the log parsed as it grows and the daemon's
//! CPU time and memory, `perf record` on request, inotify waits, the
//! environment's knobs, the summary statistics of a set of timings, and
//! their figures as CSV rows (`record`); the real cgroup hierarchy
//! (`cgroupfs`).

#![allow(dead_code)]

pub mod cgroupfs;
#[path = "../../tests/it/support/pinctld.rs"]
mod pinctld;
pub mod record;

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use inotify::{EventMask, Inotify, WatchMask};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
pub use pinctld::PINCTLD;
use pinctld::{Launch, Pinctld};

/// The knobs a benchmark reads from its environment.
pub struct Knobs {
    /// `cargo bench` passes `--bench`; `cargo test --benches` does not, and
    /// then one quick pass proves the benchmark still works.
    pub full: bool,
}

impl Knobs {
    pub fn new() -> Self {
        Knobs {
            full: std::env::args().any(|a| a == "--bench"),
        }
    }

    /// A variable's value, when set and not empty.
    pub fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.is_empty())
    }

    /// A number, or `default`.
    pub fn number(&self, name: &str, default: usize) -> Result<usize> {
        self.var(name).map_or(Ok(default), |v| {
            v.trim()
                .parse()
                .with_context(|| format!("{name}={v:?} is not a number"))
        })
    }

    /// `PINCTL_BENCH_SIZES` (comma-separated, each at least 1), or `full`
    /// for a full run and 10 for a quick pass.
    pub fn sizes(&self, full: &[usize]) -> Result<Vec<usize>> {
        let sizes = match self.var("PINCTL_BENCH_SIZES") {
            Some(v) => v
                .split(',')
                .map(|s| s.trim().parse::<usize>())
                .collect::<Result<Vec<_>, _>>()
                .with_context(|| format!("PINCTL_BENCH_SIZES={v:?}"))?,
            None if self.full => full.to_vec(),
            None => vec![10],
        };
        anyhow::ensure!(
            sizes.iter().all(|&n| n >= 1),
            "PINCTL_BENCH_SIZES: sizes must be at least 1"
        );
        Ok(sizes)
    }
}

/// splitmix64: deterministic names.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The daemon counts as idle when its CPU time grows by at most this much...
const IDLE_SLACK_NS: u64 = 50_000;
/// ...over this long.
const IDLE_QUIET: Duration = Duration::from_millis(20);
/// How long any one step may take before a benchmark gives up.
pub const STEP_TIMEOUT: Duration = Duration::from_secs(120);

/// What the log says, parsed as it arrives.
#[derive(Debug)]
pub enum Log {
    FirstReconcile { ms: u64 },
    Reconcile { us: u64, cgroups: u64 },
    Warning(String),
}

pub fn field(line: &str, key: &str) -> Option<u64> {
    let rest = &line[line.find(key)? + key.len()..];
    let end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

pub fn parse_log(line: &str) -> Option<Log> {
    if line.contains(" WARN ") || line.contains(" ERROR ") {
        return Some(Log::Warning(line.to_string()));
    }
    if line.contains("first reconcile done") {
        return Some(Log::FirstReconcile {
            ms: field(line, "elapsed_ms=")?,
        });
    }
    if line.contains("reconcile done") {
        return Some(Log::Reconcile {
            us: field(line, "elapsed_us=")?,
            cgroups: field(line, "cgroups=").unwrap_or(0),
        });
    }
    None
}

/// A running `pinctld` for a benchmark: the tests' launcher ([`Pinctld`]:
/// the process, its log, its sd-notify messages, stopped on drop), with what
/// a benchmark reads besides: the log parsed as it grows, the daemon's CPU
/// time and memory. It also dies with this process (`PR_SET_PDEATHSIG`).
pub struct Daemon {
    p: Pinctld,
    pub pid: i32,
    /// The next sd-notify message not yet looked at.
    seen: usize,
    /// How much of the log was parsed.
    log_pos: usize,
    pub spawned: Instant,
    pub warnings: Vec<String>,
    pub first_reconcile_ms: Option<u64>,
    pub reconciles: Vec<(u64, u64)>,
}

impl Daemon {
    /// Starts `pinctld` with `config` (written to `dir/pinctld-RUN.toml`),
    /// its `NOTIFY_SOCKET` and log in `dir`; `debug` sets
    /// `RUST_LOG=pinctl=debug`.
    pub fn spawn(pinctld: &Path, dir: &Path, config: &str, run: &str, debug: bool) -> Result<Self> {
        let config_file = dir.join(format!("pinctld-{run}.toml"));
        fs::write(&config_file, config)?;
        let launch = Launch {
            env: if debug {
                vec![("RUST_LOG".into(), "pinctl=debug".into())]
            } else {
                Vec::new()
            },
            die_with_parent: true,
            program: Some(pinctld.to_path_buf()),
            ..Launch::default()
        };
        let spawned = Instant::now();
        let p = Pinctld::spawn(
            &config_file,
            &dir.join(format!("pinctld-{run}.log")),
            &dir.join(format!("notify-{run}.sock")),
            &launch,
        );
        let pid = i32::try_from(p.pid()).context("pid out of range")?;
        Ok(Daemon {
            p,
            pid,
            seen: 0,
            log_pos: 0,
            spawned,
            warnings: Vec::new(),
            first_reconcile_ms: None,
            reconciles: Vec::new(),
        })
    }

    fn take(&mut self, log: Log) {
        match log {
            Log::FirstReconcile { ms } => self.first_reconcile_ms = Some(ms),
            Log::Reconcile { us, cgroups } => self.reconciles.push((us, cgroups)),
            Log::Warning(w) => self.warnings.push(w),
        }
    }

    /// Parses the log's complete lines written since the last call.
    pub fn pump_logs(&mut self) {
        // Only what was appended: a debug log grows to megabytes, and this
        // is polled every millisecond beside the daemon being measured.
        use std::io::{Read as _, Seek as _, SeekFrom};
        let mut fresh = Vec::new();
        let read = fs::File::open(&self.p.log).and_then(|mut f| {
            f.seek(SeekFrom::Start(self.log_pos as u64))?;
            f.read_to_end(&mut fresh)
        });
        if read.is_err() {
            return;
        }
        let Some(end) = fresh.iter().rposition(|&b| b == b'\n') else {
            return;
        };
        self.log_pos += end + 1;
        let fresh = String::from_utf8_lossy(&fresh[..end]).into_owned();
        for line in fresh.lines() {
            if let Some(parsed) = parse_log(line) {
                self.take(parsed);
            }
        }
    }

    /// Waits for the next `reconcile done` line.
    pub fn wait_reconcile(&mut self) -> Result<(u64, u64)> {
        let before = self.reconciles.len();
        let deadline = Instant::now() + STEP_TIMEOUT;
        while self.reconciles.len() == before {
            if Instant::now() > deadline {
                return Err(self.fail("no `reconcile done` line"));
            }
            thread::sleep(Duration::from_millis(1));
            self.pump_logs();
        }
        Ok(self.reconciles[before])
    }

    /// The error for a step that did not happen, with the log's tail.
    pub fn fail(&mut self, what: &str) -> anyhow::Error {
        let status = self.p.exited();
        let log = self.p.log_text();
        let tail: Vec<&str> = log.lines().rev().take(15).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        anyhow::anyhow!(
            "{what} (pinctld {}); its log ends:\n{}",
            status.map_or("still running".to_string(), |s| format!("exited: {s}")),
            tail.join("\n")
        )
    }

    /// Waits for a `sd_notify` message that satisfies `want`; returns when it
    /// arrived.
    pub fn wait_notify(&mut self, what: &str, want: impl Fn(&str) -> bool) -> Result<Instant> {
        let deadline = Instant::now() + STEP_TIMEOUT;
        loop {
            let notes = self.p.notes();
            for (at, msg) in &notes[self.seen.min(notes.len())..] {
                self.seen += 1;
                if want(msg) {
                    return Ok(*at);
                }
            }
            if Instant::now() > deadline || self.p.exited().is_some() {
                return Err(self.fail(&format!("no {what} from the daemon")));
            }
            thread::sleep(Duration::from_millis(1));
        }
    }

    /// The CPU time of all the daemon's threads, in nanoseconds.
    pub fn cpu_ns(&self) -> u64 {
        let Ok(tasks) = fs::read_dir(format!("/proc/{}/task", self.pid)) else {
            return 0;
        };
        tasks
            .flatten()
            .filter_map(|t| fs::read_to_string(t.path().join("schedstat")).ok())
            .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
            .sum()
    }

    /// Waits until the daemon has used no CPU for [`IDLE_QUIET`]; returns how
    /// long it was still busy.
    pub fn wait_idle(&mut self) -> Result<Duration> {
        let start = Instant::now();
        let mut last = self.cpu_ns();
        let mut last_busy = start;
        let mut mark = (start, last);
        loop {
            thread::sleep(Duration::from_millis(2));
            let now = Instant::now();
            let cpu = self.cpu_ns();
            if cpu != last {
                last_busy = now;
                last = cpu;
            }
            // Saturating: an exiting thread takes its CPU time with it.
            if cpu.saturating_sub(mark.1) > IDLE_SLACK_NS {
                mark = (now, cpu);
            } else if now - mark.0 >= IDLE_QUIET {
                return Ok(last_busy - start);
            }
            if now - start > STEP_TIMEOUT || self.p.exited().is_some() {
                return Err(self.fail("the daemon did not go idle"));
            }
        }
    }

    /// `VmRSS` and `VmHWM`, in kB.
    pub fn memory(&self) -> Result<(u64, u64)> {
        let status = fs::read_to_string(format!("/proc/{}/status", self.pid))?;
        let kb = |key: &str| -> Result<u64> {
            let line = status
                .lines()
                .find(|l| l.starts_with(key))
                .with_context(|| format!("no {key} in /proc/{}/status", self.pid))?;
            line.split_whitespace()
                .nth(1)
                .and_then(|v| v.parse().ok())
                .with_context(|| format!("cannot parse {line:?}"))
        };
        Ok((kb("VmRSS:")?, kb("VmHWM:")?))
    }

    /// Each thread's time on a CPU and waiting for one (ns, from
    /// `/proc/PID/task/TID/schedstat`), summed by thread name: the loop is
    /// `pinctld`, the I/O threads `pinctl-io-N` (summed as `pinctl-io`).
    pub fn sched(&self) -> Result<BTreeMap<String, (u64, u64)>> {
        let mut by_name = BTreeMap::new();
        for task in fs::read_dir(format!("/proc/{}/task", self.pid))? {
            let dir = task?.path();
            // A thread that ended in between is not counted.
            let (Ok(comm), Ok(stat)) = (
                fs::read_to_string(dir.join("comm")),
                fs::read_to_string(dir.join("schedstat")),
            ) else {
                continue;
            };
            let name = comm.trim().trim_end_matches(|c: char| c.is_ascii_digit());
            let name = name.trim_end_matches('-').to_string();
            let mut f = stat
                .split_whitespace()
                .map(|v| v.parse::<u64>().unwrap_or(0));
            let (run, wait) = (f.next().unwrap_or(0), f.next().unwrap_or(0));
            let e: &mut (u64, u64) = by_name.entry(name).or_default();
            e.0 += run;
            e.1 += wait;
        }
        Ok(by_name)
    }

    pub fn signal(&self, sig: Signal) -> Result<()> {
        kill(Pid::from_raw(self.pid), sig).with_context(|| format!("cannot send {sig}"))
    }

    /// SIGTERM and wait; SIGKILL after 5 s (`None`).
    pub fn stop(&mut self) -> Result<Option<ExitStatus>> {
        if let Some(status) = self.p.exited() {
            return Ok(Some(status));
        }
        self.p.signal(Signal::SIGTERM);
        let status = self.p.wait(Duration::from_secs(5));
        if status.is_none() {
            self.p.kill();
        }
        self.pump_logs();
        Ok(status)
    }
}

/// `perf record` attached to the daemon for one phase, when asked for.
pub struct Perf(Option<Child>);

impl Perf {
    /// Records `daemon` into `dir/NAME.data` until dropped, when `dir` is set.
    pub fn start(dir: Option<&Path>, daemon: &Daemon, name: &str) -> Result<Self> {
        let Some(dir) = dir else {
            return Ok(Perf(None));
        };
        let out = dir.join(format!("{name}.data"));
        let child = Command::new("perf")
            .args([
                "record",
                "-q",
                "-F",
                "999",
                "--call-graph",
                "dwarf,16384",
                "-o",
            ])
            .arg(&out)
            .args(["-p", &daemon.pid.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .context("cannot run perf")?;
        // perf needs a moment to attach.
        thread::sleep(Duration::from_millis(300));
        Ok(Perf(Some(child)))
    }
}

impl Drop for Perf {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let pid = Pid::from_raw(child.id() as i32);
            let _ = kill(pid, Signal::SIGINT);
            let _ = child.wait();
        }
    }
}

/// An inotify watch on `cpuset.cpus` of every shared cgroup: a Guaranteed
/// pod changes the shared pool, and the daemon is done with that change when
/// it has written every one of them.
pub struct PoolWatch {
    ino: Inotify,
    total: usize,
    buf: Vec<u8>,
}

impl PoolWatch {
    pub fn new(files: &[PathBuf]) -> Result<Self> {
        let ino = Inotify::init().context("cannot start inotify")?;
        for f in files {
            ino.watches()
                .add(f, WatchMask::CLOSE_WRITE)
                .with_context(|| format!("cannot watch {}", f.display()))?;
        }
        Ok(PoolWatch {
            ino,
            total: files.len(),
            buf: vec![0; 64 * 1024],
        })
    }

    pub fn drain(&mut self) {
        while self
            .ino
            .read_events(&mut self.buf)
            .is_ok_and(|e| e.count() > 0)
        {}
    }

    /// Waits until every file was written; returns when the last one was.
    pub fn wait_all(&mut self) -> Result<Option<Instant>> {
        let mut seen = std::collections::HashSet::new();
        let deadline = Instant::now() + STEP_TIMEOUT;
        while seen.len() < self.total {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            if !poll_in(&self.ino, left)? {
                continue;
            }
            match self.ino.read_events(&mut self.buf) {
                Ok(events) => seen.extend(
                    events
                        .filter(|e| e.mask.contains(EventMask::CLOSE_WRITE))
                        .map(|e| e.wd),
                ),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e).context("reading inotify events"),
            }
        }
        Ok(Some(Instant::now()))
    }
}

/// Waits up to `timeout` (at most a second) for `ino` to be readable.
pub fn poll_in(ino: &Inotify, timeout: Duration) -> Result<bool> {
    let mut pfd = libc::pollfd {
        fd: ino.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.as_millis().clamp(1, 1000) as libc::c_int;
    // SAFETY: one valid pollfd for the duration of the call.
    let r = unsafe { libc::poll(&mut pfd, 1, ms) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(e).context("poll on inotify");
    }
    Ok(r > 0)
}

// ---------------------------------------------------------------------------
// Statistics

/// Nearest-rank percentile of a sorted slice.
pub fn pct(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub struct Stats {
    pub n: usize,
    pub min: Duration,
    pub median: Duration,
    pub p90: Duration,
    pub p99: Duration,
    pub max: Duration,
}

impl Stats {
    pub fn of(mut v: Vec<Duration>) -> Option<Stats> {
        if v.is_empty() {
            return None;
        }
        v.sort();
        Some(Stats {
            n: v.len(),
            min: v[0],
            median: pct(&v, 0.5),
            p90: pct(&v, 0.9),
            p99: pct(&v, 0.99),
            max: v[v.len() - 1],
        })
    }
}

/// The columns of the daemon's benchmarks (`daemon` on a fake tree,
/// `real_cgroup` on the kernel's), after [`record::RUN_COLUMNS`]: times in
/// ms, RSS the peak (`VmHWM`) in MB. A figure a benchmark does not measure
/// is empty.
pub const FIGURE_COLUMNS: [&str; 15] = [
    "hierarchy",
    "live",
    "samples",
    "pin_p50_ms",
    "pin_p99_ms",
    "churn_p50_ms",
    "churn_p99_ms",
    "narrowed_p50_ms",
    "narrowed_p99_ms",
    "released_p50_ms",
    "released_p99_ms",
    "floor_p50_ms",
    "reconcile_p50_ms",
    "cgroups",
    "rss_mb",
];

/// One measured point of the daemon's benchmarks: a row of
/// [`FIGURE_COLUMNS`].
pub struct Figures<'a> {
    /// `v1`, `v2`, or `fake` (a fake tree in tmpfs).
    pub hierarchy: &'static str,
    /// Live containers.
    pub live: usize,
    pub pin: &'a Stats,
    /// Pin under churn, where measured.
    pub churn: Option<&'a Stats>,
    /// Until the whole shared pool lacks the pinned CPU.
    pub narrowed: &'a Stats,
    /// Until the whole shared pool has it back.
    pub released: &'a Stats,
    /// The kernel's floor of a pin, where measured.
    pub floor: Option<Duration>,
    /// A full reconcile's median, and the cgroups it scanned.
    pub reconcile: Option<Duration>,
    pub cgroups: u64,
    pub rss_peak_kb: u64,
}

impl Figures<'_> {
    fn row(&self) -> Vec<String> {
        let opt = |d: Option<Duration>| d.map_or_else(String::new, ms);
        vec![
            self.hierarchy.to_string(),
            self.live.to_string(),
            self.pin.n.to_string(),
            ms(self.pin.median),
            ms(self.pin.p99),
            opt(self.churn.map(|s| s.median)),
            opt(self.churn.map(|s| s.p99)),
            ms(self.narrowed.median),
            ms(self.narrowed.p99),
            ms(self.released.median),
            ms(self.released.p99),
            opt(self.floor),
            opt(self.reconcile),
            self.cgroups.to_string(),
            mb(self.rss_peak_kb),
        ]
    }
}

/// Appends a run's figures to `<bench>.csv` (see [`record`]): in a full run,
/// or in a quick pass when `PINCTL_BENCH_CSV_DIR` asks for them (a quick
/// pass is a check that the benchmark works, not a figure to keep).
pub fn record(bench: &str, run: &record::Run, full: bool, figures: &[Figures<'_>]) -> Result<()> {
    if !full && std::env::var_os("PINCTL_BENCH_CSV_DIR").is_none_or(|v| v.is_empty()) {
        return Ok(());
    }
    let rows: Vec<Vec<String>> = figures.iter().map(Figures::row).collect();
    let path = record::append(bench, run, &FIGURE_COLUMNS, &rows)?;
    println!("{} rows appended to {}", rows.len(), path.display());
    Ok(())
}

pub fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1e3)
}

pub fn mb(kb: u64) -> String {
    format!("{:.1}", kb as f64 / 1024.0)
}
