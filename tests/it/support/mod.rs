//! The shared harness of the integration tests: what more than one area
//! needs, and nothing that is one area's own.
//!
//! - [`fake_cgroup`]: fake cgroup v1 and v2 trees in a tempdir, the kubelet's
//!   cgroup names, and the `on_both_versions!` macro.
//! - [`pinctld`]: one run of the real `pinctld` binary and the reader of its
//!   sd-notify messages.
//! - [`status_doc`] and [`status_map`]: synthetic status documents, and the
//!   CPU map of `pinctl status` read back.
//! - [`fake_proc`]: tasks of a fake procfs (kernel threads and their
//!   allowed CPUs).
//! - [`nri_runtime`]: a stand-in container runtime speaking NRI to the
//!   plugin (issue #45).
//! - [`fake_power`]: a fake sysfs of power files and a file system that
//!   refuses the writes the kernel refuses (issue #35).
//! - [`fake_systemd`]: systemd's D-Bus API as the daemon uses it, on a
//!   private bus.
//! - [`kubelet`]: a model of the kubelet's packed CPU allocator.
//! - [`world`]: the one test world of the suites that run the real
//!   `pinctld` (daemon, watchdog, socket), and its `env_of_world!` macro.

#[macro_use]
pub mod fake_cgroup;
pub mod fake_devices;
pub mod fake_power;
pub mod fake_proc;
pub mod fake_systemd;
pub mod kubelet;
pub mod nri_runtime;
pub mod pinctld;
pub mod status_doc;
pub mod status_map;
#[macro_use]
pub mod world;

use std::fs;
use std::path::Path;

/// Copies directory `from` to `to`, recursively.
pub fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let dest = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &dest);
        } else {
            fs::copy(entry.path(), &dest).unwrap();
        }
    }
}
