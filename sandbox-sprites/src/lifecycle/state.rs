//! A sprite's status and labels onto core's [`SandboxInfo`] (PROTOCOL.md §4.4, §4.5, §18.3).

use crate::config::PROVIDER;
use crate::wire::Sprite;
use sandbox_sdk_core::time::parse_rfc3339;
use sandbox_sdk_core::{Resources, SandboxInfo, SandboxState};
use std::collections::BTreeMap;

/// A sprite's state: `cold`, `warm` and `running` are all usable — a cold or warm sprite wakes
/// on the first exec or file call (§4.5) — so all three are `Running`; the raw state says which.
pub(crate) fn sprite_state(status: &str) -> SandboxState {
    match status {
        "cold" | "warm" | "running" => SandboxState::Running,
        _ => SandboxState::Unknown,
    }
}

/// Labels (`key=value` strings, §18.3) as metadata; a label without `=` has an empty value.
pub(crate) fn labels_to_metadata(labels: &[String]) -> BTreeMap<String, String> {
    labels
        .iter()
        .map(|label| match label.split_once('=') {
            Some((key, value)) => (key.to_owned(), value.to_owned()),
            None => (label.clone(), String::new()),
        })
        .collect()
}

/// Metadata as labels.
pub(crate) fn metadata_to_labels(metadata: &BTreeMap<String, String>) -> Vec<String> {
    metadata.iter().map(|(k, v)| format!("{k}={v}")).collect()
}

/// The info of `sprite`.
pub(crate) fn info(sprite: &Sprite) -> SandboxInfo {
    let raw = sprite.status.as_deref();
    let state = raw.map_or(SandboxState::Unknown, sprite_state);
    let mut info = SandboxInfo::new(sprite.name.clone(), PROVIDER, state);
    info.raw_state = raw.map(str::to_owned);
    info.metadata = labels_to_metadata(sprite.labels.as_deref().unwrap_or_default());
    let time = |t: &Option<String>| t.as_deref().and_then(parse_rfc3339);
    info.created_at = time(&sprite.created_at);
    info.updated_at = time(&sprite.updated_at);
    info.last_activity_at = time(&sprite.last_active_at);
    let config = sprite.config.clone().unwrap_or_default();
    info.region = sprite.primary_region.clone().or(config.region);
    info.resources = Resources {
        cpus: config.cpus,
        memory_mb: config.ram_mb,
        disk_gb: config.storage_gb,
        ..Resources::default()
    };
    info
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_round_trip_and_every_status_is_usable() {
        let mut metadata = BTreeMap::new();
        metadata.insert("owner".to_owned(), "u1.host".to_owned());
        metadata.insert("eq".to_owned(), "a=b".to_owned());
        let labels = metadata_to_labels(&metadata);
        assert_eq!(labels_to_metadata(&labels), metadata);
        assert_eq!(labels_to_metadata(&["prod".into()])["prod"], "");
        for status in ["cold", "warm", "running"] {
            assert_eq!(sprite_state(status), SandboxState::Running);
        }
        assert_eq!(sprite_state("exploded"), SandboxState::Unknown);
        let sprite = Sprite {
            name: "s".into(),
            status: Some("warm".into()),
            created_at: Some("2026-01-01T00:00:00Z".into()),
            ..Sprite::default()
        };
        let info = info(&sprite);
        assert_eq!(info.raw_state.as_deref(), Some("warm"));
        assert!(info.created_at.is_some());
    }
}
