//! Classification of cgroup paths in the kubelet's `kubepods` layout.
//!
//! - Owns the naming rules of the kubelet's two cgroup drivers and of the
//!   container runtimes below them: [`classify`] turns a path into a [`Kind`].
//! - Must never do I/O: a path is classified by its name alone, whether or
//!   not the cgroup exists. [`classify`] is total: every string gets an
//!   answer and nothing panics.
//! - A runtime's own container outside Kubernetes is [`Kind::Other`];
//!   [`standalone_container`] finds its id, so its bundle can be read.
//!
//! Names (KERNEL-NOTES, "Kubernetes cgroup naming"):
//!
//! | level | `systemd` driver | `cgroupfs` driver |
//! |---|---|---|
//! | root | `kubepods.slice` | `kubepods` |
//! | QoS parent | `kubepods-burstable.slice`, `kubepods-besteffort.slice` | `burstable`, `besteffort` |
//! | Guaranteed pod (under the root) | `kubepods-pod<uid>.slice` | `pod<uid>` |
//! | Burstable pod | `kubepods-burstable-pod<uid>.slice` | `pod<uid>` |
//! | container | `cri-containerd-<id>.scope`, `crio-<id>.scope`, `docker-<id>.scope`, `libpod-<id>.scope` | `<id>`, `crio-<id>` |
//! | runtime monitor | `crio-conmon-<id>.scope`, `libpod-conmon-<id>.scope` | `crio-conmon-<id>` |
//!
//! Under `systemd` the pod UID's `-` is written `_` (a dash in a slice name
//! means nesting), and a custom `--cgroup-root` prefixes every slice name
//! (`kubelet-kubepods.slice`).

use std::fmt;

use serde::Serialize;

/// The kubelet's cgroup driver, as told by the names it gives cgroups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Driver {
    /// `--cgroup-driver=systemd`: slices such as `kubepods-burstable-pod<uid>.slice`
    /// and one `.scope` unit per container.
    Systemd,
    /// `--cgroup-driver=cgroupfs`: plain directories such as
    /// `kubepods/burstable/pod<uid>/<id>`.
    Cgroupfs,
}

impl Driver {
    /// The lowercase name, as in the kubelet flag and in serialised output.
    pub fn as_str(self) -> &'static str {
        match self {
            Driver::Systemd => "systemd",
            Driver::Cgroupfs => "cgroupfs",
        }
    }
}

impl fmt::Display for Driver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A pod's Kubernetes QoS class, as told by where the kubelet put its cgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Qos {
    /// Requests equal limits for every container; the pod cgroup sits directly
    /// under the kubepods root, with no QoS parent of its own.
    Guaranteed,
    /// Some requests or limits set, but not Guaranteed; below `burstable`.
    Burstable,
    /// No requests or limits at all; below `besteffort`.
    BestEffort,
}

impl Qos {
    /// The lowercase name, as the kubelet spells it in cgroup names
    /// (`guaranteed`, `burstable`, `besteffort`).
    pub fn as_str(self) -> &'static str {
        match self {
            Qos::Guaranteed => "guaranteed",
            Qos::Burstable => "burstable",
            Qos::BestEffort => "besteffort",
        }
    }

    /// The QoS class whose parent cgroup has the kubelet name `name`. Guaranteed
    /// has no parent cgroup, so only `burstable` and `besteffort` match.
    fn from_parent_name(name: &str) -> Option<Qos> {
        match name {
            "burstable" => Some(Qos::Burstable),
            "besteffort" => Some(Qos::BestEffort),
            _ => None,
        }
    }
}

impl fmt::Display for Qos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The container runtime that named a container cgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Runtime {
    /// containerd's CRI plugin: `cri-containerd-<id>.scope`.
    Containerd,
    /// CRI-O: `crio-<id>.scope`, `crio-<id>`, and `crio-conmon-<id>` for its monitor.
    Crio,
    /// Docker (dockershim or cri-dockerd): `docker-<id>.scope`.
    Docker,
    /// Podman: `libpod-<id>.scope`, and `libpod-conmon-<id>.scope` for its monitor.
    Podman,
    /// The name does not tell: a `.scope` with an unknown prefix or a non-hex id,
    /// or a bare `<id>` directory under `cgroupfs`, which containerd and Docker
    /// both use.
    Unknown,
}

impl Runtime {
    /// The lowercase name, as in serialised output.
    pub fn as_str(self) -> &'static str {
        match self {
            Runtime::Containerd => "containerd",
            Runtime::Crio => "crio",
            Runtime::Docker => "docker",
            Runtime::Podman => "podman",
            Runtime::Unknown => "unknown",
        }
    }
}

impl fmt::Display for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A pod cgroup found in a path.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Pod {
    /// The pod UID as the API server and the kubelet print it: canonical
    /// lowercase `8-4-4-4-12` with dashes (converted back from the systemd
    /// driver's underscores), or a static pod's 32 hex digits as given.
    pub uid: String,
    /// The QoS class, from the parent the pod cgroup sits under.
    pub qos: Qos,
    /// The driver whose naming the path follows.
    pub driver: Driver,
    /// The path of the pod cgroup, relative to the same root as the classified
    /// path and normalised: no leading or trailing `/`, no repeated `/`. Any
    /// components above the kubepods root are kept.
    pub path: String,
}

/// What a cgroup path is in the kubepods layout.
///
/// Serialised internally tagged, e.g. `{"kind":"pod","uid":…,"qos":"burstable",…}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Kind {
    /// The kubepods root itself: `kubepods.slice`, `kubelet-kubepods.slice`,
    /// `kubepods`.
    KubepodsRoot {
        /// The driver whose naming the root follows.
        driver: Driver,
    },
    /// The parent of all Burstable or all BestEffort pods:
    /// `kubepods.slice/kubepods-burstable.slice`, `kubepods/besteffort`.
    /// Never Guaranteed: Guaranteed pods sit directly under the kubepods root.
    QosParent {
        /// [`Qos::Burstable`] or [`Qos::BestEffort`].
        qos: Qos,
        /// The driver whose naming the parent follows.
        driver: Driver,
    },
    /// A pod cgroup.
    Pod(Pod),
    /// A container cgroup directly below a pod cgroup.
    Container {
        /// The pod the container belongs to.
        pod: Pod,
        /// The container id as written in the name (hex, case kept) or, for a
        /// [`Runtime::Unknown`] scope, the whole name before `.scope`.
        id: String,
        /// The runtime that named the cgroup.
        runtime: Runtime,
        /// `true` for a runtime monitor (`crio-conmon-<id>`,
        /// `libpod-conmon-<id>.scope`): a helper process next to the
        /// container, not the workload, so it must not get the workload's CPUs.
        conmon: bool,
    },
    /// A sub-cgroup at any depth below a (non-monitor) container cgroup, such
    /// as the `init.scope` of systemd running in a container or a
    /// runtime-created `container` leaf. The workload's processes may live here.
    InsideContainer {
        /// The pod the container belongs to.
        pod: Pod,
        /// The id of the enclosing container, as in [`Kind::Container`].
        id: String,
        /// The runtime that named the enclosing container cgroup.
        runtime: Runtime,
    },
    /// Anything else: not under a kubepods root, or under one but not named
    /// the way the kubelet and the runtimes name cgroups.
    Other,
}

impl Kind {
    /// The pod this cgroup is or belongs to, if any.
    pub fn pod(&self) -> Option<&Pod> {
        match self {
            Kind::Pod(pod) | Kind::Container { pod, .. } | Kind::InsideContainer { pod, .. } => {
                Some(pod)
            }
            Kind::KubepodsRoot { .. } | Kind::QosParent { .. } | Kind::Other => None,
        }
    }
}

/// Classifies `rel_path`, a cgroup path relative to the cgroup v2 root or to a
/// cgroup v1 controller's root.
///
/// - Slashes are normalised: a leading `/`, a trailing `/` and repeated `/` are
///   ignored. Nothing else is trimmed, and a `.` or `..` component gives
///   [`Kind::Other`]: no cgroup has such a name, so the path does not name one
///   as written.
/// - The kubepods root is a component equal to `kubepods.slice`, ending in
///   `-kubepods.slice` (a systemd driver with a custom `--cgroup-root`), or
///   equal to `kubepods` (cgroupfs). Any components may precede it. If several
///   components could be a root, the first one below which the rest of the path
///   follows the kubelet's naming wins: the outermost kubelet for a kubelet
///   running inside a pod, and the inner `kubepods` for a cgroupfs kubelet whose
///   `--cgroup-root` itself ends in `kubepods`.
/// - Pod UIDs are the lowercase canonical `8-4-4-4-12` form (with `_` for `-`
///   under systemd) or 32 lowercase hex digits (a static pod's UID, an MD5 hash
///   of its manifest), under both drivers. Nothing else: the kubelet never
///   writes other forms, so a name like `kubepods-burstable-podXYZ.slice` is
///   [`Kind::Other`].
/// - Container ids are 1 to 128 hex digits of either case. Under systemd every
///   `.scope` directly below a pod slice is a container, since only a runtime
///   puts one there: a known prefix with a hex id gives that runtime, anything
///   else [`Runtime::Unknown`] with the whole name before `.scope` as its id
///   (so a known runtime always comes with a hex id). Under cgroupfs there is no
///   such marker, so only a bare hex id ([`Runtime::Unknown`]: containerd and
///   Docker both use it) or a known prefix with a hex id is a container; any
///   other directory below a pod is [`Kind::Other`].
/// - A sub-cgroup below a runtime monitor is [`Kind::Other`]: monitors do not
///   create any, and calling one [`Kind::InsideContainer`] would present the
///   monitor's processes as the workload.
pub fn classify(rel_path: &str) -> Kind {
    let parts: Vec<&str> = rel_path.split('/').filter(|c| !c.is_empty()).collect();
    if parts.iter().any(|c| *c == "." || *c == "..") {
        return Kind::Other;
    }
    parts
        .iter()
        .enumerate()
        .filter_map(|(i, name)| Root::parse(name).map(|root| (i, root)))
        .find_map(|(i, root)| root.classify_below(&parts, i))
        .unwrap_or(Kind::Other)
}

/// A kubepods root component and the naming that follows from it.
#[derive(Clone, Copy)]
enum Root<'a> {
    /// `<prefix>.slice`, where `prefix` is `kubepods` or ends in `-kubepods`;
    /// every slice below is named `<prefix>-...`.
    Systemd { prefix: &'a str },
    /// `kubepods`.
    Cgroupfs,
}

impl<'a> Root<'a> {
    fn parse(name: &'a str) -> Option<Self> {
        if name == "kubepods" {
            return Some(Root::Cgroupfs);
        }
        let prefix = name.strip_suffix(".slice")?;
        if prefix == "kubepods" {
            return Some(Root::Systemd { prefix });
        }
        // systemd rejects slice names with an empty dash-separated part
        // (`-kubepods.slice`, `a--kubepods.slice`), so such a name is no root.
        let outer = prefix.strip_suffix("-kubepods")?;
        (!outer.is_empty() && outer.split('-').all(|part| !part.is_empty()))
            .then_some(Root::Systemd { prefix })
    }

    fn driver(self) -> Driver {
        match self {
            Root::Systemd { .. } => Driver::Systemd,
            Root::Cgroupfs => Driver::Cgroupfs,
        }
    }

    /// Classifies `parts`, whose component `root_at` is this root; `None` if
    /// the components below it do not follow the kubelet's naming.
    fn classify_below(self, parts: &[&str], root_at: usize) -> Option<Kind> {
        let driver = self.driver();
        let mut below = parts.get(root_at + 1..)?.iter().copied();
        let Some(first) = below.next() else {
            return Some(Kind::KubepodsRoot { driver });
        };
        let (qos, pod_name) = match self.qos_parent(first) {
            Some(qos) => match below.next() {
                Some(name) => (qos, name),
                None => return Some(Kind::QosParent { qos, driver }),
            },
            None => (Qos::Guaranteed, first),
        };
        let uid = self.pod_uid(qos, pod_name)?;
        let pod_at = root_at + if qos == Qos::Guaranteed { 1 } else { 2 };
        let pod = Pod {
            uid,
            qos,
            driver,
            path: parts.get(..=pod_at)?.join("/"),
        };
        let Some(container) = below.next() else {
            return Some(Kind::Pod(pod));
        };
        let (id, runtime, conmon) = self.container(container)?;
        let id = id.to_owned();
        match (below.next(), conmon) {
            (None, _) => Some(Kind::Container {
                pod,
                id,
                runtime,
                conmon,
            }),
            (Some(_), false) => Some(Kind::InsideContainer { pod, id, runtime }),
            (Some(_), true) => None,
        }
    }

    /// The QoS class if `name` is a QoS parent directly below this root.
    fn qos_parent(self, name: &str) -> Option<Qos> {
        match self {
            Root::Systemd { prefix } => Qos::from_parent_name(slice_child(name, prefix)?),
            Root::Cgroupfs => Qos::from_parent_name(name),
        }
    }

    /// The pod UID if `name` is a pod cgroup of class `qos`, directly below
    /// this root (Guaranteed) or below the QoS parent (the others).
    fn pod_uid(self, qos: Qos, name: &str) -> Option<String> {
        match self {
            Root::Systemd { prefix } => {
                let mut rest = slice_child(name, prefix)?;
                if qos != Qos::Guaranteed {
                    rest = rest.strip_prefix(qos.as_str())?.strip_prefix('-')?;
                }
                parse_uid(rest.strip_prefix("pod")?, '_')
            }
            Root::Cgroupfs => parse_uid(name.strip_prefix("pod")?, '-'),
        }
    }

    /// Id, runtime and monitor flag if `name` is a container cgroup directly
    /// below a pod cgroup.
    fn container(self, name: &str) -> Option<(&str, Runtime, bool)> {
        match self {
            Root::Systemd { .. } => {
                let stem = name.strip_suffix(".scope").filter(|s| !s.is_empty())?;
                Some(known_runtime(stem).unwrap_or((stem, Runtime::Unknown, false)))
            }
            Root::Cgroupfs if is_container_id(name) => Some((name, Runtime::Unknown, false)),
            Root::Cgroupfs => known_runtime(name),
        }
    }
}

/// The container id and runtime if `rel_path`, a cgroup outside any pod,
/// is a container a runtime made on its own (`podman run`, `docker run`):
/// its last component is a known runtime prefix and a container id, with
/// `.scope` (the systemd cgroup manager) or without (cgroupfs). Not a
/// runtime monitor (`libpod-conmon-<id>.scope`), and nothing below a pod:
/// [`classify`] names those.
pub fn standalone_container(rel_path: &str) -> Option<(&str, Runtime)> {
    if classify(rel_path) != Kind::Other {
        return None;
    }
    let name = rel_path.rsplit('/').find(|c| !c.is_empty())?;
    let stem = name.strip_suffix(".scope").unwrap_or(name);
    match known_runtime(stem)? {
        (_, _, true) => None,
        (id, runtime, false) => Some((id, runtime)),
    }
}

/// Prefixes of container cgroup names, before the id (and `.scope` under
/// systemd), with the runtime and whether the cgroup is a runtime monitor.
/// The `-conmon-` forms come before their runtime's plain form, which would
/// otherwise see `conmon-<id>` as a (non-hex, so rejected) id.
const RUNTIME_PREFIXES: [(&str, Runtime, bool); 6] = [
    ("cri-containerd-", Runtime::Containerd, false),
    ("crio-conmon-", Runtime::Crio, true),
    ("crio-", Runtime::Crio, false),
    ("docker-", Runtime::Docker, false),
    ("libpod-conmon-", Runtime::Podman, true),
    ("libpod-", Runtime::Podman, false),
];

/// Id, runtime and monitor flag if `stem` is a known runtime prefix followed
/// by a container id.
fn known_runtime(stem: &str) -> Option<(&str, Runtime, bool)> {
    RUNTIME_PREFIXES
        .iter()
        .find_map(|&(prefix, runtime, conmon)| {
            let id = stem.strip_prefix(prefix).filter(|id| is_container_id(id))?;
            Some((id, runtime, conmon))
        })
}

/// What follows `<parent>-` in the slice `name`, if `name` is a slice named
/// after its parent `parent` the way systemd nests slices.
fn slice_child<'n>(name: &'n str, parent: &str) -> Option<&'n str> {
    name.strip_suffix(".slice")?
        .strip_prefix(parent)?
        .strip_prefix('-')
}

/// Parses a pod UID written with `sep` between its groups, returning it with
/// dashes; a 32-digit static-pod UID is returned as given.
fn parse_uid(text: &str, sep: char) -> Option<String> {
    if text.len() == 32 && text.bytes().all(is_lower_hex) {
        return Some(text.to_owned());
    }
    const GROUPS: [usize; 5] = [8, 4, 4, 4, 12];
    let mut groups = text.split(sep);
    let mut uid = String::with_capacity(36);
    for (i, len) in GROUPS.into_iter().enumerate() {
        let group = groups.next()?;
        if group.len() != len || !group.bytes().all(is_lower_hex) {
            return None;
        }
        if i > 0 {
            uid.push('-');
        }
        uid.push_str(group);
    }
    groups.next().is_none().then_some(uid)
}

/// Lowercase only: the kubelet prints UIDs in lowercase, so an uppercase digit
/// means the name was not made by the kubelet.
fn is_lower_hex(b: u8) -> bool {
    b.is_ascii_digit() || (b'a'..=b'f').contains(&b)
}

/// 1 to 128 hex digits of either case. Runtimes write 64 lowercase digits; the
/// looser check costs nothing, while requiring hex keeps words such as `init`
/// or `container` from passing for an id.
fn is_container_id(text: &str) -> bool {
    (1..=128).contains(&text.len()) && text.bytes().all(|b| b.is_ascii_hexdigit())
}
