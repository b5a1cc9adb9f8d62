//! The kernel's own movable work kept off exclusive CPUs (`housekeeping`,
//! issue #42), put back when they stop being exclusive; the rule is
//! [`crate::housekeeping`].
//!
//! - One pass at a time ([`Daemon::follow_housekeeping`]), its file
//!   operations on the I/O pool; the outcome comes back as
//!   [`super::Event::Housekept`].
//! - A pass runs when a plan settles with other exclusive (or online) CPUs,
//!   and at each round of checks: the kernel starts new threads at any
//!   time, and someone else may write a mask.
//! - `default_smp_affinity` is the interrupt pass's (`daemon/irq.rs`).
//! - The originals live in `housekeeping_originals` on /run, saved before
//!   the first write. A stop leaves everything moved, as it leaves the
//!   pins; a reload that turns it off puts everything back.

use std::collections::BTreeMap;

use tracing::{debug, info, warn};

use super::Daemon;
use crate::api;
use crate::cpuset::CpuSet;
use crate::housekeeping::kernel::{Ask, Pass, pass};
use crate::housekeeping::{Knob, Memory, stays};

/// What the daemon knows of the kernel's movable work between passes.
pub(super) struct Housekeeping {
    /// What each thing moved had: the mirror of the originals file.
    memory: Memory,
    /// What the last pass kept clear, and the online CPUs (`None` before
    /// the first).
    last: Option<(CpuSet, CpuSet)>,
    asked: Option<(CpuSet, CpuSet)>,
    running: bool,
    /// Another pass was asked for while one ran.
    again: bool,
    /// Writes that failed, with the error: tried again by the next pass.
    failed: BTreeMap<Knob, String>,
    /// What could not be read, and why.
    errors: Vec<String>,
    /// Per CPU kept clear: the kernel threads and interrupts that stay.
    stays: BTreeMap<u32, (Vec<String>, Vec<String>)>,
    /// Why the originals file could not be saved, when it could not.
    save_error: Option<String>,
    /// Why the originals file could not be read at start-up: then nothing
    /// new is moved until a restart, since what it holds would be lost.
    unreadable: Option<String>,
    tx: tokio::sync::mpsc::UnboundedSender<Pass>,
    pub(super) rx: tokio::sync::mpsc::UnboundedReceiver<Pass>,
}

impl Housekeeping {
    /// The memory of the originals file (`unreadable`: why it could not be
    /// read).
    pub(super) fn new(memory: Memory, unreadable: Option<String>) -> Self {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        Housekeeping {
            memory,
            last: None,
            asked: None,
            running: false,
            again: false,
            failed: BTreeMap::new(),
            errors: Vec::new(),
            stays: BTreeMap::new(),
            save_error: None,
            unreadable,
            tx,
            rx,
        }
    }
}

impl Daemon {
    /// Whether the kernel's movable work is kept off anything: off
    /// exclusive CPUs (`housekeeping`) or off Slurm's job cores (`[slurm]
    /// housekeeping`).
    pub(super) fn keeps_kernel_work_off(&self) -> bool {
        self.cfg.housekeeping || self.cfg.slurm.housekeeping
    }

    /// The CPUs the kernel's movable work is kept off now: those outside
    /// the shared pool (exclusive ones, and Slurm's job cores with `[slurm]
    /// housekeeping`); with the switch off, the job cores alone.
    fn housekeeping_away(&self) -> CpuSet {
        if !self.cfg.housekeeping {
            return self.engine.job_cores();
        }
        self.engine
            .topology()
            .online()
            .difference(&self.engine.shared_pool())
    }

    /// Starts a pass when `look` (a round of checks) or when what is kept
    /// clear changed since the last; with the switch off, only while
    /// something is left to put back.
    pub(super) fn follow_housekeeping(&mut self, look: bool) {
        let now = (
            self.housekeeping_away(),
            self.engine.topology().online().clone(),
        );
        let on = self.keeps_kernel_work_off();
        let h = &mut self.housekeeping;
        if h.running {
            if look || h.asked.as_ref() != Some(&now) {
                h.again = true;
            }
            return;
        }
        if !on && h.memory.is_empty() {
            h.failed.clear();
            h.errors.clear();
            h.stays.clear();
            h.last = None;
            return;
        }
        if !look && h.last.as_ref() == Some(&now) {
            return;
        }
        h.running = true;
        h.asked = Some(now.clone());
        let (away, online) = now;
        let ask = Ask {
            sysfs_root: self.cfg.sysfs_root.clone(),
            proc_root: self.cfg.proc_root.clone(),
            originals_file: self.cfg.housekeeping_originals.clone(),
            away,
            online,
            memory: h.memory.clone(),
            may_take: h.unreadable.is_none(),
        };
        let (pool, tx) = (self.pool.clone(), h.tx.clone());
        tokio::spawn(async move {
            let _ = tx.send(pass(&pool, ask).await);
        });
    }

    /// A pass ended: its outcome kept, each write logged and in the trail.
    pub(super) fn housekept(&mut self, done: Pass) {
        let h = &mut self.housekeeping;
        h.running = false;
        h.last = h.asked.take();
        let away = h.last.as_ref().map(|(a, _)| a.clone()).unwrap_or_default();
        for e in &done.reading.errors {
            if !h.errors.contains(e) {
                warn!(error = %e, "housekeeping: cannot read; trying again at the next round of checks");
            }
        }
        h.errors = done.reading.errors.clone();
        for (knob, e) in &done.reading.unread {
            debug!(what = %knob, error = %e, "housekeeping: not read");
        }
        if let Some(e) = &done.save_error
            && h.save_error.as_ref() != Some(e)
        {
            warn!(path = %self.cfg.housekeeping_originals.display(), error = %e, "cannot save the housekeeping originals; nothing new moved, trying again at the next round of checks");
        }
        h.save_error = done.save_error.clone();
        let (mut moved, mut back) = (0usize, 0usize);
        let mut failed = Vec::new();
        for w in &done.written {
            // No memory after the step: it is then as it was.
            let restore = !done.plan.memory.contains_key(&w.knob);
            match &w.result {
                Ok(()) => {
                    h.failed.remove(&w.knob);
                    if restore {
                        back += 1;
                    } else {
                        moved += 1;
                    }
                    debug!(what = %w.what, old = ?w.old.as_ref().map(ToString::to_string), new = %w.set, "housekeeping: moved");
                }
                // A thread that ended meanwhile is no failure.
                Err((Some(libc::ESRCH), _)) => {}
                Err((_, e)) => {
                    if h.failed
                        .get(&w.knob)
                        .is_none_or(|f| !f.ends_with(e.as_str()))
                    {
                        warn!(what = %w.what, data = %w.set, error = %e, "housekeeping: cannot move; trying again at the next round of checks");
                    }
                    h.failed.insert(w.knob.clone(), format!("{}: {e}", w.what));
                    failed.push((w.what.clone(), e.clone()));
                }
            }
        }
        h.failed
            .retain(|k, _| done.written.iter().any(|w| &w.knob == k));
        if moved + back + failed.len() > 0 {
            info!(
                moved,
                put_back = back,
                failed = failed.len(),
                kept_clear = %away,
                originals = done.memory.len(),
                "housekeeping: the kernel's movable work moved"
            );
            self.socket.events.push(api::EventKind::Housekeeping {
                away: away.clone(),
                moved,
                put_back: back,
                failed,
            });
        }
        let h = &mut self.housekeeping;
        h.stays = stays(&done.reading, &away);
        h.memory = done.memory;
        self.socket.dirty = true;
        if std::mem::take(&mut self.housekeeping.again) {
            self.follow_housekeeping(true);
        }
    }

    /// The status's housekeeping section: `None` with the switch off and
    /// nothing left to put back.
    pub(super) fn housekeeping_status(&self) -> Option<api::Housekeeping> {
        let h = &self.housekeeping;
        let on = self.keeps_kernel_work_off();
        if !on && h.memory.is_empty() {
            return None;
        }
        let away = h.last.as_ref().map(|(a, _)| a.clone()).unwrap_or_default();
        let mut moved: Vec<api::Moved> = h
            .memory
            .values()
            .map(|k| api::Moved {
                what: k.what.clone(),
                was: k.steered.was.clone(),
                set: k.steered.set.clone(),
            })
            .collect();
        if let Some(d) = self.irqs_default() {
            moved.push(api::Moved {
                what: "irq default_smp_affinity".into(),
                was: d.was,
                set: d.set,
            });
        }
        let online = self.engine.topology().online();
        Some(api::Housekeeping {
            on,
            boot: crate::bootline::boot_params(&away, online),
            away,
            moved,
            failed: h.failed.values().cloned().collect(),
            stays: h
                .stays
                .iter()
                .map(|(cpu, (threads, interrupts))| api::Stays {
                    cpu: *cpu,
                    threads: threads.clone(),
                    interrupts: interrupts.clone(),
                })
                .collect(),
            originals: h.memory.len(),
            error: h
                .unreadable
                .as_ref()
                .map(|e| format!("the originals file cannot be read ({e}): nothing new is moved until a restart reads it"))
                .or_else(|| h.save_error.clone())
                .or_else(|| (!h.errors.is_empty()).then(|| h.errors.join("; "))),
        })
    }

    /// Waits for a pass in flight (stop): what it wrote is then in the
    /// originals file.
    pub(super) async fn finish_housekeeping(&mut self) {
        while self.housekeeping.running {
            match self.housekeeping.rx.recv().await {
                Some(done) => {
                    self.housekeeping.again = false;
                    self.housekept(done);
                }
                None => break,
            }
        }
    }
}
