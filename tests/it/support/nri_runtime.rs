//! A stand-in container runtime that speaks NRI to pinctld's plugin, as
//! containerd's and CRI-O's NRI adaptation does: it listens on the NRI
//! socket, takes the plugin's `RegisterPlugin` on the runtime connection,
//! and calls the plugin service on the plugin connection. The wire code
//! is the crate's own (`pinctl::nri::{mux, ttrpc}`), checked against
//! hand-made bytes in its unit tests.

use std::path::{Path, PathBuf};
use std::time::Duration;

use pinctl::nri::api;
use pinctl::nri::mux::{self, PLUGIN_CONN, RUNTIME_CONN};
use pinctl::nri::ttrpc::{self, Decoder, code};
use tokio::io::AsyncWriteExt;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{UnixListener, UnixStream};

/// How long the stand-in waits for the plugin before failing the test.
pub const WAIT: Duration = Duration::from_secs(10);

pub struct Runtime {
    listener: UnixListener,
    pub path: PathBuf,
}

impl Runtime {
    pub fn bind(dir: &Path) -> Runtime {
        let path = dir.join("nri.sock");
        let listener = UnixListener::bind(&path).expect("bind the NRI socket");
        Runtime { listener, path }
    }

    /// The next plugin's connection.
    pub async fn accept(&self) -> Conn {
        let (stream, _) = tokio::time::timeout(WAIT, self.listener.accept())
            .await
            .expect("a plugin connects in time")
            .expect("accept");
        Conn::new(stream)
    }
}

/// One plugin's connection, as the runtime sees it.
pub struct Conn {
    rd: OwnedReadHalf,
    wr: OwnedWriteHalf,
    plugin: Decoder,
    runtime: Decoder,
    next_stream: u32,
    /// What the plugin registered as.
    pub registered: Option<api::RegisterPluginRequest>,
    /// The `UpdateContainers` calls the plugin made, in order.
    pub updates: Vec<api::UpdateContainersRequest>,
    /// The containers the runtime answers as failed to update.
    pub fail_updates: Vec<String>,
    /// The size of the frames it cuts its messages into (a runtime's
    /// buffered writer may cut one anywhere): small by default, so that the
    /// plugin's reassembly is tested; a benchmark sends whole messages.
    pub chunk: usize,
}

impl Conn {
    fn new(stream: UnixStream) -> Conn {
        let (rd, wr) = stream.into_split();
        Conn {
            rd,
            wr,
            plugin: Decoder::default(),
            runtime: Decoder::default(),
            next_stream: 1,
            registered: None,
            updates: Vec::new(),
            fail_updates: Vec::new(),
            chunk: 7,
        }
    }

    /// Reads until the plugin has registered.
    pub async fn registration(&mut self) -> api::RegisterPluginRequest {
        while self.registered.is_none() {
            assert!(self.pump().await, "the plugin closed before registering");
        }
        self.registered.clone().expect("registered")
    }

    /// Calls `method` of the plugin service; its answer or its status.
    pub async fn call(
        &mut self,
        method: &str,
        body: &impl prost::Message,
    ) -> Result<Vec<u8>, (i32, String)> {
        let stream = self.next_stream;
        self.next_stream += 2;
        let m = ttrpc::encode_request(stream, api::PLUGIN_SERVICE, method, body, 2_000_000_000)
            .unwrap();
        self.write(PLUGIN_CONN, &m.to_bytes()).await;
        loop {
            while let Some(m) = self.plugin.next_message().expect("the plugin's framing") {
                assert_eq!(
                    m.kind,
                    ttrpc::RESPONSE,
                    "the plugin sent a request on the plugin connection"
                );
                if m.stream != stream {
                    continue;
                }
                let r: ttrpc::Response = ttrpc::decode("response", &m.payload).unwrap();
                let status = r.status.unwrap_or_default();
                return if status.code == code::OK {
                    Ok(r.payload)
                } else {
                    Err((status.code, status.message))
                };
            }
            assert!(
                self.pump().await,
                "the plugin closed before answering {method}"
            );
        }
    }

    /// Calls and decodes the answer.
    pub async fn ask<T: prost::Message + Default>(
        &mut self,
        method: &str,
        body: &impl prost::Message,
    ) -> T {
        let bytes = self
            .call(method, body)
            .await
            .unwrap_or_else(|e| panic!("{method} failed: {e:?}"));
        ttrpc::decode("answer", &bytes).unwrap()
    }

    /// Reads until `n` `UpdateContainers` calls have come.
    pub async fn wait_updates(&mut self, n: usize) {
        while self.updates.len() < n {
            assert!(self.pump().await, "the plugin closed before {n} updates");
        }
    }

    /// Reads one frame and serves the runtime connection's requests; false
    /// once the plugin has closed.
    async fn pump(&mut self) -> bool {
        let frame = tokio::time::timeout(WAIT, mux::read_frame(&mut self.rd))
            .await
            .expect("the plugin says something in time");
        let Ok(Some((conn, bytes))) = frame else {
            return false;
        };
        match conn {
            PLUGIN_CONN => self.plugin.push(&bytes),
            RUNTIME_CONN => {
                self.runtime.push(&bytes);
                while let Some(m) = self.runtime.next_message().expect("the plugin's framing") {
                    let req: ttrpc::Request = ttrpc::decode("request", &m.payload).unwrap();
                    assert_eq!(req.service, api::RUNTIME_SERVICE);
                    let answer = match req.method.as_str() {
                        "RegisterPlugin" => {
                            self.registered =
                                Some(ttrpc::decode("RegisterPluginRequest", &req.payload).unwrap());
                            Ok(prost::Message::encode_to_vec(&api::Empty {}))
                        }
                        "UpdateContainers" => {
                            let u: api::UpdateContainersRequest =
                                ttrpc::decode("UpdateContainersRequest", &req.payload).unwrap();
                            let failed = u
                                .update
                                .iter()
                                .filter(|c| self.fail_updates.contains(&c.container_id))
                                .cloned()
                                .collect();
                            self.updates.push(u);
                            Ok(prost::Message::encode_to_vec(
                                &api::UpdateContainersResponse { failed },
                            ))
                        }
                        other => Err((code::UNIMPLEMENTED, format!("no {other}"))),
                    };
                    let r = ttrpc::encode_response(m.stream, answer).unwrap();
                    self.write(RUNTIME_CONN, &r.to_bytes()).await;
                }
            }
            other => panic!("a frame for connection {other}"),
        }
        true
    }

    /// Writes `data` cut into frames of [`Self::chunk`] bytes.
    async fn write(&mut self, conn: u32, data: &[u8]) {
        for piece in data.chunks(self.chunk.max(1)) {
            self.wr
                .write_all(&mux::frames(conn, piece))
                .await
                .expect("write to the plugin");
        }
    }
}

/// A container as the runtime describes it.
pub fn container(id: &str, pod: &str, name: &str, quota: Option<(i64, u64)>) -> api::Container {
    let cpu = quota.map(|(q, p)| api::LinuxCpu {
        quota: Some(api::OptionalInt64 { value: q }),
        period: Some(api::OptionalUInt64 { value: p }),
        ..Default::default()
    });
    api::Container {
        id: id.to_string(),
        pod_sandbox_id: pod.to_string(),
        name: name.to_string(),
        linux: Some(api::LinuxContainer {
            resources: Some(api::LinuxResources { cpu }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A pod as the runtime describes it.
pub fn pod(id: &str, uid: &str) -> api::PodSandbox {
    api::PodSandbox {
        id: id.to_string(),
        uid: uid.to_string(),
        name: format!("pod-{id}"),
        namespace: "default".to_string(),
        ..Default::default()
    }
}
