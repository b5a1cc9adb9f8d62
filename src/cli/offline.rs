//! `--offline`: an [`api::Status`] built without the daemon, from its state
//! file, the live cgroup tree and sysfs, for `pinctl status` and `pinctl
//! verify` when `pinctld` is not running.
//!
//! What it knows: the topology (sysfs), the hierarchy, the reserved CPUs (the
//! configuration), which cgroups ask for exclusive CPUs now and on whose word
//! (each cgroup of the watched subtrees read and decided exactly as the daemon
//! does: [`cgroup::observe`], [`layout::classify`], [`intent::decide`]), and the
//! CPUs the daemon last assigned to each workload (the state file). A workload
//! that asks but has no assignment in the state file is shown as pending; an
//! assignment whose cgroups no longer ask is a note. What it cannot know (the
//! daemon's health, counters, failing writes, the watchdog's findings) is left
//! empty and the health is `"unknown"`.
//!
//! It reads with blocking `std::fs` calls on the CLI's own thread: a cgroup
//! read that hangs (a task in D state) hangs this command, never the daemon.
//! It never writes anything, and never moves the state file
//! ([`StateFile::peek`]).

use std::collections::BTreeMap;

use anyhow::{Context, Result};

use crate::api;
use crate::cgroup::{self, Hierarchy, Rel, layout};
use crate::config::Config;
use crate::cpuset::CpuSet;
use crate::engine::SavedState;
use crate::intent::{self, Intent};
use crate::io::RealFs;
use crate::state::{Peeked, StateFile};
use crate::sysfs::Sysfs;

/// The health state of an offline document: nobody judged it.
pub const UNKNOWN: &str = "unknown";

/// An offline status and what the reader should know about it.
#[derive(Debug, Clone)]
pub struct OfflineStatus {
    pub status: api::Status,
    /// One line each: where it came from and what it could not tell.
    pub notes: Vec<String>,
}

/// One cgroup that asks for exclusive CPUs, found in the live tree.
#[derive(Debug, Clone)]
struct Asking {
    key: String,
    intent: Intent,
    rel: String,
}

/// Builds the offline status for `config` (its `cgroup_root`, `sysfs_root`,
/// `state_file`, reserved CPUs, watched subtrees and rules).
pub fn build(config: &Config) -> Result<OfflineStatus> {
    let mut notes = Vec::new();
    let topo = Sysfs::new(&config.sysfs_root).topology().with_context(|| {
        format!(
            "cannot read the CPU topology from {}",
            config.sysfs_root.display()
        )
    })?;
    let fs = RealFs;
    let hier =
        Hierarchy::detect(&fs, &config.cgroup_root, config.hierarchy).with_context(|| {
            format!(
                "cannot use the cgroup tree at {}",
                config.cgroup_root.display()
            )
        })?;
    let online = topo.online().clone();
    let reserved = {
        let r = config.reserved_cpus.resolve(&topo).intersection(&online);
        if r.is_empty() {
            online.first().into_iter().collect()
        } else {
            r
        }
    };

    let state_file = StateFile::new(&config.state_file);
    let saved: SavedState = match state_file
        .peek()
        .with_context(|| format!("cannot read the state file {}", config.state_file.display()))?
    {
        Peeked::Fresh(s) => {
            notes.push(format!(
                "CPUs as last saved in {}; requests as the live tree at {} asks now",
                config.state_file.display(),
                config.cgroup_root.display()
            ));
            s
        }
        Peeked::Missing => {
            notes.push(format!(
                "no state file at {}: no workload's CPUs are known",
                config.state_file.display()
            ));
            SavedState::default()
        }
        Peeked::Invalid { reason } => {
            notes.push(format!(
                "the state file {} is unusable ({reason}): no workload's CPUs are known",
                config.state_file.display()
            ));
            SavedState::default()
        }
    };

    let (asking, problems) = scan(&fs, &hier, config);
    notes.extend(problems);

    // Group the asking cgroups into workloads, in key order.
    let mut by_key: BTreeMap<String, Vec<Asking>> = BTreeMap::new();
    for a in asking {
        by_key.entry(a.key.clone()).or_default().push(a);
    }
    let assigned: CpuSet = by_key
        .keys()
        .filter_map(|k| saved.assignments.get(k))
        .fold(CpuSet::new(), |acc, a| acc.union(&a.cpus));
    let free = online.difference(&assigned).difference(&reserved).len();
    let mut workloads = Vec::new();
    for (key, cgroups) in &by_key {
        let first = &cgroups[0];
        let cpus = saved.assignments.get(key).map(|a| a.cpus.clone());
        let pending = match &cpus {
            Some(_) => None,
            None => Some(api::Pending {
                requested: first.intent.cpus,
                available: free,
                reason: "not in the state file: new since the daemon stopped, or waiting for CPUs"
                    .to_string(),
            }),
        };
        workloads.push(api::Workload {
            key: key.clone(),
            requested: first.intent.cpus,
            source: api::Source::from(&first.intent.source),
            numa: first.intent.numa.clone(),
            cgroups: cgroups.iter().map(|a| a.rel.clone()).collect(),
            alignment: cpus.as_ref().map(|c| api::Alignment::of(&topo, c)),
            cpus,
            pending,
        });
    }
    for (key, a) in &saved.assignments {
        if !by_key.contains_key(key) {
            notes.push(format!(
                "{key} (CPUs {}) is in the state file but none of its cgroups asks for CPUs now",
                a.cpus
            ));
        }
    }
    let shared_pool = online.difference(&assigned);
    let status = api::Status {
        schema: api::SCHEMA,
        daemon: api::Daemon {
            version: env!("CARGO_PKG_VERSION").to_string(),
            pid: 0,
            started: 0,
            ready: false,
            summary: format!(
                "offline: built by pinctl at {} from {} and {}",
                api::unix_secs(),
                config.state_file.display(),
                config.cgroup_root.display()
            ),
        },
        health: api::Health {
            state: UNKNOWN.to_string(),
            reasons: vec!["offline: no daemon judged it".to_string()],
        },
        hierarchy: match hier.version {
            cgroup::Version::V1 => "v1",
            cgroup::Version::V2 => "v2",
        }
        .to_string(),
        hybrid: hier.hybrid,
        topology: topo.to_file(),
        online,
        reserved,
        shared_pool,
        workloads,
        failing: Vec::new(),
        watchdog: api::Watchdog::default(),
        counters: api::Counters::default(),
        config: api::RunningConfig::of(config),
    };
    Ok(OfflineStatus { status, notes })
}

/// Reads every cgroup of the watched subtrees (`managed` and the rules'
/// roots) and decides each one's intent as the daemon does. A cgroup below
/// one that asks is part of that workload, not a workload of its own, so the
/// walk does not look for intents there. Returns the asking cgroups and one
/// note per cgroup that could not be read or whose request is malformed.
fn scan(fs: &RealFs, hier: &Hierarchy, config: &Config) -> (Vec<Asking>, Vec<String>) {
    let mut asking = Vec::new();
    let mut problems = Vec::new();
    let mut stack: Vec<String> = config.watch_roots();
    stack.sort();
    stack.dedup();
    let mut seen = std::collections::BTreeSet::new();
    while let Some(rel) = stack.pop() {
        if !seen.insert(rel.clone()) {
            continue;
        }
        let kind = layout::classify(&rel);
        let reads = cgroup::Reads {
            mems: false,
            limit: intent::needs_limit(&kind, config),
        };
        let rel_arc: Rel = rel.as_str().into();
        let Some(obs) = cgroup::observe(fs, hier, &rel_arc, reads) else {
            continue;
        };
        if let Some(e) = &obs.error {
            problems.push(format!("cannot read cgroup {rel}: {e}"));
        }
        let bundle = match &kind {
            layout::Kind::Container { id, .. } => intent::find_bundle(fs, &config.bundle_dirs, id),
            _ => None,
        };
        let (decided, problem) = intent::decide(&kind, &obs, bundle.as_ref(), config);
        if let Some(p) = problem {
            problems.push(format!("{rel}: {p}"));
        }
        if let Some(i) = decided.filter(Intent::wants) {
            asking.push(Asking {
                key: intent::workload_key(&kind, &rel, bundle.as_ref()),
                intent: i,
                rel,
            });
            continue;
        }
        for child in obs.children.iter().rev() {
            stack.push(cgroup::child(&rel, child));
        }
    }
    asking.sort_by(|a, b| a.rel.cmp(&b.rel));
    (asking, problems)
}
