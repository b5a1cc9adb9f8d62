//! The planner's own cost, without the kernel: [`Engine::plan`] over a
//! kubepods tree of N Burstable containers (a pod and a container each, so
//! about 2N cgroups), as the real-cgroup benchmark builds it. The daemon's
//! event loop makes these plans between its writes; under back-to-back churn
//! a pin can wait behind one, so this is part of a pin's latency
//! (`cargo bench --bench real_cgroup` measures the whole).
//!
//! - `full`: a full plan with nothing to write (a reconcile's plan);
//! - `round`: one round of churn: a Guaranteed 1-CPU container comes (its
//!   pin, a plan over its reach, then the owed full plan that narrows the
//!   shared pool), its writes made, then goes (the full plan that widens it
//!   back), its writes made.
//!
//! Run with `cargo bench --bench planner`; criterion prints its estimate
//! ("time: [low estimate high]") of each case, and the run appends
//! criterion's median (with its 95% bounds) and mean of each case to
//! `target/bench/planner.csv` (`support/record.rs`).

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group};

#[path = "support/record.rs"]
mod record;
use pinctl::CpuSet;
use pinctl::cgroup::Observed;
use pinctl::cgroup::Scope;
use pinctl::cgroup::layout::classify;
use pinctl::engine::{Engine, Plan, Settings};
use pinctl::intent::{Intent, Reading, Source};
use pinctl::topology::synthetic::Shape;

const SIZES: [usize; 2] = [1_000, 5_000];

/// A 16-CPU machine with CPU 0 reserved.
fn engine() -> Engine {
    let topo = Shape {
        sockets: 1,
        numa_per_socket: 1,
        l3_per_numa: 1,
        cores_per_l3: 16,
        threads_per_core: 1,
    }
    .build();
    let settings = Settings {
        reserved: "0".parse().unwrap(),
        scope: Scope::new(vec!["kubepods".into()], vec!["system.slice".into()], vec![]),
        ..Settings::default()
    };
    Engine::new(topo, settings, None)
}

fn add(e: &mut Engine, rel: &str, cpus: &CpuSet, intent: Option<Intent>) {
    let obs = Observed {
        rel: rel.into(),
        cpus: Some(cpus.clone()),
        mems: Some("0".parse().unwrap()),
        ..Observed::default()
    };
    e.upsert(Reading {
        kind: classify(rel),
        key: if intent.is_some() {
            format!("cgroup:{rel}")
        } else {
            String::new()
        },
        obs,
        intent,
        problem: None,
        bundle: None,
        lifted: None,
        lifted_unkept: false,
        baseline: None,
        mems_read: true,
    });
}

/// Makes every write of `plan`, and of the full plan it owes.
fn apply(e: &mut Engine, mut plan: Plan) {
    loop {
        for w in &plan.writes {
            e.written(w, Ok(()));
        }
        if !plan.more {
            return;
        }
        plan = e.plan_owed();
    }
}

/// The tree with `n` Burstable containers, planned and written.
fn tree(n: usize) -> Engine {
    let mut e = engine();
    let all = e.topology().online().clone();
    for rel in ["kubepods", "kubepods/burstable", "system.slice"] {
        add(&mut e, rel, &all, None);
    }
    for i in 0..n {
        let pod = format!("kubepods/burstable/pod{i:08x}-0000-0000-0000-000000000000");
        add(&mut e, &pod, &all, None);
        add(&mut e, &format!("{pod}/{i:064x}"), &all, None);
    }
    e.end_startup();
    let plan = e.plan();
    apply(&mut e, plan);
    e
}

const POD: &str = "kubepods/pod99999999-0000-0000-0000-000000000000";

fn round(e: &mut Engine) {
    let all = e.topology().online().clone();
    let container = format!("{POD}/{:064x}", 1);
    add(e, POD, &all, None);
    add(
        e,
        &container,
        &all,
        Some(Intent {
            cpus: 1,
            source: Source::Xattr,
            numa: Vec::new(),
            whole_cores: false,
            class: None,
            near: Vec::new(),
            device_alignment: None,
            devices: Vec::new(),
        }),
    );
    let plan = e.plan();
    apply(e, plan);
    e.forget(POD);
    let plan = e.plan();
    apply(e, plan);
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("planner");
    for n in SIZES {
        let mut e = tree(n);
        group.bench_with_input(BenchmarkId::new("full", n), &n, |b, _| {
            b.iter(|| {
                e.replan_all();
                black_box(e.plan())
            })
        });
        group.bench_with_input(BenchmarkId::new("round", n), &n, |b, _| {
            b.iter(|| round(&mut e))
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(2));
    targets = bench
}
// criterion_main!, then criterion's estimates of this run as CSV.
fn main() -> anyhow::Result<()> {
    let run = record::Run::here();
    benches();
    Criterion::default().configure_from_args().final_summary();
    record::criterion("planner", &run, &["planner"])
}
