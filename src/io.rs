//! The I/O pool: the only place the daemon reads or writes cgroupfs, sysfs and
//! procfs.
//!
//! A read or write of a kernel pseudo-file can block forever in uninterruptible
//! sleep (a task stuck in D state, a hung storage mount), and such a thread can
//! be neither cancelled nor killed (`../shared/KERNEL-NOTES.md`, "Reads that
//! hang"). `tokio::fs` and `spawn_blocking` share tokio's blocking pool: once
//! enough calls hang, every later one stalls, and dropping the runtime waits
//! forever. So every such call goes through [`IoPool`] instead: a few dedicated,
//! detached, named threads (`pinctl-io-N`) fed by a bounded queue, each reply
//! sent back over a `tokio::sync::oneshot`. The timeout is applied on the async
//! side with `tokio::time`, from the moment a thread starts the call. A call
//! that does not return in time marks its path *hung*: later jobs on that path,
//! or below it, fail at once with [`IoError::Hung`] instead of feeding it more
//! threads, and the stuck thread is replaced so the pool keeps serving other
//! paths. When the stuck call finally returns, its thread clears the mark and
//! either rejoins the pool or, if it was replaced, exits. The number of stuck
//! threads is bounded by [`IoConfig::max_stuck`]; when that many are stuck and no
//! healthy thread remains, jobs fail fast with [`IoError::Saturated`] rather
//! than queueing forever. Nothing here ever waits for a stuck thread:
//! [`IoPool::shutdown`] and dropping the pool return at once, and a panicking job
//! becomes an error, never a dead worker.
//!
//! The calls themselves sit behind the [`Fs`] trait ([`RealFs`] on a real
//! machine) so that tests can fake a hang. Other modules must not call `std::fs`
//! on kernel pseudo-filesystems from the daemon; they go through an `IoPool`.
//!
//! Invariants (all under one mutex): `healthy + stuck` is the number of live
//! worker threads and never exceeds `max(threads, max_stuck)`; `healthy` never
//! exceeds `threads`; a path is in the hung set exactly while at least one call
//! on it has timed out and not yet returned.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::io::{self, Write as _};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

/// One directory entry, as returned by [`Fs::read_dir`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Entry {
    /// The file name (not the full path).
    pub name: String,
    /// Whether the entry is a directory, or a symbolic link to one (sysfs is
    /// full of those).
    pub is_dir: bool,
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
    /// kept encoded ([`crate::cgroup::name::encode`]).
    fn read_dir(&self, path: &Path) -> io::Result<Vec<Entry>>;
    /// Reads an extended attribute: `Ok(None)` when it is absent (`ENODATA`)
    /// or the filesystem has no xattr support (`EOPNOTSUPP`, kernels before 5.7
    /// on cgroupfs).
    fn get_xattr(&self, path: &Path, name: &str) -> io::Result<Option<Vec<u8>>>;
    /// Sets an extended attribute, creating or replacing it.
    fn set_xattr(&self, path: &Path, name: &str, value: &[u8]) -> io::Result<()>;
    /// Creates one directory (its parent must exist).
    fn mkdir(&self, path: &Path) -> io::Result<()>;
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
            // Before Linux 5.6: the last component at least is not followed.
            Err(rustix::io::Errno::NOSYS) => {
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
    fn scan_dir(&self, dir: &Path, files: &[&str], xattr: &str) -> io::Result<DirScan> {
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

/// Reads a small file (a control file: a line or a few) to the end as UTF-8.
/// Unlike `read_to_string` it asks no `fstat` for a size hint, which cgroupfs
/// and procfs cannot give anyway (they report 0 or 4096). A read that returns
/// less than asked is the end: kernfs and procfs (`seq_file`) hand out all
/// they have up to the size asked, and so does a regular file, so a control
/// file takes one `read(2)`, not two.
fn read_small(mut file: std::fs::File) -> io::Result<String> {
    use std::io::Read as _;
    let mut buf = [0u8; 4096];
    let mut out: Vec<u8> = Vec::new();
    loop {
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                out.extend_from_slice(&buf[..n]);
                if n < buf.len() {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    String::from_utf8(out).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// What [`Fs::scan_dir`] read of one directory.
#[derive(Debug)]
pub struct DirScan {
    /// The names of its subdirectories (and links to directories), unsorted.
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

/// The owner and permission bits of a file: who could have made it and who
/// may change it (a user who owns a cgroup directory, or may write to it, can
/// set its extended attributes and make cgroups below it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    pub uid: u32,
    /// The permission bits (`st_mode & 0o7777`).
    pub mode: u32,
}

/// The real filesystem: `std::fs` and the `xattr` crate.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealFs;

impl Fs for RealFs {
    fn read(&self, path: &Path) -> io::Result<String> {
        std::fs::read_to_string(path)
    }

    fn write(&self, path: &Path, data: &str) -> io::Result<()> {
        // No O_CREAT: a misspelt control file must fail with ENOENT, not appear
        // as a regular file in a fake tree. O_TRUNC is ignored by kernfs (it is
        // what `echo 0-3 > cpuset.cpus` does) and makes a regular-file fixture
        // hold exactly what was written, as the kernel file would.
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)?;
        loop {
            match file.write(data.as_bytes()) {
                Ok(n) if n == data.len() => return Ok(()),
                Ok(n) => {
                    return Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        format!("short write: {n} of {} bytes", data.len()),
                    ));
                }
                // Interrupted before anything was written: the single write
                // has not happened yet, so try it again.
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<Entry>> {
        let mut entries = Vec::new();
        for entry in std::fs::read_dir(path)? {
            let entry = entry?;
            let name = crate::cgroup::name::encode(&entry.file_name()).into_owned();
            let file_type = entry.file_type()?;
            let is_dir = if file_type.is_symlink() {
                // A dangling link is not a directory, and not an error either.
                std::fs::metadata(entry.path()).is_ok_and(|m| m.is_dir())
            } else {
                file_type.is_dir()
            };
            entries.push(Entry { name, is_dir });
        }
        Ok(entries)
    }

    fn get_xattr(&self, path: &Path, name: &str) -> io::Result<Option<Vec<u8>>> {
        // The xattr crate already maps ENODATA to None.
        match xattr::get(path, name) {
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => Ok(None),
            other => other,
        }
    }

    fn set_xattr(&self, path: &Path, name: &str, value: &[u8]) -> io::Result<()> {
        xattr::set(path, name, value)
    }

    fn mkdir(&self, path: &Path) -> io::Result<()> {
        std::fs::create_dir(path)
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        path.try_exists()
    }

    fn scan_dir(&self, dir: &Path, files: &[&str], xattr: &str) -> io::Result<DirScan> {
        use nix::fcntl::{AtFlags, OFlag, openat};
        use nix::sys::stat::{Mode, SFlag, fstatat};
        use rustix::fs::{FileType, RawDir};
        let handle = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(dir)?;
        let xattr = match xattr::FileExt::get_xattr(&handle, xattr) {
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => Ok(None),
            other => other,
        };
        let owner = nix::sys::stat::fstat(&handle)
            .map(|st| Owner {
                uid: st.st_uid,
                mode: st.st_mode & 0o7777,
            })
            .map_err(io::Error::from);
        let read_at = |name: &str| -> io::Result<String> {
            let fd = openat(
                &handle,
                name,
                OFlag::O_RDONLY | OFlag::O_CLOEXEC,
                Mode::empty(),
            )?;
            read_small(std::fs::File::from(fd))
        };
        let files = files.iter().map(|f| read_at(f)).collect();
        // getdents64 straight into a buffer on the stack: no `DIR` stream, so
        // no fstat, fcntl, heap buffer or rewind per directory.
        let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 8192];
        let mut listing = RawDir::new(&handle, &mut buf);
        let mut dirs = Vec::new();
        // Entries whose type the listing does not tell (a link, or a
        // filesystem without d_type): resolved with fstatat afterwards.
        let mut unsure = Vec::new();
        while let Some(entry) = listing.next() {
            let entry = entry?;
            let raw = std::ffi::OsStr::from_bytes(entry.file_name().to_bytes());
            if raw == "." || raw == ".." {
                continue;
            }
            match entry.file_type() {
                FileType::Directory => dirs.push(crate::cgroup::name::encode(raw).into_owned()),
                FileType::Symlink | FileType::Unknown => unsure.push(raw.to_os_string()),
                _ => {}
            }
        }
        for raw in unsure {
            // Follows links: a dangling one is not a directory, nor an error.
            if fstatat(&handle, raw.as_os_str(), AtFlags::empty()).is_ok_and(|st| {
                SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR
            }) {
                dirs.push(crate::cgroup::name::encode(&raw).into_owned());
            }
        }
        Ok(DirScan {
            dirs,
            files,
            xattr,
            owner,
        })
    }
}

/// How the pool is sized and how long a call may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoConfig {
    /// Healthy worker threads the pool keeps (default 2; 0 counts as 1).
    pub threads: usize,
    /// How long one call may run, from the moment a thread starts it, before its
    /// path is marked hung (default 5 s).
    pub timeout: Duration,
    /// The most threads that may be stuck at once (default 8). The pool never
    /// runs more than `max(threads, max_stuck)` threads: a stuck thread is
    /// replaced while that bound allows, and when `max_stuck` threads are stuck
    /// no healthy one is left and jobs fail with [`IoError::Saturated`]. Values
    /// below `threads` count as `threads`.
    pub max_stuck: usize,
    /// Jobs that may wait in the queue (default 1024; 0 counts as 1). When it
    /// is full, [`IoPool::run`] waits asynchronously for room.
    pub queue: usize,
}

impl Default for IoConfig {
    fn default() -> Self {
        Self {
            threads: 2,
            timeout: Duration::from_secs(5),
            max_stuck: 8,
            queue: 1024,
        }
    }
}

/// A path currently marked hung, as reported by [`IoPool::hung`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HungPath {
    /// The key of the call that timed out.
    pub path: PathBuf,
    /// When it was marked (the first timeout, if several calls on it are stuck).
    pub since: Instant,
    /// The operation that timed out first (`"read"`, `"write"`, ...).
    pub op: &'static str,
}

/// A snapshot of the pool's counters, from [`IoPool::stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoStats {
    /// Live worker threads that are not stuck (idle or running a call still
    /// within its timeout).
    pub threads: usize,
    /// Threads stuck in a call that timed out and has not returned.
    pub stuck: usize,
    /// Jobs waiting in the queue.
    pub queued: usize,
    /// Calls that returned (successfully, with an error, or by panicking)
    /// within their timeout.
    pub completed: u64,
    /// Calls that timed out.
    pub timeouts: u64,
    /// Jobs refused without being attempted because their path was hung or all
    /// threads were stuck.
    pub failed_fast: u64,
}

/// Why an [`IoPool`] job failed.
#[derive(Debug, thiserror::Error)]
pub enum IoError {
    /// The call returned an error (a panicking job is reported here too, as
    /// [`io::ErrorKind::Other`]).
    #[error("failed to {op} {path}")]
    Os {
        /// The operation (`"read"`, `"read directory"`, ...).
        op: &'static str,
        /// The path the job was about.
        path: PathBuf,
        /// What the call returned.
        #[source]
        source: io::Error,
    },
    /// A write returned an error.
    #[error("failed to write {data:?} to {path}")]
    Write {
        /// The file written.
        path: PathBuf,
        /// The data that was being written.
        data: String,
        /// What the call returned.
        #[source]
        source: io::Error,
    },
    /// The call did not return within the timeout; its path is now hung.
    #[error("{op} {path} did not return within {timeout:?}; marked hung")]
    Timeout {
        /// The operation.
        op: &'static str,
        /// The path the job was about, now marked hung.
        path: PathBuf,
        /// The timeout that passed.
        timeout: Duration,
    },
    /// The job was refused because its path, or a directory above it, is
    /// marked hung.
    #[error("{path} is hung (since {secs}s ago); not retried until the stuck call returns")]
    Hung {
        /// The marked path (the job's own path or one above it).
        path: PathBuf,
        /// How long ago it was marked, in whole seconds.
        secs: u64,
    },
    /// The job was refused because every thread is stuck.
    #[error("all I/O threads are stuck; {path} not attempted")]
    Saturated {
        /// The path the job was about.
        path: PathBuf,
    },
    /// The pool was shut down before the job started.
    #[error("the I/O pool is shut down")]
    ShutDown,
}

impl IoError {
    /// The OS error number, for [`IoError::Os`] and [`IoError::Write`] errors
    /// that carry one.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            Self::Os { source, .. } | Self::Write { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }

    /// Whether the call failed because the path does not exist (`ENOENT`); a
    /// vanished cgroup is routine, not a failure.
    pub fn is_not_found(&self) -> bool {
        match self {
            Self::Os { source, .. } | Self::Write { source, .. } => {
                source.kind() == io::ErrorKind::NotFound
            }
            _ => false,
        }
    }

    /// The same refusal for a job about `path` (a batch refused as a whole
    /// answers each item with it).
    fn refused_for(&self, path: &Path) -> IoError {
        match self {
            Self::Hung { path: marked, secs } => Self::Hung {
                path: marked.clone(),
                secs: *secs,
            },
            Self::ShutDown => Self::ShutDown,
            _ => Self::Saturated {
                path: path.to_path_buf(),
            },
        }
    }

    /// The path the error is about, if any.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Self::Os { path, .. }
            | Self::Write { path, .. }
            | Self::Timeout { path, .. }
            | Self::Hung { path, .. }
            | Self::Saturated { path } => Some(path),
            Self::ShutDown => None,
        }
    }
}

/// Runs blocking filesystem calls on dedicated threads with a timeout; see the
/// module documentation. Cheap to clone: clones share one pool, which shuts
/// down when the last clone is dropped.
#[derive(Clone)]
pub struct IoPool {
    handle: Arc<Handle>,
}

impl fmt::Debug for IoPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IoPool")
            .field("config", &self.handle.shared.config)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// Owned by the `IoPool` clones only (the workers hold `Shared`), so its drop
/// means no caller is left.
struct Handle {
    shared: Arc<Shared>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.shared.shutdown();
    }
}

/// Called on the I/O thread: runs the job and returns the closure that sends
/// its result, which the worker calls under the state lock.
type Work = Box<dyn FnOnce(&dyn Fs, &Steps<'_>) -> Deliver + Send>;
/// Sends a job's result to its caller.
type Deliver = Box<dyn FnOnce() + Send>;

struct Shared {
    fs: Arc<dyn Fs>,
    /// Normalised: `threads >= 1`, `max_stuck >= threads`, `queue >= 1`.
    config: IoConfig,
    /// Queue slots, so a full queue makes callers wait without blocking.
    slots: Arc<Semaphore>,
    state: Mutex<State>,
    /// Signalled when a job is queued or the pool shuts down.
    work_ready: Condvar,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Job>,
    /// Jobs a thread has started and not finished, by job id.
    running: HashMap<u64, Running>,
    hung: BTreeMap<PathBuf, Mark>,
    healthy: usize,
    stuck: usize,
    closed: bool,
    next_job: u64,
    next_thread: usize,
    completed: u64,
    timeouts: u64,
    failed_fast: u64,
}

struct Job {
    id: u64,
    key: PathBuf,
    /// Whether `key` being hung refuses the whole job (a batch checks each
    /// item instead).
    check_hung: bool,
    op: &'static str,
    /// When a thread starts the job; the refusal when it never will.
    start: oneshot::Sender<Result<Instant, IoError>>,
    work: Work,
    _slot: OwnedSemaphorePermit,
}

/// A job a thread is running. A job is one or more *steps*, each a call about
/// one path with a timeout of its own: a plain job is one step on its key; a
/// batch ([`IoPool::run_batch`]) begins a step per item.
struct Running {
    /// When the current step began (or the last one ended).
    started: Instant,
    /// The current step's path; `None` between steps.
    key: Option<PathBuf>,
    /// The path marked hung when the current step timed out: the job is then
    /// abandoned, and the mark is cleared when the step returns.
    marked: Option<PathBuf>,
}

struct Mark {
    since: Instant,
    op: &'static str,
    /// Calls on this path that timed out and have not returned.
    stuck: usize,
}

/// What the async side found when the timeout passed.
enum Expired {
    /// The current step is still running: its path (returned) is now marked
    /// hung and the job abandoned.
    Marked(PathBuf),
    /// The job returned just before: its result is in the channel.
    Finished,
    /// The job moved on to a later step: wait until then.
    Later(tokio::time::Instant),
}

/// How a submitted job ended without a result.
enum Ended {
    /// Never started: the pool refused it.
    Refused(IoError),
    /// A step did not return in time: this path is now marked hung.
    TimedOut(PathBuf),
    /// The job ended without sending its result (it cannot; kept for safety).
    Lost,
}

/// Locks a batch's results; a panic while holding it cannot leave them torn.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Given to a job on its I/O thread, to time each of its steps on its own.
pub(crate) struct Steps<'a> {
    shared: &'a Shared,
    id: u64,
}

impl Steps<'_> {
    /// Begins a step about `key`: its timeout counts from now. `Err(None)`
    /// when the job was abandoned (an earlier step timed out) and must stop;
    /// `Err(Some(e))` when `key` or a path above it is marked hung.
    fn begin(&self, key: &Path) -> Result<(), Option<IoError>> {
        let mut state = self.shared.lock();
        let hung = state.refuse_hung(key);
        let Some(running) = state.running.get_mut(&self.id) else {
            return Err(None);
        };
        if running.marked.is_some() {
            return Err(None);
        }
        if let Some(refused) = hung {
            return Err(Some(refused));
        }
        running.key = Some(key.to_path_buf());
        running.started = Instant::now();
        Ok(())
    }

    /// Ends the current step: until the next begins, no timeout runs.
    fn end(&self) {
        let mut state = self.shared.lock();
        if let Some(running) = state.running.get_mut(&self.id)
            && running.marked.is_none()
        {
            running.key = None;
            running.started = Instant::now();
        }
    }
}

impl IoPool {
    /// Starts the pool's threads. Never fails: a thread that cannot be spawned
    /// is logged and the pool runs with fewer (with none, every job fails with
    /// [`IoError::Saturated`]).
    pub fn new(fs: Arc<dyn Fs>, config: IoConfig) -> Self {
        let threads = config.threads.max(1);
        let config = IoConfig {
            threads,
            timeout: config.timeout,
            max_stuck: config.max_stuck.max(threads),
            queue: config.queue.clamp(1, Semaphore::MAX_PERMITS),
        };
        let shared = Arc::new(Shared {
            fs,
            config,
            slots: Arc::new(Semaphore::new(config.queue)),
            state: Mutex::new(State::default()),
            work_ready: Condvar::new(),
        });
        {
            let mut state = shared.lock();
            for _ in 0..threads {
                shared.spawn_worker(&mut state);
            }
        }
        Self {
            handle: Arc::new(Handle { shared }),
        }
    }

    /// Runs `job` on an I/O thread and returns its result.
    ///
    /// `key` is the path the job is about. If the job does not finish within
    /// the timeout, `key` is marked hung and this returns [`IoError::Timeout`];
    /// while it is marked, every job whose key is `key` or below it fails at once
    /// with [`IoError::Hung`] without being queued. The mark is cleared when the
    /// stuck call finally returns. An error from `job` is reported as
    /// [`IoError::Os`] with the operation `"access"`.
    ///
    /// Cancel-safe: dropping the future before a thread starts the job means it
    /// never runs; dropping it while the job runs still marks `key` hung if the
    /// job overruns the timeout.
    pub async fn run<T, F>(&self, key: &Path, job: F) -> Result<T, IoError>
    where
        T: Send + 'static,
        F: FnOnce(&dyn Fs) -> io::Result<T> + Send + 'static,
    {
        self.run_op("access", key, job).await
    }

    /// [`IoPool::run`], naming the operation (`"read"`, `"remove"`, ...) for
    /// errors, logs and [`IoPool::hung`].
    pub async fn run_op<T, F>(&self, op: &'static str, key: &Path, job: F) -> Result<T, IoError>
    where
        T: Send + 'static,
        F: FnOnce(&dyn Fs) -> io::Result<T> + Send + 'static,
    {
        let key = key.to_path_buf();
        let work = move |fs: &dyn Fs, _: &Steps<'_>| {
            panic::catch_unwind(AssertUnwindSafe(|| job(fs)))
                .unwrap_or_else(|payload| Err(panic_error(&*payload)))
        };
        match self.submit(op, key.clone(), true, work).await {
            Ok(result) => result.map_err(|source| IoError::Os {
                op,
                path: key,
                source,
            }),
            Err(Ended::Refused(e)) => Err(e),
            Err(Ended::TimedOut(path)) => Err(IoError::Timeout {
                op,
                path,
                timeout: self.handle.shared.config.timeout,
            }),
            Err(Ended::Lost) => Err(IoError::Os {
                op,
                path: key,
                source: lost_error(),
            }),
        }
    }

    /// Runs `job` on each item in turn (given the item's path and the item),
    /// on one I/O thread: one trip through
    /// the queue for many small calls (reading a whole subtree of cgroups),
    /// instead of one per call. Returns one result per item, in order.
    ///
    /// Each item is a step with its own path and its own timeout, counted from
    /// when it starts, and behaves as [`IoPool::run_op`] would on its own: an
    /// item whose path (or one above it) is marked hung fails at once with
    /// [`IoError::Hung`]; an item that does not return in time marks its path
    /// hung and fails with [`IoError::Timeout`], and the items after it go on
    /// in a new job on another thread. So a hung path costs its own items one
    /// timeout, never the rest of the batch.
    pub async fn run_batch<I, T, F>(
        &self,
        op: &'static str,
        items: Vec<(PathBuf, I)>,
        job: F,
    ) -> Vec<Result<T, IoError>>
    where
        I: Send + Sync + 'static,
        T: Send + 'static,
        F: Fn(&dyn Fs, &Path, &I) -> io::Result<T> + Send + Sync + 'static,
    {
        let n = items.len();
        let items = Arc::new(items);
        let job = Arc::new(job);
        let results: Arc<Mutex<Vec<Result<T, IoError>>>> =
            Arc::new(Mutex::new(Vec::with_capacity(n)));
        let mut from = 0;
        while from < n {
            let (items_, job_, results_) = (items.clone(), job.clone(), results.clone());
            let work = move |fs: &dyn Fs, steps: &Steps<'_>| {
                for (key, item) in &items_[from..] {
                    let result = match steps.begin(key) {
                        Err(None) => return,
                        Err(Some(hung)) => Err(hung),
                        Ok(()) => {
                            let r = panic::catch_unwind(AssertUnwindSafe(|| job_(fs, key, item)))
                                .unwrap_or_else(|payload| Err(panic_error(&*payload)));
                            r.map_err(|source| IoError::Os {
                                op,
                                path: key.clone(),
                                source,
                            })
                        }
                    };
                    lock(&results_).push(result);
                    steps.end();
                }
            };
            let ended = self.submit(op, items[from].0.clone(), false, work).await;
            let mut done = lock(&results);
            match ended {
                Ok(()) => {}
                Err(Ended::TimedOut(path)) if done.len() < n => {
                    done.push(Err(IoError::Timeout {
                        op,
                        path,
                        timeout: self.handle.shared.config.timeout,
                    }));
                }
                Err(Ended::TimedOut(_)) => {}
                Err(Ended::Refused(e)) => {
                    for (key, _) in &items[done.len()..] {
                        done.push(Err(e.refused_for(key)));
                    }
                }
                Err(Ended::Lost) => {
                    for (key, _) in &items[done.len()..] {
                        done.push(Err(IoError::Os {
                            op,
                            path: key.clone(),
                            source: lost_error(),
                        }));
                    }
                }
            }
            from = done.len();
        }
        std::mem::take(&mut *lock(&results))
    }

    /// Queues `work` about `key` and waits for what it returns. With
    /// `check_hung`, a `key` marked hung is refused at once (a batch checks
    /// each item instead).
    async fn submit<R, W>(
        &self,
        op: &'static str,
        key: PathBuf,
        check_hung: bool,
        work: W,
    ) -> Result<R, Ended>
    where
        R: Send + 'static,
        W: FnOnce(&dyn Fs, &Steps<'_>) -> R + Send + 'static,
    {
        let shared = &self.handle.shared;
        shared
            .lock()
            .admit(&key, check_hung)
            .map_err(Ended::Refused)?;
        let slot = Arc::clone(&shared.slots)
            .acquire_owned()
            .await
            .map_err(|_| Ended::Refused(IoError::ShutDown))?;

        let (start_tx, start_rx) = oneshot::channel();
        let (reply_tx, mut reply_rx) = oneshot::channel::<R>();
        let work: Work = Box::new(move |fs: &dyn Fs, steps: &Steps<'_>| -> Deliver {
            let result = work(fs, steps);
            Box::new(move || {
                // The caller may have timed out or gone: then nobody wants it.
                let _ = reply_tx.send(result);
            })
        });

        let id = {
            let mut state = shared.lock();
            state.admit(&key, check_hung).map_err(Ended::Refused)?;
            let id = state.next_job;
            state.next_job += 1;
            state.queue.push_back(Job {
                id,
                key,
                check_hung,
                op,
                start: start_tx,
                work,
                _slot: slot,
            });
            id
        };
        shared.work_ready.notify_one();

        let mut watch = Watch {
            shared: Arc::clone(shared),
            id,
            op,
            settled: false,
        };
        let started = match start_rx.await {
            Ok(Ok(started)) => started,
            Ok(Err(refused)) => {
                watch.settled = true;
                return Err(Ended::Refused(refused));
            }
            Err(_) => {
                watch.settled = true;
                return Err(Ended::Refused(IoError::ShutDown));
            }
        };
        let mut due = deadline(started, shared.config.timeout);
        loop {
            let outcome = tokio::time::timeout_at(due, &mut reply_rx).await;
            match outcome {
                Ok(Ok(result)) => {
                    watch.settled = true;
                    return Ok(result);
                }
                Ok(Err(_)) => {
                    watch.settled = true;
                    return Err(Ended::Lost);
                }
                Err(_) => match shared.expire(id, op) {
                    Expired::Later(later) => due = later,
                    Expired::Marked(path) => {
                        watch.settled = true;
                        return Err(Ended::TimedOut(path));
                    }
                    Expired::Finished => {
                        watch.settled = true;
                        return reply_rx.try_recv().map_err(|_| Ended::Lost);
                    }
                },
            }
        }
    }

    /// Reads the whole file as UTF-8.
    pub async fn read(&self, path: &Path) -> Result<String, IoError> {
        let owned = path.to_path_buf();
        self.run_op("read", path, move |fs| fs.read(&owned)).await
    }

    /// Writes `data` to an existing file with one `write(2)`; an error from the
    /// call carries the data ([`IoError::Write`]).
    pub async fn write(&self, path: &Path, data: &str) -> Result<(), IoError> {
        let owned = path.to_path_buf();
        let payload = data.to_owned();
        match self
            .run_op("write", path, move |fs| fs.write(&owned, &payload))
            .await
        {
            Err(IoError::Os { path, source, .. }) => Err(IoError::Write {
                path,
                data: data.to_owned(),
                source,
            }),
            other => other,
        }
    }

    /// Lists a directory ([`Fs::read_dir`]).
    pub async fn read_dir(&self, path: &Path) -> Result<Vec<Entry>, IoError> {
        let owned = path.to_path_buf();
        self.run_op("read directory", path, move |fs| fs.read_dir(&owned))
            .await
    }

    /// Reads an extended attribute; `None` when absent or unsupported.
    pub async fn get_xattr(&self, path: &Path, name: &str) -> Result<Option<Vec<u8>>, IoError> {
        let owned = path.to_path_buf();
        let name = name.to_owned();
        self.run_op("get xattr of", path, move |fs| fs.get_xattr(&owned, &name))
            .await
    }

    /// Sets an extended attribute.
    pub async fn set_xattr(&self, path: &Path, name: &str, value: &[u8]) -> Result<(), IoError> {
        let owned = path.to_path_buf();
        let name = name.to_owned();
        let value = value.to_vec();
        self.run_op("set xattr on", path, move |fs| {
            fs.set_xattr(&owned, &name, &value)
        })
        .await
    }

    /// Creates one directory.
    pub async fn mkdir(&self, path: &Path) -> Result<(), IoError> {
        let owned = path.to_path_buf();
        self.run_op("create directory", path, move |fs| fs.mkdir(&owned))
            .await
    }

    /// Whether the path exists.
    pub async fn exists(&self, path: &Path) -> Result<bool, IoError> {
        let owned = path.to_path_buf();
        self.run_op("check", path, move |fs| fs.exists(&owned))
            .await
    }

    /// The paths currently marked hung, in path order.
    pub fn hung(&self) -> Vec<HungPath> {
        self.handle
            .shared
            .lock()
            .hung
            .iter()
            .map(|(path, mark)| HungPath {
                path: path.clone(),
                since: mark.since,
                op: mark.op,
            })
            .collect()
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> IoStats {
        let state = self.handle.shared.lock();
        IoStats {
            threads: state.healthy,
            stuck: state.stuck,
            queued: state.queue.len(),
            completed: state.completed,
            timeouts: state.timeouts,
            failed_fast: state.failed_fast,
        }
    }

    /// Stops accepting work: queued jobs that have not started fail with
    /// [`IoError::ShutDown`], as does every later job; idle threads exit. Never
    /// waits: running and stuck calls go on and their threads exit when they
    /// return. Dropping the last clone does the same.
    pub fn shutdown(&self) {
        self.handle.shared.shutdown();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves the counters consistent enough;
        // refusing all I/O afterwards would take the daemon down with it.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts one worker thread, counted as healthy.
    fn spawn_worker(self: &Arc<Self>, state: &mut State) {
        let n = state.next_thread;
        state.next_thread += 1;
        let shared = Arc::clone(self);
        // The JoinHandle is dropped: workers are detached, so nothing can ever
        // wait on a stuck one.
        match thread::Builder::new()
            .name(format!("pinctl-io-{n}"))
            .spawn(move || shared.work())
        {
            Ok(_) => state.healthy += 1,
            Err(e) => tracing::error!(error = %e, "failed to start I/O thread pinctl-io-{n}"),
        }
    }

    /// A worker thread's loop.
    fn work(self: Arc<Self>) {
        let mut state = self.lock();
        loop {
            let job = loop {
                if state.closed {
                    state.healthy = state.healthy.saturating_sub(1);
                    return;
                }
                if let Some(job) = state.queue.pop_front() {
                    break job;
                }
                state = self
                    .work_ready
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
            };
            let Job {
                id,
                key,
                check_hung,
                op,
                start,
                work,
                _slot,
            } = job;
            drop(_slot);
            // The path may have been marked hung while the job waited.
            if let Some(refused) = check_hung.then(|| state.refuse_hung(&key)).flatten() {
                let _ = start.send(Err(refused));
                continue;
            }
            let started = Instant::now();
            // The first step is the job's own key.
            state.running.insert(
                id,
                Running {
                    started,
                    key: Some(key),
                    marked: None,
                },
            );
            if start.send(Ok(started)).is_err() {
                // The caller went away before the job started: skip it.
                state.running.remove(&id);
                continue;
            }
            drop(state);

            let steps = Steps { shared: &self, id };
            let deliver = panic::catch_unwind(AssertUnwindSafe(|| work(&*self.fs, &steps)));

            state = self.lock();
            let marked = state.running.remove(&id).and_then(|r| r.marked);
            // Delivered under the lock, so `expire` sees either a running job
            // or a result already in the channel.
            if let Ok(deliver) = deliver {
                let _ = panic::catch_unwind(AssertUnwindSafe(deliver));
            }
            let Some(marked) = marked else {
                state.completed += 1;
                continue;
            };
            state.stuck = state.stuck.saturating_sub(1);
            state.clear_mark(&marked, op);
            if state.closed || state.healthy >= self.config.threads {
                // A replacement took this thread's place.
                return;
            }
            state.healthy += 1;
        }
    }

    /// Called on the async side when a started job's deadline has passed.
    fn expire(self: &Arc<Self>, id: u64, op: &'static str) -> Expired {
        let mut state = self.lock();
        let timeout = self.config.timeout;
        let Some(running) = state.running.get_mut(&id) else {
            return Expired::Finished;
        };
        if let Some(marked) = &running.marked {
            return Expired::Marked(marked.clone());
        }
        let Some(key) = running.key.clone() else {
            // Between steps: the next one brings its own deadline.
            return Expired::Later(deadline(Instant::now(), timeout));
        };
        let due = deadline(running.started, timeout);
        if due > tokio::time::Instant::now() {
            return Expired::Later(due);
        }
        running.marked = Some(key.clone());
        let key = key.as_path();
        state.timeouts += 1;
        state.stuck += 1;
        state.healthy = state.healthy.saturating_sub(1);
        let now = Instant::now();
        state
            .hung
            .entry(key.to_path_buf())
            .or_insert(Mark {
                since: now,
                op,
                stuck: 0,
            })
            .stuck += 1;
        tracing::warn!(
            path = %key.display(),
            op,
            timeout = ?self.config.timeout,
            stuck = state.stuck,
            "I/O call did not return in time; path marked hung"
        );
        if !state.closed
            && state.healthy < self.config.threads
            && state.healthy + state.stuck < self.config.max_stuck
        {
            self.spawn_worker(&mut state);
        }
        if state.healthy == 0 && !state.closed {
            tracing::error!(
                stuck = state.stuck,
                "all I/O threads are stuck; refusing I/O until one returns"
            );
            // Nothing would ever run these: fail them now.
            while let Some(job) = state.queue.pop_front() {
                state.failed_fast += 1;
                let _ = job.start.send(Err(IoError::Saturated { path: job.key }));
            }
        }
        Expired::Marked(key.to_path_buf())
    }

    fn shutdown(&self) {
        let mut state = self.lock();
        if state.closed {
            return;
        }
        state.closed = true;
        self.slots.close();
        while let Some(job) = state.queue.pop_front() {
            let _ = job.start.send(Err(IoError::ShutDown));
        }
        drop(state);
        self.work_ready.notify_all();
        tracing::debug!("I/O pool shut down");
    }
}

impl State {
    /// Whether a new job on `key` may be queued (and, with `check_hung`,
    /// whether `key` is not hung).
    fn admit(&mut self, key: &Path, check_hung: bool) -> Result<(), IoError> {
        if self.closed {
            return Err(IoError::ShutDown);
        }
        if check_hung && let Some(refused) = self.refuse_hung(key) {
            return Err(refused);
        }
        if self.healthy == 0 {
            self.failed_fast += 1;
            return Err(IoError::Saturated {
                path: key.to_path_buf(),
            });
        }
        Ok(())
    }

    /// The `Hung` error if `key` or a directory above it is marked.
    fn refuse_hung(&mut self, key: &Path) -> Option<IoError> {
        // Marks are few (each holds a stuck thread), so a scan is fine.
        let (path, mark) = self.hung.iter().find(|(path, _)| key.starts_with(path))?;
        let refused = IoError::Hung {
            path: path.clone(),
            secs: mark.since.elapsed().as_secs(),
        };
        self.failed_fast += 1;
        Some(refused)
    }

    /// A stuck call on `key` returned: drop one stuck count from its mark.
    fn clear_mark(&mut self, key: &Path, op: &'static str) {
        let Some(mark) = self.hung.get_mut(key) else {
            return;
        };
        mark.stuck = mark.stuck.saturating_sub(1);
        let stuck_for = mark.since.elapsed();
        if mark.stuck == 0 {
            self.hung.remove(key);
            tracing::info!(
                path = %key.display(),
                op,
                ?stuck_for,
                "hung I/O call returned; path no longer marked hung"
            );
        } else {
            tracing::info!(
                path = %key.display(),
                op,
                ?stuck_for,
                "hung I/O call returned; others on the path are still stuck"
            );
        }
    }
}

/// Keeps a cancelled caller from leaving work behind: if the caller's future is
/// dropped while the job waits in the queue, the job is removed; if it is
/// dropped while the job runs, a task still marks the job timed out when its
/// deadline passes, so a stuck thread is never left unaccounted for.
struct Watch {
    shared: Arc<Shared>,
    id: u64,
    op: &'static str,
    /// Set once the caller has the outcome.
    settled: bool,
}

impl Drop for Watch {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        let mut state = self.shared.lock();
        if let Some(at) = state.queue.iter().position(|job| job.id == self.id) {
            state.queue.remove(at);
            return;
        }
        let Some(started) = state.running.get(&self.id).map(|r| r.started) else {
            return;
        };
        drop(state);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut due = deadline(started, self.shared.config.timeout);
        let shared = Arc::clone(&self.shared);
        let (id, op) = (self.id, self.op);
        runtime.spawn(async move {
            loop {
                tokio::time::sleep_until(due).await;
                // A no-op if the job has returned by now.
                match shared.expire(id, op) {
                    Expired::Later(later) => due = later,
                    Expired::Marked(_) | Expired::Finished => break,
                }
            }
        });
    }
}

/// When a job started at `started` times out. Clamped so that an absurd
/// timeout cannot overflow `Instant`.
fn deadline(started: Instant, timeout: Duration) -> tokio::time::Instant {
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    tokio::time::Instant::from_std(started + timeout.min(CENTURY))
}

fn panic_error(payload: &(dyn std::any::Any + Send)) -> io::Error {
    let message = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)");
    tracing::error!(panic = message, "I/O job panicked");
    io::Error::other(format!("the I/O job panicked: {message}"))
}

fn lost_error() -> io::Error {
    io::Error::other("the I/O job ended without a result")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The default `scan_dir`, built from the other operations.
    struct Plain;

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
    }

    fn summary(scan: io::Result<DirScan>) -> String {
        match scan {
            Err(e) => format!("error {:?}", e.kind()),
            Ok(mut s) => {
                s.dirs.sort();
                let files: Vec<String> = s
                    .files
                    .iter()
                    .map(|f| match f {
                        Ok(t) => format!("{t:?}"),
                        Err(e) => format!("{:?}", e.kind()),
                    })
                    .collect();
                let xattr = match &s.xattr {
                    Ok(v) => format!("{v:?}"),
                    Err(e) => format!("{:?}", e.kind()),
                };
                let owner = s.owner.map_err(|e| e.kind());
                format!(
                    "dirs {:?} files {files:?} xattr {xattr} owner {owner:?}",
                    s.dirs
                )
            }
        }
    }

    #[test]
    fn scan_dir_relative_to_the_directory_matches_the_plain_one() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("cg");
        std::fs::create_dir_all(dir.join("child-a")).unwrap();
        std::fs::create_dir_all(dir.join("child-b/deeper")).unwrap();
        std::fs::create_dir_all(tmp.path().join("elsewhere")).unwrap();
        std::os::unix::fs::symlink(tmp.path().join("elsewhere"), dir.join("link")).unwrap();
        std::os::unix::fs::symlink(tmp.path().join("nowhere"), dir.join("dangling")).unwrap();
        std::fs::write(dir.join("cpuset.cpus"), "0-3\n").unwrap();
        // Longer than one read.
        std::fs::write(dir.join("big"), "x".repeat(5000)).unwrap();
        std::fs::write(dir.join("bad"), [0xff, 0xfe]).unwrap();
        let files = ["cpuset.cpus", "missing", "big", "bad"];
        let real = summary(RealFs.scan_dir(&dir, &files, "user.pinctl.cpus"));
        assert_eq!(
            real,
            summary(Plain.scan_dir(&dir, &files, "user.pinctl.cpus"))
        );
        assert!(
            real.starts_with(
                r#"dirs ["child-a", "child-b", "link"] files ["\"0-3\\n\"", "NotFound""#
            ),
            "{real}"
        );
        assert!(real.contains("InvalidData"), "{real}");
        let gone = tmp.path().join("gone");
        assert_eq!(
            summary(RealFs.scan_dir(&gone, &files, "user.x")),
            "error NotFound"
        );
        assert_eq!(
            summary(Plain.scan_dir(&gone, &files, "user.x")),
            "error NotFound"
        );
    }
}
