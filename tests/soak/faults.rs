//! The faults, at random moments from the seeded generator, and the
//! daemon they are done to: its process, its configuration, its state
//! file. Each fault is checked as it is done (the daemon recovers, a path
//! is repaired, a run's CPUs come back); the sampler checks the rest.

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use nix::sys::signal::Signal;

use crate::Soak;
use crate::check;
use crate::pinctld::{Launch, Pinctld};
use crate::rng::Rng;
use crate::vm;
use crate::world::{self, Entry, World};

/// The kinds of fault, as the records name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// SIGKILL, then a restart.
    Kill,
    /// SIGHUP with a changed configuration that changes no pin.
    Reload,
    /// SIGKILL, the state file made corrupt, a restart.
    CorruptState,
    /// SIGKILL, the state file deleted, a restart.
    DeletedState,
    /// An empty required path (a QoS slice) removed: the watchdog makes
    /// it again.
    PathRemoved,
    /// Containers made and removed at once, while the daemon pins them.
    DeletedUnderWrite,
    /// A `pinctl run` client killed, waiting or running: its CPUs come back.
    RunKilled,
    /// A CPU other than the reserved ones taken offline, or the one taken
    /// brought back (`PINCTL_SOAK_HOTPLUG=1`, the VM bed only).
    Hotplug,
    /// `systemctl daemon-reload`, half the time after a drop-in changed a
    /// slice of the soak's (`PINCTL_SOAK_RELOADS=1`, the VM bed only).
    DaemonReload,
}

impl Kind {
    pub const ALL: [Kind; 9] = [
        Kind::Kill,
        Kind::Reload,
        Kind::CorruptState,
        Kind::DeletedState,
        Kind::PathRemoved,
        Kind::DeletedUnderWrite,
        Kind::RunKilled,
        Kind::Hotplug,
        Kind::DaemonReload,
    ];

    /// The faults as they are drawn: those that restart the daemon half
    /// as often as the others, so that a daemon lives long enough for its
    /// memory and descriptors to tell.
    const DRAWN: [Kind; 11] = [
        Kind::Kill,
        Kind::CorruptState,
        Kind::DeletedState,
        Kind::Reload,
        Kind::Reload,
        Kind::PathRemoved,
        Kind::PathRemoved,
        Kind::DeletedUnderWrite,
        Kind::DeletedUnderWrite,
        Kind::RunKilled,
        Kind::RunKilled,
    ];

    /// The record's column.
    pub fn column(self) -> &'static str {
        match self {
            Kind::Kill => "kills",
            Kind::Reload => "reloads",
            Kind::CorruptState => "corrupt_states",
            Kind::DeletedState => "deleted_states",
            Kind::PathRemoved => "paths_removed",
            Kind::DeletedUnderWrite => "deleted_under_write",
            Kind::RunKilled => "runs_killed",
            Kind::Hotplug => "hotplugs",
            Kind::DaemonReload => "daemon_reloads",
        }
    }
}

/// The failures the faults' own checks find.
pub const NOT_RECOVERED: &str = "NOT RECOVERED";
pub const NOT_REPAIRED: &str = "NOT REPAIRED";
pub const RUN_NOT_RELEASED: &str = "RUN NOT RELEASED";
pub const DAEMON_EXITED: &str = "DAEMON EXITED";

/// How long start-up may take (the first full reconcile, `READY=1`).
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a restarted daemon may take to have every pin back and the
/// shared pool off them.
const RECOVER_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a killed run's CPUs may stay held.
const RUN_RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// What can change in the configuration at a reload without changing who
/// is exclusive.
#[derive(Clone, Copy)]
pub struct Variant {
    pub log_level: &'static str,
    pub reconcile: &'static str,
    pub watchdog: &'static str,
    /// A `[[rule]]` that matches no cgroup.
    pub idle_rule: bool,
}

impl Variant {
    pub const FIRST: Variant = Variant {
        log_level: "info",
        reconcile: "10s",
        watchdog: "5s",
        idle_rule: false,
    };

    fn random(rng: &mut Rng) -> Variant {
        Variant {
            log_level: rng.pick(&["info", "warn"]),
            reconcile: rng.pick(&["10s", "7s"]),
            watchdog: rng.pick(&["5s", "4s"]),
            idle_rule: rng.chance(0.5),
        }
    }

    /// The longest watchdog interval of any variant.
    pub const WATCHDOG_MAX: Duration = Duration::from_secs(5);
}

/// The daemon: one `pinctld` at a time, each run's log kept apart.
pub struct Daemon {
    pub p: Option<Pinctld>,
    pub program: PathBuf,
    pub config: PathBuf,
    pub state: PathBuf,
    /// Where the notify sockets go.
    pub tmp: PathBuf,
    /// Where the logs go: `pinctld-NN.log`, one per start.
    pub logs: PathBuf,
    pub mutant: bool,
    pub starts: usize,
}

impl Daemon {
    /// Starts pinctld and waits for `READY=1`; returns when it was started.
    pub fn start(&mut self) -> Result<Instant> {
        assert!(self.p.is_none(), "pinctld is running already");
        self.starts += 1;
        let launch = Launch {
            env: match self.mutant {
                true => vec![("PINCTL_TEST_FORGET_RELEASE".into(), "1".into())],
                false => Vec::new(),
            },
            program: Some(self.program.clone()),
            die_with_parent: true,
            ..Launch::default()
        };
        let started = Instant::now();
        let mut p = Pinctld::spawn(
            &self.config,
            &self.log(),
            &self.tmp.join(format!("notify-{}.sock", self.starts)),
            &launch,
        );
        let ready = p.wait_ready(READY_TIMEOUT);
        self.p = Some(p);
        if let Err(e) = ready {
            bail!("{e}; {}", self.tail());
        }
        Ok(started)
    }

    /// The log of the daemon started last.
    pub fn log(&self) -> PathBuf {
        self.logs.join(format!("pinctld-{:02}.log", self.starts))
    }

    /// The last lines of its log.
    pub fn tail(&self) -> String {
        let text = fs::read_to_string(self.log()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        format!(
            "the end of {}:\n{}",
            self.log().display(),
            lines[lines.len().saturating_sub(20)..].join("\n")
        )
    }

    pub fn pid(&self) -> Option<u32> {
        self.p.as_ref().map(Pinctld::pid)
    }

    /// SIGKILL, as a crash or the OOM killer would.
    pub fn kill(&mut self) {
        if let Some(mut p) = self.p.take() {
            p.kill();
        }
    }

    /// An error when the daemon has exited.
    pub fn check_alive(&mut self) -> Result<(), String> {
        let Some(p) = self.p.as_mut() else {
            return Ok(());
        };
        match p.exited() {
            Some(status) => Err(format!("pinctld exited: {status}; {}", self.tail())),
            None => Ok(()),
        }
    }
}

/// Writes the daemon's configuration.
pub fn write_config(soak: &Soak, daemon: &Daemon, v: Variant) -> Result<()> {
    let top = &soak.top.name;
    let tmp = daemon.tmp.display();
    let idle_rule = match v.idle_rule {
        true => format!("\n[[rule]]\nmatch = \"{top}/no-such-cgroup/**\"\ncpus = 1\n"),
        false => String::new(),
    };
    // With systemd's own units, pinctld talks to it as the shipped
    // configuration has it.
    let bus = match soak.top.units {
        Some(_) => vm::SYSTEM_BUS,
        None => "",
    };
    let text = format!(
        r#"# Written by tests/soak (seed {seed}).
cgroup_root = "{mount}"
sysfs_root = "/sys"
proc_root = "/proc"
state_file = "{state}"
socket = "{tmp}/pinctl.sock"
reserved_cpus = "{reserved}"
reconcile_interval = "{reconcile}"
watchdog_interval = "{watchdog}"
repair_cooldown = "1s"
log_level = "{level}"
managed = ["{top}/kubepods", "{kubepods_slice}"]
shared_cgroups = ["{top}/system.slice"]
# Only the soak's own bundles, never the host's containers.
bundle_dirs = ["{tmp}/bundles"]
cdi_spec_dirs = []
systemd_bus = "{bus}"
kubelet_cpu_manager_state = ""
power_originals = "{tmp}/power.json"
housekeeping_originals = "{tmp}/housekeeping.json"

[[rule]]
match = "{top}/kubepods/burstable/pod*/{prefix}*"
cpus = 1

[[rule]]
match = "{burstable}/*/cri-containerd-{prefix}*.scope"
cpus = 1
{idle_rule}
[run]
enabled = true
socket = "{tmp}/run.sock"
slice = "{run_slice}"
"#,
        seed = soak.seed,
        mount = soak.top.hier.mount.display(),
        state = daemon.state.display(),
        reserved = soak.reserved,
        reconcile = v.reconcile,
        watchdog = v.watchdog,
        level = v.log_level,
        prefix = world::RULE_PREFIX,
        kubepods_slice = soak.top.kubepods_slice(),
        burstable = soak.top.burstable_slice(),
        run_slice = soak.top.run_slice(),
    );
    // Whole or not at all: a reload may read it at any moment.
    let next = daemon.config.with_extension("next");
    fs::write(&next, text).context("cannot write the daemon's configuration")?;
    fs::rename(&next, &daemon.config).context("cannot write the daemon's configuration")
}

/// The faults of a run, and what they measured.
pub struct Faults<'a> {
    pub soak: &'a Soak,
    pub daemon: Daemon,
    rng: Rng,
    pub counts: BTreeMap<Kind, u64>,
    /// From each restart after a SIGKILL until recovered.
    pub recoveries: Vec<Duration>,
    runs: u64,
    /// Containers made and removed at once.
    world: World<'a>,
    /// The faults drawn from: [`Kind::DRAWN`] and those asked for.
    drawn: Vec<Kind>,
    /// The CPU the soak took offline, if one is.
    offline: Option<u32>,
}

impl Drop for Faults<'_> {
    fn drop(&mut self) {
        if let Some(cpu) = self.offline.take()
            && let Err(e) = vm::set_online(cpu, true)
        {
            eprintln!("soak: CPU {cpu} is still offline: {e:#}");
        }
    }
}

impl<'a> Faults<'a> {
    pub fn new(soak: &'a Soak, daemon: Daemon, rng: Rng, world: World<'a>) -> Self {
        let mut drawn = Kind::DRAWN.to_vec();
        if soak.hotplug {
            drawn.extend([Kind::Hotplug; 2]);
        }
        if soak.top.units.is_some() {
            drawn.extend([Kind::DaemonReload; 2]);
        }
        Faults {
            drawn,
            offline: None,
            soak,
            daemon,
            rng,
            counts: BTreeMap::new(),
            recoveries: Vec::new(),
            runs: 0,
            world,
        }
    }

    /// How long to wait before the next fault.
    pub fn gap(&mut self) -> Duration {
        self.rng
            .between(Duration::from_millis(1500), Duration::from_millis(6000))
    }

    /// Does one fault, at random, and checks what it must.
    pub fn one(&mut self) -> Result<()> {
        let kind = self.rng.pick(&self.drawn);
        *self.counts.entry(kind).or_default() += 1;
        self.soak.set_last_fault(&format!("{kind:?}"));
        match kind {
            Kind::Kill => self.restart(|_| Ok(())),
            Kind::CorruptState => {
                let cut = self.rng.next();
                self.restart(move |state| {
                    let text = fs::read(state).unwrap_or_default();
                    let mut bad = text[..(cut as usize % (text.len() + 1))].to_vec();
                    bad.extend_from_slice(b"\x00{not json");
                    fs::write(state, bad).context("cannot corrupt the state file")
                })
            }
            Kind::DeletedState => self.restart(|state| match fs::remove_file(state) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
                _ => Ok(()),
            }),
            Kind::Reload => self.reload(),
            Kind::PathRemoved => self.remove_path(),
            Kind::DeletedUnderWrite => self.delete_under_write(),
            Kind::RunKilled => self.kill_run(),
            Kind::Hotplug => self.hotplug(),
            Kind::DaemonReload => self.daemon_reload(),
        }?;
        if let Err(e) = self.daemon.check_alive() {
            self.soak.fail(DAEMON_EXITED, e);
        }
        Ok(())
    }

    /// SIGKILL; `meanwhile` with the daemon down (given the state file);
    /// a restart. The recovery is timed from the restart until `READY=1`
    /// and every workload pinned before the kill on its CPUs again, the
    /// shared pool off them.
    fn restart(&mut self, meanwhile: impl FnOnce(&std::path::Path) -> Result<()>) -> Result<()> {
        let before = self.soak.view.lock().unwrap().pinned.clone();
        self.soak.set_ready(false);
        let killed = Instant::now();
        self.daemon.kill();
        meanwhile(&self.daemon.state)?;
        let started = self.daemon.start()?;
        self.soak.set_ready(true);
        let deadline = started + RECOVER_TIMEOUT;
        loop {
            match check::recovered(self.soak, &before, killed) {
                Ok(()) => break,
                Err(e) if Instant::now() > deadline => {
                    self.soak.fail(
                        NOT_RECOVERED,
                        format!("{RECOVER_TIMEOUT:?} after a restart: {e}"),
                    );
                    return Ok(());
                }
                // Not too often: the sampler needs the list's lock too.
                Err(_) => sleep(Duration::from_millis(20)),
            }
        }
        self.recoveries.push(started.elapsed());
        Ok(())
    }

    /// SIGHUP with another configuration that changes no pin.
    fn reload(&mut self) -> Result<()> {
        let v = Variant::random(&mut self.rng);
        write_config(self.soak, &self.daemon, v)?;
        if let Some(p) = &self.daemon.p {
            p.signal(Signal::SIGHUP);
        }
        Ok(())
    }

    /// Removes an empty QoS slice (BestEffort: the soak makes no such pod)
    /// of one driver, in one hierarchy; the watchdog must make it again:
    /// in the cpuset tree at once, elsewhere within its interval. On v1 a
    /// repaired cpuset must be joinable.
    fn remove_path(&mut self) -> Result<()> {
        let soak = self.soak;
        let hier = &soak.top.hier;
        let qos = [
            "kubepods/besteffort",
            "kubepods.slice/kubepods-besteffort.slice",
        ];
        let mut rel = soak.top.rel(self.rng.pick(&qos));
        if soak.top.units.is_some() {
            // systemd's QoS slices are systemd's to make.
            rel = soak.top.rel(qos[0]);
        }
        let roots = hier.roots();
        let root = self.rng.pick(&roots);
        let dir = root.join(&rel);
        soak.set_last_fault(&format!("PathRemoved {}", dir.display()));
        if let Err(e) = fs::remove_dir(&dir) {
            // Being repaired from the last time, or busy: not this time.
            eprintln!("soak: cannot remove {}: {e}", dir.display());
            return Ok(());
        }
        let limit = 2 * Variant::WATCHDOG_MAX + Duration::from_secs(5);
        let removed = Instant::now();
        while !world::joinable(hier, root, &rel) {
            if removed.elapsed() > limit {
                soak.fail(
                    NOT_REPAIRED,
                    format!(
                        "{} still missing {limit:?} after its removal",
                        dir.display()
                    ),
                );
                return Ok(());
            }
            sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Exclusive containers made and removed at once, as a runtime that
    /// fails right after it made one: the daemon is pinning them.
    fn delete_under_write(&mut self) -> Result<()> {
        for _ in 0..3 {
            let kind = self.world.exclusive_kind();
            let c = self.world.make(u64::MAX, kind, false)?;
            self.world.unmake(&c)?;
        }
        Ok(())
    }

    /// Starts `pinctl run -n 1 --wait 60s -- sleep`, kills it while it
    /// waits or runs, and checks that its cgroup (and so its CPU) is gone
    /// soon after.
    fn kill_run(&mut self) -> Result<()> {
        let soak = self.soak;
        self.runs += 1;
        let name = format!("soak-{}", self.runs);
        let n = (1 << 40) + self.runs;
        let scope = format!("{}/run-{name}.scope", soak.top.run_slice());
        let entry = Entry::new(&soak.top, &scope, true, false);
        soak.live.lock().unwrap().entries.insert(n, entry);
        let mut client = self.run_client(&name)?;
        sleep(
            self.rng
                .between(Duration::from_millis(200), Duration::from_millis(4000)),
        );
        soak.live.lock().unwrap().entries.remove(&n);
        world::kill(&mut client);
        let killed = Instant::now();
        let dir = soak.top.cpuset(&scope);
        while dir.exists() {
            if killed.elapsed() > RUN_RELEASE_TIMEOUT {
                soak.fail(
                    RUN_NOT_RELEASED,
                    format!(
                        "{} still there {RUN_RELEASE_TIMEOUT:?} after its client was killed",
                        dir.display()
                    ),
                );
                break;
            }
            sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Takes a random CPU but the reserved ones offline (while another
    /// stays online to hand out), or brings the one taken back. The
    /// workloads on it are moved by the daemon: the sampler excuses that
    /// ([`crate::Soak::hotplugged`]).
    fn hotplug(&mut self) -> Result<()> {
        let soak = self.soak;
        if let Some(cpu) = self.offline.take() {
            soak.set_last_fault(&format!("Hotplug: CPU {cpu} online"));
            soak.hotplugged(cpu, true);
            return vm::set_online(cpu, true);
        }
        let online = vm::online()?;
        let free: Vec<u32> = online
            .iter()
            .filter(|c| !soak.reserved.contains(*c))
            .collect();
        if free.len() < 2 {
            return Ok(());
        }
        let cpu = free[self.rng.below(free.len())];
        soak.set_last_fault(&format!("Hotplug: CPU {cpu} offline"));
        // Before the write: whatever the sampler sees after it is excused.
        soak.hotplugged(cpu, false);
        vm::set_online(cpu, false)?;
        self.offline = Some(cpu);
        Ok(())
    }

    /// `systemctl daemon-reload`: systemd applies again the settings of its
    /// units that changed, so half the time (not with
    /// `PINCTL_SOAK_RELOADS=plain`) a drop-in first changes the
    /// `CPUWeight=` of a slice of the soak's (its kubepods root, its
    /// burstable QoS slice, or a live pod's).
    fn daemon_reload(&mut self) -> Result<()> {
        let soak = self.soak;
        let units = soak.top.units.as_ref().expect("only with systemd's units");
        let mut what = "daemon-reload".to_string();
        // Drawn either way: a seed makes the same choices with `plain`.
        let drop_in = self.rng.chance(0.5);
        if drop_in && soak.drop_ins {
            let pods: Vec<String> = (soak.live.lock().unwrap().entries.values())
                .filter(|e| e.name.starts_with(&units.prefix))
                .filter_map(|e| e.name.rsplit('/').nth(1).map(str::to_string))
                .filter(|p| p.ends_with(".slice"))
                .collect();
            let unit = match self.rng.below(3) {
                0 => format!("{}-kubepods.slice", units.prefix),
                1 => format!("{}-kubepods-burstable.slice", units.prefix),
                _ if pods.is_empty() => format!("{}-kubepods.slice", units.prefix),
                _ => pods[self.rng.below(pods.len())].clone(),
            };
            let weight = 50 + self.rng.below(100) as u64;
            units.drop_in(&unit, weight)?;
            what = format!("daemon-reload after a drop-in CPUWeight={weight} on {unit}");
        }
        soak.set_last_fault(&format!("DaemonReload ({what})"));
        vm::run("systemctl", &["daemon-reload"])
    }

    fn run_client(&self, name: &str) -> Result<Child> {
        let mut cmd = Command::new(&self.soak.pinctl);
        cmd.args([
            "run", "-n", "1", "--name", name, "--wait", "60s", "--socket",
        ])
        .arg(self.daemon.tmp.join("run.sock"))
        .args(["--", "sleep", "100000"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        world::die_with_parent(&mut cmd);
        cmd.spawn().context("cannot start pinctl run")
    }
}
