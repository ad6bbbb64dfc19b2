//! Fly machine states (PROTOCOL.md §5) mapped onto the core [`SandboxState`].

use sandbox_sdk_core::SandboxState;

/// Maps a raw Fly machine state onto the core model.
///
/// | Fly | core |
/// | --- | --- |
/// | `started` | `Running` |
/// | `created`, `creating`, `starting`, `restarting`, `updating`, `replacing` | `Creating` |
/// | `stopping`, `stopped` | `Stopped` |
/// | `suspending`, `suspended` | `Paused` |
/// | `failed`, `launch_failed` | `Failed` |
/// | `destroying`, `destroyed`, `replaced`, `migrated` | `Destroyed` |
/// | anything else | `Unknown` (the raw name stays in `SandboxInfo::raw_state`) |
///
/// `replaced` and `migrated` only describe an old version of a machine; that version is gone.
pub fn map_state(raw: &str) -> SandboxState {
    match raw {
        "started" => SandboxState::Running,
        "created" | "creating" | "starting" | "restarting" | "updating" | "replacing" => {
            SandboxState::Creating
        }
        "stopping" | "stopped" => SandboxState::Stopped,
        "suspending" | "suspended" => SandboxState::Paused,
        "failed" | "launch_failed" => SandboxState::Failed,
        "destroying" | "destroyed" | "replaced" | "migrated" => SandboxState::Destroyed,
        _ => SandboxState::Unknown,
    }
}

/// The raw Fly states that make up one core state, for the list endpoint's `state` filter.
pub fn fly_states(state: SandboxState) -> &'static [&'static str] {
    match state {
        SandboxState::Running => &["started"],
        SandboxState::Creating => &[
            "created",
            "creating",
            "starting",
            "restarting",
            "updating",
            "replacing",
        ],
        SandboxState::Stopped => &["stopping", "stopped"],
        SandboxState::Paused => &["suspending", "suspended"],
        SandboxState::Failed => &["failed", "launch_failed"],
        SandboxState::Destroyed => &["destroying", "destroyed"],
        _ => &[],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: &[&str] = &[
        "created",
        "started",
        "stopped",
        "suspended",
        "failed",
        "creating",
        "starting",
        "stopping",
        "restarting",
        "suspending",
        "destroying",
        "updating",
        "replacing",
        "launch_failed",
        "destroyed",
        "replaced",
        "migrated",
    ];

    #[test]
    fn every_documented_state_has_a_known_mapping() {
        for raw in ALL {
            assert_ne!(map_state(raw), SandboxState::Unknown, "{raw}");
        }
        assert_eq!(map_state("started"), SandboxState::Running);
        assert_eq!(map_state("suspended"), SandboxState::Paused);
        assert_eq!(map_state("stopped"), SandboxState::Stopped);
        assert_eq!(map_state("launch_failed"), SandboxState::Failed);
        assert_eq!(map_state("destroyed"), SandboxState::Destroyed);
        assert_eq!(map_state("hibernating"), SandboxState::Unknown);
    }

    #[test]
    fn filter_states_map_back_to_the_same_core_state() {
        for state in [
            SandboxState::Running,
            SandboxState::Creating,
            SandboxState::Stopped,
            SandboxState::Paused,
            SandboxState::Failed,
            SandboxState::Destroyed,
        ] {
            for raw in fly_states(state) {
                assert_eq!(map_state(raw), state, "{raw}");
            }
        }
        assert!(fly_states(SandboxState::Archived).is_empty());
    }
}
