//! A loopback front server for toolbox tests: WebSocket upgrades are answered here with scripted
//! binary frames (the log follower), every other request is passed through to a wiremock server.

use futures::SinkExt;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

/// What the front server answers to an upgrade on one path.
#[derive(Clone)]
pub enum Script {
    /// Accept, send these binary frames, then close with this code.
    Frames(Vec<Vec<u8>>, u16),
    /// Refuse the upgrade with this HTTP status and JSON body.
    Refuse(u16, String),
    /// Accept, send these binary frames, then keep the connection open (answering pings) and
    /// never close it.
    Hold(Vec<Vec<u8>>),
    /// Accept, then neither read nor write: a ping gets no pong.
    Silent,
}

#[derive(Default)]
pub struct State {
    pub scripts: HashMap<String, Script>,
    /// Headers of each upgrade request, by path.
    pub upgrades: Vec<(String, HashMap<String, String>)>,
}

pub struct Front {
    pub addr: SocketAddr,
    pub state: Arc<Mutex<State>>,
}

impl Front {
    pub fn uri(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn script(&self, path: &str, script: Script) {
        self.state
            .lock()
            .unwrap()
            .scripts
            .insert(path.to_owned(), script);
    }

    pub fn upgrades(&self) -> Vec<(String, HashMap<String, String>)> {
        self.state.lock().unwrap().upgrades.clone()
    }
}

pub async fn start(upstream: SocketAddr) -> Front {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let state = Arc::new(Mutex::new(State::default()));
    let shared = state.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let state = shared.clone();
            tokio::spawn(async move {
                handle(stream, upstream, state).await;
            });
        }
    });
    Front { addr, state }
}

// The callback's signature is fixed by tungstenite.
#[allow(clippy::result_large_err)]
async fn handle(stream: TcpStream, upstream: SocketAddr, state: Arc<Mutex<State>>) {
    let mut buf = vec![0u8; 8192];
    let head = loop {
        let Ok(n) = stream.peek(&mut buf).await else {
            return;
        };
        let text = String::from_utf8_lossy(&buf[..n]).to_ascii_lowercase();
        if text.contains("\r\n\r\n") || n == buf.len() {
            break text;
        }
        if n == 0 {
            return;
        }
        tokio::task::yield_now().await;
    };
    if !head.contains("upgrade: websocket") {
        let Ok(mut up) = TcpStream::connect(upstream).await else {
            return;
        };
        let mut stream = stream;
        let _ = tokio::io::copy_bidirectional(&mut stream, &mut up).await;
        return;
    }
    let seen_path = Arc::new(Mutex::new(String::new()));
    let script = Arc::new(Mutex::new(None::<Script>));
    let (p, s, st) = (seen_path.clone(), script.clone(), state.clone());
    let callback = move |req: &Request, resp: Response| -> Result<Response, ErrorResponse> {
        let path = req.uri().path().to_owned();
        let headers = req
            .headers()
            .iter()
            .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
            .collect();
        let mut state = st.lock().unwrap();
        state.upgrades.push((
            format!("{}?{}", path, req.uri().query().unwrap_or("")),
            headers,
        ));
        let found = state.scripts.get(&path).cloned();
        *p.lock().unwrap() = path;
        match found {
            Some(Script::Refuse(status, body)) => {
                let mut refuse = ErrorResponse::new(Some(body));
                *refuse.status_mut() =
                    tokio_tungstenite::tungstenite::http::StatusCode::from_u16(status).unwrap();
                refuse
                    .headers_mut()
                    .insert("content-type", "application/json".parse().unwrap());
                Err(refuse)
            }
            other => {
                *s.lock().unwrap() = other;
                Ok(resp)
            }
        }
    };
    let Ok(mut ws) = tokio_tungstenite::accept_hdr_async(stream, callback).await else {
        return;
    };
    let script = script.lock().unwrap().clone();
    if let Some(Script::Silent) = script {
        // Held, never read: pings go unanswered.
        std::future::pending::<()>().await;
        drop(ws);
        return;
    }
    if let Some(Script::Hold(frames)) = script {
        for frame in frames {
            if ws.send(Message::Binary(frame.into())).await.is_err() {
                return;
            }
        }
        use futures::StreamExt;
        while let Some(Ok(_)) = ws.next().await {}
        return;
    }
    if let Some(Script::Frames(frames, code)) = script {
        for frame in frames {
            if ws.send(Message::Binary(frame.into())).await.is_err() {
                return;
            }
        }
        let _ = ws
            .send(Message::Close(Some(CloseFrame {
                code: CloseCode::from(code),
                reason: "".into(),
            })))
            .await;
        // Drain until the client answers the close.
        use futures::StreamExt;
        while let Some(Ok(_)) = ws.next().await {}
    }
}
