//! Slurm beside pinctld: the real daemon on fake v1 and v2 trees with
//! Slurm's tree in its shared subtree, named as Debian's Slurm 22.05 names
//! it (`system.slice/<node>_slurmstepd.scope`).
//! The tree is never written, `system.slice` (which holds it) is never
//! narrowed, the services beside it are confined, and the status lists the
//! job and says where the tree sits.

use crate::support::fake_cgroup::{Driver, ONLINE, Qos, Spec, Version, container_id, set, uid};
use crate::support::world::{Options, SYSTEM, World};

const SCOPE: &str = "system.slice/node1_slurmstepd.scope";
const JOB: &str = "system.slice/node1_slurmstepd.scope/job_7";
const STEP: &str = "system.slice/node1_slurmstepd.scope/job_7/step_0";
const SERVICE: &str = "system.slice/cron.service";

on_both_versions!(slurms_tree_is_left_alone => slurms_tree_is_left_alone());

fn slurms_tree_is_left_alone(version: Version) {
    let opts = Options {
        keys: vec!["watchdog_interval = \"1s\"".into()],
        ..Options::default()
    };
    let mut w = World::new("pinctld-slurm", version, Driver::Systemd, &opts);
    let existing = w.existing();
    w.tree.create(SERVICE, &existing);
    // As Slurm makes it: the scope and slurmstepd's own cgroup take what
    // systemd gives them, the job and its step CPUs 4-7 (v1: the root's
    // memory nodes, or no task could join).
    let job = match version {
        Version::V1 => Spec::default().cpuset("4-7", "0-1"),
        Version::V2 => Spec::default().cpuset("4-7", ""),
    };
    w.tree.create(SCOPE, &existing);
    w.tree.create(&format!("{SCOPE}/system"), &existing);
    w.tree.create(JOB, &job);
    w.tree.create(STEP, &job);
    if version == Version::V2 {
        w.tree.write_file(JOB, "cpuset.cpus.effective", "4-7\n");
    }
    let before: Vec<(String, String)> = [SYSTEM, SCOPE, JOB, STEP]
        .iter()
        .map(|rel| (rel.to_string(), w.tree.read_file(rel, "cpuset.cpus")))
        .collect();
    w.start();

    let pod = w.k.pod(Qos::Guaranteed, &uid(1));
    w.tree.create(&pod, &Spec::default());
    let app = w.k.container(&pod, &container_id(1));
    w.tree.create(&app, &Spec::limit(4));
    let pinned = w.wait_pinned(&app, 4);
    let pool = set(ONLINE).difference(&pinned);
    w.wait_for("cron.service on the shared pool", || {
        let got = w.tree.effective(SERVICE);
        if got == pool {
            Ok(())
        } else {
            Err(format!("it has {got}"))
        }
    });
    w.wait_for("the job listed by the status", || {
        let s = w.served()?;
        match s.slurm.jobs.as_slice() {
            [j] if j.cgroup == JOB && j.name == "job_7" && j.cpus == set("4-7") => Ok(s),
            other => Err(format!("jobs {other:?}")),
        }
    });
    let s = w.served().unwrap();
    assert_eq!(s.slurm.inside, [SCOPE], "the tree in the daemon's subtree");

    for (rel, was) in before {
        let now = w.tree.read_file(&rel, "cpuset.cpus");
        if now != was {
            w.fail(&format!("{rel} was written: {was:?} → {now:?}"));
        }
    }
    let log = w.log();
    if log
        .lines()
        .any(|l| l.contains("write") && l.contains("slurmstepd.scope"))
    {
        w.fail("the daemon logged a write in Slurm's tree");
    }
    assert_eq!(
        w.tree.effective(STEP),
        set("4-7"),
        "the step keeps what Slurm gave it"
    );
}
