//! `sbox mcp --provider local` driven over stdio by rmcp's own client: the handshake, the tool
//! listing, and run / write / str_replace / read / apply_patch end to end.

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use serde_json::{Value, json};
use std::process::Stdio;

struct Server {
    client: RunningService<RoleClient, ()>,
    _root: tempfile::TempDir,
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
        client,
        _root: root,
    }
}

impl Server {
    async fn call(&self, name: &str, args: Value) -> CallToolResult {
        let Value::Object(args) = args else {
            panic!("arguments must be an object")
        };
        self.client
            .call_tool(CallToolRequestParams::new(name.to_owned()).with_arguments(args))
            .await
            .unwrap_or_else(|e| panic!("{name} failed at the protocol level: {e}"))
    }

    async fn ok(&self, name: &str, args: Value) -> Value {
        let result = self.call(name, args).await;
        let wire = serde_json::to_value(&result).unwrap();
        assert_ne!(wire["isError"], true, "{name}: {wire}");
        wire
    }

    async fn stop(self) {
        self.client.cancel().await.unwrap();
    }
}

fn text(wire: &Value) -> &str {
    wire["content"][0]["text"].as_str().unwrap()
}

#[tokio::test]
async fn initialize_and_list_the_tools() {
    let server = start(&[]).await;
    let info = server.client.peer_info().expect("server info");
    assert_eq!(info.server_info.as_ref().unwrap().name, "sbox");
    assert!(info.capabilities.tools.is_some());
    let tools = server.client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    for expected in [
        "sandbox_create_v1",
        "sandbox_run_v1",
        "sandbox_file_write_v1",
        "sandbox_file_read_v1",
        "sandbox_editor_v1",
        "sandbox_apply_patch_v1",
    ] {
        assert!(
            names.contains(&expected),
            "{expected} missing from {names:?}"
        );
    }
    let run = tools.iter().find(|t| t.name == "sandbox_run_v1").unwrap();
    assert_eq!(run.input_schema["type"], "object");
    let annotations = run.annotations.as_ref().unwrap();
    assert_eq!(annotations.destructive_hint, Some(true));
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
    let created = server
        .ok("sandbox_create_v1", json!({"idempotency_key": "mcp-e2e"}))
        .await;
    assert!(
        created["structuredContent"]["sandbox_id"].is_string(),
        "{created}"
    );

    let ran = server
        .ok(
            "sandbox_run_v1",
            json!({"command": "echo out; echo err >&2; exit 3"}),
        )
        .await;
    assert_eq!(ran["structuredContent"]["exit_code"], 3);
    assert_eq!(ran["structuredContent"]["stdout"]["text"], "out\n");
    assert_eq!(ran["structuredContent"]["stderr"]["text"], "err\n");

    server
        .ok(
            "sandbox_file_write_v1",
            json!({"path": "app.py", "content": "print('hello')\nx = 1\n"}),
        )
        .await;
    server
        .ok(
            "sandbox_editor_v1",
            json!({"command": "str_replace", "path": "app.py", "old_str": "x = 1", "new_str": "x = 2"}),
        )
        .await;
    let read = server
        .ok("sandbox_file_read_v1", json!({"path": "app.py"}))
        .await;
    assert_eq!(text(&read), "print('hello')\nx = 2\n");

    let patch = "*** Begin Patch\n*** Update File: app.py\n@@\n-x = 2\n+x = 3\n*** Add File: notes.md\n+# notes\n*** End Patch";
    server
        .ok("sandbox_apply_patch_v1", json!({"patch": patch}))
        .await;
    let read = server
        .ok("sandbox_file_read_v1", json!({"path": "app.py"}))
        .await;
    assert_eq!(text(&read), "print('hello')\nx = 3\n");
    let ran = server
        .ok("sandbox_run_v1", json!({"command": "cat notes.md"}))
        .await;
    assert_eq!(ran["structuredContent"]["stdout"]["text"], "# notes\n");
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
        client,
        _root: root,
    };
    let read = server
        .ok("sandbox_file_read_v1", json!({"path": "seen.txt"}))
        .await;
    assert_eq!(text(&read), "yes\n");
    server.stop().await;
}
