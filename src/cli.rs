//! The `pinctl` command line: argument definitions and the commands.
//!
//! - Kept in the library so man pages and completions come from the same
//!   definition ([`assets`]); `pinctld`'s arguments ([`DaemonCli`]) too.
//! - The one place below `main` that knows default paths (`/sys`,
//!   [`CONFIG_FILE`]); it passes them down as arguments.
//! - Commands write to the writer given and return errors; `main` prints them
//!   and picks the exit code (`docs/src/cli.md`, "Exit codes").
//! - `status`, `describe`, `verify` and `events` ask the daemon's socket
//!   ([`crate::client`]); `status` and `verify` also work `--offline`
//!   ([`offline`]). Colour: [`style`].

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, Parser, Subcommand};

use crate::api;
use crate::client::{Client, ClientError};
use crate::config::{self, Config, ConfigError};
use crate::cpuset::CpuSet;

pub mod assets;
pub mod describe;
pub mod events;
mod exec;
pub mod handover;
mod machine;
pub mod noise;
pub mod offline;
pub mod status;
pub mod style;
pub mod verify;

pub use machine::{load_topology, render_topology};
use style::{ColorChoice, Style};

/// Exclusive, topology-aware CPUs for Linux workloads.
#[derive(Debug, Parser)]
#[command(name = "pinctl", version, propagate_version = true)]
pub struct Cli {
    /// When to colour the output: auto (only on a terminal, and not when
    /// NO_COLOR is set), always or never.
    #[arg(long, global = true, value_enum, value_name = "WHEN", default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show the CPU topology: sockets, NUMA nodes, L3 groups, cores and threads.
    Topology(TopologyArgs),
    /// Show which CPUs a workload asking for N exclusive CPUs would get.
    Plan(PlanArgs),
    /// Show what is pinned where: health, shared pool, workloads and a per-CPU map.
    ///
    /// Asks pinctld over its socket and prints a summary (daemon, health and its
    /// reasons, cgroup hierarchy and kubelet driver, topology, reserved CPUs,
    /// shared pool, counters), a map of every CPU grouped by socket, NUMA node
    /// and L3 group (one cell per physical core, its threads side by side: the
    /// tag of the workload that owns the thread, . for the shared pool, r for a
    /// reserved CPU, - for an offline thread), the exclusive workloads with
    /// their tags, the pending ones, failing cgroups and the watchdog's
    /// findings.
    ///
    /// When pinctld is not running, --offline builds the same page from its
    /// state file, the live cgroup tree and sysfs, as its configuration names
    /// them; the daemon's health and counters are then unknown.
    Status(StatusArgs),
    /// Explain one workload: where its CPUs came from, their alignment, its history.
    ///
    /// TARGET is a workload key (pod:UID/NAME, cgroup:PATH), a cgroup path
    /// (relative to the cgroup root, or absolute under it), a pod UID, or a
    /// container id (any part of a cgroup's name). Prints the source of the
    /// request (the xattr, the OCI annotation and its bundle, the rule and its
    /// line, or the kubelet's rule), its CPUs or why it waits, their alignment
    /// (sockets, NUMA nodes, L3 groups, whole cores), its cgroups and the
    /// daemon's recent writes to them. A TARGET matching several workloads
    /// lists them and fails.
    Describe(DescribeArgs),
    /// Check the live kernel against the daemon's intent; fail on any mismatch.
    ///
    /// Reads the cgroup tree and /proc directly and checks: each exclusive
    /// workload's cgroups (and those below them) get exactly its CPUs
    /// (cpuset.cpus.effective, v1 cpuset.effective_cpus); each of their tasks'
    /// Cpus_allowed_list lies within them; no two workloads share a CPU and
    /// none holds a reserved one; no other cgroup of the managed and shared
    /// subtrees gets an exclusive CPU. Isolated CPUs (isolcpus) in the shared
    /// pool are a warning. Each problem is printed on its own line; the command
    /// exits 1 if there is any.
    ///
    /// The intent comes from pinctld, or with --offline from its state file.
    /// The roots default to the configuration's (cgroup_root, proc_root,
    /// sysfs_root), else /sys/fs/cgroup, /proc and /sys; the subtrees are its
    /// managed and shared_cgroups. A read that hangs (a task in D state) hangs
    /// this command, not the daemon: interrupt it.
    ///
    /// With --noise DURATION it measures instead what else ran on the
    /// exclusive CPUs over DURATION (a tracing instance of its own, and
    /// /proc/interrupts and /proc/softirqs before and after): each source
    /// with its count, class (neighbour, movable, per_cpu, interrupt,
    /// softirq), why it ran there and what would remove it. It exits 1 when
    /// a neighbour or movable kernel work ran there.
    Verify(VerifyArgs),
    /// Print the daemon's audit trail: every cpuset write and repair, with its reason.
    ///
    /// One event a line: its sequence number, local time, and for a write the
    /// cgroup, the file, the old and new sets and why (the workload and the
    /// source of its request, or the shared pool), with the error if the write
    /// failed; for a repair the path and what was created. The daemon keeps a
    /// bounded number of recent events in memory.
    Events(EventsArgs),
    /// Run a command on exclusive CPUs that pinctld gives it.
    ///
    /// Asks pinctld over its run socket ([run] in its configuration) for N
    /// exclusive CPUs. The daemon checks who asks (root, or a user or a
    /// member of a group [run] names, within its caps), picks the CPUs as for
    /// any exclusive workload, makes the run's cgroup
    /// (SLICE/run-NAME.scope: a transient systemd scope where systemd
    /// runs, else a cgroup of its own), pins it and moves this process into
    /// it. This process then checks its own
    /// CPUs (Cpus_allowed_list) and becomes the command (exec), with
    /// PINCTL_CPUS set to them: its signals and exit status are its own. The
    /// CPUs are given back once the run's cgroup is empty (the command and
    /// every process it started have ended), at the daemon's next round of
    /// checks. A refusal says why on stderr and exits 1.
    Run(RunArgs),
    /// Show what pinctld keeps of the kubelet's static CPU manager's pins; move its checkpoint aside.
    ///
    /// The way off the kubelet's static CPU manager. Reads its checkpoint
    /// (cpu_manager_state) and the live cgroup tree, as pinctld's
    /// configuration names them, and prints each container the checkpoint
    /// pins: its pod UID and name, the CPUs it gives it, its cgroup (found by
    /// the workload key pod:UID/NAME), and whether pinctld keeps it on those
    /// CPUs when it takes the pods back, or why not. pinctld keeps a
    /// container whose cgroup holds those CPUs when it asks pinctld for that
    /// many (a Guaranteed pod with a whole-number CPU limit, an annotation,
    /// an xattr or a rule), whole cores where it takes them, none of them
    /// reserved (reserved_cpus) or another's. It also compares the
    /// kubelet's shared pool (defaultCpuSet) with pinctld's.
    ///
    /// With --apply, once the kubelet is stopped and set to
    /// cpuManagerPolicy: none, it moves the checkpoint aside to
    /// PATH.static-SECONDS (the kubelet then writes a new one): refused while
    /// a process named kubelet runs, or when the checkpoint does not say
    /// static. pinctld takes the pods back at its next watchdog round.
    ///
    /// Exits 0 when every container keeps its CPUs (or there is nothing to
    /// do: no checkpoint, or policy none), 1 when some will move or go to
    /// the shared pool (listed, with why), 2 on trouble (a checkpoint that
    /// cannot be read or is corrupt, a refused --apply, a bad command line).
    KubeletHandover(HandoverArgs),
}

#[derive(Debug, Args)]
pub struct HandoverArgs {
    /// The kubelet's CPU manager checkpoint [default: kubelet_cpu_manager_state
    /// of the configuration, /var/lib/kubelet/cpu_manager_state].
    #[arg(long, value_name = "PATH")]
    pub checkpoint: Option<PathBuf>,
    /// pinctld's configuration file, read for the cgroup tree, sysfs, the
    /// state file, the reserved CPUs, the rules and the checkpoint's path
    /// [default: /etc/pinctl/pinctld.toml, or the built-in defaults when
    /// it does not exist].
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Move the checkpoint aside (PATH.static-SECONDS): refused while a
    /// kubelet runs, or when it does not say static.
    #[arg(long)]
    pub apply: bool,
    /// procfs, where --apply looks for a running kubelet [default:
    /// proc_root of the configuration, /proc].
    #[arg(long, value_name = "DIR")]
    pub proc_root: Option<PathBuf>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// A failure that exits 2, not 1: `pinctl kubelet-handover` exits 1 when
/// containers will move, as `diff` exits 1 when files differ, and 2 on
/// trouble ([`exit_code`]).
#[derive(Debug)]
pub struct Trouble(pub anyhow::Error);

impl std::fmt::Display for Trouble {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#}", self.0)
    }
}

impl std::error::Error for Trouble {}

impl From<anyhow::Error> for Trouble {
    fn from(e: anyhow::Error) -> Self {
        Trouble(e)
    }
}

/// The exit code of a failed command: 2 for [`Trouble`], else 1.
pub fn exit_code(e: &anyhow::Error) -> u8 {
    match e.downcast_ref::<Trouble>() {
        Some(_) => 2,
        None => 1,
    }
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// How many exclusive CPUs.
    #[arg(short = 'n', long = "cpus", value_name = "N")]
    pub cpus: usize,
    /// The run's name, its workload being run:NAME (letters, digits, _ . -)
    /// [default: UID-N].
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Take the CPUs from these NUMA nodes alone (1, or 0-1); refused when
    /// they have too few free.
    #[arg(long = "numa-node", value_name = "NODES")]
    pub numa_node: Option<CpuSet>,
    /// Where the command's memory goes: bind (the NUMA nodes of its CPUs
    /// alone), prefer (there first, elsewhere when they are full) or none
    /// (the kernel's default) [default: [run] mem, prefer].
    #[arg(long, value_name = "POLICY")]
    pub mem: Option<crate::run::MemPolicy>,
    /// Whole physical cores only: every thread of each core is the run's,
    /// so nothing runs on a sibling (N a multiple of the threads per core).
    #[arg(long)]
    pub full_cores: bool,
    /// A device the command drives, its CPUs taken on its NUMA node: a
    /// network interface (ib0), a PCI address (0000:3b:00.0), a device
    /// path (/dev/nvidia0) or a CDI device (nvidia.com/gpu=0, through the
    /// daemon's cdi_spec_dirs); repeatable.
    #[arg(long, value_name = "DEVICE")]
    pub near: Vec<String>,
    /// How the CPUs follow --near's devices: prefer (there when they have
    /// room), require (there alone: refused, or waits with --wait, when
    /// they have too few free) or none [default: the daemon's
    /// device_alignment].
    #[arg(long, value_name = "HOW")]
    pub device_alignment: Option<crate::config::DeviceAlignment>,
    /// Also set OMP_NUM_THREADS to the CPUs' count, OMP_PLACES to one
    /// place per CPU and OMP_PROC_BIND=close: an OpenMP program's threads
    /// then stay one per CPU.
    #[arg(long)]
    pub omp: bool,
    /// When too few CPUs are free, wait in line for them this long (10s, 5m,
    /// 2h) instead of being refused at once. Asks are served in the order
    /// they came; while any waits, an ask without --wait is refused.
    #[arg(long, value_name = "DURATION", value_parser = parse_wait)]
    pub wait: Option<Duration>,
    /// The run socket [default: the [run] socket of the configuration,
    /// /run/pinctl/run.sock].
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// The daemon's configuration file, read for the run socket's path
    /// [default: /etc/pinctl/pinctld.toml, or the built-in defaults when it
    /// does not exist].
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// The command and its arguments (after --).
    #[arg(required = true, trailing_var_arg = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// How to reach the daemon.
#[derive(Debug, Args)]
pub struct Connect {
    /// The daemon's socket [default: the socket key of the configuration,
    /// /run/pinctl/pinctl.sock].
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// The daemon's configuration file, read for the socket's path and, where
    /// a command needs them, the cgroup tree, state file and subtrees
    /// [default: /etc/pinctl/pinctld.toml, or the built-in defaults when it
    /// does not exist].
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub connect: Connect,
    /// Print the status document as JSON, as pinctld serves it on
    /// /v1/status (its fields are described in
    /// /usr/share/doc/pinctl/cli.md; their version is the field schema).
    #[arg(long)]
    pub json: bool,
    /// Do not ask the daemon: build the status from its state file, the live
    /// cgroup tree and sysfs.
    #[arg(long)]
    pub offline: bool,
    /// Print one line, and exit 1 unless the daemon's first reconcile is
    /// done (a readiness probe): before it, pins of the last run may not be
    /// checked yet.
    #[arg(long, conflicts_with_all = ["json", "offline"])]
    pub ready: bool,
}

#[derive(Debug, Args)]
pub struct DescribeArgs {
    /// A workload key, cgroup path, pod UID or container id.
    #[arg(value_name = "TARGET")]
    pub target: String,
    #[command(flatten)]
    pub connect: Connect,
}

#[derive(Debug, Args)]
pub struct VerifyArgs {
    #[command(flatten)]
    pub connect: Connect,
    /// Take the intent from the daemon's state file instead of the daemon.
    #[arg(long)]
    pub offline: bool,
    /// The cgroup filesystem to check [default: cgroup_root of the
    /// configuration, /sys/fs/cgroup].
    #[arg(long, value_name = "DIR")]
    pub cgroup_root: Option<PathBuf>,
    /// procfs, for the tasks' affinity [default: proc_root of the
    /// configuration, /proc].
    #[arg(long, value_name = "DIR")]
    pub proc_root: Option<PathBuf>,
    /// sysfs, for the isolated CPUs [default: sysfs_root of the
    /// configuration, /sys].
    #[arg(long, value_name = "DIR")]
    pub sysfs_root: Option<PathBuf>,
    /// Print the report (what was checked, problems, warnings) as JSON.
    #[arg(long)]
    pub json: bool,
    /// Instead of the checks, measure for DURATION (10s, 1m) what else runs
    /// on the exclusive CPUs: tasks that are not the workload's, kernel
    /// threads, interrupts and softirqs, each with its class, why it ran
    /// there and what would remove it. Exits 1 when a neighbour or movable
    /// kernel work ran there. Needs root and tracefs; Ctrl-C ends it early.
    #[arg(long, value_name = "DURATION", value_parser = parse_wait)]
    pub noise: Option<Duration>,
    /// tracefs, for --noise [default: /sys/kernel/tracing, else
    /// /sys/kernel/debug/tracing].
    #[arg(long, value_name = "DIR", requires = "noise")]
    pub tracefs: Option<PathBuf>,
    /// With --noise: measure these CPUs (1,3-4) instead of the daemon's
    /// exclusive ones. Neither the daemon nor its state is asked: this
    /// measures any CPUs, before pinctl is deployed too. procfs is
    /// --proc-root, else /proc.
    #[arg(
        long,
        value_name = "LIST",
        requires = "noise",
        conflicts_with = "offline"
    )]
    pub cpus: Option<CpuSet>,
    /// With --cpus: process PID and its threads (and what they fork while
    /// measured) are the workload there; repeat it for more. Everything
    /// else that runs there is noise.
    #[arg(long = "pid", value_name = "PID", requires = "cpus")]
    pub pids: Vec<u32>,
}

#[derive(Debug, Args)]
pub struct EventsArgs {
    #[command(flatten)]
    pub connect: Connect,
    /// Keep printing new events as they come (polls every 500 ms) until
    /// interrupted.
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// Only events after sequence number N.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub since: u64,
    /// One JSON object a line, as pinctld serves them on /v1/events.
    #[arg(long)]
    pub json: bool,
}

/// The daemon's configuration file, where the packages install it and the
/// systemd unit points `pinctld --config`.
pub const CONFIG_FILE: &str = "/etc/pinctl/pinctld.toml";

/// The pinctl daemon: exclusive, topology-aware CPUs for workloads in a cgroup
/// tree.
///
/// pinctld runs in the foreground until SIGTERM or SIGINT. SIGHUP reads the
/// configuration file again, applies what changed (the file's paths, socket,
/// hierarchy, read_timeout and bundle_dirs wait for a restart; a file with an
/// error changes nothing) and reconciles every cgroup. Under systemd
/// (pinctld.service) it reports readiness after its first reconcile and pets
/// the watchdog.
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
    /// Split the request evenly across the fewest NUMA nodes that can hold an
    /// even split; else spread it as the kubelet does, never less evenly.
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
    /// A device the workload drives (ib0, 0000:3b:00.0, /dev/nvidia0,
    /// nvidia.com/gpu=0), found under --sysfs: its NUMA node first;
    /// repeatable.
    #[arg(long, value_name = "DEVICE")]
    pub near: Vec<String>,
    /// How the CPUs follow --near's devices: prefer, require (there
    /// alone) or none.
    #[arg(long, value_name = "HOW", default_value = "prefer")]
    pub device_alignment: crate::config::DeviceAlignment,
    /// The procfs where NVIDIA's driver says which GPU a /dev/nvidiaN is.
    #[arg(long = "proc", value_name = "DIR", default_value = "/proc")]
    pub proc_root: PathBuf,
    /// A directory of CDI spec files, where --near's CDI devices are
    /// found; repeatable, a later one's device winning.
    #[arg(long = "cdi-spec-dir", value_name = "DIR", default_values = ["/etc/cdi", "/var/run/cdi"])]
    pub cdi_spec_dirs: Vec<PathBuf>,
    /// Print the plan with per-CPU details and its alignment as JSON.
    #[arg(long)]
    pub json: bool,
    /// Also print the kernel command line for a node whose exclusive CPUs
    /// are the planned ones (isolcpus, nohz_full, rcu_nocbs, irqaffinity): it
    /// removes what cannot leave them at run time, and takes a reboot.
    #[arg(long)]
    pub boot_params: bool,
}

/// Runs a parsed command, writing its output to `out`.
pub fn run(cli: Cli, out: &mut dyn Write) -> Result<()> {
    let style = Style::detect(cli.color);
    match cli.command {
        Command::Topology(args) => machine::topology(&args, out),
        Command::Plan(args) => machine::plan(&args, out),
        Command::Status(args) => status_cmd(&args, style, out),
        Command::Describe(args) => describe_cmd(&args, style, out),
        Command::Verify(args) => verify_cmd(&args, style, out),
        Command::Events(args) => events_cmd(&args, style, out),
        Command::Run(args) => exec::run_cmd(&args),
        Command::KubeletHandover(args) => handover_cmd(&args, style, out),
    }
}

/// `pinctl kubelet-handover` ([`handover`]).
fn handover_cmd(args: &HandoverArgs, style: Style, out: &mut dyn Write) -> Result<()> {
    let config = load_config(args.config.as_deref()).map_err(Trouble::from)?;
    handover::run(&crate::io::RealFs, &config, args, style, out)
}

/// `--wait`'s and `--noise`'s durations, as the configuration writes them
/// (more than 0).
fn parse_wait(text: &str) -> Result<Duration, String> {
    crate::config::parse_duration(text).map_err(|e| e.to_string())
}

/// The configuration: the file given, or the default one, or (when the
/// default does not exist) the built-in defaults. An unreadable default file
/// is a warning on stderr; an invalid one is an error, as for the daemon.
pub fn load_config(path: Option<&Path>) -> Result<Config> {
    match path {
        Some(p) => Ok(config::load(p)?),
        None => match config::load(Path::new(CONFIG_FILE)) {
            Ok(c) => Ok(c),
            Err(ConfigError::Read {
                kind: std::io::ErrorKind::NotFound,
                ..
            }) => Ok(Config::default()),
            Err(e @ ConfigError::Read { .. }) => {
                eprintln!("pinctl: warning: {e}; using the built-in defaults");
                Ok(Config::default())
            }
            Err(e) => Err(e.into()),
        },
    }
}

/// The socket to use: `--socket`, else the configuration's.
fn socket_of(connect: &Connect) -> Result<PathBuf> {
    match &connect.socket {
        Some(p) => Ok(p.clone()),
        None => Ok(load_config(connect.config.as_deref())?.socket),
    }
}

/// A current-thread runtime for one command's requests.
fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// `err`, with the way out when the daemon is simply not running.
fn offer_offline(err: ClientError) -> anyhow::Error {
    if err.is_not_running() {
        anyhow!("{err}; run with --offline to read the state file and the cgroup tree directly")
    } else {
        err.into()
    }
}

fn status_cmd(args: &StatusArgs, style: Style, out: &mut dyn Write) -> Result<()> {
    let (status, notes) = if args.offline {
        let config = load_config(args.connect.config.as_deref())?;
        let o = offline::build(&config)?;
        (o.status, Some(o.notes))
    } else {
        let client = Client::new(socket_of(&args.connect)?);
        let status = runtime()?
            .block_on(client.status())
            .map_err(offer_offline)?;
        (status, None)
    };
    if args.ready {
        return status::readiness(&status.daemon).map(|line| {
            let _ = writeln!(out, "{line}");
        });
    }
    if args.json {
        serde_json::to_writer_pretty(&mut *out, &status)?;
        writeln!(out)?;
        return Ok(());
    }
    let mode = match &notes {
        Some(notes) => status::Mode::Offline { notes },
        None => status::Mode::Online,
    };
    out.write_all(status::render(&status, mode, style, api::unix_secs()).as_bytes())?;
    Ok(())
}

fn describe_cmd(args: &DescribeArgs, style: Style, out: &mut dyn Write) -> Result<()> {
    // The configuration names the socket and the cgroup root absolute
    // targets may start with; with --socket alone, the default one is read
    // only for the root, and not having it is no error.
    let config = match (&args.connect.socket, &args.connect.config) {
        (Some(_), None) => load_config(None).unwrap_or_default(),
        (_, path) => load_config(path.as_deref())?,
    };
    let socket = args
        .connect
        .socket
        .clone()
        .unwrap_or_else(|| config.socket.clone());
    let client = Client::new(socket);
    let rt = runtime()?;
    let status = rt.block_on(client.status())?;
    // The daemon's own root when it says, else the file's.
    let cgroup_root = if status.config.is_known() {
        status.config.cgroup_root.clone()
    } else {
        config.cgroup_root
    };
    let workload = match describe::find(&status, &args.target, &cgroup_root) {
        describe::Found::One(w) => w,
        describe::Found::Ambiguous(candidates) => {
            eprint!("{}", describe::render_candidates(&args.target, &candidates));
            bail!("{:?} is ambiguous", args.target);
        }
        describe::Found::Nothing => bail!(
            "no workload matches {:?}; cgroups that ask for no exclusive CPUs run on the shared pool ({})",
            args.target,
            status.shared_pool
        ),
    };
    let events = rt.block_on(client.events(0))?;
    let offset = events::local_offset(api::unix_secs() as i64);
    out.write_all(describe::render(&status, workload, &events, offset, style).as_bytes())?;
    Ok(())
}

fn verify_cmd(args: &VerifyArgs, style: Style, out: &mut dyn Write) -> Result<()> {
    let how = |duration| noise::How {
        tracefs: args.tracefs.clone(),
        duration,
        json: args.json,
        style,
    };
    if let (Some(duration), Some(cpus)) = (args.noise, &args.cpus) {
        let given = noise::Given {
            cpus: cpus.clone(),
            pids: args.pids.clone(),
        };
        let proc_root = args
            .proc_root
            .clone()
            .unwrap_or_else(|| PathBuf::from("/proc"));
        return noise::run_given(&given, &proc_root, &how(duration), out);
    }
    let config = load_config(args.connect.config.as_deref())?;
    let status = if args.offline {
        offline::build(&config)?.status
    } else {
        let socket = args
            .connect
            .socket
            .clone()
            .unwrap_or_else(|| config.socket.clone());
        runtime()?
            .block_on(Client::new(socket).status())
            .map_err(offer_offline)?
    };
    // What the daemon runs with when it says (its file may have changed
    // since), else the file's.
    let running = if status.config.is_known() {
        status.config.clone()
    } else {
        api::RunningConfig::of(&config)
    };
    let roots = verify::Roots {
        cgroup_root: args.cgroup_root.clone().unwrap_or(running.cgroup_root),
        proc_root: args.proc_root.clone().unwrap_or(running.proc_root),
        sysfs_root: args.sysfs_root.clone().unwrap_or(running.sysfs_root),
    };
    if let Some(duration) = args.noise {
        return noise::run(&status, &roots, &how(duration), out);
    }
    let scope = crate::cgroup::Scope::new(running.managed, running.shared_cgroups, Vec::new());
    let report = verify::verify(&status, &roots, &scope)?;
    if args.json {
        serde_json::to_writer_pretty(&mut *out, &report)?;
        writeln!(out)?;
    } else {
        out.write_all(verify::render(&report, style).as_bytes())?;
    }
    out.flush()?;
    match report.problems.len() {
        0 => Ok(()),
        1 => bail!("verify found 1 problem"),
        n => bail!("verify found {n} problems"),
    }
}

/// How often `events --follow` asks for new events.
pub const FOLLOW_INTERVAL: Duration = Duration::from_millis(500);

fn events_cmd(args: &EventsArgs, style: Style, out: &mut dyn Write) -> Result<()> {
    let client = Client::new(socket_of(&args.connect)?);
    let rt = runtime()?;
    rt.block_on(follow_events(&client, args, style, out))
}

/// Prints the events after `--since`, then with `--follow` polls for more
/// until interrupted. A daemon that goes away is waited for; one that came
/// back as a new process (its events numbered from 1 again) is followed from
/// its first event.
async fn follow_events(
    client: &Client,
    args: &EventsArgs,
    style: Style,
    out: &mut dyn Write,
) -> Result<()> {
    let identity = |s: &api::Status| (s.daemon.pid, s.daemon.started);
    let mut since = args.since;
    let mut daemon = if args.follow {
        Some(identity(&client.status().await?))
    } else {
        None
    };
    let mut down = false;
    loop {
        match client.events(since).await {
            Ok(events) => {
                if down {
                    down = false;
                    if let Ok(s) = client.status().await
                        && daemon != Some(identity(&s))
                    {
                        eprintln!(
                            "pinctl: pinctld restarted (pid {}); following it",
                            s.daemon.pid
                        );
                        daemon = Some(identity(&s));
                        since = 0;
                        continue;
                    }
                    eprintln!("pinctl: pinctld answers again");
                }
                if let Some(first) = events.first()
                    && since > 0
                    && first.seq > since + 1
                {
                    eprintln!(
                        "pinctl: events {}..{} are no longer kept by the daemon",
                        since + 1,
                        first.seq - 1
                    );
                }
                let offset = events::local_offset(api::unix_secs() as i64);
                for e in &events {
                    if args.json {
                        serde_json::to_writer(&mut *out, e)?;
                        writeln!(out)?;
                    } else {
                        writeln!(out, "{}", events::format_event(e, offset, style))?;
                    }
                    since = since.max(e.seq);
                }
                out.flush()?;
            }
            Err(e) if args.follow => {
                if !down {
                    // The error may carry the daemon's explanation.
                    eprintln!(
                        "pinctl: {}; retrying every {} ms",
                        style::visible(&e.to_string()),
                        FOLLOW_INTERVAL.as_millis()
                    );
                    down = true;
                }
            }
            Err(e) => return Err(e.into()),
        }
        if !args.follow {
            return Ok(());
        }
        tokio::select! {
            _ = tokio::time::sleep(FOLLOW_INTERVAL) => {}
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
    }
}
