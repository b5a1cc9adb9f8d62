//! The integration tests of pinctl, in one test binary (`cargo test --test
//! it`): one module per area, and the shared harness in [`support`] (fake
//! cgroup trees, the daemon launcher and its sd-notify reader, the one test
//! world of the daemon, watchdog and socket suites, synthetic status
//! documents, the kubelet's allocator model). One binary links the crate once
//! instead of once per file.
//!
//! Every test runs in this one process, in parallel with the others: a test
//! must not change process-wide state (environment variables, umask, the
//! working directory, resource limits, signal dispositions) in this process.
//! What a test needs changed it changes in the child it starts (see
//! `support::pinctld::Launch::nofile`), and every file it makes lives in its
//! own tempdir.
//!
//! Three suites stay binaries of their own, because CI runs them by name and
//! they are opt-in: `tests/real_cgroup_v1/` (`PINCTL_REAL_CGROUP=1`, one
//! test at a time, on this machine's real cgroup v1 hierarchy, with real
//! processes and runc's containers), `tests/tour/` (`PINCTL_REAL_CGROUP=1`,
//! the README's tour on this machine's real hierarchy) and
//! `tests/vm.rs` (`PINCTL_VM=1`, the VM test bed).

#[macro_use]
mod support;

mod allocator_props;
mod cli;
mod cli_client;
mod cli_status;
mod config;
mod daemon;
mod devices;
mod docs;
mod handover;
mod hostile_input;
mod housekeeping;
mod io_pool;
mod irq;
mod kubernetes;
mod layers;
mod layout;
mod noise;
mod nri;
mod nri_daemon;
mod owner;
mod packaging;
mod partition;
mod power;
mod quota;
mod rooms;
mod run;
mod slurm;
mod socket;
mod state_file;
mod sysfs_discovery;
mod systemd;
mod watchdog;
