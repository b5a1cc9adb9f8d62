//! `pinctl status`: the daemon's [`api::Status`] as an operator reads it.
//!
//! - A summary (with a line per optional feature: `sections.rs`), the
//!   per-CPU map ([`render_map`]), the exclusive workloads (the map's
//!   legend), the pending ones, failing cgroups and the watchdog's findings.
//! - Rendering is pure: the document, the time and a [`Style`] in, text out,
//!   so it is tested on synthetic documents of any size.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::api::{self, Source};
use crate::cgroup::layout;
use crate::cpuset::CpuSet;
use crate::topology::Topology;

use super::style::{Style, visible};
use sections::{
    render_housekeeping, render_interrupts, render_nri, render_owner, render_partitions,
    render_power, render_runs, render_slurm,
};
pub(crate) use sections::{stays_nothing, stays_text};

mod sections;

/// The widest a map row gets, in cores (narrower with long tags).
pub const MAX_CORES_PER_ROW: usize = 16;

/// Where the document came from.
#[derive(Debug, Clone, Copy)]
pub enum Mode<'a> {
    /// Served by a running daemon.
    Online,
    /// Built by `--offline` from the state file and the live tree; the notes
    /// say what it could not know.
    Offline { notes: &'a [String] },
}

/// Letters for workload tags: `r` is the reserved marker, so never a tag.
const LETTERS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqstuvwxyz";

/// The tags of `n` workloads, all of one width: one letter up to 51, then a
/// letter and as many digits as needed.
pub fn tags(n: usize) -> Vec<String> {
    let letters = LETTERS.len();
    if n <= letters {
        return (0..n).map(|i| (LETTERS[i] as char).to_string()).collect();
    }
    let mut digits = 1;
    while letters * 10usize.pow(digits) < n {
        digits += 1;
    }
    let per_letter = 10usize.pow(digits);
    (0..n)
        .map(|i| {
            format!(
                "{}{:0width$}",
                LETTERS[i / per_letter] as char,
                i % per_letter,
                width = digits as usize
            )
        })
        .collect()
}

/// The pinned workloads in map order (by first CPU), with their tags.
pub fn tagged(status: &api::Status) -> Vec<(String, &api::Workload)> {
    let mut pinned: Vec<&api::Workload> = status
        .workloads
        .iter()
        .filter(|w| w.cpus.as_ref().is_some_and(|c| !c.is_empty()))
        .collect();
    pinned.sort_by_key(|w| (w.cpus.as_ref().and_then(CpuSet::first), w.key.clone()));
    tags(pinned.len()).into_iter().zip(pinned).collect()
}

/// A short phrase for where a request came from (`describe` gives the rule's
/// pattern and the bundle's path).
pub fn source_short(source: &Source) -> String {
    match source {
        Source::Xattr => "xattr".to_string(),
        Source::Annotation { .. } => "annotation".to_string(),
        Source::Rule { line, .. } => format!("rule line {line}"),
        Source::Kubelet => "kubelet".to_string(),
    }
}

/// The long form, for `describe`.
pub fn source_long(source: &Source) -> String {
    match source {
        Source::Xattr => format!(
            "the xattr {} on the cgroup directory",
            crate::cgroup::XATTR_CPUS
        ),
        Source::Annotation { bundle, key } => format!(
            "the OCI annotation {} in {}",
            visible(key),
            visible(&bundle.display().to_string())
        ),
        Source::Rule { pattern, line } => {
            format!("the [[rule]] matching {pattern:?} (line {line} of the configuration)")
        }
        Source::Kubelet => {
            "the kubelet's rule: a Guaranteed pod's container with a whole-number CPU limit"
                .to_string()
        }
    }
}

/// `3d 4h`, `3h 12m`, `5m 3s`, `42s`.
pub fn duration(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86_400, secs / 3_600 % 24, secs / 60 % 60, secs % 60);
    if d > 0 {
        format!("{d}d {h}h")
    } else if h > 0 {
        format!("{h}h {m}m")
    } else if m > 0 {
        format!("{m}m {s}s")
    } else {
        format!("{s}s")
    }
}

/// A user as `uid N (name)`, the name as this machine knows it.
pub(super) fn user(uid: u32) -> String {
    match nix::unistd::User::from_uid(uid.into()) {
        Ok(Some(u)) => format!("uid {uid} ({})", visible(&u.name)),
        _ => format!("uid {uid}"),
    }
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn list_or_none(set: &CpuSet) -> String {
    if set.is_empty() {
        "none".to_string()
    } else {
        set.to_string()
    }
}

fn join<T: ToString>(v: &[T]) -> String {
    if v.is_empty() {
        return "-".to_string();
    }
    v.iter().map(T::to_string).collect::<Vec<_>>().join(",")
}

/// The kubelet cgroup drivers the workloads' cgroup names follow.
fn drivers(status: &api::Status) -> Vec<&'static str> {
    let mut seen: Vec<&'static str> = status
        .workloads
        .iter()
        .flat_map(|w| &w.cgroups)
        .filter_map(|c| layout::classify(c).pod().map(|p| p.driver.as_str()))
        .collect();
    seen.sort_unstable();
    seen.dedup();
    seen
}

/// `pinctl status --ready`: the line to print when the daemon has done its
/// first reconcile, the error (exit 1) when it has not.
pub fn readiness(d: &api::Daemon) -> anyhow::Result<String> {
    if d.ready {
        Ok(format!("pinctld {} (pid {}) is ready", d.version, d.pid))
    } else {
        anyhow::bail!(
            "pinctld {} (pid {}) is starting: its first reconcile is not done",
            d.version,
            d.pid
        )
    }
}

/// Renders the whole status page. `now` is the Unix time in seconds (for the
/// uptime).
pub fn render(status: &api::Status, mode: Mode<'_>, style: Style, now: u64) -> String {
    let mut s = String::new();
    let topo = Topology::from_file(status.topology.clone()).ok();
    let tagged = tagged(status);

    // --- summary -----------------------------------------------------------
    match mode {
        Mode::Online => {
            let d = &status.daemon;
            let state = if d.ready {
                style.green("ready")
            } else {
                style.yellow("starting (first reconcile not done)")
            };
            let _ = writeln!(
                s,
                "{} {}, pid {}, up {}, {state}",
                style.bold("pinctld"),
                d.version,
                d.pid,
                duration(now.saturating_sub(d.started)),
            );
        }
        Mode::Offline { notes } => {
            let _ = writeln!(
                s,
                "{}",
                style.yellow(
                    "OFFLINE: not from pinctld; read from its state file and the live cgroup tree"
                )
            );
            for note in notes {
                let _ = writeln!(s, "  {}", visible(note));
            }
        }
    }
    let fieldw = |name: &str| {
        // Padding must count the plain name, not its escape codes.
        let pad = 13usize.saturating_sub(name.len() + 1);
        format!("{}:{}", style.bold(name), " ".repeat(pad))
    };
    let health = &status.health;
    let reasons = if health.reasons.is_empty() {
        String::new()
    } else {
        format!(": {}", visible(&health.reasons.join(", ")))
    };
    let _ = writeln!(
        s,
        "{}{}{reasons}",
        fieldw("Health"),
        style.health(&health.state)
    );
    let cfg = &status.config;
    let file = cfg.file.as_ref().map_or_else(
        || "the configuration".to_string(),
        |f| visible(&f.display().to_string()).into_owned(),
    );
    // Each thing about the configuration the operator should act on: a
    // `Config:` line.
    let mut config_line = |text: String| {
        let _ = writeln!(s, "{}{}", fieldw("Config"), style.yellow(&text));
    };
    if let Some(error) = &cfg.reload_error {
        config_line(format!(
            "reload failed, running on the one before: {}",
            visible(error)
        ));
    }
    if !cfg.restart_pending.is_empty() {
        config_line(format!(
            "{file} changes {}; applied at the next restart",
            visible(&cfg.restart_pending.join(", "))
        ));
    }
    if !cfg.unconfined.is_empty() {
        config_line(format!(
            "shared_cgroups {} not in the cpuset hierarchy: they confine nothing (on cgroup v1 systemd keeps its services in the root cpuset; CPUAffinity= in /etc/systemd/system.conf keeps them off exclusive CPUs)",
            visible(&cfg.unconfined.join(", "))
        ));
    }
    if let Some(refused) = status.partitions.as_ref().and_then(|p| p.refused.as_ref()) {
        config_line(visible(refused).into_owned());
    }
    if status.power.as_ref().is_some_and(|p| p.on && p.unsupported) {
        config_line(
            "[power] is on, but no CPU here has cpufreq, cpuidle, pm_qos or uncore files: no class can be set"
                .to_string(),
        );
    }
    for tree in &status.slurm.inside {
        config_line(format!(
            "Slurm's jobs run in {}, inside a subtree pinctl confines: the cgroups holding it are never narrowed, their other children are confined one by one, and their own processes are not. Slurm 25.11 and later can run in a slice of its own (CgroupSlice= in cgroup.conf)",
            visible(tree)
        ));
    }
    let mut hier = format!("cgroup {}", status.hierarchy);
    if status.hybrid {
        hier.push_str(" (hybrid: a v2 tree beside it)");
    }
    match drivers(status).as_slice() {
        [] => {}
        [one] => {
            let _ = write!(hier, ", kubelet cgroup driver {one}");
        }
        many => {
            let _ = write!(hier, ", kubelet cgroup drivers {}", many.join(" and "));
        }
    }
    let _ = writeln!(s, "{}{hier}", fieldw("Hierarchy"));
    if let Some(t) = &topo {
        let (min_t, max_t) = (t.min_threads_per_core(), t.threads_per_core());
        let threads = if min_t == max_t {
            plural(max_t, "thread", "threads")
        } else {
            format!("{min_t}-{max_t} threads")
        };
        let l3 = if t.l3_groups().is_empty() {
            String::new()
        } else {
            format!(", {}", plural(t.l3_groups().len(), "L3 group", "L3 groups"))
        };
        let _ = writeln!(
            s,
            "{}{}, {}{l3}, {} x {threads}: {} online ({})",
            fieldw("Topology"),
            plural(t.sockets().len(), "socket", "sockets"),
            plural(t.numa_nodes().len(), "NUMA node", "NUMA nodes"),
            plural(t.cores().len(), "core", "cores"),
            plural(status.online.len(), "CPU", "CPUs"),
            status.online,
        );
        let mut extra = Vec::new();
        if !t.offline().is_empty() {
            extra.push(format!("offline CPUs {}", t.offline()));
        }
        if !t.isolated().is_empty() {
            extra.push(format!("isolated CPUs {}", t.isolated()));
        }
        if !extra.is_empty() {
            let _ = writeln!(s, "{:13}{}", "", extra.join("; "));
        }
    }
    let _ = writeln!(
        s,
        "{}{} ({})",
        fieldw("Reserved"),
        list_or_none(&status.reserved),
        plural(status.reserved.len(), "CPU", "CPUs")
    );
    let reserved_shared = status.shared_pool.intersection(&status.reserved).len();
    let _ = writeln!(
        s,
        "{}{} ({}{})",
        fieldw("Shared pool"),
        list_or_none(&status.shared_pool),
        plural(status.shared_pool.len(), "CPU", "CPUs"),
        match reserved_shared {
            0 => String::new(),
            n if n == status.shared_pool.len() => ", all reserved".to_string(),
            n => format!(", {n} of them reserved"),
        }
    );
    // strict_reservation: what the managed subtrees' cgroups on the shared
    // pool get, without the reserved CPUs.
    if let Some(strict) = &status.strict_reservation {
        let why = if strict.fallback {
            ", all reserved: strict_reservation has no other CPU left"
        } else {
            ", none reserved: strict_reservation"
        };
        let _ = writeln!(
            s,
            "{}{} ({}{why})",
            fieldw("Pods' pool"),
            list_or_none(&strict.pool),
            plural(strict.pool.len(), "CPU", "CPUs"),
        );
    }
    let exclusive: usize = tagged
        .iter()
        .map(|(_, w)| w.cpus.as_ref().map_or(0, CpuSet::len))
        .sum();
    let pending: Vec<&api::Workload> = status
        .workloads
        .iter()
        .filter(|w| w.cpus.is_none())
        .collect();
    let _ = writeln!(
        s,
        "{}{} for {}; {} pending",
        fieldw("Exclusive"),
        plural(exclusive, "CPU", "CPUs"),
        plural(tagged.len(), "workload", "workloads"),
        pending.len(),
    );
    if !status.quotas_lifted.is_empty() {
        let _ = writeln!(
            s,
            "{}CFS quota lifted on {} (unthrottle_exclusive)",
            fieldw("Quotas"),
            plural(status.quotas_lifted.len(), "cgroup", "cgroups")
        );
    }
    if let Some(irqs) = &status.interrupts {
        render_interrupts(&mut s, irqs, style, &fieldw);
    }
    if let Some(power) = &status.power {
        render_power(&mut s, power, style, &fieldw);
    }
    if let Some(hk) = &status.housekeeping {
        render_housekeeping(&mut s, hk, style, &fieldw);
    }
    if let Some(parts) = &status.partitions {
        render_partitions(&mut s, parts, style, &fieldw);
    }
    render_slurm(&mut s, status, style, &fieldw);
    render_runs(&mut s, status, &fieldw);
    render_nri(&mut s, status, style, &fieldw);
    render_owner(&mut s, status, style, &fieldw);
    if let Mode::Online = mode {
        let c = &status.counters;
        let n = |v: u64, one: &str, many: &str| plural(v as usize, one, many);
        let errors = n(c.write_errors, "write error", "write errors");
        let _ = writeln!(
            s,
            "{}{} (last {} ms), {}, {}, {}, {} known",
            fieldw("Activity"),
            n(c.reconciles, "reconcile", "reconciles"),
            c.last_reconcile_ms,
            n(c.writes, "write", "writes"),
            if c.write_errors > 0 {
                style.red(&errors)
            } else {
                errors
            },
            n(c.repairs, "repair", "repairs"),
            n(c.cgroups, "cgroup", "cgroups"),
        );
    }

    // --- the map -------------------------------------------------------------
    if let Some(t) = &topo {
        s.push('\n');
        s.push_str(&render_map(status, t, &tagged, style));
    }

    // --- the legend: the workloads -------------------------------------------
    s.push('\n');
    if tagged.is_empty() {
        let _ = writeln!(s, "{} none", style.bold("Exclusive workloads:"));
    } else {
        let _ = writeln!(s, "{}", style.bold("Exclusive workloads:"));
        // The power class of each workload's CPUs, a column only while
        // `[power]` is in the document (issue #35).
        let class_of = |cpus: &CpuSet| -> Option<String> {
            let power = status.power.as_ref()?;
            let names: Vec<&str> = power
                .classes
                .iter()
                .filter(|c| !c.cpus.is_disjoint(cpus))
                .map(|c| c.name.as_str())
                .collect();
            Some(if names.is_empty() {
                "-".to_string()
            } else {
                visible(&names.join(",")).into_owned()
            })
        };
        let rows: Vec<Vec<String>> = tagged
            .iter()
            .map(|(tag, w)| {
                let cpus = w.cpus.clone().unwrap_or_default();
                let (numa, cores) = match &w.alignment {
                    Some(a) => (
                        join(&a.numa_nodes),
                        if a.whole_cores { "whole" } else { "split" }.to_string(),
                    ),
                    None => ("-".to_string(), "-".to_string()),
                };
                let mut row = vec![
                    tag.clone(),
                    cpus.to_string(),
                    cpus.len().to_string(),
                    numa,
                    cores,
                    source_short(&w.source),
                ];
                row.extend(class_of(&cpus));
                row
            })
            .collect();
        let mut head = vec!["TAG", "CPUS", "N", "NUMA", "CORES", "SOURCE"];
        if status.power.is_some() {
            head.push("CLASS");
        }
        let mut width: Vec<usize> = head.iter().map(|h| h.len()).collect();
        for r in &rows {
            for (w, cell) in width.iter_mut().zip(r) {
                *w = (*w).max(cell.len());
            }
        }
        // The tag is coloured, so it is padded by hand; the rest is plain.
        let line = |tag: String, cells: &[String]| {
            let mut l = format!("  {tag}{}  ", " ".repeat(width[0] - cells[0].len()));
            for (i, (cell, w)) in cells.iter().zip(&width).enumerate().skip(1) {
                // The count is a number: right-aligned.
                if i == 2 {
                    let _ = write!(l, "{cell:>w$}  ");
                } else {
                    let _ = write!(l, "{cell:<w$}  ");
                }
            }
            l
        };
        let head: Vec<String> = head.into_iter().map(str::to_string).collect();
        let _ = writeln!(
            s,
            "{}",
            style.dim(&format!("{}WORKLOAD", line(head[0].clone(), &head)))
        );
        for (i, ((_, w), r)) in tagged.iter().zip(&rows).enumerate() {
            let _ = writeln!(s, "{}{}", line(style.tag(i, &r[0]), r), visible(&w.key));
        }
    }
    if !pending.is_empty() {
        let _ = writeln!(s, "\n{}", style.bold("Pending (in the shared pool):"));
        for w in &pending {
            let why = match &w.pending {
                Some(p) => format!(
                    "wants {}, {} available: {}",
                    p.requested,
                    p.available,
                    visible(&p.reason)
                ),
                None => format!("wants {}", w.requested),
            };
            let _ = writeln!(s, "  {}  ({})", visible(&w.key), source_short(&w.source));
            let _ = writeln!(s, "    {}", style.yellow(&why));
        }
    }
    let resizing: Vec<(&api::Workload, &api::Pending)> = (status.workloads.iter())
        .filter_map(|w| Some((w, w.resize.as_ref()?)))
        .collect();
    if !resizing.is_empty() {
        let _ = writeln!(
            s,
            "\n{}",
            style.bold("Resizes pending (each keeps its CPUs):")
        );
        for (w, r) in resizing {
            let _ = writeln!(s, "  {}  ({})", visible(&w.key), source_short(&w.source));
            let _ = writeln!(
                s,
                "    {}",
                style.yellow(&format!("wants {}: {}", r.requested, visible(&r.reason)))
            );
        }
    }

    let off: Vec<(&api::Workload, &api::Near)> = (status.workloads.iter())
        .filter_map(|w| Some((w, w.near.as_ref()?)))
        .filter(|(w, n)| n.aligned(w.cpus.as_ref()) == Some(false))
        .collect();
    if !off.is_empty() {
        let _ = writeln!(s, "\n{}", style.bold("Placed off their devices:"));
        for (w, n) in off {
            let cpus = w.cpus.as_ref().map_or(0, CpuSet::len);
            let nodes: Vec<String> = n.nodes.iter().map(u32::to_string).collect();
            let _ = writeln!(s, "  {}  ({})", visible(&w.key), source_short(&w.source));
            let _ = writeln!(
                s,
                "    {}",
                style.yellow(&format!(
                    "{} of its {cpus} CPUs on its devices' NUMA {} {} ({})",
                    n.cpus_near.unwrap_or(0),
                    if nodes.len() == 1 { "node" } else { "nodes" },
                    nodes.join(","),
                    visible(&n.alignment)
                ))
            );
        }
    }

    // --- trouble ---------------------------------------------------------------
    if !status.failing.is_empty() {
        let _ = writeln!(s, "\n{}", style.bold("Failing cgroups:"));
        for f in &status.failing {
            let errno = f.errno.map(|e| format!(" (errno {e})")).unwrap_or_default();
            let _ = writeln!(
                s,
                "  {}: {}{errno}",
                visible(&f.cgroup),
                style.red(&visible(&f.error))
            );
        }
    }
    let wd = &status.watchdog;
    let trouble = !(wd.hung_paths.is_empty()
        && wd.stuck_tasks.is_empty()
        && wd.frozen.is_empty()
        && wd.missing_paths.is_empty()
        && wd.unwatched_cgroups == 0
        && wd.state_error.is_none());
    if trouble {
        let _ = writeln!(s, "\n{}", style.bold("Watchdog:"));
        for h in &wd.hung_paths {
            let _ = writeln!(
                s,
                "  hung path {} ({} hung {} ago)",
                visible(&h.path.display().to_string()),
                visible(&h.op),
                duration(h.secs)
            );
        }
        for t in &wd.stuck_tasks {
            let wchan = t
                .wchan
                .as_deref()
                .map(|w| format!(", in {}", visible(w)))
                .unwrap_or_default();
            let uid = t.uid.map(|u| format!(", uid {u}")).unwrap_or_default();
            let _ = writeln!(
                s,
                "  task {} (pid {}{uid}, {}) of {} in D state for {}{wchan}",
                t.tid,
                t.pid,
                visible(&t.comm),
                visible(&t.cgroup),
                duration(t.secs)
            );
        }
        for f in &wd.frozen {
            let thawed = if f.thawed { ", thawed" } else { "" };
            let owner = f.owner.map(|u| format!(" (uid {u})")).unwrap_or_default();
            let _ = writeln!(
                s,
                "  {}{owner} frozen for {}{thawed}",
                visible(&f.cgroup),
                duration(f.secs)
            );
        }
        if wd.unwatched_cgroups > 0 {
            let _ = writeln!(
                s,
                "  {} cgroups without an inotify watch (fs.inotify.max_user_watches?): reconciling every {} s",
                wd.unwatched_cgroups,
                api::UNWATCHED_RECONCILE_SECS
            );
        }
        if let Some(e) = &wd.state_error {
            let _ = writeln!(s, "  state file not saved: {}", visible(e));
        }
        for m in &wd.missing_paths {
            let _ = writeln!(
                s,
                "  missing {}: {}",
                visible(&m.path.display().to_string()),
                visible(&m.problem)
            );
        }
    }
    if wd.repairs > 0 {
        let _ = writeln!(
            s,
            "\n{} made since start (pinctl events lists them)",
            plural(wd.repairs as usize, "repair", "repairs")
        );
    }
    s
}

/// The per-CPU map: one row per L3 group (NUMA node without L3) under a
/// heading per socket, at most [`MAX_CORES_PER_ROW`] cores a row, each row
/// starting with its CPU list. A cell per physical core, its threads side
/// by side in CPU order: the owner's tag ([`tags`]), `.` the shared pool,
/// `r` reserved, `-` offline.
pub fn render_map(
    status: &api::Status,
    topo: &Topology,
    tagged: &[(String, &api::Workload)],
    style: Style,
) -> String {
    let mut owner: BTreeMap<u32, usize> = BTreeMap::new();
    for (i, (_, w)) in tagged.iter().enumerate() {
        for cpu in w.cpus.iter().flatten() {
            owner.entry(cpu).or_insert(i);
        }
    }
    let width = tagged.first().map_or(1, |(t, _)| t.len());
    let threads = topo.threads_per_core();
    // A core with fewer threads than the most: its missing ones are offline
    // when the kernel lists offline CPUs, else it simply has fewer (hybrid).
    let pad_mark = if topo.offline().is_empty() { " " } else { "-" };
    let mut drew_offline = false;
    let cell_width = width * threads;
    let max_per_row = (64 / (cell_width + 1)).clamp(4, MAX_CORES_PER_ROW);

    // One mark per thread, plain and coloured.
    let mark = |cpu: u32| -> (String, String) {
        if let Some(&i) = owner.get(&cpu) {
            let tag = &tagged[i].0;
            return (tag.clone(), style.tag(i, tag));
        }
        let (c, paint): (&str, fn(Style, &str) -> String) = if status.reserved.contains(cpu) {
            ("r", Style::bold)
        } else if status.shared_pool.contains(cpu) {
            (".", Style::dim)
        } else {
            // Online, yet neither shared, reserved nor anyone's: the document
            // contradicts itself; show it rather than hide it.
            ("?", Style::red)
        };
        let plain = c.repeat(width);
        let coloured = paint(style, &plain);
        (plain, coloured)
    };

    struct Row {
        label: String,
        cpus: String,
        cells: Vec<String>,
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} one cell per core, its threads in CPU order",
        style.bold("CPU map:")
    );
    let many_nodes = topo.numa_nodes().len() > 1;
    let mut sections: Vec<(String, Vec<Row>)> = Vec::new();
    for (socket, socket_cpus) in topo.sockets() {
        let nodes: Vec<u32> = topo
            .numa_nodes()
            .iter()
            .filter(|(_, c)| !c.is_disjoint(socket_cpus))
            .map(|(n, _)| *n)
            .collect();
        let heading = if many_nodes {
            format!(
                "Socket {socket} ({} {})",
                if nodes.len() == 1 {
                    "NUMA node"
                } else {
                    "NUMA nodes"
                },
                join(&nodes)
            )
        } else {
            format!("Socket {socket}")
        };
        let mut rows = Vec::new();
        for slice in topo.slices().iter().filter(|x| x.socket == *socket) {
            let mut label = format!("node {}", slice.numa);
            if let Some(l3) = slice.l3 {
                let _ = write!(label, "  L3 {l3}");
            }
            // Rows of equal length: 16 cores at 12 a row are two rows of 8.
            let n_rows = slice.cores.len().div_ceil(max_per_row);
            let per_row = slice.cores.len().div_ceil(n_rows.max(1)).max(1);
            for chunk in slice.cores.chunks(per_row) {
                let mut cpus = CpuSet::new();
                let cells = chunk
                    .iter()
                    .map(|&ci| {
                        let core = &topo.cores()[ci];
                        let mut cell = String::new();
                        for &cpu in &core.cpus {
                            cpus.insert(cpu);
                            cell.push_str(&mark(cpu).1);
                        }
                        for _ in core.cpus.len()..threads {
                            cell.push_str(&style.red(&pad_mark.repeat(width)));
                            drew_offline |= pad_mark == "-";
                        }
                        cell
                    })
                    .collect();
                rows.push(Row {
                    label: label.clone(),
                    cpus: cpus.to_string(),
                    cells,
                });
            }
        }
        sections.push((heading, rows));
    }
    let label_w = sections
        .iter()
        .flat_map(|(_, r)| r)
        .map(|r| r.label.len())
        .max()
        .unwrap_or(0);
    let cpus_w = sections
        .iter()
        .flat_map(|(_, r)| r)
        .map(|r| r.cpus.len())
        .max()
        .unwrap_or(0);
    for (heading, rows) in &sections {
        let _ = writeln!(out, "{heading}");
        for row in rows {
            let mut line = format!("  {:<label_w$}  {:<cpus_w$}  ", row.label, row.cpus);
            for (i, cell) in row.cells.iter().enumerate() {
                if i > 0 {
                    // A wider gap every 4 cores helps counting along a row.
                    line.push_str(if i % 4 == 0 { "  " } else { " " });
                }
                line.push_str(cell);
            }
            let _ = writeln!(out, "{}", line.trim_end());
        }
    }
    let mut key = vec![
        format!("{} shared pool", style.dim(".")),
        format!("{} reserved", style.bold("r")),
    ];
    if drew_offline {
        key.push(format!("{} offline thread", style.red("-")));
    }
    if !tagged.is_empty() {
        let first = &tagged[0].0;
        let last = &tagged[tagged.len() - 1].0;
        let range = if tagged.len() == 1 {
            first.clone()
        } else {
            format!("{first}..{last}")
        };
        key.push(format!("{range} exclusive workloads (below)"));
    }
    let _ = writeln!(out, "  {}", key.join("   "));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_one_letter_up_to_51_then_letter_and_digits() {
        let t = tags(51);
        assert_eq!(t[0], "A");
        assert_eq!(t[25], "Z");
        assert_eq!(t[26], "a");
        assert!(!t.contains(&"r".to_string()), "r is the reserved marker");
        assert_eq!(t[50], "z");
        let t = tags(52);
        assert_eq!(
            (t[0].as_str(), t[9].as_str(), t[10].as_str()),
            ("A0", "A9", "B0")
        );
        assert_eq!(t[51], "F1");
        let t = tags(600);
        assert_eq!(t[0], "A00");
        assert!(t.iter().all(|x| x.len() == 3));
        let mut uniq = t.clone();
        uniq.sort();
        uniq.dedup();
        assert_eq!(uniq.len(), 600);
    }

    #[test]
    fn durations_read_at_a_glance() {
        assert_eq!(duration(42), "42s");
        assert_eq!(duration(303), "5m 3s");
        assert_eq!(duration(3 * 3600 + 12 * 60 + 5), "3h 12m");
        assert_eq!(duration(3 * 86_400 + 4 * 3600), "3d 4h");
    }
}
