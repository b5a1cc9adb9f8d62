//! OCI bundles: what a container's `config.json` says about it (its
//! annotations, the devices the runtime gave it, whether it is a pod's
//! sandbox), parsed ([`parse_bundle`]), built from what a runtime announces
//! ([`announced_bundle`]), or found and read beneath its cgroup's runtime
//! directories ([`find_bundle`], through [`Fs`]). It never decides what a
//! cgroup asks for ([`super::decide`] does), and never reads more than
//! [`MAX_BUNDLE_BYTES`] of a file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock};

use serde::{Deserialize, Serialize};

use super::{
    ANNOTATION_CDI_PREFIX, ANNOTATION_CLASS, ANNOTATION_CPUS, ANNOTATION_DEVICE_ALIGNMENT,
    ANNOTATION_NEAR, ANNOTATION_QUOTA_LIFTED, SANDBOX_MARKERS, cut,
};
use crate::cgroup::CpuLimit;
use crate::devices::{Device, DeviceRef, Found};
use crate::io::{FileId, Fs, NodeKind};

/// The largest bundle `config.json` read. Real ones are tens of KiB (a
/// few hundred with thousands of environment variables); anything larger is
/// refused, not read into the daemon's memory.
pub const MAX_BUNDLE_BYTES: u64 = 4 << 20;

/// What a container's OCI bundle says about it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Bundle {
    pub path: PathBuf,
    /// The devices the runtime gave it: `linux.devices` (but the ones
    /// every container has: `/dev/null`, `/dev/tty`, pseudo-terminals),
    /// the device nodes it mounts, the SR-IOV device plugin's
    /// `PCIDEVICE_*` variables in `process.env`, and the CDI devices its
    /// `cdi.k8s.io/*` annotations name. Empty when there
    /// are more than [`crate::devices::MAX_DEVICES`] (a privileged
    /// container gets the host's every device: `devices_problem` says so).
    pub devices: Vec<Device>,
    /// Why its devices were not taken, if they were not.
    pub devices_problem: Option<String>,
    /// The annotation `pinctl.io/near`, raw.
    pub near: Option<String>,
    /// The annotation `pinctl.io/device-alignment`, raw.
    pub device_alignment: Option<String>,
    /// The annotation that asks for CPUs, key and raw value: the container's
    /// own `pinctl.io/cpus.<name>`, else the pod's `pinctl.io/cpus`.
    pub cpus: Option<(String, String)>,
    /// The power class it asks for: the container's own
    /// `pinctl.io/cpu-class.<name>`, else the pod's `pinctl.io/cpu-class`.
    pub class: Option<String>,
    pub pod_uid: Option<String>,
    pub container_name: Option<String>,
    /// It is a pod's sandbox (pause) container ([`SANDBOX_MARKERS`]).
    pub sandbox: bool,
    /// The limit its quota had before pinctld lifted it at create
    /// ([`ANNOTATION_QUOTA_LIFTED`]).
    pub lifted: Option<CpuLimit>,
    /// Why the file at `path` could not be used, if it could not.
    pub unusable: Option<Unusable>,
}

/// A bundle file that could not be used, and the file as it was then: it
/// is read again only once that changes ([`Bundle::stale`]), so a bad file
/// costs one read and one log line, not one of each at every reconcile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unusable {
    pub reason: String,
    pub file: Option<FileId>,
}

impl Bundle {
    /// What is remembered of a bundle that asks for nothing, for a cgroup
    /// that wants no CPUs: only that (its annotations never change). Keeping
    /// every bundle whole would cost a few hundred bytes per container.
    pub fn summary() -> Arc<Bundle> {
        static SUMMARY: LazyLock<Arc<Bundle>> = LazyLock::new(|| Arc::new(Bundle::default()));
        SUMMARY.clone()
    }

    /// Whether this is [`Bundle::summary`]: the identity must be read again
    /// if it is ever needed.
    pub fn is_summary(&self) -> bool {
        self.path.as_os_str().is_empty()
    }

    /// Whether what is known of this bundle must be read again: it could not
    /// be used, and its file has changed since (a bundle that was read never
    /// changes for a container id).
    pub fn stale(&self, fs: &dyn Fs) -> bool {
        self.unusable
            .as_ref()
            .is_some_and(|u| fs.identity(&self.path).ok() != u.file)
    }
}

#[derive(Deserialize)]
struct OciConfig {
    #[serde(default)]
    annotations: BTreeMap<String, String>,
    /// Read on their own ([`bundle_devices`]): a shape pinctl does not
    /// expect there must not cost the annotations.
    #[serde(default)]
    linux: Option<Box<serde_json::value::RawValue>>,
    #[serde(default)]
    process: Option<Box<serde_json::value::RawValue>>,
    #[serde(default)]
    mounts: Option<Box<serde_json::value::RawValue>>,
}

#[derive(Deserialize)]
struct OciMount {
    #[serde(default)]
    source: Option<String>,
}

/// Directories below `/dev` whose mounts every container has: no device
/// of a workload's.
const ORDINARY_DEV_MOUNTS: [&str; 5] = [
    "/dev/pts",
    "/dev/shm",
    "/dev/mqueue",
    "/dev/hugepages",
    "/dev/console",
];

#[derive(Deserialize)]
struct OciLinux {
    #[serde(default)]
    devices: Vec<OciDevice>,
}

#[derive(Deserialize)]
struct OciDevice {
    #[serde(rename = "type")]
    kind: String,
    major: Option<i64>,
    minor: Option<i64>,
}

#[derive(Deserialize)]
struct OciProcess {
    #[serde(default)]
    env: Vec<String>,
}

/// Character majors every container has, whatever it drives: memory
/// devices (`/dev/null`, `/dev/zero`, `/dev/random`), `/dev/tty`, the
/// console, `/dev/ptmx` and pseudo-terminals. They sit on no bus. (A
/// serial port, major 4, may be a device a workload drives.)
fn ordinary_major(major: u32) -> bool {
    matches!(major, 1 | 5 | 136..=143)
}

/// The devices a bundle's `linux`, `mounts` and `process` say the
/// container has ([`Bundle::devices`]), or why they were not taken.
fn bundle_devices(config: &OciConfig) -> (Vec<Device>, Option<String>) {
    let (linux, mounts, process) = (
        config.linux.as_deref(),
        config.mounts.as_deref(),
        config.process.as_deref(),
    );
    let mut out = Vec::new();
    // CDI devices the runtime was asked for: their spec files say which
    // device nodes they are (when the runtime has not put those in
    // `linux.devices` itself).
    for (key, value) in config
        .annotations
        .range(ANNOTATION_CDI_PREFIX.to_string()..)
    {
        if !key.starts_with(ANNOTATION_CDI_PREFIX) {
            break;
        }
        for word in value.split(',').map(str::trim) {
            if crate::devices::cdi::is_qualified(word) {
                out.push(Device {
                    what: DeviceRef::Cdi(word.to_string()),
                    found: Found::BundleCdi(key.chars().take(80).collect()),
                });
            }
        }
    }
    // Device nodes mounted in from the host (`--volume /dev/nvidia0:...`,
    // a hook's bind mounts): found by their path below /dev.
    if let Some(raw) = mounts
        && let Ok(list) = serde_json::from_str::<Vec<OciMount>>(raw.get())
    {
        for source in list.into_iter().filter_map(|m| m.source) {
            let ordinary = ORDINARY_DEV_MOUNTS
                .iter()
                .any(|d| source == *d || source.starts_with(&format!("{d}/")));
            if ordinary || source == "/dev" {
                continue;
            }
            if let Ok(what @ DeviceRef::Path(_)) = source.parse::<DeviceRef>() {
                out.push(Device {
                    what,
                    found: Found::BundleMount,
                });
            }
        }
    }
    if let Some(raw) = linux {
        match serde_json::from_str::<OciLinux>(raw.get()) {
            Ok(l) => {
                for d in l.devices {
                    let Some(what) = DeviceRef::from_node(&d.kind, d.major, d.minor) else {
                        continue;
                    };
                    if let DeviceRef::Number {
                        kind: NodeKind::Char,
                        major,
                        ..
                    } = what
                        && ordinary_major(major)
                    {
                        continue;
                    }
                    out.push(Device {
                        what,
                        found: Found::BundleDevice,
                    });
                }
            }
            Err(e) => {
                return (
                    Vec::new(),
                    Some(format!("its linux.devices: {}", cut(&e.to_string()))),
                );
            }
        }
    }
    if let Some(raw) = process
        && let Ok(p) = serde_json::from_str::<OciProcess>(raw.get())
    {
        for var in &p.env {
            let Some((name, value)) = var.split_once('=') else {
                continue;
            };
            if !name.starts_with("PCIDEVICE_") {
                continue;
            }
            for word in value.split(',').map(str::trim).filter(|w| !w.is_empty()) {
                if let Ok(what @ DeviceRef::Pci(_)) = word.parse::<DeviceRef>() {
                    out.push(Device {
                        what,
                        found: Found::Env(name.chars().take(80).collect()),
                    });
                }
            }
        }
    }
    out.sort();
    out.dedup_by(|a, b| a.what == b.what);
    if out.len() > crate::devices::MAX_DEVICES {
        return (
            Vec::new(),
            Some(format!(
                "it has {} devices, more than one workload drives (a privileged \
                 container's every device): name them in {ANNOTATION_NEAR}",
                out.len()
            )),
        );
    }
    (out, None)
}

/// Reads the annotations pinctl uses from an OCI `config.json`. An error
/// when it is not a JSON object whose `annotations` map strings to strings.
pub fn parse_bundle(path: &Path, config_json: &str) -> Result<Bundle, serde_json::Error> {
    let config: OciConfig = serde_json::from_str(config_json)?;
    Ok(bundle_of(path, &config))
}

/// What a runtime says of a container it is about to make (NRI's
/// `CreateContainer`), in the shape of the `config.json` it will write.
#[derive(Debug, Default, Serialize)]
pub struct Announced<'a> {
    pub annotations: BTreeMap<&'a str, &'a str>,
    /// `linux.devices`: `type`, `major`, `minor`.
    pub devices: Vec<AnnouncedDevice<'a>>,
    /// `process.env`.
    pub env: Vec<&'a str>,
    /// The sources of `mounts`.
    pub mounts: Vec<&'a str>,
}

/// One of [`Announced::devices`].
#[derive(Debug, Serialize)]
pub struct AnnouncedDevice<'a> {
    #[serde(rename = "type")]
    pub kind: &'a str,
    pub major: i64,
    pub minor: i64,
}

/// The bundle of a container being made, read from what the runtime
/// announced ([`Announced`]) exactly as [`parse_bundle`] reads the
/// `config.json` the runtime writes: the same request, devices and
/// identity. `path` names where it came from, for messages.
pub fn announced_bundle(path: &Path, a: &Announced<'_>) -> Bundle {
    let raw = |v: serde_json::Value| serde_json::value::to_raw_value(&v).ok();
    let config = OciConfig {
        annotations: a
            .annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        linux: (!a.devices.is_empty())
            .then(|| raw(serde_json::json!({ "devices": a.devices })))
            .flatten(),
        process: (!a.env.is_empty())
            .then(|| raw(serde_json::json!({ "env": a.env })))
            .flatten(),
        mounts: (!a.mounts.is_empty())
            .then(|| {
                let list: Vec<_> = a
                    .mounts
                    .iter()
                    .map(|m| serde_json::json!({ "source": m }))
                    .collect();
                raw(serde_json::Value::Array(list))
            })
            .flatten(),
    };
    bundle_of(path, &config)
}

/// [`parse_bundle`]'s reading of a parsed `config.json`.
fn bundle_of(path: &Path, config: &OciConfig) -> Bundle {
    let get = |keys: &[&str]| {
        keys.iter()
            .find_map(|k| config.annotations.get(*k))
            .filter(|v| !v.is_empty())
            .cloned()
    };
    // containerd (CRI) and CRI-O name these differently.
    let container_name = get(&[
        "io.kubernetes.cri.container-name",
        "io.kubernetes.container.name",
    ]);
    let own = container_name
        .as_ref()
        .map(|name| format!("{ANNOTATION_CPUS}.{name}"));
    let cpus = own
        .into_iter()
        .chain([ANNOTATION_CPUS.to_string()])
        .find_map(|key| {
            let value = config
                .annotations
                .get(&key)
                .filter(|v| !v.is_empty())?
                .clone();
            Some((key, value))
        });
    // The container's own `KEY.<name>`, else the pod's `KEY`, trimmed and
    // cut to `max` characters (someone else's value).
    let own_or_pod = |key: &str, max: usize| {
        container_name
            .as_ref()
            .map(|name| format!("{key}.{name}"))
            .into_iter()
            .chain([key.to_string()])
            .find_map(|k| {
                config
                    .annotations
                    .get(&k)
                    .map(|v| v.trim())
                    .filter(|v| !v.is_empty())
                    .map(|v| v.chars().take(max).collect::<String>())
            })
    };
    // No class name is longer than 64 characters, so 65 are enough to say
    // which it is not; no list of devices needs more than 4096.
    let class = own_or_pod(ANNOTATION_CLASS, 65);
    let (devices, devices_problem) = bundle_devices(config);
    Bundle {
        path: path.to_path_buf(),
        unusable: None,
        devices,
        devices_problem,
        near: own_or_pod(ANNOTATION_NEAR, 4096),
        device_alignment: own_or_pod(ANNOTATION_DEVICE_ALIGNMENT, 4096),
        cpus,
        class,
        pod_uid: get(&["io.kubernetes.cri.sandbox-uid", "io.kubernetes.pod.uid"]),
        container_name,
        sandbox: SANDBOX_MARKERS
            .iter()
            .any(|(k, v)| config.annotations.get(*k).is_some_and(|x| x == v)),
        lifted: config
            .annotations
            .get(ANNOTATION_QUOTA_LIFTED)
            .and_then(|v| CpuLimit::parse_v2(v))
            .filter(|l| l.quota.is_some()),
    }
}

/// Finds and reads the bundle of container `id`: `<dir>/<id>/config.json` or
/// (CRI-O, Podman) `<dir>/<id>/userdata/config.json`, first found wins.
/// `None` when there is none. A file that is there but cannot be used (a
/// link below the bundle directory, not a regular file, larger than
/// [`MAX_BUNDLE_BYTES`], not an OCI config, not readable) is a [`Bundle`]
/// with its reason in `unusable`: it counts as asking for nothing, and is
/// read again only when it changes. An error of the moment (EMFILE, ENOMEM,
/// EIO: see `transient`) is returned: what the bundle asks is not known now,
/// and the next reading looks again.
pub fn find_bundle(
    fs: &dyn Fs,
    dirs: &[PathBuf],
    id: &str,
) -> Result<Option<Bundle>, crate::io::IoError> {
    if id.is_empty() || id.contains('/') || id.starts_with('.') {
        return Ok(None);
    }
    for dir in dirs {
        for rel in [
            format!("{id}/config.json"),
            format!("{id}/userdata/config.json"),
        ] {
            let path = dir.join(&rel);
            let reason = match fs.read_beneath(dir, Path::new(&rel), MAX_BUNDLE_BYTES) {
                Ok(text) => match parse_bundle(&path, &text) {
                    Ok(bundle) => return Ok(Some(bundle)),
                    // serde's message quotes the value it choked on, whole:
                    // a 4 MiB string would be a 4 MiB problem at every read.
                    Err(e) => format!("not an OCI config: {}", cut(&e.to_string())),
                },
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                    "a symbolic link below the bundle directory".to_string()
                }
                Err(e) if !transient(&e) => e.to_string(),
                Err(source) => {
                    return Err(crate::io::IoError::Os {
                        op: "read",
                        path,
                        source,
                    });
                }
            };
            return Ok(Some(Bundle {
                unusable: Some(Unusable {
                    reason,
                    file: fs.identity(&path).ok(),
                }),
                path,
                ..Bundle::default()
            }));
        }
    }
    Ok(None)
}

/// Whether a failed read of a bundle file says something about the moment
/// (no file descriptor or memory to spare, an I/O error, an interrupted or
/// timed-out call) rather than about the file, which stays so until the
/// file changes (not a regular file, too large, not UTF-8, not readable, a
/// socket, a dead mount).
fn transient(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(
            libc::EMFILE
                | libc::ENFILE
                | libc::ENOMEM
                | libc::ENOBUFS
                | libc::EAGAIN
                | libc::EINTR
                | libc::EIO
                | libc::ETIMEDOUT
        )
    )
}
