//! The state file envelope: format, atomic replace, quarantine of anything that
//! is not a valid state, and the errors that are not corruption.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use pinctl::state::{Loaded, MAX_QUARANTINED, Peeked, STATE_VERSION, StateError, StateFile};
use proptest::prelude::*;
use serde::{Deserialize, Serialize};
use tempfile::TempDir;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Body {
    name: String,
    cpus: Vec<u32>,
    generation: u64,
}

fn body() -> Body {
    Body {
        name: "kubepods-pod1234.slice".to_owned(),
        cpus: vec![2, 3, 10, 11],
        generation: 7,
    }
}

fn setup() -> (TempDir, StateFile) {
    let dir = tempfile::tempdir().unwrap();
    let state = StateFile::new(dir.path().join("state.json"));
    (dir, state)
}

fn crc(body: &str) -> String {
    format!("crc32:{:08x}", crc32fast::hash(body.as_bytes()))
}

/// A file in the documented format, built by hand.
fn envelope(version: &str, checksum: &str, state: &str) -> String {
    format!("{{\"version\":{version},\"checksum\":\"{checksum}\",\"state\":{state}}}\n")
}

fn valid_file() -> String {
    let state = serde_json::to_string(&body()).unwrap();
    envelope("1", &crc(&state), &state)
}

/// File names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

fn load(state: &StateFile) -> Loaded<Body> {
    state.load().unwrap()
}

#[test]
fn round_trip() {
    let (_dir, state) = setup();
    state.save(&body()).unwrap();
    assert_eq!(load(&state), Loaded::Fresh(body()));
}

#[test]
fn on_disk_format_is_exactly_the_documented_envelope() {
    let (_dir, state) = setup();
    state.save(&body()).unwrap();
    let text = fs::read_to_string(state.path()).unwrap();

    let body_json = r#"{"name":"kubepods-pod1234.slice","cpus":[2,3,10,11],"generation":7}"#;
    assert_eq!(text, envelope("1", &crc(body_json), body_json));

    // Parse it back by hand: the checksum covers the body bytes as in the file.
    let rest = text.strip_prefix(r#"{"version":1,"checksum":""#).unwrap();
    let (checksum, rest) = rest.split_once('"').unwrap();
    let raw_body = rest
        .strip_prefix(r#","state":"#)
        .unwrap()
        .strip_suffix("}\n")
        .unwrap();
    assert_eq!(checksum, crc(raw_body));
    assert_eq!(checksum.len(), "crc32:".len() + 8);
    assert!(
        checksum[6..]
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    );
    assert_eq!(serde_json::from_str::<Body>(raw_body).unwrap(), body());
    assert_eq!(STATE_VERSION, 1);
}

/// The daemon's group (`pinctl` under the shipped unit, whose
/// `StateDirectory=` makes the directory) may read the state, for
/// `pinctl status --offline`; nobody else may. It was 0600: the group could
/// not use `--offline`.
#[test]
fn file_is_0640_and_created_directories_are_0750() {
    let dir = tempfile::tempdir().unwrap();
    let state = StateFile::new(dir.path().join("var/lib/pinctl/state.json"));
    state.save(&body()).unwrap();

    assert_eq!(load(&state), Loaded::Fresh(body()));
    let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(state.path()), 0o640);
    assert_eq!(mode(&dir.path().join("var/lib/pinctl")), 0o750);
    assert_eq!(mode(&dir.path().join("var")), 0o750);
}

/// One daemon per state file: the lock is exclusive while held, names its
/// holder, and is free again once dropped.
#[test]
fn the_single_instance_lock_is_held_once() {
    let (_dir, state) = setup();
    let first = state.lock().unwrap();
    assert!(first.path().ends_with("state.json.lock"));
    match state.lock() {
        Err(StateError::Locked { holder, .. }) => {
            assert_eq!(holder, Some(std::process::id()));
        }
        other => panic!("a second lock: {other:?}"),
    }
    let message = state.lock().unwrap_err().to_string();
    assert!(
        message.contains("another pinctld already runs") && message.contains("state.json.lock"),
        "{message}"
    );
    drop(first);
    state.lock().expect("free again once dropped");
    // Taking the lock never touches the state itself.
    assert_eq!(load(&state), Loaded::Missing);
}

#[test]
fn missing_file_is_missing() {
    let (_dir, state) = setup();
    assert_eq!(load(&state), Loaded::Missing);
}

#[test]
fn missing_directory_is_missing_not_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let state = StateFile::new(dir.path().join("nope/state.json"));
    assert_eq!(load(&state), Loaded::Missing);
}

/// Each kind of invalid file, and what the reason must say about it.
fn corruptions() -> Vec<(&'static str, Vec<u8>, &'static str)> {
    let good_state = serde_json::to_string(&body()).unwrap();
    let good_crc = crc(&good_state);
    let valid = valid_file().into_bytes();

    let mut invalid_utf8 = valid.clone();
    let at = valid_file().find("kubepods").unwrap();
    invalid_utf8[at] = 0xff;

    let edited = good_state.replace("[2,3,10,11]", "[2,3,10,12]");
    let other = Body {
        generation: 8,
        ..body()
    };
    let other_state = serde_json::to_string(&other).unwrap();

    vec![
        ("empty", vec![], "state file is empty"),
        ("whitespace only", b"\n  \n".to_vec(), "state file is empty"),
        (
            "zero-filled",
            vec![0; 120],
            "state file contains only NUL bytes (120 bytes)",
        ),
        (
            "truncated",
            valid[..valid.len() / 2].to_vec(),
            "state file is truncated: EOF while parsing",
        ),
        (
            "truncated before the closing brace",
            valid[..valid.len() - 2].to_vec(),
            "state file is truncated",
        ),
        (
            "invalid UTF-8",
            invalid_utf8,
            "state file is not valid UTF-8",
        ),
        (
            "not JSON",
            b"cpus=2-3\n".to_vec(),
            "state file is not valid JSON",
        ),
        (
            "trailing garbage",
            [valid.as_slice(), b"}"].concat(),
            "state file is not valid JSON: trailing characters",
        ),
        (
            "body edited by hand",
            envelope("1", &good_crc, &edited).into_bytes(),
            "state file checksum mismatch: recorded crc32:",
        ),
        (
            "checksum of another body",
            envelope("1", &crc(&other_state), &good_state).into_bytes(),
            "(edited by hand or torn)",
        ),
        (
            "uppercase checksum",
            envelope("1", &good_crc.to_uppercase(), &good_state).into_bytes(),
            "is not in the form \"crc32:\" followed by 8 lowercase hex digits",
        ),
        (
            "other algorithm",
            envelope("1", "md5:0123456789abcdef", &good_state).into_bytes(),
            "state file checksum \"md5:0123456789abcdef\" is not in the form",
        ),
        (
            "short checksum",
            envelope("1", &good_crc[..13], &good_state).into_bytes(),
            "is not in the form",
        ),
        (
            "missing checksum",
            format!("{{\"version\":1,\"state\":{good_state}}}\n").into_bytes(),
            "missing field `checksum`",
        ),
        (
            "missing state",
            format!("{{\"version\":1,\"checksum\":\"{good_crc}\"}}\n").into_bytes(),
            "missing field `state`",
        ),
        (
            "missing version",
            format!("{{\"checksum\":\"{good_crc}\",\"state\":{good_state}}}\n").into_bytes(),
            "state file has no version",
        ),
        (
            "version 2",
            envelope("2", &good_crc, &good_state).into_bytes(),
            "state file version 2 is not supported by this pinctld (supports 1)",
        ),
        (
            "version 0",
            envelope("0", &good_crc, &good_state).into_bytes(),
            "state file version 0 is not supported by this pinctld (supports 1)",
        ),
        (
            "version as a string",
            envelope("\"1\"", &good_crc, &good_state).into_bytes(),
            "state file version \"1\" is not a version number",
        ),
        (
            "unknown field",
            format!(
                "{{\"version\":1,\"checksum\":\"{good_crc}\",\"state\":{good_state},\"x\":1}}\n"
            )
            .into_bytes(),
            "unknown field `x`",
        ),
        (
            "not an object",
            b"[1,2,3]\n".to_vec(),
            "state file is not a JSON object",
        ),
        (
            "envelope as an array",
            format!("[1,\"{good_crc}\",{good_state}]\n").into_bytes(),
            "state file is not a JSON object",
        ),
        (
            "envelope as a string",
            b"\"state\"\n".to_vec(),
            "state file is not a JSON object",
        ),
        (
            "version of the wrong type",
            envelope("{}", &good_crc, &good_state).into_bytes(),
            "state file version {} is not a version number",
        ),
        (
            "duplicate state",
            format!(
                "{{\"version\":1,\"checksum\":\"{good_crc}\",\"state\":{good_state},\"state\":{good_state}}}\n"
            )
            .into_bytes(),
            "state file is not a valid state envelope: duplicate field `state`",
        ),
        (
            "body of the wrong shape",
            envelope("1", &crc(r#"{"name":5}"#), r#"{"name":5}"#).into_bytes(),
            "state file body does not match this pinctld's state: invalid type: integer `5`",
        ),
        (
            "body missing a field",
            envelope("1", &crc(r#"{"name":"a"}"#), r#"{"name":"a"}"#).into_bytes(),
            "state file body does not match this pinctld's state: missing field `cpus`",
        ),
    ]
}

#[test]
fn every_kind_of_corruption_is_quarantined_then_missing_then_saveable() {
    for (case, bytes, expected) in corruptions() {
        let (dir, state) = setup();
        fs::write(state.path(), &bytes).unwrap();

        let Loaded::Quarantined { reason, moved_to } = load(&state) else {
            panic!("{case}: expected Quarantined");
        };
        assert!(
            reason.contains(expected),
            "{case}: reason {reason:?} does not contain {expected:?}"
        );
        assert!(
            !reason.contains('\n'),
            "{case}: multi-line reason {reason:?}"
        );

        // Moved aside intact, never deleted or rewritten.
        assert_eq!(moved_to.parent(), Some(dir.path()), "{case}");
        let moved_name = moved_to.file_name().unwrap().to_str().unwrap();
        let secs = moved_name.strip_prefix("state.json.corrupt-").unwrap();
        assert!(
            secs.bytes().all(|b| b.is_ascii_digit()),
            "{case}: {moved_name}"
        );
        assert_eq!(fs::read(&moved_to).unwrap(), bytes, "{case}");
        assert!(!state.path().exists(), "{case}");

        assert_eq!(load(&state), Loaded::Missing, "{case}");
        state.save(&body()).unwrap();
        assert_eq!(load(&state), Loaded::Fresh(body()), "{case}");
        assert_eq!(names(dir.path()), ["state.json", moved_name], "{case}");
    }
}

#[test]
fn version_2_reason_is_exact() {
    let (_dir, state) = setup();
    let good_state = serde_json::to_string(&body()).unwrap();
    fs::write(state.path(), envelope("2", &crc(&good_state), &good_state)).unwrap();
    let Loaded::Quarantined { reason, .. } = load(&state) else {
        panic!("expected Quarantined");
    };
    assert_eq!(
        reason,
        "state file version 2 is not supported by this pinctld (supports 1)"
    );
}

#[test]
fn a_future_version_with_other_fields_is_reported_as_a_version() {
    let (_dir, state) = setup();
    fs::write(
        state.path(),
        "{\"version\":3,\"sha256\":\"ab\",\"body\":{}}\n",
    )
    .unwrap();
    let Loaded::Quarantined { reason, .. } = load(&state) else {
        panic!("expected Quarantined");
    };
    assert_eq!(
        reason,
        "state file version 3 is not supported by this pinctld (supports 1)"
    );
}

#[test]
fn reasons_with_control_characters_stay_on_one_line() {
    let (_dir, state) = setup();
    let good_state = serde_json::to_string(&body()).unwrap();
    fs::write(state.path(), envelope("1", "crc32:\\n\\u0007", &good_state)).unwrap();
    let Loaded::Quarantined { reason, .. } = load(&state) else {
        panic!("expected Quarantined");
    };
    assert!(
        !reason.contains('\n') && !reason.contains('\u{7}'),
        "{reason:?}"
    );
}

#[test]
fn quarantine_keeps_at_most_five_files() {
    let (dir, state) = setup();
    // Files that merely look similar are never pruned.
    fs::write(dir.path().join("state.json.corrupt-notes"), "keep").unwrap();
    fs::write(dir.path().join("other.json.corrupt-1"), "keep").unwrap();

    let mut moved = Vec::new();
    for i in 0..MAX_QUARANTINED + 2 {
        fs::write(state.path(), format!("garbage {i}")).unwrap();
        let Loaded::Quarantined { moved_to, .. } = load(&state) else {
            panic!("expected Quarantined");
        };
        assert_eq!(
            fs::read_to_string(&moved_to).unwrap(),
            format!("garbage {i}")
        );
        assert!(!moved.contains(&moved_to), "{moved_to:?} reused");
        moved.push(moved_to);
    }

    assert!(!moved[0].exists());
    assert!(!moved[1].exists());
    for kept in &moved[2..] {
        assert!(kept.exists(), "{kept:?} was pruned");
    }
    let quarantined = names(dir.path())
        .into_iter()
        .filter(|n| n.starts_with("state.json.corrupt-") && n != "state.json.corrupt-notes")
        .count();
    assert_eq!(quarantined, MAX_QUARANTINED);
    assert!(dir.path().join("state.json.corrupt-notes").exists());
    assert!(dir.path().join("other.json.corrupt-1").exists());
}

#[test]
fn quarantine_keeps_the_newest_file_even_when_the_clock_went_backwards() {
    let (dir, state) = setup();
    for n in 0..MAX_QUARANTINED {
        let suffix = if n == 0 {
            String::new()
        } else {
            format!("-{n}")
        };
        let future = dir
            .path()
            .join(format!("state.json.corrupt-99999999999{suffix}"));
        fs::write(future, "from the future").unwrap();
    }
    fs::write(state.path(), "garbage").unwrap();
    let Loaded::Quarantined { moved_to, .. } = load(&state) else {
        panic!("expected Quarantined");
    };
    assert_eq!(fs::read_to_string(&moved_to).unwrap(), "garbage");
    // The lowest key went, even though it is later than the clock's "now".
    assert!(!dir.path().join("state.json.corrupt-99999999999").exists());
    assert!(dir.path().join("state.json.corrupt-99999999999-1").exists());
    assert_eq!(names(dir.path()).len(), MAX_QUARANTINED);
}

#[test]
fn unreadable_file_is_an_error_not_a_quarantine() {
    // chmod 000 does not stop root, so put a directory where the file should be.
    let (dir, state) = setup();
    fs::create_dir(state.path()).unwrap();

    let err = state.load::<Body>().unwrap_err();
    assert!(matches!(err, StateError::Read { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!("failed to read state file {}", state.path().display())
    );
    assert!(std::error::Error::source(&err).is_some());
    assert!(state.path().is_dir(), "the unreadable path was moved");
    assert_eq!(names(dir.path()), ["state.json"]);
}

#[test]
fn save_error_names_the_path_and_leaves_no_temp_file() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("not-a-dir"), "").unwrap();
    let state = StateFile::new(dir.path().join("not-a-dir/state.json"));

    let err = state.save(&body()).unwrap_err();
    assert!(matches!(err, StateError::CreateDir { .. }), "{err:?}");
    assert!(err.to_string().contains("not-a-dir"), "{err}");

    // Renaming over a directory fails after the temp file was written.
    let (dir, state) = setup();
    fs::create_dir(state.path()).unwrap();
    let err = state.save(&body()).unwrap_err();
    assert!(matches!(err, StateError::Rename { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains(&state.path().display().to_string()),
        "{err}"
    );
    assert_eq!(names(dir.path()), ["state.json"]);
}

#[test]
fn no_temp_file_is_left_after_save() {
    let (dir, state) = setup();
    state.save(&body()).unwrap();
    state.save(&body()).unwrap();
    assert_eq!(names(dir.path()), ["state.json"]);
}

#[test]
fn leftover_temp_files_from_a_crash_do_not_break_load_or_save() {
    let (dir, state) = setup();
    let tmp = |pid: &str| dir.path().join(format!(".state.json.tmp-{pid}"));
    fs::write(tmp("123"), "{\"version\":1,\"che").unwrap();
    // Same pid as ours: a crashed process whose pid was reused.
    fs::write(tmp(&std::process::id().to_string()), "torn").unwrap();
    // No such process: pid_max is at most 2^22.
    fs::write(tmp("999999999"), "torn").unwrap();
    // pid 1 always exists: its temp file might be in use and is left alone.
    fs::write(tmp("1"), "in use").unwrap();

    assert_eq!(load(&state), Loaded::Missing);
    state.save(&body()).unwrap();
    assert_eq!(load(&state), Loaded::Fresh(body()));

    assert!(!tmp(&std::process::id().to_string()).exists());
    assert!(!tmp("999999999").exists(), "stale temp file not removed");
    assert_eq!(fs::read_to_string(tmp("1")).unwrap(), "in use");

    // Also with an existing state file.
    let newer = Body {
        generation: 8,
        ..body()
    };
    fs::write(tmp("123"), "torn").unwrap();
    state.save(&newer).unwrap();
    assert_eq!(load(&state), Loaded::Fresh(newer));
}

#[test]
fn save_replaces_an_existing_file() {
    let (_dir, state) = setup();
    state.save(&body()).unwrap();
    let shorter = Body {
        name: "a".to_owned(),
        cpus: vec![],
        generation: 9,
    };
    state.save(&shorter).unwrap();
    assert_eq!(load(&state), Loaded::Fresh(shorter.clone()));
    let text = fs::read_to_string(state.path()).unwrap();
    assert!(text.ends_with("\"generation\":9}}\n"), "{text}");
}

#[test]
fn a_reader_during_repeated_saves_always_sees_a_complete_state() {
    let (_dir, state) = setup();
    // Big enough that a non-atomic write would be seen half done.
    let big = |generation| Body {
        name: "x".repeat(256 * 1024),
        cpus: (0..1024).collect(),
        generation,
    };
    state.save(&big(0)).unwrap();

    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let state = state.clone();
        let done = Arc::clone(&done);
        std::thread::spawn(move || {
            let mut reads = 0;
            while !done.load(Ordering::Acquire) {
                match state.load::<Body>() {
                    Ok(Loaded::Fresh(b)) => assert_eq!(b.name.len(), 256 * 1024),
                    other => panic!("reader saw {other:?} after {reads} reads"),
                }
                reads += 1;
            }
            reads
        })
    };
    for generation in 1..=200 {
        state.save(&big(generation)).unwrap();
    }
    done.store(true, Ordering::Release);
    let reads = reader.join().unwrap();
    assert!(reads > 0);
    assert_eq!(load(&state), Loaded::Fresh(big(200)));
}

#[test]
fn path_is_kept() {
    let state = StateFile::new("/var/lib/pinctl/state.json");
    assert_eq!(state.path(), PathBuf::from("/var/lib/pinctl/state.json"));
}

fn arb_body() -> impl Strategy<Value = Body> {
    (
        "\\PC{0,24}",
        prop::collection::vec(0u32..512, 0..8),
        any::<u64>(),
    )
        .prop_map(|(name, cpus, generation)| Body {
            name,
            cpus,
            generation,
        })
}

proptest! {
    #[test]
    fn any_body_round_trips(body in arb_body()) {
        let (_dir, state) = setup();
        state.save(&body).unwrap();
        prop_assert_eq!(load(&state), Loaded::Fresh(body));
    }

    #[test]
    fn flipping_any_byte_never_panics_or_errors(
        body in arb_body(),
        at in any::<prop::sample::Index>(),
        mask in 1u8..=255,
    ) {
        let (dir, state) = setup();
        state.save(&body).unwrap();
        let mut bytes = fs::read(state.path()).unwrap();
        let at = at.index(bytes.len());
        bytes[at] ^= mask;
        fs::write(state.path(), &bytes).unwrap();

        match state.load::<Body>() {
            // The only bytes outside the checksummed body that JSON ignores:
            // the trailing newline turned into other whitespace.
            Ok(Loaded::Fresh(loaded)) => {
                prop_assert_eq!(at, bytes.len() - 1);
                prop_assert_eq!(loaded, body);
            }
            Ok(Loaded::Quarantined { reason, moved_to }) => {
                prop_assert!(!reason.is_empty() && !reason.contains('\n'), "{:?}", reason);
                prop_assert_eq!(fs::read(&moved_to).unwrap(), bytes);
                prop_assert!(!state.path().exists());
                prop_assert_eq!(moved_to.parent(), Some(dir.path()));
            }
            other => prop_assert!(false, "flip at {} gave {:?}", at, other),
        }
    }
}

/// `pinctl status --offline` reads the daemon's state file: it must never
/// move it, even when it is corrupt (that is the daemon's call, at start-up).
#[test]
fn peek_reads_like_load_but_never_moves_a_corrupt_file() {
    let (dir, state) = setup();
    assert_eq!(state.peek::<Body>().unwrap(), Peeked::Missing);
    state.save(&body()).unwrap();
    assert_eq!(state.peek::<Body>().unwrap(), Peeked::Fresh(body()));
    fs::write(
        state.path(),
        "{\"version\":1,\"checksum\":\"crc32:00000000\",\"state\":{}}\n",
    )
    .unwrap();
    match state.peek::<Body>().unwrap() {
        Peeked::Invalid { reason } => assert!(reason.contains("checksum"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(names(dir.path()), ["state.json"], "left where it was");
}
