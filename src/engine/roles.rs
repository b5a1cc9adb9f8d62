//! Roles and workload membership: the first step of a plan.
//!
//! A cgroup's role depends on its own request, its kind, the configured
//! subtrees and its parent's role (below an exclusive cgroup everything is
//! *inside*). So a plan over some cgroups looks at them parents first, and
//! at the whole subtree of any whose exclusiveness changed; a full plan looks
//! at every cgroup the same way. Membership is kept in step as roles change,
//! never rebuilt, so both reaches give the same workloads.

use std::collections::{BTreeMap, BTreeSet};

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
    /// inside a cgroup that does.
    fn base_role(scope: &Scope, rel: &str, structural: bool) -> Role {
        let managed = scope.managed(rel);
        if managed && structural {
            Role::Structural
        } else if managed || scope.shared(rel) {
            Role::Shared
        } else {
            Role::Unmanaged
        }
    }

    /// Gives cgroups their roles, parents first, and keeps the workloads'
    /// membership in step: `reach` names the cgroups to look at (`None`:
    /// every one). Returns the cgroups looked at, in path order, and what
    /// became of the workloads.
    pub(super) fn update_roles(&mut self, reach: Option<BTreeSet<Rel>>) -> (Vec<Rel>, Members) {
        let mut seen = Vec::new();
        // Workloads whose members or request may have changed.
        let mut touched: BTreeSet<Box<str>> = BTreeSet::new();
        // New workloads, created in key order once the walk is done.
        let mut joining: BTreeMap<Box<str>, Vec<Rel>> = BTreeMap::new();
        match reach {
            None => {
                let all: Vec<Rel> = self.cgroups.keys().cloned().collect();
                for rel in &all {
                    self.update_role(rel, &mut touched, &mut joining);
                }
                seen = all;
            }
            Some(mut todo) => {
                // Parents sort before their children, and a subtree added
                // to the queue sorts after the cgroup that adds it.
                while let Some(rel) = todo.pop_first() {
                    if !self.cgroups.contains_key(&rel) {
                        continue;
                    }
                    if self.update_role(&rel, &mut touched, &mut joining) {
                        todo.extend(cgroup::subtree(&self.cgroups, &rel).skip(1).cloned());
                    }
                    seen.push(rel);
                }
            }
        }
        for (key, rels) in joining {
            let w = self
                .workloads
                .entry(key.to_string())
                .or_insert_with(|| Workload {
                    key: key.to_string(),
                    requested: 0,
                    source: crate::intent::Source::Xattr,
                    numa: Vec::new(),
                    cgroups: BTreeSet::new(),
                    cpus: None,
                    pending: None,
                    seq: self.next_seq,
                    tried: None,
                });
            if w.seq == self.next_seq {
                self.next_seq += 1;
            }
            w.cgroups.extend(rels);
            touched.insert(key);
        }
        let any_touched = !touched.is_empty();
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
            if (w.requested, &w.numa) != (intent.cpus, &intent.numa) {
                w.tried = None;
            }
            w.requested = intent.cpus;
            w.source = intent.source.clone();
            w.numa = intent.numa.clone();
        }
        // Workloads without cgroups are released.
        let mut members = Members {
            touched: any_touched,
            moved: self.members_moved,
            released: false,
            released_cpus: false,
        };
        self.members_moved = false;
        self.workloads.retain(|_, w| {
            let keep = !w.cgroups.is_empty();
            if !keep {
                members.released = true;
                members.released_cpus |= w.cpus.is_some();
            }
            keep
        });
        (seen, members)
    }

    /// Gives cgroup `rel` its role; its parent has its own already. Returns
    /// whether it became, or stopped being, part of an exclusive workload
    /// (what is below it changes role with it).
    fn update_role(
        &mut self,
        rel: &Rel,
        touched: &mut BTreeSet<Box<str>>,
        joining: &mut BTreeMap<Box<str>, Vec<Rel>>,
    ) -> bool {
        let inside = cgroup::parent(rel)
            .and_then(|p| self.cgroups.get(p))
            .is_some_and(|p| p.role.is_exclusive());
        let Some(e) = self.cgroups.get(rel) else {
            return false;
        };
        let (role, member) = if inside {
            (Role::Inside, None)
        } else if e.wants() {
            (Role::Exclusive, Some(e.key.clone()))
        } else {
            (
                Self::base_role(&self.settings.scope, rel, e.structural),
                None,
            )
        };
        let flipped = e.role.is_exclusive() != role.is_exclusive();
        if e.member_of != member {
            self.members_moved = true;
            if let Some(old) = &e.member_of {
                if let Some(w) = self.workloads.get_mut(&**old) {
                    w.cgroups.remove(rel);
                }
                touched.insert(old.clone());
            }
            if let Some(new) = &member {
                match self.workloads.get_mut(&**new) {
                    Some(w) => {
                        w.cgroups.insert(rel.clone());
                        touched.insert(new.clone());
                    }
                    None => joining.entry(new.clone()).or_default().push(rel.clone()),
                }
            }
        } else if let Some(key) = &member {
            // Its request may have changed.
            touched.insert(key.clone());
        }
        let e = self.cgroups.get_mut(rel).expect("looked up above");
        e.role = role;
        e.member_of = member;
        flipped
    }
}
