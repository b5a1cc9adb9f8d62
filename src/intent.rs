//! Intent: does a cgroup want exclusive CPUs, how many, and on whose word.
//!
//! Precedence, highest first (`docs/src/requests.md`):
//! 1. the xattr `user.pinctl.cpus` (`"0"` keeps the cgroup in the shared pool);
//! 2. an OCI annotation in the bundle's `config.json`: the container's own
//!    `pinctl.io/cpus.<name>`, else the pod's `pinctl.io/cpus` (one container
//!    of the pod at a time: `engine/assign.rs`);
//! 3. the first `[[rule]]` whose glob matches the cgroup path;
//! 4. the kubelet's rule (`kubelet_rule`): a Guaranteed pod's container whose
//!    CPU limit is a whole number of CPUs.
//!
//! - A pod's sandbox asks only by its xattr ([`SANDBOX_MARKERS`]).
//! - Only a cgroup root owns and alone may write asks for anything
//!   ([`trusted`]). The power class ([`Intent::class`]) and the devices it
//!   drives ([`Intent::near`], placed in [`Intent::devices`]) follow the
//!   same order and trust.
//! - Also the workload key ([`workload_key`]).
//! - [`decide`] and [`parse_bundle`] are pure. [`read`] is the one read path
//!   of a cgroup, for the daemon and `--offline` alike.

use std::path::PathBuf;
use std::sync::{Arc, LazyLock};

use serde::{Deserialize, Serialize};

use crate::cgroup::layout::{Kind, Qos, classify, standalone_container};
use crate::cgroup::{CpuLimit, Hierarchy, Observed, Reads, Rel, Version, observe};
use crate::config::{Config, DeviceAlignment};
use crate::devices::{Device, Found, Located};
use crate::io::{Fs, Owner};

mod bundle;
pub use bundle::{
    Announced, AnnouncedDevice, Bundle, MAX_BUNDLE_BYTES, Unusable, announced_bundle, find_bundle,
    parse_bundle,
};

/// The OCI annotation that asks for exclusive CPUs: as it is, for the pod's
/// one container; followed by `.<container name>`, for that container.
pub const ANNOTATION_CPUS: &str = "pinctl.io/cpus";

/// The OCI annotation that chooses a power class: as it is, for the pod's
/// containers; followed by `.<container name>`, for that container.
pub const ANNOTATION_CLASS: &str = "pinctl.io/cpu-class";

/// The OCI annotation that names the devices a container drives
/// ([`crate::devices::parse_list`]): as it is, for the pod's containers;
/// followed by `.<container name>`, for that container.
pub const ANNOTATION_NEAR: &str = "pinctl.io/near";

/// The OCI annotation that chooses a container's `device_alignment`
/// (`prefer`, `require`, `none`), as [`ANNOTATION_NEAR`] does.
pub const ANNOTATION_DEVICE_ALIGNMENT: &str = "pinctl.io/device-alignment";

/// The OCI annotation pinctld's NRI answer adds to a container whose CFS
/// quota it lifts at create (`unthrottle_exclusive`): the limit the
/// container asked for, as `cpu.max` spells it (`"400000 100000"`). Read
/// only while the container's quota reads unlimited, as the xattr
/// [`crate::cgroup::XATTR_QUOTA`] is: the runtime makes the cgroup with no
/// quota, and the kubelet rule still decides by the limit asked.
pub const ANNOTATION_QUOTA_LIFTED: &str = "pinctl.io/quota-lifted";

/// The prefix of the annotations that name a container's CDI devices
/// (`cdi.k8s.io/<plugin>: nvidia.com/gpu=0,...`), resolved through the
/// spec files of `cdi_spec_dirs` ([`crate::devices::cdi`]).
pub const ANNOTATION_CDI_PREFIX: &str = "cdi.k8s.io/";

/// The annotations by which each runtime marks a pod's sandbox (pause)
/// container's bundle: containerd, CRI-O, cri-dockerd. A sandbox asks for
/// nothing but by its xattr: runtimes copy the pod's annotations into its
/// bundle too, and a glob over container scopes matches it too.
pub const SANDBOX_MARKERS: [(&str, &str); 3] = [
    ("io.kubernetes.cri.container-type", "sandbox"),
    ("io.kubernetes.cri-o.ContainerType", "sandbox"),
    ("io.kubernetes.docker.type", "podsandbox"),
];

/// Where a request came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Source {
    /// The `user.pinctl.cpus` xattr.
    Xattr,
    /// An OCI annotation in this bundle: `pinctl.io/cpus` (the pod's) or
    /// `pinctl.io/cpus.<container name>`.
    Annotation { bundle: PathBuf, key: String },
    /// A `[[rule]]` of the configuration.
    Rule { pattern: String, line: usize },
    /// The kubelet's rule (Guaranteed pod, whole-number CPU limit).
    Kubelet,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Xattr => write!(f, "xattr user.pinctl.cpus"),
            Source::Annotation { bundle, key } => {
                write!(f, "annotation {key} in {}", bundle.display())
            }
            Source::Rule { pattern, line } => write!(f, "rule {pattern:?} (line {line})"),
            Source::Kubelet => write!(f, "kubelet rule (Guaranteed, whole-number CPU limit)"),
        }
    }
}

/// A cgroup's request. `cpus == 0` means "keep in the shared pool", said
/// explicitly (it stops lower-precedence sources).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Intent {
    pub cpus: usize,
    pub source: Source,
    /// NUMA nodes to prefer (from a rule, or the xattr's `@NODES`).
    pub numa: Vec<u32>,
    /// Whole physical cores only (the xattr's `+full-cores`), whatever
    /// `full_pcpus_only` says.
    pub whole_cores: bool,
    /// The power class its CPUs should get, by name: the xattr
    /// `user.pinctl.class`, else the annotation `pinctl.io/cpu-class`
    /// (the container's own `.<name>` first), else its rule's `class`.
    /// Whether the name is a class is the daemon's to judge (a reload may
    /// change the classes).
    pub class: Option<String>,
    /// The devices it drives (issue #43): the list it names (the xattr
    /// `user.pinctl.near`, else the annotation `pinctl.io/near`, else its
    /// rule's `near`), else what the runtime wrote in its bundle
    /// ([`Bundle::devices`]).
    pub near: Vec<Device>,
    /// Its own `device_alignment` (the xattr
    /// `user.pinctl.device-alignment`, the annotation
    /// `pinctl.io/device-alignment`, its rule's), over the file's.
    pub device_alignment: Option<DeviceAlignment>,
    /// Where each of `near` sits, looked up by [`read`] under the sysfs
    /// root ([`crate::devices::locate`]).
    pub devices: Vec<Located>,
}

impl Intent {
    /// Whether it asks for exclusive CPUs (`0` keeps the shared pool).
    pub fn wants(&self) -> bool {
        self.cpus > 0
    }
}

impl Source {
    /// Whether it is the pod's annotation, `pinctl.io/cpus` with no container
    /// named: it reaches every container of the pod.
    pub fn is_pod_annotation(&self) -> bool {
        matches!(self, Source::Annotation { key, .. } if key == ANNOTATION_CPUS)
    }
}

/// Everything read about one cgroup: what the engine is told
/// ([`crate::engine::Engine::upsert`]) and what `--offline` shows.
#[derive(Debug, Clone)]
pub struct Reading {
    pub obs: Observed,
    pub kind: Kind,
    pub intent: Option<Intent>,
    /// Its workload identity ([`workload_key`]); empty unless it wants CPUs.
    pub key: String,
    pub problem: Option<String>,
    pub bundle: Option<Arc<Bundle>>,
    /// The limit a daemon kept on it when it lifted its quota
    /// ([`crate::cgroup::XATTR_QUOTA`]), read where the limit decides and its quota
    /// reads unlimited: the daemon, restarted, learns what it lifted.
    /// Else the one its bundle says was lifted at create
    /// ([`ANNOTATION_QUOTA_LIFTED`]).
    pub lifted: Option<CpuLimit>,
    /// `lifted` came from the bundle: the cgroup does not keep it yet.
    pub lifted_unkept: bool,
    /// The baseline kept on it ([`crate::cgroup::XATTR_BASELINE`]), read
    /// where it wants CPUs: a restarted daemon, its state file lost, still
    /// knows which CPUs a resize must keep.
    pub baseline: Option<crate::cpuset::CpuSet>,
    /// Whether `obs.mems` was read. A reconcile does not read the
    /// `cpuset.mems` of a cgroup whose sets the engine knows and nothing
    /// depends on ([`reads`]): the engine keeps what it has.
    pub mems_read: bool,
}

/// What the daemon knows of a cgroup already, so that a reading need not
/// read it again.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Known {
    /// Its `cpuset.mems` ([`crate::engine::Engine::mems_known`]).
    pub mems: bool,
    /// How many child cgroups it has ([`Reads::known_children`]): where
    /// a walk reads only the children it does not know.
    pub children: Option<usize>,
}

/// What a reading of a cgroup of `kind` reads. The effective set never (the
/// daemon reads it back after its own writes instead); `cpuset.mems` where
/// an empty set must be filled (v1) or memory follows the exclusive CPUs
/// (`align_memory`), unless `known` has them; the CPU limit where the
/// kubelet's rule can apply.
pub fn reads(hier: &Hierarchy, cfg: &Config, kind: &Kind, known: Known) -> Reads {
    Reads {
        effective: false,
        mems: mems_wanted(hier, cfg) && !known.mems,
        limit: needs_limit(kind, cfg),
        known_children: known.children,
    }
}

/// Whether the daemon needs `cpuset.mems` at all: an empty v2 set inherits.
fn mems_wanted(hier: &Hierarchy, cfg: &Config) -> bool {
    hier.version == Version::V1 || cfg.align_memory
}

/// Reads one cgroup (on an I/O thread): its files and children, its kind,
/// its bundle (for containers, unless already known) and so its intent.
/// While the cgroup's quota reads unlimited, its request is decided by the
/// limit the daemon lifted there ([`crate::cgroup::lifted_limit`]), so a lifted
/// quota never unpins a workload.
/// What `known` has is not read again (its `cpuset.mems` only if it wants
/// CPUs).
/// `None` when it no longer exists.
pub fn read(
    fs: &dyn Fs,
    hier: &Hierarchy,
    cfg: &Config,
    rel: &Rel,
    bundle: Option<Arc<Bundle>>,
    known: Known,
) -> Option<Reading> {
    let kind = classify(rel);
    let reads = reads(hier, cfg, &kind, known);
    let mut obs = observe(fs, hier, rel, reads)?;
    let mut mems_read = reads.mems;
    let kept = crate::cgroup::lifted_limit(fs, hier, rel, obs.limit);
    // Containers, in pods or made by a runtime on its own, have bundles.
    let container = match &kind {
        Kind::Container { id, .. } => Some(id.as_str()),
        Kind::Other => standalone_container(rel).map(|(id, _)| id),
        _ => None,
    };
    let read_bundle = |error: &mut Option<crate::io::IoError>| {
        let id = container?;
        match find_bundle(fs, &cfg.bundle_dirs, id) {
            Ok(b) => b.map(Arc::new),
            Err(e) => {
                *error = Some(e);
                None
            }
        }
    };
    // A bundle that could not be read now (EMFILE, EIO): what it asks is
    // not known, the reading is unsure, and nothing is remembered of it.
    let mut bundle_error = None;
    // Only containers have bundles, so only they have one remembered; one
    // that could not be used is read again once its file changed. A
    // container with none in `bundle_dirs` asks for nothing there, for
    // good: a runtime writes the bundle before it makes the cgroup
    // (`bundle_dirs` changes with a restart), so it is not looked for again
    // at every reconcile (a directory and two paths per container).
    let known = bundle.filter(|b| !b.stale(fs));
    let looked = known.is_none();
    let mut bundle = known.or_else(|| read_bundle(&mut bundle_error));
    if bundle.is_none() && container.is_some() && bundle_error.is_none() {
        bundle = Some(Bundle::summary());
    }
    // A quota lifted at create, before any xattr could be kept.
    let asked = obs
        .limit
        .filter(|l| l.quota.is_none())
        .and(bundle.as_deref().and_then(|b| b.lifted));
    let lifted = kept.or(asked);
    obs.limit = lifted.or(obs.limit);
    let (mut intent, mut problem) = decide(&kind, &obs, bundle.as_deref(), cfg);
    // The identity matters only for a workload that wants CPUs; it may come
    // from a bundle remembered as a summary (not when one was just looked
    // for: a pin's read looks once). What the whole bundle says beside the
    // request (its devices, its class) is then decided from it: a summary
    // keeps none of that.
    let wants = intent.as_ref().is_some_and(Intent::wants);
    if wants && !looked && bundle.as_deref().is_some_and(Bundle::is_summary) {
        bundle = read_bundle(&mut bundle_error);
        if bundle.is_some() {
            (intent, problem) = decide(&kind, &obs, bundle.as_deref(), cfg);
        }
    }
    // The xattrs' class and devices, over the annotations' and the rule's:
    // read only where a trusted cgroup wants CPUs (decide dropped the
    // rest), so whoever may ask for the CPUs may choose their class and
    // name their devices. Then where each device sits.
    if let Some(i) = intent.as_mut().filter(|i| i.wants()) {
        if let Some(class) = crate::cgroup::kept_class(fs, hier, rel) {
            i.class = Some(class);
        }
        if let Some(raw) = crate::cgroup::kept_text(fs, hier, rel, crate::cgroup::XATTR_NEAR) {
            match crate::devices::parse_list(&raw) {
                Ok(list) => i.near = crate::devices::named(&list, &Found::Xattr),
                Err(e) => {
                    problem.get_or_insert(format!(
                        "ignoring xattr {}: {e}",
                        crate::cgroup::XATTR_NEAR
                    ));
                }
            }
        }
        let key = crate::cgroup::XATTR_DEVICE_ALIGNMENT;
        if let Some(raw) = crate::cgroup::kept_text(fs, hier, rel, key) {
            match raw.parse() {
                Ok(a) => i.device_alignment = Some(a),
                Err(why) => {
                    problem.get_or_insert(format!("ignoring xattr {key}: {why}"));
                }
            }
        }
        i.devices = crate::devices::locate_all(fs, cfg.device_roots(), &i.near);
    }
    if let Some(e) = &bundle_error {
        obs.error.get_or_insert_with(|| crate::io::chain(e));
        obs.unsure = true;
    }
    // A workload that wants CPUs may need its memory nodes set. A v1
    // cgroup whose CPUs read empty may be a new one at a known path (its
    // removal missed: an inotify overflow, a parent not watched): its
    // memory nodes are empty too, and must be filled before a task joins.
    let fresh = hier.version == Version::V1 && obs.cpus.as_ref().is_some_and(|c| c.is_empty());
    if (wants || fresh) && !mems_read && mems_wanted(hier, cfg) {
        crate::cgroup::observe_mems(fs, hier, rel, &mut obs);
        mems_read = true;
    }
    let key = if wants {
        run_key(cfg, rel).unwrap_or_else(|| workload_key(&kind, rel, bundle.as_deref()))
    } else {
        String::new()
    };
    let baseline = wants
        .then(|| crate::cgroup::kept_baseline(fs, hier, rel))
        .flatten();
    // Keep the whole bundle only while it matters (a summary is no sandbox).
    let bundle = bundle.map(|b| {
        if wants || b.cpus.is_some() || b.unusable.is_some() || b.sandbox {
            b
        } else {
            Bundle::summary()
        }
    });
    Some(Reading {
        obs,
        kind,
        intent,
        key,
        problem,
        bundle,
        lifted,
        lifted_unkept: kept.is_none() && lifted.is_some(),
        baseline,
        mems_read,
    })
}

/// Whether a cgroup of this kind can be a workload at all. The kubepods root,
/// QoS parents and pod cgroups are structure; runtime monitors (conmon) and
/// sub-cgroups of a container follow their container.
pub fn can_be_workload(kind: &Kind) -> bool {
    match kind {
        Kind::Container { conmon, .. } => !conmon,
        Kind::Other => true,
        Kind::KubepodsRoot { .. }
        | Kind::QosParent { .. }
        | Kind::Pod(_)
        | Kind::InsideContainer { .. } => false,
    }
}

/// Decides the intent of one cgroup. Returns the intent (if any) and a problem to
/// report (a malformed xattr or annotation, or a request from a cgroup that
/// is not [`trusted`], which is then ignored).
pub fn decide(
    kind: &Kind,
    obs: &Observed,
    bundle: Option<&Bundle>,
    config: &Config,
) -> (Option<Intent>, Option<String>) {
    match requested(kind, obs, bundle, config) {
        (Some(intent), _) if intent.wants() && !trusted(obs.owner) => {
            let whose = match obs.owner {
                Some(o) => format!(
                    "its directory is owned by uid {} with mode {:04o}",
                    o.uid, o.mode
                ),
                None => "the owner of its directory could not be read".to_string(),
            };
            let problem = format!(
                "ignoring the request for {} exclusive CPUs from the {}: {whose}, and only root may give CPUs away",
                intent.cpus, intent.source
            );
            (None, Some(problem))
        }
        other => other,
    }
}

/// Who may ask for exclusive CPUs: only someone who may give them away,
/// root. A cgroup's request counts only when its directory belongs to root
/// (or to the user pinctld itself runs as, for tests) and no group or other
/// user may write to it, so that only root can have set its xattr, made it
/// (and so chosen the name a bundle or a rule is found by) or written its
/// CPU limit. systemd delegates `user@UID.service` subtrees to their users,
/// and a runtime may hand a container's cgroup to the container's root in a
/// user namespace: whatever such a cgroup carries, it asks for nothing.
pub fn trusted(owner: Option<Owner>) -> bool {
    static EUID: LazyLock<u32> = LazyLock::new(|| nix::unistd::geteuid().as_raw());
    owner.is_some_and(|o| (o.uid == 0 || o.uid == *EUID) && o.mode & 0o022 == 0)
}

/// What a cgroup's xattr, bundle, rules and limit ask, before [`trusted`],
/// with the power class its annotation or rule chooses (the xattr's is
/// read only for a workload that wants CPUs: [`read`]).
fn requested(
    kind: &Kind,
    obs: &Observed,
    bundle: Option<&Bundle>,
    config: &Config,
) -> (Option<Intent>, Option<String>) {
    let (mut intent, mut problem) = requested_cpus(kind, obs, bundle, config);
    if let Some(i) = intent.as_mut().filter(|i| i.wants()) {
        let rule = config.rule_for(&obs.rel);
        i.class = bundle
            .and_then(|b| b.class.clone())
            .or_else(|| rule.and_then(|r| r.class.clone()));
        let mut trouble = None;
        (i.near, i.device_alignment) = devices_asked(bundle, rule, &mut trouble);
        if let Some(t) = trouble {
            problem.get_or_insert(t);
        }
    }
    (intent, problem)
}

/// The devices a workload drives, and its own `device_alignment`, as its
/// bundle and rule say (the xattrs come over them in [`read`]): the list
/// it names (the annotation, else the rule's `near`), else what the
/// runtime wrote in the bundle. A value that cannot be used is noted in
/// `trouble` and passed over.
fn devices_asked(
    bundle: Option<&Bundle>,
    rule: Option<&crate::config::Rule>,
    trouble: &mut Option<String>,
) -> (Vec<Device>, Option<DeviceAlignment>) {
    let annotated = bundle.and_then(|b| {
        let raw = b.near.as_ref()?;
        crate::devices::parse_list(raw)
            .map_err(|e| {
                trouble.get_or_insert(format!(
                    "ignoring annotation {ANNOTATION_NEAR} in {}: {e}",
                    b.path.display()
                ))
            })
            .ok()
    });
    let near = match (annotated, rule) {
        (Some(list), _) => crate::devices::named(&list, &Found::Annotation),
        (None, Some(r)) if !r.near.is_empty() => crate::devices::named(&r.near, &Found::Rule),
        _ => match bundle {
            Some(b) => {
                if let Some(p) = &b.devices_problem {
                    trouble.get_or_insert(format!(
                        "ignoring the devices of bundle {}: {p}",
                        b.path.display()
                    ));
                }
                b.devices.clone()
            }
            None => Vec::new(),
        },
    };
    let alignment = bundle
        .and_then(|b| {
            let raw = b.device_alignment.as_ref()?;
            raw.parse::<DeviceAlignment>()
                .map_err(|why| {
                    trouble.get_or_insert(format!(
                        "ignoring annotation {ANNOTATION_DEVICE_ALIGNMENT} in {}: {why}",
                        b.path.display()
                    ))
                })
                .ok()
        })
        .or_else(|| rule.and_then(|r| r.device_alignment));
    (near, alignment)
}

/// What a cgroup's xattr, bundle, rules and limit ask, before [`trusted`].
fn requested_cpus(
    kind: &Kind,
    obs: &Observed,
    bundle: Option<&Bundle>,
    config: &Config,
) -> (Option<Intent>, Option<String>) {
    if !can_be_workload(kind) {
        return (None, None);
    }
    let mut problem = None;
    if let Some(raw) = &obs.xattr {
        match parse_xattr(raw) {
            Some((cpus, numa, whole_cores)) => {
                return (
                    Some(Intent {
                        cpus,
                        source: Source::Xattr,
                        numa,
                        whole_cores,
                        class: None,
                        near: Vec::new(),
                        device_alignment: None,
                        devices: Vec::new(),
                    }),
                    None,
                );
            }
            None => {
                problem = Some(format!(
                    "ignoring xattr {} = {}: not a CPU count",
                    crate::cgroup::XATTR_CPUS,
                    quote(raw)
                ));
            }
        }
    }
    if let Some(Bundle {
        path,
        unusable: Some(u),
        ..
    }) = bundle
    {
        problem.get_or_insert(format!("ignoring bundle {}: {}", path.display(), u.reason));
    }
    // A pod's annotations reach its sandbox's bundle too, and a rule's glob
    // over container scopes matches the sandbox's: neither is its request.
    if bundle.is_some_and(|b| b.sandbox) {
        return (None, problem);
    }
    if let Some(b) = bundle
        && let Some((key, raw)) = &b.cpus
    {
        match parse_count(raw) {
            Some(cpus) => {
                return (
                    Some(Intent {
                        cpus,
                        source: Source::Annotation {
                            bundle: b.path.clone(),
                            key: key.clone(),
                        },
                        numa: Vec::new(),
                        whole_cores: false,
                        class: None,
                        near: Vec::new(),
                        device_alignment: None,
                        devices: Vec::new(),
                    }),
                    problem,
                );
            }
            None => {
                problem.get_or_insert(format!(
                    "ignoring annotation {key} = {} in {}: not a CPU count",
                    quote(raw),
                    b.path.display()
                ));
            }
        }
    }
    if let Some(rule) = config.rule_for(&obs.rel) {
        return (
            Some(Intent {
                cpus: rule.cpus,
                source: Source::Rule {
                    pattern: rule.pattern.clone(),
                    line: rule.line,
                },
                numa: rule.numa.clone(),
                whole_cores: false,
                class: None,
                near: Vec::new(),
                device_alignment: None,
                devices: Vec::new(),
            }),
            problem,
        );
    }
    if config.kubelet_rule
        && let Kind::Container { pod, .. } = kind
        && pod.qos == Qos::Guaranteed
        && let Some(cpus) = obs.limit.and_then(|l| {
            // A limit no machine can serve is reported, not requested.
            l.whole_cpus()
                .map_err(|e| problem.get_or_insert(format!("ignoring {e}")))
                .ok()
                .flatten()
        })
    {
        return (
            Some(Intent {
                cpus,
                source: Source::Kubelet,
                numa: Vec::new(),
                whole_cores: false,
                class: None,
                near: Vec::new(),
                device_alignment: None,
                devices: Vec::new(),
            }),
            problem,
        );
    }
    (None, problem)
}

/// Whether a cgroup's CPU limit can decide its intent: only the kubelet's
/// rule reads it, and only for a container of a Guaranteed pod.
pub fn needs_limit(kind: &Kind, config: &Config) -> bool {
    config.kubelet_rule
        && matches!(kind, Kind::Container { pod, .. } if pod.qos == Qos::Guaranteed)
        && can_be_workload(kind)
}

/// Whether a new CPU limit could change what cgroup `rel` asks, given what
/// it asks now (`known`): only where the kubelet's rule can apply, and only
/// while no stronger source (an xattr, an annotation, a rule) decides.
pub fn limit_decides(rel: &str, known: Option<&Intent>, config: &Config) -> bool {
    needs_limit(&classify(rel), config) && known.is_none_or(|i| matches!(i.source, Source::Kubelet))
}

/// Whether `limit` asks for what is known (`known`, decided by the
/// kubelet's rule or by nothing): then a write of the limit files changes
/// nothing (a runtime writing the period, then the same quota again).
/// A limit that cannot be a request is never the same: the full read
/// reports why.
pub fn same_request(known: Option<&Intent>, limit: Option<CpuLimit>) -> bool {
    let asked = match limit.map(|l| l.whole_cpus()) {
        None | Some(Ok(None)) => None,
        Some(Ok(Some(n))) => Some(n),
        Some(Err(_)) => return false,
    };
    match known {
        None => asked.is_none(),
        Some(i) => matches!(i.source, Source::Kubelet) && asked == Some(i.cpus),
    }
}

/// A value someone else wrote, quoted for a message: escaped, and cut short,
/// so that a 128 KiB xattr does not become 128 KiB of log at every read.
pub fn quote(raw: &str) -> String {
    const SHOWN: usize = 64;
    match raw.char_indices().nth(SHOWN) {
        None => format!("{raw:?}"),
        Some((cut, _)) => format!("{:?}… ({} bytes in all)", &raw[..cut], raw.len()),
    }
}

/// A message of our own that may hold someone else's value: cut to a few
/// hundred characters.
fn cut(message: &str) -> String {
    const SHOWN: usize = 200;
    match message.char_indices().nth(SHOWN) {
        None => message.to_string(),
        Some((at, _)) => format!("{}… ({} bytes in all)", &message[..at], message.len()),
    }
}

/// The xattr's value: a CPU count; optionally `@` and the NUMA nodes to
/// take them from; optionally `+full-cores`, whole physical cores only
/// (`4`, `4@1`, `8@0-1`, `8+full-cores`, `8@1+full-cores`).
pub fn parse_xattr(raw: &str) -> Option<(usize, Vec<u32>, bool)> {
    let raw = raw.trim();
    if raw.contains(char::is_whitespace) {
        return None;
    }
    let (raw, whole) = match raw.strip_suffix(FULL_CORES) {
        Some(rest) => (rest, true),
        None => (raw, false),
    };
    let Some((count, nodes)) = raw.split_once('@') else {
        return parse_count(raw).map(|n| (n, Vec::new(), whole));
    };
    let nodes: crate::cpuset::CpuSet = nodes.parse().ok()?;
    (!nodes.is_empty()).then_some(())?;
    Some((parse_count(count)?, nodes.iter().collect(), whole))
}

/// The xattr's mark of a request for whole physical cores.
pub const FULL_CORES: &str = "+full-cores";

/// A CPU count as written in an xattr or annotation: a plain decimal number.
fn parse_count(raw: &str) -> Option<usize> {
    let t = raw.trim();
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    t.parse()
        .ok()
        .filter(|&n| n <= crate::cpuset::MAX_CPU as usize + 1)
}

/// The identity of a run of `pinctl run`: `run:<name>` for the cgroup
/// `<slice>/run-<name>.scope` made for it (`[run]`, when on).
pub fn run_key(cfg: &Config, rel: &str) -> Option<String> {
    if !cfg.run.enabled {
        return None;
    }
    let unit = rel
        .strip_prefix(cfg.run.slice.as_str())?
        .strip_prefix('/')?;
    let name = crate::run::name_of_unit(unit).filter(|_| !unit.contains('/'))?;
    Some(format!("run:{name}"))
}

/// The identity of the workload a cgroup belongs to: `pod:<uid>/<container>`
/// when the runtime says the container name, otherwise `cgroup:<path>`. So a
/// restarted container (a new cgroup) keeps its CPUs, and two cgroups of one
/// container share one assignment.
pub fn workload_key(kind: &Kind, rel: &str, bundle: Option<&Bundle>) -> String {
    if let Some(b) = bundle
        && let Some(name) = &b.container_name
    {
        let uid = match (&b.pod_uid, kind) {
            (Some(uid), _) => Some(uid.clone()),
            (None, Kind::Container { pod, .. }) => Some(pod.uid.clone()),
            _ => None,
        };
        if let Some(uid) = uid {
            return pod_key(&uid, name);
        }
    }
    format!("cgroup:{rel}")
}

/// The workload key of container `name` of the pod of UID `uid`: the
/// kubelet's checkpoint names its containers so ([`crate::kubelet`]).
pub fn pod_key(uid: &str, name: &str) -> String {
    format!("pod:{uid}/{name}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// A reading where the engine knows the `cpuset.mems`.
    const KNOWN_MEMS: Known = Known {
        mems: true,
        children: None,
    };

    /// A bundle's devices: `linux.devices` but what every container has,
    /// device nodes mounted in from `/dev` but `/dev/shm` and the like, the
    /// SR-IOV plugin's variables; the container's own annotations first. A
    /// `linux` of another shape costs the devices, never the request.
    #[test]
    fn a_bundle_names_the_devices_its_container_drives() {
        let config = r#"{
            "process": {"env": ["PATH=/bin", "PCIDEVICE_INTEL_COM_SRIOV=0000:3b:02.1,not-pci"]},
            "mounts": [
                {"destination": "/dev/shm", "source": "shm"},
                {"destination": "/dev/pts", "source": "/dev/pts/ptmx"},
                {"destination": "/dev/nvidia0", "source": "/dev/nvidia0", "options": ["bind"]},
                {"destination": "/etc/hosts", "source": "/etc/hosts"}
            ],
            "linux": {"devices": [
                {"path": "/dev/null", "type": "c", "major": 1, "minor": 3},
                {"path": "/dev/ttyS4", "type": "c", "major": 4, "minor": 68},
                {"path": "/dev/nvme0n1", "type": "b", "major": 259, "minor": 0},
                {"path": "/dev/fifo", "type": "p"}
            ]},
            "annotations": {
                "io.kubernetes.cri.container-name": "app",
                "pinctl.io/cpus": "2",
                "pinctl.io/near": "eth0",
                "pinctl.io/near.app": "ib0",
                "pinctl.io/device-alignment": "require"
            }
        }"#;
        let b = parse_bundle(Path::new("/b"), config).unwrap();
        let names: Vec<String> = b
            .devices
            .iter()
            .map(|d| format!("{} ({})", d.what, d.found))
            .collect();
        assert_eq!(
            names,
            [
                "0000:3b:02.1 (bundle's environment PCIDEVICE_INTEL_COM_SRIOV)",
                "/dev/nvidia0 (bundle's mounts)",
                "char:4:68 (bundle's linux.devices)",
                "block:259:0 (bundle's linux.devices)",
            ]
        );
        assert_eq!(b.near.as_deref(), Some("ib0"));
        assert_eq!(b.device_alignment.as_deref(), Some("require"));
        let odd = config.replace(
            r#""linux": {"devices": ["#,
            r#""linux": {"devices": "x", "y": ["#,
        );
        let b = parse_bundle(Path::new("/b"), &odd).unwrap();
        assert!(b.devices_problem.is_some() && b.devices.is_empty());
        assert_eq!(b.cpus, Some(("pinctl.io/cpus".into(), "2".into())));
        let many: Vec<String> = (0..=crate::devices::MAX_DEVICES)
            .map(|n| format!(r#"{{"type": "c", "major": 195, "minor": {n}}}"#))
            .collect();
        let privileged = format!(r#"{{"linux": {{"devices": [{}]}}}}"#, many.join(","));
        let b = parse_bundle(Path::new("/b"), &privileged).unwrap();
        assert!(b.devices.is_empty(), "{:?}", b.devices);
        assert!(b.devices_problem.unwrap().contains("pinctl.io/near"));
    }

    #[test]
    fn reads_containerd_and_crio_annotations() {
        let containerd = r#"{"ociVersion":"1.1.0","annotations":{
            "io.kubernetes.cri.container-name":"app",
            "io.kubernetes.cri.sandbox-uid":"0f5c1b8e-1111-2222-3333-444455556666",
            "pinctl.io/cpus":"4"}}"#;
        let b = parse_bundle(Path::new("/b/config.json"), containerd).unwrap();
        assert_eq!(b.unusable, None);
        assert_eq!(b.cpus, Some(("pinctl.io/cpus".into(), "4".into())));
        assert_eq!(b.container_name.as_deref(), Some("app"));
        assert!(!b.sandbox);
        let crio =
            r#"{"annotations":{"io.kubernetes.container.name":"db","io.kubernetes.pod.uid":"u1"}}"#;
        let b = parse_bundle(Path::new("/c"), crio).unwrap();
        assert_eq!(b.pod_uid.as_deref(), Some("u1"));
        assert_eq!(b.cpus, None);
        assert!(parse_bundle(Path::new("/d"), "{not json").is_err());
        assert!(parse_bundle(Path::new("/e"), "{}").is_ok());
    }

    /// A pod annotation reaches every container's bundle: a container's own
    /// `pinctl.io/cpus.<name>` wins over the pod's `pinctl.io/cpus`, and
    /// another container's is not its.
    #[test]
    fn a_container_named_in_an_annotation_takes_that_one() {
        let pod = |name: &str| {
            format!(
                r#"{{"annotations":{{"io.kubernetes.cri.container-name":"{name}",
                "io.kubernetes.cri.sandbox-uid":"u1","pinctl.io/cpus":"1",
                "pinctl.io/cpus.app":"3","pinctl.io/cpus.db":""}}}}"#
            )
        };
        let app = parse_bundle(Path::new("/a"), &pod("app")).unwrap();
        assert_eq!(app.cpus, Some(("pinctl.io/cpus.app".into(), "3".into())));
        // An empty value is no annotation: the pod's form is taken.
        let db = parse_bundle(Path::new("/b"), &pod("db")).unwrap();
        assert_eq!(db.cpus, Some(("pinctl.io/cpus".into(), "1".into())));
        let side = parse_bundle(Path::new("/c"), &pod("side")).unwrap();
        assert_eq!(side.cpus, Some(("pinctl.io/cpus".into(), "1".into())));
        let named_only =
            r#"{"annotations":{"io.kubernetes.container.name":"side","pinctl.io/cpus.app":"3"}}"#;
        let side = parse_bundle(Path::new("/d"), named_only).unwrap();
        assert_eq!(side.cpus, None);
        // Which annotation decided is the source `describe` shows.
        let cfg = Config::default();
        let obs = Observed {
            owner: owned(0, 0o755),
            ..Observed::default()
        };
        let (intent, _) = decide(&Kind::Other, &obs, Some(&app), &cfg);
        let source = intent.unwrap().source;
        assert_eq!(source.to_string(), "annotation pinctl.io/cpus.app in /a");
        assert!(!source.is_pod_annotation());
    }

    /// containerd, CRI-O and cri-dockerd copy a pod's annotations into its
    /// sandbox's bundle: the pause container asks for nothing by them, nor
    /// by a rule whose glob matches its scope; only by its own xattr.
    /// `pinctl.io/cpu-class.<name>` wins over the pod's
    /// `pinctl.io/cpu-class`, as for the CPU count.
    #[test]
    fn the_class_annotation_is_read_the_containers_own_first() {
        let json = |extra: &str| {
            format!(
                r#"{{"annotations":{{"io.kubernetes.container.name":"app",
                "pinctl.io/cpus":"2","pinctl.io/cpu-class":"slow"{extra}}}}}"#
            )
        };
        let b = parse_bundle(Path::new("/a"), &json("")).unwrap();
        assert_eq!(b.class.as_deref(), Some("slow"));
        let b = parse_bundle(
            Path::new("/a"),
            &json(r#","pinctl.io/cpu-class.app":" fast ""#),
        )
        .unwrap();
        assert_eq!(b.class.as_deref(), Some("fast"));
        let b = parse_bundle(Path::new("/a"), r#"{"annotations":{"pinctl.io/cpus":"2"}}"#).unwrap();
        assert_eq!(b.class, None);
    }

    #[test]
    fn a_sandbox_asks_for_nothing_but_by_its_xattr() {
        let rule = "[[rule]]\nmatch = \"pods/*\"\ncpus = 2\n";
        let cfg = crate::config::parse(rule, Path::new("pinctld.toml")).unwrap();
        let obs = Observed {
            owner: owned(0, 0o755),
            rel: "pods/sandbox".into(),
            ..Observed::default()
        };
        for (marker, value) in SANDBOX_MARKERS {
            let json = format!(
                r#"{{"annotations":{{"{marker}":"{value}","pinctl.io/cpus":"1",
                "io.kubernetes.cri.sandbox-uid":"u1"}}}}"#
            );
            let b = parse_bundle(Path::new("/s"), &json).unwrap();
            assert!(b.sandbox, "{marker}");
            assert_eq!(decide(&Kind::Other, &obs, Some(&b), &cfg), (None, None));
            let xattr = Observed {
                xattr: Some("1".into()),
                ..obs.clone()
            };
            let (intent, _) = decide(&Kind::Other, &xattr, Some(&b), &cfg);
            assert_eq!(intent.map(|i| i.source), Some(Source::Xattr));
        }
        // The same bundle but a container's: its pod annotation counts.
        let json = r#"{"annotations":{"io.kubernetes.cri.container-type":"container",
            "pinctl.io/cpus":"1"}}"#;
        let b = parse_bundle(Path::new("/c"), json).unwrap();
        assert!(!b.sandbox);
        let (intent, _) = decide(&Kind::Other, &obs, Some(&b), &cfg);
        assert_eq!(intent.map(|i| i.cpus), Some(1));
    }

    fn owned(uid: u32, mode: u32) -> Option<Owner> {
        Some(Owner { uid, mode })
    }

    /// A container with no bundle in `bundle_dirs` is not looked for again
    /// at every read (a runtime writes the bundle before the cgroup): what
    /// is remembered of it is the summary of a bundle that asks for nothing.
    #[test]
    fn a_container_without_a_bundle_is_not_looked_for_again() {
        let tmp = tempfile::tempdir().unwrap();
        let Container {
            id,
            rel,
            bundles,
            hier,
            cfg,
            ..
        } = Container::new(tmp.path(), "kubepods/burstable");
        let fs = crate::io::RealFs;
        let first = read(&fs, &hier, &cfg, &rel, None, Known::default()).unwrap();
        let kept = first.bundle.expect("remembered");
        assert!(kept.is_summary());
        // A bundle that turns up later is not seen...
        write_bundle(&bundles, id, r#"{"annotations":{"pinctl.io/cpus":"2"}}"#);
        let again = read(&fs, &hier, &cfg, &rel, Some(kept), Known::default()).unwrap();
        assert_eq!(again.intent.map(|i| i.cpus).unwrap_or(0), 0);
        // ...but by a fresh read (a restart).
        let fresh = read(&fs, &hier, &cfg, &rel, None, Known::default()).unwrap();
        let fresh = fresh.intent.expect("asks");
        assert_eq!(fresh.cpus, 2);
        assert!(
            matches!(fresh.source, Source::Annotation { .. }),
            "{:?}",
            fresh.source
        );
    }

    /// A bundle that cannot be read now (EMFILE, EIO: nothing about the
    /// file) makes the reading unsure, so the request known before stands,
    /// and is not remembered: the next reading looks again and finds what it
    /// asks. Before, it was remembered as unusable until its file changed,
    /// which a bundle never does: the container was never pinned.
    #[test]
    fn a_bundle_that_cannot_be_read_for_now_is_looked_for_again() {
        use std::sync::atomic::Ordering;
        let tmp = tempfile::tempdir().unwrap();
        let Container {
            id,
            rel,
            bundles,
            hier,
            cfg,
            ..
        } = Container::new(tmp.path(), "kubepods/burstable");
        write_bundle(&bundles, id, r#"{"annotations":{"pinctl.io/cpus":"2"}}"#);
        let fs = crate::io::Plain::default();
        fs.beneath_errno.store(libc::EMFILE, Ordering::Relaxed);
        let failed = read(&fs, &hier, &cfg, &rel, None, Known::default()).unwrap();
        assert!(failed.obs.unsure, "what it asks is not known");
        assert!(failed.bundle.is_none(), "nothing remembered");
        let error = failed.obs.error.unwrap_or_default();
        assert!(
            error.contains("config.json") && error.contains("Too many open files"),
            "{error}"
        );
        fs.beneath_errno.store(0, Ordering::Relaxed);
        let again = read(&fs, &hier, &cfg, &rel, failed.bundle, Known::default()).unwrap();
        assert!(!again.obs.unsure);
        assert_eq!(again.intent.map(|i| i.cpus), Some(2));
    }

    /// A reconcile does not read the `cpuset.mems` the engine knows, unless
    /// the reading turns out to want CPUs: then they are read for it.
    #[test]
    fn known_mems_are_read_only_for_a_workload_that_wants_cpus() {
        let tmp = tempfile::tempdir().unwrap();
        let Container { rel, dir, hier, .. } = Container::new(tmp.path(), "kubepods");
        let cfg = crate::config::parse(
            "align_memory = true\n",
            Path::new("/etc/pinctl/pinctld.toml"),
        )
        .unwrap();
        std::fs::write(dir.join("cpuset.mems"), "0-1").unwrap();
        let fs = crate::io::RealFs;
        let known = read(&fs, &hier, &cfg, &rel, None, KNOWN_MEMS).unwrap();
        assert!(known.intent.is_none());
        assert!(!known.mems_read);
        assert_eq!(known.obs.mems, None);
        let full = read(&fs, &hier, &cfg, &rel, None, Known::default()).unwrap();
        assert!(full.mems_read);
        assert_eq!(full.obs.mems, Some("0-1".parse().unwrap()));
        // A Guaranteed pod's limit: the kubelet's rule asks for 2 CPUs.
        std::fs::write(dir.join("cpu.max"), "200000 100000").unwrap();
        let wants = read(&fs, &hier, &cfg, &rel, None, KNOWN_MEMS).unwrap();
        assert_eq!(wants.intent.map(|i| i.cpus), Some(2));
        assert!(wants.mems_read);
        assert_eq!(wants.obs.mems, Some("0-1".parse().unwrap()));
        // Without `align_memory` a v2 set inherits: never read.
        let plain = read(
            &fs,
            &hier,
            &crate::config::parse("", Path::new("/etc/pinctl/pinctld.toml")).unwrap(),
            &rel,
            None,
            Known::default(),
        )
        .unwrap();
        assert!(!plain.mems_read);
    }

    /// A v1 cgroup whose CPUs read empty may be a new one at a path the
    /// engine knows (its removal missed: an overflow, a parent not
    /// watched): its memory nodes are read even when known, so that the
    /// empty set is filled; once it has CPUs, known ones are not read.
    #[test]
    fn known_mems_of_a_v1_cgroup_without_cpus_are_read() {
        let tmp = tempfile::tempdir().unwrap();
        let Container {
            rel,
            dir,
            mut hier,
            cfg,
            ..
        } = Container::new(tmp.path(), "kubepods/burstable");
        hier.version = Version::V1;
        std::fs::write(dir.join("cpuset.cpus"), "\n").unwrap();
        std::fs::write(dir.join("cpuset.mems"), "\n").unwrap();
        let fs = crate::io::RealFs;
        let new = read(&fs, &hier, &cfg, &rel, None, KNOWN_MEMS).unwrap();
        assert!(new.intent.is_none());
        assert!(new.mems_read, "a cgroup with no CPUs may be new");
        assert_eq!(new.obs.mems, Some(crate::cpuset::CpuSet::new()));
        std::fs::write(dir.join("cpuset.cpus"), "0-3\n").unwrap();
        std::fs::write(dir.join("cpuset.mems"), "0\n").unwrap();
        let known = read(&fs, &hier, &cfg, &rel, None, KNOWN_MEMS).unwrap();
        assert!(!known.mems_read);
        assert_eq!(known.obs.mems, None);
        // Read late, a set that does not parse is noted as a full read notes it.
        std::fs::write(dir.join("cpuset.cpus"), "\n").unwrap();
        std::fs::write(dir.join("cpuset.mems"), "0-x\n").unwrap();
        let late = read(&fs, &hier, &cfg, &rel, None, KNOWN_MEMS).unwrap();
        let full = read(&fs, &hier, &cfg, &rel, None, Known::default()).unwrap();
        assert!(late.mems_read);
        assert_eq!(late.obs.mems, None);
        let error = late.obs.error.expect("the bad set is noted");
        assert!(error.contains("cpuset.mems"), "{error}");
        assert_eq!(Some(error), full.obs.error);
    }

    /// A container's cgroup on a fake v2 tree below `root`, in a pod under
    /// `parent`, with a config whose one bundle directory is empty.
    struct Container {
        id: &'static str,
        rel: Rel,
        dir: PathBuf,
        bundles: PathBuf,
        hier: Hierarchy,
        cfg: Config,
    }

    /// Writes the bundle of container `id` in the bundle directory `bundles`.
    fn write_bundle(bundles: &Path, id: &str, config_json: &str) {
        std::fs::create_dir(bundles.join(id)).unwrap();
        std::fs::write(bundles.join(id).join("config.json"), config_json).unwrap();
    }

    impl Container {
        fn new(root: &Path, parent: &str) -> Container {
            let (cgroup, bundles) = (root.join("cgroup"), root.join("bundles"));
            let id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
            let rel: Rel = format!("{parent}/pod11111111-2222-3333-4444-555555555555/{id}").into();
            let dir = cgroup.join(&*rel);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::create_dir_all(&bundles).unwrap();
            std::fs::write(dir.join("cpuset.cpus"), "").unwrap();
            let hier = Hierarchy {
                version: Version::V2,
                root: cgroup.clone(),
                cpuset: cgroup.clone(),
                cpu: Some(cgroup),
                hybrid: false,
            };
            let text = format!("bundle_dirs = [{:?}]\n", bundles.display().to_string());
            let cfg = crate::config::parse(&text, Path::new("/etc/pinctl/pinctld.toml")).unwrap();
            Container {
                id,
                rel,
                dir,
                bundles,
                hier,
                cfg,
            }
        }
    }

    #[test]
    fn a_pin_without_a_bundle_looks_for_it_once() {
        let tmp = tempfile::tempdir().unwrap();
        let Container {
            rel,
            dir,
            hier,
            cfg,
            ..
        } = Container::new(tmp.path(), "kubepods");
        std::fs::write(dir.join("cpu.max"), "200000 100000").unwrap();
        let fs = crate::io::Plain::default();
        let probes = || fs.beneath.load(std::sync::atomic::Ordering::Relaxed);
        let first = read(&fs, &hier, &cfg, &rel, None, Known::default()).unwrap();
        assert_eq!(
            first.intent.as_ref().map(|i| i.cpus),
            Some(2),
            "the kubelet rule"
        );
        assert_eq!(
            probes(),
            2,
            "the two layouts of the one bundle directory, once"
        );
        assert_eq!(first.key, format!("cgroup:{rel}"));
        let kept = first.bundle.expect("remembered as none there");
        assert!(kept.is_summary());
        // The next read of the pinned container (its quota written again,
        // a reconcile) looks again for the identity the key may come from.
        let again = read(&fs, &hier, &cfg, &rel, Some(kept), Known::default()).unwrap();
        assert_eq!(again.key, first.key);
        assert_eq!(probes(), 4);
    }

    /// A write of the limit files reads the cgroup again only where the
    /// limit decides, and only when it asks for something else: not for a
    /// pod, not under an xattr or a rule, not for the period written before
    /// the quota, not for the same quota written again.
    #[test]
    fn a_limit_write_matters_only_where_the_limit_decides_and_changed() {
        let tmp = tempfile::tempdir().unwrap();
        let Container { rel, cfg, .. } = Container::new(tmp.path(), "kubepods");
        let asks = |cpus, source| Intent {
            cpus,
            source,
            numa: Vec::new(),
            whole_cores: false,
            class: None,
            near: Vec::new(),
            device_alignment: None,
            devices: Vec::new(),
        };
        let kubelet = asks(2, Source::Kubelet);
        let pod = crate::cgroup::parent(&rel).unwrap();
        assert!(limit_decides(&rel, None, &cfg));
        assert!(limit_decides(&rel, Some(&kubelet), &cfg));
        assert!(!limit_decides(pod, None, &cfg), "a pod asks for nothing");
        assert!(!limit_decides(&rel, Some(&asks(3, Source::Xattr)), &cfg));
        let burstable = rel.replace("kubepods/", "kubepods/burstable/");
        assert!(!limit_decides(&burstable, None, &cfg));

        let limit = |quota, period| Some(CpuLimit { quota, period });
        // Nothing asked: the period alone, or no limit at all, ask nothing.
        assert!(same_request(None, limit(None, 100_000)));
        assert!(
            same_request(None, limit(Some(150_000), 100_000)),
            "1.5 CPUs"
        );
        assert!(same_request(None, None));
        assert!(
            !same_request(None, limit(Some(100_000), 100_000)),
            "the quota: a pin"
        );
        // Two CPUs asked: the same quota again, or another.
        assert!(same_request(Some(&kubelet), limit(Some(200_000), 100_000)));
        assert!(!same_request(Some(&kubelet), limit(Some(400_000), 100_000)));
        assert!(
            !same_request(Some(&kubelet), limit(None, 100_000)),
            "lifted"
        );
        // A limit no machine can serve: the full read says why.
        assert!(!same_request(None, limit(Some(u64::MAX), 1)));
    }

    #[test]
    fn only_a_cgroup_root_owns_and_alone_may_write_can_ask() {
        assert!(trusted(owned(0, 0o755)));
        assert!(trusted(owned(0, 0o555)));
        let me = nix::unistd::geteuid().as_raw();
        assert!(trusted(owned(me, 0o755)), "the daemon's own user (tests)");
        if me != 65534 {
            assert!(!trusted(owned(65534, 0o755)), "a delegated subtree");
        }
        assert!(!trusted(owned(0, 0o775)), "a group may set its xattr");
        assert!(!trusted(owned(0, 0o757)), "anyone may set its xattr");
        assert!(!trusted(None), "an owner that could not be read");
    }

    /// The audit: uid 65534 set `user.pinctl.cpus` on its own delegated
    /// cgroup and took 26 of 30 CPUs. Its xattr, a rule naming it and a
    /// bundle found by its name now ask for nothing, and say why.
    #[test]
    fn a_cgroup_owned_by_another_user_asks_for_nothing_whatever_it_carries() {
        let text = "[[rule]]\nmatch = \"hpc.slice/**\"\ncpus = 2\n";
        let config = crate::config::parse(text, Path::new("/etc/pinctl/pinctld.toml")).unwrap();
        let rel = "hpc.slice/made-by-uid-65534";
        let mut obs = Observed {
            rel: rel.into(),
            xattr: Some("26".into()),
            owner: owned(65534, 0o755),
            ..Observed::default()
        };
        let kind = Kind::Other;
        let (intent, problem) = decide(&kind, &obs, None, &config);
        assert_eq!(intent, None);
        let problem = problem.unwrap();
        assert!(problem.contains("26 exclusive CPUs"), "{problem}");
        assert!(problem.contains("uid 65534"), "{problem}");
        assert!(problem.contains("xattr user.pinctl.cpus"), "{problem}");
        obs.xattr = None;
        let (intent, problem) = decide(&kind, &obs, None, &config);
        assert_eq!(intent, None, "the rule names it, but a user made it");
        assert!(problem.unwrap().contains("rule"));
        // Asking for nothing is not a problem, trusted or not.
        obs.xattr = Some("0".into());
        assert_eq!(decide(&kind, &obs, None, &config).1, None);
        // The same cgroup owned by root asks as before.
        obs.owner = owned(0, 0o755);
        obs.xattr = Some("26".into());
        let (intent, problem) = decide(&kind, &obs, None, &config);
        assert_eq!(
            intent.map(|i| (i.cpus, i.source)),
            Some((26, Source::Xattr))
        );
        assert_eq!(problem, None);
    }

    #[test]
    fn a_long_bad_value_is_quoted_short() {
        assert_eq!(quote("four"), "\"four\"");
        assert_eq!(quote("a\u{1b}[2J"), "\"a\\u{1b}[2J\"");
        let long = "x".repeat(200_000);
        let q = quote(&long);
        assert!(q.len() < 100, "{q}");
        assert!(q.ends_with("(200000 bytes in all)"), "{q}");
        let wide = "é".repeat(100);
        assert!(
            quote(&wide).contains("(200 bytes in all)"),
            "cut on a char boundary"
        );
    }

    /// The audit: `config.json` was read with no size or type limit,
    /// following links; nine FIFO bundles left the daemon "failed" for good
    /// (every I/O thread stuck in `open`), and a link to `/dev/zero` cost
    /// about 1 GB per reconcile. Each is now refused at once, with why.
    #[test]
    fn a_bundle_that_is_no_plain_small_file_is_refused_without_blocking() {
        use crate::io::RealFs;
        use std::os::unix::fs::symlink;
        let tmp = tempfile::tempdir().unwrap();
        let dirs = vec![tmp.path().to_path_buf()];
        let make = |id: &str| {
            let d = tmp.path().join(id);
            std::fs::create_dir(&d).unwrap();
            d.join("config.json")
        };
        let good = r#"{"annotations":{"pinctl.io/cpus":"2"}}"#;
        std::fs::write(make("good"), good).unwrap();
        nix::unistd::mkfifo(
            &make("fifo"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        symlink("/dev/zero", make("zero")).unwrap();
        // open(2) of a socket fails (ENXIO) before anything says what it is.
        let _socket = std::os::unix::net::UnixListener::bind(make("socket")).unwrap();
        std::fs::File::create(make("huge"))
            .unwrap()
            .set_len(MAX_BUNDLE_BYTES + 1)
            .unwrap();
        std::fs::write(make("garbage"), "\u{1b}[2J not json").unwrap();
        std::fs::create_dir(make("dir")).unwrap();
        // The container's directory itself a link elsewhere.
        std::fs::create_dir(tmp.path().join("elsewhere")).unwrap();
        std::fs::write(tmp.path().join("elsewhere/config.json"), good).unwrap();
        symlink(tmp.path().join("elsewhere"), tmp.path().join("linked")).unwrap();

        let (tx, rx) = std::sync::mpsc::channel();
        let dirs_ = dirs.clone();
        std::thread::spawn(move || {
            let found: Vec<(&str, Option<Bundle>)> = [
                "good", "fifo", "zero", "huge", "garbage", "dir", "linked", "socket", "none",
            ]
            .into_iter()
            .map(|id| (id, find_bundle(&RealFs, &dirs_, id).unwrap()))
            .collect();
            let _ = tx.send(found);
        });
        let found = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("find_bundle returns at once, whatever the file is");
        let reason = |b: &Option<Bundle>| {
            b.as_ref()
                .and_then(|b| b.unusable.as_ref())
                .map(|u| u.reason.clone())
        };
        for (id, bundle) in &found {
            let why = reason(bundle);
            let expected = match *id {
                "good" => {
                    let cpus = bundle.as_ref().unwrap().cpus.as_ref();
                    assert_eq!(cpus.map(|(_, v)| v.as_str()), Some("2"));
                    None
                }
                "none" => {
                    assert_eq!(bundle, &None);
                    None
                }
                "fifo" => Some("not a regular file (a FIFO)"),
                "zero" | "linked" => Some("a symbolic link below the bundle directory"),
                "huge" => Some("larger than"),
                "garbage" => Some("not an OCI config"),
                "dir" => Some("not a regular file (a directory)"),
                "socket" => Some("No such device or address"),
                _ => unreachable!(),
            };
            match (expected, &why) {
                (None, None) => {}
                (Some(e), Some(w)) if w.contains(e) => {}
                _ => panic!("{id}: expected {expected:?}, found {why:?}"),
            }
        }
        // Remembered until the file changes, then read again.
        let (_, fifo) = &found[1];
        let fifo = fifo.as_ref().unwrap();
        assert!(!fifo.stale(&RealFs));
        std::fs::remove_file(&fifo.path).unwrap();
        std::fs::write(&fifo.path, good).unwrap();
        assert!(fifo.stale(&RealFs));
        assert_eq!(
            find_bundle(&RealFs, &dirs, "fifo")
                .unwrap()
                .and_then(|b| b.cpus),
            Some(("pinctl.io/cpus".to_string(), "2".to_string()))
        );
    }

    #[test]
    fn the_xattr_is_a_count_and_maybe_its_numa_nodes() {
        assert_eq!(parse_xattr("4"), Some((4, vec![], false)));
        assert_eq!(parse_xattr("4@1\n"), Some((4, vec![1], false)));
        assert_eq!(parse_xattr("8@0-1,3"), Some((8, vec![0, 1, 3], false)));
        assert_eq!(parse_xattr("8+full-cores"), Some((8, vec![], true)));
        assert_eq!(parse_xattr("8@1+full-cores"), Some((8, vec![1], true)));
        for bad in [
            "@1",
            "4@",
            "4@x",
            "4@1@2",
            "four@1",
            "4 @ 1",
            "+full-cores",
            "4+full",
            "4+full-cores@1",
        ] {
            assert_eq!(parse_xattr(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn counts_are_plain_numbers() {
        assert_eq!(parse_count("4"), Some(4));
        assert_eq!(parse_count(" 0\n"), Some(0));
        for bad in ["", "-1", "four", "4.0", "+4", "99999999999999999999"] {
            assert_eq!(parse_count(bad), None, "{bad:?}");
        }
    }
}
