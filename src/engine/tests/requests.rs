//! Who gets CPUs and who waits: pending requests, whole cores, one
//! workload in two cgroups, an explicit zero, an opted-out job outside the
//! managed trees, and the CPU held back when none is reserved.

use super::*;

#[test]
fn pending_until_cpus_free_up() {
    let mut e = engine();
    kube_tree(&mut e);
    add(&mut e, "kubepods/a", "0-15", want(10));
    add(&mut e, "kubepods/b", "0-15", want(10));
    apply(&mut e);
    let a = &e.workloads()["cgroup:kubepods/a"];
    assert_eq!(a.cpus.as_ref().map(|c| c.len()), Some(10));
    let b = &e.workloads()["cgroup:kubepods/b"];
    assert_eq!(b.cpus, None);
    let p = b.pending.clone().unwrap();
    assert_eq!((p.requested, p.available), (10, 4));
    // While pending it runs in the shared pool.
    assert_eq!(target(&e, "kubepods/b"), e.shared_pool());
    e.forget("kubepods/a");
    apply(&mut e);
    let b = &e.workloads()["cgroup:kubepods/b"];
    assert_eq!(b.cpus.as_ref().map(|c| c.len()), Some(10));
    assert!(b.pending.is_none());
}

/// A request for whole cores is served in whole cores alone, whatever
/// `full_pcpus_only` says: 3 CPUs on 2-thread cores wait, 4 are two cores.
#[test]
fn a_request_for_whole_cores_gets_whole_cores_or_waits() {
    let mut e = engine();
    kube_tree(&mut e);
    let whole = |cpus| {
        want(cpus).map(|i| Intent {
            whole_cores: true,
            ..i
        })
    };
    add(&mut e, "kubepods/odd", "0-15", whole(3));
    add(&mut e, "kubepods/plain", "0-15", want(3));
    add(&mut e, "kubepods/even", "0-15", whole(4));
    apply(&mut e);
    let odd = &e.workloads()["cgroup:kubepods/odd"];
    assert_eq!(odd.cpus, None);
    assert!(
        odd.pending
            .as_ref()
            .unwrap()
            .reason
            .contains("threads per core"),
        "{:?}",
        odd.pending
    );
    assert_eq!(
        e.workloads()["cgroup:kubepods/plain"]
            .cpus
            .as_ref()
            .map(CpuSet::len),
        Some(3)
    );
    let even = e.workloads()["cgroup:kubepods/even"].cpus.clone().unwrap();
    for c in even.iter() {
        let sibling = if c < 8 { c + 8 } else { c - 8 };
        assert!(even.contains(sibling), "{even}: {c} without its sibling");
    }
}

#[test]
fn two_cgroups_of_one_workload_share_one_assignment() {
    let mut e = engine();
    kube_tree(&mut e);
    for rel in ["kubepods/pod1/old", "kubepods/pod1/new"] {
        let obs = Observed {
            rel: rel.into(),
            cpus: Some(set("0-15")),
            ..Observed::default()
        };
        reading(&mut e, obs, want(2), "pod:1/app");
    }
    apply(&mut e);
    assert_eq!(e.workloads().len(), 1);
    assert_eq!(
        target(&e, "kubepods/pod1/old"),
        target(&e, "kubepods/pod1/new")
    );
    assert_eq!(e.shared_pool().len(), 14);
}

#[test]
fn explicit_zero_and_inside_cgroups() {
    let mut e = engine();
    kube_tree(&mut e);
    add(&mut e, "kubepods/pod1", "0-15", None);
    add(&mut e, "kubepods/pod1/c", "0-15", want(2));
    add(&mut e, "kubepods/pod1/c/init.scope", "0-15", None);
    add(&mut e, "kubepods/pod1/z", "0-15", want(0));
    apply(&mut e);
    assert_eq!(
        target(&e, "kubepods/pod1/c/init.scope"),
        target(&e, "kubepods/pod1/c")
    );
    assert_eq!(e.cgroups["kubepods/pod1/c/init.scope"].role, Role::Inside);
    assert_eq!(target(&e, "kubepods/pod1/z"), e.shared_pool());
}

/// A rule pins a job outside the managed trees, then an xattr `"0"`
/// opts it out (on cgroupfs the xattr can only come after the mkdir): it
/// gets its parent's CPUs back, not the ones no longer reserved for it.
/// Found by the VM test bed.
#[test]
fn an_opted_out_unmanaged_cgroup_gets_its_parents_cpus_back() {
    let mut e = engine();
    add(&mut e, "hpc.slice", "0-15", None);
    add(&mut e, "hpc.slice/job-3.scope", "0-15", want(2));
    apply(&mut e);
    let pinned = target(&e, "hpc.slice/job-3.scope");
    assert_eq!(pinned.len(), 2);
    add(
        &mut e,
        "hpc.slice/job-3.scope",
        &pinned.to_string(),
        want(0),
    );
    let writes = apply(&mut e);
    assert!(
        writes
            .iter()
            .any(|w| &*w.rel == "hpc.slice/job-3.scope" && *w.set == set("0-15")),
        "{writes:?}"
    );
    assert_eq!(e.cgroups["hpc.slice/job-3.scope"].role, Role::Unmanaged);
    // Given back once; from then on it is left alone.
    add(&mut e, "hpc.slice/job-3.scope", "3", want(0));
    assert!(apply(&mut e).is_empty());
}

#[test]
fn without_reserved_cpus_the_lowest_is_held_back() {
    let mut e = Engine::new(
        topo(),
        Settings {
            scope: Scope::new(vec!["kubepods".into()], vec![], vec![]),
            ..Settings::default()
        },
        None,
    );
    add(&mut e, "kubepods", "0-15", None);
    add(&mut e, "kubepods/a", "0-15", want(16));
    apply(&mut e);
    assert!(e.workloads()["cgroup:kubepods/a"].pending.is_some());
    assert_eq!(e.shared_pool(), set("0-15"));
    add(&mut e, "kubepods/a", "0-15", want(15));
    apply(&mut e);
    assert_eq!(e.shared_pool(), set("0"));
}
