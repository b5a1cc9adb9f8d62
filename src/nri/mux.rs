//! NRI's multiplexer (containerd/nri `pkg/net/multiplex`): two
//! connections over the one unix socket a plugin dials. Each frame is an
//! 8-byte header (connection id, payload length; big-endian `u32`s) and
//! its payload, a piece of that connection's byte stream. Connection 1
//! carries the plugin service (the runtime calls, pinctld answers),
//! connection 2 the runtime service (pinctld calls). A frame holds at most
//! a whole ttRPC message; a larger write is cut into several.

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt};

/// The plugin service's connection: the runtime is the client.
pub const PLUGIN_CONN: u32 = 1;
/// The runtime service's connection: the plugin is the client.
pub const RUNTIME_CONN: u32 = 2;
/// The header's length.
pub const HEADER: usize = 8;
/// The largest frame's payload: a whole ttRPC message.
pub const MAX_FRAME: usize = super::ttrpc::HEADER + super::ttrpc::MAX_PAYLOAD;

/// `data` for connection `conn` as frames, cut at [`MAX_FRAME`].
pub fn frames(conn: u32, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + HEADER);
    for piece in data.chunks(MAX_FRAME) {
        out.extend_from_slice(&conn.to_be_bytes());
        out.extend_from_slice(&(piece.len() as u32).to_be_bytes());
        out.extend_from_slice(piece);
    }
    out
}

/// Reads one frame: its connection and payload. `Ok(None)` at the end of
/// the stream between two frames; a length past [`MAX_FRAME`] is
/// `InvalidData` (nothing after it can be trusted).
pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> io::Result<Option<(u32, Vec<u8>)>> {
    let mut header = [0u8; HEADER];
    match r.read_exact(&mut header).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let conn = u32::from_be_bytes([header[0], header[1], header[2], header[3]]);
    let len = u32::from_be_bytes([header[4], header[5], header[6], header[7]]) as usize;
    if len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("an NRI frame of {len} bytes for connection {conn}, more than {MAX_FRAME}"),
        ));
    }
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload).await?;
    Ok(Some((conn, payload)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_read_back_and_a_long_write_is_cut() {
        let long = vec![7u8; MAX_FRAME + 3];
        let mut bytes = frames(PLUGIN_CONN, b"abc");
        bytes.extend(frames(RUNTIME_CONN, &long));
        let mut r = &bytes[..];
        assert_eq!(
            read_frame(&mut r).await.unwrap(),
            Some((PLUGIN_CONN, b"abc".to_vec()))
        );
        let (c, first) = read_frame(&mut r).await.unwrap().unwrap();
        assert_eq!((c, first.len()), (RUNTIME_CONN, MAX_FRAME));
        let (_, rest) = read_frame(&mut r).await.unwrap().unwrap();
        assert_eq!(rest.len(), 3);
        assert_eq!(read_frame(&mut r).await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_frame_past_the_limit_is_refused() {
        let mut bytes = 1u32.to_be_bytes().to_vec();
        bytes.extend(u32::MAX.to_be_bytes());
        let mut r = &bytes[..];
        let e = read_frame(&mut r).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    }
}
