//! The CPU topology model: which CPU sits on which physical core, L3 group, NUMA
//! node and socket.
//!
//! This module is pure: it builds and validates a [`Topology`] from plain values,
//! derives the indices the allocator needs, and reads and writes the documented
//! JSON topology file. It never touches sysfs: discovery lives in [`crate::sysfs`].
//!
//! Invariant: a validated topology has at least one CPU, no CPU twice, and every
//! physical core lies within one socket, one NUMA node and one L3 group. The
//! allocator relies on that nesting.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;

use serde::{Deserialize, Serialize};

use crate::cpuset::{CpuSet, MAX_CPU};

/// The most SMT threads one physical core may have. POWER8 and later have 8;
/// nothing has more.
pub const MAX_THREADS: usize = 8;

/// One online logical CPU and where it sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CpuInfo {
    /// The logical CPU number, as in `cpuset.cpus`.
    pub cpu: u32,
    /// The machine-wide physical core. sysfs `core_id` repeats across sockets;
    /// this does not.
    pub core: u32,
    /// The physical package (socket).
    pub socket: u32,
    /// The NUMA node.
    pub numa: u32,
    /// The L3 cache group, when the machine reports one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l3: Option<u32>,
    /// The die within the package, when the kernel reports one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub die: Option<u32>,
}

/// Why a set of CPU descriptions is not a usable topology.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopologyError {
    #[error("the topology has no CPUs")]
    Empty,
    #[error("CPU {0} is listed twice")]
    DuplicateCpu(u32),
    #[error("CPU {cpu} is above the supported maximum {max}", max = MAX_CPU)]
    CpuTooLarge { cpu: u32 },
    #[error("physical core {core} has {threads} threads; at most {max} are supported", max = MAX_THREADS)]
    TooManyThreads { core: u32, threads: usize },
    #[error("physical core {core} spans {what} {a} and {b} (CPUs {cpu_a} and {cpu_b})")]
    CoreSpans {
        core: u32,
        what: &'static str,
        a: String,
        b: String,
        cpu_a: u32,
        cpu_b: u32,
    },
}

/// A physical core: the SMT threads that share one execution unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Core {
    /// Machine-wide core id, as in [`CpuInfo::core`].
    pub id: u32,
    /// Its online threads, ascending.
    pub cpus: Vec<u32>,
    pub socket: u32,
    pub numa: u32,
    pub l3: Option<u32>,
}

/// A slice: the cores that share one socket, NUMA node and L3 group. Slices are
/// the smallest domain the allocator reasons about above cores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slice {
    pub socket: u32,
    pub numa: u32,
    pub l3: Option<u32>,
    /// Indices into [`Topology::cores`], ascending by core id.
    pub cores: Vec<usize>,
    pub cpus: CpuSet,
}

/// A validated CPU topology with derived indices. Construct it with
/// [`Topology::new`]; it is immutable afterwards.
#[derive(Debug, Clone)]
pub struct Topology {
    cpus: Vec<CpuInfo>,
    online: CpuSet,
    isolated: CpuSet,
    offline: CpuSet,
    cores: Vec<Core>,
    /// Index into `cores` for each CPU number (`usize::MAX` when not online).
    core_of_cpu: Vec<usize>,
    slices: Vec<Slice>,
    numa_nodes: BTreeMap<u32, CpuSet>,
    sockets: BTreeMap<u32, CpuSet>,
    l3_groups: BTreeMap<u32, CpuSet>,
}

impl Topology {
    /// Validates `cpus` and derives the indices. `isolated` and `offline` are
    /// informational (from the kernel's `isolated` and `offline` lists).
    pub fn new(
        mut cpus: Vec<CpuInfo>,
        isolated: CpuSet,
        offline: CpuSet,
    ) -> Result<Self, TopologyError> {
        if cpus.is_empty() {
            return Err(TopologyError::Empty);
        }
        cpus.sort_by_key(|c| c.cpu);
        let mut online = CpuSet::new();
        for c in &cpus {
            if c.cpu > MAX_CPU {
                return Err(TopologyError::CpuTooLarge { cpu: c.cpu });
            }
            if !online.insert(c.cpu) {
                return Err(TopologyError::DuplicateCpu(c.cpu));
            }
        }

        // Group threads into cores and check that each core nests in one socket,
        // NUMA node and L3 group.
        let mut by_core: BTreeMap<u32, (CpuInfo, Vec<u32>)> = BTreeMap::new();
        for c in &cpus {
            match by_core.entry(c.core) {
                Entry::Vacant(v) => {
                    v.insert((*c, vec![c.cpu]));
                }
                Entry::Occupied(mut o) => {
                    let (first, threads) = o.get_mut();
                    let spans = |what, a: String, b: String| TopologyError::CoreSpans {
                        core: c.core,
                        what,
                        a,
                        b,
                        cpu_a: first.cpu,
                        cpu_b: c.cpu,
                    };
                    if first.socket != c.socket {
                        return Err(spans(
                            "sockets",
                            first.socket.to_string(),
                            c.socket.to_string(),
                        ));
                    }
                    if first.numa != c.numa {
                        return Err(spans(
                            "NUMA nodes",
                            first.numa.to_string(),
                            c.numa.to_string(),
                        ));
                    }
                    if first.l3 != c.l3 {
                        return Err(spans("L3 groups", opt(first.l3), opt(c.l3)));
                    }
                    threads.push(c.cpu);
                }
            }
        }
        if let Some((core, (_, threads))) = by_core.iter().find(|(_, (_, t))| t.len() > MAX_THREADS)
        {
            return Err(TopologyError::TooManyThreads {
                core: *core,
                threads: threads.len(),
            });
        }
        let cores: Vec<Core> = by_core
            .into_iter()
            .map(|(id, (info, cpus))| Core {
                id,
                cpus,
                socket: info.socket,
                numa: info.numa,
                l3: info.l3,
            })
            .collect();

        let max_cpu = online.last().unwrap_or(0) as usize;
        let mut core_of_cpu = vec![usize::MAX; max_cpu + 1];
        let mut slice_index: BTreeMap<(u32, u32, Option<u32>), usize> = BTreeMap::new();
        let mut slices: Vec<Slice> = Vec::new();
        let mut numa_nodes: BTreeMap<u32, CpuSet> = BTreeMap::new();
        let mut sockets: BTreeMap<u32, CpuSet> = BTreeMap::new();
        let mut l3_groups: BTreeMap<u32, CpuSet> = BTreeMap::new();
        for (i, core) in cores.iter().enumerate() {
            let key = (core.socket, core.numa, core.l3);
            let s = *slice_index.entry(key).or_insert_with(|| {
                slices.push(Slice {
                    socket: core.socket,
                    numa: core.numa,
                    l3: core.l3,
                    cores: Vec::new(),
                    cpus: CpuSet::new(),
                });
                slices.len() - 1
            });
            slices[s].cores.push(i);
            for &cpu in &core.cpus {
                core_of_cpu[cpu as usize] = i;
                slices[s].cpus.insert(cpu);
                numa_nodes.entry(core.numa).or_default().insert(cpu);
                sockets.entry(core.socket).or_default().insert(cpu);
                if let Some(l3) = core.l3 {
                    l3_groups.entry(l3).or_default().insert(cpu);
                }
            }
        }
        // Present slices in topology order, so ties resolve to low numbers.
        slices.sort_by_key(|s| (s.socket, s.numa, s.l3, s.cpus.first()));

        Ok(Topology {
            offline: offline.difference(&online),
            isolated: isolated.intersection(&online),
            cpus,
            online,
            cores,
            core_of_cpu,
            slices,
            numa_nodes,
            sockets,
            l3_groups,
        })
    }

    /// All online CPUs, ascending by number.
    pub fn cpus(&self) -> &[CpuInfo] {
        &self.cpus
    }

    pub fn cpu(&self, cpu: u32) -> Option<&CpuInfo> {
        self.cpus
            .binary_search_by_key(&cpu, |c| c.cpu)
            .ok()
            .map(|i| &self.cpus[i])
    }

    pub fn online(&self) -> &CpuSet {
        &self.online
    }

    /// CPUs the kernel keeps out of scheduler load balancing (`isolcpus`).
    pub fn isolated(&self) -> &CpuSet {
        &self.isolated
    }

    /// CPUs that exist but are offline. They have no topology.
    pub fn offline(&self) -> &CpuSet {
        &self.offline
    }

    /// Physical cores, ascending by id.
    pub fn cores(&self) -> &[Core] {
        &self.cores
    }

    /// The index into [`Self::cores`] of the core that holds `cpu`.
    pub fn core_index_of(&self, cpu: u32) -> Option<usize> {
        self.core_of_cpu
            .get(cpu as usize)
            .copied()
            .filter(|&i| i != usize::MAX)
    }

    pub fn slices(&self) -> &[Slice] {
        &self.slices
    }

    /// NUMA node id → its online CPUs.
    pub fn numa_nodes(&self) -> &BTreeMap<u32, CpuSet> {
        &self.numa_nodes
    }

    /// Socket id → its online CPUs.
    pub fn sockets(&self) -> &BTreeMap<u32, CpuSet> {
        &self.sockets
    }

    /// L3 group id → its online CPUs. Empty when the machine reports no L3.
    pub fn l3_groups(&self) -> &BTreeMap<u32, CpuSet> {
        &self.l3_groups
    }

    /// The largest number of online threads on one core (1 without SMT).
    pub fn threads_per_core(&self) -> usize {
        self.cores.iter().map(|c| c.cpus.len()).max().unwrap_or(1)
    }

    /// The smallest number of online threads on one core. Differs from
    /// [`Self::threads_per_core`] on hybrid parts and with offline siblings.
    pub fn min_threads_per_core(&self) -> usize {
        self.cores.iter().map(|c| c.cpus.len()).min().unwrap_or(1)
    }

    /// `count` CPUs taken from the lowest-numbered whole cores, all threads of a
    /// core before the next one: the kubelet's choice of reserved CPUs. A count
    /// above the number of online CPUs gives all of them.
    pub fn lowest_cores(&self, count: usize) -> CpuSet {
        let mut cores: Vec<&Core> = self.cores.iter().collect();
        cores.sort_by_key(|c| c.cpus.first().copied());
        cores
            .iter()
            .flat_map(|c| c.cpus.iter().copied())
            .take(count)
            .collect()
    }

    /// The online CPUs of NUMA nodes `nodes` (a node it lacks adds none).
    pub fn cpus_of_nodes(&self, nodes: &[u32]) -> CpuSet {
        nodes
            .iter()
            .filter_map(|n| self.numa_nodes.get(n))
            .fold(CpuSet::new(), |acc, c| acc.union(c))
    }

    /// The NUMA nodes that `cpus` touch.
    pub fn numa_of(&self, cpus: &CpuSet) -> Vec<u32> {
        distinct(cpus.iter().filter_map(|c| self.cpu(c)).map(|c| c.numa))
    }

    /// The sockets that `cpus` touch.
    pub fn sockets_of(&self, cpus: &CpuSet) -> Vec<u32> {
        distinct(cpus.iter().filter_map(|c| self.cpu(c)).map(|c| c.socket))
    }

    /// The L3 groups that `cpus` touch.
    pub fn l3_of(&self, cpus: &CpuSet) -> Vec<u32> {
        distinct(cpus.iter().filter_map(|c| self.cpu(c)).filter_map(|c| c.l3))
    }

    /// How `cpus` sit on physical cores: (whole cores, cores shared with CPUs
    /// outside the set).
    pub fn core_split(&self, cpus: &CpuSet) -> (usize, usize) {
        let mut touched: BTreeMap<usize, usize> = BTreeMap::new();
        for cpu in cpus {
            if let Some(i) = self.core_index_of(cpu) {
                *touched.entry(i).or_default() += 1;
            }
        }
        let whole = touched
            .iter()
            .filter(|&(&i, &n)| self.cores[i].cpus.len() == n)
            .count();
        (whole, touched.len() - whole)
    }

    /// The topology in the documented file format.
    pub fn to_file(&self) -> TopologyFile {
        TopologyFile {
            cpus: self.cpus.clone(),
            isolated: Some(self.isolated.clone()),
            offline: Some(self.offline.clone()),
        }
    }

    /// Builds a topology from the file format.
    pub fn from_file(file: TopologyFile) -> Result<Self, TopologyError> {
        Topology::new(
            file.cpus,
            file.isolated.unwrap_or_default(),
            file.offline.unwrap_or_default(),
        )
    }
}

fn opt(v: Option<u32>) -> String {
    v.map_or_else(|| "none".to_string(), |v| v.to_string())
}

fn distinct(it: impl Iterator<Item = u32>) -> Vec<u32> {
    let mut v: Vec<u32> = it.collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The JSON topology file written by `pinctl topology --json` and read by
/// `pinctl plan --topology FILE`:
///
/// ```json
/// {"cpus": [{"cpu": 0, "core": 0, "socket": 0, "numa": 0, "l3": 0}]}
/// ```
///
/// `l3`, `die`, `isolated` and `offline` are optional; any other field is an error,
/// so a misspelt key is reported rather than ignored.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopologyFile {
    pub cpus: Vec<CpuInfo>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolated: Option<CpuSet>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offline: Option<CpuSet>,
}

/// Builders for regular topologies, for tests, benchmarks and examples.
pub mod synthetic {
    use super::*;

    /// The shape of a regular machine. CPUs are numbered the way Linux numbers
    /// Intel and AMD servers: first threads of every core, then second threads.
    #[derive(Debug, Clone, Copy)]
    pub struct Shape {
        pub sockets: u32,
        pub numa_per_socket: u32,
        pub l3_per_numa: u32,
        pub cores_per_l3: u32,
        pub threads_per_core: u32,
    }

    impl Shape {
        pub fn cpus(&self) -> u32 {
            self.cores() * self.threads_per_core
        }

        pub fn cores(&self) -> u32 {
            self.sockets * self.numa_per_socket * self.l3_per_numa * self.cores_per_l3
        }

        pub fn build(&self) -> Topology {
            let cores = self.cores();
            let mut cpus = Vec::new();
            for thread in 0..self.threads_per_core {
                for core in 0..cores {
                    let l3 = core / self.cores_per_l3;
                    let numa = l3 / self.l3_per_numa;
                    let socket = numa / self.numa_per_socket;
                    cpus.push(CpuInfo {
                        cpu: thread * cores + core,
                        core,
                        socket,
                        numa,
                        l3: Some(l3),
                        die: None,
                    });
                }
            }
            Topology::new(cpus, CpuSet::new(), CpuSet::new())
                .unwrap_or_else(|e| unreachable!("a regular shape is a valid topology: {e}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::synthetic::Shape;
    use super::*;

    fn cpu(cpu: u32, core: u32, socket: u32, numa: u32, l3: Option<u32>) -> CpuInfo {
        CpuInfo {
            cpu,
            core,
            socket,
            numa,
            l3,
            die: None,
        }
    }

    #[test]
    fn derives_cores_slices_and_domains() {
        let t = Shape {
            sockets: 2,
            numa_per_socket: 2,
            l3_per_numa: 2,
            cores_per_l3: 2,
            threads_per_core: 2,
        }
        .build();
        assert_eq!(t.cpus().len(), 32);
        assert_eq!(t.cores().len(), 16);
        assert_eq!(t.slices().len(), 8);
        assert_eq!(t.numa_nodes().len(), 4);
        assert_eq!(t.sockets().len(), 2);
        assert_eq!(t.threads_per_core(), 2);
        assert_eq!(t.cores()[0].cpus, vec![0, 16]);
        assert_eq!(t.numa_nodes()[&1].to_string(), "4-7,20-23");
        assert_eq!(t.lowest_cores(3).to_string(), "0-1,16");
        assert_eq!(t.core_split(&"0,16,1".parse().unwrap()), (1, 1));
    }

    #[test]
    fn rejects_inconsistent_input() {
        let none = CpuSet::new;
        assert_eq!(
            Topology::new(vec![], none(), none()).unwrap_err(),
            TopologyError::Empty
        );
        let dup = vec![cpu(0, 0, 0, 0, None), cpu(0, 1, 0, 0, None)];
        assert_eq!(
            Topology::new(dup, none(), none()).unwrap_err(),
            TopologyError::DuplicateCpu(0)
        );
        let spans = vec![cpu(0, 0, 0, 0, None), cpu(1, 0, 1, 0, None)];
        let e = Topology::new(spans, none(), none()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "physical core 0 spans sockets 0 and 1 (CPUs 0 and 1)"
        );
        let big = vec![cpu(MAX_CPU + 1, 0, 0, 0, None)];
        assert!(matches!(
            Topology::new(big, none(), none()),
            Err(TopologyError::CpuTooLarge { .. })
        ));
    }

    #[test]
    fn file_format_reads_the_minimal_form_and_round_trips() {
        let minimal = r#"{"cpus": [
            {"cpu": 0, "core": 0, "socket": 0, "numa": 0, "l3": 0},
            {"cpu": 1, "core": 0, "socket": 0, "numa": 0, "l3": 0},
            {"cpu": 2, "core": 1, "socket": 0, "numa": 0}
        ]}"#;
        let file: TopologyFile = serde_json::from_str(minimal).unwrap();
        let t = Topology::from_file(file).unwrap();
        assert_eq!(t.cores().len(), 2);
        let again = serde_json::to_string(&t.to_file()).unwrap();
        let t2 = Topology::from_file(serde_json::from_str(&again).unwrap()).unwrap();
        assert_eq!(t2.cpus(), t.cpus());

        let typo = r#"{"cpus": [{"cpu": 0, "core": 0, "socket": 0, "numa": 0, "l3 ": 0}]}"#;
        let e = serde_json::from_str::<TopologyFile>(typo).unwrap_err();
        assert!(e.to_string().contains("unknown field"), "{e}");
        assert_eq!(e.line(), 1);
    }
}
