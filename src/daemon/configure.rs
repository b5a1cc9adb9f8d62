//! One projection of the configuration onto the daemon's parts, made the
//! same way at start-up and at a reload: [`Daemon::configure`].

use std::sync::Arc;

use tracing::{info, warn};

use super::report::Loads;
use super::{Daemon, chain};
use crate::api;
use crate::cgroup::{Rel, Scope, Version};
use crate::config::{self, Config};
use crate::cpuset::CpuSet;
use crate::engine::Settings;

/// The cgroups among `known` that `old` holds and `new` does not: those a
/// reload takes out of the daemon's subtrees.
fn leaving<'a>(known: impl Iterator<Item = &'a Rel>, old: &Scope, new: &Scope) -> Vec<Rel> {
    known
        .filter(|rel| old.holds(rel) && !new.holds(rel))
        .cloned()
        .collect()
}

impl Daemon {
    /// Applies configuration `cfg`, with its reserved CPUs resolved to
    /// `reserved`, to every part: the engine's settings and scope, the
    /// cgroups that leave the scope, and the watchdog's required paths,
    /// repairs and thresholds. The caller reconciles afterwards.
    pub(super) fn configure(&mut self, cfg: Arc<Config>, reserved: CpuSet) {
        let current = self.engine.settings();
        let settings = Settings {
            alloc: cfg.alloc_options(reserved.clone()),
            reserved,
            scope: self.scope_for(&cfg),
            align_memory: cfg.align_memory,
            mems_all: current.mems_all.clone(),
            empty_inherits: current.empty_inherits,
            quiet_balance: current.quiet_balance,
            strict_reservation: cfg.strict_reservation,
            device_alignment: cfg.device_alignment,
        };
        self.take_settings(settings);
        self.dog.configure(&cfg);
        if cfg.isolation != self.cfg.isolation {
            self.partitions.reset();
        }
        if cfg.isolation == config::Isolation::Partition && self.hier.version == Version::V1 {
            warn!(
                "isolation = \"partition\" is refused: cgroup v1 has no partitions; workloads are pinned without them"
            );
        }
        self.cfg = cfg;
    }

    /// Reads the configuration file again and applies it. An invalid file
    /// changes nothing: the error (file, line, key) is logged and the running
    /// configuration stays. Keys only a restart can apply keep their running
    /// value, with a warning each. The caller reconciles afterwards.
    pub(super) async fn reload(&mut self) {
        let Some(path) = self.config_path.clone() else {
            return;
        };
        let file = path.clone();
        let read = self
            .pool
            .run(&path, move |_fs| Ok(config::load(&file)))
            .await
            .map_err(|e| chain(&e))
            .and_then(|r| r.map_err(|e| e.to_string()));
        let new = match read {
            Ok(new) => new,
            Err(error) => {
                tracing::error!(path = %path.display(), %error,
                    "configuration not reloaded; the running one stays");
                self.count_reload("failed");
                self.loaded.error = Some(error);
                self.socket.dirty = true;
                return;
            }
        };
        let config::Reload {
            config: new,
            applied,
            deferred,
        } = self.cfg.reload(new);
        for key in &deferred {
            warn!(path = %path.display(), key, "changed in the configuration file; applied at the next restart");
        }
        self.count_reload("ok");
        self.loaded = Loads {
            at: api::unix_secs(),
            restart_pending: deferred.iter().map(|k| k.to_string()).collect(),
            error: None,
        };
        self.socket.dirty = true;
        if applied.is_empty() {
            info!(path = %path.display(), "configuration reloaded; nothing to apply");
            return;
        }
        info!(path = %path.display(), changed = %applied.join(", "), "configuration reloaded");
        if self.cfg.log_level != new.log_level
            && let Some(hook) = &self.log_level_hook
        {
            hook(new.log_level);
        }
        // A count of reserved CPUs is chosen again only when it changed: the
        // topology may have changed since (hot-plug), and a reload of other
        // keys must not move workloads.
        let reserved = if applied.contains(&"reserved_cpus") {
            new.reserved_cpus.resolve(self.engine.topology())
        } else {
            self.engine.settings().reserved.clone()
        };
        let roots_before = self.engine.settings().scope.roots().to_vec();
        self.configure(Arc::new(new), reserved);
        if self.hier.version == Version::V2 && self.scope().roots() != roots_before {
            self.enable_cpuset_controller().await;
        }
        // The required paths under the new configuration, now (a round
        // already running is dropped when it ends, and this one follows).
        self.start_checks(true);
    }

    /// Which subtrees are the daemon's.
    /// The subtrees of `cfg` the daemon manages now: without the kubepods
    /// roots while the kubelet's static CPU manager owns them
    /// (`Daemon::act_on_kubelet`).
    pub(super) fn scope_for(&self, cfg: &Config) -> Scope {
        let scope = match self.dog.kubelet {
            None => Scope::of(cfg),
            Some(_) => {
                let mut cfg = cfg.clone();
                cfg.managed.retain(|root| {
                    !matches!(
                        crate::cgroup::layout::classify(root),
                        crate::cgroup::layout::Kind::KubepodsRoot { .. }
                    )
                });
                Scope::of(&cfg)
            }
        };
        // The containers another NRI plugin set the CPUs of.
        scope.leaving(self.nri.yielded.values().cloned())
    }

    /// Takes the scope again after what it depends on changed besides the
    /// configuration: what leaves it is given back as after a reload.
    pub(super) fn rescope(&mut self) {
        let mut settings = self.engine.settings().clone();
        settings.scope = self.scope_for(&self.cfg);
        self.take_settings(settings);
    }

    /// Gives the engine `settings`. What leaves the subtrees is no longer
    /// the daemon's (its cpusets stay as they are); what joins is found by
    /// the reconcile. The NRI front end's fallback answers by the new scope.
    fn take_settings(&mut self, settings: Settings) {
        let gone = leaving(
            self.engine.known(),
            &self.engine.settings().scope,
            &settings.scope,
        );
        self.leaving.extend(gone);
        self.nri.set_scope(&settings.scope);
        self.engine.set_settings(settings);
    }

    pub(super) fn scope(&self) -> &Scope {
        &self.engine.settings().scope
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(managed: &[&str], shared: &[&str]) -> Scope {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect();
        Scope::new(v(managed), v(shared), Vec::new())
    }

    #[test]
    fn a_reload_lets_go_of_what_leaves_the_subtrees_only() {
        let known: Vec<Rel> = [
            "kubepods",
            "kubepods/pod1",
            "system.slice",
            "system.slice/a",
        ]
        .into_iter()
        .map(Rel::from)
        .collect();
        let old = scope(&["kubepods"], &["system.slice"]);
        let new = scope(&["kubepods"], &[]);
        let gone = leaving(known.iter(), &old, &new);
        assert_eq!(
            gone,
            [Rel::from("system.slice"), Rel::from("system.slice/a")]
        );
        assert!(
            leaving(known.iter(), &new, &old).is_empty(),
            "joining is not leaving"
        );
        assert!(leaving(known.iter(), &old, &old).is_empty());
    }
}
