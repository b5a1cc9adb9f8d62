//! The exclusive CPUs' interrupts and softirqs as metrics (issue #42):
//! `pinctl_exclusive_cpu_interrupts{cpu}` and
//! `pinctl_exclusive_cpu_softirqs{cpu,kind}`.
//!
//! Each full round of checks (`checks.rs`) reads `/proc/interrupts` and
//! `/proc/softirqs` on the I/O threads ([`read`]) and parses them there
//! ([`crate::noise::parse`]); the loop then sets the gauges for the CPUs
//! exclusive at that moment ([`Daemon::count_interrupts`]). It never reads
//! a file on the loop, and a file that cannot be read only takes the
//! series away.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;

use tracing::debug;

use super::{Daemon, chain};
use crate::io::IoPool;
use crate::metrics::{ExclusiveCpuLabel, SoftirqLabel};
use crate::noise::parse::{Counts, parse_counts};

/// What one round read: each CPU's interrupts (every row summed), and
/// each CPU's softirqs by kind. `None`: the file could not be read.
pub(super) struct Counters {
    interrupts: Option<BTreeMap<u32, u64>>,
    softirqs: Option<BTreeMap<(u32, String), u64>>,
}

/// Reads and parses `file` under `proc_root` in one timed I/O job.
async fn counts(pool: &IoPool, proc_root: &Path, file: &str) -> Option<Counts> {
    let path = proc_root.join(file);
    let read = path.clone();
    let result = pool
        .run_op("read", &path, move |fs| {
            parse_counts(&fs.read(&read)?)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
        })
        .await;
    match result {
        Ok(counts) => Some(counts),
        Err(e) => {
            debug!(path = %path.display(), error = %chain(&e), "no interrupt metrics");
            None
        }
    }
}

/// Reads `/proc/interrupts` and `/proc/softirqs` under `proc_root`.
pub(super) async fn read(pool: &IoPool, proc_root: &Path) -> Counters {
    let interrupts = counts(pool, proc_root, "interrupts")
        .await
        .map(|c| c.totals());
    let softirqs = counts(pool, proc_root, "softirqs").await.map(|c| {
        let mut by = BTreeMap::new();
        for (i, &cpu) in c.cpus.iter().enumerate() {
            for row in &c.rows {
                if let Some(&n) = row.counts.get(i) {
                    by.insert((cpu, row.label.clone()), n);
                }
            }
        }
        by
    });
    Counters {
        interrupts,
        softirqs,
    }
}

impl Daemon {
    /// Sets the per-CPU interrupt and softirq gauges from what a round of
    /// checks read (`None`: a round of the required paths alone, which
    /// reads nothing), for the CPUs exclusive now: every online CPU
    /// outside the shared pool.
    pub(super) fn count_interrupts(&mut self, read: Option<Counters>) {
        let Some(read) = read else {
            return;
        };
        let exclusive = self
            .engine
            .topology()
            .online()
            .difference(&self.engine.shared_pool());
        let m = &self.socket.metrics;
        let gauge = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        m.exclusive_cpu_interrupts.clear();
        for (cpu, n) in read.interrupts.iter().flatten() {
            if exclusive.contains(*cpu) {
                m.exclusive_cpu_interrupts
                    .get_or_create(&ExclusiveCpuLabel {
                        cpu: cpu.to_string().into(),
                    })
                    .set(gauge(*n));
            }
        }
        m.exclusive_cpu_softirqs.clear();
        for ((cpu, kind), n) in read.softirqs.iter().flatten() {
            if exclusive.contains(*cpu) {
                m.exclusive_cpu_softirqs
                    .get_or_create(&SoftirqLabel {
                        cpu: cpu.to_string().into(),
                        kind: kind.as_str().into(),
                    })
                    .set(gauge(*n));
            }
        }
    }
}
