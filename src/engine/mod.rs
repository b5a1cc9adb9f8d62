//! The engine: the daemon's model of the managed cgroups, and its plans.
//!
//! - Owns each cgroup's role and target, the workloads and their CPUs, the
//!   ordered writes, and why each is made ([`explain`]).
//! - Seven roles ([`Role`]): exclusive, inside, structural, shared,
//!   unmanaged, foreign, holder.
//! - Pure: the daemon feeds it readings ([`Engine::upsert`]) and results
//!   ([`Engine::written`]). It never touches a file; what it knows of a
//!   cgroup stays private to it.
//! - A plan runs four steps over a *reach* (every cgroup, or those that
//!   changed): `roles` → `assign` → `targets` → `writes` ([`Engine::plan`]).
//!   A plan over a reach gives what a full plan gives, except that a new
//!   pin's writes go first and the rest is owed ([`Plan::more`]).
//! - Every target holds its descendants' (v1 refuses a child CPU its parent
//!   lacks with EACCES; v2 silently falls back to the parent's set).
//! - v2: a cgroup that inherits its target is not written
//!   (`Engine::inherits`), so a shared-pool change is a write per subtree.
//!
//! # Invariants
//! - No CPU is assigned to two workloads; reserved CPUs are never assigned.
//! - The shared pool is never empty (with no reserved CPU online, the
//!   lowest online CPU is held back). No write carries an empty set.
//! - With `strict_reservation`, no managed shared cgroup gets a reserved
//!   CPU unless nothing else is left.

mod assign;
mod baseline;
mod entry;
pub mod explain;
mod plan;
mod questions;
mod roles;
mod saved;
mod targets;
mod workload;
mod writes;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::Serialize;

use crate::alloc;
use crate::api;
use crate::cgroup::{self, Rel, Scope};
use crate::cpuset::CpuSet;
pub use crate::intent::Reading;
use crate::intent::{Intent, Source};
use crate::topology::Topology;
use entry::{CgroupEntry, Sets};
pub use plan::Plan;
pub use saved::{SavedAssignment, SavedState};
pub use workload::{Pending, Workload};
pub use writes::{File, Write};

/// What the engine needs from the configuration.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// Reserved CPUs, resolved (a count already turned into a list).
    pub reserved: CpuSet,
    /// Allocator options; `reserved` and `numa_preference` are filled in here.
    pub alloc: alloc::Options,
    /// Which subtrees are managed and which shared.
    pub scope: Scope,
    /// Set `cpuset.mems` of exclusive workloads to their NUMA nodes.
    pub align_memory: bool,
    /// The memory nodes a new cgroup gets (the root's `cpuset.mems`).
    pub mems_all: CpuSet,
    /// cgroup v2: an empty `cpuset.cpus` means "the parent's CPUs", not "none"
    /// (v1: none, and no task can join).
    pub empty_inherits: bool,
    /// cgroup v1 with the root cpuset load-balancing (its
    /// `cpuset.sched_load_balance` is 1, the default): a shared cgroup's
    /// own flag is set to 0 before its first write. While the root's flag
    /// is 1 no other flag changes scheduling, but a write to a cpuset whose
    /// flag is 1 rebuilds the scheduler domains over every cpuset (its cost:
    /// KERNEL-NOTES, "cgroup v1 cpuset"). Off when the root's flag is 0: an
    /// operator is building isolated domains by hand.
    pub quiet_balance: bool,
    /// `strict_reservation`: the cgroups of the managed subtrees that run on
    /// the shared pool get it without the reserved CPUs
    /// ([`Engine::strict`]); `shared_cgroups` keep them.
    pub strict_reservation: bool,
    /// `device_alignment`: how a workload's CPUs follow its devices' NUMA
    /// nodes, unless it says otherwise ([`Workload::device_alignment`]).
    pub device_alignment: crate::config::DeviceAlignment,
}

/// A cgroup's role: it gives the cgroup's target cpuset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// A workload with exclusive CPUs: its assignment, or the shared pool
    /// while it is pending.
    Exclusive,
    /// Below an exclusive cgroup (a container's sub-cgroups): its exclusive
    /// ancestor's set, as v1 requires children ⊆ parent.
    Inside,
    /// The kubepods root, QoS parents and pod cgroups; they hold no tasks.
    /// v1: all online CPUs, as a narrowed parent makes runtimes fail with
    /// EACCES on an explicit wider cpuset (KERNEL-NOTES). v2, which refuses
    /// no such write: the shared pool, so what lies below follows them.
    Structural,
    /// Any other cgroup of a managed subtree or of `shared_cgroups`: the
    /// shared pool ([`Engine::strict`] with `strict_reservation`).
    Shared,
    /// Watched only because a rule might match below it: never written,
    /// except to widen it over an exclusive descendant.
    Unmanaged,
    /// Slurm's tree (`slurmstepd.scope` and below, [`crate::slurm`]): never
    /// written, whatever it asks for.
    Foreign,
    /// A cgroup the daemon would confine that holds Slurm's tree and asks
    /// for nothing: never narrowed (its parent's CPUs, all online ones when
    /// those are not known), so no job loses a CPU; its other children are
    /// confined one by one instead.
    Holder,
}

impl Role {
    /// Part of an exclusive workload: its cgroup or one below it.
    pub fn is_exclusive(self) -> bool {
        matches!(self, Role::Exclusive | Role::Inside)
    }
}

/// A failed read, write or verification, kept as the cgroup's status until
/// a later write succeeds, or (a failed read) a later reading reads it all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Failure {
    pub message: String,
    /// The errno of the failed call, when there was one.
    pub errno: Option<i32>,
    /// It is a reading's: a later reading that reads it all clears it.
    #[serde(skip)]
    pub read: bool,
}

/// A resize a plan made, or found it could not make ([`Engine::take_resizes`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resized {
    pub key: String,
    pub requested: usize,
    /// The CPUs it held before.
    pub old: CpuSet,
    /// The CPUs it holds now: `old` when the resize waits.
    pub new: CpuSet,
    /// Why it waits, when it does: told once per count asked.
    pub pending: Option<String>,
}

/// The most pods whose released CPUs the engine keeps for their next
/// containers ([`Engine::left_by_pod`]); beyond, the lowest UID goes.
const LEFT_BY_PODS_KEPT: usize = 4096;

/// The pod UID of workload key `key` (`pod:<uid>/<name>`).
fn pod_of_key(key: &str) -> Option<&str> {
    key.strip_prefix("pod:")?
        .split_once('/')
        .map(|(uid, _)| uid)
}

/// A set a workload held before, on someone's word ([`Engine::hints`]).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Hint {
    cpus: CpuSet,
    /// Its baseline (a resize's), when the state file saved one.
    baseline: Option<CpuSet>,
    /// The state file's word, which proves the set the workload's whatever
    /// its size. Another owner's proves nothing: only a live set equal to
    /// it, that the allocator could have given, is adopted.
    proven: bool,
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
    /// The shared pool: online CPUs minus every assignment.
    pool: Arc<CpuSet>,
    sets: Sets,
    /// Sets workloads held before, by workload key: the state file's
    /// assignments at start-up, or what another owner said its workloads
    /// held ([`Engine::adopt_handed_over`]). Checked before use.
    hints: BTreeMap<String, Hint>,
    /// At start-up, a workload's live cpuset is taken as its assignment when it
    /// is a valid one (the live cgroups are the truth).
    adopt_live: bool,
    /// Adoption is open again for the workloads another owner gave back
    /// alone: those [`Engine::hints`] names.
    adopt_only_hinted: bool,
    /// CPUs of isolated partitions (`isolation = "partition"`): the kernel
    /// takes them out of every other cgroup's effective set.
    isolated: CpuSet,
    next_seq: u64,
    /// Cgroups read or written since the last plan: the next plan can be made
    /// for them alone unless `full`.
    dirty: BTreeSet<Rel>,
    /// The next plan must look at every cgroup (the topology, the settings
    /// or the scope changed, a reconcile).
    full: bool,
    /// A plan gave new workloads their CPUs first, or was cut short: a full
    /// plan is owed for the rest ([`Plan::more`], [`Engine::plan_owed`]).
    /// Until it is made, plans over a reach make only their urgent writes.
    owed: bool,
    /// A workload lost a cgroup since the last plan (the state file lists
    /// them).
    membership_changed: bool,
    /// The plans made so far: the last one's number.
    plans: u64,
    /// The writes of the last plan not yet reported ([`Engine::written`],
    /// [`Engine::not_made`]): when a newer plan comes first, the last one
    /// was cut short, and the next full plan finishes it.
    unreported: usize,
    /// Exclusive cgroups whose `cpuset.cpus` a reading found changed from
    /// what the engine knew: someone else wrote over them. However it was
    /// read (its inotify echo, a whole reading after an xattr event, a
    /// reconcile), the daemon takes them ([`Engine::take_overwritten`]).
    overwritten: Vec<Rel>,
    /// The resizes made or found waiting since the last call of
    /// [`Engine::take_resizes`].
    resizes: Vec<Resized>,
    /// Cgroups whose [`crate::cgroup::XATTR_BASELINE`] holds a set (read or
    /// written): emptied once they are no pinned workload's.
    kept: BTreeSet<Rel>,
    /// The known roots of Slurm's trees ([`crate::slurm::is_root`]): what
    /// lies in them is foreign, what holds them a holder.
    slurm: BTreeSet<Rel>,
    /// The CPUs of Slurm's running jobs, with `[slurm] housekeeping`
    /// ([`Engine::set_job_cores`]): no new assignment or grow takes them,
    /// and they leave the shared pool unless reserved.
    jobs: CpuSet,
    /// A workload was announced or withdrawn ([`Self::expect`]): the next
    /// plan assigns CPUs again.
    expecting: bool,
    /// The CPUs another owner holds ([`Engine::set_elsewhere`]).
    elsewhere: CpuSet,
    /// The CPUs each pod's released containers held, by pod UID: its next
    /// containers draw from them first (an exclusive init container's go
    /// to its app containers). Forgotten with the pod's cgroup; at most
    /// [`LEFT_BY_PODS_KEPT`] pods.
    left_by_pod: BTreeMap<String, CpuSet>,
    /// The last plan's targets kept the reserved CPUs for the managed
    /// subtrees' shared cgroups despite `strict_reservation`
    /// ([`Plan::strict_fallback`]).
    strict_fallback: bool,
    /// Test hook, debug builds only ([`Engine::forget_at_release`]).
    #[cfg(debug_assertions)]
    forget_at_release: bool,
}

impl Engine {
    pub fn new(topo: Topology, settings: Settings, saved: Option<SavedState>) -> Self {
        let hints = saved
            .map(|s| {
                s.assignments
                    .into_iter()
                    .map(|(k, a)| {
                        let hint = Hint {
                            cpus: a.cpus,
                            baseline: a.baseline,
                            proven: true,
                        };
                        (k, hint)
                    })
                    .collect()
            })
            .unwrap_or_default();
        let mut engine = Engine {
            reserved: CpuSet::new(),
            topo,
            settings,
            cgroups: BTreeMap::new(),
            workloads: BTreeMap::new(),
            pool: Arc::default(),
            sets: Sets::default(),
            hints,
            adopt_live: true,
            adopt_only_hinted: false,
            isolated: CpuSet::new(),
            next_seq: 0,
            dirty: BTreeSet::new(),
            full: true,
            owed: false,
            membership_changed: false,
            plans: 0,
            unreported: 0,
            overwritten: Vec::new(),
            resizes: Vec::new(),
            kept: BTreeSet::new(),
            slurm: BTreeSet::new(),
            jobs: CpuSet::new(),
            expecting: false,
            elsewhere: CpuSet::new(),
            left_by_pod: BTreeMap::new(),
            strict_fallback: false,
            #[cfg(debug_assertions)]
            forget_at_release: false,
        };
        engine.reserved = engine.effective_reserved();
        engine.refresh_pool();
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

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The workloads that ask for exclusive CPUs, by key.
    pub fn workloads(&self) -> &BTreeMap<String, Workload> {
        &self.workloads
    }

    /// Ends start-up, or the adoption [`Self::adopt_handed_over`] opened
    /// again: from now on a workload's CPUs come from its assignment or the
    /// allocator, never from whatever its cpuset happens to say.
    pub fn end_startup(&mut self) {
        self.adopt_live = false;
        self.adopt_only_hinted = false;
        self.hints.clear();
    }

    /// Another owner gives its workloads back (the kubelet's static CPU
    /// manager is gone); `held` is what it said each held, by workload key.
    /// Until [`Self::end_startup`], plans adopt as at start-up, for those
    /// workloads alone: one keeps its live cpuset when that is the set
    /// named and the allocator could have given it for the count it asks
    /// (whole cores where asked), within the usable CPUs and no other's.
    /// So nothing the other owner placed moves, unless it asks otherwise.
    pub fn adopt_handed_over(&mut self, held: BTreeMap<String, CpuSet>) {
        self.hints = held
            .into_iter()
            .map(|(key, cpus)| {
                let hint = Hint {
                    cpus,
                    baseline: None,
                    proven: false,
                };
                (key, hint)
            })
            .collect();
        self.adopt_live = true;
        self.adopt_only_hinted = true;
        self.replan_all();
    }

    /// Online CPUs minus every assignment and the job cores
    /// ([`Self::job_cores`]). Never empty: the reserved CPUs stay in it.
    pub fn shared_pool(&self) -> CpuSet {
        (*self.pool).clone()
    }

    /// With `strict_reservation`, what the cgroups of the managed subtrees
    /// that run on the shared pool get: the shared pool without the
    /// reserved CPUs, or, when that leaves none (every other CPU is
    /// exclusive), the shared pool itself, reserved CPUs and all
    /// ([`api::Strict::of`]). `None` when the switch is off.
    pub fn strict(&self) -> Option<api::Strict> {
        self.settings
            .strict_reservation
            .then(|| api::Strict::of(&self.pool, &self.reserved))
    }

    /// Works out the shared pool again, after assignments, the job cores
    /// or the online CPUs changed.
    fn refresh_pool(&mut self) {
        let mut pool = self.topo.online().difference(&self.held_elsewhere());
        for w in self.workloads.values() {
            if let Some(cpus) = &w.cpus {
                pool.difference_with(cpus);
            }
        }
        self.pool = Arc::new(pool);
    }

    /// Sets the CPUs of Slurm's running jobs (empty with `[slurm]
    /// housekeeping` off); `true` when they changed, and then the next plan
    /// looks at every cgroup. A pinned workload keeps its CPUs even when a
    /// job has them too (`pinctl verify` names that conflict).
    pub fn set_job_cores(&mut self, cpus: CpuSet) -> bool {
        if cpus == self.jobs {
            return false;
        }
        self.jobs = cpus;
        self.refresh_pool();
        self.replan_all();
        true
    }

    /// Sets the CPUs another owner holds (the kubelet's static CPU
    /// manager's exclusive CPUs): as Slurm's job cores, no assignment or
    /// grow takes them and they leave the shared pool unless reserved.
    /// `true` when they changed.
    pub fn set_elsewhere(&mut self, cpus: CpuSet) -> bool {
        if cpus == self.elsewhere {
            return false;
        }
        self.elsewhere = cpus;
        self.refresh_pool();
        self.replan_all();
        true
    }

    /// What others hold, in force: Slurm's job cores and another owner's
    /// CPUs, online and not reserved.
    fn held_elsewhere(&self) -> CpuSet {
        self.jobs
            .union(&self.elsewhere)
            .intersection(self.topo.online())
            .difference(&self.reserved)
    }

    /// The job cores in force: the online CPUs of Slurm's running jobs
    /// that are not reserved (a reserved CPU stays in the shared pool, so
    /// that it is never empty).
    pub fn job_cores(&self) -> CpuSet {
        self.jobs
            .intersection(self.topo.online())
            .difference(&self.reserved)
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
            lifted: _,
            lifted_unkept: _,
            baseline,
            mems_read,
        } = r;
        let cpus = obs.cpus.map(|s| self.sets.get(s));
        let mems = obs.mems.map(|s| self.sets.get(s));
        let baseline = baseline.map(|s| self.sets.get(s));
        let rel = obs.rel.clone();
        self.dirty.insert(rel.clone());
        let known = self.cgroups.contains_key(&obs.rel);
        if !known && crate::slurm::is_root(&obs.rel) {
            // Its ancestors become holders, its tree foreign: every role
            // and target is looked at again.
            self.slurm.insert(obs.rel.clone());
            self.full = true;
        }
        let entry = self
            .cgroups
            .entry(obs.rel)
            .or_insert_with_key(|rel| CgroupEntry::new(rel));
        let before = entry.cpus.clone();
        if obs.unsure && known {
            // Part of what decides its request could not be read: the
            // request known stands, and so do the sets not read.
            entry.cpus = cpus.or(entry.cpus.take());
            if mems_read {
                entry.mems = mems.or(entry.mems.take());
            }
        } else {
            entry.update(&kind, intent, key, problem, bundle);
            entry.cpus = cpus;
            // Only a cgroup that wants CPUs has its baseline read: one that
            // no longer does keeps what it had, to be emptied.
            if entry.wants() {
                entry.baseline = baseline;
            }
            match entry.baseline {
                Some(_) => self.kept.insert(rel.clone()),
                None => self.kept.remove(&rel),
            };
            if mems_read {
                entry.mems = mems;
            }
        }
        // A failed read shows until a reading reads the cgroup whole; it
        // never hides a failed write or verification, which stands until a
        // write succeeds (a verification is not made again: hidden, the
        // fallback it found would be lost from the status).
        let read_failure = entry.failure.as_ref().is_none_or(|f| f.read);
        match obs.error {
            Some(message) if read_failure => {
                entry.failure = Some(Box::new(Failure {
                    message,
                    errno: None,
                    read: true,
                }))
            }
            None if read_failure && !obs.unsure => entry.failure = None,
            _ => {}
        }
        if known && entry.role == Role::Exclusive && entry.cpus != before {
            self.overwritten.push(rel);
        }
    }

    /// Updates the known `cpuset.cpus` of `rel` (after a foreign write).
    /// Returns whether that changed what the engine knows.
    pub fn observe_cpus(&mut self, rel: &str, cpus: Option<CpuSet>) -> bool {
        let Some((k, e)) = self.cgroups.get_key_value(rel) else {
            return false;
        };
        if e.cpus.as_deref() == cpus.as_ref() {
            return false;
        }
        let k = k.clone();
        if e.role == Role::Exclusive {
            self.overwritten.push(k.clone());
        }
        let cpus = cpus.map(|s| self.sets.get(s));
        if let Some(e) = self.cgroups.get_mut(&k) {
            e.cpus = cpus;
        }
        self.dirty.insert(k);
        true
    }

    /// The exclusive cgroups someone else wrote over since the last call
    /// (see `overwritten`).
    pub fn take_overwritten(&mut self) -> Vec<Rel> {
        std::mem::take(&mut self.overwritten)
    }

    /// The resizes made, or found waiting, by the plans since the last
    /// call.
    pub fn take_resizes(&mut self) -> Vec<Resized> {
        std::mem::take(&mut self.resizes)
    }

    /// A workload announced before its cgroup exists (NRI's
    /// `CreateContainer`): it is placed by the next plan as any new one, so
    /// that the runtime can make its cgroup with the CPUs it gets. The first
    /// cgroup read with the same key joins it, and from then on it is a
    /// workload like any other. A key that names a workload already known
    /// changes nothing (a container made again keeps its CPUs).
    pub fn expect(&mut self, key: &str, intent: &Intent) {
        if self.workloads.contains_key(key) {
            return;
        }
        let mut w = Workload::new(key, self.next_seq);
        self.next_seq += 1;
        w.ask(intent);
        w.expected = true;
        self.workloads.insert(key.to_string(), w);
        self.expecting = true;
    }

    /// The runtime says cgroup `rel`, which asks by the kubelet rule, now
    /// has a limit of `cpus` whole CPUs (NRI's `UpdateContainer`: an
    /// in-place resize), before its files say so: taken as its request, as
    /// a reading of the new limit would take it, and resized by the next
    /// plan by the usual rules. Whether its request changed. A request of
    /// another source does not follow the limit.
    pub fn limit_now(&mut self, rel: &str, cpus: usize) -> bool {
        let Some(rel) = self.rel(rel).cloned() else {
            return false;
        };
        let Some(intent) = self
            .cgroups
            .get_mut(&rel)
            .and_then(|e| e.intent.as_deref_mut())
        else {
            return false;
        };
        if !matches!(intent.source, Source::Kubelet) || cpus == 0 || intent.cpus == cpus {
            return false;
        }
        intent.cpus = cpus;
        self.dirty.insert(rel);
        true
    }

    /// The CPUs a cgroup at `rel` that runs on the shared pool gets: the
    /// shared pool, or with `strict_reservation` (in a managed subtree)
    /// the shared pool without the reserved CPUs, as a plan's target.
    pub fn shared_for(&self, rel: &str) -> CpuSet {
        match self.settings.scope.managed(rel) {
            true => self.managed_pool(),
            false => (*self.pool).clone(),
        }
    }

    /// The CPUs a cgroup of a managed subtree that runs on the shared pool
    /// gets ([`Self::shared_for`]).
    pub fn managed_pool(&self) -> CpuSet {
        match self.strict() {
            Some(strict) if !strict.fallback => strict.pool,
            _ => (*self.pool).clone(),
        }
    }

    /// The memory nodes an exclusive workload holding `cpus` gets, with
    /// `align_memory`: those of its CPUs (`None` without it).
    pub fn mems_for(&self, cpus: &CpuSet) -> Option<CpuSet> {
        writes::aligned_mems(&self.topo, &self.settings, cpus)
    }

    /// Withdraws an announcement ([`Self::expect`]): a workload that no
    /// cgroup joined is released by the next plan. One that a cgroup joined
    /// is the cgroups' business.
    pub fn unexpect(&mut self, key: &str) {
        if let Some(w) = self.workloads.get_mut(key).filter(|w| w.expected) {
            w.expected = false;
            self.expecting = true;
        }
    }

    /// Forgets `rel` and every cgroup below it (they were removed).
    pub fn forget(&mut self, rel: &str) {
        for k in self.subtree(rel) {
            self.cgroups.remove(&k);
            self.dirty.remove(&k);
            self.kept.remove(&k);
            if let cgroup::layout::Kind::Pod(pod) = cgroup::layout::classify(&k) {
                self.left_by_pod.remove(&pod.uid);
            }
        }
        self.forget_slurm(rel);
        // Its parent may have been widened over it: look at it again.
        if let Some(p) = cgroup::parent(rel).and_then(|p| self.rel(p)).cloned() {
            self.dirty.insert(p);
        }
        self.forgotten(rel);
    }

    /// Forgets cgroup `rel` alone, not what is below it.
    pub fn forget_one(&mut self, rel: &str) {
        self.kept.remove(rel);
        if self.cgroups.remove(rel).is_some() {
            // What is below it loses the parent its role came from.
            self.full = true;
        }
        self.dirty.remove(rel);
        // A Slurm root stays one while what lies below it is known: that
        // stays foreign.
        if cgroup::subtree(&self.cgroups, rel).next().is_none() && self.slurm.remove(rel) {
            self.full = true;
        }
        self.forgotten(rel);
    }

    /// Forgets the Slurm roots at or below `rel`: their holders are
    /// confined again by the next plan, a full one.
    fn forget_slurm(&mut self, rel: &str) {
        let before = self.slurm.len();
        self.slurm.retain(|s| !cgroup::is_within(s, rel));
        if self.slurm.len() != before {
            self.full = true;
        }
    }

    /// Takes the forgotten cgroups out of their workloads at once (the plan
    /// walks only the cgroups it knows). A workload left without cgroups is
    /// released by the next plan.
    fn forgotten(&mut self, rel: &str) {
        for w in self.workloads.values_mut() {
            let before = w.cgroups.len();
            w.cgroups.retain(|c| !cgroup::is_within(c, rel));
            if w.cgroups.len() != before {
                self.membership_changed = true;
                // Its request now comes from what is its first cgroup.
                if let Some(first) = w.cgroups.first() {
                    self.dirty.insert(first.clone());
                }
            }
        }
    }

    /// Replaces the topology (CPU hot-plug, a different machine). Assignments
    /// whose CPUs are all still usable are kept by the next plan; the others are
    /// re-planned; new CPUs join the shared pool.
    pub fn set_topology(&mut self, topo: Topology) {
        self.topo = topo;
        self.reserved = self.effective_reserved();
        self.refresh_pool();
        self.replan_all();
    }

    /// Replaces the settings (a reloaded configuration). As with a new
    /// topology, assignments that are still valid (the same count, no CPU
    /// now reserved) are kept by the next plan, which looks at every cgroup.
    pub fn set_settings(&mut self, settings: Settings) {
        self.settings = settings;
        self.reserved = self.effective_reserved();
        self.replan_all();
    }

    /// Makes the next plan look at every cgroup (a full reconcile), and
    /// every waiting workload try again.
    pub fn replan_all(&mut self) {
        self.full = true;
        for w in self.workloads.values_mut() {
            w.tried = None;
        }
    }

    /// Records the outcome of a write of the plan. A write that was
    /// planned and never made (a newer plan replaced the rest) needs no
    /// report: the next plan reaches its cgroup again.
    pub fn written(&mut self, write: &Write, result: Result<(), Failure>) {
        self.not_made(write);
        let Some(e) = self.cgroups.get_mut(&*write.rel) else {
            return;
        };
        if write.file == File::Balance {
            // Only a cost, never a failure: one that did not take is not
            // tried again until the daemon restarts.
            e.balance_off = true;
            return;
        }
        match result {
            Ok(()) => {
                let exclusive = e.role.is_exclusive();
                match write.file {
                    File::Cpus => {
                        e.cpus = Some(write.set.clone());
                        e.ours = exclusive;
                        // Given back: from now on left alone, no target.
                        if e.role == Role::Unmanaged {
                            e.target = None;
                        }
                    }
                    File::Mems => {
                        e.mems = Some(write.set.clone());
                        // Aligned memory nodes are the daemon's to give
                        // back, but not all of them: that is what it would
                        // give back (nothing would be written, and nothing
                        // would clear the mark).
                        e.mems_ours = exclusive
                            && self.settings.align_memory
                            && *write.set != writes::all_mems(&self.topo, &self.settings);
                    }
                    File::Balance => {}
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

    /// Records that a write of the plan was tried and found its cgroup gone
    /// (its removal is reported apart): the plan no longer waits for it.
    /// [`Self::written`] does this too.
    pub fn not_made(&mut self, write: &Write) {
        if write.plan == self.plans {
            self.unreported = self.unreported.saturating_sub(1);
        }
    }

    /// Whether `write` puts the last plan's target in its cgroup (not a
    /// widening on the way to it).
    pub fn is_target(&self, write: &Write) -> bool {
        self.cgroups
            .get(&*write.rel)
            .is_some_and(|e| e.target.as_deref() == Some(&*write.set))
    }

    /// The CPUs of the isolated partitions the daemon made: the effective
    /// set of a cgroup outside them lacks those CPUs ([`Self::verified`]).
    pub fn set_isolated(&mut self, cpus: CpuSet) {
        self.isolated = cpus;
    }

    /// Checks the effective set read back right after `write` of
    /// `cpuset.cpus`: when it wrote the cgroup's target, a mismatch (v2's
    /// silent fallback to the parent's set) is a failure. A widening write
    /// on the way (old ∪ new) is not checked: the cgroup's own set may list
    /// CPUs its parent no longer has. The CPUs of isolated partitions are
    /// missing from every other cgroup's effective set, as they should be.
    pub fn verified(&mut self, write: &Write, effective: CpuSet) {
        let Some(e) = self.cgroups.get_mut(&*write.rel) else {
            return;
        };
        if e.target.as_deref() != Some(&*write.set) {
            return;
        }
        let wanted = write.set.intersection(self.topo.online());
        if effective != wanted && effective != wanted.difference(&self.isolated) {
            e.failure = Some(Box::new(Failure {
                message: format!(
                    "effective CPUs {effective} differ from the requested {}",
                    write.set
                ),
                errno: None,
                read: false,
            }));
        }
    }
}

/// Whether cgroup `rel` lies in one of the Slurm trees rooted at `roots`.
fn in_slurm_tree(roots: &BTreeSet<Rel>, rel: &str) -> bool {
    roots.iter().any(|s| cgroup::is_within(rel, s))
}

/// Whether cgroup `rel` holds one of the Slurm trees rooted at `roots`.
fn holds_slurm_tree(roots: &BTreeSet<Rel>, rel: &str) -> bool {
    roots.iter().any(|s| cgroup::is_within(s, rel))
}

#[cfg(test)]
mod tests;
