//! Baselines kept in the cgroups: which cgroups' [`crate::cgroup::XATTR_BASELINE`]
//! must be written (a pinned workload's first CPUs, issue #34) or emptied,
//! and what the daemon reports it wrote. It decides what is owed; it never
//! writes the xattr itself.

use std::collections::BTreeSet;

use super::Engine;
use crate::cgroup::Rel;
use crate::cpuset::CpuSet;

impl Engine {
    /// The cgroups whose [`crate::cgroup::XATTR_BASELINE`] must be written,
    /// with what: each cgroup of a pinned workload whose xattr does not hold
    /// the workload's baseline, and `None` (emptied) for each cgroup whose
    /// xattr holds one but is no pinned workload's any more.
    pub fn baselines_owed(&self) -> Vec<(Rel, Option<CpuSet>)> {
        let mut owed = Vec::new();
        self.each_baseline_owed(|rel, set| {
            owed.push((rel.clone(), set.cloned()));
            true
        });
        owed
    }

    /// Whether any baseline is owed (as [`Self::baselines_owed`], without
    /// building the list).
    pub fn any_baseline_owed(&self) -> bool {
        !self.each_baseline_owed(|_, _| false)
    }

    /// Calls `f` on each baseline owed until it returns `false`; `false`
    /// when it did.
    fn each_baseline_owed(&self, mut f: impl FnMut(&Rel, Option<&CpuSet>) -> bool) -> bool {
        let mut pinned = BTreeSet::new();
        for w in self.workloads.values() {
            let (Some(_), Some(base)) = (&w.cpus, &w.baseline) else {
                continue;
            };
            for rel in &w.cgroups {
                pinned.insert(rel);
                let kept = self.cgroups.get(rel).and_then(|e| e.baseline.as_deref());
                if self.cgroups.contains_key(rel) && kept != Some(base) && !f(rel, Some(base)) {
                    return false;
                }
            }
        }
        self.kept
            .iter()
            .filter(|r| !pinned.contains(r))
            .all(|rel| f(rel, None))
    }

    /// `rel`'s [`crate::cgroup::XATTR_BASELINE`] now holds `set` (`None`:
    /// emptied), or its write failed and is not tried again until the
    /// cgroup is read again or the baseline changes.
    pub fn baseline_kept(&mut self, rel: &str, set: Option<CpuSet>) {
        let set = set.map(|s| self.sets.get(s));
        let Some(e) = self.cgroups.get_mut(rel) else {
            return;
        };
        e.baseline = set;
        match e.baseline.is_some() {
            true => self.kept.insert(Rel::from(rel)),
            false => self.kept.remove(rel),
        };
    }
}
