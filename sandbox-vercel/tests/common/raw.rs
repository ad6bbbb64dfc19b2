//! A scripted HTTP/1.1 server on loopback, run in the test's own runtime, for what wiremock
//! cannot do: answer with part of a body and then hold the connection silent, or cut it. Each
//! request is answered by the first unused reply whose `METHOD path` prefix it matches.

use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How one request is answered.
#[derive(Clone)]
pub enum Reply {
    /// A whole answer.
    Full {
        status: u16,
        content_type: &'static str,
        body: String,
    },
    /// These bytes (a head and part of a body), then silence with the connection open.
    Hold(String),
    /// These bytes, then the connection closed.
    Cut(String),
}

impl Reply {
    pub fn json(body: serde_json::Value) -> Reply {
        Reply::Full {
            status: 200,
            content_type: "application/json",
            body: body.to_string(),
        }
    }

    pub fn ndjson(body: String) -> Reply {
        Reply::Full {
            status: 200,
            content_type: "application/x-ndjson",
            body,
        }
    }

    /// A chunked NDJSON head and `body` as one chunk, then `then` (hold or cut).
    pub fn ndjson_part(body: &str, cut: bool) -> Reply {
        let head = "HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\ntransfer-encoding: chunked\r\n\r\n";
        let raw = format!("{head}{:x}\r\n{body}\r\n", body.len());
        if cut {
            Reply::Cut(raw)
        } else {
            Reply::Hold(raw)
        }
    }
}

/// The script: `(METHOD path prefix, reply, times)`, `times` 0 = always.
pub type Script = Vec<(&'static str, Reply, usize)>;

/// The server: its base URL and the `METHOD path?query` lines it received.
pub struct Raw {
    pub url: String,
    pub log: Arc<Mutex<Vec<String>>>,
}

impl Raw {
    pub fn requests(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

/// Starts a server answering with `script` (`(prefix, reply, times)`, `times` 0 = always).
pub async fn serve(script: Script) -> Raw {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let log = Arc::new(Mutex::new(Vec::new()));
    let script = Arc::new(Mutex::new(script));
    let (log2, script2) = (log.clone(), script.clone());
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            tokio::spawn(connection(conn, log2.clone(), script2.clone()));
        }
    });
    Raw { url, log }
}

async fn read_request(conn: &mut TcpStream) -> Option<String> {
    let mut seen = Vec::new();
    let mut buf = [0u8; 8192];
    let head_end = loop {
        if let Some(at) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = conn.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        seen.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&seen[..head_end]).to_string();
    let lower = head.to_ascii_lowercase();
    let length: usize = lower
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while seen.len() < head_end + length {
        let n = conn.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        seen.extend_from_slice(&buf[..n]);
    }
    Some(head.lines().next().unwrap_or("").to_owned())
}

async fn connection(mut conn: TcpStream, log: Arc<Mutex<Vec<String>>>, script: Arc<Mutex<Script>>) {
    while let Some(line) = read_request(&mut conn).await {
        let target = line
            .rsplit_once(' ')
            .map_or(line.as_str(), |(t, _)| t)
            .to_owned();
        log.lock().unwrap().push(target.clone());
        let reply = {
            let mut script = script.lock().unwrap();
            let found = script
                .iter()
                .position(|(prefix, _, _)| target.starts_with(prefix));
            match found {
                Some(i) => {
                    let reply = script[i].1.clone();
                    match script[i].2 {
                        0 => {}
                        1 => {
                            script.remove(i);
                        }
                        _ => script[i].2 -= 1,
                    }
                    reply
                }
                None => Reply::Full {
                    status: 418,
                    content_type: "text/plain",
                    body: format!("unscripted {target}"),
                },
            }
        };
        match reply {
            Reply::Full {
                status,
                content_type,
                body,
            } => {
                let raw = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                );
                if conn.write_all(raw.as_bytes()).await.is_err() {
                    return;
                }
            }
            Reply::Hold(raw) => {
                let _ = conn.write_all(raw.as_bytes()).await;
                let mut buf = [0u8; 1024];
                while let Ok(n) = conn.read(&mut buf).await {
                    if n == 0 {
                        return;
                    }
                }
                return;
            }
            Reply::Cut(raw) => {
                let _ = conn.write_all(raw.as_bytes()).await;
                return;
            }
        }
    }
}
