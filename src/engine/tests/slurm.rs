//! Slurm's tree (`slurmstepd.scope`) in a subtree the daemon confines: it
//! is never written, and what holds it is never narrowed, so that no job
//! loses a CPU Slurm gave it; and what that rule must leave as it was.

use super::*;

const SCOPE: &str = "system.slice/slurmstepd.scope";
const JOB: &str = "system.slice/slurmstepd.scope/job_7";
const STEP: &str = "system.slice/slurmstepd.scope/job_7/step_0";
const SERVICE: &str = "system.slice/cron.service";

/// Slurm's tree as Slurm makes it: the scope and slurmstepd's own cgroup
/// on what they were given, a job and its step on CPUs 4-7.
fn slurm_tree(e: &mut Engine, scope: &str) {
    add(e, SCOPE, scope, None);
    add(e, &format!("{SCOPE}/system"), scope, None);
    add(e, JOB, "4-7", None);
    add(e, STEP, "4-7", None);
}

fn in_tree(w: &Write) -> bool {
    crate::cgroup::is_within(&w.rel, SCOPE)
}

/// On v2 a job gets its own set ∩ its parent's: `system.slice` narrowed
/// to the shared pool would take CPUs from every job. It keeps them; its
/// other children are confined one by one.
#[test]
fn on_v2_the_holder_keeps_every_cpu_and_its_other_children_are_confined() {
    let mut e = engine_v2();
    kube_tree(&mut e);
    add(&mut e, SERVICE, "", None);
    slurm_tree(&mut e, "");
    add(&mut e, "kubepods/pod9", "0-15", None);
    add(&mut e, "kubepods/pod9/app", "", want(4));
    let writes = apply(&mut e);
    let pinned = target(&e, "kubepods/pod9/app");
    assert_eq!(pinned.len(), 4);
    assert!(
        !writes.iter().any(in_tree),
        "nothing written in Slurm's tree: {writes:?}"
    );
    assert!(
        !writes.iter().any(|w| &*w.rel == "system.slice"),
        "the holder is not written: {writes:?}"
    );
    assert_eq!(target(&e, "system.slice"), set("0-15"));
    assert_eq!(e.cgroups[SCOPE].role, Role::Foreign);
    assert_eq!(e.cgroups["system.slice"].role, Role::Holder);
    let shared = e.shared_pool();
    assert_eq!(target(&e, SERVICE), shared);
    let got = v2_effective(&e);
    assert_eq!(got[STEP], set("4-7"), "the job keeps what Slurm gave it");
    assert_eq!(got[SERVICE], shared, "a service keeps off the pin");
    assert_v2_targets_hold(&e).unwrap();
}

/// A tree that appears under a holder already narrowed (slurmd started
/// after pinctld) gets its holder widened back to its parent's CPUs at
/// once; when the tree goes, the holder is confined again.
#[test]
fn a_tree_that_appears_later_widens_its_holder_and_one_that_goes_narrows_it() {
    let mut e = engine_v2();
    kube_tree(&mut e);
    add(&mut e, SERVICE, "", None);
    add(&mut e, "kubepods/pod9", "0-15", None);
    add(&mut e, "kubepods/pod9/app", "", want(4));
    apply(&mut e);
    let shared = e.shared_pool();
    assert_eq!(
        target(&e, "system.slice"),
        shared,
        "confined while no tree is there"
    );

    slurm_tree(&mut e, "");
    let writes = apply(&mut e);
    assert!(!writes.iter().any(in_tree), "{writes:?}");
    assert!(
        writes
            .iter()
            .any(|w| &*w.rel == "system.slice" && *w.set == set("0-15")),
        "the holder is widened back: {writes:?}"
    );
    assert_eq!(v2_effective(&e)[STEP], set("4-7"));
    assert_eq!(v2_effective(&e)[SERVICE], shared);

    e.forget(SCOPE);
    apply(&mut e);
    assert_eq!(target(&e, "system.slice"), shared, "confined again");
    assert_eq!(e.cgroups["system.slice"].role, Role::Shared);
    assert_v2_targets_hold(&e).unwrap();
}

/// On v1 the holder keeps every CPU too (narrowing it would need Slurm's
/// job narrowed first); every other cgroup below it is confined.
#[test]
fn on_v1_the_holder_and_the_tree_are_left_as_they_are() {
    let mut e = engine();
    kube_tree(&mut e);
    add(&mut e, SERVICE, "0-15", None);
    slurm_tree(&mut e, "0-15");
    add(&mut e, "kubepods/pod9", "0-15", None);
    add(&mut e, "kubepods/pod9/app", "0-15", want(4));
    let writes = apply(&mut e);
    assert!(!writes.iter().any(in_tree), "{writes:?}");
    assert!(
        !writes.iter().any(|w| &*w.rel == "system.slice"),
        "{writes:?}"
    );
    assert_eq!(e.cgroups[SERVICE].cpus.as_deref(), Some(&e.shared_pool()));
    assert_eq!(e.cgroups[JOB].cpus.as_deref(), Some(&set("4-7")));
}

/// A request in Slurm's tree (a rule's glob over `system.slice`, an xattr)
/// asks for nothing: the tree is Slurm's.
#[test]
fn a_request_in_slurms_tree_asks_for_nothing() {
    let mut e = engine_v2();
    kube_tree(&mut e);
    add(&mut e, SCOPE, "", None);
    add(&mut e, JOB, "4-7", want(2));
    let writes = apply(&mut e);
    assert!(e.workloads().is_empty(), "{:?}", e.workloads());
    assert_eq!(e.cgroups[JOB].role, Role::Foreign);
    assert!(!writes.iter().any(in_tree), "{writes:?}");
}

/// slurmd in a pinned container (its tree below the workload's cgroup):
/// the workload keeps its CPUs, which Slurm saw when it started; the tree
/// is still never written.
#[test]
fn a_workload_that_holds_slurms_tree_keeps_its_cpus() {
    let mut e = engine_v2();
    kube_tree(&mut e);
    add(&mut e, "kubepods/pod9", "0-15", None);
    add(&mut e, "kubepods/pod9/slurmd", "", want(4));
    apply(&mut e);
    let pinned = target(&e, "kubepods/pod9/slurmd");
    assert_eq!(pinned.len(), 4);
    let tree = "kubepods/pod9/slurmd/slurmstepd.scope";
    add(&mut e, tree, "", None);
    add(&mut e, &format!("{tree}/job_1"), "", None);
    let writes = apply(&mut e);
    assert_eq!(target(&e, "kubepods/pod9/slurmd"), pinned, "{writes:?}");
    assert_eq!(e.cgroups[tree].role, Role::Foreign);
    assert!(
        !writes
            .iter()
            .any(|w| crate::cgroup::is_within(&w.rel, tree)),
        "{writes:?}"
    );
}

/// A kubepods tree inside a shared subtree, not a managed one (kind's
/// kubelet in `system.slice/docker-<id>.scope`): its structure is shared,
/// on the shared pool like the rest of the subtree (v1 too).
#[test]
fn kubepods_structure_in_a_shared_subtree_is_shared() {
    let mut e = engine();
    kube_tree(&mut e);
    let root = "system.slice/docker-1.scope/kubepods";
    add(&mut e, "system.slice/docker-1.scope", "0-15", None);
    add(&mut e, root, "0-15", None);
    add(&mut e, "kubepods/pod9", "0-15", None);
    add(&mut e, "kubepods/pod9/app", "0-15", want(4));
    apply(&mut e);
    assert_eq!(e.cgroups[root].role, Role::Shared);
    assert_eq!(target(&e, root), e.shared_pool());
}
