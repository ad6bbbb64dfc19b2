//! Serde types matching Daytona's JSON (PROTOCOL.md §1–§11).
//!
//! Optional request fields are omitted when unset; unknown response fields are ignored and every
//! response field the service may leave out or send as `null` is optional. Types holding secrets
//! (env values, tokens) do not implement `Debug`.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The `Sandbox` DTO (and `SandboxListItem`, which lacks some fields).
#[derive(Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct SandboxDto {
    pub id: String,
    pub organization_id: Option<String>,
    pub name: Option<String>,
    pub snapshot: Option<String>,
    pub user: Option<String>,
    pub labels: Option<BTreeMap<String, String>>,
    pub public: Option<bool>,
    pub target: Option<String>,
    pub cpu: Option<f64>,
    pub gpu: Option<f64>,
    pub memory: Option<f64>,
    pub disk: Option<f64>,
    pub state: Option<String>,
    pub desired_state: Option<String>,
    pub error_reason: Option<String>,
    pub recoverable: Option<bool>,
    pub auto_stop_interval: Option<i64>,
    pub auto_archive_interval: Option<i64>,
    pub auto_delete_interval: Option<i64>,
    pub auto_destroy_at: Option<String>,
    pub created_at: Option<String>,
    pub updated_at: Option<String>,
    pub last_activity_at: Option<String>,
    pub toolbox_proxy_url: Option<String>,
    pub sandbox_class: Option<String>,
}

/// `GET /sandbox`: the cursor page (API ≥ v0.180) or the older bare array.
#[derive(Deserialize)]
#[serde(untagged)]
pub(crate) enum SandboxList {
    Page {
        items: Vec<SandboxDto>,
        #[serde(default, rename = "nextCursor")]
        next_cursor: Option<String>,
    },
    Array(Vec<SandboxDto>),
}

/// A volume mounted at create time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeMount {
    /// The volume's id or name.
    pub volume_id: String,
    /// Where it is mounted in the sandbox.
    pub mount_path: String,
    /// Only this prefix of the volume is mounted, when set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subpath: Option<String>,
}

/// `POST /sandbox` body (`CreateSandbox`).
#[derive(Clone, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CreateSandboxBody {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub public: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_block_all: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_allow_list: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub domain_allow_list: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto_stop_interval: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto_archive_interval: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto_delete_interval: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl_minutes: Option<i64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<VolumeMount>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub build_info: Option<BuildInfo>,
}

/// `buildInfo` of a create: build the sandbox's image from a Dockerfile.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct BuildInfo {
    pub dockerfile_content: String,
}

/// `PUT /sandbox/{id}/labels` body and answer.
#[derive(Serialize, Deserialize)]
pub(crate) struct Labels {
    pub labels: BTreeMap<String, String>,
}

/// `POST /sandbox/{id}/resize` body.
#[derive(Serialize)]
pub(crate) struct ResizeBody {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk: Option<u32>,
}

/// `POST /sandbox/{id}/fork` body.
#[derive(Serialize)]
pub(crate) struct ForkBody {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// `POST /sandbox/{id}/snapshot` body.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SandboxSnapshotBody {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub include_memory: Option<bool>,
}

/// `SnapshotDto`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct SnapshotDto {
    pub id: String,
    pub name: Option<String>,
    pub state: Option<String>,
    pub error_reason: Option<String>,
    pub created_at: Option<String>,
    pub source_sandbox_id: Option<String>,
}

/// `POST /snapshots` body (`CreateSnapshot`).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CreateSnapshotBody {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub region_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox_class: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub build_info: Option<BuildInfo>,
}

/// `SshAccessDto`.
#[derive(Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SshAccessDto {
    pub token: String,
    #[serde(default)]
    pub expires_at: Option<String>,
    #[serde(default)]
    pub ssh_command: Option<String>,
}

/// `PortPreviewUrl` and `SignedPortPreviewUrl`.
#[derive(Clone, Deserialize)]
pub(crate) struct PreviewUrlDto {
    pub url: String,
    #[serde(default)]
    pub token: Option<String>,
}

/// `OrganizationUsageOverview`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct UsageDto {
    #[serde(default)]
    pub region_usage: Vec<RegionUsageDto>,
}

/// `RegionUsageOverview`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct RegionUsageDto {
    pub region_id: String,
    pub sandbox_class: Option<String>,
    pub total_cpu_quota: Option<f64>,
    pub current_cpu_usage: Option<f64>,
    pub total_memory_quota: Option<f64>,
    pub current_memory_usage: Option<f64>,
    pub total_disk_quota: Option<f64>,
    pub current_disk_usage: Option<f64>,
    pub max_cpu_per_sandbox: Option<f64>,
    pub max_memory_per_sandbox: Option<f64>,
    pub max_disk_per_sandbox: Option<f64>,
}

/// `GET /config`: the installation's public settings (only what the adapter reads).
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct PublicConfigDto {
    pub analytics_api_url: Option<String>,
}

/// One period of the analytics API's `…/sandbox/{id}/usage` answer.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct UsagePeriodDto {
    pub start_at: Option<String>,
    pub end_at: Option<String>,
    pub cpu: f64,
    pub gpu: f64,
    #[serde(rename = "ramGB")]
    pub ram_gb: f64,
    #[serde(rename = "diskGB")]
    pub disk_gb: f64,
    pub price: Option<f64>,
}

// ---- toolbox ----

/// `POST T/process/execute` body.
#[derive(Serialize)]
pub(crate) struct ExecuteBody {
    pub command: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub envs: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
}

/// `POST T/process/execute` answer (very old daemons sent `code` instead of `exitCode`).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ExecuteAnswer {
    #[serde(default)]
    pub exit_code: Option<i32>,
    #[serde(default)]
    pub code: Option<i32>,
    #[serde(default)]
    pub result: String,
}

/// `POST T/process/session` body.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CreateSessionBody {
    pub session_id: String,
}

/// `POST T/process/session/{sid}/exec` body.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SessionExecBody {
    pub command: String,
    pub run_async: bool,
}

/// `POST T/process/session/{sid}/exec` answer (async: only `cmdId`).
#[derive(Debug, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct SessionExecAnswer {
    pub cmd_id: String,
    pub exit_code: Option<i32>,
    pub output: Option<String>,
    pub stdout: Option<String>,
    pub stderr: Option<String>,
}

/// A session command (`Command`).
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct SessionCommandDto {
    pub id: String,
    pub command: String,
    pub exit_code: Option<i32>,
}

/// A session (`Session`).
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct SessionDto {
    pub session_id: String,
    pub commands: Option<Vec<SessionCommandDto>>,
}

/// Non-follow logs with a new enough SDK version.
#[derive(Debug, Deserialize, Default)]
#[serde(default)]
pub(crate) struct SessionLogs {
    pub output: Option<String>,
    pub stdout: Option<String>,
    pub stderr: Option<String>,
}

/// `POST …/command/{cid}/input` body.
#[derive(Serialize)]
pub(crate) struct InputBody {
    pub data: String,
}

/// `GET T/system/metrics` (`SystemMetrics`; newer daemons).
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct SystemMetricsDto {
    pub cpu_count: Option<u32>,
    pub cpu_used_pct: Option<f64>,
    pub disk_total: Option<u64>,
    pub disk_used: Option<u64>,
    pub mem_total: Option<u64>,
    pub mem_used: Option<u64>,
    pub timestamp: Option<String>,
    pub timestamp_unix: Option<i64>,
}

/// `FileInfo`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct FileInfoDto {
    pub name: String,
    pub path: Option<String>,
    pub is_dir: bool,
    pub size: u64,
    pub mode: Option<String>,
    pub permissions: Option<String>,
    pub owner: Option<String>,
    pub group: Option<String>,
    pub modified_at: Option<String>,
}

/// `POST T/files/bulk-upload` answer.
#[derive(Debug, Deserialize, Default)]
#[serde(default)]
pub(crate) struct BulkUploadAnswer {
    pub files: Vec<UploadedFile>,
}

/// One uploaded file.
#[derive(Debug, Deserialize, Default)]
#[serde(default)]
pub(crate) struct UploadedFile {
    pub path: String,
    pub bytes: Option<u64>,
}

/// `GET T/files/find` match.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(default)]
pub(crate) struct MatchDto {
    pub file: String,
    pub line: u64,
    pub content: String,
}

/// `GET T/files/search` answer.
#[derive(Debug, Deserialize, Default)]
#[serde(default)]
pub(crate) struct SearchAnswer {
    pub files: Vec<String>,
}

/// Either error body: the API's (`statusCode`, `error`, `message`, `path`, `timestamp`) and the
/// daemon's/proxy's (`statusCode`, `message`, `code`, `source`, `method`, …). NestJS validation
/// errors may carry `message` as an array of strings.
#[derive(Debug, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct ErrorBody {
    pub status_code: Option<u16>,
    pub message: Option<serde_json::Value>,
    pub error: Option<String>,
    pub code: Option<String>,
    pub source: Option<String>,
    /// `POST T/files/bulk-upload` answers a 400 with a list of per-file errors instead.
    pub errors: Option<Vec<serde_json::Value>>,
}

impl ErrorBody {
    /// The message as one line (array messages joined with `", "`).
    pub fn message_text(&self) -> Option<String> {
        match self.message.as_ref()? {
            serde_json::Value::String(s) => Some(s.clone()),
            serde_json::Value::Array(items) => Some(
                items
                    .iter()
                    .filter_map(|v| v.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            ),
            _ => None,
        }
        .filter(|s| !s.trim().is_empty())
        .or_else(|| {
            let errors: Vec<String> = self
                .errors
                .iter()
                .flatten()
                .filter_map(|e| match e {
                    serde_json::Value::String(s) => Some(s.clone()),
                    serde_json::Value::Object(o) => ["error", "message"]
                        .iter()
                        .find_map(|k| o.get(*k).and_then(|v| v.as_str()))
                        .map(|m| match o.get("path").and_then(|p| p.as_str()) {
                            Some(path) => format!("{path}: {m}"),
                            None => m.to_owned(),
                        }),
                    _ => None,
                })
                .collect();
            (!errors.is_empty()).then(|| errors.join("; "))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_accepts_the_cursor_page_and_the_bare_array() {
        let page: SandboxList =
            serde_json::from_str(r#"{"items":[{"id":"a","state":"started"}],"nextCursor":"c2"}"#)
                .unwrap();
        match page {
            SandboxList::Page { items, next_cursor } => {
                assert_eq!(items[0].id, "a");
                assert_eq!(next_cursor.as_deref(), Some("c2"));
            }
            SandboxList::Array(_) => panic!("page read as array"),
        }
        let last: SandboxList = serde_json::from_str(r#"{"items":[],"nextCursor":null}"#).unwrap();
        assert!(matches!(
            last,
            SandboxList::Page {
                next_cursor: None,
                ..
            }
        ));
        let old: SandboxList = serde_json::from_str(r#"[{"id":"a"},{"id":"b"}]"#).unwrap();
        assert!(matches!(old, SandboxList::Array(v) if v.len() == 2));
    }

    #[test]
    fn sandbox_tolerates_nulls_and_unknown_fields() {
        let dto: SandboxDto = serde_json::from_str(
            r#"{"id":"x","errorReason":null,"networkAllowList":null,"kvm":false,"queueTimeout":3,"labels":{"a":"b"},"cpu":1,"state":"creating"}"#,
        )
        .unwrap();
        assert_eq!(dto.id, "x");
        assert_eq!(dto.error_reason, None);
        assert_eq!(dto.state.as_deref(), Some("creating"));
    }

    #[test]
    fn create_body_omits_unset_fields() {
        let body = CreateSandboxBody {
            name: Some("n".into()),
            ..Default::default()
        };
        assert_eq!(serde_json::to_string(&body).unwrap(), r#"{"name":"n"}"#);
    }

    #[test]
    fn error_body_reads_both_shapes_and_array_messages() {
        let api: ErrorBody = serde_json::from_str(r#"{"path":"/api/sandbox/x","timestamp":"t","statusCode":409,"error":"Conflict","message":"Sandbox state change in progress"}"#).unwrap();
        assert_eq!(
            api.message_text().unwrap(),
            "Sandbox state change in progress"
        );
        let daemon: ErrorBody = serde_json::from_str(r#"{"statusCode":404,"message":"session not found","code":"NOT_FOUND","timestamp":"t","path":"/p","method":"GET","source":"DAYTONA_DAEMON"}"#).unwrap();
        assert_eq!(daemon.code.as_deref(), Some("NOT_FOUND"));
        let validation: ErrorBody =
            serde_json::from_str(r#"{"statusCode":400,"message":["a must be x","b must be y"]}"#)
                .unwrap();
        assert_eq!(
            validation.message_text().unwrap(),
            "a must be x, b must be y"
        );
    }
}

/// `POST /process/interpreter/context`'s body (PROTOCOL.md §12).
#[derive(Debug, Serialize)]
pub struct CreateContextBody {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub language: Option<String>,
}

/// An interpreter context as the daemon shows it.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InterpreterContextDto {
    pub id: String,
    #[serde(default)]
    pub cwd: String,
    #[serde(default)]
    pub language: String,
}

/// `GET /process/interpreter/context`'s answer.
#[derive(Debug, Deserialize)]
pub struct ContextsAnswer {
    #[serde(default)]
    pub contexts: Vec<InterpreterContextDto>,
}

/// The first message of an interpreter socket (PROTOCOL.md §12).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InterpreterRequest<'a> {
    pub code: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_id: Option<&'a str>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub envs: &'a BTreeMap<String, String>,
    /// Seconds; `0` is no limit.
    pub timeout: u64,
}

/// One frame of an interpreter socket: every field is always there.
#[derive(Debug, Deserialize)]
pub struct InterpreterFrame {
    #[serde(rename = "type", default)]
    pub kind: String,
    #[serde(default)]
    pub text: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub value: String,
    #[serde(default)]
    pub traceback: String,
}
