//! `distribute_across_numa`'s tests: the kubelet's own table cases, a model
//! of its `takeByTopologyNUMADistributed`, and the property that pinctl is
//! never less even than it.

use super::*;

// -----------------------------------------------------------------------
// distribute_across_numa against the kubelet's takeByTopologyNUMADistributed
// -----------------------------------------------------------------------

/// CPUs taken per NUMA node, for the nodes used.
fn per_node(t: &Topology, cpus: &CpuSet) -> BTreeMap<u32, usize> {
    t.numa_nodes()
        .iter()
        .map(|(&id, node)| (id, node.intersection(cpus).len()))
        .filter(|&(_, count)| count > 0)
        .collect()
}

fn spread(counts: &BTreeMap<u32, usize>) -> usize {
    let max = counts.values().max().copied().unwrap_or(0);
    max - counts.values().min().copied().unwrap_or(0)
}

/// `distribute_across_numa`, in whole-core groups when `group > 1` (the
/// kubelet's `cpuGroupSize` is the threads per core with `full-pcpus-only`).
fn distribute(t: &Topology, free: &CpuSet, n: usize, group: usize) -> CpuSet {
    let opts = Options {
        distribute_across_numa: true,
        full_pcpus_only: group > 1,
        ..Options::default()
    };
    let got = allocate(t, free, n, &opts).unwrap();
    assert_eq!(got.len(), n);
    assert!(got.is_subset(free), "{got} is not within {free}");
    got
}

/// The kubelet's `topoDualSocketMultiNumaPerSocketHT` (dual Xeon Gold 6230):
/// 2 sockets × 2 NUMA nodes × 10 cores × 2 threads, core c is {c, c+40},
/// node 0 is 0-9,40-49.
fn kubelet_dual_socket_multi_numa() -> Topology {
    Shape {
        sockets: 2,
        numa_per_socket: 2,
        l3_per_numa: 1,
        cores_per_l3: 10,
        threads_per_core: 2,
    }
    .build()
}

/// The kubelet's `topoDualSocketMultiNumaPerSocketHTLarge` (dual EPYC 7742,
/// NPS=4): 2 sockets × 4 NUMA nodes × 16 cores × 2 threads, core c is
/// {c, c+128}.
fn kubelet_dual_socket_multi_numa_large() -> Topology {
    Shape {
        sockets: 2,
        numa_per_socket: 4,
        l3_per_numa: 1,
        cores_per_l3: 16,
        threads_per_core: 2,
    }
    .build()
}

/// The kubelet's `topoDualSocketHT`: 12 CPUs, core c is {c, c+6}, even cores
/// on socket (and NUMA node) 0, odd cores on 1.
fn kubelet_dual_socket_ht() -> Topology {
    use crate::topology::CpuInfo;
    let cpus = (0..12u32)
        .map(|cpu| {
            let core = cpu % 6;
            CpuInfo {
                cpu,
                core,
                socket: core % 2,
                numa: core % 2,
                l3: Some(core % 2),
                die: None,
            }
        })
        .collect();
    Topology::new(cpus, CpuSet::new(), CpuSet::new()).unwrap()
}

/// The cases of the kubelet's `TestTakeByTopologyNUMADistributed` (its own
/// and the common ones it shares with the packed allocator) on machines with
/// more than one NUMA node. pinctl chooses its own CPUs and, among node sets
/// the kubelet's rules treat alike, its own nodes (best fit, where the
/// kubelet balances what is left free), so what must match is how many CPUs
/// each node gives. Left out: "take one cpu from dual socket with HT, core
/// from Socket 0, cpuGroupSize 2" (one CPU in groups of two), which the
/// kubelet packs and pinctl refuses (`SmtAlignment`), and the
/// single-NUMA-node cases, where there is nothing to distribute.
#[test]
fn kubelet_distributed_table_cases() {
    let multi = kubelet_dual_socket_multi_numa();
    let large = kubelet_dual_socket_multi_numa_large();
    let ht = kubelet_dual_socket_ht();
    #[rustfmt::skip]
    let cases: &[(&str, &Topology, &str, usize, usize, &str)] = &[
        ("take a socket of cpus from dual socket with multi-numa-per-socket with HT",
            &multi, "0-79", 40, 1, "0-19,40-59"),
        ("take a NUMA node of cpus from dual socket with multi-numa-per-socket with HT",
            &multi, "0-79", 20, 1, "0-9,40-49"),
        ("take a NUMA node of cpus ..., with 1 NUMA node already taken",
            &multi, "10-39,50-79", 20, 1, "10-19,50-59"),
        ("take a socket and a NUMA node of cpus from dual socket with multi-numa-per-socket with HT",
            &multi, "0-79", 60, 1, "0-29,40-69"),
        ("take a socket and a NUMA node of cpus ..., a core taken",
            &multi, "1-39,41-79", 60, 1, "10-39,50-79"),
        ("allocate 4 full cores with 2 distributed across each NUMA node",
            &ht, "0-11", 8, 1, "0,6,2,8,1,7,3,9"),
        ("allocate 32 full cores with 8 distributed across each NUMA node",
            &multi, "0-79", 64, 1, "0-7,10-17,20-27,30-37,40-47,50-57,60-67,70-77"),
        ("allocate 24 full cores with 8 distributed across the first 3 NUMA nodes",
            &multi, "0-79", 48, 1, "0-7,10-17,20-27,40-47,50-57,60-67"),
        ("allocate 24 full cores with 8 distributed across the first 3 NUMA nodes (taking all but 2 from the first NUMA node)",
            &multi, "1-29,32-39,41-69,72-79", 48, 1, "1-8,10-17,20-27,41-48,50-57,60-67"),
        ("allocate 24 full cores with 8 distributed across the last 3 NUMA nodes (even though all 8 could be allocated from the first NUMA node)",
            &multi, "2-29,31-39,42-69,71-79", 48, 1, "10-17,20-27,31-38,50-57,60-67,71-78"),
        ("allocate 8 full cores with 2 distributed across each NUMA node",
            &multi, "0-2,10-12,20-22,30-32,40-41,50-51,60-61,70-71", 16, 1,
            "0-1,10-11,20-21,30-31,40-41,50-51,60-61,70-71"),
        ("take one cpu from dual socket with HT - core from Socket 0",
            &ht, "1-5,7-11", 1, 1, "1"),
        ("allocate 13 full cores distributed across the first 2 NUMA nodes",
            &multi, "0-79", 26, 1, "0-6,10-16,40-45,50-55"),
        ("allocate 13 full cores distributed across the first 2 NUMA nodes (cpuGroupSize 2)",
            &multi, "0-79", 26, 2, "0-6,10-15,40-46,50-55"),
        ("allocate 31 full cores with 15 CPUs distributed across each NUMA node and 1 CPU spilling over to each of NUMA 0, 1",
            &multi, "0-79", 62, 1, "0-7,10-17,20-27,30-37,40-47,50-57,60-66,70-76"),
        ("allocate 31 full cores with 14 CPUs distributed across each NUMA node and 2 CPUs spilling over to each of NUMA 0, 1, 2 (cpuGroupSize 2)",
            &multi, "0-79", 62, 2, "0-7,10-17,20-27,30-36,40-47,50-57,60-67,70-76"),
        ("allocate 31 full cores with 15 CPUs distributed across each NUMA node and 1 CPU spilling over to each of NUMA 2, 3 (to keep balance)",
            &multi, "0-8,10-18,20-39,40-48,50-58,60-79", 62, 1,
            "0-7,10-17,20-27,30-37,40-46,50-56,60-67,70-77"),
        ("allocate 31 full cores with 14 CPUs distributed across each NUMA node and 2 CPUs spilling over to each of NUMA 0, 2, 3 (to keep balance with cpuGroupSize 2)",
            &multi, "0-8,10-18,20-39,40-48,50-58,60-79", 62, 2,
            "0-7,10-16,20-27,30-37,40-47,50-56,60-67,70-77"),
        ("ensure bestRemainder chosen with NUMA nodes that have enough CPUs to satisfy the request",
            &multi, "0-3,10-13,20-23,30-36,40-43,50-53,60-63,70-76", 34, 1,
            "0-3,10-13,20-23,30-34,40-43,50-53,60-63,70-74"),
        ("ensure previous failure encountered on live machine has been fixed (1/1)",
            &large,
            "0,128,30,31,158,159,43-47,171-175,62,63,190,191,75-79,203-207,94,96,222,223,101-111,229-239,126,127,254,255",
            28, 1, "43-47,75-79,96,101-105,171-174,203-206,229-232"),
    ];
    for &(name, t, free, n, group, kubelet) in cases {
        let got = distribute(t, &set(free), n, group);
        let want = per_node(t, &set(kubelet));
        let have = per_node(t, &got);
        let sorted = |m: &BTreeMap<u32, usize>| {
            let mut v: Vec<usize> = m.values().copied().collect();
            v.sort_unstable();
            v
        };
        assert_eq!(
            sorted(&have),
            sorted(&want),
            "{name}: {got} is split {have:?}"
        );
        // The model below agrees with the kubelet's own expectations.
        let avail = if group > 1 {
            whole_cores_of(t, &set(free))
        } else {
            set(free)
        };
        let (_, model) = kubelet::Machine::new(t, &avail).take(n, group).unwrap();
        assert_eq!(model, want, "{name}: the model");
    }
}

#[test]
fn distribute_spreads_the_remainder_when_no_even_split_fits() {
    // The kubelet's "ensure bestRemainder chosen" case: nodes with 8, 8, 8 and
    // 14 free CPUs, 34 requested. No split 9, 9, 8, 8 fits; each node takes
    // 8 and the remainder goes where there is room: 8, 8, 8, 10 as the
    // kubelet, where pinctl packed 8, 8, 4, 14.
    let t = kubelet_dual_socket_multi_numa();
    let free = set("0-3,10-13,20-23,30-36,40-43,50-53,60-63,70-76");
    let got = distribute(&t, &free, 34, 1);
    let want: BTreeMap<u32, usize> = [(0, 8), (1, 8), (2, 8), (3, 10)].into();
    assert_eq!(per_node(&t, &got), want, "{got}");
    assert_eq!(got, set("0-3,10-13,20-23,30-34,40-43,50-53,60-63,70-74"));

    // 30, 9, 9 and 9 free, 38 requested: no even split on any number of
    // nodes, but 11, 9, 9, 9 over four (the kubelet's), not 30 + 8 packed.
    let t = Shape {
        sockets: 1,
        numa_per_socket: 4,
        l3_per_numa: 1,
        cores_per_l3: 16,
        threads_per_core: 2,
    }
    .build();
    let free = set("0-14,64-78,16-20,80-83,32-36,96-99,48-52,112-115");
    assert_eq!(
        per_node(&t, &free).values().copied().collect::<Vec<_>>(),
        vec![30, 9, 9, 9]
    );
    let got = distribute(&t, &free, 38, 1);
    let want: BTreeMap<u32, usize> = [(0, 11), (1, 9), (2, 9), (3, 9)].into();
    assert_eq!(per_node(&t, &got), want, "{got}");

    // An even split on more nodes still beats an uneven one on fewer: 14, 8,
    // 8, 8 and 8 free, 34 requested, is 7, 7, 7, 7, 6 over five nodes (the
    // kubelet: 10, 8, 8, 8 over four).
    let t = kubelet_dual_socket_multi_numa_large();
    let free = set("0-6,128-134,16-19,144-147,32-35,160-163,48-51,176-179,64-67,192-195");
    let got = distribute(&t, &free, 34, 1);
    let mut counts: Vec<usize> = per_node(&t, &got).into_values().collect();
    counts.sort_unstable();
    assert_eq!(counts, vec![6, 7, 7, 7, 7], "{got}");
    let (k, kubelet) = kubelet::Machine::new(&t, &free).take(34, 1).unwrap();
    assert_eq!((k, spread(&kubelet)), (4, 2));
}

/// The distribution shares: the kubelet's `distribution` each, the remainder
/// water-filled in order.
#[test]
fn distribution_shares_water_fill_the_remainder() {
    assert_eq!(
        distribution_shares(&[14, 8, 8, 8], 34),
        Some(vec![10, 8, 8, 8])
    );
    assert_eq!(
        distribution_shares(&[9, 9, 8, 8], 34),
        Some(vec![9, 9, 8, 8])
    );
    assert_eq!(
        distribution_shares(&[20, 9, 9, 8], 34),
        Some(vec![9, 9, 8, 8])
    );
    assert_eq!(
        distribution_shares(&[20, 20, 8, 8], 35),
        Some(vec![10, 9, 8, 8])
    );
    assert_eq!(distribution_shares(&[5, 5], 10), Some(vec![5, 5]));
    // A node below the distribution, or too little room for the remainder.
    assert_eq!(distribution_shares(&[20, 7], 16), None);
    assert_eq!(distribution_shares(&[8, 8], 17), None);
    assert_eq!(distribution_shares(&[], 1), None);
}

/// A model of the kubelet's `takeByTopologyNUMADistributed`
/// (`pkg/kubelet/cm/cpumanager/cpu_assignment.go`) on counts: how many CPUs
/// it takes from each NUMA node, or `None` where it falls back to
/// `takeByTopologyNUMAPacked`.
///
/// - NUMA nodes with free CPUs in `sortAvailableNUMANodes` order: ascending
///   free CPUs, ties by id ("numaFirst", sockets >= NUMA nodes), or sockets
///   in that order and the nodes of each in that order ("socketsFirst");
/// - `rangeNUMANodesNeededToSatisfy`: from the groups needed over the groups
///   per node of the whole machine (rounded up) to the groups needed or the
///   nodes with free CPUs, whichever is fewer;
/// - per size, every combination (`iterateCombinations`, in that order)
///   holding `n` in whole groups whose every node holds `distribution` =
///   `n / k / g * g`; the remainder over every subset of the nodes with a
///   group left, largest subsets first, round-robin a group at a time; the
///   "balance" is the standard deviation (mean and result rounded to 3
///   places) of the free CPUs left on every node with free CPUs; strictly
///   lower wins, a combination with balance 0 stops the search.
///
/// It follows the choice the kubelet scores. (The Go code keeps
/// `bestCombo = combo` and `bestLocalRemainder = subset`, slices that
/// `iterateCombinations` builds with `append` on a shared backing array
/// from 4 elements on, so a later combination can overwrite them; that is
/// not modelled.)
mod kubelet {
    use std::collections::BTreeMap;

    use crate::cpuset::CpuSet;
    use crate::topology::Topology;

    pub struct Machine {
        cpus: usize,
        numa_nodes: usize,
        /// `sortAvailableNUMANodes`.
        order: Vec<u32>,
        free: BTreeMap<u32, usize>,
    }

    fn combinations(items: &[u32], k: usize, f: &mut impl FnMut(&[u32]) -> bool) {
        fn go(
            items: &[u32],
            k: usize,
            start: usize,
            acc: &mut Vec<u32>,
            f: &mut impl FnMut(&[u32]) -> bool,
        ) -> bool {
            if acc.len() == k {
                return f(acc);
            }
            for i in start..=items.len() - (k - acc.len()) {
                acc.push(items[i]);
                let go_on = go(items, k, i + 1, acc, f);
                acc.pop();
                if !go_on {
                    return false;
                }
            }
            true
        }
        if k >= 1 && k <= items.len() {
            go(items, k, 0, &mut Vec::new(), f);
        }
    }

    fn round3(x: f64) -> f64 {
        (x * 1000.0).round() / 1000.0
    }

    fn standard_deviation(xs: &BTreeMap<u32, usize>) -> f64 {
        let len = xs.len() as f64;
        let mean = round3(xs.values().map(|&x| x as f64).sum::<f64>() / len);
        let sum: f64 = xs.values().map(|&x| (x as f64 - mean).powi(2)).sum();
        round3((sum / len).sqrt())
    }

    /// Hands `remainder` out over `subset` a group at a time, skipping nodes
    /// with less than a group left. `false` where it cannot finish (the Go
    /// loop would not end; unreachable with whole-group free counts).
    fn round_robin(
        left: &mut BTreeMap<u32, usize>,
        taken: &mut BTreeMap<u32, usize>,
        subset: &[u32],
        mut remainder: usize,
        g: usize,
    ) -> bool {
        while remainder > 0 {
            let before = remainder;
            for id in subset {
                if remainder == 0 {
                    break;
                }
                if left[id] < g {
                    continue;
                }
                *left.get_mut(id).unwrap() -= g;
                *taken.entry(*id).or_default() += g;
                remainder -= g;
            }
            if remainder == before {
                return false;
            }
        }
        true
    }

    impl Machine {
        pub fn new(topo: &Topology, avail: &CpuSet) -> Machine {
            let free: BTreeMap<u32, usize> = topo
                .numa_nodes()
                .iter()
                .map(|(&id, cpus)| (id, cpus.intersection(avail).len()))
                .filter(|&(_, count)| count > 0)
                .collect();
            let by_free = |ids: &mut Vec<u32>| ids.sort_by_key(|id| (free[id], *id));
            let order = if topo.sockets().len() >= topo.numa_nodes().len() {
                let mut ids: Vec<u32> = free.keys().copied().collect();
                by_free(&mut ids);
                ids
            } else {
                let mut sockets: Vec<(usize, u32)> = topo
                    .sockets()
                    .iter()
                    .map(|(&s, cpus)| (cpus.intersection(avail).len(), s))
                    .filter(|&(count, _)| count > 0)
                    .collect();
                sockets.sort_unstable();
                let mut order = Vec::new();
                for (_, s) in sockets {
                    let mut ids: Vec<u32> = free
                        .keys()
                        .copied()
                        .filter(|id| topo.sockets_of(&topo.numa_nodes()[id]).contains(&s))
                        .collect();
                    by_free(&mut ids);
                    order.extend(ids);
                }
                order
            };
            Machine {
                cpus: topo.online().len(),
                numa_nodes: topo.numa_nodes().len(),
                order,
                free,
            }
        }

        /// The kubelet's choice: the number of nodes and the CPUs per node.
        pub fn take(&self, n: usize, g: usize) -> Option<(usize, BTreeMap<u32, usize>)> {
            let total: usize = self.free.values().sum();
            if n == 0 || !n.is_multiple_of(g) || n > total {
                return None;
            }
            let groups = (self.cpus - 1) / g + 1;
            let per_node = (groups - 1) / self.numa_nodes + 1;
            let needed = (n - 1) / g + 1;
            let min = (needed - 1) / per_node + 1;
            let max = needed.min(self.free.len());
            (min..=max).find_map(|k| Some((k, self.take_over(n, g, k)?)))
        }

        /// What the kubelet takes over combinations of `k` nodes.
        pub fn take_over(&self, n: usize, g: usize, k: usize) -> Option<BTreeMap<u32, usize>> {
            let mut best_balance = f64::MAX;
            let mut best: Option<(Vec<u32>, Vec<u32>)> = None;
            combinations(&self.order, k, &mut |combo| {
                if best_balance == 0.0 {
                    return false;
                }
                if combo.iter().map(|id| self.free[id]).sum::<usize>() < n
                    || combo.iter().map(|id| self.free[id] / g * g).sum::<usize>() < n
                {
                    return true;
                }
                let distribution = n / k / g * g;
                if combo.iter().any(|id| self.free[id] < distribution) {
                    return true;
                }
                let mut left = self.free.clone();
                for id in combo {
                    *left.get_mut(id).unwrap() -= distribution;
                }
                let remainder = n - distribution * k;
                let candidates: Vec<u32> =
                    combo.iter().copied().filter(|id| left[id] >= g).collect();
                let mut local_balance = f64::MAX;
                let mut local: Vec<u32> = Vec::new();
                if remainder == 0 {
                    local_balance = standard_deviation(&left);
                }
                let mut size = candidates.len();
                while remainder > 0 && size >= 1 {
                    combinations(&candidates, size, &mut |subset| {
                        if subset.iter().map(|id| left[id]).sum::<usize>() < remainder {
                            return true;
                        }
                        let mut after = left.clone();
                        if !round_robin(&mut after, &mut BTreeMap::new(), subset, remainder, g) {
                            return true;
                        }
                        let balance = standard_deviation(&after);
                        if balance < local_balance {
                            local_balance = balance;
                            local = subset.to_vec();
                        }
                        true
                    });
                    size -= 1;
                }
                if local_balance < best_balance {
                    best_balance = local_balance;
                    best = Some((combo.to_vec(), local));
                }
                true
            });
            let (combo, remainder_nodes) = best?;
            let distribution = n / k / g * g;
            let mut left = self.free.clone();
            let mut taken = BTreeMap::new();
            for id in &combo {
                *left.get_mut(id).unwrap() -= distribution;
                taken.insert(*id, distribution);
            }
            let remainder = n - distribution * k;
            round_robin(&mut left, &mut taken, &remainder_nodes, remainder, g).then_some(taken)
        }
    }
}

mod distributed_props {
    use super::*;
    use proptest::prelude::*;

    /// A machine with 2 to 8 NUMA nodes, some of its CPUs free, a request
    /// and the group size (1, or the threads per core for whole cores).
    fn arb_case() -> impl Strategy<Value = (Shape, CpuSet, usize, bool)> {
        (
            1u32..=2,
            1u32..=4,
            1u32..=2,
            1u32..=4,
            1u32..=2,
            prop_oneof![Just(100u8), Just(80), Just(50), Just(25)],
            proptest::collection::vec(0u8..100, 2 * 4 * 2 * 4 * 2),
            any::<u32>(),
            any::<bool>(),
        )
            .prop_filter("more than one NUMA node", |c| c.0 * c.1 > 1)
            .prop_map(
                |(sockets, numa, l3, cores, threads, density, roll, pick, whole)| {
                    let shape = Shape {
                        sockets,
                        numa_per_socket: numa,
                        l3_per_numa: l3,
                        cores_per_l3: cores,
                        threads_per_core: threads,
                    };
                    let free: CpuSet = (0..shape.cpus())
                        .filter(|&cpu| roll[cpu as usize] < density)
                        .collect();
                    (shape, free, pick as usize, whole)
                },
            )
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 1024,
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        /// pinctl's per-node counts are never less even than the kubelet's:
        /// overall, and against what the kubelet takes over as many nodes as
        /// pinctl uses; when pinctl's split is not even (shares more than one
        /// group apart) it uses the kubelet's number of nodes; and where the
        /// kubelet packs, pinctl packs too.
        #[test]
        fn never_less_even_than_the_kubelet((shape, free, pick, whole) in arb_case()) {
            let t = shape.build();
            let g = if whole { t.threads_per_core() } else { 1 };
            let avail = if whole { whole_cores_of(&t, &free) } else { free.clone() };
            if avail.len() < g {
                return Ok(());
            }
            let n = g * (1 + pick % (avail.len() / g));
            let opts = Options {
                distribute_across_numa: true,
                full_pcpus_only: whole,
                ..Options::default()
            };
            let got = allocate(&t, &free, n, &opts).unwrap();
            prop_assert_eq!(got.len(), n);
            prop_assert!(got.is_subset(&avail));
            let counts = per_node(&t, &got);
            let ours = spread(&counts);
            let kubelet = kubelet::Machine::new(&t, &avail);
            match kubelet.take(n, g) {
                Some((k, theirs)) => {
                    prop_assert!(ours <= spread(&theirs),
                        "{} is split {:?}, the kubelet's {:?}", got, counts, theirs);
                    if ours > g {
                        prop_assert_eq!(counts.len(), k,
                            "{} is split {:?}, the kubelet's {:?}", got, counts, theirs);
                    }
                }
                None => {
                    let packed = allocate(&t, &free, n, &Options {
                        distribute_across_numa: false,
                        ..opts.clone()
                    }).unwrap();
                    prop_assert_eq!(&got, &packed, "the kubelet packs");
                }
            }
            if let Some(theirs) = kubelet.take_over(n, g, counts.len()) {
                prop_assert!(ours <= spread(&theirs),
                    "{} is split {:?}, the kubelet's over as many nodes {:?}",
                    got, counts, theirs);
            }
        }
    }
}
