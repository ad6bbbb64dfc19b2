//! `sbox mcp --provider local --http 127.0.0.1:0` driven by rmcp's streamable HTTP client: the
//! printed URL, the round trip, one tool state per MCP session, a shared one for session-less
//! (2026-07-28) clients, the bearer token (from --token-file, or made and printed at start;
//! --no-auth on loopback only), and the HTTP guards (unknown path, foreign Host, foreign
//! Origin).

mod common;

use common::{Session, lists_the_tools, round_trip};
use rmcp::model::ProtocolVersion;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientLifecycleMode, ClientServiceExt, ServiceExt};
use serde_json::json;
use std::process::Stdio;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

/// The token the tests put in `--token-file`.
const TOKEN: &str = "test-token-0123456789abcdef0123456789abcdef";

/// How a test server is told to authenticate.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Auth {
    /// `--token-file` naming a private file holding [`TOKEN`].
    TokenFile,
    /// No option: the server makes a token and prints it on stderr.
    Generated,
    /// `--no-auth`.
    None,
}

/// A running `sbox mcp --http`, killed when dropped.
struct Server {
    url: String,
    /// The bearer token clients send (none for `--no-auth`).
    token: Option<String>,
    /// The lines the server wrote on stderr, as they come.
    stderr: tokio::sync::Mutex<tokio::sync::mpsc::UnboundedReceiver<String>>,
    /// Where the local provider keeps its sandboxes.
    local_root: std::path::PathBuf,
    _child: tokio::process::Child,
    _root: tempfile::TempDir,
}

/// Writes `content` to a new file in `dir` with mode `mode`.
fn token_file(dir: &std::path::Path, content: &str, mode: u32) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("token");
    std::fs::write(&path, content).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

async fn start() -> Server {
    start_with(Auth::TokenFile).await
}

async fn start_with(auth: Auth) -> Server {
    let root = tempfile::tempdir().unwrap();
    let local_root = root.path().join("root");
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_sbox"));
    command
        .args(["mcp", "--provider", "local", "--http", "127.0.0.1:0"])
        .env("SBOX_LOCAL_ROOT", &local_root)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    match auth {
        Auth::TokenFile => {
            command
                .arg("--token-file")
                .arg(token_file(root.path(), &format!("{TOKEN}\n"), 0o600));
        }
        Auth::Generated => {}
        Auth::None => {
            command.arg("--no-auth");
        }
    }
    let mut child = command.spawn().unwrap();
    // Every stderr line goes to a channel (and on to the test's stderr).
    let (lines, stderr) = tokio::sync::mpsc::unbounded_channel();
    let mut err = BufReader::new(child.stderr.take().unwrap()).lines();
    tokio::spawn(async move {
        while let Ok(Some(line)) = err.next_line().await {
            eprintln!("sbox: {line}");
            let _ = lines.send(line);
        }
    });
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
    let mut server = Server {
        url,
        token: None,
        stderr: tokio::sync::Mutex::new(stderr),
        local_root,
        _child: child,
        _root: root,
    };
    server.token = match auth {
        Auth::TokenFile => Some(TOKEN.to_owned()),
        Auth::Generated => {
            let line = server.stderr_line("Authorization: Bearer ").await;
            let token = line.rsplit(' ').next().unwrap().to_owned();
            Some(token)
        }
        Auth::None => None,
    };
    server
}

impl Server {
    /// The first stderr line (from here on) that contains `needle`. Everything the tests look
    /// for is printed before the URL, so it is already in the pipe; the bound only keeps a
    /// missing line from hanging the test.
    async fn stderr_line(&self, needle: &str) -> String {
        let mut stderr = self.stderr.lock().await;
        let found = tokio::time::timeout(std::time::Duration::from_secs(60), async {
            while let Some(line) = stderr.recv().await {
                if line.contains(needle) {
                    return Some(line);
                }
            }
            None
        })
        .await;
        match found {
            Ok(Some(line)) => line,
            _ => panic!("sbox printed no line with {needle:?} on stderr"),
        }
    }

    /// A client transport's settings, sending `token` as a bearer token if given.
    fn client(&self, token: Option<&str>) -> StreamableHttpClientTransportConfig {
        let config = StreamableHttpClientTransportConfig::with_uri(self.url.as_str());
        match token {
            Some(token) => config.auth_header(token),
            None => config,
        }
    }

    /// A client that initializes, so the server gives it a session.
    async fn session(&self) -> Session {
        Session {
            client: ()
                .serve(StreamableHttpClientTransport::from_config(
                    self.client(self.token.as_deref()),
                ))
                .await
                .expect("initialize"),
        }
    }

    /// A client of the session-less protocol (no initialize, no session).
    async fn sessionless(&self) -> Session {
        let lifecycle = ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        };
        Session {
            client: ()
                .serve_with_lifecycle(
                    StreamableHttpClientTransport::from_config(self.client(self.token.as_deref())),
                    lifecycle,
                )
                .await
                .expect("discover"),
        }
    }

    /// The `Authorization` header of this server's token, if it has one.
    fn authorization(&self) -> Vec<(&'static str, String)> {
        self.token
            .iter()
            .map(|t| ("Authorization", format!("Bearer {t}")))
            .collect()
    }

    /// Sends one raw `initialize` with this server's token and returns the status code.
    async fn raw(&self, path: &str, headers: &[(&str, &str)]) -> u16 {
        let mut all: Vec<(&str, String)> = self.authorization();
        all.extend(headers.iter().map(|(n, v)| (*n, (*v).to_owned())));
        self.send(path, &all, INITIALIZE).await.status
    }

    /// Sends one raw HTTP/1.1 POST with exactly these headers (plus the usual MCP ones) and
    /// reads the whole answer.
    async fn send(&self, path: &str, headers: &[(&str, String)], body: &str) -> Answer {
        let authority = self.authority();
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
        let mut stream = tokio::net::TcpStream::connect(&authority).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        // `Connection: close`: the answer ends when the server closes; the bound only keeps a
        // server that does not from hanging the test.
        tokio::time::timeout(
            std::time::Duration::from_secs(60),
            stream.read_to_end(&mut answer),
        )
        .await
        .expect("the server closed the connection")
        .unwrap();
        let answer = String::from_utf8_lossy(&answer).into_owned();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
        let mut lines = head.lines();
        let status = lines.next().unwrap()[9..12].parse().unwrap();
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        Answer {
            status,
            headers,
            body: body.to_owned(),
        }
    }

    fn authority(&self) -> String {
        self.url
            .trim_start_matches("http://")
            .trim_end_matches("/mcp")
            .to_owned()
    }

    /// How many sandboxes the local provider has made.
    fn sandboxes(&self) -> usize {
        std::fs::read_dir(&self.local_root).map_or(0, |d| d.count())
    }
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;

/// A raw HTTP answer.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// A 401 that asks for a bearer token.
    fn is_bearer_challenge(&self) -> bool {
        self.status == 401
            && self
                .header("www-authenticate")
                .is_some_and(|v| v.starts_with("Bearer"))
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
async fn session_less_clients_have_no_current_sandbox_and_name_their_own() {
    let server = start().await;
    let one = server.sessionless().await;
    let other = server.sessionless().await;
    lists_the_tools(&one).await;
    let created = one
        .ok("sandbox_create_v1", json!({"idempotency_key": "shared"}))
        .await;
    let id = created["structuredContent"]["sandbox_id"].clone();
    one.ok(
        "sandbox_file_write_v1",
        json!({"sandbox_id": id, "path": "note", "content": "kept\n"}),
    )
    .await;
    // The requests of clients without a session cannot be told apart, so none of them has a
    // current sandbox: one client's create must not become the target of another's run.
    let unnamed = other
        .fails("sandbox_run_v1", json!({"command": "cat note"}))
        .await;
    assert!(
        unnamed.to_string().contains("sandbox_id is required"),
        "{unnamed}"
    );
    // Named, the sandbox is reachable (same token, same owner).
    let ran = other
        .ok(
            "sandbox_run_v1",
            json!({"sandbox_id": id, "command": "cat note"}),
        )
        .await;
    assert_eq!(ran["structuredContent"]["stdout"]["text"], "kept\n");
    one.stop().await;
    other.stop().await;
}

/// The endpoint is the only path; `Host` must be a loopback name (DNS rebinding: a page on
/// another name resolved to 127.0.0.1) and a browser's `Origin` must be this very server.
async fn only_the_endpoint_loopback_hosts_and_this_origin_are_served(server: &Server) {
    let port = server.authority().rsplit(':').next().unwrap().to_owned();
    assert_eq!(server.raw("/mcp", &[]).await, 200);
    assert_eq!(server.raw("/", &[]).await, 404);
    assert_eq!(server.raw("/other", &[]).await, 404);
    assert_eq!(
        server.raw("/mcp", &[("Host", "evil.example.com")]).await,
        403
    );
    assert_eq!(
        server
            .raw("/mcp", &[("Host", &format!("evil.example.com:{port}"))])
            .await,
        403
    );
    for origin in [
        "http://evil.example.com",
        "null",
        // Another server on this machine is another origin.
        "http://localhost:3000",
        "http://127.0.0.1:1",
    ] {
        assert_eq!(
            server.raw("/mcp", &[("Origin", origin)]).await,
            403,
            "{origin}"
        );
    }
    for origin in [
        format!("http://localhost:{port}"),
        format!("http://127.0.0.1:{port}"),
    ] {
        assert_eq!(
            server.raw("/mcp", &[("Origin", &origin)]).await,
            200,
            "{origin}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn only_the_endpoint_loopback_hosts_and_this_origin_are_served_with_a_token() {
    only_the_endpoint_loopback_hosts_and_this_origin_are_served(&start().await).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn only_the_endpoint_loopback_hosts_and_this_origin_are_served_without_auth() {
    only_the_endpoint_loopback_hosts_and_this_origin_are_served(&start_with(Auth::None).await)
        .await;
}

/// Without the token (none, another, another scheme, two headers) the answer is 401 with a
/// bearer challenge, before any MCP handling: even a request naming a live session reaches no
/// tool. The scheme's case does not matter.
#[tokio::test(flavor = "multi_thread")]
async fn a_request_without_the_token_gets_401_and_reaches_no_tool() {
    let server = start().await;
    let wrong: &[&[(&str, String)]] = &[
        &[],
        &[("Authorization", "Bearer wrong".to_owned())],
        &[("Authorization", format!("Bearer {TOKEN}x"))],
        &[("Authorization", format!("Bearer {}", &TOKEN[1..]))],
        &[("Authorization", format!("Basic {TOKEN}"))],
        &[("Authorization", TOKEN.to_owned())],
        &[("Authorization", "Bearer".to_owned())],
        &[
            ("Authorization", "Bearer wrong".to_owned()),
            ("Authorization", format!("Bearer {TOKEN}")),
        ],
    ];
    for headers in wrong {
        let answer = server.send("/mcp", headers, INITIALIZE).await;
        assert!(
            answer.is_bearer_challenge(),
            "{headers:?}: {}",
            answer.status
        );
        assert!(!answer.body.contains(TOKEN), "{}", answer.body);
    }
    for scheme in ["Bearer", "bearer", "BEARER"] {
        let headers = [("Authorization", format!("{scheme} {TOKEN}"))];
        assert_eq!(server.send("/mcp", &headers, INITIALIZE).await.status, 200);
    }

    // A session opened with the token does not let a request without it through.
    let auth = server.authorization();
    let opened = server.send("/mcp", &auth, INITIALIZE).await;
    let session = opened
        .header("mcp-session-id")
        .expect("a session")
        .to_owned();
    let mut in_session = auth.clone();
    in_session.push(("Mcp-Session-Id", session.clone()));
    in_session.push(("MCP-Protocol-Version", "2025-11-25".to_owned()));
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    assert_eq!(
        server.send("/mcp", &in_session, initialized).await.status,
        202
    );
    let create = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"sandbox_create_v1","arguments":{"idempotency_key":"no-token"}}}"#;
    let without: Vec<(&str, String)> = in_session
        .iter()
        .filter(|(name, _)| *name != "Authorization")
        .cloned()
        .collect();
    let answer = server.send("/mcp", &without, create).await;
    assert!(answer.is_bearer_challenge(), "{}", answer.status);
    assert_eq!(
        server.sandboxes(),
        0,
        "a request without the token made a sandbox"
    );
    // The same request with the token does reach the tool.
    let answer = server.send("/mcp", &in_session, create).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(server.sandboxes(), 1);

    // MCP clients without the token cannot even connect.
    for token in [None, Some("wrong")] {
        let refused = ()
            .serve(StreamableHttpClientTransport::from_config(
                server.client(token),
            ))
            .await;
        assert!(refused.is_err(), "{token:?} connected");
    }
}

/// Runs `sbox mcp --provider local --http ADDR` and `args` to its end. A server that keeps
/// running (these tests are about one that must refuse to start) fails the test after a minute
/// instead of hanging it.
async fn refused_start(addr: &str, args: &[&std::ffi::OsStr]) -> std::process::Output {
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_sbox"))
        .args(["mcp", "--provider", "local", "--http", addr])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    match tokio::time::timeout(std::time::Duration::from_secs(60), child.wait_with_output()).await {
        Ok(out) => out.unwrap(),
        Err(_) => panic!("sbox mcp --http {addr} {args:?} kept serving; it should have refused"),
    }
}

/// With neither --token-file nor --no-auth, the server makes a token (32 random bytes, in
/// hex), prints it once on stderr with how to send it, and requires it.
#[tokio::test(flavor = "multi_thread")]
async fn a_generated_token_is_printed_on_stderr_and_required() {
    let server = start_with(Auth::Generated).await;
    let token = server.token.clone().unwrap();
    assert_eq!(token.len(), 64, "{token}");
    assert!(token.bytes().all(|b| b.is_ascii_hexdigit()), "{token}");
    let other = start_with(Auth::Generated).await;
    assert_ne!(other.token, server.token, "two servers, one token");
    let session = server.session().await;
    lists_the_tools(&session).await;
    session.stop().await;
    assert!(
        server
            .send("/mcp", &[], INITIALIZE)
            .await
            .is_bearer_challenge()
    );
    let refused = ()
        .serve(StreamableHttpClientTransport::from_config(
            server.client(other.token.as_deref()),
        ))
        .await;
    assert!(refused.is_err());
}

/// --no-auth is refused on an address that is not loopback; on loopback it serves without a
/// token and says loudly on stderr that anyone on this machine can use it.
#[tokio::test(flavor = "multi_thread")]
async fn no_auth_is_loopback_only_and_warns() {
    for addr in ["0.0.0.0:0", "[::]:0"] {
        let out = refused_start(addr, &["--no-auth".as_ref()]).await;
        assert_eq!(out.status.code(), Some(1), "{addr}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("--no-auth"), "{stderr}");
        assert!(stderr.contains("loopback"), "{stderr}");
        assert!(
            out.stdout.is_empty(),
            "{addr}: a URL for a server that is not up"
        );
    }
    let server = start_with(Auth::None).await;
    let warning = server.stderr_line("WARNING").await;
    assert!(warning.contains("no authentication"), "{warning}");
    assert_eq!(server.send("/mcp", &[], INITIALIZE).await.status, 200);
    let session = server.session().await;
    lists_the_tools(&session).await;
    session.stop().await;
}

/// A token file that is missing, empty, too short, not one word of visible ASCII, or
/// readable by others is an error naming the file, and nothing is served.
#[tokio::test]
async fn a_bad_token_file_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, u32, &str); 5] = [
        ("", 0o600, "empty"),
        ("short\n", 0o600, "at least"),
        (
            "has a space in it, which no header carries\n",
            0o600,
            "visible",
        ),
        (&format!("{TOKEN}\n"), 0o644, "chmod"),
        (&format!("{TOKEN}\n"), 0o620, "chmod"),
    ];
    for (content, mode, says) in cases {
        let path = token_file(dir.path(), content, mode);
        let out = refused_start("127.0.0.1:0", &["--token-file".as_ref(), path.as_ref()]).await;
        assert_eq!(out.status.code(), Some(1), "{content:?} {mode:o}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(&path.display().to_string()), "{stderr}");
        assert!(stderr.contains(says), "{says}: {stderr}");
        assert!(!stderr.contains(TOKEN), "the token is shown: {stderr}");
        assert!(out.stdout.is_empty());
        std::fs::remove_file(&path).unwrap();
    }
    let missing = dir.path().join("missing");
    let out = refused_start("127.0.0.1:0", &["--token-file".as_ref(), missing.as_ref()]).await;
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains(&missing.display().to_string()));
    // Both at once make no sense.
    let path = token_file(dir.path(), &format!("{TOKEN}\n"), 0o600);
    let both = [
        "--no-auth".as_ref(),
        "--token-file".as_ref(),
        path.as_os_str(),
    ];
    let out = refused_start("127.0.0.1:0", &both).await;
    assert_eq!(out.status.code(), Some(2), "{out:?}");
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
