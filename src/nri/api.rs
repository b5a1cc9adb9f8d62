//! The messages of NRI's API (`nri.pkg.api.v1alpha1`, as `api.proto` of
//! containerd/nri v0.6.1 declares them, with the later `more` of a split
//! `Synchronize`): only the ones pinctld sends or reads, and of those only
//! the fields it uses. Field numbers are the protocol; names follow the
//! proto file. A field this file leaves out is skipped when decoding
//! (protobuf's rule), so a newer runtime's messages decode too.
//!
//! Declared by hand with `prost`'s derive rather than generated: the
//! subset is small, and no build step or `protoc` is needed.

use std::collections::HashMap;

/// The plugin service's name, as the runtime calls it.
pub const PLUGIN_SERVICE: &str = "nri.pkg.api.v1alpha1.Plugin";
/// The runtime service's name, as the plugin calls it.
pub const RUNTIME_SERVICE: &str = "nri.pkg.api.v1alpha1.Runtime";

/// `Empty`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Empty {}

/// `RegisterPluginRequest`: the plugin's name and index (two digits; the
/// order among plugins).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RegisterPluginRequest {
    #[prost(string, tag = "1")]
    pub plugin_name: String,
    #[prost(string, tag = "2")]
    pub plugin_idx: String,
}

/// `UpdateContainersRequest`: changes the plugin asks of containers that
/// exist (unsolicited, on the runtime service).
#[derive(Clone, PartialEq, prost::Message)]
pub struct UpdateContainersRequest {
    #[prost(message, repeated, tag = "1")]
    pub update: Vec<ContainerUpdate>,
    #[prost(message, repeated, tag = "2")]
    pub evict: Vec<ContainerEviction>,
}

/// `UpdateContainersResponse`: the updates the runtime could not make.
#[derive(Clone, PartialEq, prost::Message)]
pub struct UpdateContainersResponse {
    #[prost(message, repeated, tag = "1")]
    pub failed: Vec<ContainerUpdate>,
}

/// `ConfigureRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ConfigureRequest {
    #[prost(string, tag = "1")]
    pub config: String,
    #[prost(string, tag = "2")]
    pub runtime_name: String,
    #[prost(string, tag = "3")]
    pub runtime_version: String,
}

/// `ConfigureResponse`: the events the plugin wants ([`event_mask`]).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ConfigureResponse {
    #[prost(int32, tag = "2")]
    pub events: i32,
}

/// `SynchronizeRequest`: the pods and containers that exist. With `more`,
/// another part follows (a runtime splits a large one).
#[derive(Clone, PartialEq, prost::Message)]
pub struct SynchronizeRequest {
    #[prost(message, repeated, tag = "1")]
    pub pods: Vec<PodSandbox>,
    #[prost(message, repeated, tag = "2")]
    pub containers: Vec<Container>,
    #[prost(bool, tag = "3")]
    pub more: bool,
}

/// `SynchronizeResponse`: a part is answered with its `more` and no update.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SynchronizeResponse {
    #[prost(message, repeated, tag = "1")]
    pub update: Vec<ContainerUpdate>,
    #[prost(bool, tag = "2")]
    pub more: bool,
}

/// `CreateContainerRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CreateContainerRequest {
    #[prost(message, optional, tag = "1")]
    pub pod: Option<PodSandbox>,
    #[prost(message, optional, tag = "2")]
    pub container: Option<Container>,
}

/// `CreateContainerResponse`: the new container's adjustment, and updates
/// of others.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CreateContainerResponse {
    #[prost(message, optional, tag = "1")]
    pub adjust: Option<ContainerAdjustment>,
    #[prost(message, repeated, tag = "2")]
    pub update: Vec<ContainerUpdate>,
    #[prost(message, repeated, tag = "3")]
    pub evict: Vec<ContainerEviction>,
}

/// `UpdateContainerRequest`: a container's resources change (a resize).
#[derive(Clone, PartialEq, prost::Message)]
pub struct UpdateContainerRequest {
    #[prost(message, optional, tag = "1")]
    pub pod: Option<PodSandbox>,
    #[prost(message, optional, tag = "2")]
    pub container: Option<Container>,
    #[prost(message, optional, tag = "3")]
    pub linux_resources: Option<LinuxResources>,
}

/// `UpdateContainerResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct UpdateContainerResponse {
    #[prost(message, repeated, tag = "1")]
    pub update: Vec<ContainerUpdate>,
    #[prost(message, repeated, tag = "2")]
    pub evict: Vec<ContainerEviction>,
}

/// `StopContainerRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StopContainerRequest {
    #[prost(message, optional, tag = "1")]
    pub pod: Option<PodSandbox>,
    #[prost(message, optional, tag = "2")]
    pub container: Option<Container>,
}

/// `StopContainerResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StopContainerResponse {
    #[prost(message, repeated, tag = "1")]
    pub update: Vec<ContainerUpdate>,
}

/// `StateChangeEvent`: every event without a call of its own for this
/// plugin (a runtime falls back to it when a dedicated call is
/// unimplemented).
#[derive(Clone, PartialEq, prost::Message)]
pub struct StateChangeEvent {
    #[prost(int32, tag = "1")]
    pub event: i32,
    #[prost(message, optional, tag = "2")]
    pub pod: Option<PodSandbox>,
    #[prost(message, optional, tag = "3")]
    pub container: Option<Container>,
}

/// `Event`'s values.
pub mod event {
    pub const RUN_POD_SANDBOX: i32 = 1;
    pub const STOP_POD_SANDBOX: i32 = 2;
    pub const REMOVE_POD_SANDBOX: i32 = 3;
    pub const CREATE_CONTAINER: i32 = 4;
    pub const POST_CREATE_CONTAINER: i32 = 5;
    pub const START_CONTAINER: i32 = 6;
    pub const POST_START_CONTAINER: i32 = 7;
    pub const UPDATE_CONTAINER: i32 = 8;
    pub const POST_UPDATE_CONTAINER: i32 = 9;
    pub const STOP_CONTAINER: i32 = 10;
    pub const REMOVE_CONTAINER: i32 = 11;
}

/// The mask `Configure` answers for these events (bit `event - 1`, as
/// `api.EventMask`).
pub fn event_mask(events: &[i32]) -> i32 {
    events
        .iter()
        .filter(|e| (1..=30).contains(*e))
        .fold(0, |mask, e| mask | (1 << (e - 1)))
}

/// `PodSandbox`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandbox {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(string, tag = "3")]
    pub uid: String,
    #[prost(string, tag = "4")]
    pub namespace: String,
    #[prost(map = "string, string", tag = "5")]
    pub labels: HashMap<String, String>,
    #[prost(map = "string, string", tag = "6")]
    pub annotations: HashMap<String, String>,
    #[prost(string, tag = "7")]
    pub runtime_handler: String,
    #[prost(message, optional, tag = "8")]
    pub linux: Option<LinuxPodSandbox>,
    #[prost(uint32, tag = "9")]
    pub pid: u32,
}

/// `LinuxPodSandbox`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxPodSandbox {
    #[prost(message, optional, tag = "1")]
    pub pod_overhead: Option<LinuxResources>,
    #[prost(message, optional, tag = "2")]
    pub pod_resources: Option<LinuxResources>,
    #[prost(string, tag = "3")]
    pub cgroup_parent: String,
    #[prost(string, tag = "4")]
    pub cgroups_path: String,
    #[prost(message, optional, tag = "6")]
    pub resources: Option<LinuxResources>,
}

/// `Container`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Container {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(string, tag = "2")]
    pub pod_sandbox_id: String,
    #[prost(string, tag = "3")]
    pub name: String,
    #[prost(int32, tag = "4")]
    pub state: i32,
    #[prost(map = "string, string", tag = "5")]
    pub labels: HashMap<String, String>,
    #[prost(map = "string, string", tag = "6")]
    pub annotations: HashMap<String, String>,
    #[prost(string, repeated, tag = "8")]
    pub env: Vec<String>,
    #[prost(message, repeated, tag = "9")]
    pub mounts: Vec<Mount>,
    #[prost(message, optional, tag = "11")]
    pub linux: Option<LinuxContainer>,
    #[prost(uint32, tag = "12")]
    pub pid: u32,
}

/// `Mount`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Mount {
    #[prost(string, tag = "1")]
    pub destination: String,
    #[prost(string, tag = "2")]
    pub r#type: String,
    #[prost(string, tag = "3")]
    pub source: String,
    #[prost(string, repeated, tag = "4")]
    pub options: Vec<String>,
}

/// `LinuxContainer`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxContainer {
    #[prost(message, repeated, tag = "2")]
    pub devices: Vec<LinuxDevice>,
    #[prost(message, optional, tag = "3")]
    pub resources: Option<LinuxResources>,
    #[prost(string, tag = "5")]
    pub cgroups_path: String,
}

/// `LinuxDevice`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxDevice {
    #[prost(string, tag = "1")]
    pub path: String,
    #[prost(string, tag = "2")]
    pub r#type: String,
    #[prost(int64, tag = "3")]
    pub major: i64,
    #[prost(int64, tag = "4")]
    pub minor: i64,
}

/// `LinuxResources`: only the CPU's part is read or set.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxResources {
    #[prost(message, optional, tag = "2")]
    pub cpu: Option<LinuxCpu>,
}

/// `LinuxCPU`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxCpu {
    #[prost(message, optional, tag = "1")]
    pub shares: Option<OptionalUInt64>,
    #[prost(message, optional, tag = "2")]
    pub quota: Option<OptionalInt64>,
    #[prost(message, optional, tag = "3")]
    pub period: Option<OptionalUInt64>,
    #[prost(string, tag = "6")]
    pub cpus: String,
    #[prost(string, tag = "7")]
    pub mems: String,
}

/// `ContainerAdjustment`: what a plugin changes of a container being made.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerAdjustment {
    #[prost(map = "string, string", tag = "2")]
    pub annotations: HashMap<String, String>,
    #[prost(message, optional, tag = "6")]
    pub linux: Option<LinuxContainerAdjustment>,
}

/// `LinuxContainerAdjustment`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxContainerAdjustment {
    #[prost(message, optional, tag = "2")]
    pub resources: Option<LinuxResources>,
}

/// `ContainerUpdate`: new resources for a container that exists.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerUpdate {
    #[prost(string, tag = "1")]
    pub container_id: String,
    #[prost(message, optional, tag = "2")]
    pub linux: Option<LinuxContainerUpdate>,
    #[prost(bool, tag = "3")]
    pub ignore_failure: bool,
}

/// `LinuxContainerUpdate`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxContainerUpdate {
    #[prost(message, optional, tag = "1")]
    pub resources: Option<LinuxResources>,
}

/// `ContainerEviction`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerEviction {
    #[prost(string, tag = "1")]
    pub container_id: String,
    #[prost(string, tag = "2")]
    pub reason: String,
}

/// `OptionalInt64`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct OptionalInt64 {
    #[prost(int64, tag = "1")]
    pub value: i64,
}

/// `OptionalUInt64`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct OptionalUInt64 {
    #[prost(uint64, tag = "1")]
    pub value: u64,
}

/// Resources that set a container's CPUs and memory nodes, and nothing
/// else.
pub fn cpuset_resources(cpus: &str, mems: &str) -> LinuxResources {
    LinuxResources {
        cpu: Some(LinuxCpu {
            cpus: cpus.to_string(),
            mems: mems.to_string(),
            ..Default::default()
        }),
    }
}
