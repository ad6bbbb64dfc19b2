//! Serde types matching E2B's JSON exactly (PROTOCOL.md §2.5, §2.6, §4.3, §5.1, §6.1). Optional
//! fields are left out when unset, unknown fields are ignored. Crate-private, except the few shapes
//! callers build or read through the inherent methods (network rules, volumes, log lines, template
//! steps), which the crate root re-exports.

use base64::Engine as _;
use serde::{Deserialize, Deserializer, Serialize};
use std::collections::BTreeMap;
use std::fmt;

// ---------------------------------------------------------------------------------------------
// Control plane
// ---------------------------------------------------------------------------------------------

/// `autoResume` of `NewSandboxV2`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct AutoResume {
    /// Whether a paused sandbox resumes when traffic reaches it.
    pub enabled: bool,
}

/// A volume mounted into a sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeMount {
    /// The volume's name.
    pub name: String,
    /// Where it is mounted.
    pub path: String,
}

/// Network options of a sandbox (`SandboxNetworkConfig`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkConfig {
    /// Whether sandbox URLs are reachable without the traffic access token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow_public_traffic: Option<bool>,
    /// Allowed egress destinations (CIDR, IP or domain).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_out: Vec<String>,
    /// Denied egress destinations (CIDR or IP).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny_out: Vec<String>,
    /// Host mask used for sandbox requests.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mask_request_host: Option<String>,
    /// Egress proxy configuration, passed through as given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub egress_proxy: Option<serde_json::Value>,
    /// Per-domain transform rules, passed through as given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rules: Option<serde_json::Value>,
}

/// `PUT /sandboxes/{id}/network` body (`SandboxNetworkUpdateConfig`): replaces the egress rules.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkUpdate {
    /// Allowed egress destinations.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_out: Vec<String>,
    /// Denied egress destinations.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny_out: Vec<String>,
    /// Egress proxy configuration, passed through as given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub egress_proxy: Option<serde_json::Value>,
    /// Per-domain transform rules, passed through as given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rules: Option<serde_json::Value>,
    /// `false` denies all egress (same as `denyOut: ["0.0.0.0/0"]`).
    #[serde(
        rename = "allow_internet_access",
        skip_serializing_if = "Option::is_none"
    )]
    pub allow_internet_access: Option<bool>,
}

/// `POST /v2/sandboxes` body (`NewSandboxV2`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NewSandbox {
    /// Template id or alias.
    #[serde(rename = "templateID")]
    pub template_id: String,
    /// Time to live in seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
    /// Pause instead of kill when the time to live runs out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto_pause: Option<bool>,
    /// Keep memory when auto-pausing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto_pause_memory: Option<bool>,
    /// Resume on incoming traffic.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto_resume: Option<AutoResume>,
    /// Environment variables.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub env_vars: BTreeMap<String, String>,
    /// Metadata labels.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    /// Internet access (snake_case on the wire).
    #[serde(
        rename = "allow_internet_access",
        skip_serializing_if = "Option::is_none"
    )]
    pub allow_internet_access: Option<bool>,
    /// Network options.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkConfig>,
    /// Volume mounts.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub volume_mounts: Vec<VolumeMount>,
}

/// `Sandbox`: what create, connect, resume and fork return. `Debug` hides both tokens.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SandboxCreated {
    /// The sandbox id (the one to keep).
    #[serde(rename = "sandboxID")]
    pub sandbox_id: String,
    /// The template id.
    #[serde(rename = "templateID", default)]
    pub template_id: Option<String>,
    /// The template alias.
    #[serde(default)]
    pub alias: Option<String>,
    /// envd version.
    #[serde(default)]
    pub envd_version: Option<String>,
    /// Token for envd (`X-Access-Token`).
    #[serde(default)]
    pub envd_access_token: Option<String>,
    /// Token for non-envd ports when public traffic is off.
    #[serde(default)]
    pub traffic_access_token: Option<String>,
    /// Domain overriding the client's for envd and preview URLs.
    #[serde(default)]
    pub domain: Option<String>,
}

/// What `Debug` shows in place of a token.
fn redacted(token: &Option<String>) -> Option<&'static str> {
    token.as_ref().map(|_| "<redacted>")
}

impl fmt::Debug for SandboxCreated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SandboxCreated")
            .field("sandbox_id", &self.sandbox_id)
            .field("template_id", &self.template_id)
            .field("alias", &self.alias)
            .field("envd_version", &self.envd_version)
            .field("envd_access_token", &redacted(&self.envd_access_token))
            .field(
                "traffic_access_token",
                &redacted(&self.traffic_access_token),
            )
            .field("domain", &self.domain)
            .finish()
    }
}

/// `ConnectSandboxV2` body.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub(crate) struct ConnectBody {
    /// Time to live in seconds (only ever extended by the service).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
}

/// `SandboxDetail` and `ListedSandbox` (the fields both share plus the detail-only ones).
/// `Debug` hides the envd access token.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SandboxDetail {
    /// The sandbox id.
    #[serde(rename = "sandboxID")]
    pub sandbox_id: String,
    /// The template id.
    #[serde(rename = "templateID", default)]
    pub template_id: Option<String>,
    /// The template alias.
    #[serde(default)]
    pub alias: Option<String>,
    /// RFC 3339 start time.
    #[serde(default)]
    pub started_at: Option<String>,
    /// RFC 3339 end of the time to live.
    #[serde(default)]
    pub end_at: Option<String>,
    /// `running` or `paused`.
    #[serde(default)]
    pub state: Option<String>,
    /// Metadata labels.
    #[serde(default, deserialize_with = "null_default")]
    pub metadata: BTreeMap<String, String>,
    /// CPUs.
    #[serde(default)]
    pub cpu_count: Option<u32>,
    /// Memory in MiB.
    #[serde(rename = "memoryMB", default)]
    pub memory_mb: Option<u64>,
    /// Disk in MiB.
    #[serde(rename = "diskSizeMB", default)]
    pub disk_size_mb: Option<u64>,
    /// envd version.
    #[serde(default)]
    pub envd_version: Option<String>,
    /// Token for envd (detail only).
    #[serde(default)]
    pub envd_access_token: Option<String>,
    /// Domain (detail only).
    #[serde(default)]
    pub domain: Option<String>,
}

impl fmt::Debug for SandboxDetail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SandboxDetail")
            .field("sandbox_id", &self.sandbox_id)
            .field("template_id", &self.template_id)
            .field("alias", &self.alias)
            .field("started_at", &self.started_at)
            .field("end_at", &self.end_at)
            .field("state", &self.state)
            .field("metadata", &self.metadata)
            .field("cpu_count", &self.cpu_count)
            .field("memory_mb", &self.memory_mb)
            .field("disk_size_mb", &self.disk_size_mb)
            .field("envd_version", &self.envd_version)
            .field("envd_access_token", &redacted(&self.envd_access_token))
            .field("domain", &self.domain)
            .finish()
    }
}

/// `{"timeout": s}` for `POST /sandboxes/{id}/timeout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct TimeoutBody {
    /// Seconds from now.
    pub timeout: u64,
}

/// `{"memory": bool}` for `POST /sandboxes/{id}/pause`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct PauseBody {
    /// Keep memory (`false`: filesystem only).
    pub memory: bool,
}

/// `POST /sandboxes/{id}/fork` body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct ForkBody {
    /// How many children (1..=100).
    pub count: u32,
    /// Time to live of each child in seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
}

/// REST `Error` object, as nested in fork results.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(crate) struct RestError {
    /// HTTP status.
    #[serde(default)]
    pub code: Option<i64>,
    /// Text.
    #[serde(default)]
    pub message: Option<String>,
}

/// One element of the fork answer.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(crate) struct ForkResult {
    /// The child, when it started.
    #[serde(default)]
    pub sandbox: Option<SandboxCreated>,
    /// Why it did not.
    #[serde(default)]
    pub error: Option<RestError>,
}

/// A team volume (`Volume`; the content token of `VolumeAndToken` is not kept).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Volume {
    /// The volume's id.
    #[serde(rename = "volumeID")]
    pub volume_id: String,
    /// Its name (usable in [`VolumeMount::name`]).
    pub name: String,
}

/// `NewVolume`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct NewVolume {
    /// Name, `^[a-zA-Z0-9_-]+$`.
    pub name: String,
}

/// `POST /sandboxes/{id}/snapshots` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct SnapshotBody {
    /// Snapshot name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// `SnapshotInfo`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(crate) struct SnapshotWire {
    /// Snapshot (template) id including the tag.
    #[serde(rename = "snapshotID")]
    pub snapshot_id: String,
    /// Full names.
    #[serde(default, deserialize_with = "null_default")]
    pub names: Vec<String>,
}

/// `SandboxMetric`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SandboxMetric {
    /// RFC 3339 time.
    #[serde(default)]
    pub timestamp: Option<String>,
    /// Unix seconds.
    #[serde(default)]
    pub timestamp_unix: Option<i64>,
    /// CPUs.
    #[serde(default)]
    pub cpu_count: Option<u32>,
    /// CPU use in percent.
    #[serde(default)]
    pub cpu_used_pct: Option<f64>,
    /// Memory used, bytes.
    #[serde(default)]
    pub mem_used: Option<u64>,
    /// Memory total, bytes.
    #[serde(default)]
    pub mem_total: Option<u64>,
    /// Memory used by caches, bytes.
    #[serde(default)]
    pub mem_cache: Option<u64>,
    /// Disk used, bytes.
    #[serde(default)]
    pub disk_used: Option<u64>,
    /// Disk total, bytes.
    #[serde(default)]
    pub disk_total: Option<u64>,
}

/// `GET /sandboxes/metrics` answer: the latest sample per sandbox.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub(crate) struct SandboxesMetrics {
    /// Sample per sandbox id.
    #[serde(default, deserialize_with = "null_default")]
    pub sandboxes: BTreeMap<String, SandboxMetric>,
}

/// One line of `GET /v2/sandboxes/{id}/logs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogEntry {
    /// RFC 3339 time.
    #[serde(default)]
    pub timestamp: String,
    /// `debug`, `info`, `warn` or `error`.
    #[serde(default)]
    pub level: String,
    /// The message.
    #[serde(default)]
    pub message: String,
    /// Structured fields.
    #[serde(default, deserialize_with = "null_default")]
    pub fields: BTreeMap<String, String>,
}

/// `{"logs": [...]}`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct LogsWire {
    /// The entries.
    #[serde(default, deserialize_with = "null_default")]
    pub logs: Vec<LogEntry>,
}

/// `POST /v3/templates` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TemplateCreate {
    /// Template name.
    pub name: String,
    /// CPUs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_count: Option<u32>,
    /// Memory in MiB.
    #[serde(rename = "memoryMB", skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u64>,
}

/// `POST /v3/templates` answer.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(crate) struct TemplateCreated {
    /// Template id.
    #[serde(rename = "templateID")]
    pub template_id: String,
    /// Build id.
    #[serde(rename = "buildID")]
    pub build_id: String,
}

/// A template build step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TemplateStep {
    /// `RUN`, `ENV`, `WORKDIR`, `USER`, `COPY`, ...
    #[serde(rename = "type")]
    pub kind: String,
    /// Arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Hash of files used by the step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub files_hash: Option<String>,
    /// Force the step to run regardless of the cache.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub force: Option<bool>,
}

/// `POST /v2/templates/{id}/builds/{buildID}` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TemplateBuildStart {
    /// Base image.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from_image: Option<String>,
    /// Base template.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from_template: Option<String>,
    /// Steps.
    pub steps: Vec<TemplateStep>,
    /// Start command.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_cmd: Option<String>,
    /// Ready command.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready_cmd: Option<String>,
}

/// Build status answer.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(crate) struct TemplateBuildStatus {
    /// `building`, `waiting`, `ready` or `error`.
    pub status: String,
    /// Why it failed.
    #[serde(default)]
    pub reason: Option<serde_json::Value>,
}

/// `GET /templates/aliases/{alias}` answer.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(crate) struct TemplateAlias {
    /// Template id.
    #[serde(rename = "templateID")]
    pub template_id: String,
}

/// `GET /templates/{templateID}` answer (`TemplateWithBuilds`), the fields prepare reads.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(crate) struct TemplateWithBuilds {
    /// Template id.
    #[serde(rename = "templateID")]
    pub template_id: String,
    /// Its builds.
    #[serde(default)]
    pub builds: Vec<TemplateBuild>,
}

/// One build of a template (`TemplateBuild`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(crate) struct TemplateBuild {
    /// Build id.
    #[serde(rename = "buildID")]
    pub build_id: String,
    /// `building`, `waiting`, `ready` or `error`.
    pub status: String,
    /// RFC 3339 creation time.
    #[serde(rename = "createdAt", default)]
    pub created_at: Option<String>,
}

// ---------------------------------------------------------------------------------------------
// envd process RPC
// ---------------------------------------------------------------------------------------------

/// `ProcessConfig`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ProcessConfig {
    /// Program.
    pub cmd: String,
    /// Arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Environment.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub envs: BTreeMap<String, String>,
    /// Working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
}

/// `PTY.size`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PtySizeWire {
    /// Columns.
    pub cols: u32,
    /// Rows.
    pub rows: u32,
}

/// `PTY`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Pty {
    /// Size.
    pub size: PtySizeWire,
}

/// `StartRequest`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct StartRequest {
    /// What to run.
    pub process: ProcessConfig,
    /// Pseudo-terminal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pty: Option<Pty>,
    /// Tag.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// Keep stdin open (always sent: absent means `true` to envd).
    pub stdin: bool,
}

/// `ProcessSelector`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum Selector {
    /// By pid.
    Pid(u32),
    /// By tag.
    Tag(String),
}

impl Selector {
    /// A pid when `s` is a number, a tag otherwise.
    pub fn parse(s: &str) -> Selector {
        match s.parse::<u32>() {
            Ok(pid) => Selector::Pid(pid),
            Err(_) => Selector::Tag(s.to_owned()),
        }
    }
}

/// Body of `Connect`, `CloseStdin`: `{"process": selector}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct SelectorRequest {
    /// Which process.
    pub process: Selector,
}

/// `SendSignalRequest`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct SignalRequest {
    /// Which process.
    pub process: Selector,
    /// `SIGNAL_SIGKILL` or `SIGNAL_SIGTERM`.
    pub signal: &'static str,
}

/// `UpdateRequest`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct UpdateRequest {
    /// Which process.
    pub process: Selector,
    /// New pty size.
    pub pty: Pty,
}

/// `ProcessInput`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum ProcessInput {
    /// Bytes for stdin (base64).
    Stdin(String),
    /// Bytes for the pty (base64).
    Pty(String),
}

/// `SendInputRequest`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct SendInputRequest {
    /// Which process.
    pub process: Selector,
    /// What to send.
    pub input: ProcessInput,
}

/// `StartResponse` / `ConnectResponse`: `{"event": ProcessEvent}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct EventEnvelope {
    /// The event; absent in a frame that carries nothing we know.
    #[serde(default)]
    pub event: Option<ProcessEventWire>,
}

/// `ProcessEvent` (a oneof: exactly one field set).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct ProcessEventWire {
    /// `start{pid}`.
    #[serde(default)]
    pub start: Option<StartEvent>,
    /// Output.
    #[serde(default)]
    pub data: Option<DataEvent>,
    /// Exit.
    #[serde(default)]
    pub end: Option<EndEvent>,
    /// Keepalive.
    #[serde(default)]
    pub keepalive: Option<serde_json::Value>,
}

/// `start`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct StartEvent {
    /// The pid (0 is left out by protojson).
    #[serde(default)]
    pub pid: u32,
}

/// `data`: output bytes, base64 in JSON, decoded here.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct DataEvent {
    /// Stdout bytes.
    #[serde(default, deserialize_with = "b64_opt")]
    pub stdout: Option<Vec<u8>>,
    /// Stderr bytes.
    #[serde(default, deserialize_with = "b64_opt")]
    pub stderr: Option<Vec<u8>>,
    /// Pty bytes.
    #[serde(default, deserialize_with = "b64_opt")]
    pub pty: Option<Vec<u8>>,
}

/// `end`. Zero values are left out by protojson: an absent `exitCode` is 0.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct EndEvent {
    /// Exit code (absent = 0; -1 when killed by a signal).
    #[serde(default)]
    pub exit_code: i32,
    /// Whether the process exited normally.
    #[serde(default)]
    pub exited: bool,
    /// Go's `ProcessState.String()`: `exit status N` or `signal: killed`.
    #[serde(default)]
    pub status: String,
    /// Error text, when any.
    #[serde(default)]
    pub error: Option<String>,
}

/// `ListResponse`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct ListResponse {
    /// Processes.
    #[serde(default, deserialize_with = "null_default")]
    pub processes: Vec<ProcessInfoWire>,
}

/// `ProcessInfo`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct ProcessInfoWire {
    /// Config it was started with.
    #[serde(default)]
    pub config: ProcessConfig,
    /// Pid.
    #[serde(default)]
    pub pid: u32,
    /// Tag.
    #[serde(default)]
    pub tag: Option<String>,
}

// ---------------------------------------------------------------------------------------------
// envd filesystem RPC
// ---------------------------------------------------------------------------------------------

/// `{"path": …}` (Stat, MakeDir, Remove).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct PathRequest {
    /// The path.
    pub path: String,
}

/// `ListDirRequest`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct ListDirRequest {
    /// Directory.
    pub path: String,
    /// Depth (1 = the directory's own entries).
    pub depth: u32,
}

/// `MoveRequest`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct MoveRequest {
    /// From.
    pub source: String,
    /// To.
    pub destination: String,
}

/// `WatchDirRequest`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WatchRequest {
    /// Directory.
    pub path: String,
    /// Watch subdirectories.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub recursive: bool,
}

/// `EntryInfo`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct EntryInfo {
    /// Base name.
    #[serde(default)]
    pub name: String,
    /// `FILE_TYPE_FILE`, `FILE_TYPE_DIRECTORY`, `FILE_TYPE_SYMLINK`.
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    /// Full path.
    #[serde(default)]
    pub path: String,
    /// Size (int64: a string in JSON, a number tolerated).
    #[serde(default, deserialize_with = "int64")]
    pub size: u64,
    /// Go `FileMode` bits.
    #[serde(default)]
    pub mode: Option<u32>,
    /// `-rw-r--r--`.
    #[serde(default)]
    pub permissions: Option<String>,
    /// RFC 3339 time.
    #[serde(default)]
    pub modified_time: Option<String>,
    /// Symlink target.
    #[serde(default)]
    pub symlink_target: Option<String>,
}

/// `{"entry": EntryInfo}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct EntryResponse {
    /// The entry.
    #[serde(default)]
    pub entry: Option<EntryInfo>,
}

/// `{"entries": [...]}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct ListDirResponse {
    /// Entries.
    #[serde(default, deserialize_with = "null_default")]
    pub entries: Vec<EntryInfo>,
}

/// `WatchDirResponse` (oneof).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct WatchResponse {
    /// Sent first.
    #[serde(default)]
    pub start: Option<serde_json::Value>,
    /// A change.
    #[serde(default)]
    pub filesystem: Option<FsEvent>,
    /// Keepalive.
    #[serde(default)]
    pub keepalive: Option<serde_json::Value>,
}

/// `FilesystemEvent`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct FsEvent {
    /// Path relative to the watched directory.
    #[serde(default)]
    pub name: String,
    /// `EVENT_TYPE_CREATE`, ...
    #[serde(default, rename = "type")]
    pub kind: String,
}

/// One element of the `POST /files` answer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct WrittenEntry {
    /// Base name.
    #[serde(default)]
    pub name: String,
    /// Full path.
    #[serde(default)]
    pub path: String,
    /// `file` or `dir`.
    #[serde(default, rename = "type")]
    pub kind: String,
}

// ---------------------------------------------------------------------------------------------
// helpers
// ---------------------------------------------------------------------------------------------

fn null_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

fn b64_opt<'de, D>(d: D) -> Result<Option<Vec<u8>>, D::Error>
where
    D: Deserializer<'de>,
{
    let s: Option<String> = Option::deserialize(d)?;
    match s {
        None => Ok(None),
        Some(s) => base64::engine::general_purpose::STANDARD
            .decode(s.as_bytes())
            .map(Some)
            .map_err(serde::de::Error::custom),
    }
}

fn int64<'de, D>(d: D) -> Result<u64, D::Error>
where
    D: Deserializer<'de>,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum N {
        S(String),
        U(u64),
        I(i64),
    }
    match Option::<N>::deserialize(d)? {
        None => Ok(0),
        Some(N::U(u)) => Ok(u),
        Some(N::I(i)) => Ok(u64::try_from(i).unwrap_or(0)),
        Some(N::S(s)) => s.parse().map_err(serde::de::Error::custom),
    }
}

/// Base64 (standard, padded) as protojson writes `bytes`.
pub(crate) fn b64(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// A duration as the whole seconds the control plane takes (`timeout` fields), rounded up;
/// saturates for absurd durations (`Duration::MAX`) instead of overflowing, so the service
/// rejects them rather than the caller panicking.
pub(crate) fn secs(d: std::time::Duration) -> u64 {
    d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_of_sandbox_answers_hides_the_tokens() {
        let created: SandboxCreated = serde_json::from_str(
            r#"{"sandboxID":"isb","envdAccessToken":"canary-envd","trafficAccessToken":"canary-traffic","envdVersion":"0.6.13"}"#,
        )
        .unwrap();
        let detail: SandboxDetail = serde_json::from_str(
            r#"{"sandboxID":"isb","envdAccessToken":"canary-envd","state":"running"}"#,
        )
        .unwrap();
        let fork: Vec<ForkResult> = serde_json::from_str(
            r#"[{"sandbox":{"sandboxID":"ic","envdAccessToken":"canary-envd","trafficAccessToken":"canary-traffic"}}]"#,
        )
        .unwrap();
        for text in [
            format!("{created:?}"),
            format!("{detail:?}"),
            format!("{fork:?}"),
        ] {
            assert!(!text.contains("canary"), "token leaked: {text}");
            assert!(text.contains("<redacted>"), "{text}");
        }
        assert!(format!("{detail:?}").contains("running"));
    }

    #[test]
    fn absent_exit_code_is_zero() {
        let e: EventEnvelope =
            serde_json::from_str(r#"{"event":{"end":{"exited":true,"status":"exit status 0"}}}"#)
                .unwrap();
        let end = e.event.unwrap().end.unwrap();
        assert_eq!(end.exit_code, 0);
        assert!(end.exited);
    }

    #[test]
    fn spaced_and_compact_json_parse_the_same() {
        let a: EventEnvelope = serde_json::from_str(
            r#"{"event":{"end":{"exitCode":3,"exited":true,"status":"exit status 3","error":"exit status 3"}}}"#,
        )
        .unwrap();
        let b: EventEnvelope = serde_json::from_str(
            r#"{"event":{"end":{"exitCode":3, "exited":true, "status":"exit status 3", "error":"exit status 3"}}}"#,
        )
        .unwrap();
        assert_eq!(a, b);
        assert_eq!(a.event.unwrap().end.unwrap().exit_code, 3);
    }

    #[test]
    fn data_is_base64_decoded_to_bytes() {
        let e: EventEnvelope =
            serde_json::from_str(r#"{"event":{"data":{"stdout":"aGkK"}}}"#).unwrap();
        assert_eq!(e.event.unwrap().data.unwrap().stdout.unwrap(), b"hi\n");
        assert!(
            serde_json::from_str::<EventEnvelope>(r#"{"event":{"data":{"stdout":"!!"}}}"#).is_err()
        );
    }

    #[test]
    fn unknown_fields_are_ignored() {
        let e: EventEnvelope =
            serde_json::from_str(r#"{"event":{"start":{"pid":7,"new":1}},"x":2}"#).unwrap();
        assert_eq!(e.event.unwrap().start.unwrap().pid, 7);
    }

    #[test]
    fn start_request_matches_example_a() {
        let req = StartRequest {
            process: ProcessConfig {
                cmd: "/bin/bash".into(),
                args: vec!["-l".into(), "-c".into(), "echo hi".into()],
                ..ProcessConfig::default()
            },
            pty: None,
            tag: None,
            stdin: false,
        };
        assert_eq!(
            serde_json::to_string(&req).unwrap(),
            r#"{"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi"]},"stdin":false}"#
        );
    }

    #[test]
    fn selectors_and_signals() {
        let s = serde_json::to_string(&SignalRequest {
            process: Selector::parse("412"),
            signal: "SIGNAL_SIGKILL",
        })
        .unwrap();
        assert_eq!(s, r#"{"process":{"pid":412},"signal":"SIGNAL_SIGKILL"}"#);
        let s = serde_json::to_string(&SelectorRequest {
            process: Selector::parse("web"),
        })
        .unwrap();
        assert_eq!(s, r#"{"process":{"tag":"web"}}"#);
    }

    #[test]
    fn entry_size_is_a_string_or_number() {
        let l: ListDirResponse = serde_json::from_str(
            r#"{"entries":[{"name":"a.txt","type":"FILE_TYPE_FILE","path":"/home/user/a.txt","size":"5","mode":420,"permissions":"-rw-r--r--","owner":"user","group":"user","modifiedTime":"2026-01-01T00:00:00.123456789Z"},{"name":"b","size":7}]}"#,
        )
        .unwrap();
        assert_eq!(l.entries[0].size, 5);
        assert_eq!(l.entries[1].size, 7);
    }

    #[test]
    fn new_sandbox_omits_unset_fields() {
        let body = NewSandbox {
            template_id: "base".into(),
            timeout: Some(120),
            metadata: [("k".to_string(), "v".to_string())].into(),
            env_vars: [("A".to_string(), "1".to_string())].into(),
            ..NewSandbox::default()
        };
        assert_eq!(
            serde_json::to_string(&body).unwrap(),
            r#"{"templateID":"base","timeout":120,"envVars":{"A":"1"},"metadata":{"k":"v"}}"#
        );
    }

    #[test]
    fn timeouts_round_up_to_whole_seconds() {
        use std::time::Duration;
        assert_eq!(secs(Duration::from_millis(1500)), 2);
        assert_eq!(secs(Duration::from_secs(300)), 300);
        assert_eq!(secs(Duration::MAX), u64::MAX);
    }

    #[test]
    fn sandbox_created_parses_example_e() {
        let s: SandboxCreated = serde_json::from_str(
            r#"{"alias":"base","clientID":"6532622b","envdAccessToken":"tok_envd_123","envdVersion":"0.6.13","sandboxID":"ilxb3ba8bnc0gpyx3i8ax","templateID":"rki5dems9wqfm4r03t7g"}"#,
        )
        .unwrap();
        assert_eq!(s.sandbox_id, "ilxb3ba8bnc0gpyx3i8ax");
        assert_eq!(s.envd_access_token.as_deref(), Some("tok_envd_123"));
        assert_eq!(s.domain, None);
    }
}
