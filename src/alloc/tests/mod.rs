//! The allocator's tests: one per quality rule and option, the kubelet's
//! table cases, and property tests against models of the kubelet.

use super::distribute::distribution_shares;
use super::*;
use crate::topology::synthetic::Shape;

fn set(s: &str) -> CpuSet {
    s.parse().unwrap()
}

/// 2 sockets × 1 NUMA node × 1 L3 × 4 cores × 2 threads: CPUs 0-7 are first
/// threads, core c is {c, c+8}; socket 0 holds cores 0-3.
fn two_socket() -> Topology {
    Shape {
        sockets: 2,
        numa_per_socket: 1,
        l3_per_numa: 1,
        cores_per_l3: 4,
        threads_per_core: 2,
    }
    .build()
}

fn alloc(t: &Topology, free: &CpuSet, n: usize) -> CpuSet {
    allocate(t, free, n, &Options::default()).unwrap()
}

#[test]
fn a_request_that_fits_one_numa_node_lands_in_one() {
    let t = two_socket();
    let got = alloc(&t, t.online(), 6);
    assert_eq!(got.len(), 6);
    assert_eq!(t.numa_of(&got).len(), 1, "{got}");
    assert_eq!(Alignment::of(&t, &got).shared_cores, 0);
}

/// `prefer` (a pod's released CPUs) is drawn from first: all of it when
/// it holds the request, else all of it and the rest by the usual rules;
/// with `full_pcpus_only`, only its whole cores; never a reserved CPU.
#[test]
fn preferred_cpus_come_first() {
    let t = two_socket();
    let with = |prefer: &str, full: bool| Options {
        prefer: set(prefer),
        full_pcpus_only: full,
        reserved: set("0,8"),
        ..Options::default()
    };
    let free = t.online();
    // Socket 1's core 4 and core 5: packed alone, the request would land
    // on socket 0.
    assert_eq!(
        allocate(&t, free, 4, &with("4-5,12-13", false)).unwrap(),
        set("4-5,12-13")
    );
    assert_eq!(
        allocate(&t, free, 2, &with("4-5,12-13", false))
            .unwrap()
            .len(),
        2
    );
    assert!(
        allocate(&t, free, 2, &with("4-5,12-13", false))
            .unwrap()
            .is_subset(&set("4-5,12-13"))
    );
    // Too few preferred: all of them, and the rest.
    let got = allocate(&t, free, 4, &with("6,14", false)).unwrap();
    assert!(set("6,14").is_subset(&got) && got.len() == 4, "{got}");
    // Whole cores only: the lone thread 7 is not taken.
    let got = allocate(&t, free, 2, &with("6-7,14", true)).unwrap();
    assert_eq!(got, set("6,14"));
    // Reserved CPUs stay reserved.
    let got = allocate(&t, free, 2, &with("0,8", false)).unwrap();
    assert!(got.is_disjoint(&set("0,8")), "{got}");
}

#[test]
fn whole_cores_when_possible() {
    let t = two_socket();
    let got = alloc(&t, t.online(), 4);
    assert_eq!(got, set("0-1,8-9"));
}

#[test]
fn a_lone_thread_of_a_half_used_core_before_breaking_a_fresh_core() {
    let t = two_socket();
    // CPU 8 (sibling of 0) is taken by someone else: core 0 is half used.
    let free = t.online().difference(&set("8"));
    let got = alloc(&t, &free, 3);
    // One whole core plus the lone thread 0, not a broken fresh core.
    assert!(got.contains(0), "{got}");
    assert_eq!(Alignment::of(&t, &got).whole_cores, 1, "{got}");
}

#[test]
fn best_fit_beats_first_fit() {
    let t = two_socket();
    // Socket 0 has 4 CPUs left (cores 2 and 3), socket 1 is empty of work.
    let free = set("2-3,10-11,4-7,12-15");
    let got = alloc(&t, &free, 4);
    assert_eq!(got, set("2-3,10-11"), "the fuller socket is used");
    // The whole socket 1 stays free for a later 8-CPU request.
    let rest = free.difference(&got);
    assert_eq!(t.numa_of(&alloc(&t, &rest, 8)).len(), 1);
}

#[test]
fn does_not_span_numa_nodes_where_the_kubelet_does() {
    // The kubelet fills the most-used NUMA node first: with node 0 holding 6
    // free CPUs and node 1 all 8, a 7-CPU request spans both under the
    // kubelet. Node 1 alone holds it.
    let t = two_socket();
    let free = t.online().difference(&set("0,8"));
    let got = alloc(&t, &free, 7);
    assert_eq!(t.numa_of(&got), vec![1], "{got}");
}

#[test]
fn a_request_of_a_whole_node_or_more_gets_whole_nodes() {
    let t = Shape {
        sockets: 2,
        numa_per_socket: 2,
        l3_per_numa: 1,
        cores_per_l3: 4,
        threads_per_core: 2,
    }
    .build();
    // Node 0 is partly used; a node's worth (8) must come as one whole node.
    let free = t.online().difference(&set("0"));
    let got = alloc(&t, &free, 8);
    let nodes = t.numa_of(&got);
    assert_eq!(nodes.len(), 1);
    assert_eq!(&got, &t.numa_nodes()[&nodes[0]]);
    // A socket's worth (16) comes as one whole socket.
    let got = alloc(&t, &free, 16);
    assert_eq!(t.sockets_of(&got), vec![1]);
    // 1.5 nodes: two nodes of one socket, one of them whole.
    let got = alloc(&t, t.online(), 12);
    assert_eq!(t.sockets_of(&got).len(), 1);
    assert_eq!(t.numa_of(&got).len(), 2);
}

#[test]
fn fewest_l3_groups_within_a_node() {
    let t = Shape {
        sockets: 1,
        numa_per_socket: 1,
        l3_per_numa: 2,
        cores_per_l3: 4,
        threads_per_core: 2,
    }
    .build();
    // L3 0 (cores 0-3) has 2 cores used; a 4-CPU request fits L3 0 exactly.
    let free = t.online().difference(&set("0-1,8-9"));
    let got = alloc(&t, &free, 4);
    assert_eq!(t.l3_of(&got), vec![0], "best fit in the fuller L3: {got}");
    let got = alloc(&t, &free, 6);
    assert_eq!(t.l3_of(&got), vec![1], "only L3 1 holds 6: {got}");
}

#[test]
fn smt4_remainder_breaks_one_fresh_core_rather_than_sharing_two() {
    // Found by comparing with the kubelet: 4 threads per core, core c is
    // {c, c+4, c+8, c+12}. Core 1 is free; cores 2 and 3 have 2 free threads
    // each. Three CPUs on one core (shared with nobody yet) beat three CPUs
    // spread over two cores already shared with other workloads.
    let t = Shape {
        sockets: 1,
        numa_per_socket: 2,
        l3_per_numa: 1,
        cores_per_l3: 2,
        threads_per_core: 4,
    }
    .build();
    let got = alloc(&t, &set("1,3,5,9-11,13-14"), 3);
    assert_eq!(got, set("1,5,9"));
    assert_eq!(Alignment::of(&t, &got).shared_cores, 1);
}

#[test]
fn reserved_cpus_are_never_handed_out() {
    let t = two_socket();
    let opts = Options {
        reserved: t.lowest_cores(2),
        ..Options::default()
    };
    assert_eq!(opts.reserved, set("0,8"));
    let got = allocate(&t, t.online(), 14, &opts).unwrap();
    assert!(got.is_disjoint(&opts.reserved));
    let e = allocate(&t, t.online(), 15, &opts).unwrap_err();
    assert_eq!(e.to_string(), "not enough CPUs: requested 15, available 14");
}

#[test]
fn full_physical_cores_only() {
    let t = two_socket();
    let opts = Options {
        full_pcpus_only: true,
        ..Options::default()
    };
    let e = allocate(&t, t.online(), 3, &opts).unwrap_err();
    assert_eq!(
        e,
        AllocError::SmtAlignment {
            requested: 3,
            threads_per_core: 2
        }
    );
    assert!(
        e.to_string()
            .contains("not a multiple of 2 threads per core")
    );
    // Half-used cores do not count: 7 free CPUs, but only 6 on whole cores.
    let free = set("1-3,9-11,12");
    let got = allocate(&t, &free, 6, &opts).unwrap();
    assert_eq!(got, set("1-3,9-11"));
    let e = allocate(&t, &free, 8, &opts).unwrap_err();
    assert_eq!(
        e,
        AllocError::NotEnoughWholeCores {
            requested: 8,
            available: 6
        }
    );
}

#[test]
fn spread_takes_one_thread_per_core_first() {
    let t = two_socket();
    let opts = Options {
        spread_cores: true,
        ..Options::default()
    };
    let got = allocate(&t, t.online(), 4, &opts).unwrap();
    assert_eq!(got, set("0-3"), "one thread on each of socket 0's cores");
    let got = allocate(&t, t.online(), 6, &opts).unwrap();
    assert_eq!(t.numa_of(&got).len(), 1);
    assert_eq!(Alignment::of(&t, &got).whole_cores, 2);
    let both = Options {
        spread_cores: true,
        full_pcpus_only: true,
        ..Options::default()
    };
    assert!(matches!(
        allocate(&t, t.online(), 4, &both),
        Err(AllocError::ConflictingOptions(_))
    ));
}

#[test]
fn distribute_splits_evenly_across_the_fewest_nodes() {
    let t = Shape {
        sockets: 2,
        numa_per_socket: 2,
        l3_per_numa: 1,
        cores_per_l3: 4,
        threads_per_core: 2,
    }
    .build();
    let opts = Options {
        distribute_across_numa: true,
        ..Options::default()
    };
    let got = allocate(&t, t.online(), 12, &opts).unwrap();
    let nodes = t.numa_of(&got);
    assert_eq!(nodes.len(), 2);
    for n in nodes {
        assert_eq!(got.intersection(&t.numa_nodes()[&n]).len(), 6);
    }
    assert_eq!(t.sockets_of(&got).len(), 1, "the two nodes share a socket");
    // In whole-core groups: 12 CPUs over 2 nodes is 3 cores each.
    let whole = Options {
        full_pcpus_only: true,
        ..opts.clone()
    };
    let got = allocate(&t, t.online(), 12, &whole).unwrap();
    assert_eq!(Alignment::of(&t, &got).shared_cores, 0);
    // A request that fits one node stays in one.
    let got = allocate(&t, t.online(), 6, &opts).unwrap();
    assert_eq!(t.numa_of(&got).len(), 1);
}

#[test]
fn numa_preference_is_drawn_from_first() {
    let t = Shape {
        sockets: 2,
        numa_per_socket: 2,
        l3_per_numa: 1,
        cores_per_l3: 4,
        threads_per_core: 2,
    }
    .build();
    let prefer = |nodes: Vec<u32>, align_by_socket| Options {
        numa_preference: nodes,
        align_by_socket,
        ..Options::default()
    };
    let got = allocate(&t, t.online(), 4, &prefer(vec![3], false)).unwrap();
    assert_eq!(t.numa_of(&got), vec![3]);
    // Node 3 cannot hold 10: all of it, and the rest elsewhere.
    let got = allocate(&t, t.online(), 10, &prefer(vec![3], false)).unwrap();
    assert!(t.numa_nodes()[&3].is_subset(&got));
    // Widened to the socket, the rest comes from node 2 on the same socket.
    let got = allocate(&t, t.online(), 10, &prefer(vec![3], true)).unwrap();
    assert_eq!(t.sockets_of(&got), vec![1]);
    assert_eq!(
        allocate(&t, t.online(), 1, &prefer(vec![9], false)).unwrap_err(),
        AllocError::UnknownNumaNode(9)
    );
}

#[test]
fn errors_name_requested_and_available() {
    let t = two_socket();
    assert_eq!(
        allocate(&t, t.online(), 0, &Options::default()),
        Err(AllocError::ZeroRequest)
    );
    assert_eq!(
        allocate(&t, &set("0-3"), 5, &Options::default()),
        Err(AllocError::NotEnough {
            requested: 5,
            available: 4
        })
    );
    // CPUs outside the topology are not available.
    assert_eq!(
        allocate(&t, &set("100-200"), 1, &Options::default()),
        Err(AllocError::NotEnough {
            requested: 1,
            available: 0
        })
    );
}

#[test]
fn hybrid_cores_of_different_sizes() {
    use crate::topology::CpuInfo;
    // Two 2-thread P-cores (0-3) and four 1-thread E-cores (4-7).
    let mut cpus = Vec::new();
    for cpu in 0..8u32 {
        let core = if cpu < 4 { cpu / 2 } else { cpu - 2 };
        cpus.push(CpuInfo {
            cpu,
            core,
            socket: 0,
            numa: 0,
            l3: Some(0),
            die: None,
        });
    }
    let t = Topology::new(cpus, CpuSet::new(), CpuSet::new()).unwrap();
    let got = alloc(&t, t.online(), 3);
    assert_eq!(Alignment::of(&t, &got).shared_cores, 0, "{got}");
    let got = alloc(&t, t.online(), 7);
    assert_eq!(Alignment::of(&t, &got).shared_cores, 0, "{got}");
    let whole = Options {
        full_pcpus_only: true,
        ..Options::default()
    };
    assert_eq!(allocate(&t, t.online(), 4, &whole).unwrap().len(), 4);
}

mod distribute;
