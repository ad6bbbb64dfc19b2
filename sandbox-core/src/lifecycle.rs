//! The one lifecycle model every provider maps onto: what to create, what a sandbox looks like, and
//! which state it is in.

use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, SystemTime};

/// The state of a sandbox, the same for every provider.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SandboxState {
    /// Being created or started; not yet usable.
    Creating,
    /// Running and usable.
    Running,
    /// Paused; memory kept where the provider's flags say so.
    Paused,
    /// Stopped; disk kept where the provider's flags say so.
    Stopped,
    /// Archived to cold storage; must be restored before use.
    Archived,
    /// Destroyed; gone for good.
    Destroyed,
    /// Failed; the sandbox cannot be used.
    Failed,
    /// A state this SDK does not know (the provider's raw name is in [`SandboxInfo::raw_state`]).
    Unknown,
}

impl SandboxState {
    /// Whether the sandbox will not change state on its own any more (destroyed or failed).
    pub fn is_terminal(self) -> bool {
        matches!(self, SandboxState::Destroyed | SandboxState::Failed)
    }

    /// The state's snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxState::Creating => "creating",
            SandboxState::Running => "running",
            SandboxState::Paused => "paused",
            SandboxState::Stopped => "stopped",
            SandboxState::Archived => "archived",
            SandboxState::Destroyed => "destroyed",
            SandboxState::Failed => "failed",
            SandboxState::Unknown => "unknown",
        }
    }
}

impl fmt::Display for SandboxState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Compute asked for at create time (unset fields keep the provider's defaults), or what a
/// provider reports a sandbox has (unset fields: the provider did not say).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Resources {
    /// Virtual CPUs.
    pub cpus: Option<u32>,
    /// Memory in MiB.
    pub memory_mb: Option<u64>,
    /// Disk in GiB.
    pub disk_gb: Option<u64>,
    /// GPUs.
    pub gpus: Option<u32>,
}

/// What to create. Every field is optional; unset fields keep the provider's defaults (the SDK
/// never changes a provider default unless asked).
///
/// ```
/// use sandbox_sdk_core::CreateSpec;
/// use std::time::Duration;
///
/// let spec = CreateSpec::new()
///     .template("python:3.12")
///     .env("MODE", "test")
///     .metadata("team", "agents")
///     .timeout(Duration::from_secs(600))
///     .idempotency_key("job-42");
/// assert_eq!(spec.idempotency_key.as_deref(), Some("job-42"));
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub struct CreateSpec {
    /// Template, snapshot or image to start from.
    pub template: Option<String>,
    /// A human-readable name, where the provider has one.
    pub name: Option<String>,
    /// Labels kept with the sandbox and usable as list filters.
    pub metadata: BTreeMap<String, String>,
    /// Environment variables for every process in the sandbox.
    pub env: BTreeMap<String, String>,
    /// Time to live: the sandbox is stopped or destroyed after this long. Reapplied on resume.
    pub timeout: Option<Duration>,
    /// Compute asked for.
    pub resources: Resources,
    /// Region to run in, where the provider lets the caller choose.
    pub region: Option<String>,
    /// A key that makes create safe to retry: the adapter looks for a sandbox already made under
    /// this key before making a new one, and the client retries or falls back only when it is set.
    pub idempotency_key: Option<String>,
}

impl CreateSpec {
    /// An empty spec: provider defaults everywhere.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the template, snapshot or image.
    pub fn template(mut self, template: impl Into<String>) -> Self {
        self.template = Some(template.into());
        self
    }

    /// Sets the name.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Adds a metadata label.
    pub fn metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.metadata.insert(key.into(), value.into());
        self
    }

    /// Adds an environment variable.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(key.into(), value.into());
        self
    }

    /// Sets the time to live.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Sets the compute.
    pub fn resources(mut self, resources: Resources) -> Self {
        self.resources = resources;
        self
    }

    /// Sets the region.
    pub fn region(mut self, region: impl Into<String>) -> Self {
        self.region = Some(region.into());
        self
    }

    /// Sets the idempotency key.
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }
}

/// Env values may be secrets, so `Debug` shows only their names.
impl fmt::Debug for CreateSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CreateSpec")
            .field("template", &self.template)
            .field("name", &self.name)
            .field("metadata", &self.metadata)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("timeout", &self.timeout)
            .field("resources", &self.resources)
            .field("region", &self.region)
            .field("idempotency_key", &self.idempotency_key)
            .finish()
    }
}

/// What a provider reports about one sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SandboxInfo {
    /// The provider's id for the sandbox.
    pub id: String,
    /// The provider's name (`e2b`, `daytona`, `fly`, `local`, ...).
    pub provider: String,
    /// The state, mapped onto the common model.
    pub state: SandboxState,
    /// The provider's own name for the state, as it sent it.
    pub raw_state: Option<String>,
    /// The template, snapshot or image it was made from.
    pub template: Option<String>,
    /// Its metadata labels.
    pub metadata: BTreeMap<String, String>,
    /// When it was created.
    pub created_at: Option<SystemTime>,
    /// When its time to live runs out.
    pub expires_at: Option<SystemTime>,
    /// The region it runs in.
    pub region: Option<String>,
    /// The compute it has, as far as the provider reports it.
    pub resources: Resources,
    /// When the provider last changed it (its state or its settings), where the provider says.
    /// A stopped sandbox was stopped at or before this time.
    pub updated_at: Option<SystemTime>,
    /// When it last saw activity (a command, a file operation, a keep-alive), where the
    /// provider tracks that; `None` means the provider cannot tell.
    pub last_activity_at: Option<SystemTime>,
    /// The state changes the provider reports, oldest first (Fly's machine events, the
    /// `local` provider's own record); empty where it reports none. It may hold only the most
    /// recent changes.
    pub history: Vec<StateChange>,
}

/// One change of a sandbox's state: from `at` on it was in `state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct StateChange {
    /// When.
    pub at: SystemTime,
    /// The state it entered.
    pub state: SandboxState,
}

impl SandboxInfo {
    /// Info with only id, provider and state; other fields empty.
    pub fn new(id: impl Into<String>, provider: impl Into<String>, state: SandboxState) -> Self {
        SandboxInfo {
            id: id.into(),
            provider: provider.into(),
            state,
            raw_state: None,
            template: None,
            metadata: BTreeMap::new(),
            created_at: None,
            expires_at: None,
            region: None,
            resources: Resources::default(),
            updated_at: None,
            last_activity_at: None,
            history: Vec::new(),
        }
    }
}

/// Which sandboxes to list. Empty filters match everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListFilter {
    /// Only sandboxes carrying all of these labels.
    pub metadata: BTreeMap<String, String>,
    /// Only sandboxes in one of these states.
    pub states: Vec<SandboxState>,
}

impl ListFilter {
    /// A filter that matches everything.
    pub fn new() -> Self {
        Self::default()
    }

    /// Requires a metadata label.
    pub fn metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.metadata.insert(key.into(), value.into());
        self
    }

    /// Adds an accepted state.
    pub fn state(mut self, state: SandboxState) -> Self {
        self.states.push(state);
        self
    }

    /// Whether `info` passes the filter (adapters apply it where the provider cannot).
    pub fn matches(&self, info: &SandboxInfo) -> bool {
        (self.states.is_empty() || self.states.contains(&info.state))
            && self
                .metadata
                .iter()
                .all(|(k, v)| info.metadata.get(k) == Some(v))
    }
}

/// A snapshot of a sandbox, from which new sandboxes can be created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SnapshotInfo {
    /// The provider's id (usable as [`CreateSpec::template`]).
    pub id: String,
    /// Its name, where it has one.
    pub name: Option<String>,
    /// The sandbox it was taken from.
    pub sandbox_id: Option<String>,
    /// When it was taken.
    pub created_at: Option<SystemTime>,
}

/// Resource use of one sandbox at one moment.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Metrics {
    /// When the sample was taken.
    pub timestamp: Option<SystemTime>,
    /// CPU use, percent of the allotted CPUs.
    pub cpu_percent: Option<f64>,
    /// CPUs allotted.
    pub cpu_count: Option<u32>,
    /// Memory used, bytes.
    pub memory_used_bytes: Option<u64>,
    /// Memory allotted, bytes.
    pub memory_total_bytes: Option<u64>,
    /// Disk used, bytes.
    pub disk_used_bytes: Option<u64>,
    /// Disk allotted, bytes.
    pub disk_total_bytes: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_matches_states_and_all_labels() {
        let mut info = SandboxInfo::new("a", "p", SandboxState::Running);
        info.metadata.insert("team".into(), "x".into());
        assert!(ListFilter::new().matches(&info));
        assert!(ListFilter::new().metadata("team", "x").matches(&info));
        assert!(!ListFilter::new().metadata("team", "y").matches(&info));
        assert!(!ListFilter::new().state(SandboxState::Paused).matches(&info));
        assert!(
            ListFilter::new()
                .state(SandboxState::Paused)
                .state(SandboxState::Running)
                .matches(&info)
        );
    }

    #[test]
    fn create_spec_debug_hides_env_values() {
        let spec = CreateSpec::new().env("TOKEN", "canary-value");
        let text = format!("{spec:?}");
        assert!(text.contains("TOKEN"));
        assert!(!text.contains("canary-value"));
    }
}
