//! Loading a configuration: reading the file (at most [`MAX_FILE_SIZE`]
//! bytes), parsing and validating its text ([`parse`]), durations
//! ([`parse_duration`]), and the errors that name the file, line and key
//! ([`ConfigError`]). It holds no configuration and never reads any other
//! file.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use toml::de::DeTable;

use super::raw::{RawConfig, toml_error};
use super::validate::Validator;
use super::{Config, MAX_DURATION, MAX_FILE_SIZE};
#[cfg(doc)]
use super::{MAX_ITEMS, MAX_STRING};

/// Why the configuration could not be loaded.
///
/// Messages name the file and, for everything but a read failure, the line and
/// column (1-based, columns in characters) and the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {}: {reason}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The kind of the I/O error, so callers can tell a missing file apart.
        kind: std::io::ErrorKind,
        /// The operating system's description, without the error number.
        reason: String,
    },
    /// The file is larger than [`MAX_FILE_SIZE`]; none of it was parsed.
    #[error("{}: {}larger than the {MAX_FILE_SIZE} bytes a config file may hold", .path.display(), size_of(.size))]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size in bytes, when known (`load` of something other than a
        /// regular file stops reading past the bound).
        size: Option<u64>,
    },
    /// The file is not well-formed TOML.
    #[error("{}:{line}:{column}: invalid TOML: {message}", .path.display())]
    Syntax {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column, in characters.
        column: usize,
        /// What the TOML parser said.
        message: String,
    },
    /// A key the daemon does not know (often a typo).
    #[error("{}:{line}:{column}: unknown key `{key}`{}", .path.display(), in_table(.table))]
    UnknownKey {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column, in characters.
        column: usize,
        /// The key as written.
        key: String,
        /// The table it is in (`rule`), or `None` at the top level.
        table: Option<String>,
    },
    /// A value of the wrong type, or one that fails validation.
    #[error("{}:{line}:{column}: {key}: {message}", .path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column, in characters.
        column: usize,
        /// The key, dotted for keys of a table (`rule.cpus`).
        key: String,
        /// What is wrong with the value.
        message: String,
    },
}

fn size_of(size: &Option<u64>) -> String {
    size.map(|n| format!("{n} bytes, ")).unwrap_or_default()
}

fn in_table(table: &Option<String>) -> String {
    match table {
        Some(t) => format!(" in [[{t}]]"),
        None => String::new(),
    }
}

/// Why a duration string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {input:?}: {reason}")]
pub struct ParseDurationError {
    /// The whole input, as given.
    pub input: String,
    /// What is wrong with it.
    pub reason: String,
}

/// Reads and validates the config file at `path`, reading no more than
/// [`MAX_FILE_SIZE`] bytes and one.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    use std::io::Read;
    let read_error = |e: std::io::Error| ConfigError::Read {
        path: path.to_path_buf(),
        kind: e.kind(),
        reason: io_reason(&e),
    };
    let file = std::fs::File::open(path).map_err(read_error)?;
    let mut bytes = Vec::new();
    (&file)
        .take(MAX_FILE_SIZE as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() > MAX_FILE_SIZE {
        let size = file
            .metadata()
            .ok()
            .filter(|m| m.is_file())
            .map(|m| m.len());
        return Err(ConfigError::TooLarge {
            path: path.to_path_buf(),
            size,
        });
    }
    let text = String::from_utf8(bytes).map_err(|_| {
        read_error(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "stream did not contain valid UTF-8",
        ))
    })?;
    parse(&text, path)
}

/// `io::Error`'s message without the ` (os error N)` suffix.
pub(super) fn io_reason(e: &std::io::Error) -> String {
    let text = e.to_string();
    match e.raw_os_error() {
        Some(code) => text
            .strip_suffix(&format!(" (os error {code})"))
            .map(str::to_string)
            .unwrap_or(text),
        None => text,
    }
}

/// Validates the configuration in `text`. `path` is used only in error
/// messages. An empty text gives [`Config::default`].
///
/// The work is bounded by the input: a text over [`MAX_FILE_SIZE`] is refused
/// before it is parsed, and a document with an array over [`MAX_ITEMS`] or a
/// string or key over [`MAX_STRING`] before any value is validated (globs
/// compiled, CPU lists parsed).
pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
    if text.len() > MAX_FILE_SIZE {
        return Err(ConfigError::TooLarge {
            path: path.to_path_buf(),
            size: Some(text.len() as u64),
        });
    }
    let validator = Validator { text, path };
    let doc = DeTable::parse(text).map_err(|e| toml_error(text, path, &e))?;
    validator.check_bounds(doc.get_ref())?;
    let raw = RawConfig::deserialize(toml::de::Deserializer::from(doc))
        .map_err(|e| toml_error(text, path, &e))?;
    validator.config(raw)
}

/// Parses a duration written as `<integer><unit>` with unit `ms`, `s`, `m` or
/// `h` (`"500ms"`, `"10s"`, `"2m"`). Strict: no spaces, no sign, no fractions,
/// no missing unit. Zero and anything over [`MAX_DURATION`] are rejected.
pub fn parse_duration(text: &str) -> Result<Duration, ParseDurationError> {
    let err = |reason: String| ParseDurationError {
        input: text.to_string(),
        reason,
    };
    if text.is_empty() {
        return Err(err(
            "empty; write an integer and a unit, e.g. \"10s\"".into()
        ));
    }
    if text.chars().any(char::is_whitespace) {
        return Err(err("spaces are not allowed".into()));
    }
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    if digits.is_empty() {
        return Err(err("must start with an integer, e.g. \"10s\"".into()));
    }
    if unit.starts_with(['.', ',']) {
        return Err(err(
            "fractions are not supported; use a smaller unit, e.g. \"1500ms\"".into(),
        ));
    }
    let millis_per_unit: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "" => return Err(err("missing unit: use ms, s, m or h".into())),
        other => return Err(err(format!("unknown unit {other:?}: use ms, s, m or h"))),
    };
    let too_long = || err("longer than the maximum of 24h".into());
    // Digits that overflow u64 are certainly longer than a day.
    let count: u64 = digits.parse().map_err(|_| too_long())?;
    let millis = count.checked_mul(millis_per_unit).ok_or_else(too_long)?;
    if millis == 0 {
        return Err(err("must be greater than zero".into()));
    }
    let duration = Duration::from_millis(millis);
    if duration > MAX_DURATION {
        return Err(too_long());
    }
    Ok(duration)
}
