//! The I/O pool: the only way the daemon reads or writes cgroupfs, sysfs
//! and procfs.
//!
//! - A kernel file can block a thread for good, beyond cancel or kill, and
//!   such calls stall tokio's blocking pool (KERNEL-NOTES, "Reads that
//!   hang"). So every call is a job of the [`IoPool`]: a few detached, named
//!   threads (`pinctl-io-N`), a bounded queue, a timeout per step.
//! - A path that timed out is *hung*: later jobs on it or below it fail at
//!   once ([`IoError::Hung`]), and its thread is replaced, up to
//!   [`IoConfig::max_stuck`]; then jobs fail with [`IoError::Saturated`].
//! - Nothing here waits for a stuck thread: [`IoPool::shutdown`] and a drop
//!   return at once, and a panicking job becomes an error.
//! - The calls sit behind [`Fs`] ([`RealFs`]) so tests can fake a hang.
//!   The daemon never calls `std::fs` on a kernel file outside a job.
//!
//! Rooms: this file the [`Fs`] trait; `real.rs` [`RealFs`]; `pool.rs` the
//! [`IoPool`] and its errors; `worker.rs` the threads, the queue and the
//! hung marks; `name.rs` the names that are not UTF-8 ([`name::encode`]).

pub mod name;
mod pool;
mod real;
mod worker;

pub use pool::{HungPath, IoConfig, IoError, IoPool, IoStats};
pub use real::RealFs;

use std::io;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::cpuset::CpuSet;

/// One directory entry, as returned by [`Fs::read_dir`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Entry {
    /// The file name (not the full path).
    pub name: String,
    /// Whether the entry is a directory, or a symbolic link to one (sysfs is
    /// full of those).
    pub is_dir: bool,
}

/// An error and its causes, `: `-separated (what anyhow's `{:#}` prints):
/// the [`IoError`]s keep the errno and the file in their source.
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}

/// The file operations the daemon needs; a trait so tests can fake a hang.
///
/// Every method is a plain blocking call. Implementations are only ever called
/// on the pool's I/O threads, never on the async runtime.
pub trait Fs: Send + Sync + 'static {
    /// Reads the whole file as UTF-8.
    fn read(&self, path: &Path) -> io::Result<String>;
    /// Opens an existing file for writing and writes `data` with one `write(2)`
    /// call (cgroupfs takes a value only as a single write); a short write is
    /// an error.
    fn write(&self, path: &Path, data: &str) -> io::Result<()>;
    /// Lists a directory, skipping `.` and `..`; a name that is not UTF-8 is
    /// kept encoded ([`name::encode`]).
    fn read_dir(&self, path: &Path) -> io::Result<Vec<Entry>>;
    /// Reads an extended attribute: `Ok(None)` when it is absent (`ENODATA`)
    /// or the filesystem has no xattr support (`EOPNOTSUPP`, kernels before 5.7
    /// on cgroupfs).
    fn get_xattr(&self, path: &Path, name: &str) -> io::Result<Option<Vec<u8>>>;
    /// Sets an extended attribute, creating or replacing it.
    fn set_xattr(&self, path: &Path, name: &str, value: &[u8]) -> io::Result<()>;
    /// Creates one directory (its parent must exist).
    fn mkdir(&self, path: &Path) -> io::Result<()>;
    /// Removes one directory: on cgroupfs, an empty cgroup (its control
    /// files go with it).
    fn rmdir(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_dir(path)
    }
    /// Whether the path exists (following symbolic links); errors other than
    /// "not found" are returned.
    fn exists(&self, path: &Path) -> io::Result<bool>;
    /// Reads `rel` below directory `dir` the way a file someone else wrote
    /// must be read: no symbolic link followed below `dir` (`ELOOP`), no open
    /// that waits (a FIFO is opened non-blocking), only a regular file
    /// (`InvalidInput` otherwise) of at most `max` bytes (`FileTooLarge`).
    fn read_beneath(&self, dir: &Path, rel: &Path, max: u64) -> io::Result<String> {
        use rustix::fs::{Mode, OFlags, ResolveFlags, openat2};
        let dir = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(dir)?;
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
        let resolve = ResolveFlags::NO_SYMLINKS | ResolveFlags::BENEATH;
        let fd = match openat2(&dir, rel, flags, Mode::empty(), resolve) {
            // Before Linux 5.6, or under a seccomp filter that does not
            // know openat2 (an older systemd's `@system-service` with the
            // unit's EPERM): the last component at least is not followed.
            Err(rustix::io::Errno::NOSYS | rustix::io::Errno::PERM) => {
                rustix::fs::openat(&dir, rel, flags | OFlags::NOFOLLOW, Mode::empty())?
            }
            other => other?,
        };
        let file = std::fs::File::from(fd);
        let meta = file.metadata()?;
        if !meta.file_type().is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("not a regular file ({})", file_kind(&meta.file_type())),
            ));
        }
        let too_large = || {
            io::Error::new(
                io::ErrorKind::FileTooLarge,
                format!("larger than {max} bytes"),
            )
        };
        if meta.len() > max {
            return Err(too_large());
        }
        // The size could grow after the fstat: never read more than `max`.
        let mut text = String::new();
        io::Read::read_to_string(&mut io::Read::take(file, max + 1), &mut text)?;
        if text.len() as u64 > max {
            return Err(too_large());
        }
        Ok(text)
    }
    /// What identifies a file's contents without reading it (`lstat`: a link
    /// is not followed, a FIFO not opened): its device, inode, size and
    /// modification time. A file that failed to be used is read again only
    /// once this changes.
    fn identity(&self, path: &Path) -> io::Result<FileId> {
        use std::os::unix::fs::MetadataExt as _;
        let meta = std::fs::symlink_metadata(path)?;
        Ok(FileId {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
        })
    }
    /// Sets the CPUs task `pid` may run on (`sched_setaffinity(2)`).
    /// `proc_root` is the procfs that names `pid`: a root that is not a
    /// procfs (a test's fake tree) gets `PID/status`'s `Cpus_allowed_list:`
    /// line rewritten instead ([`fake_affinity`]), so a fake tree can never
    /// move a real task.
    fn set_affinity(&self, proc_root: &Path, pid: u32, cpus: &CpuSet) -> io::Result<()> {
        const PROC_SUPER_MAGIC: u64 = 0x9fa0;
        let fs_type = rustix::fs::statfs(proc_root)?.f_type as u64;
        if fs_type != PROC_SUPER_MAGIC {
            return fake_affinity(self, proc_root, pid, cpus);
        }
        let pid =
            libc::pid_t::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
        // The kernel reads `len` bytes of the mask: one bit per CPU, in
        // native-endian longs, as many as the highest CPU needs.
        let words = cpus.words();
        let len = std::mem::size_of_val(words);
        // SAFETY: `words` lives across the call and holds `len` bytes; the
        // kernel only reads them.
        let r = unsafe { libc::sched_setaffinity(pid, len, words.as_ptr().cast()) };
        if r == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
    /// The path with every symbolic link followed (`realpath(3)`): where a
    /// sysfs link such as `/sys/class/net/NAME` leads.
    fn canonicalize(&self, path: &Path) -> io::Result<std::path::PathBuf> {
        std::fs::canonicalize(path)
    }
    /// The device number of a device node (following symbolic links):
    /// `None` when the path is not a character or block device.
    fn device_number(&self, path: &Path) -> io::Result<Option<(NodeKind, u32, u32)>> {
        use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
        let meta = std::fs::metadata(path)?;
        let kind = match meta.file_type() {
            t if t.is_char_device() => NodeKind::Char,
            t if t.is_block_device() => NodeKind::Block,
            _ => return Ok(None),
        };
        let rdev = meta.rdev();
        Ok(Some((kind, libc::major(rdev), libc::minor(rdev))))
    }
    /// Who owns the path (following symbolic links) and its permission bits.
    fn owner(&self, path: &Path) -> io::Result<Owner> {
        use std::os::unix::fs::MetadataExt as _;
        let meta = std::fs::metadata(path)?;
        Ok(Owner {
            uid: meta.uid(),
            mode: meta.mode() & 0o7777,
        })
    }

    /// Reads one directory at once: its subdirectories, the named files in it
    /// and one extended attribute. An error opening the directory itself
    /// (`NotFound`: it is gone) fails the whole call; an error with one file
    /// is that file's result. [`RealFs`] opens the directory once and works
    /// relative to it, which saves a path walk per file: on a full reconcile
    /// of thousands of cgroups the walks were the biggest cost.
    ///
    /// `known`: how many subdirectories the caller knows it has. [`RealFs`]
    /// does not list a directory whose link count says it has just that many
    /// (see [`DirScan::dirs`]); this default lists every directory.
    fn scan_dir(
        &self,
        dir: &Path,
        files: &[&str],
        xattr: &str,
        known: Option<usize>,
    ) -> io::Result<DirScan> {
        let _ = known;
        let entries = self.read_dir(dir)?;
        Ok(DirScan {
            dirs: entries
                .into_iter()
                .filter(|e| e.is_dir)
                .map(|e| e.name)
                .collect(),
            files: files.iter().map(|f| self.read(&dir.join(f))).collect(),
            xattr: self.get_xattr(dir, xattr),
            owner: self.owner(dir),
        })
    }
}

/// [`Fs::set_affinity`] on a fake tree: the task's `status` file gets the
/// new `Cpus_allowed_list:` line. As the kernel does, it refuses a task
/// whose `stat` flags have `PF_NO_SETAFFINITY`, or a set with no CPU
/// (`EINVAL`), and a task that is gone (`ESRCH`).
pub fn fake_affinity<F: Fs + ?Sized>(
    fs: &F,
    proc_root: &Path,
    pid: u32,
    cpus: &CpuSet,
) -> io::Result<()> {
    let dir = proc_root.join(pid.to_string());
    let einval = || io::Error::from_raw_os_error(libc::EINVAL);
    let gone = |e: io::Error| {
        if e.kind() == io::ErrorKind::NotFound {
            io::Error::from_raw_os_error(libc::ESRCH)
        } else {
            e
        }
    };
    if cpus.is_empty() {
        return Err(einval());
    }
    if let Ok(stat) = fs.read(&dir.join("stat"))
        && crate::task::parse_stat(pid, &stat)
            .is_some_and(|s| s.flags & crate::task::PF_NO_SETAFFINITY != 0)
    {
        return Err(einval());
    }
    let path = dir.join("status");
    let text = fs.read(&path).map_err(gone)?;
    let mut out = String::new();
    for line in text.lines() {
        if line.starts_with("Cpus_allowed_list:") {
            out.push_str(&format!("Cpus_allowed_list:\t{cpus}"));
        } else if line.starts_with("Cpus_allowed:") {
            out.push_str(&format!("Cpus_allowed:\t{}", cpus.to_mask()));
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    // Replaced whole, as the kernel's file is: a reader never sees half.
    let tmp = dir.join(".status.pinctl");
    std::fs::write(&tmp, out)?;
    std::fs::rename(&tmp, &path)
}

/// What [`Fs::scan_dir`] read of one directory.
#[derive(Debug)]
pub struct DirScan {
    /// The names of its subdirectories (and links to directories), unsorted.
    /// A directory's link count is 2 + its subdirectories on kernfs
    /// (cgroupfs), tmpfs and ext4 (btrfs says 1). [`RealFs`] does not list
    /// one whose count is 2 (nothing below it), nor one whose count says it
    /// has just the subdirectories the caller knows of: then this is empty.
    /// A link in an unlisted directory is not seen; cgroupfs has no links.
    pub dirs: Vec<String>,
    /// Each requested file's contents, in the order asked.
    pub files: Vec<io::Result<String>>,
    /// The requested extended attribute, as [`Fs::get_xattr`] returns it.
    pub xattr: io::Result<Option<Vec<u8>>>,
    /// Who owns the directory, as [`Fs::owner`] returns it.
    pub owner: io::Result<Owner>,
}

/// What [`Fs::identity`] says of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileId {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime_ns: i128,
}

/// The owner and permission bits of a file: who could have made it and who
/// may change it (a user who owns a cgroup directory, or may write to it, can
/// set its extended attributes and make cgroups below it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    pub uid: u32,
    /// The permission bits (`st_mode & 0o7777`).
    pub mode: u32,
}

/// A character or a block device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeKind {
    Char,
    Block,
}

/// A file type in words, for messages.
fn file_kind(t: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt as _;
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_symlink() {
        "a symbolic link"
    } else {
        "not a file"
    }
}

/// The real filesystem through the trait's own defaults (`scan_dir`,
/// `read_beneath` and `identity` built from the other operations), counting
/// the reads beneath a directory (bundle probes), which fail with
/// `beneath_errno` while it is not 0: for tests.
#[cfg(test)]
#[derive(Default)]
pub(crate) struct Plain {
    pub beneath: std::sync::atomic::AtomicUsize,
    pub beneath_errno: std::sync::atomic::AtomicI32,
}

#[cfg(test)]
impl Fs for Plain {
    fn read(&self, path: &Path) -> io::Result<String> {
        RealFs.read(path)
    }
    fn write(&self, path: &Path, data: &str) -> io::Result<()> {
        RealFs.write(path, data)
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
    fn read_beneath(&self, dir: &Path, rel: &Path, max: u64) -> io::Result<String> {
        self.beneath
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        match self
            .beneath_errno
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            0 => {}
            errno => return Err(io::Error::from_raw_os_error(errno)),
        }
        // RealFs keeps the trait's default.
        RealFs.read_beneath(dir, rel, max)
    }
}

#[cfg(test)]
mod tests;
