//! The engine: the daemon's model of the managed cgroups and its decisions.
//!
//! Pure and synchronous: the daemon feeds it what it read ([`Engine::upsert`],
//! [`Engine::forget`], [`Engine::set_topology`]), asks it to [`Engine::plan`],
//! performs the returned writes in order, and reports each result back
//! ([`Engine::written`]). The engine never touches a file, so every decision is
//! tested on plain values.
//!
//! # Roles
//! Every known cgroup gets a role, and the role gives its target cpuset:
//! - *exclusive*: a workload with exclusive CPUs (its assignment, or the shared
//!   pool while it is pending);
//! - *inside*: below an exclusive cgroup (a container's sub-cgroups): the same
//!   set as its exclusive ancestor, because v1 requires children ⊆ parent;
//! - *structural*: the kubepods root, QoS parents and pod cgroups: all online
//!   CPUs. They hold no tasks, and shrinking them in cgroup v1 makes container
//!   runtimes fail to create containers with EACCES when they write an explicit
//!   cpuset wider than the parent (KERNEL-NOTES), so they are never shrunk;
//! - *shared*: every other cgroup in a managed subtree or in `shared_cgroups`:
//!   the shared pool;
//! - *unmanaged*: watched only because a rule might match below it; not written,
//!   except to widen it over an exclusive descendant.
//!
//! Then the ancestor closure: a cgroup's target always contains the targets of
//! its descendants (v1 rejects a child CPU its parent lacks with EACCES, and v2
//! silently falls back to the parent's set).
//!
//! # Invariants
//! - No CPU is assigned to two workloads.
//! - Reserved CPUs are never assigned.
//! - The shared pool (online CPUs minus all assignments) is never empty: when no
//!   online CPU is reserved, the lowest online CPU is held back.
//! - No write carries an empty set.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::alloc::{self, AllocError};
use crate::cgroup::layout::Kind;
use crate::cgroup::{self, Rel};
use crate::cpuset::CpuSet;
pub use crate::intent::Reading;
use crate::intent::{Bundle, Intent, Source};
use crate::topology::Topology;

/// What the engine needs from the configuration.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// Reserved CPUs, resolved (a count already turned into a list).
    pub reserved: CpuSet,
    /// Allocator options; `reserved` and `numa_preference` are filled in here.
    pub alloc: alloc::Options,
    /// Subtrees whose every cgroup is managed.
    pub managed: Vec<String>,
    /// Subtrees confined to the shared pool.
    pub shared: Vec<String>,
    /// Set `cpuset.mems` of exclusive workloads to their NUMA nodes.
    pub align_memory: bool,
    /// The memory nodes a new cgroup gets (the root's `cpuset.mems`).
    pub mems_all: CpuSet,
    /// cgroup v2: an empty `cpuset.cpus` means "the parent's CPUs", not "none"
    /// (v1: none, and no task can join).
    pub empty_inherits: bool,
}

/// A cgroup's role; see the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Exclusive,
    Inside,
    Structural,
    Shared,
    Unmanaged,
}

/// A failed write or verification, kept as the cgroup's status until a later
/// write succeeds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Failure {
    pub message: String,
    /// The errno of the failed call, when there was one.
    pub errno: Option<i32>,
}

/// One known cgroup. Kept small: a node has one per cgroup, tens of
/// thousands of them. Sets are shared (`Arc`): most cgroups hold the same few.
#[derive(Debug, Clone, Serialize)]
pub struct CgroupEntry {
    /// Kubepods structure (the root, a QoS parent, a pod): never shrunk.
    pub structural: bool,
    #[serde(skip)]
    pub intent: Option<Box<Intent>>,
    /// The workload this cgroup belongs to, when it asks for exclusive CPUs
    /// (empty otherwise).
    pub key: Box<str>,
    /// Last known `cpuset.cpus`.
    pub cpus: Option<Arc<CpuSet>>,
    pub mems: Option<Arc<CpuSet>>,
    pub effective: Option<Arc<CpuSet>>,
    /// A problem with its request (a malformed xattr or annotation).
    pub problem: Option<Box<str>>,
    /// The last failed write or verification.
    pub failure: Option<Box<Failure>>,
    pub role: Role,
    /// The target `cpuset.cpus` of the last plan.
    pub target: Option<Arc<CpuSet>>,
    /// What the container's OCI bundle said, kept so that a rescan need not
    /// read it again (a bundle never changes for a container id).
    #[serde(skip)]
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
}

/// Equal sets read from many cgroups, stored once.
#[derive(Debug, Default)]
struct Sets(HashSet<Arc<CpuSet>>);

impl Sets {
    fn get(&mut self, set: CpuSet) -> Arc<CpuSet> {
        if let Some(s) = self.0.get(&set) {
            return s.clone();
        }
        let s = Arc::new(set);
        self.0.insert(s.clone());
        s
    }

    /// Drops the sets no cgroup holds any more.
    fn purge(&mut self) {
        self.0.retain(|s| Arc::strong_count(s) > 1);
    }
}

/// Why a workload waits in the shared pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pending {
    pub requested: usize,
    pub available: usize,
    pub reason: String,
}

/// A workload that asks for exclusive CPUs.
#[derive(Debug, Clone, Serialize)]
pub struct Workload {
    pub key: String,
    pub requested: usize,
    pub source: Source,
    pub numa: Vec<u32>,
    pub cgroups: BTreeSet<Rel>,
    /// Its exclusive CPUs, once assigned.
    pub cpus: Option<CpuSet>,
    pub pending: Option<Pending>,
    /// Arrival order: earlier workloads are served first.
    #[serde(skip)]
    seq: u64,
}

/// Which control file a write goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum File {
    Cpus,
    Mems,
}

/// One write of the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    pub rel: Rel,
    pub file: File,
    pub set: Arc<CpuSet>,
}

/// The result of [`Engine::plan`].
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// Writes in the order they must be made.
    pub writes: Vec<Write>,
    /// Whether any assignment changed (the state file needs saving).
    pub assignments_changed: bool,
}

/// One assignment as saved in the state file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedAssignment {
    pub cpus: CpuSet,
    pub requested: usize,
    pub cgroups: Vec<String>,
}

/// The body of the state file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedState {
    /// The online CPUs when it was written.
    pub online: CpuSet,
    pub assignments: BTreeMap<String, SavedAssignment>,
}

/// The daemon's model; see the module documentation.
#[derive(Debug)]
pub struct Engine {
    topo: Topology,
    settings: Settings,
    /// Reserved CPUs in force: the configured ones that are online, or the
    /// lowest online CPU when none is.
    reserved: CpuSet,
    cgroups: BTreeMap<Rel, CgroupEntry>,
    workloads: BTreeMap<String, Workload>,
    sets: Sets,
    /// Assignments from the state file: hints, checked before use.
    hints: BTreeMap<String, CpuSet>,
    /// At start-up, a workload's live cpuset is taken as its assignment when it
    /// is a valid one (the live cgroups are the truth).
    adopt_live: bool,
    next_seq: u64,
    /// Cgroups read or written since the last plan: the next plan can be made
    /// for them alone unless `full`.
    dirty: BTreeSet<Rel>,
    /// The next plan must look at every cgroup (an assignment, the topology or
    /// a workload's membership may have changed).
    full: bool,
}

impl Engine {
    pub fn new(topo: Topology, settings: Settings, saved: Option<SavedState>) -> Self {
        let hints = saved
            .map(|s| {
                s.assignments
                    .into_iter()
                    .map(|(k, a)| (k, a.cpus))
                    .collect()
            })
            .unwrap_or_default();
        let mut engine = Engine {
            reserved: CpuSet::new(),
            topo,
            settings,
            cgroups: BTreeMap::new(),
            workloads: BTreeMap::new(),
            sets: Sets::default(),
            hints,
            adopt_live: true,
            next_seq: 0,
            dirty: BTreeSet::new(),
            full: true,
        };
        engine.reserved = engine.effective_reserved();
        engine
    }

    fn effective_reserved(&self) -> CpuSet {
        let online = self.topo.online();
        let reserved = self.settings.reserved.intersection(online);
        if reserved.is_empty() {
            online.first().into_iter().collect()
        } else {
            reserved
        }
    }

    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    /// The reserved CPUs in force.
    pub fn reserved(&self) -> &CpuSet {
        &self.reserved
    }

    pub fn cgroups(&self) -> &BTreeMap<Rel, CgroupEntry> {
        &self.cgroups
    }

    pub fn workloads(&self) -> &BTreeMap<String, Workload> {
        &self.workloads
    }

    /// Ends start-up: from now on a workload's CPUs come from its assignment
    /// or the allocator, never from whatever its cpuset happens to say.
    pub fn end_startup(&mut self) {
        self.adopt_live = false;
        self.hints.clear();
    }

    /// Online CPUs minus every assignment. Never empty.
    pub fn shared_pool(&self) -> CpuSet {
        let mut pool = self.topo.online().clone();
        for w in self.workloads.values() {
            if let Some(cpus) = &w.cpus {
                pool.difference_with(cpus);
            }
        }
        pool
    }

    /// Records what was read of one cgroup.
    pub fn upsert(&mut self, r: Reading) {
        let Reading {
            obs,
            kind,
            intent,
            key,
            problem,
            bundle,
        } = r;
        if let Some(old) = self.cgroups.get(&obs.rel)
            && matches!(old.role, Role::Exclusive | Role::Inside)
        {
            self.full = true;
        }
        let wants = intent.as_ref().is_some_and(Intent::wants);
        let cpus = obs.cpus.map(|s| self.sets.get(s));
        let mems = obs.mems.map(|s| self.sets.get(s));
        let effective = obs.effective.map(|s| self.sets.get(s));
        self.dirty.insert(obs.rel.clone());
        let entry = self.cgroups.entry(obs.rel).or_insert(CgroupEntry {
            structural: false,
            intent: None,
            key: Box::default(),
            cpus: None,
            mems: None,
            effective: None,
            problem: None,
            failure: None,
            role: Role::Unmanaged,
            target: None,
            bundle: None,
            ours: false,
            mems_ours: false,
        });
        entry.structural = matches!(
            kind,
            Kind::KubepodsRoot { .. } | Kind::QosParent { .. } | Kind::Pod(_)
        );
        entry.intent = intent.map(Box::new);
        entry.key = if wants { key.into() } else { Box::default() };
        entry.cpus = cpus;
        entry.mems = mems;
        entry.effective = effective;
        entry.problem = problem.map(Into::into);
        entry.bundle = bundle;
        if let Some(e) = obs.error {
            entry.failure = Some(Box::new(Failure {
                message: e,
                errno: None,
            }));
        }
    }

    /// The stored path of `rel`, when known (so callers can share it).
    pub fn rel(&self, rel: &str) -> Option<&Rel> {
        self.cgroups.get_key_value(rel).map(|(k, _)| k)
    }

    /// Updates the known `cpuset.cpus` of `rel` (after a foreign write).
    pub fn observe_cpus(&mut self, rel: &str, cpus: Option<CpuSet>) {
        let cpus = cpus.map(|s| self.sets.get(s));
        if let Some((k, e)) = self.cgroups.get_key_value(rel) {
            let k = k.clone();
            if e.cpus != cpus {
                self.dirty.insert(k.clone());
            }
            if let Some(e) = self.cgroups.get_mut(&k) {
                e.cpus = cpus;
            }
        }
    }

    /// The known cgroups at or below `rel`.
    pub fn subtree(&self, rel: &str) -> Vec<Rel> {
        cgroup::subtree(&self.cgroups, rel).cloned().collect()
    }

    /// Forgets `rel` and every cgroup below it (they were removed).
    pub fn forget(&mut self, rel: &str) {
        for k in self.subtree(rel) {
            self.forget_one(&k);
        }
    }

    /// Forgets cgroup `rel` alone, not what is below it.
    pub fn forget_one(&mut self, rel: &str) {
        // Releasing an exclusive workload's cgroup changes the shared pool.
        if let Some(e) = self.cgroups.remove(rel)
            && matches!(e.role, Role::Exclusive | Role::Inside)
        {
            self.full = true;
        }
        self.dirty.remove(rel);
    }

    /// Whether `rel` is known.
    pub fn knows(&self, rel: &str) -> bool {
        self.cgroups.contains_key(rel)
    }

    /// Replaces the topology (CPU hot-plug, a different machine). Assignments
    /// whose CPUs are all still usable are kept by the next plan; the others are
    /// re-planned; new CPUs join the shared pool.
    pub fn set_topology(&mut self, topo: Topology) {
        self.topo = topo;
        self.reserved = self.effective_reserved();
        self.full = true;
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Replaces the settings (a reloaded configuration). As with a new
    /// topology, assignments that are still valid (the same count, no CPU
    /// now reserved) are kept by the next plan, which looks at every cgroup.
    pub fn set_settings(&mut self, settings: Settings) {
        self.settings = settings;
        self.reserved = self.effective_reserved();
        self.full = true;
    }

    /// Makes the next plan look at every cgroup (a full reconcile).
    pub fn replan_all(&mut self) {
        self.full = true;
    }

    /// Records the outcome of a write of the plan.
    pub fn written(&mut self, write: &Write, result: Result<(), Failure>) {
        let align = self.settings.align_memory;
        let Some(e) = self.cgroups.get_mut(&*write.rel) else {
            return;
        };
        match result {
            Ok(()) => {
                let exclusive = matches!(e.role, Role::Exclusive | Role::Inside);
                match write.file {
                    File::Cpus => {
                        e.cpus = Some(write.set.clone());
                        e.ours = exclusive;
                    }
                    File::Mems => {
                        e.mems = Some(write.set.clone());
                        e.mems_ours = align && exclusive;
                    }
                }
                e.failure = None;
            }
            Err(f) => {
                e.failure = Some(Box::new(f));
                // Retried by the next plan.
                self.dirty.insert(write.rel.clone());
            }
        }
    }

    /// Records the effective set read back after writes; a mismatch with the
    /// target (v2's silent fallback to the parent's set) is a failure.
    pub fn verified(&mut self, rel: &str, effective: CpuSet) {
        let Some(e) = self.cgroups.get_mut(rel) else {
            return;
        };
        let online = self.topo.online();
        if let Some(target) = &e.target
            && effective != target.intersection(online)
        {
            e.failure = Some(Box::new(Failure {
                message: format!("effective CPUs {effective} differ from the requested {target}"),
                errno: None,
            }));
        }
        e.effective = Some(self.sets.get(effective));
    }

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
                        },
                    ))
                })
                .collect(),
        }
    }

    /// Decides assignments and targets, and returns the writes that bring the
    /// known cpusets to their targets.
    pub fn plan(&mut self) -> Plan {
        if !self.full
            && let Some(plan) = self.plan_dirty()
        {
            return plan;
        }
        self.full = false;
        self.dirty.clear();
        // What the state file holds: a change in either is saved.
        let saved = |w: &Workload| (w.cpus.clone(), w.cgroups.clone());
        let before: BTreeMap<String, _> = self
            .workloads
            .iter()
            .map(|(k, w)| (k.clone(), saved(w)))
            .collect();
        self.assign_roles_and_workloads();
        self.assign_cpus();
        let after: BTreeMap<String, _> = self
            .workloads
            .iter()
            .map(|(k, w)| (k.clone(), saved(w)))
            .collect();
        let targets = self.targets();
        let writes = self.writes(&targets);
        // Both maps are in path order and every target is of a known cgroup.
        let mut targets = targets.into_iter().peekable();
        for (rel, e) in self.cgroups.iter_mut() {
            e.target = targets.next_if(|(k, _)| k == rel).map(|(_, t)| t);
            // Already back on what it is given back (no write needed): from
            // now on it is left alone.
            if e.ours
                && !e.mems_ours
                && e.role == Role::Unmanaged
                && e.target.is_some()
                && e.cpus == e.target
            {
                e.ours = false;
            }
        }
        self.sets.purge();
        Plan {
            writes,
            assignments_changed: before != after,
        }
    }

    /// The plan for the dirty cgroups alone, when nothing else can change:
    /// none of them is or was part of an exclusive workload, and the targets
    /// of their ancestors already hold theirs. `None` when a full plan is
    /// needed.
    fn plan_dirty(&mut self) -> Option<Plan> {
        let dirty = std::mem::take(&mut self.dirty);
        let seq = self.next_seq;
        let plan = self.plan_dirty_inner(&dirty);
        if plan.is_none() {
            // Undo what the attempt did; the full plan decides afresh.
            self.workloads.retain(|_, w| w.seq < seq);
            self.next_seq = seq;
            self.dirty = dirty;
        }
        plan
    }

    fn plan_dirty_inner(&mut self, dirty: &BTreeSet<Rel>) -> Option<Plan> {
        let shared = Arc::new(self.shared_pool());
        let online = Arc::new(self.topo.online().clone());
        let mut targets: BTreeMap<Rel, Arc<CpuSet>> = BTreeMap::new();
        let mut assigned = false;
        // Path order: parents before children.
        for rel in dirty {
            let Some(e) = self.cgroups.get(rel) else {
                continue;
            };
            let parent = cgroup::parent(rel).and_then(|p| self.cgroups.get(p));
            let inside = parent.is_some_and(|p| matches!(p.role, Role::Exclusive | Role::Inside));
            let wants = e.intent.as_deref().is_some_and(Intent::wants);
            if inside {
                return None;
            }
            let (role, target) = if wants {
                // A new workload gets its CPUs now, when nothing older waits
                // for CPUs; the shared pool shrinks in the full plan that
                // must follow.
                match self.assign_new(rel) {
                    Some(cpus) => (Role::Exclusive, Some(Arc::new(cpus))),
                    None => {
                        return None;
                    }
                }
            } else {
                let role = Self::base_role(&self.settings, rel, e.structural);
                let target = match role {
                    Role::Structural => Some(online.clone()),
                    Role::Shared => Some(shared.clone()),
                    _ => None,
                };
                (role, target)
            };
            let e = &self.cgroups[&**rel];
            // A cgroup the last plan widened over a descendant (the ancestor
            // closure) needs the full plan to keep it so.
            if role != Role::Exclusive && e.target.is_some() && e.target != target {
                return None;
            }
            // The ancestor closure must already hold.
            if let Some(t) = &target {
                let mut p = cgroup::parent(rel);
                while let Some(anc) = p {
                    let Some(a) = self.cgroups.get(anc) else {
                        break;
                    };
                    match targets.get(anc).or(a.target.as_ref()) {
                        Some(at) if t.is_subset(at) => break,
                        Some(_) => {
                            return None;
                        }
                        None if self.lacks(a, t) => return None,
                        None => {}
                    }
                    p = cgroup::parent(anc);
                }
            }
            let e = self.cgroups.get_mut(&**rel).expect("looked up above");
            if role == Role::Exclusive {
                assigned = true;
            }
            e.role = role;
            e.target = target.clone();
            if let Some(t) = target {
                targets.insert(rel.clone(), t);
            }
        }
        if assigned {
            self.full = true;
        }
        Some(Plan {
            writes: self.writes(&targets),
            assignments_changed: assigned,
        })
    }

    /// Gives the new workload of cgroup `rel` its CPUs, outside a full plan:
    /// only when it is the workload's only cgroup and no workload waits for
    /// CPUs (those come first). Its role is set by the caller.
    fn assign_new(&mut self, rel: &Rel) -> Option<CpuSet> {
        let e = &self.cgroups[&**rel];
        let intent = e.intent.clone()?;
        if self.workloads.contains_key(&*e.key) || self.workloads.values().any(|w| w.cpus.is_none())
        {
            return None;
        }
        // A cgroup with children would take them inside: a full plan.
        if cgroup::subtree(&self.cgroups, rel).nth(1).is_some() {
            return None;
        }
        let free = self.shared_pool().difference(&self.reserved);
        let cpus = self.allocate(&free, intent.cpus, &intent.numa).ok()?;
        let key = e.key.to_string();
        self.workloads.insert(
            key.clone(),
            Workload {
                key,
                requested: intent.cpus,
                source: intent.source,
                numa: intent.numa,
                cgroups: [rel.clone()].into(),
                cpus: Some(cpus.clone()),
                pending: None,
                seq: self.next_seq,
            },
        );
        self.next_seq += 1;
        Some(cpus)
    }

    /// Whether a full plan is due (after an incremental one assigned CPUs).
    pub fn needs_full(&self) -> bool {
        self.full
    }

    /// Plans `n` CPUs from `free` with the configured options.
    fn allocate(&self, free: &CpuSet, n: usize, numa: &[u32]) -> Result<CpuSet, AllocError> {
        let opts = alloc::Options {
            reserved: self.reserved.clone(),
            numa_preference: numa.to_vec(),
            ..self.settings.alloc.clone()
        };
        alloc::allocate(&self.topo, free, n, &opts)
    }

    /// Whether `t` holds CPUs that the current set of cgroup `e` lacks (for an
    /// unmanaged ancestor, which is only ever widened). In v2 an empty set
    /// inherits its parent's: it lacks nothing.
    fn lacks(&self, e: &CgroupEntry, t: &CpuSet) -> bool {
        match e.cpus.as_deref() {
            Some(cur) if !cur.is_empty() => !t.is_subset(cur),
            _ => !(self.settings.empty_inherits || t.is_empty()),
        }
    }

    /// The role of a cgroup that neither asks for exclusive CPUs nor lies
    /// inside a cgroup that does.
    fn base_role(settings: &Settings, rel: &str, structural: bool) -> Role {
        let managed = Self::under(rel, &settings.managed);
        if managed && structural {
            Role::Structural
        } else if managed || Self::under(rel, &settings.shared) {
            Role::Shared
        } else {
            Role::Unmanaged
        }
    }

    fn under(rel: &str, roots: &[String]) -> bool {
        roots.iter().any(|r| cgroup::is_within(rel, r))
    }

    /// Gives every cgroup its role and rebuilds workload membership.
    fn assign_roles_and_workloads(&mut self) {
        let mut members: BTreeMap<Box<str>, Vec<Rel>> = BTreeMap::new();
        // Cgroups whose children are inside an exclusive workload.
        let mut exclusive_below: BTreeSet<Rel> = BTreeSet::new();
        let settings = &self.settings;
        // BTreeMap order puts every parent before its children.
        for (rel, e) in self.cgroups.iter_mut() {
            let inside = cgroup::parent(rel).is_some_and(|p| exclusive_below.contains(p));
            let wants = e.intent.as_deref().is_some_and(Intent::wants);
            e.role = if inside {
                exclusive_below.insert(rel.clone());
                Role::Inside
            } else if wants {
                exclusive_below.insert(rel.clone());
                members.entry(e.key.clone()).or_default().push(rel.clone());
                Role::Exclusive
            } else {
                Self::base_role(settings, rel, e.structural)
            };
        }
        // Workloads without cgroups are released.
        self.workloads
            .retain(|k, _| members.contains_key(k.as_str()));
        for (key, rels) in members {
            let first = &self.cgroups[&rels[0]];
            let Some(intent) = first.intent.as_deref().cloned() else {
                continue;
            };
            let key = key.to_string();
            let seq = self.next_seq;
            let w = self
                .workloads
                .entry(key.clone())
                .or_insert_with(|| Workload {
                    key: key.clone(),
                    requested: intent.cpus,
                    source: intent.source.clone(),
                    numa: intent.numa.clone(),
                    cgroups: BTreeSet::new(),
                    cpus: None,
                    pending: None,
                    seq,
                });
            if w.seq == seq {
                self.next_seq += 1;
            }
            w.requested = intent.cpus;
            w.source = intent.source;
            w.numa = intent.numa;
            w.cgroups = rels.into_iter().collect();
        }
    }

    /// Keeps valid assignments and plans the others, earliest workload first.
    fn assign_cpus(&mut self) {
        let usable = self.topo.online().difference(&self.reserved);
        let mut order: Vec<(u64, String)> = self
            .workloads
            .values()
            .map(|w| (w.seq, w.key.clone()))
            .collect();
        order.sort();
        let mut taken = CpuSet::new();
        // Pass 1: keep every assignment that is still valid.
        for (_, key) in &order {
            let w = self.workloads.get_mut(key).expect("key from the map");
            let keep = w.cpus.as_ref().is_some_and(|c| {
                c.len() == w.requested && c.is_subset(&usable) && c.is_disjoint(&taken)
            });
            if keep {
                if let Some(c) = &w.cpus {
                    taken.union_with(c);
                }
            } else {
                w.cpus = None;
            }
        }
        // Pass 2, at start-up only: every workload whose live cpuset (or else the
        // state file's hint) is a valid assignment keeps it, before anything is
        // planned, so a workload that waited before the restart cannot take
        // the CPUs of one that was pinned.
        if self.adopt_live {
            for (_, key) in &order {
                let w = &self.workloads[key];
                if w.cpus.is_some() {
                    continue;
                }
                let valid = |c: &CpuSet| {
                    c.len() == w.requested && c.is_subset(&usable) && c.is_disjoint(&taken)
                };
                let live = w
                    .cgroups
                    .iter()
                    .filter_map(|r| self.cgroups[r].cpus.as_deref());
                let adopted = live.chain(self.hints.get(key)).find(|c| valid(c)).cloned();
                if let Some(c) = adopted {
                    taken.union_with(&c);
                    let w = self.workloads.get_mut(key).expect("key from the map");
                    w.cpus = Some(c);
                    w.pending = None;
                }
            }
        }
        // Pass 3: the allocator for the rest, earliest first.
        for (_, key) in &order {
            let w = &self.workloads[key];
            if w.cpus.is_some() {
                continue;
            }
            let free = usable.difference(&taken);
            let result = self.allocate(&free, w.requested, &w.numa);
            let w = self.workloads.get_mut(key).expect("key from the map");
            match result {
                Ok(c) => {
                    taken.union_with(&c);
                    w.cpus = Some(c);
                    w.pending = None;
                }
                Err(e) => {
                    let available = match &e {
                        AllocError::NotEnough { available, .. }
                        | AllocError::NotEnoughWholeCores { available, .. } => *available,
                        _ => free.len(),
                    };
                    w.pending = Some(Pending {
                        requested: w.requested,
                        available,
                        reason: e.to_string(),
                    });
                }
            }
        }
    }

    /// The target `cpuset.cpus` of every cgroup that gets one.
    fn targets(&self) -> BTreeMap<Rel, Arc<CpuSet>> {
        let shared = Arc::new(self.shared_pool());
        let online = Arc::new(self.topo.online().clone());
        let assigned: BTreeMap<&str, Arc<CpuSet>> = self
            .workloads
            .iter()
            .filter_map(|(k, w)| Some((k.as_str(), Arc::new(w.cpus.clone()?))))
            .collect();
        let mut targets: BTreeMap<Rel, Arc<CpuSet>> = BTreeMap::new();
        for (rel, e) in &self.cgroups {
            let t = match e.role {
                Role::Exclusive => Some(assigned.get(&*e.key).unwrap_or(&shared).clone()),
                // The parent comes first in path order and has the same set.
                Role::Inside => cgroup::parent(rel).and_then(|p| targets.get(p).cloned()),
                Role::Structural => Some(online.clone()),
                Role::Shared => Some(shared.clone()),
                // Given back what it had before it was pinned: its parent's
                // CPUs (all online ones when the parent's are not known).
                Role::Unmanaged if e.ours => {
                    let parent = cgroup::parent(rel);
                    let from_parent = parent.and_then(|p| {
                        targets
                            .get(p)
                            .cloned()
                            .or_else(|| self.cgroups.get(p)?.cpus.clone().filter(|c| !c.is_empty()))
                    });
                    Some(from_parent.unwrap_or_else(|| online.clone()))
                }
                Role::Unmanaged => None,
            };
            if let Some(t) = t {
                targets.insert(rel.clone(), t);
            }
        }
        // Ancestor closure, deepest first so that it carries all the way up:
        // an ancestor that had a target of its own carries it further when its
        // turn comes (it sorts before its descendants), so the walk stops
        // there; one widened here only (unmanaged) does not.
        let rels: Vec<Rel> = targets.keys().rev().cloned().collect();
        let mut widened_only: BTreeSet<Rel> = BTreeSet::new();
        for rel in rels {
            let Some(t) = targets.get(&rel).cloned() else {
                continue;
            };
            let mut p = cgroup::parent(&rel);
            while let Some(anc) = p {
                let Some((anc_rel, e)) = self.cgroups.get_key_value(anc) else {
                    break;
                };
                match targets.get_mut(anc) {
                    Some(at) => {
                        if !t.is_subset(at) {
                            Arc::make_mut(at).union_with(&t);
                        }
                        if !widened_only.contains(anc) {
                            break;
                        }
                    }
                    None => {
                        // An unmanaged ancestor is widened only when it lacks
                        // CPUs.
                        if self.lacks(e, &t) {
                            let cur = e.cpus.as_deref().cloned().unwrap_or_default();
                            targets.insert(anc_rel.clone(), Arc::new(cur.union(&t)));
                            widened_only.insert(anc_rel.clone());
                        }
                    }
                }
                p = cgroup::parent(anc);
            }
        }
        targets
    }

    /// Orders the writes: widen every changed cgroup to old ∪ new top-down, then
    /// narrow to new bottom-up (exclusive cgroups first at each depth). In v1 this
    /// never asks a parent to drop a CPU a child still uses (EBUSY) nor gives a
    /// child a CPU its parent lacks (EACCES). `cpuset.mems` is set before a
    /// cgroup's CPUs so nothing can join it with an empty set.
    fn writes(&self, targets: &BTreeMap<Rel, Arc<CpuSet>>) -> Vec<Write> {
        let mut widen: Vec<(usize, &str, Write)> = Vec::new();
        let mut narrow: Vec<(usize, Role, &str, Write)> = Vec::new();
        let empty = CpuSet::new();
        for (rel, target) in targets {
            let Some(e) = self.cgroups.get(rel) else {
                continue;
            };
            if target.is_empty() {
                continue;
            }
            let depth = cgroup::depth(rel);
            if let Some(mems) = self.target_mems(e, target)
                && e.mems.as_deref() != Some(&mems)
                && !mems.is_empty()
            {
                let write = |set: CpuSet| Write {
                    rel: rel.clone(),
                    file: File::Mems,
                    set: Arc::new(set),
                };
                // As for CPUs: widen top-down, narrow bottom-up (v1 refuses a
                // parent's mems without a child's nodes). Unknown or empty:
                // set at once, before the CPUs.
                match e.mems.as_deref().filter(|m| !m.is_empty()) {
                    Some(current) => {
                        let wide = current.union(&mems);
                        if &wide != current {
                            widen.push((depth, rel, write(wide.clone())));
                        }
                        if wide != mems {
                            narrow.push((depth, e.role, rel, write(mems)));
                        }
                    }
                    None => widen.push((depth, rel, write(mems))),
                }
            }
            let current = e.cpus.as_deref().unwrap_or(&empty);
            if current == &**target {
                continue;
            }
            // A v2 structural cgroup left empty inherits all CPUs: leave it so.
            if current.is_empty() && self.settings.empty_inherits && e.role == Role::Structural {
                continue;
            }
            // Widen within the online CPUs (v2 keeps offline CPUs in cpuset.cpus).
            let wide = current.intersection(self.topo.online()).union(target);
            // Widen only when that adds CPUs; narrow when what stands then is
            // not the target.
            let widened = !wide.is_subset(current);
            let after = if widened { &wide } else { current };
            if after != &**target {
                narrow.push((
                    depth,
                    e.role,
                    rel,
                    Write {
                        rel: rel.clone(),
                        file: File::Cpus,
                        set: target.clone(),
                    },
                ));
            }
            if widened {
                // Share the target when that is what the widening writes.
                let set = if wide == **target {
                    target.clone()
                } else {
                    Arc::new(wide)
                };
                widen.push((
                    depth,
                    rel,
                    Write {
                        rel: rel.clone(),
                        file: File::Cpus,
                        set,
                    },
                ));
            }
        }
        // Stable sorts: within a cgroup, mems stays before cpus.
        widen.sort_by_key(|(d, rel, _)| (*d, *rel));
        narrow.sort_by(|a, b| (b.0, a.1, a.2).cmp(&(a.0, b.1, b.2)));
        widen
            .into_iter()
            .map(|(_, _, w)| w)
            .chain(narrow.into_iter().map(|(_, _, _, w)| w))
            .collect()
    }

    /// The `cpuset.mems` a cgroup must have, if it must change: the NUMA nodes of
    /// its exclusive CPUs with `align_memory`, else all memory nodes for a cgroup
    /// that has none (a new v1 cgroup; in v2 an empty set inherits) or whose
    /// nodes the daemon aligned before.
    fn target_mems(&self, e: &CgroupEntry, target: &CpuSet) -> Option<CpuSet> {
        let empty = e.mems.as_ref().is_some_and(|m| m.is_empty()) && !self.settings.empty_inherits;
        if self.settings.align_memory && matches!(e.role, Role::Exclusive | Role::Inside) {
            let nodes: CpuSet = self.topo.numa_of(target).into_iter().collect();
            let nodes = if self.settings.mems_all.is_empty() {
                nodes
            } else {
                nodes.intersection(&self.settings.mems_all)
            };
            if !nodes.is_empty() {
                return Some(nodes);
            }
        }
        if empty || e.mems_ours {
            let all = if self.settings.mems_all.is_empty() {
                self.topo.numa_nodes().keys().copied().collect()
            } else {
                self.settings.mems_all.clone()
            };
            return Some(all);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::Observed;
    use crate::cgroup::layout::classify;
    use crate::topology::synthetic::Shape;
    use proptest::prelude::*;

    fn set(s: &str) -> CpuSet {
        s.parse().unwrap()
    }

    /// 16 CPUs: 2 sockets × 4 cores × 2 threads; core c is {c, c+8}.
    fn topo() -> Topology {
        Shape {
            sockets: 2,
            numa_per_socket: 1,
            l3_per_numa: 1,
            cores_per_l3: 4,
            threads_per_core: 2,
        }
        .build()
    }

    fn engine() -> Engine {
        Engine::new(
            topo(),
            Settings {
                reserved: set("0,8"),
                managed: vec!["kubepods".into()],
                shared: vec!["system.slice".into()],
                ..Settings::default()
            },
            None,
        )
    }

    fn want(cpus: usize) -> Option<Intent> {
        Some(Intent {
            cpus,
            source: Source::Xattr,
            numa: Vec::new(),
        })
    }

    /// Adds cgroup `rel` with `cpus` as its current cpuset.
    fn add(e: &mut Engine, rel: &str, cpus: &str, intent: Option<Intent>) {
        let obs = Observed {
            rel: rel.into(),
            cpus: Some(set(cpus)),
            mems: Some(set("0-1")),
            ..Observed::default()
        };
        reading(e, obs, intent, &format!("cgroup:{rel}"));
    }

    /// Upserts what was "read", as the daemon does.
    fn reading(e: &mut Engine, obs: Observed, intent: Option<Intent>, key: &str) {
        let kind = classify(&obs.rel);
        e.upsert(Reading {
            obs,
            kind,
            intent,
            key: key.into(),
            problem: None,
            bundle: None,
        });
    }

    /// Applies every write as the kernel would (no rules), like a fake tree.
    fn apply(e: &mut Engine) -> Vec<Write> {
        let plan = e.plan();
        for w in &plan.writes {
            e.written(w, Ok(()));
        }
        plan.writes
    }

    fn target(e: &Engine, rel: &str) -> CpuSet {
        e.cgroups()[rel].target.as_deref().cloned().unwrap()
    }

    fn kube_tree(e: &mut Engine) {
        add(e, "kubepods", "0-15", None);
        add(e, "kubepods/burstable", "0-15", None);
        add(
            e,
            "kubepods/burstable/pod11111111-2222-3333-4444-555555555555",
            "0-15",
            None,
        );
        add(
            e,
            "kubepods/burstable/pod11111111-2222-3333-4444-555555555555/aaaa",
            "0-15",
            None,
        );
        add(e, "system.slice", "0-15", None);
    }

    const GUARANTEED: &str = "kubepods/pod99999999-2222-3333-4444-555555555555/bbbb";

    #[test]
    fn pins_and_shrinks_the_shared_pool_then_releases() {
        let mut e = engine();
        kube_tree(&mut e);
        add(
            &mut e,
            "kubepods/pod99999999-2222-3333-4444-555555555555",
            "0-15",
            None,
        );
        add(&mut e, GUARANTEED, "0-15", want(4));
        apply(&mut e);
        let pinned = target(&e, GUARANTEED);
        assert_eq!(pinned.len(), 4);
        assert!(pinned.is_disjoint(&set("0,8")), "reserved stay shared");
        let shared = set("0-15").difference(&pinned);
        assert_eq!(e.shared_pool(), shared);
        let burstable = "kubepods/burstable/pod11111111-2222-3333-4444-555555555555/aaaa";
        assert_eq!(target(&e, burstable), shared);
        assert_eq!(target(&e, "system.slice"), shared);
        // Structural cgroups are never shrunk.
        assert_eq!(target(&e, "kubepods"), set("0-15"));
        assert_eq!(target(&e, "kubepods/burstable"), set("0-15"));
        // A second plan with nothing new writes nothing.
        assert!(apply(&mut e).is_empty());

        e.forget(GUARANTEED);
        let writes = apply(&mut e);
        assert!(e.workloads().is_empty());
        assert_eq!(target(&e, burstable), set("0-15"));
        assert!(
            writes
                .iter()
                .any(|w| &*w.rel == burstable && *w.set == set("0-15"))
        );
    }

    #[test]
    fn widens_top_down_and_narrows_bottom_up() {
        let mut e = engine();
        kube_tree(&mut e);
        // A rule-managed job under an unmanaged parent that lacks CPUs 4-7.
        add(&mut e, "hpc.slice", "0-3,8-11", None);
        add(&mut e, "hpc.slice/job-1.scope", "0-3,8-11", want(8));
        let writes = e.plan().writes;
        let job = target(&e, "hpc.slice/job-1.scope");
        assert_eq!(job.len(), 8);
        let pos =
            |rel: &str, s: &CpuSet| writes.iter().position(|w| &*w.rel == rel && &*w.set == s);
        // The parent is widened (before the child's widening write)...
        let parent_wide = set("0-3,8-11").union(&job);
        let p = pos("hpc.slice", &parent_wide).expect("parent widened");
        let child_wide = set("0-3,8-11").union(&job);
        let c = pos("hpc.slice/job-1.scope", &child_wide).expect("child widened");
        assert!(p < c, "{writes:?}");
        // ...and the child narrowed last.
        let n = pos("hpc.slice/job-1.scope", &job).expect("child narrowed");
        assert!(c < n);
        // Shared cgroups narrow bottom-up: the burstable container before system.slice? Both at
        // their own depth; deeper first.
        for w in &writes {
            assert!(!w.set.is_empty(), "never an empty set");
        }
    }

    #[test]
    fn a_new_v1_cgroup_gets_mems_before_cpus() {
        let mut e = engine();
        kube_tree(&mut e);
        let obs = Observed {
            rel: "kubepods/burstable/pod11111111-2222-3333-4444-555555555555/cccc".into(),
            cpus: Some(CpuSet::new()),
            mems: Some(CpuSet::new()),
            ..Observed::default()
        };
        let rel = obs.rel.clone();
        reading(&mut e, obs, None, "k");
        let writes = e.plan().writes;
        let mine: Vec<&Write> = writes.iter().filter(|w| w.rel == rel).collect();
        assert_eq!(mine.len(), 2, "{mine:?}");
        assert_eq!(mine[0].file, File::Mems);
        assert_eq!(*mine[0].set, set("0-1"));
        assert_eq!(mine[1].file, File::Cpus);
    }

    #[test]
    fn pending_until_cpus_free_up() {
        let mut e = engine();
        kube_tree(&mut e);
        add(&mut e, "kubepods/a", "0-15", want(10));
        add(&mut e, "kubepods/b", "0-15", want(10));
        apply(&mut e);
        let a = &e.workloads()["cgroup:kubepods/a"];
        assert_eq!(a.cpus.as_ref().map(|c| c.len()), Some(10));
        let b = &e.workloads()["cgroup:kubepods/b"];
        assert_eq!(b.cpus, None);
        let p = b.pending.clone().unwrap();
        assert_eq!((p.requested, p.available), (10, 4));
        // While pending it runs in the shared pool.
        assert_eq!(target(&e, "kubepods/b"), e.shared_pool());
        e.forget("kubepods/a");
        apply(&mut e);
        let b = &e.workloads()["cgroup:kubepods/b"];
        assert_eq!(b.cpus.as_ref().map(|c| c.len()), Some(10));
        assert!(b.pending.is_none());
    }

    #[test]
    fn two_cgroups_of_one_workload_share_one_assignment() {
        let mut e = engine();
        kube_tree(&mut e);
        for rel in ["kubepods/pod1/old", "kubepods/pod1/new"] {
            let obs = Observed {
                rel: rel.into(),
                cpus: Some(set("0-15")),
                ..Observed::default()
            };
            reading(&mut e, obs, want(2), "pod:1/app");
        }
        apply(&mut e);
        assert_eq!(e.workloads().len(), 1);
        assert_eq!(
            target(&e, "kubepods/pod1/old"),
            target(&e, "kubepods/pod1/new")
        );
        assert_eq!(e.shared_pool().len(), 14);
    }

    #[test]
    fn start_up_adopts_valid_live_cpusets_then_reverts_foreign_writes() {
        let mut e = engine();
        kube_tree(&mut e);
        add(&mut e, "kubepods/a", "5-6", want(2));
        let writes = apply(&mut e);
        assert_eq!(target(&e, "kubepods/a"), set("5-6"), "live set kept");
        assert!(!writes.iter().any(|w| &*w.rel == "kubepods/a"));
        e.end_startup();
        // Someone resets the cpuset (the kubelet, a daemon-reload).
        e.observe_cpus("kubepods/a", Some(set("0-15")));
        let writes = apply(&mut e);
        assert!(
            writes
                .iter()
                .any(|w| &*w.rel == "kubepods/a" && *w.set == set("5-6"))
        );
        assert_eq!(e.cgroups()["kubepods/a"].cpus.as_deref(), Some(&set("5-6")));
    }

    #[test]
    fn after_a_restart_a_waiting_workload_does_not_take_a_pinned_ones_cpus() {
        // Found on the real kernel: the waiting workload sorts first.
        let mut e = engine();
        kube_tree(&mut e);
        add(&mut e, "kubepods/a-waiting", "0,8", want(14));
        add(&mut e, "kubepods/z-pinned", "1-7,9-15", want(14));
        apply(&mut e);
        assert_eq!(target(&e, "kubepods/z-pinned"), set("1-7,9-15"));
        assert!(e.workloads()["cgroup:kubepods/a-waiting"].pending.is_some());
    }

    #[test]
    fn state_hints_are_used_when_live_sets_are_not_valid() {
        let saved = SavedState {
            online: set("0-15"),
            assignments: [(
                "cgroup:kubepods/a".to_string(),
                SavedAssignment {
                    cpus: set("12-13"),
                    requested: 2,
                    cgroups: vec!["kubepods/a".into()],
                },
            )]
            .into(),
        };
        let mut e = Engine::new(
            topo(),
            Settings {
                reserved: set("0,8"),
                managed: vec!["kubepods".into()],
                ..Settings::default()
            },
            Some(saved),
        );
        kube_tree(&mut e);
        add(&mut e, "kubepods/a", "0-15", want(2));
        apply(&mut e);
        assert_eq!(target(&e, "kubepods/a"), set("12-13"));
        // A hint that overlaps the reserved CPUs is not valid.
        let mut e2 = engine();
        e2.hints.insert("cgroup:kubepods/b".into(), set("0,8"));
        add(&mut e2, "kubepods/b", "0-15", want(2));
        apply(&mut e2);
        assert!(target(&e2, "kubepods/b").is_disjoint(&set("0,8")));
    }

    #[test]
    fn a_smaller_machine_replans_only_what_it_affects() {
        let mut e = engine();
        kube_tree(&mut e);
        add(&mut e, "kubepods/low", "0-15", want(2));
        add(&mut e, "kubepods/high", "0-15", want(2));
        apply(&mut e);
        e.end_startup();
        let low = target(&e, "kubepods/low");
        let high = target(&e, "kubepods/high");
        // Take one CPU of `high` offline.
        let gone = high.first().unwrap();
        let cpus: Vec<_> = topo()
            .cpus()
            .iter()
            .copied()
            .filter(|c| c.cpu != gone)
            .collect();
        e.set_topology(Topology::new(cpus, CpuSet::new(), set(&gone.to_string())).unwrap());
        apply(&mut e);
        assert_eq!(
            target(&e, "kubepods/low"),
            low,
            "unaffected workload keeps its CPUs"
        );
        let now = target(&e, "kubepods/high");
        assert_eq!(now.len(), 2);
        assert!(!now.contains(gone));
        assert!(!e.shared_pool().contains(gone));
        // And back: the CPU joins the shared pool.
        e.set_topology(topo());
        apply(&mut e);
        assert!(e.shared_pool().contains(gone));
    }

    #[test]
    fn align_memory_puts_mems_on_the_nodes_of_the_exclusive_cpus() {
        let mut e = aligning_engine();
        kube_tree(&mut e);
        add(&mut e, "kubepods/pod1", "0-15", None);
        add(&mut e, "kubepods/pod1/c", "0-15", want(4));
        let writes = apply(&mut e);
        let cpus = target(&e, "kubepods/pod1/c");
        let node = e.topology().numa_of(&cpus);
        assert_eq!(node.len(), 1);
        let mems: CpuSet = node.into_iter().collect();
        let pos = |file| {
            writes
                .iter()
                .position(|w| &*w.rel == "kubepods/pod1/c" && w.file == file)
        };
        assert_eq!(e.cgroups()["kubepods/pod1/c"].mems.as_deref(), Some(&mems));
        assert!(pos(File::Mems) < pos(File::Cpus), "mems first: {writes:?}");
        // Shared cgroups keep all memory nodes.
        let shared = "kubepods/burstable/pod11111111-2222-3333-4444-555555555555/aaaa";
        assert_eq!(e.cgroups()[shared].mems.as_deref(), Some(&set("0-1")));
    }

    fn aligning_engine() -> Engine {
        Engine::new(
            topo(),
            Settings {
                reserved: set("0,8"),
                managed: vec!["kubepods".into()],
                align_memory: true,
                mems_all: set("0-1"),
                ..Settings::default()
            },
            None,
        )
    }

    /// Reads cgroup `rel` again as the kernel has it (what was last written)
    /// with `intent`.
    fn reread(e: &mut Engine, rel: &str, intent: Option<Intent>) {
        let c = e.cgroups()[rel].clone();
        let obs = Observed {
            rel: rel.into(),
            cpus: c.cpus.as_deref().cloned(),
            mems: c.mems.as_deref().cloned(),
            ..Observed::default()
        };
        let key = if intent.is_some() {
            format!("cgroup:{rel}")
        } else {
            String::new()
        };
        reading(e, obs, intent, &key);
    }

    fn mems(e: &Engine, rel: &str) -> CpuSet {
        e.cgroups()[rel]
            .mems
            .as_deref()
            .cloned()
            .unwrap_or_default()
    }

    #[test]
    fn aligned_mems_are_given_back_when_alignment_ends() {
        let mut e = aligning_engine();
        kube_tree(&mut e);
        add(&mut e, "kubepods/pod1", "0-15", None);
        add(&mut e, "kubepods/pod1/c", "0-15", want(4));
        apply(&mut e);
        let aligned = mems(&e, "kubepods/pod1/c");
        assert_eq!(aligned.len(), 1, "one node");
        // Alignment turned off (a reload): all nodes again, once.
        let mut settings = e.settings().clone();
        settings.align_memory = false;
        e.set_settings(settings);
        reread(&mut e, "kubepods/pod1/c", want(4));
        let writes = apply(&mut e);
        assert!(
            writes
                .iter()
                .any(|w| w.file == File::Mems && *w.set == set("0-1")),
            "{writes:?}"
        );
        assert_eq!(mems(&e, "kubepods/pod1/c"), set("0-1"));
        assert!(!e.cgroups()["kubepods/pod1/c"].mems_ours);
        assert!(apply(&mut e).is_empty(), "nothing more to write");

        // On again, then the workload stops asking: all nodes back as well.
        let mut settings = e.settings().clone();
        settings.align_memory = true;
        e.set_settings(settings);
        apply(&mut e);
        assert_eq!(mems(&e, "kubepods/pod1/c").len(), 1);
        reread(&mut e, "kubepods/pod1/c", None);
        apply(&mut e);
        assert_eq!(mems(&e, "kubepods/pod1/c"), set("0-1"));
    }

    #[test]
    fn mems_narrow_children_first() {
        let mut e = aligning_engine();
        kube_tree(&mut e);
        add(&mut e, "kubepods/pod1", "0-15", None);
        add(&mut e, "kubepods/pod1/c", "0-15", want(4));
        add(&mut e, "kubepods/pod1/c/sub", "0-15", None);
        let writes = apply(&mut e);
        let pos = |rel: &str| {
            writes
                .iter()
                .position(|w| &*w.rel == rel && w.file == File::Mems)
                .unwrap_or_else(|| panic!("no mems write of {rel}: {writes:?}"))
        };
        // v1 refuses a parent's mems without its children's nodes.
        assert!(
            pos("kubepods/pod1/c/sub") < pos("kubepods/pod1/c"),
            "{writes:?}"
        );
        assert_eq!(mems(&e, "kubepods/pod1/c"), mems(&e, "kubepods/pod1/c/sub"));
    }

    #[test]
    fn a_cgroup_already_on_what_it_gets_back_is_left_alone() {
        let mut e = engine();
        add(&mut e, "hpc", "0-15", None);
        add(&mut e, "hpc/job", "0-15", want(2));
        // Not managed: the job is Exclusive only by its request.
        apply(&mut e);
        assert!(e.cgroups()["hpc/job"].ours);
        // It stops asking, and someone already put it back on its parent's CPUs.
        add(&mut e, "hpc/job", "0-15", None);
        let writes = apply(&mut e);
        assert!(writes.iter().all(|w| &*w.rel != "hpc/job"), "{writes:?}");
        assert!(
            !e.cgroups()["hpc/job"].ours,
            "given back: left alone from now on"
        );
    }

    #[test]
    fn explicit_zero_and_inside_cgroups() {
        let mut e = engine();
        kube_tree(&mut e);
        add(&mut e, "kubepods/pod1", "0-15", None);
        add(&mut e, "kubepods/pod1/c", "0-15", want(2));
        add(&mut e, "kubepods/pod1/c/init.scope", "0-15", None);
        add(&mut e, "kubepods/pod1/z", "0-15", want(0));
        apply(&mut e);
        assert_eq!(
            target(&e, "kubepods/pod1/c/init.scope"),
            target(&e, "kubepods/pod1/c")
        );
        assert_eq!(e.cgroups()["kubepods/pod1/c/init.scope"].role, Role::Inside);
        assert_eq!(target(&e, "kubepods/pod1/z"), e.shared_pool());
    }

    /// A rule pins a job outside the managed trees, then an xattr `"0"`
    /// opts it out (on cgroupfs the xattr can only come after the mkdir): it
    /// gets its parent's CPUs back, not the ones no longer reserved for it.
    /// Found by the VM test bed.
    #[test]
    fn an_opted_out_unmanaged_cgroup_gets_its_parents_cpus_back() {
        let mut e = engine();
        add(&mut e, "hpc.slice", "0-15", None);
        add(&mut e, "hpc.slice/job-3.scope", "0-15", want(2));
        apply(&mut e);
        let pinned = target(&e, "hpc.slice/job-3.scope");
        assert_eq!(pinned.len(), 2);
        add(
            &mut e,
            "hpc.slice/job-3.scope",
            &pinned.to_string(),
            want(0),
        );
        let writes = apply(&mut e);
        assert!(
            writes
                .iter()
                .any(|w| &*w.rel == "hpc.slice/job-3.scope" && *w.set == set("0-15")),
            "{writes:?}"
        );
        assert_eq!(e.cgroups()["hpc.slice/job-3.scope"].role, Role::Unmanaged);
        // Given back once; from then on it is left alone.
        add(&mut e, "hpc.slice/job-3.scope", "3", want(0));
        assert!(apply(&mut e).is_empty());
    }

    #[test]
    fn without_reserved_cpus_the_lowest_is_held_back() {
        let mut e = Engine::new(
            topo(),
            Settings {
                managed: vec!["kubepods".into()],
                ..Settings::default()
            },
            None,
        );
        add(&mut e, "kubepods", "0-15", None);
        add(&mut e, "kubepods/a", "0-15", want(16));
        apply(&mut e);
        assert!(e.workloads()["cgroup:kubepods/a"].pending.is_some());
        assert_eq!(e.shared_pool(), set("0-15"));
        add(&mut e, "kubepods/a", "0-15", want(15));
        apply(&mut e);
        assert_eq!(e.shared_pool(), set("0"));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Add(u8, usize),
        Remove(u8),
        Foreign(u8),
        Offline(u8),
        Online,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u8..12, 0usize..7).prop_map(|(i, n)| Op::Add(i, n)),
            2 => (0u8..12).prop_map(Op::Remove),
            1 => (0u8..12).prop_map(Op::Foreign),
            1 => (0u8..16).prop_map(Op::Offline),
            1 => Just(Op::Online),
        ]
    }

    proptest! {
        #[test]
        fn invariants_hold_under_any_sequence(ops in proptest::collection::vec(op(), 1..40)) {
            let mut e = engine();
            kube_tree(&mut e);
            e.end_startup();
            for op in ops {
                match op {
                    Op::Add(i, n) => add(&mut e, &format!("kubepods/w{i}"), "0-15", want(n)),
                    Op::Remove(i) => e.forget(&format!("kubepods/w{i}")),
                    Op::Foreign(i) => e.observe_cpus(&format!("kubepods/w{i}"), Some(set("0-15"))),
                    Op::Offline(c) => {
                        let cpus: Vec<_> = topo().cpus().iter().copied().filter(|x| x.cpu != c as u32).collect();
                        e.set_topology(Topology::new(cpus, CpuSet::new(), CpuSet::new()).unwrap());
                    }
                    Op::Online => e.set_topology(topo()),
                }
                let writes = apply(&mut e);
                let online = e.topology().online().clone();
                let mut seen = CpuSet::new();
                for w in e.workloads().values() {
                    if let Some(c) = &w.cpus {
                        prop_assert!(c.is_disjoint(&seen), "overlap at {}", w.key);
                        prop_assert!(c.is_disjoint(e.reserved()), "reserved assigned");
                        prop_assert!(c.is_subset(&online));
                        prop_assert_eq!(c.len(), w.requested);
                        seen.union_with(c);
                    }
                }
                prop_assert!(!e.shared_pool().is_empty(), "shared pool empty");
                for w in &writes {
                    prop_assert!(!w.set.is_empty(), "empty write {:?}", w);
                }
                // After applying, every cgroup with a target has it.
                for (rel, c) in e.cgroups() {
                    if let Some(t) = &c.target {
                        prop_assert_eq!(c.cpus.as_ref(), Some(t), "{} not at target", rel);
                    }
                }
            }
        }
    }
}
