//! `pinctl verify --noise DURATION`: the CLI's side of [`crate::noise`].
//!
//! - It measures the daemon's exclusive CPUs ([`run`]), or any CPUs and
//!   processes that `--cpus` and `--pid` name ([`run_given`]), without a
//!   daemon: before pinctl is deployed, or to compare with it.
//! - It knows the default tracefs roots ([`TRACEFS`]), finds each
//!   workload's threads as `verify` does ([`verify::workload_threads`]),
//!   and waits on this thread until the time is up or a signal (Ctrl-C,
//!   SIGTERM, SIGHUP) ends the wait early: the instances are removed
//!   either way and the report covers the time measured.
//! - It prints the report as a table per CPU ([`render`]) or as JSON
//!   (`docs/src/cli.md`, "pinctl verify --noise"), notes on stderr, and
//!   fails ([`verdict`]) when a neighbour or movable work ran there.
//! - Reads and writes block this thread (blocking [`RealFs`]), never the
//!   daemon's. Nothing but its own tracing instances is written.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};

use super::style::{Style, visible};
use super::verify;
use crate::api;
use crate::cgroup::Version;
use crate::cpuset::CpuSet;
use crate::io::{Fs, RealFs};
use crate::noise::{self, Class, Report};
use crate::procfs;

/// Where tracefs is looked for, in order: its own mount point, then its
/// place under debugfs on older systems.
pub const TRACEFS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// The most rows of one class a CPU's table shows, the busiest first.
pub const MAX_ROWS: usize = 12;

/// How to measure and print.
#[derive(Debug, Clone)]
pub struct How {
    /// `--tracefs`, else the first of [`TRACEFS`] that is mounted.
    pub tracefs: Option<PathBuf>,
    pub duration: Duration,
    pub json: bool,
    pub style: Style,
}

/// The tracefs root: `given`, else the first of [`TRACEFS`] that has an
/// `instances` directory, else the first (whose error then says to mount it).
pub fn tracefs_root(given: Option<&Path>) -> PathBuf {
    if let Some(dir) = given {
        return dir.to_path_buf();
    }
    TRACEFS
        .iter()
        .map(PathBuf::from)
        .find(|dir| dir.join("instances").is_dir())
        .unwrap_or_else(|| PathBuf::from(TRACEFS[0]))
}

/// What `--cpus` and `--pid` name: CPUs to measure without a daemon, and
/// the processes whose threads are the workload there (none: everything
/// that runs there is noise).
#[derive(Debug, Clone)]
pub struct Given {
    pub cpus: CpuSet,
    pub pids: Vec<u32>,
}

/// Measures the CPUs `given` names, as `how` says, with procfs at
/// `proc_root`, and prints the report to `out`; no daemon is asked. Fails
/// when a neighbour or movable work ran there.
pub fn run_given(given: &Given, proc_root: &Path, how: &How, out: &mut dyn Write) -> Result<()> {
    run_given_with(&RealFs, given, proc_root, how, out)
}

/// [`run_given`], reading and writing through `fs`.
pub fn run_given_with(
    fs: &dyn Fs,
    given: &Given,
    proc_root: &Path,
    how: &How,
    out: &mut dyn Write,
) -> Result<()> {
    let target = given_target(fs, given, proc_root)?;
    measure_and_print(fs, &target, proc_root, how, out)
}

/// The target of `given`: one workload, `pid P,Q` (or `no workload`), of
/// the processes' threads now, on every CPU named. The hierarchy (for the
/// neighbours' cgroups) is the first process's, else this one's.
pub fn given_target(fs: &dyn Fs, given: &Given, proc_root: &Path) -> Result<noise::Target> {
    if given.cpus.is_empty() {
        bail!("--cpus names no CPU");
    }
    let mut tids = BTreeSet::new();
    for &pid in &given.pids {
        let dir = proc_root.join(pid.to_string());
        if !fs.exists(&dir.join("stat")).unwrap_or(false) {
            bail!(
                "--pid {pid}: no such process ({} is missing)",
                dir.display()
            );
        }
        tids.extend(procfs::threads(fs, proc_root, pid));
    }
    let key = match given.pids.as_slice() {
        [] => "no workload".to_string(),
        pids => {
            let list: Vec<String> = pids.iter().map(u32::to_string).collect();
            format!("pid {}", list.join(","))
        }
    };
    let who = given
        .pids
        .first()
        .map_or_else(|| "self".to_string(), u32::to_string);
    let version = match fs.read(&proc_root.join(who).join("cgroup")) {
        Ok(text) if procfs::parse_cgroup(&text, Version::V1).is_some() => Version::V1,
        _ => Version::V2,
    };
    let workload = noise::Workload {
        key,
        cgroups: Vec::new(),
        tids,
    };
    Ok(noise::Target::given(&given.cpus, workload, version))
}

/// Measures the exclusive CPUs of `status` as `how` says, under `roots`
/// (procfs, and the cgroup tree for the workloads' threads), and prints
/// the report to `out`. Fails when a neighbour or movable work ran there.
pub fn run(
    status: &api::Status,
    roots: &verify::Roots,
    how: &How,
    out: &mut dyn Write,
) -> Result<()> {
    run_with(&RealFs, status, roots, how, out)
}

/// [`run`], reading and writing through `fs`.
pub fn run_with(
    fs: &dyn Fs,
    status: &api::Status,
    roots: &verify::Roots,
    how: &How,
    out: &mut dyn Write,
) -> Result<()> {
    let threads = verify::workload_threads(fs, status, roots)?;
    let target = noise::Target::of(status, &threads);
    measure_and_print(fs, &target, &roots.proc_root, how, out)
}

/// Measures `target` (procfs at `proc_root`) as `how` says and prints the
/// report to `out`.
fn measure_and_print(
    fs: &dyn Fs,
    target: &noise::Target,
    proc_root: &Path,
    how: &How,
    out: &mut dyn Write,
) -> Result<()> {
    let cpus = target.cpus();
    if cpus.is_empty() {
        if how.json {
            serde_json::to_writer_pretty(&mut *out, &Report::nothing())?;
            writeln!(out)?;
        } else {
            writeln!(out, "No exclusive CPUs: nothing to measure")?;
        }
        out.flush()?;
        return Ok(());
    }
    let noise_roots = noise::Roots {
        tracefs: tracefs_root(how.tracefs.as_deref()),
        proc_root: proc_root.to_path_buf(),
    };
    // The handlers are in place before the instances are made: a signal
    // from now on ends the wait, and the instances are removed.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let mut signals = rt
        .block_on(async {
            use tokio::signal::unix::{SignalKind, signal};
            Ok::<_, std::io::Error>([
                signal(SignalKind::interrupt())?,
                signal(SignalKind::terminate())?,
                signal(SignalKind::hangup())?,
            ])
        })
        .context("cannot handle signals")?;
    let interrupted = Cell::new(false);
    let what = match cpus.len() {
        1 => format!("CPU {cpus}"),
        _ => format!("CPUs {cpus}"),
    };
    // Called once tracing is on.
    let mut wait = |d: Duration| {
        eprintln!(
            "pinctl: measuring the noise on {what} for {} (Ctrl-C ends it early)",
            seconds(d.as_secs_f64())
        );
        let start = Instant::now();
        let [int, term, hup] = &mut signals;
        rt.block_on(async {
            tokio::select! {
                _ = tokio::time::sleep(d) => {}
                _ = int.recv() => interrupted.set(true),
                _ = term.recv() => interrupted.set(true),
                _ = hup.recv() => interrupted.set(true),
            }
        });
        start.elapsed()
    };
    let report = noise::measure(fs, &noise_roots, target, how.duration, &mut wait)
        .context("cannot measure the noise")?;
    for note in &report.notes {
        eprintln!("pinctl: note: {}", visible(note));
    }
    if interrupted.get() {
        eprintln!(
            "pinctl: interrupted: the figures cover the {} measured",
            seconds(report.duration_s)
        );
    }
    if how.json {
        serde_json::to_writer_pretty(&mut *out, &report)?;
        writeln!(out)?;
    } else {
        let keys: BTreeMap<u32, &str> = target
            .owners
            .iter()
            .map(|(&cpu, &i)| (cpu, target.workloads[i].key.as_str()))
            .collect();
        out.write_all(render(&report, &keys, how.style).as_bytes())?;
    }
    out.flush()?;
    verdict(&report)
}

/// `10 s`, `1.5 s`: a duration in seconds for people.
fn seconds(s: f64) -> String {
    format!("{} s", (s * 10.0).round() / 10.0)
}

/// The measurement's outcome: an error when a neighbour or movable work ran
/// on the exclusive CPUs (exit 1), else nothing.
pub fn verdict(report: &Report) -> Result<()> {
    let count = |class: Class| report.sources.iter().filter(|s| s.class == class).count();
    let (n, m) = (count(Class::Neighbour), count(Class::Movable));
    match (report.movable, n + m) {
        (false, _) => Ok(()),
        (true, 1) => {
            bail!("1 source ran on exclusive CPUs that should not ({n} neighbour, {m} movable)")
        }
        (true, all) => bail!(
            "{all} sources ran on exclusive CPUs that should not ({n} neighbour, {m} movable)"
        ),
    }
}

/// The report as `pinctl verify --noise` prints it: a table per CPU (its
/// workload from `keys`), the sums per minute and the outcome.
pub fn render(report: &Report, keys: &BTreeMap<u32, &str>, style: Style) -> String {
    let mut s = String::new();
    let lost = match report.lost_events {
        0 => "no events lost".to_string(),
        n => format!("{n} events lost: the counts of switches are lower bounds"),
    };
    let _ = writeln!(
        s,
        "Noise on exclusive CPUs {} over {} ({lost})",
        report.cpus,
        seconds(report.duration_s)
    );
    let label = |src: &noise::Source| match src.pid {
        Some(pid) => format!("{} ({pid})", visible(&src.name)),
        None => visible(&src.name).into_owned(),
    };
    let width = report
        .sources
        .iter()
        .map(|src| label(src).chars().count())
        .max()
        .unwrap_or(0)
        .max("SOURCE".len());
    for cpu in report.cpus.iter() {
        let key = keys
            .get(&cpu)
            .map_or(String::new(), |k| format!("  {}", visible(k)));
        let _ = writeln!(s, "\n{}{key}", style.bold(&format!("CPU {cpu}")));
        let rows: Vec<&noise::Source> = report.sources.iter().filter(|x| x.cpu == cpu).collect();
        if rows.is_empty() {
            let _ = writeln!(s, "  nothing ran but the workload");
            continue;
        }
        let _ = writeln!(
            s,
            "  {:<width$}  {:>7}  {:>8}  {:<9}  WHY / CURE",
            "SOURCE", "COUNT", "PER MIN", "CLASS"
        );
        for class in Class::ALL {
            let of: Vec<&&noise::Source> = rows.iter().filter(|x| x.class == class).collect();
            for src in of.iter().take(MAX_ROWS) {
                let mut why = visible(&src.why).into_owned();
                if let Some(cure) = &src.cure {
                    let _ = write!(why, "; cure: {}", visible(cure));
                }
                let class = format!("{:<9}", class.as_str());
                let class = if src.class.fails() {
                    style.red(&class)
                } else {
                    class
                };
                let name = label(src);
                let pad = width.saturating_sub(name.chars().count());
                let _ = writeln!(
                    s,
                    "  {name}{:pad$}  {:>7}  {:>8.1}  {class}  {why}",
                    "", src.count, src.per_minute
                );
            }
            if of.len() > MAX_ROWS {
                let _ = writeln!(
                    s,
                    "  ... and {} more {} sources (--json lists them all)",
                    of.len() - MAX_ROWS,
                    class.as_str()
                );
            }
        }
    }
    let p = &report.per_minute;
    let _ = writeln!(
        s,
        "\nPer minute, all these CPUs: neighbour {:.1}, movable {:.1}, per_cpu {:.1}, interrupt {:.1}, softirq {:.1}",
        p.neighbour, p.movable, p.per_cpu, p.interrupt, p.softirq
    );
    if report.movable {
        let _ = writeln!(
            s,
            "{}",
            style.red("FAIL: a neighbour or movable kernel work ran on exclusive CPUs")
        );
    } else {
        let _ = writeln!(
            s,
            "{}",
            style.green("OK: no neighbour and no movable kernel work ran there")
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(cpu: u32, class: Class, name: &str, pid: Option<u32>, count: u64) -> noise::Source {
        noise::Source {
            cpu,
            class,
            name: name.into(),
            pid,
            count,
            per_minute: count as f64 * 6.0,
            why: "why".into(),
            cure: (class == Class::Interrupt).then(|| "nohz_full=1-2".into()),
        }
    }

    #[test]
    fn a_table_per_cpu_with_names_shown_not_obeyed() {
        let report = Report {
            duration_s: 10.0,
            cpus: "1-2".parse().unwrap(),
            lost_events: 0,
            per_minute: noise::PerMinute {
                movable: 12.0,
                interrupt: 600.0,
                ..Default::default()
            },
            sources: vec![
                source(1, Class::Movable, "kworker/u4:2", Some(123), 2),
                source(
                    1,
                    Class::Interrupt,
                    "LOC: Local timer interrupts",
                    None,
                    100,
                ),
                source(1, Class::Neighbour, "evil\x1b[2J", Some(9), 1),
            ],
            movable: true,
            notes: Vec::new(),
        };
        let keys = BTreeMap::from([(1, "cgroup:a"), (2, "cgroup:b")]);
        let text = render(&report, &keys, Style::OFF);
        assert_eq!(
            text,
            "Noise on exclusive CPUs 1-2 over 10 s (no events lost)\n\
             \n\
             CPU 1  cgroup:a\n\
             \x20 SOURCE                         COUNT   PER MIN  CLASS      WHY / CURE\n\
             \x20 evil\\x1b[2J (9)                    1       6.0  neighbour  why\n\
             \x20 kworker/u4:2 (123)                 2      12.0  movable    why\n\
             \x20 LOC: Local timer interrupts      100     600.0  interrupt  why; cure: nohz_full=1-2\n\
             \n\
             CPU 2  cgroup:b\n\
             \x20 nothing ran but the workload\n\
             \n\
             Per minute, all these CPUs: neighbour 0.0, movable 12.0, per_cpu 0.0, interrupt 600.0, softirq 0.0\n\
             FAIL: a neighbour or movable kernel work ran on exclusive CPUs\n"
        );
        assert_eq!(
            verdict(&report).unwrap_err().to_string(),
            "2 sources ran on exclusive CPUs that should not (1 neighbour, 1 movable)"
        );
    }

    #[test]
    fn a_long_class_shows_its_busiest_rows_and_counts_the_rest() {
        let mut report = Report::nothing();
        report.cpus = "1".parse().unwrap();
        report.movable = true;
        report.sources = (0..MAX_ROWS as u32 + 2)
            .map(|i| source(1, Class::Neighbour, "n", Some(i), 100 - u64::from(i)))
            .collect();
        let text = render(&report, &BTreeMap::new(), Style::OFF);
        assert_eq!(text.matches("  neighbour  why").count(), MAX_ROWS, "{text}");
        assert!(text.contains("n (11) "), "{text}");
        assert!(!text.contains("n (12) "), "{text}");
        assert!(
            text.contains("  ... and 2 more neighbour sources (--json lists them all)\n"),
            "{text}"
        );
    }
}
