//! `pinctl events`: the daemon's audit trail, one line per event
//! ([`format_event`]).
//!
//! Times are local (the reader's `TZ`), to the millisecond. Formatting is
//! pure; the polling loop of `--follow` lives in the command.

use std::fmt::Write as _;

use crate::api::{Event, EventKind};

use super::style::{Style, visible};

/// The offset of local time from UTC, in seconds, at Unix time `secs`.
pub fn local_offset(secs: i64) -> i64 {
    let t: libc::time_t = secs as libc::time_t;
    // SAFETY: `tm` is plain data that `localtime_r` fills; both pointers are
    // valid for the call, and the reentrant variant keeps no shared state
    // beyond the timezone it reads.
    unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&t, &mut tm).is_null() {
            0
        } else {
            tm.tm_gmtoff
        }
    }
}

/// `YYYY-MM-DD HH:MM:SS.mmm` of `ms` (Unix milliseconds) at `offset` seconds
/// from UTC.
pub fn format_time(ms: u64, offset: i64) -> String {
    let local_ms = ms as i64 + offset * 1000;
    let secs = local_ms.div_euclid(1000);
    let millis = local_ms.rem_euclid(1000);
    let date = super::assets::civil_date(secs.max(0) as u64);
    let day = secs.rem_euclid(86_400);
    format!(
        "{date} {:02}:{:02}:{:02}.{millis:03}",
        day / 3600,
        day / 60 % 60,
        day % 60
    )
}

/// One event as a line (no newline), times at `offset` seconds from UTC:
/// `#SEQ DATE TIME  write CGROUP FILE OLD -> NEW  REASON` for a cpuset write
/// (`FAILED: ERROR` after a failed one; an old set never read is `?`),
/// `repair PATH  created A, B` for a path the watchdog made again, `irqs off
/// CPUS: moved N,M; put back K` for a pass over the interrupts.
pub fn format_event(e: &Event, offset: i64, style: Style) -> String {
    let mut s = format!(
        "{} {}  ",
        style.dim(&format!("#{}", e.seq)),
        format_time(e.at_ms, offset)
    );
    match &e.what {
        EventKind::Write {
            cgroup,
            file,
            old,
            new,
            reason,
            error,
            ..
        } => {
            let old = old.as_ref().map_or_else(|| "?".to_string(), shown);
            let new = shown(new);
            let cgroup = if cgroup.is_empty() { "/" } else { cgroup };
            let _ = write!(
                s,
                "write {} {} {old} -> {new}  {}",
                visible(cgroup),
                visible(file),
                visible(reason)
            );
            failure(&mut s, error.as_deref(), style);
        }
        EventKind::Repair { path, created } => {
            let made: Vec<String> = created
                .iter()
                .map(|p| visible(&p.display().to_string()).into_owned())
                .collect();
            let _ = write!(
                s,
                "{} {}  created {}",
                style.yellow("repair"),
                visible(&path.display().to_string()),
                if made.is_empty() {
                    "nothing".to_string()
                } else {
                    made.join(", ")
                }
            );
        }
        EventKind::Quota {
            cgroup,
            file,
            old,
            new,
            error,
        } => {
            let _ = write!(
                s,
                "quota {} {} {} -> {}",
                visible(cgroup),
                visible(file),
                visible(old),
                visible(new)
            );
            failure(&mut s, error.as_deref(), style);
        }
        EventKind::Partition {
            cgroup,
            file,
            new,
            error,
        } => {
            let _ = write!(
                s,
                "partition {} {} = {}",
                visible(cgroup),
                visible(file),
                visible(new)
            );
            failure(&mut s, error.as_deref(), style);
        }
        EventKind::Power {
            file,
            old,
            new,
            class,
            error,
            workload,
        } => {
            let mut why = match class {
                Some(c) => format!("class {}", visible(c)),
                None => "original put back".to_string(),
            };
            if let Some(w) = workload {
                let _ = write!(why, ", {}", visible(w));
            }
            let old = old.as_deref().map_or("?".into(), visible);
            let _ = write!(
                s,
                "power {}: {old} -> {} ({why})",
                visible(file),
                visible(new)
            );
            if let Some(err) = error {
                let _ = write!(s, "  {}", style.red(&format!("FAILED: {}", visible(err))));
            }
        }
        EventKind::Irqs {
            away,
            moved,
            put_back,
            refused,
        } => {
            if away.is_empty() {
                let _ = write!(s, "irqs (no exclusive CPUs):");
            } else {
                let _ = write!(s, "irqs off {away}:");
            }
            let mut parts = Vec::new();
            if !moved.is_empty() {
                parts.push(format!("moved {}", visible(&moved.join(","))));
            }
            if !put_back.is_empty() {
                parts.push(format!("put back {}", visible(&put_back.join(","))));
            }
            let _ = write!(s, " {}", parts.join("; "));
            for (irq, err) in refused {
                let _ = write!(
                    s,
                    "  {}",
                    style.red(&format!("FAILED {}: {}", visible(irq), visible(err)))
                );
            }
        }
        EventKind::Housekeeping {
            away,
            moved,
            put_back,
            failed,
        } => {
            if away.is_empty() {
                let _ = write!(s, "housekeeping (no exclusive CPUs):");
            } else {
                let _ = write!(s, "housekeeping off {away}:");
            }
            let _ = write!(s, " moved {moved}; put back {put_back}");
            for (what, err) in failed {
                let _ = write!(
                    s,
                    "  {}",
                    style.red(&format!("FAILED {}: {}", visible(what), visible(err)))
                );
            }
        }
        EventKind::Run {
            key,
            cgroup,
            uid,
            cpus,
            command,
        } => {
            let what = match cpus.is_empty() {
                true => "ended".to_string(),
                false => format!("on {cpus}"),
            };
            let _ = write!(
                s,
                "run {} {what}  uid {uid}: {}  ({})",
                visible(key),
                visible(&command.join(" ")),
                visible(cgroup)
            );
        }
        EventKind::Resize {
            workload,
            requested,
            old,
            new,
            pending,
        } => {
            let _ = write!(s, "resize {} to {requested}: ", visible(workload));
            match pending {
                None => {
                    let _ = write!(s, "{old} -> {new}");
                }
                Some(why) => {
                    let _ = write!(
                        s,
                        "{}",
                        style.yellow(&format!("pending, keeps {old}: {}", visible(why)))
                    );
                }
            }
        }
        EventKind::Told {
            cgroup,
            unit,
            cpus,
            error,
        } => {
            let _ = write!(
                s,
                "systemd {} AllowedCPUs={cpus}  ({})",
                visible(unit),
                visible(cgroup)
            );
            failure(&mut s, error.as_deref(), style);
        }
    }
    s
}

/// Appends `  FAILED: ERROR` to an event's line when its write failed.
fn failure(s: &mut String, error: Option<&str>, style: Style) {
    if let Some(err) = error {
        let _ = write!(s, "  {}", style.red(&format!("FAILED: {}", visible(err))));
    }
}

/// A set as an event shows it. An empty set is what a new cgroup holds (v2:
/// "inherit the parent's"): said, rather than printed as nothing.
fn shown(set: &crate::cpuset::CpuSet) -> String {
    if set.is_empty() {
        "(empty)".to_string()
    } else {
        set.to_string()
    }
}

/// Whether event `e` concerns cgroup `rel` or one below it (for `describe`).
pub fn concerns(e: &Event, rel: &str) -> bool {
    match &e.what {
        EventKind::Write { cgroup, .. } => crate::cgroup::is_within(cgroup, rel),
        EventKind::Told { cgroup, .. }
        | EventKind::Run { cgroup, .. }
        | EventKind::Quota { cgroup, .. }
        | EventKind::Partition { cgroup, .. } => crate::cgroup::is_within(cgroup, rel),
        EventKind::Repair { .. }
        | EventKind::Irqs { .. }
        | EventKind::Housekeeping { .. }
        | EventKind::Power { .. }
        | EventKind::Resize { .. } => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_old_set_is_named() {
        let e = Event {
            seq: 1,
            at_ms: 0,
            what: EventKind::Write {
                cgroup: "a".into(),
                file: "cpuset.cpus".into(),
                old: Some(crate::cpuset::CpuSet::new()),
                new: "1".parse().unwrap(),
                reason: "r".into(),
                error: None,
                workload: None,
            },
        };
        assert!(
            format_event(&e, 0, Style::OFF).ends_with("write a cpuset.cpus (empty) -> 1  r"),
            "{}",
            format_event(&e, 0, Style::OFF)
        );
    }

    #[test]
    fn times_are_local_to_the_millisecond() {
        // 2025-11-21 23:59:59.123 UTC.
        let ms = 1_763_769_599_123;
        assert_eq!(format_time(ms, 0), "2025-11-21 23:59:59.123");
        assert_eq!(format_time(ms, 3600), "2025-11-22 00:59:59.123");
        assert_eq!(format_time(ms, -5 * 3600), "2025-11-21 18:59:59.123");
    }
}
