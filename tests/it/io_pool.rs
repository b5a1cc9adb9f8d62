//! The I/O pool: real file operations on a tempdir, and what happens when a
//! call hangs (a FIFO with no writer, or a fake `Fs` that blocks until the test
//! releases it).
//!
//! Every async test runs inside `bounded`, so a regression that hangs fails
//! after a few seconds instead of wedging the suite.

use std::ffi::OsStr;
use std::fs::OpenOptions;
use std::future::Future;
use std::io::{self, Write as _};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use nix::sys::stat::Mode;
use pinctl::io::{Entry, Fs, IoConfig, IoError, IoPool, RealFs};

/// Generous bound for "returns at once": a refusal never leaves the calling
/// task, so it takes microseconds; this only absorbs a loaded test machine.
const AT_ONCE: Duration = Duration::from_millis(100);

fn config(threads: usize, max_stuck: usize, timeout_ms: u64) -> IoConfig {
    IoConfig {
        threads,
        timeout: Duration::from_millis(timeout_ms),
        max_stuck,
        queue: 16,
    }
}

async fn bounded<T>(test: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), test)
        .await
        .expect("the test did not finish within 10 s")
}

/// Polls `done` every 5 ms for up to 3 s.
async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "timed out waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A fake filesystem: reads of paths under `/block` hang until `release`;
/// everything else answers at once.
#[derive(Default)]
struct GateFs {
    open: Mutex<bool>,
    opened: Condvar,
    /// Reads blocked right now, and the most there ever were at once.
    inside: AtomicUsize,
    peak: AtomicUsize,
}

impl GateFs {
    fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    fn release(&self) {
        *self.open.lock().unwrap() = true;
        self.opened.notify_all();
    }

    fn inside(&self) -> usize {
        self.inside.load(Ordering::SeqCst)
    }
}

impl Fs for GateFs {
    fn read(&self, path: &Path) -> io::Result<String> {
        if path.starts_with("/block") {
            let now = self.inside.fetch_add(1, Ordering::SeqCst) + 1;
            self.peak.fetch_max(now, Ordering::SeqCst);
            let mut open = self.open.lock().unwrap();
            while !*open {
                open = self.opened.wait(open).unwrap();
            }
            self.inside.fetch_sub(1, Ordering::SeqCst);
            return Ok(format!("released {}", path.display()));
        }
        if path.starts_with("/slow") {
            std::thread::sleep(Duration::from_millis(60));
        }
        Ok(format!("ok {}", path.display()))
    }
    fn write(&self, _: &Path, _: &str) -> io::Result<()> {
        Ok(())
    }
    fn read_dir(&self, _: &Path) -> io::Result<Vec<Entry>> {
        Ok(Vec::new())
    }
    fn get_xattr(&self, _: &Path, _: &str) -> io::Result<Option<Vec<u8>>> {
        Ok(None)
    }
    fn set_xattr(&self, _: &Path, _: &str, _: &[u8]) -> io::Result<()> {
        Ok(())
    }
    fn mkdir(&self, _: &Path) -> io::Result<()> {
        Ok(())
    }
    fn exists(&self, _: &Path) -> io::Result<bool> {
        Ok(true)
    }
}

fn hung_paths(pool: &IoPool) -> Vec<PathBuf> {
    pool.hung().into_iter().map(|h| h.path).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_fs_round_trip_on_a_tempdir() {
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let pool = IoPool::new(Arc::new(RealFs), config(2, 4, 2000));

        // A control file in a fake tree: the write replaces the content, as
        // the kernel file would.
        let cpus = root.join("cpuset.cpus");
        std::fs::write(&cpus, "0-15\n").unwrap();
        pool.write(&cpus, "0-3").await.unwrap();
        assert_eq!(pool.read(&cpus).await.unwrap(), "0-3");

        let sub = root.join("kubepods.slice");
        assert!(!pool.exists(&sub).await.unwrap());
        pool.mkdir(&sub).await.unwrap();
        assert!(pool.exists(&sub).await.unwrap());
        std::os::unix::fs::symlink(&sub, root.join("link")).unwrap();
        std::os::unix::fs::symlink(root.join("nowhere"), root.join("dangling")).unwrap();
        std::fs::write(root.join(OsStr::from_bytes(b"not-utf8-\xff")), "").unwrap();

        let mut entries = pool.read_dir(root).await.unwrap();
        entries.sort();
        let entry = |name: &str, is_dir| Entry {
            name: name.to_owned(),
            is_dir,
        };
        assert_eq!(
            entries,
            [
                // Kept, encoded: no name the kernel allows is dropped.
                entry("\0not-utf8-\\xff", false),
                entry("cpuset.cpus", false),
                entry("dangling", false),
                entry("kubepods.slice", true),
                entry("link", true),
            ]
        );

        let name = "user.pinctl.cpus";
        assert_eq!(pool.get_xattr(&sub, name).await.unwrap(), None);
        match pool.set_xattr(&sub, name, b"4").await {
            Ok(()) => assert_eq!(
                pool.get_xattr(&sub, name).await.unwrap().as_deref(),
                Some(&b"4"[..])
            ),
            // A filesystem without user xattrs: reads then say "absent".
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(libc::EOPNOTSUPP), "{e}");
                assert_eq!(pool.get_xattr(&sub, name).await.unwrap(), None);
            }
        }
        assert_eq!(pool.get_xattr(&sub, "user.missing").await.unwrap(), None);

        // Through a job of our own, on the same thread pool.
        let key = cpus.clone();
        let len = pool
            .run(&cpus, move |fs| fs.read(&key).map(|s| s.len()))
            .await
            .unwrap();
        assert_eq!(len, 3);

        let stats = pool.stats();
        assert_eq!((stats.threads, stats.stuck, stats.timeouts), (2, 0, 0));
        assert_eq!(stats.completed, 11);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_fs_errors_carry_the_path_the_data_and_the_errno() {
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        let pool = IoPool::new(Arc::new(RealFs), config(2, 4, 2000));
        let missing = dir.path().join("gone/cpuset.cpus");

        let err = pool.read(&missing).await.unwrap_err();
        assert!(matches!(&err, IoError::Os { op: "read", .. }), "{err:?}");
        assert_eq!(err.path(), Some(missing.as_path()));
        assert_eq!(err.raw_os_error(), Some(libc::ENOENT));
        assert!(err.is_not_found());
        assert_eq!(
            err.to_string(),
            format!("failed to read {}", missing.display())
        );
        assert!(std::error::Error::source(&err).is_some());

        // A write never creates the file: a misspelt control file is ENOENT.
        let err = pool.write(&missing, "0-3").await.unwrap_err();
        match &err {
            IoError::Write { path, data, source } => {
                assert_eq!(path, &missing);
                assert_eq!(data, "0-3");
                assert_eq!(source.raw_os_error(), Some(libc::ENOENT));
            }
            other => panic!("expected a write error, got {other:?}"),
        }
        assert_eq!(
            err.to_string(),
            format!("failed to write \"0-3\" to {}", missing.display())
        );
        assert!(err.is_not_found());
        assert!(!dir.path().join("gone").exists());

        let file = dir.path().join("file");
        std::fs::write(&file, "x").unwrap();
        let err = pool.read_dir(&file).await.unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOTDIR));
        assert!(!err.is_not_found());
        let err = pool.mkdir(dir.path()).await.unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EEXIST));
        assert_eq!(err.path(), Some(dir.path()));

        // Errors from a job of our own carry its key.
        let err = pool
            .run(&file, |_| -> io::Result<()> {
                Err(io::Error::from_raw_os_error(libc::EBUSY))
            })
            .await
            .unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EBUSY));
        assert_eq!(err.path(), Some(file.as_path()));
        assert_eq!(pool.stats().completed, 5);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifo_with_no_writer_times_out_is_marked_hung_and_recovers_when_released() {
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, Mode::S_IRUSR | Mode::S_IWUSR).unwrap();
        let other = dir.path().join("other");
        std::fs::write(&other, "fine").unwrap();
        // One thread, so the read of `other` proves the stuck one was replaced.
        let pool = IoPool::new(Arc::new(RealFs), config(1, 4, 200));

        // open(O_RDONLY) on a FIFO blocks until a writer appears.
        let start = Instant::now();
        let err = pool.read(&fifo).await.unwrap_err();
        assert!(start.elapsed() >= Duration::from_millis(200));
        match &err {
            IoError::Timeout { op, path, timeout } => {
                assert_eq!(
                    (*op, path, *timeout),
                    ("read", &fifo, Duration::from_millis(200))
                );
            }
            other => panic!("expected a timeout, got {other:?}"),
        }
        let hung = pool.hung();
        assert_eq!(hung.len(), 1);
        assert_eq!(
            (hung[0].path.as_path(), hung[0].op),
            (fifo.as_path(), "read")
        );

        // Not retried: refused at once, long before another timeout.
        let start = Instant::now();
        let err = pool.read(&fifo).await.unwrap_err();
        assert!(start.elapsed() < AT_ONCE, "took {:?}", start.elapsed());
        assert!(
            matches!(&err, IoError::Hung { path, .. } if path == &fifo),
            "{err:?}"
        );

        // Other paths are served meanwhile, by the replacement thread.
        assert_eq!(pool.read(&other).await.unwrap(), "fine");
        let stats = pool.stats();
        assert_eq!((stats.threads, stats.stuck), (1, 1));
        assert_eq!(
            (stats.timeouts, stats.failed_fast, stats.completed),
            (1, 1, 1)
        );

        // Opening the write end releases the stuck open(); O_NONBLOCK succeeds
        // because the stuck reader already counts as a reader.
        let mut writer = OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
            .unwrap();
        writer.write_all(b"first").unwrap();
        drop(writer);
        wait_until("the mark is cleared", || pool.hung().is_empty()).await;
        let stats = pool.stats();
        assert_eq!((stats.threads, stats.stuck), (1, 0));

        // The path is read again, once a writer is there to answer.
        let path = fifo.clone();
        let writer = std::thread::spawn(move || {
            let mut w = OpenOptions::new().write(true).open(path)?;
            w.write_all(b"second\n")
        });
        assert_eq!(pool.read(&fifo).await.unwrap(), "second\n");
        writer.join().unwrap().unwrap();
        assert_eq!(pool.stats().threads, 1);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_max_stuck_threads_are_stuck_jobs_fail_fast_and_the_pool_recovers() {
    bounded(async {
        let fs = GateFs::new();
        let pool = IoPool::new(fs.clone(), config(2, 3, 200));

        let reads: Vec<_> = (1..=3)
            .map(|i| {
                let pool = pool.clone();
                tokio::spawn(async move { pool.read(Path::new(&format!("/block/{i}"))).await })
            })
            .collect();
        for read in reads {
            let err = read.await.unwrap().unwrap_err();
            assert!(matches!(err, IoError::Timeout { .. }), "{err:?}");
        }
        // Two threads stuck first; one replacement took the third read and got
        // stuck too; no further thread was started.
        let stats = pool.stats();
        assert_eq!((stats.threads, stats.stuck, stats.timeouts), (0, 3, 3));
        assert_eq!(fs.inside(), 3);
        assert_eq!(fs.peak.load(Ordering::SeqCst), 3);
        assert_eq!(
            hung_paths(&pool),
            ["/block/1", "/block/2", "/block/3"].map(PathBuf::from)
        );

        // Saturated: refused at once, never queued.
        let start = Instant::now();
        let err = pool.read(Path::new("/other")).await.unwrap_err();
        assert!(start.elapsed() < AT_ONCE, "took {:?}", start.elapsed());
        assert!(
            matches!(&err, IoError::Saturated { path } if path == Path::new("/other")),
            "{err:?}"
        );
        let err = pool.run(Path::new("/x"), |_| Ok(())).await.unwrap_err();
        assert!(matches!(err, IoError::Saturated { .. }), "{err:?}");
        let stats = pool.stats();
        assert_eq!(
            (stats.queued, stats.failed_fast, stats.completed),
            (0, 2, 0)
        );

        fs.release();
        wait_until("every stuck call has returned", || {
            pool.stats().stuck == 0 && pool.hung().is_empty()
        })
        .await;
        // Two stuck threads rejoined; the third had been replaced and exited.
        assert_eq!(pool.stats().threads, 2);
        assert_eq!(pool.read(Path::new("/other")).await.unwrap(), "ok /other");
        assert_eq!(
            pool.read(Path::new("/block/1")).await.unwrap(),
            "released /block/1"
        );
        let stats = pool.stats();
        assert_eq!((stats.threads, stats.stuck, stats.timeouts), (2, 0, 3));
        assert_eq!(stats.completed, 2);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paths_below_a_hung_path_fail_fast_and_siblings_do_not() {
    bounded(async {
        let fs = GateFs::new();
        let pool = IoPool::new(fs.clone(), config(2, 4, 200));
        let err = pool.read(Path::new("/block/pod1")).await.unwrap_err();
        assert!(matches!(err, IoError::Timeout { .. }), "{err:?}");

        let below = Path::new("/block/pod1/cpuset.cpus");
        let err = pool.write(below, "0-3").await.unwrap_err();
        // Reported against the marked path, the one that is hung.
        assert!(
            matches!(&err, IoError::Hung { path, .. } if path == Path::new("/block/pod1")),
            "{err:?}"
        );
        assert_eq!(err.path(), Some(Path::new("/block/pod1")));
        assert!(
            err.to_string()
                .starts_with("/block/pod1 is hung (since 0s ago)"),
            "{err}"
        );

        // A sibling with the same prefix and the parent are not below it.
        for key in ["/block/pod10", "/block"] {
            let answer = pool.run(Path::new(key), move |_| Ok(key)).await.unwrap();
            assert_eq!(answer, key);
        }

        fs.release();
        wait_until("the mark is cleared", || pool.hung().is_empty()).await;
        pool.write(below, "0-3").await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_loop_keeps_ticking_while_more_reads_are_stuck_than_it_has_threads() {
    bounded(async {
        let fs = GateFs::new();
        let pool = IoPool::new(fs.clone(), config(4, 8, 5000));
        let reads: Vec<_> = (0..4)
            .map(|i| {
                let pool = pool.clone();
                tokio::spawn(async move { pool.read(Path::new(&format!("/block/{i}"))).await })
            })
            .collect();
        wait_until("all four reads are blocked", || fs.inside() == 4).await;

        let ticks = Arc::new(Mutex::new(Vec::new()));
        let ticker = {
            let ticks = Arc::clone(&ticks);
            tokio::spawn(async move {
                let mut interval = tokio::time::interval(Duration::from_millis(10));
                // Skip, not burst: a stalled loop must show as a gap.
                interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                loop {
                    interval.tick().await;
                    ticks.lock().unwrap().push(Instant::now());
                }
            })
        };
        tokio::time::sleep(Duration::from_millis(500)).await;
        ticker.abort();
        let ticks = ticks.lock().unwrap().clone();
        let gap = ticks
            .windows(2)
            .map(|w| w[1] - w[0])
            .max()
            .unwrap_or_default();
        assert!(ticks.len() >= 20, "only {} ticks in 500 ms", ticks.len());
        assert!(
            gap < Duration::from_millis(250),
            "a {gap:?} gap between ticks"
        );
        assert_eq!(fs.inside(), 4, "the reads were still blocked throughout");

        fs.release();
        for read in reads {
            assert!(read.await.unwrap().unwrap().starts_with("released"));
        }
        assert_eq!(pool.stats().timeouts, 0);
    })
    .await;
}

#[test]
fn shutdown_and_drop_return_promptly_with_a_stuck_thread() {
    let fs = GateFs::new();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let pool = IoPool::new(fs.clone(), config(1, 2, 10_000));
    runtime.block_on(bounded(async {
        let stuck = {
            let pool = pool.clone();
            tokio::spawn(async move { pool.read(Path::new("/block/s")).await })
        };
        wait_until("the read is blocked", || fs.inside() == 1).await;
        let queued = {
            let pool = pool.clone();
            tokio::spawn(async move { pool.read(Path::new("/queued")).await })
        };
        wait_until("a job is queued", || pool.stats().queued == 1).await;

        let start = Instant::now();
        pool.shutdown();
        assert!(
            start.elapsed() < AT_ONCE,
            "shutdown took {:?}",
            start.elapsed()
        );
        let err = queued.await.unwrap().unwrap_err();
        assert!(matches!(err, IoError::ShutDown), "{err:?}");
        let err = pool.read(Path::new("/after")).await.unwrap_err();
        assert!(matches!(err, IoError::ShutDown), "{err:?}");
        assert_eq!(err.path(), None);
        pool.shutdown(); // twice is fine
        // The stuck read's task is left to the runtime's shutdown below.
        assert!(!stuck.is_finished());
    }));

    let start = Instant::now();
    drop(pool);
    // Dropping a runtime that waits on a blocked thread would hang forever;
    // shutdown_timeout bounds it, and nothing here is even waited on.
    runtime.shutdown_timeout(Duration::from_secs(1));
    assert!(
        start.elapsed() < Duration::from_millis(900),
        "took {:?}",
        start.elapsed()
    );

    // Once released, the detached thread exits and drops its share of the pool.
    fs.release();
    let start = Instant::now();
    while Arc::strong_count(&fs) > 1 {
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "the I/O thread did not exit"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_last_clone_lets_idle_threads_exit() {
    bounded(async {
        let fs = GateFs::new();
        let pool = IoPool::new(fs.clone(), config(3, 4, 1000));
        let clone = pool.clone();
        drop(pool);
        // One clone left: still working.
        assert_eq!(clone.read(Path::new("/x")).await.unwrap(), "ok /x");
        drop(clone);
        wait_until("the threads have exited", || Arc::strong_count(&fs) == 1).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_job_is_an_error_and_the_pool_keeps_working() {
    bounded(async {
        // A long timeout: with RUST_BACKTRACE set, the panic hook symbolises a
        // backtrace before unwinding, which takes seconds on a loaded machine.
        let pool = IoPool::new(GateFs::new(), config(1, 2, 8000));
        // More panics than threads: the one worker survives each of them. The
        // first is a real panic; the others unwind without the hook, with a
        // `String` payload.
        for i in 0..3 {
            let err = pool
                .run(Path::new("/p"), move |_| -> io::Result<()> {
                    if i == 0 {
                        panic!("boom");
                    }
                    std::panic::resume_unwind(Box::new(format!("boom {i}")))
                })
                .await
                .unwrap_err();
            match &err {
                IoError::Os { op, path, source } => {
                    assert_eq!((*op, path.as_path()), ("access", Path::new("/p")));
                    assert_eq!(source.kind(), io::ErrorKind::Other);
                    assert!(source.to_string().contains("boom"), "{source}");
                }
                other => panic!("expected an OS error, got {other:?}"),
            }
        }
        assert_eq!(pool.read(Path::new("/x")).await.unwrap(), "ok /x");
        let stats = pool.stats();
        assert_eq!((stats.threads, stats.stuck, stats.completed), (1, 0, 4));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_gives_up_while_the_call_runs_still_gets_the_path_marked() {
    bounded(async {
        let fs = GateFs::new();
        let pool = IoPool::new(fs.clone(), config(1, 2, 1000));
        let reader = {
            let pool = pool.clone();
            tokio::spawn(async move { pool.read(Path::new("/block/c")).await })
        };
        wait_until("the read is blocked", || fs.inside() == 1).await;
        // Dropping the pool's future mid-call, as a `select!` or the caller's
        // own shorter timeout would.
        reader.abort();
        assert!(reader.await.unwrap_err().is_cancelled());
        assert!(pool.hung().is_empty());

        wait_until("the path is marked hung", || !pool.hung().is_empty()).await;
        assert_eq!(hung_paths(&pool), [PathBuf::from("/block/c")]);
        let stats = pool.stats();
        assert_eq!((stats.threads, stats.stuck, stats.timeouts), (1, 1, 1));
        assert_eq!(pool.read(Path::new("/x")).await.unwrap(), "ok /x");

        fs.release();
        wait_until("the mark is cleared", || pool.hung().is_empty()).await;
        assert_eq!(pool.stats().threads, 1);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_caller_gives_up_while_queued_never_runs() {
    bounded(async {
        let fs = GateFs::new();
        let pool = IoPool::new(fs.clone(), config(1, 2, 1000));
        let blocked = {
            let pool = pool.clone();
            tokio::spawn(async move { pool.read(Path::new("/block/q")).await })
        };
        wait_until("the only thread is blocked", || fs.inside() == 1).await;

        let ran = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&ran);
        let gave_up = tokio::time::timeout(
            Duration::from_millis(50),
            pool.run(Path::new("/cgroup/cpuset.cpus"), move |_| {
                flag.store(true, Ordering::SeqCst);
                Ok(())
            }),
        )
        .await;
        assert!(gave_up.is_err());
        assert_eq!(pool.stats().queued, 0, "the abandoned job left the queue");

        // The stuck read times out and a replacement thread starts: it must
        // find nothing to run.
        let err = blocked.await.unwrap().unwrap_err();
        assert!(matches!(err, IoError::Timeout { .. }), "{err:?}");
        assert_eq!(pool.read(Path::new("/x")).await.unwrap(), "ok /x");
        assert!(!ran.load(Ordering::SeqCst));
        fs.release();
    })
    .await;
}

/// A job's timeout counts from when a thread starts it, not from when it was
/// queued: one that waits behind a long batch (each of whose items is within
/// the timeout) longer than the timeout runs and succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_waits_longer_than_the_timeout_in_the_queue_still_runs() {
    bounded(async {
        let pool = IoPool::new(GateFs::new(), config(1, 2, 100));
        let items: Vec<(PathBuf, ())> = (0..4)
            .map(|i| (PathBuf::from(format!("/slow/{i}")), ()))
            .collect();
        let started = Arc::new(AtomicBool::new(false));
        let batch = {
            let (pool, started) = (pool.clone(), Arc::clone(&started));
            tokio::spawn(async move {
                pool.run_batch("read", items, move |fs, path, _| {
                    started.store(true, Ordering::SeqCst);
                    fs.read(path)
                })
                .await
            })
        };
        wait_until("the batch runs", || started.load(Ordering::SeqCst)).await;
        let queued = Instant::now();
        assert_eq!(pool.read(Path::new("/x")).await.unwrap(), "ok /x");
        assert!(
            queued.elapsed() > Duration::from_millis(100),
            "it waited longer than the timeout: {:?}",
            queued.elapsed()
        );
        for r in batch.await.unwrap() {
            r.unwrap();
        }
        assert!(pool.hung().is_empty());
        assert_eq!(pool.stats().timeouts, 0);
    })
    .await;
}

/// A batch times each item on its own: items slower in total than one timeout
/// all succeed, a hung item marks only its own path and fails with a timeout,
/// the items after it still run (on another thread), and an item below a path
/// already hung fails at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_times_each_item_and_a_hung_item_costs_only_itself() {
    bounded(async {
        let fs = GateFs::new();
        let pool = IoPool::new(fs.clone(), config(2, 4, 200));
        let slow = |fs: &dyn Fs, path: &Path, ms: &u64| {
            std::thread::sleep(Duration::from_millis(*ms));
            fs.read(path)
        };

        // Five items of 80 ms: 400 ms in all, twice the timeout, each within it.
        let items: Vec<(PathBuf, u64)> = (0..5)
            .map(|i| (PathBuf::from(format!("/cg/{i}")), 80))
            .collect();
        let results = pool.run_batch("read", items, slow).await;
        let texts: Vec<String> = results.into_iter().map(|r| r.unwrap()).collect();
        assert_eq!(
            texts,
            ["ok /cg/0", "ok /cg/1", "ok /cg/2", "ok /cg/3", "ok /cg/4"]
        );
        assert!(pool.hung().is_empty());

        // The third item hangs.
        let paths = ["/cg/a", "/cg/b", "/block/c", "/cg/d", "/cg/e"];
        let items: Vec<(PathBuf, u64)> = paths.iter().map(|p| (PathBuf::from(p), 0)).collect();
        let started = Instant::now();
        let results = pool.run_batch("read", items, slow).await;
        let took = started.elapsed();
        assert!(took < Duration::from_secs(2), "took {took:?}");
        assert_eq!(results.len(), 5);
        assert_eq!(results[0].as_deref().unwrap(), "ok /cg/a");
        assert_eq!(results[1].as_deref().unwrap(), "ok /cg/b");
        match &results[2] {
            Err(IoError::Timeout { path, .. }) => assert_eq!(path, Path::new("/block/c")),
            other => panic!("expected a timeout, got {other:?}"),
        }
        assert_eq!(results[3].as_deref().unwrap(), "ok /cg/d");
        assert_eq!(results[4].as_deref().unwrap(), "ok /cg/e");
        assert_eq!(hung_paths(&pool), [PathBuf::from("/block/c")]);

        // Below the hung path: refused at once, the others run.
        let items: Vec<(PathBuf, u64)> = ["/block/c/x", "/cg/f"]
            .iter()
            .map(|p| (PathBuf::from(p), 0))
            .collect();
        let started = Instant::now();
        let results = pool.run_batch("read", items, slow).await;
        assert!(started.elapsed() < AT_ONCE, "took {:?}", started.elapsed());
        assert!(
            matches!(&results[0], Err(IoError::Hung { path, .. }) if path == Path::new("/block/c"))
        );
        assert_eq!(results[1].as_deref().unwrap(), "ok /cg/f");

        // Released: the mark is cleared and the stuck thread's batch stops
        // (its remaining items already ran elsewhere).
        fs.release();
        wait_until("the hung mark is cleared", || pool.hung().is_empty()).await;
        let results = pool
            .run_batch(
                "read",
                vec![(PathBuf::from("/block/c"), ())],
                |fs, path, _| fs.read(path),
            )
            .await;
        assert_eq!(results[0].as_deref().unwrap(), "released /block/c");
        assert!(
            pool.run_batch("read", Vec::<(PathBuf, ())>::new(), |_, _, _| Ok(()))
                .await
                .is_empty()
        );
    })
    .await;
}

/// An item that times out and then returns late (a cgroupfs lock held past
/// the timeout, then let go) has its timeout for a result, and its late
/// result is dropped: it never lands among the results of the items after
/// it, read meanwhile by a new job on another thread, which would pair every
/// later cgroup with its neighbour's reading.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_result_after_a_timeout_does_not_shift_the_batch() {
    bounded(async {
        // Item 2 waits until item 3 has run (on the new job, past the
        // timeout), then returns; item 4 waits for that late return, well
        // within its own timeout.
        let pool = IoPool::new(GateFs::new(), config(2, 4, 500));
        let (let_go, late) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let items: Vec<(PathBuf, usize)> = (0..6)
            .map(|i| (PathBuf::from(format!("/cg/{i}")), i))
            .collect();
        let job = {
            let (let_go, late) = (Arc::clone(&let_go), Arc::clone(&late));
            move |_: &dyn Fs, _: &Path, i: &usize| {
                let until = |flag: &AtomicBool| {
                    let start = Instant::now();
                    while !flag.load(Ordering::SeqCst) && start.elapsed() < Duration::from_secs(3) {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                };
                match *i {
                    2 => {
                        until(&let_go);
                        late.store(true, Ordering::SeqCst);
                        Ok("late 2".to_string())
                    }
                    3 => {
                        let_go.store(true, Ordering::SeqCst);
                        Ok("3".to_string())
                    }
                    4 => {
                        until(&late);
                        // Time for the late result to be handed in.
                        std::thread::sleep(Duration::from_millis(30));
                        Ok("4".to_string())
                    }
                    n => Ok(n.to_string()),
                }
            }
        };
        let results = pool.run_batch("read", items, job).await;
        assert!(late.load(Ordering::SeqCst), "item 2 returned late");
        let shown: Vec<String> = results
            .iter()
            .map(|r| match r {
                Ok(text) => text.clone(),
                Err(IoError::Timeout { path, .. }) => format!("timeout {}", path.display()),
                Err(e) => format!("{e}"),
            })
            .collect();
        assert_eq!(shown, ["0", "1", "timeout /cg/2", "3", "4", "5"]);
    })
    .await;
}

/// An error or a panic in one item is that item's result only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_item_that_fails_or_panics_is_its_own_result() {
    bounded(async {
        let pool = IoPool::new(GateFs::new(), config(1, 2, 1000));
        let items: Vec<(PathBuf, u32)> = (0..4)
            .map(|i| (PathBuf::from(format!("/cg/{i}")), i))
            .collect();
        let results = pool
            .run_batch("read", items, |_, _, i| match i {
                1 => Err(io::Error::from_raw_os_error(libc_enoent())),
                2 => panic!("item two"),
                n => Ok(*n),
            })
            .await;
        assert_eq!(*results[0].as_ref().unwrap(), 0);
        match &results[1] {
            Err(e @ IoError::Os { path, .. }) => {
                assert_eq!(path, Path::new("/cg/1"));
                assert!(e.is_not_found());
            }
            other => panic!("expected an OS error, got {other:?}"),
        }
        match &results[2] {
            Err(IoError::Os { path, source, .. }) => {
                assert_eq!(path, Path::new("/cg/2"));
                assert!(source.to_string().contains("item two"), "{source}");
            }
            other => panic!("expected an OS error, got {other:?}"),
        }
        assert_eq!(*results[3].as_ref().unwrap(), 3);
        assert_eq!(pool.stats().threads, 1);
    })
    .await;
}

fn libc_enoent() -> i32 {
    nix::errno::Errno::ENOENT as i32
}
