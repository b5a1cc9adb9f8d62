//! A workload: what one container (or cgroup) asks for, by its workload
//! key, and what it holds: its request, its cgroups, its CPUs, its baseline,
//! or why it waits ([`Pending`]). Plain data the engine keeps and `pinctl
//! status` shows; it never plans, and never reads or writes a file.

use std::collections::BTreeSet;

use serde::Serialize;

#[cfg(doc)]
use super::Engine;
use crate::cgroup::Rel;
use crate::cpuset::CpuSet;
use crate::intent::{Intent, Source};

/// Why a workload waits in the shared pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pending {
    pub requested: usize,
    pub available: usize,
    pub reason: String,
}

/// A workload that asks for exclusive CPUs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Workload {
    pub key: String,
    pub requested: usize,
    pub source: Source,
    pub numa: Vec<u32>,
    /// Whole physical cores only ([`Intent::whole_cores`]).
    pub whole_cores: bool,
    /// The power class it asks for ([`Intent::class`]).
    pub class: Option<String>,
    /// The devices it drives and where they sit ([`Intent::devices`]).
    #[serde(skip)]
    pub devices: Vec<crate::devices::Located>,
    /// Its own `device_alignment` ([`Intent::device_alignment`]).
    #[serde(skip)]
    pub device_alignment: Option<crate::config::DeviceAlignment>,
    pub cgroups: BTreeSet<Rel>,
    /// Its exclusive CPUs, once assigned.
    pub cpus: Option<CpuSet>,
    pub pending: Option<Pending>,
    /// The CPUs it was first given: a resize keeps them, and a shrink below
    /// them is refused (issue #34).
    pub baseline: Option<CpuSet>,
    /// A resize that could not be made: it keeps the CPUs it has, and says
    /// why; tried again with each plan.
    pub resize: Option<Pending>,
    /// Announced by the runtime before its cgroup exists (NRI's
    /// `CreateContainer`, [`Engine::expect`]): kept without cgroups until
    /// one joins or the announcement is withdrawn ([`Engine::unexpect`]).
    #[serde(skip)]
    pub expected: bool,
    /// Arrival order: earlier workloads are served first.
    #[serde(skip)]
    pub(super) seq: u64,
    /// The free CPUs its last attempt failed on: the same free CPUs fail the
    /// same way, so it is not tried again until they change.
    #[serde(skip)]
    pub(super) tried: Option<CpuSet>,
}

impl Workload {
    /// A workload that asks for nothing yet ([`Self::ask`]), `seq`-th to
    /// arrive.
    pub(super) fn new(key: &str, seq: u64) -> Workload {
        Workload {
            key: key.to_string(),
            requested: 0,
            source: Source::Xattr,
            numa: Vec::new(),
            whole_cores: false,
            class: None,
            devices: Vec::new(),
            device_alignment: None,
            cgroups: BTreeSet::new(),
            cpus: None,
            pending: None,
            baseline: None,
            resize: None,
            expected: false,
            seq,
            tried: None,
        }
    }

    /// Takes `intent` as its request. One that changes what it is placed
    /// by (count, nodes, whole cores, devices) is tried again at once.
    pub(super) fn ask(&mut self, intent: &Intent) {
        if (self.requested, &self.numa, self.whole_cores)
            != (intent.cpus, &intent.numa, intent.whole_cores)
            || (&self.devices, self.device_alignment) != (&intent.devices, intent.device_alignment)
        {
            self.tried = None;
        }
        self.requested = intent.cpus;
        self.source = intent.source.clone();
        self.numa = intent.numa.clone();
        self.whole_cores = intent.whole_cores;
        self.class = intent.class.clone();
        self.devices = intent.devices.clone();
        self.device_alignment = intent.device_alignment;
    }
}
