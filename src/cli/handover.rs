//! `pinctl kubelet-handover`: the way off the kubelet's static CPU manager.
//!
//! - Reads the kubelet's checkpoint ([`crate::kubelet`]) and the live tree
//!   as the daemon reads it ([`offline::walk`]). For each container the
//!   checkpoint pins it says whether pinctld keeps it on its CPUs when it
//!   takes the pods back, or why not ([`judge`]: the rule of
//!   [`crate::engine::Engine::adopt_handed_over`]).
//! - `--apply` moves the checkpoint aside ([`move_aside`]): a kubelet set to
//!   `cpuManagerPolicy: none` refuses to start while it says `static`. It
//!   refuses while a kubelet runs ([`crate::procfs::with_comm`]).
//! - Exit codes as `diff` has them: 0 every container kept, 1 some are not
//!   (listed), 2 trouble ([`super::Trouble`]).
//! - Blocking reads on the CLI's thread, through an [`Fs`]. The one write
//!   is the rename of `--apply`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use serde::Serialize;

use super::Trouble;
use super::offline;
use super::style::{Style, visible};
use crate::api;
use crate::cgroup::Hierarchy;
use crate::cgroup::layout::Kind;
use crate::config::Config;
use crate::cpuset::CpuSet;
use crate::engine::SavedState;
use crate::intent::{self, Intent};
use crate::io::Fs;
use crate::kubelet::CpuManager;
use crate::state::{Peeked, StateFile};
use crate::sysfs::Sysfs;
use crate::topology::Topology;

/// The kubelet's process name (`comm`).
pub const KUBELET: &str = "kubelet";

/// What `pinctl kubelet-handover` found (its `--json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// The checkpoint read.
    pub checkpoint: PathBuf,
    /// Its `policyName`; `None` when there is no checkpoint.
    pub policy: Option<String>,
    /// Each container it pins, in pod UID and name order.
    pub containers: Vec<Row>,
    /// Its `defaultCpuSet`: the kubelet's shared pool (`None` unless
    /// `static`).
    pub kubelet_shared_pool: Option<CpuSet>,
    /// pinctld's shared pool once the pods are its, at most: the online
    /// CPUs but those kept here and those its state file assigns. A
    /// container that moves takes more.
    pub shared_pool: Option<CpuSet>,
    /// pinctld's reserved CPUs (`reserved_cpus`).
    pub reserved: Option<CpuSet>,
    /// With `--apply`: where the checkpoint was moved.
    pub moved_to: Option<PathBuf>,
    /// What the reader should know: cgroups that could not be read, the
    /// state file.
    pub notes: Vec<String>,
}

impl Report {
    /// The containers that will not keep their CPUs.
    pub fn moving(&self) -> usize {
        self.containers.iter().filter(|r| !r.kept).count()
    }
}

/// One container the checkpoint pins.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Row {
    pub pod_uid: String,
    pub container: String,
    /// The CPUs the checkpoint gives it.
    pub cpus: CpuSet,
    /// Its cgroup, found by its workload key (`pod:<uid>/<name>`).
    pub cgroup: Option<String>,
    /// What that cgroup's `cpuset.cpus` holds.
    pub holds: Option<CpuSet>,
    /// The exclusive CPUs it asks pinctld for (0: the shared pool), when its
    /// cgroup is found.
    pub asks: Option<usize>,
    /// pinctld keeps it on `cpus`, writing nothing to it.
    pub kept: bool,
    /// Why not, when it is not kept.
    pub why: Option<String>,
}

/// A container's cgroup in the live tree, as the daemon reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub rel: String,
    /// Its `cpuset.cpus`.
    pub cpus: Option<CpuSet>,
    /// What it asks: `None`, or 0 CPUs, is the shared pool.
    pub intent: Option<Intent>,
    /// What is wrong with its request, if anything.
    pub problem: Option<String>,
}

/// What pinctld would run with.
pub struct Rules<'a> {
    pub topo: &'a Topology,
    /// Reserved CPUs in force ([`offline::reserved`]).
    pub reserved: &'a CpuSet,
    /// `full_pcpus_only`.
    pub whole_cores: bool,
    /// `kubelet_rule`.
    pub kubelet_rule: bool,
}

/// Each container `checkpoint` pins, judged as pinctld's adoption judges
/// it ([`crate::engine::Engine::adopt_handed_over`]): `found` holds the
/// cgroups by workload key, `pinned` what pinctld's other workloads hold
/// (its state file), by key.
pub fn judge(
    checkpoint: &CpuManager,
    found: &BTreeMap<String, Vec<Found>>,
    pinned: &BTreeMap<String, CpuSet>,
    rules: &Rules<'_>,
) -> Vec<Row> {
    let held = checkpoint.held();
    let mut rows = Vec::new();
    for (uid, by_name) in &checkpoint.entries {
        for (name, cpus) in by_name {
            let key = intent::pod_key(uid, name);
            let cgroups = found.get(&key).map(Vec::as_slice).unwrap_or_default();
            // The cgroup that holds the set (a container made again has
            // two for a while), else the first.
            let cgroup = cgroups
                .iter()
                .find(|f| f.cpus.as_ref() == Some(cpus))
                .or(cgroups.first());
            let others = held
                .iter()
                .filter(|(k, _)| **k != key)
                .chain(pinned.iter().filter(|(k, _)| !held.contains_key(*k)));
            let why = why_not(cpus, cgroup, others, rules);
            rows.push(Row {
                pod_uid: uid.clone(),
                container: name.clone(),
                cpus: cpus.clone(),
                cgroup: cgroup.map(|f| f.rel.clone()),
                holds: cgroup.and_then(|f| f.cpus.clone()),
                asks: cgroup.map(|f| f.intent.as_ref().map_or(0, |i| i.cpus)),
                kept: why.is_none(),
                why,
            });
        }
    }
    rows
}

/// Why a container on `cpus` (its cgroup `found`) is not kept there, if it
/// is not; `others` hold the CPUs of every other container and workload.
fn why_not<'a>(
    cpus: &CpuSet,
    found: Option<&Found>,
    mut others: impl Iterator<Item = (&'a String, &'a CpuSet)>,
    rules: &Rules<'_>,
) -> Option<String> {
    let Some(f) = found else {
        return Some(
            "no cgroup of the managed subtrees is this container's (it ended?)".to_string(),
        );
    };
    let Some(intent) = f.intent.as_ref().filter(|i| i.wants()) else {
        let because = match (&f.problem, rules.kubelet_rule) {
            (Some(p), _) => p.clone(),
            (None, false) => "kubelet_rule is off".to_string(),
            (None, true) => "not a Guaranteed pod with a whole-number CPU limit, and no \
                             annotation, xattr or rule"
                .to_string(),
        };
        return Some(format!(
            "it asks pinctld for no exclusive CPUs ({because}): it goes to the shared pool"
        ));
    };
    let afresh = "it is planned afresh";
    if f.cpus.as_ref() != Some(cpus) {
        let holds = match &f.cpus {
            Some(c) if !c.is_empty() => format!("CPUs {c}"),
            _ => "no CPUs of its own".to_string(),
        };
        return Some(format!("its cgroup holds {holds}, not these: {afresh}"));
    }
    if cpus.is_empty() {
        return Some(format!("the checkpoint gives it no CPUs: {afresh}"));
    }
    if intent.cpus != cpus.len() {
        let source = super::status::source_short(&api::Source::from(&intent.source));
        return Some(format!(
            "it asks for {} CPUs ({source}), not {}: {afresh}",
            intent.cpus,
            cpus.len()
        ));
    }
    if (rules.whole_cores || intent.whole_cores) && rules.topo.core_split(cpus).1 != 0 {
        return Some(format!("it takes whole cores, and these are not: {afresh}"));
    }
    let reserved = cpus.intersection(rules.reserved);
    if !reserved.is_empty() {
        return Some(format!(
            "CPUs {reserved} are reserved (reserved_cpus): {afresh}"
        ));
    }
    let offline = cpus.difference(rules.topo.online());
    if !offline.is_empty() {
        return Some(format!("CPUs {offline} are offline: {afresh}"));
    }
    others.find_map(|(key, theirs)| {
        let both = cpus.intersection(theirs);
        (!both.is_empty()).then(|| format!("CPUs {both} are {key}'s too: {afresh}"))
    })
}

/// Reads the checkpoint at `path` and, when it says `static`, the tree and
/// the state file `config` names, and judges each container. Every error
/// names the file and what is wrong.
pub fn examine(fs: &dyn Fs, config: &Config, path: &Path) -> Result<Report> {
    let mut report = Report {
        checkpoint: path.to_path_buf(),
        policy: None,
        containers: Vec::new(),
        kubelet_shared_pool: None,
        shared_pool: None,
        reserved: None,
        moved_to: None,
        notes: Vec::new(),
    };
    let text = match fs.read(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(report),
        Err(e) => {
            return Err(anyhow!(e).context(format!(
                "cannot read the kubelet's checkpoint {}",
                path.display()
            )));
        }
    };
    let manager = crate::kubelet::parse(&text).map_err(|why| {
        anyhow!(
            "the kubelet's checkpoint {} is corrupt: {why}",
            path.display()
        )
    })?;
    report.policy = Some(manager.policy.clone());
    if !manager.owns_cpus() {
        return Ok(report);
    }
    let topo = Sysfs::new(&config.sysfs_root).topology().with_context(|| {
        format!(
            "cannot read the CPU topology from {}",
            config.sysfs_root.display()
        )
    })?;
    let hier = Hierarchy::detect(fs, &config.cgroup_root, config.hierarchy).with_context(|| {
        format!(
            "cannot use the cgroup tree at {}",
            config.cgroup_root.display()
        )
    })?;
    let reserved = offline::reserved(config, &topo);
    let (found, notes) = find(fs, &hier, config, &manager);
    report.notes = notes;
    let pinned = pinned(config, &mut report.notes);
    let rules = Rules {
        topo: &topo,
        reserved: &reserved,
        whole_cores: config.full_pcpus_only,
        kubelet_rule: config.kubelet_rule,
    };
    report.containers = judge(&manager, &found, &pinned, &rules);
    let mut pool = topo.online().clone();
    for c in report.containers.iter().filter(|r| r.kept) {
        pool.difference_with(&c.cpus);
    }
    let held = manager.held();
    for (_, cpus) in pinned.iter().filter(|(key, _)| !held.contains_key(*key)) {
        pool.difference_with(cpus);
    }
    report.shared_pool = Some(pool.union(&reserved));
    report.kubelet_shared_pool = Some(manager.default);
    report.reserved = Some(reserved);
    Ok(report)
}

/// The container cgroups of the pods `manager` names, by workload key, and
/// the walk's notes. A container that asks for nothing has its name read
/// from its bundle: the reading keeps none.
fn find(
    fs: &dyn Fs,
    hier: &Hierarchy,
    config: &Config,
    manager: &CpuManager,
) -> (BTreeMap<String, Vec<Found>>, Vec<String>) {
    let mut found: BTreeMap<String, Vec<Found>> = BTreeMap::new();
    let notes = offline::walk(fs, hier, config, |rel, r| {
        let Kind::Container { pod, id, .. } = &r.kind else {
            return;
        };
        if !intent::can_be_workload(&r.kind) || !manager.entries.contains_key(&pod.uid) {
            return;
        }
        let key = match r.key.is_empty() {
            false => r.key.clone(),
            true => {
                let bundle = intent::find_bundle(fs, &config.bundle_dirs, id)
                    .ok()
                    .flatten();
                intent::workload_key(&r.kind, rel, bundle.as_ref())
            }
        };
        found.entry(key).or_default().push(Found {
            rel: rel.to_string(),
            cpus: r.obs.cpus,
            intent: r.intent,
            problem: r.problem,
        });
    });
    (found, notes)
}

/// What pinctld's workloads hold, by key, as its state file says: none,
/// with a note, when it cannot say (what pinctld holds is then not
/// checked against the checkpoint).
fn pinned(config: &Config, notes: &mut Vec<String>) -> BTreeMap<String, CpuSet> {
    let path = config.state_file.display();
    let unknown = "pinctld's own workloads are not known";
    match StateFile::new(&config.state_file).peek::<SavedState>() {
        Ok(Peeked::Fresh(s)) => s
            .assignments
            .into_iter()
            .map(|(k, a)| (k, a.cpus))
            .collect(),
        Ok(Peeked::Missing) => BTreeMap::new(),
        Ok(Peeked::Invalid { reason }) => {
            notes.push(format!(
                "the state file {path} is unusable ({reason}): {unknown}"
            ));
            BTreeMap::new()
        }
        Err(e) => {
            let e = anyhow::Error::from(e);
            notes.push(format!("{e:#}: {unknown}"));
            BTreeMap::new()
        }
    }
}

/// Why `--apply` must not move `report`'s checkpoint, if it must not: no
/// `static` checkpoint, or a kubelet running (in `proc_root`).
pub fn refusal(fs: &dyn Fs, report: &Report, proc_root: &Path) -> Result<Option<String>> {
    let path = report.checkpoint.display();
    match report.policy.as_deref() {
        None => return Ok(Some(format!("there is no checkpoint at {path}"))),
        Some("static") => {}
        Some(policy) => {
            return Ok(Some(format!(
                "the checkpoint {path} says policy {policy:?}, not \"static\": nothing to move aside"
            )));
        }
    }
    let running = crate::procfs::with_comm(fs, proc_root, KUBELET)
        .with_context(|| format!("cannot list the processes in {}", proc_root.display()))?;
    Ok(match running.as_slice() {
        [] => None,
        pids => Some(format!(
            "a kubelet is running (pid {}): stop it first, and set cpuManagerPolicy: none in its configuration",
            pids.iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )),
    })
}

/// Moves the checkpoint at `path` aside, to `<path>.static-<secs>` (or
/// `-N` after it when that is taken), in one rename; returns where.
pub fn move_aside(path: &Path, secs: u64) -> Result<PathBuf> {
    for n in 0..100u32 {
        let mut to = path.as_os_str().to_owned();
        to.push(format!(".static-{secs}"));
        if n > 0 {
            to.push(format!("-{n}"));
        }
        let to = PathBuf::from(to);
        match crate::state::rename_noreplace(path, &to) {
            Ok(()) => return Ok(to),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(anyhow!(e).context(format!(
                    "cannot move {} to {}",
                    path.display(),
                    to.display()
                )));
            }
        }
    }
    bail!(
        "cannot move {} aside: 100 names {}.static-{secs}-N are taken",
        path.display(),
        path.display()
    )
}

/// The report as `pinctl kubelet-handover` prints it.
pub fn render(report: &Report, style: Style) -> String {
    let mut s = String::new();
    let path = visible(&report.checkpoint.display().to_string()).into_owned();
    let policy = match report.policy.as_deref() {
        None => {
            let _ = writeln!(
                s,
                "No checkpoint at {path}: the kubelet's static CPU manager holds no CPUs. Nothing to do."
            );
            return s;
        }
        Some(p) => visible(p).into_owned(),
    };
    if policy != "static" {
        let _ = writeln!(
            s,
            "The checkpoint {path} says policy {policy}: the kubelet pins nothing. Nothing to do."
        );
        return s;
    }
    let n = report.containers.len();
    let _ = writeln!(
        s,
        "Checkpoint:  {path} (policy static, {n} {})",
        if n == 1 { "container" } else { "containers" }
    );
    if n > 0 {
        let rows: Vec<[String; 5]> = report
            .containers
            .iter()
            .map(|r| {
                [
                    visible(&r.pod_uid).into_owned(),
                    visible(&r.container).into_owned(),
                    r.cpus.to_string(),
                    if r.kept { "yes" } else { "no" }.to_string(),
                    r.cgroup
                        .as_deref()
                        .map_or("-".into(), |c| visible(c).into_owned()),
                ]
            })
            .collect();
        let head = ["POD UID", "CONTAINER", "CPUS", "KEPT", "CGROUP"];
        let mut width = head.map(str::len);
        for row in &rows {
            for (w, cell) in width.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let pad = |text: &str, w: usize| format!("{text}{}", " ".repeat(w - text.chars().count()));
        let _ = writeln!(s);
        let line: Vec<String> = head.iter().zip(width).map(|(h, w)| pad(h, w)).collect();
        let _ = writeln!(s, "{}", style.bold(line.join("  ").trim_end()));
        for (row, r) in rows.iter().zip(&report.containers) {
            let mut cells: Vec<String> = row
                .iter()
                .zip(width)
                .map(|(cell, w)| pad(cell, w))
                .collect();
            cells[3] = match r.kept {
                true => style.green(&cells[3]),
                false => style.red(&cells[3]),
            };
            let _ = writeln!(s, "{}", cells.join("  ").trim_end());
            if let Some(why) = &r.why {
                let _ = writeln!(s, "    {}", visible(why));
            }
        }
        let _ = writeln!(s);
    }
    let list = |c: &Option<CpuSet>| match c {
        Some(c) if !c.is_empty() => c.to_string(),
        _ => "(none)".to_string(),
    };
    let _ = writeln!(
        s,
        "Shared pool: the kubelet's {} (defaultCpuSet)",
        list(&report.kubelet_shared_pool)
    );
    let _ = writeln!(
        s,
        "             pinctld's {} at most: a container that moves takes CPUs from it",
        list(&report.shared_pool)
    );
    let _ = writeln!(
        s,
        "Reserved:    pinctld's {} (reserved_cpus): the kubelet's reservedSystemCPUs should be the same",
        list(&report.reserved)
    );
    for note in &report.notes {
        let _ = writeln!(s, "Note:        {}", visible(note));
    }
    if let Some(to) = &report.moved_to {
        let _ = writeln!(
            s,
            "Moved:       {path} to {}: start the kubelet with cpuManagerPolicy: none; pinctld takes the pods back at its next watchdog round",
            visible(&to.display().to_string())
        );
    }
    s
}

/// `pinctl kubelet-handover`: examines, applies when asked, prints, and
/// fails (exit 1) when a container will not keep its CPUs. Trouble exits 2.
pub fn run(
    fs: &dyn Fs,
    config: &Config,
    args: &super::HandoverArgs,
    style: Style,
    out: &mut dyn Write,
) -> Result<()> {
    let checkpoint = args.checkpoint.clone().unwrap_or_else(|| {
        config
            .kubelet_cpu_manager_state
            .clone()
            .or(Config::default().kubelet_cpu_manager_state)
            .unwrap_or_default()
    });
    let mut report = examine(fs, config, &checkpoint).map_err(Trouble::from)?;
    if args.apply {
        let proc_root = args.proc_root.as_deref().unwrap_or(&config.proc_root);
        if let Some(why) = refusal(fs, &report, proc_root).map_err(Trouble::from)? {
            return Err(Trouble::from(anyhow!("not moving the checkpoint: {why}")).into());
        }
        let to = move_aside(&checkpoint, api::unix_secs()).map_err(Trouble::from)?;
        report.moved_to = Some(to);
    }
    if args.json {
        serde_json::to_writer_pretty(&mut *out, &report)?;
        writeln!(out)?;
    } else {
        out.write_all(render(&report, style).as_bytes())?;
    }
    out.flush()?;
    match (report.moving(), report.containers.len()) {
        (0, _) => Ok(()),
        (1, n) => bail!("1 of {n} containers will not keep its CPUs"),
        (m, n) => bail!("{m} of {n} containers will not keep their CPUs"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::intent::Source;
    use crate::topology::synthetic::Shape;

    fn set(s: &str) -> CpuSet {
        s.parse().unwrap()
    }

    /// 8 CPUs: 1 socket, 4 cores of 2 threads; core c is {c, c+4}.
    fn topo() -> Topology {
        Shape {
            sockets: 1,
            numa_per_socket: 1,
            l3_per_numa: 1,
            cores_per_l3: 4,
            threads_per_core: 2,
        }
        .build()
    }

    fn asks(cpus: usize, whole_cores: bool) -> Option<Intent> {
        Some(Intent {
            cpus,
            source: Source::Kubelet,
            numa: Vec::new(),
            whole_cores,
            class: None,
            near: Vec::new(),
            device_alignment: None,
            devices: Vec::new(),
        })
    }

    fn found(rel: &str, cpus: &str, intent: Option<Intent>) -> Found {
        Found {
            rel: rel.to_string(),
            cpus: Some(set(cpus)),
            intent,
            problem: None,
        }
    }

    /// The reasons of each row, by container name: `None` when kept.
    fn judged(
        checkpoint: &str,
        found: Vec<(&str, Found)>,
        pinned: &[(&str, &str)],
        whole_cores: bool,
        kubelet_rule: bool,
    ) -> Vec<(String, Option<String>)> {
        let manager = crate::kubelet::parse(checkpoint).unwrap();
        let mut by_key: BTreeMap<String, Vec<Found>> = BTreeMap::new();
        for (key, f) in found {
            by_key.entry(key.to_string()).or_default().push(f);
        }
        let pinned = pinned
            .iter()
            .map(|(k, c)| (k.to_string(), set(c)))
            .collect();
        let topo = topo();
        let rules = Rules {
            topo: &topo,
            reserved: &set("0,4"),
            whole_cores,
            kubelet_rule,
        };
        judge(&manager, &by_key, &pinned, &rules)
            .into_iter()
            .map(|r| {
                assert_eq!(r.kept, r.why.is_none());
                (r.container, r.why)
            })
            .collect()
    }

    #[test]
    fn a_container_is_kept_where_adoption_would_keep_it_and_told_why_not_else() {
        let cp = r#"{"policyName":"static","defaultCpuSet":"0,4","entries":{"u":{
            "a":"1,5","b":"2","c":"3,7","d":"6","e":"2","f":"9"}}}"#;
        let got = judged(
            cp,
            vec![
                // Made again: the old cgroup still there holds the set.
                ("pod:u/a", found("new", "0-7", asks(2, false))),
                ("pod:u/a", found("old", "1,5", asks(2, false))),
                ("pod:u/b", found("b", "2", asks(1, false))),
                ("pod:u/c", found("c", "3", asks(2, false))),
                ("pod:u/d", found("d", "6", asks(1, false))),
                ("pod:u/e", found("e", "2", asks(1, false))),
                ("pod:u/f", found("f", "9", asks(1, false))),
            ],
            &[("cgroup:hpc.slice/x", "6"), ("pod:u/a", "7")],
            false,
            true,
        );
        let why = |name: &str| got.iter().find(|(n, _)| n == name).unwrap().1.clone();
        assert_eq!(why("a"), None);
        // b and e share CPU 2: the checkpoint is not the kubelet's own.
        assert_eq!(
            why("b").unwrap(),
            "CPUs 2 are pod:u/e's too: it is planned afresh"
        );
        assert_eq!(
            why("c").unwrap(),
            "its cgroup holds CPUs 3, not these: it is planned afresh"
        );
        assert_eq!(
            why("d").unwrap(),
            "CPUs 6 are cgroup:hpc.slice/x's too: it is planned afresh"
        );
        assert_eq!(
            why("f").unwrap(),
            "CPUs 9 are offline: it is planned afresh"
        );

        // Whole cores, configured or asked.
        let cp = r#"{"policyName":"static","entries":{"u":{"a":"1-2","b":"3,7"}}}"#;
        let cgroups = || {
            vec![
                ("pod:u/a", found("a", "1-2", asks(2, false))),
                ("pod:u/b", found("b", "3,7", asks(2, true))),
            ]
        };
        let got = judged(cp, cgroups(), &[], false, true);
        assert_eq!(got, [("a".into(), None), ("b".into(), None)]);
        let got = judged(cp, cgroups(), &[], true, true);
        assert_eq!(
            got[0].1.as_deref(),
            Some("it takes whole cores, and these are not: it is planned afresh")
        );
        assert_eq!(got[1].1, None);

        // Asking for nothing: why, as far as it is known.
        let cp = r#"{"policyName":"static","entries":{"u":{"a":"1"}}}"#;
        let got = judged(
            cp,
            vec![("pod:u/a", found("a", "1", None))],
            &[],
            false,
            false,
        );
        assert_eq!(
            got[0].1.as_deref(),
            Some(
                "it asks pinctld for no exclusive CPUs (kubelet_rule is off): it goes to the shared pool"
            )
        );
        let mut f = found("a", "1", None);
        f.problem = Some("ignoring the request".into());
        let got = judged(cp, vec![("pod:u/a", f)], &[], false, true);
        assert!(
            got[0]
                .1
                .as_deref()
                .unwrap()
                .contains("(ignoring the request)")
        );
    }
}
