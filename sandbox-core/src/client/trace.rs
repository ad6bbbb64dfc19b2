//! Tracing: one `sandbox` span per operation, with fields `provider`, `operation`, `sandbox_id`
//! (for `create`, recorded once the sandbox exists) and `attempt` (recorded by the retry layer when it retries inside the span, which also emits
//! a `retrying` event there). A failed operation emits a `debug` event with the error.

use crate::access::{PreviewLink, SshAccess};
use crate::capability::Capabilities;
use crate::code::{CodeContext, CodeRun, ContextSpec, RunCode};
use crate::error::Result;
use crate::exec::{Command, Process, ProcessInfo};
use crate::files::{Download, FileInfo, ListOptions, Transfer, UploadBody};
use crate::fleet::{PrepareSpec, Prepared, Usage};
use crate::lifecycle::{CreateSpec, ListFilter, Metrics, SandboxInfo, SnapshotInfo};
use crate::provider::{FileEventStream, Provider, Sandbox, SandboxStream};
use async_trait::async_trait;
use bytes::Bytes;
use futures::{Stream, StreamExt};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tracing::{Instrument, Span, field};

fn span(provider: &str, operation: &'static str, sandbox_id: Option<&str>) -> Span {
    let span = tracing::info_span!(
        "sandbox",
        provider = provider,
        operation = operation,
        sandbox_id = field::Empty,
        attempt = field::Empty,
    );
    if let Some(id) = sandbox_id {
        span.record("sandbox_id", id);
    }
    span
}

async fn traced<T>(span: Span, call: impl Future<Output = Result<T>>) -> Result<T> {
    let result = call.instrument(span.clone()).await;
    if let Err(error) = &result {
        span.in_scope(|| tracing::debug!(error = %error, kind = ?error.kind(), "failed"));
    }
    result
}

/// A provider whose operations run in `tracing` spans.
#[derive(Debug, Clone)]
pub struct TraceProvider {
    inner: Arc<dyn Provider>,
}

impl TraceProvider {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Provider>) -> Self {
        TraceProvider { inner }
    }
}

struct InSpan<S> {
    span: Span,
    inner: S,
}

impl<S: Stream + Unpin> Stream for InSpan<S> {
    type Item = S::Item;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        let this = &mut *self;
        let _entered = this.span.enter();
        this.inner.poll_next_unpin(cx)
    }
}

#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl Provider for TraceProvider {
    fn wrapped(&self) -> Option<&dyn Provider> {
        Some(self.inner.as_ref())
    }

    fn name(&self) -> &str {
        self.inner.name()
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    async fn create(&self, spec: &CreateSpec) -> Result<Box<dyn Sandbox>> {
        let span = span(self.inner.name(), "create", None);
        let sandbox = traced(span.clone(), self.inner.create(spec)).await?;
        span.record("sandbox_id", sandbox.id());
        Ok(Box::new(TraceSandbox { inner: sandbox }))
    }
    async fn connect(&self, id: &str) -> Result<Box<dyn Sandbox>> {
        let sandbox = traced(
            span(self.inner.name(), "connect", Some(id)),
            self.inner.connect(id),
        )
        .await?;
        Ok(Box::new(TraceSandbox { inner: sandbox }))
    }
    fn list(&self, filter: &ListFilter) -> SandboxStream<'_> {
        InSpan {
            span: span(self.inner.name(), "list", None),
            inner: self.inner.list(filter),
        }
        .boxed()
    }
    async fn destroy(&self, id: &str) -> Result<()> {
        traced(
            span(self.inner.name(), "destroy", Some(id)),
            self.inner.destroy(id),
        )
        .await
    }
    async fn find_by_idempotency_key(&self, key: &str) -> Result<Option<SandboxInfo>> {
        traced(
            span(self.inner.name(), "find_by_idempotency_key", None),
            self.inner.find_by_idempotency_key(key),
        )
        .await
    }
    async fn usage(&self, sandbox: &SandboxInfo, to: std::time::SystemTime) -> Result<Usage> {
        traced(
            span(self.inner.name(), "usage", Some(&sandbox.id)),
            self.inner.usage(sandbox, to),
        )
        .await
    }
    async fn prepare(&self, spec: &PrepareSpec) -> Result<Prepared> {
        traced(
            span(self.inner.name(), "prepare", None),
            self.inner.prepare(spec),
        )
        .await
    }
}

/// A sandbox whose operations run in `tracing` spans.
#[derive(Debug)]
pub struct TraceSandbox {
    inner: Box<dyn Sandbox>,
}

impl TraceSandbox {
    fn span(&self, operation: &'static str) -> Span {
        span(self.inner.provider(), operation, Some(self.inner.id()))
    }
}

#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl Sandbox for TraceSandbox {
    fn wrapped(&self) -> Option<&dyn Sandbox> {
        Some(self.inner.as_ref())
    }

    fn id(&self) -> &str {
        self.inner.id()
    }
    fn provider(&self) -> &str {
        self.inner.provider()
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    async fn info(&self) -> Result<SandboxInfo> {
        traced(self.span("info"), self.inner.info()).await
    }
    async fn exec(&self, command: &Command) -> Result<Process> {
        traced(self.span("exec"), self.inner.exec(command)).await
    }
    async fn processes(&self) -> Result<Vec<ProcessInfo>> {
        traced(self.span("processes"), self.inner.processes()).await
    }
    async fn attach(&self, pid: &str) -> Result<Process> {
        traced(self.span("attach"), self.inner.attach(pid)).await
    }
    async fn kill_process(&self, pid: &str) -> Result<()> {
        traced(self.span("kill_process"), self.inner.kill_process(pid)).await
    }
    async fn upload(&self, path: &str, body: UploadBody) -> Result<Transfer> {
        traced(self.span("upload"), self.inner.upload(path, body)).await
    }
    async fn write_file(&self, path: &str, data: Bytes) -> Result<Transfer> {
        traced(self.span("write_file"), self.inner.write_file(path, data)).await
    }
    async fn download(&self, path: &str) -> Result<Download> {
        traced(self.span("download"), self.inner.download(path)).await
    }
    async fn list_files(&self, path: &str, options: ListOptions) -> Result<Vec<FileInfo>> {
        traced(
            self.span("list_files"),
            self.inner.list_files(path, options),
        )
        .await
    }
    async fn stat(&self, path: &str) -> Result<FileInfo> {
        traced(self.span("stat"), self.inner.stat(path)).await
    }
    async fn mkdir(&self, path: &str) -> Result<()> {
        traced(self.span("mkdir"), self.inner.mkdir(path)).await
    }
    async fn remove(&self, path: &str) -> Result<()> {
        traced(self.span("remove"), self.inner.remove(path)).await
    }
    async fn rename(&self, from: &str, to: &str) -> Result<()> {
        traced(self.span("rename"), self.inner.rename(from, to)).await
    }
    async fn watch(&self, path: &str, recursive: bool) -> Result<FileEventStream> {
        traced(self.span("watch"), self.inner.watch(path, recursive)).await
    }
    async fn stop(&self) -> Result<()> {
        traced(self.span("stop"), self.inner.stop()).await
    }
    async fn pause(&self) -> Result<()> {
        traced(self.span("pause"), self.inner.pause()).await
    }
    async fn resume(&self) -> Result<()> {
        traced(self.span("resume"), self.inner.resume()).await
    }
    async fn destroy(&self) -> Result<()> {
        traced(self.span("destroy"), self.inner.destroy()).await
    }
    async fn set_timeout(&self, timeout: Duration) -> Result<()> {
        traced(self.span("set_timeout"), self.inner.set_timeout(timeout)).await
    }
    async fn preview_link(&self, port: u16) -> Result<PreviewLink> {
        traced(self.span("preview_link"), self.inner.preview_link(port)).await
    }
    async fn ssh_access(&self, ttl: Duration) -> Result<SshAccess> {
        traced(self.span("ssh_access"), self.inner.ssh_access(ttl)).await
    }
    async fn fork(&self) -> Result<Box<dyn Sandbox>> {
        let forked = traced(self.span("fork"), self.inner.fork()).await?;
        Ok(Box::new(TraceSandbox { inner: forked }))
    }
    async fn snapshot(&self, name: Option<&str>) -> Result<SnapshotInfo> {
        traced(self.span("snapshot"), self.inner.snapshot(name)).await
    }
    async fn metrics(&self) -> Result<Metrics> {
        traced(self.span("metrics"), self.inner.metrics()).await
    }
    async fn create_code_context(&self, spec: &ContextSpec) -> Result<CodeContext> {
        traced(
            self.span("create_code_context"),
            self.inner.create_code_context(spec),
        )
        .await
    }
    async fn list_code_contexts(&self) -> Result<Vec<CodeContext>> {
        traced(
            self.span("list_code_contexts"),
            self.inner.list_code_contexts(),
        )
        .await
    }
    async fn restart_code_context(&self, id: &str) -> Result<()> {
        traced(
            self.span("restart_code_context"),
            self.inner.restart_code_context(id),
        )
        .await
    }
    async fn remove_code_context(&self, id: &str) -> Result<()> {
        traced(
            self.span("remove_code_context"),
            self.inner.remove_code_context(id),
        )
        .await
    }
    async fn run_code(&self, request: &RunCode) -> Result<CodeRun> {
        traced(self.span("run_code"), self.inner.run_code(request)).await
    }
}
