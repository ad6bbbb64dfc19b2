//! Daytona's sandbox states (PROTOCOL.md §3) mapped onto the core model, and a sandbox's
//! answer mapped onto [`SandboxInfo`].

use crate::config::PROVIDER;
use crate::wire::SandboxDto;
use sandbox_sdk_core::time::parse_rfc3339;
use sandbox_sdk_core::{SandboxInfo, SandboxState};

/// How a client should treat a Daytona state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Phase {
    /// `started`, `stopped`, `archived`, `paused`: safe to issue the next lifecycle call.
    Resting,
    /// Any in-flight state: keep polling; lifecycle calls now get 409.
    Transitional,
    /// `error` or `build_failed`: terminal unless recovered; carries `errorReason`.
    Failed,
    /// `destroyed` (normally seen as a 404 instead).
    Gone,
}

/// Every state name the service sends (`SandboxState`, 22 values).
pub(crate) const ALL_STATES: [&str; 22] = [
    "creating",
    "restoring",
    "destroyed",
    "destroying",
    "started",
    "stopped",
    "starting",
    "stopping",
    "error",
    "build_failed",
    "pending_build",
    "building_snapshot",
    "unknown",
    "pulling_snapshot",
    "archived",
    "archiving",
    "resizing",
    "snapshotting",
    "forking",
    "pausing",
    "paused",
    "resuming",
];

/// The phase of a raw state. Names this SDK does not know are treated as transitional, so a
/// newer server's in-flight state keeps a wait loop polling instead of failing it.
pub(crate) fn phase(raw: &str) -> Phase {
    match raw {
        "started" | "stopped" | "archived" | "paused" => Phase::Resting,
        "error" | "build_failed" => Phase::Failed,
        "destroyed" => Phase::Gone,
        _ => Phase::Transitional,
    }
}

/// The core state of a raw Daytona state.
///
/// Transitional states map to where they lead: `creating`, `pending_build`,
/// `building_snapshot`, `pulling_snapshot`, `starting`, `restoring`, `resuming` and `unknown`
/// to `Creating`; `stopping` to `Stopped`; `pausing` to `Paused`; `archiving` to `Archived`;
/// `destroying` to `Destroyed`; `resizing`, `snapshotting` and `forking` (which a running
/// sandbox goes through and comes back from) to `Running`. Unknown names map to `Unknown`.
pub(crate) fn core_state(raw: &str) -> SandboxState {
    match raw {
        "started" | "resizing" | "snapshotting" | "forking" => SandboxState::Running,
        "creating" | "pending_build" | "building_snapshot" | "pulling_snapshot" | "starting"
        | "restoring" | "resuming" | "unknown" => SandboxState::Creating,
        "stopped" | "stopping" => SandboxState::Stopped,
        "paused" | "pausing" => SandboxState::Paused,
        "archived" | "archiving" => SandboxState::Archived,
        "destroyed" | "destroying" => SandboxState::Destroyed,
        "error" | "build_failed" => SandboxState::Failed,
        _ => SandboxState::Unknown,
    }
}

/// The raw states that a core state filter asks for (for the list endpoint's `states` query).
pub(crate) fn raw_states_of(state: SandboxState) -> Vec<&'static str> {
    ALL_STATES
        .iter()
        .copied()
        .filter(|raw| core_state(raw) == state)
        .collect()
}

/// The core view of a sandbox answer.
pub(crate) fn info_from_dto(dto: &SandboxDto) -> SandboxInfo {
    let raw = dto.state.clone().unwrap_or_else(|| "unknown".to_owned());
    let mut info = SandboxInfo::new(dto.id.clone(), PROVIDER, core_state(&raw));
    info.raw_state = Some(raw);
    info.template = dto.snapshot.clone();
    info.metadata = dto.labels.clone().unwrap_or_default();
    info.created_at = dto.created_at.as_deref().and_then(parse_rfc3339);
    info.expires_at = dto.auto_destroy_at.as_deref().and_then(parse_rfc3339);
    info.region = dto.target.clone();
    info.updated_at = dto.updated_at.as_deref().and_then(parse_rfc3339);
    info.last_activity_at = dto.last_activity_at.as_deref().and_then(parse_rfc3339);
    // cpu, memory and disk are whole cores and GB (PROTOCOL.md §2.3), sent as JSON numbers.
    let whole = |v: Option<f64>| {
        v.filter(|v| v.is_finite() && *v >= 0.0)
            .map(|v| v.round() as u64)
    };
    info.resources = sandbox_sdk_core::Resources {
        cpus: whole(dto.cpu).and_then(|c| u32::try_from(c).ok()),
        memory_mb: whole(dto.memory).map(|gb| gb.saturating_mul(1024)),
        disk_gb: whole(dto.disk),
        gpus: whole(dto.gpu)
            .filter(|g| *g > 0)
            .and_then(|g| u32::try_from(g).ok()),
    };
    info
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_maps_to_a_known_core_state_and_phase() {
        for raw in ALL_STATES {
            assert_ne!(core_state(raw), SandboxState::Unknown, "{raw}");
            let p = phase(raw);
            match core_state(raw) {
                SandboxState::Failed => assert_eq!(p, Phase::Failed, "{raw}"),
                SandboxState::Destroyed if raw == "destroyed" => assert_eq!(p, Phase::Gone),
                _ => assert!(matches!(p, Phase::Resting | Phase::Transitional), "{raw}"),
            }
        }
    }

    #[test]
    fn resting_states_are_exactly_the_four_stable_ones() {
        let resting: Vec<_> = ALL_STATES
            .iter()
            .filter(|s| phase(s) == Phase::Resting)
            .collect();
        assert_eq!(resting, [&"started", &"stopped", &"archived", &"paused"]);
    }

    #[test]
    fn unknown_names_keep_polling() {
        assert_eq!(phase("queued"), Phase::Transitional);
        assert_eq!(core_state("queued"), SandboxState::Unknown);
    }

    #[test]
    fn running_filter_asks_for_started_and_the_in_place_states() {
        assert_eq!(
            raw_states_of(SandboxState::Running),
            ["started", "resizing", "snapshotting", "forking"]
        );
    }
}
