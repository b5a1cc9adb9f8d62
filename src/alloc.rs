//! The allocator: which CPUs a workload that asks for N exclusive CPUs gets.
//!
//! [`allocate`] is a pure, deterministic function: topology, free CPUs, request
//! and options in, a CPU set or a typed error out. It does no I/O and never panics.
//!
//! # Quality, in order
//! 1. Span as few NUMA nodes as can hold the request now, then as few sockets,
//!    then as few L3 groups.
//! 2. Take whole physical cores; for a remainder smaller than a core, take the
//!    lone thread of an already half-used core before breaking a fresh one.
//! 3. Best fit: among equal choices use the most-occupied domain that still fits,
//!    so large free blocks stay whole for later large requests.
//!
//! # How
//! The smallest domain above a core is a *slice*: the cores sharing a socket, a
//! NUMA node and an L3 group. The search
//! - finds the fewest NUMA nodes whose free CPUs hold the request and enumerates
//!   every node set of that size (a bounded search, largest nodes first), keeping
//!   those on the fewest sockets;
//! - within those, enumerates the slice sets of the smallest size that holds the
//!   request;
//! - scores each slice set by running the core picker on it (rule 2) and by the
//!   free CPUs left in the NUMA nodes, sockets and slices it touches (rule 3);
//! - materialises the best one with the same picker, so the score and the result
//!   cannot disagree.
//!
//! Taking whole any node set but one (the "all but the last" fill) is what the
//! picker does naturally: it drains slices largest first, so the remainder lands
//! in the most-occupied slice of the set.
//!
//! With `distribute_across_numa` the node counts come first
//! (`Planner::distributed`): the kubelet's `takeByTopologyNUMADistributed`
//! rules (each of `k` nodes takes `N / k`, the fewest `k` that qualify), with the
//! remainder water-filled so the shares are never further apart than the
//! kubelet's; each node's share is then planned as above.

use std::cmp::Reverse;
use std::collections::BTreeMap;

use serde::Serialize;

use crate::cpuset::CpuSet;
use crate::topology::Topology;

/// How many candidate sets one level of the search may visit. Typical machines
/// need a few dozen; the bound only matters on machines with very many NUMA
/// nodes or L3 groups, where the search settles for the best of those seen
/// (always including the greedy largest-first choice).
const SEARCH_BUDGET: usize = 2048;

/// The most SMT threads one core may have (POWER has 8); the topology rejects
/// more.
pub use crate::topology::MAX_THREADS;

/// Allocation options, with the kubelet's meanings where it has them.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Never handed out. See [`Topology::lowest_cores`] for the count form.
    pub reserved: CpuSet,
    /// Serve only whole physical cores; the request must be a multiple of the
    /// threads per core (kubelet `full-pcpus-only`).
    pub full_pcpus_only: bool,
    /// Split across NUMA nodes (kubelet `distribute-cpus-across-numa`): evenly
    /// over the fewest nodes that can hold an even split; else, as the kubelet,
    /// over the fewest nodes that can each hold `N / k`, the remainder spread as
    /// evenly as their free CPUs allow; else packed. In groups of a whole core
    /// with `full_pcpus_only`. Never less even than the kubelet.
    pub distribute_across_numa: bool,
    /// One thread per core before any sibling (kubelet
    /// `distribute-cpus-across-cores`).
    pub spread_cores: bool,
    /// NUMA nodes to draw from first.
    pub numa_preference: Vec<u32>,
    /// Widen the preference to the sockets of the preferred nodes.
    pub align_by_socket: bool,
}

/// Why a request cannot be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    #[error("a request must be for at least one CPU")]
    ZeroRequest,
    #[error("not enough CPUs: requested {requested}, available {available}")]
    NotEnough { requested: usize, available: usize },
    #[error(
        "not enough whole physical cores: requested {requested} CPUs, available {available} CPUs on free whole cores"
    )]
    NotEnoughWholeCores { requested: usize, available: usize },
    #[error(
        "SMT alignment: {requested} CPUs is not a multiple of {threads_per_core} threads per core, and full physical cores are required"
    )]
    SmtAlignment {
        requested: usize,
        threads_per_core: usize,
    },
    #[error("NUMA node {0} does not exist on this machine")]
    UnknownNumaNode(u32),
    #[error("{0}")]
    ConflictingOptions(&'static str),
}

/// Where a set of CPUs sits: the alignment summary of a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Alignment {
    pub numa_nodes: Vec<u32>,
    pub sockets: Vec<u32>,
    pub l3_groups: Vec<u32>,
    /// Cores whose every online thread is in the set.
    pub whole_cores: usize,
    /// Cores of which the set holds some threads but not all.
    pub shared_cores: usize,
}

impl Alignment {
    pub fn of(topo: &Topology, cpus: &CpuSet) -> Alignment {
        let (whole_cores, shared_cores) = topo.core_split(cpus);
        Alignment {
            numa_nodes: topo.numa_of(cpus),
            sockets: topo.sockets_of(cpus),
            l3_groups: topo.l3_of(cpus),
            whole_cores,
            shared_cores,
        }
    }
}

/// Chooses `n` CPUs from `free` for one workload.
///
/// CPUs of `free` that are not online in `topo`, and reserved CPUs, are never
/// chosen. The result has exactly `n` CPUs, all from `free`.
pub fn allocate(
    topo: &Topology,
    free: &CpuSet,
    n: usize,
    opts: &Options,
) -> Result<CpuSet, AllocError> {
    if n == 0 {
        return Err(AllocError::ZeroRequest);
    }
    if opts.full_pcpus_only && opts.spread_cores {
        return Err(AllocError::ConflictingOptions(
            "full physical cores and spreading across cores cannot be combined",
        ));
    }
    for node in &opts.numa_preference {
        if !topo.numa_nodes().contains_key(node) {
            return Err(AllocError::UnknownNumaNode(*node));
        }
    }

    let mut avail = free.intersection(topo.online());
    avail.difference_with(&opts.reserved);
    if opts.full_pcpus_only {
        let tpc = topo.threads_per_core();
        if !n.is_multiple_of(tpc) {
            return Err(AllocError::SmtAlignment {
                requested: n,
                threads_per_core: tpc,
            });
        }
        avail = whole_cores_of(topo, &avail);
        if avail.len() < n {
            return Err(AllocError::NotEnoughWholeCores {
                requested: n,
                available: avail.len(),
            });
        }
    } else if avail.len() < n {
        return Err(AllocError::NotEnough {
            requested: n,
            available: avail.len(),
        });
    }

    if opts.numa_preference.is_empty() {
        return plan(topo, avail, n, opts);
    }
    // Draw from the preferred region first: all of it if it cannot hold the
    // request, the rest planned outside it by the usual rules.
    let region = preferred_region(topo, opts);
    let inside = avail.intersection(&region);
    if inside.len() >= n {
        return plan(topo, inside, n, opts);
    }
    let outside = avail.difference(&region);
    let rest = plan(topo, outside, n - inside.len(), opts)?;
    Ok(inside.union(&rest))
}

fn preferred_region(topo: &Topology, opts: &Options) -> CpuSet {
    let mut region = CpuSet::new();
    for node in &opts.numa_preference {
        if let Some(cpus) = topo.numa_nodes().get(node) {
            region.union_with(cpus);
        }
    }
    if opts.align_by_socket {
        for socket in topo.sockets_of(&region) {
            if let Some(cpus) = topo.sockets().get(&socket) {
                region.union_with(cpus);
            }
        }
    }
    region
}

/// The CPUs of `avail` that lie on cores whose every thread is in `avail`.
fn whole_cores_of(topo: &Topology, avail: &CpuSet) -> CpuSet {
    topo.cores()
        .iter()
        .filter(|c| c.cpus.iter().all(|&cpu| avail.contains(cpu)))
        .flat_map(|c| c.cpus.iter().copied())
        .collect()
}

fn plan(topo: &Topology, avail: CpuSet, n: usize, opts: &Options) -> Result<CpuSet, AllocError> {
    let mut planner = Planner::new(topo, avail, opts);
    if opts.distribute_across_numa
        && let Some(set) = planner.distributed(n)
    {
        return Ok(set);
    }
    planner.packed(n, None).ok_or({
        // Only reachable when whole cores of mixed sizes cannot add up to `n`.
        AllocError::SmtAlignment {
            requested: n,
            threads_per_core: topo.threads_per_core(),
        }
    })
}

/// A candidate's quality. Field order is priority order (derived `Ord`), lower is
/// better.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Score {
    numa: usize,
    sockets: usize,
    l3: usize,
    slices: usize,
    /// Rule 2: the penalty of [`Planner::pick`].
    cores: (usize, usize),
    /// Rule 3: free CPUs left in the touched NUMA nodes, sockets and slices.
    fit: (usize, usize, usize),
}

/// The shape of the free CPUs of a slice (or of several slices, summed): whole
/// free cores by size, and half-used cores by their free threads. Rule 2 depends
/// on nothing else, so candidates are scored on counts and only the winner is
/// picked core by core.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Counts {
    whole: [usize; MAX_THREADS + 1],
    partial: [usize; MAX_THREADS + 1],
}

impl Counts {
    fn add(&mut self, other: &Counts) {
        for i in 0..=MAX_THREADS {
            self.whole[i] += other.whole[i];
            self.partial[i] += other.partial[i];
        }
    }

    /// The penalty [`Planner::pick`] reaches for `n` CPUs from these cores, by
    /// the same passes on counts. `None` where the picker fails.
    fn penalty(mut self, n: usize, mode: Mode) -> Option<(usize, usize)> {
        let free: usize = (1..=MAX_THREADS)
            .map(|i| i * (self.whole[i] + self.partial[i]))
            .sum();
        if n > free {
            return None;
        }
        if mode == Mode::Spread {
            let whole: usize = self.whole.iter().sum();
            let partial: usize = self.partial.iter().sum();
            let beside_busy = n.saturating_sub(whole).min(partial);
            return Some((n.saturating_sub(whole + partial), beside_busy));
        }
        let mut rem = n;
        for size in (1..=MAX_THREADS).rev() {
            let take = self.whole[size].min(rem / size);
            self.whole[size] -= take;
            rem -= take * size;
        }
        if mode == Mode::WholeOnly {
            return (rem == 0).then_some((0, 0));
        }
        let mut penalty = (0, 0);
        // A remainder smaller than a core: the half-used core that holds it
        // (best fit), else one fresh core broken, rather than spreading it over
        // several half-used cores (fewer cores shared with others).
        if rem > 0 {
            if let Some(f) = (rem..=MAX_THREADS).find(|&f| self.partial[f] > 0) {
                self.partial[f] -= 1;
                return Some((1, 0));
            }
            if let Some(s) = (rem..=MAX_THREADS).find(|&s| self.whole[s] > 0) {
                self.whole[s] -= 1;
                return Some((1, 1));
            }
        }
        // No whole core is left (pass 1 took every one that fit, and a larger one
        // would have been broken above): half-used cores, largest first (in
        // bulk), until the rest fits one of them.
        while rem > 0 {
            if let Some(f) = (rem..=MAX_THREADS).find(|&f| self.partial[f] > 0) {
                self.partial[f] -= 1;
                penalty.0 += 1;
                break;
            }
            let f = (1..rem.min(MAX_THREADS + 1))
                .rev()
                .find(|&f| self.partial[f] > 0)?;
            // f < rem, so at least one is taken.
            let take = self.partial[f].min((rem - 1) / f);
            self.partial[f] -= take;
            penalty.0 += take;
            rem -= take * f;
        }
        Some(penalty)
    }
}

/// How cores are filled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Whole cores first, then half-used cores, then fresh cores broken.
    Packed,
    /// Whole cores only.
    WholeOnly,
    /// One thread per core before siblings.
    Spread,
}

struct NodeAgg {
    id: u32,
    free: usize,
    /// Slices of this node with free CPUs.
    slices: Vec<usize>,
}

/// A distributed split: (node, CPUs) per node of the set.
type Parts = Vec<(usize, usize)>;

/// The plans of [`Planner::distributed`] by (node, CPUs): the CPUs and where they
/// sit, `None` where the node cannot give that many.
type NodePlans = BTreeMap<(usize, usize), Option<(CpuSet, Alignment)>>;

/// Per-call availability derived from the topology and the free set.
struct Planner<'t> {
    topo: &'t Topology,
    avail: CpuSet,
    mode: Mode,
    /// Free threads per core (index into `topo.cores()`).
    core_free: Vec<usize>,
    slice_free: Vec<usize>,
    slice_counts: Vec<Counts>,
    /// NUMA nodes with free CPUs, ascending by id.
    nodes: Vec<NodeAgg>,
    socket_free: BTreeMap<u32, usize>,
    /// Scratch: cores already used by the pick in progress.
    taken: Vec<bool>,
}

impl<'t> Planner<'t> {
    fn new(topo: &'t Topology, avail: CpuSet, opts: &Options) -> Self {
        let mut core_free = vec![0usize; topo.cores().len()];
        for cpu in &avail {
            if let Some(i) = topo.core_index_of(cpu) {
                core_free[i] += 1;
            }
        }
        let mut slice_free = Vec::with_capacity(topo.slices().len());
        let mut slice_counts = Vec::with_capacity(topo.slices().len());
        let mut nodes: BTreeMap<u32, NodeAgg> = BTreeMap::new();
        let mut socket_free: BTreeMap<u32, usize> = BTreeMap::new();
        for (i, s) in topo.slices().iter().enumerate() {
            let mut counts = Counts::default();
            let mut free = 0;
            for &c in &s.cores {
                let (f, size) = (core_free[c], topo.cores()[c].cpus.len());
                free += f;
                if f == size {
                    counts.whole[size] += 1;
                } else if f > 0 {
                    counts.partial[f] += 1;
                }
            }
            slice_free.push(free);
            slice_counts.push(counts);
            if free == 0 {
                continue;
            }
            let node = nodes.entry(s.numa).or_insert(NodeAgg {
                id: s.numa,
                free: 0,
                slices: Vec::new(),
            });
            node.free += free;
            node.slices.push(i);
            *socket_free.entry(s.socket).or_default() += free;
        }
        let mode = if opts.full_pcpus_only {
            Mode::WholeOnly
        } else if opts.spread_cores {
            Mode::Spread
        } else {
            Mode::Packed
        };
        Planner {
            topo,
            avail,
            mode,
            taken: vec![false; core_free.len()],
            core_free,
            slice_free,
            slice_counts,
            nodes: nodes.into_values().collect(),
            socket_free,
        }
    }

    /// The best packed choice of `n` CPUs, optionally only from `within` (NUMA
    /// node ids). `None` if the free CPUs there cannot give exactly `n`.
    fn packed(&mut self, n: usize, within: Option<&[u32]>) -> Option<CpuSet> {
        let nodes: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| within.is_none_or(|w| w.contains(&self.nodes[i].id)))
            .collect();
        let node_free: Vec<usize> = nodes.iter().map(|&i| self.nodes[i].free).collect();

        // Level 1: the fewest NUMA nodes, then the fewest sockets among those.
        let mut node_sets: Vec<(usize, Vec<usize>)> = Vec::new();
        let mut budget = SEARCH_BUDGET;
        for_each_min_subset(&node_free, n, &mut budget, |subset| {
            let set: Vec<usize> = subset.iter().map(|&j| nodes[j]).collect();
            let sockets = self.distinct(set.iter().flat_map(|&i| &self.nodes[i].slices), |s| {
                Some(s.socket)
            });
            node_sets.push((sockets, set));
        });
        let fewest = node_sets.iter().map(|(s, _)| *s).min()?;
        node_sets.retain(|(s, _)| *s == fewest);

        // Level 2: within each node set, the slice sets of the smallest size,
        // scored on counts.
        let mut best: Option<(Score, Vec<usize>)> = None;
        let mut budget = SEARCH_BUDGET;
        for (_, set) in &node_sets {
            let slices: Vec<usize> = set
                .iter()
                .flat_map(|&i| self.nodes[i].slices.iter().copied())
                .collect();
            let free: Vec<usize> = slices.iter().map(|&s| self.slice_free[s]).collect();
            let numa_left = set.iter().map(|&i| self.nodes[i].free).sum::<usize>() - n;
            for_each_min_subset(&free, n, &mut budget, |subset| {
                let chosen: Vec<usize> = subset.iter().map(|&j| slices[j]).collect();
                let Some(score) = self.score(set.len(), &chosen, numa_left, n) else {
                    return;
                };
                if best.as_ref().is_none_or(|(b, _)| score < *b) {
                    best = Some((score, chosen));
                }
            });
        }
        let (score, chosen) = best?;
        let mut out = CpuSet::new();
        let penalty = self.pick(&chosen, n, &mut out)?;
        debug_assert_eq!(penalty, score.cores, "scoring and picking disagree");
        Some(out)
    }

    /// The number of distinct values of `key` over the slices `slices`.
    fn distinct<'a>(
        &self,
        slices: impl Iterator<Item = &'a usize>,
        key: impl Fn(&crate::topology::Slice) -> Option<u32>,
    ) -> usize {
        let all = self.topo.slices();
        let mut values: Vec<u32> = slices.filter_map(|&s| key(&all[s])).collect();
        values.sort_unstable();
        values.dedup();
        values.len()
    }

    fn score(&self, numa: usize, slices: &[usize], numa_left: usize, n: usize) -> Option<Score> {
        let mut counts = Counts::default();
        for &s in slices {
            counts.add(&self.slice_counts[s]);
        }
        let cores = counts.penalty(n, self.mode)?;
        let all = self.topo.slices();
        let mut sockets: Vec<u32> = slices.iter().map(|&s| all[s].socket).collect();
        sockets.sort_unstable();
        sockets.dedup();
        let socket_left = sockets
            .iter()
            .map(|s| self.socket_free.get(s).copied().unwrap_or(0))
            .sum::<usize>()
            .saturating_sub(n);
        let slice_left = slices
            .iter()
            .map(|&s| self.slice_free[s])
            .sum::<usize>()
            .saturating_sub(n);
        Some(Score {
            numa,
            sockets: sockets.len(),
            l3: self.distinct(slices.iter(), |s| s.l3),
            slices: slices.len(),
            cores,
            fit: (numa_left, socket_left, slice_left),
        })
    }

    /// Picks `n` free CPUs from the cores of `slices` into `out` and returns the
    /// rule-2 penalty. `None` if it cannot (whole cores only, and their sizes do
    /// not add up to `n`). [`Counts::penalty`] mirrors these passes on counts.
    ///
    /// Packed (the default): whole free cores first, largest first, draining
    /// slices from the one with the most free CPUs; then a remainder smaller than
    /// a core goes to the half-used core that holds it (best fit), else to one
    /// fresh core broken; only when no whole core is left is it spread over
    /// half-used cores. Penalty: (cores shared with CPUs outside the result,
    /// fresh cores broken).
    ///
    /// Spread: one thread per core, first on cores whose siblings are free, then
    /// on half-used cores, then siblings. Penalty: (CPUs sharing a core with
    /// another of ours, CPUs beside a busy sibling).
    fn pick(&mut self, slices: &[usize], n: usize, out: &mut CpuSet) -> Option<(usize, usize)> {
        let mut order: Vec<usize> = slices.to_vec();
        order.sort_by_key(|&s| (Reverse(self.slice_free[s]), s));
        let all = self.topo.slices();
        let cores: Vec<usize> = order
            .iter()
            .flat_map(|&s| all[s].cores.iter().copied())
            .filter(|&c| self.core_free[c] > 0)
            .collect();
        let size = |c: usize| self.topo.cores()[c].cpus.len();
        let is_whole = |c: usize| self.core_free[c] == size(c);
        let mut rem = n;
        let mut penalty = (0, 0);
        let mut used: Vec<usize> = Vec::new();

        if self.mode == Mode::Spread {
            // One thread per core, cores with free siblings first.
            for whole_pass in [true, false] {
                for &c in cores.iter().filter(|&&c| is_whole(c) == whole_pass) {
                    if rem == 0 {
                        break;
                    }
                    used.push(c);
                    self.emit(c, 0, 1, out);
                    rem -= 1;
                    penalty.1 += usize::from(!whole_pass);
                }
            }
            // Then further threads, round-robin over the cores in use.
            let mut depth = 1;
            while rem > 0 && depth < MAX_THREADS {
                for &c in &used {
                    if rem > 0 && self.core_free[c] > depth {
                        self.emit(c, depth, 1, out);
                        rem -= 1;
                        penalty.0 += 1;
                    }
                }
                depth += 1;
            }
            return (rem == 0).then_some(penalty);
        }

        // Pass 1: whole free cores that fit, largest cores first.
        for s in (1..=MAX_THREADS).rev() {
            for &c in &cores {
                if rem < s {
                    break;
                }
                if size(c) == s && is_whole(c) {
                    self.taken[c] = true;
                    used.push(c);
                    self.emit(c, 0, s, out);
                    rem -= s;
                }
            }
        }
        if self.mode == Mode::Packed && rem > 0 {
            // Pass 2: the remainder. Half-used cores by free threads, ties to the
            // most-occupied slice (the end of the drain order).
            let mut partial: Vec<(usize, Reverse<usize>, usize)> = cores
                .iter()
                .enumerate()
                .filter(|&(_, &c)| !is_whole(c))
                .map(|(pos, &c)| (self.core_free[c], Reverse(pos), c))
                .collect();
            partial.sort_unstable();
            let best_fit = |partial: &[(usize, Reverse<usize>, usize)], rem: usize| {
                let i = partial.partition_point(|&(free, _, _)| free < rem);
                (i < partial.len()).then_some(i)
            };
            // The smallest fresh core that holds the remainder, in the
            // most-occupied slice.
            let fresh = cores
                .iter()
                .rev()
                .copied()
                .filter(|&c| is_whole(c) && !self.taken[c] && size(c) >= rem)
                .min_by_key(|&c| size(c));
            if let Some(i) = best_fit(&partial, rem) {
                // The half-used core that holds it.
                let (_, _, c) = partial[i];
                self.emit(c, 0, rem, out);
                penalty.0 += 1;
                rem = 0;
            } else if let Some(c) = fresh {
                // One fresh core broken rather than several half-used ones.
                self.emit(c, 0, rem, out);
                penalty = (penalty.0 + 1, penalty.1 + 1);
                rem = 0;
            } else {
                // No whole core left: half-used cores, largest first, until the
                // rest fits one of them.
                while rem > 0 {
                    let (free, _, c) = match best_fit(&partial, rem) {
                        Some(i) => partial.remove(i),
                        None => partial.pop()?,
                    };
                    let count = free.min(rem);
                    self.emit(c, 0, count, out);
                    rem -= count;
                    penalty.0 += 1;
                }
            }
        }
        for c in used {
            self.taken[c] = false;
        }
        (rem == 0).then_some(penalty)
    }

    /// Adds `count` free threads of core `c`, after skipping its first `skip`
    /// free ones, to `out`.
    fn emit(&self, c: usize, skip: usize, count: usize, out: &mut CpuSet) {
        let free = self.topo.cores()[c]
            .cpus
            .iter()
            .copied()
            .filter(|&cpu| self.avail.contains(cpu));
        out.extend(free.skip(skip).take(count));
    }

    /// Splits `n` across NUMA nodes the way the kubelet's
    /// `distribute-cpus-across-numa` does, in groups of `g` CPUs (a whole core
    /// when whole cores are required, else 1):
    ///
    /// - a node set of `k` nodes qualifies when it holds `n` and each of its nodes
    ///   holds the kubelet's `distribution`, `n / k` rounded down to a multiple of
    ///   `g`;
    /// - each node takes the distribution, and the remainder (fewer than `k`
    ///   groups) is water-filled over the nodes with room left, one group at a
    ///   time to the node that has taken least, ties to the node with the most
    ///   free CPUs. So the shares differ by one group wherever the free CPUs
    ///   allow, and never by more than the kubelet's round-robin over its
    ///   `bestRemainder` subset makes them (the gap is no larger than over any
    ///   subset of the set);
    /// - among the sets of one size, the most even split wins, then the usual
    ///   preferences (fewest sockets and L3 groups, fewest shared cores, best
    ///   fit).
    ///
    /// The fewest nodes that take an even split (shares at most one group apart)
    /// are used; when no node count does, the fewest nodes that qualify, as the
    /// kubelet does. `None` when no set qualifies; the caller then packs (the
    /// kubelet's fallback too).
    fn distributed(&mut self, n: usize) -> Option<CpuSet> {
        let group = if self.mode == Mode::WholeOnly {
            self.topo.threads_per_core()
        } else {
            1
        };
        let groups = n / group;
        let free: Vec<usize> = self.nodes.iter().map(|node| node.free).collect();
        let first = min_subset_size(&free, n)?;
        // Each node is planned for a few share sizes: remember them, with where
        // they sit (nodes are disjoint, so alignments combine).
        let mut per_node: NodePlans = BTreeMap::new();
        let mut budget = SEARCH_BUDGET;
        // The fewest nodes that qualify, when their best split is not even.
        let mut uneven: Option<Parts> = None;
        for k in first..=free.len().min(groups) {
            let mut sets: Vec<Vec<usize>> = Vec::new();
            for_each_subset(&free, k, n, &mut budget, |s| sets.push(s.to_vec()));
            let mut best: Option<((usize, Score), Parts)> = None;
            for mut set in sets {
                // The nodes with the most free CPUs take the remainder first.
                set.sort_by_key(|&i| (Reverse(free[i]), self.nodes[i].id));
                let caps: Vec<usize> = set.iter().map(|&i| free[i] / group).collect();
                let Some(shares) = distribution_shares(&caps, groups) else {
                    continue;
                };
                let mut parts = Vec::with_capacity(k);
                let (mut sockets, mut l3, mut shared) = (Vec::new(), Vec::new(), 0);
                for (&i, &share) in set.iter().zip(&shares) {
                    let share = share * group;
                    let id = self.nodes[i].id;
                    let plan = per_node.entry((i, share)).or_insert_with(|| {
                        let cpus = self.packed(share, Some(&[id]))?;
                        let a = Alignment::of(self.topo, &cpus);
                        Some((cpus, a))
                    });
                    let Some((_, a)) = plan else { break };
                    sockets.extend_from_slice(&a.sockets);
                    l3.extend_from_slice(&a.l3_groups);
                    shared += a.shared_cores;
                    parts.push((i, share));
                }
                if parts.len() != k {
                    continue;
                }
                sockets.sort_unstable();
                sockets.dedup();
                l3.sort_unstable();
                l3.dedup();
                let spread = parts.iter().map(|&(_, s)| s).max().unwrap_or(0)
                    - parts.iter().map(|&(_, s)| s).min().unwrap_or(0);
                let left = set.iter().map(|&i| free[i]).sum::<usize>() - n;
                let score = Score {
                    numa: k,
                    sockets: sockets.len(),
                    l3: l3.len(),
                    slices: 0,
                    cores: (shared, 0),
                    fit: (left, 0, 0),
                };
                if best.as_ref().is_none_or(|(b, _)| (spread, score) < *b) {
                    best = Some(((spread, score), parts));
                }
            }
            match best {
                Some(((spread, _), parts)) if spread <= group => {
                    return Some(Self::assemble(&per_node, &parts));
                }
                Some((_, parts)) if uneven.is_none() => uneven = Some(parts),
                _ => {}
            }
        }
        uneven.map(|parts| Self::assemble(&per_node, &parts))
    }

    /// The union of the planned shares `parts` (node, CPUs).
    fn assemble(per_node: &NodePlans, parts: &[(usize, usize)]) -> CpuSet {
        let mut out = CpuSet::new();
        for key in parts {
            if let Some(Some((cpus, _))) = per_node.get(key) {
                out.union_with(cpus);
            }
        }
        out
    }
}

/// Shares of `total` groups over nodes that hold `caps` groups each (in the
/// order the remainder should go), as the kubelet's distributed allocator
/// qualifies them: each node takes `total / k` (its `distribution`), and `None`
/// when a node cannot or the nodes together cannot hold `total`. The remainder
/// is water-filled: the lowest level `t` of extra groups per node that holds it,
/// every node filled to `t - 1` (or its room), and the last groups one each to
/// the first nodes with room for `t`. That makes the largest share as small as
/// it can be; the smallest is the distribution either way (the remainder is
/// fewer than `k` groups).
fn distribution_shares(caps: &[usize], total: usize) -> Option<Vec<usize>> {
    let k = caps.len();
    if k == 0 {
        return None;
    }
    let base = total / k;
    if caps.iter().any(|&c| c < base) {
        return None;
    }
    let room: Vec<usize> = caps.iter().map(|&c| c - base).collect();
    let extra = total - base * k;
    if room.iter().sum::<usize>() < extra {
        return None;
    }
    let filled = |t: usize| room.iter().map(|&r| r.min(t)).sum::<usize>();
    // Terminates: filled(max room) is the whole room, which holds `extra`.
    let mut t = 0;
    while filled(t) < extra {
        t += 1;
    }
    let below = t.saturating_sub(1);
    let mut left = extra - filled(below);
    let shares = room
        .iter()
        .map(|&r| {
            let one = usize::from(left > 0 && r >= t);
            left -= one;
            base + r.min(below) + one
        })
        .collect();
    Some(shares)
}

/// Positions of `weights` sorted by descending weight (ties by position).
fn descending(weights: &[usize]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..weights.len()).collect();
    order.sort_by_key(|&i| (Reverse(weights[i]), i));
    order
}

/// The fewest of `weights` that sum to at least `need`; `None` if all fall short.
fn min_subset_size(weights: &[usize], need: usize) -> Option<usize> {
    let mut total = 0;
    descending(weights)
        .iter()
        .position(|&i| {
            total += weights[i];
            total >= need
        })
        .map(|p| p + 1)
}

/// Calls `f` with every subset of the smallest size whose weights sum to at
/// least `need`. See [`for_each_subset`].
fn for_each_min_subset(
    weights: &[usize],
    need: usize,
    budget: &mut usize,
    f: impl FnMut(&[usize]),
) {
    if let Some(k) = min_subset_size(weights, need) {
        for_each_subset(weights, k, need, budget, f);
    }
}

/// Calls `f` with every `k`-subset (as positions into `weights`) whose weights
/// sum to at least `need`, largest weights first, while `budget` lasts (one unit
/// a subset). The first subset visited is the greedy one.
fn for_each_subset(
    weights: &[usize],
    k: usize,
    need: usize,
    budget: &mut usize,
    mut f: impl FnMut(&[usize]),
) {
    if k == 0 || k > weights.len() {
        return;
    }
    let order = descending(weights);
    let sorted: Vec<usize> = order.iter().map(|&i| weights[i]).collect();
    let mut chosen: Vec<usize> = Vec::with_capacity(k);
    let mut original: Vec<usize> = Vec::with_capacity(k);
    subsets(
        &sorted,
        k,
        need,
        0,
        0,
        &mut chosen,
        budget,
        &mut |positions| {
            original.clear();
            original.extend(positions.iter().map(|&p| order[p]));
            f(&original);
        },
    );
}

#[allow(clippy::too_many_arguments)]
fn subsets(
    sorted: &[usize],
    k: usize,
    need: usize,
    start: usize,
    sum: usize,
    chosen: &mut Vec<usize>,
    budget: &mut usize,
    f: &mut impl FnMut(&[usize]),
) {
    if chosen.len() == k {
        if sum >= need && *budget > 0 {
            *budget -= 1;
            f(chosen);
        }
        return;
    }
    let left = k - chosen.len();
    for i in start..=sorted.len().saturating_sub(left) {
        if *budget == 0 {
            return;
        }
        // `sorted` is descending: the best this branch can reach is the next
        // `left` weights from `i`; if that falls short, so does every later `i`.
        let reach: usize = sorted[i..i + left].iter().sum();
        if sum + reach < need {
            return;
        }
        chosen.push(i);
        subsets(sorted, k, need, i + 1, sum + sorted[i], chosen, budget, f);
        chosen.pop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::synthetic::Shape;

    fn set(s: &str) -> CpuSet {
        s.parse().unwrap()
    }

    /// 2 sockets × 1 NUMA node × 1 L3 × 4 cores × 2 threads: CPUs 0-7 are first
    /// threads, core c is {c, c+8}; socket 0 holds cores 0-3.
    fn two_socket() -> Topology {
        Shape {
            sockets: 2,
            numa_per_socket: 1,
            l3_per_numa: 1,
            cores_per_l3: 4,
            threads_per_core: 2,
        }
        .build()
    }

    fn alloc(t: &Topology, free: &CpuSet, n: usize) -> CpuSet {
        allocate(t, free, n, &Options::default()).unwrap()
    }

    #[test]
    fn a_request_that_fits_one_numa_node_lands_in_one() {
        let t = two_socket();
        let got = alloc(&t, t.online(), 6);
        assert_eq!(got.len(), 6);
        assert_eq!(t.numa_of(&got).len(), 1, "{got}");
        assert_eq!(Alignment::of(&t, &got).shared_cores, 0);
    }

    #[test]
    fn whole_cores_when_possible() {
        let t = two_socket();
        let got = alloc(&t, t.online(), 4);
        assert_eq!(got, set("0-1,8-9"));
    }

    #[test]
    fn a_lone_thread_of_a_half_used_core_before_breaking_a_fresh_core() {
        let t = two_socket();
        // CPU 8 (sibling of 0) is taken by someone else: core 0 is half used.
        let free = t.online().difference(&set("8"));
        let got = alloc(&t, &free, 3);
        // One whole core plus the lone thread 0, not a broken fresh core.
        assert!(got.contains(0), "{got}");
        assert_eq!(Alignment::of(&t, &got).whole_cores, 1, "{got}");
    }

    #[test]
    fn best_fit_beats_first_fit() {
        let t = two_socket();
        // Socket 0 has 4 CPUs left (cores 2 and 3), socket 1 is empty of work.
        let free = set("2-3,10-11,4-7,12-15");
        let got = alloc(&t, &free, 4);
        assert_eq!(got, set("2-3,10-11"), "the fuller socket is used");
        // The whole socket 1 stays free for a later 8-CPU request.
        let rest = free.difference(&got);
        assert_eq!(t.numa_of(&alloc(&t, &rest, 8)).len(), 1);
    }

    #[test]
    fn does_not_span_numa_nodes_where_the_kubelet_does() {
        // The kubelet fills the most-used NUMA node first: with node 0 holding 6
        // free CPUs and node 1 all 8, a 7-CPU request spans both under the
        // kubelet. Node 1 alone holds it.
        let t = two_socket();
        let free = t.online().difference(&set("0,8"));
        let got = alloc(&t, &free, 7);
        assert_eq!(t.numa_of(&got), vec![1], "{got}");
    }

    #[test]
    fn a_request_of_a_whole_node_or_more_gets_whole_nodes() {
        let t = Shape {
            sockets: 2,
            numa_per_socket: 2,
            l3_per_numa: 1,
            cores_per_l3: 4,
            threads_per_core: 2,
        }
        .build();
        // Node 0 is partly used; a node's worth (8) must come as one whole node.
        let free = t.online().difference(&set("0"));
        let got = alloc(&t, &free, 8);
        let nodes = t.numa_of(&got);
        assert_eq!(nodes.len(), 1);
        assert_eq!(&got, &t.numa_nodes()[&nodes[0]]);
        // A socket's worth (16) comes as one whole socket.
        let got = alloc(&t, &free, 16);
        assert_eq!(t.sockets_of(&got), vec![1]);
        // 1.5 nodes: two nodes of one socket, one of them whole.
        let got = alloc(&t, t.online(), 12);
        assert_eq!(t.sockets_of(&got).len(), 1);
        assert_eq!(t.numa_of(&got).len(), 2);
    }

    #[test]
    fn fewest_l3_groups_within_a_node() {
        let t = Shape {
            sockets: 1,
            numa_per_socket: 1,
            l3_per_numa: 2,
            cores_per_l3: 4,
            threads_per_core: 2,
        }
        .build();
        // L3 0 (cores 0-3) has 2 cores used; a 4-CPU request fits L3 0 exactly.
        let free = t.online().difference(&set("0-1,8-9"));
        let got = alloc(&t, &free, 4);
        assert_eq!(t.l3_of(&got), vec![0], "best fit in the fuller L3: {got}");
        let got = alloc(&t, &free, 6);
        assert_eq!(t.l3_of(&got), vec![1], "only L3 1 holds 6: {got}");
    }

    #[test]
    fn smt4_remainder_breaks_one_fresh_core_rather_than_sharing_two() {
        // Found by comparing with the kubelet: 4 threads per core, core c is
        // {c, c+4, c+8, c+12}. Core 1 is free; cores 2 and 3 have 2 free threads
        // each. Three CPUs on one core (shared with nobody yet) beat three CPUs
        // spread over two cores already shared with other workloads.
        let t = Shape {
            sockets: 1,
            numa_per_socket: 2,
            l3_per_numa: 1,
            cores_per_l3: 2,
            threads_per_core: 4,
        }
        .build();
        let got = alloc(&t, &set("1,3,5,9-11,13-14"), 3);
        assert_eq!(got, set("1,5,9"));
        assert_eq!(Alignment::of(&t, &got).shared_cores, 1);
    }

    #[test]
    fn reserved_cpus_are_never_handed_out() {
        let t = two_socket();
        let opts = Options {
            reserved: t.lowest_cores(2),
            ..Options::default()
        };
        assert_eq!(opts.reserved, set("0,8"));
        let got = allocate(&t, t.online(), 14, &opts).unwrap();
        assert!(got.is_disjoint(&opts.reserved));
        let e = allocate(&t, t.online(), 15, &opts).unwrap_err();
        assert_eq!(e.to_string(), "not enough CPUs: requested 15, available 14");
    }

    #[test]
    fn full_physical_cores_only() {
        let t = two_socket();
        let opts = Options {
            full_pcpus_only: true,
            ..Options::default()
        };
        let e = allocate(&t, t.online(), 3, &opts).unwrap_err();
        assert_eq!(
            e,
            AllocError::SmtAlignment {
                requested: 3,
                threads_per_core: 2
            }
        );
        assert!(
            e.to_string()
                .contains("not a multiple of 2 threads per core")
        );
        // Half-used cores do not count: 7 free CPUs, but only 6 on whole cores.
        let free = set("1-3,9-11,12");
        let got = allocate(&t, &free, 6, &opts).unwrap();
        assert_eq!(got, set("1-3,9-11"));
        let e = allocate(&t, &free, 8, &opts).unwrap_err();
        assert_eq!(
            e,
            AllocError::NotEnoughWholeCores {
                requested: 8,
                available: 6
            }
        );
    }

    #[test]
    fn spread_takes_one_thread_per_core_first() {
        let t = two_socket();
        let opts = Options {
            spread_cores: true,
            ..Options::default()
        };
        let got = allocate(&t, t.online(), 4, &opts).unwrap();
        assert_eq!(got, set("0-3"), "one thread on each of socket 0's cores");
        let got = allocate(&t, t.online(), 6, &opts).unwrap();
        assert_eq!(t.numa_of(&got).len(), 1);
        assert_eq!(Alignment::of(&t, &got).whole_cores, 2);
        let both = Options {
            spread_cores: true,
            full_pcpus_only: true,
            ..Options::default()
        };
        assert!(matches!(
            allocate(&t, t.online(), 4, &both),
            Err(AllocError::ConflictingOptions(_))
        ));
    }

    #[test]
    fn distribute_splits_evenly_across_the_fewest_nodes() {
        let t = Shape {
            sockets: 2,
            numa_per_socket: 2,
            l3_per_numa: 1,
            cores_per_l3: 4,
            threads_per_core: 2,
        }
        .build();
        let opts = Options {
            distribute_across_numa: true,
            ..Options::default()
        };
        let got = allocate(&t, t.online(), 12, &opts).unwrap();
        let nodes = t.numa_of(&got);
        assert_eq!(nodes.len(), 2);
        for n in nodes {
            assert_eq!(got.intersection(&t.numa_nodes()[&n]).len(), 6);
        }
        assert_eq!(t.sockets_of(&got).len(), 1, "the two nodes share a socket");
        // In whole-core groups: 12 CPUs over 2 nodes is 3 cores each.
        let whole = Options {
            full_pcpus_only: true,
            ..opts.clone()
        };
        let got = allocate(&t, t.online(), 12, &whole).unwrap();
        assert_eq!(Alignment::of(&t, &got).shared_cores, 0);
        // A request that fits one node stays in one.
        let got = allocate(&t, t.online(), 6, &opts).unwrap();
        assert_eq!(t.numa_of(&got).len(), 1);
    }

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
                            if !round_robin(&mut after, &mut BTreeMap::new(), subset, remainder, g)
                            {
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

    #[test]
    fn numa_preference_is_drawn_from_first() {
        let t = Shape {
            sockets: 2,
            numa_per_socket: 2,
            l3_per_numa: 1,
            cores_per_l3: 4,
            threads_per_core: 2,
        }
        .build();
        let prefer = |nodes: Vec<u32>, align_by_socket| Options {
            numa_preference: nodes,
            align_by_socket,
            ..Options::default()
        };
        let got = allocate(&t, t.online(), 4, &prefer(vec![3], false)).unwrap();
        assert_eq!(t.numa_of(&got), vec![3]);
        // Node 3 cannot hold 10: all of it, and the rest elsewhere.
        let got = allocate(&t, t.online(), 10, &prefer(vec![3], false)).unwrap();
        assert!(t.numa_nodes()[&3].is_subset(&got));
        // Widened to the socket, the rest comes from node 2 on the same socket.
        let got = allocate(&t, t.online(), 10, &prefer(vec![3], true)).unwrap();
        assert_eq!(t.sockets_of(&got), vec![1]);
        assert_eq!(
            allocate(&t, t.online(), 1, &prefer(vec![9], false)).unwrap_err(),
            AllocError::UnknownNumaNode(9)
        );
    }

    #[test]
    fn errors_name_requested_and_available() {
        let t = two_socket();
        assert_eq!(
            allocate(&t, t.online(), 0, &Options::default()),
            Err(AllocError::ZeroRequest)
        );
        assert_eq!(
            allocate(&t, &set("0-3"), 5, &Options::default()),
            Err(AllocError::NotEnough {
                requested: 5,
                available: 4
            })
        );
        // CPUs outside the topology are not available.
        assert_eq!(
            allocate(&t, &set("100-200"), 1, &Options::default()),
            Err(AllocError::NotEnough {
                requested: 1,
                available: 0
            })
        );
    }

    #[test]
    fn hybrid_cores_of_different_sizes() {
        use crate::topology::CpuInfo;
        // Two 2-thread P-cores (0-3) and four 1-thread E-cores (4-7).
        let mut cpus = Vec::new();
        for cpu in 0..8u32 {
            let core = if cpu < 4 { cpu / 2 } else { cpu - 2 };
            cpus.push(CpuInfo {
                cpu,
                core,
                socket: 0,
                numa: 0,
                l3: Some(0),
                die: None,
            });
        }
        let t = Topology::new(cpus, CpuSet::new(), CpuSet::new()).unwrap();
        let got = alloc(&t, t.online(), 3);
        assert_eq!(Alignment::of(&t, &got).shared_cores, 0, "{got}");
        let got = alloc(&t, t.online(), 7);
        assert_eq!(Alignment::of(&t, &got).shared_cores, 0, "{got}");
        let whole = Options {
            full_pcpus_only: true,
            ..Options::default()
        };
        assert_eq!(allocate(&t, t.online(), 4, &whole).unwrap().len(), 4);
    }
}
