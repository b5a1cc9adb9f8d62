//! A model of the Kubernetes kubelet static CPU manager's packed allocator,
//! `takeByTopologyNUMAPacked` in `pkg/kubelet/cm/cpumanager/cpu_assignment.go`,
//! on a `pinctl::Topology`.
//!
//! It models the default configuration: no uncore-cache alignment (the kubelet's
//! `NumUnCoreCaches` is 0 unless `prefer-align-cpus-by-uncorecache` is set), so
//! L3 groups play no part. Everything the kubelet derives from its `CPUDetails`
//! is derived here from the free set ("details") and the topology:
//!
//! - `CPUsPerCore` = CPUs / cores, `CPUsPerSocket` = CPUs / sockets;
//! - a NUMA node is free when all its CPUs are free, a socket or core when its
//!   free count equals `CPUsPerSocket` / `CPUsPerCore`;
//! - `sort(ids)`: ascending by free CPUs, ties by id, only ids with a free CPU;
//! - "numaFirst" when sockets >= NUMA nodes, "socketsFirst" otherwise;
//! - each `takeFullX` step computes its (sorted, free) list once, then takes
//!   every X that still fits in what is needed; `takeRemainingCPUs` takes single
//!   CPUs, core by core in `sortAvailableCores` order, each core's ascending.

use std::collections::{BTreeMap, BTreeSet};

use pinctl::{CpuSet, Topology};

/// `takeByTopologyNUMAPacked(topo, free, n)`.
pub fn take_by_topology_numa_packed(
    topo: &Topology,
    free: &CpuSet,
    n: usize,
) -> Result<CpuSet, String> {
    let mut acc = Acc::new(topo, free, n);
    if acc.is_satisfied() {
        return Ok(acc.result);
    }
    if acc.needed > acc.details.len() {
        return Err(format!(
            "not enough cpus available to satisfy request: requested={n}, available={}",
            acc.details.len()
        ));
    }
    if acc.numa_first {
        acc.take_full_numa_nodes();
    } else {
        acc.take_full_sockets();
    }
    if acc.is_satisfied() {
        return Ok(acc.result);
    }
    if acc.numa_first {
        acc.take_full_sockets();
    } else {
        acc.take_full_numa_nodes();
    }
    if acc.is_satisfied() {
        return Ok(acc.result);
    }
    acc.take_full_cores();
    if acc.is_satisfied() {
        return Ok(acc.result);
    }
    acc.take_remaining_cpus();
    if acc.is_satisfied() {
        return Ok(acc.result);
    }
    Err("failed to allocate cpus".to_string())
}

/// Which domain a CPU belongs to.
#[derive(Clone, Copy)]
enum Level {
    Numa,
    Socket,
    Core,
}

struct Acc<'t> {
    topo: &'t Topology,
    /// The free CPUs not yet taken (the kubelet's `details`).
    details: CpuSet,
    result: CpuSet,
    needed: usize,
    numa_first: bool,
    cpus_per_core: usize,
    cpus_per_socket: usize,
    /// Topology CPUs of each core, by core id.
    core_cpus: BTreeMap<u32, CpuSet>,
}

impl<'t> Acc<'t> {
    fn new(topo: &'t Topology, free: &CpuSet, n: usize) -> Self {
        let total = topo.online().len();
        let core_cpus: BTreeMap<u32, CpuSet> = topo
            .cores()
            .iter()
            .map(|c| (c.id, c.cpus.iter().copied().collect()))
            .collect();
        Acc {
            topo,
            details: free.intersection(topo.online()),
            result: CpuSet::new(),
            needed: n,
            numa_first: topo.sockets().len() >= topo.numa_nodes().len(),
            cpus_per_core: total / core_cpus.len(),
            cpus_per_socket: total / topo.sockets().len(),
            core_cpus,
        }
    }

    fn is_satisfied(&self) -> bool {
        self.needed < 1
    }

    fn needs_at_least(&self, n: usize) -> bool {
        self.needed >= n
    }

    fn take(&mut self, cpus: &CpuSet) {
        self.result.union_with(cpus);
        self.details.difference_with(cpus);
        self.needed -= cpus.len();
    }

    fn key(&self, cpu: u32, level: Level) -> u32 {
        let info = self.topo.cpu(cpu).expect("details holds only online CPUs");
        match level {
            Level::Numa => info.numa,
            Level::Socket => info.socket,
            Level::Core => info.core,
        }
    }

    /// Topology CPUs of one domain.
    fn domain(&self, level: Level, id: u32) -> &CpuSet {
        match level {
            Level::Numa => &self.topo.numa_nodes()[&id],
            Level::Socket => &self.topo.sockets()[&id],
            Level::Core => &self.core_cpus[&id],
        }
    }

    fn free_in(&self, level: Level, id: u32) -> usize {
        self.details.intersection(self.domain(level, id)).len()
    }

    /// Ids at `level` that hold a free CPU within `within` (e.g. the NUMA nodes
    /// of a socket: `details.NUMANodesInSockets(s)`), ascending.
    fn ids(&self, level: Level, within: Option<(Level, u32)>) -> Vec<u32> {
        let ids: BTreeSet<u32> = self
            .details
            .iter()
            .filter(|&cpu| within.is_none_or(|(l, id)| self.key(cpu, l) == id))
            .map(|cpu| self.key(cpu, level))
            .collect();
        ids.into_iter().collect()
    }

    /// The kubelet's `sort`: ascending by free CPUs, ties by id.
    fn sort(&self, ids: &mut [u32], level: Level) {
        ids.sort_by_cached_key(|&id| (self.free_in(level, id), id));
    }

    fn sorted(&self, level: Level, within: Option<(Level, u32)>) -> Vec<u32> {
        let mut ids = self.ids(level, within);
        self.sort(&mut ids, level);
        ids
    }

    fn sort_available_numa_nodes(&self) -> Vec<u32> {
        if self.numa_first {
            self.sorted(Level::Numa, None)
        } else {
            self.sort_available_sockets()
                .into_iter()
                .flat_map(|s| self.sorted(Level::Numa, Some((Level::Socket, s))))
                .collect()
        }
    }

    fn sort_available_sockets(&self) -> Vec<u32> {
        if self.numa_first {
            self.sort_available_numa_nodes()
                .into_iter()
                .flat_map(|n| self.sorted(Level::Socket, Some((Level::Numa, n))))
                .collect()
        } else {
            self.sorted(Level::Socket, None)
        }
    }

    fn sort_available_cores(&self) -> Vec<u32> {
        if self.numa_first {
            self.sort_available_sockets()
                .into_iter()
                .flat_map(|s| self.sorted(Level::Core, Some((Level::Socket, s))))
                .collect()
        } else {
            self.sort_available_numa_nodes()
                .into_iter()
                .flat_map(|n| self.sorted(Level::Core, Some((Level::Numa, n))))
                .collect()
        }
    }

    /// Takes every domain of `list` whose CPU count still fits the need.
    fn take_full(&mut self, level: Level, list: Vec<u32>) {
        for id in list {
            let cpus = self.domain(level, id).clone();
            if !self.needs_at_least(cpus.len()) {
                continue;
            }
            self.take(&cpus);
        }
    }

    fn take_full_numa_nodes(&mut self) {
        let free: Vec<u32> = self
            .sort_available_numa_nodes()
            .into_iter()
            .filter(|&n| self.free_in(Level::Numa, n) == self.domain(Level::Numa, n).len())
            .collect();
        self.take_full(Level::Numa, free);
    }

    fn take_full_sockets(&mut self) {
        let free: Vec<u32> = self
            .sort_available_sockets()
            .into_iter()
            .filter(|&s| self.free_in(Level::Socket, s) == self.cpus_per_socket)
            .collect();
        self.take_full(Level::Socket, free);
    }

    fn take_full_cores(&mut self) {
        let free: Vec<u32> = self
            .sort_available_cores()
            .into_iter()
            .filter(|&c| self.free_in(Level::Core, c) == self.cpus_per_core)
            .collect();
        self.take_full(Level::Core, free);
    }

    fn take_remaining_cpus(&mut self) {
        let cpus: Vec<u32> = self
            .sort_available_cores()
            .into_iter()
            .flat_map(|c| {
                self.details
                    .intersection(self.domain(Level::Core, c))
                    .iter()
                    .collect::<Vec<u32>>()
            })
            .collect();
        for cpu in cpus {
            self.take(&std::iter::once(cpu).collect());
            if self.is_satisfied() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pinctl::topology::synthetic::Shape;

    fn set(s: &str) -> CpuSet {
        s.parse().unwrap()
    }

    /// numaFirst: 2 sockets × 1 node × 4 cores × 2 threads; core c is {c, c+8}.
    /// Node 0 has 6 free CPUs (core 0 is busy), node 1 all 8; 7 CPUs.
    ///
    /// Node 1 is free but 7 < 8, and so is socket 1: no whole node or socket.
    /// Whole cores in order node 0 (6 free) then node 1: cores 1, 2, 3 of node 0
    /// (need 7 → 1), core 4 no longer fits. The last CPU: node 0 is now empty, so
    /// the first free CPU of node 1's first core (4, of core 4 {4, 12}).
    #[test]
    fn numa_first_fills_the_busier_node_and_spills_over() {
        let t = Shape {
            sockets: 2,
            numa_per_socket: 1,
            l3_per_numa: 1,
            cores_per_l3: 4,
            threads_per_core: 2,
        }
        .build();
        let free = t.online().difference(&set("0,8"));
        let got = take_by_topology_numa_packed(&t, &free, 7).unwrap();
        assert_eq!(got, set("1-4,9-11"));
        assert_eq!(t.numa_of(&got), vec![0, 1], "the kubelet spans both nodes");
    }

    /// socketsFirst: 1 socket × 2 nodes × 2 cores × 2 threads; core c is
    /// {c, c+4}, node 0 = cores 0-1 = {0,1,4,5}, node 1 = {2,3,6,7}. CPU 0 busy;
    /// 5 CPUs.
    ///
    /// Socket 0 is not free (7 of 8). Nodes in order node 0 (3 free), node 1 (4):
    /// node 1 is free and 5 >= 4, so take it (need 1). Whole cores: core 1 is
    /// free but 1 < 2. Remaining CPUs, cores by free count: core 0 ({4}, 1 free)
    /// before core 1: CPU 4, the lone thread of the half-used core.
    #[test]
    fn sockets_first_takes_a_whole_node_then_the_lone_thread() {
        let t = Shape {
            sockets: 1,
            numa_per_socket: 2,
            l3_per_numa: 1,
            cores_per_l3: 2,
            threads_per_core: 2,
        }
        .build();
        let free = t.online().difference(&set("0"));
        let got = take_by_topology_numa_packed(&t, &free, 5).unwrap();
        assert_eq!(got, set("2-4,6-7"));
    }

    /// Whole domains are taken only when the request holds all of them, and the
    /// list is walked past the ones that do not fit.
    #[test]
    fn whole_domains_and_errors() {
        let t = Shape {
            sockets: 2,
            numa_per_socket: 2,
            l3_per_numa: 1,
            cores_per_l3: 2,
            threads_per_core: 2,
        }
        .build();
        // 16 CPUs, core c = {c, c+8}, node k = cores 2k, 2k+1, socket s = nodes
        // 2s, 2s+1. All free, 8 CPUs: socket 0 is a whole socket (sorted by id).
        let got = take_by_topology_numa_packed(&t, t.online(), 8).unwrap();
        assert_eq!(got, t.sockets()[&0]);
        // Socket 0 has one CPU busy: socket 1 is taken whole.
        let free = t.online().difference(&set("0"));
        let got = take_by_topology_numa_packed(&t, &free, 8).unwrap();
        assert_eq!(got, t.sockets()[&1]);
        // 6 CPUs with CPU 0 busy (socketsFirst: 2 sockets < 4 nodes). Socket 1
        // is free but 6 < 8. Nodes in order 0 (3 free), 1, 2, 3 (4 each): node 1
        // is the first free one, take it (need 2); nodes 2 and 3 no longer fit.
        // Whole cores: node 0's first (socket 0 now has fewer free CPUs), core 0
        // is half busy, core 1 {1, 9} is whole and fits.
        let got = take_by_topology_numa_packed(&t, &free, 6).unwrap();
        assert_eq!(got, set("1-3,9-11"));
        assert!(take_by_topology_numa_packed(&t, &free, 16).is_err());
        assert_eq!(
            take_by_topology_numa_packed(&t, &free, 0).unwrap(),
            CpuSet::new()
        );
    }
}
