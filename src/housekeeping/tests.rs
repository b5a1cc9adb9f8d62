//! The pure plan of `housekeeping`: what moves, what goes back, what a
//! thread born of `kthreadd` had, what is remembered, and what stays.

use super::*;
use crate::task::{PF_KTHREAD, PF_NO_SETAFFINITY};

fn set(s: &str) -> CpuSet {
    s.parse().unwrap()
}

fn kthread(pid: u32, comm: &str, allowed: &str, flags: u32) -> Kthread {
    Kthread {
        pid,
        start: u64::from(pid) * 10,
        comm: comm.into(),
        flags: PF_KTHREAD | flags,
        allowed: set(allowed),
    }
}

/// A plan's writes as (what, CPU list).
fn writes(p: &Plan) -> Vec<(String, String)> {
    p.writes
        .iter()
        .map(|(_, what, s)| (what.clone(), s.to_string()))
        .collect()
}

fn reading() -> Reading {
    Reading {
        masks: vec![Found {
            knob: Knob::Workqueues,
            what: "workqueue cpumask".into(),
            current: set("0-3"),
        }],
        kthreads: vec![
            kthread(2, KTHREADD, "0-3", 0),
            kthread(15, "rcu_preempt", "0-3", 0),
            kthread(20, "ksoftirqd/2", "2", PF_NO_SETAFFINITY),
            kthread(21, "kworker/2:1H", "2", PF_NO_SETAFFINITY),
            kthread(30, "kworker/u8:1", "0-3", PF_NO_SETAFFINITY),
            kthread(40, "kcompactd0", "0-1", 0),
        ],
        lines: vec![Line {
            irq: 24,
            names: vec!["virtio0-requests".into()],
            effective: set("2"),
        }],
        ..Reading::default()
    }
}

#[test]
fn movable_work_leaves_the_exclusive_cpus_and_the_rest_is_left_alone() {
    let (away, online) = (set("2-3"), set("0-3"));
    let p = plan(&reading(), &Memory::new(), &away, &online);
    assert_eq!(
        writes(&p),
        [
            ("workqueue cpumask".to_string(), "0-1".to_string()),
            ("kthread 2 (kthreadd)".into(), "0-1".into()),
            ("kthread 15 (rcu_preempt)".into(), "0-1".into()),
        ]
    );
    // Bound threads, workqueue workers and threads already clear are not
    // written; what was moved is remembered.
    assert_eq!(p.memory.len(), 3);
    assert_eq!(p.memory[&Knob::Workqueues].steered.was, set("0-3"));
}

#[test]
fn with_nothing_exclusive_everything_goes_back() {
    let (away, online) = (set("2-3"), set("0-3"));
    let first = plan(&reading(), &Memory::new(), &away, &online);
    let mut now = reading();
    for (knob, _, s) in &first.writes {
        for m in &mut now.masks {
            if &m.knob == knob {
                m.current = s.clone();
            }
        }
        for k in &mut now.kthreads {
            if &k.knob() == knob {
                k.allowed = s.clone();
            }
        }
    }
    // A thread born since, of kthreadd: it had what kthreadd had.
    // One from before with the same set (kcompactd0) is left as it is.
    now.kthreads.push(kthread(50, "kdamond.0", "0-1", 0));
    let back = plan(&now, &first.memory, &CpuSet::new(), &online);
    assert_eq!(
        writes(&back),
        [
            ("workqueue cpumask".to_string(), "0-3".to_string()),
            ("kthread 2 (kthreadd)".into(), "0-3".into()),
            ("kthread 15 (rcu_preempt)".into(), "0-3".into()),
            ("kthread 50 (kdamond.0)".into(), "0-3".into()),
        ]
    );
    assert!(back.memory.is_empty());
}

#[test]
fn a_value_written_over_is_the_new_original() {
    let (away, online) = (set("3"), set("0-3"));
    let mut memory = Memory::new();
    memory.insert(
        Knob::Workqueues,
        Kept {
            what: "workqueue cpumask".into(),
            steered: Steered {
                was: set("0-3"),
                set: set("0-2"),
            },
            since: None,
        },
    );
    let mut r = reading();
    r.masks[0].current = set("1-3");
    let p = plan(&r, &memory, &away, &online);
    assert_eq!(p.overwritten, [Knob::Workqueues]);
    assert_eq!(p.memory[&Knob::Workqueues].steered.was, set("1-3"));
    assert_eq!(p.memory[&Knob::Workqueues].steered.set, set("1-2"));
}

#[test]
fn memory_of_what_is_gone_is_dropped_and_of_what_was_unread_kept() {
    let online = set("0-3");
    let mut memory = Memory::new();
    for pid in [90, 91] {
        memory.insert(
            Knob::Kthread { pid, start: 1 },
            Kept {
                what: format!("kthread {pid}"),
                steered: Steered {
                    was: set("0-3"),
                    set: set("0-1"),
                },
                since: None,
            },
        );
    }
    let mut r = reading();
    r.unread
        .insert(Knob::Kthread { pid: 91, start: 1 }, "timed out".into());
    let p = plan(&r, &memory, &set("2-3"), &online);
    assert!(!p.memory.contains_key(&Knob::Kthread { pid: 90, start: 1 }));
    assert!(p.memory.contains_key(&Knob::Kthread { pid: 91, start: 1 }));
}

#[test]
fn every_cpu_exclusive_moves_nothing() {
    let online = set("0-3");
    let p = plan(&reading(), &Memory::new(), &online, &online);
    assert!(p.writes.is_empty());
}

#[test]
fn what_stays_is_named_per_exclusive_cpu() {
    let s = stays(&reading(), &set("2-3"));
    assert_eq!(
        s[&2],
        (
            vec!["ksoftirqd/2".to_string(), "kworker/2:1H".to_string()],
            vec!["24 virtio0-requests".to_string()]
        )
    );
    assert_eq!(s[&3], (vec![], vec![]));
}
