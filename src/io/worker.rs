//! Behind the [`super::IoPool`]: the detached worker threads, the queue, the
//! steps of a job and their timeouts, and the hung-path marks.
//!
//! Invariants, all under one mutex:
//! - `healthy + stuck` is the number of live worker threads, at most
//!   `max(threads, max_stuck)`; `healthy` is at most `threads`.
//! - A path is in the hung set exactly while a call on it has timed out and
//!   not yet returned; that call's thread clears the mark, then rejoins the
//!   pool or, if it was replaced, exits.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::{self};
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::*;

/// Called on the I/O thread: runs the job (or refuses it) and returns the
/// closure that sends its outcome, which the worker calls under the state
/// lock.
pub(super) type Work = Box<dyn for<'a> FnOnce(Start<'a>) -> Deliver + Send>;
/// Sends a job's result to its caller.
pub(super) type Deliver = Box<dyn FnOnce() + Send>;

/// What a thread does with a queued job.
pub(super) enum Start<'a> {
    /// Runs it.
    Run(&'a dyn Fs, &'a Steps<'a>),
    /// Never will: its path was marked hung while it waited, or the pool is
    /// shutting down or has no healthy thread left.
    Refuse(IoError),
}

pub(super) struct Shared {
    pub(super) fs: Arc<dyn Fs>,
    /// Normalised: `threads >= 1`, `max_stuck >= threads`, `queue >= 1`.
    pub(super) config: IoConfig,
    /// Queue slots, so a full queue makes callers wait without blocking.
    pub(super) slots: Arc<Semaphore>,
    pub(super) state: Mutex<State>,
    /// Signalled when a job is queued or the pool shuts down.
    pub(super) work_ready: Condvar,
}

#[derive(Default)]
pub(super) struct State {
    pub(super) queue: VecDeque<Job>,
    /// Jobs a thread has started and not finished, by job id.
    pub(super) running: HashMap<u64, Running>,
    pub(super) hung: BTreeMap<PathBuf, Mark>,
    pub(super) healthy: usize,
    pub(super) stuck: usize,
    pub(super) closed: bool,
    pub(super) next_job: u64,
    pub(super) next_thread: usize,
    pub(super) completed: u64,
    pub(super) timeouts: u64,
    pub(super) failed_fast: u64,
}

pub(super) struct Job {
    pub(super) id: u64,
    pub(super) key: PathBuf,
    /// Whether `key` being hung refuses the whole job (a batch checks each
    /// item instead).
    pub(super) check_hung: bool,
    pub(super) op: &'static str,
    /// Nobody is told when the job starts (that would wake the caller's
    /// loop once more per job): its timeout is put off while it waits
    /// ([`Shared::expire`]).
    pub(super) work: Work,
    pub(super) _slot: OwnedSemaphorePermit,
}

/// A job a thread is running. A job is one or more *steps*, each a call about
/// one path with a timeout of its own: a plain job is one step on its key; a
/// batch ([`IoPool::run_batch`]) begins a step per item.
pub(super) struct Running {
    /// When the current step began (or the last one ended).
    pub(super) started: Instant,
    /// The current step's path; `None` between steps.
    pub(super) key: Option<PathBuf>,
    /// The path marked hung when the current step timed out: the job is then
    /// abandoned, and the mark is cleared when the step returns.
    pub(super) marked: Option<PathBuf>,
}

pub(super) struct Mark {
    pub(super) since: Instant,
    pub(super) op: &'static str,
    /// Calls on this path that timed out and have not returned.
    pub(super) stuck: usize,
}

/// What the async side found when the timeout passed.
pub(super) enum Expired {
    /// The current step is still running: its path (returned) is now marked
    /// hung and the job abandoned.
    Marked(PathBuf),
    /// The job returned just before: its result is in the channel.
    Finished,
    /// The job moved on to a later step: wait until then.
    Later(tokio::time::Instant),
}

/// How a submitted job ended without a result.
pub(super) enum Ended {
    /// Never started: the pool refused it.
    Refused(IoError),
    /// A step did not return in time: this path is now marked hung.
    TimedOut(PathBuf),
    /// The job ended without sending its result (it cannot; kept for safety).
    Lost,
}

/// Locks a batch's results; a panic while holding it cannot leave them torn.
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Given to a job on its I/O thread, to time each of its steps on its own.
pub(crate) struct Steps<'a> {
    pub(super) shared: &'a Shared,
    pub(super) id: u64,
}

impl Steps<'_> {
    /// Begins a step about `key`: its timeout counts from now. `Err(None)`
    /// when the job was abandoned (an earlier step timed out) and must stop;
    /// `Err(Some(e))` when `key` or a path above it is marked hung.
    pub(super) fn begin(&self, key: &Path) -> Result<(), Option<IoError>> {
        let mut state = self.shared.lock();
        let hung = state.refuse_hung(key);
        let Some(running) = state.running.get_mut(&self.id) else {
            return Err(None);
        };
        if running.marked.is_some() {
            return Err(None);
        }
        if let Some(refused) = hung {
            return Err(Some(refused));
        }
        running.key = Some(key.to_path_buf());
        running.started = Instant::now();
        Ok(())
    }

    /// Ends the current step, handing its result in with `keep`: until the
    /// next step begins, no timeout runs. When the step has timed out
    /// meanwhile, the result is dropped and `keep` never runs: the caller
    /// has reported the timeout in its place, and the items after it run
    /// in a new job whose results this one must not land among. Under the
    /// pool's lock, so a step either ends or times out, never both.
    pub(super) fn end(&self, keep: impl FnOnce()) {
        let mut state = self.shared.lock();
        if let Some(running) = state.running.get_mut(&self.id)
            && running.marked.is_none()
        {
            keep();
            running.key = None;
            running.started = Instant::now();
        }
    }
}

impl Shared {
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves the counters consistent enough;
        // refusing all I/O afterwards would take the daemon down with it.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts one worker thread, counted as healthy.
    pub(super) fn spawn_worker(self: &Arc<Self>, state: &mut State) {
        let n = state.next_thread;
        state.next_thread += 1;
        let shared = Arc::clone(self);
        // The JoinHandle is dropped: workers are detached, so nothing can ever
        // wait on a stuck one.
        match thread::Builder::new()
            .name(format!("pinctl-io-{n}"))
            .spawn(move || shared.work())
        {
            Ok(_) => state.healthy += 1,
            Err(e) => tracing::error!(error = %e, "failed to start I/O thread pinctl-io-{n}"),
        }
    }

    /// A worker thread's loop.
    pub(super) fn work(self: Arc<Self>) {
        let mut state = self.lock();
        loop {
            let job = loop {
                if state.closed {
                    state.healthy = state.healthy.saturating_sub(1);
                    return;
                }
                if let Some(job) = state.queue.pop_front() {
                    break job;
                }
                state = self
                    .work_ready
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
            };
            let Job {
                id,
                key,
                check_hung,
                op,
                work,
                _slot,
            } = job;
            drop(_slot);
            // The path may have been marked hung while the job waited.
            if let Some(refused) = check_hung.then(|| state.refuse_hung(&key)).flatten() {
                work(Start::Refuse(refused))();
                continue;
            }
            let started = Instant::now();
            // The first step is the job's own key.
            state.running.insert(
                id,
                Running {
                    started,
                    key: Some(key),
                    marked: None,
                },
            );
            drop(state);

            let steps = Steps { shared: &self, id };
            let deliver =
                panic::catch_unwind(AssertUnwindSafe(|| work(Start::Run(&*self.fs, &steps))));

            state = self.lock();
            let marked = state.running.remove(&id).and_then(|r| r.marked);
            // Delivered under the lock, so `expire` sees either a running job
            // or a result already in the channel.
            if let Ok(deliver) = deliver {
                let _ = panic::catch_unwind(AssertUnwindSafe(deliver));
            }
            let Some(marked) = marked else {
                state.completed += 1;
                continue;
            };
            state.stuck = state.stuck.saturating_sub(1);
            state.clear_mark(&marked, op);
            if state.closed || state.healthy >= self.config.threads {
                // A replacement took this thread's place.
                return;
            }
            state.healthy += 1;
        }
    }

    /// Called on the async side when a job's deadline has passed (counted
    /// from when it was queued, until it starts).
    pub(super) fn expire(self: &Arc<Self>, id: u64, op: &'static str) -> Expired {
        let mut state = self.lock();
        let timeout = self.config.timeout;
        if state.queue.iter().any(|job| job.id == id) {
            // Still waiting: its timeout counts from when it starts.
            return Expired::Later(deadline(Instant::now(), timeout));
        }
        let Some(running) = state.running.get_mut(&id) else {
            return Expired::Finished;
        };
        if let Some(marked) = &running.marked {
            return Expired::Marked(marked.clone());
        }
        let Some(key) = running.key.clone() else {
            // Between steps: the next one brings its own deadline.
            return Expired::Later(deadline(Instant::now(), timeout));
        };
        let due = deadline(running.started, timeout);
        if due > tokio::time::Instant::now() {
            return Expired::Later(due);
        }
        running.marked = Some(key.clone());
        let key = key.as_path();
        state.timeouts += 1;
        state.stuck += 1;
        state.healthy = state.healthy.saturating_sub(1);
        let now = Instant::now();
        state
            .hung
            .entry(key.to_path_buf())
            .or_insert(Mark {
                since: now,
                op,
                stuck: 0,
            })
            .stuck += 1;
        tracing::warn!(
            path = %key.display(),
            op,
            timeout = ?self.config.timeout,
            stuck = state.stuck,
            "I/O call did not return in time; path marked hung"
        );
        if !state.closed
            && state.healthy < self.config.threads
            && state.healthy + state.stuck < self.config.max_stuck
        {
            self.spawn_worker(&mut state);
        }
        if state.healthy == 0 && !state.closed {
            tracing::error!(
                stuck = state.stuck,
                "all I/O threads are stuck; refusing I/O until one returns"
            );
            // Nothing would ever run these: fail them now.
            while let Some(job) = state.queue.pop_front() {
                state.failed_fast += 1;
                (job.work)(Start::Refuse(IoError::Saturated { path: job.key }))();
            }
        }
        Expired::Marked(key.to_path_buf())
    }

    pub(super) fn shutdown(&self) {
        let mut state = self.lock();
        if state.closed {
            return;
        }
        state.closed = true;
        self.slots.close();
        while let Some(job) = state.queue.pop_front() {
            (job.work)(Start::Refuse(IoError::ShutDown))();
        }
        drop(state);
        self.work_ready.notify_all();
        tracing::debug!("I/O pool shut down");
    }
}

impl State {
    /// Whether a new job on `key` may be queued (and, with `check_hung`,
    /// whether `key` is not hung).
    pub(super) fn admit(&mut self, key: &Path, check_hung: bool) -> Result<(), IoError> {
        if self.closed {
            return Err(IoError::ShutDown);
        }
        if check_hung && let Some(refused) = self.refuse_hung(key) {
            return Err(refused);
        }
        if self.healthy == 0 {
            self.failed_fast += 1;
            return Err(IoError::Saturated {
                path: key.to_path_buf(),
            });
        }
        Ok(())
    }

    /// The `Hung` error if `key` or a directory above it is marked.
    pub(super) fn refuse_hung(&mut self, key: &Path) -> Option<IoError> {
        // Marks are few (each holds a stuck thread), so a scan is fine.
        let (path, mark) = self.hung.iter().find(|(path, _)| key.starts_with(path))?;
        let refused = IoError::Hung {
            path: path.clone(),
            secs: mark.since.elapsed().as_secs(),
        };
        self.failed_fast += 1;
        Some(refused)
    }

    /// A stuck call on `key` returned: drop one stuck count from its mark.
    pub(super) fn clear_mark(&mut self, key: &Path, op: &'static str) {
        let Some(mark) = self.hung.get_mut(key) else {
            return;
        };
        mark.stuck = mark.stuck.saturating_sub(1);
        let stuck_for = mark.since.elapsed();
        if mark.stuck == 0 {
            self.hung.remove(key);
            tracing::info!(
                path = %key.display(),
                op,
                ?stuck_for,
                "hung I/O call returned; path no longer marked hung"
            );
        } else {
            tracing::info!(
                path = %key.display(),
                op,
                ?stuck_for,
                "hung I/O call returned; others on the path are still stuck"
            );
        }
    }
}

/// Keeps a cancelled caller from leaving work behind: if the caller's future is
/// dropped while the job waits in the queue, the job is removed; if it is
/// dropped while the job runs, a task still marks the job timed out when its
/// deadline passes, so a stuck thread is never left unaccounted for.
pub(super) struct Watch {
    pub(super) shared: Arc<Shared>,
    pub(super) id: u64,
    pub(super) op: &'static str,
    /// Set once the caller has the outcome.
    pub(super) settled: bool,
}

impl Drop for Watch {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        let mut state = self.shared.lock();
        if let Some(at) = state.queue.iter().position(|job| job.id == self.id) {
            state.queue.remove(at);
            return;
        }
        let Some(started) = state.running.get(&self.id).map(|r| r.started) else {
            return;
        };
        drop(state);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut due = deadline(started, self.shared.config.timeout);
        let shared = Arc::clone(&self.shared);
        let (id, op) = (self.id, self.op);
        runtime.spawn(async move {
            loop {
                tokio::time::sleep_until(due).await;
                // A no-op if the job has returned by now.
                match shared.expire(id, op) {
                    Expired::Later(later) => due = later,
                    Expired::Marked(_) | Expired::Finished => break,
                }
            }
        });
    }
}

/// When a job started at `started` times out. Clamped so that an absurd
/// timeout cannot overflow `Instant`.
pub(super) fn deadline(started: Instant, timeout: Duration) -> tokio::time::Instant {
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    tokio::time::Instant::from_std(started + timeout.min(CENTURY))
}

pub(super) fn panic_error(payload: &(dyn std::any::Any + Send)) -> io::Error {
    let message = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)");
    tracing::error!(panic = message, "I/O job panicked");
    io::Error::other(format!("the I/O job panicked: {message}"))
}

pub(super) fn lost_error() -> io::Error {
    io::Error::other("the I/O job ended without a result")
}
