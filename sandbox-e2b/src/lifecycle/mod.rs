//! Sandbox lifecycle over the control plane: create (idempotent by key), connect and resume,
//! list, info, pause, time to live, kill, fork, snapshots, metrics, logs, network rules and
//! volumes; templates in [`templates`]. Each operation checks its input, calls [`Api`] and maps
//! the answer onto the common model.

pub(crate) mod templates;

use crate::api::Api;
use crate::api::envd::Envd;
use crate::config::{
    DEFAULT_TEMPLATE, DEFAULT_TTL, IDEMPOTENCY_LABEL, NAME_METADATA_KEY, PROVIDER, PauseMode,
};
use crate::error::{Failure, map_error};
use crate::wire::{
    AutoResume, LogEntry, NetworkConfig, NewSandbox, SandboxCreated, SandboxDetail, SandboxMetric,
    SnapshotWire, Volume, VolumeMount, secs,
};
use futures::{StreamExt, TryStreamExt};
use sandbox_sdk_core::http::checked_answer_host;
use sandbox_sdk_core::idempotency::{
    FINGERPRINT_LABEL, check_adoption, create_fingerprint, create_once,
};
use sandbox_sdk_core::{
    CreateSpec, Error, ErrorKind, ListFilter, Metrics, Result, SandboxInfo, SandboxState,
    SandboxStream, SnapshotInfo,
};
use sha2::Digest as _;
use std::collections::BTreeMap;
use std::time::{Duration, UNIX_EPOCH};

/// E2B-specific create options, beyond [`CreateSpec`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CreateOptions {
    /// Pause instead of kill when the time to live runs out.
    pub auto_pause: Option<bool>,
    /// Keep memory when auto-pausing (default true at E2B).
    pub auto_pause_memory: Option<bool>,
    /// Resume a paused sandbox when traffic reaches it.
    pub auto_resume: Option<bool>,
    /// Allow internet access (`false` denies all egress).
    pub allow_internet_access: Option<bool>,
    /// Network options (public traffic, egress allow/deny lists).
    pub network: Option<NetworkConfig>,
    /// Volumes to mount.
    pub volume_mounts: Vec<VolumeMount>,
}

/// Lists sandboxes with E2B's own filters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListQuery {
    /// Labels every sandbox must carry.
    pub metadata: BTreeMap<String, String>,
    /// `running`, `paused` (empty: both).
    pub states: Vec<String>,
    /// Page size (1..=100; the service's default is 100).
    pub limit: Option<u32>,
}

/// Which logs `E2bSandbox::logs` returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogQuery {
    /// Start at this time, in Unix milliseconds.
    pub cursor: Option<u64>,
    /// How many entries (the service's default is 1000).
    pub limit: Option<u32>,
    /// `forward` or `backward`.
    pub direction: Option<String>,
    /// `debug`, `info`, `warn` or `error`.
    pub level: Option<String>,
    /// Text to search for.
    pub search: Option<String>,
}

/// The longest `Idempotency-Key` E2B takes.
const IDEMPOTENCY_HEADER_MAX: usize = 255;

/// An `Idempotency-Key` header value for `key`. E2B takes 1–255 characters of `[a-z0-9-]`
/// (PROTOCOL.md §2.4): a key of that form is sent as it is; any other key is sent as `sdk-`
/// followed by the lowercase hex SHA-256 of its UTF-8 bytes (68 characters), so the same key
/// always maps to the same header. Only a caller whose own key is literally `sdk-<that digest>`
/// could collide with a mapped one.
///
/// A keyed create sends its create fingerprint
/// ([`create_fingerprint`](sandbox_sdk_core::idempotency::create_fingerprint): 32 hex digits,
/// sent as they are) rather than the key: E2B answers a repeated header with the sandbox it
/// already made, so a header anyone knowing the key could send first would hand this create a
/// sandbox someone else made. The metadata label keeps the key as given.
pub fn idempotency_header_value(key: &str) -> String {
    let conforming = !key.is_empty()
        && key.len() <= IDEMPOTENCY_HEADER_MAX
        && key
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if conforming {
        return key.to_owned();
    }
    let digest = sha2::Sha256::digest(key.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sdk-{hex}")
}

/// How to reach a sandbox, as the service's latest answer for it says: replaced when a resume
/// returns another domain or envd token.
#[derive(Clone, Debug)]
pub(crate) struct Reach {
    /// envd of the sandbox, with its token.
    pub envd: Envd,
    /// The domain of its hosts.
    pub domain: String,
    /// The token for its other ports, when public traffic is off.
    pub traffic_token: Option<String>,
}

/// A create, connect, resume or fork answer, checked: what the sandbox is and how to reach it.
#[derive(Debug)]
pub(crate) struct Answer {
    /// The id the service returned (the one to keep).
    pub id: String,
    /// How to reach it.
    pub reach: Reach,
    /// The envd version it runs, when said.
    pub envd_version: Option<String>,
    /// The template it was made from, when said.
    pub template: Option<String>,
}

impl Answer {
    /// Checks `created`: its `domain` replaces the client's for envd and hosts
    /// (PROTOCOL.md §3.2), and its envd token is the one sent.
    ///
    /// The answer's `domain` and sandbox id both become part of host names
    /// (`https://{port}-{id}.{domain}`), so both are checked first: a host name of letters,
    /// digits, `-` and `.` only (the id without `.`). An answer such as `domain: "a@evil.com"`,
    /// `"evil.com/x"` or `"http://…"` is a `Provider` error, and no request (nor the envd
    /// token) goes anywhere it names.
    pub fn new(api: &Api, created: SandboxCreated) -> Result<Answer> {
        let domain = match created.domain.as_deref().filter(|d| !d.is_empty()) {
            Some(domain) => checked_answer_host(domain)
                .map_err(|e| e.with_provider(PROVIDER))?
                .to_owned(),
            None => api.config.domain.clone(),
        };
        let id = created.sandbox_id;
        if id.contains('.') || checked_answer_host(&id).is_err() {
            return Err(Error::new(
                ErrorKind::Provider,
                "the provider answered with a sandbox id this SDK will not use: only letters, digits and '-' are allowed",
            )
            .with_provider(PROVIDER)
            .with_retryable(false));
        }
        let envd = Envd::new(api, &domain, &id, created.envd_access_token)?;
        Ok(Answer {
            id,
            reach: Reach {
                envd,
                domain,
                traffic_token: created.traffic_access_token,
            },
            envd_version: created.envd_version,
            template: created.alias.or(created.template_id),
        })
    }
}

/// Maps E2B's state names (`running`, `paused`) onto the common model.
fn map_state(state: &str) -> SandboxState {
    match state {
        "running" => SandboxState::Running,
        "paused" => SandboxState::Paused,
        // The API documents only these two; anything new keeps its raw name in `raw_state`.
        _ => SandboxState::Unknown,
    }
}

/// The E2B name of a common state, for the states E2B reports.
fn state_name(state: SandboxState) -> Option<&'static str> {
    match state {
        SandboxState::Running => Some("running"),
        SandboxState::Paused => Some("paused"),
        _ => None,
    }
}

/// A sandbox listing or detail as [`SandboxInfo`].
fn sandbox_info(detail: SandboxDetail) -> SandboxInfo {
    let raw = detail.state.clone();
    let state = raw
        .as_deref()
        .map(map_state)
        .unwrap_or(SandboxState::Unknown);
    let mut info = SandboxInfo::new(detail.sandbox_id, PROVIDER, state);
    info.raw_state = raw;
    info.template = detail.alias.or(detail.template_id);
    info.metadata = detail.metadata;
    info.resources = sandbox_sdk_core::Resources {
        cpus: detail.cpu_count,
        memory_mb: detail.memory_mb,
        disk_gb: detail.disk_size_mb.map(|mb| mb.div_ceil(1024)),
        gpus: None,
    };
    info.created_at = detail
        .started_at
        .as_deref()
        .and_then(sandbox_sdk_core::time::parse_rfc3339);
    info.expires_at = detail
        .end_at
        .as_deref()
        .and_then(sandbox_sdk_core::time::parse_rfc3339);
    info
}

/// A snapshot on the wire as ours.
fn snapshot_info(s: SnapshotWire, sandbox_id: Option<String>) -> SnapshotInfo {
    SnapshotInfo {
        name: s.names.first().cloned(),
        id: s.snapshot_id,
        sandbox_id,
        created_at: None,
    }
}

/// A metrics sample on the wire as ours.
fn metrics(m: SandboxMetric) -> Metrics {
    let timestamp = m
        .timestamp_unix
        .and_then(|t| u64::try_from(t).ok())
        .map(|t| UNIX_EPOCH + Duration::from_secs(t))
        .or_else(|| {
            m.timestamp
                .as_deref()
                .and_then(sandbox_sdk_core::time::parse_rfc3339)
        });
    Metrics {
        timestamp,
        cpu_percent: m.cpu_used_pct,
        cpu_count: m.cpu_count,
        memory_used_bytes: m.mem_used,
        memory_total_bytes: m.mem_total,
        disk_used_bytes: m.disk_used,
        disk_total_bytes: m.disk_total,
    }
}

/// Creates a sandbox (`POST /v2/sandboxes`) from `spec` and `options`.
///
/// With [`CreateSpec::idempotency_key`] the create goes through [`create_once`]: a sandbox
/// already labelled with the key ([`IDEMPOTENCY_LABEL`]) is connected to instead when
/// this create made it ([`check_adoption`]: its fingerprint and labels; anyone else's is a
/// `Conflict`, left alone); otherwise the create is sent once with E2B's `Idempotency-Key`
/// header (the create fingerprint), and a failure that
/// leaves it unknown whether the sandbox was made (a timeout, a connection lost after sending,
/// 500/502/504) is settled by looking the label up for the configured create-lookup window
/// before the error is returned.
pub(crate) async fn create(
    api: &Api,
    spec: &CreateSpec,
    options: &CreateOptions,
) -> Result<Answer> {
    if spec.resources != Default::default() {
        return Err(Error::validation(
            "E2B sizes sandboxes by template: build one with prepare_template (cpu_count, memory_mb) instead of CreateSpec::resources",
        )
        .with_provider(PROVIDER)
        .with_operation("create"));
    }
    if spec.region.is_some() {
        return Err(
            Error::validation("E2B does not let the caller choose a region")
                .with_provider(PROVIDER)
                .with_operation("create"),
        );
    }
    for key in spec.env.keys() {
        sandbox_sdk_core::validate_env_name(key)?;
    }
    let key = spec.idempotency_key.as_deref();
    let send = || send_create(api, spec, options);
    let lookup = || async move {
        let Some(key) = key else {
            return Ok(None);
        };
        match find_keyed(api, key).await? {
            Some(info) => {
                check_adoption(spec, &info.id, &info.metadata)
                    .map_err(|e| e.with_provider(PROVIDER))?;
                connect(api, &info.id, spec.timeout, "connect")
                    .await
                    .map(Some)
            }
            None => Ok(None),
        }
    };
    create_once(key, &api.config.create_lookup, send, lookup).await
}

/// One `POST /v2/sandboxes`; with a key, labelled with it and with the create fingerprint
/// ([`FINGERPRINT_LABEL`]), and carrying the fingerprint as E2B's `Idempotency-Key` header
/// (PROTOCOL.md §2.4; see [`idempotency_header_value`]).
async fn send_create(api: &Api, spec: &CreateSpec, options: &CreateOptions) -> Result<Answer> {
    let mut metadata = spec.metadata.clone();
    let fingerprint = create_fingerprint(spec);
    if let (Some(key), Some(fingerprint)) = (&spec.idempotency_key, &fingerprint) {
        metadata.insert(IDEMPOTENCY_LABEL.into(), key.clone());
        metadata.insert(FINGERPRINT_LABEL.into(), fingerprint.clone());
    }
    if let Some(name) = &spec.name {
        metadata.insert(NAME_METADATA_KEY.into(), name.clone());
    }
    let body = NewSandbox {
        template_id: spec
            .template
            .clone()
            .unwrap_or_else(|| DEFAULT_TEMPLATE.to_owned()),
        timeout: spec.timeout.map(secs),
        auto_pause: options.auto_pause,
        auto_pause_memory: options.auto_pause_memory,
        auto_resume: options.auto_resume.map(|enabled| AutoResume { enabled }),
        env_vars: spec.env.clone(),
        metadata,
        allow_internet_access: options.allow_internet_access,
        network: options.network.clone(),
        volume_mounts: options.volume_mounts.clone(),
    };
    let header = fingerprint.as_deref().map(idempotency_header_value);
    let created = api.create_sandbox(&body, header.as_deref()).await?;
    Answer::new(api, created)
}

/// The live sandbox labelled with idempotency key `key` (`GET /v2/sandboxes` filtered by the
/// [`IDEMPOTENCY_LABEL`] label, running or paused, one item).
pub(crate) async fn find_keyed(api: &Api, key: &str) -> Result<Option<SandboxInfo>> {
    let query = ListQuery {
        metadata: [(IDEMPOTENCY_LABEL.to_owned(), key.to_owned())].into(),
        states: vec!["running".into(), "paused".into()],
        limit: Some(1),
    };
    list(api, &query).try_next().await
}

/// `POST /v2/sandboxes/{id}/connect`, then, when the caller gave a TTL,
/// `POST /sandboxes/{id}/timeout` with it on the id the service returned.
///
/// PROTOCOL.md §2.3: connect only ever extends the TTL, while `/timeout` sets it to
/// *now + timeout* and can shorten it. The connect answer (`Sandbox`) carries no end time to
/// compare with, so the follow-up is sent whenever a TTL was given: one more call, and the
/// sandbox lives exactly as long as asked. Without a TTL, the TTL is left as it is.
pub(crate) async fn connect(
    api: &Api,
    id: &str,
    timeout: Option<Duration>,
    operation: &str,
) -> Result<Answer> {
    let created = api
        .connect_sandbox(id, timeout.map(secs), operation)
        .await?;
    if let Some(timeout) = timeout {
        api.set_timeout(&created.sandbox_id, secs(timeout), operation)
            .await?;
    }
    Answer::new(api, created)
}

/// Details of one sandbox (`GET /sandboxes/{id}`) in the common shape.
pub(crate) async fn info(api: &Api, id: &str) -> Result<SandboxInfo> {
    Ok(sandbox_info(api.get_sandbox(id).await?))
}

/// Kills a sandbox by id: `true` when it was killed, `false` when it was already gone (404).
pub(crate) async fn kill(api: &Api, id: &str) -> Result<bool> {
    match api.kill_sandbox(id).await {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// `DELETE /sandboxes/{id}`: a paused sandbox is killed where it is, not resumed first. A 404
/// is `NotFound`.
pub(crate) async fn destroy(api: &Api, id: &str) -> Result<()> {
    if kill(api, id).await? {
        Ok(())
    } else {
        Err(
            Error::new(ErrorKind::NotFound, format!("sandbox {id} is already gone"))
                .with_provider(PROVIDER)
                .with_operation("destroy")
                .with_sandbox_id(id)
                .with_status(404),
        )
    }
}

/// Lists sandboxes page by page (`GET /v2/sandboxes`, following `X-Next-Token`) as the stream
/// is polled.
pub(crate) fn list(api: &Api, query: &ListQuery) -> SandboxStream<'static> {
    api.list_sandboxes(&query.metadata, &query.states, query.limit)
        .map_ok(sandbox_info)
        .boxed()
}

/// Lists the sandboxes `filter` matches: its states and labels are asked of the service, the
/// rest is checked here.
pub(crate) fn list_filtered(api: &Api, filter: &ListFilter) -> SandboxStream<'static> {
    let mut states: Vec<String> = Vec::new();
    for state in &filter.states {
        if let Some(name) = state_name(*state)
            && !states.iter().any(|s| s == name)
        {
            states.push(name.to_owned());
        }
    }
    if !filter.states.is_empty() && states.is_empty() {
        // Only states E2B never reports were asked for.
        return futures::stream::empty().boxed();
    }
    let filter = filter.clone();
    list(
        api,
        &ListQuery {
            metadata: filter.metadata.clone(),
            states,
            limit: None,
        },
    )
    .try_filter(move |info| std::future::ready(filter.matches(info)))
    .boxed()
}

/// Pauses a sandbox, keeping memory or only the filesystem. `false` when it was already paused
/// (a 409 saying so); a 409 for a state change in progress is a `Conflict` error.
pub(crate) async fn pause(api: &Api, id: &str, mode: PauseMode) -> Result<bool> {
    match api.pause_sandbox(id, mode == PauseMode::Memory).await {
        Ok(()) => Ok(true),
        // PROTOCOL.md §2.3: 409 on pause is "already paused" (the SDKs return false), but a 409
        // also answers a sandbox still changing state (REST "state change in progress", the
        // proxy's "still transitioning", §3.5): that pause did not happen, so only a body
        // saying "already paused" is `false`; any other conflict stays an error.
        Err(e)
            if e.kind() == ErrorKind::Conflict
                && e.message().to_ascii_lowercase().contains("already paused") =>
        {
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

/// Sets the sandbox's time to live to `timeout` from now (`POST /sandboxes/{id}/timeout`).
pub(crate) async fn set_timeout(api: &Api, id: &str, timeout: Duration) -> Result<()> {
    api.set_timeout(id, secs(timeout), "set_timeout").await
}

/// The time to live of a fork's children: the one the caller asked for the parent, else 300 s.
///
/// PROTOCOL.md §2.3: the fork endpoint's own `timeout` default is 15 s, while a create
/// (`POST /v2/sandboxes`, `NewSandboxV2`) defaults to 300 s, which is what the SDKs use. So the
/// TTL is always sent.
pub(crate) fn fork_ttl(parent: Option<Duration>) -> Duration {
    parent.unwrap_or(DEFAULT_TTL)
}

/// Forks sandbox `id` into `count` children (1..=100), each living `ttl`; each child is
/// reported on its own, so a partial failure leaves the others usable.
pub(crate) async fn fork(
    api: &Api,
    id: &str,
    count: u32,
    ttl: Duration,
) -> Result<Vec<Result<Answer>>> {
    if !(1..=100).contains(&count) {
        return Err(Error::validation("fork count must be between 1 and 100")
            .with_provider(PROVIDER)
            .with_operation("fork"));
    }
    let results = api.fork_sandbox(id, count, secs(ttl)).await?;
    Ok(results
        .into_iter()
        .map(|r| match (r.sandbox, r.error) {
            (Some(created), _) => Answer::new(api, created),
            (None, error) => {
                let (status, message) = error.map(|e| (e.code, e.message)).unwrap_or((None, None));
                let status = status.and_then(|s| u16::try_from(s).ok()).unwrap_or(500);
                let body = serde_json::json!({
                    "code": status,
                    "message": message.unwrap_or_else(|| "fork failed".into()),
                })
                .to_string();
                Err(map_error(Failure {
                    status,
                    body: body.as_bytes(),
                    retry_after: None,
                    should_retry: None,
                    operation: "fork",
                    sandbox_id: Some(id),
                    request_id: None,
                }))
            }
        })
        .collect())
}

/// Resource samples between `start` and `end` (Unix seconds), oldest first.
pub(crate) async fn metrics_range(
    api: &Api,
    id: &str,
    start: Option<u64>,
    end: Option<u64>,
) -> Result<Vec<Metrics>> {
    let samples = api.sandbox_metrics(id, start, end).await?;
    Ok(samples.into_iter().map(metrics).collect())
}

/// The latest resource sample of several sandboxes at once (`GET /sandboxes/metrics`).
pub(crate) async fn metrics_many(
    api: &Api,
    sandbox_ids: &[&str],
) -> Result<BTreeMap<String, Metrics>> {
    if sandbox_ids.is_empty() {
        return Ok(BTreeMap::new());
    }
    let answer = api.metrics_of(sandbox_ids).await?;
    Ok(answer
        .sandboxes
        .into_iter()
        .map(|(id, m)| (id, metrics(m)))
        .collect())
}

/// The sandbox's logs (`GET /v2/sandboxes/{id}/logs`).
pub(crate) async fn logs(api: &Api, id: &str, query: &LogQuery) -> Result<Vec<LogEntry>> {
    let mut pairs = Vec::new();
    if let Some(c) = query.cursor {
        pairs.push(("cursor", c.to_string()));
    }
    if let Some(l) = query.limit {
        pairs.push(("limit", l.to_string()));
    }
    if let Some(d) = &query.direction {
        pairs.push(("direction", d.clone()));
    }
    if let Some(l) = &query.level {
        pairs.push(("level", l.clone()));
    }
    if let Some(s) = &query.search {
        pairs.push(("search", s.clone()));
    }
    api.sandbox_logs(id, &pairs).await
}

/// Snapshots sandbox `id` (`POST /sandboxes/{id}/snapshots`).
pub(crate) async fn snapshot(api: &Api, id: &str, name: Option<&str>) -> Result<SnapshotInfo> {
    let s = api.create_snapshot(id, name).await?;
    Ok(snapshot_info(s, Some(id.to_owned())))
}

/// Snapshots, page by page (`GET /snapshots`), optionally of one sandbox.
pub(crate) fn list_snapshots(
    api: &Api,
    sandbox_id: Option<&str>,
) -> futures::stream::BoxStream<'static, Result<SnapshotInfo>> {
    let sid = sandbox_id.map(str::to_owned);
    api.list_snapshots(sandbox_id)
        .map_ok(move |s| snapshot_info(s, sid.clone()))
        .boxed()
}

/// Creates a team volume (`POST /volumes`); its name is letters, digits, `_` and `-`.
pub(crate) async fn create_volume(api: &Api, name: &str) -> Result<Volume> {
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        return Err(Error::validation(format!(
            "invalid volume name {name:?}: use letters, digits, _ and -"
        ))
        .with_provider(PROVIDER)
        .with_operation("create_volume"));
    }
    api.create_volume(name).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_map_onto_the_common_model() {
        assert_eq!(map_state("running"), SandboxState::Running);
        assert_eq!(map_state("paused"), SandboxState::Paused);
        assert_eq!(map_state("new-thing"), SandboxState::Unknown);
    }

    #[test]
    fn info_keeps_raw_state_and_times() {
        let d: SandboxDetail = serde_json::from_str(
            r#"{"sandboxID":"isb","templateID":"t","alias":"base","clientID":"6532622b","startedAt":"2026-01-01T00:00:00Z","endAt":"2026-01-01T00:05:00Z","state":"paused","metadata":{"k":"v"},"cpuCount":2,"memoryMB":512,"diskSizeMB":1024,"envdVersion":"0.6.13"}"#,
        )
        .unwrap();
        let info = sandbox_info(d);
        assert_eq!(info.state, SandboxState::Paused);
        assert_eq!(info.raw_state.as_deref(), Some("paused"));
        assert_eq!(info.template.as_deref(), Some("base"));
        assert_eq!(
            info.expires_at
                .unwrap()
                .duration_since(info.created_at.unwrap())
                .unwrap(),
            Duration::from_secs(300)
        );
    }

    #[test]
    fn metric_sample_maps_to_metrics() {
        let m: SandboxMetric = serde_json::from_str(
            r#"{"timestamp":"2026-01-01T00:00:00Z","timestampUnix":1767225600,"cpuCount":2,"cpuUsedPct":12.5,"memUsed":100,"memTotal":200,"memCache":5,"diskUsed":10,"diskTotal":20}"#,
        )
        .unwrap();
        let m = metrics(m);
        assert_eq!(m.cpu_percent, Some(12.5));
        assert_eq!(m.memory_total_bytes, Some(200));
        assert_eq!(
            m.timestamp,
            Some(UNIX_EPOCH + Duration::from_secs(1_767_225_600))
        );
    }

    /// What the old public doc example showed: conforming keys as they are, others mapped.
    #[test]
    fn idempotency_keys_map_deterministically() {
        assert_eq!(idempotency_header_value("job-42"), "job-42");
        let mapped = idempotency_header_value("Job 42");
        assert!(mapped.starts_with("sdk-") && mapped.len() == 68);
        assert_eq!(mapped, idempotency_header_value("Job 42"));
    }

    #[test]
    fn conforming_idempotency_keys_are_sent_as_they_are() {
        for key in ["a", "job-42", "0-0", &"k".repeat(255)] {
            assert_eq!(idempotency_header_value(key), key);
        }
    }

    #[test]
    fn other_idempotency_keys_map_to_a_prefixed_sha256() {
        let too_long = "k".repeat(256);
        let keys = [
            "",
            "Job-42",
            "job_42",
            "job 42",
            "jöb",
            "conformance-key-1\n",
            &too_long,
        ];
        let mut seen = std::collections::BTreeSet::new();
        for key in keys {
            let mapped = idempotency_header_value(key);
            assert_eq!(mapped.len(), 68, "{key:?}");
            assert!(mapped.starts_with("sdk-"));
            assert!(
                mapped
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
                "{mapped}"
            );
            assert_eq!(mapped, idempotency_header_value(key), "deterministic");
            assert!(seen.insert(mapped), "{key:?} collides");
        }
        // SHA-256 of the empty string, a known vector.
        assert_eq!(
            idempotency_header_value(""),
            "sdk-e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
