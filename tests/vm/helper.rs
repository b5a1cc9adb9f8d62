//! `vm-helper`: the two things the VM test bed needs that busybox cannot do.
//!
//! - `vm-helper setxattr PATH NAME VALUE` and `vm-helper getxattr PATH NAME`:
//!   set or print a `user.*` xattr (here `user.pinctl.cpus` on a cgroup
//!   directory). Busybox has no `setfattr`, the guest has no Python, and
//!   `pinctl` has no command for it; this is `setxattr(2)`, nothing more.
//! - `vm-helper notify SOCKET FILE`: bind a Unix datagram socket at `SOCKET`
//!   and append every message received to `FILE`, one line per field
//!   (`READY=1`, `STATUS=...`), flushed at once. The daemon is started with
//!   `NOTIFY_SOCKET=SOCKET`, so the scenarios wait for its real `READY=1`, as
//!   systemd does, instead of guessing from its log.
//!
//! It depends on nothing but the standard library (and the C library, which
//! the standard library links anyway), so `tests/vm/run` compiles it with
//! `rustc` alone, statically, in a few seconds; it is also a Cargo example
//! (`vm-helper`) so that `cargo fmt` and `cargo clippy` cover it. Exit codes: 0
//! success, 1 the call failed (the reason on stderr), 2 a wrong command line.

use std::ffi::{CString, c_char, c_int, c_void};
use std::fs::OpenOptions;
use std::io::Write as _;
use std::os::unix::net::UnixDatagram;
use std::process::ExitCode;

unsafe extern "C" {
    fn setxattr(
        path: *const c_char,
        name: *const c_char,
        value: *const c_void,
        size: usize,
        flags: c_int,
    ) -> c_int;
    fn getxattr(path: *const c_char, name: *const c_char, value: *mut c_void, size: usize)
    -> isize;
}

fn c_string(s: &str) -> Result<CString, String> {
    CString::new(s).map_err(|_| format!("{s:?} contains a NUL byte"))
}

/// `setxattr(2)`: create or replace.
fn set(path: &str, name: &str, value: &str) -> Result<(), String> {
    let (p, n) = (c_string(path)?, c_string(name)?);
    // SAFETY: both strings are NUL-terminated and live across the call; the
    // value pointer and length describe `value`'s bytes.
    let rc = unsafe {
        setxattr(
            p.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(format!(
            "cannot set xattr {name}={value:?} on {path}: {}",
            std::io::Error::last_os_error()
        ))
    }
}

/// `getxattr(2)` into a buffer large enough for pinctl's values.
fn get(path: &str, name: &str) -> Result<String, String> {
    let (p, n) = (c_string(path)?, c_string(name)?);
    let mut buf = vec![0u8; 4096];
    // SAFETY: the strings are NUL-terminated; the buffer pointer and length
    // describe `buf`, which outlives the call.
    let len = unsafe { getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if len < 0 {
        return Err(format!(
            "cannot get xattr {name} of {path}: {}",
            std::io::Error::last_os_error()
        ));
    }
    buf.truncate(len.unsigned_abs());
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

const USAGE: &str =
    "usage: vm-helper setxattr PATH NAME VALUE | getxattr PATH NAME | notify SOCKET FILE";

fn run(args: &[String]) -> Result<(), String> {
    match args {
        [cmd, path, name, value] if cmd == "setxattr" => set(path, name, value),
        [cmd, path, name] if cmd == "getxattr" => {
            println!("{}", get(path, name)?);
            Ok(())
        }
        [cmd, socket, file] if cmd == "notify" => notify(socket, file),
        _ => Err(USAGE.to_string()),
    }
}

/// Receives sd-notify datagrams until killed.
fn notify(socket: &str, file: &str) -> Result<(), String> {
    let _ = std::fs::remove_file(socket);
    let sock = UnixDatagram::bind(socket).map_err(|e| format!("cannot bind {socket}: {e}"))?;
    let mut out = OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)
        .map_err(|e| format!("cannot open {file}: {e}"))?;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let len = sock
            .recv(&mut buf)
            .map_err(|e| format!("cannot receive on {socket}: {e}"))?;
        let mut text = String::from_utf8_lossy(&buf[..len]).into_owned();
        if !text.ends_with('\n') {
            text.push('\n');
        }
        out.write_all(text.as_bytes())
            .map_err(|e| format!("cannot write {file}: {e}"))?;
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e == USAGE => {
            eprintln!("{e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("vm-helper: {e}");
            ExitCode::FAILURE
        }
    }
}
