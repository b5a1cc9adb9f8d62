//! `pinctl run`'s policy: who may ask for exclusive CPUs over the run
//! socket, and why an ask is refused. Pure: the peer (as `SO_PEERCRED` and
//! `/proc/<pid>/status` tell it), the ask and what is held come in; a
//! decision comes out. The daemon does the rest (see issue #33's note).
//!
//! Root may always ask. Anyone else must be named in `[run] users` or be
//! in a group of `[run] groups` (primary or supplementary). Caps apply to
//! everyone: the CPUs of one ask (`max_cpus`) and those one user holds at
//! once (`max_cpus_per_user`); 0 is no cap.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The longest name a run may have: it becomes part of a cgroup's and a
/// unit's name.
pub const MAX_NAME: usize = 64;

/// At most this many words of the command are kept (for the status).
pub const MAX_COMMAND_WORDS: usize = 64;

/// What a client asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ask {
    /// Exclusive CPUs wanted.
    pub cpus: usize,
    /// The run's name (`run:<name>`); the daemon makes one when absent.
    #[serde(default)]
    pub name: Option<String>,
    /// The command, for the status and the audit trail.
    #[serde(default)]
    pub command: Vec<String>,
    /// How long to wait in line for the CPUs, in seconds, when they are
    /// not free (`None`: not at all, refused at once).
    #[serde(default)]
    pub wait: Option<u64>,
    /// The NUMA nodes to take the CPUs from, and from them alone (empty:
    /// any).
    #[serde(default)]
    pub numa: Vec<u32>,
    /// Where the command's memory goes (`None`: `[run] mem`).
    #[serde(default)]
    pub mem: Option<MemPolicy>,
    /// Whole physical cores only: no other workload on a sibling thread.
    #[serde(default)]
    pub full_cores: bool,
    /// The devices the command drives (`--near`), each a word of
    /// [`crate::devices::parse_list`]: its CPUs go on their NUMA nodes.
    #[serde(default)]
    pub near: Vec<String>,
    /// Its own `device_alignment` (`prefer`, `require`, `none`).
    #[serde(default)]
    pub device_alignment: Option<String>,
}

/// Where a run's memory goes: the NUMA nodes of its CPUs, as
/// `set_mempolicy(2)` says it (the client sets it before it execs; the
/// command and its children inherit it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemPolicy {
    /// Only those nodes (`MPOL_BIND`): an allocation fails rather than go
    /// elsewhere.
    Bind,
    /// Those nodes first (`MPOL_PREFERRED_MANY`, or `MPOL_PREFERRED` on
    /// kernels before 5.15), elsewhere when they are full.
    #[default]
    Prefer,
    /// The kernel's default: the node the allocating CPU is on.
    None,
}

impl MemPolicy {
    /// The value as written in the file and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            MemPolicy::Bind => "bind",
            MemPolicy::Prefer => "prefer",
            MemPolicy::None => "none",
        }
    }
}

impl std::str::FromStr for MemPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "bind" => Ok(MemPolicy::Bind),
            "prefer" => Ok(MemPolicy::Prefer),
            "none" => Ok(MemPolicy::None),
            other => Err(format!(
                "invalid memory policy {other:?}: expected one of bind, prefer, none"
            )),
        }
    }
}

/// The daemon's answer: one JSON line, after any number of [`Queued`]
/// lines while the ask waits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    /// The CPUs are the run's, and the asking process is in its cgroup.
    Granted(Grant),
    Refused(Refusal),
    /// Not an answer yet: the ask waits in line (`--wait`).
    Queued(Queued),
}

/// An ask waiting for its CPUs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Queued {
    /// Asks in line before it: served first, in the order they came.
    pub ahead: usize,
    /// CPUs free now.
    pub free: usize,
}

impl fmt::Display for Queued {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "waiting for CPUs: {} free", self.free)?;
        match self.ahead {
            0 => Ok(()),
            1 => write!(f, ", 1 ask ahead"),
            n => write!(f, ", {n} asks ahead"),
        }
    }
}

/// What a run was given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    /// Its workload key, `run:<name>`.
    pub key: String,
    /// Its cgroup, relative to the cpuset hierarchy.
    pub cgroup: String,
    /// Its exclusive CPUs.
    pub cpus: crate::cpuset::CpuSet,
    /// Their NUMA nodes.
    #[serde(default)]
    pub nodes: crate::cpuset::CpuSet,
    /// Where its memory goes.
    #[serde(default)]
    pub mem: MemPolicy,
}

/// The cgroup (and, under systemd, the transient scope) of the run `name`:
/// `run-<name>.scope`, in the `[run]` slice.
pub fn unit(name: &str) -> String {
    format!("run-{name}.scope")
}

/// The run's name in a cgroup's own name ([`unit()`]'s inverse).
pub fn name_of_unit(unit: &str) -> Option<&str> {
    unit.strip_prefix("run-")?
        .strip_suffix(".scope")
        .filter(|n| !n.is_empty())
}

/// The longest line either side sends.
pub const MAX_LINE: usize = 64 << 10;

/// Why `pinctl run` got no CPUs.
#[derive(Debug, thiserror::Error)]
pub enum AskError {
    #[error(
        "no run socket at {}: is pinctld running, with [run] enabled = true in its configuration?",
        socket.display()
    )]
    NoDaemon {
        socket: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot ask pinctld over {}", socket.display())]
    Io {
        socket: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("pinctld's answer over {} is not one: {answer:?}", socket.display())]
    Garbled {
        socket: std::path::PathBuf,
        answer: String,
    },
    #[error("{0}")]
    Refused(Refusal),
}

/// Asks the daemon over the run socket at `socket` for `ask`, for this
/// process: on `Ok` the process is in the run's cgroup, on its CPUs. The
/// connection stays open until the answer (the daemon moves the peer it
/// sees on it; closing it leaves the line); `queued` hears each word of an
/// ask that waits. `timeout` bounds each read and write.
pub fn ask(
    socket: &std::path::Path,
    ask: &Ask,
    timeout: std::time::Duration,
    mut queued: impl FnMut(&Queued),
) -> Result<Grant, AskError> {
    use std::io::{BufRead as _, Read as _, Write as _};
    let io = |source| AskError::Io {
        socket: socket.to_path_buf(),
        source,
    };
    let mut stream =
        std::os::unix::net::UnixStream::connect(socket).map_err(|source| match source.kind() {
            std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
                AskError::NoDaemon {
                    socket: socket.to_path_buf(),
                    source,
                }
            }
            _ => io(source),
        })?;
    stream.set_read_timeout(Some(timeout)).map_err(io)?;
    stream.set_write_timeout(Some(timeout)).map_err(io)?;
    let mut line = serde_json::to_string(ask).unwrap_or_default();
    line.push('\n');
    stream.write_all(line.as_bytes()).map_err(io)?;
    let mut reader = std::io::BufReader::new(stream);
    loop {
        let mut answer = String::new();
        (&mut reader)
            .take(MAX_LINE as u64)
            .read_line(&mut answer)
            .map_err(io)?;
        match serde_json::from_str::<Answer>(&answer) {
            Ok(Answer::Granted(grant)) => return Ok(grant),
            Ok(Answer::Refused(r)) => return Err(AskError::Refused(r)),
            Ok(Answer::Queued(q)) => queued(&q),
            Err(_) => {
                return Err(AskError::Garbled {
                    socket: socket.to_path_buf(),
                    answer,
                });
            }
        }
    }
}

/// Who asks, as the kernel says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub uid: u32,
    pub pid: u32,
    /// When the process started (clock ticks since boot, `/proc/<pid>/stat`):
    /// checked again just before it is moved, so a pid reused meanwhile
    /// is never moved in its place.
    pub start: u64,
    /// Its primary group and its supplementary groups.
    pub groups: Vec<u32>,
    /// The Slurm job it runs in, if any: the job's cgroup and name
    /// ([`crate::slurm::job_of`]).
    pub slurm_job: Option<(String, String)>,
}

/// The `[run]` table, with names resolved to ids.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    pub enabled: bool,
    /// Users allowed: (name, uid).
    pub users: Vec<(String, u32)>,
    /// Groups allowed: (name, gid).
    pub groups: Vec<(String, u32)>,
    /// The most CPUs of one ask (0: no cap).
    pub max_cpus: usize,
    /// The most CPUs one user holds at once (0: no cap).
    pub max_cpus_per_user: usize,
    /// Serve a peer that runs in a Slurm job (off: refused).
    pub allow_slurm_jobs: bool,
}

/// Why an ask is refused: each says what would have been accepted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "refused", rename_all = "snake_case")]
pub enum Refusal {
    /// `[run] enabled` is false.
    Disabled,
    /// The peer is neither root, a user named, nor in a group named.
    NotAllowed {
        uid: u32,
        users: Vec<String>,
        groups: Vec<String>,
    },
    /// The ask itself is wrong.
    Bad { why: String },
    /// More CPUs than one ask may have.
    TooMany { asked: usize, max: usize },
    /// More CPUs than one user may hold.
    OverUserCap {
        asked: usize,
        held: usize,
        max: usize,
    },
    /// Not enough free CPUs: how many are free, and who holds the rest;
    /// after waiting `waited` seconds in line, or behind `ahead` asks that
    /// wait.
    NotEnough {
        asked: usize,
        free: usize,
        holders: Vec<(String, usize)>,
        #[serde(default)]
        waited: u64,
        #[serde(default)]
        ahead: usize,
    },
    /// The peer runs in a Slurm job: a run would leave the job's cgroup.
    InSlurmJob {
        pid: u32,
        job: String,
        cgroup: String,
    },
    /// The daemon could not make the run's cgroup or move the process in.
    Failed { why: String },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Disabled => write!(
                f,
                "pinctl run is off on this node ([run] enabled = false in pinctld's configuration)"
            ),
            Refusal::NotAllowed { uid, users, groups } => {
                write!(f, "uid {uid} may not ask for CPUs: ")?;
                match (users.is_empty(), groups.is_empty()) {
                    (true, true) => write!(f, "only root may ([run] names no user or group)"),
                    (false, true) => write!(f, "only root and the users {} may", users.join(", ")),
                    (true, false) => {
                        write!(
                            f,
                            "only root and members of the groups {} may",
                            groups.join(", ")
                        )
                    }
                    (false, false) => write!(
                        f,
                        "only root, the users {} and members of the groups {} may",
                        users.join(", "),
                        groups.join(", ")
                    ),
                }
            }
            Refusal::Bad { why } => write!(f, "bad request: {why}"),
            Refusal::TooMany { asked, max } => {
                write!(
                    f,
                    "{asked} CPUs asked, at most {max} per run ([run] max_cpus)"
                )
            }
            Refusal::OverUserCap { asked, held, max } => write!(
                f,
                "{asked} CPUs asked beside {held} held, at most {max} per user ([run] max_cpus_per_user)"
            ),
            Refusal::NotEnough {
                asked,
                free,
                holders,
                waited,
                ahead,
            } => {
                write!(f, "{asked} CPUs asked, {free} free")?;
                if *waited > 0 {
                    write!(f, " after waiting {waited} s")?;
                }
                if !holders.is_empty() {
                    let held: Vec<String> =
                        holders.iter().map(|(k, n)| format!("{k} ({n})")).collect();
                    write!(f, "; held by {}", held.join(", "))?;
                }
                match ahead {
                    0 => Ok(()),
                    1 => write!(f, "; 1 ask waits before it (--wait to join the line)"),
                    n => write!(f, "; {n} asks wait before it (--wait to join the line)"),
                }
            }
            Refusal::InSlurmJob { pid, job, cgroup } => write!(
                f,
                "pid {pid} runs in Slurm's {job} ({cgroup}): a run would move it out of the \
                 job's cgroup, and out of Slurm's accounting, limits and scancel. Inside a \
                 job, bind with srun --cpu-bind=cores, or have pinctld serve it with [run] \
                 allow_slurm_jobs = true"
            ),
            Refusal::Failed { why } => write!(f, "pinctld could not set the run up: {why}"),
        }
    }
}

impl Ask {
    /// Checks the ask's own fields: a name that can be part of a cgroup's
    /// and a unit's name, some CPUs, a bounded command.
    pub fn check(&self) -> Result<(), Refusal> {
        let bad = |why: String| Err(Refusal::Bad { why });
        if self.cpus == 0 {
            return bad("0 CPUs asked".into());
        }
        if self.cpus > crate::cpuset::MAX_CPUS {
            return bad(format!(
                "{} CPUs asked: no machine has that many",
                self.cpus
            ));
        }
        if let Some(name) = &self.name {
            if name.is_empty() || name.len() > MAX_NAME {
                return bad(format!("a name has 1 to {MAX_NAME} characters"));
            }
            if let Some(c) = name
                .chars()
                .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
            {
                return bad(format!(
                    "{c:?} in the name {name:?}: letters, digits, '_', '.' and '-' only"
                ));
            }
            if name.starts_with(['.', '-']) {
                return bad(format!("the name {name:?} starts with {:?}", &name[..1]));
            }
        }
        if self.command.len() > MAX_COMMAND_WORDS {
            return bad(format!("a command of more than {MAX_COMMAND_WORDS} words"));
        }
        Ok(())
    }
}

impl Policy {
    /// Whether `peer` may ask for `ask`, holding `held` CPUs already.
    pub fn admit(&self, peer: &Peer, ask: &Ask, held: usize) -> Result<(), Refusal> {
        if !self.enabled {
            return Err(Refusal::Disabled);
        }
        let allowed = peer.uid == 0
            || self.users.iter().any(|(_, uid)| *uid == peer.uid)
            || self.groups.iter().any(|(_, gid)| peer.groups.contains(gid));
        if !allowed {
            return Err(Refusal::NotAllowed {
                uid: peer.uid,
                users: self.users.iter().map(|(n, _)| n.clone()).collect(),
                groups: self.groups.iter().map(|(n, _)| n.clone()).collect(),
            });
        }
        if let Some((cgroup, job)) = &peer.slurm_job
            && !self.allow_slurm_jobs
        {
            return Err(Refusal::InSlurmJob {
                pid: peer.pid,
                job: job.clone(),
                cgroup: cgroup.clone(),
            });
        }
        ask.check()?;
        if self.max_cpus > 0 && ask.cpus > self.max_cpus {
            return Err(Refusal::TooMany {
                asked: ask.cpus,
                max: self.max_cpus,
            });
        }
        if self.max_cpus_per_user > 0 && held + ask.cpus > self.max_cpus_per_user {
            return Err(Refusal::OverUserCap {
                asked: ask.cpus,
                held,
                max: self.max_cpus_per_user,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Policy {
        Policy {
            enabled: true,
            users: vec![("alice".into(), 1001)],
            groups: vec![("hpc".into(), 2000)],
            max_cpus: 8,
            max_cpus_per_user: 12,
            allow_slurm_jobs: false,
        }
    }

    fn peer(uid: u32, groups: &[u32]) -> Peer {
        Peer {
            uid,
            pid: 4242,
            start: 1,
            groups: groups.to_vec(),
            slurm_job: None,
        }
    }

    /// A peer in a Slurm job is refused, root too, with what to do
    /// instead; served once the file allows it.
    #[test]
    fn a_peer_in_a_slurm_job_is_refused_unless_allowed() {
        let in_job = Peer {
            slurm_job: Some((
                "system.slice/slurmstepd.scope/job_42".into(),
                "job_42".into(),
            )),
            ..peer(0, &[0])
        };
        let e = policy().admit(&in_job, &ask(2), 0).unwrap_err();
        let text = e.to_string();
        for want in [
            "pid 4242 runs in Slurm's job_42",
            "srun --cpu-bind",
            "allow_slurm_jobs",
        ] {
            assert!(text.contains(want), "{text}");
        }
        let allowed = Policy {
            allow_slurm_jobs: true,
            ..policy()
        };
        assert_eq!(allowed.admit(&in_job, &ask(2), 0), Ok(()));
    }

    fn ask(cpus: usize) -> Ask {
        Ask {
            cpus,
            ..Ask::default()
        }
    }

    #[test]
    fn root_a_user_named_and_a_member_may_ask_no_one_else() {
        let p = policy();
        assert_eq!(p.admit(&peer(0, &[0]), &ask(2), 0), Ok(()));
        assert_eq!(p.admit(&peer(1001, &[1001]), &ask(2), 0), Ok(()));
        assert_eq!(p.admit(&peer(1002, &[1002, 2000]), &ask(2), 0), Ok(()));
        let no = p.admit(&peer(1003, &[1003, 27]), &ask(2), 0).unwrap_err();
        assert_eq!(
            no.to_string(),
            "uid 1003 may not ask for CPUs: only root, the users alice and members of the groups hpc may"
        );
        let off = Policy {
            enabled: false,
            ..policy()
        };
        assert_eq!(
            off.admit(&peer(0, &[0]), &ask(2), 0),
            Err(Refusal::Disabled)
        );
    }

    #[test]
    fn caps_apply_to_everyone_and_say_which_key() {
        let p = policy();
        let e = p.admit(&peer(0, &[0]), &ask(9), 0).unwrap_err();
        assert_eq!(
            e.to_string(),
            "9 CPUs asked, at most 8 per run ([run] max_cpus)"
        );
        let e = p.admit(&peer(1001, &[]), &ask(4), 10).unwrap_err();
        assert_eq!(
            e.to_string(),
            "4 CPUs asked beside 10 held, at most 12 per user ([run] max_cpus_per_user)"
        );
        assert_eq!(p.admit(&peer(1001, &[]), &ask(2), 10), Ok(()));
        let open = Policy {
            max_cpus: 0,
            max_cpus_per_user: 0,
            ..policy()
        };
        assert_eq!(open.admit(&peer(1001, &[]), &ask(200), 500), Ok(()));
    }

    #[test]
    fn a_bad_ask_says_what_is_wrong() {
        let p = policy();
        let with = |name: &str| Ask {
            cpus: 2,
            name: Some(name.into()),
            ..Ask::default()
        };
        let why = |a: &Ask| p.admit(&peer(0, &[]), a, 0).unwrap_err().to_string();
        assert_eq!(why(&ask(0)), "bad request: 0 CPUs asked");
        assert!(
            why(&with("a/b")).contains("'/' in the name"),
            "{}",
            why(&with("a/b"))
        );
        assert!(why(&with("..")).contains("starts with"));
        assert!(why(&with("")).contains("1 to 64"));
        assert!(why(&with(&"x".repeat(65))).contains("1 to 64"));
        assert_eq!(p.admit(&peer(0, &[]), &with("lammps-3.run_1"), 0), Ok(()));
        let long = Ask {
            cpus: 1,
            command: vec!["x".into(); 65],
            ..Ask::default()
        };
        assert!(why(&long).contains("64 words"));
    }

    #[test]
    fn not_enough_names_the_free_count_and_the_holders() {
        let holders = vec![("run:lammps".into(), 8), ("pod:1/app".into(), 2)];
        let r = |waited, ahead| Refusal::NotEnough {
            asked: 16,
            free: 6,
            holders: holders.clone(),
            waited,
            ahead,
        };
        assert_eq!(
            r(0, 0).to_string(),
            "16 CPUs asked, 6 free; held by run:lammps (8), pod:1/app (2)"
        );
        assert_eq!(
            r(30, 0).to_string(),
            "16 CPUs asked, 6 free after waiting 30 s; held by run:lammps (8), pod:1/app (2)"
        );
        assert!(
            r(0, 2)
                .to_string()
                .ends_with("; 2 asks wait before it (--wait to join the line)")
        );
        let q = |ahead| Queued { ahead, free: 3 }.to_string();
        assert_eq!(q(0), "waiting for CPUs: 3 free");
        assert_eq!(q(1), "waiting for CPUs: 3 free, 1 ask ahead");
    }

    #[test]
    fn an_ask_reads_from_json_and_refuses_unknown_fields() {
        let a: Ask = serde_json::from_str(r#"{"cpus":2,"command":["lmp"]}"#).unwrap();
        assert_eq!((a.cpus, a.command.len()), (2, 1));
        assert!(serde_json::from_str::<Ask>(r#"{"cpus":2,"pid":1}"#).is_err());
    }
}
