//! The retry layer: decorrelated-jitter backoff, `Retry-After`, an overall deadline, and the
//! idempotency rule for `create`.
//!
//! Which calls are retried (only on [`Error::is_retryable`] errors):
//!
//! - provider: `connect`, `destroy` (by id, as the sandbox's), `find_by_idempotency_key`,
//!   `usage`; `create` **only when `spec.idempotency_key` is set** (without a key it
//!   is sent exactly once, whatever the error); `list` only for its first page, i.e. until the
//!   stream has yielded its first item (an error after that ends the stream as is);
//! - sandbox: `info`, `stat`, `list_files`, `download` (the call that starts it, not the stream),
//!   `write_file` (it replaces the whole file), `mkdir`, `processes`, `attach`, `watch`,
//!   `preview_link`, `destroy`, `stop`, `pause`, `resume`, `set_timeout`, `metrics`. A `destroy`
//!   retried after an ambiguous failure (see [`Error::is_ambiguous`]) that then finds the sandbox
//!   gone returns success: the earlier attempt did it.
//!
//! A create that fails ambiguously was already looked up by the adapter for as long as the
//! provider may still be making it ([`crate::idempotency`]) before the error reaches this layer,
//! so sending it again here does not make a second sandbox.
//!
//! The final error of a call that was tried more than once says how many attempts were made over
//! how long.
//! - never: `exec`, `upload` (its body is consumed), `kill_process`, `remove`, `rename`, `fork`,
//!   `snapshot`, `ssh_access` (minting new access revokes the old).
//!
//! An error that comes out of a retried call is marked `with_retryable(false)`, so no outer layer
//! retries it again: retries happen in exactly one layer.

use crate::access::{PreviewLink, SshAccess};
use crate::capability::Capabilities;
use crate::code::{CodeContext, CodeRun, ContextSpec, RunCode};
use crate::error::{Error, ErrorKind, Result};
use crate::exec::{Command, Process, ProcessInfo};
use crate::files::{Download, FileInfo, ListOptions, Transfer, UploadBody};
use crate::fleet::{PrepareSpec, Prepared, Usage};
use crate::lifecycle::{CreateSpec, ListFilter, Metrics, SandboxInfo, SnapshotInfo};
use crate::provider::{FileEventStream, Provider, Sandbox, SandboxStream};
use async_trait::async_trait;
use bytes::Bytes;
use futures::{StreamExt, stream};
use rand::Rng;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// How often and how long to retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (0 = never retry).
    pub max_retries: u32,
    /// The shortest wait between attempts.
    pub base_delay: Duration,
    /// The longest wait between attempts (a provider's `Retry-After` may ask for more).
    pub max_delay: Duration,
    /// The total time after which no new attempt starts; `None` = no limit.
    pub deadline: Option<Duration>,
    /// Do not sleep: each delay is still computed, reported to `on_retry` and counted as elapsed
    /// (virtual) time for the deadline. For tests.
    pub no_delay: bool,
}

impl Default for RetryPolicy {
    /// 3 retries, 200 ms base, 10 s cap, 60 s deadline.
    fn default() -> Self {
        RetryPolicy {
            max_retries: 3,
            base_delay: Duration::from_millis(200),
            max_delay: Duration::from_secs(10),
            deadline: Some(Duration::from_secs(60)),
            no_delay: false,
        }
    }
}

impl RetryPolicy {
    /// A policy that never retries.
    pub fn never() -> Self {
        RetryPolicy {
            max_retries: 0,
            ..RetryPolicy::default()
        }
    }

    /// Sets the number of retries.
    pub fn max_retries(mut self, n: u32) -> Self {
        self.max_retries = n;
        self
    }

    /// Sets base and maximum delay.
    pub fn delays(mut self, base: Duration, max: Duration) -> Self {
        self.base_delay = base;
        self.max_delay = max;
        self
    }

    /// Sets the overall deadline.
    pub fn deadline(mut self, deadline: Option<Duration>) -> Self {
        self.deadline = deadline;
        self
    }

    /// Switches real sleeping off (delays become virtual time).
    pub fn no_delay(mut self, no_delay: bool) -> Self {
        self.no_delay = no_delay;
        self
    }
}

/// What the retry layer reports before each retry.
#[derive(Debug)]
pub struct RetryEvent<'a> {
    /// The provider being called.
    pub provider: &'a str,
    /// The operation being retried.
    pub operation: &'static str,
    /// The sandbox, for sandbox operations.
    pub sandbox_id: Option<&'a str>,
    /// The number of the attempt about to be made (2 for the first retry).
    pub attempt: u32,
    /// How long the layer waits before it (virtual with `no_delay`).
    pub delay: Duration,
    /// The error of the attempt that just failed.
    pub error: &'a Error,
}

/// A callback run before each retry.
pub type OnRetry = Arc<dyn Fn(&RetryEvent<'_>) + Send + Sync>;

#[derive(Clone)]
struct Config {
    policy: RetryPolicy,
    on_retry: Option<OnRetry>,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Retry")
            .field("policy", &self.policy)
            .field("on_retry", &self.on_retry.is_some())
            .finish()
    }
}

/// One retried call's state: attempts made, the previous delay, elapsed time.
struct Retrier<'a> {
    config: &'a Config,
    provider: &'a str,
    operation: &'static str,
    sandbox_id: Option<&'a str>,
    started: tokio::time::Instant,
    virtual_elapsed: Duration,
    prev_delay: Duration,
    attempt: u32,
}

impl<'a> Retrier<'a> {
    fn new(
        config: &'a Config,
        provider: &'a str,
        operation: &'static str,
        sandbox_id: Option<&'a str>,
    ) -> Self {
        Retrier {
            config,
            provider,
            operation,
            sandbox_id,
            started: tokio::time::Instant::now(),
            virtual_elapsed: Duration::ZERO,
            prev_delay: config.policy.base_delay,
            attempt: 1,
        }
    }

    /// Decorrelated jitter: `min(cap, random(base, prev * 3))`.
    fn next_delay(&mut self) -> Duration {
        let policy = &self.config.policy;
        let base = policy.base_delay;
        let upper = self.prev_delay.saturating_mul(3);
        let delay = if upper <= base {
            base
        } else {
            let secs = rand::rng().random_range(base.as_secs_f64()..=upper.as_secs_f64());
            Duration::try_from_secs_f64(secs).unwrap_or(upper)
        };
        let delay = delay.min(policy.max_delay.max(base));
        self.prev_delay = delay;
        delay
    }

    fn give_up(&self, error: Error) -> Error {
        let error = error
            .or_context(self.provider, self.operation, self.sandbox_id)
            .with_retryable(false);
        if self.attempt == 1 {
            return error;
        }
        let elapsed = if self.config.policy.no_delay {
            self.virtual_elapsed
        } else {
            self.started.elapsed()
        };
        error.with_note(format!(
            "gave up after {} attempts over {} ms",
            self.attempt,
            elapsed.as_millis()
        ))
    }

    /// Decides after a failed attempt: `Ok(())` after waiting means try again; `Err` is final.
    async fn after_error(&mut self, error: Error) -> Result<()> {
        let policy = self.config.policy;
        if !error.is_retryable() || self.attempt > policy.max_retries {
            return Err(self.give_up(error));
        }
        let mut delay = self.next_delay();
        if let Some(wait) = error.retry_after() {
            delay = delay.max(wait);
        }
        let elapsed = if policy.no_delay {
            self.virtual_elapsed
        } else {
            self.started.elapsed()
        };
        if let Some(deadline) = policy.deadline
            && elapsed.saturating_add(delay) > deadline
        {
            return Err(self.give_up(error));
        }
        self.attempt += 1;
        tracing::Span::current().record("attempt", self.attempt);
        tracing::warn!(
            provider = self.provider,
            operation = self.operation,
            attempt = self.attempt,
            delay_ms = delay.as_millis() as u64,
            error = %error,
            "retrying"
        );
        if let Some(on_retry) = &self.config.on_retry {
            on_retry(&RetryEvent {
                provider: self.provider,
                operation: self.operation,
                sandbox_id: self.sandbox_id,
                attempt: self.attempt,
                delay,
                error: &error,
            });
        }
        if !policy.no_delay {
            tokio::time::sleep(delay).await;
        }
        self.virtual_elapsed = self.virtual_elapsed.saturating_add(delay);
        Ok(())
    }
}

async fn retry<T, F, Fut>(
    config: &Config,
    provider: &str,
    operation: &'static str,
    sandbox_id: Option<&str>,
    mut call: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut retrier = Retrier::new(config, provider, operation, sandbox_id);
    loop {
        match call().await {
            Ok(value) => return Ok(value),
            Err(error) => retrier.after_error(error).await?,
        }
    }
}

/// Retries a destroy (`destroy` of the sandbox or of the provider by id): an attempt that failed
/// ambiguously may have destroyed the sandbox, so a later attempt's `NotFound` means the
/// destroy happened, and the caller gets success.
async fn retry_destroy<F, Fut>(
    config: &Config,
    provider: &str,
    sandbox_id: &str,
    mut destroy: F,
) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<()>>,
{
    let may_be_gone = std::sync::atomic::AtomicBool::new(false);
    let may_be_gone = &may_be_gone;
    retry(config, provider, "destroy", Some(sandbox_id), || {
        let attempt = destroy();
        async move {
            let gone_already = may_be_gone.load(std::sync::atomic::Ordering::Relaxed);
            match attempt.await {
                Err(e) if gone_already && e.kind() == ErrorKind::NotFound => Ok(()),
                Err(e) => {
                    if e.is_ambiguous() {
                        may_be_gone.store(true, std::sync::atomic::Ordering::Relaxed);
                    }
                    Err(e)
                }
                ok => ok,
            }
        }
    })
    .await
}

/// A provider whose calls are retried by a [`RetryPolicy`] (see the module docs for which).
#[derive(Debug, Clone)]
pub struct RetryProvider {
    inner: Arc<dyn Provider>,
    config: Config,
}

impl RetryProvider {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Provider>, policy: RetryPolicy) -> Self {
        RetryProvider {
            inner,
            config: Config {
                policy,
                on_retry: None,
            },
        }
    }

    /// Runs `callback` before each retry (of this provider and of its sandboxes).
    pub fn on_retry(mut self, callback: OnRetry) -> Self {
        self.config.on_retry = Some(callback);
        self
    }

    fn wrap(&self, sandbox: Box<dyn Sandbox>) -> Box<dyn Sandbox> {
        Box::new(RetrySandbox {
            inner: sandbox,
            config: self.config.clone(),
        })
    }
}

#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl Provider for RetryProvider {
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
        let name = self.inner.name();
        let sandbox = if spec.idempotency_key.is_some() {
            retry(&self.config, name, "create", None, || {
                self.inner.create(spec)
            })
            .await?
        } else {
            self.inner.create(spec).await?
        };
        Ok(self.wrap(sandbox))
    }

    async fn connect(&self, id: &str) -> Result<Box<dyn Sandbox>> {
        let name = self.inner.name();
        let sandbox = retry(&self.config, name, "connect", Some(id), || {
            self.inner.connect(id)
        })
        .await?;
        Ok(self.wrap(sandbox))
    }

    fn list(&self, filter: &ListFilter) -> SandboxStream<'_> {
        let filter = filter.clone();
        let first_page = async move {
            let mut retrier = Retrier::new(&self.config, self.inner.name(), "list", None);
            loop {
                let mut items = self.inner.list(&filter);
                match items.next().await {
                    Some(Ok(first)) => {
                        return stream::once(async { Ok(first) }).chain(items).boxed();
                    }
                    None => return stream::empty().boxed(),
                    Some(Err(error)) => {
                        if let Err(error) = retrier.after_error(error).await {
                            return stream::once(async { Err(error) }).boxed();
                        }
                    }
                }
            }
        };
        stream::once(first_page).flatten().boxed()
    }

    async fn destroy(&self, id: &str) -> Result<()> {
        retry_destroy(&self.config, self.inner.name(), id, || {
            self.inner.destroy(id)
        })
        .await
    }

    async fn find_by_idempotency_key(&self, key: &str) -> Result<Option<SandboxInfo>> {
        retry(
            &self.config,
            self.inner.name(),
            "find_by_idempotency_key",
            None,
            || self.inner.find_by_idempotency_key(key),
        )
        .await
    }

    async fn usage(&self, sandbox: &SandboxInfo, to: std::time::SystemTime) -> Result<Usage> {
        retry(
            &self.config,
            self.inner.name(),
            "usage",
            Some(&sandbox.id),
            || self.inner.usage(sandbox, to),
        )
        .await
    }
    /// Not retried: a build may have been started; a second `prepare` finds it by name.
    async fn prepare(&self, spec: &PrepareSpec) -> Result<Prepared> {
        self.inner.prepare(spec).await
    }
}

/// A sandbox whose idempotent calls are retried.
#[derive(Debug)]
pub struct RetrySandbox {
    inner: Box<dyn Sandbox>,
    config: Config,
}

impl RetrySandbox {
    async fn retry<T, F, Fut>(&self, operation: &'static str, call: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let provider = self.inner.provider();
        retry(
            &self.config,
            provider,
            operation,
            Some(self.inner.id()),
            call,
        )
        .await
    }
}

#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl Sandbox for RetrySandbox {
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
        self.retry("info", || self.inner.info()).await
    }
    async fn exec(&self, command: &Command) -> Result<Process> {
        self.inner.exec(command).await
    }
    async fn processes(&self) -> Result<Vec<ProcessInfo>> {
        self.retry("processes", || self.inner.processes()).await
    }
    async fn attach(&self, pid: &str) -> Result<Process> {
        self.retry("attach", || self.inner.attach(pid)).await
    }
    async fn kill_process(&self, pid: &str) -> Result<()> {
        self.inner.kill_process(pid).await
    }
    async fn upload(&self, path: &str, body: UploadBody) -> Result<Transfer> {
        self.inner.upload(path, body).await
    }
    async fn write_file(&self, path: &str, data: Bytes) -> Result<Transfer> {
        self.retry("write_file", || self.inner.write_file(path, data.clone()))
            .await
    }
    async fn download(&self, path: &str) -> Result<Download> {
        self.retry("download", || self.inner.download(path)).await
    }
    async fn list_files(&self, path: &str, options: ListOptions) -> Result<Vec<FileInfo>> {
        self.retry("list_files", || self.inner.list_files(path, options))
            .await
    }
    async fn stat(&self, path: &str) -> Result<FileInfo> {
        self.retry("stat", || self.inner.stat(path)).await
    }
    async fn mkdir(&self, path: &str) -> Result<()> {
        self.retry("mkdir", || self.inner.mkdir(path)).await
    }
    async fn remove(&self, path: &str) -> Result<()> {
        self.inner.remove(path).await
    }
    async fn rename(&self, from: &str, to: &str) -> Result<()> {
        self.inner.rename(from, to).await
    }
    async fn watch(&self, path: &str, recursive: bool) -> Result<FileEventStream> {
        self.retry("watch", || self.inner.watch(path, recursive))
            .await
    }
    async fn stop(&self) -> Result<()> {
        self.retry("stop", || self.inner.stop()).await
    }
    async fn pause(&self) -> Result<()> {
        self.retry("pause", || self.inner.pause()).await
    }
    async fn resume(&self) -> Result<()> {
        self.retry("resume", || self.inner.resume()).await
    }
    async fn destroy(&self) -> Result<()> {
        retry_destroy(&self.config, self.inner.provider(), self.inner.id(), || {
            self.inner.destroy()
        })
        .await
    }
    async fn set_timeout(&self, timeout: Duration) -> Result<()> {
        self.retry("set_timeout", || self.inner.set_timeout(timeout))
            .await
    }
    async fn preview_link(&self, port: u16) -> Result<PreviewLink> {
        self.retry("preview_link", || self.inner.preview_link(port))
            .await
    }
    async fn ssh_access(&self, ttl: Duration) -> Result<SshAccess> {
        self.inner.ssh_access(ttl).await
    }
    async fn fork(&self) -> Result<Box<dyn Sandbox>> {
        let forked = self.inner.fork().await?;
        Ok(Box::new(RetrySandbox {
            inner: forked,
            config: self.config.clone(),
        }))
    }
    async fn snapshot(&self, name: Option<&str>) -> Result<SnapshotInfo> {
        self.inner.snapshot(name).await
    }
    async fn metrics(&self) -> Result<Metrics> {
        self.retry("metrics", || self.inner.metrics()).await
    }
    /// Not retried: a second create would make a second kernel.
    async fn create_code_context(&self, spec: &ContextSpec) -> Result<CodeContext> {
        self.inner.create_code_context(spec).await
    }
    async fn list_code_contexts(&self) -> Result<Vec<CodeContext>> {
        self.retry("list_code_contexts", || self.inner.list_code_contexts())
            .await
    }
    async fn restart_code_context(&self, id: &str) -> Result<()> {
        self.retry("restart_code_context", || {
            self.inner.restart_code_context(id)
        })
        .await
    }
    async fn remove_code_context(&self, id: &str) -> Result<()> {
        self.inner.remove_code_context(id).await
    }
    /// Not retried: a cell sent again would run its side effects twice.
    async fn run_code(&self, request: &RunCode) -> Result<CodeRun> {
        self.inner.run_code(request).await
    }
}
