//! The tracing instances of one measurement, under a tracefs root passed
//! in: made, set up, switched on and off, read and removed.
//!
//! - Two instances of our own, so the global trace and anyone else's are
//!   left alone (KERNEL-NOTES, "Noise on an exclusive CPU"):
//!   `pinctl-noise-PID` traces `sched_switch` and `sched_process_fork` on
//!   the measured CPUs only (`tracing_cpumask`);
//!   `pinctl-noise-PID-moves` traces `cgroup_attach_task` on every CPU
//!   (a task moved into a workload's cgroup, as `kubectl exec` does, is
//!   moved from a shared CPU), and may be missing.
//! - Control files go through [`Fs`]; `trace_pipe` is streamed with
//!   non-blocking reads of the file itself, so the ring buffer never has to
//!   hold a whole measurement.
//! - An [`Instance`] is removed when dropped: on an error, a panic, or after
//!   Ctrl-C. One left by a process that died (`pinctl-noise-PID` whose PID
//!   is gone) is removed by the next measurement ([`remove_stale`]).

use std::fs::File;
use std::io::{self, Read as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::cpuset::CpuSet;
use crate::io::Fs;

use super::NoiseError;
use super::parse::{TraceEvent, parse_trace_line};

/// The start of our instances' names; the process id follows.
pub const PREFIX: &str = "pinctl-noise-";
/// The end of the second instance's name.
const MOVES: &str = "-moves";
/// The buffer of each CPU not measured, and of the moves instance, in KiB:
/// a new instance has the default size on every CPU until told.
const SMALL_KB: u32 = 64;
/// The buffer of each measured CPU, in KiB: at least a second of a busy
/// CPU's switches between two reads of the pipe.
const MEASURED_KB: u32 = 4096;
/// How long the reader sleeps when the pipes are empty.
const POLL: Duration = Duration::from_millis(50);
/// The longest line kept while waiting for its end; a longer one is
/// dropped (no trace line is near it).
const MAX_LINE: usize = 64 * 1024;

/// One tracing instance directory, removed when dropped.
pub(super) struct Instance<'a> {
    fs: &'a dyn Fs,
    pub(super) dir: PathBuf,
    removed: bool,
}

impl<'a> Instance<'a> {
    /// Makes instance `dir`. One of that name already there was left by an
    /// earlier process with this process's id: it is removed first.
    pub(super) fn create(fs: &'a dyn Fs, dir: PathBuf) -> Result<Self, NoiseError> {
        let made = match fs.mkdir(&dir) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                fs.rmdir(&dir).and_then(|()| fs.mkdir(&dir))
            }
            other => other,
        };
        made.map_err(|source| NoiseError::create(&dir, source))?;
        Ok(Instance {
            fs,
            dir,
            removed: false,
        })
    }

    /// Writes `data` to the instance's file `rel`.
    pub(super) fn write(&self, rel: &str, data: &str) -> Result<(), NoiseError> {
        let path = self.dir.join(rel);
        self.fs
            .write(&path, data)
            .map_err(|source| NoiseError::Write {
                path,
                data: data.to_string(),
                source,
            })
    }

    /// Reads the instance's file `rel`.
    pub(super) fn read(&self, rel: &str) -> Result<String, NoiseError> {
        let path = self.dir.join(rel);
        self.fs
            .read(&path)
            .map_err(|source| NoiseError::Read { path, source })
    }

    /// Sets up the main instance: stopped, small buffers but on `cpus`,
    /// only `cpus` traced, `sched_switch` to anything but the idle task,
    /// and forks (optional: an error is returned as a note).
    pub(super) fn set_up_switches(&self, cpus: &CpuSet) -> Result<Vec<String>, NoiseError> {
        let mut notes = Vec::new();
        self.write("tracing_on", "0")?;
        self.write("buffer_size_kb", &SMALL_KB.to_string())?;
        let per_cpu: Result<(), NoiseError> = cpus.iter().try_for_each(|cpu| {
            self.write(
                &format!("per_cpu/cpu{cpu}/buffer_size_kb"),
                &MEASURED_KB.to_string(),
            )
        });
        if per_cpu.is_err() {
            // No per-CPU sizes (or a CPU gone): every CPU the same.
            self.write("buffer_size_kb", &MEASURED_KB.to_string())?;
        }
        self.write("tracing_cpumask", &cpus.to_mask())?;
        // Switches to the idle task are half of an idle CPU's: not needed.
        let _ = self.write("events/sched/sched_switch/filter", "next_pid != 0");
        self.write("events/sched/sched_switch/enable", "1")?;
        if let Err(e) = self.write("events/sched/sched_process_fork/enable", "1") {
            notes.push(format!(
                "{}; a task the workload started and that ended before it could be looked up counts as a neighbour",
                crate::io::chain(&e)
            ));
        }
        Ok(notes)
    }

    /// Sets up the moves instance: stopped, small buffers, every CPU,
    /// `cgroup_attach_task`.
    pub(super) fn set_up_moves(&self) -> Result<(), NoiseError> {
        self.write("tracing_on", "0")?;
        self.write("buffer_size_kb", &SMALL_KB.to_string())?;
        self.write("events/cgroup/cgroup_attach_task/enable", "1")
    }

    /// Opens the instance's `trace_pipe` for non-blocking reads.
    pub(super) fn pipe(&self) -> Result<Pipe, NoiseError> {
        let path = self.dir.join("trace_pipe");
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(&path)
            .map_err(|source| NoiseError::Read {
                path: path.clone(),
                source,
            })?;
        Ok(Pipe {
            path,
            file,
            partial: Vec::new(),
        })
    }

    /// Removes the instance, saying why not.
    pub(super) fn remove(mut self) -> Result<(), NoiseError> {
        self.removed = true;
        self.fs
            .rmdir(&self.dir)
            .map_err(|source| NoiseError::Remove {
                path: self.dir.clone(),
                source,
            })
    }
}

impl Drop for Instance<'_> {
    fn drop(&mut self) {
        if !self.removed {
            let _ = self.fs.rmdir(&self.dir);
        }
    }
}

/// The process whose instance `name` is, if it is one of ours.
fn owner(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(PREFIX)?;
    let rest = rest.strip_suffix(MOVES).unwrap_or(rest);
    if rest.is_empty() || !rest.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    rest.parse().ok()
}

/// The names of this process's two instances.
pub(super) fn names(pid: u32) -> (String, String) {
    (format!("{PREFIX}{pid}"), format!("{PREFIX}{pid}{MOVES}"))
}

/// Removes the instances under `instances` left by processes that are gone
/// (no `/proc/PID` under `proc_root`); returns what was done, as notes.
pub(super) fn remove_stale(fs: &dyn Fs, instances: &Path, proc_root: &Path) -> Vec<String> {
    let mut notes = Vec::new();
    let entries = match fs.read_dir(instances) {
        Ok(e) => e,
        Err(e) => {
            notes.push(format!("cannot list {}: {e}", instances.display()));
            return notes;
        }
    };
    let me = std::process::id();
    for entry in entries {
        let Some(pid) = owner(&entry.name) else {
            continue;
        };
        if pid == me || fs.exists(&proc_root.join(pid.to_string())).unwrap_or(true) {
            continue;
        }
        let dir = instances.join(&entry.name);
        match fs.rmdir(&dir) {
            Ok(()) => notes.push(format!(
                "removed {}, left by process {pid}, which is gone",
                dir.display()
            )),
            Err(e) => notes.push(format!(
                "cannot remove {}, left by process {pid}: {e}",
                dir.display()
            )),
        }
    }
    notes
}

/// An instance's `trace_pipe`, open non-blocking, and the end of a line
/// not read whole yet.
pub(super) struct Pipe {
    path: PathBuf,
    file: File,
    partial: Vec<u8>,
}

impl Pipe {
    /// Reads what the pipe has now, giving `sink` each whole line's event;
    /// whether anything was read. Empty (`EAGAIN`, or the end of a plain
    /// file) is not an error.
    fn drain(&mut self, sink: &mut dyn FnMut(TraceEvent)) -> Result<bool, NoiseError> {
        let mut buf = vec![0u8; 64 * 1024];
        let mut any = false;
        loop {
            match self.file.read(&mut buf) {
                Ok(0) => return Ok(any),
                Ok(n) => {
                    any = true;
                    self.partial.extend_from_slice(&buf[..n]);
                    let mut start = 0;
                    while let Some(end) = self.partial[start..].iter().position(|&b| b == b'\n') {
                        let line = String::from_utf8_lossy(&self.partial[start..start + end]);
                        if let Some(event) = parse_trace_line(&line) {
                            sink(event);
                        }
                        start += end + 1;
                    }
                    self.partial.drain(..start);
                    if self.partial.len() > MAX_LINE {
                        self.partial.clear();
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(any),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(source) => {
                    return Err(NoiseError::Read {
                        path: self.path.clone(),
                        source,
                    });
                }
            }
        }
    }

    /// The last line, when the trace did not end with a newline.
    fn finish(&mut self, sink: &mut dyn FnMut(TraceEvent)) {
        let line = String::from_utf8_lossy(&self.partial);
        if let Some(event) = parse_trace_line(&line) {
            sink(event);
        }
        self.partial.clear();
    }
}

/// Streams `pipes` into `sink` until `stop` is set and a pass over them
/// finds nothing more: tracing is off by then, so that is everything.
pub(super) fn stream(
    pipes: &mut [Pipe],
    stop: &AtomicBool,
    sink: &mut dyn FnMut(TraceEvent),
) -> Result<(), NoiseError> {
    loop {
        // Read before the pass: a pass begun after the stop sees all.
        let stopping = stop.load(Ordering::Acquire);
        let mut any = false;
        for pipe in pipes.iter_mut() {
            any |= pipe.drain(sink)?;
        }
        if stopping && !any {
            break;
        }
        if !any {
            std::thread::sleep(POLL);
        }
    }
    for pipe in pipes.iter_mut() {
        pipe.finish(sink);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_instances_and_their_processes() {
        assert_eq!(owner("pinctl-noise-123"), Some(123));
        assert_eq!(owner("pinctl-noise-123-moves"), Some(123));
        for other in [
            "pinctl-noise-",
            "pinctl-noise-x",
            "pinctl-noise-1-other",
            "mine",
            "pinctl-noise-99999999999",
        ] {
            assert_eq!(owner(other), None, "{other}");
        }
        let (a, b) = names(7);
        assert_eq!((owner(&a), owner(&b)), (Some(7), Some(7)));
    }

    /// A plain file stands for the pipe: it is read to its end, lines
    /// split across reads are whole, a last line without a newline counts.
    #[test]
    fn a_pipe_is_streamed_to_its_end_after_the_stop() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trace_pipe");
        let line = "a-1 [001] d..2. 1.0: sched_switch: prev_comm=a prev_pid=1 prev_prio=120 prev_state=S ==> next_comm=b next_pid=2 next_prio=120";
        let mut text = String::new();
        for _ in 0..3000 {
            text.push_str(line);
            text.push('\n');
        }
        text.push_str(line);
        std::fs::write(&path, &text).unwrap();
        let file = File::open(&path).unwrap();
        let mut pipes = [Pipe {
            path,
            file,
            partial: Vec::new(),
        }];
        let stop = AtomicBool::new(true);
        let mut n = 0;
        stream(&mut pipes, &stop, &mut |_| n += 1).unwrap();
        assert_eq!(n, 3001);
    }
}
