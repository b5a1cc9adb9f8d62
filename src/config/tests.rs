//! The configuration's own unit tests (the file-level ones are in
//! `tests/it/config.rs`).

use super::file::io_reason;
use super::raw::*;
use super::*;
use std::path::Path;
use toml::de::DeTable;

#[test]
fn line_col_counts_lines_and_characters_and_never_panics() {
    let cases: &[(&str, usize, (usize, usize))] = &[
        ("", 0, (1, 1)),
        ("", 5, (1, 1)),
        ("ab\ncd", 1, (1, 2)),
        ("ab\ncd", 3, (2, 1)),
        ("ab\ncd", 99, (2, 3)),
        ("ab\n", 3, (2, 1)),
        ("é = 1", 3, (1, 3)),
        // Inside a multi-byte character: the character's own column.
        ("xé", 2, (1, 2)),
        ("a\r\nb", 3, (2, 1)),
    ];
    for &(text, offset, want) in cases {
        assert_eq!(line_col(text, offset), want, "{text:?} at {offset}");
    }
}

#[test]
fn key_at_finds_the_innermost_key() {
    let text = "a = 1\n[[rule]]\nmatch = \"x\"\ncpus = 2\n";
    let doc = DeTable::parse(text).unwrap();
    let at = |needle: &str| key_at(doc.get_ref(), text.find(needle).unwrap());
    assert_eq!(at("1"), ["a"]);
    assert_eq!(at("[[rule]]"), ["rule"]);
    assert_eq!(at("\"x\""), ["rule", "match"]);
    assert_eq!(at("cpus"), ["rule", "cpus"]);
    assert!(key_at(doc.get_ref(), 5).is_empty(), "the newline is no key");
}

#[test]
fn serde_messages_read_as_toml() {
    let cases = [
        (
            "invalid type: map, expected a sequence",
            "expected an array, found a table",
        ),
        (
            "invalid type: sequence, expected struct RawRule",
            "expected a table, found an array",
        ),
        (
            "invalid type: string \"x\", expected a boolean",
            "expected a boolean, found string \"x\"",
        ),
        ("something else", "something else"),
    ];
    for (serde, want) in cases {
        assert_eq!(humanize(serde), want);
    }
}

#[test]
fn io_reason_drops_the_error_number() {
    let e = std::io::Error::from_raw_os_error(libc::ENOENT);
    assert_eq!(io_reason(&e), "No such file or directory");
    let e = std::io::Error::other("custom");
    assert_eq!(io_reason(&e), "custom");
}

#[test]
fn literal_components_stop_at_the_first_glob() {
    assert_eq!(literal_components("a/b/c"), ["a", "b", "c"]);
    assert_eq!(literal_components("a/b-*/c"), ["a"]);
    assert_eq!(literal_components("a/[bc]/d"), ["a"]);
    assert_eq!(literal_components("a/{b,c}"), ["a"]);
    assert_eq!(literal_components("a/b\\*"), ["a"]);
    assert!(literal_components("**/x").is_empty());
}

#[test]
fn strict_reservation_is_off_by_default_and_parsed() {
    let path = Path::new("/etc/pinctl/pinctld.toml");
    assert!(!Config::default().strict_reservation);
    assert!(!parse("", path).unwrap().strict_reservation);
    let on = parse("reserved_cpus = \"0\"\nstrict_reservation = true\n", path).unwrap();
    assert!(on.strict_reservation);
}

#[test]
fn strict_reservation_of_the_wrong_type_names_file_line_and_key() {
    let path = Path::new("/etc/pinctl/pinctld.toml");
    let err = parse(
        "reserved_cpus = \"0\"\nstrict_reservation = \"yes\"\n",
        path,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "/etc/pinctl/pinctld.toml:2:22: strict_reservation: expected a boolean, found string \"yes\""
    );
}

#[test]
fn strict_reservation_is_turned_on_and_off_by_a_reload() {
    let path = Path::new("/etc/pinctl/pinctld.toml");
    let off = parse("", path).unwrap();
    let on = parse("strict_reservation = true\n", path).unwrap();
    let r = off.reload(on);
    assert_eq!(r.applied, ["strict_reservation"]);
    assert!(r.deferred.is_empty() && r.config.strict_reservation);
    let r = r.config.reload(off);
    assert_eq!(r.applied, ["strict_reservation"]);
    assert!(!r.config.strict_reservation);
}

const POWER: &str = r#"[[class]]
name = "latency"
governor = "performance"
min_freq = "base"
max_freq = "max"
epp = "performance"
disabled_cstates = ["C6", "C1E"]
resume_latency_us = "n/a"
uncore_min_freq = "2.4GHz"
uncore_max_freq = "max"

[[class]]
name = "efficient"
governor = "powersave"
max_freq = 1800000
epp = 128
resume_latency_us = 0

[power]
enabled = true
exclusive = "latency"
shared = "efficient"
slurm = "latency"

[[rule]]
match = "hpc.slice/*"
cpus = 2
class = "efficient"
"#;

fn power_err(text: &str) -> String {
    parse(text, Path::new("/etc/pinctl/pinctld.toml"))
        .unwrap_err()
        .to_string()
}

#[test]
fn frequencies_take_khz_mhz_ghz_and_the_cpus_own_marks() {
    let ok: &[(&str, Freq)] = &[
        ("min", Freq::Min),
        ("base", Freq::Base),
        ("max", Freq::Max),
        ("800kHz", Freq::Khz(800)),
        ("800MHz", Freq::Khz(800_000)),
        ("2.4GHz", Freq::Khz(2_400_000)),
        ("2.400GHz", Freq::Khz(2_400_000)),
        ("3ghz", Freq::Khz(3_000_000)),
        ("0.5MHz", Freq::Khz(500)),
    ];
    for (text, want) in ok {
        assert_eq!(parse_freq(text).as_ref(), Ok(want), "{text}");
    }
    let bad = [
        "",
        "2.4",
        "GHz",
        "1.0005MHz",
        "2.4 GHz",
        "1.5kHz",
        "0MHz",
        "2..4GHz",
        ".5GHz",
        "5.GHz",
        "-1MHz",
        "2.4THz",
        "101GHz",
        "99999999999999999999GHz",
        "base ",
    ];
    for text in bad {
        assert!(parse_freq(text).is_err(), "{text:?} was accepted");
    }
    assert_eq!(
        parse_freq("2.4").unwrap_err(),
        "invalid frequency \"2.4\": missing unit: use kHz, MHz or GHz, or min, base or max"
    );
}

#[test]
fn classes_and_the_power_table_are_read_with_every_field() {
    let config = parse(POWER, Path::new("/etc/pinctl/pinctld.toml")).unwrap();
    let latency = config.class("latency").unwrap();
    assert_eq!(latency.governor.as_deref(), Some("performance"));
    assert_eq!(latency.min_freq, Some(Freq::Base));
    assert_eq!(latency.max_freq, Some(Freq::Max));
    assert_eq!(latency.epp.as_deref(), Some("performance"));
    assert_eq!(latency.disabled_cstates, ["C6", "C1E"]);
    assert_eq!(latency.resume_latency_us, Some(ResumeLatency::NoLimit));
    assert_eq!(latency.uncore_min_freq, Some(Freq::Khz(2_400_000)));
    assert_eq!(latency.uncore_max_freq, Some(Freq::Max));
    assert_eq!(latency.line, 1);
    let efficient = config.class("efficient").unwrap();
    assert_eq!(efficient.max_freq, Some(Freq::Khz(1_800_000)));
    assert_eq!(efficient.epp.as_deref(), Some("128"));
    assert_eq!(efficient.resume_latency_us, Some(ResumeLatency::Us(0)));
    assert_eq!(efficient.min_freq, None);
    assert_eq!(
        config.power,
        Power {
            enabled: true,
            exclusive: Some("latency".into()),
            shared: Some("efficient".into()),
            reserved: None,
            slurm: Some("latency".into()),
        }
    );
    assert_eq!(config.rules[0].class.as_deref(), Some("efficient"));
    assert_eq!(config.power_originals, Path::new("/run/pinctl/power.json"));
}

#[test]
fn power_is_off_by_default_with_no_classes() {
    let config = parse("", Path::new("/etc/pinctl/pinctld.toml")).unwrap();
    assert!(!config.power.enabled);
    assert!(config.classes.is_empty());
    assert_eq!(config.power, Power::default());
}

#[test]
fn power_errors_name_file_line_and_field() {
    let cases = [
        (
            POWER.replace("exclusive = \"latency\"", "exclusive = \"fast\""),
            "/etc/pinctl/pinctld.toml:21:13: power.exclusive: unknown class \"fast\": the classes are latency, efficient",
        ),
        (
            POWER.replace("class = \"efficient\"", "class = \"eco\""),
            "/etc/pinctl/pinctld.toml:28:9: rule.class: unknown class \"eco\": the classes are latency, efficient",
        ),
        (
            POWER.replace("slurm = \"latency\"", "slurm = \"jobs\""),
            "/etc/pinctl/pinctld.toml:23:9: power.slurm: unknown class \"jobs\": the classes are latency, efficient",
        ),
        (
            POWER.replace("\"2.4GHz\"", "\"2.4Ghz5\""),
            "/etc/pinctl/pinctld.toml:9:19: class.uncore_min_freq: invalid frequency \"2.4Ghz5\": unknown unit: use kHz, MHz or GHz, or min, base or max",
        ),
        (
            POWER
                .replace("min_freq = \"base\"", "min_freq = \"3GHz\"")
                .replace("max_freq = \"max\"", "max_freq = \"2GHz\""),
            "/etc/pinctl/pinctld.toml:4:12: class.min_freq: 3000000kHz is above the class's maximum 2000000kHz",
        ),
        (
            POWER
                .replace("min_freq = \"base\"", "min_freq = \"max\"")
                .replace("max_freq = \"max\"", "max_freq = \"base\""),
            "/etc/pinctl/pinctld.toml:4:12: class.min_freq: max is above the class's maximum base",
        ),
        (
            POWER.replace("\"2.4GHz\"", "\"base\""),
            "/etc/pinctl/pinctld.toml:9:19: class.uncore_min_freq: invalid frequency \"base\": uncore has no base frequency; use min, max or a value",
        ),
        (
            POWER.replace("name = \"efficient\"", "name = \"latency\""),
            "/etc/pinctl/pinctld.toml:13:8: class.name: class \"latency\" is already defined on line 1",
        ),
        (
            POWER.replace("epp = 128", "epp = 256"),
            "/etc/pinctl/pinctld.toml:16:7: class.epp: invalid EPP 256: expected one of default, performance, balance_performance, balance_power, power or a number from 0 to 255",
        ),
        (
            POWER.replace("resume_latency_us = 0", "resume_latency_us = -1"),
            "/etc/pinctl/pinctld.toml:17:21: class.resume_latency_us: invalid resume latency -1: expected microseconds from 0 to 2147483647 or \"n/a\"",
        ),
        (
            POWER.replace("max_freq = 1800000", "max_freq = 0"),
            "/etc/pinctl/pinctld.toml:15:12: class.max_freq: invalid frequency 0: an integer is kHz, from 1 to 100000000",
        ),
        (
            POWER.replace("\"C1E\"", "\"C1 E\""),
            "/etc/pinctl/pinctld.toml:7:27: class.disabled_cstates: invalid C-state name \"C1 E\": write it as cpuidle/stateK/name shows it (\"C6\", \"C1E\")",
        ),
        (
            POWER.replace("governor = \"powersave\"", "governor = \"power save\""),
            "/etc/pinctl/pinctld.toml:14:12: class.governor: invalid governor \"power save\": a name such as \"performance\" (letters, digits, '_'; at most 15)",
        ),
        (
            POWER.replace("name = \"efficient\"", "name = \"eff/icient\""),
            "/etc/pinctl/pinctld.toml:13:8: class.name: invalid class name \"eff/icient\": letters, digits, '_', '.' and '-' only",
        ),
        (
            POWER.replace("enabled = true", "enabled = true\nturbo = 1"),
            "/etc/pinctl/pinctld.toml:21:1: unknown key `turbo` in [[power]]",
        ),
        (
            "[class]\nname = \"x\"\n".to_string(),
            "/etc/pinctl/pinctld.toml:1:1: class: expected an array of tables: write [[class]], not [class]",
        ),
    ];
    let wrong: Vec<String> = cases
        .iter()
        .filter(|(text, want)| power_err(text) != *want)
        .map(|(text, _)| power_err(text))
        .collect();
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn classes_and_the_power_switch_reload_and_the_originals_wait() {
    let path = Path::new("/etc/pinctl/pinctld.toml");
    let off = parse("", path).unwrap();
    let on = parse(POWER, path).unwrap();
    let r = off.reload(on.clone());
    assert_eq!(r.applied, ["rules", "classes", "power"]);
    assert!(r.deferred.is_empty());
    let moved = parse(
        &format!("power_originals = \"/run/elsewhere.json\"\n{POWER}"),
        path,
    )
    .unwrap();
    let r = on.reload(moved);
    assert_eq!(r.deferred, ["power_originals"]);
    assert_eq!(
        r.config.power_originals,
        Path::new("/run/pinctl/power.json")
    );
}
