//! What the runtime holds of each container's CPUs, and the updates that
//! keep it true (`UpdateContainers`).
//!
//! A runtime applies a container's CPUs from its own copy of the spec: when
//! it makes the container, at each resize (`UpdateContainerResources`
//! writes the spec's `cpuset.cpus` again), and, with runc's systemd driver,
//! as the scope's `AllowedCPUs=`, which systemd writes back at every
//! `daemon-reload`. pinctld answers a shared container the shared pool
//! when it is made. When the pool later changes, that copy is stale, and
//! each of those would put the container back on the old pool, exclusive
//! CPUs included, until the watcher wrote it again.
//!
//! [`Told`] keeps, for each container the runtime named, its cgroup and
//! the CPUs its spec holds, and gives the updates that make those the CPUs
//! the container has now. It decides nothing: the caller says what each
//! cgroup should hold.
//! - A container whose spec holds no CPUs (made before `[nri]` was on, or
//!   one pinctld answered nothing) is left alone: the runtime then writes
//!   none and systemd holds none.
//! - An update the runtime could not make is logged by the caller and
//!   tried again at the next change.

use std::collections::BTreeMap;

use crate::cpuset::CpuSet;

/// The containers the runtime named, and what their specs hold.
#[derive(Debug, Default)]
pub struct Told {
    containers: BTreeMap<String, Held>,
    /// Some container's CPUs may differ from what its spec holds.
    dirty: bool,
    /// Updates were sent and not answered yet.
    in_flight: bool,
}

#[derive(Debug)]
struct Held {
    /// Its cgroup, relative to the cgroup root.
    rel: String,
    /// The CPUs its spec holds (`None`: none).
    cpus: Option<CpuSet>,
}

/// One container's new CPUs, as sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Update {
    pub id: String,
    pub cpus: CpuSet,
    /// What its spec held before.
    pub before: CpuSet,
}

impl Told {
    /// Container `id`, whose cgroup is `rel`, holds `cpus` in its spec
    /// (made, synchronized or updated just now).
    pub fn learn(&mut self, id: &str, rel: &str, cpus: Option<CpuSet>) {
        let cpus = cpus.filter(|c| !c.is_empty());
        self.containers.insert(
            id.to_string(),
            Held {
                rel: rel.to_string(),
                cpus,
            },
        );
        self.dirty = true;
    }

    /// Container `id` is gone (stopped or removed).
    pub fn forget(&mut self, id: &str) {
        self.containers.remove(id);
    }

    /// What the containers should hold may have changed (the shared pool,
    /// a pin): look again at the next [`Self::next`].
    pub fn touch(&mut self) {
        self.dirty = true;
    }

    /// Forgets every container (the link to the runtime is gone; the next
    /// one synchronizes again).
    pub fn clear(&mut self) {
        *self = Told::default();
    }

    /// Whether [`Self::next`] would look: something changed and nothing
    /// is unanswered.
    pub fn due(&self) -> bool {
        self.dirty && !self.in_flight
    }

    /// Whether no container is known.
    pub fn is_empty(&self) -> bool {
        self.containers.is_empty()
    }

    /// Up to `most` updates, for containers whose spec holds CPUs other
    /// than `target(rel)` (`None`: leave it be); none while earlier ones
    /// are unanswered. What is returned is taken as sent: answer it with
    /// [`Self::answered`].
    pub fn next(&mut self, most: usize, target: impl Fn(&str) -> Option<CpuSet>) -> Vec<Update> {
        if !self.due() {
            return Vec::new();
        }
        self.dirty = false;
        let mut out = Vec::new();
        for (id, held) in &mut self.containers {
            let Some(before) = held.cpus.as_ref() else {
                continue;
            };
            let Some(cpus) = target(&held.rel).filter(|c| !c.is_empty() && c != before) else {
                continue;
            };
            if out.len() == most {
                // The rest go once these are answered.
                self.dirty = true;
                break;
            }
            out.push(Update {
                id: id.clone(),
                cpus: cpus.clone(),
                before: before.clone(),
            });
            held.cpus = Some(cpus);
        }
        self.in_flight = !out.is_empty();
        out
    }

    /// The runtime answered `sent`: those named in `failed` (every one,
    /// when the call itself failed) still hold what they held before.
    pub fn answered(&mut self, sent: &[Update], failed: &[String]) {
        self.in_flight = false;
        for u in sent.iter().filter(|u| failed.contains(&u.id)) {
            if let Some(held) = self.containers.get_mut(&u.id)
                && held.cpus.as_ref() == Some(&u.cpus)
            {
                held.cpus = Some(u.before.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(s: &str) -> CpuSet {
        s.parse().unwrap()
    }

    fn ids(updates: &[Update]) -> Vec<&str> {
        updates.iter().map(|u| u.id.as_str()).collect()
    }

    #[test]
    fn a_container_whose_spec_holds_the_old_pool_is_updated_once() {
        let mut told = Told::default();
        told.learn("a", "kubepods/a", Some(set("0-7")));
        told.learn("b", "kubepods/b", Some(set("0-7")));
        // Made before [nri] was on: its spec holds no CPUs.
        told.learn("c", "kubepods/c", None);
        // Exclusive: the caller leaves it be.
        told.learn("x", "kubepods/x", Some(set("4-5")));
        let target = |rel: &str| (rel != "kubepods/x").then(|| set("0-3,6-7"));

        let sent = told.next(16, target);
        assert_eq!(ids(&sent), ["a", "b"]);
        assert_eq!(sent[0].cpus, set("0-3,6-7"));
        assert_eq!(sent[0].before, set("0-7"));
        assert!(told.next(16, target).is_empty(), "one call at a time");
        told.answered(&sent, &[]);
        told.touch();
        assert!(told.next(16, target).is_empty(), "nothing differs now");
    }

    #[test]
    fn updates_go_a_chunk_at_a_time_and_a_failed_one_is_tried_again() {
        let mut told = Told::default();
        for id in ["a", "b", "c"] {
            told.learn(id, &format!("kubepods/{id}"), Some(set("0-7")));
        }
        let target = |_: &str| Some(set("0-5"));
        let first = told.next(2, target);
        assert_eq!(ids(&first), ["a", "b"]);
        told.answered(&first, &["b".to_string()]);
        let second = told.next(2, target);
        assert_eq!(ids(&second), ["b", "c"], "b failed, c waited");
        told.answered(&second, &[]);
        assert!(told.next(2, target).is_empty());
    }

    #[test]
    fn a_forgotten_container_is_not_updated_and_nothing_goes_unless_touched() {
        let mut told = Told::default();
        told.learn("a", "kubepods/a", Some(set("0-7")));
        let same = |_: &str| Some(set("0-7"));
        assert!(told.next(16, same).is_empty());
        // The pool changed, but nothing said so.
        assert!(told.next(16, |_: &str| Some(set("0-3"))).is_empty());
        told.touch();
        told.forget("a");
        assert!(told.next(16, |_: &str| Some(set("0-3"))).is_empty());
        assert!(told.is_empty());
    }
}
