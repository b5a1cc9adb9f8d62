//! Making a plan real: the engine's writes in order through the I/O
//! threads, the effective sets read back, the audit trail and the counters,
//! and the state file saved when assignments changed.

use std::collections::BTreeSet;

use tracing::{debug, info, warn};

use super::{Daemon, chain};
use crate::api;
use crate::cgroup::Rel;
use crate::cpuset::CpuSet;
use crate::engine::{Failure, File, Write};
use crate::io::IoError;
use crate::state::StateFile;

impl Daemon {
    /// Plans and performs the writes, in order; reads effective sets back.
    /// A plan that gave new workloads their CPUs first leaves the rest of
    /// the change (the shared pool) to the next turn of the loop.
    pub(super) async fn apply(&mut self) {
        let plan = self.engine.plan();
        self.plan_rest = plan.more;
        let mut written: BTreeSet<Rel> = BTreeSet::new();
        for w in &plan.writes {
            self.beat();
            let path = match w.file {
                File::Cpus => self.hier.cpus_file(&w.rel),
                File::Mems => self.hier.mems_file(&w.rel),
            };
            let data = w.set.to_string();
            let result = self.pool.write(&path, &data).await;
            if !matches!(&result, Err(e) if e.is_not_found()) {
                self.record_write(w, result.as_ref().err());
            }
            match result {
                Ok(()) => {
                    debug!(path = %path.display(), data = %data, "written");
                    if w.file == File::Cpus {
                        written.insert(w.rel.clone());
                    }
                    self.engine.written(w, Ok(()));
                }
                Err(e) => {
                    if e.is_not_found() {
                        // Removed under us: the delete event follows.
                        continue;
                    }
                    warn!(path = %path.display(), data = %data, errno = e.raw_os_error(), error = %chain(&e), "cgroup write failed; will retry");
                    self.engine.written(
                        w,
                        Err(Failure {
                            message: chain(&e),
                            errno: e.raw_os_error(),
                        }),
                    );
                }
            }
        }
        for rel in written {
            if let Ok(text) = self.pool.read(&self.hier.effective_file(&rel)).await
                && let Ok(eff) = text.parse::<CpuSet>()
            {
                self.engine.verified(&rel, eff);
            }
        }
        // A save that failed is tried again with each plan.
        if plan.assignments_changed || self.state_error.is_some() {
            for w in self.engine.workloads().values() {
                match (&w.cpus, &w.pending) {
                    (Some(cpus), _) => {
                        info!(workload = %w.key, cpus = %cpus, source = %w.source, "exclusive CPUs")
                    }
                    (None, Some(p)) => {
                        info!(workload = %w.key, requested = p.requested, available = p.available, "pending: {}", p.reason)
                    }
                    _ => {}
                }
            }
            self.save_state().await;
        }
        self.notify_status(false);
        self.socket.dirty = true;
    }

    /// Adds a write to the audit trail and the counters, with its reason.
    fn record_write(&mut self, w: &Write, error: Option<&IoError>) {
        let metrics = &self.socket.metrics;
        metrics.writes.inc();
        if error.is_some() {
            metrics.write_errors.inc();
        }
        let why = self.engine.explain(w);
        self.socket.events.push(api::EventKind::Write {
            cgroup: w.rel.to_string(),
            file: match w.file {
                File::Cpus => "cpuset.cpus",
                File::Mems => "cpuset.mems",
            }
            .to_string(),
            old: why.old,
            new: (*w.set).clone(),
            reason: why.reason,
            error: error.map(|e| chain(e)),
            workload: why.workload,
        });
    }

    /// Saves the state file. A failure (a read-only or full disk) degrades
    /// health until a save works again: the next plan's apply tries again.
    pub(super) async fn save_state(&mut self) {
        let body = self.engine.saved_state();
        let state = StateFile::new(self.state.path());
        let result = tokio::task::spawn_blocking(move || state.save(&body)).await;
        let error = match result {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(format!("{:#}", anyhow::Error::from(e))),
            Err(e) => Some(format!("the save task failed: {e}")),
        };
        match (&self.state_error, &error) {
            (None, Some(e)) => {
                warn!(error = %e, "cannot save the state file; trying again at each change")
            }
            (Some(_), None) => info!(path = %self.state.path().display(), "state file saved again"),
            _ => {}
        }
        if error.is_some() {
            self.socket.metrics.state_save_failures.inc();
        }
        if error != self.state_error {
            self.socket.dirty = true;
        }
        self.state_error = error;
    }
}
