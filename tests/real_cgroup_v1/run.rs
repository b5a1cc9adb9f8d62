//! `pinctl run` on the real cgroup v1 hierarchy (issue #33): the binary
//! asks the real daemon over its run socket, the daemon makes the run's
//! cgroup below the test's top cgroup and moves the client in, and the
//! command then runs on the exclusive CPU, as the kernel shows it.

use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::process::{Command, Output};
use std::time::Duration;

use crate::rig::*;

/// `pinctl run` with `args`, as `uid` (None: this process's).
fn pinctl_run(rig: &Rig, uid: Option<u32>, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pinctl"));
    cmd.arg("run")
        .arg("--socket")
        .arg(rig.tmp.path().join("run.sock"))
        .args(args);
    if let Some(uid) = uid {
        cmd.uid(uid).gid(uid);
    }
    cmd.output().expect("run pinctl")
}

/// Waits up to 10 s for run NAME's cgroup to be removed.
fn wait_gone(rig: &Rig, name: &str) {
    let dir = rig.cs(&format!("run.slice/run-{name}.scope"));
    wait_for(
        &format!("run {name}'s cgroup is removed"),
        Duration::from_secs(10),
        || {
            if dir.exists() {
                Err("still there".into())
            } else {
                Ok(())
            }
        },
    );
}

/// The run's command sees the exclusive CPU (and PINCTL_CPUS says so);
/// its cgroup goes once the command has ended, and the CPU is free again.
/// Asking for more than is free, or as a user `[run]` does not name, is
/// refused, saying why.
#[test]
fn a_command_runs_on_the_exclusive_cpu_and_gives_it_back() {
    let Some(mut rig) = Rig::new("a_command_runs_on_the_exclusive_cpu_and_gives_it_back") else {
        return;
    };
    let exclusive = rig.exclusive.clone();
    rig.add_run_table();
    rig.start_daemon();

    let out = pinctl_run(
        &rig,
        None,
        &[
            "-n",
            "1",
            "--name",
            "first",
            "--",
            "sh",
            "-c",
            "grep Cpus_allowed_list /proc/self/status; echo PINCTL_CPUS=$PINCTL_CPUS",
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "pinctl run failed: {stderr}");
    assert!(
        stdout.contains(&format!("Cpus_allowed_list:\t{exclusive}\n")),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("PINCTL_CPUS={exclusive}\n")),
        "{stdout}"
    );
    // Ended: the cgroup goes at once (the daemon looks at held runs every
    // half second).
    wait_gone(&rig, "first");
    rig.expect_cpus("system.slice", &rig.all.clone());

    let out = pinctl_run(&rig, None, &["-n", "2", "--", "true"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("2 CPUs asked, 1 free"), "{stderr}");

    // As nobody: the socket's directory must let it in.
    std::fs::set_permissions(rig.tmp.path(), std::fs::Permissions::from_mode(0o755))
        .expect("chmod the test's directory");
    let out = pinctl_run(&rig, Some(65534), &["-n", "1", "--", "true"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("uid 65534 may not ask for CPUs: only root may"),
        "{stderr}"
    );
}

/// A user's runs back to back under a per-user cap of one run's CPUs are
/// each served (the last one's CPU counts no more once it has ended), and
/// the last one's CPU comes back without a round of checks
/// (`watchdog_interval` is an hour here: the daemon looks at held runs
/// every half second).
#[test]
fn runs_back_to_back_under_a_per_user_cap_are_each_served() {
    let Some(mut rig) = Rig::new("runs_back_to_back_under_a_per_user_cap_are_each_served") else {
        return;
    };
    let text = std::fs::read_to_string(&rig.config).expect("read the config");
    let text = text.replace("watchdog_interval = \"1s\"", "watchdog_interval = \"1h\"");
    std::fs::write(&rig.config, text).expect("write the config");
    rig.add_run_table();
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&rig.config)
        .expect("open the config");
    std::io::Write::write_all(&mut f, b"max_cpus_per_user = 1\n").expect("write the cap");
    rig.start_daemon();

    for name in ["step1", "step2", "step3"] {
        let out = pinctl_run(&rig, None, &["-n", "1", "--name", name, "--", "true"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{name}: {stderr}");
    }
    wait_gone(&rig, "step3");
    rig.expect_cpus("system.slice", &rig.all.clone());
}
