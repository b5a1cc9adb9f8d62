//! A task as the kernel shows it in its `stat` line
//! (`/proc/PID/task/TID/stat`): [`parse_stat`], the [`TaskStat`] it gives,
//! and the `PF_*` flags pinctl reads there.
//!
//! - Pure: text in, a value out. [`crate::procfs`] reads the files; `io`'s
//!   fake affinity ([`crate::io::fake_affinity`]) refuses a task by these
//!   flags as the kernel does, which is why they live here, below both.
//! - Must never read a file, nor decide what a flag means.

/// A task's state as read from `/proc/PID/task/TID/stat`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskStat {
    pub pid: u32,
    pub tid: u32,
    /// The command (`comm`), as the kernel shows it in the stat line.
    pub comm: String,
    /// The one-letter state (`R`, `S`, `D`, ...).
    pub state: char,
    /// When the task started, in clock ticks since boot: with the tid it
    /// tells a reused tid from the task seen before.
    pub start: u64,
    /// The kernel's `PF_*` flags (field 9): [`PF_KTHREAD`],
    /// [`PF_NO_SETAFFINITY`].
    pub flags: u32,
    /// The threads of its process (field 20, `num_threads`).
    pub threads: u32,
}

/// A kernel thread (`PF_KTHREAD`).
pub const PF_KTHREAD: u32 = 0x0020_0000;
/// A task whose affinity only the kernel may change (`PF_NO_SETAFFINITY`):
/// `sched_setaffinity` fails with `EINVAL`.
pub const PF_NO_SETAFFINITY: u32 = 0x0400_0000;

/// Parses one `stat` line: `tid (comm) S ppid ... starttime ...`. The command
/// may hold spaces and parentheses, so the fields after it are found from the
/// last `)`.
pub fn parse_stat(pid: u32, text: &str) -> Option<TaskStat> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    if close < open {
        return None;
    }
    let tid = text[..open].trim().parse().ok()?;
    let comm = text[open + 1..close].to_string();
    let mut rest = text[close + 1..].split_whitespace();
    let state = rest.next()?.chars().next()?;
    // flags is field 9 overall: the 6th after the state; num_threads is
    // field 20, the 11th after flags; starttime is field 22.
    let flags = rest.nth(5)?.parse().ok()?;
    let threads = rest.nth(10)?.parse().ok()?;
    let start = rest.nth(1)?.parse().ok()?;
    Some(TaskStat {
        pid,
        tid,
        comm,
        state,
        start,
        flags,
        threads,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_with_odd_commands_parse() {
        let line = "4242 (my (odd) cmd) D 1 4242 4242 0 -1 4194560 100 0 0 0 5 6 0 0 20 0 1 0 98765 1000 100";
        let s = parse_stat(4242, line).unwrap();
        assert_eq!(
            (s.tid, s.comm.as_str(), s.state, s.start, s.threads),
            (4242, "my (odd) cmd", 'D', 98765, 1)
        );
        assert!(parse_stat(1, "garbage").is_none());
        assert!(parse_stat(1, "1 (x) S 1").is_none());
        assert!(parse_stat(1, ") (").is_none());
    }
}
