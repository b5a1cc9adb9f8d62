//! Reads the CPU map of `pinctl status` back and checks it against the
//! document it was drawn from.

use std::collections::BTreeMap;

use pinctl::api;
use pinctl::cli::status;
use pinctl::cpuset::CpuSet;
use pinctl::topology::Topology;

/// The rows of the CPU map: (label, CPU list, marks in cell order).
pub fn map_rows(text: &str) -> Vec<(String, CpuSet, Vec<String>)> {
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
pub fn marks_by_cpu(topo: &Topology, text: &str, width: usize) -> BTreeMap<u32, String> {
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
pub fn check_map(status: &api::Status, text: &str) {
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
