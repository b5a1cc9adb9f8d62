//! The sampler: every [`EVERY`] it reads the kernel's view (the effective
//! set) of every live workload and checks it. See `main.rs` for the checks
//! and why they are shaped so.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use pinctl::CpuSet;

use crate::Soak;
use crate::world::{Entry, Live};

/// How often the sampler reads.
pub const EVERY: Duration = Duration::from_millis(100);
/// A holding set counts as pinned once it has not changed for this long.
pub const STABLE: Duration = Duration::from_secs(1);
/// How long a shared workload may still overlap a pinned workload's CPUs,
/// counted while the daemon is up and ready, before it is a leak.
pub const LEAK_AFTER: Duration = Duration::from_secs(2);

/// The kinds of failure the sampler finds.
pub const OVERLAP: &str = "OVERLAP";
pub const LOST_PIN: &str = "LOST PIN";
pub const LEAK: &str = "LEAK";

/// A workload's effective set; `None` when it cannot be read (not made
/// yet, a run not granted yet, or gone).
pub fn read_set(file: &Path) -> Option<CpuSet> {
    fs::read_to_string(file).ok()?.trim().parse().ok()
}

/// Whether `set` holds CPUs of its own: not empty, and without a reserved
/// CPU (the shared pool always has those).
pub fn holds(set: &CpuSet, reserved: &CpuSet) -> bool {
    !set.is_empty() && set.is_disjoint(reserved)
}

/// What the sampler knows of one workload across samples.
struct Track {
    /// Its set at the last sample, and since when it had it.
    set: Option<CpuSet>,
    since: Instant,
    /// The holding set it has had for [`STABLE`] or more, and since when.
    pinned: Option<(CpuSet, Instant)>,
    /// Since when (the daemon up) it has overlapped a pinned workload's CPUs.
    leak_since: Option<Instant>,
}

/// What the last sample saw, for the records and the recovery check.
#[derive(Default, Clone)]
pub struct View {
    /// The pinned workloads ([`STABLE`]) and their CPUs.
    pub pinned: BTreeMap<u64, CpuSet>,
    /// Workloads asking for exclusive CPUs that hold some, and that do not.
    pub holding: usize,
    pub waiting: usize,
    pub live_containers: usize,
}

/// The failures found, by kind.
#[derive(Default, Clone, Copy)]
pub struct Counts {
    pub samples: u64,
    pub overlaps: u64,
    pub lost_pins: u64,
    pub leaks: u64,
}

/// A failure found in a sample, before it is confirmed by reading again.
enum Problem {
    Overlap(u64, u64),
    Lost(u64, CpuSet, Instant),
    Leak(u64, u64, CpuSet),
}

pub struct Sampler<'a> {
    soak: &'a Soak,
    tracks: BTreeMap<u64, Track>,
    pub counts: Counts,
}

impl<'a> Sampler<'a> {
    pub fn new(soak: &'a Soak) -> Self {
        Sampler {
            soak,
            tracks: BTreeMap::new(),
            counts: Counts::default(),
        }
    }

    /// Samples every [`EVERY`] until the soak stops.
    pub fn run(mut self) -> Counts {
        let mut next = Instant::now();
        while !self.soak.stop.load(Ordering::Relaxed) {
            self.sample();
            next += EVERY;
            let now = Instant::now();
            if next > now {
                std::thread::sleep(next - now);
            } else {
                next = now;
            }
        }
        self.counts
    }

    /// One sample: reads every live workload, holding the list's lock so
    /// that the soak removes none meanwhile, then judges.
    fn sample(&mut self) {
        let soak = self.soak;
        let live = soak.live.lock().unwrap();
        let now = Instant::now();
        let ready = soak.ready_since();
        let reserved = &soak.reserved;
        let sets: Vec<(u64, Option<CpuSet>)> = (live.entries.iter())
            .map(|(&n, e)| (n, read_set(&e.file)))
            .collect();
        self.counts.samples += 1;
        self.tracks.retain(|n, _| live.entries.contains_key(n));
        let mut problems = Vec::new();
        // (b) lost pins, and the pins made.
        for (n, set) in &sets {
            let t = self.tracks.entry(*n).or_insert(Track {
                set: None,
                since: now,
                pinned: None,
                leak_since: None,
            });
            let Some(set) = set else { continue };
            if t.set.as_ref() != Some(set) {
                t.set = Some(set.clone());
                t.since = now;
            }
            if let Some((held, since)) = &t.pinned
                && held != set
            {
                match allowed(soak, &live.entries[n], held, set, *since) {
                    true => t.pinned = None,
                    false => problems.push(Problem::Lost(*n, held.clone(), *since)),
                }
            }
            if t.pinned.is_none() && holds(set, reserved) && now - t.since >= STABLE {
                t.pinned = Some((set.clone(), t.since));
            }
        }
        // (a) two holders on one CPU.
        let mut owner: BTreeMap<u32, u64> = BTreeMap::new();
        for (n, set) in &sets {
            let Some(set) = set.as_ref().filter(|s| holds(s, reserved)) else {
                continue;
            };
            for cpu in set.iter() {
                if let Some(other) = owner.insert(cpu, *n) {
                    problems.push(Problem::Overlap(other, *n));
                }
            }
        }
        // (c) a shared workload on a pinned workload's CPUs.
        let pinned: BTreeMap<u64, CpuSet> = (self.tracks.iter())
            .filter_map(|(n, t)| Some((*n, t.pinned.as_ref()?.0.clone())))
            .collect();
        for (n, set) in &sets {
            let t = self.tracks.get_mut(n).expect("tracked above");
            let on = set
                .as_ref()
                .filter(|s| !s.is_empty() && !holds(s, reserved))
                .and_then(|s| pinned.iter().find(|(_, p)| !p.is_disjoint(s)));
            match (on, ready) {
                (Some((holder, cpus)), Some(_)) => {
                    let since = *t.leak_since.get_or_insert(now);
                    if now - since >= LEAK_AFTER {
                        problems.push(Problem::Leak(*n, *holder, cpus.clone()));
                    }
                }
                _ => t.leak_since = None,
            }
        }
        let mut view = View {
            pinned,
            live_containers: live.entries.values().filter(|e| e.container).count(),
            ..View::default()
        };
        for (n, set) in &sets {
            if live.entries[n].asks {
                match set.as_ref().is_some_and(|s| holds(s, reserved)) {
                    true => view.holding += 1,
                    false => view.waiting += 1,
                }
            }
        }
        *soak.view.lock().unwrap() = view;
        for p in problems {
            self.confirm(&live, p);
        }
    }

    /// Reads the workloads of `p` again: a failure stands only when the
    /// kernel still shows it (a sample's reads are not one instant).
    fn confirm(&mut self, live: &Live, p: Problem) {
        let soak = self.soak;
        let reserved = &soak.reserved;
        let e = |n: &u64| &live.entries[n];
        let again = |n: &u64| read_set(&e(n).file);
        let show = |s: &Option<CpuSet>| {
            s.as_ref()
                .map_or("unreadable".to_string(), |s| s.to_string())
        };
        match p {
            Problem::Overlap(a, b) => {
                let (sa, sb) = (again(&a), again(&b));
                if let (Some(x), Some(y)) = (&sa, &sb)
                    && holds(x, reserved)
                    && holds(y, reserved)
                    && !x.is_disjoint(y)
                {
                    self.counts.overlaps += 1;
                    soak.fail(
                        OVERLAP,
                        format!(
                            "two workloads hold one CPU: {} has {x}, {} has {y}",
                            e(&a).name,
                            e(&b).name
                        ),
                    );
                }
            }
            Problem::Lost(n, held, since) => {
                let now = again(&n);
                let stands = match &now {
                    Some(s) => s != &held && !allowed(soak, e(&n), &held, s, since),
                    None => false,
                };
                if stands {
                    self.counts.lost_pins += 1;
                    soak.fail(
                        LOST_PIN,
                        format!(
                            "{} held {held} from {:.1}s, and now has {}{}; {}",
                            e(&n).name,
                            soak.elapsed(since).as_secs_f64(),
                            show(&now),
                            match e(&n).resized {
                                Some(_) =>
                                    " (resized, but to a set that is not within or around it)",
                                None => "",
                            },
                            ancestry(soak, &e(&n).file)
                        ),
                    );
                }
            }
            Problem::Leak(n, holder, cpus) => {
                let (now, held) = (again(&n), again(&holder));
                if let Some(s) = &now
                    && !holds(s, reserved)
                    && !s.is_disjoint(&cpus)
                    && held.as_ref() == Some(&cpus)
                {
                    self.counts.leaks += 1;
                    soak.fail(
                        LEAK,
                        format!(
                            "{} has {s}, which overlaps {cpus} that {} has held for over {STABLE:?}, \
                             for {LEAK_AFTER:?} with the daemon up",
                            e(&n).name,
                            e(&holder).name
                        ),
                    );
                }
            }
        }
    }
}

/// What the kernel (and systemd, for its units) holds for each cgroup from
/// the workload's up to the mount, now: which one narrowed, when a pin is
/// lost. `file` is the workload's effective-set file.
fn ancestry(soak: &Soak, file: &Path) -> String {
    let mount = &soak.top.hier.cpuset;
    let read = |dir: &Path, f: &str| {
        fs::read_to_string(dir.join(f)).map_or("?".to_string(), |t| t.trim().to_string())
    };
    let mut parts = Vec::new();
    let mut dir = file.parent();
    while let Some(d) = dir.filter(|d| d.starts_with(mount) && *d != mount.as_path()) {
        let name = d
            .file_name()
            .map_or(String::new(), |n| n.to_string_lossy().into_owned());
        let asked = read(d, "cpuset.cpus");
        let effective = read(d, soak.top.hier.effective());
        let systemd = match soak.top.units.is_some() && name.ends_with(".slice") {
            true => std::process::Command::new("systemctl")
                .args(["show", "-p", "AllowedCPUs", "--value", &name])
                .output()
                .map_or("?".to_string(), |o| {
                    format!(" AllowedCPUs={}", String::from_utf8_lossy(&o.stdout).trim())
                }),
            false => String::new(),
        };
        parts.push(format!(
            "{name}: cpus {asked:?} effective {effective:?}{systemd}"
        ));
        dir = d.parent();
    }
    format!("from the workload up: {}", parts.join("; "))
}

/// Whether a pinned workload that held `held` (since `since`) may have
/// `now` instead: after the soak resized it, only a holding set within or
/// around `held` (a resize never moves a workload: a grow keeps its CPUs,
/// a shrink keeps its first ones); after the soak's hot-plug took one of
/// its CPUs, any (see [`Soak::hotplug_moved`]).
fn allowed(soak: &Soak, e: &Entry, held: &CpuSet, now: &CpuSet, since: Instant) -> bool {
    let reserved = &soak.reserved;
    let resized =
        e.resized.is_some() && holds(now, reserved) && (now.is_subset(held) || held.is_subset(now));
    resized || soak.hotplug_moved(held, now, since)
}

/// Whether every workload of `before` (the pinned ones when the daemon
/// was killed at `killed`) that still lives holds the same CPUs again, or
/// what [`allowed`] lets it have instead (a grow the soak asked for, that
/// waited for a CPU, may be given one at the restart), and no other
/// workload is on them: the daemon has recovered. Else what is not so.
pub fn recovered(
    soak: &Soak,
    before: &BTreeMap<u64, CpuSet>,
    killed: Instant,
) -> Result<(), String> {
    let live = soak.live.lock().unwrap();
    let mut held = CpuSet::new();
    for (n, cpus) in before {
        let Some(e) = live.entries.get(n) else {
            continue;
        };
        match read_set(&e.file) {
            Some(s) if &s == cpus || allowed(soak, e, cpus, &s, killed) => held.union_with(&s),
            other => return Err(format!("{} has {other:?}, not {cpus}", e.name)),
        }
    }
    for e in live.entries.values() {
        if let Some(s) = read_set(&e.file)
            && !holds(&s, &soak.reserved)
            && !s.is_disjoint(&held)
        {
            return Err(format!("{} has {s}, on the pinned CPUs {held}", e.name));
        }
    }
    Ok(())
}
