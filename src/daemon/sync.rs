//! Keeping the engine in step with the cgroup tree: scanning subtrees in
//! batches on the I/O threads, acting on inotify's changes, full
//! reconciles, and the watches that go with them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use tracing::{info, warn};

use super::{Daemon, chain};
use crate::cgroup::{self, Hierarchy, Rel, Version};
use crate::config::Config;
use crate::cpuset::CpuSet;
use crate::engine::{File, Reading};
use crate::intent::{self, Bundle, Known};
use crate::io::{IoError, IoPool};
use crate::sysfs::Sysfs;
use crate::topology::Topology;
use crate::watch::Change;

/// Reads the CPU topology on an I/O thread.
pub(super) async fn read_topology(pool: &IoPool, sysfs_root: &Path) -> Result<Topology> {
    let root = sysfs_root.to_path_buf();
    let topo = pool
        .run(sysfs_root, move |_fs| {
            Sysfs::new(&root)
                .topology()
                .map_err(|e| std::io::Error::other(format!("{:#}", anyhow::Error::from(e))))
        })
        .await?;
    Ok(topo)
}

/// How old the last full reconcile that read every `cpuset.mems` may be
/// before the next reads them all again, the ones the engine knows too
/// (about a quarter of a reconcile's reads on real v1 cgroupfs): a set
/// emptied by someone else after the daemon read it (v1 refuses that while
/// the cgroup has tasks, and a write of `cpuset.mems` is no inotify event
/// the daemon acts on) is filled within a minute and a reconcile interval.
pub(super) const MEMS_AGE: Duration = Duration::from_secs(60);

/// Reads one cgroup in a job on an I/O thread; see [`intent::read`].
async fn read_cgroup(
    pool: IoPool,
    hier: Arc<Hierarchy>,
    cfg: Arc<Config>,
    bundle: Option<Arc<Bundle>>,
    rel: Rel,
) -> (Rel, Result<Option<Reading>, IoError>) {
    let dir: PathBuf = hier.dir(&rel);
    let r = rel.clone();
    let result = pool
        .run(&dir, move |fs| {
            Ok(intent::read(fs, &hier, &cfg, &r, bundle, Known::default()))
        })
        .await;
    (rel, result)
}

impl Daemon {
    /// In v2 the cpuset files of a cgroup exist only if every ancestor enables
    /// the controller for its children: enable it from the root down to each
    /// managed subtree.
    pub(super) async fn enable_cpuset_controller(&mut self) {
        let mut dirs: BTreeSet<String> = BTreeSet::new();
        for root in self.scope().roots() {
            dirs.insert(String::new());
            let mut p = cgroup::parent(root);
            while let Some(anc) = p {
                dirs.insert(anc.to_string());
                p = cgroup::parent(anc);
            }
            dirs.insert(root.to_string());
        }
        for rel in dirs {
            let path = self.hier.subtree_control_file(&rel);
            let Ok(current) = self.pool.read(&path).await else {
                continue;
            };
            if current.split_whitespace().any(|c| c == "cpuset") {
                continue;
            }
            match self.pool.write(&path, "+cpuset").await {
                Ok(()) => info!(path = %path.display(), "enabled the cpuset controller"),
                Err(e) => {
                    warn!(path = %path.display(), error = %chain(&e), "cannot enable the cpuset controller")
                }
            }
        }
    }

    /// Forgets cgroup `rel` and everything below it (they are gone): the
    /// engine's entries and the watches of both trees.
    pub(super) fn forget(&mut self, rel: &str) {
        self.mark_fresh(rel, true);
        if !self.unwatched.is_empty() {
            self.unwatched.retain(|r| !cgroup::is_within(r, rel));
        }
        self.unsure.forget(rel);
        self.drop_queued(rel);
        self.engine.forget(rel);
        self.systemd.forget(rel);
        self.quotas.forget(rel);
        self.forget_partitions(rel);
        self.watcher.unwatch(rel);
        if let Some(cw) = self.cpu_watcher.as_mut() {
            cw.unwatch(rel);
        }
    }

    pub(super) fn upsert(&mut self, mut r: Reading) {
        // A reading that could not read its request changes none: a
        // sweep's whole reading of the cgroup is still news.
        if !r.obs.unsure {
            self.mark_fresh(&r.obs.rel, false);
        }
        if let Some(limit) = r.lifted {
            self.quotas.found(&r.obs.rel, limit, r.lifted_unkept);
        }
        // A problem is logged when it appears or changes, not at every read:
        // a bad xattr would otherwise be logged again at every reconcile.
        // A reading that could not read all it decides by is not taken for
        // its request, nor for its problem.
        if let Some(p) = &r.problem
            && !r.obs.unsure
            && self.engine.problem(&r.obs.rel) != Some(p.as_str())
        {
            warn!(cgroup = %r.obs.rel, problem = %p);
        }
        // An NRI container made with other CPUs than answered is left to
        // the other owner from this reading on.
        self.nri_saw(&r.obs.rel, r.obs.cpus.as_ref());
        // Only a reload, or another owner, leaves a known cgroup outside
        // the subtrees: whatever its xattr or bundle asks, it is no longer
        // the daemon's to pin.
        if !self.scope().holds(&r.obs.rel) {
            r.intent = None;
            r.obs.unsure = false;
        }
        if r.obs.unsure {
            self.unsure.insert(r.obs.rel.clone());
        } else {
            self.unsure.remove(&r.obs.rel);
        }
        self.engine.upsert(r);
    }

    /// Forgets the cgroups a reload took out of the subtrees, once what the
    /// daemon pinned there is given back (until then, a failed write is
    /// retried by the next reconcile).
    pub(super) fn forget_leaving(&mut self) {
        for rel in std::mem::take(&mut self.leaving) {
            if !self.engine.knows(&rel) || self.scope().holds(&rel) {
                continue;
            }
            let holding = self.engine.holds_ours(&rel);
            if holding {
                self.leaving.push(rel);
            } else if self.scope().roots_below(&rel).next().is_none() {
                self.forget(&rel);
            } else {
                // Above a subtree still scanned: only itself.
                self.engine.forget_one(&rel);
                self.watcher.unwatch_one(&rel);
                if let Some(cw) = self.cpu_watcher.as_mut() {
                    cw.unwatch_one(&rel);
                }
            }
        }
    }

    /// Watches the existing ancestors of every subtree root, so that a root
    /// created after start-up (the daemon starting before the kubelet) is seen
    /// at once. Their own events are ignored (the scope does not hold them).
    pub(super) fn watch_above_roots(&mut self) {
        for root in self.engine.settings().scope.roots() {
            let mut ancestors: Vec<Rel> = Vec::new();
            let mut p = cgroup::parent(root);
            while let Some(anc) = p {
                ancestors.push(anc.into());
                p = cgroup::parent(anc);
            }
            for anc in ancestors.iter().rev() {
                if self.watcher.watch(anc).is_err() {
                    break;
                }
            }
        }
    }

    /// Changes in the v1 cpu controller's tree: mirror its directories and
    /// look again at the limit of a cgroup whose limit files were written.
    pub(super) async fn handle_cpu_tree(&mut self, changes: Vec<Change>) {
        let mut reread = Vec::new();
        for change in changes {
            match change {
                Change::Created(rel) if self.scope().holds(&rel) => {
                    // What the cpuset side knows below it: a runtime may
                    // have made their cpu directories before this watch
                    // (runc makes them one after the other, `mkdir -p`
                    // shows only the top), and inotify tells nothing of them.
                    // One already watched was watched before the cpuset
                    // side read its limit, and inotify has told of every
                    // write since: it is not read again.
                    let mut below = self.engine.subtree(&rel);
                    if below.first() != Some(&rel) {
                        below.insert(0, rel);
                    }
                    for rel in below {
                        let new = match self.cpu_watcher.as_mut() {
                            Some(cw) => cw.watch(&rel).unwrap_or(true),
                            None => true,
                        };
                        if new {
                            reread.push(Change::LimitWritten(rel));
                        }
                    }
                }
                Change::Removed(rel) => {
                    self.note_removed(&rel);
                    if let Some(cw) = self.cpu_watcher.as_mut() {
                        cw.unwatch(&rel);
                    }
                }
                c @ (Change::Changed(_) | Change::LimitWritten(_) | Change::Overflow) => {
                    reread.push(c)
                }
                _ => {}
            }
        }
        if !reread.is_empty() {
            self.handle(reread).await;
        }
    }

    /// Cgroups whose CPU limit files were written: each is read again only
    /// where the limit can change what it asks ([`intent::limit_decides`]),
    /// and then wholly only when the new limit asks for something else
    /// ([`intent::same_request`]) or a problem was reported with what it
    /// asked, in one trip to an I/O thread. A runtime
    /// setting a container up writes the limit files of its pod and its
    /// container, the period before the quota: each read of a cgroup's
    /// files on real cgroupfs slows the runtime's own cpuset writes beside
    /// it (a third at 1,000 cpusets), so those that cannot matter are not
    /// made. Returns whether that changed what the engine knows.
    async fn reread_limits(&mut self, mut rels: Vec<Rel>) -> bool {
        rels.sort_unstable();
        rels.dedup();
        let mut items = Vec::new();
        for rel in rels {
            if !self.scope().holds(&rel) {
                continue;
            }
            let Some(rel) = self.engine.rel(&rel).cloned() else {
                continue;
            };
            let known = self.engine.intent(&rel).cloned();
            if !intent::limit_decides(&rel, known.as_ref(), &self.cfg) {
                continue;
            }
            // A problem reported (an untrusted request, a limit no machine
            // can serve) may go with the limit: read it all again.
            let problem = self.engine.problem(&rel).is_some();
            let bundle = self.engine.bundle(&rel);
            items.push((self.hier.dir(&rel), (rel, known, problem, bundle)));
        }
        if items.is_empty() {
            return false;
        }
        let rels: Vec<Rel> = items.iter().map(|(_, (rel, ..))| rel.clone()).collect();
        let (hier, cfg) = (self.hier.clone(), self.cfg.clone());
        let results = self
            .pool
            .run_batch(
                "read",
                items,
                move |fs, _, (rel, known, problem, bundle)| {
                    // The echo of a lift decides by the limit lifted.
                    let limit = cgroup::read_limit(fs, &hier, rel);
                    let limit = cgroup::lifted_limit(fs, &hier, rel, limit).or(limit);
                    if !problem && intent::same_request(known.as_ref(), limit) {
                        return Ok(None);
                    }
                    Ok(Some(intent::read(
                        fs,
                        &hier,
                        &cfg,
                        rel,
                        bundle.clone(),
                        Known::default(),
                    )))
                },
            )
            .await;
        let mut changed = false;
        for (rel, result) in rels.into_iter().zip(results) {
            match result {
                Ok(None) => {}
                Ok(Some(Some(r))) => {
                    changed = true;
                    self.upsert(r);
                }
                Ok(Some(None)) => {
                    changed = true;
                    self.forget(&rel);
                }
                Err(e) => warn!(error = %chain(&e), "cannot read cgroup"),
            }
        }
        changed
    }

    /// Reads `cpuset.cpus` of the cgroups in `written` and tells the engine;
    /// returns whether that changed what it knows (a foreign write).
    async fn observe_written(&mut self, mut written: Vec<Rel>) -> bool {
        written.sort_unstable();
        written.dedup();
        if written.is_empty() {
            return false;
        }
        let items: Vec<(PathBuf, ())> = written
            .iter()
            .map(|rel| (self.hier.cpus_file(rel), ()))
            .collect();
        let texts = self
            .pool
            .run_batch("read", items, |fs, path, _| fs.read(path))
            .await;
        let mut changed = false;
        for (rel, text) in written.iter().zip(texts) {
            // An unreadable file (hung, say) tells nothing: keep what is
            // known rather than plan a rewrite, and read the cgroup again
            // soon (someone else's write may be there).
            let Ok(text) = text else {
                self.unsure.insert(rel.clone());
                continue;
            };
            self.mark_sets_fresh(rel, File::Cpus);
            let cpus = text.parse::<CpuSet>().ok();
            self.nri_saw(rel, cpus.as_ref());
            changed |= self.engine.observe_cpus(rel, cpus);
        }
        changed
    }

    /// Acts on a batch of inotify changes, then plans once.
    pub(super) async fn handle(&mut self, changes: Vec<Change>) {
        let arrived = Instant::now();
        let mut created = false;
        let mut overflow = false;
        // Whether the batch changed what the engine knows; the echo of our own
        // writes does not, and then there is nothing to plan.
        let mut changed = false;
        let mut written: Vec<Rel> = Vec::new();
        let mut limits: Vec<Rel> = Vec::new();
        // A job of Slurm's made, written or gone: its cores are followed
        // now, not at the next look ([`super::slurm::JOB_CHECK`]).
        let mut jobs = false;
        for change in changes {
            let change = match change {
                Change::CpusWritten(rel) | Change::Changed(rel) | Change::LimitWritten(rel)
                    if self.found_by_sweep(&rel) =>
                {
                    Change::Created(rel)
                }
                c => c,
            };
            if let Change::Created(rel) | Change::Removed(rel) | Change::CpusWritten(rel) = &change
            {
                jobs |= self.is_slurm_job(rel);
            }
            match change {
                Change::Created(rel) => {
                    created = true;
                    // v2: a subtree root made after start-up (systemd makes
                    // machine.slice with the first container), or a cgroup
                    // on the way down to one, has no cpuset files below it
                    // until the controller is enabled there.
                    if self.hier.version == Version::V2
                        && self.scope().roots_below(&rel).next().is_some()
                    {
                        self.enable_cpuset_controller().await;
                    }
                    let tops = if self.scope().holds(&rel) {
                        vec![rel]
                    } else {
                        self.scope().roots_below(&rel).cloned().collect()
                    };
                    self.scan(tops, true).await;
                    self.watch_above_roots();
                    changed = true;
                }
                Change::Removed(rel) => {
                    changed |= self.engine.knows(&rel);
                    self.note_removed(&rel);
                    self.forget(&rel);
                }
                Change::CpusWritten(rel) => {
                    if self.engine.knows(&rel) {
                        written.push(rel);
                    }
                }
                Change::LimitWritten(rel) => {
                    self.quotas.limit_written(&rel);
                    limits.push(rel);
                }
                Change::Changed(rel) => {
                    if !self.scope().holds(&rel) || !self.engine.knows(&rel) {
                        continue;
                    }
                    let bundle = self.engine.bundle(&rel);
                    let (rel, r) = read_cgroup(
                        self.pool.clone(),
                        self.hier.clone(),
                        self.cfg.clone(),
                        bundle,
                        rel,
                    )
                    .await;
                    // A sign of life per read: a round of retries may wait
                    // on reads that time out, one after the other.
                    self.beat();
                    changed = true;
                    match r {
                        Ok(Some(r)) => self.upsert(r),
                        Ok(None) => self.forget(&rel),
                        // Read again soon; told once, not at every retry.
                        Err(e) => {
                            if self.unsure.insert(rel) {
                                warn!(error = %chain(&e), "cannot read cgroup");
                            }
                        }
                    }
                }
                Change::Overflow => overflow = true,
            }
        }
        changed |= self.reread_limits(limits).await;
        // Written cpusets (mostly the echo of the daemon's own writes), read
        // in one trip to an I/O thread.
        changed |= self.observe_written(written).await;
        if jobs {
            changed |= self.read_jobs(false).await;
        }
        if changed {
            self.rest.tree_changed();
        }
        if overflow {
            warn!("inotify queue overflowed; full reconcile");
            self.ask_sweep(false).await;
        }
        if changed {
            let writes = self.socket.metrics.writes.get();
            self.apply().await;
            if created && self.socket.metrics.writes.get() > writes {
                self.socket
                    .metrics
                    .event_to_pin_seconds
                    .observe(arrived.elapsed().as_secs_f64());
            }
        } else if self.quotas.any_written() {
            // A lifted quota written (put back by someone, or the echo of
            // the daemon's own write) that asks for nothing new.
            self.rest.owe_quotas();
        }
    }
}
