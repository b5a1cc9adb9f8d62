//! Power classes (issue #35) against a validating fake sysfs: one pass
//! (`power::sysfs::pass`, what the daemon runs on its I/O pool) reads what
//! each CPU offers, sets every field of a class, in an order the fake
//! kernel accepts, keeps the originals in their file before the first
//! write, and puts every one back when no class wants the file; what a CPU
//! cannot take is refused with the reason, and an offline CPU is left
//! alone until it comes back.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use pinctl::CpuSet;
use pinctl::config::{self, Class};
use pinctl::io::{IoConfig, IoPool};
use pinctl::power::sysfs::{Ask, Pass, pass};
use pinctl::power::{Knob, Offer, Reason, Why, originals};

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
        for (cpu, die) in [(0, 0), (1, 0), (2, 1), (3, 1)] {
            tree.cpu(cpu).on_die(cpu, 0, die);
        }
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
        self.pass_with(classes_of, &classes(), None, true)
    }

    /// One pass as the daemon runs it: `known` for a round of checks over
    /// the files in play, `may_set` false while the originals cannot be
    /// read.
    fn pass_with(
        &mut self,
        classes_of: &[(u32, &str)],
        classes: &[Class],
        known: Option<(Offer, BTreeSet<Knob>)>,
        may_set: bool,
    ) -> Pass {
        let ask = Ask {
            root: self.tree.root.clone(),
            originals_file: self.file.clone(),
            online: self.online.clone(),
            classes_of: classes_of
                .iter()
                .map(|(c, n)| (*c, n.to_string()))
                .collect(),
            classes: classes.to_vec(),
            originals: self.originals.clone(),
            may_set,
            known,
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let p = rt.block_on(pass(&self.pool, ask));
        self.originals = p.originals.clone();
        p
    }

    /// Every write was one the kernel takes.
    fn assert_all_taken(&self) {
        let refused = self.refused_writes();
        assert!(refused.is_empty(), "{refused:?}");
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
const UNCORE: &str = "devices/system/cpu/intel_uncore_frequency";
const DIE1: &str = "devices/system/cpu/intel_uncore_frequency/package_00_die_01";

#[test]
fn power_a_class_sets_every_field_and_release_puts_back_every_original() {
    let mut bed = Bed::new();
    let before = bed.tree.snapshot();
    let p = bed.run(&[(2, "latency")]);
    assert!(p.plan.refusals.is_empty(), "{:?}", p.plan.refusals);
    assert!(p.error.is_none() && p.save_error.is_none() && p.read_errors.is_empty());
    bed.assert_all_taken();
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
    bed.assert_all_taken();
}

#[test]
fn power_uncore_on_a_tpmi_part_sets_the_clusters_of_the_die_only() {
    // Kernel 6.5+ on TPMI parts: a package_PP_die_DD per package beside one
    // uncoreNN per fabric cluster; die 1 has two clusters, and one cluster
    // (I/O) has no die_id. Writing package_00_die_00 would set every
    // cluster of the package.
    let mut bed = Bed::new();
    let _ = std::fs::remove_dir_all(bed.tree.root.join(UNCORE));
    bed.tree
        .die(0, 0)
        .cluster(0, 0, Some(0))
        .cluster(1, 0, Some(1))
        .cluster(2, 0, Some(1))
        .cluster(3, 0, None);
    let before = bed.tree.snapshot();
    let p = bed.run(&[(2, "latency")]);
    assert!(p.plan.refusals.is_empty(), "{:?}", p.plan.refusals);
    bed.assert_all_taken();
    for (dir, want) in [
        ("uncore01", "2000000"),
        ("uncore02", "2000000"),
        ("uncore00", "800000"),
        ("uncore03", "800000"),
        ("package_00_die_00", "800000"),
    ] {
        assert_eq!(
            bed.tree.read(&format!("{UNCORE}/{dir}/min_freq_khz")),
            want,
            "{dir}"
        );
    }
    bed.run(&[]);
    assert_eq!(bed.tree.snapshot(), before);
    assert!(bed.originals.is_empty());
}

#[test]
fn power_a_round_reads_only_the_files_in_play_and_still_mends_them() {
    let mut bed = Bed::new();
    let full = bed.run(&[(2, "latency")]);
    let offer = full.offer.clone().expect("a full read returns the offer");
    let knobs: BTreeSet<Knob> = full
        .plan
        .wanted
        .keys()
        .chain(bed.originals.keys())
        .cloned()
        .collect();
    // Something writes over one file in play.
    let gov = format!("{CPU2}/cpufreq/scaling_governor");
    std::fs::write(bed.tree.root.join(&gov), "powersave\n").unwrap();
    let reads = |bed: &Bed| bed.fs.reads.load(std::sync::atomic::Ordering::Relaxed);
    let before = reads(&bed);
    let p = bed.pass_with(
        &[(2, "latency")],
        &classes(),
        Some((offer.clone(), knobs.clone())),
        true,
    );
    // One read per file in play, one read back per write.
    assert_eq!(reads(&bed) - before, knobs.len() + p.written.len());
    assert!(p.offer.is_none());
    assert_eq!(p.written.len(), 1, "{:?}", p.written);
    assert_eq!(bed.tree.read(&gov), "performance");
    // A file in play that is gone (the CPU went offline): a full read.
    bed.tree.offline(2);
    let p = bed.pass_with(&[(2, "latency")], &classes(), Some((offer, knobs)), true);
    assert!(p.offer.is_some());
}

/// The files in play for a round, as `Daemon::follow_power` gathers them:
/// [`pinctl::power::in_play`] and the failed writes.
fn in_play(bed: &Bed, classes_of: &[(u32, &str)], offer: &Offer, p: &Pass) -> BTreeSet<Knob> {
    let classes_of = classes_of
        .iter()
        .map(|(c, n)| (*c, n.to_string()))
        .collect();
    let mut knobs = pinctl::power::in_play(&classes_of, offer, &bed.originals);
    knobs.extend(
        p.written
            .iter()
            .filter(|w| w.result.is_err())
            .map(|w| w.write.knob.clone()),
    );
    knobs
}

/// Review of 65fe532: a round that reads only the files in play must plan
/// what a full read plans. A class that sets max_freq alone is checked
/// against the CPU's scaling_min_freq, a file no class wants and that has
/// no original, so a round does not read it: the refusal a full read made
/// is dropped, and the next round writes a maximum below the minimum.
#[test]
fn power_a_round_over_the_files_in_play_refuses_what_a_full_read_refuses() {
    let mut bed = Bed::new();
    // Something else (tuned, the operator) holds CPU 1's minimum at 3 GHz.
    bed.tree.put(
        "devices/system/cpu/cpu1/cpufreq/scaling_min_freq",
        "3000000",
    );
    let mut cls = classes();
    // "slow" with its max_freq (1 GHz) and resume latency, nothing else.
    cls[1].min_freq = None;
    cls[1].governor = None;
    cls[1].resume_latency_us = cls[0].resume_latency_us;
    let full = bed.pass_with(&[(1, "slow")], &cls, None, true);
    let offer = full.offer.clone().expect("a full read");
    let refused: Vec<String> = full.plan.refusals.iter().map(ToString::to_string).collect();
    assert!(
        refused
            .iter()
            .any(|r| r.contains("max_freq") && r.contains("above the maximum")),
        "{refused:?}"
    );
    // Two rounds of checks with nothing changed, as the daemon runs them.
    let knobs = in_play(&bed, &[(1, "slow")], &offer, &full);
    let first = bed.pass_with(&[(1, "slow")], &cls, Some((offer.clone(), knobs)), true);
    assert!(
        first.offer.is_none(),
        "the round read only the files in play"
    );
    let knobs = in_play(&bed, &[(1, "slow")], &offer, &first);
    let second = bed.pass_with(&[(1, "slow")], &cls, Some((offer, knobs)), true);
    let mut wrong = Vec::new();
    for (name, p) in [("first round", &first), ("second round", &second)] {
        let said: Vec<String> = p.plan.refusals.iter().map(ToString::to_string).collect();
        if said != refused {
            wrong.push(format!(
                "{name} refuses {said:?}, the full read {refused:?}"
            ));
        }
        for w in &p.written {
            if w.write.knob == Knob::MaxFreq(1) {
                wrong.push(format!("{name} writes {:?}: {:?}", w.write, w.result));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{wrong:#?}\nrefused writes: {:?}",
        bed.refused_writes()
    );
}

/// Review of a7419ce: the kernel gives an uncoreNN a die_id only when a
/// package has more than one die and the cluster has core agents
/// (uncore-frequency-common.c), so a TPMI part with one die per package
/// has none. The daemon then writes package_00_die_00, which the kernel
/// applies to every cluster of the package, the I/O cluster too; the docs
/// say package_*_die_* is left alone on TPMI parts. The clusters with core
/// agents (agent_types) are the ones to set.
#[test]
fn power_uncore_on_a_tpmi_part_without_die_ids_leaves_the_package_directory_alone() {
    let mut bed = Bed::new();
    let _ = std::fs::remove_dir_all(bed.tree.root.join(UNCORE));
    for cpu in 0..4 {
        bed.tree.on_die(cpu, 0, 0);
    }
    bed.tree
        .die(0, 0)
        .cluster(0, 0, None)
        .cluster(1, 0, None)
        .cluster(2, 0, None);
    for (n, agents) in [(0, "core cache memory"), (1, "core cache"), (2, "io")] {
        std::fs::write(
            bed.tree
                .root
                .join(format!("{UNCORE}/uncore{n:02}/agent_types")),
            format!("{agents}\n"),
        )
        .unwrap();
    }
    bed.run(&[(2, "latency")]);
    let mut wrong = Vec::new();
    for (dir, want) in [
        ("package_00_die_00", "800000"),
        ("uncore00", "2000000"),
        ("uncore01", "2000000"),
        ("uncore02", "800000"),
    ] {
        let got = bed.tree.read(&format!("{UNCORE}/{dir}/min_freq_khz"));
        if got != want {
            wrong.push(format!("{dir}/min_freq_khz reads {got}, not {want}"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    // A kernel that names neither dies nor agents: no cluster is known to
    // serve a CPU, so uncore is refused, and the package is still left alone.
    bed.run(&[]);
    for n in 0..3 {
        std::fs::remove_file(
            bed.tree
                .root
                .join(format!("{UNCORE}/uncore{n:02}/agent_types")),
        )
        .unwrap();
    }
    let p = bed.run(&[(2, "latency")]);
    assert!(
        p.plan
            .refusals
            .iter()
            .any(|r| r.field == "uncore_min_freq" && r.reason == Reason::NotSupported),
        "{:?}",
        p.plan.refusals
    );
    assert_eq!(
        bed.tree
            .read(&format!("{UNCORE}/package_00_die_00/min_freq_khz")),
        "800000"
    );
}

#[test]
fn power_frequencies_are_written_in_an_order_the_kernel_accepts() {
    let mut bed = Bed::new();
    // Start narrow, above what "slow" wants: lowering needs min first.
    bed.tree.cpu(1);
    bed.tree.put(
        "devices/system/cpu/cpu1/cpufreq/scaling_min_freq",
        "3000000",
    );
    let mut slow_ok = classes();
    slow_ok[1].governor = None;
    bed.pass_with(&[(1, "slow")], &slow_ok, None, true);
    bed.assert_all_taken();
    assert_eq!(
        bed.tree
            .read("devices/system/cpu/cpu1/cpufreq/scaling_max_freq"),
        "1000000"
    );
    // Then up to latency: max first.
    bed.pass_with(&[(1, "latency")], &slow_ok, None, true);
    // And back: min 3 GHz again needs max first.
    bed.pass_with(&[], &slow_ok, None, true);
    bed.assert_all_taken();
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

/// While the originals file cannot be read, no class's value is written
/// (the originals it holds would be lost), and originals known are still
/// put back.
#[test]
fn power_no_class_is_set_while_the_originals_cannot_be_read() {
    let mut bed = Bed::new();
    bed.run(&[(1, "latency")]);
    let before_governor = bed
        .tree
        .read("devices/system/cpu/cpu1/cpufreq/scaling_governor");
    assert_eq!(before_governor, "performance");
    // CPU 1 released, CPU 2 pinned: 1 is put back, 2 is left alone.
    let p = bed.pass_with(&[(2, "latency")], &classes(), None, false);
    assert!(
        p.written
            .iter()
            .all(|w| w.write.why == Why::Restore && w.write.knob.cpu() != Some(2)),
        "{:?}",
        p.written
    );
    assert_eq!(
        bed.tree
            .read("devices/system/cpu/cpu1/cpufreq/scaling_governor"),
        "powersave"
    );
    assert_eq!(
        bed.tree
            .read("devices/system/cpu/cpu2/cpufreq/scaling_governor"),
        "powersave"
    );
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
    bed.tree.cpu(3);
    bed.tree.put(
        "devices/system/cpu/cpu3/power/pm_qos_resume_latency_us",
        "n/a",
    );
    bed.online = "0-3".parse().unwrap();
    bed.run(&[]);
    assert_eq!(
        bed.tree
            .read("devices/system/cpu/cpu3/power/pm_qos_resume_latency_us"),
        "0"
    );
    assert!(bed.originals.is_empty(), "{:?}", bed.originals);
}

// ---------------------------------------------------------------------------
// The daemon, end to end, on a copy of the sysfs fixture with power files
// (plain files: the order and refusals are proven above, through the
// validating file system).

mod daemon {
    use std::fs;
    use std::path::PathBuf;

    use pinctl::CpuSet;
    use pinctl::api;

    use crate::support::fake_cgroup::{Driver, ONLINE, Qos, Spec, Version, container_id, set, uid};
    use crate::support::fake_power::PowerTree;
    use crate::support::world::{Options, World};

    struct Env {
        w: World,
        power: PowerTree,
        originals: PathBuf,
    }

    env_of_world!(Env);

    const CLASSES: &str = r#"
[[class]]
name = "latency"
governor = "performance"
min_freq = "base"
disabled_cstates = ["C6"]
resume_latency_us = "n/a"

[[class]]
name = "slow"
max_freq = "1GHz"
resume_latency_us = 20
"#;

    fn options(w: Option<&World>, on: bool) -> Options {
        let originals = w.map_or(PathBuf::from("/nonexistent"), |w| {
            w.tmp.path().join("run/power.json")
        });
        Options {
            keys: vec![
                "watchdog_interval = \"200ms\"".into(),
                format!("power_originals = {:?}", originals.display().to_string()),
                format!("{CLASSES}\n[power]\nenabled = {on}\nexclusive = \"latency\"\n"),
            ],
            copy_sysfs: true,
            ..Options::default()
        }
    }

    fn world(files: bool) -> Env {
        let w = World::new(
            "pinctld-power",
            Version::V2,
            Driver::Systemd,
            &options(None, true),
        );
        w.write_config(&options(Some(&w), true));
        let power = PowerTree::new(&w.sysfs);
        if files {
            for cpu in set(ONLINE).iter() {
                power.cpu(cpu);
            }
        }
        let originals = w.tmp.path().join("run/power.json");
        Env {
            w,
            power,
            originals,
        }
    }

    impl Env {
        fn cpu_file(&self, cpu: u32, file: &str) -> String {
            self.power
                .read(&format!("devices/system/cpu/cpu{cpu}/{file}"))
        }

        /// Waits until every CPU of `cpus` reads as the class, and every
        /// other as at boot.
        fn wait_class(&self, cpus: &CpuSet) {
            self.wait_for(&format!("the class on {cpus} alone"), || {
                for cpu in set(ONLINE).iter() {
                    let want = if cpus.contains(cpu) {
                        ("performance", "2000000", "1", "n/a")
                    } else {
                        ("powersave", "800000", "0", "0")
                    };
                    let got = (
                        self.cpu_file(cpu, "cpufreq/scaling_governor"),
                        self.cpu_file(cpu, "cpufreq/scaling_min_freq"),
                        self.cpu_file(cpu, "cpuidle/state3/disable"),
                        self.cpu_file(cpu, "power/pm_qos_resume_latency_us"),
                    );
                    if (
                        got.0.as_str(),
                        got.1.as_str(),
                        got.2.as_str(),
                        got.3.as_str(),
                    ) != want
                    {
                        return Err(format!("CPU {cpu} reads {got:?}"));
                    }
                }
                Ok(())
            });
        }

        fn pin(&self, n: u32) -> (String, CpuSet) {
            let pod = self.k.pod(Qos::Guaranteed, &uid(n));
            self.tree.create(&pod, &Spec::limit(2));
            let app = self.k.container(&pod, &container_id(n));
            self.tree.create(&app, &Spec::limit(2));
            let cpus = self.wait_pinned(&app, 2);
            (app, cpus)
        }
    }

    /// Set on pin, read back in the status, one event per write, kept
    /// across a restart, put back on release; and a restart with the
    /// state file lost (the workload gone meanwhile) still puts every
    /// original back.
    #[test]
    fn power_a_pin_gets_its_class_and_every_original_comes_back() {
        let mut env = world(true);
        let before = env.power.snapshot();
        env.start();
        let (app, cpus) = env.pin(1);
        env.wait_class(&cpus);
        let power = env.wait_for("the power section", || match env.served()?.power {
            Some(p) if p.files.len() == 2 * 4 => Ok(p),
            other => Err(format!("{other:?}")),
        });
        assert!(power.on && power.refused.is_empty() && power.failed.is_empty());
        assert_eq!(power.classes.len(), 1);
        assert_eq!(power.classes[0].name, "latency");
        assert_eq!(power.classes[0].cpus, cpus);
        assert!(
            power
                .files
                .iter()
                .all(|f| f.read.as_deref() == Some(f.value.as_str())),
            "{power:?}"
        );
        let events = env.served_events().unwrap();
        let writes = events
            .iter()
            .filter(|e| matches!(&e.what, api::EventKind::Power { class: Some(c), error: None, .. } if c == "latency"))
            .count();
        assert_eq!(writes, 2 * 4, "{events:?}");
        assert!(env.originals.exists());
        // Visible: a Power: line in the status, the class and the values
        // read back in describe, one line per write in events.
        let text = pinctl::cli::status::render(
            &env.served().unwrap(),
            pinctl::cli::status::Mode::Online,
            pinctl::cli::style::Style::OFF,
            0,
        );
        let line = text
            .lines()
            .find(|l| l.starts_with("Power:"))
            .unwrap_or_else(|| panic!("{text}"));
        assert!(
            line.contains(&format!("latency on CPUs {cpus}")) && line.contains("8 files set"),
            "{line}"
        );
        let page = env.described(&app);
        assert!(page.contains("Power:      class latency"), "{page}");
        let first = cpus.iter().next().unwrap();
        assert!(
            page.contains(&format!("cpu{first} scaling_governor=performance")),
            "{page}"
        );
        let lines: Vec<String> = events
            .iter()
            .map(|e| pinctl::cli::events::format_event(e, 0, pinctl::cli::style::Style::OFF))
            .filter(|l| l.contains("power devices/system/cpu/"))
            .collect();
        assert!(
            lines
                .iter()
                .any(|l| l.contains("scaling_governor: powersave -> performance (class latency, ")),
            "{lines:?}"
        );
        // Each write names its workload, so describe's history has it.
        assert!(
            page.contains(&format!(
                "power devices/system/cpu/cpu{first}/cpufreq/scaling_governor: powersave -> performance"
            )),
            "{page}"
        );

        // Written over: a round of checks (reading only the files in play)
        // sets it again.
        std::fs::write(
            env.power.root.join(format!(
                "devices/system/cpu/cpu{first}/cpufreq/scaling_governor"
            )),
            "powersave\n",
        )
        .unwrap();
        env.wait_class(&cpus);

        // A restart keeps the class (nothing written again).
        env.stop();
        env.start();
        env.wait_class(&cpus);
        // Released: every original back.
        env.tree.remove(&app);
        env.wait_class(&CpuSet::new());
        env.wait_for("nothing kept", || match env.served()?.power {
            Some(p) if p.originals == 0 && p.files.is_empty() => Ok(()),
            other => Err(format!("{other:?}")),
        });
        // The put-back names the workload the CPU left.
        let put_back: Vec<_> = env
            .served_events()
            .unwrap()
            .into_iter()
            .filter_map(|e| match e.what {
                api::EventKind::Power {
                    class: None,
                    workload,
                    ..
                } => Some(workload),
                _ => None,
            })
            .collect();
        assert!(
            put_back.len() == 2 * 4 && put_back.iter().all(Option::is_some),
            "{put_back:?}"
        );
        assert_eq!(env.power.snapshot(), before);

        // Pinned again, then the daemon stops, its state file is lost and
        // the workload ends while no daemon runs: the originals file on
        // the runtime directory still puts every file back.
        let (app, cpus) = env.pin(2);
        env.wait_class(&cpus);
        env.stop();
        env.wait_class(&cpus);
        fs::remove_file(&env.state).unwrap();
        env.tree.remove(&app);
        env.start();
        env.wait_class(&CpuSet::new());
        assert_eq!(env.power.snapshot(), before);
        env.stop();
    }

    /// A reload that turns `[power]` off puts every original back, and the
    /// section goes; one that turns it on sets the class again.
    #[test]
    fn power_a_reload_turns_the_classes_off_and_on() {
        let mut env = world(true);
        let before = env.power.snapshot();
        env.start();
        let (_app, cpus) = env.pin(1);
        env.wait_class(&cpus);
        env.write_config(&options(Some(&env.w), false));
        env.reload();
        env.wait_class(&CpuSet::new());
        env.wait_for("no power section", || match env.served()?.power {
            None => Ok(()),
            Some(p) => Err(format!("{p:?}")),
        });
        assert_eq!(env.power.snapshot(), before);
        env.write_config(&options(Some(&env.w), true));
        env.reload();
        env.wait_class(&cpus);
        env.stop();
    }

    /// A workload chooses its class by the annotation `pinctl.io/cpu-class`
    /// or the xattr `user.pinctl.class` (the xattr wins, and is followed
    /// when it changes); a name no class has gets the default, and the
    /// status says so.
    #[test]
    fn power_a_workload_chooses_its_class_by_annotation_or_xattr() {
        let mut env = world(true);
        env.start();
        let slow = |env: &Env, cpus: &CpuSet| {
            env.wait_for(&format!("slow on {cpus}"), || {
                for cpu in cpus.iter() {
                    let got = (
                        env.cpu_file(cpu, "cpufreq/scaling_max_freq"),
                        env.cpu_file(cpu, "power/pm_qos_resume_latency_us"),
                        env.cpu_file(cpu, "cpufreq/scaling_governor"),
                    );
                    if got != ("1000000".into(), "20".into(), "powersave".into()) {
                        return Err(format!("CPU {cpu} reads {got:?}"));
                    }
                }
                Ok(())
            })
        };
        // By annotation, in the bundle the runtime writes first.
        env.bundle_with(1, &uid(1), Some("app"), &[("pinctl.io/cpu-class", "slow")]);
        let (_a, a) = env.pin(1);
        slow(&env, &a);
        // By xattr, set on a pinned workload: followed.
        let (b_rel, b) = env.pin(2);
        env.wait_for("latency on b", || {
            match env.cpu_file(b.iter().next().unwrap(), "cpufreq/scaling_governor") {
                g if g == "performance" => Ok(()),
                g => Err(g),
            }
        });
        xattr::set(env.tree.dir(&b_rel), "user.pinctl.class", b"slow").unwrap();
        slow(&env, &b);
        // A name no class has: the default, said in the status.
        xattr::set(env.tree.dir(&b_rel), "user.pinctl.class", b"nope").unwrap();
        env.wait_for("latency on b again", || {
            match env.cpu_file(b.iter().next().unwrap(), "cpufreq/scaling_governor") {
                g if g == "performance" => Ok(()),
                g => Err(g),
            }
        });
        env.wait_for("the unknown class said", || match env.served()?.power {
            Some(p)
                if p.refused
                    .iter()
                    .any(|r| r.contains("asks for class \"nope\"")) =>
            {
                Ok(())
            }
            other => Err(format!("{other:?}")),
        });
        slow(&env, &a);
        env.stop();
    }

    /// CPU hot-plug: a shared CPU with the shared class goes offline (its
    /// `cpufreq/` goes) and comes back with the kernel's values: the
    /// periodic reconcile sees it, and it gets its class again.
    #[test]
    fn power_a_cpu_back_online_gets_its_class_again() {
        let mut env = world(true);
        let mut opts = options(Some(&env.w), true);
        opts.reconcile_interval = "300ms";
        if let Some(last) = opts.keys.last_mut() {
            last.push_str("shared = \"slow\"\n");
        }
        env.write_config(&opts);
        env.start();
        let cpu = 30;
        let slow = |env: &Env, want: bool| {
            env.wait_for(&format!("CPU {cpu} slow: {want}"), || {
                let max = env.cpu_file(cpu, "cpufreq/scaling_max_freq");
                match (max.as_str(), want) {
                    ("1000000", true) | ("3500000", false) => Ok(()),
                    _ => Err(max),
                }
            })
        };
        slow(&env, true);
        // Offline: the kernel drops cpufreq/ and the topology.
        let cpus = env.sysfs.join("devices/system/cpu");
        let topo = cpus.join(format!("cpu{cpu}/topology"));
        let saved = env.tmp.path().join("topology-saved");
        crate::support::copy_dir(&topo, &saved);
        fs::remove_dir_all(&topo).unwrap();
        env.power.offline(cpu);
        fs::write(cpus.join("online"), "0-29,31\n").unwrap();
        fs::write(cpus.join("offline"), format!("{cpu}\n")).unwrap();
        let node1 = env.sysfs.join("devices/system/node/node1/cpulist");
        let node1_before = fs::read_to_string(&node1).unwrap();
        fs::write(&node1, "8-15,24-29,31\n").unwrap();
        let online = set("0-29,31");
        env.tree.set_online(&online);
        env.wait_for("CPU 30 gone from the status", || {
            match env.served()?.power {
                Some(p) if p.classes.iter().all(|c| !c.cpus.contains(cpu)) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        });
        // Back, with a fresh cpufreq/ (the kernel's values).
        crate::support::copy_dir(&saved, &topo);
        env.power.cpu(cpu);
        fs::write(cpus.join("online"), "0-31\n").unwrap();
        fs::write(cpus.join("offline"), "\n").unwrap();
        fs::write(&node1, node1_before).unwrap();
        env.tree.set_online(&set(ONLINE));
        slow(&env, true);
        env.stop();
    }

    /// A node without any power file says so in the status, and is
    /// otherwise unaffected: healthy, pinned as usual.
    #[test]
    fn power_a_node_without_the_files_says_so() {
        let mut env = world(false);
        env.start();
        env.pin(1);
        let power = env.wait_for("unsupported said", || match env.served()?.power {
            Some(p) if p.unsupported => Ok(p),
            other => Err(format!("{other:?}")),
        });
        assert!(power.failed.is_empty() && power.error.is_none());
        let status = env.served().unwrap();
        assert_eq!(status.health.state, "healthy");
        let text = pinctl::cli::status::render(
            &status,
            pinctl::cli::status::Mode::Online,
            pinctl::cli::style::Style::OFF,
            0,
        );
        assert!(
            text.contains("Config:      [power] is on, but no CPU here has"),
            "{text}"
        );
        env.stop();
    }
}
