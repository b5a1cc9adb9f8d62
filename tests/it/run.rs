//! `pinctl run`'s door on the real `pinctld` (fake v2 tree): what it refuses
//! and how it says so, over the run socket; and a run under a stand-in
//! systemd ([`FakeSystemd`]), which makes the run's transient scope as
//! systemd does. The daemon's own cgroup for a run (no systemd) needs a
//! kernel: `tests/real_cgroup_v1/run.rs` and the VM bed's scenario 14.

use std::io::{BufRead as _, Write as _};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use pinctl::run::{Ask, AskError, Refusal};

use crate::support::fake_cgroup::{Driver, MEMS, Version, set};
use crate::support::fake_systemd::{FakeSystemd, Started};
use crate::support::world::{Options, SYSTEM, World};

/// A v2 world with `[run]` on for this process's user and the `[run]`
/// lines `run`, and `extra` keys; started.
fn world_with(run: &str, extra: &[String]) -> World {
    world_of(run, extra, &Options::default())
}

/// [`world_with`] made with `opts`.
fn world_of(run: &str, extra: &[String], opts: &Options) -> World {
    let mut w = World::new("pinctld-run", Version::V2, Driver::Systemd, opts);
    if opts.copy_sysfs {
        crate::support::fake_devices::add(&w.sysfs, &w.proc_root);
    }
    let me = nix::unistd::User::from_uid(nix::unistd::getuid())
        .ok()
        .flatten()
        .map_or_else(|| "root".to_string(), |u| u.name);
    let mut keys = extra.to_vec();
    keys.push(format!(
        "[run]\nenabled = true\nsocket = {:?}\nusers = [{me:?}]\n{run}",
        w.tmp.path().join("run.sock").display().to_string()
    ));
    w.write_config(&Options {
        keys,
        ..Options::default()
    });
    // This process, as the fake /proc shows it: the daemon reads the
    // peer's groups and start time there.
    let me = w.proc_root.join(std::process::id().to_string());
    std::fs::create_dir_all(&me).unwrap();
    for file in ["status", "stat"] {
        std::fs::copy(format!("/proc/self/{file}"), me.join(file)).unwrap();
    }
    w.start();
    w
}

fn world() -> World {
    world_with("max_cpus = 4", &[])
}

/// [`world_with`] the `[run]` lines `run` and a stand-in systemd that
/// makes transient scopes in the world's tree; `None`, said, without
/// `dbus-daemon`.
fn with_systemd_and(run: &str) -> Option<(tempfile::TempDir, FakeSystemd, World)> {
    with_systemd_of(run, &Options::default())
}

/// [`with_systemd_and`] with the world made with `opts`.
fn with_systemd_of(run: &str, opts: &Options) -> Option<(tempfile::TempDir, FakeSystemd, World)> {
    let bus_dir = tempfile::tempdir().unwrap();
    let Some(systemd) = FakeSystemd::start(bus_dir.path()) else {
        eprintln!("skipped: no dbus-daemon (Debian's package dbus-daemon; .ci/run installs it)");
        return None;
    };
    let bus = format!("systemd_bus = {:?}", systemd.socket.display().to_string());
    let w = world_of(run, &[bus], opts);
    systemd.make_scopes_under(w.tree.root());
    Some((bus_dir, systemd, w))
}

fn with_systemd() -> Option<(tempfile::TempDir, FakeSystemd, World)> {
    with_systemd_and("")
}

fn ask(w: &World, cpus: usize, name: Option<&str>) -> Result<pinctl::run::Grant, AskError> {
    ask_waiting(w, cpus, name, None)
}

fn ask_waiting(
    w: &World,
    cpus: usize,
    name: Option<&str>,
    wait: Option<u64>,
) -> Result<pinctl::run::Grant, AskError> {
    ask_for(
        w,
        &Ask {
            cpus,
            name: name.map(str::to_string),
            command: vec!["true".into()],
            wait,
            ..Ask::default()
        },
    )
}

fn ask_for(w: &World, a: &Ask) -> Result<pinctl::run::Grant, AskError> {
    pinctl::run::ask(
        &w.tmp.path().join("run.sock"),
        a,
        Duration::from_secs(20),
        |_| {},
    )
}

fn refused(r: Result<pinctl::run::Grant, AskError>) -> Refusal {
    match r {
        Err(AskError::Refused(r)) => r,
        other => panic!("not a refusal: {other:?}"),
    }
}

#[test]
fn each_refusal_says_why() {
    let w = world();
    assert_eq!(
        refused(ask(&w, 5, None)).to_string(),
        "5 CPUs asked, at most 4 per run ([run] max_cpus)"
    );
    assert_eq!(
        refused(ask(&w, 0, None)).to_string(),
        "bad request: 0 CPUs asked"
    );
    let bad_name = refused(ask(&w, 1, Some("../x"))).to_string();
    assert!(bad_name.contains("'/' in the name"), "{bad_name}");

    // Not a JSON ask at all.
    let mut s = UnixStream::connect(w.tmp.path().join("run.sock")).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(b"give me CPUs\n").unwrap();
    let mut line = String::new();
    std::io::BufReader::new(s).read_line(&mut line).unwrap();
    assert!(line.contains("not an ask"), "{line}");

    // No daemon there.
    let gone = pinctl::run::ask(
        &w.tmp.path().join("nothing.sock"),
        &Ask {
            cpus: 1,
            ..Ask::default()
        },
        Duration::from_secs(5),
        |_| {},
    )
    .unwrap_err()
    .to_string();
    assert!(
        gone.contains("is pinctld running, with [run] enabled = true"),
        "{gone}"
    );
}

/// An ask from a process in a Slurm job (its `/proc/PID/cgroup` below
/// `slurmstepd.scope`) is refused with the reason, unless `[run]` allows
/// it (then the next check, the cap, answers).
#[test]
fn an_ask_from_inside_a_slurm_job_is_refused_unless_allowed() {
    let in_job = |w: &World| {
        let me = w.proc_root.join(std::process::id().to_string());
        let line = "0::/system.slice/slurmstepd.scope/job_42/step_0/user/task_0\n";
        std::fs::write(me.join("cgroup"), line).unwrap();
    };
    let w = world();
    in_job(&w);
    let r = refused(ask(&w, 1, None));
    assert!(
        matches!(&r, Refusal::InSlurmJob { job, .. } if job == "job_42"),
        "{r}"
    );
    assert!(r.to_string().contains("srun --cpu-bind"), "{r}");
    let w = world_with("max_cpus = 4\nallow_slurm_jobs = true", &[]);
    in_job(&w);
    let r = refused(ask(&w, 5, None));
    assert!(matches!(r, Refusal::TooMany { .. }), "{r}");
}

/// The daemon with `[run]` off serves no run socket.
#[test]
fn no_run_socket_unless_enabled() {
    let mut w = World::new(
        "pinctld-run-off",
        Version::V2,
        Driver::Systemd,
        &Options::default(),
    );
    w.start();
    assert!(!w.tmp.path().join("run.sock").exists());
    assert!(!w.log().contains("serving the run socket"), "{}", w.log());
}

/// Under systemd a run is a transient scope in pinctl.slice around the
/// asking process, pinned by the daemon, its pin held by systemd too (a
/// daemon-reload writes it, not ""); the CPUs leave the shared pool, and
/// come back when the scope goes.
#[test]
fn a_run_under_systemd_is_a_transient_scope_systemd_holds_pinned() {
    let Some((_bus, systemd, w)) = with_systemd() else {
        return;
    };
    let grant = ask(&w, 2, Some("job")).expect("granted");
    let rel = "pinctl.slice/run-job.scope";
    assert_eq!(grant.key, "run:job");
    assert_eq!(grant.cgroup, rel);
    assert_eq!(grant.cpus.len(), 2);
    assert_eq!(
        systemd.started(),
        vec![Started {
            unit: "run-job.scope".into(),
            slice: "pinctl.slice".into(),
            pids: vec![std::process::id()],
            by_pidfd: true,
        }]
    );
    assert_eq!(w.tree.cpus(rel), grant.cpus);
    w.wait_for("systemd holds the pin", || {
        match systemd.allowed("run-job.scope") {
            a if a == grant.cpus => Ok(()),
            a => Err(format!("AllowedCPUs={a}")),
        }
    });
    // Its memory nodes too, as the kernel gives them (every node here).
    assert_eq!(systemd.allowed_mems("run-job.scope"), set(MEMS));
    systemd.daemon_reload();
    w.hold(
        "the pin stays over a daemon-reload",
        Duration::from_millis(500),
        || match w.tree.cpus(rel) {
            got if got == grant.cpus => Ok(()),
            got => Err(format!("cpuset.cpus {got}")),
        },
    );
    let shared = w.tree.effective(SYSTEM);
    assert!(shared.intersection(&grant.cpus).is_empty(), "{shared}");
    let status = w.served().unwrap();
    assert!(
        status.workloads.iter().any(|x| x.key == "run:job"),
        "{status:?}"
    );
    let run = &status.runs.running;
    assert_eq!(run.len(), 1, "{run:?}");
    assert_eq!(
        (
            run[0].key.as_str(),
            run[0].uid,
            run[0].cpus,
            &run[0].command[..]
        ),
        (
            "run:job",
            nix::unistd::getuid().as_raw(),
            2,
            &["true".to_string()][..]
        )
    );

    let page = w.described(rel);
    let by = format!("pinctl run by uid {}", nix::unistd::getuid());
    assert!(page.contains(&by) && page.contains(": true\n"), "{page}");

    // The command and its children ended: systemd removes the scope.
    w.tree.remove(rel);
    w.wait_for("the CPUs are back in the shared pool", || {
        match w.tree.effective(SYSTEM) {
            s if grant.cpus.iter().all(|c| s.contains(c)) => Ok(()),
            s => Err(format!("shared {s}")),
        }
    });
    // Both ends of the run are events.
    w.wait_for("the run's events", || {
        let runs: Vec<String> = (w.served_events()?.into_iter())
            .filter_map(|e| match e.what {
                pinctl::api::EventKind::Run { key, cpus, .. } => Some(format!("{key} {cpus}")),
                _ => None,
            })
            .collect();
        match runs.len() {
            2 => Ok(runs),
            _ => Err(format!("{runs:?}")),
        }
    });
}

/// A refused ask starts no scope, nor does one from a process gone before
/// the daemon could read it.
#[test]
fn a_refused_or_gone_client_leaves_no_scope() {
    let Some((_bus, systemd, w)) = with_systemd() else {
        return;
    };
    refused(ask(&w, 32, None));
    std::fs::remove_dir_all(w.proc_root.join(std::process::id().to_string())).unwrap();
    match refused(ask(&w, 1, Some("late"))) {
        Refusal::Failed { .. } => {}
        other => panic!("not a failure: {other}"),
    }
    assert_eq!(systemd.started(), vec![]);
    assert!(!w.tree.exists("pinctl.slice/run-late.scope"));
}

/// Every free CPU, taken by a run named `name`: its cgroup.
fn take_all(w: &World, name: &str) -> String {
    let free = match refused(ask(w, 32, None)) {
        Refusal::NotEnough { free, .. } => free,
        other => panic!("not a NotEnough: {other}"),
    };
    ask(w, free, Some(name)).expect("every free CPU granted");
    format!("pinctl.slice/run-{name}.scope")
}

/// `--wait`: an ask that finds too few CPUs waits in line and is told so;
/// an ask without `--wait` meanwhile is refused, told one waits before it;
/// once CPUs come free the one in line gets them.
#[test]
fn a_waiting_ask_runs_once_cpus_free_up_in_order() {
    let Some((_bus, systemd, w)) = with_systemd() else {
        return;
    };
    let big = take_all(&w, "big");
    let (tx, rx) = std::sync::mpsc::channel();
    let socket = w.tmp.path().join("run.sock");
    let waiter = std::thread::spawn(move || {
        let a = Ask {
            cpus: 2,
            name: Some("waiter".into()),
            wait: Some(30),
            ..Ask::default()
        };
        pinctl::run::ask(&socket, &a, Duration::from_secs(60), |q| {
            let _ = tx.send(q.clone());
        })
    });
    let queued = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("told it waits");
    assert_eq!((queued.ahead, queued.free), (0, 0));
    match refused(ask(&w, 1, None)) {
        Refusal::NotEnough { ahead: 1, .. } => {}
        other => panic!("not refused behind the line: {other}"),
    }
    // big's command ended: systemd removes its scope.
    w.tree.remove(&big);
    let grant = waiter.join().unwrap().expect("granted after waiting");
    assert_eq!((grant.key.as_str(), grant.cpus.len()), ("run:waiter", 2));
    let started: Vec<String> = systemd.started().into_iter().map(|s| s.unit).collect();
    assert_eq!(started, ["run-big.scope", "run-waiter.scope"]);
}

/// A wait that ends is refused with the time waited; a client that goes
/// away in line gets nothing when CPUs come free.
#[test]
fn a_wait_ends_and_a_client_gone_from_the_line_gets_nothing() {
    let Some((_bus, systemd, w)) = with_systemd() else {
        return;
    };
    let big = take_all(&w, "big");
    match refused(ask_waiting(&w, 1, None, Some(1))) {
        Refusal::NotEnough { waited, .. } => assert!(waited >= 1, "{waited}"),
        other => panic!("not a NotEnough: {other}"),
    }

    let mut s = UnixStream::connect(w.tmp.path().join("run.sock")).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(b"{\"cpus\":1,\"name\":\"gone\",\"wait\":60}\n")
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(&s).read_line(&mut line).unwrap();
    assert!(line.contains("queued"), "{line}");
    drop(s);
    w.wait_log("a client went away before its answer", 1);
    w.tree.remove(&big);
    w.hold(
        "no run for the client gone",
        Duration::from_millis(500),
        || match systemd.started().iter().any(|s| s.unit == "run-gone.scope") {
            false => Ok(()),
            true => Err("its scope was started".into()),
        },
    );
    // The line is empty: an ask without --wait is served at once.
    ask(&w, 1, Some("after")).expect("granted");
}

/// A restarted daemon keeps a run's pin, and counts it against its user
/// again (the uid kept on the run's cgroup).
#[test]
fn a_restart_keeps_a_run_and_its_users_count() {
    let Some((_bus, _systemd, mut w)) = with_systemd_and("max_cpus_per_user = 2") else {
        return;
    };
    let grant = ask(&w, 2, Some("kept")).expect("granted");
    let rel = "pinctl.slice/run-kept.scope";
    w.stop();
    w.start();
    w.wait_for("the run's pin kept", || match w.served() {
        Ok(s) if s.workloads.iter().any(|x| x.key == "run:kept") => Ok(()),
        other => Err(format!("{other:?}")),
    });
    assert_eq!(w.tree.cpus(rel), grant.cpus);
    w.wait_for("the user's 2 CPUs counted again", || {
        match ask(&w, 1, Some("more")) {
            Err(AskError::Refused(Refusal::OverUserCap { held: 2, .. })) => Ok(()),
            Ok(g) => panic!("granted over the cap: {g:?}"),
            other => Err(format!("{other:?}")),
        }
    });
}

/// `--numa-node`: the CPUs come from the nodes named alone, the grant says
/// their nodes and the memory policy, and the run's xattr says both; a node
/// the machine lacks, or too few free there, is refused.
#[test]
fn a_run_takes_its_cpus_from_the_numa_nodes_named_alone() {
    let Some((_bus, _systemd, w)) = with_systemd_and("mem = \"bind\"") else {
        return;
    };
    let on = |cpus, numa: Vec<u32>, name: &str| {
        let a = Ask {
            cpus,
            name: Some(name.into()),
            numa,
            ..Ask::default()
        };
        ask_for(&w, &a)
    };
    let node1 = set("8-15,24-31");
    let grant = on(4, vec![1], "near").expect("granted on node 1");
    assert!(grant.cpus.is_subset(&node1), "{}", grant.cpus);
    assert_eq!(grant.nodes, set("1"));
    assert_eq!(grant.mem, pinctl::run::MemPolicy::Bind);
    let dir = w.tree.dir("pinctl.slice/run-near.scope");
    assert_eq!(
        xattr::get(&dir, "user.pinctl.cpus").unwrap().as_deref(),
        Some(&b"4@1"[..])
    );
    let bad = refused(on(1, vec![7], "far")).to_string();
    assert!(
        bad.contains("NUMA node 7: this machine has nodes 0-1"),
        "{bad}"
    );
    // Node 1 has 16 CPUs, 4 of them taken (and maybe some reserved).
    match refused(on(16, vec![1], "big")) {
        Refusal::NotEnough { free, .. } => assert!(free <= 12, "{free}"),
        other => panic!("not a NotEnough: {other}"),
    }
}

/// `--near` (on the fake devices of `support::fake_devices`): the CPUs go
/// on the device's NUMA node though node 0 has room first, and the run's
/// cgroup names the device; with `require` a node without room refuses;
/// a device that cannot be placed is refused, saying why.
#[test]
fn a_run_near_a_device_takes_its_cpus_on_the_devices_node() {
    let opts = Options {
        copy_sysfs: true,
        ..Options::default()
    };
    let Some((_bus, _systemd, w)) = with_systemd_of("max_cpus = 16", &opts) else {
        return;
    };
    let near = |cpus, devices: &[&str], alignment: Option<&str>, name: &str| {
        let a = Ask {
            cpus,
            name: Some(name.into()),
            near: devices.iter().map(|d| d.to_string()).collect(),
            device_alignment: alignment.map(str::to_string),
            ..Ask::default()
        };
        ask_for(&w, &a)
    };
    let node1 = set(crate::support::fake_devices::NODE1);
    let grant = near(2, &["ib0"], None, "nic").expect("granted near ib0");
    assert!(grant.cpus.is_subset(&node1), "{}", grant.cpus);
    let dir = w.tree.dir("pinctl.slice/run-nic.scope");
    assert_eq!(
        xattr::get(&dir, "user.pinctl.near").unwrap().as_deref(),
        Some(&b"ib0"[..])
    );
    // prefer: 15 CPUs do not fit on node 1 (2 taken): granted, split.
    let grant = near(15, &["/dev/null", "ib0"], None, "wide");
    let why = refused(grant).to_string();
    assert!(why.contains("--near /dev/null:"), "{why}");
    let grant = near(15, &["0000:3b:00.0"], None, "wide").expect("granted, split");
    assert_eq!(grant.cpus.intersection(&node1).len(), 14, "{}", grant.cpus);
    // require: too few free on node 1, refused as --numa-node is.
    match refused(near(2, &["ib0"], Some("require"), "strict")) {
        Refusal::NotEnough { free, .. } => assert_eq!(free, 0),
        other => panic!("not a NotEnough: {other}"),
    }
    let why = refused(near(1, &["lo"], None, "virtual")).to_string();
    assert!(
        why.contains("--near lo:") && why.contains("not on a bus"),
        "{why}"
    );
}

/// A client that dies as systemd moves it into its scope gets nothing, and
/// holds nothing: the CPUs stay free for the next ask.
#[test]
fn a_client_killed_as_its_scope_starts_holds_nothing() {
    let Some((_bus, systemd, w)) = with_systemd() else {
        return;
    };
    systemd.lose_pids();
    let why = refused(ask(&w, 2, Some("dying"))).to_string();
    assert!(
        why.contains("systemd did not move the asking process into pinctl.slice/run-dying.scope"),
        "{why}"
    );
    let status = w.served().unwrap();
    assert!(
        !status.workloads.iter().any(|x| x.key == "run:dying"),
        "{status:?}"
    );
    let dir = w.tree.dir("pinctl.slice/run-dying.scope");
    assert_ne!(
        xattr::get(&dir, "user.pinctl.cpus").unwrap().as_deref(),
        Some(&b"2"[..]),
        "the dead run's cgroup still asks"
    );
}

/// `--full-cores`: whole cores (core c = {c, c+16} here), marked on the
/// run's xattr; a count that is not whole cores is refused.
#[test]
fn a_run_of_full_cores_gets_every_thread_of_its_cores() {
    let Some((_bus, _systemd, w)) = with_systemd() else {
        return;
    };
    let whole = |cpus, name: &str| {
        let a = Ask {
            cpus,
            name: Some(name.into()),
            full_cores: true,
            ..Ask::default()
        };
        ask_for(&w, &a)
    };
    let bad = refused(whole(3, "odd")).to_string();
    assert!(
        bad.contains("--full-cores: 3 CPUs is not whole cores of 2 threads"),
        "{bad}"
    );
    let grant = whole(4, "cores").expect("granted");
    for c in grant.cpus.iter() {
        let sibling = if c < 16 { c + 16 } else { c - 16 };
        assert!(
            grant.cpus.contains(sibling),
            "{}: {c} without its sibling",
            grant.cpus
        );
    }
    let dir = w.tree.dir("pinctl.slice/run-cores.scope");
    assert_eq!(
        xattr::get(&dir, "user.pinctl.cpus").unwrap().as_deref(),
        Some(&b"4+full-cores"[..])
    );
}

/// A systemd before 253 refuses `PIDFDs=`: the daemon gives it the pid's
/// number, then and from then on.
#[test]
fn a_systemd_without_pidfds_is_given_the_number() {
    let Some((_bus, systemd, w)) = with_systemd() else {
        return;
    };
    systemd.refuse_pidfds();
    ask(&w, 1, Some("one")).expect("granted");
    ask(&w, 1, Some("two")).expect("granted");
    let started: Vec<(String, bool)> = (systemd.started().into_iter())
        .map(|s| (s.unit, s.by_pidfd))
        .collect();
    assert_eq!(
        started,
        [
            ("run-one.scope".into(), false),
            ("run-two.scope".into(), false)
        ]
    );
}
