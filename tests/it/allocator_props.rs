//! Property tests for `pinctl::alloc::allocate` on random regular topologies,
//! including a comparison against a model of the kubelet's static CPU manager
//! (`takeByTopologyNUMAPacked`, see `support/kubelet.rs`).

use crate::support::kubelet;

use std::collections::BTreeMap;

use pinctl::alloc::{Alignment, AllocError, Options, allocate};
use pinctl::topology::synthetic::Shape;
use pinctl::{CpuSet, Topology};
use proptest::prelude::*;
use proptest::test_runner::Config;

/// The largest generated machine: 2 sockets × 4 nodes × 2 L3 × 4 cores × 4 threads.
const MAX_CPUS: usize = 2 * 4 * 2 * 4 * 4;

fn config(cases: u32) -> Config {
    Config {
        cases,
        // A failing case is reported with its minimal input; it is not replayed
        // from a file on later runs.
        failure_persistence: None,
        ..Config::default()
    }
}

// ---------------------------------------------------------------------------
// Inputs
// ---------------------------------------------------------------------------

/// One generated allocation problem.
#[derive(Clone)]
struct Input {
    shape: Shape,
    topo: Topology,
    /// What the caller passes as free: a subset of the online CPUs, sometimes
    /// with CPUs the machine does not have.
    free: CpuSet,
    reserved: CpuSet,
    /// Free, online and not reserved.
    avail: CpuSet,
    /// A request in `1..=avail.len()` (1 when nothing is available).
    n: usize,
    /// A request in `1..=avail.len() + 3`, for the error property.
    n_any: usize,
}

fn arb_shape() -> impl Strategy<Value = Shape> {
    (1u32..=2, 1u32..=4, 1u32..=2, 1u32..=4, 1u32..=4).prop_map(
        |(sockets, numa_per_socket, l3_per_numa, cores_per_l3, threads_per_core)| Shape {
            sockets,
            numa_per_socket,
            l3_per_numa,
            cores_per_l3,
            threads_per_core,
        },
    )
}

/// The CPUs `i < cpus` whose `roll[i]` falls under `percent`.
fn subset(cpus: usize, roll: &[u8], percent: u8) -> CpuSet {
    (0..cpus)
        .filter(|&i| roll[i] < percent)
        .map(|i| i as u32)
        .collect()
}

fn arb_input() -> impl Strategy<Value = Input> {
    (
        arb_shape(),
        // How full the machine is: all free, mostly free, half, mostly busy.
        prop_oneof![Just(100u8), Just(85), Just(50), Just(20)],
        proptest::collection::vec(0u8..100, MAX_CPUS),
        // Reserved: none, the lowest cores (kubelet style), or scattered CPUs.
        0u8..4,
        0usize..6,
        proptest::collection::vec(0u8..100, MAX_CPUS),
        any::<bool>(),
        any::<u32>(),
    )
        .prop_map(
            |(
                shape,
                density,
                free_roll,
                reserve_kind,
                reserve_count,
                reserve_roll,
                extra,
                pick,
            )| {
                let topo = shape.build();
                let cpus = topo.online().len();
                let mut free = subset(cpus, &free_roll, density);
                if extra {
                    // CPUs that are not on this machine are never available.
                    free.extend([cpus as u32, cpus as u32 + 5, 1000]);
                }
                let reserved = match reserve_kind {
                    1 => topo.lowest_cores(reserve_count),
                    2 => subset(cpus, &reserve_roll, 10),
                    _ => CpuSet::new(),
                };
                let avail = free.intersection(topo.online()).difference(&reserved);
                let n = 1 + pick as usize % avail.len().max(1);
                let n_any = 1 + pick as usize % (avail.len() + 3);
                Input {
                    shape,
                    topo,
                    free,
                    reserved,
                    avail,
                    n,
                    n_any,
                }
            },
        )
}

impl std::fmt::Debug for Input {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The shape says all there is to say about the topology.
        f.debug_struct("Input")
            .field("shape", &self.shape)
            .field("free", &self.free)
            .field("reserved", &self.reserved)
            .field("avail", &self.avail)
            .field("n", &self.n)
            .field("n_any", &self.n_any)
            .finish()
    }
}

impl Input {
    fn opts(&self) -> Options {
        Options {
            reserved: self.reserved.clone(),
            ..Options::default()
        }
    }
}

// ---------------------------------------------------------------------------
// Measures
// ---------------------------------------------------------------------------

/// Free CPUs per NUMA node, for the nodes that have any.
fn per_node(topo: &Topology, cpus: &CpuSet) -> BTreeMap<u32, usize> {
    topo.numa_nodes()
        .iter()
        .map(|(&id, node)| (id, node.intersection(cpus).len()))
        .filter(|&(_, count)| count > 0)
        .collect()
}

/// The fewest NUMA nodes whose CPUs in `avail` hold `n`.
fn min_numa_nodes(topo: &Topology, avail: &CpuSet, n: usize) -> usize {
    let mut counts: Vec<usize> = per_node(topo, avail).into_values().collect();
    counts.sort_unstable_by(|a, b| b.cmp(a));
    let mut total = 0;
    for (i, c) in counts.iter().enumerate() {
        total += c;
        if total >= n {
            return i + 1;
        }
    }
    panic!("{n} CPUs do not fit in {avail}");
}

/// Rule 1 by brute force: the least (NUMA nodes, sockets, L3 groups) over every
/// way to hold `n` CPUs of `avail`. Nodes first: among the node sets of the
/// smallest size that hold `n`, those on the fewest sockets; within one, the
/// fewest L3 groups that hold `n` (their fullest groups).
fn rule1_optimum(topo: &Topology, avail: &CpuSet, n: usize) -> (usize, usize, usize) {
    let nodes: Vec<CpuSet> = topo
        .numa_nodes()
        .values()
        .map(|node| node.intersection(avail))
        .filter(|free| !free.is_empty())
        .collect();
    let k = min_numa_nodes(topo, avail, n);
    let mut best: Option<(usize, usize, usize)> = None;
    for mask in 0u32..1 << nodes.len() {
        if mask.count_ones() as usize != k {
            continue;
        }
        let mut region = CpuSet::new();
        for (i, free) in nodes.iter().enumerate() {
            if mask & 1 << i != 0 {
                region.union_with(free);
            }
        }
        if region.len() < n {
            continue;
        }
        let mut groups: Vec<usize> = topo
            .l3_groups()
            .values()
            .map(|g| g.intersection(&region).len())
            .collect();
        groups.sort_unstable_by(|a, b| b.cmp(a));
        let mut total = 0;
        let l3 = 1 + groups
            .iter()
            .position(|g| {
                total += g;
                total >= n
            })
            .expect("the region holds n");
        let candidate = (k, topo.sockets_of(&region).len(), l3);
        best = Some(best.map_or(candidate, |b| b.min(candidate)));
    }
    best.expect("some node set holds n")
}

/// (NUMA nodes, sockets, L3 groups) that `cpus` span.
fn spans(topo: &Topology, cpus: &CpuSet) -> (usize, usize, usize) {
    (
        topo.numa_of(cpus).len(),
        topo.sockets_of(cpus).len(),
        topo.l3_of(cpus).len(),
    )
}

/// The CPUs of `avail` on cores whose every thread is in `avail`.
fn whole_cores(topo: &Topology, avail: &CpuSet) -> CpuSet {
    topo.cores()
        .iter()
        .filter(|c| c.cpus.iter().all(|&cpu| avail.contains(cpu)))
        .flat_map(|c| c.cpus.iter().copied())
        .collect()
}

/// Distinct cores that `cpus` touch.
fn cores_touched(topo: &Topology, cpus: &CpuSet) -> usize {
    let mut cores: Vec<usize> = cpus.iter().filter_map(|c| topo.core_index_of(c)).collect();
    cores.sort_unstable();
    cores.dedup();
    cores.len()
}

/// The quality measures compared with the kubelet, most important first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Quality {
    numa: usize,
    sockets: usize,
    l3: usize,
    shared_cores: usize,
}

fn quality(topo: &Topology, cpus: &CpuSet) -> Quality {
    let a = Alignment::of(topo, cpus);
    Quality {
        numa: a.numa_nodes.len(),
        sockets: a.sockets.len(),
        l3: a.l3_groups.len(),
        shared_cores: a.shared_cores,
    }
}

/// Ours is no worse than the kubelet's on (NUMA nodes, sockets), then on L3
/// groups when those tie, then on shared cores when those tie too.
fn check_against_kubelet(
    topo: &Topology,
    avail: &CpuSet,
    n: usize,
    ours: &CpuSet,
) -> Result<(), TestCaseError> {
    let theirs = kubelet::take_by_topology_numa_packed(topo, avail, n)
        .map_err(|e| TestCaseError::fail(format!("kubelet model: {e}")))?;
    prop_assert_eq!(theirs.len(), n, "kubelet model size");
    prop_assert!(theirs.is_subset(avail), "kubelet model took {}", theirs);
    let (o, k) = (quality(topo, ours), quality(topo, &theirs));
    let ctx = format!("ours {ours} {o:?}, kubelet {theirs} {k:?}");
    prop_assert!(
        (o.numa, o.sockets) <= (k.numa, k.sockets),
        "NUMA/sockets: {}",
        ctx
    );
    if (o.numa, o.sockets) == (k.numa, k.sockets) {
        prop_assert!(o.l3 <= k.l3, "L3 groups: {}", ctx);
        if o.l3 == k.l3 {
            prop_assert!(o.shared_cores <= k.shared_cores, "shared cores: {}", ctx);
        }
    }
    Ok(())
}

/// A valid, deterministic answer of size `n` from `avail`.
fn check_valid(input: &Input, opts: &Options, n: usize, got: &CpuSet) -> Result<(), TestCaseError> {
    prop_assert_eq!(got.len(), n, "size of {}", got);
    prop_assert!(got.is_subset(&input.free), "{} not in free", got);
    prop_assert!(got.is_subset(input.topo.online()), "{} not online", got);
    prop_assert!(got.is_disjoint(&input.reserved), "{} reserved", got);
    let again = allocate(&input.topo, &input.free, n, opts);
    prop_assert_eq!(again.as_ref(), Ok(got), "not deterministic");
    Ok(())
}

// ---------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------

proptest! {
    #![proptest_config(config(512))]

    /// The result is `n` free, online, unreserved CPUs, the same every time.
    #[test]
    fn result_is_valid_and_deterministic(input in arb_input()) {
        if input.avail.is_empty() {
            return Ok(()); // covered by errors_only_when_not_enough
        }
        let opts = input.opts();
        let got = allocate(&input.topo, &input.free, input.n, &opts)
            .map_err(|e| TestCaseError::fail(format!("{e}")))?;
        check_valid(&input, &opts, input.n, &got)?;
    }

    /// It fails only when the request exceeds what is available, and then says
    /// by how much.
    #[test]
    fn errors_only_when_not_enough(input in arb_input()) {
        let n = input.n_any;
        let got = allocate(&input.topo, &input.free, n, &input.opts());
        if n <= input.avail.len() {
            prop_assert!(got.is_ok(), "{:?}", got);
        } else {
            prop_assert_eq!(
                got,
                Err(AllocError::NotEnough { requested: n, available: input.avail.len() })
            );
        }
    }

    /// Never worse than the kubelet's packed allocator on the same input.
    #[test]
    fn never_worse_than_the_kubelet(input in arb_input()) {
        if input.avail.is_empty() {
            return Ok(()); // covered by errors_only_when_not_enough
        }
        let got = allocate(&input.topo, &input.free, input.n, &input.opts())
            .map_err(|e| TestCaseError::fail(format!("{e}")))?;
        check_against_kubelet(&input.topo, &input.avail, input.n, &got)?;
    }

    /// Rule 1: exactly the fewest NUMA nodes that can hold the request, then
    /// the fewest sockets, then the fewest L3 groups.
    #[test]
    fn spans_the_fewest_numa_nodes_sockets_and_l3_groups(input in arb_input()) {
        if input.avail.is_empty() {
            return Ok(()); // covered by errors_only_when_not_enough
        }
        let got = allocate(&input.topo, &input.free, input.n, &input.opts())
            .map_err(|e| TestCaseError::fail(format!("{e}")))?;
        let want = min_numa_nodes(&input.topo, &input.avail, input.n);
        prop_assert_eq!(input.topo.numa_of(&got).len(), want, "{}", got);
        let want = rule1_optimum(&input.topo, &input.avail, input.n);
        prop_assert_eq!(spans(&input.topo, &got), want, "(NUMA, sockets, L3) of {}", got);
    }

    /// `full_pcpus_only`: whole cores, or the right error.
    #[test]
    fn full_pcpus_only_gives_whole_cores(input in arb_input()) {
        if input.avail.is_empty() {
            return Ok(()); // covered by errors_only_when_not_enough
        }
        let opts = Options { full_pcpus_only: true, ..input.opts() };
        let n = input.n;
        let tpc = input.topo.threads_per_core();
        let whole = whole_cores(&input.topo, &input.avail);
        let got = allocate(&input.topo, &input.free, n, &opts);
        if n % tpc != 0 {
            prop_assert_eq!(
                got,
                Err(AllocError::SmtAlignment { requested: n, threads_per_core: tpc })
            );
        } else if whole.len() < n {
            prop_assert_eq!(
                got,
                Err(AllocError::NotEnoughWholeCores { requested: n, available: whole.len() })
            );
        } else {
            let got = got.map_err(|e| TestCaseError::fail(format!("{e}")))?;
            check_valid(&input, &opts, n, &got)?;
            prop_assert_eq!(Alignment::of(&input.topo, &got).shared_cores, 0, "{}", got);
            prop_assert!(got.is_subset(&whole));
            let want = rule1_optimum(&input.topo, &whole, n);
            prop_assert_eq!(spans(&input.topo, &got), want, "(NUMA, sockets, L3) of {}", got);
        }
    }

    /// `spread_cores`: one thread per core before any sibling, within the L3
    /// groups the result uses (rule 1 keeps those as few as possible, so the
    /// spread cannot be measured over whole NUMA nodes).
    #[test]
    fn spread_cores_touches_as_many_cores_as_it_can(input in arb_input()) {
        if input.avail.is_empty() {
            return Ok(()); // covered by errors_only_when_not_enough
        }
        let opts = Options { spread_cores: true, ..input.opts() };
        let n = input.n;
        let got = allocate(&input.topo, &input.free, n, &opts)
            .map_err(|e| TestCaseError::fail(format!("{e}")))?;
        check_valid(&input, &opts, n, &got)?;
        let want = rule1_optimum(&input.topo, &input.avail, n);
        prop_assert_eq!(spans(&input.topo, &got), want, "(NUMA, sockets, L3) of {}", got);
        let mut region = CpuSet::new();
        for l3 in input.topo.l3_of(&got) {
            region.union_with(&input.topo.l3_groups()[&l3]);
        }
        let candidates = cores_touched(&input.topo, &input.avail.intersection(&region));
        let touched = cores_touched(&input.topo, &got);
        prop_assert!(
            touched >= n.min(candidates),
            "{} touches {} cores; {} cores of its L3 groups have a free thread",
            got, touched, candidates
        );
        // Cores whose siblings are all free come first: if the result sits
        // beside a busy sibling, it holds a thread of every such core there.
        let cores = input.topo.cores();
        let beside_busy = cores.iter().any(|c| {
            c.cpus.iter().any(|&cpu| got.contains(cpu))
                && !c.cpus.iter().all(|&cpu| input.avail.contains(cpu))
        });
        if beside_busy {
            for c in cores.iter().filter(|c| c.cpus.iter().all(|&cpu| region.contains(cpu))) {
                let whole = c.cpus.iter().all(|&cpu| input.avail.contains(cpu));
                let used = c.cpus.iter().any(|&cpu| got.contains(cpu));
                prop_assert!(
                    !whole || used,
                    "{} sits beside a busy sibling but leaves the free core {:?} alone",
                    got, c.cpus
                );
            }
        }
    }

    /// `distribute_across_numa`: an even split over the fewest nodes that can
    /// hold one; else a remainder spread over as many nodes as the kubelet
    /// would use; the packed fallback only when the kubelet packs too.
    #[test]
    fn distribute_splits_evenly(input in arb_input()) {
        if input.avail.is_empty() {
            return Ok(()); // covered by errors_only_when_not_enough
        }
        let opts = Options { distribute_across_numa: true, ..input.opts() };
        let n = input.n;
        let got = allocate(&input.topo, &input.free, n, &opts)
            .map_err(|e| TestCaseError::fail(format!("{e}")))?;
        check_valid(&input, &opts, n, &got)?;
        let counts: Vec<usize> = per_node(&input.topo, &got).into_values().collect();
        let even = counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1;
        match fewest_nodes_for_an_even_split(&input.topo, &input.avail, n) {
            Some(k) => {
                prop_assert!(even, "{} is split {:?}", got, counts);
                prop_assert_eq!(counts.len(), k, "{} is split {:?}", got, counts);
            }
            None => match fewest_nodes_the_kubelet_spreads_over(&input.topo, &input.avail, n) {
                // No even split, but the kubelet spreads a remainder over
                // `k` nodes: so does pinctl, never less evenly.
                Some(k) => prop_assert_eq!(counts.len(), k, "uneven spread {} {:?}", got, counts),
                None => {
                    prop_assert!(counts.len() > 1);
                    let want = min_numa_nodes(&input.topo, &input.avail, n);
                    prop_assert_eq!(counts.len(), want, "packed fallback {}", got);
                }
            },
        }
    }
}

/// The kubelet's rule for an uneven spread (`takeByTopologyNUMADistributed`,
/// one CPU per group): the fewest `k` nodes that each hold `n / k` and
/// together hold `n`. Its fullest `k` nodes are the best candidates.
fn fewest_nodes_the_kubelet_spreads_over(
    topo: &Topology,
    avail: &CpuSet,
    n: usize,
) -> Option<usize> {
    let mut free: Vec<usize> = per_node(topo, avail).into_values().collect();
    free.sort_unstable_by(|a, b| b.cmp(a));
    (1..=free.len().min(n))
        .find(|&k| free[..k].iter().all(|&f| f >= n / k) && free[..k].iter().sum::<usize>() >= n)
}

/// The fewest NUMA nodes `k` such that `n` split as evenly as possible over `k`
/// nodes (shares differing by at most one) fits their free CPUs. The `k` fullest
/// nodes are the best candidates, the largest shares on the fullest nodes.
fn fewest_nodes_for_an_even_split(topo: &Topology, avail: &CpuSet, n: usize) -> Option<usize> {
    let mut free: Vec<usize> = per_node(topo, avail).into_values().collect();
    free.sort_unstable_by(|a, b| b.cmp(a));
    (1..=free.len().min(n)).find(|&k| {
        (0..k).all(|j| {
            let share = n / k + usize::from(j < n % k);
            share <= free[j]
        })
    })
}

// ---------------------------------------------------------------------------
// A long-running 512-CPU machine
// ---------------------------------------------------------------------------

/// 2 sockets × 4 NUMA nodes × 2 L3 groups × 16 cores × 2 threads = 512 CPUs.
fn big_machine() -> Topology {
    Shape {
        sockets: 2,
        numa_per_socket: 4,
        l3_per_numa: 2,
        cores_per_l3: 16,
        threads_per_core: 2,
    }
    .build()
}

/// One step: a request of `size` CPUs, then, when `release` is `Some(r)`, the
/// workload at `r % live` (if any) ends.
fn arb_steps() -> impl Strategy<Value = Vec<(usize, Option<usize>)>> {
    proptest::collection::vec(
        (
            1usize..=40,
            proptest::option::weighted(0.35, any::<usize>()),
        ),
        40,
    )
}

proptest! {
    #![proptest_config(config(24))]

    /// A sequence of allocations and releases on a 512-CPU machine: no CPU is
    /// ever handed to two workloads, and every answer is at least as good as the
    /// kubelet's on the same free set.
    #[test]
    fn a_busy_512_cpu_machine(steps in arb_steps(), reserve in prop_oneof![Just(0usize), Just(2), Just(8)]) {
        let topo = big_machine();
        prop_assert_eq!(topo.online().len(), 512);
        let opts = Options { reserved: topo.lowest_cores(reserve), ..Options::default() };
        let mut owner: BTreeMap<u32, usize> = BTreeMap::new();
        let mut live: Vec<(usize, CpuSet)> = Vec::new();
        for (id, (size, release)) in steps.into_iter().enumerate() {
            let mut free = topo.online().clone();
            for cpu in owner.keys() {
                free.remove(*cpu);
            }
            let avail = free.difference(&opts.reserved);
            match allocate(&topo, &free, size, &opts) {
                Ok(got) => {
                    prop_assert_eq!(got.len(), size);
                    prop_assert!(got.is_subset(&free), "step {}: {} not free", id, got);
                    prop_assert!(got.is_disjoint(&opts.reserved));
                    for cpu in &got {
                        if let Some(other) = owner.insert(cpu, id) {
                            return Err(TestCaseError::fail(format!(
                                "step {id}: CPU {cpu} already belongs to workload {other}"
                            )));
                        }
                    }
                    let want = rule1_optimum(&topo, &avail, size);
                    prop_assert_eq!(spans(&topo, &got), want, "step {}: {}", id, got);
                    check_against_kubelet(&topo, &avail, size, &got)
                        .map_err(|e| TestCaseError::fail(format!("step {id}: {e}")))?;
                    live.push((id, got));
                }
                Err(e) => prop_assert_eq!(
                    e,
                    AllocError::NotEnough { requested: size, available: avail.len() }
                ),
            }
            if let Some(r) = release
                && !live.is_empty()
            {
                let (gone, cpus) = live.remove(r % live.len());
                for cpu in &cpus {
                    prop_assert_eq!(owner.remove(&cpu), Some(gone));
                }
            }
        }
    }
}
