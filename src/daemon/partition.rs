//! Isolated cgroup v2 partitions for exclusive workloads (`isolation =
//! "partition"`): when to make and undo them, and what the kernel says of
//! them. Which files, in which order, is [`crate::partition`]'s pure rule.
//!
//! - Each plan: [`Daemon::release_partitions`] before its writes,
//!   [`Daemon::grant_partitions`] after. One partition per exclusive
//!   workload, at its top cgroup.
//! - Each is read back once made, and at every round of checks. One the
//!   kernel calls invalid, or that could not be made, is *failing*: undone at
//!   once (the workload keeps its plain cpuset), and tried again when its
//!   CPUs or the online CPUs change, or after [`RETRY_ROUNDS`].
//! - What was made is kept in the state file, so a restarted daemon undoes
//!   what is no longer wanted. Stopping leaves partitions made, as it leaves
//!   the CPUs pinned.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tracing::{info, warn};

use super::{Daemon, chain};
use crate::api;
use crate::cgroup::{self, Rel, Version};
use crate::config::Isolation;
use crate::cpuset::CpuSet;
use crate::io::Fs;
use crate::partition::{self, EXCLUSIVE_EFFECTIVE, ISOLATED, Made, PARTITION, Step};

/// Reads partition root `dir`'s type and, when the kernel has the file, its
/// effective grant.
fn read_partition(fs: &dyn Fs, dir: &Path) -> std::io::Result<(String, Option<String>)> {
    let state = fs.read(&dir.join(PARTITION))?;
    let effective = match fs.read(&dir.join(EXCLUSIVE_EFFECTIVE)) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    Ok((state, effective))
}

/// What the daemon knows of partitions.
#[derive(Debug, Default)]
pub(super) struct Partitions {
    made: Made,
    /// Partitions that failed, with the CPUs and online CPUs at the time:
    /// not tried again while both stay.
    failing: BTreeMap<Rel, Failing>,
    /// Whether the kernel has remote partitions (the root's
    /// `cpuset.cpus.isolated`), once looked at.
    supported: Option<bool>,
    /// CPUs of isolated partitions that are none of the daemon's, at the
    /// last round of checks.
    foreign: CpuSet,
    /// The last error of each file written or read, until it works: the
    /// same error again is counted, not logged nor put in the trail again
    /// (a shrink the kernel keeps refusing is tried at every plan).
    errors: BTreeMap<PathBuf, String>,
}

#[derive(Debug, Clone)]
struct Failing {
    cpus: CpuSet,
    online: CpuSet,
    reason: String,
    /// Rounds of checks since it failed.
    rounds: u32,
}

/// A failing partition is tried again after this many rounds of checks
/// (5 minutes at the default `watchdog_interval`) even when nothing it is
/// known to depend on changed: the cause may have come and gone unseen (a
/// CPU offline and back between two reconciles leaves a partition invalid
/// until it is written again).
const RETRY_ROUNDS: u32 = 30;

impl Failing {
    /// Whether it keeps a partition of `cpus` from being tried on `online`.
    fn blocks(&self, cpus: &CpuSet, online: &CpuSet) -> bool {
        &self.cpus == cpus && &self.online == online && self.rounds < RETRY_ROUNDS
    }
}

impl Partitions {
    /// What a state file says was made.
    pub(super) fn new(made: Made) -> Self {
        Partitions {
            made,
            ..Partitions::default()
        }
    }

    /// What is made, for the state file.
    pub(super) fn saved(&self) -> Made {
        self.made.clone()
    }

    /// The partitions made and holding, with their CPUs: those failing are
    /// being undone.
    fn isolated(&self) -> impl Iterator<Item = (&Rel, &CpuSet)> {
        self.made
            .roots
            .iter()
            .filter(|(rel, _)| !self.failing.contains_key(*rel))
    }

    /// Records `error` as `path`'s last; whether it is a new one.
    fn new_error(&mut self, path: &Path, error: String) -> bool {
        self.errors.insert(path.to_path_buf(), error.clone()) != Some(error)
    }

    /// A reload changed `isolation`: what failed is tried again.
    pub(super) fn reset(&mut self) {
        self.failing.clear();
    }
}

impl Daemon {
    /// Why partitions cannot be made here, when they are asked for.
    fn partitions_refused(&self) -> Option<String> {
        if self.cfg.isolation != Isolation::Partition {
            return None;
        }
        if self.hier.version == Version::V1 {
            return Some("isolation = \"partition\" needs cgroup v2; on v1 workloads are pinned without partitions".into());
        }
        (self.partitions.supported == Some(false)).then(|| {
            format!(
                "isolation = \"partition\" needs Linux 6.7 or later (remote partitions: {} is missing); workloads are pinned without partitions",
                self.hier.cpuset.join(ISOLATED).display()
            )
        })
    }

    /// The partitions wanted now: one cgroup of each exclusive workload,
    /// with its CPUs, but none failing with the same CPUs and online CPUs.
    /// Two cgroups of one workload (a restarted container whose old cgroup
    /// is still there) hold the same CPUs, and the kernel refuses a grant
    /// overlapping a sibling's: the partition is the cgroup made one
    /// already, else the first, and another is tried when it goes.
    fn wanted_partitions(&self) -> BTreeMap<Rel, CpuSet> {
        let mut want = BTreeMap::new();
        if !self.asks_partitions() || self.partitions.supported != Some(true) {
            return want;
        }
        let online = self.engine.topology().online();
        for w in self.engine.workloads().values() {
            let Some(cpus) = &w.cpus else { continue };
            let mut tops = w.cgroups.iter().filter(|rel| {
                let top = !w
                    .cgroups
                    .iter()
                    .any(|other| other != *rel && cgroup::is_within(rel, other));
                let failing = self
                    .partitions
                    .failing
                    .get(*rel)
                    .is_some_and(|f| f.blocks(cpus, online));
                top && !failing
            });
            let first = tops.next();
            let made = first
                .into_iter()
                .chain(tops)
                .find(|rel| self.partitions.made.roots.contains_key(*rel));
            if let Some(rel) = made.or(first) {
                want.insert(rel.clone(), cpus.clone());
            }
        }
        want
    }

    /// Cgroup `rel` was removed (or a file of it is gone): its partitions,
    /// failures and errors with it, the kernel undid them (the grants above
    /// are shrunk by the next release).
    pub(super) fn forget_partitions(&mut self, rel: &str) {
        if self.partitions.made.is_empty()
            && self.partitions.failing.is_empty()
            && self.partitions.errors.is_empty()
        {
            return;
        }
        let dir = self.hier.dir(rel);
        let p = &mut self.partitions;
        p.made.forget(rel);
        p.failing.retain(|r, _| !cgroup::is_within(r, rel));
        p.errors.retain(|path, _| !path.starts_with(&dir));
        self.engine.set_isolated(self.partitions.made.cpus());
        self.partition_metrics();
    }

    /// Forgets the failures whose workload no longer holds the same CPUs
    /// on the same online CPUs: tried again, or no longer wanted.
    fn prune_failing(&mut self) {
        if self.partitions.failing.is_empty() {
            return;
        }
        let online = self.engine.topology().online();
        let held: BTreeMap<&Rel, &CpuSet> = self
            .engine
            .workloads()
            .values()
            .filter_map(|w| Some((w, w.cpus.as_ref()?)))
            .flat_map(|(w, cpus)| w.cgroups.iter().map(move |rel| (rel, cpus)))
            .collect();
        self.partitions
            .failing
            .retain(|rel, f| held.get(rel).is_some_and(|cpus| f.blocks(cpus, online)));
    }

    /// Undoes the partitions no longer wanted as they are (before a plan's
    /// writes: a workload whose CPUs move must leave its partition first,
    /// as the kernel keeps a partition on its grant).
    pub(super) async fn release_partitions(&mut self) {
        if self.partitions.made.is_empty() {
            return;
        }
        // A restarted daemon does not know yet whether the kernel has them:
        // wanting none would undo every partition, to make it again after.
        self.learn_partitions().await;
        if self.asks_partitions() && self.partitions.supported.is_none() {
            return;
        }
        let steps = partition::release(&self.partitions.made, &self.wanted_partitions());
        self.run_partition_steps(steps).await;
    }

    /// Makes the partitions wanted (after a plan's writes): first learns
    /// whether the kernel has them, then grants and isolates; any that
    /// fails is undone at once.
    pub(super) async fn grant_partitions(&mut self) {
        self.learn_partitions().await;
        self.prune_failing();
        let steps = partition::grant(&self.partitions.made, &self.wanted_partitions());
        if self.run_partition_steps(steps).await {
            self.release_partitions().await;
        }
    }

    /// Whether partitions are asked for on cgroup v2.
    fn asks_partitions(&self) -> bool {
        self.cfg.isolation == Isolation::Partition && self.hier.version == Version::V2
    }

    /// Learns whether the kernel has remote partitions, when they are asked
    /// for and that is not known yet.
    async fn learn_partitions(&mut self) {
        if self.asks_partitions() && self.partitions.supported.is_none() {
            self.look_at_partitions(false).await;
        }
    }

    /// A round of checks: reads every partition made, and the root's list
    /// of isolated CPUs (it shows partitions that are none of the
    /// daemon's); an invalid one is undone.
    pub(super) async fn check_partitions(&mut self) {
        if self.cfg.isolation != Isolation::Partition && self.partitions.made.is_empty() {
            return;
        }
        for f in self.partitions.failing.values_mut() {
            f.rounds += 1;
        }
        if self.hier.version == Version::V2 {
            self.look_at_partitions(true).await;
        }
        self.release_partitions().await;
        self.grant_partitions().await;
    }

    /// Reads the root's `cpuset.cpus.isolated` (whether the kernel has
    /// remote partitions, and which CPUs are isolated) and, when `states`,
    /// each partition made: one that is not what it should be
    /// ([`partition::judge`]) is failing.
    async fn look_at_partitions(&mut self, states: bool) {
        let mut items: Vec<(PathBuf, Option<Rel>)> = vec![(self.hier.cpuset.join(ISOLATED), None)];
        if states {
            for rel in self.partitions.made.roots.keys() {
                items.push((self.hier.dir(rel), Some(rel.clone())));
            }
        }
        let results = self
            .pool
            .run_batch("partition", items.clone(), |fs, path, rel| match rel {
                None => fs.read(path).map(|t| (t, None)),
                Some(_) => read_partition(fs, path),
            })
            .await;
        let online = self.engine.topology().online().clone();
        for ((path, rel), result) in items.into_iter().zip(results) {
            match (rel, result) {
                (None, Ok((text, _))) => {
                    self.partitions.errors.remove(&path);
                    self.partitions.supported = Some(true);
                    let isolated: CpuSet = text.parse().unwrap_or_default();
                    self.partitions.foreign = isolated.difference(&self.partitions.made.cpus());
                }
                (None, Err(e)) if e.is_not_found() => {
                    if self.partitions.supported != Some(false)
                        && self.cfg.isolation == Isolation::Partition
                    {
                        warn!(path = %path.display(), "isolation = \"partition\" is refused: this kernel has no remote partitions (Linux 6.7 or later); workloads are pinned without them");
                    }
                    self.partitions.supported = Some(false);
                }
                (None, Err(e)) => {
                    if self.partitions.new_error(&path, chain(&e)) {
                        warn!(path = %path.display(), error = %chain(&e), "cannot read the isolated CPUs; partitions are neither made nor undone until it can be read");
                    }
                }
                (Some(rel), Ok((state, effective))) => {
                    let Some(cpus) = self.partitions.made.roots.get(&rel).cloned() else {
                        continue;
                    };
                    // One failing already is being undone.
                    if !self.partitions.failing.contains_key(&rel)
                        && let Err(reason) = partition::judge(&state, effective.as_deref(), &cpus)
                    {
                        self.partition_failed(&rel, &cpus, &online, reason);
                    }
                }
                (Some(rel), Err(e)) if e.is_not_found() => self.forget_partitions(&rel),
                (Some(rel), Err(e)) => {
                    warn!(cgroup = %rel, path = %path.display(), error = %chain(&e), "cannot read the partition");
                }
            }
        }
        self.partition_metrics();
    }

    /// Records partition `rel` as failing with `reason`.
    fn partition_failed(&mut self, rel: &Rel, cpus: &CpuSet, online: &CpuSet, reason: String) {
        warn!(cgroup = %rel, cpus = %cpus, reason = %reason, "isolated partition failed; the workload keeps its plain cpuset until its CPUs or the online CPUs change");
        self.socket.events.push(api::EventKind::Partition {
            cgroup: rel.to_string(),
            file: PARTITION.to_string(),
            new: "isolated".to_string(),
            error: Some(reason.clone()),
        });
        self.partitions.failing.insert(
            rel.clone(),
            Failing {
                cpus: cpus.clone(),
                online: online.clone(),
                reason,
                rounds: 0,
            },
        );
    }

    /// Makes `steps` in one I/O job, in order; a partition written
    /// `isolated` is read back in the same job. Returns whether one failed.
    async fn run_partition_steps(&mut self, steps: Vec<Step>) -> bool {
        if steps.is_empty() {
            return false;
        }
        let items: Vec<(PathBuf, Step)> = steps
            .into_iter()
            .map(|s| (self.hier.dir(s.rel()).join(s.file()), s))
            .collect();
        let results = self
            .pool
            .run_batch("partition", items.clone(), |fs, path, step| {
                fs.write(path, &step.text())?;
                match (step, path.parent()) {
                    (Step::Isolate(..), Some(dir)) => read_partition(fs, dir).map(Some),
                    _ => Ok(None),
                }
            })
            .await;
        let online = self.engine.topology().online().clone();
        let mut failed = false;
        for ((path, step), result) in items.into_iter().zip(results) {
            let rel = step.rel().clone();
            let mut error = None;
            let mut repeated = false;
            match (&step, result) {
                (Step::Isolate(_, cpus), Ok(state)) => {
                    // Recorded as made whatever it reads: an invalid one is
                    // undone by the release that follows.
                    self.partitions.made.done(&step);
                    let (state, effective) = state.unwrap_or_default();
                    match partition::judge(&state, effective.as_deref(), cpus) {
                        Ok(()) => {
                            self.partitions.failing.remove(&rel);
                            info!(cgroup = %rel, cpus = %cpus, "isolated partition made");
                        }
                        Err(reason) => {
                            self.partition_failed(&rel, cpus, &online, reason);
                            failed = true;
                            continue;
                        }
                    }
                }
                (Step::Isolate(..), Err(e)) if e.is_not_found() => continue,
                (Step::Isolate(_, cpus), Err(e)) => {
                    self.socket.metrics.write_errors.inc();
                    // The write may have gone through (the read-back failed,
                    // a timeout): recorded as made, so the release that
                    // follows writes `member` (harmless on a member) before
                    // the grants go, rather than leave an invalid partition
                    // that nothing undoes.
                    self.partitions.made.done(&step);
                    self.partition_failed(&rel, cpus, &online, chain(&e));
                    failed = true;
                    continue;
                }
                (_, Ok(_)) => {
                    self.partitions.errors.remove(&path);
                    self.partitions.made.done(&step);
                    match &step {
                        Step::Member(_) => info!(cgroup = %rel, "isolated partition undone"),
                        _ => {
                            info!(cgroup = %rel, path = %path.display(), data = %step.data(), "exclusive CPUs granted")
                        }
                    }
                }
                (_, Err(e)) if e.is_not_found() => self.forget_partitions(&rel),
                (_, Err(e)) => {
                    repeated = !self
                        .partitions
                        .new_error(&path, format!("{}: {}", step.data(), chain(&e)));
                    if !repeated {
                        warn!(cgroup = %rel, path = %path.display(), data = %step.data(), errno = e.raw_os_error(), error = %chain(&e), "cannot write the partition; will retry");
                    }
                    self.socket.metrics.write_errors.inc();
                    // A grant that does not grow fails the partitions below
                    // it; one that does not shrink leaves them what they need.
                    if let Step::Grant(_, set) = &step
                        && !self
                            .partitions
                            .made
                            .grants
                            .get(&rel)
                            .is_some_and(|had| set.is_subset(had))
                    {
                        let below: Vec<(Rel, CpuSet)> = self
                            .wanted_partitions()
                            .into_iter()
                            .filter(|(r, _)| cgroup::is_within(r, &rel))
                            .collect();
                        for (r, cpus) in below {
                            self.partition_failed(
                                &r,
                                &cpus,
                                &online,
                                format!("cannot write {}: {}", path.display(), chain(&e)),
                            );
                        }
                        failed = true;
                    }
                    error = Some(chain(&e));
                }
            }
            if !repeated {
                self.socket.events.push(api::EventKind::Partition {
                    cgroup: rel.to_string(),
                    file: step.file().to_string(),
                    new: step.data(),
                    error,
                });
            }
        }
        self.engine.set_isolated(self.partitions.made.cpus());
        self.partition_metrics();
        self.save_state();
        failed
    }

    fn partition_metrics(&mut self) {
        let m = &self.socket.metrics;
        let p = &self.partitions;
        m.partitions_isolated.set(p.isolated().count() as i64);
        m.partitions_failing.set(p.failing.len() as i64);
        self.socket.dirty = true;
    }

    /// The `partitions` of the status: absent when `isolation` is off and
    /// nothing is made.
    pub(super) fn partition_status(&self) -> Option<api::Partitions> {
        let on = self.cfg.isolation == Isolation::Partition;
        let p = &self.partitions;
        if !on && p.made.roots.is_empty() {
            return None;
        }
        Some(api::Partitions {
            on,
            refused: self.partitions_refused(),
            isolated: p
                .isolated()
                .map(|(rel, cpus)| api::Partition {
                    cgroup: rel.to_string(),
                    cpus: cpus.clone(),
                })
                .collect(),
            failing: p
                .failing
                .iter()
                .map(|(rel, f)| api::FailingPartition {
                    cgroup: rel.to_string(),
                    cpus: f.cpus.clone(),
                    reason: f.reason.clone(),
                })
                .collect(),
            foreign: p.foreign.clone(),
        })
    }
}
