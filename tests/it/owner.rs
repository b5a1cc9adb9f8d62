//! Another CPU owner on the node: the kubelet's static CPU manager, as its
//! checkpoint (`kubelet_cpu_manager_state`) says. The real `pinctld` on a
//! fake v2 tree leaves the kubepods subtrees and the kubelet's exclusive
//! CPUs alone while the checkpoint says `static`, says so in the status,
//! and takes the pods back once it says `none`.

use std::time::Duration;

use crate::support::fake_cgroup::{Driver, Qos, Spec, Version, container_id, set, uid};
use crate::support::status_doc::status_lines;
use crate::support::world::{Options, SYSTEM, World};

const STATIC: &str = r#"{"policyName":"static","defaultCpuSet":"0-1,4-31","entries":{"p1":{"app":"2-3"}},"checksum":1}"#;
const NONE: &str = r#"{"policyName":"none","defaultCpuSet":"","checksum":1}"#;

#[test]
fn the_kubelets_static_cpu_manager_keeps_its_pods_and_cpus() {
    let mut w = World::new(
        "pinctld-owner",
        Version::V2,
        Driver::Systemd,
        &Options::default(),
    );
    let checkpoint = w.tmp.path().join("cpu_manager_state");
    std::fs::write(&checkpoint, STATIC).unwrap();
    w.write_config(&Options {
        keys: vec!["watchdog_interval = \"200ms\"".into()],
        ..Options::default()
    });
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
