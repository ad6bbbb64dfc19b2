//! [`FlyBuilder`]: configuration read from the environment or set in code, checked by a fallible
//! [`FlyBuilder::build`] into the resolved settings (`config::Settings`) the adapter runs with.
//!
//! The environment variables [`FlyBuilder::from_env`] reads are listed on [`FlyBuilder`].

use crate::config::{
    DEFAULT_API_URL, DEFAULT_CREATE_LOOKUP_WINDOW, DEFAULT_IMAGE, DEFAULT_LAUNCH_WAIT,
    DOWNLOAD_CHUNK, EXEC_DEADLINE, PROVIDER, Settings, UPLOAD_CHUNK,
};
use crate::provider::FlyProvider;
use sandbox_sdk_core::idempotency::CreateLookup;
use sandbox_sdk_core::{Error, Result};
use std::fmt;
use std::time::Duration;

/// A Fly Machines provider's configuration. `Debug` never shows the token.
///
/// Environment variables read by [`FlyBuilder::from_env`]:
///
/// | variable | meaning | default |
/// | --- | --- | --- |
/// | `FLY_API_TOKEN` | API token (`fly tokens create …`); `FlyV1 …` macaroons are sent with the `FlyV1` scheme, others as `Bearer` | required |
/// | `FLY_API_HOSTNAME` | Machines API base URL (a bare host gets `https://`) | `https://api.machines.dev` |
/// | `FLY_APP_NAME` (alias `FLY_APP`) | the app the machines live in | required |
/// | `FLY_REGION` | default region for new machines | Fly picks one near you |
/// | `FLY_IMAGE` | default image for new machines | `ubuntu:24.04` |
///
/// Start from [`FlyProvider::builder`] (defaults), [`FlyBuilder::from_env`] or
/// [`FlyBuilder::from_lookup`]:
///
/// ```
/// use sandbox_fly::FlyProvider;
///
/// let fly = FlyProvider::builder()
///     .token("fly-token")
///     .app("my-sandboxes")
///     .region("ord")
///     .image("python:3.12-slim")
///     .build()
///     .unwrap();
/// assert_eq!(fly.app(), "my-sandboxes");
/// ```
#[derive(Clone)]
pub struct FlyBuilder {
    token: Option<String>,
    base_url: String,
    app: Option<String>,
    region: Option<String>,
    image: String,
    cpu_kind: Option<String>,
    cpus: Option<u32>,
    memory_mb: Option<u64>,
    keep_alive: bool,
    service_ports: Vec<u16>,
    mounts: Vec<(String, String)>,
    public_host: Option<String>,
    request_timeout: Duration,
    start_timeout: Duration,
    direct_exec_limit: Duration,
    prefer_direct_exec: bool,
    poll_interval: Duration,
    launch_wait: Duration,
    upload_chunk: usize,
    download_chunk: u64,
    create_lookup: CreateLookup,
}

impl FlyProvider {
    /// A builder with defaults and nothing read from the environment; see also
    /// [`FlyBuilder::from_env`] and [`FlyBuilder::from_lookup`].
    pub fn builder() -> FlyBuilder {
        FlyBuilder::empty()
    }
}

impl FlyBuilder {
    /// Defaults, nothing read from the environment ([`FlyProvider::builder`]).
    pub(crate) fn empty() -> Self {
        FlyBuilder {
            token: None,
            base_url: DEFAULT_API_URL.to_owned(),
            app: None,
            region: None,
            image: DEFAULT_IMAGE.to_owned(),
            cpu_kind: None,
            cpus: None,
            memory_mb: None,
            keep_alive: true,
            service_ports: Vec::new(),
            mounts: Vec::new(),
            public_host: None,
            request_timeout: Duration::from_secs(30),
            start_timeout: Duration::from_secs(120),
            direct_exec_limit: EXEC_DEADLINE,
            prefer_direct_exec: false,
            poll_interval: Duration::from_secs(1),
            launch_wait: DEFAULT_LAUNCH_WAIT,
            upload_chunk: UPLOAD_CHUNK,
            download_chunk: DOWNLOAD_CHUNK,
            create_lookup: CreateLookup::new(DEFAULT_CREATE_LOOKUP_WINDOW),
        }
    }

    /// A builder filled from the environment variables listed on [`FlyBuilder`].
    pub fn from_env() -> Self {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Like [`FlyBuilder::from_env`], reading variables through `get` (for tests and embedding).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Self {
        let get = |name: &str| get(name).filter(|v| !v.trim().is_empty());
        let mut builder = Self::empty();
        builder.token = get("FLY_API_TOKEN");
        if let Some(host) = get("FLY_API_HOSTNAME") {
            builder.base_url = host;
        }
        builder.app = get("FLY_APP_NAME").or_else(|| get("FLY_APP"));
        builder.region = get("FLY_REGION");
        if let Some(image) = get("FLY_IMAGE") {
            builder.image = image;
        }
        builder
    }

    /// Sets the API token.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// Sets the Machines API base URL (`https://api.machines.dev`, the private
    /// `http://_api.internal:4280`, or a test server). A trailing `/v1` is accepted.
    pub fn api_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = url.into();
        self
    }

    /// Sets the app the machines live in.
    pub fn app(mut self, app: impl Into<String>) -> Self {
        self.app = Some(app.into());
        self
    }

    /// Sets the default region (a create spec's region wins).
    pub fn region(mut self, region: impl Into<String>) -> Self {
        self.region = Some(region.into());
        self
    }

    /// Sets the default image (a create spec's template wins).
    pub fn image(mut self, image: impl Into<String>) -> Self {
        self.image = image.into();
        self
    }

    /// Sets the CPU kind (`shared` or `performance`); unset keeps Fly's default.
    pub fn cpu_kind(mut self, kind: impl Into<String>) -> Self {
        self.cpu_kind = Some(kind.into());
        self
    }

    /// Sets the default number of CPUs (a create spec's resources win).
    pub fn cpus(mut self, cpus: u32) -> Self {
        self.cpus = Some(cpus);
        self
    }

    /// Sets the default memory in MB (a create spec's resources win). Shared CPUs take multiples of 256.
    pub fn memory_mb(mut self, memory_mb: u64) -> Self {
        self.memory_mb = Some(memory_mb);
        self
    }

    /// Whether the machine's main process is replaced by `sleep inf` (default `true`), so that an
    /// image whose command exits at once (like `ubuntu`) stays up for exec. Turn it off for images
    /// whose own command is a long-running server.
    pub fn keep_alive(mut self, keep_alive: bool) -> Self {
        self.keep_alive = keep_alive;
        self
    }

    /// Exposes `port` inside each new machine through Fly Proxy at `https://{app}.fly.dev`
    /// (ports 443 with TLS and 80 redirecting to HTTPS). The app also needs a public IP
    /// (`fly ips allocate-v4 --shared`); Fly does not give API-made apps one.
    pub fn expose_port(mut self, port: u16) -> Self {
        if !self.service_ports.contains(&port) {
            self.service_ports.push(port);
        }
        self
    }

    /// Mounts volume `volume` (`vol_…`) at `path` in each new machine. One volume per machine;
    /// the volume pins the machine to its host.
    pub fn mount(mut self, volume: impl Into<String>, path: impl Into<String>) -> Self {
        self.mounts.push((volume.into(), path.into()));
        self
    }

    /// Sets the host preview links point at (default `{app}.fly.dev`), for apps with a custom domain.
    pub fn public_host(mut self, host: impl Into<String>) -> Self {
        self.public_host = Some(host.into());
        self
    }

    /// Sets the timeout of ordinary API requests (default 30 s). Waits and execs set their own.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Sets how long create and resume wait for the machine to reach `started` (default 120 s);
    /// `/wait` calls are chained in steps of at most 60 s within it.
    pub fn start_timeout(mut self, timeout: Duration) -> Self {
        self.start_timeout = timeout;
        self
    }

    /// Commands whose timeout is at most this long (default and maximum [`EXEC_DEADLINE`]) run
    /// through one buffered `/exec` call; longer ones, commands without a timeout and background
    /// commands use the background-and-poll emulation.
    pub fn direct_exec_limit(mut self, limit: Duration) -> Self {
        self.direct_exec_limit = limit.min(EXEC_DEADLINE);
        self
    }

    /// Also run commands without a timeout through one buffered `/exec` call, limited to
    /// [`FlyBuilder::direct_exec_limit`] (one request per command, no live output; a command
    /// that runs longer fails with `Timeout`). Default `false`.
    pub fn prefer_direct_exec(mut self, prefer: bool) -> Self {
        self.prefer_direct_exec = prefer;
        self
    }

    /// Sets the pace of the many calls one emulated operation makes (default 1 s, Fly's
    /// sustained per-action rate): after a burst of two, one call per interval, the burst
    /// refilling while the operation is idle. It paces output polls of a command and file
    /// chunks. Each poll also waits in the machine up to ~1 s for output, so a quiet command
    /// costs one call per second whatever the interval.
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// How long the one `/exec` that starts a command without a (short) timeout waits in the
    /// machine for it to end (default [`DEFAULT_LAUNCH_WAIT`], at most [`EXEC_DEADLINE`]): a
    /// command that ends within it is done in that one call, output and exit code included;
    /// one that does not is left running (never killed for being slow) and polled. Live output
    /// of a streamed command shows up after this wait at the latest. Background commands never
    /// wait. Waits below a second need a `sleep` that takes decimals (GNU, BusyBox).
    pub fn launch_wait(mut self, wait: Duration) -> Self {
        self.launch_wait = wait.min(EXEC_DEADLINE);
        self
    }

    /// Sets the raw bytes moved per file call (default and maximum [`UPLOAD_CHUNK`] for
    /// uploads and [`DOWNLOAD_CHUNK`] for downloads; at least 3). Lower it if a proxy in
    /// front of the API limits request or response sizes further.
    pub fn file_chunk(mut self, bytes: usize) -> Self {
        let bytes = bytes.max(3);
        self.upload_chunk = bytes.min(UPLOAD_CHUNK);
        self.download_chunk = (bytes as u64).min(DOWNLOAD_CHUNK);
        self
    }

    /// How an ambiguous create is settled (default: look the idempotency key up for
    /// [`DEFAULT_CREATE_LOOKUP_WINDOW`], at once and then 25 ms doubling to 1 s apart). Fly has
    /// no idempotency header, so a create with a key lists machines by the key's metadata label
    /// first, sends the create once, and after a timeout, a lost connection or a 408/5xx keeps
    /// listing for the window; only when no machine appears does the error go back (and the
    /// retry layer may send the create again). Creates without a key are sent once.
    pub fn create_lookup(mut self, lookup: CreateLookup) -> Self {
        self.create_lookup = lookup;
        self
    }

    /// The Machines API root the requests go to (`…/v1`); a `Validation` error for an empty
    /// base URL.
    pub fn api_root(&self) -> Result<String> {
        crate::config::api_root(&self.base_url).ok_or_else(|| {
            Error::validation("fly: the API base URL is empty").with_provider(PROVIDER)
        })
    }

    /// Checks the configuration and builds the provider. A missing token or app is a
    /// `Validation` error naming the variable to set.
    pub fn build(self) -> Result<FlyProvider> {
        FlyProvider::new(self.settings()?)
    }

    /// The resolved settings, or the error [`FlyBuilder::build`] gives.
    fn settings(self) -> Result<Settings> {
        let missing = |what: &str, var: &str| {
            Error::validation(format!(
                "fly: no {what} configured; set {var} or call FlyBuilder::{}",
                what.split(' ').next_back().unwrap_or(what)
            ))
            .with_provider(PROVIDER)
        };
        if self.token.as_deref().is_none_or(|t| t.trim().is_empty()) {
            return Err(missing("API token", "FLY_API_TOKEN"));
        }
        match self.app.as_deref() {
            None => return Err(missing("app", "FLY_APP_NAME")),
            Some(app) if !valid_app_name(app) => {
                return Err(Error::validation(format!(
                    "fly: invalid app name {app:?}: use lowercase letters, digits and dashes"
                ))
                .with_provider(PROVIDER));
            }
            Some(_) => {}
        }
        if self.image.trim().is_empty() {
            return Err(
                Error::validation("fly: the default image is empty").with_provider(PROVIDER)
            );
        }
        Ok(Settings {
            api_root: self.api_root()?,
            authorization: crate::config::authorization(self.token.as_deref().unwrap_or_default()),
            app: self.app.unwrap_or_default(),
            region: self.region,
            image: self.image,
            cpu_kind: self.cpu_kind,
            cpus: self.cpus,
            memory_mb: self.memory_mb,
            keep_alive: self.keep_alive,
            service_ports: self.service_ports,
            mounts: self.mounts,
            public_host: self.public_host,
            request_timeout: self.request_timeout,
            start_timeout: self.start_timeout,
            direct_exec_limit: self.direct_exec_limit,
            prefer_direct_exec: self.prefer_direct_exec,
            poll_interval: self.poll_interval,
            launch_wait: self.launch_wait,
            upload_chunk: self.upload_chunk,
            download_chunk: self.download_chunk,
            create_lookup: self.create_lookup,
        })
    }
}

#[cfg(test)]
impl Settings {
    /// The settings a default builder makes for `app` at an unreachable loopback address.
    pub(crate) fn for_tests(app: &str) -> Settings {
        FlyBuilder::empty()
            .token("t")
            .app(app)
            .api_url("http://127.0.0.1:1")
            .settings()
            .expect("a default builder with a token and an app builds")
    }
}

fn valid_app_name(app: &str) -> bool {
    !app.is_empty()
        && app.len() <= 63
        && app
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

impl fmt::Debug for FlyBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FlyBuilder")
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("base_url", &self.base_url)
            .field("app", &self.app)
            .field("region", &self.region)
            .field("image", &self.image)
            .field("cpu_kind", &self.cpu_kind)
            .field("cpus", &self.cpus)
            .field("memory_mb", &self.memory_mb)
            .field("keep_alive", &self.keep_alive)
            .field("service_ports", &self.service_ports)
            .field("mounts", &self.mounts)
            .field("public_host", &self.public_host)
            .field("request_timeout", &self.request_timeout)
            .field("start_timeout", &self.start_timeout)
            .field("direct_exec_limit", &self.direct_exec_limit)
            .field("prefer_direct_exec", &self.prefer_direct_exec)
            .field("poll_interval", &self.poll_interval)
            .field("launch_wait", &self.launch_wait)
            .field("upload_chunk", &self.upload_chunk)
            .field("download_chunk", &self.download_chunk)
            .field("create_lookup", &self.create_lookup)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn from_lookup_reads_every_variable() {
        let b = FlyBuilder::from_lookup(vars(&[
            ("FLY_API_TOKEN", "tok"),
            ("FLY_API_HOSTNAME", "_api.internal:4280"),
            ("FLY_APP", "sandboxes"),
            ("FLY_REGION", "ord"),
            ("FLY_IMAGE", "alpine:3"),
        ]));
        assert_eq!(b.token.as_deref(), Some("tok"));
        assert_eq!(b.app.as_deref(), Some("sandboxes"));
        assert_eq!(b.region.as_deref(), Some("ord"));
        assert_eq!(b.image, "alpine:3");
        assert_eq!(b.api_root().unwrap(), "https://_api.internal:4280/v1");
        let b = FlyBuilder::from_lookup(vars(&[("FLY_APP_NAME", "a"), ("FLY_APP", "b")]));
        assert_eq!(b.app.as_deref(), Some("a"));
    }

    #[test]
    fn defaults_apply_when_unset() {
        let b = FlyBuilder::from_lookup(vars(&[]));
        assert_eq!(b.api_root().unwrap(), "https://api.machines.dev/v1");
        assert_eq!(b.image, DEFAULT_IMAGE);
        assert!(b.token.is_none());
        let b = FlyBuilder::empty().api_url("http://127.0.0.1:9/v1/");
        assert_eq!(b.api_root().unwrap(), "http://127.0.0.1:9/v1");
    }

    #[test]
    fn build_names_what_is_missing() {
        let e = FlyBuilder::empty().app("a").build().unwrap_err();
        assert!(e.message().contains("FLY_API_TOKEN"), "{e}");
        let e = FlyBuilder::empty().token("t").build().unwrap_err();
        assert!(e.message().contains("FLY_APP_NAME"), "{e}");
        let e = FlyBuilder::empty()
            .token("t")
            .app("Bad App")
            .build()
            .unwrap_err();
        assert_eq!(e.kind(), sandbox_sdk_core::ErrorKind::Validation);
        assert!(FlyBuilder::empty().token("t").app("ok-app").build().is_ok());
    }

    #[test]
    fn debug_hides_the_token() {
        let b = FlyBuilder::empty().token("canary-secret-token").app("a");
        assert!(!format!("{b:?}").contains("canary-secret-token"));
    }

    #[test]
    fn direct_exec_limit_is_capped_at_the_exec_deadline() {
        let b = FlyBuilder::empty().direct_exec_limit(Duration::from_secs(600));
        assert_eq!(b.direct_exec_limit, EXEC_DEADLINE);
    }
}
