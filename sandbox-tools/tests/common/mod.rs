//! Shared test helpers: a local provider in a private temp root, a wrapper provider whose
//! capability map a test sets, and a tool set with a current sandbox.
#![allow(dead_code)]

use sandbox_sdk_core::local::LocalProvider;
use sandbox_sdk_core::prelude::*;
use sandbox_sdk_core::{Capabilities, CreateSpec, ListFilter, Result, SandboxStream};
use sandbox_tools::{ToolConfig, ToolResult, ToolSet, ToolSetBuilder};
use serde_json::{Value, json};
use std::sync::Arc;

/// A provider that forwards to another but declares the capabilities a test gives it.
#[derive(Debug)]
pub struct CapsProvider {
    pub inner: Arc<dyn Provider>,
    pub caps: Capabilities,
}

#[async_trait]
impl Provider for CapsProvider {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn capabilities(&self) -> Capabilities {
        self.caps
    }
    async fn create(&self, spec: &CreateSpec) -> Result<Box<dyn Sandbox>> {
        self.inner.create(spec).await
    }
    async fn connect(&self, id: &str) -> Result<Box<dyn Sandbox>> {
        self.inner.connect(id).await
    }
    fn list(&self, filter: &ListFilter) -> SandboxStream<'_> {
        self.inner.list(filter)
    }
    async fn destroy(&self, id: &str) -> Result<()> {
        self.inner.destroy(id).await
    }
    async fn find_by_idempotency_key(
        &self,
        key: &str,
    ) -> Result<Option<sandbox_sdk_core::SandboxInfo>> {
        self.inner.find_by_idempotency_key(key).await
    }
    async fn usage(
        &self,
        sandbox: &sandbox_sdk_core::SandboxInfo,
        to: std::time::SystemTime,
    ) -> Result<sandbox_sdk_core::fleet::Usage> {
        self.inner.usage(sandbox, to).await
    }
    async fn prepare(
        &self,
        spec: &sandbox_sdk_core::fleet::PrepareSpec,
    ) -> Result<sandbox_sdk_core::fleet::Prepared> {
        self.inner.prepare(spec).await
    }
}

/// A local provider keeping its sandboxes under a fresh temp directory.
pub fn local() -> (Arc<LocalProvider>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let provider = Arc::new(LocalProvider::with_root(dir.path().join("root")));
    (provider, dir)
}

pub struct Fixture {
    pub tools: ToolSet,
    pub provider: Arc<LocalProvider>,
    pub sandbox_id: String,
    _dir: tempfile::TempDir,
}

impl Fixture {
    pub async fn call(&self, name: &str, input: Value) -> ToolResult {
        self.tools.call(name, input).await
    }

    /// Calls a tool that must succeed.
    pub async fn ok(&self, name: &str, input: Value) -> ToolResult {
        let r = self.call(name, input).await;
        assert!(!r.is_error, "{name} failed: {}", r.text);
        r
    }

    /// Calls a tool that must fail with `kind`.
    pub async fn err(&self, name: &str, input: Value, kind: &str) -> ToolResult {
        let r = self.call(name, input).await;
        assert!(r.is_error, "{name} should have failed: {}", r.text);
        assert_eq!(r.error_kind(), Some(kind), "{}", r.text);
        assert!(r.text.contains("what to do: "), "{}", r.text);
        r
    }
}

/// A tool set over a fresh local provider, with a sandbox created through sandbox_create_v1.
pub async fn fixture_with(
    key: &str,
    config: ToolConfig,
    customize: impl FnOnce(ToolSetBuilder) -> ToolSetBuilder,
) -> Fixture {
    let (provider, dir) = local();
    let builder = ToolSet::builder()
        .provider(provider.clone())
        .config(ToolConfig {
            owner: format!("test-{key}"),
            ..config
        });
    let tools = customize(builder).build().unwrap();
    let created = tools
        .call("sandbox_create_v1", json!({"idempotency_key": key}))
        .await;
    assert!(!created.is_error, "{}", created.text);
    let sandbox_id = created.structured["sandbox_id"]
        .as_str()
        .unwrap()
        .to_owned();
    Fixture {
        tools,
        provider,
        sandbox_id,
        _dir: dir,
    }
}

pub async fn fixture(key: &str) -> Fixture {
    fixture_with(key, ToolConfig::default(), |b| b).await
}
