//! Reading and writing the power files under a sysfs root passed in: what
//! each online CPU and uncore die offers ([`Offer`]), what its files hold
//! now, and one write at a time.
//!
//! - Every call takes the file operations ([`Fs`]) and the root: the daemon
//!   runs them on its I/O threads, tests on fake trees.
//! - A file that is absent is not offered (a VM has no cpufreq). One that
//!   cannot be read or parsed is not offered either; its error, naming the
//!   file, is in [`Reading::errors`].

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use super::{
    CPU_DIR, CpuOffer, DieOffer, FreqOffer, Knob, Offer, Plan, UNCORE_DIR, Why, Write, originals,
};
use crate::cpuset::CpuSet;
use crate::io::{Fs, IoPool, chain};

/// Why a power file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum PowerError {
    /// Reading failed.
    #[error("failed to read {}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The file held something else than a value of its kind.
    #[error("{}: unexpected content {content:?}", .path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What it held (at most 64 characters of it).
        content: String,
    },
    /// Writing failed.
    #[error("failed to write {data:?} to {}", .path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// What was written.
        data: String,
        /// The error.
        #[source]
        source: io::Error,
    },
}

impl PowerError {
    /// The errno of a failed read or write.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            PowerError::Read { source, .. } | PowerError::Write { source, .. } => {
                source.raw_os_error()
            }
            PowerError::Parse { .. } => None,
        }
    }
}

/// What [`read`] found.
#[derive(Debug, Default)]
pub struct Reading {
    /// What each online CPU and each die offers.
    pub offer: Offer,
    /// What each offered file holds now, trimmed.
    pub current: BTreeMap<Knob, String>,
    /// Files that exist and could not be read or parsed: not offered.
    pub errors: Vec<PowerError>,
}

/// The CPU's directory.
fn cpu_dir(root: &Path, cpu: u32) -> PathBuf {
    root.join(CPU_DIR).join(format!("cpu{cpu}"))
}

/// Reads a file, trimmed; `Ok(None)` when it does not exist.
fn read_opt(fs: &dyn Fs, path: &Path) -> Result<Option<String>, PowerError> {
    match fs.read(path) {
        Ok(text) => Ok(Some(text.trim().to_string())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(PowerError::Read {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// A number in kHz (or an id); `Ok(None)` when the file does not exist.
fn read_num(fs: &dyn Fs, path: &Path) -> Result<Option<u64>, PowerError> {
    match read_opt(fs, path)? {
        None => Ok(None),
        Some(text) => text.parse().map(Some).map_err(|_| PowerError::Parse {
            path: path.to_path_buf(),
            content: text.chars().take(64).collect(),
        }),
    }
}

/// Reads what every CPU of `online` and every uncore die under `root`
/// offers, and what the offered files hold now.
pub fn read(fs: &dyn Fs, root: &Path, online: &CpuSet) -> Reading {
    let mut r = Reading::default();
    let dies = read_dies(fs, root, &mut r);
    for cpu in online.iter() {
        let offer = read_cpu(fs, root, cpu, &dies, &mut r);
        r.offer.cpus.insert(cpu, offer);
    }
    r
}

/// Reads only what `knobs`' files hold now, taking `offer` as what sysfs
/// offers (a round of checks: the files in play, not every offer file);
/// `None` when one of them cannot be read, for a full [`read`] instead.
pub fn read_known(
    fs: &dyn Fs,
    root: &Path,
    offer: &Offer,
    knobs: &std::collections::BTreeSet<Knob>,
) -> Option<Reading> {
    let mut r = Reading {
        offer: offer.clone(),
        ..Reading::default()
    };
    for knob in knobs.iter().filter(|k| offer.has(k)) {
        r.current
            .insert(knob.clone(), read_back(fs, root, knob).ok()?);
    }
    Some(r)
}

/// Keeps `result`'s value, or its error in `r` and `None`.
fn keep<T>(r: &mut Reading, result: Result<Option<T>, PowerError>) -> Option<T> {
    result.unwrap_or_else(|e| {
        r.errors.push(e);
        None
    })
}

/// The uncore directories by the (package, die) they serve. Two layouts:
/// `package_PP_die_DD`, one per die; and on TPMI parts `uncoreNN`, one per
/// fabric cluster, with its `package_id`. Where any `uncoreNN` exists, only
/// those are used: a write to `package_*_die_*` there sets every cluster of
/// the package (the kernel's `intel_uncore_frequency_scaling.rst`).
///
/// A cluster's die is its `die_id`, which the kernel gives only with more
/// than one die per package; without it, die 0 when its `agent_types` has
/// `core`. A cluster of neither (I/O, or a kernel that says nothing) serves
/// no CPU.
fn read_dies(fs: &dyn Fs, root: &Path, r: &mut Reading) -> BTreeMap<(u64, u64), Vec<String>> {
    let dir = root.join(UNCORE_DIR);
    let entries = match fs.read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return BTreeMap::new(),
        Err(source) => {
            r.errors.push(PowerError::Read { path: dir, source });
            return BTreeMap::new();
        }
    };
    type Found = (String, DieOffer, u64, u64);
    let mut per_die: BTreeMap<(u64, u64), Vec<Found>> = BTreeMap::new();
    let mut clusters: BTreeMap<(u64, u64), Vec<Found>> = BTreeMap::new();
    let mut tpmi = false;
    for e in entries.into_iter().filter(|e| e.is_dir) {
        let d = dir.join(&e.name);
        let cluster = e.name.starts_with("uncore");
        let id = if cluster {
            let Some(package) = keep(r, read_num(fs, &d.join("package_id"))) else {
                continue;
            };
            tpmi = true;
            let die = keep(r, read_num(fs, &d.join("die_id"))).or_else(|| {
                let agents = keep(r, read_opt(fs, &d.join("agent_types")))?;
                agents.split_whitespace().any(|a| a == "core").then_some(0)
            });
            let Some(die) = die else { continue };
            Some((package, die))
        } else {
            die_id(&e.name)
        };
        let Some(id) = id else { continue };
        let min = keep(r, read_num(fs, &d.join("initial_min_freq_khz")));
        let max = keep(r, read_num(fs, &d.join("initial_max_freq_khz")));
        let (Some(min), Some(max)) = (min, max) else {
            continue;
        };
        let now_min = keep(r, read_num(fs, &d.join("min_freq_khz")));
        let now_max = keep(r, read_num(fs, &d.join("max_freq_khz")));
        let (Some(now_min), Some(now_max)) = (now_min, now_max) else {
            continue;
        };
        let found = (e.name, DieOffer { min, max }, now_min, now_max);
        if cluster {
            clusters.entry(id).or_default().push(found);
        } else {
            per_die.insert(id, vec![found]);
        }
    }
    let chosen = if tpmi { clusters } else { per_die };
    let mut by_id = BTreeMap::new();
    for (id, found) in chosen {
        let mut names = Vec::new();
        for (name, offer, now_min, now_max) in found {
            r.current
                .insert(Knob::UncoreMin(name.clone()), now_min.to_string());
            r.current
                .insert(Knob::UncoreMax(name.clone()), now_max.to_string());
            r.offer.dies.insert(name.clone(), offer);
            names.push(name);
        }
        names.sort();
        by_id.insert(id, names);
    }
    by_id
}

/// `package_PP_die_DD` → (PP, DD).
fn die_id(name: &str) -> Option<(u64, u64)> {
    let rest = name.strip_prefix("package_")?;
    let (p, d) = rest.split_once("_die_")?;
    Some((p.parse().ok()?, d.parse().ok()?))
}

fn read_cpu(
    fs: &dyn Fs,
    root: &Path,
    cpu: u32,
    dies: &BTreeMap<(u64, u64), Vec<String>>,
    r: &mut Reading,
) -> CpuOffer {
    let dir = cpu_dir(root, cpu);
    let mut o = CpuOffer {
        freq: read_freq(fs, &dir.join("cpufreq"), cpu, r),
        ..CpuOffer::default()
    };
    o.cstates = read_cstates(fs, &dir.join("cpuidle"), cpu, r);
    let qos = root.join(Knob::ResumeLatency(cpu).rel_path());
    if let Some(v) = keep(r, read_opt(fs, &qos)) {
        o.resume_latency = true;
        r.current.insert(Knob::ResumeLatency(cpu), v);
    }
    if !dies.is_empty() {
        let package = keep(r, read_num(fs, &dir.join("topology/physical_package_id")));
        // Kernels before 5.6 and single-die parts may have no die_id.
        let die = keep(r, read_num(fs, &dir.join("topology/die_id"))).unwrap_or(0);
        o.dies = package
            .and_then(|p| dies.get(&(p, die)).cloned())
            .unwrap_or_default();
    }
    o
}

fn read_freq(fs: &dyn Fs, dir: &Path, cpu: u32, r: &mut Reading) -> Option<FreqOffer> {
    // Offline CPUs, and machines without a cpufreq driver, have none.
    let governors = keep(r, read_opt(fs, &dir.join("scaling_available_governors")))?;
    let min = keep(r, read_num(fs, &dir.join("cpuinfo_min_freq")))?;
    let max = keep(r, read_num(fs, &dir.join("cpuinfo_max_freq")))?;
    let base = keep(r, read_num(fs, &dir.join("base_frequency")));
    let mut now = BTreeMap::new();
    for (file, knob) in [
        ("scaling_governor", Knob::Governor(cpu)),
        ("scaling_min_freq", Knob::MinFreq(cpu)),
        ("scaling_max_freq", Knob::MaxFreq(cpu)),
    ] {
        let path = dir.join(file);
        let value = keep(r, read_opt(fs, &path))?;
        if file != "scaling_governor" && value.parse::<u64>().is_err() {
            r.errors.push(PowerError::Parse {
                path,
                content: value.chars().take(64).collect(),
            });
            return None;
        }
        now.insert(knob, value);
    }
    r.current.extend(now);
    let epp = match keep(r, read_opt(fs, &dir.join("energy_performance_preference"))) {
        None => None,
        Some(v) => {
            r.current.insert(Knob::Epp(cpu), v);
            let names = keep(
                r,
                read_opt(fs, &dir.join("energy_performance_available_preferences")),
            );
            Some(
                names
                    .unwrap_or_default()
                    .split_whitespace()
                    .map(str::to_string)
                    .collect(),
            )
        }
    };
    Some(FreqOffer {
        governors: governors.split_whitespace().map(str::to_string).collect(),
        min,
        max,
        base,
        epp,
    })
}

fn read_cstates(fs: &dyn Fs, dir: &Path, cpu: u32, r: &mut Reading) -> Vec<(u32, String)> {
    let entries = match fs.read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Vec::new(),
        Err(source) => {
            r.errors.push(PowerError::Read {
                path: dir.to_path_buf(),
                source,
            });
            return Vec::new();
        }
    };
    let mut states = Vec::new();
    for e in entries.into_iter().filter(|e| e.is_dir) {
        let Some(k) = e
            .name
            .strip_prefix("state")
            .and_then(|k| k.parse::<u32>().ok())
        else {
            continue;
        };
        let d = dir.join(&e.name);
        let (Some(name), Some(disable)) = (
            keep(r, read_opt(fs, &d.join("name"))),
            keep(r, read_opt(fs, &d.join("disable"))),
        ) else {
            continue;
        };
        r.current.insert(Knob::CstateDisable(cpu, k), disable);
        states.push((k, name));
    }
    states.sort();
    states
}

/// Writes `value` to `knob`'s file under `root`.
pub fn write(fs: &dyn Fs, root: &Path, knob: &Knob, value: &str) -> Result<(), PowerError> {
    let path = root.join(knob.rel_path());
    fs.write(&path, value).map_err(|source| PowerError::Write {
        path,
        data: value.to_string(),
        source,
    })
}

/// Reads `knob`'s file under `root` back, trimmed.
pub fn read_back(fs: &dyn Fs, root: &Path, knob: &Knob) -> Result<String, PowerError> {
    let path = root.join(knob.rel_path());
    match fs.read(&path) {
        Ok(text) => Ok(text.trim().to_string()),
        Err(source) => Err(PowerError::Read { path, source }),
    }
}

/// One write of a pass and what came of it.
#[derive(Debug)]
pub struct Written {
    /// The write.
    pub write: Write,
    /// What the file held before it.
    pub old: Option<String>,
    /// The value read back after it, or the error (with its path, and the
    /// data for a write; the pool's own errors as text).
    pub result: Result<String, String>,
    /// The errno of a failed write, if the kernel gave one.
    pub errno: Option<i32>,
}

/// What one [`pass`] did.
#[derive(Debug, Default)]
pub struct Pass {
    /// Why the power files could not be read at all.
    pub error: Option<String>,
    /// Whether no CPU offered any power file (a node without them).
    pub nothing_offered: bool,
    /// Files that could not be read or parsed, as text.
    pub read_errors: Vec<String>,
    /// The plan (its refusals, and what classes want).
    pub plan: Plan,
    /// The originals after the pass: those added before its writes, less
    /// those put back.
    pub originals: BTreeMap<Knob, String>,
    /// Why the originals file could not be saved, if it could not: then no
    /// class's value was written, only originals put back.
    pub save_error: Option<String>,
    /// Each write made, in order.
    pub written: Vec<Written>,
    /// What each file read held when the pass read it.
    pub current: BTreeMap<Knob, String>,
    /// What sysfs offered, when the pass read every file (`None` after a
    /// pass over the known files only).
    pub offer: Option<Offer>,
}

/// What a pass is asked to bring about.
#[derive(Debug, Clone)]
pub struct Ask {
    /// The sysfs root.
    pub root: PathBuf,
    /// The originals file.
    pub originals_file: PathBuf,
    /// The online CPUs.
    pub online: CpuSet,
    /// The class of each CPU that should have one.
    pub classes_of: BTreeMap<u32, String>,
    /// The classes.
    pub classes: Vec<crate::config::Class>,
    /// The originals kept so far.
    pub originals: BTreeMap<Knob, String>,
    /// Whether a class's value may be written: not while the originals
    /// file could not be read (what it holds would be lost), when only
    /// originals are put back.
    pub may_set: bool,
    /// What the last full pass found offered, and the files in play (those
    /// a class wants and those with an original): only these are read, if
    /// all can be. `None` reads every file.
    pub known: Option<(Offer, std::collections::BTreeSet<Knob>)>,
}

/// One pass over the power files, every file operation on `pool`'s I/O
/// threads: read what sysfs offers and holds, [`super::plan`], save the
/// new originals (atomically, before any write that needs them), make the
/// writes in the plan's order reading each back, then forget (and save)
/// the originals that were put back.
pub async fn pass(pool: &IoPool, ask: Ask) -> Pass {
    let Ask {
        root,
        originals_file,
        online,
        classes_of,
        classes,
        originals,
        may_set,
        known,
    } = ask;
    let mut out = Pass {
        originals: originals.clone(),
        ..Pass::default()
    };
    let (r, o) = (root.clone(), online.clone());
    let reading = match pool
        .run_op("read", &root.join(CPU_DIR), move |fs| {
            let known = known.and_then(|(offer, knobs)| read_known(fs, &r, &offer, &knobs));
            Ok(match known {
                Some(reading) => (reading, false),
                None => (read(fs, &r, &o), true),
            })
        })
        .await
    {
        Ok((reading, full)) => {
            if full {
                out.offer = Some(reading.offer.clone());
            }
            reading
        }
        Err(e) => {
            out.error = Some(chain(&e));
            return out;
        }
    };
    out.nothing_offered = reading.offer.is_empty();
    out.read_errors = reading.errors.iter().map(|e| chain(e)).collect();
    let plan = super::plan(
        &classes_of,
        &classes,
        &reading.offer,
        &reading.current,
        &originals,
    );
    let mut kept = originals.clone();
    for (k, v) in &plan.save {
        kept.entry(k.clone()).or_insert_with(|| v.clone());
    }
    let mut writes = plan.writes.clone();
    if !may_set {
        kept = originals.clone();
        writes.retain(|w| w.why == Why::Restore);
    } else if kept != originals {
        let (path, body) = (originals_file.clone(), kept.clone());
        let saved = pool
            .run_op("save", &originals_file, move |_| {
                originals::save(&path, &body).map_err(io::Error::other)
            })
            .await;
        if let Err(e) = saved {
            out.save_error = Some(chain(&e));
            kept = originals.clone();
            writes.retain(|w| w.why == Why::Restore);
        }
    }
    let items: Vec<(PathBuf, Write)> = writes
        .into_iter()
        .map(|w| (root.join(w.knob.rel_path()), w))
        .collect();
    let order: Vec<Write> = items.iter().map(|(_, w)| w.clone()).collect();
    let r = root.clone();
    let results = pool
        .run_batch("write", items, move |fs, _, w| {
            Ok(match write(fs, &r, &w.knob, &w.value) {
                Err(e) => Err((e.raw_os_error(), chain(&e))),
                Ok(()) => read_back(fs, &r, &w.knob).map_err(|e| (None, chain(&e))),
            })
        })
        .await;
    let mut failed = std::collections::BTreeSet::new();
    for (write, result) in order.into_iter().zip(results) {
        let (result, errno) = match result {
            Ok(Ok(back)) => (Ok(back), None),
            Ok(Err((errno, e))) => (Err(e), errno),
            Err(e) => (Err(chain(&e)), e.raw_os_error()),
        };
        if result.is_err() {
            failed.insert(write.knob.clone());
        }
        out.written.push(Written {
            old: reading.current.get(&write.knob).cloned(),
            write,
            result,
            errno,
        });
    }
    let before = kept.clone();
    for k in &plan.forget {
        if !failed.contains(k) {
            kept.remove(k);
        }
    }
    if kept != before {
        let (path, body) = (originals_file.clone(), kept.clone());
        if let Err(e) = pool
            .run_op("save", &originals_file, move |_| {
                originals::save(&path, &body).map_err(io::Error::other)
            })
            .await
        {
            // The originals put back stay in the file: harmless, they are
            // what the files hold.
            out.save_error = Some(chain(&e));
        }
    }
    out.originals = kept;
    out.plan = plan;
    out.current = reading.current;
    out
}
