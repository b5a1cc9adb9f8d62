//! The engine's tests: every decision on plain values. The helpers that
//! build trees are here; the tests are in a file per theme:
//!
//! | file | what |
//! |---|---|
//! | `requests.rs` | who gets CPUs and who waits |
//! | `writes.rs` | a plan's writes and their order |
//! | `reading.rs` | readings that failed |
//! | `restart.rs` | start-up, restarts, pods another owner gives back |
//! | `memory.rs` | memory nodes, and what a release gives back |
//! | `cri.rs` | what containerd's CRI and systemd brought (a pod's annotation, a write over a pin read whole) |
//! | `nri.rs` | workloads announced before their cgroup exists |
//! | `resize.rs` | resizes |
//! | `devices.rs` | workloads near their devices |
//! | `strict.rs` | `strict_reservation` |
//! | `slurm.rs` | Slurm's tree and what holds it |
//! | `sequences.rs` | random sequences of events |

use super::*;
use crate::cgroup::Observed;
use crate::cgroup::layout::classify;
use crate::intent::Intent;
use crate::topology::synthetic::Shape;
use proptest::prelude::*;

fn set(s: &str) -> CpuSet {
    s.parse().unwrap()
}

/// 16 CPUs: 2 sockets × 4 cores × 2 threads; core c is {c, c+8}.
fn topo() -> Topology {
    Shape {
        sockets: 2,
        numa_per_socket: 1,
        l3_per_numa: 1,
        cores_per_l3: 4,
        threads_per_core: 2,
    }
    .build()
}

fn engine() -> Engine {
    Engine::new(
        topo(),
        Settings {
            reserved: set("0,8"),
            scope: Scope::new(vec!["kubepods".into()], vec!["system.slice".into()], vec![]),
            ..Settings::default()
        },
        None,
    )
}

/// [`engine`] on cgroup v2: an empty `cpuset.cpus` inherits the parent's.
fn engine_v2() -> Engine {
    let mut e = engine();
    let mut s = e.settings().clone();
    s.empty_inherits = true;
    e.set_settings(s);
    e
}

/// What every known cgroup gets on cgroup v2, from the sets the engine
/// knows (its own ∩ its parent's, the parent's when that is empty; the
/// root has every online CPU), in path order. Cgroups below an unknown
/// parent other than the root are left out.
fn v2_effective(e: &Engine) -> BTreeMap<Rel, CpuSet> {
    let online = e.topology().online().clone();
    let mut got: BTreeMap<Rel, CpuSet> = BTreeMap::new();
    for (rel, c) in &e.cgroups {
        let parent = match crate::cgroup::parent(rel) {
            Some("") => online.clone(),
            Some(p) => match got.get(p) {
                Some(p) => p.clone(),
                None => continue,
            },
            None => continue,
        };
        let own = c.cpus.as_deref().cloned().unwrap_or_default();
        let both = own.intersection(&parent);
        got.insert(rel.clone(), if both.is_empty() { parent } else { both });
    }
    got
}

/// On v2, every cgroup with a target gets it, written or inherited (but
/// where a write failed, there or above).
fn assert_v2_targets_hold(e: &Engine) -> Result<(), String> {
    let got = v2_effective(e);
    let online = e.topology().online();
    let failed = |rel: &str| {
        let mut at = Some(rel);
        while let Some(r) = at {
            if e.cgroups.get(r).is_some_and(|c| c.failure.is_some()) {
                return true;
            }
            at = crate::cgroup::parent(r);
        }
        false
    };
    for (rel, c) in &e.cgroups {
        if failed(rel) {
            continue;
        }
        if let (Some(t), Some(g)) = (&c.target, got.get(rel))
            && t.intersection(online) != *g
        {
            return Err(format!("{rel} gets {g}, not its target {t}"));
        }
    }
    Ok(())
}

fn want(cpus: usize) -> Option<Intent> {
    Some(Intent {
        cpus,
        source: Source::Xattr,
        numa: Vec::new(),
        whole_cores: false,
        class: None,
        near: Vec::new(),
        device_alignment: None,
        devices: Vec::new(),
    })
}

/// Adds cgroup `rel` with `cpus` as its current cpuset.
fn add(e: &mut Engine, rel: &str, cpus: &str, intent: Option<Intent>) {
    let obs = Observed {
        rel: rel.into(),
        cpus: Some(set(cpus)),
        mems: Some(set("0-1")),
        ..Observed::default()
    };
    reading(e, obs, intent, &format!("cgroup:{rel}"));
}

/// Upserts what was "read", as the daemon does.
fn reading(e: &mut Engine, obs: Observed, intent: Option<Intent>, key: &str) {
    let kind = classify(&obs.rel);
    e.upsert(Reading {
        obs,
        kind,
        intent,
        key: key.into(),
        problem: None,
        bundle: None,
        lifted: None,
        lifted_unkept: false,
        baseline: None,
        mems_read: true,
    });
}

/// Reports `writes` made, as the daemon does once they succeed.
fn made(e: &mut Engine, writes: &[Write]) {
    for w in writes {
        e.written(w, Ok(()));
    }
}

/// Applies every write as the kernel would (no rules), like a fake tree:
/// a plan's, then the owed plan's when it asks for one.
fn apply(e: &mut Engine) -> Vec<Write> {
    let mut plan = e.plan();
    let mut writes = Vec::new();
    loop {
        made(e, &plan.writes);
        writes.extend(plan.writes);
        if !plan.more {
            return writes;
        }
        plan = e.plan_owed();
    }
}

fn target(e: &Engine, rel: &str) -> CpuSet {
    e.cgroups[rel].target.as_deref().cloned().unwrap()
}

fn kube_tree(e: &mut Engine) {
    add(e, "kubepods", "0-15", None);
    add(e, "kubepods/burstable", "0-15", None);
    add(
        e,
        "kubepods/burstable/pod11111111-2222-3333-4444-555555555555",
        "0-15",
        None,
    );
    add(
        e,
        "kubepods/burstable/pod11111111-2222-3333-4444-555555555555/aaaa",
        "0-15",
        None,
    );
    add(e, "system.slice", "0-15", None);
}

const GUARANTEED: &str = "kubepods/pod99999999-2222-3333-4444-555555555555/bbbb";

/// The kubepods tree with [`GUARANTEED`] asking for 4 CPUs, planned and
/// written: its CPUs.
fn pin_guaranteed(e: &mut Engine) -> CpuSet {
    kube_tree(e);
    add(
        e,
        "kubepods/pod99999999-2222-3333-4444-555555555555",
        "0-15",
        None,
    );
    add(e, GUARANTEED, "0-15", want(4));
    apply(e);
    let pinned = target(e, GUARANTEED);
    assert_eq!(pinned.len(), 4);
    pinned
}

mod cri;
mod devices;
mod memory;
mod nri;
mod reading;
mod requests;
mod resize;
mod restart;
mod sequences;
mod slurm;
mod strict;
mod writes;
