//! Noise on exclusive CPUs (issue #42, "exclusive means quiet"): what else
//! ran on them over a while, where it came from and what would remove it.
//! `pinctl verify --noise` runs [`measure`]; the daemon's per-CPU
//! interrupt metrics use the parsers ([`parse`]).
//!
//! - A measurement traces context switches on the exclusive CPUs in
//!   tracing instances of its own (`trace.rs`), and diffs `/proc/interrupts`
//!   and `/proc/softirqs` taken before and after. Each switch to a task that
//!   is not the CPU's workload's (by its cgroup, the threads read before,
//!   the forks and cgroup moves seen) is a source, judged by
//!   [`classify`]: a neighbour, movable kernel work, per-CPU kernel work,
//!   an interrupt or a softirq.
//! - What is measured comes in as a [`Target`]: the daemon's exclusive
//!   CPUs and workloads ([`Target::of`]), or any CPUs and processes
//!   ([`Target::given`], `--cpus` and `--pid`, no daemon).
//! - The roots (tracefs, procfs) and the wait come in as arguments; control
//!   files and `/proc` are read through [`Fs`]. Blocking: the CLI runs it on
//!   its own thread, never the daemon.
//! - Nothing outside its own tracing instances is written, and they are
//!   removed on every way out. No kernel setting changes.

pub mod classify;
pub mod parse;
mod trace;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::api;
use crate::cgroup::{self, Version};
use crate::cpuset::CpuSet;
use crate::io::Fs;
use crate::procfs;

pub use classify::{Class, TaskFacts};
use parse::{Counts, TraceEvent};

/// Where the kernel's files are.
#[derive(Debug, Clone)]
pub struct Roots {
    /// The tracefs mount (`/sys/kernel/tracing`).
    pub tracefs: PathBuf,
    /// procfs (`/proc`): tasks, `interrupts`, `softirqs`.
    pub proc_root: PathBuf,
}

/// One exclusive workload as a measurement sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Workload {
    pub key: String,
    /// Its cgroups, relative to the cpuset hierarchy.
    pub cgroups: Vec<String>,
    /// Its threads when the measurement began.
    pub tids: BTreeSet<u32>,
}

/// What to measure, and what the daemon says that judging needs.
#[derive(Debug, Clone)]
pub struct Target {
    /// Each exclusive CPU, with its workload's index in `workloads`.
    pub owners: BTreeMap<u32, usize>,
    pub workloads: Vec<Workload>,
    /// The hierarchy of the workloads' cgroups, to read `/proc/PID/cgroup`.
    pub version: Version,
    pub housekeeping: Option<api::Housekeeping>,
    pub interrupts: Option<api::Interrupts>,
}

impl Target {
    /// The pinned workloads of `status`, each with its threads as read
    /// now (`tids`, by workload key).
    pub fn of(status: &api::Status, tids: &BTreeMap<String, BTreeSet<u32>>) -> Target {
        let mut owners = BTreeMap::new();
        let mut workloads = Vec::new();
        for w in &status.workloads {
            let Some(cpus) = &w.cpus else {
                continue;
            };
            for cpu in cpus.iter() {
                owners.entry(cpu).or_insert(workloads.len());
            }
            workloads.push(Workload {
                key: w.key.clone(),
                cgroups: w.cgroups.clone(),
                tids: tids.get(&w.key).cloned().unwrap_or_default(),
            });
        }
        Target {
            owners,
            workloads,
            version: if status.hierarchy == "v1" {
                Version::V1
            } else {
                Version::V2
            },
            housekeeping: status.housekeeping.clone(),
            interrupts: status.interrupts.clone(),
        }
    }

    /// `cpus` measured without a daemon: `workload` (its cgroups may be
    /// none) is the one workload of every CPU; nothing is known of
    /// housekeeping or interrupts.
    pub fn given(cpus: &CpuSet, workload: Workload, version: Version) -> Target {
        Target {
            owners: cpus.iter().map(|cpu| (cpu, 0)).collect(),
            workloads: vec![workload],
            version,
            housekeeping: None,
            interrupts: None,
        }
    }

    /// The CPUs measured.
    pub fn cpus(&self) -> CpuSet {
        self.owners.keys().copied().collect()
    }
}

/// What a measurement found; as JSON, the shape `pinctl verify --noise
/// --json` prints (docs/src/cli.md): keep it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// How long it traced, in seconds.
    pub duration_s: f64,
    /// The CPUs measured.
    pub cpus: CpuSet,
    /// Events the trace lost (they are not in the counts of switches).
    pub lost_events: u64,
    /// Each class's sum over every CPU measured, per minute.
    pub per_minute: PerMinute,
    /// Every source, by CPU, class and count.
    pub sources: Vec<Source>,
    /// Whether a neighbour or movable work ran there: the failure.
    pub movable: bool,
    /// What the reader should know (events lost, instances removed, CPUs
    /// without counts); not in the JSON.
    #[serde(skip)]
    pub notes: Vec<String>,
}

/// Per minute, by class.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PerMinute {
    pub neighbour: f64,
    pub movable: f64,
    pub per_cpu: f64,
    pub interrupt: f64,
    pub softirq: f64,
}

impl PerMinute {
    pub fn get(&self, class: Class) -> f64 {
        match class {
            Class::Neighbour => self.neighbour,
            Class::Movable => self.movable,
            Class::PerCpu => self.per_cpu,
            Class::Interrupt => self.interrupt,
            Class::Softirq => self.softirq,
        }
    }

    fn get_mut(&mut self, class: Class) -> &mut f64 {
        match class {
            Class::Neighbour => &mut self.neighbour,
            Class::Movable => &mut self.movable,
            Class::PerCpu => &mut self.per_cpu,
            Class::Interrupt => &mut self.interrupt,
            Class::Softirq => &mut self.softirq,
        }
    }
}

/// One source of noise on one CPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Source {
    pub cpu: u32,
    pub class: Class,
    /// A task's name (as the trace gave it), `36: virtio1-req.0` for an
    /// interrupt, `TIMER` for a softirq.
    pub name: String,
    /// A task's id (a thread's); `None` for interrupts and softirqs.
    pub pid: Option<u32>,
    /// Switches to the task, or interrupts or softirqs, while measured.
    pub count: u64,
    pub per_minute: f64,
    /// Why it ran there.
    pub why: String,
    /// What would remove it, when anything would.
    pub cure: Option<String>,
}

impl Report {
    /// The report of a measurement of nothing: no exclusive CPUs.
    pub fn nothing() -> Report {
        Report {
            duration_s: 0.0,
            cpus: CpuSet::new(),
            lost_events: 0,
            per_minute: PerMinute::default(),
            sources: Vec::new(),
            movable: false,
            notes: Vec::new(),
        }
    }
}

/// Why a measurement could not be made. Each names its file.
#[derive(Debug, thiserror::Error)]
pub enum NoiseError {
    #[error(
        "no tracefs at {}: it has no instances/ (mount it: mount -t tracefs nodev {})",
        .path.display(),
        .path.display()
    )]
    NoTracefs { path: PathBuf },
    #[error("not allowed to create the tracing instance {}: tracing needs root", .path.display())]
    NotAllowed {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot create the tracing instance {}", .path.display())]
    Create {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("failed to write {data:?} to {}", .path.display())]
    Write {
        path: PathBuf,
        data: String,
        #[source]
        source: io::Error,
    },
    #[error("failed to read {}", .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{}: {reason}", .path.display())]
    Parse { path: PathBuf, reason: String },
    #[error("cannot remove the tracing instance {}", .path.display())]
    Remove {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("the trace reader stopped: {0}")]
    Reader(String),
}

impl NoiseError {
    fn create(path: &Path, source: io::Error) -> NoiseError {
        let path = path.to_path_buf();
        match source.kind() {
            io::ErrorKind::PermissionDenied => NoiseError::NotAllowed { path, source },
            _ => NoiseError::Create { path, source },
        }
    }
}

/// Reads and parses a per-CPU table (`/proc/interrupts`, `/proc/softirqs`).
pub fn read_counts(fs: &dyn Fs, path: &Path) -> Result<Counts, NoiseError> {
    let text = fs.read(path).map_err(|source| NoiseError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse::parse_counts(&text).map_err(|reason| NoiseError::Parse {
        path: path.to_path_buf(),
        reason,
    })
}

/// What `/proc` says of task `pid` now; `None` when it is gone or its
/// `stat` cannot be read.
pub fn look_up(fs: &dyn Fs, proc_root: &Path, version: Version, pid: u32) -> Option<TaskFacts> {
    let dir = proc_root.join(pid.to_string());
    let (comm, flags) = parse::parse_stat_flags(&fs.read(&dir.join("stat")).ok()?)?;
    let allowed = fs.read(&dir.join("status")).ok().and_then(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .and_then(|v| v.trim().parse().ok())
    });
    let cgroup = fs
        .read(&dir.join("cgroup"))
        .ok()
        .and_then(|t| procfs::parse_cgroup(&t, version));
    Some(TaskFacts {
        comm,
        flags,
        allowed,
        cgroup,
    })
}

/// What the trace said, gathered as it streams.
#[derive(Debug, Default)]
struct Tally {
    /// Switches to each task, by CPU, task id and name.
    switches: BTreeMap<(u32, u32, String), u64>,
    /// Forks on the measured CPUs: (parent, child).
    forks: Vec<(u32, u32)>,
    /// Tasks moved into a cgroup: (task, cgroup).
    moves: Vec<(u32, String)>,
    /// Events the reader was told it missed, by CPU.
    lost: BTreeMap<u32, u64>,
    /// What `/proc` said of each task switched to, looked up when first
    /// seen (`None`: gone already).
    facts: HashMap<u32, Option<TaskFacts>>,
}

impl Tally {
    /// Takes one event in; a task not known as a workload's is looked up
    /// (`look`) the first time it is switched to, while it likely lives.
    fn add(
        &mut self,
        event: TraceEvent,
        cpus: &CpuSet,
        known: &HashSet<u32>,
        look: &dyn Fn(u32) -> Option<TaskFacts>,
    ) {
        match event {
            TraceEvent::Switch {
                cpu,
                next_pid,
                next_comm,
                ..
            } => {
                if next_pid == 0 || !cpus.contains(cpu) {
                    return;
                }
                *self.switches.entry((cpu, next_pid, next_comm)).or_default() += 1;
                if !known.contains(&next_pid) && !self.facts.contains_key(&next_pid) {
                    self.facts.insert(next_pid, look(next_pid));
                }
            }
            TraceEvent::Fork {
                cpu, parent, child, ..
            } => {
                if cpus.contains(cpu) {
                    self.forks.push((parent, child));
                }
            }
            TraceEvent::Attach { pid, path } => self.moves.push((pid, path)),
            TraceEvent::Lost { cpu, count } => {
                let n = self.lost.entry(cpu).or_default();
                *n = n.saturating_add(count);
            }
        }
    }
}

/// Measures what runs on the CPUs of `target` for `duration`.
///
/// Makes the tracing instances under `roots.tracefs`, reads the counts of
/// interrupts and softirqs, traces, calls `wait(duration)` (which returns
/// how long it really waited: less when interrupted, and a test need not
/// wait at all), stops, reads the counts again and removes the instances.
/// A failure after the instances are made removes them too.
pub fn measure(
    fs: &dyn Fs,
    roots: &Roots,
    target: &Target,
    duration: Duration,
    wait: &mut dyn FnMut(Duration) -> Duration,
) -> Result<Report, NoiseError> {
    let cpus = target.cpus();
    if cpus.is_empty() {
        return Ok(Report::nothing());
    }
    let instances = roots.tracefs.join("instances");
    match fs.exists(&instances) {
        Ok(true) => {}
        Ok(false) => {
            return Err(NoiseError::NoTracefs {
                path: roots.tracefs.clone(),
            });
        }
        Err(source) => return Err(NoiseError::create(&instances, source)),
    }
    let mut notes = trace::remove_stale(fs, &instances, &roots.proc_root);
    let (main_name, moves_name) = trace::names(std::process::id());
    let main = trace::Instance::create(fs, instances.join(main_name))?;
    notes.extend(main.set_up_switches(&cpus)?);
    let moves = match trace::Instance::create(fs, instances.join(moves_name)) {
        Ok(moves) => match moves.set_up_moves() {
            Ok(()) => Some(moves),
            Err(e) => {
                notes.push(format!("{}; a task moved into a workload's cgroup and gone before it could be looked up counts as a neighbour", crate::io::chain(&e)));
                drop(moves);
                None
            }
        },
        Err(e) => {
            notes.push(crate::io::chain(&e));
            None
        }
    };
    let mut pipes = vec![main.pipe()?];
    if let Some(m) = &moves {
        pipes.push(m.pipe()?);
    }

    let interrupts = roots.proc_root.join("interrupts");
    let softirqs = roots.proc_root.join("softirqs");
    let before = (read_counts(fs, &interrupts)?, read_counts(fs, &softirqs)?);

    let known: HashSet<u32> = target
        .workloads
        .iter()
        .flat_map(|w| w.tids.iter().copied())
        .collect();
    let look = |pid: u32| look_up(fs, &roots.proc_root, target.version, pid);
    let stop = AtomicBool::new(false);
    let (tally, waited) = std::thread::scope(|s| {
        let reader = std::thread::Builder::new()
            .name("pinctl-noise".into())
            .spawn_scoped(s, || {
                let mut tally = Tally::default();
                let result = trace::stream(&mut pipes, &stop, &mut |e| {
                    tally.add(e, &cpus, &known, &look);
                });
                result.map(|()| tally)
            })
            .map_err(|e| NoiseError::Reader(e.to_string()))?;
        let started = main.write("tracing_on", "1");
        if let Some(m) = &moves
            && let Err(e) = m.write("tracing_on", "1")
        {
            notes.push(crate::io::chain(&e));
        }
        let waited = match &started {
            Ok(()) => wait(duration),
            Err(_) => Duration::ZERO,
        };
        let stopped = main.write("tracing_on", "0");
        if let Some(m) = &moves {
            let _ = m.write("tracing_on", "0");
        }
        stop.store(true, Ordering::Release);
        let tally = reader
            .join()
            .map_err(|_| NoiseError::Reader("it panicked".into()))?;
        started?;
        if let Err(e) = stopped {
            notes.push(crate::io::chain(&e));
        }
        Ok::<_, NoiseError>((tally?, waited))
    })?;
    let after = (read_counts(fs, &interrupts)?, read_counts(fs, &softirqs)?);

    let mut lost: u64 = 0;
    for cpu in cpus.iter() {
        let rel = format!("per_cpu/cpu{cpu}/stats");
        match main.read(&rel).map(|t| parse::parse_stats_lost(&t)) {
            Ok(Some(n)) => {
                if n > 0 {
                    notes.push(format!("CPU {cpu}: the trace lost {n} events: its counts of switches are lower bounds"));
                }
                lost = lost.saturating_add(n);
            }
            Ok(None) => notes.push(format!(
                "{}: no counts of lost events",
                main.dir.join(rel).display()
            )),
            Err(e) => notes.push(crate::io::chain(&e)),
        }
    }
    lost = lost.max(tally.lost.values().fold(0u64, |a, &b| a.saturating_add(b)));
    // An instance whose trace_pipe is open cannot be removed (EBUSY).
    drop(pipes);
    for instance in [Some(main), moves].into_iter().flatten() {
        if let Err(e) = instance.remove() {
            notes.push(crate::io::chain(&e));
        }
    }
    let mut report = judge(target, &cpus, &tally, &before, &after, waited);
    report.lost_events = lost;
    notes.append(&mut report.notes);
    report.notes = notes;
    Ok(report)
}

/// The tasks of workload `w` by what the trace and `/proc` said: its
/// threads read before, those whose cgroup is its, those moved into its
/// cgroups, and everything they forked.
fn members(w: &Workload, tally: &Tally) -> HashSet<u32> {
    let ours = |cg: &str| w.cgroups.iter().any(|c| cgroup::is_within(cg, c));
    let mut set: HashSet<u32> = w.tids.iter().copied().collect();
    set.extend(
        tally
            .moves
            .iter()
            .filter(|(_, path)| ours(path))
            .map(|(pid, _)| *pid),
    );
    set.extend(tally.facts.iter().filter_map(|(pid, f)| {
        let f = f.as_ref()?;
        (!f.is_kthread() && ours(f.cgroup.as_deref()?)).then_some(*pid)
    }));
    // Forks come in order; a few passes cover any that did not.
    for _ in 0..4 {
        let before = set.len();
        for (parent, child) in &tally.forks {
            if set.contains(parent) {
                set.insert(*child);
            }
        }
        if set.len() == before {
            break;
        }
    }
    set
}

/// Rounds to one decimal: per-minute figures are estimates.
fn tenth(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// The report from what was gathered: each source judged, per minute.
fn judge(
    target: &Target,
    cpus: &CpuSet,
    tally: &Tally,
    before: &(Counts, Counts),
    after: &(Counts, Counts),
    waited: Duration,
) -> Report {
    let secs = waited.as_secs_f64();
    let rate = |count: u64| {
        if secs > 0.0 {
            count as f64 * 60.0 / secs
        } else {
            0.0
        }
    };
    let ctx = classify::Context {
        cpus,
        housekeeping: target.housekeeping.as_ref(),
        interrupts: target.interrupts.as_ref(),
    };
    let members: Vec<HashSet<u32>> = target.workloads.iter().map(|w| members(w, tally)).collect();
    let mut notes = Vec::new();
    let mut sources = Vec::new();
    let mut push = |cpu: u32, name: String, pid: Option<u32>, count: u64, v: classify::Verdict| {
        sources.push(Source {
            cpu,
            class: v.class,
            name,
            pid,
            count,
            per_minute: rate(count),
            why: v.why,
            cure: v.cure,
        });
    };
    for ((cpu, pid, comm), &count) in &tally.switches {
        let Some(&owner) = target.owners.get(cpu) else {
            continue;
        };
        let facts = tally.facts.get(pid).and_then(Option::as_ref);
        let kthread = facts.is_some_and(TaskFacts::is_kthread);
        if !kthread && members[owner].contains(pid) {
            continue;
        }
        let other = members
            .iter()
            .position(|m| m.contains(pid))
            .filter(|&i| i != owner && !kthread)
            .map(|i| target.workloads[i].key.as_str());
        let verdict = classify::task(&ctx, *cpu, *pid, comm, facts, other);
        push(*cpu, comm.clone(), Some(*pid), count, verdict);
    }
    for cpu in cpus.iter() {
        match after.0.since(&before.0, cpu) {
            Some(rows) => {
                for (row, n) in rows {
                    let (name, verdict) = classify::interrupt(&ctx, row);
                    push(cpu, name, None, n, verdict);
                }
            }
            None => notes.push(format!(
                "CPU {cpu} has no column in /proc/interrupts: offline?"
            )),
        }
        if let Some(rows) = after.1.since(&before.1, cpu) {
            for (row, n) in rows {
                push(
                    cpu,
                    row.label.clone(),
                    None,
                    n,
                    classify::softirq(&ctx, &row.label),
                );
            }
        }
    }
    let mut per_minute = PerMinute::default();
    for s in &sources {
        *per_minute.get_mut(s.class) += s.per_minute;
    }
    for class in Class::ALL {
        let v = per_minute.get_mut(class);
        *v = tenth(*v);
    }
    for s in &mut sources {
        s.per_minute = tenth(s.per_minute);
    }
    sources.sort_by(|a, b| {
        (a.cpu, a.class, std::cmp::Reverse(a.count), &a.name, a.pid).cmp(&(
            b.cpu,
            b.class,
            std::cmp::Reverse(b.count),
            &b.name,
            b.pid,
        ))
    });
    Report {
        duration_s: (secs * 1000.0).round() / 1000.0,
        cpus: cpus.clone(),
        lost_events: 0,
        per_minute,
        movable: sources.iter().any(|s| s.class.fails()),
        sources,
        notes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(flags: u32, cgroup: &str) -> Option<TaskFacts> {
        Some(TaskFacts {
            comm: String::new(),
            flags,
            allowed: Some("0-3".parse().unwrap()),
            cgroup: Some(cgroup.into()),
        })
    }

    fn switch(cpu: u32, pid: u32, comm: &str) -> TraceEvent {
        TraceEvent::Switch {
            cpu,
            prev_pid: 0,
            prev_comm: "swapper".into(),
            next_pid: pid,
            next_comm: comm.into(),
        }
    }

    /// CPU 1 is `a`'s, CPU 2 `b`'s. The workload's own threads (read
    /// before, by cgroup, forked, moved in) are not sources; `b`'s task on
    /// CPU 1 is a neighbour; a kthread is judged as one even with a reused
    /// id; switches to the idle task and other CPUs are not counted.
    #[test]
    fn the_workloads_own_tasks_are_not_noise() {
        let target = Target {
            owners: BTreeMap::from([(1, 0), (2, 1)]),
            workloads: vec![
                Workload {
                    key: "cgroup:a".into(),
                    cgroups: vec!["a".into()],
                    tids: BTreeSet::from([10]),
                },
                Workload {
                    key: "cgroup:b".into(),
                    cgroups: vec!["b".into()],
                    tids: BTreeSet::from([20]),
                },
            ],
            version: Version::V2,
            housekeeping: None,
            interrupts: None,
        };
        let cpus = target.cpus();
        let known: HashSet<u32> = [10, 20].into();
        let look = |pid: u32| match pid {
            11 => facts(0, "a/sub"),
            12 => facts(0, "system.slice"),
            13 => facts(PF, ""),
            _ => None,
        };
        const PF: u32 = classify::PF_KTHREAD;
        let mut tally = Tally::default();
        for e in [
            switch(1, 10, "app"),
            switch(1, 11, "app-child"),
            TraceEvent::Fork {
                cpu: 1,
                parent: 10,
                child: 14,
                child_comm: "app".into(),
            },
            TraceEvent::Fork {
                cpu: 1,
                parent: 14,
                child: 15,
                child_comm: "app".into(),
            },
            switch(1, 15, "grandchild"),
            TraceEvent::Attach {
                pid: 16,
                path: "a/x".into(),
            },
            switch(1, 16, "probe"),
            switch(1, 20, "b-task"),
            switch(1, 12, "stress"),
            switch(1, 12, "stress"),
            switch(1, 13, "kcompactd0"),
            switch(2, 0, "swapper/2"),
            switch(3, 12, "stress"),
            TraceEvent::Lost { cpu: 1, count: 5 },
        ] {
            tally.add(e, &cpus, &known, &look);
        }
        assert_eq!(tally.lost, BTreeMap::from([(1, 5)]));
        let counts = parse::parse_counts("CPU1 CPU2\n").unwrap();
        let r = judge(
            &target,
            &cpus,
            &tally,
            &(counts.clone(), counts.clone()),
            &(counts.clone(), counts),
            Duration::from_secs(30),
        );
        let got: Vec<(u32, &str, Class, u64, f64)> = r
            .sources
            .iter()
            .map(|s| (s.cpu, s.name.as_str(), s.class, s.count, s.per_minute))
            .collect();
        assert_eq!(
            got,
            [
                (1, "stress", Class::Neighbour, 2, 4.0),
                (1, "b-task", Class::Neighbour, 1, 2.0),
                (1, "kcompactd0", Class::Movable, 1, 2.0),
            ]
        );
        assert_eq!(r.sources[1].why, "a task of another workload, cgroup:b");
        assert!(r.movable);
        assert_eq!(r.per_minute.neighbour, 6.0);
        assert_eq!(r.duration_s, 30.0);
    }
}
