//! [`SpritesSandbox`]: one sprite.

use crate::capabilities::CAPABILITIES;
use crate::config::PROVIDER;
use crate::lifecycle::{self, Handle};
use crate::wire::{Checkpoint, ExecSession, Sprite};
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

/// A sprite. Its id is its name.
#[derive(Clone)]
pub struct SpritesSandbox {
    handle: Handle,
    /// The code contexts, run by core's emulated kernel over exec with stdin.
    kernels: EmulatedKernels,
}

impl fmt::Debug for SpritesSandbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpritesSandbox")
            .field("name", &self.handle.name)
            .field("status", &self.handle.seen().status)
            .finish()
    }
}

impl SpritesSandbox {
    pub(crate) fn new(handle: Handle) -> SpritesSandbox {
        SpritesSandbox {
            handle,
            kernels: EmulatedKernels::new(),
        }
    }

    /// The sprite's name (its id).
    pub fn name(&self) -> &str {
        &self.handle.name
    }

    /// The sprite as last seen.
    pub fn sprite(&self) -> Sprite {
        self.handle.seen()
    }

    /// Sends `signal` (a name: `SIGTERM`, `SIGINT`, ...) to session `pid` and its process
    /// group (PROTOCOL.md §5.5).
    pub async fn signal(&self, pid: &str, signal: &str) -> Result<()> {
        exec::kill(&self.handle, pid, signal).await
    }

    /// The sprite's live exec sessions as Sprites lists them.
    pub async fn sessions(&self) -> Result<Vec<ExecSession>> {
        Ok(self
            .handle
            .api
            .sessions(&self.handle.name, "sessions")
            .await?
            .sessions)
    }

    /// The sprite's checkpoints (PROTOCOL.md §8).
    pub async fn checkpoints(&self) -> Result<Vec<Checkpoint>> {
        self.handle
            .api
            .checkpoints(&self.handle.name, "checkpoints")
            .await
    }

    /// Rewinds the sprite's disk to checkpoint `id` (PROTOCOL.md §8): later changes are
    /// discarded and running commands are stopped.
    pub async fn restore(&self, id: &str) -> Result<()> {
        self.handle.api.restore(&self.handle.name, id).await
    }

    /// Makes the sprite's URL public (`true`) or token-guarded (`false`) (PROTOCOL.md §4.3, §9).
    pub async fn set_public_url(&self, public: bool) -> Result<()> {
        let auth = if public { "public" } else { "sprite" };
        let sprite = self
            .handle
            .api
            .set_url_auth(&self.handle.name, auth)
            .await?;
        self.handle.update(sprite);
        Ok(())
    }
}

#[async_trait]
impl Sandbox for SpritesSandbox {
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

    /// Sends SIGKILL to session `pid` ([`SpritesSandbox::signal`] sends others).
    async fn kill_process(&self, pid: &str) -> Result<()> {
        exec::kill(&self.handle, pid, crate::config::KILL_SIGNAL).await
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

    async fn list_files(&self, path: &str, options: ListOptions) -> Result<Vec<FileInfo>> {
        files::list(&self.handle, path, options).await
    }

    async fn stat(&self, path: &str) -> Result<FileInfo> {
        files::stat(&self.handle, path).await
    }

    async fn mkdir(&self, path: &str) -> Result<()> {
        files::mkdir(&self.handle, path).await
    }

    async fn remove(&self, path: &str) -> Result<()> {
        files::remove(&self.handle, path).await
    }

    async fn rename(&self, from: &str, to: &str) -> Result<()> {
        files::rename(&self.handle, from, to).await
    }

    async fn destroy(&self) -> Result<()> {
        self.handle.api.delete(&self.handle.name).await
    }

    async fn preview_link(&self, port: u16) -> Result<PreviewLink> {
        lifecycle::preview_link(&self.handle, port).await
    }

    /// A checkpoint of the sprite's disk, with `name` as its comment (PROTOCOL.md §8);
    /// [`SpritesSandbox::restore`] rewinds to it.
    async fn snapshot(&self, name: Option<&str>) -> Result<SnapshotInfo> {
        lifecycle::snapshot(&self.handle, name).await
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
