//! Containers from a real runtime (issue #15): Debian's `runc` with the
//! cgroupfs driver, started the way containerd starts them, against
//! `pinctld` on this machine's cgroup v1. Only the kernel's view counts:
//! `Cpus_allowed_list` of each container's own process.
//!
//! Each container is a bundle where containerd keeps them
//! (`<tmp>/io.containerd.runtime.v2.task/k8s.io/<id>/config.json`, which is
//! the daemon's `bundle_dirs`), made by `runc spec` and then given its
//! process (`busybox sleep`, from a root filesystem of one static busybox),
//! its cgroup (`linux.cgroupsPath` below the test's top cgroup), its
//! annotations and its CPU limit. `runc run -d` makes the cgroups (every v1
//! hierarchy, and the unified one on a hybrid host), writes the limits and
//! starts the process; the test never touches the container's cgroups.
//!
//! These run with the other real-cgroup tests (`PINCTL_REAL_CGROUP=1`) and
//! need `runc` and a static `busybox` (`apt-get install runc
//! busybox-static`): asked for and missing, they fail and say so. runc keeps
//! its state in the test's own directory (`runc --root`), never the host's;
//! [`Runc`]'s `Drop` kills and deletes every container it started before
//! the rig removes the cgroups.

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

use super::rig::*;

/// A container started by runc.
struct Started {
    id: String,
    /// Its cgroup, relative to the test's top cgroup.
    rel: String,
    /// Its process, as the kernel numbers it here.
    pid: u32,
}

/// What a test asks runc for.
struct Spec {
    /// `kubepods/burstable/pod<uid>` or `kubepods/pod<uid>` (Guaranteed).
    pod: String,
    /// The OCI annotations (the CRI's and pinctl's).
    annotations: Vec<(&'static str, String)>,
    /// A CFS quota per 100 ms period, as the kubelet sets a CPU limit.
    quota_us: Option<u64>,
}

impl Spec {
    /// A container of a new Burstable pod, asking for nothing.
    fn burstable() -> Spec {
        Spec {
            pod: format!("kubepods/burstable/pod{}", pod_uid()),
            annotations: Vec::new(),
            quota_us: None,
        }
    }

    /// A container of a new Guaranteed pod with this CPU limit.
    fn guaranteed(quota_us: u64) -> Spec {
        Spec {
            pod: format!("kubepods/pod{}", pod_uid()),
            annotations: Vec::new(),
            quota_us: Some(quota_us),
        }
    }

    fn annotate(mut self, key: &'static str, value: &str) -> Spec {
        self.annotations.push((key, value.to_string()));
        self
    }

    fn quota(mut self, quota_us: u64) -> Spec {
        self.quota_us = Some(quota_us);
        self
    }
}

/// runc, its state directory, the bundles and the root filesystem of one
/// test; dropping it kills and deletes its containers.
struct Runc {
    runc: PathBuf,
    state: PathBuf,
    bundles: PathBuf,
    rootfs: PathBuf,
    top: String,
    /// The containers still to delete: id and process.
    started: Vec<(String, u32)>,
}

/// Where `name` is found on `PATH`.
fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

fn check(what: &str, out: &Output) {
    assert!(
        out.status.success(),
        "{what}: {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Runc {
    /// runc for `rig`'s test: its state, bundles and root filesystem in the
    /// rig's directory; panics, saying what to install, when runc or a
    /// static busybox is missing.
    fn new(rig: &Rig) -> Runc {
        let runc = on_path("runc").unwrap_or_else(|| {
            panic!(
                "{}: PINCTL_REAL_CGROUP=1 runs the real-runtime tests too, and runc is not on \
                 PATH (apt-get install runc)",
                rig.test
            )
        });
        let busybox = on_path("busybox").unwrap_or_else(|| {
            panic!(
                "{}: the containers' root filesystem is one static busybox, and busybox is \
                 not on PATH (apt-get install busybox-static)",
                rig.test
            )
        });
        let rootfs = rig.tmp.path().join("rootfs");
        fs::create_dir_all(rootfs.join("bin")).expect("rootfs");
        fs::copy(&busybox, rootfs.join("bin/busybox")).expect("copy busybox into the rootfs");
        // `runc run -d` leaves the container's process to the nearest
        // subreaper: this test, which reaps it after `runc delete`. (PID 1
        // of a machine may not reap at all, and a zombie would stay.)
        nix::sys::prctl::set_child_subreaper(true).expect("PR_SET_CHILD_SUBREAPER");
        let state = rig.tmp.path().join("runc");
        fs::create_dir_all(&state).expect("runc's state directory");
        Runc {
            runc,
            state,
            bundles: rig.bundles(),
            rootfs,
            top: rig.top.clone(),
            started: Vec::new(),
        }
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new(&self.runc);
        cmd.arg("--root").arg(&self.state);
        cmd
    }

    /// Writes a bundle as containerd does and starts it with `runc run -d`.
    fn run(&mut self, rig: &Rig, spec: &Spec) -> Started {
        let n = next_id();
        let id = format!(
            "{:016x}{:016x}{:016x}{n:016x}",
            0x5eed_u64,
            std::process::id(),
            n
        );
        let rel = format!("{}/{id}", spec.pod);
        let bundle = self.bundles.join(&id);
        fs::create_dir_all(&bundle).expect("bundle directory");
        let out = self
            .command()
            .arg("spec")
            .arg("--bundle")
            .arg(&bundle)
            .output()
            .expect("run runc spec");
        check("runc spec", &out);
        let path = bundle.join("config.json");
        let mut config: Value =
            serde_json::from_str(&fs::read_to_string(&path).expect("read config.json"))
                .expect("runc spec writes JSON");
        config["process"]["terminal"] = json!(false);
        config["process"]["args"] = json!(["/bin/busybox", "sleep", "600"]);
        config["root"] = json!({ "path": self.rootfs, "readonly": true });
        config["hostname"] = json!("pinctl-test");
        config["linux"]["cgroupsPath"] = json!(format!("/{}/{rel}", self.top));
        let annotations: serde_json::Map<String, Value> = spec
            .annotations
            .iter()
            .map(|(k, v)| ((*k).to_string(), json!(v)))
            .collect();
        config["annotations"] = Value::Object(annotations);
        if let Some(quota) = spec.quota_us {
            config["linux"]["resources"]["cpu"] = json!({ "quota": quota, "period": 100_000 });
        }
        fs::write(&path, serde_json::to_vec_pretty(&config).expect("JSON")).expect("write");
        rig.note(&format!("runc run -d {id} in {rel}"));
        // The container's process inherits runc's stdio: never a pipe the
        // test waits on, or the wait lasts as long as the container.
        let log = bundle.join("runc.log");
        let file = || fs::File::create(&log).expect("runc's log");
        let status = self
            .command()
            .args(["run", "-d", "--bundle"])
            .arg(&bundle)
            .arg(&id)
            .stdin(Stdio::null())
            .stdout(file())
            .stderr(file())
            .status()
            .expect("run runc run");
        assert!(
            status.success(),
            "runc run -d {id}: {status}: {}",
            fs::read_to_string(&log).unwrap_or_default()
        );
        let pid = self.pid(&id);
        self.started.push((id.clone(), pid));
        Started { id, rel, pid }
    }

    /// The container's process, from `runc state`.
    fn pid(&self, id: &str) -> u32 {
        let out = self
            .command()
            .args(["state", id])
            .output()
            .expect("run runc state");
        check(&format!("runc state {id}"), &out);
        let state: Value = serde_json::from_slice(&out.stdout).expect("runc state is JSON");
        let pid = state["pid"].as_u64().unwrap_or(0);
        assert!(pid > 0, "runc state {id} gives no pid: {state}");
        pid as u32
    }

    /// `runc delete --force`: the process killed, the cgroups removed.
    fn delete(&mut self, rig: &Rig, c: &Started) {
        rig.note(&format!("runc delete --force {}", c.id));
        let out = self
            .command()
            .args(["delete", "--force", &c.id])
            .output()
            .expect("run runc delete");
        check(&format!("runc delete --force {}", c.id), &out);
        reap(c.pid);
        self.started.retain(|(id, _)| id != &c.id);
    }
}

/// Waits (at most 5 s) for a killed container's process to exit, and reaps it.
fn reap(pid: u32) {
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    let pid = nix::unistd::Pid::from_raw(pid as i32);
    for _ in 0..500 {
        match waitpid(pid, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => std::thread::sleep(std::time::Duration::from_millis(10)),
            // Reaped, or not ours to reap (ECHILD).
            _ => return,
        }
    }
}

impl Drop for Runc {
    fn drop(&mut self) {
        for (id, pid) in std::mem::take(&mut self.started) {
            let _ = self
                .command()
                .args(["delete", "--force", &id])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            reap(pid);
        }
    }
}

/// The state file names the workload, as the CRI annotations name it.
fn expect_saved(rig: &Rig, key: &str) {
    let state = rig.tmp.path().join("state.json");
    wait_for(
        &format!("the state file names {key}"),
        EVENT_TIMEOUT,
        || {
            let text = fs::read_to_string(&state).map_err(|e| e.to_string())?;
            if text.contains(key) {
                Ok(())
            } else {
                Err(format!("it holds {text}"))
            }
        },
    );
}

/// A container that asks by annotation gets the exclusive CPU from its
/// first instruction on; a plain one beside it keeps off it; deleting the
/// first gives the CPU back.
#[test]
fn runc_annotated_container_gets_the_exclusive_cpu_and_gives_it_back() {
    let Some(mut rig) =
        Rig::new("runc_annotated_container_gets_the_exclusive_cpu_and_gives_it_back")
    else {
        return;
    };
    let mut runc = Runc::new(&rig);
    let (all, exclusive, shared) = (rig.all.clone(), rig.exclusive.clone(), rig.shared.clone());
    rig.start_daemon();
    let plain = runc.run(&rig, &Spec::burstable());
    rig.expect_allowed(plain.pid, &all);
    let asking = runc.run(&rig, &Spec::burstable().annotate("pinctl.io/cpus", "1"));
    rig.expect_allowed(asking.pid, &exclusive);
    rig.expect_cpus(&asking.rel, &exclusive);
    rig.expect_allowed(plain.pid, &shared);

    runc.delete(&rig, &asking);
    rig.expect_allowed(plain.pid, &all);
    rig.expect_cpus(&plain.rel, &all);
}

/// A Guaranteed pod's container with a whole-CPU limit, as runc writes it
/// (`cpu.cfs_quota_us` from the bundle), is pinned by the kubelet rule.
#[test]
fn runc_guaranteed_container_is_pinned_by_its_cpu_limit() {
    let Some(mut rig) = Rig::new("runc_guaranteed_container_is_pinned_by_its_cpu_limit") else {
        return;
    };
    let mut runc = Runc::new(&rig);
    let (all, exclusive, shared) = (rig.all.clone(), rig.exclusive.clone(), rig.shared.clone());
    rig.start_daemon();
    let plain = runc.run(&rig, &Spec::burstable().quota(50_000));
    let guaranteed = runc.run(&rig, &Spec::guaranteed(100_000));
    rig.expect_allowed(guaranteed.pid, &exclusive);
    rig.expect_allowed(plain.pid, &shared);
    // Half a CPU is not a whole number: the Burstable container shares.
    rig.expect_cpus(&plain.rel, &shared);
    runc.delete(&rig, &guaranteed);
    rig.expect_allowed(plain.pid, &all);
}

/// The workload is the pod's container, not the runtime's id: after a
/// daemon crash and restart the running container keeps its CPU untouched,
/// and the container restarted under a new id (as the kubelet restarts one)
/// gets it back.
#[test]
fn runc_restarted_container_keeps_its_cpu_across_a_daemon_crash() {
    let Some(mut rig) = Rig::new("runc_restarted_container_keeps_its_cpu_across_a_daemon_crash")
    else {
        return;
    };
    let mut runc = Runc::new(&rig);
    let (exclusive, shared) = (rig.exclusive.clone(), rig.shared.clone());
    rig.start_daemon();
    let spec = Spec::burstable();
    let uid = spec.pod.rsplit_once("pod").expect("a pod").1.to_string();
    let spec = spec
        .annotate("io.kubernetes.cri.container-name", "app")
        .annotate("io.kubernetes.cri.sandbox-uid", &uid)
        .annotate("pinctl.io/cpus", "1");
    let first = runc.run(&rig, &spec);
    let plain = runc.run(&rig, &Spec::burstable());
    rig.expect_allowed(first.pid, &exclusive);
    rig.expect_allowed(plain.pid, &shared);
    let key = format!("pod:{uid}/app");
    expect_saved(&rig, &key);

    rig.crash_daemon();
    rig.start_daemon();
    rig.expect_cpus_stay(
        &first.rel,
        &exclusive,
        std::time::Duration::from_millis(300),
    );
    rig.expect_allowed(first.pid, &exclusive);
    rig.expect_allowed(plain.pid, &shared);

    runc.delete(&rig, &first);
    let second = runc.run(&rig, &spec);
    rig.expect_allowed(second.pid, &exclusive);
    rig.expect_allowed(plain.pid, &shared);
    expect_saved(&rig, &key);
}
