//! The writes of a plan: what shrinks and widens the shared pool, their
//! order (top-down widening, bottom-up narrowing, v1's mems first, a new pin
//! ahead of the pool), when a plan is cut short, v1's balancing flag, v2's
//! writes per subtree, what is read back, and the soak's mutant hook.

use super::*;

#[test]
fn pins_and_shrinks_the_shared_pool_then_releases() {
    let mut e = engine();
    let pinned = pin_guaranteed(&mut e);
    assert!(pinned.is_disjoint(&set("0,8")), "reserved stay shared");
    let shared = set("0-15").difference(&pinned);
    assert_eq!(e.shared_pool(), shared);
    let burstable = "kubepods/burstable/pod11111111-2222-3333-4444-555555555555/aaaa";
    assert_eq!(target(&e, burstable), shared);
    assert_eq!(target(&e, "system.slice"), shared);
    // Structural cgroups are never shrunk.
    assert_eq!(target(&e, "kubepods"), set("0-15"));
    assert_eq!(target(&e, "kubepods/burstable"), set("0-15"));
    // A second plan with nothing new writes nothing.
    assert!(apply(&mut e).is_empty());

    e.forget(GUARANTEED);
    let writes = apply(&mut e);
    assert!(e.workloads().is_empty());
    assert_eq!(target(&e, burstable), set("0-15"));
    assert!(
        writes
            .iter()
            .any(|w| &*w.rel == burstable && *w.set == set("0-15"))
    );
}

#[test]
fn widens_top_down_and_narrows_bottom_up() {
    let mut e = engine();
    kube_tree(&mut e);
    // A rule-managed job under an unmanaged parent that lacks CPUs 4-7.
    add(&mut e, "hpc.slice", "0-3,8-11", None);
    add(&mut e, "hpc.slice/job-1.scope", "0-3,8-11", want(8));
    let writes = e.plan().writes;
    let job = target(&e, "hpc.slice/job-1.scope");
    assert_eq!(job.len(), 8);
    let pos = |rel: &str, s: &CpuSet| writes.iter().position(|w| &*w.rel == rel && &*w.set == s);
    // The parent is widened (before the child's widening write)...
    let parent_wide = set("0-3,8-11").union(&job);
    let p = pos("hpc.slice", &parent_wide).expect("parent widened");
    let child_wide = set("0-3,8-11").union(&job);
    let c = pos("hpc.slice/job-1.scope", &child_wide).expect("child widened");
    assert!(p < c, "{writes:?}");
    // ...and the child narrowed last.
    let n = pos("hpc.slice/job-1.scope", &job).expect("child narrowed");
    assert!(c < n);
    // Shared cgroups narrow bottom-up: the burstable container before system.slice? Both at
    // their own depth; deeper first.
    for w in &writes {
        assert!(!w.set.is_empty(), "never an empty set");
    }
}

#[test]
fn a_new_v1_cgroup_gets_mems_before_cpus() {
    let mut e = engine();
    kube_tree(&mut e);
    let obs = Observed {
        rel: "kubepods/burstable/pod11111111-2222-3333-4444-555555555555/cccc".into(),
        cpus: Some(CpuSet::new()),
        mems: Some(CpuSet::new()),
        ..Observed::default()
    };
    let rel = obs.rel.clone();
    reading(&mut e, obs, None, "k");
    let writes = e.plan().writes;
    let mine: Vec<&Write> = writes.iter().filter(|w| w.rel == rel).collect();
    assert_eq!(mine.len(), 2, "{mine:?}");
    assert_eq!(mine[0].file, File::Mems);
    assert_eq!(*mine[0].set, set("0-1"));
    assert_eq!(mine[1].file, File::Cpus);
}

/// While the shared pool is still growing back after a release, a new pin
/// must not wait behind it: its writes are the plan's urgent prefix, and
/// the pool's writes come after.
#[test]
fn a_new_pin_goes_ahead_of_the_shared_pool() {
    let mut e = engine();
    kube_tree(&mut e);
    let pod = "kubepods/pod99999999-2222-3333-4444-555555555555";
    add(&mut e, pod, "0-15", None);
    add(&mut e, GUARANTEED, "0-15", want(4));
    apply(&mut e);
    e.end_startup();
    // The workload leaves and, before the pool has grown back, another comes.
    e.forget(GUARANTEED);
    let next = format!("{pod}/cccc");
    add(&mut e, &next, "0-15", want(2));
    let plan = e.plan();
    assert!(plan.urgent >= 1, "{:?}", plan.writes);
    let (urgent, rest) = plan.writes.split_at(plan.urgent);
    assert!(urgent.iter().all(|w| *w.rel == *next), "{urgent:?}");
    assert!(
        rest.iter().all(|w| *w.rel != *next),
        "the pin is wholly in the urgent prefix: {rest:?}"
    );
    assert!(
        rest.iter().any(|w| &*w.rel == "system.slice"),
        "the pool follows: {rest:?}"
    );
}

/// A release planned but not yet written (the shared pool's widening waits
/// for a quiet tree), then a pin of the CPUs released under another shared
/// parent that has not got them back (v2): the parent's kept target holds them,
/// but the parent does not, so the plan widens it first. Seen in the VM
/// bed: a `pinctl run --wait` served at a release got CPUs its slice
/// lacked, and the kernel gave the run fewer.
#[test]
fn a_pin_of_released_cpus_widens_a_parent_that_lacks_them_first() {
    let mut e = engine_v2();
    kube_tree(&mut e);
    add(&mut e, "kubepods/a", "", want(2));
    apply(&mut e);
    e.end_startup();
    let held = target(&e, "kubepods/a");
    assert!(held.is_disjoint(&target(&e, "system.slice")));
    e.forget("kubepods/a");
    let release = e.plan();
    assert_eq!(release.urgent, 0, "{:?}", release.writes);
    // Its writes never made: a newer plan comes first.
    add(&mut e, "system.slice/b", "", want(2));
    let plan = e.plan();
    let cpus = target(&e, "system.slice/b");
    assert_eq!(cpus, held, "the released CPUs again");
    made(&mut e, &plan.writes[..plan.urgent]);
    let got = v2_effective(&e)["system.slice/b"].clone();
    assert_eq!(got, cpus, "the kernel gives it {got}: {:?}", plan.writes);
}

/// A plan waits for the report of each of its writes, made or found gone:
/// until then a newer plan over a reach counts it cut short (it makes only
/// its urgent writes and owes a full plan). What is reported of an older
/// plan's write does not count for the newer one.
#[test]
fn a_plan_is_cut_short_only_by_its_own_writes_unreported() {
    let mut e = engine();
    pin_guaranteed(&mut e);
    e.end_startup();
    let container =
        |n: u32| format!("kubepods/burstable/pod11111111-2222-3333-4444-555555555555/c{n}");
    // A shared container comes with every CPU: narrowed to the pool.
    add(&mut e, &container(1), "0-15", None);
    let first = e.plan();
    assert_eq!(first.writes.len(), 1, "{:?}", first.writes);
    assert!(!first.more);
    // It is gone before its write is made: the write finds it gone.
    e.forget(&container(1));
    e.not_made(&first.writes[0]);
    add(&mut e, &container(2), "0-15", None);
    let second = e.plan();
    assert!(!second.more, "nothing of the first plan is left to make");
    // Unreported, the second plan's write cuts the next plan short; the
    // first plan's write reported now does not stand for it.
    made(&mut e, &first.writes);
    add(&mut e, &container(3), "0-15", None);
    let third = e.plan();
    assert!(third.more, "the second plan's write was never reported");
    made(&mut e, &second.writes);
    made(&mut e, &third.writes);
    let owed = e.plan_owed();
    made(&mut e, &owed.writes);
    add(&mut e, &container(4), "0-15", None);
    assert!(!e.plan().more, "every write reported");
}

/// cgroup v1 with the root balancing: a shared cgroup's load-balancing flag
/// goes off before its first write (after which its writes are cheap), or
/// last of a plan that does not write it, once; exclusive cgroups, and every
/// cgroup while the root's flag is 0, are left alone.
#[test]
fn a_shared_cgroups_balance_flag_goes_off_before_its_first_write() {
    let quiet = |on: bool| {
        let mut e = engine();
        let mut s = e.settings().clone();
        s.quiet_balance = on;
        e.set_settings(s);
        kube_tree(&mut e);
        add(
            &mut e,
            "kubepods/pod99999999-2222-3333-4444-555555555555",
            "0-15",
            None,
        );
        add(&mut e, GUARANTEED, "0-15", want(2));
        e
    };
    let burstable = "kubepods/burstable/pod11111111-2222-3333-4444-555555555555/aaaa";
    let mut e = quiet(true);
    let writes = apply(&mut e);
    let flags: Vec<&str> = writes
        .iter()
        .filter(|w| w.file == File::Balance)
        .map(|w| &*w.rel)
        .collect();
    assert_eq!(flags, [burstable, "system.slice"], "{writes:?}");
    for rel in flags {
        let flag = writes
            .iter()
            .position(|w| &*w.rel == rel && w.file == File::Balance);
        let cpus = writes
            .iter()
            .position(|w| &*w.rel == rel && w.file == File::Cpus);
        assert!(flag < cpus, "flag first: {writes:?}");
    }
    let flag = writes.iter().find(|w| w.file == File::Balance).unwrap();
    assert_eq!(flag.data(), "0");
    assert_eq!(flag.file.name(), "cpuset.sched_load_balance");
    // A shared cgroup that needs no cpuset write gets its flag off anyway,
    // after every cpuset write, so the next change of the pool finds it off.
    let pool = e.shared_pool().to_string();
    add(&mut e, "system.slice/late.service", &pool, None);
    let writes = apply(&mut e);
    assert_eq!(writes.len(), 1, "{writes:?}");
    assert_eq!(
        (&*writes[0].rel, writes[0].file),
        ("system.slice/late.service", File::Balance)
    );
    // The pool changes again: no second flag write.
    e.forget(GUARANTEED);
    let writes = apply(&mut e);
    assert!(
        writes
            .iter()
            .any(|w| &*w.rel == burstable && w.file == File::Cpus)
    );
    assert!(writes.iter().all(|w| w.file != File::Balance), "{writes:?}");
    // The root's flag is 0: never.
    let mut e = quiet(false);
    assert!(apply(&mut e).iter().all(|w| w.file != File::Balance));
}

/// Found by the cut-short property test's check of v1's rules: a workload
/// that waited in the shared pool with a cgroup below it, once pinned, had
/// its own cpuset narrowed while the one below still held the pool (EBUSY
/// on v1). The cgroups below it now come along, and first.
#[test]
fn a_waiting_workload_pinned_narrows_the_cgroups_below_it_first() {
    let mut e = engine();
    kube_tree(&mut e);
    let pod = "kubepods/pod99999999-2222-3333-4444-555555555555";
    add(&mut e, pod, "0-15", None);
    add(&mut e, GUARANTEED, "0-15", want(16));
    let sub = format!("{GUARANTEED}/sub");
    add(&mut e, &sub, "0-15", None);
    apply(&mut e);
    e.end_startup();
    assert!(
        e.workloads()[&format!("cgroup:{GUARANTEED}")]
            .pending
            .is_some()
    );
    add(&mut e, GUARANTEED, "0-15", want(2));
    let writes = e.plan().writes;
    let pos = |rel: &str| {
        writes
            .iter()
            .position(|w| &*w.rel == rel && w.file == File::Cpus)
    };
    let (child, parent) = (pos(&sub), pos(GUARANTEED));
    assert!(child.is_some() && child < parent, "{writes:?}");
}

/// cgroup v2: a change of the shared pool is a write per shared subtree,
/// not per container. Containers made empty (as runtimes make them on v2)
/// follow their QoS slice; only a cgroup whose parent holds exclusive CPUs
/// too (a Guaranteed pod's other containers) is written.
#[test]
fn a_v2_shared_pool_change_writes_the_subtrees_not_the_containers() {
    let mut e = engine_v2();
    for rel in ["kubepods", "kubepods/burstable", "system.slice"] {
        add(&mut e, rel, "", None);
    }
    let pods: Vec<String> = (0..20)
        .map(|i| format!("kubepods/burstable/pod{i:08}-2222-3333-4444-555555555555"))
        .collect();
    for pod in &pods {
        add(&mut e, pod, "", None);
        add(&mut e, &format!("{pod}/c"), "", None);
    }
    apply(&mut e);
    assert_v2_targets_hold(&e).unwrap();
    e.end_startup();
    let gpod = "kubepods/pod99999999-2222-3333-4444-555555555555";
    add(&mut e, gpod, "", None);
    add(&mut e, &format!("{gpod}/pause"), "", None);
    apply(&mut e);
    // The pin, then the pool: the QoS slice and system.slice, and the
    // Guaranteed pod's pause container (its pod holds the exclusive CPUs).
    add(&mut e, GUARANTEED, "", want(4));
    let mut written: Vec<String> = Vec::new();
    for _ in 0..2 {
        written.extend(apply(&mut e).iter().map(|w| w.rel.to_string()));
    }
    assert_v2_targets_hold(&e).unwrap();
    let shared = e.shared_pool();
    assert_eq!(shared.len(), 12);
    assert_eq!(target(&e, "kubepods/burstable"), shared);
    assert_eq!(target(&e, &format!("{}/c", pods[7])), shared);
    written.sort();
    written.dedup();
    // (The pod itself holds the shared pool and the pin: all of kubepods'.)
    assert_eq!(
        written,
        [
            "kubepods/burstable".to_string(),
            GUARANTEED.into(),
            format!("{gpod}/pause"),
            "system.slice".into(),
        ],
    );
    // The release: the same few.
    e.forget(GUARANTEED);
    let written: Vec<String> = apply(&mut e).iter().map(|w| w.rel.to_string()).collect();
    assert_v2_targets_hold(&e).unwrap();
    assert!(written.len() <= 4, "{written:?}");
    assert!(written.iter().all(|r| !r.ends_with("/c")), "{written:?}");
}

/// The effective set read back after a `cpuset.cpus` write is checked only
/// when the write made the cgroup's target: v2's silent fallback to the
/// parent's set is then a failure, while a widening write on the way (old ∪
/// new, which may list CPUs the parent no longer has) is not.
#[test]
fn only_a_write_of_the_target_is_verified() {
    let mut e = engine_v2();
    kube_tree(&mut e);
    let pod = "kubepods/pod99999999-2222-3333-4444-555555555555";
    add(&mut e, pod, "", None);
    add(&mut e, GUARANTEED, "", want(4));
    let writes = apply(&mut e);
    let pin = writes
        .iter()
        .find(|w| &*w.rel == GUARANTEED && w.file == File::Cpus)
        .expect("the pin is written")
        .clone();
    let failure = |e: &Engine| e.cgroups[GUARANTEED].failure.clone();
    e.verified(&pin, (*pin.set).clone());
    assert!(failure(&e).is_none(), "what was written");
    let widening = Write {
        set: Arc::new(set("0-15")),
        ..pin.clone()
    };
    e.verified(&widening, set("0-3"));
    assert!(failure(&e).is_none(), "a write on the way is not checked");
    e.verified(&pin, set("0-15"));
    let f = failure(&e).expect("the fallback is a failure");
    assert!(
        f.message.contains("differ from the requested"),
        "{}",
        f.message
    );
}

/// The soak's mutant ([`Engine::forget_at_release`], `tests/soak`): a
/// release (of a waiting workload, here) also forgets a pinned one, whose
/// cgroup goes to the shared pool while it lives and stays there.
#[cfg(debug_assertions)]
#[test]
fn the_mutant_hook_makes_a_release_unpin_another_workload() {
    let mut e = engine();
    e.forget_at_release(true);
    kube_tree(&mut e);
    add(&mut e, "kubepods/a", "0-15", want(2));
    add(&mut e, "kubepods/waits", "0-15", want(20));
    apply(&mut e);
    assert_eq!(target(&e, "kubepods/a").len(), 2);
    e.forget("kubepods/waits");
    apply(&mut e);
    assert!(!e.workloads().contains_key("cgroup:kubepods/a"));
    assert_eq!(target(&e, "kubepods/a"), e.shared_pool());
    assert_eq!(e.shared_pool(), e.topology().online().clone());
}
