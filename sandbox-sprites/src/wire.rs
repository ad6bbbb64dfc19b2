//! Sprites' JSON as the API sends and takes it (PROTOCOL.md §4–§10): optional fields are
//! omitted when unset, unknown fields are tolerated.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A sprite (PROTOCOL.md §4.4). A listing's entries may carry only `name`, `org_slug` and
/// `updated_at` (§4.2); everything else is optional for that reason.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Sprite {
    /// The name, unique in the organisation: the sprite's id in every path.
    pub name: String,
    /// Fly's own id (a UUID, opaque).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// `cold`, `warm` or `running` (§4.5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// The public URL (§9).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Who may use the URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url_settings: Option<UrlSettings>,
    /// Labels (§3): this adapter writes its own as `key=value`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<Vec<String>>,
    /// The organisation (`org_slug` in listings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub organization: Option<String>,
    /// The organisation's slug (listings carry this instead of `organization`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub org_slug: Option<String>,
    /// Sizes as asked at create (§4.1; whether they are honoured is unconfirmed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<SpriteConfig>,
    /// Where the sprite lives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_region: Option<String>,
    /// RFC 3339 times.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
    /// Last change (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<String>,
    /// Last activity (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_active_at: Option<String>,
}

/// `url_settings` (§4.1, §9): `auth` is `sprite` (the token is needed) or `public`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UrlSettings {
    /// `sprite` or `public`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<String>,
}

/// `config` of a create (§4.1).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpriteConfig {
    /// vCPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<u32>,
    /// Memory in MB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ram_mb: Option<u64>,
    /// Disk in GB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_gb: Option<u64>,
    /// Region.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
}

/// `POST /v1/sprites` (§4.1).
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct CreateBody {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config: Option<SpriteConfig>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url_settings: Option<UrlSettings>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub environment: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub wait_for_capacity: bool,
}

/// One page of `GET /v1/sprites` (§4.2).
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct SpritePage {
    #[serde(default)]
    pub sprites: Vec<Sprite>,
    #[serde(default)]
    pub has_more: bool,
    #[serde(default)]
    pub next_continuation_token: Option<String>,
}

/// An exec session as `GET …/exec` lists it (§5.5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ExecSession {
    /// The session id (the PID; a number on the wire, text here).
    #[serde(deserialize_with = "number_or_text")]
    pub id: String,
    /// The command line.
    #[serde(default)]
    pub command: String,
    /// Its working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    /// When it started (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<String>,
    /// Whether a client is attached now.
    #[serde(default)]
    pub is_active: bool,
    /// Whether it runs in a pty.
    #[serde(default)]
    pub tty: bool,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct SessionList {
    #[serde(default)]
    pub sessions: Vec<ExecSession>,
}

/// The `session_info` text frame (§5.4, §18.6).
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct SessionInfo {
    #[serde(deserialize_with = "number_or_text")]
    pub session_id: String,
}

/// A JSON text frame of the exec socket: its `type`, and the exit code of an `exit`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct TextFrame {
    #[serde(rename = "type", default)]
    pub kind: String,
    #[serde(default)]
    pub exit_code: Option<i32>,
}

/// One line of a checkpoint or kill progress stream (§5.5, §8).
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ProgressLine {
    #[serde(rename = "type", default)]
    pub kind: String,
    #[serde(default)]
    pub data: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub error: Option<String>,
}

/// A checkpoint (§8).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Checkpoint {
    /// `vN`.
    pub id: String,
    /// RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub create_time: Option<String>,
    /// The comment given at create.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
}

/// One `fs/list` entry (§7, §18.12).
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct FsEntry {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub path: Option<String>,
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub size: u64,
    #[serde(default)]
    pub mode: Option<String>,
    #[serde(rename = "modTime", default)]
    pub mod_time: Option<String>,
    #[serde(rename = "isDir", default)]
    pub is_dir: bool,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct FsList {
    #[serde(default)]
    pub entries: Vec<FsEntry>,
}

/// Any of the three error bodies (§10): `{"error": text}`, `{"error": code, "message": text}`,
/// `{"errors": [text]}`; for files also `code` (an errno name) and `path` (§7).
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct ErrorBody {
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub errors: Vec<String>,
    #[serde(default)]
    pub code: Option<String>,
    #[serde(default)]
    pub retry_after_seconds: Option<u64>,
}

fn number_or_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    match serde_json::Value::deserialize(d)? {
        serde_json::Value::String(s) => Ok(s),
        serde_json::Value::Number(n) => Ok(n.to_string()),
        other => Err(serde::de::Error::custom(format!(
            "expected a number or a string, got {other}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_list_entries_and_numeric_session_ids_parse() {
        let page: SpritePage = serde_json::from_str(
            r#"{"sprites":[{"name":"a","org_slug":"o","updated_at":"2026-01-01T00:00:00Z"}],
                "has_more":true,"next_continuation_token":"c1","extra":1}"#,
        )
        .unwrap();
        assert_eq!(page.sprites[0].name, "a");
        assert!(page.sprites[0].status.is_none());
        let list: SessionList = serde_json::from_str(
            r#"{"sessions":[{"id":42,"command":"sleep 9","is_active":false}]}"#,
        )
        .unwrap();
        assert_eq!(list.sessions[0].id, "42");
        let info: SessionInfo =
            serde_json::from_str(r#"{"type":"session_info","session_id":"7"}"#).unwrap();
        assert_eq!(info.session_id, "7");
    }
}
