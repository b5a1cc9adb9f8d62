//! A fake sysfs of power files in a tempdir, and a [`Validating`] file
//! system that refuses what the kernel refuses, for the power classes
//! (issue #35).
//!
//! [`PowerTree`] writes, for each CPU, `cpufreq/` (governors, cpuinfo and
//! scaling frequencies, base frequency, EPP), `cpuidle/stateK/{name,disable}`
//! and `power/pm_qos_resume_latency_us`; and for each die
//! `intel_uncore_frequency/package_PP_die_DD/` (TPMI parts: `uncoreNN/`). An offline CPU has no
//! `cpufreq/`, as in the kernel. [`Validating`] wraps the real file system
//! and checks each write before making it: the governor must be listed in
//! `scaling_available_governors`, frequencies must lie within
//! `cpuinfo_{min,max}_freq` (uncore: `initial_{min,max}_freq_khz`) with the
//! minimum never above the maximum, `disable` takes `0` or `1`, the resume
//! latency a number or `n/a`. A refused write fails with `EINVAL` and
//! changes nothing; every write is logged. The daemon's own tests run the
//! real binary on the plain tree (no validation there); the order and
//! refusals are proven through [`Validating`], on the same code path
//! (`pinctl::power::sysfs::pass`). A fake has none of the kernel's other
//! rules: the VM bed is the final word.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use pinctl::io::{Entry, Fs, RealFs};

pub const GOVERNORS: &str = "performance powersave";
pub const CSTATES: [&str; 4] = ["POLL", "C1", "C1E", "C6"];

/// A fake power tree under `root` (a sysfs root).
pub struct PowerTree {
    pub root: PathBuf,
}

impl PowerTree {
    /// An empty tree at `root`.
    pub fn new(root: &Path) -> Self {
        PowerTree {
            root: root.to_path_buf(),
        }
    }

    /// Writes `value` and a newline to `rel` below the root, making its
    /// directories (as sysfs prints it).
    pub fn put(&self, rel: &str, value: &str) {
        let path = self.root.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, format!("{value}\n")).unwrap();
    }

    /// Gives CPU `cpu` every power file: cpuinfo 800 MHz to 3.5 GHz, base
    /// 2 GHz, `powersave` between those, EPP `balance_performance`, four
    /// C-states enabled, resume latency 0.
    pub fn cpu(&self, cpu: u32) -> &Self {
        let d = format!("devices/system/cpu/cpu{cpu}");
        for (file, value) in [
            ("scaling_available_governors", GOVERNORS),
            ("scaling_governor", "powersave"),
            ("cpuinfo_min_freq", "800000"),
            ("cpuinfo_max_freq", "3500000"),
            ("base_frequency", "2000000"),
            ("scaling_min_freq", "800000"),
            ("scaling_max_freq", "3500000"),
            ("energy_performance_preference", "balance_performance"),
            (
                "energy_performance_available_preferences",
                "default performance balance_performance balance_power power",
            ),
        ] {
            self.put(&format!("{d}/cpufreq/{file}"), value);
        }
        for (k, name) in CSTATES.iter().enumerate() {
            self.put(&format!("{d}/cpuidle/state{k}/name"), name);
            self.put(&format!("{d}/cpuidle/state{k}/disable"), "0");
        }
        self.put(&format!("{d}/power/pm_qos_resume_latency_us"), "0");
        self
    }

    /// Puts CPU `cpu` on `package`/`die` (its `topology/` ids; a sysfs
    /// fixture has its own).
    pub fn on_die(&self, cpu: u32, package: u32, die: u32) -> &Self {
        let d = format!("devices/system/cpu/cpu{cpu}/topology");
        self.put(&format!("{d}/physical_package_id"), &package.to_string());
        self.put(&format!("{d}/die_id"), &die.to_string());
        self
    }

    /// Gives CPU `cpu` only `power/pm_qos_resume_latency_us`, as the VM
    /// bed's qemu guest has.
    pub fn qos_only(&self, cpu: u32) -> &Self {
        self.put(
            &format!("devices/system/cpu/cpu{cpu}/power/pm_qos_resume_latency_us"),
            "0",
        );
        self
    }

    /// An uncore die: 800 MHz to 2.4 GHz, set to the whole range.
    pub fn die(&self, package: u32, die: u32) -> &Self {
        self.uncore_files(&format!(
            "devices/system/cpu/intel_uncore_frequency/package_{package:02}_die_{die:02}"
        ))
    }

    /// A fabric cluster of a TPMI part, `uncoreNN` (`die`: its `die_id`;
    /// `None` for a cluster without CPUs, which has none): 800 MHz to
    /// 2.4 GHz, set to the whole range.
    pub fn cluster(&self, n: u32, package: u32, die: Option<u32>) -> &Self {
        let d = format!("devices/system/cpu/intel_uncore_frequency/uncore{n:02}");
        self.put(&format!("{d}/package_id"), &package.to_string());
        if let Some(die) = die {
            self.put(&format!("{d}/die_id"), &die.to_string());
        }
        self.uncore_files(&d)
    }

    fn uncore_files(&self, d: &str) -> &Self {
        for (file, value) in [
            ("initial_min_freq_khz", "800000"),
            ("initial_max_freq_khz", "2400000"),
            ("min_freq_khz", "800000"),
            ("max_freq_khz", "2400000"),
        ] {
            self.put(&format!("{d}/{file}"), value);
        }
        self
    }

    /// Takes CPU `cpu` offline: its `cpufreq/` goes, as in the kernel.
    pub fn offline(&self, cpu: u32) {
        let _ = fs::remove_dir_all(
            self.root
                .join(format!("devices/system/cpu/cpu{cpu}/cpufreq")),
        );
    }

    /// The trimmed contents of `rel` below the root.
    pub fn read(&self, rel: &str) -> String {
        fs::read_to_string(self.root.join(rel))
            .unwrap_or_else(|e| panic!("{rel}: {e}"))
            .trim()
            .to_string()
    }

    /// Every file below the root with its trimmed contents, sorted: a
    /// snapshot to compare before and after (sysfs prints a newline the
    /// daemon does not write).
    pub fn snapshot(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        walk(&self.root, &self.root, &mut out);
        out.sort();
        out
    }
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        if path.is_dir() {
            walk(root, &path, out);
        } else {
            let rel = path.strip_prefix(root).unwrap().display().to_string();
            let text = fs::read_to_string(&path).unwrap_or_default();
            out.push((rel, text.trim().to_string()));
        }
    }
}

/// The real file system, with the kernel's checks on power files' writes.
#[derive(Default)]
pub struct Validating {
    /// Every write tried: (path, data, accepted).
    pub log: Mutex<Vec<(PathBuf, String, bool)>>,
    /// How many files were read.
    pub reads: std::sync::atomic::AtomicUsize,
}

fn read_num(path: &Path) -> io::Result<u64> {
    fs::read_to_string(path)?
        .trim()
        .parse()
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn check(path: &Path, data: &str) -> io::Result<()> {
    let einval = || Err(io::Error::from_raw_os_error(libc::EINVAL));
    let name = path.file_name().unwrap().to_string_lossy().to_string();
    let dir = path.parent().unwrap();
    let value = data.trim();
    match name.as_str() {
        "scaling_governor" => {
            let offered = fs::read_to_string(dir.join("scaling_available_governors"))?;
            if !offered.split_whitespace().any(|g| g == value) {
                return einval();
            }
        }
        "scaling_min_freq" | "scaling_max_freq" | "min_freq_khz" | "max_freq_khz" => {
            let Ok(v) = value.parse::<u64>() else {
                return einval();
            };
            let (lo, hi, other, is_min) = match name.as_str() {
                "scaling_min_freq" => (
                    "cpuinfo_min_freq",
                    "cpuinfo_max_freq",
                    "scaling_max_freq",
                    true,
                ),
                "scaling_max_freq" => (
                    "cpuinfo_min_freq",
                    "cpuinfo_max_freq",
                    "scaling_min_freq",
                    false,
                ),
                "min_freq_khz" => (
                    "initial_min_freq_khz",
                    "initial_max_freq_khz",
                    "max_freq_khz",
                    true,
                ),
                _ => (
                    "initial_min_freq_khz",
                    "initial_max_freq_khz",
                    "min_freq_khz",
                    false,
                ),
            };
            if v < read_num(&dir.join(lo))? || v > read_num(&dir.join(hi))? {
                return einval();
            }
            let other = read_num(&dir.join(other))?;
            if (is_min && v > other) || (!is_min && v < other) {
                return einval();
            }
        }
        "disable" if value != "0" && value != "1" => return einval(),
        "pm_qos_resume_latency_us"
            if value != "n/a" && value.parse::<i32>().map_or(true, |v| v < 0) =>
        {
            return einval();
        }
        "energy_performance_preference" => {
            let offered = fs::read_to_string(dir.join("energy_performance_available_preferences"))?;
            if !offered.split_whitespace().any(|e| e == value) && value.parse::<u8>().is_err() {
                return einval();
            }
        }
        _ => {}
    }
    Ok(())
}

impl Fs for Validating {
    fn read(&self, path: &Path) -> io::Result<String> {
        self.reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        RealFs.read(path)
    }
    fn write(&self, path: &Path, data: &str) -> io::Result<()> {
        // sysfs files exist or the write fails: no file is made by a write.
        if !path.exists() {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        let result = check(path, data).and_then(|()| RealFs.write(path, data));
        self.log
            .lock()
            .unwrap()
            .push((path.to_path_buf(), data.to_string(), result.is_ok()));
        result
    }
    fn read_dir(&self, path: &Path) -> io::Result<Vec<Entry>> {
        RealFs.read_dir(path)
    }
    fn get_xattr(&self, path: &Path, name: &str) -> io::Result<Option<Vec<u8>>> {
        RealFs.get_xattr(path, name)
    }
    fn set_xattr(&self, path: &Path, name: &str, value: &[u8]) -> io::Result<()> {
        RealFs.set_xattr(path, name, value)
    }
    fn mkdir(&self, path: &Path) -> io::Result<()> {
        RealFs.mkdir(path)
    }
    fn exists(&self, path: &Path) -> io::Result<bool> {
        RealFs.exists(path)
    }
}
