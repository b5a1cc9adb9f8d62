//! The watchdog's rounds, as the daemon runs them: what to check (the
//! required paths, stuck tasks, frozen cgroups, Slurm's jobs), reading it in a task of its
//! own on the I/O threads, and acting on the findings back in the event loop
//! (repairs, reports, thawing). What is stuck and what to repair is decided
//! by [`crate::watchdog`].

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{info, warn};

use super::sweep::{PARTS, part_of};
use super::{Daemon, chain, release_free_memory};
use crate::api;
use crate::cgroup::{self, Hierarchy, Rel, Version};
use crate::config::Config;
use crate::io::IoPool;
use crate::procfs;
use crate::slurm;
use crate::watchdog::{self, Decision, Mount, Repairs, Stuck};

/// What the watchdog knows between its checks.
pub(super) struct Watch {
    /// The mounted hierarchies, listed at start-up.
    mounts: Vec<Mount>,
    /// Every path that can be required (each driver's, present or not): a
    /// removal at or above one starts a check.
    may_require: Vec<String>,
    pub(super) repairs: Repairs,
    dstate: Stuck<(u32, u32, u64)>,
    pub(super) stuck_tasks: Vec<api::StuckTask>,
    frozen: Stuck<Rel>,
    pub(super) frozen_cgroups: Vec<api::Frozen>,
    /// Slurm's jobs, as the last full round found them (with `[slurm]
    /// housekeeping`: as the last look every half second did).
    pub(super) slurm_jobs: Vec<slurm::Job>,
    /// The roots of Slurm's trees the last full round found, wherever
    /// they are (the engine knows those in its subtrees alone).
    pub(super) slurm_roots: Vec<String>,
    /// The kubelet's static CPU manager, while its checkpoint says it owns
    /// CPUs ([`crate::kubelet`]).
    pub(super) kubelet: Option<crate::kubelet::CpuManager>,
    /// Why the kubelet's checkpoint could not be read or used, while it
    /// cannot (told once).
    kubelet_error: Option<String>,
    rounds: Rounds,
    /// The part of the processes and workloads the next full round reads
    /// ([`super::sweep::PARTS`]): besides it, every one found stuck or
    /// frozen before.
    part: u32,
    /// The processes listed by the round that began this pass over the
    /// parts (part 0): the rounds after it read their part of this list.
    /// `None`: the next round lists them.
    pids: Option<Arc<[u32]>>,
    tx: tokio::sync::mpsc::Sender<(u64, Findings)>,
    pub(super) rx: tokio::sync::mpsc::Receiver<(u64, Findings)>,
}

impl Watch {
    /// The watchdog of the hierarchies `mounts`, not yet configured.
    pub(super) fn new(mounts: Vec<Mount>) -> Self {
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        Watch {
            mounts,
            may_require: Vec::new(),
            repairs: Repairs::new(false, Duration::ZERO),
            dstate: Stuck::new(Duration::MAX),
            stuck_tasks: Vec::new(),
            frozen: Stuck::new(Duration::MAX),
            frozen_cgroups: Vec::new(),
            slurm_jobs: Vec::new(),
            slurm_roots: Vec::new(),
            kubelet: None,
            kubelet_error: None,
            rounds: Rounds::default(),
            part: 0,
            pids: None,
            tx,
            rx,
        }
    }

    /// Takes the configuration's required paths, repairs and thresholds. A
    /// round running now checked what the old configuration required: its
    /// findings are dropped when it ends.
    pub(super) fn configure(&mut self, cfg: &Config) {
        self.may_require = watchdog::required(&cfg.managed, &cfg.required_paths, |_| true);
        self.repairs.configure(cfg.repair, cfg.repair_cooldown);
        self.dstate.set_threshold(cfg.dstate_threshold);
        self.frozen.set_threshold(cfg.frozen_threshold);
        self.rounds.generation += 1;
        self.pids = None;
    }
}

/// When rounds of checks run: one at a time; one asked for meanwhile runs
/// after it; a round that began before a reload reports nothing.
#[derive(Debug, Default)]
struct Rounds {
    running: bool,
    /// Another round was asked for meanwhile (`true`: paths only).
    again: Option<bool>,
    /// Bumped by a reload.
    generation: u64,
}

impl Rounds {
    /// Asks for a round (`paths_only`: the required paths alone). Returns
    /// the generation to start it in now, or `None` when one is running:
    /// then it follows that one, checking everything if either asked so.
    fn ask(&mut self, paths_only: bool) -> Option<u64> {
        if self.running {
            self.again = Some(self.again.unwrap_or(true) && paths_only);
            return None;
        }
        self.running = true;
        Some(self.generation)
    }

    /// The round started in `generation` ended: whether its findings still
    /// count, and the round to start next, if one was asked for.
    fn ended(&mut self, generation: u64) -> (bool, Option<bool>) {
        self.running = false;
        (generation == self.generation, self.again.take())
    }
}

/// Freezer files read per batch by a round of checks.
const FREEZER_CHUNK: usize = 512;

impl Daemon {
    /// Whether the watchdog holds what happens in cgroup `rel` (tasks in D
    /// state, a freeze) against the node's health: the managed subtrees and
    /// the exclusive workloads, which the operator asked to be watched. Not
    /// the shared cgroups: in `user.slice` anyone can put a task of their own
    /// in D state (a `vfork` parent) or freeze a cgroup delegated to them.
    fn watched(&self, rel: &str) -> bool {
        self.scope().managed(rel) || self.engine.is_exclusive(rel)
    }

    /// A cgroup directory `rel` was removed: if a required path was at or
    /// below it, the watchdog checks the paths before the next event.
    pub(super) fn note_removed(&mut self, rel: &str) {
        if self
            .dog
            .may_require
            .iter()
            .any(|r| cgroup::is_within(r, rel))
        {
            self.start_checks(true);
        }
    }

    /// Starts a round of the watchdog's checks (required paths and, unless
    /// `paths_only`, stuck tasks and frozen cgroups). Its reads run in a task
    /// of their own, so events keep being handled meanwhile; the findings come
    /// back to the event loop ([`Self::checked`]). One round at a time: a
    /// request while one runs is remembered and started after it.
    pub(super) fn start_checks(&mut self, paths_only: bool) {
        let Some(generation) = self.dog.rounds.ask(paths_only) else {
            return;
        };
        let input = self.check_input(paths_only);
        if !paths_only {
            self.dog.part = (self.dog.part + 1) % PARTS;
        }
        let tx = self.dog.tx.clone();
        tokio::spawn(async move {
            let _ = tx.send((generation, gather(input).await)).await;
        });
    }

    /// A round of checks started in `generation` ended with `found`.
    pub(super) async fn checked(&mut self, generation: u64, found: Findings) {
        let (current, next) = self.dog.rounds.ended(generation);
        if current {
            self.act(found).await;
        }
        if let Some(paths_only) = next {
            self.start_checks(paths_only);
        }
    }

    /// What a round of checks needs to know, copied off the daemon.
    pub(super) fn check_input(&self, paths_only: bool) -> CheckInput {
        let has_freezer = self.hier.version == Version::V2
            || self
                .dog
                .mounts
                .iter()
                .any(|m| m.kind == watchdog::MountKind::V1Freezer);
        // Workloads are the cgroups without children: those a runtime
        // freezes. Those of this round's part, and those frozen before.
        let part = self.dog.part;
        let freezer = (!paths_only && has_freezer).then(|| {
            self.engine
                .known()
                .filter(|rel| {
                    (part_of(rel) == part || self.dog.frozen.tracks(*rel))
                        && !self.engine.is_structural(rel)
                        && !self.engine.is_foreign(rel)
                        && self.watched(rel)
                })
                .cloned()
                .collect()
        });
        // The processes of this round's part, and those with a task stuck
        // before, of the list taken at the start of the pass.
        let stuck_pids = self.dog.dstate.tracked().map(|&(pid, _, _)| pid).collect();
        let pids = (part != 0).then(|| self.dog.pids.clone()).flatten();
        CheckInput {
            pool: self.pool.clone(),
            mounts: self.dog.mounts.clone(),
            managed: self.cfg.managed.clone(),
            required_paths: self.cfg.required_paths.clone(),
            proc_root: (!paths_only).then(|| self.cfg.proc_root.clone()),
            part,
            stuck_pids,
            pids,
            hier: self.hier.clone(),
            kubelet: self.cfg.kubelet_cpu_manager_state.clone(),
            freezer,
            // Listed only by a full round (`gather`).
            slurm_roots: if paths_only {
                Vec::new()
            } else {
                self.engine.slurm_roots().map(|r| r.to_string()).collect()
            },
        }
    }

    /// Acts on a round's findings: repairs missing paths (or reports them),
    /// reports tasks and cgroups stuck past their thresholds, thaws with
    /// `thaw_frozen`; then the status.
    pub(super) async fn act(&mut self, found: Findings) {
        if found.pids.is_some() {
            self.dog.pids = found.pids;
        }
        self.act_on_paths(found.missing).await;
        if let Some(sleepers) = found.sleepers {
            self.act_on_sleepers(sleepers);
        }
        if let Some(frozen) = found.frozen {
            self.act_on_frozen(frozen).await;
        }
        self.count_interrupts(found.counters);
        self.act_on_kubelet(found.kubelet).await;
        match found.slurm {
            Some(Ok(found)) => {
                self.dog.slurm_jobs = found.jobs;
                self.dog.slurm_roots = found.roots;
                if self.take_jobs() {
                    self.apply().await;
                }
            }
            Some(Err(e)) => warn!(error = %e, "cannot list Slurm's jobs"),
            None => {}
        }
        self.remove_empty_runs().await;
        // A round over every workload allocates about as much as a reconcile.
        release_free_memory();
        self.notify_status(false);
        self.socket.dirty = true;
    }

    /// The kubelet's CPU manager as its checkpoint says: with the static
    /// policy it is a second CPU owner, and pinctld steps back from what
    /// it owns (the kubepods subtrees, its exclusive CPUs: [`Self::scope_for`],
    /// [`crate::engine::Engine::set_elsewhere`]) until the checkpoint says
    /// otherwise. A checkpoint that cannot be read or used changes nothing.
    ///
    /// When it gives the pods back, each container it pinned keeps its CPUs
    /// where they are a valid assignment of what pinctld decides it asks:
    /// the reconcile that reads the pods back adopts them as a start-up
    /// does, from the last `static` checkpoint's entries
    /// ([`crate::engine::Engine::adopt_handed_over`]). It runs to its end,
    /// as a reload's does, so no plan sees part of the pods.
    async fn act_on_kubelet(&mut self, found: Option<Result<crate::kubelet::CpuManager, String>>) {
        let owner = match found {
            Some(Err(e)) => {
                if self.dog.kubelet_error.as_ref() != Some(&e) {
                    warn!(error = %e, "cannot use the kubelet's CPU manager checkpoint (kubelet_cpu_manager_state)");
                }
                self.dog.kubelet_error = Some(e);
                return;
            }
            Some(Ok(m)) => Some(m).filter(crate::kubelet::CpuManager::owns_cpus),
            None => None,
        };
        self.dog.kubelet_error = None;
        if owner == self.dog.kubelet {
            return;
        }
        match &owner {
            Some(m) => warn!(
                exclusive = %m.exclusive,
                containers = m.containers,
                "the kubelet's static CPU manager owns the CPUs of its pods (kubelet_cpu_manager_state): pinctld leaves the kubepods subtrees and those CPUs alone; run the kubelet with cpuManagerPolicy: none to let pinctld pin pods"
            ),
            None => info!(
                "the kubelet's static CPU manager is gone: pinctld manages the kubepods subtrees again"
            ),
        }
        let elsewhere = owner
            .as_ref()
            .map(|m| m.exclusive.clone())
            .unwrap_or_default();
        let handed_over = match &owner {
            None => self.dog.kubelet.as_ref().map(|m| m.held()),
            Some(_) => None,
        };
        self.dog.kubelet = owner;
        self.engine.set_elsewhere(elsewhere);
        self.rescope();
        if !self.ready {
            return;
        }
        match handed_over {
            Some(held) => {
                self.engine.adopt_handed_over(held.clone());
                self.reconcile(true).await;
                self.engine.end_startup();
                let workloads = self.engine.workloads();
                let kept = held
                    .iter()
                    .filter(|(key, cpus)| {
                        workloads.get(*key).and_then(|w| w.cpus.as_ref()) == Some(*cpus)
                    })
                    .count();
                info!(
                    kept,
                    pinned = held.len(),
                    "the containers the kubelet pinned are pinctld's: those kept hold the CPUs it gave them, nothing written; the others are planned afresh (pinctl kubelet-handover says why)"
                );
            }
            None => self.ask_sweep(true).await,
        }
    }

    async fn act_on_paths(&mut self, missing_now: Vec<(PathBuf, Option<String>)>) {
        let now = Instant::now();
        let mut missing = Vec::new();
        for (path, unreadable) in missing_now {
            if let Some(e) = unreadable {
                missing.push(api::MissingPath {
                    path,
                    problem: format!("cannot check: {e}"),
                });
                continue;
            }
            let Some(mount) = self
                .dog
                .mounts
                .iter()
                .find(|m| path.starts_with(&m.dir))
                .cloned()
            else {
                continue;
            };
            let rel = path
                .strip_prefix(&mount.dir)
                .unwrap_or(&path)
                .to_string_lossy()
                .into_owned();
            match self.dog.repairs.decide(&path, now) {
                Decision::Leave(why) => {
                    // Once per path, not at every check.
                    if !self.dog.repairs.missing.iter().any(|m| m.path == path) {
                        warn!(path = %path.display(), "required cgroup path missing: {why}");
                    }
                    missing.push(api::MissingPath { path, problem: why });
                }
                Decision::Repair => {
                    let result = self
                        .pool
                        .run_op("repair", &path, move |fs| {
                            watchdog::repair(fs, &mount, &rel)
                        })
                        .await;
                    self.dog.repairs.attempted(&path, now, result.is_ok());
                    match result {
                        Ok(repaired) => {
                            warn!(path = %path.display(), created = ?repaired.created, repairs = self.dog.repairs.count, "required cgroup path was missing; repaired");
                            self.socket.metrics.repairs.inc();
                            self.socket.events.push(api::EventKind::Repair {
                                path,
                                created: repaired.created,
                            });
                        }
                        Err(e) => {
                            let why = format!("repair failed: {}", chain(&e));
                            warn!(path = %path.display(), "required cgroup path missing: {why}");
                            missing.push(api::MissingPath { path, problem: why });
                        }
                    }
                }
            }
        }
        self.dog.repairs.missing = missing;
    }

    /// Tasks of the managed cgroups in D state longer than `dstate_threshold`.
    fn act_on_sleepers(&mut self, sleepers: Vec<procfs::Sleeper>) {
        let mut seen = Vec::new();
        let mut info = BTreeMap::new();
        for procfs::Sleeper {
            stat,
            cgroup,
            wchan,
            uid,
        } in sleepers
        {
            let Some(cgroup) = cgroup else { continue };
            if !self.watched(&cgroup) {
                continue;
            }
            let key = (stat.pid, stat.tid, stat.start);
            seen.push(key);
            info.insert(key, (stat.comm, cgroup, wchan, uid));
        }
        let mut stuck = Vec::new();
        for (key, long) in self.dog.dstate.update(Instant::now(), seen) {
            let Some((comm, cgroup, wchan, uid)) = info.remove(&key) else {
                continue;
            };
            stuck.push(api::StuckTask {
                pid: key.0,
                tid: key.1,
                comm,
                cgroup,
                wchan,
                uid,
                secs: long.as_secs(),
            });
        }
        for t in &stuck {
            if !self
                .dog
                .stuck_tasks
                .iter()
                .any(|o| (o.pid, o.tid) == (t.pid, t.tid))
            {
                warn!(pid = t.pid, tid = t.tid, uid = ?t.uid, comm = %t.comm, cgroup = %t.cgroup, wchan = ?t.wchan, secs = t.secs, "task stuck in uninterruptible sleep (D state)");
            }
        }
        self.dog.stuck_tasks = stuck;
    }

    /// Cgroups frozen longer than `frozen_threshold`; thawed with `thaw_frozen`.
    async fn act_on_frozen(&mut self, frozen: Vec<(Rel, Option<u32>)>) {
        let mut out = Vec::new();
        let owners: BTreeMap<Rel, Option<u32>> = frozen.iter().cloned().collect();
        let frozen: Vec<Rel> = frozen.into_iter().map(|(rel, _)| rel).collect();
        for (rel, long) in self.dog.frozen.update(Instant::now(), frozen) {
            let owner = owners.get(&rel).copied().flatten();
            let mut thawed = false;
            if self.cfg.thaw_frozen {
                let path = self.hier.freezer_file(&rel);
                match self.pool.write(&path, self.hier.thaw_value()).await {
                    Ok(()) => {
                        warn!(cgroup = %rel, secs = long.as_secs(), "cgroup was frozen too long; thawed");
                        thawed = true;
                    }
                    Err(e) => {
                        warn!(cgroup = %rel, error = %chain(&e), "cannot thaw a cgroup frozen too long")
                    }
                }
            } else if !self.dog.frozen_cgroups.iter().any(|f| *f.cgroup == *rel) {
                warn!(cgroup = %rel, owner = ?owner, secs = long.as_secs(), "cgroup frozen longer than frozen_threshold");
            }
            out.push(api::Frozen {
                cgroup: rel.to_string(),
                owner,
                secs: long.as_secs(),
                thawed,
            });
        }
        self.dog.frozen_cgroups = out;
    }
}

/// What a round of the watchdog's checks reads with.
pub(super) struct CheckInput {
    pool: IoPool,
    mounts: Vec<Mount>,
    managed: Vec<String>,
    required_paths: Vec<String>,
    /// `None`: no stuck-task check this round.
    proc_root: Option<PathBuf>,
    /// The part of the processes whose tasks to read ([`PARTS`], by pid)...
    part: u32,
    /// ... and those with a task stuck at the last look ...
    stuck_pids: BTreeSet<u32>,
    /// ... of this list (`None`: list them now).
    pids: Option<Arc<[u32]>>,
    hier: Arc<Hierarchy>,
    /// The workloads whose freezer to read; `None`: no frozen check this round.
    freezer: Option<Vec<Rel>>,
    /// The roots of Slurm's trees the engine knows, wherever they are.
    slurm_roots: Vec<String>,
    /// The kubelet's CPU manager checkpoint (`kubelet_cpu_manager_state`).
    kubelet: Option<PathBuf>,
}

/// What a round of the watchdog's checks found.
pub(super) struct Findings {
    /// Required paths missing, or (with the error) that could not be checked.
    missing: Vec<(PathBuf, Option<String>)>,
    /// Tasks in D state, if the round looked.
    sleepers: Option<Vec<procfs::Sleeper>>,
    /// The processes, if the round listed them.
    pids: Option<Arc<[u32]>>,
    /// Frozen cgroups, if the round looked.
    frozen: Option<Vec<(Rel, Option<u32>)>>,
    /// Slurm's jobs, if the round looked.
    slurm: Option<Result<slurm::Found, String>>,
    /// Interrupts and softirqs per CPU, if the round looked.
    counters: Option<super::noise::Counters>,
    /// The kubelet's CPU manager: `None` when not looked at or there is no
    /// checkpoint.
    kubelet: Option<Result<crate::kubelet::CpuManager, String>>,
}

/// The reads of one round of checks, every one a timed I/O call of its own
/// (batched): a `/proc` file of a stuck task can hang as well.
pub(super) async fn gather(input: CheckInput) -> Findings {
    let CheckInput {
        pool,
        mounts,
        managed,
        required_paths,
        proc_root,
        part,
        stuck_pids,
        pids,
        hier,
        freezer,
        slurm_roots,
        kubelet,
    } = input;
    let version = hier.version;
    // Which managed kubepods roots exist anywhere: that tells the driver.
    let probes: Vec<(PathBuf, String)> = mounts
        .iter()
        .flat_map(|m| managed.iter().map(|root| (m.dir.join(root), root.clone())))
        .collect();
    let items = probes.iter().map(|(p, _)| (p.clone(), ())).collect();
    let present = pool
        .run_batch("stat", items, |fs, path, _| fs.exists(path))
        .await;
    let present: Vec<&String> = probes
        .iter()
        .zip(&present)
        .filter(|(_, r)| matches!(r, Ok(true)))
        .map(|((_, root), _)| root)
        .collect();
    let required = watchdog::required(&managed, &required_paths, |r| {
        present.iter().any(|p| p.as_str() == r)
    });
    let wanted: Vec<PathBuf> = mounts
        .iter()
        .flat_map(|m| required.iter().map(|rel| m.dir.join(rel)))
        .collect();
    let items = wanted.iter().map(|p| (p.clone(), ())).collect();
    let exists = pool
        .run_batch("stat", items, |fs, path, _| fs.exists(path))
        .await;
    let missing = wanted
        .into_iter()
        .zip(exists)
        .filter_map(|(path, r)| match r {
            Ok(true) => None,
            Ok(false) => Some((path, None)),
            Err(e) => Some((path, Some(chain(&e)))),
        })
        .collect();

    // The kubelet's checkpoint: a file on disk, read as the kernel's are
    // (a hung mount must not hang the loop either).
    let kubelet = match kubelet {
        None => None,
        Some(path) => match pool.read(&path).await {
            Ok(text) => {
                Some(crate::kubelet::parse(&text).map_err(|e| format!("{}: {e}", path.display())))
            }
            Err(e) if e.is_not_found() => None,
            Err(e) => Some(Err(chain(&e))),
        },
    };

    // Slurm's jobs: one walk of the slices, in one timed call.
    let slurm = match proc_root {
        None => None,
        Some(_) => {
            let h = hier.clone();
            let found = pool
                .run_op("list", &hier.cpuset, move |fs| {
                    slurm::find(fs, &h, &slurm_roots)
                })
                .await;
            Some(found.map_err(|e| chain(&e)))
        }
    };

    let counters = match &proc_root {
        Some(root) => Some(super::noise::read(&pool, root).await),
        None => None,
    };
    // Listed once a pass: listing every process at every round cost more
    // than a sixth of reading them.
    let mut listed = None;
    let sleepers = match proc_root {
        None => None,
        Some(proc_root) => {
            let all = match pids {
                Some(pids) => Ok(pids),
                None => procfs::listed(&pool, &proc_root)
                    .await
                    .map(Arc::<[u32]>::from)
                    .inspect(|all| listed = Some(all.clone())),
            };
            match all {
                Ok(all) => {
                    let mine = all
                        .iter()
                        .copied()
                        .filter(|pid| pid % PARTS == part || stuck_pids.contains(pid))
                        .collect();
                    let read = procfs::each_of(&pool, &proc_root, mine, move |fs, root, pid| {
                        procfs::read_dstate(fs, root, pid, version)
                    })
                    .await;
                    Some(
                        read.into_iter()
                            .filter_map(|(_, r)| r.ok())
                            .flatten()
                            .collect(),
                    )
                }
                Err(e) => {
                    warn!(error = %chain(&e), "cannot list processes");
                    None
                }
            }
        }
    };

    // In chunks: the paths of every workload's freezer at once would be the
    // daemon's biggest allocation.
    let frozen = match freezer {
        None => None,
        Some(rels) => {
            let mut frozen = Vec::new();
            for chunk in rels.chunks(FREEZER_CHUNK) {
                let items = chunk
                    .iter()
                    .map(|rel| (hier.freezer_file(rel), ()))
                    .collect();
                // A frozen one with its owner: whose it is, for the report.
                let read = pool
                    .run_batch("read", items, |fs, path, _| match fs.read(path) {
                        Ok(t) if watchdog::is_frozen(&t) => {
                            let dir = path.parent().unwrap_or(path);
                            Ok(Some(fs.owner(dir).ok().map(|o| o.uid)))
                        }
                        Ok(_) => Ok(None),
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                        Err(e) => Err(e),
                    })
                    .await;
                frozen.extend(chunk.iter().zip(read).filter_map(|(rel, r)| match r {
                    Ok(Some(owner)) => Some((rel.clone(), owner)),
                    _ => None,
                }));
            }
            Some(frozen)
        }
    };
    Findings {
        missing,
        sleepers,
        pids: listed,
        frozen,
        slurm,
        counters,
        kubelet,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_round_at_a_time_and_what_was_asked_meanwhile_follows_it() {
        let mut r = Rounds::default();
        assert_eq!(r.ask(true), Some(0), "the first starts at once");
        assert_eq!(r.ask(true), None, "waits for the running one");
        assert_eq!(r.ask(false), None);
        assert_eq!(r.ask(true), None);
        // Paths only, then everything, then paths only: everything follows.
        assert_eq!(r.ended(0), (true, Some(false)));
        assert_eq!(r.ask(false), Some(0));
        assert_eq!(r.ended(0), (true, None), "nothing more was asked");
    }

    #[test]
    fn a_round_begun_before_a_reload_reports_nothing() {
        let mut r = Rounds::default();
        let started = r.ask(false).unwrap();
        r.generation += 1; // what `Watch::configure` does
        assert_eq!(r.ended(started), (false, None));
        assert_eq!(r.ask(true), Some(1));
        assert_eq!(r.ended(1), (true, None));
    }
}
