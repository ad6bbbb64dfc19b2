//! Serde types matching the Fly Machines API's JSON (PROTOCOL.md §4–§9).
//!
//! Every response field is optional and unknown fields are tolerated; objects the adapter sends
//! back whole (the machine config on update) keep unknown keys in an `extra` map so nothing the
//! server added is lost on the round trip.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// A Fly Machine as returned by get, list, create and update.
#[derive(Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// Machine id (usually 14 hex characters; do not validate the length).
    #[serde(default)]
    pub id: String,
    /// Machine name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Raw state (`created`, `started`, `stopped`, `suspended`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Region code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Current version (ULID); changes on every update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_id: Option<String>,
    /// 6PN private address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_ip: Option<String>,
    /// The full machine config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<MachineConfig>,
    /// The image actually running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_ref: Option<ImageRef>,
    /// RFC 3339 creation time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
    /// RFC 3339 update time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<String>,
    /// Recent events, newest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<MachineEvent>,
    /// Lease nonce, only on create/update with `lease_ttl`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nonce: Option<String>,
    /// Current lease, only with `include_leases=true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<MachineLeaseInfo>,
    /// `ok`, `unknown` or `unreachable`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_status: Option<String>,
    /// Fields this SDK does not model.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The lease nonce is a credential: `Debug` hides it (and the config hides env values).
impl std::fmt::Debug for Machine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Machine")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("state", &self.state)
            .field("region", &self.region)
            .field("instance_id", &self.instance_id)
            .field("config", &self.config)
            .field("created_at", &self.created_at)
            .field("nonce", &self.nonce.as_ref().map(|_| "<redacted>"))
            .field("lease", &self.lease)
            .field("host_status", &self.host_status)
            .field("extra", &self.extra.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// Env values and unmodelled keys (`files` may carry file contents) can be secrets, so `Debug`
/// shows their names only.
impl std::fmt::Debug for MachineConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MachineConfig")
            .field("image", &self.image)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("guest", &self.guest)
            .field("auto_destroy", &self.auto_destroy)
            .field("restart", &self.restart)
            .field("init", &self.init)
            .field("services", &self.services)
            .field("mounts", &self.mounts)
            .field("metadata", &self.metadata)
            .field("stop_config", &self.stop_config)
            .field("extra", &self.extra.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// Stdin may carry secrets (a file being uploaded), and the argv carries the command's
/// environment as `env K=V` arguments, so `Debug` shows the program and the sizes only.
impl std::fmt::Debug for ExecRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecRequest")
            .field("program", &self.command.first())
            .field("args", &self.command.len().saturating_sub(1))
            .field("timeout", &self.timeout)
            .field("stdin_len", &self.stdin.as_ref().map(String::len))
            .finish()
    }
}

impl Machine {
    /// The machine's metadata labels (empty when the config is absent).
    pub fn metadata(&self) -> BTreeMap<String, String> {
        self.config
            .as_ref()
            .map(|c| c.metadata.clone())
            .unwrap_or_default()
    }
}

/// The lease summary embedded in a machine with `include_leases=true`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MachineLeaseInfo {
    /// Who holds the lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// When it expires (Unix seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<i64>,
    /// Why it was taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// The image reference of a running machine.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ImageRef {
    /// Registry host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry: Option<String>,
    /// Repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    /// Tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// Digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// Fields this SDK does not model.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One machine event. `timestamp` is Unix **milliseconds**.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MachineEvent {
    /// Event id (ULID).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// `launch`, `start`, `exit`, `stop`, ...
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// State after the event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// `user` or `flyd`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Unix milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<i64>,
    /// Free-form details (exit events carry `exit_event`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<Value>,
}

/// A machine config. Known keys are typed; every other key is kept in `extra`, because an update
/// must send the entire config back (Fly has no partial updates).
#[derive(Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MachineConfig {
    /// Image to run (required on create).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Environment for the machine's processes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// CPU and memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest: Option<Guest>,
    /// Destroy the machine when it exits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_destroy: Option<bool>,
    /// Restart policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<RestartPolicy>,
    /// Init overrides (`exec`, `entrypoint`, `cmd`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init: Option<InitConfig>,
    /// Public services (ports reachable through Fly Proxy).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<Service>,
    /// Volume mounts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<Mount>,
    /// Metadata labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    /// How the machine is stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_config: Option<StopConfig>,
    /// Keys this SDK does not model (`dns`, `checks`, `files`, ...), sent back unchanged.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Guest resources.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Guest {
    /// `shared` or `performance`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_kind: Option<String>,
    /// Number of CPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<u32>,
    /// Memory in MB (multiples of 256 for shared CPUs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u64>,
    /// Other guest keys.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Restart policy.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RestartPolicy {
    /// `no`, `always`, `on-failure` or `spot-price`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    /// Other keys (`max_retries`, ...).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Init overrides.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InitConfig {
    /// Replaces the image's entrypoint and command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec: Option<Vec<String>>,
    /// Other keys (`entrypoint`, `cmd`, `tty`, ...).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A public service: traffic on `ports` is routed to `internal_port`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Service {
    /// `tcp` or `udp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// Port inside the machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub internal_port: Option<u16>,
    /// Public ports.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<ServicePort>,
    /// Start the machine on traffic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autostart: Option<bool>,
    /// Stop the machine when idle. Sent as a string; the API may answer with a boolean.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autostop: Option<Autostop>,
    /// Other keys.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One public port of a service.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServicePort {
    /// Public port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// Handlers (`tls`, `http`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub handlers: Vec<String>,
    /// Redirect HTTP to HTTPS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force_https: Option<bool>,
    /// Other keys.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `services[].autostop`: sent as `"off" | "stop" | "suspend"`, answered as a string or as a
/// boolean (`false` = off, `true` = stop) — PROTOCOL.md §4 (the `autostop` trap).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Autostop {
    /// Never stop on idle.
    Off,
    /// Stop on idle.
    Stop,
    /// Suspend on idle.
    Suspend,
}

impl Serialize for Autostop {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(match self {
            Autostop::Off => "off",
            Autostop::Stop => "stop",
            Autostop::Suspend => "suspend",
        })
    }
}

impl<'de> Deserialize<'de> for Autostop {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::Bool(false) => Ok(Autostop::Off),
            Value::Bool(true) => Ok(Autostop::Stop),
            Value::String(s) => match s.as_str() {
                "off" => Ok(Autostop::Off),
                "stop" => Ok(Autostop::Stop),
                "suspend" => Ok(Autostop::Suspend),
                other => Err(serde::de::Error::custom(format!(
                    "unknown autostop value {other:?}"
                ))),
            },
            other => Err(serde::de::Error::custom(format!(
                "autostop must be a string or a boolean, got {other}"
            ))),
        }
    }
}

/// A volume mount.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Mount {
    /// Volume id (`vol_...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume: Option<String>,
    /// Mount path inside the machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Other keys.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// How a machine is stopped by default.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StopConfig {
    /// Signal name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
    /// Go duration (`10s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Value>,
}

/// `POST /v1/apps/{app}/machines` body.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct CreateMachineRequest {
    /// The config.
    pub config: MachineConfig,
    /// Target region.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Machine name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Create without starting.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skip_launch: Option<bool>,
    /// Take a lease atomically (seconds); the nonce comes back in `Machine::nonce`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_ttl: Option<u64>,
}

/// `POST /v1/apps/{app}/machines/{id}` body: the entire config.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct UpdateMachineRequest {
    /// The entire new config.
    pub config: MachineConfig,
    /// Fail with 409/412 unless the machine is at this version.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current_version: Option<String>,
    /// Update without starting.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skip_launch: Option<bool>,
}

/// `POST …/stop` body.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub(crate) struct StopRequest {
    /// Signal name (`SIGTERM`, `SIGKILL`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
    /// Go duration string (`10s`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
}

/// `GET …/wait` answer: `{ok, state, version, event_id}`, or just `{ok}` from older servers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct WaitResponse {
    /// Whether the state was reached.
    #[serde(default)]
    pub ok: Option<bool>,
    /// The state reached.
    #[serde(default)]
    pub state: Option<String>,
    /// Machine version.
    #[serde(default)]
    pub version: Option<String>,
    /// The event that satisfied the wait.
    #[serde(default)]
    pub event_id: Option<String>,
}

/// `POST …/exec` body.
#[derive(Clone, Default, PartialEq, Eq, Serialize)]
pub(crate) struct ExecRequest {
    /// Argument vector.
    pub command: Vec<String>,
    /// Seconds before the service gives up (`deadline_exceeded`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
    /// Whole stdin as one string.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdin: Option<String>,
}

/// `POST …/exec` answer. Every field may be omitted (a zero exit code, an empty stream).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct ExecResponse {
    /// Collected stdout.
    #[serde(default)]
    pub stdout: Option<String>,
    /// Collected stderr.
    #[serde(default)]
    pub stderr: Option<String>,
    /// Exit code (absent means 0).
    #[serde(default)]
    pub exit_code: Option<i64>,
    /// Signal number that ended the command, 0 or absent when none.
    #[serde(default)]
    pub exit_signal: Option<i64>,
    /// Not on the wire: the `fly-request-id` of the answer, kept for errors raised from it.
    #[serde(skip)]
    pub request_id: Option<String>,
}

/// `POST …/lease` body.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub(crate) struct LeaseRequest {
    /// Lease length in seconds.
    pub ttl: u64,
    /// Why the lease is taken.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// A lease, the `data` of the lease envelope. `expires_at` is Unix **seconds**.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// The nonce that proves ownership; send it as `fly-machine-lease-nonce`.
    #[serde(default)]
    pub nonce: Option<String>,
    /// Unix seconds.
    #[serde(default)]
    pub expires_at: Option<i64>,
    /// Who holds it.
    #[serde(default)]
    pub owner: Option<String>,
    /// Why it was taken.
    #[serde(default)]
    pub description: Option<String>,
    /// Machine version.
    #[serde(default)]
    pub version: Option<String>,
}

/// The nonce is a credential for the machine's mutations, so `Debug` hides it.
impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("nonce", &self.nonce.as_ref().map(|_| "<redacted>"))
            .field("expires_at", &self.expires_at)
            .field("owner", &self.owner)
            .field("description", &self.description)
            .field("version", &self.version)
            .finish()
    }
}

/// The lease-family envelope: `{"status":"success","data":{...}}` or
/// `{"status":"error","message":"..."}`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub(crate) struct LeaseEnvelope<T> {
    /// `success` or `error`.
    #[serde(default)]
    pub status: Option<String>,
    /// The payload on success.
    #[serde(default = "Option::default")]
    pub data: Option<T>,
    /// The error text.
    #[serde(default)]
    pub message: Option<String>,
    /// An error code, when sent.
    #[serde(default)]
    pub code: Option<String>,
}

/// Error bodies of every shape PROTOCOL.md §2 lists, parsed leniently: `{error, status}`,
/// `{status: "error", message}` and anything with a `message`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub(crate) struct ErrorBody {
    /// The main shape's text.
    #[serde(default)]
    pub error: Option<String>,
    /// Preferred over `error` when present (fly-go does the same).
    #[serde(default)]
    pub message: Option<String>,
    /// A code (`insufficient_capacity`, `name_taken`, ...) or `error` in the lease envelope.
    #[serde(default)]
    pub status: Option<Value>,
    /// Code of the lease envelope.
    #[serde(default)]
    pub code: Option<Value>,
}

#[cfg(test)]
mod tests {
    use super::*;

    const CREATE_RESPONSE: &str = r#"{"id":"1857156b526dd8","name":"aged-thunder-7371","state":"created","region":"ord","instance_id":"01HEPA330HZ37A78TK080NAK1M","private_ip":"fdaa:ff:ff:a7b:195:e229:8038:2","config":{"init":{"exec":["/bin/sleep","inf"]},"env":{"SANDBOX":"1"},"image":"registry-1.docker.io/library/ubuntu:latest","auto_destroy":true,"restart":{"policy":"no"},"guest":{"cpu_kind":"shared","cpus":1,"memory_mb":256},"dns":{}},"image_ref":{"registry":"registry-1.docker.io","repository":"library/ubuntu","tag":"latest","digest":"sha256:c9cf959fd83770dfdefd8fb42cfef0761432af36a764c077aed54bbc5bb25368","labels":{"org.opencontainers.image.ref.name":"ubuntu","org.opencontainers.image.version":"22.04"}},"created_at":"2023-11-08T01:52:30Z","updated_at":"2023-11-08T01:52:30Z","events":[{"type":"launch","status":"created","source":"user","timestamp":1699408350300}]}"#;

    #[test]
    fn parses_the_documented_create_response_and_keeps_unknown_config_keys() {
        let m: Machine = serde_json::from_str(CREATE_RESPONSE).unwrap();
        assert_eq!(m.id, "1857156b526dd8");
        assert_eq!(m.state.as_deref(), Some("created"));
        let config = m.config.as_ref().unwrap();
        assert_eq!(
            config.init.as_ref().unwrap().exec.as_ref().unwrap()[1],
            "inf"
        );
        assert_eq!(config.guest.as_ref().unwrap().memory_mb, Some(256));
        assert!(
            config.extra.contains_key("dns"),
            "dns must survive for updates"
        );
        let again = serde_json::to_value(config).unwrap();
        assert_eq!(again["dns"], serde_json::json!({}));
        assert_eq!(m.events[0].timestamp, Some(1_699_408_350_300));
        assert!(m.image_ref.unwrap().extra.contains_key("labels"));
    }

    #[test]
    fn a_machine_with_every_field_missing_parses() {
        let m: Machine = serde_json::from_str("{}").unwrap();
        assert!(m.id.is_empty());
        assert!(m.metadata().is_empty());
    }

    #[test]
    fn autostop_accepts_strings_and_booleans_and_sends_strings() {
        let s: Service =
            serde_json::from_str(r#"{"internal_port":8080,"autostop":false}"#).unwrap();
        assert_eq!(s.autostop, Some(Autostop::Off));
        let s: Service = serde_json::from_str(r#"{"autostop":true}"#).unwrap();
        assert_eq!(s.autostop, Some(Autostop::Stop));
        let s: Service = serde_json::from_str(r#"{"autostop":"suspend"}"#).unwrap();
        assert_eq!(s.autostop, Some(Autostop::Suspend));
        assert!(serde_json::from_str::<Service>(r#"{"autostop":3}"#).is_err());
        assert_eq!(
            serde_json::to_value(Autostop::Off).unwrap(),
            serde_json::json!("off")
        );
    }

    #[test]
    fn exec_response_fields_are_all_optional() {
        let r: ExecResponse = serde_json::from_str(r#"{"stdout":"hi\n"}"#).unwrap();
        assert_eq!(r.exit_code, None);
        let r: ExecResponse = serde_json::from_str(
            r#"{"exit_code":3,"stdout":"hello\n","stderr":"oops\n","exit_signal":0}"#,
        )
        .unwrap();
        assert_eq!(r.exit_code, Some(3));
    }

    #[test]
    fn lease_envelope_parses_and_debug_hides_the_nonce() {
        let e: LeaseEnvelope<Lease> = serde_json::from_str(r#"{"status":"success","data":{"nonce":"5c35f65c9f95","expires_at":1708569778,"owner":"hello@fly.io","description":"","version":"01HQ73A7BFFDF1B6WMGHFZZ4E7"}}"#).unwrap();
        let lease = e.data.unwrap();
        assert_eq!(lease.nonce.as_deref(), Some("5c35f65c9f95"));
        assert_eq!(lease.expires_at, Some(1_708_569_778));
        assert!(!format!("{lease:?}").contains("5c35f65c9f95"));
    }

    #[test]
    fn debug_hides_env_values_nonces_and_stdin() {
        let mut m: Machine = serde_json::from_str(CREATE_RESPONSE).unwrap();
        m.nonce = Some("canary-nonce".into());
        if let Some(c) = m.config.as_mut() {
            c.env.insert("API_KEY".into(), "canary-env".into());
        }
        let text = format!("{m:?}");
        assert!(text.contains("API_KEY"));
        assert!(!text.contains("canary"), "{text}");
        let req = ExecRequest {
            command: vec!["env".into(), "API_KEY=canary-argv".into(), "cat".into()],
            timeout: None,
            stdin: Some("canary-stdin".into()),
        };
        let text = format!("{req:?}");
        assert!(!text.contains("canary"), "{text}");
        assert!(text.contains("env"), "{text}");
    }

    #[test]
    fn requests_omit_unset_fields() {
        let body = serde_json::to_value(ExecRequest {
            command: vec!["true".into()],
            ..ExecRequest::default()
        })
        .unwrap();
        assert_eq!(body, serde_json::json!({"command": ["true"]}));
        let body = serde_json::to_value(StopRequest::default()).unwrap();
        assert_eq!(body, serde_json::json!({}));
    }
}
