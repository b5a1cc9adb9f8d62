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

/// `[slurm] housekeeping`: the running jobs' cores leave the shared pool,
/// so every confined cgroup leaves them; no workload is given one while
/// the job runs; a reserved CPU stays shared; when the job ends they come
/// back, and a workload that waited for them is placed.
#[test]
fn job_cores_leave_the_shared_pool_and_are_never_assigned_until_the_job_ends() {
    let mut e = engine_v2();
    kube_tree(&mut e);
    add(&mut e, SERVICE, "", None);
    add(&mut e, "user.slice", "", None);
    slurm_tree(&mut e, "");
    apply(&mut e);
    // A job on 4-7 and 12-15, and (wrongly) on reserved CPU 0.
    assert!(e.set_job_cores(set("0,4-7,12-15")));
    assert!(!e.set_job_cores(set("0,4-7,12-15")), "no change, no replan");
    assert_eq!(
        e.job_cores(),
        set("4-7,12-15"),
        "reserved CPU 0 stays shared"
    );
    apply(&mut e);
    let pool = e.shared_pool();
    assert_eq!(pool, set("0-3,8-11"));
    assert_eq!(target(&e, SERVICE), pool);
    assert_eq!(
        target(&e, "kubepods"),
        pool,
        "v2: the kubepods tree follows"
    );
    let got = v2_effective(&e);
    assert_eq!(got[STEP], set("4-7"), "the job keeps what Slurm gave it");
    assert_eq!(
        target(&e, "system.slice"),
        set("0-15"),
        "the holder is never narrowed"
    );

    // 6 free CPUs (1-3, 9-11): a workload asking for 8 waits, one asking
    // for 4 is placed off the job cores.
    add(&mut e, "kubepods/pod9", "", None);
    add(&mut e, "kubepods/pod9/big", "", want(8));
    add(&mut e, "kubepods/pod8", "", None);
    add(&mut e, "kubepods/pod8/small", "", want(4));
    apply(&mut e);
    assert!(
        e.workloads["cgroup:kubepods/pod9/big"].cpus.is_none(),
        "waits"
    );
    let small = target(&e, "kubepods/pod8/small");
    assert_eq!(small.len(), 4);
    assert!(small.is_disjoint(&set("4-7,12-15")), "{small}");
    assert!(e.room_for(4, &[], false).is_err(), "2 free beside the jobs");
    let (_, holders) = e.room_for(4, &[], false).unwrap_err();
    assert!(
        holders.contains(&("Slurm's jobs".to_string(), 8)),
        "{holders:?}"
    );

    // The job ends: its cores are shared again, and the waiting workload
    // is placed on them.
    assert!(e.set_job_cores(CpuSet::new()));
    apply(&mut e);
    let big = target(&e, "kubepods/pod9/big");
    assert_eq!(big.len(), 8);
    assert_eq!(
        target(&e, "kubepods/pod8/small"),
        small,
        "a pin never moves"
    );
    assert_eq!(
        e.shared_pool(),
        set("0-15").difference(&big).difference(&small)
    );
    assert_v2_targets_hold(&e).unwrap();
}

/// A workload pinned before a job took some of its CPUs (a conflict
/// `pinctl verify` names) keeps them: a pin is never moved.
#[test]
fn a_pinned_workload_keeps_its_cpus_when_a_job_has_them_too() {
    let mut e = engine_v2();
    let pinned = pin_guaranteed(&mut e);
    assert!(e.set_job_cores(pinned.clone()));
    apply(&mut e);
    assert_eq!(target(&e, GUARANTEED), pinned);
    assert!(e.shared_pool().is_disjoint(&pinned));
}

/// A pinned workload that shrinks off CPUs a job has lets them go to the
/// job, not to a workload waiting for CPUs (found by the property test:
/// the shrink made them free again).
#[test]
fn a_job_core_a_shrink_lets_go_is_not_given_to_a_waiting_workload() {
    let mut e = engine_v2();
    kube_tree(&mut e);
    add(&mut e, "kubepods/pod9", "", None);
    add(&mut e, GUARANTEED_2, "", want(2));
    apply(&mut e);
    let first = target(&e, GUARANTEED_2);
    // A grow to 4 (first given: 2), then a job on the 2 it grew by and on
    // every CPU but the reserved one and the pinned ones.
    add(&mut e, GUARANTEED_2, "", want(4));
    apply(&mut e);
    let grown = target(&e, GUARANTEED_2);
    assert_eq!(grown.len(), 4);
    let jobs = set("1-15").difference(&first);
    assert!(e.set_job_cores(jobs.clone()));
    add(&mut e, "kubepods/pod8", "", None);
    add(&mut e, "kubepods/pod8/waits", "", want(2));
    apply(&mut e);
    assert!(e.workloads["cgroup:kubepods/pod8/waits"].cpus.is_none());

    // Back to 2: the two it lets go are the job's, and the waiting
    // workload still waits.
    add(&mut e, GUARANTEED_2, "", want(2));
    apply(&mut e);
    assert_eq!(target(&e, GUARANTEED_2), first);
    let waits = &e.workloads["cgroup:kubepods/pod8/waits"];
    assert_eq!(waits.cpus, None, "given job cores");
    assert!(e.shared_pool().is_disjoint(&e.job_cores()));
}

const GUARANTEED_2: &str = "kubepods/pod9/app";

/// Another owner's CPUs (the kubelet's static CPU manager) are held as
/// Slurm's job cores are: out of the shared pool, never given, the
/// reserved ones excepted; given up, they come back.
#[test]
fn another_owners_cpus_are_neither_given_nor_shared() {
    let mut e = engine();
    kube_tree(&mut e);
    apply(&mut e);
    assert!(e.set_elsewhere(set("0-7")));
    assert!(!e.set_elsewhere(set("0-7")));
    add(&mut e, "kubepods/w1", "0-15", want(4));
    apply(&mut e);
    let w = e.workloads()["cgroup:kubepods/w1"].cpus.clone().unwrap();
    assert!(w.is_disjoint(&set("1-7")), "{w}");
    assert_eq!(e.shared_pool(), set("0,8-15").difference(&w));
    assert!(e.set_elsewhere(CpuSet::new()));
    apply(&mut e);
    assert_eq!(e.shared_pool(), set("0-15").difference(&w));
}
