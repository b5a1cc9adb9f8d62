//! `strict_reservation`: the managed subtrees' cgroups on the shared pool
//! keep off the reserved CPUs, `shared_cgroups` keep them; turned on and off
//! by new settings (a reload) in an order v1 accepts; and what is left when
//! every other CPU is exclusive.

use super::sequences::kernel_accepts;
use super::*;

const BURSTABLE: &str = "kubepods/burstable/pod11111111-2222-3333-4444-555555555555/aaaa";

/// Every CPU but the reserved 0 and 8 of [`topo`].
const UNRESERVED: &str = "1-7,9-15";

fn set_strict(e: &mut Engine, on: bool) {
    let mut s = e.settings().clone();
    s.strict_reservation = on;
    e.set_settings(s);
}

/// Plans and writes until nothing more is owed, checking v1's rules at
/// every write on v1 (v2 refuses none of them): the writes, and each
/// plan's [`Plan::strict_fallback`].
fn apply_checked(e: &mut Engine) -> (Vec<Write>, Vec<Option<bool>>) {
    let mut plan = e.plan();
    let (mut writes, mut fallbacks) = (Vec::new(), Vec::new());
    loop {
        fallbacks.push(plan.strict_fallback);
        for w in &plan.writes {
            assert!(!w.set.is_empty(), "an empty write {w:?}");
            if !e.settings().empty_inherits
                && let Err(why) = kernel_accepts(e, w)
            {
                panic!("{why}\n{:#?}", plan.writes);
            }
            e.written(w, Ok(()));
        }
        writes.extend(plan.writes);
        if !plan.more {
            return (writes, fallbacks);
        }
        plan = e.plan_owed();
    }
}

#[test]
fn a_v1_burstable_container_leaves_the_reserved_cpus_system_slice_keeps_them() {
    let mut e = engine();
    set_strict(&mut e, true);
    kube_tree(&mut e);
    apply_checked(&mut e);
    let pods = set(UNRESERVED);
    assert_eq!(target(&e, BURSTABLE), pods);
    assert_eq!(e.cgroups[BURSTABLE].cpus.as_deref(), Some(&pods));
    assert_eq!(target(&e, "system.slice"), set("0-15"));
    // v1 structure keeps every CPU: runtimes write explicit sets wider
    // than it (EACCES otherwise).
    assert_eq!(target(&e, "kubepods/burstable"), set("0-15"));
    assert_eq!(
        e.strict(),
        Some(api::Strict {
            pool: pods,
            fallback: false
        })
    );
}

#[test]
fn a_v2_qos_slice_leaves_the_reserved_cpus_and_its_containers_follow() {
    let mut e = engine_v2();
    set_strict(&mut e, true);
    kube_tree(&mut e);
    let pin = pin_guaranteed(&mut e);
    apply(&mut e);
    assert_v2_targets_hold(&e).unwrap();
    let pods = set(UNRESERVED).difference(&pin);
    let got = v2_effective(&e);
    assert_eq!(got[BURSTABLE], pods, "the container follows its QoS slice");
    assert_eq!(target(&e, "kubepods/burstable"), pods);
    assert_eq!(
        target(&e, "kubepods"),
        set(UNRESERVED),
        "the pin and the pool"
    );
    assert_eq!(got["system.slice"], set("0-15").difference(&pin));
}

#[test]
fn a_reload_turns_it_on_off_and_on_in_an_order_v1_accepts() {
    for v2 in [false, true] {
        let mut e = if v2 { engine_v2() } else { engine() };
        kube_tree(&mut e);
        add(&mut e, &format!("{BURSTABLE}/sub"), "0-15", None);
        let pin = pin_guaranteed(&mut e);
        apply_checked(&mut e);
        e.end_startup();
        let shared = set("0-15").difference(&pin);
        for on in [true, false, true] {
            set_strict(&mut e, on);
            let (writes, _) = apply_checked(&mut e);
            let want = if on {
                shared.difference(&set("0,8"))
            } else {
                shared.clone()
            };
            if v2 {
                assert_v2_targets_hold(&e).unwrap();
                assert_eq!(v2_effective(&e)[BURSTABLE], want, "v2 strict {on}");
            } else {
                assert_eq!(e.cgroups[BURSTABLE].cpus.as_deref(), Some(&want));
                let sub = format!("{BURSTABLE}/sub");
                assert_eq!(e.cgroups[&*sub].cpus.as_deref(), Some(&want));
            }
            assert_eq!(target(&e, "system.slice"), shared, "v2 {v2} strict {on}");
            assert_eq!(target(&e, GUARANTEED), pin, "the pin never moves");
            assert!(writes.iter().all(|w| &*w.rel != GUARANTEED), "{writes:?}");
        }
    }
}

#[test]
fn a_pending_workload_in_a_managed_subtree_waits_off_the_reserved_cpus() {
    let mut e = engine();
    set_strict(&mut e, true);
    kube_tree(&mut e);
    add(&mut e, "kubepods/big", "0-15", want(16));
    add(&mut e, "hpc", "0-15", None);
    apply_checked(&mut e);
    assert!(e.workloads()["cgroup:kubepods/big"].pending.is_some());
    assert_eq!(target(&e, "kubepods/big"), set(UNRESERVED));
}

/// Every CPU but the reserved ones exclusive: the pods' shared cgroups
/// cannot be given an empty set (the kernel refuses it to a cgroup with
/// tasks), so they keep the reserved CPUs until a CPU frees up, and the
/// plans say when that starts and ends.
#[test]
fn with_every_other_cpu_exclusive_the_pods_keep_the_reserved_cpus() {
    for v2 in [false, true] {
        let mut e = if v2 { engine_v2() } else { engine() };
        set_strict(&mut e, true);
        kube_tree(&mut e);
        add(
            &mut e,
            "kubepods/pod99999999-2222-3333-4444-555555555555",
            "0-15",
            None,
        );
        add(&mut e, GUARANTEED, "0-15", want(12));
        add(&mut e, "kubepods/job", "0-15", want(2));
        let (_, fallbacks) = apply_checked(&mut e);
        let pinned = target(&e, GUARANTEED).union(&target(&e, "kubepods/job"));
        assert_eq!(pinned, set(UNRESERVED));
        assert_eq!(
            e.strict(),
            Some(api::Strict {
                pool: set("0,8"),
                fallback: true
            })
        );
        assert_eq!(fallbacks.iter().flatten().collect::<Vec<_>>(), [&true]);
        assert_eq!(target(&e, BURSTABLE), set("0,8"), "never an empty set");
        assert_eq!(
            target(&e, "kubepods/burstable"),
            set(if v2 { "0,8" } else { "0-15" })
        );
        if v2 {
            assert_v2_targets_hold(&e).unwrap();
        }
        // CPUs free up: off the reserved CPUs again.
        e.end_startup();
        e.forget("kubepods/job");
        let (_, fallbacks) = apply_checked(&mut e);
        let freed = set(UNRESERVED).difference(&target(&e, GUARANTEED));
        assert_eq!(freed.len(), 2);
        assert_eq!(fallbacks.iter().flatten().collect::<Vec<_>>(), [&false]);
        assert_eq!(target(&e, BURSTABLE), freed);
    }
}

#[test]
fn the_audit_trail_says_the_pool_is_without_the_reserved_cpus() {
    let mut e = engine();
    set_strict(&mut e, true);
    kube_tree(&mut e);
    let plan = e.plan();
    let w = plan
        .writes
        .iter()
        .find(|w| &*w.rel == BURSTABLE && w.file == File::Cpus)
        .expect("the container is written");
    assert_eq!(
        e.explain(w).reason,
        "shared pool without the reserved CPUs (strict_reservation)"
    );
    let w = plan
        .writes
        .iter()
        .find(|w| &*w.rel == "system.slice" && w.file == File::Cpus);
    assert!(w.is_none_or(|w| e.explain(w).reason == "shared pool"));
}
