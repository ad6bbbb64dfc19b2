//! [`DaytonaProvider`]: the [`Provider`] trait (create, connect, list, destroy, usage, prepare)
//! and Daytona's own extras, each a thin call into [`lifecycle`](crate::lifecycle).

use crate::api::client::Api;
use crate::config::{PROVIDER, deadline_after};
use crate::exec::session::SessionPool;
use crate::lifecycle::create::{DaytonaCreate, check_spec, create};
use crate::lifecycle::list::{find_by_idempotency_key, list};
use crate::lifecycle::snapshots::{SnapshotSize, prepare, prepare_image};
use crate::lifecycle::usage::{SandboxLimits, UsagePeriod, limits, sandbox_usage, usage};
use crate::sandbox::{DaytonaSandbox, destroy};
use sandbox_sdk_core::fleet::{PrepareSpec, Prepared, Usage};
use sandbox_sdk_core::{
    Capabilities, CreateSpec, ListFilter, Provider, Result, Sandbox, SandboxInfo, SandboxStream,
};
use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

/// Daytona: sandboxes on the control-plane API, commands and files through each sandbox's
/// toolbox. Build it with [`DaytonaProvider::builder`] (or
/// [`DaytonaBuilder::from_env`](crate::DaytonaBuilder::from_env)).
/// Cloning is cheap and shares the connection pool.
#[derive(Clone)]
pub struct DaytonaProvider {
    api: Arc<Api>,
    /// Per sandbox, the foreground sessions ready for the next command (shared by every
    /// handle this provider makes).
    pool: Arc<SessionPool>,
}

impl fmt::Debug for DaytonaProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DaytonaProvider")
            .field("config", &self.api.config)
            .finish()
    }
}

impl DaytonaProvider {
    pub(crate) fn from_api(api: Api) -> Self {
        DaytonaProvider {
            api: Arc::new(api),
            pool: Default::default(),
        }
    }

    #[cfg(test)]
    pub(crate) fn api(&self) -> Arc<Api> {
        self.api.clone()
    }

    /// Creates a sandbox with Daytona's own options and waits until it is `started`
    /// (bounded by the builder's start timeout). A sandbox that ends in `error` or
    /// `build_failed` fails with the server's reason.
    pub async fn create_sandbox(&self, options: &DaytonaCreate) -> Result<DaytonaSandbox> {
        let dto = create(&self.api, options, None).await?;
        DaytonaSandbox::open(self.api.clone(), self.pool.clone(), &dto).await
    }

    /// A handle to an existing sandbox by id or name, whatever its state.
    pub async fn get(&self, id_or_name: &str) -> Result<DaytonaSandbox> {
        let dto = self.api.get_sandbox(id_or_name, "connect").await?;
        DaytonaSandbox::open(self.api.clone(), self.pool.clone(), &dto).await
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
        prepare_image(&self.api, image, size, region, sandbox_class).await
    }

    /// The organization's per-sandbox limits and quota use in every region and class
    /// (`GET /organizations/{orgId}/usage`). The organization id is the builder's, or read from
    /// any sandbox of the organization when none was set.
    pub async fn limits(&self) -> Result<Vec<SandboxLimits>> {
        limits(&self.api).await
    }

    /// A sandbox's metered use between `from` and `to`, period by period, from the analytics API
    /// whose URL `GET /config` publishes (`analyticsApiUrl`). An installation without one
    /// answers `NotSupported`.
    pub async fn sandbox_usage(
        &self,
        sandbox_id: &str,
        from: SystemTime,
        to: SystemTime,
    ) -> Result<Vec<UsagePeriod>> {
        sandbox_usage(&self.api, sandbox_id, from, to).await
    }
}

#[async_trait::async_trait]
impl Provider for DaytonaProvider {
    fn name(&self) -> &str {
        PROVIDER
    }

    fn capabilities(&self) -> Capabilities {
        crate::capabilities::capabilities_for(self.api.config.exec_transport)
    }

    /// Creates from the core spec ([`DaytonaCreate::from_spec`]). With an idempotency key the
    /// sandbox name is the dedupe key: a create that may have happened is looked up by name,
    /// never blindly sent again, and a sandbox of that name is adopted only if this create made
    /// it ([`check_adoption`](sandbox_sdk_core::idempotency::check_adoption); anyone else's is a
    /// `Conflict`).
    async fn create(&self, spec: &CreateSpec) -> Result<Box<dyn Sandbox>> {
        check_spec(spec)?;
        let dto = create(&self.api, &DaytonaCreate::from_spec(spec), Some(spec)).await?;
        let sandbox = DaytonaSandbox::open(self.api.clone(), self.pool.clone(), &dto).await?;
        Ok(Box::new(sandbox))
    }

    async fn connect(&self, id: &str) -> Result<Box<dyn Sandbox>> {
        Ok(Box::new(self.get(id).await?))
    }

    /// `DELETE /sandbox/{id}`, then waits (within the builder's state-change timeout) until it
    /// is gone, as [`Sandbox::destroy`] does.
    async fn destroy(&self, id: &str) -> Result<()> {
        let deadline = deadline_after(self.api.config.state_change_timeout);
        destroy(&self.api, &self.pool, id, deadline).await
    }

    /// Lists by the idempotency label (`GET /sandbox?labels=…`) and returns the first sandbox
    /// that is not being destroyed. This finds a sandbox made under a caller-given name too,
    /// which the name look-up of create cannot.
    async fn find_by_idempotency_key(&self, key: &str) -> Result<Option<SandboxInfo>> {
        find_by_idempotency_key(self.api.clone(), key).await
    }

    /// Daytona's own meter: the usage periods of the analytics API since the sandbox was
    /// created ([`DaytonaProvider::sandbox_usage`]); periods with CPU are running time, the
    /// rest is time held stopped, and the cost is the sum of the periods' prices. An
    /// installation without an analytics API gets an estimate from the listing and the shipped
    /// price table instead, marked `estimated`.
    async fn usage(&self, sandbox: &SandboxInfo, to: SystemTime) -> Result<Usage> {
        usage(&self.api, sandbox, to).await
    }

    /// The snapshot for `spec` under its content-hash name ([`PrepareSpec::name`]), built at
    /// the shape's size in the builder's target region; a ready one is reused, one whose build
    /// failed is deleted and built again.
    async fn prepare(&self, spec: &PrepareSpec) -> Result<Prepared> {
        prepare(&self.api, spec).await
    }

    fn list(&self, filter: &ListFilter) -> SandboxStream<'_> {
        list(self.api.clone(), filter)
    }
}
