//! `irq_affinity`: device interrupts are kept off exclusive CPUs through a
//! fake `/proc/irq` (`smp_affinity_list` per line, `default_smp_affinity`
//! as a mask), and put back when the CPUs stop being exclusive, across a
//! restart (the state file keeps what each had) and when a reload turns the
//! switch off. A new interrupt and a value written over (irqbalance) are
//! found by the next round of checks; a write the kernel refuses is
//! reported and not tried again; a running irqbalance without the
//! exclusive CPUs banned is named in the status with what to set.
//! The VM bed's kernel probe checks the same files on real kernels, and
//! its `12-irq` scenario the daemon there.

use std::fs;
use std::path::PathBuf;

use pinctl::CpuSet;
use pinctl::api;

use crate::support::fake_cgroup::{Driver, ONLINE, Qos, Spec, Version, container_id, set, uid};
use crate::support::world::{Options, World};

struct Env {
    w: World,
}

env_of_world!(Env);

impl Env {
    fn irq_file(&self, irq: &str) -> PathBuf {
        let dir = self.proc_root.join("irq");
        match irq {
            "default" => dir.join("default_smp_affinity"),
            n => dir.join(n).join("smp_affinity_list"),
        }
    }

    /// Makes interrupt `irq` (a number, or `default`) with `cpus`.
    fn put(&self, irq: &str, cpus: &str) {
        let path = self.irq_file(irq);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        let text = match irq {
            "default" => set(cpus).to_mask(),
            _ => cpus.to_string(),
        };
        fs::write(path, format!("{text}\n")).unwrap();
    }

    fn affinity(&self, irq: &str) -> CpuSet {
        let text = fs::read_to_string(self.irq_file(irq)).unwrap();
        match irq {
            "default" => CpuSet::from_mask(&text).unwrap(),
            _ => text.parse().unwrap(),
        }
    }

    fn wait_affinity(&self, irq: &str, want: &CpuSet) {
        self.wait_for(&format!("interrupt {irq} on {want}"), || {
            match self.affinity(irq) {
                got if &got == want => Ok(()),
                got => Err(format!("it is on {got}")),
            }
        });
    }

    /// Waits until the status's interrupts section satisfies `ok`.
    fn wait_interrupts(
        &self,
        what: &str,
        ok: impl Fn(&api::Interrupts) -> bool,
    ) -> api::Interrupts {
        self.wait_for(what, || match self.served()?.interrupts {
            Some(i) if ok(&i) => Ok(i),
            other => Err(format!("{other:?}")),
        })
    }

    fn events(&self) -> Vec<api::EventKind> {
        let events = self.served_events().unwrap();
        events.into_iter().map(|e| e.what).collect()
    }

    /// A Guaranteed pod's container with a limit of 2 CPUs, pinned:
    /// its CPUs.
    fn pin_one(&self) -> CpuSet {
        let pod = self.k.pod(Qos::Guaranteed, &uid(1));
        self.tree.create(&pod, &Spec::limit(2));
        let app = self.k.container(&pod, &container_id(1));
        self.tree.create(&app, &Spec::limit(2));
        self.wait_pinned(&app, 2)
    }
}

fn options(on: bool) -> Options {
    Options {
        keys: vec![
            format!("irq_affinity = {on}"),
            "watchdog_interval = \"200ms\"".into(),
        ],
        ..Options::default()
    }
}

fn world() -> Env {
    let w = World::new("pinctld-irq", Version::V2, Driver::Systemd, &options(true));
    Env { w }
}

/// Steered off a pin, kept so across a restart, put back when it ends;
/// new interrupts and values written over are followed.
#[test]
fn interrupts_leave_exclusive_cpus_and_come_back() {
    let mut env = world();
    env.put("default", ONLINE);
    env.put("4", ONLINE);
    env.put("9", "0-3");
    env.start();
    let pod = env.k.pod(Qos::Guaranteed, &uid(1));
    env.tree.create(&pod, &Spec::limit(2));
    let app = env.k.container(&pod, &container_id(1));
    env.tree.create(&app, &Spec::limit(2));
    let away = env.wait_pinned(&app, 2);
    let rest = set(ONLINE).difference(&away);
    env.wait_affinity("4", &rest);
    env.wait_affinity("default", &rest);
    // What it had, less the exclusive CPUs.
    env.wait_affinity("9", &set("0-3").difference(&away));
    let irqs = env.wait_interrupts("4, 9 and default steered", |i| i.steered.len() == 3);
    // One event for the pass.
    assert!(
        env.events().iter().any(|e| matches!(e,
            api::EventKind::Irqs { moved, .. } if moved.len() == 3)),
        "{:?}",
        env.events()
    );
    assert!(irqs.on);
    assert_eq!(irqs.away, away);
    assert_eq!(irqs.steered[0].irq, "default");
    assert_eq!(irqs.steered[0].was, set(ONLINE));
    assert!(irqs.refused.is_empty(), "{irqs:?}");
    assert!(
        env.events().iter().any(|e| matches!(e,
            api::EventKind::Irqs { away: a, moved, refused, .. }
                if a == &away && moved.iter().any(|m| m == "4") && refused.is_empty())),
        "no event for interrupt 4: {:?}",
        env.events()
    );

    // A new interrupt, found by the next round of checks.
    env.put("40", ONLINE);
    env.wait_affinity("40", &rest);
    // One that starts with the steered default (as the kernel starts a new
    // one): it had what the default had.
    env.put("41", &rest.to_string());
    env.wait_interrupts("41 kept as the default's", |i| {
        i.steered
            .iter()
            .any(|s| s.irq == "41" && s.was == set(ONLINE))
    });
    // irqbalance writes one back: taken as its value, steered again.
    env.put("4", ONLINE);
    env.wait_affinity("4", &rest);
    env.wait_interrupts("the write over counted", |i| i.overwritten >= 1);

    // A restart keeps what each had (the state file): the pin's end puts
    // it back.
    env.stop();
    env.start();
    env.tree.remove(&app);
    env.wait_affinity("4", &set(ONLINE));
    env.wait_affinity("40", &set(ONLINE));
    env.wait_affinity("41", &set(ONLINE));
    env.wait_affinity("9", &set("0-3"));
    env.wait_affinity("default", &set(ONLINE));
    env.wait_interrupts("nothing steered", |i| i.steered.is_empty());
    env.stop();
}

/// A reload that turns the switch off puts every interrupt back; one that
/// turns it on steers them again.
#[test]
fn a_reload_turns_steering_off_and_on() {
    let mut env = world();
    env.put("default", ONLINE);
    env.put("4", ONLINE);
    env.start();
    let away = env.pin_one();
    let rest = set(ONLINE).difference(&away);
    env.wait_affinity("4", &rest);

    env.write_config(&options(false));
    env.reload();
    env.wait_affinity("4", &set(ONLINE));
    env.wait_affinity("default", &set(ONLINE));
    env.wait_for("no interrupts section", || match env.served()?.interrupts {
        None => Ok(()),
        Some(i) => Err(format!("{i:?}")),
    });
    // Off: a round of checks changes nothing.
    env.put("7", ONLINE);
    std::thread::sleep(std::time::Duration::from_millis(600));
    assert_eq!(env.affinity("7"), set(ONLINE));

    env.write_config(&options(true));
    env.reload();
    env.wait_affinity("4", &rest);
    env.wait_affinity("7", &rest);
    env.stop();
}

/// A write that fails is reported with its error and tried again by the
/// next rounds (a write the kernel refuses for good, EIO or EPERM, is not:
/// the VM bed's 12-irq checks that on real kernels); a running irqbalance
/// that does not ban the exclusive CPUs is named with what to set.
#[test]
fn failures_and_irqbalance_are_reported() {
    let mut env = world();
    env.put("default", ONLINE);
    // A file that reads as a CPU list and fails writes (EACCES, or EROFS
    // in a container: sysfs refuses a write to a read-only attribute, even
    // to root).
    let refusing = fs::read_to_string("/sys/devices/system/cpu/possible")
        .ok()
        .and_then(|t| t.parse::<CpuSet>().ok());
    fs::create_dir_all(env.proc_root.join("irq/24")).unwrap();
    std::os::unix::fs::symlink("/sys/devices/system/cpu/possible", env.irq_file("24")).unwrap();
    // irqbalance, banning one CPU only.
    let ib = env.proc_root.join("812");
    fs::create_dir_all(&ib).unwrap();
    fs::write(ib.join("comm"), "irqbalance\n").unwrap();
    fs::write(ib.join("environ"), "IRQBALANCE_BANNED_CPULIST=31\0").unwrap();
    env.start();
    let away = env.pin_one();
    let irqs = env.wait_interrupts("irqbalance found, the pin kept clear", |i| {
        i.irqbalance.is_some() && i.away == away
    });
    assert_eq!(
        irqs.irqbalance,
        Some(pinctl::irq::Irqbalance {
            pid: 812,
            banned: Some(set("31")),
            unreadable: None,
        })
    );
    assert!(
        irqs.advice
            .iter()
            .any(|a| a.contains("IRQBALANCE_BANNED_CPULIST=1-15,17-31")),
        "{:?}",
        irqs.advice
    );
    // Only where the host's possible CPUs meet the pin is there a write.
    if refusing.is_some_and(|p| !p.is_disjoint(&away)) {
        let irqs = env.wait_interrupts("24 failing", |i| !i.failed.is_empty());
        assert_eq!(irqs.failed[0].irq, "24");
        assert!(irqs.failed[0].error.contains("irq/24/smp_affinity_list"));
        assert!(irqs.refused.is_empty(), "{irqs:?}");
        // Rounds of checks go on, each trying it again.
        env.wait_for("24 tried again", || {
            let tries = env
                .events()
                .iter()
                .filter(|e| {
                    matches!(e, api::EventKind::Irqs { refused, .. }
                    if refused.iter().any(|(irq, _)| irq == "24"))
                })
                .count();
            if tries >= 2 {
                Ok(())
            } else {
                Err(format!("{tries} tries"))
            }
        });
    }
    let status = env.served().unwrap();
    let text = pinctl::cli::status::render(
        &status,
        pinctl::cli::status::Mode::Online,
        pinctl::cli::style::Style::OFF,
        0,
    );
    assert!(text.contains("Interrupts:"), "{text}");
    assert!(text.contains("irqbalance (pid 812)"), "{text}");
    env.stop();
}
