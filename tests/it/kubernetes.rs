//! The DaemonSet (issue #46) without a cluster: its ConfigMap is the shipped
//! configuration, every path that configuration names is mounted from the
//! host, the daemon's pod stays on the shared pool, and its image is this
//! version. `packaging/kubernetes/check` validates the manifests against the
//! Kubernetes schemas; `packaging/image` builds the image.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use pinctl::config::Config;
use yaml_serde::Value;

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

fn manifest(name: &str) -> Value {
    let path = repo(&format!("packaging/kubernetes/{name}"));
    yaml_serde::from_str(&read(&path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn str_of<'a>(v: &'a Value, what: &str) -> &'a str {
    v.as_str()
        .unwrap_or_else(|| panic!("{what} is not a string: {v:?}"))
}

/// The line the ConfigMap changes, and what it becomes.
const METRICS_OFF: &str = "# metrics_listen = \"127.0.0.1:9561\"\n";
const METRICS_ON: &str = "# The DaemonSet (packaging/kubernetes/) serves /metrics on port 9561 of the node.\nmetrics_listen = \"0.0.0.0:9561\"\n";

/// The configuration the ConfigMap holds, as text.
fn configmap_text() -> String {
    let cm = manifest("01-configmap.yaml");
    str_of(&cm["data"]["pinctld.toml"], "data.pinctld.toml").to_string()
}

/// The pod template's spec and its one container.
fn pod() -> (Value, Value) {
    let ds = manifest("02-daemonset.yaml");
    let spec = ds["spec"]["template"]["spec"].clone();
    let containers = spec["containers"].as_sequence().expect("containers");
    assert_eq!(containers.len(), 1, "one container");
    let container = containers[0].clone();
    (spec, container)
}

/// Each mount: its path in the container, the host path or "configMap", and
/// whether it is read-only.
fn mounts() -> Vec<(PathBuf, String, bool)> {
    let (spec, container) = pod();
    let volumes = spec["volumes"].as_sequence().expect("volumes");
    container["volumeMounts"]
        .as_sequence()
        .expect("volumeMounts")
        .iter()
        .map(|m| {
            let name = str_of(&m["name"], "a mount's name");
            let volume = volumes
                .iter()
                .find(|v| v["name"].as_str() == Some(name))
                .unwrap_or_else(|| panic!("no volume {name}"));
            let source = match volume["hostPath"]["path"].as_str() {
                Some(host) => host.to_string(),
                None => {
                    assert!(volume.get("configMap").is_some(), "volume {name}");
                    "configMap".to_string()
                }
            };
            let target = PathBuf::from(str_of(&m["mountPath"], "mountPath"));
            if source != "configMap" {
                assert_eq!(
                    Path::new(&source),
                    target,
                    "{name}: a host path is mounted where the configuration names it"
                );
            }
            let read_only = m["readOnly"].as_bool().unwrap_or(false);
            (target, source, read_only)
        })
        .collect()
}

/// The mount `path` lies under (the deepest), if any.
fn mount_of(mounts: &[(PathBuf, String, bool)], path: &Path) -> Option<(PathBuf, String, bool)> {
    mounts
        .iter()
        .filter(|(target, _, _)| path.starts_with(target))
        .max_by_key(|(target, _, _)| target.components().count())
        .cloned()
}

#[test]
fn the_configmap_is_the_shipped_configuration_with_metrics_on() {
    let shipped = read(&repo("etc/pinctl/pinctld.toml"));
    assert_eq!(shipped.matches(METRICS_OFF).count(), 1);
    assert_eq!(
        configmap_text(),
        shipped.replacen(METRICS_OFF, METRICS_ON, 1),
        "packaging/kubernetes/01-configmap.yaml is out of date: run packaging/kubernetes/check --write"
    );
    let config = pinctl::config::parse(&configmap_text(), Path::new("pinctld.toml")).unwrap();
    let port: SocketAddr = "0.0.0.0:9561".parse().unwrap();
    assert_eq!(
        config,
        Config {
            metrics_listen: Some(port),
            ..Config::default()
        }
    );
}

#[test]
fn every_path_the_configuration_names_is_mounted_from_the_host() {
    let config = pinctl::config::parse(&configmap_text(), Path::new("pinctld.toml")).unwrap();
    let mounts = mounts();
    let parent = |p: &Path| p.parent().unwrap().to_path_buf();
    // Read and written.
    let mut written = vec![
        config.cgroup_root.clone(),
        config.sysfs_root.clone(),
        parent(&config.state_file),
        parent(&config.socket),
        parent(&config.power_originals),
        parent(&config.housekeeping_originals),
        parent(&config.run.socket),
    ];
    written.dedup();
    for path in &written {
        let (target, source, read_only) =
            mount_of(&mounts, path).unwrap_or_else(|| panic!("{} is not mounted", path.display()));
        assert_ne!(source, "configMap", "{}", path.display());
        assert!(
            !read_only,
            "{} is under the read-only {}",
            path.display(),
            target.display()
        );
    }
    // The cgroup tree is a mount of its own: else the runtime's cgroup
    // mount (the container's own subtree on v1) would cover the host's.
    assert!(mounts.iter().any(|(t, _, _)| t == &config.cgroup_root));
    // Read only.
    let mut read = config.bundle_dirs.clone();
    read.extend(config.cdi_spec_dirs.iter().cloned());
    read.push(parent(config.kubelet_cpu_manager_state.as_deref().unwrap()));
    read.push(parent(config.systemd_bus.as_deref().unwrap()));
    read.push(parent(&config.nri.socket));
    for path in &read {
        let (_, source, _) =
            mount_of(&mounts, path).unwrap_or_else(|| panic!("{} is not mounted", path.display()));
        assert_ne!(source, "configMap", "{}", path.display());
    }
    // /proc is the container's own, which hostPID makes the host's.
    assert_eq!(config.proc_root, Path::new("/proc"));
    let (spec, _) = pod();
    assert_eq!(spec["hostPID"].as_bool(), Some(true));
}

#[test]
fn the_daemon_reads_the_configmap_and_serves_metrics_on_the_nodes_port() {
    let (spec, container) = pod();
    let args: Vec<&str> = container["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| str_of(a, "an argument"))
        .collect();
    assert_eq!(args, ["--config", pinctl::cli::CONFIG_FILE]);
    let (target, source, _) = mount_of(&mounts(), Path::new(pinctl::cli::CONFIG_FILE)).unwrap();
    assert_eq!(source, "configMap");
    assert_eq!(
        target,
        Path::new(pinctl::cli::CONFIG_FILE).parent().unwrap()
    );
    let cm = manifest("01-configmap.yaml");
    assert_eq!(
        spec["volumes"]
            .as_sequence()
            .unwrap()
            .iter()
            .find_map(|v| v["configMap"]["name"].as_str()),
        cm["metadata"]["name"].as_str()
    );
    assert_eq!(
        cm["metadata"]["namespace"],
        manifest("02-daemonset.yaml")["metadata"]["namespace"]
    );
    let config = pinctl::config::parse(&configmap_text(), Path::new("pinctld.toml")).unwrap();
    let port = config.metrics_listen.expect("metrics_listen").port();
    assert_eq!(spec["hostNetwork"].as_bool(), Some(true));
    assert_eq!(
        container["ports"][0]["containerPort"].as_u64(),
        Some(u64::from(port))
    );
}

#[test]
fn the_daemons_pod_stays_on_the_shared_pool_with_the_privileges_it_needs() {
    let (spec, container) = pod();
    // Requests only for CPU: a Burstable pod, never pinned by the kubelet rule.
    let resources = &container["resources"];
    assert!(resources["requests"].get("cpu").is_some(), "{resources:?}");
    assert!(
        resources
            .get("limits")
            .is_none_or(|l| l.get("cpu").is_none()),
        "a CPU limit: {resources:?}"
    );
    assert_eq!(
        container["securityContext"]["privileged"].as_bool(),
        Some(true)
    );
    assert_eq!(spec["automountServiceAccountToken"].as_bool(), Some(false));
    assert_eq!(
        spec["priorityClassName"].as_str(),
        Some("system-node-critical")
    );
    assert!(spec["terminationGracePeriodSeconds"].as_u64().unwrap() >= 15);
    let ds = manifest("02-daemonset.yaml");
    let update = &ds["spec"]["updateStrategy"];
    assert_eq!(update["type"].as_str(), Some("RollingUpdate"));
    assert_eq!(update["rollingUpdate"]["maxUnavailable"].as_u64(), Some(1));
    // Two daemons cannot share a node: the new pod starts after the old stops.
    assert_eq!(update["rollingUpdate"]["maxSurge"].as_u64(), Some(0));
    let ns = manifest("00-namespace.yaml");
    assert_eq!(
        ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"].as_str(),
        Some("privileged")
    );
    assert_eq!(ns["metadata"]["name"], ds["metadata"]["namespace"]);
}

#[test]
fn the_image_is_this_version() {
    let (_, container) = pod();
    let image = str_of(&container["image"], "image");
    assert_eq!(
        image,
        format!("ghcr.io/pinctl/pinctl:{}", env!("CARGO_PKG_VERSION")),
        "packaging/image names the image IMAGE:<version>"
    );
    let script = read(&repo("packaging/image"));
    assert!(script.contains("image=${PINCTL_IMAGE:-ghcr.io/pinctl/pinctl}"));
}

/// A rollout stops pinctld with SIGTERM and starts a new one: while no
/// daemon runs every cpuset stays as it was, and the new daemon holds the
/// pin without writing it again (fake v2 tree; the VM bed's scenario
/// daemonset rolls the real pod).
#[test]
fn a_rollout_keeps_every_pin() {
    use crate::support::fake_cgroup::{Driver, Qos, Spec, Version, container_id, uid};
    use crate::support::world::{Options, SYSTEM, World};
    let mut w = World::new(
        "pinctld-rollout",
        Version::V2,
        Driver::Systemd,
        &Options::default(),
    );
    w.start();
    let online = w.tree.effective("");
    let pod = w.k.pod(Qos::Guaranteed, &uid(1));
    w.tree.create(&pod, &w.existing());
    let app = w.k.container(&pod, &container_id(1));
    w.tree.create(&app, &Spec::limit(2));
    let cpus = w.wait_pinned(&app, 2);
    let pool = online.difference(&cpus);
    w.wait_for("the shared pool without the pin", || {
        match w.tree.effective(SYSTEM) {
            got if got == pool => Ok(()),
            got => Err(format!("{got}")),
        }
    });
    w.stop();
    assert_eq!(w.tree.effective(&app), cpus, "the pin after SIGTERM");
    assert_eq!(w.tree.effective(SYSTEM), pool, "the pool after SIGTERM");
    w.start();
    w.hold(
        "the pin and the pool stay",
        std::time::Duration::from_secs(1),
        || match (w.tree.effective(&app), w.tree.effective(SYSTEM)) {
            (a, s) if a == cpus && s == pool => Ok(()),
            (a, s) => Err(format!("app {a}, pool {s}")),
        },
    );
    let written = format!("{app}/cpuset.cpus");
    let log = w.log();
    assert!(
        !log.lines()
            .any(|l| l.contains("written") && l.contains(&written)),
        "the new daemon wrote the pin again:\n{log}"
    );
}
