//! Devices in a fake sysfs and procfs, laid out as the kernel lays them
//! out: device directories under `devices/` with `numa_node` (and
//! `local_cpulist` for PCI functions), and the relative links of
//! `bus/pci/devices/`, `class/net/` and `dev/{char,block}/` that lead to
//! them. On the `intel-2s-smt` fixture NUMA node 1 is CPUs 8-15,24-31.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;

/// A NIC on node 1: `ib0`.
pub const NIC: &str = "0000:3b:00.0";
/// An NVMe drive on node 1: `nvme0n1`, block 259:0.
pub const NVME: &str = "0000:5e:00.0";
/// A GPU whose firmware says no node (`numa_node` -1) but whose
/// `local_cpulist` is node 1's: its render node is char 226:128, and it is
/// NVIDIA's minor 0 (`char:195:0`, found through `proc/driver/nvidia/gpus`).
pub const GPU: &str = "0000:00:02.0";
/// Node 1's CPUs on the fixture.
pub const NODE1: &str = "8-15,24-31";

fn put(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

fn link(at: &Path, to: &str) {
    fs::create_dir_all(at.parent().unwrap()).unwrap();
    symlink(to, at).unwrap();
}

/// Adds the devices above to sysfs `sys` and procfs `proc_root`.
pub fn add(sys: &Path, proc_root: &Path) {
    let nic = sys.join("devices/pci0000:3a/0000:3a:00.0").join(NIC);
    put(&nic.join("numa_node"), "1\n");
    put(&nic.join("local_cpulist"), &format!("{NODE1}\n"));
    put(&nic.join("net/ib0/ifindex"), "3\n");
    let nvme = sys.join("devices/pci0000:5d/0000:5d:00.0").join(NVME);
    put(&nvme.join("numa_node"), "1\n");
    put(&nvme.join("local_cpulist"), &format!("{NODE1}\n"));
    put(&nvme.join("nvme/nvme0/nvme0n1/dev"), "259:0\n");
    let gpu = sys.join("devices/pci0000:00").join(GPU);
    put(&gpu.join("numa_node"), "-1\n");
    put(&gpu.join("local_cpulist"), &format!("{NODE1}\n"));
    put(&gpu.join("drm/renderD128/dev"), "226:128\n");
    put(&sys.join("devices/virtual/net/lo/ifindex"), "1\n");
    put(
        &sys.join("devices/platform/serial8250/tty/ttyS0/dev"),
        "4:64\n",
    );
    link(
        &sys.join("bus/pci/devices").join(NIC),
        &format!("../../../devices/pci0000:3a/0000:3a:00.0/{NIC}"),
    );
    link(
        &sys.join("bus/pci/devices").join(GPU),
        &format!("../../../devices/pci0000:00/{GPU}"),
    );
    link(
        &sys.join("class/net/ib0"),
        &format!("../../devices/pci0000:3a/0000:3a:00.0/{NIC}/net/ib0"),
    );
    link(&sys.join("class/net/lo"), "../../devices/virtual/net/lo");
    link(
        &sys.join("dev/block/259:0"),
        &format!("../../devices/pci0000:5d/0000:5d:00.0/{NVME}/nvme/nvme0/nvme0n1"),
    );
    link(
        &sys.join("dev/char/226:128"),
        &format!("../../devices/pci0000:00/{GPU}/drm/renderD128"),
    );
    link(
        &sys.join("dev/char/4:64"),
        "../../devices/platform/serial8250/tty/ttyS0",
    );
    // A link someone made that leads out of sysfs.
    link(&sys.join("dev/char/9:9"), "/tmp");
    put(
        &proc_root
            .join("driver/nvidia/gpus")
            .join(GPU)
            .join("information"),
        "Model: \t\t NVIDIA H100\nIRQ:   \t\t 42\nDevice Minor: \t 0\n",
    );
}

/// The CDI device whose spec in the later directory ([`add_cdi`]) holds the
/// NVMe drive on node 1, and in the earlier one a serial port on no node.
pub const CDI_DRIVE: &str = "example.com/disk=fast";

/// CDI spec files in `etc` and `run` (`cdi_spec_dirs` in that order):
/// [`CDI_DRIVE`] in both (the later, YAML, wins), `example.com/gpu=0` in
/// the earlier one (JSON, NVIDIA's minor 0 by path), and a file that is
/// no spec.
pub fn add_cdi(etc: &Path, run: &Path) {
    put(
        &etc.join("example.json"),
        r#"{"cdiVersion": "0.6.0", "kind": "example.com/disk",
            "devices": [{"name": "fast", "containerEdits": {"deviceNodes": [
                {"path": "/dev/ttyS0", "type": "c", "major": 4, "minor": 64}]}}]}"#,
    );
    put(
        &etc.join("gpu.json"),
        r#"{"cdiVersion": "0.6.0", "kind": "example.com/gpu",
            "devices": [{"name": "0", "containerEdits": {"deviceNodes": [
                {"path": "/dev/nvidia0", "type": "c", "major": 195, "minor": 0}]}}],
            "containerEdits": {"deviceNodes": [{"path": "/dev/nvidiactl"}]}}"#,
    );
    put(&etc.join("broken.yaml"), "kind: [\n");
    put(
        &run.join("example.yaml"),
        "cdiVersion: 0.6.0\nkind: example.com/disk\ndevices:\n- name: fast\n  containerEdits:\n    deviceNodes:\n    - path: /dev/nvme0n1\n      type: b\n      major: 259\n      minor: 0\n",
    );
}
