//! The shared harness of the integration tests: what more than one area
//! needs, and nothing that is one area's own.
//!
//! - [`fake_cgroup`]: fake cgroup v1 and v2 trees in a tempdir, the kubelet's
//!   cgroup names, and the `on_both_versions!` macro.
//! - [`pinctld`]: one run of the real `pinctld` binary and the reader of its
//!   sd-notify messages.
//! - [`status_doc`] and [`status_map`]: synthetic status documents, and the
//!   CPU map of `pinctl status` read back.
//! - [`kubelet`]: a model of the kubelet's packed CPU allocator.

#[macro_use]
pub mod fake_cgroup;
pub mod kubelet;
pub mod pinctld;
pub mod status_doc;
pub mod status_map;
pub mod world;
