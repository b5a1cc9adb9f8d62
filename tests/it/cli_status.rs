//! The operator's view without a daemon: `pinctl status` rendered from
//! synthetic documents at 16 and 256 CPUs, `describe`'s matching, `verify` on
//! fake cgroup trees (v1 and v2) with planted problems, and the formatting of
//! events.

use crate::support::{status_doc, status_map};

use pinctl::api::{self, Source};
use pinctl::cli::status::{self, Mode};
use pinctl::cli::style::Style;
use status_doc::{SHAPE_16, SHAPE_256, job, pod, set};
use status_map::{check_map, map_rows};

/// A fixed "now": 1 h 2 min after the synthetic daemon started.
const NOW: u64 = 1_763_700_000 + 3_720;

fn check_layout(text: &str, max_width: usize) {
    for line in text.lines() {
        assert!(!line.ends_with(' '), "trailing blank: {line:?}");
        assert!(
            line.chars().count() <= max_width,
            "line wider than {max_width}: {line:?}"
        );
        assert!(!line.contains('\x1b'), "no colour when off: {line:?}");
    }
}

#[test]
fn status_at_16_cpus_maps_every_cpu_to_its_owner() {
    let doc = status_doc::status(
        SHAPE_16,
        "0,8",
        &[
            pod(1, "app", 4),
            job(2, 2),
            pod(3, "db", 3),
            pod(4, "big", 12),
        ],
    );
    let text = status::render(&doc, Mode::Online, Style::OFF, NOW);
    println!("{text}");
    for want in [
        "pinctld 0.1.0, pid 4242, up 1h 2m, ready",
        "Health:      healthy",
        "Hierarchy:   cgroup v2, kubelet cgroup driver systemd",
        "Topology:    1 socket, 1 NUMA node, 1 L3 group, 8 cores x 2 threads: 16 CPUs online (0-15)",
        "Reserved:    0,8 (2 CPUs)",
        "Shared pool: 0,5-6,8,13-15 (7 CPUs, 2 of them reserved)",
        "Exclusive:   9 CPUs for 3 workloads; 1 pending",
        "Socket 0\n",
        "Pending (in the shared pool):",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
    let rows = map_rows(&text);
    assert_eq!(rows.len(), 1, "one row: one L3 group of 8 cores");
    assert_eq!(rows[0].1, set("0-15"));
    check_map(&doc, &text);
    check_layout(&text, 100);
    // The first cell is core 0 = CPUs 0 and 8, both reserved.
    assert_eq!(rows[0].2[0], "rr");
}

/// `strict_reservation`: a line under the shared pool says what the pods
/// get, without the reserved CPUs, or that nothing else is left.
#[test]
fn status_shows_the_pods_pool_without_the_reserved_cpus() {
    let mut doc = status_doc::status(SHAPE_16, "0,8", &[pod(1, "app", 4), job(2, 2)]);
    let plain = status::render(&doc, Mode::Online, Style::OFF, NOW);
    assert!(!plain.contains("Pods' pool"), "{plain}");
    doc.strict_reservation = Some(api::Strict::of(&doc.shared_pool, &doc.reserved));
    let text = status::render(&doc, Mode::Online, Style::OFF, NOW);
    let want = "Shared pool: 0,4-8,12-15 (10 CPUs, 2 of them reserved)\n\
                Pods' pool:  4-7,12-15 (8 CPUs, none reserved: strict_reservation)\n";
    assert!(text.contains(want), "missing {want:?} in:\n{text}");
    check_layout(&text, 100);
    // Every other CPU exclusive: the pods keep the reserved CPUs.
    let mut full = status_doc::status(SHAPE_16, "0,8", &[pod(1, "app", 14)]);
    full.strict_reservation = Some(api::Strict::of(&full.shared_pool, &full.reserved));
    let text = status::render(&full, Mode::Online, Style::OFF, NOW);
    let want = "Pods' pool:  0,8 (2 CPUs, all reserved: strict_reservation has no other CPU left)";
    assert!(text.contains(want), "missing {want:?} in:\n{text}");
}

#[test]
fn status_at_256_cpus_has_a_row_per_l3_group_under_each_socket() {
    let mut asks = Vec::new();
    for n in 0..40 {
        asks.push(if n % 5 == 0 {
            job(n, 3)
        } else {
            pod(n, "app", [2, 4, 6, 8][n as usize % 4])
        });
    }
    let doc = status_doc::status(SHAPE_256, "0,128", &asks);
    let text = status::render(&doc, Mode::Online, Style::OFF, NOW);
    println!("{text}");
    let rows = map_rows(&text);
    assert_eq!(
        rows.len(),
        8,
        "2 sockets x 2 nodes x 2 L3 groups, 16 cores each"
    );
    for (label, cpus, cells) in &rows {
        assert_eq!(cells.len(), 16, "{label}");
        assert_eq!(cpus.len(), 32, "{label}");
    }
    assert!(text.contains("Socket 0 (NUMA nodes 0,1)\n"), "{text}");
    assert!(text.contains("Socket 1 (NUMA nodes 2,3)\n"), "{text}");
    assert!(
        text.contains("  node 3  L3 7  112-127,240-255  "),
        "the last row names its CPUs:\n{text}"
    );
    check_map(&doc, &text);
    check_layout(&text, 100);
}

#[test]
fn status_with_more_workloads_than_letters_uses_two_character_tags() {
    let asks: Vec<_> = (0..120).map(|n| pod(n, "app", 2)).collect();
    let doc = status_doc::status(SHAPE_256, "0,128", &asks);
    let text = status::render(&doc, Mode::Online, Style::OFF, NOW);
    println!("{text}");
    let tagged = status::tagged(&doc);
    assert_eq!(tagged.len(), 120);
    assert!(tagged.iter().all(|(t, _)| t.len() == 2));
    let rows = map_rows(&text);
    // Cells of 4 characters: at most 12 cores a row (64 / 5), so each L3
    // group of 16 cores is two rows of 8.
    assert_eq!(rows.len(), 16);
    assert!(rows.iter().all(|(_, _, cells)| cells.len() == 8));
    check_map(&doc, &text);
    check_layout(&text, 100);
}

#[test]
fn status_shows_trouble_and_says_when_it_is_offline() {
    let mut doc = status_doc::status(SHAPE_16, "0,8", &[pod(1, "app", 4)]);
    doc.health = api::Health {
        state: "degraded".into(),
        reasons: vec!["1 hung path".into(), "1 failing cgroup".into()],
    };
    doc.failing.push(api::Failing {
        cgroup: "kubepods.slice/x".into(),
        error: "write cpuset.cpus: Device or resource busy".into(),
        errno: Some(16),
    });
    doc.watchdog.hung_paths.push(api::HungPath {
        path: "/sys/fs/cgroup/kubepods.slice/y".into(),
        op: "read".into(),
        secs: 75,
    });
    doc.watchdog.stuck_tasks.push(api::StuckTask {
        pid: 77,
        tid: 78,
        comm: "fio".into(),
        cgroup: "kubepods.slice/z".into(),
        wchan: Some("io_schedule".into()),
        uid: Some(1000),
        secs: 130,
    });
    doc.watchdog.frozen.push(api::Frozen {
        cgroup: "kubepods.slice/w".into(),
        owner: Some(65534),
        secs: 90,
        thawed: false,
    });
    doc.watchdog.unwatched_cgroups = 3;
    doc.watchdog.state_error = Some("failed to rename /var/lib/pinctl/.state.json.tmp-1 to state file /var/lib/pinctl/state.json".into());
    doc.config.file = Some("/etc/pinctl/pinctld.toml".into());
    doc.config.restart_pending = vec!["socket".into(), "read_timeout".into()];
    doc.config.reload_error = Some("/etc/pinctl/pinctld.toml:21:1: unknown key `cpu_count`".into());
    let text = status::render(&doc, Mode::Online, Style::OFF, NOW);
    for want in [
        "Health:      degraded: 1 hung path, 1 failing cgroup",
        "Config:      reload failed, running on the one before: /etc/pinctl/pinctld.toml:21:1: unknown key `cpu_count`",
        "Config:      /etc/pinctl/pinctld.toml changes socket, read_timeout; applied at the next restart",
        "Failing cgroups:\n  kubepods.slice/x: write cpuset.cpus: Device or resource busy (errno 16)",
        "hung path /sys/fs/cgroup/kubepods.slice/y (read hung 1m 15s ago)",
        "task 78 (pid 77, uid 1000, fio) of kubepods.slice/z in D state for 2m 10s, in io_schedule",
        "kubepods.slice/w (uid 65534) frozen for 1m 30s",
        "3 cgroups without an inotify watch",
        "state file not saved: failed to rename",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
    let notes = vec!["no state file at /x".to_string()];
    let text = status::render(&doc, Mode::Offline { notes: &notes }, Style::OFF, NOW);
    assert!(text.starts_with("OFFLINE: "), "{text}");
    assert!(text.contains("  no state file at /x\n"), "{text}");
    assert!(
        !text.contains("pid 4242"),
        "no daemon line offline:\n{text}"
    );
    // Colour on: the same text with escape codes.
    let coloured = status::render(&doc, Mode::Online, Style::ON, NOW);
    assert!(coloured.contains("\x1b["));
    let plain = status::render(&doc, Mode::Online, Style::OFF, NOW);
    assert_eq!(strip_ansi(&coloured), plain);
}

/// Slurm's jobs: a line each with the CPUs the kernel gives them, and each
/// conflict with an exclusive workload in red under them; a tree inside
/// the daemon's own subtree is a `Config:` line that says what to change.
#[test]
fn status_lists_slurms_jobs_and_their_conflicts() {
    let mut doc = status_doc::status(SHAPE_16, "0,8", &[pod(1, "app", 4)]);
    let held = doc.workloads[0].cpus.clone().unwrap();
    let first = held.iter().next().unwrap();
    let job = |name: &str, cpus: &str| pinctl::slurm::Job {
        cgroup: format!("system.slice/slurmstepd.scope/{name}"),
        name: name.into(),
        cpus: set(cpus),
        effective: set(cpus),
    };
    doc.slurm.jobs = vec![job("job_1", &first.to_string()), job("job_2", "0")];
    doc.slurm.inside = vec!["system.slice/slurmstepd.scope".into()];
    let text = status::render(&doc, Mode::Online, Style::OFF, NOW);
    for want in [
        "Slurm:       2 jobs; 1 conflict\n",
        &format!("             job_1 CPUs {first} (system.slice/slurmstepd.scope/job_1)\n"),
        "             job_2 CPUs 0 (system.slice/slurmstepd.scope/job_2)\n",
        &format!(
            "             Slurm job job_1 (system.slice/slurmstepd.scope/job_1) has CPUs {first} that exclusive workload"
        ),
        "Config:      Slurm's jobs run in system.slice/slurmstepd.scope, inside a subtree pinctl confines",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
    check_layout(&text, 400);
}

/// `[slurm] housekeeping`: the `Slurm:` line names the job cores kept
/// quiet and what leaves them, or says there are none yet.
#[test]
fn status_names_the_job_cores_kept_quiet() {
    let mut doc = status_doc::status(SHAPE_16, "0,8", &[pod(1, "app", 2)]);
    doc.slurm.jobs = vec![pinctl::slurm::Job {
        cgroup: "system.slice/slurmstepd.scope/job_3".into(),
        name: "job_3".into(),
        cpus: set("12-15"),
        effective: set("12-15"),
    }];
    doc.slurm.housekeeping = true;
    doc.slurm.cores = set("12-15");
    doc.housekeeping = Some(pinctl::api::Housekeeping {
        on: true,
        ..Default::default()
    });
    let text = status::render(&doc, Mode::Online, Style::OFF, NOW);
    let want = "Slurm:       1 job; job cores 12-15 kept quiet (the shared pool, the kernel's movable work leave them)\n";
    assert!(text.contains(want), "missing {want:?} in:\n{text}");
    doc.slurm.cores = pinctl::CpuSet::new();
    let text = status::render(&doc, Mode::Online, Style::OFF, NOW);
    assert!(
        text.contains("Slurm:       1 job; no job cores yet\n"),
        "{text}"
    );
    check_layout(&text, 400);
}

/// `pinctl run`'s runs: a line each with who asked, the CPUs and the
/// command, and a line per ask waiting in line.
#[test]
fn status_lists_runs_and_asks_in_line() {
    let mut doc = status_doc::status(SHAPE_16, "0,8", &[pod(1, "app", 4)]);
    let key = doc.workloads[0].key.clone();
    let cpus = doc.workloads[0].cpus.clone().unwrap();
    doc.runs.running = vec![pinctl::api::Run {
        key: key.clone(),
        cgroup: "pinctl.slice/run-lmp.scope".into(),
        uid: 0,
        cpus: 4,
        command: vec!["mpirun".into(), "-np".into(), "4".into(), "lmp".into()],
    }];
    doc.runs.waiting = vec![pinctl::api::Waiter {
        uid: 4_000_000,
        cpus: 16,
        waited: 35,
        command: vec!["./solver".into()],
    }];
    let text = status::render(&doc, Mode::Online, Style::OFF, NOW);
    for want in [
        "Runs:        1 run, 1 waiting\n".to_string(),
        format!("             {key}  uid 0 (root)  CPUs {cpus}  mpirun -np 4 lmp\n"),
        "             waiting 35 s: uid 4000000  16 CPUs  ./solver\n".to_string(),
    ] {
        assert!(text.contains(&want), "missing {want:?} in:\n{text}");
    }
    check_layout(&text, 400);
}

/// A resize that cannot be met: its own section, the workload keeping its
/// CPUs in the map.
#[test]
fn status_lists_resizes_pending() {
    let mut doc = status_doc::status(SHAPE_16, "0,8", &[pod(1, "app", 2)]);
    doc.workloads[0].resize = Some(pinctl::api::Pending {
        requested: 1,
        available: 0,
        reason: "1 CPU is fewer than the 2 it was first given".into(),
    });
    let text = status::render(&doc, Mode::Online, Style::OFF, NOW);
    let key = &doc.workloads[0].key;
    for want in [
        "Resizes pending (each keeps its CPUs):\n".to_string(),
        format!("  {key}  ("),
        "    wants 1: 1 CPU is fewer than the 2 it was first given\n".to_string(),
    ] {
        assert!(text.contains(&want), "missing {want:?} in:\n{text}");
    }
    check_layout(&text, 400);
}

/// A workload placed partly off its devices' nodes (`prefer` with no room
/// there) is listed with the split; one placed on them is not.
#[test]
fn status_lists_workloads_placed_off_their_devices() {
    let mut doc = status_doc::status(SHAPE_16, "0,8", &[pod(1, "app", 2), pod(2, "db", 2)]);
    for (w, cpus_near) in doc.workloads.iter_mut().zip([1, 2]) {
        w.near = Some(pinctl::api::Near {
            devices: Vec::new(),
            nodes: vec![1],
            alignment: "prefer".into(),
            cpus_near: Some(cpus_near),
        });
    }
    let text = status::render(&doc, Mode::Online, Style::OFF, NOW);
    let (off, on) = (&doc.workloads[0].key, &doc.workloads[1].key);
    for want in [
        "Placed off their devices:\n".to_string(),
        format!("  {off}  ("),
        "    1 of its 2 CPUs on its devices' NUMA node 1 (prefer)\n".to_string(),
    ] {
        assert!(text.contains(&want), "missing {want:?} in:\n{text}");
    }
    let section = text.split("Placed off their devices:").nth(1).unwrap();
    assert!(!section.contains(&format!("  {on}  (")), "{text}");
    check_layout(&text, 400);
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[test]
fn sources_are_named() {
    assert_eq!(status::source_short(&Source::Kubelet), "kubelet");
    assert_eq!(
        status::source_short(&Source::Rule {
            pattern: "a/*".into(),
            line: 3
        }),
        "rule line 3"
    );
}

// ---------------------------------------------------------------------------
// describe: which workload a TARGET names
// ---------------------------------------------------------------------------

mod describe {
    use super::*;
    use pinctl::cli::describe::{Found, find, render, render_candidates};
    use std::path::Path;

    /// Two containers of pod 1 (systemd driver), one of pod 3 (cgroupfs
    /// driver, a sub-cgroup inside it) and a rule's job.
    fn doc() -> api::Status {
        let mut app = pod(1, "app", 2);
        let side = {
            let mut s = pod(1, "sidecar", 2);
            s.cgroup = app
                .cgroup
                .replace(&status_doc::container_id(1), &status_doc::container_id(2));
            s
        };
        app.cgroup = app.cgroup.clone();
        let db = status_doc::Ask {
            key: format!("pod:{}/db", status_doc::uid(3)),
            cgroup: format!(
                "kubepods/burstable/pod{}/{}",
                status_doc::uid(3),
                status_doc::container_id(3)
            ),
            cpus: 4,
            source: Source::Annotation {
                bundle: "/run/containerd/x/config.json".into(),
                key: "pinctl.io/cpus".into(),
            },
        };
        status_doc::status(SHAPE_16, "0,8", &[app, side, db, job(7, 2)])
    }

    fn key_of(f: Found<'_>) -> String {
        match f {
            Found::One(w) => w.key.clone(),
            Found::Ambiguous(ws) => format!(
                "ambiguous: {}",
                ws.iter()
                    .map(|w| w.key.as_str())
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
            Found::Nothing => "nothing".into(),
        }
    }

    #[test]
    fn a_target_is_a_key_a_path_a_pod_uid_or_a_container_id() {
        let doc = doc();
        let root = Path::new("/sys/fs/cgroup");
        let app = format!("pod:{}/app", status_doc::uid(1));
        let db = format!("pod:{}/db", status_doc::uid(3));
        let job = "cgroup:hpc.slice/job-7.scope".to_string();
        let app_cgroup = doc.workloads[0].cgroups[0].clone();
        let db_cgroup = doc.workloads[2].cgroups[0].clone();
        let cases: Vec<(String, String)> = vec![
            // Keys, with or without "pod:".
            (app.clone(), app.clone()),
            (app.trim_start_matches("pod:").to_string(), app.clone()),
            (job.clone(), job.clone()),
            // Paths: relative, absolute, v2 root, a sub-cgroup, slashes.
            (app_cgroup.clone(), app.clone()),
            (format!("/sys/fs/cgroup/{app_cgroup}"), app.clone()),
            (format!("/{db_cgroup}/"), db.clone()),
            (format!("{db_cgroup}/init.scope"), db.clone()),
            ("hpc.slice/job-7.scope".into(), job.clone()),
            // A pod's cgroup holds no workload itself: its containers.
            (
                format!("kubepods/burstable/pod{}", status_doc::uid(3)),
                db.clone(),
            ),
            // Pod UIDs, with dashes or the systemd driver's underscores.
            (status_doc::uid(3), db.clone()),
            (status_doc::uid(3).replace('-', "_"), db.clone()),
            // Container ids: whole, a prefix, upper case.
            (status_doc::container_id(3), db.clone()),
            (status_doc::container_id(1)[..12].to_string(), app.clone()),
            (
                status_doc::container_id(1)[..12].to_ascii_uppercase(),
                app.clone(),
            ),
            ("job-7".into(), job.clone()),
            // Nothing.
            ("kubepods.slice/nope".into(), "nothing".into()),
            ("/elsewhere/kubepods".into(), "nothing".into()),
            ("".into(), "nothing".into()),
        ];
        for (target, want) in cases {
            assert_eq!(key_of(find(&doc, &target, root)), want, "target {target:?}");
        }
    }

    #[test]
    fn an_ambiguous_target_lists_its_candidates() {
        let doc = doc();
        let root = Path::new("/sys/fs/cgroup");
        let app = format!("pod:{}/app", status_doc::uid(1));
        let side = format!("pod:{}/sidecar", status_doc::uid(1));
        // A pod with two pinned containers, by UID and by its cgroup.
        let pod_slice = format!(
            "kubepods.slice/kubepods-pod{}.slice",
            status_doc::uid(1).replace('-', "_")
        );
        for target in [status_doc::uid(1), pod_slice, "c0ffee".to_string()] {
            let got = key_of(find(&doc, &target, root));
            assert!(
                got.starts_with("ambiguous: ") && got.contains(&app) && got.contains(&side),
                "{target}: {got}"
            );
        }
        let Found::Ambiguous(c) = find(&doc, &status_doc::uid(1), root) else {
            panic!()
        };
        let text = render_candidates("x", &c);
        assert!(text.starts_with("\"x\" matches 2 workloads"), "{text}");
        assert!(text.contains(&format!("  {app}  (")), "{text}");
    }

    /// `housekeeping`: whether its CPUs are kept clear, what stays on each
    /// of them (its CPUs alone), and the node's boot line, for every
    /// exclusive CPU, with what each part removes.
    #[test]
    fn the_page_says_what_stays_on_its_cpus_and_the_nodes_boot_line() {
        let mut doc = doc();
        let plain = render(&doc, &doc.workloads[2], &[], 0, Style::OFF);
        assert!(!plain.contains("Quiet:"), "{plain}");
        doc.housekeeping = Some(status_doc::housekeeping(&doc));
        let hk = doc.housekeeping.clone().unwrap();
        let w = &doc.workloads[1];
        let cpus = w.cpus.clone().unwrap();
        let text = render(&doc, w, &[], 0, Style::OFF);
        println!("{text}");
        assert!(
            text.contains(
                "Quiet:      the kernel's movable work is kept off its CPUs (housekeeping)\n"
            ),
            "{text}"
        );
        let stays: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.starts_with("Stays:"))
            .take_while(|l| l.starts_with("Stays:") || l.starts_with("            CPU "))
            .collect();
        assert_eq!(
            stays.len(),
            cpus.len(),
            "a line per CPU of its own:\n{text}"
        );
        for (line, cpu) in stays.iter().zip(cpus.iter()) {
            let st = hk.stays.iter().find(|s| s.cpu == cpu).unwrap();
            let threads = st.threads.join(", ");
            assert!(
                line[12..].starts_with(&format!("CPU {cpu}: {threads}")),
                "{line}"
            );
        }
        // The node's line, not one for its CPUs alone.
        let node = hk.boot.clone().unwrap();
        assert_ne!(
            Some(node.clone()),
            pinctl::bootline::boot_params(&cpus, &doc.online)
        );
        assert!(text.contains(&format!("Boot line:  {node}\n")), "{text}");
        for p in pinctl::bootline::PARAMS {
            assert!(
                text.lines()
                    .any(|l| l.trim_start().starts_with(p.name) && l.ends_with(p.removes)),
                "{} in:\n{text}",
                p.name
            );
        }
        // Its CPUs not yet clear; housekeeping off.
        let mut partly = hk.clone();
        partly.away = partly.away.difference(&cpus);
        doc.housekeeping = Some(partly);
        let text = render(&doc, w, &[], 0, Style::OFF);
        assert!(
            text.contains(&format!(
                "Quiet:      housekeeping on, but CPUs {cpus} were not kept clear at its last pass\n"
            )),
            "{text}"
        );
        doc.housekeeping = Some(api::Housekeeping { on: false, ..hk });
        let text = render(&doc, w, &[], 0, Style::OFF);
        assert!(
            text.contains(
                "Quiet:      housekeeping off: what was moved off its CPUs is being put back\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_v1_path_may_name_its_controller() {
        let mut doc = doc();
        doc.hierarchy = "v1".into();
        let db = format!("pod:{}/db", status_doc::uid(3));
        let target = format!("/sys/fs/cgroup/cpuset/{}", doc.workloads[2].cgroups[0]);
        assert_eq!(key_of(find(&doc, &target, Path::new("/sys/fs/cgroup"))), db);
    }

    #[test]
    fn the_page_says_source_alignment_cgroups_and_history() {
        let doc = doc();
        let w = &doc.workloads[2];
        let cgroup = w.cgroups[0].clone();
        let write = |seq, cg: &str, reason: &str, error: Option<&str>| api::Event {
            seq,
            at_ms: 1_763_769_599_123 + seq,
            what: api::EventKind::Write {
                cgroup: cg.into(),
                file: "cpuset.cpus".into(),
                old: Some(set("0-15")),
                new: w.cpus.clone().unwrap(),
                reason: reason.into(),
                error: error.map(str::to_string),
                workload: None,
            },
        };
        let events = vec![
            write(1, "system.slice", "shared pool", None),
            write(2, &cgroup, "exclusive CPUs of x (annotation)", None),
            write(
                3,
                &format!("{cgroup}/init.scope"),
                "exclusive CPUs of x",
                Some("EBUSY"),
            ),
        ];
        let text = render(&doc, w, &events, 0, Style::OFF);
        println!("{text}");
        let cpus = w.cpus.as_ref().unwrap().to_string();
        for want in [
            format!("Workload:   {}", w.key),
            "Source:     the OCI annotation pinctl.io/cpus in /run/containerd/x/config.json".into(),
            "Requested:  4 exclusive CPUs".into(),
            format!("CPUs:       {cpus}"),
            "Alignment:  socket 0; NUMA node 0; L3 group 0; 2 whole cores".into(),
            format!("Cgroups:    {cgroup}"),
            "History (2 writes in the daemon's recent events):".into(),
            format!(
                "  #2 2025-11-21 23:59:59.125  write {cgroup} cpuset.cpus 0-15 -> {cpus}  exclusive CPUs of x (annotation)"
            ),
            "FAILED: EBUSY".into(),
        ] {
            assert!(text.contains(&want), "missing {want:?} in:\n{text}");
        }
        assert!(!text.contains("system.slice"), "{text}");
        // A pending workload says why it waits.
        let pending = &doc.workloads.iter().find(|w| w.cpus.is_none());
        assert!(pending.is_none(), "all fit on 16 CPUs");
        let mut doc2 = doc.clone();
        doc2.workloads[3].cpus = None;
        doc2.workloads[3].alignment = None;
        doc2.workloads[3].pending = Some(api::Pending {
            requested: 2,
            available: 0,
            reason: "not enough CPUs".into(),
        });
        let text = render(&doc2, &doc2.workloads[3], &[], 0, Style::OFF);
        assert!(
            text.contains("none yet, pending in the shared pool (")
                && text.contains("wants 2, 0 available: not enough CPUs"),
            "{text}"
        );
        assert!(
            text.contains("Source:     the [[rule]] matching \"hpc.slice/job-*.scope\" (line 42"),
            "{text}"
        );
        // strict_reservation: one waiting in a managed subtree waits in the
        // pods' pool; one elsewhere (this rule's job) in the shared pool.
        doc2.strict_reservation = Some(api::Strict::of(&doc2.shared_pool, &doc2.reserved));
        let pods = doc2.strict_reservation.as_ref().unwrap().pool.clone();
        let job = render(&doc2, &doc2.workloads[3], &[], 0, Style::OFF);
        let shared = format!("pending in the shared pool ({})", doc2.shared_pool);
        assert!(job.contains(&shared), "{job}");
        doc2.config.managed = doc2.workloads[3].cgroups.clone();
        let managed = render(&doc2, &doc2.workloads[3], &[], 0, Style::OFF);
        let want = format!("pending in the shared pool ({pods})");
        assert!(managed.contains(&want), "{managed}");
    }
}

// ---------------------------------------------------------------------------
// events
// ---------------------------------------------------------------------------

#[test]
fn events_are_one_line_each() {
    use pinctl::cli::events::format_event;
    let e = api::Event {
        seq: 7,
        at_ms: 1_763_769_599_123,
        what: api::EventKind::Write {
            cgroup: "kubepods/pod1/abc".into(),
            file: "cpuset.cpus".into(),
            old: None,
            new: set("2-3"),
            reason: "exclusive CPUs of pod:1/app (kubelet)".into(),
            error: Some("Device or resource busy (os error 16)".into()),
            workload: Some("pod:1/app".into()),
        },
    };
    assert_eq!(
        format_event(&e, 0, Style::OFF),
        "#7 2025-11-21 23:59:59.123  write kubepods/pod1/abc cpuset.cpus ? -> 2-3  exclusive CPUs of pod:1/app (kubelet)  FAILED: Device or resource busy (os error 16)"
    );
    let r = api::Event {
        seq: 8,
        at_ms: 1_763_769_600_000,
        what: api::EventKind::Repair {
            path: "/sys/fs/cgroup/cpuset/kubepods".into(),
            created: vec![
                "/sys/fs/cgroup/cpuset/kubepods".into(),
                "/sys/fs/cgroup/cpuset/kubepods/burstable".into(),
            ],
        },
    };
    assert_eq!(
        format_event(&r, 3600, Style::OFF),
        "#8 2025-11-22 01:00:00.000  repair /sys/fs/cgroup/cpuset/kubepods  created /sys/fs/cgroup/cpuset/kubepods, /sys/fs/cgroup/cpuset/kubepods/burstable"
    );
}

// ---------------------------------------------------------------------------
// text other people chose never drives the operator's terminal
// ---------------------------------------------------------------------------

mod hostile_text {
    use super::*;
    use pinctl::cli::describe;
    use pinctl::cli::events::format_event;
    use pinctl::cli::verify::{self, Problem, Report};

    /// What anyone who can make a cgroup or name a process can put in a name:
    /// an OSC window title ended by BEL, a clear screen, a carriage return and
    /// a newline (overwrite or forge a line), a C1 CSI (U+009B), DEL and a
    /// backspace, and a right-to-left override.
    const EVIL: &str = "\x1b]0;owned\x07\x1b[2J\r\n\u{9b}31m\x7f\x08\u{202e}";
    /// How it must be shown.
    const SHOWN: &str = r"\x1b]0;owned\x07\x1b[2J\r\n\u{9b}31m\x7f\x08\u{202e}";

    /// A status whose every free-text field carries `bad`: keys, cgroups,
    /// the bundle's path, a pending workload, failing cgroups, the
    /// watchdog's paths and task names, the configuration's error, and the
    /// kernel threads, interrupts and failures of `housekeeping`.
    fn doc(bad: &str) -> api::Status {
        let mut app = pod(1, "app", 2);
        app.key = format!("pod:1/{bad}");
        app.cgroup = format!("kubepods.slice/{bad}.scope");
        app.source = Source::Annotation {
            bundle: format!("/run/{bad}/config.json").into(),
            key: format!("pinctl.io/cpus.{bad}"),
        };
        let mut big = job(2, 40);
        big.key = format!("cgroup:{bad}");
        let mut doc = status_doc::status(SHAPE_16, "0,8", &[app, job(3, 2), big]);
        doc.health.reasons = vec![format!("1 failing cgroup {bad}")];
        doc.failing.push(api::Failing {
            cgroup: format!("kubepods.slice/{bad}.scope"),
            error: format!("write /sys/fs/cgroup/{bad}: busy"),
            errno: Some(16),
        });
        doc.watchdog.hung_paths.push(api::HungPath {
            path: format!("/sys/fs/cgroup/{bad}").into(),
            op: "read".into(),
            secs: 5,
        });
        doc.watchdog.stuck_tasks.push(api::StuckTask {
            pid: 7,
            tid: 7,
            comm: bad.into(),
            cgroup: format!("kubepods.slice/{bad}.scope"),
            wchan: Some(bad.into()),
            uid: None,
            secs: 90,
        });
        doc.watchdog.frozen.push(api::Frozen {
            cgroup: format!("kubepods.slice/{bad}.scope"),
            owner: None,
            secs: 90,
            thawed: false,
        });
        doc.watchdog.missing_paths.push(api::MissingPath {
            path: format!("/sys/fs/cgroup/{bad}").into(),
            problem: format!("cannot mkdir: {bad}"),
        });
        doc.config.file = Some(format!("/etc/{bad}.toml").into());
        doc.config.restart_pending = vec![bad.into()];
        doc.config.reload_error = Some(format!("/etc/x.toml:1:1: unknown key `{bad}`"));
        let mut hk = status_doc::housekeeping(&doc);
        hk.stays[0].threads[0] = format!("kworker/{bad}");
        hk.stays[0].interrupts[0] = format!("41 {bad}");
        hk.moved[2].what = format!("kthread 7 ({bad})");
        hk.failed = vec![format!("kthread 7 ({bad}): Invalid argument")];
        hk.error = Some(format!("cannot read /proc/{bad}"));
        doc.housekeeping = Some(hk);
        doc
    }

    fn events(bad: &str) -> Vec<api::Event> {
        vec![
            api::Event {
                seq: 1,
                at_ms: 1_763_769_599_123,
                what: api::EventKind::Write {
                    cgroup: format!("kubepods.slice/{bad}.scope"),
                    file: "cpuset.cpus".into(),
                    old: None,
                    new: set("1,9"),
                    reason: format!("exclusive CPUs of pod:1/{bad} (annotation)"),
                    error: Some(format!("write {bad}: busy")),
                    workload: Some(format!("pod:1/{bad}")),
                },
            },
            api::Event {
                seq: 2,
                at_ms: 1_763_769_599_124,
                what: api::EventKind::Repair {
                    path: format!("/sys/fs/cgroup/{bad}").into(),
                    created: vec![format!("/sys/fs/cgroup/{bad}/x").into()],
                },
            },
        ]
    }

    /// `text` without the colour codes `Style` writes (`ESC [ digits m`);
    /// any other escape sequence fails the test.
    fn without_our_colours(text: &str) -> String {
        let mut out = String::new();
        let mut rest = text;
        while let Some(at) = rest.find('\x1b') {
            out.push_str(&rest[..at]);
            let seq = &rest[at + 1..];
            let end = seq
                .find('m')
                .unwrap_or_else(|| panic!("a bare ESC in {text:?}"));
            let code = &seq[..end];
            assert!(
                code.starts_with('[') && code[1..].chars().all(|c| c.is_ascii_digit()),
                "an escape sequence that is not one of our colours: {:?} in {text:?}",
                &seq[..=end]
            );
            rest = &seq[end + 1..];
        }
        out.push_str(rest);
        out
    }

    /// No control character but the line ends, and no bidirectional control.
    fn assert_inert(what: &str, text: &str) {
        for (n, line) in text.lines().enumerate() {
            if let Some(c) = line.chars().find(|&c| {
                c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
            }) {
                panic!("{what}: raw {c:?} on line {n} {line:?} in:\n{text}");
            }
        }
    }

    #[test]
    fn status_shows_control_characters_in_keys_paths_and_task_names_as_escapes() {
        let doc = doc(EVIL);
        for style in [Style::OFF, Style::ON] {
            let notes = vec![format!("no state file at /var/{EVIL}")];
            for mode in [Mode::Online, Mode::Offline { notes: &notes }] {
                let text = status::render(&doc, mode, style, NOW);
                assert_inert("status", &without_our_colours(&text));
                // Two lines per hostile name would have been a forged line.
                let benign = status::render(&super::hostile_text::doc("x"), mode, style, NOW);
                assert_eq!(text.lines().count(), benign.lines().count(), "{text}");
            }
        }
        let text = status::render(&doc, Mode::Online, Style::OFF, NOW);
        println!("{text}");
        for want in [
            format!("Health:      healthy: 1 failing cgroup {SHOWN}"),
            format!("running on the one before: /etc/x.toml:1:1: unknown key `{SHOWN}`"),
            format!("Config:      /etc/{SHOWN}.toml changes {SHOWN}; applied"),
            format!("  cgroup:{SHOWN}  (rule line 42)"),
            format!(
                "  kubepods.slice/{SHOWN}.scope: write /sys/fs/cgroup/{SHOWN}: busy (errno 16)"
            ),
            format!("  hung path /sys/fs/cgroup/{SHOWN} (read hung 5s ago)"),
            format!(
                "  task 7 (pid 7, {SHOWN}) of kubepods.slice/{SHOWN}.scope in D state for 1m 30s, in {SHOWN}"
            ),
            format!("  kubepods.slice/{SHOWN}.scope frozen for 1m 30s"),
            format!("  missing /sys/fs/cgroup/{SHOWN}: cannot mkdir: {SHOWN}"),
            format!(
                "             stays on CPU 1: kworker/{SHOWN}, migration/1, ksoftirqd/1 and 2 more; interrupt 41 {SHOWN}\n"
            ),
            format!("             kthread 7 ({SHOWN}): Invalid argument\n"),
            format!("             cannot read /proc/{SHOWN}\n"),
        ] {
            assert!(text.contains(&want), "missing {want:?} in:\n{text}");
        }
        // The legend's last column starts where its heading does, for the
        // escaped key as for the plain one.
        let lines: Vec<&str> = text.lines().collect();
        let head = lines
            .iter()
            .position(|l| l.ends_with("WORKLOAD"))
            .expect("the legend's heading");
        let column = lines[head].find("WORKLOAD").unwrap();
        let rows: Vec<&&str> = lines[head + 1..]
            .iter()
            .take_while(|l| !l.is_empty())
            .collect();
        assert_eq!(rows.len(), 2, "{text}");
        assert!(
            rows.iter().any(|r| r[column..] == format!("pod:1/{SHOWN}")),
            "{rows:?}"
        );
        assert!(
            rows.iter()
                .all(|r| r[..column].ends_with("  ") && !r[column..].starts_with(' ')),
            "every key starts at the heading's column: {rows:?}"
        );
    }

    #[test]
    fn describe_shows_control_characters_in_keys_paths_and_task_names_as_escapes() {
        let doc = doc(EVIL);
        let w = &doc.workloads[0];
        for style in [Style::OFF, Style::ON] {
            let text = describe::render(&doc, w, &events(EVIL), 0, style);
            assert_inert("describe", &without_our_colours(&text));
        }
        let text = describe::render(&doc, w, &events(EVIL), 0, Style::OFF);
        println!("{text}");
        for want in [
            format!("Workload:   pod:1/{SHOWN}\n"),
            format!("the OCI annotation pinctl.io/cpus.{SHOWN} in /run/{SHOWN}/config.json\n"),
            format!("Cgroups:    kubepods.slice/{SHOWN}.scope\n"),
            format!("Stuck:      task 7 ({SHOWN}) in D state"),
            format!(
                "Stays:      CPU 1: kworker/{SHOWN}, migration/1, ksoftirqd/1, kworker/1:0H, kworker/1:1; interrupt 41 {SHOWN}\n"
            ),
            format!(
                "write kubepods.slice/{SHOWN}.scope cpuset.cpus ? -> 1,9  exclusive CPUs of pod:1/{SHOWN} (annotation)  FAILED: write {SHOWN}: busy"
            ),
        ] {
            assert!(text.contains(&want), "missing {want:?} in:\n{text}");
        }
        let candidates: Vec<&api::Workload> = doc.workloads.iter().collect();
        let text = describe::render_candidates(EVIL, &candidates);
        assert_inert("candidates", &text);
        assert!(text.contains(&format!("  pod:1/{SHOWN}  (")), "{text}");
    }

    #[test]
    fn events_show_control_characters_in_cgroups_reasons_and_paths_as_escapes() {
        for style in [Style::OFF, Style::ON] {
            for e in events(EVIL) {
                let line = format_event(&e, 0, style);
                assert_inert("event", &without_our_colours(&line));
                assert_eq!(line.lines().count(), 1, "{line:?}");
            }
        }
        let [write, repair] = &events(EVIL)[..] else {
            unreachable!()
        };
        assert!(
            format_event(write, 0, Style::OFF).ends_with(&format!(
                "write kubepods.slice/{SHOWN}.scope cpuset.cpus ? -> 1,9  exclusive CPUs of pod:1/{SHOWN} (annotation)  FAILED: write {SHOWN}: busy"
            ))
        );
        assert!(format_event(repair, 0, Style::OFF).ends_with(&format!(
            "repair /sys/fs/cgroup/{SHOWN}  created /sys/fs/cgroup/{SHOWN}/x"
        )));
    }

    #[test]
    fn verify_shows_control_characters_in_keys_cgroups_and_task_names_as_escapes() {
        let key = format!("pod:1/{EVIL}");
        let cgroup = format!("kubepods.slice/{EVIL}.scope");
        let report = Report {
            hierarchy: "v2".into(),
            cgroup_root: format!("/sys/fs/{EVIL}").into(),
            problems: vec![
                Problem::Effective {
                    workload: key.clone(),
                    cgroup: cgroup.clone(),
                    file: format!("/sys/fs/cgroup/{EVIL}/cpuset.cpus.effective").into(),
                    expected: set("1"),
                    actual: set("2"),
                },
                Problem::Unreadable {
                    workload: Some(key.clone()),
                    path: format!("/proc/{EVIL}").into(),
                    error: format!("{EVIL}: gone"),
                },
                Problem::TaskOutside {
                    workload: key.clone(),
                    cgroup: cgroup.clone(),
                    pid: 7,
                    comm: EVIL.into(),
                    allowed: set("0-15"),
                    expected: set("1"),
                },
                Problem::Overlap {
                    a: key.clone(),
                    b: EVIL.into(),
                    cpus: set("1"),
                },
                Problem::SharedOnExclusive {
                    cgroup: cgroup.clone(),
                    effective: set("0-15"),
                    exclusive: set("1"),
                    workloads: vec![key.clone()],
                },
            ],
            warnings: vec![format!("{key}: cgroup {cgroup} is gone")],
            ..Report::default()
        };
        for style in [Style::OFF, Style::ON] {
            let text = verify::render(&report, style);
            assert_inert("verify", &without_our_colours(&text));
            assert_eq!(text.lines().count(), 1 + 5 + 1, "{text}");
        }
        let text = verify::render(&report, Style::OFF);
        println!("{text}");
        assert!(
            text.contains(&format!(
                "problem: pod:1/{SHOWN}: task 7 ({SHOWN}) in kubepods.slice/{SHOWN}.scope may run on CPUs 0-15"
            )),
            "{text}"
        );
        // The JSON report stays exact.
        let json = serde_json::to_string(&report).unwrap();
        let back: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(back["problems"][2]["comm"], EVIL);
    }
}

// ---------------------------------------------------------------------------
// verify: the live kernel against the intent, on fake trees
// ---------------------------------------------------------------------------

pub mod tree {
    //! A fake kernel for `verify`: a cgroup tree (v1: `cpuset/` with
    //! `cpuset.effective_cpus` and `tasks`; v2: `cpuset.cpus.effective` and
    //! `cgroup.procs`), `/proc/PID/status` files and sysfs's isolated list.

    use std::fs;
    use std::path::PathBuf;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum V {
        V1,
        V2,
    }

    pub struct Tree {
        pub dir: tempfile::TempDir,
        pub v: V,
    }

    impl Tree {
        pub fn new(v: V) -> Tree {
            let dir = tempfile::tempdir().unwrap();
            let t = Tree { dir, v };
            fs::create_dir_all(t.cgroup_root()).unwrap();
            fs::create_dir_all(t.proc_root()).unwrap();
            fs::create_dir_all(t.sysfs_root().join("devices/system/cpu")).unwrap();
            match v {
                V::V1 => {
                    fs::create_dir_all(t.base()).unwrap();
                    fs::write(t.base().join("cpuset.cpus"), "0-15\n").unwrap();
                }
                V::V2 => {
                    fs::write(t.cgroup_root().join("cgroup.controllers"), "cpuset cpu\n").unwrap();
                }
            }
            t
        }

        pub fn cgroup_root(&self) -> PathBuf {
            self.dir.path().join("cgroup")
        }

        pub fn proc_root(&self) -> PathBuf {
            self.dir.path().join("proc")
        }

        pub fn sysfs_root(&self) -> PathBuf {
            self.dir.path().join("sys")
        }

        fn base(&self) -> PathBuf {
            match self.v {
                V::V1 => self.cgroup_root().join("cpuset"),
                V::V2 => self.cgroup_root(),
            }
        }

        /// Makes cgroup `rel` (and its parents, each with `effective`
        /// unless they exist) with this effective set and these tasks.
        pub fn cgroup(&self, rel: &str, effective: &str, tasks: &[u32]) {
            let dir = self.base().join(rel);
            fs::create_dir_all(&dir).unwrap();
            let (eff, procs) = match self.v {
                V::V1 => ("cpuset.effective_cpus", "tasks"),
                V::V2 => ("cpuset.cpus.effective", "cgroup.procs"),
            };
            let mut p = Some(dir.as_path());
            while let Some(d) = p {
                if d == self.base() {
                    break;
                }
                if !d.join(eff).exists() || d == dir {
                    fs::write(d.join(eff), format!("{effective}\n")).unwrap();
                    fs::write(d.join("cpuset.cpus"), format!("{effective}\n")).unwrap();
                    if !d.join(procs).exists() {
                        fs::write(d.join(procs), "").unwrap();
                    }
                }
                p = d.parent();
            }
            let list: String = tasks.iter().map(|t| format!("{t}\n")).collect();
            fs::write(dir.join(procs), list).unwrap();
        }

        /// A v2 cgroup whose parent does not enable `+cpuset`: no cpuset
        /// files, only its processes.
        pub fn bare(&self, rel: &str, tasks: &[u32]) {
            let dir = self.base().join(rel);
            fs::create_dir_all(&dir).unwrap();
            let list: String = tasks.iter().map(|t| format!("{t}\n")).collect();
            fs::write(dir.join("cgroup.procs"), list).unwrap();
        }

        pub fn set_effective(&self, rel: &str, effective: &str) {
            let name = match self.v {
                V::V1 => "cpuset.effective_cpus",
                V::V2 => "cpuset.cpus.effective",
            };
            fs::write(self.base().join(rel).join(name), format!("{effective}\n")).unwrap();
        }

        /// A task with this command and affinity.
        pub fn task(&self, pid: u32, comm: &str, allowed: &str) {
            let dir = self.proc_root().join(pid.to_string());
            fs::create_dir_all(&dir).unwrap();
            fs::write(
                dir.join("status"),
                format!("Name:\t{comm}\nState:\tS (sleeping)\nTgid:\t{pid}\nCpus_allowed:\tffff\nCpus_allowed_list:\t{allowed}\n"),
            )
            .unwrap();
        }

        /// A thread `tid` of process `pid` (v2 finds it in /proc/PID/task).
        pub fn thread(&self, pid: u32, tid: u32, comm: &str, allowed: &str) {
            for t in [pid, tid] {
                let dir = self
                    .proc_root()
                    .join(pid.to_string())
                    .join("task")
                    .join(t.to_string());
                fs::create_dir_all(&dir).unwrap();
                let allowed = if t == pid { "1-2,9-10" } else { allowed };
                fs::write(
                    dir.join("status"),
                    format!("Name:\t{comm}\nCpus_allowed_list:\t{allowed}\n"),
                )
                .unwrap();
            }
        }

        pub fn isolated(&self, list: &str) {
            fs::write(
                self.sysfs_root().join("devices/system/cpu/isolated"),
                format!("{list}\n"),
            )
            .unwrap();
        }

        pub fn remove(&self, rel: &str) {
            fs::remove_dir_all(self.base().join(rel)).unwrap();
        }
    }
}

mod verify {
    use super::tree::{Tree, V};
    use super::*;
    use pinctl::cgroup::Scope;
    use pinctl::cli::verify::{Problem, Report, Roots, render, verify};

    /// Pod slices with real UIDs, so they are recognised as structure.
    pub const POD1: &str = "kubepods.slice/kubepods-pod00000001_1111_4222_8333_0123456789ab.slice";
    pub const POD2: &str = "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod00000002_1111_4222_8333_0123456789ab.slice";
    pub const APP: &str = "kubepods.slice/kubepods-pod00000001_1111_4222_8333_0123456789ab.slice/cri-containerd-aaaa.scope";
    pub const DB: &str = "kubepods.slice/kubepods-pod00000001_1111_4222_8333_0123456789ab.slice/cri-containerd-bbbb.scope";
    pub const JOB: &str = "hpc.slice/job-2.scope";

    fn workload(key: &str, cgroup: &str, cpus: &str) -> api::Workload {
        api::Workload {
            key: key.into(),
            requested: set(cpus).len(),
            source: Source::Kubelet,
            numa: vec![],
            cgroups: vec![cgroup.into()],
            cpus: Some(set(cpus)),
            pending: None,
            alignment: None,
            resize: None,
            near: None,
        }
    }

    /// The intent: app on 1-2,9-10, db on 3,11, the job on 4,12, on 16 CPUs
    /// with 0,8 reserved.
    pub fn intent(v: V) -> api::Status {
        let mut doc = status_doc::status(SHAPE_16, "0,8", &[]);
        doc.hierarchy = match v {
            V::V1 => "v1",
            V::V2 => "v2",
        }
        .into();
        doc.workloads = vec![
            workload("pod:1/app", APP, "1-2,9-10"),
            workload("pod:1/db", DB, "3,11"),
            workload("cgroup:hpc.slice/job-2.scope", JOB, "4,12"),
        ];
        doc.shared_pool = set("0,5-8,13-15");
        doc
    }

    /// A live tree that matches [`intent`]: the kubepods structure on every
    /// CPU, the workloads on theirs with their tasks, the rest on the shared
    /// pool.
    pub fn clean(v: V) -> Tree {
        let t = Tree::new(v);
        t.cgroup("kubepods.slice", "0-15", &[]);
        t.cgroup("kubepods.slice/kubepods-burstable.slice", "0-15", &[]);
        t.cgroup(POD1, "0-15", &[]);
        t.cgroup(POD2, "0-15", &[]);
        t.cgroup(APP, "1-2,9-10", &[100, 101]);
        t.cgroup(&format!("{APP}/init.scope"), "1-2,9-10", &[102]);
        t.cgroup(DB, "3,11", &[200]);
        t.cgroup(
            &format!("{POD1}/cri-containerd-cccc.scope"),
            "0,5-8,13-15",
            &[300],
        );
        t.cgroup(
            &format!("{POD2}/cri-containerd-dddd.scope"),
            "0,5-8,13-15",
            &[],
        );
        t.cgroup("hpc.slice", "0-15", &[]);
        t.cgroup(JOB, "4,12", &[400]);
        t.cgroup("system.slice", "0,5-8,13-15", &[1]);
        t.cgroup("system.slice/sshd.service", "0,5-8,13-15", &[2]);
        t.task(100, "app", "1-2,9-10");
        t.task(101, "app-helper", "2");
        t.task(102, "init", "1-2,9-10");
        t.task(200, "db", "3,11");
        t.task(400, "job", "4,12");
        t.isolated("");
        t
    }

    pub fn roots(t: &Tree) -> Roots {
        Roots {
            cgroup_root: t.cgroup_root(),
            proc_root: t.proc_root(),
            sysfs_root: t.sysfs_root(),
        }
    }

    pub fn scope() -> Scope {
        Scope::new(
            vec!["kubepods.slice".into(), "kubepods".into()],
            vec!["system.slice".into(), "user.slice".into()],
            Vec::new(),
        )
    }

    fn check(t: &Tree, doc: &api::Status) -> Report {
        verify(doc, &roots(t), &scope()).unwrap()
    }

    #[test]
    fn a_clean_tree_passes_in_v1_and_v2() {
        for v in [V::V1, V::V2] {
            let t = clean(v);
            let r = check(&t, &intent(v));
            assert!(r.ok(), "{v:?}: {}", render(&r, Style::OFF));
            assert!(r.warnings.is_empty(), "{v:?}: {:?}", r.warnings);
            assert_eq!(r.checked.workloads, 3);
            assert_eq!(
                r.checked.workload_cgroups, 4,
                "init.scope inside app counts"
            );
            assert_eq!(r.checked.tasks, 5);
            // The pause-like sibling, the burstable container, system.slice
            // and sshd (structure is skipped, hpc.slice is not in the scope).
            assert_eq!(r.checked.other_cgroups, 4, "{v:?}");
            let text = render(&r, Style::OFF);
            assert!(
                text.ends_with("OK: the kernel matches the intent\n"),
                "{text}"
            );
        }
    }

    #[test]
    fn each_planted_problem_is_reported() {
        for v in [V::V1, V::V2] {
            let t = clean(v);
            // v2's silent fallback: the app's cgroup got its parent's set.
            t.set_effective(APP, "0-15");
            // A task of the job may run anywhere.
            t.task(400, "job", "0-15");
            // A service on an exclusive CPU.
            t.set_effective("system.slice/sshd.service", "0-15");
            // Two workloads that overlap.
            let mut doc = intent(v);
            doc.workloads[1].cpus = Some(set("2-3,11"));
            t.set_effective(DB, "2-3,11");
            let r = check(&t, &doc);
            let text = render(&r, Style::OFF);
            println!("{text}");
            let has = |f: &dyn Fn(&Problem) -> bool| r.problems.iter().any(f);
            assert!(
                has(
                    &|p| matches!(p, Problem::Effective { cgroup, actual, .. } if cgroup == APP && *actual == set("0-15"))
                ),
                "{v:?}: {text}"
            );
            assert!(
                has(
                    &|p| matches!(p, Problem::TaskOutside { pid: 400, allowed, .. } if *allowed == set("0-15"))
                ),
                "{v:?}: {text}"
            );
            assert!(
                has(
                    &|p| matches!(p, Problem::SharedOnExclusive { cgroup, exclusive, .. } if cgroup == "system.slice/sshd.service" && *exclusive == set("1-4,9-12"))
                ),
                "{v:?}: {text}"
            );
            assert!(
                has(
                    &|p| matches!(p, Problem::Overlap { a, b, cpus } if a == "pod:1/app" && b == "pod:1/db" && *cpus == set("2"))
                ),
                "{v:?}: {text}"
            );
            // The app's init.scope still has the right set; its parent's
            // fallback is one problem, not two.
            assert_eq!(r.problems.len(), 4, "{v:?}: {text}");
            for line in [
                format!("problem: pod:1/app: {APP} gets CPUs 0-15 ("),
                "problem: cgroup:hpc.slice/job-2.scope: task 400 (job) in hpc.slice/job-2.scope may run on CPUs 0-15 (Cpus_allowed_list), outside 4,12".to_string(),
                "problem: system.slice/sshd.service is not a workload but gets CPUs 0-15, including exclusive CPUs 1-4,9-12 of pod:1/app, pod:1/db, cgroup:hpc.slice/job-2.scope".to_string(),
                "problem: workloads pod:1/app and pod:1/db both hold CPUs 2".to_string(),
            ] {
                assert!(text.contains(&line), "{v:?}: missing {line:?} in:\n{text}");
            }
        }
    }

    /// On a real v2 machine `system.slice` rarely enables `+cpuset` for its
    /// services: they have no cpuset files and run on `system.slice`'s set.
    #[test]
    fn v2_cgroups_without_cpuset_files_inherit_their_parents_set() {
        let t = clean(V::V2);
        t.bare("system.slice/cron.service", &[3]);
        t.bare(&format!("{APP}/worker"), &[103]);
        t.task(103, "worker", "0-15");
        let r = check(&t, &intent(V::V2));
        let text = render(&r, Style::OFF);
        assert_eq!(r.problems.len(), 1, "{text}");
        assert!(
            matches!(&r.problems[0], Problem::TaskOutside { pid: 103, .. }),
            "an inheriting sub-cgroup's tasks are still checked: {text}"
        );
        // The workload's own cgroup without cpuset files was never pinned.
        let t = clean(V::V2);
        std::fs::remove_file(t.cgroup_root().join(DB).join("cpuset.cpus.effective")).unwrap();
        let r = check(&t, &intent(V::V2));
        let text = render(&r, Style::OFF);
        assert!(
            text.contains("problem: pod:1/db: cannot read ")
                && text.contains("the cpuset controller is not enabled for it"),
            "{text}"
        );
    }

    #[test]
    fn a_workload_on_a_reserved_cpu_is_a_problem() {
        let t = clean(V::V1);
        let mut doc = intent(V::V1);
        doc.workloads[2].cpus = Some(set("4,8,12"));
        t.set_effective(JOB, "4,8,12");
        let r = check(&t, &doc);
        assert!(
            r.problems.iter().any(|p| matches!(p, Problem::Reserved { workload, cpus } if workload.contains("job") && *cpus == set("8"))),
            "{}",
            render(&r, Style::OFF)
        );
    }

    #[test]
    fn a_v2_thread_outside_its_cpus_is_found_in_proc_task() {
        let t = clean(V::V2);
        t.thread(100, 105, "worker", "0-15");
        let r = check(&t, &intent(V::V2));
        assert!(
            r.problems.iter().any(
                |p| matches!(p, Problem::TaskOutside { pid: 105, comm, .. } if comm == "worker")
            ),
            "{}",
            render(&r, Style::OFF)
        );
    }

    #[test]
    fn isolated_cpus_in_the_shared_pool_and_gone_cgroups_are_warnings() {
        let t = clean(V::V2);
        t.isolated("1-2,5-6");
        t.remove(DB);
        let r = check(&t, &intent(V::V2));
        let text = render(&r, Style::OFF);
        assert!(r.ok(), "{text}");
        assert!(
            text.contains("warning: isolated CPUs 5-6 (isolcpus) are in the shared pool"),
            "{text}"
        );
        assert!(
            text.contains(&format!("warning: pod:1/db: cgroup {DB} is gone")),
            "{text}"
        );
    }

    #[test]
    fn a_tree_of_the_other_hierarchy_is_refused() {
        let t = clean(V::V1);
        let err = verify(&intent(V::V2), &roots(&t), &scope()).unwrap_err();
        assert!(
            format!("{err:#}").contains("pinctld drives cgroup v2 but"),
            "{err:#}"
        );
    }
}

/// Irregular machines from the sysfs fixtures: offline threads, hybrid
/// cores, no L3 or NUMA, non-contiguous numbering, many NUMA nodes.
#[test]
fn status_maps_irregular_machines() {
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs");
    for name in [
        "offline-cpus",
        "hybrid",
        "no-l3-no-numa",
        "epyc-2s-8n",
        "amd-non-contiguous",
        "single-socket-nosmt",
        "intel-2s-smt",
    ] {
        let dir = fixtures.join(name);
        let topo = pinctl::sysfs::Sysfs::new(&dir).topology().unwrap();
        let first = topo.lowest_cores(1);
        let doc = status_doc::status_on(&topo, &first.to_string(), &[pod(1, "app", 2), job(2, 1)]);
        let text = status::render(&doc, Mode::Online, Style::OFF, NOW);
        println!("--- {name} ---\n{text}");
        check_map(&doc, &text);
        check_layout(&text, 100);
        if name == "offline-cpus" {
            // CPUs 3 and 7 are a whole core: not on the map, named above it.
            assert!(text.contains("offline CPUs 3,7"), "{text}");
        }
    }
}

/// The `Power:` line (issue #35): each class and its CPUs, what is kept,
/// what fails and what to do; a node without power files gets a `Config:`
/// line instead of an error.
#[test]
fn status_power_line_says_classes_failures_and_advice() {
    let mut doc = status_doc::status(SHAPE_16, "0,8", &[pod(1, "app", 2)]);
    let pinned = doc.workloads[0].cpus.clone().unwrap();
    doc.power = Some(api::Power {
        on: true,
        classes: vec![api::PowerClass {
            name: "latency".into(),
            cpus: pinned.clone(),
        }],
        files: Vec::new(),
        originals: 4,
        refused: vec![
            "class latency: governor performance on CPU 2: governor missing (available: powersave)"
                .into(),
        ],
        failed: vec![
            "devices/system/cpu/cpu3/cpufreq/scaling_governor: Read-only file system".into(),
        ],
        unsupported: false,
        error: None,
        advice: vec!["add ReadWritePaths=/sys/devices/system/cpu".into()],
    });
    let text = status::render(&doc, Mode::Online, Style::OFF, NOW);
    check_layout(&text, 400);
    let line = text.lines().find(|l| l.starts_with("Power:")).unwrap();
    assert_eq!(
        line,
        format!(
            "Power:       latency on CPUs {pinned}; 0 files set, 4 originals kept; 1 refused; 1 failing"
        )
    );
    // The class in the legend of the CPU map.
    let head = text
        .lines()
        .find(|l| l.trim_start().starts_with("TAG"))
        .unwrap();
    assert!(head.contains(" CLASS    WORKLOAD"), "{head}");
    let row = text
        .lines()
        .find(|l| l.contains(&format!("  {pinned}  ")))
        .unwrap();
    assert!(row.contains("  latency  "), "{row}");
    assert!(
        text.contains(
            "             devices/system/cpu/cpu3/cpufreq/scaling_governor: Read-only file system"
        ),
        "{text}"
    );
    assert!(
        text.contains("             add ReadWritePaths=/sys/devices/system/cpu"),
        "{text}"
    );
    assert!(!text.contains("Config:"), "{text}");

    doc.power = Some(api::Power {
        on: true,
        unsupported: true,
        ..api::Power::default()
    });
    let text = status::render(&doc, Mode::Online, Style::OFF, NOW);
    assert!(text.contains("Config:      [power] is on, but no CPU here has cpufreq, cpuidle, pm_qos or uncore files: no class can be set"), "{text}");
    assert!(
        text.contains("Power:       no power files on this node: classes cannot be set"),
        "{text}"
    );
}

/// The `Quiet CPUs:` line (issue #42): the CPUs kept clear, what was moved
/// by kind, what stays on the first few exclusive CPUs (long lists cut with
/// a count), and the boot line that would remove it.
#[test]
fn status_quiet_cpus_line_counts_what_moved_and_says_what_stays() {
    let mut doc = status_doc::status(SHAPE_16, "0,8", &[pod(1, "app", 4), job(2, 2)]);
    let plain = status::render(&doc, Mode::Online, Style::OFF, NOW);
    assert!(!plain.contains("Quiet CPUs"), "{plain}");
    doc.housekeeping = Some(status_doc::housekeeping(&doc));
    let text = status::render(&doc, Mode::Online, Style::OFF, NOW);
    println!("{text}");
    check_layout(&text, 400);
    let want = "\
Quiet CPUs:  1-3,9-11 (housekeeping): moved 2 workqueue masks, 3 kernel threads, 2 RPS/XPS masks; 7 originals kept
             stays on CPU 1: cpuhp/1, migration/1, ksoftirqd/1 and 2 more; interrupt 41 nvme0q1
             stays on CPU 2: cpuhp/2, migration/2, ksoftirqd/2 and 2 more; interrupts 42 nvme0q2, 62 virtio0-input.2 and 1 more
             stays on CPU 3: cpuhp/3, migration/3, ksoftirqd/3 and 2 more
             stays on CPU 9: cpuhp/9, migration/9, ksoftirqd/9 and 2 more
             and 2 more CPUs (pinctl describe shows a workload's)
             the boot line would remove what stays; needs a reboot:
             isolcpus=managed_irq,domain,1-3,9-11 nohz_full=1-3,9-11 rcu_nocbs=1-3,9-11 irqaffinity=0,4-8,12-15
";
    assert!(text.contains(want), "missing {want:?} in:\n{text}");
    // Under the power line's place, above the activity counters.
    let quiet = text.find("Quiet CPUs:").unwrap();
    assert!(quiet < text.find("Activity:").unwrap(), "{text}");
    // Colour on: the same text with escape codes.
    let coloured = status::render(&doc, Mode::Online, Style::ON, NOW);
    assert_eq!(strip_ansi(&coloured), text);
}

/// Failures and errors under the line in red, the count on it; off, what
/// is left is being put back; on without exclusive CPUs, none now.
#[test]
fn status_quiet_cpus_line_says_failures_and_put_backs() {
    let mut doc = status_doc::status(SHAPE_16, "0,8", &[pod(1, "app", 2)]);
    let mut hk = status_doc::housekeeping(&doc);
    hk.stays.clear();
    hk.failed = vec![
        "kthread 15 (rcu_preempt): write /proc/15/task/15: Invalid argument".into(),
        "xps eth0 tx-0: Permission denied".into(),
    ];
    hk.error = Some("cannot save /run/pinctl/housekeeping.json: Read-only file system".into());
    doc.housekeeping = Some(hk.clone());
    let text = status::render(&doc, Mode::Online, Style::OFF, NOW);
    check_layout(&text, 400);
    let want = "\
Quiet CPUs:  1,9 (housekeeping): moved 2 workqueue masks, 3 kernel threads, 2 RPS/XPS masks; 7 originals kept; 2 failing
             cannot save /run/pinctl/housekeeping.json: Read-only file system
             kthread 15 (rcu_preempt): write /proc/15/task/15: Invalid argument
             the boot line would remove what stays; needs a reboot:
";
    assert!(text.contains(want), "missing {want:?} in:\n{text}");
    assert!(
        !text.contains("Permission denied"),
        "the first failure only"
    );
    let coloured = status::render(&doc, Mode::Online, Style::ON, NOW);
    assert!(coloured.contains("\x1b[31m2 failing\x1b[0m"), "{coloured}");

    // Off: what was moved is being put back; once it is, the originals.
    hk.on = false;
    hk.failed.clear();
    hk.error = None;
    hk.moved.truncate(2);
    doc.housekeeping = Some(hk.clone());
    let text = status::render(&doc, Mode::Online, Style::OFF, NOW);
    assert!(
        text.contains("Quiet CPUs:  housekeeping off: 2 workqueue masks being put back\n"),
        "{text}"
    );
    hk.moved.clear();
    hk.originals = 1;
    hk.boot = None;
    doc.housekeeping = Some(hk.clone());
    let text = status::render(&doc, Mode::Online, Style::OFF, NOW);
    assert!(
        text.contains("Quiet CPUs:  housekeeping off: 1 original being put back\n"),
        "{text}"
    );
    assert!(!text.contains("boot line"), "{text}");

    // On, nothing exclusive: once all is back, and while it goes back.
    let mut none = api::Housekeeping {
        on: true,
        ..api::Housekeeping::default()
    };
    doc.housekeeping = Some(none.clone());
    let text = status::render(&doc, Mode::Online, Style::OFF, NOW);
    let line = text.lines().find(|l| l.starts_with("Quiet CPUs:")).unwrap();
    assert_eq!(line, "Quiet CPUs:  none now (housekeeping on)");
    none.moved = status_doc::housekeeping(&doc).moved.split_off(5);
    doc.housekeeping = Some(none);
    let text = status::render(&doc, Mode::Online, Style::OFF, NOW);
    let line = text.lines().find(|l| l.starts_with("Quiet CPUs:")).unwrap();
    assert_eq!(
        line,
        "Quiet CPUs:  none now (housekeeping on); 2 RPS/XPS masks being put back"
    );
}
