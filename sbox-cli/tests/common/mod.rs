//! An rmcp client session against `sbox mcp`, and the tool round trip every transport passes.

#![allow(dead_code)] // each test binary uses its own part

use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RoleClient, RunningService};
use serde_json::{Value, json};

/// A connected rmcp client.
pub struct Session {
    pub client: RunningService<RoleClient, ()>,
}

impl Session {
    /// Calls a tool; a protocol-level failure fails the test.
    pub async fn call(&self, name: &str, args: Value) -> CallToolResult {
        let Value::Object(args) = args else {
            panic!("arguments must be an object")
        };
        self.client
            .call_tool(CallToolRequestParams::new(name.to_owned()).with_arguments(args))
            .await
            .unwrap_or_else(|e| panic!("{name} failed at the protocol level: {e}"))
    }

    /// Calls a tool that must succeed; returns the result as JSON.
    pub async fn ok(&self, name: &str, args: Value) -> Value {
        let result = self.call(name, args).await;
        let wire = serde_json::to_value(&result).unwrap();
        assert_ne!(wire["isError"], true, "{name}: {wire}");
        wire
    }

    /// Calls a tool that must fail; returns the result as JSON.
    pub async fn fails(&self, name: &str, args: Value) -> Value {
        let wire = serde_json::to_value(self.call(name, args).await).unwrap();
        assert_eq!(wire["isError"], true, "{name}: {wire}");
        wire
    }

    /// Closes the session.
    pub async fn stop(self) {
        self.client.cancel().await.unwrap();
    }
}

/// The first text block of a result.
pub fn text(wire: &Value) -> &str {
    wire["content"][0]["text"].as_str().unwrap()
}

/// The handshake named the server and offered the tools an agent needs.
pub async fn lists_the_tools(session: &Session) {
    let info = session.client.peer_info().expect("server info");
    assert_eq!(info.server_info.as_ref().unwrap().name, "sbox");
    assert!(info.capabilities.tools.is_some());
    let tools = session.client.list_all_tools().await.unwrap();
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
}

/// create, run, write, str_replace, read and apply_patch, end to end.
pub async fn round_trip(session: &Session, key: &str) {
    let created = session
        .ok("sandbox_create_v1", json!({"idempotency_key": key}))
        .await;
    assert!(
        created["structuredContent"]["sandbox_id"].is_string(),
        "{created}"
    );

    let ran = session
        .ok(
            "sandbox_run_v1",
            json!({"command": "echo out; echo err >&2; exit 3"}),
        )
        .await;
    assert_eq!(ran["structuredContent"]["exit_code"], 3);
    assert_eq!(ran["structuredContent"]["stdout"]["text"], "out\n");
    assert_eq!(ran["structuredContent"]["stderr"]["text"], "err\n");

    session
        .ok(
            "sandbox_file_write_v1",
            json!({"path": "app.py", "content": "print('hello')\nx = 1\n"}),
        )
        .await;
    session
        .ok(
            "sandbox_editor_v1",
            json!({"command": "str_replace", "path": "app.py", "old_str": "x = 1", "new_str": "x = 2"}),
        )
        .await;
    let read = session
        .ok("sandbox_file_read_v1", json!({"path": "app.py"}))
        .await;
    assert_eq!(text(&read), "print('hello')\nx = 2\n");

    let patch = "*** Begin Patch\n*** Update File: app.py\n@@\n-x = 2\n+x = 3\n*** Add File: notes.md\n+# notes\n*** End Patch";
    session
        .ok("sandbox_apply_patch_v1", json!({"patch": patch}))
        .await;
    let read = session
        .ok("sandbox_file_read_v1", json!({"path": "app.py"}))
        .await;
    assert_eq!(text(&read), "print('hello')\nx = 3\n");
    let ran = session
        .ok("sandbox_run_v1", json!({"command": "cat notes.md"}))
        .await;
    assert_eq!(ran["structuredContent"]["stdout"]["text"], "# notes\n");
}
