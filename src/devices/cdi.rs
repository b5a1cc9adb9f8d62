//! Container Device Interface (CDI) names, and the device nodes their spec
//! files give them (issue #43): a workload near `nvidia.com/gpu=0` is near
//! the device nodes `/etc/cdi/*.yaml` or `/var/run/cdi/*.json` list for it.
//!
//! - [`is_qualified`] says whether a word is a CDI name,
//!   `VENDOR/CLASS=NAME` (as `cdi.k8s.io/*` annotations and
//!   `pinctl run --near` give them).
//! - [`parse_spec`] is pure: a spec file's text in, its devices' nodes out.
//!   JSON is YAML, so one parser reads both.
//! - [`Registry::load`] reads every spec file of the directories passed in,
//!   through [`Fs`] (the daemon calls it on its I/O threads). A later
//!   directory's device wins over an earlier one's, as CDI orders them
//!   (`/var/run/cdi`, written at run time, over `/etc/cdi`).
//! - Only a device's own `containerEdits.deviceNodes` count: the spec-wide
//!   ones are control nodes every device of the kind shares
//!   (`/dev/nvidiactl`), on no bus.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{DeviceRef, MAX_DEVICES};
use crate::io::Fs;

/// The largest spec file read: real ones are a few KiB (one per device
/// kind, a few hundred bytes per device).
pub const MAX_SPEC_BYTES: u64 = 1 << 20;

/// The most spec files read from one directory.
pub const MAX_SPEC_FILES: usize = 256;

/// Whether `word` is a fully qualified CDI device name: `VENDOR/CLASS=NAME`,
/// the vendor a domain-like name, the class and name of letters, digits
/// and `_-.:` (the class without `.:`), each starting with a letter or a
/// digit.
pub fn is_qualified(word: &str) -> bool {
    let Some((kind, name)) = word.split_once('=') else {
        return false;
    };
    let Some((vendor, class)) = kind.split_once('/') else {
        return false;
    };
    let starts_alnum = |s: &str| s.chars().next().is_some_and(|c| c.is_ascii_alphanumeric());
    let made_of = |s: &str, extra: &str| {
        starts_alnum(s)
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || extra.contains(c))
    };
    word.len() <= 256 && made_of(vendor, "._-") && made_of(class, "_-") && made_of(name, "_-.:")
}

#[derive(Deserialize)]
struct RawSpec {
    kind: String,
    #[serde(default)]
    devices: Vec<RawDevice>,
}

#[derive(Deserialize)]
struct RawDevice {
    name: String,
    #[serde(default, rename = "containerEdits")]
    edits: Option<RawEdits>,
}

#[derive(Deserialize)]
struct RawEdits {
    #[serde(default, rename = "deviceNodes")]
    nodes: Vec<RawNode>,
}

#[derive(Deserialize)]
struct RawNode {
    path: String,
    #[serde(default, rename = "hostPath")]
    host_path: Option<String>,
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    major: Option<i64>,
    #[serde(default)]
    minor: Option<i64>,
}

impl RawNode {
    /// The host's device this node is: its number where the spec gives
    /// one, else its host path (its path in the container where that is
    /// the same), which must be below `/dev`.
    fn device(&self) -> Result<DeviceRef, String> {
        if let Some(number) = self
            .kind
            .as_deref()
            .and_then(|kind| DeviceRef::from_node(kind, self.major, self.minor))
        {
            return Ok(number);
        }
        let path = self.host_path.as_deref().unwrap_or(&self.path);
        match path.parse::<DeviceRef>() {
            Ok(d @ DeviceRef::Path(_)) => Ok(d),
            _ => Err(format!("device node {path:?} is not below /dev")),
        }
    }
}

/// A CDI device's nodes, or why they cannot be used.
pub type Nodes = Result<Vec<DeviceRef>, String>;

/// One spec file's devices: each fully qualified name and its [`Nodes`].
/// `Err` when the file is not a CDI spec.
pub fn parse_spec(text: &str) -> Result<Vec<(String, Nodes)>, String> {
    let spec: RawSpec = yaml_serde::from_str(text).map_err(|e| e.to_string())?;
    if !spec.kind.contains('/') || spec.kind.contains('=') {
        return Err(format!("kind {:?} is not VENDOR/CLASS", spec.kind));
    }
    let mut out = Vec::with_capacity(spec.devices.len());
    for d in spec.devices {
        let name = format!("{}={}", spec.kind, d.name);
        if !is_qualified(&name) {
            continue;
        }
        let raw = d.edits.map(|e| e.nodes).unwrap_or_default();
        let nodes = if raw.is_empty() {
            Err("its spec lists no device node of its own".to_string())
        } else if raw.len() > MAX_DEVICES {
            Err(format!(
                "its spec lists {} device nodes, more than {MAX_DEVICES}",
                raw.len()
            ))
        } else {
            raw.iter().map(RawNode::device).collect()
        };
        out.push((name, nodes));
    }
    Ok(out)
}

/// The devices of the CDI spec files of some directories.
#[derive(Debug, Default)]
pub struct Registry {
    dirs: Vec<PathBuf>,
    devices: BTreeMap<String, (PathBuf, Nodes)>,
    /// Spec files that could not be read or parsed, each with why.
    pub problems: Vec<String>,
}

impl Registry {
    /// Reads every `*.json`, `*.yaml` and `*.yml` file of each directory in
    /// `dirs`, in order (a missing directory has none). A device named in a
    /// later directory replaces an earlier one's; within one directory, the
    /// first file in name order keeps it.
    pub fn load(fs: &dyn Fs, dirs: &[PathBuf]) -> Registry {
        let mut reg = Registry {
            dirs: dirs.to_vec(),
            ..Registry::default()
        };
        for dir in dirs {
            let mut names: Vec<String> = match fs.read_dir(dir) {
                Ok(entries) => entries
                    .into_iter()
                    .filter(|e| !e.is_dir)
                    .map(|e| e.name)
                    .filter(|n| [".json", ".yaml", ".yml"].iter().any(|x| n.ends_with(x)))
                    .collect(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    reg.problems.push(format!("{}: {e}", dir.display()));
                    continue;
                }
            };
            names.sort();
            if names.len() > MAX_SPEC_FILES {
                reg.problems.push(format!(
                    "{}: {} spec files, only the first {MAX_SPEC_FILES} read",
                    dir.display(),
                    names.len()
                ));
                names.truncate(MAX_SPEC_FILES);
            }
            let mut here = BTreeMap::new();
            for name in names {
                let path = dir.join(&name);
                let parsed = fs
                    .read_beneath(dir, Path::new(&name), MAX_SPEC_BYTES)
                    .map_err(|e| e.to_string())
                    .and_then(|text| parse_spec(&text));
                match parsed {
                    Ok(devices) => {
                        for (device, nodes) in devices {
                            here.entry(device).or_insert_with(|| (path.clone(), nodes));
                        }
                    }
                    Err(why) => reg.problems.push(format!("{}: {why}", path.display())),
                }
            }
            reg.devices.extend(here);
        }
        reg
    }

    /// The device nodes of CDI device `name`, or why there are none: no
    /// spec names it, or its spec's nodes cannot be used.
    pub fn nodes(&self, name: &str) -> Result<&[DeviceRef], String> {
        match self.devices.get(name) {
            Some((_, Ok(nodes))) => Ok(nodes),
            Some((file, Err(why))) => Err(format!("CDI device {name} ({}): {why}", file.display())),
            None => {
                let dirs: Vec<String> = self.dirs.iter().map(|d| d.display().to_string()).collect();
                let mut why = format!(
                    "no CDI spec in {} names {name}",
                    if dirs.is_empty() {
                        "no directory".to_string()
                    } else {
                        dirs.join(", ")
                    }
                );
                if let Some(p) = self.problems.first() {
                    why.push_str(&format!(" (unreadable: {p})"));
                }
                Err(why)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::NodeKind;

    #[test]
    fn qualified_names_are_vendor_class_and_name() {
        for ok in [
            "nvidia.com/gpu=0",
            "vendor.com/class=all",
            "a/b=c:d.e_f-g",
            "intel.com/qat=GPU-1",
        ] {
            assert!(is_qualified(ok), "{ok}");
        }
        for bad in [
            "nvidia.com/gpu",
            "gpu=0",
            "/dev/x=1",
            "a/b=",
            "a/=x",
            "=a/b",
            "a/b.c=x",
            "a b/c=d",
        ] {
            assert!(!is_qualified(bad), "{bad}");
        }
    }

    /// A YAML spec as nvidia-ctk writes it (nodes by path only; the
    /// spec-wide `/dev/nvidiactl` is no device's own), and a JSON one with
    /// device numbers and a host path.
    #[test]
    fn a_spec_gives_each_device_its_own_nodes() {
        let yaml = r#"
cdiVersion: 0.6.0
kind: nvidia.com/gpu
devices:
- name: "0"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
- name: all
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
    - path: /dev/nvidia1
- name: mounts-only
  containerEdits:
    mounts:
    - hostPath: /usr/lib/x
      containerPath: /usr/lib/x
containerEdits:
  deviceNodes:
  - path: /dev/nvidiactl
"#;
        let got = parse_spec(yaml).unwrap();
        assert_eq!(got[0].0, "nvidia.com/gpu=0");
        assert_eq!(got[0].1, Ok(vec![DeviceRef::Path("/dev/nvidia0".into())]));
        assert_eq!(got[1].1.as_ref().unwrap().len(), 2);
        assert!(got[2].1.as_ref().unwrap_err().contains("no device node"));

        let json = r#"{"cdiVersion": "0.5.0", "kind": "vendor.com/nic",
            "devices": [
              {"name": "vf0", "containerEdits": {"deviceNodes": [
                {"path": "/dev/vfio/7", "type": "c", "major": 243, "minor": 7}]}},
              {"name": "vf1", "containerEdits": {"deviceNodes": [
                {"path": "/dev/x", "hostPath": "/dev/vfio/8"}]}},
              {"name": "bad", "containerEdits": {"deviceNodes": [{"path": "/etc/passwd"}]}}
            ]}"#;
        let got = parse_spec(json).unwrap();
        assert_eq!(
            got[0].1,
            Ok(vec![DeviceRef::Number {
                kind: NodeKind::Char,
                major: 243,
                minor: 7
            }])
        );
        assert_eq!(got[1].1, Ok(vec![DeviceRef::Path("/dev/vfio/8".into())]));
        assert!(got[2].1.as_ref().unwrap_err().contains("not below /dev"));

        for bad in ["", "kind: x", "{", "kind: a/b\ndevices: 3", "- a\n- b"] {
            assert!(parse_spec(bad).is_err(), "{bad:?}");
        }
    }
}
