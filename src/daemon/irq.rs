//! Device interrupts kept off exclusive CPUs (`irq_affinity`), put back
//! when their CPUs stop being exclusive.
//!
//! One pass ([`Daemon::follow_irqs`]) reads every interrupt's affinity
//! under `/proc/irq` and writes those that should change ([`irq::step`]),
//! in one job on an I/O thread run in a task of its own: the loop goes on
//! meanwhile, and the outcome comes back as [`super::Event::Steered`]. One
//! pass at a time; one asked for meanwhile follows it. A pass runs when a
//! plan is done and the exclusive CPUs (or the online ones) are not those
//! the last pass kept clear, and at each round of the watchdog's checks,
//! which finds new interrupts, values written over (irqbalance) and a
//! running irqbalance.
//!
//! What an interrupt had before the daemon changed it is kept in the state
//! file, so a restarted daemon still puts it back; turning the switch off
//! by a reload puts every one back. Stopping the daemon leaves interrupts
//! where they are, as it leaves the CPUs pinned: the workloads still own
//! those CPUs, and the next daemon takes over from the state file. A write
//! the kernel refuses (a kernel-managed interrupt: EIO) is reported, and
//! tried again only when what the interrupt should have changes.

use std::collections::{BTreeMap, BTreeSet};
use std::io::ErrorKind;
use std::path::Path;

use tracing::{info, warn};

use super::{Daemon, chain};
use crate::api;
use crate::cpuset::CpuSet;
use crate::irq::{self, Irq, Irqbalance, Steered};

/// What the daemon knows of interrupts between passes.
pub(super) struct Irqs {
    /// Interrupts the daemon moved, with what they had.
    steered: BTreeMap<Irq, Steered>,
    /// Interrupts the kernel would not move, with the set asked and why.
    refused: BTreeMap<Irq, (CpuSet, String)>,
    /// What the last pass kept clear and the online CPUs it went by.
    last: Option<(CpuSet, CpuSet)>,
    irqbalance: Option<Irqbalance>,
    overwritten: u64,
    /// Why `/proc/irq` could not be listed, when the last pass could not.
    error: Option<String>,
    running: bool,
    /// What the pass running now keeps clear, and the online CPUs.
    asked: Option<(CpuSet, CpuSet)>,
    /// Another pass was asked for while one ran.
    again: bool,
    tx: tokio::sync::mpsc::UnboundedSender<Passed>,
    pub(super) rx: tokio::sync::mpsc::UnboundedReceiver<Passed>,
}

/// What one pass did.
pub(super) struct Passed {
    away: CpuSet,
    online: CpuSet,
    outcome: Result<Vec<Outcome>, String>,
    irqbalance: Option<Irqbalance>,
}

/// One interrupt's part of a pass.
struct Outcome {
    irq: Irq,
    /// What it held, and its step; `Err` when it could not be read.
    read: Result<(CpuSet, irq::Step), String>,
    /// The write's result, when one was made.
    wrote: Option<Result<(), String>>,
}

impl Irqs {
    /// The memory of a state file's `irqs` (entries that do not parse are
    /// dropped, with a warning).
    pub(super) fn new(saved: BTreeMap<String, Steered>) -> Self {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let steered = saved
            .into_iter()
            .filter_map(|(name, s)| match name.parse() {
                Ok(irq) => Some((irq, s)),
                Err(e) => {
                    warn!(irq = %name, error = %e, "state file: interrupt entry dropped");
                    None
                }
            })
            .collect();
        Irqs {
            steered,
            refused: BTreeMap::new(),
            last: None,
            irqbalance: None,
            overwritten: 0,
            error: None,
            running: false,
            asked: None,
            again: false,
            tx,
            rx,
        }
    }

    /// What the state file keeps.
    pub(super) fn saved(&self) -> BTreeMap<String, Steered> {
        self.steered
            .iter()
            .map(|(irq, s)| (irq.to_string(), s.clone()))
            .collect()
    }
}

impl Daemon {
    /// The CPUs interrupts should be kept off now: the exclusive ones,
    /// none with the switch off.
    fn irq_away(&self) -> CpuSet {
        if !self.cfg.irq_affinity {
            return CpuSet::new();
        }
        self.engine
            .topology()
            .online()
            .difference(&self.engine.shared_pool())
    }

    /// Starts a pass over the interrupts when `look` (a round of checks) or
    /// when what is kept clear changed since the last; with the switch off,
    /// only while something is left to put back.
    pub(super) fn follow_irqs(&mut self, look: bool) {
        let away = self.irq_away();
        let online = self.engine.topology().online().clone();
        let i = &mut self.irqs;
        if !self.cfg.irq_affinity && i.steered.is_empty() {
            i.refused.clear();
            i.irqbalance = None;
            i.error = None;
            i.last = None;
            return;
        }
        let now = Some((away.clone(), online.clone()));
        if !look && (i.last == now || (i.running && i.asked == now)) {
            return;
        }
        if i.running {
            i.again = true;
            return;
        }
        i.running = true;
        i.asked = now;
        let proc_root = self.cfg.proc_root.clone();
        let steered = i.steered.clone();
        let refused: BTreeMap<Irq, CpuSet> = i
            .refused
            .iter()
            .map(|(k, (s, _))| (*k, s.clone()))
            .collect();
        let find_irqbalance = self.cfg.irq_affinity;
        let pool = self.pool.clone();
        let tx = i.tx.clone();
        tokio::spawn(async move {
            let key = proc_root.join("irq");
            let (a, o) = (away.clone(), online.clone());
            let result = pool
                .run_op("irq", &key, move |fs| {
                    let irqbalance = if find_irqbalance {
                        irq::irqbalance(fs, &proc_root).ok().flatten()
                    } else {
                        None
                    };
                    let outcome = irq::list(fs, &proc_root).map(|all| {
                        all.into_iter()
                            .filter_map(|irq| {
                                pass_one(fs, &proc_root, irq, &steered, &refused, &a, &o)
                            })
                            .collect()
                    });
                    Ok((outcome, irqbalance))
                })
                .await;
            let (outcome, irqbalance) = match result {
                Ok((Ok(outcome), irqbalance)) => (Ok(outcome), irqbalance),
                Ok((Err(e), irqbalance)) => (
                    Err(format!("cannot list {}: {e}", key.display())),
                    irqbalance,
                ),
                Err(e) => (Err(chain(&e)), None),
            };
            let _ = tx.send(Passed {
                away,
                online,
                outcome,
                irqbalance,
            });
        });
    }

    /// A pass ended: its outcomes kept, logged and in the trail; the state
    /// saved when what is kept changed.
    pub(super) fn steered(&mut self, passed: Passed) {
        let Passed {
            away,
            online,
            outcome,
            irqbalance,
        } = passed;
        let i = &mut self.irqs;
        i.running = false;
        if irqbalance != i.irqbalance {
            match &irqbalance {
                Some(b) => {
                    info!(pid = b.pid, banned = ?b.banned.as_ref().map(|s| s.to_string()), "irqbalance is running")
                }
                None => info!("irqbalance is not running"),
            }
        }
        i.irqbalance = irqbalance;
        let before = i.steered.clone();
        match outcome {
            Err(e) => {
                if i.error.as_ref() != Some(&e) {
                    warn!(error = %e, "cannot steer interrupts; trying again at the next round of checks");
                }
                i.error = Some(e);
                // Not tried again at every plan: at the next round.
                i.last = Some((away, online));
            }
            Ok(outcomes) => {
                i.error = None;
                i.last = Some((away.clone(), online));
                let listed: BTreeSet<Irq> = outcomes.iter().map(|o| o.irq).collect();
                i.steered.retain(|irq, _| listed.contains(irq));
                i.refused.retain(|irq, _| listed.contains(irq));
                // One event for the pass: on a large server a change of the
                // exclusive CPUs moves hundreds of interrupts.
                let (mut moved, mut put_back, mut refused) = (Vec::new(), Vec::new(), Vec::new());
                for o in outcomes {
                    let irq = o.irq.to_string();
                    match self.one_steered(o) {
                        Wrote::Moved => moved.push(irq),
                        Wrote::PutBack => put_back.push(irq),
                        Wrote::Refused(e) => refused.push((irq, e)),
                        Wrote::Nothing => {}
                    }
                }
                if !(moved.is_empty() && put_back.is_empty() && refused.is_empty()) {
                    self.socket.events.push(api::EventKind::Irqs {
                        away,
                        moved,
                        put_back,
                        refused,
                    });
                }
            }
        }
        let i = &mut self.irqs;
        let metrics = &self.socket.metrics;
        metrics.irqs_steered.set(i.steered.len() as i64);
        metrics.irqs_refused.set(i.refused.len() as i64);
        if i.steered != before {
            self.save_state();
        }
        self.socket.dirty = true;
        if std::mem::take(&mut self.irqs.again) {
            self.follow_irqs(true);
        }
    }

    /// Keeps one interrupt's outcome; says what was written.
    fn one_steered(&mut self, o: Outcome) -> Wrote {
        let i = &mut self.irqs;
        let (current, step) = match o.read {
            Ok(read) => read,
            Err(e) => {
                i.refused.insert(o.irq, (CpuSet::new(), e));
                return Wrote::Nothing;
            }
        };
        if step.overwritten {
            i.overwritten += 1;
            info!(irq = %o.irq, now = %current, "an interrupt moved by the daemon was written over; taken as what it has");
        }
        let Some(want) = step.write.clone() else {
            // It has what it should.
            i.refused.remove(&o.irq);
            set_kept(&mut i.steered, o.irq, step.keep);
            return Wrote::Nothing;
        };
        let Some(wrote) = o.wrote else {
            // Refused before with this very value: not tried again.
            if step.overwritten {
                i.steered.remove(&o.irq);
            }
            return Wrote::Nothing;
        };
        match wrote {
            Ok(()) => {
                info!(irq = %o.irq, was = %current, now = %want, "interrupt affinity set");
                i.refused.remove(&o.irq);
                let moved = step.keep.is_some();
                set_kept(&mut i.steered, o.irq, step.keep);
                if moved { Wrote::Moved } else { Wrote::PutBack }
            }
            Err(e) => {
                warn!(irq = %o.irq, path = %o.irq.file(&self.cfg.proc_root).display(), data = %o.irq.text(&want), error = %e,
                    "the kernel refused the interrupt's affinity (a kernel-managed interrupt refuses with EIO); tried again only when it should have other CPUs");
                if step.overwritten {
                    i.steered.remove(&o.irq);
                }
                i.refused.insert(o.irq, (want, e.clone()));
                Wrote::Refused(e)
            }
        }
    }

    /// The status's interrupts section: `None` with the switch off and
    /// nothing left to put back.
    pub(super) fn irq_status(&self) -> Option<api::Interrupts> {
        let i = &self.irqs;
        if !self.cfg.irq_affinity && i.steered.is_empty() {
            return None;
        }
        // What the last pass kept clear: the interrupts are as it left them.
        let away = match &i.last {
            Some((away, _)) => away.clone(),
            None => self.irq_away(),
        };
        let mut advice = Vec::new();
        if let Some(b) = &i.irqbalance {
            let banned = b.banned.clone().unwrap_or_default();
            let missing = away.difference(&banned);
            if !missing.is_empty() {
                let may = self
                    .engine
                    .topology()
                    .online()
                    .difference(self.engine.reserved());
                advice.push(format!(
                    "irqbalance (pid {}) may move interrupts back onto exclusive CPUs {missing}: set IRQBALANCE_BANNED_CPULIST={may} (the CPUs that may be handed out) in its environment file (/etc/default/irqbalance or /etc/sysconfig/irqbalance) and restart it",
                    b.pid
                ));
            }
        }
        if !i.refused.is_empty() {
            advice.push("a kernel-managed interrupt (a multi-queue device's per-CPU vector) cannot be moved: boot with isolcpus=managed_irq,<exclusive CPUs> to keep them off".to_string());
        }
        Some(api::Interrupts {
            on: self.cfg.irq_affinity,
            away,
            steered: i
                .steered
                .iter()
                .map(|(irq, s)| api::SteeredIrq {
                    irq: irq.to_string(),
                    was: s.was.clone(),
                    now: s.set.clone(),
                })
                .collect(),
            refused: i
                .refused
                .iter()
                .map(|(irq, (_, e))| api::RefusedIrq {
                    irq: irq.to_string(),
                    error: e.clone(),
                })
                .collect(),
            overwritten: i.overwritten,
            irqbalance: i.irqbalance.clone(),
            advice,
            error: i.error.clone(),
        })
    }

    /// Waits for a pass in flight (stop): what it wrote is then kept in the
    /// state file saved last.
    pub(super) async fn finish_irqs(&mut self) {
        while self.irqs.running {
            match self.irqs.rx.recv().await {
                Some(passed) => {
                    self.irqs.again = false;
                    self.steered(passed);
                }
                None => break,
            }
        }
    }
}

/// What a pass wrote to one interrupt.
enum Wrote {
    Nothing,
    /// Moved off the CPUs kept clear.
    Moved,
    /// Given back what it had.
    PutBack,
    /// The kernel refused, with its error.
    Refused(String),
}

/// Keeps `keep` for `irq`, or forgets it.
fn set_kept(steered: &mut BTreeMap<Irq, Steered>, irq: Irq, keep: Option<Steered>) {
    match keep {
        Some(k) => {
            steered.insert(irq, k);
        }
        None => {
            steered.remove(&irq);
        }
    }
}

/// One interrupt's read, step and write, on an I/O thread; `None` when it
/// went away meanwhile (freed by its driver).
fn pass_one(
    fs: &dyn crate::io::Fs,
    proc_root: &Path,
    irq: Irq,
    steered: &BTreeMap<Irq, Steered>,
    refused: &BTreeMap<Irq, CpuSet>,
    away: &CpuSet,
    online: &CpuSet,
) -> Option<Outcome> {
    let current = match irq.read(fs, proc_root) {
        Ok(c) => c,
        Err(e) if e.kind() == ErrorKind::NotFound => return None,
        Err(e) => {
            // A value that does not parse names its file already.
            let e = match e.kind() {
                ErrorKind::InvalidData => e.to_string(),
                _ => format!("{}: {e}", irq.file(proc_root).display()),
            };
            return Some(Outcome {
                irq,
                read: Err(e),
                wrote: None,
            });
        }
    };
    let step = irq::step(&current, steered.get(&irq), away, online);
    let wrote = match &step.write {
        // Refused before with this very value: not tried again.
        Some(want) if refused.get(&irq) != Some(want) => match irq.write(fs, proc_root, want) {
            Err(e) if e.kind() == ErrorKind::NotFound => return None,
            result => Some(result.map_err(|e| format!("{}: {e}", irq.file(proc_root).display()))),
        },
        _ => None,
    };
    Some(Outcome {
        irq,
        read: Ok((current, step)),
        wrote,
    })
}
