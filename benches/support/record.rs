//! Each benchmark's figures as CSV (issue #36): one row per measured point
//! per run, appended to `target/bench/<bench>.csv` (or
//! `$PINCTL_BENCH_CSV_DIR/<bench>.csv`), the header written when the file is
//! new. Every row opens with the run's date (UTC), machine, kernel and CPUs.
//! `benches/plot.py` turns the rows kept in `docs/src/benchmarks/` into the
//! benchmarks page's tables and figure. The criterion benchmarks include this
//! file alone (`#[path]`); the daemon's through `support`.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, ensure};

/// The columns every row opens with.
pub const RUN_COLUMNS: [&str; 4] = ["date", "machine", "kernel", "cpus"];

/// Where and when a run was made.
pub struct Run {
    pub date: String,
    pub machine: String,
    pub kernel: String,
    /// This machine's online CPUs (a VM's: its guest's).
    pub cpus: usize,
    started: SystemTime,
}

impl Run {
    /// This run, begun now.
    pub fn here() -> Run {
        let started = SystemTime::now();
        let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let read = |path: &str| {
            fs::read_to_string(path)
                .unwrap_or_default()
                .trim()
                .to_string()
        };
        Run {
            date: iso_utc(started),
            machine: std::env::var("PINCTL_BENCH_MACHINE")
                .ok()
                .filter(|m| !m.trim().is_empty())
                .unwrap_or_else(|| {
                    format!(
                        "{}, host {}",
                        model(&cpuinfo),
                        read("/proc/sys/kernel/hostname")
                    )
                }),
            kernel: read("/proc/sys/kernel/osrelease"),
            cpus: cpuinfo
                .lines()
                .filter(|l| l.starts_with("processor"))
                .count(),
            started,
        }
    }
}

/// The first CPU's model name, shortened: "Intel(R) Xeon(R) Gold 6338 CPU @
/// 2.00GHz" is "Intel Xeon Gold 6338", "AMD EPYC 7763 64-Core Processor" is
/// "AMD EPYC 7763".
fn model(cpuinfo: &str) -> String {
    let name = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name")?.split_once(':'))
        .map_or("unknown CPU", |(_, v)| v.trim());
    let name = name.split(" @ ").next().unwrap_or(name);
    let words: Vec<&str> = name
        .split_whitespace()
        .map(|w| w.trim_end_matches("(R)").trim_end_matches("(TM)"))
        .filter(|w| !matches!(*w, "" | "CPU" | "Processor") && !w.ends_with("-Core"))
        .collect();
    words.join(" ")
}

/// `YYYY-MM-DDTHH:MM:SSZ`.
fn iso_utc(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let rest = secs % 86_400;
    format!(
        "{}T{:02}:{:02}:{:02}Z",
        pinctl::cli::assets::civil_date(secs),
        rest / 3_600,
        rest / 60 % 60,
        rest % 60
    )
}

/// Cargo's target directory: the parent of target/tmp, its scratch
/// directory for benchmarks.
fn target_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap_or(Path::new("target"))
        .to_path_buf()
}

/// `$PINCTL_BENCH_CSV_DIR`, or `target/bench`.
pub fn dir() -> PathBuf {
    std::env::var_os("PINCTL_BENCH_CSV_DIR")
        .filter(|v| !v.is_empty())
        .map_or_else(|| target_dir().join("bench"), PathBuf::from)
}

/// Appends `rows` to `<dir>/<bench>.csv`, each after the run's own cells
/// ([`RUN_COLUMNS`]); a new file gets the header first. Returns the file.
pub fn append(bench: &str, run: &Run, columns: &[&str], rows: &[Vec<String>]) -> Result<PathBuf> {
    append_in(&dir(), bench, run, columns, rows)
}

/// [`append`] to `<dir>/<bench>.csv` in another directory (the soak's).
pub fn append_in(
    dir: &Path,
    bench: &str,
    run: &Run,
    columns: &[&str],
    rows: &[Vec<String>],
) -> Result<PathBuf> {
    fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let path = dir.join(format!("{bench}.csv"));
    let header: Vec<&str> = RUN_COLUMNS.iter().chain(columns).copied().collect();
    let new = fs::metadata(&path).map_or(true, |m| m.len() == 0);
    if !new {
        let mut old = csv::Reader::from_path(&path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let old: Vec<String> = old.headers()?.iter().map(String::from).collect();
        ensure!(
            old == header,
            "{} has other columns ({}): move it away and run again",
            path.display(),
            old.join(",")
        );
    }
    let file = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    let mut out = csv::Writer::from_writer(file);
    if new {
        out.write_record(&header)?;
    }
    let cells = [
        run.date.clone(),
        run.machine.clone(),
        run.kernel.clone(),
        run.cpus.to_string(),
    ];
    for row in rows {
        ensure!(
            row.len() == columns.len(),
            "a row of {bench} has {} cells",
            row.len()
        );
        out.write_record(cells.iter().chain(row))?;
    }
    out.flush()
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

/// The columns of a criterion benchmark's rows: its estimates in µs, the
/// median with its 95% confidence bounds and the mean.
pub const CRITERION_COLUMNS: [&str; 7] = [
    "group",
    "case",
    "param",
    "median_us",
    "median_low_us",
    "median_high_us",
    "mean_us",
];

/// Where criterion keeps its results, found as criterion finds it.
fn criterion_dir() -> PathBuf {
    if let Some(home) = std::env::var_os("CRITERION_HOME") {
        return home.into();
    }
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(target_dir, PathBuf::from);
    target.join("criterion")
}

/// After a criterion benchmark's groups ran: appends criterion's estimates
/// of what it measured in this run (each `new/estimates.json` written since
/// the run began) to `<bench>.csv`. `cargo test --benches` measures
/// nothing, and then nothing is written.
pub fn criterion(bench: &str, run: &Run, groups: &[&str]) -> Result<()> {
    let mut found = Vec::new();
    for group in groups {
        estimates_below(&criterion_dir().join(group), run.started, &mut found);
    }
    let mut rows = Vec::new();
    for dir in found {
        let json = |name: &str| -> Result<serde_json::Value> {
            let path = dir.join(name);
            let text = fs::read_to_string(&path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            serde_json::from_str(&text).with_context(|| format!("{}", path.display()))
        };
        let (id, est) = (json("benchmark.json")?, json("estimates.json")?);
        let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
        let us = |v: &serde_json::Value| format!("{:.3}", v.as_f64().unwrap_or(f64::NAN) / 1e3);
        let median = &est["median"];
        rows.push(vec![
            text(&id["group_id"]),
            text(&id["function_id"]),
            text(&id["value_str"]),
            us(&median["point_estimate"]),
            us(&median["confidence_interval"]["lower_bound"]),
            us(&median["confidence_interval"]["upper_bound"]),
            us(&est["mean"]["point_estimate"]),
        ]);
    }
    if rows.is_empty() {
        return Ok(());
    }
    // Numbers in order: 4 before 16.
    rows.sort_by_key(|r| {
        (
            r[0].clone(),
            r[1].clone(),
            r[2].parse::<u64>().ok(),
            r[2].clone(),
        )
    });
    let path = append(bench, run, &CRITERION_COLUMNS, &rows)?;
    println!("{} rows appended to {}", rows.len(), path.display());
    Ok(())
}

/// Every criterion `new` directory below `dir` whose estimates were written
/// since `since`.
fn estimates_below(dir: &Path, since: SystemTime, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let fresh = fs::metadata(path.join("estimates.json"))
            .and_then(|m| m.modified())
            .is_ok_and(|m| m >= since);
        if entry.file_name() == "new" && fresh {
            out.push(path);
        } else {
            estimates_below(&path, since, out);
        }
    }
}
