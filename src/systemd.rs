//! Telling systemd a unit's CPUs: `AllowedCPUs=` as a runtime property over
//! D-Bus, as `systemctl set-property --runtime` does.
//!
//! - Why: on v2 systemd writes each unit's `AllowedCPUs=` over its
//!   `cpuset.cpus` at every `daemon-reload`, and `""` where there is none,
//!   which an empty slice takes (KERNEL-NOTES, "systemd"). v1: no cpuset.
//! - A `SetUnitProperties` makes systemd apply the unit's cgroup settings
//!   again: a runtime setting the scope up then can fail (runc: `failed to
//!   call BPF_PROG_ATTACH`). When to tell is `daemon/systemd.rs`'s decision;
//!   this module only speaks the protocol.
//! - The system bus's socket path comes from the configuration; no path
//!   constant lives here.

use std::path::{Path, PathBuf};
use std::time::Duration;

use zbus::zvariant::{Fd, OwnedObjectPath, OwnedValue, Value};

use crate::cpuset::CpuSet;

const DESTINATION: &str = "org.freedesktop.systemd1";
const MANAGER_PATH: &str = "/org/freedesktop/systemd1";
const MANAGER: &str = "org.freedesktop.systemd1.Manager";
const SCOPE: &str = "org.freedesktop.systemd1.Scope";
const PROPERTIES: &str = "org.freedesktop.DBus.Properties";
const ALLOWED_CPUS: &str = "AllowedCPUs";
/// The error systemd answers `GetUnit` with for a unit it does not know.
const NO_SUCH_UNIT: &str = "org.freedesktop.systemd1.NoSuchUnit";
/// What systemd before 253 answers a `PIDFDs=` property with (an unknown
/// property of a transient unit).
const INVALID_ARGS: &str = "org.freedesktop.DBus.Error.InvalidArgs";
const PROPERTY_READ_ONLY: &str = "org.freedesktop.DBus.Error.PropertyReadOnly";

/// A failed exchange with systemd, naming the bus and the unit.
#[derive(Debug, thiserror::Error)]
pub enum SystemdError {
    #[error("cannot reach systemd on the bus {}", bus.display())]
    Connect {
        bus: PathBuf,
        #[source]
        source: zbus::Error,
    },
    #[error("no answer from systemd on the bus {} within {timeout:?}: cannot {what} of {unit}", bus.display())]
    Timeout {
        bus: PathBuf,
        what: &'static str,
        unit: String,
        timeout: Duration,
    },
    #[error("cannot {what} of {unit}")]
    Call {
        what: &'static str,
        unit: String,
        #[source]
        source: zbus::Error,
    },
    #[error("systemd's {ALLOWED_CPUS} of {unit} is not a byte array")]
    Type { unit: String },
}

/// The systemd unit a cgroup is, when it is a scope: the cgroup's own name
/// (systemd names a unit's cgroup after the unit).
pub fn scope_unit(rel: &str) -> Option<&str> {
    let name = rel.rsplit('/').next()?;
    unit_named(name, ".scope").then_some(name)
}

/// The systemd unit a cgroup is, when it is a slice: its own name, where
/// every component of its path is a slice (systemd nests slices by name; a
/// `.slice` directory inside a delegated scope is not systemd's).
pub fn slice_unit(rel: &str) -> Option<&str> {
    let name = rel.rsplit('/').next()?;
    rel.split('/')
        .all(|n| unit_named(n, ".slice"))
        .then_some(name)
}

fn unit_named(name: &str, suffix: &str) -> bool {
    name.len() > suffix.len() && name.ends_with(suffix) && !name.starts_with('\0')
}

/// `AllowedCPUs` as systemd's D-Bus API spells it: a bitmask of bytes, CPU
/// `8 * i + j` in bit `j` of byte `i`, no trailing zero bytes (empty: none set).
pub fn cpu_mask(set: &CpuSet) -> Vec<u8> {
    let mut bytes = Vec::new();
    for cpu in set.iter() {
        let i = cpu as usize / 8;
        if bytes.len() <= i {
            bytes.resize(i + 1, 0);
        }
        bytes[i] |= 1 << (cpu % 8);
    }
    bytes
}

/// The set a mask holds ([`cpu_mask`]'s inverse).
pub fn mask_cpus(mask: &[u8]) -> CpuSet {
    let mut set = CpuSet::new();
    for (i, byte) in mask.iter().enumerate() {
        for j in 0..8 {
            if byte & (1 << j) != 0 {
                set.insert(i as u32 * 8 + j);
            }
        }
    }
    set
}

/// A connection to the bus systemd is on, made when first needed and made
/// again after a failure.
pub struct Bus {
    path: PathBuf,
    timeout: Duration,
    conn: Option<zbus::Connection>,
    /// systemd refused `PIDFDs=` once (before 253): only `PIDs=` since.
    no_pidfds: bool,
}

impl Bus {
    /// The bus at the Unix socket `path` (the system bus:
    /// `/run/dbus/system_bus_socket`); each exchange gives up after `timeout`.
    pub fn new(path: &Path, timeout: Duration) -> Self {
        Bus {
            path: path.to_owned(),
            timeout,
            conn: None,
            no_pidfds: false,
        }
    }

    /// The unit's `AllowedCPUs=` (empty when it has none, or when systemd
    /// does not know the unit: a scope someone else made).
    pub async fn allowed_cpus(&mut self, unit: &str) -> Result<CpuSet, SystemdError> {
        let found = self
            .call(
                unit,
                "find the unit",
                MANAGER_PATH,
                MANAGER,
                "GetUnit",
                &(unit,),
            )
            .await;
        let object: OwnedObjectPath = match found {
            Err(SystemdError::Call {
                source: zbus::Error::MethodError(name, ..),
                ..
            }) if name.as_str() == NO_SUCH_UNIT => return Ok(CpuSet::new()),
            r => r?,
        };
        let value: OwnedValue = self
            .call(
                unit,
                "read AllowedCPUs",
                object.as_str(),
                PROPERTIES,
                "Get",
                &(SCOPE, ALLOWED_CPUS),
            )
            .await?;
        let mask: Vec<u8> = value.try_into().map_err(|_| SystemdError::Type {
            unit: unit.to_string(),
        })?;
        Ok(mask_cpus(&mask))
    }

    /// Sets the unit's `AllowedCPUs=` as a runtime property (gone at the
    /// next boot, as the unit is). `false` when systemd does not know the
    /// unit (a cgroup someone else named like one).
    pub async fn set_allowed_cpus(
        &mut self,
        unit: &str,
        cpus: &CpuSet,
    ) -> Result<bool, SystemdError> {
        self.set_allowed(unit, cpus, None).await
    }

    /// [`Self::set_allowed_cpus`], and with `mems` the unit's
    /// `AllowedMemoryNodes=` in the same exchange (systemd then applies
    /// the unit's settings once, with both).
    pub async fn set_allowed(
        &mut self,
        unit: &str,
        cpus: &CpuSet,
        mems: Option<&CpuSet>,
    ) -> Result<bool, SystemdError> {
        let mut props = vec![(ALLOWED_CPUS, Value::from(cpu_mask(cpus)))];
        if let Some(mems) = mems {
            props.push(("AllowedMemoryNodes", Value::from(cpu_mask(mems))));
        }
        let set = self
            .call::<_, ()>(
                unit,
                "set AllowedCPUs",
                MANAGER_PATH,
                MANAGER,
                "SetUnitProperties",
                &(unit, true, props),
            )
            .await;
        match set {
            Err(SystemdError::Call {
                source: zbus::Error::MethodError(name, ..),
                ..
            }) if name.as_str() == NO_SUCH_UNIT => Ok(false),
            r => r.map(|()| true),
        }
    }

    /// Starts the transient scope `unit` in `slice` around process `pid`,
    /// as `systemd-run --scope` does: systemd makes the scope's cgroup and
    /// moves the process in. With `pidfd` (the same process), systemd 253
    /// and later are given it (`PIDFDs=`) rather than the number, which a
    /// process started since could hold; a systemd that refuses the property
    /// gets the number (`PIDs=`), and from then on only that. With `cpus`
    /// (cgroup v2), the scope's `AllowedCPUs=`: systemd then keeps the cpuset
    /// controller enabled down to the scope (without one, realizing the
    /// slice disables it there: no unit below needs it). The scope is
    /// collected once it ends, failed or not. Returns once systemd queued the
    /// start (its job).
    pub async fn start_scope(
        &mut self,
        unit: &str,
        slice: &str,
        pid: u32,
        pidfd: Option<std::os::fd::BorrowedFd<'_>>,
        cpus: Option<&CpuSet>,
        description: &str,
    ) -> Result<(), SystemdError> {
        if let Some(fd) = pidfd.filter(|_| !self.no_pidfds) {
            let by = ("PIDFDs", Value::from(vec![Fd::from(fd)]));
            match self.start(unit, slice, by, cpus, description).await {
                Err(SystemdError::Call {
                    source: zbus::Error::MethodError(name, ..),
                    ..
                }) if name.as_str() == INVALID_ARGS || name.as_str() == PROPERTY_READ_ONLY => {
                    self.no_pidfds = true;
                }
                r => return r,
            }
        }
        let by = ("PIDs", Value::from(vec![pid]));
        self.start(unit, slice, by, cpus, description).await
    }

    async fn start(
        &mut self,
        unit: &str,
        slice: &str,
        by: (&str, Value<'_>),
        cpus: Option<&CpuSet>,
        description: &str,
    ) -> Result<(), SystemdError> {
        let mut props = vec![
            ("Slice", Value::from(slice)),
            ("Description", Value::from(description)),
            by,
            ("CollectMode", Value::from("inactive-or-failed")),
        ];
        if let Some(cpus) = cpus {
            props.push((ALLOWED_CPUS, Value::from(cpu_mask(cpus))));
        }
        let aux: Vec<(&str, Vec<(&str, Value<'_>)>)> = Vec::new();
        self.call::<_, OwnedObjectPath>(
            unit,
            "start the scope",
            MANAGER_PATH,
            MANAGER,
            "StartTransientUnit",
            &(unit, "fail", props, aux),
        )
        .await
        .map(|_job| ())
    }

    async fn call<B, R>(
        &mut self,
        unit: &str,
        what: &'static str,
        path: &str,
        interface: &str,
        method: &str,
        body: &B,
    ) -> Result<R, SystemdError>
    where
        B: serde::Serialize + zbus::zvariant::DynamicType,
        R: for<'d> zbus::zvariant::DynamicDeserialize<'d>,
    {
        let timeout = self.timeout;
        let exchange = async {
            let conn = self.connection().await?;
            let reply = conn
                .call_method(Some(DESTINATION), path, Some(interface), method, body)
                .await
                .and_then(|m| m.body().deserialize::<R>());
            reply.map_err(|source| SystemdError::Call {
                what,
                unit: unit.to_string(),
                source,
            })
        };
        let result = match tokio::time::timeout(timeout, exchange).await {
            Ok(r) => r,
            Err(_) => Err(SystemdError::Timeout {
                bus: self.path.clone(),
                what,
                unit: unit.to_string(),
                timeout,
            }),
        };
        // Only an error systemd answered leaves the connection known good;
        // after any other the next call makes a new one.
        let answered = matches!(
            &result,
            Ok(_)
                | Err(SystemdError::Type { .. })
                | Err(SystemdError::Call {
                    source: zbus::Error::MethodError(..) | zbus::Error::FDO(_),
                    ..
                })
        );
        if !answered {
            self.conn = None;
        }
        result
    }

    async fn connection(&mut self) -> Result<zbus::Connection, SystemdError> {
        if let Some(conn) = &self.conn {
            return Ok(conn.clone());
        }
        let connect = |source| SystemdError::Connect {
            bus: self.path.clone(),
            source,
        };
        let address = format!("unix:path={}", escape(&self.path));
        let conn = zbus::connection::Builder::address(address.as_str())
            .map_err(connect)?
            .build()
            .await
            .map_err(connect)?;
        self.conn = Some(conn.clone());
        Ok(conn)
    }
}

/// A path as a D-Bus address value: bytes outside `[-0-9A-Za-z_/.*]`
/// percent-escaped.
fn escape(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut out = String::new();
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"-_/.*".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02x}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mask_is_the_set_bit_by_bit() {
        for text in ["", "0", "7", "8", "0-3,9", "1,15-17", "63,64", "1023"] {
            let set: CpuSet = text.parse().unwrap();
            let mask = cpu_mask(&set);
            assert_eq!(mask_cpus(&mask), set, "{text}");
            assert_ne!(mask.last(), Some(&0), "{text}: no trailing zero byte");
        }
        assert_eq!(cpu_mask(&"0-3,9".parse().unwrap()), vec![0x0f, 0x02]);
        assert_eq!(cpu_mask(&"15".parse().unwrap()), vec![0, 0x80]);
    }

    #[test]
    fn a_bus_path_is_escaped_as_an_address_value() {
        assert_eq!(
            escape(Path::new("/run/dbus/system_bus_socket")),
            "/run/dbus/system_bus_socket"
        );
        assert_eq!(escape(Path::new("/tmp/a b,c=d")), "/tmp/a%20b%2cc%3dd");
    }

    #[test]
    fn scopes_and_slices_are_units_to_tell() {
        let scope = "kubepods.slice/kubepods-pod1.slice/cri-containerd-ab.scope";
        assert_eq!(scope_unit(scope), Some("cri-containerd-ab.scope"));
        assert_eq!(
            scope_unit("machine.slice/libpod-1.scope"),
            Some("libpod-1.scope")
        );
        assert_eq!(scope_unit("kubepods.slice/kubepods-pod1.slice"), None);
        assert_eq!(scope_unit("kubepods/pod1/abcdef"), None);
        assert_eq!(scope_unit("a/.scope"), None);
        // A name kept encoded (not UTF-8) is not a unit systemd made.
        assert_eq!(scope_unit("a/\0x\\xff.scope"), None);
        // crun's inner cgroup is not a unit; the pin is its scope's.
        assert_eq!(scope_unit("machine.slice/libpod-1.scope/container"), None);
        // A slice is systemd's when its whole path is slices.
        let slice = "kubepods.slice/kubepods-burstable.slice";
        assert_eq!(slice_unit(slice), Some("kubepods-burstable.slice"));
        assert_eq!(slice_unit("system.slice"), Some("system.slice"));
        assert_eq!(slice_unit(scope), None);
        assert_eq!(slice_unit("a.scope/b.slice"), None);
        assert_eq!(slice_unit("kubepods/pod1"), None);
        assert_eq!(slice_unit("a.slice/.slice"), None);
    }
}
