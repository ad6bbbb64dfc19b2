//! What the adapter's tests share: a wiremock control plane and envd on loopback (the provider
//! pointed at it, the answers E2B gives, the mocks most tests mount), and, for the tests that need
//! more control than wiremock gives, raw HTTP/1.1 Connect streams written envelope by envelope and
//! servers that go silent.

#![allow(dead_code)] // Each test binary uses its own subset.

use base64::Engine as _;
use sandbox_e2b::{E2bBuilder, E2bProvider, E2bSandbox};
use std::time::Duration;
use wiremock::matchers::{body_json, header, method, path};
use wiremock::{Mock, MockBuilder, MockServer, Request, ResponseTemplate};

// ---------------------------------------------------------------------------------------------
// wiremock: the provider, E2B's answers, common mocks
// ---------------------------------------------------------------------------------------------

pub const KEY: &str = "e2b_0123456789abcdef0123456789abcdef01234567";
pub const SB: &str = "ilxb3ba8bnc0gpyx3i8ax";
pub const TOKEN: &str = "tok_envd_123";

/// A builder with the key, the control plane and envd all at `server`.
pub fn builder(server: &MockServer) -> E2bBuilder {
    E2bBuilder::new()
        .api_key(KEY)
        .api_url(server.uri())
        .sandbox_url(server.uri())
}

pub fn provider(server: &MockServer) -> E2bProvider {
    builder(server).build().unwrap()
}

/// A provider that polls template builds without waiting (the mock answers at once).
pub fn fast_polling(server: &MockServer) -> E2bProvider {
    builder(server)
        .template_poll_interval(Duration::ZERO)
        .build()
        .unwrap()
}

pub fn created_body(id: &str) -> serde_json::Value {
    serde_json::json!({
        "alias": "base",
        "clientID": "6532622b",
        "envdAccessToken": TOKEN,
        "envdVersion": "0.6.13",
        "sandboxID": id,
        "templateID": "rki5dems9wqfm4r03t7g"
    })
}

pub async fn connected(server: &MockServer) -> E2bSandbox {
    connect_call()
        .and(header("x-api-key", KEY))
        .and(body_json(serde_json::json!({})))
        .respond_with(ResponseTemplate::new(200).set_body_json(created_body(SB)))
        .expect(1)
        .mount(server)
        .await;
    provider(server).connect_sandbox(SB, None).await.unwrap()
}

pub fn stream_body(messages: &[&str], end: &str) -> Vec<u8> {
    let mut body = Vec::new();
    for m in messages {
        body.extend(envelope(0, m));
    }
    body.extend(envelope(2, end));
    body
}

pub fn connect_response(body: Vec<u8>) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_raw(body, "application/connect+json")
}

/// A Connect stream answering `messages` in order, then a clean end of stream.
pub fn events(messages: &[&str]) -> ResponseTemplate {
    connect_response(stream_body(messages, "{}"))
}

/// A mock of the control plane's `POST /v2/sandboxes/{SB}/connect`.
pub fn connect_call() -> MockBuilder {
    Mock::given(method("POST")).and(path(format!("/v2/sandboxes/{SB}/connect")))
}

/// Mounts what connecting to (or resuming) `SB` with a TTL of `seconds` sends, each once: the
/// connect asking for it (answered with `status` and [`created_body`]), then the
/// `POST /sandboxes/{SB}/timeout` that sets exactly it (connect only ever extends a TTL).
pub async fn mount_connect_with_ttl(server: &MockServer, seconds: u64, status: u16) {
    connect_call()
        .and(body_json(serde_json::json!({ "timeout": seconds })))
        .respond_with(ResponseTemplate::new(status).set_body_json(created_body(SB)))
        .expect(1)
        .mount(server)
        .await;
    mount_ttl(server, seconds, 1).await;
}

/// Mounts `POST /sandboxes/{SB}/timeout` setting a TTL of `seconds`, answered 204, expected
/// `times` times.
pub async fn mount_ttl(server: &MockServer, seconds: u64, times: u64) {
    set_ttl_call(seconds)
        .respond_with(ResponseTemplate::new(204))
        .expect(times)
        .mount(server)
        .await;
}

/// A mock of the control plane's `POST /sandboxes/{SB}/timeout` asking for a TTL of `seconds`.
pub fn set_ttl_call(seconds: u64) -> MockBuilder {
    Mock::given(method("POST"))
        .and(path(format!("/sandboxes/{SB}/timeout")))
        .and(body_json(serde_json::json!({ "timeout": seconds })))
}

/// A mock of envd's `POST /filesystem.Filesystem/Stat` of `path`.
pub fn stat_call(path_: &str) -> MockBuilder {
    Mock::given(method("POST"))
        .and(path("/filesystem.Filesystem/Stat"))
        .and(body_json(serde_json::json!({ "path": path_ })))
}

/// envd's Connect answer to a `Stat` of a `path` that does not exist.
pub fn stat_missing(path_: &str) -> ResponseTemplate {
    ResponseTemplate::new(404).set_body_raw(
        format!(
            r#"{{"code":"not_found","message":"file not found: stat {path_}: no such file or directory"}}"#
        ),
        "application/json",
    )
}

/// A mock of envd's `POST /process.Process/Start` (exec's Connect stream).
pub fn process_start() -> MockBuilder {
    Mock::given(method("POST")).and(path("/process.Process/Start"))
}

pub fn request_envelope_json(req: &Request) -> serde_json::Value {
    let body = &req.body;
    assert!(body.len() >= 5, "request is not enveloped");
    assert_eq!(body[0], 0);
    let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
    assert_eq!(body.len(), 5 + len);
    serde_json::from_slice(&body[5..]).unwrap()
}

pub fn b64(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// The methods and paths the server saw, in order.
pub async fn seen(server: &MockServer) -> Vec<String> {
    server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .map(|r| format!("{} {}", r.method, r.url.path()))
        .collect()
}

/// A sandbox whose envd is `envd_url` (a raw loopback server) and whose control plane is `server`.
pub async fn connected_to(server: &MockServer, envd_url: &str) -> E2bSandbox {
    connected_with_timeout(server, envd_url, None).await
}

/// A sandbox whose envd is `envd_url`, with a client request timeout of `timeout`.
pub async fn connected_with_timeout(
    server: &MockServer,
    envd_url: &str,
    timeout: Option<Duration>,
) -> E2bSandbox {
    connect_call()
        .respond_with(ResponseTemplate::new(200).set_body_json(created_body(SB)))
        .expect(1)
        .mount(server)
        .await;
    let mut builder = builder(server).sandbox_url(envd_url);
    if let Some(timeout) = timeout {
        builder = builder.request_timeout(timeout);
    }
    builder
        .build()
        .unwrap()
        .connect_sandbox(SB, None)
        .await
        .unwrap()
}

// ---------------------------------------------------------------------------------------------
// wiremock: templates (PROTOCOL.md §2.6)
// ---------------------------------------------------------------------------------------------

/// `GET /templates/aliases/{name}`: the alias of template `Some(id)`, or 404 for `None`.
pub fn template_alias(name: &str, found: Option<&str>) -> Mock {
    let call = Mock::given(method("GET")).and(path(format!("/templates/aliases/{name}")));
    match found {
        Some(id) => call.respond_with(
            ResponseTemplate::new(200)
                .set_body_json(serde_json::json!({"templateID": id, "public": false})),
        ),
        None => call.respond_with(
            ResponseTemplate::new(404)
                .set_body_string(r#"{"code":404,"message":"template not found"}"#),
        ),
    }
}

/// A mock of `POST /v3/templates`.
pub fn create_template_call() -> MockBuilder {
    Mock::given(method("POST")).and(path("/v3/templates"))
}

/// The answer to `POST /v3/templates`: template `id`, its new build `build`, named `names`.
pub fn template_created(id: &str, build: &str, names: &[&str]) -> ResponseTemplate {
    ResponseTemplate::new(202).set_body_json(serde_json::json!({
        "templateID": id, "buildID": build, "public": false, "names": names, "tags": [],
        "aliases": names
    }))
}

/// A mock of `POST /v2/templates/{id}/builds/{build}` (the build start).
pub fn start_build_call(id: &str, build: &str) -> MockBuilder {
    Mock::given(method("POST")).and(path(format!("/v2/templates/{id}/builds/{build}")))
}

/// `GET /templates/{id}/builds/{build}/status` answering `status` (with `reason`, if any).
pub fn build_status(id: &str, build: &str, status: &str, reason: Option<&str>) -> Mock {
    let mut body = serde_json::json!({
        "templateID": id, "buildID": build, "status": status, "logs": [], "logEntries": []
    });
    if let Some(reason) = reason {
        body["reason"] = serde_json::json!({ "message": reason });
    }
    Mock::given(method("GET"))
        .and(path(format!("/templates/{id}/builds/{build}/status")))
        .respond_with(ResponseTemplate::new(200).set_body_json(body))
}

/// `GET /templates/{id}` answering a `TemplateWithBuilds` with `(buildID, status, createdAt)`
/// builds.
pub fn template_builds(id: &str, builds: &[(&str, &str, &str)]) -> Mock {
    Mock::given(method("GET"))
        .and(path(format!("/templates/{id}")))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "templateID": id, "public": false, "aliases": [], "names": [],
            "createdAt": "2026-12-01T00:00:00Z", "updatedAt": "2026-12-01T00:00:00Z",
            "lastSpawnedAt": null, "spawnCount": 0,
            "builds": builds.iter().map(|(b, status, at)| serde_json::json!({
                "buildID": b, "status": status, "createdAt": at, "updatedAt": at,
                "cpuCount": 2, "memoryMB": 2048
            })).collect::<Vec<_>>()
        })))
}

/// Mounts a template `name` that does not exist, and the build of it as `id`/`build` that
/// `prepare` then starts, whose status always reads `status` (with `reason`, if any).
pub async fn mount_new_build(
    server: &MockServer,
    name: &str,
    (id, build): (&str, &str),
    status: &str,
    reason: Option<&str>,
) {
    template_alias(name, None).mount(server).await;
    create_template_call()
        .respond_with(template_created(id, build, &[]))
        .mount(server)
        .await;
    start_build_call(id, build)
        .respond_with(ResponseTemplate::new(202))
        .mount(server)
        .await;
    build_status(id, build, status, reason).mount(server).await;
}

// ---------------------------------------------------------------------------------------------
// raw loopback servers
// ---------------------------------------------------------------------------------------------

/// A loopback listener to serve a raw envd on, and its URL.
pub async fn raw_envd() -> (tokio::net::TcpListener, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    (listener, url)
}

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
