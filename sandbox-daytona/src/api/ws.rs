//! The toolbox's WebSockets: the log follow (`GET …/command/{cid}/logs?follow=true` upgraded,
//! PROTOCOL.md §8.2) and the interpreter (`GET /process/interpreter/execute`, §12).
//! [`connect_logs`] and [`connect_interpreter`] open them with the toolbox's headers,
//! [`LogSocket::next`] reads their frames and keeps them alive with pings (the server answers
//! pings but sends none).

use crate::api::toolbox::{Toolbox, command_path};
use crate::config::{LOG_MESSAGE_MAX, PROVIDER, SOURCE};
use crate::error::{is_empty_bad_gateway, map_error};
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use sandbox_sdk_core::http::{ErrorResponse, Headers};
use sandbox_sdk_core::redact::{bearer_secrets, scrub};
use sandbox_sdk_core::{Error, ErrorKind, Result};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// What the log stream gave.
pub(crate) enum LogEvent {
    /// Log bytes (a binary or text frame).
    Data(Bytes),
    /// A Close frame, with its code when it had one, and its reason.
    Close(Option<u16>, String),
    /// The connection ended without a Close frame.
    End,
    /// A ping, pong or other control frame: nothing for the reader.
    Other,
    /// Reading failed.
    Broken(Error),
}

/// An open log stream.
pub(crate) struct LogSocket {
    ws: Ws,
    /// Ping after this much silence; give up when a ping gets no frame within the second.
    ping: (Duration, Duration),
    /// When the unanswered ping went out.
    ping_sent: Option<Instant>,
}

impl LogSocket {
    /// The next frame. Silence for the ping interval sends a ping; a ping that gets no frame
    /// at all (not even the pong) in time is a `Transport` error, as is a ping that cannot be
    /// sent.
    pub async fn next(&mut self) -> Result<LogEvent> {
        let (every, within) = self.ping;
        let message = loop {
            let wait = match self.ping_sent {
                Some(at) => (at + within).saturating_duration_since(Instant::now()),
                None => every,
            };
            tokio::select! {
                message = self.ws.next() => {
                    self.ping_sent = None;
                    break message;
                }
                _ = tokio::time::sleep(wait) => {
                    if self.ping_sent.is_some() {
                        return Err(Error::new(
                            ErrorKind::Transport,
                            format!(
                                "the log stream went silent: no answer to a ping within {within:?}"
                            ),
                        )
                        .with_ambiguous(true));
                    }
                    let sent =
                        tokio::time::timeout(within, self.ws.send(Message::Ping(Bytes::new()))).await;
                    match sent {
                        Ok(Ok(())) => self.ping_sent = Some(Instant::now()),
                        Ok(Err(e)) => return Err(ws_error("log stream ping failed", e)),
                        Err(_) => {
                            return Err(Error::new(
                                ErrorKind::Transport,
                                format!("the log stream could not send a ping within {within:?}"),
                            ));
                        }
                    }
                }
            }
        };
        Ok(match message {
            Some(Ok(Message::Binary(bytes))) => LogEvent::Data(bytes),
            Some(Ok(Message::Text(text))) => {
                LogEvent::Data(Bytes::copy_from_slice(text.as_bytes()))
            }
            Some(Ok(Message::Close(frame))) => match frame {
                Some(f) => LogEvent::Close(Some(u16::from(f.code)), f.reason.to_string()),
                None => LogEvent::Close(None, String::new()),
            },
            Some(Ok(_)) => LogEvent::Other,
            None => LogEvent::End,
            Some(Err(e)) => LogEvent::Broken(ws_error("log stream failed", e)),
        })
    }
}

impl LogSocket {
    /// Sends one text message, bounded by the request timeout.
    pub async fn send_text(&mut self, text: String, limit: Duration) -> Result<()> {
        match tokio::time::timeout(limit, self.ws.send(Message::text(text))).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(ws_error("sending on the socket failed", e)),
            Err(_) => Err(Error::new(
                ErrorKind::Transport,
                format!("the socket took no message within {limit:?}"),
            )),
        }
    }

    /// Closes the socket (best effort, not waited on for long).
    pub async fn close(mut self) {
        let _ = tokio::time::timeout(Duration::from_secs(1), self.ws.close(None)).await;
    }
}

fn ws_error(what: &str, e: tokio_tungstenite::tungstenite::Error) -> Error {
    let kind = match &e {
        tokio_tungstenite::tungstenite::Error::Url(_) => ErrorKind::Validation,
        _ => ErrorKind::Transport,
    };
    Error::new(kind, format!("{what}: {e}"))
}

/// The WebSocket URL for a toolbox path: the toolbox base with `http` → `ws`.
fn ws_url(toolbox_base: &str, path: &str) -> Result<String> {
    let base = sandbox_sdk_core::http::websocket_base(toolbox_base)?;
    Ok(format!("{base}{path}"))
}

/// Opens the log stream of command `cid` in session `sid`, with the same headers as every
/// toolbox request.
///
/// `Ok(None)` when the upgrade is refused in a way polling can work around (a proxy or network
/// that does not carry WebSockets: any refusal but 401/403, 404 or the proxy's empty 502, or a
/// handshake that is not a WebSocket one); the caller then polls, and a `tracing` warning says
/// so. Those three are errors, mapped like any other toolbox answer (the caller checks them
/// against the sandbox's state with [`Toolbox::explain`]).
pub(crate) async fn connect_logs(tb: &Toolbox, sid: &str, cid: &str) -> Result<Option<LogSocket>> {
    let path = format!("{}/logs", command_path(sid, cid));
    let url = format!("{}?follow=true", ws_url(&tb.base, &path)?);
    let fallback = |reason: String| {
        tracing::warn!(
            provider = PROVIDER,
            sandbox_id = %tb.sandbox_id,
            reason = %reason,
            "the log stream WebSocket upgrade was refused; following the command by polling instead"
        );
        Ok(None)
    };
    match open(tb, &url, &path, "exec").await {
        Ok(socket) => Ok(Some(socket)),
        Err(Refused::Decisive(e)) => Err(e),
        Err(Refused::Other(e)) => fallback(e.to_string()),
    }
}

/// Opens the interpreter's socket (PROTOCOL.md §12); any refusal is its error, as mapped.
pub(crate) async fn connect_interpreter(tb: &Toolbox) -> Result<LogSocket> {
    let path = "/process/interpreter/execute";
    let url = ws_url(&tb.base, path)?;
    open(tb, &url, path, "run_code")
        .await
        .map_err(|(Refused::Decisive(e) | Refused::Other(e))| e)
}

/// Why an upgrade did not happen: an answer that settles it (401/403, 404, the proxy's empty
/// 502, a timeout, a broken connection), or a refusal a caller may work around (the log
/// follow then polls).
enum Refused {
    Decisive(Error),
    Other(Error),
}

/// Opens a toolbox WebSocket at `url` (for `path`) with the toolbox's headers.
async fn open(
    tb: &Toolbox,
    url: &str,
    path: &str,
    operation: &str,
) -> std::result::Result<LogSocket, Refused> {
    let config = &tb.api.config;
    let mut request = url
        .into_client_request()
        .map_err(|e| Refused::Decisive(ws_error("invalid WebSocket URL", e)))?;
    let headers = request.headers_mut();
    let mut put = |name: &'static str, value: &str| -> std::result::Result<(), Refused> {
        let value = value.parse().map_err(|_| {
            Refused::Decisive(Error::validation(format!(
                "invalid value for header {name}"
            )))
        })?;
        headers.insert(name, value);
        Ok(())
    };
    put("authorization", &format!("Bearer {}", tb.api.secret))?;
    put("x-daytona-sdk-version", &config.sdk_version)?;
    put("x-daytona-source", SOURCE)?;
    put("user-agent", &format!("{SOURCE}/{}", config.sdk_version))?;
    if !config.api_key
        && let Some(org) = &config.organization_id
    {
        put("x-daytona-organization-id", org)?;
    }
    let limits = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
        .max_message_size(Some(LOG_MESSAGE_MAX))
        .max_frame_size(Some(LOG_MESSAGE_MAX));
    let connect = tokio_tungstenite::connect_async_with_config(request, Some(limits), false);
    match tokio::time::timeout(config.request_timeout, connect).await {
        Err(_) => Err(Refused::Decisive(Error::new(
            ErrorKind::Timeout,
            "WebSocket upgrade timed out",
        ))),
        Ok(Err(tokio_tungstenite::tungstenite::Error::Http(response))) => {
            // A server that echoes the credential must not get it into our errors or logs (the
            // HTTP transport scrubs its error answers the same way).
            let secrets = bearer_secrets(&tb.api.secret);
            let mut h = Headers::new();
            for (name, value) in response.headers() {
                let value = scrub(value.as_bytes(), &secrets);
                h.push(name.as_str(), String::from_utf8_lossy(&value));
            }
            let status = response.status().as_u16();
            let body = response
                .into_body()
                .map(|body| Bytes::from(scrub(&body, &secrets)))
                .unwrap_or_default();
            let error = map_error(&ErrorResponse {
                status,
                headers: h,
                body,
                operation: operation.into(),
                sandbox_id: Some(tb.sandbox_id.clone()),
                request_id: None,
                method: "GET".into(),
                path: path.to_owned(),
                provider: PROVIDER.into(),
            });
            let decisive = matches!(
                error.kind(),
                ErrorKind::Unauthorized | ErrorKind::NotFound | ErrorKind::NotRunning
            ) || is_empty_bad_gateway(&error);
            if decisive {
                Err(Refused::Decisive(error))
            } else {
                Err(Refused::Other(error))
            }
        }
        Ok(Err(e @ tokio_tungstenite::tungstenite::Error::Protocol(_))) => Err(Refused::Other(
            ws_error("the WebSocket handshake failed", e),
        )),
        Ok(Err(e)) => Err(Refused::Decisive(ws_error("WebSocket upgrade failed", e))),
        Ok(Ok((ws, _))) => Ok(LogSocket {
            ws,
            ping: config.log_ping,
            ping_sent: None,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrub_replaces_each_secret_longest_first() {
        let secrets = ["Bearer tok-123456".to_owned(), "tok-123456".to_owned()];
        assert_eq!(
            scrub(b"a Bearer tok-123456 b tok-123456!", &secrets),
            b"a <redacted> b <redacted>!"
        );
        assert_eq!(scrub(b"short", &["".to_owned(), "ab".to_owned()]), b"short");
    }

    /// Issue 33 item 6: a refused upgrade's body is decoded by the error mapper, so a key it
    /// echoes with JSON escapes must be scrubbed too.
    #[test]
    fn scrub_finds_the_key_in_json_escapes() {
        let secrets = [
            "Bearer dtn_key-123456".to_owned(),
            "dtn_key-123456".to_owned(),
        ];
        let body = br#"{"message":"token dtn_key\u002d123456 is not allowed"}"#;
        assert_eq!(
            scrub(body, &secrets),
            br#"{"message":"token <redacted> is not allowed"}"#
        );
    }

    #[test]
    fn ws_urls_swap_the_scheme() {
        assert_eq!(
            ws_url(
                "https://proxy.app.daytona.io/toolbox/sb",
                "/process/session/s/command/c/logs"
            )
            .unwrap(),
            "wss://proxy.app.daytona.io/toolbox/sb/process/session/s/command/c/logs"
        );
        assert_eq!(
            ws_url("http://127.0.0.1:9/t/sb", "/x").unwrap(),
            "ws://127.0.0.1:9/t/sb/x"
        );
        assert!(ws_url("ftp://x", "/x").is_err());
    }
}
