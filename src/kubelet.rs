//! The kubelet's CPU manager, as its checkpoint file says
//! (`cpu_manager_state`, `kubelet_cpu_manager_state`). With the `static`
//! policy the kubelet gives Guaranteed containers exclusive CPUs and
//! writes every pod container's cpuset itself: a second CPU owner on the
//! node, which pinctld must not fight. With `none` it keeps nothing there.
//! Pure: the daemon reads the file through its I/O threads.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::cpuset::CpuSet;

/// What the checkpoint says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuManager {
    /// `policyName`: `none` or `static`.
    pub policy: String,
    /// The CPUs its containers hold exclusively (the union of `entries`).
    pub exclusive: CpuSet,
    /// How many containers hold them.
    pub containers: usize,
}

impl CpuManager {
    /// Whether it owns CPUs: the `static` policy.
    pub fn owns_cpus(&self) -> bool {
        self.policy == "static"
    }
}

/// The checkpoint's JSON (`k8s.io/kubernetes/pkg/kubelet/cm/cpumanager/state`,
/// v2: entries by pod UID and container name).
#[derive(Deserialize)]
struct Checkpoint {
    #[serde(rename = "policyName")]
    policy_name: String,
    #[serde(default)]
    entries: BTreeMap<String, BTreeMap<String, String>>,
}

/// Reads a checkpoint; the error says what is wrong with it.
pub fn parse(text: &str) -> Result<CpuManager, String> {
    let c: Checkpoint = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let mut exclusive = CpuSet::new();
    let mut containers = 0;
    for (pod, by_name) in &c.entries {
        for (name, cpus) in by_name {
            let set: CpuSet = cpus
                .parse()
                .map_err(|e| format!("entry {pod}/{name}: {cpus:?} is not a CPU list: {e}"))?;
            exclusive.union_with(&set);
            containers += 1;
        }
    }
    Ok(CpuManager {
        policy: c.policy_name,
        exclusive,
        containers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_static_checkpoint_names_its_exclusive_cpus() {
        let text = r#"{"policyName":"static","defaultCpuSet":"0,5-7","entries":{
            "6a3f...":{"app":"1-2","side":"4"},"7b4e...":{"db":"3"}},"checksum":1234}"#;
        let m = parse(text).unwrap();
        assert!(m.owns_cpus());
        assert_eq!(m.exclusive, "1-4".parse().unwrap());
        assert_eq!(m.containers, 3);
        let none = parse(r#"{"policyName":"none","defaultCpuSet":"","checksum":1}"#).unwrap();
        assert!(!none.owns_cpus());
        assert!(none.exclusive.is_empty());
    }

    #[test]
    fn a_bad_checkpoint_says_why() {
        assert!(parse("").is_err());
        assert!(
            parse(r#"{"entries":{}}"#)
                .unwrap_err()
                .contains("policyName")
        );
        let bad = parse(r#"{"policyName":"static","entries":{"p":{"c":"x"}}}"#).unwrap_err();
        assert!(
            bad.contains("p/c") && bad.contains("not a CPU list"),
            "{bad}"
        );
    }
}
