//! Man pages and shell completions for `pinctl` and `pinctld`, generated from
//! their clap definitions ([`Cli`], [`DaemonCli`]) so that they follow the
//! command lines by themselves: a new subcommand or option shows up in its man
//! page and in every shell's completions without anyone editing them.
//!
//! `packaging/build` runs the hidden `pinctl generate-assets --out DIR` before it
//! makes the packages, which install what lands in `DIR`. This module writes only
//! below the directory it is given and never touches the kernel.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Command, CommandFactory};
use clap_complete::Shell;
use clap_mangen::Man;
use clap_mangen::roff::{Roff, bold, roman};

use super::{CONFIG_FILE, Cli, DaemonCli};
use crate::config::Config;

/// The shells completions are generated for.
pub const SHELLS: [Shell; 3] = [Shell::Bash, Shell::Zsh, Shell::Fish];

/// The file name a shell's vendor completion directory expects for `bin`:
/// bash-completion loads `completions/<command>`, zsh autoloads `_<command>`
/// from its `fpath`, fish reads `vendor_completions.d/<command>.fish`.
pub fn completion_file_name(shell: Shell, bin: &str) -> String {
    match shell {
        Shell::Zsh => format!("_{bin}"),
        Shell::Fish => format!("{bin}.fish"),
        _ => bin.to_string(),
    }
}

/// The `pinctl` command line as clap sees it, built (subcommands know their
/// full names, such as `pinctl-topology` and `pinctl topology`).
pub fn pinctl_command() -> Command {
    built(Cli::command())
}

/// The `pinctld` command line as clap sees it, built.
pub fn pinctld_command() -> Command {
    built(DaemonCli::command())
}

fn built(mut cmd: Command) -> Command {
    cmd.build();
    cmd
}

/// Writes, below `out`:
///
/// - `man/man1/pinctl.1` and one `man/man1/pinctl-<subcommand>.1` per visible
///   subcommand (nested ones as `pinctl-<a>-<b>.1`), `man/man8/pinctld.8`;
/// - `completions/<shell>/<file>` for bash, zsh and fish, for both binaries,
///   named as [`completion_file_name`] says.
///
/// `date` goes into the pages' footers (see [`build_date`]). Returns the files
/// written. Existing files are replaced; nothing else in `out` is touched.
pub fn generate(out: &Path, date: &str) -> Result<Vec<PathBuf>> {
    let mut written = Vec::new();

    let man1 = out.join("man/man1");
    // clap's `help` subcommand only repeats the other pages: no page of its own.
    let pinctl_man = built(Cli::command().disable_help_subcommand(true));
    for cmd in with_visible_subcommands(&pinctl_man) {
        let name = page_name(cmd);
        let page = render_man(cmd, "1", date, &pinctl_extras(&pinctl_man, &name))?;
        written.push(write_file(&man1.join(format!("{name}.1")), &page)?);
    }
    let pinctld = pinctld_command();
    let page = render_man(&pinctld, "8", date, &pinctld_extras())?;
    written.push(write_file(&out.join("man/man8/pinctld.8"), &page)?);

    let pinctl = pinctl_command();
    for shell in SHELLS {
        let dir = out.join("completions").join(shell.to_string());
        for cmd in [&pinctl, &pinctld] {
            let bin = cmd.get_name().to_string();
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut cmd.clone(), &bin, &mut script);
            let path = dir.join(completion_file_name(shell, &bin));
            written.push(write_file(&path, &script)?);
        }
    }
    Ok(written)
}

/// `cmd` and all its visible subcommands, depth first.
fn with_visible_subcommands(cmd: &Command) -> Vec<&Command> {
    let mut all = vec![cmd];
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        all.extend(with_visible_subcommands(sub));
    }
    all
}

/// The man page name of a built command: `pinctl`, `pinctl-topology`.
fn page_name(cmd: &Command) -> String {
    cmd.get_display_name()
        .unwrap_or_else(|| cmd.get_name())
        .to_string()
}

/// One extra man page section: a heading and its paragraphs.
struct Section {
    heading: &'static str,
    /// Each entry is a tagged paragraph (`.TP`: tag, text) or, with no tag, a
    /// plain paragraph.
    items: Vec<(Option<String>, String)>,
}

/// The manual name shown in the pages' headers.
const MANUAL: &str = "pinctl";

/// Renders `cmd`'s man page: clap_mangen's sections, then `extras`, then the
/// version.
fn render_man(cmd: &Command, section: &str, date: &str, extras: &[Section]) -> Result<Vec<u8>> {
    let man = Man::new(cmd.clone())
        .title(page_name(cmd).to_uppercase())
        .section(section)
        .date(date)
        .manual(MANUAL);
    let mut page = Vec::new();
    man.render_title(&mut page)?;
    man.render_name_section(&mut page)?;
    man.render_synopsis_section(&mut page)?;
    man.render_description_section(&mut page)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut page)?;
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        man.render_subcommands_section(&mut page)?;
    }
    let mut roff = Roff::new();
    for extra in extras {
        roff.control("SH", [extra.heading]);
        for (tag, text) in &extra.items {
            match tag {
                Some(tag) => {
                    roff.control("TP", []);
                    roff.text([bold(tag.as_str())]);
                }
                None => {
                    roff.control("PP", []);
                }
            }
            roff.text([roman(text.as_str())]);
        }
    }
    roff.to_writer(&mut page)?;
    man.render_version_section(&mut page)?;
    Ok(page)
}

/// The exit codes, the same for every command (docs/src/cli.md "Exit codes").
fn exit_status(success: &str, failure: &str) -> Section {
    Section {
        heading: "EXIT STATUS",
        items: vec![
            (Some("0".into()), success.into()),
            (Some("1".into()), failure.into()),
            (Some("2".into()), "The command line is wrong.".into()),
        ],
    }
}

/// References to the other pages, as `name(section)`, in one paragraph.
fn see_also(pages: impl IntoIterator<Item = String>) -> Section {
    let list: Vec<String> = pages.into_iter().collect();
    Section {
        heading: "SEE ALSO",
        items: vec![(None, list.join(", "))],
    }
}

fn pinctl_extras(pinctl: &Command, this: &str) -> Vec<Section> {
    let others = with_visible_subcommands(pinctl)
        .into_iter()
        .map(page_name)
        .filter(|name| name != this)
        .map(|name| format!("{name}(1)"))
        .chain(["pinctld(8)".to_string()]);
    let failure = match this {
        "pinctl" | "pinctl-verify" => {
            "The command failed (the reason is on standard error), or pinctl verify \
             found problems (each on standard output, their count on standard error)."
        }
        "pinctl-run" => {
            "The run was refused, or the command could not be started; the reason is on \
             standard error. Once the command runs, pinctl run is the command (exec): \
             the exit status is the command's."
        }
        _ => "The command failed; the reason is on standard error.",
    };
    let success = match this {
        "pinctl-run" => "The command ran and exited 0.",
        _ => "Success.",
    };
    let mut status = exit_status(success, failure);
    if this == "pinctl-kubelet-handover" {
        status.items = vec![
            (
                Some("0".into()),
                "Every container the checkpoint pins keeps its CPUs, or there is nothing to do \
                 (no checkpoint, or policy none)."
                    .into(),
            ),
            (
                Some("1".into()),
                "Some containers will move or go to the shared pool: each is listed on \
                 standard output with why, their count on standard error."
                    .into(),
            ),
            (
                Some("2".into()),
                "Trouble: the checkpoint cannot be read or is corrupt, --apply was refused \
                 (the reason is on standard error), or the command line is wrong."
                    .into(),
            ),
        ];
    }
    let mut extras = vec![status];
    if matches!(
        this,
        "pinctl" | "pinctl-status" | "pinctl-describe" | "pinctl-verify" | "pinctl-events"
    ) {
        extras.push(Section {
            heading: "ENVIRONMENT",
            items: vec![
                (
                    Some("NO_COLOR".into()),
                    "When set to a non-empty value, no colour unless --color always. \
                     Without it, output is coloured only on a terminal."
                        .into(),
                ),
                (
                    Some("TZ".into()),
                    "The time zone of the times pinctl events and pinctl describe print.".into(),
                ),
            ],
        });
        extras.push(Section {
            heading: "FILES",
            items: vec![
                (
                    Some(CONFIG_FILE.into()),
                    "The daemon's configuration, read for its socket and, where a command \
                     needs them, its cgroup tree, state file and subtrees."
                        .into(),
                ),
                (
                    Some(Config::default().socket.display().to_string()),
                    "The daemon's socket (the socket key), for root and members of the \
                     group pinctl."
                        .into(),
                ),
            ],
        });
    }
    extras.push(see_also(others));
    extras
}

fn pinctld_extras() -> Vec<Section> {
    let defaults = Config::default();
    let file = |path: String, text: &str| (Some(path), text.to_string());
    vec![
        exit_status(
            "The daemon stopped cleanly (SIGTERM, SIGINT), or --check found the \
             configuration valid.",
            "The configuration is invalid or the daemon could not start; the \
             reason is on standard error and, under systemd, in the journal.",
        ),
        Section {
            heading: "FILES",
            items: vec![
                file(
                    CONFIG_FILE.into(),
                    "The configuration; every key is documented in the shipped file.",
                ),
                file(
                    defaults.state_file.display().to_string(),
                    "Which CPUs the daemon handed to which cgroup (state_file), a hint \
                     that keeps workloads on their CPUs across restarts.",
                ),
                file(
                    defaults.socket.display().to_string(),
                    "The socket pinctl talks to (socket), for members of the pinctl group.",
                ),
                file(
                    "pinctld.service".into(),
                    "The systemd unit that runs the daemon on a node.",
                ),
            ],
        },
        see_also(["pinctl(1)".to_string(), "systemd.service(5)".to_string()]),
    ]
}

/// The date for the pages' footers, as YYYY-MM-DD: that of `SOURCE_DATE_EPOCH`
/// when it is set (reproducible builds; `packaging/build` sets it to the last
/// commit's time), else today's (UTC).
pub fn build_date() -> String {
    let secs = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or_else(crate::api::unix_secs);
    civil_date(secs)
}

/// YYYY-MM-DD (UTC) of a Unix time, by the days-to-civil algorithm of the
/// proleptic Gregorian calendar (no calendar crate for one footer; the
/// benchmarks' rows use it too).
pub fn civil_date(unix_secs: u64) -> String {
    let z = (unix_secs / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

fn write_file(path: &Path, content: &[u8]) -> Result<PathBuf> {
    let dir = path.parent().expect("generated paths have a parent");
    fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut file =
        fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    file.write_all(content)
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completion_files_are_named_as_each_shell_looks_them_up() {
        assert_eq!(completion_file_name(Shell::Bash, "pinctl"), "pinctl");
        assert_eq!(completion_file_name(Shell::Zsh, "pinctl"), "_pinctl");
        assert_eq!(completion_file_name(Shell::Fish, "pinctl"), "pinctl.fish");
    }

    #[test]
    fn civil_dates_of_known_unix_times() {
        assert_eq!(civil_date(0), "1970-01-01");
        assert_eq!(civil_date(951_782_400), "2000-02-29");
        assert_eq!(civil_date(1_763_769_599), "2025-11-21");
        assert_eq!(civil_date(4_107_542_400), "2100-03-01");
    }

    #[test]
    fn subcommand_pages_are_named_after_their_full_command() {
        let cmd = built(Cli::command().disable_help_subcommand(true));
        let names: Vec<String> = with_visible_subcommands(&cmd)
            .into_iter()
            .map(page_name)
            .collect();
        assert!(names.contains(&"pinctl".to_string()), "{names:?}");
        assert!(names.contains(&"pinctl-topology".to_string()), "{names:?}");
        assert!(names.contains(&"pinctl-plan".to_string()), "{names:?}");
    }
}
