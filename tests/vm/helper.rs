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
//! - `vm-helper affinity PID KEEP AVOID READY STOP`: read the
//!   `Cpus_allowed_list` of process `PID` every 10 ms until the file `STOP`
//!   exists (or 120 s passed), write `READY` after the first reading, and
//!   print each distinct reading (`seen LIST N FIRST_MS LAST_MS`), every
//!   reading without a CPU of `KEEP` or with one of `AVOID` (CPU lists;
//!   `-` for none), then a summary. Exit 1 if it saw one, or if the process
//!   went away. The Debian scenarios sample a container during a resize
//!   with it: the same loop in Python took most of an emulated CPU.
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

const USAGE: &str = "usage: vm-helper setxattr PATH NAME VALUE | getxattr PATH NAME | \
                     notify SOCKET FILE | affinity PID KEEP AVOID READY STOP";

fn run(args: &[String]) -> Result<(), String> {
    match args {
        [cmd, path, name, value] if cmd == "setxattr" => set(path, name, value),
        [cmd, path, name] if cmd == "getxattr" => {
            println!("{}", get(path, name)?);
            Ok(())
        }
        [cmd, socket, file] if cmd == "notify" => notify(socket, file),
        [cmd, pid, keep, avoid, ready, stop] if cmd == "affinity" => {
            affinity(pid, keep, avoid, ready, stop)
        }
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

/// A CPU list (`0-3,8`) as a sorted list; `-` or nothing is none.
fn cpulist(s: &str) -> Result<Vec<u32>, String> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty() && *p != "-") {
        let bad = || format!("not a CPU list: {s:?}");
        let (a, b): (u32, u32) = match part.split_once('-') {
            Some((a, b)) => (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?),
            None => {
                let c = part.parse().map_err(|_| bad())?;
                (c, c)
            }
        };
        if b < a || b - a > 65_536 {
            return Err(bad());
        }
        out.extend(a..=b);
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// A sorted list of CPUs in the kernel's list format.
fn fmt(cpus: &[u32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            cpus[i].to_string()
        } else {
            format!("{}-{}", cpus[i], cpus[j])
        });
        i = j + 1;
    }
    out.join(",")
}

/// Samples one process's affinity until told to stop (see the top).
fn affinity(pid: &str, keep: &str, avoid: &str, ready: &str, stop: &str) -> Result<(), String> {
    use std::time::{Duration, Instant};
    let (keep_set, avoid_set) = (cpulist(keep)?, cpulist(avoid)?);
    let path = format!("/proc/{pid}/status");
    // Each distinct reading: (reading, count, first ms, last ms).
    let mut seen: Vec<(String, u64, u128, u128)> = Vec::new();
    let (mut n, mut lost, mut on) = (0u64, 0u64, 0u64);
    let mut gone = None;
    let start = Instant::now();
    loop {
        let t = start.elapsed().as_millis();
        let got = match std::fs::read_to_string(&path) {
            Ok(text) => text
                .lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .unwrap_or("")
                .trim()
                .to_string(),
            Err(e) => {
                gone = Some(e.to_string());
                break;
            }
        };
        n += 1;
        match seen.iter_mut().find(|s| s.0 == got) {
            Some(s) => {
                s.1 += 1;
                s.3 = t;
            }
            None => seen.push((got.clone(), 1, t, t)),
        }
        let cpus = cpulist(&got)?;
        let missing: Vec<u32> = keep_set
            .iter()
            .copied()
            .filter(|c| !cpus.contains(c))
            .collect();
        if !missing.is_empty() {
            lost += 1;
            println!("lost {} at {t} ms (read {got})", fmt(&missing));
        }
        let extra: Vec<u32> = cpus
            .iter()
            .copied()
            .filter(|c| avoid_set.contains(c))
            .collect();
        if !extra.is_empty() {
            on += 1;
            println!("on {} at {t} ms (read {got})", fmt(&extra));
        }
        if n == 1 {
            std::fs::write(ready, format!("{pid}\n"))
                .map_err(|e| format!("cannot write {ready}: {e}"))?;
        }
        if std::path::Path::new(stop).exists() || start.elapsed() >= Duration::from_secs(120) {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let took = start.elapsed().as_secs_f64();
    for (got, count, first, last) in &seen {
        let shown = if got.is_empty() { "(empty)" } else { got };
        println!("seen {shown} {count} {first} {last}");
    }
    if let Some(why) = &gone {
        println!("process {pid} gone after {n} readings ({why})");
    }
    let name = |s: &str| {
        if s.is_empty() || s == "-" {
            "(none)".to_string()
        } else {
            s.to_string()
        }
    };
    println!(
        "{n} readings in {took:.2} s (one every {:.1} ms): {lost} without a CPU of {}, {on} on one of {}",
        took * 1000.0 / (n.max(2) - 1) as f64,
        name(keep),
        name(avoid)
    );
    if lost > 0 || on > 0 || gone.is_some() || n == 0 {
        return Err(format!(
            "{lost} readings lost a CPU, {on} were on one to avoid"
        ));
    }
    Ok(())
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
