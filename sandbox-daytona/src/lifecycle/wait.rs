//! Waiting on the control plane: lifecycle calls that wait out a state change in progress
//! ([`call`], PROTOCOL.md §3), polls until a state ([`wait_until`]), and deletion.

use super::state::{Phase, phase};
use crate::api::client::{Api, SandboxCall};
use crate::config::{PROVIDER, backoff_until, deadline_after};
use crate::error::is_state_change_in_progress;
use crate::wire::SandboxDto;
use sandbox_sdk_core::http::Method;
use sandbox_sdk_core::{Error, ErrorKind, Result};
use tokio::time::Instant;

/// `DELETE /sandbox/{id}`, a state change in progress waited out within `deadline`.
pub(crate) async fn delete(api: &Api, id: &str, deadline: Instant) -> Result<()> {
    let response = call(
        api,
        id,
        SandboxCall::new("destroy", Method::Delete, ""),
        deadline,
    )
    .await?;
    response.bytes().await.map(drop)
}

/// Polls until a deleted sandbox is gone (404 or `destroyed`), within `deadline`.
pub(crate) async fn wait_gone(api: &Api, id: &str, deadline: Instant) -> Result<()> {
    // Look at once, then back off up to the poll interval, until the 404.
    let mut backoff = backoff_until(api.config.poll_interval, deadline);
    loop {
        match api.get_sandbox(id, "destroy").await {
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
            Ok(dto) if dto.state.as_deref() == Some("destroyed") => return Ok(()),
            Ok(_) => {}
        }
        if !backoff.pause().await {
            return Err(
                Error::new(ErrorKind::Timeout, "sandbox is still being destroyed").or_context(
                    PROVIDER,
                    "destroy",
                    Some(id),
                ),
            );
        }
    }
}

/// Polls until the sandbox is `started`. `error`/`build_failed` fail with the reason; a
/// resting state other than `started` fails as `NotRunning`.
pub(crate) async fn wait_started(
    api: &Api,
    id: &str,
    first: SandboxDto,
    operation: &str,
) -> Result<SandboxDto> {
    let deadline = deadline_after(api.config.start_timeout);
    wait_until(api, id, first, operation, deadline, |raw| raw == "started").await
}

/// Polls from `first` until `done(state)`; fails on `error`/`build_failed`, on any other
/// resting state once `done` cannot come without another call, and at `deadline`.
pub(crate) async fn wait_until(
    api: &Api,
    id: &str,
    first: SandboxDto,
    operation: &str,
    deadline: Instant,
    done: impl Fn(&str) -> bool,
) -> Result<SandboxDto> {
    let mut dto = first;
    let mut backoff = backoff_until(api.config.poll_interval, deadline);
    // `first` is usually the call's own answer, the state as the call began: the first
    // look is at once, before any pause.
    let mut looked = false;
    loop {
        let raw = dto.state.clone().unwrap_or_else(|| "unknown".to_owned());
        if done(&raw) {
            return Ok(dto);
        }
        match phase(&raw) {
            Phase::Failed => {
                return Err(Error::new(
                    ErrorKind::Provider,
                    format!(
                        "sandbox is in state {raw}: {}",
                        dto.error_reason.as_deref().unwrap_or("no reason given")
                    ),
                )
                .with_provider(PROVIDER)
                .with_operation(operation)
                .with_sandbox_id(id));
            }
            Phase::Gone => {
                return Err(Error::new(ErrorKind::NotFound, "sandbox was destroyed")
                    .with_provider(PROVIDER)
                    .with_operation(operation)
                    .with_sandbox_id(id));
            }
            // Resting in another state while the desired state says nothing is pending.
            Phase::Resting if dto.desired_state.as_deref() == Some(raw.as_str()) => {
                return Err(Error::new(
                    ErrorKind::NotRunning,
                    format!("sandbox is {raw}, not in the state {operation} waits for"),
                )
                .with_provider(PROVIDER)
                .with_operation(operation)
                .with_sandbox_id(id));
            }
            _ => {}
        }
        if std::mem::replace(&mut looked, true) && !backoff.pause().await {
            return Err(Error::new(
                ErrorKind::Timeout,
                format!("sandbox still {raw} when the wait ran out"),
            )
            .with_provider(PROVIDER)
            .with_operation(operation)
            .with_sandbox_id(id));
        }
        dto = api.get_sandbox(id, operation).await?;
    }
}

/// Polls until the sandbox rests (any stable, failed or gone state) or `deadline` passes:
/// a look at once, then backing off up to the poll interval.
async fn wait_resting(api: &Api, id: &str, operation: &str, deadline: Instant) -> Result<()> {
    let mut backoff = backoff_until(api.config.poll_interval, deadline);
    loop {
        match api.get_sandbox(id, operation).await {
            Ok(dto) => {
                if phase(dto.state.as_deref().unwrap_or("unknown")) != Phase::Transitional {
                    return Ok(());
                }
            }
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        }
        if !backoff.pause().await {
            return Ok(());
        }
    }
}

/// Sends a lifecycle call; a "state change in progress" answer is waited out (polling until
/// the sandbox rests) and the call repeated, all within `deadline`.
pub(crate) async fn call(
    api: &Api,
    id: &str,
    call: SandboxCall<'_>,
    deadline: Instant,
) -> Result<sandbox_sdk_core::http::Response> {
    loop {
        match api.sandbox_call(id, &call).await {
            Err(e) if is_state_change_in_progress(&e) => {
                if Instant::now() >= deadline {
                    return Err(e);
                }
                wait_resting(api, id, call.operation, deadline).await?;
            }
            other => return other,
        }
    }
}
