//! The questions the daemon asks the engine of what it knows: which
//! cgroups it knows, what each asks and is, what a workload holds, whether
//! CPUs are free, and Slurm's trees. Every one reads; none changes the
//! engine or plans.

use std::sync::Arc;

use super::{Engine, Role, in_slurm_tree};
use crate::alloc;
use crate::cgroup::{self, Rel};
use crate::cpuset::CpuSet;
use crate::intent::{Bundle, Intent};

impl Engine {
    /// Whether the engine knows the `cpuset.mems` of `rel` well enough that
    /// a reconcile need not read them again ([`crate::intent::reads`]): known
    /// and not empty (only an empty set is ever filled in a cgroup the
    /// daemon does not pin), not an exclusive workload's (aligned to its
    /// CPUs) and not set by the daemon. A cgroup that turns out to want CPUs
    /// has them read anyway.
    pub fn mems_known(&self, rel: &str) -> bool {
        self.cgroups.get(rel).is_some_and(|e| {
            e.mems.as_deref().is_some_and(|m| !m.is_empty())
                && !e.mems_ours
                && !e.role.is_exclusive()
        })
    }

    /// Puts the sets the engine knows of a known cgroup in `obs` (its
    /// `cpuset.cpus`, its `cpuset.mems` or both), read before the daemon
    /// wrote them (or saw them written).
    pub fn keep_sets(&self, obs: &mut cgroup::Observed, cpus: bool, mems: bool) {
        if let Some(e) = self.cgroups.get(&obs.rel) {
            if cpus {
                obs.cpus = e.cpus.as_deref().cloned();
            }
            if mems {
                obs.mems = e.mems.as_deref().cloned();
            }
        }
    }

    /// The number of known cgroups.
    pub fn len(&self) -> usize {
        self.cgroups.len()
    }

    /// Whether no cgroup is known.
    pub fn is_empty(&self) -> bool {
        self.cgroups.is_empty()
    }

    /// Every known cgroup, in path order.
    pub fn known(&self) -> impl Iterator<Item = &Rel> {
        self.cgroups.keys()
    }

    /// The cgroups whose set is known and not empty, with it: at start-up,
    /// their target, or a step on the way to it that this daemon or one
    /// before it wrote.
    pub fn held_sets(&self) -> impl Iterator<Item = (&Rel, &Arc<CpuSet>)> {
        self.cgroups
            .iter()
            .filter_map(|(rel, e)| Some((rel, e.cpus.as_ref().filter(|c| !c.is_empty())?)))
    }

    /// The stored path of `rel`, when known (so callers can share it).
    pub fn rel(&self, rel: &str) -> Option<&Rel> {
        self.cgroups.get_key_value(rel).map(|(k, _)| k)
    }

    /// Whether `rel` is known.
    pub fn knows(&self, rel: &str) -> bool {
        self.cgroups.contains_key(rel)
    }

    /// The known cgroups at or below `rel`.
    pub fn subtree(&self, rel: &str) -> Vec<Rel> {
        cgroup::subtree(&self.cgroups, rel).cloned().collect()
    }

    /// How many children of cgroup `rel` are known: a range walk over its
    /// subtree.
    pub fn known_children(&self, rel: &str) -> usize {
        let depth = cgroup::depth(rel) + 1;
        cgroup::subtree(&self.cgroups, rel)
            .filter(|k| cgroup::depth(k) == depth)
            .count()
    }

    /// The bundle read for cgroup `rel`, kept so that a rescan need not read
    /// it again (a bundle never changes for a container id).
    pub fn bundle(&self, rel: &str) -> Option<Arc<Bundle>> {
        self.cgroups.get(rel)?.bundle.clone()
    }

    /// What `rel` asks, as last read.
    pub fn intent(&self, rel: &str) -> Option<&Intent> {
        self.cgroups.get(rel)?.intent.as_deref()
    }

    /// The problem with `rel`'s request, as last read.
    pub fn problem(&self, rel: &str) -> Option<&str> {
        self.cgroups.get(rel)?.problem.get()
    }

    /// Whether `rel` is part of an exclusive workload (its cgroup, or below).
    pub fn is_exclusive(&self, rel: &str) -> bool {
        self.cgroups.get(rel).is_some_and(|e| e.role.is_exclusive())
    }

    /// Whether `rel` runs on the shared pool of a managed subtree.
    pub fn is_shared(&self, rel: &str) -> bool {
        self.cgroups
            .get(rel)
            .is_some_and(|e| e.role == Role::Shared)
    }

    /// Whether `rel` is kubepods structure (the root, a QoS parent, a pod).
    pub fn is_structural(&self, rel: &str) -> bool {
        self.cgroups.get(rel).is_some_and(|e| e.structural)
    }

    /// Whether a cgroup at or below `rel` still has a cpuset the daemon wrote
    /// for an exclusive workload, not yet given back.
    pub fn holds_ours(&self, rel: &str) -> bool {
        cgroup::subtree(&self.cgroups, rel).any(|r| {
            let e = &self.cgroups[r];
            e.ours || e.mems_ours
        })
    }

    /// Whether `n` more CPUs could be given now, as the allocator would
    /// give them (in whole cores with `whole_cores`), from NUMA nodes `numa`
    /// alone when any are named: `Err` with the free CPUs' count (on those
    /// nodes) and who holds the others (workload key, CPUs) when they could
    /// not.
    pub fn room_for(
        &self,
        n: usize,
        numa: &[u32],
        whole_cores: bool,
    ) -> Result<(), (usize, Vec<(String, usize)>)> {
        let held = self
            .workloads
            .values()
            .filter_map(|w| w.cpus.as_ref())
            .fold(self.held_elsewhere(), |acc, c| acc.union(c));
        let mut free = self
            .topo
            .online()
            .difference(&self.reserved)
            .difference(&held);
        if !numa.is_empty() {
            free = free.intersection(&self.numa_cpus(numa));
        }
        let opts = alloc::Options {
            reserved: self.reserved.clone(),
            full_pcpus_only: self.settings.alloc.full_pcpus_only || whole_cores,
            ..self.settings.alloc.clone()
        };
        match alloc::allocate(&self.topo, &free, n, &opts) {
            Ok(_) => Ok(()),
            Err(_) => {
                let jobs = self.job_cores();
                let mut holders: Vec<(String, usize)> = self
                    .workloads
                    .values()
                    .filter_map(|w| Some((w.key.clone(), w.cpus.as_ref()?.len())))
                    .collect();
                if !jobs.is_empty() {
                    holders.push(("Slurm's jobs".to_string(), jobs.len()));
                }
                let others = self.elsewhere.difference(&jobs).difference(&self.reserved);
                if !others.is_empty() {
                    holders.push(("another CPU owner".to_string(), others.len()));
                }
                Err((free.len(), holders))
            }
        }
    }

    /// The online CPUs of NUMA nodes `numa`.
    pub fn numa_cpus(&self, numa: &[u32]) -> CpuSet {
        self.topo.cpus_of_nodes(numa)
    }

    /// The CPUs of the workload cgroup `rel` belongs to, when it is pinned.
    pub fn cpus_of(&self, rel: &str) -> Option<(&str, &CpuSet)> {
        let e = self.cgroups.get(rel)?;
        let w = self.workloads.get(e.member_of.get()?)?;
        Some((w.key.as_str(), w.cpus.as_ref()?))
    }

    /// The roots of Slurm's trees the engine knows, in path order.
    pub fn slurm_roots(&self) -> impl Iterator<Item = &Rel> {
        self.slurm.iter()
    }

    /// The roots of Slurm's trees whose parent the daemon would confine
    /// but leaves whole (a holder): what `pinctl status` says to move.
    pub fn slurm_held(&self) -> impl Iterator<Item = &Rel> {
        self.slurm.iter().filter(|r| {
            cgroup::parent(r)
                .and_then(|p| self.cgroups.get(p))
                .is_some_and(|p| p.role == Role::Holder)
        })
    }

    /// Whether cgroup `rel` lies in one of Slurm's trees: nothing of the
    /// daemon's writes there (the watchdog does not thaw it either).
    pub fn is_foreign(&self, rel: &str) -> bool {
        in_slurm_tree(&self.slurm, rel)
    }
}
