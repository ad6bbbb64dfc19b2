//! `sbox mcp --provider local` driven over stdio by rmcp's own client: the handshake, the tool
//! listing, and run / write / str_replace / read / apply_patch end to end.

mod common;

use common::{Session, lists_the_tools, round_trip, text};
use rmcp::ServiceExt;
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use serde_json::json;
use std::process::Stdio;

struct Server {
    session: Session,
    _root: tempfile::TempDir,
}

impl std::ops::Deref for Server {
    type Target = Session;
    fn deref(&self) -> &Session {
        &self.session
    }
}

async fn start(extra: &[&str]) -> Server {
    let root = tempfile::tempdir().unwrap();
    let command = tokio::process::Command::new(env!("CARGO_BIN_EXE_sbox")).configure(|c| {
        c.args(["mcp", "--provider", "local"])
            .args(extra)
            .env("SBOX_LOCAL_ROOT", root.path().join("root"))
            .stderr(Stdio::inherit());
    });
    let transport = TokioChildProcess::new(command).unwrap();
    let client = ().serve(transport).await.expect("initialize");
    Server {
        session: Session { client },
        _root: root,
    }
}

impl Server {
    async fn stop(self) {
        self.session.stop().await;
    }
}

#[tokio::test]
async fn initialize_and_list_the_tools() {
    let server = start(&[]).await;
    lists_the_tools(&server).await;
    server.stop().await;
}

#[tokio::test]
async fn read_only_lists_only_read_only_tools() {
    let server = start(&["--read-only"]).await;
    let tools = server.client.list_all_tools().await.unwrap();
    assert!(!tools.is_empty());
    for tool in &tools {
        let read_only = tool.annotations.as_ref().and_then(|a| a.read_only_hint);
        assert_eq!(read_only, Some(true), "{} is offered read-only", tool.name);
    }
    assert!(!tools.iter().any(|t| t.name == "sandbox_run_v1"));
    server.stop().await;
}

#[tokio::test]
async fn run_write_str_replace_read_apply_patch_end_to_end() {
    let server = start(&[]).await;
    round_trip(&server, "mcp-e2e").await;
    server.stop().await;
}

#[tokio::test]
async fn failures_are_tool_results_not_protocol_errors() {
    let server = start(&[]).await;
    // No sandbox yet: the tool says what to do.
    let result = server
        .call("sandbox_run_v1", json!({"command": "true"}))
        .await;
    assert_eq!(result.is_error, Some(true));
    // Bad input and unknown tools too.
    server
        .ok("sandbox_create_v1", json!({"idempotency_key": "errors"}))
        .await;
    let wire = serde_json::to_value(
        server
            .call("sandbox_editor_v1", json!({"command": "str_replace", "path": "none.txt", "old_str": "a", "new_str": "b"}))
            .await,
    )
    .unwrap();
    assert_eq!(wire["isError"], true);
    assert_eq!(
        wire["structuredContent"]["error"]["kind"], "not_found",
        "{wire}"
    );
    let wire = serde_json::to_value(server.call("no_such_tool", json!({})).await).unwrap();
    assert_eq!(wire["isError"], true);
    assert_eq!(wire["structuredContent"]["error"]["kind"], "unknown_tool");
    server.stop().await;
}

#[tokio::test]
async fn a_sandbox_bound_by_id_from_an_earlier_process() {
    let root = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sbox"))
        .args(["create", "--provider", "local"])
        .env("SBOX_LOCAL_ROOT", root.path().join("root"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let id = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    std::fs::write(
        root.path().join("root").join(&id).join("work/seen.txt"),
        "yes\n",
    )
    .unwrap();

    let command = tokio::process::Command::new(env!("CARGO_BIN_EXE_sbox")).configure(|c| {
        c.args(["mcp", "--provider", "local", "--sandbox", &id])
            .env("SBOX_LOCAL_ROOT", root.path().join("root"));
    });
    let client = ().serve(TokioChildProcess::new(command).unwrap()).await.unwrap();
    let server = Server {
        session: Session { client },
        _root: root,
    };
    let read = server
        .ok("sandbox_file_read_v1", json!({"path": "seen.txt"}))
        .await;
    assert_eq!(text(&read), "yes\n");
    server.stop().await;
}
