//! Assignment: which CPUs each workload owns. The second step of a plan,
//! always over every workload (there are few), earliest first.
//!
//! A pod's annotation `pinctl.io/cpus` reaches every container of the pod
//! but serves one at a time ([`pod_annotation_waiters`]); the others wait in
//! the shared pool and say why.

use std::collections::BTreeMap;

use super::entry::CgroupEntry;
use super::{Engine, Hint, Pending, Resized, Settings, Workload};
use crate::alloc::{self, AllocError};
use crate::cgroup::Rel;
use crate::config::DeviceAlignment;
use crate::cpuset::CpuSet;
use crate::intent::ANNOTATION_CPUS;
use crate::topology::Topology;

/// What the allocator is called with.
struct Allocator<'a> {
    topo: &'a Topology,
    settings: &'a Settings,
    reserved: &'a CpuSet,
    /// [`Engine::left_by_pod`].
    left_by_pod: &'a BTreeMap<String, CpuSet>,
}

/// Where a workload's devices want its CPUs ([`Allocator::near`]).
struct Near {
    /// Their NUMA nodes, ascending.
    nodes: Vec<u32>,
    /// On those nodes alone.
    required: bool,
}

impl Allocator<'_> {
    /// The NUMA nodes of workload `w`'s devices and whether its CPUs must
    /// lie there: none when it names its nodes itself (a rule's `numa`,
    /// the xattr's `@NODES`), when no device of it is placed, or with
    /// `device_alignment = "none"`.
    fn near(&self, w: &Workload) -> Near {
        let mode = w.device_alignment.unwrap_or(self.settings.device_alignment);
        if !w.numa.is_empty() || mode == DeviceAlignment::None {
            return Near {
                nodes: Vec::new(),
                required: false,
            };
        }
        let nodes = crate::devices::nodes_of(self.topo, &w.devices);
        Near {
            required: mode == DeviceAlignment::Require && !nodes.is_empty(),
            nodes,
        }
    }

    /// Plans `n` CPUs from `free` with the configured options: on its
    /// devices' nodes first ([`Self::near`]), or alone.
    fn allocate(&self, free: &CpuSet, w: &Workload) -> Result<CpuSet, Pending> {
        let near = self.near(w);
        let mut free = free.clone();
        if near.required {
            free = free.intersection(&self.topo.cpus_of_nodes(&near.nodes));
        }
        let numa_preference = match near.nodes.is_empty() {
            true => w.numa.clone(),
            false => near.nodes.clone(),
        };
        let prefer = super::pod_of_key(&w.key)
            .and_then(|uid| self.left_by_pod.get(uid))
            .cloned()
            .unwrap_or_default();
        let opts = alloc::Options {
            reserved: self.reserved.clone(),
            numa_preference,
            full_pcpus_only: self.settings.alloc.full_pcpus_only || w.whole_cores,
            prefer,
            ..self.settings.alloc.clone()
        };
        let n = w.requested;
        alloc::allocate(self.topo, &free, n, &opts).map_err(|e| {
            let available = match &e {
                AllocError::NotEnough { available, .. }
                | AllocError::NotEnoughWholeCores { available, .. } => *available,
                _ => free.len(),
            };
            let reason = match near.required {
                true => format!(
                    "{n} CPUs asked on NUMA {} {} (near {}), {available} free there ({e})",
                    if near.nodes.len() == 1 {
                        "node"
                    } else {
                        "nodes"
                    },
                    join_nodes(&near.nodes),
                    placed_devices(w)
                ),
                false => e.to_string(),
            };
            Pending {
                requested: n,
                available,
                reason,
            }
        })
    }

    /// Resizes workload `w` to the count it asks for, around the CPUs it
    /// has (issue #34): a grow takes the difference from `usable` minus
    /// `taken`, nearest first; a shrink keeps its baseline and drops the
    /// rest from its newest cores. One that cannot be met (no room, or below
    /// the baseline) keeps the CPUs it has and says why in `resize`. Returns
    /// what changed: a resize made, or one found waiting (once per count).
    fn resize(&self, w: &mut Workload, usable: &CpuSet, taken: &mut CpuSet) -> Option<Resized> {
        let c = w.cpus.clone()?;
        let (n, has) = (w.requested, c.len());
        if n == has {
            w.resize = None;
            return None;
        }
        let baseline = w.baseline.get_or_insert_with(|| c.clone()).clone();
        let outcome = if n > has {
            let free = usable.difference(taken);
            let grown = self.grow(&c, &free, n - has, w);
            grown.map(|extra| c.union(&extra)).map_err(|e| Pending {
                requested: n,
                available: free.len(),
                reason: format!("cannot grow from {has} to {n} CPUs ({e}); it keeps {c}"),
            })
        } else if n < baseline.len() {
            Err(Pending {
                requested: n,
                available: 0,
                reason: format!(
                    "{n} {} fewer than the {} it was first given ({baseline}), which a \
                     resize keeps; it keeps {c}",
                    if n == 1 { "CPU is" } else { "CPUs are" },
                    baseline.len()
                ),
            })
        } else if (self.settings.alloc.full_pcpus_only || w.whole_cores)
            && n % self.topo.threads_per_core() != 0
        {
            Err(Pending {
                requested: n,
                available: 0,
                reason: format!(
                    "{n} CPUs are not whole cores of {} threads, which it takes; it keeps {c}",
                    self.topo.threads_per_core()
                ),
            })
        } else {
            Ok(shrink(self.topo, &c, &baseline, n))
        };
        let told = w.resize.as_ref().is_some_and(|r| r.requested == n);
        let mut note = Resized {
            key: w.key.clone(),
            requested: n,
            old: c.clone(),
            new: c.clone(),
            pending: None,
        };
        match outcome {
            Ok(new) => {
                taken.difference_with(&c.difference(&new));
                taken.union_with(&new);
                note.new = new.clone();
                w.cpus = Some(new);
                w.resize = None;
            }
            Err(p) => {
                note.pending = Some(p.reason.clone());
                w.resize = Some(p);
                if told {
                    return None;
                }
            }
        }
        Some(note)
    }

    /// Resizes every pinned workload ([`Self::resize`]): the shrinks first,
    /// then the grows, earliest first. A grow then sees every CPU the
    /// shrinks give back, so the outcome is the same whatever plan makes it
    /// (a plan over a reach makes no second pass).
    fn resize_all(
        &self,
        order: &mut [&mut Workload],
        usable: &CpuSet,
        taken: &mut CpuSet,
    ) -> Vec<Resized> {
        let mut told = Vec::new();
        for grows in [false, true] {
            for w in order.iter_mut() {
                if w.cpus
                    .as_ref()
                    .is_some_and(|c| (w.requested > c.len()) == grows)
                {
                    told.extend(self.resize(w, usable, taken));
                }
            }
        }
        told
    }

    /// `need` more CPUs for a workload on `has`, from `free`: first the free
    /// threads of its own cores (unless it takes whole cores), then the
    /// allocator's pick, its NUMA nodes first, then its devices' (the
    /// affinity only grows). With `require`, from its devices' nodes alone.
    fn grow(
        &self,
        has: &CpuSet,
        free: &CpuSet,
        need: usize,
        w: &Workload,
    ) -> Result<CpuSet, AllocError> {
        let near = self.near(w);
        let free = match near.required {
            true => &free.intersection(&self.topo.cpus_of_nodes(&near.nodes)),
            false => free,
        };
        let whole = self.settings.alloc.full_pcpus_only || w.whole_cores;
        let mut extra = CpuSet::new();
        if !whole {
            let siblings = has
                .iter()
                .filter_map(|cpu| self.topo.core_index_of(cpu))
                .flat_map(|i| self.topo.cores()[i].cpus.iter().copied());
            for cpu in siblings {
                if extra.len() < need && free.contains(cpu) {
                    extra.insert(cpu);
                }
            }
        }
        let rest = need - extra.len();
        if rest > 0 {
            let mut numa = self.topo.numa_of(has);
            for n in w.numa.iter().chain(&near.nodes) {
                if !numa.contains(n) {
                    numa.push(*n);
                }
            }
            let opts = alloc::Options {
                reserved: self.reserved.clone(),
                numa_preference: numa,
                full_pcpus_only: whole,
                ..self.settings.alloc.clone()
            };
            extra.union_with(&alloc::allocate(
                self.topo,
                &free.difference(&extra),
                rest,
                &opts,
            )?);
        }
        Ok(extra)
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
        match self.allocate(&free, w) {
            Ok(c) => {
                taken.union_with(&c);
                w.baseline = Some(c.clone());
                w.cpus = Some(c);
                w.pending = None;
                w.tried = None;
                Some(true)
            }
            Err(pending) => {
                w.pending = Some(pending);
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
        let elsewhere = self.held_elsewhere();
        let alloc = Allocator {
            topo: &self.topo,
            settings: &self.settings,
            reserved: &self.reserved,
            left_by_pod: &self.left_by_pod,
        };
        let adopter = Adopter {
            cgroups: &self.cgroups,
            hints: &self.hints,
            only_hinted: self.adopt_only_hinted,
            topo: &self.topo,
            usable: &usable,
            whole_cores: self.settings.alloc.full_pcpus_only,
        };
        let mut order: Vec<&mut Workload> = self.workloads.values_mut().collect();
        order.sort_by_key(|w| w.seq);
        // At start-up, a set to adopt counts as held: a pod's annotation
        // stays with the container that held it before the restart. A set
        // the state file or a kept baseline proves comes first: a waiting
        // container's shared set may have the size it asks for.
        let held: Vec<u8> = order
            .iter()
            .map(|w| {
                if w.cpus.is_some() {
                    return 3;
                }
                let found = match self.adopt_live {
                    true => adopter.candidates(w),
                    false => Vec::new(),
                };
                found
                    .iter()
                    .map(|c| 1 + u8::from(c.proven))
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let waiting = pod_annotation_waiters(&mut order, &held);
        let mut taken = CpuSet::new();
        // Pass 1: keep every assignment that is still valid, whatever its
        // size: a workload asking for another count is resized around it.
        for w in order.iter_mut() {
            let keep = w
                .cpus
                .as_ref()
                .is_some_and(|c| !c.is_empty() && c.is_subset(&usable) && c.is_disjoint(&taken));
            match &w.cpus {
                Some(c) if keep => taken.union_with(c),
                _ => {
                    w.cpus = None;
                    w.baseline = None;
                    w.resize = None;
                }
            }
        }
        // Pass 1b: resizes, each around the CPUs it keeps (at start-up,
        // once every set is adopted: below). From here only the open CPUs
        // are placed: not Slurm's job cores, nor another owner's CPUs
        // ([`Engine::set_elsewhere`]). A set kept above or adopted
        // below may hold some (a conflict `pinctl verify` names), but no
        // grow or new assignment takes one, none is counted free, and a
        // shrink that lets one go does not make it free.
        let open = usable.difference(&elsewhere);
        let mut resizes = Vec::new();
        if !self.adopt_live {
            resizes = alloc.resize_all(&mut order, &open, &mut taken);
        }
        // Pass 2, at start-up only: every workload whose live cpuset (or else the
        // state file's hint) is a valid assignment keeps it, before anything is
        // planned, so a workload that waited before the restart cannot take
        // the CPUs of one that was pinned.
        if self.adopt_live {
            let unpinned = order
                .iter_mut()
                .enumerate()
                .filter(|(i, w)| !waiting[*i] && w.cpus.is_none());
            for (_, w) in unpinned {
                let adopted = adopter
                    .candidates(w)
                    .into_iter()
                    .find(|c| c.cpus.is_disjoint(&taken));
                if let Some(Candidate {
                    cpus: c, baseline, ..
                }) = adopted
                {
                    taken.union_with(&c);
                    w.baseline = Some(baseline.unwrap_or_else(|| c.clone()));
                    w.cpus = Some(c);
                    w.pending = None;
                    w.tried = None;
                }
            }
            // Then their resizes: a grow made before every set is adopted
            // could take another workload's CPUs.
            resizes.extend(alloc.resize_all(&mut order, &open, &mut taken));
        }
        // Pass 3: the allocator for the rest, earliest first. A workload
        // that fails before a later one is pinned tries again once, on what
        // is left then, so that what it waits for is what the next plan
        // would find too.
        let mut failed = false;
        for _ in 0..2 {
            let mut pinned_after_failure = false;
            for (i, w) in order.iter_mut().enumerate() {
                if waiting[i] {
                    continue;
                }
                match alloc.try_allocate(w, &open, &mut taken) {
                    Some(true) => pinned_after_failure |= failed,
                    Some(false) => failed = true,
                    None => {}
                }
            }
            if !pinned_after_failure {
                break;
            }
        }
        let free = open.difference(&taken).len();
        for (_, w) in order.iter_mut().enumerate().filter(|(i, _)| waiting[*i]) {
            if let Some(p) = &mut w.pending {
                p.available = free;
            }
        }
        self.resizes.extend(resizes);
        self.refresh_pool();
    }
}

/// What decides, at start-up, which live sets are whose ([`Adopter::candidates`]).
struct Adopter<'a> {
    cgroups: &'a BTreeMap<Rel, CgroupEntry>,
    hints: &'a BTreeMap<String, Hint>,
    /// Only the workloads `hints` names are adopted
    /// ([`Engine::adopt_handed_over`]).
    only_hinted: bool,
    topo: &'a Topology,
    usable: &'a CpuSet,
    /// `full_pcpus_only`.
    whole_cores: bool,
}

impl Adopter<'_> {
    /// The sets workload `w` may be given at start-up, each with its
    /// baseline, first found first: its cgroups' live cpusets, then the
    /// state file's hint, each within the usable CPUs. A set is *proven*
    /// the workload's when the state file says so, or the baseline kept on
    /// the cgroup ([`crate::cgroup::XATTR_BASELINE`]) lies within it; then
    /// its size may differ from the count asked (a resize, done or
    /// waiting). Else only a set of the count asked is taken, and only as
    /// the allocator could have given it (whole cores where asked): a
    /// waiting workload's shared set may have that size by chance. Another
    /// owner's word ([`Hint::proven`] false) is not a set to take: it names
    /// the one live set that may be.
    fn candidates(&self, w: &Workload) -> Vec<Candidate> {
        let hint = self.hints.get(&w.key);
        if self.only_hinted && hint.is_none() {
            return Vec::new();
        }
        let live = w.cgroups.iter().filter_map(|r| {
            let e = self.cgroups.get(r)?;
            Some((e.cpus.as_deref()?, e.baseline.as_deref()))
        });
        let proven = hint.filter(|h| h.proven);
        let claimed = hint.filter(|h| !h.proven).map(|h| &h.cpus);
        let whole = self.whole_cores || w.whole_cores;
        live.chain(proven.map(|h| (&h.cpus, h.baseline.as_ref())))
            .filter(|(c, _)| claimed.is_none_or(|h| h == *c))
            .filter_map(|(c, kept)| {
                // The state file's baseline for its own set (none saved:
                // the set itself), else the one kept on the cgroup.
                let base = match proven.filter(|h| h.cpus == *c) {
                    Some(h) => Some(h.baseline.as_ref().unwrap_or(&h.cpus)),
                    None => kept,
                };
                let base = base.filter(|b| !b.is_empty() && b.is_subset(c));
                let proven = base.is_some();
                let allocatable =
                    c.len() == w.requested && (!whole || self.topo.core_split(c).1 == 0);
                ((proven || allocatable) && !c.is_empty() && c.is_subset(self.usable)).then(|| {
                    Candidate {
                        cpus: c.clone(),
                        baseline: base.cloned(),
                        proven,
                    }
                })
            })
            .collect()
    }
}

/// A set a workload may be given at start-up ([`Adopter::candidates`]).
struct Candidate {
    cpus: CpuSet,
    baseline: Option<CpuSet>,
    /// The state file or a kept baseline says it was the workload's; else
    /// only its size says so.
    proven: bool,
}

/// NUMA nodes as the kernel lists them (`0-1,3`).
fn join_nodes(nodes: &[u32]) -> String {
    nodes.iter().copied().collect::<CpuSet>().to_string()
}

/// The devices of `w` that are placed, as a message names them.
fn placed_devices(w: &Workload) -> String {
    let names: Vec<String> = w
        .devices
        .iter()
        .filter(|l| l.place.is_ok())
        .map(|l| l.device.what.to_string())
        .collect();
    names.join(", ")
}

/// The `n` CPUs of `has` a shrink keeps: all of `baseline` (which `n` is
/// not below), then the others whole core by whole core, lowest first;
/// what goes is the highest cores' threads.
fn shrink(topo: &Topology, has: &CpuSet, baseline: &CpuSet, n: usize) -> CpuSet {
    let mut kept = baseline.intersection(has);
    let mut others: Vec<u32> = has.difference(&kept).iter().collect();
    // Whole cores stay together: by core, then by thread.
    others.sort_by_key(|&cpu| (topo.core_index_of(cpu).unwrap_or(usize::MAX), cpu));
    for cpu in others {
        if kept.len() >= n {
            break;
        }
        kept.insert(cpu);
    }
    kept
}

/// The workloads (by their index in `order`, earliest first) that ask by
/// their pod's annotation while another container of the pod holds it: the
/// one that holds CPUs most surely (`held`: 3 holds them, 2 has a set to
/// adopt the state file or a kept baseline proves, 1 one its size alone
/// says is its, 0 none), the earliest of equals. Each waits, with no CPUs, saying why,
/// with nothing kept of a failed try (what is free is filled in once the
/// others are served). A container named in its own annotation
/// (`pinctl.io/cpus.<name>`) is not among them.
fn pod_annotation_waiters(order: &mut [&mut Workload], held: &[u8]) -> Vec<bool> {
    let mut holders: BTreeMap<String, usize> = BTreeMap::new();
    for (i, w) in order.iter().enumerate() {
        if let Some(pod) = pod_asking_by_annotation(w) {
            let holder = holders.entry(pod.to_string()).or_insert(i);
            if held[i] > held[*holder] {
                *holder = i;
            }
        }
    }
    let holder_of: Vec<Option<usize>> = order
        .iter()
        .map(|w| pod_asking_by_annotation(w).map(|pod| holders[pod]))
        .collect();
    let mut waiting = vec![false; order.len()];
    for (i, holder) in holder_of.into_iter().enumerate() {
        let Some(holder) = holder.filter(|&h| h != i) else {
            continue;
        };
        let name = container_of(&order[holder].key).to_string();
        let w = &mut order[i];
        waiting[i] = true;
        w.cpus = None;
        w.tried = None;
        w.pending = Some(Pending {
            requested: w.requested,
            available: 0,
            reason: format!(
                "the pod's annotation {ANNOTATION_CPUS} serves one container at a time, and \
                 container {name} holds it: name each container in its own annotation \
                 {ANNOTATION_CPUS}.<container name>"
            ),
        });
    }
    waiting
}

/// The pod of a workload that asks by its pod's annotation: the uid of its
/// key `pod:<uid>/<container>` (a workload keyed by its cgroup has no pod
/// known, and asks alone).
fn pod_asking_by_annotation(w: &Workload) -> Option<&str> {
    if !w.source.is_pod_annotation() {
        return None;
    }
    super::pod_of_key(&w.key)
}

/// The container name of a key `pod:<uid>/<container>`.
fn container_of(key: &str) -> &str {
    key.split_once('/').map_or(key, |(_, name)| name)
}
