//! Resizes (issue #34): a workload asking for another count keeps the CPUs
//! it has and gains or drops only CPUs around them; one that cannot be met
//! keeps its set and says why.

use super::*;

const W: &str = "kubepods/w";

fn cpus(e: &Engine) -> CpuSet {
    e.workloads()[&format!("cgroup:{W}")].cpus.clone().unwrap()
}

fn resize_of(e: &Engine) -> Option<Pending> {
    e.workloads()[&format!("cgroup:{W}")].resize.clone()
}

/// Reads W as a restarted daemon would: live `cpus`, asking `intent`, with
/// `baseline` kept on the cgroup ([`crate::cgroup::XATTR_BASELINE`]).
fn read_w(e: &mut Engine, cpus: &str, intent: Option<Intent>, baseline: Option<CpuSet>) {
    let obs = Observed {
        rel: W.into(),
        cpus: Some(set(cpus)),
        mems: Some(set("0-1")),
        ..Observed::default()
    };
    let kind = classify(&obs.rel);
    e.upsert(Reading {
        obs,
        kind,
        intent,
        key: format!("cgroup:{W}"),
        problem: None,
        bundle: None,
        lifted: None,
        lifted_unkept: false,
        baseline,
        mems_read: true,
    });
}

/// The kubepods tree and W pinned on `n` CPUs.
fn pinned(n: usize) -> (Engine, CpuSet) {
    let mut e = engine();
    kube_tree(&mut e);
    add(&mut e, W, "0-15", want(n));
    apply(&mut e);
    let c = cpus(&e);
    assert_eq!(c.len(), n);
    (e, c)
}

#[test]
fn a_grow_keeps_the_cpus_and_takes_their_siblings_first() {
    // One thread of a core: the grow takes its sibling first.
    let (mut e, one) = pinned(1);
    add(&mut e, W, "0-15", want(2));
    apply(&mut e);
    let two = cpus(&e);
    let cpu = one.iter().next().unwrap();
    let sibling = if cpu < 8 { cpu + 8 } else { cpu - 8 };
    assert_eq!(two, one.union(&[sibling].into_iter().collect()));
    add(&mut e, W, "0-15", want(4));
    apply(&mut e);
    let four = cpus(&e);
    assert!(two.is_subset(&four) && four.len() == 4, "{two} -> {four}");
    assert_eq!(resize_of(&e), None);
    // The shared pool lost what it gained.
    assert!(e.shared_pool().is_disjoint(&four));
}

#[test]
fn a_shrink_keeps_the_baseline_and_one_below_it_is_refused() {
    let (mut e, base) = pinned(2);
    add(&mut e, W, "0-15", want(6));
    apply(&mut e);
    let six = cpus(&e);
    add(&mut e, W, "0-15", want(3));
    apply(&mut e);
    let three = cpus(&e);
    assert!(
        three.is_subset(&six) && base.is_subset(&three),
        "{six} -> {three} (baseline {base})"
    );
    assert!(e.shared_pool().is_disjoint(&three));
    assert!(
        six.difference(&three).is_subset(&e.shared_pool()),
        "the dropped CPUs are shared"
    );
    // Below the baseline: the set stays, and the workload says why.
    add(&mut e, W, "0-15", want(1));
    apply(&mut e);
    assert_eq!(cpus(&e), three);
    let why = resize_of(&e).expect("a resize pending").reason;
    assert!(
        why.contains(&format!("fewer than the 2 it was first given ({base})")),
        "{why}"
    );
    // Back to what it holds: nothing is pending.
    add(&mut e, W, "0-15", want(3));
    apply(&mut e);
    assert_eq!((cpus(&e), resize_of(&e)), (three, None));
}

#[test]
fn a_grow_that_does_not_fit_keeps_the_set_until_cpus_free_up() {
    let (mut e, two) = pinned(2);
    // Another workload takes all but 2 of the 14 usable CPUs.
    add(&mut e, "kubepods/big", "0-15", want(10));
    apply(&mut e);
    add(&mut e, W, "0-15", want(6));
    apply(&mut e);
    assert_eq!(cpus(&e), two, "never unpinned, never moved");
    let p = resize_of(&e).expect("a resize pending");
    assert_eq!((p.requested, p.available), (6, 2));
    assert!(
        p.reason.contains("cannot grow from 2 to 6 CPUs"),
        "{}",
        p.reason
    );
    e.forget("kubepods/big");
    apply(&mut e);
    let six = cpus(&e);
    assert!(two.is_subset(&six) && six.len() == 6, "{two} -> {six}");
    assert_eq!(resize_of(&e), None);
}

/// A restart keeps a resized workload's set and baseline (the state file):
/// a set of another size than asked is adopted when the file says it was
/// the workload's, and the resize goes on around it.
#[test]
fn a_restart_keeps_a_resized_set_and_its_baseline() {
    let saved = |requested| SavedState {
        online: set("0-15"),
        assignments: [(
            format!("cgroup:{W}"),
            SavedAssignment {
                cpus: set("4-7"),
                requested,
                cgroups: vec![W.into()],
                baseline: Some(set("4-5")),
            },
        )]
        .into(),
        ..SavedState::default()
    };
    let restarted = |asked: usize| {
        let mut e = Engine::new(topo(), engine().settings().clone(), Some(saved(asked)));
        kube_tree(&mut e);
        add(&mut e, W, "4-7", want(asked));
        apply(&mut e);
        e
    };
    // Asked for 6 while holding 4-7: adopted, then grown around them.
    let e = restarted(6);
    let six = cpus(&e);
    assert!(set("4-7").is_subset(&six) && six.len() == 6, "{six}");
    // Asked for 1, below the baseline 4-5: adopted as it is, the resize
    // still refused.
    let e = restarted(1);
    assert_eq!(cpus(&e), set("4-7"));
    assert!(resize_of(&e).unwrap().reason.contains("first given (4-5)"));
    // The state file says the baseline when it is not the set.
    let mut e = restarted(6);
    assert_eq!(
        e.saved_state().assignments[&format!("cgroup:{W}")].baseline,
        Some(set("4-5"))
    );
    add(&mut e, W, "4-7", want(2));
    apply(&mut e);
    assert_eq!(cpus(&e), set("4-5"));
    assert_eq!(
        e.saved_state().assignments[&format!("cgroup:{W}")].baseline,
        None
    );
}

/// Each resize is told once: one made, and one that waits once per count
/// asked (not at every plan while it waits).
#[test]
fn each_resize_is_told_once() {
    let (mut e, two) = pinned(2);
    e.take_resizes();
    add(&mut e, W, "0-15", want(4));
    apply(&mut e);
    let four = cpus(&e);
    let told = e.take_resizes();
    assert_eq!(told.len(), 1, "{told:?}");
    assert_eq!(
        (
            told[0].requested,
            &told[0].old,
            &told[0].new,
            &told[0].pending
        ),
        (4, &two, &four, &None)
    );
    add(&mut e, W, "0-15", want(1));
    apply(&mut e);
    add(&mut e, "kubepods/other", "0-15", want(1));
    apply(&mut e);
    let told = e.take_resizes();
    assert_eq!(told.len(), 1, "told once while it waits: {told:?}");
    assert_eq!(
        (told[0].old.clone(), told[0].new.clone()),
        (four.clone(), four)
    );
    assert!(
        told[0]
            .pending
            .as_deref()
            .unwrap()
            .contains("fewer than the 2")
    );
    add(&mut e, W, "0-15", want(4));
    apply(&mut e);
    assert_eq!(e.take_resizes(), Vec::new(), "back to what it holds");
}

/// A pinned workload owes its baseline on each of its cgroups, once; a
/// resize keeps it; a release empties it.
#[test]
fn a_pinned_workload_keeps_its_baseline_on_its_cgroups() {
    let (mut e, two) = pinned(2);
    assert_eq!(e.baselines_owed(), vec![(Rel::from(W), Some(two.clone()))]);
    assert!(e.any_baseline_owed());
    e.baseline_kept(W, Some(two.clone()));
    assert_eq!(e.baselines_owed(), Vec::new());
    assert!(!e.any_baseline_owed());
    // Grown and back: the baseline stays what it was.
    for n in [4, 2] {
        add(&mut e, W, "0-15", want(n));
        apply(&mut e);
        e.baseline_kept(W, Some(two.clone()));
        assert_eq!(e.baselines_owed(), Vec::new(), "{n}");
    }
    // Released: its xattr is emptied, once.
    add(&mut e, W, "0-15", None);
    apply(&mut e);
    assert_eq!(e.baselines_owed(), vec![(Rel::from(W), None)]);
    assert!(e.any_baseline_owed());
    e.baseline_kept(W, None);
    assert_eq!(e.baselines_owed(), Vec::new());
    assert!(!e.any_baseline_owed());
}

/// With the state file lost, the baseline kept on the cgroup
/// ([`crate::cgroup::XATTR_BASELINE`]) makes a live set of another size the
/// workload's, and the resize keeps that baseline.
#[test]
fn a_lost_state_file_keeps_the_baseline_kept_on_the_cgroup() {
    let restarted = |asked: usize, kept: Option<&str>| {
        let mut e = Engine::new(topo(), engine().settings().clone(), None);
        kube_tree(&mut e);
        read_w(&mut e, "4-7", want(asked), kept.map(set));
        apply(&mut e);
        e
    };
    // Holding 4-7, first given 4-5, now asking for 3: it keeps 4-5 and one
    // more of what it holds.
    let e = restarted(3, Some("4-5"));
    let three = cpus(&e);
    assert!(
        set("4-5").is_subset(&three) && three.is_subset(&set("4-7")),
        "{three}"
    );
    // Asking for 1: below the baseline, refused; it keeps all it holds.
    let e = restarted(1, Some("4-5"));
    assert_eq!(cpus(&e), set("4-7"));
    assert!(resize_of(&e).unwrap().reason.contains("first given (4-5)"));
    // Without the xattr, or with one outside the set, a set of another
    // size is not the workload's: it is planned anew, its own baseline.
    for (asked, kept) in [(1, None), (3, Some("8-9"))] {
        let e = restarted(asked, kept);
        let w = &e.workloads()[&format!("cgroup:{W}")];
        assert_eq!(w.cpus.as_ref().map(CpuSet::len), Some(asked), "{kept:?}");
        assert_eq!((&w.baseline, &w.resize), (&w.cpus, &None), "{kept:?}");
    }
}

/// At start-up the state file's hint with no baseline saved means the
/// whole set is the baseline: an older baseline left on the cgroup does
/// not lower it.
#[test]
fn a_hint_without_a_baseline_outranks_an_older_kept_one() {
    let saved = SavedState {
        online: set("0-15"),
        assignments: [(
            format!("cgroup:{W}"),
            SavedAssignment {
                cpus: set("4-7"),
                requested: 4,
                cgroups: vec![W.into()],
                baseline: None,
            },
        )]
        .into(),
        ..SavedState::default()
    };
    let mut e = Engine::new(topo(), engine().settings().clone(), Some(saved));
    kube_tree(&mut e);
    read_w(&mut e, "4-7", want(2), Some(set("4-5")));
    apply(&mut e);
    assert_eq!(
        cpus(&e),
        set("4-7"),
        "a shrink below its baseline is refused"
    );
    assert!(resize_of(&e).unwrap().reason.contains("first given (4-7)"));
}

/// A live set that only its size says is the workload's is taken only as
/// the allocator could have given it: not half of two cores for a workload
/// that takes whole cores (a waiting workload's shared set, with
/// `strict_reservation`, may have the size it asks for).
#[test]
fn a_set_only_its_size_proves_must_be_one_the_allocator_could_give() {
    let restarted = |live: &str| {
        let mut e = Engine::new(topo(), engine().settings().clone(), None);
        kube_tree(&mut e);
        read_w(
            &mut e,
            live,
            Some(Intent {
                whole_cores: true,
                ..want(2).unwrap()
            }),
            None,
        );
        apply(&mut e);
        cpus(&e)
    };
    // 14 and 15 are threads of two cores (6,14 and 7,15): planned anew.
    let got = restarted("14-15");
    assert_ne!(got, set("14-15"));
    assert_eq!(topo().core_split(&got).1, 0, "{got}: whole cores");
    // A whole core is adopted as it is.
    assert_eq!(restarted("6,14"), set("6,14"));
}

/// A workload that takes whole cores never shrinks to half of one.
#[test]
fn a_whole_core_workload_never_shrinks_to_half_a_core() {
    let mut e = engine();
    kube_tree(&mut e);
    let whole = |n| {
        Some(Intent {
            whole_cores: true,
            ..want(n).unwrap()
        })
    };
    add(&mut e, W, "0-15", whole(2));
    apply(&mut e);
    add(&mut e, W, "0-15", whole(6));
    apply(&mut e);
    let six = cpus(&e);
    assert_eq!(topo().core_split(&six), (3, 0));
    add(&mut e, W, "0-15", whole(3));
    apply(&mut e);
    assert_eq!(cpus(&e), six);
    assert!(resize_of(&e).unwrap().reason.contains("not whole cores"));
}
