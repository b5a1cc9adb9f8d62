//! The planner's unit tests and its property test, against a fake kernel
//! that refuses what the kernel refuses.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use crate::config::{Class, Freq, ResumeLatency};

const DIES: [&str; 2] = ["package_00_die_00", "package_00_die_01"];

fn class(name: &str) -> Class {
    Class {
        name: name.into(),
        governor: None,
        min_freq: None,
        max_freq: None,
        epp: None,
        disabled_cstates: Vec::new(),
        resume_latency_us: None,
        uncore_min_freq: None,
        uncore_max_freq: None,
        line: 1,
    }
}

fn latency() -> Class {
    Class {
        governor: Some("performance".into()),
        min_freq: Some(Freq::Base),
        max_freq: Some(Freq::Max),
        epp: Some("performance".into()),
        disabled_cstates: vec!["C6".into(), "C1E".into()],
        resume_latency_us: Some(ResumeLatency::NoLimit),
        uncore_min_freq: Some(Freq::Khz(2_000_000)),
        uncore_max_freq: Some(Freq::Max),
        ..class("latency")
    }
}

/// Four CPUs, two per die, with every file.
fn offer(cpus: u32) -> Offer {
    let mut o = Offer::default();
    for cpu in 0..cpus {
        o.cpus.insert(
            cpu,
            CpuOffer {
                freq: Some(FreqOffer {
                    governors: vec!["performance".into(), "powersave".into()],
                    min: 800_000,
                    max: 3_500_000,
                    base: Some(2_000_000),
                    epp: Some(vec![
                        "default".into(),
                        "performance".into(),
                        "balance_performance".into(),
                        "balance_power".into(),
                        "power".into(),
                    ]),
                }),
                cstates: vec![
                    (0, "POLL".into()),
                    (1, "C1".into()),
                    (2, "C1E".into()),
                    (3, "C6".into()),
                ],
                resume_latency: true,
                dies: vec![DIES[(cpu / 2) as usize % 2].into()],
            },
        );
    }
    for d in DIES {
        o.dies.insert(
            d.into(),
            DieOffer {
                min: 800_000,
                max: 2_400_000,
            },
        );
    }
    o
}

/// The files' boot values.
fn boot(offer: &Offer) -> BTreeMap<Knob, String> {
    let mut v = BTreeMap::new();
    for (&cpu, o) in &offer.cpus {
        v.insert(Knob::Governor(cpu), "powersave".into());
        v.insert(Knob::MinFreq(cpu), "800000".into());
        v.insert(Knob::MaxFreq(cpu), "3500000".into());
        v.insert(Knob::Epp(cpu), "balance_performance".into());
        for (k, _) in &o.cstates {
            v.insert(Knob::CstateDisable(cpu, *k), "0".into());
        }
        v.insert(Knob::ResumeLatency(cpu), "0".into());
    }
    for d in offer.dies.keys() {
        v.insert(Knob::UncoreMin(d.clone()), "800000".into());
        v.insert(Knob::UncoreMax(d.clone()), "2400000".into());
    }
    v
}

/// A kernel that checks each write as sysfs does: a governor it offers,
/// frequencies within the hardware's range and min ≤ max at every step.
fn kernel_write(
    offer: &Offer,
    files: &mut BTreeMap<Knob, String>,
    knob: &Knob,
    value: &str,
) -> Result<(), String> {
    if !offer.has(knob) {
        return Err(format!("{knob}: no such file"));
    }
    let num = |v: &str| {
        v.parse::<u64>()
            .map_err(|_| format!("{knob}: EINVAL {v:?}"))
    };
    let get = |k: &Knob| {
        files
            .get(k)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    match knob {
        Knob::Governor(c) => {
            let f = offer.cpus[c].freq.as_ref().unwrap();
            if !f.governors.iter().any(|g| g == value) {
                return Err(format!("{knob}: EINVAL {value:?}"));
            }
        }
        Knob::MinFreq(c) | Knob::MaxFreq(c) => {
            let f = offer.cpus[c].freq.as_ref().unwrap();
            let v = num(value)?;
            if v < f.min || v > f.max {
                return Err(format!("{knob}: EINVAL {v} out of range"));
            }
            let ok = match knob {
                Knob::MinFreq(_) => v <= get(&Knob::MaxFreq(*c)),
                _ => v >= get(&Knob::MinFreq(*c)),
            };
            if !ok {
                return Err(format!("{knob}: EINVAL {v} crosses the other bound"));
            }
        }
        Knob::Epp(_) => {
            if !(crate::config::EPP_NAMES.contains(&value) || value.parse::<u8>().is_ok()) {
                return Err(format!("{knob}: EINVAL {value:?}"));
            }
        }
        Knob::CstateDisable(..) => {
            if value != "0" && value != "1" {
                return Err(format!("{knob}: EINVAL {value:?}"));
            }
        }
        Knob::ResumeLatency(_) => {
            if value != "n/a" && value.parse::<i32>().map_or(true, |v| v < 0) {
                return Err(format!("{knob}: EINVAL {value:?}"));
            }
        }
        Knob::UncoreMin(d) | Knob::UncoreMax(d) => {
            let o = &offer.dies[d];
            let v = num(value)?;
            if v < o.min || v > o.max {
                return Err(format!("{knob}: EINVAL {v} out of range"));
            }
            let ok = match knob {
                Knob::UncoreMin(_) => v <= get(&Knob::UncoreMax(d.clone())),
                _ => v >= get(&Knob::UncoreMin(d.clone())),
            };
            if !ok {
                return Err(format!("{knob}: EINVAL {v} crosses the other bound"));
            }
        }
    }
    files.insert(knob.clone(), value.to_string());
    Ok(())
}

/// Plans, saves the originals, writes, forgets what was put back: what the
/// daemon does with a plan.
fn step(
    classes_of: &BTreeMap<u32, String>,
    classes: &[Class],
    offer: &Offer,
    files: &mut BTreeMap<Knob, String>,
    originals: &mut BTreeMap<Knob, String>,
) -> Result<Plan, String> {
    let current: BTreeMap<Knob, String> = files
        .iter()
        .filter(|(k, _)| offer.has(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let p = plan(classes_of, classes, offer, &current, originals);
    for (k, v) in &p.save {
        originals.entry(k.clone()).or_insert_with(|| v.clone());
    }
    for w in &p.writes {
        kernel_write(offer, files, &w.knob, &w.value)?;
    }
    for k in &p.forget {
        originals.remove(k);
    }
    Ok(p)
}

fn cpus(pairs: &[(u32, &str)]) -> BTreeMap<u32, String> {
    pairs.iter().map(|(c, n)| (*c, n.to_string())).collect()
}

#[test]
fn a_class_sets_every_field_and_release_puts_every_original_back() {
    let offer = offer(4);
    let start = boot(&offer);
    let mut files = start.clone();
    let mut originals = BTreeMap::new();
    let classes = [latency()];
    let p = step(
        &cpus(&[(2, "latency")]),
        &classes,
        &offer,
        &mut files,
        &mut originals,
    )
    .unwrap();
    assert!(p.refusals.is_empty(), "{:?}", p.refusals);
    let want = [
        (Knob::Governor(2), "performance"),
        (Knob::MinFreq(2), "2000000"),
        (Knob::MaxFreq(2), "3500000"),
        (Knob::Epp(2), "performance"),
        (Knob::CstateDisable(2, 2), "1"),
        (Knob::CstateDisable(2, 3), "1"),
        (Knob::CstateDisable(2, 1), "0"),
        (Knob::ResumeLatency(2), "n/a"),
        (Knob::UncoreMin(DIES[1].into()), "2000000"),
        (Knob::UncoreMax(DIES[1].into()), "2400000"),
        (Knob::UncoreMin(DIES[0].into()), "800000"),
        (Knob::Governor(3), "powersave"),
    ];
    for (k, v) in want {
        assert_eq!(files[&k], v, "{k}");
    }
    // Only files that changed are written, and their originals kept first.
    assert_eq!(p.writes.len(), 7, "{:?}", p.writes);
    assert_eq!(p.save.len(), 9, "{:?}", p.save);
    assert_eq!(originals[&Knob::Governor(2)], "powersave");

    let p = step(
        &BTreeMap::new(),
        &classes,
        &offer,
        &mut files,
        &mut originals,
    )
    .unwrap();
    assert!(p.writes.iter().all(|w| w.why == Why::Restore));
    assert_eq!(files, start);
    assert!(originals.is_empty(), "{originals:?}");
}

#[test]
fn the_governor_goes_before_epp_and_max_widens_before_min_rises() {
    let offer = offer(1);
    let mut files = boot(&offer);
    files.insert(Knob::MinFreq(0), "800000".into());
    files.insert(Knob::MaxFreq(0), "1000000".into());
    let fast = Class {
        min_freq: Some(Freq::Khz(3_000_000)),
        max_freq: Some(Freq::Max),
        governor: Some("performance".into()),
        epp: Some("performance".into()),
        ..class("fast")
    };
    let slow = Class {
        min_freq: Some(Freq::Min),
        max_freq: Some(Freq::Khz(900_000)),
        ..class("slow")
    };
    let classes = [fast, slow];
    let mut originals = BTreeMap::new();
    let p = step(
        &cpus(&[(0, "fast")]),
        &classes,
        &offer,
        &mut files,
        &mut originals,
    )
    .unwrap();
    let knobs: Vec<Knob> = p.writes.iter().map(|w| w.knob.clone()).collect();
    assert_eq!(
        knobs,
        [
            Knob::Governor(0),
            Knob::MaxFreq(0),
            Knob::MinFreq(0),
            Knob::Epp(0)
        ]
    );
    // Down again: the minimum comes down before the maximum.
    let p = step(
        &cpus(&[(0, "slow")]),
        &classes,
        &offer,
        &mut files,
        &mut originals,
    )
    .unwrap();
    let knobs: Vec<&Knob> = p.writes.iter().map(|w| &w.knob).collect();
    let min = knobs.iter().position(|k| **k == Knob::MinFreq(0)).unwrap();
    let max = knobs.iter().position(|k| **k == Knob::MaxFreq(0)).unwrap();
    assert!(min < max, "{knobs:?}");
    assert_eq!(files[&Knob::MaxFreq(0)], "900000");
    step(
        &BTreeMap::new(),
        &classes,
        &offer,
        &mut files,
        &mut originals,
    )
    .unwrap();
    assert_eq!(files[&Knob::MaxFreq(0)], "1000000");
    assert_eq!(files[&Knob::Governor(0)], "powersave");
}

#[test]
fn refusals_say_why_and_leave_the_file_alone() {
    let mut offer = offer(4);
    // CPU 1 has no cpufreq, cpuidle, pm_qos or die.
    offer.cpus.insert(1, CpuOffer::default());
    let odd = Class {
        governor: Some("schedutil".into()),
        min_freq: Some(Freq::Khz(4_000_000)),
        epp: Some("balance_power".into()),
        disabled_cstates: vec!["C10".into()],
        uncore_max_freq: Some(Freq::Khz(3_000_000)),
        ..class("odd")
    };
    let classes = [odd, latency()];
    let files = boot(&offer);
    let p = plan(
        &cpus(&[(0, "odd"), (1, "latency")]),
        &classes,
        &offer,
        &files,
        &BTreeMap::new(),
    );
    let said: Vec<String> = p.refusals.iter().map(ToString::to_string).collect();
    assert_eq!(
        said,
        [
            "class odd: governor schedutil on CPU 0: governor missing (available: performance powersave)",
            "class odd: min_freq 4000000kHz on CPU 0: 4000000 kHz is out of range (800000-3500000 kHz)",
            "class odd: disabled_cstates C10 on CPU 0: no such C-state (available: POLL C1 C1E C6)",
            "class odd: uncore_max_freq 3000000kHz on die package_00_die_00: 3000000 kHz is out of range (800000-2400000 kHz)",
            "class latency: governor performance on CPU 1: not supported on this CPU",
            "class latency: min_freq base on CPU 1: not supported on this CPU",
            "class latency: max_freq max on CPU 1: not supported on this CPU",
            "class latency: epp performance on CPU 1: not supported on this CPU",
            "class latency: disabled_cstates C6 on CPU 1: not supported on this CPU",
            "class latency: disabled_cstates C1E on CPU 1: not supported on this CPU",
            "class latency: resume_latency_us n/a on CPU 1: not supported on this CPU",
            "class latency: uncore_min_freq 2000000kHz on CPU 1: not supported on this CPU",
            "class latency: uncore_max_freq max on CPU 1: not supported on this CPU",
        ]
    );
    // Only the EPP of CPU 0 is planned.
    let knobs: Vec<&Knob> = p.writes.iter().map(|w| &w.knob).collect();
    assert_eq!(knobs, [&Knob::Epp(0)]);
}

#[test]
fn a_min_above_the_resting_max_is_refused() {
    let offer = offer(1);
    let mut files = boot(&offer);
    files.insert(Knob::MaxFreq(0), "1500000".into());
    let c = Class {
        min_freq: Some(Freq::Base),
        ..class("c")
    };
    let p = plan(&cpus(&[(0, "c")]), &[c], &offer, &files, &BTreeMap::new());
    assert!(p.writes.is_empty());
    assert_eq!(
        p.refusals[0].reason,
        Reason::MinAboveMax {
            min: 2_000_000,
            max: 1_500_000
        }
    );
}

#[test]
fn uncore_takes_the_highest_value_any_class_of_the_die_asks_for() {
    let offer = offer(4);
    let mut files = boot(&offer);
    let low = Class {
        uncore_min_freq: Some(Freq::Khz(1_000_000)),
        uncore_max_freq: Some(Freq::Khz(1_200_000)),
        ..class("low")
    };
    let high = Class {
        uncore_min_freq: Some(Freq::Khz(1_600_000)),
        ..class("high")
    };
    let classes = [low, high];
    let mut originals = BTreeMap::new();
    let p = step(
        &cpus(&[(0, "low"), (1, "high")]),
        &classes,
        &offer,
        &mut files,
        &mut originals,
    )
    .unwrap();
    // high's minimum lies above low's maximum: the maximum wins, the
    // minimum is refused and stays.
    let die = DIES[0].to_string();
    assert_eq!(files[&Knob::UncoreMax(die.clone())], "1200000");
    assert_eq!(files[&Knob::UncoreMin(die.clone())], "800000");
    assert_eq!(p.refusals.len(), 1, "{:?}", p.refusals);
    // With low gone, high's minimum fits under the original maximum.
    step(
        &cpus(&[(1, "high")]),
        &classes,
        &offer,
        &mut files,
        &mut originals,
    )
    .unwrap();
    assert_eq!(files[&Knob::UncoreMin(die.clone())], "1600000");
    assert_eq!(files[&Knob::UncoreMax(die.clone())], "2400000");
    step(
        &cpus(&[(0, "low"), (1, "low")]),
        &classes,
        &offer,
        &mut files,
        &mut originals,
    )
    .unwrap();
    assert_eq!(files[&Knob::UncoreMin(die.clone())], "1000000");
    assert_eq!(files[&Knob::UncoreMax(die)], "1200000");
}

#[test]
fn an_offline_cpu_is_left_alone_and_restored_when_it_comes_back() {
    let all = offer(2);
    let mut files = boot(&all);
    let start = files.clone();
    let mut originals = BTreeMap::new();
    let classes = [latency()];
    step(
        &cpus(&[(1, "latency")]),
        &classes,
        &all,
        &mut files,
        &mut originals,
    )
    .unwrap();
    let mut without = all.clone();
    without.cpus.remove(&1);
    // Released while offline: nothing of CPU 1 is written, its originals stay.
    let p = step(
        &BTreeMap::new(),
        &classes,
        &without,
        &mut files,
        &mut originals,
    )
    .unwrap();
    assert!(p.writes.iter().all(|w| w.knob.cpu() != Some(1)));
    assert!(originals.contains_key(&Knob::Governor(1)));
    step(&BTreeMap::new(), &classes, &all, &mut files, &mut originals).unwrap();
    assert_eq!(files, start);
    assert!(originals.is_empty());
}

#[test]
fn knob_paths_are_below_the_sysfs_root() {
    assert_eq!(
        Knob::CstateDisable(3, 2).rel_path(),
        "devices/system/cpu/cpu3/cpuidle/state2/disable"
    );
    assert_eq!(
        Knob::UncoreMax("package_00_die_01".into()).rel_path(),
        "devices/system/cpu/intel_uncore_frequency/package_00_die_01/max_freq_khz"
    );
    assert_eq!(
        Knob::ResumeLatency(0).rel_path(),
        "devices/system/cpu/cpu0/power/pm_qos_resume_latency_us"
    );
}

fn freq_value() -> impl Strategy<Value = Option<Freq>> {
    prop_oneof![
        Just(None),
        Just(Some(Freq::Min)),
        Just(Some(Freq::Base)),
        Just(Some(Freq::Max)),
        (700_000u64..3_700_000).prop_map(|k| Some(Freq::Khz(k / 100_000 * 100_000))),
    ]
}

fn arb_class(name: &'static str) -> impl Strategy<Value = Class> {
    (
        prop::option::of(prop::sample::select(vec![
            "performance",
            "powersave",
            "ondemand",
        ])),
        freq_value(),
        freq_value(),
        prop::option::of(prop::sample::select(vec!["performance", "power", "128"])),
        prop::sample::subsequence(vec!["C1", "C1E", "C6", "C10"], 0..3),
        prop::option::of(prop_oneof![
            Just(ResumeLatency::NoLimit),
            (0u32..50).prop_map(ResumeLatency::Us)
        ]),
        freq_value(),
        freq_value(),
    )
        .prop_map(move |(g, min, max, epp, cs, lat, umin, umax)| Class {
            governor: g.map(str::to_string),
            min_freq: min,
            max_freq: max,
            epp: epp.map(str::to_string),
            disabled_cstates: cs.into_iter().map(str::to_string).collect(),
            resume_latency_us: lat,
            uncore_min_freq: umin.filter(|f| *f != Freq::Base),
            uncore_max_freq: umax.filter(|f| *f != Freq::Base),
            ..class(name)
        })
}

/// One event: a new class for each CPU (index 0 is none), a CPU offline,
/// a reload with new classes, or a restart (the originals come back from
/// their file, and nothing else is remembered).
#[derive(Debug, Clone)]
enum Event {
    Assign(Vec<usize>),
    Offline(u32),
    Reload(Vec<Class>),
    Restart,
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        4 => prop::collection::vec(0usize..4, 4).prop_map(Event::Assign),
        1 => (0u32..4).prop_map(Event::Offline),
        1 => (arb_class("a"), arb_class("b"), arb_class("c"))
            .prop_map(|(a, b, c)| Event::Reload(vec![a, b, c])),
        1 => Just(Event::Restart),
    ]
}

/// Boot values in range, min ≤ max, but not the hardware's extremes, so
/// the pairs' order matters.
fn arb_boot() -> impl Strategy<Value = BTreeMap<Knob, String>> {
    prop::collection::vec((8u64..=35, 8u64..=35, 8u64..=24, 8u64..=24), 4).prop_map(|v| {
        let offer = offer(4);
        let mut files = boot(&offer);
        for (cpu, (a, b, c, d)) in v.into_iter().enumerate() {
            let cpu = cpu as u32;
            files.insert(Knob::MinFreq(cpu), (a.min(b) * 100_000).to_string());
            files.insert(Knob::MaxFreq(cpu), (a.max(b) * 100_000).to_string());
            if cpu < 2 {
                let die = DIES[cpu as usize].to_string();
                files.insert(
                    Knob::UncoreMin(die.clone()),
                    (c.min(d) * 100_000).to_string(),
                );
                files.insert(Knob::UncoreMax(die), (c.max(d) * 100_000).to_string());
            }
        }
        files
    })
}

proptest! {
    /// After any sequence of class changes, reloads and hot-plugs, every
    /// write is one the kernel takes, every online file no class wants
    /// holds its original value, every wanted one the class's; and with
    /// every class gone and every CPU online, every file reads as at boot.
    #[test]
    fn every_file_no_class_wants_is_back_to_its_original(
        start in arb_boot(),
        first in (arb_class("a"), arb_class("b"), arb_class("c")),
        events in prop::collection::vec(event(), 1..12),
    ) {
        let all = offer(4);
        let mut classes = vec![first.0, first.1, first.2];
        let mut files = start.clone();
        let mut originals = BTreeMap::new();
        let mut online = all.clone();
        let mut assigned: BTreeMap<u32, String> = BTreeMap::new();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("power.json");
        for e in events {
            match e {
                Event::Assign(v) => {
                    assigned = v.iter().enumerate().filter(|(_, i)| **i > 0)
                        .map(|(c, i)| (c as u32, classes[i - 1].name.clone())).collect();
                    // A CPU comes back when it is given out again.
                    online = all.clone();
                }
                Event::Offline(c) => { online.cpus.remove(&c); }
                Event::Reload(c) => classes = c,
                Event::Restart => {
                    originals::save(&file, &originals).unwrap();
                    originals = match originals::load(&file).unwrap() {
                        originals::Found::Kept(k) => k,
                        other => return Err(TestCaseError::fail(format!("{other:?}"))),
                    };
                }
            }
            // A round of checks reads only the files in play: its plan is
            // the plan over every file.
            let known = in_play(&assigned, &online, &originals);
            let some: BTreeMap<Knob, String> = files
                .iter()
                .filter(|(k, _)| known.contains(*k) && online.has(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let round = plan(&assigned, &classes, &online, &some, &originals);
            let p = step(&assigned, &classes, &online, &mut files, &mut originals);
            let p = p.map_err(TestCaseError::fail)?;
            prop_assert_eq!(&round, &p);
            for (k, v) in &files {
                if !online.has(k) {
                    continue;
                }
                match p.wanted.get(k) {
                    Some((want, _)) => prop_assert_eq!(v, want, "{}", k),
                    None => prop_assert_eq!(v, &start[k], "{} not restored", k),
                }
            }
        }
        step(&BTreeMap::new(), &classes, &all, &mut files, &mut originals)
            .map_err(TestCaseError::fail)?;
        prop_assert_eq!(&files, &start);
        prop_assert!(originals.is_empty());
    }
}
