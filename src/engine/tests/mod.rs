//! The engine's tests: every decision on plain values, with the helpers
//! that build trees; `memory.rs` holds memory nodes and what a release gives
//! back, `cri.rs` what containerd's CRI and systemd brought (a pod's
//! annotation, a write over a pin read whole), `sequences.rs` drives random
//! sequences of events, `slurm.rs` Slurm's tree and what holds it.

use super::*;
use crate::cgroup::Observed;
use crate::cgroup::layout::classify;
use crate::intent::Intent;
use crate::topology::synthetic::Shape;
use proptest::prelude::*;

fn set(s: &str) -> CpuSet {
    s.parse().unwrap()
}

/// 16 CPUs: 2 sockets × 4 cores × 2 threads; core c is {c, c+8}.
fn topo() -> Topology {
    Shape {
        sockets: 2,
        numa_per_socket: 1,
        l3_per_numa: 1,
        cores_per_l3: 4,
        threads_per_core: 2,
    }
    .build()
}

fn engine() -> Engine {
    Engine::new(
        topo(),
        Settings {
            reserved: set("0,8"),
            scope: Scope::new(vec!["kubepods".into()], vec!["system.slice".into()], vec![]),
            ..Settings::default()
        },
        None,
    )
}

/// [`engine`] on cgroup v2: an empty `cpuset.cpus` inherits the parent's.
fn engine_v2() -> Engine {
    let mut e = engine();
    let mut s = e.settings().clone();
    s.empty_inherits = true;
    e.set_settings(s);
    e
}

/// What every known cgroup gets on cgroup v2, from the sets the engine
/// knows (its own ∩ its parent's, the parent's when that is empty; the
/// root has every online CPU), in path order. Cgroups below an unknown
/// parent other than the root are left out.
fn v2_effective(e: &Engine) -> BTreeMap<Rel, CpuSet> {
    let online = e.topology().online().clone();
    let mut got: BTreeMap<Rel, CpuSet> = BTreeMap::new();
    for (rel, c) in &e.cgroups {
        let parent = match crate::cgroup::parent(rel) {
            Some("") => online.clone(),
            Some(p) => match got.get(p) {
                Some(p) => p.clone(),
                None => continue,
            },
            None => continue,
        };
        let own = c.cpus.as_deref().cloned().unwrap_or_default();
        let both = own.intersection(&parent);
        got.insert(rel.clone(), if both.is_empty() { parent } else { both });
    }
    got
}

/// On v2, every cgroup with a target gets it, written or inherited (but
/// where a write failed, there or above).
fn assert_v2_targets_hold(e: &Engine) -> Result<(), String> {
    let got = v2_effective(e);
    let online = e.topology().online();
    let failed = |rel: &str| {
        let mut at = Some(rel);
        while let Some(r) = at {
            if e.cgroups.get(r).is_some_and(|c| c.failure.is_some()) {
                return true;
            }
            at = crate::cgroup::parent(r);
        }
        false
    };
    for (rel, c) in &e.cgroups {
        if failed(rel) {
            continue;
        }
        if let (Some(t), Some(g)) = (&c.target, got.get(rel))
            && t.intersection(online) != *g
        {
            return Err(format!("{rel} gets {g}, not its target {t}"));
        }
    }
    Ok(())
}

fn want(cpus: usize) -> Option<Intent> {
    Some(Intent {
        cpus,
        source: Source::Xattr,
        numa: Vec::new(),
        whole_cores: false,
        class: None,
        near: Vec::new(),
        device_alignment: None,
        devices: Vec::new(),
    })
}

/// Adds cgroup `rel` with `cpus` as its current cpuset.
fn add(e: &mut Engine, rel: &str, cpus: &str, intent: Option<Intent>) {
    let obs = Observed {
        rel: rel.into(),
        cpus: Some(set(cpus)),
        mems: Some(set("0-1")),
        ..Observed::default()
    };
    reading(e, obs, intent, &format!("cgroup:{rel}"));
}

/// Upserts what was "read", as the daemon does.
fn reading(e: &mut Engine, obs: Observed, intent: Option<Intent>, key: &str) {
    let kind = classify(&obs.rel);
    e.upsert(Reading {
        obs,
        kind,
        intent,
        key: key.into(),
        problem: None,
        bundle: None,
        lifted: None,
        lifted_unkept: false,
        baseline: None,
        mems_read: true,
    });
}

/// Reports `writes` made, as the daemon does once they succeed.
fn made(e: &mut Engine, writes: &[Write]) {
    for w in writes {
        e.written(w, Ok(()));
    }
}

/// Applies every write as the kernel would (no rules), like a fake tree:
/// a plan's, then the owed plan's when it asks for one.
fn apply(e: &mut Engine) -> Vec<Write> {
    let mut plan = e.plan();
    let mut writes = Vec::new();
    loop {
        made(e, &plan.writes);
        writes.extend(plan.writes);
        if !plan.more {
            return writes;
        }
        plan = e.plan_owed();
    }
}

fn target(e: &Engine, rel: &str) -> CpuSet {
    e.cgroups[rel].target.as_deref().cloned().unwrap()
}

fn kube_tree(e: &mut Engine) {
    add(e, "kubepods", "0-15", None);
    add(e, "kubepods/burstable", "0-15", None);
    add(
        e,
        "kubepods/burstable/pod11111111-2222-3333-4444-555555555555",
        "0-15",
        None,
    );
    add(
        e,
        "kubepods/burstable/pod11111111-2222-3333-4444-555555555555/aaaa",
        "0-15",
        None,
    );
    add(e, "system.slice", "0-15", None);
}

const GUARANTEED: &str = "kubepods/pod99999999-2222-3333-4444-555555555555/bbbb";

/// The kubepods tree with [`GUARANTEED`] asking for 4 CPUs, planned and
/// written: its CPUs.
fn pin_guaranteed(e: &mut Engine) -> CpuSet {
    kube_tree(e);
    add(
        e,
        "kubepods/pod99999999-2222-3333-4444-555555555555",
        "0-15",
        None,
    );
    add(e, GUARANTEED, "0-15", want(4));
    apply(e);
    let pinned = target(e, GUARANTEED);
    assert_eq!(pinned.len(), 4);
    pinned
}

/// A reading that could not read part of what decides the request (the
/// directory, the xattr, the owner, the CPU limit: EMFILE, EIO) asks for
/// nothing as read; it does not unpin the workload, and its sets that were
/// not read stay as known. A whole reading that asks for nothing does.
#[test]
fn a_reading_that_could_not_read_the_request_does_not_unpin() {
    let mut e = engine();
    let pinned = pin_guaranteed(&mut e);
    let key = format!("cgroup:{GUARANTEED}");

    // The directory could not be opened: nothing read at all.
    let failed = Observed {
        rel: GUARANTEED.into(),
        error: Some(format!("{GUARANTEED}: Too many open files")),
        unsure: true,
        ..Observed::default()
    };
    reading(&mut e, failed, None, "");
    assert!(apply(&mut e).is_empty(), "nothing is written");
    assert_eq!(e.workloads()[&key].cpus.as_ref(), Some(&pinned));
    assert_eq!(e.cgroups[GUARANTEED].cpus.as_deref(), Some(&pinned));
    assert!(
        e.cgroups[GUARANTEED].failure.is_some(),
        "the error is shown"
    );

    // The sets read, the limit not: the request stands, the sets are taken.
    let partial = Observed {
        rel: GUARANTEED.into(),
        cpus: Some(pinned.clone()),
        mems: Some(set("0-1")),
        unsure: true,
        ..Observed::default()
    };
    reading(&mut e, partial, None, "");
    assert!(apply(&mut e).is_empty());
    assert_eq!(e.workloads()[&key].cpus.as_ref(), Some(&pinned));

    // Read whole, asking for nothing: released.
    add(&mut e, GUARANTEED, &pinned.to_string(), None);
    apply(&mut e);
    assert!(e.workloads().is_empty());
}

/// A failed read shows in the status until a reading reads the cgroup
/// whole; a failed write stays until a write succeeds.
#[test]
fn a_failed_read_is_cleared_by_a_whole_reading_a_failed_write_is_not() {
    let mut e = engine();
    kube_tree(&mut e);
    apply(&mut e);
    let rel = "kubepods/burstable/pod11111111-2222-3333-4444-555555555555/aaaa";
    let cpus = target(&e, rel);
    let failed = Observed {
        rel: rel.into(),
        cpus: Some(cpus.clone()),
        error: Some(format!("{rel}/cpuset.mems: Input/output error")),
        ..Observed::default()
    };
    reading(&mut e, failed, None, "");
    assert_eq!(e.failing_count(), 1, "the error is shown");
    add(&mut e, rel, &cpus.to_string(), None);
    assert_eq!(e.failing_count(), 0, "read whole: the error passed");

    let write = Write {
        rel: rel.into(),
        file: File::Cpus,
        set: Arc::new(cpus.clone()),
        plan: 0,
    };
    let failure = Failure {
        message: "EBUSY".into(),
        errno: Some(libc::EBUSY),
        read: false,
    };
    e.written(&write, Err(failure));
    let failed_again = Observed {
        rel: rel.into(),
        cpus: Some(cpus.clone()),
        error: Some(format!("{rel}: Too many open files")),
        unsure: true,
        ..Observed::default()
    };
    reading(&mut e, failed_again, None, "");
    add(&mut e, rel, &cpus.to_string(), None);
    assert_eq!(
        e.failing().first().map(|f| f.error.as_str()),
        Some("EBUSY"),
        "a failed write stands, whatever a reading says"
    );
    e.written(&write, Ok(()));
    assert_eq!(e.failing_count(), 0);
}

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

mod cri;
mod devices;
mod memory;
mod nri;
mod resize;
mod sequences;
mod slurm;
mod strict;

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
