//! Provider simulators: stateful loopback servers that speak a provider's protocol, with real
//! processes behind them and time and faults as inputs (feature `sim`).
//!
//! Replayed cassettes prove the shape of requests; a simulator proves behaviour in time: a
//! create answered late, a stream that goes silent, a burst of concurrent creates. Each
//! simulator holds its sandboxes' state (labels, states and their transitions, files, running
//! processes), runs every command as a real local process in a private temporary directory
//! (through the embedded `local` provider), and logs every request it sees.
//!
//! The shared parts live here:
//! - [`SimServer`]: the HTTP/1.1 server, a [`Handler`] per provider;
//! - [`FaultPlan`]: faults and latency per operation, from code or from a SPEC string
//!   (`create=delay:3000#1;exec=429:1`, see [`faults`]);
//! - [`RequestLog`]: what the simulator saw, for assertions and for comparing clients;
//! - [`Backing`]: the local sandboxes the simulated ones run on.
//!
//! ## Operation names
//!
//! Fault rules and the log name requests by operation. Every simulator uses these names for
//! the requests they fit, so one fault plan means the same on every provider, and adds its own
//! for the rest (its docs list them): `create`, `connect`, `get`, `list`, `destroy`, `start`,
//! `stop`, `pause`, `resume`, `set_timeout`, `exec` (starting a command; its answer may be the
//! output stream), `exec.output` (following or polling a started command's output), `stdin`,
//! `kill`, `files.read`, `files.write`, `files.list`, `files.stat`, `files.mkdir`,
//! `files.move`, `files.remove`, `files.watch`, `preview`, `other`.
//!
//! The simulators are written from each provider's protocol notes and the official SDKs'
//! behaviour, never from this workspace's adapters, so they can disagree with an adapter.

pub mod daytona;
pub mod e2b;
pub mod faults;
pub mod fly;
pub mod live;
mod server;

pub use faults::{Fault, FaultPlan, FaultRule};
pub use server::{
    Handler, LogEntry, MAX_REQUEST_BODY, RequestLog, SimBody, SimRequest, SimResponse, SimServer,
    decode,
};

use sandbox_sdk_core::local::{LocalProvider, LocalSandbox};
use sandbox_sdk_core::{CreateSpec, Result};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The real sandboxes behind a simulator: `local` sandboxes under a private temporary
/// directory, which is removed when the backing is dropped (a simulator destroys a sandbox
/// through the `local` provider, which stops its processes).
pub struct Backing {
    provider: LocalProvider,
    root: PathBuf,
}

impl Backing {
    /// A backing under a fresh directory in the system's temporary directory.
    pub fn new() -> std::io::Result<Backing> {
        Backing::new_in(&std::env::temp_dir())
    }

    /// A backing under a fresh directory in `parent` (for a simulator that mounts its own
    /// `/tmp` over the system's and needs its sandboxes elsewhere).
    pub fn new_in(parent: &Path) -> std::io::Result<Backing> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let root = parent.join(format!(
            "sandbox-sim-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&root)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700))?;
        }
        Ok(Backing {
            provider: LocalProvider::with_root(&root),
            root,
        })
    }

    /// Creates a real sandbox (its own directory; `spec.env` is its environment).
    pub async fn create(&self, spec: &CreateSpec) -> Result<LocalSandbox> {
        self.provider.create_local(spec).await
    }

    /// The `local` provider the sandboxes are created with.
    pub fn provider(&self) -> &LocalProvider {
        &self.provider
    }

    /// The directory every sandbox lives under.
    pub fn root(&self) -> &Path {
        &self.root
    }
}

impl Drop for Backing {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// A running simulator, as `cargo xtask sim`, `cargo xtask sim-check` and tests see it.
pub trait Simulator: Send + Sync {
    /// The provider it speaks (`e2b`, `daytona`, `fly`).
    fn provider(&self) -> &'static str;

    /// The base URL of its API.
    fn url(&self) -> &str;

    /// Its server: the fault plan and the request log.
    fn server(&self) -> &SimServer;

    /// How many sandboxes exist (created and not yet destroyed), in any state.
    fn sandboxes(&self) -> usize;

    /// The API key (or token) it accepts.
    fn api_key(&self) -> &str;

    /// Turns the provider's documented rate limits on (the default) or off (for load tests).
    fn set_rate_limits(&self, enabled: bool);

    /// Environment variables that point the provider's official SDK, and this workspace's
    /// adapter built `from_env`, at the simulator, with the key it accepts.
    fn env(&self) -> Vec<(&'static str, String)>;
}

/// The providers [`start`] can simulate.
pub const PROVIDERS: &[&str] = &["daytona", "e2b", "fly"];

/// Starts the simulator of `provider` on `127.0.0.1:port` (0 for a free port) with `faults`.
pub async fn start(
    provider: &str,
    port: u16,
    faults: FaultPlan,
) -> std::result::Result<Box<dyn Simulator>, String> {
    match provider {
        "daytona" => daytona::DaytonaSim::builder()
            .port(port)
            .faults(faults)
            .start()
            .await
            .map(|sim| Box::new(sim) as Box<dyn Simulator>)
            .map_err(|e| format!("cannot start the daytona simulator: {e}")),
        "e2b" => e2b::E2bSim::builder()
            .port(port)
            .faults(faults)
            .start()
            .await
            .map(|sim| Box::new(sim) as Box<dyn Simulator>)
            .map_err(|e| format!("cannot start the e2b simulator: {e}")),
        "fly" => fly::FlySim::builder()
            .port(port)
            .faults(faults)
            .start()
            .await
            .map(|sim| Box::new(sim) as Box<dyn Simulator>)
            .map_err(|e| format!("cannot start the fly simulator: {e}")),
        other => Err(format!(
            "no simulator for {other:?}; simulators exist for: {}",
            PROVIDERS.join(", ")
        )),
    }
}
