//! Hostile and careless input: whatever a local user or a careless operator
//! can put in front of pinctl (a configuration file, a CPU list, a sysfs tree,
//! a state file, a cgroup's CPU limit) gives a clear error naming the input,
//! never a panic and never unbounded work.

use pinctl::cgroup::layout::{self, Kind, Qos};
use pinctl::cgroup::{CpuLimit, Observed};
use pinctl::config::Config;
use pinctl::intent;

/// A container of a Guaranteed pod (systemd driver, containerd).
const GUARANTEED: &str = "kubepods.slice/kubepods-pod190bf0c3_921b_4ecb_b2f9_6f8a82af3b3e.slice/cri-containerd-f42deac8960e4b15e6b5bbbb317fe052ae349fcd3a35293bf4b3bb8f45d2aea9.scope";

/// The kubelet rule's decision for a Guaranteed container whose `cpu.max`
/// reads `cpu_max`.
fn kubelet_decision(cpu_max: &str) -> (Option<intent::Intent>, Option<String>) {
    let kind = layout::classify(GUARANTEED);
    assert!(
        matches!(&kind, Kind::Container { pod, .. } if pod.qos == Qos::Guaranteed),
        "{kind:?}"
    );
    let obs = Observed {
        rel: GUARANTEED.into(),
        limit: CpuLimit::parse_v2(cpu_max),
        ..Observed::default()
    };
    intent::decide(&kind, &obs, None, &Config::default())
}

/// `cpu.max` of `18446744073709551615 1` once became a pending request for
/// 18446744073709551615 CPUs; it is now no request, and a problem that says
/// why, as a malformed xattr or annotation is.
#[test]
fn a_cpu_limit_of_more_cpus_than_supported_is_a_problem_not_a_request() {
    assert_eq!(kubelet_decision("400000 100000").0.map(|i| i.cpus), Some(4));
    for cpu_max in ["18446744073709551615 1", "1638500000 100000", "400000 0"] {
        let (intent, problem) = kubelet_decision(cpu_max);
        assert_eq!(intent, None, "{cpu_max}");
        let problem = problem.unwrap_or_default();
        assert!(
            problem.starts_with("ignoring CPU limit of "),
            "{cpu_max}: {problem:?}"
        );
    }
    // Not a whole number: the shared pool, silently, as the kubelet does.
    assert_eq!(kubelet_decision("150000 100000"), (None, None));
}
