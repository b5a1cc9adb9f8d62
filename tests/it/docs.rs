//! The words kept true: every link in the README, ARCHITECTURE.md and the
//! book (`docs/`) resolves, to a file and to a heading; the book's summary
//! lists every page; the configuration page lists every key the shipped
//! file has, and no other; the Quiet CPUs page explains the boot line as
//! `bootline::PARAMS` does; every command and flag is on a page; the docs
//! point nowhere outside the repository; every `pinctl` example that runs on
//! a recorded fixture prints what the docs show; what the shipped file and
//! the configuration page say of `full_pcpus_only` is what the daemon does.
//! The metrics page is kept by `metrics.rs`'s tests; the README's tour, which
//! needs a real cgroup hierarchy, by `tests/tour/`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// The book's pages.
fn pages() -> Vec<PathBuf> {
    let mut pages: Vec<PathBuf> = std::fs::read_dir(repo("docs/src"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    pages.sort();
    pages
}

/// A markdown text without its fenced code blocks and inline code.
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fence = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fence = !fence;
            continue;
        }
        if !fence {
            let mut code = false;
            for c in line.chars() {
                if c == '`' {
                    code = !code;
                } else if !code {
                    out.push(c);
                }
            }
            out.push('\n');
        }
    }
    out
}

/// The anchors of a markdown file's headings, as mdBook and GitHub make
/// them: lower case, punctuation dropped, spaces as dashes.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut fence = false;
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fence = !fence;
        }
        if fence || !line.starts_with('#') {
            continue;
        }
        let title = line.trim_start_matches('#').trim();
        let slug: String = title
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        out.insert(slug);
    }
    out
}

/// The targets of a markdown text's inline links, `[text](target)`.
fn links(text: &str) -> Vec<String> {
    let text = prose(text);
    let mut out = Vec::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        if let Some(end) = rest.find(')') {
            out.push(rest[..end].to_string());
            rest = &rest[end..];
        }
    }
    out
}

#[test]
fn every_link_resolves_to_a_file_and_a_heading() {
    let mut files = vec![repo("README.md"), repo("ARCHITECTURE.md")];
    files.extend(pages());
    let mut checked = 0;
    for file in &files {
        let text = read(file);
        for target in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let dest = if path.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap().join(path)
            };
            assert!(
                dest.exists(),
                "{}: link to {target}: no {}",
                file.display(),
                dest.display()
            );
            if !anchor.is_empty() {
                assert!(
                    anchors(&read(&dest)).contains(anchor),
                    "{}: link to {target}: no heading #{anchor} in {}",
                    file.display(),
                    dest.display()
                );
            }
            checked += 1;
        }
    }
    assert!(checked > 20, "only {checked} links found");
}

/// Why a line of the docs points outside the repository, if it does: a
/// file beside it (`KERNEL-NOTES.md`, `../shared/`), an issue's number
/// ("issue #42", "issues #3"), or "the issue notes". The docs must hold
/// every fact they need; `docs/src/kernel.md` holds the kernel's.
fn points_outside(line: &str) -> Option<&'static str> {
    // ASCII lower case keeps every byte where it was.
    let lower = line.to_ascii_lowercase();
    if lower.contains("kernel-notes") {
        return Some("cites KERNEL-NOTES");
    }
    if lower.contains("../shared") {
        return Some("cites ../shared");
    }
    if lower.contains("issue note") {
        return Some("cites the issue notes");
    }
    let bytes = lower.as_bytes();
    for (at, _) in lower.match_indices("issue") {
        if at > 0 && bytes[at - 1].is_ascii_alphanumeric() {
            continue; // "tissue"
        }
        let mut i = at + "issue".len();
        if bytes.get(i) == Some(&b's') {
            i += 1;
        }
        while bytes.get(i) == Some(&b' ') {
            i += 1;
        }
        if bytes.get(i) == Some(&b'#') && bytes.get(i + 1).is_some_and(u8::is_ascii_digit) {
            return Some("cites an issue number");
        }
    }
    None
}

#[test]
fn points_outside_finds_issue_numbers_and_outside_files_only() {
    let cases = [
        ("What else runs on exclusive CPUs (issue #42)", true),
        ("Issue #42 asks that an exclusive CPU be quiet.", true),
        ("## Targets (ISSUE #14), at 1,000 live containers", true),
        ("see issues #3 and #4", true),
        ("issue#7", true),
        ("(`KERNEL-NOTES.md`, \"systemd\")", true),
        ("`../shared/STYLE.md`", true),
        ("is in the issue notes, not here", true),
        ("Issue notes (`issues all`)", true),
        ("  #12 2026-11-22 01:11:55.146  write kubepods.slice", false),
        ("a tissue #3", false),
        ("an issue with #3", false),
        ("issue # 3", false),
        ("the issue is #", false),
        ("[Kernel facts](kernel.md#reads-that-hang)", false),
    ];
    for (line, outside) in cases {
        assert_eq!(points_outside(line).is_some(), outside, "{line:?}");
    }
}

/// The docs stand alone: README.md, ARCHITECTURE.md and the book cite no
/// file outside the repository, no issue by number and no issue notes.
#[test]
fn the_docs_point_nowhere_outside_the_repository() {
    let mut files = vec![repo("README.md"), repo("ARCHITECTURE.md")];
    files.extend(pages());
    let mut found = Vec::new();
    for file in &files {
        let name = file.strip_prefix(repo("")).unwrap_or(file).display();
        for (n, line) in read(file).lines().enumerate() {
            if let Some(why) = points_outside(line) {
                found.push(format!("{name}:{}: {why}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "the docs point outside the repository (say it here, or drop it):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_summary_lists_every_page_once() {
    let summary = read(&repo("docs/src/SUMMARY.md"));
    let listed: Vec<String> = links(&summary);
    let unique: BTreeSet<&String> = listed.iter().collect();
    assert_eq!(
        unique.len(),
        listed.len(),
        "a page listed twice: {listed:?}"
    );
    for page in pages() {
        let name = page.file_name().unwrap().to_string_lossy().into_owned();
        if name != "SUMMARY.md" {
            assert!(listed.contains(&name), "SUMMARY.md does not list {name}");
        }
    }
}

/// The keys of the shipped configuration file: `key = ...` lines, and
/// commented `# key = ...` ones (an optional key or table shown off), a
/// table's keys as `table.key` (`[run]`, `# [[rule]]`, ...).
fn shipped_keys() -> BTreeSet<String> {
    let text = read(&repo("etc/pinctl/pinctld.toml"));
    let mut keys = BTreeSet::new();
    let mut table = String::new();
    for line in text.lines() {
        let line = line.strip_prefix("# ").unwrap_or(line);
        let header = line.trim_start_matches('[').trim_end_matches(']');
        if line.starts_with('[')
            && !header.is_empty()
            && header.chars().all(|c| c.is_ascii_lowercase() || c == '_')
        {
            table = format!("{header}.");
            continue;
        }
        let Some((key, _)) = line.split_once(" = ") else {
            continue;
        };
        if !key.is_empty() && key.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
            keys.insert(format!("{table}{key}"));
        }
    }
    keys
}

#[test]
fn the_configuration_page_lists_every_shipped_key() {
    // A table's rows under its heading (`## \`[run]\``) are `table.key`.
    let page = read(&repo("docs/src/configuration.md"));
    let mut documented = BTreeSet::new();
    let mut table = String::new();
    for line in page.lines() {
        if let Some(heading) = line.strip_prefix("## ") {
            let name = heading.trim_matches('`').trim_matches(['[', ']']);
            table = match heading.starts_with("`[") {
                true => format!("{name}."),
                false => String::new(),
            };
            continue;
        }
        if let Some((key, _)) = line.strip_prefix("| `").and_then(|l| l.split_once('`')) {
            documented.insert(format!("{table}{key}"));
        }
    }
    let shipped = shipped_keys();
    for key in &shipped {
        assert!(
            documented.contains(key),
            "docs/src/configuration.md lacks `{key}`"
        );
    }
    for key in &documented {
        assert!(
            shipped.contains(key),
            "docs/src/configuration.md has `{key}`, the shipped file does not"
        );
    }
}

/// The Quiet CPUs page explains each part of the boot line as
/// `bootline::PARAMS` does (what `describe` prints), word for word.
#[test]
fn the_quiet_cpus_page_explains_each_part_of_the_boot_line() {
    let page = read(&repo("docs/src/housekeeping.md"));
    for p in pinctl::bootline::PARAMS {
        let row = format!("| `{}` | {} |", p.name, p.removes);
        assert!(
            page.lines().any(|l| l == row),
            "docs/src/housekeeping.md lacks the row {row:?}"
        );
    }
}

/// Every subcommand and flag of `pinctl` and `pinctld` is on a page of the
/// book (`--help` and `--version` aside): a new flag cannot go
/// undocumented.
#[test]
fn every_command_and_flag_is_documented() {
    let mut book = String::new();
    for page in pages() {
        book.push_str(&read(&page));
    }
    let mut missing = Vec::new();
    let check = |cmd: &clap::Command, path: &str, missing: &mut Vec<String>| {
        for arg in cmd.get_arguments() {
            let Some(long) = arg.get_long() else {
                continue;
            };
            if matches!(long, "help" | "version") || arg.is_hide_set() {
                continue;
            }
            if !book.contains(&format!("--{long}")) {
                missing.push(format!("{path} --{long}"));
            }
        }
    };
    let pinctl = pinctl::cli::assets::pinctl_command();
    let subcommands = pinctl.get_subcommands();
    for sub in subcommands.filter(|s| !s.is_hide_set() && s.get_name() != "help") {
        let path = format!("pinctl {}", sub.get_name());
        if !book.contains(&path) {
            missing.push(path.clone());
        }
        check(sub, &path, &mut missing);
    }
    check(
        &pinctl::cli::assets::pinctld_command(),
        "pinctld",
        &mut missing,
    );
    assert!(missing.is_empty(), "not in docs/src/: {missing:#?}");
}

/// One `$ pinctl ...` line of a `console` block, with the output shown
/// below it (up to the next `$ ` line or the block's end).
struct Example {
    at: String,
    command: String,
    shown: Vec<String>,
}

/// The examples of the `console` blocks of a markdown text.
fn console_examples(file: &str, text: &str) -> Vec<Example> {
    let mut out: Vec<Example> = Vec::new();
    let mut inside = false;
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            inside = !inside && line.trim() == "```console";
            continue;
        }
        if !inside {
            continue;
        }
        if let Some(command) = line.strip_prefix("$ ") {
            out.push(Example {
                at: format!("{file}:{}", n + 1),
                command: command.to_string(),
                shown: Vec::new(),
            });
        } else if let Some(last) = out.last_mut() {
            last.shown.push(line.to_string());
        }
    }
    out
}

/// Every `pinctl` example in the README and the book that runs on a
/// recorded fixture (its arguments name `tests/fixtures/`) is run from the
/// repository's root, and prints what the docs show: line for line, up to a
/// line `...`, after which the rest is not shown. An allocator or topology
/// change that alters such an output fails here until the docs follow.
#[test]
fn every_fixture_example_prints_what_the_docs_show() {
    let mut files = vec![repo("README.md")];
    files.extend(pages());
    let mut ran = 0;
    let mut wrong = Vec::new();
    for path in files {
        let name = path.strip_prefix(repo("")).unwrap().display().to_string();
        for ex in console_examples(&name, &read(&path)) {
            let words: Vec<&str> = ex.command.split_whitespace().collect();
            if words.first() != Some(&"pinctl") || !ex.command.contains("tests/fixtures/") {
                continue;
            }
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_pinctl"))
                .args(&words[1..])
                .current_dir(repo(""))
                .env("NO_COLOR", "1")
                .output()
                .unwrap();
            ran += 1;
            let printed = String::from_utf8_lossy(&out.stdout);
            let printed: Vec<&str> = printed.lines().collect();
            let cut = ex.shown.iter().position(|l| l == "...");
            let shown = &ex.shown[..cut.unwrap_or(ex.shown.len())];
            let same = match cut {
                Some(_) => printed.len() >= shown.len() && printed[..shown.len()] == *shown,
                None => printed == *shown,
            };
            if !out.status.success() || !same {
                wrong.push(format!(
                    "{}: `{}` exited {} and printed:\n{}\nthe docs show:\n{}",
                    ex.at,
                    ex.command,
                    out.status,
                    printed.join("\n"),
                    ex.shown.join("\n")
                ));
            }
        }
    }
    assert!(
        ran >= 3,
        "only {ran} fixture examples found: is the parsing right?"
    );
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
}

/// The command page has a heading for every `pinctl` subcommand, so each
/// is found where a reader looks for it (a section elsewhere is not enough).
#[test]
fn the_command_page_has_a_section_per_subcommand() {
    let page = read(&repo("docs/src/cli.md"));
    let headings: Vec<&str> = page.lines().filter(|l| l.starts_with('#')).collect();
    let pinctl = pinctl::cli::assets::pinctl_command();
    let missing: Vec<String> = pinctl
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
        .map(|s| format!("`pinctl {}", s.get_name()))
        .filter(|want| !headings.iter().any(|h| h.contains(want.as_str())))
        .collect();
    assert!(
        missing.is_empty(),
        "no heading on docs/src/cli.md for {missing:?}"
    );
}

/// The words of the shipped file's comment above `key = ...` (its `#`
/// lines, joined), and of the configuration page's row of `key`.
fn documented(key: &str) -> [(String, String); 2] {
    let shipped = read(&repo("etc/pinctl/pinctld.toml"));
    let lines: Vec<&str> = shipped.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with(&format!("{key} = ")))
        .unwrap_or_else(|| panic!("etc/pinctl/pinctld.toml has no line `{key} = ...`"));
    let mut comment: Vec<&str> = lines[..at]
        .iter()
        .rev()
        .take_while(|l| l.starts_with('#'))
        .map(|l| l.trim_start_matches('#').trim())
        .collect();
    comment.reverse();
    let page = read(&repo("docs/src/configuration.md"));
    let row = page
        .lines()
        .find(|l| l.starts_with(&format!("| `{key}` |")))
        .unwrap_or_else(|| panic!("docs/src/configuration.md has no row for `{key}`"));
    [
        ("etc/pinctl/pinctld.toml".into(), comment.join(" ")),
        ("docs/src/configuration.md".into(), row.to_string()),
    ]
}

/// What the docs say of a request `full_pcpus_only` cannot meet (not a
/// multiple of the threads per core) is what the daemon does with it: the
/// shipped file's comment and the configuration page's row say it is
/// pending and waits in the shared pool, never that it is refused; the
/// reason they quote is the one `pinctl status` serves. The daemon, with
/// the key on, is given a Guaranteed container of 3 CPUs on the fixture's
/// 2-thread cores (and one of 4, which gets two whole cores): the 3 wait in
/// the shared pool, pending, with that reason.
#[test]
fn the_docs_say_what_full_pcpus_only_does() {
    use crate::support::fake_cgroup::{Driver, ONLINE, Qos, Spec, Version, container_id, uid};
    use crate::support::world::{Options, World};

    let mut quoted = Vec::new();
    for (file, text) in documented("full_pcpus_only") {
        let lower = text.to_lowercase();
        for word in ["pending", "waits in the shared pool"] {
            assert!(
                lower.contains(word),
                "{file}: what it says of full_pcpus_only lacks {word:?}: {text}"
            );
        }
        for word in ["refuse", "reject", "fail", "error", "denied"] {
            assert!(
                !lower.contains(word),
                "{file}: what it says of full_pcpus_only has {word:?}, but such a request \
                 waits: {text}"
            );
        }
        let reason = text
            .split_once("(\"")
            .and_then(|(_, rest)| rest.split_once("\")"))
            .map(|(reason, _)| reason.to_string())
            .unwrap_or_else(|| panic!("{file}: no (\"reason\") quoted of full_pcpus_only: {text}"));
        quoted.push((file, reason));
    }

    let opts = Options {
        keys: vec!["full_pcpus_only = true".into()],
        ..Options::default()
    };
    let mut w = World::new("docs-full-pcpus", Version::V2, Driver::Systemd, &opts);
    let container = |w: &World, n: u32, cpus: u32| {
        let pod = w.k.pod(Qos::Guaranteed, &uid(n));
        w.tree.create(&pod, &Spec::default());
        let rel = w.k.container(&pod, &container_id(n));
        w.tree.create(&rel, &Spec::limit(cpus));
        rel
    };
    let odd = container(&w, 1, 3);
    let even = container(&w, 2, 4);
    w.start();
    let whole = w.wait_pinned(&even, 4);
    let pool: pinctl::CpuSet = ONLINE.parse::<pinctl::CpuSet>().unwrap().difference(&whole);
    let pending = w.wait_for("the 3-CPU request pending, in the shared pool", || {
        let status = w.served()?;
        let wl = status
            .workloads
            .iter()
            .find(|x| x.cgroups.contains(&odd))
            .ok_or_else(|| "no workload of the 3-CPU container".to_string())?;
        let got = w.tree.effective(&odd);
        match (&wl.pending, &wl.cpus) {
            (Some(p), None) if got == pool => Ok(p.clone()),
            _ => Err(format!(
                "pending {:?}, CPUs {:?}, its cgroup has {got}",
                wl.pending, wl.cpus
            )),
        }
    });
    for (file, reason) in quoted {
        assert!(
            pending.reason.contains(&reason),
            "{file} says pinctl status gives {reason:?}; the daemon says {:?}",
            pending.reason
        );
    }
}
