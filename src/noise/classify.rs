//! What each source of noise on an exclusive CPU is, and what would remove
//! it: a [`Class`], a reason and a cure, from what `/proc` and the trace
//! said of a task, or from an interrupt's or softirq's row.
//!
//! Pure: the facts and the daemon's word (its `housekeeping` and
//! `interrupts` sections) come in; nothing is read here. A task gone before
//! it could be looked up is judged by its name.

use serde::{Deserialize, Serialize};

use crate::api;
use crate::cpuset::CpuSet;

use super::parse::{Row, irq_name};

/// `PF_KTHREAD` in `/proc/PID/stat`'s flags: a kernel thread.
pub const PF_KTHREAD: u32 = 0x0020_0000;
/// `PF_NO_SETAFFINITY`: the kernel refuses `sched_setaffinity` on it.
pub const PF_NO_SETAFFINITY: u32 = 0x0400_0000;

/// The kinds of noise, in the order reports list them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// A user task that is not the workload's: a pinning failure.
    Neighbour,
    /// A kernel thread that could run elsewhere: `housekeeping` moves it.
    Movable,
    /// A kernel thread the kernel keeps on this CPU: only boot parameters
    /// remove it.
    PerCpu,
    /// An interrupt, by number or name.
    Interrupt,
    /// A softirq, by kind.
    Softirq,
}

impl Class {
    pub const ALL: [Class; 5] = [
        Class::Neighbour,
        Class::Movable,
        Class::PerCpu,
        Class::Interrupt,
        Class::Softirq,
    ];

    /// Its name in reports and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Class::Neighbour => "neighbour",
            Class::Movable => "movable",
            Class::PerCpu => "per_cpu",
            Class::Interrupt => "interrupt",
            Class::Softirq => "softirq",
        }
    }

    /// Whether it fails the measurement: what should not have run there.
    pub fn fails(self) -> bool {
        matches!(self, Class::Neighbour | Class::Movable)
    }
}

/// What `/proc/PID` says of a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskFacts {
    /// Its name in `stat` (a kworker's carries its current workqueue).
    pub comm: String,
    /// `stat`'s flags (`PF_*`).
    pub flags: u32,
    /// `Cpus_allowed_list`, when readable.
    pub allowed: Option<CpuSet>,
    /// Its cgroup in the cpuset hierarchy, when readable.
    pub cgroup: Option<String>,
}

impl TaskFacts {
    pub fn is_kthread(&self) -> bool {
        self.flags & PF_KTHREAD != 0
    }
}

/// A source's class, why it ran there, and what would stop it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub class: Class,
    pub why: String,
    pub cure: Option<String>,
}

/// What judging needs beyond the source itself.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// The CPUs measured: the boot parameters of a cure name them.
    pub cpus: &'a CpuSet,
    /// The daemon's `housekeeping` section, when it has one.
    pub housekeeping: Option<&'a api::Housekeeping>,
    /// The daemon's `interrupts` section (`irq_affinity`), when it has one.
    pub interrupts: Option<&'a api::Interrupts>,
}

/// What a kernel thread's name says it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Named {
    /// Bound to one CPU by design.
    PerCpu(PerCpu),
    /// An unbound workqueue worker (`kworker/uN:M`) or rescuer
    /// (`kworker/R-name`): the workqueue cpumask moves it.
    Unbound,
    /// A kernel thread known to run anywhere (`rcu_preempt`, `kcompactd0`).
    Movable,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PerCpu {
    Kworker,
    KworkerHigh,
    Ksoftirqd,
    Migration,
    Cpuhp,
    Rcuc,
    IdleInject,
    Watchdog,
    Other,
}

/// Kernel threads named `NAME/N`, one per CPU.
const PER_CPU_NAMES: [(&str, PerCpu); 9] = [
    ("ksoftirqd", PerCpu::Ksoftirqd),
    ("migration", PerCpu::Migration),
    ("cpuhp", PerCpu::Cpuhp),
    ("rcuc", PerCpu::Rcuc),
    ("idle_inject", PerCpu::IdleInject),
    ("watchdog", PerCpu::Watchdog),
    ("ktimers", PerCpu::Other),
    ("irq_work", PerCpu::Other),
    ("posixcputmr", PerCpu::Other),
];

/// Kernel threads that are not bound to a CPU, by name or name prefix.
const MOVABLE_PREFIXES: [&str; 16] = [
    "rcu_preempt",
    "rcu_sched",
    "rcu_bh",
    "rcu_tasks",
    "rcu_exp_",
    "rcuog/",
    "rcuop/",
    "rcuos/",
    "kdamond",
    "kcompactd",
    "kswapd",
    "khugepaged",
    "ksmd",
    "kthreadd",
    "oom_reaper",
    "khungtaskd",
];

fn all_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// What a kernel thread's name says, if anything.
fn named(comm: &str) -> Option<Named> {
    if let Some(rest) = comm.strip_prefix("kworker/") {
        if rest.starts_with("R-") {
            return Some(Named::Unbound);
        }
        // `/proc` adds the current workqueue: `kworker/3:1H-kblockd`.
        let rest = rest.split_once('-').map_or(rest, |(w, _)| w);
        let (pool, id) = rest.split_once(':')?;
        if let Some(n) = pool.strip_prefix('u') {
            return (all_digits(n) && all_digits(id)).then_some(Named::Unbound);
        }
        if !all_digits(pool) {
            return None;
        }
        return match id.strip_suffix('H') {
            Some(id) if all_digits(id) => Some(Named::PerCpu(PerCpu::KworkerHigh)),
            _ if all_digits(id) => Some(Named::PerCpu(PerCpu::Kworker)),
            _ => None,
        };
    }
    if let Some((name, n)) = comm.split_once('/')
        && all_digits(n)
        && let Some((_, kind)) = PER_CPU_NAMES.iter().find(|(p, _)| *p == name)
    {
        return Some(Named::PerCpu(*kind));
    }
    MOVABLE_PREFIXES
        .iter()
        .any(|p| comm.starts_with(p))
        .then_some(Named::Movable)
}

fn per_cpu(ctx: &Context<'_>, kind: PerCpu) -> Verdict {
    let cpus = ctx.cpus;
    let (why, cure) = match kind {
        PerCpu::Kworker => (
            "per-CPU workqueue work (vmstat, LRU drains, ...)",
            Some(format!("nohz_full={cpus}")),
        ),
        PerCpu::KworkerHigh => (
            "high-priority per-CPU work: block I/O completions of a kernel-managed interrupt",
            Some(format!("isolcpus=managed_irq,domain,{cpus}")),
        ),
        PerCpu::Ksoftirqd => (
            "softirqs deferred to a thread (see the softirq rows)",
            Some(format!("irq_affinity = true; nohz_full={cpus}")),
        ),
        PerCpu::Migration => ("the CPU's stopper: moves tasks, runs stop_machine", None),
        PerCpu::Cpuhp => ("CPU hot-plug", None),
        PerCpu::Rcuc => (
            "RCU callbacks of this CPU",
            Some(format!("rcu_nocbs={cpus}")),
        ),
        PerCpu::IdleInject => ("idle injection (thermal, powercap)", None),
        PerCpu::Watchdog => ("the soft lockup detector", Some("nowatchdog".to_string())),
        PerCpu::Other => ("a per-CPU kernel thread", None),
    };
    Verdict {
        class: Class::PerCpu,
        why: why.to_string(),
        cure,
    }
}

/// Why movable kernel work still ran on `cpu`.
fn movable(
    ctx: &Context<'_>,
    cpu: u32,
    pid: u32,
    facts: Option<&TaskFacts>,
    unbound: bool,
) -> Verdict {
    let why = match ctx.housekeeping.filter(|h| h.on) {
        None => "housekeeping = true would move it".to_string(),
        Some(h) => {
            let refused = h.failed.iter().find(|f| {
                if unbound {
                    f.contains("workqueue")
                } else {
                    f.contains(&format!("kthread {pid} ")) || f.contains(&format!("kthread {pid}:"))
                }
            });
            match (refused, facts) {
                (Some(f), _) => format!("housekeeping is on; the kernel refused: {f}"),
                (None, None) => {
                    "housekeeping is on; it ended before it could be looked up (born since the last round of checks)".to_string()
                }
                (None, Some(f)) if f.allowed.as_ref().is_some_and(|a| !a.contains(cpu)) => {
                    "housekeeping is on and has moved it since (it was born since the last round of checks)".to_string()
                }
                (None, Some(_)) if unbound => "housekeeping is on, but it still ran here: before Linux 6.9 an ordered workqueue's workers keep their CPUs when the workqueue cpumask changes (isolcpus=domain at boot keeps them off); else it was born since the last round of checks, or the kernel refused (see pinctl status)".to_string(),
                (None, Some(_)) => "housekeeping is on, but it may still run here (born since the last round of checks, or the kernel refused: see pinctl status)".to_string(),
            }
        }
    };
    Verdict {
        class: Class::Movable,
        why,
        cure: None,
    }
}

/// Judges a task that ran on exclusive CPU `cpu` and is not the workload's.
/// `facts` is what `/proc` said of it (`None`: it ended before it could be
/// looked up); `other` the workload it belongs to, when it is a user task
/// of another one.
pub fn task(
    ctx: &Context<'_>,
    cpu: u32,
    pid: u32,
    comm: &str,
    facts: Option<&TaskFacts>,
    other: Option<&str>,
) -> Verdict {
    let neighbour = |why: String| Verdict {
        class: Class::Neighbour,
        why,
        cure: Some("pinctl verify names the cpuset that lets it run here".to_string()),
    };
    if let Some(key) = other {
        return neighbour(format!("a task of another workload, {key}"));
    }
    let Some(f) = facts else {
        return match named(comm) {
            Some(Named::PerCpu(kind)) => per_cpu(ctx, kind),
            Some(Named::Unbound) => movable(ctx, cpu, pid, None, true),
            Some(Named::Movable) => movable(ctx, cpu, pid, None, false),
            None => neighbour(
                "a task that ended before it could be looked up: not in the workload's cgroups, nor made or moved there while measured".to_string(),
            ),
        };
    };
    if !f.is_kthread() {
        return neighbour(match f.cgroup.as_deref() {
            Some(cgroup) => format!("a user task in cgroup /{cgroup}, not the workload's"),
            None => "a user task outside the workload's cgroups".to_string(),
        });
    }
    // A kworker's name in /proc carries its workqueue: the trace's is plain.
    match named(comm).or_else(|| named(&f.comm)) {
        Some(Named::PerCpu(kind)) => return per_cpu(ctx, kind),
        Some(Named::Unbound) => return movable(ctx, cpu, pid, Some(f), true),
        _ => {}
    }
    if f.allowed
        .as_ref()
        .is_some_and(|a| a.len() == 1 && a.contains(cpu))
    {
        return Verdict {
            class: Class::PerCpu,
            why: format!("a kernel thread bound to CPU {cpu}"),
            cure: None,
        };
    }
    if f.flags & PF_NO_SETAFFINITY != 0 {
        if let Some(irq) = comm.strip_prefix("irq/") {
            let number = irq.split('-').next().unwrap_or(irq);
            return Verdict {
                class: Class::PerCpu,
                why: format!(
                    "the threaded handler of interrupt {number}: it follows the interrupt"
                ),
                cure: Some(device_cure(ctx.cpus)),
            };
        }
        return Verdict {
            class: Class::PerCpu,
            why: "a kernel thread the kernel does not let move (PF_NO_SETAFFINITY)".to_string(),
            cure: None,
        };
    }
    movable(ctx, cpu, pid, Some(f), false)
}

fn device_cure(cpus: &CpuSet) -> String {
    format!("irq_affinity = true (kernel-managed ones: isolcpus=managed_irq,domain,{cpus})")
}

/// An interrupt row's name (`36: virtio1-req.0`, `LOC: Local timer
/// interrupts`) and verdict.
pub fn interrupt(ctx: &Context<'_>, row: &Row) -> (String, Verdict) {
    let cpus = ctx.cpus;
    if all_digits(&row.label) {
        let name = format!("{}: {}", row.label, irq_name(&row.desc));
        let refused = ctx.interrupts.and_then(|i| {
            i.refused
                .iter()
                .chain(&i.failed)
                .find(|r| r.irq == row.label)
        });
        let (why, cure) = match (refused, ctx.interrupts.is_some_and(|i| i.on)) {
            (Some(r), _) => (
                format!("the kernel refuses to move it ({}): kernel-managed", r.error),
                format!("isolcpus=managed_irq,domain,{cpus}"),
            ),
            (None, true) => (
                "a device interrupt; irq_affinity is on: it came before it was moved, or the kernel keeps it here".to_string(),
                format!("isolcpus=managed_irq,domain,{cpus} if it is kernel-managed"),
            ),
            (None, false) => ("a device interrupt".to_string(), device_cure(cpus)),
        };
        return (
            name,
            Verdict {
                class: Class::Interrupt,
                why,
                cure: Some(cure),
            },
        );
    }
    let name = if row.desc.is_empty() {
        row.label.clone()
    } else {
        format!("{}: {}", row.label, row.desc)
    };
    let (why, cure) = match row.label.as_str() {
        "LOC" => (
            "the local timer: the scheduler tick",
            Some(format!("nohz_full={cpus}")),
        ),
        "RES" => (
            "rescheduling interrupts: wake-ups sent from other CPUs",
            None,
        ),
        "CAL" => (
            "function call interrupts: work sent from other CPUs (TLB, membarrier, ...)",
            None,
        ),
        "TLB" => (
            "TLB shootdowns: memory map changes of the workload's own threads",
            None,
        ),
        "IWI" => ("IRQ work", Some(format!("nohz_full={cpus}"))),
        "NMI" => (
            "non-maskable interrupts (perf, the NMI watchdog)",
            Some("nmi_watchdog=0".to_string()),
        ),
        "PMI" => ("performance monitoring interrupts (perf)", None),
        "MCE" | "MCP" | "DFR" => ("machine checks", None),
        "THR" | "TRM" => ("thermal events", None),
        _ => ("a system interrupt", None),
    };
    (
        name,
        Verdict {
            class: Class::Interrupt,
            why: why.to_string(),
            cure,
        },
    )
}

/// A softirq row's verdict (`TIMER`, `NET_RX`, ...).
pub fn softirq(ctx: &Context<'_>, kind: &str) -> Verdict {
    let cpus = ctx.cpus;
    let (why, cure) = match kind {
        "TIMER" => (
            "expired timers of the timer wheel",
            Some(format!("nohz_full={cpus}")),
        ),
        "HRTIMER" => (
            "expired high-resolution timers",
            Some(format!("nohz_full={cpus}")),
        ),
        "NET_RX" | "NET_TX" => (
            "network packet processing",
            Some("irq_affinity = true for the NIC's queues".to_string()),
        ),
        "BLOCK" | "IRQ_POLL" => (
            "block I/O completions",
            Some(format!("isolcpus=managed_irq,domain,{cpus}")),
        ),
        "TASKLET" | "HI" => (
            "device drivers' deferred work",
            Some("irq_affinity = true".to_string()),
        ),
        "SCHED" => (
            "scheduler load balancing",
            Some(format!(
                "isolcpus=domain,{cpus}, or isolation = \"partition\""
            )),
        ),
        "RCU" => ("RCU callbacks", Some(format!("rcu_nocbs={cpus}"))),
        _ => ("a softirq", None),
    };
    Verdict {
        class: Class::Softirq,
        why: why.to_string(),
        cure,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx<'a>(cpus: &'a CpuSet, hk: Option<&'a api::Housekeeping>) -> Context<'a> {
        Context {
            cpus,
            housekeeping: hk,
            interrupts: None,
        }
    }

    fn kthread(comm: &str, allowed: &str, flags: u32) -> TaskFacts {
        TaskFacts {
            comm: comm.into(),
            flags: PF_KTHREAD | flags,
            allowed: Some(allowed.parse().unwrap()),
            cgroup: Some(String::new()),
        }
    }

    #[test]
    fn kernel_threads_by_name() {
        assert_eq!(named("kworker/u4:2"), Some(Named::Unbound));
        assert_eq!(named("kworker/R-rcu_gp"), Some(Named::Unbound));
        assert_eq!(
            named("kworker/3:1H"),
            Some(Named::PerCpu(PerCpu::KworkerHigh))
        );
        assert_eq!(
            named("kworker/3:1H-kblockd"),
            Some(Named::PerCpu(PerCpu::KworkerHigh))
        );
        assert_eq!(
            named("kworker/3:0-mm_percpu_wq"),
            Some(Named::PerCpu(PerCpu::Kworker))
        );
        assert_eq!(named("ksoftirqd/3"), Some(Named::PerCpu(PerCpu::Ksoftirqd)));
        assert_eq!(
            named("migration/12"),
            Some(Named::PerCpu(PerCpu::Migration))
        );
        assert_eq!(named("rcu_preempt"), Some(Named::Movable));
        assert_eq!(named("kcompactd0"), Some(Named::Movable));
        for other in [
            "kworker/",
            "kworker/x:1",
            "kworker/u:1",
            "kworker/3:H",
            "ksoftirqd/",
            "ksoftirqd/x",
            "bash",
            "",
        ] {
            assert_eq!(named(other), None, "{other}");
        }
    }

    #[test]
    fn classes_of_tasks() {
        let cpus: CpuSet = "1-3".parse().unwrap();
        let off = ctx(&cpus, None);
        // A movable kthread, an unbound kworker, a bound one, one the kernel
        // pins, a per-CPU one by name, a user task, one gone.
        let v = task(
            &off,
            1,
            12,
            "rcu_preempt",
            Some(&kthread("rcu_preempt", "0-3", 0)),
            None,
        );
        assert_eq!(
            (v.class, v.why.as_str()),
            (Class::Movable, "housekeeping = true would move it")
        );
        let v = task(
            &off,
            1,
            13,
            "kworker/u8:2",
            Some(&kthread(
                "kworker/u8:2-events_unbound",
                "0-3",
                PF_NO_SETAFFINITY,
            )),
            None,
        );
        assert_eq!(v.class, Class::Movable);
        let v = task(
            &off,
            2,
            14,
            "cpuidle_x",
            Some(&kthread("cpuidle_x", "2", 0)),
            None,
        );
        assert_eq!(
            (v.class, v.why.as_str()),
            (Class::PerCpu, "a kernel thread bound to CPU 2")
        );
        let v = task(
            &off,
            2,
            15,
            "irq/36-virtio1",
            Some(&kthread("irq/36-virtio1", "0-3", PF_NO_SETAFFINITY)),
            None,
        );
        assert_eq!(v.class, Class::PerCpu);
        assert!(v.why.contains("interrupt 36"), "{}", v.why);
        let v = task(
            &off,
            1,
            16,
            "kworker/1:1H",
            Some(&kthread("kworker/1:1H-kblockd", "1", PF_NO_SETAFFINITY)),
            None,
        );
        assert_eq!(v.cure.as_deref(), Some("isolcpus=managed_irq,domain,1-3"));
        let user = TaskFacts {
            comm: "stress".into(),
            flags: 0x0040_0000,
            allowed: Some("0-3".parse().unwrap()),
            cgroup: Some("system.slice/x.service".into()),
        };
        let v = task(&off, 1, 17, "stress", Some(&user), None);
        assert_eq!(
            (v.class, v.why.as_str()),
            (
                Class::Neighbour,
                "a user task in cgroup /system.slice/x.service, not the workload's"
            )
        );
        let v = task(&off, 1, 17, "stress", Some(&user), Some("cgroup:b"));
        assert_eq!(v.why, "a task of another workload, cgroup:b");
        assert_eq!(
            task(&off, 1, 18, "kworker/u8:0", None, None).class,
            Class::Movable
        );
        assert_eq!(
            task(&off, 1, 19, "ksoftirqd/1", None, None).class,
            Class::PerCpu
        );
        assert_eq!(task(&off, 1, 20, "sh", None, None).class, Class::Neighbour);
    }

    #[test]
    fn with_housekeeping_on_the_reason_is_why_it_was_not_moved() {
        let cpus: CpuSet = "1".parse().unwrap();
        let hk = api::Housekeeping {
            on: true,
            away: cpus.clone(),
            failed: vec!["kthread 12 (kdamond.0): sched_setaffinity: Invalid argument".into()],
            ..api::Housekeeping::default()
        };
        let on = ctx(&cpus, Some(&hk));
        let v = task(
            &on,
            1,
            12,
            "kdamond.0",
            Some(&kthread("kdamond.0", "0-1", 0)),
            None,
        );
        assert!(
            v.why.contains("the kernel refused: kthread 12"),
            "{}",
            v.why
        );
        let v = task(
            &on,
            1,
            13,
            "kcompactd0",
            Some(&kthread("kcompactd0", "0", 0)),
            None,
        );
        assert!(v.why.contains("has moved it since"), "{}", v.why);
        let v = task(&on, 1, 14, "kcompactd0", None, None);
        assert!(
            v.why.contains("born since the last round of checks"),
            "{}",
            v.why
        );
        let off = api::Housekeeping {
            on: false,
            ..hk.clone()
        };
        let v = task(&ctx(&cpus, Some(&off)), 1, 12, "kdamond.0", None, None);
        assert_eq!(v.why, "housekeeping = true would move it");
    }

    #[test]
    fn interrupts_and_softirqs() {
        let cpus: CpuSet = "2-3".parse().unwrap();
        let row = |label: &str, desc: &str| Row {
            label: label.into(),
            counts: vec![1],
            desc: desc.into(),
        };
        let irqs = api::Interrupts {
            on: true,
            refused: vec![api::RefusedIrq {
                irq: "36".into(),
                error: "Input/output error (os error 5)".into(),
            }],
            ..api::Interrupts::default()
        };
        let mut c = ctx(&cpus, None);
        let (name, v) = interrupt(&c, &row("36", "PCI-MSIX-0000:00:02.0 1-edge virtio1-req.0"));
        assert_eq!(name, "36: virtio1-req.0");
        assert_eq!(
            v.cure.as_deref(),
            Some("irq_affinity = true (kernel-managed ones: isolcpus=managed_irq,domain,2-3)")
        );
        c.interrupts = Some(&irqs);
        let (_, v) = interrupt(&c, &row("36", "x 1-edge y"));
        assert!(v.why.contains("kernel-managed"), "{}", v.why);
        assert_eq!(v.cure.as_deref(), Some("isolcpus=managed_irq,domain,2-3"));
        let (name, v) = interrupt(&c, &row("LOC", "Local timer interrupts"));
        assert_eq!(
            (name.as_str(), v.cure.as_deref()),
            ("LOC: Local timer interrupts", Some("nohz_full=2-3"))
        );
        assert_eq!(softirq(&c, "RCU").cure.as_deref(), Some("rcu_nocbs=2-3"));
        assert_eq!(softirq(&c, "NEW_KIND").cure, None);
        assert!(Class::Movable.fails() && Class::Neighbour.fails() && !Class::PerCpu.fails());
    }
}
