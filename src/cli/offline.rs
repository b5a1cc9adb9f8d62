//! `--offline`: an [`api::Status`] built without the daemon, for `pinctl
//! status` and `pinctl verify` when `pinctld` is not running.
//!
//! - From the state file (the CPUs last assigned), the live tree (what asks
//!   now, by the daemon's own [`intent::read`]) and sysfs. What only the
//!   daemon knows (health, counters, failures) is left empty: health is
//!   `"unknown"` (`docs/src/cli.md`, "pinctl status").
//! - Blocking reads ([`RealFs`]) on the CLI's thread: a hang hangs this
//!   command, never the daemon.
//! - Must never write anything, nor move the state file ([`StateFile::peek`]).

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context, Result};

use crate::api;
use crate::cgroup::{self, Hierarchy, Rel, Scope};
use crate::config::{Config, Isolation};
use crate::cpuset::CpuSet;
use crate::engine::SavedState;
use crate::intent::{self, Intent};
use crate::io::{Fs, RealFs};
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
    let reserved = reserved(config, &topo);

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
            resize: None,
            near: api::Near::of(
                &topo,
                &first.intent.devices,
                first
                    .intent
                    .device_alignment
                    .unwrap_or(config.device_alignment),
                cpus.as_ref(),
            ),
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
    let summary = format!(
        "offline: built by pinctl at {} from {} and {}",
        api::unix_secs(),
        config.state_file.display(),
        config.cgroup_root.display()
    );
    let health = api::Health {
        state: UNKNOWN.to_string(),
        reasons: vec!["offline: no daemon judged it".to_string()],
    };
    // What the state file says was steered and made: the kernel's files
    // are the truth, `pinctl verify` and the daemon read them.
    let exclusive = saved
        .assignments
        .values()
        .fold(CpuSet::new(), |acc, a| acc.union(&a.cpus));
    let interrupts = (config.irq_affinity || !saved.irqs.is_empty()).then(|| api::Interrupts {
        on: config.irq_affinity,
        away: exclusive,
        steered: saved
            .irqs
            .iter()
            .map(|(irq, s)| api::SteeredIrq {
                irq: irq.clone(),
                was: s.was.clone(),
                now: s.set.clone(),
            })
            .collect(),
        ..api::Interrupts::default()
    });
    let partitions = (config.isolation == Isolation::Partition
        || !saved.partitions.roots.is_empty())
    .then(|| api::Partitions {
        on: config.isolation == Isolation::Partition,
        isolated: saved
            .partitions
            .roots
            .iter()
            .map(|(rel, cpus)| api::Partition {
                cgroup: rel.to_string(),
                cpus: cpus.clone(),
            })
            .collect(),
        ..api::Partitions::default()
    });
    let status = api::Status {
        strict_reservation: config
            .strict_reservation
            .then(|| api::Strict::of(&online.difference(&assigned), &reserved)),
        reserved,
        shared_pool: online.difference(&assigned),
        workloads,
        interrupts,
        partitions,
        // The job cores themselves are read by `verify` from the live
        // tree; the switch says whether they are kept quiet.
        slurm: api::Slurm {
            housekeeping: config.slurm.housekeeping,
            ..api::Slurm::default()
        },
        ..api::Status::new(
            api::Daemon::new(0, 0, false, summary),
            health,
            &hier,
            &topo,
            api::RunningConfig::of(config),
        )
    };
    Ok(OfflineStatus { status, notes })
}

/// The reserved CPUs the daemon would hold with `config` on `topo`: the
/// configured ones that are online, or the lowest online CPU when none is.
pub fn reserved(config: &Config, topo: &crate::topology::Topology) -> CpuSet {
    let online = topo.online();
    let r = config.reserved_cpus.resolve(topo).intersection(online);
    if r.is_empty() {
        online.first().into_iter().collect()
    } else {
        r
    }
}

/// Reads every cgroup of the daemon's subtrees ([`Scope::roots`]: managed,
/// `shared_cgroups` and the rules' roots) with the daemon's own read of a
/// cgroup, [`intent::read`], and hands each reading to `visit`. A cgroup
/// below one that asks is part of that workload, not a workload of its
/// own, so the walk does not go there. Returns one note per cgroup that
/// could not be read or whose request is malformed.
pub fn walk(
    fs: &dyn Fs,
    hier: &Hierarchy,
    config: &Config,
    mut visit: impl FnMut(&Rel, intent::Reading),
) -> Vec<String> {
    let mut problems = Vec::new();
    let mut stack: Vec<Rel> = Scope::of(config).roots().to_vec();
    let mut seen = BTreeSet::new();
    while let Some(rel) = stack.pop() {
        if !seen.insert(rel.clone()) {
            continue;
        }
        let Some(reading) = intent::read(fs, hier, config, &rel, None, intent::Known::default())
        else {
            continue;
        };
        if let Some(e) = &reading.obs.error {
            problems.push(format!("cannot read cgroup {rel}: {e}"));
        }
        if let Some(p) = &reading.problem {
            problems.push(format!("{rel}: {p}"));
        }
        if !reading.intent.as_ref().is_some_and(Intent::wants) {
            for child in reading.obs.children.iter().rev() {
                stack.push(cgroup::child(&rel, child).into());
            }
        }
        visit(&rel, reading);
    }
    problems
}

/// The cgroups of the daemon's subtrees that ask for CPUs ([`walk`]), in
/// path order, and the notes of the walk.
fn scan(fs: &dyn Fs, hier: &Hierarchy, config: &Config) -> (Vec<Asking>, Vec<String>) {
    let mut asking = Vec::new();
    let problems = walk(fs, hier, config, |rel, reading| {
        if let Some(intent) = reading.intent.filter(Intent::wants) {
            asking.push(Asking {
                key: reading.key,
                intent,
                rel: rel.to_string(),
            });
        }
    });
    asking.sort_by(|a, b| a.rel.cmp(&b.rel));
    (asking, problems)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;
    use std::path::{Path, PathBuf};

    /// A v2 cgroup in a fake tree, owned by whoever runs the test (trusted
    /// like root: [`intent::trusted`]) and writable by nobody else.
    fn cgroup(root: &Path, rel: &str, effective: &str) -> PathBuf {
        let dir = root.join(rel);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(dir.join("cpuset.cpus"), "").unwrap();
        std::fs::write(dir.join("cpuset.cpus.effective"), effective).unwrap();
        dir
    }

    /// A machine of 4 CPUs, one core each, and a v2 tree in which a service
    /// under `shared_cgroups` asks for 2 CPUs by xattr; no state file.
    fn machine(tmp: &Path) -> Config {
        let cpu = tmp.join("sys/devices/system/cpu");
        std::fs::create_dir_all(&cpu).unwrap();
        std::fs::write(cpu.join("online"), "0-3\n").unwrap();
        for n in 0..4 {
            let topo = cpu.join(format!("cpu{n}/topology"));
            std::fs::create_dir_all(&topo).unwrap();
            std::fs::write(topo.join("physical_package_id"), "0\n").unwrap();
            std::fs::write(topo.join("core_id"), format!("{n}\n")).unwrap();
        }
        let root = tmp.join("cgroup");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("cgroup.controllers"), "cpuset cpu\n").unwrap();
        cgroup(&root, "kubepods.slice", "0-3");
        cgroup(&root, "system.slice", "0-3");
        let job = cgroup(&root, "system.slice/batch.service", "0-3");
        xattr::set(&job, cgroup::XATTR_CPUS, b"2").unwrap();
        Config {
            cgroup_root: root,
            sysfs_root: tmp.join("sys"),
            state_file: tmp.join("state.json"),
            managed: vec!["kubepods.slice".into()],
            shared_cgroups: vec!["system.slice".into()],
            ..Config::default()
        }
    }

    /// The daemon scans `shared_cgroups` as well as the managed subtrees and
    /// the rules' roots, and honours a request found there; `--offline`
    /// once scanned only the latter two and missed it.
    #[test]
    fn an_xattr_request_under_shared_cgroups_is_seen_offline() {
        let tmp = tempfile::tempdir().unwrap();
        let config = machine(tmp.path());
        let hier = Hierarchy::detect(&RealFs, &config.cgroup_root, config.hierarchy).unwrap();
        let (asking, problems) = scan(&RealFs, &hier, &config);
        assert_eq!(problems, Vec::<String>::new());
        let found: Vec<(&str, &str, usize)> = asking
            .iter()
            .map(|a| (a.key.as_str(), a.rel.as_str(), a.intent.cpus))
            .collect();
        assert_eq!(
            found,
            [(
                "cgroup:system.slice/batch.service",
                "system.slice/batch.service",
                2
            )]
        );
    }

    #[test]
    fn without_a_state_file_a_request_is_pending_and_nobody_judged_the_health() {
        let tmp = tempfile::tempdir().unwrap();
        let config = machine(tmp.path());
        let OfflineStatus { status, notes } = build(&config).unwrap();
        assert_eq!(status.hierarchy, "v2");
        assert_eq!(
            (status.online.to_string(), status.reserved.to_string()),
            ("0-3".into(), "0".into())
        );
        assert_eq!(status.shared_pool, status.online, "nothing is assigned");
        assert_eq!(status.health.state, UNKNOWN);
        assert_eq!((status.daemon.pid, status.daemon.ready), (0, false));
        assert!(
            status
                .daemon
                .summary
                .starts_with("offline: built by pinctl at ")
        );
        assert_eq!(status.config, api::RunningConfig::of(&config));
        let [w] = status.workloads.as_slice() else {
            panic!("{:?}", status.workloads);
        };
        assert_eq!(w.cgroups, ["system.slice/batch.service"]);
        assert_eq!((w.requested, w.cpus.as_ref()), (2, None));
        assert_eq!(w.pending.as_ref().map(|p| p.available), Some(3));
        assert!(
            notes.iter().any(|n| n.starts_with("no state file at ")),
            "{notes:?}"
        );
    }

    /// `strict_reservation`: the pods' pool, as the daemon works it out
    /// (the shared pool without the reserved CPUs).
    #[test]
    fn strict_reservation_shows_the_pods_pool_as_the_daemon_does() {
        let tmp = tempfile::tempdir().unwrap();
        let off = build(&machine(tmp.path())).unwrap().status;
        assert_eq!(off.strict_reservation, None);
        let config = Config {
            strict_reservation: true,
            ..machine(tmp.path())
        };
        let status = build(&config).unwrap().status;
        assert_eq!(
            status.strict_reservation,
            Some(api::Strict {
                pool: "1-3".parse().unwrap(),
                fallback: false
            })
        );
    }

    /// What the state file says was steered and made is shown after a stop
    /// (the daemon leaves both in place).
    #[test]
    fn steered_interrupts_and_partitions_come_from_the_state_file() {
        let tmp = tempfile::tempdir().unwrap();
        let config = Config {
            irq_affinity: true,
            isolation: Isolation::Partition,
            ..machine(tmp.path())
        };
        let set = |s: &str| s.parse::<CpuSet>().unwrap();
        let mut saved = SavedState {
            online: set("0-3"),
            ..SavedState::default()
        };
        saved.irqs.insert(
            "24".into(),
            crate::irq::Steered {
                was: set("0-3"),
                set: set("0-1"),
            },
        );
        saved
            .partitions
            .roots
            .insert("system.slice/batch.service".into(), set("2-3"));
        StateFile::new(&config.state_file).save(&saved).unwrap();
        let status = build(&config).unwrap().status;
        let irqs = status.interrupts.expect("interrupts");
        assert!(irqs.on);
        assert_eq!(
            irqs.steered,
            [api::SteeredIrq {
                irq: "24".into(),
                was: set("0-3"),
                now: set("0-1"),
            }]
        );
        let parts = status.partitions.expect("partitions");
        assert!(parts.on);
        assert_eq!(
            parts.isolated,
            [api::Partition {
                cgroup: "system.slice/batch.service".into(),
                cpus: set("2-3"),
            }]
        );
    }
}
