//! The daemon's crash-safe state file: its on-disk envelope, atomic replace and
//! quarantine.
//!
//! - The envelope: `{"version":1,"checksum":"crc32:xxxxxxxx","state":<body>}`,
//!   one line; the CRC-32 is of the body's bytes as they are in the file.
//! - [`StateFile::save`] replaces the file atomically (temp file, `fsync`,
//!   `rename`, `fsync` of the directory): after a crash it holds the old or
//!   the new state, whole.
//! - [`StateFile::load`] moves anything invalid aside, to
//!   `<path>.corrupt-<unix-seconds>` (at most [`MAX_QUARANTINED`] kept); it
//!   never deletes a state file.
//! - The body is a hint: the live cgroups are the truth.
//!
//! Invariant: one process saves a given state file at a time (the daemon is its
//! only writer); concurrent readers always see a complete file.

use std::ffi::{OsStr, OsString};
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// The envelope version this build writes and the only one it reads.
pub const STATE_VERSION: u32 = 1;

/// How many quarantined (`.corrupt-*`) files are kept next to the state file.
/// Older ones are deleted, so a crash loop that corrupts the file cannot fill
/// the disk.
pub const MAX_QUARANTINED: usize = 5;

const CHECKSUM_PREFIX: &str = "crc32:";

/// Why the state file could not be read, written or moved aside.
///
/// A state file that is readable but invalid is not an error: [`StateFile::load`]
/// returns [`Loaded::Quarantined`] for it.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The file exists but could not be read (permission denied, EIO, a
    /// directory in its place).
    #[error("failed to read state file {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The state file's path has no file name (for example `/` or `..`).
    #[error("state file path {path} has no file name")]
    NoFileName { path: PathBuf },
    /// The directory holding the state file could not be created.
    #[error("failed to create state directory {path}")]
    CreateDir {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The body could not be serialized to JSON.
    #[error("failed to serialize the state for {path}")]
    Serialize {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// Creating, writing or `fsync`ing the temporary file failed.
    #[error("failed to write state file {path} (via {tmp})")]
    Write {
        path: PathBuf,
        tmp: PathBuf,
        #[source]
        source: io::Error,
    },
    /// Renaming the temporary file over the state file failed.
    #[error("failed to rename {tmp} to state file {path}")]
    Rename {
        path: PathBuf,
        tmp: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The new state file is in place, but `fsync` of its directory failed, so
    /// the rename may not survive a crash.
    #[error("failed to sync state directory {path}")]
    SyncDir {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The single-instance lock could not be taken: the lock file cannot be
    /// opened, or `flock` failed for another reason than another holder.
    #[error("failed to lock {path}")]
    Lock {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// Another process holds the single-instance lock: another pinctld runs
    /// with this state file.
    #[error("another pinctld already runs with this state file: {path} is locked{}", holder.map(|p| format!(" by pid {p}")).unwrap_or_default())]
    Locked { path: PathBuf, holder: Option<u32> },
    /// An invalid state file could not be moved aside.
    #[error("failed to move corrupt state file {path} to {to}")]
    Quarantine {
        path: PathBuf,
        to: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// What [`StateFile::load`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum Loaded<T> {
    /// A valid state file with its body.
    Fresh(T),
    /// No state file: a first start, or the previous one was quarantined.
    Missing,
    /// The file was not a valid state and has been moved to `moved_to`.
    Quarantined {
        /// One line saying what was wrong, for the log.
        reason: String,
        /// Where the file now is (`<path>.corrupt-<unix-seconds>[-N]`).
        moved_to: PathBuf,
    },
}

/// What [`StateFile::peek`] found; nothing was moved.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum Peeked<T> {
    /// A valid state file with its body.
    Fresh(T),
    /// No state file.
    Missing,
    /// A file that is not a valid state; one line saying why.
    Invalid { reason: String },
}

/// What a file of originals (power's, housekeeping's) held.
#[derive(Debug)]
pub enum Found<T> {
    /// What it kept.
    Kept(T),
    /// None: the first start since boot, or nothing was ever written.
    Missing,
    /// The file was not valid and was moved aside; why, for the log.
    Quarantined(String),
}

/// The daemon's state file at one path. Holds only the path; every call goes to
/// the filesystem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateFile {
    path: PathBuf,
}

/// The envelope as written. `state` is already-serialized JSON, copied verbatim
/// so the checksum covers exactly the bytes in the file.
#[derive(Serialize)]
struct EnvelopeOut<'a> {
    version: u32,
    checksum: &'a str,
    state: &'a RawValue,
}

/// The envelope as read. The body stays raw so its checksum is verified over
/// the file's own bytes, without re-serialising.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EnvelopeIn<'a> {
    /// Already checked by [`VersionProbe`]; declared so it is not unknown.
    #[serde(rename = "version")]
    _version: serde::de::IgnoredAny,
    checksum: String,
    #[serde(borrow)]
    state: &'a RawValue,
}

/// Reads only the version, so a future format with different fields is reported
/// as an unsupported version rather than as missing or unknown fields.
#[derive(Deserialize)]
struct VersionProbe {
    version: Option<serde_json::Value>,
}

impl StateFile {
    /// A state file at `path`. Nothing is touched until [`load`](Self::load) or
    /// [`save`](Self::save).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// The state file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads and verifies the state file.
    ///
    /// Returns [`Loaded::Missing`] when there is no file, and
    /// [`Loaded::Quarantined`] when the file is readable but not a valid state
    /// (empty, truncated, not UTF-8, not the envelope, an unsupported version, a
    /// checksum mismatch, or a body that does not deserialize into `T`): it is
    /// then moved aside, never deleted, and the oldest quarantined files beyond
    /// [`MAX_QUARANTINED`] are removed.
    ///
    /// # Errors
    ///
    /// [`StateError::Read`] when the file exists but cannot be read (that says
    /// nothing about its content, so it is left in place for the caller to
    /// decide), and [`StateError::Quarantine`] when an invalid file cannot be
    /// moved aside.
    pub fn load<T: DeserializeOwned>(&self) -> Result<Loaded<T>, StateError> {
        let bytes = match fs::read(&self.path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Loaded::Missing),
            Err(source) => {
                return Err(StateError::Read {
                    path: self.path.clone(),
                    source,
                });
            }
        };
        match decode(&bytes) {
            Ok(body) => Ok(Loaded::Fresh(body)),
            Err(reason) => {
                let moved_to = self.quarantine()?;
                Ok(Loaded::Quarantined {
                    reason: one_line(&reason),
                    moved_to,
                })
            }
        }
    }

    /// Reads and verifies the state file like [`load`](Self::load), but never
    /// moves it: for readers other than the daemon (`pinctl status --offline`),
    /// which must not change the daemon's files. An invalid file is
    /// [`Peeked::Invalid`] with the reason and stays where it is.
    ///
    /// # Errors
    ///
    /// [`StateError::Read`] when the file exists but cannot be read.
    pub fn peek<T: DeserializeOwned>(&self) -> Result<Peeked<T>, StateError> {
        match fs::read(&self.path) {
            Ok(bytes) => Ok(match decode(&bytes) {
                Ok(body) => Peeked::Fresh(body),
                Err(reason) => Peeked::Invalid {
                    reason: one_line(&reason),
                },
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Peeked::Missing),
            Err(source) => Err(StateError::Read {
                path: self.path.clone(),
                source,
            }),
        }
    }

    /// Takes the single-instance lock: `flock` on `<path>.lock` (made if
    /// missing, with the directory), held until the returned [`StateLock`] is
    /// dropped or the process ends, crash included, so it never goes stale.
    /// The holder's pid is written into the file for the message of the next
    /// one who tries. The daemon takes it before anything else, so a second
    /// daemon changes nothing (it used to move the state file aside and write
    /// `cgroup.subtree_control` before it found the socket in use).
    ///
    /// # Errors
    ///
    /// [`StateError::Locked`] when another process holds it, with that
    /// process's pid when the file says it; [`StateError::Lock`] or
    /// [`StateError::CreateDir`] when it cannot be taken at all.
    pub fn lock(&self) -> Result<StateLock, StateError> {
        use nix::fcntl::{Flock, FlockArg};
        let mut name = self.file_name()?.to_os_string();
        name.push(".lock");
        let path = self.dir().join(name);
        self.create_dir()?;
        let lock_err = |source| StateError::Lock {
            path: path.clone(),
            source,
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o640)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(&path)
            .map_err(lock_err)?;
        let locked = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(locked) => locked,
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => {
                let holder = fs::read_to_string(&path)
                    .ok()
                    .and_then(|t| t.trim().parse().ok());
                return Err(StateError::Locked { path, holder });
            }
            Err((_, errno)) => return Err(lock_err(errno.into())),
        };
        locked
            .set_len(0)
            .and_then(|()| writeln!(&*locked, "{}", std::process::id()))
            .map_err(lock_err)?;
        Ok(StateLock {
            _file: locked,
            path,
        })
    }

    /// Atomically replaces the state file with `body`.
    ///
    /// Creates the parent directory (mode 0750) if missing, writes the envelope
    /// to `.<name>.tmp-<pid>` in the same directory (mode 0640), `fsync`s it,
    /// renames it over the state file and `fsync`s the directory. After a crash
    /// at any point the file holds either the old or the new complete state.
    /// Temporary files left by dead processes are removed afterwards.
    ///
    /// # Errors
    ///
    /// A [`StateError`] naming the path and the step that failed; the temporary
    /// file is removed first. If only the final directory `fsync` fails
    /// ([`StateError::SyncDir`]), the new state is in place but may not survive
    /// a crash.
    pub fn save<T: Serialize>(&self, body: &T) -> Result<(), StateError> {
        let name = self.file_name()?;
        let dir = self.dir();
        self.create_dir()?;

        let contents = encode(body).map_err(|source| StateError::Serialize {
            path: self.path.clone(),
            source,
        })?;

        let tmp = dir.join(temp_name(name, std::process::id()));
        let result = self.replace_with(&tmp, contents.as_bytes());
        if result.is_err() {
            // Best effort: the temp file may not exist (create failed, or the
            // rename already happened), and the error being returned matters more.
            let _ = fs::remove_file(&tmp);
        }
        result?;

        remove_stale_temps(dir, name);
        Ok(())
    }

    fn replace_with(&self, tmp: &Path, contents: &[u8]) -> Result<(), StateError> {
        let write_err = |source| StateError::Write {
            path: self.path.clone(),
            tmp: tmp.to_path_buf(),
            source,
        };
        // A temp file with our name is left over from a crashed process that had
        // the same pid; it is garbage. Removing it lets `create_new` guarantee
        // the mode below applies to a file we created.
        match fs::remove_file(tmp) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(write_err(e)),
        }
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o640)
            .open(tmp)
            .map_err(write_err)?;
        file.write_all(contents).map_err(write_err)?;
        // Without this the rename can reach the disk before the data, and a
        // crash leaves an empty or torn file under the real name.
        file.sync_all().map_err(write_err)?;
        drop(file);

        fs::rename(tmp, &self.path).map_err(|source| StateError::Rename {
            path: self.path.clone(),
            tmp: tmp.to_path_buf(),
            source,
        })?;

        // The rename is a change to the directory; it is durable only once the
        // directory itself is synced.
        let dir = self.dir_for_open();
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|source| StateError::SyncDir {
                path: dir.to_path_buf(),
                source,
            })
    }

    /// Moves the state file to the first free `<path>.corrupt-<secs>[-N]` and
    /// prunes old quarantined files.
    fn quarantine(&self) -> Result<PathBuf, StateError> {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        // Continue after the highest N already used for this second, so names
        // freed by pruning are not reused and the (seconds, N) order stays the
        // order of quarantine.
        let mut n = self
            .quarantined()
            .into_iter()
            .filter(|((s, _), _)| *s == secs)
            .map(|((_, n), _)| n + 1)
            .max()
            .unwrap_or(0);
        loop {
            let mut to = self.path.clone().into_os_string();
            to.push(format!(".corrupt-{secs}"));
            if n > 0 {
                to.push(format!("-{n}"));
            }
            let to = PathBuf::from(to);
            match rename_noreplace(&self.path, &to) {
                Ok(()) => {
                    // If a crash loses this rename, the next load finds the same
                    // file and quarantines it again, so no directory fsync.
                    self.prune_quarantine(&to);
                    return Ok(to);
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => n += 1,
                Err(source) => {
                    return Err(StateError::Quarantine {
                        path: self.path.clone(),
                        to,
                        source,
                    });
                }
            }
        }
    }

    /// Deletes the oldest quarantined files so at most [`MAX_QUARANTINED`]
    /// remain, always keeping `newest` (the one just moved) even if the clock
    /// went backwards. Best effort: the invalid file is already safely aside,
    /// and the next quarantine retries.
    fn prune_quarantine(&self, newest: &Path) {
        let mut others = self.quarantined();
        others.retain(|(_, path)| path != newest);
        others.sort();
        let excess = others.len().saturating_sub(MAX_QUARANTINED - 1);
        for (_, path) in others.into_iter().take(excess) {
            let _ = fs::remove_file(path);
        }
    }

    /// The quarantined files next to the state file with their (seconds, N)
    /// keys, unsorted. Empty if the directory cannot be listed.
    fn quarantined(&self) -> Vec<((u64, u32), PathBuf)> {
        let Some(name) = self.path.file_name() else {
            return Vec::new();
        };
        let Ok(entries) = fs::read_dir(self.dir_for_open()) else {
            return Vec::new();
        };
        entries
            .filter_map(Result::ok)
            .filter_map(|e| quarantine_key(name, &e.file_name()).map(|k| (k, e.path())))
            .collect()
    }

    /// Creates the parent directory if missing. Mode 0750: the group of the
    /// daemon (`pinctl` under the shipped unit, whose `StateDirectory=` makes
    /// it) may read the state, for `pinctl status --offline`.
    fn create_dir(&self) -> Result<(), StateError> {
        let dir = self.dir();
        if dir.as_os_str().is_empty() {
            return Ok(());
        }
        DirBuilder::new()
            .recursive(true)
            .mode(0o750)
            .create(dir)
            .map_err(|source| StateError::CreateDir {
                path: dir.to_path_buf(),
                source,
            })
    }

    fn file_name(&self) -> Result<&OsStr, StateError> {
        self.path.file_name().ok_or_else(|| StateError::NoFileName {
            path: self.path.clone(),
        })
    }

    /// The parent directory, empty for a bare file name.
    fn dir(&self) -> &Path {
        self.path.parent().unwrap_or(Path::new(""))
    }

    /// The parent directory in a form `open` accepts (`.` for a bare file name).
    fn dir_for_open(&self) -> &Path {
        match self.dir() {
            d if d.as_os_str().is_empty() => Path::new("."),
            d => d,
        }
    }
}

/// The single-instance lock of a state file ([`StateFile::lock`]); released
/// when dropped.
#[derive(Debug)]
pub struct StateLock {
    _file: nix::fcntl::Flock<File>,
    path: PathBuf,
}

impl StateLock {
    /// The lock file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Serializes `body` into the complete file contents.
fn encode<T: Serialize>(body: &T) -> Result<String, serde_json::Error> {
    let state = serde_json::value::to_raw_value(body)?;
    let checksum = checksum_of(state.get().as_bytes());
    let mut out = serde_json::to_string(&EnvelopeOut {
        version: STATE_VERSION,
        checksum: &checksum,
        state: &state,
    })?;
    out.push('\n');
    Ok(out)
}

/// Verifies the file contents and deserializes the body, or says what is wrong.
fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    if bytes.trim_ascii().is_empty() {
        return Err("state file is empty".to_owned());
    }
    // A file of NULs is what some filesystems leave when the data of a write
    // never reached the disk; say so rather than "expected value".
    if bytes.iter().all(|&b| b == 0) {
        return Err(format!(
            "state file contains only NUL bytes ({} bytes)",
            bytes.len()
        ));
    }
    let text =
        std::str::from_utf8(bytes).map_err(|e| format!("state file is not valid UTF-8 ({e})"))?;

    serde_json::from_str::<serde::de::IgnoredAny>(text).map_err(json_reason)?;
    // Derived structs also deserialize from a JSON array in field order; the
    // envelope is an object and nothing else.
    if !text.trim_start().starts_with('{') {
        return Err("state file is not a JSON object".to_owned());
    }
    let probe: VersionProbe = serde_json::from_str(text).map_err(json_reason)?;
    match probe.version {
        None => return Err("state file has no version".to_owned()),
        Some(v) if v.as_u64() == Some(u64::from(STATE_VERSION)) => {}
        Some(v) => {
            return Err(match v.as_u64() {
                Some(n) => format!(
                    "state file version {n} is not supported by this pinctld (supports {STATE_VERSION})"
                ),
                None => format!("state file version {v} is not a version number"),
            });
        }
    }

    let envelope: EnvelopeIn<'_> = serde_json::from_str(text).map_err(json_reason)?;
    let recorded = envelope.checksum.as_str();
    if !is_checksum_format(recorded) {
        return Err(format!(
            "state file checksum {recorded:?} is not in the form \"crc32:\" followed by 8 lowercase hex digits"
        ));
    }
    let actual = checksum_of(envelope.state.get().as_bytes());
    if recorded != actual {
        return Err(format!(
            "state file checksum mismatch: recorded {recorded}, body has {actual} (edited by hand or torn)"
        ));
    }
    serde_json::from_str(envelope.state.get())
        .map_err(|e| format!("state file body does not match this pinctld's state: {e}"))
}

fn json_reason(e: serde_json::Error) -> String {
    if e.is_eof() {
        format!("state file is truncated: {e}")
    } else if e.is_syntax() {
        format!("state file is not valid JSON: {e}")
    } else {
        format!("state file is not a valid state envelope: {e}")
    }
}

fn checksum_of(body: &[u8]) -> String {
    format!("{CHECKSUM_PREFIX}{:08x}", crc32fast::hash(body))
}

fn is_checksum_format(s: &str) -> bool {
    s.strip_prefix(CHECKSUM_PREFIX).is_some_and(|hex| {
        hex.len() == 8 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

/// Escapes control characters so a reason built from file content stays on one
/// log line.
fn one_line(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// `.<name>.tmp-`
fn temp_prefix(name: &OsStr) -> OsString {
    let mut prefix = OsString::from(".");
    prefix.push(name);
    prefix.push(".tmp-");
    prefix
}

/// `.<name>.tmp-<pid>`
fn temp_name(name: &OsStr, pid: u32) -> OsString {
    let mut tmp = temp_prefix(name);
    tmp.push(pid.to_string());
    tmp
}

/// The sort key (seconds, N) of `<name>.corrupt-<secs>[-N]`, or `None` for any
/// other file, so pruning never touches a file it did not create.
fn quarantine_key(name: &OsStr, candidate: &OsStr) -> Option<(u64, u32)> {
    let rest = candidate
        .as_bytes()
        .strip_prefix(name.as_bytes())?
        .strip_prefix(b".corrupt-")?;
    let rest = std::str::from_utf8(rest).ok()?;
    let (secs, n) = match rest.split_once('-') {
        Some((secs, n)) => (secs, parse_digits::<u32>(n)?),
        None => (rest, 0),
    };
    Some((parse_digits(secs)?, n))
}

fn parse_digits<N: std::str::FromStr>(s: &str) -> Option<N> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Removes `.<name>.tmp-<pid>` files whose process no longer exists: each save
/// interrupted by a crash leaves one, and a crash loop would otherwise pile
/// them up. A live process's temp file is left alone. Best effort.
fn remove_stale_temps(dir: &Path, name: &OsStr) {
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let prefix = temp_prefix(name);
    for entry in entries.filter_map(Result::ok) {
        let file_name = entry.file_name();
        let Some(pid) = file_name
            .as_bytes()
            .strip_prefix(prefix.as_bytes())
            .and_then(|p| std::str::from_utf8(p).ok())
            .and_then(parse_digits::<i32>)
        else {
            continue;
        };
        if pid > 0 && !process_exists(pid) {
            let _ = fs::remove_file(entry.path());
        }
    }
}

fn process_exists(pid: i32) -> bool {
    // SAFETY: kill with signal 0 sends nothing; it only checks that `pid`
    // exists and takes no pointers.
    let ret = unsafe { libc::kill(pid, 0) };
    // EPERM means it exists but belongs to someone else.
    ret == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// `rename` that fails with `AlreadyExists` instead of replacing `to`, so a
/// quarantined file (or a checkpoint moved aside) is never overwritten.
/// The system call itself (rustix), not the C library's wrapper: musl has
/// none, and the container image's static binaries are built with musl.
pub fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    use rustix::fs::{CWD, RenameFlags, renameat_with};
    use rustix::io::Errno;
    match renameat_with(CWD, from, CWD, to, RenameFlags::NOREPLACE) {
        Ok(()) => Ok(()),
        // Filesystems without RENAME_NOREPLACE: check, then rename. The race is
        // harmless with one daemon per state file.
        Err(Errno::INVAL | Errno::NOSYS) => {
            if fs::symlink_metadata(to).is_ok() {
                return Err(io::ErrorKind::AlreadyExists.into());
            }
            fs::rename(from, to)
        }
        Err(errno) => Err(errno.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The image's musl build and the packages' glibc build share this path:
    /// a rename to a free name happens; one onto an existing file fails and
    /// leaves both files as they were.
    #[test]
    fn rename_noreplace_moves_to_a_free_name_and_never_over_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, c) = (
            dir.path().join("a"),
            dir.path().join("b"),
            dir.path().join("c"),
        );
        fs::write(&a, "first").unwrap();
        fs::write(&b, "second").unwrap();
        let err = rename_noreplace(&a, &b).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists, "{err}");
        assert_eq!(fs::read_to_string(&a).unwrap(), "first");
        assert_eq!(fs::read_to_string(&b).unwrap(), "second");
        rename_noreplace(&a, &c).unwrap();
        assert!(!a.exists());
        assert_eq!(fs::read_to_string(&c).unwrap(), "first");
        let err = rename_noreplace(&a, &dir.path().join("d")).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound, "{err}");
    }
}
