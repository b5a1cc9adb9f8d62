//! `pinctl run`'s door on the real `pinctld` (fake v2 tree): what it refuses
//! and how it says so, over the run socket. The run itself (a cgroup made,
//! the process moved) needs a kernel: `tests/real_cgroup_v1/run.rs` and
//! the VM bed's scenario 14.

use std::io::{BufRead as _, Write as _};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use pinctl::run::{Ask, AskError, Refusal};

use crate::support::fake_cgroup::{Driver, Version};
use crate::support::world::{Options, World};

/// A v2 world with `[run]` on for this process's user, at most 4 CPUs a run.
fn world() -> World {
    let mut w = World::new(
        "pinctld-run",
        Version::V2,
        Driver::Systemd,
        &Options::default(),
    );
    let me = nix::unistd::User::from_uid(nix::unistd::getuid())
        .ok()
        .flatten()
        .map_or_else(|| "root".to_string(), |u| u.name);
    let opts = Options {
        keys: vec![format!(
            "[run]\nenabled = true\nsocket = {:?}\nusers = [{me:?}]\nmax_cpus = 4",
            w.tmp.path().join("run.sock").display().to_string()
        )],
        ..Options::default()
    };
    w.write_config(&opts);
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

fn ask(w: &World, cpus: usize, name: Option<&str>) -> Result<pinctl::run::Grant, AskError> {
    let a = Ask {
        cpus,
        name: name.map(str::to_string),
        command: vec!["true".into()],
    };
    pinctl::run::ask(&w.tmp.path().join("run.sock"), &a, Duration::from_secs(20))
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
    )
    .unwrap_err()
    .to_string();
    assert!(
        gone.contains("is pinctld running, with [run] enabled = true"),
        "{gone}"
    );
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
