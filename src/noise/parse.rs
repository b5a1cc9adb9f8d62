//! The pure parsers of noise: trace lines (`sched_switch`,
//! `sched_process_fork`, `cgroup_attach_task`, lost-event notes), the
//! per-CPU tables of `/proc/interrupts` and `/proc/softirqs`, a trace
//! buffer's `stats` and a task's `stat` flags.
//!
//! They take text and return values or `None`/an error string: no I/O, no
//! panic on any input. A task's name (`comm`) is anyone's to choose and may
//! hold spaces, `[001]` or a field name: every parser finds the kernel's own
//! fields around it and says nothing rather than guess.

use std::collections::BTreeMap;

/// What one trace line says, as far as noise needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraceEvent {
    /// `sched_switch` on `cpu`: `prev` left it, `next` runs.
    Switch {
        cpu: u32,
        prev_pid: u32,
        prev_comm: String,
        next_pid: u32,
        next_comm: String,
    },
    /// `sched_process_fork` on `cpu`: `parent` made `child` (a process or
    /// a thread).
    Fork {
        cpu: u32,
        parent: u32,
        child: u32,
        child_comm: String,
    },
    /// `cgroup_attach_task`: task `pid` was moved into cgroup `path`
    /// (relative to its hierarchy, no leading `/`).
    Attach { pid: u32, path: String },
    /// `CPU:N [LOST M EVENTS]`: the reader missed `count` events of `cpu`.
    Lost { cpu: u32, count: u64 },
}

/// Parses one line of a trace (`trace` or `trace_pipe`):
/// `TASK-PID [(TGID)] [CPU] [FLAGS] TIMESTAMP: EVENT: FIELDS`. Other
/// events, headers and anything unexpected give `None`.
///
/// The task's name comes first and may hold anything, so each `[` is tried
/// in turn, and the first from which the whole line parses wins: a name of
/// at most 15 bytes (the kernel's `TASK_COMM_LEN`) cannot hold a whole
/// event.
pub fn parse_trace_line(line: &str) -> Option<TraceEvent> {
    let line = line.trim_end_matches(['\n', '\r']);
    if let Some(rest) = line.strip_prefix("CPU:") {
        return parse_lost_line(rest);
    }
    for (at, _) in line.match_indices('[') {
        if let Some(event) = parse_from_cpu(&line[at + 1..]) {
            return Some(event);
        }
    }
    None
}

/// `N [LOST M EVENTS]`, after `CPU:`.
fn parse_lost_line(rest: &str) -> Option<TraceEvent> {
    let (cpu, rest) = rest.split_once(' ')?;
    let count = rest
        .trim()
        .strip_prefix("[LOST ")?
        .strip_suffix(" EVENTS]")?;
    Some(TraceEvent::Lost {
        cpu: cpu.parse().ok()?,
        count: count.parse().ok()?,
    })
}

/// The first whitespace-separated token of `s` and what follows it.
fn token(s: &str) -> Option<(&str, &str)> {
    let s = s.trim_start();
    if s.is_empty() {
        return None;
    }
    Some(s.split_at(s.find(char::is_whitespace).unwrap_or(s.len())))
}

/// A timestamp followed by `:` (`1234.567890:`, or an integer with a
/// counter clock).
fn is_timestamp(token: &str) -> bool {
    token.strip_suffix(':').is_some_and(|t| {
        !t.is_empty()
            && t.chars().all(|c| c.is_ascii_digit() || c == '.')
            && t.matches('.').count() <= 1
    })
}

/// `CPU] [FLAGS] TIMESTAMP: EVENT: FIELDS`, after a `[`.
fn parse_from_cpu(s: &str) -> Option<TraceEvent> {
    let (cpu, rest) = s.split_once(']')?;
    if cpu.is_empty() || !cpu.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let cpu: u32 = cpu.parse().ok()?;
    // The flags column (`d..2.`) is there unless `irq-info` is off.
    let (first, mut rest) = token(rest)?;
    if !is_timestamp(first) {
        let (stamp, after) = token(rest)?;
        if !is_timestamp(stamp) {
            return None;
        }
        rest = after;
    }
    let (event, fields) = rest.trim_start().split_once(": ")?;
    match event {
        "sched_switch" => parse_switch(cpu, fields),
        "sched_process_fork" => parse_fork(cpu, fields),
        "cgroup_attach_task" => parse_attach(fields),
        _ => None,
    }
}

/// The leading decimal digits of `s` as a number, and what follows.
fn number(s: &str) -> Option<(u32, &str)> {
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    Some((s[..end].parse().ok()?, &s[end..]))
}

/// A signed number (a priority may be negative) and what follows.
fn signed(s: &str) -> Option<&str> {
    let s = s.strip_prefix('-').unwrap_or(s);
    number(s).map(|(_, rest)| rest)
}

/// `prev_comm=X prev_pid=N prev_prio=N prev_state=S ==> next_comm=Y
/// next_pid=N next_prio=N`.
fn parse_switch(cpu: u32, fields: &str) -> Option<TraceEvent> {
    let rest = fields.strip_prefix("prev_comm=")?;
    // The previous name ends at the first place the kernel's fields follow.
    let (prev_comm, prev_pid, after) = rest.match_indices(" prev_pid=").find_map(|(at, m)| {
        let (pid, after) = number(&rest[at + m.len()..])?;
        let after = after.strip_prefix(" prev_prio=")?;
        let after = signed(after)?.strip_prefix(" prev_state=")?;
        let (_state, after) = token(after)?;
        let after = after.strip_prefix(" ==> next_comm=")?;
        Some((&rest[..at], pid, after))
    })?;
    // The next name runs to the last ` next_pid=N`, which nothing after it
    // can hold.
    let at = after.rfind(" next_pid=")?;
    let (next_pid, tail) = number(&after[at + " next_pid=".len()..])?;
    if !(tail.is_empty() || tail.starts_with(' ')) {
        return None;
    }
    Some(TraceEvent::Switch {
        cpu,
        prev_pid,
        prev_comm: prev_comm.to_string(),
        next_pid,
        next_comm: after[..at].to_string(),
    })
}

/// `comm=X pid=N child_comm=Y child_pid=N`.
fn parse_fork(cpu: u32, fields: &str) -> Option<TraceEvent> {
    let rest = fields.strip_prefix("comm=")?;
    let (parent, after) = rest.match_indices(" pid=").find_map(|(at, m)| {
        let (pid, after) = number(&rest[at + m.len()..])?;
        Some((pid, after.strip_prefix(" child_comm=")?))
    })?;
    let at = after.rfind(" child_pid=")?;
    let (child, tail) = number(&after[at + " child_pid=".len()..])?;
    if !(tail.is_empty() || tail.starts_with(' ')) {
        return None;
    }
    Some(TraceEvent::Fork {
        cpu,
        parent,
        child,
        child_comm: after[..at].to_string(),
    })
}

/// `dst_root=N dst_id=N dst_level=N dst_path=P pid=N comm=X`. The path
/// ends at the first ` pid=N comm=`: a task's name comes after it, so it
/// cannot move that boundary.
fn parse_attach(fields: &str) -> Option<TraceEvent> {
    let at = fields.find("dst_path=")?;
    let rest = &fields[at + "dst_path=".len()..];
    rest.match_indices(" pid=").find_map(|(at, m)| {
        let (pid, after) = number(&rest[at + m.len()..])?;
        after.strip_prefix(" comm=")?;
        Some(TraceEvent::Attach {
            pid,
            path: rest[..at].trim_start_matches('/').to_string(),
        })
    })
}

/// A per-CPU table of counts: `/proc/interrupts` or `/proc/softirqs`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    /// The CPU of each column, in order: online CPUs only.
    pub cpus: Vec<u32>,
    /// The rows that have a count for every column.
    pub rows: Vec<Row>,
}

/// One row of a [`Counts`] table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// Before the `:`: an interrupt's number, or a name (`LOC`, `TIMER`).
    pub label: String,
    /// One count per column of [`Counts::cpus`].
    pub counts: Vec<u64>,
    /// What follows the counts, spaces collapsed: an interrupt's chip,
    /// trigger and name, or a named row's description. Empty for softirqs.
    pub desc: String,
}

/// Rows of `/proc/interrupts` with one count for the whole machine, not
/// one per CPU (x86's `ERR` and `MIS`).
const NOT_PER_CPU: [&str; 2] = ["ERR", "MIS"];

/// Parses `/proc/interrupts` or `/proc/softirqs`: a header of `CPUn`
/// columns (offline CPUs have none), then rows `LABEL: count... [desc]`.
/// A row with fewer counts than columns (`ERR:`, `MIS:`) is not per CPU
/// and is left out. The error says what is wrong, for the caller to put
/// beside the file's path.
pub fn parse_counts(text: &str) -> Result<Counts, String> {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header = lines.next().ok_or("empty")?;
    let cpus = header
        .split_whitespace()
        .map(|c| c.strip_prefix("CPU").and_then(|n| n.parse::<u32>().ok()))
        .collect::<Option<Vec<u32>>>()
        .filter(|c| !c.is_empty())
        .ok_or_else(|| format!("no header of CPU columns: {:?}", truncate(header)))?;
    let mut rows = Vec::new();
    for line in lines {
        let Some((label, rest)) = line.split_once(':') else {
            continue;
        };
        let label = label.trim();
        if label.is_empty() || label.contains(char::is_whitespace) || NOT_PER_CPU.contains(&label) {
            continue;
        }
        let mut counts = Vec::with_capacity(cpus.len());
        let mut rest = rest;
        while counts.len() < cpus.len() {
            let Some((t, after)) = token(rest) else {
                break;
            };
            let Ok(n) = t.parse::<u64>() else {
                break;
            };
            counts.push(n);
            rest = after;
        }
        if counts.len() < cpus.len() {
            continue;
        }
        rows.push(Row {
            label: label.to_string(),
            counts,
            desc: rest.split_whitespace().collect::<Vec<_>>().join(" "),
        });
    }
    Ok(Counts { cpus, rows })
}

/// At most 60 characters of `text`, for an error message.
fn truncate(text: &str) -> String {
    text.chars().take(60).collect()
}

impl Counts {
    /// The column of `cpu`, when it has one (it was online).
    pub fn column(&self, cpu: u32) -> Option<usize> {
        self.cpus.iter().position(|&c| c == cpu)
    }

    /// Each CPU's sum over every row.
    pub fn totals(&self) -> BTreeMap<u32, u64> {
        self.cpus
            .iter()
            .enumerate()
            .map(|(i, &cpu)| {
                let sum = self
                    .rows
                    .iter()
                    .filter_map(|r| r.counts.get(i))
                    .fold(0u64, |a, &b| a.saturating_add(b));
                (cpu, sum)
            })
            .collect()
    }

    /// Each row's count on `cpu`, by label; `None` when `cpu` has no column.
    pub fn of_cpu(&self, cpu: u32) -> Option<Vec<(&Row, u64)>> {
        let i = self.column(cpu)?;
        Some(
            self.rows
                .iter()
                .filter_map(|r| Some((r, *r.counts.get(i)?)))
                .collect(),
        )
    }

    /// What happened on `cpu` between `before` and `self` (after): each
    /// row's increase, those that grew only. `None` when either table has
    /// no column for it (it was offline). A row new since `before` counts
    /// from 0; the kernel's per-CPU counts are 32-bit and wrap.
    pub fn since(&self, before: &Counts, cpu: u32) -> Option<Vec<(&Row, u64)>> {
        let was: BTreeMap<&str, u64> = before
            .of_cpu(cpu)?
            .into_iter()
            .map(|(r, n)| (r.label.as_str(), n))
            .collect();
        Some(
            self.of_cpu(cpu)?
                .into_iter()
                .map(|(row, now)| (row, grown(was.get(row.label.as_str()).copied(), now)))
                .filter(|&(_, n)| n > 0)
                .collect(),
        )
    }
}

/// How much a count grew from `was` to `now`; a 32-bit count that went
/// down wrapped once.
fn grown(was: Option<u64>, now: u64) -> u64 {
    let was = was.unwrap_or(0);
    if now >= was {
        now - was
    } else if was <= u64::from(u32::MAX) {
        (now + (1u64 << 32)).saturating_sub(was)
    } else {
        0
    }
}

/// An interrupt's name in a numbered row's description: what follows its
/// chip, hardware number and trigger (`IO-APIC 2-edge timer` → `timer`,
/// `PCI-MSIX-0000:00:03.0 1-edge virtio2-input.0` → `virtio2-input.0`);
/// the whole description when nothing follows them.
pub fn irq_name(desc: &str) -> &str {
    let mut rest = desc;
    // The chip's name.
    if let Some((_, after)) = token(rest) {
        rest = after;
    }
    while let Some((t, after)) = token(rest) {
        let lower = t.to_ascii_lowercase();
        let trigger = t.bytes().all(|b| b.is_ascii_digit())
            || ["edge", "level", "fasteoi", "edge-fasteoi"]
                .iter()
                .any(|k| lower == *k || lower.ends_with(&format!("-{k}")));
        if !trigger {
            break;
        }
        rest = after;
    }
    let rest = rest.trim();
    if rest.is_empty() { desc } else { rest }
}

/// The events a trace buffer lost, from a `per_cpu/cpuN/stats` file:
/// `overrun` (overwritten before being read), `commit overrun` and
/// `dropped events` (buffer full in no-overwrite mode). `None` when the
/// file has none of them.
pub fn parse_stats_lost(stats: &str) -> Option<u64> {
    let mut found = false;
    let mut lost = 0u64;
    for line in stats.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        if matches!(key.trim(), "overrun" | "commit overrun" | "dropped events")
            && let Ok(n) = value.trim().parse::<u64>()
        {
            lost = lost.saturating_add(n);
            found = true;
        }
    }
    found.then_some(lost)
}

/// The name and the flags (field 9, `PF_*`) of a `/proc/PID/stat` line:
/// `pid (comm) S ppid pgrp session tty tpgid flags ...`. The name may hold
/// spaces and parentheses, so the fields are counted from the last `)`.
pub fn parse_stat_flags(text: &str) -> Option<(String, u32)> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    if close < open {
        return None;
    }
    let flags = text[close + 1..].split_whitespace().nth(6)?.parse().ok()?;
    Some((text[open + 1..close].to_string(), flags))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn switch(cpu: u32, prev: (&str, u32), next: (&str, u32)) -> TraceEvent {
        TraceEvent::Switch {
            cpu,
            prev_pid: prev.1,
            prev_comm: prev.0.into(),
            next_pid: next.1,
            next_comm: next.0.into(),
        }
    }

    #[test]
    fn switch_lines_as_trace_and_trace_pipe_print_them() {
        let line = "          <idle>-0       [001] d..2.  1234.567890: sched_switch: prev_comm=swapper/1 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=kworker/u4:2 next_pid=123 next_prio=120\n";
        assert_eq!(
            parse_trace_line(line),
            Some(switch(1, ("swapper/1", 0), ("kworker/u4:2", 123)))
        );
        // irq-info off (no flags), a TGID column, a preempted state, a
        // negative priority (a deadline task), a counter clock.
        let line = "  app-77   (   70) [003]   99: sched_switch: prev_comm=app prev_pid=77 prev_prio=-1 prev_state=R+ ==> next_comm=migration/3 next_pid=30 next_prio=0";
        assert_eq!(
            parse_trace_line(line),
            Some(switch(3, ("app", 77), ("migration/3", 30)))
        );
    }

    #[test]
    fn names_with_spaces_brackets_and_field_names_parse() {
        // A name that looks like the start of a line, and one that holds
        // the fields' own words.
        let line = "x [009] 1.0: sched_switch: p-5 [002] d..2. 5.000001: sched_switch: prev_comm=x [009] 1.0: sched_switch: prev_pid=5 prev_prio=120 prev_state=S ==> next_comm=a next_pid=9 b next_pid=6 next_prio=120";
        assert_eq!(
            parse_trace_line(line),
            Some(switch(
                2,
                ("x [009] 1.0: sched_switch:", 5),
                ("a next_pid=9 b", 6)
            ))
        );
        let line = "<...>-8 [000] .... 2.5: sched_switch: prev_comm=a ==> next_comm= prev_pid=8 prev_prio=120 prev_state=D|W ==> next_comm=my task next_pid=9 next_prio=100";
        assert_eq!(
            parse_trace_line(line),
            Some(switch(0, ("a ==> next_comm=", 8), ("my task", 9)))
        );
    }

    #[test]
    fn forks_attaches_and_lost_events_parse() {
        let line = "app-40 [002] ..... 7.1: sched_process_fork: comm=app pid=40 child_comm=app pid=1 child_pid=41";
        assert_eq!(
            parse_trace_line(line),
            Some(TraceEvent::Fork {
                cpu: 2,
                parent: 40,
                child: 41,
                child_comm: "app pid=1".into()
            })
        );
        let line = "runc-9 [000] ..... 8.0: cgroup_attach_task: dst_root=0 dst_id=12 dst_level=3 dst_path=/kubepods.slice/a b/c.scope pid=50 comm=runc:[2:INIT] pid=1 comm=x";
        assert_eq!(
            parse_trace_line(line),
            Some(TraceEvent::Attach {
                pid: 50,
                path: "kubepods.slice/a b/c.scope".into()
            })
        );
        assert_eq!(
            parse_trace_line("CPU:3 [LOST 1234 EVENTS]\n"),
            Some(TraceEvent::Lost {
                cpu: 3,
                count: 1234
            })
        );
    }

    #[test]
    fn headers_other_events_and_garbage_are_nothing() {
        for line in [
            "# tracer: nop",
            "#           TASK-PID     CPU#  |||||  TIMESTAMP  FUNCTION",
            "bash-1 [000] d..2. 1.0: irq_handler_entry: irq=24 name=ACPI:Ged",
            "bash-1 [000] d..2. 1.0: sched_switch: prev_comm=bash prev_pid=1",
            "bash-1 [x] d..2. 1.0: sched_switch: prev_comm=a prev_pid=1 prev_prio=1 prev_state=S ==> next_comm=b next_pid=2 next_prio=1",
            "bash-1 [000] d..2. 1.0: sched_switch: prev_comm=a prev_pid=1 prev_prio=1 prev_state=S ==> next_comm=b next_pid=99999999999 next_prio=1",
            "bash-1 [000] d..2. 1.0: sched_switch: prev_comm=a prev_pid=1 prev_prio=1 prev_state=S ==> next_comm=b next_pid=2x next_prio=1",
            "CPU:3 [LOST many EVENTS]",
            "",
            "[",
            "[]",
            "[1]",
            "]]]] [[[[",
        ] {
            assert_eq!(parse_trace_line(line), None, "{line:?}");
        }
    }

    proptest! {
        /// Any line gives an event or nothing, never a panic; and any two
        /// names survive a switch line whole.
        #[test]
        fn any_line_parses_or_not_without_panic(line in "\\PC{0,200}") {
            let _ = parse_trace_line(&line);
        }

        #[test]
        fn any_names_round_trip_through_a_switch_line(
            prev in "[^\n]{0,15}",
            next in "[^\n]{0,15}",
            cpu in 0u32..4096,
            prev_pid in any::<u32>(),
            next_pid in any::<u32>(),
        ) {
            let line = format!(
                "{prev}-{prev_pid} [{cpu:03}] d..2. 12.5: sched_switch: prev_comm={prev} prev_pid={prev_pid} prev_prio=120 prev_state=S ==> next_comm={next} next_pid={next_pid} next_prio=120"
            );
            prop_assert_eq!(
                parse_trace_line(&line),
                Some(switch(cpu, (&prev, prev_pid), (&next, next_pid)))
            );
        }

        #[test]
        fn any_table_parses_or_errs_without_panic(text in "\\PC{0,300}") {
            if let Ok(t) = parse_counts(&text) {
                prop_assert!(t.rows.iter().all(|r| r.counts.len() == t.cpus.len()));
                let _ = t.totals();
            }
            let _ = parse_stats_lost(&text);
            let _ = parse_stat_flags(&text);
            let _ = irq_name(&text);
        }
    }

    const INTERRUPTS: &str = "           CPU0       CPU3       \n\
  24:          1          0  IO-APIC   5-edge      ACPI:Ged\n\
  36:          0      15330 PCI-MSIX-0000:00:02.0   1-edge      virtio1-req.0\n\
 NMI:          0          0   Non-maskable interrupts\n\
 LOC:      89144      97602   Local timer interrupts\n\
 ERR:          0\n\
 MIS:          0\n\
 PIN:          0          0   Posted-interrupt notification event\n";

    #[test]
    fn interrupts_by_cpu_column_without_the_machine_wide_rows() {
        let t = parse_counts(INTERRUPTS).unwrap();
        assert_eq!(t.cpus, [0, 3], "offline CPUs 1-2 have no column");
        let labels: Vec<&str> = t.rows.iter().map(|r| r.label.as_str()).collect();
        assert_eq!(labels, ["24", "36", "NMI", "LOC", "PIN"]);
        assert_eq!(t.rows[1].desc, "PCI-MSIX-0000:00:02.0 1-edge virtio1-req.0");
        assert_eq!(irq_name(&t.rows[1].desc), "virtio1-req.0");
        assert_eq!(irq_name("IO-APIC 2-edge timer"), "timer");
        assert_eq!(irq_name("GICv3 27 Level arch_timer"), "arch_timer");
        assert_eq!(t.totals(), BTreeMap::from([(0, 89145), (3, 15330 + 97602)]));
        assert_eq!(t.of_cpu(1), None);

        let after = INTERRUPTS
            .replace("15330", "15335")
            .replace("97602", "97702")
            .replace("      1          0  IO", "      2          0  IO");
        let after = parse_counts(&after).unwrap();
        let grew: Vec<(&str, u64)> = after
            .since(&t, 3)
            .unwrap()
            .into_iter()
            .map(|(r, n)| (r.label.as_str(), n))
            .collect();
        assert_eq!(grew, [("36", 5), ("LOC", 100)]);
        assert_eq!(after.since(&t, 2), None);
    }

    #[test]
    fn softirqs_and_bad_tables() {
        let text = "                    CPU0       CPU1       \n          HI:          0          0\n       TIMER:      10678      13570\n      NET_RX:       1284       1570\n";
        let t = parse_counts(text).unwrap();
        assert_eq!(t.rows.len(), 3);
        assert_eq!(
            (t.rows[1].label.as_str(), t.rows[1].desc.as_str()),
            ("TIMER", "")
        );
        assert!(parse_counts("").is_err());
        assert!(
            parse_counts("  24: 1 2\n")
                .unwrap_err()
                .contains("no header")
        );
    }

    #[test]
    fn a_count_that_went_down_wrapped() {
        assert_eq!(grown(Some(u64::from(u32::MAX) - 1), 3), 5);
        assert_eq!(grown(None, 7), 7);
        assert_eq!(grown(Some(u64::MAX), 1), 0);
    }

    #[test]
    fn stats_and_stat_flags() {
        let stats = "entries: 10\noverrun: 3\ncommit overrun: 1\nbytes: 640\noldest event ts:  1.5\nnow ts:  2.5\ndropped events: 2\nread events: 7\n";
        assert_eq!(parse_stats_lost(stats), Some(6));
        assert_eq!(parse_stats_lost("bytes: 1\n"), None);
        let stat = "123 (kworker/u4:2-events (x)) I 2 0 0 0 -1 69238880 0 0";
        assert_eq!(
            parse_stat_flags(stat),
            Some(("kworker/u4:2-events (x)".into(), 69_238_880))
        );
        assert_eq!(parse_stat_flags("1 (a) S 1"), None);
    }
}
