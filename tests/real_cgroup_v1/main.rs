//! `pinctld` end to end on this machine's real cgroup v1 hierarchy: the daemon
//! binary, the kernel's cpuset controller and real processes; `runc.rs` adds
//! containers started by a real runtime (Debian's `runc`).
//!
//! Opt-in: unless `PINCTL_REAL_CGROUP=1`, every test prints one line saying it
//! is skipped and returns. With `PINCTL_REAL_CGROUP=1` a test fails when it is
//! not root or when `/sys/fs/cgroup/cpuset/cpuset.cpus` is missing: whoever
//! set the variable asked for these tests to run. Run them one at a time:
//! `PINCTL_REAL_CGROUP=1 cargo test --test real_cgroup_v1 -- --test-threads=1`
//! (they also take a lock, so a parallel run is serialised anyway).
//!
//! Safety: each test creates its own top cgroup `pinctl-test-<pid>-<n>` in the
//! cpuset and cpu hierarchies and points the daemon's `managed` and
//! `shared_cgroups` only below it, so the daemon never touches a system cgroup.
//! (Its watchdog makes the required paths `<top>/kubepods/{burstable,besteffort}`
//! in every other hierarchy too; cleanup covers all of them.)
//! [`Rig`]'s `Drop` runs even when a test panics: it stops the daemon (SIGTERM,
//! then SIGKILL), kills every `sleep` the test started, moves any task left in
//! a test cgroup back to the root cgroup, and removes the test cgroups bottom-up
//! with `rmdir` (the only way to remove a cgroup). On failure it prints the
//! daemon's log.
//!
//! Layout (cgroupfs driver naming), below the top cgroup:
//! `kubepods`, `kubepods/burstable/pod<uid>/<id>`, `kubepods/pod<uid>/<id>`
//! (Guaranteed) and `system.slice`. The test initialises the top cgroup's
//! cpuset itself; below it, it only makes directories, as a runtime would, and
//! waits for the daemon to set `cpuset.mems` and `cpuset.cpus` before it moves
//! a task in (v1 refuses a task in a cgroup with an empty set with ENOSPC).
//!
//! CPUs: the daemon reserves every online CPU but the highest, which leaves
//! exactly one CPU to hand out exclusively. On a 2-CPU machine that is
//! `reserved_cpus = "0"`: Guaranteed containers get CPU 1 and the shared pool is
//! CPU 0.

mod rig;
mod run;
mod runc;

use std::fs;
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::thread::sleep;
use std::time::{Duration, Instant};

use inotify::{Inotify, WatchMask};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use pinctl::CpuSet;

use rig::*;

/// Scenario 1: a Guaranteed container with a 1-CPU limit gets the exclusive
/// CPU, and everything else in the managed tree and the shared cgroups is
/// confined to the rest; deleting it gives the CPU back to the shared pool.
#[test]
fn guaranteed_container_gets_an_exclusive_cpu_and_gives_it_back() {
    let Some(mut rig) = Rig::new("guaranteed_container_gets_an_exclusive_cpu_and_gives_it_back")
    else {
        return;
    };
    let (all, exclusive, shared) = (rig.all.clone(), rig.exclusive.clone(), rig.shared.clone());
    rig.start_daemon();
    // Nothing pinned yet: the shared pool is every CPU.
    rig.expect_cpus("kubepods", &all);
    rig.expect_cpus("system.slice", &all);

    let burstable = rig.add_container(Qos::Burstable, None);
    let b_pid = rig.attach(&burstable);
    rig.expect_cpus(&burstable.rel, &all);
    rig.expect_allowed(b_pid, &all);

    // 100000 µs per 100000 µs period: a limit of exactly 1 CPU.
    let guaranteed = rig.add_container(Qos::Guaranteed, Some(100_000));
    rig.expect_cpus(&guaranteed.rel, &exclusive);
    let g_pid = rig.attach(&guaranteed);
    rig.expect_allowed(g_pid, &exclusive);

    rig.expect_cpus(&burstable.rel, &shared);
    rig.expect_allowed(b_pid, &shared);
    rig.expect_cpus("system.slice", &shared);
    // Structural cgroups are never shrunk.
    rig.expect_cpus("kubepods", &all);
    rig.expect_cpus("kubepods/burstable", &all);
    rig.expect_cpus(&burstable.pod, &all);
    rig.expect_cpus(&guaranteed.pod, &all);

    rig.remove_container(&guaranteed);
    rig.expect_cpus(&burstable.rel, &all);
    rig.expect_allowed(b_pid, &all);
    rig.expect_cpus("system.slice", &all);
    rig.expect_cpus("kubepods", &all);
}

/// Scenario 2: after a crash (SIGKILL) and a restart, the pinned container
/// keeps its CPU and the daemon writes nothing: its processes never move.
#[test]
fn pinned_cpu_survives_a_daemon_crash_and_restart() {
    let Some(mut rig) = Rig::new("pinned_cpu_survives_a_daemon_crash_and_restart") else {
        return;
    };
    let (exclusive, shared) = (rig.exclusive.clone(), rig.shared.clone());
    rig.start_daemon();
    let guaranteed = rig.add_container(Qos::Guaranteed, Some(100_000));
    rig.expect_cpus(&guaranteed.rel, &exclusive);
    let g_pid = rig.attach(&guaranteed);
    let burstable = rig.add_container(Qos::Burstable, None);
    rig.expect_cpus(&burstable.rel, &shared);
    let b_pid = rig.attach(&burstable);
    rig.expect_allowed(g_pid, &exclusive);
    rig.expect_allowed(b_pid, &shared);

    rig.crash_daemon();
    // Every successful write to cpuset.cpus raises IN_MODIFY, even when the
    // value does not change: a restart that rewrites anything is seen.
    let mut inotify = Inotify::init().expect("inotify");
    let watched = [
        guaranteed.rel.as_str(),
        burstable.rel.as_str(),
        "system.slice",
        "kubepods",
    ];
    for rel in watched {
        inotify
            .watches()
            .add(rig.cs(rel), WatchMask::MODIFY)
            .expect("watch a test cgroup");
    }

    rig.start_daemon();
    rig.expect_cpus(&guaranteed.rel, &exclusive);
    rig.expect_cpus(&burstable.rel, &shared);
    // Give a late write the time to show.
    sleep(Duration::from_millis(500));
    let mut buf = [0u8; 4096];
    let written: Vec<String> = match inotify.read_events(&mut buf) {
        Ok(events) => events
            .filter_map(|e| e.name.map(|n| n.to_string_lossy().into_owned()))
            .filter(|n| n.starts_with("cpuset."))
            .collect(),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Vec::new(),
        Err(e) => panic!("inotify read: {e}"),
    };
    assert!(
        written.is_empty(),
        "the restarted daemon rewrote control files of {watched:?}: {written:?}"
    );
    rig.expect_still_in(g_pid, &guaranteed);
    rig.expect_still_in(b_pid, &burstable);
    rig.expect_allowed(g_pid, &exclusive);
    rig.expect_allowed(b_pid, &shared);
    rig.expect_cpus("system.slice", &shared);
}

/// Scenario 3: a second Guaranteed container, while the only exclusive CPU is
/// taken, waits in the shared pool, and gets the CPU once the first is deleted.
#[test]
fn second_guaranteed_container_waits_in_the_shared_pool_until_the_cpu_is_free() {
    let Some(mut rig) =
        Rig::new("second_guaranteed_container_waits_in_the_shared_pool_until_the_cpu_is_free")
    else {
        return;
    };
    let (exclusive, shared) = (rig.exclusive.clone(), rig.shared.clone());
    rig.start_daemon();
    let first = rig.add_container(Qos::Guaranteed, Some(100_000));
    rig.expect_cpus(&first.rel, &exclusive);
    let first_pid = rig.attach(&first);
    rig.expect_allowed(first_pid, &exclusive);

    let second = rig.add_container(Qos::Guaranteed, Some(100_000));
    rig.expect_cpus(&second.rel, &shared);
    let second_pid = rig.attach(&second);
    rig.expect_allowed(second_pid, &shared);
    rig.expect_cpus_stay(&second.rel, &shared, Duration::from_millis(500));
    rig.expect_cpus(&first.rel, &exclusive);
    rig.expect_allowed(first_pid, &exclusive);

    rig.remove_container(&first);
    rig.expect_cpus(&second.rel, &exclusive);
    rig.expect_allowed(second_pid, &exclusive);
    rig.expect_cpus("system.slice", &shared);
    rig.expect_cpus(&second.pod, &rig.all);
}

/// Scenario 4: another writer widens a pinned cpuset (the kubelet's CPU
/// manager, `systemctl daemon-reload`); the daemon sees the write through
/// inotify and puts the exclusive CPU back within a second.
#[test]
fn foreign_write_to_a_pinned_cpuset_is_reverted_within_a_second() {
    let Some(mut rig) = Rig::new("foreign_write_to_a_pinned_cpuset_is_reverted_within_a_second")
    else {
        return;
    };
    let (all, exclusive) = (rig.all.clone(), rig.exclusive.clone());
    rig.start_daemon();
    let guaranteed = rig.add_container(Qos::Guaranteed, Some(100_000));
    rig.expect_cpus(&guaranteed.rel, &exclusive);
    let pid = rig.attach(&guaranteed);
    rig.expect_allowed(pid, &exclusive);

    rig.note(&format!("foreign write of {all} to {}", guaranteed.rel));
    let start = Instant::now();
    // As `echo 0-1 > cpuset.cpus` does it.
    must_write(
        &rig.cs(&guaranteed.rel).join("cpuset.cpus"),
        &format!("{all}\n"),
    );
    rig.expect_cpus_within(&guaranteed.rel, &exclusive, REVERT_TIMEOUT);
    let left = REVERT_TIMEOUT.saturating_sub(start.elapsed());
    rig.expect_allowed_within(pid, &exclusive, left);
    // And it stays put: the daemon's own write does not start a loop.
    rig.expect_cpus_stay(&guaranteed.rel, &exclusive, Duration::from_millis(300));
}

/// Scenarios 2 and 3 together: a restart while one Guaranteed container holds
/// the exclusive CPU and a second one waits for it. The pinned container must
/// keep its CPU; the waiting one must stay in the shared pool. The waiting
/// pod's path sorts first (pod UIDs are random, so on a node this is a coin
/// toss), which is the order in which a restarted daemon reads them.
#[test]
fn restart_keeps_the_cpu_with_the_pinned_container_not_the_waiting_one() {
    let Some(mut rig) =
        Rig::new("restart_keeps_the_cpu_with_the_pinned_container_not_the_waiting_one")
    else {
        return;
    };
    let (exclusive, shared) = (rig.exclusive.clone(), rig.shared.clone());
    rig.start_daemon();
    let pinned = rig.add_container_sorted(Qos::Guaranteed, Some(100_000), 0xffff_ffff);
    rig.expect_cpus(&pinned.rel, &exclusive);
    let pinned_pid = rig.attach(&pinned);
    let waiting = rig.add_container_sorted(Qos::Guaranteed, Some(100_000), 0);
    rig.expect_cpus(&waiting.rel, &shared);
    let waiting_pid = rig.attach(&waiting);
    rig.expect_allowed(pinned_pid, &exclusive);
    rig.expect_allowed(waiting_pid, &shared);

    rig.crash_daemon();
    rig.start_daemon();
    rig.expect_cpus_stay(&pinned.rel, &exclusive, Duration::from_millis(500));
    rig.expect_cpus(&waiting.rel, &shared);
    rig.expect_allowed(pinned_pid, &exclusive);
    rig.expect_allowed(waiting_pid, &shared);
}

/// The watchdog makes the required kubepods paths in every hierarchy: the
/// QoS parents missing at start-up, a path removed from the cpuset tree at
/// once (inotify), one removed from the memory tree within its interval. A
/// repaired v1 cpuset has its parent's cpus and mems, so a task can join.
#[test]
fn missing_kubepods_paths_are_repaired_in_every_hierarchy() {
    let Some(mut rig) = Rig::new("missing_kubepods_paths_are_repaired_in_every_hierarchy") else {
        return;
    };
    rig.start_daemon();
    let all = hierarchies();
    assert!(all.len() > 2, "hierarchies: {all:?}");
    let required = ["kubepods", "kubepods/burstable", "kubepods/besteffort"];
    wait_for(
        "every required path in every hierarchy",
        EVENT_TIMEOUT,
        || {
            for h in &all {
                for rel in required {
                    let dir = Path::new(h).join(&rig.top).join(rel);
                    if !dir.is_dir() {
                        return Err(format!("{} missing", dir.display()));
                    }
                }
            }
            Ok(())
        },
    );
    let besteffort = rig.cs("kubepods/besteffort");
    assert!(!read(&besteffort.join("cpuset.mems")).trim().is_empty());
    assert!(!read_set(&besteffort.join("cpuset.cpus")).is_empty());

    rig.note("rmdir kubepods/besteffort in cpuset");
    fs::remove_dir(&besteffort).expect("rmdir besteffort");
    wait_for("besteffort repaired in cpuset", EVENT_TIMEOUT, || {
        if besteffort.join("cpuset.cpus").exists()
            && !read_set(&besteffort.join("cpuset.cpus")).is_empty()
            && !read(&besteffort.join("cpuset.mems")).trim().is_empty()
        {
            Ok(())
        } else {
            Err("not yet".into())
        }
    });
    // A task can join the repaired cgroup (v1 refuses one with empty sets).
    let mut sleep_child = Command::new("sleep").arg("30").spawn().expect("sleep");
    let pid = sleep_child.id();
    let joined = write(&besteffort.join("cgroup.procs"), &pid.to_string());
    let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
    let _ = sleep_child.wait();
    joined.expect("a task joins the repaired cpuset");

    let memory = Path::new("/sys/fs/cgroup/memory")
        .join(&rig.top)
        .join("kubepods/burstable");
    if memory.exists() {
        rig.note("rmdir kubepods/burstable in memory");
        fs::remove_dir(&memory).expect("rmdir memory burstable");
        wait_for(
            "burstable repaired in memory",
            Duration::from_secs(5),
            || {
                if memory.is_dir() {
                    Ok(())
                } else {
                    Err("not yet".into())
                }
            },
        );
    }
    let log = fs::read_to_string(&rig.log).unwrap_or_default();
    assert!(
        log.contains("required cgroup path was missing; repaired"),
        "{log}"
    );
}

/// As uid and gid 65534 (nobody), the way a user with a subtree systemd
/// delegated to it would: makes cgroup directory `dir` and sets its
/// `user.pinctl.cpus` to `value`. A forked child that calls only
/// async-signal-safe functions between `fork` and `_exit`; its exit code
/// names the step that failed.
fn as_nobody_mkdir_and_mark(dir: &Path, value: &str) -> Result<(), String> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt as _;

    use nix::sys::wait::{WaitStatus, waitpid};
    use nix::unistd::ForkResult;

    let path = CString::new(dir.as_os_str().as_bytes()).expect("no NUL in the path");
    let name = c"user.pinctl.cpus";
    let value = value.as_bytes();
    // SAFETY: the child only makes raw system calls on memory prepared
    // before the fork, then `_exit`s; it never returns into Rust code.
    match unsafe { nix::unistd::fork() }.expect("fork") {
        // SAFETY: as above: raw system calls on memory prepared before the
        // fork, and `_exit`.
        ForkResult::Child => unsafe {
            let code = if libc::setgroups(0, std::ptr::null()) != 0 {
                10
            } else if libc::setgid(65534) != 0 {
                11
            } else if libc::setuid(65534) != 0 {
                12
            } else if libc::mkdir(path.as_ptr(), 0o755) != 0 {
                13
            } else if libc::setxattr(
                path.as_ptr(),
                name.as_ptr(),
                value.as_ptr().cast(),
                value.len(),
                0,
            ) != 0
            {
                14
            } else {
                0
            };
            libc::_exit(code)
        },
        ForkResult::Parent { child } => match waitpid(child, None) {
            Ok(WaitStatus::Exited(_, 0)) => Ok(()),
            Ok(WaitStatus::Exited(_, code)) => Err(format!(
                "as uid 65534, {} failed (step {code}: 10 setgroups, 11 setgid, 12 setuid, \
                 13 mkdir, 14 setxattr)",
                dir.display()
            )),
            other => Err(format!("the uid-65534 child ended with {other:?}")),
        },
    }
}

/// The audit, on the real kernel: uid 65534 made a cgroup in a subtree
/// delegated to it and asked for exclusive CPUs with one `setxattr`; it
/// took 26 of 30 CPUs and left the next Guaranteed pod pending. Now the
/// request is refused and logged, the cgroup stays in the shared pool, and
/// the Guaranteed container gets the CPU.
#[test]
fn an_unprivileged_user_cannot_take_exclusive_cpus() {
    let Some(mut rig) = Rig::new("an_unprivileged_user_cannot_take_exclusive_cpus") else {
        return;
    };
    let (all, exclusive, shared) = (rig.all.clone(), rig.exclusive.clone(), rig.shared.clone());
    let delegated = "system.slice/user@65534.service";
    mkdir(&rig.cs(delegated));
    std::os::unix::fs::chown(rig.cs(delegated), Some(65534), Some(65534)).expect("chown");
    rig.start_daemon();
    rig.expect_cpus(delegated, &all);

    let greedy = format!("{delegated}/greedy");
    rig.note("uid 65534 makes greedy and sets user.pinctl.cpus = 1");
    as_nobody_mkdir_and_mark(&rig.cs(&greedy), "1").unwrap();
    // v1 gives a new cgroup empty sets: the daemon fills them with the
    // shared pool, which is still every CPU.
    rig.expect_cpus(&greedy, &all);
    rig.expect_cpus_stay(&greedy, &all, Duration::from_millis(300));

    let guaranteed = rig.add_container(Qos::Guaranteed, Some(100_000));
    rig.expect_cpus(&guaranteed.rel, &exclusive);
    rig.expect_cpus(&greedy, &shared);
    let log = fs::read_to_string(&rig.log).unwrap_or_default();
    let refused = log
        .lines()
        .filter(|l| l.contains("greedy") && l.contains("only root may give CPUs away"))
        .count();
    assert_eq!(refused, 1, "one line refusing greedy's request:\n{log}");
}

/// The audit, on the real kernel: a cgroup whose name is not UTF-8 was
/// invisible to the daemon. Below `system.slice`, holding every CPU and a
/// task, it kept `system.slice` from narrowing (v1 refuses a parent write
/// that drops a child's CPU with EBUSY) and its task ran on the exclusive
/// CPU. Now it is narrowed first, like any shared cgroup.
#[test]
fn a_cgroup_whose_name_is_not_utf8_keeps_off_the_exclusive_cpu() {
    use std::os::unix::ffi::OsStrExt as _;
    let Some(mut rig) = Rig::new("a_cgroup_whose_name_is_not_utf8_keeps_off_the_exclusive_cpu")
    else {
        return;
    };
    let (exclusive, shared, all) = (rig.exclusive.clone(), rig.shared.clone(), rig.all.clone());
    // system.slice exists before the daemon, as on a node: set it up.
    must_write(
        &rig.cs("system.slice").join("cpuset.cpus"),
        &all.to_string(),
    );
    must_write(
        &rig.cs("system.slice").join("cpuset.mems"),
        &rig.mems.to_string(),
    );
    let odd = rig
        .cs("system.slice")
        .join(std::ffi::OsStr::from_bytes(b"odd-\xff\xfe"));
    fs::create_dir(&odd).expect("mkdir the odd cgroup");
    must_write(&odd.join("cpuset.cpus"), &all.to_string());
    must_write(&odd.join("cpuset.mems"), &rig.mems.to_string());
    let sleeper = Command::new("sleep")
        .arg("600")
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn sleep");
    let pid = sleeper.id();
    rig.sleeps.push(sleeper);
    must_write(&odd.join("tasks"), &pid.to_string());
    rig.start_daemon();

    let guaranteed = rig.add_container(Qos::Guaranteed, Some(100_000));
    rig.expect_cpus(&guaranteed.rel, &exclusive);
    rig.expect_cpus("system.slice", &shared);
    rig.expect_allowed(pid, &shared);
    assert_eq!(read_set(&odd.join("cpuset.cpus")), shared);
}

/// How many cgroups the storm makes and removes in all
/// (`PINCTL_STORM_CGROUPS`, default 10,000), in bursts of
/// [`STORM_BURST`] pods with one container each.
fn storm_cgroups() -> usize {
    std::env::var("PINCTL_STORM_CGROUPS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10_000)
}
const STORM_BURST: usize = 1_000;
/// How long the daemon may take to catch up with a whole burst.
const STORM_SETTLE: Duration = Duration::from_secs(120);

/// The daemon's peak resident size (`VmHWM`), in KiB.
fn peak_rss_kib(pid: Pid) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// A storm on the real kernel: thousands of cgroups (burstable pods with a
/// container each) made and removed in bursts, while one Guaranteed
/// container holds the exclusive CPU throughout and another is made and
/// removed in every burst, waiting for it. Checked all along by a sampler:
/// the pinned container never loses its CPU (its process never moves) and
/// the waiting one never gets it. After each burst every new cgroup is
/// confined to the shared pool; the daemon's inotify queue is kept short so
/// that bursts overflow it (each overflow is a full reconcile); at the end
/// the daemon's peak RSS is bounded and the tree is right. Prints the
/// figures.
#[test]
fn a_storm_of_cgroups_never_shares_the_exclusive_cpu() {
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;
    let Some(mut rig) = Rig::new("a_storm_of_cgroups_never_shares_the_exclusive_cpu") else {
        return;
    };
    let (exclusive, shared) = (rig.exclusive.clone(), rig.shared.clone());
    // A short inotify queue for the daemon's instances (the limit is read
    // when an instance is made, so it is put back once the daemon is up):
    // a burst then overflows it, and the daemon must resynchronise.
    struct Restore(String);
    impl Drop for Restore {
        fn drop(&mut self) {
            let _ = write(Path::new(QUEUE), &self.0);
        }
    }
    const QUEUE: &str = "/proc/sys/fs/inotify/max_queued_events";
    let queue = Restore(read(Path::new(QUEUE)));
    must_write(Path::new(QUEUE), "256");
    rig.start_daemon();
    drop(queue);
    let pinned = rig.add_container(Qos::Guaranteed, Some(100_000));
    rig.expect_cpus(&pinned.rel, &exclusive);
    let pinned_pid = rig.attach(&pinned);

    let total = storm_cgroups();
    let bursts = total.div_ceil(2 * STORM_BURST).max(1);
    let stop = Arc::new(AtomicBool::new(false));
    let waiting_rel = Arc::new(Mutex::new(None::<PathBuf>));
    let sampler = {
        let (stop, waiting_rel) = (stop.clone(), waiting_rel.clone());
        let pinned_file = rig.cs(&pinned.rel).join("cpuset.cpus");
        let exclusive = exclusive.clone();
        std::thread::spawn(move || {
            let (mut samples, mut problems) = (0u64, Vec::new());
            while !stop.load(Ordering::Relaxed) {
                samples += 1;
                match fs::read_to_string(&pinned_file).map(|t| t.parse::<CpuSet>()) {
                    Ok(Ok(c)) if c == exclusive => {}
                    other => problems.push(format!("the pinned container had {other:?}")),
                }
                match cpus_allowed(pinned_pid) {
                    Ok(c) if c == exclusive => {}
                    other => problems.push(format!("its process could run on {other:?}")),
                }
                let waiting = waiting_rel.lock().unwrap().clone();
                if let Some(file) = waiting
                    && let Ok(Ok(c)) = fs::read_to_string(&file).map(|t| t.parse::<CpuSet>())
                    && !c.intersection(&exclusive).is_empty()
                {
                    problems.push(format!("the waiting container got {c}"));
                }
                sleep(Duration::from_millis(5));
            }
            (samples, problems)
        })
    };

    let started = Instant::now();
    let mut figures = Vec::new();
    for burst in 0..bursts {
        let waiting = rig.add_container(Qos::Guaranteed, Some(100_000));
        *waiting_rel.lock().unwrap() = Some(rig.cs(&waiting.rel).join("cpuset.cpus"));
        rig.note(&format!("storm burst {burst}: {STORM_BURST} pods"));
        let t0 = Instant::now();
        let mut made = Vec::with_capacity(STORM_BURST);
        for i in 0..STORM_BURST {
            let pod = format!("kubepods/burstable/pod{burst:08x}-{i:04x}-4000-8000-5702c0ffee00");
            let ctr = format!("{pod}/{:032x}{:032x}", burst, i);
            mkdir(&rig.cs(&pod));
            mkdir(&rig.cs(&ctr));
            made.push((pod, ctr));
        }
        let made_ms = t0.elapsed().as_millis();
        // Settled: every new container confined to the shared pool.
        let deadline = Instant::now() + STORM_SETTLE;
        let mut next = 0;
        while next < made.len() {
            let file = rig.cs(&made[next].1).join("cpuset.cpus");
            if fs::read_to_string(&file).is_ok_and(|t| t.parse::<CpuSet>() == Ok(shared.clone())) {
                next += 1;
                continue;
            }
            assert!(
                Instant::now() < deadline,
                "burst {burst}: {} still has {:?} after {STORM_SETTLE:?}",
                made[next].1,
                fs::read_to_string(&file)
            );
            sleep(Duration::from_millis(20));
        }
        let settled_ms = t0.elapsed().as_millis();
        rig.expect_cpus(&waiting.rel, &shared);
        // Removed as a runtime does, container then pod.
        let t1 = Instant::now();
        for (pod, ctr) in made.iter().rev() {
            fs::remove_dir(rig.cs(ctr)).expect("rmdir container");
            fs::remove_dir(rig.cs(pod)).expect("rmdir pod");
        }
        *waiting_rel.lock().unwrap() = None;
        rig.remove_container(&waiting);
        figures.push(format!(
            "burst {burst}: {} cgroups made in {made_ms} ms, all in the shared pool after {settled_ms} ms, removed in {} ms",
            2 * STORM_BURST,
            t1.elapsed().as_millis()
        ));
    }
    // Every removal seen (or reconciled): the pinned one still alone.
    rig.expect_cpus(&pinned.rel, &exclusive);
    rig.expect_cpus("system.slice", &shared);
    stop.store(true, Ordering::Relaxed);
    let (samples, problems) = sampler.join().expect("the sampler");
    let log = fs::read_to_string(&rig.log).unwrap_or_default();
    let overflows = log.lines().filter(|l| l.contains("overflow")).count();
    assert!(overflows > 0, "a 256-event queue never overflowed:\n{log}");
    let rss = peak_rss_kib(rig.daemon_pid());
    let report = format!(
        "storm: {} cgroups in {bursts} bursts, {:.1} s; {samples} samples, {} problems; \
         inotify overflows logged: {overflows}; pinctld peak RSS {:.1} MB\n  {}\n",
        bursts * 2 * STORM_BURST,
        started.elapsed().as_secs_f64(),
        problems.len(),
        rss as f64 / 1024.0,
        figures.join("\n  ")
    );
    let _ = io::stderr().lock().write_all(report.as_bytes());
    assert!(
        problems.is_empty(),
        "{report}{:#?}",
        &problems[..problems.len().min(20)]
    );
    assert!(rss < 64 * 1024, "peak RSS {rss} KiB\n{report}");
}
