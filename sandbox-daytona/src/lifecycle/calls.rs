//! Lifecycle calls on one sandbox (PROTOCOL.md §2): each sent once a state change in progress
//! is waited out, then polled until the state it leads to.

use super::state::{Phase, phase};
use super::wait::{call, wait_started, wait_until};
use crate::api::client::{Api, SandboxCall};
use crate::wire::{ForkBody, ResizeBody, SandboxDto, SandboxSnapshotBody};
use sandbox_sdk_core::http::{Method, encode_path_segment};
use sandbox_sdk_core::{Error, ErrorKind, Result, SnapshotInfo};
use tokio::time::Instant;

/// A `POST /sandbox/{id}{suffix}` lifecycle call; its answer (the sandbox as the call began),
/// or just the id when the answer is not a sandbox.
async fn post(
    api: &Api,
    id: &str,
    operation: &str,
    suffix: &str,
    query: &[(&str, String)],
    body: Option<&serde_json::Value>,
    deadline: Instant,
) -> Result<SandboxDto> {
    let request = SandboxCall {
        operation,
        method: Method::Post,
        suffix,
        query,
        body,
    };
    let response = call(api, id, request, deadline).await?;
    let bytes = response.bytes().await?;
    Ok(
        serde_json::from_slice(&bytes).unwrap_or_else(|_| SandboxDto {
            id: id.to_owned(),
            ..Default::default()
        }),
    )
}

/// Polls after a lifecycle call until the sandbox reaches `target`.
async fn settle(
    api: &Api,
    id: &str,
    operation: &str,
    first: SandboxDto,
    target: &str,
    deadline: Instant,
) -> Result<SandboxDto> {
    let first = if first.state.is_none() {
        api.get_sandbox(id, operation).await?
    } else {
        first
    };
    wait_until(api, id, first, operation, deadline, |raw| raw == target).await
}

/// A lifecycle call without query or body (`suffix`), then polls until `target`.
pub(crate) async fn transition(
    api: &Api,
    id: &str,
    operation: &str,
    suffix: &str,
    target: &str,
    deadline: Instant,
) -> Result<()> {
    let dto = post(api, id, operation, suffix, &[], None, deadline).await?;
    settle(api, id, operation, dto, target, deadline)
        .await
        .map(drop)
}

/// `POST /sandbox/{id}/stop` (`force`: SIGKILL instead of SIGTERM), then polls until
/// `stopped`. An ephemeral sandbox is deleted by its stop; that also counts as done.
pub(crate) async fn stop(api: &Api, id: &str, force: bool, deadline: Instant) -> Result<()> {
    let query = [("force", force.to_string())];
    let query: &[(&str, String)] = if force { &query } else { &[] };
    let dto = post(api, id, "stop", "/stop", query, None, deadline).await?;
    match settle(api, id, "stop", dto, "stopped", deadline).await {
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        other => other.map(drop),
    }
}

/// `POST /sandbox/{id}/resize`, then polls until the sandbox rests again.
pub(crate) async fn resize(api: &Api, id: &str, body: ResizeBody, deadline: Instant) -> Result<()> {
    let body = serde_json::to_value(body).map_err(|e| Error::validation(e.to_string()))?;
    let dto = post(api, id, "resize", "/resize", &[], Some(&body), deadline).await?;
    wait_until(api, id, dto, "resize", deadline, |s| {
        phase(s) == Phase::Resting
    })
    .await
    .map(drop)
}

/// `POST /sandbox/{id}/{what}/{value}`: a setting such as `autostop/15` or `ttl/60`.
pub(crate) async fn set(
    api: &Api,
    id: &str,
    operation: &str,
    what: &str,
    value: String,
    deadline: Instant,
) -> Result<()> {
    let suffix = format!("/{what}/{}", encode_path_segment(&value));
    post(api, id, operation, &suffix, &[], None, deadline)
        .await
        .map(drop)
}

/// `POST /sandbox/{id}/fork` (a state change of the source, so a 409 "state change in
/// progress" is waited out), then waits until the fork is `started`.
pub(crate) async fn fork(
    api: &Api,
    id: &str,
    name: Option<&str>,
    deadline: Instant,
) -> Result<SandboxDto> {
    let body = serde_json::to_value(ForkBody {
        name: name.map(str::to_owned),
    })
    .map_err(|e| Error::validation(e.to_string()))?;
    let request = SandboxCall {
        body: Some(&body),
        ..SandboxCall::new("fork", Method::Post, "/fork")
    };
    let dto: SandboxDto = call(api, id, request, deadline).await?.json().await?;
    wait_started(api, &dto.id, dto.clone(), "fork").await
}

/// `POST /sandbox/{id}/snapshot` under `name`; the snapshot's name is its id for
/// `CreateSpec::template`.
pub(crate) async fn snapshot(
    api: &Api,
    id: &str,
    name: String,
    deadline: Instant,
) -> Result<SnapshotInfo> {
    let body = serde_json::to_value(SandboxSnapshotBody {
        name: name.clone(),
        include_memory: None,
    })
    .map_err(|e| Error::validation(e.to_string()))?;
    post(api, id, "snapshot", "/snapshot", &[], Some(&body), deadline).await?;
    Ok(SnapshotInfo {
        id: name.clone(),
        name: Some(name),
        sandbox_id: Some(id.to_owned()),
        created_at: None,
    })
}
