//! Loopback servers for the tests that need more control than wiremock gives: raw HTTP/1.1
//! Connect streams written envelope by envelope, and servers that go silent.

#![allow(dead_code)] // Each test binary uses its own subset.

/// One Connect envelope: `[flags][u32 length][json]`.
pub fn envelope(flags: u8, json: &str) -> Vec<u8> {
    let mut out = vec![flags];
    out.extend_from_slice(&(json.len() as u32).to_be_bytes());
    out.extend_from_slice(json.as_bytes());
    out
}

/// Accepts one connection on `listener`, reads one request (head and `Content-Length` body),
/// and answers with the head of a chunked Connect stream; the caller writes the envelopes.
/// Returns the connection and the request head in lower case.
pub async fn accept_stream(listener: &tokio::net::TcpListener) -> (tokio::net::TcpStream, String) {
    use tokio::io::AsyncWriteExt;
    let (mut conn, _) = listener.accept().await.unwrap();
    let (head, _) = read_request(&mut conn).await;
    conn.write_all(
        b"HTTP/1.1 200 OK\r\ncontent-type: application/connect+json\r\ntransfer-encoding: chunked\r\n\r\n",
    )
    .await
    .unwrap();
    (conn, head)
}

/// Reads one request from `conn`: its head (in lower case) and its body, sized by
/// `Content-Length` or, when chunked, read to the last chunk (the body must not itself hold
/// `\r\n0\r\n\r\n`). The body comes back still chunk-encoded when it was sent chunked.
pub async fn read_request(conn: &mut tokio::net::TcpStream) -> (String, Vec<u8>) {
    use tokio::io::AsyncReadExt;
    let mut data = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let head_end = loop {
        let n = conn.read(&mut buf).await.unwrap();
        assert!(n > 0, "client closed before sending a request");
        data.extend_from_slice(&buf[..n]);
        if let Some(i) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&data[..head_end]).to_ascii_lowercase();
    let chunked = head.contains("transfer-encoding: chunked");
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map(|v| v.trim().parse().unwrap())
        .unwrap_or(0);
    let done = |data: &[u8]| {
        if chunked {
            data[head_end..].ends_with(b"0\r\n\r\n")
                && (data.len() == head_end + 5 || data.ends_with(b"\r\n0\r\n\r\n"))
        } else {
            data.len() >= head_end + length
        }
    };
    while !done(&data) {
        let n = conn.read(&mut buf).await.unwrap();
        assert!(n > 0, "client closed inside the request body");
        data.extend_from_slice(&buf[..n]);
    }
    (head, data.split_off(head_end))
}

/// Writes `data` as one HTTP/1.1 chunk (an empty `data` ends the body).
pub async fn write_chunk(conn: &mut tokio::net::TcpStream, data: &[u8]) {
    use tokio::io::AsyncWriteExt;
    let mut out = format!("{:x}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    conn.write_all(&out).await.unwrap();
    conn.flush().await.unwrap();
}

/// An envd on loopback that never finishes opening a stream: with `head`, it answers the
/// response head of a Connect stream and then sends nothing; without, it never answers at all.
/// Connections are held open until the test ends.
pub async fn stalled_envd(head: bool) -> String {
    use tokio::io::AsyncReadExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let mut conn = if head {
                accept_stream(&listener).await.0
            } else {
                listener.accept().await.unwrap().0
            };
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                while let Ok(n) = conn.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                }
            });
        }
    });
    url
}
