//! [`E2bProvider`]: create, connect, list, snapshots and the control-plane calls not tied to one
//! sandbox handle.

use crate::PROVIDER;
use crate::capabilities::CAPABILITIES;
use crate::sandbox::E2bSandbox;
use crate::wire::{
    AutoResume, ConnectBody, NetworkConfig, NewSandbox, NewVolume, SandboxCreated, SandboxDetail,
    SnapshotWire, TimeoutBody, Volume, VolumeMount,
};
use futures::{StreamExt, TryStreamExt};
use sandbox_sdk_core::http::{HttpClient, Method, encode_path_segment};
use sandbox_sdk_core::idempotency::{CreateLookup, create_once};
use sandbox_sdk_core::{
    Capabilities, CreateSpec, Error, ErrorKind, ListFilter, Provider, Result, Sandbox, SandboxInfo,
    SandboxState, SandboxStream, SnapshotInfo,
};
use sha2::Digest as _;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// The cap on a control-plane answer that describes one object (a created or connected
/// sandbox, one sandbox's details, a volume, a fork's children, a snapshot, a template step):
/// such answers are a few KiB, so 1 MiB is far past any honest one, and a hostile or broken
/// answer is refused before it is held. Lists, metrics and logs keep core's default
/// ([`sandbox_sdk_core::http::DEFAULT_MAX_BODY`], 16 MiB per page).
pub const ONE_OBJECT_MAX_BODY: usize = 1024 * 1024;

/// The metadata key under which [`CreateSpec::idempotency_key`] is stored on a sandbox.
pub const IDEMPOTENCY_METADATA_KEY: &str = "sandbox-sdk-idempotency-key";
/// The metadata key under which [`CreateSpec::name`] is stored (E2B sandboxes have no name).
pub const NAME_METADATA_KEY: &str = "sandbox-sdk-name";
/// The template used when the spec names none.
pub const DEFAULT_TEMPLATE: &str = "base";
/// The header E2B dedupes `POST /v2/sandboxes` by (E2B SDK 2.63 sends it on every try of a
/// create).
pub const IDEMPOTENCY_HEADER: &str = "Idempotency-Key";
/// The longest `Idempotency-Key` E2B takes.
const IDEMPOTENCY_HEADER_MAX: usize = 255;

/// The `Idempotency-Key` header value for a [`CreateSpec::idempotency_key`]. E2B takes 1–255
/// characters of `[a-z0-9-]` (PROTOCOL.md, "Idempotent create"): a key of that form is sent as
/// it is; any other key is sent as `sdk-` followed by the lowercase hex SHA-256 of its UTF-8
/// bytes (68 characters), so the same key always maps to the same header. Only a caller whose
/// own key is literally `sdk-<that digest>` could collide with a mapped one. The metadata label
/// keeps the key as given.
///
/// ```
/// use sandbox_e2b::idempotency_header_value;
///
/// assert_eq!(idempotency_header_value("job-42"), "job-42");
/// let mapped = idempotency_header_value("Job 42");
/// assert!(mapped.starts_with("sdk-") && mapped.len() == 68);
/// assert_eq!(mapped, idempotency_header_value("Job 42"));
/// ```
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

/// What every handle of one provider shares.
pub(crate) struct Shared {
    pub api: HttpClient,
    pub envd: HttpClient,
    pub domain: String,
    pub sandbox_url: Option<String>,
    pub user: Option<String>,
    pub template_poll_interval: Duration,
    pub template_build_timeout: Duration,
    pub create_lookup: CreateLookup,
    pub stream_idle_timeout: Duration,
    pub transfer_idle_timeout: Duration,
}

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

/// The E2B provider: a control-plane client plus envd addressing. Build it with
/// [`crate::E2bBuilder`].
#[derive(Clone)]
pub struct E2bProvider {
    pub(crate) shared: Arc<Shared>,
}

impl fmt::Debug for E2bProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("E2bProvider")
            .field("api", &self.shared.api)
            .field("domain", &self.shared.domain)
            .field("sandbox_url", &self.shared.sandbox_url)
            .finish()
    }
}

/// Maps E2B's state names (`running`, `paused`) onto the common model.
pub fn map_state(state: &str) -> SandboxState {
    match state {
        "running" => SandboxState::Running,
        "paused" => SandboxState::Paused,
        // The API documents only these two; anything new keeps its raw name in `raw_state`.
        _ => SandboxState::Unknown,
    }
}

fn state_name(state: SandboxState) -> Option<&'static str> {
    match state {
        SandboxState::Running => Some("running"),
        SandboxState::Paused => Some("paused"),
        _ => None,
    }
}

/// A sandbox listing or detail as [`SandboxInfo`].
pub fn sandbox_info(detail: SandboxDetail) -> SandboxInfo {
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

/// `k=v&k2=v2`, URL-encoded, as the `metadata` query value.
fn metadata_query(metadata: &BTreeMap<String, String>) -> String {
    let mut out = url::form_urlencoded::Serializer::new(String::new());
    for (k, v) in metadata {
        out.append_pair(k, v);
    }
    out.finish()
}

/// Whole seconds, rounded up; saturates for absurd durations (`Duration::MAX`) instead of
/// overflowing, so the service rejects them rather than the caller panicking.
fn secs(d: Duration) -> u64 {
    d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0))
}

impl E2bProvider {
    pub(crate) fn from_shared(shared: Arc<Shared>) -> Self {
        E2bProvider { shared }
    }

    /// Builder shortcut: [`crate::E2bBuilder::from_env`] then build.
    pub fn from_env() -> Result<Self> {
        crate::E2bBuilder::from_env().build()
    }

    /// Creates a sandbox with E2B-specific options (`POST /v2/sandboxes`).
    ///
    /// With [`CreateSpec::idempotency_key`] the create goes through
    /// [`create_once`]: a sandbox already labelled with the key
    /// ([`IDEMPOTENCY_METADATA_KEY`]) is connected to instead; otherwise the create is sent once
    /// with E2B's `Idempotency-Key` header, and a failure that leaves it unknown whether the
    /// sandbox was made (a timeout, a connection lost after sending, 500/502/504) is settled by
    /// looking the label up for the builder's [`crate::E2bBuilder::create_lookup`] window
    /// before the error is returned.
    pub async fn create_sandbox(
        &self,
        spec: &CreateSpec,
        options: &CreateOptions,
    ) -> Result<E2bSandbox> {
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
        let send = || self.send_create(spec, options);
        let lookup = || async move {
            let Some(key) = key else {
                return Ok(None);
            };
            match self.find_keyed(key).await? {
                Some(info) => self.connect_sandbox(&info.id, spec.timeout).await.map(Some),
                None => Ok(None),
            }
        };
        create_once(key, &self.shared.create_lookup, send, lookup).await
    }

    /// One `POST /v2/sandboxes`, with E2B's `Idempotency-Key` header when the spec has a key
    /// (PROTOCOL.md, "Idempotent create"; see [`idempotency_header_value`]).
    async fn send_create(&self, spec: &CreateSpec, options: &CreateOptions) -> Result<E2bSandbox> {
        let mut metadata = spec.metadata.clone();
        if let Some(key) = &spec.idempotency_key {
            metadata.insert(IDEMPOTENCY_METADATA_KEY.into(), key.clone());
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
        let mut request = self
            .shared
            .api
            .request(Method::Post, "/v2/sandboxes")
            .json(&body)
            .operation("create")
            .max_body(ONE_OBJECT_MAX_BODY);
        if let Some(key) = &spec.idempotency_key {
            request = request.header(IDEMPOTENCY_HEADER, &idempotency_header_value(key));
        }
        let created: SandboxCreated = request.send_json().await?;
        E2bSandbox::new(self.shared.clone(), created, spec.timeout)
    }

    /// The live sandbox labelled with idempotency key `key` (`GET /v2/sandboxes` filtered by
    /// the [`IDEMPOTENCY_METADATA_KEY`] label, running or paused, one item).
    async fn find_keyed(&self, key: &str) -> Result<Option<SandboxInfo>> {
        let query = ListQuery {
            metadata: [(IDEMPOTENCY_METADATA_KEY.to_owned(), key.to_owned())].into(),
            states: vec!["running".into(), "paused".into()],
            limit: Some(1),
        };
        self.list_sandboxes(&query).try_next().await
    }

    /// Connects to a sandbox, resuming it when paused (`POST /v2/sandboxes/{id}/connect`). With
    /// `timeout`, the sandbox then lives exactly that long from now, shorter or longer than
    /// before. The id the service returns is the one kept.
    pub async fn connect_sandbox(&self, id: &str, timeout: Option<Duration>) -> Result<E2bSandbox> {
        let created = self.connect_raw(id, timeout, "connect").await?;
        E2bSandbox::new(self.shared.clone(), created, timeout)
    }

    /// `POST /v2/sandboxes/{id}/connect`, then, when the caller gave a TTL,
    /// `POST /sandboxes/{id}/timeout` with it on the id the service returned.
    ///
    /// PROTOCOL.md §1.2: connect only ever extends the TTL, while `/timeout` sets it to
    /// *now + timeout* and can shorten it. The connect answer (`Sandbox`) carries no end time to
    /// compare with, so the follow-up is sent whenever a TTL was given: one more call, and the
    /// sandbox lives exactly as long as asked. Without a TTL, the TTL is left as it is.
    pub(crate) async fn connect_raw(
        &self,
        id: &str,
        timeout: Option<Duration>,
        operation: &str,
    ) -> Result<SandboxCreated> {
        let created: SandboxCreated = self
            .shared
            .api
            .request(
                Method::Post,
                &format!("/v2/sandboxes/{}/connect", encode_path_segment(id)),
            )
            .json(&ConnectBody {
                timeout: timeout.map(secs),
            })
            .operation(operation)
            .sandbox_id(id)
            .max_body(ONE_OBJECT_MAX_BODY)
            .send_json()
            .await?;
        if let Some(timeout) = timeout {
            let kept = &created.sandbox_id;
            self.shared
                .api
                .request(
                    Method::Post,
                    &format!("/sandboxes/{}/timeout", encode_path_segment(kept)),
                )
                .json(&TimeoutBody {
                    timeout: secs(timeout),
                })
                .operation(operation)
                .sandbox_id(kept)
                .send_empty()
                .await?;
        }
        Ok(created)
    }

    /// Details of one sandbox (`GET /sandboxes/{id}`) in the common shape.
    pub async fn get_info(&self, id: &str) -> Result<SandboxInfo> {
        Ok(sandbox_info(self.get_detail(id).await?))
    }

    /// Details of one sandbox as E2B reports them (CPUs, memory, disk, envd version, ...).
    pub async fn get_detail(&self, id: &str) -> Result<SandboxDetail> {
        self.shared
            .api
            .request(
                Method::Get,
                &format!("/sandboxes/{}", encode_path_segment(id)),
            )
            .operation("info")
            .sandbox_id(id)
            .max_body(ONE_OBJECT_MAX_BODY)
            .send_json()
            .await
    }

    /// Kills a sandbox by id: `true` when it was killed, `false` when it was already gone (404).
    pub async fn kill(&self, id: &str) -> Result<bool> {
        let r = self
            .shared
            .api
            .request(
                Method::Delete,
                &format!("/sandboxes/{}", encode_path_segment(id)),
            )
            .operation("destroy")
            .sandbox_id(id)
            .send_empty()
            .await;
        match r {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Lists sandboxes page by page (`GET /v2/sandboxes`, following `X-Next-Token`) as the
    /// stream is polled.
    pub fn list_sandboxes(&self, query: &ListQuery) -> SandboxStream<'static> {
        let api = self.shared.api.clone();
        let metadata = (!query.metadata.is_empty()).then(|| metadata_query(&query.metadata));
        let states = (!query.states.is_empty()).then(|| query.states.join(","));
        let limit = query.limit;
        let request = move || {
            let mut req = api.request(Method::Get, "/v2/sandboxes").operation("list");
            if let Some(m) = &metadata {
                req = req.query("metadata", m);
            }
            if let Some(s) = &states {
                req = req.query("state", s);
            }
            if let Some(l) = limit {
                req = req.query("limit", l);
            }
            req
        };
        paged(request, |d: SandboxDetail| sandbox_info(d))
    }

    /// Snapshots, page by page (`GET /snapshots`), optionally of one sandbox.
    pub fn list_snapshots(
        &self,
        sandbox_id: Option<&str>,
    ) -> futures::stream::BoxStream<'static, Result<SnapshotInfo>> {
        let api = self.shared.api.clone();
        let sandbox_id = sandbox_id.map(str::to_owned);
        let sid = sandbox_id.clone();
        let request = move || {
            let mut req = api
                .request(Method::Get, "/snapshots")
                .operation("list_snapshots");
            if let Some(id) = &sandbox_id {
                req = req.query("sandboxID", id);
            }
            req
        };
        paged(request, move |s: SnapshotWire| {
            crate::sandbox::snapshot_info(s, sid.clone())
        })
    }

    /// The latest resource sample of several sandboxes at once (`GET /sandboxes/metrics`).
    pub async fn metrics_many(
        &self,
        sandbox_ids: &[&str],
    ) -> Result<BTreeMap<String, sandbox_sdk_core::Metrics>> {
        if sandbox_ids.is_empty() {
            return Ok(BTreeMap::new());
        }
        let answer: crate::wire::SandboxesMetrics = self
            .shared
            .api
            .request(Method::Get, "/sandboxes/metrics")
            .query("sandbox_ids", sandbox_ids.join(","))
            .operation("metrics")
            .send_json()
            .await?;
        Ok(answer
            .sandboxes
            .into_iter()
            .map(|(id, m)| (id, crate::sandbox::metrics(m)))
            .collect())
    }

    /// Creates a team volume (`POST /volumes`), to mount with [`CreateOptions::volume_mounts`].
    pub async fn create_volume(&self, name: &str) -> Result<Volume> {
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
        self.shared
            .api
            .request(Method::Post, "/volumes")
            .json(&NewVolume { name: name.into() })
            .operation("create_volume")
            .max_body(ONE_OBJECT_MAX_BODY)
            .send_json()
            .await
    }

    /// Lists the team's volumes (`GET /volumes`).
    pub async fn list_volumes(&self) -> Result<Vec<Volume>> {
        self.shared
            .api
            .request(Method::Get, "/volumes")
            .operation("list_volumes")
            .send_json()
            .await
    }

    /// Deletes a team volume (`DELETE /volumes/{volumeID}`).
    pub async fn delete_volume(&self, volume_id: &str) -> Result<()> {
        self.shared
            .api
            .request(
                Method::Delete,
                &format!("/volumes/{}", encode_path_segment(volume_id)),
            )
            .operation("delete_volume")
            .send_empty()
            .await
    }

    /// Deletes a snapshot (`DELETE /templates/{snapshotID}`).
    pub async fn delete_snapshot(&self, snapshot_id: &str) -> Result<()> {
        self.shared
            .api
            .request(
                Method::Delete,
                &format!("/templates/{}", encode_path_segment(snapshot_id)),
            )
            .operation("delete_snapshot")
            .send_empty()
            .await
    }
}

#[async_trait::async_trait]
impl Provider for E2bProvider {
    fn name(&self) -> &str {
        PROVIDER
    }

    fn capabilities(&self) -> Capabilities {
        CAPABILITIES
    }

    async fn create(&self, spec: &CreateSpec) -> Result<Box<dyn Sandbox>> {
        Ok(Box::new(
            self.create_sandbox(spec, &CreateOptions::default()).await?,
        ))
    }

    async fn connect(&self, id: &str) -> Result<Box<dyn Sandbox>> {
        Ok(Box::new(self.connect_sandbox(id, None).await?))
    }

    fn list(&self, filter: &ListFilter) -> SandboxStream<'_> {
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
        self.list_sandboxes(&ListQuery {
            metadata: filter.metadata.clone(),
            states,
            limit: None,
        })
        .try_filter(move |info| std::future::ready(filter.matches(info)))
        .boxed()
    }

    /// `DELETE /sandboxes/{id}`: a paused sandbox is killed where it is, not resumed first. A
    /// 404 is `NotFound`.
    async fn destroy(&self, id: &str) -> Result<()> {
        if self.kill(id).await? {
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

    async fn find_by_idempotency_key(&self, key: &str) -> Result<Option<SandboxInfo>> {
        self.find_keyed(key).await
    }

    /// Unsupported: E2B publishes no usage meter (the per-sandbox events endpoint that carried
    /// execution times was removed, PROTOCOL.md §1.2). The client's emulation estimates usage
    /// from the listing and the price table.
    async fn usage(
        &self,
        sandbox: &SandboxInfo,
        _to: std::time::SystemTime,
    ) -> Result<sandbox_sdk_core::fleet::Usage> {
        Err(Error::not_supported(PROVIDER, "usage").with_sandbox_id(&sandbox.id))
    }

    /// The template for `spec` under its content-hash name
    /// ([`PrepareSpec::name`](sandbox_sdk_core::fleet::PrepareSpec::name)): see
    /// [`E2bProvider::prepare_template`] for reuse and rebuild; the spec maps onto a template
    /// by [`crate::template_spec`].
    async fn prepare(
        &self,
        spec: &sandbox_sdk_core::fleet::PrepareSpec,
    ) -> Result<sandbox_sdk_core::fleet::Prepared> {
        let name = spec.name();
        let (template, reused) = self
            .prepare_named(&name, &crate::templates::template_spec(spec))
            .await?;
        Ok(sandbox_sdk_core::fleet::Prepared {
            provider: PROVIDER.to_owned(),
            template,
            name,
            reused,
        })
    }
}

/// A stream over E2B's `X-Next-Token` pagination: each page is fetched as the stream is polled,
/// with `nextToken` added to the request `request` builds; it ends when the service sends no
/// token, or the same one again.
fn paged<T, U>(
    request: impl Fn() -> sandbox_sdk_core::http::Request + Send + Sync + 'static,
    map: impl Fn(T) -> U + Send + Sync + Clone + 'static,
) -> futures::stream::BoxStream<'static, Result<U>>
where
    T: serde::de::DeserializeOwned + Send + 'static,
    U: Send + 'static,
{
    let request = std::sync::Arc::new(request);
    futures::stream::try_unfold(Some(None::<String>), move |next| {
        let request = request.clone();
        let map = map.clone();
        async move {
            let Some(token) = next else {
                return Ok(None);
            };
            let mut req = request();
            if let Some(t) = &token {
                req = req.query("nextToken", t);
            }
            let response = req.send().await?;
            let next = response
                .header("x-next-token")
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(str::to_owned);
            let page: Vec<T> = response.json().await?;
            let items = futures::stream::iter(page.into_iter().map(move |x| Ok(map(x))));
            let next = match next {
                Some(t) if Some(&t) != token.as_ref() => Some(Some(t)),
                _ => None,
            };
            Ok::<_, Error>(Some((items, next)))
        }
    })
    .try_flatten()
    .boxed()
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
    fn metadata_query_is_form_encoded() {
        let m: BTreeMap<String, String> = [
            ("a b".to_string(), "x&y".to_string()),
            ("k".into(), "v".into()),
        ]
        .into();
        assert_eq!(metadata_query(&m), "a+b=x%26y&k=v");
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

    #[test]
    fn timeouts_round_up_to_whole_seconds() {
        assert_eq!(secs(Duration::from_millis(1500)), 2);
        assert_eq!(secs(Duration::from_secs(300)), 300);
        assert_eq!(secs(Duration::MAX), u64::MAX);
    }
}
