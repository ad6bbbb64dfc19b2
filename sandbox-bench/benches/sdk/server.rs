//! A minimal loopback HTTP/1.1 server with keep-alive: `GET /bytes/N` streams `N` zero bytes
//! from one static buffer (so the server itself holds no body in memory), `GET /json` answers a
//! small JSON document, `PUT /upload` reads and drops a body of `Content-Length` bytes. Anything
//! else is a 404.

use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The zeros a body is cut from.
static ZEROS: [u8; 256 * 1024] = [0; 256 * 1024];

/// The body of `GET /json`: the size and shape of a typical provider answer.
pub const JSON_BODY: &str = r#"{"id":"sb-0123456789abcdef","state":"running","template":"base","cpu":2,"memory_mb":1024,"created_at":"2026-01-01T00:00:00Z","metadata":{"owner":"bench","purpose":"latency"},"envd_version":"0.2.0"}"#;

/// Starts the server on `127.0.0.1` on a free port, on the current runtime.
pub async fn start() -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                if let Err(e) = connection(socket).await {
                    eprintln!("bench server: connection failed: {e}");
                }
            });
        }
    });
    Ok(addr)
}

fn header_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

/// The `Content-Length` of a request head, when it has one.
fn content_length(head: &str) -> Option<u64> {
    head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("content-length")
            .then(|| value.trim().parse().ok())?
    })
}

/// Serves requests on one connection until the client closes it.
async fn connection(mut socket: TcpStream) -> std::io::Result<()> {
    socket.set_nodelay(true)?;
    let mut buf = Vec::with_capacity(4096);
    loop {
        let end = loop {
            if let Some(end) = header_end(&buf) {
                break end;
            }
            if socket.read_buf(&mut buf).await? == 0 {
                return Ok(());
            }
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        buf.drain(..end);
        let path = head.split_whitespace().nth(1).unwrap_or("");
        if path == "/upload" {
            let Some(length) = content_length(&head) else {
                socket
                    .write_all(b"HTTP/1.1 411 Length Required\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    .await?;
                return Ok(());
            };
            // Read and drop the body: what is already buffered first, then the socket.
            let mut left = length;
            let buffered = (buf.len() as u64).min(left) as usize;
            buf.drain(..buffered);
            left -= buffered as u64;
            let mut sink = vec![0u8; 256 * 1024];
            while left > 0 {
                let want = left.min(sink.len() as u64) as usize;
                let n = socket.read(&mut sink[..want]).await?;
                if n == 0 {
                    return Ok(());
                }
                left -= n as u64;
            }
            let body = format!("{{\"received\":{length}}}");
            let response = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
            socket.write_all(response.as_bytes()).await?;
        } else if path == "/json" {
            let response = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{JSON_BODY}",
                JSON_BODY.len()
            );
            socket.write_all(response.as_bytes()).await?;
        } else if let Some(n) = path
            .strip_prefix("/bytes/")
            .and_then(|n| n.parse::<u64>().ok())
        {
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\ncontent-length: {n}\r\n\r\n"
            );
            socket.write_all(head.as_bytes()).await?;
            let mut left = n;
            while left > 0 {
                let take = left.min(ZEROS.len() as u64) as usize;
                socket.write_all(&ZEROS[..take]).await?;
                left -= take as u64;
            }
        } else {
            socket
                .write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                .await?;
        }
    }
}
