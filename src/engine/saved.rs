//! The engine's part of the state file: each workload's assignment as saved
//! ([`SavedAssignment`]), the file's body ([`SavedState`]) and what the engine
//! puts in it ([`Engine::saved_state`]). It never reads or writes the file
//! (`crate::state` does).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::Engine;
use crate::cpuset::CpuSet;

/// One assignment as saved in the state file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedAssignment {
    pub cpus: CpuSet,
    pub requested: usize,
    pub cgroups: Vec<String>,
    /// The CPUs it was first given, when a resize made it hold others
    /// (absent from older files: its CPUs then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<CpuSet>,
}

/// The body of the state file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedState {
    /// The online CPUs when it was written.
    pub online: CpuSet,
    pub assignments: BTreeMap<String, SavedAssignment>,
    /// The interrupts kept off exclusive CPUs (`irq_affinity`), by
    /// interrupt (`"default"` or its number), with what each had: not the
    /// engine's, saved beside its assignments by the daemon.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub irqs: BTreeMap<String, crate::irq::Steered>,
    /// The isolated partitions made (`isolation = "partition"`) and their
    /// grants: not the engine's either.
    #[serde(default, skip_serializing_if = "crate::partition::Made::is_empty")]
    pub partitions: crate::partition::Made,
    /// The containers left to another NRI plugin, by container id, with
    /// their cgroups: not the engine's, saved by the daemon so that a
    /// restart does not take them back.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub nri_yielded: BTreeMap<String, String>,
}

impl Engine {
    /// The state to save.
    pub fn saved_state(&self) -> SavedState {
        SavedState {
            online: self.topo.online().clone(),
            assignments: self
                .workloads
                .values()
                .filter_map(|w| {
                    Some((
                        w.key.clone(),
                        SavedAssignment {
                            cpus: w.cpus.clone()?,
                            requested: w.requested,
                            cgroups: w.cgroups.iter().map(|r| r.to_string()).collect(),
                            baseline: w.baseline.clone().filter(|b| Some(b) != w.cpus.as_ref()),
                        },
                    ))
                })
                .collect(),
            irqs: BTreeMap::new(),
            partitions: crate::partition::Made::default(),
            nri_yielded: BTreeMap::new(),
        }
    }
}
