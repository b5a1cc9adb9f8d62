//! Roles and workload membership: the first step of a plan.
//!
//! A cgroup's role depends on its own request, its kind, the configured
//! subtrees and its parent's role (below an exclusive cgroup everything is
//! *inside*). So a plan over some cgroups looks at them parents first, and
//! at the whole subtree of any whose exclusiveness changed; a full plan looks
//! at every cgroup the same way. Membership is kept in step as roles change,
//! never rebuilt, so both reaches give the same workloads.

use std::collections::{BTreeMap, BTreeSet};

use super::entry::{CgroupEntry, Thin};
use super::{Engine, Role, Workload};
use crate::cgroup::{self, Rel, Scope};

/// What became of the workloads as roles were given.
#[derive(Debug, Default)]
pub(super) struct Members {
    /// A workload's members or request changed, or a workload came: only
    /// then (or when one goes) can assignments change.
    pub touched: bool,
    /// A cgroup joined or left a workload (the state file lists them).
    pub moved: bool,
    /// A workload lost its last cgroup and was released.
    pub released: bool,
    /// One released had CPUs: the shared pool grows.
    pub released_cpus: bool,
}

impl Engine {
    /// The role of a cgroup that neither asks for exclusive CPUs nor lies
    /// inside a cgroup that does; `holds`: a Slurm tree lies below it.
    fn base_role(scope: &Scope, rel: &str, structural: bool, holds: bool) -> Role {
        let managed = scope.managed(rel);
        if !managed && !scope.shared(rel) {
            Role::Unmanaged
        } else if holds {
            Role::Holder
        } else if managed && structural {
            Role::Structural
        } else {
            Role::Shared
        }
    }

    /// Gives cgroups their roles, parents first, and keeps the workloads'
    /// membership in step: `reach` names the cgroups to look at (`None`:
    /// every one). Returns the cgroups looked at, in path order (`None`:
    /// every one), and what became of the workloads.
    pub(super) fn update_roles(
        &mut self,
        reach: Option<BTreeSet<Rel>>,
    ) -> (Option<Vec<Rel>>, Members) {
        let mut walk = Walk {
            scope: &self.settings.scope,
            slurm: &self.slurm,
            workloads: &mut self.workloads,
            touched: BTreeSet::new(),
            joining: BTreeMap::new(),
            moved: false,
        };
        let seen = match reach {
            None => {
                // Cgroups whose children are inside an exclusive workload.
                let mut exclusive: BTreeSet<Rel> = BTreeSet::new();
                for (rel, e) in self.cgroups.iter_mut() {
                    let inside = cgroup::parent(rel).is_some_and(|p| exclusive.contains(p));
                    walk.visit(rel, e, inside);
                    if e.role.is_exclusive() {
                        exclusive.insert(rel.clone());
                    }
                }
                None
            }
            Some(mut todo) => {
                let mut seen = Vec::with_capacity(todo.len());
                // Parents sort before their children, and a subtree added
                // to the queue sorts after the cgroup that adds it.
                while let Some(rel) = todo.pop_first() {
                    let inside = cgroup::parent(&rel)
                        .and_then(|p| self.cgroups.get(p))
                        .is_some_and(|p| p.role.is_exclusive());
                    let Some(e) = self.cgroups.get_mut(&rel) else {
                        continue;
                    };
                    if walk.visit(&rel, e, inside) {
                        todo.extend(cgroup::subtree(&self.cgroups, &rel).skip(1).cloned());
                    }
                    seen.push(rel);
                }
                Some(seen)
            }
        };
        let Walk {
            mut touched,
            joining,
            moved,
            ..
        } = walk;
        for (key, rels) in joining {
            let w = self
                .workloads
                .entry(key.to_string())
                .or_insert_with(|| Workload::new(&key, self.next_seq));
            if w.seq == self.next_seq {
                self.next_seq += 1;
            }
            w.cgroups.extend(rels);
            touched.insert(key);
        }
        let mut members = Members {
            touched: !touched.is_empty() || std::mem::take(&mut self.expecting),
            moved: moved || self.membership_changed,
            released: false,
            released_cpus: false,
        };
        // A workload's request is its first cgroup's.
        for key in touched {
            let Some(w) = self.workloads.get_mut(&*key) else {
                continue;
            };
            let Some(intent) = w
                .cgroups
                .first()
                .and_then(|first| self.cgroups.get(first)?.intent.as_deref())
            else {
                continue;
            };
            w.ask(intent);
        }
        // Workloads without cgroups are released, but those announced
        // and waiting for theirs ([`Engine::expect`]).
        let left = &mut self.left_by_pod;
        self.workloads.retain(|_, w| {
            let keep = !w.cgroups.is_empty() || w.expected;
            if !keep {
                members.released = true;
                members.released_cpus |= w.cpus.is_some();
                if let (Some(cpus), Some(uid)) = (&w.cpus, super::pod_of_key(&w.key)) {
                    left.entry(uid.to_string()).or_default().union_with(cpus);
                }
            }
            keep
        });
        #[cfg(debug_assertions)]
        if members.released && self.forget_at_release {
            self.forget_another(&mut members);
        }
        while self.left_by_pod.len() > super::LEFT_BY_PODS_KEPT {
            self.left_by_pod.pop_first();
        }
        (seen, members)
    }
}

#[cfg(debug_assertions)]
impl Engine {
    /// Test hook for the soak's mutation check (`PINCTL_TEST_FORGET_RELEASE=1`
    /// in `pinctld`; debug builds only): every release is a buggy one that
    /// also forgets one other pinned workload. Its CPUs go back to the
    /// shared pool while its cgroups live, and they are planned on the
    /// shared pool from then on (no reading makes the workload again).
    /// Any release counts, a waiting workload's too: with one CPU to hand
    /// out (a 2-CPU machine) two workloads are never pinned at once.
    pub fn forget_at_release(&mut self, on: bool) {
        self.forget_at_release = on;
    }

    /// The mutant's bug ([`Self::forget_at_release`]): the first pinned
    /// workload, by key, is dropped as if it were released.
    fn forget_another(&mut self, members: &mut Members) {
        let pinned = self.workloads.values().find(|w| w.cpus.is_some());
        if let Some(key) = pinned.map(|w| w.key.clone()) {
            self.workloads.remove(&key);
            members.released_cpus = true;
        }
    }
}

/// A walk over cgroups giving them roles, and what it keeps as it goes.
struct Walk<'a> {
    scope: &'a Scope,
    /// The roots of Slurm's trees.
    slurm: &'a BTreeSet<Rel>,
    workloads: &'a mut BTreeMap<String, Workload>,
    /// Workloads whose members or request may have changed.
    touched: BTreeSet<Box<str>>,
    /// New workloads, created in key order once the walk is done.
    joining: BTreeMap<Box<str>, Vec<Rel>>,
    /// A cgroup joined or left a workload.
    moved: bool,
}

impl Walk<'_> {
    /// Gives cgroup `rel` (entry `e`) its role; `inside`: its parent is part
    /// of an exclusive workload. Returns whether it became, or stopped
    /// being, part of one itself (what is below it changes role with it).
    fn visit(&mut self, rel: &Rel, e: &mut CgroupEntry, inside: bool) -> bool {
        // Most nodes have no Slurm tree: then nothing is compared. A
        // workload that holds one keeps its CPUs (slurmd in a pinned
        // container: Slurm saw them when it started); any other cgroup that
        // holds one is never narrowed.
        let foreign = super::in_slurm_tree(self.slurm, rel);
        let (role, member) = if foreign {
            (Role::Foreign, Thin::default())
        } else if inside {
            (Role::Inside, Thin::default())
        } else if e.wants() {
            (Role::Exclusive, e.key.clone())
        } else {
            let holds = super::holds_slurm_tree(self.slurm, rel);
            (
                Engine::base_role(self.scope, rel, e.structural, holds),
                Thin::default(),
            )
        };
        let flipped = e.role.is_exclusive() != role.is_exclusive();
        if e.member_of != member {
            self.moved = true;
            if let Some(old) = e.member_of.get() {
                if let Some(w) = self.workloads.get_mut(old) {
                    w.cgroups.remove(rel);
                }
                self.touched.insert(old.into());
            }
            if let Some(new) = member.get() {
                match self.workloads.get_mut(new) {
                    Some(w) => {
                        w.cgroups.insert(rel.clone());
                        // Announced, it is now a workload like any other.
                        w.expected = false;
                        self.touched.insert(new.into());
                    }
                    None => self
                        .joining
                        .entry(new.into())
                        .or_default()
                        .push(rel.clone()),
                }
            }
        } else if let Some(key) = member.get() {
            // Its request may have changed.
            self.touched.insert(key.into());
        }
        e.role = role;
        e.member_of = member;
        flipped
    }
}
