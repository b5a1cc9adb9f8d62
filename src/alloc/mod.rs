//! The allocator: which CPUs a workload that asks for N exclusive CPUs gets.
//!
//! [`allocate`] is pure and deterministic: topology, free CPUs, request and
//! options in, a CPU set or a typed error out. It does no I/O and never panics.
//!
//! Quality, in order:
//! 1. The fewest NUMA nodes that can hold the request now, then the fewest
//!    sockets, then the fewest L3 groups.
//! 2. Whole physical cores; a remainder smaller than a core takes the lone
//!    thread of a half-used core before breaking a fresh one.
//! 3. Best fit: the most-occupied domain that still fits, so large free
//!    blocks stay whole for later large requests.
//!
//! The search is `Planner::packed`; `distribute_across_numa` first splits
//! the request over nodes (`distribute.rs`).

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
    /// CPUs to draw from before any other, the NUMA preference included:
    /// those the workload's pod gave back (an init container's). Taken in
    /// whole cores with `full_pcpus_only`.
    pub prefer: CpuSet,
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

    if !opts.prefer.is_empty() {
        let mut inside = avail.intersection(&opts.prefer);
        if opts.full_pcpus_only {
            inside = whole_cores_of(topo, &inside);
        }
        if !inside.is_empty() {
            let rest = Options {
                prefer: CpuSet::new(),
                ..opts.clone()
            };
            if inside.len() >= n {
                return allocate(topo, &inside, n, &rest);
            }
            let more = allocate(topo, &avail.difference(&inside), n - inside.len(), &rest)?;
            return Ok(inside.union(&more));
        }
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
    ///
    /// The smallest domain above a core is a *slice*: the cores sharing a
    /// socket, a NUMA node and an L3 group. The search:
    /// - every set of the fewest NUMA nodes that holds `n` (bounded, largest
    ///   nodes first), keeping those on the fewest sockets;
    /// - within those, every slice set of the smallest size that holds `n`;
    /// - each scored on counts by [`Counts::penalty`] (rule 2) and the free
    ///   CPUs left in the nodes, sockets and slices it touches (rule 3);
    /// - the best one materialised by [`Self::pick`], so score and result
    ///   cannot disagree.
    ///
    /// The picker drains slices largest first, so a remainder lands in the
    /// most-occupied slice of the set ("all but the last" fill).
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
}

mod distribute;

use distribute::for_each_min_subset;
#[cfg(test)]
mod tests;
