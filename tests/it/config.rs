//! The daemon's configuration file: defaults, every key, and the messages that
//! point an operator at the file, line, column and key of a mistake.

use std::path::{Path, PathBuf};
use std::time::Duration;

use pinctl::CpuSet;
use pinctl::cgroup::HierarchyMode;
use pinctl::config::{
    self, Config, ConfigError, DeviceAlignment, Isolation, LogLevel, MAX_DURATION, MAX_FILE_SIZE,
    MAX_GLOB_NESTING, MAX_ITEMS, MAX_STRING, Reserved, Unthrottle, parse, parse_duration,
};
use proptest::prelude::*;

const SHIPPED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/etc/pinctl/pinctld.toml");
const PATH: &str = "/etc/pinctl/pinctld.toml";

fn ok(text: &str) -> Config {
    match parse(text, Path::new(PATH)) {
        Ok(config) => config,
        Err(e) => panic!("{text:?} was rejected: {e}"),
    }
}

fn err(text: &str) -> String {
    match parse(text, Path::new(PATH)) {
        Ok(config) => panic!("{text:?} was accepted: {config:?}"),
        Err(e) => e.to_string(),
    }
}

fn set(s: &str) -> CpuSet {
    s.parse().unwrap()
}

/// The shipped file's opening comment names every key that waits for a
/// restart, and no other (a table as `[run]`): a key added to
/// `Config::RESTART_KEYS` must be said there too.
#[test]
fn shipped_file_names_the_keys_that_wait_for_a_restart() {
    let text = std::fs::read_to_string(SHIPPED).unwrap();
    let head: Vec<&str> = text
        .lines()
        .take_while(|l| l.starts_with('#'))
        .map(|l| l.trim_start_matches('#').trim())
        .collect();
    let head = head.join(" ");
    let list = head
        .split("says so in the journal:")
        .nth(1)
        .and_then(|rest| rest.split('.').next())
        .expect("the opening comment lists the restart keys");
    let named: Vec<&str> = list
        .split(',')
        .map(|k| k.trim().trim_start_matches('[').trim_end_matches(']'))
        .collect();
    assert_eq!(named, Config::RESTART_KEYS);
}

#[test]
fn shipped_file_gives_the_defaults() {
    let config = config::load(Path::new(SHIPPED)).unwrap();
    assert_eq!(config, Config::default());
}

#[test]
fn shipped_file_sets_every_key_and_documents_the_rule_example() {
    let text = std::fs::read_to_string(SHIPPED).unwrap();
    let keys = [
        "cgroup_root",
        "sysfs_root",
        "proc_root",
        "state_file",
        "socket",
        "reserved_cpus",
        "strict_reservation",
        "reconcile_interval",
        "read_timeout",
        "watchdog_interval",
        "dstate_threshold",
        "frozen_threshold",
        "thaw_frozen",
        "repair",
        "repair_cooldown",
        "required_paths",
        "shared_cgroups",
        "managed",
        "hierarchy",
        "kubelet_rule",
        "kubelet_cpu_manager_state",
        "full_pcpus_only",
        "distribute_across_numa",
        "spread_cores",
        "align_memory",
        "bundle_dirs",
        "power_originals",
        "housekeeping_originals",
        "log_level",
    ];
    // Each key is set (not commented out), once, in the documented order, and
    // has a comment right above it; the tables come after them, each of
    // their keys set once.
    let (top, tables) = text.split_once("\n[run]\n").expect("a [run] table");
    let table = |name: &str| {
        let body = match name {
            "run" => tables,
            _ => {
                tables
                    .split_once(&format!("\n[{name}]\n"))
                    .unwrap_or_else(|| panic!("a [{name}] table"))
                    .1
            }
        };
        body.split("\n[").next().unwrap_or("")
    };
    let run = table("run");
    for key in [
        "enabled",
        "socket",
        "users",
        "groups",
        "max_cpus",
        "max_cpus_per_user",
        "slice",
    ] {
        let n = run
            .lines()
            .filter(|l| l.starts_with(&format!("{key} = ")))
            .count();
        assert_eq!(n, 1, "run.{key} should be set exactly once");
    }
    let nri = table("nri");
    for key in [
        "enabled",
        "socket",
        "plugin_name",
        "plugin_index",
        "required",
    ] {
        let n = nri
            .lines()
            .filter(|l| l.starts_with(&format!("{key} = ")))
            .count();
        assert_eq!(n, 1, "nri.{key} should be set exactly once");
    }
    let lines: Vec<&str> = top.lines().collect();
    let mut last = 0;
    for key in keys {
        let at: Vec<usize> = (0..lines.len())
            .filter(|&i| lines[i].starts_with(&format!("{key} = ")))
            .collect();
        assert_eq!(at.len(), 1, "{key} should be set exactly once");
        assert!(at[0] > last, "{key} is out of order");
        assert!(lines[at[0] - 1].starts_with('#'), "{key} has no comment");
        last = at[0];
    }
    assert!(text.contains("# [[rule]]\n# match = \"hpc.slice/job-*.scope\"\n# cpus = 4\n"));
    // Uncommenting the example gives a valid rule.
    let uncommented = text.replace("# [[rule]]\n# match", "[[rule]]\nmatch");
    let uncommented = uncommented.replace("# cpus = 4", "cpus = 4");
    let config = ok(&uncommented);
    assert_eq!(config.rules.len(), 1);
    assert_eq!(config.rules[0].pattern, "hpc.slice/job-*.scope");
    assert_eq!(config.rules[0].cpus, 4);
}

#[test]
fn shipped_power_example_uncommented_is_valid_and_on() {
    let text = std::fs::read_to_string(SHIPPED).unwrap();
    let start = text.find("# [[class]]\n").expect("a [[class]] example");
    let end = start + text[start..].find("\n\n#").expect("the example ends");
    let example: String = text[start..end]
        .lines()
        .map(|l| l.strip_prefix("# ").unwrap_or(l.trim_start_matches('#')))
        .collect::<Vec<_>>()
        .join("\n");
    let config = ok(&example);
    assert!(config.power.enabled);
    assert_eq!(config.classes.len(), 2);
    assert_eq!(config.power.exclusive.as_deref(), Some("latency"));
}

#[test]
fn empty_or_comment_only_file_gives_the_defaults() {
    assert_eq!(ok(""), Config::default());
    assert_eq!(ok("\n\n# nothing here\n   \n"), Config::default());
}

#[test]
fn defaults_are_the_documented_ones() {
    let d = Config::default();
    assert_eq!(d.cgroup_root, Path::new("/sys/fs/cgroup"));
    assert_eq!(d.sysfs_root, Path::new("/sys"));
    assert_eq!(d.proc_root, Path::new("/proc"));
    assert_eq!(d.state_file, Path::new("/var/lib/pinctl/state.json"));
    assert_eq!(d.socket, Path::new("/run/pinctl/pinctl.sock"));
    assert_eq!(d.reserved_cpus, Reserved::List(set("0")));
    assert_eq!(d.reconcile_interval, Duration::from_secs(60));
    assert_eq!(d.read_timeout, Duration::from_secs(5));
    assert_eq!(d.dstate_threshold, Duration::from_secs(60));
    assert_eq!(d.shared_cgroups, ["system.slice", "user.slice"]);
    assert_eq!(d.managed, ["kubepods.slice", "kubepods"]);
    assert_eq!(d.hierarchy, HierarchyMode::Auto);
    assert!(d.kubelet_rule);
    assert!(!d.full_pcpus_only && !d.distribute_across_numa && !d.spread_cores);
    assert!(!d.align_memory);
    assert_eq!(d.bundle_dirs.len(), 8);
    assert_eq!(
        d.bundle_dirs[0],
        Path::new("/run/containerd/io.containerd.runtime.v2.task/k8s.io")
    );
    // podman keeps bundles under <storage>/<driver>-containers.
    for driver in ["overlay", "vfs", "btrfs", "zfs"] {
        let dir = format!("/var/lib/containers/storage/{driver}-containers");
        assert!(d.bundle_dirs.iter().any(|b| b == Path::new(&dir)), "{dir}");
    }
    assert_eq!(d.log_level, LogLevel::Info);
    assert!(d.rules.is_empty());
}

#[test]
fn every_key_is_parsed() {
    let config = ok(r#"
cgroup_root = "/tmp/cg"
sysfs_root = "/tmp/sys"
proc_root = "/tmp/proc"
state_file = "/tmp/state.json"
socket = "/tmp/pinctl.sock"
metrics_listen = "127.0.0.1:9561"
reserved_cpus = "0-1,64"
strict_reservation = true
reconcile_interval = "500ms"
read_timeout = "2m"
dstate_threshold = "1h"
frozen_threshold = "2h"
thaw_frozen = true
watchdog_interval = "3s"
repair = false
repair_cooldown = "5m"
required_paths = ["kubepods.slice/extra.slice", "machine.slice"]
shared_cgroups = ["system.slice", "machine.slice/noisy"]
managed = ["kubepods.slice"]
hierarchy = "v1"
kubelet_rule = false
kubelet_cpu_manager_state = ""
full_pcpus_only = true
distribute_across_numa = true
spread_cores = false
align_memory = true
unthrottle_exclusive = "all"
irq_affinity = true
housekeeping = true
isolation = "partition"
device_alignment = "require"
cdi_spec_dirs = ["/opt/cdi"]
bundle_dirs = ["/run/mine"]
systemd_bus = "/run/bus"
log_level = "debug"
power_originals = "/tmp/power.json"
housekeeping_originals = "/tmp/housekeeping.json"

[[rule]]
match = "hpc.slice/job-*.scope"
cpus = 4
numa = "0-1,3"
near = ["ib0", "3B:00.0", "/dev/nvidia0"]
device_alignment = "none"

[run]
enabled = true
groups = ["hpc"]

[slurm]
housekeeping = true

[nri]
enabled = true
socket = "/run/nri/nri.sock"
plugin_name = "cpus"
plugin_index = "20"
required = true
"#);
    let want = Config {
        cgroup_root: "/tmp/cg".into(),
        sysfs_root: "/tmp/sys".into(),
        proc_root: "/tmp/proc".into(),
        state_file: "/tmp/state.json".into(),
        socket: "/tmp/pinctl.sock".into(),
        metrics_listen: Some("127.0.0.1:9561".parse().unwrap()),
        reserved_cpus: Reserved::List(set("0-1,64")),
        strict_reservation: true,
        reconcile_interval: Duration::from_millis(500),
        read_timeout: Duration::from_secs(120),
        dstate_threshold: Duration::from_secs(3600),
        frozen_threshold: Duration::from_secs(7200),
        thaw_frozen: true,
        watchdog_interval: Duration::from_secs(3),
        repair: false,
        repair_cooldown: Duration::from_secs(300),
        required_paths: vec!["kubepods.slice/extra.slice".into(), "machine.slice".into()],
        shared_cgroups: vec!["system.slice".into(), "machine.slice/noisy".into()],
        managed: vec!["kubepods.slice".into()],
        hierarchy: HierarchyMode::V1,
        kubelet_rule: false,
        kubelet_cpu_manager_state: None,
        full_pcpus_only: true,
        distribute_across_numa: true,
        spread_cores: false,
        align_memory: true,
        unthrottle_exclusive: Unthrottle::All,
        irq_affinity: true,
        housekeeping: true,
        isolation: Isolation::Partition,
        device_alignment: DeviceAlignment::Require,
        cdi_spec_dirs: vec![PathBuf::from("/opt/cdi")],
        bundle_dirs: vec![PathBuf::from("/run/mine")],
        systemd_bus: Some("/run/bus".into()),
        log_level: LogLevel::Debug,
        rules: config.rules.clone(),
        run: pinctl::config::Run {
            enabled: true,
            groups: vec!["hpc".into()],
            ..pinctl::config::Run::default()
        },
        slurm: pinctl::config::Slurm { housekeeping: true },
        nri: pinctl::config::Nri {
            enabled: true,
            socket: "/run/nri/nri.sock".into(),
            plugin_name: "cpus".into(),
            plugin_index: "20".into(),
            required: true,
        },
        power_originals: "/tmp/power.json".into(),
        housekeeping_originals: "/tmp/housekeeping.json".into(),
        classes: Vec::new(),
        power: pinctl::config::Power::default(),
    };
    assert_eq!(config, want);
    let rule = &config.rules[0];
    assert_eq!(rule.pattern, "hpc.slice/job-*.scope");
    assert_eq!(rule.cpus, 4);
    assert_eq!(rule.numa, [0, 1, 3]);
    assert_eq!(rule.line, 40);
    let near: Vec<String> = rule.near.iter().map(|d| d.to_string()).collect();
    assert_eq!(near, ["ib0", "0000:3b:00.0", "/dev/nvidia0"]);
    assert_eq!(rule.device_alignment, Some(DeviceAlignment::None));

    let v2 = ok("hierarchy = \"v2\"\nspread_cores = true\nlog_level = \"trace\"\n");
    assert_eq!(v2.hierarchy, HierarchyMode::V2);
    assert!(v2.spread_cores);
    assert_eq!(v2.log_level, LogLevel::Trace);
    for level in ["error", "warn", "info", "debug", "trace"] {
        let config = ok(&format!("log_level = {level:?}"));
        assert_eq!(config.log_level.as_str(), level);
    }
}

#[test]
fn the_systemd_bus_is_a_socket_path_or_nothing() {
    assert_eq!(
        Config::default().systemd_bus.as_deref(),
        Some(Path::new("/run/dbus/system_bus_socket"))
    );
    assert_eq!(ok("systemd_bus = \"\"").systemd_bus, None);
    assert_eq!(
        err("systemd_bus = \"run/bus\""),
        "/etc/pinctl/pinctld.toml:1:15: systemd_bus: invalid path \"run/bus\": must be absolute"
    );
    let long = format!("systemd_bus = \"/{}\"", "b".repeat(107));
    assert!(
        err(&long).contains("longer than the 107 a Unix socket address holds"),
        "{}",
        err(&long)
    );
}

#[test]
fn empty_lists_are_allowed() {
    let config = ok("shared_cgroups = []\nmanaged = []\nbundle_dirs = []\n");
    assert!(config.shared_cgroups.is_empty());
    assert!(config.managed.is_empty());
    assert!(config.bundle_dirs.is_empty());
    assert!(config.watch_roots().is_empty());
}

#[test]
fn reserved_cpus_as_list_and_as_count() {
    assert_eq!(
        ok("reserved_cpus = \"0,64\"").reserved_cpus,
        Reserved::List(set("0,64"))
    );
    assert_eq!(ok("reserved_cpus = 2").reserved_cpus, Reserved::Count(2));
    assert_eq!(
        ok("reserved_cpus = 16384").reserved_cpus,
        Reserved::Count(16384)
    );
}

#[test]
fn invalid_cpu_list_names_file_line_column_and_key() {
    let text = "# pinctld\n\n\n\n\n\nreserved_cpus = \"0-\"\n";
    assert_eq!(
        err(text),
        "/etc/pinctl/pinctld.toml:7:17: reserved_cpus: invalid CPU list \"0-\": \"\" is not a CPU number"
    );
}

#[test]
fn a_bad_metrics_address_names_file_line_column_and_key() {
    assert_eq!(
        err("\nmetrics_listen = \"localhost:9561\"\n"),
        "/etc/pinctl/pinctld.toml:2:18: metrics_listen: invalid address \"localhost:9561\": \
         expected IP:PORT, such as 127.0.0.1:9561 or [::1]:9561"
    );
}

#[test]
fn reserved_cpus_rejections() {
    let cases = [
        (
            "reserved_cpus = \"\"",
            "1:17: reserved_cpus: invalid CPU list \"\": reserve at least one CPU, so the shared pool is never empty",
        ),
        (
            "reserved_cpus = 0",
            "1:17: reserved_cpus: invalid CPU count 0: must be from 1 to 16384, so the shared pool is never empty",
        ),
        (
            "reserved_cpus = -2",
            "1:17: reserved_cpus: invalid CPU count -2: must be from 1 to 16384, so the shared pool is never empty",
        ),
        (
            "reserved_cpus = 16385",
            "1:17: reserved_cpus: invalid CPU count 16385: must be from 1 to 16384, so the shared pool is never empty",
        ),
        (
            "reserved_cpus = \"0-99999\"",
            "1:17: reserved_cpus: invalid CPU list \"0-99999\": CPU 99999 is above the supported maximum 16383",
        ),
        (
            "reserved_cpus = true",
            "1:17: reserved_cpus: expected a CPU list such as \"0-1\" or a CPU count such as 2, found boolean `true`",
        ),
        (
            "reserved_cpus = 1.5",
            "1:17: reserved_cpus: expected a CPU list such as \"0-1\" or a CPU count such as 2, found floating point `1.5`",
        ),
    ];
    for (text, want) in cases {
        assert_eq!(err(text), format!("{PATH}:{want}"), "{text}");
    }
}

#[test]
fn unknown_key_at_top_level() {
    let text = "\n\n\n\n\n\n\n\n\n\n\nreconcile_intervall = \"10s\"\n";
    assert_eq!(
        err(text),
        "/etc/pinctl/pinctld.toml:12:1: unknown key `reconcile_intervall`"
    );
    let e = parse(text, Path::new(PATH)).unwrap_err();
    assert_eq!(
        e,
        ConfigError::UnknownKey {
            path: PATH.into(),
            line: 12,
            column: 1,
            key: "reconcile_intervall".into(),
            table: None,
        }
    );
}

#[test]
fn unknown_key_inside_a_rule() {
    let text = "log_level = \"info\"\n\n[[rule]]\nmatch = \"a/*\"\ncpus = 2\n  cpu = 4\n";
    assert_eq!(
        err(text),
        "/etc/pinctl/pinctld.toml:6:3: unknown key `cpu` in [[rule]]"
    );
}

#[test]
fn unknown_table_is_an_unknown_key() {
    assert_eq!(
        err("[daemon]\nsocket = \"/run/x.sock\"\n"),
        "/etc/pinctl/pinctld.toml:1:2: unknown key `daemon`"
    );
}

#[test]
fn wrong_types_name_the_key_and_both_types() {
    let cases = [
        (
            "[[rule]]\nmatch = \"a\"\ncpus = \"four\"\n",
            "3:8: rule.cpus: expected an integer, found string \"four\"",
        ),
        (
            "[[rule]]\nmatch = \"a\"\ncpus = 2.0\n",
            "3:8: rule.cpus: expected an integer, found floating point `2.0`",
        ),
        (
            "[[rule]]\nmatch = 7\ncpus = 2\n",
            "2:9: rule.match: expected a string, found integer `7`",
        ),
        (
            "kubelet_rule = \"yes\"\n",
            "1:16: kubelet_rule: expected a boolean, found string \"yes\"",
        ),
        (
            "managed = \"kubepods.slice\"\n",
            "1:11: managed: expected an array, found string \"kubepods.slice\"",
        ),
        (
            "managed = [\"kubepods.slice\", 3]\n",
            "1:30: managed: expected a string, found integer `3`",
        ),
        (
            "reconcile_interval = 10\n",
            "1:22: reconcile_interval: expected a string, found integer `10`",
        ),
        (
            "cgroup_root = [\"/sys/fs/cgroup\"]\n",
            "1:15: cgroup_root: expected a string, found an array",
        ),
        (
            "[rule]\nmatch = \"a\"\ncpus = 1\n",
            "1:1: rule: expected an array of tables: write [[rule]], not [rule]",
        ),
        (
            "rule = 5\n",
            "1:8: rule: expected an array, found integer `5`",
        ),
        (
            "[[rule]]\nmatch = \"a\"\ncpus = 99999999999999999999999\n",
            "3:8: rule.cpus: invalid CPU count 99999999999999999999999: must be from 1 to 16384",
        ),
    ];
    for (text, want) in cases {
        assert_eq!(err(text), format!("{PATH}:{want}"), "{text}");
    }
}

#[test]
fn missing_required_rule_keys() {
    let text = "\n[[rule]]\nmatch = \"a/*\"\ncpus = 1\n\n[[rule]]\ncpus = 3\n";
    assert_eq!(
        err(text),
        "/etc/pinctl/pinctld.toml:6:1: rule: missing required key `match`"
    );
    let text = "rule = [{ match = \"a\", cpus = 1 }, { match = \"b\" }]\n";
    assert_eq!(
        err(text),
        "/etc/pinctl/pinctld.toml:1:36: rule: missing required key `cpus`"
    );
}

#[test]
fn syntax_errors_say_where() {
    assert_eq!(
        err("log_level = \"info\"\nsocket =\n"),
        "/etc/pinctl/pinctld.toml:2:9: invalid TOML: string values must be quoted, expected literal string"
    );
    assert_eq!(
        err("log_level = \"info\"\n\nlog_level = \"debug\"\n"),
        "/etc/pinctl/pinctld.toml:3:1: invalid TOML: duplicate key `log_level`"
    );
}

#[test]
fn relative_paths_are_rejected_for_absolute_keys() {
    for key in [
        "cgroup_root",
        "sysfs_root",
        "proc_root",
        "state_file",
        "socket",
    ] {
        let text = format!("\n{key} = \"run/x\"\n");
        let column = key.len() + 4;
        assert_eq!(
            err(&text),
            format!("{PATH}:2:{column}: {key}: invalid path \"run/x\": must be absolute")
        );
        assert_eq!(
            err(&format!("{key} = \"\"")),
            format!("{PATH}:1:{column}: {key}: invalid path \"\": empty")
        );
    }
    assert_eq!(
        err("bundle_dirs = [\n  \"/run/a\",\n  \"var/lib/b\",\n]\n"),
        format!("{PATH}:3:3: bundle_dirs: invalid path \"var/lib/b\": must be absolute")
    );
}

#[test]
fn socket_path_must_fit_a_unix_socket_address() {
    let long = format!("/run/{}", "s".repeat(103));
    assert_eq!(long.len(), 108);
    assert_eq!(
        err(&format!("socket = {long:?}")),
        format!(
            "{PATH}:1:10: socket: invalid path {long:?}: 108 bytes, longer than the 107 a Unix socket address holds"
        )
    );
    ok(&format!("socket = {:?}", &long[..107]));
}

#[test]
fn cgroup_path_rejections() {
    let cases = [
        ("\"\"", "empty"),
        (
            "\"/kubepods.slice\"",
            "must be relative to cgroup_root, not absolute",
        ),
        ("\"../etc\"", "`..` components are not allowed"),
        ("\"kubepods/../x\"", "`..` components are not allowed"),
        ("\"./kubepods\"", "`.` components are not allowed"),
        (
            "\"kubepods//x\"",
            "empty component (a doubled or trailing `/`)",
        ),
        (
            "\"kubepods/\"",
            "empty component (a doubled or trailing `/`)",
        ),
    ];
    for key in ["shared_cgroups", "managed"] {
        for (value, reason) in cases {
            let text = format!("{key} = [\"ok.slice\", {value}]\n");
            let column = key.len() + 17;
            assert_eq!(
                err(&text),
                format!("{PATH}:1:{column}: {key}: invalid cgroup path {value}: {reason}"),
                "{text}"
            );
        }
    }
}

#[test]
fn managed_subtree_inside_a_shared_cgroup_is_rejected() {
    // A child's cpuset must lie within its parent's, so a cgroup confined to
    // the shared pool cannot hold one with exclusive CPUs.
    assert_eq!(
        err("managed = [\"kubepods.slice\", \"system.slice/k8s\"]\n"),
        format!(
            "{PATH}:1:30: managed: \"system.slice/k8s\" lies inside shared cgroup \"system.slice\"; a cgroup confined to the shared pool cannot hold exclusive CPUs"
        )
    );
    assert_eq!(
        err("managed = [\"pods\"]\nshared_cgroups = [\"pods\"]\n"),
        format!(
            "{PATH}:2:19: shared_cgroups: \"pods\" holds managed subtree \"pods\"; a cgroup confined to the shared pool cannot hold exclusive CPUs"
        )
    );
    assert_eq!(
        err("shared_cgroups = [\"kubepods.slice\"]\n"),
        format!(
            "{PATH}:1:19: shared_cgroups: \"kubepods.slice\" holds managed subtree \"kubepods.slice\"; a cgroup confined to the shared pool cannot hold exclusive CPUs"
        )
    );
    // A sibling with a common name prefix is not inside.
    ok("managed = [\"system.slice2\"]\n");
    assert_eq!(
        err("[[rule]]\nmatch = \"user.slice/user-1000.slice/*.scope\"\ncpus = 2\n"),
        format!(
            "{PATH}:2:9: rule.match: \"user.slice/user-1000.slice/*.scope\" lies inside shared cgroup \"user.slice\"; a cgroup confined to the shared pool cannot hold exclusive CPUs"
        )
    );
}

#[test]
fn full_pcpus_only_and_spread_cores_exclude_each_other() {
    assert_eq!(
        err("full_pcpus_only = true\nalign_memory = true\nspread_cores = true\n"),
        format!(
            "{PATH}:3:16: spread_cores: cannot be true together with full_pcpus_only (line 1): whole physical cores only and one thread per core exclude each other"
        )
    );
    assert_eq!(
        err("spread_cores = true\nfull_pcpus_only = true\n"),
        format!(
            "{PATH}:2:19: full_pcpus_only: cannot be true together with spread_cores (line 1): whole physical cores only and one thread per core exclude each other"
        )
    );
    ok("full_pcpus_only = true\nspread_cores = false\n");
    ok("full_pcpus_only = false\nspread_cores = true\n");
}

#[test]
fn hierarchy_and_log_level_rejections() {
    assert_eq!(
        err("hierarchy = \"V2\""),
        format!("{PATH}:1:13: hierarchy: invalid hierarchy \"V2\": expected one of auto, v1, v2")
    );
    assert_eq!(
        err("log_level = \"verbose\""),
        format!(
            "{PATH}:1:13: log_level: invalid log level \"verbose\": expected one of error, warn, info, debug, trace"
        )
    );
    assert_eq!(
        err("isolation = \"isolated\""),
        format!(
            "{PATH}:1:13: isolation: invalid value \"isolated\": expected one of none, partition"
        )
    );
}

#[test]
fn the_first_mistake_in_the_file_is_reported() {
    assert_eq!(
        err("cgroup_root = \"cg\"\nlog_level = \"loud\"\n"),
        format!("{PATH}:1:15: cgroup_root: invalid path \"cg\": must be absolute")
    );
    assert_eq!(
        err("log_level = \"loud\"\ncgroup_root = \"cg\"\n"),
        format!(
            "{PATH}:1:13: log_level: invalid log level \"loud\": expected one of error, warn, info, debug, trace"
        )
    );
    // A value wrong on its own comes before a combination of valid values.
    assert_eq!(
        err("full_pcpus_only = true\nspread_cores = true\nhierarchy = \"v3\"\n"),
        format!("{PATH}:3:13: hierarchy: invalid hierarchy \"v3\": expected one of auto, v1, v2")
    );
}

#[test]
fn duration_edge_cases() {
    let accepted = [
        ("1ms", Duration::from_millis(1)),
        ("500ms", Duration::from_millis(500)),
        ("10s", Duration::from_secs(10)),
        ("2m", Duration::from_secs(120)),
        ("24h", MAX_DURATION),
        ("1440m", MAX_DURATION),
        ("86400s", MAX_DURATION),
        ("86400000ms", MAX_DURATION),
        ("010s", Duration::from_secs(10)),
    ];
    for (text, want) in accepted {
        assert_eq!(parse_duration(text), Ok(want), "{text}");
    }
    let rejected = [
        ("", "empty; write an integer and a unit, e.g. \"10s\""),
        ("0s", "must be greater than zero"),
        ("0ms", "must be greater than zero"),
        ("000h", "must be greater than zero"),
        ("25h", "longer than the maximum of 24h"),
        ("86400001ms", "longer than the maximum of 24h"),
        ("1441m", "longer than the maximum of 24h"),
        ("18446744073709551616s", "longer than the maximum of 24h"),
        ("5124095576030432h", "longer than the maximum of 24h"),
        ("10", "missing unit: use ms, s, m or h"),
        ("s", "must start with an integer, e.g. \"10s\""),
        ("-1s", "must start with an integer, e.g. \"10s\""),
        ("+1s", "must start with an integer, e.g. \"10s\""),
        (".5s", "must start with an integer, e.g. \"10s\""),
        (
            "1.5s",
            "fractions are not supported; use a smaller unit, e.g. \"1500ms\"",
        ),
        ("10 s", "spaces are not allowed"),
        (" 10s", "spaces are not allowed"),
        ("10s\n", "spaces are not allowed"),
        ("10sec", "unknown unit \"sec\": use ms, s, m or h"),
        ("10S", "unknown unit \"S\": use ms, s, m or h"),
        ("1d", "unknown unit \"d\": use ms, s, m or h"),
        ("10us", "unknown unit \"us\": use ms, s, m or h"),
        ("1m30s", "unknown unit \"m30s\": use ms, s, m or h"),
        ("1e3ms", "unknown unit \"e3ms\": use ms, s, m or h"),
        ("١s", "must start with an integer, e.g. \"10s\""),
    ];
    for (text, reason) in rejected {
        let e = parse_duration(text).unwrap_err();
        assert_eq!(e.reason, reason, "{text:?}");
        assert_eq!(
            e.to_string(),
            format!("invalid duration {text:?}: {reason}")
        );
    }
}

#[test]
fn duration_keys_report_line_column_and_key() {
    for key in [
        "reconcile_interval",
        "read_timeout",
        "watchdog_interval",
        "dstate_threshold",
        "frozen_threshold",
        "repair_cooldown",
    ] {
        let text = format!("# timing\n{key} = \"0s\"\n");
        let column = key.len() + 4;
        assert_eq!(
            err(&text),
            format!("{PATH}:2:{column}: {key}: invalid duration \"0s\": must be greater than zero")
        );
    }
    assert_eq!(
        err("read_timeout = \"48h\""),
        format!(
            "{PATH}:1:16: read_timeout: invalid duration \"48h\": longer than the maximum of 24h"
        )
    );
}

#[test]
fn rule_rejections() {
    let rule = |body: &str| format!("# rules\n[[rule]]\n{body}\n");
    let cases = [
        (
            "match = \"a/*\"\ncpus = 0",
            "4:8: rule.cpus: invalid CPU count 0: must be from 1 to 16384",
        ),
        (
            "match = \"a/*\"\ncpus = -1",
            "4:8: rule.cpus: invalid CPU count -1: must be from 1 to 16384",
        ),
        (
            "match = \"a/*\"\ncpus = 16385",
            "4:8: rule.cpus: invalid CPU count 16385: must be from 1 to 16384",
        ),
        (
            "match = \"/hpc.slice/*\"\ncpus = 1",
            "3:9: rule.match: invalid glob \"/hpc.slice/*\": must be relative to cgroup_root, not absolute",
        ),
        (
            "match = \"\"\ncpus = 1",
            "3:9: rule.match: invalid glob \"\": empty",
        ),
        (
            "match = \"hpc.slice/../x\"\ncpus = 1",
            "3:9: rule.match: invalid glob \"hpc.slice/../x\": `..` components are not allowed",
        ),
        (
            "match = \"hpc.slice/job-[0-9.scope\"\ncpus = 1",
            "3:9: rule.match: invalid glob \"hpc.slice/job-[0-9.scope\": unclosed character class; missing ']'",
        ),
        (
            "match = \"hpc.slice/{a,b\"\ncpus = 1",
            "3:9: rule.match: invalid glob \"hpc.slice/{a,b\": unclosed alternate group; missing '}' (maybe escape '{' with '[{]'?)",
        ),
        (
            "match = \"a/*\"\ncpus = 1\nnuma = \"0-\"",
            "5:8: rule.numa: invalid NUMA node list \"0-\": \"\" is not a NUMA node number",
        ),
        (
            "match = \"a/*\"\ncpus = 1\nnuma = \"\"",
            "5:8: rule.numa: invalid NUMA node list \"\": empty; leave `numa` out for no preference",
        ),
        (
            "match = \"a/*\"\ncpus = 1\nnuma = 0",
            "5:8: rule.numa: expected a string, found integer `0`",
        ),
    ];
    for (body, want) in cases {
        let text = rule(body);
        assert_eq!(err(&text), format!("{PATH}:{want}"), "{text}");
    }
}

#[test]
fn rules_keep_file_order_and_the_first_match_wins() {
    let config = ok(r#"
[[rule]]
match = "hpc.slice/job-big-*.scope"
cpus = 16
numa = "1"

[[rule]]
match = "hpc.slice/job-*.scope"
cpus = 4

[[rule]]
match = "batch.slice/**"
cpus = 2
"#);
    let summary: Vec<(&str, usize, usize)> = config
        .rules
        .iter()
        .map(|r| (r.pattern.as_str(), r.cpus, r.line))
        .collect();
    assert_eq!(
        summary,
        [
            ("hpc.slice/job-big-*.scope", 16, 2),
            ("hpc.slice/job-*.scope", 4, 7),
            ("batch.slice/**", 2, 11),
        ]
    );
    let cpus = |path: &str| config.rule_for(path).map(|r| r.cpus);
    assert_eq!(cpus("hpc.slice/job-big-1.scope"), Some(16));
    assert_eq!(cpus("hpc.slice/job-1.scope"), Some(4));
    assert_eq!(cpus("batch.slice/a/b/c"), Some(2));
    assert_eq!(cpus("hpc.slice"), None);
    assert_eq!(cpus("other.slice/job-1.scope"), None);
    assert_eq!(
        config.rule_for("hpc.slice/job-big-1.scope").unwrap().numa,
        [1]
    );
}

#[test]
fn glob_star_does_not_cross_a_slash() {
    let config = ok(
        "[[rule]]\nmatch = \"hpc.slice/*\"\ncpus = 1\n\n[[rule]]\nmatch = \"job-?\"\ncpus = 1\n",
    );
    let rule = &config.rules[0];
    assert!(rule.matches("hpc.slice/job-1.scope"));
    assert!(!rule.matches("hpc.slice/job-1.scope/child"));
    assert!(!rule.matches("hpc.slice"));
    assert!(!rule.matches("other/hpc.slice/job-1.scope"));
    let rule = &config.rules[1];
    assert!(rule.matches("job-1"));
    assert!(!rule.matches("job/"));
    assert!(!rule.matches("a/job-1"));
}

#[test]
fn watch_roots_are_managed_then_literal_rule_prefixes() {
    let config = ok(r#"
managed = ["kubepods.slice", "kubepods"]

[[rule]]
match = "hpc.slice/job-*.scope"
cpus = 4

[[rule]]
match = "hpc.slice/big-*.scope"
cpus = 8

[[rule]]
match = "batch.slice/team-a.slice/*/worker"
cpus = 2

[[rule]]
match = "machine.slice/vm-1.scope"
cpus = 2

[[rule]]
match = "kubepods/special-?"
cpus = 2

[[rule]]
match = "*.scope"
cpus = 1

[[rule]]
match = "{a,b}.slice/x"
cpus = 1
"#);
    assert_eq!(
        config.watch_roots(),
        [
            "kubepods.slice",
            "kubepods",
            "hpc.slice",
            "batch.slice/team-a.slice",
            "machine.slice",
            "",
        ]
    );
    assert_eq!(
        Config::default().watch_roots(),
        ["kubepods.slice", "kubepods"]
    );
}

#[test]
fn alloc_options_carry_the_allocator_keys() {
    let config = ok("full_pcpus_only = true\ndistribute_across_numa = true\n");
    let opts = config.alloc_options(set("0-1"));
    assert_eq!(opts.reserved, set("0-1"));
    assert!(opts.full_pcpus_only && opts.distribute_across_numa && !opts.spread_cores);
    assert!(opts.numa_preference.is_empty());
    assert!(!opts.align_by_socket);
    let opts = ok("spread_cores = true").alloc_options(CpuSet::new());
    assert!(opts.spread_cores && !opts.full_pcpus_only);
}

#[test]
fn reserved_resolves_on_a_topology() {
    use pinctl::topology::synthetic::Shape;
    // 1 socket, 4 cores, 2 threads: CPU n and n+4 are siblings.
    let topo = Shape {
        sockets: 1,
        numa_per_socket: 1,
        l3_per_numa: 1,
        cores_per_l3: 4,
        threads_per_core: 2,
    }
    .build();
    let count = ok("reserved_cpus = 2").reserved_cpus;
    assert_eq!(count.resolve(&topo), set("0,4"));
    assert_eq!(Reserved::Count(3).resolve(&topo), set("0-1,4"));
    let list = ok("reserved_cpus = \"3,5\"").reserved_cpus;
    assert_eq!(list.resolve(&topo), set("3,5"));
    assert_eq!(list.to_string(), "\"3,5\"");
    assert_eq!(count.to_string(), "2");
}

#[test]
fn missing_file_names_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("absent.toml");
    let e = config::load(&path).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "cannot read config file {}: No such file or directory",
            path.display()
        )
    );
    assert!(matches!(
        e,
        ConfigError::Read {
            kind: std::io::ErrorKind::NotFound,
            ..
        }
    ));
}

#[test]
fn load_reads_the_file_and_names_it_in_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pinctld.toml");
    std::fs::write(&path, "reserved_cpus = 2\n").unwrap();
    assert_eq!(
        config::load(&path).unwrap().reserved_cpus,
        Reserved::Count(2)
    );
    std::fs::write(&path, "reserved_cpus = \"x\"\n").unwrap();
    assert_eq!(
        config::load(&path).unwrap_err().to_string(),
        format!(
            "{}:1:17: reserved_cpus: invalid CPU list \"x\": \"x\" is not a CPU number",
            path.display()
        )
    );
}

#[test]
fn columns_count_characters_and_lines_survive_crlf() {
    let text = "# réservé ünicode\r\nlog_level = \"info\"\r\n# ü\r\nhierarchy = \"v9\"\r\n";
    assert_eq!(
        err(text),
        format!("{PATH}:4:13: hierarchy: invalid hierarchy \"v9\": expected one of auto, v1, v2")
    );
    let text = "shared_cgroups = [\"süß.slice\", \"/x\"]\n";
    assert_eq!(
        err(text),
        format!(
            "{PATH}:1:32: shared_cgroups: invalid cgroup path \"/x\": must be relative to cgroup_root, not absolute"
        )
    );
}

/// TOML-ish lines built from the real keys and plausible and implausible
/// values, to reach validation as well as the parser.
fn toml_line() -> impl Strategy<Value = String> {
    let key = prop::sample::select(vec![
        "cgroup_root",
        "socket",
        "reserved_cpus",
        "reconcile_interval",
        "shared_cgroups",
        "managed",
        "hierarchy",
        "full_pcpus_only",
        "spread_cores",
        "bundle_dirs",
        "log_level",
        "match",
        "cpus",
        "numa",
        "class",
        "min_freq",
        "max_freq",
        "resume_latency_us",
        "exclusive",
        "bogus",
    ]);
    let value = prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<bool>().prop_map(|b| b.to_string()),
        "[a-z0-9/.*?\\[\\]{},-]{0,12}".prop_map(|s| format!("{s:?}")),
        "\\PC{0,8}".prop_map(|s| format!("{s:?}")),
        Just("[\"system.slice\", \"/abs\"]".to_string()),
        Just("\"0-\"".to_string()),
        Just("\"10s\"".to_string()),
    ];
    prop_oneof![
        (key, value).prop_map(|(k, v)| format!("{k} = {v}")),
        Just("[[rule]]".to_string()),
        Just("[rule]".to_string()),
        Just("[[class]]\nname = \"a\"".to_string()),
        Just("[power]".to_string()),
        Just("\"2.4GHz\"".to_string()),
        "\\PC{0,20}",
    ]
}

proptest! {
    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,200}") {
        let _ = parse(&text, Path::new(PATH));
    }

    #[test]
    fn arbitrary_key_value_lines_never_panic(lines in prop::collection::vec(toml_line(), 0..12)) {
        let text = lines.join("\n");
        if let Err(e) = parse(&text, Path::new(PATH)) {
            // Every error points into the file.
            let line_count = text.lines().count().max(1);
            match e {
                ConfigError::Syntax { line, column, .. }
                | ConfigError::UnknownKey { line, column, .. }
                | ConfigError::Invalid { line, column, .. } => {
                    prop_assert!(line >= 1 && line <= line_count + 1, "{line} of {line_count}");
                    prop_assert!(column >= 1);
                }
                ConfigError::Read { .. } => prop_assert!(false, "parse does no I/O"),
                ConfigError::TooLarge { .. } => prop_assert!(false, "{} bytes is not too large", text.len()),
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Reload (SIGHUP)
// ---------------------------------------------------------------------------

#[test]
fn reload_applies_what_a_running_daemon_can_and_defers_the_rest() {
    let running = ok("reserved_cpus = \"0\"\nsocket = \"/run/a.sock\"\n");
    let file = ok(concat!(
        "reserved_cpus = \"0-1\"\n",
        "socket = \"/run/b.sock\"\n",
        "read_timeout = \"9s\"\n",
        "log_level = \"debug\"\n",
        "\n[[rule]]\nmatch = \"hpc.slice/job-*.scope\"\ncpus = 2\n",
    ));
    let r = running.reload(file.clone());
    assert_eq!(r.applied, ["reserved_cpus", "log_level", "rules"]);
    assert_eq!(r.deferred, ["socket", "read_timeout"]);
    // The applied keys take the file's values, the deferred keep the running ones.
    assert_eq!(r.config.reserved_cpus, Reserved::List(set("0-1")));
    assert_eq!(r.config.rules, file.rules);
    assert_eq!(r.config.log_level, LogLevel::Debug);
    assert_eq!(r.config.socket, running.socket);
    assert_eq!(r.config.read_timeout, running.read_timeout);
}

#[test]
fn reload_of_an_unchanged_file_changes_nothing() {
    let running = ok("reserved_cpus = \"2\"\n\n[[rule]]\nmatch = \"a/*\"\ncpus = 1\n");
    let r = running.reload(running.clone());
    assert!(r.applied.is_empty() && r.deferred.is_empty(), "{r:?}");
    assert_eq!(r.config, running);
}

#[test]
fn every_restart_key_is_a_key_and_none_is_applied() {
    let defaults = Config::default();
    let mut file = defaults.clone();
    file.cgroup_root = "/x/cgroup".into();
    file.sysfs_root = "/x/sys".into();
    file.proc_root = "/x/proc".into();
    file.state_file = "/x/state.json".into();
    file.socket = "/x/s.sock".into();
    file.metrics_listen = Some("[::1]:9561".parse().unwrap());
    file.hierarchy = HierarchyMode::V1;
    file.read_timeout = Duration::from_secs(1);
    file.bundle_dirs = vec!["/x/bundles".into()];
    file.systemd_bus = None;
    file.run.enabled = true;
    file.nri.enabled = true;
    file.power_originals = "/x/power.json".into();
    file.housekeeping_originals = "/x/housekeeping.json".into();
    let r = defaults.reload(file);
    assert!(r.applied.is_empty(), "{r:?}");
    assert_eq!(r.deferred, Config::RESTART_KEYS);
    assert_eq!(r.config, defaults);
}

// ---------------------------------------------------------------------------
// Bounds (hostile or careless input)
// ---------------------------------------------------------------------------

/// The position and key of an `Invalid` error, with its message.
fn invalid(text: &str) -> (usize, usize, String, String) {
    match parse(text, Path::new(PATH)) {
        Err(ConfigError::Invalid {
            line,
            column,
            key,
            message,
            ..
        }) => (line, column, key, message),
        other => panic!("expected an invalid value, got {other:?}"),
    }
}

#[test]
fn a_200_kb_glob_is_a_config_error_not_a_panic_in_globset() {
    let text = format!(
        "[[rule]]\nmatch = \"a/{}\"\ncpus = 1\n",
        "x".repeat(200 * 1024)
    );
    let (line, column, key, message) = invalid(&text);
    assert_eq!((line, column, key.as_str()), (2, 9, "rule.match"));
    assert_eq!(
        message,
        format!(
            "a string of {} bytes; at most {MAX_STRING} are allowed",
            200 * 1024 + 2
        )
    );
}

#[test]
fn deeply_nested_alternations_are_a_config_error_not_a_panic_in_globset() {
    // Well below the length bound, deep enough for regex-syntax's nesting
    // limit (250), which globset's `compile_matcher` turns into a panic.
    let depth = 300;
    let pattern = format!("a/{}x{}", "{x,".repeat(depth), "}".repeat(depth));
    assert!(pattern.len() < MAX_STRING);
    let text = format!("[[rule]]\nmatch = \"{pattern}\"\ncpus = 1\n");
    let (line, column, key, message) = invalid(&text);
    assert_eq!((line, column, key.as_str()), (2, 9, "rule.match"));
    assert!(
        message.ends_with(&format!(
            "alternations nest {depth} deep; at most {MAX_GLOB_NESTING} are allowed"
        )),
        "{message}"
    );
    // Nesting up to the bound is fine, and so are braces that are not
    // alternations (escaped, or inside a class).
    let deep = format!(
        "a/{}x{}",
        "{x,".repeat(MAX_GLOB_NESTING),
        "}".repeat(MAX_GLOB_NESTING)
    );
    let config = ok(&format!("[[rule]]\nmatch = \"{deep}\"\ncpus = 1\n"));
    assert!(config.rules[0].matches("a/x"));
    let literal = format!("a/{}", "[{]".repeat(100));
    ok(&format!("[[rule]]\nmatch = \"{literal}\"\ncpus = 1\n"));
}

#[test]
fn every_glob_globset_refuses_is_a_config_error() {
    // Whatever globset cannot build below the bounds (here an unclosed class)
    // is reported with the rule's position, never a panic.
    let (line, column, key, message) = invalid("[[rule]]\nmatch = \"a/[x\"\ncpus = 1\n");
    assert_eq!((line, column, key.as_str()), (2, 9, "rule.match"));
    assert!(message.starts_with("invalid glob \"a/[x\": "), "{message}");
}

#[test]
fn a_file_over_1_mib_is_refused_before_it_is_parsed() {
    let text = format!("# {}\n", "x".repeat(MAX_FILE_SIZE));
    let too_large = |path: &str, size: String| {
        format!("{path}: {size}larger than the {MAX_FILE_SIZE} bytes a config file may hold")
    };
    match parse(&text, Path::new(PATH)) {
        Err(e @ ConfigError::TooLarge { .. }) => assert_eq!(
            e.to_string(),
            too_large(PATH, format!("{} bytes, ", text.len()))
        ),
        other => panic!("expected too large, got {other:?}"),
    }
    // `load` reads no more than the bound and one byte, so a huge file, or a
    // device that never ends, costs no more memory than that.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pinctld.toml");
    std::fs::write(&path, &text).unwrap();
    assert_eq!(
        config::load(&path).unwrap_err().to_string(),
        too_large(
            &path.display().to_string(),
            format!("{} bytes, ", text.len())
        )
    );
    assert_eq!(
        config::load(Path::new("/dev/zero"))
            .unwrap_err()
            .to_string(),
        too_large("/dev/zero", String::new())
    );
    // Exactly at the bound is fine.
    let text = format!("# {}\n", "x".repeat(MAX_FILE_SIZE - 3));
    assert_eq!(text.len(), MAX_FILE_SIZE);
    assert_eq!(ok(&text), Config::default());
}

#[test]
fn a_config_file_that_is_not_utf8_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pinctld.toml");
    std::fs::write(&path, b"log_level = \"\xff\"\n").unwrap();
    assert_eq!(
        config::load(&path).unwrap_err().to_string(),
        format!(
            "cannot read config file {}: stream did not contain valid UTF-8",
            path.display()
        )
    );
}

#[test]
fn more_than_1024_rules_are_refused_at_the_first_one_too_many() {
    let rule = "[[rule]]\nmatch = \"hpc.slice/job-*.scope\"\ncpus = 1\n";
    ok(&rule.repeat(MAX_ITEMS));
    let text = rule.repeat(MAX_ITEMS + 5);
    let (line, column, key, message) = invalid(&text);
    assert_eq!((line, column, key.as_str()), (3 * MAX_ITEMS + 1, 1, "rule"));
    assert_eq!(
        message,
        format!("{} entries; at most {MAX_ITEMS} are allowed", MAX_ITEMS + 5)
    );
}

#[test]
fn lists_longer_than_1024_entries_are_refused_with_their_key() {
    for (key, item) in [
        ("managed", "\"k.slice\""),
        ("shared_cgroups", "\"s.slice\""),
        ("required_paths", "\"r.slice\""),
        ("bundle_dirs", "\"/run/b\""),
    ] {
        let items = vec![item; MAX_ITEMS + 1].join(",\n");
        let text = format!("{key} = [\n{items},\n]\n");
        let (line, column, got_key, message) = invalid(&text);
        assert_eq!(
            (line, column, got_key.as_str()),
            (MAX_ITEMS + 2, 1, key),
            "{key}"
        );
        assert_eq!(
            message,
            format!("{} entries; at most {MAX_ITEMS} are allowed", MAX_ITEMS + 1)
        );
    }
}

#[test]
fn strings_longer_than_4096_bytes_are_refused_with_their_key() {
    let long = "x".repeat(MAX_STRING + 1);
    let values = [
        ("cgroup_root", format!("\"/{long}\"")),
        ("socket", format!("\"/{long}\"")),
        ("reserved_cpus", format!("\"{long}\"")),
        ("read_timeout", format!("\"{long}\"")),
        ("hierarchy", format!("\"{long}\"")),
        ("log_level", format!("\"{long}\"")),
        ("managed", format!("[\"{long}\"]")),
        ("bundle_dirs", format!("[\"ok\", \"/{long}\"]")),
    ];
    for (key, value) in values {
        let text = format!("# long\n{key} = {value}\n");
        let (line, _, got_key, message) = invalid(&text);
        assert_eq!((line, got_key.as_str()), (2, key), "{key}");
        assert!(
            message.starts_with("a string of ")
                && message.ends_with(&format!("bytes; at most {MAX_STRING} are allowed")),
            "{key}: {message}"
        );
    }
    let (line, _, key, _) = invalid(&format!(
        "[[rule]]\nmatch = \"a\"\ncpus = 1\nnuma = \"{long}\"\n"
    ));
    assert_eq!((line, key.as_str()), (4, "rule.numa"));
    // An unknown key is refused without quoting all of it.
    let e = err(&format!("{long} = 1\n"));
    assert!(e.len() < 200, "{e}");
}

#[test]
fn the_largest_config_the_bounds_allow_is_checked_quickly() {
    // 1,024 rules with patterns of the most globset work per byte that fits
    // in 1 MiB: what the bounds promise is a check in well under a second
    // (release), a few seconds here (debug, a shared machine).
    let per_rule = MAX_FILE_SIZE / MAX_ITEMS - 40;
    let pattern: String = "a/".to_string() + &"*?[a-z]{b,c}".repeat(per_rule / 12);
    let text = format!("[[rule]]\nmatch = \"{pattern}\"\ncpus = 1\n").repeat(MAX_ITEMS);
    assert!(text.len() <= MAX_FILE_SIZE, "{}", text.len());
    let started = std::time::Instant::now();
    let config = ok(&text);
    assert_eq!(config.rules.len(), MAX_ITEMS);
    let took = started.elapsed();
    assert!(took < Duration::from_secs(30), "{took:?}");
}

#[test]
fn globs_at_the_length_bound_of_every_metacharacter_build_or_are_refused() {
    // The regex globset builds grows with each metacharacter; at the bound,
    // none may reach a panic (an over-large regex is a config error).
    for unit in ["?", "*", "[!a]", "[a-z]", "**/", "{a,b}", "\\*", "é"] {
        let pattern: String = "a/".to_string() + &unit.repeat((MAX_STRING - 2) / unit.len());
        let text = format!("[[rule]]\nmatch = {pattern:?}\ncpus = 1\n");
        match parse(&text, Path::new(PATH)) {
            Ok(config) => assert_eq!(config.rules.len(), 1),
            Err(ConfigError::Invalid { key, line, .. }) => {
                assert_eq!((key.as_str(), line), ("rule.match", 2), "{unit}")
            }
            Err(e) => panic!("{unit}: {e}"),
        }
    }
}

#[test]
fn the_run_table_is_read_and_each_wrong_value_named() {
    let c = ok(
        "[run]\nenabled = true\nusers = [\"alice\"]\ngroups = [\"hpc\", \"chem.lab\"]\nmax_cpus = 16\nmax_cpus_per_user = 32\nslice = \"jobs.slice\"\nsocket = \"/run/pinctl/r.sock\"\nmem = \"bind\"\n",
    );
    assert_eq!(c.run.mem, pinctl::run::MemPolicy::Bind);
    assert!(c.run.enabled);
    assert_eq!(c.run.users, ["alice"]);
    assert_eq!(c.run.groups, ["hpc", "chem.lab"]);
    assert_eq!((c.run.max_cpus, c.run.max_cpus_per_user), (16, 32));
    assert_eq!(c.run.slice, "jobs.slice");
    assert_eq!(c.run.socket, Path::new("/run/pinctl/r.sock"));
    assert_eq!(ok("[run]\n").run, pinctl::config::Run::default());
    for (text, want) in [
        (
            "[run]\ngroups = [\"-x\"]\n",
            "/etc/pinctl/pinctld.toml:2:11: run.groups: invalid name \"-x\": starts with '-'",
        ),
        (
            "[run]\nusers = [\"a b\"]\n",
            "/etc/pinctl/pinctld.toml:2:10: run.users: invalid name \"a b\": letters, digits, '_', '.' and '-' only",
        ),
        (
            "[run]\nmax_cpus = -1\n",
            "/etc/pinctl/pinctld.toml:2:12: run.max_cpus: invalid CPU count -1: must be from 0 (no cap) to 16384",
        ),
        (
            "[run]\nslice = \"/b.slice\"\n",
            "/etc/pinctl/pinctld.toml:2:9: run.slice: invalid slice \"/b.slice\": must be relative to cgroup_root, not absolute",
        ),
        (
            "[run]\nslice = \"hpc.slice/jobs\"\n",
            "/etc/pinctl/pinctld.toml:2:9: run.slice: invalid slice \"hpc.slice/jobs\": its last name must end in \".slice\"",
        ),
        (
            "[run]\nmem = \"local\"\n",
            "/etc/pinctl/pinctld.toml:2:7: run.mem: invalid memory policy \"local\": expected one of bind, prefer, none",
        ),
        (
            "[run]\nsocket = \"run.sock\"\n",
            "/etc/pinctl/pinctld.toml:2:10: run.socket: invalid path \"run.sock\": must be absolute",
        ),
    ] {
        assert_eq!(err(text), want, "{text}");
    }
    assert!(
        err("[run]\nenable = true\n").contains("unknown key `enable`"),
        "{}",
        err("[run]\nenable = true\n")
    );
}

#[test]
fn the_nri_table_is_read_and_each_wrong_value_named() {
    let d = pinctl::config::Nri::default();
    assert!(!d.enabled && !d.required);
    assert_eq!(d.socket, Path::new("/var/run/nri/nri.sock"));
    assert_eq!(
        (d.plugin_name.as_str(), d.plugin_index.as_str()),
        ("pinctl", "10")
    );
    assert_eq!(ok("[nri]\n").nri, d);
    let c = ok(
        "[nri]\nenabled = true\nsocket = \"/run/nri.sock\"\nplugin_name = \"pinctl.cpu\"\nplugin_index = \"05\"\nrequired = true\n",
    );
    assert!(c.nri.enabled && c.nri.required);
    assert_eq!(c.nri.socket, Path::new("/run/nri.sock"));
    assert_eq!(
        (c.nri.plugin_name.as_str(), c.nri.plugin_index.as_str()),
        ("pinctl.cpu", "05")
    );
    for (text, want) in [
        (
            "[nri]\nplugin_index = \"5\"\n",
            "/etc/pinctl/pinctld.toml:2:16: nri.plugin_index: invalid plugin index \"5\": two digits, \"00\" to \"99\"",
        ),
        (
            "[nri]\nplugin_name = \"pin ctl\"\n",
            "/etc/pinctl/pinctld.toml:2:15: nri.plugin_name: invalid plugin name \"pin ctl\": 1 to 64 letters, digits, '-', '_' or '.'",
        ),
        (
            "[nri]\nsocket = \"nri.sock\"\n",
            "/etc/pinctl/pinctld.toml:2:10: nri.socket: invalid path \"nri.sock\": must be absolute",
        ),
    ] {
        assert_eq!(err(text), want, "{text}");
    }
    // A change waits for a restart: the registration is made once.
    let r = ok("").reload(c);
    assert_eq!(r.deferred, ["nri"]);
    assert!(!r.config.nri.enabled);
}

#[test]
fn the_kubelet_checkpoint_is_a_path_or_nothing() {
    let d = Config::default();
    assert_eq!(
        d.kubelet_cpu_manager_state.as_deref(),
        Some(Path::new("/var/lib/kubelet/cpu_manager_state"))
    );
    assert_eq!(
        ok("kubelet_cpu_manager_state = \"\"\n").kubelet_cpu_manager_state,
        None
    );
    assert_eq!(
        err("kubelet_cpu_manager_state = \"state\"\n"),
        "/etc/pinctl/pinctld.toml:1:29: kubelet_cpu_manager_state: invalid path \"state\": must be absolute"
    );
    // A reload applies it.
    let r = d.reload(ok("kubelet_cpu_manager_state = \"\"\n"));
    assert_eq!(r.applied, ["kubelet_cpu_manager_state"]);
}
