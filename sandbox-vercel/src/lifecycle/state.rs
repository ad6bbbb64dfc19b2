//! Vercel's sandbox and session states onto core's [`SandboxState`] (PROTOCOL.md §4.5, §5.3),
//! and a sandbox's [`SandboxInfo`].

use crate::config::PROVIDER;
use crate::wire::{NamedSandbox, Session};
use sandbox_sdk_core::{Resources, SandboxInfo, SandboxState};
use std::time::{Duration, SystemTime};

/// A session's state: `pending` is creating; `running` running; `stopping`, `snapshotting`
/// (which ends in a stop) and `stopped` are stopped (the sandbox persists and can be resumed);
/// `aborted` (cancelled before it ran) is stopped too; `failed` is failed; anything else unknown.
pub(crate) fn session_state(status: &str) -> SandboxState {
    match status {
        "pending" => SandboxState::Creating,
        "running" => SandboxState::Running,
        "stopping" | "stopped" | "snapshotting" | "aborted" => SandboxState::Stopped,
        "failed" => SandboxState::Failed,
        _ => SandboxState::Unknown,
    }
}

/// A sandbox's own status (listings carry no session): `running`, or `stopping`/`stopped`.
pub(crate) fn sandbox_state(status: &str) -> SandboxState {
    match status {
        "running" => SandboxState::Running,
        "stopping" | "stopped" => SandboxState::Stopped,
        _ => SandboxState::Unknown,
    }
}

/// Whether a session reached a state it does not leave (PROTOCOL.md §5.3).
pub(crate) fn is_terminal(status: &str) -> bool {
    matches!(status, "stopped" | "failed" | "aborted")
}

pub(crate) fn at(ms: Option<u64>) -> Option<SystemTime> {
    SystemTime::UNIX_EPOCH.checked_add(Duration::from_millis(ms?))
}

/// The info of `sandbox`, with its current `session` when the answer carried it (its state is
/// finer than the sandbox's). The template is the runtime or image; metadata the tags.
pub(crate) fn info(sandbox: &NamedSandbox, session: Option<&Session>) -> SandboxInfo {
    let session = session.filter(|s| {
        sandbox.current_session_id.is_none() || sandbox.current_session_id.as_deref() == Some(&s.id)
    });
    let (state, raw) = match (
        session.and_then(|s| s.status.as_deref()),
        sandbox.status.as_deref(),
    ) {
        (Some(status), _) => (session_state(status), Some(status)),
        (None, Some(status)) => (sandbox_state(status), Some(status)),
        (None, None) => (SandboxState::Unknown, None),
    };
    let mut info = SandboxInfo::new(sandbox.name.clone(), PROVIDER, state);
    info.raw_state = raw.map(str::to_owned);
    info.template = sandbox.runtime.clone().or_else(|| sandbox.image.clone());
    info.metadata = sandbox.tags.clone().unwrap_or_default();
    info.created_at = at(sandbox.created_at);
    info.updated_at = at(sandbox.updated_at.or(sandbox.status_updated_at));
    info.expires_at = at(sandbox.expires_at).or_else(|| {
        let s = session.filter(|s| s.status.as_deref() == Some("running"))?;
        at(Some(s.started_at?.checked_add(s.timeout?)?))
    });
    info.region = sandbox
        .region
        .clone()
        .or_else(|| session.and_then(|s| s.region.clone()));
    info.resources = Resources {
        cpus: sandbox.vcpus.or_else(|| session.and_then(|s| s.vcpus)),
        memory_mb: sandbox.memory.or_else(|| session.and_then(|s| s.memory)),
        ..Resources::default()
    };
    info
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_session_state_has_a_core_state() {
        for (raw, state) in [
            ("pending", SandboxState::Creating),
            ("running", SandboxState::Running),
            ("stopping", SandboxState::Stopped),
            ("snapshotting", SandboxState::Stopped),
            ("stopped", SandboxState::Stopped),
            ("aborted", SandboxState::Stopped),
            ("failed", SandboxState::Failed),
            ("new-state", SandboxState::Unknown),
        ] {
            assert_eq!(session_state(raw), state, "{raw}");
        }
        assert_eq!(sandbox_state("running"), SandboxState::Running);
        assert_eq!(sandbox_state("stopping"), SandboxState::Stopped);
    }

    #[test]
    fn the_current_sessions_state_wins_over_the_sandboxs() {
        let sandbox = NamedSandbox {
            name: "box".into(),
            current_session_id: Some("sbx_1".into()),
            status: Some("running".into()),
            ..NamedSandbox::default()
        };
        let session = Session {
            id: "sbx_1".into(),
            status: Some("pending".into()),
            started_at: Some(1_000),
            timeout: Some(300_000),
            ..Session::default()
        };
        let i = info(&sandbox, Some(&session));
        assert_eq!(i.state, SandboxState::Creating);
        assert_eq!(i.raw_state.as_deref(), Some("pending"));
        let stale = Session {
            id: "sbx_0".into(),
            status: Some("stopped".into()),
            ..Session::default()
        };
        assert_eq!(info(&sandbox, Some(&stale)).state, SandboxState::Running);
        let running = Session {
            status: Some("running".into()),
            ..session
        };
        assert_eq!(info(&sandbox, Some(&running)).expires_at, at(Some(301_000)));
    }
}
