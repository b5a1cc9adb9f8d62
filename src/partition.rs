//! Isolated cgroup v2 partitions for exclusive workloads (`isolation =
//! "partition"`): the pure rule of which files to write, in which order.
//!
//! A workload's top cgroup becomes an *isolated remote partition*: its CPUs
//! granted in `cpuset.cpus.exclusive` down its path (each ancestor holds the
//! union of the grants below it), then `cpuset.cpus.partition` = `isolated`.
//! The kernel then takes them out of every other effective set and out of
//! load balancing. Its rules (6.12; `tests/vm/scenarios/0-kernel.sh`):
//! - a grant overlapping a *sibling's* grant is `EINVAL` (a sibling's
//!   `cpuset.cpus` does not matter);
//! - a partition's effective set is its grant: a workload whose CPUs move
//!   leaves its partition first;
//! - an ancestor's grant shrunk, or a CPU taken offline, makes it `isolated
//!   invalid`, until the partition file is written again;
//! - undone by `member` first, then the grants in any order.
//!
//! So [`release`] runs before a plan's writes and [`grant`] after; no two
//! siblings' grants overlap at any step (a property test checks it). The
//! daemon's pass is `daemon/partition.rs`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::cgroup::{self, Rel};
use crate::cpuset::CpuSet;

/// The file granting a cgroup's exclusive CPUs (v2, Linux 6.7 and later).
pub const EXCLUSIVE: &str = "cpuset.cpus.exclusive";
/// A cgroup's partition type: `member`, `root` or `isolated`.
pub const PARTITION: &str = "cpuset.cpus.partition";
/// The CPUs a partition root really has (its grant as its parents allow).
pub const EXCLUSIVE_EFFECTIVE: &str = "cpuset.cpus.exclusive.effective";
/// The root cgroup's list of CPUs in isolated partitions; its presence is
/// how the daemon knows the kernel has remote partitions.
pub const ISOLATED: &str = "cpuset.cpus.isolated";

/// What a `cpuset.cpus.partition` file reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    Member,
    Isolated,
    /// A partition root that the scheduler still balances (`root`).
    Root,
    /// `isolated invalid (reason)` or `root invalid (reason)`: the kernel
    /// keeps the type but gives no CPUs of its own.
    Invalid(String),
}

impl State {
    /// Reads the file's text; anything unknown is an invalid state quoting it.
    pub fn parse(text: &str) -> State {
        match text.trim() {
            "member" => State::Member,
            "isolated" => State::Isolated,
            "root" => State::Root,
            other => State::Invalid(
                other
                    .split_once(" invalid ")
                    .map(|(_, why)| why.trim_matches(|c| c == '(' || c == ')'))
                    .unwrap_or(other)
                    .to_string(),
            ),
        }
    }
}

/// Whether a partition made for `cpus` is what it should be, from what its
/// `cpuset.cpus.partition` and (when the kernel has it)
/// `cpuset.cpus.exclusive.effective` read; else why not. The kernel keeps a
/// partition whose grant above was shrunk in part as `isolated` with fewer
/// CPUs (seen on 6.12), so the type alone does not tell. A CPU taken
/// offline stays in the effective grant.
pub fn judge(state: &str, exclusive_effective: Option<&str>, cpus: &CpuSet) -> Result<(), String> {
    match State::parse(state) {
        State::Isolated => {}
        State::Invalid(why) => return Err(why),
        other => {
            return Err(format!(
                "it reads {:?}",
                format!("{other:?}").to_lowercase()
            ));
        }
    }
    let Some(text) = exclusive_effective else {
        return Ok(());
    };
    match text.parse::<CpuSet>() {
        Ok(got) if &got == cpus => Ok(()),
        Ok(got) => Err(format!(
            "the kernel gives it CPUs {} of {cpus} (a grant above it was changed)",
            if got.is_empty() {
                "(none)".to_string()
            } else {
                got.to_string()
            }
        )),
        Err(e) => Err(format!("{EXCLUSIVE_EFFECTIVE}: {e}")),
    }
}

/// What the daemon has made: its partition roots and its grants. Kept in
/// the state file, so a restarted daemon undoes what is no longer wanted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Made {
    /// Cgroups made isolated partitions, with their CPUs.
    #[serde(default)]
    pub roots: BTreeMap<Rel, CpuSet>,
    /// What each cgroup's `cpuset.cpus.exclusive` holds by the daemon's
    /// writes (the roots' own grants included); never empty sets.
    #[serde(default)]
    pub grants: BTreeMap<Rel, CpuSet>,
}

impl Made {
    /// Whether nothing is made.
    pub fn is_empty(&self) -> bool {
        self.roots.is_empty() && self.grants.is_empty()
    }

    /// Records a step that succeeded.
    pub fn done(&mut self, step: &Step) {
        match step {
            Step::Member(rel) => {
                self.roots.remove(rel);
            }
            Step::Grant(rel, set) if set.is_empty() => {
                self.grants.remove(rel);
            }
            Step::Grant(rel, set) => {
                self.grants.insert(rel.clone(), set.clone());
            }
            Step::Isolate(rel, set) => {
                self.roots.insert(rel.clone(), set.clone());
            }
        }
    }

    /// Forgets `rel` and what is below it (removed: the kernel undid it).
    pub fn forget(&mut self, rel: &str) {
        self.roots.retain(|r, _| !cgroup::is_within(r, rel));
        self.grants.retain(|r, _| !cgroup::is_within(r, rel));
    }

    /// The CPUs of every partition made.
    pub fn cpus(&self) -> CpuSet {
        self.roots
            .values()
            .fold(CpuSet::new(), |acc, set| acc.union(set))
    }
}

/// One write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// `cpuset.cpus.partition` = `member`.
    Member(Rel),
    /// `cpuset.cpus.exclusive` = the set (empty: cleared).
    Grant(Rel, CpuSet),
    /// `cpuset.cpus.partition` = `isolated`, for a partition of these CPUs.
    Isolate(Rel, CpuSet),
}

impl Step {
    /// The cgroup written.
    pub fn rel(&self) -> &Rel {
        match self {
            Step::Member(rel) | Step::Grant(rel, _) | Step::Isolate(rel, _) => rel,
        }
    }

    /// The file written.
    pub fn file(&self) -> &'static str {
        match self {
            Step::Grant(..) => EXCLUSIVE,
            Step::Member(_) | Step::Isolate(..) => PARTITION,
        }
    }

    /// What is written, as logged.
    pub fn data(&self) -> String {
        match self {
            Step::Member(_) => "member".to_string(),
            Step::Isolate(..) => "isolated".to_string(),
            Step::Grant(_, set) => set.to_string(),
        }
    }

    /// What is written, as written: with a newline, since kernfs never
    /// sees a write of no bytes, and an empty grant must reach the kernel
    /// to clear it.
    pub fn text(&self) -> String {
        format!("{}\n", self.data())
    }
}

/// The grants `roots` need: each root's CPUs on itself and on every
/// ancestor below the hierarchy's root.
pub fn grants_for(roots: &BTreeMap<Rel, CpuSet>) -> BTreeMap<Rel, CpuSet> {
    let mut grants: BTreeMap<Rel, CpuSet> = BTreeMap::new();
    for (root, set) in roots {
        let mut rel: &str = root;
        while !rel.is_empty() {
            let entry = grants.entry(Rel::from(rel)).or_default();
            *entry = entry.union(set);
            rel = cgroup::parent(rel).unwrap_or("");
        }
    }
    grants
}

/// The writes that undo what `want` no longer asks for: each partition not
/// wanted with exactly its CPUs back to `member`, then each grant shrunk to
/// what is still needed, deepest first.
pub fn release(made: &Made, want: &BTreeMap<Rel, CpuSet>) -> Vec<Step> {
    let mut steps: Vec<Step> = made
        .roots
        .iter()
        .filter(|(rel, set)| want.get(*rel) != Some(*set))
        .map(|(rel, _)| Step::Member(rel.clone()))
        .collect();
    let needed = grants_for(want);
    let mut shrink: Vec<Step> = made
        .grants
        .iter()
        .filter_map(|(rel, set)| {
            let keep = needed
                .get(rel)
                .map_or_else(CpuSet::new, |n| n.intersection(set));
            (&keep != set).then(|| Step::Grant(rel.clone(), keep))
        })
        .collect();
    shrink.sort_by(|a, b| {
        cgroup::depth(b.rel())
            .cmp(&cgroup::depth(a.rel()))
            .then_with(|| a.rel().cmp(b.rel()))
    });
    steps.extend(shrink);
    steps
}

/// The writes that make what `want` asks for, once [`release`]'s are made:
/// grants grown, shallowest first, then each partition not made yet.
pub fn grant(made: &Made, want: &BTreeMap<Rel, CpuSet>) -> Vec<Step> {
    let mut grow: Vec<Step> = grants_for(want)
        .into_iter()
        .filter(|(rel, set)| made.grants.get(rel) != Some(set))
        .map(|(rel, set)| Step::Grant(rel, set))
        .collect();
    grow.sort_by(|a, b| {
        cgroup::depth(a.rel())
            .cmp(&cgroup::depth(b.rel()))
            .then_with(|| a.rel().cmp(b.rel()))
    });
    grow.extend(
        want.iter()
            .filter(|(rel, set)| made.roots.get(*rel) != Some(*set))
            .map(|(rel, set)| Step::Isolate(rel.clone(), set.clone())),
    );
    grow
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn set(s: &str) -> CpuSet {
        s.parse().unwrap()
    }

    fn rel(s: &str) -> Rel {
        Rel::from(s)
    }

    #[test]
    fn states_parse_as_the_kernel_prints_them() {
        assert_eq!(State::parse("member\n"), State::Member);
        assert_eq!(State::parse("isolated\n"), State::Isolated);
        assert_eq!(State::parse("root"), State::Root);
        assert_eq!(
            State::parse("isolated invalid (Parent is not a partition root)\n"),
            State::Invalid("Parent is not a partition root".into())
        );
        assert_eq!(State::parse("odd"), State::Invalid("odd".into()));
    }

    #[test]
    fn a_partition_is_judged_by_its_type_and_its_effective_grant() {
        let cpus = set("2-3");
        assert_eq!(judge("isolated\n", Some("2-3\n"), &cpus), Ok(()));
        assert_eq!(judge("isolated\n", None, &cpus), Ok(()));
        assert_eq!(
            judge(
                "isolated invalid (Parent is not a partition root)\n",
                Some("\n"),
                &cpus
            ),
            Err("Parent is not a partition root".into())
        );
        assert_eq!(
            judge("isolated\n", Some("2\n"), &cpus),
            Err("the kernel gives it CPUs 2 of 2-3 (a grant above it was changed)".into())
        );
        assert_eq!(
            judge("member\n", Some("\n"), &cpus),
            Err("it reads \"member\"".into())
        );
        // Kernfs would never see an empty write: a cleared grant is a newline.
        assert_eq!(Step::Grant(rel("k"), CpuSet::new()).text(), "\n");
    }

    #[test]
    fn a_partition_is_granted_down_its_path_then_isolated() {
        let want = BTreeMap::from([(rel("k/pod/ctr"), set("3"))]);
        let steps = grant(&Made::default(), &want);
        assert_eq!(
            steps,
            vec![
                Step::Grant(rel("k"), set("3")),
                Step::Grant(rel("k/pod"), set("3")),
                Step::Grant(rel("k/pod/ctr"), set("3")),
                Step::Isolate(rel("k/pod/ctr"), set("3")),
            ]
        );
        let mut made = Made::default();
        steps.iter().for_each(|s| made.done(s));
        assert!(release(&made, &want).is_empty());
        assert!(grant(&made, &want).is_empty());
        // Released: member first, then the grants, deepest first.
        assert_eq!(
            release(&made, &BTreeMap::new()),
            vec![
                Step::Member(rel("k/pod/ctr")),
                Step::Grant(rel("k/pod/ctr"), CpuSet::new()),
                Step::Grant(rel("k/pod"), CpuSet::new()),
                Step::Grant(rel("k"), CpuSet::new()),
            ]
        );
    }

    #[test]
    fn a_partition_whose_cpus_move_is_left_then_made_again() {
        let mut made = Made::default();
        let old = BTreeMap::from([(rel("k/a"), set("3"))]);
        grant(&made.clone(), &old).iter().for_each(|s| made.done(s));
        let new = BTreeMap::from([(rel("k/a"), set("5"))]);
        assert_eq!(
            release(&made, &new),
            vec![
                Step::Member(rel("k/a")),
                Step::Grant(rel("k/a"), CpuSet::new()),
                Step::Grant(rel("k"), CpuSet::new()),
            ]
        );
    }

    /// The kernel's rules as the probe records them: a grant overlapping a
    /// sibling's is refused; a partition is valid when its CPUs are granted
    /// on its whole path.
    #[derive(Default)]
    struct Kernel {
        grants: BTreeMap<Rel, CpuSet>,
        isolated: BTreeMap<Rel, CpuSet>,
    }

    impl Kernel {
        fn apply(&mut self, step: &Step) -> Result<(), String> {
            match step {
                Step::Grant(rel, set) => {
                    let parent = cgroup::parent(rel).unwrap_or("");
                    for (other, theirs) in &self.grants {
                        if other != rel
                            && cgroup::parent(other) == Some(parent)
                            && !theirs.is_disjoint(set)
                        {
                            return Err(format!("{rel}: {set} overlaps sibling {other}"));
                        }
                    }
                    if set.is_empty() {
                        self.grants.remove(rel);
                    } else {
                        self.grants.insert(rel.clone(), set.clone());
                    }
                }
                Step::Member(rel) => {
                    self.isolated.remove(rel);
                }
                Step::Isolate(rel, set) => {
                    let mut r: &str = rel;
                    while !r.is_empty() {
                        if !self.grants.get(r).is_some_and(|g| set.is_subset(g)) {
                            return Err(format!("{rel}: {set} not granted on {r}"));
                        }
                        r = cgroup::parent(r).unwrap_or("");
                    }
                    self.isolated.insert(rel.clone(), set.clone());
                }
            }
            Ok(())
        }
    }

    /// Wanted partitions: each of a few leaves of a small tree gets a
    /// distinct CPU or none.
    fn wants() -> impl Strategy<Value = BTreeMap<Rel, CpuSet>> {
        const LEAVES: [&str; 6] = ["k/p1/a", "k/p1/b", "k/p2/a", "k/p2", "s/x", "k/p3/c/d"];
        proptest::collection::vec(proptest::option::of(0u32..8), LEAVES.len()).prop_map(|cpus| {
            let mut used = CpuSet::new();
            let mut want = BTreeMap::new();
            for (leaf, cpu) in LEAVES.iter().zip(cpus) {
                // Nested partitions are not asked for: one leaf per path.
                if let Some(cpu) = cpu
                    && !used.contains(cpu)
                    && !want
                        .keys()
                        .any(|w: &Rel| cgroup::is_within(leaf, w) || cgroup::is_within(w, leaf))
                {
                    used.insert(cpu);
                    want.insert(rel(leaf), CpuSet::from_iter([cpu]));
                }
            }
            want
        })
    }

    proptest! {
        /// From any wanted partitions to any others, release then grant
        /// never breaks the kernel's rules and ends with exactly what is
        /// wanted, made and recorded.
        #[test]
        fn release_then_grant_keeps_the_kernel_rules(seq in proptest::collection::vec(wants(), 1..6)) {
            let mut kernel = Kernel::default();
            let mut made = Made::default();
            for want in seq {
                for step in release(&made, &want) {
                    kernel.apply(&step).map_err(TestCaseError::fail)?;
                    made.done(&step);
                }
                for step in grant(&made, &want) {
                    kernel.apply(&step).map_err(TestCaseError::fail)?;
                    made.done(&step);
                }
                prop_assert_eq!(&made.roots, &want);
                prop_assert_eq!(&kernel.isolated, &want);
                prop_assert_eq!(&made.grants, &grants_for(&want));
                prop_assert_eq!(&kernel.grants, &made.grants);
            }
        }
    }
}
