//! `pinctl verify --noise` (issue #42) on a fake kernel in a tempdir: a
//! tracefs whose instances the fake makes with a pre-filled `trace_pipe`
//! (it cannot trace), a /proc with a workload, a movable kernel thread, a
//! per-CPU one, an unbound kworker and a neighbour, and `/proc/interrupts`
//! and `/proc/softirqs` that grow between the two reads. Checks the
//! classes, the JSON's shape, the failure (exit 1) and that every instance
//! is removed, on success and on error.
//!
//! `real_trace_of_cpu_0` runs only with `PINCTL_REAL_TRACE=1` (root, a
//! mounted tracefs): it traces CPU 0 of this machine for a second.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use pinctl::api;
use pinctl::cgroup::Version;
use pinctl::cli::noise::{Given, How, given_target, render, run_given_with, run_with, verdict};
use pinctl::cli::style::Style;
use pinctl::cli::verify::{self, Roots};
use pinctl::io::{Entry, Fs, RealFs};
use pinctl::noise::{self, Class, Report, Target};

const PF_KTHREAD: u32 = 0x0020_0000;
const PF_NO_SETAFFINITY: u32 = 0x0400_0000;
const JOB: &str = "hpc.slice/job.scope";

/// The real filesystem, but `mkdir` of a directory in an `instances`
/// directory makes what tracefs would put in it, with `trace_pipe` holding
/// `trace` (or `moves` for a `-moves` instance); its `rmdir` removes the
/// whole directory, as tracefs does. `/proc/interrupts` and
/// `/proc/softirqs` read as `before` the first time and `after` from then
/// on. Every write is kept.
struct FakeKernel {
    trace: String,
    moves: String,
    cpus: Vec<u32>,
    lost: u64,
    counts: [(String, String); 2],
    reads: [AtomicUsize; 2],
    writes: Mutex<Vec<(PathBuf, String)>>,
    made: Mutex<Vec<PathBuf>>,
    /// A file whose write fails, to see a failure clean up.
    fail_write: Option<&'static str>,
}

impl FakeKernel {
    fn instance(&self, dir: &Path) -> io::Result<()> {
        let moves = dir.to_string_lossy().ends_with("-moves");
        let put = |rel: &str, text: &str| -> io::Result<()> {
            let path = dir.join(rel);
            std::fs::create_dir_all(path.parent().unwrap())?;
            std::fs::write(path, text)
        };
        put("tracing_on", "1\n")?;
        put("buffer_size_kb", "1408\n")?;
        put("tracing_cpumask", "f\n")?;
        put("trace_pipe", if moves { &self.moves } else { &self.trace })?;
        for event in [
            "sched/sched_switch",
            "sched/sched_process_fork",
            "cgroup/cgroup_attach_task",
        ] {
            put(&format!("events/{event}/enable"), "0\n")?;
            put(&format!("events/{event}/filter"), "none\n")?;
        }
        for cpu in &self.cpus {
            put(&format!("per_cpu/cpu{cpu}/buffer_size_kb"), "1408\n")?;
            put(
                &format!("per_cpu/cpu{cpu}/stats"),
                &format!(
                    "entries: 0\noverrun: {}\ncommit overrun: 0\nbytes: 0\ndropped events: 0\nread events: 0\n",
                    self.lost
                ),
            )?;
        }
        Ok(())
    }

    fn writes_to(&self, file: &str) -> Vec<String> {
        self.writes
            .lock()
            .unwrap()
            .iter()
            .filter(|(p, _)| p.ends_with(file))
            .map(|(_, d)| d.clone())
            .collect()
    }
}

impl Fs for FakeKernel {
    fn read(&self, path: &Path) -> io::Result<String> {
        for (i, name) in ["interrupts", "softirqs"].iter().enumerate() {
            if path.ends_with(format!("proc/{name}")) {
                let n = self.reads[i].fetch_add(1, Ordering::SeqCst);
                let (before, after) = &self.counts[i];
                return Ok(if n == 0 {
                    before.clone()
                } else {
                    after.clone()
                });
            }
        }
        RealFs.read(path)
    }
    fn write(&self, path: &Path, data: &str) -> io::Result<()> {
        self.writes
            .lock()
            .unwrap()
            .push((path.to_path_buf(), data.to_string()));
        if self.fail_write.is_some_and(|f| path.ends_with(f)) {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        RealFs.write(path, data)
    }
    fn read_dir(&self, path: &Path) -> io::Result<Vec<Entry>> {
        RealFs.read_dir(path)
    }
    fn get_xattr(&self, path: &Path, name: &str) -> io::Result<Option<Vec<u8>>> {
        RealFs.get_xattr(path, name)
    }
    fn set_xattr(&self, path: &Path, name: &str, value: &[u8]) -> io::Result<()> {
        RealFs.set_xattr(path, name, value)
    }
    fn mkdir(&self, path: &Path) -> io::Result<()> {
        RealFs.mkdir(path)?;
        if path.parent().is_some_and(|p| p.ends_with("instances")) {
            self.made.lock().unwrap().push(path.to_path_buf());
            self.instance(path)?;
        }
        Ok(())
    }
    /// tracefs removes an instance with its files, but not while one is
    /// open (`trace_pipe`): EBUSY.
    fn rmdir(&self, path: &Path) -> io::Result<()> {
        if !path.parent().is_some_and(|p| p.ends_with("instances")) {
            return std::fs::remove_dir(path);
        }
        for fd in std::fs::read_dir("/proc/self/fd")? {
            if std::fs::read_link(fd?.path()).is_ok_and(|f| f.starts_with(path)) {
                return Err(io::Error::from_raw_os_error(libc::EBUSY));
            }
        }
        std::fs::remove_dir_all(path)
    }
    fn exists(&self, path: &Path) -> io::Result<bool> {
        RealFs.exists(path)
    }
}

fn put(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// A task under `proc`: its `stat` (with `flags`), `status` and `cgroup`.
fn task(proc: &Path, pid: u32, comm: &str, flags: u32, allowed: &str, cgroup: &str) {
    let dir = proc.join(pid.to_string());
    put(
        &dir.join("stat"),
        &format!("{pid} ({comm}) S 2 0 0 0 -1 {flags} 0 0 0 0 0 0 0 0 20 0 1 0 100 0 0\n"),
    );
    put(
        &dir.join("status"),
        &format!("Name:\t{comm}\nTgid:\t{pid}\nCpus_allowed_list:\t{allowed}\n"),
    );
    put(&dir.join("cgroup"), &format!("0::/{cgroup}\n"));
}

/// A switch line on `cpu` from the idle task to `comm` (`pid`).
fn switch(cpu: u32, pid: u32, comm: &str) -> String {
    format!(
        "          <idle>-0       [{cpu:03}] d..2.  100.000001: sched_switch: prev_comm=swapper/{cpu} prev_pid=0 prev_prio=120 prev_state=R ==> next_comm={comm} next_pid={pid} next_prio=120\n"
    )
}

const INTERRUPTS_BEFORE: &str = "\
           CPU0       CPU1       CPU2       CPU3
  24:          1          0          0          0   IO-APIC   5-edge      ACPI:Ged
  36:          0        100          0          0   PCI-MSIX-0000:00:02.0   1-edge      virtio1-req.0
 LOC:       1000       1000       1000       1000   Local timer interrupts
 RES:          5          5          5          5   Rescheduling interrupts
 ERR:          0
";

const INTERRUPTS_AFTER: &str = "\
           CPU0       CPU1       CPU2       CPU3
  24:          9          0          0          0   IO-APIC   5-edge      ACPI:Ged
  36:          0        103          0          0   PCI-MSIX-0000:00:02.0   1-edge      virtio1-req.0
 LOC:       2000       1100       1010       1000   Local timer interrupts
 RES:          5          5          5          5   Rescheduling interrupts
 ERR:          3
";

const SOFTIRQS_BEFORE: &str = "\
                    CPU0       CPU1       CPU2       CPU3
          HI:          0          0          0          0
       TIMER:         10         10         10         10
         RCU:          7          7          7          7
";

const SOFTIRQS_AFTER: &str = "\
                    CPU0       CPU1       CPU2       CPU3
          HI:          0          0          0          0
       TIMER:         90         30         10         10
         RCU:          7          7          8          7
";

/// The test world: CPUs 1-2 are the job's (v2 cgroup tree with its process
/// 100 and threads 100-101), the kernel's threads, a neighbour, and a
/// trace of what ran.
struct World {
    dir: tempfile::TempDir,
    fs: FakeKernel,
    status: api::Status,
}

impl World {
    fn new(housekeeping: Option<api::Housekeeping>) -> World {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let cg = root.join("cgroup");
        put(&cg.join("cgroup.controllers"), "cpuset cpu\n");
        put(&cg.join(JOB).join("cpuset.cpus.effective"), "1-2\n");
        put(&cg.join(JOB).join("cgroup.procs"), "100\n");
        let proc = root.join("proc");
        task(&proc, 100, "job", 0x0040_0000, "1-2", JOB);
        std::fs::create_dir_all(proc.join("100/task/100")).unwrap();
        std::fs::create_dir_all(proc.join("100/task/101")).unwrap();
        task(&proc, 12, "rcu_preempt", PF_KTHREAD, "0-3", "");
        task(
            &proc,
            30,
            "ksoftirqd/2",
            PF_KTHREAD | PF_NO_SETAFFINITY,
            "2",
            "",
        );
        task(
            &proc,
            123,
            "kworker/u8:2-events_unbound",
            PF_KTHREAD | PF_NO_SETAFFINITY,
            "0-3",
            "",
        );
        task(
            &proc,
            500,
            "stress",
            0x0040_0000,
            "0-3",
            "system.slice/stress.service",
        );
        // A stale instance of a process that is gone, and one of a live one.
        std::fs::create_dir_all(root.join("tracing/instances/pinctl-noise-999999")).unwrap();
        std::fs::create_dir_all(root.join("tracing/instances/pinctl-noise-100")).unwrap();
        // The job's own threads (one born while tracing), the kernel's, a
        // neighbour, a kworker gone before it could be looked up, and
        // switches on CPU 3, which is not measured.
        let mut trace = String::new();
        for _ in 0..3 {
            trace.push_str(&switch(1, 100, "job"));
            trace.push_str(&switch(1, 101, "job"));
        }
        trace.push_str("job-100 [001] ..... 100.2: sched_process_fork: comm=job pid=100 child_comm=job child_pid=102\n");
        trace.push_str(&switch(2, 102, "job"));
        trace.push_str(&switch(1, 12, "rcu_preempt"));
        trace.push_str(&switch(1, 12, "rcu_preempt"));
        trace.push_str(&switch(2, 30, "ksoftirqd/2"));
        trace.push_str(&switch(1, 123, "kworker/u8:2"));
        trace.push_str(&switch(2, 124, "kworker/u8:3"));
        trace.push_str(&switch(2, 500, "stress"));
        trace.push_str(&switch(3, 500, "stress"));
        trace.push_str("# a comment\nnonsense [ ] line\n");
        // `kubectl exec`: a task moved into the job's cgroup, gone since.
        trace.push_str(&switch(1, 700, "runc:[2:INIT]"));
        let moves = format!(
            "runc-9 [000] ..... 100.3: cgroup_attach_task: dst_root=0 dst_id=9 dst_level=2 dst_path=/{JOB} pid=700 comm=runc:[2:INIT]\n"
        );
        let mut status = pinctl_status();
        status.housekeeping = housekeeping;
        World {
            fs: FakeKernel {
                trace,
                moves,
                cpus: vec![0, 1, 2, 3],
                lost: 0,
                counts: [
                    (INTERRUPTS_BEFORE.into(), INTERRUPTS_AFTER.into()),
                    (SOFTIRQS_BEFORE.into(), SOFTIRQS_AFTER.into()),
                ],
                reads: Default::default(),
                writes: Mutex::new(Vec::new()),
                made: Mutex::new(Vec::new()),
                fail_write: None,
            },
            dir,
            status,
        }
    }

    fn roots(&self) -> Roots {
        Roots {
            cgroup_root: self.dir.path().join("cgroup"),
            proc_root: self.dir.path().join("proc"),
            sysfs_root: self.dir.path().join("sys"),
        }
    }

    fn tracefs(&self) -> PathBuf {
        self.dir.path().join("tracing")
    }

    /// Measures through the library, "waiting" 30 s at once.
    fn measure(&self) -> Result<Report, noise::NoiseError> {
        let roots = self.roots();
        let threads = verify::workload_threads(&self.fs, &self.status, &roots).unwrap();
        let target = Target::of(&self.status, &threads);
        assert_eq!(target.version, Version::V2);
        noise::measure(
            &self.fs,
            &noise::Roots {
                tracefs: self.tracefs(),
                proc_root: roots.proc_root,
            },
            &target,
            Duration::from_secs(30),
            &mut |d| d,
        )
    }

    /// The instances left in the fake tracefs.
    fn instances(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.tracefs().join("instances"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}

/// The status document: the job on CPUs 1-2 of 0-3.
fn pinctl_status() -> api::Status {
    api::Status {
        hierarchy: "v2".into(),
        online: "0-3".parse().unwrap(),
        reserved: "0".parse().unwrap(),
        shared_pool: "0,3".parse().unwrap(),
        workloads: vec![api::Workload {
            key: format!("cgroup:{JOB}"),
            requested: 2,
            source: api::Source::Xattr,
            numa: Vec::new(),
            cgroups: vec![JOB.into()],
            cpus: Some("1-2".parse().unwrap()),
            pending: None,
            alignment: None,
            resize: None,
            near: None,
        }],
        ..api::Status::starting()
    }
}

type Row = (u32, String, Class, Option<u32>, u64, f64);

fn rows(report: &Report) -> Vec<Row> {
    report
        .sources
        .iter()
        .map(|s| (s.cpu, s.name.clone(), s.class, s.pid, s.count, s.per_minute))
        .collect()
}

#[test]
fn each_source_is_classified_and_the_instances_are_removed() {
    let w = World::new(None);
    let r = w.measure().unwrap();
    let row = |cpu, name: &str, class, pid, count: u64| {
        (cpu, name.to_string(), class, pid, count, count as f64 * 2.0)
    };
    assert_eq!(
        rows(&r),
        [
            row(1, "rcu_preempt", Class::Movable, Some(12), 2),
            row(1, "kworker/u8:2", Class::Movable, Some(123), 1),
            row(
                1,
                "LOC: Local timer interrupts",
                Class::Interrupt,
                None,
                100
            ),
            row(1, "36: virtio1-req.0", Class::Interrupt, None, 3),
            row(1, "TIMER", Class::Softirq, None, 20),
            row(2, "stress", Class::Neighbour, Some(500), 1),
            row(2, "kworker/u8:3", Class::Movable, Some(124), 1),
            row(2, "ksoftirqd/2", Class::PerCpu, Some(30), 1),
            row(2, "LOC: Local timer interrupts", Class::Interrupt, None, 10),
            row(2, "RCU", Class::Softirq, None, 1),
        ],
        "{:#?}",
        r.sources
    );
    assert_eq!(r.cpus.to_string(), "1-2");
    assert_eq!((r.duration_s, r.lost_events), (30.0, 0));
    assert!(r.movable);
    let by = |name: &str| r.sources.iter().find(|s| s.name == name).unwrap();
    assert_eq!(by("rcu_preempt").why, "housekeeping = true would move it");
    assert_eq!(
        by("stress").why,
        "a user task in cgroup /system.slice/stress.service, not the workload's"
    );
    assert_eq!(
        by("ksoftirqd/2").cure.as_deref(),
        Some("irq_affinity = true; nohz_full=1-2")
    );
    assert_eq!(
        by("36: virtio1-req.0").cure.as_deref(),
        Some("irq_affinity = true (kernel-managed ones: isolcpus=managed_irq,domain,1-2)")
    );
    let p = &r.per_minute;
    assert_eq!(
        (p.neighbour, p.movable, p.per_cpu, p.interrupt, p.softirq),
        (2.0, 8.0, 2.0, 226.0, 42.0)
    );
    assert!(
        r.notes
            .iter()
            .any(|n| n.contains("pinctl-noise-999999") && n.contains("gone")),
        "{:?}",
        r.notes
    );
    // The instance was set up as asked: only CPUs 1-2 traced, big buffers
    // there alone, the idle task filtered out; on, then off.
    let fs = &w.fs;
    assert_eq!(fs.writes_to("tracing_cpumask"), ["6"]);
    assert_eq!(fs.writes_to("per_cpu/cpu1/buffer_size_kb"), ["4096"]);
    assert!(fs.writes_to("per_cpu/cpu0/buffer_size_kb").is_empty());
    assert_eq!(fs.writes_to("sched_switch/filter"), ["next_pid != 0"]);
    assert_eq!(fs.writes_to("sched_switch/enable"), ["1"]);
    assert_eq!(fs.writes_to("cgroup_attach_task/enable"), ["1"]);
    let main = format!("pinctl-noise-{}", std::process::id());
    let on_off: Vec<String> = fs
        .writes
        .lock()
        .unwrap()
        .iter()
        .filter(|(p, _)| p.ends_with(format!("{main}/tracing_on")))
        .map(|(_, d)| d.clone())
        .collect();
    assert_eq!(on_off, ["0", "1", "0"]);
    assert_eq!(
        fs.made.lock().unwrap().len(),
        2,
        "the main and the moves instance"
    );
    assert_eq!(
        w.instances(),
        ["pinctl-noise-100"],
        "ours are removed, a stale one too, a live process's is kept"
    );
}

/// `--json`: exactly the shape the benchmark scripts parse.
#[test]
fn the_json_has_exactly_the_documented_shape() {
    let w = World::new(None);
    let r = w.measure().unwrap();
    let v = serde_json::to_value(&r).unwrap();
    let keys = |v: &serde_json::Value| -> Vec<String> {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(
        keys(&v),
        [
            "cpus",
            "duration_s",
            "lost_events",
            "movable",
            "per_minute",
            "sources"
        ]
    );
    assert_eq!(
        keys(&v["per_minute"]),
        ["interrupt", "movable", "neighbour", "per_cpu", "softirq"]
    );
    assert_eq!(
        keys(&v["sources"][0]),
        [
            "class",
            "count",
            "cpu",
            "cure",
            "name",
            "per_minute",
            "pid",
            "why"
        ]
    );
    assert_eq!(v["duration_s"], 30.0);
    assert_eq!(v["cpus"], "1-2");
    assert_eq!(v["movable"], true);
    assert_eq!(v["per_minute"]["movable"], 8.0);
    assert_eq!(
        v["sources"][0],
        serde_json::json!({
            "cpu": 1, "class": "movable", "name": "rcu_preempt", "pid": 12,
            "count": 2, "per_minute": 4.0,
            "why": "housekeeping = true would move it", "cure": null
        })
    );
    let interrupt = v["sources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["class"] == "interrupt")
        .unwrap();
    assert_eq!(interrupt["pid"], serde_json::Value::Null);
    // It reads back.
    let back: Report = serde_json::from_value(v).unwrap();
    assert_eq!(back.sources, r.sources);
}

/// With `housekeeping` on, a movable thread that still ran says why it was
/// not moved; only per-CPU work and interrupts ran: exit 0.
#[test]
fn housekeeping_on_says_why_and_a_quiet_cpu_passes() {
    let hk = api::Housekeeping {
        on: true,
        away: "1-2".parse().unwrap(),
        failed: vec!["kthread 12 (rcu_preempt): Invalid argument".into()],
        ..api::Housekeeping::default()
    };
    let w = World::new(Some(hk));
    let r = w.measure().unwrap();
    let rcu = r.sources.iter().find(|s| s.name == "rcu_preempt").unwrap();
    assert_eq!(
        rcu.why,
        "housekeeping is on; the kernel refused: kthread 12 (rcu_preempt): Invalid argument"
    );
    assert!(verdict(&r).is_err());

    // Only the kernel's per-CPU thread and the interrupts.
    let mut w = World::new(None);
    w.fs.trace = [switch(1, 100, "job"), switch(2, 30, "ksoftirqd/2")].concat();
    let r = w.measure().unwrap();
    assert!(!r.movable, "{:#?}", r.sources);
    assert!(r.sources.iter().all(|s| !s.class.fails()));
    verdict(&r).unwrap();
    let keys = BTreeMap::from([
        (1, "cgroup:hpc.slice/job.scope"),
        (2, "cgroup:hpc.slice/job.scope"),
    ]);
    let text = render(&r, &keys, Style::OFF);
    assert!(
        text.contains("OK: no neighbour and no movable kernel work ran there"),
        "{text}"
    );
}

/// Lost events are counted and said; a failed write mid set-up fails the
/// measurement with the file named, and removes what was made.
#[test]
fn lost_events_are_said_and_a_failure_removes_the_instances() {
    let mut w = World::new(None);
    w.fs.lost = 7;
    let r = w.measure().unwrap();
    assert_eq!(r.lost_events, 14, "7 on each CPU measured");
    assert!(
        r.notes.iter().any(|n| n.contains("lost 7 events")),
        "{:?}",
        r.notes
    );

    let mut w = World::new(None);
    w.fs.fail_write = Some("sched_switch/enable");
    let e = w.measure().unwrap_err();
    let text = pinctl::io::chain(&e);
    assert!(
        text.starts_with("failed to write \"1\" to ")
            && text.contains("events/sched/sched_switch/enable"),
        "{text}"
    );
    assert_eq!(w.instances(), ["pinctl-noise-100"]);

    // A failure with the pipes open: they are closed before the removal.
    let mut w = World::new(None);
    w.fs.counts[0].0 = "garbage\n".into();
    let e = w.measure().unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "{}: no header of CPU columns: \"garbage\"",
            w.roots().proc_root.join("interrupts").display()
        )
    );
    assert_eq!(w.instances(), ["pinctl-noise-100"]);
}

#[test]
fn no_tracefs_is_an_error_naming_the_path() {
    let w = World::new(None);
    std::fs::remove_dir_all(w.tracefs().join("instances")).unwrap();
    let e = w.measure().unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "no tracefs at {0}: it has no instances/ (mount it: mount -t tracefs nodev {0})",
            w.tracefs().display()
        )
    );
}

/// The CLI's side: the real wait (short), the table, the failure.
#[test]
fn the_cli_prints_a_table_and_fails_on_movable_work() {
    let w = World::new(None);
    let how = How {
        tracefs: Some(w.tracefs()),
        duration: Duration::from_millis(100),
        json: false,
        style: Style::OFF,
    };
    let mut out = Vec::new();
    let err = run_with(&w.fs, &w.status, &w.roots(), &how, &mut out).unwrap_err();
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.starts_with("Noise on exclusive CPUs 1-2 over "),
        "{text}"
    );
    assert!(
        text.contains("CPU 1  cgroup:hpc.slice/job.scope\n"),
        "{text}"
    );
    assert!(
        text.lines().any(|l| l.starts_with("  rcu_preempt (12) ")
            && l.contains(" movable ")
            && l.ends_with("housekeeping = true would move it")),
        "{text}"
    );
    assert!(
        text.contains("FAIL: a neighbour or movable kernel work ran"),
        "{text}"
    );
    assert_eq!(
        err.to_string(),
        "4 sources ran on exclusive CPUs that should not (1 neighbour, 3 movable)"
    );
    assert_eq!(w.instances(), ["pinctl-noise-100"]);

    // No exclusive CPUs: said, and no failure.
    let mut status = w.status.clone();
    status.workloads.clear();
    let mut out = Vec::new();
    run_with(&w.fs, &status, &w.roots(), &how, &mut out).unwrap();
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "No exclusive CPUs: nothing to measure\n"
    );
}

/// This machine's CPU 0 for a second, as if a workload with no tasks held
/// it: everything that runs is noise. Root and a mounted tracefs; opt-in.
#[test]
fn real_trace_of_cpu_0() {
    if std::env::var_os("PINCTL_REAL_TRACE").is_none_or(|v| v != "1") {
        eprintln!("real_trace_of_cpu_0: set PINCTL_REAL_TRACE=1 (root, tracefs mounted) to run");
        return;
    }
    let tracefs = pinctl::cli::noise::tracefs_root(None);
    let target = Target {
        owners: BTreeMap::from([(0, 0)]),
        workloads: vec![noise::Workload {
            key: "cgroup:nothing".into(),
            cgroups: vec!["pinctl-noise-test-nothing".into()],
            tids: BTreeSet::new(),
        }],
        version: Version::V2,
        housekeeping: None,
        interrupts: None,
    };
    let roots = noise::Roots {
        tracefs: tracefs.clone(),
        proc_root: "/proc".into(),
    };
    // Something switches in on CPU 0 within a second: a thread of ours
    // waking every 20 ms, if nothing else.
    let busy = std::thread::spawn(|| {
        for _ in 0..60 {
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    let r = noise::measure(&RealFs, &roots, &target, Duration::from_secs(1), &mut |d| {
        std::thread::sleep(d);
        d
    })
    .unwrap();
    busy.join().unwrap();
    eprintln!("{}", render(&r, &BTreeMap::new(), Style::OFF));
    for note in &r.notes {
        eprintln!("note: {note}");
    }
    assert_eq!(r.cpus.to_string(), "0");
    assert!(r.sources.iter().all(|s| s.cpu == 0));
    assert!(
        r.sources.iter().any(|s| s.pid.is_some()),
        "no switch was read: {:#?}",
        r.sources
    );
    assert!(
        r.sources.iter().any(|s| s.class == Class::Interrupt),
        "no interrupt counted: {:#?}",
        r.sources
    );
    let left: Vec<String> = std::fs::read_dir(tracefs.join("instances"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&format!("pinctl-noise-{}", std::process::id())))
        .collect();
    assert!(left.is_empty(), "instances left: {left:?}");
}

/// The daemon's side (issue #42's last line): at each round of checks it
/// reads `/proc/interrupts` and `/proc/softirqs` and serves the exclusive
/// CPUs' totals, and only theirs, as gauges.
mod metrics {
    use std::fmt::Write as _;

    use crate::support::fake_cgroup::{Driver, Qos, Spec, Version, container_id, uid};
    use crate::support::world::{Options, World};

    /// 32 CPUs: interrupt 36 took 10 × N on CPU N, `LOC` 1000 + N; the
    /// `TIMER` softirq ran N times, `RCU` 7. `ERR` is machine-wide.
    fn tables() -> (String, String) {
        let cpus = 0..32u32;
        let header: String = cpus.clone().map(|c| format!(" CPU{c}")).collect();
        let row = |label: &str, n: &dyn Fn(u32) -> u32, desc: &str| {
            let mut line = format!("{label}:");
            for c in cpus.clone() {
                let _ = write!(line, " {:>10}", n(c));
            }
            format!("{line} {desc}\n")
        };
        let interrupts = format!(
            "{header}\n{}{} ERR:          5\n",
            row(
                "  36",
                &|c| 10 * c,
                "PCI-MSIX-0000:00:02.0 1-edge virtio1-req.0"
            ),
            row(" LOC", &|c| 1000 + c, "Local timer interrupts"),
        );
        let softirqs = format!(
            "{header}\n{}{}",
            row("  TIMER", &|c| c, ""),
            row("    RCU", &|_| 7, "")
        );
        (interrupts, softirqs)
    }

    fn metrics(w: &World) -> Result<String, String> {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(pinctl::client::Client::new(&w.socket).get("/metrics"))
            .map(|r| String::from_utf8_lossy(&r.body).into_owned())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn exclusive_cpus_interrupts_and_softirqs_are_gauges() {
        let opts = Options {
            keys: vec!["watchdog_interval = \"200ms\"".into()],
            ..Options::default()
        };
        let mut w = World::new("pinctld-noise", Version::V2, Driver::Systemd, &opts);
        let (interrupts, softirqs) = tables();
        std::fs::write(w.proc_root.join("interrupts"), interrupts).unwrap();
        std::fs::write(w.proc_root.join("softirqs"), softirqs).unwrap();
        w.start();
        let pod = w.k.pod(Qos::Guaranteed, &uid(1));
        w.tree.create(&pod, &Spec::limit(2));
        let app = w.k.container(&pod, &container_id(1));
        w.tree.create(&app, &Spec::limit(2));
        let cpus = w.wait_pinned(&app, 2);
        let mut want = Vec::new();
        for c in cpus.iter() {
            want.push(format!(
                "pinctl_exclusive_cpu_interrupts{{cpu=\"{c}\"}} {}",
                11 * c + 1000
            ));
            want.push(format!(
                "pinctl_exclusive_cpu_softirqs{{cpu=\"{c}\",kind=\"TIMER\"}} {c}"
            ));
            want.push(format!(
                "pinctl_exclusive_cpu_softirqs{{cpu=\"{c}\",kind=\"RCU\"}} 7"
            ));
        }
        let text = w.wait_for("the exclusive CPUs' interrupt gauges", || {
            let text = metrics(&w)?;
            match want.iter().find(|l| !text.contains(l.as_str())) {
                None => Ok(text),
                Some(l) => Err(format!("no {l}")),
            }
        });
        let samples = |name: &str| {
            text.lines()
                .filter(|l| l.starts_with(&format!("{name}{{")))
                .count()
        };
        assert_eq!(samples("pinctl_exclusive_cpu_interrupts"), 2, "{text}");
        assert_eq!(samples("pinctl_exclusive_cpu_softirqs"), 4, "{text}");

        // The pin ends: its CPUs' series go.
        w.tree.remove(&app);
        w.wait_for("no interrupt gauges", || {
            let text = metrics(&w)?;
            match text.contains("pinctl_exclusive_cpu_interrupts{") {
                false => Ok(()),
                true => Err(text),
            }
        });
        w.stop();
    }
}

/// `--cpus` and `--pid`: no daemon, no status. The processes named (and
/// their threads, and what they fork) are the workload; everything else is
/// judged as it would be beside a daemon, a task moved into the job's
/// cgroup included (the cgroup is no workload's now). Without `--pid`
/// every task is noise; a `--pid` that is no process is an error.
#[test]
fn cpus_and_pids_are_measured_without_a_daemon() {
    let w = World::new(None);
    let how = How {
        tracefs: Some(w.tracefs()),
        duration: Duration::from_millis(100),
        json: true,
        style: Style::OFF,
    };
    let proc_root = w.roots().proc_root;
    let given = Given {
        cpus: "1-2".parse().unwrap(),
        pids: vec![100],
    };
    let target = given_target(&w.fs, &given, &proc_root).unwrap();
    assert_eq!(target.version, Version::V2);
    assert_eq!(target.workloads.len(), 1);
    assert_eq!(target.workloads[0].key, "pid 100");
    assert!(target.workloads[0].cgroups.is_empty());
    assert_eq!(target.workloads[0].tids, BTreeSet::from([100, 101]));
    assert_eq!(target.cpus().to_string(), "1-2");

    let mut out = Vec::new();
    let err = run_given_with(&w.fs, &given, &proc_root, &how, &mut out).unwrap_err();
    let report: Report = serde_json::from_slice(&out).unwrap();
    let tasks: Vec<(u32, &str, Class)> = report
        .sources
        .iter()
        .filter(|s| s.pid.is_some())
        .map(|s| (s.cpu, s.name.as_str(), s.class))
        .collect();
    assert_eq!(
        tasks,
        [
            (1, "runc:[2:INIT]", Class::Neighbour),
            (1, "rcu_preempt", Class::Movable),
            (1, "kworker/u8:2", Class::Movable),
            (2, "stress", Class::Neighbour),
            (2, "kworker/u8:3", Class::Movable),
            (2, "ksoftirqd/2", Class::PerCpu),
        ]
    );
    assert_eq!(
        err.to_string(),
        "5 sources ran on exclusive CPUs that should not (2 neighbour, 3 movable)"
    );
    assert_eq!(w.instances(), ["pinctl-noise-100"]);

    // No --pid: the job's own threads are noise too.
    let none = Given {
        cpus: "1".parse().unwrap(),
        pids: Vec::new(),
    };
    let mut out = Vec::new();
    run_given_with(&w.fs, &none, &proc_root, &how, &mut out).unwrap_err();
    let report: Report = serde_json::from_slice(&out).unwrap();
    assert!(
        report
            .sources
            .iter()
            .any(|s| s.pid == Some(100) && s.class == Class::Neighbour),
        "{:?}",
        report.sources
    );

    let gone = Given {
        cpus: "1".parse().unwrap(),
        pids: vec![4_000_000],
    };
    let e = given_target(&w.fs, &gone, &proc_root).unwrap_err();
    assert!(
        e.to_string().starts_with("--pid 4000000: no such process"),
        "{e}"
    );
}

/// The flags as the binary takes them: `--pid` needs `--cpus`, which needs
/// `--noise` and excludes `--offline`; with them no configuration or
/// daemon is read (a missing tracefs is the first thing it meets).
#[test]
fn the_binary_takes_cpus_and_pid_with_noise_only() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_pinctl"))
            .args(args)
            .env("NO_COLOR", "1")
            .output()
            .unwrap()
    };
    let missing = dir.path().join("no-tracefs");
    let missing = missing.to_str().unwrap();
    for bad in [
        &["verify", "--pid", "1"][..],
        &["verify", "--noise", "1s", "--pid", "1"],
        &["verify", "--cpus", "1"],
        &["verify", "--noise", "1s", "--cpus", "1", "--offline"],
        &["verify", "--noise", "1s", "--cpus", "x"],
    ] {
        let out = run(bad);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {out:?}");
    }
    let me = std::process::id().to_string();
    let out = run(&[
        "verify",
        "--noise",
        "1s",
        "--cpus",
        "0",
        "--pid",
        &me,
        "--tracefs",
        missing,
        "--config",
        "/nonexistent/pinctld.toml",
        "--socket",
        "/nonexistent/pinctl.sock",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(&format!("no tracefs at {missing}")), "{err}");
}
