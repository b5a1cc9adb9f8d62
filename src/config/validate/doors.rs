//! The `[run]` and `[nri]` tables validated: the two doors other programs
//! ask the daemon through besides its status socket. `pinctl run`'s socket
//! and who may ask where; the NRI socket, the plugin's name and index.
//! Like the rest of stage 2, it reads no file and keeps the first wrong
//! value as the error, at its file, line and key.

use toml::Spanned;

use super::super::raw::{RawInt, RawNri, RawRun};
use super::super::{ConfigError, Nri, Run};
use super::{Validator, account_name_problem, relative_path_problem};
use crate::cpuset::MAX_CPUS;

impl Validator<'_> {
    /// The `[run]` table; its first wrong value is the error.
    pub(super) fn run(&self, raw: RawRun) -> Result<Run, ConfigError> {
        let d = Run::default();
        let socket = match raw.socket {
            Some(s) => self.socket(&s, "run.socket")?,
            None => d.socket,
        };
        let names = |list: Option<Vec<Spanned<String>>>, key: &str| {
            list.unwrap_or_default()
                .into_iter()
                .map(|n| match account_name_problem(n.get_ref()) {
                    None => Ok(n.into_inner()),
                    Some(why) => Err(self.error(
                        &n.span(),
                        key,
                        format!("invalid name {:?}: {why}", n.get_ref()),
                    )),
                })
                .collect::<Result<Vec<String>, ConfigError>>()
        };
        let users = names(raw.users, "run.users")?;
        let groups = names(raw.groups, "run.groups")?;
        let count = |raw: Option<Spanned<RawInt>>, key: &str| match raw {
            None => Ok(0),
            Some(n) => match usize::try_from(n.get_ref().0) {
                Ok(v) if v <= MAX_CPUS => Ok(v),
                _ => Err(self.error(
                    &n.span(),
                    key,
                    format!(
                        "invalid CPU count {}: must be from 0 (no cap) to {MAX_CPUS}",
                        n.get_ref().0
                    ),
                )),
            },
        };
        let max_cpus = count(raw.max_cpus, "run.max_cpus")?;
        let max_cpus_per_user = count(raw.max_cpus_per_user, "run.max_cpus_per_user")?;
        let slice = match raw.slice {
            None => d.slice,
            Some(s) => {
                let text = s.get_ref();
                let last = text.rsplit('/').next().unwrap_or("");
                let why = if let Some(why) = relative_path_problem(text) {
                    Some(why)
                } else if last.len() <= ".slice".len() || !last.ends_with(".slice") {
                    Some("its last name must end in \".slice\"")
                } else {
                    None
                };
                if let Some(why) = why {
                    return Err(self.error(
                        &s.span(),
                        "run.slice",
                        format!("invalid slice {text:?}: {why}"),
                    ));
                }
                s.into_inner()
            }
        };
        let mem = match raw.mem {
            None => d.mem,
            Some(m) => m
                .get_ref()
                .parse()
                .map_err(|why| self.error(&m.span(), "run.mem", why))?,
        };
        Ok(Run {
            enabled: raw.enabled.unwrap_or(d.enabled),
            socket,
            users,
            groups,
            max_cpus,
            max_cpus_per_user,
            slice,
            mem,
            allow_slurm_jobs: raw.allow_slurm_jobs.unwrap_or(d.allow_slurm_jobs),
        })
    }

    /// The `[nri]` table; its first wrong value is the error.
    pub(super) fn nri(&self, raw: RawNri) -> Result<Nri, ConfigError> {
        let d = Nri::default();
        let socket = match raw.socket {
            Some(s) => self.socket(&s, "nri.socket")?,
            None => d.socket,
        };
        // NRI takes a name of letters, digits and `-_.` (the runtime
        // refuses others), and an index of two digits.
        let plugin_name = match raw.plugin_name {
            None => d.plugin_name,
            Some(n) => {
                let text = n.get_ref();
                let ok = !text.is_empty()
                    && text.len() <= 64
                    && text
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
                if !ok {
                    return Err(self.error(
                        &n.span(),
                        "nri.plugin_name",
                        format!(
                            "invalid plugin name {text:?}: 1 to 64 letters, digits, '-', '_' or '.'"
                        ),
                    ));
                }
                n.into_inner()
            }
        };
        let plugin_index = match raw.plugin_index {
            None => d.plugin_index,
            Some(i) => {
                let text = i.get_ref();
                if text.len() != 2 || !text.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(self.error(
                        &i.span(),
                        "nri.plugin_index",
                        format!("invalid plugin index {text:?}: two digits, \"00\" to \"99\""),
                    ));
                }
                i.into_inner()
            }
        };
        Ok(Nri {
            enabled: raw.enabled.unwrap_or(d.enabled),
            socket,
            plugin_name,
            plugin_index,
            required: raw.required.unwrap_or(d.required),
        })
    }
}
