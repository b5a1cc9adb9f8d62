//! `pinctld`, the CPU-pinning daemon.
//!
//! The watch-decide-write loop is tracked in issue #3. Until it lands, the binary
//! checks that it can read the machine's topology and says plainly that the
//! daemon does not run yet, rather than pretending to.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// The pinctl daemon: exclusive CPUs for workloads in a cgroup tree.
#[derive(Debug, Parser)]
#[command(name = "pinctld", version)]
struct Args {
    /// The sysfs root to read the CPU topology from.
    #[arg(long, value_name = "DIR", default_value = "/sys")]
    sysfs: PathBuf,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match pinctl::sysfs::Sysfs::new(&args.sysfs).topology() {
        Ok(topo) => {
            eprintln!(
                "pinctld: topology has {} CPUs on {} NUMA nodes; the daemon loop is not implemented yet",
                topo.online().len(),
                topo.numa_nodes().len()
            );
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("pinctld: {:#}", anyhow::Error::from(e));
            ExitCode::from(1)
        }
    }
}
