//! The kernel's own movable work kept off exclusive CPUs (`housekeeping`,
//! issue #42): the pure plan.
//!
//! - What moves ([`Knob`]): the unbound workqueues' mask, each workqueue's
//!   own mask, every kernel thread allowed on more than one CPU that the
//!   kernel lets move (`kthreadd` too), and the network RPS and XPS masks.
//!   `default_smp_affinity` moves with the interrupt pass (`crate::irq`).
//! - One rule for each, [`crate::steer::step`]: what it had minus the
//!   exclusive CPUs; put back once they stop being exclusive; a value
//!   someone else wrote since is the new original.
//! - A kernel thread born since the last pass with what the daemon wrote to
//!   `kthreadd` had what `kthreadd` had ([`plan`]).
//! - What cannot move at run time ([`stays`]): kernel threads bound to one
//!   CPU or that the kernel will not let move, and interrupts there.
//! - Pure: values in, plan out. `kernel.rs` reads and writes the files on
//!   the I/O pool; `originals.rs` keeps the memory on /run.

pub mod kernel;
pub mod originals;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::cpuset::CpuSet;
use crate::steer::{self, Steered};

/// One thing the daemon may move off the exclusive CPUs.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Knob {
    /// `devices/virtual/workqueue/cpumask`: where every unbound
    /// workqueue's workers may run.
    Workqueues,
    /// `devices/virtual/workqueue/NAME/cpumask`: one workqueue's own.
    Workqueue { name: String },
    /// A kernel thread, by pid and start time (clock ticks since boot): a
    /// reused pid is another thread.
    Kthread { pid: u32, start: u64 },
    /// `class/net/DEV/queues/QUEUE/rps_cpus`.
    Rps { dev: String, queue: String },
    /// `class/net/DEV/queues/QUEUE/xps_cpus`.
    Xps { dev: String, queue: String },
}

impl Knob {
    /// Whether it is a kernel thread's affinity.
    pub fn is_kthread(&self) -> bool {
        matches!(self, Knob::Kthread { .. })
    }
}

impl fmt::Display for Knob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Knob::Workqueues => f.write_str("workqueue cpumask"),
            Knob::Workqueue { name } => write!(f, "workqueue {name}"),
            Knob::Kthread { pid, .. } => write!(f, "kthread {pid}"),
            Knob::Rps { dev, queue } => write!(f, "rps {dev} {queue}"),
            Knob::Xps { dev, queue } => write!(f, "xps {dev} {queue}"),
        }
    }
}

/// What the daemon keeps of one thing it moved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Kept {
    /// What it is, for a reader: `kthread 12 (rcu_preempt)`.
    pub what: String,
    #[serde(flatten)]
    pub steered: Steered,
    /// For `kthreadd`: the latest start time of the kernel threads there
    /// when it was first moved. One started later, that holds what was
    /// written to it, was born of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<u64>,
}

/// The daemon's memory: what each thing had before it first moved it.
pub type Memory = BTreeMap<Knob, Kept>;

/// One thing found, with what it holds now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub knob: Knob,
    /// What it is, for a reader ([`Kept::what`]).
    pub what: String,
    pub current: CpuSet,
}

/// A kernel thread as read from `/proc/PID/stat` and `status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kthread {
    pub pid: u32,
    pub start: u64,
    pub comm: String,
    /// The kernel's `PF_*` flags.
    pub flags: u32,
    pub allowed: CpuSet,
}

/// What a kernel thread is to the daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// It may be moved: allowed on more than one CPU, and the kernel lets
    /// its affinity be set.
    Movable,
    /// It follows the workqueue masks (`kworker/uN:M`, rescuers): moved
    /// through them, never by itself.
    Workqueue,
    /// It stays where it is: bound to one CPU, or the kernel keeps its
    /// affinity (`PF_NO_SETAFFINITY`).
    Stays,
}

impl Kthread {
    /// What it is: `kthread 12 (rcu_preempt)`.
    pub fn what(&self) -> String {
        format!("kthread {} ({})", self.pid, self.comm)
    }

    pub fn kind(&self) -> Kind {
        let pinned = self.flags & crate::task::PF_NO_SETAFFINITY != 0;
        if self.comm.starts_with("kworker/u") || self.comm.starts_with("kworker/R-") {
            Kind::Workqueue
        } else if pinned || self.allowed.len() <= 1 {
            Kind::Stays
        } else {
            Kind::Movable
        }
    }

    pub fn knob(&self) -> Knob {
        Knob::Kthread {
            pid: self.pid,
            start: self.start,
        }
    }
}

/// An interrupt line, as `/proc/irq/N` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub irq: u32,
    /// The names of its handlers (the directories under `/proc/irq/N`).
    pub names: Vec<String>,
    /// `effective_affinity_list`: where it is delivered now.
    pub effective: CpuSet,
}

/// What one pass read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reading {
    /// The masks found (workqueues, RPS, XPS).
    pub masks: Vec<Found>,
    /// Every kernel thread.
    pub kthreads: Vec<Kthread>,
    /// Interrupt lines.
    pub lines: Vec<Line>,
    /// Things that could not be read (their memory is kept): each with its
    /// error.
    pub unread: BTreeMap<Knob, String>,
    /// Whole areas that could not be read (the workqueue directory, the
    /// process list), each with its error.
    pub errors: Vec<String>,
}

impl Reading {
    /// Everything that may be moved, with what it holds.
    pub fn movable(&self) -> impl Iterator<Item = Found> + '_ {
        self.masks.iter().cloned().chain(
            self.kthreads
                .iter()
                .filter(|k| k.kind() == Kind::Movable)
                .map(|k| Found {
                    knob: k.knob(),
                    what: k.what(),
                    current: k.allowed.clone(),
                }),
        )
    }
}

/// What a pass should do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Each write: the thing, what it is, and the set.
    pub writes: Vec<(Knob, String, CpuSet)>,
    /// The memory once every write is made.
    pub memory: Memory,
    /// Things found holding something other than what the daemon wrote.
    pub overwritten: Vec<Knob>,
}

/// The comm of `kthreadd`, the kernel thread that starts the others.
pub const KTHREADD: &str = "kthreadd";

/// The plan for `reading`, with `memory` what the daemon keeps, `away` the
/// CPUs to keep clear (none: everything goes back) and `online` the online
/// CPUs.
///
/// Memory of a thing not found is dropped (a thread that ended, a device
/// removed) unless it could not be read. A kernel thread the daemon never
/// moved, started after it moved `kthreadd` and holding exactly what it
/// wrote there, was born of it: it had what `kthreadd` had.
pub fn plan(reading: &Reading, memory: &Memory, away: &CpuSet, online: &CpuSet) -> Plan {
    let kthreadd = reading.kthreads.iter().find(|k| k.comm == KTHREADD);
    let parent = kthreadd.and_then(|k| memory.get(&k.knob()));
    let latest = reading.kthreads.iter().map(|k| k.start).max();
    let mut out = Plan::default();
    for found in reading.movable() {
        let inherited = match (&found.knob, memory.get(&found.knob), parent) {
            (Knob::Kthread { start, .. }, None, Some(p))
                if p.steered.set == found.current && p.since.is_some_and(|s| *start > s) =>
            {
                Some(p.steered.clone())
            }
            _ => None,
        };
        let kept = memory
            .get(&found.knob)
            .map(|k| &k.steered)
            .or(inherited.as_ref());
        let step = steer::step(&found.current, kept, away, online);
        if step.overwritten {
            out.overwritten.push(found.knob.clone());
        }
        if let Some(set) = step.write {
            out.writes
                .push((found.knob.clone(), found.what.clone(), set.clone()));
        }
        if let Some(steered) = step.keep {
            let since = match memory.get(&found.knob) {
                Some(k) => k.since,
                None if kthreadd.is_some_and(|k| k.knob() == found.knob) => latest,
                None => None,
            };
            out.memory.insert(
                found.knob,
                Kept {
                    what: found.what,
                    steered,
                    since,
                },
            );
        }
    }
    for (knob, kept) in memory {
        if reading.unread.contains_key(knob) && !out.memory.contains_key(knob) {
            out.memory.insert(knob.clone(), kept.clone());
        }
    }
    out
}

/// Per CPU of `away`, the kernel's work that stays there: kernel threads
/// bound to it (or kept there by the kernel), by name; interrupts
/// delivered there, by number and handler.
pub fn stays(reading: &Reading, away: &CpuSet) -> BTreeMap<u32, (Vec<String>, Vec<String>)> {
    let mut out: BTreeMap<u32, (BTreeSet<String>, Vec<String>)> = BTreeMap::new();
    for cpu in away.iter() {
        out.insert(cpu, Default::default());
    }
    for k in &reading.kthreads {
        if k.kind() != Kind::Stays {
            continue;
        }
        for cpu in k.allowed.iter() {
            if let Some(entry) = out.get_mut(&cpu) {
                entry.0.insert(k.comm.clone());
            }
        }
    }
    for line in &reading.lines {
        for cpu in line.effective.iter() {
            if let Some(entry) = out.get_mut(&cpu) {
                let name = if line.names.is_empty() {
                    line.irq.to_string()
                } else {
                    format!("{} {}", line.irq, line.names.join(","))
                };
                entry.1.push(name);
            }
        }
    }
    out.into_iter()
        .map(|(cpu, (threads, irqs))| (cpu, (threads.into_iter().collect(), irqs)))
        .collect()
}

#[cfg(test)]
mod tests;
