//! One run of the real `pinctld` binary for an integration test: the process,
//! its log file, and a reader of its `NOTIFY_SOCKET` that keeps every sd-notify
//! message with the time it arrived (so tests can look at the `WATCHDOG=1`
//! cadence, not only at what was said).
//!
//! Dropping a [`Pinctld`] stops the process (SIGTERM, then SIGKILL after 3 s),
//! reaps it and stops the reader: no test leaves a daemon behind, even when it
//! panics.

use std::fs;
use std::io::ErrorKind;
use std::os::unix::net::UnixDatagram;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::resource::{Resource, setrlimit};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

pub const PINCTLD: &str = env!("CARGO_BIN_EXE_pinctld");

/// How a run is started, besides its configuration file.
#[derive(Debug, Clone, Default)]
pub struct Launch {
    /// `WATCHDOG_USEC`, with `WATCHDOG_PID` set to the daemon's own pid as
    /// systemd does (the `sd-notify` crate, unlike `sd_watchdog_enabled(3)`,
    /// ignores `WATCHDOG_USEC` without a matching `WATCHDOG_PID`).
    pub watchdog_usec: Option<u64>,
    /// More environment variables (`PINCTL_TEST_WEDGE=1`).
    pub env: Vec<(String, String)>,
    /// Soft and hard limits of open files (`RLIMIT_NOFILE`) for the daemon.
    /// Set in the child between `fork` and `exec`, never in the test process:
    /// every test runs in that one process, and a lower limit there would
    /// starve the tests running beside this one.
    pub nofile: Option<u64>,
    /// Another `pinctld` than the one cargo built beside the test (a
    /// benchmark inside the VM test bed).
    pub program: Option<PathBuf>,
    /// The daemon gets SIGKILL when the process that started it dies
    /// (`PR_SET_PDEATHSIG`): a benchmark killed outright leaves no daemon.
    pub die_with_parent: bool,
}

/// A running (or exited) `pinctld`.
pub struct Pinctld {
    child: Child,
    /// Its stdout and stderr (the log: no journald socket in tests).
    pub log: PathBuf,
    notes: Arc<Mutex<Vec<(Instant, String)>>>,
    stop: Arc<AtomicBool>,
    reader: Option<JoinHandle<()>>,
}

impl Pinctld {
    /// Starts `pinctld --config CONFIG` with its `NOTIFY_SOCKET` at `notify`
    /// and its output in `log`. Returns at once: see [`Self::ready`].
    pub fn spawn(config: &Path, log: &Path, notify: &Path, launch: &Launch) -> Pinctld {
        let _ = fs::remove_file(notify);
        let sock = UnixDatagram::bind(notify).unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let notes = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let notes = notes.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 4096];
                while !stop.load(Ordering::Relaxed) {
                    match sock.recv(&mut buf) {
                        Ok(len) => notes.lock().unwrap().push((
                            Instant::now(),
                            String::from_utf8_lossy(&buf[..len]).into_owned(),
                        )),
                        Err(e)
                            if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                        Err(_) => break,
                    }
                }
            })
        };
        let file = fs::File::create(log).unwrap();
        let program = launch.program.as_deref().unwrap_or(Path::new(PINCTLD));
        let mut cmd = match launch.watchdog_usec {
            // The pid is only known once the process exists: a shell exports
            // its own pid and execs the daemon, which keeps it.
            Some(usec) => {
                let mut c = Command::new("/bin/sh");
                c.arg("-c")
                    .arg(r#"WATCHDOG_PID=$$; export WATCHDOG_PID; exec "$0" --config "$1""#)
                    .arg(program)
                    .arg(config)
                    .env("WATCHDOG_USEC", usec.to_string());
                c
            }
            None => {
                let mut c = Command::new(program);
                c.arg("--config")
                    .arg(config)
                    .env_remove("WATCHDOG_USEC")
                    .env_remove("WATCHDOG_PID");
                c
            }
        };
        if let Some(n) = launch.nofile {
            // SAFETY: setrlimit is async-signal-safe and, after fork, touches
            // only the child's own limits (which exec keeps).
            unsafe {
                cmd.pre_exec(move || {
                    setrlimit(Resource::RLIMIT_NOFILE, n, n).map_err(std::io::Error::from)
                });
            }
        }
        if launch.die_with_parent {
            // SAFETY: prctl is async-signal-safe and touches no memory of ours.
            unsafe {
                cmd.pre_exec(|| {
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let child = cmd
            .env_remove("RUST_LOG")
            .env_remove("PINCTL_TEST_WEDGE")
            .env_remove("PINCTL_TEST_FORGET_RELEASE")
            .env_remove("PINCTL_TEST_SYSTEMD_SETTLE_MS")
            .envs(launch.env.iter().map(|(k, v)| (k, v)))
            .env("NOTIFY_SOCKET", notify)
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .expect("start pinctld");
        Pinctld {
            child,
            log: log.to_path_buf(),
            notes,
            stop,
            reader: Some(reader),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn signal(&self, sig: Signal) {
        let _ = kill(Pid::from_raw(self.child.id() as i32), sig);
    }

    /// The exit status, if it has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Waits for the process to exit, up to `limit`.
    pub fn wait(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.exited() {
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGKILL and reap: whatever state the daemon is in (a wedged loop, a
    /// thread stuck in a read), it is gone when this returns.
    pub fn kill(&mut self) -> ExitStatus {
        self.signal(Signal::SIGKILL);
        self.child.wait().expect("reap pinctld")
    }

    /// Every sd-notify message so far, with the time it arrived.
    pub fn notes(&self) -> Vec<(Instant, String)> {
        self.notes.lock().unwrap().clone()
    }

    /// Waits up to `limit` for `READY=1`; else says why not (it exited, or
    /// the time is up).
    pub fn wait_ready(&mut self, limit: Duration) -> Result<(), String> {
        // Ok(None): ready; Ok(Some(status)): exited first.
        let exited = poll(limit, || {
            if self.ready() {
                return Ok(None);
            }
            self.exited().map(Some).ok_or_else(|| "not yet".to_string())
        })
        .map_err(|_| format!("no READY=1 from pinctld within {limit:?}"))?;
        match exited {
            None => Ok(()),
            Some(status) => Err(format!("pinctld exited before READY=1: {status}")),
        }
    }

    /// Whether `READY=1` was sent.
    pub fn ready(&self) -> bool {
        self.notes()
            .iter()
            .any(|(_, n)| n.lines().any(|l| l == "READY=1"))
    }

    /// Every `STATUS=` value sent so far, oldest first.
    pub fn statuses(&self) -> Vec<String> {
        self.notes()
            .iter()
            .flat_map(|(_, n)| {
                n.lines()
                    .filter_map(|l| l.strip_prefix("STATUS="))
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// The last `STATUS=` value, or `""`.
    pub fn status(&self) -> String {
        self.statuses().pop().unwrap_or_default()
    }

    /// When each `WATCHDOG=1` arrived.
    pub fn pings(&self) -> Vec<Instant> {
        self.notes()
            .iter()
            .filter(|(_, n)| n.lines().any(|l| l == "WATCHDOG=1"))
            .map(|(at, _)| *at)
            .collect()
    }

    /// The log so far.
    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Pinctld {
    fn drop(&mut self) {
        if self.exited().is_none() {
            self.signal(Signal::SIGTERM);
            if self.wait(Duration::from_secs(3)).is_none() {
                let _ = self.kill();
            }
        }
        self.stop.store(true, Ordering::Relaxed);
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}

/// Polls `check` every 10 ms until it returns `Ok`, for up to `limit`; what
/// it last returned when it never did.
pub fn poll<T>(limit: Duration, mut check: impl FnMut() -> Result<T, String>) -> Result<T, String> {
    let deadline = Instant::now() + limit;
    loop {
        match check() {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() > deadline => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// The logs of every run, each headed by its number and file: for the
/// message of a failing test.
pub fn logs_text(logs: &[PathBuf]) -> String {
    let mut s = String::new();
    for (i, log) in logs.iter().enumerate() {
        let text = fs::read_to_string(log).unwrap_or_default();
        s.push_str(&format!(
            "--- pinctld run {} ({}) ---\n{text}\n",
            i + 1,
            log.display()
        ));
    }
    s
}
