//! The soak (issue #47): `pinctld` for a long time on this machine's REAL
//! cgroupfs, with churn and faults at random, the kernel's view checked
//! throughout.
//!
//! Every other reliability test is a short scenario. This one runs the
//! daemon for minutes or hours under what a node does to it (containers
//! made and removed, resized, the daemon killed and reloaded, its state
//! file lost, a kubepods path removed, `pinctl run` clients killed) and
//! reads, every 100 ms, where every workload may run.
//!
//! # Running it
//!
//! Off unless `PINCTL_SOAK=1`: a plain `cargo test` prints one line saying
//! it skipped and passes. With it, it needs root and a cpuset hierarchy and
//! fails clearly without them. Three minutes, as CI runs it:
//! `sudo PINCTL_SOAK=1 cargo test --test soak`. An hour:
//! `sudo PINCTL_SOAK=1 PINCTL_SOAK_SECS=3600 cargo test --release --test soak`.
//! In the VM bed, cgroup v2 under systemd (Debian 13), with CPU hot-plug and
//! daemon-reloads, 10 minutes:
//! `sudo PINCTL_VM_ONLY=debian/v2 PINCTL_VM_DEBIAN_SCENARIOS=install,soak tests/vm/run`
//! (`tests/vm/debian/opt/95-soak.sh`; `PINCTL_SOAK_SECS`, `_SEED` and
//! `_CONTAINERS` are passed on to the guest).
//!
//! | knob | default | what |
//! |---|---|---|
//! | `PINCTL_SOAK` | unset | `1` runs it |
//! | `PINCTL_SOAK_SECS` | 180 (60 for the mutant) | how long |
//! | `PINCTL_SOAK_SEED` | from the clock | the seed of every choice; printed at the start and in every failure |
//! | `PINCTL_SOAK_CONTAINERS` | 1000 | live containers |
//! | `PINCTL_SOAK_OUT` | `target/soak` | where the records and the daemon's logs go |
//! | `PINCTL_SOAK_CGROUP` | `/sys/fs/cgroup` | the cgroup mount: v1 when `cpuset/` and `cpu/` are below it, v2 when it has `cgroup.controllers` |
//! | `PINCTL_SOAK_PINCTLD`, `PINCTL_SOAK_PINCTL` | the debug binaries cargo built | other binaries (the VM bed's static ones) |
//! | `PINCTL_SOAK_MUTANT` | unset | `1`: the mutation check (below) |
//! | `PINCTL_SOAK_HOTPLUG` | unset | `1`: CPU hot-plug among the faults; the VM bed's guest only (below) |
//! | `PINCTL_SOAK_RELOADS` | unset | `1`: the systemd driver's containers are systemd's units, pinctld talks to systemd, and `systemctl daemon-reload` is among the faults, half the time after a drop-in changed a slice; `plain`: the reload alone; the VM bed's guest only (below) |
//! | `PINCTL_BENCH_MACHINE` | CPU model and host | the machine, in the records |
//!
//! A seed makes the same choices again (which container goes, which fault,
//! when); the daemon's and the kernel's timing are not replayed.
//!
//! # What it runs
//!
//! - Below a top cgroup of its own, `pinctl-soak-<pid>` in each hierarchy
//!   (removed at the end, and at the next run when a run was killed; the
//!   daemon manages only below it): the kubelet's layout in both drivers'
//!   names (`kubepods/burstable/pod<uid>/<id>`,
//!   `kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice/cri-containerd-<id>.scope`,
//!   and the Guaranteed pods' beside them), `system.slice` (the shared
//!   cgroup) and the daemon's `run.slice`.
//! - `PINCTL_SOAK_CONTAINERS` containers, one per pod, each with a `sleep`
//!   in it, made as runc makes them (`benches/support/cgroupfs.rs`). Most
//!   are Burstable, or Guaranteed with half a CPU: the shared pool. The
//!   others ask for one exclusive CPU, in turn by the kubelet rule (a
//!   Guaranteed pod, a quota of one CPU), the xattr `user.pinctl.cpus`, the
//!   annotation `pinctl.io/cpus` in their bundle, or a `[[rule]]` on their
//!   id. As many ask as twice the CPUs to hand out, plus two (at least 4):
//!   on a 2-CPU machine (CPU 0 reserved) one is pinned and the others wait.
//! - Churn, 4 a second: a container removed and another of its class made;
//!   one in three is of the exclusive class. Now and then a kubelet-rule
//!   container is resized in place, 1 CPU to 2 or back (a grow waits where
//!   no CPU is free, and keeps the CPU it has).
//! - A fault every 1.5 to 6 s (those that restart the daemon half as often
//!   as each other kind): SIGKILL and a restart; SIGHUP with another
//!   configuration that changes no pin (log level, intervals, a rule that
//!   matches nothing); SIGKILL with the state file made corrupt, or deleted,
//!   then a restart; an empty QoS slice removed (the watchdog must make it
//!   again, joinable); exclusive containers made and removed at once (the
//!   daemon is pinning them); a `pinctl run -n 1 --wait` client killed,
//!   waiting or running (its cgroup must go within 5 s). A restart's
//!   recovery is timed from the restart until `READY=1`, every workload
//!   pinned before the kill on its CPUs again and no shared one on them.
//!
//! # In the VM bed: hot-plug and systemd's reloads
//!
//! Two faults change the whole machine, so they run only in the VM bed's
//! guest (`vm.rs`: refused unless the kernel command line has the bed's
//! `pinctl.topo=`); a host's CPUs are never taken offline.
//!
//! - `PINCTL_SOAK_HOTPLUG=1`: a random CPU but the reserved one goes
//!   offline, and at a later hot-plug fault comes back (it is brought back
//!   at the end too). The daemon follows the online list at each part of
//!   its periodic reconcile and re-plans: a workload that held the CPU is
//!   moved, or waits. The soak notes each CPU it takes or brings back
//!   before it does, and LOST PIN excuses a pinned set that changed after
//!   one of its CPUs went offline, or that grew by CPUs that came back (on
//!   v2 the kernel gives a cgroup back the online CPUs its `cpuset.cpus`
//!   lists; KERNEL-NOTES, "CPU hot-plug"), within a second of its pin or
//!   later. OVERLAP and LEAK stand as they are: a CPU that comes back must
//!   not show two holders.
//! - `PINCTL_SOAK_RELOADS=1` (cgroup v2, systemd as PID 1): the systemd
//!   driver's containers are systemd's own units, below a cgroup root of
//!   the soak's (`pinctl_soak_<pid>.slice`, so
//!   `pinctl_soak_<pid>-kubepods.slice/...-kubepods-burstable.slice/...-pod<uid>.slice/cri-containerd-<id>.scope`,
//!   which pinctld reads as kubepods): each a transient scope that
//!   `systemd-run --scope -p Delegate=yes` starts around its `sleep` in its
//!   pod's slice, as runc's systemd driver does, its CPU limit as
//!   `CPUQuota=`, a resize as `systemctl set-property --runtime` of it; a
//!   removed container's pod slice is stopped. pinctld is given the system
//!   bus (`systemd_bus`, as the shipped configuration), so it tells
//!   systemd the slices' `AllowedCPUs=`, and `pinctl run` starts its
//!   scopes through systemd (in `pinctl_soak_<pid>-run.slice`). The fault:
//!   `systemctl daemon-reload`, half the time after a drop-in in
//!   `/run/systemd/system` changed the `CPUWeight=` of the soak's kubepods
//!   slice, its burstable slice or a live pod's (systemd 257 applies again
//!   only the units whose settings changed); `PINCTL_SOAK_RELOADS=plain`:
//!   the reload alone. The checks are the same: the
//!   pins must survive systemd's rewrite of its units' cgroups.
//!
//! # What it checks, and why so
//!
//! The sampler reads the effective set (v1 `cpuset.effective_cpus`, v2
//! `cpuset.cpus.effective`) of every live workload every 100 ms. A
//! workload *holds* its set when the set has no reserved CPU: the shared
//! pool always has them, so this tells an exclusive set from the pool on
//! the kernel's word alone, whatever the daemon believes. A holding set
//! that has not changed for 1 s is *pinned*.
//!
//! - (a) OVERLAP: two workloads hold one CPU at the same sample. No grace:
//!   the daemon gives a CPU only once its holder is gone (removed from the
//!   list before it is removed from the tree), so no legitimate transition
//!   shows two holders.
//! - (b) LOST PIN: a pinned workload later has another set, but the soak
//!   removed it or resized it. After a resize only a holding set within or
//!   around the pinned one is allowed (a grow keeps the CPUs, a shrink keeps
//!   the first ones; a grow that had to wait may come any time later).
//!   Waiting a second before a set counts as pinned keeps out the moments
//!   of a new pin (a new v1 container starts with its parent's CPUs; the
//!   daemon may write over the soak's copy of them and revert it).
//! - (c) LEAK: a workload on the shared pool still overlaps a pinned
//!   workload's CPUs after 2 s counted while the daemon is up and ready. A
//!   container made while the daemon is down has every CPU until the
//!   restarted daemon confines it, and the shared pool follows a new pin
//!   only once the tree is quiet (at most 20 ms of churn, then chunks of
//!   writes): a shorter grace would count the daemon's normal latency.
//!
//! A sample reads the workloads one after the other, not at one instant.
//! So a failure is read again at once and stands only when the kernel
//! still shows it; and the soak takes a workload out of the list (under
//! the lock the sampler holds while it reads) before it removes it. The
//! checks see only what the kernel shows: a workload the daemon fails to
//! pin shows as waiting, which is no failure here (on 2 CPUs most
//! exclusive workloads wait).
//!
//! The faults' own checks: NOT RECOVERED (30 s after a restart),
//! NOT REPAIRED (a removed QoS slice, within two watchdog intervals and
//! 5 s), RUN NOT RELEASED, DAEMON EXITED.
//!
//! A failure prints its kind, the seed, its time, the workloads and sets,
//! and the last fault before it; the run stops and exits non-zero. The
//! daemon's logs stay in `PINCTL_SOAK_OUT/logs/` (one per start).
//!
//! # The mutation check
//!
//! `PINCTL_SOAK_MUTANT=1` runs the daemon with `PINCTL_TEST_FORGET_RELEASE=1`
//! (a debug build's test hook, `Engine::forget_at_release`): every release
//! also forgets another pinned workload, whose CPUs go back to the pool
//! while it lives. The soak must catch it: it prints the kind of failure
//! and exits 0 as soon as it does, and non-zero when the mutant survives
//! the time given. Any release triggers it (a waiting workload's too): on a
//! 2-CPU machine no two workloads are ever pinned at once.
//!
//! # Records
//!
//! In `PINCTL_SOAK_OUT` (not for the mutant), each row after the columns
//! every benchmark row opens with (`date`, `machine`, `kernel`, `cpus`;
//! `benches/support/record.rs`), appended, the header written when the file
//! is new:
//!
//! - `soak-samples.csv`: every minute and at the end (written as it is
//!   taken), `seed`, `elapsed_s`, `pinctld_starts` (the daemon's starts so
//!   far: the rows of one process share it), the daemon's `rss_kib`
//!   (`VmRSS`), `fds` (`/proc/<pid>/fd`), `threads`,
//!   its state file's `state_bytes`, `live_containers`, and the workloads
//!   asking for exclusive CPUs that hold some (`pinned`) or not (`pending`).
//! - `soak-summary.csv`: one row a run: `hierarchy`, `seconds`, `seed`,
//!   `containers`, `samples`, the failures (`overlaps`, `lost_pins`,
//!   `leaks`, all `failures`), the faults by kind, `resizes`, the recovery
//!   after a SIGKILL (`recovery_p50_ms`, `recovery_p99_ms`, nearest rank),
//!   the daemon's RSS (`rss_first_kib`, `rss_last_kib`, `rss_max_kib`, from
//!   the per-minute samples) and `result` (`pass` or `fail`).

mod check;
mod faults;
mod rng;
mod vm;
mod world;

#[allow(dead_code)]
#[path = "../../benches/support/cgroupfs.rs"]
mod cgroupfs;
#[allow(dead_code)]
#[path = "../it/support/pinctld.rs"]
mod pinctld;
#[allow(dead_code)]
#[path = "../../benches/support/record.rs"]
mod record;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail, ensure};
use pinctl::CpuSet;

use cgroupfs::Hier;
use check::{Counts, Sampler, View};
use faults::{Daemon, Faults, Kind, Variant};
use rng::Rng;
use world::{Ask, Entry, Live, Top, World};

/// Containers made and removed a second.
const CHURN_PER_SEC: u32 = 4;
/// The share of churn in the exclusive class.
const CHURN_EXCLUSIVE: f64 = 0.35;
/// The share of churn ticks that also resize a container.
const CHURN_RESIZE: f64 = 0.08;
/// How often the daemon's figures are recorded.
const RECORD_EVERY: Duration = Duration::from_secs(60);

/// What the environment asks for.
struct Knobs {
    secs: u64,
    seed: u64,
    containers: usize,
    out: PathBuf,
    mount: PathBuf,
    pinctld: PathBuf,
    pinctl: PathBuf,
    mutant: bool,
    hotplug: bool,
    reloads: bool,
    drop_ins: bool,
}

impl Knobs {
    /// The knobs, or why the soak does not run (`Ok(Err(why))`).
    fn from_env() -> Result<Result<Knobs, String>> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        if var("PINCTL_SOAK").as_deref() != Some("1") {
            return Ok(Err(
                "PINCTL_SOAK is not 1; set PINCTL_SOAK=1 to run pinctld for \
                           minutes on this machine's real cgroupfs (needs root and a cpuset \
                           hierarchy; tests/soak/main.rs)"
                    .into(),
            ));
        }
        let number = |name: &str, default: u64| -> Result<u64> {
            var(name).map_or(Ok(default), |v| {
                v.trim()
                    .parse()
                    .with_context(|| format!("{name}={v:?} is not a number"))
            })
        };
        let mutant = var("PINCTL_SOAK_MUTANT").as_deref() == Some("1");
        let hotplug = var("PINCTL_SOAK_HOTPLUG").as_deref() == Some("1");
        let reloads_knob = var("PINCTL_SOAK_RELOADS");
        let reloads = matches!(reloads_knob.as_deref(), Some("1" | "plain"));
        let drop_ins = reloads_knob.as_deref() == Some("1");
        if hotplug {
            vm::require_guest("PINCTL_SOAK_HOTPLUG", false)?;
        }
        if reloads {
            vm::require_guest("PINCTL_SOAK_RELOADS", true)?;
        }
        let clock = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let path = |name: &str, default: &Path| var(name).map_or(default.into(), PathBuf::from);
        let target = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .parent()
            .unwrap_or(Path::new("target"));
        let k = Knobs {
            secs: number("PINCTL_SOAK_SECS", if mutant { 60 } else { 180 })?,
            seed: number("PINCTL_SOAK_SEED", clock)?,
            containers: number("PINCTL_SOAK_CONTAINERS", 1000)? as usize,
            out: path("PINCTL_SOAK_OUT", &target.join("soak")),
            mount: path("PINCTL_SOAK_CGROUP", Path::new("/sys/fs/cgroup")),
            pinctld: path(
                "PINCTL_SOAK_PINCTLD",
                Path::new(env!("CARGO_BIN_EXE_pinctld")),
            ),
            pinctl: path(
                "PINCTL_SOAK_PINCTL",
                Path::new(env!("CARGO_BIN_EXE_pinctl")),
            ),
            mutant,
            hotplug,
            reloads,
            drop_ins,
        };
        ensure!(k.secs >= 1, "PINCTL_SOAK_SECS must be at least 1");
        ensure!(
            k.containers >= 10,
            "PINCTL_SOAK_CONTAINERS must be at least 10"
        );
        for bin in [&k.pinctld, &k.pinctl] {
            ensure!(bin.is_file(), "{} is missing", bin.display());
        }
        Ok(Ok(k))
    }
}

/// What the soak's threads share.
pub struct Soak {
    pub seed: u64,
    pub started: Instant,
    pub top: Top,
    /// The reserved CPUs: the shared pool always has them.
    pub reserved: CpuSet,
    pub pinctl: PathBuf,
    /// The live workloads, and the last sample's view of them.
    pub live: Mutex<Live>,
    pub view: Mutex<View>,
    pub stop: AtomicBool,
    /// Since when the daemon is up and ready; `None` while it restarts.
    ready: Mutex<Option<Instant>>,
    last_fault: Mutex<String>,
    /// The failures found: kind, message.
    pub failures: Mutex<Vec<(&'static str, String)>>,
    /// `PINCTL_SOAK_HOTPLUG=1`: CPUs go offline and back.
    pub hotplug: bool,
    /// `PINCTL_SOAK_RELOADS=1` (not `plain`): half the daemon-reloads
    /// follow a changed drop-in.
    pub drop_ins: bool,
    /// The CPUs the soak took offline or brought back, when, and which.
    hotplugs: Mutex<Vec<Hotplug>>,
}

/// A CPU the soak took offline (`online` false) or brought back.
struct Hotplug {
    cpu: u32,
    at: Instant,
    online: bool,
}

impl Soak {
    /// Time since the start, at `at`.
    pub fn elapsed(&self, at: Instant) -> Duration {
        at.saturating_duration_since(self.started)
    }

    /// Records a failure and stops the run.
    pub fn fail(&self, kind: &'static str, what: String) {
        let msg = format!(
            "{kind} at {:.1}s (seed {}; last fault: {}): {what}",
            self.elapsed(Instant::now()).as_secs_f64(),
            self.seed,
            self.last_fault.lock().unwrap()
        );
        eprintln!("soak: FAILURE: {msg}");
        self.failures.lock().unwrap().push((kind, msg));
        self.stop.store(true, Ordering::Relaxed);
    }

    pub fn set_last_fault(&self, what: &str) {
        *self.last_fault.lock().unwrap() = format!(
            "{what} at {:.1}s",
            self.elapsed(Instant::now()).as_secs_f64()
        );
    }

    pub fn set_ready(&self, up: bool) {
        *self.ready.lock().unwrap() = up.then(Instant::now);
    }

    pub fn ready_since(&self) -> Option<Instant> {
        *self.ready.lock().unwrap()
    }

    /// Notes that CPU `cpu` is about to go offline, or come back online.
    pub fn hotplugged(&self, cpu: u32, online: bool) {
        self.hotplugs.lock().unwrap().push(Hotplug {
            cpu,
            at: Instant::now(),
            online,
        });
    }

    /// Whether a workload that held `held` since `since` may have `now`
    /// because of the soak's hot-plug, not the daemon's doing: one of its
    /// CPUs went offline (the daemon moves it, or it waits), or CPUs that
    /// came back online were added to it (on v2 the kernel gives a cgroup
    /// back the online CPUs its `cpuset.cpus` lists), since it was pinned
    /// (a second's margin: a sample is not an instant).
    pub fn hotplug_moved(&self, held: &CpuSet, now: &CpuSet, since: Instant) -> bool {
        let after = since.checked_sub(Duration::from_secs(1)).unwrap_or(since);
        let events = self.hotplugs.lock().unwrap();
        let recent = || events.iter().filter(move |h| h.at >= after);
        let offlined = recent().any(|h| !h.online && held.contains(h.cpu));
        let added = now.difference(held);
        let onlined = held.is_subset(now)
            && !added.is_empty()
            && added
                .iter()
                .all(|cpu| recent().any(|h| h.online && h.cpu == cpu));
        offlined || onlined
    }
}

fn main() -> ExitCode {
    let knobs = match Knobs::from_env() {
        Ok(Ok(k)) => k,
        Ok(Err(why)) => {
            println!("soak: skipped: {why}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("soak: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "soak: seed {} (PINCTL_SOAK_SEED={0} makes the same choices again), {} s, {} containers{}",
        knobs.seed,
        knobs.secs,
        knobs.containers,
        if knobs.mutant {
            ", MUTANT: pinctld with PINCTL_TEST_FORGET_RELEASE=1"
        } else {
            ""
        }
    );
    match run(&knobs) {
        Err(e) => {
            eprintln!("soak: FAILED (seed {}): {e:#}", knobs.seed);
            ExitCode::FAILURE
        }
        Ok(failures) if knobs.mutant => match failures.first() {
            Some((_, msg)) => {
                println!("soak: the mutant was caught: {msg}");
                ExitCode::SUCCESS
            }
            None => {
                eprintln!(
                    "soak: the mutant SURVIVED {} s (seed {}): no check failed",
                    knobs.secs, knobs.seed
                );
                ExitCode::FAILURE
            }
        },
        Ok(failures) if failures.is_empty() => ExitCode::SUCCESS,
        Ok(failures) => {
            eprintln!("soak: FAILED (seed {}):", knobs.seed);
            for (_, msg) in &failures {
                eprintln!("  {msg}");
            }
            ExitCode::FAILURE
        }
    }
}

/// The whole run; the failures the checks found.
fn run(k: &Knobs) -> Result<Vec<(&'static str, String)>> {
    let hier = Hier::detect(&k.mount).map_err(|why| {
        anyhow::anyhow!("PINCTL_SOAK=1 asks for the soak, but it cannot run: {why}")
    })?;
    let online: CpuSet = fs::read_to_string("/sys/devices/system/cpu/online")?
        .trim()
        .parse()?;
    ensure!(
        online.len() >= 2,
        "needs 2 online CPUs or more (one reserved, one to hand out), found {online}"
    );
    check_limits(k.containers)?;
    let reserved: CpuSet = online.first().into_iter().collect();
    let handable = online.len() - 1;
    let exclusive = (2 * handable + 2).max(4).min(k.containers / 2);
    fs::create_dir_all(k.out.join("logs"))
        .with_context(|| format!("cannot create {}", k.out.display()))?;
    for old in fs::read_dir(k.out.join("logs"))?.flatten() {
        let _ = fs::remove_file(old.path());
    }
    let tmp = tempfile::Builder::new().prefix("pinctl-soak-").tempdir()?;
    fs::create_dir_all(tmp.path().join("bundles"))?;
    fs::create_dir_all(tmp.path().join("state"))?;
    let run = record::Run::here();
    let soak = Soak {
        seed: k.seed,
        started: Instant::now(),
        top: Top::make(hier, &online, k.reloads)?,
        reserved,
        pinctl: k.pinctl.clone(),
        live: Mutex::default(),
        view: Mutex::default(),
        stop: AtomicBool::new(false),
        ready: Mutex::new(None),
        last_fault: Mutex::new("none".into()),
        failures: Mutex::default(),
        hotplug: k.hotplug,
        drop_ins: k.drop_ins,
        hotplugs: Mutex::default(),
    };
    println!(
        "soak: {} at {}, {online} online, CPU {} reserved; top cgroup {}; records in {}",
        soak.top.hier.version.name(),
        soak.top.hier.mount.display(),
        soak.reserved,
        soak.top.name,
        k.out.display()
    );
    let bundles = tmp.path().join("bundles");
    let mut world = World::new(
        &soak.top,
        &soak.live,
        bundles.clone(),
        Rng::stream(k.seed, 1),
    );
    let t = Instant::now();
    for i in 0..k.containers {
        let ask = match i < exclusive {
            true => Ask::EXCLUSIVE[i % Ask::EXCLUSIVE.len()],
            false => world.shared_kind(),
        };
        world.add(ask)?;
    }
    let system = world::Killed(world::spawn_sleep()?);
    let shared = soak.top.rel("system.slice");
    soak.top.attach(&shared, system.0.id())?;
    let entry = Entry::new(&soak.top, &shared, false, false);
    soak.live.lock().unwrap().entries.insert(0, entry);
    println!(
        "soak: {} containers ({exclusive} asking for an exclusive CPU) made in {:.1} s",
        k.containers,
        t.elapsed().as_secs_f64()
    );

    let mut daemon = Daemon {
        p: None,
        program: k.pinctld.clone(),
        config: tmp.path().join("pinctld.toml"),
        state: tmp.path().join("state/state.json"),
        tmp: tmp.path().to_path_buf(),
        logs: k.out.join("logs"),
        mutant: k.mutant,
        starts: 0,
    };
    faults::write_config(&soak, &daemon, Variant::FIRST)?;
    let t = Instant::now();
    daemon.start()?;
    soak.set_ready(true);
    println!(
        "soak: pinctld ready in {:.1} s; running for {} s",
        t.elapsed().as_secs_f64(),
        k.secs
    );
    if k.mutant {
        let log = fs::read_to_string(daemon.log()).unwrap_or_default();
        if !log.contains("PINCTL_TEST_FORGET_RELEASE") {
            bail!(
                "{} did not take the test hook PINCTL_TEST_FORGET_RELEASE (a release build?): \
                 the mutation check needs a debug build of pinctld",
                k.pinctld.display()
            );
        }
    }

    let mut faults = Faults::new(
        &soak,
        daemon,
        Rng::stream(k.seed, 2),
        World::new(&soak.top, &soak.live, bundles, Rng::stream(k.seed, 3)),
    );
    // PINCTL_SOAK_SECS from here: the daemon is up, the tree made.
    let running = Instant::now();
    let deadline = running + Duration::from_secs(k.secs);
    let mut samples: Vec<Vec<String>> = Vec::new();
    let (counts, resizes) = std::thread::scope(|s| -> Result<(Counts, u64)> {
        let sampler = s.spawn(|| {
            let _stop = StopOnDrop(&soak.stop);
            Sampler::new(&soak).run()
        });
        let churn = s.spawn(|| {
            let _stop = StopOnDrop(&soak.stop);
            churn(&soak, world)
        });
        // The first record once the sampler has looked. Each row is
        // written as it is taken: a run killed keeps the rows it took.
        let mut next_record = Instant::now() + Duration::from_secs(1);
        let take = |samples: &mut Vec<Vec<String>>, daemon: &Daemon| -> Result<()> {
            let row = figures(&soak, daemon, running)?;
            if !k.mutant {
                let row = [vec![k.seed.to_string()], row.clone()].concat();
                record::append_in(&k.out, "soak-samples", &run, &SAMPLE_COLUMNS, &[row])?;
            }
            samples.push(row);
            Ok(())
        };
        let result = (|| -> Result<()> {
            while !soak.stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                let until = (Instant::now() + faults.gap()).min(deadline);
                while Instant::now() < until && !soak.stop.load(Ordering::Relaxed) {
                    if Instant::now() >= next_record {
                        take(&mut samples, &faults.daemon)?;
                        next_record += RECORD_EVERY;
                        progress(&soak, &faults, running, k.secs);
                    }
                    sleep(Duration::from_millis(50));
                }
                if Instant::now() < deadline && !soak.stop.load(Ordering::Relaxed) {
                    faults.one()?;
                }
            }
            take(&mut samples, &faults.daemon)?;
            Ok(())
        })();
        soak.stop.store(true, Ordering::Relaxed);
        let counts = sampler.join().expect("the sampler");
        let resizes = churn.join().expect("the churn")?;
        result.map(|()| (counts, resizes))
    })?;
    drop(system);
    let ended = Ended {
        faults: &faults,
        counts,
        resizes,
        samples,
        elapsed: running.elapsed(),
        failures: soak.failures.lock().unwrap().clone(),
    };
    ended.report();
    if !k.mutant {
        let path = k.out.join("soak-samples.csv");
        let row = ended.summary(soak.top.hier.version.short(), k);
        let sum = record::append_in(&k.out, "soak-summary", &run, &SUMMARY_COLUMNS, &[row])?;
        println!(
            "soak: records appended to {} and {}",
            path.display(),
            sum.display()
        );
    }
    Ok(ended.failures)
}

/// A line a minute on how the run goes: a long run shows it is alive (the
/// VM bed stops a guest that is silent for minutes).
fn progress(soak: &Soak, faults: &Faults<'_>, running: Instant, secs: u64) {
    let view = soak.view.lock().unwrap().clone();
    let done: u64 = faults.counts.values().sum();
    println!(
        "soak: {:.0} s of {}: {} live containers, {} pinned, {} waiting; {done} faults, last {}",
        running.elapsed().as_secs_f64(),
        secs,
        view.live_containers,
        view.holding,
        view.waiting,
        soak.last_fault.lock().unwrap()
    );
}

/// Stops the run when a thread ends, however it ends.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The limits a run needs: a process per container, an inotify watch per
/// cgroup directory.
fn check_limits(containers: usize) -> Result<()> {
    use nix::sys::resource::{Resource, getrlimit};
    let need = containers as u64 + 200;
    let (soft, _) = getrlimit(Resource::RLIMIT_NPROC)?;
    ensure!(
        soft >= need || nix::unistd::geteuid().is_root(),
        "RLIMIT_NPROC is {soft}: {containers} containers need {need} processes"
    );
    let read = |p: &str| -> u64 {
        fs::read_to_string(p)
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(u64::MAX)
    };
    let pids = read("/proc/sys/kernel/pid_max");
    ensure!(
        pids >= 2 * need,
        "kernel.pid_max is {pids}: too few for {need} processes"
    );
    let watches = read("/proc/sys/fs/inotify/max_user_watches");
    ensure!(
        watches >= 8 * containers as u64,
        "fs.inotify.max_user_watches is {watches}: the daemon watches every cgroup directory \
         ({} or more here)",
        8 * containers
    );
    Ok(())
}

/// The churn thread: a container removed and another of its class made,
/// [`CHURN_PER_SEC`] times a second, sometimes a resize; the resizes made.
fn churn(soak: &Soak, mut world: World<'_>) -> Result<u64> {
    let tick = Duration::from_secs(1) / CHURN_PER_SEC;
    let mut resizes = 0;
    let mut next = Instant::now();
    while !soak.stop.load(Ordering::Relaxed) {
        let exclusive = world.chance(CHURN_EXCLUSIVE);
        if let Some(n) = world.pick(exclusive) {
            world.remove(n)?;
        }
        let kind = match exclusive {
            true => world.exclusive_kind(),
            false => world.shared_kind(),
        };
        world.add(kind)?;
        if world.chance(CHURN_RESIZE) && world.resize()?.is_some() {
            resizes += 1;
        }
        next += tick;
        let now = Instant::now();
        match next > now {
            true => sleep(next - now),
            false => next = now,
        }
    }
    Ok(resizes)
}

/// The columns of `soak-samples.csv`, after [`record::RUN_COLUMNS`].
const SAMPLE_COLUMNS: [&str; 10] = [
    "seed",
    "elapsed_s",
    "pinctld_starts",
    "rss_kib",
    "fds",
    "threads",
    "state_bytes",
    "live_containers",
    "pinned",
    "pending",
];

/// One row of `soak-samples.csv`, after its seed: the daemon's figures now,
/// `running` since the run began (the daemon first ready).
fn figures(soak: &Soak, daemon: &Daemon, running: Instant) -> Result<Vec<String>> {
    let status = daemon
        .pid()
        .and_then(|pid| fs::read_to_string(format!("/proc/{pid}/status")).ok())
        .unwrap_or_default();
    let field = |key: &str| -> String {
        (status.lines())
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .unwrap_or("")
            .to_string()
    };
    let fds = daemon
        .pid()
        .and_then(|pid| fs::read_dir(format!("/proc/{pid}/fd")).ok())
        .map_or(String::new(), |d| d.count().to_string());
    let state = fs::metadata(&daemon.state).map_or(0, |m| m.len());
    let view = soak.view.lock().unwrap().clone();
    Ok(vec![
        running.elapsed().as_secs().to_string(),
        daemon.starts.to_string(),
        field("VmRSS:"),
        fds,
        field("Threads:"),
        state.to_string(),
        view.live_containers.to_string(),
        view.holding.to_string(),
        view.waiting.to_string(),
    ])
}

/// The columns of `soak-summary.csv`, after [`record::RUN_COLUMNS`].
const SUMMARY_COLUMNS: [&str; 25] = [
    "hierarchy",
    "seconds",
    "seed",
    "containers",
    "samples",
    "overlaps",
    "lost_pins",
    "leaks",
    "failures",
    "kills",
    "reloads",
    "corrupt_states",
    "deleted_states",
    "paths_removed",
    "deleted_under_write",
    "runs_killed",
    "hotplugs",
    "daemon_reloads",
    "resizes",
    "recovery_p50_ms",
    "recovery_p99_ms",
    "rss_first_kib",
    "rss_last_kib",
    "rss_max_kib",
    "result",
];

/// The nearest-rank percentile `q` of `v`, in ms ("" when empty).
fn percentile_ms(v: &[Duration], q: f64) -> String {
    let mut v = v.to_vec();
    v.sort();
    let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len().max(1)) - 1;
    v.get(i)
        .map_or(String::new(), |d| format!("{:.0}", d.as_secs_f64() * 1e3))
}

/// A figure for the terminal: `-` when there is none.
fn shown(figure: String) -> String {
    match figure.is_empty() {
        true => "-".to_string(),
        false => figure,
    }
}

/// The daemon's RSS in the per-minute rows: first, last, max.
fn rss(samples: &[Vec<String>]) -> [String; 3] {
    let v: Vec<u64> = samples.iter().filter_map(|r| r[2].parse().ok()).collect();
    let show = |x: Option<&u64>| x.map_or(String::new(), u64::to_string);
    [show(v.first()), show(v.last()), show(v.iter().max())]
}

/// How a run ended: what it did and found.
struct Ended<'a> {
    faults: &'a Faults<'a>,
    counts: Counts,
    resizes: u64,
    /// The rows of `soak-samples.csv`, without the seed.
    samples: Vec<Vec<String>>,
    elapsed: Duration,
    failures: Vec<(&'static str, String)>,
}

impl Ended<'_> {
    /// The row of `soak-summary.csv`.
    fn summary(&self, hierarchy: &str, k: &Knobs) -> Vec<String> {
        let (faults, counts) = (self.faults, &self.counts);
        let mut row = vec![
            hierarchy.to_string(),
            self.elapsed.as_secs().to_string(),
            k.seed.to_string(),
            k.containers.to_string(),
            counts.samples.to_string(),
            counts.overlaps.to_string(),
            counts.lost_pins.to_string(),
            counts.leaks.to_string(),
            self.failures.len().to_string(),
        ];
        row.extend(
            Kind::ALL
                .iter()
                .map(|kind| faults.counts.get(kind).copied().unwrap_or(0).to_string()),
        );
        row.push(self.resizes.to_string());
        row.push(percentile_ms(&faults.recoveries, 0.5));
        row.push(percentile_ms(&faults.recoveries, 0.99));
        row.extend(rss(&self.samples));
        row.push(
            if self.failures.is_empty() {
                "pass"
            } else {
                "fail"
            }
            .to_string(),
        );
        row
    }

    /// The human summary.
    fn report(&self) {
        let (faults, counts) = (self.faults, &self.counts);
        let by_kind: Vec<String> = (faults.counts.iter())
            .map(|(kind, n)| format!("{} {n}", kind.column()))
            .collect();
        let [first, last, max] = rss(&self.samples);
        println!(
            "soak: {:.0} s, {} samples; overlaps {}, lost pins {}, leaks {}; faults: {}; resizes {}; \
             pinctld started {} times, recovery after SIGKILL p50 {} ms, p99 {} ms; RSS first \
             {first} KiB, last {last} KiB, max {max} KiB; {}",
            self.elapsed.as_secs_f64(),
            counts.samples,
            counts.overlaps,
            counts.lost_pins,
            counts.leaks,
            match by_kind.is_empty() {
                true => "none".to_string(),
                false => by_kind.join(", "),
            },
            self.resizes,
            faults.daemon.starts,
            shown(percentile_ms(&faults.recoveries, 0.5)),
            shown(percentile_ms(&faults.recoveries, 0.99)),
            match self.failures.len() {
                0 => "PASS".to_string(),
                n => format!("{n} FAILURES"),
            }
        );
    }
}
