//! Cgroup names that are not UTF-8, in the `str` paths the daemon keeps.
//!
//! - The kernel allows any byte but `/` and NUL in a name; [`crate::cgroup::Rel`]
//!   and all built on it are strings. An invisible cgroup is a dangerous one
//!   (on v1 it kept its parent from narrowing, EBUSY, and its tasks ran on
//!   exclusive CPUs), so every name is kept, losslessly ([`encode`]).
//!   [`super::Fs::read_dir`] keeps every name it lists so, which is why this
//!   lives in `io`, below `cgroup`.
//! - Every path the daemon opens is made by [`path`] (through
//!   [`crate::cgroup::Hierarchy`]): a component left encoded by mistake holds
//!   a NUL, so it fails in the system call and never reaches a file.

use std::borrow::Cow;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
use std::path::{Path, PathBuf};

/// Marks an encoded name. No cgroup name can contain it.
const MARK: char = '\0';

/// The name of a directory as the daemon keeps it: as it is when it is
/// UTF-8, otherwise a NUL (`MARK`: no name can hold one, so nothing else
/// starts with it) and its bytes, where valid UTF-8 stays, a backslash is
/// doubled and any other byte is `\xNN`.
pub fn encode(name: &OsStr) -> Cow<'_, str> {
    if let Some(s) = name.to_str() {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(name.len() + 8);
    out.push(MARK);
    for chunk in name.as_bytes().utf8_chunks() {
        for c in chunk.valid().chars() {
            if c == '\\' {
                out.push_str("\\\\");
            } else {
                out.push(c);
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    Cow::Owned(out)
}

/// The bytes of one name as [`encode`] kept it. A malformed escape (which
/// [`encode`] never makes) is kept as it stands.
fn decode(name: &str) -> Cow<'_, OsStr> {
    let Some(rest) = name.strip_prefix(MARK) else {
        return Cow::Borrowed(OsStr::new(name));
    };
    let bytes = rest.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |s: &[u8]| {
            std::str::from_utf8(s)
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        };
        match &bytes[i..] {
            [b'\\', b'\\', ..] => {
                out.push(b'\\');
                i += 2;
            }
            [b'\\', b'x', h, l, ..] if hex(&[*h, *l]).is_some() => {
                out.push(hex(&[*h, *l]).unwrap_or_default());
                i += 4;
            }
            [b, ..] => {
                out.push(*b);
                i += 1;
            }
            [] => break,
        }
    }
    Cow::Owned(OsString::from_vec(out))
}

/// The path of cgroup `rel` below `base`, in the kernel's bytes.
pub fn path(base: &Path, rel: &str) -> PathBuf {
    if rel.is_empty() {
        return base.to_path_buf();
    }
    if !rel.contains(MARK) {
        return base.join(rel);
    }
    let mut out = base.to_path_buf();
    for part in rel.split('/') {
        out.push(decode(part));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn utf8_names_are_kept_as_they_are() {
        for name in [
            "kubepods.slice",
            "a b",
            "é",
            "\\x41",
            "back\\slash",
            "\u{1b}[2J",
        ] {
            assert_eq!(encode(OsStr::new(name)), name);
            assert_eq!(path(Path::new("/cg"), name), Path::new("/cg").join(name));
        }
    }

    #[test]
    fn other_names_are_encoded_and_found_again() {
        let raw = OsStr::from_bytes(b"job-\xff\xfe\\x41.scope");
        let kept = encode(raw);
        assert_eq!(kept, "\0job-\\xff\\xfe\\\\x41.scope");
        let rel = format!("system.slice/{kept}/inner");
        assert_eq!(
            path(Path::new("/cg"), &rel).as_os_str().as_bytes(),
            b"/cg/system.slice/job-\xff\xfe\\x41.scope/inner"
        );
    }

    proptest! {
        /// Every name the kernel allows comes back byte for byte, and no two
        /// names are kept alike.
        #[test]
        fn every_name_round_trips(raw in proptest::collection::vec(1u8..=255, 1..64)) {
            let raw: Vec<u8> = raw.into_iter().filter(|b| *b != b'/').collect();
            prop_assume!(!raw.is_empty());
            let name = OsStr::from_bytes(&raw);
            let kept = encode(name);
            prop_assert!(!kept.contains('/'));
            let back = path(Path::new("/"), &kept);
            prop_assert_eq!(back.as_os_str().as_bytes(), [b"/".as_slice(), &raw].concat());
        }
    }
}
