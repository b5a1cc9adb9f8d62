//! `CpuSet`: a set of CPU numbers in the kernel's list format (`0-3,8,10-11`).
//!
//! This module owns parsing, canonical printing and set algebra. It does no I/O.
//! Parsing is strict: surrounding whitespace (including the trailing newline the
//! kernel prints) is tolerated, everything else that is not a well-formed list is
//! rejected with the offending input in the error. Printing is canonical and matches
//! what the kernel prints in `cpuset.cpus` and sysfs lists, so `parse(print(s)) == s`.

use std::fmt;
use std::str::FromStr;

/// The highest CPU number accepted. Linux's `NR_CPUS` tops out at 8192 on every
/// mainstream architecture; the bound keeps a hostile list such as `0-4294967295`
/// from allocating gigabytes.
pub const MAX_CPU: u32 = 16_383;

/// The most CPUs anything may ask for (a `[[rule]]`, `reserved_cpus`,
/// `pinctl run`): one more than the highest CPU number a [`CpuSet`] accepts
/// ([`MAX_CPU`]).
pub const MAX_CPUS: usize = MAX_CPU as usize + 1;

const WORD_BITS: usize = 64;

/// A set of CPU numbers, stored as a bitmap.
///
/// Invariant: `words` has no trailing zero word, so derived equality and hashing
/// compare sets, not representations.
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CpuSet {
    words: Vec<u64>,
}

/// Why a CPU list could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid CPU list {input:?}: {reason}")]
pub struct ParseCpuSetError {
    /// The whole input, as given.
    pub input: String,
    /// What is wrong with it.
    pub reason: String,
}

impl CpuSet {
    /// The empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// The CPUs `first..=last`. Panics never; an empty range gives the empty set.
    pub fn from_range(first: u32, last: u32) -> Self {
        let mut set = Self::new();
        set.insert_range(first, last);
        set
    }

    /// Inserts `cpu`. Returns `true` if it was not already present.
    pub fn insert(&mut self, cpu: u32) -> bool {
        let (word, bit) = split(cpu);
        if word >= self.words.len() {
            self.words.resize(word + 1, 0);
        }
        let was = self.words[word] & bit != 0;
        self.words[word] |= bit;
        !was
    }

    /// Inserts every CPU of `first..=last`, a word at a time: a list that
    /// repeats the widest range costs 256 words per item, not 16384 bits.
    pub fn insert_range(&mut self, first: u32, last: u32) {
        if first > last {
            return;
        }
        let (first, last) = (first as usize, last as usize);
        let (first_word, last_word) = (first / WORD_BITS, last / WORD_BITS);
        if last_word >= self.words.len() {
            self.words.resize(last_word + 1, 0);
        }
        for word in first_word..=last_word {
            let low = if word == first_word {
                first % WORD_BITS
            } else {
                0
            };
            let high = if word == last_word {
                last % WORD_BITS
            } else {
                WORD_BITS - 1
            };
            // Bits low..=high.
            self.words[word] |= (u64::MAX >> (WORD_BITS - 1 - high)) & (u64::MAX << low);
        }
    }

    /// Removes `cpu`. Returns `true` if it was present.
    pub fn remove(&mut self, cpu: u32) -> bool {
        let (word, bit) = split(cpu);
        let Some(w) = self.words.get_mut(word) else {
            return false;
        };
        let was = *w & bit != 0;
        *w &= !bit;
        self.trim();
        was
    }

    pub fn contains(&self, cpu: u32) -> bool {
        let (word, bit) = split(cpu);
        self.words.get(word).is_some_and(|w| w & bit != 0)
    }

    /// The number of CPUs in the set.
    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// The bitmap, CPU 0 the lowest bit of the first word: the layout
    /// `sched_setaffinity(2)` reads on a 64-bit machine.
    pub fn words(&self) -> &[u64] {
        &self.words
    }

    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// The lowest CPU, if any.
    pub fn first(&self) -> Option<u32> {
        self.iter().next()
    }

    /// The highest CPU, if any.
    pub fn last(&self) -> Option<u32> {
        let (i, w) = self.words.iter().enumerate().next_back()?;
        Some((i * WORD_BITS) as u32 + (WORD_BITS as u32 - 1 - w.leading_zeros()))
    }

    /// The CPUs in ascending order.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            words: &self.words,
            index: 0,
            current: self.words.first().copied().unwrap_or(0),
        }
    }

    pub fn union(&self, other: &CpuSet) -> CpuSet {
        let (long, short) = if self.words.len() >= other.words.len() {
            (self, other)
        } else {
            (other, self)
        };
        let mut words = long.words.clone();
        for (w, o) in words.iter_mut().zip(&short.words) {
            *w |= o;
        }
        CpuSet { words }
    }

    pub fn intersection(&self, other: &CpuSet) -> CpuSet {
        let words = self
            .words
            .iter()
            .zip(&other.words)
            .map(|(a, b)| a & b)
            .collect();
        let mut set = CpuSet { words };
        set.trim();
        set
    }

    pub fn difference(&self, other: &CpuSet) -> CpuSet {
        let mut words = self.words.clone();
        for (w, o) in words.iter_mut().zip(&other.words) {
            *w &= !o;
        }
        let mut set = CpuSet { words };
        set.trim();
        set
    }

    /// Adds every CPU of `other` to `self`.
    pub fn union_with(&mut self, other: &CpuSet) {
        if other.words.len() > self.words.len() {
            self.words.resize(other.words.len(), 0);
        }
        for (w, o) in self.words.iter_mut().zip(&other.words) {
            *w |= o;
        }
    }

    /// Removes every CPU of `other` from `self`.
    pub fn difference_with(&mut self, other: &CpuSet) {
        for (w, o) in self.words.iter_mut().zip(&other.words) {
            *w &= !o;
        }
        self.trim();
    }

    pub fn is_subset(&self, other: &CpuSet) -> bool {
        self.words
            .iter()
            .enumerate()
            .all(|(i, w)| w & !other.words.get(i).copied().unwrap_or(0) == 0)
    }

    pub fn is_disjoint(&self, other: &CpuSet) -> bool {
        self.words.iter().zip(&other.words).all(|(a, b)| a & b == 0)
    }

    fn trim(&mut self) {
        while self.words.last() == Some(&0) {
            self.words.pop();
        }
    }
}

fn split(cpu: u32) -> (usize, u64) {
    let cpu = cpu as usize;
    (cpu / WORD_BITS, 1u64 << (cpu % WORD_BITS))
}

/// Ascending iterator over a [`CpuSet`].
pub struct Iter<'a> {
    words: &'a [u64],
    index: usize,
    current: u64,
}

impl Iterator for Iter<'_> {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        loop {
            if self.current != 0 {
                let bit = self.current.trailing_zeros();
                self.current &= self.current - 1;
                return Some((self.index * WORD_BITS) as u32 + bit);
            }
            self.index += 1;
            self.current = *self.words.get(self.index)?;
        }
    }
}

impl<'a> IntoIterator for &'a CpuSet {
    type Item = u32;
    type IntoIter = Iter<'a>;
    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl FromIterator<u32> for CpuSet {
    fn from_iter<I: IntoIterator<Item = u32>>(iter: I) -> Self {
        let mut set = CpuSet::new();
        for cpu in iter {
            set.insert(cpu);
        }
        set
    }
}

impl Extend<u32> for CpuSet {
    fn extend<I: IntoIterator<Item = u32>>(&mut self, iter: I) {
        for cpu in iter {
            self.insert(cpu);
        }
    }
}

impl FromStr for CpuSet {
    type Err = ParseCpuSetError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let err = |reason: String| ParseCpuSetError {
            input: input.to_string(),
            reason,
        };
        let mut set = CpuSet::new();
        let body = input.trim();
        // The kernel prints an empty set as an empty line.
        if body.is_empty() {
            return Ok(set);
        }
        for item in body.split(',') {
            let item = item.trim();
            if item.is_empty() {
                return Err(err("empty element".into()));
            }
            let (first, last) = match item.split_once('-') {
                Some((a, b)) => (parse_cpu(a.trim()), parse_cpu(b.trim())),
                None => (parse_cpu(item), parse_cpu(item)),
            };
            let (first, last) = (first.map_err(&err)?, last.map_err(&err)?);
            if first > last {
                return Err(err(format!("range {item:?} runs backwards")));
            }
            set.insert_range(first, last);
        }
        Ok(set)
    }
}

fn parse_cpu(s: &str) -> Result<u32, String> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{s:?} is not a CPU number"));
    }
    match s.parse::<u32>() {
        Ok(n) if n <= MAX_CPU => Ok(n),
        _ => Err(format!("CPU {s} is above the supported maximum {MAX_CPU}")),
    }
}

impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut cpus = self.iter().peekable();
        let mut first_item = true;
        while let Some(start) = cpus.next() {
            let mut end = start;
            while cpus.peek() == Some(&(end + 1)) {
                end = cpus.next().unwrap_or(end);
            }
            if !first_item {
                f.write_str(",")?;
            }
            first_item = false;
            if start == end {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CpuSet({self})")
    }
}

impl CpuSet {
    /// Parses the kernel's hex mask format (`%*pb`, as in
    /// `/proc/irq/default_smp_affinity`): 32-bit groups of hex digits,
    /// most significant first, separated by commas (`ff,ffffffff`).
    /// Surrounding whitespace is tolerated; an empty or all-zero mask is the
    /// empty set. CPUs above [`MAX_CPU`] are rejected, as in lists.
    pub fn from_mask(input: &str) -> Result<CpuSet, ParseCpuSetError> {
        let err = |reason: String| ParseCpuSetError {
            input: input.to_string(),
            reason,
        };
        let body = input.trim();
        let mut set = CpuSet::new();
        if body.is_empty() {
            return Ok(set);
        }
        for (index, group) in body.rsplit(',').enumerate() {
            if group.is_empty() || group.len() > 8 {
                return Err(err(format!(
                    "{group:?} is not a group of 1 to 8 hex digits"
                )));
            }
            let bits = u32::from_str_radix(group, 16)
                .map_err(|_| err(format!("{group:?} is not a hex number")))?;
            if bits != 0 && index * 32 > MAX_CPU as usize {
                return Err(err(format!("CPUs above the supported maximum {MAX_CPU}")));
            }
            for bit in 0..32u32 {
                if bits & (1 << bit) != 0 {
                    let cpu = index as u32 * 32 + bit;
                    if cpu > MAX_CPU {
                        return Err(err(format!(
                            "CPU {cpu} is above the supported maximum {MAX_CPU}"
                        )));
                    }
                    set.insert(cpu);
                }
            }
        }
        Ok(set)
    }

    /// The set in the kernel's hex mask format ([`Self::from_mask`]'s
    /// inverse): 32-bit groups, most significant first, all but the first
    /// padded to 8 digits; the empty set is `0`.
    pub fn to_mask(&self) -> String {
        let groups = self.last().map_or(1, |last| last as usize / 32 + 1);
        let group = |i: usize| {
            let word = self.words.get(i / 2).copied().unwrap_or(0);
            (word >> ((i % 2) * 32)) as u32
        };
        let mut out = format!("{:x}", group(groups - 1));
        for i in (0..groups - 1).rev() {
            out.push_str(&format!(",{:08x}", group(i)));
        }
        out
    }
}

impl serde::Serialize for CpuSet {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for CpuSet {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn set(s: &str) -> CpuSet {
        s.parse().unwrap()
    }

    #[test]
    fn hex_masks_as_the_kernel_prints_them() {
        for (mask, list) in [
            ("0", ""),
            ("3", "0-1"),
            ("ff\n", "0-7"),
            ("1,00000000", "32"),
            ("ffffffff,ffffffff", "0-63"),
            ("80000000,00000001", "0,63"),
            ("1,00000000,00000002", "1,64"),
        ] {
            assert_eq!(CpuSet::from_mask(mask), Ok(set(list)), "{mask:?}");
            assert_eq!(set(list).to_mask(), mask.trim(), "{list:?}");
        }
        // The kernel pads its first group to the CPUs it has: read, not printed.
        assert_eq!(CpuSet::from_mask("00000003"), Ok(set("0-1")));
        for bad in ["x", "1,", ",1", "123456789", "0x3", "1 2"] {
            assert!(CpuSet::from_mask(bad).is_err(), "{bad:?}");
        }
        let above = format!("1{}", ",00000000".repeat(512));
        assert!(CpuSet::from_mask(&above).is_err());
    }

    #[test]
    fn parses_valid_lists() {
        let cases: &[(&str, &[u32])] = &[
            ("", &[]),
            ("\n", &[]),
            ("0", &[0]),
            ("0-3", &[0, 1, 2, 3]),
            ("0-3,8,10-11\n", &[0, 1, 2, 3, 8, 10, 11]),
            ("  5 , 1-2 ", &[1, 2, 5]),
            ("3,1,2", &[1, 2, 3]),
            ("1-1", &[1]),
            ("0-2,1-3", &[0, 1, 2, 3]),
            ("63-65", &[63, 64, 65]),
            ("16383", &[16383]),
        ];
        for (input, want) in cases {
            let got: Vec<u32> = set(input).iter().collect();
            assert_eq!(&got, want, "input {input:?}");
        }
    }

    #[test]
    fn rejects_malformed_lists() {
        for input in [
            ",",
            "0,",
            ",0",
            "0,,1",
            "a",
            "1-",
            "-1",
            "3-1",
            "0-3:2/4",
            "+1",
            "1.5",
            "0x1",
            "1 2",
            "16384",
            "0-99999999999",
            "0-4294967295",
            "4294967295",
            "4294967296-4294967297",
            "1--2",
            "0-3-5",
        ] {
            let e = input.parse::<CpuSet>().expect_err(input);
            assert_eq!(e.input, input);
            assert!(e.to_string().starts_with("invalid CPU list"), "{e}");
        }
    }

    #[test]
    fn the_widest_range_repeated_costs_words_not_bits() {
        // 1 MiB of "0-16383," (what a config file may hold) took seconds a
        // bit at a time.
        let list = "0-16383,".repeat((1 << 20) / 8);
        let started = std::time::Instant::now();
        let parsed: CpuSet = list.trim_end_matches(',').parse().unwrap();
        assert_eq!(parsed, CpuSet::from_range(0, MAX_CPU));
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn prints_canonically_like_the_kernel() {
        assert_eq!(set("").to_string(), "");
        assert_eq!(set("0,1").to_string(), "0-1");
        assert_eq!(set("3,1,2,8,10-11").to_string(), "1-3,8,10-11");
        assert_eq!(set("0,2,4").to_string(), "0,2,4");
    }

    #[test]
    fn set_algebra() {
        let a = set("0-7");
        let b = set("4-11");
        assert_eq!(a.union(&b), set("0-11"));
        assert_eq!(a.intersection(&b), set("4-7"));
        assert_eq!(a.difference(&b), set("0-3"));
        assert_eq!(b.difference(&a), set("8-11"));
        assert!(set("1-2").is_subset(&a));
        assert!(!b.is_subset(&a));
        assert!(set("0-1").is_disjoint(&set("2-200")));
        assert_eq!(set("100").intersection(&set("0-3")), CpuSet::new());
        assert_eq!(set("70").difference(&set("70")), CpuSet::new());
        assert_eq!(set("5,9,200").last(), Some(200));
        assert_eq!(set("5,9,200").first(), Some(5));
        let mut c = set("64");
        assert!(c.remove(64));
        assert!(c.is_empty());
        assert_eq!(
            c,
            CpuSet::new(),
            "a set emptied by removal equals the empty set"
        );
    }

    #[test]
    fn serde_uses_list_format() {
        let json = serde_json::to_string(&set("0-3,8")).unwrap();
        assert_eq!(json, "\"0-3,8\"");
        let back: CpuSet = serde_json::from_str(&json).unwrap();
        assert_eq!(back, set("0-3,8"));
        assert!(serde_json::from_str::<CpuSet>("\"0-\"").is_err());
    }

    fn arb_set() -> impl Strategy<Value = CpuSet> {
        proptest::collection::vec(0u32..300, 0..64).prop_map(|v| v.into_iter().collect())
    }

    proptest! {
        #[test]
        fn print_then_parse_round_trips(s in arb_set()) {
            prop_assert_eq!(s.to_string().parse::<CpuSet>().unwrap(), s);
        }

        #[test]
        fn parse_then_print_is_canonical(s in arb_set()) {
            let printed = s.to_string();
            // A non-canonical spelling of the same set prints the same way.
            let mut scrambled: Vec<String> = s.iter().map(|c| c.to_string()).collect();
            scrambled.reverse();
            let reparsed: CpuSet = format!(" {}\n", scrambled.join(",")).parse().unwrap();
            prop_assert_eq!(reparsed.to_string(), printed);
        }

        #[test]
        fn algebra_matches_btreeset(a in arb_set(), b in arb_set()) {
            use std::collections::BTreeSet;
            let x: BTreeSet<u32> = a.iter().collect();
            let y: BTreeSet<u32> = b.iter().collect();
            prop_assert_eq!(a.union(&b).iter().collect::<BTreeSet<_>>(), &x | &y);
            prop_assert_eq!(a.intersection(&b).iter().collect::<BTreeSet<_>>(), &x & &y);
            prop_assert_eq!(a.difference(&b).iter().collect::<BTreeSet<_>>(), &x - &y);
            prop_assert_eq!(a.len(), x.len());
            prop_assert_eq!(a.is_subset(&b), x.is_subset(&y));
            prop_assert_eq!(a.is_disjoint(&b), x.is_disjoint(&y));
        }

        #[test]
        fn insert_range_sets_exactly_the_range(
            a in 0u32..=MAX_CPU, b in 0u32..=MAX_CPU, s in arb_set()
        ) {
            let (first, last) = (a.min(b), a.max(b));
            let mut got = s.clone();
            got.insert_range(first, last);
            let mut want = s;
            for cpu in first..=last {
                want.insert(cpu);
            }
            prop_assert_eq!(got, want);
        }

        #[test]
        fn parse_never_panics(s in ".{0,40}") {
            let _ = s.parse::<CpuSet>();
        }

        #[test]
        fn masks_round_trip(s in arb_set()) {
            prop_assert_eq!(CpuSet::from_mask(&s.to_mask()).unwrap(), s);
        }

        #[test]
        fn mask_parse_never_panics(s in "[0-9a-fA-F,x ]{0,40}") {
            let _ = CpuSet::from_mask(&s);
        }
    }
}
