//! [`VercelProvider`]: creates, finds and lists the sandboxes of one project, and its snapshots.

use crate::api::Api;
use crate::capabilities::CAPABILITIES;
use crate::config::{PROVIDER, Settings};
use crate::lifecycle::create::{self, VercelCreate};
use crate::lifecycle::{self, Handle};
use crate::sandbox::VercelSandbox;
use crate::wire::Snapshot;
use async_trait::async_trait;
use sandbox_sdk_core::paging::pages;
use sandbox_sdk_core::{
    Capabilities, CreateSpec, ListFilter, Provider, Result, Sandbox, SandboxInfo, SandboxStream,
};

/// The Vercel Sandbox provider of one team and project. Build it with
/// [`VercelProvider::builder`] or [`crate::VercelBuilder::from_env`].
#[derive(Debug, Clone)]
pub struct VercelProvider {
    api: Api,
}

impl VercelProvider {
    pub(crate) fn new(settings: Settings) -> Result<VercelProvider> {
        Ok(VercelProvider {
            api: Api::new(settings)?,
        })
    }

    /// The project sandboxes are made in.
    pub fn project_id(&self) -> &str {
        &self.api.settings.project_id
    }

    /// The team every request is scoped to.
    pub fn team_id(&self) -> &str {
        &self.api.settings.team_id
    }

    /// Creates a sandbox with Vercel's own options ([`VercelCreate`]: runtime, image, snapshot,
    /// ports, persistence, network policy, ...). Sent once; no idempotency key applies.
    pub async fn create_sandbox(&self, options: &VercelCreate) -> Result<VercelSandbox> {
        let envelope = create::create(&self.api, options, None).await?;
        Ok(VercelSandbox::new(Handle::new(self.api.clone(), envelope)))
    }

    /// Connects to the sandbox named `name` without resuming it.
    pub async fn connect_sandbox(&self, name: &str) -> Result<VercelSandbox> {
        Ok(VercelSandbox::new(
            lifecycle::connect(&self.api, name).await?,
        ))
    }

    /// The project's snapshots, newest first, or those of the sandbox `sandbox` (PROTOCOL.md
    /// §10.1), every page.
    pub fn list_snapshots(
        &self,
        sandbox: Option<&str>,
    ) -> futures::stream::BoxStream<'static, Result<Snapshot>> {
        let api = self.api.clone();
        let sandbox = sandbox.map(str::to_owned);
        pages(move |cursor: Option<String>| {
            let (api, sandbox) = (api.clone(), sandbox.clone());
            async move {
                let page = api
                    .list_snapshots(cursor.as_deref(), sandbox.as_deref())
                    .await?;
                Ok((page.snapshots, page.pagination.next))
            }
        })
    }

    /// Deletes snapshot `id` for good. A sandbox can start from a snapshot with a create spec
    /// whose template is its id (`snap_…`).
    pub async fn delete_snapshot(&self, id: &str) -> Result<()> {
        self.api.delete_snapshot(id).await
    }
}

#[async_trait]
impl Provider for VercelProvider {
    fn name(&self) -> &str {
        PROVIDER
    }

    fn capabilities(&self) -> Capabilities {
        CAPABILITIES
    }

    /// Creates a sandbox from a core spec ([`VercelCreate::from_spec`]); with an idempotency
    /// key, at most once (see "Idempotent create" in the crate README). The
    /// answer comes with the session already made; it may still be `pending`.
    async fn create(&self, spec: &CreateSpec) -> Result<Box<dyn Sandbox>> {
        let options = VercelCreate::from_spec(spec);
        let envelope = create::create(&self.api, &options, Some(spec)).await?;
        Ok(Box::new(VercelSandbox::new(Handle::new(
            self.api.clone(),
            envelope,
        ))))
    }

    async fn connect(&self, id: &str) -> Result<Box<dyn Sandbox>> {
        Ok(Box::new(self.connect_sandbox(id).await?))
    }

    fn list(&self, filter: &ListFilter) -> SandboxStream<'_> {
        lifecycle::list(&self.api, filter)
    }

    /// Deletes the sandbox by name (any session is stopped first, PROTOCOL.md §4.6).
    async fn destroy(&self, id: &str) -> Result<()> {
        self.api.delete_sandbox(id).await
    }

    /// The sandbox named after `key` ([`create::idempotency_name`]), in any state, without
    /// resuming it.
    async fn find_by_idempotency_key(&self, key: &str) -> Result<Option<SandboxInfo>> {
        create::find_keyed(&self.api, key).await
    }
}
