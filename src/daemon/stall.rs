//! The event loop's own stall report: systemd's watchdog kills a daemon
//! whose pings stopped without a word about why; this says why first.
//!
//! - A thread of its own watches the loop's turns. One with no sign of life
//!   (its start, or a beat of a step that progresses) for half a ping period
//!   is logged with its event's name and the loop thread's state and `wchan`;
//!   and once more when it goes on or ends.
//! - A diagnostic thread that only ever blocks itself: it reads `stat` and
//!   `wchan` under `proc_root`, ends within a tick of the [`Stall`]'s drop,
//!   and never holds the process.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tracing::{info, warn};

/// Set in [`Shared::since`] once its turn was reported stuck.
const REPORTED: u64 = 1 << 63;

/// What the stall thread and the loop share.
struct Shared {
    base: Instant,
    /// The current turn's last sign of life (its beginning, or the loop's
    /// last [`Stall::progress`]), in ms since `base` plus one, with
    /// [`REPORTED`] set once the turn was reported stuck; 0 while the loop
    /// waits for an event. One word, so that the report and the turn's end
    /// (or a newer turn) cannot both happen: the report takes the turn with
    /// a compare-and-swap on the value it read.
    since: AtomicU64,
    /// When the current turn began, as `since`.
    begun: AtomicU64,
    /// The event the current turn handles.
    what: Mutex<&'static str>,
    stop: AtomicBool,
}

/// A turn reported stuck.
#[derive(Debug, PartialEq, Eq)]
struct Stalled {
    what: &'static str,
    /// Since the turn began.
    for_ms: u64,
    /// Since its last sign of life.
    quiet_ms: u64,
}

/// A turn reported stuck that went on (a step progressed) or ended.
#[derive(Debug, PartialEq, Eq)]
struct Again {
    what: &'static str,
    /// Since the turn began.
    took_ms: u64,
    /// How long it had shown no sign of life.
    quiet_ms: u64,
}

impl Shared {
    fn new() -> Shared {
        Shared {
            base: Instant::now(),
            since: AtomicU64::new(0),
            begun: AtomicU64::new(0),
            what: Mutex::new(""),
            stop: AtomicBool::new(false),
        }
    }

    fn now_ms(&self) -> u64 {
        (self.base.elapsed().as_millis() as u64 + 1).min(REPORTED - 1)
    }

    fn what(&self) -> &'static str {
        *self.what.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn begin_at(&self, what: &'static str, now: u64) {
        *self.what.lock().unwrap_or_else(PoisonError::into_inner) = what;
        self.begun.store(now, Ordering::Relaxed);
        self.since.store(now, Ordering::Release);
    }

    /// The loop shows a sign of life: its clock starts again. A turn that
    /// was reported stuck is going again, and may be reported once more.
    fn progress_at(&self, now: u64) -> Option<Again> {
        let since = self.since.load(Ordering::Acquire);
        if since == 0 || since == now {
            return None;
        }
        // Fails only when the turn ended or was reported meanwhile: then
        // that is what counts (the next sign of life sees the mark).
        self.since
            .compare_exchange(since, now, Ordering::AcqRel, Ordering::Relaxed)
            .ok()?;
        self.again(since, now)
    }

    fn end_at(&self, now: u64) -> Option<Again> {
        let since = self.since.swap(0, Ordering::AcqRel);
        self.again(since, now)
    }

    fn again(&self, since: u64, now: u64) -> Option<Again> {
        if since & REPORTED == 0 {
            return None;
        }
        Some(Again {
            what: self.what(),
            took_ms: now.saturating_sub(self.begun.load(Ordering::Relaxed)),
            quiet_ms: now.saturating_sub(since & !REPORTED),
        })
    }

    /// The stall thread's look: the current turn, when it has shown no sign
    /// of life for `after_ms` and was not reported yet, is taken as
    /// reported (by the turn's own `since`: not one that began since).
    fn check_at(&self, now: u64, after_ms: u64) -> Option<Stalled> {
        let since = self.since.load(Ordering::Acquire);
        if since == 0 || since & REPORTED != 0 {
            return None;
        }
        let quiet_ms = now.saturating_sub(since);
        if quiet_ms < after_ms {
            return None;
        }
        // Read before the swap: written before `since` by the turn's
        // `begin`, and a later turn's `begin` changes `since` first.
        let what = self.what();
        let begun = self.begun.load(Ordering::Relaxed);
        self.since
            .compare_exchange(since, since | REPORTED, Ordering::AcqRel, Ordering::Relaxed)
            .ok()?;
        Some(Stalled {
            what,
            for_ms: now.saturating_sub(begun),
            quiet_ms,
        })
    }
}

/// The loop's side: [`Stall::begin`] and [`Stall::end`] around each turn,
/// [`Stall::progress`] from each beat of the loop (a step that progresses).
pub(super) struct Stall {
    shared: Arc<Shared>,
}

impl Stall {
    /// Starts the thread: a turn that shows no sign of life for `after` is
    /// reported. The loop's thread is the caller's; its state is read from
    /// `proc_root`.
    pub(super) fn start(after: Duration, proc_root: &Path) -> Stall {
        let shared = Arc::new(Shared::new());
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
        self.shared.begin_at(what, self.shared.now_ms());
    }

    /// The turn goes on: a step of it progressed (the loop's beat).
    pub(super) fn progress(&self) {
        if let Some(again) = self.shared.progress_at(self.shared.now_ms()) {
            going_again(&again);
        }
    }

    /// The turn ended; one that was reported stuck says so.
    pub(super) fn end(&self) {
        if let Some(again) = self.shared.end_at(self.shared.now_ms()) {
            going_again(&again);
        }
    }
}

impl Drop for Stall {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
    }
}

fn going_again(again: &Again) {
    let Again {
        what,
        took_ms,
        quiet_ms,
    } = *again;
    info!(
        event = what,
        took_ms,
        quiet_ms,
        "the event loop is going again, after {quiet_ms} ms without a sign of life, {took_ms} ms into handling {what}"
    );
}

/// The thread: looks every quarter of `after` (at most a second).
fn watch(shared: &Shared, after: Duration, task: &Path) {
    let tick = (after / 4).clamp(Duration::from_millis(1), Duration::from_secs(1));
    let after_ms = after.as_millis() as u64;
    while !shared.stop.load(Ordering::Relaxed) {
        std::thread::sleep(tick);
        let Some(Stalled {
            what,
            for_ms,
            quiet_ms,
        }) = shared.check_at(shared.now_ms(), after_ms)
        else {
            continue;
        };
        let (state, wchan) = thread_state(task);
        // The facts in the message itself: journalctl shows no fields.
        let state = state.as_deref().unwrap_or("unknown");
        let wchan = wchan.as_deref().unwrap_or("unknown");
        warn!(
            event = what,
            for_ms,
            quiet_ms,
            thread_state = state,
            wchan,
            task = %task.display(),
            "the event loop has been handling one event ({what}) for {for_ms} ms, {quiet_ms} ms without a sign of life, its thread in state {state} waiting in {wchan}; systemd's watchdog kills a daemon whose loop stops"
        );
    }
}

/// A thread's state letter (`R`, `S`, `D`...) and kernel wait channel, from
/// its `stat` and `wchan` in `task` (`/proc/<pid>/task/<tid>`). For the loop:
/// `do_epoll_wait` is an `.await` that never ends, a futex a lock, anything
/// else a system call stuck in the kernel.
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
    fn a_turn_is_reported_once_when_quiet_past_its_limit_then_going_again() {
        let s = Shared::new();
        s.begin_at("rest of a plan", 100);
        assert_eq!(s.check_at(150, 100), None, "not yet");
        let stalled = s.check_at(200, 100).expect("reported");
        assert_eq!(
            stalled,
            Stalled {
                what: "rest of a plan",
                for_ms: 100,
                quiet_ms: 100
            }
        );
        assert_eq!(s.check_at(900, 100), None, "reported once");
        assert_eq!(
            s.end_at(1000),
            Some(Again {
                what: "rest of a plan",
                took_ms: 900,
                quiet_ms: 900
            })
        );
        assert_eq!(s.check_at(5000, 100), None, "no turn");
    }

    #[test]
    fn a_turn_that_beats_is_not_reported_and_a_resumed_one_is_said_going() {
        let s = Shared::new();
        s.begin_at("periodic reconcile", 100);
        for now in (150..1000).step_by(50) {
            assert_eq!(s.progress_at(now), None);
            assert_eq!(s.check_at(now + 60, 100), None, "{now}");
        }
        assert!(s.check_at(1200, 100).is_some());
        let again = s.progress_at(1300).expect("going again");
        assert_eq!((again.took_ms, again.quiet_ms), (1200, 350));
        // Stuck again in the same turn: said again.
        assert!(s.check_at(1400, 100).is_some());
        assert!(s.end_at(1500).is_some());
    }

    #[test]
    fn a_report_is_never_left_on_the_next_turn() {
        let s = Shared::new();
        s.begin_at("cgroup changes", 100);
        // The turn ended and another began after the thread read `since`:
        // its mark cannot land on the new turn.
        let seen = s.since.load(Ordering::Acquire);
        assert_eq!(s.end_at(250), None);
        s.begin_at("status publish", 260);
        assert!(
            s.since
                .compare_exchange(seen, seen | REPORTED, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
        );
        assert_eq!(s.check_at(300, 100), None);
        assert_eq!(s.end_at(301), None, "the new turn was not reported");
        s.begin_at("status publish", 400);
        let stalled = s.check_at(600, 100).expect("reported");
        assert_eq!(stalled.what, "status publish");
        assert_eq!(stalled.for_ms, 200);
    }

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
