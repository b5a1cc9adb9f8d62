//! A reload (SIGHUP): what a running daemon makes of a configuration read
//! again ([`Config::reload`]), which keys take their new value and which
//! wait for a restart ([`Config::RESTART_KEYS`]). Pure: it never reads the
//! file, and never applies anything (`daemon/configure.rs` does).

use super::Config;

/// What a running daemon makes of a changed configuration file
/// ([`Config::reload`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reload {
    /// The configuration to run with from now on.
    pub config: Config,
    /// The keys whose new value is in force, in [`Config`]'s order.
    pub applied: Vec<&'static str>,
    /// The keys whose new value waits for a restart ([`Config::RESTART_KEYS`]),
    /// in [`Config`]'s order; `config` keeps their running values.
    pub deferred: Vec<&'static str>,
}

impl Config {
    /// The keys a running daemon keeps until it restarts: where the kernel's
    /// files, the state and the sockets are and which hierarchy is driven (its
    /// I/O threads, watchers and sockets were set up for them), the I/O
    /// timeout, where bundles are found (a bundle once read is
    /// remembered), the bus to systemd (connected once), `[run]` (its
    /// socket is bound once), `[nri]` (registered once, by name), `power_originals` and `housekeeping_originals`
    /// (the originals saved there must be found there again). In [`Config`]'s order.
    pub const RESTART_KEYS: &[&str] = &[
        "cgroup_root",
        "sysfs_root",
        "proc_root",
        "state_file",
        "socket",
        "metrics_listen",
        "read_timeout",
        "hierarchy",
        "bundle_dirs",
        "systemd_bus",
        "run",
        "nri",
        "power_originals",
        "housekeeping_originals",
    ];

    /// The running configuration `self` updated to `new`, a configuration
    /// read again from the file (SIGHUP): every key takes its new value but
    /// the [`Self::RESTART_KEYS`], which keep their running one.
    pub fn reload(&self, new: Config) -> Reload {
        let mut config = new;
        let mut applied = Vec::new();
        let mut deferred = Vec::new();
        macro_rules! compare {
            ($key:ident) => {
                if config.$key != *$key {
                    let name = stringify!($key);
                    if Self::RESTART_KEYS.contains(&name) {
                        config.$key = $key.clone();
                        deferred.push(name);
                    } else {
                        applied.push(name);
                    }
                }
            };
        }
        // Every key bound by name, and each binding used by `compare!`: a new
        // key fails to compile here, and one not compared is an unused
        // variable (denied by clippy in CI).
        let Config {
            cgroup_root,
            sysfs_root,
            proc_root,
            state_file,
            socket,
            metrics_listen,
            reserved_cpus,
            strict_reservation,
            reconcile_interval,
            read_timeout,
            dstate_threshold,
            frozen_threshold,
            thaw_frozen,
            watchdog_interval,
            repair,
            repair_cooldown,
            required_paths,
            shared_cgroups,
            managed,
            hierarchy,
            kubelet_rule,
            kubelet_cpu_manager_state,
            full_pcpus_only,
            distribute_across_numa,
            spread_cores,
            align_memory,
            unthrottle_exclusive,
            irq_affinity,
            housekeeping,
            isolation,
            device_alignment,
            cdi_spec_dirs,
            bundle_dirs,
            systemd_bus,
            log_level,
            rules,
            run,
            slurm,
            nri,
            power_originals,
            housekeeping_originals,
            classes,
            power,
        } = self;
        compare!(cgroup_root);
        compare!(sysfs_root);
        compare!(proc_root);
        compare!(state_file);
        compare!(socket);
        compare!(metrics_listen);
        compare!(reserved_cpus);
        compare!(strict_reservation);
        compare!(reconcile_interval);
        compare!(read_timeout);
        compare!(dstate_threshold);
        compare!(frozen_threshold);
        compare!(thaw_frozen);
        compare!(watchdog_interval);
        compare!(repair);
        compare!(repair_cooldown);
        compare!(required_paths);
        compare!(shared_cgroups);
        compare!(managed);
        compare!(hierarchy);
        compare!(kubelet_rule);
        compare!(kubelet_cpu_manager_state);
        compare!(full_pcpus_only);
        compare!(distribute_across_numa);
        compare!(spread_cores);
        compare!(align_memory);
        compare!(unthrottle_exclusive);
        compare!(irq_affinity);
        compare!(housekeeping);
        compare!(isolation);
        compare!(device_alignment);
        compare!(cdi_spec_dirs);
        compare!(bundle_dirs);
        compare!(systemd_bus);
        compare!(log_level);
        compare!(rules);
        compare!(run);
        compare!(slurm);
        compare!(nri);
        compare!(power_originals);
        compare!(housekeeping_originals);
        compare!(classes);
        compare!(power);
        Reload {
            config,
            applied,
            deferred,
        }
    }
}
