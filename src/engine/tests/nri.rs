//! Workloads announced before their cgroup exists (NRI's
//! `CreateContainer`, [`Engine::expect`]).

use super::*;

const POD: &str = "kubepods/pod99999999-2222-3333-4444-555555555555";
const CONTAINER: &str = "kubepods/pod99999999-2222-3333-4444-555555555555/cccc";
const KEY: &str = "pod:99999999-2222-3333-4444-555555555555/app";

fn cpus(e: &Engine, key: &str) -> Option<CpuSet> {
    e.workloads().get(key).and_then(|w| w.cpus.clone())
}

/// The container's cgroup, made by the runtime with what it was told.
fn made_with(e: &mut Engine, cpus: &str) {
    let obs = Observed {
        rel: CONTAINER.into(),
        cpus: Some(set(cpus)),
        mems: Some(set("0-1")),
        ..Observed::default()
    };
    reading(e, obs, want(4), KEY);
}

/// Announced, a workload gets its CPUs before it has a cgroup, and the
/// shared pool gives them up. The cgroup the runtime makes with them joins
/// it, and nothing is written to it: it holds them already.
#[test]
fn an_announced_workload_is_placed_before_its_cgroup_and_joined_by_it() {
    let mut e = engine();
    kube_tree(&mut e);
    add(&mut e, POD, "0-15", None);
    apply(&mut e);
    e.expect(KEY, &want(4).unwrap());
    let writes = apply(&mut e);
    let given = cpus(&e, KEY).expect("placed at once");
    assert_eq!(given.len(), 4);
    assert!(e.shared_pool().is_disjoint(&given));
    // The shared pool gave them up; nothing is written for the workload.
    assert!(
        writes
            .iter()
            .all(|w| w.set.is_disjoint(&given) || w.set.len() == 16)
    );
    assert_eq!(target(&e, "system.slice"), e.shared_pool());
    made_with(&mut e, &given.to_string());
    let writes = apply(&mut e);
    assert!(
        writes
            .iter()
            .all(|w| &*w.rel != CONTAINER || w.file != File::Cpus),
        "{writes:?}"
    );
    assert_eq!(target(&e, CONTAINER), given);
    let w = &e.workloads()[KEY];
    assert!(!w.expected);
    assert_eq!(w.cgroups.len(), 1);
    // Joined, it is released with its last cgroup, as any workload.
    e.forget(CONTAINER);
    apply(&mut e);
    assert!(!e.workloads().contains_key(KEY));
    assert_eq!(e.shared_pool().len(), 16);
}

/// An announcement withdrawn before any cgroup joined (the container was
/// never made, or stopped at once) gives its CPUs back; one withdrawn after
/// a cgroup joined changes nothing.
#[test]
fn a_withdrawn_announcement_gives_its_cpus_back() {
    let mut e = engine();
    kube_tree(&mut e);
    e.expect(KEY, &want(4).unwrap());
    apply(&mut e);
    assert_eq!(e.shared_pool().len(), 12);
    e.unexpect(KEY);
    apply(&mut e);
    assert!(!e.workloads().contains_key(KEY));
    assert_eq!(e.shared_pool().len(), 16);
    assert_eq!(target(&e, "system.slice").len(), 16);

    e.expect(KEY, &want(4).unwrap());
    apply(&mut e);
    let given = cpus(&e, KEY).unwrap();
    made_with(&mut e, &given.to_string());
    apply(&mut e);
    e.unexpect(KEY);
    apply(&mut e);
    assert_eq!(cpus(&e, KEY), Some(given));
}

/// A key already known (a container made again in its pod while the old
/// one's cgroup is still there) keeps what it holds; an announcement that
/// does not fit waits, and is placed when CPUs free up.
#[test]
fn an_announcement_keeps_a_known_workload_and_waits_when_full() {
    let mut e = engine();
    kube_tree(&mut e);
    add(&mut e, POD, "0-15", None);
    e.expect(KEY, &want(4).unwrap());
    apply(&mut e);
    let given = cpus(&e, KEY).unwrap();
    made_with(&mut e, &given.to_string());
    apply(&mut e);
    let mut more = want(6).unwrap();
    e.expect(KEY, &more);
    apply(&mut e);
    assert_eq!(cpus(&e, KEY), Some(given.clone()));
    assert_eq!(e.workloads()[KEY].requested, 4);

    more.cpus = 12;
    e.expect("pod:x/big", &more);
    apply(&mut e);
    let w = &e.workloads()["pod:x/big"];
    assert_eq!(w.cpus, None);
    assert_eq!(w.pending.as_ref().map(|p| p.available), Some(10));
    e.forget(CONTAINER);
    apply(&mut e);
    assert_eq!(cpus(&e, "pod:x/big").map(|c| c.len()), Some(12));
}
