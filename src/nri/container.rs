//! What a container the runtime is about to make asks for, decided from
//! what NRI's `CreateContainer` says by the same rules as a cgroup read
//! from the tree ([`crate::intent::decide`]): the annotations and devices
//! are read as its `config.json` will hold them, the CPU limit as its
//! cgroup will hold it, and the cgroup's place in the tree from
//! `linux.cgroups_path`. Pure: values in, decision out.
//!
//! What the tree alone can say is not known yet: the cgroup's xattrs
//! (nobody can have set them on a cgroup that does not exist) and its
//! owner (the runtime, root, makes it).

use std::path::PathBuf;

use super::api;
use crate::cgroup::layout::{Kind, classify};
use crate::cgroup::{CpuLimit, Observed, Rel};
use crate::config::Config;
use crate::intent::{self, Announced, AnnouncedDevice, Intent};
use crate::io::Owner;

/// The kernel's default CFS period, when the runtime gives a quota alone.
const DEFAULT_PERIOD: u64 = 100_000;

/// A container being made, as pinctld sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Decided {
    /// Where its cgroup will be, relative to the cgroup root.
    pub rel: Rel,
    pub kind: Kind,
    /// Its workload's identity ([`intent::workload_key`]): the cgroup,
    /// once made and read, joins the workload by it.
    pub key: String,
    /// What it asks for: `None` or a request for 0 CPUs is the shared
    /// pool.
    pub intent: Option<Intent>,
    /// A value that could not be used, as a reading reports it.
    pub problem: Option<String>,
    /// The CPU limit its cgroup will have, as the runtime asks it.
    pub limit: Option<CpuLimit>,
}

impl Decided {
    /// Whether it asks for exclusive CPUs.
    pub fn wants(&self) -> bool {
        self.intent.as_ref().is_some_and(Intent::wants)
    }
}

/// Why a container's request cannot be decided.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Undecided {
    #[error("container {id} has no linux.cgroups_path")]
    NoCgroupsPath { id: String },
    #[error("container {id}: cannot place linux.cgroups_path {path:?} in the cgroup tree")]
    BadCgroupsPath { id: String, path: String },
}

/// The cgroup runc makes for OCI `linux.cgroupsPath` `path`, relative to
/// the cgroup root: `slice:prefix:name` (the systemd driver: the scope
/// `prefix-name.scope` in the slice, slices nested by name) or an absolute
/// path (cgroupfs). `None` for any other form (a relative path, which runc
/// places below its own cgroup).
pub fn cgroup_of(path: &str) -> Option<Rel> {
    if let Some(abs) = path.strip_prefix('/') {
        let rel = abs.trim_end_matches('/');
        let ok = rel
            .split('/')
            .all(|n| !n.is_empty() && n != "." && n != "..");
        return ok.then(|| Rel::from(rel));
    }
    let mut parts = path.split(':');
    let (slice, prefix, name) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || name.is_empty() || name.contains('/') {
        return None;
    }
    let slice = if slice.is_empty() {
        "system.slice"
    } else {
        slice
    };
    let mut rel = expand_slice(slice)?;
    let unit = match prefix {
        "" => name.to_string(),
        p => format!("{p}-{name}.scope"),
    };
    if unit.contains('/') {
        return None;
    }
    if !rel.is_empty() {
        rel.push('/');
    }
    rel.push_str(&unit);
    Some(Rel::from(rel))
}

/// Where systemd puts slice `name`: `a-b.slice` in `a.slice/a-b.slice`,
/// `-.slice` at the root (as systemd and runc expand it).
fn expand_slice(name: &str) -> Option<String> {
    let stem = name.strip_suffix(".slice")?;
    if stem == "-" {
        return Some(String::new());
    }
    let bad = stem.is_empty()
        || stem.starts_with('-')
        || stem.ends_with('-')
        || stem.contains("--")
        || stem.contains('/');
    if bad {
        return None;
    }
    let mut path = String::new();
    for (i, _) in stem.match_indices('-') {
        path.push_str(&stem[..i]);
        path.push_str(".slice/");
    }
    path.push_str(name);
    Some(path)
}

/// The CPU limit runc will write for `resources`: `None` without a quota
/// (or with a negative one: unlimited).
fn limit_of(resources: Option<&api::LinuxResources>) -> Option<CpuLimit> {
    let cpu = resources?.cpu.as_ref()?;
    let quota = cpu.quota.as_ref().map(|q| q.value)?;
    let period = cpu
        .period
        .as_ref()
        .map(|p| p.value)
        .filter(|&p| p > 0)
        .unwrap_or(DEFAULT_PERIOD);
    Some(CpuLimit {
        quota: u64::try_from(quota).ok().filter(|&q| q > 0),
        period,
    })
}

/// What container `c` of pod `pod` asks for, by the configuration's rules.
pub fn decide(
    cfg: &Config,
    c: &api::Container,
    pod: Option<&api::PodSandbox>,
) -> Result<Decided, Undecided> {
    let linux = c.linux.as_ref();
    let path = linux.map(|l| l.cgroups_path.as_str()).unwrap_or("");
    if path.is_empty() {
        return Err(Undecided::NoCgroupsPath { id: c.id.clone() });
    }
    let rel = cgroup_of(path).ok_or_else(|| Undecided::BadCgroupsPath {
        id: c.id.clone(),
        path: path.to_string(),
    })?;
    let kind = classify(&rel);
    let mut announced = Announced {
        annotations: c
            .annotations
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect(),
        devices: linux
            .map(|l| {
                l.devices
                    .iter()
                    .map(|d| AnnouncedDevice {
                        kind: &d.r#type,
                        major: d.major,
                        minor: d.minor,
                    })
                    .collect()
            })
            .unwrap_or_default(),
        env: c.env.iter().map(String::as_str).collect(),
        mounts: c.mounts.iter().map(|m| m.source.as_str()).collect(),
    };
    // containerd and CRI-O put the pod's and the container's names in the
    // spec's annotations before plugins see it; NRI's own fields stand in
    // for a runtime that does not.
    let pod_uid = pod.map(|p| p.uid.as_str()).filter(|u| !u.is_empty());
    if let Some(uid) = pod_uid {
        announced
            .annotations
            .entry("io.kubernetes.cri.sandbox-uid")
            .or_insert(uid);
    }
    if !c.name.is_empty() {
        announced
            .annotations
            .entry("io.kubernetes.cri.container-name")
            .or_insert(&c.name);
    }
    let bundle = intent::announced_bundle(&PathBuf::from(format!("nri:{}", c.id)), &announced);
    let obs = Observed {
        rel: rel.clone(),
        limit: limit_of(linux.and_then(|l| l.resources.as_ref())),
        // The runtime makes it as root.
        owner: Some(Owner {
            uid: 0,
            mode: 0o755,
        }),
        ..Observed::default()
    };
    let (intent, problem) = intent::decide(&kind, &obs, Some(&bundle), cfg);
    let limit = obs.limit;
    let key = if intent.as_ref().is_some_and(Intent::wants) {
        intent::workload_key(&kind, &rel, Some(&bundle))
    } else {
        String::new()
    };
    Ok(Decided {
        rel,
        kind,
        key,
        intent,
        problem,
        limit,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) const ID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    pub(crate) const UID: &str = "99999999-2222-3333-4444-555555555555";

    #[test]
    fn both_drivers_forms_of_the_cgroups_path() {
        let systemd = format!(
            "kubepods-pod{}.slice:cri-containerd:{ID}",
            UID.replace('-', "_")
        );
        assert_eq!(
            cgroup_of(&systemd).as_deref(),
            Some(
                format!(
                    "kubepods.slice/kubepods-pod{}.slice/cri-containerd-{ID}.scope",
                    UID.replace('-', "_")
                )
                .as_str()
            )
        );
        assert_eq!(
            cgroup_of("kubepods-burstable-podx.slice:crio:abc").as_deref(),
            Some(
                "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podx.slice/crio-abc.scope"
            )
        );
        assert_eq!(
            cgroup_of(&format!("/kubepods/pod{UID}/{ID}")).as_deref(),
            Some(format!("kubepods/pod{UID}/{ID}").as_str())
        );
        assert_eq!(cgroup_of("-.slice::x.scope").as_deref(), Some("x.scope"));
        assert_eq!(
            cgroup_of(":docker:abc").as_deref(),
            Some("system.slice/docker-abc.scope")
        );
        for bad in [
            "",
            "relative/path",
            "/a/../b",
            "/a//b",
            "a.slice:p",
            "x:y:z",
            "a.slice:p:n:m",
            "a--b.slice:p:n",
            "a.slice:p:n/x",
        ] {
            assert_eq!(cgroup_of(bad), None, "{bad:?}");
        }
    }

    fn container(annotations: &[(&str, &str)], quota: Option<i64>) -> api::Container {
        container_at(&format!("/kubepods/pod{UID}/{ID}"), annotations, quota)
    }

    /// Container [`ID`], named `app`, at `cgroups_path`, with a quota of
    /// `quota` µs per 100 ms.
    pub(crate) fn container_at(
        cgroups_path: &str,
        annotations: &[(&str, &str)],
        quota: Option<i64>,
    ) -> api::Container {
        api::Container {
            id: ID.to_string(),
            name: "app".to_string(),
            annotations: annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            linux: Some(api::LinuxContainer {
                cgroups_path: cgroups_path.to_string(),
                resources: Some(api::LinuxResources {
                    cpu: Some(api::LinuxCpu {
                        quota: quota.map(|value| api::OptionalInt64 { value }),
                        period: Some(api::OptionalUInt64 { value: 100_000 }),
                        ..Default::default()
                    }),
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// Pod [`UID`].
    pub(crate) fn pod() -> api::PodSandbox {
        api::PodSandbox {
            uid: UID.to_string(),
            ..Default::default()
        }
    }

    /// A Guaranteed pod's container with a whole-number limit asks as its
    /// cgroup will: the kubelet's rule, keyed by pod and name.
    #[test]
    fn the_kubelets_rule_from_the_announced_limit() {
        let cfg = Config::default();
        let d = decide(&cfg, &container(&[], Some(400_000)), Some(&pod())).unwrap();
        assert_eq!(d.rel.as_ref(), format!("kubepods/pod{UID}/{ID}"));
        assert!(matches!(d.kind, Kind::Container { .. }));
        assert_eq!(d.intent.as_ref().map(|i| i.cpus), Some(4));
        assert_eq!(d.key, format!("pod:{UID}/app"));
        let d = decide(&cfg, &container(&[], Some(150_000)), Some(&pod())).unwrap();
        assert!(!d.wants());
        assert_eq!(d.key, "");
        let d = decide(&cfg, &container(&[], None), Some(&pod())).unwrap();
        assert!(!d.wants());
    }

    /// The annotations decide as in `config.json`: the container's own
    /// over the pod's, a bad value reported, and `0` is the shared pool.
    #[test]
    fn annotations_decide_as_in_the_bundle() {
        let cfg = Config::default();
        let ask = |a: &[(&str, &str)]| decide(&cfg, &container(a, None), Some(&pod())).unwrap();
        let d = ask(&[("pinctl.io/cpus", "2"), ("pinctl.io/cpus.app", "3")]);
        assert_eq!(d.intent.as_ref().map(|i| i.cpus), Some(3));
        assert_eq!(d.key, format!("pod:{UID}/app"));
        let d = ask(&[("pinctl.io/cpus", "two")]);
        assert!(!d.wants());
        let why = d.problem.unwrap();
        assert!(
            why.contains("not a CPU count") && why.contains(&format!("nri:{ID}")),
            "{why}"
        );
        let d = ask(&[
            ("pinctl.io/cpus", "0"),
            ("io.kubernetes.cri.sandbox-uid", "other"),
        ]);
        assert!(!d.wants());
        let d = ask(&[
            ("pinctl.io/cpus", "1"),
            ("io.kubernetes.cri.sandbox-uid", "other"),
        ]);
        assert_eq!(d.key, "pod:other/app", "the spec's annotations come first");
    }

    #[test]
    fn no_cgroups_path_is_no_decision() {
        let cfg = Config::default();
        let mut c = container(&[], Some(400_000));
        c.linux.as_mut().unwrap().cgroups_path.clear();
        assert!(matches!(
            decide(&cfg, &c, None),
            Err(Undecided::NoCgroupsPath { .. })
        ));
        c.linux.as_mut().unwrap().cgroups_path = "relative".into();
        assert!(matches!(
            decide(&cfg, &c, None),
            Err(Undecided::BadCgroupsPath { .. })
        ));
    }
}
