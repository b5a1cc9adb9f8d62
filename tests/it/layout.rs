//! Tests for `pinctl::cgroup::layout::classify`: a table of paths as they appear
//! on real nodes (both kubelet cgroup drivers, every QoS class and runtime,
//! custom cgroup roots, sloppy slashes, malformed names), and property tests
//! that `classify` is total and consistent on arbitrary input.

use pinctl::cgroup::layout::{Driver, Kind, Pod, Qos, Runtime, classify, standalone_container};
use proptest::prelude::*;
use proptest::test_runner::Config;

// Pod UIDs as the API server prints them, and a static pod's (MD5 of the manifest).
const G_UID: &str = "190bf0c3-921b-4ecb-b2f9-6f8a82af3b3e";
const B_UID: &str = "39731caf-db29-490d-8dab-06622cba6b2e";
const E_UID: &str = "ccbf564a-5cf9-469b-bc77-079644067755";
const STATIC_UID: &str = "23bf405a0fd421db652e755f01a6e87c";

// Container ids as runtimes write them.
const C1: &str = "f42deac8960e4b15e6b5bbbb317fe052ae349fcd3a35293bf4b3bb8f45d2aea9";
const C2: &str = "7249ed1545a8eddf52427ede7b280b688049305692a5450b35a7ab84e278ecfe";
const C3: &str = "19023cb5466b6ddce2bad1e2c008a31afb3272afd12db847ba9c46a1da89e595";
const C4: &str = "e839ea5e5d7e53c44681cff88aae4cdabe88b51aa1deac0b12580c1ff157bc4f";

// Pod cgroups that several rows share.
const SD_G: &str = "kubepods.slice/kubepods-pod190bf0c3_921b_4ecb_b2f9_6f8a82af3b3e.slice";
const SD_B: &str = "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod39731caf_db29_490d_8dab_06622cba6b2e.slice";
const SD_E: &str = "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podccbf564a_5cf9_469b_bc77_079644067755.slice";
const FS_G: &str = "kubepods/pod190bf0c3-921b-4ecb-b2f9-6f8a82af3b3e";
const FS_B: &str = "kubepods/burstable/pod39731caf-db29-490d-8dab-06622cba6b2e";
const FS_E: &str = "kubepods/besteffort/podccbf564a-5cf9-469b-bc77-079644067755";

fn pod(uid: &str, qos: Qos, driver: Driver, path: &str) -> Pod {
    Pod {
        uid: uid.to_owned(),
        qos,
        driver,
        path: path.to_owned(),
    }
}

fn sd_g() -> Pod {
    pod(G_UID, Qos::Guaranteed, Driver::Systemd, SD_G)
}

fn sd_b() -> Pod {
    pod(B_UID, Qos::Burstable, Driver::Systemd, SD_B)
}

fn sd_e() -> Pod {
    pod(E_UID, Qos::BestEffort, Driver::Systemd, SD_E)
}

fn fs_g() -> Pod {
    pod(G_UID, Qos::Guaranteed, Driver::Cgroupfs, FS_G)
}

fn fs_b() -> Pod {
    pod(B_UID, Qos::Burstable, Driver::Cgroupfs, FS_B)
}

fn fs_e() -> Pod {
    pod(E_UID, Qos::BestEffort, Driver::Cgroupfs, FS_E)
}

fn container(pod: Pod, id: &str, runtime: Runtime) -> Kind {
    Kind::Container {
        pod,
        id: id.to_owned(),
        runtime,
        conmon: false,
    }
}

fn conmon(pod: Pod, id: &str, runtime: Runtime) -> Kind {
    Kind::Container {
        pod,
        id: id.to_owned(),
        runtime,
        conmon: true,
    }
}

fn inside(pod: Pod, id: &str, runtime: Runtime) -> Kind {
    Kind::InsideContainer {
        pod,
        id: id.to_owned(),
        runtime,
    }
}

fn qos_parent(qos: Qos, driver: Driver) -> Kind {
    Kind::QosParent { qos, driver }
}

/// Every row: a path and what it must classify as.
fn table() -> Vec<(&'static str, Kind)> {
    use Driver::{Cgroupfs, Systemd};
    use Qos::{BestEffort, Burstable, Guaranteed};
    vec![
        // --- systemd driver: the levels above containers --------------------
        ("kubepods.slice", Kind::KubepodsRoot { driver: Systemd }),
        (
            "kubepods.slice/kubepods-burstable.slice",
            qos_parent(Burstable, Systemd),
        ),
        (
            "kubepods.slice/kubepods-besteffort.slice",
            qos_parent(BestEffort, Systemd),
        ),
        // Guaranteed: directly below the root; `_` in the name, `-` in the UID.
        (
            "kubepods.slice/kubepods-pod190bf0c3_921b_4ecb_b2f9_6f8a82af3b3e.slice",
            Kind::Pod(sd_g()),
        ),
        (
            "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod39731caf_db29_490d_8dab_06622cba6b2e.slice",
            Kind::Pod(sd_b()),
        ),
        (
            "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podccbf564a_5cf9_469b_bc77_079644067755.slice",
            Kind::Pod(sd_e()),
        ),
        // --- systemd driver: every runtime ----------------------------------
        (
            "kubepods.slice/kubepods-pod190bf0c3_921b_4ecb_b2f9_6f8a82af3b3e.slice/cri-containerd-f42deac8960e4b15e6b5bbbb317fe052ae349fcd3a35293bf4b3bb8f45d2aea9.scope",
            container(sd_g(), C1, Runtime::Containerd),
        ),
        (
            "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod39731caf_db29_490d_8dab_06622cba6b2e.slice/crio-7249ed1545a8eddf52427ede7b280b688049305692a5450b35a7ab84e278ecfe.scope",
            container(sd_b(), C2, Runtime::Crio),
        ),
        (
            "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod39731caf_db29_490d_8dab_06622cba6b2e.slice/crio-conmon-7249ed1545a8eddf52427ede7b280b688049305692a5450b35a7ab84e278ecfe.scope",
            conmon(sd_b(), C2, Runtime::Crio),
        ),
        (
            "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podccbf564a_5cf9_469b_bc77_079644067755.slice/docker-19023cb5466b6ddce2bad1e2c008a31afb3272afd12db847ba9c46a1da89e595.scope",
            container(sd_e(), C3, Runtime::Docker),
        ),
        (
            "kubepods.slice/kubepods-pod190bf0c3_921b_4ecb_b2f9_6f8a82af3b3e.slice/libpod-e839ea5e5d7e53c44681cff88aae4cdabe88b51aa1deac0b12580c1ff157bc4f.scope",
            container(sd_g(), C4, Runtime::Podman),
        ),
        (
            "kubepods.slice/kubepods-pod190bf0c3_921b_4ecb_b2f9_6f8a82af3b3e.slice/libpod-conmon-e839ea5e5d7e53c44681cff88aae4cdabe88b51aa1deac0b12580c1ff157bc4f.scope",
            conmon(sd_g(), C4, Runtime::Podman),
        ),
        // Ids: uppercase hex and short ids are kept as written.
        (
            "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podccbf564a_5cf9_469b_bc77_079644067755.slice/docker-19023CB5466B6DDCE2BAD1E2C008A31AFB3272AFD12DB847BA9C46A1DA89E595.scope",
            container(
                sd_e(),
                "19023CB5466B6DDCE2BAD1E2C008A31AFB3272AFD12DB847BA9C46A1DA89E595",
                Runtime::Docker,
            ),
        ),
        (
            "kubepods.slice/kubepods-pod190bf0c3_921b_4ecb_b2f9_6f8a82af3b3e.slice/cri-containerd-abc123.scope",
            container(sd_g(), "abc123", Runtime::Containerd),
        ),
        // A scope of an unknown runtime, or a known prefix with a non-hex id:
        // still a container, id = the whole name before `.scope`.
        (
            "kubepods.slice/kubepods-pod190bf0c3_921b_4ecb_b2f9_6f8a82af3b3e.slice/runc-f42deac8960e4b15e6b5bbbb317fe052ae349fcd3a35293bf4b3bb8f45d2aea9.scope",
            container(
                sd_g(),
                "runc-f42deac8960e4b15e6b5bbbb317fe052ae349fcd3a35293bf4b3bb8f45d2aea9",
                Runtime::Unknown,
            ),
        ),
        (
            "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod39731caf_db29_490d_8dab_06622cba6b2e.slice/crio-sandbox.scope",
            container(sd_b(), "crio-sandbox", Runtime::Unknown),
        ),
        // --- systemd driver: sub-cgroups inside a container -------------------
        (
            "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod39731caf_db29_490d_8dab_06622cba6b2e.slice/crio-7249ed1545a8eddf52427ede7b280b688049305692a5450b35a7ab84e278ecfe.scope/container",
            inside(sd_b(), C2, Runtime::Crio),
        ),
        (
            "kubepods.slice/kubepods-pod190bf0c3_921b_4ecb_b2f9_6f8a82af3b3e.slice/cri-containerd-f42deac8960e4b15e6b5bbbb317fe052ae349fcd3a35293bf4b3bb8f45d2aea9.scope/init.scope",
            inside(sd_g(), C1, Runtime::Containerd),
        ),
        (
            "kubepods.slice/kubepods-pod190bf0c3_921b_4ecb_b2f9_6f8a82af3b3e.slice/cri-containerd-f42deac8960e4b15e6b5bbbb317fe052ae349fcd3a35293bf4b3bb8f45d2aea9.scope/system.slice/dbus.service",
            inside(sd_g(), C1, Runtime::Containerd),
        ),
        // --- systemd driver: static pods (32 hex digits, kept as given) -------
        (
            "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod23bf405a0fd421db652e755f01a6e87c.slice",
            Kind::Pod(pod(
                STATIC_UID,
                Burstable,
                Systemd,
                "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod23bf405a0fd421db652e755f01a6e87c.slice",
            )),
        ),
        (
            "kubepods.slice/kubepods-pod23bf405a0fd421db652e755f01a6e87c.slice/cri-containerd-f42deac8960e4b15e6b5bbbb317fe052ae349fcd3a35293bf4b3bb8f45d2aea9.scope",
            container(
                pod(
                    STATIC_UID,
                    Guaranteed,
                    Systemd,
                    "kubepods.slice/kubepods-pod23bf405a0fd421db652e755f01a6e87c.slice",
                ),
                C1,
                Runtime::Containerd,
            ),
        ),
        // --- systemd driver: custom --cgroup-root=/kubelet -------------------
        (
            "kubelet.slice/kubelet-kubepods.slice",
            Kind::KubepodsRoot { driver: Systemd },
        ),
        (
            "kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice",
            qos_parent(BestEffort, Systemd),
        ),
        (
            "kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-pod190bf0c3_921b_4ecb_b2f9_6f8a82af3b3e.slice",
            Kind::Pod(pod(
                G_UID,
                Guaranteed,
                Systemd,
                "kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-pod190bf0c3_921b_4ecb_b2f9_6f8a82af3b3e.slice",
            )),
        ),
        (
            "kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/kubelet-kubepods-burstable-pod39731caf_db29_490d_8dab_06622cba6b2e.slice/cri-containerd-f42deac8960e4b15e6b5bbbb317fe052ae349fcd3a35293bf4b3bb8f45d2aea9.scope",
            container(
                pod(
                    B_UID,
                    Burstable,
                    Systemd,
                    "kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/kubelet-kubepods-burstable-pod39731caf_db29_490d_8dab_06622cba6b2e.slice",
                ),
                C1,
                Runtime::Containerd,
            ),
        ),
        // A kind node: the kubelet runs in a Docker container on the host, so
        // the host sees its kubepods root below the node container's scope.
        (
            "system.slice/docker-e839ea5e5d7e53c44681cff88aae4cdabe88b51aa1deac0b12580c1ff157bc4f.scope/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-podccbf564a_5cf9_469b_bc77_079644067755.slice/cri-containerd-f42deac8960e4b15e6b5bbbb317fe052ae349fcd3a35293bf4b3bb8f45d2aea9.scope",
            container(
                pod(
                    E_UID,
                    BestEffort,
                    Systemd,
                    "system.slice/docker-e839ea5e5d7e53c44681cff88aae4cdabe88b51aa1deac0b12580c1ff157bc4f.scope/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-podccbf564a_5cf9_469b_bc77_079644067755.slice",
                ),
                C1,
                Runtime::Containerd,
            ),
        ),
        // --- systemd driver: sloppy slashes ----------------------------------
        ("/kubepods.slice/", Kind::KubepodsRoot { driver: Systemd }),
        (
            "/kubepods.slice/kubepods-pod190bf0c3_921b_4ecb_b2f9_6f8a82af3b3e.slice",
            Kind::Pod(sd_g()),
        ),
        (
            "//kubepods.slice//kubepods-burstable.slice///kubepods-burstable-pod39731caf_db29_490d_8dab_06622cba6b2e.slice//crio-7249ed1545a8eddf52427ede7b280b688049305692a5450b35a7ab84e278ecfe.scope//",
            container(sd_b(), C2, Runtime::Crio),
        ),
        // --- cgroupfs driver ----------------------------------------------------
        ("kubepods", Kind::KubepodsRoot { driver: Cgroupfs }),
        ("kubepods/burstable", qos_parent(Burstable, Cgroupfs)),
        ("/kubepods/besteffort/", qos_parent(BestEffort, Cgroupfs)),
        (
            "kubepods/pod190bf0c3-921b-4ecb-b2f9-6f8a82af3b3e",
            Kind::Pod(fs_g()),
        ),
        (
            "kubepods/burstable/pod39731caf-db29-490d-8dab-06622cba6b2e/",
            Kind::Pod(fs_b()),
        ),
        // containerd and Docker both name the directory by the bare id.
        (
            "kubepods/burstable/pod39731caf-db29-490d-8dab-06622cba6b2e/f42deac8960e4b15e6b5bbbb317fe052ae349fcd3a35293bf4b3bb8f45d2aea9",
            container(fs_b(), C1, Runtime::Unknown),
        ),
        (
            "kubepods/pod190bf0c3-921b-4ecb-b2f9-6f8a82af3b3e/19023cb5466b6ddce2bad1e2c008a31afb3272afd12db847ba9c46a1da89e595",
            container(fs_g(), C3, Runtime::Unknown),
        ),
        (
            "kubepods/besteffort/podccbf564a-5cf9-469b-bc77-079644067755/crio-7249ed1545a8eddf52427ede7b280b688049305692a5450b35a7ab84e278ecfe",
            container(fs_e(), C2, Runtime::Crio),
        ),
        (
            "kubepods/besteffort/podccbf564a-5cf9-469b-bc77-079644067755/crio-conmon-7249ed1545a8eddf52427ede7b280b688049305692a5450b35a7ab84e278ecfe",
            conmon(fs_e(), C2, Runtime::Crio),
        ),
        (
            "kubepods/pod190bf0c3-921b-4ecb-b2f9-6f8a82af3b3e/19023cb5466b6ddce2bad1e2c008a31afb3272afd12db847ba9c46a1da89e595/init.scope",
            inside(fs_g(), C3, Runtime::Unknown),
        ),
        (
            "//kubepods//besteffort/podccbf564a-5cf9-469b-bc77-079644067755//crio-7249ed1545a8eddf52427ede7b280b688049305692a5450b35a7ab84e278ecfe/container/",
            inside(fs_e(), C2, Runtime::Crio),
        ),
        (
            "kubepods/pod23bf405a0fd421db652e755f01a6e87c/f42deac8960e4b15e6b5bbbb317fe052ae349fcd3a35293bf4b3bb8f45d2aea9",
            container(
                pod(
                    STATIC_UID,
                    Guaranteed,
                    Cgroupfs,
                    "kubepods/pod23bf405a0fd421db652e755f01a6e87c",
                ),
                C1,
                Runtime::Unknown,
            ),
        ),
        // Custom --cgroup-root=/kubelet, and one that itself ends in `kubepods`.
        (
            "kubelet/kubepods/burstable/pod39731caf-db29-490d-8dab-06622cba6b2e/f42deac8960e4b15e6b5bbbb317fe052ae349fcd3a35293bf4b3bb8f45d2aea9",
            container(
                pod(
                    B_UID,
                    Burstable,
                    Cgroupfs,
                    "kubelet/kubepods/burstable/pod39731caf-db29-490d-8dab-06622cba6b2e",
                ),
                C1,
                Runtime::Unknown,
            ),
        ),
        (
            "kubepods/kubepods/besteffort/podccbf564a-5cf9-469b-bc77-079644067755",
            Kind::Pod(pod(
                E_UID,
                BestEffort,
                Cgroupfs,
                "kubepods/kubepods/besteffort/podccbf564a-5cf9-469b-bc77-079644067755",
            )),
        ),
        // --- not kubepods at all ----------------------------------------------
        ("", Kind::Other),
        ("/", Kind::Other),
        ("//", Kind::Other),
        ("system.slice/containerd.service", Kind::Other),
        ("user.slice/user-1000.slice/session-3.scope", Kind::Other),
        ("kubepods.slice.bak", Kind::Other),
        ("mykubepods/burstable", Kind::Other),
        // systemd rejects these slice names, so they are no kubepods root.
        ("-kubepods.slice", Kind::Other),
        ("kubelet--kubepods.slice", Kind::Other),
        // --- malformed names under a kubepods root ----------------------------
        (
            "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podXYZ.slice",
            Kind::Other,
        ),
        ("kubepods/burstable/podXYZ", Kind::Other),
        // A Burstable pod name directly under the root.
        (
            "kubepods.slice/kubepods-burstable-pod39731caf_db29_490d_8dab_06622cba6b2e.slice",
            Kind::Other,
        ),
        // A Guaranteed pod name under a QoS parent, and a QoS mismatch.
        (
            "kubepods.slice/kubepods-burstable.slice/kubepods-pod190bf0c3_921b_4ecb_b2f9_6f8a82af3b3e.slice",
            Kind::Other,
        ),
        (
            "kubepods.slice/kubepods-burstable.slice/kubepods-besteffort-podccbf564a_5cf9_469b_bc77_079644067755.slice",
            Kind::Other,
        ),
        // QoS classes that do not exist as cgroups.
        ("kubepods.slice/kubepods-guaranteed.slice", Kind::Other),
        ("kubepods/guaranteed", Kind::Other),
        ("kubepods/Burstable", Kind::Other),
        // A custom root whose children do not carry its prefix.
        (
            "kubelet.slice/kubelet-kubepods.slice/kubepods-burstable.slice",
            Kind::Other,
        ),
        // UIDs: dashes under systemd, underscores under cgroupfs, uppercase, truncated.
        (
            "kubepods.slice/kubepods-pod190bf0c3-921b-4ecb-b2f9-6f8a82af3b3e.slice",
            Kind::Other,
        ),
        (
            "kubepods/pod190bf0c3_921b_4ecb_b2f9_6f8a82af3b3e",
            Kind::Other,
        ),
        (
            "kubepods/pod190BF0C3-921B-4ECB-B2F9-6F8A82AF3B3E",
            Kind::Other,
        ),
        ("kubepods/burstable/pod39731caf-db29-490d", Kind::Other),
        ("kubepods/burstable/pod", Kind::Other),
        (
            "kubepods/pod190bf0c3-921b-4ecb-b2f9-6f8a82af3b3e-0",
            Kind::Other,
        ),
        ("kubepods/pod23bf405a0fd421db652e755f01a6e87", Kind::Other),
        (
            "kubepods.slice/kubepods-pod190bf0c3_921b_4ecb_b2f9_6f8a82af3g3e.slice",
            Kind::Other,
        ),
        // Below a pod slice only `.scope` units are containers; `.scope` alone is no name.
        (
            "kubepods.slice/kubepods-pod190bf0c3_921b_4ecb_b2f9_6f8a82af3b3e.slice/cri-containerd-f42deac8960e4b15e6b5bbbb317fe052ae349fcd3a35293bf4b3bb8f45d2aea9",
            Kind::Other,
        ),
        (
            "kubepods.slice/kubepods-pod190bf0c3_921b_4ecb_b2f9_6f8a82af3b3e.slice/.scope",
            Kind::Other,
        ),
        // Below a cgroupfs pod, a directory that is no container id.
        (
            "kubepods/burstable/pod39731caf-db29-490d-8dab-06622cba6b2e/sandbox",
            Kind::Other,
        ),
        // A 129-digit id is too long.
        (
            "kubepods/burstable/pod39731caf-db29-490d-8dab-06622cba6b2e/f42deac8960e4b15e6b5bbbb317fe052ae349fcd3a35293bf4b3bb8f45d2aea97249ed1545a8eddf52427ede7b280b688049305692a5450b35a7ab84e278ecfe0",
            Kind::Other,
        ),
        // Runtime monitors have no sub-cgroups; one is not presented as the workload.
        (
            "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod39731caf_db29_490d_8dab_06622cba6b2e.slice/crio-conmon-7249ed1545a8eddf52427ede7b280b688049305692a5450b35a7ab84e278ecfe.scope/extra",
            Kind::Other,
        ),
        // `.` and `..` are no cgroup names: the path does not name a cgroup as written.
        (
            "kubepods/burstable/pod39731caf-db29-490d-8dab-06622cba6b2e/f42deac8960e4b15e6b5bbbb317fe052ae349fcd3a35293bf4b3bb8f45d2aea9/..",
            Kind::Other,
        ),
        ("./kubepods.slice", Kind::Other),
    ]
}

#[test]
fn table_of_real_paths() {
    let table = table();
    assert!(table.len() >= 40, "the table has only {} rows", table.len());
    let failures: Vec<String> = table
        .iter()
        .filter_map(|(path, want)| {
            let got = classify(path);
            (got != *want).then(|| format!("{path:?}\n   want {want:?}\n    got {got:?}"))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} rows misclassified:\n{}",
        failures.len(),
        table.len(),
        failures.join("\n")
    );
}

#[test]
fn every_runtime_and_qos_class_appears_in_the_table() {
    let kinds: Vec<Kind> = table().into_iter().map(|(_, kind)| kind).collect();
    for runtime in [
        Runtime::Containerd,
        Runtime::Crio,
        Runtime::Docker,
        Runtime::Podman,
        Runtime::Unknown,
    ] {
        for driver in [Driver::Systemd, Driver::Cgroupfs] {
            let seen = kinds.iter().any(|kind| {
                matches!(kind, Kind::Container { runtime: r, pod, .. } if *r == runtime && pod.driver == driver)
            });
            // Under cgroupfs, containerd and Docker are indistinguishable, and
            // no CRI runtime names Podman directories there.
            let expected =
                driver == Driver::Systemd || matches!(runtime, Runtime::Crio | Runtime::Unknown);
            assert_eq!(seen, expected, "{runtime} containers under {driver}");
        }
    }
    for qos in [Qos::Guaranteed, Qos::Burstable, Qos::BestEffort] {
        for driver in [Driver::Systemd, Driver::Cgroupfs] {
            assert!(
                kinds.iter().any(|kind| kind
                    .pod()
                    .is_some_and(|p| p.qos == qos && p.driver == driver)),
                "{qos} pods under {driver}"
            );
        }
    }
}

/// A container a runtime made on its own, outside any pod: its id, so that
/// its bundle can be found; not its monitor, nothing in a pod, nothing that
/// only looks like one.
#[test]
fn standalone_containers_outside_kubernetes() {
    let podman = format!("machine.slice/libpod-{C4}.scope");
    let docker = format!("system.slice/docker-{C1}.scope");
    let podman_cgroupfs = format!("libpod_parent/libpod-{C2}");
    let containerd = format!("/system.slice/cri-containerd-{C3}.scope/");
    assert_eq!(standalone_container(&podman), Some((C4, Runtime::Podman)));
    assert_eq!(standalone_container(&docker), Some((C1, Runtime::Docker)));
    assert_eq!(
        standalone_container(&podman_cgroupfs),
        Some((C2, Runtime::Podman))
    );
    assert_eq!(
        standalone_container(&containerd),
        Some((C3, Runtime::Containerd))
    );
    for not in [
        format!("machine.slice/libpod-conmon-{C4}.scope"),
        format!("{SD_G}/cri-containerd-{C1}.scope"),
        format!("{FS_B}/{C2}"),
        "machine.slice/libpod-notanid.scope".to_string(),
        "machine.slice".to_string(),
        format!("machine.slice/libpod-{C4}.scope/container"),
        format!("machine.slice/{C4}"),
        String::new(),
    ] {
        assert_eq!(standalone_container(&not), None, "{not}");
    }
}

#[test]
fn display_uses_the_kubelet_spelling() {
    assert_eq!(Qos::Guaranteed.to_string(), "guaranteed");
    assert_eq!(Qos::Burstable.to_string(), "burstable");
    assert_eq!(Qos::BestEffort.to_string(), "besteffort");
    assert_eq!(Driver::Systemd.to_string(), "systemd");
    assert_eq!(Driver::Cgroupfs.to_string(), "cgroupfs");
    let runtimes = [
        (Runtime::Containerd, "containerd"),
        (Runtime::Crio, "crio"),
        (Runtime::Docker, "docker"),
        (Runtime::Podman, "podman"),
        (Runtime::Unknown, "unknown"),
    ];
    for (runtime, name) in runtimes {
        assert_eq!(runtime.to_string(), name);
    }
}

#[test]
fn serialises_with_lowercase_names() {
    let json = serde_json::to_value(container(sd_b(), C2, Runtime::Crio)).unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "kind": "container",
            "pod": {"uid": B_UID, "qos": "burstable", "driver": "systemd", "path": SD_B},
            "id": C2,
            "runtime": "crio",
            "conmon": false,
        })
    );
    let json = serde_json::to_value(Kind::Pod(fs_e())).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"kind": "pod", "uid": E_UID, "qos": "besteffort", "driver": "cgroupfs", "path": FS_E})
    );
    let json = serde_json::to_value(qos_parent(Qos::BestEffort, Driver::Systemd)).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"kind": "qos_parent", "qos": "besteffort", "driver": "systemd"})
    );
    let json = serde_json::to_value(Kind::KubepodsRoot {
        driver: Driver::Cgroupfs,
    })
    .unwrap();
    assert_eq!(
        json,
        serde_json::json!({"kind": "kubepods_root", "driver": "cgroupfs"})
    );
    assert_eq!(
        serde_json::to_value(Kind::Other).unwrap(),
        serde_json::json!({"kind": "other"})
    );
}

#[test]
fn pod_accessor_finds_the_pod_of_containers_and_sub_cgroups() {
    assert_eq!(
        container(sd_g(), C1, Runtime::Containerd).pod(),
        Some(&sd_g())
    );
    assert_eq!(inside(fs_b(), C1, Runtime::Unknown).pod(), Some(&fs_b()));
    assert_eq!(Kind::Pod(sd_e()).pod(), Some(&sd_e()));
    assert_eq!(qos_parent(Qos::Burstable, Driver::Systemd).pod(), None);
    assert_eq!(Kind::Other.pod(), None);
}

// ---------------------------------------------------------------------------
// Properties

fn config(cases: u32) -> Config {
    Config {
        cases,
        // A failing case is reported with its minimal input; it is not replayed
        // from a file on later runs.
        failure_persistence: None,
        ..Config::default()
    }
}

fn hex(min: usize, max: usize) -> impl Strategy<Value = String> {
    proptest::string::string_regex(&format!("[0-9a-fA-F]{{{min},{max}}}")).unwrap()
}

/// A pod UID in any of the shapes that matter: canonical, systemd-escaped,
/// static, and near misses.
fn uid() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => Just(G_UID.to_owned()),
        3 => "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
        2 => Just(STATIC_UID.to_owned()),
        1 => Just(G_UID.replace('-', "_")),
        1 => Just(G_UID.to_uppercase()),
        1 => Just("XYZ".to_owned()),
        1 => Just(String::new()),
        1 => hex(0, 40),
        1 => "[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}",
    ]
}

/// One path component that is, or nearly is, a name in the kubepods layout.
fn component() -> impl Strategy<Value = String> {
    let prefix = prop::sample::select(vec![
        "kubepods",
        "kubelet-kubepods",
        "a-b-kubepods",
        "-kubepods",
    ]);
    let qos = prop::sample::select(vec!["", "-burstable", "-besteffort", "-guaranteed"]);
    let runtime = prop::sample::select(vec![
        "",
        "cri-containerd-",
        "crio-",
        "crio-conmon-",
        "docker-",
        "libpod-",
        "libpod-conmon-",
        "runc-",
    ]);
    let suffix = prop::sample::select(vec!["", ".slice", ".scope"]);
    let fixed = prop::sample::select(vec![
        "kubepods",
        "kubepods.slice",
        "kubelet.slice",
        "kubelet-kubepods.slice",
        "burstable",
        "besteffort",
        "guaranteed",
        "kubepods-burstable.slice",
        "kubepods-besteffort.slice",
        "kubelet-kubepods-burstable.slice",
        "init.scope",
        "container",
        "system.slice",
        ".",
        "..",
        ".scope",
        ".slice",
        "",
    ]);
    prop_oneof![
        fixed.prop_map(str::to_owned),
        (prefix, qos.clone(), uid(), suffix.clone())
            .prop_map(|(p, q, u, s)| format!("{p}{q}-pod{u}{s}")),
        (qos, uid()).prop_map(|(q, u)| format!("{}pod{u}", q.trim_start_matches('-'))),
        (runtime, hex(0, 130), suffix).prop_map(|(r, id, s)| format!("{r}{id}{s}")),
        "[a-zA-Z0-9._-]{0,12}",
    ]
}

/// The components of a path that follows the layout, or nearly does: a few
/// components above the root, then a root, QoS parent, pod, container and
/// sub-cgroups of either driver, cut at a random depth, each name drawn from
/// valid names and near misses.
fn layout_components() -> impl Strategy<Value = Vec<String>> {
    let above = prop::collection::vec(
        prop::sample::select(vec![
            "kubelet.slice",
            "kubelet",
            "system.slice",
            "cpuset",
            "kubepods",
        ]),
        0..3,
    );
    let root = prop::sample::select(vec!["kubepods", "kubepods.slice", "kubelet-kubepods.slice"]);
    let qos = prop::sample::select(vec![
        "",
        "burstable",
        "besteffort",
        "",
        "burstable",
        "besteffort",
        "guaranteed",
    ]);
    let runtime = prop::sample::select(vec![
        "",
        "cri-containerd-",
        "crio-",
        "crio-conmon-",
        "docker-",
        "libpod-",
        "libpod-conmon-",
        "runc-",
    ]);
    let inside = prop::collection::vec(component(), 0..3);
    (
        above,
        root,
        qos,
        uid(),
        runtime,
        hex(0, 70),
        prop::bool::weighted(0.15),
        inside,
        0..8usize,
    )
        .prop_map(
            |(above, root, qos, uid, runtime, id, wrong_suffix, inside, depth)| {
                let mut parts: Vec<String> = above.into_iter().map(str::to_owned).collect();
                parts.push(root.to_owned());
                match root.strip_suffix(".slice") {
                    Some(prefix) => {
                        let mut parent = prefix.to_owned();
                        if !qos.is_empty() {
                            parent = format!("{parent}-{qos}");
                            parts.push(format!("{parent}.slice"));
                        }
                        parts.push(format!("{parent}-pod{}.slice", uid.replace('-', "_")));
                    }
                    None => {
                        if !qos.is_empty() {
                            parts.push(qos.to_owned());
                        }
                        parts.push(format!("pod{uid}"));
                    }
                }
                let suffix = if root.ends_with(".slice") != wrong_suffix {
                    ".scope"
                } else {
                    ""
                };
                parts.push(format!("{runtime}{id}{suffix}"));
                parts.extend(inside);
                parts.truncate(depth);
                parts
            },
        )
}

/// A `/`-joined path of plausible components, with stray slashes: either
/// components at random, or a near-valid layout path with one component
/// possibly replaced by a random one.
fn plausible_path() -> impl Strategy<Value = String> {
    let random = prop::collection::vec(component(), 0..9);
    let mutated = (
        layout_components(),
        any::<prop::sample::Index>(),
        prop::option::weighted(0.3, component()),
    )
        .prop_map(|(mut parts, at, replacement)| {
            if let (Some(replacement), false) = (replacement, parts.is_empty()) {
                let at = at.index(parts.len());
                parts[at] = replacement;
            }
            parts
        });
    let parts = prop_oneof![1 => random, 3 => mutated];
    let slashes = prop::collection::vec(prop::sample::select(vec!["/", "/", "/", "//"]), 10);
    (parts, slashes, any::<bool>()).prop_map(|(parts, slashes, leading)| {
        let mut path = String::from(if leading { "/" } else { "" });
        for (part, slash) in parts.iter().zip(slashes) {
            path.push_str(part);
            path.push_str(slash);
        }
        path
    })
}

/// `path` with empty components dropped, as `classify` sees it.
fn normalised(path: &str) -> String {
    path.split('/')
        .filter(|c| !c.is_empty())
        .collect::<Vec<_>>()
        .join("/")
}

/// The invariants every answer keeps, whatever the input.
fn check_invariants(path: &str) -> Result<(), TestCaseError> {
    let kind = classify(path);
    // Slashes never change the answer.
    prop_assert_eq!(&classify(&format!("//{path}//")), &kind);
    prop_assert_eq!(&classify(&normalised(path)), &kind);
    match &kind {
        Kind::QosParent { qos, .. } => prop_assert_ne!(*qos, Qos::Guaranteed),
        Kind::Container { id, runtime, .. } | Kind::InsideContainer { id, runtime, .. } => {
            prop_assert!(!id.is_empty());
            if *runtime != Runtime::Unknown {
                prop_assert!(
                    id.bytes().all(|b| b.is_ascii_hexdigit()),
                    "{} id {:?}",
                    runtime,
                    id
                );
            }
        }
        _ => {}
    }
    if let Some(pod) = kind.pod() {
        // The pod path is a prefix of the path, and classifies as that very pod.
        let norm = normalised(path);
        prop_assert!(
            norm == pod.path || norm.starts_with(&format!("{}/", pod.path)),
            "pod path {:?} is no prefix of {:?}",
            pod.path,
            norm
        );
        prop_assert_eq!(classify(&pod.path), Kind::Pod(pod.clone()));
        let uid_ok = (pod.uid.len() == 36 && pod.uid.matches('-').count() == 4)
            || (pod.uid.len() == 32 && !pod.uid.contains('-'));
        prop_assert!(uid_ok, "uid {:?}", pod.uid);
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(2000))]

    #[test]
    fn never_panics_on_arbitrary_strings(path in any::<String>()) {
        check_invariants(&path)?;
    }

    #[test]
    fn never_panics_on_path_like_strings(path in "[/a-z0-9_.-]{0,120}") {
        check_invariants(&path)?;
    }

    #[test]
    fn never_panics_on_plausible_paths(path in plausible_path()) {
        check_invariants(&path)?;
    }
}

#[test]
fn table_rows_keep_the_invariants() {
    for (path, _) in table() {
        if let Err(e) = check_invariants(path) {
            panic!("{path:?}: {e}");
        }
    }
}
