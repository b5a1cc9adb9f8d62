//! End-to-end tests of `pinctld`: the real daemon binary on fake cgroup trees
//! (v1 and v2, both kubelet drivers) in tempdirs, with the `intel-2s-smt` sysfs
//! fixture (32 CPUs; socket and NUMA node 0 = `0-7,16-23`, 1 = `8-15,24-31`;
//! core c = {c, c+16}) and CPUs 0 and 16 reserved.
//!
//! Every test waits for `READY=1` on its own `NOTIFY_SOCKET` before acting,
//! polls for the expected file contents with a deadline (never a fixed sleep),
//! and checks the tree's invariants at the end. Event-driven tests run with a
//! one-hour reconcile interval, so what they see was done on inotify events.
//! On failure the message carries the tree, the state file and the daemon's
//! log.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use pinctl::CpuSet;
use pinctl::engine::SavedState;
use pinctl::state::{Loaded, StateFile};

use crate::support::copy_dir;
use crate::support::fake_cgroup::{
    self, Driver, MEMS, ONLINE, Qos, Spec, Version, container_id, set, uid,
};
use crate::support::pinctld::PINCTLD;
use crate::support::world::{FIXTURE, Options, RESERVED, SYSTEM, World, get};

/// The NUMA node (= socket) of a CPU of the fixture.
fn node_of(cpu: u32) -> u32 {
    if cpu % 16 < 8 { 0 } else { 1 }
}

fn nodes_of(cpus: &CpuSet) -> Vec<u32> {
    let mut nodes: Vec<u32> = cpus.iter().map(node_of).collect();
    nodes.sort();
    nodes.dedup();
    nodes
}

/// Whether `cpus` is made of whole cores ({c, c+16} pairs).
fn whole_cores(cpus: &CpuSet) -> bool {
    cpus.iter().all(|c| cpus.contains((c + 16) % 32))
}

// ---------------------------------------------------------------------------
// The daemon under test
// ---------------------------------------------------------------------------

/// One test's [`World`], and what only this suite keeps: the CPUs the fake
/// machine has online now.
struct Env {
    w: World,
    online: CpuSet,
}

env_of_world!(Env);

impl Env {
    fn new(version: Version, driver: Driver, opts: Options) -> Env {
        Env {
            w: World::new("pinctld-test", version, driver, &opts),
            online: set(ONLINE),
        }
    }

    /// The `cpuset.cpus` writes run `run` (1-based) of the daemon logged so
    /// far: (path, set).
    fn written_cpus(&self, run: usize) -> Vec<(String, CpuSet)> {
        let text = fs::read_to_string(&self.logs[run - 1]).unwrap_or_default();
        text.lines()
            .filter(|l| l.contains(" written "))
            .filter_map(|l| {
                let path = l.split(" path=").nth(1)?.split(' ').next()?;
                let data = l.split(" data=").nth(1)?.split(' ').next()?;
                path.ends_with("/cpuset.cpus")
                    .then(|| (path.to_string(), set(data)))
            })
            .collect()
    }

    /// The daemon's counters, from its status socket.
    fn counters(&self) -> pinctl::api::Counters {
        let (_, body) = get(&self.tmp.path().join("pinctl.sock"), "/v1/status");
        serde_json::from_str::<pinctl::api::Status>(&body)
            .unwrap()
            .counters
    }

    /// Waits until one more whole pass of the periodic reconcile than
    /// had ended at `before` reconciles: every cgroup was read since.
    fn wait_whole_pass_past(&self, before: u64) {
        self.wait_reconciles_past(before + u64::from(pinctl::daemon::RECONCILE_PARTS));
    }

    /// Waits until more than `before` reconciles (each a part of the
    /// periodic reconcile, or a whole one) have ended.
    fn wait_reconciles_past(&self, before: u64) {
        self.wait_for("a reconcile to end", || {
            let now = self.counters().reconciles;
            if now > before {
                Ok(())
            } else {
                Err(format!("{now} reconciles"))
            }
        });
    }

    /// Asks the daemon for a full reconcile (SIGHUP) and waits until it is
    /// done (its `reconcile done` debug line).
    fn reconcile(&self) {
        let log = self.logs.last().expect("the daemon was started");
        let done = || {
            fs::read_to_string(log)
                .unwrap_or_default()
                .matches("reconcile done")
                .count()
        };
        let before = done();
        self.daemon
            .as_ref()
            .expect("the daemon runs")
            .signal(Signal::SIGHUP);
        self.wait_for("a full reconcile", || {
            if done() > before {
                Ok(())
            } else {
                Err("not yet".into())
            }
        });
    }

    /// Waits until the kernel would let the tasks of every cgroup in `rels`
    /// use exactly `want` (v2: an empty `cpuset.cpus` inherits the parent's
    /// set; a cgroup that follows its parent needs no write of its own).
    fn wait_cpus(&self, rels: &[&str], want: &CpuSet) {
        self.wait_for(&format!("CPUs = {want} on {rels:?}"), || {
            self.expect_cpus(rels, want)
        });
    }

    fn expect_cpus(&self, rels: &[&str], want: &CpuSet) -> Result<(), String> {
        for rel in rels {
            let got = self.tree.effective(rel);
            if &got != want {
                return Err(format!("{rel} has {got:?}"));
            }
        }
        Ok(())
    }

    // --- the world ------------------------------------------------------------

    /// Creates a pod cgroup.
    fn pod(&self, qos: Qos, uid: &str) -> String {
        let rel = self.k.pod(qos, uid);
        self.tree.create(&rel, &Spec::default());
        rel
    }

    /// Creates container `n` of pod cgroup `pod`.
    fn container(&self, pod: &str, n: u32, spec: &Spec) -> String {
        let rel = self.k.container(pod, &container_id(n));
        self.tree.create(&rel, spec);
        rel
    }

    /// A v2 world with `reconcile_interval`, and a Guaranteed pod with one
    /// container asking for 2 CPUs by its limit (not started): (env,
    /// container).
    fn with_a_guaranteed_container(reconcile_interval: &'static str) -> (Env, String) {
        let env = Env::new(
            Version::V2,
            Driver::Systemd,
            Options {
                reconcile_interval,
                ..Options::default()
            },
        );
        let gpod = env.pod(Qos::Guaranteed, &uid(9));
        let app = env.container(&gpod, 2, &Spec::limit(2));
        (env, app)
    }

    /// Puts a link to an empty directory at `file` (renamed over it, which
    /// no watch reports): every read of it fails (EISDIR), as one failing
    /// with EMFILE or EIO on a node would.
    fn make_unreadable(&self, file: &Path) {
        let empty = self.tmp.path().join("empty");
        if !empty.exists() {
            fs::create_dir(&empty).unwrap();
        }
        let link = self.tmp.path().join("unreadable");
        std::os::unix::fs::symlink(&empty, &link).unwrap();
        fs::rename(&link, file).unwrap();
    }

    /// Creates a Burstable pod with one container, starts the daemon and
    /// waits until the container has every CPU: (pod, container).
    fn start_with_a_burstable_container(&mut self) -> (String, String) {
        let bpod = self.pod(Qos::Burstable, &uid(8));
        let b = self.container(&bpod, 1, &Spec::default());
        self.start();
        self.wait_cpus(&[&b], &set(ONLINE));
        (bpod, b)
    }

    /// The state file, verified with the daemon's own reader (on a copy, so
    /// that a bad file is not moved aside).
    fn saved_state(&self) -> Result<SavedState, String> {
        let copy = self.tmp.path().join("state-copy.json");
        fs::copy(&self.state, &copy).map_err(|e| format!("no state file: {e}"))?;
        let loaded = StateFile::new(&copy).load::<SavedState>();
        match loaded {
            Ok(Loaded::Fresh(s)) => Ok(s),
            Ok(Loaded::Quarantined { reason, .. }) => Err(format!("invalid state file: {reason}")),
            Ok(Loaded::Missing) => Err("no state file".into()),
            Err(e) => Err(format!("cannot read the state file: {e}")),
        }
    }

    /// The tree's invariants, once the daemon has settled: `exclusive` holds
    /// the cgroups of each exclusive workload (one slice per workload), `shared`
    /// cgroups that must run on the shared pool (besides `system.slice`).
    ///
    /// - a workload's cgroups have one non-empty set; no CPU is in two
    ///   workloads' sets, and neither reserved CPU is in any;
    /// - the shared cgroups have exactly the online CPUs minus the exclusive
    ///   ones, never empty;
    /// - in v1, every cgroup's CPUs lie within its parent's, and a cgroup with
    ///   CPUs has memory nodes (else the kernel refuses writes or tasks);
    /// - the state file is valid and holds exactly these exclusive sets.
    fn invariants(&self, exclusive: &[&[&str]], shared: &[&str]) {
        self.wait_for("the invariants to hold", || {
            self.check_invariants(exclusive, shared)
        });
    }

    fn check_invariants(&self, exclusive: &[&[&str]], shared: &[&str]) -> Result<(), String> {
        let reserved = set(RESERVED);
        let mut taken = CpuSet::new();
        let mut sets = Vec::new();
        for group in exclusive {
            let first = self.tree.effective(group[0]);
            if first.is_empty() {
                return Err(format!("exclusive {} has no CPUs", group[0]));
            }
            for rel in &group[1..] {
                let other = self.tree.effective(rel);
                if other != first {
                    return Err(format!(
                        "{rel} has {other} but {} of the same workload has {first}",
                        group[0]
                    ));
                }
            }
            if !first.is_disjoint(&taken) {
                return Err(format!(
                    "{} has {first}, which overlaps another exclusive set",
                    group[0]
                ));
            }
            if !first.is_disjoint(&reserved) {
                return Err(format!("{} has reserved CPUs: {first}", group[0]));
            }
            taken.union_with(&first);
            sets.push(first);
        }
        let pool = self.online.difference(&taken);
        for rel in shared.iter().copied().chain([SYSTEM]) {
            let got = self.tree.effective(rel);
            if got.is_empty() || got != pool {
                return Err(format!("shared {rel} has {got:?}, not the pool {pool}"));
            }
        }
        if self.tree.version() == Version::V1 {
            for rel in self.tree.cgroups() {
                let cpus = self.tree.effective(&rel);
                if cpus.is_empty() {
                    continue;
                }
                let parent = fake_cgroup::parent(&rel).unwrap();
                let up = self.tree.effective(parent);
                if !cpus.is_subset(&up) {
                    return Err(format!(
                        "v1: {rel} has {cpus}, outside its parent's {up} (EACCES)"
                    ));
                }
                if self.tree.mems(&rel).is_empty() {
                    return Err(format!("v1: {rel} has CPUs {cpus} but no memory nodes"));
                }
            }
        }
        let state = self.saved_state()?;
        let mut saved: Vec<CpuSet> = state.assignments.values().map(|a| a.cpus.clone()).collect();
        saved.sort_by_key(|s| s.to_string());
        sets.sort_by_key(|s| s.to_string());
        if saved != sets {
            return Err(format!("the state file says {saved:?}, the tree {sets:?}"));
        }
        Ok(())
    }
}

/// Checks an exclusive set for a request of `n` CPUs on this machine: whole
/// cores when `n` is even, one NUMA node when it fits in one, no reserved CPU.
fn well_placed(env: &Env, what: &str, cpus: &CpuSet, n: usize) {
    let mut problems = Vec::new();
    if cpus.len() != n {
        problems.push(format!("{} CPUs, not {n}", cpus.len()));
    }
    if n.is_multiple_of(2) && !whole_cores(cpus) {
        problems.push("not whole cores".to_string());
    }
    if n <= 14 && nodes_of(cpus).len() != 1 {
        problems.push(format!("spans NUMA nodes {:?}", nodes_of(cpus)));
    }
    if !cpus.is_disjoint(&set(RESERVED)) {
        problems.push("holds a reserved CPU".to_string());
    }
    if !problems.is_empty() {
        env.fail(&format!("{what} got {cpus}: {}", problems.join(", ")));
    }
}

// ---------------------------------------------------------------------------
// 1. Pin on create
// ---------------------------------------------------------------------------

on_both_versions!(pin_on_create_systemd => pin_on_create(Driver::Systemd));
on_both_versions!(pin_on_create_cgroupfs => pin_on_create(Driver::Cgroupfs));

/// A Guaranteed container with a 4-CPU limit gets 2 whole cores on one node;
/// everything else that is not structure runs on the rest; deleting the
/// container gives its CPUs back. The structure keeps every CPU on v1; on
/// v2 the QoS slices get the shared pool, and the containers below follow
/// them without a write of their own.
fn pin_on_create(version: Version, driver: Driver) {
    let mut env = Env::new(version, driver, Options::default());
    let k = env.k;
    let online = set(ONLINE);
    let bpod = env.pod(Qos::Burstable, &uid(1));
    let b1 = env.container(&bpod, 1, &Spec::default());
    env.start();
    let root = k.root();
    let burstable = k.qos_parent(Qos::Burstable);
    let besteffort = k.qos_parent(Qos::BestEffort);
    env.wait_cpus(&[&root, &burstable, &besteffort, &bpod], &online);
    env.wait_cpus(&[&b1, SYSTEM], &online);

    // The pod and its containers appear as the kubelet and containerd make
    // them: the pod cgroup, the sandbox (no limit), then the app.
    let gpod = env.pod(Qos::Guaranteed, &uid(2));
    let pause = env.container(&gpod, 2, &Spec::default());
    let app = env.container(&gpod, 3, &Spec::limit(4));
    let cpus = env.wait_pinned(&app, 4);
    well_placed(&env, "the Guaranteed container", &cpus, 4);
    let pool = online.difference(&cpus);
    let qos_side = match version {
        Version::V1 => online.clone(),
        Version::V2 => pool.clone(),
    };
    env.wait_cpus(&[&b1, &pause, SYSTEM], &pool);
    env.wait_cpus(&[&root, &gpod], &online);
    env.wait_cpus(&[&burstable, &besteffort, &bpod], &qos_side);

    // A burstable container that arrives later runs on the shared pool.
    let bpod2 = env.pod(Qos::Burstable, &uid(3));
    let b2 = env.container(&bpod2, 4, &Spec::default());
    env.wait_cpus(&[&b2], &pool);
    env.wait_cpus(&[&bpod2], &qos_side);
    env.invariants(&[&[&app]], &[&b1, &b2, &pause]);
    if version == Version::V2 {
        // Made empty, as a runtime makes them: they follow their QoS slice.
        for rel in [&bpod, &b1, &bpod2, &b2] {
            let own = env.tree.cpus(rel);
            if !own.is_empty() {
                env.fail(&format!("{rel} was written ({own}): it follows its parent"));
            }
        }
    }
    if let Err(e) = env.expect_cpus(&[&app], &cpus) {
        env.fail(&format!("the pinned container moved: {e}"));
    }

    // The container goes: its CPUs are shared again.
    env.tree.remove(&app);
    env.wait_cpus(&[&b1, &b2, &pause, SYSTEM], &online);
    env.wait_cpus(&[&root, &burstable, &bpod, &bpod2, &gpod], &online);
    env.invariants(&[], &[&b1, &b2, &pause]);
}

// ---------------------------------------------------------------------------
// 2. A restart keeps assignments
// ---------------------------------------------------------------------------

on_both_versions!(restart_keeps_assignments => restart_keeps_assignments(Driver::Cgroupfs));

/// Two workloads are pinned; the daemon crashes; while it is down one goes and
/// a new one comes (whose cgroup path sorts before the survivor's). After the
/// restart the survivor has the same CPUs, the newcomer is pinned, and the
/// gone one's CPUs are shared again.
fn restart_keeps_assignments(version: Version, driver: Driver) {
    let mut env = Env::new(version, driver, Options::default());
    let bpod = env.pod(Qos::Burstable, &uid(1));
    let b = env.container(&bpod, 1, &Spec::default());
    env.start();
    let pod_a = env.pod(Qos::Guaranteed, &uid(0x20));
    let a = env.container(&pod_a, 2, &Spec::limit(4));
    let a_cpus = env.wait_pinned(&a, 4);
    let pod_b = env.pod(Qos::Guaranteed, &uid(0x30));
    let b_app = env.container(&pod_b, 3, &Spec::limit(4));
    let b_cpus = env.wait_pinned(&b_app, 4);
    env.invariants(&[&[&a], &[&b_app]], &[&b]);

    env.crash();
    env.tree.remove(&b_app);
    env.tree.remove(&pod_b);
    let pod_c = env.pod(Qos::Guaranteed, &uid(0x10));
    let c = env.container(&pod_c, 4, &Spec::limit(4));
    env.start();

    let c_cpus = env.wait_pinned(&c, 4);
    well_placed(&env, "the new container", &c_cpus, 4);
    if let Err(e) = env.expect_cpus(&[&a], &a_cpus) {
        env.fail(&format!(
            "the surviving workload must keep {a_cpus} across the restart: {e}"
        ));
    }
    let pool = set(ONLINE).difference(&a_cpus).difference(&c_cpus);
    env.wait_cpus(&[&b, SYSTEM], &pool);
    let back = b_cpus.difference(&c_cpus);
    if !back.is_subset(&pool) {
        env.fail(&format!(
            "the deleted workload's CPUs {back} are not shared"
        ));
    }
    env.invariants(&[&[&a], &[&c]], &[&b]);
}

// ---------------------------------------------------------------------------
// 3. A corrupt state file
// ---------------------------------------------------------------------------

on_both_versions!(corrupt_state_file => corrupt_state_file(Driver::Systemd));

/// A state file of garbage is moved aside; the daemon starts anyway, keeps the
/// live assignment and writes a valid state file again.
fn corrupt_state_file(version: Version, driver: Driver) {
    let mut env = Env::new(version, driver, Options::default());
    env.start();
    let pod = env.pod(Qos::Guaranteed, &uid(1));
    let app = env.container(&pod, 1, &Spec::limit(4));
    let cpus = env.wait_pinned(&app, 4);
    env.invariants(&[&[&app]], &[]);
    env.stop();

    fs::write(
        &env.state,
        b"{\"version\":1,\"checksum\":\"crc32:0\0\0garbage",
    )
    .unwrap();
    let dir = env.state.parent().unwrap().to_path_buf();
    let quarantined = |dir: &Path| -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with("state.json.corrupt-"))
            .collect();
        names.sort();
        names
    };
    assert!(quarantined(&dir).is_empty());
    env.start();

    if let Err(e) = env.expect_cpus(&[&app], &cpus) {
        env.fail(&format!("the workload must keep {cpus}: {e}"));
    }
    let moved = quarantined(&dir);
    if moved.len() != 1 {
        env.fail(&format!(
            "expected one state.json.corrupt-* file, found {moved:?}"
        ));
    }
    let garbage = fs::read(dir.join(&moved[0])).unwrap();
    assert!(
        garbage.ends_with(b"garbage"),
        "the bad file is kept as it was"
    );
    let state = env.wait_for("a valid state file", || env.saved_state());
    let kept: Vec<&CpuSet> = state.assignments.values().map(|a| &a.cpus).collect();
    if kept != [&cpus] {
        env.fail(&format!("the new state file holds {kept:?}, not [{cpus}]"));
    }
    env.invariants(&[&[&app]], &[]);
}

// ---------------------------------------------------------------------------
// 4. The topology shrinks below the state, then grows back
// ---------------------------------------------------------------------------

on_both_versions!(topology_changes => topology_changes(Driver::Cgroupfs));

/// The sysfs CPUs of socket 1 (`8-15,24-31`).
const SOCKET1: &str = "8-15,24-31";

/// Takes socket 1 out of the (copied) sysfs tree, or puts it back.
fn set_socket1_online(sysfs: &Path, online: bool) {
    let cpu = sysfs.join("devices/system/cpu");
    let fixture = Path::new(FIXTURE).join("devices/system/cpu");
    for c in set(SOCKET1).iter() {
        let topo = cpu.join(format!("cpu{c}/topology"));
        if online {
            copy_dir(&fixture.join(format!("cpu{c}/topology")), &topo);
        } else {
            fs::remove_dir_all(&topo).unwrap();
        }
    }
    let node1 = sysfs.join("devices/system/node/node1/cpulist");
    if online {
        fs::write(cpu.join("offline"), "\n").unwrap();
        fs::write(node1, format!("{SOCKET1}\n")).unwrap();
        fs::write(cpu.join("online"), "0-31\n").unwrap();
    } else {
        fs::write(cpu.join("online"), "0-7,16-23\n").unwrap();
        fs::write(cpu.join("offline"), format!("{SOCKET1}\n")).unwrap();
        fs::write(node1, "\n").unwrap();
    }
}

/// Two 8-CPU workloads, one per socket. With socket 1 gone the daemon still
/// starts, the socket-0 workload keeps its CPUs, the other one waits in the
/// shared pool (6 usable CPUs are left), and no cgroup gets a CPU that is not
/// there (the structure gets every CPU on v1, the shared pool with the CPUs
/// pinned below on v2). With socket 1 back (seen by the periodic reconcile) the new CPUs
/// are used again.
fn topology_changes(version: Version, driver: Driver) {
    let opts = Options {
        reconcile_interval: "300ms",
        copy_sysfs: true,
        ..Options::default()
    };
    let mut env = Env::new(version, driver, opts);
    let bpod = env.pod(Qos::Burstable, &uid(1));
    let b = env.container(&bpod, 1, &Spec::default());
    env.start();
    let pod_a = env.pod(Qos::Guaranteed, &uid(0x10));
    let a = env.container(&pod_a, 2, &Spec::limit(8));
    let a_cpus = env.wait_pinned(&a, 8);
    let pod_b = env.pod(Qos::Guaranteed, &uid(0x20));
    let b_app = env.container(&pod_b, 3, &Spec::limit(8));
    let b_cpus = env.wait_pinned(&b_app, 8);
    let (na, nb) = (nodes_of(&a_cpus), nodes_of(&b_cpus));
    let (on0, on1) = match (na.as_slice(), nb.as_slice()) {
        ([0], [1]) => (a.clone(), b_app.clone()),
        ([1], [0]) => (b_app.clone(), a.clone()),
        _ => env.fail(&format!(
            "expected one workload per NUMA node, got {a_cpus} and {b_cpus}"
        )),
    };
    let cpus0 = env.tree.effective(&on0);
    env.invariants(&[&[&a], &[&b_app]], &[&b]);
    env.stop();

    let gone = set(SOCKET1);
    set_socket1_online(&env.sysfs, false);
    env.online = set("0-7,16-23");
    env.tree.set_online(&env.online);
    env.start();
    if let Err(e) = env.expect_cpus(&[&on0], &cpus0) {
        env.fail(&format!("the socket-0 workload must keep {cpus0}: {e}"));
    }
    // 14 usable CPUs minus 8 leave 6: the other workload waits in the pool.
    let pool = env.online.difference(&cpus0);
    env.wait_cpus(&[&on1, &b, SYSTEM], &pool);
    let (pod0, pod1) = if on0 == a {
        (&pod_a, &pod_b)
    } else {
        (&pod_b, &pod_a)
    };
    // The structure: every CPU on v1; on v2 the shared pool, with the CPUs
    // of the workloads pinned below.
    let structure = |env: &Env, pool: &CpuSet, pinned: &[(&str, &CpuSet)]| {
        env.wait_cpus(&[&env.k.root()], &env.online);
        let on_v2 = |pod: &str| {
            let mut got = pool.clone();
            for (p, cpus) in pinned {
                if *p == pod {
                    got.union_with(cpus);
                }
            }
            match version {
                Version::V1 => env.online.clone(),
                Version::V2 => got,
            }
        };
        for rel in [
            &env.k.qos_parent(Qos::Burstable),
            &env.k.qos_parent(Qos::BestEffort),
            &bpod,
            pod0,
            pod1,
        ] {
            env.wait_cpus(&[rel], &on_v2(rel));
        }
    };
    structure(&env, &pool, &[(pod0, &cpus0)]);
    env.wait_for("STATUS= to report the pending workload", || {
        let notes = env.notes();
        notes
            .iter()
            .any(|n| n.contains("1 exclusive workloads on 8 CPUs, 1 pending"))
            .then_some(())
            .ok_or_else(|| format!("{notes:?}"))
    });
    env.invariants(&[&[&on0]], &[&on1, &b]);
    for rel in env.tree.cgroups() {
        let cpus = env.tree.effective(&rel);
        if !cpus.is_disjoint(&gone) {
            env.fail(&format!("{rel} has {cpus}, with CPUs that are not online"));
        }
    }
    // In v1 the kernel refuses a CPU that is not online (EINVAL), so no write
    // may carry one, not even the widening step. (v2 takes offline CPUs in
    // cpuset.cpus and leaves them out of the effective set.)
    if version == Version::V1 {
        for (path, cpus) in env.written_cpus(2) {
            if !cpus.is_disjoint(&gone) {
                env.fail(&format!("wrote {cpus} to {path} while {gone} were offline"));
            }
        }
    }

    // Socket 1 comes back while the daemon runs (seen by the periodic
    // reconcile, 300ms).
    set_socket1_online(&env.sysfs, true);
    env.online = set(ONLINE);
    env.tree.set_online(&env.online);
    let b_new = env.wait_for("the pending workload pinned on socket 1", || {
        let got = env.tree.effective(&on1);
        if got.len() == 8 && nodes_of(&got) == [1] {
            Ok(got)
        } else {
            Err(format!("{on1} has {got}"))
        }
    });
    well_placed(&env, "the re-planned workload", &b_new, 8);
    let pool = env.online.difference(&cpus0).difference(&b_new);
    env.wait_cpus(&[&b, SYSTEM], &pool);
    if pool.is_disjoint(&gone) {
        env.fail(&format!(
            "none of the CPUs back online is shared: pool {pool}"
        ));
    }
    structure(&env, &pool, &[(pod0, &cpus0), (pod1, &b_new)]);
    if let Err(e) = env.expect_cpus(&[&on0], &cpus0) {
        env.fail(&format!("the socket-0 workload must keep {cpus0}: {e}"));
    }
    env.invariants(&[&[&on0], &[&on1]], &[&b]);
}

// ---------------------------------------------------------------------------
// 5. Pending, then satisfied
// ---------------------------------------------------------------------------

on_both_versions!(pending_then_satisfied => pending_then_satisfied(Driver::Systemd));

/// Two 20-CPU requests on 30 usable CPUs: the second waits in the shared pool
/// until the first goes, then gets its 20.
fn pending_then_satisfied(version: Version, driver: Driver) {
    let mut env = Env::new(version, driver, Options::default());
    env.start();
    let pod1 = env.pod(Qos::Guaranteed, &uid(1));
    let first = env.container(&pod1, 1, &Spec::limit(20));
    let cpus1 = env.wait_pinned(&first, 20);
    well_placed(&env, "the first workload", &cpus1, 20);
    let pod2 = env.pod(Qos::Guaranteed, &uid(2));
    let second = env.container(&pod2, 2, &Spec::limit(20));
    let pool = set(ONLINE).difference(&cpus1);
    env.wait_cpus(&[&second, SYSTEM], &pool);
    env.wait_for("STATUS= to report the pending workload", || {
        let notes = env.notes();
        notes
            .iter()
            .any(|n| n.contains("1 exclusive workloads on 20 CPUs, 1 pending"))
            .then_some(())
            .ok_or_else(|| format!("{notes:?}"))
    });
    env.invariants(&[&[&first]], &[&second]);

    env.tree.remove(&first);
    let cpus2 = env.wait_pinned(&second, 20);
    well_placed(&env, "the second workload", &cpus2, 20);
    env.invariants(&[&[&second]], &[]);
}

// ---------------------------------------------------------------------------
// 6. A foreign write is reverted
// ---------------------------------------------------------------------------

on_both_versions!(foreign_write_reverted => foreign_write_reverted(Driver::Systemd));

/// Someone (the kubelet, `systemctl daemon-reload`) rewrites a pinned cpuset
/// and the shared one: both are back within a second, on inotify alone.
fn foreign_write_reverted(version: Version, driver: Driver) {
    let mut env = Env::new(version, driver, Options::default());
    let bpod = env.pod(Qos::Burstable, &uid(1));
    let b = env.container(&bpod, 1, &Spec::default());
    env.start();
    let pod = env.pod(Qos::Guaranteed, &uid(2));
    let app = env.container(&pod, 2, &Spec::limit(4));
    let cpus = env.wait_pinned(&app, 4);
    let pool = set(ONLINE).difference(&cpus);
    env.wait_cpus(&[&b, SYSTEM], &pool);

    env.tree.write_cpus(&app, "0-31\n");
    env.wait_within(Duration::from_secs(1), "the pinned cpuset restored", || {
        env.expect_cpus(&[&app], &cpus)
    });
    env.tree.write_cpus(SYSTEM, "0-31\n");
    env.wait_within(Duration::from_secs(1), "system.slice restored", || {
        env.expect_cpus(&[SYSTEM], &pool)
    });
    env.invariants(&[&[&app]], &[&b]);
}

// ---------------------------------------------------------------------------
// 7. Precedence of the sources of a request
// ---------------------------------------------------------------------------

on_both_versions!(precedence => precedence(Driver::Systemd));

/// xattr > annotation > rule > kubelet rule, and `"0"` keeps a cgroup out.
fn precedence(version: Version, driver: Driver) {
    let opts = Options {
        rules: vec![("hpc.slice/job-*.scope", 2)],
        ..Options::default()
    };
    let mut env = Env::new(version, driver, opts);
    let online = set(ONLINE);
    // A slice outside the managed trees, as systemd leaves it (v2: no cpuset
    // written, so the parent's CPUs).
    let hpc = "hpc.slice";
    let job_spec = env.existing();
    env.tree.create(hpc, &job_spec);
    let bpod = env.pod(Qos::Burstable, &uid(1));
    let plain = env.container(&bpod, 1, &Spec::default());
    env.start();
    let hpc_before = env.tree.effective(hpc);

    // The rule.
    let job1 = "hpc.slice/job-1.scope";
    env.tree.create(job1, &job_spec);
    let cpus1 = env.wait_pinned(job1, 2);
    // The xattr beats the rule.
    let job2 = "hpc.slice/job-2.scope";
    env.tree.create(job2, &job_spec.clone().xattr("3"));
    let cpus2 = env.wait_pinned(job2, 3);
    // "0" beats the rule and leaves the job alone.
    let job3 = "hpc.slice/job-3.scope";
    env.tree.create(job3, &job_spec.clone().xattr("0"));
    // The annotation on a burstable container (no limit).
    env.bundle(2, &uid(1), "annotated", Some("2"));
    let annotated = env.container(&bpod, 2, &Spec::default());
    let cpus3 = env.wait_pinned(&annotated, 2);
    // The xattr "0" beats the kubelet rule on a Guaranteed 4-CPU container.
    let gpod = env.pod(Qos::Guaranteed, &uid(2));
    let opted_out = env.container(&gpod, 3, &Spec::limit(4).xattr("0"));
    // An xattr set on a running container (IN_ATTRIB).
    env.tree.set_xattr(&plain, "1");
    let cpus4 = env.wait_pinned(&plain, 1);

    let exclusive = [&cpus1, &cpus2, &cpus3, &cpus4];
    let mut taken = CpuSet::new();
    for c in exclusive {
        taken.union_with(c);
    }
    let pool = online.difference(&taken);
    env.wait_cpus(&[&opted_out, SYSTEM], &pool);
    env.invariants(&[&[job1], &[job2], &[&annotated], &[&plain]], &[&opted_out]);

    // The opted-out job is no workload: never written, and it keeps the CPUs
    // it had (v2: those of its parent); neither is its parent, outside the
    // managed trees, shrunk. Checked on what the kernel would give each one.
    let mut problems = Vec::new();
    let job3_cpus = env.tree.cpus(job3);
    if job3_cpus != set(&job_spec.cpus) {
        problems.push(format!("{job3} was written: {job3_cpus}"));
    }
    for (rel, c) in [(job1, &cpus1), (job2, &cpus2)] {
        let eff = env.tree.effective(rel);
        if &eff != c {
            problems.push(format!("{rel} asked for {c} but gets {eff}"));
        }
    }
    let hpc_after = env.tree.effective(hpc);
    if !hpc_before.is_subset(&hpc_after) {
        problems.push(format!(
            "{hpc} (not managed, cpuset.cpus was {:?}) was shrunk from {hpc_before} to {hpc_after}",
            job_spec.cpus
        ));
    }
    let job3_eff = env.tree.effective(job3);
    if !hpc_before.is_subset(&job3_eff) {
        let on_exclusive = job3_eff.intersection(&taken);
        problems.push(format!(
            "{job3} (xattr \"0\", to be left alone) ran on {hpc_before} and now gets \
             {job3_eff}, of which {on_exclusive} are other workloads' exclusive CPUs"
        ));
    }
    if !problems.is_empty() {
        env.fail(&problems.join("\n"));
    }
}

on_both_versions!(kubelet_rule_off => kubelet_rule_off(Driver::Cgroupfs));

/// With `kubelet_rule = false` a Guaranteed container is not pinned; an
/// annotated one still is.
fn kubelet_rule_off(version: Version, driver: Driver) {
    let opts = Options {
        keys: vec!["kubelet_rule = false".into()],
        ..Options::default()
    };
    let mut env = Env::new(version, driver, opts);
    env.start();
    let gpod = env.pod(Qos::Guaranteed, &uid(1));
    let plain = env.container(&gpod, 1, &Spec::limit(4));
    env.bundle(2, &uid(1), "annotated", Some("2"));
    let annotated = env.container(&gpod, 2, &Spec::limit(4));
    let cpus = env.wait_pinned(&annotated, 2);
    let pool = set(ONLINE).difference(&cpus);
    env.wait_cpus(&[&plain, SYSTEM], &pool);
    env.invariants(&[&[&annotated]], &[&plain]);
}

on_both_versions!(an_annotated_pod_takes_what_it_asked => an_annotated_pod(Driver::Systemd));

/// Found with containerd's CRI: a pod's annotations reach its sandbox's
/// bundle and every container's, so a pod asking for 1 CPU took 1 for the
/// pause container and 1 per container. The sandbox asks for nothing; the
/// pod's `pinctl.io/cpus` serves one container of the pod; a container
/// named in `pinctl.io/cpus.<name>` takes that one, the others none.
fn an_annotated_pod(version: Version, driver: Driver) {
    let mut env = Env::new(version, driver, Options::default());
    env.start();
    let ask = [("pinctl.io/cpus", "1")];
    let one = env.pod(Qos::Burstable, &uid(1));
    env.bundle_with(1, &uid(1), None, &ask);
    let pause1 = env.container(&one, 1, &Spec::default());
    env.bundle_with(2, &uid(1), Some("app"), &ask);
    let app1 = env.container(&one, 2, &Spec::default());
    let cpus1 = env.wait_pinned(&app1, 1);
    let two = env.pod(Qos::Burstable, &uid(2));
    let named = [("pinctl.io/cpus.app", "2")];
    env.bundle_with(3, &uid(2), None, &named);
    let pause2 = env.container(&two, 3, &Spec::default());
    env.bundle_with(4, &uid(2), Some("app"), &named);
    let app2 = env.container(&two, 4, &Spec::default());
    env.bundle_with(5, &uid(2), Some("side"), &named);
    let side2 = env.container(&two, 5, &Spec::default());
    let cpus2 = env.wait_pinned(&app2, 2);
    let pool = set(ONLINE).difference(&cpus1.union(&cpus2));
    env.wait_cpus(&[&pause1, &pause2, &side2, SYSTEM], &pool);
    env.invariants(&[&[&app1], &[&app2]], &[&pause1, &pause2, &side2]);
    let apps = [format!("pod:{}/app", uid(1)), format!("pod:{}/app", uid(2))];
    env.wait_for("the two apps as the only workloads", || {
        let status = env.served()?;
        let keys: Vec<String> = status.workloads.into_iter().map(|w| w.key).collect();
        if keys == apps {
            Ok(())
        } else {
            Err(format!("{keys:?}"))
        }
    });
    // `describe` says which annotation decided.
    let out = env.described(&app2);
    if !out.contains("the OCI annotation pinctl.io/cpus.app in ") {
        env.fail(&format!("describe does not name the annotation:\n{out}"));
    }
}

// ---------------------------------------------------------------------------
// 8. A restarted container keeps its CPUs
// ---------------------------------------------------------------------------

on_both_versions!(container_restart_keeps_cpus => container_restart_keeps_cpus(Driver::Systemd));

/// The workload is pod UID + container name: a new cgroup of the same
/// container gets the same CPUs, and two cgroups of it present at once share
/// one assignment. Another container of the pod is another workload.
fn container_restart_keeps_cpus(version: Version, driver: Driver) {
    let mut env = Env::new(version, driver, Options::default());
    let u = uid(7);
    env.start();
    let pod = env.pod(Qos::Guaranteed, &u);
    env.bundle(1, &u, "app", None);
    let app1 = env.container(&pod, 1, &Spec::limit(4));
    let cpus = env.wait_pinned(&app1, 4);
    env.bundle(9, &u, "sidecar", None);
    let sidecar = env.container(&pod, 9, &Spec::limit(2));
    let side = env.wait_pinned(&sidecar, 2);

    // The container restarts: its cgroup goes, a new one comes.
    env.tree.remove(&app1);
    env.bundle(2, &u, "app", None);
    let app2 = env.container(&pod, 2, &Spec::limit(4));
    env.wait_cpus(&[&app2], &cpus);
    env.invariants(&[&[&app2], &[&sidecar]], &[]);

    // Two cgroups of one container at once (the old one not yet removed).
    env.bundle(3, &u, "app", None);
    let app3 = env.container(&pod, 3, &Spec::limit(4));
    env.wait_cpus(&[&app3], &cpus);
    env.invariants(&[&[&app2, &app3], &[&sidecar]], &[]);
    let state = env.wait_for("one saved assignment for pod:U/app", || env.saved_state());
    let keys: Vec<&String> = state.assignments.keys().collect();
    if keys != [&format!("pod:{u}/app"), &format!("pod:{u}/sidecar")] {
        env.fail(&format!("unexpected workloads {keys:?}"));
    }
    let a = &state.assignments[&format!("pod:{u}/app")];
    if a.cpus != cpus || a.requested != 4 {
        env.fail(&format!("pod:{u}/app saved as {a:?}"));
    }
    let pool = set(ONLINE).difference(&cpus).difference(&side);
    if pool.len() != 32 - 6 {
        env.fail(&format!("the pool {pool} counts the app's CPUs twice"));
    }
    // The old cgroup goes; the new one keeps the CPUs.
    env.tree.remove(&app2);
    env.wait_cpus(&[SYSTEM], &pool);
    env.invariants(&[&[&app3], &[&sidecar]], &[]);
    if let Err(e) = env.expect_cpus(&[&app3], &cpus) {
        env.fail(&format!("the remaining cgroup must keep {cpus}: {e}"));
    }
}

on_both_versions!(opt_out_after_the_rule_is_undone => opt_out_after_the_rule(Driver::Systemd));

/// On cgroupfs an xattr can only be set after the `mkdir`, so a rule's cgroup is
/// pinned before its `user.pinctl.cpus = "0"` arrives. The daemon must undo its
/// write: the cgroup gets back its parent's CPUs and its CPUs are shared again.
/// Found by the VM test bed.
fn opt_out_after_the_rule(version: Version, driver: Driver) {
    let opts = Options {
        rules: vec![("hpc.slice/job-*.scope", 2)],
        ..Options::default()
    };
    let mut env = Env::new(version, driver, opts);
    let spec = env.existing();
    env.tree.create("hpc.slice", &spec);
    env.start();
    let job = "hpc.slice/job-1.scope";
    env.tree.create(job, &spec);
    env.wait_pinned(job, 2);
    env.tree.set_xattr(job, "0");
    let online = set(ONLINE);
    env.wait_cpus(&[job, "hpc.slice"], &online);
    env.wait_cpus(&[SYSTEM], &online);
}

on_both_versions!(opt_out_after_a_restart_is_undone => opt_out_after_a_restart(Driver::Cgroupfs));

/// The same after a restart: the daemon that wrote the workload's CPUs is
/// gone, and the one that adopts them (the live cgroups are the truth) must
/// know they are its own to give back, or the cgroup stays on CPUs the next
/// exclusive workload may get. With `align_memory`, its memory nodes too.
fn opt_out_after_a_restart(version: Version, driver: Driver) {
    let opts = Options {
        rules: vec![("hpc.slice/job-*.scope", 2)],
        keys: vec!["align_memory = true".into()],
        ..Options::default()
    };
    let mut env = Env::new(version, driver, opts);
    let spec = env.existing();
    env.tree.create("hpc.slice", &spec);
    env.start();
    let job = "hpc.slice/job-1.scope";
    env.tree.create(job, &spec);
    let cpus = env.wait_pinned(job, 2);
    let aligned = env.wait_for("the job's memory aligned", || {
        let mems = env.tree.mems(job);
        if mems.len() == 1 {
            Ok(mems)
        } else {
            Err(format!("{mems}"))
        }
    });
    env.crash();
    env.start();
    if let Err(e) = env.expect_cpus(&[job], &cpus) {
        env.fail(&format!("the job must keep {cpus} across the restart: {e}"));
    }
    assert_eq!(env.tree.mems(job), aligned);
    env.tree.set_xattr(job, "0");
    let online = set(ONLINE);
    env.wait_cpus(&[job, "hpc.slice"], &online);
    env.wait_cpus(&[SYSTEM], &online);
    env.wait_for("the job's memory nodes given back", || {
        let mems = env.tree.mems(job);
        if mems == set(MEMS) {
            Ok(())
        } else {
            Err(format!("{mems}"))
        }
    });
}

on_both_versions!(reload_applies_a_rule_and_takes_it_back => reload_rule(Driver::Systemd));

/// SIGHUP reads the configuration again. A rule added to the file pins a
/// job that was already running, and brings its slice into the watched
/// subtrees (an xattr there now counts); taken out again, both jobs get back
/// the CPUs they had before and the shared pool is whole. The reload comes
/// with its full reconcile.
fn reload_rule(version: Version, driver: Driver) {
    let mut env = Env::new(version, driver, Options::default());
    let spec = env.existing();
    env.tree.create("hpc.slice", &spec);
    let job = "hpc.slice/job-1.scope";
    env.tree.create(job, &spec);
    // Asks by xattr, but hpc.slice is not watched until a rule names it.
    let asking = "hpc.slice/job-2.scope";
    env.tree.create(asking, &spec);
    env.tree.set_xattr(asking, "3");
    env.start();
    let online = set(ONLINE);
    env.wait_cpus(&[job, asking], &online);

    let with_rule = Options {
        rules: vec![("hpc.slice/job-*.scope", 2)],
        ..Options::default()
    };
    env.write_config(&with_rule);
    env.reconcile();
    let cpus = env.wait_pinned(job, 2);
    let asked = env.wait_pinned(asking, 3);
    env.wait_cpus(&[SYSTEM], &online.difference(&cpus).difference(&asked));
    assert!(
        env.logs().contains("configuration reloaded") && env.logs().contains("rules"),
        "the reload is logged with what changed:\n{}",
        env.logs()
    );

    // Out of the watched subtrees again: both get back what they had.
    env.write_config(&Options::default());
    env.reconcile();
    env.wait_cpus(&[job, asking], &online);
    env.wait_cpus(&[SYSTEM], &online);
}

on_both_versions!(strict_reservation_on_off_on_by_reload => strict_reservation(Driver::Systemd));

/// `strict_reservation`, turned on, off and on again by reloads (no
/// restart): while it is on a Burstable container never gets a reserved
/// CPU, and gets them back when it is off; `system.slice` keeps them all
/// along, the Guaranteed pin never moves, and the status says which pool
/// the pods get.
fn strict_reservation(version: Version, driver: Driver) {
    let mut env = Env::new(version, driver, Options::default());
    let (_, b) = env.start_with_a_burstable_container();
    let gpod = env.pod(Qos::Guaranteed, &uid(9));
    let app = env.container(&gpod, 2, &Spec::limit(4));
    let pin = env.wait_pinned(&app, 4);
    let shared = set(ONLINE).difference(&pin);
    env.wait_cpus(&[&b, SYSTEM], &shared);
    let strict = Options {
        keys: vec!["strict_reservation = true".into()],
        ..Options::default()
    };
    let plain = Options::default();
    for on in [true, false, true] {
        env.write_config(if on { &strict } else { &plain });
        env.reload();
        let pods = if on {
            shared.difference(&set(RESERVED))
        } else {
            shared.clone()
        };
        env.wait_cpus(&[&b], &pods);
        env.wait_cpus(&[SYSTEM], &shared);
        env.invariants(&[&[&app]], &[]);
        assert_eq!(env.tree.effective(&app), pin, "the pin never moves");
        let status = env.served().unwrap();
        let want = on.then(|| pinctl::api::Strict {
            pool: pods.clone(),
            fallback: false,
        });
        assert_eq!(status.strict_reservation, want, "strict {on}");
    }
    assert!(
        env.logs().contains("strict_reservation"),
        "the reloads name the key:\n{}",
        env.logs()
    );
}

/// A rule at the top of the tree makes the whole tree a subtree; taking it
/// out again by a reload leaves the daemon knowing what it knew before (not
/// the whole tree, rescanned at every reconcile).
#[test]
fn reload_narrows_the_subtrees_back() {
    let mut env = Env::new(Version::V2, Driver::Systemd, Options::default());
    env.tree.create("other.slice", &Spec::default());
    env.tree.create("other.slice/x.service", &Spec::default());
    env.start();
    let socket = env.tmp.path().join("pinctl.sock");
    let known = || -> u64 {
        let (_, body) = get(&socket, "/v1/status");
        let status: pinctl::api::Status = serde_json::from_str(&body).unwrap();
        status.counters.cgroups
    };
    env.reconcile();
    let before = known();

    env.write_config(&Options {
        rules: vec![("job-*.scope", 1)],
        ..Options::default()
    });
    env.tree.create("job-1.scope", &Spec::default());
    env.reconcile();
    env.wait_pinned("job-1.scope", 1);
    assert!(known() > before + 2, "the whole tree is known");

    env.write_config(&Options::default());
    env.reconcile();
    env.wait_cpus(&["job-1.scope"], &set(ONLINE));
    env.reconcile();
    assert_eq!(known(), before, "what was known before the rule, no more");
}

/// The `config` section of the daemon's status, once the snapshot has caught
/// up with the last reload.
fn running_config(env: &Env, socket: &Path) -> pinctl::api::RunningConfig {
    env.wait_for("the status after the reload", || {
        let (code, body) = get(socket, "/v1/status");
        let status: pinctl::api::Status =
            serde_json::from_str(&body).map_err(|e| format!("HTTP {code}: {e}: {body}"))?;
        let c = status.config;
        if c.reload_error.is_some() || !c.restart_pending.is_empty() {
            Ok(c)
        } else {
            Err(format!("not yet: {c:?}"))
        }
    })
}

/// A file that does not parse changes nothing: the daemon keeps running with
/// the configuration it has, logs the error with its line, and counts the
/// failure; a key only a restart applies is named and left as it runs.
#[test]
fn reload_keeps_the_running_configuration_on_a_bad_file() {
    let opts = Options {
        rules: vec![("hpc.slice/job-*.scope", 2)],
        ..Options::default()
    };
    let mut env = Env::new(Version::V2, Driver::Systemd, opts.clone());
    env.tree.create("hpc.slice", &Spec::default());
    let job = "hpc.slice/job-1.scope";
    env.tree.create(job, &Spec::default());
    env.start();
    let cpus = env.wait_pinned(job, 2);

    // An unknown key on the last line: the whole file is refused.
    let good = fs::read_to_string(&env.config).unwrap();
    let lines = good.lines().count() + 1;
    fs::write(&env.config, format!("{good}cpu_count = 4\n")).unwrap();
    env.reconcile();
    let logs = env.logs();
    assert!(
        logs.contains("configuration not reloaded")
            && logs.contains(&format!(":{lines}:"))
            && logs.contains("cpu_count"),
        "the error names the line and the key:\n{logs}"
    );
    env.expect_cpus(&[job], &cpus)
        .unwrap_or_else(|e| env.fail(&e));
    let socket = env.tmp.path().join("pinctl.sock");
    let running = running_config(&env, &socket);
    let error = running.reload_error.unwrap_or_default();
    assert!(
        error.contains("cpu_count"),
        "the status says why: {error:?}"
    );
    assert_eq!(running.file.as_deref(), Some(env.config.as_path()));

    // A restart key: named, not applied (the socket stays where it is).
    let moved = good.replace("pinctl.sock", "elsewhere.sock");
    assert_ne!(moved, good);
    fs::write(&env.config, moved).unwrap();
    env.reconcile();
    assert!(
        env.logs().contains("applied at the next restart") && env.logs().contains("key=\"socket\""),
        "the deferred key is named:\n{}",
        env.logs()
    );
    let running = running_config(&env, &socket);
    assert_eq!(running.restart_pending, ["socket"]);
    assert_eq!(running.reload_error, None, "a good reload clears the error");
    let (code, metrics) = get(&socket, "/metrics");
    assert_eq!(code, 200);
    for want in [
        "pinctl_config_reloads_total{result=\"failed\"} 1",
        "pinctl_config_reloads_total{result=\"ok\"} 1",
    ] {
        assert!(metrics.contains(want), "{want} in\n{metrics}");
    }
    env.expect_cpus(&[job], &cpus)
        .unwrap_or_else(|e| env.fail(&e));
    env.stop();
}

on_both_versions!(identity_read_when_a_container_starts_wanting_cpus => identity_when_wanting_later(Driver::Systemd));

/// A container that wants nothing at first: the daemon remembers only that
/// its bundle asks for nothing. When an xattr later asks for CPUs, its
/// identity (pod UID + container name, from the bundle) must still be known.
fn identity_when_wanting_later(version: Version, driver: Driver) {
    let mut env = Env::new(version, driver, Options::default());
    let u = uid(5);
    env.start();
    let pod = env.pod(Qos::Burstable, &u);
    env.bundle(1, &u, "worker", None);
    let c = env.container(&pod, 1, &Spec::default());
    env.wait_cpus(&[&c], &set(ONLINE));
    // A full reconcile in between: the bundle is not read again.
    env.reconcile();
    env.tree.set_xattr(&c, "2");
    let cpus = env.wait_pinned(&c, 2);
    let key = format!("pod:{u}/worker");
    env.wait_for(&format!("the state file to hold {key}"), || {
        let s = env.saved_state()?;
        match s.assignments.get(&key) {
            Some(a) if a.cpus == cpus => Ok(()),
            _ => Err(format!(
                "assignments {:?}",
                s.assignments.keys().collect::<Vec<_>>()
            )),
        }
    });
}

on_both_versions!(state_file_names_the_live_cgroups => state_file_names_the_live_cgroups(Driver::Cgroupfs));

/// The state file says which cgroups hold each assignment: it follows a
/// workload that gains a cgroup (a restarted container whose old cgroup is
/// still there) and loses one (the old cgroup goes), though its CPUs stay.
fn state_file_names_the_live_cgroups(version: Version, driver: Driver) {
    let mut env = Env::new(version, driver, Options::default());
    let u = uid(7);
    env.start();
    let pod = env.pod(Qos::Guaranteed, &u);
    env.bundle(1, &u, "app", None);
    let old = env.container(&pod, 1, &Spec::limit(2));
    let cpus = env.wait_pinned(&old, 2);
    env.bundle(2, &u, "app", None);
    let new = env.container(&pod, 2, &Spec::limit(2));
    env.wait_cpus(&[&new], &cpus);
    let key = format!("pod:{u}/app");
    let saved = |want: &[&str]| {
        env.wait_for(&format!("the state file to name {want:?}"), || {
            let s = env.saved_state()?;
            let got = s.assignments.get(&key).map(|a| a.cgroups.clone());
            if got.as_deref().is_some_and(|g| g == want) {
                Ok(())
            } else {
                Err(format!("{key} holds {got:?}"))
            }
        })
    };
    saved(&[&old, &new]);
    env.tree.remove(&old);
    saved(&[&new]);
}

// ---------------------------------------------------------------------------
// 9. --check and a missing config
// ---------------------------------------------------------------------------

fn pinctld(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(PINCTLD)
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("NOTIFY_SOCKET")
        .output()
        .expect("run pinctld");
    (
        out.status.code().expect("an exit code"),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn check_accepts_a_valid_config() {
    let env = Env::new(Version::V2, Driver::Systemd, Options::default());
    let config = env.config.to_str().unwrap();
    let (code, stdout, stderr) = pinctld(&["--config", config, "--check"]);
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    assert!(stdout.contains("configuration is valid"), "{stdout}");
    // --check only reads the file: no daemon, no state file.
    assert!(!env.state.exists());
}

#[test]
fn check_rejects_an_unknown_key_with_its_position() {
    let env = Env::new(Version::V2, Driver::Systemd, Options::default());
    let mut text = fs::read_to_string(&env.config).unwrap();
    let line = text.lines().count() + 1;
    text.push_str("reconcile_intervall = \"5s\"\n");
    fs::write(&env.config, text).unwrap();
    let config = env.config.to_str().unwrap();
    let (code, stdout, stderr) = pinctld(&["--config", config, "--check"]);
    assert_eq!(code, 1, "stdout: {stdout}\nstderr: {stderr}");
    let position = format!("{config}:{line}:1");
    assert!(stderr.contains(&position), "no {position} in: {stderr}");
    assert!(stderr.contains("reconcile_intervall"), "{stderr}");
}

#[test]
fn a_missing_config_file_is_an_error() {
    let (code, stdout, stderr) = pinctld(&["--config", "/nonexistent"]);
    assert_eq!(code, 1, "stdout: {stdout}\nstderr: {stderr}");
    assert!(stderr.contains("cannot read config file"), "{stderr}");
    assert!(stderr.contains("/nonexistent"), "{stderr}");
}

/// A glob globset cannot compile (alternations nested 300 deep) once made
/// `pinctld --check` panic inside globset (exit 101, a backtrace); it is a
/// configuration error with its position like any other.
#[test]
fn check_rejects_a_pathological_glob_without_panicking() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pinctld.toml");
    let pattern = format!("a/{}x{}", "{x,".repeat(300), "}".repeat(300));
    fs::write(
        &path,
        format!("[[rule]]\nmatch = \"{pattern}\"\ncpus = 1\n"),
    )
    .unwrap();
    let config = path.to_str().unwrap();
    let (code, stdout, stderr) = pinctld(&["--config", config, "--check"]);
    assert_eq!(code, 1, "stdout: {stdout}\nstderr: {stderr}");
    let want = format!("{config}:2:9: rule.match: invalid glob");
    assert!(stderr.contains(&want), "no {want} in: {stderr}");
    assert!(stderr.contains("alternations nest 300 deep"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

// ---------------------------------------------------------------------------
// Late arrivals: a CPU limit written after the cgroup, a subtree made after
// start-up
// ---------------------------------------------------------------------------

on_both_versions!(limit_written_after_the_cgroup_appears => limit_written_later(Driver::Systemd));

/// runc creates a container's cgroup first and writes its CPU limit after; in
/// v1 the limit lives in the cpu controller's own tree. The daemon must see the
/// limit change and pin at once, not at the next periodic reconcile.
fn limit_written_later(version: Version, driver: Driver) {
    // The limit alone decides here: no quota is lifted (lifting makes the
    // last step's `max` the daemon's own value; see tests/it/quota.rs).
    let opts = Options {
        keys: vec!["unthrottle_exclusive = \"none\"".into()],
        ..Options::default()
    };
    let mut env = Env::new(version, driver, opts);
    env.start();
    let pod = env.pod(Qos::Guaranteed, &uid(1));
    let app = env.container(&pod, 1, &Spec::default());
    let pool = set(ONLINE);
    env.wait_cpus(&[&app], &pool);
    match version {
        Version::V2 => fs::write(env.tree.cpu_dir(&app).join("cpu.max"), "400000 100000\n"),
        Version::V1 => fs::write(env.tree.cpu_dir(&app).join("cpu.cfs_quota_us"), "400000\n"),
    }
    .unwrap();
    let cpus = env.wait_pinned(&app, 4);
    well_placed(&env, "the container whose limit came late", &cpus, 4);
    env.invariants(&[&[&app]], &[SYSTEM]);
    // A new limit asks for another count: the workload is resized around
    // the CPUs it has (issue #34), never below the 4 it was first given.
    // Each value has the length of the last, written over it in one write:
    // the kernel's file is never seen empty, and a truncated regular file
    // would be (asking for nothing for a moment: a release, then a plan
    // from scratch).
    let limit = |v2: &str, v1: &str| {
        let (file, text) = match version {
            Version::V2 => ("cpu.max", v2),
            Version::V1 => ("cpu.cfs_quota_us", v1),
        };
        let path = env.tree.cpu_dir(&app).join(file);
        assert_eq!(
            fs::read_to_string(&path).unwrap().len(),
            text.len(),
            "{text:?}"
        );
        use std::io::Write as _;
        fs::OpenOptions::new()
            .write(true)
            .open(&path)?
            .write_all(text.as_bytes())
    };
    limit("600000 100000\n", "600000\n").unwrap();
    let six = env.wait_pinned(&app, 6);
    assert!(cpus.is_subset(&six), "grown from {cpus} to {six}");
    limit("500000 100000\n", "500000\n").unwrap();
    let five = env.wait_pinned(&app, 5);
    assert!(
        five.is_subset(&six) && cpus.is_subset(&five),
        "{six} to {five}"
    );
    env.invariants(&[&[&app]], &[SYSTEM]);
    limit("200000 100000\n", "200000\n").unwrap();
    let r = env.wait_for("a resize below the baseline pending", || {
        match env
            .served()?
            .workloads
            .iter()
            .find_map(|w| w.resize.clone())
        {
            Some(r) if r.requested == 2 => Ok(r),
            other => Err(format!("{other:?}")),
        }
    });
    assert!(
        r.reason.contains("fewer than the 4 it was first given"),
        "{r:?}"
    );
    assert_eq!(env.tree.cpus(&app), five, "kept its CPUs");
    // 1.5 CPUs asks for nothing; then the period alone is written (on v1
    // its own file, a write the daemon reads only where a quota is set),
    // and 1 CPU is asked for.
    limit("150000 100000\n", "150000\n").unwrap();
    env.wait_cpus(&[&app], &pool);
    match version {
        Version::V2 => fs::write(env.tree.cpu_dir(&app).join("cpu.max"), "150000 150000\n"),
        Version::V1 => fs::write(env.tree.cpu_dir(&app).join("cpu.cfs_period_us"), "150000\n"),
    }
    .unwrap();
    env.wait_pinned(&app, 1);
    match version {
        Version::V2 => fs::write(env.tree.cpu_dir(&app).join("cpu.max"), "max 100000\n"),
        Version::V1 => fs::write(env.tree.cpu_dir(&app).join("cpu.cfs_quota_us"), "-1\n"),
    }
    .unwrap();
    env.wait_cpus(&[&app], &pool);
}

on_both_versions!(a_podman_container_outside_kubernetes => podman_outside_kubernetes(Driver::Systemd));

/// `podman run --annotation pinctl.io/cpus=2` as root on a plain host: the
/// container's cgroup is `machine.slice/libpod-<id>.scope`, its bundle is
/// `<storage>/overlay-containers/<id>/userdata/config.json`, and no pod is
/// anywhere. With `machine.slice` managed, the annotation pins it; its
/// conmon scope beside it stays on the shared pool; removing it gives the
/// CPUs back.
fn podman_outside_kubernetes(version: Version, driver: Driver) {
    let mut env = Env::new(
        version,
        driver,
        Options {
            keys: vec![r#"managed = ["kubepods.slice", "machine.slice"]"#.into()],
            ..Options::default()
        },
    );
    let spec = env.existing();
    env.tree.create("machine.slice", &spec);
    env.start();
    let id = container_id(7);
    let bundle = env.tmp.path().join("bundles").join(&id).join("userdata");
    fs::create_dir_all(&bundle).unwrap();
    let config = serde_json::json!({"ociVersion": "1.0.2-dev",
        "annotations": {"pinctl.io/cpus": "2", "io.podman.annotations.autoremove": "FALSE"}});
    fs::write(bundle.join("config.json"), config.to_string()).unwrap();
    let conmon = format!("machine.slice/libpod-conmon-{id}.scope");
    let app = format!("machine.slice/libpod-{id}.scope");
    env.tree.create(&conmon, &spec);
    env.tree.create(&app, &spec);
    let cpus = env.wait_pinned(&app, 2);
    well_placed(&env, "a podman container", &cpus, 2);
    let pool = set(ONLINE).difference(&cpus);
    env.wait_cpus(&[&conmon, SYSTEM], &pool);
    env.invariants(&[&[&app]], &[&conmon]);
    env.tree.remove(&app);
    env.wait_cpus(&[&conmon, SYSTEM], &set(ONLINE));
}

on_both_versions!(a_subtree_made_after_start_up => subtree_made_later(Driver::Systemd));

/// The daemon may start before the kubelet (or whoever makes the subtree): a
/// watched root that appears later is picked up by inotify on its parent.
/// On v2 it may come without the cpuset controller for its children
/// (systemd makes `machine.slice` so with the first container): the
/// daemon enables it there, or its cgroups would have no cpuset files.
fn subtree_made_later(version: Version, driver: Driver) {
    let mut env = Env::new(
        version,
        driver,
        Options {
            rules: vec![("late.slice/job-*.scope", 2)],
            ..Options::default()
        },
    );
    env.start();
    let spec = env.existing();
    let bare = Spec {
        subtree: Some(String::new()),
        ..env.existing()
    };
    env.tree.create("late.slice", &bare);
    if version == Version::V2 {
        env.wait_for("+cpuset in late.slice's cgroup.subtree_control", || {
            let enabled = env.tree.read_file("late.slice", "cgroup.subtree_control");
            if enabled.contains("cpuset") {
                Ok(())
            } else {
                Err(format!("it reads {enabled:?}"))
            }
        });
    }
    env.tree.create("late.slice/job-1.scope", &spec);
    let cpus = env.wait_pinned("late.slice/job-1.scope", 2);
    well_placed(&env, "a job in a late subtree", &cpus, 2);
    env.invariants(&[&["late.slice/job-1.scope"]], &[SYSTEM]);
}

// ---------------------------------------------------------------------------
// The status socket (issue #6): every endpoint, the audit trail, metrics,
// permissions, a stale socket and a second daemon.
// ---------------------------------------------------------------------------

/// Puts a FIFO in place of the cgroup file `file`: a read of it hangs until
/// someone opens it to write.
fn fifo_in_place_of(file: &Path) {
    fs::remove_file(file).unwrap();
    nix::unistd::mkfifo(file, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
}

/// Checks the OpenMetrics text format: `# TYPE`/`# HELP`/`# UNIT` comments,
/// samples `name{label="v",...} value`, and `# EOF` last.
fn check_openmetrics(text: &str) -> Result<(), String> {
    let lines: Vec<&str> = text.lines().collect();
    if lines.last() != Some(&"# EOF") {
        return Err("does not end with # EOF".into());
    }
    for line in &lines[..lines.len() - 1] {
        if let Some(rest) = line.strip_prefix("# ") {
            let kind = rest.split_whitespace().next().unwrap_or("");
            if !["TYPE", "HELP", "UNIT"].contains(&kind) {
                return Err(format!("bad comment line {line:?}"));
            }
            continue;
        }
        let (name_labels, value) = line
            .rsplit_once(' ')
            .ok_or_else(|| format!("no value in {line:?}"))?;
        value
            .parse::<f64>()
            .map_err(|_| format!("bad value in {line:?}"))?;
        let name = name_labels.split('{').next().unwrap_or("");
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
        {
            return Err(format!("bad metric name in {line:?}"));
        }
        let labels = &name_labels[name.len()..];
        let braced = labels.starts_with('{') && labels.ends_with('}');
        if !labels.is_empty() && !braced {
            return Err(format!("bad labels in {line:?}"));
        }
    }
    Ok(())
}

#[test]
fn status_socket_serves_every_endpoint() {
    use std::os::unix::fs::PermissionsExt as _;
    let mut env = Env::new(Version::V2, Driver::Systemd, Options::default());
    let gpod = env.pod(Qos::Guaranteed, &uid(7));
    let app = env.container(&gpod, 1, &Spec::limit(2));
    env.start();
    let cpus = env.wait_pinned(&app, 2);
    let socket = env.tmp.path().join("pinctl.sock");

    // Not world-accessible: 0600 without a `pinctl` group, 0660 with one.
    let mode = fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode & 0o007, 0, "socket mode {mode:o}");

    // The snapshot follows within its publishing interval.
    let deadline = Instant::now() + Duration::from_secs(5);
    let status: pinctl::api::Status = loop {
        let (code, body) = get(&socket, "/v1/status");
        assert_eq!(code, 200, "{body}");
        let status: pinctl::api::Status = serde_json::from_str(&body).unwrap();
        if status.workloads.iter().any(|w| w.cpus.is_some()) || Instant::now() > deadline {
            break status;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.schema, pinctl::api::SCHEMA);
    assert_eq!(status.hierarchy, "v2");
    assert_eq!(status.health.state, "healthy", "{:?}", status.health);
    assert!(status.daemon.ready);
    let w = status
        .workloads
        .iter()
        .find(|w| w.cgroups.contains(&app))
        .unwrap_or_else(|| env.fail(&format!("no workload for {app}: {status:?}")));
    assert_eq!(w.cpus.as_ref(), Some(&cpus));
    assert_eq!(w.source, pinctl::api::Source::Kubelet);
    let alignment = w.alignment.as_ref().unwrap();
    assert_eq!(alignment.numa_nodes.len(), 1);
    assert!(alignment.whole_cores);
    assert_eq!(status.shared_pool, set(ONLINE).difference(&cpus));
    assert_eq!(status.topology.cpus.len(), set(ONLINE).len());

    let (code, body) = get(&socket, "/v1/workloads");
    assert_eq!(code, 200);
    let workloads: Vec<pinctl::api::Workload> = serde_json::from_str(&body).unwrap();
    assert_eq!(workloads.len(), status.workloads.len());
    let (code, body) = get(&socket, "/v1/topology");
    assert_eq!(code, 200);
    let topo: pinctl::topology::TopologyFile = serde_json::from_str(&body).unwrap();
    assert_eq!(topo.cpus.len(), set(ONLINE).len());
    let (code, body) = get(&socket, "/v1/health");
    assert_eq!(code, 200);
    let health: pinctl::api::Health = serde_json::from_str(&body).unwrap();
    assert_eq!(health.state, "healthy");

    // The audit trail names the pinned container's write and its reason.
    let (code, body) = get(&socket, "/v1/events");
    assert_eq!(code, 200);
    let events: Vec<pinctl::api::Event> = serde_json::from_str(&body).unwrap();
    let pinned = events.iter().find(|e| {
        matches!(&e.what, pinctl::api::EventKind::Write { cgroup, file, new, .. }
            if *cgroup == app && file == "cpuset.cpus" && *new == cpus)
    });
    let Some(pinned) = pinned else {
        env.fail(&format!("no write of {app} in {events:?}"));
    };
    match &pinned.what {
        pinctl::api::EventKind::Write {
            reason,
            error,
            workload,
            ..
        } => {
            assert_eq!(workload.as_deref(), Some(w.key.as_str()));
            assert!(reason.contains("exclusive CPUs of"), "{reason}");
            assert!(reason.contains("kubelet"), "{reason}");
            assert_eq!(error, &None);
        }
        other => panic!("{other:?}"),
    }
    assert!(events.windows(2).all(|p| p[0].seq < p[1].seq));
    let (_, later) = get(&socket, &format!("/v1/events?since={}", pinned.seq));
    let later: Vec<pinctl::api::Event> = serde_json::from_str(&later).unwrap();
    assert!(later.iter().all(|e| e.seq > pinned.seq));

    let (code, metrics) = get(&socket, "/metrics");
    assert_eq!(code, 200);
    if let Err(e) = check_openmetrics(&metrics) {
        panic!("/metrics is not OpenMetrics text: {e}\n{metrics}");
    }
    for name in [
        "pinctl_workload_exclusive_cpus{",
        "pinctl_shared_pool_cpus ",
        "pinctl_cpu_pool{",
        "pinctl_pending_workloads ",
        "pinctl_reconcile_duration_seconds_bucket",
        "pinctl_event_to_pin_seconds_count",
        "pinctl_cgroup_writes_total ",
        "pinctl_cgroup_write_errors_total ",
        "pinctl_repairs_total ",
        "pinctl_hung_paths ",
        "pinctl_dstate_tasks ",
        "pinctl_health{",
    ] {
        assert!(metrics.contains(name), "no {name} in\n{metrics}");
    }
    assert!(
        metrics.contains(&format!(
            "pinctl_shared_pool_cpus {}",
            set(ONLINE).len() - 2
        )),
        "{metrics}"
    );
    let (code, _) = get(&socket, "/v1/nothing");
    assert_eq!(code, 404);

    // A second daemon on the same socket (with a state file of its own, so
    // that the single-instance lock lets it that far) is refused, and the
    // first keeps the socket.
    let other = env.tmp.path().join("other.toml");
    let text = fs::read_to_string(&env.config).unwrap();
    let state = format!("{:?}", env.state.display().to_string());
    let moved = format!(
        "{:?}",
        env.tmp
            .path()
            .join("other/state.json")
            .display()
            .to_string()
    );
    fs::write(&other, text.replace(&state, &moved)).unwrap();
    let (code, _, err) = pinctld(&["--config", other.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("another pinctld is already serving"), "{err}");
    assert_eq!(get(&socket, "/v1/health").0, 200);

    // A crash leaves the socket file behind; the restart takes it over.
    env.crash();
    assert!(socket.exists());
    env.start();
    assert_eq!(get(&socket, "/v1/health").0, 200);
    // A clean stop removes it.
    env.stop();
    assert!(!socket.exists());
}

/// Issue #5: while a read hangs (a FIFO with no writer in place of a
/// container's `cpuset.cpus`), the socket answers at once, the health names
/// the hung path, and it is healthy again once the read returns.
#[test]
fn status_answers_while_a_read_hangs() {
    let mut env = Env::new(Version::V2, Driver::Systemd, Options::default());
    let (_, b) = env.start_with_a_burstable_container();
    let socket = env.tmp.path().join("pinctl.sock");
    let file = env.tree.dir(&b).join("cpuset.cpus");
    fifo_in_place_of(&file);
    // The periodic reconcile's read of the FIFO blocks (read_timeout 5 s).
    env.daemon.as_ref().unwrap().signal(Signal::SIGHUP);
    std::thread::sleep(Duration::from_millis(300));
    let asked = Instant::now();
    let (code, _) = get(&socket, "/v1/health");
    assert_eq!(code, 200);
    assert!(
        asked.elapsed() < Duration::from_secs(1),
        "the health query took {:?} while a read hung",
        asked.elapsed()
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let health = loop {
        let (_, body) = get(&socket, "/v1/health");
        let health: pinctl::api::Health = serde_json::from_str(&body).unwrap();
        if health.state != "healthy" || Instant::now() > deadline {
            break health;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(health.state, "degraded", "{health:?}");
    assert_eq!(health.reasons, ["1 hung path"]);
    let (_, body) = get(&socket, "/v1/status");
    let status: pinctl::api::Status = serde_json::from_str(&body).unwrap();
    assert_eq!(status.watchdog.hung_paths.len(), 1, "{:?}", status.watchdog);
    // The cgroup is the unit of I/O: its directory is marked.
    assert_eq!(status.watchdog.hung_paths[0].path, env.tree.dir(&b));

    // Release the reader: open the write end and close it.
    drop(fs::OpenOptions::new().write(true).open(&file).unwrap());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, body) = get(&socket, "/v1/health");
        let health: pinctl::api::Health = serde_json::from_str(&body).unwrap();
        if health.state == "healthy" {
            break;
        }
        assert!(Instant::now() < deadline, "still {health:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    fs::remove_file(&file).unwrap();
    fs::write(&file, "").unwrap();
}

/// Issue #14: a full reconcile on v1 does not read again the `cpuset.mems`
/// it knows of a shared cgroup (about a quarter of its reads on real v1
/// cgroupfs). A FIFO in place of a shared container's, whose read would
/// hang, is not touched by the reload's reconcile; a pin then narrows the
/// container. (The start-up reconcile read them, and one a minute later
/// reads them again.)
#[test]
fn a_reconcile_does_not_read_memory_nodes_it_knows() {
    let mut env = Env::new(
        Version::V1,
        Driver::Cgroupfs,
        Options {
            keys: vec![r#"read_timeout = "1s""#.into()],
            ..Options::default()
        },
    );
    let (_, b) = env.start_with_a_burstable_container();
    let file = env.tree.dir(&b).join("cpuset.mems");
    let mems = fs::read_to_string(&file).unwrap();
    fifo_in_place_of(&file);
    env.reload();
    let gpod = env.pod(Qos::Guaranteed, &uid(9));
    let app = env.container(&gpod, 2, &Spec::limit(2));
    let cpus = env.wait_pinned(&app, 2);
    env.wait_cpus(&[SYSTEM, &b], &set(ONLINE).difference(&cpus));
    let log = env.log();
    fs::remove_file(&file).unwrap();
    fs::write(&file, &mems).unwrap();
    if log.contains("marked hung") {
        env.fail("a read of the known cpuset.mems hung");
    }
}

/// The periodic reconcile reads a sixth of the tree at a time, and every
/// cgroup whole once per `reconcile_interval` (here 6 s: a part every
/// second). Drift that no event shows (each container's `cpuset.cpus`
/// replaced by a rename, which the daemon does not act on) is repaired a
/// part at a time: after one part only some of it, after a whole pass all.
#[test]
fn the_periodic_reconcile_reads_a_part_at_a_time_and_all_once_per_interval() {
    let mut env = Env::new(
        Version::V1,
        Driver::Cgroupfs,
        Options {
            reconcile_interval: "6s",
            ..Options::default()
        },
    );
    let pod = env.pod(Qos::Burstable, &uid(8));
    let containers: Vec<String> = (0..24)
        .map(|n| env.container(&pod, 100 + n, &Spec::default()))
        .collect();
    let rels: Vec<&str> = containers.iter().map(String::as_str).collect();
    env.start();
    let pool = set(ONLINE);
    env.wait_cpus(&rels, &pool);
    let drift = env.tmp.path().join("drift");
    for rel in &rels {
        fs::write(&drift, "1").unwrap();
        fs::rename(&drift, env.tree.dir(rel).join("cpuset.cpus")).unwrap();
    }
    // The second part to end after the renames began after them.
    let before = env.counters().reconciles;
    env.wait_reconciles_past(before + 1);
    let repaired = rels.iter().filter(|r| env.tree.cpus(r) == pool).count();
    assert!(
        repaired < rels.len(),
        "two parts repaired all {repaired} containers: they read the whole tree"
    );
    env.wait_whole_pass_past(before);
    env.wait_cpus(&rels, &pool);
}

/// Issue #14: a periodic reconcile reads the whole tree in the background,
/// a batch per turn of the loop, so a new pin does not wait for it (at
/// 10,000 cgroups a reconcile reads for a third of a second on real v1).
/// Here a read of the reconcile hangs (a FIFO in place of a container's
/// `cpuset.cpus`, `read_timeout` 30 s): the pin is made while it hangs, and
/// the reconcile ends, with nothing undone, once the read returns.
#[test]
fn a_pin_does_not_wait_for_a_periodic_reconcile() {
    let mut env = Env::new(
        Version::V2,
        Driver::Systemd,
        Options {
            reconcile_interval: "1s",
            keys: vec![r#"read_timeout = "30s""#.into()],
            ..Options::default()
        },
    );
    let (_, b) = env.start_with_a_burstable_container();
    let file = env.tree.dir(&b).join("cpuset.cpus");
    fifo_in_place_of(&file);
    // The next periodic reconcile (within a second) hangs on the FIFO.
    std::thread::sleep(Duration::from_millis(2500));
    let before = env.counters().reconciles;

    let gpod = env.pod(Qos::Guaranteed, &uid(9));
    let app = env.container(&gpod, 2, &Spec::limit(2));
    let made = Instant::now();
    let cpus = env.wait_pinned(&app, 2);
    assert!(
        made.elapsed() < Duration::from_secs(10),
        "the pin took {:?}",
        made.elapsed()
    );
    assert_eq!(
        env.counters().reconciles,
        before,
        "no reconcile ended while the read hung: the pin did not wait for one"
    );

    // Release the reader: the reconcile ends and the pin stands.
    drop(fs::OpenOptions::new().write(true).open(&file).unwrap());
    env.wait_reconciles_past(before);
    fs::remove_file(&file).unwrap();
    fs::write(&file, "").unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(env.tree.effective(&app), cpus);
    env.wait_cpus(&[SYSTEM], &set(ONLINE).difference(&cpus));
}

/// A background reconcile reads a batch of cgroups before a pin narrows the
/// shared pool and takes it in after (its batch waits on a hung read: a FIFO
/// in place of a pinned container's `cpuset.mems`, which a reconcile reads
/// each time and the daemon does not write on v1 without `align_memory`):
/// what it read of the sets the daemon wrote since is older than what the
/// daemon knows. Taken in, the reconcile would believe the old (wider) sets
/// and write every shared cgroup again, and a later widening would go
/// through the old sets (other workloads' CPUs).
#[test]
fn a_reconcile_does_not_take_back_what_the_daemon_wrote_since_it_read() {
    let mut env = Env::new(
        Version::V1,
        Driver::Cgroupfs,
        Options {
            reconcile_interval: "1s",
            keys: vec![r#"read_timeout = "30s""#.into()],
            ..Options::default()
        },
    );
    let hpod = env.pod(Qos::Guaranteed, &uid(8));
    let held = env.container(&hpod, 1, &Spec::limit(1));
    env.start();
    let held_cpus = env.wait_pinned(&held, 1);
    // The quota pass keeps its limit and baseline in xattrs after the pin:
    // the echo of those writes (IN_ATTRIB) is read in the loop, and must
    // come before the FIFO, which only the reconcile is to read.
    env.wait_for("the held workload's baseline kept", || {
        match xattr::get(env.tree.dir(&held), "user.pinctl.baseline") {
            Ok(Some(v)) if !v.is_empty() => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    std::thread::sleep(Duration::from_millis(300));
    let file = env.tree.dir(&held).join("cpuset.mems");
    let mems = fs::read_to_string(&file).unwrap();
    fifo_in_place_of(&file);
    // The next periodic reconcile (within a second) hangs on the FIFO,
    // having read system.slice.
    std::thread::sleep(Duration::from_millis(2500));
    let before = env.counters().reconciles;

    let gpod = env.pod(Qos::Guaranteed, &uid(9));
    let app = env.container(&gpod, 2, &Spec::limit(2));
    let cpus = env.wait_pinned(&app, 2);
    let shared = set(ONLINE).difference(&cpus).difference(&held_cpus);
    env.wait_cpus(&[SYSTEM], &shared);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(env.counters().reconciles, before, "the read still hangs");
    let writes = env.counters().writes;

    // Release the reader with what the file held: the reconcile ends.
    fs::write(&file, &mems).unwrap();
    env.wait_reconciles_past(before);
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        env.counters().writes,
        writes,
        "the reconcile wrote again what the pin had written"
    );
    env.wait_cpus(&[SYSTEM], &shared);
    assert_eq!(env.tree.cpus(&held), held_cpus);
    fs::remove_file(&file).unwrap();
    fs::write(&file, &mems).unwrap();
}

/// SIGHUP while a background reconcile is under way: the reload's own
/// reconcile replaces it, with its batches in flight on the I/O threads. The
/// loop must go on: systemd's watchdog pings keep coming, and a new pin is
/// made after the reloads. (The Debian VM boot once saw the loop stop after a
/// reload, and systemd killed the daemon.)
#[test]
fn reloads_during_background_reconciles_keep_the_loop_alive() {
    let mut env = Env::new(
        Version::V1,
        Driver::Cgroupfs,
        Options {
            reconcile_interval: "50ms",
            ..Options::default()
        },
    );
    for p in 0..300 {
        let pod = env.pod(Qos::Burstable, &uid(100 + p));
        for c in 0..4 {
            env.container(&pod, 1000 + p * 4 + c, &Spec::default());
        }
    }
    env.spawn(&crate::support::pinctld::Launch {
        watchdog_usec: Some(400_000),
        ..Default::default()
    });
    env.wait_ready();
    let mut rng = 12345u64;
    for _ in 0..60 {
        env.d().signal(Signal::SIGHUP);
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        std::thread::sleep(Duration::from_millis(5 + (rng >> 33) % 60));
    }
    let pings = |env: &Env, long: Duration| {
        let before = env.d().pings().len();
        std::thread::sleep(long);
        env.d().pings().len() - before
    };
    let n = pings(&env, Duration::from_millis(1000));
    if n < 2 {
        env.fail(&format!(
            "{n} WATCHDOG=1 in 1 s after the reloads, expected about 5"
        ));
    }
    let gpod = env.pod(Qos::Guaranteed, &uid(9));
    let app = env.container(&gpod, 2, &Spec::limit(2));
    env.wait_pinned(&app, 2);
}

on_both_versions!(untrusted_cgroups_ask_for_nothing => untrusted_cgroups(Driver::Systemd));

/// Makes cgroup `rel` one that someone other than root may mark: owned by
/// uid 65534 when the test runs as root (a subtree systemd delegated to a
/// user), else writable by everyone.
fn hand_to_a_user(env: &Env, rel: &str) {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = env.tree.dir(rel);
    if nix::unistd::geteuid().is_root() {
        std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap();
    } else {
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
    }
}

/// The audit: as uid 65534, one `setxattr user.pinctl.cpus` on its own
/// delegated cgroup took 26 of 30 CPUs and health stayed "healthy". A
/// cgroup that is not root's asks for nothing, whatever it carries (xattr,
/// a rule's name, a bundle's container id); the problem is logged once, not
/// at every reconcile; and a pinned cgroup handed to others loses its CPUs.
fn untrusted_cgroups(version: Version, driver: Driver) {
    use std::os::unix::fs::PermissionsExt as _;
    let opts = Options {
        rules: vec![("hpc.slice/job-*.scope", 2)],
        ..Options::default()
    };
    let mut env = Env::new(version, driver, opts);
    let spec = env.existing();
    env.tree.create("hpc.slice", &spec);
    let user = "system.slice/user@65534.service";
    env.tree.create(user, &spec);
    hand_to_a_user(&env, user);
    let greedy = "system.slice/user@65534.service/greedy";
    env.tree.create(greedy, &spec.clone().xattr("26"));
    hand_to_a_user(&env, greedy);
    // Root-owned, but anyone may write to it, and so mark it.
    let open = "hpc.slice/job-9.scope";
    env.tree.create(open, &spec);
    fs::set_permissions(env.tree.dir(open), fs::Permissions::from_mode(0o777)).unwrap();
    env.start();

    let online = set(ONLINE);
    let gpod = env.pod(Qos::Guaranteed, &uid(1));
    let guaranteed = env.container(&gpod, 1, &Spec::limit(4));
    let job = "hpc.slice/job-1.scope";
    env.tree.create(job, &spec);
    let g = env.wait_pinned(&guaranteed, 4);
    let j = env.wait_pinned(job, 2);
    let pool = online.difference(&g).difference(&j);
    env.wait_cpus(&[SYSTEM, greedy], &pool);
    // Outside the managed trees and not pinned: left as it was.
    env.wait_cpus(&[open], &online);
    env.reconcile();
    env.reconcile();
    let logs = env.logs();
    for (rel, asked) in [(greedy, "26 exclusive CPUs"), (open, "2 exclusive CPUs")] {
        let said = logs
            .lines()
            .filter(|l| l.contains(rel) && l.contains("only root may give CPUs away"))
            .collect::<Vec<_>>();
        if said.len() != 1 || !said[0].contains(asked) {
            env.fail(&format!(
                "{rel}: expected its request for {asked} refused in one log line, found {said:#?}"
            ));
        }
    }

    // A pinned job whose directory anyone may now write to is no longer
    // trusted (chmod raises IN_ATTRIB): it gets its parent's CPUs back, and
    // its CPUs go back to the pool.
    fs::set_permissions(env.tree.dir(job), fs::Permissions::from_mode(0o757)).unwrap();
    env.wait_cpus(&[job], &online);
    env.wait_cpus(&[SYSTEM, greedy], &online.difference(&g));
    env.invariants(&[&[&guaranteed]], &[greedy]);
}

on_both_versions!(a_second_daemon_changes_nothing => second_daemon(Driver::Systemd));

/// The audit: a second pinctld moved the state file aside (and on v2 wrote
/// `cgroup.subtree_control`) before it found the socket in use. It now
/// takes the single-instance lock first, and stops there, naming the
/// first daemon's pid.
fn second_daemon(version: Version, driver: Driver) {
    let mut env = Env::new(version, driver, Options::default());
    env.start();
    let first = env.daemon.as_ref().expect("running").pid();
    // A state file the second daemon would quarantine, and a controller
    // file it would write, were it to go on.
    fs::write(&env.state, "not a state\n").unwrap();
    let subtree = env.tree.root().join("cgroup.subtree_control");
    if version == Version::V2 {
        fs::write(&subtree, "").unwrap();
    }
    let config = env.config.display().to_string();
    let (code, _, stderr) = pinctld(&["--config", &config]);
    let mut problems = Vec::new();
    if code != 1 || !stderr.contains("already runs with this state file") {
        problems.push(format!("exit {code}, stderr {stderr:?}"));
    }
    if !stderr.contains(&format!("by pid {first}")) {
        problems.push(format!(
            "the first daemon (pid {first}) is not named: {stderr:?}"
        ));
    }
    let state = fs::read_to_string(&env.state).unwrap_or_else(|e| format!("({e})"));
    if state != "not a state\n" {
        problems.push(format!("the state file was changed: {state:?}"));
    }
    let dir = env.state.parent().unwrap();
    for entry in fs::read_dir(dir).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.contains("corrupt") {
            problems.push(format!("the state file was moved aside: {name}"));
        }
    }
    if version == Version::V2 && fs::read_to_string(&subtree).unwrap() != "" {
        problems.push(format!("{} was written", subtree.display()));
    }
    if !problems.is_empty() {
        env.fail(&problems.join("\n"));
    }
    // The first one is unharmed.
    assert!(env.daemon.as_mut().unwrap().exited().is_none());
}

on_both_versions!(hostile_bundles_cost_one_look => hostile_bundles(Driver::Cgroupfs));

/// The audit: nine FIFO bundles left the daemon "failed" for good (every I/O
/// thread stuck in `open`), a link to `/dev/zero` cost about 1 GB per
/// reconcile, and failures were silent and retried at every reconcile. Now
/// each bad bundle is refused at once, logged once while it stays as it is,
/// health stays healthy, pins go on, and a mended file is read again.
fn hostile_bundles(version: Version, driver: Driver) {
    let mut env = Env::new(version, driver, Options::default());
    let bpod = env.pod(Qos::Burstable, &uid(1));
    let bundles = env.tmp.path().join("bundles");
    let mut hostile = Vec::new();
    for n in 1..=9 {
        let dir = bundles.join(container_id(n));
        fs::create_dir_all(&dir).unwrap();
        let config = dir.join("config.json");
        nix::unistd::mkfifo(&config, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        hostile.push((env.container(&bpod, n, &Spec::default()), config));
    }
    let zero = bundles.join(container_id(10));
    fs::create_dir_all(&zero).unwrap();
    std::os::unix::fs::symlink("/dev/zero", zero.join("config.json")).unwrap();
    let zeroed = env.container(&bpod, 10, &Spec::default());
    env.start();

    let gpod = env.pod(Qos::Guaranteed, &uid(2));
    let guaranteed = env.container(&gpod, 11, &Spec::limit(2));
    env.wait_pinned(&guaranteed, 2);
    env.reconcile();
    env.reconcile();
    let socket = env.tmp.path().join("pinctl.sock");
    let (code, health) = get(&socket, "/v1/health");
    if code != 200 || !health.contains("\"healthy\"") {
        env.fail(&format!("health after hostile bundles: {code} {health}"));
    }
    let logs = env.logs();
    for (rel, why) in hostile
        .iter()
        .map(|(rel, _)| (rel.as_str(), "a FIFO"))
        .chain([(
            zeroed.as_str(),
            "a symbolic link below the bundle directory",
        )])
    {
        let said = logs
            .lines()
            .filter(|l| l.contains(rel) && l.contains("ignoring bundle"))
            .collect::<Vec<_>>();
        if said.len() != 1 || !said[0].contains(why) {
            env.fail(&format!(
                "{rel}: expected one line saying {why:?}, found {said:#?}"
            ));
        }
    }

    // Mended: the file changed, so it is read again, and its annotation pins.
    let (rel, config) = &hostile[0];
    fs::remove_file(config).unwrap();
    fs::write(config, r#"{"annotations":{"pinctl.io/cpus":"1"}}"#).unwrap();
    env.reconcile();
    env.wait_pinned(rel, 1);
}

/// The audit: a state file that could not be saved (read-only or full disk)
/// only logged a warning and health stayed "healthy". Now health says so,
/// the failures are counted, each later plan tries again, and health comes
/// back once a save works. (A directory where the file should be makes the
/// save fail even for root.)
#[test]
fn a_state_file_that_cannot_be_saved_degrades_health_until_it_can() {
    let mut env = Env::new(Version::V2, Driver::Systemd, Options::default());
    fs::create_dir_all(&env.state).unwrap();
    env.start();
    let gpod = env.pod(Qos::Guaranteed, &uid(1));
    let first = env.container(&gpod, 1, &Spec::limit(2));
    env.wait_pinned(&first, 2);
    let daemon = env.daemon.as_ref().unwrap();
    env.wait_for("STATUS= saying the state is not saved", || {
        let s = daemon.status();
        if s.contains("degraded: state file not saved") {
            Ok(())
        } else {
            Err(format!("STATUS={s}"))
        }
    });
    let socket = env.tmp.path().join("pinctl.sock");
    let (_, metrics) = get(&socket, "/metrics");
    if metrics.contains("pinctl_state_save_failures_total 0") {
        env.fail(&format!("no save failure counted:\n{metrics}"));
    }
    // The socket's snapshot follows the loop within 200 ms.
    env.wait_for("the status saying why", || {
        let (_, status) = get(&socket, "/v1/status");
        if status.contains("\"state_error\":\"failed to rename") {
            Ok(())
        } else {
            Err(status)
        }
    });

    fs::remove_dir(&env.state).unwrap();
    let second = env.container(&gpod, 2, &Spec::limit(2));
    env.wait_pinned(&second, 2);
    env.wait_for("healthy once saved", || {
        let s = daemon.status();
        if !s.contains("degraded") {
            Ok(())
        } else {
            Err(format!("STATUS={s}"))
        }
    });
    // The retry may save before the second pin; the pin saves again.
    env.wait_for("both assignments saved", || match env.saved_state() {
        Ok(saved) if saved.assignments.len() == 2 => Ok(()),
        other => Err(format!("{other:?}")),
    });
}

on_both_versions!(a_cgroup_whose_name_is_not_utf8_is_seen => not_utf8(Driver::Cgroupfs));

/// The audit: a cgroup whose name is not UTF-8 was invisible; on real v1 one
/// such child kept its parent from narrowing (EBUSY for ever) and its task
/// ran on an "exclusive" CPU. Such a cgroup is now kept like any other: in
/// the shared pool when a workload is pinned, and pinned by a rule that
/// names it, on the kernel's bytes.
fn not_utf8(version: Version, driver: Driver) {
    use std::os::unix::ffi::OsStrExt as _;
    let opts = Options {
        rules: vec![("hpc.slice/*", 2)],
        ..Options::default()
    };
    let mut env = Env::new(version, driver, opts);
    let spec = env.existing();
    env.tree.create("system.slice/odd", &spec);
    env.tree.create("hpc.slice", &spec);
    env.tree.create("hpc.slice/job", &spec);
    let odd = env
        .tree
        .dir(SYSTEM)
        .join(std::ffi::OsStr::from_bytes(b"odd-\xff\xfe"));
    fs::rename(env.tree.dir("system.slice/odd"), &odd).unwrap();
    let job = env
        .tree
        .dir("hpc.slice")
        .join(std::ffi::OsStr::from_bytes(b"job-\xff"));
    fs::rename(env.tree.dir("hpc.slice/job"), &job).unwrap();
    env.start();
    let gpod = env.pod(Qos::Guaranteed, &uid(1));
    let guaranteed = env.container(&gpod, 1, &Spec::limit(4));
    let g = env.wait_pinned(&guaranteed, 4);
    let read = |dir: &Path| {
        fs::read_to_string(dir.join("cpuset.cpus"))
            .ok()
            .and_then(|t| t.parse::<CpuSet>().ok())
    };
    let pinned = env.wait_for("the rule's job-\\xff pinned on 2 CPUs", || {
        match read(&job) {
            Some(c) if c.len() == 2 => Ok(c),
            other => Err(format!("it has {other:?}")),
        }
    });
    let pool = set(ONLINE).difference(&g).difference(&pinned);
    // What it gets (v2: its own set within system.slice's, or all of it).
    env.wait_for("odd-\\xff\\xfe in the shared pool", || {
        let own = read(&odd).unwrap_or_default();
        let got = match version {
            Version::V1 => own,
            Version::V2 => fake_cgroup::v2_gets(&own, &env.tree.effective(SYSTEM)),
        };
        if got == pool {
            Ok(())
        } else {
            Err(format!("it gets {got}, not {pool}"))
        }
    });
}

/// The audit, end to end: workloads named after hostile cgroups (a rule
/// pins every cgroup of a slice, so a name becomes a workload key) could
/// forge a metrics label or, with a trailing backslash, break the whole
/// scrape. On the real daemon each key comes back as its own one label.
#[test]
fn hostile_cgroup_names_neither_forge_labels_nor_break_the_scrape() {
    let opts = Options {
        rules: vec![("hpc.slice/*", 1)],
        ..Options::default()
    };
    let mut env = Env::new(Version::V2, Driver::Systemd, opts);
    let spec = env.existing();
    env.tree.create("hpc.slice", &spec);
    env.start();
    let names = ["a\",evil=\"1", "ends\\", "esc\u{1b}[2Jbel\u{7}"];
    for name in names {
        let rel = format!("hpc.slice/{name}");
        env.tree.create(&rel, &spec);
        env.wait_pinned(&rel, 1);
    }
    let socket = env.tmp.path().join("pinctl.sock");
    // The gauges follow the loop's snapshot within 200 ms.
    let metrics = env.wait_for("a sample per workload", || {
        let (_, metrics) = get(&socket, "/metrics");
        match metrics.matches("pinctl_workload_exclusive_cpus{").count() {
            3 => Ok(metrics),
            n => Err(format!("{n} samples")),
        }
    });
    if let Err(e) = check_openmetrics(&metrics) {
        env.fail(&format!("{e}\n{metrics}"));
    }
    let samples: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("pinctl_workload_exclusive_cpus{"))
        .collect();
    for name in names {
        let escaped = format!("cgroup:hpc.slice/{name}")
            .replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n");
        let want = format!("pinctl_workload_exclusive_cpus{{workload=\"{escaped}\"}} 1");
        if !samples.contains(&want.as_str()) {
            env.fail(&format!("no sample {want:?} in {samples:#?}"));
        }
    }
    assert!(
        !metrics.contains("evil=\"1\"}"),
        "a forged label:\n{metrics}"
    );
}

/// Found by the real-cgroupfs benchmark (runc's order on v1: the cpuset
/// directories first, the cpu ones and their quota after). When the daemon
/// watches a pod's cpu directory only after the container's cpu directory
/// is already in it, inotify never reports that container: its quota, and so
/// its pin, went unseen until the next full reconcile.
#[test]
fn a_container_cpu_directory_made_before_its_pods_is_watched_is_seen() {
    let mut env = Env::new(Version::V1, Driver::Cgroupfs, Options::default());
    env.start();
    let pod = env.k.pod(Qos::Guaranteed, &uid(1));
    let app = env.k.container(&pod, &container_id(1));
    // The cpuset side, as a runtime makes it: empty sets, no cpu side yet.
    let stage = env.tmp.path().join("stage");
    for (i, rel) in [&pod, &app].into_iter().enumerate() {
        let dir = stage.join(format!("cpuset-{i}"));
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("cpuset.cpus"), "\n").unwrap();
        fs::write(dir.join("cpuset.mems"), "\n").unwrap();
        fs::rename(&dir, env.tree.dir(rel)).unwrap();
        // Known to the daemon: it gave the new cgroup its memory nodes.
        env.wait_for(&format!("{rel} read"), || {
            let mems = env.tree.mems(rel);
            if mems.is_empty() {
                Err("no memory nodes yet".to_string())
            } else {
                Ok(())
            }
        });
    }
    // The pod's cpu directory appears with the container's already in it.
    let cpu = stage.join("cpu");
    let quota = |dir: &Path| {
        fs::create_dir_all(dir).unwrap();
        fs::write(dir.join("cpu.cfs_quota_us"), "200000\n").unwrap();
        fs::write(dir.join("cpu.cfs_period_us"), "100000\n").unwrap();
    };
    quota(&cpu);
    quota(&cpu.join(container_id(1)));
    fs::rename(&cpu, env.tree.cpu_dir(&pod)).unwrap();
    let cpus = env.wait_pinned(&app, 2);
    well_placed(&env, "the Guaranteed container", &cpus, 2);
}

/// Found under systemd as PID 1 (the VM bed's debian boots): on cgroup v1
/// systemd keeps its services in the root cpuset, so a `shared_cgroups`
/// entry that is not in the cpuset hierarchy confines nothing. The daemon
/// says so at start, naming the cgroup and what to do; on v2, and where the
/// cgroup exists, it says nothing.
#[test]
fn a_shared_cgroup_missing_from_the_v1_cpuset_hierarchy_is_reported() {
    const WARNING: &str = "shared cgroup is not in the cpuset hierarchy";
    for (version, missing) in [
        (Version::V1, true),
        (Version::V1, false),
        (Version::V2, true),
    ] {
        let mut env = Env::new(version, Driver::Cgroupfs, Options::default());
        if missing {
            fs::remove_dir_all(env.tree.dir(SYSTEM)).unwrap();
        }
        env.start();
        let log = env.log();
        let warned = log
            .lines()
            .any(|l| l.contains(WARNING) && l.contains(SYSTEM));
        assert_eq!(
            warned,
            version == Version::V1 && missing,
            "{version:?}, {SYSTEM} missing: {missing}; log:\n{log}"
        );
        if warned {
            assert!(log.contains("CPUAffinity="), "says what to do:\n{log}");
        }
        // And the status says it, to the operator who reads no log.
        let socket = env.tmp.path().join("pinctl.sock");
        let (_, body) = get(&socket, "/v1/status");
        let status: pinctl::api::Status = serde_json::from_str(&body).unwrap();
        let unconfined: &[&str] = if warned { &[SYSTEM] } else { &[] };
        assert_eq!(status.config.unconfined, unconfined, "{version:?}");
        let shown = pinctl::cli::status::render(
            &status,
            pinctl::cli::status::Mode::Online,
            pinctl::cli::style::Style::OFF,
            status.daemon.started,
        );
        assert_eq!(
            shown.contains("confine nothing"),
            warned,
            "{version:?}:\n{shown}"
        );
    }
}

/// cgroup v1 with the root cpuset balancing: a shared cgroup's
/// `cpuset.sched_load_balance` goes to 0 (its writes then skip rebuilding the
/// scheduler domains), an exclusive one's is left alone, a restart writes no
/// flag that is already off, and with the root's flag at 0 (an operator's
/// isolated domains) no flag is touched.
#[test]
fn shared_cgroups_stop_balancing_only_while_the_root_balances() {
    const FLAG: &str = "cpuset.sched_load_balance";
    for root_flag in ["1", "0"] {
        let mut env = Env::new(Version::V1, Driver::Cgroupfs, Options::default());
        env.tree.write_file("", FLAG, &format!("{root_flag}\n"));
        let bpod = env.pod(Qos::Burstable, &uid(1));
        let b1 = env.container(&bpod, 1, &Spec::default().cpuset(ONLINE, "0-1"));
        for rel in [&b1, SYSTEM] {
            env.tree.write_file(rel, FLAG, "1\n");
        }
        env.start();
        let gpod = env.pod(Qos::Guaranteed, &uid(2));
        let app = env.container(&gpod, 2, &Spec::limit(2));
        env.tree.write_file(&app, FLAG, "1\n");
        let cpus = env.wait_pinned(&app, 2);
        env.wait_cpus(&[&b1, SYSTEM], &set(ONLINE).difference(&cpus));
        let want = if root_flag == "1" { "0" } else { "1" };
        for rel in [b1.as_str(), SYSTEM] {
            env.wait_for(&format!("{FLAG} of {rel} = {want}"), || {
                match env.tree.read_file(rel, FLAG).trim() {
                    got if got == want => Ok(()),
                    got => Err(format!("it reads {got}")),
                }
            });
        }
        if env.tree.read_file(&app, FLAG).trim() != "1" {
            env.fail("the exclusive container's flag was touched");
        }
        env.stop();
        env.start();
        env.stop();
        let log = fs::read_to_string(&env.logs[1]).unwrap_or_default();
        if log
            .lines()
            .any(|l| l.contains(" written ") && l.contains(FLAG))
        {
            env.fail("the restarted daemon wrote a flag again");
        }
    }
}

/// A CPU limit that cannot be read (here `cpu.max` is a link to an empty
/// directory, EISDIR; on a node EMFILE, ENOMEM or EIO) does not read as no
/// limit: a Guaranteed workload pinned by the kubelet's rule stays pinned
/// through reconciles, and status names the file that failed. Before, the
/// reconcile took it for a request of nothing and gave its CPUs to the
/// shared pool until the limit could be read again.
#[test]
fn an_unreadable_limit_does_not_unpin() {
    let (mut env, app) = Env::with_a_guaranteed_container("1s");
    env.start();
    let cpus = env.wait_pinned(&app, 2);
    let max = env.tree.dir(&app).join("cpu.max");
    let limit = fs::read_to_string(&max).unwrap();
    env.make_unreadable(&max);
    let before = env.counters().reconciles;
    env.wait_whole_pass_past(before);
    assert_eq!(env.tree.effective(&app), cpus, "still pinned");
    let (_, status) = get(&env.tmp.path().join("pinctl.sock"), "/v1/status");
    assert!(
        status.contains("cpu.max") && status.contains("Is a directory"),
        "status shows the failed read: {status}"
    );

    // Readable again: the same request, nothing moves.
    fs::remove_file(&max).unwrap();
    fs::write(&max, limit).unwrap();
    let before = env.counters().reconciles;
    env.wait_whole_pass_past(before);
    assert_eq!(env.tree.effective(&app), cpus);
}

/// A container whose CPU limit cannot be read when the daemon first sees it (`cpu.max` a
/// link to a directory: EISDIR, as EMFILE or EIO would be) is read again
/// within seconds, not at the next reconcile: once the file reads (a
/// rename over it, which no watch reports), it is pinned, with no
/// reconcile in between.
#[test]
fn a_cgroup_read_in_part_is_read_again_soon() {
    let (mut env, app) = Env::with_a_guaranteed_container("1h");
    let max = env.tree.dir(&app).join("cpu.max");
    env.make_unreadable(&max);
    env.start();
    let before = env.counters().reconciles;
    env.wait_for("the failed read in the status", || {
        let (_, status) = get(&env.tmp.path().join("pinctl.sock"), "/v1/status");
        if status.contains("cpu.max") && status.contains("Is a directory") {
            Ok(())
        } else {
            Err(status)
        }
    });
    let limit = env.tmp.path().join("limit");
    fs::write(&limit, "200000 100000").unwrap();
    fs::rename(&limit, &max).unwrap();
    env.wait_pinned(&app, 2);
    assert_eq!(env.counters().reconciles, before, "no reconcile needed");
}

/// Someone else's write over a pin whose read fails (the file unreadable
/// for a moment: a link to a directory, EISDIR) is looked at again soon,
/// not left until the next reconcile: the pin is written back.
#[test]
fn a_foreign_write_that_could_not_be_read_is_looked_at_again_soon() {
    let (mut env, app) = Env::with_a_guaranteed_container("1h");
    env.start();
    let cpus = env.wait_pinned(&app, 2);
    let file = env.tree.dir(&app).join("cpuset.cpus");
    let kept = env.tmp.path().join("kept");
    // The daemon stopped, so that it reads only once the file is a link.
    env.d().signal(Signal::SIGSTOP);
    fs::write(&file, ONLINE).unwrap();
    fs::rename(&file, &kept).unwrap();
    env.make_unreadable(&file);
    env.d().signal(Signal::SIGCONT);
    std::thread::sleep(Duration::from_millis(300));
    // Readable again, with the foreign CPUs: no watch reports a rename.
    fs::rename(&kept, &file).unwrap();
    env.wait_for("the pin written back", || {
        match fs::read_to_string(&file).map(|t| t.trim().parse::<CpuSet>()) {
            Ok(Ok(got)) if got == cpus => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
}

/// Events lost to an overflowed inotify queue (the daemon stopped while
/// more happen than the queue holds): the reconcile that follows finds
/// what they told of, in the background. An event about a cgroup it found
/// but has not taken in yet (its batch waits on a hung read: a FIFO in
/// place of a sibling's `cpuset.cpus`) is not dropped as being about an
/// unknown cgroup, and the reconcile's older reading of it does not undo
/// it: a request set meanwhile pins the workload at once and for good.
#[test]
fn an_event_about_a_cgroup_found_after_an_overflow_is_not_lost() {
    let mut env = Env::new(
        Version::V2,
        Driver::Systemd,
        Options {
            reconcile_interval: "1h",
            keys: vec![r#"read_timeout = "30s""#.into()],
            ..Options::default()
        },
    );
    let (bpod, b) = env.start_with_a_burstable_container();
    let queue: usize = fs::read_to_string("/proc/sys/fs/inotify/max_queued_events")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let before = env.counters().reconciles;

    env.d().signal(Signal::SIGSTOP);
    // More events than the queue holds (two files in turn: inotify merges a
    // repeat of the last event), then a pod of two containers it loses.
    let dir = env.tree.dir(&bpod);
    for i in 0..queue + 100 {
        let name = if i % 2 == 0 { "scratch.a" } else { "scratch.b" };
        fs::write(dir.join(name), "x").unwrap();
    }
    let pod = env.pod(Qos::Burstable, &uid(9));
    let x = env.container(&pod, 2, &Spec::default());
    let y = env.container(&pod, 3, &Spec::default());
    let hung = env.tree.dir(&y).join("cpuset.cpus");
    fifo_in_place_of(&hung);
    env.d().signal(Signal::SIGCONT);
    // The reconcile has read x and waits on y, the next in its batch, once
    // its read has the FIFO open; a writer that holds it open keeps it
    // waiting.
    let writer = env.wait_for("the reconcile's read of y", || {
        use std::os::unix::fs::OpenOptionsExt as _;
        fs::OpenOptions::new()
            .write(true)
            .custom_flags(nix::libc::O_NONBLOCK)
            .open(&hung)
            .map_err(|e| e.to_string())
    });
    env.tree.set_xattr(&x, "2");
    let cpus = env.wait_pinned(&x, 2);

    // Let the reader go (end of file): the reconcile ends, and its reading
    // of x (from before the xattr) changes nothing.
    drop(writer);
    env.wait_reconciles_past(before);
    fs::remove_file(&hung).unwrap();
    fs::write(&hung, "").unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(env.tree.effective(&x), cpus, "still pinned");
    env.wait_cpus(&[&b], &set(ONLINE).difference(&cpus));
}

/// A steady stream of events (a cgroup made and removed in a loop, a pair
/// every 0.2 ms: each one the loop reads) does not hold back the
/// rest of a plan: the loop takes its events first, but the shared pool
/// still follows a pin. The loop's `select!` is biased towards events;
/// what guarantees the rest a turn is `OVERDUE` (here the stream left the
/// loop idle moments anyway: tokio learns of inotify's readiness at its own
/// pace, so this passes without that rule too).
#[test]
fn a_steady_stream_of_events_does_not_hold_back_the_shared_pool() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let mut env = Env::new(Version::V2, Driver::Systemd, Options::default());
    let (bpod, b) = env.start_with_a_burstable_container();

    let stop = Arc::new(AtomicBool::new(false));
    let stream = {
        let (dir, stop) = (env.tree.dir(&bpod), Arc::clone(&stop));
        std::thread::spawn(move || {
            let churn = dir.join("churn");
            while !stop.load(Ordering::Relaxed) {
                let _ = fs::create_dir(&churn);
                let _ = fs::remove_dir(&churn);
                // Steady, not a flood that overflows the queue.
                std::thread::sleep(Duration::from_micros(200));
            }
        })
    };
    let gpod = env.pod(Qos::Guaranteed, &uid(9));
    let app = env.container(&gpod, 2, &Spec::limit(2));
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let cpus = env.wait_pinned(&app, 2);
        env.wait_cpus(&[&b], &set(ONLINE).difference(&cpus));
    }));
    stop.store(true, Ordering::Relaxed);
    stream.join().unwrap();
    if let Err(e) = outcome {
        std::panic::resume_unwind(e);
    }
}
