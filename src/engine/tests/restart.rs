//! Start-up and restarts: live cpusets adopted, state hints used, a waiting
//! workload kept off a pinned one's CPUs, pods another owner gives back, and
//! a smaller machine.

use super::*;

#[test]
fn start_up_adopts_valid_live_cpusets_then_reverts_foreign_writes() {
    let mut e = engine();
    kube_tree(&mut e);
    add(&mut e, "kubepods/a", "5-6", want(2));
    let writes = apply(&mut e);
    assert_eq!(target(&e, "kubepods/a"), set("5-6"), "live set kept");
    assert!(!writes.iter().any(|w| &*w.rel == "kubepods/a"));
    e.end_startup();
    // Someone resets the cpuset (the kubelet, a daemon-reload).
    assert!(e.observe_cpus("kubepods/a", Some(set("0-15"))));
    let writes = apply(&mut e);
    assert!(
        writes
            .iter()
            .any(|w| &*w.rel == "kubepods/a" && *w.set == set("5-6"))
    );
    assert_eq!(e.cgroups["kubepods/a"].cpus.as_deref(), Some(&set("5-6")));
}

#[test]
fn after_a_restart_a_waiting_workload_does_not_take_a_pinned_ones_cpus() {
    // Found on the real kernel: the waiting workload sorts first.
    let mut e = engine();
    kube_tree(&mut e);
    add(&mut e, "kubepods/a-waiting", "0,8", want(14));
    add(&mut e, "kubepods/z-pinned", "1-7,9-15", want(14));
    apply(&mut e);
    assert_eq!(target(&e, "kubepods/z-pinned"), set("1-7,9-15"));
    assert!(e.workloads()["cgroup:kubepods/a-waiting"].pending.is_some());
}

#[test]
fn state_hints_are_used_when_live_sets_are_not_valid() {
    let saved = SavedState {
        partitions: Default::default(),
        online: set("0-15"),
        assignments: [(
            "cgroup:kubepods/a".to_string(),
            SavedAssignment {
                cpus: set("12-13"),
                requested: 2,
                cgroups: vec!["kubepods/a".into()],
                baseline: None,
            },
        )]
        .into(),
        irqs: Default::default(),
        nri_yielded: Default::default(),
    };
    let mut e = Engine::new(
        topo(),
        Settings {
            reserved: set("0,8"),
            scope: Scope::new(vec!["kubepods".into()], vec![], vec![]),
            ..Settings::default()
        },
        Some(saved),
    );
    kube_tree(&mut e);
    add(&mut e, "kubepods/a", "0-15", want(2));
    apply(&mut e);
    assert_eq!(target(&e, "kubepods/a"), set("12-13"));
    // A hint that overlaps the reserved CPUs is not valid.
    let mut e2 = engine();
    let hint = Hint {
        cpus: set("0,8"),
        baseline: None,
        proven: true,
    };
    e2.hints.insert("cgroup:kubepods/b".into(), hint);
    add(&mut e2, "kubepods/b", "0-15", want(2));
    apply(&mut e2);
    assert!(target(&e2, "kubepods/b").is_disjoint(&set("0,8")));
}

/// Another owner (the kubelet's static CPU manager) gives its pods back
/// while the daemon runs: each container it pinned keeps its live set when
/// that is the set it said and a valid assignment of the count asked, with
/// nothing written; the others are planned as any new workload, and no
/// other workload is adopted.
#[test]
fn workloads_another_owner_gives_back_keep_the_cpus_it_said_they_hold() {
    let mut e = engine();
    let mut settings = e.settings().clone();
    settings.scope = Scope::new(vec![], vec!["system.slice".into()], vec![]);
    e.set_settings(settings);
    add(&mut e, "system.slice", "0-15", None);
    assert!(e.set_elsewhere(set("1-3,5-7,9,14")));
    apply(&mut e);
    e.end_startup();
    assert_eq!(target(&e, "system.slice"), set("0,4,8,10-13,15"));

    // Its checkpoint is gone: the pods are the daemon's again.
    assert!(e.set_elsewhere(CpuSet::new()));
    let mut settings = e.settings().clone();
    settings.scope = Scope::new(vec!["kubepods".into()], vec!["system.slice".into()], vec![]);
    e.set_settings(settings);
    let held = |pairs: &[(&str, &str)]| -> BTreeMap<String, CpuSet> {
        pairs.iter().map(|(k, c)| (k.to_string(), set(c))).collect()
    };
    e.adopt_handed_over(held(&[
        ("pod:u1/app", "2-3"),
        ("pod:u1/db", "5"),
        ("pod:u1/side", "6,14"),
        ("pod:u1/gone", "1,9"),
    ]));
    add(&mut e, "kubepods", "0-15", None);
    add(&mut e, "kubepods/podu1", "0-15", None);
    let container = |e: &mut Engine, name: &str, live: &str, n: usize| {
        let obs = Observed {
            rel: format!("kubepods/podu1/{name}").as_str().into(),
            cpus: Some(set(live)),
            mems: Some(set("0-1")),
            ..Observed::default()
        };
        reading(e, obs, want(n), &format!("pod:u1/{name}"));
    };
    // As it said, of the count asked: kept.
    container(&mut e, "app", "2-3", 2);
    // It asks for another count now (an annotation): planned afresh.
    container(&mut e, "db", "5", 2);
    // Its cgroup holds other CPUs than it said: planned afresh.
    container(&mut e, "side", "6-7", 2);
    // Not its: never adopted, though a start-up would take that set.
    container(&mut e, "other", "3-4", 2);
    let writes = apply(&mut e);
    e.end_startup();

    let cpus = |e: &Engine, key: &str| e.workloads()[key].cpus.clone().unwrap();
    assert_eq!(cpus(&e, "pod:u1/app"), set("2-3"));
    assert!(
        !writes.iter().any(|w| &*w.rel == "kubepods/podu1/app"),
        "{writes:?}"
    );
    assert_eq!(cpus(&e, "pod:u1/db").len(), 2);
    assert_ne!(cpus(&e, "pod:u1/side"), set("6-7"));
    assert_ne!(cpus(&e, "pod:u1/other"), set("3-4"));
    let mut taken = CpuSet::new();
    for w in e.workloads().values() {
        let c = w.cpus.as_ref().unwrap();
        assert!(c.is_disjoint(&taken) && c.is_disjoint(&set("0,8")), "{c}");
        taken.union_with(c);
    }
    // The shared pool shrinks around them, and the next plans keep them.
    assert_eq!(e.shared_pool(), set("0-15").difference(&taken));
    assert_eq!(target(&e, "system.slice"), e.shared_pool());
    container(&mut e, "app", "2-3", 2);
    apply(&mut e);
    assert_eq!(cpus(&e, "pod:u1/app"), set("2-3"));
    assert!(e.hints.is_empty() && !e.adopt_live);
}

#[test]
fn a_smaller_machine_replans_only_what_it_affects() {
    let mut e = engine();
    kube_tree(&mut e);
    add(&mut e, "kubepods/low", "0-15", want(2));
    add(&mut e, "kubepods/high", "0-15", want(2));
    apply(&mut e);
    e.end_startup();
    let low = target(&e, "kubepods/low");
    let high = target(&e, "kubepods/high");
    // Take one CPU of `high` offline.
    let gone = high.first().unwrap();
    let cpus: Vec<_> = topo()
        .cpus()
        .iter()
        .copied()
        .filter(|c| c.cpu != gone)
        .collect();
    e.set_topology(Topology::new(cpus, CpuSet::new(), set(&gone.to_string())).unwrap());
    apply(&mut e);
    assert_eq!(
        target(&e, "kubepods/low"),
        low,
        "unaffected workload keeps its CPUs"
    );
    let now = target(&e, "kubepods/high");
    assert_eq!(now.len(), 2);
    assert!(!now.contains(gone));
    assert!(!e.shared_pool().contains(gone));
    // And back: the CPU joins the shared pool.
    e.set_topology(topo());
    apply(&mut e);
    assert!(e.shared_pool().contains(gone));
}
