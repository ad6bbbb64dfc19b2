//! Connect server streams as envd sends them on `process.Process/Start`, `Connect` and
//! `filesystem.Filesystem/WatchDir` (PROTOCOL.md §4.2): the envelope framing, decoded by an
//! explicit state machine, and [`ConnectStream`], which reads a response body through it.
//!
//! An envelope is `[flags: u8][length: u32 big-endian][payload: length bytes]`. Flag `0x01` marks a
//! compressed payload (never asked for by this crate, so it is an error), flag `0x02` marks the
//! end-of-stream envelope whose payload is the end-stream JSON: `{}` on success, or
//! `{"error":{"code":"…","message":"…"}}`. The response body is one byte stream whose chunk
//! boundaries have nothing to do with envelope boundaries, so [`FrameDecoder`] is an explicit
//! state machine fed with arbitrary slices.

use crate::error::{Failure, bad_response, map_error, transport};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use futures::StreamExt;
use sandbox_sdk_core::redact::scrub;
use sandbox_sdk_core::{ByteStream, Result};
use serde::de::DeserializeOwned;
use std::fmt;

/// Flag bit: this is the end-of-stream envelope.
pub(crate) const FLAG_END_STREAM: u8 = 0x02;
/// Length of an envelope header.
pub(crate) const HEADER_LEN: usize = 5;
/// Largest payload accepted by default (envd sends at most 32 KiB of output per event, base64-encoded).
pub(crate) const DEFAULT_MAX_FRAME: usize = 16 * 1024 * 1024;

/// Wraps one message in an envelope (flags 0).
pub(crate) fn encode_envelope(payload: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(HEADER_LEN + payload.len());
    out.put_u8(0);
    // Payloads we send are small JSON requests; saturate rather than wrap for absurd sizes.
    out.put_u32(u32::try_from(payload.len()).unwrap_or(u32::MAX));
    out.put_slice(payload);
    out.freeze()
}

/// One decoded envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Frame {
    /// A message envelope's payload.
    Message(Bytes),
    /// The end-of-stream envelope's payload (end-stream JSON).
    End(Bytes),
}

/// Why a byte stream is not a valid Connect envelope stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FrameError {
    /// A flag bit other than end-of-stream was set (compression was never negotiated).
    UnexpectedFlags(u8),
    /// The declared payload length exceeds the limit.
    TooLarge {
        /// Declared length.
        len: usize,
        /// Limit.
        max: usize,
    },
    /// Bytes arrived after the end-of-stream envelope.
    TrailingData,
    /// The body ended in the middle of an envelope.
    Truncated {
        /// Bytes of the unfinished envelope that were received.
        have: usize,
    },
    /// The body ended without an end-of-stream envelope.
    MissingEndStream,
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::UnexpectedFlags(flags) => {
                write!(f, "envelope has unexpected flags 0x{flags:02x}")
            }
            FrameError::TooLarge { len, max } => {
                write!(f, "envelope of {len} bytes exceeds the {max}-byte limit")
            }
            FrameError::TrailingData => f.write_str("data after the end-of-stream envelope"),
            FrameError::Truncated { have } => {
                write!(
                    f,
                    "stream ended inside an envelope ({have} bytes of it received)"
                )
            }
            FrameError::MissingEndStream => {
                f.write_str("stream ended without an end-of-stream envelope")
            }
        }
    }
}

impl std::error::Error for FrameError {}

/// Where the decoder is inside the byte stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Waiting for the 5-byte header of the next envelope.
    Header,
    /// Header read; waiting for `len` payload bytes of an envelope with `flags`.
    Payload { flags: u8, len: usize },
    /// The end-of-stream envelope was returned; nothing more may follow.
    Done,
    /// An error was returned; the decoder stays failed.
    Failed,
}

/// Incremental decoder of a Connect server-stream body.
///
/// Feed it any slices with [`FrameDecoder::push`], take envelopes with [`FrameDecoder::next_frame`]
/// until it returns `Ok(None)`, and call [`FrameDecoder::finish`] when the body ends.
#[derive(Debug)]
pub(crate) struct FrameDecoder {
    state: State,
    buf: BytesMut,
    max_frame: usize,
}

impl Default for FrameDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl FrameDecoder {
    /// A decoder with the default frame size limit.
    pub fn new() -> Self {
        Self::with_max_frame(DEFAULT_MAX_FRAME)
    }

    /// A decoder refusing payloads longer than `max_frame` bytes.
    pub fn with_max_frame(max_frame: usize) -> Self {
        FrameDecoder {
            state: State::Header,
            buf: BytesMut::new(),
            max_frame,
        }
    }

    /// Appends received bytes.
    pub fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// Whether the end-of-stream envelope has been returned.
    #[cfg(test)]
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// The next complete envelope, `Ok(None)` when more bytes are needed (or the stream is done).
    pub fn next_frame(&mut self) -> Result<Option<Frame>, FrameError> {
        loop {
            match self.state {
                State::Failed => return Err(FrameError::TrailingData),
                State::Done => {
                    if self.buf.is_empty() {
                        return Ok(None);
                    }
                    return self.fail(FrameError::TrailingData);
                }
                State::Header => {
                    if self.buf.len() < HEADER_LEN {
                        return Ok(None);
                    }
                    let flags = self.buf[0];
                    if flags & !FLAG_END_STREAM != 0 {
                        return self.fail(FrameError::UnexpectedFlags(flags));
                    }
                    let len =
                        u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]])
                            as usize;
                    if len > self.max_frame {
                        return self.fail(FrameError::TooLarge {
                            len,
                            max: self.max_frame,
                        });
                    }
                    self.buf.advance(HEADER_LEN);
                    self.state = State::Payload { flags, len };
                }
                State::Payload { flags, len } => {
                    if self.buf.len() < len {
                        return Ok(None);
                    }
                    let payload = self.buf.split_to(len).freeze();
                    if flags & FLAG_END_STREAM != 0 {
                        self.state = State::Done;
                        return Ok(Some(Frame::End(payload)));
                    }
                    self.state = State::Header;
                    return Ok(Some(Frame::Message(payload)));
                }
            }
        }
    }

    /// Checks that the body ended at a clean point: after the end-of-stream envelope.
    pub fn finish(&self) -> Result<(), FrameError> {
        match self.state {
            State::Done if self.buf.is_empty() => Ok(()),
            State::Done | State::Failed => Err(FrameError::TrailingData),
            State::Header if self.buf.is_empty() => Err(FrameError::MissingEndStream),
            State::Header => Err(FrameError::Truncated {
                have: self.buf.len(),
            }),
            State::Payload { .. } => Err(FrameError::Truncated {
                have: HEADER_LEN + self.buf.len(),
            }),
        }
    }

    fn fail<T>(&mut self, error: FrameError) -> Result<T, FrameError> {
        self.state = State::Failed;
        self.buf.clear();
        Err(error)
    }
}

/// A Connect server stream being read: message payloads until the end-stream envelope.
pub(crate) struct ConnectStream {
    body: ByteStream,
    decoder: FrameDecoder,
    operation: String,
    sandbox_id: String,
    finished: bool,
    /// Credential values scrubbed from an end-stream error before it is quoted.
    secrets: Vec<String>,
}

impl fmt::Debug for ConnectStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectStream")
            .field("operation", &self.operation)
            .field("finished", &self.finished)
            .finish()
    }
}

impl ConnectStream {
    /// Reads envelopes from `body`.
    pub fn new(body: ByteStream, operation: &str, sandbox_id: &str) -> Self {
        ConnectStream {
            body,
            decoder: FrameDecoder::new(),
            operation: operation.to_owned(),
            sandbox_id: sandbox_id.to_owned(),
            finished: false,
            secrets: Vec::new(),
        }
    }

    /// Scrubs these credential values (the envd access token) from end-stream errors, so a
    /// daemon that quotes them cannot get them into an error message.
    pub fn with_secrets(mut self, secrets: Vec<String>) -> Self {
        self.secrets = secrets;
        self
    }

    /// The next message payload; `None` after a clean end-stream, an error for an end-stream
    /// error, a malformed stream or a body cut short.
    pub async fn next_message(&mut self) -> Option<Result<Bytes>> {
        loop {
            if self.finished {
                return None;
            }
            match self.decoder.next_frame() {
                Err(e) => {
                    self.finished = true;
                    return Some(Err(transport(
                        &self.operation,
                        Some(&self.sandbox_id),
                        format!("malformed Connect stream: {e}"),
                    )));
                }
                Ok(Some(Frame::Message(payload))) => return Some(Ok(payload)),
                Ok(Some(Frame::End(payload))) => {
                    self.finished = true;
                    return self.end_stream(&payload).err().map(Err);
                }
                Ok(None) => {}
            }
            match self.body.next().await {
                Some(Ok(chunk)) => self.decoder.push(&chunk),
                Some(Err(e)) => {
                    self.finished = true;
                    return Some(Err(e));
                }
                None => {
                    self.finished = true;
                    return match self.decoder.finish() {
                        Ok(()) => None,
                        Err(e) => Some(Err(transport(
                            &self.operation,
                            Some(&self.sandbox_id),
                            format!("Connect stream cut short: {e}"),
                        ))),
                    };
                }
            }
        }
    }

    /// The next message decoded as `T`.
    pub async fn next_json<T: DeserializeOwned>(&mut self) -> Option<Result<T>> {
        let payload = match self.next_message().await? {
            Ok(p) => p,
            Err(e) => return Some(Err(e)),
        };
        Some(serde_json::from_slice(&payload).map_err(|_| {
            self.finished = true;
            bad_response(
                &self.operation,
                Some(&self.sandbox_id),
                "a stream message is not the expected JSON",
            )
        }))
    }

    /// Checks the end-stream JSON: `{}` (or trailers) is success, `{"error":…}` an error.
    fn end_stream(&self, payload: &[u8]) -> Result<()> {
        let value: serde_json::Value = serde_json::from_slice(payload).map_err(|_| {
            bad_response(
                &self.operation,
                Some(&self.sandbox_id),
                "end-of-stream message is not JSON",
            )
        })?;
        if value.get("error").is_some() {
            return Err(map_error(Failure {
                status: 200,
                body: &scrub(payload, &self.secrets),
                retry_after: None,
                should_retry: None,
                operation: &self.operation,
                sandbox_id: Some(&self.sandbox_id),
                request_id: None,
            }));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use sandbox_sdk_core::ErrorKind;

    /// PROTOCOL.md §9 Example A, byte for byte.
    const EXAMPLE_A: &str = "000000001f7b226576656e74223a7b227374617274223a7b22706964223a3431327d7d7d00000000247b226576656e74223a7b2264617461223a7b227374646f7574223a2261476b4b227d7d7d000000003a7b226576656e74223a7b22656e64223a7b22657869746564223a747275652c22737461747573223a2265786974207374617475732030227d7d7d02000000027b7d";

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn decode_all(chunks: &[&[u8]]) -> Result<Vec<Frame>, FrameError> {
        let mut d = FrameDecoder::new();
        let mut out = Vec::new();
        for chunk in chunks {
            d.push(chunk);
            while let Some(f) = d.next_frame()? {
                out.push(f);
            }
        }
        d.finish()?;
        Ok(out)
    }

    fn stream_of(messages: &[Vec<u8>], end: &[u8]) -> Vec<u8> {
        let mut body = Vec::new();
        for m in messages {
            body.extend_from_slice(&encode_envelope(m));
        }
        body.push(FLAG_END_STREAM);
        body.extend_from_slice(&(end.len() as u32).to_be_bytes());
        body.extend_from_slice(end);
        body
    }

    #[test]
    fn example_a_decodes_into_three_messages_and_end() {
        let frames = decode_all(&[&hex(EXAMPLE_A)]).unwrap();
        assert_eq!(frames.len(), 4);
        assert_eq!(
            frames[0],
            Frame::Message(Bytes::from_static(br#"{"event":{"start":{"pid":412}}}"#))
        );
        assert_eq!(frames[3], Frame::End(Bytes::from_static(b"{}")));
    }

    #[test]
    fn example_a_split_at_every_boundary_gives_the_same_frames() {
        let body = hex(EXAMPLE_A);
        let whole = decode_all(&[&body]).unwrap();
        for i in 0..=body.len() {
            for j in i..=body.len() {
                let split = decode_all(&[&body[..i], &body[i..j], &body[j..]]).unwrap();
                assert_eq!(split, whole, "split at {i},{j}");
            }
        }
    }

    #[test]
    fn zero_length_message_is_a_frame() {
        let frames = decode_all(&[b"\x00\x00\x00\x00\x00\x02\x00\x00\x00\x00"]).unwrap();
        assert_eq!(
            frames,
            vec![Frame::Message(Bytes::new()), Frame::End(Bytes::new())]
        );
    }

    #[test]
    fn compressed_flag_is_refused() {
        let err = decode_all(&[b"\x01\x00\x00\x00\x02{}"]).unwrap_err();
        assert_eq!(err, FrameError::UnexpectedFlags(1));
    }

    #[test]
    fn oversized_frame_is_refused_before_buffering() {
        let mut d = FrameDecoder::with_max_frame(4);
        d.push(b"\x00\x00\x00\x00\x05");
        assert_eq!(
            d.next_frame().unwrap_err(),
            FrameError::TooLarge { len: 5, max: 4 }
        );
        // Stays failed.
        assert!(d.next_frame().is_err());
    }

    #[test]
    fn truncated_and_unterminated_streams_are_errors() {
        assert_eq!(
            decode_all(&[b"\x00\x00\x00"]).unwrap_err(),
            FrameError::Truncated { have: 3 }
        );
        assert_eq!(
            decode_all(&[b"\x00\x00\x00\x00\x04ab"]).unwrap_err(),
            FrameError::Truncated { have: 7 }
        );
        assert_eq!(
            decode_all(&[b"\x00\x00\x00\x00\x02{}"]).unwrap_err(),
            FrameError::MissingEndStream
        );
        assert_eq!(decode_all(&[]).unwrap_err(), FrameError::MissingEndStream);
    }

    #[test]
    fn bytes_after_end_stream_are_an_error() {
        let err = decode_all(&[b"\x02\x00\x00\x00\x02{}\x00"]).unwrap_err();
        assert_eq!(err, FrameError::TrailingData);
    }

    #[test]
    fn encode_envelope_writes_big_endian_length() {
        assert_eq!(&encode_envelope(b"{}")[..], b"\x00\x00\x00\x00\x02{}");
        let long = vec![b'x'; 0x0102];
        assert_eq!(&encode_envelope(&long)[..5], b"\x00\x00\x00\x01\x02");
    }

    proptest! {
        #[test]
        fn any_valid_stream_split_anywhere_decodes_identically(
            messages in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..6),
            end in proptest::collection::vec(any::<u8>(), 0..32),
            cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..8),
        ) {
            let body = stream_of(&messages, &end);
            let mut points: Vec<usize> = cuts.iter().map(|c| c.index(body.len() + 1)).collect();
            points.sort_unstable();
            let mut chunks = Vec::new();
            let mut last = 0;
            for p in points {
                chunks.push(&body[last..p]);
                last = p;
            }
            chunks.push(&body[last..]);
            let frames = decode_all(&chunks).unwrap();
            let mut expected: Vec<Frame> = messages.iter().map(|m| Frame::Message(Bytes::from(m.clone()))).collect();
            expected.push(Frame::End(Bytes::from(end.clone())));
            prop_assert_eq!(frames, expected);
        }

        #[test]
        fn every_single_cut_of_a_valid_stream_decodes_identically(
            messages in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..24), 1..4),
        ) {
            let body = stream_of(&messages, b"{}");
            let whole = decode_all(&[&body]).unwrap();
            for i in 0..=body.len() {
                prop_assert_eq!(&decode_all(&[&body[..i], &body[i..]]).unwrap(), &whole);
            }
            // One byte at a time.
            let bytes: Vec<&[u8]> = body.chunks(1).collect();
            prop_assert_eq!(&decode_all(&bytes).unwrap(), &whole);
        }

        #[test]
        fn garbage_gives_frames_or_an_error_never_a_panic(
            garbage in proptest::collection::vec(any::<u8>(), 0..256),
            cut in any::<prop::sample::Index>(),
        ) {
            let at = cut.index(garbage.len() + 1);
            let mut d = FrameDecoder::with_max_frame(1024);
            let mut result = Ok(());
            for chunk in [&garbage[..at], &garbage[at..]] {
                d.push(chunk);
                loop {
                    match d.next_frame() {
                        Ok(Some(_)) => {}
                        Ok(None) => break,
                        Err(e) => { result = Err(e); break; }
                    }
                }
                if result.is_err() { break; }
            }
            let finished = result.and_then(|()| d.finish());
            // Either it happened to be a valid stream, or it is rejected.
            if finished.is_ok() {
                prop_assert!(d.is_done());
            }
        }

        #[test]
        fn truncating_a_valid_stream_is_always_an_error(
            messages in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..24), 0..4),
            cut in any::<prop::sample::Index>(),
        ) {
            let body = stream_of(&messages, b"{}");
            let at = cut.index(body.len());
            prop_assert!(decode_all(&[&body[..at]]).is_err());
        }
    }

    fn connect_stream_of(chunks: Vec<&'static [u8]>) -> ConnectStream {
        let body =
            futures::stream::iter(chunks.into_iter().map(|c| Ok(Bytes::from_static(c)))).boxed();
        ConnectStream::new(body, "exec", "isb")
    }

    /// The decoder fed a stream in two pieces, the first ending inside a header.
    #[test]
    fn a_header_split_across_pushes_waits_for_the_rest() {
        let mut decoder = FrameDecoder::new();
        decoder.push(b"\x00\x00\x00\x00\x02{}\x02\x00");
        assert_eq!(
            decoder.next_frame().unwrap(),
            Some(Frame::Message("{}".into()))
        );
        assert_eq!(decoder.next_frame().unwrap(), None); // header incomplete
        decoder.push(b"\x00\x00\x02{}");
        assert_eq!(decoder.next_frame().unwrap(), Some(Frame::End("{}".into())));
        assert!(decoder.finish().is_ok());
    }

    #[tokio::test]
    async fn end_stream_error_before_any_message() {
        let mut s = connect_stream_of(vec![
            b"\x02\x00\x00\x00\x4c{\"error\":{\"code\":\"invalid_argument\",\"message\":\"cwd '/nope' does not exist\"}}",
        ]);
        let e = s.next_message().await.unwrap().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Validation);
        assert!(s.next_message().await.is_none());
    }

    #[tokio::test]
    async fn messages_then_clean_end() {
        let mut s = connect_stream_of(vec![b"\x00\x00\x00\x00\x02{}\x02\x00", b"\x00\x00\x02{}"]);
        assert_eq!(&s.next_message().await.unwrap().unwrap()[..], b"{}");
        assert!(s.next_message().await.is_none());
    }

    #[tokio::test]
    async fn body_cut_short_is_transport() {
        let mut s = connect_stream_of(vec![b"\x00\x00\x00\x00\x02{}"]);
        assert!(s.next_message().await.unwrap().is_ok());
        let e = s.next_message().await.unwrap().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Transport);
    }

    #[tokio::test]
    async fn garbage_is_an_error() {
        let mut s = connect_stream_of(vec![b"\x80garbage"]);
        let e = s.next_message().await.unwrap().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Transport);
        assert!(s.next_message().await.is_none());
    }

    /// Issue 33 item 6: an end-stream error quoting the envd token with JSON escapes passed
    /// the byte-level scrub and came back whole once the JSON was decoded.
    #[tokio::test]
    async fn an_end_stream_error_quoting_the_token_escaped_never_shows_it() {
        let token = "envd-token/0123456789";
        let end = format!(
            r#"{{"error":{{"code":"unauthenticated","message":"bad {} or {}"}}}}"#,
            token.replace('/', "\\/"),
            token.replace('e', "\\u0065")
        );
        let body = futures::stream::iter([Ok(Bytes::from(stream_of(&[], end.as_bytes())))]).boxed();
        let mut s = ConnectStream::new(body, "exec", "isb").with_secrets(vec![token.to_owned()]);
        let e = s.next_message().await.unwrap().unwrap_err();
        let text = format!("{e} {e:?}");
        assert!(!text.contains(token), "{text}");
        assert!(text.contains("bad <redacted> or <redacted>"), "{text}");
    }
}
