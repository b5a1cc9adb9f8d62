//! The `pinctl` side of the socket API: HTTP/1.1 `GET` over the daemon's Unix
//! socket, and the documents of [`crate::api`] parsed from the answers.
//!
//! - One connection per request, one timeout from connect to the body's last
//!   byte: a wedged daemon costs the operator seconds, not a hung terminal.
//! - Typed errors say what to do: no daemon, not this user's socket (the
//!   group `pinctl`), no answer in time, or an HTTP error with the daemon's
//!   explanation.
//! - Must never touch the kernel's files, nor retry: a caller that polls
//!   (`pinctl events --follow`) loops itself.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde::de::DeserializeOwned;
use tokio::net::UnixStream;

use crate::api;

/// How long one request may take, connect to end of body.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The group whose members may use the daemon's socket (the packages create
/// it; the daemon gives the socket to it when it exists).
pub const SOCKET_GROUP: &str = "pinctl";

/// Why a request to the daemon failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No socket file: the daemon is not running, or runs with another
    /// `socket`.
    #[error("pinctld is not running (no socket at {})", .path.display())]
    NoSocket { path: PathBuf },
    /// The socket file exists but nothing listens on it: a daemon that
    /// crashed left it behind, or one is starting.
    #[error("pinctld is not running (nothing listens on {}: a socket left by a daemon that stopped)", .path.display())]
    Refused { path: PathBuf },
    /// The socket (or a directory above it) is not for this user.
    #[error("permission denied on {}: only root and members of the group {SOCKET_GROUP} may use the socket", .path.display())]
    PermissionDenied { path: PathBuf },
    /// Any other failure to connect.
    #[error("cannot connect to pinctld at {}", .path.display())]
    Connect {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The whole exchange took longer than the timeout.
    #[error("pinctld did not answer GET {uri} within {} s (socket {})", .after.as_secs_f32(), .path.display())]
    Timeout {
        path: PathBuf,
        uri: String,
        after: Duration,
    },
    /// The HTTP exchange itself failed (connection reset, garbage).
    #[error("GET {uri} on {} failed", .path.display())]
    Protocol {
        path: PathBuf,
        uri: String,
        #[source]
        source: hyper::Error,
    },
    /// `uri` is not a valid request target (a bug of the caller).
    #[error("invalid request GET {uri}")]
    InvalidUri {
        uri: String,
        #[source]
        source: hyper::http::Error,
    },
    /// The daemon answered with an error status; `body` is its explanation.
    #[error("GET {uri}: pinctld answered {status}: {body}")]
    Http {
        uri: String,
        status: StatusCode,
        body: String,
    },
    /// The answer is not the document this pinctl expects.
    #[error("GET {uri}: invalid answer from pinctld")]
    Decode {
        uri: String,
        #[source]
        source: serde_json::Error,
    },
    /// The daemon speaks another version of the documents.
    #[error(
        "GET {uri}: pinctld serves schema {served}, this pinctl reads schema {}; use the pinctl of the daemon's version",
        api::SCHEMA
    )]
    Schema { uri: String, served: u64 },
}

impl ClientError {
    /// Whether the daemon is simply not running (no socket, or a stale one):
    /// the case where an offline mode can help.
    pub fn is_not_running(&self) -> bool {
        matches!(
            self,
            ClientError::NoSocket { .. } | ClientError::Refused { .. }
        )
    }
}

/// One answer: its status and body.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: StatusCode,
    pub body: Bytes,
}

/// A client of one daemon socket.
#[derive(Debug, Clone)]
pub struct Client {
    socket: PathBuf,
    timeout: Duration,
}

impl Client {
    pub fn new(socket: impl Into<PathBuf>) -> Client {
        Client {
            socket: socket.into(),
            timeout: DEFAULT_TIMEOUT,
        }
    }

    pub fn with_timeout(mut self, timeout: Duration) -> Client {
        self.timeout = timeout;
        self
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// `GET uri` (a path and query, `/v1/status`), whatever the status.
    /// Must run inside a tokio runtime (the connection is driven by a spawned
    /// task).
    pub async fn get(&self, uri: &str) -> Result<Response, ClientError> {
        match tokio::time::timeout(self.timeout, self.exchange(uri)).await {
            Ok(result) => result,
            Err(_) => Err(ClientError::Timeout {
                path: self.socket.clone(),
                uri: uri.to_string(),
                after: self.timeout,
            }),
        }
    }

    async fn exchange(&self, uri: &str) -> Result<Response, ClientError> {
        let stream = UnixStream::connect(&self.socket)
            .await
            .map_err(|e| connect_error(&self.socket, e))?;
        let protocol = |source| ClientError::Protocol {
            path: self.socket.clone(),
            uri: uri.to_string(),
            source,
        };
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(protocol)?;
        // The connection does the I/O; it ends when the sender is dropped.
        let driver = tokio::spawn(conn);
        let request = Request::get(uri)
            .header(hyper::header::HOST, "pinctld")
            .body(Empty::<Bytes>::new())
            .map_err(|source| ClientError::InvalidUri {
                uri: uri.to_string(),
                source,
            })?;
        let response = sender.send_request(request).await.map_err(protocol)?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(protocol)?
            .to_bytes();
        drop(sender);
        driver.abort();
        Ok(Response { status, body })
    }

    /// `GET uri` and parse a JSON document; any status but 2xx is an error
    /// carrying the body.
    pub async fn get_json<T: DeserializeOwned>(&self, uri: &str) -> Result<T, ClientError> {
        let response = self.get(uri).await?;
        if !response.status.is_success() {
            return Err(http_error(uri, &response));
        }
        decode(uri, &response.body)
    }

    /// `GET /v1/status`, with its schema checked first so a daemon of another
    /// version is named as such rather than as a parse error.
    pub async fn status(&self) -> Result<api::Status, ClientError> {
        const URI: &str = "/v1/status";
        let response = self.get(URI).await?;
        if !response.status.is_success() {
            return Err(http_error(URI, &response));
        }
        #[derive(serde::Deserialize)]
        struct Probe {
            schema: Option<u64>,
        }
        if let Ok(Probe {
            schema: Some(served),
        }) = serde_json::from_slice(&response.body)
            && served != u64::from(api::SCHEMA)
        {
            return Err(ClientError::Schema {
                uri: URI.to_string(),
                served,
            });
        }
        decode(URI, &response.body)
    }

    /// `GET /v1/events?since=SEQ`: the events after `since`, oldest first.
    pub async fn events(&self, since: u64) -> Result<Vec<api::Event>, ClientError> {
        self.get_json(&format!("/v1/events?since={since}")).await
    }

    /// `GET /v1/health`: HTTP 503 (failed) still carries the document.
    pub async fn health(&self) -> Result<api::Health, ClientError> {
        const URI: &str = "/v1/health";
        let response = self.get(URI).await?;
        if !(response.status.is_success() || response.status == StatusCode::SERVICE_UNAVAILABLE) {
            return Err(http_error(URI, &response));
        }
        decode(URI, &response.body)
    }
}

fn decode<T: DeserializeOwned>(uri: &str, body: &[u8]) -> Result<T, ClientError> {
    serde_json::from_slice(body).map_err(|source| ClientError::Decode {
        uri: uri.to_string(),
        source,
    })
}

fn http_error(uri: &str, response: &Response) -> ClientError {
    let text = String::from_utf8_lossy(&response.body);
    let body = text.trim();
    ClientError::Http {
        uri: uri.to_string(),
        status: response.status,
        body: if body.is_empty() {
            "(no explanation)".to_string()
        } else {
            body.to_string()
        },
    }
}

/// Names the connect failures an operator can act on.
fn connect_error(path: &Path, e: io::Error) -> ClientError {
    let path = path.to_path_buf();
    match e.raw_os_error() {
        Some(libc::ENOENT) => ClientError::NoSocket { path },
        Some(libc::ECONNREFUSED) => ClientError::Refused { path },
        Some(libc::EACCES) | Some(libc::EPERM) => ClientError::PermissionDenied { path },
        _ => ClientError::Connect { path, source: e },
    }
}
