//! [`E2bSandbox`]: one sandbox, through the core [`Sandbox`] trait and E2B-specific methods.
//! Each method hands its work to the operation modules (lifecycle, exec, files).

use crate::api::Api;
use crate::api::envd::{Envd, port_host};
use crate::api::interpreter::Interpreter;
use crate::capabilities::CAPABILITIES;
use crate::code::Code;
use crate::config::{PROVIDER, PauseMode};
use crate::error::bad_response;
use crate::lifecycle::{self, Answer, LogQuery, Reach};
use crate::wire::{LogEntry, NetworkUpdate};
use crate::{exec, files};
use bytes::Bytes;
use sandbox_sdk_core::code::{CodeContext, CodeRun, ContextSpec, RunCode};
use sandbox_sdk_core::{
    Capabilities, Command, Download, Error, ErrorKind, FileEventStream, FileInfo, ListOptions,
    Metrics, PreviewLink, Process, ProcessInfo, Result, Sandbox, SandboxInfo, SnapshotInfo,
    Transfer, UploadBody,
};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

/// One child of [`E2bSandbox::fork_many`]: the new sandbox, or why it did not start.
pub type ForkOutcome = Result<E2bSandbox>;

/// A running E2B sandbox. Cheap to clone; clones share what a resume learns.
#[derive(Clone)]
pub struct E2bSandbox {
    id: String,
    api: Arc<Api>,
    reach: Arc<RwLock<Reach>>,
    envd_version: Option<String>,
    template: Option<String>,
    ttl: Arc<Mutex<Option<Duration>>>,
    code: Arc<Code>,
}

impl fmt::Debug for E2bSandbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let reach = self.reach();
        f.debug_struct("E2bSandbox")
            .field("id", &self.id)
            .field("domain", &reach.domain)
            .field("envd", &reach.envd)
            .field(
                "traffic_token",
                &reach.traffic_token.as_ref().map(|_| "<redacted>"),
            )
            .field("envd_version", &self.envd_version)
            .field("template", &self.template)
            .finish()
    }
}

/// Compares dotted versions (`0.5.7`); unparsable parts count as 0.
fn version_at_least(version: &str, min: [u64; 3]) -> bool {
    let mut parts = version
        .trim_start_matches('v')
        .split('.')
        .map(|p| p.parse::<u64>().unwrap_or(0));
    let v = [
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    ];
    v >= min
}

impl E2bSandbox {
    /// The sandbox of a checked answer, living `ttl` as the caller asked (`None`: as E2B
    /// decides).
    pub(crate) fn new(api: Arc<Api>, answer: Answer, ttl: Option<Duration>) -> Self {
        E2bSandbox {
            id: answer.id,
            api,
            reach: Arc::new(RwLock::new(answer.reach)),
            envd_version: answer.envd_version,
            template: answer.template,
            ttl: Arc::new(Mutex::new(ttl)),
            code: Arc::default(),
        }
    }

    fn reach(&self) -> Reach {
        self.reach.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn envd(&self) -> Envd {
        self.reach().envd
    }

    /// The interpreter server on port 49999, when the template serves it (asked once).
    async fn interpreter(&self) -> Result<Option<Interpreter>> {
        let reach = self.reach();
        let interpreter = Interpreter::new(
            &reach.envd,
            self.api.config.sandbox_url.as_deref(),
            &reach.domain,
            reach.traffic_token,
        )?;
        let native = self
            .code
            .native(&interpreter)
            .await
            .map_err(|e| e.with_sandbox_id(&self.id))?;
        Ok(native.then_some(interpreter))
    }

    fn ttl(&self) -> Option<Duration> {
        *self.ttl.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set_ttl(&self, ttl: Option<Duration>) {
        *self.ttl.lock().unwrap_or_else(|p| p.into_inner()) = ttl;
    }

    /// The envd version the sandbox runs, when the service said.
    pub fn envd_version(&self) -> Option<&str> {
        self.envd_version.as_deref()
    }

    /// The domain of the sandbox's hosts, as the service last said.
    pub fn domain(&self) -> String {
        self.reach().domain
    }

    /// The template it was made from, when the service said.
    pub fn template(&self) -> Option<&str> {
        self.template.as_deref()
    }

    /// Kills the sandbox: `true` when killed, `false` when it was already gone.
    pub async fn kill(&self) -> Result<bool> {
        lifecycle::kill(&self.api, &self.id).await
    }

    /// Pauses the sandbox, keeping memory or only the filesystem. `false` when it was already
    /// paused (a 409 saying so); a 409 for a state change in progress is a `Conflict` error.
    pub async fn pause_with(&self, mode: PauseMode) -> Result<bool> {
        lifecycle::pause(&self.api, &self.id, mode).await
    }

    /// Resumes (or refreshes) the sandbox through connect with `timeout` as its time to live;
    /// `None` keeps what the caller asked for before. When a TTL applies, the sandbox then lives
    /// exactly that long from now, even if it had more left (connect alone only extends).
    ///
    /// Returns the sandbox as the service answered: the id it returns is the one kept, and a new
    /// `domain` or envd token in the answer is used from now on. When the id is unchanged, this
    /// handle (and its clones) is updated too and the returned handle is a clone of it; when the
    /// service returns another id, use the returned handle.
    pub async fn resume_with(&self, timeout: Option<Duration>) -> Result<E2bSandbox> {
        let timeout = timeout.or_else(|| self.ttl());
        let answer = lifecycle::connect(&self.api, &self.id, timeout, "resume").await?;
        if answer.id != self.id {
            return Ok(E2bSandbox::new(self.api.clone(), answer, timeout));
        }
        *self.reach.write().unwrap_or_else(|p| p.into_inner()) = answer.reach;
        self.set_ttl(timeout);
        Ok(self.clone())
    }

    /// Forks into `count` children (1..=100); each child is reported on its own, so a partial
    /// failure leaves the others usable. Each child lives as long as the caller asked for this
    /// sandbox, or 300 s (the create default) when nothing was asked.
    pub async fn fork_many(&self, count: u32) -> Result<Vec<ForkOutcome>> {
        let ttl = lifecycle::fork_ttl(self.ttl());
        let children = lifecycle::fork(&self.api, &self.id, count, ttl).await?;
        Ok(children
            .into_iter()
            .map(|child| child.map(|answer| E2bSandbox::new(self.api.clone(), answer, Some(ttl))))
            .collect())
    }

    /// Replaces the sandbox's egress rules (`PUT /sandboxes/{id}/network`).
    pub async fn update_network(&self, update: &NetworkUpdate) -> Result<()> {
        self.api.update_network(&self.id, update).await
    }

    /// Resource samples between `start` and `end` (Unix seconds), oldest first.
    pub async fn metrics_range(
        &self,
        start: Option<u64>,
        end: Option<u64>,
    ) -> Result<Vec<Metrics>> {
        lifecycle::metrics_range(&self.api, &self.id, start, end).await
    }

    /// The sandbox's logs (`GET /v2/sandboxes/{id}/logs`).
    pub async fn logs(&self, query: &LogQuery) -> Result<Vec<LogEntry>> {
        lifecycle::logs(&self.api, &self.id, query).await
    }

    /// Sends SIGTERM (`graceful`) or SIGKILL to a process by pid or tag.
    pub async fn signal_process(&self, pid_or_tag: &str, graceful: bool) -> Result<()> {
        exec::signal(&self.envd(), pid_or_tag, graceful).await
    }

    /// Writes several files in one multipart request (one part per file).
    pub async fn write_files(&self, files: Vec<(String, Bytes)>) -> Result<Transfer> {
        files::write_files(&self.envd(), files).await
    }

    /// A signed URL that downloads `path` without headers (for secure sandboxes), valid for
    /// `expires_in` when given. It contains a signature: treat it as a secret.
    pub fn download_url(&self, path: &str, expires_in: Option<Duration>) -> Result<String> {
        let reach = self.reach();
        files::signed_url(&reach.envd, &reach.domain, path, "read", expires_in)
    }

    /// A signed URL that accepts an upload of `path` (`POST`, multipart or raw).
    pub fn upload_url(&self, path: &str, expires_in: Option<Duration>) -> Result<String> {
        let reach = self.reach();
        files::signed_url(&reach.envd, &reach.domain, path, "write", expires_in)
    }
}

#[async_trait::async_trait]
impl Sandbox for E2bSandbox {
    fn id(&self) -> &str {
        &self.id
    }

    fn provider(&self) -> &str {
        PROVIDER
    }

    fn capabilities(&self) -> Capabilities {
        CAPABILITIES
    }

    async fn info(&self) -> Result<SandboxInfo> {
        lifecycle::info(&self.api, &self.id).await
    }

    async fn exec(&self, command: &Command) -> Result<Process> {
        exec::start(&self.envd(), command).await
    }

    async fn processes(&self) -> Result<Vec<ProcessInfo>> {
        exec::processes(&self.envd()).await
    }

    async fn attach(&self, pid: &str) -> Result<Process> {
        exec::attach(&self.envd(), pid).await
    }

    async fn kill_process(&self, pid: &str) -> Result<()> {
        exec::kill(&self.envd(), pid).await
    }

    async fn upload(&self, path: &str, body: UploadBody) -> Result<Transfer> {
        let raw_ok = self
            .envd_version
            .as_deref()
            .is_none_or(|v| version_at_least(v, [0, 5, 7]));
        files::upload(&self.envd(), path, body, raw_ok).await
    }

    async fn write_file(&self, path: &str, data: Bytes) -> Result<Transfer> {
        files::write_file(&self.envd(), path, data).await
    }

    async fn download(&self, path: &str) -> Result<Download> {
        files::download(&self.envd(), path).await
    }

    async fn list_files(&self, path: &str, options: ListOptions) -> Result<Vec<FileInfo>> {
        files::list_dir(&self.envd(), path, options).await
    }

    async fn stat(&self, path: &str) -> Result<FileInfo> {
        files::stat(&self.envd(), path).await
    }

    async fn mkdir(&self, path: &str) -> Result<()> {
        files::mkdir(&self.envd(), path).await
    }

    async fn remove(&self, path: &str) -> Result<()> {
        files::remove(&self.envd(), path).await
    }

    async fn rename(&self, from: &str, to: &str) -> Result<()> {
        files::rename(&self.envd(), from, to).await
    }

    async fn watch(&self, path: &str, recursive: bool) -> Result<FileEventStream> {
        files::watch(&self.envd(), path, recursive).await
    }

    async fn pause(&self) -> Result<()> {
        self.pause_with(PauseMode::Memory).await.map(drop)
    }

    async fn resume(&self) -> Result<()> {
        let resumed = self.resume_with(None).await?;
        if resumed.id != self.id {
            // This handle's id cannot change under the trait; the inherent `resume_with`
            // hands back the sandbox under the id the service kept.
            return Err(Error::new(
                ErrorKind::Provider,
                format!(
                    "sandbox {} was resumed as sandbox {}; use E2bSandbox::resume_with or connect to that id",
                    self.id, resumed.id
                ),
            )
            .with_provider(PROVIDER)
            .with_operation("resume")
            .with_sandbox_id(&self.id));
        }
        Ok(())
    }

    async fn destroy(&self) -> Result<()> {
        lifecycle::destroy(&self.api, &self.id).await
    }

    async fn set_timeout(&self, timeout: Duration) -> Result<()> {
        lifecycle::set_timeout(&self.api, &self.id, timeout).await?;
        self.set_ttl(Some(timeout));
        Ok(())
    }

    async fn preview_link(&self, port: u16) -> Result<PreviewLink> {
        if port == 0 {
            return Err(Error::validation("port 0 cannot be exposed").with_provider(PROVIDER));
        }
        let reach = self.reach();
        let mut headers = BTreeMap::new();
        if let Some(token) = &reach.traffic_token {
            headers.insert("e2b-traffic-access-token".to_owned(), token.clone());
        }
        Ok(PreviewLink {
            url: format!("https://{}", port_host(port, &self.id, &reach.domain)),
            port,
            headers,
            token: reach.traffic_token,
            expires_at: None,
        })
    }

    async fn fork(&self) -> Result<Box<dyn Sandbox>> {
        let mut children = self.fork_many(1).await?;
        match children.pop() {
            Some(child) => Ok(Box::new(child?)),
            None => Err(bad_response("fork", Some(&self.id), "no fork result")),
        }
    }

    async fn snapshot(&self, name: Option<&str>) -> Result<SnapshotInfo> {
        lifecycle::snapshot(&self.api, &self.id, name).await
    }

    async fn metrics(&self) -> Result<Metrics> {
        let mut samples = self.metrics_range(None, None).await?;
        Ok(samples.pop().unwrap_or_default())
    }

    async fn create_code_context(&self, spec: &ContextSpec) -> Result<CodeContext> {
        match self.interpreter().await? {
            Some(interpreter) => self.code.create(&interpreter, spec).await,
            None => self.code.emulated.create_context(self, spec).await,
        }
    }

    async fn list_code_contexts(&self) -> Result<Vec<CodeContext>> {
        match self.interpreter().await? {
            Some(interpreter) => self.code.list(&interpreter).await,
            None => self.code.emulated.list_contexts().await,
        }
    }

    async fn restart_code_context(&self, id: &str) -> Result<()> {
        match self.interpreter().await? {
            Some(interpreter) => self.code.restart(&interpreter, id).await,
            None => self.code.emulated.restart_context(self, id).await,
        }
    }

    async fn remove_code_context(&self, id: &str) -> Result<()> {
        match self.interpreter().await? {
            Some(interpreter) => self.code.remove(&interpreter, id).await,
            None => self.code.emulated.remove_context(self, id).await,
        }
    }

    async fn run_code(&self, request: &RunCode) -> Result<CodeRun> {
        let Some(interpreter) = self.interpreter().await? else {
            return self.code.emulated.run_code(self, request).await;
        };
        let (api, id) = (self.api.clone(), self.id.clone());
        let running = async move {
            lifecycle::info(&api, &id)
                .await
                .is_ok_and(|info| info.state == sandbox_sdk_core::SandboxState::Running)
        };
        self.code
            .run(&interpreter, request, running)
            .await
            .map_err(|e| e.with_sandbox_id(&self.id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare() {
        assert!(version_at_least("0.6.13", [0, 5, 7]));
        assert!(version_at_least("0.5.7", [0, 5, 7]));
        assert!(!version_at_least("0.5.6", [0, 5, 7]));
        assert!(!version_at_least("0.4", [0, 5, 7]));
    }
}
