//! Another CPU owner on the node: the kubelet's static CPU manager, as its
//! checkpoint (`kubelet_cpu_manager_state`) says. The real `pinctld` on a
//! fake v2 tree leaves the kubepods subtrees and the kubelet's exclusive
//! CPUs alone while the checkpoint says `static`, says so in the status,
//! and takes the pods back once it says `none` or is gone, each container
//! the kubelet pinned left on its CPUs.

use std::path::PathBuf;
use std::time::Duration;

use crate::support::fake_cgroup::{Driver, Qos, Spec, Version, container_id, set, uid};
use crate::support::status_doc::status_lines;
use crate::support::world::{Options, SYSTEM, World};
use pinctl::api::EventKind;

const STATIC: &str = r#"{"policyName":"static","defaultCpuSet":"0-1,4-31","entries":{"p1":{"app":"2-3"}},"checksum":1}"#;
const NONE: &str = r#"{"policyName":"none","defaultCpuSet":"","checksum":1}"#;

/// A v2 world whose kubelet checkpoint holds `text`, the watchdog's rounds
/// 200 ms apart; and the checkpoint's path.
fn world(name: &str, text: &str) -> (World, PathBuf) {
    world_on(Version::V2, name, text)
}

/// [`world`] on cgroup `version`.
fn world_on(version: Version, name: &str, text: &str) -> (World, PathBuf) {
    let w = World::new(name, version, Driver::Systemd, &Options::default());
    let checkpoint = w.tmp.path().join("cpu_manager_state");
    std::fs::write(&checkpoint, text).unwrap();
    w.write_config(&Options {
        keys: vec!["watchdog_interval = \"200ms\"".into()],
        ..Options::default()
    });
    (w, checkpoint)
}

#[test]
fn the_kubelets_static_cpu_manager_keeps_its_pods_and_cpus() {
    let (mut w, checkpoint) = world("pinctld-owner", STATIC);
    w.start();
    let u = uid(1);
    let pod = w.k.pod(Qos::Guaranteed, &u);
    w.tree.create(&pod, &w.existing());
    w.bundle(1, &u, "app", None);
    let rel = w.k.container(&pod, &container_id(1));
    w.tree.create(&rel, &Spec::limit(4));

    let s = w.wait_for("the other owner in the status", || {
        let s = w.served()?;
        if s.other_owners.len() == 1 {
            Ok(s)
        } else {
            Err(format!("other_owners: {:?}", s.other_owners))
        }
    });
    let line = status_lines(&s, "Owner");
    assert!(
        line.contains("static CPU manager")
            && line.contains("holds CPUs 2-3")
            && line.contains("kubepods.slice, kubepods"),
        "{line}"
    );
    let o = s.other_owners.into_iter().next().unwrap();
    assert_eq!(o.cpus, set("2-3"));
    assert!(
        o.what.contains("static CPU manager") && o.what.contains("1 containers"),
        "{}",
        o.what
    );
    assert_eq!(o.left, ["kubepods.slice", "kubepods"]);
    // Its Guaranteed pod is the kubelet's: never pinned. The shared pool
    // leaves the kubelet's exclusive CPUs.
    w.hold(
        "the kubelet's pod is left alone",
        Duration::from_secs(1),
        || {
            let got = w.tree.cpus(&rel);
            if got.is_empty() {
                Ok(())
            } else {
                Err(format!("{rel} was written: {got}"))
            }
        },
    );
    w.wait_for("system.slice off CPUs 2-3", || {
        let eff = w.tree.effective(SYSTEM);
        if eff.is_disjoint(&set("2-3")) {
            Ok(())
        } else {
            Err(format!("{eff}"))
        }
    });
    assert!(
        w.log()
            .contains("the kubelet's static CPU manager owns the CPUs of its pods")
    );

    // The kubelet runs `none` now: pinctld takes its pods back.
    std::fs::write(&checkpoint, NONE).unwrap();
    w.wait_pinned(&rel, 4);
    w.wait_for("no other owner", || {
        let s = w.served()?;
        if s.other_owners.is_empty() {
            Ok(())
        } else {
            Err("still one".into())
        }
    });
}

on_both_versions!(pods_taken_back_from_the_kubelet_keep_the_cpus_it_gave_them => taken_back());

/// Three Guaranteed containers the kubelet pinned (cores 4, 5-6 and 7),
/// and its shared pool (`defaultCpuSet`).
const PINNED: &str = r#"{"policyName":"static","defaultCpuSet":"0-3,8-19,24-31","entries":{
    "00000001-1111-4222-8333-0123456789ab":{"app":"4,20"},
    "00000002-1111-4222-8333-0123456789ab":{"db":"5-6,21-22"},
    "00000004-1111-4222-8333-0123456789ab":{"batch":"7,23"}},"checksum":1}"#;

/// The way off the kubelet's static CPU manager: pinctld, started while
/// the kubelet owned the pods, takes them back at its next round once
/// `pinctl kubelet-handover --apply` moved the checkpoint aside, and keeps
/// each container the kubelet pinned on its CPUs, writing nothing to it,
/// unless it asks otherwise now: as that command said. Before, the
/// take-back planned them all afresh, and moved them.
fn taken_back(version: Version) {
    let (mut w, checkpoint) = world_on(version, "pinctld-takeback", PINNED);
    // The pods run on the CPUs the kubelet gave them. `batch` asks pinctld
    // for 4 CPUs by its pod's annotation; the kubelet gave it 2.
    let mut containers = Vec::new();
    for (n, name, cpus, limit, asks) in [
        (1, "app", "4,20", 2, None),
        (2, "db", "5-6,21-22", 4, None),
        (4, "batch", "7,23", 2, Some("4")),
    ] {
        let rel = w.kubelet_container(n, Qos::Guaranteed, name, Some(limit), asks, cpus);
        containers.push((rel, set(cpus), format!("pod:{}/{name}", uid(n))));
    }
    let batch = containers.pop().unwrap();
    let pinned = containers;
    // A Burstable container on the kubelet's shared pool.
    let shared = w.kubelet_container(3, Qos::Burstable, "web", None, None, "0-3,8-19,24-31");
    w.start();
    w.wait_for("the kubelet named as the other owner", || {
        let s = w.served()?;
        match s.other_owners.as_slice() {
            [o] if o.cpus == set("4-7,20-23") => Ok(()),
            other => Err(format!("other_owners: {other:?}")),
        }
    });

    // The kubelet is stopped and set to `none`; its checkpoint is moved
    // aside, and what pinctl says it will keep is what pinctld keeps.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pinctl"))
        .args(["kubelet-handover", "--apply", "--json", "--config"])
        .arg(&w.config)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let said: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let kept: Vec<(&str, bool)> = said["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["container"].as_str().unwrap(),
                r["kept"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(kept, [("app", true), ("db", true), ("batch", false)]);
    assert!(!checkpoint.exists());
    let s = w.wait_for("the pods taken back", || {
        let s = w.served()?;
        let pinned = s.workloads.iter().filter(|w| w.cpus.is_some()).count();
        if s.other_owners.is_empty() && pinned == 3 {
            Ok(s)
        } else {
            Err(format!("owners {:?}, {pinned} pinned", s.other_owners))
        }
    });
    let cpus_of = |key: &str| {
        let wl = s.workloads.iter().find(|w| w.key == key).unwrap();
        wl.cpus.clone().unwrap()
    };
    for (_, cpus, key) in &pinned {
        assert_eq!(cpus_of(key), *cpus, "{key}");
    }
    let moved = cpus_of(&batch.2);
    assert_eq!(moved.len(), 4);
    // The shared pool shrinks around them, below and beside the pods.
    let exclusive = set("4-6,20-22").union(&moved);
    assert_eq!(s.shared_pool, set("0-31").difference(&exclusive));
    w.wait_for("the shared cgroups off the exclusive CPUs", || {
        for rel in [SYSTEM, shared.as_str()] {
            let eff = w.tree.effective(rel);
            if eff != s.shared_pool {
                return Err(format!("{rel} gets {eff}"));
            }
        }
        Ok(())
    });
    w.hold(
        "the kubelet's containers stay where it put them",
        Duration::from_millis(600),
        || {
            for (rel, cpus, _) in &pinned {
                let got = w.tree.cpus(rel);
                if got != *cpus {
                    return Err(format!("{rel} holds {got}, not {cpus}"));
                }
            }
            Ok(())
        },
    );
    assert!(w.log().contains("kept=2 pinned=3"), "{}", w.log());
    // The audit trail: no write to them; `batch` and the pool written.
    let events = w.served_events().unwrap();
    let written = |rel: &str| {
        events.iter().any(|e| {
            matches!(&e.what, EventKind::Write { cgroup, file, .. }
                if cgroup == rel && file == "cpuset.cpus")
        })
    };
    for (rel, _, _) in &pinned {
        assert!(!written(rel), "{rel} written: {events:#?}");
    }
    assert!(written(&batch.0) && written(&shared), "{events:#?}");
}
