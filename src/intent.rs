//! Intent: does a cgroup want exclusive CPUs, how many, and on whose word.
//!
//! Precedence, highest first:
//! 1. the xattr `user.pinctl.cpus` on the cgroup directory (`"0"` keeps it in
//!    the shared pool);
//! 2. the OCI annotation `pinctl.io/cpus` in the container's bundle `config.json`;
//! 3. the first `[[rule]]` whose glob matches the cgroup path;
//! 4. the kubelet's rule: a container of a Guaranteed pod whose CPU limit is a
//!    whole number of CPUs (switch: `kubelet_rule`).
//!
//! Also the workload identity: pod UID + container name when the runtime's
//! annotations say them, so that a restarted container (a new cgroup) keeps its
//! CPUs, and two cgroups of one container share one assignment.
//!
//! [`decide`] and [`parse_bundle`] are pure; [`find_bundle`] reads bundle
//! directories through [`crate::io::Fs`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock};

use serde::{Deserialize, Serialize};

use crate::cgroup::Observed;
use crate::cgroup::layout::{Kind, Qos};
use crate::config::Config;
use crate::io::Fs;

/// The OCI annotation that asks for exclusive CPUs.
pub const ANNOTATION_CPUS: &str = "pinctl.io/cpus";

/// Where a request came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Source {
    /// The `user.pinctl.cpus` xattr.
    Xattr,
    /// The `pinctl.io/cpus` OCI annotation in this bundle.
    Annotation { bundle: PathBuf },
    /// A `[[rule]]` of the configuration.
    Rule { pattern: String, line: usize },
    /// The kubelet's rule (Guaranteed pod, whole-number CPU limit).
    Kubelet,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Xattr => write!(f, "xattr user.pinctl.cpus"),
            Source::Annotation { bundle } => {
                write!(f, "annotation {ANNOTATION_CPUS} in {}", bundle.display())
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
    /// NUMA nodes to prefer (from a rule).
    pub numa: Vec<u32>,
}

impl Intent {
    /// Whether it asks for exclusive CPUs (`0` keeps the shared pool).
    pub fn wants(&self) -> bool {
        self.cpus > 0
    }
}

/// What a container's OCI bundle says about it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Bundle {
    pub path: PathBuf,
    /// The raw `pinctl.io/cpus` annotation.
    pub cpus: Option<String>,
    pub pod_uid: Option<String>,
    pub container_name: Option<String>,
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
}

#[derive(Deserialize)]
struct OciConfig {
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

/// Reads the annotations pinctl uses from an OCI `config.json`. `None` when it
/// is not valid JSON.
pub fn parse_bundle(path: &Path, config_json: &str) -> Option<Bundle> {
    let config: OciConfig = serde_json::from_str(config_json).ok()?;
    let get = |keys: &[&str]| {
        keys.iter()
            .find_map(|k| config.annotations.get(*k))
            .filter(|v| !v.is_empty())
            .cloned()
    };
    Some(Bundle {
        path: path.to_path_buf(),
        cpus: get(&[ANNOTATION_CPUS]),
        // containerd (CRI) and CRI-O name these differently.
        pod_uid: get(&["io.kubernetes.cri.sandbox-uid", "io.kubernetes.pod.uid"]),
        container_name: get(&[
            "io.kubernetes.cri.container-name",
            "io.kubernetes.container.name",
        ]),
    })
}

/// Finds and reads the bundle of container `id`: `<dir>/<id>/config.json` or
/// (CRI-O, Podman) `<dir>/<id>/userdata/config.json`, first hit wins.
pub fn find_bundle(fs: &dyn Fs, dirs: &[PathBuf], id: &str) -> Option<Bundle> {
    if id.is_empty() || id.contains('/') || id.starts_with('.') {
        return None;
    }
    for dir in dirs {
        for candidate in [
            dir.join(id).join("config.json"),
            dir.join(id).join("userdata/config.json"),
        ] {
            if let Ok(text) = fs.read(&candidate) {
                return parse_bundle(&candidate, &text);
            }
        }
    }
    None
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
/// report (a malformed xattr or annotation, which is then ignored).
pub fn decide(
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
        match parse_count(raw) {
            Some(cpus) => {
                return (
                    Some(Intent {
                        cpus,
                        source: Source::Xattr,
                        numa: Vec::new(),
                    }),
                    None,
                );
            }
            None => {
                problem = Some(format!(
                    "ignoring xattr {} = {raw:?}: not a CPU count",
                    crate::cgroup::XATTR_CPUS
                ));
            }
        }
    }
    if let Some(b) = bundle
        && let Some(raw) = &b.cpus
    {
        match parse_count(raw) {
            Some(cpus) => {
                return (
                    Some(Intent {
                        cpus,
                        source: Source::Annotation {
                            bundle: b.path.clone(),
                        },
                        numa: Vec::new(),
                    }),
                    problem,
                );
            }
            None => {
                problem.get_or_insert(format!(
                    "ignoring annotation {ANNOTATION_CPUS} = {raw:?} in {}: not a CPU count",
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

/// The identity of the workload a cgroup belongs to: `pod:<uid>/<container>`
/// when the runtime says the container name, otherwise `cgroup:<path>`.
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
            return format!("pod:{uid}/{name}");
        }
    }
    format!("cgroup:{rel}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_containerd_and_crio_annotations() {
        let containerd = r#"{"ociVersion":"1.1.0","annotations":{
            "io.kubernetes.cri.container-name":"app",
            "io.kubernetes.cri.sandbox-uid":"0f5c1b8e-1111-2222-3333-444455556666",
            "pinctl.io/cpus":"4"}}"#;
        let b = parse_bundle(Path::new("/b/config.json"), containerd).unwrap();
        assert_eq!(b.cpus.as_deref(), Some("4"));
        assert_eq!(b.container_name.as_deref(), Some("app"));
        let crio =
            r#"{"annotations":{"io.kubernetes.container.name":"db","io.kubernetes.pod.uid":"u1"}}"#;
        let b = parse_bundle(Path::new("/c"), crio).unwrap();
        assert_eq!(b.pod_uid.as_deref(), Some("u1"));
        assert_eq!(b.cpus, None);
        assert!(parse_bundle(Path::new("/d"), "{not json").is_none());
        assert!(parse_bundle(Path::new("/e"), "{}").is_some());
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
