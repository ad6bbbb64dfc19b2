//! The client layer: wrappers around any provider, each doing one thing (retry, fallback, hooks,
//! tracing, capability gating, emulation), and [`Client`], which composes them.
//!
//! Every wrapper is itself a [`Provider`] around an `Arc<dyn Provider>` (and, where it affects
//! sandbox calls, a [`Sandbox`] around a `Box<dyn Sandbox>`), so they can also be stacked by hand.
//!
//! [`Client::builder`] composes, from the outside in:
//!
//! ```text
//! Trace( Hooks( Owner( Fallback[ Gate(Retry(Emulate(primary))), Gate(Retry(Emulate(fallback))), ... ] ) ) )
//! ```
//!
//! - **Emulate** is innermost, so the capabilities everything above sees include what it
//!   emulates, and one emulated operation (several execs) is retried as a whole.
//! - **Retry** sits on each provider, under gating (a refused call is never retried) and under
//!   fallback (a provider is retried before the next one is tried). Its final errors are marked
//!   non-retryable, so nothing above retries again.
//! - **Gate** refuses unsupported operations before any of that runs.
//! - **Owner** (only with [`ClientBuilder::owner`]) labels every create before fallback sees it,
//!   so whichever provider makes the sandbox, it carries the owner's label; and scopes `list`
//!   to the owner.
//! - **Fallback** only exists with more than one provider; **Hooks** only when hooks are set.
//!   Hooks see each error once, as the caller does; their `on_retry` is wired into every retry
//!   layer. **Trace** is outermost, so its spans cover retries (which record `attempt`).
//!
//! ```no_run
//! # async fn demo(primary: std::sync::Arc<dyn sandbox_sdk_core::Provider>) -> sandbox_sdk_core::Result<()> {
//! use sandbox_sdk_core::client::{Client, RetryPolicy};
//! use sandbox_sdk_core::{CreateSpec, Provider};
//!
//! let client = Client::builder(primary).retry(RetryPolicy::default()).build();
//! let sandbox = client.create(&CreateSpec::new().idempotency_key("job-42")).await?;
//! # Ok(()) }
//! ```

mod fallback;
mod gate;
mod hooks;
mod owner;
mod retry;
mod trace;

pub use fallback::{
    DEFAULT_LOSER_LOOKUP, FallbackEvent, FallbackProvider, LoserEvent, LoserOutcome, OnFallback,
    OnLoser, is_unavailable,
};
pub use gate::{GateProvider, GateSandbox, check_exec};
pub use hooks::{Hooks, HooksProvider, HooksSandbox};
pub use owner::OwnerProvider;
pub use retry::{OnRetry, RetryEvent, RetryPolicy, RetryProvider, RetrySandbox};
pub use trace::{TraceProvider, TraceSandbox};

use crate::capability::Capabilities;
use crate::emulate::EmulateProvider;
use crate::error::Result;
use crate::fleet::{Owner, PrepareSpec, Prepared, PriceTable, Usage};
use crate::idempotency::CreateLookup;
use crate::lifecycle::{CreateSpec, ListFilter, SandboxInfo};
use crate::provider::{Provider, Sandbox, SandboxStream};
use async_trait::async_trait;
use std::fmt;
use std::sync::Arc;

/// A provider with the whole client layer around it; see the [module docs](self) for the order.
#[derive(Debug, Clone)]
pub struct Client {
    inner: Arc<dyn Provider>,
}

impl Client {
    /// Starts a client around `primary`.
    pub fn builder(primary: Arc<dyn Provider>) -> ClientBuilder {
        ClientBuilder {
            primary,
            fallbacks: Vec::new(),
            retry: RetryPolicy::default(),
            hooks: None,
            emulate: true,
            owner: None,
            prices: None,
            loser_lookup: DEFAULT_LOSER_LOOKUP,
        }
    }

    /// A client around `primary` with the default settings.
    pub fn new(primary: Arc<dyn Provider>) -> Self {
        Client::builder(primary).build()
    }
}

/// Configures a [`Client`].
pub struct ClientBuilder {
    primary: Arc<dyn Provider>,
    fallbacks: Vec<Arc<dyn Provider>>,
    retry: RetryPolicy,
    hooks: Option<Arc<dyn Hooks>>,
    emulate: bool,
    owner: Option<Owner>,
    prices: Option<Arc<PriceTable>>,
    loser_lookup: CreateLookup,
}

impl fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("primary", &self.primary.name())
            .field(
                "fallbacks",
                &self.fallbacks.iter().map(|p| p.name()).collect::<Vec<_>>(),
            )
            .field("retry", &self.retry)
            .field("hooks", &self.hooks.is_some())
            .field("emulate", &self.emulate)
            .field("owner", &self.owner)
            .field("prices", &self.prices.is_some())
            .field("loser_lookup", &self.loser_lookup)
            .finish()
    }
}

impl ClientBuilder {
    /// The retry policy of every provider (default: [`RetryPolicy::default`]; use
    /// [`RetryPolicy::never`] to switch retries off).
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// Adds a provider that `create` falls back to (in the order added), for specs with an
    /// idempotency key.
    pub fn fallback(mut self, provider: Arc<dyn Provider>) -> Self {
        self.fallbacks.push(provider);
        self
    }

    /// Sets the hooks.
    pub fn hooks(mut self, hooks: Arc<dyn Hooks>) -> Self {
        self.hooks = Some(hooks);
        self
    }

    /// Whether to emulate what a provider lacks (default on).
    pub fn emulate(mut self, emulate: bool) -> Self {
        self.emulate = emulate;
        self
    }

    /// Labels every sandbox this client creates with `owner` and scopes its listings to them
    /// ([`OwnerProvider`]).
    pub fn owner(mut self, owner: Owner) -> Self {
        self.owner = Some(owner);
        self
    }

    /// Prices usage estimates with `prices` (default: [`PriceTable::builtin`]).
    pub fn prices(mut self, prices: PriceTable) -> Self {
        self.prices = Some(Arc::new(prices));
        self
    }

    /// How long a provider `create` fell back from is looked up under the idempotency key for a
    /// sandbox it may still make, which is then destroyed (default [`DEFAULT_LOSER_LOOKUP`]).
    pub fn loser_lookup(mut self, lookup: CreateLookup) -> Self {
        self.loser_lookup = lookup;
        self
    }

    /// Builds the client.
    pub fn build(self) -> Client {
        let on_retry: Option<OnRetry> = self.hooks.clone().map(|hooks| {
            let callback: OnRetry = Arc::new(move |event: &RetryEvent<'_>| hooks.on_retry(event));
            callback
        });
        let layer = |provider: Arc<dyn Provider>| -> Arc<dyn Provider> {
            let provider: Arc<dyn Provider> = if self.emulate {
                let mut emulate = EmulateProvider::new(provider);
                if let Some(prices) = &self.prices {
                    emulate = emulate.with_prices(prices.clone());
                }
                Arc::new(emulate)
            } else {
                provider
            };
            let mut retry = RetryProvider::new(provider, self.retry);
            if let Some(callback) = &on_retry {
                retry = retry.on_retry(callback.clone());
            }
            Arc::new(GateProvider::new(Arc::new(retry)))
        };
        let primary = layer(self.primary.clone());
        let mut provider: Arc<dyn Provider> = if self.fallbacks.is_empty() {
            primary
        } else {
            let fallbacks = self.fallbacks.iter().cloned().map(layer).collect();
            let mut fallback =
                FallbackProvider::new(primary, fallbacks).loser_lookup(self.loser_lookup);
            if let Some(hooks) = self.hooks.clone() {
                let on_loser = hooks.clone();
                fallback = fallback
                    .on_fallback(Arc::new(move |event: &FallbackEvent<'_>| {
                        hooks.on_fallback(event)
                    }))
                    .on_loser(Arc::new(move |event: &LoserEvent<'_>| {
                        on_loser.on_fallback_loser(event)
                    }));
            }
            Arc::new(fallback)
        };
        if let Some(owner) = self.owner {
            provider = Arc::new(OwnerProvider::new(provider, owner));
        }
        if let Some(hooks) = self.hooks {
            provider = Arc::new(HooksProvider::new(provider, hooks));
        }
        Client {
            inner: Arc::new(TraceProvider::new(provider)),
        }
    }
}

#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl Provider for Client {
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
        self.inner.create(spec).await
    }
    async fn connect(&self, id: &str) -> Result<Box<dyn Sandbox>> {
        self.inner.connect(id).await
    }
    fn list(&self, filter: &ListFilter) -> SandboxStream<'_> {
        self.inner.list(filter)
    }
    async fn destroy(&self, id: &str) -> Result<()> {
        self.inner.destroy(id).await
    }
    async fn find_by_idempotency_key(&self, key: &str) -> Result<Option<SandboxInfo>> {
        self.inner.find_by_idempotency_key(key).await
    }
    async fn usage(&self, sandbox: &SandboxInfo, to: std::time::SystemTime) -> Result<Usage> {
        self.inner.usage(sandbox, to).await
    }
    async fn prepare(&self, spec: &PrepareSpec) -> Result<Prepared> {
        self.inner.prepare(spec).await
    }
}
