//! The one test world of the suites that run the real `pinctld`: the daemon,
//! watchdog and socket suites. A [`World`] owns a tempdir with the fake cgroup
//! tree (the kubepods skeleton of one driver and `system.slice`), an empty fake
//! `/proc`, a directory for OCI bundles, the configuration file, the state
//! file, the daemon when it runs ([`Pinctld`], with its sd-notify messages) and
//! the log of every run.
//!
//! Each suite wraps a `World` in its own `Env` (which derefs to it) for what is
//! only its own: the daemon suite's online CPUs and invariants, the watchdog's
//! extra v1 hierarchies and tasks in its fake `/proc`, the socket suite's cast
//! of workloads and the `pinctl` binary. The configuration is written here, in
//! one place: the keys every suite sets, then a suite's own keys and
//! `[[rule]]` tables from [`Options`].
//!
//! Dropping a world stops its daemon first (see [`Pinctld`]), then removes
//! the tempdir, even when the test panics. [`World::fail`] panics with the
//! tree, the state file, the sd-notify messages and the logs.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use pinctl::CpuSet;

use super::copy_dir;
use super::fake_cgroup::{
    Driver, FakeCgroup, Layout, MEMS, ONLINE, Qos, Spec, Version, container_id, uid,
};
use super::pinctld::{Launch, Pinctld, logs_text, poll};

/// The sysfs fixture every world runs on: `intel-2s-smt` (32 CPUs; socket and
/// NUMA node 0 = `0-7,16-23`, 1 = `8-15,24-31`; core c = {c, c+16}; CPUs
/// 2-3,18-19 isolated).
pub const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/sysfs/intel-2s-smt"
);
/// `reserved_cpus` of every world.
pub const RESERVED: &str = "0,16";
/// The one shared cgroup of every world, besides the kubelet's.
pub const SYSTEM: &str = "system.slice";
/// How long the daemon may take to do what a test waits for: generous, the
/// machine may be busy (every suite runs in one process, beside the others).
pub const WAIT: Duration = Duration::from_secs(10);
/// How long start-up may take, to `READY=1`.
pub const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// How a world is made, and what its configuration says besides the keys
/// every world sets.
#[derive(Debug, Clone)]
pub struct Options {
    /// `reconcile_interval`: an hour by default, so that what a test sees was
    /// done on inotify events.
    pub reconcile_interval: &'static str,
    /// The suite's own top-level keys, one `key = value` line each.
    pub keys: Vec<String>,
    /// `[[rule]]` tables: (glob, cpus).
    pub rules: Vec<(&'static str, usize)>,
    /// Copy the sysfs fixture into the tempdir (to edit it) instead of using
    /// it in place.
    pub copy_sysfs: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            reconcile_interval: "1h",
            keys: Vec::new(),
            rules: Vec::new(),
            copy_sysfs: false,
        }
    }
}

/// Makes a suite's `Env`, which holds its [`World`] in field `w`, deref to
/// that world: the world's fields and methods are the `Env`'s, and the suite
/// adds only its own.
macro_rules! env_of_world {
    ($env:ident) => {
        impl std::ops::Deref for $env {
            type Target = $crate::support::world::World;
            fn deref(&self) -> &Self::Target {
                &self.w
            }
        }

        impl std::ops::DerefMut for $env {
            fn deref_mut(&mut self) -> &mut Self::Target {
                &mut self.w
            }
        }
    };
}

/// One test's world: see the module's documentation.
pub struct World {
    // Dropped first: the daemon stops before its files go.
    pub daemon: Option<Pinctld>,
    pub tmp: tempfile::TempDir,
    pub tree: FakeCgroup,
    pub k: Layout,
    /// `sysfs_root`: the fixture, or its copy.
    pub sysfs: PathBuf,
    /// `proc_root`: an empty directory until a test puts tasks there.
    pub proc_root: PathBuf,
    pub config: PathBuf,
    pub state: PathBuf,
    pub socket: PathBuf,
    /// The log of every run so far, the current one last.
    pub logs: Vec<PathBuf>,
}

impl World {
    /// The tempdir (named after `name`), the fake tree with the kubepods
    /// skeleton and `system.slice`, and the configuration file. Cgroups that
    /// exist before the daemon starts have the CPUs a running node gives
    /// them ([`Self::existing`]).
    pub fn new(name: &str, version: Version, driver: Driver, opts: &Options) -> World {
        let tmp = tempfile::Builder::new().prefix(name).tempdir().unwrap();
        let root = tmp.path().join("cgroup");
        fs::create_dir(&root).unwrap();
        let tree = FakeCgroup::new(&root, version);
        let k = Layout::new(driver);
        fs::create_dir(tmp.path().join("bundles")).unwrap();
        let proc_root = tmp.path().join("proc");
        fs::create_dir(&proc_root).unwrap();
        let sysfs = if opts.copy_sysfs {
            let dest = tmp.path().join("sysfs");
            copy_dir(Path::new(FIXTURE), &dest);
            dest
        } else {
            PathBuf::from(FIXTURE)
        };
        let world = World {
            daemon: None,
            config: tmp.path().join("pinctld.toml"),
            state: tmp.path().join("state/state.json"),
            socket: tmp.path().join("pinctl.sock"),
            proc_root,
            sysfs,
            tmp,
            tree,
            k,
            logs: Vec::new(),
        };
        for rel in k.skeleton().iter().map(String::as_str).chain([SYSTEM]) {
            world.tree.create(rel, &world.existing());
        }
        world.write_config(opts);
        world
    }

    /// The spec of a cgroup that existed before the daemon started: all CPUs
    /// (v1), or none written (v2, where that means the parent's).
    pub fn existing(&self) -> Spec {
        match self.tree.version() {
            Version::V1 => Spec::default().cpuset(ONLINE, MEMS),
            Version::V2 => Spec::default(),
        }
    }

    /// Writes the configuration file: the keys of every world, then
    /// `opts`' keys and rules. A test that rewrites it while the daemon runs
    /// then asks for a reload.
    pub fn write_config(&self, opts: &Options) {
        let p = |p: &Path| format!("{:?}", p.display().to_string());
        let mut toml = String::new();
        let _ = writeln!(toml, "cgroup_root = {}", p(self.tree.root()));
        let _ = writeln!(toml, "sysfs_root = {}", p(&self.sysfs));
        let _ = writeln!(toml, "proc_root = {}", p(&self.proc_root));
        let _ = writeln!(toml, "state_file = {}", p(&self.state));
        let _ = writeln!(toml, "socket = {}", p(&self.socket));
        let _ = writeln!(toml, "reserved_cpus = {RESERVED:?}");
        let _ = writeln!(toml, "reconcile_interval = {:?}", opts.reconcile_interval);
        let _ = writeln!(toml, "log_level = \"debug\"");
        let _ = writeln!(toml, "shared_cgroups = [{SYSTEM:?}]");
        let _ = writeln!(
            toml,
            "bundle_dirs = [{}]",
            p(&self.tmp.path().join("bundles"))
        );
        // Never the host's systemd: a test that talks to one brings its own.
        if !opts.keys.iter().any(|k| k.starts_with("systemd_bus")) {
            let _ = writeln!(toml, "systemd_bus = \"\"");
        }
        // Never the host's kubelet: its checkpoint lives in the world.
        if !opts
            .keys
            .iter()
            .any(|k| k.starts_with("kubelet_cpu_manager_state"))
        {
            let file = self.tmp.path().join("cpu_manager_state");
            let _ = writeln!(toml, "kubelet_cpu_manager_state = {}", p(&file));
        }
        // Never the host's /run: the originals files live in the world.
        for key in ["power_originals", "housekeeping_originals"] {
            if !opts.keys.iter().any(|k| k.starts_with(key)) {
                let file = self.tmp.path().join(format!("{key}.json"));
                let _ = writeln!(toml, "{key} = {}", p(&file));
            }
        }
        for key in &opts.keys {
            let _ = writeln!(toml, "{key}");
        }
        for (glob, cpus) in &opts.rules {
            let _ = writeln!(toml, "\n[[rule]]\nmatch = {glob:?}\ncpus = {cpus}");
        }
        fs::write(&self.config, toml).unwrap();
    }

    /// The number (1-based) of the first line of the configuration file that
    /// is `line`.
    pub fn config_line(&self, line: &str) -> usize {
        let text = fs::read_to_string(&self.config).unwrap();
        1 + text
            .lines()
            .position(|l| l == line)
            .unwrap_or_else(|| panic!("no line {line:?} in:\n{text}"))
    }

    /// Writes the OCI bundle of container `n`, as containerd does before the
    /// container's cgroup appears; returns its `config.json`.
    pub fn bundle(&self, n: u32, pod_uid: &str, name: &str, cpus: Option<&str>) -> PathBuf {
        let pod = cpus.map(|c| ("pinctl.io/cpus", c));
        self.bundle_with(n, pod_uid, Some(name), pod.as_slice())
    }

    /// [`Self::bundle`] with the pod's annotations `pod`: a container's
    /// with its name, a sandbox's without (as containerd writes them).
    pub fn bundle_with(
        &self,
        n: u32,
        pod_uid: &str,
        name: Option<&str>,
        pod: &[(&str, &str)],
    ) -> PathBuf {
        let dir = self.tmp.path().join("bundles").join(container_id(n));
        fs::create_dir_all(&dir).unwrap();
        let mut annotations = serde_json::json!({
            "io.kubernetes.cri.container-type": if name.is_some() { "container" } else { "sandbox" },
            "io.kubernetes.cri.sandbox-uid": pod_uid,
        });
        if let Some(name) = name {
            annotations["io.kubernetes.cri.container-name"] = name.into();
        }
        for (key, value) in pod {
            annotations[*key] = (*value).into();
        }
        let config = serde_json::json!({"ociVersion": "1.1.0", "annotations": annotations});
        let file = dir.join("config.json");
        fs::write(&file, config.to_string()).unwrap();
        file
    }

    /// Container `n` named `name` of pod `n` (made if missing) as the
    /// kubelet's static CPU manager leaves it: on CPUs `cpus`, with a CPU
    /// limit of `limit` whole CPUs (`None`: unlimited), its bundle asking
    /// `asks` by the pod's annotation. Returns its cgroup.
    pub fn kubelet_container(
        &self,
        n: u32,
        qos: Qos,
        name: &str,
        limit: Option<u32>,
        asks: Option<&str>,
        cpus: &str,
    ) -> String {
        let u = uid(n);
        let pod = self.k.pod(qos, &u);
        if !self.tree.exists(&pod) {
            self.tree.create(&pod, &self.existing());
        }
        self.bundle(n, &u, name, asks);
        let rel = self.k.container(&pod, &container_id(n));
        let spec = Spec {
            limit,
            ..Spec::default()
        };
        self.tree.create(&rel, &spec.cpuset(cpus, MEMS));
        rel
    }

    // --- the daemon ---------------------------------------------------------

    /// Starts the daemon; returns at once (see [`Self::wait_ready`]).
    pub fn spawn(&mut self, launch: &Launch) {
        assert!(self.daemon.is_none(), "the daemon is already running");
        let n = self.logs.len() + 1;
        let log = self.tmp.path().join(format!("daemon-{n}.log"));
        let notify = self.tmp.path().join(format!("notify-{n}.sock"));
        self.daemon = Some(Pinctld::spawn(&self.config, &log, &notify, launch));
        self.logs.push(log);
    }

    /// Waits for `READY=1`.
    pub fn wait_ready(&mut self) {
        let d = self.daemon.as_mut().expect("the daemon was started");
        if let Err(e) = d.wait_ready(READY_TIMEOUT) {
            self.fail(&e);
        }
    }

    /// Starts the daemon and waits for `READY=1`.
    pub fn start(&mut self) {
        self.spawn(&Launch::default());
        self.wait_ready();
    }

    /// SIGTERM, and the daemon must exit 0 (it saves its state on the way).
    pub fn stop(&mut self) {
        let mut d = self.daemon.take().expect("the daemon runs");
        d.signal(Signal::SIGTERM);
        let status = d.wait(WAIT);
        self.daemon = Some(d);
        match status {
            Some(s) if s.success() => {
                self.daemon = None;
            }
            Some(s) => self.fail(&format!("pinctld exited with {s} on SIGTERM")),
            None => self.fail(&format!("pinctld did not exit within {WAIT:?} of SIGTERM")),
        }
    }

    /// SIGKILL: a crash, no chance to save anything.
    pub fn crash(&mut self) {
        let mut d = self.daemon.take().expect("the daemon runs");
        d.kill();
    }

    /// The running daemon.
    pub fn d(&self) -> &Pinctld {
        self.daemon.as_ref().expect("the daemon runs")
    }

    /// Every `sd_notify` message of the running daemon.
    pub fn notes(&self) -> Vec<String> {
        self.daemon
            .as_ref()
            .map(|d| d.notes().into_iter().map(|(_, note)| note).collect())
            .unwrap_or_default()
    }

    /// The log of the current run.
    pub fn log(&self) -> String {
        self.d().log_text()
    }

    /// The logs of every run.
    pub fn logs(&self) -> String {
        logs_text(&self.logs)
    }

    // --- checks -------------------------------------------------------------

    /// Panics with `msg` and everything needed to understand it: the trees,
    /// the state file, the sd-notify messages of the running daemon and the
    /// logs of every run.
    pub fn fail(&self, msg: &str) -> ! {
        let state = fs::read_to_string(&self.state).unwrap_or_else(|e| format!("({e})"));
        let mut notes = String::new();
        if let Some(d) = &self.daemon {
            let t0 = d.notes().first().map(|(at, _)| *at);
            for (at, n) in d.notes() {
                let ms = t0.map_or(0, |t0| at.duration_since(t0).as_millis());
                let _ = writeln!(notes, "  +{ms}ms {}", n.replace('\n', " | "));
            }
        }
        panic!(
            "{msg}\n--- cgroup tree ({:?}, {:?}) ---\n{}--- state file ---\n{state}\n\
             --- sd-notify messages ---\n{notes}{}",
            self.tree.version(),
            self.k.driver,
            self.tree.dump(),
            self.logs()
        );
    }

    /// Polls `check` until it returns `Ok`, for up to `limit`.
    pub fn wait_within<T>(
        &self,
        limit: Duration,
        what: &str,
        check: impl FnMut() -> Result<T, String>,
    ) -> T {
        poll(limit, check).unwrap_or_else(|e| {
            self.fail(&format!(
                "timed out after {limit:?} waiting for {what}: {e}"
            ))
        })
    }

    /// Polls `check` until it returns `Ok`, for up to [`WAIT`].
    pub fn wait_for<T>(&self, what: &str, check: impl FnMut() -> Result<T, String>) -> T {
        self.wait_within(WAIT, what, check)
    }

    /// Checks that `check` holds now and for `long`.
    pub fn hold(&self, what: &str, long: Duration, mut check: impl FnMut() -> Result<(), String>) {
        let end = Instant::now() + long;
        loop {
            if let Err(e) = check() {
                self.fail(&format!("{what} did not hold: {e}"));
            }
            if Instant::now() > end {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until the log of the current run holds `needle` at least `n`
    /// times.
    pub fn wait_log(&self, needle: &str, n: usize) {
        self.wait_for(&format!("{n} log line(s) with {needle:?}"), || {
            let got = self.log().matches(needle).count();
            if got >= n {
                Ok(())
            } else {
                Err(format!("{got} so far"))
            }
        });
    }

    /// Sends SIGHUP and waits for the reconcile it makes.
    pub fn reload(&self) {
        let before = self.log().matches("reconcile done").count();
        self.d().signal(Signal::SIGHUP);
        self.wait_for("the reload's reconcile", || {
            if self.log().matches("reconcile done").count() > before {
                Ok(())
            } else {
                Err("not yet".into())
            }
        });
    }

    /// The status document the daemon serves, through the CLI's client.
    pub fn served(&self) -> Result<pinctl::api::Status, String> {
        client_call(&self.socket, |c| async move { c.status().await })
    }

    /// `pinctl describe`'s page of the workload of cgroup `rel`.
    pub fn described(&self, rel: &str) -> String {
        let status = self.served().unwrap();
        let w = status
            .workloads
            .iter()
            .find(|w| w.cgroups.iter().any(|c| c == rel))
            .unwrap_or_else(|| panic!("no workload of {rel}"));
        pinctl::cli::describe::render(
            &status,
            w,
            &self.served_events().unwrap(),
            0,
            pinctl::cli::style::Style::OFF,
        )
    }

    /// The metrics the daemon serves (`/metrics` on its socket).
    pub fn metrics(&self) -> String {
        get(&self.socket, "/metrics").1
    }

    /// The audit trail the daemon serves, oldest first.
    pub fn served_events(&self) -> Result<Vec<pinctl::api::Event>, String> {
        client_call(&self.socket, |c| async move { c.events(0).await })
    }

    /// Waits until the last `STATUS=` the daemon sent satisfies `ok`;
    /// returns it.
    pub fn wait_status(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        self.wait_for(&format!("STATUS= {what}"), || {
            let s = self.d().status();
            if ok(&s) {
                Ok(s)
            } else {
                Err(format!("STATUS={s}"))
            }
        })
    }

    /// Waits until `rel` has exactly `n` CPUs in `cpuset.cpus`; returns them.
    pub fn wait_pinned(&self, rel: &str, n: usize) -> CpuSet {
        self.wait_for(&format!("{n} exclusive CPUs on {rel}"), || {
            let got = self.tree.effective(rel);
            if got.len() == n {
                Ok(got)
            } else {
                Err(format!("it has {got:?} ({} CPUs)", got.len()))
            }
        })
    }
}

/// One HTTP/1.1 GET on the daemon's socket: (status code, body).
pub fn get(socket: &Path, path: &str) -> (u16, String) {
    use std::io::{Read as _, Write as _};
    let mut stream = std::os::unix::net::UnixStream::connect(socket)
        .unwrap_or_else(|e| panic!("connect {}: {e}", socket.display()));
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: pinctl\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8(raw).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP response");
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("a status code");
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        unchunk(body)
    } else {
        body.to_string()
    };
    (code, body)
}

/// Decodes a chunked body.
fn unchunk(mut body: &str) -> String {
    let mut out = String::new();
    loop {
        let (size, rest) = body.split_once("\r\n").expect("a chunk size");
        let size = usize::from_str_radix(size.trim(), 16).expect("a hex chunk size");
        if size == 0 {
            return out;
        }
        out.push_str(&rest[..size]);
        body = &rest[size + 2..];
    }
}

/// One call of the CLI's client on `socket`, on a runtime of its own.
fn client_call<T, F>(
    socket: &Path,
    call: impl FnOnce(pinctl::client::Client) -> F,
) -> Result<T, String>
where
    F: std::future::Future<Output = Result<T, pinctl::client::ClientError>>,
{
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(call(pinctl::client::Client::new(socket)))
        .map_err(|e| e.to_string())
}
