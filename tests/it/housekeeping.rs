//! `housekeeping`: the kernel's own movable work is kept off exclusive
//! CPUs through a fake sysfs (workqueue masks, RPS and XPS masks) and a
//! fake procfs (kernel threads' `stat` and `status`, where the daemon's
//! `set_affinity` writes on a tree that is not procfs), and put back when
//! the CPUs stop being exclusive, across a restart (the originals file on
//! "/run") and when a reload turns the switch off. Threads bound to one
//! CPU, those the kernel keeps (`PF_NO_SETAFFINITY`) and user processes
//! are never written. The VM bed's `17-quiet` scenario checks the same on
//! real kernels.

use std::fs;
use std::path::PathBuf;

use pinctl::CpuSet;
use pinctl::api;

use crate::support::fake_cgroup::{Driver, ONLINE, Qos, Spec, Version, container_id, set, uid};
use crate::support::fake_proc::{self, PF_KTHREAD, PF_NO_SETAFFINITY};
use crate::support::world::{Options, World};

struct Env {
    w: World,
    originals: PathBuf,
}

env_of_world!(Env);

impl Env {
    fn wq(&self, name: Option<&str>) -> PathBuf {
        let dir = self.sysfs.join("devices/virtual/workqueue");
        match name {
            None => dir.join("cpumask"),
            Some(n) => dir.join(n).join("cpumask"),
        }
    }

    fn queue(&self, file: &str) -> PathBuf {
        let q = if file == "rps_cpus" { "rx-0" } else { "tx-0" };
        self.sysfs.join("class/net/eth0/queues").join(q).join(file)
    }

    fn put_mask(&self, path: &PathBuf, cpus: &str) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, format!("{}\n", set(cpus).to_mask())).unwrap();
    }

    fn mask(&self, path: &PathBuf) -> CpuSet {
        CpuSet::from_mask(fs::read_to_string(path).unwrap().trim()).unwrap()
    }

    fn task(&self, pid: u32, comm: &str, cpus: &str, flags: u32, start: u64) {
        fake_proc::task(&self.proc_root, pid, comm, cpus, flags, start);
    }

    fn allowed(&self, pid: u32) -> CpuSet {
        fake_proc::allowed(&self.proc_root, pid)
    }

    fn wait_allowed(&self, pid: u32, want: &CpuSet) {
        self.wait_for(&format!("task {pid} on {want}"), || {
            match self.allowed(pid) {
                got if &got == want => Ok(()),
                got => Err(format!("it is on {got}")),
            }
        });
    }

    fn wait_mask(&self, path: &PathBuf, want: &CpuSet) {
        self.wait_for(&format!("{} = {want}", path.display()), || {
            match self.mask(path) {
                got if &got == want => Ok(()),
                got => Err(format!("it is {got}")),
            }
        });
    }

    fn wait_housekeeping(
        &self,
        what: &str,
        ok: impl Fn(&api::Housekeeping) -> bool,
    ) -> api::Housekeeping {
        self.wait_for(what, || match self.served()?.housekeeping {
            Some(h) if ok(&h) => Ok(h),
            other => Err(format!("{other:?}")),
        })
    }

    /// A Guaranteed pod's container with a limit of 2 CPUs, pinned: its
    /// cgroup and CPUs.
    fn pin_one(&self) -> (String, CpuSet) {
        let pod = self.k.pod(Qos::Guaranteed, &uid(1));
        self.tree.create(&pod, &Spec::limit(2));
        let app = self.k.container(&pod, &container_id(1));
        self.tree.create(&app, &Spec::limit(2));
        let cpus = self.wait_pinned(&app, 2);
        (app, cpus)
    }

    /// The node as a kernel leaves it: every mask and thread on every CPU,
    /// one bound `ksoftirqd/N` per CPU, an unbound workqueue worker, a
    /// user process.
    fn node(&self) {
        self.put_mask(&self.wq(None), ONLINE);
        self.put_mask(&self.wq(Some("writeback")), ONLINE);
        self.put_mask(&self.queue("rps_cpus"), ONLINE);
        self.put_mask(&self.queue("xps_cpus"), "0-3");
        fs::create_dir_all(self.proc_root.join("irq")).unwrap();
        fs::write(
            self.proc_root.join("irq/default_smp_affinity"),
            format!("{}\n", set(ONLINE).to_mask()),
        )
        .unwrap();
        self.task(2, "kthreadd", ONLINE, PF_KTHREAD, 1);
        self.task(15, "rcu_preempt", ONLINE, PF_KTHREAD, 2);
        self.task(16, "kcompactd0", "0-7,16-23", PF_KTHREAD, 3);
        for cpu in set(ONLINE).iter() {
            self.task(
                100 + cpu,
                &format!("ksoftirqd/{cpu}"),
                &cpu.to_string(),
                PF_KTHREAD | PF_NO_SETAFFINITY,
                4,
            );
        }
        self.task(
            200,
            "kworker/u64:1",
            ONLINE,
            PF_KTHREAD | PF_NO_SETAFFINITY,
            5,
        );
        self.task(300, "sshd", ONLINE, 0x0040_0100, 6);
    }
}

fn options(on: bool, originals: &std::path::Path) -> Options {
    Options {
        keys: vec![
            format!("housekeeping = {on}"),
            format!(
                "housekeeping_originals = {:?}",
                originals.display().to_string()
            ),
            "watchdog_interval = \"200ms\"".into(),
        ],
        copy_sysfs: true,
        ..Options::default()
    }
}

fn world() -> Env {
    let w = World::new(
        "pinctld-housekeeping",
        Version::V2,
        Driver::Systemd,
        &Options {
            copy_sysfs: true,
            ..Options::default()
        },
    );
    let originals = w.tmp.path().join("run/housekeeping.json");
    w.write_config(&options(true, &originals));
    let env = Env { w, originals };
    env.node();
    env
}

/// Moved off a pin, kept so across a restart, put back when it ends;
/// new kernel threads are followed; the rest is never written.
#[test]
fn movable_work_leaves_exclusive_cpus_and_comes_back() {
    let mut env = world();
    env.start();
    let (app, away) = env.pin_one();
    let rest = set(ONLINE).difference(&away);
    env.wait_mask(&env.wq(None), &rest);
    env.wait_mask(&env.wq(Some("writeback")), &rest);
    env.wait_mask(&env.queue("rps_cpus"), &rest);
    env.wait_mask(&env.queue("xps_cpus"), &set("0-3").difference(&away));
    env.wait_allowed(2, &rest);
    env.wait_allowed(15, &rest);
    // What it had, less the exclusive CPUs.
    env.wait_allowed(16, &set("0-7,16-23").difference(&away));
    // Through the interrupt pass, with irq_affinity off.
    env.wait_for("default_smp_affinity moved", || {
        let text = fs::read_to_string(env.proc_root.join("irq/default_smp_affinity")).unwrap();
        match CpuSet::from_mask(text.trim()).unwrap() {
            got if got == rest => Ok(()),
            got => Err(format!("{got}")),
        }
    });
    let h = env.wait_housekeeping("status lists what moved", |h| {
        h.moved.len() >= 8
            && h.moved
                .iter()
                .any(|m| m.what.contains("default_smp_affinity"))
    });
    assert!(h.on);
    assert_eq!(h.away, away);
    assert!(
        h.moved
            .iter()
            .any(|m| m.what == "kthread 15 (rcu_preempt)" && m.was == set(ONLINE) && m.set == rest),
        "{h:?}"
    );
    // What stays: the bound threads, by name, on each exclusive CPU.
    for cpu in away.iter() {
        let s = h
            .stays
            .iter()
            .find(|s| s.cpu == cpu)
            .expect("a line per CPU");
        assert_eq!(s.threads, [format!("ksoftirqd/{cpu}")]);
    }
    let boot = h.boot.expect("a boot line");
    assert!(boot.contains(&format!("nohz_full={away}")), "{boot}");
    assert!(env.originals.exists());
    // Never written: bound threads, workqueue workers, user processes.
    for cpu in away.iter() {
        assert_eq!(env.allowed(100 + cpu), set(&cpu.to_string()));
    }
    assert_eq!(env.allowed(200), set(ONLINE));
    assert_eq!(env.allowed(300), set(ONLINE));

    // A thread born since: the next round of checks moves it.
    env.task(400, "kdamond.0", ONLINE, PF_KTHREAD, 50);
    env.wait_allowed(400, &rest);
    // One born of the moved kthreadd, with what was written there: it had
    // what kthreadd had.
    env.task(401, "kworker_new", &rest.to_string(), PF_KTHREAD, 60);
    // A mask written over by someone else is the new original.
    env.put_mask(&env.queue("xps_cpus"), "0-5");
    env.wait_mask(&env.queue("xps_cpus"), &set("0-5").difference(&away));

    // A restart keeps what each had (the originals file): the pin's end
    // puts it back.
    env.stop();
    env.start();
    env.tree.remove(&app);
    let all = set(ONLINE);
    env.wait_mask(&env.wq(None), &all);
    env.wait_mask(&env.wq(Some("writeback")), &all);
    env.wait_mask(&env.queue("rps_cpus"), &all);
    env.wait_mask(&env.queue("xps_cpus"), &set("0-5"));
    env.wait_allowed(2, &all);
    env.wait_allowed(15, &all);
    env.wait_allowed(16, &set("0-7,16-23"));
    env.wait_allowed(400, &all);
    env.wait_allowed(401, &all);
    env.wait_housekeeping("nothing kept", |h| h.originals == 0);
    assert_eq!(env.allowed(200), set(ONLINE));
    assert_eq!(env.allowed(300), set(ONLINE));
    env.stop();
}

/// A reload that turns the switch off puts everything back; one that turns
/// it on moves it again.
#[test]
fn a_reload_turns_it_off_and_on() {
    let mut env = world();
    env.start();
    let (_, away) = env.pin_one();
    let rest = set(ONLINE).difference(&away);
    env.wait_allowed(15, &rest);
    env.wait_mask(&env.wq(None), &rest);

    env.write_config(&options(false, &env.originals));
    env.reload();
    env.wait_allowed(15, &set(ONLINE));
    env.wait_mask(&env.wq(None), &set(ONLINE));
    env.wait_for("no housekeeping section", || {
        match env.served()?.housekeeping {
            None => Ok(()),
            Some(h) => Err(format!("{h:?}")),
        }
    });
    // Off: a round of checks moves nothing.
    env.task(400, "kdamond.0", ONLINE, PF_KTHREAD, 50);
    std::thread::sleep(std::time::Duration::from_millis(600));
    assert_eq!(env.allowed(400), set(ONLINE));

    env.write_config(&options(true, &env.originals));
    env.reload();
    env.wait_allowed(15, &rest);
    env.wait_allowed(400, &rest);
    env.stop();
}

/// With the originals file lost across a restart nothing is guessed: the
/// CPUs stay quiet, and what was found is what is kept.
#[test]
fn a_restart_with_the_originals_file_lost_keeps_the_cpus_quiet() {
    let mut env = world();
    env.start();
    let (app, away) = env.pin_one();
    let rest = set(ONLINE).difference(&away);
    env.wait_allowed(15, &rest);
    env.stop();
    fs::remove_file(&env.originals).unwrap();
    env.start();
    // Still quiet: a thread born meanwhile is moved.
    env.task(400, "kdamond.0", ONLINE, PF_KTHREAD, 50);
    env.wait_allowed(400, &rest);
    assert_eq!(env.allowed(15), rest);
    env.tree.remove(&app);
    // Only what it remembers goes back.
    env.wait_allowed(400, &set(ONLINE));
    env.wait_housekeeping("nothing kept", |h| h.originals == 0);
    assert_eq!(env.allowed(15), rest);
    env.stop();
}
