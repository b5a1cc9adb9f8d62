//! Power classes (issue #35) against a validating fake sysfs: one pass
//! (`power::sysfs::pass`, what the daemon runs on its I/O pool) reads what
//! each CPU offers, sets every field of a class, in an order the fake
//! kernel accepts, keeps the originals in their file before the first
//! write, and puts every one back when no class wants the file; what a CPU
//! cannot take is refused with the reason, and an offline CPU is left
//! alone until it comes back.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use pinctl::CpuSet;
use pinctl::config::{self, Class};
use pinctl::io::{IoConfig, IoPool};
use pinctl::power::sysfs::{Ask, Pass, pass};
use pinctl::power::{Knob, Reason, originals};

use crate::support::fake_power::{PowerTree, Validating};

const CLASSES: &str = r#"
[[class]]
name = "latency"
governor = "performance"
min_freq = "base"
max_freq = "max"
epp = "performance"
disabled_cstates = ["C6", "C1E"]
resume_latency_us = "n/a"
uncore_min_freq = "2GHz"
uncore_max_freq = "max"

[[class]]
name = "slow"
max_freq = "1GHz"
min_freq = "min"
governor = "schedutil"
"#;

fn classes() -> Vec<Class> {
    config::parse(CLASSES, Path::new("/t.toml"))
        .unwrap()
        .classes
}

struct Bed {
    _dir: tempfile::TempDir,
    tree: PowerTree,
    file: std::path::PathBuf,
    fs: Arc<Validating>,
    pool: IoPool,
    originals: BTreeMap<Knob, String>,
    online: CpuSet,
}

impl Bed {
    fn new() -> Bed {
        let dir = tempfile::tempdir().unwrap();
        let tree = PowerTree::new(&dir.path().join("sys"));
        tree.cpu(0, 0, 0).cpu(1, 0, 0).cpu(2, 0, 1).cpu(3, 0, 1);
        tree.die(0, 0).die(0, 1);
        let fs = Arc::new(Validating::default());
        let pool = IoPool::new(
            fs.clone(),
            IoConfig {
                threads: 1,
                timeout: Duration::from_secs(5),
                max_stuck: 2,
                queue: 16,
            },
        );
        Bed {
            file: dir.path().join("run/power.json"),
            _dir: dir,
            tree,
            fs,
            pool,
            originals: BTreeMap::new(),
            online: "0-3".parse().unwrap(),
        }
    }

    fn run(&mut self, classes_of: &[(u32, &str)]) -> Pass {
        let ask = Ask {
            root: self.tree.root.clone(),
            originals_file: self.file.clone(),
            online: self.online.clone(),
            classes_of: classes_of
                .iter()
                .map(|(c, n)| (*c, n.to_string()))
                .collect(),
            classes: classes(),
            originals: self.originals.clone(),
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let p = rt.block_on(pass(&self.pool, ask));
        self.originals = p.originals.clone();
        p
    }

    fn refused_writes(&self) -> Vec<String> {
        let log = self.fs.log.lock().unwrap();
        log.iter()
            .filter(|(_, _, ok)| !ok)
            .map(|(p, d, _)| format!("{} <- {d}", p.display()))
            .collect()
    }
}

const CPU2: &str = "devices/system/cpu/cpu2";
const DIE1: &str = "devices/system/cpu/intel_uncore_frequency/package_00_die_01";

#[test]
fn power_a_class_sets_every_field_and_release_puts_back_every_original() {
    let mut bed = Bed::new();
    let before = bed.tree.snapshot();
    let p = bed.run(&[(2, "latency")]);
    assert!(p.plan.refusals.is_empty(), "{:?}", p.plan.refusals);
    assert!(p.error.is_none() && p.save_error.is_none() && p.read_errors.is_empty());
    assert!(
        bed.refused_writes().is_empty(),
        "{:?}",
        bed.refused_writes()
    );
    for (file, want) in [
        ("cpufreq/scaling_governor", "performance"),
        ("cpufreq/scaling_min_freq", "2000000"),
        ("cpufreq/scaling_max_freq", "3500000"),
        ("cpufreq/energy_performance_preference", "performance"),
        ("cpuidle/state2/disable", "1"),
        ("cpuidle/state3/disable", "1"),
        ("cpuidle/state1/disable", "0"),
        ("power/pm_qos_resume_latency_us", "n/a"),
    ] {
        assert_eq!(bed.tree.read(&format!("{CPU2}/{file}")), want, "{file}");
    }
    assert_eq!(bed.tree.read(&format!("{DIE1}/min_freq_khz")), "2000000");
    // Every write was read back as written.
    assert!(
        p.written
            .iter()
            .all(|w| w.result.as_deref() == Ok(w.write.value.as_str()))
    );
    // The originals are in their file.
    match originals::load(&bed.file).unwrap() {
        originals::Found::Kept(k) => {
            assert_eq!(k[&Knob::Governor(2)], "powersave");
            assert_eq!(k[&Knob::UncoreMin("package_00_die_01".into())], "800000");
        }
        other => panic!("{other:?}"),
    }
    let p = bed.run(&[]);
    assert!(p.written.iter().all(|w| w.result.is_ok()));
    assert_eq!(bed.tree.snapshot(), before);
    assert!(bed.originals.is_empty());
    assert!(
        bed.refused_writes().is_empty(),
        "{:?}",
        bed.refused_writes()
    );
}

#[test]
fn power_frequencies_are_written_in_an_order_the_kernel_accepts() {
    let mut bed = Bed::new();
    // Start narrow, above what "slow" wants: lowering needs min first.
    bed.tree.cpu(1, 0, 0);
    std::fs::write(
        bed.tree
            .root
            .join("devices/system/cpu/cpu1/cpufreq/scaling_min_freq"),
        "3000000\n",
    )
    .unwrap();
    let mut slow_ok = classes();
    slow_ok[1].governor = None;
    let ask = |bed: &Bed, c: &[(u32, &str)], classes: Vec<Class>| Ask {
        root: bed.tree.root.clone(),
        originals_file: bed.file.clone(),
        online: bed.online.clone(),
        classes_of: c.iter().map(|(c, n)| (*c, n.to_string())).collect(),
        classes,
        originals: bed.originals.clone(),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let p = rt.block_on(pass(&bed.pool, ask(&bed, &[(1, "slow")], slow_ok.clone())));
    bed.originals = p.originals.clone();
    assert!(
        bed.refused_writes().is_empty(),
        "{:?}",
        bed.refused_writes()
    );
    assert_eq!(
        bed.tree
            .read("devices/system/cpu/cpu1/cpufreq/scaling_max_freq"),
        "1000000"
    );
    // Then up to latency: max first.
    let p = rt.block_on(pass(
        &bed.pool,
        ask(&bed, &[(1, "latency")], slow_ok.clone()),
    ));
    bed.originals = p.originals.clone();
    // And back: min 3 GHz again needs max first.
    let p = rt.block_on(pass(&bed.pool, ask(&bed, &[], slow_ok)));
    bed.originals = p.originals.clone();
    assert!(
        bed.refused_writes().is_empty(),
        "{:?}",
        bed.refused_writes()
    );
    assert_eq!(
        bed.tree
            .read("devices/system/cpu/cpu1/cpufreq/scaling_min_freq"),
        "3000000"
    );
    assert_eq!(
        bed.tree
            .read("devices/system/cpu/cpu1/cpufreq/scaling_governor"),
        "powersave"
    );
    let log = bed.fs.log.lock().unwrap();
    assert!(log.len() >= 8, "{log:?}");
}

#[test]
fn power_refusals_name_the_reason_and_touch_nothing() {
    let mut bed = Bed::new();
    let before = bed.tree.snapshot();
    // "slow" asks for a governor the CPU does not offer: refused; the rest
    // of the class is set.
    let p = bed.run(&[(0, "slow")]);
    let said: Vec<String> = p.plan.refusals.iter().map(ToString::to_string).collect();
    assert_eq!(
        said,
        [
            "class slow: governor schedutil on CPU 0: governor missing (available: performance powersave)"
        ]
    );
    assert!(matches!(
        p.plan.refusals[0].reason,
        Reason::GovernorMissing { .. }
    ));
    assert_eq!(
        bed.tree
            .read("devices/system/cpu/cpu0/cpufreq/scaling_governor"),
        "powersave"
    );
    assert_eq!(
        bed.tree
            .read("devices/system/cpu/cpu0/cpufreq/scaling_max_freq"),
        "1000000"
    );
    bed.run(&[]);
    assert_eq!(bed.tree.snapshot(), before);
}

#[test]
fn power_a_node_with_only_pm_qos_sets_it_and_refuses_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let mut bed = Bed::new();
    bed.tree = PowerTree::new(&dir.path().join("sys"));
    bed.tree.qos_only(0).qos_only(1);
    bed.online = "0-1".parse().unwrap();
    let p = bed.run(&[(1, "latency")]);
    assert!(!p.nothing_offered);
    assert_eq!(
        bed.tree
            .read("devices/system/cpu/cpu1/power/pm_qos_resume_latency_us"),
        "n/a"
    );
    assert!(
        p.plan
            .refusals
            .iter()
            .all(|r| r.reason == Reason::NotSupported && r.field != "resume_latency_us")
    );
    bed.run(&[]);
    assert_eq!(
        bed.tree
            .read("devices/system/cpu/cpu1/power/pm_qos_resume_latency_us"),
        "0"
    );
    // A node with no power file at all says so.
    let empty = tempfile::tempdir().unwrap();
    bed.tree = PowerTree::new(empty.path());
    let p = bed.run(&[(1, "latency")]);
    assert!(p.nothing_offered && p.written.is_empty());
}

#[test]
fn power_an_offline_cpu_is_put_back_when_it_comes_online() {
    let mut bed = Bed::new();
    bed.run(&[(3, "latency")]);
    // CPU 3 goes offline with the class on it: its cpufreq/ goes.
    bed.tree.offline(3);
    bed.online = "0-2".parse().unwrap();
    let p = bed.run(&[]);
    assert!(p.written.iter().all(|w| w.write.knob.cpu() != Some(3)));
    assert!(bed.originals.contains_key(&Knob::ResumeLatency(3)));
    // Back online: the kernel gives it a fresh cpufreq/, and pm_qos kept
    // what was written; the pass puts it back.
    bed.tree.cpu(3, 0, 1);
    std::fs::write(
        bed.tree
            .root
            .join("devices/system/cpu/cpu3/power/pm_qos_resume_latency_us"),
        "n/a\n",
    )
    .unwrap();
    bed.online = "0-3".parse().unwrap();
    bed.run(&[]);
    assert_eq!(
        bed.tree
            .read("devices/system/cpu/cpu3/power/pm_qos_resume_latency_us"),
        "0"
    );
    assert!(bed.originals.is_empty(), "{:?}", bed.originals);
}
