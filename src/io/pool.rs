//! The [`IoPool`] as its callers see it: jobs submitted from async code,
//! each with a timeout; the errors they get; the statistics and hung paths
//! it reports.

use std::fmt;
use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{Semaphore, oneshot};

use super::worker::*;
use super::*;

/// How the pool is sized and how long a call may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoConfig {
    /// Healthy worker threads the pool keeps (default 2; 0 counts as 1).
    pub threads: usize,
    /// How long one call may run, from the moment a thread starts it, before its
    /// path is marked hung (default 5 s).
    pub timeout: Duration,
    /// The most threads that may be stuck at once (default 8). The pool never
    /// runs more than `max(threads, max_stuck)` threads: a stuck thread is
    /// replaced while that bound allows, and when `max_stuck` threads are stuck
    /// no healthy one is left and jobs fail with [`IoError::Saturated`]. Values
    /// below `threads` count as `threads`.
    pub max_stuck: usize,
    /// Jobs that may wait in the queue (default 1024; 0 counts as 1). When it
    /// is full, [`IoPool::run`] waits asynchronously for room.
    pub queue: usize,
}

impl Default for IoConfig {
    fn default() -> Self {
        Self {
            threads: 2,
            timeout: Duration::from_secs(5),
            max_stuck: 8,
            queue: 1024,
        }
    }
}

/// A path currently marked hung, as reported by [`IoPool::hung`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HungPath {
    /// The key of the call that timed out.
    pub path: PathBuf,
    /// When it was marked (the first timeout, if several calls on it are stuck).
    pub since: Instant,
    /// The operation that timed out first (`"read"`, `"write"`, ...).
    pub op: &'static str,
}

/// A snapshot of the pool's counters, from [`IoPool::stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoStats {
    /// Live worker threads that are not stuck (idle or running a call still
    /// within its timeout).
    pub threads: usize,
    /// Threads stuck in a call that timed out and has not returned.
    pub stuck: usize,
    /// Jobs waiting in the queue.
    pub queued: usize,
    /// Calls that returned (successfully, with an error, or by panicking)
    /// within their timeout.
    pub completed: u64,
    /// Calls that timed out.
    pub timeouts: u64,
    /// Jobs refused without being attempted because their path was hung or all
    /// threads were stuck.
    pub failed_fast: u64,
}

/// Why an [`IoPool`] job failed.
#[derive(Debug, thiserror::Error)]
pub enum IoError {
    /// The call returned an error (a panicking job is reported here too, as
    /// [`io::ErrorKind::Other`]).
    #[error("failed to {op} {path}")]
    Os {
        /// The operation (`"read"`, `"read directory"`, ...).
        op: &'static str,
        /// The path the job was about.
        path: PathBuf,
        /// What the call returned.
        #[source]
        source: io::Error,
    },
    /// A write returned an error.
    #[error("failed to write {data:?} to {path}")]
    Write {
        /// The file written.
        path: PathBuf,
        /// The data that was being written.
        data: String,
        /// What the call returned.
        #[source]
        source: io::Error,
    },
    /// The call did not return within the timeout; its path is now hung.
    #[error("{op} {path} did not return within {timeout:?}; marked hung")]
    Timeout {
        /// The operation.
        op: &'static str,
        /// The path the job was about, now marked hung.
        path: PathBuf,
        /// The timeout that passed.
        timeout: Duration,
    },
    /// The job was refused because its path, or a directory above it, is
    /// marked hung.
    #[error("{path} is hung (since {secs}s ago); not retried until the stuck call returns")]
    Hung {
        /// The marked path (the job's own path or one above it).
        path: PathBuf,
        /// How long ago it was marked, in whole seconds.
        secs: u64,
    },
    /// The job was refused because every thread is stuck.
    #[error("all I/O threads are stuck; {path} not attempted")]
    Saturated {
        /// The path the job was about.
        path: PathBuf,
    },
    /// The pool was shut down before the job started.
    #[error("the I/O pool is shut down")]
    ShutDown,
}

impl IoError {
    /// The OS error number, for [`IoError::Os`] and [`IoError::Write`] errors
    /// that carry one.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            Self::Os { source, .. } | Self::Write { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }

    /// Whether the call failed because the path does not exist (`ENOENT`); a
    /// vanished cgroup is routine, not a failure.
    pub fn is_not_found(&self) -> bool {
        match self {
            Self::Os { source, .. } | Self::Write { source, .. } => {
                source.kind() == io::ErrorKind::NotFound
            }
            _ => false,
        }
    }

    /// The same refusal for a job about `path` (a batch refused as a whole
    /// answers each item with it).
    pub(super) fn refused_for(&self, path: &Path) -> IoError {
        match self {
            Self::Hung { path: marked, secs } => Self::Hung {
                path: marked.clone(),
                secs: *secs,
            },
            Self::ShutDown => Self::ShutDown,
            _ => Self::Saturated {
                path: path.to_path_buf(),
            },
        }
    }

    /// The path the error is about, if any.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Self::Os { path, .. }
            | Self::Write { path, .. }
            | Self::Timeout { path, .. }
            | Self::Hung { path, .. }
            | Self::Saturated { path } => Some(path),
            Self::ShutDown => None,
        }
    }
}

/// Runs blocking filesystem calls on dedicated threads with a timeout (see
/// [`crate::io`]). Cheap to clone: clones share one pool, which shuts down
/// when the last clone is dropped.
///
/// The timeout runs on the async side with `tokio::time`, from when a thread
/// starts the call. The start wakes nobody (a queued job's deadline is put
/// off), so a job wakes its caller once, with its result, sent over a
/// `oneshot`.
#[derive(Clone)]
pub struct IoPool {
    handle: Arc<Handle>,
}

impl fmt::Debug for IoPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IoPool")
            .field("config", &self.handle.shared.config)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// Owned by the `IoPool` clones only (the workers hold `Shared`), so its drop
/// means no caller is left.
pub(super) struct Handle {
    shared: Arc<Shared>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.shared.shutdown();
    }
}

impl IoPool {
    /// Starts the pool's threads. Never fails: a thread that cannot be spawned
    /// is logged and the pool runs with fewer (with none, every job fails with
    /// [`IoError::Saturated`]).
    pub fn new(fs: Arc<dyn Fs>, config: IoConfig) -> Self {
        let threads = config.threads.max(1);
        let config = IoConfig {
            threads,
            timeout: config.timeout,
            max_stuck: config.max_stuck.max(threads),
            queue: config.queue.clamp(1, Semaphore::MAX_PERMITS),
        };
        let shared = Arc::new(Shared {
            fs,
            config,
            slots: Arc::new(Semaphore::new(config.queue)),
            state: Mutex::new(State::default()),
            work_ready: Condvar::new(),
        });
        {
            let mut state = shared.lock();
            for _ in 0..threads {
                shared.spawn_worker(&mut state);
            }
        }
        Self {
            handle: Arc::new(Handle { shared }),
        }
    }

    /// Runs `job` on an I/O thread and returns its result.
    ///
    /// `key` is the path the job is about. If the job does not finish within
    /// the timeout, `key` is marked hung and this returns [`IoError::Timeout`];
    /// while it is marked, every job whose key is `key` or below it fails at once
    /// with [`IoError::Hung`] without being queued. The mark is cleared when the
    /// stuck call finally returns. An error from `job` is reported as
    /// [`IoError::Os`] with the operation `"access"`.
    ///
    /// Cancel-safe: dropping the future before a thread starts the job means it
    /// never runs; dropping it while the job runs still marks `key` hung if the
    /// job overruns the timeout.
    pub async fn run<T, F>(&self, key: &Path, job: F) -> Result<T, IoError>
    where
        T: Send + 'static,
        F: FnOnce(&dyn Fs) -> io::Result<T> + Send + 'static,
    {
        self.run_op("access", key, job).await
    }

    /// [`IoPool::run`], naming the operation (`"read"`, `"remove"`, ...) for
    /// errors, logs and [`IoPool::hung`].
    pub async fn run_op<T, F>(&self, op: &'static str, key: &Path, job: F) -> Result<T, IoError>
    where
        T: Send + 'static,
        F: FnOnce(&dyn Fs) -> io::Result<T> + Send + 'static,
    {
        let key = key.to_path_buf();
        let work = move |fs: &dyn Fs, _: &Steps<'_>| {
            panic::catch_unwind(AssertUnwindSafe(|| job(fs)))
                .unwrap_or_else(|payload| Err(panic_error(&*payload)))
        };
        match self.submit(op, key.clone(), true, work).await {
            Ok(result) => result.map_err(|source| IoError::Os {
                op,
                path: key,
                source,
            }),
            Err(Ended::Refused(e)) => Err(e),
            Err(Ended::TimedOut(path)) => Err(IoError::Timeout {
                op,
                path,
                timeout: self.handle.shared.config.timeout,
            }),
            Err(Ended::Lost) => Err(IoError::Os {
                op,
                path: key,
                source: lost_error(),
            }),
        }
    }

    /// Runs `job` on each item in turn (given the item's path and the item),
    /// on one I/O thread: one trip through
    /// the queue for many small calls (reading a whole subtree of cgroups),
    /// instead of one per call. Returns one result per item, in order.
    ///
    /// Each item is a step with its own path and its own timeout, counted from
    /// when it starts, and behaves as [`IoPool::run_op`] would on its own: an
    /// item whose path (or one above it) is marked hung fails at once with
    /// [`IoError::Hung`]; an item that does not return in time marks its path
    /// hung and fails with [`IoError::Timeout`], and the items after it go on
    /// in a new job on another thread. So a hung path costs its own items one
    /// timeout, never the rest of the batch. Should the item that timed out
    /// return after all, its late result is dropped: the timeout stands in
    /// its place, and every result stays beside its own item.
    pub async fn run_batch<I, T, F>(
        &self,
        op: &'static str,
        items: Vec<(PathBuf, I)>,
        job: F,
    ) -> Vec<Result<T, IoError>>
    where
        I: Send + Sync + 'static,
        T: Send + 'static,
        F: Fn(&dyn Fs, &Path, &I) -> io::Result<T> + Send + Sync + 'static,
    {
        let n = items.len();
        let items = Arc::new(items);
        let job = Arc::new(job);
        let results: Arc<Mutex<Vec<Result<T, IoError>>>> =
            Arc::new(Mutex::new(Vec::with_capacity(n)));
        let mut from = 0;
        while from < n {
            let (items_, job_, results_) = (items.clone(), job.clone(), results.clone());
            let work = move |fs: &dyn Fs, steps: &Steps<'_>| {
                for (key, item) in &items_[from..] {
                    let result = match steps.begin(key) {
                        Err(None) => return,
                        Err(Some(hung)) => Err(hung),
                        Ok(()) => {
                            let r = panic::catch_unwind(AssertUnwindSafe(|| job_(fs, key, item)))
                                .unwrap_or_else(|payload| Err(panic_error(&*payload)));
                            r.map_err(|source| IoError::Os {
                                op,
                                path: key.clone(),
                                source,
                            })
                        }
                    };
                    steps.end(|| lock(&results_).push(result));
                }
            };
            let ended = self.submit(op, items[from].0.clone(), false, work).await;
            let mut done = lock(&results);
            match ended {
                Ok(()) => {}
                Err(Ended::TimedOut(path)) if done.len() < n => {
                    done.push(Err(IoError::Timeout {
                        op,
                        path,
                        timeout: self.handle.shared.config.timeout,
                    }));
                }
                Err(Ended::TimedOut(_)) => {}
                Err(Ended::Refused(e)) => {
                    for (key, _) in &items[done.len()..] {
                        done.push(Err(e.refused_for(key)));
                    }
                }
                Err(Ended::Lost) => {
                    for (key, _) in &items[done.len()..] {
                        done.push(Err(IoError::Os {
                            op,
                            path: key.clone(),
                            source: lost_error(),
                        }));
                    }
                }
            }
            from = done.len();
        }
        std::mem::take(&mut *lock(&results))
    }

    /// Queues `work` about `key` and waits for what it returns. With
    /// `check_hung`, a `key` marked hung is refused at once (a batch checks
    /// each item instead).
    async fn submit<R, W>(
        &self,
        op: &'static str,
        key: PathBuf,
        check_hung: bool,
        work: W,
    ) -> Result<R, Ended>
    where
        R: Send + 'static,
        W: FnOnce(&dyn Fs, &Steps<'_>) -> R + Send + 'static,
    {
        let shared = &self.handle.shared;
        shared
            .lock()
            .admit(&key, check_hung)
            .map_err(Ended::Refused)?;
        let slot = Arc::clone(&shared.slots)
            .acquire_owned()
            .await
            .map_err(|_| Ended::Refused(IoError::ShutDown))?;

        let (reply_tx, mut reply_rx) = oneshot::channel::<Result<R, IoError>>();
        let work: Work = Box::new(move |start: Start<'_>| -> Deliver {
            let result = match start {
                Start::Run(fs, steps) => Ok(work(fs, steps)),
                Start::Refuse(refused) => Err(refused),
            };
            Box::new(move || {
                // The caller may have timed out or gone: then nobody wants it.
                let _ = reply_tx.send(result);
            })
        });

        let id = {
            let mut state = shared.lock();
            state.admit(&key, check_hung).map_err(Ended::Refused)?;
            let id = state.next_job;
            state.next_job += 1;
            state.queue.push_back(Job {
                id,
                key,
                check_hung,
                op,
                work,
                _slot: slot,
            });
            id
        };
        shared.work_ready.notify_one();

        let mut watch = Watch {
            shared: Arc::clone(shared),
            id,
            op,
            settled: false,
        };
        // The timeout counts from when a thread starts the job; until then
        // `expire` finds it queued and puts the deadline off.
        let mut due = deadline(Instant::now(), shared.config.timeout);
        let outcome = loop {
            match tokio::time::timeout_at(due, &mut reply_rx).await {
                Ok(reply) => break reply.ok(),
                Err(_) => match shared.expire(id, op) {
                    Expired::Later(later) => due = later,
                    Expired::Marked(path) => {
                        watch.settled = true;
                        return Err(Ended::TimedOut(path));
                    }
                    Expired::Finished => break reply_rx.try_recv().ok(),
                },
            }
        };
        watch.settled = true;
        match outcome {
            Some(Ok(result)) => Ok(result),
            Some(Err(refused)) => Err(Ended::Refused(refused)),
            None => Err(Ended::Lost),
        }
    }

    /// Reads the whole file as UTF-8.
    pub async fn read(&self, path: &Path) -> Result<String, IoError> {
        let owned = path.to_path_buf();
        self.run_op("read", path, move |fs| fs.read(&owned)).await
    }

    /// Writes `data` to an existing file with one `write(2)`; an error from the
    /// call carries the data ([`IoError::Write`]).
    pub async fn write(&self, path: &Path, data: &str) -> Result<(), IoError> {
        let owned = path.to_path_buf();
        let payload = data.to_owned();
        match self
            .run_op("write", path, move |fs| fs.write(&owned, &payload))
            .await
        {
            Err(IoError::Os { path, source, .. }) => Err(IoError::Write {
                path,
                data: data.to_owned(),
                source,
            }),
            other => other,
        }
    }

    /// Lists a directory ([`Fs::read_dir`]).
    pub async fn read_dir(&self, path: &Path) -> Result<Vec<Entry>, IoError> {
        let owned = path.to_path_buf();
        self.run_op("read directory", path, move |fs| fs.read_dir(&owned))
            .await
    }

    /// Reads an extended attribute; `None` when absent or unsupported.
    pub async fn get_xattr(&self, path: &Path, name: &str) -> Result<Option<Vec<u8>>, IoError> {
        let owned = path.to_path_buf();
        let name = name.to_owned();
        self.run_op("get xattr of", path, move |fs| fs.get_xattr(&owned, &name))
            .await
    }

    /// Sets an extended attribute.
    pub async fn set_xattr(&self, path: &Path, name: &str, value: &[u8]) -> Result<(), IoError> {
        let owned = path.to_path_buf();
        let name = name.to_owned();
        let value = value.to_vec();
        self.run_op("set xattr on", path, move |fs| {
            fs.set_xattr(&owned, &name, &value)
        })
        .await
    }

    /// Creates one directory.
    pub async fn mkdir(&self, path: &Path) -> Result<(), IoError> {
        let owned = path.to_path_buf();
        self.run_op("create directory", path, move |fs| fs.mkdir(&owned))
            .await
    }

    /// Removes one directory (an empty cgroup).
    pub async fn rmdir(&self, path: &Path) -> Result<(), IoError> {
        let owned = path.to_path_buf();
        self.run_op("remove directory", path, move |fs| fs.rmdir(&owned))
            .await
    }

    /// Whether the path exists.
    pub async fn exists(&self, path: &Path) -> Result<bool, IoError> {
        let owned = path.to_path_buf();
        self.run_op("check", path, move |fs| fs.exists(&owned))
            .await
    }

    /// The paths currently marked hung, in path order.
    pub fn hung(&self) -> Vec<HungPath> {
        self.handle
            .shared
            .lock()
            .hung
            .iter()
            .map(|(path, mark)| HungPath {
                path: path.clone(),
                since: mark.since,
                op: mark.op,
            })
            .collect()
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> IoStats {
        let state = self.handle.shared.lock();
        IoStats {
            threads: state.healthy,
            stuck: state.stuck,
            queued: state.queue.len(),
            completed: state.completed,
            timeouts: state.timeouts,
            failed_fast: state.failed_fast,
        }
    }

    /// Stops accepting work: queued jobs that have not started fail with
    /// [`IoError::ShutDown`], as does every later job; idle threads exit. Never
    /// waits: running and stuck calls go on and their threads exit when they
    /// return. Dropping the last clone does the same.
    pub fn shutdown(&self) {
        self.handle.shared.shutdown();
    }
}
