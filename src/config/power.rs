//! The power classes of the configuration (issue #35): the `[[class]]`
//! tables, the `[power]` table that says which class exclusive, shared and
//! reserved CPUs get, and the values they hold (frequencies, EPP, C-state
//! names, resume latency), validated into types that hold only legal states.
//!
//! Like the rest of `config`, it does no I/O: whether a CPU offers a
//! governor, a frequency or a C-state is for the planner ([`crate::power`])
//! to judge against what sysfs says, per CPU.

use std::fmt;

use serde::Deserialize;
use toml::Spanned;

use super::raw::RawStrOrInt;
use super::validate::Validator;
use super::*;
use crate::cgroup::class_name_problem;

/// The most `[[class]]` tables, and C-state names in one class.
pub const MAX_CLASSES: usize = 64;

/// The highest frequency accepted, in kHz (100 GHz): far above any CPU, low
/// enough that no arithmetic on it overflows.
pub const MAX_FREQ_KHZ: u64 = 100_000_000;

/// The largest `resume_latency_us` the kernel takes (`S32_MAX`).
pub const MAX_RESUME_LATENCY_US: u32 = i32::MAX as u32;

/// The EPP names `energy_performance_preference` takes besides a number.
pub const EPP_NAMES: &[&str] = &[
    "default",
    "performance",
    "balance_performance",
    "balance_power",
    "power",
];

/// A frequency as a class asks for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Freq {
    /// This many kHz (the unit of every cpufreq and uncore file).
    Khz(u64),
    /// The CPU's lowest (`cpuinfo_min_freq`; uncore: `initial_min_freq_khz`).
    Min,
    /// The CPU's base frequency (`base_frequency`; not for uncore).
    Base,
    /// The CPU's highest (`cpuinfo_max_freq`; uncore: `initial_max_freq_khz`).
    Max,
}

impl Freq {
    /// The rank of a symbolic value, for comparing two of them.
    fn rank(self) -> Option<u8> {
        match self {
            Freq::Khz(_) => None,
            Freq::Min => Some(0),
            Freq::Base => Some(1),
            Freq::Max => Some(2),
        }
    }

    /// Whether `self` is certainly above `other`, whatever the CPU offers.
    pub fn above(self, other: Freq) -> bool {
        match (self, other) {
            (Freq::Khz(a), Freq::Khz(b)) => a > b,
            (a, b) => matches!((a.rank(), b.rank()), (Some(a), Some(b)) if a > b),
        }
    }
}

impl fmt::Display for Freq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Freq::Khz(k) => write!(f, "{k}kHz"),
            Freq::Min => f.write_str("min"),
            Freq::Base => f.write_str("base"),
            Freq::Max => f.write_str("max"),
        }
    }
}

/// Parses a frequency: an integer (kHz), `"min"`, `"base"`, `"max"`, or a
/// number with a unit `kHz`, `MHz` or `GHz` (`"2.4GHz"`, `"800MHz"`); the
/// result must be a whole number of kHz above zero.
pub fn parse_freq(text: &str) -> Result<Freq, String> {
    match text {
        "min" => return Ok(Freq::Min),
        "base" => return Ok(Freq::Base),
        "max" => return Ok(Freq::Max),
        _ => {}
    }
    let bad = |why: &str| format!("invalid frequency {text:?}: {why}");
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let scale: u32 = match unit.to_ascii_lowercase().as_str() {
        "khz" => 0,
        "mhz" => 3,
        "ghz" => 6,
        "" => {
            return Err(bad(
                "missing unit: use kHz, MHz or GHz, or min, base or max",
            ));
        }
        _ => {
            return Err(bad(
                "unknown unit: use kHz, MHz or GHz, or min, base or max",
            ));
        }
    };
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() || frac.contains('.') || (number.contains('.') && frac.is_empty()) {
        return Err(bad("expected a number such as 2.4GHz"));
    }
    let frac = frac.trim_end_matches('0');
    if frac.len() > scale as usize {
        return Err(bad("not a whole number of kHz"));
    }
    let too_high = || bad(&format!("above the {MAX_FREQ_KHZ} kHz allowed"));
    // At most 9 digits before scaling keeps every product in u64.
    if whole.trim_start_matches('0').len() > 9 {
        return Err(too_high());
    }
    let whole: u64 = whole.parse().map_err(|_| too_high())?;
    let padded = format!("{frac:0<width$}", width = scale as usize);
    let frac: u64 = if padded.is_empty() {
        0
    } else {
        padded.parse().map_err(|_| bad("expected a number"))?
    };
    let khz = whole * 10u64.pow(scale) + frac;
    if khz == 0 {
        return Err(bad("must be above zero"));
    }
    if khz > MAX_FREQ_KHZ {
        return Err(too_high());
    }
    Ok(Freq::Khz(khz))
}

/// `resume_latency_us`: what `power/pm_qos_resume_latency_us` is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResumeLatency {
    /// `"n/a"`: no latency is acceptable (the CPU never sleeps deeper than
    /// polling allows).
    NoLimit,
    /// At most this many µs (0 means "no constraint" to the kernel).
    Us(u32),
}

impl fmt::Display for ResumeLatency {
    /// As the kernel file takes it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ResumeLatency::NoLimit => f.write_str("n/a"),
            ResumeLatency::Us(n) => write!(f, "{n}"),
        }
    }
}

/// One validated `[[class]]`: the power settings a CPU of this class gets.
/// Every field but `name` is optional; what a class leaves out stays as the
/// kernel has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Class {
    /// Its name (letters, digits, `_`, `.`, `-`; 1 to 64), unique.
    pub name: String,
    /// `cpufreq/scaling_governor`.
    pub governor: Option<String>,
    /// `cpufreq/scaling_min_freq`.
    pub min_freq: Option<Freq>,
    /// `cpufreq/scaling_max_freq`.
    pub max_freq: Option<Freq>,
    /// `cpufreq/energy_performance_preference`: one of [`EPP_NAMES`] or a
    /// number from 0 to 255.
    pub epp: Option<String>,
    /// Names of `cpuidle/stateK/name` whose `disable` is set to 1.
    pub disabled_cstates: Vec<String>,
    /// `power/pm_qos_resume_latency_us`.
    pub resume_latency_us: Option<ResumeLatency>,
    /// The die's uncore `min_freq_khz` (never `base`).
    pub uncore_min_freq: Option<Freq>,
    /// The die's uncore `max_freq_khz` (never `base`).
    pub uncore_max_freq: Option<Freq>,
    /// The line of its `[[class]]` header.
    pub line: usize,
}

/// The `[power]` table: the switch, and the class of each kind of CPU.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Power {
    /// Write power settings at all (off by default). Turning it off by a
    /// reload puts every original value back.
    pub enabled: bool,
    /// The class of exclusive CPUs whose workload asks for none.
    pub exclusive: Option<String>,
    /// The class of the shared pool's CPUs (reserved ones excepted).
    pub shared: Option<String>,
    /// The class of the reserved CPUs.
    pub reserved: Option<String>,
    /// The class of the CPUs of Slurm's running jobs, with `[slurm]
    /// housekeeping` (reserved ones excepted).
    pub slurm: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawClass {
    pub(super) name: Spanned<String>,
    pub(super) governor: Option<Spanned<String>>,
    pub(super) min_freq: Option<Spanned<RawStrOrInt>>,
    pub(super) max_freq: Option<Spanned<RawStrOrInt>>,
    pub(super) epp: Option<Spanned<RawStrOrInt>>,
    pub(super) disabled_cstates: Option<Vec<Spanned<String>>>,
    pub(super) resume_latency_us: Option<Spanned<RawStrOrInt>>,
    pub(super) uncore_min_freq: Option<Spanned<RawStrOrInt>>,
    pub(super) uncore_max_freq: Option<Spanned<RawStrOrInt>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPower {
    pub(super) enabled: Option<bool>,
    pub(super) exclusive: Option<Spanned<String>>,
    pub(super) shared: Option<Spanned<String>>,
    pub(super) reserved: Option<Spanned<String>>,
    pub(super) slurm: Option<Spanned<String>>,
}

impl Validator<'_> {
    /// The `[[class]]` tables, in file order, names unique.
    pub(super) fn classes(&self, raw: Vec<Spanned<RawClass>>) -> Result<Vec<Class>, ConfigError> {
        if let Some(extra) = raw.get(MAX_CLASSES) {
            return Err(self.error(
                &extra.span(),
                "class",
                format!("{} classes; at most {MAX_CLASSES} are allowed", raw.len()),
            ));
        }
        let mut classes: Vec<Class> = Vec::new();
        for r in raw {
            let name_span = r.get_ref().name.span();
            let class = self.class(r)?;
            if let Some(first) = classes.iter().find(|c| c.name == class.name) {
                return Err(self.error(
                    &name_span,
                    "class.name",
                    format!(
                        "class {:?} is already defined on line {}",
                        class.name, first.line
                    ),
                ));
            }
            classes.push(class);
        }
        Ok(classes)
    }

    fn class(&self, raw: Spanned<RawClass>) -> Result<Class, ConfigError> {
        let line = self.line(&raw.span());
        let raw = raw.into_inner();
        let name = raw.name.get_ref();
        if let Some(why) = class_name_problem(name) {
            return Err(self.error(
                &raw.name.span(),
                "class.name",
                format!("invalid class name {name:?}: {why}"),
            ));
        }
        let governor = match raw.governor {
            None => None,
            Some(g) => {
                let text = g.get_ref();
                if text.is_empty()
                    || text.len() > 15
                    || !text.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                {
                    return Err(self.error(
                        &g.span(),
                        "class.governor",
                        format!(
                            "invalid governor {text:?}: a name such as \"performance\" (letters, digits, '_'; at most 15)"
                        ),
                    ));
                }
                Some(g.into_inner())
            }
        };
        let min_freq = self.freq(raw.min_freq.as_ref(), "class.min_freq", true)?;
        let max_freq = self.freq(raw.max_freq.as_ref(), "class.max_freq", true)?;
        self.check_order(&raw.min_freq, min_freq, max_freq, "class.min_freq")?;
        let uncore_min_freq =
            self.freq(raw.uncore_min_freq.as_ref(), "class.uncore_min_freq", false)?;
        let uncore_max_freq =
            self.freq(raw.uncore_max_freq.as_ref(), "class.uncore_max_freq", false)?;
        self.check_order(
            &raw.uncore_min_freq,
            uncore_min_freq,
            uncore_max_freq,
            "class.uncore_min_freq",
        )?;
        let epp = match raw.epp {
            None => None,
            Some(e) => Some(self.epp(&e)?),
        };
        let mut disabled_cstates: Vec<String> = Vec::new();
        for s in raw.disabled_cstates.unwrap_or_default() {
            let text = s.get_ref();
            if text.is_empty()
                || text.len() > 32
                || text
                    .chars()
                    .any(|c| c.is_whitespace() || c.is_control() || c == '/')
            {
                return Err(self.error(
                    &s.span(),
                    "class.disabled_cstates",
                    format!(
                        "invalid C-state name {text:?}: write it as cpuidle/stateK/name shows it (\"C6\", \"C1E\")"
                    ),
                ));
            }
            if !disabled_cstates.contains(text) {
                disabled_cstates.push(s.into_inner());
            }
        }
        let resume_latency_us = match raw.resume_latency_us {
            None => None,
            Some(r) => Some(self.resume_latency(&r)?),
        };
        Ok(Class {
            name: raw.name.into_inner(),
            governor,
            min_freq,
            max_freq,
            epp,
            disabled_cstates,
            resume_latency_us,
            uncore_min_freq,
            uncore_max_freq,
            line,
        })
    }

    fn freq(
        &self,
        raw: Option<&Spanned<RawStrOrInt>>,
        key: &str,
        base_allowed: bool,
    ) -> Result<Option<Freq>, ConfigError> {
        let Some(raw) = raw else { return Ok(None) };
        let freq = match raw.get_ref() {
            RawStrOrInt::Int(n) => match u64::try_from(*n) {
                Ok(k) if (1..=MAX_FREQ_KHZ).contains(&k) => Freq::Khz(k),
                _ => {
                    return Err(self.error(
                        &raw.span(),
                        key,
                        format!(
                            "invalid frequency {n}: an integer is kHz, from 1 to {MAX_FREQ_KHZ}"
                        ),
                    ));
                }
            },
            RawStrOrInt::Str(s) => {
                parse_freq(s).map_err(|why| self.error(&raw.span(), key, why))?
            }
        };
        if freq == Freq::Base && !base_allowed {
            return Err(self.error(
                &raw.span(),
                key,
                "invalid frequency \"base\": uncore has no base frequency; use min, max or a value",
            ));
        }
        Ok(Some(freq))
    }

    /// Refuses a minimum certainly above the maximum, at the minimum.
    fn check_order(
        &self,
        raw_min: &Option<Spanned<RawStrOrInt>>,
        min: Option<Freq>,
        max: Option<Freq>,
        key: &str,
    ) -> Result<(), ConfigError> {
        let (Some(span), Some(min), Some(max)) = (raw_min.as_ref().map(Spanned::span), min, max)
        else {
            return Ok(());
        };
        if min.above(max) {
            return Err(self.error(
                &span,
                key,
                format!("{min} is above the class's maximum {max}"),
            ));
        }
        Ok(())
    }

    fn epp(&self, raw: &Spanned<RawStrOrInt>) -> Result<String, ConfigError> {
        match raw.get_ref() {
            RawStrOrInt::Int(n) if (0..=255).contains(n) => Ok(n.to_string()),
            RawStrOrInt::Str(s) if EPP_NAMES.contains(&s.as_str()) => Ok(s.clone()),
            RawStrOrInt::Str(s) if s.parse::<u8>().is_ok() => Ok(s.clone()),
            other => Err(self.error(
                &raw.span(),
                "class.epp",
                format!(
                    "invalid EPP {}: expected one of {} or a number from 0 to 255",
                    other,
                    EPP_NAMES.join(", ")
                ),
            )),
        }
    }

    fn resume_latency(&self, raw: &Spanned<RawStrOrInt>) -> Result<ResumeLatency, ConfigError> {
        match raw.get_ref() {
            RawStrOrInt::Str(s) if s == "n/a" => Ok(ResumeLatency::NoLimit),
            RawStrOrInt::Int(n) if (0..=i128::from(MAX_RESUME_LATENCY_US)).contains(n) => {
                Ok(ResumeLatency::Us(*n as u32))
            }
            other => Err(self.error(
                &raw.span(),
                "class.resume_latency_us",
                format!(
                    "invalid resume latency {other}: expected microseconds from 0 to {MAX_RESUME_LATENCY_US} or \"n/a\""
                ),
            )),
        }
    }

    /// The `[power]` table, its class names checked against `classes`.
    pub(super) fn power(&self, raw: RawPower, classes: &[Class]) -> Result<Power, ConfigError> {
        let name = |raw: Option<Spanned<String>>, key: &str| match raw {
            None => Ok(None),
            Some(n) => self.class_ref(&n, key, classes).map(Some),
        };
        Ok(Power {
            enabled: raw.enabled.unwrap_or(false),
            exclusive: name(raw.exclusive, "power.exclusive")?,
            shared: name(raw.shared, "power.shared")?,
            reserved: name(raw.reserved, "power.reserved")?,
            slurm: name(raw.slurm, "power.slurm")?,
        })
    }

    /// A class name that must be one of `classes`.
    pub(super) fn class_ref(
        &self,
        raw: &Spanned<String>,
        key: &str,
        classes: &[Class],
    ) -> Result<String, ConfigError> {
        let text = raw.get_ref();
        if classes.iter().any(|c| &c.name == text) {
            return Ok(text.clone());
        }
        let known: Vec<&str> = classes.iter().map(|c| c.name.as_str()).collect();
        let known = if known.is_empty() {
            "no [[class]] is defined".to_string()
        } else {
            format!("the classes are {}", known.join(", "))
        };
        Err(self.error(&raw.span(), key, format!("unknown class {text:?}: {known}")))
    }
}

impl fmt::Display for RawStrOrInt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RawStrOrInt::Str(s) => write!(f, "{s:?}"),
            RawStrOrInt::Int(n) => write!(f, "{n}"),
        }
    }
}
