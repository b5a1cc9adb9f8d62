//! Assignment: which CPUs each workload owns. The second step of a plan,
//! always over every workload (there are few), earliest first.

use super::{Engine, Pending, Settings, Workload};
use crate::alloc::{self, AllocError};
use crate::cpuset::CpuSet;
use crate::topology::Topology;

/// What the allocator is called with.
struct Allocator<'a> {
    topo: &'a Topology,
    settings: &'a Settings,
    reserved: &'a CpuSet,
}

impl Allocator<'_> {
    /// Plans `n` CPUs from `free` with the configured options.
    fn allocate(&self, free: &CpuSet, n: usize, numa: &[u32]) -> Result<CpuSet, AllocError> {
        let opts = alloc::Options {
            reserved: self.reserved.clone(),
            numa_preference: numa.to_vec(),
            ..self.settings.alloc.clone()
        };
        alloc::allocate(self.topo, free, n, &opts)
    }

    /// Gives workload `w` CPUs from `usable` minus `taken` if it has none:
    /// `Some(true)` when it got them, `Some(false)` when it must wait (not
    /// tried again when nothing changed since it last tried), `None` when it
    /// had CPUs already.
    fn try_allocate(&self, w: &mut Workload, usable: &CpuSet, taken: &mut CpuSet) -> Option<bool> {
        if w.cpus.is_some() {
            return None;
        }
        let free = usable.difference(taken);
        // The allocator is deterministic: what failed on these free CPUs
        // fails again, the same way.
        if w.tried.as_ref() == Some(&free) {
            return Some(false);
        }
        match self.allocate(&free, w.requested, &w.numa) {
            Ok(c) => {
                taken.union_with(&c);
                w.cpus = Some(c);
                w.pending = None;
                w.tried = None;
                Some(true)
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
                w.tried = Some(free);
                Some(false)
            }
        }
    }
}

impl Engine {
    /// Keeps valid assignments and plans the others, earliest workload first.
    pub(super) fn assign_cpus(&mut self) {
        let usable = self.topo.online().difference(&self.reserved);
        let alloc = Allocator {
            topo: &self.topo,
            settings: &self.settings,
            reserved: &self.reserved,
        };
        let mut order: Vec<&mut Workload> = self.workloads.values_mut().collect();
        order.sort_by_key(|w| w.seq);
        let mut taken = CpuSet::new();
        // Pass 1: keep every assignment that is still valid.
        for w in order.iter_mut() {
            let keep = w.cpus.as_ref().is_some_and(|c| {
                c.len() == w.requested && c.is_subset(&usable) && c.is_disjoint(&taken)
            });
            match &w.cpus {
                Some(c) if keep => taken.union_with(c),
                _ => w.cpus = None,
            }
        }
        // Pass 2, at start-up only: every workload whose live cpuset (or else the
        // state file's hint) is a valid assignment keeps it, before anything is
        // planned, so a workload that waited before the restart cannot take
        // the CPUs of one that was pinned.
        if self.adopt_live {
            for w in order.iter_mut().filter(|w| w.cpus.is_none()) {
                let valid = |c: &CpuSet| {
                    c.len() == w.requested && c.is_subset(&usable) && c.is_disjoint(&taken)
                };
                let live = w
                    .cgroups
                    .iter()
                    .filter_map(|r| self.cgroups.get(r)?.cpus.as_deref());
                let adopted = live
                    .chain(self.hints.get(&w.key))
                    .find(|c| valid(c))
                    .cloned();
                if let Some(c) = adopted {
                    taken.union_with(&c);
                    w.cpus = Some(c);
                    w.pending = None;
                    w.tried = None;
                }
            }
        }
        // Pass 3: the allocator for the rest, earliest first. A workload
        // that fails before a later one is pinned tries again once, on what
        // is left then, so that what it waits for is what the next plan
        // would find too.
        let mut failed = false;
        for _ in 0..2 {
            let mut pinned_after_failure = false;
            for w in order.iter_mut() {
                match alloc.try_allocate(w, &usable, &mut taken) {
                    Some(true) => pinned_after_failure |= failed,
                    Some(false) => failed = true,
                    None => {}
                }
            }
            if !pinned_after_failure {
                break;
            }
        }
        self.refresh_pool();
    }
}
