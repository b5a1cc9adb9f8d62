//! Workloads near their devices (issue #43), on [`topo`]: node 0 is CPUs
//! 0-3,8-11 (0 and 8 reserved), node 1 is 4-7,12-15. Without its devices a
//! workload would take node 0 first, the node with room first.

use super::*;
use crate::config::DeviceAlignment;
use crate::devices::{Device, DeviceRef, Found, Located, Place};

const NODE1: &str = "4-7,12-15";

/// A PCI device placed by its `numa_node` (`node`), or by its
/// `local_cpulist` alone (`local`, with `numa_node` -1).
fn device(node: Option<u32>, local: Option<&str>) -> Located {
    Located {
        device: Device {
            what: DeviceRef::Pci("0000:3b:00.0".into()),
            found: Found::Xattr,
        },
        place: Ok(Place {
            pci: Some("0000:3b:00.0".into()),
            node,
            local_cpus: local.map(set),
        }),
    }
}

/// A device that could not be placed.
fn unplaced() -> Located {
    Located {
        device: Device {
            what: DeviceRef::Net("lo".into()),
            found: Found::Xattr,
        },
        place: Err("a virtual device".into()),
    }
}

fn near(n: usize, devices: Vec<Located>, mode: Option<DeviceAlignment>) -> Option<Intent> {
    let mut i = want(n)?;
    i.devices = devices;
    i.device_alignment = mode;
    Some(i)
}

/// `n` CPUs near a device on node 1, with `mode`.
fn near1(n: usize, mode: Option<DeviceAlignment>) -> Option<Intent> {
    near(n, vec![device(Some(1), None)], mode)
}

/// The status document's workload of cgroup `rel`.
fn shown(e: &Engine, rel: &str) -> api::Workload {
    let key = format!("cgroup:{rel}");
    let found = e.status_workloads().into_iter().find(|w| w.key == key);
    found.unwrap_or_else(|| panic!("no workload {key}"))
}

fn workload<'e>(e: &'e Engine, rel: &str) -> &'e Workload {
    &e.workloads()[&format!("cgroup:{rel}")]
}

fn cpus(e: &Engine, rel: &str) -> Option<CpuSet> {
    workload(e, rel).cpus.clone()
}

#[test]
fn a_workload_gets_its_cpus_on_its_devices_node_though_another_has_room_first() {
    let mut e = engine();
    kube_tree(&mut e);
    add(&mut e, "kubepods/plain", "0-15", want(2));
    add(&mut e, "kubepods/gpu", "0-15", near1(2, None));
    add(
        &mut e,
        "kubepods/silent",
        "0-15",
        near(2, vec![unplaced(), device(None, Some(NODE1))], None),
    );
    apply(&mut e);
    assert!(
        cpus(&e, "kubepods/plain")
            .unwrap()
            .is_subset(&set("1-3,9-11"))
    );
    for rel in ["kubepods/gpu", "kubepods/silent"] {
        let got = cpus(&e, rel).unwrap();
        assert!(got.is_subset(&set(NODE1)), "{rel}: {got}");
        // The status says so.
        let shown = shown(&e, rel);
        let n = shown.near.clone().unwrap();
        assert_eq!((n.nodes.as_slice(), n.cpus_near), (&[1][..], Some(2)));
        assert_eq!(n.aligned(shown.cpus.as_ref()), Some(true));
    }
    // The device that is not placed is listed, and says why.
    let silent = shown(&e, "kubepods/silent");
    let devices = &silent.near.as_ref().unwrap().devices;
    assert_eq!(devices[0].unknown.as_deref(), Some("a virtual device"));
    assert_eq!(devices[1].nodes, [1]);
}

#[test]
fn prefer_takes_what_the_node_has_and_the_rest_nearby_and_shows_the_split() {
    let mut e = engine();
    kube_tree(&mut e);
    add(&mut e, "kubepods/big", "0-15", near1(6, None));
    apply(&mut e);
    add(&mut e, "kubepods/nic", "0-15", near1(4, None));
    apply(&mut e);
    let got = cpus(&e, "kubepods/nic").unwrap();
    assert_eq!(got.intersection(&set(NODE1)).len(), 2, "{got}");
    let nic = shown(&e, "kubepods/nic");
    let n = nic.near.as_ref().unwrap();
    assert_eq!(n.cpus_near, Some(2));
    assert_eq!(n.aligned(nic.cpus.as_ref()), Some(false));
}

#[test]
fn require_waits_for_room_on_the_devices_node_and_says_why() {
    let mut e = engine();
    kube_tree(&mut e);
    add(&mut e, "kubepods/big", "0-15", near1(6, None));
    apply(&mut e);
    let need = Some(DeviceAlignment::Require);
    add(&mut e, "kubepods/nic", "0-15", near1(4, need));
    apply(&mut e);
    let w = workload(&e, "kubepods/nic");
    assert_eq!(w.cpus, None);
    let p = w.pending.clone().unwrap();
    assert!(
        p.reason
            .starts_with("4 CPUs asked on NUMA node 1 (near 0000:3b:00.0), 2 free there"),
        "{}",
        p.reason
    );
    assert_eq!(target(&e, "kubepods/nic"), e.shared_pool());
    // The file's default does the same.
    let mut s = e.settings().clone();
    s.device_alignment = DeviceAlignment::Require;
    e.set_settings(s);
    add(&mut e, "kubepods/nic2", "0-15", near1(2, None));
    apply(&mut e);
    assert_eq!(
        cpus(&e, "kubepods/nic2").map(|c| c.is_subset(&set(NODE1))),
        Some(true)
    );
    assert_eq!(workload(&e, "kubepods/nic").cpus, None);
    // Room on node 1: placed there.
    e.forget("kubepods/big");
    apply(&mut e);
    let got = cpus(&e, "kubepods/nic").unwrap();
    assert!(got.is_subset(&set(NODE1)), "{got}");
}

#[test]
fn nodes_named_by_the_workload_or_none_leave_the_devices_out() {
    let mut e = engine();
    kube_tree(&mut e);
    let mut named = near1(2, None);
    named.as_mut().unwrap().numa = vec![0];
    add(&mut e, "kubepods/named", "0-15", named);
    let none = Some(DeviceAlignment::None);
    add(&mut e, "kubepods/blind", "0-15", near1(2, none));
    apply(&mut e);
    for rel in ["kubepods/named", "kubepods/blind"] {
        let got = cpus(&e, rel).unwrap();
        assert!(got.is_subset(&set("1-3,9-11")), "{rel}: {got}");
    }
}

#[test]
fn a_grow_prefers_the_devices_node() {
    let mut e = engine();
    kube_tree(&mut e);
    add(&mut e, "kubepods/gpu", "0-15", near1(2, None));
    apply(&mut e);
    let first = cpus(&e, "kubepods/gpu").unwrap();
    add(&mut e, "kubepods/gpu", &first.to_string(), near1(6, None));
    apply(&mut e);
    let grown = cpus(&e, "kubepods/gpu").unwrap();
    assert!(
        first.is_subset(&grown) && grown.is_subset(&set(NODE1)),
        "{grown}"
    );
}

/// What a step of [`require_never_places_a_workload_off_its_devices_nodes`] does.
#[derive(Debug, Clone)]
enum Op {
    /// Workload `i` asks for `n` CPUs near a device on `node` (none: no
    /// device), requiring it or not; asked again, only its count changes
    /// (a resize: a workload's devices are its bundle's).
    Add {
        i: u8,
        n: usize,
        node: Option<u32>,
        require: bool,
    },
    Remove(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u8..6, 1usize..6, prop::option::of(0u32..2), any::<bool>())
            .prop_map(|(i, n, node, require)| Op::Add { i, n, node, require }),
        1 => (0u8..6).prop_map(Op::Remove),
    ]
}

proptest! {
    /// With `require`, no workload with placed devices is ever given a CPU
    /// off their nodes, whatever comes, goes and resizes.
    #[test]
    fn require_never_places_a_workload_off_its_devices_nodes(ops in prop::collection::vec(op(), 1..24)) {
        let mut e = engine();
        kube_tree(&mut e);
        let mut asked: BTreeMap<u8, (Option<u32>, bool)> = BTreeMap::new();
        for op in ops {
            match op {
                Op::Add { i, n, node, require } => {
                    let (node, require) = *asked.entry(i).or_insert((node, require));
                    let devices = node.map(|n| vec![device(Some(n), None)]).unwrap_or_default();
                    let mode = require.then_some(DeviceAlignment::Require);
                    add(&mut e, &format!("kubepods/w{i}"), "0-15", near(n, devices, mode));
                }
                Op::Remove(i) => {
                    e.forget(&format!("kubepods/w{i}"));
                    asked.remove(&i);
                }
            }
            apply(&mut e);
            for (i, (node, require)) in &asked {
                let (Some(node), true) = (node, require) else { continue };
                let rel = format!("kubepods/w{i}");
                if let Some(c) = cpus(&e, &rel) {
                    let on = e.numa_cpus(&[*node]);
                    prop_assert!(c.is_subset(&on), "{rel} near node {node} got {c}");
                }
            }
        }
    }
}
