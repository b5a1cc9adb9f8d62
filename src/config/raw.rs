//! Stage 1 of reading the configuration: the file as serde reads it, every
//! value with its position, unknown keys refused; and TOML's own errors
//! turned into messages that name the file, line, column and key.

use std::fmt;
use std::ops::Range;
use std::path::Path;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};
use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::*;

// ---------------------------------------------------------------------------
// Stage 1: the raw file, as serde reads it.

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    pub(super) cgroup_root: Option<Spanned<String>>,
    pub(super) sysfs_root: Option<Spanned<String>>,
    pub(super) proc_root: Option<Spanned<String>>,
    pub(super) state_file: Option<Spanned<String>>,
    pub(super) socket: Option<Spanned<String>>,
    pub(super) metrics_listen: Option<Spanned<String>>,
    pub(super) reserved_cpus: Option<Spanned<RawReserved>>,
    pub(super) strict_reservation: Option<bool>,
    pub(super) reconcile_interval: Option<Spanned<String>>,
    pub(super) read_timeout: Option<Spanned<String>>,
    pub(super) dstate_threshold: Option<Spanned<String>>,
    pub(super) frozen_threshold: Option<Spanned<String>>,
    pub(super) thaw_frozen: Option<bool>,
    pub(super) watchdog_interval: Option<Spanned<String>>,
    pub(super) repair: Option<bool>,
    pub(super) repair_cooldown: Option<Spanned<String>>,
    pub(super) required_paths: Option<Vec<Spanned<String>>>,
    pub(super) shared_cgroups: Option<Vec<Spanned<String>>>,
    pub(super) managed: Option<Vec<Spanned<String>>>,
    pub(super) hierarchy: Option<Spanned<String>>,
    pub(super) kubelet_rule: Option<bool>,
    pub(super) kubelet_cpu_manager_state: Option<Spanned<String>>,
    pub(super) full_pcpus_only: Option<Spanned<bool>>,
    pub(super) distribute_across_numa: Option<bool>,
    pub(super) spread_cores: Option<Spanned<bool>>,
    pub(super) align_memory: Option<bool>,
    pub(super) unthrottle_exclusive: Option<Spanned<String>>,
    pub(super) irq_affinity: Option<bool>,
    pub(super) housekeeping: Option<bool>,
    pub(super) isolation: Option<Spanned<String>>,
    pub(super) device_alignment: Option<Spanned<String>>,
    pub(super) cdi_spec_dirs: Option<Vec<Spanned<String>>>,
    pub(super) bundle_dirs: Option<Vec<Spanned<String>>>,
    pub(super) systemd_bus: Option<Spanned<String>>,
    pub(super) log_level: Option<Spanned<String>>,
    pub(super) power_originals: Option<Spanned<String>>,
    pub(super) housekeeping_originals: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) rule: Vec<Spanned<RawRule>>,
    pub(super) run: Option<RawRun>,
    pub(super) slurm: Option<RawSlurm>,
    pub(super) nri: Option<RawNri>,
    #[serde(default)]
    pub(super) class: Vec<Spanned<super::power::RawClass>>,
    pub(super) power: Option<super::power::RawPower>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRun {
    pub(super) enabled: Option<bool>,
    pub(super) socket: Option<Spanned<String>>,
    pub(super) users: Option<Vec<Spanned<String>>>,
    pub(super) groups: Option<Vec<Spanned<String>>>,
    pub(super) max_cpus: Option<Spanned<RawInt>>,
    pub(super) max_cpus_per_user: Option<Spanned<RawInt>>,
    pub(super) slice: Option<Spanned<String>>,
    pub(super) mem: Option<Spanned<String>>,
    pub(super) allow_slurm_jobs: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawNri {
    pub(super) enabled: Option<bool>,
    pub(super) socket: Option<Spanned<String>>,
    pub(super) plugin_name: Option<Spanned<String>>,
    pub(super) plugin_index: Option<Spanned<String>>,
    pub(super) required: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSlurm {
    pub(super) housekeeping: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRule {
    #[serde(rename = "match")]
    pub(super) pattern: Spanned<String>,
    pub(super) cpus: Spanned<RawInt>,
    pub(super) numa: Option<Spanned<String>>,
    pub(super) class: Option<Spanned<String>>,
    pub(super) near: Option<Vec<Spanned<String>>>,
    pub(super) device_alignment: Option<Spanned<String>>,
}

/// Any TOML integer, range-checked later so the message can say which range.
pub(super) struct RawInt(pub(super) i128);

/// `reserved_cpus`: a CPU list string or a CPU count.
pub(super) enum RawReserved {
    List(String),
    Count(i128),
}

/// A value that may be a string or an integer (a frequency, an EPP, a
/// resume latency).
pub(super) enum RawStrOrInt {
    Str(String),
    Int(i128),
}

pub(super) struct StrOrIntVisitor;

impl Visitor<'_> for StrOrIntVisitor {
    type Value = RawStrOrInt;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string or an integer")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<RawStrOrInt, E> {
        Ok(RawStrOrInt::Str(v.to_string()))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<RawStrOrInt, E> {
        IntVisitor.visit_i64(v).map(RawStrOrInt::Int)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<RawStrOrInt, E> {
        IntVisitor.visit_u64(v).map(RawStrOrInt::Int)
    }
    fn visit_i128<E: de::Error>(self, v: i128) -> Result<RawStrOrInt, E> {
        IntVisitor.visit_i128(v).map(RawStrOrInt::Int)
    }
    fn visit_u128<E: de::Error>(self, v: u128) -> Result<RawStrOrInt, E> {
        IntVisitor.visit_u128(v).map(RawStrOrInt::Int)
    }
}

impl<'de> Deserialize<'de> for RawStrOrInt {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(StrOrIntVisitor)
    }
}

pub(super) struct IntVisitor;

impl Visitor<'_> for IntVisitor {
    type Value = i128;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an integer")
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<i128, E> {
        Ok(v.into())
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<i128, E> {
        Ok(v.into())
    }
    fn visit_i128<E: de::Error>(self, v: i128) -> Result<i128, E> {
        Ok(v)
    }
    fn visit_u128<E: de::Error>(self, v: u128) -> Result<i128, E> {
        Ok(i128::try_from(v).unwrap_or(i128::MAX))
    }
}

impl<'de> Deserialize<'de> for RawInt {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(IntVisitor).map(RawInt)
    }
}

pub(super) struct ReservedVisitor;

impl Visitor<'_> for ReservedVisitor {
    type Value = RawReserved;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a CPU list such as \"0-1\" or a CPU count such as 2")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<RawReserved, E> {
        Ok(RawReserved::List(v.to_string()))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<RawReserved, E> {
        IntVisitor.visit_i64(v).map(RawReserved::Count)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<RawReserved, E> {
        IntVisitor.visit_u64(v).map(RawReserved::Count)
    }
    fn visit_i128<E: de::Error>(self, v: i128) -> Result<RawReserved, E> {
        IntVisitor.visit_i128(v).map(RawReserved::Count)
    }
    fn visit_u128<E: de::Error>(self, v: u128) -> Result<RawReserved, E> {
        IntVisitor.visit_u128(v).map(RawReserved::Count)
    }
}

impl<'de> Deserialize<'de> for RawReserved {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ReservedVisitor)
    }
}

// ---------------------------------------------------------------------------
// Turning toml's errors (a message and a byte span) into `ConfigError`.

/// The 1-based line and column (in characters) of byte `offset` of `text`.
pub(super) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

pub(super) fn toml_error(text: &str, path: &Path, err: &toml::de::Error) -> ConfigError {
    let span = err.span().unwrap_or(0..0);
    let (line, column) = line_col(text, span.start);
    let path = path.to_path_buf();
    let message = err.message();
    let keys = match DeTable::parse(text) {
        Ok(doc) => key_at(doc.get_ref(), span.start),
        // Not well-formed TOML: there are no keys to speak of.
        Err(_) => Vec::new(),
    };
    if keys.is_empty() {
        let mut message = message.to_string();
        if message == "duplicate key"
            && let Some(key) = text.get(span.clone()).filter(|k| !k.is_empty())
        {
            message = format!("duplicate key `{key}`");
        }
        return ConfigError::Syntax {
            path,
            line,
            column,
            message,
        };
    }
    if let Some(key) = backticked(message, "unknown field `") {
        let table = (keys.len() > 1).then(|| keys[..keys.len() - 1].join("."));
        return ConfigError::UnknownKey {
            path,
            line,
            column,
            key: key.to_string(),
            table,
        };
    }
    let key = keys.join(".");
    let message = match backticked(message, "missing field `") {
        Some(missing) => format!("missing required key `{missing}`"),
        None if (key == "rule" || key == "class") && message.starts_with("invalid type: map,") => {
            format!("expected an array of tables: write [[{key}]], not [{key}]")
        }
        None => humanize(message),
    };
    ConfigError::Invalid {
        path,
        line,
        column,
        key,
        message,
    }
}

/// The text between `prefix` (which ends in a backtick) and the next backtick.
pub(super) fn backticked<'a>(message: &'a str, prefix: &str) -> Option<&'a str> {
    let rest = message.strip_prefix(prefix)?;
    rest.split_once('`').map(|(name, _)| name)
}

/// The dotted key path of the innermost key or value whose span holds `offset`.
pub(super) fn key_at(doc: &DeTable<'_>, offset: usize) -> Vec<String> {
    let mut best: Option<(usize, Vec<String>)> = None;
    walk_table(doc, offset, &mut Vec::new(), &mut best);
    best.map(|(_, keys)| keys).unwrap_or_default()
}

pub(super) fn walk_table(
    table: &DeTable<'_>,
    offset: usize,
    keys: &mut Vec<String>,
    best: &mut Option<(usize, Vec<String>)>,
) {
    for (key, value) in table.iter() {
        keys.push(key.get_ref().to_string());
        consider(key.span(), offset, keys, best);
        walk_value(value, offset, keys, best);
        keys.pop();
    }
}

pub(super) fn walk_value(
    value: &Spanned<DeValue<'_>>,
    offset: usize,
    keys: &mut Vec<String>,
    best: &mut Option<(usize, Vec<String>)>,
) {
    consider(value.span(), offset, keys, best);
    match value.get_ref() {
        DeValue::Table(table) => walk_table(table, offset, keys, best),
        DeValue::Array(items) => {
            for item in items.iter() {
                walk_value(item, offset, keys, best);
            }
        }
        _ => {}
    }
}

/// Keeps `keys` if `span` holds `offset` and is narrower than the best so far;
/// on a tie the deeper path wins, since it was visited later.
pub(super) fn consider(
    span: Range<usize>,
    offset: usize,
    keys: &[String],
    best: &mut Option<(usize, Vec<String>)>,
) {
    let holds = span.contains(&offset) || (span.is_empty() && span.start == offset);
    let width = span.len();
    if holds && best.as_ref().is_none_or(|(w, _)| width <= *w) {
        *best = Some((width, keys.to_vec()));
    }
}

/// Rewrites serde's `invalid type: X, expected Y` in TOML's words.
pub(super) fn humanize(message: &str) -> String {
    let rest = message
        .strip_prefix("invalid type: ")
        .or_else(|| message.strip_prefix("invalid value: "));
    if let Some((found, expected)) = rest.and_then(|r| r.rsplit_once(", expected ")) {
        return format!(
            "expected {}, found {}",
            toml_noun(expected),
            toml_noun(found)
        );
    }
    message.to_string()
}

pub(super) fn toml_noun(serde_noun: &str) -> &str {
    match serde_noun {
        "sequence" | "a sequence" => "an array",
        "map" | "a map" => "a table",
        s if s.starts_with("struct ") => "a table",
        s => s,
    }
}
