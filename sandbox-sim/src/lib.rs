//! Provider simulators: stateful loopback servers that speak a provider's protocol, with real
//! processes behind them and time and faults as inputs (feature `sim`).
//!
//! Replayed cassettes prove the shape of requests; a simulator proves behaviour in time: a
//! create answered late, a stream that goes silent, a burst of concurrent creates. Each
//! simulator holds its sandboxes' state (labels, states and their transitions, files, running
//! processes), runs every command as a real local process in a private temporary directory
//! (through the embedded `local` provider), and logs every request it sees.
//!
//! The simulators: [`e2b`] (E2B), [`daytona`] (Daytona), [`fly`] (Fly Machines),
//! [`sprites`] (Fly Sprites) and [`vercel`] (Vercel Sandbox), each started by name through
//! [`start`].
//!
//! The shared parts live here:
//! - [`SimServer`]: the HTTP/1.1 server, a [`Handler`] per provider;
//! - [`FaultPlan`]: faults and latency per operation, from code or from a SPEC string
//!   (`create=delay:3000#1;exec=429:1`, see [`faults`]);
//! - [`RequestLog`]: what the simulator saw, for assertions and for comparing clients;
//! - [`Backing`]: the local sandboxes the simulated ones run on.
//!
//! ## Who may use a simulator
//!
//! A simulator runs real commands on this machine for whoever holds its key, so it serves
//! only this machine's own programs:
//! - every start makes a fresh random key (or token) from the operating system's random
//!   source, handed out by [`Simulator::api_key`] and [`Simulator::env`] (which `cargo xtask
//!   sim` prints), unless a builder is given one;
//! - it listens on `127.0.0.1` only, and [`SimServer`] refuses, before any handler runs, a
//!   request whose `Host` is not a loopback name (`localhost` and names under `.localhost`,
//!   `127.0.0.0/8`, `[::1]`; 421) or that carries an `Origin` that is not one (403): a web page
//!   that rebinds its own name to 127.0.0.1 can reach the port, but not with a loopback name;
//! - its sandboxes live in a private (0700) temporary directory with an unpredictable name;
//! - a request's credentials are checked from its head ([`Handler::admit`]) before any body
//!   byte is read, and each route caps its body: [`MAX_JSON_BODY`] for JSON routes,
//!   [`MAX_REQUEST_BODY`] only for uploads (file bytes, archives, a command's stdin).
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
mod disk;
pub mod e2b;
pub mod faults;
pub mod fly;
mod server;
pub mod sprites;
mod upgrade;
pub mod vercel;

pub use faults::{Fault, FaultPlan, FaultRule};
pub use server::{
    Handler, LogEntry, MAX_JSON_BODY, MAX_REQUEST_BODY, RequestLog, SimBody, SimRequest,
    SimResponse, SimServer, decode,
};
pub use upgrade::{SimConnection, SimUpgrade};

use sandbox_sdk_core::local::{LocalProvider, LocalSandbox};
use sandbox_sdk_core::{CreateSpec, Result};
use std::path::Path;

/// `n` characters drawn uniformly from `alphabet` (ASCII, at most 256 characters) with the
/// operating system's random source: every key, token and id a simulator makes comes from
/// here.
///
/// # Panics
///
/// When the operating system has no random source to give (a simulator does not fall back to
/// guessable secrets).
/// The most output one simulated code cell sends.
const SIM_CODE_OUTPUT: usize = 64 << 20;

pub(crate) fn random_from(alphabet: &[u8], n: usize) -> String {
    assert!(
        (1..=256).contains(&alphabet.len()),
        "an alphabet of 1 to 256 characters"
    );
    // Bytes at or above the largest multiple of the alphabet's length are drawn again, so
    // every character is as likely as any other.
    let limit = 256 - 256 % alphabet.len();
    let mut out = String::with_capacity(n);
    let mut bytes = [0u8; 64];
    while out.len() < n {
        getrandom::fill(&mut bytes).expect("the operating system's random source failed");
        for &b in bytes.iter().filter(|&&b| usize::from(b) < limit) {
            if out.len() == n {
                break;
            }
            out.push(char::from(alphabet[usize::from(b) % alphabet.len()]));
        }
    }
    out
}

/// 64 random bits from the operating system's random source (see [`random_from`]).
pub(crate) fn random_u64() -> u64 {
    getrandom::u64().expect("the operating system's random source failed")
}

/// `n` random lowercase hex digits ([`random_from`]).
pub(crate) fn random_hex(n: usize) -> String {
    random_from(b"0123456789abcdef", n)
}

/// A fresh API key or token for one simulator start: `prefix` (the provider's key format)
/// then `hex_digits` random hex digits.
pub(crate) fn new_key(prefix: &str, hex_digits: usize) -> String {
    format!("{prefix}{}", random_hex(hex_digits))
}

/// Copies directory `from` into `to` (created), with files, directories, symbolic links and
/// modes.
pub(crate) fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let target = to.join(entry.file_name());
        if kind.is_symlink() {
            let link = std::fs::read_link(entry.path())?;
            let _ = std::fs::remove_file(&target);
            std::os::unix::fs::symlink(link, &target)?;
        } else if kind.is_dir() {
            copy_tree(&entry.path(), &target)?;
            std::fs::set_permissions(&target, entry.metadata()?.permissions())?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// The real sandboxes behind a simulator: `local` sandboxes under a private temporary
/// directory, which is removed when the backing is dropped (a simulator destroys a sandbox
/// through the `local` provider, which stops its processes).
pub struct Backing {
    provider: LocalProvider,
    root: tempfile::TempDir,
}

impl Backing {
    /// A backing under a fresh directory in the system's temporary directory.
    pub fn new() -> std::io::Result<Backing> {
        Backing::new_in(&std::env::temp_dir())
    }

    /// A backing under a fresh directory in `parent` (for a simulator that mounts its own
    /// `/tmp` over the system's and needs its sandboxes elsewhere): `sandbox-sim-` and a
    /// random suffix, created new (never a directory that was there already) with mode 0700.
    pub fn new_in(parent: &Path) -> std::io::Result<Backing> {
        let mut builder = tempfile::Builder::new();
        builder.prefix("sandbox-sim-").rand_bytes(16);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            builder.permissions(std::fs::Permissions::from_mode(0o700));
        }
        let root = builder.tempdir_in(parent)?;
        Ok(Backing {
            // The services do not cap a cell's output (the SDKs' adapters do), so neither do
            // their simulated kernels, short of a bound that keeps the simulator's memory sane.
            provider: LocalProvider::with_root(root.path()).code_output_cap(SIM_CODE_OUTPUT),
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
        self.root.path()
    }
}

/// A running simulator, as `cargo xtask sim`, `cargo xtask sim-check` and tests see it.
pub trait Simulator: Send + Sync {
    /// The provider it speaks (`e2b`, `daytona`, `fly`, `sprites`, `vercel`).
    fn provider(&self) -> &'static str;

    /// The base URL of its API.
    fn url(&self) -> &str;

    /// Its server: the fault plan and the request log.
    fn server(&self) -> &SimServer;

    /// How many sandboxes exist (created and not yet destroyed), in any state.
    fn sandboxes(&self) -> usize;

    /// The API key (or token) it accepts: random for each start unless its builder set one.
    fn api_key(&self) -> &str;

    /// Turns the provider's documented rate limits on (the default) or off (for load tests).
    fn set_rate_limits(&self, enabled: bool);

    /// Environment variables that point the provider's official SDK, and this workspace's
    /// adapter built `from_env`, at the simulator, with the key it accepts.
    fn env(&self) -> Vec<(&'static str, String)>;
}

/// The providers [`start`] can simulate.
pub const PROVIDERS: &[&str] = &["daytona", "e2b", "fly", "sprites", "vercel"];

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
        "sprites" => sprites::SpritesSim::builder()
            .port(port)
            .faults(faults)
            .start()
            .await
            .map(|sim| Box::new(sim) as Box<dyn Simulator>)
            .map_err(|e| format!("cannot start the sprites simulator: {e}")),
        "vercel" => vercel::VercelSim::builder()
            .port(port)
            .faults(faults)
            .start()
            .await
            .map(|sim| Box::new(sim) as Box<dyn Simulator>)
            .map_err(|e| format!("cannot start the vercel simulator: {e}")),
        other => Err(format!(
            "no simulator for {other:?}; simulators exist for: {}",
            PROVIDERS.join(", ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_start_accepts_its_own_random_key_and_no_published_one() {
        // The keys the simulators accepted by default before they had random ones: any web
        // page could send them.
        let published = [
            ("daytona", "dtn_simulator_0123456789abcdef"),
            ("fly", "fly-sim-token"),
            ("e2b", "e2b_0000000000000000000000000000000000000000"),
            // Never had a fixed key; any fixed one must be refused.
            ("vercel", "vcp_simulator"),
            ("sprites", "sprites_simulator"),
        ];
        let client = reqwest::Client::new();
        for (provider, old) in published {
            let a = start(provider, 0, FaultPlan::new()).await.unwrap();
            let b = start(provider, 0, FaultPlan::new()).await.unwrap();
            assert_ne!(a.api_key(), b.api_key(), "{provider}");
            assert!(a.api_key().len() >= 40, "{provider}: {}", a.api_key());
            assert!(
                a.env().iter().any(|(_, v)| v == a.api_key()),
                "{provider}: env() hands the key out"
            );
            let (path, header, scheme) = match provider {
                "e2b" => ("/v2/sandboxes".to_owned(), "x-api-key", ""),
                "daytona" => ("/api/sandbox".to_owned(), "authorization", "Bearer "),
                "vercel" => (
                    format!(
                        "/v2/sandboxes?project={}&teamId={}",
                        vercel::PROJECT,
                        vercel::TEAM
                    ),
                    "authorization",
                    "Bearer ",
                ),
                "sprites" => ("/v1/sprites".to_owned(), "authorization", "Bearer "),
                _ => (
                    format!("/v1/apps/{}/machines", fly::APP),
                    "authorization",
                    "Bearer ",
                ),
            };
            let status = |sim: &dyn Simulator, key: &str| {
                client
                    .get(format!("{}{path}", sim.url()))
                    .header(header, format!("{scheme}{key}"))
                    .send()
            };
            let answer = status(a.as_ref(), old).await.unwrap();
            assert_eq!(answer.status(), 401, "{provider} with {old}");
            let answer = status(a.as_ref(), b.api_key()).await.unwrap();
            assert_eq!(answer.status(), 401, "{provider} with another start's key");
            let answer = status(a.as_ref(), a.api_key()).await.unwrap();
            assert_eq!(answer.status(), 200, "{provider} with its own key");
        }
    }

    /// Each simulator's route for the biggest body it takes (an upload), with a wrong key.
    fn upload_with_wrong_key(provider: &str) -> (&'static str, String, String) {
        let wrong = "Authorization: Bearer wrong\r\n".to_owned();
        match provider {
            "e2b" => (
                "POST",
                "/v2/sandboxes".to_owned(),
                "X-API-Key: e2b_wrong\r\n".to_owned(),
            ),
            "daytona" => (
                "POST",
                "/toolbox/sb1/files/upload-v2?path=/x".to_owned(),
                wrong,
            ),
            "fly" => (
                "POST",
                format!("/v1/apps/{}/machines/m1/exec", fly::APP),
                wrong,
            ),
            "sprites" => ("PUT", "/v1/sprites/s1/fs/write?path=/x".to_owned(), wrong),
            _ => (
                "POST",
                format!("/v2/sandboxes/sessions/s1/fs/write?teamId={}", vercel::TEAM),
                wrong,
            ),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_wrong_key_is_refused_before_any_body_byte_is_read() {
        for provider in PROVIDERS {
            let sim = start(provider, 0, FaultPlan::new()).await.unwrap();
            let (method, path, head) = upload_with_wrong_key(provider);
            let (status, _) = crate::server::status_without_body(
                sim.server().addr(),
                method,
                &path,
                &head,
                1 << 30,
            )
            .await;
            assert!(matches!(status, 401 | 403), "{provider}: {status}");
            let ops: Vec<_> = sim
                .server()
                .log()
                .entries()
                .iter()
                .map(|e| e.status)
                .collect();
            assert_eq!(ops, [Some(status)], "{provider}: the refusal is logged");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_json_route_refuses_a_body_over_its_cap_before_reading_it() {
        for provider in PROVIDERS {
            let sim = start(provider, 0, FaultPlan::new()).await.unwrap();
            let key = sim.api_key().to_owned();
            let (path, head) = match *provider {
                "e2b" => ("/v2/sandboxes".to_owned(), format!("X-API-Key: {key}\r\n")),
                "daytona" => (
                    "/api/sandbox".to_owned(),
                    format!("Authorization: Bearer {key}\r\n"),
                ),
                "fly" => (
                    format!("/v1/apps/{}/machines", fly::APP),
                    format!("Authorization: Bearer {key}\r\n"),
                ),
                "sprites" => (
                    "/v1/sprites".to_owned(),
                    format!("Authorization: Bearer {key}\r\n"),
                ),
                _ => (
                    format!(
                        "/v2/sandboxes?project={}&teamId={}",
                        vercel::PROJECT,
                        vercel::TEAM
                    ),
                    format!("Authorization: Bearer {key}\r\n"),
                ),
            };
            let length = (MAX_JSON_BODY + 1) as u64;
            let (status, _) = crate::server::status_without_body(
                sim.server().addr(),
                "POST",
                &path,
                &head,
                length,
            )
            .await;
            assert_eq!(status, 413, "{provider}");
            assert_eq!(sim.sandboxes(), 0, "{provider}");
        }
    }

    #[test]
    fn a_backing_is_a_fresh_private_directory_even_where_its_name_was_guessed() {
        use std::os::unix::fs::PermissionsExt;
        let parent = tempfile::tempdir().unwrap();
        // Another local user plants directories where the simulator's next roots could be
        // (for names made of the pid and a counter, exactly those), open to everyone.
        for n in 0..64 {
            let planted = parent
                .path()
                .join(format!("sandbox-sim-{}-{n}", std::process::id()));
            std::fs::create_dir(&planted).unwrap();
            std::fs::write(planted.join("planted"), b"x").unwrap();
            std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o777)).unwrap();
        }
        let backing = Backing::new_in(parent.path()).unwrap();
        let other = Backing::new_in(parent.path()).unwrap();
        assert_ne!(backing.root(), other.root());
        for root in [backing.root(), other.root()] {
            let meta = std::fs::symlink_metadata(root).unwrap();
            assert!(meta.is_dir(), "{}", root.display());
            assert_eq!(
                meta.permissions().mode() & 0o777,
                0o700,
                "{}",
                root.display()
            );
            assert!(
                std::fs::read_dir(root).unwrap().next().is_none(),
                "{} is not fresh",
                root.display()
            );
            let name = root.file_name().unwrap().to_string_lossy();
            assert!(name.starts_with("sandbox-sim-"), "{name}");
        }
        let root = backing.root().to_owned();
        drop(backing);
        assert!(!root.exists(), "dropping the backing removes its directory");
    }
}
