//! The daemon's part of a resize (issue #34; the engine plans it): each
//! resize made or found waiting is logged, recorded in the audit trail and
//! counted; and each pinned workload's baseline is kept on its cgroups
//! ([`cgroup::XATTR_BASELINE`]), so a restart with its state file lost
//! still knows the CPUs it was given first, and that they were its.
//!
//! The baselines go with the pass over the quotas, once the tree is quiet:
//! nothing waits on them, and a crash before they are written leaves the
//! state file to say the baseline.

use std::path::PathBuf;

use tracing::{info, warn};

use super::{Daemon, chain};
use crate::api;
use crate::cgroup::{self, Rel};
use crate::cpuset::CpuSet;
use crate::metrics::ResultLabel;

impl Daemon {
    /// Logs, records and counts the resizes the last plans made or found
    /// waiting.
    pub(super) fn report_resizes(&mut self) {
        for r in self.engine.take_resizes() {
            let result = match &r.pending {
                None => {
                    info!(workload = %r.key, requested = r.requested, old = %r.old, new = %r.new, "resized around its CPUs");
                    "made"
                }
                Some(why) => {
                    warn!(workload = %r.key, requested = r.requested, cpus = %r.old, "resize pending: {why}");
                    "pending"
                }
            };
            self.socket
                .metrics
                .resizes
                .get_or_create(&ResultLabel {
                    result: result.into(),
                })
                .inc();
            self.socket.events.push(api::EventKind::Resize {
                workload: r.key,
                requested: r.requested,
                old: r.old,
                new: r.new,
                pending: r.pending,
            });
        }
    }

    /// Whether a baseline waits to be kept on a cgroup.
    pub(super) fn baselines_due(&self) -> bool {
        !self.baselines_unsupported && self.engine.any_baseline_owed()
    }

    /// Writes the baselines owed ([`crate::engine::Engine::baselines_owed`])
    /// in one trip to an I/O thread; one no longer held is emptied. A failed
    /// write is logged, and tried again only once the cgroup is read again
    /// or the baseline changes: the state file keeps the baseline meanwhile.
    pub(super) async fn keep_baselines(&mut self) {
        if self.baselines_unsupported {
            return;
        }
        let owed = self.engine.baselines_owed();
        if owed.is_empty() {
            return;
        }
        let items: Vec<(PathBuf, (Rel, Option<CpuSet>))> = owed
            .into_iter()
            .map(|(rel, set)| (self.hier.dir(&rel), (rel, set)))
            .collect();
        let results = self
            .pool
            .run_batch("baseline", items.clone(), |fs, dir, (_, set)| {
                let text = set.as_ref().map(CpuSet::to_string).unwrap_or_default();
                fs.set_xattr(dir, cgroup::XATTR_BASELINE, text.as_bytes())
            })
            .await;
        for ((dir, (rel, set)), result) in items.into_iter().zip(results) {
            match result {
                Ok(()) => {}
                // Removed: the delete event follows.
                Err(e) if e.is_not_found() => {}
                Err(e) if e.raw_os_error() == Some(nix::libc::EOPNOTSUPP) => {
                    if !self.baselines_unsupported {
                        warn!(cgroup = %rel, path = %dir.display(), error = %chain(&e), "this kernel keeps no user xattrs on cgroups: baselines live in the state file alone");
                    }
                    self.baselines_unsupported = true;
                }
                Err(e) => {
                    let data = set.as_ref().map(CpuSet::to_string).unwrap_or_default();
                    warn!(cgroup = %rel, path = %dir.display(), data = %data, errno = e.raw_os_error(), error = %chain(&e), "cannot keep the baseline on the cgroup; the state file keeps it");
                }
            }
            self.engine.baseline_kept(&rel, set);
        }
    }
}
