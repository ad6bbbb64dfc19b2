//! `sbox mcp --provider local --http 127.0.0.1:0` driven by rmcp's streamable HTTP client: the
//! printed URL, the round trip, one tool state per MCP session, a shared one for session-less
//! (2026-07-28) clients, and the HTTP guards (unknown path, foreign Host, foreign Origin).

mod common;

use common::{Session, lists_the_tools, round_trip};
use rmcp::model::ProtocolVersion;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientLifecycleMode, ClientServiceExt, ServiceExt};
use serde_json::json;
use std::process::Stdio;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

/// A running `sbox mcp --http`, killed when dropped.
struct Server {
    url: String,
    _child: tokio::process::Child,
    _root: tempfile::TempDir,
}

async fn start() -> Server {
    let root = tempfile::tempdir().unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_sbox"))
        .args(["mcp", "--provider", "local", "--http", "127.0.0.1:0"])
        .env("SBOX_LOCAL_ROOT", root.path().join("root"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .await
        .unwrap();
    let url = line.trim().to_owned();
    assert!(
        url.starts_with("http://127.0.0.1:") && url.ends_with("/mcp"),
        "sbox printed {line:?}"
    );
    Server {
        url,
        _child: child,
        _root: root,
    }
}

impl Server {
    /// A client that initializes, so the server gives it a session.
    async fn session(&self) -> Session {
        let transport = StreamableHttpClientTransport::from_uri(self.url.as_str());
        Session {
            client: ().serve(transport).await.expect("initialize"),
        }
    }

    /// A client of the session-less protocol (no initialize, no session).
    async fn sessionless(&self) -> Session {
        let transport = StreamableHttpClientTransport::from_uri(self.url.as_str());
        let lifecycle = ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        };
        Session {
            client: ().serve_with_lifecycle(transport, lifecycle).await.expect("discover"),
        }
    }

    /// Sends one raw HTTP/1.1 request and returns the status code.
    async fn raw(&self, path: &str, headers: &[(&str, &str)]) -> u16 {
        let authority = self
            .url
            .trim_start_matches("http://")
            .trim_end_matches("/mcp");
        let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;
        let mut request = format!(
            "POST {path} HTTP/1.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n",
            body.len()
        );
        if !headers.iter().any(|(name, _)| *name == "Host") {
            request.push_str(&format!("Host: {authority}\r\n"));
        }
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str("\r\n");
        request.push_str(body);
        let mut stream = tokio::net::TcpStream::connect(authority).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut head = [0u8; 12];
        stream.read_exact(&mut head).await.unwrap();
        let status = std::str::from_utf8(&head[9..12]).unwrap();
        status.parse().unwrap()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_round_trip_over_streamable_http() {
    let server = start().await;
    let session = server.session().await;
    lists_the_tools(&session).await;
    round_trip(&session, "mcp-http").await;
    session.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn each_session_has_its_own_current_sandbox() {
    let server = start().await;
    let first = server.session().await;
    let second = server.session().await;
    first
        .ok("sandbox_create_v1", json!({"idempotency_key": "first"}))
        .await;
    first
        .ok(
            "sandbox_file_write_v1",
            json!({"path": "who", "content": "first\n"}),
        )
        .await;
    // The second session has created nothing, so it has no current sandbox.
    let wire = second
        .fails("sandbox_run_v1", json!({"command": "cat who"}))
        .await;
    assert!(common::text(&wire).contains("no current sandbox"), "{wire}");
    second
        .ok("sandbox_create_v1", json!({"idempotency_key": "second"}))
        .await;
    let ran = second
        .ok(
            "sandbox_run_v1",
            json!({"command": "cat who 2>/dev/null || echo none"}),
        )
        .await;
    assert_eq!(ran["structuredContent"]["stdout"]["text"], "none\n");
    let ran = first
        .ok("sandbox_run_v1", json!({"command": "cat who"}))
        .await;
    assert_eq!(ran["structuredContent"]["stdout"]["text"], "first\n");
    first.stop().await;
    second.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn session_less_clients_share_one_tool_state() {
    let server = start().await;
    let one = server.sessionless().await;
    let other = server.sessionless().await;
    lists_the_tools(&one).await;
    one.ok("sandbox_create_v1", json!({"idempotency_key": "shared"}))
        .await;
    one.ok(
        "sandbox_file_write_v1",
        json!({"path": "note", "content": "kept\n"}),
    )
    .await;
    // Each request stands alone on the wire, yet the current sandbox is still there, for
    // this client and for any other session-less one.
    let ran = other
        .ok("sandbox_run_v1", json!({"command": "cat note"}))
        .await;
    assert_eq!(ran["structuredContent"]["stdout"]["text"], "kept\n");
    one.stop().await;
    other.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn only_the_endpoint_loopback_hosts_and_loopback_origins_are_served() {
    let server = start().await;
    assert_eq!(server.raw("/mcp", &[]).await, 200);
    assert_eq!(server.raw("/", &[]).await, 404);
    assert_eq!(server.raw("/other", &[]).await, 404);
    // DNS rebinding: a page on another name resolved to 127.0.0.1.
    assert_eq!(
        server.raw("/mcp", &[("Host", "evil.example.com")]).await,
        403
    );
    assert_eq!(
        server
            .raw("/mcp", &[("Origin", "http://evil.example.com")])
            .await,
        403
    );
    assert_eq!(
        server
            .raw("/mcp", &[("Origin", "http://localhost:3000")])
            .await,
        200
    );
}

#[tokio::test]
async fn a_busy_address_is_an_error_naming_it() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_sbox"))
        .args(["mcp", "--provider", "local", "--http", &addr])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("cannot listen on {addr}")),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "no URL for a server that is not up");
}
