//! ttRPC's wire format (containerd/ttrpc `PROTOCOL.md`): the message
//! framing and the request and response envelopes. Pure: bytes in,
//! messages out. The connection it runs over is [`super::mux`]'s.
//!
//! A message is a 10-byte header (payload length, stream id, both
//! big-endian `u32`; type; flags) and its payload. A client opens each
//! call on a new odd stream id with a request (type 1); the server
//! answers on the same id with a response (type 2). NRI uses unary calls
//! only, so data messages (type 3) and stream flags are refused.
//!
//! The `ttrpc` crate was not taken: it brings rust-protobuf, its code
//! generator, an older `nix` and vsock, for a framing of a few lines.

use std::collections::VecDeque;

/// The header's length.
pub const HEADER: usize = 10;
/// The largest payload ttRPC allows (4 MiB).
pub const MAX_PAYLOAD: usize = 4 << 20;

/// A request.
pub const REQUEST: u8 = 1;
/// A response.
pub const RESPONSE: u8 = 2;

/// The status codes used here (gRPC's numbers).
pub mod code {
    pub const OK: i32 = 0;
    pub const INVALID_ARGUMENT: i32 = 3;
    pub const FAILED_PRECONDITION: i32 = 9;
    /// A method the server does not have: NRI falls back to
    /// `StateChange` on it.
    pub const UNIMPLEMENTED: i32 = 12;
    pub const INTERNAL: i32 = 13;
}

/// A framing error: the connection cannot go on.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WireError {
    #[error("a ttRPC message of {0} bytes, more than the {MAX_PAYLOAD} allowed")]
    TooLarge(usize),
    #[error("a ttRPC message of type {0}: only unary requests and responses are spoken")]
    Kind(u8),
    #[error("a ttRPC {what} that does not decode: {why}")]
    Decode { what: &'static str, why: String },
}

/// One message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub stream: u32,
    pub kind: u8,
    pub payload: Vec<u8>,
}

impl Message {
    /// The message's bytes: header, then payload. A payload over
    /// [`MAX_PAYLOAD`] is the caller's error ([`encode_request`] and
    /// [`encode_response`] bound theirs).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER + self.payload.len());
        out.extend_from_slice(&(self.payload.len() as u32).to_be_bytes());
        out.extend_from_slice(&self.stream.to_be_bytes());
        out.push(self.kind);
        out.push(0);
        out.extend_from_slice(&self.payload);
        out
    }
}

/// Reassembles messages from a connection's bytes, however they were cut.
#[derive(Debug, Default)]
pub struct Decoder {
    buf: VecDeque<u8>,
}

impl Decoder {
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend(bytes);
    }

    /// The next whole message, if its bytes are all here.
    pub fn next_message(&mut self) -> Result<Option<Message>, WireError> {
        if self.buf.len() < HEADER {
            return Ok(None);
        }
        let h = self.buf.make_contiguous();
        let len = u32::from_be_bytes([h[0], h[1], h[2], h[3]]) as usize;
        let stream = u32::from_be_bytes([h[4], h[5], h[6], h[7]]);
        let kind = h[8];
        if len > MAX_PAYLOAD {
            return Err(WireError::TooLarge(len));
        }
        if !matches!(kind, REQUEST | RESPONSE) {
            return Err(WireError::Kind(kind));
        }
        if self.buf.len() < HEADER + len {
            return Ok(None);
        }
        self.buf.drain(..HEADER);
        let payload = self.buf.drain(..len).collect();
        Ok(Some(Message {
            stream,
            kind,
            payload,
        }))
    }
}

/// ttRPC's `Request`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Request {
    #[prost(string, tag = "1")]
    pub service: String,
    #[prost(string, tag = "2")]
    pub method: String,
    #[prost(bytes = "vec", tag = "3")]
    pub payload: Vec<u8>,
    #[prost(int64, tag = "4")]
    pub timeout_nano: i64,
}

/// ttRPC's `Response`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Response {
    #[prost(message, optional, tag = "1")]
    pub status: Option<Status>,
    #[prost(bytes = "vec", tag = "2")]
    pub payload: Vec<u8>,
}

/// gRPC's `Status`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Status {
    #[prost(int32, tag = "1")]
    pub code: i32,
    #[prost(string, tag = "2")]
    pub message: String,
}

fn bounded(stream: u32, kind: u8, payload: Vec<u8>) -> Result<Message, WireError> {
    if payload.len() > MAX_PAYLOAD {
        return Err(WireError::TooLarge(payload.len()));
    }
    Ok(Message {
        stream,
        kind,
        payload,
    })
}

/// A request message calling `service`.`method` with `body`.
pub fn encode_request(
    stream: u32,
    service: &str,
    method: &str,
    body: &impl prost::Message,
    timeout_nano: i64,
) -> Result<Message, WireError> {
    let request = Request {
        service: service.to_string(),
        method: method.to_string(),
        payload: body.encode_to_vec(),
        timeout_nano,
    };
    bounded(stream, REQUEST, prost::Message::encode_to_vec(&request))
}

/// A response message: `Ok` a body, `Err` a status code and message.
pub fn encode_response(
    stream: u32,
    answer: Result<Vec<u8>, (i32, String)>,
) -> Result<Message, WireError> {
    let response = match answer {
        Ok(payload) => Response {
            status: Some(Status {
                code: code::OK,
                message: String::new(),
            }),
            payload,
        },
        Err((code, message)) => Response {
            status: Some(Status { code, message }),
            payload: Vec::new(),
        },
    };
    bounded(stream, RESPONSE, prost::Message::encode_to_vec(&response))
}

/// Decodes `bytes` as `T`, naming `what` when they do not.
pub fn decode<T: prost::Message + Default>(
    what: &'static str,
    bytes: &[u8],
) -> Result<T, WireError> {
    T::decode(bytes).map_err(|e| WireError::Decode {
        what,
        why: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_cut_anywhere_is_reassembled() {
        let m = encode_request(
            3,
            "s",
            "M",
            &Status {
                code: 7,
                message: "x".into(),
            },
            0,
        )
        .unwrap();
        let bytes = [m.to_bytes(), m.to_bytes()].concat();
        for cut in 0..bytes.len() {
            let mut d = Decoder::default();
            d.push(&bytes[..cut]);
            let mut got = Vec::new();
            while let Some(x) = d.next_message().unwrap() {
                got.push(x);
            }
            d.push(&bytes[cut..]);
            while let Some(x) = d.next_message().unwrap() {
                got.push(x);
            }
            assert_eq!(got, vec![m.clone(), m.clone()], "cut at {cut}");
        }
    }

    #[test]
    fn a_request_has_the_protocols_bytes() {
        // PROTOCOL.md: length, stream id (big-endian), type 1, flags 0;
        // then Request { service = 1: "s", method = 2: "M" } (an empty
        // payload and a zero timeout are not written, as in proto3).
        let m = encode_request(3, "s", "M", &Status::default(), 0).unwrap();
        assert_eq!(
            m.to_bytes(),
            [0, 0, 0, 6, 0, 0, 0, 3, 1, 0, 0x0a, 1, b's', 0x12, 1, b'M']
        );
    }

    #[test]
    fn a_length_past_the_limit_or_a_stream_message_is_refused() {
        let mut d = Decoder::default();
        d.push(&[0x01, 0, 0, 0, 0, 0, 0, 1, REQUEST, 0]);
        assert_eq!(d.next_message(), Err(WireError::TooLarge(1 << 24)));
        let mut d = Decoder::default();
        d.push(&[0, 0, 0, 0, 0, 0, 0, 1, 3, 1]);
        assert_eq!(d.next_message(), Err(WireError::Kind(3)));
    }

    #[test]
    fn an_error_response_carries_its_code() {
        let m = encode_response(5, Err((code::UNIMPLEMENTED, "no".into()))).unwrap();
        let r: Response = decode("response", &m.payload).unwrap();
        assert_eq!(r.status.unwrap().code, code::UNIMPLEMENTED);
    }
}
