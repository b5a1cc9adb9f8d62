//! Which cgroups are the daemon's: one notion of scope, answered here alone.
//!
//! The configuration names three kinds of subtree:
//! - *managed* (`managed`): every cgroup in them is the daemon's to place,
//!   on exclusive CPUs or the shared pool;
//! - *shared* (`shared_cgroups`): confined to the shared pool;
//! - *rule roots*: the literal directories above each `[[rule]]` pattern,
//!   watched so that a cgroup the rule matches is seen when it appears.
//!
//! Together they are the *roots*: the subtrees the daemon scans and watches.
//! A cgroup outside every root is not the daemon's, whatever it asks for.
//! Nor is one *left* to another CPU owner ([`Scope::leaving`]), inside a
//! root or not.

use super::path::{Rel, is_within};

/// The subtrees of one configuration; see the module documentation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scope {
    managed: Vec<String>,
    shared: Vec<String>,
    /// Every root, sorted, without repeats.
    roots: Vec<Rel>,
    /// Cgroups left to another CPU owner, with what lies below them.
    left: Vec<Rel>,
}

impl Scope {
    /// A scope from its three kinds of subtree.
    pub fn new(managed: Vec<String>, shared: Vec<String>, rule_roots: Vec<String>) -> Scope {
        let mut roots: Vec<String> = managed
            .iter()
            .chain(&shared)
            .cloned()
            .chain(rule_roots)
            .collect();
        roots.sort();
        roots.dedup();
        Scope {
            managed,
            shared,
            roots: roots.into_iter().map(Rel::from).collect(),
            left: Vec::new(),
        }
    }

    /// This scope without cgroups `left` and what lies below them: another
    /// CPU owner's.
    pub fn leaving(mut self, left: impl IntoIterator<Item = Rel>) -> Scope {
        self.left.extend(left);
        self.left.sort();
        self.left.dedup();
        self
    }

    /// Whether `rel` is left to another CPU owner.
    fn is_left(&self, rel: &str) -> bool {
        self.left.iter().any(|l| is_within(rel, l))
    }

    /// The subtrees scanned and watched, sorted.
    pub fn roots(&self) -> &[Rel] {
        &self.roots
    }

    /// The managed subtrees, as configured.
    pub fn managed_roots(&self) -> &[String] {
        &self.managed
    }

    /// Whether `rel` lies in a root: the daemon's to scan, watch and place.
    pub fn holds(&self, rel: &str) -> bool {
        self.roots.iter().any(|r| is_within(rel, r)) && !self.is_left(rel)
    }

    /// Whether `rel` lies in a managed subtree.
    pub fn managed(&self, rel: &str) -> bool {
        self.managed.iter().any(|r| is_within(rel, r)) && !self.is_left(rel)
    }

    /// Whether `rel` lies in a subtree confined to the shared pool.
    pub fn shared(&self, rel: &str) -> bool {
        self.shared.iter().any(|r| is_within(rel, r)) && !self.is_left(rel)
    }

    /// The roots at or below `rel` (a directory made above a root may bring
    /// the root with it).
    pub fn roots_below<'a>(&'a self, rel: &'a str) -> impl Iterator<Item = &'a Rel> + 'a {
        self.roots.iter().filter(move |r| is_within(r, rel))
    }

    /// Whether `rel` is a root, lies in one, or lies on the way down to one:
    /// what a scan must look at.
    pub fn leads_to(&self, rel: &str) -> bool {
        self.holds(rel) || self.roots_below(rel).next().is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope() -> Scope {
        Scope::new(
            vec!["kubepods.slice".into()],
            vec!["system.slice".into()],
            vec!["hpc.slice/jobs".into(), "kubepods.slice".into()],
        )
    }

    #[test]
    fn roots_are_every_kind_of_subtree_once_and_sorted() {
        let s = scope();
        let roots: Vec<&str> = s.roots().iter().map(|r| &**r).collect();
        assert_eq!(roots, ["hpc.slice/jobs", "kubepods.slice", "system.slice"]);
    }

    #[test]
    fn each_question_respects_component_boundaries() {
        let s = scope();
        assert!(s.holds("kubepods.slice/kubepods-pod1.slice"));
        assert!(s.holds("hpc.slice/jobs/job-1.scope"));
        assert!(!s.holds("hpc.slice"), "only on the way down to a root");
        assert!(s.leads_to("hpc.slice"));
        assert!(!s.leads_to("user.slice"));
        assert!(!s.holds("system.slice2"));
        assert!(s.managed("kubepods.slice/a") && !s.managed("system.slice/a"));
        assert!(s.shared("system.slice/a.service") && !s.shared("kubepods.slice"));
        let below: Vec<&str> = s.roots_below("hpc.slice").map(|r| &**r).collect();
        assert_eq!(below, ["hpc.slice/jobs"]);
        assert_eq!(s.roots_below("").count(), 3, "the root holds every root");
    }

    #[test]
    fn a_cgroup_left_to_another_owner_is_not_the_daemons_nor_what_is_below() {
        let s = scope().leaving([Rel::from("kubepods.slice/pod1/c1")]);
        for rel in ["kubepods.slice/pod1/c1", "kubepods.slice/pod1/c1/x"] {
            assert!(!s.holds(rel) && !s.managed(rel) && !s.shared(rel), "{rel}");
        }
        assert!(s.managed("kubepods.slice/pod1/c10"), "component boundaries");
        assert!(s.managed("kubepods.slice/pod1") && s.leads_to("kubepods.slice/pod1"));
    }
}
