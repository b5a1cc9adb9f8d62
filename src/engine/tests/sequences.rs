//! Property tests over sequences of events: the invariants hold after any,
//! and a plan over what changed gives what a full plan gives; with the tests
//! that the reach is really used and what a plan saves.

use super::*;

#[derive(Debug, Clone)]
enum Op {
    Add(u8, usize),
    /// A workload asking for whole cores alone (`+full-cores`).
    Whole(u8, usize),
    /// A container of pod `i % 3` asking by the pod's annotation.
    Annotated(u8, usize),
    Remove(u8),
    Foreign(u8),
    Offline(u8),
    Online,
    /// The daemon restarted, its state file kept or lost (`true`).
    Restart(bool),
    /// Slurm's running jobs now hold these CPUs (a mask of the 16).
    Jobs(u16),
    /// The runtime announces the container of [`Op::Annotated`]'s key
    /// before its cgroup exists (NRI).
    Announce(u8, usize),
    /// It withdraws the announcement.
    Withdraw(u8),
    /// Another owner (the kubelet's static CPU manager) gives workload `i`
    /// back, asking for `n` CPUs, its cgroup on the CPUs of the mask, as
    /// the owner says it held them.
    HandOver(u8, usize, u16),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..12, 0usize..7).prop_map(|(i, n)| Op::Add(i, n)),
        1 => (0u8..12, 1usize..5).prop_map(|(i, n)| Op::Whole(i, n)),
        2 => (0u8..12, 1usize..4).prop_map(|(i, n)| Op::Annotated(i, n)),
        2 => (0u8..12).prop_map(Op::Remove),
        1 => (0u8..12).prop_map(Op::Foreign),
        1 => (0u8..16).prop_map(Op::Offline),
        1 => Just(Op::Online),
        1 => any::<bool>().prop_map(Op::Restart),
        1 => prop_oneof![Just(0u16), any::<u16>()].prop_map(Op::Jobs),
        1 => (0u8..12, 1usize..4).prop_map(|(i, n)| Op::Announce(i, n)),
        1 => (0u8..12).prop_map(Op::Withdraw),
        1 => (0u8..12, 1usize..4, any::<u16>()).prop_map(|(i, n, m)| Op::HandOver(i, n, m)),
    ]
}

proptest! {
    #[test]
    fn invariants_hold_under_any_sequence(
        ops in proptest::collection::vec(op(), 1..40),
        v2 in any::<bool>(),
        strict in any::<bool>(),
    ) {
        let mut e = if v2 { engine_v2() } else { engine() };
        let mut s = e.settings().clone();
        s.strict_reservation = strict;
        e.set_settings(s);
        kube_tree(&mut e);
        e.end_startup();
        let mut jobs = CpuSet::new();
        for op in ops {
            // What each workload held: a resize keeps it (issue #34).
            let before: BTreeMap<String, CpuSet> = e
                .workloads()
                .values()
                .filter_map(|w| Some((w.key.clone(), w.cpus.clone()?)))
                .collect();
            let announced: BTreeSet<String> = e
                .workloads()
                .values()
                .filter(|w| w.expected)
                .map(|w| w.key.clone())
                .collect();
            let topology_changes = matches!(op, Op::Offline(_) | Op::Online);
            // A workload given back, its set, and what the others held then.
            let mut handed = None;
            match op.clone() {
                Op::Add(i, n) => add(&mut e, &format!("kubepods/w{i}"), "0-15", want(n)),
                Op::Whole(i, n) => {
                    let intent = Intent { whole_cores: true, ..want(n).unwrap() };
                    add(&mut e, &format!("kubepods/w{i}"), "0-15", Some(intent));
                }
                Op::Annotated(i, n) => {
                    let rel = format!("kubepods/w{i}");
                    let obs = Observed {
                        rel: rel.as_str().into(),
                        cpus: Some(set("0-15")),
                        mems: Some(set("0-1")),
                        ..Observed::default()
                    };
                    let intent = Intent {
                        cpus: n,
                        source: Source::Annotation {
                            bundle: "/b".into(),
                            key: crate::intent::ANNOTATION_CPUS.into(),
                        },
                        numa: Vec::new(),
                        whole_cores: false,
                        class: None,
                        near: Vec::new(),
                        device_alignment: None,
                        devices: Vec::new(),
                    };
                    reading(&mut e, obs, Some(intent), &format!("pod:{}/w{i}", i % 3));
                }
                Op::Remove(i) => e.forget(&format!("kubepods/w{i}")),
                Op::Foreign(i) => {
                    e.observe_cpus(&format!("kubepods/w{i}"), Some(set("0-15")));
                }
                Op::Offline(c) => {
                    let cpus: Vec<_> = topo().cpus().iter().copied().filter(|x| x.cpu != c as u32).collect();
                    e.set_topology(Topology::new(cpus, CpuSet::new(), CpuSet::new()).unwrap());
                }
                Op::Online => e.set_topology(topo()),
                Op::Restart(lost) => e = restarted(e, lost),
                Op::Jobs(mask) => {
                    jobs = (0..16).filter(|c| mask & (1 << c) != 0).collect();
                    e.set_job_cores(jobs.clone());
                }
                Op::Announce(i, n) => e.expect(&format!("pod:{}/w{i}", i % 3), &want(n).unwrap()),
                Op::Withdraw(i) => e.unexpect(&format!("pod:{}/w{i}", i % 3)),
                Op::HandOver(i, n, mask) => {
                    // It was the other owner's: out of the daemon's sight.
                    let rel = format!("kubepods/w{i}");
                    e.forget(&rel);
                    apply(&mut e);
                    let cpus: CpuSet = (0..16).filter(|c| mask & (1 << c) != 0).collect();
                    add(&mut e, &rel, &cpus.to_string(), want(n));
                    let key = format!("cgroup:{rel}");
                    e.adopt_handed_over([(key.clone(), cpus.clone())].into());
                    let others = e
                        .workloads()
                        .values()
                        .filter_map(|w| w.cpus.clone())
                        .fold(CpuSet::new(), |a, c| a.union(&c));
                    handed = Some((key, n, cpus, others));
                }
            }
            let writes = apply(&mut e);
            let given_back = handed.as_ref().map(|h| (h.0.clone(), h.2.clone()));
            if let Some((key, n, cpus, others)) = handed {
                e.end_startup();
                // Kept where it is whenever that is a valid assignment.
                let usable = e.topology().online().difference(e.reserved());
                if cpus.len() == n && cpus.is_subset(&usable) && cpus.is_disjoint(&others) {
                    let now = e.workloads()[&key].cpus.as_ref();
                    prop_assert_eq!(now, Some(&cpus), "{} moved", key);
                }
            }
            // A workload with no cgroup is an announced one.
            for w in e.workloads().values() {
                prop_assert!(!w.cgroups.is_empty() || w.expected, "{} kept with no cgroup", w.key);
            }
            let online = e.topology().online().clone();
            let mut seen = CpuSet::new();
            for w in e.workloads().values() {
                if let Some(c) = &w.cpus {
                    prop_assert!(c.is_disjoint(&seen), "overlap at {}", w.key);
                    prop_assert!(c.is_disjoint(e.reserved()), "reserved assigned");
                    prop_assert!(c.is_subset(&online));
                    prop_assert!(
                        c.len() == w.requested || w.resize.is_some(),
                        "{} holds {} CPUs for {} and no resize is pending", w.key, c.len(), w.requested
                    );
                    seen.union_with(c);
                }
            }
            // Resizes: a grow is a superset, a shrink a subset that holds the
            // baseline, one that cannot be met changes nothing.
            // (A workload given back is a new one.)
            let resizable = |w: &&Workload| !topology_changes && given_back.as_ref().map(|g| &g.0) != Some(&w.key);
            for w in e.workloads().values().filter(resizable) {
                let (Some(c), Some(old)) = (&w.cpus, before.get(&w.key)) else {
                    continue;
                };
                if w.resize.is_some() {
                    prop_assert_eq!(c, old, "{}: a pending resize changed the set", &w.key);
                } else if c.len() > old.len() {
                    prop_assert!(old.is_subset(c), "{}: grew {} to {}", w.key, old, c);
                } else {
                    prop_assert!(c.is_subset(old), "{}: shrank {} to {}", w.key, old, c);
                }
                let base = w.baseline.as_ref().expect("a pinned workload has a baseline");
                prop_assert!(base.is_subset(c), "{}: lost baseline {} ({})", w.key, base, c);
            }
            // A restart, the state file lost or not, keeps every set held
            // (one that waited may be served: the order of arrival is
            // the order of reading now).
            if matches!(op, Op::Restart(_)) {
                // Announcements are not saved (the runtime makes their
                // cgroups with what it was told, and those are adopted):
                // the CPUs they held may serve a resize that waited.
                for (key, old) in before.iter().filter(|(k, _)| !announced.contains(*k)) {
                    let now = e.workloads().get(key).and_then(|w| w.cpus.as_ref());
                    if announced.is_empty() {
                        prop_assert_eq!(now, Some(old), "a restart moved {}", key);
                    } else {
                        prop_assert!(now.is_some_and(|n| old.is_subset(n)), "a restart moved {}", key);
                    }
                }
            }
            prop_assert!(!e.shared_pool().is_empty(), "shared pool empty");
            // Slurm's job cores: out of the shared pool (reserved ones
            // excepted), and no CPU a workload did not hold is given it.
            let cores = e.job_cores();
            prop_assert!(e.shared_pool().is_disjoint(&cores));
            prop_assert_eq!(cores.clone(), jobs.intersection(&online).difference(e.reserved()));
            for w in e.workloads().values() {
                let (Some(c), false) = (&w.cpus, matches!(op, Op::Restart(_))) else {
                    continue;
                };
                // A set handed over was held live before, job cores and
                // all: a conflict `pinctl verify` names, not one given.
                let held = match &given_back {
                    Some((key, live)) if *key == w.key => live.clone(),
                    _ => before.get(&w.key).cloned().unwrap_or_default(),
                };
                let new = c.difference(&held);
                prop_assert!(new.is_disjoint(&cores), "{} given job cores {}", w.key, new.intersection(&cores));
            }
            // strict_reservation: the managed subtree's cgroups on the
            // shared pool keep off the reserved CPUs unless nothing else is
            // left; system.slice keeps them.
            let pods = e.strict().map(|s| s.pool);
            prop_assert_eq!(pods.is_some(), strict);
            let pool = e.shared_pool();
            let pods = pods.unwrap_or_else(|| pool.clone());
            prop_assert!(!pods.is_empty());
            prop_assert!(!strict || pods.is_disjoint(e.reserved()) || pods == pool);
            prop_assert_eq!(target(&e, "system.slice"), pool.clone());
            for (rel, c) in &e.cgroups {
                let waits = c.role == Role::Exclusive
                    && c.member_of
                        .get()
                        .and_then(|k| e.workloads.get(k))
                        .is_none_or(|w| w.cpus.is_none());
                if rel.starts_with("kubepods/") && (c.role == Role::Shared || waits) {
                    prop_assert_eq!(c.target.as_deref(), Some(&pods), "{}", rel);
                }
            }
            // A pod's annotation serves one container of the pod at a time.
            let mut holders = BTreeSet::new();
            for w in e.workloads().values() {
                if w.source.is_pod_annotation() && w.cpus.is_some() {
                    let pod = w.key.split('/').next().unwrap_or_default();
                    prop_assert!(holders.insert(pod.to_string()), "two holders in {}", pod);
                }
            }
            for w in &writes {
                prop_assert!(!w.set.is_empty(), "empty write {:?}", w);
            }
            // After applying, every cgroup with a target has it (v2: gets
            // it, written or from its parent).
            if v2 {
                prop_assert_eq!(assert_v2_targets_hold(&e), Ok(()));
            } else {
                for (rel, c) in &e.cgroups {
                    if let Some(t) = &c.target {
                        prop_assert_eq!(c.cpus.as_ref(), Some(t), "{} not at target", rel);
                    }
                }
            }
        }
    }
}

/// The engine of a daemon started again on `e`'s tree: the baselines owed
/// kept on the cgroups first (the daemon writes them in the turn after a
/// plan), every cgroup read again as it is, the state file `lost` or not;
/// its start-up plan made.
fn restarted(mut e: Engine, lost: bool) -> Engine {
    for (rel, base) in e.baselines_owed() {
        e.baseline_kept(&rel, base);
    }
    let saved = (!lost).then(|| e.saved_state());
    let mut n = Engine::new(e.topology().clone(), e.settings().clone(), saved);
    for (rel, c) in &e.cgroups {
        let obs = Observed {
            rel: rel.clone(),
            cpus: c.cpus.as_deref().cloned(),
            mems: c.mems.as_deref().cloned(),
            ..Observed::default()
        };
        n.upsert(Reading {
            kind: classify(rel),
            obs,
            intent: c.intent.as_deref().cloned(),
            key: c.key.to_string(),
            problem: None,
            bundle: None,
            lifted: None,
            lifted_unkept: false,
            baseline: c.baseline.as_deref().cloned(),
            mems_read: true,
        });
    }
    // The daemon reads Slurm's jobs after its first walk, before its
    // start-up plan.
    n.set_job_cores(e.jobs.clone());
    apply(&mut n);
    n.end_startup();
    n
}

/// One event of the equivalence test, on a tree of pods with containers
/// (and sub-cgroups), services in the shared `system.slice` (and Slurm's
/// tree there) and jobs under the unmanaged `hpc`, whose CPUs lack 4-7 and
/// 12-15.
#[derive(Debug, Clone)]
enum Event {
    /// A container (re-)read: pod, container, request (6: none), with a
    /// sub-cgroup, new as v1 makes it (empty sets).
    Container(u8, u8, usize, bool, bool),
    RemoveContainer(u8, u8),
    RemovePod(u8),
    Foreign(u8, u8),
    Service(u8, usize),
    Job(u8, usize),
    RemoveJob(u8),
    Offline(u8),
    Online,
    /// Slurm's tree in `system.slice` appears (with a job on CPUs 4-7 and
    /// 12-15) or goes.
    Slurm(bool),
    /// The writes to this container fail until the next event.
    Fail(u8, u8),
    /// A reload turns `strict_reservation` on or off.
    Strict(bool),
}

fn event() -> impl Strategy<Value = Event> {
    let request = prop_oneof![2 => Just(6usize), 3 => 0usize..5];
    prop_oneof![
        6 => (0u8..3, 0u8..3, request.clone(), any::<bool>(), any::<bool>())
            .prop_map(|(p, c, n, sub, new)| Event::Container(p, c, n, sub, new)),
        2 => (0u8..3, 0u8..3).prop_map(|(p, c)| Event::RemoveContainer(p, c)),
        1 => (0u8..3).prop_map(Event::RemovePod),
        1 => (0u8..3, 0u8..3).prop_map(|(p, c)| Event::Foreign(p, c)),
        2 => (0u8..3, request.clone()).prop_map(|(i, n)| Event::Service(i, n)),
        2 => (0u8..2, request).prop_map(|(i, n)| Event::Job(i, n)),
        1 => (0u8..2).prop_map(Event::RemoveJob),
        1 => (0u8..16).prop_map(Event::Offline),
        1 => Just(Event::Online),
        1 => any::<bool>().prop_map(Event::Slurm),
        1 => (0u8..3, 0u8..3).prop_map(|(p, c)| Event::Fail(p, c)),
        1 => any::<bool>().prop_map(Event::Strict),
    ]
}

fn request(n: usize) -> Option<Intent> {
    if n == 6 { None } else { want(n) }
}

/// Pods 0 and 1 are named as the kubelet names them (structure); pod 2 is
/// a plain cgroup in the managed tree (shared).
fn pod(p: u8) -> String {
    if p < 2 {
        format!("kubepods/pod{p:08}-2222-3333-4444-555555555555")
    } else {
        format!("kubepods/pod{p}")
    }
}

/// Container 2 is named so that it sorts between container 0 and the
/// cgroups below it (`c0` < `c0.x` < `c0/sub`: `.` sorts before `/`), as
/// `kubepods.slice` sorts between `kubepods` and `kubepods/burstable`.
fn container(p: u8, c: u8) -> String {
    match c {
        2 => format!("{}/c0.x", pod(p)),
        c => format!("{}/c{c}", pod(p)),
    }
}

/// Feeds `event` to the engine; returns the cgroup whose writes fail.
fn feed(e: &mut Engine, event: &Event) -> Option<String> {
    let plain = |e: &mut Engine, rel: &str, cpus: &str, intent: Option<Intent>| {
        let obs = Observed {
            rel: rel.into(),
            cpus: Some(set(cpus)),
            mems: Some(if cpus.is_empty() {
                CpuSet::new()
            } else {
                set("0-1")
            }),
            ..Observed::default()
        };
        let key = if intent.is_some() {
            format!("cgroup:{rel}")
        } else {
            String::new()
        };
        reading(e, obs, intent, &key);
    };
    match *event {
        Event::Container(p, c, n, sub, new) => {
            let cpus = if new { "" } else { "0-15" };
            plain(e, &pod(p), "0-15", None);
            plain(e, &container(p, c), cpus, request(n));
            if sub {
                plain(e, &format!("{}/sub", container(p, c)), cpus, None);
            }
        }
        Event::RemoveContainer(p, c) => e.forget(&container(p, c)),
        Event::RemovePod(p) => e.forget(&pod(p)),
        Event::Foreign(p, c) => {
            e.observe_cpus(&container(p, c), Some(set("0-15")));
        }
        Event::Service(i, n) => plain(e, &format!("system.slice/s{i}"), "0-15", request(n)),
        Event::Job(i, n) => plain(e, &format!("hpc/job{i}"), "0-3,8-11", request(n)),
        Event::RemoveJob(i) => e.forget(&format!("hpc/job{i}")),
        Event::Offline(c) => {
            let cpus: Vec<_> = topo()
                .cpus()
                .iter()
                .copied()
                .filter(|x| x.cpu != c as u32)
                .collect();
            e.set_topology(Topology::new(cpus, CpuSet::new(), CpuSet::new()).unwrap());
        }
        Event::Online => e.set_topology(topo()),
        Event::Slurm(true) => {
            plain(e, "system.slice/slurmstepd.scope", "0-15", None);
            plain(e, "system.slice/slurmstepd.scope/job_7", "4-7,12-15", None);
        }
        Event::Slurm(false) => e.forget("system.slice/slurmstepd.scope"),
        Event::Fail(p, c) => return Some(container(p, c)),
        Event::Strict(on) => {
            let mut s = e.settings().clone();
            s.strict_reservation = on;
            e.set_settings(s);
        }
    }
    None
}

/// Plans and writes until the engine has nothing more to plan. With `full`
/// every plan looks at every cgroup, and plans are made until one changes
/// nothing: a workload that waits tries before a newer one is pinned, so the
/// first full plan after a pin still shows how many CPUs were free before it.
/// Writes to `failing` fail.
fn settle(e: &mut Engine, full: bool, failing: Option<&str>) {
    let mut owed = false;
    for _ in 0..4 {
        let before = full.then(|| view(e));
        if full {
            e.replan_all();
        }
        let plan = if owed { e.plan_owed() } else { e.plan() };
        owed = plan.more;
        for w in &plan.writes {
            let result = match failing {
                Some(f) if crate::cgroup::is_within(&w.rel, f) => Err(Failure {
                    message: "injected".into(),
                    errno: Some(16),
                    read: false,
                }),
                _ => Ok(()),
            };
            e.written(w, result);
        }
        let settled = match before {
            Some(before) => before == view(e),
            None => !plan.more,
        };
        if settled {
            return;
        }
    }
    panic!("a plan that never settles");
}

type CgroupView = (
    Rel,
    Role,
    Option<CpuSet>,
    Option<CpuSet>,
    Option<CpuSet>,
    bool,
    bool,
);
type WorkloadView = (
    String,
    usize,
    Option<CpuSet>,
    Option<Pending>,
    BTreeSet<Rel>,
    u64,
);

/// What both planners must agree on.
fn view(e: &Engine) -> (Vec<CgroupView>, Vec<WorkloadView>) {
    let cgroups = e
        .cgroups
        .iter()
        .map(|(rel, c)| {
            (
                rel.clone(),
                c.role,
                c.target.as_deref().cloned(),
                c.cpus.as_deref().cloned(),
                c.mems.as_deref().cloned(),
                c.ours,
                c.failure.is_some(),
            )
        })
        .collect();
    let workloads = e
        .workloads
        .values()
        .map(|w| {
            (
                w.key.clone(),
                w.requested,
                w.cpus.clone(),
                w.pending.clone(),
                w.cgroups.clone(),
                w.seq,
            )
        })
        .collect();
    (cgroups, workloads)
}

proptest! {
    /// The one planner's promise: a plan over the cgroups that changed
    /// gives, once the engine has nothing more to plan, what a plan over
    /// every cgroup gives, after any sequence of events.
    #[test]
    fn a_plan_over_what_changed_gives_what_a_full_plan_gives(
        events in proptest::collection::vec(event(), 1..40),
        v2 in any::<bool>(),
    ) {
        let mut engines = if v2 { [engine_v2(), engine_v2()] } else { [engine(), engine()] };
        for (full, e) in [false, true].into_iter().zip(engines.iter_mut()) {
            kube_tree(e);
            add(e, "hpc", "0-3,8-11", None);
            settle(e, full, None);
            e.end_startup();
        }
        let mut failing: Option<String> = None;
        for (step, ev) in events.iter().enumerate() {
            for (full, e) in [false, true].into_iter().zip(engines.iter_mut()) {
                let fail = feed(e, ev);
                settle(e, full, fail.as_deref().or(failing.as_deref()));
                if full {
                    failing = fail;
                }
            }
            let [scoped, full] = &engines;
            prop_assert_eq!(view(scoped), view(full), "after event {} {:?}", step, ev);
            if v2 {
                prop_assert_eq!(assert_v2_targets_hold(full), Ok(()), "after event {} {:?}", step, ev);
            }
        }
    }
}

/// The reach is what makes a new container cheap at node scale: these
/// events are each planned over the cgroups they touch, and a new pin's
/// CPUs go out before the shared pool shrinks.
#[test]
fn everyday_events_are_planned_over_what_they_touch() {
    everyday_events(engine());
    everyday_events(engine_v2());
}

fn everyday_events(mut e: Engine) {
    let reached = || crate::engine::plan::REACHED_PLANS.with(|n| n.get());
    kube_tree(&mut e);
    settle(&mut e, false, None);
    e.end_startup();
    let start = reached();
    // A burstable container, and it going away.
    feed(&mut e, &Event::Container(0, 0, 6, false, true));
    settle(&mut e, false, None);
    feed(&mut e, &Event::RemoveContainer(0, 0));
    settle(&mut e, false, None);
    assert_eq!(reached() - start, 2, "each over its reach");
    // A Guaranteed container: its CPUs first, alone; then the shared pool.
    feed(&mut e, &Event::Container(0, 1, 2, false, true));
    let plan = e.plan();
    assert!(plan.more && plan.assignments_changed);
    let rels: Vec<&str> = plan.writes.iter().map(|w| &*w.rel).collect();
    assert!(rels.iter().all(|r| r.starts_with(&pod(0))), "{rels:?}");
    made(&mut e, &plan.writes);
    // Until the owed plan, another event's plan makes its urgent writes only.
    feed(&mut e, &Event::Container(0, 0, 6, false, true));
    let between = e.plan();
    assert!(
        between.more && between.urgent == between.writes.len(),
        "{:?}",
        between.writes
    );
    made(&mut e, &between.writes);
    let shrink = e.plan_owed();
    assert!(!shrink.more);
    assert!(shrink.writes.iter().any(|w| &*w.rel == "system.slice"));
    made(&mut e, &shrink.writes);
    // A foreign write to it is put right over its reach too.
    feed(&mut e, &Event::Foreign(0, 1));
    let before = reached();
    let fix = e.plan();
    assert_eq!(reached(), before + 1);
    assert_eq!(fix.writes.len(), 1, "{:?}", fix.writes);
    made(&mut e, &fix.writes);
    // Its pod read again (a pod holding exclusive CPUs, on v2 the shared
    // pool with them): over its reach.
    feed(&mut e, &Event::Container(0, 2, 6, false, true));
    let before = reached();
    let plan = e.plan();
    assert_eq!(reached(), before + 1, "{:?}", plan.writes);
    made(&mut e, &plan.writes);
    // A Guaranteed pod seen with its container in one go (a `mkdir -p`, a
    // rename): the pin still goes first, alone (on v2 the new pod holds the
    // shrunk pool and the pin).
    feed(&mut e, &Event::Container(1, 0, 2, false, true));
    let before = reached();
    let plan = e.plan();
    assert_eq!(reached(), before + 1, "{:?}", plan.writes);
    assert!(plan.more, "{:?}", plan.writes);
    assert!(
        plan.writes.iter().all(|w| w.rel.starts_with(&pod(1))),
        "{:?}",
        plan.writes
    );
}

/// The state file lists each workload's cgroups: a cgroup joining or
/// leaving a workload is a change to save, even when no CPU moves.
#[test]
fn a_cgroup_joining_or_leaving_a_workload_is_saved() {
    let mut e = engine();
    kube_tree(&mut e);
    settle(&mut e, false, None);
    e.end_startup();
    let [old, new] = ["kubepods/pod1/old", "kubepods/pod1/new"];
    let obs = |rel: &str| Observed {
        rel: rel.into(),
        cpus: Some(set("0-15")),
        mems: Some(set("0-1")),
        ..Observed::default()
    };
    reading(&mut e, obs(old), want(2), "pod:1/app");
    settle(&mut e, false, None);
    reading(&mut e, obs(new), want(2), "pod:1/app");
    let plan = e.plan();
    assert!(plan.assignments_changed, "joined");
    made(&mut e, &plan.writes);
    e.forget(old);
    assert!(e.plan().assignments_changed, "left");
    assert_eq!(e.saved_state().assignments["pod:1/app"].cgroups, [new]);
}

/// The kernel's v1 rules for one write, on what the engine knows of the
/// tree at the moment it is made: a child never gets a CPU its parent lacks
/// (EACCES), a parent never drops a CPU a child still has (EBUSY).
pub(super) fn kernel_accepts(e: &Engine, w: &Write) -> Result<(), String> {
    if w.file != File::Cpus {
        return Ok(());
    }
    let known = |rel: &str| {
        e.cgroups
            .get(rel)
            .and_then(|c| c.cpus.as_deref())
            .filter(|s| !s.is_empty())
            .cloned()
    };
    // Only where the model is a state v1 can be in (a child within its
    // parent): the events feed cgroups in any order.
    let now = known(&w.rel).unwrap_or_default();
    if let Some(parent) = crate::cgroup::parent(&w.rel).and_then(known)
        && now.is_subset(&parent)
        && !w.set.is_subset(&parent)
    {
        return Err(format!(
            "EACCES: {} gets {} outside its parent's {parent}",
            w.rel, w.set
        ));
    }
    for child in e.subtree(&w.rel) {
        if crate::cgroup::parent(&child) == Some(&*w.rel)
            && let Some(c) = known(&child)
            && c.is_subset(&now)
            && !c.intersection(e.topology().online()).is_subset(&w.set)
        {
            return Err(format!(
                "EBUSY: {} narrowed to {} under {child}'s {c}",
                w.rel, w.set
            ));
        }
    }
    Ok(())
}

proptest! {
    /// A plan cut short (its urgent writes made, then only some of the
    /// rest, before the next event comes), or whose rest is owed and made
    /// later or not before the next event, is finished by the plans that
    /// follow: once settled, the engine is where one that made every write
    /// is. Every write made keeps the kernel's v1 rules when it is made,
    /// urgent ones included, though they jump ahead of the shared pool's.
    #[test]
    fn a_plan_cut_short_is_finished_by_the_next(
        events in proptest::collection::vec(event(), 1..40),
        cuts in proptest::collection::vec(0usize..8, 40),
        rests in proptest::collection::vec(0usize..9, 40),
    ) {
        let mut engines = [engine(), engine()];
        for e in engines.iter_mut() {
            kube_tree(e);
            add(e, "hpc", "0-3,8-11", None);
            settle(e, false, None);
            e.end_startup();
        }
        for (step, ev) in events.iter().enumerate() {
            let [cut, whole] = &mut engines;
            feed(whole, ev);
            settle(whole, false, None);
            feed(cut, ev);
            let mut plan = cut.plan();
            let mut made = plan.urgent + cuts[step].min(plan.writes.len() - plan.urgent);
            loop {
                for w in &plan.writes[..made] {
                    if let Err(why) = kernel_accepts(cut, w) {
                        prop_assert!(false, "after event {} {:?}: {}\n{:#?}\nurgent {}", step, ev, why, plan.writes, plan.urgent);
                    }
                    cut.written(w, Ok(()));
                }
                // The owed plan, before the next event (cut short too, at
                // random: 8 makes it whole) or not at all.
                if !plan.more || rests[step] == 0 {
                    break;
                }
                plan = cut.plan_owed();
                made = plan.urgent + (rests[step] - 1).min(plan.writes.len() - plan.urgent);
                if rests[step] == 8 {
                    made = plan.writes.len();
                }
            }
        }
        let [cut, whole] = &mut engines;
        settle(cut, false, None);
        // Whether a cgroup's set is "ours" (written for an exclusive
        // workload) says under which role it was last written, and a write
        // made later may be made under a newer role: compared without it.
        // Likewise an unmanaged cgroup given back its parent's CPUs gets
        // them as they are when the give-back is written, which a plan cut
        // short moves in time: its set is its own business from then on.
        let unowned = |e: &Engine| {
            let (mut cgroups, workloads) = view(e);
            for c in &mut cgroups {
                c.5 = false;
                if c.1 == Role::Unmanaged {
                    (c.2, c.3) = (None, None);
                }
            }
            (cgroups, workloads)
        };
        prop_assert_eq!(unowned(cut), unowned(whole));
    }
}
