//! The engine explains itself: why each write is made (for the audit trail),
//! which cgroups fail, and its workloads in the status document's form. The
//! daemon reports these; it never reads the engine's entries to work them out.

use super::{Engine, File, Pending, Role, Write};
use crate::api;
use crate::cpuset::CpuSet;

// The document's form of a wait is made here, with the rest of the
// workload's: the engine knows the documents, and they know nothing of it.
impl From<&Pending> for api::Pending {
    fn from(p: &Pending) -> Self {
        api::Pending {
            requested: p.requested,
            available: p.available,
            reason: p.reason.clone(),
        }
    }
}

/// What the audit trail says of one write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explanation {
    /// What the file held before, as far as the engine knows.
    pub old: Option<CpuSet>,
    /// The exclusive workload the write is for, if any.
    pub workload: Option<String>,
    /// Why, in a few words.
    pub reason: String,
}

/// How many workloads are pinned and waiting, for one status line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Workloads on exclusive CPUs.
    pub pinned: usize,
    /// Their CPUs, together.
    pub exclusive_cpus: usize,
    /// Workloads waiting for CPUs.
    pub pending: usize,
    /// CPUs in the shared pool.
    pub shared: usize,
}

impl Engine {
    /// Why `w` is (or was) made; call it before reporting the write's result
    /// ([`Engine::written`]), while the engine still knows the old value.
    pub fn explain(&self, w: &Write) -> Explanation {
        let Some(e) = self.cgroups.get(&*w.rel) else {
            return Explanation {
                old: None,
                workload: None,
                reason: String::new(),
            };
        };
        let old = match w.file {
            File::Cpus => e.cpus.as_deref().cloned(),
            File::Mems => e.mems.as_deref().cloned(),
            File::Balance => None,
        };
        let workload = (e.role.is_exclusive() && !e.key.is_empty()).then(|| e.key.to_string());
        let reason = match e.role {
            _ if w.file == File::Balance => {
                "load balancing left to the root cpuset: cheaper writes".to_string()
            }
            Role::Exclusive | Role::Inside => match self.workloads.get(&*e.key) {
                Some(w) if w.cpus.is_some() => {
                    format!("exclusive CPUs of {}, from the {}", w.key, w.source)
                }
                Some(w) => format!("shared pool while {} waits, from the {}", w.key, w.source),
                None => "exclusive workload".to_string(),
            },
            Role::Structural if self.settings.empty_inherits => format!(
                "kubepods structure: the shared pool{}, for what lies below to follow",
                self.strict_words(&w.rel)
            ),
            Role::Structural => "kubepods structure: every online CPU".to_string(),
            Role::Shared => format!("shared pool{}", self.strict_words(&w.rel)),
            Role::Unmanaged => "unmanaged: widened over an exclusive cgroup below".to_string(),
            Role::Holder => "holds Slurm's tree: never narrowed".to_string(),
            Role::Foreign => "Slurm's tree: never written".to_string(),
        };
        Explanation {
            old,
            workload,
            reason,
        }
    }

    /// What `strict_reservation` does to the shared pool of cgroup `rel`,
    /// in a few words after "shared pool" (nothing when it does nothing).
    fn strict_words(&self, rel: &str) -> &'static str {
        match self.strict() {
            Some(s) if self.settings.scope.managed(rel) => {
                if s.fallback {
                    " (strict_reservation, but no CPU is left beside the reserved ones)"
                } else {
                    " without the reserved CPUs (strict_reservation)"
                }
            }
            _ => "",
        }
    }

    /// The cgroups whose last write or verification failed, in path order.
    pub fn failing(&self) -> Vec<api::Failing> {
        self.cgroups
            .iter()
            .filter_map(|(rel, e)| {
                let f = e.failure.as_deref()?;
                Some(api::Failing {
                    cgroup: rel.to_string(),
                    error: f.message.clone(),
                    errno: f.errno,
                })
            })
            .collect()
    }

    /// How many cgroups are failing ([`Self::failing`]).
    pub fn failing_count(&self) -> usize {
        self.cgroups
            .values()
            .filter(|e| e.failure.is_some())
            .count()
    }

    /// The workloads, as the status document shows them.
    pub fn status_workloads(&self) -> Vec<api::Workload> {
        self.workloads
            .values()
            .map(|w| api::Workload {
                key: w.key.clone(),
                requested: w.requested,
                source: (&w.source).into(),
                numa: w.numa.clone(),
                cgroups: w.cgroups.iter().map(|c| c.to_string()).collect(),
                cpus: w.cpus.clone(),
                pending: w.pending.as_ref().map(api::Pending::from),
                alignment: w.cpus.as_ref().map(|c| api::Alignment::of(&self.topo, c)),
                resize: w.resize.as_ref().map(api::Pending::from),
                near: api::Near::of(
                    &self.topo,
                    &w.devices,
                    w.device_alignment.unwrap_or(self.settings.device_alignment),
                    w.cpus.as_ref(),
                ),
            })
            .collect()
    }

    /// The counts of one status line.
    pub fn tally(&self) -> Tally {
        let pinned: Vec<&CpuSet> = self
            .workloads
            .values()
            .filter_map(|w| w.cpus.as_ref())
            .collect();
        Tally {
            pinned: pinned.len(),
            exclusive_cpus: pinned.iter().map(|c| c.len()).sum(),
            pending: self
                .workloads
                .values()
                .filter(|w| w.pending.is_some())
                .count(),
            shared: self.shared_pool().len(),
        }
    }
}
