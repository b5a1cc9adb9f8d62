//! A stand-in for systemd on a private D-Bus: a `dbus-daemon` of the test's
//! own (Debian's `dbus-daemon` package; a test without it says so and
//! skips), and, on it, `org.freedesktop.systemd1` with what the daemon uses
//! of it: `Manager.GetUnit`, `Manager.SetUnitProperties` (`AllowedCPUs`
//! only), `Manager.StartTransientUnit` (a scope's `Slice=`, `PIDs=` or
//! `PIDFDs=`, and `AllowedCPUs=`;
//! [`FakeSystemd::make_scopes_under`]) and each scope's `AllowedCPUs`
//! property. Like systemd 252 on cgroup
//! v2, a unit's `AllowedCPUs=` is written to its cgroup's `cpuset.cpus` when
//! it is set and at every [`FakeSystemd::daemon_reload`], followed by its
//! xattrs; a unit without one has only its xattrs set.
//!
//! Dropping it stops the bus.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pinctl::CpuSet;
use pinctl::systemd::{cpu_mask, mask_cpus};
use zbus::zvariant::{OwnedObjectPath, OwnedValue};

/// One unit: its `AllowedCPUs=` and its cgroup's `cpuset.cpus`.
struct Unit {
    allowed: Vec<u8>,
    /// Its `AllowedMemoryNodes=` (kept, not written: the tests do not look).
    mems: Vec<u8>,
    cpus_file: PathBuf,
    /// An empty slice: with no `AllowedCPUs=`, systemd's `""` is taken (a
    /// scope's tasks make the kernel refuse it).
    empty: bool,
    /// What systemd last wrote to its `cpuset.cpus`.
    wrote: Option<String>,
}

/// A `StartTransientUnit` systemd served: the unit, its `Slice=` and its
/// `PIDs=` (its `AllowedCPUs=` is the unit's, [`FakeSystemd::allowed`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Started {
    pub unit: String,
    pub slice: String,
    pub pids: Vec<u32>,
    /// Given as pidfds (`PIDFDs=`, systemd 253 and later), not numbers.
    pub by_pidfd: bool,
}

#[derive(Default)]
struct State {
    units: HashMap<String, Unit>,
    /// Where transient scopes' cgroups are made (a v2 tree's root): `None`
    /// refuses `StartTransientUnit`.
    scope_root: Option<PathBuf>,
    /// Scopes start empty: their process died as systemd moved it.
    lose_pids: bool,
    /// `PIDFDs=` is refused, as systemd 252 refuses it.
    no_pidfds: bool,
    started: Vec<Started>,
    /// `SetUnitProperties` calls, by unit.
    sets: Vec<String>,
    /// `GetUnit` calls, by unit.
    gets: Vec<String>,
    /// A `daemon-reload` is under way ([`FakeSystemd::begin_reload`]):
    /// `SetUnitProperties` waits for its end.
    reloading: bool,
}

type Shared = Arc<Mutex<State>>;

fn object_path(unit: &str) -> OwnedObjectPath {
    // systemd's bus label escaping: anything but [A-Za-z0-9] as _xx.
    let mut label = String::new();
    for b in unit.bytes() {
        if b.is_ascii_alphanumeric() {
            label.push(b as char);
        } else {
            label.push_str(&format!("_{b:02x}"));
        }
    }
    OwnedObjectPath::try_from(format!("/org/freedesktop/systemd1/unit/{label}")).unwrap()
}

/// What systemd 252 does to a unit's cgroup as it realizes the unit (made,
/// a property set, `daemon-reload`): writes its `AllowedCPUs=`, then sets
/// the unit's xattrs (`cgroup_xattr_apply`: its invocation id), which
/// inotify reports right after the write, often in the same read.
fn realize(unit: &mut Unit) {
    let text = match (unit.allowed.is_empty(), unit.empty) {
        (false, _) => Some(mask_cpus(&unit.allowed).to_string()),
        (true, true) => Some("\n".to_string()),
        (true, false) => None,
    };
    if let Some(text) = text {
        let _ = fs::write(&unit.cpus_file, &text);
        unit.wrote = Some(text);
    }
    if let Some(dir) = unit.cpus_file.parent() {
        let _ = xattr::set(
            dir,
            "user.invocation_id",
            b"0123456789abcdef0123456789abcdef",
        );
    }
}

struct Manager(Shared);

/// systemd's own errors, as it names them.
#[derive(Debug, zbus::DBusError)]
#[zbus(prefix = "org.freedesktop.systemd1")]
enum SystemdError {
    #[zbus(error)]
    ZBus(zbus::Error),
    NoSuchUnit(String),
}

#[zbus::interface(name = "org.freedesktop.systemd1.Manager")]
impl Manager {
    async fn get_unit(&self, name: &str) -> Result<OwnedObjectPath, SystemdError> {
        let mut s = self.0.lock().unwrap();
        s.gets.push(name.to_string());
        if !s.units.contains_key(name) {
            return Err(SystemdError::NoSuchUnit(format!("Unit {name} not loaded.")));
        }
        Ok(object_path(name))
    }

    async fn set_unit_properties(
        &self,
        name: &str,
        _runtime: bool,
        properties: Vec<(String, OwnedValue)>,
    ) -> Result<(), SystemdError> {
        // As systemd: a call that comes during a reload is served after it.
        while self.0.lock().unwrap().reloading {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let mut s = self.0.lock().unwrap();
        s.sets.push(name.to_string());
        let Some(unit) = s.units.get_mut(name) else {
            return Err(SystemdError::NoSuchUnit(format!("Unit {name} not found.")));
        };
        for (key, value) in properties {
            let mask = Vec::<u8>::try_from(value).map_err(|e| {
                SystemdError::ZBus(zbus::fdo::Error::InvalidArgs(e.to_string()).into())
            })?;
            match key.as_str() {
                "AllowedCPUs" => unit.allowed = mask,
                "AllowedMemoryNodes" => unit.mems = mask,
                _ => {
                    let e = zbus::fdo::Error::InvalidArgs(format!("unexpected {key}"));
                    return Err(SystemdError::ZBus(e.into()));
                }
            }
        }
        realize(unit);
        Ok(())
    }

    async fn start_transient_unit(
        &self,
        name: &str,
        _mode: &str,
        properties: Vec<(String, OwnedValue)>,
        _aux: Vec<(String, Vec<(String, OwnedValue)>)>,
        #[zbus(object_server)] server: &zbus::ObjectServer,
    ) -> zbus::fdo::Result<OwnedObjectPath> {
        // org.freedesktop.DBus.Error.InvalidArgs, as systemd names it.
        let invalid = zbus::fdo::Error::InvalidArgs;
        let (mut slice, mut pids, mut allowed) = (String::new(), Vec::new(), Vec::new());
        let mut by_pidfd = false;
        for (key, value) in properties {
            match key.as_str() {
                "Slice" => slice = String::try_from(value).map_err(|e| invalid(e.to_string()))?,
                "PIDs" => pids = Vec::<u32>::try_from(value).map_err(|e| invalid(e.to_string()))?,
                "PIDFDs" if self.0.lock().unwrap().no_pidfds => {
                    return Err(invalid(
                        "Cannot set property PIDFDs, or unknown property.".into(),
                    ));
                }
                "PIDFDs" => {
                    let zbus::zvariant::Value::Array(fds) = &*value else {
                        return Err(invalid("PIDFDs is not an array".into()));
                    };
                    for fd in fds.iter() {
                        use std::os::fd::AsRawFd as _;
                        let zbus::zvariant::Value::Fd(fd) = fd else {
                            return Err(invalid("PIDFDs holds a non-fd".into()));
                        };
                        let info =
                            fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd()))
                                .map_err(|e| invalid(e.to_string()))?;
                        let pid = info
                            .lines()
                            .find_map(|l| l.strip_prefix("Pid:"))
                            .and_then(|p| p.trim().parse().ok())
                            .ok_or_else(|| invalid(format!("not a pidfd: {info}")))?;
                        pids.push(pid);
                    }
                    by_pidfd = true;
                }
                "AllowedCPUs" => {
                    allowed = Vec::<u8>::try_from(value).map_err(|e| invalid(e.to_string()))?
                }
                "Description" | "CollectMode" => {}
                other => return Err(invalid(format!("unexpected {other}"))),
            }
        }
        self.start_scope(name, &slice, &pids, allowed, by_pidfd)
            .map_err(invalid)?;
        let scope = Scope {
            state: self.0.clone(),
            name: name.to_string(),
        };
        server.at(object_path(name), scope).await?;
        Ok(OwnedObjectPath::try_from("/org/freedesktop/systemd1/job/1").unwrap())
    }
}

/// Makes directory `to` with `files` (name, content) in one step, as
/// cgroupfs makes a cgroup: built in `stage`, then renamed into place.
/// `cpuset.cpus.effective` reads what `cpuset.cpus` holds (a link): what
/// the kernel gives a scope whose parent has every CPU.
fn make_cgroup(stage: &Path, to: &Path, files: &[(&str, String)]) -> std::io::Result<()> {
    let _ = fs::remove_dir_all(stage);
    fs::create_dir_all(stage)?;
    for (name, text) in files {
        fs::write(stage.join(name), text)?;
    }
    std::os::unix::fs::symlink("cpuset.cpus", stage.join("cpuset.cpus.effective"))?;

    fs::rename(stage, to)
}

impl Manager {
    /// systemd's transient scope: its slice's cgroup (made if missing) and
    /// its own, holding `pids`.
    fn start_scope(
        &self,
        unit: &str,
        slice: &str,
        pids: &[u32],
        allowed: Vec<u8>,
        by_pidfd: bool,
    ) -> Result<PathBuf, String> {
        let mut s = self.0.lock().unwrap();
        let root = s.scope_root.clone().ok_or("transient units are off")?;
        let stage = root.with_extension("stage");
        let slice_dir = root.join(slice);
        // Every node, as the root has them: what the kernel gives a cgroup
        // whose cpuset.mems is empty.
        let mems = fs::read_to_string(root.join("cpuset.mems.effective")).unwrap_or_default();
        let base = |procs: String| {
            vec![
                ("cpuset.mems.effective", mems.clone()),
                ("cpuset.cpus", "\n".to_string()),
                ("cpuset.mems", "\n".to_string()),
                ("cgroup.subtree_control", "\n".to_string()),
                ("cgroup.procs", procs),
                ("cpu.max", "max 100000\n".to_string()),
            ]
        };
        if !slice_dir.exists() {
            make_cgroup(&stage, &slice_dir, &base(String::new())).map_err(|e| e.to_string())?;
        }
        let dir = slice_dir.join(unit);
        let procs: String = match s.lose_pids {
            true => String::new(),
            false => pids.iter().map(|p| format!("{p}\n")).collect(),
        };
        make_cgroup(&stage, &dir, &base(procs)).map_err(|e| e.to_string())?;
        let mut u = Unit {
            allowed,
            mems: Vec::new(),
            cpus_file: dir.join("cpuset.cpus"),
            empty: false,
            wrote: None,
        };
        realize(&mut u);
        s.units.insert(unit.to_string(), u);
        s.started.push(Started {
            unit: unit.to_string(),
            slice: slice.to_string(),
            pids: pids.to_vec(),
            by_pidfd,
        });
        Ok(dir)
    }
}

struct Scope {
    state: Shared,
    name: String,
}

#[zbus::interface(name = "org.freedesktop.systemd1.Scope")]
impl Scope {
    #[zbus(property(emits_changed_signal = "false"), name = "AllowedCPUs")]
    async fn allowed_cpus(&self) -> Vec<u8> {
        let s = self.state.lock().unwrap();
        s.units
            .get(&self.name)
            .map(|u| u.allowed.clone())
            .unwrap_or_default()
    }
}

pub struct FakeSystemd {
    /// The bus's socket: the daemon's `systemd_bus`.
    pub socket: PathBuf,
    bus: Child,
    rt: tokio::runtime::Runtime,
    conn: zbus::Connection,
    state: Shared,
}

impl FakeSystemd {
    /// A bus and systemd on it, in `dir`; `None` without `dbus-daemon`.
    pub fn start(dir: &Path) -> Option<FakeSystemd> {
        let socket = dir.join("system_bus_socket");
        let config = dir.join("bus.conf");
        fs::write(
            &config,
            format!(
                r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>custom</type>
  <listen>unix:path={}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
"#,
                socket.display()
            ),
        )
        .unwrap();
        let bus = match Command::new("dbus-daemon")
            .arg(format!("--config-file={}", config.display()))
            .arg("--nofork")
            .arg("--nopidfile")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            // Its complaints (it cannot raise its fd limit unprivileged) go
            // beside the socket.
            .stderr(fs::File::create(dir.join("bus.log")).unwrap())
            .spawn()
        {
            Ok(child) => child,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => panic!("cannot start dbus-daemon: {e}"),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !socket.exists() {
            assert!(Instant::now() < deadline, "dbus-daemon made no socket");
            std::thread::sleep(Duration::from_millis(10));
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let state = Shared::default();
        // The socket is there from bind(2), connections are taken from
        // listen(2): on a busy machine the first tries may be refused.
        let conn = loop {
            let built = rt.block_on(async {
                zbus::connection::Builder::address(
                    format!("unix:path={}", socket.display()).as_str(),
                )
                .unwrap()
                .name("org.freedesktop.systemd1")
                .unwrap()
                .serve_at("/org/freedesktop/systemd1", Manager(state.clone()))
                .unwrap()
                .build()
                .await
            });
            match built {
                Ok(conn) => break conn,
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => panic!("fake systemd on the bus: {e}"),
            }
        };
        Some(FakeSystemd {
            socket,
            bus,
            rt,
            conn,
            state,
        })
    }

    /// systemd makes scope `unit` for the cgroup directory `dir`, with
    /// `AllowedCPUs=` (empty: none), and writes it there as it realizes the
    /// unit.
    pub fn add_scope(&self, unit: &str, dir: &Path, allowed: &str) {
        self.add(unit, dir, allowed, false);
    }

    /// systemd knows slice `unit` of the empty cgroup directory `dir`, with
    /// no `AllowedCPUs=`: at each realize it writes `""` there.
    pub fn add_slice(&self, unit: &str, dir: &Path) {
        self.add(unit, dir, "", true);
    }

    fn add(&self, unit: &str, dir: &Path, allowed: &str, empty: bool) {
        let allowed: CpuSet = allowed.parse().unwrap();
        let mut u = Unit {
            allowed: cpu_mask(&allowed),
            mems: Vec::new(),
            cpus_file: dir.join("cpuset.cpus"),
            empty,
            wrote: None,
        };
        realize(&mut u);
        self.state.lock().unwrap().units.insert(unit.to_string(), u);
        let scope = Scope {
            state: self.state.clone(),
            name: unit.to_string(),
        };
        self.rt
            .block_on(self.conn.object_server().at(object_path(unit), scope))
            .unwrap();
    }

    /// Serves `StartTransientUnit` for scopes, making their cgroups (and
    /// their slice's) under `root`, a v2 tree's root.
    pub fn make_scopes_under(&self, root: &Path) {
        self.state.lock().unwrap().scope_root = Some(root.to_path_buf());
    }

    /// From now on, the process of each scope started dies as systemd
    /// moves it: the scope's cgroup is empty.
    pub fn lose_pids(&self) {
        self.state.lock().unwrap().lose_pids = true;
    }

    /// From now on, `PIDFDs=` is refused, as systemd before 253 does.
    pub fn refuse_pidfds(&self) {
        self.state.lock().unwrap().no_pidfds = true;
    }

    /// The transient units started, in order.
    pub fn started(&self) -> Vec<Started> {
        self.state.lock().unwrap().started.clone()
    }

    /// `systemctl daemon-reload`: every unit's `AllowedCPUs=` written again.
    pub fn daemon_reload(&self) {
        for unit in self.state.lock().unwrap().units.values_mut() {
            realize(unit);
        }
    }

    /// A `daemon-reload` begins and takes its time: `SetUnitProperties`
    /// calls wait until [`Self::end_reload`].
    pub fn begin_reload(&self) {
        self.state.lock().unwrap().reloading = true;
    }

    /// The reload ends as systemd's does: every unit's `AllowedCPUs=` (what
    /// it held before the calls that waited) written again, then those
    /// calls served.
    pub fn end_reload(&self) {
        let mut s = self.state.lock().unwrap();
        for unit in s.units.values_mut() {
            realize(unit);
        }
        s.reloading = false;
    }

    /// The unit's `AllowedCPUs=` emptied, as `systemctl set-property
    /// --runtime UNIT AllowedCPUs=` does (nothing written).
    pub fn unset_allowed(&self, unit: &str) {
        if let Some(u) = self.state.lock().unwrap().units.get_mut(unit) {
            u.allowed.clear();
        }
    }

    /// What systemd last wrote to the unit's `cpuset.cpus`.
    pub fn wrote(&self, unit: &str) -> Option<String> {
        let s = self.state.lock().unwrap();
        s.units.get(unit).and_then(|u| u.wrote.clone())
    }

    /// The unit's `AllowedMemoryNodes=`; empty for a unit without one.
    pub fn allowed_mems(&self, unit: &str) -> CpuSet {
        let s = self.state.lock().unwrap();
        s.units
            .get(unit)
            .map(|u| mask_cpus(&u.mems))
            .unwrap_or_default()
    }

    /// The unit's `AllowedCPUs=`; empty for a unit systemd does not know.
    pub fn allowed(&self, unit: &str) -> CpuSet {
        let s = self.state.lock().unwrap();
        s.units
            .get(unit)
            .map(|u| mask_cpus(&u.allowed))
            .unwrap_or_default()
    }

    /// How many `SetUnitProperties` and `GetUnit` calls named `unit`.
    pub fn calls(&self, unit: &str) -> (usize, usize) {
        let s = self.state.lock().unwrap();
        let n = |v: &Vec<String>| v.iter().filter(|u| *u == unit).count();
        (n(&s.sets), n(&s.gets))
    }
}

impl Drop for FakeSystemd {
    fn drop(&mut self) {
        let _ = self.bus.kill();
        let _ = self.bus.wait();
    }
}
