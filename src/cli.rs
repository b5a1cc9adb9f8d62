//! The `pinctl` command line: argument definitions and the commands.
//!
//! This is the front end of the `pinctl` binary, kept in the library so that man
//! pages and shell completions can be generated from the same definition
//! ([`assets`]; `pinctld`'s arguments, [`DaemonCli`], live here for the same
//! reason). It is the one place below `main` that knows default paths (`/sys`,
//! [`CONFIG_FILE`]), and it passes them down as arguments. Commands write their output to the given writer and
//! return errors; `main` prints them and picks the exit code.
//!
//! Exit codes: 0 success; 1 the command failed (the reason is on stderr);
//! 2 the command line was wrong.

use std::fmt::Write as _;
use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use serde::Serialize;

use crate::alloc::{self, Alignment, Options};
use crate::cpuset::CpuSet;
use crate::sysfs::Sysfs;
use crate::topology::{CpuInfo, Topology, TopologyFile};

pub mod assets;

/// Exclusive, topology-aware CPUs for Linux workloads.
#[derive(Debug, Parser)]
#[command(name = "pinctl", version, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show the CPU topology: sockets, NUMA nodes, L3 groups, cores and threads.
    Topology(TopologyArgs),
    /// Show which CPUs a workload asking for N exclusive CPUs would get.
    Plan(PlanArgs),
}

/// The daemon's configuration file, where the packages install it and the
/// systemd unit points `pinctld --config`.
pub const CONFIG_FILE: &str = "/etc/pinctl/pinctld.toml";

/// The pinctl daemon: exclusive, topology-aware CPUs for workloads in a cgroup
/// tree.
///
/// pinctld runs in the foreground until SIGTERM or SIGINT; SIGHUP asks for a
/// full reconcile. Under systemd (pinctld.service) it reports readiness after
/// its first reconcile and pets the watchdog.
#[derive(Debug, Parser)]
#[command(name = "pinctld", version)]
pub struct DaemonCli {
    /// The configuration file.
    #[arg(long, value_name = "PATH", default_value = CONFIG_FILE)]
    pub config: PathBuf,
    /// Validate the configuration and exit.
    #[arg(long)]
    pub check: bool,
}

/// Where the topology comes from.
#[derive(Debug, Args)]
pub struct Source {
    /// Read the topology from this sysfs root.
    #[arg(long, value_name = "DIR", default_value = "/sys")]
    pub sysfs: PathBuf,
    /// Read the topology from a file written by `pinctl topology --json`.
    #[arg(long, value_name = "FILE", conflicts_with = "sysfs")]
    pub topology: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct TopologyArgs {
    /// Read the topology from this sysfs root.
    #[arg(long, value_name = "DIR", default_value = "/sys")]
    pub sysfs: PathBuf,
    /// Print the topology file format instead of the summary.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// How many exclusive CPUs the workload asks for.
    #[arg(long, value_name = "N")]
    pub cpus: usize,
    #[command(flatten)]
    pub source: Source,
    /// The free CPUs to choose from (default: all online CPUs).
    #[arg(long, value_name = "LIST")]
    pub available: Option<CpuSet>,
    /// CPUs never handed out exclusively.
    #[arg(long, value_name = "LIST", conflicts_with = "reserved_count")]
    pub reserved: Option<CpuSet>,
    /// Reserve this many CPUs, taken from the lowest-numbered whole cores.
    #[arg(long, value_name = "N")]
    pub reserved_count: Option<usize>,
    /// Serve only whole physical cores (the request must be a multiple of the
    /// threads per core).
    #[arg(long)]
    pub full_pcpus_only: bool,
    /// Split the request evenly across the fewest NUMA nodes that can hold it.
    #[arg(long)]
    pub distribute_across_numa: bool,
    /// Take one thread per core before any SMT sibling.
    #[arg(long, conflicts_with = "full_pcpus_only")]
    pub spread_cores: bool,
    /// NUMA nodes to draw from first.
    #[arg(long, value_name = "LIST")]
    pub numa: Option<CpuSet>,
    /// Widen the NUMA preference to the sockets of those nodes.
    #[arg(long, requires = "numa")]
    pub align_by_socket: bool,
    /// Print the plan with per-CPU details and its alignment as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs a parsed command, writing its output to `out`.
pub fn run(cli: Cli, out: &mut dyn Write) -> Result<()> {
    match cli.command {
        Command::Topology(args) => topology(&args, out),
        Command::Plan(args) => plan(&args, out),
    }
}

fn topology(args: &TopologyArgs, out: &mut dyn Write) -> Result<()> {
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
}

fn plan(args: &PlanArgs, out: &mut dyn Write) -> Result<()> {
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
    let opts = Options {
        reserved,
        full_pcpus_only: args.full_pcpus_only,
        distribute_across_numa: args.distribute_across_numa,
        spread_cores: args.spread_cores,
        numa_preference: args.numa.iter().flat_map(|s| s.iter()).collect(),
        align_by_socket: args.align_by_socket,
    };
    let cpus = alloc::allocate(&topo, &free, args.cpus, &opts)
        .with_context(|| format!("cannot plan {} CPUs", args.cpus))?;
    if args.json {
        let output = PlanOutput {
            count: cpus.len(),
            alignment: Alignment::of(&topo, &cpus),
            details: cpus.iter().filter_map(|c| topo.cpu(c)).collect(),
            cpus,
        };
        serde_json::to_writer_pretty(&mut *out, &output)?;
        writeln!(out)?;
    } else {
        writeln!(out, "{cpus}")?;
    }
    Ok(())
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
