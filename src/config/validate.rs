//! Stage 2 of reading the configuration: the raw file validated into a
//! [`Config`] that holds only legal states, every error at the file, line,
//! column and key that caused it.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use globset::{GlobBuilder, GlobSetBuilder};
use toml::Spanned;
use toml::de::{DeTable, DeValue};

use crate::cgroup::is_within;
use crate::cpuset::CpuSet;

use super::raw::*;
use super::*;

mod doors;

// ---------------------------------------------------------------------------
// Stage 2: validation.

pub(super) struct Validator<'a> {
    pub(super) text: &'a str,
    pub(super) path: &'a Path,
}

/// A validated value and where the file wrote it (`None` for a default).
pub(super) struct Located<T> {
    pub(super) value: T,
    pub(super) span: Option<Range<usize>>,
}

/// The validation errors found so far. Every key is validated, and the one
/// reported is the first in the file, so fixing errors top to bottom works.
#[derive(Default)]
pub(super) struct Errors(Vec<ConfigError>);

impl Errors {
    /// The value, or `None` with the error kept.
    fn keep<T>(&mut self, result: Result<T, ConfigError>) -> Option<T> {
        result.map_err(|e| self.0.push(e)).ok()
    }

    fn first_in_file(self) -> Result<(), ConfigError> {
        let position = |e: &ConfigError| match e {
            ConfigError::Invalid { line, column, .. }
            | ConfigError::UnknownKey { line, column, .. }
            | ConfigError::Syntax { line, column, .. } => (*line, *column),
            ConfigError::Read { .. } | ConfigError::TooLarge { .. } => (0, 0),
        };
        match self.0.into_iter().min_by_key(position) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Validator<'_> {
    pub(super) fn error(
        &self,
        span: &Range<usize>,
        key: &str,
        message: impl Into<String>,
    ) -> ConfigError {
        let (line, column) = line_col(self.text, span.start);
        ConfigError::Invalid {
            path: self.path.to_path_buf(),
            line,
            column,
            key: key.to_string(),
            message: message.into(),
        }
    }

    pub(super) fn line(&self, span: &Range<usize>) -> usize {
        line_col(self.text, span.start).0
    }

    /// Refuses a document that holds more than any legitimate configuration:
    /// an array over [`MAX_ITEMS`] entries, a string or key over
    /// [`MAX_STRING`] bytes. One walk over the whole document, for every key
    /// (including unknown ones, which would otherwise be quoted whole), so no
    /// key can forget it.
    pub(super) fn check_bounds(&self, doc: &DeTable<'_>) -> Result<(), ConfigError> {
        let mut errors = Errors::default();
        self.bound_table(doc, &mut Vec::new(), &mut errors);
        errors.first_in_file()
    }

    fn bound_table(&self, table: &DeTable<'_>, keys: &mut Vec<String>, errors: &mut Errors) {
        for (key, value) in table.iter() {
            let name = key.get_ref();
            if name.len() > MAX_STRING {
                let shown: String = name.chars().take(32).collect();
                errors.0.push(self.error(
                    &key.span(),
                    &format!("{shown}…"),
                    format!(
                        "a key of {} bytes; at most {MAX_STRING} are allowed",
                        name.len()
                    ),
                ));
                continue;
            }
            keys.push(name.to_string());
            self.bound_value(value, keys, errors);
            keys.pop();
        }
    }

    fn bound_value(
        &self,
        value: &Spanned<DeValue<'_>>,
        keys: &mut Vec<String>,
        errors: &mut Errors,
    ) {
        match value.get_ref() {
            DeValue::String(s) if s.len() > MAX_STRING => errors.0.push(self.error(
                &value.span(),
                &keys.join("."),
                format!(
                    "a string of {} bytes; at most {MAX_STRING} are allowed",
                    s.len()
                ),
            )),
            DeValue::Table(table) => self.bound_table(table, keys, errors),
            DeValue::Array(items) => {
                if let Some(first_too_many) = items.get(MAX_ITEMS) {
                    errors.0.push(self.error(
                        &first_too_many.span(),
                        &keys.join("."),
                        format!("{} entries; at most {MAX_ITEMS} are allowed", items.len()),
                    ));
                }
                for item in items.iter() {
                    self.bound_value(item, keys, errors);
                }
            }
            _ => {}
        }
    }

    pub(super) fn config(&self, raw: RawConfig) -> Result<Config, ConfigError> {
        let d = Config::default();
        let mut errors = Errors::default();

        let mut paths = |raw: Option<Spanned<String>>, key: &str, default: PathBuf| {
            let result = raw.map_or(Ok(default.clone()), |p| self.abs_path(&p, key));
            errors.keep(result).unwrap_or(default)
        };
        let cgroup_root = paths(raw.cgroup_root, "cgroup_root", d.cgroup_root);
        let sysfs_root = paths(raw.sysfs_root, "sysfs_root", d.sysfs_root);
        let proc_root = paths(raw.proc_root, "proc_root", d.proc_root);
        let state_file = paths(raw.state_file, "state_file", d.state_file);
        let power_originals = paths(
            raw.power_originals,
            "power_originals",
            d.power_originals.clone(),
        );
        let housekeeping_originals = paths(
            raw.housekeeping_originals,
            "housekeeping_originals",
            d.housekeeping_originals.clone(),
        );
        let socket = match raw.socket {
            Some(s) => errors.keep(self.socket(&s, "socket")).unwrap_or(d.socket),
            None => d.socket,
        };
        let metrics_listen = raw
            .metrics_listen
            .and_then(|a| errors.keep(self.listen_address(&a, "metrics_listen")));
        let reserved_cpus = match raw.reserved_cpus {
            Some(r) => errors.keep(self.reserved(&r)).unwrap_or(d.reserved_cpus),
            None => d.reserved_cpus,
        };
        let mut durations = |raw: Option<Spanned<String>>, key: &str, default: Duration| {
            let result = raw.map_or(Ok(default), |t| self.duration(&t, key));
            errors.keep(result).unwrap_or(default)
        };
        let reconcile_interval = durations(
            raw.reconcile_interval,
            "reconcile_interval",
            d.reconcile_interval,
        );
        let read_timeout = durations(raw.read_timeout, "read_timeout", d.read_timeout);
        let dstate_threshold =
            durations(raw.dstate_threshold, "dstate_threshold", d.dstate_threshold);
        let frozen_threshold =
            durations(raw.frozen_threshold, "frozen_threshold", d.frozen_threshold);
        let watchdog_interval = durations(
            raw.watchdog_interval,
            "watchdog_interval",
            d.watchdog_interval,
        );
        let repair_cooldown = durations(raw.repair_cooldown, "repair_cooldown", d.repair_cooldown);
        let required = self.cgroup_paths(raw.required_paths, "required_paths", &d.required_paths);
        let required = errors.keep(required).unwrap_or_default();
        let shared = self.cgroup_paths(raw.shared_cgroups, "shared_cgroups", &d.shared_cgroups);
        let shared = errors.keep(shared).unwrap_or_default();
        let managed = self.cgroup_paths(raw.managed, "managed", &d.managed);
        let managed = errors.keep(managed).unwrap_or_default();
        let hierarchy = match raw.hierarchy {
            Some(h) => errors.keep(self.hierarchy(&h)).unwrap_or(d.hierarchy),
            None => d.hierarchy,
        };
        // A list of absolute paths: each one that is not is an error kept.
        let mut abs_paths =
            |raw: Option<Vec<Spanned<String>>>, key: &str, default: Vec<PathBuf>| match raw {
                Some(dirs) => dirs
                    .iter()
                    .filter_map(|dir| errors.keep(self.abs_path(dir, key)))
                    .collect(),
                None => default,
            };
        let cdi_spec_dirs = abs_paths(raw.cdi_spec_dirs, "cdi_spec_dirs", d.cdi_spec_dirs);
        let bundle_dirs = abs_paths(raw.bundle_dirs, "bundle_dirs", d.bundle_dirs);
        let kubelet_cpu_manager_state = match raw.kubelet_cpu_manager_state {
            Some(s) if s.get_ref().is_empty() => None,
            Some(s) => errors.keep(self.abs_path(&s, "kubelet_cpu_manager_state")),
            None => d.kubelet_cpu_manager_state.clone(),
        };
        let systemd_bus = match raw.systemd_bus {
            Some(s) if s.get_ref().is_empty() => None,
            Some(s) => errors.keep(self.socket(&s, "systemd_bus")),
            None => d.systemd_bus,
        };
        let unthrottle_exclusive = match raw.unthrottle_exclusive {
            Some(u) => errors
                .keep(self.unthrottle(&u))
                .unwrap_or(d.unthrottle_exclusive),
            None => d.unthrottle_exclusive,
        };
        let isolation = match raw.isolation {
            Some(i) => errors.keep(self.isolation(&i)).unwrap_or(d.isolation),
            None => d.isolation,
        };
        let device_alignment = match raw.device_alignment {
            Some(a) => errors
                .keep(self.device_alignment(&a, "device_alignment"))
                .unwrap_or(d.device_alignment),
            None => d.device_alignment,
        };
        let log_level = match raw.log_level {
            Some(l) => errors.keep(self.log_level(&l)).unwrap_or(d.log_level),
            None => d.log_level,
        };
        let classes = errors.keep(self.classes(raw.class)).unwrap_or_default();
        let power = match raw.power {
            Some(p) => errors.keep(self.power(p, &classes)).unwrap_or_default(),
            None => d.power.clone(),
        };
        let rules: Vec<Located<Rule>> = raw
            .rule
            .into_iter()
            .filter_map(|r| errors.keep(self.rule(r, &classes)))
            .collect();
        let run = match raw.run {
            Some(r) => errors.keep(self.run(r)).unwrap_or(d.run),
            None => d.run,
        };
        let slurm = match raw.slurm {
            Some(s) => Slurm {
                housekeeping: s.housekeeping.unwrap_or(d.slurm.housekeeping),
            },
            None => d.slurm,
        };
        let nri = match raw.nri {
            Some(n) => errors.keep(self.nri(n)).unwrap_or(d.nri),
            None => d.nri,
        };
        // Combinations are judged only on values that are valid one by one, so
        // a conflict is never reported against a default standing in for a
        // rejected value.
        errors.first_in_file()?;

        let mut errors = Errors::default();
        errors.keep(self.check_cpu_options(&raw.full_pcpus_only, &raw.spread_cores));
        errors.keep(self.check_shared_nesting(&shared, &managed, &rules));
        errors.first_in_file()?;

        Ok(Config {
            cgroup_root,
            sysfs_root,
            proc_root,
            state_file,
            socket,
            metrics_listen,
            reserved_cpus,
            strict_reservation: raw.strict_reservation.unwrap_or(d.strict_reservation),
            reconcile_interval,
            read_timeout,
            dstate_threshold,
            frozen_threshold,
            thaw_frozen: raw.thaw_frozen.unwrap_or(d.thaw_frozen),
            watchdog_interval,
            repair: raw.repair.unwrap_or(d.repair),
            repair_cooldown,
            required_paths: required.into_iter().map(|p| p.value).collect(),
            shared_cgroups: shared.into_iter().map(|p| p.value).collect(),
            managed: managed.into_iter().map(|p| p.value).collect(),
            hierarchy,
            kubelet_rule: raw.kubelet_rule.unwrap_or(d.kubelet_rule),
            kubelet_cpu_manager_state,
            full_pcpus_only: raw
                .full_pcpus_only
                .map_or(d.full_pcpus_only, Spanned::into_inner),
            distribute_across_numa: raw
                .distribute_across_numa
                .unwrap_or(d.distribute_across_numa),
            spread_cores: raw.spread_cores.map_or(d.spread_cores, Spanned::into_inner),
            align_memory: raw.align_memory.unwrap_or(d.align_memory),
            unthrottle_exclusive,
            irq_affinity: raw.irq_affinity.unwrap_or(d.irq_affinity),
            housekeeping: raw.housekeeping.unwrap_or(d.housekeeping),
            isolation,
            device_alignment,
            cdi_spec_dirs,
            bundle_dirs,
            systemd_bus,
            log_level,
            rules: rules.into_iter().map(|r| r.value).collect(),
            run,
            slurm,
            nri,
            power_originals,
            housekeeping_originals,
            classes,
            power,
        })
    }

    fn abs_path(&self, raw: &Spanned<String>, key: &str) -> Result<PathBuf, ConfigError> {
        let text = raw.get_ref();
        let reason = if text.is_empty() {
            "empty"
        } else if text.contains('\0') {
            "contains a NUL byte"
        } else if !text.starts_with('/') {
            "must be absolute"
        } else {
            return Ok(PathBuf::from(text));
        };
        Err(self.error(&raw.span(), key, format!("invalid path {text:?}: {reason}")))
    }

    fn socket(&self, raw: &Spanned<String>, key: &str) -> Result<PathBuf, ConfigError> {
        let path = self.abs_path(raw, key)?;
        let len = raw.get_ref().len();
        if len > MAX_SOCKET_PATH {
            return Err(self.error(
                &raw.span(),
                key,
                format!(
                    "invalid path {:?}: {len} bytes, longer than the {MAX_SOCKET_PATH} a Unix socket address holds",
                    raw.get_ref()
                ),
            ));
        }
        Ok(path)
    }

    fn listen_address(
        &self,
        raw: &Spanned<String>,
        key: &str,
    ) -> Result<std::net::SocketAddr, ConfigError> {
        raw.get_ref().parse().map_err(|_| {
            self.error(
                &raw.span(),
                key,
                format!(
                    "invalid address {:?}: expected IP:PORT, such as 127.0.0.1:9561 or [::1]:9561",
                    raw.get_ref()
                ),
            )
        })
    }

    fn reserved(&self, raw: &Spanned<RawReserved>) -> Result<Reserved, ConfigError> {
        let span = raw.span();
        let key = "reserved_cpus";
        // At least one CPU: the reserved CPUs are what keeps exclusive
        // allocations from ever taking the whole shared pool.
        match raw.get_ref() {
            RawReserved::List(text) => {
                let set: CpuSet = text
                    .parse()
                    .map_err(|e| self.error(&span, key, format!("{e}")))?;
                if set.is_empty() {
                    return Err(self.error(
                        &span,
                        key,
                        format!(
                            "invalid CPU list {text:?}: reserve at least one CPU, so the shared pool is never empty"
                        ),
                    ));
                }
                Ok(Reserved::List(set))
            }
            RawReserved::Count(n) => match usize::try_from(*n) {
                Ok(n) if (1..=MAX_CPUS).contains(&n) => Ok(Reserved::Count(n)),
                _ => Err(self.error(
                    &span,
                    key,
                    format!(
                        "invalid CPU count {n}: must be from 1 to {MAX_CPUS}, so the shared pool is never empty"
                    ),
                )),
            },
        }
    }

    fn duration(&self, raw: &Spanned<String>, key: &str) -> Result<Duration, ConfigError> {
        parse_duration(raw.get_ref()).map_err(|e| self.error(&raw.span(), key, e.to_string()))
    }

    fn cgroup_paths(
        &self,
        raw: Option<Vec<Spanned<String>>>,
        key: &str,
        default: &[String],
    ) -> Result<Vec<Located<String>>, ConfigError> {
        let Some(raw) = raw else {
            let located = default.iter().map(|p| Located {
                value: p.clone(),
                span: None,
            });
            return Ok(located.collect());
        };
        raw.into_iter()
            .map(|p| {
                let span = p.span();
                let text = p.into_inner();
                match relative_path_problem(&text) {
                    Some(reason) => Err(self.error(
                        &span,
                        key,
                        format!("invalid cgroup path {text:?}: {reason}"),
                    )),
                    None => Ok(Located {
                        value: text,
                        span: Some(span),
                    }),
                }
            })
            .collect()
    }

    fn hierarchy(&self, raw: &Spanned<String>) -> Result<HierarchyMode, ConfigError> {
        match raw.get_ref().as_str() {
            "auto" => Ok(HierarchyMode::Auto),
            "v1" => Ok(HierarchyMode::V1),
            "v2" => Ok(HierarchyMode::V2),
            other => Err(self.error(
                &raw.span(),
                "hierarchy",
                format!("invalid hierarchy {other:?}: expected one of auto, v1, v2"),
            )),
        }
    }

    fn unthrottle(&self, raw: &Spanned<String>) -> Result<Unthrottle, ConfigError> {
        match raw.get_ref().as_str() {
            "none" => Ok(Unthrottle::None),
            "kubelet" => Ok(Unthrottle::Kubelet),
            "all" => Ok(Unthrottle::All),
            other => Err(self.error(
                &raw.span(),
                "unthrottle_exclusive",
                format!("invalid value {other:?}: expected one of none, kubelet, all"),
            )),
        }
    }

    fn isolation(&self, raw: &Spanned<String>) -> Result<Isolation, ConfigError> {
        match raw.get_ref().as_str() {
            "none" => Ok(Isolation::None),
            "partition" => Ok(Isolation::Partition),
            other => Err(self.error(
                &raw.span(),
                "isolation",
                format!("invalid value {other:?}: expected one of none, partition"),
            )),
        }
    }

    fn device_alignment(
        &self,
        raw: &Spanned<String>,
        key: &str,
    ) -> Result<DeviceAlignment, ConfigError> {
        raw.get_ref()
            .parse()
            .map_err(|why| self.error(&raw.span(), key, why))
    }

    /// A rule's `near`: each string a device ([`crate::devices::DeviceRef`]).
    fn near(
        &self,
        raw: Vec<Spanned<String>>,
    ) -> Result<Vec<crate::devices::DeviceRef>, ConfigError> {
        if raw.len() > crate::devices::MAX_DEVICES {
            return Err(self.error(
                &raw[crate::devices::MAX_DEVICES].span(),
                "rule.near",
                format!(
                    "more than {} devices for one rule",
                    crate::devices::MAX_DEVICES
                ),
            ));
        }
        let mut out = Vec::with_capacity(raw.len());
        for word in raw {
            let d = word
                .get_ref()
                .parse()
                .map_err(|e: crate::devices::BadDevice| {
                    self.error(&word.span(), "rule.near", e.to_string())
                })?;
            if !out.contains(&d) {
                out.push(d);
            }
        }
        Ok(out)
    }

    fn log_level(&self, raw: &Spanned<String>) -> Result<LogLevel, ConfigError> {
        match raw.get_ref().as_str() {
            "error" => Ok(LogLevel::Error),
            "warn" => Ok(LogLevel::Warn),
            "info" => Ok(LogLevel::Info),
            "debug" => Ok(LogLevel::Debug),
            "trace" => Ok(LogLevel::Trace),
            other => Err(self.error(
                &raw.span(),
                "log_level",
                format!(
                    "invalid log level {other:?}: expected one of error, warn, info, debug, trace"
                ),
            )),
        }
    }

    /// A validated rule, located at its `match` value.
    fn rule(&self, raw: Spanned<RawRule>, classes: &[Class]) -> Result<Located<Rule>, ConfigError> {
        let line = self.line(&raw.span());
        let raw = raw.into_inner();

        let pattern_span = raw.pattern.span();
        let pattern = raw.pattern.into_inner();
        let invalid_glob = |reason: &dyn fmt::Display| {
            self.error(
                &pattern_span,
                "rule.match",
                format!("invalid glob {pattern:?}: {reason}"),
            )
        };
        // Cgroup paths are relative and normalised, so a pattern that is not
        // could never match.
        if let Some(reason) = relative_path_problem(&pattern) {
            return Err(invalid_glob(&reason));
        }
        // Checked before globset parses the pattern: globset and regex
        // recurse into each nested alternation.
        let depth = alternation_depth(&pattern);
        if depth > MAX_GLOB_NESTING {
            return Err(invalid_glob(&format!(
                "alternations nest {depth} deep; at most {MAX_GLOB_NESTING} are allowed"
            )));
        }
        // `literal_separator` keeps `*` and `?` within one path component, so
        // `hpc.slice/*` does not match `hpc.slice/job-1.scope/child`.
        let glob = GlobBuilder::new(&pattern)
            .literal_separator(true)
            .build()
            .map_err(|e| invalid_glob(e.kind()))?;
        // Whatever else the regex build refuses (its size limit) is an error
        // of the rule too.
        let matcher = GlobSetBuilder::new()
            .add(glob)
            .build()
            .map_err(|e| invalid_glob(e.kind()))?;

        let cpus = match usize::try_from(raw.cpus.get_ref().0) {
            Ok(n) if (1..=MAX_CPUS).contains(&n) => n,
            _ => {
                return Err(self.error(
                    &raw.cpus.span(),
                    "rule.cpus",
                    format!(
                        "invalid CPU count {}: must be from 1 to {MAX_CPUS}",
                        raw.cpus.get_ref().0
                    ),
                ));
            }
        };

        let numa = match raw.numa {
            None => Vec::new(),
            Some(numa) => self.numa(&numa)?,
        };
        let class = match raw.class {
            None => None,
            Some(c) => Some(self.class_ref(&c, "rule.class", classes)?),
        };
        let near = match raw.near {
            None => Vec::new(),
            Some(near) => self.near(near)?,
        };
        let device_alignment = match raw.device_alignment {
            None => None,
            Some(a) => Some(self.device_alignment(&a, "rule.device_alignment")?),
        };
        Ok(Located {
            value: Rule {
                pattern,
                cpus,
                numa,
                class,
                near,
                device_alignment,
                matcher,
                line,
            },
            span: Some(pattern_span),
        })
    }

    fn numa(&self, raw: &Spanned<String>) -> Result<Vec<u32>, ConfigError> {
        let text = raw.get_ref();
        let invalid = |reason: &str| {
            self.error(
                &raw.span(),
                "rule.numa",
                format!("invalid NUMA node list {text:?}: {reason}"),
            )
        };
        // NUMA node lists use the kernel's CPU list format (`0-1,3`).
        let nodes: CpuSet = text.parse().map_err(|e: crate::cpuset::ParseCpuSetError| {
            invalid(&e.reason.replace("CPU", "NUMA node"))
        })?;
        if nodes.is_empty() {
            return Err(invalid("empty; leave `numa` out for no preference"));
        }
        Ok(nodes.iter().collect())
    }

    /// A cgroup confined to the shared pool cannot hold a cgroup with exclusive
    /// CPUs: a child's `cpuset.cpus` must lie within its parent's (v1 refuses
    /// the write, v2 clips `cpuset.cpus.effective` to the parent's). Checked for
    /// the managed subtrees and for the literal part of each rule's pattern.
    fn check_shared_nesting(
        &self,
        shared: &[Located<String>],
        managed: &[Located<String>],
        rules: &[Located<Rule>],
    ) -> Result<(), ConfigError> {
        let mut errors = Errors::default();
        for s in shared {
            let holds = |m: &str| {
                format!(
                    "{:?} holds managed subtree {m:?}; {SHARED_NESTING}",
                    s.value
                )
            };
            let inside = |path: &str| {
                format!(
                    "{path:?} lies inside shared cgroup {:?}; {SHARED_NESTING}",
                    s.value
                )
            };
            for m in managed.iter().filter(|m| is_within(&m.value, &s.value)) {
                // Report at whichever of the two the file wrote last: that is
                // the line that made the combination wrong.
                let error = match (&s.span, &m.span) {
                    (Some(ss), Some(ms)) if ss.start > ms.start => {
                        self.error(ss, "shared_cgroups", holds(&m.value))
                    }
                    (_, Some(ms)) => self.error(ms, "managed", inside(&m.value)),
                    (Some(ss), None) => self.error(ss, "shared_cgroups", holds(&m.value)),
                    (None, None) => continue,
                };
                errors.0.push(error);
            }
            for r in rules {
                let literal = literal_components(&r.value.pattern).join("/");
                if literal.is_empty() || !is_within(&literal, &s.value) {
                    continue;
                }
                if let Some(span) = &r.span {
                    errors
                        .0
                        .push(self.error(span, "rule.match", inside(&r.value.pattern)));
                }
            }
        }
        errors.first_in_file()
    }

    fn check_cpu_options(
        &self,
        full_pcpus_only: &Option<Spanned<bool>>,
        spread_cores: &Option<Spanned<bool>>,
    ) -> Result<(), ConfigError> {
        let (Some(full), Some(spread)) = (full_pcpus_only, spread_cores) else {
            return Ok(());
        };
        if !(*full.get_ref() && *spread.get_ref()) {
            return Ok(());
        }
        let (later, key, other, earlier) = if spread.span().start > full.span().start {
            (spread, "spread_cores", "full_pcpus_only", full)
        } else {
            (full, "full_pcpus_only", "spread_cores", spread)
        };
        Err(self.error(
            &later.span(),
            key,
            format!(
                "cannot be true together with {other} (line {}): whole physical cores only and one thread per core exclude each other",
                self.line(&earlier.span())
            ),
        ))
    }
}

pub(super) const SHARED_NESTING: &str =
    "a cgroup confined to the shared pool cannot hold exclusive CPUs";

/// What is wrong with a user's or group's name, if anything: what
/// `useradd` takes (letters, digits, `_`, `.`, `-`, not first; at most 32).
fn account_name_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() || name.len() > 32 {
        return Some("1 to 32 characters");
    }
    if name.starts_with('-') {
        return Some("starts with '-'");
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '$'))
    {
        return Some("letters, digits, '_', '.' and '-' only");
    }
    None
}

/// Why `text` is not a clean path relative to the cgroup root, if it is not.
pub(super) fn relative_path_problem(text: &str) -> Option<&'static str> {
    let mut components = text.split('/');
    if text.is_empty() {
        Some("empty")
    } else if text.contains('\0') {
        Some("contains a NUL byte")
    } else if text.starts_with('/') {
        Some("must be relative to cgroup_root, not absolute")
    } else if components.clone().any(|c| c == "..") {
        Some("`..` components are not allowed")
    } else if components.clone().any(|c| c == ".") {
        Some("`.` components are not allowed")
    } else if components.any(str::is_empty) {
        Some("empty component (a doubled or trailing `/`)")
    } else {
        None
    }
}
