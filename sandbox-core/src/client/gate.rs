//! Capability gating: before a call is forwarded, the wrapped provider's or sandbox's
//! [`Capabilities`] are checked against the [`operation`] requirements. An unsupported operation
//! fails with [`ErrorKind::NotSupported`](crate::ErrorKind::NotSupported) naming provider and
//! operation, and the wrapped value receives nothing.
//!
//! Checks: `list` needs `list`; exec with stdin needs `stdin`, in a pty needs `pty`, in the
//! background needs `background`; `processes`/`attach` need `background`; `kill_process` needs
//! `kill_process`; every file operation needs `files_upload` (native or emulated); `watch` needs
//! `files_watch`; `stop`, `pause`, `set_timeout`, `preview_link` (`expose_port`), `ssh_access`
//! (`ssh`), `fork`, `snapshot`, `metrics` need their own; `resume` needs `pause` or `stop`.
//! `usage` needs `usage`. `create`, `connect`, `info`, `destroy` (of a sandbox, or by id) and
//! `find_by_idempotency_key` are never gated.

use crate::access::{PreviewLink, SshAccess};
use crate::capability::{Capabilities, Capability};
use crate::code::{CodeContext, CodeRun, ContextSpec, RunCode};
use crate::error::{Error, Result};
use crate::exec::{Command, Process, ProcessInfo};
use crate::files::{Download, FileInfo, ListOptions, Transfer, UploadBody};
use crate::fleet::{PrepareSpec, Prepared, Usage};
use crate::lifecycle::{CreateSpec, ListFilter, Metrics, SandboxInfo, SnapshotInfo};
use crate::provider::operation::{self, Requirement};
use crate::provider::{FileEventStream, Provider, Sandbox, SandboxStream};
use async_trait::async_trait;
use bytes::Bytes;
use futures::{StreamExt, stream};
use std::sync::Arc;
use std::time::Duration;

fn check(caps: &Capabilities, provider: &str, (op, capability): Requirement) -> Result<()> {
    if caps.level(capability).is_available() {
        Ok(())
    } else {
        Err(Error::not_supported(provider, op))
    }
}

/// The checks made before `exec`: stdin, pty and background each need their capability.
pub fn check_exec(caps: &Capabilities, provider: &str, command: &Command) -> Result<()> {
    if command.stdin {
        check(caps, provider, operation::STDIN)?;
    }
    if command.pty.is_some() {
        check(caps, provider, operation::PTY)?;
    }
    if command.background {
        check(caps, provider, operation::BACKGROUND)?;
    }
    Ok(())
}

/// A provider whose unsupported operations fail before reaching it.
#[derive(Debug, Clone)]
pub struct GateProvider {
    inner: Arc<dyn Provider>,
}

impl GateProvider {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Provider>) -> Self {
        GateProvider { inner }
    }
}

#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl Provider for GateProvider {
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
        let sandbox = self.inner.create(spec).await?;
        Ok(Box::new(GateSandbox { inner: sandbox }))
    }
    async fn connect(&self, id: &str) -> Result<Box<dyn Sandbox>> {
        let sandbox = self.inner.connect(id).await?;
        Ok(Box::new(GateSandbox { inner: sandbox }))
    }
    fn list(&self, filter: &ListFilter) -> SandboxStream<'_> {
        match check(
            &self.inner.capabilities(),
            self.inner.name(),
            operation::LIST,
        ) {
            Ok(()) => self.inner.list(filter),
            Err(error) => stream::once(async { Err(error) }).boxed(),
        }
    }
    async fn destroy(&self, id: &str) -> Result<()> {
        self.inner.destroy(id).await
    }
    async fn find_by_idempotency_key(&self, key: &str) -> Result<Option<SandboxInfo>> {
        self.inner.find_by_idempotency_key(key).await
    }
    async fn usage(&self, sandbox: &SandboxInfo, to: std::time::SystemTime) -> Result<Usage> {
        check(
            &self.inner.capabilities(),
            self.inner.name(),
            operation::USAGE,
        )
        .map_err(|e| e.with_sandbox_id(&sandbox.id))?;
        self.inner.usage(sandbox, to).await
    }
    async fn prepare(&self, spec: &PrepareSpec) -> Result<Prepared> {
        check(
            &self.inner.capabilities(),
            self.inner.name(),
            operation::PREPARE,
        )?;
        self.inner.prepare(spec).await
    }
}

/// A sandbox whose unsupported operations fail before reaching it.
#[derive(Debug)]
pub struct GateSandbox {
    inner: Box<dyn Sandbox>,
}

impl GateSandbox {
    /// Wraps `inner`.
    pub fn new(inner: Box<dyn Sandbox>) -> Self {
        GateSandbox { inner }
    }

    fn require(&self, requirement: Requirement) -> Result<()> {
        check(
            &self.inner.capabilities(),
            self.inner.provider(),
            requirement,
        )
        .map_err(|e| e.with_sandbox_id(self.inner.id()))
    }
}

#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl Sandbox for GateSandbox {
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
        self.inner.info().await
    }
    async fn exec(&self, command: &Command) -> Result<Process> {
        check_exec(&self.inner.capabilities(), self.inner.provider(), command)
            .map_err(|e| e.with_sandbox_id(self.inner.id()))?;
        self.inner.exec(command).await
    }
    async fn processes(&self) -> Result<Vec<ProcessInfo>> {
        self.require(operation::BACKGROUND)?;
        self.inner.processes().await
    }
    async fn attach(&self, pid: &str) -> Result<Process> {
        self.require(operation::BACKGROUND)?;
        self.inner.attach(pid).await
    }
    async fn kill_process(&self, pid: &str) -> Result<()> {
        self.require(operation::KILL_PROCESS)?;
        self.inner.kill_process(pid).await
    }
    async fn upload(&self, path: &str, body: UploadBody) -> Result<Transfer> {
        self.require(operation::FILES)?;
        self.inner.upload(path, body).await
    }
    async fn write_file(&self, path: &str, data: Bytes) -> Result<Transfer> {
        self.require(operation::FILES)?;
        self.inner.write_file(path, data).await
    }
    async fn download(&self, path: &str) -> Result<Download> {
        self.require(operation::FILES)?;
        self.inner.download(path).await
    }
    async fn list_files(&self, path: &str, options: ListOptions) -> Result<Vec<FileInfo>> {
        self.require(operation::FILES)?;
        self.inner.list_files(path, options).await
    }
    async fn stat(&self, path: &str) -> Result<FileInfo> {
        self.require(operation::FILES)?;
        self.inner.stat(path).await
    }
    async fn mkdir(&self, path: &str) -> Result<()> {
        self.require(operation::FILES)?;
        self.inner.mkdir(path).await
    }
    async fn remove(&self, path: &str) -> Result<()> {
        self.require(operation::FILES)?;
        self.inner.remove(path).await
    }
    async fn rename(&self, from: &str, to: &str) -> Result<()> {
        self.require(operation::FILES)?;
        self.inner.rename(from, to).await
    }
    async fn watch(&self, path: &str, recursive: bool) -> Result<FileEventStream> {
        self.require(operation::WATCH)?;
        self.inner.watch(path, recursive).await
    }
    async fn stop(&self) -> Result<()> {
        self.require(operation::STOP)?;
        self.inner.stop().await
    }
    async fn pause(&self) -> Result<()> {
        self.require(operation::PAUSE)?;
        self.inner.pause().await
    }
    async fn resume(&self) -> Result<()> {
        if self.require(operation::PAUSE).is_err() {
            self.require(("resume", Capability::Stop))?;
        }
        self.inner.resume().await
    }
    async fn destroy(&self) -> Result<()> {
        self.inner.destroy().await
    }
    async fn set_timeout(&self, timeout: Duration) -> Result<()> {
        self.require(operation::SET_TIMEOUT)?;
        self.inner.set_timeout(timeout).await
    }
    async fn preview_link(&self, port: u16) -> Result<PreviewLink> {
        self.require(operation::PREVIEW_LINK)?;
        self.inner.preview_link(port).await
    }
    async fn ssh_access(&self, ttl: Duration) -> Result<SshAccess> {
        self.require(operation::SSH_ACCESS)?;
        self.inner.ssh_access(ttl).await
    }
    async fn fork(&self) -> Result<Box<dyn Sandbox>> {
        self.require(operation::FORK)?;
        let forked = self.inner.fork().await?;
        Ok(Box::new(GateSandbox { inner: forked }))
    }
    async fn snapshot(&self, name: Option<&str>) -> Result<SnapshotInfo> {
        self.require(operation::SNAPSHOT)?;
        self.inner.snapshot(name).await
    }
    async fn metrics(&self) -> Result<Metrics> {
        self.require(operation::METRICS)?;
        self.inner.metrics().await
    }
    async fn create_code_context(&self, spec: &ContextSpec) -> Result<CodeContext> {
        self.require(operation::CODE_CONTEXTS)?;
        self.inner.create_code_context(spec).await
    }
    async fn list_code_contexts(&self) -> Result<Vec<CodeContext>> {
        self.require(operation::CODE_CONTEXTS)?;
        self.inner.list_code_contexts().await
    }
    async fn restart_code_context(&self, id: &str) -> Result<()> {
        self.require(operation::CODE_CONTEXTS)?;
        self.inner.restart_code_context(id).await
    }
    async fn remove_code_context(&self, id: &str) -> Result<()> {
        self.require(operation::CODE_CONTEXTS)?;
        self.inner.remove_code_context(id).await
    }
    async fn run_code(&self, request: &RunCode) -> Result<CodeRun> {
        self.require(operation::RUN_CODE)?;
        request
            .validate()
            .map_err(|e| e.with_sandbox_id(self.inner.id()))?;
        self.inner.run_code(request).await
    }
}
