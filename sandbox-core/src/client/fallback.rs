//! Fallback across providers for `create`.
//!
//! `create` goes to each provider in order and moves on to the next after any error, but **only
//! when the spec carries an idempotency key**: without one, a failed create may still have made a
//! sandbox (and a bill), so the primary's error is returned as is. When every provider fails the
//! error is [`ErrorKind::AllProvidersFailed`](crate::ErrorKind::AllProvidersFailed) listing each
//! attempt in order.
//!
//! Everything else concerns a sandbox that already exists somewhere, so `connect` and `list` go
//! to the primary only; `name()` and `capabilities()` are the primary's. Sandboxes made by a
//! fallback provider are returned as that provider made them (their `provider()` says which).

use crate::capability::Capabilities;
use crate::error::{Attempt, Error, Result};
use crate::lifecycle::{CreateSpec, ListFilter};
use crate::provider::{Provider, Sandbox, SandboxStream};
use async_trait::async_trait;
use std::sync::Arc;

/// A primary provider and the providers `create` falls back to, in order.
#[derive(Debug, Clone)]
pub struct FallbackProvider {
    primary: Arc<dyn Provider>,
    fallbacks: Vec<Arc<dyn Provider>>,
}

impl FallbackProvider {
    /// `primary` first, then `fallbacks` in order.
    pub fn new(primary: Arc<dyn Provider>, fallbacks: Vec<Arc<dyn Provider>>) -> Self {
        FallbackProvider { primary, fallbacks }
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
        for provider in std::iter::once(&self.primary).chain(&self.fallbacks) {
            match provider.create(spec).await {
                Ok(sandbox) => return Ok(sandbox),
                Err(error) => {
                    tracing::info!(provider = provider.name(), error = %error, "create failed, trying the next provider");
                    attempts.push(Attempt {
                        provider: provider.name().to_owned(),
                        error: error.or_context(provider.name(), "create", None),
                    });
                }
            }
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
