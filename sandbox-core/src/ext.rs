//! Conveniences built only from the trait primitives, available on every provider and sandbox
//! (including `dyn` ones) through blanket impls.

use crate::error::{Error, ErrorKind, Result};
use crate::exec::{Command, Output};
use crate::lifecycle::{ListFilter, SandboxInfo, SandboxState};
use crate::provider::{Provider, Sandbox};
use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use futures::TryStreamExt;
use std::time::Duration;

/// Conveniences on any [`Sandbox`].
#[async_trait]
pub trait SandboxExt: Sandbox {
    /// Runs a command to completion and collects its output, stdout and stderr apart.
    async fn run(&self, command: &Command) -> Result<Output> {
        self.exec(command).await?.output().await
    }

    /// Runs a shell line (`sh -c LINE`) to completion.
    async fn run_shell(&self, line: &str) -> Result<Output> {
        self.run(&Command::shell(line)).await
    }

    /// Reads a whole file into memory.
    async fn read_file(&self, path: &str) -> Result<Bytes> {
        let mut download = self.download(path).await?;
        let mut buf = BytesMut::new();
        while let Some(chunk) = download.try_next().await? {
            buf.extend_from_slice(&chunk);
        }
        Ok(buf.freeze())
    }

    /// Reads a whole file as UTF-8 text.
    async fn read_to_string(&self, path: &str) -> Result<String> {
        let bytes = self.read_file(path).await?;
        String::from_utf8(bytes.to_vec())
            .map_err(|_| Error::validation(format!("file {path} is not valid UTF-8")))
    }

    /// Whether a path exists.
    async fn exists(&self, path: &str) -> Result<bool> {
        match self.stat(path).await {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Polls [`Sandbox::info`] until the sandbox is running: at once, then backing off from
    /// 25 ms up to `interval` ([`crate::wait::Backoff`]); fails with `Timeout` after `deadline`
    /// and at once if it reaches a terminal state.
    async fn wait_until_running(
        &self,
        interval: Duration,
        deadline: Duration,
    ) -> Result<SandboxInfo> {
        let mut backoff = crate::wait::Backoff::new(interval).within(deadline);
        loop {
            let info = self.info().await?;
            match info.state {
                SandboxState::Running => return Ok(info),
                state if state.is_terminal() => {
                    return Err(Error::new(
                        ErrorKind::NotRunning,
                        format!("sandbox is {state} and will not start"),
                    )
                    .with_sandbox_id(self.id()));
                }
                _ => {}
            }
            if !backoff.pause().await {
                return Err(Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "sandbox still {} after {}ms",
                        info.state,
                        backoff.elapsed().as_millis()
                    ),
                )
                .with_sandbox_id(self.id()));
            }
        }
    }
}

impl<S: Sandbox + ?Sized> SandboxExt for S {}

/// Conveniences on any [`Provider`].
#[async_trait]
pub trait ProviderExt: Provider {
    /// Collects every sandbox the filter matches.
    async fn list_all(&self, filter: &ListFilter) -> Result<Vec<SandboxInfo>> {
        self.list(filter).try_collect().await
    }
}

impl<P: Provider + ?Sized> ProviderExt for P {}
