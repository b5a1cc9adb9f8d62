//! End-to-end tests of the `pinctl` binary: `topology` and `plan` on the sysfs
//! fixtures, as an operator runs them.

use std::path::PathBuf;
use std::process::{Command, Output};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/sysfs")
        .join(name)
}

fn pinctl(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pinctl"))
        .args(args)
        .output()
        .expect("run pinctl")
}

fn ok(args: &[&str]) -> String {
    let out = pinctl(args);
    assert!(
        out.status.success(),
        "pinctl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs a failing command; returns (exit code, stderr).
fn fails(args: &[&str]) -> (i32, String) {
    let out = pinctl(args);
    assert!(!out.status.success(), "pinctl {args:?} should fail");
    assert!(out.stdout.is_empty(), "nothing on stdout on failure");
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn topology_summary_of_a_two_socket_intel() {
    let sysfs = fixture("intel-2s-smt");
    let out = ok(&["topology", "--sysfs", sysfs.to_str().unwrap()]);
    for line in [
        "CPUs:             32 online (0-31)",
        "Sockets:          2",
        "NUMA nodes:       2",
        "L3 groups:        2",
        "Physical cores:   16",
        "Threads per core: 2",
        "Isolated CPUs:    2-3,18-19",
        "Socket 1: CPUs 8-15,24-31",
        "  NUMA node 1: CPUs 8-15,24-31",
    ] {
        assert!(out.contains(line), "missing {line:?} in:\n{out}");
    }
    // The per-CPU table: CPU 18 is isolated, on core 2 of socket 0.
    assert!(
        out.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == ["18", "2", "0", "0", "0", "0", "yes"]),
        "{out}"
    );
    assert!(!out.lines().any(|l| l.ends_with(' ')), "no trailing blanks");
}

#[test]
fn topology_summary_says_what_is_missing() {
    let sysfs = fixture("no-l3-no-numa");
    let out = ok(&["topology", "--sysfs", sysfs.to_str().unwrap()]);
    assert!(out.contains("L3 groups:        not reported"), "{out}");
    assert!(out.contains("no L3: 2 cores: [0-1] [2-3]"), "{out}");
    let sysfs = fixture("hybrid");
    let out = ok(&["topology", "--sysfs", sysfs.to_str().unwrap()]);
    assert!(out.contains("Threads per core: 1-2 (mixed)"), "{out}");
    let sysfs = fixture("offline-cpus");
    let out = ok(&["topology", "--sysfs", sysfs.to_str().unwrap()]);
    assert!(out.contains("Offline CPUs:     3,7"), "{out}");
}

#[test]
fn topology_json_feeds_plan() {
    let sysfs = fixture("epyc-2s-8n");
    let json = ok(&["topology", "--json", "--sysfs", sysfs.to_str().unwrap()]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("topo.json");
    std::fs::write(&file, &json).unwrap();
    for n in ["1", "6", "8", "20", "33"] {
        let from_sysfs = ok(&["plan", "--cpus", n, "--sysfs", sysfs.to_str().unwrap()]);
        let from_file = ok(&["plan", "--cpus", n, "--topology", file.to_str().unwrap()]);
        assert_eq!(from_sysfs, from_file, "request {n}");
    }
}

#[test]
fn plan_prints_a_list_and_json_explains_it() {
    let sysfs = fixture("epyc-2s-8n");
    let s = sysfs.to_str().unwrap();
    // 8 CPUs is one NUMA node's worth on this machine: a whole node.
    assert_eq!(ok(&["plan", "--cpus", "8", "--sysfs", s]), "0-3,32-35\n");
    let json: serde_json::Value =
        serde_json::from_str(&ok(&["plan", "--cpus", "6", "--sysfs", s, "--json"])).unwrap();
    assert_eq!(json["count"], 6);
    assert_eq!(json["alignment"]["numa_nodes"].as_array().unwrap().len(), 1);
    assert_eq!(json["alignment"]["shared_cores"], 0);
    assert_eq!(json["alignment"]["whole_cores"], 3);
    assert_eq!(json["details"].as_array().unwrap().len(), 6);
    assert!(
        json["cpus"]
            .as_str()
            .unwrap()
            .parse::<pinctl::CpuSet>()
            .is_ok()
    );
}

/// `plan --near`: the device's node first (node 0 would come first
/// without it); with `require` on it alone, refused with too few there; a
/// device that cannot be placed is refused by name.
#[test]
fn plan_near_a_device_takes_its_node() {
    let tmp = tempfile::tempdir().unwrap();
    let sys = tmp.path().join("sys");
    let proc_root = tmp.path().join("proc");
    crate::support::copy_dir(&fixture("intel-2s-smt"), &sys);
    crate::support::fake_devices::add(&sys, &proc_root);
    let (s, p) = (sys.to_str().unwrap(), proc_root.to_str().unwrap());
    let plan = |extra: &[&str]| {
        let mut args = vec!["plan", "--sysfs", s, "--proc", p];
        args.extend_from_slice(extra);
        pinctl(&args)
    };
    let node1: pinctl::CpuSet = crate::support::fake_devices::NODE1.parse().unwrap();
    for device in ["ib0", "char:195:0", crate::support::fake_devices::GPU] {
        let out = plan(&["--cpus", "4", "--near", device]);
        let got: pinctl::CpuSet = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        assert!(got.is_subset(&node1), "{device}: {got}");
    }
    let out = plan(&["--cpus", "20", "--near", "ib0"]);
    let got: pinctl::CpuSet = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    assert_eq!(got.intersection(&node1).len(), 16, "{got}");
    let out = plan(&[
        "--cpus",
        "20",
        "--near",
        "ib0",
        "--device-alignment",
        "require",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot plan 20 CPUs near ib0 (NUMA nodes 1)"),
        "{err}"
    );
    let out = plan(&["--cpus", "2", "--near", "lo"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("--near lo: "),
        "{err}"
    );
    // CDI devices, through the spec files of the directories given.
    let (etc, run) = (tmp.path().join("etc-cdi"), tmp.path().join("run-cdi"));
    crate::support::fake_devices::add_cdi(&etc, &run);
    let (e, r) = (etc.to_str().unwrap(), run.to_str().unwrap());
    let cdi = |device: &str| {
        let near = ["--cpus", "4", "--near", device];
        plan(&[&near[..], &["--cdi-spec-dir", e, "--cdi-spec-dir", r]].concat())
    };
    for device in [crate::support::fake_devices::CDI_DRIVE, "example.com/gpu=0"] {
        let out = cdi(device);
        let got: pinctl::CpuSet = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        assert!(got.is_subset(&node1), "{device}: {got}");
    }
    let out = cdi("example.com/disk=slow");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("no CDI spec in") && err.contains("broken.yaml"),
        "{err}"
    );
}

#[test]
fn plan_honours_available_reserved_and_options() {
    let sysfs = fixture("intel-2s-smt");
    let s = sysfs.to_str().unwrap();
    // Reserved by count: the lowest whole core {0,16} is never handed out.
    let got: pinctl::CpuSet = ok(&[
        "plan",
        "--cpus",
        "16",
        "--sysfs",
        s,
        "--reserved-count",
        "2",
    ])
    .trim()
    .parse()
    .unwrap();
    assert!(!got.contains(0) && !got.contains(16), "{got}");
    // Only what is available is used.
    let got = ok(&[
        "plan",
        "--cpus",
        "2",
        "--sysfs",
        s,
        "--available",
        "9-10,25-26",
    ]);
    assert_eq!(got, "9,25\n");
    // A NUMA preference.
    let got: pinctl::CpuSet = ok(&["plan", "--cpus", "4", "--sysfs", s, "--numa", "1"])
        .trim()
        .parse()
        .unwrap();
    assert!(
        got.iter()
            .all(|c| (8..16).contains(&c) || (24..32).contains(&c)),
        "{got}"
    );
    // Spread: one thread on each of four cores.
    let got = ok(&["plan", "--cpus", "4", "--sysfs", s, "--spread-cores"]);
    assert_eq!(got, "0-3\n");
    // Distribute: 4 on each socket's node.
    let got: pinctl::CpuSet = ok(&[
        "plan",
        "--cpus",
        "24",
        "--sysfs",
        s,
        "--distribute-across-numa",
    ])
    .trim()
    .parse()
    .unwrap();
    assert_eq!(got.iter().filter(|c| c % 16 < 8).count(), 12, "{got}");
}

/// `--boot-params`: the kernel command line for a node whose exclusive CPUs
/// are the planned ones, on the line after them; `boot_params` in JSON.
#[test]
fn plan_boot_params_names_the_planned_cpus_and_keeps_the_others_for_the_kernel() {
    let sysfs = fixture("intel-2s-smt");
    let s = sysfs.to_str().unwrap();
    let args = ["plan", "--cpus", "4", "--reserved", "0,16", "--sysfs", s];
    assert_eq!(ok(&args), "1-2,17-18\n");
    let line = "isolcpus=managed_irq,domain,1-2,17-18 nohz_full=1-2,17-18 rcu_nocbs=1-2,17-18 irqaffinity=0,3-16,19-31";
    let with = [&args[..], &["--boot-params"]].concat();
    assert_eq!(ok(&with), format!("1-2,17-18\n{line}\n"));
    let json: serde_json::Value =
        serde_json::from_str(&ok(&[&with[..], &["--json"]].concat())).unwrap();
    assert_eq!(json["cpus"], "1-2,17-18");
    assert_eq!(json["boot_params"], line);
    let json: serde_json::Value =
        serde_json::from_str(&ok(&[&args[..], &["--json"]].concat())).unwrap();
    assert!(json.get("boot_params").is_none(), "only when asked: {json}");

    // Offline CPUs 3 and 7 take no interrupts: they are not housekeeping CPUs.
    let sysfs = fixture("offline-cpus");
    let s = sysfs.to_str().unwrap();
    let out = ok(&["plan", "--cpus", "2", "--sysfs", s, "--boot-params"]);
    let [cpus, line] = out.lines().collect::<Vec<_>>()[..] else {
        panic!("two lines: {out:?}")
    };
    let cpus: pinctl::CpuSet = cpus.parse().unwrap();
    let online = pinctl::sysfs::Sysfs::new(&sysfs)
        .topology()
        .unwrap()
        .online()
        .clone();
    let irqaffinity: pinctl::CpuSet = line
        .rsplit_once(" irqaffinity=")
        .unwrap()
        .1
        .parse()
        .unwrap();
    assert_eq!(irqaffinity, online.difference(&cpus), "{line}");
    assert!(
        !irqaffinity.contains(3) && !irqaffinity.contains(7),
        "{line}"
    );
}

/// A plan that takes every online CPU has no line: the kernel must keep a
/// CPU of its own. Nothing is printed, not even the CPUs.
#[test]
fn plan_boot_params_refuses_a_node_without_a_housekeeping_cpu() {
    let sysfs = fixture("intel-2s-smt");
    let s = sysfs.to_str().unwrap();
    assert_eq!(ok(&["plan", "--cpus", "32", "--sysfs", s]), "0-31\n");
    let (code, err) = fails(&["plan", "--cpus", "32", "--sysfs", s, "--boot-params"]);
    assert_eq!(code, 1);
    assert_eq!(
        err,
        "pinctl: no kernel command line for the plan: CPUs 0-31 leave no online CPU: a node must keep a housekeeping CPU; reserve one with --reserved or --reserved-count\n"
    );
}

#[test]
fn plan_failures_say_why_and_exit_1() {
    let sysfs = fixture("intel-2s-smt");
    let s = sysfs.to_str().unwrap();
    let (code, err) = fails(&["plan", "--cpus", "40", "--sysfs", s]);
    assert_eq!(code, 1);
    assert_eq!(
        err,
        "pinctl: cannot plan 40 CPUs: not enough CPUs: requested 40, available 32\n"
    );
    let (code, err) = fails(&["plan", "--cpus", "3", "--full-pcpus-only", "--sysfs", s]);
    assert_eq!(code, 1);
    assert!(
        err.contains("not a multiple of 2 threads per core"),
        "{err}"
    );
    let (code, err) = fails(&["plan", "--cpus", "1", "--numa", "7", "--sysfs", s]);
    assert_eq!(code, 1);
    assert!(err.contains("NUMA node 7 does not exist"), "{err}");
    let (code, err) = fails(&["plan", "--cpus", "1", "--sysfs", "/nonexistent/sys"]);
    assert_eq!(code, 1);
    assert!(err.contains("/nonexistent/sys"), "{err}");
}

#[test]
fn bad_arguments_exit_2_and_name_the_value() {
    let (code, err) = fails(&["plan", "--cpus", "2", "--available", "0-"]);
    assert_eq!(code, 2);
    assert!(err.contains("invalid CPU list \"0-\""), "{err}");
    let (code, _) = fails(&["plan", "--cpus", "2", "--spread-cores", "--full-pcpus-only"]);
    assert_eq!(code, 2);
    let (code, _) = fails(&["plan"]);
    assert_eq!(code, 2);
}

#[test]
fn a_broken_topology_file_names_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("topo.json");
    std::fs::write(
        &file,
        "{\"cpus\": [\n  {\"cpu\": 0, \"core\": 0, \"socket\": 0, \"numa\": 0},\n  {\"cpu\": 1, \"core\": 0, \"sockt\": 0, \"numa\": 0}\n]}\n",
    )
    .unwrap();
    let f = file.to_str().unwrap();
    let (code, err) = fails(&["plan", "--cpus", "1", "--topology", f]);
    assert_eq!(code, 1);
    assert!(err.contains(f), "{err}");
    assert!(err.contains("unknown field `sockt`"), "{err}");
    assert!(err.contains("line 3"), "{err}");
    // Valid JSON, inconsistent machine: one core on two sockets.
    std::fs::write(
        &file,
        r#"{"cpus": [{"cpu": 0, "core": 0, "socket": 0, "numa": 0}, {"cpu": 1, "core": 0, "socket": 1, "numa": 0}]}"#,
    )
    .unwrap();
    let (_, err) = fails(&["plan", "--cpus", "1", "--topology", f]);
    assert!(
        err.contains("physical core 0 spans sockets 0 and 1"),
        "{err}"
    );
}
