//! Writes: the last step of a plan. The writes that bring each cgroup from
//! what it has to its target, in an order the kernel accepts at every step
//! (KERNEL-NOTES): widen top-down, narrow bottom-up, memory nodes before
//! CPUs.

use super::entry::CgroupEntry;
use super::targets::Targets;
use super::{Engine, File, Role, Write};
use crate::cgroup;
use crate::cpuset::CpuSet;
use std::sync::Arc;

impl Engine {
    /// Orders the writes: widen every changed cgroup to old ∪ new top-down, then
    /// narrow to new bottom-up (exclusive cgroups first at each depth). In v1 this
    /// never asks a parent to drop a CPU a child still uses (EBUSY) nor gives a
    /// child a CPU its parent lacks (EACCES). `cpuset.mems` is set before a
    /// cgroup's CPUs so nothing can join it with an empty set.
    pub(super) fn writes(&self, targets: &Targets) -> Vec<Write> {
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
        if self.settings.align_memory && e.role.is_exclusive() {
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
