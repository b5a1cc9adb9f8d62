//! [`RealFs`]: the [`Fs`] calls on a real machine, each a plain system call
//! (or a few) that may block; only the I/O threads make them.

use std::io::{self, Write as _};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

use super::*;

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
            let name = super::name::encode(&entry.file_name()).into_owned();
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

    fn scan_dir(
        &self,
        dir: &Path,
        files: &[&str],
        xattr: &str,
        known: Option<usize>,
    ) -> io::Result<DirScan> {
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
        let stat = nix::sys::stat::fstat(&handle);
        // A directory's link count is 2 + its subdirectories on kernfs
        // (cgroupfs), tmpfs and ext4 (btrfs says 1): at 2 there is nothing
        // below it to find, and a container's cgroup (half of a node's) is
        // not listed (about 8% of a full reconcile's reads on real v1). A
        // child made after the `fstat` is reported by the watch added before
        // the scan, as one made after the listing would be.
        // Nor is one whose count says it has just the subdirectories the
        // caller knows of (`known`): one more would change the count. One
        // known gone and one new in its place keep it, until the caller
        // reads the gone one and forgets it. A subtree root with thousands
        // of pods is read at every part of the periodic reconcile.
        let unlisted = stat.as_ref().is_ok_and(|st| {
            st.st_nlink == 2
                || known.is_some_and(|n| st.st_nlink >= 2 && st.st_nlink - 2 == n as libc::nlink_t)
        });
        let owner = stat
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
        while !unlisted && let Some(entry) = listing.next() {
            let entry = entry?;
            let raw = std::ffi::OsStr::from_bytes(entry.file_name().to_bytes());
            if raw == "." || raw == ".." {
                continue;
            }
            match entry.file_type() {
                FileType::Directory => dirs.push(super::name::encode(raw).into_owned()),
                FileType::Symlink | FileType::Unknown => unsure.push(raw.to_os_string()),
                _ => {}
            }
        }
        for raw in unsure {
            // Follows links: a dangling one is not a directory, nor an error.
            if fstatat(&handle, raw.as_os_str(), AtFlags::empty()).is_ok_and(|st| {
                SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR
            }) {
                dirs.push(super::name::encode(&raw).into_owned());
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
