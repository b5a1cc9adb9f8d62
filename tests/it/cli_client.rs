//! The `pinctl` binary against a fake daemon: a tiny axum server on a Unix
//! socket in a tempdir serving canned `api` documents. Covers what the CLI
//! makes of answers, errors and missing daemons (not running, a stale socket,
//! permission denied, HTTP errors, another schema, a timeout), and
//! `status`, `describe`, `verify` and `events` end to end through the
//! socket. The real daemon's socket is the `socket` module.

use crate::support::status_doc;

use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use pinctl::api;
use pinctl::client::{Client, ClientError};
use status_doc::{SHAPE_16, job, pod, set};

const PINCTL: &str = env!("CARGO_BIN_EXE_pinctl");

/// What the fake daemon serves; events can be added while it runs.
#[derive(Clone)]
struct Canned {
    status: Arc<Mutex<serde_json::Value>>,
    events: Arc<Mutex<Vec<api::Event>>>,
}

/// A fake daemon on `socket` in its own thread and runtime.
struct Fake {
    dir: tempfile::TempDir,
    socket: PathBuf,
    canned: Canned,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Fake {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[derive(serde::Deserialize)]
struct Since {
    since: Option<u64>,
}

async fn status(State(c): State<Canned>) -> impl IntoResponse {
    axum::Json(c.status.lock().unwrap().clone())
}

async fn events(State(c): State<Canned>, Query(q): Query<Since>) -> impl IntoResponse {
    let since = q.since.unwrap_or(0);
    let events: Vec<api::Event> = c
        .events
        .lock()
        .unwrap()
        .iter()
        .filter(|e| e.seq > since)
        .cloned()
        .collect();
    axum::Json(events)
}

async fn broken() -> impl IntoResponse {
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        "the snapshot is poisoned",
    )
}

async fn slow() -> impl IntoResponse {
    tokio::time::sleep(Duration::from_secs(5)).await;
    "late"
}

/// Serves `doc` and `evs` on a socket in a fresh tempdir.
fn serve(doc: &api::Status, evs: Vec<api::Event>) -> Fake {
    serve_value(serde_json::to_value(doc).unwrap(), evs)
}

fn serve_value(doc: serde_json::Value, evs: Vec<api::Event>) -> Fake {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("pinctl.sock");
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    listener.set_nonblocking(true).unwrap();
    let canned = Canned {
        status: Arc::new(Mutex::new(doc)),
        events: Arc::new(Mutex::new(evs)),
    };
    let app = Router::new()
        .route("/v1/status", get(status))
        .route("/v1/events", get(events))
        .route("/v1/broken", get(broken))
        .route("/v1/slow", get(slow))
        .with_state(canned.clone());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::UnixListener::from_std(listener).unwrap();
            axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = rx.await;
                })
                .await
                .unwrap();
        });
    });
    Fake {
        dir,
        socket,
        canned,
        stop: Some(tx),
        thread: Some(thread),
    }
}

fn pinctl(args: &[&str]) -> Output {
    Command::new(PINCTL)
        .args(args)
        .env_remove("NO_COLOR")
        .env("TZ", "UTC")
        .output()
        .expect("run pinctl")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs pinctl with `--socket` of `fake`; returns (exit code, stdout, stderr).
fn run(fake: &Fake, args: &[&str]) -> (i32, String, String) {
    let s = fake.socket.to_str().unwrap().to_string();
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--socket", &s]);
    let out = pinctl(&all);
    (
        out.status.code().unwrap_or(-1),
        text(&out.stdout),
        text(&out.stderr),
    )
}

fn doc() -> api::Status {
    status_doc::status(
        SHAPE_16,
        "0,8",
        &[pod(1, "app", 4), job(2, 2), pod(3, "db", 12)],
    )
}

fn write_event(seq: u64, cgroup: &str, new: &str, reason: &str) -> api::Event {
    api::Event {
        seq,
        at_ms: 1_763_769_599_000 + seq,
        what: api::EventKind::Write {
            cgroup: cgroup.into(),
            file: "cpuset.cpus".into(),
            old: Some(set("0-15")),
            new: set(new),
            reason: reason.into(),
            error: None,
            workload: None,
        },
    }
}

/// `status --ready`, the DaemonSet's readiness probe: exit 0 once the first
/// reconcile is done, 1 before (the socket answers from the start).
#[test]
fn status_ready_says_whether_the_first_reconcile_is_done() {
    let mut doc = doc();
    doc.daemon.ready = true;
    let (code, out, err) = run(&serve(&doc, vec![]), &["status", "--ready"]);
    assert_eq!(
        (code, out.as_str()),
        (0, "pinctld 0.1.0 (pid 4242) is ready\n"),
        "{err}"
    );
    doc.daemon.ready = false;
    let (code, out, err) = run(&serve(&doc, vec![]), &["status", "--ready"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        err.contains("pinctld 0.1.0 (pid 4242) is starting: its first reconcile is not done"),
        "{err}"
    );
    let (code, _, err) = run(&serve(&doc, vec![]), &["status", "--ready", "--json"]);
    assert_eq!(code, 2, "--ready with --json is a usage error: {err}");
}

#[test]
fn status_over_the_socket_prints_the_page_and_the_document() {
    let doc = doc();
    let fake = serve(&doc, vec![]);
    let (code, out, err) = run(&fake, &["status"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("pinctld 0.1.0, pid 4242, up "), "{out}");
    assert!(out.contains("CPU map:"), "{out}");
    assert!(out.contains("Pending (in the shared pool):"), "{out}");
    assert!(!out.contains('\x1b'), "no colour into a pipe");
    let (code, out, _) = run(&fake, &["status", "--color", "always"]);
    assert_eq!(code, 0);
    assert!(out.contains("\x1b["), "--color always colours a pipe");
    // --json is the document as served.
    let (code, out, _) = run(&fake, &["status", "--json"]);
    assert_eq!(code, 0);
    let got: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(got, serde_json::to_value(&doc).unwrap());
    assert_eq!(got["schema"], api::SCHEMA);
}

#[test]
fn no_colour_with_no_color_set() {
    let fake = serve(&doc(), vec![]);
    let out = Command::new(PINCTL)
        .args(["status", "--socket", fake.socket.to_str().unwrap()])
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(!text(&out.stdout).contains('\x1b'));
}

#[test]
fn a_missing_daemon_is_named_and_status_and_verify_offer_offline() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("pinctl.sock");
    let s = socket.to_str().unwrap();
    for cmd in ["status", "verify"] {
        let out = pinctl(&[cmd, "--socket", s, "--config", "/nonexistent/pinctld.toml"]);
        let err = text(&out.stderr);
        // verify reads its configuration first: an explicit missing one is
        // an error of its own.
        if cmd == "verify" {
            assert_eq!(out.status.code(), Some(1));
            assert!(err.contains("/nonexistent/pinctld.toml"), "{err}");
            continue;
        }
        assert_eq!(out.status.code(), Some(1), "{cmd}: {err}");
        assert_eq!(
            err,
            format!(
                "pinctl: pinctld is not running (no socket at {s}); run with --offline to read the state file and the cgroup tree directly\n"
            )
        );
        assert!(out.stdout.is_empty());
    }
    let out = pinctl(&["verify", "--socket", s]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains(&format!(
            "pinctld is not running (no socket at {s}); run with --offline"
        )),
        "{}",
        text(&out.stderr)
    );
    for args in [vec!["events"], vec!["describe", "x"]] {
        let mut a = args.clone();
        a.extend(["--socket", s]);
        let out = pinctl(&a);
        assert_eq!(out.status.code(), Some(1));
        assert_eq!(
            text(&out.stderr),
            format!("pinctl: pinctld is not running (no socket at {s})\n"),
            "{args:?}"
        );
    }
}

#[test]
fn a_stale_socket_from_a_crash_is_not_a_running_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("pinctl.sock");
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
    assert!(socket.exists(), "the file stays behind");
    let out = pinctl(&["status", "--socket", socket.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.starts_with(&format!(
            "pinctl: pinctld is not running (nothing listens on {}",
            socket.display()
        )) && err.contains("run with --offline"),
        "{err}"
    );
}

#[test]
fn a_socket_for_others_says_permission_denied_and_names_the_group() {
    let fake = serve(&doc(), vec![]);
    std::fs::set_permissions(fake.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // Root passes any mode: run as nobody then. Anyone else is denied by a
    // socket with no permission bits at all.
    let mode = if nix::unistd::Uid::effective().is_root() {
        0o660
    } else {
        0o000
    };
    std::fs::set_permissions(&fake.socket, std::fs::Permissions::from_mode(mode)).unwrap();
    let mut cmd = Command::new(PINCTL);
    cmd.args(["status", "--socket", fake.socket.to_str().unwrap()]);
    if nix::unistd::Uid::effective().is_root() {
        cmd.uid(65534).gid(65534);
    }
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        format!(
            "pinctl: permission denied on {}: only root and members of the group pinctl may use the socket\n",
            fake.socket.display()
        )
    );
}

#[test]
fn http_errors_schema_mismatches_and_timeouts_are_explained() {
    let fake = serve(&doc(), vec![]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = Client::new(&fake.socket);
    let err = rt
        .block_on(client.get_json::<api::Health>("/v1/broken"))
        .unwrap_err();
    assert!(matches!(err, ClientError::Http { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "GET /v1/broken: pinctld answered 500 Internal Server Error: the snapshot is poisoned"
    );
    let err = rt
        .block_on(client.get_json::<api::Health>("/v1/nothing-here"))
        .unwrap_err();
    assert!(err.to_string().contains("404 Not Found"), "{err}");
    let quick = client.clone().with_timeout(Duration::from_millis(200));
    let started = Instant::now();
    let err = rt.block_on(quick.get("/v1/slow")).unwrap_err();
    assert!(matches!(err, ClientError::Timeout { .. }), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(
        err.to_string()
            .starts_with("pinctld did not answer GET /v1/slow within 0.2 s"),
        "{err}"
    );
    // Another schema is named as such, not as a parse error.
    let mut other = serde_json::to_value(doc()).unwrap();
    other["schema"] = 99.into();
    other["renamed"] = other["workloads"].take();
    let fake = serve_value(other, vec![]);
    let (code, _, err) = run(&fake, &["status"]);
    assert_eq!(code, 1);
    assert!(
        err.contains(&format!(
            "pinctld serves schema 99, this pinctl reads schema {}",
            api::SCHEMA
        )),
        "{err}"
    );
    // Garbage is a decode error that says where it came from.
    let fake = serve_value(serde_json::json!({"schema": api::SCHEMA}), vec![]);
    let (code, _, err) = run(&fake, &["status"]);
    assert_eq!(code, 1);
    assert!(
        err.starts_with("pinctl: GET /v1/status: invalid answer from pinctld: missing field"),
        "{err}"
    );
}

#[test]
fn describe_over_the_socket_finds_explains_or_lists_candidates() {
    let doc = doc();
    let app = &doc.workloads[0];
    let evs = vec![
        write_event(1, "system.slice", "0,13-15", "shared pool"),
        write_event(
            2,
            &app.cgroups[0],
            &app.cpus.as_ref().unwrap().to_string(),
            "exclusive CPUs of x (kubelet)",
        ),
    ];
    let fake = serve(&doc, evs);
    let (code, out, err) = run(&fake, &["describe", &status_doc::container_id(1)[..10]]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with(&format!("Workload:   {}\n", app.key)),
        "{out}"
    );
    assert!(out.contains("Source:     the kubelet's rule"), "{out}");
    assert!(
        out.contains("History (1 write in the daemon's recent events):"),
        "{out}"
    );
    assert!(out.contains("#2 2025-11-21 23:59:59.002  write "), "{out}");
    // Ambiguous: every container id here contains "c0ffee".
    let (code, out, err) = run(&fake, &["describe", "c0ffee"]);
    assert_eq!(code, 1);
    assert!(out.is_empty());
    assert!(
        err.starts_with("\"c0ffee\" matches 2 workloads; name one of them:\n"),
        "{err}"
    );
    assert!(err.ends_with("pinctl: \"c0ffee\" is ambiguous\n"), "{err}");
    let (code, _, err) = run(&fake, &["describe", "system.slice"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("no workload matches \"system.slice\"; cgroups that ask for no exclusive CPUs run on the shared pool"),
        "{err}"
    );
}

#[test]
fn events_print_one_line_each_since_and_as_json() {
    let evs = vec![
        write_event(1, "a", "1", "shared pool"),
        write_event(2, "b", "2-3", "exclusive CPUs of y (rule)"),
    ];
    let fake = serve(&doc(), evs.clone());
    let (code, out, _) = run(&fake, &["events"]);
    assert_eq!(code, 0);
    assert_eq!(
        out,
        "#1 2025-11-21 23:59:59.001  write a cpuset.cpus 0-15 -> 1  shared pool\n\
         #2 2025-11-21 23:59:59.002  write b cpuset.cpus 0-15 -> 2-3  exclusive CPUs of y (rule)\n"
    );
    let (_, out, _) = run(&fake, &["events", "--since", "1"]);
    assert!(out.starts_with("#2 "), "{out}");
    assert_eq!(out.lines().count(), 1);
    let (_, out, _) = run(&fake, &["events", "--json"]);
    let parsed: Vec<api::Event> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(parsed, evs);
}

#[test]
fn a_reader_that_stops_reading_is_not_an_error() {
    // More than a pipe buffer of events, so pinctl is still writing when
    // head exits.
    let evs: Vec<api::Event> = (1..=5000)
        .map(|n| write_event(n, "kubepods/burstable/pod1/abc", "1-3", "shared pool"))
        .collect();
    let fake = serve(&doc(), evs);
    let script = format!(
        "set -o pipefail; {PINCTL} events --socket {} | head -n 1 >/dev/null",
        fake.socket.display()
    );
    let out = Command::new("bash").args(["-c", &script]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr), "", "nothing to say about a closed pipe");
}

#[test]
fn events_follow_prints_new_events_until_interrupted() {
    let fake = serve(&doc(), vec![write_event(1, "a", "1", "first")]);
    let mut child = Command::new(PINCTL)
        .args([
            "events",
            "--follow",
            "--socket",
            fake.socket.to_str().unwrap(),
        ])
        .env("TZ", "UTC")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let reader = {
        let lines = lines.clone();
        std::thread::spawn(move || {
            use std::io::BufRead as _;
            for l in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                lines.lock().unwrap().push(l);
            }
        })
    };
    let wait_for = |n: usize| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while lines.lock().unwrap().len() < n {
            assert!(Instant::now() < deadline, "{:?}", lines.lock().unwrap());
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    wait_for(1);
    fake.canned.events.lock().unwrap().extend([
        write_event(2, "b", "2", "second"),
        write_event(3, "c", "3", "third"),
    ]);
    wait_for(3);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let status = child.wait().unwrap();
    reader.join().unwrap();
    assert!(status.success(), "Ctrl-C ends --follow cleanly: {status}");
    let lines = lines.lock().unwrap().clone();
    assert_eq!(lines.len(), 3, "each event once: {lines:?}");
    assert!(
        lines[1].ends_with("second") && lines[2].ends_with("third"),
        "{lines:?}"
    );
}

/// `verify` over the socket against a fake tree (the tree of
/// the `cli_status` module, built here the same way).
#[test]
fn verify_over_the_socket_exits_1_on_problems_and_0_when_clean() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("cgroup");
    let base = root.join("cpuset");
    let proc_root = dir.path().join("proc");
    let w = |rel: &str, file: &str, text: &str| {
        let d = base.join(rel);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(file), text).unwrap();
    };
    w("", "cpuset.cpus", "0-15\n");
    w("kubepods", "cpuset.effective_cpus", "0-15\n");
    w("system.slice", "cpuset.effective_cpus", "0,5-8,13-15\n");
    let mut doc = status_doc::status(SHAPE_16, "0,8", &[]);
    doc.hierarchy = "v1".into();
    doc.workloads = vec![api::Workload {
        key: "cgroup:hpc.slice/job-1.scope".into(),
        requested: 4,
        source: api::Source::Xattr,
        numa: vec![],
        cgroups: vec!["hpc.slice/job-1.scope".into()],
        cpus: Some(set("1-2,9-10")),
        pending: None,
        alignment: None,
        resize: None,
        near: None,
    }];
    w("hpc.slice", "cpuset.effective_cpus", "0-15\n");
    w(
        "hpc.slice/job-1.scope",
        "cpuset.effective_cpus",
        "1-2,9-10\n",
    );
    w("hpc.slice/job-1.scope", "tasks", "");
    let config = dir.path().join("pinctld.toml");
    std::fs::write(
        &config,
        format!(
            "cgroup_root = {:?}\nproc_root = {:?}\nsysfs_root = {:?}\n",
            root.display().to_string(),
            proc_root.display().to_string(),
            dir.path().join("sys").display().to_string()
        ),
    )
    .unwrap();
    let fake = serve(&doc, vec![]);
    let c = config.to_str().unwrap();
    let (code, out, err) = run(&fake, &["verify", "--config", c]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("OK: the kernel matches the intent"), "{out}");
    // A service slips onto the job's CPUs: exit 1, the problem on stdout,
    // the count on stderr.
    w("system.slice", "cpuset.effective_cpus", "0-15\n");
    let (code, out, err) = run(&fake, &["verify", "--config", c]);
    assert_eq!(code, 1);
    assert!(
        out.contains("problem: system.slice is not a workload but gets CPUs 0-15, including exclusive CPUs 1-2,9-10 of cgroup:hpc.slice/job-1.scope"),
        "{out}"
    );
    assert_eq!(err, "pinctl: verify found 1 problem\n");
    // --json: the same report for scripts, and the same exit code.
    let (code, out, _) = run(&fake, &["verify", "--config", c, "--json"]);
    assert_eq!(code, 1);
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["problems"][0]["kind"], "shared_on_exclusive");
    // --cgroup-root overrides the configuration's.
    let (code, _, err) = run(
        &fake,
        &["verify", "--config", c, "--cgroup-root", "/nonexistent"],
    );
    assert_eq!(code, 1);
    assert!(
        err.contains("cannot read the cgroup tree at /nonexistent"),
        "{err}"
    );
}

/// `verify --noise` through the binary: no tracefs is an error naming
/// the path it looked at (exit 1); no exclusive CPUs is said, and exit 0.
#[test]
fn verify_noise_names_a_missing_tracefs_and_passes_without_exclusive_cpus() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("cgroup");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("cgroup.controllers"), "cpuset cpu\n").unwrap();
    let proc_root = dir.path().join("proc");
    std::fs::create_dir_all(&proc_root).unwrap();
    let mut doc = status_doc::status(SHAPE_16, "0,8", &[job(1, 2)]);
    doc.hierarchy = "v2".into();
    let fake = serve(&doc, vec![]);
    let tracefs = dir.path().join("tracing");
    std::fs::create_dir_all(&tracefs).unwrap();
    let (r, p, t) = (
        root.to_str().unwrap(),
        proc_root.to_str().unwrap(),
        tracefs.to_str().unwrap(),
    );
    let args = [
        "verify",
        "--noise",
        "1s",
        "--cgroup-root",
        r,
        "--proc-root",
        p,
        "--tracefs",
        t,
    ];
    let (code, out, err) = run(&fake, &args);
    assert_eq!(code, 1, "{out}{err}");
    assert_eq!(
        err,
        format!(
            "pinctl: cannot measure the noise: no tracefs at {t}: it has no instances/ (mount it: mount -t tracefs nodev {t})\n"
        )
    );
    assert_eq!(out, "");

    fake.canned.status.lock().unwrap()["workloads"] = serde_json::json!([]);
    let (code, out, err) = run(&fake, &args);
    assert_eq!(
        (code, out.as_str()),
        (0, "No exclusive CPUs: nothing to measure\n"),
        "{err}"
    );
    let mut json = args.to_vec();
    json.push("--json");
    let (code, out, _) = run(&fake, &json);
    assert_eq!(code, 0);
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["cpus"], "");
    assert_eq!(report["movable"], false);
}
