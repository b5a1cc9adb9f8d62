//! Prometheus metrics: the counters the loop updates as things happen, and
//! the gauges set from each status snapshot at a scrape ([`Metrics::set_from`]).
//!
//! It never reads a file: every figure comes from the loop or the snapshot.
//! Label values are other people's text (a workload key is a cgroup path),
//! so each is a [`LabelValue`], escaped when encoded.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::api;

/// A label value, escaped as the OpenMetrics and Prometheus text formats
/// require when encoded. prometheus-client writes `String` label values raw,
/// and ours carry text other people choose (a workload key is a cgroup's
/// path or a pod's container name): a cgroup named `a",evil="1` would forge a
/// label, and one ending in `\` would break the whole scrape. Every label
/// struct holds its values as this type, so none can be written raw.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct LabelValue(String);

impl LabelValue {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<String> for LabelValue {
    fn from(s: String) -> Self {
        LabelValue(s)
    }
}

impl From<&str> for LabelValue {
    fn from(s: &str) -> Self {
        LabelValue(s.to_string())
    }
}

impl EncodeLabelValue for LabelValue {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
        // Only the text encoder is compiled in (prometheus-client's
        // `protobuf` feature is off), so this is the text format's escaping.
        escape_label_value(&self.0, encoder)
    }
}

/// Writes `value` with the three escapes of the text formats' label values
/// (`\\`, `\"`, `\n`). Nothing else is escaped: the formats define no
/// other escape, and any other character, control characters included, is
/// legal as it is.
fn escape_label_value(value: &str, out: &mut impl std::fmt::Write) -> std::fmt::Result {
    let mut rest = value;
    while let Some(at) = rest.find(['\\', '"', '\n']) {
        out.write_str(&rest[..at])?;
        // The three are ASCII: one byte each.
        out.write_str(match rest.as_bytes()[at] {
            b'\\' => "\\\\",
            b'"' => "\\\"",
            _ => "\\n",
        })?;
        rest = &rest[at + 1..];
    }
    out.write_str(rest)
}

/// Labels of the per-workload gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WorkloadLabel {
    pub workload: LabelValue,
}

/// Labels of the per-CPU gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CpuLabel {
    pub cpu: LabelValue,
    /// `exclusive`, `shared`, `reserved` or `offline`.
    pub pool: LabelValue,
}

/// Labels of the health gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabel {
    pub state: LabelValue,
}

/// Labels of the counters by outcome.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    /// `ok` or `failed`; a resize's `made` or `pending`.
    pub result: LabelValue,
}

/// Labels of the per-CPU interrupt gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ExclusiveCpuLabel {
    pub cpu: LabelValue,
}

/// Labels of the per-CPU softirq gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SoftirqLabel {
    pub cpu: LabelValue,
    /// The row of `/proc/softirqs`: `TIMER`, `NET_RX`, `RCU`, ...
    pub kind: LabelValue,
}

/// Labels of the node-wide alignment gauges.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BoundaryLabel {
    /// `numa_node`, `l3_cache` or `physical_cpu` (a whole core).
    pub boundary: LabelValue,
}

/// The daemon's metrics. Counters and histograms are updated by the loop as
/// things happen; gauges are set from each snapshot.
pub struct Metrics {
    registry: Registry,
    pub exclusive_cpus: Family<WorkloadLabel, Gauge>,
    pub shared_pool: Gauge,
    pub cpu_pool: Family<CpuLabel, Gauge>,
    pub pending: Gauge,
    /// Pinned workloads whose resize waits (they keep their CPUs).
    pub resizes_pending: Gauge,
    /// Resizes made or found waiting, by result (`made`, `pending`).
    pub resizes: Family<ResultLabel, Counter>,
    /// Per workload: the NUMA nodes, L3 groups, whole cores and shared
    /// cores its CPUs span.
    pub numa_nodes: Family<WorkloadLabel, Gauge>,
    pub l3_groups: Family<WorkloadLabel, Gauge>,
    pub whole_cores: Family<WorkloadLabel, Gauge>,
    pub shared_cores: Family<WorkloadLabel, Gauge>,
    /// Per pinned workload with devices placed: 1 when every CPU of it is
    /// on its devices' NUMA nodes, else 0.
    pub device_aligned: Family<WorkloadLabel, Gauge>,
    /// Pinned workloads that sit within the fewest groups their size allows
    /// (whole cores for `physical_cpu`), and those that do not, by boundary.
    pub aligned: Family<BoundaryLabel, Gauge>,
    pub split: Family<BoundaryLabel, Gauge>,
    pub reconcile_seconds: Histogram,
    pub event_to_pin_seconds: Histogram,
    /// From NRI's `CreateContainer` reaching the loop to its answer.
    pub nri_create_seconds: Histogram,
    /// Containers made with other CPUs than pinctld answered over NRI.
    pub nri_disagreements: Counter,
    /// Containers whose CPUs the runtime was asked to update, by result.
    pub nri_updates: Family<ResultLabel, Counter>,
    pub writes: Counter,
    pub write_errors: Counter,
    pub repairs: Counter,
    pub hung_paths: Gauge,
    pub dstate_tasks: Gauge,
    pub frozen_cgroups: Gauge,
    pub health: Family<StateLabel, Gauge>,
    pub config_reloads: Family<ResultLabel, Counter>,
    /// Units whose `AllowedCPUs=` systemd was told, by result.
    pub systemd_told: Family<ResultLabel, Counter>,
    /// How long new pins waited for systemd to hold the slices above them.
    pub systemd_wait_seconds: Histogram,
    /// Cgroups whose CFS quota is lifted now (`unthrottle_exclusive`).
    pub quotas_lifted: Gauge,
    /// Interrupts kept off exclusive CPUs now (`irq_affinity`).
    pub irqs_steered: Gauge,
    /// Interrupts whose affinity the kernel refused or could not be read.
    pub irqs_refused: Gauge,
    /// CPUs that hold a power class now (`[power]`).
    pub power_classes_applied: Gauge,
    /// Power writes refused by the kernel or that failed, and class
    /// values the planner refused (not supported, out of range, governor
    /// missing).
    pub power_writes_refused: Counter,
    /// Exclusive workloads' cgroups that are isolated partitions now.
    pub partitions_isolated: Gauge,
    /// Exclusive workloads whose partition could not be made or is invalid.
    pub partitions_failing: Gauge,
    pub state_save_failures: Counter,
    pub unwatched_cgroups: Gauge,
    /// Each exclusive CPU's interrupts since boot (every row of
    /// `/proc/interrupts`), as the last full round of checks read them.
    /// Gauges holding the kernel's running totals: prometheus-client's
    /// counters can only be increased, not set.
    pub exclusive_cpu_interrupts: Family<ExclusiveCpuLabel, Gauge>,
    /// Each exclusive CPU's softirqs since boot, by kind (`/proc/softirqs`).
    pub exclusive_cpu_softirqs: Family<SoftirqLabel, Gauge>,
    /// Connections to the socket open now.
    pub socket_connections: Gauge,
    /// Connections closed at once because [`crate::server::Limits::max_connections`] were
    /// open.
    pub socket_connections_refused: Counter,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("pinctl");
        let m = Metrics {
            registry: Registry::default(),
            exclusive_cpus: Family::default(),
            shared_pool: Gauge::default(),
            cpu_pool: Family::default(),
            pending: Gauge::default(),
            resizes_pending: Gauge::default(),
            resizes: Family::default(),
            numa_nodes: Family::default(),
            l3_groups: Family::default(),
            whole_cores: Family::default(),
            shared_cores: Family::default(),
            device_aligned: Family::default(),
            aligned: Family::default(),
            split: Family::default(),
            // 1 ms to ~65 s.
            reconcile_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 17)),
            // 100 µs to ~3 s.
            event_to_pin_seconds: Histogram::new(exponential_buckets(0.0001, 2.0, 16)),
            // 50 µs to ~1.6 s.
            nri_create_seconds: Histogram::new(exponential_buckets(0.00005, 2.0, 16)),
            nri_disagreements: Counter::default(),
            nri_updates: Family::default(),
            writes: Counter::default(),
            write_errors: Counter::default(),
            repairs: Counter::default(),
            hung_paths: Gauge::default(),
            dstate_tasks: Gauge::default(),
            frozen_cgroups: Gauge::default(),
            health: Family::default(),
            config_reloads: Family::default(),
            systemd_told: Family::default(),
            // 100 µs to ~6.5 s: read_timeout is 5 s by default.
            systemd_wait_seconds: Histogram::new(exponential_buckets(0.0001, 2.0, 17)),
            quotas_lifted: Gauge::default(),
            irqs_steered: Gauge::default(),
            irqs_refused: Gauge::default(),
            power_classes_applied: Gauge::default(),
            power_writes_refused: Counter::default(),
            partitions_isolated: Gauge::default(),
            partitions_failing: Gauge::default(),
            state_save_failures: Counter::default(),
            unwatched_cgroups: Gauge::default(),
            exclusive_cpu_interrupts: Family::default(),
            exclusive_cpu_softirqs: Family::default(),
            socket_connections: Gauge::default(),
            socket_connections_refused: Counter::default(),
        };
        registry.register(
            "state_save_failures",
            "Saves of the state file that failed",
            m.state_save_failures.clone(),
        );
        registry.register(
            "unwatched_cgroups",
            "Cgroups without an inotify watch (max_user_watches reached)",
            m.unwatched_cgroups.clone(),
        );
        registry.register(
            "workload_exclusive_cpus",
            "Exclusive CPUs held by each workload",
            m.exclusive_cpus.clone(),
        );
        registry.register(
            "shared_pool_cpus",
            "CPUs in the shared pool",
            m.shared_pool.clone(),
        );
        registry.register(
            "cpu_pool",
            "Which pool each CPU is in (1 for its pool)",
            m.cpu_pool.clone(),
        );
        registry.register(
            "pending_workloads",
            "Workloads waiting for exclusive CPUs",
            m.pending.clone(),
        );
        registry.register(
            "resizes_pending",
            "Pinned workloads whose resize waits; each keeps its CPUs",
            m.resizes_pending.clone(),
        );
        registry.register(
            "resizes",
            "Resizes made or found waiting, by result (made, pending)",
            m.resizes.clone(),
        );
        registry.register(
            "workload_numa_nodes",
            "NUMA nodes each pinned workload's CPUs span",
            m.numa_nodes.clone(),
        );
        registry.register(
            "workload_l3_groups",
            "L3 groups each pinned workload's CPUs span",
            m.l3_groups.clone(),
        );
        registry.register(
            "workload_whole_cores",
            "Physical cores each pinned workload holds whole",
            m.whole_cores.clone(),
        );
        registry.register(
            "workload_shared_cores",
            "Physical cores each pinned workload shares with other CPUs (0: SMT-aligned)",
            m.shared_cores.clone(),
        );
        registry.register(
            "workload_device_aligned",
            "1 when every CPU of a pinned workload is on its devices' NUMA nodes, else 0 (workloads with devices placed)",
            m.device_aligned.clone(),
        );
        registry.register(
            "workloads_aligned",
            "Pinned workloads within the fewest groups their size allows, by boundary (device: on their devices' NUMA nodes)",
            m.aligned.clone(),
        );
        registry.register(
            "workloads_split",
            "Pinned workloads over more groups than their size needs, by boundary (device: off their devices' NUMA nodes)",
            m.split.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Duration of reconciles: a part of the periodic reconcile, or the whole tree",
            m.reconcile_seconds.clone(),
        );
        registry.register(
            "event_to_pin_seconds",
            "From an inotify event to its cpuset writes done",
            m.event_to_pin_seconds.clone(),
        );
        registry.register(
            "nri_create_seconds",
            "From the runtime's NRI CreateContainer reaching the event loop to its answer",
            m.nri_create_seconds.clone(),
        );
        registry.register(
            "nri_disagreements",
            "Containers the runtime made with other CPUs than pinctld answered over NRI",
            m.nri_disagreements.clone(),
        );
        registry.register(
            "nri_updates",
            "Containers whose CPUs the runtime was asked to update over NRI (UpdateContainers), by result",
            m.nri_updates.clone(),
        );
        registry.register("cgroup_writes", "Cgroup file writes", m.writes.clone());
        registry.register(
            "cgroup_write_errors",
            "Cgroup file writes that failed",
            m.write_errors.clone(),
        );
        registry.register(
            "config_reloads",
            "Configuration reloads (SIGHUP), by result",
            m.config_reloads.clone(),
        );
        registry.register(
            "systemd_told",
            "Units (slices, scopes) whose AllowedCPUs= systemd was told, by result",
            m.systemd_told.clone(),
        );
        registry.register(
            "systemd_wait_seconds",
            "How long new pins waited for systemd to hold the sets of the slices above them (at most read_timeout)",
            m.systemd_wait_seconds.clone(),
        );
        registry.register(
            "quotas_lifted",
            "Cgroups whose CFS quota is lifted for an exclusive workload",
            m.quotas_lifted.clone(),
        );
        registry.register(
            "irqs_steered",
            "Interrupts moved off exclusive CPUs (irq_affinity)",
            m.irqs_steered.clone(),
        );
        registry.register(
            "irqs_refused",
            "Interrupts whose affinity could not be set (kernel-managed ones refuse)",
            m.irqs_refused.clone(),
        );
        registry.register(
            "power_classes_applied",
            "CPUs that hold a power class now ([power])",
            m.power_classes_applied.clone(),
        );
        registry.register(
            "power_writes_refused",
            "Power class values refused (by the planner or the kernel) or whose write failed",
            m.power_writes_refused.clone(),
        );
        registry.register(
            "partitions_isolated",
            "Exclusive workloads' cgroups made isolated partitions (isolation = \"partition\")",
            m.partitions_isolated.clone(),
        );
        registry.register(
            "partitions_failing",
            "Exclusive workloads whose isolated partition could not be made or is invalid",
            m.partitions_failing.clone(),
        );
        registry.register(
            "repairs",
            "Required cgroup paths made again",
            m.repairs.clone(),
        );
        registry.register(
            "hung_paths",
            "Paths whose I/O timed out and has not returned",
            m.hung_paths.clone(),
        );
        registry.register(
            "dstate_tasks",
            "Tasks of managed cgroups in D state past the threshold",
            m.dstate_tasks.clone(),
        );
        registry.register(
            "frozen_cgroups",
            "Workloads frozen past the threshold",
            m.frozen_cgroups.clone(),
        );
        registry.register(
            "health",
            "The daemon's health (1 for the current state)",
            m.health.clone(),
        );
        registry.register(
            "exclusive_cpu_interrupts",
            "Interrupts each exclusive CPU took since boot, all sources (the kernel's running total)",
            m.exclusive_cpu_interrupts.clone(),
        );
        registry.register(
            "exclusive_cpu_softirqs",
            "Softirqs each exclusive CPU ran since boot, by kind (the kernel's running total)",
            m.exclusive_cpu_softirqs.clone(),
        );
        registry.register(
            "socket_connections",
            "Connections to the status socket open now",
            m.socket_connections.clone(),
        );
        registry.register(
            "socket_connections_refused",
            "Connections to the status socket closed at once: the cap was reached",
            m.socket_connections_refused.clone(),
        );
        Metrics { registry, ..m }
    }

    /// Sets the gauges from a status document.
    pub fn set_from(&self, status: &api::Status) {
        self.set_workloads(&status.workloads);
        self.shared_pool.set(status.shared_pool.len() as i64);
        self.unwatched_cgroups
            .set(status.watchdog.unwatched_cgroups as i64);
        self.pending.set(
            status
                .workloads
                .iter()
                .filter(|w| w.pending.is_some())
                .count() as i64,
        );
        self.cpu_pool.clear();
        let exclusive: crate::cpuset::CpuSet = status
            .workloads
            .iter()
            .filter_map(|w| w.cpus.as_ref())
            .flat_map(|c| c.iter())
            .collect();
        for info in &status.topology.cpus {
            let pool = if exclusive.contains(info.cpu) {
                "exclusive"
            } else if status.reserved.contains(info.cpu) {
                "reserved"
            } else {
                "shared"
            };
            self.cpu_pool
                .get_or_create(&CpuLabel {
                    cpu: info.cpu.to_string().into(),
                    pool: pool.into(),
                })
                .set(1);
        }
        if let Some(offline) = &status.topology.offline {
            for cpu in offline {
                self.cpu_pool
                    .get_or_create(&CpuLabel {
                        cpu: cpu.to_string().into(),
                        pool: "offline".into(),
                    })
                    .set(1);
            }
        }
        self.dstate_tasks
            .set(status.watchdog.stuck_tasks.len() as i64);
        self.frozen_cgroups
            .set(status.watchdog.frozen.iter().filter(|f| !f.thawed).count() as i64);
        for state in ["healthy", "degraded", "failed"] {
            self.health
                .get_or_create(&StateLabel {
                    state: state.into(),
                })
                .set(i64::from(status.health.state == state));
        }
    }

    /// The per-workload gauges, and the node-wide counts of alignment and
    /// pending resizes.
    fn set_workloads(&self, workloads: &[api::Workload]) {
        let per_workload = [
            &self.exclusive_cpus,
            &self.numa_nodes,
            &self.l3_groups,
            &self.whole_cores,
            &self.shared_cores,
            &self.device_aligned,
        ];
        for family in per_workload {
            family.clear();
        }
        let mut counts = [
            ("numa_node", 0, 0),
            ("l3_cache", 0, 0),
            ("physical_cpu", 0, 0),
            ("device", 0, 0),
        ];
        for w in workloads {
            let Some(cpus) = &w.cpus else {
                continue;
            };
            let label = WorkloadLabel {
                workload: w.key.as_str().into(),
            };
            self.exclusive_cpus
                .get_or_create(&label)
                .set(cpus.len() as i64);
            if let Some(near) = w.near.as_ref().and_then(|n| n.aligned(Some(cpus))) {
                self.device_aligned
                    .get_or_create(&label)
                    .set(i64::from(near));
                let (_, yes, no) = &mut counts[3];
                *if near { yes } else { no } += 1;
            }
            let Some(a) = &w.alignment else {
                continue;
            };
            let values = [
                (&self.numa_nodes, a.numa_nodes.len()),
                (&self.l3_groups, a.l3_groups.len()),
                (&self.whole_cores, a.whole_core_count),
                (&self.shared_cores, a.shared_cores),
            ];
            for (family, value) in values {
                family.get_or_create(&label).set(value as i64);
            }
            let aligned = [a.numa_aligned, a.l3_aligned, a.shared_cores == 0];
            for ((_, yes, no), aligned) in counts[..3].iter_mut().zip(aligned) {
                *if aligned { yes } else { no } += 1;
            }
        }
        for (boundary, yes, no) in counts {
            let label = BoundaryLabel {
                boundary: boundary.into(),
            };
            self.aligned.get_or_create(&label).set(yes);
            self.split.get_or_create(&label).set(no);
        }
        self.resizes_pending
            .set(workloads.iter().filter(|w| w.resize.is_some()).count() as i64);
    }

    /// The OpenMetrics text.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sample: its metric name, labels and value.
    type Sample = (String, Vec<(String, String)>, f64);

    /// A strict parser of one OpenMetrics sample line,
    /// `name{key="value",...} number`: label values may hold only the three
    /// escapes the format defines, and a raw `"` ends them. `None` for
    /// anything else.
    fn parse_sample(line: &str) -> Option<Sample> {
        let name_end = line.find(['{', ' '])?;
        let (name, mut rest) = line.split_at(name_end);
        let mut labels = Vec::new();
        if let Some(body) = rest.strip_prefix('{') {
            let mut chars = body.char_indices().peekable();
            loop {
                // A key: [a-zA-Z_][a-zA-Z0-9_]*, then `="`.
                let start = chars.peek()?.0;
                let mut end = start;
                while let Some(&(i, c)) = chars.peek() {
                    if c.is_ascii_alphanumeric() || c == '_' {
                        end = i + 1;
                        chars.next();
                    } else {
                        break;
                    }
                }
                let key = &body[start..end];
                if key.is_empty() || key.starts_with(|c: char| c.is_ascii_digit()) {
                    return None;
                }
                if chars.next()?.1 != '=' || chars.next()?.1 != '"' {
                    return None;
                }
                let mut value = String::new();
                loop {
                    match chars.next()?.1 {
                        '"' => break,
                        '\\' => value.push(match chars.next()?.1 {
                            '\\' => '\\',
                            '"' => '"',
                            'n' => '\n',
                            _ => return None,
                        }),
                        '\n' => return None,
                        c => value.push(c),
                    }
                }
                labels.push((key.to_string(), value));
                match chars.next()?.1 {
                    ',' => continue,
                    '}' => {
                        rest = &body[chars.peek().map_or(body.len(), |&(i, _)| i)..];
                        break;
                    }
                    _ => return None,
                }
            }
        }
        let value = rest.strip_prefix(' ')?.parse().ok()?;
        Some((name.to_string(), labels, value))
    }

    #[test]
    fn hostile_workload_keys_neither_forge_labels_nor_break_the_scrape() {
        let hostile = [
            "cgroup:a\",evil=\"1",
            "cgroup:ends\\",
            "cgroup:line\nbreak",
            "cgroup:\\\"",
            "cgroup:\x1b[2J\r\x07\x00\u{9b}\x7f\t",
            "pod:\u{e9}t\u{e9}/\u{1F600}\u{202e}",
            "cgroup:\\n is not a newline",
            "cgroup:} 1\npinctl_health{state=\"failed\"} 1",
        ];
        let metrics = Metrics::new();
        for (i, key) in hostile.iter().enumerate() {
            metrics
                .exclusive_cpus
                .get_or_create(&WorkloadLabel {
                    workload: (*key).into(),
                })
                .set(i as i64 + 1);
        }
        let text = metrics.encode();
        assert!(text.ends_with("# EOF\n"), "{text}");
        let mut seen = Vec::new();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((name, labels, value)) = parse_sample(line) else {
                panic!("unparsable sample line {line:?} in:\n{text}");
            };
            if name == "pinctl_workload_exclusive_cpus" {
                let [(key, workload)] = labels.as_slice() else {
                    panic!("not exactly one label: {labels:?} in {line:?}");
                };
                assert_eq!(key, "workload", "{line:?}");
                let i = hostile.iter().position(|h| h == workload);
                assert_eq!(i.map(|i| i as f64 + 1.0), Some(value), "{line:?}");
                seen.push(workload.clone());
            } else {
                // Nothing was set but the workloads: only the histograms'
                // buckets carry a label, and the forged health line is not
                // there.
                assert_ne!(name, "pinctl_health", "{line:?}");
                assert!(
                    labels.iter().all(|(k, _)| k == "le"),
                    "a label on {name}: {line:?}"
                );
            }
        }
        seen.sort();
        let mut want: Vec<String> = hostile.iter().map(|h| h.to_string()).collect();
        want.sort();
        assert_eq!(seen, want, "each key once, exactly as it was:\n{text}");
    }

    /// The per-workload alignment gauges, the node-wide counts by boundary
    /// and the pending resizes, from what the status says.
    #[test]
    fn alignment_and_pending_resizes_are_gauges() {
        use crate::cpuset::CpuSet;
        use crate::topology::synthetic::Shape;
        let topo = Shape {
            sockets: 1,
            numa_per_socket: 2,
            l3_per_numa: 1,
            cores_per_l3: 4,
            threads_per_core: 2,
        }
        .build();
        let numa: Vec<&CpuSet> = topo.numa_nodes().values().collect();
        let core0: CpuSet = topo.cores()[0].cpus.iter().copied().collect();
        let split: CpuSet = [numa[0].iter().next(), numa[1].iter().next()]
            .into_iter()
            .flatten()
            .collect();
        let workload = |key: &str, cpus: Option<CpuSet>, resize: bool| api::Workload {
            key: key.into(),
            requested: 2,
            source: api::Source::Xattr,
            numa: vec![],
            cgroups: vec![],
            alignment: cpus.as_ref().map(|c| api::Alignment::of(&topo, c)),
            cpus,
            pending: None,
            resize: resize.then(|| api::Pending {
                requested: 1,
                available: 0,
                reason: "below the baseline".into(),
            }),
            near: None,
        };
        // One near its devices, one that could not be.
        let near = |cpus_near| api::Near {
            devices: Vec::new(),
            nodes: vec![0],
            alignment: "prefer".into(),
            cpus_near: Some(cpus_near),
        };
        let whole = api::Workload {
            near: Some(near(2)),
            ..workload("cgroup:whole", Some(core0), false)
        };
        let split = api::Workload {
            near: Some(near(1)),
            ..workload("cgroup:split", Some(split), true)
        };
        let metrics = Metrics::new();
        metrics.set_workloads(&[whole, split, workload("cgroup:waits", None, false)]);
        let text = metrics.encode();
        let mut samples: Vec<String> = text
            .lines()
            .filter(|l| {
                [
                    "pinctl_workload_",
                    "pinctl_workloads_",
                    "pinctl_resizes_pending",
                ]
                .iter()
                .any(|p| l.starts_with(p))
            })
            .map(str::to_string)
            .collect();
        samples.sort();
        let want = [
            r#"pinctl_resizes_pending 1"#,
            r#"pinctl_workload_device_aligned{workload="cgroup:split"} 0"#,
            r#"pinctl_workload_device_aligned{workload="cgroup:whole"} 1"#,
            r#"pinctl_workload_exclusive_cpus{workload="cgroup:split"} 2"#,
            r#"pinctl_workload_exclusive_cpus{workload="cgroup:whole"} 2"#,
            r#"pinctl_workload_l3_groups{workload="cgroup:split"} 2"#,
            r#"pinctl_workload_l3_groups{workload="cgroup:whole"} 1"#,
            r#"pinctl_workload_numa_nodes{workload="cgroup:split"} 2"#,
            r#"pinctl_workload_numa_nodes{workload="cgroup:whole"} 1"#,
            r#"pinctl_workload_shared_cores{workload="cgroup:split"} 2"#,
            r#"pinctl_workload_shared_cores{workload="cgroup:whole"} 0"#,
            r#"pinctl_workload_whole_cores{workload="cgroup:split"} 0"#,
            r#"pinctl_workload_whole_cores{workload="cgroup:whole"} 1"#,
            r#"pinctl_workloads_aligned{boundary="device"} 1"#,
            r#"pinctl_workloads_aligned{boundary="l3_cache"} 1"#,
            r#"pinctl_workloads_aligned{boundary="numa_node"} 1"#,
            r#"pinctl_workloads_aligned{boundary="physical_cpu"} 1"#,
            r#"pinctl_workloads_split{boundary="device"} 1"#,
            r#"pinctl_workloads_split{boundary="l3_cache"} 1"#,
            r#"pinctl_workloads_split{boundary="numa_node"} 1"#,
            r#"pinctl_workloads_split{boundary="physical_cpu"} 1"#,
        ];
        assert_eq!(samples, want, "{text}");
    }

    /// Every series name the daemon serves, with the suffixes Prometheus
    /// sees (`_total`, `_bucket`, `_sum`, `_count`).
    fn served_names() -> std::collections::BTreeSet<String> {
        // A family shows in the text once it has a sample.
        let m = Metrics::new();
        let workload = WorkloadLabel {
            workload: "w".into(),
        };
        let per_workload = [
            &m.exclusive_cpus,
            &m.numa_nodes,
            &m.l3_groups,
            &m.whole_cores,
            &m.shared_cores,
            &m.device_aligned,
        ];
        for family in per_workload {
            family.get_or_create(&workload).set(1);
        }
        let boundary = BoundaryLabel {
            boundary: "numa_node".into(),
        };
        m.aligned.get_or_create(&boundary).set(1);
        m.split.get_or_create(&boundary).set(1);
        let state = StateLabel {
            state: "healthy".into(),
        };
        m.health.get_or_create(&state).set(1);
        let cpu = CpuLabel {
            cpu: "0".into(),
            pool: "shared".into(),
        };
        m.cpu_pool.get_or_create(&cpu).set(1);
        m.exclusive_cpu_interrupts
            .get_or_create(&ExclusiveCpuLabel { cpu: "1".into() })
            .set(1);
        m.exclusive_cpu_softirqs
            .get_or_create(&SoftirqLabel {
                cpu: "1".into(),
                kind: "TIMER".into(),
            })
            .set(1);
        let result = ResultLabel {
            result: "ok".into(),
        };
        for family in [
            &m.config_reloads,
            &m.systemd_told,
            &m.resizes,
            &m.nri_updates,
        ] {
            family.get_or_create(&result).inc();
        }
        let mut served = std::collections::BTreeSet::new();
        for line in m.encode().lines() {
            let Some(rest) = line.strip_prefix("# TYPE ") else {
                continue;
            };
            let (name, kind) = rest.split_once(' ').unwrap();
            match kind {
                "counter" => {
                    served.insert(format!("{name}_total"));
                }
                "histogram" => {
                    served.insert(name.to_string());
                    for suffix in ["_bucket", "_sum", "_count"] {
                        served.insert(format!("{name}{suffix}"));
                    }
                }
                _ => {
                    served.insert(name.to_string());
                }
            }
        }
        served
    }

    /// The `pinctl_*` names in a file of the repository.
    fn named_in(file: &str) -> Vec<String> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
        let body = std::fs::read_to_string(&path).unwrap();
        body.match_indices("pinctl_")
            .map(|(at, _)| {
                body[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect()
            })
            .collect()
    }

    /// The docs' metrics page lists every metric, each as it is served.
    #[test]
    fn the_metrics_page_lists_every_metric() {
        let served = served_names();
        let listed: std::collections::BTreeSet<String> =
            named_in("docs/src/metrics.md").into_iter().collect();
        let suffixes = ["_bucket", "_sum", "_count"];
        for name in &served {
            let series_of_a_histogram = suffixes
                .iter()
                .any(|s| name.strip_suffix(s).is_some_and(|b| served.contains(b)));
            assert!(
                series_of_a_histogram || listed.contains(name),
                "docs/src/metrics.md lacks {name}"
            );
        }
        for name in &listed {
            assert!(
                served.contains(name),
                "docs/src/metrics.md names {name}, not served"
            );
        }
    }

    /// The alert rules and the dashboard (`packaging/fleet/`) name only
    /// metrics the daemon serves; the dashboard is JSON.
    #[test]
    fn the_fleet_files_name_only_metrics_the_daemon_serves() {
        let served = served_names();
        for file in [
            "packaging/fleet/alerts.yml",
            "packaging/fleet/dashboard.json",
        ] {
            let named = named_in(file);
            for name in &named {
                assert!(served.contains(name), "{file} names {name}, not served");
            }
            assert!(named.len() > 5, "{file} names {} metrics", named.len());
        }
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/fleet/dashboard.json");
        let dashboard: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        assert!(dashboard["panels"].as_array().is_some_and(|p| p.len() > 5));
    }
}
