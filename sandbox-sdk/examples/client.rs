//! The client layer: retries with backoff, a fallback provider, and hooks that see every call.
//!
//! Runs on two `local` providers (no account needed): `cargo run -p sandbox-sdk --example client`.
//! With real providers, build `primary` and `backup` from `sandbox_sdk::provider_from_env("e2b")`
//! and `("daytona")` instead.

use sandbox_sdk::client::{Client, FallbackEvent, Hooks, RetryEvent, RetryPolicy};
use sandbox_sdk::local::LocalProvider;
use sandbox_sdk::prelude::*;
use std::sync::Arc;

/// Prints what the client layer does: creates, retries, fallbacks and errors.
struct Log;

impl Hooks for Log {
    fn after_create(&self, provider: &str, sandbox_id: &str) {
        println!("[{provider}] created {sandbox_id}");
    }
    fn on_retry(&self, event: &RetryEvent<'_>) {
        println!(
            "[{}] {} attempt {} in {:?} after: {}",
            event.provider, event.operation, event.attempt, event.delay, event.error
        );
    }
    fn on_fallback(&self, event: &FallbackEvent<'_>) {
        println!(
            "create fell back from {} to {}: {}",
            event.from, event.to, event.error
        );
    }
    fn on_error(&self, error: &Error) {
        println!("error: {error}");
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let primary: Arc<dyn Provider> = Arc::new(LocalProvider::new());
    let backup: Arc<dyn Provider> = Arc::new(LocalProvider::new());
    let client = Client::builder(primary)
        // Transient failures (429, 503, a refused connection) are retried with jittered
        // backoff; a create is retried only when it carries an idempotency key.
        .retry(RetryPolicy::default().max_retries(3))
        // When the primary is unavailable, creates go to the backup.
        .fallback(backup)
        .hooks(Arc::new(Log))
        .build();

    let sandbox = DestroyOnDrop::new(
        client
            .create(&CreateSpec::new().idempotency_key("example-job-42"))
            .await?,
    );
    let out = sandbox
        .run(&Command::shell("echo retried, gated and logged"))
        .await?;
    print!("{}", out.stdout_lossy());
    sandbox.destroy().await
}
