//! The kernel command line that removes what cannot leave exclusive CPUs at
//! run time (issue #42): managed interrupts, the timer tick, RCU callbacks,
//! and the scheduler's load balancing.
//!
//! - [`boot_params`] gives the line for a set of exclusive CPUs on a node's
//!   online CPUs; [`boot_line`] also says why there is none. [`PARAMS`] says
//!   what each parameter removes, for the docs and `pinctl describe`.
//! - Pure: CPU sets in, text out. It never reads `/proc/cmdline` and never
//!   writes a boot loader's configuration: the operator does that, and
//!   reboots.
//! - Invariant: a line always leaves at least one online CPU for the kernel's
//!   housekeeping (`irqaffinity`); a node without one would not boot usefully.

use std::fmt;

use crate::cpuset::CpuSet;

/// One kernel parameter of the line and what it removes from the exclusive
/// CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Param {
    /// The parameter, or the `isolcpus=` flag, as written on the line.
    pub name: &'static str,
    /// What it removes from the exclusive CPUs (or, for `irqaffinity`, where
    /// it sends what starts elsewhere), in a few words.
    pub removes: &'static str,
}

/// What each part of the line does, in the line's order.
pub const PARAMS: [Param; 5] = [
    Param {
        name: "managed_irq",
        removes: "managed interrupts (block-I/O completions) kept off them",
    },
    Param {
        name: "domain",
        removes: "no scheduler load balancing onto them",
    },
    Param {
        name: "nohz_full",
        removes: "the timer tick when one task runs",
    },
    Param {
        name: "rcu_nocbs",
        removes: "RCU callbacks offloaded",
    },
    Param {
        name: "irqaffinity",
        removes: "where interrupts start: the other CPUs",
    },
];

/// Why there is no line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoLine {
    /// No CPU is exclusive: there is nothing to keep quiet.
    NothingExclusive,
    /// The exclusive CPUs hold every online CPU: the kernel would have no
    /// CPU left for its own work and for interrupts.
    NoHousekeeping { exclusive: CpuSet },
}

impl fmt::Display for NoLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoLine::NothingExclusive => write!(f, "no CPU is exclusive"),
            NoLine::NoHousekeeping { exclusive } => write!(
                f,
                "CPUs {exclusive} leave no online CPU: a node must keep a housekeeping CPU"
            ),
        }
    }
}

/// The kernel command line for these exclusive CPUs (E) on these online
/// CPUs: `isolcpus=managed_irq,domain,E nohz_full=E rcu_nocbs=E
/// irqaffinity=H`, with H the online CPUs that are not exclusive, each list
/// in the kernel's list format.
///
/// None when no CPU is exclusive, and when H would be empty: a line without
/// a housekeeping CPU is not offered ([`boot_line`] says which).
pub fn boot_params(exclusive: &CpuSet, online: &CpuSet) -> Option<String> {
    boot_line(exclusive, online).ok()
}

/// [`boot_params`], or why there is no line.
pub fn boot_line(exclusive: &CpuSet, online: &CpuSet) -> Result<String, NoLine> {
    if exclusive.is_empty() {
        return Err(NoLine::NothingExclusive);
    }
    let housekeeping = online.difference(exclusive);
    if housekeeping.is_empty() {
        return Err(NoLine::NoHousekeeping {
            exclusive: exclusive.clone(),
        });
    }
    let e = exclusive;
    Ok(format!(
        "isolcpus=managed_irq,domain,{e} nohz_full={e} rcu_nocbs={e} irqaffinity={housekeeping}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn set(s: &str) -> CpuSet {
        s.parse().unwrap()
    }

    /// The exclusive and housekeeping sets a line names, checking that it
    /// has each parameter once, in order, and nothing else.
    fn parse(line: &str) -> (CpuSet, CpuSet) {
        let words: Vec<&str> = line.split(' ').collect();
        let [isol, nohz, rcu, irq] = words[..] else {
            panic!("four parameters: {line:?}");
        };
        let value = |word: &str, key: &str| {
            let v = word
                .strip_prefix(key)
                .unwrap_or_else(|| panic!("{key} in {line:?}"));
            v.parse::<CpuSet>()
                .unwrap_or_else(|e| panic!("{e} in {line:?}"))
        };
        let e = value(isol, "isolcpus=managed_irq,domain,");
        assert_eq!(value(nohz, "nohz_full="), e, "{line}");
        assert_eq!(value(rcu, "rcu_nocbs="), e, "{line}");
        (e, value(irq, "irqaffinity="))
    }

    #[test]
    fn a_line_names_the_exclusive_cpus_and_the_others() {
        assert_eq!(
            boot_params(&set("1-2,17-18"), &set("0-31")).as_deref(),
            Some(
                "isolcpus=managed_irq,domain,1-2,17-18 nohz_full=1-2,17-18 rcu_nocbs=1-2,17-18 irqaffinity=0,3-16,19-31"
            )
        );
        assert_eq!(
            boot_params(&set("3"), &set("0-3")).as_deref(),
            Some("isolcpus=managed_irq,domain,3 nohz_full=3 rcu_nocbs=3 irqaffinity=0-2")
        );
    }

    #[test]
    fn offline_cpus_are_no_housekeeping_cpus() {
        // CPUs 3 and 7 offline: interrupts cannot start there.
        let line = boot_params(&set("1-2"), &set("0-2,4-6")).unwrap();
        assert_eq!(parse(&line), (set("1-2"), set("0,4-6")));
    }

    #[test]
    fn no_line_without_exclusive_cpus_or_without_a_housekeeping_cpu() {
        assert_eq!(boot_params(&CpuSet::new(), &set("0-3")), None);
        assert_eq!(
            boot_line(&CpuSet::new(), &set("0-3")),
            Err(NoLine::NothingExclusive)
        );
        assert_eq!(boot_params(&set("0-3"), &set("0-3")), None);
        let why = boot_line(&set("0-7"), &set("0-3")).unwrap_err();
        assert_eq!(
            why.to_string(),
            "CPUs 0-7 leave no online CPU: a node must keep a housekeeping CPU"
        );
    }

    #[test]
    fn every_part_of_the_line_is_explained_once() {
        let line = boot_params(&set("1"), &set("0-1")).unwrap();
        for p in PARAMS {
            assert!(line.contains(p.name), "{} is not on {line}", p.name);
            assert!(!p.removes.is_empty() && p.removes.len() < 60, "{p:?}");
        }
        let mut names: Vec<&str> = PARAMS.iter().map(|p| p.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), PARAMS.len());
    }

    fn arb_set() -> impl Strategy<Value = CpuSet> {
        proptest::collection::vec(0u32..300, 0..64).prop_map(|v| v.into_iter().collect())
    }

    proptest! {
        #[test]
        fn the_line_parses_back_to_the_same_sets(e in arb_set(), online in arb_set()) {
            let housekeeping = online.difference(&e);
            match boot_params(&e, &online) {
                Some(line) => {
                    prop_assert_eq!(parse(&line), (e.clone(), housekeeping.clone()));
                    prop_assert!(!housekeeping.is_empty());
                    prop_assert!(housekeeping.is_disjoint(&e));
                    prop_assert!(housekeeping.is_subset(&online));
                }
                None => prop_assert!(e.is_empty() || housekeeping.is_empty()),
            }
        }
    }
}
