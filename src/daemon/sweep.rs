//! Walking the cgroup tree: a scan run to its end (new cgroups, start-up, a
//! reload), and the full reconcile in the background ([`Sweep`]).
//!
//! - One walk serves both ([`Walk`]): each directory is watched before its
//!   batch lists it, so a child made in between is seen by one or the other.
//!   A cgroup found gone is forgotten; one that cannot be read keeps what
//!   was known of it.
//! - A sweep (the periodic timer, an inotify overflow, unwatched cgroups)
//!   gives the loop one batch per turn: a new pin is served between two
//!   batches, not after the whole tree (a full reconcile's cost:
//!   `docs/src/benchmarks.md`).
//! - A sweep's reading older than what the engine has is dropped, in whole or
//!   in part ([`Fresh`]).
//! - The periodic reconcile reads one of [`PARTS`] parts of the tree at a
//!   time ([`Daemon::reconcile_part`]): every cgroup is read whole once per
//!   `reconcile_interval`, and an idle daemon's reads are spread evenly over
//!   it. Why that is enough, and what is read whole at once instead:
//!   ARCHITECTURE.md, "The periodic reconcile".

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Instant;

use tokio::task::JoinSet;
use tracing::{debug, info, warn};

use super::sync::{MEMS_AGE, read_topology};
use super::{Daemon, chain, release_free_memory};
use crate::api;
use crate::cgroup::{self, Rel};
use crate::cpuset::CpuSet;
use crate::engine::{File, Reading};
use crate::intent::{self, Known};
use crate::io::IoError;

/// Cgroups read by one job on an I/O thread in a scan run to its end.
const SCAN_BATCH: usize = 128;

/// A scan's batches in flight at once: enough to keep every I/O thread busy
/// while the event loop takes in the last batch's readings.
const SCAN_BATCHES: usize = 4;

/// A background sweep's batches are smaller, and fewer are in flight (one
/// per I/O thread by default): a new pin's own reads and writes wait on the
/// I/O threads behind what is queued there, here at most the batch a thread
/// is reading (32 cgroups, under a millisecond on real v1 cgroupfs).
const SWEEP_BATCH: usize = 32;
const SWEEP_BATCHES: usize = 2;

/// The parts the periodic reconcile reads the tree in, one every
/// `reconcile_interval / PARTS`. Each known cgroup belongs to one part, by
/// a hash of its path (`part_of`); a part reads its cgroups, the subtree
/// roots, and below them only the cgroups no event told of.
pub const PARTS: u32 = 6;

/// How often the periodic reconcile reads a part of the tree, for
/// `reconcile_interval` (never zero: a timer cannot tick that often).
pub(super) fn part_period(reconcile_interval: std::time::Duration) -> std::time::Duration {
    (reconcile_interval / PARTS).max(std::time::Duration::from_millis(1))
}

/// The part of the periodic reconcile that reads cgroup `rel`: the same for
/// as long as the daemon runs (the hasher's keys are fixed).
pub(super) fn part_of(rel: &str) -> u32 {
    use std::hash::{DefaultHasher, Hash, Hasher};
    let mut h = DefaultHasher::new();
    rel.hash(&mut h);
    (h.finish() % u64::from(PARTS)) as u32
}

/// One batch's cgroups and their readings, in order.
pub(super) type Batch = (Vec<Rel>, Vec<Result<Option<Reading>, IoError>>);

/// A walk down subtrees of the tree, in batches on the I/O threads.
pub(super) struct Walk {
    queued: HashSet<Rel>,
    pending: VecDeque<Rel>,
    running: JoinSet<Batch>,
    batch: usize,
    in_flight: usize,
    /// The `cpuset.mems` the engine knows are not read again
    /// ([`crate::engine::Engine::mems_known`]).
    mems_known: bool,
    /// Children the engine knows are not read (a part of the periodic
    /// reconcile: they belong to their own part).
    only_new: bool,
}

impl Walk {
    fn new(seeds: Vec<Rel>, batch: usize, in_flight: usize, mems_known: bool) -> Self {
        Walk {
            queued: seeds.iter().cloned().collect(),
            pending: seeds.into(),
            running: JoinSet::new(),
            batch,
            in_flight,
            mems_known,
            only_new: false,
        }
    }

    fn done(&self) -> bool {
        self.pending.is_empty() && self.running.is_empty()
    }

    /// The next batch read; `None` when none is in flight.
    pub(super) async fn next(&mut self) -> Option<Batch> {
        loop {
            match self.running.join_next().await? {
                Ok(batch) => return Some(batch),
                Err(e) => warn!(error = %e, "cgroup read task failed"),
            }
        }
    }
}

/// A full reconcile under way in the background.
pub(super) struct Sweep {
    walk: Walk,
    started: Instant,
    /// When the loop last took in one of its batches (or it began).
    taken_at: Instant,
    scan_started: Instant,
    fresh: Fresh,
    /// Another reconcile was asked for while this one ran (an overflowed
    /// queue: what it lost may be in a part already read), re-reading the
    /// topology or not: it follows.
    again: Option<bool>,
    /// The part of the periodic reconcile read ([`PARTS`]); `None`: the
    /// whole tree.
    part: Option<u32>,
}

impl Sweep {
    pub(super) fn walk(&mut self) -> &mut Walk {
        &mut self.walk
    }

    /// Whether the loop has taken in none of its batches for
    /// [`super::OVERDUE`]: behind a steady stream of events it would
    /// otherwise never end (and what it keeps of them, [`Fresh`], would
    /// grow).
    pub(super) fn overdue(&self) -> bool {
        self.taken_at.elapsed() >= super::OVERDUE
    }
}

/// What events told the engine while a sweep ran.
#[derive(Default)]
struct Fresh {
    /// Cgroups read.
    read: HashSet<Rel>,
    /// Subtrees forgotten.
    forgotten: Vec<Rel>,
    /// Cgroups whose `cpuset.cpus` or `cpuset.mems` the loop wrote or read
    /// again (a plan's writes that took, a write observed), and which of
    /// the two: a sweep's reading of them is taken with the engine's set
    /// for those, as the rest of it is no older than what the engine has (a
    /// shared cgroup is written at each pin, so under churn dropping the
    /// whole reading would never read it again).
    sets: HashMap<Rel, Newer>,
    /// Cgroups whose CPU quota the loop put back: a sweep's reading of one
    /// may still carry the lifted limit, which would lift it again.
    quotas: HashSet<Rel>,
}

/// Which of a cgroup's sets the loop learnt since a sweep read them.
#[derive(Default, Clone, Copy)]
struct Newer {
    cpus: bool,
    mems: bool,
}

impl Fresh {
    /// Whether `rel` is at or below a cgroup forgotten.
    fn forgot(&self, rel: &str) -> bool {
        self.forgotten.iter().any(|f| cgroup::is_within(rel, f))
    }
}

impl Daemon {
    /// Reads the cgroups `seeds` and every cgroup below them not seen
    /// before, to the end. With `mems_known`, the `cpuset.mems` the engine
    /// knows ([`crate::engine::Engine::mems_known`]) are not read again.
    pub(super) async fn scan(&mut self, seeds: Vec<Rel>, mems_known: bool) {
        let mut walk = Walk::new(seeds, SCAN_BATCH, SCAN_BATCHES, mems_known);
        loop {
            self.fill(&mut walk);
            let Some(batch) = walk.next().await else {
                break;
            };
            self.beat();
            self.take(&mut walk, batch, None);
        }
    }

    /// A full reconcile, run to its end: rescan every subtree, forget what
    /// vanished, re-read the topology (CPU hot-plug), plan and write. A
    /// sweep in the background is replaced.
    pub(super) async fn reconcile(&mut self, reread_topology: bool) {
        self.start_sweep(reread_topology, None, SCAN_BATCH, SCAN_BATCHES)
            .await;
        while let Some(sweep) = self.sweep.as_mut() {
            let batch = sweep.walk.next().await;
            self.beat();
            self.swept(batch).await;
        }
    }

    /// A full reconcile in the background, or after the one under way.
    pub(super) async fn ask_sweep(&mut self, reread_topology: bool) {
        match self.sweep.as_mut() {
            Some(sweep) => {
                let again = sweep.again.get_or_insert(false);
                *again |= reread_topology;
            }
            None => {
                self.start_sweep(reread_topology, None, SWEEP_BATCH, SWEEP_BATCHES)
                    .await
            }
        }
    }

    /// The periodic reconcile's next part, in the background. CPU hot-plug
    /// is looked for first: a change has the whole tree read at once (on v1
    /// the kernel took the CPUs out of every cpuset, with no event).
    pub(super) async fn reconcile_part(&mut self) {
        if self.follow_topology().await {
            self.ask_sweep(false).await;
            return;
        }
        if self.sweep.is_some() {
            // One under way serves the timer too: sweeps never run back to
            // back because the tree is slow to read.
            return;
        }
        let part = self.next_part;
        self.next_part = (part + 1) % PARTS;
        self.start_sweep(false, Some(part), SWEEP_BATCH, SWEEP_BATCHES)
            .await;
    }

    /// Marks what an event just read or forgot: a sweep's reading of it is
    /// older.
    pub(super) fn mark_fresh(&mut self, rel: &str, forgotten: bool) {
        if let Some(sweep) = self.sweep.as_mut() {
            if forgotten {
                // Once per subtree: a cgroup made and removed over and
                // over is one entry.
                if !sweep.fresh.forgot(rel) {
                    sweep.fresh.forgotten.push(rel.into());
                }
            } else {
                sweep.fresh.read.insert(rel.into());
            }
        }
    }

    /// Whether `rel` is a cgroup a sweep found (and so watches) but the
    /// engine does not know yet: its reading waits in a batch, or could not
    /// be made. Only after lost events (an overflowed queue, an unwatched
    /// cgroup) does a sweep find a cgroup no event told of. An event about
    /// it says more than that reading, which may be older: the cgroup is
    /// read at once, as a new one is ([`Self::mark_fresh`] then drops the
    /// sweep's reading), where the engine would drop an event about a
    /// cgroup it does not know.
    pub(super) fn found_by_sweep(&self, rel: &str) -> bool {
        self.sweep
            .as_ref()
            .is_some_and(|s| s.walk.queued.contains(rel))
            && !self.engine.knows(rel)
            && self.scope().holds(rel)
    }

    /// Marks a cgroup whose CPU quota the loop just put back: a sweep's
    /// reading of it may still show it lifted.
    pub(super) fn mark_quota_fresh(&mut self, rel: &Rel) {
        if let Some(sweep) = self.sweep.as_mut() {
            sweep.fresh.quotas.insert(rel.clone());
        }
    }

    /// Marks a cgroup whose `file` the loop just wrote or read: a sweep's
    /// reading of that set is older.
    pub(super) fn mark_sets_fresh(&mut self, rel: &Rel, file: File) {
        if let Some(sweep) = self.sweep.as_mut() {
            let newer = sweep.fresh.sets.entry(rel.clone()).or_default();
            match file {
                File::Cpus => newer.cpus = true,
                File::Mems => newer.mems = true,
                File::Balance => {}
            }
        }
    }

    async fn start_sweep(
        &mut self,
        reread_topology: bool,
        part: Option<u32>,
        batch: usize,
        in_flight: usize,
    ) {
        let started = Instant::now();
        if reread_topology {
            self.follow_topology().await;
        }
        // Every subtree root and every cgroup known (of the part): what is
        // gone is forgotten, what is new is found below them.
        let mut seeds: Vec<Rel> = self.scope().roots().to_vec();
        match part {
            None => seeds.extend(self.engine.known().cloned()),
            Some(part) => seeds.extend(
                self.engine
                    .known()
                    .filter(|rel| part_of(rel) == part && !seeds.contains(rel))
                    .cloned()
                    .collect::<Vec<_>>(),
            ),
        }
        let scan_started = Instant::now();
        // The memory nodes the engine knows are read again once [`MEMS_AGE`]
        // has passed since a reconcile that read them all began (the first
        // reconcile reads them all; one replaced by a reload did not). A
        // part reads its own, so that each is read once per interval.
        let mems_known =
            part.is_none() && self.all_mems_read.is_some_and(|at| at.elapsed() < MEMS_AGE);
        let mut walk = Walk::new(seeds, batch, in_flight, mems_known);
        walk.only_new = part.is_some();
        self.fill(&mut walk);
        self.sweep = Some(Sweep {
            walk,
            started,
            taken_at: Instant::now(),
            scan_started,
            fresh: Fresh::default(),
            again: None,
            part,
        });
    }

    /// Takes in one batch of the sweep (`None`: nothing was in flight) and
    /// ends it when the walk is done.
    pub(super) async fn swept(&mut self, batch: Option<Batch>) {
        let Some(mut sweep) = self.sweep.take() else {
            return;
        };
        sweep.taken_at = Instant::now();
        if let Some(batch) = batch {
            self.take(&mut sweep.walk, batch, Some(&sweep.fresh));
        }
        self.fill(&mut sweep.walk);
        if !sweep.walk.done() {
            self.sweep = Some(sweep);
            return;
        }
        if !sweep.walk.mems_known && sweep.part.is_none() {
            self.all_mems_read = Some(sweep.scan_started);
        }
        let scan_us = sweep.scan_started.elapsed().as_micros() as u64;
        // A whole reconcile, or the part that ends a pass over the tree,
        // plans over every cgroup; another part plans what it read (each
        // reading marks its cgroup for the next plan).
        let whole = sweep.part.is_none_or(|p| p + 1 == PARTS);
        if whole {
            self.engine.replan_all();
        }
        self.watch_above_roots();
        self.read_jobs(true).await;
        self.apply().await;
        self.systemd.retry();
        self.forget_leaving();
        if whole {
            release_free_memory();
        }
        let took = sweep.started.elapsed();
        self.socket.reconciles += 1;
        self.socket.last_reconcile_ms = took.as_millis() as u64;
        self.socket
            .metrics
            .reconcile_seconds
            .observe(took.as_secs_f64());
        self.publish();
        debug!(
            elapsed_us = took.as_micros() as u64,
            scan_us,
            cgroups = self.engine.len(),
            part = %sweep.part.map_or("whole".to_string(), |p| format!("{}/{PARTS}", p + 1)),
            "reconcile done"
        );
        if let Some(reread) = sweep.again {
            Box::pin(self.ask_sweep(reread)).await;
        }
    }

    /// Hot-plug changes the online list: one small read instead of the
    /// whole topology (hundreds of files per socket) when it did not.
    /// Whether the engine's topology changed.
    pub(super) async fn follow_topology(&mut self) -> bool {
        let online_file = self.cfg.sysfs_root.join("devices/system/cpu/online");
        let unchanged = self
            .pool
            .read(&online_file)
            .await
            .ok()
            .and_then(|t| t.parse::<CpuSet>().ok())
            .is_some_and(|o| &o == self.engine.topology().online());
        if unchanged {
            return false;
        }
        match read_topology(&self.pool, &self.cfg.sysfs_root).await {
            Ok(topo) if topo.cpus() != self.engine.topology().cpus() => {
                info!(before = %self.engine.topology().online(), after = %topo.online(), "CPU topology changed; re-planning");
                self.engine.set_topology(topo);
                true
            }
            Ok(_) => false,
            Err(e) => {
                warn!(error = %format!("{e:#}"), "cannot re-read the topology");
                false
            }
        }
    }

    /// Sends batches to the I/O threads until `walk` has its fill in flight,
    /// each directory watched first.
    fn fill(&mut self, walk: &mut Walk) {
        while walk.running.len() < walk.in_flight && !walk.pending.is_empty() {
            let mut rels = Vec::with_capacity(walk.batch.min(walk.pending.len()));
            let mut items = Vec::with_capacity(rels.capacity());
            while rels.len() < walk.batch
                && let Some(rel) = walk.pending.pop_front()
            {
                match self.watcher.watch(&rel) {
                    Ok(_) => {
                        if self.unwatched.remove(&rel) && self.unwatched.is_empty() {
                            info!("every cgroup is watched again");
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        self.forget(&rel);
                        continue;
                    }
                    Err(e) => {
                        // Said once per spell, not per cgroup: at the
                        // limit, every new cgroup fails the same way.
                        if self.unwatched.is_empty() {
                            warn!(path = %self.hier.dir(&rel).display(), error = %e,
                                every_secs = api::UNWATCHED_RECONCILE_SECS,
                                "cannot watch a cgroup (is fs.inotify.max_user_watches reached?); reconciling often until every cgroup is watched");
                        }
                        self.unwatched.insert(rel.clone());
                    }
                }
                if let Some(cw) = self.cpu_watcher.as_mut() {
                    // The cpu side may appear later; its parent's watch reports it.
                    let _ = cw.watch(&rel);
                }
                // A part reads its known cgroups' children in their own
                // parts: a listing is needed only to find new ones.
                let known = Known {
                    mems: walk.mems_known && self.engine.mems_known(&rel),
                    children: (walk.only_new && self.engine.knows(&rel))
                        .then(|| self.engine.known_children(&rel)),
                };
                items.push((
                    self.hier.dir(&rel),
                    (rel.clone(), self.engine.bundle(&rel), known),
                ));
                rels.push(rel);
            }
            let (pool, hier, cfg) = (self.pool.clone(), self.hier.clone(), self.cfg.clone());
            walk.running.spawn(async move {
                let results = pool
                    .run_batch("read", items, move |fs, _, (rel, bundle, known)| {
                        Ok(intent::read(fs, &hier, &cfg, rel, bundle.clone(), *known))
                    })
                    .await;
                (rels, results)
            });
        }
    }

    /// Takes in one batch's readings and queues the children found; a
    /// sweep's readings that events made stale are dropped.
    fn take(&mut self, walk: &mut Walk, (rels, results): Batch, fresh: Option<&Fresh>) {
        for (rel, result) in rels.into_iter().zip(results) {
            if fresh.is_some_and(|f| f.forgot(&rel)) {
                continue;
            }
            // Read by an event since: only its children are news (one that
            // inotify missed, after an overflow or below an unwatched
            // cgroup, is found only here).
            let stale = fresh.is_some_and(|f| f.read.contains(&rel));
            match result {
                Ok(Some(mut r)) => {
                    for name in &r.obs.children {
                        let child = cgroup::child(&rel, name);
                        if walk.queued.contains(child.as_str()) {
                            continue;
                        }
                        // Below a cgroup a reload took out of the
                        // subtrees: only the way down to one.
                        if !self.scope().leads_to(&child) {
                            continue;
                        }
                        let child: Rel = match self.engine.rel(&child) {
                            // In a part of its own.
                            Some(_) if walk.only_new => continue,
                            Some(known) => known.clone(),
                            None => child.into(),
                        };
                        walk.queued.insert(child.clone());
                        walk.pending.push_back(child);
                    }
                    if stale {
                        continue;
                    }
                    if fresh.is_some_and(|f| f.quotas.contains(&rel)) {
                        r.lifted = None;
                    }
                    if let Some(newer) = fresh.and_then(|f| f.sets.get(&rel)) {
                        self.engine.keep_sets(&mut r.obs, newer.cpus, newer.mems);
                    }
                    self.upsert(r);
                }
                _ if stale => {}
                Ok(None) => self.forget(&rel),
                // Unreadable (hung, say): keep what we knew.
                Err(e) => warn!(error = %chain(&e), "cannot read cgroup"),
            }
        }
    }
}
