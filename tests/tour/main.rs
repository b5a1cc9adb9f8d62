//! The README's "A five-minute tour", run on this machine's real cgroup
//! hierarchy (v1 or v2) as the README writes it, by `tests/tour/run`: its
//! `sh` blocks in one shell, at a reader's pace, its `pinctl status` and
//! `pinctl describe` compared with what the README shows, and the CPU
//! `taskset` reports checked against them. An edit to the README is what
//! runs: nothing here copies its commands.
//!
//! Opt-in, as `tests/real_cgroup_v1/`: unless `PINCTL_REAL_CGROUP=1`, the
//! test says it is skipped and returns. With it, the test fails when it is
//! not root, when no cpuset hierarchy is mounted, or when a tool the tour
//! uses (`setfattr`: Debian's package attr; `taskset`) is missing:
//! `PINCTL_REAL_CGROUP=1 cargo test --test tour`.
//!
//! What the tour runs with: the `pinctld` and `pinctl` this build made, first
//! on `PATH`, and a `sudo` that runs its command as it is (the test is root
//! already; a real `sudo` would reset `PATH` to its `secure_path` and run
//! installed binaries, or none). `/tmp/tour` becomes a directory of the
//! test's own, so runs share no file.
//!
//! Safety: the tour makes the cgroup `pinctl-tour` (the README names it).
//! The test refuses to start when one exists: it is not the test's. One tour
//! at a time (a lock file), since the name is fixed. The runner stops the
//! daemon and the `sleep` it started and removes `pinctl-tour` even when a
//! step fails; should the runner itself be stopped, this test kills its
//! process group (the daemon and the `sleep` are in it) and removes
//! `pinctl-tour` from every hierarchy.

use std::fs::{self, File};
use std::io::{Read as _, Write as _};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use nix::fcntl::{Flock, FlockArg};

#[allow(dead_code)]
#[path = "../../benches/support/cgroupfs.rs"]
mod cgroupfs;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::{Pid, geteuid};

const ENV: &str = "PINCTL_REAL_CGROUP";
/// The cgroup the README's tour makes, below each hierarchy's root.
const TOUR_CGROUP: &str = "pinctl-tour";
/// The tour pauses about a second after each of its dozen commands.
const TIMEOUT: Duration = Duration::from_secs(180);

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// The roots of the mounted cgroup hierarchies ([`cgroupfs::hierarchies`]).
fn hierarchies() -> Vec<PathBuf> {
    cgroupfs::hierarchies(Path::new("/sys/fs/cgroup"))
}

/// Whether `tool` is an executable on `PATH`.
fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(tool).is_file()))
}

/// Whether the test runs: prints why not, or fails when it was asked for
/// and cannot run.
fn enabled() -> bool {
    if std::env::var_os(ENV).is_none_or(|v| v != "1") {
        // Straight to the stream: the harness would capture `eprintln!`.
        let line = format!(
            "the_readme_tour_runs_as_it_shows: skipped: {ENV} is not 1; set {ENV}=1 to run the \
             README's tour on this machine's real cgroup hierarchy (needs root)\n"
        );
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
        return false;
    }
    assert!(
        geteuid().is_root(),
        "{ENV}=1 asks for the README's tour on the real cgroup hierarchy, but it needs root \
         (euid is {})",
        geteuid()
    );
    let v1 = Path::new("/sys/fs/cgroup/cpuset/cpuset.cpus").exists();
    let v2 = fs::read_to_string("/sys/fs/cgroup/cgroup.controllers")
        .is_ok_and(|c| c.split_whitespace().any(|w| w == "cpuset"));
    assert!(
        v1 || v2,
        "{ENV}=1 asks for the README's tour, but no cpuset hierarchy is mounted: neither \
         /sys/fs/cgroup/cpuset/cpuset.cpus (v1) nor cpuset in /sys/fs/cgroup/cgroup.controllers \
         (v2)"
    );
    for (tool, package) in [("setfattr", "attr"), ("taskset", "util-linux")] {
        assert!(
            on_path(tool),
            "the README's tour runs {tool}, which is not on PATH (apt-get install {package})"
        );
    }
    true
}

/// Kills the runner's process group if it still runs, and removes the
/// tour's cgroup wherever it is left (it did not exist before the test).
struct Cleanup {
    runner: Option<Child>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Some(mut runner) = self.runner.take()
            && runner.try_wait().ok().flatten().is_none()
        {
            // Its own process group (`process_group(0)`): the tour's daemon
            // and `sleep` are in it, and nothing else.
            let _ = killpg(Pid::from_raw(runner.id() as i32), Signal::SIGKILL);
            let _ = runner.wait();
        }
        for root in hierarchies() {
            let top = root.join(TOUR_CGROUP);
            if !top.exists() {
                continue;
            }
            let mut dirs = Vec::new();
            bottom_up(&top, &mut dirs);
            for dir in dirs {
                for _ in 0..100 {
                    // Only the tour's `sleep` can be here: the cgroup is
                    // the tour's.
                    if let Ok(procs) = fs::read_to_string(dir.join("cgroup.procs")) {
                        for pid in procs.split_whitespace().filter_map(|p| p.parse().ok()) {
                            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
                        }
                    }
                    if fs::remove_dir(&dir).is_ok() || !dir.exists() {
                        break;
                    }
                    sleep(Duration::from_millis(20));
                }
                if dir.exists() {
                    eprintln!("tour test: cannot remove {}", dir.display());
                }
            }
        }
    }
}

/// `dir` and the directories below it, children before parents.
fn bottom_up(dir: &Path, out: &mut Vec<PathBuf>) {
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                bottom_up(&entry.path(), out);
            }
        }
    }
    out.push(dir.to_path_buf());
}

#[test]
fn the_readme_tour_runs_as_it_shows() {
    if !enabled() {
        return;
    }
    // One tour at a time on this machine: its cgroup's name is the README's.
    let lock = File::create(std::env::temp_dir().join("pinctl-tour.lock")).expect("lock file");
    let _lock = Flock::lock(lock, FlockArg::LockExclusive).expect("lock the tour");
    let theirs: Vec<PathBuf> = hierarchies()
        .into_iter()
        .map(|root| root.join(TOUR_CGROUP))
        .filter(|p| p.exists())
        .collect();
    assert!(
        theirs.is_empty(),
        "{theirs:?} exist, and are not this test's: remove them (rmdir) to run the tour"
    );

    let tmp = tempfile::Builder::new()
        .prefix("pinctl-tour-")
        .tempdir()
        .expect("tempdir");
    let bin = tmp.path().join("bin");
    fs::create_dir(&bin).expect("mkdir bin");
    for (name, exe) in [
        ("pinctld", env!("CARGO_BIN_EXE_pinctld")),
        ("pinctl", env!("CARGO_BIN_EXE_pinctl")),
    ] {
        std::os::unix::fs::symlink(exe, bin.join(name)).expect("symlink a binary");
    }
    fs::write(bin.join("sudo"), "#!/bin/sh\nexec \"$@\"\n").expect("write the sudo shim");
    let chmod = Command::new("chmod")
        .arg("+x")
        .arg(bin.join("sudo"))
        .status();
    assert!(chmod.is_ok_and(|s| s.success()), "chmod +x the sudo shim");
    let path = std::env::join_paths(std::iter::once(bin.clone()).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .expect("PATH");

    let output = tmp.path().join("output");
    let mut cleanup = Cleanup { runner: None };
    let runner = Command::new("sh")
        .arg(repo("tests/tour/run"))
        .arg("README.md")
        .arg(tmp.path().join("run"))
        .current_dir(repo(""))
        .env("PATH", path)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(File::create(&output).expect("output file"))
        .stderr(Stdio::inherit())
        .process_group(0)
        .spawn()
        .expect("run tests/tour/run");
    let runner = cleanup.runner.insert(runner);
    let start = Instant::now();
    let status = loop {
        if let Some(status) = runner.try_wait().expect("wait for tests/tour/run") {
            break Some(status);
        }
        if start.elapsed() > TIMEOUT {
            break None;
        }
        sleep(Duration::from_millis(100));
    };
    let mut report = String::new();
    File::open(&output)
        .and_then(|mut f| f.read_to_string(&mut report))
        .expect("read the tour's output");
    let Some(status) = status else {
        panic!("the tour did not finish within {TIMEOUT:?}:\n{report}");
    };
    let failed: Vec<&str> = report
        .lines()
        .filter(|l| l.starts_with("not ok "))
        .collect();
    assert!(
        status.success() && failed.is_empty(),
        "the README's tour: tests/tour/run exited {status}:\n{report}\n\nfailed:\n{}",
        failed.join("\n")
    );
    // The checks ran: the steps, both examples, the CPU and the clean-up.
    for want in [
        "ok steps:",
        "ok example-1:",
        "ok example-2:",
        "ok affinity:",
        "ok clean-up:",
    ] {
        assert!(
            report.lines().any(|l| l.starts_with(want)),
            "tests/tour/run passed without a line {want:?}:\n{report}"
        );
    }
    drop(cleanup);
    let left: Vec<PathBuf> = hierarchies()
        .into_iter()
        .map(|root| root.join(TOUR_CGROUP))
        .filter(|p| p.exists())
        .collect();
    assert!(left.is_empty(), "the tour left {left:?}");
}
