//! End-to-end benchmark of `pinctld` (issue #3's targets), run on the real
//! binary against a fake cgroup v2 tree on a tmpfs.
//!
//! Targets, measured here:
//! - `mkdir` of a workload cgroup to its `cpuset.cpus` written by the daemon,
//!   at 1,000 live workloads: median under 1 ms, 99th percentile under 10 ms;
//! - a full reconcile (SIGHUP) of 10,000 cgroups (the 5,000-workload tree:
//!   a pod and a container each): under 200 ms; the 10,000-workload tree
//!   (20,013 cgroups) is reported too;
//! - resident memory at 10,000 workloads: under 20 MB.
//!
//! Run with `cargo bench --bench daemon` (about 4 minutes). Without `--bench`
//! (as `cargo test --benches` runs it) it does one quick pass at 10 workloads.
//!
//! How, for each size N (10, 1,000, 5,000, 10,000 live workloads by default):
//! - A fake v2 tree in `/dev/shm` (a tempdir when that is not a tmpfs): the root
//!   with `cgroup.controllers`, `cgroup.subtree_control` and
//!   `cpuset.cpus.effective`; every cgroup with `cpuset.cpus` and `cpuset.mems`
//!   (empty, as the kernel makes them), `cgroup.subtree_control` and `cpu.max`.
//!   The kubelet's systemd layout, one container per pod: 10% of the
//!   workloads (at most 256) Guaranteed with `cpu.max` "100000 100000", so one
//!   exclusive CPU each, the rest Burstable; a containerd bundle `config.json`
//!   per container; a few services in `system.slice`. The topology is a
//!   synthetic 512-CPU sysfs written at run time (2 sockets × 4 NUMA nodes × 2
//!   L3 groups × 16 cores × 2 threads, like `benches/allocator.rs`).
//! - Run A, `log_level = "info"`: the time from spawning `pinctld` to
//!   `READY=1` on its `NOTIFY_SOCKET` (a cold start: every cpuset is empty, so
//!   the first reconcile writes them all), then latency samples, then memory.
//! - Latency: a new pod with one container is built in a staging directory
//!   outside the watched tree and `rename`d into place (so the daemon sees the
//!   whole cgroup at once). The clock starts just before the `rename` and stops
//!   at `IN_CLOSE_WRITE` on the container's `cpuset.cpus`, from this process's
//!   own inotify watch, set while it was staged. Guaranteed pods get one
//!   exclusive CPU, which shrinks the shared pool, so the daemon then writes
//!   the shared subtrees (v2: the QoS slices and the shared slices, which
//!   what lies below them follows): the time until the last of them is
//!   written (another inotify watch, on each) is shown as "pool shrunk". A
//!   Burstable pod needs no write on v2 (its container follows its QoS
//!   slice): that is checked once per size, not timed. Each pod is moved
//!   out again afterwards (so the pool never
//!   runs out; "regrown" likewise), and the next step waits until the daemon
//!   is idle (its threads' CPU time, `/proc/<pid>/task/*/schedstat`, unchanged
//!   for 20 ms).
//! - Run B, `RUST_LOG=pinctl=debug` (debug logging would slow run A): a warm
//!   restart on the same tree, then SIGHUPs; each full reconcile's time is the
//!   daemon's own `reconcile done ... elapsed_us=` line.
//! - Memory: `VmRSS` and `VmHWM` from `/proc/<pid>/status` once the daemon has
//!   reconciled the tree and gone idle, and at the end of run A.
//! - NRI (`[nri]` on in run A, the stand-in runtime of
//!   `tests/it/support/nri_runtime.rs` on a socket in the tree): after the
//!   latency samples, `CreateContainer` of a Guaranteed container of one
//!   CPU, timed from the request's first byte written to its answer read,
//!   then `RemoveContainer` (its CPU back), the daemon idle between
//!   samples. Target: p99 ≤ 5 ms at 1,000 live containers.
//!
//! Knobs (environment): `PINCTL_BENCH_SIZES` (comma-separated workload counts),
//! `PINCTL_BENCH_SAMPLES` (latency samples per size and kind, default 200),
//! `PINCTL_BENCH_BUDGET` (seconds per size and kind, default 20; at least 20
//! samples are taken regardless), `PINCTL_BENCH_HUPS` (full reconciles per size,
//! default 5), `PINCTL_BENCH_KEEP=1` (keep the trees and daemon logs),
//! `PINCTL_BENCH_PERF=<dir>` (record each measured phase with `perf record`).
//!
//! A fake tree has none of the kernel's rules or costs: kernfs writes that
//! rebuild sched domains, for one, are far slower than a tmpfs write. These
//! numbers are the daemon's own overhead.
//!
//! A full run also appends its figures to `target/bench/daemon.csv`
//! (`support::record`, hierarchy `fake`; "narrowed" is "pool shrunk", and
//! "released" is "regrown"): `PINCTL_BENCH_CSV_DIR` names another directory,
//! `PINCTL_BENCH_MACHINE` the machine.

mod support;

// The stand-in runtime of the integration tests, as it is.
#[allow(dead_code)]
#[path = "../tests/it/support/nri_runtime.rs"]
mod nri_runtime;

use std::fmt::Write as _;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};
use nix::sys::signal::Signal;
use support::{
    Daemon, Figures, Knobs, Perf, PoolWatch, STEP_TIMEOUT, Stats, mb, mix, ms, poll_in, record,
};

/// The synthetic machine: 2 sockets × 4 NUMA nodes × 2 L3 groups × 16 cores ×
/// 2 threads. Core `c` is CPUs `c` and `c + CORES` (Linux numbering: every
/// first thread, then every second thread).
const SOCKETS: u32 = 2;
const NODES_PER_SOCKET: u32 = 4;
const L3_PER_NODE: u32 = 2;
const CORES_PER_L3: u32 = 16;
const THREADS: u32 = 2;
const CORES: u32 = SOCKETS * NODES_PER_SOCKET * L3_PER_NODE * CORES_PER_L3;
const CPUS: u32 = CORES * THREADS;

/// At most this many pre-existing Guaranteed workloads (one CPU each), so the
/// latency samples always find a free CPU.
const MAX_PINNED: usize = 256;
/// Services in `system.slice` (shared pool).
const SERVICES: usize = 8;

const KUBEPODS: &str = "kubepods.slice";
const BURSTABLE: &str = "kubepods.slice/kubepods-burstable.slice";
const BESTEFFORT: &str = "kubepods.slice/kubepods-besteffort.slice";

/// The targets, for the verdicts at the end.
const TARGET_LATENCY_AT: usize = 1_000;
const TARGET_MEDIAN: Duration = Duration::from_millis(1);
const TARGET_P99: Duration = Duration::from_millis(10);
const TARGET_BIG: usize = 10_000;
/// The reconcile target is for 10,000 cgroups (the issue's words); with a pod
/// and a container per workload that is the 5,000-workload tree. The
/// 10,000-workload tree (20,013 cgroups) is reported beside it.
const TARGET_RECONCILE_CGROUPS: usize = 10_000;
const TARGET_RECONCILE: Duration = Duration::from_millis(200);
const TARGET_RSS_KB: u64 = 20 * 1024;
const TARGET_NRI_P99: Duration = Duration::from_millis(5);

struct Options {
    full: bool,
    sizes: Vec<usize>,
    samples: usize,
    min_samples: usize,
    budget: Duration,
    hups: usize,
    keep: bool,
    perf: Option<PathBuf>,
}

impl Options {
    fn from_env() -> Result<Self> {
        let k = Knobs::new();
        let full = k.full;
        let number = |name: &str, default: usize| k.number(name, default);
        let var = |name: &str| k.var(name);
        let sizes = k.sizes(&[10, 1_000, 5_000, 10_000])?;
        let samples = number("PINCTL_BENCH_SAMPLES", if full { 200 } else { 5 })?;
        Ok(Options {
            full,
            sizes,
            samples,
            min_samples: samples.min(20),
            budget: Duration::from_secs(number("PINCTL_BENCH_BUDGET", 20)? as u64),
            hups: number("PINCTL_BENCH_HUPS", if full { 5 } else { 1 })?.max(1),
            keep: var("PINCTL_BENCH_KEEP").is_some_and(|v| v != "0"),
            perf: var("PINCTL_BENCH_PERF").map(PathBuf::from),
        })
    }
}

fn main() -> Result<()> {
    let run = record::Run::here();
    let opts = Options::from_env()?;
    let pinctld = PathBuf::from(support::PINCTLD);
    ensure!(
        pinctld.is_file(),
        "{} is missing: build it with `cargo build --release --bin pinctld`",
        pinctld.display()
    );
    let ws = Workspace::new(opts.keep)?;
    write_sysfs(&ws.dir.join("sysfs"))?;
    if let Some(dir) = &opts.perf {
        fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    println!(
        "pinctld end-to-end benchmark: {}, fake cgroup v2 tree in {} ({}), {CPUS}-CPU synthetic topology, {} host CPUs",
        pinctld.display(),
        ws.dir.display(),
        ws.fs_note,
        thread::available_parallelism().map_or(0, |n| n.get()),
    );
    let mut results = Vec::new();
    for &n in &opts.sizes {
        let r = run_size(&ws, &pinctld, n, &opts).with_context(|| format!("at {n} workloads"))?;
        r.print_progress();
        results.push(r);
    }
    report(&results);
    if opts.keep {
        println!("kept {}", ws.dir.display());
    }
    let reconciles: Vec<Option<Stats>> = results.iter().map(SizeResult::reconcile_stats).collect();
    let figures: Vec<Figures<'_>> = results
        .iter()
        .zip(&reconciles)
        .map(|(r, rec)| Figures {
            hierarchy: "fake",
            live: r.workloads,
            pin: &r.latency.write,
            churn: None,
            narrowed: &r.latency.applied,
            released: &r.latency.released,
            floor: None,
            reconcile: rec.as_ref().map(|s| s.median),
            cgroups: r.cgroups as u64,
            rss_peak_kb: r.mem_start.1.max(r.mem_end.1),
        })
        .collect();
    support::record("daemon", &run, opts.full, &figures)
}

// ---------------------------------------------------------------------------
// The scratch directory

/// The scratch directory, removed on drop (panics included) unless kept.
struct Workspace {
    dir: PathBuf,
    fs_note: &'static str,
    keep: bool,
}

fn is_tmpfs(path: &Path) -> bool {
    nix::sys::statfs::statfs(path)
        .is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC)
}

impl Workspace {
    fn new(keep: bool) -> Result<Self> {
        let shm = Path::new("/dev/shm");
        let (base, fs_note) = if is_tmpfs(shm) {
            (shm.to_path_buf(), "tmpfs")
        } else {
            let tmp = std::env::temp_dir();
            let note = if is_tmpfs(&tmp) {
                "tmpfs"
            } else {
                "not a tmpfs: /dev/shm is unavailable"
            };
            (tmp, note)
        };
        remove_stale(&base);
        let dir = base.join(format!("pinctl-bench-{}", std::process::id()));
        if dir.exists() {
            fs::remove_dir_all(&dir).with_context(|| format!("cannot clear {}", dir.display()))?;
        }
        fs::create_dir(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        Ok(Workspace { dir, fs_note, keep })
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        if !self.keep {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// Removes the scratch directories of earlier runs that were killed outright.
fn remove_stale(base: &Path) {
    for dir in support::cgroupfs::stale_runs(base, "pinctl-bench-") {
        let _ = fs::remove_dir_all(dir);
    }
}

// ---------------------------------------------------------------------------
// The synthetic sysfs

/// The kernel's list format: `0-3,8`.
fn cpulist(cpus: impl IntoIterator<Item = u32>) -> String {
    let mut v: Vec<u32> = cpus.into_iter().collect();
    v.sort_unstable();
    v.dedup();
    let mut out = String::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        if !out.is_empty() {
            out.push(',');
        }
        if i == j {
            let _ = write!(out, "{}", v[i]);
        } else {
            let _ = write!(out, "{}-{}", v[i], v[j]);
        }
        i = j + 1;
    }
    out
}

fn put(path: &Path, text: &str) -> Result<()> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    fs::write(path, format!("{text}\n")).with_context(|| format!("cannot write {}", path.display()))
}

/// Writes the files `src/sysfs.rs` reads, as `tests/fixtures/gen_sysfs.py`
/// lays them out (x86 cache ids, package-relative `core_id`).
fn write_sysfs(root: &Path) -> Result<()> {
    let cpu_dir = root.join("devices/system/cpu");
    let all = cpulist(0..CPUS);
    put(&cpu_dir.join("online"), &all)?;
    put(&cpu_dir.join("possible"), &all)?;
    put(&cpu_dir.join("present"), &all)?;
    put(&cpu_dir.join("offline"), "")?;
    put(&cpu_dir.join("isolated"), "")?;
    let cores_per_socket = CORES / SOCKETS;
    let l3_cpus = |l3: u32| {
        let first = l3 * CORES_PER_L3;
        (0..THREADS).flat_map(move |t| (first..first + CORES_PER_L3).map(move |c| c + t * CORES))
    };
    for core in 0..CORES {
        let l3 = core / CORES_PER_L3;
        let node = l3 / L3_PER_NODE;
        let socket = node / NODES_PER_SOCKET;
        let siblings = cpulist((0..THREADS).map(|t| core + t * CORES));
        let shared_l3 = cpulist(l3_cpus(l3));
        for t in 0..THREADS {
            let d = cpu_dir.join(format!("cpu{}", core + t * CORES));
            let topo = d.join("topology");
            put(&topo.join("physical_package_id"), &socket.to_string())?;
            put(&topo.join("die_id"), "0")?;
            put(
                &topo.join("core_id"),
                &(core % cores_per_socket).to_string(),
            )?;
            put(&topo.join("core_cpus_list"), &siblings)?;
            put(&topo.join("thread_siblings_list"), &siblings)?;
            let caches = [
                (1, "Data", core, siblings.as_str()),
                (1, "Instruction", core, siblings.as_str()),
                (2, "Unified", core, siblings.as_str()),
                (3, "Unified", l3, shared_l3.as_str()),
            ];
            for (i, (level, kind, id, shared)) in caches.into_iter().enumerate() {
                let idx = d.join(format!("cache/index{i}"));
                put(&idx.join("level"), &level.to_string())?;
                put(&idx.join("type"), kind)?;
                put(&idx.join("id"), &id.to_string())?;
                put(&idx.join("shared_cpu_list"), shared)?;
            }
        }
    }
    let node_dir = root.join("devices/system/node");
    let nodes = SOCKETS * NODES_PER_SOCKET;
    put(&node_dir.join("online"), &cpulist(0..nodes))?;
    put(&node_dir.join("possible"), &cpulist(0..nodes))?;
    for node in 0..nodes {
        let l3s = node * L3_PER_NODE..(node + 1) * L3_PER_NODE;
        put(
            &node_dir.join(format!("node{node}/cpulist")),
            &cpulist(l3s.flat_map(l3_cpus)),
        )?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// The fake cgroup tree

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Qos {
    Guaranteed,
    Burstable,
}

impl Qos {
    fn name(self) -> &'static str {
        match self {
            Qos::Guaranteed => "guaranteed",
            Qos::Burstable => "burstable",
        }
    }
}

/// One pod with one container.
struct PodSpec {
    qos: Qos,
    uid: String,
    /// The pod cgroup's name and its parent, relative to the cgroup root.
    parent: &'static str,
    pod: String,
    /// The container cgroup's name, below the pod.
    container: String,
    id: String,
}

impl PodSpec {
    fn new(i: u64, qos: Qos) -> Self {
        let a = mix(i);
        let b = mix(a ^ 0x5bd1_e995);
        let uid = format!(
            "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xffff,
            b >> 48,
            b & 0xffff_ffff_ffff
        );
        let id: String = (0..4).map(|k| format!("{:016x}", mix(b ^ k))).collect();
        let systemd_uid = uid.replace('-', "_");
        let (parent, pod) = match qos {
            Qos::Guaranteed => (KUBEPODS, format!("kubepods-pod{systemd_uid}.slice")),
            Qos::Burstable => (
                BURSTABLE,
                format!("kubepods-burstable-pod{systemd_uid}.slice"),
            ),
        };
        let container = format!("cri-containerd-{id}.scope");
        PodSpec {
            qos,
            uid,
            parent,
            pod,
            container,
            id,
        }
    }

    fn cpu_max(&self) -> &'static str {
        match self.qos {
            Qos::Guaranteed => "100000 100000",
            Qos::Burstable => "max 100000",
        }
    }

    /// Makes the pod and its container under `dir` (the pod's parent), and the
    /// container's bundle under `bundles`.
    fn create(&self, dir: &Path, bundles: &Path) -> Result<()> {
        let pod = dir.join(&self.pod);
        make_cgroup(&pod, true, self.cpu_max())?;
        make_cgroup(&pod.join(&self.container), false, self.cpu_max())?;
        let bundle = bundles.join(&self.id);
        fs::create_dir(&bundle).with_context(|| format!("cannot create {}", bundle.display()))?;
        fs::write(bundle.join("config.json"), self.config_json())
            .with_context(|| format!("cannot write the bundle of {}", self.id))
    }

    /// A containerd CRI bundle `config.json`, trimmed to a typical size
    /// (the annotations the daemon reads, and enough else to parse past).
    fn config_json(&self) -> String {
        let name = format!("app-{}", &self.uid[..8]);
        let mounts: String = [
            "/proc",
            "/dev",
            "/dev/pts",
            "/dev/mqueue",
            "/sys",
            "/sys/fs/cgroup",
            "/etc/hosts",
            "/dev/termination-log",
            "/etc/hostname",
            "/etc/resolv.conf",
            "/dev/shm",
            "/var/run/secrets/kubernetes.io/serviceaccount",
        ]
        .iter()
        .map(|m| {
            format!(
                r#"{{"destination":"{m}","type":"bind","source":"/var/lib/kubelet/pods/{}/volumes{m}","options":["rbind","rprivate","rw"]}},"#,
                self.uid
            )
        })
        .collect();
        format!(
            r#"{{"ociVersion":"1.1.0","process":{{"user":{{"uid":65532,"gid":65532}},"args":["/app","--port=8080","--log-level=info"],"env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin","HOSTNAME={name}","KUBERNETES_SERVICE_HOST=10.96.0.1","KUBERNETES_SERVICE_PORT=443","KUBERNETES_PORT=tcp://10.96.0.1:443"],"cwd":"/","capabilities":{{"bounding":["CAP_CHOWN","CAP_DAC_OVERRIDE","CAP_FOWNER","CAP_KILL","CAP_NET_BIND_SERVICE","CAP_SETGID","CAP_SETUID"]}},"oomScoreAdj":-997}},"root":{{"path":"rootfs"}},"hostname":"{name}","mounts":[{mounts}{{"destination":"/tmp","type":"tmpfs","source":"tmpfs","options":["nosuid","nodev"]}}],"annotations":{{"io.kubernetes.cri.container-name":"app","io.kubernetes.cri.container-type":"container","io.kubernetes.cri.image-name":"registry.example.com/team/app:1.2.3","io.kubernetes.cri.sandbox-id":"{sandbox}","io.kubernetes.cri.sandbox-name":"{name}","io.kubernetes.cri.sandbox-namespace":"default","io.kubernetes.cri.sandbox-uid":"{uid}"}},"linux":{{"resources":{{"cpu":{{"shares":1024,"quota":100000,"period":100000}},"memory":{{"limit":1073741824}}}},"cgroupsPath":"{pod}:cri-containerd:{id}","namespaces":[{{"type":"pid"}},{{"type":"ipc","path":"/proc/1/ns/ipc"}},{{"type":"uts","path":"/proc/1/ns/uts"}},{{"type":"mount"}},{{"type":"network","path":"/proc/1/ns/net"}}],"maskedPaths":["/proc/acpi","/proc/kcore","/proc/keys","/proc/latency_stats","/proc/timer_list","/proc/sched_debug","/sys/firmware"],"readonlyPaths":["/proc/bus","/proc/fs","/proc/irq","/proc/sys","/proc/sysrq-trigger"]}}}}"#,
            sandbox = &self.id[..32],
            uid = self.uid,
            pod = self.pod,
            id = self.id,
        )
    }
}

/// One cgroup directory with the files the daemon reads and writes; the
/// cpuset files are empty, as the kernel makes them.
fn make_cgroup(dir: &Path, inner: bool, cpu_max: &str) -> Result<()> {
    fs::create_dir(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let controllers = if inner { "cpuset cpu\n" } else { "\n" };
    for (name, text) in [
        ("cpuset.cpus", "\n"),
        ("cpuset.mems", "\n"),
        ("cgroup.subtree_control", controllers),
        ("cpu.max", &format!("{cpu_max}\n")),
    ] {
        fs::write(dir.join(name), text)
            .with_context(|| format!("cannot write {}", dir.join(name).display()))?;
    }
    Ok(())
}

/// One size's tree: the cgroup root, bundles, the staging area and the daemon's
/// files.
struct Tree {
    dir: PathBuf,
    cgroup: PathBuf,
    bundles: PathBuf,
    staging: PathBuf,
    workloads: usize,
    pinned: usize,
    /// Cgroups in the managed and shared subtrees.
    cgroups: usize,
    /// `cpuset.cpus` of the cgroups a change of the shared pool writes on
    /// v2: the QoS slices and the shared slices (Burstable pods and
    /// containers, and services, made empty, follow them).
    shared: Vec<PathBuf>,
    next: u64,
    keep: bool,
}

impl Tree {
    fn build(ws: &Workspace, n: usize) -> Result<Self> {
        let dir = ws.dir.join(format!("n{n}"));
        let cgroup = dir.join("cgroup");
        let bundles = dir.join("bundles");
        let staging = dir.join("staging");
        for d in [&dir, &bundles, &staging] {
            fs::create_dir(d).with_context(|| format!("cannot create {}", d.display()))?;
        }
        fs::create_dir(&cgroup)?;
        put(&cgroup.join("cgroup.controllers"), "cpuset cpu")?;
        put(&cgroup.join("cgroup.subtree_control"), "cpuset cpu")?;
        put(&cgroup.join("cpuset.cpus.effective"), &cpulist(0..CPUS))?;
        put(
            &cgroup.join("cpuset.mems.effective"),
            &cpulist(0..SOCKETS * NODES_PER_SOCKET),
        )?;
        let mut cgroups = 0;
        for rel in [
            KUBEPODS,
            BURSTABLE,
            BESTEFFORT,
            "system.slice",
            "user.slice",
        ] {
            make_cgroup(&cgroup.join(rel), true, "max 100000")?;
            cgroups += 1;
        }
        // On v2 the cgroups below these follow them with no write.
        let shared = [BURSTABLE, BESTEFFORT, "system.slice", "user.slice"]
            .iter()
            .map(|rel| cgroup.join(rel).join("cpuset.cpus"))
            .collect();
        for s in 0..SERVICES {
            let dir = cgroup.join(format!("system.slice/svc-{s}.service"));
            make_cgroup(&dir, false, "max 100000")?;
            cgroups += 1;
        }
        // Every tenth workload is Guaranteed, up to MAX_PINNED.
        let pinned = (n / 10).min(MAX_PINNED);
        let mut guaranteed = 0;
        for i in 0..n {
            let qos = if i % 10 == 0 && guaranteed < pinned {
                guaranteed += 1;
                Qos::Guaranteed
            } else {
                Qos::Burstable
            };
            let spec = PodSpec::new(i as u64, qos);
            let parent = cgroup.join(spec.parent);
            spec.create(&parent, &bundles)?;
            cgroups += 2;
        }
        Ok(Tree {
            dir,
            cgroup,
            bundles,
            staging,
            workloads: n,
            pinned: guaranteed,
            cgroups,
            shared,
            next: 1 << 40,
            keep: ws.keep,
        })
    }

    /// The daemon's configuration; `nri`: with `[nri]` on, on the socket
    /// of [`Self::nri_socket`].
    fn config(&self, log_level: &str, nri: bool) -> String {
        let p = |name: &str| self.dir.join(name).display().to_string();
        let nri = match nri {
            true => format!(
                "\n[nri]\nenabled = true\nsocket = \"{}\"\n",
                self.nri_socket().display()
            ),
            false => String::new(),
        };
        format!(
            r#"cgroup_root = "{cgroup}"
sysfs_root = "{sysfs}"
state_file = "{state}"
socket = "{socket}"
reserved_cpus = "0"
reconcile_interval = "1h"
shared_cgroups = ["system.slice", "user.slice"]
managed = ["kubepods.slice"]
hierarchy = "v2"
bundle_dirs = ["{bundles}"]
log_level = "{log_level}"
# No systemd beside a fake tree: with the shipped bus, every write of a
# slice tried to tell systemd, failed to connect and logged a warning.
systemd_bus = ""
kubelet_cpu_manager_state = ""
{nri}"#,
            cgroup = self.cgroup.display(),
            sysfs = self
                .dir
                .parent()
                .expect("inside the workspace")
                .join("sysfs")
                .display(),
            state = p("state/state.json"),
            socket = p("pinctl.sock"),
            bundles = self.bundles.display(),
        )
    }
}

impl Tree {
    /// Where the stand-in runtime listens (`nri_runtime::Runtime::bind`).
    fn nri_socket(&self) -> PathBuf {
        self.dir.join("nri.sock")
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        if !self.keep {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

// ---------------------------------------------------------------------------
// Measurements
/// Samples of Guaranteed pods (a Burstable one needs no write on v2).
struct Latency {
    /// Rename to `IN_CLOSE_WRITE` on the container's `cpuset.cpus`.
    write: Stats,
    /// Rename in until every shared subtree has the smaller pool.
    applied: Stats,
    /// Rename out until every shared subtree has the larger pool.
    released: Stats,
    /// Samples whose container got the wrong set.
    wrong: usize,
    example: String,
}

struct SizeResult {
    workloads: usize,
    pinned: usize,
    cgroups: usize,
    build: Duration,
    cold_ready: Duration,
    first_reconcile_ms: Option<u64>,
    cold_settle: Duration,
    warm_ready: Duration,
    reconciles: Vec<(u64, u64)>,
    mem_start: (u64, u64),
    mem_end: (u64, u64),
    latency: Latency,
    /// `CreateContainer` to its answer.
    nri: Stats,
    warnings: Vec<String>,
}

fn run_size(ws: &Workspace, pinctld: &Path, n: usize, opts: &Options) -> Result<SizeResult> {
    let t = Instant::now();
    let mut tree = Tree::build(ws, n)?;
    let build = t.elapsed();
    eprintln!(
        "[{n} workloads] tree of {} cgroups built in {:.1} s; starting pinctld",
        tree.cgroups,
        build.as_secs_f64()
    );

    // Run A: info logging; cold start, latency, memory, NRI.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let runtime = rt.block_on(async { nri_runtime::Runtime::bind(&tree.dir) });
    let mut d = Daemon::spawn(pinctld, &tree.dir, &tree.config("info", true), "a", false)?;
    // The daemon dials at once and waits 5 s for its registration.
    let conn = rt.block_on(nri_handshake(&runtime));
    let ready = d.wait_notify("READY=1", |m| m.lines().any(|l| l == "READY=1"))?;
    let cold_ready = ready - d.spawned;
    let cold_settle = d.wait_idle()?;
    d.pump_logs();
    let mem_start = d.memory()?;
    let mut ino = Inotify::init().context("cannot start inotify")?;
    let mut pool = PoolWatch::new(&tree.shared)?;
    // A Burstable container needs no write on v2 (it follows its QoS
    // slice): checked once, not timed.
    let mut warnings = burstable_untouched(&mut tree, &mut d)?;
    let latency = {
        let _perf = Perf::start(
            opts.perf.as_deref(),
            &d,
            &format!("n{n}-latency-{}", Qos::Guaranteed.name()),
        )?;
        latency(&mut tree, &mut d, &mut ino, &mut pool, opts)?
    };
    drop(pool);
    // The connection outlives the daemon: a link lost is a warning.
    let (nri, _conn) = {
        let _perf = Perf::start(opts.perf.as_deref(), &d, &format!("n{n}-nri"))?;
        rt.block_on(nri_latency(conn, &mut tree, &mut d, opts))?
    };
    let mem_end = d.memory()?;
    let stopped = d.stop()?;
    d.pump_logs();
    let first_reconcile_ms = d.first_reconcile_ms;
    warnings.append(&mut d.warnings);
    warnings.extend(exit_problem("run A", stopped));
    drop(d);

    // Run B: debug logging; warm restart and full reconciles.
    let mut d = Daemon::spawn(pinctld, &tree.dir, &tree.config("debug", false), "b", true)?;
    let ready = d.wait_notify("READY=1", |m| m.lines().any(|l| l == "READY=1"))?;
    let warm_ready = ready - d.spawned;
    d.wait_idle()?;
    d.pump_logs();
    d.reconciles.clear();
    let perf = Perf::start(opts.perf.as_deref(), &d, &format!("n{n}-reconcile"))?;
    for _ in 0..opts.hups {
        d.signal(Signal::SIGHUP)?;
        d.wait_reconcile()?;
        d.wait_idle()?;
    }
    drop(perf);
    let stopped = d.stop()?;
    d.pump_logs();
    warnings.append(&mut d.warnings);
    warnings.extend(exit_problem("run B", stopped));
    Ok(SizeResult {
        workloads: tree.workloads,
        pinned: tree.pinned,
        cgroups: tree.cgroups,
        build,
        cold_ready,
        first_reconcile_ms,
        cold_settle,
        warm_ready,
        reconciles: std::mem::take(&mut d.reconciles),
        mem_start,
        mem_end,
        latency,
        nri,
        warnings,
    })
}

/// The daemon's registration, then `Configure` and `Synchronize`, as
/// containerd makes them.
async fn nri_handshake(runtime: &nri_runtime::Runtime) -> nri_runtime::Conn {
    use pinctl::nri::api;
    let mut conn = runtime.accept().await;
    // Whole messages, as containerd writes them.
    conn.chunk = usize::MAX;
    conn.registration().await;
    let _: api::ConfigureResponse = conn
        .ask(
            "Configure",
            &api::ConfigureRequest {
                runtime_name: "bench".into(),
                runtime_version: "1".into(),
                ..Default::default()
            },
        )
        .await;
    let _: api::SynchronizeResponse = conn
        .ask("Synchronize", &api::SynchronizeRequest::default())
        .await;
    conn
}

/// `CreateContainer` samples, as [`latency`] takes pin samples.
async fn nri_latency(
    mut conn: nri_runtime::Conn,
    tree: &mut Tree,
    d: &mut Daemon,
    opts: &Options,
) -> Result<(Stats, nri_runtime::Conn)> {
    use pinctl::nri::api;
    let started = Instant::now();
    let mut answers = Vec::new();
    while answers.len() < opts.samples
        && (answers.len() < opts.min_samples || started.elapsed() < opts.budget)
    {
        tree.next += 1;
        let spec = PodSpec::new(tree.next, Qos::Guaranteed);
        let mut c = nri_runtime::container(&spec.id, "sandbox", "app", Some((100_000, 100_000)));
        if let Some(l) = c.linux.as_mut() {
            l.cgroups_path = format!("{}:cri-containerd:{}", spec.pod, spec.id);
        }
        for (k, v) in [
            ("io.kubernetes.cri.container-name", "app"),
            ("io.kubernetes.cri.sandbox-uid", spec.uid.as_str()),
        ] {
            c.annotations.insert(k.into(), v.into());
        }
        let req = api::CreateContainerRequest {
            pod: Some(nri_runtime::pod("sandbox", &spec.uid)),
            container: Some(c),
        };
        let t0 = Instant::now();
        let answer: api::CreateContainerResponse = conn.ask("CreateContainer", &req).await;
        answers.push(t0.elapsed());
        let cpus = answer
            .adjust
            .and_then(|a| a.linux?.resources?.cpu)
            .map(|c| c.cpus)
            .unwrap_or_default();
        ensure!(
            cpus.parse::<u32>().is_ok_and(|c| c != 0),
            "CreateContainer was answered {cpus:?}, not one exclusive CPU"
        );
        d.wait_idle()?;
        let removed = api::StateChangeEvent {
            event: api::event::REMOVE_CONTAINER,
            pod: req.pod,
            container: req.container,
        };
        let _: api::Empty = conn.ask("StateChange", &removed).await;
        d.wait_idle()?;
    }
    Ok((Stats::of(answers).expect("at least one sample"), conn))
}

/// What was wrong with how the daemon stopped on SIGTERM, if anything.
fn exit_problem(run: &str, stopped: Option<ExitStatus>) -> Option<String> {
    match stopped {
        Some(status) if status.success() => None,
        Some(status) => Some(format!("{run}: pinctld exited with {status} on SIGTERM")),
        None => Some(format!(
            "{run}: pinctld did not stop within 5 s of SIGTERM; killed"
        )),
    }
}

/// A Burstable pod made and removed: on v2 its container follows its QoS
/// slice, so the daemon must leave its `cpuset.cpus` empty. A warning if not.
fn burstable_untouched(tree: &mut Tree, d: &mut Daemon) -> Result<Vec<String>> {
    tree.next += 1;
    let spec = PodSpec::new(tree.next, Qos::Burstable);
    spec.create(&tree.staging, &tree.bundles)?;
    let live = tree.cgroup.join(spec.parent).join(&spec.pod);
    fs::rename(tree.staging.join(&spec.pod), &live)?;
    d.wait_idle()?;
    let own = fs::read_to_string(live.join(&spec.container).join("cpuset.cpus"))?;
    let gone = tree.staging.join(format!("gone-{}", spec.pod));
    fs::rename(&live, &gone)?;
    d.wait_idle()?;
    fs::remove_dir_all(&gone)?;
    fs::remove_dir_all(tree.bundles.join(&spec.id))?;
    Ok(if own.trim().is_empty() {
        Vec::new()
    } else {
        vec![format!(
            "a new Burstable container was written ({}): on v2 it follows its QoS slice",
            own.trim()
        )]
    })
}

/// Latency samples until the count or the time budget runs out.
fn latency(
    tree: &mut Tree,
    d: &mut Daemon,
    ino: &mut Inotify,
    pool: &mut PoolWatch,
    opts: &Options,
) -> Result<Latency> {
    let started = Instant::now();
    let mut write = Vec::new();
    let mut applied = Vec::new();
    let mut released = Vec::new();
    let mut wrong = 0;
    let mut example = String::new();
    while write.len() < opts.samples
        && (write.len() < opts.min_samples || started.elapsed() < opts.budget)
    {
        let s = sample(tree, d, ino, pool)?;
        // One exclusive CPU, never the reserved CPU 0.
        if !s.cpus.parse::<u32>().is_ok_and(|c| c != 0) {
            wrong += 1;
        }
        if example.is_empty() {
            example = s.cpus.clone();
        }
        write.push(s.write);
        applied.push(s.applied);
        released.push(s.released);
    }
    let stats = |samples| Stats::of(samples).expect("at least one sample");
    Ok(Latency {
        write: stats(write),
        applied: stats(applied),
        released: stats(released),
        wrong,
        example,
    })
}

struct Sample {
    write: Duration,
    applied: Duration,
    released: Duration,
    cpus: String,
}

/// One Guaranteed pod in and out. See the module documentation.
fn sample(
    tree: &mut Tree,
    d: &mut Daemon,
    ino: &mut Inotify,
    pool: &mut PoolWatch,
) -> Result<Sample> {
    tree.next += 1;
    let spec = PodSpec::new(tree.next, Qos::Guaranteed);
    spec.create(&tree.staging, &tree.bundles)?;
    let staged = tree.staging.join(&spec.pod);
    let live = tree.cgroup.join(spec.parent).join(&spec.pod);
    let cpus_file = staged.join(&spec.container).join("cpuset.cpus");
    let wd = ino
        .watches()
        .add(&cpus_file, WatchMask::MODIFY | WatchMask::CLOSE_WRITE)
        .with_context(|| format!("cannot watch {}", cpus_file.display()))?;
    pool.drain();

    let t0 = Instant::now();
    fs::rename(&staged, &live).with_context(|| format!("cannot move in {}", live.display()))?;
    let Some(written) = wait_close_write(ino, &wd, STEP_TIMEOUT)? else {
        let what = format!("cpuset.cpus of {} was not written", spec.container);
        return Err(d.fail(&what));
    };
    let cpus = fs::read_to_string(live.join(&spec.container).join("cpuset.cpus"))?
        .trim()
        .to_string();
    let applied = match pool.wait_all()? {
        Some(at) => at - t0,
        None => return Err(d.fail("the shared pool was not rewritten after a new pod")),
    };
    d.wait_idle()?;
    let _ = ino.watches().remove(wd);

    pool.drain();
    let gone = tree.staging.join(format!("gone-{}", spec.pod));
    let t1 = Instant::now();
    fs::rename(&live, &gone).with_context(|| format!("cannot move out {}", live.display()))?;
    let released = match pool.wait_all()? {
        Some(at) => at - t1,
        None => return Err(d.fail("the shared pool was not rewritten after a removed pod")),
    };
    d.wait_idle()?;
    fs::remove_dir_all(&gone)?;
    fs::remove_dir_all(tree.bundles.join(&spec.id))?;
    Ok(Sample {
        write: written - t0,
        applied,
        released,
        cpus,
    })
}

/// Waits for `IN_CLOSE_WRITE` on `wd`; returns when `poll` saw it.
fn wait_close_write(
    ino: &mut Inotify,
    wd: &WatchDescriptor,
    timeout: Duration,
) -> Result<Option<Instant>> {
    let deadline = Instant::now() + timeout;
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(None);
        }
        if !poll_in(ino, left)? {
            continue;
        }
        let at = Instant::now();
        let events = match ino.read_events(&mut buf) {
            Ok(events) => events,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e).context("reading inotify events"),
        };
        let mut hit = false;
        for e in events {
            if &e.wd == wd && e.mask.contains(EventMask::CLOSE_WRITE) {
                hit = true;
            }
        }
        if hit {
            return Ok(Some(at));
        }
    }
}

// ---------------------------------------------------------------------------
// The report

impl SizeResult {
    fn print_progress(&self) {
        eprintln!(
            "[{} workloads] done: cold start {} ms, latency median {} ms",
            self.workloads,
            ms(self.cold_ready),
            ms(self.latency.write.median),
        );
    }

    fn reconcile_stats(&self) -> Option<Stats> {
        Stats::of(
            self.reconciles
                .iter()
                .map(|&(us, _)| Duration::from_micros(us))
                .collect(),
        )
    }
}

fn report(results: &[SizeResult]) {
    println!();
    println!("Start-up and full reconcile (times in ms; memory in MB)");
    println!(
        "{:>9} {:>7} {:>7} {:>7} | {:>10} {:>10} {:>10} | {:>10} | {:>9} {:>9} {:>9} {:>4} | {:>6} {:>6} {:>6} {:>6}",
        "workloads",
        "pinned",
        "cgroups",
        "tree",
        "cold→READY",
        "first rec.",
        "then busy",
        "warm→READY",
        "SIGHUP min",
        "median",
        "max",
        "n",
        "RSS",
        "HWM",
        "RSS end",
        "HWM end",
    );
    for r in results {
        let rec = r.reconcile_stats();
        let known = r.reconciles.first().map_or(0, |&(_, c)| c);
        println!(
            "{:>9} {:>7} {:>7} {:>7} | {:>10} {:>10} {:>10} | {:>10} | {:>9} {:>9} {:>9} {:>4} | {:>6} {:>6} {:>6} {:>6}",
            r.workloads,
            r.pinned,
            format!("{}/{}", r.cgroups, known),
            format!("{:.1}s", r.build.as_secs_f64()),
            ms(r.cold_ready),
            r.first_reconcile_ms
                .map_or("-".to_string(), |m| format!("{m}.000")),
            ms(r.cold_settle),
            ms(r.warm_ready),
            rec.as_ref().map_or("-".into(), |s| ms(s.min)),
            rec.as_ref().map_or("-".into(), |s| ms(s.median)),
            rec.as_ref().map_or("-".into(), |s| ms(s.max)),
            rec.as_ref().map_or(0, |s| s.n),
            mb(r.mem_start.0),
            mb(r.mem_start.1),
            mb(r.mem_end.0),
            mb(r.mem_end.1),
        );
    }
    println!(
        "  cgroups: made / known to the daemon; tree: time to build the fake tree; cold→READY: spawn to READY=1 with every cpuset empty;"
    );
    println!(
        "  first rec.: the daemon's `first reconcile done elapsed_ms`; then busy: how long it kept working after READY=1 (its own writes' events);"
    );
    println!(
        "  warm→READY: restart on the reconciled tree; SIGHUP: `reconcile done elapsed_us` (debug log); RSS/HWM: after start-up, and at the end of the latency runs"
    );

    println!();
    println!("mkdir (rename of a staged pod) → daemon's write of the container's cpuset.cpus (ms)");
    println!(
        "{:>9} {:>10} {:>5} | {:>8} {:>8} {:>8} {:>8} {:>8} | {:>19} {:>16} | {:>5} cpuset.cpus (first sample)",
        "workloads",
        "kind",
        "n",
        "min",
        "median",
        "p90",
        "p99",
        "max",
        "pool shrunk med/p99",
        "regrown med/p99",
        "wrong",
    );
    let pair = |s: &Stats| format!("{}/{}", ms(s.median), ms(s.p99));
    for r in results {
        let l = &r.latency;
        let example = if l.example.len() > 28 {
            format!("{}…", &l.example[..27])
        } else {
            l.example.clone()
        };
        println!(
            "{:>9} {:>10} {:>5} | {:>8} {:>8} {:>8} {:>8} {:>8} | {:>19} {:>16} | {:>5} {}",
            r.workloads,
            Qos::Guaranteed.name(),
            l.write.n,
            ms(l.write.min),
            ms(l.write.median),
            ms(l.write.p90),
            ms(l.write.p99),
            ms(l.write.max),
            pair(&l.applied),
            pair(&l.released),
            l.wrong,
            example,
        );
    }
    println!(
        "  pool shrunk / regrown: rename in / out → the last of the shared subtrees' cpuset.cpus written (v2: the QoS and shared slices; what lies below follows)"
    );
    println!(
        "  a Burstable container is not written on v2 (it follows its QoS slice): checked once per size, not timed"
    );

    println!();
    println!(
        "NRI CreateContainer of a Guaranteed container (1 CPU) → its answer, at the stand-in runtime (ms)"
    );
    println!(
        "{:>9} {:>5} | {:>8} {:>8} {:>8} {:>8} {:>8}",
        "workloads", "n", "min", "median", "p90", "p99", "max",
    );
    for r in results {
        let s = &r.nri;
        println!(
            "{:>9} {:>5} | {:>8} {:>8} {:>8} {:>8} {:>8}",
            r.workloads,
            s.n,
            ms(s.min),
            ms(s.median),
            ms(s.p90),
            ms(s.p99),
            ms(s.max),
        );
    }

    for r in results {
        if !r.warnings.is_empty() {
            println!();
            println!(
                "{} warnings from pinctld at {} workloads, first: {}",
                r.warnings.len(),
                r.workloads,
                r.warnings[0]
            );
        }
    }

    println!();
    println!("Targets");
    let verdict = |ok: bool| if ok { "PASS" } else { "FAIL" };
    let at = |n: usize| results.iter().find(|r| r.workloads == n);
    match at(TARGET_LATENCY_AT) {
        Some(r) => {
            let l = &r.latency;
            println!(
                "  latency at {} workloads ({}, n={}): median {} ms < {} ms: {}; p99 {} ms < {} ms: {}",
                r.workloads,
                Qos::Guaranteed.name(),
                l.write.n,
                ms(l.write.median),
                ms(TARGET_MEDIAN),
                verdict(l.write.median < TARGET_MEDIAN),
                ms(l.write.p99),
                ms(TARGET_P99),
                verdict(l.write.p99 < TARGET_P99),
            );
        }
        None => println!("  latency at {TARGET_LATENCY_AT} workloads: not measured"),
    }
    match at(TARGET_LATENCY_AT) {
        Some(r) => println!(
            "  NRI CreateContainer at {} workloads (n={}): p99 {} ms ≤ {} ms: {}",
            r.workloads,
            r.nri.n,
            ms(r.nri.p99),
            ms(TARGET_NRI_P99),
            verdict(r.nri.p99 <= TARGET_NRI_P99),
        ),
        None => println!("  NRI CreateContainer at {TARGET_LATENCY_AT} workloads: not measured"),
    }
    // The smallest tree of at least 10,000 cgroups is the target; every
    // larger one is shown too.
    let big: Vec<&SizeResult> = results
        .iter()
        .filter(|r| r.cgroups >= TARGET_RECONCILE_CGROUPS)
        .collect();
    if big.is_empty() {
        println!("  full reconcile of {TARGET_RECONCILE_CGROUPS} cgroups: not measured");
    }
    for (i, r) in big.iter().enumerate() {
        match r.reconcile_stats() {
            Some(s) => println!(
                "  full reconcile of {} cgroups ({} workloads): median {} ms, max {} ms < {} ms: {}",
                r.cgroups,
                r.workloads,
                ms(s.median),
                ms(s.max),
                ms(TARGET_RECONCILE),
                if i == 0 {
                    verdict(s.max < TARGET_RECONCILE)
                } else {
                    "(beyond the target's size)"
                },
            ),
            None => println!("  full reconcile at {} workloads: no log line", r.workloads),
        }
    }
    match at(TARGET_BIG) {
        Some(r) => {
            let hwm = r.mem_start.1.max(r.mem_end.1);
            println!(
                "  memory at {} workloads: RSS {} MB after start-up, {} MB at the end, peak (HWM) {} MB < {} MB: {}",
                r.workloads,
                mb(r.mem_start.0),
                mb(r.mem_end.0),
                mb(hwm),
                mb(TARGET_RSS_KB),
                verdict(r.mem_start.0.max(r.mem_end.0) < TARGET_RSS_KB),
            );
        }
        None => println!("  memory at {TARGET_BIG} workloads: not measured"),
    }
}
