//! Ownership: every create carries the owner's label, and listings are scoped to it.
//!
//! [`OwnerProvider`] adds [`Owner::label`] to every [`CreateSpec`] (a spec naming another owner
//! is refused with `Validation` before anything is sent) and so scopes its idempotency key to
//! the owner ([`Owner::scoped_key`]: this is the one place a key is scoped, so the same key
//! under two owners derives two provider-side keys, names and labels), narrows every `list` to
//! the owner's label with the provider's own filter ([`Owner::scope`]) and drops anything
//! listed without the label (a provider that ignored the filter cannot leak foreign sandboxes
//! into it), and looks `find_by_idempotency_key` up under the scoped key, answering only with
//! the owner's sandboxes. `connect`, `destroy` by
//! id and `usage` name their sandbox and pass through unchanged: ownership is about what the
//! client makes and what it finds on its own, not about ids a caller hands it.

use crate::capability::Capabilities;
use crate::error::Result;
use crate::fleet::{Owner, PrepareSpec, Prepared, Usage};
use crate::lifecycle::{CreateSpec, ListFilter, SandboxInfo};
use crate::provider::{Provider, Sandbox, SandboxStream};
use async_trait::async_trait;
use futures::{StreamExt, TryStreamExt};
use std::sync::Arc;

/// A provider whose creates carry an owner label and whose listings show only that owner's
/// sandboxes (see the module docs).
#[derive(Debug, Clone)]
pub struct OwnerProvider {
    inner: Arc<dyn Provider>,
    owner: Owner,
}

impl OwnerProvider {
    /// Wraps `inner` for `owner`.
    pub fn new(inner: Arc<dyn Provider>, owner: Owner) -> Self {
        OwnerProvider { inner, owner }
    }

    /// The owner.
    pub fn owner(&self) -> &Owner {
        &self.owner
    }
}

#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl Provider for OwnerProvider {
    fn wrapped(&self) -> Option<&dyn Provider> {
        Some(self.inner.as_ref())
    }

    fn name(&self) -> &str {
        self.inner.name()
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    async fn create(&self, spec: &CreateSpec) -> Result<Box<dyn Sandbox>> {
        let labelled = self
            .owner
            .label(spec)
            .map_err(|e| e.or_context(self.inner.name(), "create", None))?;
        self.inner.create(&labelled).await
    }
    async fn connect(&self, id: &str) -> Result<Box<dyn Sandbox>> {
        self.inner.connect(id).await
    }
    fn list(&self, filter: &ListFilter) -> SandboxStream<'_> {
        let owner = self.owner.clone();
        self.inner
            .list(&self.owner.scope(filter))
            .try_filter(move |info| std::future::ready(owner.owns(info)))
            .boxed()
    }
    async fn destroy(&self, id: &str) -> Result<()> {
        self.inner.destroy(id).await
    }
    async fn find_by_idempotency_key(&self, key: &str) -> Result<Option<SandboxInfo>> {
        let found = self
            .inner
            .find_by_idempotency_key(&self.owner.scoped_key(key))
            .await?;
        Ok(found.filter(|info| self.owner.owns(info)))
    }
    async fn usage(&self, sandbox: &SandboxInfo, to: std::time::SystemTime) -> Result<Usage> {
        self.inner.usage(sandbox, to).await
    }
    async fn prepare(&self, spec: &PrepareSpec) -> Result<Prepared> {
        self.inner.prepare(spec).await
    }
}
