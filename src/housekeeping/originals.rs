//! The housekeeping originals file: what each thing moved off the
//! exclusive CPUs had before the daemon first moved it.
//!
//! - It lives on the runtime directory (`housekeeping_originals`, by
//!   default `/run/pinctl/housekeeping.json`), which a reboot empties
//!   exactly when the kernel forgets what was written.
//! - It is replaced atomically ([`StateFile::save`]) before any write that
//!   adds to it, on an I/O thread.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{Kept, Knob, Memory};
use crate::state::{Loaded, StateError, StateFile};

/// One kept original.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Saved {
    knob: Knob,
    #[serde(flatten)]
    kept: Kept,
}

/// The body of the originals file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
struct Body {
    originals: Vec<Saved>,
}

/// What [`load`] found.
pub type Found = crate::state::Found<Memory>;

/// Reads the originals file at `path`.
pub fn load(path: &Path) -> Result<Found, StateError> {
    Ok(match StateFile::new(path).load::<Body>()? {
        Loaded::Fresh(body) => Found::Kept(
            body.originals
                .into_iter()
                .map(|s| (s.knob, s.kept))
                .collect(),
        ),
        Loaded::Missing => Found::Missing,
        Loaded::Quarantined { reason, moved_to } => {
            Found::Quarantined(format!("{reason}; moved to {}", moved_to.display()))
        }
    })
}

/// Replaces the originals file at `path` with `memory`, atomically.
pub fn save(path: &Path, memory: &Memory) -> Result<(), StateError> {
    let body = Body {
        originals: memory
            .iter()
            .map(|(knob, kept)| Saved {
                knob: knob.clone(),
                kept: kept.clone(),
            })
            .collect(),
    };
    StateFile::new(path).save(&body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::steer::Steered;

    #[test]
    fn what_is_saved_is_loaded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("housekeeping.json");
        assert!(matches!(load(&path).unwrap(), Found::Missing));
        let mut memory = Memory::new();
        for knob in [
            Knob::Workqueues,
            Knob::Workqueue {
                name: "writeback".into(),
            },
            Knob::Kthread { pid: 12, start: 3 },
            Knob::Rps {
                dev: "eth0".into(),
                queue: "rx-0".into(),
            },
        ] {
            memory.insert(
                knob.clone(),
                Kept {
                    what: knob.to_string(),
                    steered: Steered {
                        was: "0-3".parse().unwrap(),
                        set: "0-1".parse().unwrap(),
                    },
                    since: Some(7),
                },
            );
        }
        save(&path, &memory).unwrap();
        match load(&path).unwrap() {
            Found::Kept(back) => assert_eq!(back, memory),
            other => panic!("{other:?}"),
        }
        std::fs::write(&path, "{").unwrap();
        assert!(matches!(load(&path).unwrap(), Found::Quarantined(_)));
    }
}
