//! CFS quotas lifted while a workload holds exclusive CPUs
//! (`unthrottle_exclusive`), put back when it stops holding them.
//!
//! - Lifted: an exclusive workload's cgroups and, for a container, its pod's
//!   (the kubelet lifts the pod's too). One pass: [`Daemon::follow_quotas`].
//! - The limit is kept on the cgroup ([`cgroup::XATTR_QUOTA`]) while the
//!   quota reads unlimited: the kubelet rule decides by it, so a lift never
//!   unpins, and a restarted daemon finds what to put back.
//! - A quota written since the lift (the kubelet, a runtime) is the new
//!   value: left as written on release, lifted again while wanted.
//! - With NRI, an exclusive container is made with its quota lifted (the
//!   answer to `CreateContainer`), the limit asked in its bundle's
//!   annotations ([`crate::intent::ANNOTATION_QUOTA_LIFTED`]): its pod's
//!   goes as soon as it is announced, and the first pass over its cgroup
//!   keeps that limit on it.
//! - Stopping the daemon leaves quotas lifted, as it leaves the CPUs pinned.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use tracing::{info, warn};

use super::{Daemon, chain};
use crate::api;
use crate::cgroup::{self, CpuLimit, Rel, layout};
use crate::config::Unthrottle;
use crate::engine::Workload;
use crate::intent::Source;

/// The quotas the daemon lifted, with the limits they had (what their
/// [`cgroup::XATTR_QUOTA`] says).
#[derive(Debug, Default)]
pub(super) struct Quotas {
    /// Lifted cgroups and the limit each had before.
    lifted: BTreeMap<Rel, CpuLimit>,
    /// Lifted cgroups whose limit file was written since: read again by the
    /// next pass (the echo of the daemon's own write, or a quota put back).
    written: BTreeSet<Rel>,
}

impl Quotas {
    /// A cgroup read carries a limit kept when its quota was lifted (by
    /// this daemon or one before it), or lifted at create (`unkept`: only
    /// its bundle says so): the next pass puts it back unless it is still
    /// wanted lifted. One lifted at create is kept on the cgroup by the
    /// next pass.
    pub(super) fn found(&mut self, rel: &Rel, limit: CpuLimit, unkept: bool) {
        self.lifted.entry(rel.clone()).or_insert(limit);
        if unkept {
            self.written.insert(rel.clone());
        }
    }

    /// A limit file of `rel` was written.
    pub(super) fn limit_written(&mut self, rel: &Rel) {
        if self.lifted.contains_key(rel) {
            self.written.insert(rel.clone());
        }
    }

    /// Whether a lifted cgroup's limit file was written since the last pass.
    pub(super) fn any_written(&self) -> bool {
        !self.written.is_empty()
    }

    /// The cgroups whose quota is lifted now.
    pub(super) fn lifted(&self) -> impl Iterator<Item = &Rel> {
        self.lifted.keys()
    }

    /// Forgets `rel` and what is below it (removed: nothing to put back).
    pub(super) fn forget(&mut self, rel: &str) {
        self.lifted.retain(|r, _| !cgroup::is_within(r, rel));
        self.written.retain(|r| !cgroup::is_within(r, rel));
    }
}

/// What one cgroup's pass does.
#[derive(Debug, Clone)]
enum Step {
    /// Read the limit; if it is not unlimited, write it unlimited. Gives the
    /// limit read. One that reads unlimited with no limit kept on it, where
    /// the limit it had is known (lifted at create), keeps that one.
    Lift(Option<CpuLimit>),
    /// Write this limit back.
    Restore(CpuLimit),
}

impl Daemon {
    /// Whether workload `w`'s quota is lifted now (`unthrottle_exclusive`).
    pub(super) fn lifts(&self, w: &Workload) -> bool {
        let mode = self.cfg.unthrottle_exclusive;
        mode != Unthrottle::None
            && self.hier.cpu.is_some()
            && w.cpus.is_some()
            && (mode == Unthrottle::All || matches!(w.source, Source::Kubelet))
    }

    /// The cgroups whose quota should be lifted now.
    fn unthrottled(&self) -> BTreeSet<Rel> {
        let mut want = BTreeSet::new();
        let pod_of = |rel: &str, want: &mut BTreeSet<Rel>| {
            if matches!(layout::classify(rel), layout::Kind::Container { .. })
                && let Some(pod) = cgroup::parent(rel).and_then(|p| self.engine.rel(p))
            {
                want.insert(pod.clone());
            }
        };
        for w in self.engine.workloads().values().filter(|w| self.lifts(w)) {
            for rel in &w.cgroups {
                want.insert(rel.clone());
                pod_of(rel, &mut want);
            }
        }
        // A container announced through NRI, made with its quota lifted:
        // its pod's goes as soon as its CPUs are given, before it starts.
        for (key, rel) in self.nri.announced_cgroups() {
            if self
                .engine
                .workloads()
                .get(key)
                .is_some_and(|w| self.lifts(w))
            {
                pod_of(rel, &mut want);
            }
        }
        want
    }

    /// What a pass over the quotas would do now.
    fn quota_steps(&self) -> Vec<(Rel, Step)> {
        let want = self.unthrottled();
        let mut steps: Vec<(Rel, Step)> = Vec::new();
        // Children before parents.
        for (rel, orig) in self.quotas.lifted.iter().rev() {
            if !want.contains(rel) {
                steps.push((rel.clone(), Step::Restore(*orig)));
            }
        }
        for rel in &want {
            let known = self.quotas.lifted.get(rel);
            if known.is_none() || self.quotas.written.contains(rel) {
                steps.push((rel.clone(), Step::Lift(known.copied())));
            }
        }
        steps
    }

    /// Whether a pass over the quotas has anything to do.
    pub(super) fn quotas_due(&self) -> bool {
        !self.quota_steps().is_empty()
    }

    /// Lifts the quotas that should be lifted and puts back those that
    /// should not, in one trip to an I/O thread (a reload that turns the
    /// switch off puts every one back in one turn).
    ///
    /// Owed by a plan that leaves it something to do, and made first of the
    /// plan's rest (`apply.rs`), once the tree is quiet: its reads and writes
    /// wait for the cgroup locks a runtime holds, so a pin must not wait
    /// behind it (up to 1.6 ms a pass on v1 at 1,000 containers under churn).
    /// Start-up makes it before READY=1, and stopping before the daemon goes.
    /// v1 accepts an unlimited child under a limited parent, whichever is
    /// written last (the VM bed's kernel probe checks it), so no order is
    /// needed; restores go children first anyway.
    pub(super) async fn follow_quotas(&mut self) {
        let steps = self.quota_steps();
        self.quotas.written.clear();
        if steps.is_empty() {
            return;
        }
        let lift = self.hier.unlimited_quota().to_string();
        let items: Vec<(PathBuf, (Rel, Step, String, PathBuf))> = steps
            .into_iter()
            .filter_map(|(rel, step)| {
                let path = self.hier.quota_file(&rel)?;
                let text = match &step {
                    Step::Lift(_) => lift.clone(),
                    Step::Restore(orig) => self.hier.quota_text(orig),
                };
                let dir = self.hier.dir(&rel);
                Some((path, (rel, step, text, dir)))
            })
            .collect();
        let hier = self.hier.clone();
        let results = self
            .pool
            .run_batch(
                "quota",
                items.clone(),
                move |fs, path, (rel, step, text, dir)| {
                    match step {
                        // The memory first, then the lift: a crash between the
                        // two leaves a quota that reads as written back.
                        Step::Lift(known) => {
                            let Some(limit) = cgroup::read_limit(fs, &hier, rel) else {
                                return Ok(None);
                            };
                            if limit.quota.is_none() {
                                // Lifted already (by this daemon or one before
                                // it, at create by the runtime), or unlimited
                                // from the start.
                                let kept = cgroup::lifted_limit(fs, &hier, rel, Some(limit));
                                let asked = known.filter(|k| k.quota.is_some());
                                if let (None, Some(asked)) = (kept, asked) {
                                    let text = asked.to_text();
                                    fs.set_xattr(dir, cgroup::XATTR_QUOTA, text.as_bytes())?;
                                    return Ok(Some((asked, false)));
                                }
                                return Ok(Some((kept.unwrap_or(limit), false)));
                            }
                            fs.set_xattr(dir, cgroup::XATTR_QUOTA, limit.to_text().as_bytes())?;
                            fs.write(path, text)?;
                            Ok(Some((limit, true)))
                        }
                        // The quota first, then the memory emptied. A quota
                        // written since the lift (the kubelet's in-place
                        // resize to a limit that lets the workload go) is
                        // newer than the one kept: it stays. Gives that
                        // quota when it stayed.
                        Step::Restore(orig) => {
                            if orig.quota.is_none() {
                                return Ok(None);
                            }
                            let now = cgroup::read_limit(fs, &hier, rel);
                            let newer = now.filter(|l| l.quota.is_some());
                            if newer.is_none() {
                                fs.write(path, text)?;
                            }
                            fs.set_xattr(dir, cgroup::XATTR_QUOTA, b"")?;
                            Ok(newer.map(|l| (l, false)))
                        }
                    }
                },
            )
            .await;
        for ((path, (rel, step, text, _)), result) in items.into_iter().zip(results) {
            // (what the file held, the error) of a write made, for the trail.
            let mut trail: Option<(String, Option<String>)> = None;
            match (step, result) {
                (Step::Lift(_), Ok(Some((limit, wrote)))) => {
                    if wrote {
                        info!(cgroup = %rel, path = %path.display(), was = %limit.to_text(), data = %text, "CPU quota lifted");
                        trail = Some((limit.to_text(), None));
                    }
                    self.quotas.lifted.insert(rel.clone(), limit);
                }
                // Gone, or no cpu controller there: nothing to lift. Gone
                // between the read of its limit and the write too (a pod
                // removed as soon as it was pinned): the removal is the news.
                (Step::Lift(_), Ok(None)) => {}
                (Step::Lift(_), Err(e)) if e.is_not_found() => {}
                (Step::Restore(orig), Ok(newer)) => {
                    if let Some((now, _)) = newer {
                        info!(cgroup = %rel, path = %path.display(), kept = %orig.to_text(), data = %now.to_text(), "CPU quota written since it was lifted; left as written");
                    } else if orig.quota.is_some() {
                        info!(cgroup = %rel, path = %path.display(), data = %text, "CPU quota put back");
                        trail = Some((lift.clone(), None));
                    }
                    self.quotas.lifted.remove(&rel);
                    self.mark_quota_fresh(&rel);
                }
                (Step::Restore(_), Err(e)) if e.is_not_found() => {
                    self.quotas.lifted.remove(&rel);
                    self.mark_quota_fresh(&rel);
                }
                (step, Err(e)) => {
                    let what = match step {
                        Step::Lift(_) => "cannot lift the CPU quota; the workload may be throttled",
                        Step::Restore(_) => "cannot put the CPU quota back; will retry",
                    };
                    warn!(cgroup = %rel, path = %path.display(), data = %text, errno = e.raw_os_error(), error = %chain(&e), "{what}");
                    self.socket.metrics.write_errors.inc();
                    trail = Some(("?".to_string(), Some(chain(&e))));
                }
            }
            if let Some((old, error)) = trail {
                let file = path
                    .file_name()
                    .map(|f| f.to_string_lossy().into_owned())
                    .unwrap_or_default();
                self.socket.events.push(api::EventKind::Quota {
                    cgroup: rel.to_string(),
                    file,
                    old,
                    new: text,
                    error,
                });
            }
        }
        self.socket
            .metrics
            .quotas_lifted
            .set(self.quotas.lifted.len() as i64);
        self.socket.dirty = true;
    }
}
