//! The planner: one way to plan, over every cgroup or over those that
//! changed (the reach), with the same steps; see the module documentation of
//! [`super`].

use super::targets::Targets;
use super::writes::{aligned_mems, all_mems};
use super::{Engine, Role, Write};
use crate::cgroup::Rel;
use crate::cpuset::CpuSet;
use std::sync::Arc;

/// The result of [`Engine::plan`].
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// Writes in the order they must be made.
    pub writes: Vec<Write>,
    /// The first `urgent` writes give exclusive workloads their CPUs (and
    /// widen the ancestors that must hold them): the daemon makes them at
    /// once. The rest (the shared pool following) may be cut short by a
    /// newer plan: what was not written is planned again by the next full
    /// plan (a plan over a reach then makes only its urgent writes, and
    /// asks for a full one: [`Self::more`]).
    pub urgent: usize,
    /// Whether any assignment changed (the state file needs saving).
    pub assignments_changed: bool,
    /// These writes give new workloads their CPUs first, or come while an
    /// earlier plan was cut short or its rest is still owed; the rest of the
    /// change (the shared pool shrinking, what the earlier plan did not
    /// write) is planned by [`Engine::plan_owed`], a full plan, when the
    /// caller chooses (the daemon: when the tree is quiet). Plans over a
    /// reach made before then make only their urgent writes.
    pub more: bool,
    /// With `strict_reservation`, the managed subtrees' shared cgroups
    /// started (`Some(true)`) or stopped (`Some(false)`) keeping the
    /// reserved CPUs for want of any other ([`Engine::strict`]): the daemon
    /// logs it.
    pub strict_fallback: Option<bool>,
}

/// How assignments changed in a plan.
#[derive(Debug, Default)]
struct Changes {
    /// What the state file holds changed.
    saved: bool,
    /// Workloads without CPUs got some, from the shared pool.
    pinned: bool,
    /// Workloads that were there lost, changed or gave back CPUs: the
    /// shared pool grew or moved.
    moved: bool,
}

impl Engine {
    /// Decides roles, assignments and targets, and returns the writes that
    /// bring the known cpusets to their targets.
    pub fn plan(&mut self) -> Plan {
        let full = std::mem::take(&mut self.full);
        // Writes of an earlier plan never made (a newer plan came first),
        // or the rest of an earlier change: the owed full plan covers them.
        // A plan over a reach leaves them to it, so that it stays as cheap
        // as its reach.
        let cut_short = self.unreported > 0 || self.owed;
        self.plans += 1;
        let dirty = std::mem::take(&mut self.dirty);
        let (reached, members) = self.update_roles((!full).then_some(dirty));
        // Assignments change only with the workloads, the topology or the
        // settings (or at start-up, adopting live sets): otherwise, with
        // thousands of events a minute, they are left as they are.
        let mut changes = Changes::default();
        if full || members.touched || members.released || self.adopt_live {
            changes = self.reassign();
        }
        self.membership_changed = false;
        let assignments_changed = changes.saved || members.moved || members.released;
        let pinned = changes.pinned;
        let moved = changes.moved || members.released_cpus;

        // The reached cgroups' targets when that is the whole answer; after
        // a new pin, its CPUs go first and the shared pool follows.
        let reached_only = match &reached {
            Some(reached) if !moved => self.reached_targets(reached),
            _ => None,
        };
        let more = (pinned || cut_short) && reached_only.is_some();
        #[cfg(test)]
        if reached_only.is_some() {
            REACHED_PLANS.with(|n| n.set(n.get() + 1));
        }
        let (targets, scope) = match reached_only {
            Some(t) => (Targets::Reached(t), reached.unwrap_or_default()),
            None => (self.all_targets(), Vec::new()),
        };
        let super::writes::Ordered {
            mut writes,
            urgent,
            given_back,
        } = self.writes(&targets);
        // After a plan cut short, a plan over a reach makes only its urgent
        // writes: they depend on no other, while the rest might depend on
        // writes still outstanding (a parent narrowed before a child the
        // earlier plan was to narrow). The full plan that follows makes them.
        if more && cut_short {
            writes.truncate(urgent);
        }
        self.unreported = writes.len();
        self.keep_targets(targets, scope, &given_back);
        // A plan over every cgroup pays what was owed.
        self.owed = more;
        self.sets.purge();
        let fallback = self.strict().is_some_and(|s| s.fallback);
        let strict_fallback = (fallback != std::mem::replace(&mut self.strict_fallback, fallback))
            .then_some(fallback);
        Plan {
            writes,
            urgent,
            assignments_changed,
            more,
            strict_fallback,
        }
    }

    /// The full plan owed after a plan with [`Plan::more`] (a plain
    /// [`Self::plan`] when nothing is owed).
    pub fn plan_owed(&mut self) -> Plan {
        self.full |= self.owed;
        self.plan()
    }

    /// Assigns CPUs again, and says how that changed them. Who belongs to
    /// which workload is [`super::roles::Members`]' business: assignment changes no
    /// membership and neither adds nor removes a workload.
    fn reassign(&mut self) -> Changes {
        let before: Vec<Option<CpuSet>> = self.workloads.values().map(|w| w.cpus.clone()).collect();
        self.assign_cpus();
        let mut changes = Changes::default();
        for (was, w) in before.iter().zip(self.workloads.values()) {
            if *was == w.cpus {
                continue;
            }
            changes.saved = true;
            match was {
                // From the shared pool into a new assignment only.
                None => changes.pinned = true,
                Some(_) => changes.moved = true,
            }
        }
        changes
    }

    /// Stores the plan's targets: of the `reached` cgroups (a plan over a
    /// reach), or of every one. The `given_back` cgroups have what they are
    /// given back already: from now on they are left alone, with no target
    /// of their own.
    fn keep_targets(&mut self, targets: Targets, reached: Vec<Rel>, given_back: &[Rel]) {
        let (topo, settings) = (&self.topo, &self.settings);
        let keep = |e: &mut super::entry::CgroupEntry, target: Option<Arc<CpuSet>>| {
            // An unmanaged cgroup is widened over what is below it only while
            // it lacks CPUs: that is no target of its own to keep.
            e.target = target.filter(|_| e.role != Role::Unmanaged || e.ours);
            // An exclusive workload's cgroup that holds its CPUs (and, with
            // `align_memory`, their memory nodes) holds what the daemon
            // assigned, whoever wrote them: a restarted daemon adopting the
            // live sets, too. Released, it is given them back.
            if e.role.is_exclusive()
                && let Some(target) = &e.target
            {
                if e.cpus.as_deref() == Some(&**target) {
                    e.ours = true;
                }
                // Not when they are all the nodes it would be given back:
                // then nothing is written back, and nothing would clear it.
                if let Some(mems) = e.mems.as_deref()
                    && aligned_mems(topo, settings, target).as_ref() == Some(mems)
                    && *mems != all_mems(topo, settings)
                {
                    e.mems_ours = true;
                }
            }
        };
        match targets {
            Targets::Reached(mut targets) => {
                for rel in reached {
                    if let Some(e) = self.cgroups.get_mut(&rel) {
                        keep(e, targets.remove(&rel));
                    }
                }
            }
            // A slot per known cgroup, in the same order.
            Targets::All(slots) => {
                for (e, slot) in self.cgroups.values_mut().zip(slots) {
                    keep(e, slot.target);
                }
            }
        }
        for rel in given_back {
            if let Some(e) = self.cgroups.get_mut(rel) {
                e.ours = false;
                e.target = None;
            }
        }
    }
}

#[cfg(test)]
thread_local! {
    /// Plans made over their reach alone, on this thread (tests check that
    /// the equivalence test is not won by always planning everything).
    pub(super) static REACHED_PLANS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}
