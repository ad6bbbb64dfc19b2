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

/// Credentials in sbox's own environment, which no tool's command may see.
const CREDENTIALS: [(&str, &str); 6] = [
    ("E2B_API_KEY", "e2b_mcp_probe_0123456789"),
    ("DAYTONA_API_KEY", "dtn_mcp_probe_0123456789"),
    ("FLY_API_TOKEN", "fly_mcp_probe_0123456789"),
    ("AWS_SECRET_ACCESS_KEY", "aws_mcp_probe_0123456789"),
    ("OPENAI_API_KEY", "sk-mcp-probe-0123456789"),
    ("ANTHROPIC_API_KEY", "sk-ant-mcp-probe-0123456789"),
];

/// `sbox create --provider local` under `root`: the new sandbox's id.
fn create_local(root: &std::path::Path) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sbox"))
        .args(["create", "--provider", "local"])
        .env("SBOX_LOCAL_ROOT", root)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// `sbox mcp --provider local` and `extra`, with the provider credentials above in its
/// environment.
async fn start_with_credentials(root: tempfile::TempDir, extra: &[&str]) -> Server {
    let command = tokio::process::Command::new(env!("CARGO_BIN_EXE_sbox")).configure(|c| {
        c.args(["mcp", "--provider", "local"])
            .args(extra)
            .env("SBOX_LOCAL_ROOT", root.path().join("root"))
            .envs(CREDENTIALS)
            .stderr(Stdio::inherit());
    });
    let client = ().serve(TokioChildProcess::new(command).unwrap()).await.unwrap();
    Server {
        session: Session { client },
        _root: root,
    }
}

/// `sbox mcp -p local --read-only` offers no tool that runs anything, and its file tools read
/// only inside the sandbox's directory: links planted there to /etc/passwd, to sbox's own
/// /proc/self/environ (which holds its credentials) or to a host file, `..`, and absolute host
/// paths are refused as invalid input, and nothing of them comes back.
#[tokio::test]
async fn read_only_local_runs_nothing_and_reads_only_inside_the_sandbox() {
    let root = tempfile::tempdir().unwrap();
    let id = create_local(&root.path().join("root"));
    let work = root.path().join("root").join(&id).join("work");
    let host = tempfile::tempdir().unwrap();
    std::fs::write(host.path().join("secret.txt"), "host secret\n").unwrap();
    std::fs::write(work.join("notes.txt"), "inside\n").unwrap();
    for (name, to) in [
        ("passwd", std::path::PathBuf::from("/etc/passwd")),
        ("environ", "/proc/self/environ".into()),
        ("proc", "/proc".into()),
        ("secret", host.path().join("secret.txt")),
        ("hostdir", host.path().to_owned()),
    ] {
        std::os::unix::fs::symlink(to, work.join(name)).unwrap();
    }
    let server = start_with_credentials(root, &["--read-only", "--sandbox", &id]).await;

    let tools = server.client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    for runs in [
        "sandbox_run_v1",
        "sandbox_process_start_v1",
        "sandbox_process_kill_v1",
        "sandbox_create_v1",
        "bash",
        "shell",
    ] {
        assert!(
            !names.contains(&runs),
            "{runs} offered read-only: {names:?}"
        );
    }
    assert!(names.contains(&"sandbox_file_read_v1"), "{names:?}");

    let read = server
        .ok("sandbox_file_read_v1", json!({"path": "notes.txt"}))
        .await;
    assert_eq!(text(&read), "inside\n");
    let secret = host.path().join("secret.txt").display().to_string();
    let hostdir = host.path().display().to_string();
    for path in [
        "passwd",
        "environ",
        "proc/self/environ",
        "secret",
        "hostdir/secret.txt",
        "/etc/passwd",
        "/proc/self/environ",
        secret.as_str(),
        "../state",
    ] {
        let wire = server
            .fails("sandbox_file_read_v1", json!({"path": path}))
            .await;
        assert_eq!(
            wire["structuredContent"]["error"]["kind"], "invalid_input",
            "{path}: {wire}"
        );
        let shown = wire.to_string();
        for leaked in ["root:", "host secret", "E2B_API_KEY", "e2b_mcp_probe"] {
            assert!(!shown.contains(leaked), "{path} leaked {leaked}: {shown}");
        }
    }
    for path in ["hostdir", "proc", "/", "/etc", hostdir.as_str()] {
        let wire = server
            .fails("sandbox_file_list_v1", json!({"path": path}))
            .await;
        assert_eq!(
            wire["structuredContent"]["error"]["kind"], "invalid_input",
            "{path}: {wire}"
        );
    }
    for path in ["/etc/passwd", "hostdir/secret.txt"] {
        let wire = server
            .fails("sandbox_file_stat_v1", json!({"path": path}))
            .await;
        assert_eq!(
            wire["structuredContent"]["error"]["kind"], "invalid_input",
            "{path}: {wire}"
        );
    }
    server.stop().await;
}

/// The provider credentials in sbox's environment never reach a command a tool runs on
/// `local`: `env` through the run tool shows none of their names or values.
#[tokio::test]
async fn tool_commands_never_see_sboxs_credentials() {
    let server = start_with_credentials(tempfile::tempdir().unwrap(), &[]).await;
    server
        .ok("sandbox_create_v1", json!({"idempotency_key": "env"}))
        .await;
    let ran = server.ok("sandbox_run_v1", json!({"command": "env"})).await;
    let env = ran["structuredContent"]["stdout"]["text"].as_str().unwrap();
    assert!(env.contains("PATH="), "env did not run: {ran}");
    for (name, value) in CREDENTIALS {
        assert!(!env.contains(name), "{name} reached the command: {env}");
        assert!(!env.contains(value), "{name}'s value reached the command");
    }
    assert!(!ran.to_string().contains("_mcp_probe"), "{ran}");
    server.stop().await;
}

/// A 1x1 PNG.
const PNG_1X1: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

/// `sandbox_run_code_v1` is listed on `local` (its emulated kernel), keeps state between calls,
/// and a PNG the cell displays reaches the client as an MCP image block after the text.
#[tokio::test]
async fn run_code_is_listed_and_returns_images_as_image_blocks() {
    let server = start(&[]).await;
    let tools = server.client.list_all_tools().await.unwrap();
    let tool = tools
        .iter()
        .find(|t| t.name == "sandbox_run_code_v1")
        .expect("sandbox_run_code_v1 listed");
    assert_eq!(tool.input_schema["required"], json!(["code"]));
    server
        .ok("sandbox_create_v1", json!({"idempotency_key": "code"}))
        .await;
    server
        .ok("sandbox_run_code_v1", json!({"code": "x = 41"}))
        .await;
    let code = format!(
        "import base64\nclass Dot:\n    def _repr_png_(self):\n        return base64.b64decode('{PNG_1X1}')\ndisplay(Dot())\nx + 1"
    );
    let wire = server
        .ok("sandbox_run_code_v1", json!({"code": code}))
        .await;
    let content = wire["content"].as_array().unwrap();
    assert_eq!(content.len(), 2, "{wire}");
    assert_eq!(content[0]["type"], "text");
    assert!(text(&wire).contains("\n42\n"), "{wire}");
    assert_eq!(content[1]["type"], "image");
    assert_eq!(content[1]["mimeType"], "image/png");
    assert_eq!(content[1]["data"], PNG_1X1);
    assert_eq!(
        wire["structuredContent"]["images"][0]["mime_type"],
        "image/png"
    );
    assert!(!wire["structuredContent"].to_string().contains(PNG_1X1));
    server.stop().await;
}
