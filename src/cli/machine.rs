//! `pinctl topology` and `pinctl plan`: this machine's CPUs as sysfs tells
//! them, and the CPUs the allocator would give a request. Neither asks the
//! daemon nor writes anything.

use std::fmt::Write as _;
use std::io::Write;

use anyhow::{Context, Result, bail};
use serde::Serialize;

use super::{PlanArgs, Source, TopologyArgs};
use crate::alloc::{self, Alignment, Options};
use crate::bootline;
use crate::cpuset::CpuSet;
use crate::sysfs::Sysfs;
use crate::topology::{CpuInfo, Topology, TopologyFile};

pub(super) fn topology(args: &TopologyArgs, out: &mut dyn Write) -> Result<()> {
    let topo = Sysfs::new(&args.sysfs)
        .topology()
        .with_context(|| format!("cannot read the CPU topology from {}", args.sysfs.display()))?;
    if args.json {
        serde_json::to_writer_pretty(&mut *out, &topo.to_file())?;
        writeln!(out)?;
    } else {
        out.write_all(render_topology(&topo).as_bytes())?;
    }
    Ok(())
}

/// Loads the topology named by `source`.
pub fn load_topology(source: &Source) -> Result<Topology> {
    match &source.topology {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read topology file {}", path.display()))?;
            let file: TopologyFile = serde_json::from_str(&text)
                .with_context(|| format!("invalid topology file {}", path.display()))?;
            Topology::from_file(file)
                .with_context(|| format!("invalid topology file {}", path.display()))
        }
        None => Sysfs::new(&source.sysfs).topology().with_context(|| {
            format!(
                "cannot read the CPU topology from {}",
                source.sysfs.display()
            )
        }),
    }
}

#[derive(Serialize)]
struct PlanOutput<'a> {
    cpus: CpuSet,
    count: usize,
    alignment: Alignment,
    details: Vec<&'a CpuInfo>,
    /// With `--boot-params`.
    #[serde(skip_serializing_if = "Option::is_none")]
    boot_params: Option<String>,
}

pub(super) fn plan(args: &PlanArgs, out: &mut dyn Write) -> Result<()> {
    let topo = load_topology(&args.source)?;
    let free = args
        .available
        .clone()
        .unwrap_or_else(|| topo.online().clone());
    let reserved = match (&args.reserved, args.reserved_count) {
        (Some(list), _) => list.clone(),
        (None, Some(count)) => topo.lowest_cores(count),
        (None, None) => CpuSet::new(),
    };
    let mut numa_preference: Vec<u32> = args.numa.iter().flat_map(|s| s.iter()).collect();
    let mut free = free;
    let near = near_nodes(args, &topo)?;
    if numa_preference.is_empty() && !near.is_empty() {
        if args.device_alignment == crate::config::DeviceAlignment::Require {
            free = topo.cpus_of_nodes(&near).intersection(&free);
        }
        numa_preference = near.clone();
    }
    let opts = Options {
        reserved,
        full_pcpus_only: args.full_pcpus_only,
        distribute_across_numa: args.distribute_across_numa,
        spread_cores: args.spread_cores,
        numa_preference,
        align_by_socket: args.align_by_socket,
        prefer: CpuSet::new(),
    };
    let cpus =
        alloc::allocate(&topo, &free, args.cpus, &opts).with_context(|| match near.is_empty() {
            true => format!("cannot plan {} CPUs", args.cpus),
            false => format!(
                "cannot plan {} CPUs near {} (NUMA nodes {})",
                args.cpus,
                args.near.join(", "),
                near.iter().copied().collect::<CpuSet>()
            ),
        })?;
    // Decided before anything is printed: a failure leaves stdout empty.
    let boot_params = if args.boot_params {
        match bootline::boot_line(&cpus, topo.online()) {
            Ok(line) => Some(line),
            Err(why @ bootline::NoLine::NoHousekeeping { .. }) => bail!(
                "no kernel command line for the plan: {why}; reserve one with --reserved or --reserved-count"
            ),
            Err(why) => bail!("no kernel command line for the plan: {why}"),
        }
    } else {
        None
    };
    if args.json {
        let output = PlanOutput {
            count: cpus.len(),
            alignment: Alignment::of(&topo, &cpus),
            details: cpus.iter().filter_map(|c| topo.cpu(c)).collect(),
            cpus,
            boot_params,
        };
        serde_json::to_writer_pretty(&mut *out, &output)?;
        writeln!(out)?;
    } else {
        writeln!(out, "{cpus}")?;
        if let Some(line) = boot_params {
            writeln!(out, "{line}")?;
        }
    }
    Ok(())
}

/// The NUMA nodes of `pinctl plan --near`'s devices, read under its
/// `--sysfs`: empty with no `--near` or `--device-alignment none`; an
/// error names a device that cannot be placed.
fn near_nodes(args: &PlanArgs, topo: &Topology) -> Result<Vec<u32>> {
    let near = crate::devices::parse_list(&args.near.join(",")).context("--near")?;
    if near.is_empty() || args.device_alignment == crate::config::DeviceAlignment::None {
        return Ok(Vec::new());
    }
    let fs = crate::io::RealFs;
    let roots = crate::devices::Roots {
        sys: &args.source.sysfs,
        proc_root: &args.proc_root,
        cdi_dirs: &args.cdi_spec_dirs,
    };
    crate::devices::nodes_named(&fs, roots, topo, &near).map_err(anyhow::Error::msg)
}

fn list_or_none(set: &CpuSet) -> String {
    if set.is_empty() {
        "none".to_string()
    } else {
        set.to_string()
    }
}

/// The readable summary, domain tree and per-CPU table of `pinctl topology`.
pub fn render_topology(topo: &Topology) -> String {
    let mut s = String::new();
    let (min_t, max_t) = (topo.min_threads_per_core(), topo.threads_per_core());
    let threads = if min_t == max_t {
        format!("{max_t}")
    } else {
        format!("{min_t}-{max_t} (mixed)")
    };
    let l3 = if topo.l3_groups().is_empty() {
        "not reported".to_string()
    } else {
        topo.l3_groups().len().to_string()
    };
    let _ = writeln!(
        s,
        "CPUs:             {} online ({})",
        topo.online().len(),
        topo.online()
    );
    let _ = writeln!(s, "Offline CPUs:     {}", list_or_none(topo.offline()));
    let _ = writeln!(s, "Sockets:          {}", topo.sockets().len());
    let _ = writeln!(s, "NUMA nodes:       {}", topo.numa_nodes().len());
    let _ = writeln!(s, "L3 groups:        {l3}");
    let _ = writeln!(s, "Physical cores:   {}", topo.cores().len());
    let _ = writeln!(s, "Threads per core: {threads}");
    let _ = writeln!(s, "Isolated CPUs:    {}", list_or_none(topo.isolated()));

    for (socket, socket_cpus) in topo.sockets() {
        let _ = writeln!(s, "\nSocket {socket}: CPUs {socket_cpus}");
        for (node, node_cpus) in topo.numa_nodes() {
            let here = node_cpus.intersection(socket_cpus);
            if here.is_empty() {
                continue;
            }
            let _ = writeln!(s, "  NUMA node {node}: CPUs {here}");
            for slice in topo
                .slices()
                .iter()
                .filter(|x| x.socket == *socket && x.numa == *node)
            {
                let label = slice
                    .l3
                    .map_or_else(|| "no L3".to_string(), |l| format!("L3 {l}"));
                let cores: Vec<String> = slice
                    .cores
                    .iter()
                    .map(|&c| {
                        format!(
                            "[{}]",
                            CpuSet::from_iter(topo.cores()[c].cpus.iter().copied())
                        )
                    })
                    .collect();
                let _ = writeln!(
                    s,
                    "    {label}: {} cores: {}",
                    slice.cores.len(),
                    cores.join(" ")
                );
            }
        }
    }

    let _ = writeln!(
        s,
        "\n{:>5} {:>5} {:>6} {:>4} {:>5} {:>4}  ISOLATED",
        "CPU", "CORE", "SOCKET", "DIE", "NUMA", "L3"
    );
    let dash = |v: Option<u32>| v.map_or_else(|| "-".to_string(), |v| v.to_string());
    for c in topo.cpus() {
        let iso = if topo.isolated().contains(c.cpu) {
            "yes"
        } else {
            ""
        };
        let row = format!(
            "{:>5} {:>5} {:>6} {:>4} {:>5} {:>4}  {iso}",
            c.cpu,
            c.core,
            c.socket,
            dash(c.die),
            c.numa,
            dash(c.l3)
        );
        let _ = writeln!(s, "{}", row.trim_end());
    }
    s
}
