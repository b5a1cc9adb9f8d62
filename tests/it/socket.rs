//! End to end over a real socket: the real `pinctld` on a fake cgroup tree
//! (v2 with the systemd driver, v1 with cgroupfs) and the `intel-2s-smt`
//! sysfs fixture (32 CPUs; core c = {c, c+16}; CPUs 2-3,18-19 isolated),
//! and the `pinctl` binary run against its socket for every command:
//! `status` (page and `--json`), `describe` (each way of naming a workload),
//! `verify` (clean, then a task outside its CPUs), `events` (`--since`,
//! `--json`, `--follow` seeing a new workload's writes), every endpoint
//! through the CLI's client, the socket refused to another user, and once
//! the daemon is gone: "not running" for a removed and for a stale socket,
//! and `status`/`verify --offline` from the state file the daemon left.
//!
//! The socket's limits: idle connections beyond the cap leave the daemon
//! its descriptors (the real daemon under a low open-files limit), and, on
//! the server in this process with short limits, stalled, silent and idle
//! connections are closed in time and connections beyond the cap at once.
//!
//! The fake tree has no kernel: for `verify`, the test writes what the
//! kernel would show (v2 `cpuset.cpus.effective`, computed by
//! `FakeCgroup::effective`; v1 has none and `verify` reads `cpuset.cpus`),
//! a task list and a fake `/proc`.

use std::fs;
use std::io::BufRead as _;
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use pinctl::api;
use pinctl::client::Client;

use crate::support::fake_cgroup::{Driver, ONLINE, Qos, Spec, Version, container_id, set, uid};
use crate::support::pinctld::Launch;
use crate::support::world::{Options, World};
use crate::support::{status_doc, status_map};

const PINCTL: &str = env!("CARGO_BIN_EXE_pinctl");
const WAIT: Duration = Duration::from_secs(10);
/// The rule's glob.
const RULE: &str = "hpc.slice/job-*.scope";

/// One test's [`World`] with `hpc.slice` and a rule for its jobs, and what
/// only this suite does: the cast of workloads, the `pinctl` binary, and the
/// kernel's view of a task for `verify`.
struct Env {
    w: World,
}

env_of_world!(Env);

/// The workloads every world has.
struct Cast {
    /// Guaranteed pod 1, container "app", 2 CPUs by the kubelet's rule.
    app: String,
    /// Guaranteed pod 2, container "db", 4 CPUs by its annotation.
    db: String,
    /// `hpc.slice/job-1.scope`, 2 CPUs by the rule.
    job: String,
    /// Guaranteed pod 4 asking for 40 CPUs: pending.
    big: String,
    /// A burstable container: the shared pool.
    web: String,
}

impl Env {
    fn new(version: Version, driver: Driver) -> Env {
        let opts = Options {
            rules: vec![(RULE, 2)],
            ..Options::default()
        };
        let w = World::new("pinctl-socket", version, driver, &opts);
        w.tree.create("hpc.slice", &w.existing());
        Env { w }
    }

    fn container(&self, qos: Qos, n: u32, name: &str, spec: Spec, cpus: Option<&str>) -> String {
        let pod = self.k.pod(qos, &uid(n));
        if !self.tree.exists(&pod) {
            self.tree.create(&pod, &self.existing());
        }
        self.bundle(n, &uid(n), name, cpus);
        let rel = self.k.container(&pod, &container_id(n));
        self.tree.create(&rel, &spec);
        rel
    }

    fn cast(&self) -> Cast {
        let job = "hpc.slice/job-1.scope".to_string();
        self.tree.create(&job, &Spec::default());
        Cast {
            app: self.container(Qos::Guaranteed, 1, "app", Spec::limit(2), None),
            db: self.container(Qos::Guaranteed, 2, "db", Spec::default(), Some("4")),
            job,
            big: self.container(Qos::Guaranteed, 4, "big", Spec::limit(40), None),
            web: self.container(Qos::Burstable, 3, "web", Spec::default(), None),
        }
    }

    /// Starts the daemon with soft and hard limits of `nofile` open files.
    fn start_with_nofile(&mut self, nofile: u64) {
        self.spawn(&Launch {
            nofile: Some(nofile),
            ..Launch::default()
        });
        self.wait_ready();
    }

    /// Ends the daemon with `sig`: a clean stop (SIGTERM) or a crash
    /// (SIGKILL).
    fn end(&mut self, sig: Signal) {
        match sig {
            Signal::SIGKILL => self.crash(),
            Signal::SIGTERM => self.stop(),
            _ => unreachable!("{sig} ends no daemon here"),
        }
    }

    /// The status document, through the CLI's client.
    fn status(&self) -> Result<api::Status, String> {
        self.served()
    }

    /// Waits until the daemon is ready and `check` holds on the status it
    /// serves.
    fn wait_served(&self, what: &str, check: impl Fn(&api::Status) -> bool) -> api::Status {
        let deadline = Instant::now() + WAIT;
        loop {
            let got = self.status();
            if let Ok(s) = &got
                && s.daemon.ready
                && check(s)
            {
                return s.clone();
            }
            if Instant::now() > deadline {
                self.fail(&format!("timed out waiting for {what}: {got:?}"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Runs `pinctl ARGS --config CONFIG`: (exit code, stdout, stderr).
    fn pinctl(&self, args: &[&str]) -> (i32, String, String) {
        let out = Command::new(PINCTL)
            .args(args)
            .arg("--config")
            .arg(&self.config)
            .env("TZ", "UTC")
            .env_remove("NO_COLOR")
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn ok(&self, args: &[&str]) -> String {
        let (code, out, err) = self.pinctl(args);
        if code != 0 {
            self.fail(&format!("pinctl {args:?} exited {code}:\n{out}{err}"));
        }
        out
    }

    /// Makes the tree look like the kernel's for `verify`: v2 effective sets
    /// as the kernel computes them, `pid` in `rel` (its one task) with this
    /// affinity in the fake /proc.
    fn kernel_view(&self, rel: &str, pid: u32, allowed: &str) {
        if self.tree.version() == Version::V2 {
            for cg in self.tree.cgroups() {
                let eff = self.tree.effective(&cg);
                fs::write(
                    self.tree.dir(&cg).join("cpuset.cpus.effective"),
                    format!("{eff}\n"),
                )
                .unwrap();
            }
        }
        let tasks = match self.tree.version() {
            Version::V1 => "tasks",
            Version::V2 => "cgroup.procs",
        };
        fs::write(self.tree.dir(rel).join(tasks), format!("{pid}\n")).unwrap();
        let dir = self.proc_root.join(pid.to_string());
        fs::create_dir_all(&dir).unwrap();
        fs::write(
            dir.join("status"),
            format!("Name:\tapp\nCpus_allowed_list:\t{allowed}\n"),
        )
        .unwrap();
    }

    /// Removes the effective sets [`Env::kernel_view`] wrote (v2).
    fn forget_kernel_view(&self) {
        if self.tree.version() == Version::V2 {
            for cg in self.tree.cgroups() {
                let _ = fs::remove_file(self.tree.dir(&cg).join("cpuset.cpus.effective"));
            }
        }
    }
}

fn workload<'a>(s: &'a api::Status, cgroup: &str) -> Option<&'a api::Workload> {
    s.workloads
        .iter()
        .find(|w| w.cgroups.iter().any(|c| c == cgroup))
}

/// Every command against the real daemon, then without it.
fn every_command(version: Version, driver: Driver, end: Signal) {
    let mut w = Env::new(version, driver);
    let cast = w.cast();
    w.start();
    let status = w.wait_served("app, db and the job pinned, big pending", |s| {
        [&cast.app, &cast.db, &cast.job]
            .iter()
            .all(|c| workload(s, c).is_some_and(|w| w.cpus.is_some()))
            && workload(s, &cast.big).is_some_and(|w| w.pending.is_some())
    });
    let app = workload(&status, &cast.app).unwrap().clone();
    let db = workload(&status, &cast.db).unwrap().clone();
    let app_cpus = app.cpus.clone().unwrap();
    assert_eq!(app.key, format!("pod:{}/app", uid(1)));
    assert_eq!(
        db.source,
        api::Source::Annotation {
            bundle: w
                .tmp
                .path()
                .join("bundles")
                .join(container_id(2))
                .join("config.json"),
            key: "pinctl.io/cpus".into(),
        }
    );

    // --- status ----------------------------------------------------------
    let page = w.ok(&["status"]);
    println!("{page}");
    for want in [
        "Health:      healthy".to_string(),
        format!("Hierarchy:   cgroup {}", status.hierarchy),
        "Topology:    2 sockets, 2 NUMA nodes, 2 L3 groups, 16 cores x 2 threads: 32 CPUs online (0-31)".into(),
        "            isolated CPUs 2-3,18-19".into(),
        "Reserved:    0,16 (2 CPUs)".into(),
        "Socket 0 (NUMA node 0)\n".into(),
        "Socket 1 (NUMA node 1)\n".into(),
        format!("{}  (kubelet)\n    wants 40, ", workload(&status, &cast.big).unwrap().key),
    ] {
        assert!(page.contains(&want), "missing {want:?} in:\n{page}");
    }
    // The map as the document says (the snapshot may have moved on only
    // if something changed, and nothing does here).
    status_map::check_map(&status, &page);
    let json = w.ok(&["status", "--json"]);
    let served: api::Status = serde_json::from_str(&json).unwrap();
    assert_eq!(served.workloads, status.workloads);
    assert_eq!(served.schema, api::SCHEMA);

    // --- describe ---------------------------------------------------------
    let abs = w.tree.dir(&cast.app);
    for target in [
        app.key.clone(),
        cast.app.clone(),
        abs.display().to_string(),
        uid(1),
        container_id(1)[..12].to_string(),
    ] {
        let page = w.ok(&["describe", &target]);
        assert!(
            page.starts_with(&format!("Workload:   {}\n", app.key)),
            "{target}: {page}"
        );
        assert!(page.contains("Source:     the kubelet's rule"), "{page}");
        assert!(
            page.contains(&format!("CPUs:       {app_cpus}\n")),
            "{page}"
        );
        assert!(page.contains("; 1 whole core\n"), "{page}");
        assert!(
            page.contains(&format!("write {} cpuset.cpus ", cast.app))
                && page.contains(&format!("-> {app_cpus}  exclusive CPUs of {}", app.key)),
            "the history has the pinning write:\n{page}"
        );
    }
    let page = w.ok(&["describe", &container_id(2)]);
    println!("{page}");
    assert!(
        page.contains(&format!(
            "the OCI annotation pinctl.io/cpus in {}",
            w.tmp
                .path()
                .join("bundles")
                .join(container_id(2))
                .join("config.json")
                .display()
        )),
        "{page}"
    );
    let page = w.ok(&["describe", "job-1"]);
    let line = w.config_line("[[rule]]");
    assert!(
        page.contains(&format!(
            "Source:     the [[rule]] matching {RULE:?} (line {line} of the configuration)"
        )),
        "{page}"
    );
    let page = w.ok(&["describe", &cast.big]);
    assert!(
        page.contains("none yet, pending in the shared pool"),
        "{page}"
    );
    let (code, _, err) = w.pinctl(&["describe", &cast.web]);
    assert_eq!(code, 1);
    assert!(err.contains("no workload matches"), "{err}");

    // --- verify -------------------------------------------------------------
    let pr = w.proc_root.to_str().unwrap().to_string();
    w.kernel_view(&cast.app, 4242, &app_cpus.to_string());
    let (code, out, err) = w.pinctl(&["verify", "--proc-root", &pr]);
    if code != 0 {
        w.fail(&format!(
            "verify of a clean tree exited {code}:\n{out}{err}"
        ));
    }
    println!("{out}");
    assert!(out.contains("OK: the kernel matches the intent"), "{out}");
    // The fixture isolates 2-3,18-19: a warning only if some of them are
    // in the shared pool.
    let isolated_shared = !set("2-3,18-19").is_disjoint(&status.shared_pool);
    assert_eq!(
        out.contains("warning: isolated CPUs"),
        isolated_shared,
        "{out}"
    );
    // A task that escaped its CPUs (nothing the daemon writes).
    w.kernel_view(&cast.app, 4242, ONLINE);
    let (code, out, err) = w.pinctl(&["verify", "--proc-root", &pr]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains(&format!(
            "problem: {}: task 4242 (app) in {} may run on CPUs 0-31",
            app.key, cast.app
        )),
        "{out}"
    );
    assert_eq!(err, "pinctl: verify found 1 problem\n");
    w.kernel_view(&cast.app, 4242, &app_cpus.to_string());
    // The daemon reads effective sets back after its writes: gone stale
    // when the next workload shrinks the shared pool, they would be
    // reported as failed verifications. Back to a tree without them.
    w.forget_kernel_view();

    // --- events -----------------------------------------------------------------
    let events = w.ok(&["events"]);
    println!("{events}");
    let first_seq: u64 = events.lines().next().unwrap()[1..]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(events.lines().all(|l| l.starts_with('#')), "{events}");
    assert!(
        events.contains(&format!("write {} cpuset.cpus ", cast.app)),
        "{events}"
    );
    let (code, later, _) = w.pinctl(&["events", "--since", &first_seq.to_string()]);
    assert_eq!(code, 0);
    assert_eq!(later.lines().count(), events.lines().count() - 1);
    let json = w.ok(&["events", "--json"]);
    let parsed: Vec<api::Event> = json
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(parsed.len(), events.lines().count());

    // --follow sees a new workload's writes as they happen.
    let mut follow = Command::new(PINCTL)
        .args([
            "events",
            "--follow",
            "--since",
            &parsed.last().unwrap().seq.to_string(),
            "--config",
        ])
        .arg(&w.config)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let reader = {
        let lines = lines.clone();
        let out = follow.stdout.take().unwrap();
        std::thread::spawn(move || {
            for l in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                lines.lock().unwrap().push(l);
            }
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let late = w.container(Qos::Guaranteed, 5, "late", Spec::limit(2), None);
    let deadline = Instant::now() + WAIT;
    while !lines.lock().unwrap().iter().any(|l| l.contains(&late)) {
        if Instant::now() > deadline {
            w.fail(&format!(
                "--follow printed no write of {late}: {:?}",
                lines.lock().unwrap()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    kill(Pid::from_raw(follow.id() as i32), Signal::SIGINT).unwrap();
    assert!(follow.wait().unwrap().success());
    reader.join().unwrap();

    // --- every endpoint through the CLI's client ------------------------------
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = Client::new(&w.socket);
    let workloads: Vec<api::Workload> = rt.block_on(client.get_json("/v1/workloads")).unwrap();
    assert!(workloads.iter().any(|x| x.key == app.key));
    let topo: pinctl::topology::TopologyFile =
        rt.block_on(client.get_json("/v1/topology")).unwrap();
    assert_eq!(topo.cpus.len(), 32);
    let health = rt.block_on(client.health()).unwrap();
    assert_eq!(health.state, "healthy", "{health:?}");
    let metrics = rt.block_on(client.get("/metrics")).unwrap();
    assert_eq!(metrics.status, 200);
    let text = String::from_utf8(metrics.body.to_vec()).unwrap();
    assert!(
        text.ends_with("# EOF\n"),
        "OpenMetrics ends with # EOF:\n{text}"
    );
    assert!(text.contains("pinctl_workload_exclusive_cpus{"), "{text}");

    // --- the socket is not for everyone -------------------------------------------
    fs::set_permissions(w.tmp.path(), fs::Permissions::from_mode(0o755)).unwrap();
    if nix::unistd::Uid::effective().is_root() {
        let out = Command::new(PINCTL)
            .args(["status", "--socket"])
            .arg(&w.socket)
            .uid(65534)
            .gid(65534)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("permission denied") && err.contains("group pinctl"),
            "another user reaches the socket: {err}"
        );
    }

    // --- without the daemon -----------------------------------------------------------
    // The shared pool follows the late pin once the tree is quiet; a crash
    // before that would leave system.slice wide, which verify (below)
    // rightly reports. Seen under a loaded machine.
    w.wait_for("system.slice narrowed off the late pin", || {
        let (shared, pin) = (w.tree.effective("system.slice"), w.tree.effective(&late));
        if shared.is_disjoint(&pin) {
            Ok(())
        } else {
            Err(format!("system.slice has {shared}, the late pin {pin}"))
        }
    });
    w.end(end);
    let state_before = fs::read(&w.state).unwrap();
    let sock = w.socket.display().to_string();
    let (code, out, err) = w.pinctl(&["status"]);
    assert_eq!(code, 1);
    assert!(out.is_empty());
    let why = if end == Signal::SIGKILL {
        assert!(w.socket.exists(), "a crash leaves the socket behind");
        format!("pinctld is not running (nothing listens on {sock}")
    } else {
        assert!(!w.socket.exists(), "a clean stop removes the socket");
        format!("pinctld is not running (no socket at {sock})")
    };
    assert!(err.starts_with(&format!("pinctl: {why}")), "{err}");
    assert!(
        err.contains("; run with --offline to read the state file and the cgroup tree directly"),
        "{err}"
    );
    let page = w.ok(&["status", "--offline"]);
    println!("{page}");
    assert!(page.starts_with("OFFLINE: "), "{page}");
    for (cg, cpus) in [
        (&cast.app, &app_cpus),
        (&cast.db, db.cpus.as_ref().unwrap()),
    ] {
        let key = &workload(&status, cg).unwrap().key;
        assert!(
            page.lines()
                .any(|l| l.contains(&cpus.to_string()) && l.ends_with(key.as_str())),
            "{key} on {cpus} offline:\n{page}"
        );
    }
    assert!(page.contains("Source") || page.contains("SOURCE"), "{page}");
    let offline: api::Status =
        serde_json::from_str(&w.ok(&["status", "--offline", "--json"])).unwrap();
    assert_eq!(offline.health.state, "unknown");
    for x in &status.workloads {
        let y = offline.workloads.iter().find(|y| y.key == x.key);
        let Some(y) = y else {
            // The late container came after the snapshot.
            continue;
        };
        assert_eq!(y.cpus, x.cpus, "{}", x.key);
        assert_eq!(y.source, x.source, "{}", x.key);
        assert_eq!(y.cgroups, x.cgroups, "{}", x.key);
    }
    w.kernel_view(&cast.app, 4242, &app_cpus.to_string());
    let (code, out, err) = w.pinctl(&["verify", "--offline", "--proc-root", &pr]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("OK: the kernel matches the intent"), "{out}");
    assert_eq!(
        fs::read(&w.state).unwrap(),
        state_before,
        "offline reads never change the state file"
    );
}

#[test]
fn every_command_over_the_socket_v2_systemd_then_a_crash() {
    every_command(Version::V2, Driver::Systemd, Signal::SIGKILL);
}

#[test]
fn every_command_over_the_socket_v1_cgroupfs_then_a_clean_stop() {
    every_command(Version::V1, Driver::Cgroupfs, Signal::SIGTERM);
}

/// `metrics_listen`: the metrics on a TCP port for Prometheus, and nothing
/// else there (the status documents stay behind the socket's mode).
#[test]
fn metrics_listen_serves_the_metrics_alone_over_tcp() {
    // A free port, released for the daemon (another process taking it in
    // between fails the daemon's start, loudly).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let opts = Options {
        keys: vec![format!("metrics_listen = \"127.0.0.1:{port}\"")],
        ..Options::default()
    };
    let mut w = World::new("pinctl-metrics", Version::V2, Driver::Systemd, &opts);
    w.start();
    let get = |path: &str| {
        use std::io::{Read as _, Write as _};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: pinctl\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        text
    };
    let metrics = get("/metrics");
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    assert!(metrics.contains("pinctl_health{state="), "{metrics}");
    let status = get("/v1/status");
    assert!(status.starts_with("HTTP/1.1 404"), "{status}");
    w.stop();
}

/// `events --follow` waits for a daemon that went away and follows the new
/// one from its first event (its numbers start again at 1).
#[test]
fn events_follow_survives_a_daemon_restart() {
    let mut w = Env::new(Version::V2, Driver::Systemd);
    let cast = w.cast();
    w.start();
    w.wait_served("app pinned", |s| {
        workload(s, &cast.app).is_some_and(|x| x.cpus.is_some())
    });
    let mut follow = Command::new(PINCTL)
        .args(["events", "--follow", "--config"])
        .arg(&w.config)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let readers: Vec<_> = [
        Box::new(follow.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
        Box::new(follow.stderr.take().unwrap()),
    ]
    .into_iter()
    .map(|r| {
        let lines = lines.clone();
        std::thread::spawn(move || {
            for l in std::io::BufReader::new(r).lines().map_while(Result::ok) {
                lines.lock().unwrap().push(l);
            }
        })
    })
    .collect();
    let wait_line = |w: &Env, what: &str, f: &dyn Fn(&str) -> bool| {
        let deadline = Instant::now() + WAIT;
        while !lines.lock().unwrap().iter().any(|l| f(l)) {
            if Instant::now() > deadline {
                w.fail(&format!(
                    "--follow never printed {what}: {:?}",
                    lines.lock().unwrap()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    wait_line(&w, "the first pinning", &|l| l.contains(&cast.app));
    w.end(Signal::SIGTERM);
    wait_line(&w, "that the daemon went away", &|l| {
        l.contains("pinctld is not running")
    });
    w.start();
    w.wait_served("the restarted daemon ready", |_| true);
    let late = w.container(Qos::Guaranteed, 5, "late", Spec::limit(2), None);
    wait_line(&w, "the restart", &|l| l.contains("pinctld restarted"));
    wait_line(&w, "the new daemon's write", &|l| l.contains(&late));
    kill(Pid::from_raw(follow.id() as i32), Signal::SIGINT).unwrap();
    assert!(follow.wait().unwrap().success());
    for r in readers {
        r.join().unwrap();
    }
}

/// Idle connections once took every descriptor the daemon had: each cgroup
/// write then failed with EMFILE, and a new Guaranteed container was never
/// pinned. Under a low open-files limit, far more idle connections than the
/// cap: those beyond it are closed at once, the daemon's descriptors stay
/// bounded, a new container is pinned meanwhile, the idle ones are closed
/// after the header timeout, and then the socket answers again.
#[test]
fn idle_connections_beyond_the_cap_leave_the_daemon_descriptors_to_pin_new_workloads() {
    use tokio::io::AsyncReadExt as _;
    const NOFILE: u64 = 256;
    const IDLE: usize = 300;
    let cap = pinctl::server::connection_cap(NOFILE);
    let mut w = Env::new(Version::V2, Driver::Systemd);
    let cast = w.cast();
    w.start_with_nofile(NOFILE);
    w.wait_served("app pinned", |s| {
        workload(s, &cast.app).is_some_and(|x| x.cpus.is_some())
    });
    let pid = w.d().pid();
    let fds = || fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count();
    let before = fds();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (late, connected) = rt.block_on(async {
        let mut held = Vec::new();
        for _ in 0..IDLE {
            // A full backlog fails the connect rather than blocking it.
            let connect = tokio::net::UnixStream::connect(&w.socket);
            if let Ok(Ok(s)) = tokio::time::timeout(Duration::from_millis(100), connect).await {
                held.push(s);
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let open = held
            .iter()
            .filter(|s| {
                matches!(s.try_read(&mut [0u8; 1]), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
            })
            .count();
        assert!(
            open <= cap,
            "{open} of {} connections still open; the cap is {cap}",
            held.len()
        );
        let during = fds();
        assert!(
            during <= before + cap + 8,
            "the daemon holds {during} descriptors, {before} before {IDLE} connections; the cap is {cap}"
        );
        // The daemon's own work goes on.
        let late = w.container(Qos::Guaranteed, 5, "late", Spec::limit(2), None);
        let deadline = Instant::now() + WAIT;
        while w.tree.effective(&late).len() != 2 {
            if Instant::now() > deadline {
                w.fail(&format!("{late} was not pinned while the socket was full"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // The idle ones end after the header timeout.
        let deadline = pinctl::server::HEADER_TIMEOUT + WAIT;
        for s in &mut held {
            let read = tokio::time::timeout(deadline, s.read(&mut [0u8; 1])).await;
            assert!(
                matches!(read, Ok(Ok(0) | Err(_))),
                "an idle connection still open after {deadline:?}: {read:?}"
            );
        }
        (late, held.len())
    });
    w.wait_served("the late container in the status", |s| {
        workload(s, &late).is_some_and(|x| x.cpus.is_some())
    });
    let metrics = rt.block_on(Client::new(&w.socket).get("/metrics")).unwrap();
    let text = String::from_utf8(metrics.body.to_vec()).unwrap();
    let value = |name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
            .parse()
            .unwrap()
    };
    let refused = value("pinctl_socket_connections_refused_total");
    assert!(
        refused >= connected.saturating_sub(cap) as f64,
        "{refused} of {connected} refused, the cap is {cap}"
    );
    // The scrape itself, and perhaps a status request still closing.
    let open = value("pinctl_socket_connections");
    assert!((1.0..=2.0).contains(&open), "{open} connections open");
}

/// The socket's server in this process, over a synthetic status, with
/// short limits.
struct Served {
    rt: tokio::runtime::Runtime,
    socket: PathBuf,
    metrics: Arc<pinctl::metrics::Metrics>,
    _dir: tempfile::TempDir,
}

impl Served {
    fn new(limits: pinctl::server::Limits) -> Served {
        use pinctl::io::{IoConfig, IoPool, RealFs};
        use pinctl::metrics::Metrics;
        use pinctl::server::{Events, Snapshot};
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("pinctl.sock");
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let metrics = Arc::new(Metrics::new());
        let status =
            status_doc::status(status_doc::SHAPE_16, "0,8", &[status_doc::pod(1, "app", 2)]);
        let snapshot = tokio::sync::watch::Sender::new(Arc::new(Snapshot {
            status,
            facts: pinctl::watchdog::Facts {
                io_threads: 2,
                ..Default::default()
            },
        }));
        let _guard = rt.enter();
        let listener = pinctl::server::bind(&socket).unwrap();
        pinctl::server::serve_with(
            listener,
            snapshot.subscribe(),
            Arc::new(Events::default()),
            metrics.clone(),
            IoPool::new(Arc::new(RealFs), IoConfig::default()),
            limits,
        );
        // The receiver keeps the last snapshot when the sender goes.
        drop(snapshot);
        Served {
            rt,
            socket,
            metrics,
            _dir: dir,
        }
    }

    fn connect(&self) -> std::os::unix::net::UnixStream {
        let s = std::os::unix::net::UnixStream::connect(&self.socket).unwrap();
        s.set_read_timeout(Some(WAIT)).unwrap();
        s
    }

    fn status(&self) -> Result<api::Status, String> {
        self.rt
            .block_on(Client::new(&self.socket).status())
            .map_err(|e| e.to_string())
    }

    /// Waits for the open connections gauge to read `n`.
    fn wait_open(&self, n: i64) {
        let deadline = Instant::now() + WAIT;
        while self.metrics.socket_connections.get() != n {
            assert!(
                Instant::now() < deadline,
                "{} connections open, not {n}",
                self.metrics.socket_connections.get()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Reads until the server closes the connection; how long that took.
fn time_to_close(s: &mut std::os::unix::net::UnixStream) -> Duration {
    use std::io::Read as _;
    let start = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return start.elapsed(),
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return start.elapsed(),
            Err(e) => panic!("the connection was not closed within {WAIT:?}: {e}"),
        }
    }
}

fn limits(max: usize, header_ms: u64, connection_ms: u64) -> pinctl::server::Limits {
    pinctl::server::Limits {
        max_connections: max,
        header_timeout: Duration::from_millis(header_ms),
        connection_timeout: Duration::from_millis(connection_ms),
    }
}

/// A client that sends half a request header and stalls, one that connects
/// and says nothing, and one that keeps an answered connection open idle
/// each held a descriptor for ever. All are closed after the header timeout.
#[test]
fn stalled_silent_and_idle_connections_are_closed_after_the_header_timeout() {
    use std::io::{Read as _, Write as _};
    let served = Served::new(limits(8, 300, 30_000));
    let mut half = served.connect();
    half.write_all(b"GET /v1/status HTTP/1.1\r\nHost: pinctld\r\nAcc")
        .unwrap();
    let mut silent = served.connect();
    let mut idle = served.connect();
    idle.write_all(b"GET /v1/health HTTP/1.1\r\nHost: pinctld\r\n\r\n")
        .unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&answer).contains("\"reasons\"") {
        let n = idle.read(&mut buf).unwrap();
        assert!(n > 0, "closed before the answer");
        answer.extend_from_slice(&buf[..n]);
    }
    assert!(answer.starts_with(b"HTTP/1.1 200 OK"), "{answer:?}");
    served.wait_open(3);
    for (what, s) in [
        ("half a header", &mut half),
        ("nothing", &mut silent),
        ("idle", &mut idle),
    ] {
        let took = time_to_close(s);
        assert!(
            took < Duration::from_secs(3),
            "{what}: closed after {took:?}, the header timeout is 300 ms"
        );
    }
    served.wait_open(0);
    assert!(served.status().is_ok(), "a fresh request is answered");
}

/// No connection outlives its time, whatever the header timeout allows.
#[test]
fn a_connection_is_closed_when_it_outlives_its_time() {
    let served = Served::new(limits(8, 30_000, 300));
    let mut s = served.connect();
    let took = time_to_close(&mut s);
    assert!(took < Duration::from_secs(3), "closed after {took:?}");
}

/// Beyond the cap a connection is closed at once, not left to hold a
/// descriptor, and counted; once a place is free the socket answers again.
#[test]
fn connections_beyond_the_cap_are_closed_at_once_and_counted() {
    let served = Served::new(limits(3, 30_000, 30_000));
    let held: Vec<_> = (0..3).map(|_| served.connect()).collect();
    served.wait_open(3);
    let mut extra = served.connect();
    let took = time_to_close(&mut extra);
    assert!(took < Duration::from_secs(1), "refused after {took:?}");
    assert!(served.status().is_err(), "no place for a request");
    assert_eq!(served.metrics.socket_connections_refused.get(), 2);
    assert_eq!(served.metrics.socket_connections.get(), 3);
    drop(held);
    served.wait_open(0);
    let status = served.status().expect("answered once places are free");
    assert_eq!(status.workloads.len(), 1);
}
