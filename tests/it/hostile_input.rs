//! Hostile and careless input: whatever a local user or a careless operator
//! can put in front of pinctl (a configuration file, a CPU list, a sysfs tree,
//! a state file, a cgroup's CPU limit) gives a clear error naming the input,
//! never a panic and never unbounded work.
//!
//! Property tests run a modest number of cases by default, so that `cargo
//! test` stays quick on a small machine; `PROPTEST_CASES=N` runs N of each.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use pinctl::CpuSet;
use pinctl::cgroup::layout::{self, Kind, Qos};
use pinctl::cgroup::{CpuLimit, Observed};
use pinctl::config::{self, Config, ConfigError, MAX_FILE_SIZE, MAX_ITEMS, MAX_STRING};
use pinctl::cpuset::MAX_CPU;
use pinctl::engine::SavedState;
use pinctl::intent;
use pinctl::state::{Loaded, Peeked, StateFile};
use pinctl::sysfs::Sysfs;
use proptest::prelude::*;
use proptest::test_runner::Config as ProptestConfig;

/// `default` cases, or `PROPTEST_CASES`.
fn cases(default: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default);
    ProptestConfig {
        cases,
        // A failing case is reported with its minimal input; it is not
        // replayed from a file on later runs.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// What "bounded work" means for one input here: far more than any case
/// takes in a debug build on a busy machine, far less than the minutes the
/// unbounded versions took.
const BOUNDED: Duration = Duration::from_secs(10);

/// A container of a Guaranteed pod (systemd driver, containerd).
const GUARANTEED: &str = "kubepods.slice/kubepods-pod190bf0c3_921b_4ecb_b2f9_6f8a82af3b3e.slice/cri-containerd-f42deac8960e4b15e6b5bbbb317fe052ae349fcd3a35293bf4b3bb8f45d2aea9.scope";

/// The kubelet rule's decision for a Guaranteed container whose `cpu.max`
/// reads `cpu_max`.
fn kubelet_decision(cpu_max: &str) -> (Option<intent::Intent>, Option<String>) {
    let kind = layout::classify(GUARANTEED);
    assert!(
        matches!(&kind, Kind::Container { pod, .. } if pod.qos == Qos::Guaranteed),
        "{kind:?}"
    );
    let obs = Observed {
        rel: GUARANTEED.into(),
        limit: CpuLimit::parse_v2(cpu_max),
        owner: Some(pinctl::io::Owner {
            uid: 0,
            mode: 0o755,
        }),
        ..Observed::default()
    };
    intent::decide(&kind, &obs, None, &Config::default())
}

/// `cpu.max` of `18446744073709551615 1` once became a pending request for
/// 18446744073709551615 CPUs; it is now no request, and a problem that says
/// why, as a malformed xattr or annotation is.
#[test]
fn a_cpu_limit_of_more_cpus_than_supported_is_a_problem_not_a_request() {
    assert_eq!(kubelet_decision("400000 100000").0.map(|i| i.cpus), Some(4));
    for cpu_max in ["18446744073709551615 1", "1638500000 100000", "400000 0"] {
        let (intent, problem) = kubelet_decision(cpu_max);
        assert_eq!(intent, None, "{cpu_max}");
        let problem = problem.unwrap_or_default();
        assert!(
            problem.starts_with("ignoring CPU limit of "),
            "{cpu_max}: {problem:?}"
        );
    }
    // Not a whole number: the shared pool, silently, as the kubelet does.
    assert_eq!(kubelet_decision("150000 100000"), (None, None));
}

// ---------------------------------------------------------------------------
// 1. Configuration text
// ---------------------------------------------------------------------------

const CONFIG_PATH: &str = "/etc/pinctl/pinctld.toml";

const KEYS: &[&str] = &[
    "cgroup_root",
    "sysfs_root",
    "proc_root",
    "state_file",
    "socket",
    "reserved_cpus",
    "reconcile_interval",
    "read_timeout",
    "dstate_threshold",
    "frozen_threshold",
    "thaw_frozen",
    "watchdog_interval",
    "repair",
    "repair_cooldown",
    "required_paths",
    "shared_cgroups",
    "managed",
    "hierarchy",
    "kubelet_rule",
    "full_pcpus_only",
    "distribute_across_numa",
    "spread_cores",
    "align_memory",
    "strict_reservation",
    "bundle_dirs",
    "log_level",
    "bogus",
];

/// A string of `unit` repeated to about `len` bytes: huge values without
/// generating them a character at a time.
fn repeated(units: &'static [&'static str], max_len: usize) -> impl Strategy<Value = String> {
    (prop::sample::select(units), 0..=max_len).prop_map(|(unit, len)| unit.repeat(len / unit.len()))
}

/// A glob: plausible, full of metacharacters, deeply nested, or huge.
fn glob() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9/.*?\\[\\]{},!^\\\\-]{0,40}",
        Just("hpc.slice/job-*.scope".to_string()),
        (0usize..200).prop_map(|n| format!("a/{}x{}", "{x,".repeat(n), "}".repeat(n))),
        repeated(&["?", "*", "[!a]", "**/", "{a,b}", "x"], 6000).prop_map(|s| format!("a/{s}")),
    ]
}

/// A TOML value for any key: of the right type or not, plausible or hostile.
fn toml_value() -> impl Strategy<Value = String> {
    let string = prop_oneof![
        "\\PC{0,16}",
        "[0-9,\\- ]{0,16}",
        "[a-z/.]{0,16}",
        Just("/abs/path".to_string()),
        Just("0-4294967295".to_string()),
        Just("99999999999999999999s".to_string()),
        repeated(&["x", "/a", "0-16383,", "é"], 9000),
    ];
    let string = string.prop_map(|s| format!("{s:?}"));
    prop_oneof![
        string.clone(),
        any::<i64>().prop_map(|n| n.to_string()),
        Just("18446744073709551615".to_string()),
        Just("-170141183460469231731687303715884105728".to_string()),
        any::<bool>().prop_map(|b| b.to_string()),
        Just("1.5e308".to_string()),
        Just("1979-05-27T07:32:00Z".to_string()),
        // Arrays, short or far over the bound.
        (
            string,
            prop_oneof![0usize..4, Just(MAX_ITEMS + 1), 0usize..3000]
        )
            .prop_map(|(item, n)| format!("[{}]", vec![item; n].join(", "))),
        (1usize..200).prop_map(|n| format!("{}1{}", "[".repeat(n), "]".repeat(n))),
        Just("{ a = 1 }".to_string()),
    ]
}

/// One `[[rule]]` table, possibly repeated past the bound.
fn rules() -> impl Strategy<Value = String> {
    let cpus = prop_oneof![
        (0i64..20).prop_map(|n| n.to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        Just("18446744073709551615".to_string()),
        Just("\"4\"".to_string()),
    ];
    let numa = prop::option::of(prop_oneof![
        "[0-9,\\-]{0,8}",
        Just("0-4294967295".to_string()),
        Just("16383".to_string()),
    ]);
    let count = prop_oneof![4 => 0usize..4, 1 => Just(MAX_ITEMS + 1), 1 => 2000usize..5000];
    (glob(), cpus, numa, count).prop_map(|(pattern, cpus, numa, count)| {
        let mut rule = format!("[[rule]]\nmatch = {pattern:?}\ncpus = {cpus}\n");
        if let Some(numa) = numa {
            rule.push_str(&format!("numa = {numa:?}\n"));
        }
        rule.repeat(count)
    })
}

fn config_text() -> impl Strategy<Value = String> {
    let line = prop_oneof![
        4 => (prop::sample::select(KEYS), toml_value()).prop_map(|(k, v)| format!("{k} = {v}")),
        1 => "\\PC{0,30}",
        1 => Just("[rule]".to_string()),
        1 => repeated(&["# ", "x", "\n"], 2 * MAX_FILE_SIZE).prop_map(|s| format!("# {s}")),
    ];
    (prop::collection::vec(line, 0..10), rules()).prop_map(|(lines, rules)| {
        let mut text = lines.join("\n");
        text.push('\n');
        text.push_str(&rules);
        text
    })
}

/// A parse result that is a clear error about the file, or a configuration
/// within the bounds.
fn check_config_result(
    text: &str,
    result: Result<Config, ConfigError>,
) -> Result<(), TestCaseError> {
    match result {
        Ok(config) => {
            prop_assert!(text.len() <= MAX_FILE_SIZE);
            prop_assert!(config.rules.len() <= MAX_ITEMS);
            for list in [
                &config.managed,
                &config.shared_cgroups,
                &config.required_paths,
            ] {
                prop_assert!(list.len() <= MAX_ITEMS);
                prop_assert!(list.iter().all(|p| p.len() <= MAX_STRING));
            }
            prop_assert!(config.bundle_dirs.len() <= MAX_ITEMS);
            prop_assert!(config.rules.iter().all(|r| r.pattern.len() <= MAX_STRING));
        }
        Err(e) => {
            let message = e.to_string();
            prop_assert!(message.starts_with(CONFIG_PATH), "{message}");
            match e {
                ConfigError::TooLarge { size, .. } => {
                    prop_assert_eq!(size, Some(text.len() as u64));
                    prop_assert!(text.len() > MAX_FILE_SIZE);
                }
                ConfigError::Syntax { line, column, .. }
                | ConfigError::UnknownKey { line, column, .. }
                | ConfigError::Invalid { line, column, .. } => {
                    let lines = text.lines().count().max(1);
                    prop_assert!((1..=lines + 1).contains(&line), "line {line} of {lines}");
                    prop_assert!(column >= 1);
                }
                ConfigError::Read { .. } => prop_assert!(false, "parse does no I/O"),
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(cases(256))]

    #[test]
    fn any_config_text_is_a_config_or_an_error_naming_file_line_and_key(text in config_text()) {
        let started = Instant::now();
        let result = config::parse(&text, Path::new(CONFIG_PATH));
        prop_assert!(started.elapsed() < BOUNDED, "{:?} for {} bytes", started.elapsed(), text.len());
        check_config_result(&text, result)?;
    }

    #[test]
    fn any_value_of_any_key_is_a_config_or_an_error_naming_file_line_and_key(
        key in prop::sample::select(KEYS),
        value in toml_value(),
        before in 0usize..3,
    ) {
        let text = format!("{}{key} = {value}\n", "# a comment\n".repeat(before));
        let result = config::parse(&text, Path::new(CONFIG_PATH));
        if let Err(ConfigError::Invalid { line, key: got, .. }) = &result {
            // A bad value is reported at its own line, under its own key.
            prop_assert_eq!(*line, before + 1);
            prop_assert!(got.starts_with(key), "{} for {}", got, key);
        }
        check_config_result(&text, result)?;
    }
}

// ---------------------------------------------------------------------------
// 2. CPU lists
// ---------------------------------------------------------------------------

fn cpu_list_text() -> impl Strategy<Value = String> {
    let number = prop_oneof![
        (0u32..100).prop_map(|n| n.to_string()),
        Just(MAX_CPU.to_string()),
        Just((MAX_CPU + 1).to_string()),
        Just("4294967295".to_string()),
        Just("4294967296".to_string()),
        Just("99999999999999999999999999".to_string()),
        Just("0000000000000000000000001".to_string()),
        "[0-9]{1,30}",
    ];
    let item = prop_oneof![
        number.clone(),
        (number.clone(), number).prop_map(|(a, b)| format!("{a}-{b}")),
        "[ \t\n\u{a0}\u{3000}\u{2028}]{0,2}",
        "\\PC{0,3}",
        Just("-".to_string()),
        Just("".to_string()),
    ];
    prop_oneof![
        8 => prop::collection::vec(item, 0..12).prop_map(|items| items.join(",")),
        1 => repeated(&["0-16383,", "16383,", "1,"], 200_000),
        1 => "\\PC{0,64}",
    ]
}

proptest! {
    #![proptest_config(cases(256))]

    #[test]
    fn any_cpu_list_is_a_bounded_set_or_an_error_quoting_it(text in cpu_list_text()) {
        let started = Instant::now();
        let parsed = text.parse::<CpuSet>();
        prop_assert!(started.elapsed() < BOUNDED, "{:?}", started.elapsed());
        match parsed {
            Ok(set) => {
                prop_assert!(set.last().is_none_or(|cpu| cpu <= MAX_CPU));
                prop_assert_eq!(set.to_string().parse::<CpuSet>(), Ok(set));
            }
            Err(e) => {
                prop_assert_eq!(&e.input, &text);
                prop_assert!(!e.reason.is_empty());
                let message = e.to_string();
                prop_assert!(message.starts_with(&format!("invalid CPU list {text:?}: ")), "{}", message);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// 3. sysfs trees
// ---------------------------------------------------------------------------

/// One file of a fake tree: a path below the root and its bytes.
type File = (String, Vec<u8>);

/// `prefix` and a number: small, at or past the bounds, not a number at all.
fn numbered(prefix: &'static str) -> impl Strategy<Value = String> {
    prop_oneof![
        6 => (0u32..6).prop_map(|n| n.to_string()),
        1 => prop::sample::select(vec![
            "16383", "16384", "99999999", "4294967295", "4294967296",
            "99999999999999999999", "", "freq", "-1", "007", "1x",
        ]).prop_map(str::to_string),
    ]
    .prop_map(move |n| format!("{prefix}{n}"))
}

/// What a topology id file might hold.
fn id_content() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        6 => (0u32..4).prop_map(|n| format!("{n}\n").into_bytes()),
        1 => prop::sample::select(vec![
            "-1\n", "3\n", "4294967295\n", "4294967296\n", "18446744073709551616\n",
            "-2\n", "\n", "", "abc\n", "1e3\n", " 3 \n", "+1\n",
        ]).prop_map(|s| s.as_bytes().to_vec()),
        1 => prop::collection::vec(any::<u8>(), 0..8),
    ]
}

/// What a CPU list file might hold.
fn list_content() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        6 => (0u32..6, 0u32..6).prop_map(|(a, b)| format!("{}-{}\n", a.min(b), a.max(b)).into_bytes()),
        2 => (0u32..6).prop_map(|n| format!("{n}\n").into_bytes()),
        1 => prop::sample::select(vec![
            "\n", "0-16383\n", "0-4294967295\n", "16384\n", "3-1\n", "0,,1\n", "x\n",
        ]).prop_map(|s| s.as_bytes().to_vec()),
        1 => prop::collection::vec(any::<u8>(), 0..8),
    ]
}

fn cpu_files() -> impl Strategy<Value = Vec<File>> {
    let topology = prop::collection::vec(
        prop_oneof![
            id_content().prop_map(|c| ("topology/physical_package_id".to_string(), c)),
            id_content().prop_map(|c| ("topology/die_id".to_string(), c)),
            id_content().prop_map(|c| ("topology/core_id".to_string(), c)),
            list_content().prop_map(|c| ("topology/core_cpus_list".to_string(), c)),
            list_content().prop_map(|c| ("topology/thread_siblings_list".to_string(), c)),
        ],
        0..6,
    );
    let cache = prop::collection::vec(
        (
            numbered("index"),
            prop_oneof![Just(b"3\n".to_vec()), id_content()],
            prop::sample::select(vec!["Unified\n", "Data\n", "Instruction\n", "?\n"]),
            prop::option::of(list_content()),
            prop::option::of(id_content()),
        )
            .prop_map(|(index, level, kind, shared, id)| {
                let mut files = vec![
                    (format!("cache/{index}/level"), level),
                    (format!("cache/{index}/type"), kind.as_bytes().to_vec()),
                ];
                files.extend(shared.map(|c| (format!("cache/{index}/shared_cpu_list"), c)));
                files.extend(id.map(|c| (format!("cache/{index}/id"), c)));
                files
            }),
        0..3,
    );
    (topology, cache).prop_map(|(mut files, cache)| {
        files.extend(cache.into_iter().flatten());
        files
    })
}

/// A random tree: CPU directories (some past the bounds), their topology and
/// cache files, the online/isolated/offline lists, NUMA node directories.
fn sysfs_tree() -> impl Strategy<Value = Vec<File>> {
    let cpus = prop::collection::vec((numbered("cpu"), cpu_files()), 0..6);
    let lists = prop::collection::vec(
        (
            prop::sample::select(vec!["online", "isolated", "offline"]),
            list_content(),
        ),
        0..3,
    );
    let nodes = prop::option::of(prop::collection::vec(
        (numbered("node"), prop::option::of(list_content())),
        0..4,
    ));
    (cpus, lists, nodes).prop_map(|(cpus, lists, nodes)| {
        let mut files = Vec::new();
        for (cpu, cpu_files) in cpus {
            // A CPU directory with nothing in it is offline-looking; give it
            // a file so the directory exists.
            files.push((format!("devices/system/cpu/{cpu}/uevent"), Vec::new()));
            for (rel, content) in cpu_files {
                files.push((format!("devices/system/cpu/{cpu}/{rel}"), content));
            }
        }
        for (list, content) in lists {
            files.push((format!("devices/system/cpu/{list}"), content));
        }
        if let Some(nodes) = nodes {
            files.push(("devices/system/node/possible".to_string(), b"0\n".to_vec()));
            for (node, cpulist) in nodes {
                files.push((format!("devices/system/node/{node}/uevent"), Vec::new()));
                files.extend(cpulist.map(|c| (format!("devices/system/node/{node}/cpulist"), c)));
            }
        }
        files
    })
}

fn write_tree(root: &Path, files: &[File]) {
    for (rel, content) in files {
        let path = root.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, content).unwrap();
    }
}

proptest! {
    #![proptest_config(cases(64))]

    #[test]
    fn any_sysfs_tree_is_a_topology_or_an_error_naming_a_file_in_it(files in sysfs_tree()) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("sys");
        write_tree(&root, &files);
        let started = Instant::now();
        let result = Sysfs::new(&root).topology();
        prop_assert!(started.elapsed() < BOUNDED, "{:?}", started.elapsed());
        match result {
            Ok(t) => {
                prop_assert!(!t.online().is_empty());
                prop_assert!(t.online().last().is_some_and(|cpu| cpu <= MAX_CPU));
                prop_assert!(t.numa_nodes().keys().all(|&n| n <= MAX_CPU));
            }
            Err(e) => {
                let message = format!("{:#}", anyhow::Error::from(e));
                prop_assert!(message.contains(&root.display().to_string()), "{}", message);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// 4. State files
// ---------------------------------------------------------------------------

fn envelope(body: &str) -> Vec<u8> {
    let checksum = format!("crc32:{:08x}", crc32fast::hash(body.as_bytes()));
    format!("{{\"version\":1,\"checksum\":\"{checksum}\",\"state\":{body}}}\n").into_bytes()
}

/// State file bytes: random, or a well-formed envelope (right checksum)
/// around a hostile body, so the body's own parsing is reached.
fn state_bytes() -> impl Strategy<Value = Vec<u8>> {
    let cpus = prop_oneof![
        Just("0-3".to_string()),
        Just("0-4294967295".to_string()),
        Just("16384".to_string()),
        "[0-9,\\-]{0,12}",
    ];
    let body = (cpus.clone(), cpus, "\\PC{0,12}", any::<i64>(), 0usize..3).prop_map(
        |(online, cpus, key, requested, n)| {
            let assignment = format!(
                "{key:?}:{{\"cpus\":{cpus:?},\"requested\":{requested},\"cgroups\":[\"a\"]}}"
            );
            format!(
                "{{\"online\":{online:?},\"assignments\":{{{}}}}}",
                vec![assignment; n].join(",")
            )
        },
    );
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..256),
        body.clone().prop_map(|b| envelope(&b)),
        (1usize..300).prop_map(|n| envelope(&format!("{}{}", "[".repeat(n), "]".repeat(n)))),
        Just(envelope("{\"online\":\"0-3\",\"assignments\":{}}")),
        body.prop_map(|b| b.into_bytes()),
        Just(vec![0u8; 64]),
    ]
}

proptest! {
    #![proptest_config(cases(256))]

    #[test]
    fn any_state_file_is_loaded_or_moved_aside_with_a_reason(bytes in state_bytes()) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        fs::write(&path, &bytes).unwrap();
        let state = StateFile::new(&path);

        // The CLI's read never moves the file, and agrees with the daemon's.
        let peeked = state.peek::<SavedState>().unwrap();
        prop_assert!(path.exists());
        match state.load::<SavedState>().unwrap() {
            Loaded::Fresh(saved) => {
                prop_assert_eq!(peeked, Peeked::Fresh(saved.clone()));
                prop_assert!(saved.online.last().is_none_or(|cpu| cpu <= MAX_CPU));
            }
            Loaded::Quarantined { reason, moved_to } => {
                prop_assert_eq!(peeked, Peeked::Invalid { reason: reason.clone() });
                prop_assert!(reason.starts_with("state file"), "{}", reason);
                prop_assert!(!reason.contains('\n'));
                prop_assert!(!path.exists());
                prop_assert_eq!(fs::read(&moved_to).unwrap(), bytes);
                prop_assert_eq!(moved_to.parent(), Some(dir.path()));
            }
            Loaded::Missing => prop_assert!(false, "the file was there"),
        }
    }
}

// ---------------------------------------------------------------------------
// Bundles, annotations, xattrs and cgroup names
// ---------------------------------------------------------------------------

/// Text someone else wrote: control characters, quotes, backslashes, escape
/// sequences, digits, non-ASCII, and now and then a long run.
fn hostile_text() -> impl Strategy<Value = String> {
    let unit = prop_oneof![
        Just("\u{1b}[2J".to_string()),
        Just("\"".to_string()),
        Just("\\".to_string()),
        Just("\n".to_string()),
        Just("\r".to_string()),
        Just("\u{9b}".to_string()),
        Just("\u{202e}".to_string()),
        Just("{".to_string()),
        Just("4".to_string()),
        Just("18446744073709551616".to_string()),
        "[ -~]{0,8}",
        any::<char>().prop_map(String::from),
        (1usize..200_000).prop_map(|n| "x".repeat(n)),
    ];
    proptest::collection::vec(unit, 0..6).prop_map(|v| v.concat())
}

/// An OCI `config.json`, or something near one: annotations with hostile
/// keys and values, values of other types, nesting, or no JSON at all.
fn bundle_json() -> impl Strategy<Value = String> {
    prop_oneof![
        hostile_text(),
        (hostile_text(), hostile_text()).prop_map(|(k, v)| {
            serde_json::json!({"annotations": {"pinctl.io/cpus": v, k: "x"}}).to_string()
        }),
        (hostile_text(), hostile_text()).prop_map(|(name, uid)| {
            serde_json::json!({"annotations": {
                "io.kubernetes.cri.container-name": name,
                "io.kubernetes.cri.sandbox-uid": uid,
            }})
            .to_string()
        }),
        Just(r#"{"annotations":{"pinctl.io/cpus":4}}"#.to_string()),
        Just(r#"{"annotations":[]}"#.to_string()),
        (1usize..5_000).prop_map(|n| format!("{}{}", "[".repeat(n), "]".repeat(n))),
    ]
}

/// The name of a directory the kernel would allow: any bytes but `/` and
/// NUL, 1 to 255 of them.
fn cgroup_name() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(1u8..=255, 1..=255),
        hostile_text().prop_map(|t| t.into_bytes()),
    ]
    .prop_map(|b| {
        b.into_iter()
            .filter(|c| *c != b'/' && *c != 0)
            .take(255)
            .collect::<Vec<u8>>()
    })
    // `.` and `..` are no names mkdir can make (EEXIST).
    .prop_filter("a name", |b| !b.is_empty() && b != b"." && b != b"..")
}

/// A message about someone else's value stays short, whatever the value.
const MESSAGE_BOUND: usize = 1_024;

proptest! {
    #![proptest_config(cases(256))]

    /// A bundle's `config.json` is a bundle or an unusable one with a
    /// reason; what the daemon then says about it is short and has no raw
    /// control character.
    #[test]
    fn any_bundle_is_read_or_refused_with_a_short_reason(json in bundle_json()) {
        let dir = tempfile::tempdir().unwrap();
        let id = "0123456789abcdef";
        fs::create_dir(dir.path().join(id)).unwrap();
        fs::write(dir.path().join(id).join("config.json"), &json).unwrap();
        let started = Instant::now();
        let bundle = intent::find_bundle(&pinctl::io::RealFs, &[dir.path().to_path_buf()], id)
            .expect("a file that reads")
            .expect("a file is there");
        prop_assert!(started.elapsed() < BOUNDED);
        let kind = layout::classify(&format!("system.slice/docker-{id}.scope"));
        let obs = Observed {
            rel: format!("system.slice/docker-{id}.scope").into(),
            owner: Some(pinctl::io::Owner { uid: 0, mode: 0o755 }),
            ..Observed::default()
        };
        let (_, problem) = intent::decide(&kind, &obs, Some(&bundle), &Config::default());
        if let Some(p) = problem {
            prop_assert!(p.len() < MESSAGE_BOUND + bundle.path.as_os_str().len(), "{} bytes", p.len());
            prop_assert!(!p.chars().any(|c| c.is_control()), "{p:?}");
        }
    }

    /// Whatever an xattr holds, the decision is a count or a short problem.
    #[test]
    fn any_xattr_is_a_count_or_a_short_problem(value in hostile_text()) {
        let rel = "hpc.slice/job-1.scope";
        let obs = Observed {
            rel: rel.into(),
            xattr: Some(value.clone()),
            owner: Some(pinctl::io::Owner { uid: 0, mode: 0o755 }),
            ..Observed::default()
        };
        let (intent, problem) = intent::decide(&layout::classify(rel), &obs, None, &Config::default());
        match (intent, problem) {
            (Some(i), None) => prop_assert!(i.cpus <= MAX_CPU as usize + 1),
            (None, Some(p)) => {
                prop_assert!(p.len() < MESSAGE_BOUND, "{} bytes", p.len());
                prop_assert!(!p.chars().any(|c| c.is_control()), "{p:?}");
            }
            other => prop_assert!(false, "{other:?}"),
        }
    }

    /// Every name the kernel allows is classified without a panic, kept
    /// losslessly, and found again on disk by the daemon's own reader.
    #[test]
    fn any_cgroup_name_is_seen_and_found_again(name in cgroup_name()) {
        use std::os::unix::ffi::OsStrExt as _;
        let raw = std::ffi::OsStr::from_bytes(&name);
        let kept = pinctl::io::name::encode(raw).into_owned();
        let _ = layout::classify(&format!("kubepods/burstable/pod1/{kept}"));
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join(raw)).unwrap();
        let scan = pinctl::io::Fs::scan_dir(&pinctl::io::RealFs, dir.path(), &[], "user.x", None).unwrap();
        prop_assert_eq!(&scan.dirs, &vec![kept.clone()]);
        prop_assert!(pinctl::io::name::path(dir.path(), &kept).is_dir());
    }
}

/// Found by the property above (a flake, with 1 case in about 250): a
/// bundle whose `config.json` is one long JSON string gave a problem as long
/// as the string, since serde's message quotes the value it choked on.
#[test]
fn a_bundle_that_is_one_long_string_gives_a_short_problem() {
    let dir = tempfile::tempdir().unwrap();
    let id = "0123456789abcdef";
    fs::create_dir(dir.path().join(id)).unwrap();
    let json = format!("\"{}\"", "x".repeat(100_000));
    fs::write(dir.path().join(id).join("config.json"), &json).unwrap();
    let bundle = intent::find_bundle(&pinctl::io::RealFs, &[dir.path().to_path_buf()], id)
        .expect("a file that reads")
        .expect("a file is there");
    let reason = &bundle.unusable.as_ref().expect("unusable").reason;
    assert!(reason.len() < 400, "{} bytes: {reason}", reason.len());
}
