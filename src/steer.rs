//! The one rule for taking CPUs away from something the kernel lets the
//! daemon move, and giving them back: an interrupt (`irq_affinity`), a
//! workqueue mask, a kernel thread, an RPS or XPS mask (`housekeeping`).
//!
//! - [`target`]: what it had, minus the CPUs to keep clear; never a set
//!   without an online CPU.
//! - [`step`]: with the memory of what it had ([`Steered`]): put back once
//!   its CPUs stop being kept clear; a value someone else wrote since is
//!   taken as the new original.
//! - Pure: no I/O.

use serde::{Deserialize, Serialize};

use crate::cpuset::CpuSet;

/// Where something that had `base` should go while `away` is kept clear,
/// with `online` the online CPUs: `base` minus `away`; when that holds no
/// online CPU, every online CPU not in `away`; when there is none (every
/// CPU exclusive), `base` as it is. `base` when it does not meet `away`.
pub fn target(base: &CpuSet, away: &CpuSet, online: &CpuSet) -> CpuSet {
    if base.is_disjoint(away) {
        return base.clone();
    }
    let kept = base.difference(away);
    if !kept.is_disjoint(online) {
        return kept;
    }
    let rest = online.difference(away);
    if rest.is_empty() { base.clone() } else { rest }
}

/// What the daemon keeps of something it steered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Steered {
    /// What it had before the daemon first changed it: put back when
    /// nothing is to be kept clear of it any more.
    pub was: CpuSet,
    /// What the daemon wrote.
    pub set: CpuSet,
}

/// One step, from what it holds now and what is kept of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// What to write, when it holds something else.
    pub write: Option<CpuSet>,
    /// What to keep once that is written (or nothing was to be): `None`
    /// when it is then as it was, so there is nothing to put back.
    pub keep: Option<Steered>,
    /// It holds something other than what the daemon wrote: someone else
    /// (irqbalance, the operator) wrote it since, and that is taken as what
    /// it had.
    pub overwritten: bool,
}

/// The step for something that holds `current`, of which `kept` is kept,
/// with `away` to keep clear and `online` the online CPUs ([`target`]).
/// What it had is put back only once one of its CPUs is online (the kernel
/// takes no set without one: EINVAL); until then it stays as it is, and
/// kept.
pub fn step(current: &CpuSet, kept: Option<&Steered>, away: &CpuSet, online: &CpuSet) -> Step {
    let overwritten = kept.is_some_and(|k| &k.set != current);
    let base = match kept {
        Some(k) if !overwritten => &k.was,
        _ => current,
    };
    let want = target(base, away, online);
    if want.is_disjoint(online) && &want != current {
        return Step {
            write: None,
            keep: kept.filter(|_| !overwritten).cloned(),
            overwritten,
        };
    }
    Step {
        write: (&want != current).then(|| want.clone()),
        keep: (&want != base).then(|| Steered {
            was: base.clone(),
            set: want,
        }),
        overwritten,
    }
}
