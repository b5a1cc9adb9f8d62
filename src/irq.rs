//! Interrupt affinity under `/proc/irq`: what `irq_affinity` reads, decides
//! and writes to keep device interrupts off exclusive CPUs.
//!
//! - One rule for each line `N` (`smp_affinity_list`) and for what lines
//!   requested later start with ([`Irq::Default`]): keep what it had, minus
//!   the CPUs to keep clear ([`target`]).
//! - [`step`] adds the memory ([`Steered`]): what it had is put back once its
//!   CPUs stop being exclusive; a value someone else wrote is the new one.
//! - A write the kernel refuses for the interrupt's life is not a failure to
//!   retry ([`is_refusal`]).
//! - [`irqbalance`] finds irqbalance and the CPUs it leaves alone.
//! - Readers and writers take the procfs root and an [`Fs`]; [`target`] and
//!   [`step`] are pure.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::cpuset::CpuSet;
use crate::io::Fs;
use crate::procfs;
pub use crate::steer::{Steered, Step, step, target};

/// An interrupt whose affinity can be set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Irq {
    /// `default_smp_affinity` (a hex mask): where a line requested from now
    /// on starts.
    Default,
    /// Interrupt line `N`.
    Line(u32),
}

impl fmt::Display for Irq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Irq::Default => f.write_str("default"),
            Irq::Line(n) => write!(f, "{n}"),
        }
    }
}

impl FromStr for Irq {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "default" => Ok(Irq::Default),
            _ => s
                .parse()
                .map(Irq::Line)
                .map_err(|_| format!("{s:?} is not an interrupt (a number or \"default\")")),
        }
    }
}

impl Irq {
    /// The file that holds its affinity.
    pub fn file(self, proc_root: &Path) -> PathBuf {
        let dir = proc_root.join("irq");
        match self {
            Irq::Default => dir.join("default_smp_affinity"),
            Irq::Line(n) => dir.join(n.to_string()).join("smp_affinity_list"),
        }
    }

    /// `set` as its file takes it.
    pub fn text(self, set: &CpuSet) -> String {
        match self {
            Irq::Default => set.to_mask(),
            Irq::Line(_) => set.to_string(),
        }
    }

    /// Reads its affinity; an unreadable value is `InvalidData` naming the
    /// file, a line that went away `NotFound`.
    pub fn read(self, fs: &dyn Fs, proc_root: &Path) -> io::Result<CpuSet> {
        let path = self.file(proc_root);
        let text = fs.read(&path)?;
        let parsed = match self {
            Irq::Default => CpuSet::from_mask(&text),
            Irq::Line(_) => text.parse(),
        };
        parsed.map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: {e}", path.display()),
            )
        })
    }

    /// Writes its affinity.
    pub fn write(self, fs: &dyn Fs, proc_root: &Path, set: &CpuSet) -> io::Result<()> {
        fs.write(&self.file(proc_root), &self.text(set))
    }
}

/// Every interrupt under `proc_root/irq`: [`Irq::Default`], then the lines
/// in ascending order.
pub fn list(fs: &dyn Fs, proc_root: &Path) -> io::Result<Vec<Irq>> {
    let mut lines: Vec<u32> = fs
        .read_dir(&proc_root.join("irq"))?
        .into_iter()
        .filter(|e| e.is_dir)
        .filter_map(|e| e.name.parse().ok())
        .collect();
    lines.sort_unstable();
    Ok(std::iter::once(Irq::Default)
        .chain(lines.into_iter().map(Irq::Line))
        .collect())
}

/// Whether a failed write of an interrupt's affinity is the kernel
/// refusing to move it, for as long as it exists: `EIO` (a kernel-managed
/// interrupt, x86's timer and cascade) or, since kernel 6.x, `EPERM` for
/// the same (the VM bed's probe sees it on 6.12). Anything else (a
/// read-only `/proc/irq`, no vectors left, `EBUSY`) may pass.
pub fn is_refusal(errno: Option<i32>) -> bool {
    matches!(errno, Some(libc::EIO) | Some(libc::EPERM))
}

/// A running irqbalance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Irqbalance {
    pub pid: u32,
    /// The CPUs it leaves alone, from its environment; `None` when it was
    /// given none: it then bans only `isolcpus=` and `nohz_full=` CPUs.
    pub banned: Option<CpuSet>,
    /// Why its environment could not be read (reading another process's
    /// environment takes the right to trace it), when it could not: then
    /// what it bans is unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unreadable: Option<String>,
}

/// Finds a running irqbalance under `proc_root`: the first process whose
/// `comm` is `irqbalance`. It rewrites affinities every 10 s unless told
/// which CPUs to leave alone ([`banned`]).
pub fn irqbalance(fs: &dyn Fs, proc_root: &Path) -> io::Result<Option<Irqbalance>> {
    for pid in procfs::list_pids(fs, proc_root)? {
        let dir = proc_root.join(pid.to_string());
        match fs.read(&dir.join("comm")) {
            Ok(comm) if comm.trim_end() == "irqbalance" => {}
            _ => continue,
        }
        let (banned, unreadable) = match fs.read(&dir.join("environ")) {
            Ok(env) => (banned(&env), None),
            Err(e) => (None, Some(e.to_string())),
        };
        return Ok(Some(Irqbalance {
            pid,
            banned,
            unreadable,
        }));
    }
    Ok(None)
}

/// The CPUs irqbalance bans, from its NUL-separated environment:
/// `IRQBALANCE_BANNED_CPUS` (a mask) when set and not empty, else
/// `IRQBALANCE_BANNED_CPULIST` (a list), as irqbalance reads them.
pub fn banned(environ: &str) -> Option<CpuSet> {
    let var = |name: &str| {
        environ
            .split('\0')
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .filter(|v| !v.trim().is_empty())
    };
    if let Some(mask) = var("IRQBALANCE_BANNED_CPUS") {
        return CpuSet::from_mask(mask).ok();
    }
    var("IRQBALANCE_BANNED_CPULIST").and_then(|list| list.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::RealFs;

    fn set(s: &str) -> CpuSet {
        s.parse().unwrap()
    }

    #[test]
    fn an_interrupt_keeps_what_it_had_minus_the_cpus_kept_clear() {
        let online = set("0-7");
        // Not on an exclusive CPU: as it is.
        assert_eq!(target(&set("0-1"), &set("4-5"), &online), set("0-1"));
        // Partly: the rest of what it had.
        assert_eq!(target(&set("0-7"), &set("4-5"), &online), set("0-3,6-7"));
        // Only there (a queue pinned to an exclusive CPU): every other.
        assert_eq!(target(&set("4"), &set("4-5"), &online), set("0-3,6-7"));
        // Its other CPUs offline: the same.
        assert_eq!(target(&set("4,9"), &set("4-5"), &online), set("0-3,6-7"));
        // Every CPU exclusive: nowhere else to go.
        assert_eq!(target(&set("4"), &online, &online), set("4"));
    }

    #[test]
    fn a_step_steers_keeps_puts_back_and_takes_a_foreign_value() {
        let online = set("0-3");
        let away = set("3");
        // First seen on CPU 3: moved, what it had kept.
        let s = step(&set("0-3"), None, &away, &online);
        let kept = Steered {
            was: set("0-3"),
            set: set("0-2"),
        };
        assert_eq!(s.write, Some(set("0-2")));
        assert_eq!(s.keep.as_ref(), Some(&kept));
        assert!(!s.overwritten);
        // Seen again as written: nothing to write, still kept.
        let s = step(&set("0-2"), Some(&kept), &away, &online);
        assert_eq!((s.write, s.keep.as_ref()), (None, Some(&kept)));
        // Nothing kept clear any more: put back, forgotten.
        let s = step(&set("0-2"), Some(&kept), &CpuSet::new(), &online);
        assert_eq!((s.write, s.keep), (Some(set("0-3")), None));
        // Someone wrote 1,3 since: that is what it had now.
        let s = step(&set("1,3"), Some(&kept), &away, &online);
        assert!(s.overwritten);
        assert_eq!(s.write, Some(set("1")));
        assert_eq!(s.keep.unwrap().was, set("1,3"));
        // Its CPU offline: nothing written, still kept; back online, put back.
        let kept4 = Steered {
            was: set("3"),
            set: set("0-2"),
        };
        let s = step(&set("0-2"), Some(&kept4), &CpuSet::new(), &set("0-2"));
        assert_eq!((s.write, s.keep.as_ref()), (None, Some(&kept4)));
        let s = step(&set("0-2"), Some(&kept4), &CpuSet::new(), &online);
        assert_eq!((s.write, s.keep), (Some(set("3")), None));
        // Someone wrote 1: nothing to do or to put back.
        let s = step(&set("1"), Some(&kept), &away, &online);
        assert_eq!((s.write, s.keep, s.overwritten), (None, None, true));
        // Never on an exclusive CPU: nothing.
        let s = step(&set("0"), None, &away, &online);
        assert_eq!((s.write, s.keep), (None, None));
    }

    #[test]
    fn interrupt_names_round_trip_and_the_default_is_a_mask() {
        for irq in [Irq::Default, Irq::Line(0), Irq::Line(127)] {
            assert_eq!(irq.to_string().parse::<Irq>(), Ok(irq));
        }
        assert!("x".parse::<Irq>().is_err());
        assert_eq!(Irq::Default.text(&set("0-3")), "f");
        assert_eq!(Irq::Line(4).text(&set("0-3")), "0-3");
    }

    #[test]
    fn reads_lists_and_the_default_mask_from_a_tree() {
        let root = tempfile::tempdir().unwrap();
        let irq = root.path().join("irq");
        for (rel, text) in [
            ("default_smp_affinity", "ff\n"),
            ("4/smp_affinity_list", "0-3\n"),
            ("10/smp_affinity_list", "2\n"),
            ("7/smp_affinity_list", "oops\n"),
        ] {
            let path = irq.join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        let fs = RealFs;
        let all = list(&fs, root.path()).unwrap();
        assert_eq!(
            all,
            vec![Irq::Default, Irq::Line(4), Irq::Line(7), Irq::Line(10)]
        );
        assert_eq!(Irq::Default.read(&fs, root.path()).unwrap(), set("0-7"));
        assert_eq!(Irq::Line(4).read(&fs, root.path()).unwrap(), set("0-3"));
        let e = Irq::Line(7).read(&fs, root.path()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("irq/7/smp_affinity_list"), "{e}");
        Irq::Default.write(&fs, root.path(), &set("0-1")).unwrap();
        assert_eq!(Irq::Default.read(&fs, root.path()).unwrap(), set("0-1"));
    }

    #[test]
    fn irqbalance_is_found_with_the_cpus_it_bans() {
        let root = tempfile::tempdir().unwrap();
        let proc = |pid: u32, comm: &str, env: &str| {
            let dir = root.path().join(pid.to_string());
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("comm"), format!("{comm}\n")).unwrap();
            std::fs::write(dir.join("environ"), env).unwrap();
        };
        proc(1, "systemd", "");
        assert_eq!(irqbalance(&RealFs, root.path()).unwrap(), None);
        proc(
            812,
            "irqbalance",
            "PATH=/bin\0IRQBALANCE_BANNED_CPULIST=2-5\0",
        );
        assert_eq!(
            irqbalance(&RealFs, root.path()).unwrap(),
            Some(Irqbalance {
                pid: 812,
                banned: Some(set("2-5")),
                unreadable: None,
            })
        );
        assert_eq!(
            banned("IRQBALANCE_BANNED_CPUS=c\0IRQBALANCE_BANNED_CPULIST=1\0"),
            Some(set("2-3"))
        );
        assert_eq!(
            banned("IRQBALANCE_BANNED_CPUS=\0IRQBALANCE_BANNED_CPULIST=1\0"),
            Some(set("1"))
        );
        assert_eq!(banned("IRQBALANCE_ARGS=--foo\0"), None);
    }
}
