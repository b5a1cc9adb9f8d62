//! The operator's view without a daemon: `pinctl status` rendered from
//! synthetic documents at 16 and 256 CPUs, `describe`'s matching, `verify` on
//! fake cgroup trees (v1 and v2) with planted problems, and the formatting of
//! events.

#[path = "support/status_doc.rs"]
mod status_doc;

use std::collections::BTreeMap;

use pinctl::api::{self, Source};
use pinctl::cli::status::{self, Mode};
use pinctl::cli::style::Style;
use pinctl::cpuset::CpuSet;
use pinctl::topology::Topology;
use status_doc::{SHAPE_16, SHAPE_256, job, pod, set};

/// A fixed "now": 1 h 2 min after the synthetic daemon started.
const NOW: u64 = 1_763_700_000 + 3_720;

/// The rows of the CPU map: (label, CPU list, marks in cell order).
fn map_rows(text: &str) -> Vec<(String, CpuSet, Vec<String>)> {
    let mut rows = Vec::new();
    let mut in_map = false;
    for line in text.lines() {
        if line.starts_with("CPU map:") {
            in_map = true;
            continue;
        }
        if !in_map {
            continue;
        }
        if line.is_empty() {
            break;
        }
        let Some(rest) = line.strip_prefix("  node ") else {
            continue;
        };
        // "node N  L3 L  CPULIST  CELLS..."
        let words: Vec<&str> = rest.split_whitespace().collect();
        let (label, cpus_at) = if words.get(1) == Some(&"L3") {
            (format!("node {} L3 {}", words[0], words[2]), 3)
        } else {
            (format!("node {}", words[0]), 1)
        };
        let cpus: CpuSet = words[cpus_at].parse().unwrap();
        let cells = words[cpus_at + 1..].iter().map(|c| c.to_string()).collect();
        rows.push((label, cpus, cells));
    }
    rows
}

/// What each CPU shows in the map: splits every cell into one mark per
/// thread (`width` characters each) and pairs them with the row's CPUs in
/// the order the cells list them (cores in order, threads in CPU order).
fn marks_by_cpu(topo: &Topology, text: &str, width: usize) -> BTreeMap<u32, String> {
    let mut out = BTreeMap::new();
    for (label, cpus, cells) in map_rows(text) {
        // The row's cores, in core order, each with its threads ascending.
        let mut cores: Vec<&pinctl::topology::Core> = topo
            .cores()
            .iter()
            .filter(|c| c.cpus.iter().all(|&cpu| cpus.contains(cpu)))
            .collect();
        cores.sort_by_key(|c| c.id);
        assert_eq!(cores.len(), cells.len(), "row {label}: one cell per core");
        for (core, cell) in cores.iter().zip(&cells) {
            assert_eq!(
                cell.len(),
                core.cpus.len() * width,
                "row {label}: a cell shows each thread"
            );
            for (i, &cpu) in core.cpus.iter().enumerate() {
                let mark = cell[i * width..(i + 1) * width].to_string();
                assert!(out.insert(cpu, mark).is_none(), "CPU {cpu} shown twice");
            }
        }
    }
    out
}

/// Checks the map against the document: every online CPU once, with the tag
/// of its workload (as the legend gives it), `r` or `.`.
fn check_map(status: &api::Status, text: &str) {
    let topo = Topology::from_file(status.topology.clone()).unwrap();
    let tagged = status::tagged(status);
    let width = tagged.first().map_or(1, |(t, _)| t.len());
    let marks = marks_by_cpu(&topo, text, width);
    assert_eq!(
        marks.keys().copied().collect::<CpuSet>(),
        status.online,
        "every online CPU is on the map once"
    );
    // The legend: "  TAG  CPUS ..." rows name each workload with its tag.
    for (tag, w) in &tagged {
        let cpus = w.cpus.as_ref().unwrap();
        let row = text
            .lines()
            .find(|l| l.ends_with(&w.key) && l.trim_start().starts_with(&format!("{tag} ")))
            .unwrap_or_else(|| panic!("no legend row for {tag} {}:\n{text}", w.key));
        assert!(row.contains(&cpus.to_string()), "{row}");
        for cpu in cpus.iter() {
            assert_eq!(marks[&cpu], *tag, "CPU {cpu} belongs to {}", w.key);
        }
    }
    for cpu in status.reserved.iter() {
        assert_eq!(marks[&cpu], "r".repeat(width), "CPU {cpu} is reserved");
    }
    for cpu in status.shared_pool.difference(&status.reserved).iter() {
        assert_eq!(marks[&cpu], ".".repeat(width), "CPU {cpu} is shared");
    }
}

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
        secs: 130,
    });
    let text = status::render(&doc, Mode::Online, Style::OFF, NOW);
    for want in [
        "Health:      degraded: 1 hung path, 1 failing cgroup",
        "Failing cgroups:\n  kubepods.slice/x: write cpuset.cpus: Device or resource busy (errno 16)",
        "hung path /sys/fs/cgroup/kubepods.slice/y (read hung 1m 15s ago)",
        "task 78 (pid 77, fio) of kubepods.slice/z in D state for 2m 10s, in io_schedule",
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
