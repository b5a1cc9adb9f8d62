//! The audit trail's documents (`GET /v1/events`): one [`Event`] per
//! cpuset write or repair, with its reason ([`EventKind`]). Documents only:
//! the daemon records them; nothing here decides or keeps them.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

#[cfg(doc)]
use super::Moved;
use crate::cpuset::CpuSet;

/// One entry of the audit trail: a cpuset write or a repair, with its reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// Increasing from 1; `GET /v1/events?since=SEQ` returns those after it.
    pub seq: u64,
    /// Milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// What happened.
    pub what: EventKind,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EventKind {
    /// A write of `cpuset.cpus` or `cpuset.mems`.
    Write {
        cgroup: String,
        /// `"cpuset.cpus"` or `"cpuset.mems"`.
        file: String,
        /// What the file held before, as last read (`None`: unknown).
        old: Option<CpuSet>,
        new: CpuSet,
        /// Why: `"exclusive for <workload> (<source>)"`, `"shared pool"`, ...
        reason: String,
        /// `None` when it worked, else the error.
        error: Option<String>,
        /// The workload the cgroup belongs to, when it is one (its key): the
        /// history of a workload follows it across container restarts.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        workload: Option<String>,
    },
    /// A required path made again by the watchdog.
    Repair {
        path: PathBuf,
        created: Vec<PathBuf>,
    },
    /// A CFS quota lifted for an exclusive workload, or put back
    /// (`unthrottle_exclusive`).
    Quota {
        cgroup: String,
        /// The file written (`cpu.max`, `cpu.cfs_quota_us`).
        file: String,
        /// What it held before (`"200000 100000"`, `"max 100000"`).
        old: String,
        /// What was written.
        new: String,
        /// `None` when it worked, else the error.
        error: Option<String>,
    },
    /// A pass over the interrupts that wrote some (`irq_affinity`); each
    /// is named by its number, or `"default"` for `default_smp_affinity`,
    /// and what each had and has is in the status and the log.
    Irqs {
        /// The CPUs kept clear.
        away: CpuSet,
        /// Interrupts moved off them.
        moved: Vec<String>,
        /// Interrupts given back what they had.
        put_back: Vec<String>,
        /// Interrupts the kernel would not move, with its error.
        refused: Vec<(String, String)>,
    },
    /// A pass of `housekeeping` that wrote some: each thing named as
    /// [`Moved::what`] says; what each had is in the status and the log.
    Housekeeping {
        /// The CPUs kept clear.
        away: CpuSet,
        /// How many were moved off them.
        moved: usize,
        /// How many were given back what they had.
        put_back: usize,
        /// What could not be moved, with the error.
        failed: Vec<(String, String)>,
    },
    /// A write of a power file (`[power]`): a class's value, or an
    /// original put back.
    Power {
        /// The file, relative to the sysfs root.
        file: String,
        /// What it held before.
        old: Option<String>,
        /// What was written.
        new: String,
        /// The class, or `None` for an original put back.
        class: Option<String>,
        /// `None` when it worked, else the error.
        error: Option<String>,
        /// The workload whose CPU it is, or was until this write (its
        /// key): `describe` lists the write in its history.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        workload: Option<String>,
    },
    /// A write of an isolated partition (`isolation = "partition"`): a
    /// grant (`cpuset.cpus.exclusive`) or the partition's type
    /// (`cpuset.cpus.partition`, `isolated` or `member`).
    Partition {
        cgroup: String,
        /// The file written.
        file: String,
        /// What was written.
        new: String,
        /// `None` when it worked, else the error, or the kernel's reason
        /// for an invalid partition.
        error: Option<String>,
    },
    /// A run of `pinctl run` set up (`cpus` its CPUs) or ended (`cpus`
    /// empty).
    Run {
        key: String,
        cgroup: String,
        uid: u32,
        cpus: CpuSet,
        command: Vec<String>,
    },
    /// A workload asked for another count of CPUs while it held some: the
    /// resize was made around them (`new` its CPUs now), or waits
    /// (`pending` says why; `new` is `old`).
    Resize {
        workload: String,
        requested: usize,
        old: CpuSet,
        new: CpuSet,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pending: Option<String>,
    },
    /// systemd told a scope's exclusive CPUs as its `AllowedCPUs=`, so that
    /// a `daemon-reload` writes the pin rather than the scope's old value.
    Told {
        cgroup: String,
        /// The scope's unit name.
        unit: String,
        cpus: CpuSet,
        /// `None` when it worked, else the error.
        error: Option<String>,
    },
}
