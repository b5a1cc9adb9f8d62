//! Memory nodes (`align_memory`: an exclusive workload's nodes, written
//! before its CPUs, children first) and what a released cgroup is given
//! back: its parent's CPUs and all memory nodes, once, whoever wrote what
//! it held.

use super::*;

#[test]
fn align_memory_puts_mems_on_the_nodes_of_the_exclusive_cpus() {
    let mut e = aligning_pod();
    add(&mut e, "kubepods/pod1/c", "0-15", want(4));
    let writes = apply(&mut e);
    let cpus = target(&e, "kubepods/pod1/c");
    let node = e.topology().numa_of(&cpus);
    assert_eq!(node.len(), 1);
    let mems: CpuSet = node.into_iter().collect();
    let pos = |file| {
        writes
            .iter()
            .position(|w| &*w.rel == "kubepods/pod1/c" && w.file == file)
    };
    assert_eq!(e.cgroups["kubepods/pod1/c"].mems.as_deref(), Some(&mems));
    assert!(pos(File::Mems) < pos(File::Cpus), "mems first: {writes:?}");
    // Shared cgroups keep all memory nodes.
    let shared = "kubepods/burstable/pod11111111-2222-3333-4444-555555555555/aaaa";
    assert_eq!(e.cgroups[shared].mems.as_deref(), Some(&set("0-1")));
}

/// An [`aligning_engine`] that knows the kubepods tree and `kubepods/pod1`.
fn aligning_pod() -> Engine {
    let mut e = aligning_engine();
    kube_tree(&mut e);
    add(&mut e, "kubepods/pod1", "0-15", None);
    e
}

fn aligning_engine() -> Engine {
    Engine::new(
        topo(),
        Settings {
            reserved: set("0,8"),
            scope: Scope::new(vec!["kubepods".into()], vec![], vec![]),
            align_memory: true,
            mems_all: set("0-1"),
            ..Settings::default()
        },
        None,
    )
}

/// Reads cgroup `rel` again as the kernel has it (what was last written)
/// with `intent`.
fn reread(e: &mut Engine, rel: &str, intent: Option<Intent>) {
    let c = e.cgroups[rel].clone();
    let obs = Observed {
        rel: rel.into(),
        cpus: c.cpus.as_deref().cloned(),
        mems: c.mems.as_deref().cloned(),
        ..Observed::default()
    };
    let key = if intent.is_some() {
        format!("cgroup:{rel}")
    } else {
        String::new()
    };
    reading(e, obs, intent, &key);
}

fn mems(e: &Engine, rel: &str) -> CpuSet {
    e.cgroups[rel].mems.as_deref().cloned().unwrap_or_default()
}

#[test]
fn aligned_mems_are_given_back_when_alignment_ends() {
    let mut e = aligning_pod();
    add(&mut e, "kubepods/pod1/c", "0-15", want(4));
    apply(&mut e);
    let aligned = mems(&e, "kubepods/pod1/c");
    assert_eq!(aligned.len(), 1, "one node");
    // Alignment turned off (a reload): all nodes again, once.
    let mut settings = e.settings().clone();
    settings.align_memory = false;
    e.set_settings(settings);
    reread(&mut e, "kubepods/pod1/c", want(4));
    let writes = apply(&mut e);
    assert!(
        writes
            .iter()
            .any(|w| w.file == File::Mems && *w.set == set("0-1")),
        "{writes:?}"
    );
    assert_eq!(mems(&e, "kubepods/pod1/c"), set("0-1"));
    assert!(!e.cgroups["kubepods/pod1/c"].mems_ours);
    assert!(apply(&mut e).is_empty(), "nothing more to write");

    // On again, then the workload stops asking: all nodes back as well.
    let mut settings = e.settings().clone();
    settings.align_memory = true;
    e.set_settings(settings);
    apply(&mut e);
    assert_eq!(mems(&e, "kubepods/pod1/c").len(), 1);
    reread(&mut e, "kubepods/pod1/c", None);
    apply(&mut e);
    assert_eq!(mems(&e, "kubepods/pod1/c"), set("0-1"));
}

#[test]
fn mems_narrow_children_first() {
    let mut e = aligning_pod();
    add(&mut e, "kubepods/pod1/c", "0-15", want(4));
    add(&mut e, "kubepods/pod1/c/sub", "0-15", None);
    let writes = apply(&mut e);
    let pos = |rel: &str| {
        writes
            .iter()
            .position(|w| &*w.rel == rel && w.file == File::Mems)
            .unwrap_or_else(|| panic!("no mems write of {rel}: {writes:?}"))
    };
    // v1 refuses a parent's mems without its children's nodes.
    assert!(
        pos("kubepods/pod1/c/sub") < pos("kubepods/pod1/c"),
        "{writes:?}"
    );
    assert_eq!(mems(&e, "kubepods/pod1/c"), mems(&e, "kubepods/pod1/c/sub"));
}

#[test]
fn a_cgroup_already_on_what_it_gets_back_is_left_alone() {
    let mut e = engine();
    add(&mut e, "hpc", "0-15", None);
    add(&mut e, "hpc/job", "0-15", want(2));
    // Not managed: the job is Exclusive only by its request.
    apply(&mut e);
    assert!(e.cgroups["hpc/job"].ours);
    // It stops asking, and someone already put it back on its parent's CPUs.
    add(&mut e, "hpc/job", "0-15", None);
    let writes = apply(&mut e);
    assert!(writes.iter().all(|w| &*w.rel != "hpc/job"), "{writes:?}");
    assert!(
        !e.cgroups["hpc/job"].ours,
        "given back: left alone from now on"
    );
}

/// A workload whose cgroup already holds its CPUs and aligned memory nodes
/// when the daemon plans it (a restarted daemon adopting the live sets, no
/// write made) holds the daemon's: released, it gets its parent's back.
#[test]
fn adopted_sets_are_given_back_on_release() {
    let mut e = aligning_pod();
    add(&mut e, "kubepods/pod1/c", "0-15", want(2));
    apply(&mut e);
    let (cpus, nodes) = (target(&e, "kubepods/pod1/c"), mems(&e, "kubepods/pod1/c"));
    // A new engine reads the same tree (a restart) and adopts them.
    let mut e = aligning_pod();
    let obs = Observed {
        rel: "kubepods/pod1/c".into(),
        cpus: Some(cpus.clone()),
        mems: Some(nodes),
        ..Observed::default()
    };
    reading(&mut e, obs, want(2), "cgroup:kubepods/pod1/c");
    let writes = apply(&mut e);
    assert!(
        writes.iter().all(|w| &*w.rel != "kubepods/pod1/c"),
        "{writes:?}"
    );
    assert_eq!(target(&e, "kubepods/pod1/c"), cpus);
    assert!(e.cgroups["kubepods/pod1/c"].ours);
    assert!(e.cgroups["kubepods/pod1/c"].mems_ours);
    reread(&mut e, "kubepods/pod1/c", None);
    apply(&mut e);
    assert_eq!(
        e.cgroups["kubepods/pod1/c"].cpus.as_deref(),
        Some(&set("0-15"))
    );
    assert_eq!(mems(&e, "kubepods/pod1/c"), set("0-1"));
}

/// With `align_memory`, a workload whose CPUs span every node (or one still
/// waiting for CPUs, on the shared pool) holds all the nodes it would be
/// given back: they are not marked as the daemon's, so a release that finds
/// it already on its parent's CPUs leaves it alone.
#[test]
fn all_memory_nodes_are_not_marked_as_the_daemons() {
    let mut e = aligning_engine();
    kube_tree(&mut e);
    add(&mut e, "hpc", "0-15", None);
    add(&mut e, "hpc/job", "0-15", want(10));
    apply(&mut e);
    assert_eq!(mems(&e, "hpc/job"), set("0-1"));
    assert!(e.cgroups["hpc/job"].ours);
    assert!(!e.cgroups["hpc/job"].mems_ours);
    add(&mut e, "hpc/job", "0-15", None);
    let writes = apply(&mut e);
    assert!(writes.iter().all(|w| &*w.rel != "hpc/job"), "{writes:?}");
    assert!(
        !e.cgroups["hpc/job"].ours,
        "given back: left alone from now on"
    );
    assert_eq!(e.cgroups["hpc/job"].target, None);
}

/// A grow onto another node widens the memory nodes, before the CPUs; a
/// shrink back onto one node narrows them (issue #34).
#[test]
fn a_resize_across_nodes_takes_the_memory_nodes_with_it() {
    let mut e = aligning_pod();
    let c = "kubepods/pod1/c";
    add(&mut e, c, "0-15", want(4));
    apply(&mut e);
    let four = target(&e, c);
    assert_eq!(mems(&e, c).len(), 1);
    // 10 CPUs do not fit on one node of 7 usable.
    reread(&mut e, c, want(10));
    let writes = apply(&mut e);
    let ten = target(&e, c);
    assert!(four.is_subset(&ten) && ten.len() == 10, "{four} -> {ten}");
    assert_eq!(mems(&e, c), set("0-1"));
    let pos = |file| writes.iter().position(|w| &*w.rel == c && w.file == file);
    assert!(
        pos(File::Mems) < pos(File::Cpus),
        "mems widen first: {writes:?}"
    );
    // Back to 4: the baseline, on its one node again.
    reread(&mut e, c, want(4));
    apply(&mut e);
    assert_eq!(target(&e, c), four);
    assert_eq!(mems(&e, c).len(), 1);
}
