//! pinctl: exclusive, topology-aware CPUs for Linux workloads, straight on the
//! cgroup filesystem.
//!
//! The library holds everything; the binaries `pinctl` and `pinctld` are thin
//! glue. `ARCHITECTURE.md` maps the modules, the data flow and the invariants.

pub mod alloc;
pub mod api;
pub mod bootline;
pub mod cgroup;
pub mod cli;
pub mod client;
pub mod config;
pub mod cpuset;
pub mod daemon;
pub mod devices;
pub mod engine;
pub mod housekeeping;
pub mod intent;
pub mod io;
pub mod irq;
pub mod kubelet;
pub mod metrics;
pub mod noise;
pub mod nri;
pub mod partition;
pub mod power;
pub mod procfs;
pub mod run;
pub mod server;
pub mod slurm;
pub mod state;
pub mod steer;
pub mod sysfs;
pub mod systemd;
pub mod task;
pub mod topology;
pub mod watch;
pub mod watchdog;

pub use cpuset::CpuSet;
pub use topology::Topology;
