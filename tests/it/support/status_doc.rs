//! Synthetic `api::Status` documents, for the CLI's renderers and a fake
//! server: a regular machine (`topology::synthetic::Shape`), reserved CPUs,
//! and workloads whose CPUs the real allocator plans, as the daemon would.

use pinctl::alloc::{self, Options};
use pinctl::api::{self, Source};
use pinctl::topology::Topology;
use pinctl::topology::synthetic::Shape;

/// The names and CPU lists of the fake trees, so that documents and trees
/// agree.
pub use super::fake_cgroup::{container_id, set, uid};

/// 1 socket, 1 NUMA node, 8 cores, 2 threads: 16 CPUs (core c = {c, c+8}).
pub const SHAPE_16: Shape = Shape {
    sockets: 1,
    numa_per_socket: 1,
    l3_per_numa: 1,
    cores_per_l3: 8,
    threads_per_core: 2,
};

/// 2 sockets × 2 NUMA nodes × 2 L3 groups × 16 cores × 2 threads: 256 CPUs
/// (core c = {c, c+128}).
pub const SHAPE_256: Shape = Shape {
    sockets: 2,
    numa_per_socket: 2,
    l3_per_numa: 2,
    cores_per_l3: 16,
    threads_per_core: 2,
};

/// A workload to plan: key, cgroup, CPUs requested and source.
#[derive(Debug, Clone)]
pub struct Ask {
    pub key: String,
    pub cgroup: String,
    pub cpus: usize,
    pub source: Source,
}

/// A Guaranteed pod's container under the systemd driver.
pub fn pod(n: u32, name: &str, cpus: usize) -> Ask {
    let uid = uid(n);
    Ask {
        key: format!("pod:{uid}/{name}"),
        cgroup: format!(
            "kubepods.slice/kubepods-pod{}.slice/cri-containerd-{}.scope",
            uid.replace('-', "_"),
            container_id(n)
        ),
        cpus,
        source: Source::Kubelet,
    }
}

/// A cgroup matched by a rule.
pub fn job(n: u32, cpus: usize) -> Ask {
    Ask {
        key: format!("cgroup:hpc.slice/job-{n}.scope"),
        cgroup: format!("hpc.slice/job-{n}.scope"),
        cpus,
        source: Source::Rule {
            pattern: "hpc.slice/job-*.scope".into(),
            line: 42,
        },
    }
}

/// The status of a daemon on `shape` with `reserved` CPUs that planned
/// `asks` in order; a request that does not fit is pending.
pub fn status(shape: Shape, reserved: &str, asks: &[Ask]) -> api::Status {
    let topo = shape.build();
    status_on(&topo, reserved, asks)
}

pub fn status_on(topo: &Topology, reserved: &str, asks: &[Ask]) -> api::Status {
    let reserved = set(reserved);
    let opts = Options {
        reserved: reserved.clone(),
        ..Options::default()
    };
    let mut free = topo.online().clone();
    let mut workloads = Vec::new();
    for a in asks {
        let planned = alloc::allocate(topo, &free, a.cpus, &opts);
        let (cpus, pending, alignment) = match planned {
            Ok(cpus) => {
                free = free.difference(&cpus);
                let alignment = api::Alignment::of(topo, &cpus);
                (Some(cpus), None, Some(alignment))
            }
            Err(e) => (
                None,
                Some(api::Pending {
                    requested: a.cpus,
                    available: free.difference(&reserved).len(),
                    reason: e.to_string(),
                }),
                None,
            ),
        };
        workloads.push(api::Workload {
            key: a.key.clone(),
            requested: a.cpus,
            source: a.source.clone(),
            numa: Vec::new(),
            cgroups: vec![a.cgroup.clone()],
            cpus,
            pending,
            alignment,
            resize: None,
            near: None,
        });
    }
    api::Status {
        schema: api::SCHEMA,
        daemon: api::Daemon {
            version: "0.1.0".into(),
            pid: 4242,
            started: 1_763_700_000,
            ready: true,
            summary: "test".into(),
        },
        health: api::Health {
            state: "healthy".into(),
            reasons: Vec::new(),
        },
        hierarchy: "v2".into(),
        hybrid: false,
        topology: topo.to_file(),
        online: topo.online().clone(),
        reserved,
        shared_pool: free,
        strict_reservation: None,
        workloads,
        failing: Vec::new(),
        watchdog: api::Watchdog::default(),
        quotas_lifted: Vec::new(),
        interrupts: None,
        power: None,
        housekeeping: None,
        partitions: None,
        slurm: api::Slurm::default(),
        runs: api::Runs::default(),
        nri: None,
        other_owners: Vec::new(),
        counters: api::Counters {
            reconciles: 12,
            last_reconcile_ms: 3,
            writes: 40,
            write_errors: 0,
            repairs: 0,
            cgroups: 57,
        },
        config: api::RunningConfig::default(),
    }
}

/// The `housekeeping` section of a daemon that keeps `doc`'s exclusive CPUs
/// clear: two workqueue masks, three kernel threads and an RPS and an XPS
/// mask moved; on each exclusive CPU its per-CPU threads, and managed
/// interrupts on the first two (one on the first, three on the second); the
/// node's boot line.
pub fn housekeeping(doc: &api::Status) -> api::Housekeeping {
    let away = doc
        .workloads
        .iter()
        .filter_map(|w| w.cpus.as_ref())
        .fold(pinctl::CpuSet::new(), |all, c| all.union(c));
    let rest = doc.online.difference(&away);
    let moved = |what: &str| api::Moved {
        what: what.into(),
        was: doc.online.clone(),
        set: rest.clone(),
    };
    let stays = away
        .iter()
        .enumerate()
        .map(|(i, cpu)| api::Stays {
            cpu,
            threads: ["cpuhp", "migration", "ksoftirqd"]
                .iter()
                .map(|t| format!("{t}/{cpu}"))
                .chain([format!("kworker/{cpu}:0H"), format!("kworker/{cpu}:1")])
                .collect(),
            interrupts: match i {
                0 => vec![format!("{} nvme0q{cpu}", 40 + cpu)],
                1 => vec![
                    format!("{} nvme0q{cpu}", 40 + cpu),
                    format!("{} virtio0-input.{cpu}", 60 + cpu),
                    format!("{} virtio0-output.{cpu}", 80 + cpu),
                ],
                _ => Vec::new(),
            },
        })
        .collect();
    api::Housekeeping {
        on: true,
        away: away.clone(),
        moved: [
            "workqueue cpumask",
            "workqueue writeback",
            "kthread 2 (kthreadd)",
            "kthread 15 (rcu_preempt)",
            "kthread 61 (kcompactd0)",
            "rps eth0 rx-0",
            "xps eth0 tx-0",
        ]
        .into_iter()
        .map(moved)
        .collect(),
        failed: Vec::new(),
        stays,
        boot: pinctl::bootline::boot_params(&away, &doc.online),
        originals: 7,
        error: None,
    }
}

/// The line of `pinctl status` (rendered online, no colours) that begins
/// with `field:`, and the lines below it up to the next field; panics with
/// the whole text when there is none.
pub fn status_lines(status: &api::Status, field: &str) -> String {
    let text = pinctl::cli::status::render(
        status,
        pinctl::cli::status::Mode::Online,
        pinctl::cli::style::Style::OFF,
        0,
    );
    let head = format!("{field}:");
    let mut lines = text.lines().skip_while(|l| !l.starts_with(&head));
    let first = lines
        .next()
        .unwrap_or_else(|| panic!("no {head} line in:\n{text}"));
    std::iter::once(first)
        .chain(lines.take_while(|l| l.starts_with(' ')))
        .collect::<Vec<_>>()
        .join("\n")
}
