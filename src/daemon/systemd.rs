//! Telling systemd the pin of a unit it would write back, as its
//! `AllowedCPUs=` ([`crate::systemd`]); cgroup v2 only.
//!
//! - A slice (a QoS slice, `system.slice`, a Guaranteed pod's) is told each
//!   set the daemon writes, at once: without `AllowedCPUs=`, a
//!   `daemon-reload` writes `""` and an empty slice sits on every CPU until
//!   written again (KERNEL-NOTES, "containerd's CRI"; issue #32). Setting a
//!   slice's property re-applies that slice alone, not the scopes below it.
//!   Each step on the way to a target too: a new pin widens its ancestors
//!   first, and narrows them only once the tree is quiet. systemd holding
//!   the older, narrower set would apply it at its next daemon-reload and
//!   take the pin's CPU from below it (found by the soak in the VM bed).
//! - A tell that failed (systemd busy with a reload past the I/O timeout)
//!   is tried again at the next part of the periodic reconcile, unless a
//!   newer one for the unit went since ([`Teller::retry`]).
//! - A pin waits for systemd: before the urgent writes of a plan (new pins
//!   and the widening above them), each slice among them is told its new
//!   set, and each slice above them whose tell is unanswered is asked
//!   again; the writes go once systemd has answered, or after the I/O
//!   timeout ([`Teller::ahead`]). Told after the write, a slice widened
//!   during a `daemon-reload` was set back by systemd to the set it held,
//!   and took the pin's CPU from below it until the daemon wrote it again
//!   (found by the soak in the VM bed). Told first, systemd holds the wider
//!   set before the pin is made.
//! - A scope is told only if systemd holds an `AllowedCPUs=` for it, once its
//!   pin is written over at least [`SETTLE`] after the daemon last wrote it:
//!   then with the revert, and with each later target. Never sooner: a
//!   `SetUnitProperties` while a runtime sets a scope up makes systemd apply
//!   its cgroup settings again mid-setup.
//! - One exchange at a time, in a task, each bounded by the I/O timeout: the
//!   asks a pin waits for first, then the others in order. An ask a newer
//!   one for the unit overtook is dropped (what waited on it waits on the
//!   newer one). Outcomes come back as [`super::Event::Told`].
//! - [`Teller`] decides, pure over the times it is given. Nothing told is
//!   kept across a restart.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio::sync::oneshot;
use tracing::{debug, info, warn};

use super::{Daemon, chain};
use crate::api;
use crate::cgroup::{self, Rel};
use crate::cpuset::CpuSet;
use crate::engine::{File, Write};
use crate::systemd::{Bus, scope_unit, slice_unit};

/// How long after the daemon's own write of a scope's cpuset a write over it
/// is taken for the scope still being set up, and only reverted.
pub(super) const SETTLE: Duration = Duration::from_secs(10);

/// A question for systemd: set `unit`'s `AllowedCPUs=` to `cpus`; with
/// `check`, only if it has one.
struct Ask {
    rel: Rel,
    unit: String,
    cpus: Arc<CpuSet>,
    check: bool,
    /// The teller's count of asks when it was made: its [`Told`] says
    /// which ask of the unit was answered.
    seq: u64,
    /// A pin waits for it: it goes before the others.
    urgent: bool,
    /// Told when it was answered (or failed).
    waiters: Vec<oneshot::Sender<()>>,
}

/// What came of an [`Ask`].
pub(super) struct Told {
    rel: Rel,
    unit: String,
    cpus: Arc<CpuSet>,
    seq: u64,
    /// `Ok(true)`: systemd holds the pin now; `Ok(false)`: the unit has no
    /// `AllowedCPUs=` or systemd does not know it, nothing was changed;
    /// `Err`: why it failed.
    outcome: Result<bool, String>,
}

/// Which scopes systemd is told of, and when.
pub(super) struct Teller {
    /// `None`: telling is off (no bus configured, or cgroup v1).
    asks: Option<UnboundedSender<Ask>>,
    /// [`SETTLE`], but in tests.
    pub(super) settle: Duration,
    /// When the daemon last wrote an exclusive scope's cpuset, or first saw
    /// it written over: a write over it within [`SETTLE`] of that is only
    /// reverted. One entry per exclusive scope, gone with the scope.
    recent: HashMap<Rel, Instant>,
    /// Scopes whose settled pin was written over: the next write of their
    /// target asks.
    fought: HashSet<Rel>,
    /// Scopes whose `AllowedCPUs=` the daemon set or is setting, with the
    /// value: an ask on its way counts, so a later different write asks
    /// again; one that failed is taken out.
    told: HashMap<Rel, Arc<CpuSet>>,
    /// Slices whose tell failed, with the set: told again by [`Self::retry`].
    failed: HashMap<Rel, Arc<CpuSet>>,
    /// Slices with an ask not answered yet, by the last ask's `seq`.
    unanswered: HashMap<Rel, u64>,
    /// Asks made, for their `seq`.
    asked: u64,
}

impl Default for Teller {
    fn default() -> Self {
        Teller {
            asks: None,
            settle: SETTLE,
            recent: HashMap::new(),
            fought: HashSet::new(),
            told: HashMap::new(),
            failed: HashMap::new(),
            unanswered: HashMap::new(),
            asked: 0,
        }
    }
}

impl Teller {
    /// A teller over the bus at `bus` (`None`: one that tells nothing),
    /// whose outcomes go to `outcomes`. Spawns its task on the runtime.
    pub(super) fn new(
        bus: Option<&Path>,
        timeout: Duration,
        outcomes: UnboundedSender<Told>,
    ) -> Self {
        let Some(bus) = bus else {
            return Teller::default();
        };
        let (tx, rx) = unbounded_channel();
        tokio::spawn(serve(Bus::new(bus, timeout), rx, outcomes));
        Teller {
            asks: Some(tx),
            ..Teller::default()
        }
    }

    /// Someone wrote over the cpuset of exclusive cgroup `rel`. Settled
    /// only if the daemon wrote it, or saw it written over, at least
    /// `settle` ago: a scope it never wrote (pinned by a daemon before this
    /// one, or pending) may be one a runtime is setting up.
    pub(super) fn overwritten(&mut self, rel: &Rel, now: Instant) {
        if self.asks.is_none() || scope_unit(rel).is_none() {
            return;
        }
        match self.recent.get(rel) {
            Some(at) if now.duration_since(*at) >= self.settle => {
                self.fought.insert(rel.clone());
            }
            Some(_) => {}
            None => {
                self.recent.insert(rel.clone(), now);
            }
        }
    }

    /// The daemon wrote `cpus`, the cgroup's target (not a step on the way
    /// to it), to the cpuset of `rel`, an exclusive cgroup or not.
    pub(super) fn wrote(&mut self, rel: &Rel, cpus: &Arc<CpuSet>, exclusive: bool, now: Instant) {
        if self.asks.is_none() {
            return;
        }
        if slice_unit(rel).is_some() {
            self.holds(rel, cpus);
            return;
        }
        let Some(unit) = scope_unit(rel) else {
            return;
        };
        let told = self.told.get(rel);
        if !exclusive && told.is_none() {
            return;
        }
        let ask = if self.fought.remove(rel) {
            Some(told.is_none())
        } else {
            told.filter(|t| t != &cpus).map(|_| false)
        };
        if let Some(check) = ask {
            self.ask(rel, unit, cpus, check, false);
        }
        self.recent.insert(rel.clone(), now);
    }

    /// Before `writes`, the urgent writes of a plan, are made: the slices
    /// among them are told their new sets, and the slices above them whose
    /// tell is unanswered are asked again, each ahead of other asks. The
    /// writes should wait for what this returns: then systemd holds the
    /// sets a `daemon-reload` would write back, and no pin is made below a
    /// slice systemd would narrow. Nothing to wait for when telling is off.
    pub(super) fn ahead(&mut self, writes: &[Write]) -> Vec<oneshot::Receiver<()>> {
        if self.asks.is_none() {
            return Vec::new();
        }
        let mut asked: HashSet<Rel> = HashSet::new();
        let mut waits = Vec::new();
        for w in writes.iter().filter(|w| w.file == File::Cpus) {
            if let Some(unit) = slice_unit(&w.rel)
                && self.told.get(&w.rel) != Some(&w.set)
            {
                asked.insert(w.rel.clone());
                waits.extend(self.ask(&w.rel, unit, &w.set, false, true));
            }
            // The slices above it, and its own, told a set not answered yet.
            let above = w.rel.match_indices('/').map(|(i, _)| &w.rel[..i]);
            for rel in above.chain([&*w.rel]) {
                let (Some((rel, _)), Some(cpus)) =
                    (self.unanswered.get_key_value(rel), self.told.get(rel))
                else {
                    continue;
                };
                let (rel, cpus) = (rel.clone(), cpus.clone());
                if let Some(unit) = slice_unit(&rel)
                    && asked.insert(rel.clone())
                {
                    waits.extend(self.ask(&rel, unit, &cpus, false, true));
                }
            }
        }
        waits
    }

    /// Cgroup `rel` holds `cpus`, its target or a step on the way to it: a
    /// slice's are told unless they were (at start-up: a daemon before this
    /// one wrote them, and may not have told them).
    pub(super) fn holds(&mut self, rel: &Rel, cpus: &Arc<CpuSet>) {
        let Some(unit) = slice_unit(rel) else {
            return;
        };
        if self.told.get(rel) != Some(cpus) {
            self.tell(rel, unit, cpus);
        }
    }

    /// Tells again each slice whose last tell failed, unless a newer one
    /// went since.
    pub(super) fn retry(&mut self) {
        for (rel, cpus) in std::mem::take(&mut self.failed) {
            if !self.told.contains_key(&rel) {
                self.holds(&rel, &cpus);
            }
        }
    }

    /// `rel` is a run's scope the daemon had systemd make: systemd is told
    /// its pin now (unless `told`: the daemon told it itself), and each
    /// later target the daemon writes.
    pub(super) fn own(&mut self, rel: &Rel, cpus: &Arc<CpuSet>, told: bool) {
        match scope_unit(rel) {
            Some(_) if told && self.asks.is_some() => {
                self.told.insert(rel.clone(), cpus.clone());
            }
            Some(unit) => self.tell(rel, unit, cpus),
            None => {}
        }
    }

    /// Asks systemd to hold `cpus` as `unit`'s `AllowedCPUs=`, whatever it
    /// holds now, and counts `rel` told.
    fn tell(&mut self, rel: &Rel, unit: &str, cpus: &Arc<CpuSet>) {
        self.ask(rel, unit, cpus, false, false);
    }

    /// Asks systemd to hold `cpus` as `unit`'s `AllowedCPUs=` (with
    /// `check`, only if it has one), and counts `rel` told. An `urgent` ask
    /// goes ahead of the others, and what is returned is told once it was
    /// answered.
    fn ask(
        &mut self,
        rel: &Rel,
        unit: &str,
        cpus: &Arc<CpuSet>,
        check: bool,
        urgent: bool,
    ) -> Option<oneshot::Receiver<()>> {
        let asks = self.asks.as_ref()?;
        let (waiters, rx) = match urgent {
            true => {
                let (tx, rx) = oneshot::channel();
                (vec![tx], Some(rx))
            }
            false => (Vec::new(), None),
        };
        self.asked += 1;
        let sent = asks.send(Ask {
            rel: rel.clone(),
            unit: unit.to_string(),
            cpus: cpus.clone(),
            check,
            seq: self.asked,
            urgent,
            waiters,
        });
        self.failed.remove(rel);
        self.told.insert(rel.clone(), cpus.clone());
        if slice_unit(rel).is_some() {
            self.unanswered.insert(rel.clone(), self.asked);
        }
        rx.filter(|_| sent.is_ok())
    }

    /// The ask `seq` of `rel` was answered: unless a later one went, none
    /// is waited for.
    fn answered(&mut self, rel: &Rel, seq: u64) {
        if self.unanswered.get(rel) == Some(&seq) {
            self.unanswered.remove(rel);
        }
    }

    /// An ask for `cpus` on `rel` did not leave systemd holding them (it
    /// failed, or the unit has no `AllowedCPUs=`): not told, unless a later
    /// ask is on its way.
    fn untold(&mut self, rel: &Rel, cpus: &Arc<CpuSet>) {
        if self.told.get(rel) == Some(cpus) {
            self.told.remove(rel);
        }
    }

    /// An ask for `cpus` on `rel` failed: not told, and a slice's is tried
    /// again ([`Self::retry`]) unless a later ask is on its way.
    fn failed(&mut self, rel: &Rel, cpus: &Arc<CpuSet>) {
        if self.told.get(rel) == Some(cpus) {
            self.told.remove(rel);
            if slice_unit(rel).is_some() {
                self.failed.insert(rel.clone(), cpus.clone());
            }
        }
    }

    /// Forgets `rel` and what is below it (removed).
    pub(super) fn forget(&mut self, rel: &str) {
        self.recent.retain(|r, _| !cgroup::is_within(r, rel));
        self.fought.retain(|r| !cgroup::is_within(r, rel));
        self.told.retain(|r, _| !cgroup::is_within(r, rel));
        self.failed.retain(|r, _| !cgroup::is_within(r, rel));
        self.unanswered.retain(|r, _| !cgroup::is_within(r, rel));
    }
}

/// The task that speaks to systemd: one exchange at a time, the urgent
/// asks first, each kind in order. Asks that came meanwhile are queued
/// before each exchange, so an urgent one never waits behind the queue.
async fn serve(mut bus: Bus, mut asks: UnboundedReceiver<Ask>, outcomes: UnboundedSender<Told>) {
    let mut queue = VecDeque::new();
    loop {
        if queue.is_empty() {
            match asks.recv().await {
                Some(ask) => queue_ask(&mut queue, ask),
                None => return,
            }
        }
        while let Ok(more) = asks.try_recv() {
            queue_ask(&mut queue, more);
        }
        if let Some(ask) = queue.pop_front() {
            tell(&mut bus, ask, &outcomes).await;
        }
        if outcomes.is_closed() {
            return;
        }
    }
}

/// Puts `ask` in the queue: after the urgent asks if it is urgent, last if
/// not. A queued ask for the same unit is dropped, its value replaced at
/// once (a churn moves the shared pool each pin); what waited on it waits
/// on `ask`, which is as urgent as either.
fn queue_ask(queue: &mut VecDeque<Ask>, mut ask: Ask) {
    if let Some(i) = queue.iter().position(|a| a.rel == ask.rel)
        && let Some(old) = queue.remove(i)
    {
        ask.urgent |= old.urgent;
        ask.waiters.extend(old.waiters);
    }
    let at = match ask.urgent {
        true => queue.iter().take_while(|a| a.urgent).count(),
        false => queue.len(),
    };
    queue.insert(at, ask);
}

/// One exchange with systemd; its outcome goes to the loop, and to what
/// waited on it.
async fn tell(bus: &mut Bus, ask: Ask, outcomes: &UnboundedSender<Told>) {
    let outcome = async {
        if ask.check && bus.allowed_cpus(&ask.unit).await?.is_empty() {
            return Ok(false);
        }
        bus.set_allowed_cpus(&ask.unit, &ask.cpus).await
    }
    .await
    .map_err(|e: crate::systemd::SystemdError| chain(&e));
    let _ = outcomes.send(Told {
        rel: ask.rel,
        unit: ask.unit,
        cpus: ask.cpus,
        seq: ask.seq,
        outcome,
    });
    for waiter in ask.waiters {
        let _ = waiter.send(());
    }
}

impl Daemon {
    /// An exchange with systemd ended: remembered, counted, logged and put
    /// in the audit trail.
    pub(super) fn told(&mut self, t: Told) {
        self.systemd.answered(&t.rel, t.seq);
        let error = match t.outcome {
            Ok(false) => {
                debug!(cgroup = %t.rel, unit = %t.unit, "systemd does not know the unit, or holds no AllowedCPUs= for the scope; not told");
                self.systemd.untold(&t.rel, &t.cpus);
                return;
            }
            Ok(true) => {
                info!(cgroup = %t.rel, unit = %t.unit, cpus = %t.cpus, "told systemd the unit's AllowedCPUs=");
                None
            }
            Err(e) => {
                warn!(cgroup = %t.rel, unit = %t.unit, cpus = %t.cpus, error = %e, "cannot tell systemd the unit's AllowedCPUs=; a daemon-reload will write its own back, and the daemon its CPUs again");
                self.systemd.failed(&t.rel, &t.cpus);
                Some(e)
            }
        };
        let result = if error.is_some() { "failed" } else { "ok" };
        self.socket
            .metrics
            .systemd_told
            .get_or_create(&crate::metrics::ResultLabel {
                result: result.into(),
            })
            .inc();
        self.socket.events.push(api::EventKind::Told {
            cgroup: t.rel.to_string(),
            unit: t.unit,
            cpus: (*t.cpus).clone(),
            error,
        });
        self.socket.dirty = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn teller() -> (Teller, UnboundedReceiver<Ask>) {
        let (tx, rx) = unbounded_channel();
        let t = Teller {
            asks: Some(tx),
            ..Teller::default()
        };
        (t, rx)
    }

    fn set(text: &str) -> Arc<CpuSet> {
        Arc::new(text.parse().unwrap())
    }

    const SCOPE: &str = "kubepods.slice/kubepods-pod1.slice/cri-containerd-ab.scope";

    #[test]
    fn a_write_over_a_settled_pin_makes_the_revert_ask_systemd_once() {
        let (mut t, mut rx) = teller();
        let rel = Rel::from(SCOPE);
        let t0 = Instant::now();
        t.wrote(&rel, &set("3"), true, t0);
        // systemd writes AllowedCPUs= back at a daemon-reload, long after.
        t.overwritten(&rel, t0 + SETTLE);
        t.wrote(&rel, &set("3"), true, t0 + SETTLE);
        let ask = rx.try_recv().expect("asked");
        assert_eq!(
            (ask.unit.as_str(), &*ask.cpus, ask.check),
            ("cri-containerd-ab.scope", &*set("3"), true)
        );
        // The same pin written again asks nothing; another value does, and
        // needs no check (systemd was told), even before the first answer.
        t.wrote(&rel, &set("3"), true, t0 + SETTLE * 2);
        assert!(rx.try_recv().is_err());
        t.wrote(&rel, &set("4"), true, t0 + SETTLE * 3);
        let ask = rx.try_recv().expect("asked again");
        assert_eq!((&*ask.cpus, ask.check), (&*set("4"), false));
        // Released, the scope alive: what it gets back is told too.
        t.wrote(&rel, &set("0-31"), false, t0 + SETTLE * 4);
        assert_eq!(
            &*rx.try_recv().expect("told the release").cpus,
            &*set("0-31")
        );
    }

    #[test]
    fn a_write_over_a_new_pin_is_only_reverted() {
        let (mut t, mut rx) = teller();
        let rel = Rel::from(SCOPE);
        let t0 = Instant::now();
        t.wrote(&rel, &set("3"), true, t0);
        // systemd makes the scope with the runtime's AllowedCPUs=.
        t.overwritten(&rel, t0 + Duration::from_millis(5));
        t.wrote(&rel, &set("3"), true, t0 + Duration::from_millis(6));
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn a_scope_never_written_is_settled_only_after_it_was_seen() {
        let (mut t, mut rx) = teller();
        let rel = Rel::from(SCOPE);
        let t0 = Instant::now();
        // Pinned by an earlier daemon, or pending (never written): the first
        // write over it may be its runtime setting it up.
        t.overwritten(&rel, t0);
        t.wrote(&rel, &set("3"), true, t0);
        assert!(rx.try_recv().is_err());
        t.overwritten(&rel, t0 + SETTLE);
        t.wrote(&rel, &set("3"), true, t0 + SETTLE);
        assert!(rx.try_recv().unwrap().check);
    }

    #[test]
    fn an_ask_that_did_not_take_is_not_counted_as_told() {
        let (mut t, mut rx) = teller();
        let rel = Rel::from(SCOPE);
        let t0 = Instant::now();
        t.wrote(&rel, &set("3"), true, t0);
        t.overwritten(&rel, t0 + SETTLE);
        t.wrote(&rel, &set("3"), true, t0 + SETTLE);
        let ask = rx.try_recv().unwrap();
        // The unit has no AllowedCPUs= (or the call failed).
        t.untold(&ask.rel, &ask.cpus);
        // A later pin is not told: systemd does not fight this scope.
        t.wrote(&rel, &set("4"), true, t0 + SETTLE * 2);
        assert!(rx.try_recv().is_err());
        assert!(t.told.is_empty());
    }

    #[test]
    fn a_slice_is_told_each_new_target_at_once() {
        let (mut t, mut rx) = teller();
        let rel = Rel::from("kubepods.slice/kubepods-besteffort.slice");
        let t0 = Instant::now();
        t.wrote(&rel, &set("1-31"), false, t0);
        let ask = rx.try_recv().expect("asked");
        assert_eq!(
            (ask.unit.as_str(), &*ask.cpus, ask.check),
            ("kubepods-besteffort.slice", &*set("1-31"), false)
        );
        t.wrote(&rel, &set("1-31"), false, t0);
        assert!(rx.try_recv().is_err(), "the same set again");
        t.wrote(&rel, &set("2-31"), false, t0);
        assert_eq!(&*rx.try_recv().expect("a new set").cpus, &*set("2-31"));
        assert!(t.recent.is_empty(), "a slice has no settling time");
    }

    /// A step on the way to a slice's target (a widening above a new pin)
    /// is told too: systemd holding the older set would take the pin's CPU
    /// at its next daemon-reload. A failed tell is tried again, unless a
    /// newer one went; a scope's is not.
    #[test]
    fn a_slices_every_set_is_told_and_a_failed_tell_tried_again() {
        let (mut t, mut rx) = teller();
        let slice = Rel::from("kubepods.slice/kubepods-burstable.slice");
        t.holds(&slice, &set("0,3,8"));
        let ask = rx.try_recv().expect("the widening asked");
        assert_eq!(&*ask.cpus, &*set("0,3,8"));
        // It timed out: told again at the next part, once.
        t.failed(&slice, &set("0,3,8"));
        t.retry();
        assert_eq!(&*rx.try_recv().expect("tried again").cpus, &*set("0,3,8"));
        t.retry();
        assert!(rx.try_recv().is_err(), "told once more, not at every part");
        // Failed again, then a newer set went: the old one is not retried.
        t.failed(&slice, &set("0,3,8"));
        t.holds(&slice, &set("0,8"));
        assert_eq!(&*rx.try_recv().expect("the newer set").cpus, &*set("0,8"));
        t.retry();
        assert!(rx.try_recv().is_err(), "a newer set went since");
        // A scope's failed ask waits for its next target.
        let scope = Rel::from("kubepods.slice/kubepods-pod1.slice/cri-containerd-1.scope");
        t.told.insert(scope.clone(), set("3"));
        t.failed(&scope, &set("3"));
        t.retry();
        assert!(rx.try_recv().is_err());
    }

    fn cpus_write(rel: &str, cpus: &str) -> Write {
        Write {
            rel: Rel::from(rel),
            file: File::Cpus,
            set: set(cpus),
            plan: 1,
        }
    }

    /// Before a pin is made, systemd is told each slice on its way: a new
    /// set of one among the writes, and the set of one above not answered
    /// yet (asked again). Both go ahead of the other asks, and the pin
    /// waits for their answers; an answered slice is not asked.
    #[test]
    fn a_pin_waits_until_systemd_holds_the_slices_above_it() {
        let (mut t, mut rx) = teller();
        let qos = "kubepods.slice/kubepods-burstable.slice";
        let pod = "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice";
        let scope = format!("{pod}/cri-containerd-1.scope");
        // The QoS slice told, not answered; kubepods.slice told, answered.
        t.holds(&Rel::from(qos), &set("0,14"));
        t.holds(&Rel::from("kubepods.slice"), &set("0,10-14"));
        let answered = rx.try_recv().unwrap();
        let kubepods = rx.try_recv().unwrap();
        t.answered(&kubepods.rel, kubepods.seq);
        let writes = [cpus_write(pod, "0,14"), cpus_write(&scope, "14")];
        let mut waits = t.ahead(&writes);
        assert_eq!(waits.len(), 2);
        let asked: Vec<(String, CpuSet, bool)> = std::iter::from_fn(|| rx.try_recv().ok())
            .map(|a| (a.unit, (*a.cpus).clone(), a.urgent))
            .collect();
        assert_eq!(
            asked,
            [
                (
                    "kubepods-burstable-pod1.slice".into(),
                    (*set("0,14")).clone(),
                    true
                ),
                (
                    "kubepods-burstable.slice".into(),
                    (*set("0,14")).clone(),
                    true
                ),
            ]
        );
        // Written after the answers: nothing more to tell.
        t.holds(&Rel::from(pod), &set("0,14"));
        assert!(rx.try_recv().is_err());
        // An answer to the older ask of the QoS slice is not the one waited
        // for: it is still unanswered.
        t.answered(&answered.rel, answered.seq);
        assert!(t.unanswered.contains_key(qos));
        assert!(waits[0].try_recv().is_err(), "not answered yet");
        // Telling off: nothing to wait for.
        assert!(Teller::default().ahead(&writes).is_empty());
    }

    /// The serving task's queue: an urgent ask goes after the urgent ones
    /// and before the rest; a newer ask for a unit replaces the queued one,
    /// with its waiters and its urgency.
    #[test]
    fn urgent_asks_go_first_and_a_newer_ask_replaces_a_queued_one() {
        let ask = |unit: &str, urgent: bool| {
            let (tx, _rx) = oneshot::channel();
            Ask {
                rel: Rel::from(unit),
                unit: unit.to_string(),
                cpus: set("1"),
                check: false,
                seq: 0,
                urgent,
                waiters: vec![tx],
            }
        };
        let mut queue = VecDeque::new();
        for (unit, urgent) in [("a.slice", false), ("b.slice", false), ("c.slice", true)] {
            queue_ask(&mut queue, ask(unit, urgent));
        }
        queue_ask(&mut queue, ask("a.slice", true));
        queue_ask(&mut queue, ask("d.slice", false));
        let order: Vec<(&str, bool, usize)> = queue
            .iter()
            .map(|a| (a.unit.as_str(), a.urgent, a.waiters.len()))
            .collect();
        assert_eq!(
            order,
            [
                ("c.slice", true, 1),
                ("a.slice", true, 2),
                ("b.slice", false, 1),
                ("d.slice", false, 1),
            ]
        );
    }

    #[test]
    fn other_cgroups_and_a_teller_that_is_off_never_ask() {
        let (mut t, mut rx) = teller();
        let t0 = Instant::now();
        for rel in [
            "kubepods/pod1/ab",
            "a.scope/container",
            "a.scope/b.slice",
            "kubepods.slice/.slice",
        ] {
            let rel = Rel::from(rel);
            t.wrote(&rel, &set("3"), true, t0);
            t.overwritten(&rel, t0 + SETTLE);
            t.wrote(&rel, &set("3"), true, t0 + SETTLE);
        }
        // A scope that is not exclusive and was never told.
        let shared = Rel::from("system.slice/cron.scope");
        t.wrote(&shared, &set("0-31"), false, t0);
        assert!(rx.try_recv().is_err());
        assert!(t.recent.is_empty());
        let mut off = Teller::default();
        let rel = Rel::from(SCOPE);
        off.overwritten(&rel, t0);
        off.wrote(&rel, &set("3"), true, t0);
        assert!(off.fought.is_empty() && off.recent.is_empty());
    }

    #[test]
    fn a_removed_scope_is_forgotten() {
        let (mut t, _rx) = teller();
        let rel = Rel::from(SCOPE);
        let t0 = Instant::now();
        t.wrote(&rel, &set("3"), true, t0);
        t.overwritten(&rel, t0 + SETTLE);
        t.told.insert(rel.clone(), set("3"));
        t.forget("kubepods.slice/kubepods-pod1.slice");
        assert!(t.recent.is_empty() && t.fought.is_empty() && t.told.is_empty());
    }
}
