//! The workload documents (`GET /v1/workloads`, and `Status::workloads`):
//! a workload that asks for exclusive CPUs, the devices it is near, where
//! its request came from, why it waits, and how well its CPUs are aligned.
//! Documents only: the engine fills them; nothing here decides or reads.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::cpuset::CpuSet;
use crate::intent;
use crate::topology::Topology;

/// A workload that asks for exclusive CPUs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Workload {
    /// `pod:<uid>/<container>` or `cgroup:<path>`.
    pub key: String,
    pub requested: usize,
    /// Where the request came from.
    pub source: Source,
    /// NUMA nodes a rule restricts it to (empty: any).
    pub numa: Vec<u32>,
    /// Its cgroups, relative to the cgroup root.
    pub cgroups: Vec<String>,
    /// Its exclusive CPUs; `None` while pending.
    pub cpus: Option<CpuSet>,
    /// Why it waits, when it does.
    pub pending: Option<Pending>,
    /// Where its CPUs sit, when pinned.
    pub alignment: Option<Alignment>,
    /// A resize that could not be made: it keeps `cpus` (absent when none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resize: Option<Pending>,
    /// The devices it drives and whether its CPUs sit near them (absent
    /// when it names none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub near: Option<Near>,
}

/// A workload's devices and where its CPUs sit beside them (issue #43).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Near {
    pub devices: Vec<Device>,
    /// The NUMA nodes of the devices placed (empty: none is).
    pub nodes: Vec<u32>,
    /// `prefer`, `require` or `none`: the workload's own, else the file's.
    pub alignment: String,
    /// How many of its CPUs lie on `nodes`, while it is pinned and `nodes`
    /// is not empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus_near: Option<usize>,
}

impl Near {
    /// Whether every CPU of a pinned workload holding `cpus` lies on its
    /// devices' nodes: `None` when that does not apply (not pinned, or no
    /// device placed).
    pub fn aligned(&self, cpus: Option<&CpuSet>) -> Option<bool> {
        Some(self.cpus_near? == cpus?.len())
    }

    /// What a workload's devices and CPUs say, as the status shows it.
    pub fn of(
        topo: &Topology,
        devices: &[crate::devices::Located],
        alignment: crate::config::DeviceAlignment,
        cpus: Option<&CpuSet>,
    ) -> Option<Near> {
        if devices.is_empty() {
            return None;
        }
        let nodes = crate::devices::nodes_of(topo, devices);
        let near = topo.cpus_of_nodes(&nodes);
        Some(Near {
            devices: devices
                .iter()
                .map(|l| Device {
                    name: l.device.what.to_string(),
                    found: l.device.found.to_string(),
                    pci: l.place.as_ref().ok().and_then(|p| p.pci.clone()),
                    nodes: l
                        .place
                        .as_ref()
                        .map(|p| crate::devices::nodes_of_place(topo, p))
                        .unwrap_or_default(),
                    unknown: l.place.as_ref().err().cloned(),
                })
                .collect(),
            cpus_near: cpus
                .filter(|_| !nodes.is_empty())
                .map(|c| c.intersection(&near).len()),
            nodes,
            alignment: alignment.as_str().to_string(),
        })
    }
}

/// One device of a workload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Device {
    /// As it was named: `0000:3b:00.0`, `ib0`, `/dev/nvme0n1`, `char:195:0`.
    pub name: String,
    /// How pinctl learnt of it (`xattr user.pinctl.near`, `bundle's
    /// linux.devices`, ...).
    pub found: String,
    /// Its PCI address, when it is or hangs off a PCI device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci: Option<String>,
    /// Its NUMA nodes on this machine (empty: not known).
    pub nodes: Vec<u32>,
    /// Why where it sits is not known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unknown: Option<String>,
}

/// Where a request came from, highest precedence first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Source {
    /// The `user.pinctl.cpus` xattr on the cgroup directory.
    Xattr,
    /// An OCI annotation in this bundle's `config.json`: `pinctl.io/cpus`
    /// (the pod's) or `pinctl.io/cpus.<container name>`.
    Annotation {
        bundle: PathBuf,
        /// Which annotation decided (absent from an older daemon's answer).
        #[serde(default = "pod_annotation")]
        key: String,
    },
    /// A `[[rule]]` of the configuration file.
    Rule { pattern: String, line: usize },
    /// The kubelet's rule: a Guaranteed pod's container with a whole-number
    /// CPU limit.
    Kubelet,
}

impl From<&intent::Source> for Source {
    fn from(s: &intent::Source) -> Self {
        match s {
            intent::Source::Xattr => Source::Xattr,
            intent::Source::Annotation { bundle, key } => Source::Annotation {
                bundle: bundle.clone(),
                key: key.clone(),
            },
            intent::Source::Rule { pattern, line } => Source::Rule {
                pattern: pattern.clone(),
                line: *line,
            },
            intent::Source::Kubelet => Source::Kubelet,
        }
    }
}

fn pod_annotation() -> String {
    intent::ANNOTATION_CPUS.to_string()
}

/// A request that waits in the shared pool, or a resize that waits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    pub requested: usize,
    pub available: usize,
    pub reason: String,
}

/// How well a workload's CPUs sit on the topology.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Alignment {
    pub sockets: Vec<u32>,
    pub numa_nodes: Vec<u32>,
    /// L3 groups (cache ids) touched.
    pub l3_groups: Vec<u32>,
    /// Whether every core touched is used whole (all its threads).
    pub whole_cores: bool,
    /// Cores whose every online thread it holds.
    #[serde(default)]
    pub whole_core_count: usize,
    /// Cores of which it holds some threads but not all.
    #[serde(default)]
    pub shared_cores: usize,
    /// It spans the fewest NUMA nodes its size allows.
    #[serde(default)]
    pub numa_aligned: bool,
    /// It spans the fewest L3 groups its size allows (so it does on a
    /// machine that reports no L3).
    #[serde(default)]
    pub l3_aligned: bool,
}

impl Alignment {
    /// Where `cpus` sit on `topo`.
    pub fn of(topo: &Topology, cpus: &CpuSet) -> Self {
        let (whole, shared) = topo.core_split(cpus);
        let numa_nodes = topo.numa_of(cpus);
        let l3_groups = topo.l3_of(cpus);
        Alignment {
            sockets: topo.sockets_of(cpus),
            numa_aligned: numa_nodes.len() <= fewest(topo.numa_nodes(), cpus.len()),
            l3_aligned: l3_groups.len() <= fewest(topo.l3_groups(), cpus.len()),
            numa_nodes,
            l3_groups,
            whole_cores: shared == 0,
            whole_core_count: whole,
            shared_cores: shared,
        }
    }
}

/// The fewest of `groups` that hold `n` CPUs: the largest first. As many as
/// there are when all of them do not (and 0 with no groups known).
fn fewest(groups: &std::collections::BTreeMap<u32, CpuSet>, n: usize) -> usize {
    let mut sizes: Vec<usize> = groups.values().map(CpuSet::len).collect();
    sizes.sort_unstable_by(|a, b| b.cmp(a));
    let mut held = 0;
    for (i, size) in sizes.iter().enumerate() {
        if held >= n {
            return i;
        }
        held += size;
    }
    sizes.len()
}
