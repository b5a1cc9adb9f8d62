//! Writes: the last step of a plan. The writes that bring each cgroup from
//! what it has to its target, in an order the kernel accepts at every step
//! (KERNEL-NOTES): widen top-down, narrow bottom-up, memory nodes before
//! CPUs.

use super::entry::CgroupEntry;
use super::targets::{Planned, Targets};
use super::{Engine, Role, Settings};
use crate::cgroup::{self, Rel};
use crate::cpuset::CpuSet;
use crate::topology::Topology;
use serde::Serialize;
use std::collections::BTreeSet;
use std::sync::Arc;

/// Which control file a write goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum File {
    Cpus,
    Mems,
    /// `cpuset.sched_load_balance` set to 0 (v1; see
    /// [`Settings::quiet_balance`]); the write's set is empty.
    Balance,
}

impl File {
    /// The control file's name ([`cgroup::file`]).
    pub fn name(self) -> &'static str {
        match self {
            File::Cpus => cgroup::file::CPUS,
            File::Mems => cgroup::file::MEMS,
            File::Balance => cgroup::file::SCHED_LOAD_BALANCE,
        }
    }
}

/// One write of the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    pub rel: Rel,
    pub file: File,
    pub set: Arc<CpuSet>,
    /// The plan it belongs to (the engine counts its plans): what is
    /// reported of a write of an older plan changes the cgroup, not the
    /// count of writes the last plan still waits for.
    pub plan: u64,
}

impl Write {
    /// What is written to the file.
    pub fn data(&self) -> String {
        match self.file {
            File::Cpus | File::Mems => self.set.to_string(),
            File::Balance => "0".to_string(),
        }
    }
}

/// A plan's writes, in order.
pub(super) struct Ordered {
    pub writes: Vec<Write>,
    /// The first `urgent` writes are urgent ([`super::Plan::urgent`]).
    pub urgent: usize,
    /// Unmanaged cgroups given back their CPUs already (no write needed):
    /// from now on left alone.
    pub given_back: Vec<Rel>,
}

impl Engine {
    /// Orders the writes: widen every changed cgroup to old ∪ new top-down, then
    /// narrow to new bottom-up (exclusive cgroups first at each depth). In v1 this
    /// never asks a parent to drop a CPU a child still uses (EBUSY) nor gives a
    /// child a CPU its parent lacks (EACCES). `cpuset.mems` is set before a
    /// cgroup's CPUs so nothing can join it with an empty set.
    ///
    /// Urgent writes come first, in that order among themselves: every write
    /// of an exclusive cgroup (or one below it), and of a cgroup widened over
    /// CPUs that are not in the shared pool (an ancestor that must hold an
    /// exclusive workload's CPUs). They depend on no other write: the rest
    /// only hands the shared pool around. Last come the load-balancing flags
    /// of shared cgroups that are not written now (v1).
    pub(super) fn writes(&self, targets: &Targets) -> Ordered {
        // (urgent, depth, rel, write); narrow adds the role.
        let mut widen: Vec<(bool, u16, &str, Write)> = Vec::new();
        let mut narrow: Vec<(bool, u16, Role, &str, Write)> = Vec::new();
        let mut lone: Vec<Write> = Vec::new();
        let mut given_back: Vec<Rel> = Vec::new();
        let empty = CpuSet::new();
        for Planned {
            rel,
            entry: e,
            target,
            parent,
        } in targets.each(self)
        {
            if target.is_empty() {
                continue;
            }
            let depth = e.depth;
            let current = e.cpus.as_deref().unwrap_or(&empty);
            let cpus_change =
                current != &**target && !self.inherits(rel, current, target, parent.map(|p| &**p));
            // Widen within the online CPUs (v2 keeps offline CPUs in cpuset.cpus).
            let wide = if cpus_change {
                current.intersection(self.topo.online()).union(target)
            } else {
                CpuSet::new()
            };
            // Widen only when that adds CPUs; narrow when what stands then is
            // not the target.
            let widened = cpus_change && !wide.is_subset(current);
            // An exclusive cgroup's writes are urgent; another's widening
            // is when it adds CPUs of the workloads (an ancestor that must
            // hold them), its narrowing never (children first, bottom-up).
            let exclusive = e.role.is_exclusive();
            let urgent = exclusive || (widened && !wide.difference(current).is_subset(&self.pool));
            let write = |file: File, set: Arc<CpuSet>| Write {
                rel: rel.clone(),
                file,
                set,
                plan: self.plans,
            };
            if let Some(mems) = self.target_mems(e, target)
                && e.mems.as_deref() != Some(&mems)
                && !mems.is_empty()
            {
                // As for CPUs: widen top-down, narrow bottom-up (v1 refuses a
                // parent's mems without a child's nodes). Unknown or empty:
                // set at once, before the CPUs.
                match e.mems.as_deref().filter(|m| !m.is_empty()) {
                    Some(current) => {
                        let wide = current.union(&mems);
                        if &wide != current {
                            widen.push((
                                urgent,
                                depth,
                                rel,
                                write(File::Mems, Arc::new(wide.clone())),
                            ));
                        }
                        if wide != mems {
                            narrow.push((
                                exclusive,
                                depth,
                                e.role,
                                rel,
                                write(File::Mems, Arc::new(mems)),
                            ));
                        }
                    }
                    None => widen.push((urgent, depth, rel, write(File::Mems, Arc::new(mems)))),
                }
            }
            // Before the first write of a shared cgroup: its own
            // load-balancing flag off, so this write and every later one
            // skip rebuilding the scheduler domains ([`Settings::quiet_balance`]).
            let quiet = (self.settings.quiet_balance && e.role == Role::Shared && !e.balance_off)
                .then(|| write(File::Balance, Arc::default()));
            if !cpus_change {
                // Not written now: the flag goes off anyway, last of all,
                // so that the first change of the shared pool finds it off.
                lone.extend(quiet);
                if e.role == Role::Unmanaged && e.ours && !e.mems_ours {
                    given_back.push(rel.clone());
                }
                continue;
            }
            let after = if widened { &wide } else { current };
            if widened {
                widen.extend(quiet.map(|q| (urgent, depth, &**rel, q)));
                // Share the target when that is what the widening writes.
                let set = if wide == **target {
                    target.clone()
                } else {
                    Arc::new(wide.clone())
                };
                widen.push((urgent, depth, rel, write(File::Cpus, set)));
            } else {
                narrow.extend(quiet.map(|q| (exclusive, depth, e.role, &**rel, q)));
            }
            if after != &**target {
                narrow.push((
                    exclusive,
                    depth,
                    e.role,
                    rel,
                    write(File::Cpus, target.clone()),
                ));
            }
        }
        // What an urgent write needs first: its ancestors widened (v1
        // refuses a child a CPU or a node its parent lacks), even with CPUs
        // of the shared pool (a workload that waits has the shared pool).
        let mut below_urgent: BTreeSet<&str> = BTreeSet::new();
        for rel in widen
            .iter()
            .map(|w| w.2)
            .chain(narrow.iter().map(|w| w.3))
            .zip(widen.iter().map(|w| w.0).chain(narrow.iter().map(|w| w.0)))
            .filter_map(|(rel, urgent)| urgent.then_some(rel))
        {
            let mut p = cgroup::parent(rel);
            while let Some(anc) = p {
                if !below_urgent.insert(anc) {
                    break;
                }
                p = cgroup::parent(anc);
            }
        }
        for w in &mut widen {
            w.0 |= below_urgent.contains(w.2);
        }
        // Stable sorts of writes made in path order: the same depth stays in
        // path order, and within a cgroup mems stays before the flag and the
        // CPUs (no path is compared). Urgent first (`true` sorts last, hence
        // the `!`).
        widen.sort_by_key(|(u, d, _, _)| (!*u, *d));
        narrow.sort_by_key(|(u, d, role, _, _)| (!*u, std::cmp::Reverse(*d), *role));
        let urgent = widen.iter().filter(|w| w.0).count() + narrow.iter().filter(|w| w.0).count();
        let (urgent_widen, rest_widen): (Vec<_>, Vec<_>) = widen.into_iter().partition(|w| w.0);
        let (urgent_narrow, rest_narrow): (Vec<_>, Vec<_>) = narrow.into_iter().partition(|w| w.0);
        let writes = urgent_widen
            .into_iter()
            .map(|w| w.3)
            .chain(urgent_narrow.into_iter().map(|w| w.4))
            .chain(rest_widen.into_iter().map(|w| w.3))
            .chain(rest_narrow.into_iter().map(|w| w.4))
            .chain(lone)
            .collect();
        Ordered {
            writes,
            urgent,
            given_back,
        }
    }

    /// Whether cgroup `rel`, whose own `cpuset.cpus` is `current`, already
    /// gets `target` from its parent, with no write of its own: in v2 a
    /// cgroup gets its own set ∩ its parent's (all of the parent's when its
    /// own is empty), so one that is empty or holds all of `target` gets
    /// `target` when its parent does. This is what makes a v2 shared-pool
    /// change a write per shared subtree (a QoS slice, `system.slice`, a
    /// pod whose parent holds exclusive CPUs too), not per container.
    /// `parent` is the parent's target ([`Planned::parent`]); the
    /// hierarchy's root, unknown, has every online CPU.
    pub(super) fn inherits(
        &self,
        rel: &str,
        current: &CpuSet,
        target: &CpuSet,
        parent: Option<&CpuSet>,
    ) -> bool {
        if !self.settings.empty_inherits || !(current.is_empty() || target.is_subset(current)) {
            return false;
        }
        match parent {
            Some(p) => p == target,
            None => {
                cgroup::parent(rel) == Some("")
                    && !self.cgroups.contains_key("")
                    && target == self.topo.online()
            }
        }
    }

    /// The `cpuset.mems` a cgroup must have, if it must change: the NUMA nodes of
    /// its exclusive CPUs with `align_memory`, else all memory nodes for a cgroup
    /// that has none (a new v1 cgroup; in v2 an empty set inherits) or whose
    /// nodes the daemon aligned before.
    fn target_mems(&self, e: &CgroupEntry, target: &CpuSet) -> Option<CpuSet> {
        let empty = e.mems.as_ref().is_some_and(|m| m.is_empty()) && !self.settings.empty_inherits;
        if e.role.is_exclusive()
            && let Some(nodes) = aligned_mems(&self.topo, &self.settings, target)
        {
            return Some(nodes);
        }
        if empty || e.mems_ours {
            return Some(all_mems(&self.topo, &self.settings));
        }
        None
    }
}

/// With `align_memory`, the memory nodes of an exclusive workload's CPUs
/// `target` (of those the daemon may use); `None` without it, or when none
/// of them is.
pub(super) fn aligned_mems(
    topo: &Topology,
    settings: &Settings,
    target: &CpuSet,
) -> Option<CpuSet> {
    if !settings.align_memory {
        return None;
    }
    let nodes: CpuSet = topo.numa_of(target).into_iter().collect();
    let nodes = if settings.mems_all.is_empty() {
        nodes
    } else {
        nodes.intersection(&settings.mems_all)
    };
    (!nodes.is_empty()).then_some(nodes)
}

/// Every memory node the daemon may use: what a cgroup whose nodes it
/// aligned is given back, and what fills an empty set.
pub(super) fn all_mems(topo: &Topology, settings: &Settings) -> CpuSet {
    if settings.mems_all.is_empty() {
        topo.numa_nodes().keys().copied().collect()
    } else {
        settings.mems_all.clone()
    }
}
