//! `pinctl kubelet-handover` on a fake tree, as an operator runs it on a
//! node leaving the kubelet's static CPU manager: the world's configuration
//! names the tree, sysfs, the state file, the checkpoint and `/proc`; no
//! daemon runs. What pinctld then does is `owner.rs`'s.

use std::path::Path;
use std::process::{Command, Output};

use crate::support::fake_cgroup::{Driver, Qos, Version, uid};
use crate::support::fake_proc;
use crate::support::world::{Options, World};

/// Six containers the kubelet pinned: two pinctld keeps, one that asks
/// pinctld for another count (an annotation), a Burstable one pinctld
/// gives the shared pool, one on a CPU pinctld reserves (16: the kubelet
/// reserved 0 alone), and one that is gone (pod 6 has no cgroup).
const STATIC: &str = r#"{"policyName":"static","defaultCpuSet":"0-3,10-15,17-19,26-31","entries":{
    "00000001-1111-4222-8333-0123456789ab":{"app":"4,20"},
    "00000002-1111-4222-8333-0123456789ab":{"db":"5-6,21-22"},
    "00000003-1111-4222-8333-0123456789ab":{"web":"7,23"},
    "00000004-1111-4222-8333-0123456789ab":{"batch":"8,24"},
    "00000005-1111-4222-8333-0123456789ab":{"sys":"9,16"},
    "00000006-1111-4222-8333-0123456789ab":{"gone":"25"}},"checksum":1}"#;

/// A world whose checkpoint holds `checkpoint` (none: no file), with the
/// containers of [`STATIC`].
fn world(name: &str, checkpoint: Option<&str>) -> World {
    let w = World::new(name, Version::V2, Driver::Systemd, &Options::default());
    if let Some(text) = checkpoint {
        std::fs::write(checkpoint_of(&w), text).unwrap();
    }
    let g = Qos::Guaranteed;
    w.kubelet_container(1, g, "app", Some(2), None, "4,20");
    w.kubelet_container(2, g, "db", Some(4), None, "5-6,21-22");
    w.kubelet_container(3, Qos::Burstable, "web", None, None, "7,23");
    w.kubelet_container(4, g, "batch", Some(2), Some("4"), "8,24");
    w.kubelet_container(5, g, "sys", Some(2), None, "9,16");
    w
}

fn checkpoint_of(w: &World) -> std::path::PathBuf {
    w.tmp.path().join("cpu_manager_state")
}

/// `pinctl kubelet-handover --config <the world's> ARGS`: (exit code,
/// stdout, stderr).
fn handover(w: &World, args: &[&str]) -> (i32, String, String) {
    let out: Output = Command::new(env!("CARGO_BIN_EXE_pinctl"))
        .arg("kubelet-handover")
        .arg("--config")
        .arg(&w.config)
        .args(args)
        .output()
        .unwrap();
    let text = |b: &[u8]| String::from_utf8(b.to_vec()).unwrap();
    (
        out.status.code().unwrap(),
        text(&out.stdout),
        text(&out.stderr),
    )
}

/// The files beside the checkpoint, by name.
fn beside(w: &World) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(w.tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("cpu_manager_state"))
        .collect();
    names.sort();
    names
}

#[test]
fn a_static_checkpoint_is_judged_container_by_container() {
    let w = world("handover-static", Some(STATIC));
    let (code, out, err) = handover(&w, &[]);
    assert_eq!(code, 1, "{out}{err}");
    assert_eq!(
        err, "pinctl: 4 of 6 containers will not keep their CPUs\n",
        "{out}"
    );
    let row = |name: &str| {
        out.lines()
            .position(|l| l.split_whitespace().nth(1) == Some(name))
            .map(|i| (out.lines().nth(i).unwrap(), out.lines().nth(i + 1)))
            .unwrap_or_else(|| panic!("no row of {name}:\n{out}"))
    };
    let cells = |name: &str| -> Vec<String> {
        row(name)
            .0
            .split_whitespace()
            .take(4)
            .map(str::to_string)
            .collect()
    };
    assert_eq!(cells("app"), [uid(1).as_str(), "app", "4,20", "yes"]);
    assert!(row("app").0.ends_with(".scope"), "{out}");
    assert_eq!(cells("db"), [uid(2).as_str(), "db", "5-6,21-22", "yes"]);
    let why = |name: &str| row(name).1.unwrap().trim().to_string();
    assert_eq!(cells("batch")[3], "no");
    assert_eq!(
        why("batch"),
        "it asks for 4 CPUs (annotation), not 2: it is planned afresh"
    );
    assert_eq!(
        why("web"),
        "it asks pinctld for no exclusive CPUs (not a Guaranteed pod with a whole-number \
         CPU limit, and no annotation, xattr or rule): it goes to the shared pool"
    );
    assert_eq!(
        why("sys"),
        "CPUs 16 are reserved (reserved_cpus): it is planned afresh"
    );
    assert_eq!(cells("gone")[3], "no");
    assert_eq!(row("gone").0.split_whitespace().last(), Some("-"), "{out}");
    assert_eq!(
        why("gone"),
        "no cgroup of the managed subtrees is this container's (it ended?)"
    );
    assert!(
        out.contains("Shared pool: the kubelet's 0-3,10-15,17-19,26-31 (defaultCpuSet)\n"),
        "{out}"
    );
    assert!(
        out.contains("             pinctld's 0-3,7-19,23-31 at most:"),
        "{out}"
    );
    assert!(
        out.contains("Reserved:    pinctld's 0,16 (reserved_cpus)"),
        "{out}"
    );

    // The example of docs/src/cli.md is this output, on a node's path.
    let page =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/src/cli.md")).unwrap();
    let shown = format!("$ pinctl kubelet-handover\n{out}{err}").replace(
        &checkpoint_of(&w).display().to_string(),
        "/var/lib/kubelet/cpu_manager_state",
    );
    assert!(
        page.contains(&format!("```\n{shown}```\n")),
        "docs/src/cli.md's example is not the output:\n{shown}"
    );

    // The same as JSON; nothing moved.
    let (code, json, _) = handover(&w, &["--json"]);
    assert_eq!(code, 1);
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(doc["policy"], "static");
    assert_eq!(doc["shared_pool"], "0-3,7-19,23-31");
    let app = &doc["containers"][0];
    assert_eq!(
        (
            app["container"].as_str(),
            app["kept"].as_bool(),
            app["asks"].as_u64()
        ),
        (Some("app"), Some(true), Some(2))
    );
    assert_eq!(app["why"], serde_json::Value::Null);
    assert_eq!(doc["moved_to"], serde_json::Value::Null);
    assert_eq!(beside(&w), ["cpu_manager_state"]);
}

#[test]
fn a_none_or_missing_checkpoint_is_nothing_to_do() {
    let w = world("handover-none", None);
    let path = checkpoint_of(&w);
    let (code, out, err) = handover(&w, &[]);
    assert_eq!((code, err.as_str()), (0, ""), "{out}");
    assert_eq!(
        out,
        format!(
            "No checkpoint at {}: the kubelet's static CPU manager holds no CPUs. Nothing to do.\n",
            path.display()
        )
    );
    let (code, _, err) = handover(&w, &["--apply"]);
    assert_eq!(code, 2);
    assert_eq!(
        err,
        format!(
            "pinctl: not moving the checkpoint: there is no checkpoint at {}\n",
            path.display()
        )
    );

    std::fs::write(
        &path,
        r#"{"policyName":"none","defaultCpuSet":"","checksum":1}"#,
    )
    .unwrap();
    let (code, out, _) = handover(&w, &[]);
    assert_eq!(code, 0);
    assert!(
        out.ends_with("says policy none: the kubelet pins nothing. Nothing to do.\n"),
        "{out}"
    );
    let (code, json, _) = handover(&w, &["--json"]);
    assert_eq!(code, 0);
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(doc["policy"], "none");
    assert_eq!(doc["containers"], serde_json::json!([]));
    let (code, _, err) = handover(&w, &["--apply"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("says policy \"none\", not \"static\": nothing to move aside"),
        "{err}"
    );
    assert_eq!(beside(&w), ["cpu_manager_state"]);
}

#[test]
fn a_corrupt_checkpoint_names_the_file_and_what_is_wrong() {
    for (text, wrong) in [
        (r#"{"policyName":"static","entr"#, "EOF while parsing"),
        (r#"{"entries":{}}"#, "missing field `policyName`"),
        (
            r#"{"policyName":"static","entries":{"p":{"c":"1-x"}}}"#,
            "entry p/c: \"1-x\" is not a CPU list",
        ),
    ] {
        let w = world("handover-corrupt", Some(text));
        let path = checkpoint_of(&w);
        for args in [&[][..], &["--json"], &["--apply"]] {
            let (code, out, err) = handover(&w, args);
            assert_eq!((code, out.as_str()), (2, ""), "{args:?}: {err}");
            let head = format!(
                "pinctl: the kubelet's checkpoint {} is corrupt: ",
                path.display()
            );
            assert!(err.starts_with(&head) && err.contains(wrong), "{err}");
        }
        assert_eq!(beside(&w), ["cpu_manager_state"]);
    }
    // Unreadable: a directory where the file should be.
    let w = world("handover-unreadable", None);
    std::fs::create_dir(checkpoint_of(&w)).unwrap();
    let (code, _, err) = handover(&w, &[]);
    assert_eq!(code, 2);
    assert!(
        err.starts_with(&format!(
            "pinctl: cannot read the kubelet's checkpoint {}: ",
            checkpoint_of(&w).display()
        )),
        "{err}"
    );
}

#[test]
fn apply_moves_the_checkpoint_aside_unless_a_kubelet_runs() {
    let w = world("handover-apply", Some(STATIC));
    // A kubelet runs: refused, nothing moved, nothing printed.
    fake_proc::task(&w.proc_root, 4242, "kubelet", "0-31", 0, 1);
    fake_proc::task(&w.proc_root, 4243, "containerd", "0-31", 0, 1);
    let (code, out, err) = handover(&w, &["--apply"]);
    assert_eq!((code, out.as_str()), (2, ""));
    assert_eq!(
        err,
        "pinctl: not moving the checkpoint: a kubelet is running (pid 4242): stop it first, \
         and set cpuManagerPolicy: none in its configuration\n"
    );
    assert_eq!(beside(&w), ["cpu_manager_state"]);
    // --proc-root is where it looks. (A state file that cannot be used is
    // a note.)
    std::fs::create_dir_all(w.state.parent().unwrap()).unwrap();
    std::fs::write(&w.state, "garbage").unwrap();
    let empty = w.tmp.path().join("empty-proc");
    std::fs::create_dir(&empty).unwrap();
    let (code, out, _) = handover(&w, &["--apply", "--json", "--proc-root", path(&empty)]);
    assert_eq!(code, 1, "the table says what moves, as without --apply");
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    let note = doc["notes"][0].as_str().unwrap();
    assert!(
        note.contains("is unusable") && note.ends_with("pinctld's own workloads are not known"),
        "{note}"
    );
    let moved = doc["moved_to"].as_str().unwrap().to_string();
    let name = Path::new(&moved).file_name().unwrap().to_string_lossy();
    let secs: u64 = name
        .strip_prefix("cpu_manager_state.static-")
        .unwrap()
        .parse()
        .unwrap();
    assert!(secs.abs_diff(pinctl::api::unix_secs()) < 60, "{name}");
    assert_eq!(std::fs::read_to_string(&moved).unwrap(), STATIC);
    assert_eq!(beside(&w), [name.to_string()]);
    // Done: nothing left to move.
    let (code, out, _) = handover(&w, &["--proc-root", path(&empty)]);
    assert_eq!(code, 0);
    assert!(out.starts_with("No checkpoint at "), "{out}");

    // A second static checkpoint moved aside in the same second goes
    // beside the first, never over it.
    let again = format!("{}.static-{secs}", checkpoint_of(&w).display());
    std::fs::write(checkpoint_of(&w), STATIC).unwrap();
    let to = pinctl::cli::handover::move_aside(&checkpoint_of(&w), secs).unwrap();
    assert_eq!(to.display().to_string(), format!("{again}-1"));
    assert_eq!(std::fs::read_to_string(&again).unwrap(), STATIC);
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}
