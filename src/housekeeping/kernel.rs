//! The kernel's files for `housekeeping`: reading what the kernel's movable
//! work may use, and moving it, on the I/O pool.
//!
//! - Readers take the sysfs or procfs root and an [`Fs`]: workqueue masks
//!   ([`read_workqueues`]), RPS and XPS masks ([`read_net`]), one task
//!   ([`read_kthread`]), interrupt lines ([`read_lines`]).
//! - A kernel thread is moved with [`Fs::set_affinity`]; a mask by writing
//!   its file in hex.
//! - [`pass`] is one pass: read, plan ([`super::plan`]), save the originals
//!   before any write that adds one, write, save what is left.

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};

use super::{Found, Kept, Knob, Kthread, Line, Memory, Plan, Reading, originals};
use crate::cpuset::CpuSet;
use crate::io::{Fs, IoPool, chain};
use crate::{procfs, task};

/// The workqueues' directory, below the sysfs root.
pub const WORKQUEUE_DIR: &str = "devices/virtual/workqueue";
/// The network devices' directory, below the sysfs root.
pub const NET_DIR: &str = "class/net";

/// The file that holds a mask, or `None` for a kernel thread.
pub fn path(knob: &Knob, sysfs_root: &Path) -> Option<PathBuf> {
    let wq = sysfs_root.join(WORKQUEUE_DIR);
    let queue = |dev: &str, queue: &str, file: &str| {
        sysfs_root
            .join(NET_DIR)
            .join(dev)
            .join("queues")
            .join(queue)
            .join(file)
    };
    match knob {
        Knob::Workqueues => Some(wq.join("cpumask")),
        Knob::Workqueue { name } => Some(wq.join(name).join("cpumask")),
        Knob::Kthread { .. } => None,
        Knob::Rps { dev, queue: q } => Some(queue(dev, q, "rps_cpus")),
        Knob::Xps { dev, queue: q } => Some(queue(dev, q, "xps_cpus")),
    }
}

/// Whether an error means the file is not offered here: absent, or a
/// device that cannot say (XPS on a single-queue device reads `EINVAL` or
/// `ENOENT`; a driver without it `EOPNOTSUPP`).
fn not_offered(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound
        || matches!(
            e.raw_os_error(),
            Some(libc::EINVAL | libc::ENOENT | libc::EOPNOTSUPP | libc::ENODEV)
        )
}

fn read_mask(fs: &dyn Fs, path: &Path) -> io::Result<CpuSet> {
    let text = fs.read(path)?;
    CpuSet::from_mask(text.trim()).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: {e}", path.display()),
        )
    })
}

/// Reads one mask into `r`: found, not offered (skipped), or unread.
fn read_into(fs: &dyn Fs, r: &mut Reading, knob: Knob, path: &Path) {
    match read_mask(fs, path) {
        Ok(current) => r.masks.push(Found {
            what: knob.to_string(),
            knob,
            current,
        }),
        Err(e) if not_offered(&e) => {}
        Err(e) => {
            r.unread
                .insert(knob, format!("{}: {}", path.display(), chain(&e)));
        }
    }
}

/// The unbound workqueues' mask and each workqueue's own (only unbound
/// workqueues with a sysfs directory have one).
pub fn read_workqueues(fs: &dyn Fs, sysfs_root: &Path) -> Reading {
    let mut r = Reading::default();
    let dir = sysfs_root.join(WORKQUEUE_DIR);
    let entries = match fs.read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return r,
        Err(e) => {
            r.errors.push(format!("{}: {}", dir.display(), chain(&e)));
            return r;
        }
    };
    read_into(fs, &mut r, Knob::Workqueues, &dir.join("cpumask"));
    let mut names: Vec<String> = entries
        .into_iter()
        .filter(|e| e.is_dir)
        .map(|e| e.name)
        .collect();
    names.sort();
    for name in names {
        let path = dir.join(&name).join("cpumask");
        read_into(fs, &mut r, Knob::Workqueue { name }, &path);
    }
    r
}

/// Every network device's RPS (`rx-N/rps_cpus`) and XPS (`tx-N/xps_cpus`)
/// masks.
pub fn read_net(fs: &dyn Fs, sysfs_root: &Path) -> Reading {
    let mut r = Reading::default();
    let dir = sysfs_root.join(NET_DIR);
    let devs = match fs.read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return r,
        Err(e) => {
            r.errors.push(format!("{}: {}", dir.display(), chain(&e)));
            return r;
        }
    };
    let mut devs: Vec<String> = devs.into_iter().map(|e| e.name).collect();
    devs.sort();
    for dev in devs {
        let Ok(queues) = fs.read_dir(&dir.join(&dev).join("queues")) else {
            continue;
        };
        let mut queues: Vec<String> = queues.into_iter().map(|e| e.name).collect();
        queues.sort();
        for queue in queues {
            let knob = if queue.starts_with("rx-") {
                Knob::Rps {
                    dev: dev.clone(),
                    queue,
                }
            } else if queue.starts_with("tx-") {
                Knob::Xps {
                    dev: dev.clone(),
                    queue,
                }
            } else {
                continue;
            };
            if let Some(path) = path(&knob, sysfs_root) {
                read_into(fs, &mut r, knob, &path);
            }
        }
    }
    r
}

/// Task `pid` if it is a kernel thread (`PF_KTHREAD`); `Ok(None)` for a
/// user task or one that is gone. A user task's `status` is never read.
pub fn read_kthread(fs: &dyn Fs, proc_root: &Path, pid: u32) -> io::Result<Option<Kthread>> {
    let path = proc_root.join(pid.to_string()).join("stat");
    let text = match fs.read(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH) => {
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    let Some(stat) = task::parse_stat(pid, &text) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: not a stat line", path.display()),
        ));
    };
    if stat.flags & task::PF_KTHREAD == 0 {
        return Ok(None);
    }
    let Some(aff) = procfs::affinity(fs, proc_root, pid, pid)? else {
        return Ok(None);
    };
    Ok(Some(Kthread {
        pid,
        start: stat.start,
        comm: stat.comm,
        flags: stat.flags,
        allowed: aff.allowed,
    }))
}

/// Every interrupt line's handlers and effective affinity; a line whose
/// `effective_affinity_list` cannot be read (kernels before 4.15) is left
/// out.
pub fn read_lines(fs: &dyn Fs, proc_root: &Path) -> io::Result<Vec<Line>> {
    let dir = proc_root.join("irq");
    let mut irqs: Vec<u32> = fs
        .read_dir(&dir)?
        .into_iter()
        .filter(|e| e.is_dir)
        .filter_map(|e| e.name.parse().ok())
        .collect();
    irqs.sort_unstable();
    let mut out = Vec::new();
    for irq in irqs {
        let line = dir.join(irq.to_string());
        let Ok(text) = fs.read(&line.join("effective_affinity_list")) else {
            continue;
        };
        let Ok(effective) = text.trim().parse::<CpuSet>() else {
            continue;
        };
        let mut names: Vec<String> = fs
            .read_dir(&line)
            .map(|e| e.into_iter().filter(|e| e.is_dir).map(|e| e.name).collect())
            .unwrap_or_default();
        names.sort();
        out.push(Line {
            irq,
            names,
            effective,
        });
    }
    Ok(out)
}

/// Makes one write: a mask in hex to its file, a kernel thread's affinity.
pub fn write(
    fs: &dyn Fs,
    sysfs_root: &Path,
    proc_root: &Path,
    knob: &Knob,
    set: &CpuSet,
) -> io::Result<()> {
    match (knob, path(knob, sysfs_root)) {
        (Knob::Kthread { pid, .. }, _) => fs.set_affinity(proc_root, *pid, set),
        (_, Some(path)) => fs.write(&path, &set.to_mask()),
        (_, None) => Ok(()),
    }
}

/// What a pass is asked.
#[derive(Debug, Clone)]
pub struct Ask {
    pub sysfs_root: PathBuf,
    pub proc_root: PathBuf,
    pub originals_file: PathBuf,
    /// The CPUs to keep clear (none: put everything back).
    pub away: CpuSet,
    pub online: CpuSet,
    pub memory: Memory,
    /// Whether new originals may be taken: false while the originals file
    /// could not be read at start-up (what it holds would be lost), then
    /// only put-backs are made.
    pub may_take: bool,
}

/// One write of a pass and its outcome.
#[derive(Debug, Clone)]
pub struct Wrote {
    pub knob: Knob,
    pub what: String,
    pub old: Option<CpuSet>,
    pub set: CpuSet,
    /// `Err((errno, error))`.
    pub result: Result<(), (Option<i32>, String)>,
}

/// What one pass did.
#[derive(Debug, Default)]
pub struct Pass {
    pub reading: Reading,
    pub plan: Plan,
    pub written: Vec<Wrote>,
    /// The memory after the pass.
    pub memory: Memory,
    /// Why the originals file could not be saved (then nothing new was
    /// moved).
    pub save_error: Option<String>,
}

/// One pass over the kernel's movable work ([`super`]).
pub async fn pass(pool: &IoPool, ask: Ask) -> Pass {
    let Ask {
        sysfs_root,
        proc_root,
        originals_file,
        away,
        online,
        memory,
        may_take,
    } = ask;
    let mut reading = Reading::default();
    for (dir, read) in [
        (
            WORKQUEUE_DIR,
            read_workqueues as fn(&dyn Fs, &Path) -> Reading,
        ),
        (NET_DIR, read_net),
    ] {
        let root = sysfs_root.clone();
        match pool
            .run_op("read", &sysfs_root.join(dir), move |fs| Ok(read(fs, &root)))
            .await
        {
            Ok(r) => {
                reading.masks.extend(r.masks);
                reading.unread.extend(r.unread);
                reading.errors.extend(r.errors);
            }
            Err(e) => reading.errors.push(chain(&e)),
        }
    }
    match procfs::each_pid(pool, &proc_root, |_| true, read_kthread).await {
        Ok(results) => {
            let remembered: BTreeSet<u32> = memory
                .keys()
                .filter_map(|k| match k {
                    Knob::Kthread { pid, .. } => Some(*pid),
                    _ => None,
                })
                .collect();
            for (pid, r) in results {
                match r {
                    Ok(Some(k)) => reading.kthreads.push(k),
                    Ok(None) => {}
                    Err(e) => {
                        // Keep what is remembered of a thread that could
                        // not be read: it may still be there.
                        for (knob, _) in memory
                            .iter()
                            .filter(|(k, _)| matches!(k, Knob::Kthread { pid: p, .. } if *p == pid))
                        {
                            reading.unread.insert(knob.clone(), chain(&e));
                        }
                        if !remembered.contains(&pid) && !e.is_not_found() {
                            reading.errors.push(format!("/proc/{pid}: {}", chain(&e)));
                        }
                    }
                }
            }
        }
        Err(e) => {
            reading.errors.push(chain(&e));
            // Nothing of the threads is known: their memory stays.
            for knob in memory.keys().filter(|k| k.is_kthread()) {
                reading.unread.insert(knob.clone(), chain(&e));
            }
        }
    }
    let root = proc_root.clone();
    match pool
        .run_op("read", &proc_root.join("irq"), move |fs| {
            read_lines(fs, &root)
        })
        .await
    {
        Ok(lines) => reading.lines = lines,
        Err(e) if e.is_not_found() => {}
        Err(e) => reading.errors.push(chain(&e)),
    }
    let mut plan = super::plan(&reading, &memory, &away, &online);
    let mut out = Pass::default();
    // Save before any write that adds an original; without that (or while
    // the file could not be read), only put-backs.
    let adds = plan.memory.keys().any(|k| !memory.contains_key(k));
    if adds {
        let saved = if may_take {
            let (path, body) = (originals_file.clone(), union(&memory, &plan.memory));
            pool.run_op("save", &originals_file, move |_| {
                originals::save(&path, &body).map_err(io::Error::other)
            })
            .await
            .map_err(|e| chain(&e))
        } else {
            Err("the originals file could not be read at start-up".to_string())
        };
        if let Err(e) = saved {
            out.save_error = Some(e);
            plan.writes.retain(|(knob, _, _)| memory.contains_key(knob));
            let kept: Memory = plan
                .memory
                .iter()
                .filter(|(k, _)| memory.contains_key(*k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            plan.memory = kept;
        }
    }
    let current = |knob: &Knob| {
        reading
            .movable()
            .find(|f| &f.knob == knob)
            .map(|f| f.current)
    };
    let items: Vec<(PathBuf, (Knob, CpuSet))> = plan
        .writes
        .iter()
        .map(|(knob, _, set)| {
            let key = match (knob, path(knob, &sysfs_root)) {
                (Knob::Kthread { pid, .. }, _) => proc_root.join(pid.to_string()),
                (_, Some(p)) => p,
                (_, None) => sysfs_root.clone(),
            };
            (key, (knob.clone(), set.clone()))
        })
        .collect();
    let (sroot, proot) = (sysfs_root.clone(), proc_root.clone());
    let results = pool
        .run_batch("write", items, move |fs, _, (knob, set)| {
            write(fs, &sroot, &proot, knob, set)
        })
        .await;
    let mut after = plan.memory.clone();
    for ((knob, what, set), r) in plan.writes.iter().zip(results) {
        let result = r.map_err(|e| (e.raw_os_error(), chain(&e)));
        if result.is_err() {
            // Not moved: what is remembered of it stays as it was.
            match memory.get(knob) {
                Some(k) => {
                    after.insert(knob.clone(), k.clone());
                }
                None => {
                    after.remove(knob);
                }
            }
        }
        out.written.push(Wrote {
            knob: knob.clone(),
            what: what.clone(),
            old: current(knob),
            set: set.clone(),
            result,
        });
    }
    if out.save_error.is_none() && after != memory && may_take {
        let (path, body) = (originals_file.clone(), after.clone());
        if let Err(e) = pool
            .run_op("save", &originals_file, move |_| {
                originals::save(&path, &body).map_err(io::Error::other)
            })
            .await
        {
            out.save_error = Some(chain(&e));
        }
    }
    out.memory = after;
    out.reading = reading;
    out.plan = plan;
    out
}

/// Both memories, `b`'s entries over `a`'s.
fn union(a: &Memory, b: &Memory) -> Memory {
    let mut out: Memory = a.clone();
    out.extend(
        b.iter()
            .map(|(k, v): (&Knob, &Kept)| (k.clone(), v.clone())),
    );
    out
}
