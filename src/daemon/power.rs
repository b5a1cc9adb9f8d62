//! CPU power classes (`[power]`, issue #35): each CPU gets the class of
//! what holds it, and every file no class wants gets its original back.
//!
//! - One pass at a time ([`Daemon::follow_power`]), its file operations on
//!   the I/O pool; the outcome comes back as [`super::Event::Powered`].
//! - A pass runs when a plan settles with other classes per CPU (a pin, a
//!   release, a reload, hot-plug), and at each round of checks (a value
//!   written over, a failed write).
//! - The originals live in `power_originals` on /run, not in the state
//!   file: a restart with the state file lost still puts them back.
//! - A stop leaves the classes in place, as it leaves the pins
//!   (docs/src/power.md, "Stop, restart, reload").

use std::collections::{BTreeMap, BTreeSet};

use tracing::{debug, info, warn};

use super::Daemon;
use crate::api;
use crate::config::Class;
use crate::cpuset::CpuSet;
use crate::power::sysfs::{Ask, Pass, pass};
use crate::power::{Knob, Offer, Refusal, Why, in_play};

/// One round of checks in this many reads every power file (the offer: a
/// driver loaded since); the others read only the files in play.
const FULL_READ_EVERY: u32 = 6;

/// What to do when the power files are read-only to the daemon.
const READ_ONLY: &str = "/sys/devices/system/cpu is read-only to the daemon: its unit needs ReadWritePaths=/sys/devices/system/cpu (the packaged unit has it; check drop-ins with systemctl cat pinctld)";

/// What a pass is asked: the class of each CPU, the online CPUs, the
/// classes.
type Asked = (BTreeMap<u32, String>, CpuSet, Vec<Class>);

/// What the daemon knows of power files between passes.
pub(super) struct Powers {
    /// What each file held before the daemon first wrote it: the mirror of
    /// the originals file.
    originals: BTreeMap<Knob, String>,
    /// What the last pass asked (`None` before the first).
    last: Option<Asked>,
    /// What the pass running now asks.
    asked: Option<Asked>,
    /// The workload holding each exclusive CPU when the running pass was
    /// asked, and when the last one was: an event names the one a write
    /// concerns.
    holders: BTreeMap<u32, String>,
    last_holders: BTreeMap<u32, String>,
    running: bool,
    /// Another pass was asked for while one ran.
    again: bool,
    /// What classes want, with the value read back by the last pass.
    files: BTreeMap<Knob, (String, String, Option<String>)>,
    refusals: Vec<Refusal>,
    /// Writes that failed, with the error.
    failed: BTreeMap<Knob, String>,
    /// No CPU offers any power file.
    unsupported: bool,
    /// What the last full read found offered.
    offer: Option<Offer>,
    /// Rounds of checks since the last full read.
    rounds: u32,
    /// The next round reads every file: the last round over the files in
    /// play wrote, or a full read could not read some.
    full_next: bool,
    /// Why the files or the originals file could not be used.
    error: Option<String>,
    /// Why the originals file could not be read at start-up, if it could
    /// not: then no class's value is written until a restart, since the
    /// originals it holds would be lost.
    unreadable: Option<String>,
    tx: tokio::sync::mpsc::UnboundedSender<Pass>,
    pub(super) rx: tokio::sync::mpsc::UnboundedReceiver<Pass>,
}

impl Powers {
    /// The memory of the originals file (`unreadable`: why it could not be
    /// read).
    pub(super) fn new(originals: BTreeMap<Knob, String>, unreadable: Option<String>) -> Self {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        Powers {
            originals,
            last: None,
            asked: None,
            holders: BTreeMap::new(),
            last_holders: BTreeMap::new(),
            running: false,
            again: false,
            files: BTreeMap::new(),
            refusals: Vec::new(),
            failed: BTreeMap::new(),
            unsupported: false,
            offer: None,
            rounds: 0,
            full_next: false,
            error: None,
            unreadable,
            tx,
            rx,
        }
    }
}

impl Daemon {
    /// The class each online CPU should have now (none with `[power]`
    /// off): an exclusive CPU its workload's own class (the xattr
    /// `user.pinctl.class`, the annotation `pinctl.io/cpu-class`, its rule's
    /// `class`, trusted as its CPU request is), else `[power]`'s
    /// `exclusive`; a reserved CPU `reserved`; the rest of the shared pool
    /// `shared`; a job core of Slurm's (`[slurm] housekeeping`) `slurm`.
    fn power_classes(&self) -> BTreeMap<u32, String> {
        let p = &self.cfg.power;
        let mut out = BTreeMap::new();
        if !p.enabled {
            return out;
        }
        let online = self.engine.topology().online();
        let reserved = self.engine.reserved();
        let shared = self.engine.shared_pool();
        let jobs = self.engine.job_cores();
        for cpu in online.iter() {
            let class = if reserved.contains(cpu) {
                &p.reserved
            } else if shared.contains(cpu) {
                &p.shared
            } else if jobs.contains(cpu) {
                &p.slurm
            } else {
                continue;
            };
            if let Some(c) = class {
                out.insert(cpu, c.clone());
            }
        }
        for w in self.engine.workloads().values() {
            let Some(cpus) = &w.cpus else { continue };
            // Its own class (xattr, annotation, rule) if it names one,
            // else the default (the status says which names are unknown).
            let own = w
                .class
                .clone()
                .filter(|c| self.cfg.classes.iter().any(|k| &k.name == c));
            match own.or_else(|| p.exclusive.clone()) {
                Some(class) => {
                    for cpu in cpus.iter().filter(|c| online.contains(*c)) {
                        out.insert(cpu, class.clone());
                    }
                }
                None => {
                    for cpu in cpus.iter() {
                        out.remove(&cpu);
                    }
                }
            }
        }
        out
    }

    /// The workload holding each exclusive CPU, by key.
    fn power_holders(&self) -> BTreeMap<u32, String> {
        let mut out = BTreeMap::new();
        for w in self.engine.workloads().values() {
            for cpu in w.cpus.iter().flat_map(CpuSet::iter) {
                out.insert(cpu, w.key.clone());
            }
        }
        out
    }

    /// Starts a pass over the power files when `look` (a round of checks)
    /// or when what is asked changed since the last; with `[power]` off,
    /// only while something is left to put back.
    pub(super) fn follow_power(&mut self, look: bool) {
        let now: Asked = (
            self.power_classes(),
            self.engine.topology().online().clone(),
            self.cfg.classes.clone(),
        );
        let on = self.cfg.power.enabled;
        let p = &mut self.powers;
        if p.running {
            if look || p.asked.as_ref() != Some(&now) {
                p.again = true;
            }
            return;
        }
        if !on && p.originals.is_empty() {
            p.files.clear();
            p.refusals.clear();
            p.failed.clear();
            p.last = None;
            return;
        }
        if !look && p.last.as_ref() == Some(&now) {
            return;
        }
        let holders = self.power_holders();
        let p = &mut self.powers;
        // A round with nothing changed reads only the files in play, and
        // every file each FULL_READ_EVERY rounds and after a round that had
        // to write (a limit may have changed under the offer kept).
        let same = look && p.last.as_ref() == Some(&now) && p.error.is_none() && !p.full_next;
        p.rounds = if same { p.rounds + 1 } else { 0 };
        let known = match &p.offer {
            Some(offer) if same && !p.rounds.is_multiple_of(FULL_READ_EVERY) => {
                let mut knobs = in_play(&now.0, offer, &p.originals);
                knobs.extend(p.failed.keys().cloned());
                Some((offer.clone(), knobs))
            }
            _ => None,
        };
        p.running = true;
        p.asked = Some(now.clone());
        p.holders = holders;
        let (classes_of, online, classes) = now;
        let ask = Ask {
            root: self.cfg.sysfs_root.clone(),
            originals_file: self.cfg.power_originals.clone(),
            online,
            classes_of,
            classes,
            originals: p.originals.clone(),
            may_set: p.unreadable.is_none(),
            known,
        };
        let (pool, tx) = (self.pool.clone(), p.tx.clone());
        tokio::spawn(async move {
            let _ = tx.send(pass(&pool, ask).await);
        });
    }

    /// A pass ended: its outcome kept, each write logged and in the trail.
    pub(super) fn powered(&mut self, mut done: Pass) {
        let metrics = self.socket.metrics.clone();
        let p = &mut self.powers;
        p.running = false;
        p.last = p.asked.take();
        let holders = std::mem::take(&mut p.holders);
        p.full_next = match done.offer.take() {
            Some(offer) => {
                p.offer = Some(offer);
                !done.read_errors.is_empty()
            }
            None => !done.written.is_empty(),
        };
        if let Some(e) = &done.error {
            if p.error.as_ref() != Some(e) {
                warn!(error = %e, "cannot read the power files; trying again at the next round of checks");
            }
            p.error = Some(e.clone());
        } else {
            p.error = done.save_error.clone();
            if let Some(e) = &done.save_error {
                warn!(path = %self.cfg.power_originals.display(), error = %e, "cannot save the power originals; no class value written, trying again at the next round of checks");
            }
        }
        for e in &done.read_errors {
            debug!(error = %e, "power file not used");
        }
        if done.error.is_none() {
            if done.nothing_offered && !p.unsupported && self.cfg.power.enabled {
                info!(
                    "no CPU has power files (cpufreq, cpuidle, pm_qos, uncore): power classes cannot be set on this node"
                );
            }
            p.unsupported = done.nothing_offered;
        }
        let new_refusals: BTreeSet<String> =
            done.plan.refusals.iter().map(ToString::to_string).collect();
        let old_refusals: BTreeSet<String> = p.refusals.iter().map(ToString::to_string).collect();
        for r in new_refusals.difference(&old_refusals) {
            warn!(refusal = %r, "power class value refused");
            metrics.power_writes_refused.inc();
        }
        p.refusals = done.plan.refusals.clone();
        p.originals = done.originals.clone();
        let mut read_back: BTreeMap<Knob, String> = BTreeMap::new();
        for w in &done.written {
            let file = w.write.knob.rel_path();
            let class = match &w.write.why {
                Why::Class(c) => Some(c.clone()),
                Why::Restore => None,
            };
            match &w.result {
                Ok(back) => {
                    p.failed.remove(&w.write.knob);
                    read_back.insert(w.write.knob.clone(), back.clone());
                    debug!(file = %file, value = %w.write.value, class = ?class, "power file written");
                }
                Err(e) => {
                    if p.failed.get(&w.write.knob) != Some(e) {
                        warn!(file = %file, data = %w.write.value, error = %e, "cannot write a power file; trying again at the next round of checks");
                    }
                    p.failed.insert(w.write.knob.clone(), e.clone());
                    metrics.power_writes_refused.inc();
                }
            }
            let workload = w
                .write
                .knob
                .cpu()
                .and_then(|cpu| holders.get(&cpu).or_else(|| p.last_holders.get(&cpu)))
                .cloned();
            self.socket.events.push(api::EventKind::Power {
                file,
                old: w.old.clone(),
                new: w.write.value.clone(),
                class,
                error: w.result.as_ref().err().cloned(),
                workload,
            });
        }
        // A put-back that failed, or a pass that could not read, is tried
        // again: it keeps naming the workload the CPU left.
        let failed: BTreeSet<u32> = p.failed.keys().filter_map(Knob::cpu).collect();
        let mut next = holders;
        for (cpu, w) in &p.last_holders {
            if done.error.is_some() || failed.contains(cpu) {
                next.entry(*cpu).or_insert_with(|| w.clone());
            }
        }
        p.last_holders = next;
        if done.error.is_none() {
            p.failed
                .retain(|k, _| done.plan.wanted.contains_key(k) || p.originals.contains_key(k));
            let before = std::mem::take(&mut p.files);
            p.files = done
                .plan
                .wanted
                .iter()
                .map(|(k, (value, class))| {
                    let read = read_back
                        .get(k)
                        .cloned()
                        .or_else(|| {
                            before
                                .get(k)
                                .and_then(|(_, v, r)| (v == value).then(|| r.clone()))
                                .flatten()
                        })
                        .or_else(|| done.current.get(k).cloned());
                    (k.clone(), (class.clone(), value.clone(), read))
                })
                .collect();
        }
        if !done.written.is_empty() {
            info!(
                written = done.written.len(),
                failed = done.written.iter().filter(|w| w.result.is_err()).count(),
                originals = p.originals.len(),
                "power files written"
            );
        }
        let cpus: BTreeSet<u32> = p.files.keys().filter_map(Knob::cpu).collect();
        metrics.power_classes_applied.set(cpus.len() as i64);
        self.socket.dirty = true;
        if std::mem::take(&mut self.powers.again) {
            self.follow_power(true);
        }
    }

    /// The status's power section: `None` with `[power]` off and nothing
    /// left to put back.
    pub(super) fn power_status(&self) -> Option<api::Power> {
        let p = &self.powers;
        if !self.cfg.power.enabled && p.originals.is_empty() {
            return None;
        }
        let mut by_class: BTreeMap<String, CpuSet> = BTreeMap::new();
        for (cpu, class) in self.power_classes() {
            by_class.entry(class).or_default().insert(cpu);
        }
        Some(api::Power {
            on: self.cfg.power.enabled,
            classes: by_class
                .into_iter()
                .map(|(name, cpus)| api::PowerClass { name, cpus })
                .collect(),
            files: p
                .files
                .iter()
                .map(|(k, (class, value, read))| api::PowerFile {
                    file: k.rel_path(),
                    class: class.clone(),
                    value: value.clone(),
                    read: read.clone(),
                    cpu: k.cpu(),
                })
                .collect(),
            originals: p.originals.len(),
            refused: self
                .unknown_classes()
                .into_iter()
                .chain(p.refusals.iter().map(ToString::to_string))
                .collect(),
            failed: p
                .failed
                .iter()
                .map(|(k, e)| format!("{}: {e}", k.rel_path()))
                .collect(),
            unsupported: p.unsupported,
            advice: if p.failed.values().any(|e| e.contains("Read-only file system")) {
                vec![READ_ONLY.to_string()]
            } else {
                Vec::new()
            },
            error: p
                .unreadable
                .as_ref()
                .map(|e| format!("the originals file cannot be read ({e}): no class is set until a restart reads it"))
                .or_else(|| p.error.clone()),
        })
    }

    /// The workloads that ask for a class no `[[class]]` defines: they
    /// get `[power]`'s `exclusive`.
    fn unknown_classes(&self) -> Vec<String> {
        if !self.cfg.power.enabled {
            return Vec::new();
        }
        self.engine
            .workloads()
            .values()
            .filter(|w| w.cpus.is_some())
            .filter_map(|w| {
                let c = w.class.as_ref()?;
                (!self.cfg.classes.iter().any(|k| &k.name == c)).then(|| {
                    format!(
                        "workload {} asks for class {c:?}, which no [[class]] defines: it gets [power]'s exclusive",
                        w.key
                    )
                })
            })
            .collect()
    }

    /// Waits for a pass in flight (stop): what it wrote is then in the
    /// originals file.
    pub(super) async fn finish_power(&mut self) {
        while self.powers.running {
            match self.powers.rx.recv().await {
                Some(done) => {
                    self.powers.again = false;
                    self.powered(done);
                }
                None => break,
            }
        }
    }
}
