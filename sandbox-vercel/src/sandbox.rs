//! [`VercelSandbox`]: one named sandbox and the session it runs now.

use crate::capabilities::CAPABILITIES;
use crate::config::PROVIDER;
use crate::lifecycle::{self, Handle};
use crate::wire::{NamedSandbox, Route, Session};
use crate::{exec, files};
use async_trait::async_trait;
use bytes::Bytes;
use sandbox_sdk_core::code::kernel::EmulatedKernels;
use sandbox_sdk_core::code::{CodeContext, CodeRun, ContextSpec, RunCode};
use sandbox_sdk_core::{
    Capabilities, Command, Download, FileInfo, ListOptions, PreviewLink, Process, ProcessInfo,
    Result, Sandbox, SandboxInfo, SnapshotInfo, Transfer, UploadBody,
};
use std::fmt;
use std::time::Duration;

/// A Vercel sandbox. Its id is the sandbox's name; the session commands and files go to is
/// the one the last answer named (see the crate docs).
#[derive(Clone)]
pub struct VercelSandbox {
    handle: Handle,
    /// The code contexts, run by core's emulated kernel over a command with stdin
    /// (PROTOCOL.md §6.6).
    kernels: EmulatedKernels,
}

impl fmt::Debug for VercelSandbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VercelSandbox")
            .field("name", &self.handle.name)
            .field(
                "session",
                &self.handle.seen().session.map(|s| (s.id, s.status)),
            )
            .finish()
    }
}

impl VercelSandbox {
    pub(crate) fn new(handle: Handle) -> VercelSandbox {
        VercelSandbox {
            handle,
            kernels: EmulatedKernels::new(),
        }
    }

    /// The sandbox's name (its id).
    pub fn name(&self) -> &str {
        &self.handle.name
    }

    /// The sandbox as last seen.
    pub fn sandbox(&self) -> NamedSandbox {
        self.handle.seen().sandbox
    }

    /// The current session as last seen.
    pub fn session(&self) -> Option<Session> {
        self.handle.seen().session
    }

    /// The routes of the current session's declared ports, as last seen.
    pub fn routes(&self) -> Vec<Route> {
        self.handle.seen().routes
    }

    /// Sends `signal` (a POSIX number: 15 SIGTERM, 2 SIGINT, ...) to command `pid`.
    pub async fn signal(&self, pid: &str, signal: i32) -> Result<()> {
        exec::signal(&self.handle, pid, signal).await
    }

    /// Forks this sandbox under `name` (default: a name Vercel picks) from its latest snapshot (PROTOCOL.md §10.2: never from the running session's live disk).
    pub async fn fork_named(&self, name: Option<&str>) -> Result<VercelSandbox> {
        Ok(VercelSandbox::new(
            lifecycle::fork(&self.handle, name).await?,
        ))
    }
}

#[async_trait]
impl Sandbox for VercelSandbox {
    fn id(&self) -> &str {
        &self.handle.name
    }

    fn provider(&self) -> &str {
        PROVIDER
    }

    fn capabilities(&self) -> Capabilities {
        CAPABILITIES
    }

    async fn info(&self) -> Result<SandboxInfo> {
        lifecycle::refresh(&self.handle).await
    }

    async fn exec(&self, command: &Command) -> Result<Process> {
        exec::exec(&self.handle, command).await
    }

    async fn processes(&self) -> Result<Vec<ProcessInfo>> {
        exec::processes(&self.handle).await
    }

    async fn attach(&self, pid: &str) -> Result<Process> {
        exec::attach(&self.handle, pid).await
    }

    /// Sends SIGKILL to command `pid` ([`VercelSandbox::signal`] sends others).
    async fn kill_process(&self, pid: &str) -> Result<()> {
        exec::signal(&self.handle, pid, crate::config::KILL_SIGNAL).await
    }

    async fn upload(&self, path: &str, body: UploadBody) -> Result<Transfer> {
        files::upload(&self.handle, path, body).await
    }

    async fn write_file(&self, path: &str, data: Bytes) -> Result<Transfer> {
        files::write_file(&self.handle, path, data).await
    }

    async fn download(&self, path: &str) -> Result<Download> {
        files::download(&self.handle, path).await
    }

    /// Over a command (`find`, PROTOCOL.md §7.4).
    async fn list_files(&self, path: &str, options: ListOptions) -> Result<Vec<FileInfo>> {
        files::scripts(&self.handle).list(path, options).await
    }

    /// Over a command (`stat`, PROTOCOL.md §7.4).
    async fn stat(&self, path: &str) -> Result<FileInfo> {
        files::scripts(&self.handle).stat(path).await
    }

    async fn mkdir(&self, path: &str) -> Result<()> {
        files::mkdir(&self.handle, path).await
    }

    /// Over a command (`rm -rf`, PROTOCOL.md §7.4).
    async fn remove(&self, path: &str) -> Result<()> {
        files::scripts(&self.handle).remove(path).await
    }

    /// Over a command (`mv`, PROTOCOL.md §7.4).
    async fn rename(&self, from: &str, to: &str) -> Result<()> {
        files::scripts(&self.handle).rename(from, to).await
    }

    async fn stop(&self) -> Result<()> {
        lifecycle::stop(&self.handle).await
    }

    /// Starts a new session from the sandbox's latest snapshot (`resume=true`, PROTOCOL.md
    /// §4.3); a sandbox whose snapshot is gone is `NotRunning` (410).
    async fn resume(&self) -> Result<()> {
        lifecycle::resume(&self.handle).await
    }

    async fn destroy(&self) -> Result<()> {
        self.handle.api.delete_sandbox(&self.handle.name).await
    }

    async fn set_timeout(&self, timeout: Duration) -> Result<()> {
        lifecycle::set_timeout(&self.handle, timeout).await
    }

    async fn preview_link(&self, port: u16) -> Result<PreviewLink> {
        lifecycle::preview_link(&self.handle, port).await
    }

    async fn fork(&self) -> Result<Box<dyn Sandbox>> {
        Ok(Box::new(self.fork_named(None).await?))
    }

    /// Snapshots the sandbox; the snapshot **stops the session** (PROTOCOL.md §10.1) and has
    /// no name (`name` is not sent). `resume` then starts a new session from it.
    async fn snapshot(&self, _name: Option<&str>) -> Result<SnapshotInfo> {
        lifecycle::snapshot(&self.handle).await
    }

    async fn create_code_context(&self, spec: &ContextSpec) -> Result<CodeContext> {
        self.kernels.create_context(self, spec).await
    }

    async fn list_code_contexts(&self) -> Result<Vec<CodeContext>> {
        self.kernels.list_contexts().await
    }

    async fn restart_code_context(&self, id: &str) -> Result<()> {
        self.kernels.restart_context(self, id).await
    }

    async fn remove_code_context(&self, id: &str) -> Result<()> {
        self.kernels.remove_context(self, id).await
    }

    async fn run_code(&self, request: &RunCode) -> Result<CodeRun> {
        self.kernels.run_code(self, request).await
    }
}
