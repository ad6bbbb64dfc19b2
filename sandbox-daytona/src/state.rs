//! Daytona's sandbox states (PROTOCOL.md §1.3) mapped onto the core model.

use sandbox_sdk_core::SandboxState;

/// How a client should treat a Daytona state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
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
pub const ALL_STATES: [&str; 22] = [
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
pub fn phase(raw: &str) -> Phase {
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
pub fn core_state(raw: &str) -> SandboxState {
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
pub fn raw_states_of(state: SandboxState) -> Vec<&'static str> {
    ALL_STATES
        .iter()
        .copied()
        .filter(|raw| core_state(raw) == state)
        .collect()
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
