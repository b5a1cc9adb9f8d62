//! The kubelet's CPU manager, as its checkpoint file says
//! (`cpu_manager_state`, `kubelet_cpu_manager_state`). With the `static`
//! policy the kubelet gives Guaranteed containers exclusive CPUs and
//! writes every pod container's cpuset itself: a second CPU owner on the
//! node, which pinctld must not fight. With `none` it keeps nothing there.
//! Pure: the daemon reads the file through its I/O threads, `pinctl
//! kubelet-handover` on its own thread.

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
    /// `defaultCpuSet`: the CPUs every other container runs on, the
    /// kubelet's shared pool (empty with `none`).
    pub default: CpuSet,
    /// `entries`: the CPUs of each container it pinned, by pod UID, then
    /// container name.
    pub entries: BTreeMap<String, BTreeMap<String, CpuSet>>,
}

impl CpuManager {
    /// Whether it owns CPUs: the `static` policy.
    pub fn owns_cpus(&self) -> bool {
        self.policy == "static"
    }

    /// The CPUs each container it pinned holds, by the container's workload
    /// key (`pod:<uid>/<name>`, [`crate::intent::pod_key`]).
    pub fn held(&self) -> BTreeMap<String, CpuSet> {
        self.entries
            .iter()
            .flat_map(|(pod, by_name)| {
                by_name
                    .iter()
                    .map(move |(name, cpus)| (crate::intent::pod_key(pod, name), cpus.clone()))
            })
            .collect()
    }
}

/// The checkpoint's JSON (`k8s.io/kubernetes/pkg/kubelet/cm/cpumanager/state`,
/// v2: entries by pod UID and container name).
#[derive(Deserialize)]
struct Checkpoint {
    #[serde(rename = "policyName")]
    policy_name: String,
    #[serde(rename = "defaultCpuSet", default)]
    default_cpu_set: String,
    #[serde(default)]
    entries: BTreeMap<String, BTreeMap<String, String>>,
}

/// Reads a checkpoint; the error says what is wrong with it.
pub fn parse(text: &str) -> Result<CpuManager, String> {
    let c: Checkpoint = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let default = c.default_cpu_set.parse().map_err(|e| {
        format!(
            "defaultCpuSet {:?} is not a CPU list: {e}",
            c.default_cpu_set
        )
    })?;
    let mut exclusive = CpuSet::new();
    let mut containers = 0;
    let mut entries = BTreeMap::new();
    for (pod, by_name) in c.entries {
        let mut sets = BTreeMap::new();
        for (name, cpus) in by_name {
            let set: CpuSet = cpus
                .parse()
                .map_err(|e| format!("entry {pod}/{name}: {cpus:?} is not a CPU list: {e}"))?;
            exclusive.union_with(&set);
            containers += 1;
            sets.insert(name, set);
        }
        entries.insert(pod, sets);
    }
    Ok(CpuManager {
        policy: c.policy_name,
        exclusive,
        containers,
        default,
        entries,
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
        assert_eq!(m.default, "0,5-7".parse().unwrap());
        let held: Vec<(String, String)> = m
            .held()
            .into_iter()
            .map(|(k, c)| (k, c.to_string()))
            .collect();
        assert_eq!(
            held,
            [
                ("pod:6a3f.../app".to_string(), "1-2".to_string()),
                ("pod:6a3f.../side".to_string(), "4".to_string()),
                ("pod:7b4e.../db".to_string(), "3".to_string()),
            ]
        );
        let none = parse(r#"{"policyName":"none","defaultCpuSet":"","checksum":1}"#).unwrap();
        assert!(!none.owns_cpus());
        assert!(none.exclusive.is_empty() && none.default.is_empty());
        assert!(none.held().is_empty());
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
        let bad = parse(r#"{"policyName":"static","defaultCpuSet":"0-"}"#).unwrap_err();
        assert!(bad.starts_with("defaultCpuSet \"0-\""), "{bad}");
        // The kubelet's first format (before v2): entries by container id.
        let old = parse(r#"{"policyName":"static","entries":{"abc":"1-2"}}"#).unwrap_err();
        assert!(old.contains("invalid type"), "{old}");
        // Cut short, as a kubelet killed mid-write leaves it.
        let cut = parse(r#"{"policyName":"static","defaultCpuSet":"0-1","entr"#).unwrap_err();
        assert!(cut.contains("EOF"), "{cut}");
    }
}
