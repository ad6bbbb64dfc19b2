//! Safety by default: no credential in output, confined paths, timeouts on every call,
//! read-only sets that cannot change anything.

mod common;

use common::{fixture, fixture_with, local};
use sandbox_sdk_core::prelude::*;
use sandbox_sdk_core::{CreateSpec, Level};
use sandbox_tools::{PathPolicy, Redactor, ToolConfig, ToolSet};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

const CANARY: &str = "canary-credential-0123456789";

#[tokio::test]
async fn known_secrets_never_appear_in_output() {
    let f = fixture_with(
        "redact",
        ToolConfig {
            redactor: Redactor::new().with_secret(CANARY),
            ..ToolConfig::default()
        },
        |b| b.anthropic(true).openai(true),
    )
    .await;
    let line = format!("echo {CANARY}; echo {CANARY} >&2");
    let results = vec![
        f.call("sandbox_run_v1", json!({"command": line})).await,
        f.call("bash", json!({"command": line})).await,
        f.call("shell", json!({"commands": [line]})).await,
        f.call(
            "sandbox_file_write_v1",
            json!({"path": "s.txt", "content": format!("{CANARY}\n")}),
        )
        .await,
        f.call("sandbox_file_read_v1", json!({"path": "s.txt"}))
            .await,
        f.call(
            "sandbox_editor_v1",
            json!({"command": "view", "path": "s.txt"}),
        )
        .await,
        // Error text passes through the same filter.
        f.call(
            "sandbox_file_read_v1",
            json!({"path": format!("{CANARY}.txt")}),
        )
        .await,
    ];
    for r in results {
        assert!(!r.text.contains(CANARY), "{}", r.text);
        assert!(
            !r.structured.to_string().contains(CANARY),
            "{}",
            r.structured
        );
    }
    let r = f.call("sandbox_run_v1", json!({"command": line})).await;
    assert!(r.text.contains("[REDACTED]"), "{}", r.text);
}

#[test]
fn the_default_redactor_knows_the_hosts_credential_variables() {
    // `ToolConfig::default()` reads the credential-looking variables of this process.
    let redactor = ToolConfig::default().redactor;
    for (name, value) in std::env::vars() {
        if sandbox_sdk_core::redact::is_credential_name(&name) && value.len() >= 8 {
            assert!(!redactor.text(&value).contains(&value), "{name}");
        }
    }
}

#[tokio::test]
async fn paths_are_normalised_and_confined() {
    let f = fixture("paths").await;
    f.err(
        "sandbox_file_read_v1",
        json!({"path": "../x"}),
        "invalid_input",
    )
    .await;
    f.err(
        "sandbox_file_read_v1",
        json!({"path": "a\u{0}b"}),
        "invalid_input",
    )
    .await;
    f.err(
        "sandbox_run_v1",
        json!({"command": "true", "cwd": "../.."}),
        "invalid_input",
    )
    .await;
    let patch = "*** Begin Patch\n*** Add File: ../escape.txt\n+x\n*** End Patch";
    f.err(
        "sandbox_apply_patch_v1",
        json!({"patch": patch}),
        "invalid_input",
    )
    .await;

    // Confined to the sandbox's working directory: absolute paths elsewhere are refused.
    let (provider, _dir) = local();
    let sandbox: Arc<dyn Sandbox> = Arc::from(provider.create(&CreateSpec::new()).await.unwrap());
    let pwd = sandbox.run_shell("pwd").await.unwrap().stdout_lossy();
    let root = pwd.trim().to_owned();
    let tools = ToolSet::builder()
        .sandbox(sandbox.clone())
        .config(ToolConfig {
            paths: PathPolicy::confine_to(&root),
            ..ToolConfig::default()
        })
        .build()
        .unwrap();
    let r = tools
        .call("sandbox_file_read_v1", json!({"path": "/etc/hostname"}))
        .await;
    assert_eq!(r.error_kind(), Some("invalid_input"), "{}", r.text);
    assert!(r.text.contains("outside"), "{}", r.text);
    let r = tools
        .call(
            "sandbox_file_write_v1",
            json!({"path": "in.txt", "content": "x"}),
        )
        .await;
    assert_eq!(r.structured["path"], format!("{root}/in.txt"), "{}", r.text);
    let r = tools
        .call(
            "sandbox_file_read_v1",
            json!({"path": format!("{root}/sub/../in.txt")}),
        )
        .await;
    assert_eq!(r.text, "x");
    let r = tools
        .call("sandbox_run_v1", json!({"command": "pwd"}))
        .await;
    assert_eq!(r.structured["stdout"]["text"], format!("{root}\n"));
    let r = tools
        .call("sandbox_file_remove_v1", json!({"path": root.clone()}))
        .await;
    assert_eq!(r.error_kind(), Some("invalid_input"), "{}", r.text);
    sandbox.destroy().await.unwrap();
}

#[tokio::test]
async fn every_call_has_a_timeout() {
    let f = fixture_with(
        "call-timeout",
        ToolConfig {
            default_command_timeout: Duration::from_millis(300),
            max_command_timeout: Duration::from_millis(300),
            ..ToolConfig::default()
        },
        |b| b,
    )
    .await;
    // Asking for more than the maximum gets the maximum.
    let r = f
        .ok(
            "sandbox_run_v1",
            json!({"command": "sleep 30", "timeout_secs": 3600}),
        )
        .await;
    assert_eq!(r.structured["timed_out"], true);

    // Any other call is bounded by call_timeout: a sandbox whose file reads hang forever.
    let (provider, _dir) = local();
    let inner: Arc<dyn Sandbox> = Arc::from(provider.create(&CreateSpec::new()).await.unwrap());
    let tools = ToolSet::builder()
        .sandbox(Arc::new(Hanging(inner.clone())))
        .config(ToolConfig {
            call_timeout: Duration::from_millis(200),
            ..ToolConfig::default()
        })
        .build()
        .unwrap();
    let started = std::time::Instant::now();
    let r = tools
        .call("sandbox_file_stat_v1", json!({"path": "x"}))
        .await;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(r.error_kind(), Some("timeout"), "{}", r.text);
    inner.destroy().await.unwrap();
}

#[tokio::test]
async fn a_read_only_set_cannot_change_anything() {
    let (provider, _dir) = local();
    let sandbox: Arc<dyn Sandbox> = Arc::from(provider.create(&CreateSpec::new()).await.unwrap());
    sandbox
        .write_file("keep.txt", Bytes::from_static(b"keep\n"))
        .await
        .unwrap();
    let tools = ToolSet::builder()
        .sandbox(sandbox.clone())
        .config(ToolConfig {
            read_only: true,
            ..ToolConfig::default()
        })
        .anthropic(true)
        .openai(true)
        .build()
        .unwrap();
    for name in [
        "sandbox_run_v1",
        "sandbox_file_write_v1",
        "bash",
        "shell",
        "apply_patch",
    ] {
        let r = tools.call(name, json!({})).await;
        assert_eq!(r.error_kind(), Some("unknown_tool"), "{name}");
    }
    let r = tools
        .call("sandbox_file_read_v1", json!({"path": "keep.txt"}))
        .await;
    assert_eq!(r.text, "keep\n");
    sandbox.destroy().await.unwrap();
}

#[tokio::test]
async fn a_panicking_provider_is_an_error_result_not_a_crash() {
    let (provider, _dir) = local();
    let inner: Arc<dyn Sandbox> = Arc::from(provider.create(&CreateSpec::new()).await.unwrap());
    let tools = ToolSet::for_sandbox(Arc::new(Hanging(inner.clone()))).unwrap();
    let r = tools
        .call("sandbox_file_mkdir_v1", json!({"path": "x"}))
        .await;
    assert_eq!(r.error_kind(), Some("internal"), "{}", r.text);
    inner.destroy().await.unwrap();
}

/// A sandbox whose `stat` never answers and whose `mkdir` panics; the rest forwards.
#[derive(Debug)]
struct Hanging(Arc<dyn Sandbox>);

#[async_trait]
impl Sandbox for Hanging {
    fn id(&self) -> &str {
        self.0.id()
    }
    fn provider(&self) -> &str {
        self.0.provider()
    }
    fn capabilities(&self) -> sandbox_sdk_core::Capabilities {
        let mut caps = self.0.capabilities();
        caps.files_upload = Level::Native;
        caps
    }
    async fn info(&self) -> sandbox_sdk_core::Result<sandbox_sdk_core::SandboxInfo> {
        self.0.info().await
    }
    async fn exec(
        &self,
        command: &sandbox_sdk_core::Command,
    ) -> sandbox_sdk_core::Result<sandbox_sdk_core::Process> {
        self.0.exec(command).await
    }
    async fn processes(&self) -> sandbox_sdk_core::Result<Vec<sandbox_sdk_core::ProcessInfo>> {
        self.0.processes().await
    }
    async fn attach(&self, pid: &str) -> sandbox_sdk_core::Result<sandbox_sdk_core::Process> {
        self.0.attach(pid).await
    }
    async fn kill_process(&self, pid: &str) -> sandbox_sdk_core::Result<()> {
        self.0.kill_process(pid).await
    }
    async fn upload(
        &self,
        path: &str,
        body: sandbox_sdk_core::UploadBody,
    ) -> sandbox_sdk_core::Result<sandbox_sdk_core::Transfer> {
        self.0.upload(path, body).await
    }
    async fn write_file(
        &self,
        path: &str,
        data: Bytes,
    ) -> sandbox_sdk_core::Result<sandbox_sdk_core::Transfer> {
        self.0.write_file(path, data).await
    }
    async fn download(&self, path: &str) -> sandbox_sdk_core::Result<sandbox_sdk_core::Download> {
        self.0.download(path).await
    }
    async fn list_files(
        &self,
        path: &str,
        options: sandbox_sdk_core::ListOptions,
    ) -> sandbox_sdk_core::Result<Vec<sandbox_sdk_core::FileInfo>> {
        self.0.list_files(path, options).await
    }
    async fn stat(&self, _path: &str) -> sandbox_sdk_core::Result<sandbox_sdk_core::FileInfo> {
        futures::future::pending().await
    }
    async fn mkdir(&self, _path: &str) -> sandbox_sdk_core::Result<()> {
        panic!("mkdir exploded")
    }
    async fn remove(&self, path: &str) -> sandbox_sdk_core::Result<()> {
        self.0.remove(path).await
    }
    async fn rename(&self, from: &str, to: &str) -> sandbox_sdk_core::Result<()> {
        self.0.rename(from, to).await
    }
    async fn watch(
        &self,
        path: &str,
        recursive: bool,
    ) -> sandbox_sdk_core::Result<sandbox_sdk_core::FileEventStream> {
        self.0.watch(path, recursive).await
    }
    async fn stop(&self) -> sandbox_sdk_core::Result<()> {
        self.0.stop().await
    }
    async fn pause(&self) -> sandbox_sdk_core::Result<()> {
        self.0.pause().await
    }
    async fn resume(&self) -> sandbox_sdk_core::Result<()> {
        self.0.resume().await
    }
    async fn destroy(&self) -> sandbox_sdk_core::Result<()> {
        self.0.destroy().await
    }
    async fn set_timeout(&self, timeout: Duration) -> sandbox_sdk_core::Result<()> {
        self.0.set_timeout(timeout).await
    }
    async fn preview_link(
        &self,
        port: u16,
    ) -> sandbox_sdk_core::Result<sandbox_sdk_core::PreviewLink> {
        let mut link = self.0.preview_link(port).await?;
        link.token = Some("preview-token-abcdef".into());
        link.url = format!("{}/?token=preview-token-abcdef", link.url);
        link.headers
            .insert("X-Access-Token".into(), "preview-token-abcdef".into());
        Ok(link)
    }
    async fn ssh_access(
        &self,
        ttl: Duration,
    ) -> sandbox_sdk_core::Result<sandbox_sdk_core::SshAccess> {
        self.0.ssh_access(ttl).await
    }
    async fn fork(&self) -> sandbox_sdk_core::Result<Box<dyn Sandbox>> {
        self.0.fork().await
    }
    async fn snapshot(
        &self,
        name: Option<&str>,
    ) -> sandbox_sdk_core::Result<sandbox_sdk_core::SnapshotInfo> {
        self.0.snapshot(name).await
    }
    async fn metrics(&self) -> sandbox_sdk_core::Result<sandbox_sdk_core::Metrics> {
        self.0.metrics().await
    }
}

#[tokio::test]
async fn preview_tokens_are_withheld() {
    let (provider, _dir) = local();
    let inner: Arc<dyn Sandbox> = Arc::from(provider.create(&CreateSpec::new()).await.unwrap());
    let tools = ToolSet::for_sandbox(Arc::new(Hanging(inner.clone()))).unwrap();
    let r = tools
        .call("sandbox_preview_link_v1", json!({"port": 3000}))
        .await;
    assert!(!r.is_error, "{}", r.text);
    assert!(!r.text.contains("preview-token-abcdef"), "{}", r.text);
    assert!(!r.structured.to_string().contains("preview-token-abcdef"));
    assert_eq!(r.structured["private"], true);
    assert_eq!(r.structured["headers"]["X-Access-Token"], "[REDACTED]");
    assert!(r.text.contains("X-Access-Token"), "{}", r.text);
    inner.destroy().await.unwrap();
}
