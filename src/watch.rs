//! The inotify watcher on the managed cgroup trees.
//!
//! One watch per cgroup directory. It turns raw inotify events into
//! [`Change`]s the daemon acts on, and handles the kernfs quirks
//! (KERNEL-NOTES): `mkdir -p a/b/c` reports only `a`, so the daemon rescans a
//! directory after watching it; a removed cgroup sends no `IN_DELETE_SELF` or
//! `IN_IGNORED`, so watches are dropped when the parent reports the delete; a
//! queue overflow means "resynchronise from a full scan".
//!
//! Adding a watch is a syscall on an inode we already reached, and reading
//! events is non-blocking; neither waits on cgroup file contents.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};

use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};

use crate::cgroup::Rel;
use tokio::io::unix::AsyncFd;

/// What happened, in cgroup terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A child cgroup appeared (relative path).
    Created(Rel),
    /// A cgroup was removed.
    Removed(Rel),
    /// `cpuset.cpus` of a cgroup was written (by us or someone else).
    CpusWritten(Rel),
    /// An xattr, the owner or the mode of a cgroup's directory changed
    /// (`IN_ATTRIB`): read it again.
    Changed(Rel),
    /// A CPU limit file of a cgroup was written: read it again if the limit
    /// can change what it asks ([`crate::intent::limit_decides`]).
    LimitWritten(Rel),
    /// Events were lost: rescan everything.
    Overflow,
}

/// The watcher: an inotify instance and the map from watches to cgroups.
pub struct Watcher {
    fd: AsyncFd<Inotify>,
    /// The directory the relative paths are relative to.
    base: PathBuf,
    by_wd: BTreeMap<WatchDescriptor, Rel>,
    by_rel: BTreeMap<Rel, WatchDescriptor>,
    buffer: Vec<u8>,
    /// File names whose modification matters (`cpu.max`).
    limit_files: Vec<&'static str>,
}

fn mask() -> WatchMask {
    WatchMask::CREATE
        | WatchMask::DELETE
        | WatchMask::MODIFY
        | WatchMask::ATTRIB
        | WatchMask::MOVED_FROM
        | WatchMask::MOVED_TO
        | WatchMask::ONLYDIR
}

impl Watcher {
    /// A watcher for cgroups under `base` (the cpuset hierarchy's directory).
    /// `limit_files` are control files in the same directories whose changes
    /// mean "read this cgroup again" (`cpu.max` in v2).
    pub fn new(base: &Path, limit_files: Vec<&'static str>) -> io::Result<Self> {
        let inotify = Inotify::init()?;
        // SAFETY: `Inotify` owns its descriptor for as long as it lives and
        // `as_raw_fd` always returns that same descriptor.
        let fd = unsafe { AsyncFd::register(inotify) }?;
        Ok(Watcher {
            fd,
            base: base.to_path_buf(),
            by_wd: BTreeMap::new(),
            by_rel: BTreeMap::new(),
            buffer: vec![0; 64 * 1024],
            limit_files,
        })
    }

    /// Watches cgroup `rel`. Idempotent: returns whether the watch is new
    /// (what was written there before it went unseen).
    pub fn watch(&mut self, rel: &Rel) -> io::Result<bool> {
        if self.by_rel.contains_key(rel) {
            return Ok(false);
        }
        let path = crate::io::name::path(&self.base, rel);
        let wd = self.fd.get_mut().watches().add(&path, mask())?;
        // The directory is watched already under another name: it was
        // renamed (inotify keeps one watch per directory). The old name is
        // no longer a path of it, and unwatching it must not take this
        // watch away.
        if let Some(old) = self.by_wd.insert(wd.clone(), rel.clone())
            && old != *rel
        {
            self.by_rel.remove(&old);
        }
        self.by_rel.insert(rel.clone(), wd);
        Ok(true)
    }

    /// Stops watching `rel` and everything below it.
    pub fn unwatch(&mut self, rel: &str) {
        let gone: Vec<Rel> = crate::cgroup::subtree(&self.by_rel, rel).cloned().collect();
        for k in gone {
            self.unwatch_one(&k);
        }
    }

    /// Stops watching `rel` alone, not what is below it.
    pub fn unwatch_one(&mut self, rel: &str) {
        if let Some(wd) = self.by_rel.remove(rel) {
            self.by_wd.remove(&wd);
            // The kernel already dropped the watch of a removed directory;
            // EINVAL then is expected.
            let _ = self.fd.get_mut().watches().remove(wd);
        }
    }

    pub fn watched(&self) -> usize {
        self.by_rel.len()
    }

    /// Waits for events and returns them as changes (at least one).
    pub async fn next(&mut self) -> io::Result<Vec<Change>> {
        loop {
            let mut guard = self.fd.readable_mut().await?;
            let raw: Vec<(WatchDescriptor, EventMask, Option<OsString>)> =
                match guard.get_inner_mut().read_events(&mut self.buffer) {
                    Ok(events) => events
                        .map(|e| (e.wd, e.mask, e.name.map(|n| n.to_os_string())))
                        .collect(),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => Vec::new(),
                    Err(e) => return Err(e),
                };
            // The fd is non-blocking: an empty read means "not ready after all".
            if raw.is_empty() {
                guard.clear_ready();
                continue;
            }
            let changes = self.translate(raw);
            if !changes.is_empty() {
                return Ok(changes);
            }
        }
    }

    fn translate(&self, raw: Vec<(WatchDescriptor, EventMask, Option<OsString>)>) -> Vec<Change> {
        let mut out = Vec::new();
        for (wd, mask, name) in raw {
            if mask.contains(EventMask::Q_OVERFLOW) {
                out.push(Change::Overflow);
                continue;
            }
            let Some(dir) = self.by_wd.get(&wd) else {
                continue;
            };
            let name = name.map(|n| crate::io::name::encode(&n).into_owned());
            let child = |n: &str| -> Rel { crate::cgroup::child(dir, n).into() };
            let is_dir = mask.contains(EventMask::ISDIR);
            match name.as_deref() {
                Some(n) if is_dir && mask.intersects(EventMask::CREATE | EventMask::MOVED_TO) => {
                    out.push(Change::Created(child(n)));
                }
                Some(n) if is_dir && mask.intersects(EventMask::DELETE | EventMask::MOVED_FROM) => {
                    out.push(Change::Removed(child(n)));
                }
                Some(crate::cgroup::file::CPUS) if mask.contains(EventMask::MODIFY) => {
                    out.push(Change::CpusWritten(dir.clone()));
                }
                Some(n) if mask.contains(EventMask::MODIFY) && self.limit_files.contains(&n) => {
                    out.push(Change::LimitWritten(dir.clone()));
                }
                None if mask.contains(EventMask::ATTRIB) => {
                    out.push(Change::Changed(dir.clone()));
                }
                _ => {}
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory watched under one name, renamed and watched under the
    /// new one before the rename's events are taken in: unwatching the old
    /// name (its removal) leaves the new one watched.
    #[tokio::test]
    async fn a_renamed_directory_stays_watched_under_its_new_name() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("x")).unwrap();
        let mut w = Watcher::new(dir.path(), Vec::new()).unwrap();
        let (x, y): (Rel, Rel) = ("x".into(), "y".into());
        assert!(w.watch(&x).unwrap());
        std::fs::rename(dir.path().join("x"), dir.path().join("y")).unwrap();
        assert!(w.watch(&y).unwrap());
        w.unwatch(&x);
        assert_eq!(w.watched(), 1);
        assert!(!w.watch(&y).unwrap(), "still watched");
        std::fs::create_dir(dir.path().join("y/child")).unwrap();
        let changes = tokio::time::timeout(std::time::Duration::from_secs(5), w.next())
            .await
            .expect("an event")
            .unwrap();
        assert_eq!(changes, [Change::Created("y/child".into())]);
    }
}
