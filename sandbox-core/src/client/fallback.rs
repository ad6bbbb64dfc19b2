//! Fallback across providers for `create`.
//!
//! `create` goes to each provider in order and moves on to the next only after an error that
//! says the provider is unavailable ([`is_unavailable`]: transport, timeout, quota, 5xx), and
//! **only when the spec carries an idempotency key**: without one, a failed create may still have
//! made a sandbox (and a bill), so the primary's error is returned as is. An error that another
//! provider cannot fix (unauthorized, invalid input, not supported, not found, conflict) is
//! returned at once. Every move to the next provider is reported through [`OnFallback`] (the
//! client connects [`Hooks::on_fallback`](super::Hooks::on_fallback)) and a `tracing` warning.
//! When every provider fails the error is
//! [`ErrorKind::AllProvidersFailed`](crate::ErrorKind::AllProvidersFailed) listing each attempt
//! in order.
//!
//! A create that timed out on one provider was looked up there for its window
//! ([`crate::idempotency`]) before the fallback moves on; a sandbox it made later than that is
//! left behind on that provider (its id is unknown to us).
//!
//! Everything else concerns a sandbox that already exists somewhere, so `connect` and `list` go
//! to the primary only; `name()` and `capabilities()` are the primary's. Sandboxes made by a
//! fallback provider are returned as that provider made them (their `provider()` says which).

use crate::capability::Capabilities;
use crate::error::{Attempt, Error, ErrorKind, Result};
use crate::lifecycle::{CreateSpec, ListFilter};
use crate::provider::{Provider, Sandbox, SandboxStream};
use async_trait::async_trait;
use std::sync::Arc;

/// What the fallback layer reports when it moves on to the next provider.
#[derive(Debug)]
pub struct FallbackEvent<'a> {
    /// The provider whose create failed.
    pub from: &'a str,
    /// The provider tried next.
    pub to: &'a str,
    /// Why `from` failed.
    pub error: &'a Error,
}

/// A callback run each time `create` falls back.
pub type OnFallback = Arc<dyn Fn(&FallbackEvent<'_>) + Send + Sync>;

/// Whether `error` says its provider is unavailable, so another provider may succeed: a transport
/// failure, a timeout, a rate limit or quota, or a 5xx answer.
pub fn is_unavailable(error: &Error) -> bool {
    match error.kind() {
        ErrorKind::Transport | ErrorKind::Timeout | ErrorKind::QuotaExceeded => true,
        ErrorKind::Provider => error.status().is_none_or(|s| s >= 500),
        _ => false,
    }
}

/// A primary provider and the providers `create` falls back to, in order.
#[derive(Clone)]
pub struct FallbackProvider {
    primary: Arc<dyn Provider>,
    fallbacks: Vec<Arc<dyn Provider>>,
    on_fallback: Option<OnFallback>,
}

impl std::fmt::Debug for FallbackProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FallbackProvider")
            .field("primary", &self.primary)
            .field("fallbacks", &self.fallbacks)
            .field("on_fallback", &self.on_fallback.is_some())
            .finish()
    }
}

impl FallbackProvider {
    /// `primary` first, then `fallbacks` in order.
    pub fn new(primary: Arc<dyn Provider>, fallbacks: Vec<Arc<dyn Provider>>) -> Self {
        FallbackProvider {
            primary,
            fallbacks,
            on_fallback: None,
        }
    }

    /// Runs `callback` each time `create` moves on to the next provider.
    pub fn on_fallback(mut self, callback: OnFallback) -> Self {
        self.on_fallback = Some(callback);
        self
    }
}

#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl Provider for FallbackProvider {
    fn name(&self) -> &str {
        self.primary.name()
    }

    fn capabilities(&self) -> Capabilities {
        self.primary.capabilities()
    }

    async fn create(&self, spec: &CreateSpec) -> Result<Box<dyn Sandbox>> {
        if spec.idempotency_key.is_none() || self.fallbacks.is_empty() {
            return self.primary.create(spec).await;
        }
        let mut attempts = Vec::new();
        let providers: Vec<&Arc<dyn Provider>> = std::iter::once(&self.primary)
            .chain(&self.fallbacks)
            .collect();
        for (i, provider) in providers.iter().enumerate() {
            let error = match provider.create(spec).await {
                Ok(sandbox) => return Ok(sandbox),
                Err(error) => error.or_context(provider.name(), "create", None),
            };
            if !is_unavailable(&error) {
                return Err(error);
            }
            if let Some(next) = providers.get(i + 1) {
                tracing::warn!(
                    from = provider.name(),
                    to = next.name(),
                    error = %error,
                    "create failed: falling back to the next provider"
                );
                if let Some(callback) = &self.on_fallback {
                    callback(&FallbackEvent {
                        from: provider.name(),
                        to: next.name(),
                        error: &error,
                    });
                }
            }
            attempts.push(Attempt {
                provider: provider.name().to_owned(),
                error,
            });
        }
        Err(Error::all_providers_failed(attempts)
            .with_operation("create")
            .with_retryable(false))
    }

    async fn connect(&self, id: &str) -> Result<Box<dyn Sandbox>> {
        self.primary.connect(id).await
    }

    fn list(&self, filter: &ListFilter) -> SandboxStream<'_> {
        self.primary.list(filter)
    }
}
