//! [`DaytonaProvider`]: create, connect, list, snapshots (`prepare`) and usage limits.

use crate::builder::DaytonaBuilder;
use crate::error::{PROVIDER, is_state_change_in_progress};
use crate::sandbox::DaytonaSandbox;
use crate::state::{Phase, phase, raw_states_of};
use crate::wire::{
    BuildInfo, CreateSandboxBody, CreateSnapshotBody, SandboxDto, SandboxList, SnapshotDto,
    UsageDto, VolumeMount,
};
use futures::StreamExt;
use sandbox_sdk_core::fleet::{PrepareSpec, Prepared, Usage};
use sandbox_sdk_core::http::{HttpClient, Method, encode_path_segment};
use sandbox_sdk_core::idempotency::create_once;
use sandbox_sdk_core::time::parse_rfc3339;
use sandbox_sdk_core::{
    Capabilities, CreateSpec, Error, ErrorKind, ListFilter, Provider, Result, Sandbox, SandboxInfo,
    SandboxStream,
};
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use tokio::time::Instant;

/// The label under which a create's idempotency key is kept, so a retried create finds the
/// sandbox the first attempt made.
pub const IDEMPOTENCY_LABEL: &str = "sandbox-sdk.idempotency-key";

/// Daytona: sandboxes on the control-plane API, commands and files through each sandbox's
/// toolbox. Build it with [`DaytonaBuilder`]. Cloning is cheap and shares the connection pool.
#[derive(Clone)]
pub struct DaytonaProvider {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub config: DaytonaBuilder,
    pub http: HttpClient,
    /// The bearer credential, for the WebSocket upgrade (which does not go through `http`).
    pub secret: String,
    /// Per sandbox id, the foreground sessions whose command ended, ready for the next one
    /// (shared by every handle of the sandbox made by this provider; see `exec`).
    pub idle_sessions: std::sync::Mutex<std::collections::HashMap<String, Vec<String>>>,
}

impl fmt::Debug for DaytonaProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DaytonaProvider")
            .field("config", &self.inner.config)
            .finish()
    }
}

/// Everything Daytona's create takes (PROTOCOL.md §1.1). Unset fields keep Daytona's defaults.
/// `Debug` shows env names only.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct DaytonaCreate {
    /// Sandbox name (unique in the organization; a duplicate is `Conflict`).
    pub name: Option<String>,
    /// Snapshot id or name to start from.
    pub snapshot: Option<String>,
    /// A container image to build the sandbox from (sent as a one-line Dockerfile `FROM`);
    /// exclusive with `snapshot`.
    pub image: Option<String>,
    /// The user commands run as.
    pub user: Option<String>,
    /// Environment of every process.
    pub env: BTreeMap<String, String>,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// CPU cores (not allowed with a snapshot).
    pub cpu: Option<u32>,
    /// Memory in GB (not allowed with a snapshot).
    pub memory_gb: Option<u32>,
    /// Disk in GB (not allowed with a snapshot).
    pub disk_gb: Option<u32>,
    /// GPUs (not allowed with a snapshot).
    pub gpu: Option<u32>,
    /// Region; defaults to the builder's target.
    pub target: Option<String>,
    /// Minutes idle before auto-stop (0 = never).
    pub auto_stop_minutes: Option<i64>,
    /// Minutes stopped before auto-archive (0 = the maximum).
    pub auto_archive_minutes: Option<i64>,
    /// Minutes stopped before auto-delete (negative = never, 0 = on stop).
    pub auto_delete_minutes: Option<i64>,
    /// Wall-clock time to live in minutes (0 = none).
    pub ttl_minutes: Option<i64>,
    /// Volumes to mount.
    pub volumes: Vec<VolumeMount>,
    /// Block all outbound network traffic.
    pub network_block_all: Option<bool>,
    /// Allowed outbound CIDRs.
    pub network_allow_list: Vec<String>,
    /// Allowed outbound domains.
    pub domain_allow_list: Vec<String>,
    /// Make preview links public (no token needed).
    pub public: Option<bool>,
}

impl fmt::Debug for DaytonaCreate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DaytonaCreate")
            .field("name", &self.name)
            .field("snapshot", &self.snapshot)
            .field("image", &self.image)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("labels", &self.labels)
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

impl DaytonaCreate {
    /// Daytona's options for a core [`CreateSpec`]: template → snapshot, metadata → labels,
    /// memory rounded up to whole GB, timeout → `ttlMinutes` (rounded up), region → target,
    /// and the idempotency key kept as the label [`IDEMPOTENCY_LABEL`] and, when the spec names
    /// no sandbox, turned into the name [`idempotency_name`] (Daytona's dedupe key).
    pub fn from_spec(spec: &CreateSpec) -> Self {
        let mut labels = spec.metadata.clone();
        if let Some(key) = &spec.idempotency_key {
            labels.insert(IDEMPOTENCY_LABEL.to_owned(), key.clone());
        }
        let name = spec
            .name
            .clone()
            .or_else(|| spec.idempotency_key.as_deref().map(idempotency_name));
        DaytonaCreate {
            name,
            snapshot: spec.template.clone(),
            env: spec.env.clone(),
            labels,
            cpu: spec.resources.cpus,
            memory_gb: spec.resources.memory_mb.map(|mb| mb.div_ceil(1024) as u32),
            disk_gb: spec.resources.disk_gb.map(|gb| gb as u32),
            gpu: spec.resources.gpus,
            target: spec.region.clone(),
            ttl_minutes: spec.timeout.map(|t| t.as_secs().div_ceil(60) as i64),
            ..Default::default()
        }
    }

    /// Refuses what Daytona would answer 400 to (PROTOCOL.md §1.1), before sending anything:
    /// resources with a snapshot (a snapshot fixes the size), and a snapshot with an image.
    fn check(&self) -> Result<()> {
        let Some(snapshot) = &self.snapshot else {
            return Ok(());
        };
        if self.image.is_some() {
            return Err(Error::validation(format!(
                "snapshot {snapshot:?} and image cannot both be set: Daytona starts a sandbox \
                 from one or the other; keep only one"
            ))
            .with_provider(PROVIDER)
            .with_operation("create"));
        }
        let resources: Vec<&str> = [
            ("cpu", self.cpu.is_some()),
            ("memory_gb", self.memory_gb.is_some()),
            ("disk_gb", self.disk_gb.is_some()),
            ("gpu", self.gpu.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, set)| set.then_some(name))
        .collect();
        if resources.is_empty() {
            return Ok(());
        }
        Err(Error::validation(format!(
            "snapshot {snapshot:?} cannot be combined with resources ({}): Daytona sizes a \
             sandbox from its snapshot; drop the resources, or set image instead of snapshot \
             (resources apply to an image build), or make a snapshot of that size with \
             DaytonaProvider::prepare",
            resources.join(", ")
        ))
        .with_provider(PROVIDER)
        .with_operation("create"))
    }

    fn body(&self, default_target: Option<&String>) -> CreateSandboxBody {
        let csv = |v: &Vec<String>| (!v.is_empty()).then(|| v.join(","));
        CreateSandboxBody {
            name: self.name.clone(),
            snapshot: self.snapshot.clone(),
            user: self.user.clone(),
            env: self.env.clone(),
            labels: self.labels.clone(),
            public: self.public,
            network_block_all: self.network_block_all,
            network_allow_list: csv(&self.network_allow_list),
            domain_allow_list: csv(&self.domain_allow_list),
            target: self.target.clone().or_else(|| default_target.cloned()),
            cpu: self.cpu,
            gpu: self.gpu,
            memory: self.memory_gb,
            disk: self.disk_gb,
            auto_stop_interval: self.auto_stop_minutes,
            auto_archive_interval: self.auto_archive_minutes,
            auto_delete_interval: self.auto_delete_minutes,
            ttl_minutes: self.ttl_minutes,
            volumes: self.volumes.clone(),
            build_info: self.image.as_ref().map(|image| BuildInfo {
                dockerfile_content: format!("FROM {image}\n"),
            }),
        }
    }
}

/// The size of a snapshot made by [`DaytonaProvider::prepare`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
pub struct SnapshotSize {
    /// CPU cores.
    pub cpu: u32,
    /// Memory in GB.
    pub memory_gb: u32,
    /// Disk in GB.
    pub disk_gb: u32,
}

/// One period of a sandbox's metered use, from Daytona's analytics API.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UsagePeriod {
    /// When the period started.
    pub start: Option<std::time::SystemTime>,
    /// When it ended (`None` while it runs).
    pub end: Option<std::time::SystemTime>,
    /// CPU cores billed (0 while the sandbox was stopped).
    pub cpu: f64,
    /// GPUs billed.
    pub gpu: f64,
    /// Memory billed, GB.
    pub memory_gb: f64,
    /// Disk billed, GB.
    pub disk_gb: f64,
    /// Price of the period, in US dollars, when reported.
    pub price: Option<f64>,
}

/// The organization's per-sandbox ceilings in one region and class, from the usage endpoint.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SandboxLimits {
    /// Region id.
    pub region: String,
    /// Sandbox class (`container`, `linux-vm`, ...), when reported.
    pub sandbox_class: Option<String>,
    /// Most CPU cores one sandbox may have.
    pub max_cpu: Option<f64>,
    /// Most memory (GB) one sandbox may have.
    pub max_memory_gb: Option<f64>,
    /// Most disk (GB) one sandbox may have.
    pub max_disk_gb: Option<f64>,
    /// CPU quota of the organization in the region, and current use.
    pub cpu_quota: Option<f64>,
    /// CPU cores in use.
    pub cpu_used: Option<f64>,
    /// Memory quota (GB).
    pub memory_quota_gb: Option<f64>,
    /// Memory in use (GB).
    pub memory_used_gb: Option<f64>,
    /// Disk quota (GB).
    pub disk_quota_gb: Option<f64>,
    /// Disk in use (GB).
    pub disk_used_gb: Option<f64>,
}

impl DaytonaProvider {
    /// A builder; same as [`DaytonaBuilder::new`].
    pub fn builder() -> DaytonaBuilder {
        DaytonaBuilder::new()
    }

    pub(crate) fn from_parts(config: DaytonaBuilder, http: HttpClient, secret: String) -> Self {
        DaytonaProvider {
            inner: Arc::new(Inner {
                config,
                http,
                secret,
                idle_sessions: Default::default(),
            }),
        }
    }

    /// Creates a sandbox with Daytona's own options and waits until it is `started`
    /// (bounded by the builder's start timeout). A sandbox that ends in `error` or
    /// `build_failed` fails with the server's reason.
    pub async fn create_sandbox(&self, options: &DaytonaCreate) -> Result<DaytonaSandbox> {
        self.create_keyed(options, None).await
    }

    /// Creates through [`create_once`]: with an idempotency `key` (and so a name, see
    /// [`idempotency_name`]) a sandbox already made under that name is adopted, a create that
    /// may have happened is settled by looking the name up for the builder's
    /// [`create_lookup`](DaytonaBuilder::create_lookup) window, and a 409 "name exists" for a
    /// sandbox carrying the key is that sandbox. Then waits until `started`.
    async fn create_keyed(
        &self,
        options: &DaytonaCreate,
        key: Option<&str>,
    ) -> Result<DaytonaSandbox> {
        options.check()?;
        let body = options.body(self.inner.config.target.as_ref());
        let name = options.name.as_deref();
        let lookup = || async move {
            match (key, name) {
                (Some(key), Some(name)) => self.find_created(name, key).await,
                _ => Ok(None),
            }
        };
        let send = || async {
            let sent = self
                .inner
                .http
                .request(Method::Post, "/sandbox")
                .json(&body)
                .operation("create")
                .send_json::<SandboxDto>()
                .await;
            match sent {
                // Daytona's dedupe: the name is taken. Ours (it carries the key) when an earlier
                // attempt got through; anyone else's is a real conflict.
                Err(e) if key.is_some() && is_name_taken(&e) => match lookup().await? {
                    Some(dto) => {
                        tracing::info!(
                            sandbox_id = %dto.id,
                            "create: the name is taken by the sandbox an earlier attempt made; adopting it"
                        );
                        Ok(dto)
                    }
                    None => Err(e),
                },
                other => other,
            }
        };
        let dto = create_once(key, &self.inner.config.create_lookup, send, lookup).await?;
        let dto = self
            .inner
            .wait_started(&dto.id, dto.clone(), "create")
            .await?;
        DaytonaSandbox::from_dto(self.inner.clone(), &dto).await
    }

    /// A handle to an existing sandbox by id or name, whatever its state.
    pub async fn get(&self, id_or_name: &str) -> Result<DaytonaSandbox> {
        let dto = self.inner.fetch(id_or_name, "connect").await?;
        DaytonaSandbox::from_dto(self.inner.clone(), &dto).await
    }

    /// Makes sure a snapshot of `image` at `size` exists and is active, and returns its name.
    ///
    /// The name is `sdk-` plus the first 16 hex digits of a SHA-256 over image, size, region and
    /// class, so asking twice (from any process) finds the same snapshot instead of building a
    /// second one. Transitional states are polled (bounded by the start timeout); `error` and
    /// `build_failed` fail with the server's reason; `inactive` is re-activated.
    pub async fn prepare(
        &self,
        image: &str,
        size: SnapshotSize,
        region: Option<&str>,
        sandbox_class: Option<&str>,
    ) -> Result<String> {
        let body = CreateSnapshotBody {
            name: snapshot_name(image, size, region, sandbox_class),
            image_name: Some(image.to_owned()),
            cpu: Some(size.cpu),
            memory: Some(size.memory_gb),
            disk: Some(size.disk_gb),
            region_id: region.map(str::to_owned),
            sandbox_class: sandbox_class.map(str::to_owned),
            build_info: None,
        };
        Ok(self.prepare_snapshot(&body, false).await?.0)
    }

    /// Finds snapshot `body.name` or creates it from `body`, and waits until it is `active`
    /// (`GET /snapshots/{name}`, `POST /snapshots`, PROTOCOL.md §1.4). `inactive` is activated
    /// once. One whose build failed (`error`, `build_failed`) fails with its reason, or with
    /// `rebuild_failed` is deleted (`DELETE /snapshots/{id}`) and built again once (a failed
    /// build is never reused); a rebuild that fails too fails with its reason. Returns the name
    /// and whether an existing snapshot was used (nothing created by this call).
    async fn prepare_snapshot(
        &self,
        body: &CreateSnapshotBody,
        rebuild_failed: bool,
    ) -> Result<(String, bool)> {
        let name = &body.name;
        let path = format!("/snapshots/{}", encode_path_segment(name));
        let deadline = crate::time::instant_after(self.inner.config.start_timeout);
        let mut backoff = crate::time::backoff_until(self.inner.config.poll_interval, deadline);
        let mut created = false;
        let mut deleted = false;
        let mut activated = false;
        loop {
            let found = self
                .inner
                .http
                .request(Method::Get, &path)
                .operation("prepare")
                .send_json::<SnapshotDto>()
                .await;
            match found {
                Ok(snapshot) => match snapshot.state.as_deref().unwrap_or("") {
                    "active" => return Ok((name.clone(), !created && !deleted)),
                    "error" | "build_failed" if rebuild_failed && !created && !deleted => {
                        tracing::info!(
                            snapshot = %name,
                            reason = snapshot.error_reason.as_deref().unwrap_or("none given"),
                            "prepare: the snapshot's build failed; deleting it to build it again"
                        );
                        self.inner
                            .http
                            .request(
                                Method::Delete,
                                &format!("/snapshots/{}", encode_path_segment(&snapshot.id)),
                            )
                            .operation("prepare")
                            .send_empty()
                            .await?;
                        deleted = true;
                        continue;
                    }
                    "error" | "build_failed" => {
                        return Err(Error::new(
                            ErrorKind::Provider,
                            format!(
                                "snapshot {name} failed to build: {}",
                                snapshot
                                    .error_reason
                                    .as_deref()
                                    .unwrap_or("no reason given")
                            ),
                        )
                        .with_provider(PROVIDER)
                        .with_operation("prepare"));
                    }
                    // Activate once; the state may read `inactive` for a while after that.
                    "inactive" if !activated => {
                        activated = true;
                        self.inner
                            .http
                            .request(
                                Method::Post,
                                &format!(
                                    "/snapshots/{}/activate",
                                    encode_path_segment(&snapshot.id)
                                ),
                            )
                            .operation("prepare")
                            .send_empty()
                            .await?;
                    }
                    _ => {}
                },
                Err(e) if e.kind() == ErrorKind::NotFound && !created => {
                    match self
                        .inner
                        .http
                        .request(Method::Post, "/snapshots")
                        .json(body)
                        .operation("prepare")
                        .send_json::<SnapshotDto>()
                        .await
                    {
                        Ok(_) => {}
                        // Another caller made it between our look and our create.
                        Err(e) if e.kind() == ErrorKind::Conflict => {}
                        Err(e) => return Err(e),
                    }
                    created = true;
                    continue;
                }
                Err(e) => return Err(e),
            }
            if !backoff.pause().await {
                return Err(Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "snapshot {name} is not active after {:?}",
                        self.inner.config.start_timeout
                    ),
                )
                .with_provider(PROVIDER)
                .with_operation("prepare"));
            }
        }
    }

    /// The organization's per-sandbox limits and quota use in every region and class
    /// (`GET /organizations/{orgId}/usage`). The organization id is the builder's, or read from
    /// any sandbox of the organization when none was set.
    pub async fn limits(&self) -> Result<Vec<SandboxLimits>> {
        let org = self.organization_id().await?;
        let usage: UsageDto = self
            .inner
            .http
            .request(
                Method::Get,
                &format!("/organizations/{}/usage", encode_path_segment(&org)),
            )
            .operation("limits")
            .send_json()
            .await?;
        Ok(usage
            .region_usage
            .into_iter()
            .map(|r| SandboxLimits {
                region: r.region_id,
                sandbox_class: r.sandbox_class,
                max_cpu: r.max_cpu_per_sandbox,
                max_memory_gb: r.max_memory_per_sandbox,
                max_disk_gb: r.max_disk_per_sandbox,
                cpu_quota: r.total_cpu_quota,
                cpu_used: r.current_cpu_usage,
                memory_quota_gb: r.total_memory_quota,
                memory_used_gb: r.current_memory_usage,
                disk_quota_gb: r.total_disk_quota,
                disk_used_gb: r.current_disk_usage,
            })
            .collect())
    }

    /// A sandbox's metered use between `from` and `to`, period by period, from the analytics API
    /// whose URL `GET /config` publishes (`analyticsApiUrl`). An installation without one
    /// answers `NotSupported`.
    pub async fn sandbox_usage(
        &self,
        sandbox_id: &str,
        from: std::time::SystemTime,
        to: std::time::SystemTime,
    ) -> Result<Vec<UsagePeriod>> {
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Config {
            #[serde(default)]
            analytics_api_url: Option<String>,
        }
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Period {
            #[serde(default)]
            start_at: Option<String>,
            #[serde(default)]
            end_at: Option<String>,
            #[serde(default)]
            cpu: f64,
            #[serde(default)]
            gpu: f64,
            #[serde(default, rename = "ramGB")]
            ram_gb: f64,
            #[serde(default, rename = "diskGB")]
            disk_gb: f64,
            #[serde(default)]
            price: Option<f64>,
        }
        let config: Config = self
            .inner
            .http
            .request(Method::Get, "/config")
            .operation("usage")
            .send_json()
            .await?;
        let Some(analytics) = config.analytics_api_url.filter(|u| !u.is_empty()) else {
            return Err(Error::not_supported(
                PROVIDER,
                "sandbox usage (no analytics API)",
            ));
        };
        // The key goes to this address: only an https one (or http when the API is), with no
        // user info, query or fragment.
        let analytics =
            sandbox_sdk_core::http::checked_answer_url(&analytics, &self.inner.config.api_url)
                .map_err(|e| e.or_context(PROVIDER, "usage", Some(sandbox_id)))?;
        let org = self.organization_id().await?;
        let periods: Vec<Period> = self
            .inner
            .http
            .with_base_url(analytics.trim_end_matches('/'))?
            .request(
                Method::Get,
                &format!(
                    "/organization/{}/sandbox/{}/usage",
                    encode_path_segment(&org),
                    encode_path_segment(sandbox_id)
                ),
            )
            .query("from", sandbox_sdk_core::time::format_rfc3339(from))
            .query("to", sandbox_sdk_core::time::format_rfc3339(to))
            .operation("usage")
            .sandbox_id(sandbox_id)
            .send_json()
            .await?;
        Ok(periods
            .into_iter()
            .map(|p| UsagePeriod {
                start: p.start_at.as_deref().and_then(parse_rfc3339),
                end: p.end_at.as_deref().and_then(parse_rfc3339),
                cpu: p.cpu,
                gpu: p.gpu,
                memory_gb: p.ram_gb,
                disk_gb: p.disk_gb,
                price: p.price,
            })
            .collect())
    }

    async fn organization_id(&self) -> Result<String> {
        if let Some(org) = &self.inner.config.organization_id {
            return Ok(org.clone());
        }
        let list: SandboxList = self
            .inner
            .http
            .request(Method::Get, "/sandbox")
            .query("limit", 1)
            .operation("limits")
            .send_json()
            .await?;
        let items = match list {
            SandboxList::Page { items, .. } | SandboxList::Array(items) => items,
        };
        items
            .into_iter()
            .find_map(|s| s.organization_id)
            .ok_or_else(|| {
                Error::validation(
                    "no organization id: set DAYTONA_ORGANIZATION_ID (there is no sandbox to read it from)",
                )
                .with_provider(PROVIDER)
                .with_operation("limits")
            })
    }

    /// The sandbox a create under `key` made, found by its `name` (`GET /sandbox/{idOrName}`,
    /// PROTOCOL.md §1.0a): `None` for a 404, for a sandbox being destroyed (delete renames it
    /// `DESTROYED_<name>_<ms>` and frees the name), and for a sandbox of that name without the
    /// key's label (someone else's).
    async fn find_created(&self, name: &str, key: &str) -> Result<Option<SandboxDto>> {
        let dto = match self.inner.fetch(name, "create").await {
            Ok(dto) => dto,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let going = matches!(dto.state.as_deref(), Some("destroying" | "destroyed"))
            || dto.desired_state.as_deref() == Some("destroyed")
            || dto
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("DESTROYED_"));
        let ours = dto
            .labels
            .as_ref()
            .and_then(|l| l.get(IDEMPOTENCY_LABEL))
            .map(String::as_str)
            == Some(key);
        Ok((ours && !going).then_some(dto))
    }
}

/// The sandbox name an idempotency key gives a create that names none: `sdk-idem-` and the
/// first 32 hex digits (128 bits) of the key's SHA-256, so any key (any length, any characters)
/// becomes a short name of lowercase letters, digits and `-`, the same from every process.
/// Daytona names are unique per organization (a duplicate is 409, PROTOCOL.md §1.1), which is
/// what makes a retried create find the first one.
pub fn idempotency_name(key: &str) -> String {
    let digest = Sha256::digest(key.as_bytes());
    let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("sdk-idem-{hex}")
}

/// Whether a create failed because the name is taken (409, not a state change in progress).
fn is_name_taken(error: &Error) -> bool {
    error.kind() == ErrorKind::Conflict
        && error.status() == Some(409)
        && !is_state_change_in_progress(error)
}

/// The content-hash name [`DaytonaProvider::prepare`] gives a snapshot.
pub fn snapshot_name(
    image: &str,
    size: SnapshotSize,
    region: Option<&str>,
    sandbox_class: Option<&str>,
) -> String {
    let text = format!(
        "{image}|{}|{}|{}|{}|{}",
        size.cpu,
        size.memory_gb,
        size.disk_gb,
        region.unwrap_or(""),
        sandbox_class.unwrap_or("")
    );
    let digest = Sha256::digest(text.as_bytes());
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("sdk-{hex}")
}

impl Inner {
    pub(crate) fn sandbox_path(id: &str) -> String {
        format!("/sandbox/{}", encode_path_segment(id))
    }

    pub(crate) async fn fetch(&self, id: &str, operation: &str) -> Result<SandboxDto> {
        self.http
            .request(Method::Get, &Self::sandbox_path(id))
            .operation(operation)
            .sandbox_id(id)
            .send_json()
            .await
    }

    /// `DELETE /sandbox/{id}` (a state change in progress waited out), forgets the sandbox's
    /// SSH token and idle sessions, then polls until the sandbox is gone (404 or `destroyed`),
    /// all within `deadline`.
    pub(crate) async fn destroy(&self, id: &str, deadline: Instant) -> Result<()> {
        let response = self
            .lifecycle_call(
                id,
                LifecycleRequest::new("destroy", Method::Delete, ""),
                deadline,
            )
            .await?;
        response.bytes().await?;
        crate::ssh::forget(self, id).await;
        crate::exec::forget_sessions(self, id);
        // Look at once, then back off up to the poll interval, until the 404.
        let mut backoff = crate::time::backoff_until(self.config.poll_interval, deadline);
        loop {
            match self.fetch(id, "destroy").await {
                Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(e),
                Ok(dto) if dto.state.as_deref() == Some("destroyed") => return Ok(()),
                Ok(_) => {}
            }
            if !backoff.pause().await {
                return Err(
                    Error::new(ErrorKind::Timeout, "sandbox is still being destroyed").or_context(
                        PROVIDER,
                        "destroy",
                        Some(id),
                    ),
                );
            }
        }
    }

    /// Polls until the sandbox is `started`. `error`/`build_failed` fail with the reason; a
    /// resting state other than `started` fails as `NotRunning`.
    pub(crate) async fn wait_started(
        &self,
        id: &str,
        first: SandboxDto,
        operation: &str,
    ) -> Result<SandboxDto> {
        let deadline = crate::time::instant_after(self.config.start_timeout);
        self.wait_until(id, first, operation, deadline, |raw| raw == "started")
            .await
    }

    /// Polls from `first` until `done(state)`; fails on `error`/`build_failed`, on any other
    /// resting state once `done` cannot come without another call, and at `deadline`.
    pub(crate) async fn wait_until(
        &self,
        id: &str,
        first: SandboxDto,
        operation: &str,
        deadline: Instant,
        done: impl Fn(&str) -> bool,
    ) -> Result<SandboxDto> {
        let mut dto = first;
        let mut backoff = crate::time::backoff_until(self.config.poll_interval, deadline);
        // `first` is usually the call's own answer, the state as the call began: the first
        // look is at once, before any pause.
        let mut looked = false;
        loop {
            let raw = dto.state.clone().unwrap_or_else(|| "unknown".to_owned());
            if done(&raw) {
                return Ok(dto);
            }
            match phase(&raw) {
                Phase::Failed => {
                    return Err(Error::new(
                        ErrorKind::Provider,
                        format!(
                            "sandbox is in state {raw}: {}",
                            dto.error_reason.as_deref().unwrap_or("no reason given")
                        ),
                    )
                    .with_provider(PROVIDER)
                    .with_operation(operation)
                    .with_sandbox_id(id));
                }
                Phase::Gone => {
                    return Err(Error::new(ErrorKind::NotFound, "sandbox was destroyed")
                        .with_provider(PROVIDER)
                        .with_operation(operation)
                        .with_sandbox_id(id));
                }
                // Resting in another state while the desired state says nothing is pending.
                Phase::Resting if dto.desired_state.as_deref() == Some(raw.as_str()) => {
                    return Err(Error::new(
                        ErrorKind::NotRunning,
                        format!("sandbox is {raw}, not in the state {operation} waits for"),
                    )
                    .with_provider(PROVIDER)
                    .with_operation(operation)
                    .with_sandbox_id(id));
                }
                _ => {}
            }
            if std::mem::replace(&mut looked, true) && !backoff.pause().await {
                return Err(Error::new(
                    ErrorKind::Timeout,
                    format!("sandbox still {raw} when the wait ran out"),
                )
                .with_provider(PROVIDER)
                .with_operation(operation)
                .with_sandbox_id(id));
            }
            dto = self.fetch(id, operation).await?;
        }
    }

    /// Polls until the sandbox rests (any stable, failed or gone state) or `deadline` passes:
    /// a look at once, then backing off up to the poll interval.
    async fn wait_resting(&self, id: &str, operation: &str, deadline: Instant) -> Result<()> {
        let mut backoff = crate::time::backoff_until(self.config.poll_interval, deadline);
        loop {
            match self.fetch(id, operation).await {
                Ok(dto) => {
                    if phase(dto.state.as_deref().unwrap_or("unknown")) != Phase::Transitional {
                        return Ok(());
                    }
                }
                Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(e),
            }
            if !backoff.pause().await {
                return Ok(());
            }
        }
    }

    /// Sends a lifecycle call; a "state change in progress" answer is waited out (polling until
    /// the sandbox rests) and the call repeated, all within `deadline`.
    pub(crate) async fn lifecycle_call(
        &self,
        id: &str,
        call: LifecycleRequest<'_>,
        deadline: Instant,
    ) -> Result<sandbox_sdk_core::http::Response> {
        loop {
            let mut request = self
                .http
                .request(
                    call.method,
                    &format!("{}{}", Self::sandbox_path(id), call.suffix),
                )
                .operation(call.operation)
                .sandbox_id(id);
            for (k, v) in call.query {
                request = request.query(k, v);
            }
            if let Some(body) = call.body {
                request = request.json(body);
            }
            match request.send().await {
                Err(e) if is_state_change_in_progress(&e) => {
                    if Instant::now() >= deadline {
                        return Err(e);
                    }
                    self.wait_resting(id, call.operation, deadline).await?;
                }
                other => return other,
            }
        }
    }
}

/// One lifecycle call for [`Inner::lifecycle_call`].
pub(crate) struct LifecycleRequest<'a> {
    pub operation: &'a str,
    pub method: Method,
    pub suffix: &'a str,
    pub query: &'a [(&'a str, String)],
    pub body: Option<&'a serde_json::Value>,
}

impl<'a> LifecycleRequest<'a> {
    pub fn new(operation: &'a str, method: Method, suffix: &'a str) -> Self {
        LifecycleRequest {
            operation,
            method,
            suffix,
            query: &[],
            body: None,
        }
    }
}

pub(crate) fn info_from_dto(dto: &SandboxDto) -> SandboxInfo {
    let raw = dto.state.clone().unwrap_or_else(|| "unknown".to_owned());
    let mut info = SandboxInfo::new(dto.id.clone(), PROVIDER, crate::state::core_state(&raw));
    info.raw_state = Some(raw);
    info.template = dto.snapshot.clone();
    info.metadata = dto.labels.clone().unwrap_or_default();
    info.created_at = dto.created_at.as_deref().and_then(parse_rfc3339);
    info.expires_at = dto.auto_destroy_at.as_deref().and_then(parse_rfc3339);
    info.region = dto.target.clone();
    info.updated_at = dto.updated_at.as_deref().and_then(parse_rfc3339);
    info.last_activity_at = dto.last_activity_at.as_deref().and_then(parse_rfc3339);
    // cpu, memory and disk are whole cores and GB (PROTOCOL.md §1.2), sent as JSON numbers.
    let whole = |v: Option<f64>| {
        v.filter(|v| v.is_finite() && *v >= 0.0)
            .map(|v| v.round() as u64)
    };
    info.resources = sandbox_sdk_core::Resources {
        cpus: whole(dto.cpu).and_then(|c| u32::try_from(c).ok()),
        memory_mb: whole(dto.memory).map(|gb| gb.saturating_mul(1024)),
        disk_gb: whole(dto.disk),
        gpus: whole(dto.gpu)
            .filter(|g| *g > 0)
            .and_then(|g| u32::try_from(g).ok()),
    };
    info
}

#[async_trait::async_trait]
impl Provider for DaytonaProvider {
    fn name(&self) -> &str {
        PROVIDER
    }

    fn capabilities(&self) -> Capabilities {
        crate::capabilities::capabilities_for(&self.inner.config)
    }

    async fn create(&self, spec: &CreateSpec) -> Result<Box<dyn Sandbox>> {
        for (key, value) in &spec.env {
            sandbox_sdk_core::validate_env_name(key)?;
            if value.contains('\0') {
                return Err(Error::validation(format!("env {key} contains a NUL byte")));
            }
        }
        check_template_without_resources(spec)?;
        let key = spec.idempotency_key.as_deref();
        let sandbox = self
            .create_keyed(&DaytonaCreate::from_spec(spec), key)
            .await?;
        Ok(Box::new(sandbox))
    }

    async fn connect(&self, id: &str) -> Result<Box<dyn Sandbox>> {
        Ok(Box::new(self.get(id).await?))
    }

    /// `DELETE /sandbox/{id}`, then waits (within the builder's state-change timeout) until it
    /// is gone, as [`Sandbox::destroy`] does.
    async fn destroy(&self, id: &str) -> Result<()> {
        let deadline = crate::time::instant_after(self.inner.config.state_change_timeout);
        self.inner.destroy(id, deadline).await
    }

    /// Lists by the [`IDEMPOTENCY_LABEL`] label (`GET /sandbox?labels=…`) and returns the first
    /// sandbox that is not being destroyed. This finds a sandbox made under a caller-given
    /// name too, which the name look-up of create (by [`idempotency_name`]) cannot.
    async fn find_by_idempotency_key(&self, key: &str) -> Result<Option<SandboxInfo>> {
        let filter = ListFilter::new().metadata(IDEMPOTENCY_LABEL, key);
        let mut found = self.list(&filter);
        while let Some(info) = found.try_next().await? {
            let going = matches!(info.raw_state.as_deref(), Some("destroying" | "destroyed"));
            if !going {
                return Ok(Some(info));
            }
        }
        Ok(None)
    }

    /// Daytona's own meter: the usage periods of the analytics API since the sandbox was
    /// created ([`DaytonaProvider::sandbox_usage`]); periods with CPU are running time, the
    /// rest is time held stopped, and the cost is the sum of the periods' prices. An
    /// installation without an analytics API gets an estimate from the listing and the shipped
    /// price table instead, marked `estimated`.
    async fn usage(&self, sandbox: &SandboxInfo, to: std::time::SystemTime) -> Result<Usage> {
        // The analytics API wants a window; a sandbox always has a creation time, so the
        // fallback start (2020, before Daytona sandboxes existed) only covers a listing
        // that lacks one.
        let from = sandbox.created_at.unwrap_or(
            std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_577_836_800),
        );
        match self.sandbox_usage(&sandbox.id, from, to).await {
            Ok(periods) => Ok(metered_usage(sandbox, from, to, &periods)),
            Err(e) if e.kind() == ErrorKind::NotSupported => {
                let prices = sandbox_sdk_core::fleet::PriceTable::builtin();
                let mut usage =
                    sandbox_sdk_core::fleet::estimate(sandbox, to, prices.get(PROVIDER));
                usage.basis = format!("{} (this installation has no analytics API)", usage.basis);
                Ok(usage)
            }
            Err(e) => Err(e),
        }
    }

    /// The snapshot for `spec` under its content-hash name ([`PrepareSpec::name`]): from the
    /// image alone when there are no steps (`imageName`), otherwise built from a Dockerfile of
    /// the image and its steps (`buildInfo.dockerfileContent`), at the shape's size, in the
    /// builder's target region. A ready one is reused, one whose build failed is deleted and
    /// built again (see [`DaytonaProvider::prepare`] for the rest).
    async fn prepare(&self, spec: &PrepareSpec) -> Result<Prepared> {
        let name = spec.name();
        let shape = spec.shape;
        let body = CreateSnapshotBody {
            name: name.clone(),
            image_name: spec.steps.is_empty().then(|| spec.image.clone()),
            cpu: shape.map(|s| s.cpus),
            memory: shape.map(|s| s.memory_gib),
            disk: shape.map(|s| s.disk_gib).filter(|d| *d > 0),
            region_id: self.inner.config.target.clone(),
            sandbox_class: None,
            build_info: (!spec.steps.is_empty()).then(|| BuildInfo {
                dockerfile_content: spec.dockerfile(),
            }),
        };
        let (template, reused) = self.prepare_snapshot(&body, true).await?;
        Ok(Prepared {
            provider: PROVIDER.to_owned(),
            template,
            name,
            reused,
        })
    }

    fn list(&self, filter: &ListFilter) -> SandboxStream<'_> {
        let filter = filter.clone();
        let inner = self.inner.clone();
        let pages = futures::stream::try_unfold(Some(None::<String>), move |cursor| {
            let inner = inner.clone();
            let filter = filter.clone();
            async move {
                let Some(cursor) = cursor else {
                    return Ok::<_, Error>(None);
                };
                let mut request = inner
                    .http
                    .request(Method::Get, "/sandbox")
                    .query("limit", 100)
                    .operation("list");
                if let Some(c) = &cursor {
                    request = request.query("cursor", c);
                }
                if !filter.metadata.is_empty() {
                    let labels = serde_json::to_string(&filter.metadata).unwrap_or_default();
                    request = request.query("labels", labels);
                }
                for state in &filter.states {
                    for raw in raw_states_of(*state) {
                        request = request.query("states", raw);
                    }
                }
                let page: SandboxList = request.send_json().await?;
                let (items, next) = match page {
                    SandboxList::Page { items, next_cursor } => {
                        // A cursor that does not move would loop forever.
                        let next = next_cursor.filter(|n| Some(n) != cursor.as_ref());
                        (items, next.map(Some))
                    }
                    SandboxList::Array(items) => (items, None),
                };
                let infos: Vec<Result<SandboxInfo>> = items
                    .iter()
                    .map(info_from_dto)
                    .filter(|info| filter.matches(info))
                    .map(Ok)
                    .collect();
                Ok(Some((futures::stream::iter(infos), next)))
            }
        });
        pages.try_flatten().boxed()
    }
}

use futures::TryStreamExt;

/// Usage from Daytona's metered periods between `from` and `to`: a period with CPU billed is
/// running time, one without is time held (stopped, disk kept); an open period ends at `to`.
/// The cost is the sum of the periods' prices when every period has one.
pub fn metered_usage(
    sandbox: &SandboxInfo,
    from: std::time::SystemTime,
    to: std::time::SystemTime,
    periods: &[UsagePeriod],
) -> Usage {
    let mut running = std::time::Duration::ZERO;
    let mut held = std::time::Duration::ZERO;
    let mut cost = 0.0;
    let mut priced = 0;
    for p in periods {
        let (Some(start), end) = (p.start, p.end.unwrap_or(to)) else {
            continue;
        };
        let length = end.duration_since(start).unwrap_or_default();
        if p.cpu > 0.0 {
            running += length;
        } else {
            held += length;
        }
        if let Some(price) = p.price.filter(|p| p.is_finite()) {
            cost += price;
            priced += 1;
        }
    }
    let all_priced = priced == periods.len();
    Usage {
        sandbox_id: sandbox.id.clone(),
        provider: PROVIDER.to_owned(),
        from: Some(from),
        to,
        running,
        held,
        cost_usd: all_priced.then_some(cost),
        estimated: false,
        basis: format!(
            "Daytona's meter: {} usage period(s) from the analytics API{}",
            periods.len(),
            if all_priced {
                ""
            } else {
                ", not all of them priced, so no cost"
            }
        ),
    }
}

/// The core spec's template becomes a Daytona snapshot, and Daytona refuses resources with a
/// snapshot (400 "Cannot specify Sandbox resources when using a snapshot", PROTOCOL.md §1.1),
/// so that pair is refused here, in the spec's own field names, before anything is sent.
fn check_template_without_resources(spec: &CreateSpec) -> Result<()> {
    let Some(template) = &spec.template else {
        return Ok(());
    };
    let r = &spec.resources;
    let set: Vec<&str> = [
        ("resources.cpus", r.cpus.is_some()),
        ("resources.memory_mb", r.memory_mb.is_some()),
        ("resources.disk_gb", r.disk_gb.is_some()),
        ("resources.gpus", r.gpus.is_some()),
    ]
    .into_iter()
    .filter_map(|(name, on)| on.then_some(name))
    .collect();
    if set.is_empty() {
        return Ok(());
    }
    Err(Error::validation(format!(
        "template {template:?} cannot be combined with {}: on Daytona a template is a snapshot, \
         which fixes the sandbox's size; drop the resources and use a snapshot of the size \
         wanted (DaytonaProvider::prepare makes one), or create from an image with \
         DaytonaProvider::create_sandbox and DaytonaCreate::image, where resources apply",
        set.join(", ")
    ))
    .with_provider(PROVIDER)
    .with_operation("create"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn snapshot_names_are_stable_and_differ_by_content() {
        let size = SnapshotSize {
            cpu: 2,
            memory_gb: 4,
            disk_gb: 10,
        };
        let a = snapshot_name("ubuntu:24.04", size, Some("us"), None);
        assert_eq!(a, snapshot_name("ubuntu:24.04", size, Some("us"), None));
        assert!(a.starts_with("sdk-") && a.len() == 20);
        assert_ne!(
            a,
            snapshot_name(
                "ubuntu:24.04",
                SnapshotSize { cpu: 4, ..size },
                Some("us"),
                None
            )
        );
        assert_ne!(a, snapshot_name("ubuntu:22.04", size, Some("us"), None));
    }

    #[test]
    fn create_spec_maps_onto_daytona_options() {
        let spec = CreateSpec::new()
            .template("snap")
            .metadata("team", "x")
            .env("A", "1")
            .timeout(Duration::from_secs(61))
            .idempotency_key("job-1")
            .region("eu");
        let create = DaytonaCreate::from_spec(&spec);
        let body = serde_json::to_value(create.body(Some(&"us".to_owned()))).unwrap();
        assert_eq!(
            body,
            serde_json::json!({
                "name": idempotency_name("job-1"),
                "snapshot": "snap",
                "env": {"A": "1"},
                "labels": {"team": "x", IDEMPOTENCY_LABEL: "job-1"},
                "target": "eu",
                "ttlMinutes": 2
            })
        );
        let create = DaytonaCreate {
            image: Some("python:3.12".into()),
            network_allow_list: vec!["10.0.0.0/8".into(), "192.168.0.0/16".into()],
            ..Default::default()
        };
        let body = serde_json::to_value(create.body(Some(&"us".to_owned()))).unwrap();
        assert_eq!(body["buildInfo"]["dockerfileContent"], "FROM python:3.12\n");
        assert_eq!(body["networkAllowList"], "10.0.0.0/8,192.168.0.0/16");
        assert_eq!(body["target"], "us");
    }

    #[test]
    fn idempotency_names_are_stable_short_and_valid() {
        let a = idempotency_name("job-1");
        assert_eq!(a, idempotency_name("job-1"));
        assert_ne!(a, idempotency_name("job-2"));
        assert_eq!(a.len(), "sdk-idem-".len() + 32);
        let odd = idempotency_name(&format!("Ünïcode / spaces {}", "x".repeat(500)));
        assert!(
            odd.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
            "{odd}"
        );
        // A name the caller gave wins over the derived one.
        let spec = CreateSpec::new().name("mine").idempotency_key("job-1");
        assert_eq!(
            DaytonaCreate::from_spec(&spec).name.as_deref(),
            Some("mine")
        );
    }

    #[test]
    fn metered_periods_split_running_from_held_time_and_sum_their_prices() {
        let t = |m: u64| std::time::UNIX_EPOCH + Duration::from_secs(60 * m);
        let info = SandboxInfo::new("sb", PROVIDER, sandbox_sdk_core::SandboxState::Stopped);
        let period = |start: u64, end: Option<u64>, cpu: f64, price: Option<f64>| UsagePeriod {
            start: Some(t(start)),
            end: end.map(t),
            cpu,
            gpu: 0.0,
            memory_gb: cpu,
            disk_gb: 3.0,
            price,
        };
        let periods = [
            period(0, Some(30), 1.0, Some(0.0334)),
            // An open period (the sandbox is still stopped) ends at `to`.
            period(30, None, 0.0, Some(0.0002)),
        ];
        let usage = metered_usage(&info, t(0), t(60), &periods);
        assert_eq!(usage.running, Duration::from_secs(1800));
        assert_eq!(usage.held, Duration::from_secs(1800));
        assert!((usage.cost_usd.unwrap() - 0.0336).abs() < 1e-12);
        assert!(!usage.estimated);
        let unpriced = [period(0, Some(30), 1.0, None)];
        let usage = metered_usage(&info, t(0), t(60), &unpriced);
        assert_eq!(usage.cost_usd, None);
        assert!(usage.basis.contains("no cost"), "{}", usage.basis);
    }

    #[test]
    fn debug_hides_env_values() {
        let mut c = DaytonaCreate::default();
        c.env.insert("TOKEN".into(), "canary-secret".into());
        assert!(!format!("{c:?}").contains("canary-secret"));
    }
}
