//! Anthropic's `bash` and `str_replace_based_edit_tool`, OpenAI's `shell` and `apply_patch`,
//! mapped onto the same implementations.

mod common;

use common::fixture_with;
use sandbox_tools::{Family, ToolConfig};
use serde_json::json;

async fn vendor_fixture(key: &str) -> common::Fixture {
    fixture_with(key, ToolConfig::default(), |b| {
        b.anthropic(true).openai(true)
    })
    .await
}

#[tokio::test]
async fn anthropic_bash_runs_commands_and_accepts_restart() {
    let f = vendor_fixture("bash").await;
    let r = f
        .ok("bash", json!({"command": "echo hi; echo oops >&2; exit 2"}))
        .await;
    assert_eq!(r.text, "hi\n<stderr>\noops\n\n</stderr>\n[exit code 2]");
    assert_eq!(r.structured["exit_code"], 2);
    let r = f.ok("bash", json!({"restart": true})).await;
    assert_eq!(r.text, "tool has been restarted.");
    f.err("bash", json!({}), "invalid_input").await;
    let spec = f.tools.get("bash").unwrap().spec();
    assert_eq!(spec.family, Family::Anthropic);
    assert_eq!(
        spec.to_anthropic(),
        json!({"type": "bash_20250124", "name": "bash"})
    );
}

#[tokio::test]
async fn anthropic_bash_keeps_its_working_directory_across_calls() {
    let f = vendor_fixture("bash-cwd").await;
    f.ok("bash", json!({"command": "mkdir -p sub/deeper && cd sub"}))
        .await;
    let r = f.ok("bash", json!({"command": "pwd"})).await;
    assert!(r.text.ends_with("/sub\n"), "{}", r.text);
    assert_eq!(r.structured["stdout"], r.text, "the trailer is not output");
    assert!(r.structured["cwd"].as_str().unwrap().ends_with("/sub"));
    // Relative to where the last call ended, and output without a final newline kept exact.
    f.ok("bash", json!({"command": "cd deeper; printf here"}))
        .await;
    let r = f
        .ok("bash", json!({"command": "printf %s \"${PWD##*/}\""}))
        .await;
    assert_eq!(r.text, "deeper");
    // Only the directory persists: each call is a new process.
    f.ok("bash", json!({"command": "export SBOX_X=1"})).await;
    let r = f
        .ok("bash", json!({"command": "echo \"[${SBOX_X:-unset}]\""}))
        .await;
    assert_eq!(r.text, "[unset]\n");
    // A failing command still moves the directory it cd'ed to, and keeps its exit code.
    let r = f.ok("bash", json!({"command": "cd .. && false"})).await;
    assert_eq!(r.structured["exit_code"], 1);
    let r = f.ok("bash", json!({"command": "basename \"$PWD\""})).await;
    assert_eq!(r.text, "sub\n");
    // `exit` ends the shell before it can report: the next call starts where this one did.
    let r = f.ok("bash", json!({"command": "cd / && exit 5"})).await;
    assert_eq!(r.structured["exit_code"], 5);
    let r = f.ok("bash", json!({"command": "basename \"$PWD\""})).await;
    assert_eq!(r.text, "sub\n");
    // A directory removed under it: said on stderr, and the call runs anyway.
    f.ok("bash", json!({"command": "cd deeper"})).await;
    f.ok("bash", json!({"command": "rmdir ../deeper"})).await;
    let r = f.ok("bash", json!({"command": "echo still"})).await;
    assert!(r.text.starts_with("still\n"), "{}", r.text);
    assert!(
        r.structured["stderr"]
            .as_str()
            .unwrap()
            .contains("the working directory"),
        "{}",
        r.text
    );
    // The standard run tool is unaffected: it starts in the sandbox's directory every time.
    let start = f.ok("bash", json!({"command": "cd /tmp"})).await;
    assert_eq!(start.structured["cwd"], "/tmp");
    let r = f.ok("sandbox_run_v1", json!({"command": "pwd"})).await;
    assert_ne!(r.structured["stdout"]["text"], "/tmp\n");
    // restart starts over in the default directory.
    f.ok("bash", json!({"restart": true})).await;
    let r = f.ok("bash", json!({"command": "pwd"})).await;
    assert_ne!(r.text, "/tmp\n");
}

#[tokio::test]
async fn anthropic_editor_is_the_same_editor() {
    let f = vendor_fixture("anthropic-editor").await;
    let ed = "str_replace_based_edit_tool";
    f.ok(
        ed,
        json!({"command": "create", "path": "a.txt", "file_text": "x\ny\n"}),
    )
    .await;
    f.ok(
        ed,
        json!({"command": "str_replace", "path": "a.txt", "old_str": "y", "new_str": "z"}),
    )
    .await;
    let v = f.ok(ed, json!({"command": "view", "path": "a.txt"})).await;
    assert_eq!(v.text, "     1\tx\n     2\tz\n");
    assert_eq!(
        f.tools.get(ed).unwrap().spec().to_anthropic(),
        json!({"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"})
    );
}

#[tokio::test]
async fn openai_shell_runs_each_command_and_reports_outcomes() {
    let f = vendor_fixture("shell").await;
    let r = f
        .ok(
            "shell",
            json!({"commands": ["echo a", "echo b >&2; exit 4"], "max_output_length": 1000}),
        )
        .await;
    assert_eq!(
        r.structured,
        json!({
            "output": [
                {"stdout": "a\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}},
                {"stdout": "", "stderr": "b\n", "outcome": {"type": "exit", "exit_code": 4}},
            ],
            "max_output_length": 1000,
        })
    );
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&r.text).unwrap(),
        r.structured
    );
    let r = f
        .ok(
            "shell",
            json!({"commands": ["sleep 30", "echo never"], "timeout_ms": 300}),
        )
        .await;
    assert_eq!(
        r.structured["output"][0]["outcome"],
        json!({"type": "timeout"})
    );
    assert_eq!(
        r.structured["output"][1]["outcome"],
        json!({"type": "timeout"})
    );
    f.err("shell", json!({"commands": []}), "invalid_input")
        .await;
    assert_eq!(
        f.tools.get("shell").unwrap().spec().to_openai(),
        json!({"type": "shell"})
    );
}

#[tokio::test]
async fn openai_apply_patch_creates_updates_and_deletes() {
    let f = vendor_fixture("openai-patch").await;
    let r = f
        .ok(
            "apply_patch",
            json!({"type": "create_file", "path": "hello.py", "diff": "+def greet():\n+    print(\"Hi\")\n"}),
        )
        .await;
    assert_eq!(r.structured["status"], "completed");
    f.ok(
        "apply_patch",
        json!({"type": "update_file", "path": "hello.py", "diff": "@@ def greet():\n-    print(\"Hi\")\n+    print(\"Hello\")\n"}),
    )
    .await;
    let read = f
        .ok("sandbox_file_read_v1", json!({"path": "hello.py"}))
        .await;
    assert_eq!(read.text, "def greet():\n    print(\"Hello\")\n");
    let r = f
        .err(
            "apply_patch",
            json!({"type": "update_file", "path": "hello.py", "diff": "@@\n-nope\n+x\n"}),
            "not_found",
        )
        .await;
    assert!(r.text.contains("hunk 1 of hello.py"), "{}", r.text);
    f.err(
        "apply_patch",
        json!({"type": "update_file", "path": "hello.py"}),
        "invalid_input",
    )
    .await;
    f.ok(
        "apply_patch",
        json!({"type": "delete_file", "path": "hello.py"}),
    )
    .await;
    let s = f
        .ok("sandbox_file_stat_v1", json!({"path": "hello.py"}))
        .await;
    assert_eq!(s.structured["exists"], false);
    assert_eq!(
        f.tools.get("apply_patch").unwrap().spec().to_openai(),
        json!({"type": "apply_patch"})
    );
}

#[tokio::test]
async fn standard_tools_render_as_function_tools_for_either_vendor() {
    let f = vendor_fixture("function-shapes").await;
    let spec = f.tools.get("sandbox_run_v1").unwrap().spec();
    let openai = spec.to_openai();
    assert_eq!(openai["type"], "function");
    assert_eq!(openai["name"], "sandbox_run_v1");
    assert_eq!(openai["parameters"]["type"], "object");
    let anthropic = spec.to_anthropic();
    assert_eq!(anthropic["input_schema"]["required"], json!(["command"]));
    let mcp = spec.to_mcp();
    assert_eq!(mcp["annotations"]["destructiveHint"], true);
    assert_eq!(mcp["inputSchema"]["type"], "object");
}
