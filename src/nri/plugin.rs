//! One connection to the runtime as an NRI plugin: registration, the
//! plugin service the runtime calls, and the runtime service pinctld calls
//! (`UpdateContainers`). The session decides nothing: each call goes to
//! the daemon as an [`Asked`] and is answered with what comes back, or,
//! when nothing comes back within the budget, with the [`Fallback`]'s
//! answer, so that the runtime never waits past its own timeout (2 s by
//! default), which would cost the connection.
//!
//! Calls the session does not know (a newer runtime's dedicated
//! `RemoveContainer`, `RunPodSandbox`, ...) are answered "unimplemented":
//! the runtime then sends them as `StateChange`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot};

use super::api::{self, event};
use super::mux::{self, PLUGIN_CONN, RUNTIME_CONN};
use super::ttrpc::{self, Decoder, Message, WireError, code};

/// What the plugin registers as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    /// `plugin_name`.
    pub name: String,
    /// `plugin_idx`: two digits, the plugin's place among the runtime's.
    pub index: String,
}

/// The events pinctld asks for in `Configure`.
pub const EVENTS: [i32; 4] = [
    event::CREATE_CONTAINER,
    event::UPDATE_CONTAINER,
    event::STOP_CONTAINER,
    event::REMOVE_CONTAINER,
];

/// A call of the runtime for the daemon to answer, or news of the session.
#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    /// `Configure` came: the runtime's name and version.
    Configured {
        runtime: String,
        version: String,
    },
    /// The containers and pods that exist (a split request gathered).
    Synchronize(api::SynchronizeRequest),
    Create(api::CreateContainerRequest),
    Update(api::UpdateContainerRequest),
    Stop(api::StopContainerRequest),
    /// Any other event (`RemoveContainer` among them).
    Event(api::StateChangeEvent),
}

impl Call {
    /// The call's name, for logs.
    pub fn name(&self) -> &'static str {
        match self {
            Call::Configured { .. } => "Configure",
            Call::Synchronize(_) => "Synchronize",
            Call::Create(_) => "CreateContainer",
            Call::Update(_) => "UpdateContainer",
            Call::Stop(_) => "StopContainer",
            Call::Event(_) => "StateChange",
        }
    }
}

/// The daemon's answer to a [`Call`].
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    Synchronize(Vec<api::ContainerUpdate>),
    Create(api::CreateContainerResponse),
    Update(api::UpdateContainerResponse),
    Stop(api::StopContainerResponse),
    /// An event, or news, taken in.
    Done,
    /// The call is refused: the runtime fails it with this reason (a
    /// container it was making is not made).
    Refuse(String),
}

/// A call and where its answer goes.
#[derive(Debug)]
pub struct Asked {
    pub call: Call,
    pub reply: oneshot::Sender<Answer>,
}

/// The answer when the daemon has not answered within the budget: it must
/// not wait on anything.
pub type Fallback = Arc<dyn Fn(&Call) -> Answer + Send + Sync>;

/// A call pinctld makes of the runtime.
#[derive(Debug)]
pub struct Outgoing {
    pub request: api::UpdateContainersRequest,
    pub reply: oneshot::Sender<Result<api::UpdateContainersResponse, String>>,
}

/// How a session ended.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("the runtime closed the connection")]
    Closed,
    #[error("reading from the runtime: {0}")]
    Read(#[source] std::io::Error),
    #[error("writing to the runtime: {0}")]
    Write(#[source] std::io::Error),
    #[error(transparent)]
    Wire(#[from] WireError),
    #[error("the runtime refused the registration: {0}")]
    Refused(String),
    #[error("the runtime did not answer the registration within {0:?}")]
    NoRegistration(Duration),
    #[error("the daemon stopped listening")]
    DaemonGone,
}

/// A session's settings.
#[derive(Clone)]
pub struct Settings {
    pub registration: Registration,
    /// How long the daemon has to answer a call before the fallback
    /// answers it.
    pub budget: Duration,
    /// How long the runtime has to answer a call of pinctld's: the
    /// registration, `UpdateContainers` (sent as each call's timeout).
    pub call_within: Duration,
    pub fallback: Fallback,
}

type Pending = HashMap<u32, oneshot::Sender<Result<Vec<u8>, String>>>;
/// What the reader task hands on: a frame, the end, or a read error.
type Frames = mpsc::Receiver<std::io::Result<Option<(u32, Vec<u8>)>>>;

/// Runs one session over `stream` until the runtime closes it (or breaks
/// the protocol, or the daemon goes).
pub async fn run(
    stream: UnixStream,
    settings: Settings,
    daemon: mpsc::Sender<Asked>,
    outgoing: &mut mpsc::Receiver<Outgoing>,
) -> Result<(), SessionError> {
    let (mut rd, wr) = stream.into_split();
    let (frames_tx, mut frames) = mpsc::channel::<std::io::Result<Option<(u32, Vec<u8>)>>>(64);
    let reader = tokio::spawn(async move {
        loop {
            let frame = mux::read_frame(&mut rd).await;
            let end = !matches!(frame, Ok(Some(_)));
            if frames_tx.send(frame).await.is_err() || end {
                return;
            }
        }
    });
    let mut session = Session {
        settings,
        daemon,
        out: Arc::new(tokio::sync::Mutex::new(wr)),
        plugin: Decoder::default(),
        runtime: Decoder::default(),
        pending: Pending::new(),
        next_stream: 1,
        sync: None,
    };
    let result = session.serve(&mut frames, outgoing).await;
    reader.abort();
    result
}

/// The runtime's end of the socket, shared by the session and the tasks
/// that answer its calls: each writes its frames itself, at once, with no
/// task between it and the socket (the daemon's loop runs on the same
/// thread, and a task woken behind it would wait for its whole turn).
type Out = Arc<tokio::sync::Mutex<tokio::net::unix::OwnedWriteHalf>>;

struct Session {
    settings: Settings,
    daemon: mpsc::Sender<Asked>,
    out: Out,
    /// The plugin service's bytes (connection 1).
    plugin: Decoder,
    /// The runtime service's bytes (connection 2).
    runtime: Decoder,
    /// pinctld's calls waiting for the runtime's answer, by stream.
    pending: Pending,
    next_stream: u32,
    /// The parts of a split `Synchronize` so far.
    sync: Option<api::SynchronizeRequest>,
}

impl Session {
    async fn serve(
        &mut self,
        frames: &mut Frames,
        outgoing: &mut mpsc::Receiver<Outgoing>,
    ) -> Result<(), SessionError> {
        let registration = api::RegisterPluginRequest {
            plugin_name: self.settings.registration.name.clone(),
            plugin_idx: self.settings.registration.index.clone(),
        };
        let registered = self.call("RegisterPlugin", &registration).await?;
        let deadline = tokio::time::sleep(self.settings.call_within);
        tokio::pin!(deadline);
        let mut registered = Some(registered);
        let mut outgoing_open = true;
        loop {
            tokio::select! {
                frame = frames.recv() => match frame {
                    Some(Ok(Some((conn, bytes)))) => self.frame(conn, &bytes).await?,
                    Some(Ok(None)) | None => return Err(SessionError::Closed),
                    Some(Err(e)) => return Err(SessionError::Read(e)),
                },
                answer = async {
                    match registered.as_mut() {
                        Some(waiting) => waiting.await,
                        None => std::future::pending().await,
                    }
                }, if registered.is_some() => {
                    registered = None;
                    match answer {
                        Ok(Ok(_)) => {}
                        Ok(Err(why)) => return Err(SessionError::Refused(why)),
                        Err(_) => return Err(SessionError::Closed),
                    }
                }
                () = &mut deadline, if registered.is_some() => {
                    return Err(SessionError::NoRegistration(self.settings.call_within));
                }
                call = outgoing.recv(), if outgoing_open => match call {
                    Some(Outgoing { request, reply }) => {
                        let answer = self.call("UpdateContainers", &request).await?;
                        tokio::spawn(async move {
                            let result = match answer.await {
                                Ok(Ok(bytes)) => ttrpc::decode("UpdateContainersResponse", &bytes)
                                    .map_err(|e| e.to_string()),
                                Ok(Err(why)) => Err(why),
                                Err(_) => Err("the connection closed".to_string()),
                            };
                            let _ = reply.send(result);
                        });
                    }
                    None => outgoing_open = false,
                },
            }
        }
    }

    /// Sends a call on the runtime service; its answer comes on the
    /// returned channel.
    async fn call(
        &mut self,
        method: &str,
        body: &impl prost::Message,
    ) -> Result<oneshot::Receiver<Result<Vec<u8>, String>>, SessionError> {
        let stream = self.next_stream;
        self.next_stream = self.next_stream.wrapping_add(2);
        let timeout = self.settings.call_within.as_nanos() as i64;
        let message = ttrpc::encode_request(stream, api::RUNTIME_SERVICE, method, body, timeout)?;
        let (tx, rx) = oneshot::channel();
        self.pending.insert(stream, tx);
        send(&self.out, RUNTIME_CONN, &message).await?;
        Ok(rx)
    }

    /// Answers the call on stream `stream` of connection `conn` at once.
    async fn reply(
        &self,
        conn: u32,
        stream: u32,
        answer: Result<Vec<u8>, (i32, String)>,
    ) -> Result<(), SessionError> {
        let message = ttrpc::encode_response(stream, answer)?;
        send(&self.out, conn, &message).await
    }

    async fn frame(&mut self, conn: u32, bytes: &[u8]) -> Result<(), SessionError> {
        match conn {
            PLUGIN_CONN => {
                self.plugin.push(bytes);
                while let Some(message) = self.plugin.next_message()? {
                    if message.kind == ttrpc::REQUEST {
                        self.request(message).await?;
                    }
                }
            }
            RUNTIME_CONN => {
                self.runtime.push(bytes);
                while let Some(message) = self.runtime.next_message()? {
                    if message.kind != ttrpc::RESPONSE {
                        // pinctld serves nothing on the runtime service.
                        let refusal = (code::UNIMPLEMENTED, "pinctld serves no calls here".into());
                        self.reply(RUNTIME_CONN, message.stream, Err(refusal))
                            .await?;
                        continue;
                    }
                    let response: ttrpc::Response = ttrpc::decode("response", &message.payload)?;
                    if let Some(waiter) = self.pending.remove(&message.stream) {
                        let answer = match response.status {
                            Some(s) if s.code != code::OK => {
                                Err(format!("{} (code {})", s.message, s.code))
                            }
                            _ => Ok(response.payload),
                        };
                        let _ = waiter.send(answer);
                    }
                }
            }
            // The multiplexer drops frames for connections nobody opened.
            _ => {}
        }
        Ok(())
    }

    async fn request(&mut self, message: Message) -> Result<(), SessionError> {
        let request: ttrpc::Request = ttrpc::decode("request", &message.payload)?;
        let stream = message.stream;
        let unimplemented = || {
            let what = format!("{}/{} is not implemented", request.service, request.method);
            (code::UNIMPLEMENTED, what)
        };
        let step = match request.service == api::PLUGIN_SERVICE {
            false => Err(unimplemented()),
            true => match self.call_of(&request.method, &request.payload) {
                Ok(Some(step)) => Ok(step),
                Ok(None) => Err(unimplemented()),
                Err(e) => Err((code::INVALID_ARGUMENT, e.to_string())),
            },
        };
        let call = match step {
            Ok(Step::Ask(call)) => *call,
            Ok(Step::Answer(bytes)) => return self.reply(PLUGIN_CONN, stream, Ok(bytes)).await,
            Err(refusal) => return self.reply(PLUGIN_CONN, stream, Err(refusal)).await,
        };
        let (tx, rx) = oneshot::channel();
        // Not queued when the daemon's queue is full: the fallback answers
        // at once instead.
        let queued = match self.daemon.try_send(Asked {
            call: call.clone(),
            reply: tx,
        }) {
            Ok(()) => Some(rx),
            Err(mpsc::error::TrySendError::Full(_)) => None,
            Err(mpsc::error::TrySendError::Closed(_)) => return Err(SessionError::DaemonGone),
        };
        let (fallback, budget, out) = (
            self.settings.fallback.clone(),
            self.settings.budget,
            self.out.clone(),
        );
        tokio::spawn(async move {
            let answer = match queued {
                Some(rx) => tokio::time::timeout(budget, rx)
                    .await
                    .ok()
                    .and_then(Result::ok),
                None => None,
            };
            let answer = answer.unwrap_or_else(|| fallback(&call));
            if let Ok(message) = ttrpc::encode_response(stream, encode_answer(&call, answer)) {
                let _ = send(&out, PLUGIN_CONN, &message).await;
            }
        });
        Ok(())
    }

    /// What to do with a call of the plugin service: `None` when it is not
    /// one pinctld implements.
    fn call_of(&mut self, method: &str, payload: &[u8]) -> Result<Option<Step>, WireError> {
        Ok(Some(match method {
            "Configure" => {
                let req: api::ConfigureRequest = ttrpc::decode("ConfigureRequest", payload)?;
                let news = Call::Configured {
                    runtime: req.runtime_name,
                    version: req.runtime_version,
                };
                // Told, not asked: the answer is the session's own.
                let (tx, _rx) = oneshot::channel();
                let _ = self.daemon.try_send(Asked {
                    call: news,
                    reply: tx,
                });
                let response = api::ConfigureResponse {
                    events: api::event_mask(&EVENTS),
                };
                Step::Answer(prost::Message::encode_to_vec(&response))
            }
            "Synchronize" => {
                let req: api::SynchronizeRequest = ttrpc::decode("SynchronizeRequest", payload)?;
                let more = req.more;
                let whole = match self.sync.take() {
                    Some(mut so_far) => {
                        so_far.pods.extend(req.pods);
                        so_far.containers.extend(req.containers);
                        so_far
                    }
                    None => req,
                };
                if more {
                    self.sync = Some(whole);
                    let response = api::SynchronizeResponse {
                        update: Vec::new(),
                        more: true,
                    };
                    Step::Answer(prost::Message::encode_to_vec(&response))
                } else {
                    Step::Ask(Box::new(Call::Synchronize(api::SynchronizeRequest {
                        more: false,
                        ..whole
                    })))
                }
            }
            "Shutdown" => Step::Answer(prost::Message::encode_to_vec(&api::Empty {})),
            "CreateContainer" => Step::Ask(Box::new(Call::Create(ttrpc::decode(
                "CreateContainerRequest",
                payload,
            )?))),
            "UpdateContainer" => Step::Ask(Box::new(Call::Update(ttrpc::decode(
                "UpdateContainerRequest",
                payload,
            )?))),
            "StopContainer" => Step::Ask(Box::new(Call::Stop(ttrpc::decode(
                "StopContainerRequest",
                payload,
            )?))),
            "StateChange" => Step::Ask(Box::new(Call::Event(ttrpc::decode(
                "StateChangeEvent",
                payload,
            )?))),
            _ => return Ok(None),
        }))
    }
}

enum Step {
    /// Answered by the session itself.
    Answer(Vec<u8>),
    /// Asked of the daemon.
    Ask(Box<Call>),
}

async fn send(out: &Out, conn: u32, message: &Message) -> Result<(), SessionError> {
    let bytes = mux::frames(conn, &message.to_bytes());
    out.lock()
        .await
        .write_all(&bytes)
        .await
        .map_err(SessionError::Write)
}

/// The response's body for `answer` to `call`; an answer of the wrong kind
/// is the daemon's bug, answered as an internal error rather than a
/// response the runtime would misread.
fn encode_answer(call: &Call, answer: Answer) -> Result<Vec<u8>, (i32, String)> {
    use prost::Message as _;
    match (call, answer) {
        (_, Answer::Refuse(why)) => Err((code::FAILED_PRECONDITION, why)),
        (Call::Synchronize(_), Answer::Synchronize(update)) => Ok(api::SynchronizeResponse {
            update,
            more: false,
        }
        .encode_to_vec()),
        (Call::Create(_), Answer::Create(r)) => Ok(r.encode_to_vec()),
        (Call::Update(_), Answer::Update(r)) => Ok(r.encode_to_vec()),
        (Call::Stop(_), Answer::Stop(r)) => Ok(r.encode_to_vec()),
        (Call::Event(_), Answer::Done) => Ok(api::Empty {}.encode_to_vec()),
        (Call::Synchronize(_), Answer::Done) => {
            Ok(api::SynchronizeResponse::default().encode_to_vec())
        }
        (Call::Create(_), Answer::Done) => {
            Ok(api::CreateContainerResponse::default().encode_to_vec())
        }
        (Call::Update(_), Answer::Done) => {
            Ok(api::UpdateContainerResponse::default().encode_to_vec())
        }
        (Call::Stop(_), Answer::Done) => Ok(api::StopContainerResponse::default().encode_to_vec()),
        (call, other) => Err((
            code::INTERNAL,
            format!("pinctld answered {} with {other:?}", call.name()),
        )),
    }
}
