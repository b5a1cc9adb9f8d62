//! Making a plan real: the engine's writes through the I/O threads.
//!
//! - Urgent writes at once; the rest ([`Rest`]: the quota pass, the owed
//!   plan, then the queued writes a chunk per turn) once the tree is quiet,
//!   so a new pin never waits behind the shared pool or the quotas.
//! - v2: each effective set is read back in its write's own job.
//! - Also the audit trail, the counters, and the state file saved when
//!   assignments changed.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

use super::{Daemon, chain, release_free_memory};
use crate::api;
use crate::cpuset::CpuSet;
use crate::engine::{Failure, File, Write};
use crate::io::IoError;
use crate::state::StateFile;

/// How long one chunk of queued writes (one job on an I/O thread, one turn
/// of the loop) should take: a new event waits for at most about this long.
/// A write's cost grows with the cpusets and the load-balancing flag
/// (KERNEL-NOTES, "cgroup v1 cpuset"): the chunk's size follows the last
/// one's cost.
/// A quarter of a millisecond, not one: on real v1 at 1,000 containers it
/// cut the pin p99 under churn by about 2 ms for 10 ms more to narrow.
const CHUNK_TIME: Duration = Duration::from_micros(250);
/// The most writes in one chunk.
const MAX_CHUNK: usize = 64;

/// How long the tree must have been quiet before the rest of a plan goes:
/// no event that changed what the engine knows (a cgroup made or removed,
/// its `cpuset.cpus` written by someone else, a limit that changes what it
/// asks; a `cpuset.mems` write or a limit write that changes nothing is
/// not counted). A runtime sets a container up in a burst (its cgroup,
/// `cpuset.cpus` and `cpuset.mems` copied, the CPU limit) well within this
/// on real v1; a shared-pool write made inside the burst holds the kernel's
/// cpuset lock (and may rebuild the scheduler domains) while the runtime
/// waits for it, and the pin waits behind both.
const QUIET: Duration = Duration::from_millis(1);
/// The longest the rest of a plan waits for quiet, from when something
/// began to wait: after that (a steady churn of containers) it goes a step
/// per idle turn of the loop until nothing waits, so the shared pool still
/// follows.
const MAX_WAIT: Duration = Duration::from_millis(20);

/// A wait for systemd ([`Daemon::wait_for_systemd`]) at least this long
/// is logged at info: systemd was busy (a daemon-reload).
const SLOW_SYSTEMD: Duration = Duration::from_millis(100);

/// One write as an I/O job makes it.
#[derive(Clone)]
struct Item {
    data: String,
    /// A load-balancing flag: left alone when it reads `data` already.
    flag: bool,
    /// The effective set to read back right after (a `cpuset.cpus` write).
    effective: Option<PathBuf>,
}

/// The part of the last plan that waits: the pass over the quotas, the
/// shared pool's planning and writes, made when the tree is quiet
/// ([`super::Event::Rest`]), a step per turn of the loop.
pub(super) struct Rest {
    /// The last plan gave new workloads their CPUs first: the rest of the
    /// change (the shared pool) is planned next.
    plan: bool,
    /// The last plan's writes still to be made, a chunk per turn of the
    /// loop; a newer plan replaces them.
    queue: VecDeque<Write>,
    /// A pass over the CFS quotas is owed ([`Daemon::follow_quotas`]): the
    /// pin it follows is made already (`quota.rs` says why it waits).
    quotas: bool,
    /// How many queued writes the next turn makes (follows their cost).
    chunk: usize,
    /// When the tree last changed.
    changed_at: Option<Instant>,
    /// Since when something has waited.
    waiting_since: Option<Instant>,
    /// When it last had a turn of the loop.
    turn_at: Instant,
}

impl Rest {
    pub(super) fn new() -> Self {
        Self {
            plan: false,
            queue: VecDeque::new(),
            quotas: false,
            chunk: 8,
            changed_at: None,
            waiting_since: None,
            turn_at: Instant::now(),
        }
    }

    /// Whether it has been due for [`super::OVERDUE`] and had no turn for
    /// as long: behind a steady stream of events it would otherwise wait
    /// for good, and the shared pool would never follow.
    pub(super) fn overdue(&self, now: Instant) -> bool {
        self.due()
            .is_some_and(|due| due + super::OVERDUE <= now && self.turn_at + super::OVERDUE <= now)
    }

    /// An event changed what the engine knows: the rest waits for quiet.
    pub(super) fn tree_changed(&mut self) {
        self.changed_at = Some(Instant::now());
    }

    /// When the rest may go ([`QUIET`] after the tree's last change, at
    /// most [`MAX_WAIT`] after it began waiting); `None` when nothing waits.
    pub(super) fn due(&self) -> Option<Instant> {
        let since = self.waiting_since?;
        let quiet = self.changed_at.map_or(since, |at| at + QUIET);
        Some(quiet.min(since + MAX_WAIT))
    }

    /// A pass over the quotas waits too.
    pub(super) fn owe_quotas(&mut self) {
        self.quotas = true;
        self.waited();
    }

    /// Replaces what waits with a new plan's rest.
    fn set(&mut self, plan: bool, queue: VecDeque<Write>) {
        self.plan = plan;
        self.queue = queue;
        self.waited();
    }

    /// Keeps `waiting_since` in step: the wait starts when something first
    /// waits, and ends when nothing does.
    fn waited(&mut self) {
        let waiting = self.plan || self.quotas || !self.queue.is_empty();
        match (waiting, self.waiting_since) {
            (true, None) => self.waiting_since = Some(Instant::now()),
            (false, Some(_)) => self.waiting_since = None,
            _ => {}
        }
    }
}

/// What was last logged of a workload's place ([`Daemon::settle`]).
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Logged {
    cpus: Option<CpuSet>,
    pending: Option<String>,
    resize: Option<String>,
}

impl Daemon {
    /// Plans, makes the urgent writes (exclusive CPUs) at once and queues
    /// the rest for the loop ([`Rest`]), replacing what an earlier plan
    /// left: the engine plans that again. A plan that gave new workloads
    /// their CPUs first owes the rest of the change (the shared pool): the
    /// owed plan ([`crate::engine::Engine::plan_owed`]) is made once the
    /// tree is quiet. So is the pass over the CFS quotas.
    pub(super) async fn apply(&mut self) {
        self.apply_with(false).await;
    }

    /// [`Self::apply`], calling `answer` once the plan is made, before any
    /// of its writes: what waits on an assignment (the runtime, over NRI)
    /// is answered first. Then the loop yields once, so that the task that
    /// carries the answer runs before the rest of the turn (the runtime is
    /// on the same thread, and waits).
    pub(super) async fn apply_planned(&mut self, answer: impl FnOnce(&mut Self)) {
        self.apply_then(false, Some(answer)).await;
    }

    /// [`Self::apply`], with the plan the last one owes when `owed`
    /// ([`crate::engine::Engine::plan_owed`]).
    async fn apply_with(&mut self, owed: bool) {
        self.apply_then(owed, None::<fn(&mut Self)>).await;
    }

    async fn apply_then(&mut self, owed: bool, answer: Option<impl FnOnce(&mut Self)>) {
        let started = Instant::now();
        // Before the plan that reverts them: the revert may tell systemd.
        for rel in self.engine.take_overwritten() {
            self.systemd.overwritten(&rel, started);
        }
        let plan = if owed {
            self.engine.plan_owed()
        } else {
            self.engine.plan()
        };
        if let Some(answer) = answer {
            answer(self);
            tokio::task::yield_now().await;
        }
        debug!(
            elapsed_us = started.elapsed().as_micros() as u64,
            writes = plan.writes.len(),
            urgent = plan.urgent,
            more = plan.more,
            "planned"
        );
        self.save_due |= plan.assignments_changed;
        self.report_resizes();
        match plan.strict_fallback {
            Some(true) => warn!(
                reserved = %self.engine.reserved(),
                "strict_reservation: every other CPU is exclusive; pods on the shared pool keep the reserved CPUs until one frees up"
            ),
            Some(false) if self.engine.strict().is_some() => info!(
                reserved = %self.engine.reserved(),
                "strict_reservation: pods on the shared pool are off the reserved CPUs again"
            ),
            _ => {}
        }
        let mut writes = plan.writes.into_iter();
        let urgent: Vec<Write> = writes.by_ref().take(plan.urgent).collect();
        self.rest.set(plan.more, writes.collect());
        let any = !urgent.is_empty();
        self.release_partitions().await;
        self.wait_for_systemd(&urgent).await;
        self.write(urgent).await;
        if self.quotas_due() || self.baselines_due() {
            self.rest.owe_quotas();
        }
        self.grant_partitions().await;
        if any || self.rest.queue.is_empty() {
            self.settle();
        }
    }

    /// Before the `urgent` writes: systemd told the sets of the slices on
    /// their way, and answered, or the I/O timeout passed
    /// ([`super::systemd::Teller::ahead`]). Otherwise a `daemon-reload` in
    /// progress would set a slice just widened above a new pin back to the
    /// set systemd held, and take the pin's CPU.
    async fn wait_for_systemd(&mut self, urgent: &[Write]) {
        let waits = self.systemd.ahead(urgent);
        if waits.is_empty() {
            return;
        }
        let (started, n) = (Instant::now(), waits.len());
        let all = async {
            for wait in waits {
                let _ = wait.await;
            }
        };
        let timeout = self.cfg.read_timeout;
        let answered = tokio::time::timeout(timeout, all).await;
        let waited = started.elapsed();
        self.socket
            .metrics
            .systemd_wait_seconds
            .observe(waited.as_secs_f64());
        match answered {
            // Long only while systemd is busy (a daemon-reload): worth a line.
            Ok(()) if waited >= SLOW_SYSTEMD => info!(
                slices = n,
                waited_ms = waited.as_millis() as u64,
                "a pin waited for systemd to hold the slices above it"
            ),
            Ok(()) => debug!(
                slices = n,
                elapsed_us = waited.as_micros() as u64,
                "systemd holds the slices' sets; pinning"
            ),
            Err(_) => warn!(
                slices = n,
                timeout = ?timeout,
                "systemd did not answer in time (a daemon-reload?); pinning anyway, and writing again what it writes back"
            ),
        }
        self.beat();
    }

    /// The rest of the last plan is due: the pass over the quotas, its
    /// planning, or the next chunk of its writes. The pass goes first: a
    /// steady churn keeps asking for the owed plan again (each change cuts
    /// the last one short), and the pass does not depend on it.
    pub(super) async fn rest(&mut self) {
        self.rest.turn_at = Instant::now();
        if self.rest.quotas {
            self.quotas_now().await;
        } else if self.rest.plan {
            self.apply_with(true).await;
        } else {
            self.write_next().await;
        }
    }

    /// Drops the queued writes of `rel` and what is below it (removed): the
    /// engine is told they were not made, so the plan does not wait for
    /// them, and a cgroup made again under the same name never gets them.
    pub(super) fn drop_queued(&mut self, rel: &str) {
        let queue = &mut self.rest.queue;
        if queue.iter().all(|w| !crate::cgroup::is_within(&w.rel, rel)) {
            return;
        }
        let (gone, kept): (VecDeque<Write>, VecDeque<Write>) = std::mem::take(queue)
            .into_iter()
            .partition(|w| crate::cgroup::is_within(&w.rel, rel));
        self.rest.queue = kept;
        for w in &gone {
            self.engine.not_made(w);
        }
        self.rest.waited();
    }

    /// The owed pass over the quotas, and the baselines kept with them.
    async fn quotas_now(&mut self) {
        self.rest.quotas = false;
        self.follow_quotas().await;
        self.keep_baselines().await;
        self.rest.waited();
    }

    /// Makes the next chunk of queued writes, as many as take about
    /// [`CHUNK_TIME`] at the last chunk's cost; after the last, settles.
    async fn write_next(&mut self) {
        let rest = &mut self.rest;
        let n = rest.queue.len().min(rest.chunk);
        let chunk: Vec<Write> = rest.queue.drain(..n).collect();
        let started = Instant::now();
        self.write(chunk).await;
        let each = started.elapsed() / n.max(1) as u32;
        let rest = &mut self.rest;
        rest.chunk =
            (CHUNK_TIME.as_nanos() / each.as_nanos().max(1)).clamp(1, MAX_CHUNK as u128) as usize;
        rest.waited();
        if rest.queue.is_empty() {
            // The end of a plan over thousands of cgroups: its memory goes
            // back to the system, as after a full reconcile.
            if rest.queue.capacity() > 1024 {
                rest.queue = VecDeque::new();
                release_free_memory();
            }
            self.settle();
        }
    }

    /// Makes the owed plan, the quota pass and every queued cpuset write
    /// now (start-up, stop); what is left then is load-balancing flags
    /// only, made by the loop as usual.
    pub(super) async fn drain(&mut self) {
        if self.rest.quotas {
            self.quotas_now().await;
        }
        if self.rest.plan {
            self.apply_with(true).await;
        }
        while self.rest.queue.iter().any(|w| w.file != File::Balance) {
            self.beat();
            self.write_next().await;
        }
    }

    /// Writes in order, in one job on an I/O thread (one trip through the
    /// queue), each outcome told to the engine.
    async fn write(&mut self, writes: Vec<Write>) {
        if writes.is_empty() {
            return;
        }
        // v2 falls back silently to the parent's set where a write does not
        // fit: its effective sets are read back. v1 refuses such a write
        // (EINVAL): a write it takes is what the cgroup has (KERNEL-NOTES).
        let v2 = self.hier.version == crate::cgroup::Version::V2;
        let items: Vec<(PathBuf, Item)> = writes
            .iter()
            .map(|w| {
                let path = self.hier.dir(&w.rel).join(w.file.name());
                let item = Item {
                    data: w.data(),
                    flag: w.file == File::Balance,
                    effective: (v2 && w.file == File::Cpus)
                        .then(|| self.hier.effective_file(&w.rel)),
                };
                (path, item)
            })
            .collect();
        let results = self
            .pool
            .run_batch("write", items.clone(), |fs, path, item| {
                // A flag already off (a restart) is left as it is: nothing
                // is written that would not change.
                if item.flag && fs.read(path)?.trim() == item.data {
                    return Ok(None);
                }
                fs.write(path, &item.data)?;
                // Read back at once, in the same job: the writes are in the
                // kernel's order, so what a cgroup has now is what it keeps
                // (v2's silent fallback to the parent's set shows here).
                let effective = item.effective.as_ref().and_then(|file| {
                    fs.read(file)
                        .ok()
                        .and_then(|text| text.parse::<CpuSet>().ok())
                });
                Ok(Some(effective))
            })
            .await;
        for ((w, (path, item)), result) in writes.iter().zip(&items).zip(results) {
            match result {
                Ok(None) => self.engine.written(w, Ok(())),
                Ok(Some(effective)) => {
                    // A background reconcile may have read it before this
                    // write (a failed write changed nothing it read).
                    self.mark_sets_fresh(&w.rel, w.file);
                    self.written(w, path, &item.data, Ok(()));
                    if let Some(effective) = effective {
                        self.engine.verified(w, effective);
                    }
                }
                Err(e) => self.written(w, path, &item.data, Err(e)),
            }
        }
    }

    /// The outcome of one write: the audit trail, the counters, the log and
    /// the engine.
    fn written(&mut self, w: &Write, path: &Path, data: &str, result: Result<(), IoError>) {
        if !matches!(&result, Err(e) if e.is_not_found()) {
            self.record_write(w, result.as_ref().err());
        }
        match result {
            Ok(()) => {
                debug!(path = %path.display(), data = %data, "written");
                if w.file == File::Cpus {
                    if self.engine.is_target(w) {
                        let exclusive = self.engine.is_exclusive(&w.rel);
                        self.systemd
                            .wrote(&w.rel, &w.set, exclusive, Instant::now());
                    } else {
                        // A step on the way (a widening above a new pin):
                        // a slice's is told too (`daemon/systemd.rs`).
                        self.systemd.holds(&w.rel, &w.set);
                    }
                }
                self.engine.written(w, Ok(()));
            }
            // Removed under us: the delete event follows.
            Err(e) if e.is_not_found() => self.engine.not_made(w),
            Err(e) if w.file == File::Balance => {
                debug!(path = %path.display(), error = %chain(&e), "cannot turn load balancing off; its writes stay slower");
                self.engine.written(w, Ok(()));
            }
            Err(e) => {
                warn!(path = %path.display(), data = %data, errno = e.raw_os_error(), error = %chain(&e), "cgroup write failed; will retry");
                self.engine.written(
                    w,
                    Err(Failure {
                        message: chain(&e),
                        errno: e.raw_os_error(),
                        read: false,
                    }),
                );
            }
        }
    }

    /// After writes: the state saved when assignments changed (or a save
    /// failed before), the status told.
    fn settle(&mut self) {
        // A save that failed is tried again with each plan.
        if std::mem::take(&mut self.save_due) || self.state_error.is_some() {
            // Each workload's CPUs, wait or pending resize are logged when
            // they change, not at every save: thousands of lines a pin.
            let mut logged = std::mem::take(&mut self.logged);
            logged.retain(|key, _| self.engine.workloads().contains_key(key));
            for w in self.engine.workloads().values() {
                let now = Logged {
                    cpus: w.cpus.clone(),
                    pending: w.pending.as_ref().map(|p| p.reason.clone()),
                    resize: w.resize.as_ref().map(|r| r.reason.clone()),
                };
                if logged.get(&w.key) == Some(&now) {
                    continue;
                }
                logged.insert(w.key.clone(), now);
                match (&w.cpus, &w.pending) {
                    (Some(cpus), _) => {
                        info!(workload = %w.key, cpus = %cpus, source = %w.source, "exclusive CPUs");
                        if let Some(r) = &w.resize {
                            info!(workload = %w.key, requested = r.requested, available = r.available, "resize pending: {}", r.reason);
                        }
                    }
                    (None, Some(p)) => {
                        info!(workload = %w.key, requested = p.requested, available = p.available, "pending: {}", p.reason)
                    }
                    _ => {}
                }
            }
            self.logged = logged;
            self.save_state();
        }
        self.notify_status(false);
        self.socket.dirty = true;
        self.follow_irqs(false);
        self.follow_power(false);
        self.follow_housekeeping(false);
    }

    /// Adds a write to the audit trail and the counters, with its reason.
    fn record_write(&mut self, w: &Write, error: Option<&IoError>) {
        let metrics = &self.socket.metrics;
        metrics.writes.inc();
        if error.is_some() {
            metrics.write_errors.inc();
        }
        // A flag, not a set: counted, not in the trail of set changes.
        if w.file == File::Balance {
            return;
        }
        let why = self.engine.explain(w);
        self.socket.events.push(api::EventKind::Write {
            cgroup: w.rel.to_string(),
            file: w.file.name().to_string(),
            old: why.old,
            new: (*w.set).clone(),
            reason: why.reason,
            error: error.map(|e| chain(e)),
            workload: why.workload,
        });
    }

    /// Saves the state file in the background: the loop goes on with the
    /// next event while the disk syncs ([`super::Event::Saved`] brings the
    /// outcome). One save at a time; a save asked for meanwhile follows it,
    /// with the state as it is then.
    pub(super) fn save_state(&mut self) {
        if self.saving {
            self.save_again = true;
            return;
        }
        self.saving = true;
        let mut body = self.engine.saved_state();
        body.irqs = self.irqs.saved();
        body.partitions = self.partitions.saved();
        body.nri_yielded = self.nri.saved();
        let state = StateFile::new(self.state.path());
        let done = self.saved_tx.clone();
        let task = tokio::task::spawn_blocking(move || state.save(&body));
        tokio::spawn(async move {
            let error = match task.await {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(format!("{:#}", anyhow::Error::from(e))),
                Err(e) => Some(format!("the save task failed: {e}")),
            };
            let _ = done.send(error);
        });
    }

    /// A save ended with `error` (or none). A failure (a read-only or full
    /// disk) degrades health until a save works again: each plan that
    /// follows tries again.
    pub(super) fn saved(&mut self, error: Option<String>) {
        self.saving = false;
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
        let changed = error != self.state_error;
        self.state_error = error;
        if changed {
            self.notify_status(false);
            self.socket.dirty = true;
        }
        if std::mem::take(&mut self.save_again) {
            self.save_state();
        }
    }

    /// Waits for the saves in flight (stop): the last one has the state as
    /// it is now.
    pub(super) async fn finish_saves(&mut self) {
        // One more, after any in flight: the state as it is now.
        self.save_state();
        while self.saving {
            match self.saved_rx.recv().await {
                Some(error) => self.saved(error),
                None => break,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rest of a plan goes at once when the tree is quiet, waits
    /// [`QUIET`] after a change, and never more than [`MAX_WAIT`] in all.
    #[test]
    fn the_rest_waits_for_quiet_but_not_for_ever() {
        let mut rest = Rest::new();
        assert_eq!(rest.due(), None, "nothing waits");
        rest.set(true, VecDeque::new());
        let due = rest.due().expect("the plan waits");
        assert!(due <= Instant::now(), "no change yet: at once");
        rest.tree_changed();
        let after = Instant::now();
        let due = rest.due().unwrap();
        assert!(due > after - QUIET && due <= after + QUIET, "{due:?}");
        // A steady churn: the wait ends MAX_WAIT after it began.
        let began = Instant::now() - MAX_WAIT * 2;
        rest.waiting_since = Some(began);
        rest.tree_changed();
        assert_eq!(rest.due(), Some(began + MAX_WAIT));
        rest.set(false, VecDeque::new());
        assert_eq!(rest.due(), None, "nothing waits any more");
        rest.set(true, VecDeque::new());
        assert!(rest.waiting_since.unwrap() > began, "a new wait");
    }

    /// A quota pass owed after a pin waits for quiet as the shared pool
    /// does, and a newer plan's rest does not drop it.
    #[test]
    fn an_owed_quota_pass_waits_with_the_rest() {
        let mut rest = Rest::new();
        rest.owe_quotas();
        rest.tree_changed();
        let after = Instant::now();
        let due = rest.due().expect("the pass waits");
        assert!(due > after - QUIET && due <= after + QUIET, "{due:?}");
        rest.set(false, VecDeque::new());
        assert!(rest.due().is_some(), "a newer plan's rest keeps it");
        rest.quotas = false;
        rest.waited();
        assert_eq!(rest.due(), None, "made: nothing waits");
    }

    /// Behind a steady stream of events, the rest takes a turn first once
    /// it has been due for [`super::super::OVERDUE`] with no turn for as
    /// long, and then not again before another such spell.
    #[test]
    fn the_rest_overdue_takes_a_turn_once_per_spell() {
        let overdue = super::super::OVERDUE;
        let mut rest = Rest::new();
        let now = Instant::now();
        assert!(!rest.overdue(now), "nothing waits");
        rest.set(true, VecDeque::new());
        rest.turn_at = now - overdue * 10;
        let since = rest.waiting_since.unwrap();
        assert!(!rest.overdue(since), "due, but not for long");
        let later = since + MAX_WAIT + overdue * 2;
        assert!(rest.overdue(later), "due for long, no turn for long");
        rest.turn_at = later;
        assert!(!rest.overdue(later), "it just had a turn");
        assert!(
            rest.overdue(later + overdue),
            "another spell without a turn"
        );
        rest.set(false, VecDeque::new());
        assert!(!rest.overdue(later + overdue), "nothing waits any more");
    }
}
