//! Device interrupts kept off exclusive CPUs (`irq_affinity`), put back
//! when their CPUs stop being exclusive; the rule is [`crate::irq`].
//! With `housekeeping` alone, only `default_smp_affinity` is kept clear
//! (where new interrupts start), and lines moved before are put back.
//!
//! - One pass at a time ([`Daemon::follow_irqs`]), in a task: each interrupt
//!   a timed step on an I/O thread, the outcome back as
//!   [`super::Event::Steered`]. One asked for meanwhile follows it.
//! - A pass runs when a plan settles with other exclusive (or online) CPUs,
//!   and at each watchdog round (new interrupts, values written over).
//! - What each had is kept in the state file, so a restarted daemon still
//!   puts it back. Stopping leaves interrupts where they are, as it leaves
//!   the CPUs pinned; a reload that turns the switch off puts them back.
//! - A refused move ([`irq::is_refusal`]) is listed and not tried again
//!   while it should move; any other failure is tried by the next pass.

use std::collections::{BTreeMap, BTreeSet};
use std::io::ErrorKind;
use std::path::Path;
use std::sync::Arc;

use tracing::{debug, info, warn};

use super::{Daemon, chain};
use crate::api;
use crate::cpuset::CpuSet;
use crate::irq::{self, Irq, Irqbalance, Steered};

/// What the daemon knows of interrupts between passes.
pub(super) struct Irqs {
    /// Interrupts the daemon moved, with what they had.
    steered: BTreeMap<Irq, Steered>,
    /// Interrupts the kernel refuses to move off the CPUs kept clear, with
    /// its error: not written again while they should move.
    refused: BTreeMap<Irq, String>,
    /// Interrupts whose last read or write failed otherwise, with the
    /// error: tried again by each pass.
    failed: BTreeMap<Irq, String>,
    /// The interrupts the last pass listed (empty before the first): one
    /// that is not among them is new.
    seen: BTreeSet<Irq>,
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
    /// Each interrupt's outcome, or why they could not be listed.
    outcome: Result<Vec<Outcome>, String>,
    irqbalance: Option<Irqbalance>,
}

/// One interrupt's part of a pass.
struct Outcome {
    irq: Irq,
    /// What it held, and its step; `Err` when it could not be read (or its
    /// step did not return in time).
    read: Result<(CpuSet, irq::Step), String>,
    /// The write's result (its errno and error), when one was made.
    wrote: Option<Result<(), (Option<i32>, String)>>,
}

/// What one interrupt's step takes to its I/O thread.
struct Item {
    irq: Irq,
    kept: Option<Steered>,
    /// What it had, if it is new and starts with what the daemon wrote to
    /// `default_smp_affinity`.
    inherit: Option<Steered>,
    /// The kernel refuses to move it: read only.
    refused: bool,
    /// Whether it is kept off the CPUs kept clear (else put back).
    clear: bool,
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
    /// Another error, with it.
    Failed(String),
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
            failed: BTreeMap::new(),
            seen: BTreeSet::new(),
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
    /// The CPUs interrupts should be kept off now: those outside the
    /// shared pool (exclusive ones, and Slurm's job cores with `[slurm]
    /// housekeeping`); with both `irq_affinity` and `housekeeping` off, the
    /// job cores alone. `housekeeping` and `[slurm] housekeeping` alone keep
    /// only the default clear.
    fn irq_away(&self) -> CpuSet {
        if !self.cfg.irq_affinity && !self.cfg.housekeeping {
            return self.engine.job_cores();
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
        let now = Some((self.irq_away(), self.engine.topology().online().clone()));
        let lines_on = self.cfg.irq_affinity;
        let on = lines_on || self.keeps_kernel_work_off();
        let i = &mut self.irqs;
        if i.running {
            if look || i.asked != now {
                i.again = true;
            }
            return;
        }
        if !on && i.steered.is_empty() {
            // Off, and nothing left to put back.
            i.refused.clear();
            i.failed.clear();
            i.seen.clear();
            i.irqbalance = None;
            i.error = None;
            i.last = None;
            return;
        }
        if !look && i.last == now {
            return;
        }
        let Some((away, online)) = now.clone() else {
            return;
        };
        i.running = true;
        i.asked = now;
        // A new interrupt (one the last pass did not list) that starts with
        // what the daemon wrote to the default had what the default had.
        let inherit = i
            .steered
            .get(&Irq::Default)
            .filter(|_| !i.seen.is_empty())
            .cloned();
        let steered = i.steered.clone();
        let refused: BTreeSet<Irq> = i.refused.keys().copied().collect();
        let seen = i.seen.clone();
        let proc_root = self.cfg.proc_root.clone();
        let pool = self.pool.clone();
        let tx = i.tx.clone();
        tokio::spawn(async move {
            let root = proc_root.clone();
            let irqbalance = if lines_on {
                pool.run_op("read", &proc_root, move |fs| irq::irqbalance(fs, &root))
                    .await
                    .unwrap_or_else(|e| {
                        debug!(error = %chain(&e), "cannot look for irqbalance");
                        None
                    })
            } else {
                None
            };
            let root = proc_root.clone();
            let listed = pool
                .run_op("list", &proc_root.join("irq"), move |fs| {
                    irq::list(fs, &root)
                })
                .await;
            let outcome = match listed {
                Err(e) => Err(chain(&e)),
                Ok(all) => {
                    // With only the default kept clear, a line is read
                    // only to be put back.
                    let items: Vec<_> = all
                        .into_iter()
                        .filter(|irq| lines_on || *irq == Irq::Default || steered.contains_key(irq))
                        .map(|irq| {
                            let item = Item {
                                irq,
                                kept: steered.get(&irq).cloned(),
                                inherit: inherit
                                    .clone()
                                    .filter(|_| irq != Irq::Default && !seen.contains(&irq)),
                                refused: refused.contains(&irq),
                                clear: lines_on || irq == Irq::Default,
                            };
                            (irq.file(&proc_root), item)
                        })
                        .collect();
                    let irqs: Vec<Irq> = items.iter().map(|(_, item)| item.irq).collect();
                    let (root, sets) =
                        (proc_root.clone(), Arc::new((away.clone(), online.clone())));
                    let results = pool
                        .run_batch("write", items, move |fs, _, item| {
                            Ok(one_step(fs, &root, item, &sets.0, &sets.1))
                        })
                        .await;
                    Ok(irqs
                        .into_iter()
                        .zip(results)
                        .filter_map(|(irq, r)| match r {
                            Ok(outcome) => outcome,
                            Err(e) => Some(Outcome {
                                irq,
                                read: Err(chain(&e)),
                                wrote: None,
                            }),
                        })
                        .collect())
                }
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
                    info!(pid = b.pid, banned = ?b.banned.as_ref().map(|s| s.to_string()), unreadable = ?b.unreadable, "irqbalance is running")
                }
                None => info!("irqbalance is not running"),
            }
        }
        i.irqbalance = irqbalance;
        let before = i.steered.clone();
        // Tried again at the next round of checks, not at every plan.
        i.last = Some((away.clone(), online));
        match outcome {
            Err(e) => {
                if i.error.as_ref() != Some(&e) {
                    warn!(error = %e, "cannot list the interrupts; trying again at the next round of checks");
                }
                i.error = Some(e);
            }
            Ok(outcomes) => {
                i.error = None;
                let listed: BTreeSet<Irq> = outcomes.iter().map(|o| o.irq).collect();
                i.steered.retain(|irq, _| listed.contains(irq));
                i.refused.retain(|irq, _| listed.contains(irq));
                i.failed.retain(|irq, _| listed.contains(irq));
                i.seen = listed;
                // One event and one log line for the pass: on a large
                // server a change of the exclusive CPUs moves hundreds.
                let (mut moved, mut put_back, mut refused, mut failed) =
                    (Vec::new(), Vec::new(), Vec::new(), Vec::new());
                let overwritten = self.irqs.overwritten;
                for o in outcomes {
                    let irq = o.irq.to_string();
                    match self.one_steered(o) {
                        Wrote::Moved => moved.push(irq),
                        Wrote::PutBack => put_back.push(irq),
                        Wrote::Refused(e) => refused.push((irq, e)),
                        Wrote::Failed(e) => failed.push((irq, e)),
                        Wrote::Nothing => {}
                    }
                }
                let written_over = self.irqs.overwritten - overwritten;
                if !(moved.is_empty()
                    && put_back.is_empty()
                    && refused.is_empty()
                    && failed.is_empty())
                {
                    info!(
                        away = %away,
                        moved = moved.len(),
                        put_back = put_back.len(),
                        refused = refused.len(),
                        failed = failed.len(),
                        written_over,
                        "interrupts steered"
                    );
                    if let Some((irq, e)) = failed.first() {
                        warn!(irq = %irq, error = %e, failed = failed.len(), "cannot set interrupt affinities; trying again at the next round of checks");
                    }
                    refused.extend(failed);
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
        metrics
            .irqs_refused
            .set((i.refused.len() + i.failed.len()) as i64);
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
                i.failed.insert(o.irq, e.clone());
                return Wrote::Failed(e);
            }
        };
        i.failed.remove(&o.irq);
        if step.overwritten {
            i.overwritten += 1;
            debug!(irq = %o.irq, now = %current, "an interrupt moved by the daemon was written over; taken as what it has");
        }
        let Some(want) = step.write.clone() else {
            // It has what it should: refused no more (should it meet the
            // exclusive CPUs again, it is tried once more).
            i.refused.remove(&o.irq);
            set_kept(&mut i.steered, o.irq, step.keep);
            return Wrote::Nothing;
        };
        let Some(wrote) = o.wrote else {
            // The kernel refuses to move it: not written. It holds what it
            // held, kept only if that is what the daemon wrote.
            if step.overwritten {
                i.steered.remove(&o.irq);
            }
            return Wrote::Nothing;
        };
        match wrote {
            Ok(()) => {
                debug!(irq = %o.irq, was = %current, now = %want, "interrupt affinity set");
                let moved = step.keep.is_some();
                set_kept(&mut i.steered, o.irq, step.keep);
                if moved { Wrote::Moved } else { Wrote::PutBack }
            }
            Err((errno, e)) => {
                // It holds what it held: kept only if that is what the
                // daemon wrote.
                if step.overwritten {
                    i.steered.remove(&o.irq);
                }
                if irq::is_refusal(errno) {
                    debug!(irq = %o.irq, data = %o.irq.text(&want), error = %e, "the kernel refuses to move the interrupt; not written again");
                    i.refused.insert(o.irq, e.clone());
                    Wrote::Refused(e)
                } else {
                    i.failed.insert(o.irq, e.clone());
                    Wrote::Failed(e)
                }
            }
        }
    }

    /// What the daemon wrote to `default_smp_affinity` for `housekeeping`
    /// alone (with `irq_affinity` off), with what it had.
    pub(super) fn irqs_default(&self) -> Option<Steered> {
        if self.cfg.irq_affinity {
            return None;
        }
        self.irqs.steered.get(&Irq::Default).cloned()
    }

    /// The status's interrupts section: `None` with the switch off and
    /// nothing left to put back but the default `housekeeping` keeps.
    pub(super) fn irq_status(&self) -> Option<api::Interrupts> {
        let i = &self.irqs;
        // The default alone, kept by `housekeeping`, is its section's.
        let only_default = i.steered.keys().all(|k| *k == Irq::Default);
        if !self.cfg.irq_affinity
            && (i.steered.is_empty() || (only_default && self.keeps_kernel_work_off()))
        {
            return None;
        }
        // What the last pass kept clear: the interrupts are as it left them.
        let away = match &i.last {
            Some((away, _)) => away.clone(),
            None => self.irq_away(),
        };
        let may = self
            .engine
            .topology()
            .online()
            .difference(self.engine.reserved());
        let mut advice = Vec::new();
        if let Some(b) = &i.irqbalance {
            let set_it = format!(
                "IRQBALANCE_BANNED_CPULIST={may} (the CPUs that may be handed out) in its environment file (/etc/default/irqbalance or /etc/sysconfig/irqbalance), then restart it"
            );
            match (&b.unreadable, &b.banned) {
                (Some(e), _) => advice.push(format!(
                    "irqbalance (pid {}) runs and the CPUs it bans cannot be read ({e}): unless it has {set_it}, it moves interrupts back onto exclusive CPUs",
                    b.pid
                )),
                (None, banned) => {
                    // Without a list it bans the isolated CPUs (and nohz_full).
                    let banned = banned
                        .clone()
                        .unwrap_or_else(|| self.engine.topology().isolated().clone());
                    let missing = away.difference(&banned);
                    if !missing.is_empty() {
                        advice.push(format!(
                            "irqbalance (pid {}) may move interrupts back onto exclusive CPUs {missing}: set {set_it}",
                            b.pid
                        ));
                    }
                }
            }
        }
        if !i.refused.is_empty() {
            let names: Vec<String> = i.refused.keys().map(Irq::to_string).collect();
            advice.push(format!(
                "the kernel keeps interrupts {} where they are (kernel-managed: a multi-queue device's per-CPU vectors, and on x86 the timer and the cascade); isolcpus=managed_irq,<CPUs> at boot keeps managed ones off those CPUs",
                names.join(", ")
            ));
        }
        if i.failed
            .values()
            .any(|e| e.contains("Read-only file system"))
        {
            advice.push("/proc/irq is read-only to the daemon: its systemd unit must not set ProtectKernelTunables= (the packaged one leaves /proc/irq writable)".to_string());
        }
        let errors = |m: &BTreeMap<Irq, String>| -> Vec<api::RefusedIrq> {
            m.iter()
                .map(|(irq, e)| api::RefusedIrq {
                    irq: irq.to_string(),
                    error: e.clone(),
                })
                .collect()
        };
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
            refused: errors(&i.refused),
            failed: errors(&i.failed),
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
fn one_step(
    fs: &dyn crate::io::Fs,
    proc_root: &Path,
    item: &Item,
    away: &CpuSet,
    online: &CpuSet,
) -> Option<Outcome> {
    let irq = item.irq;
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
    let kept = item.kept.as_ref().or_else(|| {
        item.inherit
            .as_ref()
            .filter(|d| current == d.set || current == d.set.intersection(online))
    });
    let none = CpuSet::new();
    let away = if item.clear { away } else { &none };
    let step = irq::step(&current, kept, away, online);
    let wrote = match &step.write {
        Some(want) if !item.refused => match irq.write(fs, proc_root, want) {
            Err(e) if e.kind() == ErrorKind::NotFound => return None,
            result => Some(result.map_err(|e| {
                (
                    e.raw_os_error(),
                    format!("{}: {e}", irq.file(proc_root).display()),
                )
            })),
        },
        _ => None,
    };
    Some(Outcome {
        irq,
        read: Ok((current, step)),
        wrote,
    })
}
