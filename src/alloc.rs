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
    /// Split evenly across the fewest NUMA nodes that can hold an even split
    /// (kubelet `distribute-cpus-across-numa`).
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

    /// Splits `n` evenly across the fewest NUMA nodes that can hold an even split,
    /// in groups of a whole core when whole cores are required. `None` when no
    /// even split fits; the caller then packs.
    fn distributed(&mut self, n: usize) -> Option<CpuSet> {
        let group = if self.mode == Mode::WholeOnly {
            self.topo.threads_per_core()
        } else {
            1
        };
        let groups = n / group;
        let free: Vec<usize> = self.nodes.iter().map(|node| node.free).collect();
        let first = min_subset_size(&free, n)?;
        // Each node is planned for at most two share sizes: remember them, with
        // where they sit (nodes are disjoint, so alignments combine).
        let mut per_node: BTreeMap<(usize, usize), Option<(CpuSet, Alignment)>> = BTreeMap::new();
        let mut budget = SEARCH_BUDGET;
        for k in first..=free.len().min(groups) {
            let mut sets: Vec<Vec<usize>> = Vec::new();
            for_each_subset(&free, k, n, &mut budget, |s| sets.push(s.to_vec()));
            let mut best: Option<(Score, Vec<(usize, usize)>)> = None;
            for mut set in sets {
                // The nodes with the most free CPUs take the groups that do not
                // divide evenly.
                set.sort_by_key(|&i| (Reverse(free[i]), self.nodes[i].id));
                let mut parts = Vec::with_capacity(k);
                let (mut sockets, mut l3, mut shared) = (Vec::new(), Vec::new(), 0);
                for (j, &i) in set.iter().enumerate() {
                    let share = (groups / k + usize::from(j < groups % k)) * group;
                    if share > free[i] {
                        break;
                    }
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
                let left = set.iter().map(|&i| free[i]).sum::<usize>() - n;
                let score = Score {
                    numa: k,
                    sockets: sockets.len(),
                    l3: l3.len(),
                    slices: 0,
                    cores: (shared, 0),
                    fit: (left, 0, 0),
                };
                if best.as_ref().is_none_or(|(b, _)| score < *b) {
                    best = Some((score, parts));
                }
            }
            if let Some((_, parts)) = best {
                let mut out = CpuSet::new();
                for key in parts {
                    if let Some(Some((cpus, _))) = per_node.get(&key) {
                        out.union_with(cpus);
                    }
                }
                return Some(out);
            }
        }
        None
    }
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
