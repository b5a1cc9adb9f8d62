//! Cgroups read in part, read again soon: a reading that could not read
//! all its cgroup's request is decided by (`Observed::unsure`: EMFILE,
//! EIO, a bundle not readable for now), one whose read job failed, or a
//! `cpuset.cpus` written by someone else that could not be read, is not
//! left until the next reconcile.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::cgroup::Rel;

/// How long after a reading in part its cgroup is read again
/// ([`Unsure`]), and how many at most each time, in turn.
const RETRY_UNSURE: Duration = Duration::from_secs(1);
const RETRY_UNSURE_AT_ONCE: usize = 16;

/// Cgroups whose last reading could not read all its request is decided by
/// (`Observed::unsure`: EMFILE, EIO), or whose read job failed: read again
/// [`RETRY_UNSURE`] later, not only at the next reconcile. A few each time,
/// in turn (some stay unsure for good: a file no one can read), so that
/// each is retried however many there are.
#[derive(Default)]
pub(super) struct Unsure {
    rels: BTreeSet<Rel>,
    /// The last one retried: the next round starts after it.
    cursor: Option<Rel>,
    /// When the next round is due.
    due: Option<Instant>,
}

impl Unsure {
    /// When the next round is due, while there are any.
    pub(super) fn due(&self) -> Option<Instant> {
        self.due.filter(|_| !self.rels.is_empty())
    }

    pub(super) fn insert(&mut self, rel: Rel) -> bool {
        if self.rels.is_empty() {
            self.due = Some(Instant::now() + RETRY_UNSURE);
        }
        self.rels.insert(rel)
    }

    pub(super) fn remove(&mut self, rel: &str) {
        self.rels.remove(rel);
    }

    pub(super) fn forget(&mut self, rel: &str) {
        self.rels.retain(|r| !crate::cgroup::is_within(r, rel));
    }

    /// The next round's cgroups, taken out (a reading still unsure puts
    /// one back), after the last round's; the round after is due
    /// [`RETRY_UNSURE`] later.
    pub(super) fn round(&mut self) -> Vec<Rel> {
        use std::ops::Bound::{Excluded, Unbounded};
        let after = match self.cursor.take() {
            Some(c) => self.rels.range::<Rel, _>((Excluded(c), Unbounded)),
            None => self.rels.range::<Rel, _>(..),
        };
        let mut picked: Vec<Rel> = after.take(RETRY_UNSURE_AT_ONCE).cloned().collect();
        if picked.len() < RETRY_UNSURE_AT_ONCE {
            let wrap = self
                .rels
                .iter()
                .take_while(|r| picked.first() != Some(*r))
                .take(RETRY_UNSURE_AT_ONCE - picked.len())
                .cloned()
                .collect::<Vec<_>>();
            picked.extend(wrap);
        }
        for r in &picked {
            self.rels.remove(r);
        }
        self.cursor = picked.last().cloned();
        self.due = Some(Instant::now() + RETRY_UNSURE);
        picked
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// However many stay unsure for good, each is read again within a few
    /// rounds: a round takes the next ones after the last round's, wrapping.
    #[test]
    fn every_unsure_cgroup_gets_its_turn() {
        let mut u = Unsure::default();
        let all: Vec<Rel> = (0..40).map(|i| Rel::from(format!("c{i:02}"))).collect();
        for r in &all {
            u.insert(r.clone());
        }
        assert!(u.due.is_some());
        let mut seen = BTreeSet::new();
        for round in 0..3 {
            let picked = u.round();
            assert_eq!(picked.len(), RETRY_UNSURE_AT_ONCE, "round {round}");
            seen.extend(picked.iter().cloned());
            // Still unsure: back in the set.
            for r in picked {
                u.insert(r);
            }
        }
        assert_eq!(seen.len(), all.len(), "every one had its turn");
        let mut u = Unsure::default();
        for r in ["a/b", "a/b/c", "a/bc"] {
            u.insert(r.into());
        }
        u.forget("a/b");
        assert_eq!(u.rels.iter().map(|r| &**r).collect::<Vec<_>>(), ["a/bc"]);
    }
}
