//! `pinctl describe TARGET`: one workload, where its CPUs came from, how they
//! sit on the machine, what of the kernel's stays on them, its cgroups and
//! its history of writes.
//!
//! Which workload TARGET names is [`find`]'s pure rule; the page is
//! [`render`].

use std::fmt::Write as _;
use std::path::Path;

use crate::api::{self, Event, EventKind, Workload};
use crate::bootline::PARAMS;
use crate::cgroup::{self, layout};
use crate::cpuset::CpuSet;
use crate::topology::Topology;

use super::events::{concerns, format_event};
use super::status::{duration, source_long, stays_nothing, stays_text};
use super::style::{Style, visible};

/// What TARGET matched.
#[derive(Debug)]
pub enum Found<'a> {
    One(&'a Workload),
    Ambiguous(Vec<&'a Workload>),
    Nothing,
}

fn found(mut v: Vec<&Workload>) -> Option<Found<'_>> {
    v.sort_by(|a, b| a.key.cmp(&b.key));
    v.dedup_by(|a, b| a.key == b.key);
    match v.len() {
        0 => None,
        1 => Some(Found::One(v[0])),
        _ => Some(Found::Ambiguous(v)),
    }
}

/// The relative cgroup paths TARGET may mean: under `cgroup_root` when it
/// starts with it, else as it is relative to the hierarchy's root (with a
/// leading `/` as `/proc/PID/cgroup` prints it); in v1 also without a leading
/// controller directory (`cpuset/kubepods/...`).
fn paths(target: &str, cgroup_root: &Path, v1: bool) -> Vec<String> {
    let rel = match Path::new(target).strip_prefix(cgroup_root) {
        Ok(rest) if target.starts_with('/') => rest.to_string_lossy().into_owned(),
        _ => target.to_string(),
    };
    let rel = rel.trim_matches('/').to_string();
    if rel.is_empty() {
        return Vec::new();
    }
    let mut out = vec![rel.clone()];
    if v1 && let Some((_, below)) = rel.split_once('/') {
        out.push(below.to_string());
    }
    out
}

/// The pod UID of a workload: from its key, else from its cgroups' names.
fn pod_uid(w: &Workload) -> Option<String> {
    if let Some(rest) = w.key.strip_prefix("pod:") {
        return rest.split('/').next().map(str::to_string);
    }
    w.cgroups
        .iter()
        .find_map(|c| layout::classify(c).pod().map(|p| p.uid.clone()))
}

/// Finds the workload TARGET names. Tried in order, the first kind that
/// matches anything wins:
/// - a workload key (`pod:<uid>/<name>`, `cgroup:<path>`, or `<uid>/<name>`);
/// - a cgroup path, relative to the cgroup root (`kubepods/...`, or
///   `/kubepods/...` as `/proc/PID/cgroup` shows it) or absolute under it (a
///   v1 path may name its controller): the workload that has it or a cgroup
///   above it, else the workloads below it;
/// - a pod UID, with dashes or the systemd driver's underscores;
/// - a container id, or any part of a cgroup's last component.
///
/// More than one workload is ambiguous: the candidates are listed.
pub fn find<'a>(status: &'a api::Status, target: &str, cgroup_root: &Path) -> Found<'a> {
    let all = &status.workloads;
    let target = target.trim();
    if target.is_empty() {
        return Found::Nothing;
    }
    // 1. A key.
    let keyed: Vec<&Workload> = all
        .iter()
        .filter(|w| w.key == target || w.key.strip_prefix("pod:") == Some(target))
        .collect();
    if let Some(f) = found(keyed) {
        return f;
    }
    // 2. A cgroup path: the workload holding it (or a cgroup above it), else
    // those below it (a pod's cgroup names its containers).
    for rel in paths(target, cgroup_root, status.hierarchy == "v1") {
        let holding: Vec<&Workload> = all
            .iter()
            .filter(|w| w.cgroups.iter().any(|c| cgroup::is_within(&rel, c)))
            .collect();
        if let Some(f) = found(holding) {
            return f;
        }
        let below: Vec<&Workload> = all
            .iter()
            .filter(|w| w.cgroups.iter().any(|c| cgroup::is_within(c, &rel)))
            .collect();
        if let Some(f) = found(below) {
            return f;
        }
    }
    // 3. A pod UID.
    let uid = target
        .strip_prefix("pod:")
        .unwrap_or(target)
        .replace('_', "-")
        .to_ascii_lowercase();
    let pods: Vec<&Workload> = all
        .iter()
        .filter(|w| pod_uid(w).is_some_and(|u| u == uid))
        .collect();
    if let Some(f) = found(pods) {
        return f;
    }
    // 4. A container id, or part of a cgroup's name.
    if !target.contains('/') {
        let needle = target.to_ascii_lowercase();
        let named: Vec<&Workload> = all
            .iter()
            .filter(|w| {
                w.cgroups.iter().any(|c| {
                    c.rsplit('/')
                        .next()
                        .is_some_and(|name| name.to_ascii_lowercase().contains(&needle))
                })
            })
            .collect();
        if let Some(f) = found(named) {
            return f;
        }
    }
    Found::Nothing
}

/// The candidates of an ambiguous TARGET, one per line.
pub fn render_candidates(target: &str, candidates: &[&Workload]) -> String {
    let mut s = format!(
        "{target:?} matches {} workloads; name one of them:\n",
        candidates.len()
    );
    for w in candidates {
        let cpus = w
            .cpus
            .as_ref()
            .map_or_else(|| "pending".to_string(), CpuSet::to_string);
        let _ = writeln!(
            s,
            "  {}  ({cpus}; {})",
            visible(&w.key),
            visible(w.cgroups.first().map_or("", String::as_str))
        );
    }
    s
}

/// The page of one workload. `events` are the daemon's recent events (all
/// of them: those of its cgroups are picked here); `offset` the local time's
/// offset from UTC in seconds.
pub fn render(
    status: &api::Status,
    w: &Workload,
    events: &[Event],
    offset: i64,
    style: Style,
) -> String {
    let mut s = String::new();
    let topo = Topology::from_file(status.topology.clone()).ok();
    let field = |name: &str| {
        let pad = 12usize.saturating_sub(name.len() + 1);
        format!("{}:{}", style.bold(name), " ".repeat(pad))
    };
    let _ = writeln!(s, "{}{}", field("Workload"), visible(&w.key));
    let _ = writeln!(s, "{}{}", field("Source"), source_long(&w.source));
    if let Some(run) = status.runs.running.iter().find(|r| r.key == w.key) {
        let _ = writeln!(
            s,
            "{}pinctl run by {}: {}",
            field("Run"),
            super::status::user(run.uid),
            visible(&run.command.join(" "))
        );
    }
    let _ = writeln!(
        s,
        "{}{} exclusive CPU{}",
        field("Requested"),
        w.requested,
        if w.requested == 1 { "" } else { "s" }
    );
    if !w.numa.is_empty() {
        let nodes: Vec<String> = w.numa.iter().map(u32::to_string).collect();
        let _ = writeln!(
            s,
            "{}NUMA nodes {} first (from its rule or xattr)",
            field("Preference"),
            nodes.join(",")
        );
    }
    match (&w.cpus, &w.pending) {
        (Some(cpus), _) => {
            let _ = writeln!(s, "{}{}", field("CPUs"), style.green(&cpus.to_string()));
        }
        (None, Some(p)) => {
            // strict_reservation: a managed subtree's waits off the reserved
            // CPUs.
            let managed = w.cgroups.iter().any(|c| {
                status
                    .config
                    .managed
                    .iter()
                    .any(|m| crate::cgroup::is_within(c, m))
            });
            let pool = match &status.strict_reservation {
                Some(strict) if managed => &strict.pool,
                _ => &status.shared_pool,
            };
            let _ = writeln!(
                s,
                "{}{}",
                field("CPUs"),
                style.yellow(&format!(
                    "none yet, pending in the shared pool ({}): wants {}, {} available: {}",
                    pool,
                    p.requested,
                    p.available,
                    visible(&p.reason)
                ))
            );
        }
        (None, None) => {
            let _ = writeln!(s, "{}{}", field("CPUs"), style.yellow("none yet (pending)"));
        }
    }
    if let (Some(cpus), Some(power)) = (&w.cpus, &status.power) {
        for c in power.classes.iter().filter(|c| !c.cpus.is_disjoint(cpus)) {
            let files: Vec<String> = power
                .files
                .iter()
                .filter(|f| f.cpu.is_some_and(|n| cpus.contains(n)) && f.class == c.name)
                .map(|f| {
                    let name = f.file.rsplit('/').next().unwrap_or(&f.file);
                    let read = f.read.as_deref().unwrap_or("?");
                    let shown = if read == f.value {
                        format!("{name}={read}")
                    } else {
                        format!("{name}={read} (wants {})", f.value)
                    };
                    format!("cpu{} {}", f.cpu.unwrap_or_default(), visible(&shown))
                })
                .collect();
            let _ = writeln!(s, "{}class {}", field("Power"), visible(&c.name));
            for f in files {
                let _ = writeln!(s, "{:12}{f}", "");
            }
        }
    }
    if let Some(r) = &w.resize {
        let _ = writeln!(
            s,
            "{}{}",
            field("Resize"),
            style.yellow(&format!(
                "pending: wants {}, {} free: {}",
                r.requested,
                r.available,
                visible(&r.reason)
            ))
        );
    }
    if let (Some(cpus), Some(a)) = (&w.cpus, &w.alignment) {
        let list = |what: &str, v: &[u32]| {
            let items: Vec<String> = v.iter().map(u32::to_string).collect();
            format!("{what} {}", items.join(","))
        };
        let mut parts = vec![
            list(
                if a.sockets.len() == 1 {
                    "socket"
                } else {
                    "sockets"
                },
                &a.sockets,
            ),
            list(
                if a.numa_nodes.len() == 1 {
                    "NUMA node"
                } else {
                    "NUMA nodes"
                },
                &a.numa_nodes,
            ),
        ];
        if !a.l3_groups.is_empty() {
            parts.push(list(
                if a.l3_groups.len() == 1 {
                    "L3 group"
                } else {
                    "L3 groups"
                },
                &a.l3_groups,
            ));
        }
        let cores = match topo.as_ref().map(|t| t.core_split(cpus)) {
            Some((1, 0)) => "1 whole core".to_string(),
            Some((whole, 0)) => format!("{whole} whole cores"),
            Some((whole, split)) => {
                style.yellow(&format!("{} whole, {split} shared with other CPUs", whole))
            }
            None if a.whole_cores => "whole cores".to_string(),
            None => style.yellow("split cores"),
        };
        parts.push(cores);
        let _ = writeln!(s, "{}{}", field("Alignment"), parts.join("; "));
    }
    if let Some(near) = &w.near {
        render_near(&mut s, w.cpus.as_ref(), near, style, &field);
    }
    let _ = writeln!(
        s,
        "{}{}",
        field("Cgroups"),
        visible(w.cgroups.first().map_or("none", String::as_str))
    );
    for c in w.cgroups.iter().skip(1) {
        let _ = writeln!(s, "{:12}{}", "", visible(c));
    }
    // Its own cgroups and those above it (its pod's quota).
    let concerns_it = |rel: &str| {
        w.cgroups
            .iter()
            .any(|c| cgroup::is_within(rel, c) || cgroup::is_within(c, rel))
    };
    let lifted: Vec<&str> = status
        .quotas_lifted
        .iter()
        .filter(|q| concerns_it(q))
        .map(String::as_str)
        .collect();
    if !lifted.is_empty() {
        let _ = writeln!(
            s,
            "{}CFS quota lifted on {} (unthrottle_exclusive)",
            field("Quota"),
            visible(&lifted.join(", "))
        );
    }
    if let Some(parts) = &status.partitions {
        for p in parts.isolated.iter().filter(|p| concerns_it(&p.cgroup)) {
            let _ = writeln!(
                s,
                "{}{} is an isolated partition of CPUs {}",
                field("Isolation"),
                visible(&p.cgroup),
                p.cpus
            );
        }
        for f in parts.failing.iter().filter(|f| concerns_it(&f.cgroup)) {
            let _ = writeln!(
                s,
                "{}{}",
                field("Isolation"),
                style.red(&visible(&format!(
                    "{} is no partition: {}; pinned by its cpuset alone",
                    f.cgroup, f.reason
                )))
            );
        }
    }
    if let (Some(cpus), Some(hk)) = (&w.cpus, &status.housekeeping) {
        render_quiet(&mut s, cpus, hk, style, &field);
    }
    for f in status
        .failing
        .iter()
        .filter(|f| w.cgroups.iter().any(|c| cgroup::is_within(&f.cgroup, c)))
    {
        let errno = f.errno.map(|e| format!(" (errno {e})")).unwrap_or_default();
        let _ = writeln!(
            s,
            "{}{}: {}{errno}",
            field("Failing"),
            visible(&f.cgroup),
            style.red(&visible(&f.error))
        );
    }
    for t in status
        .watchdog
        .stuck_tasks
        .iter()
        .filter(|t| w.cgroups.iter().any(|c| cgroup::is_within(&t.cgroup, c)))
    {
        let _ = writeln!(
            s,
            "{}task {} ({}) in D state for {}",
            field("Stuck"),
            t.tid,
            visible(&t.comm),
            duration(t.secs)
        );
    }

    if let (Some(cpus), Some(t)) = (&w.cpus, &topo) {
        let _ = writeln!(
            s,
            "\n{}",
            style.dim("  CPU  CORE  SOCKET  NUMA    L3  ISOLATED")
        );
        for cpu in cpus.iter() {
            match t.cpu(cpu) {
                Some(c) => {
                    let l3 = c.l3.map_or_else(|| "-".to_string(), |l| l.to_string());
                    let iso = if t.isolated().contains(cpu) {
                        "yes"
                    } else {
                        ""
                    };
                    let line = format!(
                        "{:>5} {:>5} {:>7} {:>5} {:>5}  {iso}",
                        c.cpu, c.core, c.socket, c.numa, l3
                    );
                    let _ = writeln!(s, "{}", line.trim_end());
                }
                None => {
                    let _ = writeln!(s, "{cpu:>5}  {}", style.red("not online"));
                }
            }
        }
    }

    let mine: Vec<&Event> = events
        .iter()
        .filter(|e| {
            w.cgroups.iter().any(|c| concerns(e, c))
                || matches!(&e.what, EventKind::Write { workload: Some(k), .. } if *k == w.key)
                || matches!(&e.what, EventKind::Resize { workload: k, .. } if *k == w.key)
                || matches!(&e.what, EventKind::Power { workload: Some(k), .. } if *k == w.key)
        })
        .collect();
    let _ = writeln!(
        s,
        "\n{} ({} in the daemon's recent events):",
        style.bold("History"),
        plural_writes(mine.len())
    );
    for e in mine {
        let _ = writeln!(s, "  {}", format_event(e, offset, style));
    }
    s
}

/// `housekeeping` for a pinned workload: whether its CPUs are kept clear,
/// what stays on each of them, and the node's boot line (for every
/// exclusive CPU, not these alone: the kernel takes one line) with what each
/// part of it removes.
/// The devices a workload drives, one line each (how each was found, where
/// it sits or why that is not known), then whether its CPUs sit near them.
fn render_near(
    s: &mut String,
    cpus: Option<&CpuSet>,
    near: &api::Near,
    style: Style,
    field: &dyn Fn(&str) -> String,
) {
    for (i, d) in near.devices.iter().enumerate() {
        let name = if i == 0 {
            field("Devices")
        } else {
            " ".repeat(12)
        };
        let place = match (&d.unknown, d.nodes.as_slice()) {
            (Some(why), _) => style.yellow(&format!("not placed: {}", visible(why))),
            (None, []) => style.yellow("on no NUMA node of this machine"),
            (None, nodes) => {
                let pci = d.pci.as_ref().map(|p| format!("PCI {p}, "));
                format!("{}{}", pci.unwrap_or_default(), nodes_text(nodes))
            }
        };
        let _ = writeln!(
            s,
            "{name}{} ({}): {place}",
            visible(&d.name),
            visible(&d.found)
        );
    }
    let line = match (cpus, near.cpus_near) {
        _ if near.alignment == "none" => {
            "device_alignment \"none\": its devices are not looked at".to_string()
        }
        _ if near.nodes.is_empty() => style.yellow("no device placed: its CPUs go anywhere"),
        (Some(c), Some(n)) if n == c.len() => format!(
            "its CPUs on its devices' {} ({})",
            nodes_text(&near.nodes),
            near.alignment
        ),
        (Some(c), Some(n)) => style.yellow(&format!(
            "{n} of its {} CPUs on its devices' {}, the rest elsewhere: no more room \
             there when it was placed ({})",
            c.len(),
            nodes_text(&near.nodes),
            near.alignment
        )),
        _ => format!(
            "its CPUs go on its devices' {} ({})",
            nodes_text(&near.nodes),
            near.alignment
        ),
    };
    let _ = writeln!(s, "{}{line}", field("Near"));
}

/// `NUMA node 1`, `NUMA nodes 0,1`.
fn nodes_text(nodes: &[u32]) -> String {
    let list: Vec<String> = nodes.iter().map(u32::to_string).collect();
    match nodes.len() {
        1 => format!("NUMA node {}", list[0]),
        _ => format!("NUMA nodes {}", list.join(",")),
    }
}

fn render_quiet(
    s: &mut String,
    cpus: &CpuSet,
    hk: &api::Housekeeping,
    style: Style,
    field: &dyn Fn(&str) -> String,
) {
    let outside = cpus.difference(&hk.away);
    let quiet = if !hk.on {
        style.yellow("housekeeping off: what was moved off its CPUs is being put back")
    } else if outside.is_empty() {
        "the kernel's movable work is kept off its CPUs (housekeeping)".to_string()
    } else {
        style.yellow(&format!(
            "housekeeping on, but CPUs {outside} were not kept clear at its last pass"
        ))
    };
    let _ = writeln!(s, "{}{quiet}", field("Quiet"));
    let mut stays: Vec<&api::Stays> = (hk.stays.iter())
        .filter(|st| cpus.contains(st.cpu) && !stays_nothing(st))
        .collect();
    stays.sort_by_key(|st| st.cpu);
    for (i, st) in stays.iter().enumerate() {
        let name = if i == 0 {
            field("Stays")
        } else {
            " ".repeat(12)
        };
        let _ = writeln!(s, "{name}CPU {}: {}", st.cpu, stays_text(st, 8, 4));
    }
    if let Some(boot) = &hk.boot {
        let _ = writeln!(s, "{}{}", field("Boot line"), visible(boot));
        let _ = writeln!(
            s,
            "{:12}{}",
            "",
            style.dim(
                "the node's, for all its exclusive CPUs; would remove what stays; needs a reboot:"
            )
        );
        let width = PARAMS.iter().map(|p| p.name.len()).max().unwrap_or(0);
        for p in PARAMS {
            let _ = writeln!(s, "{:12}  {:width$}  {}", "", p.name, p.removes);
        }
    }
}

fn plural_writes(n: usize) -> String {
    match n {
        1 => "1 write".to_string(),
        n => format!("{n} writes"),
    }
}
