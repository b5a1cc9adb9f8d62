//! The configuration's own unit tests (the file-level ones are in
//! `tests/it/config.rs`).

use super::raw::*;
use super::*;

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
