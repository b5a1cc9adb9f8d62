//! The event loop's own stall report. systemd's watchdog sees only that the
//! `WATCHDOG=1` pings stopped, and kills the daemon without a word about why.
//! A thread of its own watches the loop's turns: one that has been handling
//! the same event for longer than half a ping period is logged with the event's
//! name and what the loop's thread is waiting in (its state and kernel wait
//! channel: `do_epoll_wait` is an `.await` that never ends, a futex a lock,
//! anything else a system call stuck in the kernel), before the watchdog's
//! limit comes; and once more when the turn ends.
//!
//! The thread reads the loop thread's `stat` and `wchan` under the
//! configured `proc_root`: a diagnostic thread that only ever blocks itself.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tracing::{info, warn};

/// What the stall thread and the loop share.
struct Shared {
    base: Instant,
    /// When the current turn began, in ms since `base` plus one; 0 while the
    /// loop waits for an event.
    since: AtomicU64,
    /// The event the current turn handles.
    what: Mutex<&'static str>,
    /// The current turn was reported stuck.
    reported: AtomicBool,
    stop: AtomicBool,
}

impl Shared {
    fn now_ms(&self) -> u64 {
        self.base.elapsed().as_millis() as u64 + 1
    }
}

/// The loop's side: [`Stall::begin`] and [`Stall::end`] around each turn.
pub(super) struct Stall {
    shared: Arc<Shared>,
}

impl Stall {
    /// Starts the thread: a turn longer than `after` is reported. The loop's
    /// thread is the caller's; its state is read from `proc_root`.
    pub(super) fn start(after: Duration, proc_root: &Path) -> Stall {
        let shared = Arc::new(Shared {
            base: Instant::now(),
            since: AtomicU64::new(0),
            what: Mutex::new(""),
            reported: AtomicBool::new(false),
            stop: AtomicBool::new(false),
        });
        let task = task_dir(
            proc_root,
            std::process::id(),
            nix::unistd::gettid().as_raw(),
        );
        let watched = Arc::clone(&shared);
        let spawned = std::thread::Builder::new()
            .name("pinctl-stall".into())
            .spawn(move || watch(&watched, after, &task));
        if let Err(e) = spawned {
            warn!(error = %e, "cannot start the event loop's stall report");
        }
        Stall { shared }
    }

    /// A turn begins: the loop handles `what`.
    pub(super) fn begin(&self, what: &'static str) {
        *self
            .shared
            .what
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = what;
        self.shared.reported.store(false, Ordering::Relaxed);
        self.shared
            .since
            .store(self.shared.now_ms(), Ordering::Release);
    }

    /// The turn ended; one that was reported stuck says so.
    pub(super) fn end(&self) {
        let since = self.shared.since.swap(0, Ordering::AcqRel);
        if self.shared.reported.load(Ordering::Acquire) {
            let what = *self
                .shared
                .what
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let took_ms = self.shared.now_ms().saturating_sub(since);
            info!(
                event = what,
                took_ms, "the event loop is going again, after {took_ms} ms handling {what}"
            );
        }
    }
}

impl Drop for Stall {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
    }
}

/// The thread: looks every quarter of `after` (at most a second).
fn watch(shared: &Shared, after: Duration, task: &Path) {
    let tick = (after / 4).min(Duration::from_secs(1));
    while !shared.stop.load(Ordering::Relaxed) {
        std::thread::sleep(tick);
        let since = shared.since.load(Ordering::Acquire);
        if since == 0 || shared.reported.load(Ordering::Acquire) {
            continue;
        }
        let for_ms = shared.now_ms().saturating_sub(since);
        if for_ms < after.as_millis() as u64 {
            continue;
        }
        let what = *shared.what.lock().unwrap_or_else(PoisonError::into_inner);
        // Not the same turn any more: it ended meanwhile.
        if shared.since.load(Ordering::Acquire) != since {
            continue;
        }
        shared.reported.store(true, Ordering::Release);
        let (state, wchan) = thread_state(task);
        // The facts in the message itself: journalctl shows no fields.
        let state = state.as_deref().unwrap_or("unknown");
        let wchan = wchan.as_deref().unwrap_or("unknown");
        warn!(
            event = what,
            for_ms,
            thread_state = state,
            wchan,
            task = %task.display(),
            "the event loop has been handling one event ({what}) for {for_ms} ms, its thread in state {state} waiting in {wchan}; systemd's watchdog kills a daemon whose loop stops"
        );
    }
}

/// A thread's state letter (`R`, `S`, `D`...) and kernel wait channel, from
/// its `stat` and `wchan` in `task` (`/proc/<pid>/task/<tid>`).
fn thread_state(task: &Path) -> (Option<String>, Option<String>) {
    let stat = std::fs::read_to_string(task.join("stat")).ok();
    // The state follows the command name, which is in parentheses and may
    // hold any character.
    let state = stat.as_deref().and_then(|s| {
        let rest = &s[s.rfind(')')? + 1..];
        rest.split_whitespace().next().map(str::to_string)
    });
    let wchan = std::fs::read_to_string(task.join("wchan"))
        .ok()
        .map(|w| w.trim().to_string())
        .filter(|w| !w.is_empty() && w != "0");
    (state, wchan)
}

/// The `task` directory of thread `tid` of process `pid`.
fn task_dir(proc_root: &Path, pid: u32, tid: i32) -> PathBuf {
    proc_root
        .join(pid.to_string())
        .join("task")
        .join(tid.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_threads_state_is_read_from_its_task_directory() {
        let task = task_dir(
            Path::new("/proc"),
            std::process::id(),
            nix::unistd::gettid().as_raw(),
        );
        let (state, _) = thread_state(&task);
        // This thread is running while it reads its own state.
        assert_eq!(state.as_deref(), Some("R"), "{}", task.display());
    }

    #[test]
    fn a_missing_task_directory_says_nothing() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(thread_state(&dir.path().join("1/task/1")), (None, None));
    }

    #[test]
    fn a_command_name_with_parentheses_and_spaces_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("stat"), "42 (a (b) c) D 1 42 42 0").unwrap();
        std::fs::write(dir.path().join("wchan"), "cgroup_mkdir").unwrap();
        assert_eq!(
            thread_state(dir.path()),
            (Some("D".into()), Some("cgroup_mkdir".into()))
        );
    }
}
