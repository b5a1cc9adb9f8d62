//! The devices a workload drives, and where they sit (issue #43): the NUMA
//! node a GPU, a NIC or an NVMe drive hangs off, so that the workload's
//! exclusive CPUs (and, with `align_memory`, its memory) can be taken there.
//!
//! - [`DeviceRef`] names a device: a PCI address, a network interface, a
//!   device node's path, a device number (`char:195:0`, as an OCI
//!   bundle's `linux.devices` gives it), or a CDI device. [`parse_list`] reads an operator's
//!   list (`user.pinctl.near`, a rule's `near`, `pinctl run --near`).
//! - [`locate`] finds where one sits, under a sysfs root (and, for NVIDIA's
//!   own character devices, a procfs root) passed in. Blocking `std::fs`
//!   calls through [`Fs`]: the daemon calls it on its I/O threads.
//!   A CDI name (`nvidia.com/gpu=0`) is located as the device nodes its
//!   spec file lists ([`cdi`], in [`locate_all`]).
//! - [`nodes_of`] is pure: places and a topology in, NUMA nodes out.
//! - Nothing is guessed. A device that cannot be placed (gone, virtual, a
//!   firmware that says nothing) is a [`Located`] whose `place` says why,
//!   shown by `pinctl describe`; it counts toward no node.

pub mod cdi;

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::cpuset::CpuSet;
use crate::io::{Fs, NodeKind};
use crate::topology::Topology;

/// The character major of NVIDIA's GPUs (`/dev/nvidiaN`). Its driver makes
/// no sysfs class device for them: `/proc/driver/nvidia/gpus/<PCI>/information`
/// says which minor each GPU is.
pub const NVIDIA_MAJOR: u32 = 195;

/// The most devices one workload names: more is someone else's list, not a
/// workload's devices.
pub const MAX_DEVICES: usize = 64;

/// The longest network interface name (`IFNAMSIZ` less its NUL).
const MAX_IFNAME: usize = 15;

// The kind is `io`'s (`Fs::device_number` tells it); where sysfs lists
// each kind is this module's.
impl NodeKind {
    /// Its directory under `/sys/dev`.
    fn sys_dir(self) -> &'static str {
        match self {
            NodeKind::Char => "char",
            NodeKind::Block => "block",
        }
    }
}

/// What names one device.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DeviceRef {
    /// A PCI address, `DDDD:BB:DD.F` in lower case.
    Pci(String),
    /// A network interface.
    Net(String),
    /// A device node, found by its device number.
    Path(PathBuf),
    /// A device number.
    Number {
        kind: NodeKind,
        major: u32,
        minor: u32,
    },
    /// A CDI device (`nvidia.com/gpu=0`): the device nodes its spec file
    /// lists ([`cdi`]).
    Cdi(String),
}

impl DeviceRef {
    /// A device node as OCI and CDI write one: `type` `c`, `u` or `b`, and
    /// `major` and `minor`; `None` for another type (a FIFO) or a number
    /// out of range.
    pub fn from_node(kind: &str, major: Option<i64>, minor: Option<i64>) -> Option<DeviceRef> {
        let kind = match kind {
            "c" | "u" => NodeKind::Char,
            "b" => NodeKind::Block,
            _ => return None,
        };
        let number = |n: Option<i64>| n.and_then(|n| u32::try_from(n).ok());
        Some(DeviceRef::Number {
            kind,
            major: number(major)?,
            minor: number(minor)?,
        })
    }
}

impl fmt::Display for DeviceRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceRef::Pci(a) => f.write_str(a),
            DeviceRef::Net(n) => f.write_str(n),
            DeviceRef::Path(p) => write!(f, "{}", p.display()),
            DeviceRef::Number { kind, major, minor } => {
                write!(f, "{}:{major}:{minor}", kind.sys_dir())
            }
            DeviceRef::Cdi(name) => f.write_str(name),
        }
    }
}

/// Why an operator's word names no device.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{word:?} is not a device: {why}")]
pub struct BadDevice {
    pub word: String,
    pub why: &'static str,
}

impl FromStr for DeviceRef {
    type Err = BadDevice;

    /// A path (it starts with `/`), a PCI address (`0000:3b:00.0`, or
    /// `3b:00.0` in PCI domain 0), a device number (`char:195:0`,
    /// `block:259:0`), a CDI device (`nvidia.com/gpu=0`), else a network
    /// interface name.
    fn from_str(word: &str) -> Result<DeviceRef, BadDevice> {
        let bad = |why| BadDevice {
            word: word.chars().take(80).collect(),
            why,
        };
        if word.is_empty() {
            return Err(bad("empty"));
        }
        if word.starts_with('/') {
            // Only device nodes are looked at: a word from a pod's
            // annotation must not make the daemon stat the host's files.
            if !word.starts_with("/dev/") || word.split('/').any(|c| c == "..") {
                return Err(bad("a device path is below /dev"));
            }
            return Ok(DeviceRef::Path(PathBuf::from(word)));
        }
        if let Some(addr) = pci_address(word) {
            return Ok(DeviceRef::Pci(addr));
        }
        for (prefix, kind) in [("char:", NodeKind::Char), ("block:", NodeKind::Block)] {
            if let Some(number) = word.strip_prefix(prefix) {
                let (major, minor) = number
                    .split_once(':')
                    .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
                    .ok_or_else(|| bad("a device number is MAJOR:MINOR"))?;
                return Ok(DeviceRef::Number { kind, major, minor });
            }
        }
        if cdi::is_qualified(word) {
            return Ok(DeviceRef::Cdi(word.to_string()));
        }
        if word.len() > MAX_IFNAME
            || word == "."
            || word == ".."
            || word
                .chars()
                .any(|c| c == '/' || c == ':' || c.is_whitespace() || c.is_control())
        {
            return Err(bad(
                "not a path, a PCI address (0000:3b:00.0), a device number (char:195:0), \
                 a CDI device (nvidia.com/gpu=0) or a network interface name",
            ));
        }
        Ok(DeviceRef::Net(word.to_string()))
    }
}

/// `word` as a PCI address in canonical form (`DDDD:BB:DD.F`, lower case,
/// domain 0 when left out), if it is one.
fn pci_address(word: &str) -> Option<String> {
    let hex = |s: &str, len: usize| s.len() == len && s.chars().all(|c| c.is_ascii_hexdigit());
    let (rest, function) = word.rsplit_once('.')?;
    let parts: Vec<&str> = rest.split(':').collect();
    let (domain, bus, dev) = match parts[..] {
        [bus, dev] => ("0000", bus, dev),
        [domain, bus, dev] if (4..=8).contains(&domain.len()) => (domain, bus, dev),
        _ => return None,
    };
    let function_ok = function.len() == 1 && matches!(function.as_bytes()[0], b'0'..=b'7');
    (hex(domain, domain.len()) && hex(bus, 2) && hex(dev, 2) && function_ok)
        .then(|| format!("{domain}:{bus}:{dev}.{function}").to_ascii_lowercase())
}

/// An operator's list of devices: words separated by commas or white
/// space. Every word must name a device, and there are at most
/// [`MAX_DEVICES`].
pub fn parse_list(list: &str) -> Result<Vec<DeviceRef>, BadDevice> {
    let words: Vec<&str> = list
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|w| !w.is_empty())
        .collect();
    if words.len() > MAX_DEVICES {
        return Err(BadDevice {
            word: list.chars().take(80).collect(),
            why: "more devices than one workload may name (64)",
        });
    }
    let mut out: Vec<DeviceRef> = Vec::with_capacity(words.len());
    for word in words {
        let d = word.parse()?;
        if !out.contains(&d) {
            out.push(d);
        }
    }
    Ok(out)
}

/// How a workload's device was found.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "detail")]
pub enum Found {
    /// The xattr `user.pinctl.near` (a run's `--near` too).
    Xattr,
    /// A `[[rule]]`'s `near`.
    Rule,
    /// The bundle's annotation `pinctl.io/near`.
    Annotation,
    /// The bundle's `linux.devices`.
    BundleDevice,
    /// A device node the bundle mounts from the host (`mounts`).
    BundleMount,
    /// An SR-IOV device plugin's variable in the bundle's environment.
    Env(String),
    /// A CDI annotation of the bundle (`cdi.k8s.io/...`), by its key.
    BundleCdi(String),
    /// A node of CDI device NAME, as its spec file lists it.
    Cdi(String),
}

impl fmt::Display for Found {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Found::Xattr => f.write_str("xattr user.pinctl.near"),
            Found::Rule => f.write_str("rule's near"),
            Found::Annotation => f.write_str("annotation pinctl.io/near"),
            Found::BundleDevice => f.write_str("bundle's linux.devices"),
            Found::BundleMount => f.write_str("bundle's mounts"),
            Found::Env(var) => write!(f, "bundle's environment {var}"),
            Found::BundleCdi(key) => write!(f, "bundle's annotation {key}"),
            Found::Cdi(name) => write!(f, "CDI device {name}"),
        }
    }
}

/// A device a workload drives, and how that was learnt.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Device {
    pub what: DeviceRef,
    pub found: Found,
}

/// Where a device sits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Place {
    /// Its PCI address, where it is (or hangs off) a PCI device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci: Option<String>,
    /// Its NUMA node; `None` where the firmware says nothing (`-1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<u32>,
    /// The CPUs the kernel calls local to it (`local_cpulist`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_cpus: Option<CpuSet>,
}

/// The devices `what` names, each found by `found`.
pub fn named(what: &[DeviceRef], found: &Found) -> Vec<Device> {
    what.iter()
        .map(|what| Device {
            what: what.clone(),
            found: found.clone(),
        })
        .collect()
}

/// A device and where it sits, or why that is not known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    pub device: Device,
    pub place: Result<Place, String>,
}

/// Where device `what` sits, read under sysfs root `sys` (and `proc_root`
/// for NVIDIA's GPUs). `Err` says why it is not known, naming the file.
pub fn locate(
    fs: &dyn Fs,
    sys: &Path,
    proc_root: &Path,
    what: &DeviceRef,
) -> Result<Place, String> {
    let start = match what {
        DeviceRef::Pci(addr) => sys.join("bus/pci/devices").join(addr),
        DeviceRef::Net(name) => sys.join("class/net").join(name),
        DeviceRef::Number { kind, major, minor } => {
            if *kind == NodeKind::Char
                && *major == NVIDIA_MAJOR
                && let Some(addr) = nvidia_gpu(fs, proc_root, *minor)?
            {
                return locate(fs, sys, proc_root, &DeviceRef::Pci(addr));
            }
            sys.join("dev")
                .join(kind.sys_dir())
                .join(format!("{major}:{minor}"))
        }
        DeviceRef::Cdi(name) => {
            return Err(format!(
                "CDI device {name} is placed through its spec's nodes"
            ));
        }
        DeviceRef::Path(path) => {
            let number = fs
                .device_number(path)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            let Some((kind, major, minor)) = number else {
                return Err(format!("{} is not a device node", path.display()));
            };
            return locate(
                fs,
                sys,
                proc_root,
                &DeviceRef::Number { kind, major, minor },
            );
        }
    };
    let real = fs.canonicalize(&start).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => format!("no {} (no such device here)", start.display()),
        _ => format!("{}: {e}", start.display()),
    })?;
    let devices = fs
        .canonicalize(&sys.join("devices"))
        .map_err(|e| format!("{}: {e}", sys.join("devices").display()))?;
    if !real.starts_with(&devices) {
        return Err(format!(
            "{} leads to {}, outside {}",
            start.display(),
            real.display(),
            devices.display()
        ));
    }
    // The device itself, or the nearest device above it, that has a node:
    // a block device's disk, a NIC's PCI function, a GPU's render node.
    let mut dir = real.as_path();
    loop {
        let file = dir.join("numa_node");
        if fs
            .exists(&file)
            .map_err(|e| format!("{}: {e}", file.display()))?
        {
            return read_place(fs, dir);
        }
        match dir.parent() {
            Some(up) if up.starts_with(&devices) && up != devices => dir = up,
            _ => {
                return Err(format!(
                    "{} is not on a bus with NUMA nodes (a virtual or platform device)",
                    real.display()
                ));
            }
        }
    }
}

/// The place of device directory `dir`, which has a `numa_node` file.
fn read_place(fs: &dyn Fs, dir: &Path) -> Result<Place, String> {
    let file = dir.join("numa_node");
    let text = fs
        .read(&file)
        .map_err(|e| format!("{}: {e}", file.display()))?;
    let node = match text.trim().parse::<i64>() {
        Ok(-1) => None,
        Ok(n) => Some(
            u32::try_from(n)
                .map_err(|_| format!("{}: {:?} is not a NUMA node", file.display(), text.trim()))?,
        ),
        Err(_) => {
            return Err(format!(
                "{}: {:?} is not a NUMA node",
                file.display(),
                text.trim()
            ));
        }
    };
    let list = dir.join("local_cpulist");
    let local_cpus = match fs.read(&list) {
        Ok(text) => Some(
            text.trim()
                .parse::<CpuSet>()
                .map_err(|e| format!("{}: {e}", list.display()))?,
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(format!("{}: {e}", list.display())),
    };
    let pci = dir
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(pci_address);
    Ok(Place {
        pci,
        node,
        local_cpus,
    })
}

/// The PCI address of NVIDIA's GPU with device minor `minor`, from
/// `/proc/driver/nvidia/gpus/*/information` (`Device Minor: N`). `None`
/// where the driver's directory is not there (no NVIDIA driver: the major
/// is someone else's) or no GPU has that minor.
fn nvidia_gpu(fs: &dyn Fs, proc_root: &Path, minor: u32) -> Result<Option<String>, String> {
    let dir = proc_root.join("driver/nvidia/gpus");
    let entries = match fs.read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", dir.display())),
    };
    for entry in entries {
        let Some(addr) = pci_address(&entry.name) else {
            continue;
        };
        let file = dir.join(&entry.name).join("information");
        let Ok(text) = fs.read(&file) else {
            continue;
        };
        let said = text.lines().find_map(|l| {
            let (key, value) = l.split_once(':')?;
            (key.trim() == "Device Minor").then(|| value.trim().parse::<u32>().ok())?
        });
        if said == Some(minor) {
            return Ok(Some(addr));
        }
    }
    Ok(None)
}

/// Where devices are looked up: under a sysfs root, a procfs root (for
/// NVIDIA's GPUs), and in CDI spec directories (for CDI names).
#[derive(Debug, Clone, Copy)]
pub struct Roots<'a> {
    pub sys: &'a Path,
    pub proc_root: &'a Path,
    pub cdi_dirs: &'a [PathBuf],
}

/// Locates each device ([`locate`]). A CDI device becomes the device nodes
/// its spec lists, each located ([`cdi`]; the spec files are read
/// once, and only when one is named); one no spec names stays as it is,
/// its place saying why.
pub fn locate_all(fs: &dyn Fs, roots: Roots<'_>, devices: &[Device]) -> Vec<Located> {
    let registry = devices
        .iter()
        .any(|d| matches!(d.what, DeviceRef::Cdi(_)))
        .then(|| cdi::Registry::load(fs, roots.cdi_dirs));
    let at = |device: Device| Located {
        place: locate(fs, roots.sys, roots.proc_root, &device.what),
        device,
    };
    let mut out = Vec::with_capacity(devices.len());
    for d in devices {
        match (&d.what, &registry) {
            (DeviceRef::Cdi(name), Some(registry)) => match registry.nodes(name) {
                Ok(nodes) => out.extend(nodes.iter().map(|what| {
                    at(Device {
                        what: what.clone(),
                        found: Found::Cdi(name.clone()),
                    })
                })),
                Err(why) => out.push(Located {
                    device: d.clone(),
                    place: Err(why),
                }),
            },
            _ => out.push(at(d.clone())),
        }
    }
    out
}

/// The NUMA nodes of the devices an operator names (`pinctl run --near`,
/// `pinctl plan --near`): each must be placed, and on a node of `topo`;
/// else `Err` says which and why, as `--near WORD: why`.
pub fn nodes_named(
    fs: &dyn Fs,
    roots: Roots<'_>,
    topo: &Topology,
    named: &[DeviceRef],
) -> Result<Vec<u32>, String> {
    let located = locate_all(fs, roots, &self::named(named, &Found::Xattr));
    for l in &located {
        // A CDI device's node is named with its device.
        let word = match &l.device.found {
            Found::Cdi(name) => format!("{name} ({})", l.device.what),
            _ => l.device.what.to_string(),
        };
        if let Err(why) = &l.place {
            return Err(format!("--near {word}: {why}"));
        }
        if nodes_of(topo, std::slice::from_ref(l)).is_empty() {
            return Err(format!("--near {word}: on no NUMA node of this machine"));
        }
    }
    Ok(nodes_of(topo, &located))
}

/// The NUMA node of a place on this machine: its node where the topology
/// has it, else the nodes of its local CPUs when they are not every online
/// CPU (a firmware that says nothing lists them all). Empty when neither
/// says anything.
pub fn nodes_of_place(topo: &Topology, place: &Place) -> Vec<u32> {
    if let Some(n) = place.node
        && topo.numa_nodes().contains_key(&n)
    {
        return vec![n];
    }
    match &place.local_cpus {
        Some(local) => {
            let local = local.intersection(topo.online());
            if local.is_empty() || &local == topo.online() {
                Vec::new()
            } else {
                topo.numa_of(&local)
            }
        }
        None => Vec::new(),
    }
}

/// The NUMA nodes of the devices placed, ascending, each once: where their
/// workload's CPUs go first. Devices not placed count for none.
pub fn nodes_of(topo: &Topology, located: &[Located]) -> Vec<u32> {
    let nodes: BTreeSet<u32> = located
        .iter()
        .filter_map(|l| l.place.as_ref().ok())
        .flat_map(|p| nodes_of_place(topo, p))
        .collect();
    nodes.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_name_devices_of_each_kind() {
        let cases = [
            ("0000:3B:00.0", DeviceRef::Pci("0000:3b:00.0".into())),
            ("3b:00.1", DeviceRef::Pci("0000:3b:00.1".into())),
            ("10000:01:00.0", DeviceRef::Pci("10000:01:00.0".into())),
            ("ib0", DeviceRef::Net("ib0".into())),
            ("/dev/nvidia0", DeviceRef::Path("/dev/nvidia0".into())),
            (
                "char:195:0",
                DeviceRef::Number {
                    kind: NodeKind::Char,
                    major: 195,
                    minor: 0,
                },
            ),
            (
                "block:259:3",
                DeviceRef::Number {
                    kind: NodeKind::Block,
                    major: 259,
                    minor: 3,
                },
            ),
        ];
        for (word, want) in cases {
            let got: DeviceRef = word.parse().unwrap();
            assert_eq!(got, want, "{word}");
            // What is shown parses back to the same device.
            assert_eq!(got.to_string().parse::<DeviceRef>().unwrap(), want);
        }
    }

    #[test]
    fn a_word_that_names_nothing_is_refused_and_quoted() {
        for word in [
            "",
            "/etc/shadow",
            "/dev/../etc/shadow",
            "char:195",
            "block:x:1",
            "a/b",
            "sixteen-chars-if",
            "..",
            "eth0:1",
        ] {
            let e = word.parse::<DeviceRef>().unwrap_err();
            assert!(e.to_string().contains(&format!("{word:?}")), "{e}");
        }
        // A list: separators of either kind, each device once.
        let list = parse_list("ib0, 0000:3b:00.0 ib0\t/dev/nvme0n1").unwrap();
        assert_eq!(list.len(), 3);
        let many = vec!["eth0"; MAX_DEVICES + 1].join(",");
        assert!(parse_list(&many).is_err());
        assert!(parse_list("ib0,bad/name").is_err());
    }
}
