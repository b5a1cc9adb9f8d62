//! Slurm beside pinctld: the real daemon on fake v1 and v2 trees with
//! Slurm's tree in its shared subtree, named as Debian's Slurm 22.05 names
//! it (`system.slice/<node>_slurmstepd.scope`).
//! The tree is never written, `system.slice` (which holds it) is never
//! narrowed, the services beside it are confined, and the status lists the
//! job and says where the tree sits. With `[slurm] housekeeping`, a
//! running job's cores are kept quiet and come back when it ends (v2, and
//! v1's `slurm/` tree).

use std::fs;
use std::time::Duration;

use pinctl::CpuSet;

use crate::support::fake_cgroup::{Driver, ONLINE, Qos, Spec, Version, container_id, set, uid};
use crate::support::fake_proc::{self, PF_KTHREAD};
use crate::support::world::{Options, RESERVED, SYSTEM, World};

const SCOPE: &str = "system.slice/node1_slurmstepd.scope";
const JOB: &str = "system.slice/node1_slurmstepd.scope/job_7";
const STEP: &str = "system.slice/node1_slurmstepd.scope/job_7/step_0";
const SERVICE: &str = "system.slice/cron.service";
/// The pid of the kernel thread of the fake procfs.
const RCU: u32 = 15;

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

/// `[slurm] housekeeping` on a fake v2 tree, with the watchdog's rounds a
/// minute apart so that only the half-second look can follow the job:
/// - a job's cores leave the shared pool: a service beside Slurm's tree,
///   the workqueue mask and an unbound kernel thread leave them, held
///   while a container is pinned meanwhile off them, and the status names
///   them;
/// - a restart and a reload keep them so; a reload that turns the switch
///   off gives them back, and one that turns it on takes them again;
/// - when the job ends, everything has them back; the originals return.
#[test]
fn a_running_jobs_cores_are_kept_quiet_and_come_back_when_it_ends() {
    let opts = Options {
        keys: vec![
            "watchdog_interval = \"60s\"".into(),
            "housekeeping = true".into(),
            "[slurm]\nhousekeeping = true".into(),
        ],
        copy_sysfs: true,
        ..Options::default()
    };
    let mut w = World::new("pinctld-slurm-quiet", Version::V2, Driver::Systemd, &opts);
    let wq = w.sysfs.join("devices/virtual/workqueue/cpumask");
    fs::create_dir_all(wq.parent().unwrap()).unwrap();
    fs::write(&wq, format!("{}\n", set(ONLINE).to_mask())).unwrap();
    fake_proc::task(&w.proc_root, RCU, "rcu_preempt", ONLINE, PF_KTHREAD, 2);
    let existing = w.existing();
    w.tree.create(SERVICE, &existing);
    w.tree.create(SCOPE, &existing);
    w.tree.create(&format!("{SCOPE}/system"), &existing);
    w.start();
    let pod = w.k.pod(Qos::Guaranteed, &uid(1));
    w.tree.create(&pod, &Spec::default());
    let first = w.k.container(&pod, &container_id(1));
    w.tree.create(&first, &Spec::limit(2));
    let pinned = w.wait_pinned(&first, 2);

    // A job starts on CPUs 8-15, not yet written, then written.
    let cores = set("8-15");
    let job = Spec::default().cpuset("", "");
    w.tree.create(JOB, &job);
    w.tree
        .write_file(JOB, "cpuset.cpus.effective", &format!("{ONLINE}\n"));
    w.hold(
        "no job cores before Slurm writes them",
        Duration::from_millis(800),
        || match w.served()?.slurm.cores {
            c if c.is_empty() => Ok(()),
            c => Err(format!("job cores {c}")),
        },
    );
    w.tree.write_file(JOB, "cpuset.cpus", "8-15\n");
    w.tree.write_file(JOB, "cpuset.cpus.effective", "8-15\n");
    let quiet = |w: &World, what: &str| {
        w.wait_for(what, || {
            let service = w.tree.effective(SERVICE);
            let mask = CpuSet::from_mask(fs::read_to_string(&wq).unwrap().trim()).unwrap();
            let thread = fake_proc::allowed(&w.proc_root, RCU);
            let s = w.served()?;
            if !service.is_disjoint(&cores) {
                return Err(format!("cron.service on {service}"));
            }
            if !mask.is_disjoint(&cores) || !thread.is_disjoint(&cores) {
                return Err(format!("workqueue mask {mask}, rcu_preempt on {thread}"));
            }
            if s.slurm.cores != cores {
                return Err(format!("status says job cores {}", s.slurm.cores));
            }
            Ok(())
        })
    };
    quiet(&w, "the job's cores kept quiet");

    // While the job runs, a new container is pinned off its cores, and
    // nothing confined ever gets one.
    let pod2 = w.k.pod(Qos::Guaranteed, &uid(2));
    w.tree.create(&pod2, &Spec::default());
    let second = w.k.container(&pod2, &container_id(2));
    w.tree.create(&second, &Spec::limit(4));
    let got = w.wait_pinned(&second, 4);
    assert!(got.is_disjoint(&cores), "pinned on job cores: {got}");
    w.hold(
        "cron.service off the job's cores",
        Duration::from_secs(1),
        || match w.tree.effective(SERVICE) {
            s if s.is_disjoint(&cores) => Ok(()),
            s => Err(format!("it is on {s}")),
        },
    );

    // A restart finds the job before it plans.
    w.stop();
    w.start();
    quiet(&w, "the job's cores kept quiet after a restart");
    assert_eq!(w.tree.effective(&first), pinned, "a pin never moves");

    // Off by a reload: the service and the kernel's work have them back
    // (but the exclusive CPUs); on again: they leave.
    let mut off = opts.clone();
    off.keys.pop();
    w.write_config(&off);
    w.reload();
    let back = |w: &World, what: &str| {
        let exclusive = pinned.union(&got);
        let want = set(ONLINE).difference(&exclusive);
        w.wait_for(what, || {
            let service = w.tree.effective(SERVICE);
            let mask = CpuSet::from_mask(fs::read_to_string(&wq).unwrap().trim()).unwrap();
            let thread = fake_proc::allowed(&w.proc_root, RCU);
            if service != want || mask != want || thread != want {
                return Err(format!(
                    "cron.service on {service}, workqueue mask {mask}, rcu_preempt on {thread}"
                ));
            }
            Ok(())
        })
    };
    back(&w, "the job's cores shared again with the switch off");
    w.write_config(&opts);
    w.reload();
    quiet(&w, "the job's cores kept quiet again");

    // The job ends: its cores are back at once, not at the next round.
    w.tree.remove(JOB);
    back(&w, "the job's cores back in the shared pool");
    w.wait_for("the status without job cores", || {
        match w.served()?.slurm.cores {
            c if c.is_empty() => Ok(()),
            c => Err(format!("job cores {c}")),
        }
    });
    assert!(!set(RESERVED).is_disjoint(&w.tree.effective(SERVICE)));
}

/// On v1, Slurm's cgroup/v1 plugin keeps its jobs in
/// `slurm/uid_<uid>/job_<id>` at the hierarchy's root, outside every
/// subtree the daemon watches: the tree is found by the start-up
/// reconcile, a job started later by the half-second look (the watchdog's
/// rounds are a minute apart), and their cores are kept quiet until each
/// job ends.
#[test]
fn on_v1_the_jobs_of_slurms_v1_plugin_are_followed_too() {
    let opts = Options {
        keys: vec![
            "watchdog_interval = \"60s\"".into(),
            "[slurm]\nhousekeeping = true".into(),
        ],
        copy_sysfs: true,
        ..Options::default()
    };
    let mut w = World::new("pinctld-slurm-v1", Version::V1, Driver::Systemd, &opts);
    let existing = w.existing();
    w.tree.create(SERVICE, &existing);
    w.tree.create("slurm", &existing);
    w.tree.create("slurm/uid_0", &existing);
    w.tree
        .create("slurm/uid_0/job_5", &Spec::default().cpuset("8-15", "0-1"));
    w.start();
    let off = |w: &World, cores: &str| {
        let cores = set(cores);
        w.wait_for(&format!("cron.service off {cores}"), || {
            let service = w.tree.effective(SERVICE);
            let s = w.served()?;
            if !service.is_disjoint(&cores) || !cores.is_subset(&s.slurm.cores) {
                return Err(format!(
                    "cron.service on {service}, job cores {}",
                    s.slurm.cores
                ));
            }
            Ok(s)
        })
    };
    let s = off(&w, "8-15");
    assert!(
        s.slurm
            .jobs
            .iter()
            .any(|j| j.cgroup == "slurm/uid_0/job_5" && j.name == "job_5"),
        "{:?}",
        s.slurm.jobs
    );
    w.tree.create("slurm/uid_1000", &existing);
    w.tree.create(
        "slurm/uid_1000/job_6",
        &Spec::default().cpuset("20-23", "0-1"),
    );
    off(&w, "8-15,20-23");
    w.tree.remove("slurm/uid_0/job_5");
    w.wait_for("8-15 back for cron.service", || {
        match w.tree.effective(SERVICE) {
            s if set("8-15").is_subset(&s) && s.is_disjoint(&set("20-23")) => Ok(()),
            s => Err(format!("it is on {s}")),
        }
    });
}
