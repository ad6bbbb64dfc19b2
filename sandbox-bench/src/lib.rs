//! Measurement programs that drive every adapter against the provider simulators, not
//! published:
//!
//! - the benchmarks in `benches/sdk/` (`cargo xtask bench`, into BENCHMARKS.md);
//! - the reliability matrix, `src/bin/faults.rs` (`cargo xtask faults`, into RELIABILITY.md);
//! - the cancellation test, `tests/cancellation.rs`.
//!
//! The library holds what they share: [`adapter_for`], each adapter pointed at a simulator.

use sandbox_conformance::simulated::SIM_STREAM_IDLE;
use sandbox_conformance::{REPLAY_CREATE_LOOKUP, REPLAY_REQUEST_TIMEOUT};
use sandbox_sdk_core::{Provider, Result};
use sandbox_sim::Simulator;
use std::sync::Arc;
use std::time::Duration;

/// The simulators [`adapter_for`] has an adapter for.
pub const ADAPTERS: &[&str] = &["e2b", "daytona", "fly", "vercel", "sprites"];

/// The adapter of `sim`'s provider pointed at it, as its `tests/conformance_sim.rs` builds it:
/// the simulator's key, the conformance kit's short request timeout and create look-up, and
/// stream idle bounds of [`SIM_STREAM_IDLE`] (an adapter's longer default would read as a hang).
///
/// A provider without an adapter here is a `ProviderNotFound` error.
pub fn adapter_for(sim: &dyn Simulator) -> Result<Arc<dyn Provider>> {
    let (url, key) = (sim.url(), sim.api_key());
    Ok(match sim.provider() {
        "e2b" => Arc::new(
            sandbox_e2b::E2bBuilder::new()
                .api_key(key)
                .api_url(url)
                .sandbox_url(url)
                .request_timeout(REPLAY_REQUEST_TIMEOUT)
                .create_lookup(REPLAY_CREATE_LOOKUP)
                .stream_idle_timeout(SIM_STREAM_IDLE)
                .transfer_idle_timeout(SIM_STREAM_IDLE)
                .build()?,
        ),
        "daytona" => Arc::new(
            sandbox_daytona::DaytonaProvider::builder()
                .api_key(key)
                .api_url(format!("{url}/api"))
                .poll_interval(Duration::from_millis(20))
                .request_timeout(REPLAY_REQUEST_TIMEOUT)
                .create_lookup(REPLAY_CREATE_LOOKUP)
                .stream_idle_timeout(SIM_STREAM_IDLE)
                // The log socket's silence bound is its ping (every + answer), not the idle timeout.
                .log_ping(SIM_STREAM_IDLE / 2, SIM_STREAM_IDLE / 2)
                .build()?,
        ),
        "fly" => Arc::new(
            sandbox_fly::FlyProvider::builder()
                .token(key)
                .app(sandbox_sim::fly::APP)
                .api_url(url)
                .request_timeout(REPLAY_REQUEST_TIMEOUT)
                .create_lookup(REPLAY_CREATE_LOOKUP)
                .build()?,
        ),
        "vercel" => Arc::new(
            sandbox_vercel::VercelProvider::builder()
                .token(key)
                .team_id(sandbox_sim::vercel::TEAM)
                .project_id(sandbox_sim::vercel::PROJECT)
                .api_url(url)
                .request_timeout(REPLAY_REQUEST_TIMEOUT)
                .create_lookup(REPLAY_CREATE_LOOKUP)
                .stream_idle_timeout(SIM_STREAM_IDLE)
                .build()?,
        ),
        "sprites" => Arc::new(
            sandbox_sprites::SpritesProvider::builder()
                .token(key)
                .api_url(url)
                .public_url(true)
                .request_timeout(REPLAY_REQUEST_TIMEOUT)
                .create_timeout(REPLAY_REQUEST_TIMEOUT)
                .create_lookup(REPLAY_CREATE_LOOKUP)
                .stream_idle_timeout(SIM_STREAM_IDLE)
                .build()?,
        ),
        other => {
            return Err(sandbox_sdk_core::Error::new(
                sandbox_sdk_core::ErrorKind::ProviderNotFound,
                format!(
                    "no adapter for the {other} simulator here (adapters: {})",
                    ADAPTERS.join(", ")
                ),
            ));
        }
    })
}
