//! A loopback server speaking E2B's control plane and envd faithfully enough for the `e2b`
//! group: `POST /v2/sandboxes` answers once the sandbox is "running" (after [`CREATE_DELAY`], a
//! real wait), `POST /v2/sandboxes/{id}/connect` at once; envd's `process.Process/Start` answers a
//! Connect JSON server stream (`start`, base64 `data` events of at most [`DATA_CHUNK`] bytes,
//! `end`, end-of-stream `{}`) sent chunked; `GET /files` streams the size named in the path
//! (`/bytes/N`) with `Content-Length`; `POST /files` reads a chunked or sized body and answers
//! the written entry. HTTP/1.1 with keep-alive, like envd behind E2B's proxy over HTTP/1.1.

use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The sandbox id every answer names.
pub const SANDBOX: &str = "ibenchbenchbenchbench";
/// How long a create takes to reach `running` before it is answered.
pub const CREATE_DELAY: Duration = Duration::from_millis(50);
/// Bytes of output per `data` event (envd sends reads of its pipe, up to 32 KiB; 48 KiB keeps
/// the base64 a whole number of 4-character groups).
pub const DATA_CHUNK: usize = 48 * 1024;

/// Zeros a download body is cut from.
static ZEROS: [u8; 256 * 1024] = [0; 256 * 1024];

/// The create/connect answer.
fn created() -> String {
    format!(
        r#"{{"alias":"base","clientID":"6532622b","envdAccessToken":"tok_envd_bench_123","envdVersion":"0.6.13","sandboxID":"{SANDBOX}","templateID":"rki5dems9wqfm4r03t7g"}}"#
    )
}

/// Starts the server on `127.0.0.1` on a free port.
pub async fn start() -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                if let Err(e) = connection(socket).await {
                    eprintln!("e2b bench server: connection failed: {e}");
                }
            });
        }
    });
    Ok(addr)
}

fn header_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|line| {
        let (n, v) = line.split_once(':')?;
        n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// Reads until `buf` holds at least `n` bytes.
async fn fill(socket: &mut TcpStream, buf: &mut Vec<u8>, n: usize) -> std::io::Result<()> {
    while buf.len() < n {
        if socket.read_buf(buf).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
    Ok(())
}

/// Reads one request body (sized or chunked); keeps it only when `keep`. Returns (body, bytes).
async fn read_body(
    socket: &mut TcpStream,
    buf: &mut Vec<u8>,
    head: &str,
    keep: bool,
) -> std::io::Result<(Vec<u8>, u64)> {
    let mut body = Vec::new();
    let mut total = 0u64;
    let chunked = header(head, "transfer-encoding").is_some_and(|v| v.contains("chunked"));
    if !chunked {
        let mut left: u64 = header(head, "content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        while left > 0 {
            if buf.is_empty() {
                fill(socket, buf, 1).await?;
            }
            let take = buf.len().min(left as usize);
            if keep {
                body.extend_from_slice(&buf[..take]);
            }
            buf.drain(..take);
            left -= take as u64;
            total += take as u64;
        }
        return Ok((body, total));
    }
    loop {
        let line_end = loop {
            if let Some(i) = buf.windows(2).position(|w| w == b"\r\n") {
                break i;
            }
            let need = buf.len() + 1;
            fill(socket, buf, need).await?;
        };
        let size_text = String::from_utf8_lossy(&buf[..line_end]).into_owned();
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| std::io::Error::other("bad chunk size"))?;
        buf.drain(..line_end + 2);
        if size == 0 {
            fill(socket, buf, 2).await?;
            buf.drain(..2);
            return Ok((body, total));
        }
        let mut left = size;
        while left > 0 {
            if buf.is_empty() {
                fill(socket, buf, 1).await?;
            }
            let take = buf.len().min(left);
            if keep {
                body.extend_from_slice(&buf[..take]);
            }
            buf.drain(..take);
            left -= take;
            total += take as u64;
        }
        fill(socket, buf, 2).await?;
        buf.drain(..2);
    }
}

async fn answer(
    socket: &mut TcpStream,
    status: &str,
    content_type: &str,
    body: &[u8],
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    socket.write_all(head.as_bytes()).await?;
    socket.write_all(body).await
}

/// One Connect envelope.
fn envelope(flags: u8, json: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(json.len() + 5);
    out.push(flags);
    out.extend_from_slice(&(json.len() as u32).to_be_bytes());
    out.extend_from_slice(json);
    out
}

async fn write_chunk(socket: &mut TcpStream, data: &[u8]) -> std::io::Result<()> {
    socket
        .write_all(format!("{:x}\r\n", data.len()).as_bytes())
        .await?;
    socket.write_all(data).await?;
    socket.write_all(b"\r\n").await
}

/// The bytes of stdout a command line asks for: `echo hi` gives `hi\n`, `head -c N /dev/zero`
/// N zeros.
fn output_of(line: &str) -> (Vec<u8>, u64) {
    if let Some(n) = line
        .strip_prefix("head -c ")
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
    {
        return (Vec::new(), n);
    }
    (
        line.strip_prefix("echo ")
            .unwrap_or("")
            .as_bytes()
            .iter()
            .copied()
            .chain(*b"\n")
            .collect(),
        0,
    )
}

/// base64 of `data` (the standard alphabet with padding).
pub fn base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for group in data.chunks(3) {
        let b = [
            group[0],
            *group.get(1).unwrap_or(&0),
            *group.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= group.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Answers `process.Process/Start` for the command in `request` (one enveloped JSON message).
async fn start_process(socket: &mut TcpStream, request: &[u8]) -> std::io::Result<()> {
    let json: serde_json::Value = serde_json::from_slice(request.get(5..).unwrap_or_default())
        .map_err(std::io::Error::other)?;
    let line = json["process"]["args"]
        .as_array()
        .and_then(|a| a.last())
        .and_then(|v| v.as_str())
        .unwrap_or("")
        .to_owned();
    socket
        .write_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/connect+json\r\ntransfer-encoding: chunked\r\n\r\n",
        )
        .await?;
    write_chunk(socket, &envelope(0, br#"{"event":{"start":{"pid":412}}}"#)).await?;
    let (small, zeros) = output_of(&line);
    if !small.is_empty() {
        let event = format!(
            r#"{{"event":{{"data":{{"stdout":"{}"}}}}}}"#,
            base64(&small)
        );
        write_chunk(socket, &envelope(0, event.as_bytes())).await?;
    }
    if zeros > 0 {
        let full = format!(
            r#"{{"event":{{"data":{{"stdout":"{}"}}}}}}"#,
            base64(&ZEROS[..DATA_CHUNK])
        );
        let full = envelope(0, full.as_bytes());
        let mut left = zeros;
        while left > 0 {
            if left >= DATA_CHUNK as u64 {
                write_chunk(socket, &full).await?;
                left -= DATA_CHUNK as u64;
            } else {
                let event = format!(
                    r#"{{"event":{{"data":{{"stdout":"{}"}}}}}}"#,
                    base64(&ZEROS[..left as usize])
                );
                write_chunk(socket, &envelope(0, event.as_bytes())).await?;
                left = 0;
            }
        }
    }
    write_chunk(
        socket,
        &envelope(
            0,
            br#"{"event":{"end":{"exited":true,"status":"exit status 0"}}}"#,
        ),
    )
    .await?;
    write_chunk(socket, &envelope(2, b"{}")).await?;
    socket.write_all(b"0\r\n\r\n").await
}

/// Streams `n` zeros with `Content-Length`.
async fn download(socket: &mut TcpStream, n: u64) -> std::io::Result<()> {
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
    Ok(())
}

/// The value of query parameter `name` in `target`.
fn query<'a>(target: &'a str, name: &str) -> Option<&'a str> {
    target
        .split_once('?')?
        .1
        .split('&')
        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
}

async fn connection(mut socket: TcpStream) -> std::io::Result<()> {
    socket.set_nodelay(true)?;
    let mut buf = Vec::with_capacity(64 * 1024);
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
        let mut words = head.split_whitespace();
        let (method, target) = (
            words.next().unwrap_or(""),
            words.next().unwrap_or("").to_owned(),
        );
        let path = target.split('?').next().unwrap_or("").to_owned();
        let keep = path != "/files";
        let (body, _) = read_body(&mut socket, &mut buf, &head, keep).await?;
        match (method, path.as_str()) {
            ("POST", "/v2/sandboxes") => {
                tokio::time::sleep(CREATE_DELAY).await;
                answer(
                    &mut socket,
                    "201 Created",
                    "application/json",
                    created().as_bytes(),
                )
                .await?;
            }
            ("POST", p) if p.starts_with("/v2/sandboxes/") && p.ends_with("/connect") => {
                answer(
                    &mut socket,
                    "200 OK",
                    "application/json",
                    created().as_bytes(),
                )
                .await?;
            }
            ("POST", "/process.Process/Start") => start_process(&mut socket, &body).await?,
            ("GET", "/files") => {
                let n = query(&target, "path")
                    .and_then(|p| p.rsplit("%2F").next())
                    .and_then(|p| p.rsplit('/').next())
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                download(&mut socket, n).await?;
            }
            ("POST", "/files") => {
                let entry = br#"[{"name":"big.bin","path":"/home/user/big.bin","type":"file"}]"#;
                answer(&mut socket, "200 OK", "application/json", entry).await?;
            }
            _ => answer(&mut socket, "404 Not Found", "text/plain", b"not found").await?,
        }
    }
}
