//! Topology discovery from a sysfs tree.
//!
//! - [`Sysfs::new`] takes the root (`/sys`, or a tempdir in tests);
//!   [`Sysfs::topology`] reads the online CPUs into a validated [`Topology`].
//!   It reads and never writes.
//! - Plain blocking `std::fs` reads: the daemon runs them on its I/O threads
//!   (a sysfs read can hang); the CLI calls them directly.
//! - Must never trust a number read: a `cpuN` or `nodeN` above [`MAX_CPU`] is
//!   refused by name before any set is built for it, and an id file must
//!   hold `-1` (unknown) or a 32-bit number, else an error names the file.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use crate::cpuset::{CpuSet, MAX_CPU, ParseCpuSetError};
use crate::topology::{CpuInfo, Topology, TopologyError};

/// Why the topology could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SysfsError {
    #[error("failed to read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("failed to parse {path}: {content:?} is not {expected}")]
    Parse {
        path: PathBuf,
        content: String,
        expected: &'static str,
    },
    #[error("failed to parse {path}")]
    CpuList {
        path: PathBuf,
        #[source]
        source: ParseCpuSetError,
    },
    #[error("{path}: {what} {number} is above the supported maximum {max}")]
    OutOfRange {
        path: PathBuf,
        what: &'static str,
        /// The number as written, which may not fit any integer type.
        number: String,
        max: u32,
    },
    #[error("CPU {cpu} is online but {path} is missing")]
    NoTopology { cpu: u32, path: PathBuf },
    #[error("CPU {cpu} is online but in no NUMA node under {path}")]
    NoNumaNode { cpu: u32, path: PathBuf },
    #[error("no online CPUs found under {path}")]
    NoCpus { path: PathBuf },
    #[error("inconsistent topology under {path}")]
    Inconsistent {
        path: PathBuf,
        #[source]
        source: TopologyError,
    },
}

/// A sysfs tree rooted at a directory.
#[derive(Debug, Clone)]
pub struct Sysfs {
    root: PathBuf,
}

impl Sysfs {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Sysfs { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn cpu_dir(&self) -> PathBuf {
        self.root.join("devices/system/cpu")
    }

    /// Reads the whole CPU topology: the online CPUs, their packages, dies,
    /// SMT siblings, L3 groups, NUMA nodes and the isolated list.
    ///
    /// Real machines are messy; each of these is handled on purpose:
    /// - offline CPUs have no `topology/`: only online CPUs are read;
    /// - `core_id` repeats across sockets and has gaps: a core is its SMT
    ///   sibling list, numbered machine-wide in order of its lowest CPU;
    /// - the L3 is found by `level`, not assumed `index3`, and grouped by its
    ///   `shared_cpu_list` (else `id`); no L3 at all is allowed;
    /// - no `devices/system/node` means one NUMA node, 0;
    /// - hybrid parts have cores with different thread counts.
    pub fn topology(&self) -> Result<Topology, SysfsError> {
        let cpu_dir = self.cpu_dir();
        let online = self.online_cpus()?;
        if online.is_empty() {
            return Err(SysfsError::NoCpus { path: cpu_dir });
        }
        let isolated = read_optional_list(&cpu_dir.join("isolated"))?.unwrap_or_default();
        let offline = read_optional_list(&cpu_dir.join("offline"))?.unwrap_or_default();
        let numa = self.numa_map(&online)?;

        let mut raw = Vec::with_capacity(online.len());
        for cpu in &online {
            raw.push(self.read_cpu(cpu)?);
        }
        let cores = assign_core_ids(&raw);
        let l3s = assign_group_ids(raw.iter().map(|r| r.l3.clone()));

        let cpus = raw
            .iter()
            .zip(cores)
            .zip(l3s)
            .map(|((r, core), l3)| CpuInfo {
                cpu: r.cpu,
                core,
                socket: r.package,
                numa: numa.get(&r.cpu).copied().unwrap_or(0),
                l3,
                die: r.die,
            })
            .collect();
        Topology::new(cpus, isolated, offline).map_err(|source| SysfsError::Inconsistent {
            path: cpu_dir,
            source,
        })
    }

    /// The online CPUs: `cpu/online`, or, when that file is missing (some
    /// containers hide it), every `cpuN` with a `topology/` directory.
    fn online_cpus(&self) -> Result<CpuSet, SysfsError> {
        let cpu_dir = self.cpu_dir();
        if let Some(online) = read_optional_list(&cpu_dir.join("online"))? {
            return Ok(online);
        }
        let mut cpus = CpuSet::new();
        for (n, path) in numbered_entries(&cpu_dir, "cpu", "CPU", MAX_CPU)? {
            if path.join("topology").is_dir() {
                cpus.insert(n);
            }
        }
        Ok(cpus)
    }

    /// CPU → NUMA node, from `node/nodeN/cpulist`. Without a `node` directory the
    /// machine is one node, 0.
    fn numa_map(&self, online: &CpuSet) -> Result<BTreeMap<u32, u32>, SysfsError> {
        let node_dir = self.root.join("devices/system/node");
        let mut map = BTreeMap::new();
        if !node_dir.is_dir() {
            return Ok(map);
        }
        // Node numbers share the CPU numbers' bound, as `[[rule]] numa` does.
        let nodes = numbered_entries(&node_dir, "node", "NUMA node", MAX_CPU)?;
        if nodes.is_empty() {
            return Ok(map);
        }
        for (node, path) in nodes {
            let list_path = path.join("cpulist");
            // A memory-only node (CXL, HBM) may have an empty list.
            if let Some(cpus) = read_optional_list(&list_path)? {
                for cpu in &cpus {
                    map.insert(cpu, node);
                }
            }
        }
        if let Some(cpu) = online.iter().find(|c| !map.contains_key(c)) {
            return Err(SysfsError::NoNumaNode {
                cpu,
                path: node_dir,
            });
        }
        Ok(map)
    }

    fn read_cpu(&self, cpu: u32) -> Result<RawCpu, SysfsError> {
        let dir = self.cpu_dir().join(format!("cpu{cpu}"));
        let topo = dir.join("topology");
        if !topo.is_dir() {
            return Err(SysfsError::NoTopology { cpu, path: topo });
        }
        // Some hypervisors report -1 for an unknown package: treat it as one package.
        let package = read_id(&topo.join("physical_package_id"))?.unwrap_or(0);
        // Architectures without dies (arm64) report -1: no die.
        let die = read_optional_id(&topo.join("die_id"))?;
        let core_id = read_optional_id(&topo.join("core_id"))?;
        // `core_cpus_list` (5.x) replaced `thread_siblings_list`; both are read.
        let siblings = match read_optional_list(&topo.join("core_cpus_list"))? {
            Some(s) => Some(s),
            None => read_optional_list(&topo.join("thread_siblings_list"))?,
        };
        let l3 = self.read_l3(&dir)?;
        Ok(RawCpu {
            cpu,
            package,
            die,
            core_id,
            siblings,
            l3,
        })
    }

    /// The L3 group key of a CPU: its `shared_cpu_list`, or failing that its `id`.
    fn read_l3(&self, cpu_dir: &Path) -> Result<Option<String>, SysfsError> {
        let cache = cpu_dir.join("cache");
        if !cache.is_dir() {
            return Ok(None);
        }
        for (_, index) in numbered_entries(&cache, "index", "cache index", u32::MAX)? {
            if read_optional_id(&index.join("level"))? != Some(3) {
                continue;
            }
            let kind = read_optional_string(&index.join("type"))?;
            if kind.as_deref().is_some_and(|k| k == "Instruction") {
                continue;
            }
            if let Some(shared) = read_optional_list(&index.join("shared_cpu_list"))? {
                return Ok(Some(format!("cpus:{shared}")));
            }
            if let Some(id) = read_optional_id(&index.join("id"))? {
                return Ok(Some(format!("id:{id}")));
            }
        }
        Ok(None)
    }
}

struct RawCpu {
    cpu: u32,
    package: u32,
    die: Option<u32>,
    core_id: Option<u32>,
    siblings: Option<CpuSet>,
    l3: Option<String>,
}

/// Machine-wide core ids: CPUs are one core when they list each other as SMT
/// siblings; without sibling lists, when package, die and `core_id` agree; with
/// neither, every CPU is its own core. Ids follow the lowest CPU of each core.
fn assign_core_ids(raw: &[RawCpu]) -> Vec<u32> {
    let keys = raw.iter().map(|r| match (&r.siblings, r.core_id) {
        (Some(s), _) => Some(format!("s:{s}")),
        (None, Some(id)) => Some(format!("c:{}:{}:{id}", r.package, r.die.unwrap_or(0))),
        (None, None) => Some(format!("cpu:{}", r.cpu)),
    });
    assign_group_ids(keys)
        .into_iter()
        .map(|id| id.unwrap_or(0))
        .collect()
}

/// Dense ids for group keys, numbered in order of first appearance (CPUs are
/// read in ascending order, so group ids follow their lowest CPU).
fn assign_group_ids(keys: impl Iterator<Item = Option<String>>) -> Vec<Option<u32>> {
    let mut ids: BTreeMap<String, u32> = BTreeMap::new();
    keys.map(|k| {
        k.map(|k| {
            let next = ids.len() as u32;
            *ids.entry(k).or_insert(next)
        })
    })
    .collect()
}

/// Entries `PREFIXN` of `dir`, sorted by N. Other names (`cpufreq`, `online`)
/// are skipped; an N above `max` (or too long for any integer) is an error
/// naming the entry, refused before anything is built for it.
fn numbered_entries(
    dir: &Path,
    prefix: &str,
    what: &'static str,
    max: u32,
) -> Result<Vec<(u32, PathBuf)>, SysfsError> {
    let read = |source| SysfsError::Read {
        path: dir.to_path_buf(),
        source,
    };
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(read)? {
        let entry = entry.map_err(read)?;
        let name = entry.file_name();
        let Some(digits) = name
            .to_str()
            .and_then(|n| n.strip_prefix(prefix))
            .filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        match digits.parse::<u32>() {
            Ok(n) if n <= max => out.push((n, entry.path())),
            _ => {
                return Err(SysfsError::OutOfRange {
                    path: entry.path(),
                    what,
                    number: digits.to_string(),
                    max,
                });
            }
        }
    }
    out.sort();
    Ok(out)
}

fn read_optional_string(path: &Path) -> Result<Option<String>, SysfsError> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(Some(s.trim().to_string())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(SysfsError::Read {
            path: path.to_path_buf(),
            source,
        }),
    }
}

fn read_optional_list(path: &Path) -> Result<Option<CpuSet>, SysfsError> {
    read_optional_string(path)?
        .map(|s| {
            s.parse().map_err(|source| SysfsError::CpuList {
                path: path.to_path_buf(),
                source,
            })
        })
        .transpose()
}

/// An id as the kernel prints it (a C `int` or `unsigned`): `-1` is
/// "unknown" (`None`), otherwise a number that fits 32 bits. Anything else,
/// 4294967296 included, is an error naming the file and the content, where a
/// cast would have made it another id.
fn parse_id(path: &Path, content: String) -> Result<Option<u32>, SysfsError> {
    if content == "-1" {
        return Ok(None);
    }
    match content.parse::<u32>() {
        Ok(id) => Ok(Some(id)),
        Err(_) => Err(SysfsError::Parse {
            path: path.to_path_buf(),
            content,
            expected: "an integer from -1 to 4294967295",
        }),
    }
}

/// The id in `path`; `None` when the file is missing or says `-1`.
fn read_optional_id(path: &Path) -> Result<Option<u32>, SysfsError> {
    match read_optional_string(path)? {
        Some(content) => parse_id(path, content),
        None => Ok(None),
    }
}

/// The id in `path`, which must exist; `None` when it says `-1`.
fn read_id(path: &Path) -> Result<Option<u32>, SysfsError> {
    let content = read_optional_string(path)?.ok_or_else(|| SysfsError::Read {
        path: path.to_path_buf(),
        source: io::Error::from(io::ErrorKind::NotFound),
    })?;
    parse_id(path, content)
}
