//! [`FlyProvider`]: creates, finds and lists machines of one app.

use crate::api::{Api, Destroy};
use crate::capabilities::CAPABILITIES;
use crate::config::{PROVIDER, SANDBOX_LABEL, Settings};
use crate::lifecycle::{self, map_state, to_info};
use crate::sandbox::FlySandbox;
use async_trait::async_trait;
use futures::StreamExt;
use sandbox_sdk_core::{
    Capabilities, CreateSpec, Error, ErrorKind, ListFilter, Provider, Result, Sandbox, SandboxInfo,
    SandboxState, SandboxStream,
};

/// Creates, connects to and lists Fly Machines in one app. Made by [`FlyProvider::builder`].
///
/// Usage is not metered by the Machines API (the client layer estimates it from the listing and
/// the price table), and `prepare` is not offered: on Fly the image reference is the prepared
/// form. Build the image with your own tooling, push it to a registry Fly can pull from, and
/// pass its reference as [`CreateSpec::template`].
#[derive(Debug, Clone)]
pub struct FlyProvider {
    api: Api,
}

impl FlyProvider {
    pub(crate) fn new(settings: Settings) -> Result<FlyProvider> {
        Ok(FlyProvider {
            api: Api::new(settings)?,
        })
    }

    /// The settings this provider runs with (for unit tests of the modules below).
    #[cfg(test)]
    pub(crate) fn settings(&self) -> &Settings {
        &self.api.settings
    }

    /// The app the machines live in.
    pub fn app(&self) -> &str {
        &self.api.settings.app
    }

    /// Creates a machine and waits until it is `started` (chaining `/wait` calls within
    /// [`crate::FlyBuilder::start_timeout`]). With an idempotency key, a machine already made under that
    /// key by this create (its create fingerprint and labels; anyone else's is a `Conflict` and is
    /// left alone) is adopted instead (started first if it was stopped or suspended), and a create whose
    /// answer was lost is settled by listing the key for [`crate::FlyBuilder::create_lookup`]'s window
    /// before the error goes back.
    pub async fn create_machine(&self, spec: &CreateSpec) -> Result<FlySandbox> {
        let machine = lifecycle::create(&self.api, spec).await?;
        let sandbox = FlySandbox::new(self.api.clone(), machine);
        sandbox.ensure_started().await?;
        Ok(sandbox)
    }

    /// Connects to machine `id` (one GET; a stopped machine is not started). A machine Fly
    /// still shows as `destroying` or `destroyed` (it does so briefly after a destroy, then
    /// answers 404: PROTOCOL.md §5) is `NotFound`, as it will be a moment later.
    pub async fn connect_machine(&self, id: &str) -> Result<FlySandbox> {
        let machine = self.api.get(id).await?;
        let state = machine.state.as_deref().unwrap_or_default();
        if map_state(state) == SandboxState::Destroyed {
            return Err(
                Error::new(ErrorKind::NotFound, format!("machine is {state}"))
                    .with_provider(PROVIDER)
                    .with_operation("connect")
                    .with_sandbox_id(id),
            );
        }
        Ok(FlySandbox::new(self.api.clone(), machine))
    }
}

#[async_trait]
impl Provider for FlyProvider {
    fn name(&self) -> &str {
        PROVIDER
    }

    fn capabilities(&self) -> Capabilities {
        CAPABILITIES
    }

    async fn create(&self, spec: &CreateSpec) -> Result<Box<dyn Sandbox>> {
        Ok(Box::new(self.create_machine(spec).await?))
    }

    async fn connect(&self, id: &str) -> Result<Box<dyn Sandbox>> {
        Ok(Box::new(self.connect_machine(id).await?))
    }

    /// One `GET …/machines` with our label, the filter's labels and states (the API returns every
    /// match at once); the filter is applied again here, so it holds whatever the server honours.
    fn list(&self, filter: &ListFilter) -> SandboxStream<'_> {
        let query = lifecycle::list_query(filter);
        let filter = filter.clone();
        let api = self.api.clone();
        futures::stream::once(async move { api.list(&query).await })
            .flat_map(move |result| {
                let items: Vec<Result<SandboxInfo>> = match result {
                    Ok(machines) => machines
                        .iter()
                        .filter(|m| m.metadata().contains_key(SANDBOX_LABEL))
                        .map(to_info)
                        .filter(|info| filter.matches(info))
                        .map(Ok)
                        .collect(),
                    Err(e) => vec![Err(e)],
                };
                futures::stream::iter(items)
            })
            .boxed()
    }

    /// `DELETE …/machines/{id}?force=true`: a running or suspended machine is destroyed where
    /// it is, without being started or leased first. A machine already gone is `NotFound`.
    async fn destroy(&self, id: &str) -> Result<()> {
        self.api.destroy(id, Destroy::Force, None).await
    }

    async fn find_by_idempotency_key(&self, key: &str) -> Result<Option<SandboxInfo>> {
        Ok(lifecycle::find_by_key(&self.api, key)
            .await?
            .as_ref()
            .map(to_info))
    }
}
