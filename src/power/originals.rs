//! The originals file: what each power file held before the daemon first
//! wrote it, kept apart from the state file.
//!
//! It lives on the runtime directory (`power_originals`, by default
//! `/run/pinctl/power.json`), which a reboot empties exactly when sysfs
//! forgets what was written; losing the state file (`/var/lib`) never loses
//! it. It is replaced atomically ([`StateFile::save`]: temporary file,
//! `fsync`, `rename`) before any write that needs an original it adds, on
//! an I/O thread.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::Knob;
use crate::state::{Loaded, StateError, StateFile};

/// One kept original.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Saved {
    /// The file, relative to the sysfs root, for a reader of the file.
    file: String,
    knob: Knob,
    value: String,
}

/// The body of the originals file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
struct Body {
    originals: Vec<Saved>,
}

/// What [`load`] found.
pub type Found = crate::state::Found<BTreeMap<Knob, String>>;

/// Reads the originals file at `path`.
pub fn load(path: &Path) -> Result<Found, StateError> {
    Ok(match StateFile::new(path).load::<Body>()? {
        Loaded::Fresh(body) => Found::Kept(
            body.originals
                .into_iter()
                .map(|s| (s.knob, s.value))
                .collect(),
        ),
        Loaded::Missing => Found::Missing,
        Loaded::Quarantined { reason, moved_to } => {
            Found::Quarantined(format!("{reason}; moved to {}", moved_to.display()))
        }
    })
}

/// Replaces the originals file at `path` with `originals`, atomically.
pub fn save(path: &Path, originals: &BTreeMap<Knob, String>) -> Result<(), StateError> {
    let body = Body {
        originals: originals
            .iter()
            .map(|(knob, value)| Saved {
                file: knob.rel_path(),
                knob: knob.clone(),
                value: value.clone(),
            })
            .collect(),
    };
    StateFile::new(path).save(&body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn originals_round_trip_and_a_missing_file_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run/power.json");
        assert!(matches!(load(&path).unwrap(), Found::Missing));
        let kept = BTreeMap::from([
            (Knob::Governor(3), "powersave".to_string()),
            (Knob::UncoreMin("package_00_die_00".into()), "800000".into()),
            (Knob::CstateDisable(1, 3), "0".into()),
        ]);
        save(&path, &kept).unwrap();
        match load(&path).unwrap() {
            Found::Kept(k) => assert_eq!(k, kept),
            other => panic!("{other:?}"),
        }
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("devices/system/cpu/cpu3/cpufreq/scaling_governor"));
    }

    #[test]
    fn a_torn_originals_file_is_quarantined() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("power.json");
        std::fs::write(&path, "{\"version\":1,").unwrap();
        assert!(matches!(load(&path).unwrap(), Found::Quarantined(_)));
    }
}
