//! The VM test bed (`tests/vm/run`) as a cargo test: pinctld on real kernels
//! with real topologies (1 socket × 4 cores × 2 threads; 2 sockets × 4 cores ×
//! 2 threads with a NUMA node per socket; 2 sockets with 2 NUMA nodes each),
//! on cgroup v2 and v1, booted under qemu with software emulation.
//!
//! Opt-in: unless `PINCTL_VM=1`, the test prints one line saying it is skipped
//! and returns. With `PINCTL_VM=1` it runs the driver, which needs
//! `qemu-system-x86_64`, a kernel in `/boot` and a static busybox (`.ci/run`
//! installs them with apt), and fails with every failing check and the guest's
//! diagnostics. `PINCTL_VM_ONLY` and `PINCTL_VM_SCENARIOS` pass through to the
//! driver (see `tests/vm/run`). It takes several minutes.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

const ENV: &str = "PINCTL_VM";

#[test]
fn vm_suite() {
    if std::env::var_os(ENV).is_none_or(|v| v != "1") {
        // Straight to the stream, not `eprintln!`, which the harness captures:
        // a skipped test should say so in a plain `cargo test`.
        let line = format!(
            "vm_suite: skipped: {ENV} is not 1; set {ENV}=1 to boot pinctld in qemu VMs on \
             cgroup v1 and v2 with multi-socket NUMA topologies (tests/vm/run; needs \
             qemu-system-x86, linux-image-amd64, busybox-static)\n"
        );
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
        return;
    }
    let driver = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vm/run");
    let mut child = Command::new("bash")
        .arg(driver)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {driver}: {e}"));
    // Stream the report as it comes (a run takes minutes) and keep it for the
    // failure message.
    let mut report = Vec::new();
    let stdout = child.stdout.take().expect("piped stdout");
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("read the driver's output");
        let _ = writeln!(std::io::stderr().lock(), "{line}");
        report.push(line);
    }
    let status = child.wait().expect("wait for the driver");
    if !status.success() {
        let failing: Vec<&String> = report
            .iter()
            .filter(|l| l.starts_with("FAIL ") || l.contains("DID NOT FINISH"))
            .collect();
        let mut summary: Vec<&String> = report
            .iter()
            .skip_while(|l| !l.starts_with("===== VM suite"))
            .collect();
        if summary.is_empty() {
            // The driver stopped before its summary (a script error, not a
            // check): its last lines say where.
            summary = report.iter().rev().take(30).rev().collect();
        }
        panic!(
            "the VM suite failed ({status}); failing checks:\n{}\n{}",
            failing
                .iter()
                .map(|l| l.as_str())
                .collect::<Vec<_>>()
                .join("\n"),
            summary
                .iter()
                .map(|l| l.as_str())
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}
