//! The exec WebSocket (PROTOCOL.md §5): [`open`] spawns a command (`/exec?cmd=…`) or attaches
//! to a session (`/exec/{id}`, never the query form, trap 7); [`ExecSocket`] reads its frames
//! and writes stdin.
//!
//! Frames (§5.2): binary messages whose first byte is a stream id (1 stdout, 2 stderr, 3 exit
//! with one code byte; 0 stdin and 4 stdin EOF from us); JSON text messages (`session_info`,
//! `exit`, port notifications, §5.4). The exit may come in either form (§5.2). In TTY mode
//! (§5.3) binary messages are raw terminal bytes both ways, the exit is the `exit` JSON
//! message, and we send `resize` messages. The server pings
//! every 15 s (§18.10); silence for the idle bound is a dead socket. After the exit the server
//! lingers about 5 s before closing (trap 5), so the reader stops at the exit.

use crate::api::Api;
use crate::config::{MAX_MESSAGE, PROVIDER};
use crate::error::map_error;
use crate::wire::{SessionInfo, TextFrame};
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use sandbox_sdk_core::http::{ErrorResponse, Headers, encode_path_segment};
use sandbox_sdk_core::redact::scrub;
use sandbox_sdk_core::{Error, ErrorKind, Result};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Stream ids of binary frames (§5.2).
const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const EXIT: u8 = 3;
const STDIN_EOF: u8 = 4;

/// What the exec socket gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Frame {
    Stdout(Bytes),
    Stderr(Bytes),
    /// The command ended with this code.
    Exit(i32),
    /// `session_info`: the session's id (§5.4).
    Session(String),
    /// The socket ended (a close frame or the connection) before an exit.
    Closed,
}

/// An open exec socket.
pub(crate) struct ExecSocket {
    ws: Ws,
    /// A TTY session: raw binary frames, no stream ids (§5.3).
    tty: bool,
    /// The longest silence before the socket counts as dead; a ping goes out after a third.
    idle: Duration,
    last_heard: Instant,
    pinged: bool,
}

/// What to open: a new command or an existing session.
pub(crate) enum Target<'a> {
    /// `GET /v1/sprites/{name}/exec?…` with these query pairs (§5.1); `tty` says whether
    /// they ask for a terminal. `hidden` are values of the query (a command's env) that must
    /// not show in an error, even when a refused upgrade quotes the request.
    Spawn {
        query: &'a [(&'static str, String)],
        tty: bool,
        hidden: &'a [String],
    },
    /// `GET /v1/sprites/{name}/exec/{id}?stdin=` (§5.5) of a session with or without a
    /// terminal.
    Attach { id: &'a str, stdin: bool, tty: bool },
}

impl ExecSocket {
    /// The next frame that matters to the reader: pings, pongs and unknown text messages are
    /// passed over. Silence for the idle bound is a `Transport` error (ambiguous: the command
    /// may still run).
    pub async fn next(&mut self) -> Result<Frame> {
        loop {
            let ping_at = self.last_heard + self.idle / 3;
            let dead_at = self.last_heard + self.idle;
            let wake = if self.pinged { dead_at } else { ping_at };
            let message = tokio::select! {
                message = self.ws.next() => message,
                _ = tokio::time::sleep_until(wake) => {
                    if self.pinged {
                        return Err(Error::new(
                            ErrorKind::Transport,
                            format!("the exec socket went silent for {:?}", self.idle),
                        )
                        .with_provider(PROVIDER)
                        .with_ambiguous(true));
                    }
                    self.pinged = true;
                    // A ping that cannot be sent shows as a broken socket on the next read.
                    let _ = self.ws.send(Message::Ping(Bytes::new())).await;
                    continue;
                }
            };
            self.last_heard = Instant::now();
            self.pinged = false;
            let message = match message {
                None => return Ok(Frame::Closed),
                Some(Err(e)) => return Err(ws_error("the exec socket failed", e)),
                Some(Ok(message)) => message,
            };
            match message {
                Message::Binary(data) if self.tty && !data.is_empty() => {
                    return Ok(Frame::Stdout(data));
                }
                Message::Binary(_) if self.tty => {}
                Message::Binary(data) => {
                    if let Some(frame) = binary_frame(data)? {
                        return Ok(frame);
                    }
                }
                Message::Text(text) => {
                    if let Some(frame) = text_frame(text.as_str()) {
                        return Ok(frame);
                    }
                }
                Message::Close(_) => return Ok(Frame::Closed),
                _ => {}
            }
        }
    }

    /// Sends stdin bytes (stream id 0; raw in TTY mode).
    pub async fn send_stdin(&mut self, data: &[u8]) -> Result<()> {
        if self.tty {
            return self
                .send(Message::Binary(Bytes::copy_from_slice(data)))
                .await;
        }
        let mut frame = Vec::with_capacity(data.len() + 1);
        frame.push(STDIN);
        frame.extend_from_slice(data);
        self.send(Message::Binary(frame.into())).await
    }

    /// Closes the command's stdin (stream id 4). A terminal has no end of input of its own
    /// (the program reads ^D as it likes), so in TTY mode nothing is sent.
    pub async fn send_eof(&mut self) -> Result<()> {
        if self.tty {
            return Ok(());
        }
        self.send(Message::Binary(vec![STDIN_EOF].into())).await
    }

    /// Resizes the session's terminal (§5.3).
    pub async fn send_resize(&mut self, cols: u16, rows: u16) -> Result<()> {
        let resize = serde_json::json!({"type": "resize", "cols": cols, "rows": rows});
        self.send(Message::Text(resize.to_string().into())).await
    }

    async fn send(&mut self, message: Message) -> Result<()> {
        self.ws
            .send(message)
            .await
            .map_err(|e| ws_error("writing to the exec socket failed", e))
    }

    /// Closes the socket with code 1000, as the official SDK does, without waiting for the
    /// server's answer (§5.2, trap 5).
    pub async fn close(mut self) {
        let normal = CloseFrame {
            code: CloseCode::Normal,
            reason: "".into(),
        };
        let _ = tokio::time::timeout(Duration::from_secs(1), self.ws.close(Some(normal))).await;
    }
}

fn binary_frame(data: Bytes) -> Result<Option<Frame>> {
    let Some((&id, _)) = data.split_first() else {
        return Ok(None);
    };
    let payload = data.slice(1..);
    Ok(match id {
        STDOUT => Some(Frame::Stdout(payload)),
        STDERR => Some(Frame::Stderr(payload)),
        // An empty exit payload means 0 (as the official SDK reads it).
        EXIT => Some(Frame::Exit(payload.first().copied().map_or(0, i32::from))),
        _ => {
            return Err(Error::new(
                ErrorKind::Provider,
                format!("the exec socket sent a frame with unknown stream id {id}"),
            )
            .with_provider(PROVIDER));
        }
    })
}

fn text_frame(text: &str) -> Option<Frame> {
    let frame: TextFrame = serde_json::from_str(text).ok()?;
    match frame.kind.as_str() {
        "session_info" => serde_json::from_str::<SessionInfo>(text)
            .ok()
            .map(|info| Frame::Session(info.session_id)),
        "exit" => Some(Frame::Exit(frame.exit_code.unwrap_or(0))),
        _ => None,
    }
}

fn ws_error(what: &str, e: tokio_tungstenite::tungstenite::Error) -> Error {
    let kind = match &e {
        tokio_tungstenite::tungstenite::Error::Url(_) => ErrorKind::Validation,
        _ => ErrorKind::Transport,
    };
    // A cause that names a URL could carry the exec query, and with it the command's env.
    let cause = e.to_string();
    let message = if cause.contains("://") || cause.contains('?') {
        what.to_owned()
    } else {
        format!("{what}: {cause}")
    };
    Error::new(kind, message).with_provider(PROVIDER)
}

/// The WebSocket URL of `path` with `query`: the API base with `http` → `ws` (§2).
fn ws_url(base: &str, path: &str, query: &[(&str, String)]) -> Result<String> {
    let mut url = format!("{}{path}", sandbox_sdk_core::http::websocket_base(base)?);
    for (i, (key, value)) in query.iter().enumerate() {
        url.push(if i == 0 { '?' } else { '&' });
        url.push_str(key);
        url.push('=');
        url.push_str(&encode_path_segment(value));
    }
    Ok(url)
}

/// Opens the exec socket of sprite `name`. A refused upgrade is mapped like any API answer
/// (404 unknown sprite or session, 401, 400 bad parameters, §5.1); the upgrade is bounded by
/// the request timeout and counts as ambiguous when it times out or breaks (the command may
/// have started).
pub(crate) async fn open(
    api: &Api,
    name: &str,
    target: Target<'_>,
    op: &str,
) -> Result<ExecSocket> {
    let settings = &api.settings;
    let base = format!("{}/exec", Api::sprite_path(name));
    let (path, query, tty, hidden) = match target {
        Target::Spawn { query, tty, hidden } => (base, query.to_vec(), tty, hidden),
        Target::Attach { id, stdin, tty } => (
            format!("{base}/{}", encode_path_segment(id)),
            vec![("stdin", stdin.to_string())],
            tty,
            &[][..],
        ),
    };
    let url = ws_url(&settings.base_url, &path, &query)?;
    let mut request = url
        .as_str()
        .into_client_request()
        .map_err(|e| ws_error("invalid exec URL", e))?;
    let bearer = format!("Bearer {}", settings.token);
    request.headers_mut().insert(
        "authorization",
        bearer
            .parse()
            .map_err(|_| Error::validation("the token is not a valid header value"))?,
    );
    let limits = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
        .max_message_size(Some(MAX_MESSAGE))
        .max_frame_size(Some(MAX_MESSAGE));
    let connect = tokio_tungstenite::connect_async_with_config(request, Some(limits), false);
    let in_context = |e: Error| e.with_operation(op).with_sandbox_id(name);
    match tokio::time::timeout(settings.request_timeout, connect).await {
        Err(_) => Err(in_context(
            Error::new(
                ErrorKind::Timeout,
                format!(
                    "the exec socket upgrade took over {:?}",
                    settings.request_timeout
                ),
            )
            .with_provider(PROVIDER)
            .with_ambiguous(true),
        )),
        Ok(Err(tokio_tungstenite::tungstenite::Error::Http(response))) => {
            // A server that echoes the credential or quotes the query (the command's env),
            // plain or escaped, must not get them into our errors: scrubbed before the body
            // is decoded.
            let mut secrets = api.secrets();
            secrets.extend_from_slice(hidden);
            let mut headers = Headers::new();
            for (key, value) in response.headers() {
                let value = scrub(value.as_bytes(), &secrets);
                headers.push(key.as_str(), String::from_utf8_lossy(&value));
            }
            let status = response.status().as_u16();
            let body = response
                .into_body()
                .map(|body| Bytes::from(scrub(&body, &secrets)))
                .unwrap_or_default();
            Err(map_error(&ErrorResponse {
                status,
                headers,
                body,
                operation: op.into(),
                sandbox_id: Some(name.to_owned()),
                request_id: None,
                method: "GET".into(),
                path,
                provider: PROVIDER.into(),
            }))
        }
        Ok(Err(e)) => Err(in_context(
            ws_error("the exec socket upgrade failed", e).with_ambiguous(true),
        )),
        Ok(Ok((ws, _))) => Ok(ExecSocket {
            ws,
            tty,
            idle: settings.stream_idle,
            last_heard: Instant::now(),
            pinged: false,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_decode_by_stream_id() {
        let f = |b: &[u8]| binary_frame(Bytes::copy_from_slice(b)).unwrap();
        assert_eq!(f(b"\x01hi"), Some(Frame::Stdout(Bytes::from_static(b"hi"))));
        assert_eq!(f(b"\x02e"), Some(Frame::Stderr(Bytes::from_static(b"e"))));
        assert_eq!(f(b"\x03\x07"), Some(Frame::Exit(7)));
        assert_eq!(f(b"\x03"), Some(Frame::Exit(0)));
        assert_eq!(f(b""), None);
        assert!(binary_frame(Bytes::from_static(b"\x09x")).is_err());
        assert_eq!(
            text_frame(r#"{"type":"session_info","session_id":41,"tty":false}"#),
            Some(Frame::Session("41".into()))
        );
        assert_eq!(
            text_frame(r#"{"type":"exit","exit_code":3}"#),
            Some(Frame::Exit(3))
        );
        assert_eq!(text_frame(r#"{"type":"port_opened","port":80}"#), None);
        assert_eq!(text_frame("not json"), None);
    }

    #[test]
    fn ws_urls_swap_the_scheme_and_encode_the_query() {
        let q = [("cmd", "echo".to_owned()), ("cmd", "a b&c".to_owned())];
        assert_eq!(
            ws_url("https://api.sprites.dev", "/v1/sprites/s/exec", &q).unwrap(),
            "wss://api.sprites.dev/v1/sprites/s/exec?cmd=echo&cmd=a%20b%26c"
        );
        assert_eq!(
            ws_url("http://127.0.0.1:9", "/x", &[]).unwrap(),
            "ws://127.0.0.1:9/x"
        );
        assert!(ws_url("ftp://x", "/x", &[]).is_err());
    }
}
