//! The soak's one source of chance: a small seeded generator (wyrand),
//! so that a seed names every choice a run makes (which container goes,
//! which fault, when), and a run can be made again with `PINCTL_SOAK_SEED`.
//! The kernel's and the daemon's timing are not replayed.

use std::time::Duration;

/// A stream of numbers from a seed; each thread has its own
/// ([`Rng::stream`]), so that one thread's choices do not depend on how
/// often another drew.
pub struct Rng(u64);

impl Rng {
    /// Stream `n` of `seed`.
    pub fn stream(seed: u64, n: u64) -> Rng {
        let mut r = Rng(seed ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        r.next();
        r
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0xa076_1d64_78bd_642f);
        let t = u128::from(self.0) * u128::from(self.0 ^ 0xe703_7ed1_a0b4_28db);
        ((t >> 64) ^ t) as u64
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }

    /// A duration between `lo` and `hi`.
    pub fn between(&mut self, lo: Duration, hi: Duration) -> Duration {
        let span = hi.saturating_sub(lo).as_millis() as u64;
        lo + Duration::from_millis(self.next() % (span + 1))
    }

    /// One of `items`.
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
}
