//! The log WebSocket (`GET …/command/{cid}/logs?follow=true` upgraded, PROTOCOL.md §8.2):
//! [`connect_logs`] opens it with the toolbox's headers, [`LogSocket::next`] reads its frames
//! and keeps it alive with pings (the server answers pings but sends none).

use crate::api::toolbox::{Toolbox, command_path};
use crate::config::{LOG_MESSAGE_MAX, PROVIDER, SOURCE};
use crate::error::{is_empty_bad_gateway, map_error};
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use sandbox_sdk_core::http::{ErrorResponse, Headers};
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
    /// A Close frame, with its code when it had one.
    Close(Option<u16>),
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
            Some(Ok(Message::Close(frame))) => LogEvent::Close(frame.map(|f| u16::from(f.code))),
            Some(Ok(_)) => LogEvent::Other,
            None => LogEvent::End,
            Some(Err(e)) => LogEvent::Broken(ws_error("log stream failed", e)),
        })
    }
}

fn ws_error(what: &str, e: tokio_tungstenite::tungstenite::Error) -> Error {
    let kind = match &e {
        tokio_tungstenite::tungstenite::Error::Url(_) => ErrorKind::Validation,
        _ => ErrorKind::Transport,
    };
    Error::new(kind, format!("{what}: {e}"))
}

/// `data` with every occurrence of each of `secrets` (longest first; empty ones and ones
/// shorter than 6 bytes, too likely to match by chance, are left alone) replaced by
/// `<redacted>`.
fn scrub(data: &[u8], secrets: &[String]) -> Vec<u8> {
    let mut secrets: Vec<&[u8]> = secrets
        .iter()
        .map(|s| s.as_bytes())
        .filter(|s| s.len() >= 6)
        .collect();
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    let mut out = Vec::with_capacity(data.len());
    let mut at = 0;
    'scan: while at < data.len() {
        for secret in &secrets {
            if data[at..].starts_with(secret) {
                out.extend_from_slice(b"<redacted>");
                at += secret.len();
                continue 'scan;
            }
        }
        out.push(data[at]);
        at += 1;
    }
    out
}

/// The WebSocket URL for a toolbox path: the toolbox base with `http` → `ws`.
fn ws_url(toolbox_base: &str, path: &str) -> Result<String> {
    let base = sandbox_sdk_core::http::websocket_base(toolbox_base)?;
    Ok(format!("{base}{path}?follow=true"))
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
    let config = &tb.api.config;
    let path = format!("{}/logs", command_path(sid, cid));
    let url = ws_url(&tb.base, &path)?;
    let mut request = url
        .as_str()
        .into_client_request()
        .map_err(|e| ws_error("invalid log stream URL", e))?;
    let headers = request.headers_mut();
    let mut put = |name: &'static str, value: &str| -> Result<()> {
        let value = value
            .parse()
            .map_err(|_| Error::validation(format!("invalid value for header {name}")))?;
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
    let fallback = |reason: String| {
        tracing::warn!(
            provider = PROVIDER,
            sandbox_id = %tb.sandbox_id,
            reason = %reason,
            "the log stream WebSocket upgrade was refused; following the command by polling instead"
        );
        Ok(None)
    };
    match tokio::time::timeout(config.request_timeout, connect).await {
        Err(_) => Err(Error::new(
            ErrorKind::Timeout,
            "log stream upgrade timed out",
        )),
        Ok(Err(tokio_tungstenite::tungstenite::Error::Http(response))) => {
            // A server that echoes the credential must not get it into our errors or logs (the
            // HTTP transport scrubs its error answers the same way).
            let secrets = [format!("Bearer {}", tb.api.secret), tb.api.secret.clone()];
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
                operation: "exec".into(),
                sandbox_id: Some(tb.sandbox_id.clone()),
                request_id: None,
                method: "GET".into(),
                path,
                provider: PROVIDER.into(),
            });
            let decisive = matches!(
                error.kind(),
                ErrorKind::Unauthorized | ErrorKind::NotFound | ErrorKind::NotRunning
            ) || is_empty_bad_gateway(&error);
            if decisive {
                return Err(error);
            }
            fallback(error.to_string())
        }
        Ok(Err(e @ tokio_tungstenite::tungstenite::Error::Protocol(_))) => fallback(e.to_string()),
        Ok(Err(e)) => Err(ws_error("log stream upgrade failed", e)),
        Ok(Ok((ws, _))) => Ok(Some(LogSocket {
            ws,
            ping: config.log_ping,
            ping_sent: None,
        })),
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

    #[test]
    fn ws_urls_swap_the_scheme() {
        assert_eq!(
            ws_url(
                "https://proxy.app.daytona.io/toolbox/sb",
                "/process/session/s/command/c/logs"
            )
            .unwrap(),
            "wss://proxy.app.daytona.io/toolbox/sb/process/session/s/command/c/logs?follow=true"
        );
        assert_eq!(
            ws_url("http://127.0.0.1:9/t/sb", "/x").unwrap(),
            "ws://127.0.0.1:9/t/sb/x?follow=true"
        );
        assert!(ws_url("ftp://x", "/x").is_err());
    }
}
