//! CPU power classes (issue #35): which power file of which CPU or die
//! should hold what, and in which order to write them. Pure: values in, a
//! plan out, no I/O ([`sysfs`] reads and writes).
//!
//! - A [`Knob`] names one file; [`Knob::rel_path`] alone spells its path.
//! - [`plan`] takes each CPU's class, what sysfs offers ([`Offer`]), the
//!   values now and the originals, and returns the writes in the kernel's
//!   order, and a [`Refusal`] with its reason for what a CPU cannot take.
//!
//! Invariant: a file no class wants is planned back to its original, and a
//! file gets a class's value only once its original is known (the plan's
//! `save`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::config::{Class, Freq};

pub mod originals;
pub mod sysfs;

/// One power file the daemon may write.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Knob {
    /// `cpuN/cpufreq/scaling_governor`.
    Governor(u32),
    /// `cpuN/cpufreq/scaling_min_freq` (kHz).
    MinFreq(u32),
    /// `cpuN/cpufreq/scaling_max_freq` (kHz).
    MaxFreq(u32),
    /// `cpuN/cpufreq/energy_performance_preference`.
    Epp(u32),
    /// `cpuN/cpuidle/stateK/disable` (`1` disables the state).
    CstateDisable(u32, u32),
    /// `cpuN/power/pm_qos_resume_latency_us`.
    ResumeLatency(u32),
    /// `intel_uncore_frequency/<die>/min_freq_khz`.
    UncoreMin(String),
    /// `intel_uncore_frequency/<die>/max_freq_khz`.
    UncoreMax(String),
}

/// Where the CPUs' directories are, below the sysfs root.
pub const CPU_DIR: &str = "devices/system/cpu";
/// Where the uncore dies' directories are, below the sysfs root.
pub const UNCORE_DIR: &str = "devices/system/cpu/intel_uncore_frequency";

impl Knob {
    /// The file, relative to the sysfs root.
    pub fn rel_path(&self) -> String {
        match self {
            Knob::Governor(c) => format!("{CPU_DIR}/cpu{c}/cpufreq/scaling_governor"),
            Knob::MinFreq(c) => format!("{CPU_DIR}/cpu{c}/cpufreq/scaling_min_freq"),
            Knob::MaxFreq(c) => format!("{CPU_DIR}/cpu{c}/cpufreq/scaling_max_freq"),
            Knob::Epp(c) => format!("{CPU_DIR}/cpu{c}/cpufreq/energy_performance_preference"),
            Knob::CstateDisable(c, k) => format!("{CPU_DIR}/cpu{c}/cpuidle/state{k}/disable"),
            Knob::ResumeLatency(c) => format!("{CPU_DIR}/cpu{c}/power/pm_qos_resume_latency_us"),
            Knob::UncoreMin(d) => format!("{UNCORE_DIR}/{d}/min_freq_khz"),
            Knob::UncoreMax(d) => format!("{UNCORE_DIR}/{d}/max_freq_khz"),
        }
    }

    /// The CPU whose file it is (`None` for a die's).
    pub fn cpu(&self) -> Option<u32> {
        match self {
            Knob::Governor(c)
            | Knob::MinFreq(c)
            | Knob::MaxFreq(c)
            | Knob::Epp(c)
            | Knob::CstateDisable(c, _)
            | Knob::ResumeLatency(c) => Some(*c),
            Knob::UncoreMin(_) | Knob::UncoreMax(_) => None,
        }
    }

    /// The class field that sets it, as the config file names it.
    pub fn field(&self) -> &'static str {
        match self {
            Knob::Governor(_) => "governor",
            Knob::MinFreq(_) => "min_freq",
            Knob::MaxFreq(_) => "max_freq",
            Knob::Epp(_) => "epp",
            Knob::CstateDisable(..) => "disabled_cstates",
            Knob::ResumeLatency(_) => "resume_latency_us",
            Knob::UncoreMin(_) => "uncore_min_freq",
            Knob::UncoreMax(_) => "uncore_max_freq",
        }
    }

    /// Its place in the write order of one CPU or die: the governor before
    /// EPP (intel_pstate refuses an EPP other than `performance` under the
    /// `performance` governor), the frequencies as a pair (see [`plan`]).
    fn rank(&self) -> u8 {
        match self {
            Knob::Governor(_) => 0,
            Knob::MinFreq(_) | Knob::MaxFreq(_) => 1,
            Knob::Epp(_) => 2,
            Knob::CstateDisable(..) => 3,
            Knob::ResumeLatency(_) => 4,
            Knob::UncoreMin(_) | Knob::UncoreMax(_) => 5,
        }
    }
}

impl fmt::Display for Knob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.rel_path())
    }
}

/// What cpufreq offers on one CPU.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FreqOffer {
    /// `scaling_available_governors`.
    pub governors: Vec<String>,
    /// `cpuinfo_min_freq` (kHz).
    pub min: u64,
    /// `cpuinfo_max_freq` (kHz).
    pub max: u64,
    /// `base_frequency` (kHz), where the driver has it.
    pub base: Option<u64>,
    /// `energy_performance_available_preferences`, or `None` when there is
    /// no `energy_performance_preference`.
    pub epp: Option<Vec<String>>,
}

/// What one online CPU offers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CpuOffer {
    /// Its `cpufreq/`, if it has one (offline CPUs have none).
    pub freq: Option<FreqOffer>,
    /// Its C-states: `(K, name)` of each `cpuidle/stateK/`.
    pub cstates: Vec<(u32, String)>,
    /// Whether it has `power/pm_qos_resume_latency_us`.
    pub resume_latency: bool,
    /// The uncore directories of the die it lies on: one `package_PP_die_DD`,
    /// or each `uncoreNN` (a fabric cluster) of its die.
    pub dies: Vec<String>,
}

/// What one uncore die offers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DieOffer {
    /// `initial_min_freq_khz`: the lowest it may be set to.
    pub min: u64,
    /// `initial_max_freq_khz`: the highest it may be set to.
    pub max: u64,
}

/// What sysfs offers: every online CPU's files and every uncore die.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Offer {
    /// By CPU number; a CPU not here is offline and none of its files is
    /// planned.
    pub cpus: BTreeMap<u32, CpuOffer>,
    /// By directory name (`package_00_die_00`).
    pub dies: BTreeMap<String, DieOffer>,
}

impl Offer {
    /// Whether `knob`'s file exists here.
    pub fn has(&self, knob: &Knob) -> bool {
        let cpu = |c: &u32| self.cpus.get(c);
        match knob {
            Knob::Governor(c) | Knob::MinFreq(c) | Knob::MaxFreq(c) => {
                cpu(c).is_some_and(|o| o.freq.is_some())
            }
            Knob::Epp(c) => {
                cpu(c).is_some_and(|o| o.freq.as_ref().is_some_and(|f| f.epp.is_some()))
            }
            Knob::CstateDisable(c, k) => {
                cpu(c).is_some_and(|o| o.cstates.iter().any(|(s, _)| s == k))
            }
            Knob::ResumeLatency(c) => cpu(c).is_some_and(|o| o.resume_latency),
            Knob::UncoreMin(d) | Knob::UncoreMax(d) => self.dies.contains_key(d),
        }
    }

    /// Every value file of CPU `cpu` and of its dies that is offered.
    pub fn knobs_of(&self, cpu: u32) -> Vec<Knob> {
        let Some(o) = self.cpus.get(&cpu) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        if let Some(f) = &o.freq {
            out.extend([Knob::Governor(cpu), Knob::MinFreq(cpu), Knob::MaxFreq(cpu)]);
            if f.epp.is_some() {
                out.push(Knob::Epp(cpu));
            }
        }
        out.extend(o.cstates.iter().map(|(k, _)| Knob::CstateDisable(cpu, *k)));
        if o.resume_latency {
            out.push(Knob::ResumeLatency(cpu));
        }
        for d in o.dies.iter().filter(|d| self.dies.contains_key(*d)) {
            out.extend([Knob::UncoreMin(d.clone()), Knob::UncoreMax(d.clone())]);
        }
        out
    }

    /// Whether any power file at all exists (a node without them says so).
    pub fn is_empty(&self) -> bool {
        self.dies.is_empty()
            && self
                .cpus
                .values()
                .all(|o| o.freq.is_none() && o.cstates.is_empty() && !o.resume_latency)
    }
}

/// Why a class's value was not planned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Reason {
    /// The CPU (or die) has no such file.
    NotSupported,
    /// The governor is not in `scaling_available_governors`.
    GovernorMissing {
        /// What the CPU offers.
        available: Vec<String>,
    },
    /// No `cpuidle/stateK/name` reads this.
    CstateMissing {
        /// What the CPU offers.
        available: Vec<String>,
    },
    /// Outside what the hardware allows (kHz).
    OutOfRange {
        /// The value asked for.
        value: u64,
        /// The lowest allowed.
        min: u64,
        /// The highest allowed.
        max: u64,
    },
    /// The minimum would lie above the maximum.
    MinAboveMax {
        /// The minimum (kHz).
        min: u64,
        /// The maximum (kHz).
        max: u64,
    },
    /// An EPP the driver does not list.
    EppMissing {
        /// What the CPU offers.
        available: Vec<String>,
    },
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::NotSupported => f.write_str("not supported on this CPU"),
            Reason::GovernorMissing { available } => {
                write!(f, "governor missing (available: {})", available.join(" "))
            }
            Reason::CstateMissing { available } => {
                write!(f, "no such C-state (available: {})", available.join(" "))
            }
            Reason::OutOfRange { value, min, max } => {
                write!(f, "{value} kHz is out of range ({min}-{max} kHz)")
            }
            Reason::MinAboveMax { min, max } => {
                write!(f, "minimum {min} kHz is above the maximum {max} kHz")
            }
            Reason::EppMissing { available } => {
                write!(f, "EPP not offered (available: {})", available.join(" "))
            }
        }
    }
}

/// A class value that was not planned, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    /// The class.
    pub class: String,
    /// The CPU (`None` for a die).
    pub cpu: Option<u32>,
    /// The die, for uncore values.
    pub die: Option<String>,
    /// The class field, as the config file names it.
    pub field: String,
    /// The value as the class wrote it.
    pub value: String,
    /// Why.
    pub reason: Reason,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "class {}: {} {}", self.class, self.field, self.value)?;
        if let Some(cpu) = self.cpu {
            write!(f, " on CPU {cpu}")?;
        }
        if let Some(die) = &self.die {
            write!(f, " on die {die}")?;
        }
        write!(f, ": {}", self.reason)
    }
}

/// Why a write is planned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "class")]
pub enum Why {
    /// A class wants this value (the highest class of a die, for uncore).
    Class(String),
    /// No class wants the file: its original value goes back.
    Restore,
}

/// One planned write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    /// The file.
    pub knob: Knob,
    /// What to write.
    pub value: String,
    /// Why.
    pub why: Why,
}

/// The files whose values [`plan`] reads for `classes_of` and
/// `originals`: every value file of each CPU given a class (a class's
/// frequency is checked against the other of its pair) and of its dies, and
/// each file with an original. A plan over these alone is the plan over
/// every file.
pub fn in_play(
    classes_of: &BTreeMap<u32, String>,
    offer: &Offer,
    originals: &BTreeMap<Knob, String>,
) -> BTreeSet<Knob> {
    classes_of
        .keys()
        .flat_map(|cpu| offer.knobs_of(*cpu))
        .chain(originals.keys().cloned())
        .collect()
}

/// What [`plan`] decided.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    /// Originals to keep, before any write: the value read now of every
    /// file that gets a class's value for the first time.
    pub save: BTreeMap<Knob, String>,
    /// The writes, in an order the kernel accepts.
    pub writes: Vec<Write>,
    /// Every file a class wants, and its value (whether or not it already
    /// holds it).
    pub wanted: BTreeMap<Knob, (String, String)>,
    /// What could not be planned.
    pub refusals: Vec<Refusal>,
    /// Originals no class wants any more: forget each once its file holds
    /// it again (its restore write in `writes` took, or none was needed).
    pub forget: Vec<Knob>,
}

/// The values of every file a class wants, before the frequency pairs are
/// checked against each other.
struct Wants<'a> {
    /// Knob → (value, class name).
    map: BTreeMap<Knob, (String, String)>,
    refusals: Vec<Refusal>,
    classes: &'a [Class],
}

impl Wants<'_> {
    fn refuse(
        &mut self,
        class: &Class,
        cpu: Option<u32>,
        die: Option<&str>,
        field: &str,
        value: String,
        reason: Reason,
    ) {
        self.refusals.push(Refusal {
            class: class.name.clone(),
            cpu,
            die: die.map(str::to_string),
            field: field.to_string(),
            value,
            reason,
        });
    }

    fn want(&mut self, knob: Knob, value: String, class: &Class) {
        self.map.insert(knob, (value, class.name.clone()));
    }
}

/// Resolves `f` against the range `min..=max` (and `base`), or says why not.
fn resolve(f: Freq, min: u64, max: u64, base: Option<u64>) -> Result<u64, Reason> {
    let khz = match f {
        Freq::Min => min,
        Freq::Max => max,
        Freq::Base => base.ok_or(Reason::NotSupported)?,
        Freq::Khz(k) => k,
    };
    if khz < min || khz > max {
        return Err(Reason::OutOfRange {
            value: khz,
            min,
            max,
        });
    }
    Ok(khz)
}

/// The plan that brings every file to what `classes_of` asks for now.
///
/// - `classes_of`: the class name of each CPU that should have one (a name
///   not among `classes`, or a CPU not in `offer`, is skipped);
/// - `current`: the value read now of each file in `offer`;
/// - `originals`: what each file held before the daemon first wrote it.
///
/// Frequencies are written as pairs per CPU or die: when the new maximum is
/// at least the current one, the maximum goes first (widen before raising
/// the minimum), else the minimum goes first (lower the minimum before the
/// maximum); with the minimum never above the maximum in the target, every
/// step then keeps min ≤ max. A die's uncore values are the highest any
/// class of its CPUs asks for.
pub fn plan(
    classes_of: &BTreeMap<u32, String>,
    classes: &[Class],
    offer: &Offer,
    current: &BTreeMap<Knob, String>,
    originals: &BTreeMap<Knob, String>,
) -> Plan {
    let mut wants = Wants {
        map: BTreeMap::new(),
        refusals: Vec::new(),
        classes,
    };
    // Per die: the highest (value, class) asked for.
    let mut uncore: BTreeMap<Knob, (u64, String)> = BTreeMap::new();
    for (&cpu, name) in classes_of {
        let Some(class) = wants.classes.iter().find(|c| &c.name == name) else {
            continue;
        };
        let Some(o) = offer.cpus.get(&cpu) else {
            continue;
        };
        cpu_wants(
            &mut wants,
            class,
            cpu,
            o,
            offer,
            current,
            originals,
            &mut uncore,
        );
    }
    for (knob, (khz, class)) in uncore {
        wants.map.insert(knob, (khz.to_string(), class));
    }
    check_uncore_pairs(&mut wants, offer, current, originals);

    let Wants { map, refusals, .. } = wants;
    let mut plan = Plan {
        refusals,
        ..Plan::default()
    };
    // Targets: a class's value, else the original of a file once written.
    let mut targets: BTreeMap<Knob, (String, Why)> = BTreeMap::new();
    for (knob, (value, class)) in &map {
        targets.insert(knob.clone(), (value.clone(), Why::Class(class.clone())));
    }
    for (knob, value) in originals {
        if offer.has(knob) && !targets.contains_key(knob) {
            targets.insert(knob.clone(), (value.clone(), Why::Restore));
        }
    }
    for (knob, (_, why)) in &targets {
        if matches!(why, Why::Class(_))
            && !originals.contains_key(knob)
            && let Some(now) = current.get(knob)
        {
            plan.save.insert(knob.clone(), now.clone());
        }
    }
    plan.forget = targets
        .iter()
        .filter(|(_, (_, why))| *why == Why::Restore)
        .map(|(knob, _)| knob.clone())
        .collect();
    let mut writes: Vec<Write> = targets
        .into_iter()
        // Never a class's value over a file whose original is unknown.
        .filter(|(knob, (_, why))| {
            *why == Why::Restore || originals.contains_key(knob) || current.contains_key(knob)
        })
        .filter(|(knob, (value, _))| current.get(knob).is_none_or(|now| now.trim() != value))
        .map(|(knob, (value, why))| Write { knob, value, why })
        .collect();
    order(&mut writes, current);
    plan.writes = writes;
    plan.wanted = map;
    plan
}

/// What one CPU's class wants of its files.
#[allow(clippy::too_many_arguments)]
fn cpu_wants(
    wants: &mut Wants<'_>,
    class: &Class,
    cpu: u32,
    o: &CpuOffer,
    offer: &Offer,
    current: &BTreeMap<Knob, String>,
    originals: &BTreeMap<Knob, String>,
    uncore: &mut BTreeMap<Knob, (u64, String)>,
) {
    let some = Some(cpu);
    if let Some(g) = &class.governor {
        match &o.freq {
            None => wants.refuse(
                class,
                some,
                None,
                "governor",
                g.clone(),
                Reason::NotSupported,
            ),
            Some(f) if !f.governors.contains(g) => wants.refuse(
                class,
                some,
                None,
                "governor",
                g.clone(),
                Reason::GovernorMissing {
                    available: f.governors.clone(),
                },
            ),
            Some(_) => wants.want(Knob::Governor(cpu), g.clone(), class),
        }
    }
    if class.min_freq.is_some() || class.max_freq.is_some() {
        freq_pair(wants, class, cpu, o, current, originals);
    }
    if let Some(e) = &class.epp {
        match o.freq.as_ref().and_then(|f| f.epp.as_ref()) {
            None => wants.refuse(class, some, None, "epp", e.clone(), Reason::NotSupported),
            // A number is not listed among the names; the driver judges it.
            Some(names) if !names.is_empty() && e.parse::<u8>().is_err() && !names.contains(e) => {
                wants.refuse(
                    class,
                    some,
                    None,
                    "epp",
                    e.clone(),
                    Reason::EppMissing {
                        available: names.clone(),
                    },
                )
            }
            Some(_) => wants.want(Knob::Epp(cpu), e.clone(), class),
        }
    }
    for name in &class.disabled_cstates {
        if o.cstates.is_empty() {
            wants.refuse(
                class,
                some,
                None,
                "disabled_cstates",
                name.clone(),
                Reason::NotSupported,
            );
            continue;
        }
        let mut found = false;
        for (k, n) in &o.cstates {
            if n == name {
                found = true;
                wants.want(Knob::CstateDisable(cpu, *k), "1".into(), class);
            }
        }
        if !found {
            let available = o.cstates.iter().map(|(_, n)| n.clone()).collect();
            wants.refuse(
                class,
                some,
                None,
                "disabled_cstates",
                name.clone(),
                Reason::CstateMissing { available },
            );
        }
    }
    if let Some(r) = class.resume_latency_us {
        if o.resume_latency {
            wants.want(Knob::ResumeLatency(cpu), r.to_string(), class);
        } else {
            wants.refuse(
                class,
                some,
                None,
                "resume_latency_us",
                r.to_string(),
                Reason::NotSupported,
            );
        }
    }
    for (field, f, knob) in [
        (
            "uncore_min_freq",
            class.uncore_min_freq,
            Knob::UncoreMin as fn(String) -> Knob,
        ),
        ("uncore_max_freq", class.uncore_max_freq, Knob::UncoreMax),
    ] {
        let Some(f) = f else { continue };
        let dies: Vec<(&String, &DieOffer)> = o
            .dies
            .iter()
            .filter_map(|d| offer.dies.get(d).map(|x| (d, x)))
            .collect();
        if dies.is_empty() {
            wants.refuse(
                class,
                some,
                None,
                field,
                f.to_string(),
                Reason::NotSupported,
            );
            continue;
        }
        for (die, d) in dies {
            match resolve(f, d.min, d.max, None) {
                Err(reason) => wants.refuse(class, None, Some(die), field, f.to_string(), reason),
                Ok(khz) => {
                    let entry = uncore
                        .entry(knob(die.clone()))
                        .or_insert((0, String::new()));
                    if khz > entry.0 {
                        *entry = (khz, class.name.clone());
                    }
                }
            }
        }
    }
}

/// The value a file will hold when no class wants it: its original if the
/// daemon wrote it, else what it holds now.
fn resting(
    knob: &Knob,
    current: &BTreeMap<Knob, String>,
    originals: &BTreeMap<Knob, String>,
) -> Option<u64> {
    originals
        .get(knob)
        .or_else(|| current.get(knob))
        .and_then(|v| v.trim().parse().ok())
}

/// A CPU's `min_freq`/`max_freq`, resolved and checked as a pair (also
/// against the resting value of the one the class leaves out).
fn freq_pair(
    wants: &mut Wants<'_>,
    class: &Class,
    cpu: u32,
    o: &CpuOffer,
    current: &BTreeMap<Knob, String>,
    originals: &BTreeMap<Knob, String>,
) {
    let some = Some(cpu);
    let Some(f) = &o.freq else {
        for (field, v) in [("min_freq", class.min_freq), ("max_freq", class.max_freq)] {
            if let Some(v) = v {
                wants.refuse(
                    class,
                    some,
                    None,
                    field,
                    v.to_string(),
                    Reason::NotSupported,
                );
            }
        }
        return;
    };
    let mut min = None;
    let mut max = None;
    for (field, v, slot) in [
        ("min_freq", class.min_freq, &mut min),
        ("max_freq", class.max_freq, &mut max),
    ] {
        if let Some(v) = v {
            match resolve(v, f.min, f.max, f.base) {
                Ok(khz) => *slot = Some((khz, v)),
                Err(reason) => wants.refuse(class, some, None, field, v.to_string(), reason),
            }
        }
    }
    let other_min = resting(&Knob::MinFreq(cpu), current, originals);
    let other_max = resting(&Knob::MaxFreq(cpu), current, originals);
    let lo = min.map(|m| m.0).or(other_min);
    let hi = max.map(|m| m.0).or(other_max);
    if let (Some(lo), Some(hi)) = (lo, hi)
        && lo > hi
    {
        // Refuse what the class set: both when it set both.
        for (field, v) in [("min_freq", min), ("max_freq", max)] {
            if let Some((_, v)) = v {
                wants.refuse(
                    class,
                    some,
                    None,
                    field,
                    v.to_string(),
                    Reason::MinAboveMax { min: lo, max: hi },
                );
            }
        }
        return;
    }
    if let Some((khz, _)) = min {
        wants.want(Knob::MinFreq(cpu), khz.to_string(), class);
    }
    if let Some((khz, _)) = max {
        wants.want(Knob::MaxFreq(cpu), khz.to_string(), class);
    }
}

/// Drops a die's uncore value that would put its minimum above its maximum
/// (classes that ask for one each can disagree, and a class's maximum can
/// lie below the resting minimum), with a refusal: the minimum first, then
/// the maximum if it still does not fit.
fn check_uncore_pairs(
    wants: &mut Wants<'_>,
    offer: &Offer,
    current: &BTreeMap<Knob, String>,
    originals: &BTreeMap<Knob, String>,
) {
    for die in offer.dies.keys() {
        let (kmin, kmax) = (Knob::UncoreMin(die.clone()), Knob::UncoreMax(die.clone()));
        for dropped in [&kmin, &kmax] {
            let get = |k: &Knob| wants.map.get(k).and_then(|(v, _)| v.parse::<u64>().ok());
            let lo = get(&kmin).or_else(|| resting(&kmin, current, originals));
            let hi = get(&kmax).or_else(|| resting(&kmax, current, originals));
            let (Some(lo), Some(hi)) = (lo, hi) else {
                break;
            };
            if lo <= hi {
                break;
            }
            if let Some((value, class)) = wants.map.remove(dropped) {
                wants.refusals.push(Refusal {
                    class,
                    cpu: None,
                    die: Some(die.clone()),
                    field: dropped.field().into(),
                    value: format!("{value}kHz"),
                    reason: Reason::MinAboveMax { min: lo, max: hi },
                });
            }
        }
    }
}

/// Sorts `writes` by CPU (dies last), then by [`Knob::rank`], and orders
/// each min/max pair so that min ≤ max holds after every write.
fn order(writes: &mut [Write], current: &BTreeMap<Knob, String>) {
    // The max of a pair goes first when it does not come down.
    let targets: BTreeMap<Knob, u64> = writes
        .iter()
        .filter_map(|w| Some((w.knob.clone(), w.value.trim().parse().ok()?)))
        .collect();
    let now = |k: &Knob| current.get(k).and_then(|v| v.trim().parse::<u64>().ok());
    let raises = |max: Knob| -> bool {
        match (targets.get(&max), now(&max)) {
            (Some(t), Some(n)) => *t >= n,
            // No write of the max: its value stays, either order works.
            (None, _) => true,
            // Unknown now: put the max first, as a widening.
            (Some(_), None) => true,
        }
    };
    writes.sort_by_cached_key(|w| {
        let (group, within) = match &w.knob {
            Knob::UncoreMin(d) | Knob::UncoreMax(d) => (u64::MAX, d.clone()),
            k => (u64::from(k.cpu().unwrap_or(u32::MAX)), String::new()),
        };
        let pair_pos = match &w.knob {
            Knob::MinFreq(c) => u8::from(raises(Knob::MaxFreq(*c))),
            Knob::MaxFreq(c) => u8::from(!raises(Knob::MaxFreq(*c))),
            Knob::UncoreMin(d) => u8::from(raises(Knob::UncoreMax(d.clone()))),
            Knob::UncoreMax(d) => u8::from(!raises(Knob::UncoreMax(d.clone()))),
            _ => 0,
        };
        (group, within, w.knob.rank(), pair_pos, w.knob.clone())
    });
}

#[cfg(test)]
mod tests;
