//! Workloads near their devices (issue #43), on a fake sysfs with devices
//! ([`fake_devices`]): where each kind of device is found to sit, or why
//! not; a container whose bundle holds an NVMe drive, one with the SR-IOV
//! device plugin's variable and a cgroup naming its NIC by xattr are each
//! pinned on node 1 while node 0 has room first; `describe` says so; with
//! `require` a workload waits, saying why, until node 1 has room. A bundle's
//! CDI annotation is resolved through the spec files of `cdi_spec_dirs`.
//! The VM bed proves the same on a real kernel, with a device qemu puts on
//! NUMA node 1.

use std::path::{Path, PathBuf};

use pinctl::devices::{DeviceRef, locate, nodes_of_place};
use pinctl::io::{NodeKind, RealFs};
use pinctl::topology::Topology;

use crate::support::fake_cgroup::{Driver, Qos, Spec, Version, container_id, set, uid};
use crate::support::fake_devices::{self, CDI_DRIVE, GPU, NIC, NODE1, NVME};
use crate::support::world::{FIXTURE, Options, World};

fn topology() -> Topology {
    pinctl::sysfs::Sysfs::new(Path::new(FIXTURE))
        .topology()
        .unwrap()
}

/// A sysfs and a procfs with the devices, in a tempdir.
fn trees() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let sys = tmp.path().join("sys");
    let proc_root = tmp.path().join("proc");
    fake_devices::add(&sys, &proc_root);
    std::fs::create_dir_all(sys.join("devices")).unwrap();
    (tmp, sys, proc_root)
}

#[test]
fn each_kind_of_device_is_placed_or_says_why() {
    let (tmp, sys, proc_root) = trees();
    let topo = topology();
    let number = |kind, major, minor| DeviceRef::Number { kind, major, minor };
    let placed = [
        (DeviceRef::Pci(NIC.into()), NIC),
        (DeviceRef::Net("ib0".into()), NIC),
        (number(NodeKind::Block, 259, 0), NVME),
        // numa_node -1: its local CPUs say where.
        (number(NodeKind::Char, 226, 128), GPU),
        // NVIDIA's own: the driver's procfs names its PCI address.
        (number(NodeKind::Char, 195, 0), GPU),
    ];
    for (what, pci) in placed {
        let place =
            locate(&RealFs, &sys, &proc_root, &what).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(place.pci.as_deref(), Some(pci), "{what}");
        assert_eq!(nodes_of_place(&topo, &place), [1], "{what}");
    }
    let file = tmp.path().join("plain-file");
    std::fs::write(&file, "").unwrap();
    let refused = [
        (DeviceRef::Net("lo".into()), "not on a bus with NUMA nodes"),
        (
            number(NodeKind::Char, 4, 64),
            "not on a bus with NUMA nodes",
        ),
        (DeviceRef::Pci("0000:99:00.0".into()), "no such device here"),
        (number(NodeKind::Char, 195, 1), "no such device here"),
        (number(NodeKind::Char, 9, 9), "outside"),
        (DeviceRef::Path(file.clone()), "is not a device node"),
    ];
    for (what, why) in refused {
        let e = locate(&RealFs, &sys, &proc_root, &what).unwrap_err();
        assert!(e.contains(why), "{what}: {e}");
    }
}

struct Env {
    w: World,
}

env_of_world!(Env);

impl Env {
    /// A started daemon on the fixture with the devices; `keys` for its
    /// configuration.
    fn start(name: &str, version: Version, keys: &[&str]) -> Env {
        let opts = Options {
            copy_sysfs: true,
            keys: keys.iter().map(|k| k.to_string()).collect(),
            ..Options::default()
        };
        let w = World::new(name, version, Driver::Systemd, &opts);
        fake_devices::add(&w.sysfs, &w.proc_root);
        let mut env = Env { w };
        env.w.start();
        env
    }

    /// Container `n` of a Guaranteed pod of its own, asking for `cpus` by
    /// its limit, whose bundle holds `linux` and `env` (as containerd
    /// writes them before the cgroup appears): its cgroup.
    fn container(&self, n: u32, cpus: u32, linux: serde_json::Value, env: &[&str]) -> String {
        let app = self.bundled(n, cpus, linux, env);
        self.tree.create(&app, &Spec::limit(cpus));
        app
    }

    /// [`Self::container`] whose limit is written after its cgroup
    /// appeared, as a runtime does: it is first read asking for nothing,
    /// its bundle remembered as a summary, then read whole.
    fn container_limited_later(&self, n: u32, cpus: u32, linux: serde_json::Value) -> String {
        let app = self.bundled(n, cpus, linux, &[]);
        self.tree.create(&app, &self.existing());
        // Long enough for the daemon to read it, asking nothing, first.
        std::thread::sleep(std::time::Duration::from_millis(500));
        self.tree
            .write_quota(&app, &(u64::from(cpus) * 100_000).to_string());
        app
    }

    /// The bundle of container `n`, its pod made: the container's cgroup
    /// (not made).
    fn bundled(&self, n: u32, cpus: u32, linux: serde_json::Value, env: &[&str]) -> String {
        self.annotated(n, cpus, linux, env, &[])
    }

    /// [`Self::bundled`] with more annotations.
    fn annotated(
        &self,
        n: u32,
        cpus: u32,
        linux: serde_json::Value,
        env: &[&str],
        more: &[(&str, &str)],
    ) -> String {
        let id = container_id(n);
        let dir = self.tmp.path().join("bundles").join(&id);
        std::fs::create_dir_all(&dir).unwrap();
        let mut config = serde_json::json!({
            "ociVersion": "1.1.0",
            "process": {"env": env},
            "linux": linux,
            "annotations": {
                "io.kubernetes.cri.container-type": "container",
                "io.kubernetes.cri.sandbox-uid": uid(n),
                "io.kubernetes.cri.container-name": format!("app{n}"),
            },
        });
        for (k, v) in more {
            config["annotations"][*k] = serde_json::json!(v);
        }
        std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
        let pod = self.k.pod(Qos::Guaranteed, &uid(n));
        self.tree.create(&pod, &Spec::limit(cpus));
        self.k.container(&pod, &id)
    }

    /// A cgroup of a Burstable pod of its own asking for `cpus` by xattr,
    /// and naming `near` by xattr, both set before it appears.
    fn asking(&self, n: u32, cpus: u32, near: &str) -> String {
        let pod = self.k.pod(Qos::Burstable, &uid(n));
        self.tree.create(&pod, &self.existing());
        let app = self.k.container(&pod, &container_id(n));
        let spec = self.existing().xattr(&cpus.to_string());
        self.tree.create_edited(&app, &spec, |dir| {
            xattr::set(dir, "user.pinctl.near", near.as_bytes()).unwrap();
        });
        app
    }
}

on_both_versions!(a_workload_is_pinned_near_its_devices => near_its_devices());

/// Node 0 has room first for every one of them (CPUs 1-7,17-23 are free).
fn near_its_devices(version: Version) {
    let env = Env::start("pinctld-devices", version, &[]);
    let node1 = set(NODE1);
    let drive = env.container(
        1,
        2,
        serde_json::json!({"devices": [
            {"path": "/dev/null", "type": "c", "major": 1, "minor": 3},
            {"path": "/dev/nvme0n1", "type": "b", "major": 259, "minor": 0},
        ]}),
        &[],
    );
    let vf = env.container(
        2,
        2,
        serde_json::json!({}),
        &[
            &format!("PCIDEVICE_INTEL_COM_SRIOV_NETDEVICE={NIC}"),
            "PATH=/bin",
        ],
    );
    let named = env.asking(3, 2, "ib0");
    let late = env.container_limited_later(
        4,
        2,
        serde_json::json!({"devices": [{"path": "/dev/dri/renderD128", "type": "c", "major": 226, "minor": 128}]}),
    );
    for rel in [&drive, &vf, &named, &late] {
        let got = env.wait_pinned(rel, 2);
        assert!(got.is_subset(&node1), "{rel}: {got}");
    }
    // The status is published a moment after the writes.
    let status = env.wait_for("the status to show the three pinned", || {
        let status = env.served()?;
        match status.workloads.iter().filter(|w| w.cpus.is_some()).count() {
            4 => Ok(status),
            n => Err(format!("{n} pinned")),
        }
    });
    let page = env.described(&drive);
    for want in ["block:259:0", NVME, "bundle's linux.devices", "node 1"] {
        assert!(page.contains(want), "describe lacks {want:?}:\n{page}");
    }
    assert!(!page.contains("char:1:3"), "/dev/null is listed:\n{page}");
    for w in &status.workloads {
        let near = w.near.as_ref().expect("its devices");
        assert_eq!(near.nodes, [1], "{}", w.key);
        assert_eq!(near.aligned(w.cpus.as_ref()), Some(true), "{}", w.key);
    }
    let vf = (status.workloads.iter().find(|w| w.cgroups.contains(&vf)))
        .unwrap_or_else(|| panic!("no workload of {vf} in {:?}", status.workloads));
    let found = &vf.near.as_ref().unwrap().devices[0].found;
    assert_eq!(
        found,
        "bundle's environment PCIDEVICE_INTEL_COM_SRIOV_NETDEVICE"
    );
}

#[test]
fn require_waits_until_the_devices_node_has_room_and_says_why() {
    let env = Env::start(
        "pinctld-devices-require",
        Version::V2,
        &["device_alignment = \"require\""],
    );
    let node1 = set(NODE1);
    let big = env.asking(1, 14, "ib0");
    assert!(env.wait_pinned(&big, 14).is_subset(&node1));
    let small = env.asking(2, 4, NIC);
    let reason = env.wait_for("the second to wait, saying why", || {
        let status = env.served()?;
        let w = status.workloads.iter().find(|w| w.cgroups.contains(&small));
        match w.and_then(|w| w.pending.clone()) {
            Some(p) => Ok(p.reason),
            None => Err("not waiting".into()),
        }
    });
    let want = format!("4 CPUs asked on NUMA node 1 (near {NIC}), 2 free there");
    assert!(reason.starts_with(&want), "{reason}");
    // Node 0 has room for it all along: it waits on the shared pool.
    env.tree.remove(&big);
    assert!(env.wait_pinned(&small, 4).is_subset(&node1));
}

/// A container whose runtime left its CDI devices in annotations only: the
/// spec files say which nodes they are (the later directory's YAML over
/// the earlier one's JSON), its memory follows with `align_memory`, and
/// one no spec names is shown with the reason.
#[test]
fn a_cdi_annotation_is_found_through_the_spec_files() {
    let tmp = tempfile::tempdir().unwrap();
    let (etc, run) = (tmp.path().join("etc-cdi"), tmp.path().join("run-cdi"));
    fake_devices::add_cdi(&etc, &run);
    let key = format!(
        "cdi_spec_dirs = [{:?}, {:?}]",
        etc.display().to_string(),
        run.display().to_string()
    );
    let env = Env::start(
        "pinctld-devices-cdi",
        Version::V2,
        &[&key, "align_memory = true"],
    );
    let list = format!("{CDI_DRIVE},example.com/disk=gone");
    let app = env.annotated(
        1,
        2,
        serde_json::json!({}),
        &[],
        &[("cdi.k8s.io/disk", &list)],
    );
    env.tree.create(&app, &Spec::limit(2));
    let got = env.wait_pinned(&app, 2);
    assert!(got.is_subset(&set(NODE1)), "{got}");
    // With align_memory, its memory follows its CPUs to the device's node.
    env.wait_for("its memory on node 1", || match env.tree.mems(&app) {
        m if m == set("1") => Ok(()),
        m => Err(format!("cpuset.mems {m}")),
    });
    // The status is published a moment after the writes.
    env.wait_for("the status to show it pinned", || {
        let status = env.served()?;
        match status.workloads.iter().any(|w| w.cpus.is_some()) {
            true => Ok(()),
            false => Err("not pinned".to_string()),
        }
    });
    let page = env.described(&app);
    for want in [
        "block:259:0 (CDI device example.com/disk=fast)",
        NVME,
        "example.com/disk=gone (bundle's annotation cdi.k8s.io/disk)",
        "no CDI spec in",
    ] {
        assert!(page.contains(want), "describe lacks {want:?}:\n{page}");
    }
}
