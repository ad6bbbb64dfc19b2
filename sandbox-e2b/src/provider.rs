//! [`E2bProvider`]: the core [`Provider`] trait and the control-plane calls not tied to one
//! sandbox handle (volumes, snapshots, metrics of many, templates). Each method hands its work
//! to the lifecycle module.

use crate::api::Api;
use crate::capabilities::CAPABILITIES;
use crate::config::PROVIDER;
use crate::lifecycle::templates::{self, TemplateSpec};
use crate::lifecycle::{self, CreateOptions, ListQuery};
use crate::sandbox::E2bSandbox;
use crate::wire::Volume;
use sandbox_sdk_core::fleet::{PrepareSpec, Prepared};
use sandbox_sdk_core::{
    Capabilities, CreateSpec, ListFilter, Metrics, Provider, Result, Sandbox, SandboxInfo,
    SandboxStream, SnapshotInfo,
};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// The E2B provider: a control-plane client plus envd addressing. Build it with
/// `E2bProvider::builder()` (or `E2bBuilder::from_env()`).
#[derive(Clone)]
pub struct E2bProvider {
    api: Arc<Api>,
}

impl fmt::Debug for E2bProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("E2bProvider")
            .field("api", &self.api.control)
            .field("domain", &self.api.config.domain)
            .field("sandbox_url", &self.api.config.sandbox_url)
            .finish()
    }
}

impl E2bProvider {
    /// The provider over `api` (what the builder makes).
    pub(crate) fn new(api: Api) -> Self {
        E2bProvider { api: Arc::new(api) }
    }

    /// Creates a sandbox with E2B-specific options (`POST /v2/sandboxes`).
    ///
    /// With [`CreateSpec::idempotency_key`] a sandbox already labelled with the key (metadata
    /// `sandbox-sdk-idempotency-key`) is connected to instead if this create made it (its
    /// create fingerprint and labels; someone else's is a `Conflict` and is left alone);
    /// otherwise the create is sent once with E2B's `Idempotency-Key` header (the create
    /// fingerprint, 32 hex digits, so a sandbox someone else made under the key is never
    /// returned by E2B's own idempotency), and a
    /// failure that leaves it unknown whether the sandbox was made (a timeout, a connection
    /// lost after sending, 500/502/504) is settled by looking the label up for the builder's
    /// `create_lookup` window before the error is returned.
    pub async fn create_sandbox(
        &self,
        spec: &CreateSpec,
        options: &CreateOptions,
    ) -> Result<E2bSandbox> {
        let answer = lifecycle::create(&self.api, spec, options).await?;
        Ok(E2bSandbox::new(self.api.clone(), answer, spec.timeout))
    }

    /// Connects to a sandbox, resuming it when paused (`POST /v2/sandboxes/{id}/connect`). With
    /// `timeout`, the sandbox then lives exactly that long from now, shorter or longer than
    /// before. The id the service returns is the one kept.
    pub async fn connect_sandbox(&self, id: &str, timeout: Option<Duration>) -> Result<E2bSandbox> {
        let answer = lifecycle::connect(&self.api, id, timeout, "connect").await?;
        Ok(E2bSandbox::new(self.api.clone(), answer, timeout))
    }

    /// Details of one sandbox (`GET /sandboxes/{id}`) in the common shape.
    pub async fn get_info(&self, id: &str) -> Result<SandboxInfo> {
        lifecycle::info(&self.api, id).await
    }

    /// Kills a sandbox by id: `true` when it was killed, `false` when it was already gone (404).
    pub async fn kill(&self, id: &str) -> Result<bool> {
        lifecycle::kill(&self.api, id).await
    }

    /// Lists sandboxes page by page (`GET /v2/sandboxes`, following `X-Next-Token`) as the
    /// stream is polled.
    pub fn list_sandboxes(&self, query: &ListQuery) -> SandboxStream<'static> {
        lifecycle::list(&self.api, query)
    }

    /// Snapshots, page by page (`GET /snapshots`), optionally of one sandbox.
    pub fn list_snapshots(
        &self,
        sandbox_id: Option<&str>,
    ) -> futures::stream::BoxStream<'static, Result<SnapshotInfo>> {
        lifecycle::list_snapshots(&self.api, sandbox_id)
    }

    /// The latest resource sample of several sandboxes at once (`GET /sandboxes/metrics`).
    pub async fn metrics_many(&self, sandbox_ids: &[&str]) -> Result<BTreeMap<String, Metrics>> {
        lifecycle::metrics_many(&self.api, sandbox_ids).await
    }

    /// Creates a team volume (`POST /volumes`), to mount with [`CreateOptions::volume_mounts`].
    pub async fn create_volume(&self, name: &str) -> Result<Volume> {
        lifecycle::create_volume(&self.api, name).await
    }

    /// Lists the team's volumes (`GET /volumes`).
    pub async fn list_volumes(&self) -> Result<Vec<Volume>> {
        self.api.list_volumes().await
    }

    /// Deletes a team volume (`DELETE /volumes/{volumeID}`).
    pub async fn delete_volume(&self, volume_id: &str) -> Result<()> {
        self.api.delete_volume(volume_id).await
    }

    /// Deletes a snapshot (`DELETE /templates/{snapshotID}`).
    pub async fn delete_snapshot(&self, snapshot_id: &str) -> Result<()> {
        self.api.delete_snapshot(snapshot_id).await
    }

    /// Returns the id of a template built from `spec`, found by its content-hash name
    /// ([`TemplateSpec::template_name`]): reused when its latest build is ready, waited for when
    /// a build is in progress, built again when its latest build failed (a failed build is
    /// never reused), built new when there is none. A build that fails is an error carrying
    /// the service's reason.
    pub async fn prepare_template(&self, spec: &TemplateSpec) -> Result<String> {
        Ok(
            templates::prepare_named(&self.api, &spec.template_name(), spec)
                .await?
                .0,
        )
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
        lifecycle::list_filtered(&self.api, filter)
    }

    /// `DELETE /sandboxes/{id}`: a paused sandbox is killed where it is, not resumed first. A
    /// 404 is `NotFound`.
    async fn destroy(&self, id: &str) -> Result<()> {
        lifecycle::destroy(&self.api, id).await
    }

    async fn find_by_idempotency_key(&self, key: &str) -> Result<Option<SandboxInfo>> {
        lifecycle::find_keyed(&self.api, key).await
    }

    /// The template for `spec` under its content-hash name
    /// ([`PrepareSpec::name`]): see [`E2bProvider::prepare_template`] for reuse and rebuild;
    /// the spec maps onto a template with its image, a `USER root` step when there are steps,
    /// each step as a `RUN`, and the shape's CPUs and memory.
    async fn prepare(&self, spec: &PrepareSpec) -> Result<Prepared> {
        templates::prepare(&self.api, spec).await
    }
}
