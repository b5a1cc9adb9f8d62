//! Planning time on a 512-CPU, 8-NUMA-node machine (2 sockets × 4 nodes × 2 L3
//! groups × 16 cores × 2 threads). Target (issue #2): median under 100 µs.
//!
//! Run with `cargo bench --bench allocator`; criterion prints its estimate
//! ("time: [low estimate high]") of each case, and the run appends
//! criterion's median (with its 95% bounds) and mean of each case to
//! `target/bench/allocator.csv` (`support/record.rs`).

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group};

#[path = "support/record.rs"]
mod record;
use pinctl::CpuSet;
use pinctl::alloc::{Options, allocate};
use pinctl::topology::synthetic::Shape;

const SIZES: [usize; 6] = [1, 4, 16, 64, 200, 300];

fn machine() -> pinctl::Topology {
    Shape {
        sockets: 2,
        numa_per_socket: 4,
        l3_per_numa: 2,
        cores_per_l3: 16,
        threads_per_core: 2,
    }
    .build()
}

/// A busy machine: every third CPU taken, so no node, L3 group or core is whole
/// in a regular way (the realistic hard case for the search).
fn fragmented(topo: &pinctl::Topology) -> CpuSet {
    topo.online().iter().filter(|c| c % 3 != 0).collect()
}

fn bench(c: &mut Criterion) {
    let topo = machine();
    let empty = topo.online().clone();
    let busy = fragmented(&topo);
    let reserved = Options {
        reserved: topo.lowest_cores(2),
        ..Options::default()
    };
    let distributed = Options {
        distribute_across_numa: true,
        ..reserved.clone()
    };
    let whole = Options {
        full_pcpus_only: true,
        ..reserved.clone()
    };

    let mut group = c.benchmark_group("plan-512cpu-8numa");
    for n in SIZES {
        group.bench_with_input(BenchmarkId::new("idle", n), &n, |b, &n| {
            b.iter(|| allocate(&topo, black_box(&empty), n, &reserved).unwrap())
        });
        group.bench_with_input(BenchmarkId::new("fragmented", n), &n, |b, &n| {
            b.iter(|| allocate(&topo, black_box(&busy), n, &reserved).unwrap())
        });
        group.bench_with_input(BenchmarkId::new("full-pcpus", n), &n, |b, &n| {
            let n = n.next_multiple_of(2);
            b.iter(|| allocate(&topo, black_box(&empty), n, &whole).unwrap())
        });
        group.bench_with_input(BenchmarkId::new("distributed", n), &n, |b, &n| {
            b.iter(|| allocate(&topo, black_box(&empty), n, &distributed).unwrap())
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(std::time::Duration::from_millis(300))
        .measurement_time(std::time::Duration::from_millis(800));
    targets = bench
}
// criterion_main!, then criterion's estimates of this run as CSV.
fn main() -> anyhow::Result<()> {
    let run = record::Run::here();
    benches();
    Criterion::default().configure_from_args().final_summary();
    record::criterion("allocator", &run, &["plan-512cpu-8numa"])
}
