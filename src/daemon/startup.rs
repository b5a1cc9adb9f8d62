//! Start-up: from a configuration to a daemon ready to run. Errors here are
//! fatal; everything after is not.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use tracing::{info, warn};

use super::apply::Rest;
use super::checks::Watch;
use super::notify::Notifier;
use super::report::{Loads, Socket};
use super::sync::read_topology;
use super::{Daemon, chain};
use crate::api;
use crate::cgroup::{Hierarchy, Version};
use crate::config::Config;
use crate::cpuset::CpuSet;
use crate::engine::{Engine, SavedState, Settings};
use crate::io::{IoConfig, IoPool, RealFs};
use crate::state::{Loaded, StateFile};
use crate::watch::Watcher;
use crate::watchdog;

/// cgroup v1: whether the root cpuset balances load over the whole machine
/// (its `cpuset.sched_load_balance` reads 1), so that the flag of any other
/// cpuset changes nothing but the cost of its writes
/// ([`Settings::quiet_balance`]). v2, or unreadable: no.
pub(super) async fn root_balances(pool: &IoPool, hier: &Hierarchy) -> bool {
    if hier.version != Version::V1 {
        return false;
    }
    let flag = hier.cpuset.join(crate::cgroup::file::SCHED_LOAD_BALANCE);
    pool.read(&flag).await.is_ok_and(|t| t.trim() == "1")
}

/// The originals that `what` (`power`, `housekeeping`) kept in `path` in
/// an earlier run since boot, read by `load` on an I/O thread (`count`:
/// how many). An unusable file is moved aside and said: its values are
/// lost, and the kernel keeps what it holds. A file that cannot be read at
/// all (permissions, EIO) is the error returned: nothing new is written
/// then, so its originals are not written over.
async fn load_originals<T: Default + Send + 'static>(
    pool: &IoPool,
    path: &std::path::Path,
    what: &'static str,
    load: fn(&std::path::Path) -> Result<crate::state::Found<T>, crate::state::StateError>,
    count: fn(&T) -> usize,
) -> (T, Option<String>) {
    use crate::state::Found;
    let file = path.to_path_buf();
    let found = pool
        .run_op("read", path, move |_| {
            load(&file).map_err(std::io::Error::other)
        })
        .await;
    match found {
        Ok(Found::Kept(kept)) => {
            info!(path = %path.display(), originals = count(&kept), "{what} originals loaded: put back once no longer wanted");
            (kept, None)
        }
        Ok(Found::Missing) => (T::default(), None),
        Ok(Found::Quarantined(why)) => {
            warn!(path = %path.display(), %why, "{what} originals file unusable; what the daemon wrote keeps what it holds");
            (T::default(), None)
        }
        Err(e) => {
            let e = chain(&e);
            warn!(error = %e, "cannot read the {what} originals file");
            (T::default(), Some(e))
        }
    }
}

impl Daemon {
    /// Start-up: detect the hierarchy, read the topology, load the state hint.
    /// Errors here are fatal.
    pub async fn start(cfg: Config) -> Result<Self> {
        let cfg = Arc::new(cfg);
        // First of all: a second daemon must change nothing, neither the
        // state file nor the cgroups, before it finds out it is the second.
        let state = StateFile::new(&cfg.state_file);
        let lock = state
            .lock()
            .context("cannot take the single-instance lock")?;
        let pool = IoPool::new(
            Arc::new(RealFs),
            IoConfig {
                timeout: cfg.read_timeout,
                ..IoConfig::default()
            },
        );
        let root = cfg.cgroup_root.clone();
        let mode = cfg.hierarchy;
        let hier = pool
            .run(&cfg.cgroup_root, move |fs| {
                Hierarchy::detect(fs, &root, mode)
                    .map_err(|e| std::io::Error::other(format!("{:#}", anyhow::Error::from(e))))
            })
            .await
            .context("cannot use the cgroup hierarchy")?;
        info!(
            version = ?hier.version,
            hybrid = hier.hybrid,
            cpuset = %hier.cpuset.display(),
            "cgroup hierarchy detected"
        );
        let topo = read_topology(&pool, &cfg.sysfs_root)
            .await
            .context("cannot read the CPU topology")?;
        let mems_all = pool
            .read(&hier.mems_file(""))
            .await
            .ok()
            .and_then(|t| t.parse::<CpuSet>().ok())
            .unwrap_or_default();
        let quiet_balance = root_balances(&pool, &hier).await;
        let reserved = cfg.reserved_cpus.resolve(&topo);
        let saved = match state.load::<SavedState>() {
            Ok(Loaded::Fresh(s)) => {
                info!(path = %state.path().display(), assignments = s.assignments.len(), "state loaded as a hint");
                Some(s)
            }
            Ok(Loaded::Missing) => None,
            Ok(Loaded::Quarantined { reason, moved_to }) => {
                warn!(path = %state.path().display(), moved_to = %moved_to.display(), %reason,
                    "state file unusable; moved aside, rebuilding from the live cgroups");
                None
            }
            Err(e) => {
                warn!(error = %format!("{:#}", anyhow::Error::from(e)), "cannot read the state file; rebuilding from the live cgroups");
                None
            }
        };
        info!(
            cpus = %topo.online(),
            numa_nodes = topo.numa_nodes().len(),
            reserved = %reserved,
            "topology read"
        );
        // What is not configuration; the rest comes from `configure`.
        let settings = Settings {
            mems_all,
            empty_inherits: hier.version == Version::V2,
            quiet_balance,
            ..Settings::default()
        };
        let mut saved = saved;
        let irqs = saved
            .as_mut()
            .map(|s| std::mem::take(&mut s.irqs))
            .unwrap_or_default();
        let partitions = saved
            .as_mut()
            .map(|s| std::mem::take(&mut s.partitions))
            .unwrap_or_default();
        // Without NRI, nothing says when a container left to another NRI
        // plugin is gone.
        let yielded = saved
            .as_mut()
            .map(|s| std::mem::take(&mut s.nri_yielded))
            .filter(|_| cfg.nri.enabled)
            .unwrap_or_default();
        let (power_originals, power_error) = load_originals(
            &pool,
            &cfg.power_originals,
            "power",
            crate::power::originals::load,
            BTreeMap::len,
        )
        .await;
        let (housekept, housekeeping_error) = load_originals(
            &pool,
            &cfg.housekeeping_originals,
            "housekeeping",
            crate::housekeeping::originals::load,
            BTreeMap::len,
        )
        .await;
        let mut engine = Engine::new(topo, settings, saved);
        // The partitions made by the last run take their CPUs out of every
        // other cgroup's effective set from the start.
        engine.set_isolated(partitions.cpus());
        let limit_files = match hier.version {
            Version::V2 => hier.limit_names().to_vec(),
            Version::V1 => Vec::new(),
        };
        let watcher = Watcher::new(&hier.cpuset, limit_files).context("cannot start inotify")?;
        let cpu_watcher = match (&hier.version, &hier.cpu) {
            (Version::V1, Some(cpu)) => Some(
                Watcher::new(cpu, hier.limit_names().to_vec()).context("cannot start inotify")?,
            ),
            _ => None,
        };
        let mounts = {
            let hier = hier.clone();
            pool.run(&cfg.cgroup_root, move |fs| watchdog::mounts(fs, &hier))
                .await
                .unwrap_or_else(|e| {
                    warn!(error = %chain(&e), "cannot list the cgroup hierarchies; the watchdog checks only the cpuset tree");
                    Vec::new()
                })
        };
        let (saved_tx, saved_rx) = tokio::sync::mpsc::unbounded_channel();
        // systemd writes cpusets only on v2 (AllowedCPUs=).
        let (told_tx, told_rx) = tokio::sync::mpsc::unbounded_channel();
        let bus = cfg
            .systemd_bus
            .as_deref()
            .filter(|_| hier.version == Version::V2);
        let systemd = super::systemd::Teller::new(bus, cfg.read_timeout, told_tx);
        let mut daemon = Daemon {
            _lock: lock,
            state_error: None,
            unwatched: BTreeSet::new(),
            unsure: Default::default(),
            cfg: cfg.clone(),
            pool,
            hier: Arc::new(hier),
            engine,
            state,
            watcher,
            cpu_watcher,
            ready: false,
            last_status: String::new(),
            notifier: Notifier::new(),
            dog: Watch::new(mounts),
            ping_every: None,
            last_ping: Instant::now(),
            all_mems_read: None,
            next_part: 0,
            stall: None,
            wedge_on_usr2: false,
            socket: Socket::new(),
            leaving: Vec::new(),
            rest: Rest::new(),
            sweep: None,
            save_due: false,
            logged: Default::default(),
            saving: false,
            baselines_unsupported: false,
            save_again: false,
            saved_tx,
            saved_rx,
            quotas: super::quota::Quotas::default(),
            partitions: super::partition::Partitions::new(partitions),
            irqs: super::irq::Irqs::new(irqs),
            powers: super::power::Powers::new(power_originals, power_error),
            housekeeping: super::housekeeping::Housekeeping::new(housekept, housekeeping_error),
            systemd,
            told_rx,
            config_path: None,
            loaded: Loads {
                at: api::unix_secs(),
                ..Loads::default()
            },
            log_level_hook: None,
            door: super::run::Door::closed(),
            nri: super::nri::Front::closed(cfg.clone()),
        };
        // Before the scope is first taken: it leaves those containers out.
        daemon.nri.restore(yielded);
        daemon.configure(cfg, reserved);
        Ok(daemon)
    }
}
