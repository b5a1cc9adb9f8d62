//! `distribute_across_numa`: how many CPUs each NUMA node gives, as the
//! kubelet's `takeByTopologyNUMADistributed` decides (never less evenly); and
//! the bounded search over sets of NUMA nodes that it and the packed planner
//! of [`super`] share. Each node's share is then planned by the packed planner.

use super::*;

impl Planner<'_> {
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
    pub(super) fn distributed(&mut self, n: usize) -> Option<CpuSet> {
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
pub(super) fn distribution_shares(caps: &[usize], total: usize) -> Option<Vec<usize>> {
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
pub(super) fn for_each_min_subset(
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
