//! What the soak does to the whole machine, and so only in the VM bed's
//! guest (`tests/vm/debian/opt/95-soak.sh`): CPU hot-plug
//! (`PINCTL_SOAK_HOTPLUG=1`) and systemd's own units, started and reloaded
//! (`PINCTL_SOAK_RELOADS=1`). A host's CPUs and its systemd are never
//! touched: the knobs are refused unless the kernel command line has the
//! bed's `pinctl.topo=`.
//!
//! Systemd's units are the soak's own: the kubelet's layout under a
//! `--cgroup-root` of its own, `pinctl_soak_<pid>.slice` (so
//! `pinctl_soak_<pid>-kubepods.slice` and below, which pinctld reads as
//! kubepods), each container a transient scope started as runc's systemd
//! driver starts it (`Delegate=yes`, its CPU limit as `CPUQuota=`), each
//! pod a slice, all stopped at the end.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail, ensure};
use pinctl::CpuSet;

/// Where the kernel command line says the VM bed booted us.
const GUEST_MARK: &str = "pinctl.topo=";
/// The system bus, as the shipped configuration names it.
pub const SYSTEM_BUS: &str = "/run/dbus/system_bus_socket";
/// Where the soak's drop-ins go (runtime: gone at the next boot).
const DROP_INS: &str = "/run/systemd/system";

/// Refuses `knob` outside the VM bed's guest, and where systemd is not
/// PID 1 when `systemd`.
pub fn require_guest(knob: &str, systemd: bool) -> Result<()> {
    let cmdline = fs::read_to_string("/proc/cmdline").unwrap_or_default();
    ensure!(
        cmdline
            .split_whitespace()
            .any(|a| a.starts_with(GUEST_MARK)),
        "{knob}=1 changes the whole machine (a CPU taken offline, systemd's units reloaded): \
         only in the VM bed's guest, whose kernel command line has {GUEST_MARK} \
         (tests/vm/run, PINCTL_VM_DEBIAN_SCENARIOS=install,soak)"
    );
    if systemd {
        ensure!(
            Path::new("/run/systemd/system").is_dir() && Path::new(SYSTEM_BUS).exists(),
            "{knob}=1 needs systemd as PID 1 and the system bus at {SYSTEM_BUS}"
        );
    }
    Ok(())
}

/// Runs `program args`, quietly; an error with its output when it fails.
pub fn run(program: &str, args: &[&str]) -> Result<()> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {program}"))?;
    if !out.status.success() {
        bail!(
            "{program} {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// The soak's systemd tree: its slice prefix, `pinctl_soak_<pid>`.
pub struct Units {
    pub prefix: String,
}

impl Units {
    /// The tree of this process; what killed runs left is stopped first.
    pub fn new() -> Units {
        // Stops every loaded one: ours is not made yet.
        let _ = run("systemctl", &["stop", "pinctl_soak_*.slice"]);
        Units {
            prefix: format!("pinctl_soak_{}", std::process::id()),
        }
    }

    /// The kubepods root, relative to the mount.
    pub fn kubepods(&self) -> String {
        let p = &self.prefix;
        format!("{p}.slice/{p}-kubepods.slice")
    }

    /// The burstable QoS slice, relative to the mount.
    pub fn burstable(&self) -> String {
        format!(
            "{}/{}-kubepods-burstable.slice",
            self.kubepods(),
            self.prefix
        )
    }

    /// The pod slice unit of pod `uid_` (underscores) and its cgroup.
    pub fn pod(&self, uid_: &str, guaranteed: bool) -> (String, String) {
        let p = &self.prefix;
        match guaranteed {
            true => {
                let unit = format!("{p}-kubepods-pod{uid_}.slice");
                (unit.clone(), format!("{}/{unit}", self.kubepods()))
            }
            false => {
                let unit = format!("{p}-kubepods-burstable-pod{uid_}.slice");
                (unit.clone(), format!("{}/{unit}", self.burstable()))
            }
        }
    }

    /// `pinctl run`'s slice, relative to the mount (systemd makes its
    /// scopes there).
    pub fn run_slice(&self) -> String {
        let p = &self.prefix;
        format!("{p}.slice/{p}-run.slice")
    }

    /// The container's scope around `sleep`, as runc's systemd driver starts
    /// it: `systemd-run --scope` returns the command to run (it execs
    /// `sleep` once systemd has moved it into the scope).
    pub fn scope_command(&self, pod_unit: &str, id: &str, quota_us: Option<u64>) -> Command {
        let mut cmd = Command::new("systemd-run");
        cmd.args(["--scope", "--quiet", "--collect", "-p", "Delegate=yes"])
            .arg(format!("--unit=cri-containerd-{id}.scope"))
            .arg(format!("--slice={pod_unit}"));
        if let Some(q) = quota_us {
            cmd.args(["-p", &format!("CPUQuota={}%", q / 1000)]);
        }
        cmd.args(["--", "sleep", "100000"]);
        cmd
    }

    /// A drop-in that sets `unit`'s `CPUWeight=` (a change for the next
    /// `daemon-reload` to apply, as a package's unit files are).
    pub fn drop_in(&self, unit: &str, weight: u64) -> Result<()> {
        let dir = PathBuf::from(DROP_INS).join(format!("{unit}.d"));
        fs::create_dir_all(&dir)?;
        let kind = unit.rsplit('.').next().unwrap_or("slice");
        let section = match kind {
            "scope" => "Scope",
            _ => "Slice",
        };
        fs::write(
            dir.join("50-pinctl-soak.conf"),
            format!("# tests/soak\n[{section}]\nCPUWeight={weight}\n"),
        )
        .with_context(|| format!("cannot write a drop-in of {unit}"))
    }
}

impl Drop for Units {
    fn drop(&mut self) {
        let _ = run("systemctl", &["stop", &format!("{}.slice", self.prefix)]);
        let mut dropped = false;
        if let Ok(entries) = fs::read_dir(DROP_INS) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.starts_with(&self.prefix) && name.ends_with(".d") {
                    let _ = fs::remove_dir_all(e.path());
                    dropped = true;
                }
            }
        }
        if dropped {
            let _ = run("systemctl", &["daemon-reload"]);
        }
    }
}

/// The online CPUs now.
pub fn online() -> Result<CpuSet> {
    Ok(fs::read_to_string("/sys/devices/system/cpu/online")?
        .trim()
        .parse()?)
}

/// Takes CPU `cpu` offline or brings it back.
pub fn set_online(cpu: u32, on: bool) -> Result<()> {
    let file = format!("/sys/devices/system/cpu/cpu{cpu}/online");
    fs::write(&file, if on { "1" } else { "0" })
        .with_context(|| format!("cannot write {} to {file}", on as u8))
}
