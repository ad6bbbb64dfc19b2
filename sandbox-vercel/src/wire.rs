//! The JSON Vercel Sandbox's REST API reads and writes (PROTOCOL.md §4–§10), as serde types.
//! Optional fields are omitted when unset; unknown fields in answers are tolerated. Times are
//! integers in milliseconds since the epoch, durations in milliseconds.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;

/// A named sandbox: the durable identity (PROTOCOL.md §4.5).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct NamedSandbox {
    /// The name, unique per project: the adapter's sandbox id.
    pub name: String,
    /// The session running now, or the last one.
    #[serde(default)]
    pub current_session_id: Option<String>,
    /// `running`, `stopping` or `stopped`.
    #[serde(default)]
    pub status: Option<String>,
    /// Snapshot on stop, restore on resume.
    #[serde(default)]
    pub persistent: Option<bool>,
    /// Creation time (ms).
    #[serde(default)]
    pub created_at: Option<u64>,
    /// Last update (ms).
    #[serde(default)]
    pub updated_at: Option<u64>,
    /// When the status last changed (ms).
    #[serde(default)]
    pub status_updated_at: Option<u64>,
    /// The snapshot a resume starts from.
    #[serde(default)]
    pub current_snapshot_id: Option<String>,
    /// Region.
    #[serde(default)]
    pub region: Option<String>,
    /// vCPUs.
    #[serde(default)]
    pub vcpus: Option<u32>,
    /// Memory in MB.
    #[serde(default)]
    pub memory: Option<u64>,
    /// Runtime (`node24`, `python3.13`, ...).
    #[serde(default)]
    pub runtime: Option<String>,
    /// Image, digest-pinned.
    #[serde(default)]
    pub image: Option<String>,
    /// Session lifetime (ms).
    #[serde(default)]
    pub timeout: Option<u64>,
    /// Working directory of commands.
    #[serde(default)]
    pub cwd: Option<String>,
    /// Tags (the adapter's metadata).
    #[serde(default)]
    pub tags: Option<BTreeMap<String, String>>,
    /// When the running session ends (ms).
    #[serde(default)]
    pub expires_at: Option<u64>,
}

/// One VM run of a sandbox (PROTOCOL.md §5.2).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Session {
    /// `sbx_…`.
    pub id: String,
    /// `pending`, `running`, `stopping`, `stopped`, `failed`, `aborted` or `snapshotting`.
    #[serde(default)]
    pub status: Option<String>,
    /// The sandbox this session runs.
    #[serde(default)]
    pub source_sandbox_name: Option<String>,
    /// Working directory (`/vercel/sandbox`).
    #[serde(default)]
    pub cwd: Option<String>,
    /// Lifetime (ms), counted from `startedAt`.
    #[serde(default)]
    pub timeout: Option<u64>,
    /// Memory in MB.
    #[serde(default)]
    pub memory: Option<u64>,
    /// vCPUs.
    #[serde(default)]
    pub vcpus: Option<u32>,
    /// Region.
    #[serde(default)]
    pub region: Option<String>,
    /// Runtime.
    #[serde(default)]
    pub runtime: Option<String>,
    /// Times (ms).
    #[serde(default)]
    pub requested_at: Option<u64>,
    /// When the VM came up (ms).
    #[serde(default)]
    pub started_at: Option<u64>,
    /// When it was created (ms).
    #[serde(default)]
    pub created_at: Option<u64>,
    /// Last update (ms).
    #[serde(default)]
    pub updated_at: Option<u64>,
    /// When it stopped (ms).
    #[serde(default)]
    pub stopped_at: Option<u64>,
}

/// A public URL for one declared port (PROTOCOL.md §5.4).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Route {
    /// The whole URL.
    #[serde(default)]
    pub url: Option<String>,
    /// The port inside the sandbox.
    pub port: u16,
    /// `<subdomain>.vercel.run`.
    #[serde(default)]
    pub subdomain: Option<String>,
    /// Reserved by the platform.
    #[serde(default)]
    pub system: Option<bool>,
}

/// `{sandbox, session?, routes?, resumed?}`: create, get, update, fork, delete answers.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct SandboxEnvelope {
    pub sandbox: NamedSandbox,
    #[serde(default)]
    pub session: Option<Session>,
    #[serde(default)]
    pub routes: Vec<Route>,
}

/// `{session, routes?}`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct SessionEnvelope {
    pub session: Session,
    #[serde(default)]
    pub routes: Option<Vec<Route>>,
}

/// `{count, next}` of every listing.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct Pagination {
    #[serde(default)]
    pub next: Option<String>,
}

/// One page of `GET /v2/sandboxes`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct SandboxPage {
    #[serde(default)]
    pub sandboxes: Vec<NamedSandbox>,
    #[serde(default)]
    pub pagination: Pagination,
}

/// A command (PROTOCOL.md §6.3).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct VercelCommand {
    /// The command id (the adapter's pid).
    pub id: String,
    /// The executable.
    #[serde(default)]
    pub name: Option<String>,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Its working directory.
    #[serde(default)]
    pub cwd: Option<String>,
    /// The session it runs in.
    #[serde(default)]
    pub session_id: Option<String>,
    /// `null` while it runs.
    #[serde(default)]
    pub exit_code: Option<i32>,
    /// Start (ms).
    #[serde(default)]
    pub started_at: Option<u64>,
    /// How long it ran (ms), once ended.
    #[serde(default)]
    pub duration_ms: Option<u64>,
}

/// `{command}`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct CommandEnvelope {
    pub command: VercelCommand,
}

/// `{commands}`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct CommandList {
    #[serde(default)]
    pub commands: Vec<VercelCommand>,
}

/// One NDJSON line of a command stream (PROTOCOL.md §6.2, §6.5): `{command}` or
/// `{stream, data}`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct LogLine {
    #[serde(default)]
    pub command: Option<VercelCommand>,
    #[serde(default)]
    pub stream: Option<String>,
    #[serde(default)]
    pub data: Option<Value>,
}

/// A snapshot (PROTOCOL.md §10.1).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Snapshot {
    /// `snap_…`.
    pub id: String,
    /// The session it was taken from.
    #[serde(default)]
    pub source_session_id: Option<String>,
    /// `created`, `deleted` or `failed`.
    #[serde(default)]
    pub status: Option<String>,
    /// Size in bytes.
    #[serde(default)]
    pub size_bytes: Option<u64>,
    /// Creation (ms).
    #[serde(default)]
    pub created_at: Option<u64>,
    /// Expiry (ms); none = never.
    #[serde(default)]
    pub expires_at: Option<u64>,
    /// `automatic` or `manual`.
    #[serde(default)]
    pub creation_method: Option<String>,
}

/// `{snapshot, session?}`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct SnapshotEnvelope {
    pub snapshot: Snapshot,
    #[serde(default)]
    pub session: Option<Session>,
}

/// One page of `GET /v2/sandboxes/snapshots`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct SnapshotPage {
    #[serde(default)]
    pub snapshots: Vec<Snapshot>,
    #[serde(default)]
    pub pagination: Pagination,
}

/// Where a new sandbox starts from (PROTOCOL.md §4.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub(crate) enum Source {
    /// A snapshot.
    Snapshot {
        #[serde(rename = "snapshotId")]
        snapshot_id: String,
    },
}

/// `{vcpus, memory}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct ResourcesBody {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vcpus: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<u64>,
}

/// The body of `POST /v2|v3/sandboxes` and (without `projectId`/`source`/`runtime`) of fork.
/// `Debug` shows env names only.
#[derive(Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CreateBody {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub project_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<Source>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourcesBody>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub persistent: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_policy: Option<Value>,
}

impl fmt::Debug for CreateBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CreateBody")
            .field("name", &self.name)
            .field("runtime", &self.runtime)
            .field("image", &self.image)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("tags", &self.tags)
            .finish_non_exhaustive()
    }
}

/// `POST …/cmd` (PROTOCOL.md §6.1). `Debug` shows env names only.
#[derive(Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RunBody {
    pub command: String,
    pub args: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub sudo: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub wait: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub logs: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
    /// The command reads stdin from `POST …/stdin` (PROTOCOL.md §6.6); sent only when true, as
    /// the official SDK does.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub attach_stdin: bool,
}

/// `POST …/cmd/{id}/stdin` (PROTOCOL.md §6.6): `data` (base64) written at `offset`, the bytes
/// the stream took before it; `close` closes stdin after it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct StdinBody {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    pub offset: u64,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub close: bool,
}

/// The answer to a stdin request: the bytes the stream has taken in all (PROTOCOL.md §6.6).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct StdinAnswer {
    #[serde(default)]
    pub bytes_written: Option<u64>,
}

impl fmt::Debug for RunBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunBody")
            .field("command", &self.command)
            .field("args", &self.args.len())
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("wait", &self.wait)
            .finish_non_exhaustive()
    }
}

/// The standard error envelope (PROTOCOL.md §13.1).
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ErrorBody {
    pub error: ErrorDetail,
}

/// `error` of [`ErrorBody`].
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ErrorDetail {
    #[serde(default)]
    pub code: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub limit: Option<RateLimit>,
}

/// `error.limit` of a 429.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct RateLimit {
    /// Epoch seconds when the limit resets.
    #[serde(default)]
    pub reset: Option<u64>,
}
