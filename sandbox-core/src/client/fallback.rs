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
//! ([`crate::idempotency`]) before the fallback moves on, but the provider may still make the
//! sandbox after that (or an earlier attempt of the retry layer may have). So once a later
//! provider has made the sandbox the caller gets, every provider the create fell back from is
//! looked up under the idempotency key in the background ([`FallbackProvider::loser_lookup`]:
//! at once, then backing off, for a bounded window), and a sandbox that appears there is
//! destroyed: the caller ends up with exactly one sandbox. Each such look-up ends with a
//! [`LoserEvent`] (destroyed, already gone, none appeared, or the destroy failed) passed to
//! [`OnLoser`] (the client connects [`Hooks::on_fallback_loser`](super::Hooks::on_fallback_loser))
//! and a `tracing` event. A sandbox with the winner's own id is never touched, nor is one this
//! create did not make ([`made_by`]: someone else's under the same key).
//!
//! Everything else concerns a sandbox that already exists somewhere, so `connect`, `list`,
//! `destroy`, `find_by_idempotency_key` and `usage` go to the primary only; `name()` and
//! `capabilities()` are the primary's. Sandboxes made by a fallback provider are returned as
//! that provider made them (their `provider()` says which).

use crate::capability::Capabilities;
use crate::error::{Attempt, Error, ErrorKind, Result};
use crate::fleet::{PrepareSpec, Prepared, Usage};
use crate::idempotency::{CreateLookup, look_up_within, made_by};
use crate::lifecycle::{CreateSpec, ListFilter, SandboxInfo};
use crate::provider::{Provider, Sandbox, SandboxStream};
use async_trait::async_trait;
use std::sync::Arc;
use std::time::Duration;

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

/// How long the fallback layer looks for a sandbox a provider it fell back from may still make:
/// 2 minutes, starting 1 s apart and doubling up to 15 s.
pub const DEFAULT_LOSER_LOOKUP: CreateLookup = CreateLookup::new(Duration::from_secs(120))
    .intervals(Duration::from_secs(1), Duration::from_secs(15));

/// How the look-up for a sandbox a provider it fell back from may have made ended.
#[non_exhaustive]
#[derive(Debug)]
pub enum LoserOutcome {
    /// It appeared and was destroyed.
    Destroyed {
        /// Its id.
        sandbox_id: String,
    },
    /// It appeared, and was gone by the time it was destroyed.
    Gone {
        /// Its id.
        sandbox_id: String,
    },
    /// None appeared within the look-up window.
    NoneAppeared,
    /// It appeared and could not be destroyed: it is still there.
    DestroyFailed {
        /// Its id.
        sandbox_id: String,
        /// Why.
        error: Error,
    },
}

/// What the fallback layer reports about a provider it fell back from, once the look-up for a
/// sandbox that provider may have made under the key has ended.
#[derive(Debug)]
pub struct LoserEvent<'a> {
    /// The provider that was fallen back from.
    pub provider: &'a str,
    /// The provider that made the sandbox the caller got.
    pub winner: &'a str,
    /// The id of the caller's sandbox.
    pub winner_id: &'a str,
    /// The idempotency key looked up.
    pub key: &'a str,
    /// How it ended.
    pub outcome: &'a LoserOutcome,
}

/// A callback run when the look-up for a fallen-back provider's sandbox ends.
pub type OnLoser = Arc<dyn Fn(&LoserEvent<'_>) + Send + Sync>;

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
    loser_lookup: CreateLookup,
    on_loser: Option<OnLoser>,
}

impl std::fmt::Debug for FallbackProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FallbackProvider")
            .field("primary", &self.primary)
            .field("fallbacks", &self.fallbacks)
            .field("on_fallback", &self.on_fallback.is_some())
            .field("loser_lookup", &self.loser_lookup)
            .field("on_loser", &self.on_loser.is_some())
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
            loser_lookup: DEFAULT_LOSER_LOOKUP,
            on_loser: None,
        }
    }

    /// Runs `callback` each time `create` moves on to the next provider.
    pub fn on_fallback(mut self, callback: OnFallback) -> Self {
        self.on_fallback = Some(callback);
        self
    }

    /// How long and how often a provider fallen back from is looked up under the key for a
    /// sandbox it may still make (default [`DEFAULT_LOSER_LOOKUP`]).
    pub fn loser_lookup(mut self, lookup: CreateLookup) -> Self {
        self.loser_lookup = lookup;
        self
    }

    /// Runs `callback` when such a look-up ends.
    pub fn on_loser(mut self, callback: OnLoser) -> Self {
        self.on_loser = Some(callback);
        self
    }

    /// Looks `loser` up under the key of `spec` in the background and destroys what appears
    /// if a create of `spec` made it (see the module docs).
    fn reap_loser(&self, loser: Arc<dyn Provider>, spec: &CreateSpec, winner: &dyn Sandbox) {
        let settings = self.loser_lookup;
        let on_loser = self.on_loser.clone();
        let spec = spec.clone();
        let key = spec.idempotency_key.clone().unwrap_or_default();
        let (winner, winner_id) = (winner.provider().to_owned(), winner.id().to_owned());
        tokio::spawn(async move {
            let found = look_up_within(&settings, || async {
                let found = loser.find_by_idempotency_key(&key).await?;
                Ok(found.filter(|info| info.id != winner_id && made_by(&spec, &info.metadata)))
            })
            .await;
            let outcome = match found {
                None => LoserOutcome::NoneAppeared,
                Some(info) => match loser.destroy(&info.id).await {
                    Ok(()) => LoserOutcome::Destroyed {
                        sandbox_id: info.id,
                    },
                    Err(e) if e.kind() == ErrorKind::NotFound => LoserOutcome::Gone {
                        sandbox_id: info.id,
                    },
                    Err(error) => LoserOutcome::DestroyFailed {
                        sandbox_id: info.id,
                        error,
                    },
                },
            };
            match &outcome {
                LoserOutcome::Destroyed { sandbox_id } => tracing::info!(
                    provider = loser.name(),
                    sandbox_id = %sandbox_id,
                    winner = %winner,
                    "fallback: destroyed the sandbox a provider fallen back from made under the key"
                ),
                LoserOutcome::DestroyFailed { sandbox_id, error } => tracing::warn!(
                    provider = loser.name(),
                    sandbox_id = %sandbox_id,
                    error = %error,
                    "fallback: could not destroy the sandbox a provider fallen back from made under the key; it is left behind"
                ),
                LoserOutcome::Gone { .. } | LoserOutcome::NoneAppeared => tracing::debug!(
                    provider = loser.name(),
                    outcome = ?outcome,
                    "fallback: no sandbox left behind by the provider fallen back from"
                ),
            }
            if let Some(callback) = on_loser {
                callback(&LoserEvent {
                    provider: loser.name(),
                    winner: &winner,
                    winner_id: &winner_id,
                    key: &key,
                    outcome: &outcome,
                });
            }
        });
    }
}

#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl Provider for FallbackProvider {
    fn wrapped(&self) -> Option<&dyn Provider> {
        None // several providers: no single one is wrapped
    }

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
                Ok(sandbox) => {
                    for loser in &providers[..i] {
                        self.reap_loser(Arc::clone(loser), spec, sandbox.as_ref());
                    }
                    return Ok(sandbox);
                }
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

    async fn destroy(&self, id: &str) -> Result<()> {
        self.primary.destroy(id).await
    }

    async fn find_by_idempotency_key(&self, key: &str) -> Result<Option<SandboxInfo>> {
        self.primary.find_by_idempotency_key(key).await
    }

    async fn usage(&self, sandbox: &SandboxInfo, to: std::time::SystemTime) -> Result<Usage> {
        self.primary.usage(sandbox, to).await
    }

    /// The primary's: a prepared template belongs to the provider that made it.
    async fn prepare(&self, spec: &PrepareSpec) -> Result<Prepared> {
        self.primary.prepare(spec).await
    }
}
