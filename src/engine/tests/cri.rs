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

/// An exclusive container's CPUs, once it is released (an init container
/// that ended), go to its pod's next container first, where the allocator
/// alone would choose others; another pod's container gets the
/// allocator's choice. The pod gone, they are forgotten.
#[test]
fn a_released_containers_cpus_go_to_its_pods_next_container_first() {
    const A: &str = "aaaaaaaa-2222-3333-4444-555555555555";
    const B: &str = "bbbbbbbb-2222-3333-4444-555555555555";
    const C: &str = "cccccccc-2222-3333-4444-555555555555";
    let mut e = engine();
    kube_tree(&mut e);
    e.end_startup();
    let container = |e: &mut Engine, pod: &str, id: &str, name: &str| {
        add(e, &format!("kubepods/pod{pod}"), "0-15", None);
        let obs = Observed {
            rel: format!("kubepods/pod{pod}/{id}").as_str().into(),
            cpus: Some(set("0-15")),
            mems: Some(set("0-1")),
            ..Observed::default()
        };
        reading(e, obs, want(2), &format!("pod:{pod}/{name}"));
        apply(e);
        e.workloads()[&format!("pod:{pod}/{name}")]
            .cpus
            .clone()
            .unwrap()
    };
    let first = container(&mut e, B, "b1", "first");
    let init = container(&mut e, A, "a1", "init");
    assert_ne!(first, init);
    e.forget(&format!("kubepods/pod{B}/b1"));
    e.forget(&format!("kubepods/pod{A}/a1"));
    apply(&mut e);
    assert!(e.workloads().is_empty());
    assert_eq!(container(&mut e, A, "a2", "app"), init);
    assert_eq!(container(&mut e, C, "c1", "other"), first);
    e.forget(&format!("kubepods/pod{A}"));
    e.forget(&format!("kubepods/pod{B}"));
    assert!(e.left_by_pod.is_empty(), "{:?}", e.left_by_pod);
}
