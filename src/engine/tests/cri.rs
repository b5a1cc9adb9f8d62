//! What the kubelet's real path brought (containerd's CRI, systemd 252):
//! a pod's annotation that reaches every container of the pod, and a write
//! over a pin that the daemon reads whole before its echo.

use super::*;

/// A pod's annotation `pinctl.io/cpus` reaches every container's bundle:
/// it serves one container of the pod at a time (found with containerd's
/// CRI: a pod asking for 1 CPU took one per container). The pod's other
/// containers wait, saying which annotation to use; a container named in
/// its own annotation asks alone. When the holder goes, the next takes it.
#[test]
fn a_pod_annotation_serves_one_container_at_a_time() {
    let by = |key: &str| {
        Some(Intent {
            cpus: 2,
            source: Source::Annotation {
                bundle: "/b/config.json".into(),
                key: key.into(),
            },
            numa: Vec::new(),
            whole_cores: false,
            class: None,
            near: Vec::new(),
            device_alignment: None,
            devices: Vec::new(),
        })
    };
    let mut e = engine();
    kube_tree(&mut e);
    let containers = [
        ("kubepods/pod1/a", "pod:1/app", "pinctl.io/cpus"),
        ("kubepods/pod1/b", "pod:1/side", "pinctl.io/cpus"),
        ("kubepods/pod1/c", "pod:1/db", "pinctl.io/cpus.db"),
        ("kubepods/pod2/d", "pod:2/app", "pinctl.io/cpus"),
    ];
    for (rel, key, annotation) in containers {
        let obs = Observed {
            rel: rel.into(),
            cpus: Some(set("0-15")),
            ..Observed::default()
        };
        reading(&mut e, obs, by(annotation), key);
    }
    apply(&mut e);
    let cpus = |e: &Engine, key: &str| e.workloads()[key].cpus.as_ref().map(CpuSet::len);
    assert_eq!(cpus(&e, "pod:1/app"), Some(2));
    assert_eq!(cpus(&e, "pod:1/side"), None);
    assert_eq!(cpus(&e, "pod:1/db"), Some(2));
    assert_eq!(cpus(&e, "pod:2/app"), Some(2));
    let waits = e.workloads()["pod:1/side"].pending.clone().unwrap();
    assert_eq!((waits.requested, waits.available), (2, 16 - 2 - 6));
    let why = waits.reason;
    assert!(why.contains("container app holds it"), "{why}");
    assert!(why.contains("pinctl.io/cpus.<container name>"), "{why}");
    assert_eq!(target(&e, "kubepods/pod1/b"), e.shared_pool());
    assert_eq!(e.shared_pool().len(), 16 - 6);
    // The holder goes (an init container ends): the next one takes it.
    e.forget("kubepods/pod1/a");
    apply(&mut e);
    assert_eq!(cpus(&e, "pod:1/side"), Some(2));
    assert!(e.workloads()["pod:1/side"].pending.is_none());
}

/// A write over an exclusive cgroup is the same news however it is read:
/// its inotify echo, or a whole reading first (systemd sets a unit's
/// xattrs right after it writes its cpuset on a daemon-reload, and the
/// xattr's event reads the cgroup whole before the write's echo is looked
/// at: the daemon then reverted the pin but never told systemd).
#[test]
fn a_write_over_a_pin_is_seen_by_a_whole_reading_too() {
    let mut e = engine();
    let pinned = pin_guaranteed(&mut e);
    assert!(e.take_overwritten().is_empty());
    let read = |cpus: &str| Observed {
        rel: GUARANTEED.into(),
        cpus: Some(set(cpus)),
        mems: Some(set("0-1")),
        ..Observed::default()
    };
    // The same set read again is no news.
    let key = format!("cgroup:{GUARANTEED}");
    reading(&mut e, read(&pinned.to_string()), want(4), &key);
    assert!(e.take_overwritten().is_empty());
    reading(&mut e, read("0-15"), want(4), &key);
    assert_eq!(e.take_overwritten(), [Rel::from(GUARANTEED)]);
    // Its echo after that is no news either; another write is.
    assert!(!e.observe_cpus(GUARANTEED, Some(set("0-15"))));
    assert!(e.observe_cpus(GUARANTEED, Some(set("1-2"))));
    assert_eq!(e.take_overwritten(), [Rel::from(GUARANTEED)]);
    // A shared cgroup written over is not a pin written over.
    assert!(e.observe_cpus("system.slice", Some(set("3"))));
    assert!(e.take_overwritten().is_empty());
}
