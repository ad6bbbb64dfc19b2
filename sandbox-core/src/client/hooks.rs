//! Hooks: user callbacks around create, retries and errors.
//!
//! [`HooksProvider`] calls [`Hooks::before_create`] before a create, [`Hooks::after_create`] after
//! one succeeded, and [`Hooks::on_error`] once for each error returned to the caller (from the
//! provider, its list stream, its sandboxes, and their process and download streams), with provider, operation and sandbox id filled
//! in. [`Hooks::on_retry`] is called by the retry layer, [`Hooks::on_fallback`] and
//! [`Hooks::on_fallback_loser`] by the fallback layer; the [`Client`](super::Client) builder
//! connects them.

use super::fallback::{FallbackEvent, LoserEvent};
use super::retry::RetryEvent;
use crate::access::{PreviewLink, SshAccess};
use crate::capability::Capabilities;
use crate::code::{CodeContext, CodeRun, ContextSpec, RunCode};
use crate::error::{Error, Result};
use crate::exec::{Command, Process, ProcessInfo};
use crate::files::{Download, FileInfo, ListOptions, Transfer, UploadBody};
use crate::fleet::{PrepareSpec, Prepared, Usage};
use crate::lifecycle::{CreateSpec, ListFilter, Metrics, SandboxInfo, SnapshotInfo};
use crate::provider::{FileEventStream, Provider, Sandbox, SandboxStream};
use async_trait::async_trait;
use bytes::Bytes;
use futures::{Stream, StreamExt, TryStreamExt};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Callbacks run by the client. Every method has a no-op default; they run inline, so keep them
/// short and non-blocking.
pub trait Hooks: Send + Sync {
    /// Before a create is sent.
    fn before_create(&self, _spec: &CreateSpec) {}
    /// After a create succeeded, with the provider that made the sandbox and its id.
    fn after_create(&self, _provider: &str, _sandbox_id: &str) {}
    /// Before each retry.
    fn on_retry(&self, _event: &RetryEvent<'_>) {}
    /// Each time `create` falls back from one provider to the next.
    fn on_fallback(&self, _event: &FallbackEvent<'_>) {}
    /// When the look-up for a sandbox a provider fallen back from may have made under the
    /// idempotency key ends (destroyed, none appeared, ...).
    fn on_fallback_loser(&self, _event: &LoserEvent<'_>) {}
    /// For each error returned to the caller; its provider, operation and sandbox id are set.
    fn on_error(&self, _error: &Error) {}
}

#[derive(Clone)]
struct Shared(Arc<dyn Hooks>);

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Hooks")
    }
}

impl Shared {
    fn seen<T>(
        &self,
        result: Result<T>,
        provider: &str,
        operation: &str,
        sandbox_id: Option<&str>,
    ) -> Result<T> {
        result.map_err(|error| {
            let error = error.or_context(provider, operation, sandbox_id);
            self.0.on_error(&error);
            error
        })
    }
}

/// A provider that runs [`Hooks`].
#[derive(Debug, Clone)]
pub struct HooksProvider {
    inner: Arc<dyn Provider>,
    hooks: Shared,
}

impl HooksProvider {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Provider>, hooks: Arc<dyn Hooks>) -> Self {
        HooksProvider {
            inner,
            hooks: Shared(hooks),
        }
    }

    fn wrap(&self, sandbox: Box<dyn Sandbox>) -> Box<dyn Sandbox> {
        Box::new(HooksSandbox {
            inner: sandbox,
            hooks: self.hooks.clone(),
        })
    }
}

#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl Provider for HooksProvider {
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
        self.hooks.0.before_create(spec);
        let result = self.inner.create(spec).await;
        let sandbox = self.hooks.seen(result, self.inner.name(), "create", None)?;
        self.hooks.0.after_create(sandbox.provider(), sandbox.id());
        Ok(self.wrap(sandbox))
    }
    async fn connect(&self, id: &str) -> Result<Box<dyn Sandbox>> {
        let result = self.inner.connect(id).await;
        let sandbox = self
            .hooks
            .seen(result, self.inner.name(), "connect", Some(id))?;
        Ok(self.wrap(sandbox))
    }
    fn list(&self, filter: &ListFilter) -> SandboxStream<'_> {
        let hooks = self.hooks.clone();
        let name = self.inner.name();
        self.inner
            .list(filter)
            .map_err(move |error| {
                let error = error.or_context(name, "list", None);
                hooks.0.on_error(&error);
                error
            })
            .boxed()
    }
    async fn destroy(&self, id: &str) -> Result<()> {
        let result = self.inner.destroy(id).await;
        self.hooks
            .seen(result, self.inner.name(), "destroy", Some(id))
    }
    async fn find_by_idempotency_key(&self, key: &str) -> Result<Option<SandboxInfo>> {
        let result = self.inner.find_by_idempotency_key(key).await;
        self.hooks
            .seen(result, self.inner.name(), "find_by_idempotency_key", None)
    }
    async fn usage(&self, sandbox: &SandboxInfo, to: std::time::SystemTime) -> Result<Usage> {
        let result = self.inner.usage(sandbox, to).await;
        self.hooks
            .seen(result, self.inner.name(), "usage", Some(&sandbox.id))
    }
    async fn prepare(&self, spec: &PrepareSpec) -> Result<Prepared> {
        let result = self.inner.prepare(spec).await;
        self.hooks.seen(result, self.inner.name(), "prepare", None)
    }
}

/// A sandbox that reports its errors to [`Hooks::on_error`].
#[derive(Debug)]
pub struct HooksSandbox {
    inner: Box<dyn Sandbox>,
    hooks: Shared,
}

impl HooksSandbox {
    /// Passes errors that arrive later, inside a stream, to `on_error` too.
    fn stream_errors<S, T>(
        &self,
        operation: &'static str,
        items: S,
    ) -> impl Stream<Item = Result<T>> + use<S, T>
    where
        S: Stream<Item = Result<T>>,
    {
        let hooks = self.hooks.clone();
        let provider = self.inner.provider().to_owned();
        let id = self.inner.id().to_owned();
        items.map_err(move |error| {
            let error = error.or_context(&provider, operation, Some(&id));
            hooks.0.on_error(&error);
            error
        })
    }

    fn watch_process(&self, operation: &'static str, process: Process) -> Process {
        process.map_events(|events| self.stream_errors(operation, events).boxed())
    }

    fn seen<T>(&self, operation: &str, result: Result<T>) -> Result<T> {
        self.hooks.seen(
            result,
            self.inner.provider(),
            operation,
            Some(self.inner.id()),
        )
    }
}

#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl Sandbox for HooksSandbox {
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
        self.seen("info", self.inner.info().await)
    }
    async fn exec(&self, command: &Command) -> Result<Process> {
        let process = self.seen("exec", self.inner.exec(command).await)?;
        Ok(self.watch_process("exec", process))
    }
    async fn processes(&self) -> Result<Vec<ProcessInfo>> {
        self.seen("processes", self.inner.processes().await)
    }
    async fn attach(&self, pid: &str) -> Result<Process> {
        let process = self.seen("attach", self.inner.attach(pid).await)?;
        Ok(self.watch_process("attach", process))
    }
    async fn kill_process(&self, pid: &str) -> Result<()> {
        self.seen("kill_process", self.inner.kill_process(pid).await)
    }
    async fn upload(&self, path: &str, body: UploadBody) -> Result<Transfer> {
        self.seen("upload", self.inner.upload(path, body).await)
    }
    async fn write_file(&self, path: &str, data: Bytes) -> Result<Transfer> {
        self.seen("write_file", self.inner.write_file(path, data).await)
    }
    async fn download(&self, path: &str) -> Result<Download> {
        let download = self.seen("download", self.inner.download(path).await)?;
        let emulated = download.is_emulated();
        let chunks = self
            .stream_errors("download", download.into_stream())
            .boxed();
        Ok(if emulated {
            Download::emulated(chunks)
        } else {
            Download::new(chunks)
        })
    }
    async fn list_files(&self, path: &str, options: ListOptions) -> Result<Vec<FileInfo>> {
        self.seen("list_files", self.inner.list_files(path, options).await)
    }
    async fn stat(&self, path: &str) -> Result<FileInfo> {
        self.seen("stat", self.inner.stat(path).await)
    }
    async fn mkdir(&self, path: &str) -> Result<()> {
        self.seen("mkdir", self.inner.mkdir(path).await)
    }
    async fn remove(&self, path: &str) -> Result<()> {
        self.seen("remove", self.inner.remove(path).await)
    }
    async fn rename(&self, from: &str, to: &str) -> Result<()> {
        self.seen("rename", self.inner.rename(from, to).await)
    }
    async fn watch(&self, path: &str, recursive: bool) -> Result<FileEventStream> {
        self.seen("watch", self.inner.watch(path, recursive).await)
    }
    async fn stop(&self) -> Result<()> {
        self.seen("stop", self.inner.stop().await)
    }
    async fn pause(&self) -> Result<()> {
        self.seen("pause", self.inner.pause().await)
    }
    async fn resume(&self) -> Result<()> {
        self.seen("resume", self.inner.resume().await)
    }
    async fn destroy(&self) -> Result<()> {
        self.seen("destroy", self.inner.destroy().await)
    }
    async fn set_timeout(&self, timeout: Duration) -> Result<()> {
        self.seen("set_timeout", self.inner.set_timeout(timeout).await)
    }
    async fn preview_link(&self, port: u16) -> Result<PreviewLink> {
        self.seen("preview_link", self.inner.preview_link(port).await)
    }
    async fn ssh_access(&self, ttl: Duration) -> Result<SshAccess> {
        self.seen("ssh_access", self.inner.ssh_access(ttl).await)
    }
    async fn fork(&self) -> Result<Box<dyn Sandbox>> {
        let forked = self.seen("fork", self.inner.fork().await)?;
        Ok(Box::new(HooksSandbox {
            inner: forked,
            hooks: self.hooks.clone(),
        }))
    }
    async fn snapshot(&self, name: Option<&str>) -> Result<SnapshotInfo> {
        self.seen("snapshot", self.inner.snapshot(name).await)
    }
    async fn metrics(&self) -> Result<Metrics> {
        self.seen("metrics", self.inner.metrics().await)
    }
    async fn create_code_context(&self, spec: &ContextSpec) -> Result<CodeContext> {
        self.seen(
            "create_code_context",
            self.inner.create_code_context(spec).await,
        )
    }
    async fn list_code_contexts(&self) -> Result<Vec<CodeContext>> {
        self.seen("list_code_contexts", self.inner.list_code_contexts().await)
    }
    async fn restart_code_context(&self, id: &str) -> Result<()> {
        self.seen(
            "restart_code_context",
            self.inner.restart_code_context(id).await,
        )
    }
    async fn remove_code_context(&self, id: &str) -> Result<()> {
        self.seen(
            "remove_code_context",
            self.inner.remove_code_context(id).await,
        )
    }
    async fn run_code(&self, request: &RunCode) -> Result<CodeRun> {
        self.seen("run_code", self.inner.run_code(request).await)
    }
}
