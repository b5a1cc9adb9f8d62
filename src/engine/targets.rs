//! Targets: the `cpuset.cpus` each cgroup must have, from its role, and the
//! ancestor closure (a cgroup's target holds its descendants'). The third
//! step of a plan: for every cgroup, or for the reached ones when that gives
//! the same answer ([`Engine::reached_targets`] says when it cannot).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::entry::CgroupEntry;
use super::{Engine, Role};
use crate::cgroup::{self, Rel};
use crate::cpuset::CpuSet;

/// The targets of some cgroups (a plan over a reach), by cgroup.
pub(super) type Reached = BTreeMap<Rel, Arc<CpuSet>>;

/// A plan's targets: of every known cgroup, or of the reached ones.
pub(super) enum Targets {
    /// One slot per known cgroup, in path order (the engine's map's):
    /// looked up by position, never by path, so that a plan over tens of
    /// thousands of cgroups compares no paths.
    All(Vec<Slot>),
    Reached(Reached),
}

/// The target of one cgroup in a plan over every cgroup.
pub(super) struct Slot {
    pub target: Option<Arc<CpuSet>>,
    /// The slot of its parent, when the parent is known.
    pub parent: Option<u32>,
}

/// One cgroup of a plan, as [`Targets::each`] gives it.
pub(super) struct Planned<'a> {
    pub rel: &'a Rel,
    pub entry: &'a CgroupEntry,
    pub target: &'a Arc<CpuSet>,
    /// Its parent's target in this plan (a parent a plan over a reach did
    /// not reach: the last plan's), if any.
    pub parent: Option<&'a Arc<CpuSet>>,
}

impl Targets {
    /// Every cgroup with a target, in path order.
    pub fn each<'a>(&'a self, engine: &'a Engine) -> Box<dyn Iterator<Item = Planned<'a>> + 'a> {
        match self {
            Targets::All(slots) => Box::new(engine.cgroups.iter().zip(slots).filter_map(
                |((rel, entry), slot)| {
                    Some(Planned {
                        rel,
                        entry,
                        target: slot.target.as_ref()?,
                        parent: slot.parent.and_then(|p| slots[p as usize].target.as_ref()),
                    })
                },
            )),
            Targets::Reached(map) => Box::new(map.iter().filter_map(|(rel, target)| {
                let entry = engine.cgroups.get(rel)?;
                let parent = cgroup::parent(rel).and_then(|p| {
                    map.get(p)
                        .or_else(|| engine.cgroups.get(p)?.target.as_ref())
                });
                Some(Planned {
                    rel,
                    entry,
                    target,
                    parent,
                })
            })),
        }
    }
}

/// What every target is made of, computed once per plan.
struct Pools {
    shared: Arc<CpuSet>,
    /// What the cgroups of the managed subtrees that run on the shared pool
    /// get: the shared pool, or with `strict_reservation` the shared pool
    /// without the reserved CPUs ([`Engine::strict`]).
    workload: Arc<CpuSet>,
    online: Arc<CpuSet>,
    /// Each workload's CPUs, made shareable as its cgroups ask for them.
    assigned: BTreeMap<Box<str>, Arc<CpuSet>>,
}

/// Whether every descendant of cgroup `a` sorts before `b`, which sorts
/// after `a`: `b` neither lies below `a` nor extends its name with a
/// character that sorts before `/`.
fn past(a: &str, b: &str) -> bool {
    match b.strip_prefix(a) {
        _ if a.is_empty() => false,
        Some(rest) => rest.as_bytes().first().is_some_and(|&c| c > b'/'),
        None => true,
    }
}

impl Engine {
    fn pools(&self) -> Pools {
        let workload = match self.strict() {
            Some(strict) if !strict.fallback => Arc::new(strict.pool),
            _ => self.pool.clone(),
        };
        Pools {
            shared: self.pool.clone(),
            workload,
            online: Arc::new(self.topo.online().clone()),
            assigned: BTreeMap::new(),
        }
    }

    /// The pool cgroup `rel` gets when it runs on the shared pool: with
    /// `strict_reservation`, a cgroup of a managed subtree gets no reserved
    /// CPU (they are for `shared_cgroups`).
    fn pool_of(&self, rel: &str, pools: &Pools) -> Arc<CpuSet> {
        if self.settings.strict_reservation && self.settings.scope.managed(rel) {
            pools.workload.clone()
        } else {
            pools.shared.clone()
        }
    }

    /// The target of cgroup `rel` by its role alone, before the closure;
    /// `parent` is its parent's (`None` when it has none).
    fn own_target(
        &self,
        rel: &str,
        e: &CgroupEntry,
        pools: &mut Pools,
        parent: Option<Arc<CpuSet>>,
    ) -> Option<Arc<CpuSet>> {
        match e.role {
            Role::Exclusive => {
                let Some(cpus) = self.workloads.get(&*e.key).and_then(|w| w.cpus.as_ref()) else {
                    return Some(self.pool_of(rel, pools));
                };
                let shared = pools
                    .assigned
                    .entry(Box::from(&*e.key))
                    .or_insert_with(|| Arc::new(cpus.clone()));
                Some(shared.clone())
            }
            // The parent comes first in path order and has the same set.
            Role::Inside => parent,
            // v1: never shrunk (runtimes write explicit sets wider than the
            // parent and v1 refuses them). v2 refuses nothing: the shared
            // pool (strict: without the reserved CPUs), so that what lies
            // below follows it without a write.
            Role::Structural if self.settings.empty_inherits => Some(pools.workload.clone()),
            Role::Structural => Some(pools.online.clone()),
            Role::Shared => Some(self.pool_of(rel, pools)),
            // Never narrowed, so that no job of Slurm's loses a CPU.
            Role::Holder => Some(self.parents_set(rel, parent, pools)),
            // Given back what it had before it was pinned.
            Role::Unmanaged if e.ours => Some(self.parents_set(rel, parent, pools)),
            Role::Unmanaged | Role::Foreign => None,
        }
    }

    /// The CPUs of the parent of cgroup `rel`: its target `parent`, else
    /// its known set, else every online CPU.
    fn parents_set(&self, rel: &str, parent: Option<Arc<CpuSet>>, pools: &Pools) -> Arc<CpuSet> {
        parent
            .or_else(|| {
                let p = self.cgroups.get(cgroup::parent(rel)?)?;
                p.cpus.clone().filter(|c| !c.is_empty())
            })
            .unwrap_or_else(|| pools.online.clone())
    }

    /// The target `cpuset.cpus` of every cgroup that gets one.
    pub(super) fn all_targets(&self) -> Targets {
        let mut pools = self.pools();
        let entries: Vec<(&Rel, &CgroupEntry)> = self.cgroups.iter().collect();
        let mut slots: Vec<Slot> = Vec::with_capacity(entries.len());
        // Cgroups whose descendants may still come, by slot. A cgroup's
        // descendants sort right after it but for siblings that extend its
        // name with a character before `/` (`kubepods.slice` sorts between
        // `kubepods` and `kubepods/burstable`): one leaves the stack only
        // once a path sorts beyond all of its descendants' (monotone from the
        // top: what lies above it on the stack extends its name).
        let mut stack: Vec<(u32, &Rel)> = Vec::new();
        for (i, &(rel, e)) in entries.iter().enumerate() {
            while stack.last().is_some_and(|(_, top)| past(top, rel)) {
                stack.pop();
            }
            // Its nearest known ancestor, when that is its parent.
            let parent = stack
                .iter()
                .rev()
                .find(|(_, anc)| cgroup::is_within(rel, anc))
                .filter(|&&(slot, _)| {
                    u32::from(entries[slot as usize].1.depth) + 1 == u32::from(e.depth)
                })
                .map(|&(slot, _)| slot);
            let from_parent = parent.and_then(|p| slots[p as usize].target.clone());
            slots.push(Slot {
                target: self.own_target(rel, e, &mut pools, from_parent),
                parent,
            });
            stack.push((i as u32, rel));
        }
        // Ancestor closure, deepest first so that it carries all the way up:
        // an ancestor that had a target of its own carries it further when its
        // turn comes (it sorts before its descendants), so the walk stops
        // there; one widened here only (unmanaged) does not.
        let mut widened_only = vec![false; slots.len()];
        for i in (0..slots.len()).rev() {
            let Some(t) = slots[i].target.clone() else {
                continue;
            };
            let mut p = slots[i].parent;
            while let Some(anc) = p.map(|p| p as usize) {
                match &mut slots[anc].target {
                    Some(at) => {
                        if !t.is_subset(at) {
                            Arc::make_mut(at).union_with(&t);
                        }
                        if !widened_only[anc] {
                            break;
                        }
                    }
                    None => {
                        // An unmanaged ancestor is widened only when it lacks
                        // CPUs.
                        let e = entries[anc].1;
                        if self.lacks(e, &t) {
                            let cur = e.cpus.as_deref().cloned().unwrap_or_default();
                            slots[anc].target = Some(Arc::new(cur.union(&t)));
                            widened_only[anc] = true;
                        }
                    }
                }
                p = slots[anc].parent;
            }
        }
        Targets::All(slots)
    }

    /// The targets of the `reached` cgroups (path order) alone, or `None`
    /// when those could differ from what [`Self::all_targets`] gives them or
    /// when another cgroup's target would change: a target that changed and
    /// that ancestors may have been widened over, a cgroup given back its
    /// parent's CPUs, an ancestor that lacks a new target's CPUs.
    pub(super) fn reached_targets(&self, reached: &[Rel]) -> Option<Reached> {
        let mut pools = self.pools();
        let mut targets = Reached::new();
        for rel in reached {
            let Some(e) = self.cgroups.get(rel) else {
                continue;
            };
            if e.role == Role::Unmanaged && e.ours {
                return None;
            }
            let parent = cgroup::parent(rel).and_then(|p| {
                targets
                    .get(p)
                    .or_else(|| self.cgroups.get(p)?.target.as_ref())
                    .cloned()
            });
            let mut t = self.own_target(rel, e, &mut pools, parent);
            // A structural or shared cgroup holds the CPUs of the workloads
            // pinned below it (the closure, as `all_targets` makes it).
            if let Some(own) = &t
                && let Some(closed) = self.closure(rel, e.role, own)
                && closed != **own
            {
                t = Some(Arc::new(closed));
            }
            // An exclusive cgroup's target is its workload's CPUs, which no
            // ancestor was widened over but by this check below.
            if e.role != Role::Exclusive && e.target.is_some() && e.target != t {
                return None;
            }
            // ...and which the cgroups below it take too: when it changes
            // (a waiting workload pinned), they must be written first (v1
            // refuses to narrow a parent below a child's CPUs with EBUSY).
            if e.role == Role::Exclusive
                && e.target != t
                && cgroup::subtree(&self.cgroups, rel).nth(1).is_some()
            {
                return None;
            }
            if let Some(t) = t {
                targets.insert(rel.clone(), t);
            }
        }
        // The ancestor closure must already hold.
        for (rel, t) in &targets {
            let mut p = cgroup::parent(rel);
            while let Some(anc) = p {
                let Some(a) = self.cgroups.get(anc) else {
                    break;
                };
                match (targets.get(anc), a.target.as_ref()) {
                    // An ancestor with a target of its own carries it
                    // further; one only widened does not (none is kept).
                    (Some(at), _) if t.is_subset(at) => break,
                    (Some(_), _) => return None,
                    // A kept target is what the last plan wanted, not
                    // always what the cgroup has (a release's widening
                    // replaced before it was written): it must hold both.
                    (None, Some(at)) if t.is_subset(at) && !self.lacks(a, t) => break,
                    (None, Some(_)) => return None,
                    (None, None) if self.lacks(a, t) => return None,
                    (None, None) => {}
                }
                p = cgroup::parent(anc);
            }
        }
        Some(targets)
    }

    /// The target of a structural, shared or holder cgroup `rel` whose own
    /// is `own`:
    /// with the CPUs of every pinned workload below it (only those, and
    /// cgroups whose targets are the shared pool, lie below such a cgroup in
    /// a managed or shared subtree). `None` for the other roles, whose
    /// closure this does not know.
    fn closure(&self, rel: &str, role: Role, own: &CpuSet) -> Option<CpuSet> {
        if !matches!(role, Role::Structural | Role::Shared | Role::Holder) {
            return None;
        }
        let mut closed = own.clone();
        for w in self.workloads.values() {
            if let Some(cpus) = &w.cpus
                && w.cgroups
                    .iter()
                    .any(|c| &**c != rel && cgroup::is_within(c, rel))
            {
                closed.union_with(cpus);
            }
        }
        Some(closed)
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
}
