//! The optional lines of `pinctl status`, each with what lies below it:
//! `Interrupts:` (`irq_affinity`), `Power:` (`[power]`), `Quiet CPUs:`
//! (`housekeeping`), `Partitions:` (`isolation`),
//! `Slurm:` (Slurm's jobs and their conflicts), `Runs:` (`pinctl run`) and
//! `NRI:` (`[nri]`).

use std::fmt::Write as _;

use super::{list_or_none, plural, user};
use crate::api;
use crate::cli::style::{Style, visible};

/// The `Interrupts:` line (`irq_affinity`), and what the operator should
/// change below it.
pub(super) fn render_interrupts(
    s: &mut String,
    irqs: &api::Interrupts,
    style: Style,
    fieldw: &dyn Fn(&str) -> String,
) {
    let mut line = if irqs.on {
        format!(
            "{} kept off {}",
            plural(irqs.steered.len(), "interrupt", "interrupts"),
            if irqs.away.is_empty() {
                "exclusive CPUs (none now)".to_string()
            } else {
                format!("CPUs {}", irqs.away)
            }
        )
    } else {
        format!(
            "irq_affinity off: {} being put back",
            plural(irqs.steered.len(), "interrupt", "interrupts")
        )
    };
    if !irqs.refused.is_empty() {
        let names: Vec<&str> = irqs.refused.iter().map(|r| r.irq.as_str()).collect();
        let _ = write!(
            line,
            "; {} refused: {}",
            plural(names.len(), "interrupt", "interrupts"),
            visible(&names.join(", "))
        );
    }
    if !irqs.failed.is_empty() {
        let names: Vec<&str> = irqs.failed.iter().map(|r| r.irq.as_str()).collect();
        let _ = write!(
            line,
            "; {}: {}",
            style.red(&format!("{} failing", names.len())),
            visible(&names.join(", "))
        );
    }
    if irqs.overwritten > 0 {
        let _ = write!(line, "; written over {} times", irqs.overwritten);
    }
    let _ = writeln!(s, "{}{line}", fieldw("Interrupts"));
    let first_failure = irqs.failed.first().map(|f| &f.error);
    for e in irqs.error.iter().chain(first_failure) {
        let _ = writeln!(s, "{:13}{}", "", style.red(&visible(e)));
    }
    for advice in &irqs.advice {
        let _ = writeln!(s, "{:13}{}", "", style.yellow(&visible(advice)));
    }
}

/// The `Power:` line (`[power]`): each class and its CPUs, what is kept,
/// refused and failing, the first error below it.
pub(super) fn render_power(
    s: &mut String,
    power: &api::Power,
    style: Style,
    fieldw: &dyn Fn(&str) -> String,
) {
    let classes: Vec<String> = power
        .classes
        .iter()
        .map(|c| format!("{} on CPUs {}", visible(&c.name), c.cpus))
        .collect();
    let mut line = if !power.on {
        format!(
            "[power] off: {} being put back",
            plural(power.originals, "original", "originals")
        )
    } else if power.unsupported {
        "no power files on this node: classes cannot be set".to_string()
    } else if classes.is_empty() {
        "no class in use".to_string()
    } else {
        classes.join(", ")
    };
    if power.on && !power.unsupported {
        let _ = write!(
            line,
            "; {} set, {} kept",
            plural(power.files.len(), "file", "files"),
            plural(power.originals, "original", "originals")
        );
    }
    if !power.refused.is_empty() {
        let _ = write!(line, "; {} refused", power.refused.len());
    }
    if !power.failed.is_empty() {
        let _ = write!(
            line,
            "; {}",
            style.red(&format!("{} failing", power.failed.len()))
        );
    }
    let _ = writeln!(s, "{}{line}", fieldw("Power"));
    let first = power
        .error
        .iter()
        .chain(power.failed.first())
        .chain(power.refused.first());
    for e in first.take(2) {
        let _ = writeln!(s, "{:13}{}", "", style.red(&visible(e)));
    }
    for advice in &power.advice {
        let _ = writeln!(s, "{:13}{}", "", style.yellow(&visible(advice)));
    }
}

/// At most this many exclusive CPUs get a line of what stays on them.
const STAYS_CPUS: usize = 4;

/// The `Quiet CPUs:` line (`housekeeping`): the CPUs kept clear and what
/// was moved off them by kind, what fails, then what stays on the first few
/// CPUs and the boot line that would remove it.
pub(super) fn render_housekeeping(
    s: &mut String,
    hk: &api::Housekeeping,
    style: Style,
    fieldw: &dyn Fn(&str) -> String,
) {
    let moved = moved_kinds(&hk.moved);
    let mut line = if !hk.on {
        let what = if hk.moved.is_empty() {
            plural(hk.originals, "original", "originals")
        } else {
            moved
        };
        format!("housekeeping off: {what} being put back")
    } else if hk.away.is_empty() {
        // The last exclusive CPU released: what was moved is going back.
        if hk.moved.is_empty() {
            "none now (housekeeping on)".to_string()
        } else {
            format!("none now (housekeeping on); {moved} being put back")
        }
    } else {
        let moved = if hk.moved.is_empty() {
            "nothing moved".to_string()
        } else {
            format!("moved {moved}")
        };
        format!(
            "{} (housekeeping): {moved}; {} kept",
            hk.away,
            plural(hk.originals, "original", "originals")
        )
    };
    if !hk.failed.is_empty() {
        let _ = write!(
            line,
            "; {}",
            style.red(&format!("{} failing", hk.failed.len()))
        );
    }
    let _ = writeln!(s, "{}{line}", fieldw("Quiet CPUs"));
    for e in hk.error.iter().chain(hk.failed.first()) {
        let _ = writeln!(s, "{:13}{}", "", style.red(&visible(e)));
    }
    let mut stays: Vec<&api::Stays> = hk.stays.iter().filter(|st| !stays_nothing(st)).collect();
    stays.sort_by_key(|st| st.cpu);
    for st in stays.iter().take(STAYS_CPUS) {
        let _ = writeln!(
            s,
            "{:13}stays on CPU {}: {}",
            "",
            st.cpu,
            stays_text(st, 3, 2)
        );
    }
    if let Some(more) = stays.len().checked_sub(STAYS_CPUS).filter(|&n| n > 0) {
        let _ = writeln!(
            s,
            "{:13}and {more} more {} (pinctl describe shows a workload's)",
            "",
            if more == 1 { "CPU" } else { "CPUs" }
        );
    }
    if let Some(boot) = &hk.boot {
        let _ = writeln!(
            s,
            "{:13}{}",
            "",
            style.dim("the boot line would remove what stays; needs a reboot:")
        );
        let _ = writeln!(s, "{:13}{}", "", visible(boot));
    }
}

/// What was moved, counted by kind (the start of each `what`):
/// `3 workqueue masks, 41 kernel threads, 4 RPS/XPS masks`.
fn moved_kinds(moved: &[api::Moved]) -> String {
    let (mut wq, mut kthreads, mut steering, mut other) = (0, 0, 0, 0);
    for m in moved {
        let kind = m.what.split_whitespace().next().unwrap_or("");
        match kind {
            "workqueue" => wq += 1,
            "kthread" => kthreads += 1,
            "rps" | "xps" => steering += 1,
            _ => other += 1,
        }
    }
    let parts: Vec<String> = [
        (wq, "workqueue mask", "workqueue masks"),
        (kthreads, "kernel thread", "kernel threads"),
        (steering, "RPS/XPS mask", "RPS/XPS masks"),
        (other, "other", "others"),
    ]
    .into_iter()
    .filter(|(n, _, _)| *n > 0)
    .map(|(n, one, many)| plural(n, one, many))
    .collect();
    if parts.is_empty() {
        "nothing".to_string()
    } else {
        parts.join(", ")
    }
}

/// Whether nothing of the kernel's stays on this CPU.
pub(crate) fn stays_nothing(st: &api::Stays) -> bool {
    st.threads.is_empty() && st.interrupts.is_empty()
}

/// What stays on one CPU, in short: its first `threads` kernel threads and
/// `irqs` interrupts by name, the rest counted
/// (`ksoftirqd/3, migration/3 and 4 more; interrupt 45 nvme0q3`).
pub(crate) fn stays_text(st: &api::Stays, threads: usize, irqs: usize) -> String {
    let mut parts = Vec::new();
    if !st.threads.is_empty() {
        parts.push(cut(&st.threads, threads));
    }
    if !st.interrupts.is_empty() {
        let word = if st.interrupts.len() == 1 {
            "interrupt"
        } else {
            "interrupts"
        };
        parts.push(format!("{word} {}", cut(&st.interrupts, irqs)));
    }
    parts.join("; ")
}

/// The first `max` names, each made visible, and `and N more`.
fn cut(names: &[String], max: usize) -> String {
    let shown: Vec<String> = names
        .iter()
        .take(max.max(1))
        .map(|n| visible(n).into_owned())
        .collect();
    let mut text = shown.join(", ");
    if names.len() > shown.len() {
        let _ = write!(text, " and {} more", names.len() - shown.len());
    }
    text
}

/// The `Partitions:` line (`isolation = "partition"`), with each failing
/// partition below it.
pub(super) fn render_partitions(
    s: &mut String,
    parts: &api::Partitions,
    style: Style,
    fieldw: &dyn Fn(&str) -> String,
) {
    let cpus = parts
        .isolated
        .iter()
        .fold(crate::cpuset::CpuSet::new(), |acc, p| acc.union(&p.cpus));
    let mut line = if parts.on {
        format!(
            "{} isolated{}",
            plural(parts.isolated.len(), "workload cgroup", "workload cgroups"),
            if cpus.is_empty() {
                String::new()
            } else {
                format!(" (CPUs {cpus})")
            }
        )
    } else {
        format!(
            "isolation off: {} being undone",
            plural(parts.isolated.len(), "partition", "partitions")
        )
    };
    if !parts.failing.is_empty() {
        let _ = write!(
            line,
            "; {}",
            style.red(&format!("{} failing", parts.failing.len()))
        );
    }
    if !parts.foreign.is_empty() {
        let _ = write!(
            line,
            "; {}",
            style.yellow(&format!(
                "CPUs {} isolated by partitions that are not pinctl's",
                parts.foreign
            ))
        );
    }
    let _ = writeln!(s, "{}{line}", fieldw("Partitions"));
    for f in &parts.failing {
        let _ = writeln!(
            s,
            "{:13}{}",
            "",
            style.red(&visible(&format!(
                "{} ({}): {}; pinned by its cpuset alone",
                f.cgroup, f.cpus, f.reason
            )))
        );
    }
}

/// The `Slurm:` line and a line per job: its CPUs, in red where an
/// exclusive workload holds them too or the kernel clipped them.
pub(super) fn render_slurm(
    s: &mut String,
    status: &api::Status,
    style: Style,
    fieldw: &dyn Fn(&str) -> String,
) {
    let jobs = &status.slurm.jobs;
    if jobs.is_empty() {
        return;
    }
    let exclusive = status
        .workloads
        .iter()
        .filter_map(|w| Some((w.key.as_str(), w.cpus.as_ref()?)));
    let conflicts = crate::slurm::conflicts(jobs, exclusive, &status.online);
    let mut line = plural(jobs.len(), "job", "jobs");
    if !conflicts.is_empty() {
        let _ = write!(
            line,
            "; {}",
            style.red(&plural(conflicts.len(), "conflict", "conflicts"))
        );
    }
    let cores = &status.slurm.cores;
    if !cores.is_empty() {
        let mut off = vec!["the shared pool"];
        if status.interrupts.as_ref().is_some_and(|i| i.on) {
            off.push("interrupts");
        }
        if status.housekeeping.is_some() {
            off.push("the kernel's movable work");
        }
        let _ = write!(
            line,
            "; job cores {cores} kept quiet ({} leave them)",
            off.join(", ")
        );
    } else if status.slurm.housekeeping {
        line.push_str("; no job cores yet");
    }
    let _ = writeln!(s, "{}{line}", fieldw("Slurm"));
    for job in jobs {
        let _ = writeln!(
            s,
            "{:13}{} CPUs {} ({})",
            "",
            visible(&job.name),
            list_or_none(&job.effective),
            visible(&job.cgroup)
        );
    }
    for c in &conflicts {
        let _ = writeln!(s, "{:13}{}", "", style.red(&visible(&c.to_string())));
    }
}

/// The `Runs:` line, a line per run (who asked, its CPUs, its command) and
/// one per ask waiting in line.
pub(super) fn render_runs(s: &mut String, status: &api::Status, fieldw: &dyn Fn(&str) -> String) {
    let runs = &status.runs;
    if runs.is_empty() {
        return;
    }
    let mut line = plural(runs.running.len(), "run", "runs");
    if !runs.waiting.is_empty() {
        let _ = write!(line, ", {} waiting", runs.waiting.len());
    }
    let _ = writeln!(s, "{}{line}", fieldw("Runs"));
    for run in &runs.running {
        let cpus = status
            .workloads
            .iter()
            .find(|w| w.key == run.key)
            .and_then(|w| w.cpus.clone())
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "{:13}{}  {}  CPUs {}  {}",
            "",
            visible(&run.key),
            user(run.uid),
            list_or_none(&cpus),
            visible(&run.command.join(" "))
        );
    }
    for w in &runs.waiting {
        let _ = writeln!(
            s,
            "{:13}waiting {} s: {}  {}  {}",
            "",
            w.waited,
            user(w.uid),
            plural(w.cpus, "CPU", "CPUs"),
            visible(&w.command.join(" "))
        );
    }
}

/// An `Owner:` line, in red, for each other CPU owner on the node.
pub(super) fn render_owner(
    s: &mut String,
    status: &api::Status,
    style: Style,
    fieldw: &dyn Fn(&str) -> String,
) {
    for o in &status.other_owners {
        let held = match o.cpus.is_empty() {
            true => String::new(),
            false => format!(" holds CPUs {};", list_or_none(&o.cpus)),
        };
        let text = format!(
            "{}{held} pinctld leaves it {}",
            visible(&o.what),
            if o.left.is_empty() {
                "nothing".to_string()
            } else {
                visible(&o.left.join(", ")).into_owned()
            }
        );
        let _ = writeln!(s, "{}{}", fieldw("Owner"), style.red(&text));
    }
}

/// The `NRI:` line (`[nri]` on): the link to the runtime, the containers
/// announced and not made yet, and a line per disagreement, in red.
pub(super) fn render_nri(
    s: &mut String,
    status: &api::Status,
    style: Style,
    fieldw: &dyn Fn(&str) -> String,
) {
    let Some(nri) = &status.nri else {
        return;
    };
    let mut line = match (nri.connected, &nri.runtime, &nri.error) {
        (true, Some(runtime), _) => format!("registered with {}", visible(runtime)),
        (true, None, _) => "connected, not configured yet".to_string(),
        (false, _, Some(why)) => style.red(&format!("not connected: {}", visible(why))),
        (false, _, None) => style.red("not connected yet"),
    };
    if nri.announced > 0 {
        let _ = write!(
            line,
            ", {} announced",
            plural(nri.announced, "container", "containers")
        );
    }
    if !nri.disagreements.is_empty() {
        let _ = write!(
            line,
            ", {}",
            style.red(&plural(
                nri.disagreements.len(),
                "disagreement",
                "disagreements"
            ))
        );
    }
    let _ = writeln!(s, "{}{line}", fieldw("NRI"));
    for d in &nri.disagreements {
        let text = format!(
            "{}: made on CPUs {}, answered {}",
            visible(&d.cgroup),
            d.found,
            d.answered
        );
        let _ = writeln!(s, "{:13}{}", "", style.red(&text));
    }
}
