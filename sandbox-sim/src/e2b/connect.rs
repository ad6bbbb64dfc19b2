//! The Connect protocol as envd speaks it (PROTOCOL.md §2.2): unary JSON calls with
//! `{"code","message"}` errors, and server streams of enveloped JSON messages ending with an
//! end-stream envelope, always HTTP 200.

use super::super::{SimRequest, SimResponse};
use bytes::{BufMut, Bytes, BytesMut};
use futures::StreamExt;
use serde_json::{Value, json};
use std::io::{Read, Write};
use tokio::sync::mpsc;

/// A Connect error: a code name and a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RpcError {
    pub code: &'static str,
    pub message: String,
}

impl RpcError {
    pub fn new(code: &'static str, message: impl Into<String>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
        }
    }

    pub fn invalid(message: impl Into<String>) -> RpcError {
        RpcError::new("invalid_argument", message)
    }

    pub fn not_found(message: impl Into<String>) -> RpcError {
        RpcError::new("not_found", message)
    }

    /// The HTTP status of this code on a unary call (connect-go's table).
    pub fn status(&self) -> u16 {
        match self.code {
            "canceled" => 499,
            "invalid_argument" | "failed_precondition" | "out_of_range" => 400,
            "deadline_exceeded" => 504,
            "not_found" => 404,
            "already_exists" | "aborted" => 409,
            "permission_denied" => 403,
            "unauthenticated" => 401,
            "resource_exhausted" => 429,
            "unimplemented" => 501,
            "unavailable" => 503,
            _ => 500,
        }
    }

    fn body(&self) -> Value {
        json!({ "code": self.code, "message": self.message })
    }
}

/// Whether `value` (a header value such as `gzip, deflate`) offers gzip.
pub(crate) fn offers_gzip(value: Option<&str>) -> bool {
    value.is_some_and(|v| {
        v.split(',')
            .any(|e| e.split(';').next().unwrap_or("").trim() == "gzip")
    })
}

pub(crate) fn gzip(data: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let _ = encoder.write_all(data);
    encoder.finish().unwrap_or_default()
}

pub(crate) fn gunzip(data: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(data).read_to_end(&mut out)?;
    Ok(out)
}

/// A successful unary answer; gzip when the request's `Accept-Encoding` allows it.
pub(crate) fn unary_ok(request: &SimRequest, message: &Value) -> SimResponse {
    let body = serde_json::to_vec(message).unwrap_or_default();
    if offers_gzip(request.header("accept-encoding")) {
        SimResponse::bytes(200, Some("application/json"), gzip(&body).into())
            .header("content-encoding", "gzip")
    } else {
        SimResponse::bytes(200, Some("application/json"), body.into())
    }
}

/// A unary error answer.
pub(crate) fn unary_err(error: &RpcError) -> SimResponse {
    let body = serde_json::to_vec(&error.body()).unwrap_or_default();
    SimResponse::bytes(error.status(), Some("application/json"), body.into())
}

/// The one request message of a unary call (JSON body) or of a server-streaming call (one
/// envelope), by the request's content type.
pub(crate) fn request_message(request: &SimRequest) -> Result<Value, RpcError> {
    let streaming = request
        .header("content-type")
        .is_some_and(|t| t.starts_with("application/connect+json"));
    let bytes = if streaming {
        let mut messages = envelopes(request)?;
        if messages.len() != 1 {
            return Err(RpcError::new(
                "unknown",
                format!("expected one request message, got {}", messages.len()),
            ));
        }
        messages.remove(0)
    } else {
        let body = if request.header("content-encoding") == Some("gzip") {
            gunzip(&request.body).map_err(|e| RpcError::invalid(format!("bad gzip: {e}")))?
        } else {
            request.body.to_vec()
        };
        if body.is_empty() {
            return Ok(json!({}));
        }
        body
    };
    serde_json::from_slice(&bytes).map_err(|e| RpcError::invalid(format!("unmarshal message: {e}")))
}

/// Every message envelope of a streaming request body (an end-stream envelope ends it).
pub(crate) fn envelopes(request: &SimRequest) -> Result<Vec<Vec<u8>>, RpcError> {
    let gzip_messages = request.header("connect-content-encoding") == Some("gzip");
    let mut body = &request.body[..];
    let mut out = Vec::new();
    while !body.is_empty() {
        if body.len() < 5 {
            return Err(RpcError::invalid("protocol error: incomplete envelope"));
        }
        let flags = body[0];
        let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
        if body.len() < 5 + len {
            return Err(RpcError::invalid("protocol error: incomplete envelope"));
        }
        let payload = &body[5..5 + len];
        body = &body[5 + len..];
        if flags & 0x02 != 0 {
            break;
        }
        if flags & 0x01 != 0 {
            if !gzip_messages {
                return Err(RpcError::invalid(
                    "protocol error: compressed message without an encoding",
                ));
            }
            out.push(gunzip(payload).map_err(|e| RpcError::invalid(format!("bad gzip: {e}")))?);
        } else {
            out.push(payload.to_vec());
        }
    }
    Ok(out)
}

/// One frame: `[flags][u32 length][payload]`.
pub(crate) fn envelope(flags: u8, payload: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(5 + payload.len());
    out.put_u8(flags);
    out.put_u32(payload.len() as u32);
    out.put_slice(payload);
    out.freeze()
}

/// The sending side of a server stream: messages, then exactly one end.
pub(crate) struct StreamTx {
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
    gzip: bool,
}

impl StreamTx {
    /// Sends one message; false when the client has gone.
    pub async fn send(&self, message: &Value) -> bool {
        let payload = serde_json::to_vec(message).unwrap_or_default();
        let frame = if self.gzip {
            envelope(0x01, &gzip(&payload))
        } else {
            envelope(0x00, &payload)
        };
        self.tx.send(Ok(frame)).await.is_ok()
    }

    /// Ends the stream: `{}` or `{"error":…}`.
    pub async fn end(self, error: Option<&RpcError>) {
        let end = match error {
            Some(e) => json!({ "error": e.body() }),
            None => json!({}),
        };
        let payload = serde_json::to_vec(&end).unwrap_or_default();
        let _ = self.tx.send(Ok(envelope(0x02, &payload))).await;
    }

    /// Waits until the client has gone.
    pub async fn closed(&self) {
        self.tx.closed().await
    }
}

/// A streaming answer and the sender that feeds it. Messages are gzipped when the client
/// offered `Connect-Accept-Encoding: gzip`.
pub(crate) fn stream(request: &SimRequest) -> (SimResponse, StreamTx) {
    let (tx, rx) = mpsc::channel(64);
    let gzip = offers_gzip(request.header("connect-accept-encoding"));
    let body = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    })
    .boxed();
    let mut response = SimResponse::stream(200, "application/connect+json", body)
        .header("connect-accept-encoding", "gzip");
    if gzip {
        response = response.header("connect-content-encoding", "gzip");
    }
    (response, StreamTx { tx, gzip })
}

/// A stream that holds only its end (an error before the first message).
pub(crate) fn stream_error(request: &SimRequest, error: &RpcError) -> SimResponse {
    let (response, tx) = stream(request);
    let error = error.clone();
    tokio::spawn(async move { tx.end(Some(&error)).await });
    response
}

/// `Keepalive-Ping-Interval` (seconds; 90 when missing or not a number).
pub(crate) fn keepalive_interval(request: &SimRequest) -> std::time::Duration {
    let secs = request
        .header("keepalive-ping-interval")
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|s| *s > 0)
        .unwrap_or(90);
    std::time::Duration::from_secs(secs)
}

/// `Connect-Timeout-Ms`, when set and positive.
pub(crate) fn deadline(request: &SimRequest) -> Option<std::time::Duration> {
    request
        .header("connect-timeout-ms")
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .map(std::time::Duration::from_millis)
}

/// Standard base64 with padding (protojson `bytes`).
pub(crate) fn b64(data: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// Decodes protojson `bytes` (standard or URL-safe, padded or not).
pub(crate) fn unb64(text: &str) -> Result<Vec<u8>, RpcError> {
    use base64::Engine;
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
    [STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD]
        .iter()
        .find_map(|e| e.decode(text).ok())
        .ok_or_else(|| RpcError::invalid("invalid base64 in bytes field"))
}

/// The user a request runs as (`Authorization: Basic base64("<user>:")`): `user` when none.
pub(crate) fn user_of(request: &SimRequest) -> Result<String, RpcError> {
    let Some(value) = request.header("authorization") else {
        return Ok("user".into());
    };
    let user = value
        .strip_prefix("Basic ")
        .and_then(|b| unb64(b.trim()).ok())
        .map(|raw| String::from_utf8_lossy(&raw).into_owned())
        .map(|pair| pair.split(':').next().unwrap_or("").to_owned())
        .unwrap_or_default();
    check_user(&user).map(|()| user)
}

/// Whether envd knows `user` (`user` and `root`).
pub(crate) fn check_user(user: &str) -> Result<(), RpcError> {
    if user == "user" || user == "root" {
        Ok(())
    } else {
        Err(RpcError::new(
            "unauthenticated",
            format!("invalid username: '{user}'"),
        ))
    }
}
