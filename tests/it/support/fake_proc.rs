//! Tasks of a fake procfs, as the housekeeping pass reads them (`stat`'s
//! flags and start time, `status`'s allowed CPUs) and writes them (the
//! daemon's `set_affinity` rewrites `status` on a tree that is not procfs).

use std::fs;
use std::path::Path;

use pinctl::CpuSet;

use super::fake_cgroup::set;

/// `PF_KTHREAD`: a kernel thread.
pub const PF_KTHREAD: u32 = 0x0020_0000;
/// `PF_NO_SETAFFINITY`: a thread the kernel keeps where it is.
pub const PF_NO_SETAFFINITY: u32 = 0x0400_0000;

/// Makes task `pid` in the fake procfs `proc_root` (a kernel thread when
/// `flags` has [`PF_KTHREAD`]), started at `start`, allowed on `cpus`.
pub fn task(proc_root: &Path, pid: u32, comm: &str, cpus: &str, flags: u32, start: u64) {
    let dir = proc_root.join(pid.to_string());
    fs::create_dir_all(&dir).unwrap();
    fs::write(
        dir.join("stat"),
        format!("{pid} ({comm}) S 2 0 0 0 -1 {flags} 0 0 0 0 0 0 0 0 20 0 1 0 {start} 0 0\n"),
    )
    .unwrap();
    fs::write(
        dir.join("status"),
        format!(
            "Name:\t{comm}\nState:\tS (sleeping)\nCpus_allowed:\t{}\nCpus_allowed_list:\t{cpus}\n",
            set(cpus).to_mask()
        ),
    )
    .unwrap();
}

/// The CPUs task `pid` of the fake procfs `proc_root` may run on.
pub fn allowed(proc_root: &Path, pid: u32) -> CpuSet {
    let text = fs::read_to_string(proc_root.join(pid.to_string()).join("status")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}
