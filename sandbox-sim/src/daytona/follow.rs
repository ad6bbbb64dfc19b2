//! The log WebSocket (`GET …/command/{cid}/logs?follow=true` with an upgrade, PROTOCOL.md
//! §4.2): binary messages of raw log bytes read in chunks of at most 1024 bytes (markers
//! included, so one may be split across messages), and Close 1000 once the command's exit code
//! exists and the log has stayed unchanged for the linger time (50 looks 20 ms apart by
//! default); Close 1011 when the log cannot be read. The server answers pings and sends none.
//! A client that negotiated combined output (no SDK version) gets the bytes without markers.

use super::call::Call;
use super::logs::{Shape, Splitter};
use super::session::{Session, SessionCommand};
use crate::{SimResponse, SimUpgrade};
use futures::{SinkExt, StreamExt};
use std::io::{Read, Seek, SeekFrom};
use std::sync::Arc;
use std::time::Duration;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role};
use tokio_tungstenite::tungstenite::{Bytes, Message};

/// How often the log is looked at.
const TICK: Duration = Duration::from_millis(20);

/// The largest message.
const CHUNK: usize = 1024;

/// Answers the upgrade (101, or the daemon's 404 for an unknown session or command) and
/// follows the log on the upgraded connection.
pub(crate) fn upgrade(call: Call, upgrade: SimUpgrade, sid: &str, cid: &str) -> SimResponse {
    let Some(session) = call
        .api
        .with(&call.sandbox_id, |r| r.sessions.get(sid).cloned())
        .flatten()
    else {
        return call.error(404, "session not found");
    };
    let Some(command) = session.command(cid) else {
        return call.error(404, "command not found");
    };
    let Some(key) = call.request.header("sec-websocket-key") else {
        return call.error(
            400,
            "websocket: not a websocket handshake: 'Sec-WebSocket-Key' header is missing",
        );
    };
    let accept = derive_accept_key(key.as_bytes());
    let shape = Shape::of(&call.request);
    let protocol = call
        .request
        .header("sec-websocket-protocol")
        .and_then(|list| {
            let offered: Vec<&str> = list.split(',').map(str::trim).collect();
            offered
                .iter()
                .find(|p| p.starts_with("X-Daytona-SDK-Version~"))
                .or(offered.first())
                .map(|p| p.to_string())
        });
    let linger = call.api.config.follow_linger;
    call.api.rt.spawn(async move {
        let Some(connection) = upgrade.connection().await else {
            return;
        };
        let ws = WebSocketStream::from_raw_socket(connection, Role::Server, None).await;
        follow(ws, session, command, shape, linger).await;
    });
    let mut answer = SimResponse::empty(101)
        .header("upgrade", "websocket")
        .header("connection", "Upgrade")
        .header("sec-websocket-accept", &accept);
    if let Some(p) = protocol {
        answer = answer.header("sec-websocket-protocol", &p);
    }
    answer
}

async fn follow<S>(
    ws: WebSocketStream<S>,
    session: Arc<Session>,
    command: Arc<SessionCommand>,
    shape: Shape,
    linger: Duration,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let (mut sink, mut incoming) = ws.split();
    let quiet_ticks = (linger.as_millis() / TICK.as_millis()).max(1) as u32;
    let mut file = match std::fs::File::open(command.log_path()) {
        Ok(f) => f,
        Err(_) => {
            let _ = sink.send(close(CloseCode::Error)).await;
            return;
        }
    };
    let mut offset = 0u64;
    let mut quiet = 0u32;
    let mut splitter = Splitter::default();
    let mut tick = tokio::time::interval(TICK);
    // A late tick must not be made up for by a burst: the linger is counted in real time.
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            message = incoming.next() => match message {
                // Pings are answered by the stream itself; a close or a lost peer ends it.
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => return,
                Some(Ok(_)) => {
                    if sink.flush().await.is_err() {
                        return;
                    }
                }
            },
            _ = tick.tick() => {
                let chunks = match read_from(&mut file, &mut offset) {
                    Ok(c) => c,
                    Err(_) => {
                        let _ = sink.send(close(CloseCode::Error)).await;
                        return;
                    }
                };
                if chunks.is_empty() {
                    // Counted only once the command is done (or its session is gone).
                    if command.exit_code().is_some() || session.has_ended() {
                        quiet += 1;
                        if quiet >= quiet_ticks {
                            let _ = sink.send(close(CloseCode::Normal)).await;
                            return;
                        }
                    }
                    continue;
                }
                quiet = 0;
                for chunk in chunks {
                    let payload = match shape {
                        Shape::Combined => splitter.feed(&chunk).into_iter().flat_map(|(_, b)| b).collect(),
                        _ => chunk,
                    };
                    if payload.is_empty() {
                        continue;
                    }
                    if sink.send(Message::Binary(Bytes::from(payload))).await.is_err() {
                        return;
                    }
                }
            }
        }
    }
}

/// What the log gained since `offset`, in chunks of at most [`CHUNK`] bytes.
fn read_from(file: &mut std::fs::File, offset: &mut u64) -> std::io::Result<Vec<Vec<u8>>> {
    file.seek(SeekFrom::Start(*offset))?;
    let mut chunks = Vec::new();
    loop {
        let mut buf = vec![0u8; CHUNK];
        let n = file.read(&mut buf)?;
        if n == 0 {
            return Ok(chunks);
        }
        buf.truncate(n);
        *offset += n as u64;
        chunks.push(buf);
    }
}

fn close(code: CloseCode) -> Message {
    Message::Close(Some(CloseFrame {
        code,
        reason: "".into(),
    }))
}
