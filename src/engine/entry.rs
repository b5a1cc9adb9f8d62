//! What the engine knows of one cgroup, private to the engine: the daemon
//! and the CLI see it only through the engine's questions and
//! [`super::explain`].

use std::collections::HashSet;
use std::sync::Arc;

use super::{Failure, Role};
use crate::cgroup::layout::Kind;
use crate::cpuset::CpuSet;
use crate::intent::{Bundle, Intent};

/// One known cgroup. Kept small: a node has one per cgroup, tens of
/// thousands of them. Sets are shared (`Arc`): most cgroups hold the same few.
#[derive(Debug, Clone)]
pub(super) struct CgroupEntry {
    /// Kubepods structure (the root, a QoS parent, a pod): never shrunk.
    pub structural: bool,
    pub intent: Option<Box<Intent>>,
    /// The workload this cgroup belongs to, when it asks for exclusive CPUs
    /// (empty otherwise).
    pub key: Thin,
    /// Last known `cpuset.cpus`.
    pub cpus: Option<Arc<CpuSet>>,
    pub mems: Option<Arc<CpuSet>>,
    /// What its [`crate::cgroup::XATTR_BASELINE`] holds, as last read or
    /// written.
    pub baseline: Option<Arc<CpuSet>>,
    /// A problem with its request (a malformed xattr or annotation); empty
    /// when there is none.
    pub problem: Thin,
    /// The last failed write or verification.
    pub failure: Option<Box<Failure>>,
    pub role: Role,
    /// The workload it counts in: its key while its role is exclusive (what
    /// the workloads' membership holds it under); empty when none.
    pub member_of: Thin,
    /// The target `cpuset.cpus` of the last plan.
    pub target: Option<Arc<CpuSet>>,
    /// What the container's OCI bundle said, kept so that a rescan need not
    /// read it again (a bundle never changes for a container id).
    pub bundle: Option<Arc<Bundle>>,
    /// Its `cpuset.cpus` holds what the daemon wrote for an exclusive
    /// workload. Should it become unmanaged (an xattr `"0"` set after a rule
    /// pinned it), it is given its parent's CPUs back rather than left on
    /// CPUs that are no longer reserved for it.
    pub ours: bool,
    /// Its `cpuset.mems` holds what the daemon wrote to align an exclusive
    /// workload's memory (`align_memory`). When that ends (the workload
    /// leaves, alignment is turned off) all memory nodes are written back.
    pub mems_ours: bool,
    /// Its `cpuset.sched_load_balance` was set to 0 by this daemon (v1, see
    /// [`super::Settings::quiet_balance`]): its writes no longer rebuild the
    /// scheduler domains.
    pub balance_off: bool,
    /// The number of components of its path ([`crate::cgroup::depth`]),
    /// counted once: a plan orders its writes by it.
    pub depth: u16,
}

impl Default for CgroupEntry {
    fn default() -> Self {
        CgroupEntry {
            structural: false,
            intent: None,
            key: Thin::default(),
            cpus: None,
            mems: None,
            baseline: None,
            problem: Thin::default(),
            failure: None,
            role: Role::Unmanaged,
            member_of: Thin::default(),
            target: None,
            bundle: None,
            ours: false,
            mems_ours: false,
            balance_off: false,
            depth: 0,
        }
    }
}

impl CgroupEntry {
    /// A cgroup not known before, at `rel`.
    pub fn new(rel: &str) -> Self {
        CgroupEntry {
            depth: u16::try_from(crate::cgroup::depth(rel)).unwrap_or(u16::MAX),
            ..CgroupEntry::default()
        }
    }

    /// Takes in what a read of the cgroup decided.
    pub fn update(
        &mut self,
        kind: &Kind,
        intent: Option<Intent>,
        key: String,
        problem: Option<String>,
        bundle: Option<Arc<Bundle>>,
    ) {
        let wants = intent.as_ref().is_some_and(Intent::wants);
        self.structural = matches!(
            kind,
            Kind::KubepodsRoot { .. } | Kind::QosParent { .. } | Kind::Pod(_)
        );
        self.intent = intent.map(Box::new);
        self.key = if wants {
            Thin::new(key)
        } else {
            Thin::default()
        };
        self.problem = Thin::new(problem.unwrap_or_default());
        self.bundle = bundle;
    }

    /// Whether it asks for exclusive CPUs itself.
    pub fn wants(&self) -> bool {
        self.intent.as_deref().is_some_and(Intent::wants)
    }
}

/// Equal sets read from many cgroups, stored once.
#[derive(Debug, Default)]
pub(super) struct Sets(HashSet<Arc<CpuSet>>);

impl Sets {
    pub fn get(&mut self, set: CpuSet) -> Arc<CpuSet> {
        if let Some(s) = self.0.get(&set) {
            return s.clone();
        }
        let s = Arc::new(set);
        self.0.insert(s.clone());
        s
    }

    /// Drops the sets no cgroup holds any more.
    pub fn purge(&mut self) {
        self.0.retain(|s| Arc::strong_count(s) > 1);
    }
}

/// A string most entries do not have (a workload key, a problem), behind
/// one thin pointer: 8 bytes where a `Box<str>` takes 16, in each of tens of
/// thousands of entries. Empty is none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[expect(
    clippy::box_collection,
    reason = "the extra allocation buys a thin pointer in every entry"
)]
pub(super) struct Thin(Option<Box<String>>);

impl Thin {
    pub fn new(s: String) -> Thin {
        Thin((!s.is_empty()).then(|| Box::new(s)))
    }

    /// The string, unless it is empty.
    pub fn get(&self) -> Option<&str> {
        self.0.as_deref().map(String::as_str)
    }
}

impl std::ops::Deref for Thin {
    type Target = str;

    fn deref(&self) -> &str {
        self.get().unwrap_or("")
    }
}
