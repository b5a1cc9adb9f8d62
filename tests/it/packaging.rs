//! The packages (issue #7) without building them: the man pages and completions
//! `packaging/build` generates follow the clap definitions, the systemd unit
//! agrees with the shipped configuration and the daemon's needs, the .deb and
//! .rpm install the same files, and the maintainer scripts are sound shell.
//! `.ci/run` builds, lints, installs and removes the real packages.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use clap::CommandFactory;
use pinctl::cli::assets::{SHELLS, completion_file_name};
use pinctl::cli::{CONFIG_FILE, Cli, DaemonCli};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// Runs the hidden `pinctl generate-assets` into a fresh directory.
fn generate_assets() -> tempfile::TempDir {
    let out = tempfile::tempdir().unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_pinctl"))
        .args(["generate-assets", "--out"])
        .arg(out.path())
        .output()
        .expect("run pinctl generate-assets");
    assert!(
        run.status.success(),
        "pinctl generate-assets failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    out
}

/// The visible subcommands of `pinctl` (clap's `help` excluded).
fn subcommands() -> Vec<clap::Command> {
    Cli::command()
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .cloned()
        .collect()
}

fn long_options(cmd: &clap::Command) -> Vec<String> {
    cmd.get_arguments()
        .filter(|a| !a.is_hide_set())
        .filter_map(|a| a.get_long())
        .map(|l| format!("--{l}"))
        .collect()
}

#[test]
fn every_subcommand_has_a_man_page_and_the_daemon_one_in_section_8() {
    let out = generate_assets();
    let man1 = out.path().join("man/man1");
    let top = read(&man1.join("pinctl.1"));
    assert!(top.contains(".TH PINCTL 1 "), "{top}");
    for sub in subcommands() {
        let name = format!("pinctl-{}", sub.get_name());
        let page = read(&man1.join(format!("{name}.1")));
        assert!(
            page.contains(&format!(".TH {} 1 ", name.to_uppercase())),
            "{name}.1 has no title line:\n{page}"
        );
        // Roff escapes every '-' as '\-'.
        for option in long_options(&sub) {
            let roff = option.replace('-', "\\-");
            assert!(page.contains(&roff), "{name}.1 lacks {option}");
        }
        assert!(
            top.contains(&name.replace('-', "\\-")),
            "pinctl.1 does not list {name}"
        );
    }
    // Its own exit codes: 1 says containers move, 2 any trouble.
    let handover = read(&man1.join("pinctl-kubelet-handover.1"));
    assert!(
        handover.contains("Some containers will move") && handover.contains("Trouble:"),
        "{handover}"
    );
    let daemon = read(&out.path().join("man/man8/pinctld.8"));
    assert!(daemon.contains(".TH PINCTLD 8 "), "{daemon}");
    for option in long_options(&DaemonCli::command()) {
        assert!(
            daemon.contains(&option.replace('-', "\\-")),
            "pinctld.8 lacks {option}"
        );
    }
    // FILES names the configured defaults, so it follows the configuration.
    let defaults = pinctl::config::Config::default();
    for path in [
        defaults.state_file.display().to_string(),
        defaults.socket.display().to_string(),
        CONFIG_FILE.to_string(),
    ] {
        assert!(daemon.contains(&path), "pinctld.8 does not name {path}");
    }
}

#[test]
fn completions_of_every_shell_know_every_subcommand_and_option() {
    let out = generate_assets();
    for shell in SHELLS {
        let dir = out.path().join("completions").join(shell.to_string());
        let script = read(&dir.join(completion_file_name(shell, "pinctl")));
        for sub in subcommands() {
            assert!(
                script.contains(sub.get_name()),
                "{shell} completions lack {}",
                sub.get_name()
            );
            for option in long_options(&sub) {
                // fish writes `-l cpus`, the others `--cpus`.
                let bare = option.trim_start_matches('-');
                assert!(
                    script.contains(&option) || script.contains(&format!("-l {bare}")),
                    "{shell} completions lack {} {option}",
                    sub.get_name()
                );
            }
        }
        let daemon = read(&dir.join(completion_file_name(shell, "pinctld")));
        assert!(daemon.contains("config"), "{shell}: {daemon}");
    }
}

#[test]
fn the_asset_generator_is_hidden_from_help_man_pages_and_completions() {
    let help = Command::new(env!("CARGO_BIN_EXE_pinctl"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(help.status.success());
    assert!(!String::from_utf8_lossy(&help.stdout).contains("generate-assets"));
    let out = generate_assets();
    for entry in walk(out.path()) {
        assert!(
            !read(&entry).contains("generate-assets"),
            "{} mentions the hidden generate-assets",
            entry.display()
        );
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

/// The `Key=Value` settings of a unit file, in order (keys may repeat).
fn unit_settings() -> Vec<(String, String)> {
    read(&repo("packaging/pinctld.service"))
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with(['#', ';', '[']))
        .map(|l| {
            let (k, v) = l
                .split_once('=')
                .unwrap_or_else(|| panic!("not a setting: {l}"));
            (k.trim().to_string(), v.trim().to_string())
        })
        .collect()
}

fn setting(settings: &[(String, String)], key: &str) -> String {
    let values: Vec<&String> = settings
        .iter()
        .filter(|(k, _)| k == key)
        .map(|(_, v)| v)
        .collect();
    assert_eq!(values.len(), 1, "{key}= should be set once: {values:?}");
    values[0].clone()
}

#[test]
fn the_unit_runs_the_packaged_daemon_under_systemd_supervision() {
    let unit = unit_settings();
    assert_eq!(
        setting(&unit, "ExecStart"),
        format!("/usr/bin/pinctld --config {}", CONFIG_FILE)
    );
    // systemctl reload checks the same file first (a bad one fails the
    // reload with its error), then asks the daemon to read it (SIGHUP).
    let reload: Vec<&str> = unit
        .iter()
        .filter(|(k, _)| k == "ExecReload")
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(
        reload,
        [
            format!("/usr/bin/pinctld --config {CONFIG_FILE} --check").as_str(),
            "/bin/kill -HUP $MAINPID",
        ]
    );
    // The daemon sends READY=1 and WATCHDOG=1 (ARCHITECTURE.md, daemon).
    assert_eq!(setting(&unit, "Type"), "notify");
    assert!(!setting(&unit, "WatchdogSec").is_empty());
    assert_eq!(setting(&unit, "Restart"), "on-failure");
    let stop = setting(&unit, "TimeoutStopSec");
    assert!(
        !stop.is_empty() && stop != "infinity" && stop != "0",
        "TimeoutStopSec must be finite: {stop}"
    );
    let before = setting(&unit, "Before");
    for runtime in ["containerd.service", "crio.service", "kubelet.service"] {
        assert!(before.contains(runtime), "not ordered before {runtime}");
    }
    assert_eq!(setting(&unit, "WantedBy"), "multi-user.target");
}

/// Under ProtectSystem=strict only the unit's own directories and
/// ReadWritePaths= are writable: a default path outside them would make the
/// packaged daemon fail with EROFS.
#[test]
fn every_path_the_shipped_config_writes_is_writable_under_the_unit() {
    let unit = unit_settings();
    let config = pinctl::config::load(&repo("etc/pinctl/pinctld.toml")).unwrap();
    assert_eq!(setting(&unit, "ProtectSystem"), "strict");
    let state_dir = Path::new("/var/lib").join(setting(&unit, "StateDirectory"));
    assert_eq!(config.state_file.parent(), Some(state_dir.as_path()));
    let runtime_dir = Path::new("/run").join(setting(&unit, "RuntimeDirectory"));
    assert_eq!(config.socket.parent(), Some(runtime_dir.as_path()));
    let writable = setting(&unit, "ReadWritePaths");
    assert!(
        writable
            .split_whitespace()
            .any(|p| Path::new(p) == config.cgroup_root),
        "ReadWritePaths={writable} does not hold {}",
        config.cgroup_root.display()
    );
    // [power] writes below the CPU directory; its originals live on the
    // runtime directory, which must outlive a stop (a stop leaves the
    // classes in place).
    let cpu_dir = config.sysfs_root.join("devices/system/cpu");
    assert!(
        writable.split_whitespace().any(|p| Path::new(p) == cpu_dir),
        "ReadWritePaths={writable} does not hold {}",
        cpu_dir.display()
    );
    assert_eq!(config.power_originals.parent(), Some(runtime_dir.as_path()));
    assert_eq!(setting(&unit, "RuntimeDirectoryPreserve"), "yes");
    // ProtectControlGroups=yes would make the cgroup filesystem read-only,
    // ProtectKernelTunables=yes /proc/irq (irq_affinity), whatever
    // ReadWritePaths= says.
    assert!(unit.iter().all(|(k, _)| k != "ProtectControlGroups"));
    assert!(unit.iter().all(|(k, _)| k != "ProtectKernelTunables"));
    let irq = config.proc_root.join("irq");
    for key in ["ReadOnlyPaths", "InaccessiblePaths"] {
        for path in unit
            .iter()
            .filter(|(k, _)| k == key)
            .flat_map(|(_, v)| v.split_whitespace())
        {
            let path = Path::new(path.trim_start_matches('-'));
            assert!(
                !irq.starts_with(path) && !path.starts_with(&irq),
                "{key}= {} covers {}",
                path.display(),
                irq.display()
            );
        }
    }
    // The directories are for root and the socket's group; the run
    // socket's directory lets anyone reach a file by name.
    assert_eq!(setting(&unit, "Group"), "pinctl");
    assert_eq!(setting(&unit, "RuntimeDirectoryMode"), "0751");
}

#[test]
fn the_unit_is_hardened_with_a_minimal_capability_set() {
    let unit = unit_settings();
    assert_eq!(setting(&unit, "NoNewPrivileges"), "yes");
    assert_eq!(setting(&unit, "ProtectHome"), "yes");
    // The kernel's tunables read-only as ProtectKernelTunables=yes makes
    // them, path by path: that setting would make /proc/irq read-only too
    // (irq_affinity), and a ReadWritePaths= for it does not undo that.
    let read_only = setting(&unit, "ReadOnlyPaths");
    let read_only: Vec<&str> = read_only.split_whitespace().collect();
    for path in ["/sys", "/proc/sys", "/proc/sysrq-trigger"] {
        assert!(read_only.contains(&path), "{path} is not read-only");
    }
    let hidden = setting(&unit, "InaccessiblePaths");
    for path in ["-/proc/kallsyms", "-/proc/kcore"] {
        assert!(
            hidden.split_whitespace().any(|p| p == path),
            "{path} is not hidden"
        );
    }
    // TCP for metrics_listen alone.
    assert_eq!(
        setting(&unit, "RestrictAddressFamilies"),
        "AF_UNIX AF_INET AF_INET6"
    );
    let caps = setting(&unit, "CapabilityBoundingSet");
    assert_eq!(
        caps.split_whitespace().collect::<Vec<_>>(),
        ["CAP_DAC_OVERRIDE", "CAP_SYS_NICE"]
    );
}

/// The `(source, destination)` pairs of a package's `assets` in Cargo.toml.
fn assets_of(metadata: &toml::Value, package: &str) -> Vec<(String, String)> {
    metadata[package]["assets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| match a {
            toml::Value::Array(v) => (
                v[0].as_str().unwrap().to_string(),
                v[1].as_str().unwrap().to_string(),
            ),
            toml::Value::Table(t) => (
                t["source"].as_str().unwrap().to_string(),
                t["dest"].as_str().unwrap().to_string(),
            ),
            other => panic!("unexpected asset {other}"),
        })
        .collect()
}

fn metadata() -> toml::Value {
    let manifest: toml::Value = toml::from_str(&read(&repo("Cargo.toml"))).unwrap();
    manifest["package"]["metadata"].clone()
}

/// A file added to one package and forgotten in the other would make the .deb
/// and .rpm differ for no reason.
#[test]
fn the_deb_and_the_rpm_ship_the_same_sources() {
    let metadata = metadata();
    let deb = assets_of(&metadata, "deb");
    let rpm = assets_of(&metadata, "generate-rpm");
    // The .rpm takes binaries stripped by packaging/build; the .deb lets
    // cargo-deb strip them.
    let normalize = |source: &str| source.replace("target/assets/bin/", "target/release/");
    let deb_sources: BTreeSet<String> = deb
        .iter()
        .map(|(s, _)| normalize(s))
        // Installed by systemd-units on Debian, as an asset for rpm.
        .chain(["packaging/pinctld.service".to_string()])
        // Debian's licence is the copyright file (license-file), rpm's the text.
        .chain(["LICENSE".to_string()])
        .filter(|s| s != "packaging/debian/lintian-overrides")
        .collect();
    let rpm_sources: BTreeSet<String> = rpm.iter().map(|(s, _)| normalize(s)).collect();
    assert_eq!(deb_sources, rpm_sources);

    // Everything not generated by packaging/build is in the repository.
    for (source, _) in deb.iter().chain(&rpm) {
        if !source.starts_with("target/") {
            assert!(repo(source).is_file(), "{source} is missing");
        }
    }
    let unit = &metadata["deb"]["systemd-units"];
    let unit_file = repo(unit["unit-scripts"].as_str().unwrap())
        .join(format!("{}.service", unit["unit-name"].as_str().unwrap()));
    assert!(unit_file.is_file(), "{}", unit_file.display());
}

#[test]
fn upgrades_keep_the_operators_configuration() {
    let metadata = metadata();
    // cargo-deb makes every file below /etc a conffile.
    assert!(
        assets_of(&metadata, "deb")
            .iter()
            .any(|(s, d)| s == "etc/pinctl/pinctld.toml" && d == "etc/pinctl/")
    );
    let rpm = metadata["generate-rpm"]["assets"].as_array().unwrap();
    let config = rpm
        .iter()
        .find(|a| a["dest"].as_str() == Some(CONFIG_FILE))
        .expect("the .rpm installs the configuration");
    assert_eq!(config["config"].as_str(), Some("noreplace"));
}

/// cargo-deb puts its systemd snippets where `#DEBHELPER#` stands; a script
/// without it (or with it in a comment) loses them or breaks.
#[test]
fn maintainer_scripts_are_valid_shell_with_one_debhelper_token() {
    for name in ["postinst", "postrm"] {
        let path = repo(&format!("packaging/debian/{name}"));
        let script = read(&path);
        assert!(script.starts_with("#!/bin/sh\n"), "{name}");
        assert!(script.contains("\nset -e\n"), "{name}");
        let tokens: Vec<&str> = script
            .lines()
            .filter(|l| l.contains("#DEBHELPER#"))
            .collect();
        assert_eq!(tokens, ["#DEBHELPER#"], "{name}");
        sh_syntax_ok(&path);
    }
    for name in ["pre", "post", "preun", "postun"] {
        sh_syntax_ok(&repo(&format!("packaging/rpm/{name}")));
    }
}

fn sh_syntax_ok(path: &Path) {
    let status = Command::new("sh")
        .arg("-n")
        .arg(path)
        .status()
        .expect("run sh -n");
    assert!(status.success(), "{} is not valid sh", path.display());
}
