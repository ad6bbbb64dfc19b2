//! [`E2bBuilder`]: the provider's settings, read from the environment or set in code, checked
//! and resolved into a [`Config`] the provider runs with. It builds and does nothing else.

use crate::api::Api;
use crate::config::{
    Config, DEFAULT_CREATE_LOOKUP_WINDOW, DEFAULT_DOMAIN, DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_STREAM_IDLE_TIMEOUT, DEFAULT_TEMPLATE_BUILD_TIMEOUT, DEFAULT_TEMPLATE_POLL_INTERVAL,
    DEFAULT_TRANSFER_IDLE_TIMEOUT, PROVIDER, env,
};
use crate::provider::E2bProvider;
use sandbox_sdk_core::idempotency::CreateLookup;
use sandbox_sdk_core::{Error, ErrorKind, Result};
use std::fmt;
use std::time::Duration;

impl E2bProvider {
    /// An empty builder, the same as [`E2bBuilder::new`]; [`E2bBuilder::from_env`] starts from
    /// the environment instead.
    pub fn builder() -> E2bBuilder {
        E2bBuilder::new()
    }
}

/// Builds an [`E2bProvider`].
///
/// Environment variables (see [`E2bBuilder::from_env`]): `E2B_API_KEY` (required), `E2B_DOMAIN`,
/// `E2B_API_URL`, `E2B_SANDBOX_URL`. `Debug` never shows the API key.
///
/// ```
/// use sandbox_e2b::E2bProvider;
/// use std::time::Duration;
///
/// let provider = E2bProvider::builder()
///     .api_key("e2b_0123456789abcdef0123456789abcdef01234567")
///     .api_url("http://127.0.0.1:3000")
///     .sandbox_url("http://127.0.0.1:3000")
///     .request_timeout(Duration::from_secs(30))
///     .build()
///     .unwrap();
/// assert!(!format!("{provider:?}").contains("0123456789abcdef"));
/// ```
#[derive(Clone, Default)]
pub struct E2bBuilder {
    api_key: Option<String>,
    domain: Option<String>,
    api_url: Option<String>,
    sandbox_url: Option<String>,
    request_timeout: Option<Duration>,
    user: Option<String>,
    template_poll_interval: Option<Duration>,
    template_build_timeout: Option<Duration>,
    create_lookup: Option<CreateLookup>,
    stream_idle_timeout: Option<Duration>,
    transfer_idle_timeout: Option<Duration>,
    root_certificates: Vec<Vec<u8>>,
    #[cfg(feature = "gzip")]
    gzip: bool,
}

impl fmt::Debug for E2bBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("E2bBuilder")
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("domain", &self.domain)
            .field("api_url", &self.api_url)
            .field("sandbox_url", &self.sandbox_url)
            .field("request_timeout", &self.request_timeout)
            .field("user", &self.user)
            .field("create_lookup", &self.create_lookup)
            .finish()
    }
}

fn non_empty(value: Option<String>) -> Option<String> {
    value.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty())
}

impl E2bBuilder {
    /// An empty builder; [`E2bBuilder::build`] needs at least an API key.
    pub fn new() -> Self {
        Self::default()
    }

    /// A builder filled from `E2B_API_KEY`, `E2B_DOMAIN`, `E2B_API_URL` and `E2B_SANDBOX_URL`
    /// (empty variables are ignored). Setters called afterwards win.
    pub fn from_env() -> Self {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Like [`E2bBuilder::from_env`], reading each variable through `lookup` instead of the
    /// process environment (a configuration file, a secret store, a test's map).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Self {
        E2bBuilder {
            api_key: non_empty(lookup(env::API_KEY)),
            domain: non_empty(lookup(env::DOMAIN)),
            api_url: non_empty(lookup(env::API_URL)),
            sandbox_url: non_empty(lookup(env::SANDBOX_URL)),
            ..Self::default()
        }
    }

    /// The API key (`e2b_…`), sent as `X-API-Key` to the control plane only.
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// The domain (default `e2b.app`).
    pub fn domain(mut self, domain: impl Into<String>) -> Self {
        self.domain = Some(domain.into());
        self
    }

    /// The control-plane base URL (default `https://api.{domain}`).
    pub fn api_url(mut self, url: impl Into<String>) -> Self {
        self.api_url = Some(url.into());
        self
    }

    /// One envd base URL for every sandbox (default: the sandbox hosts of the domain). Requests
    /// still carry the `E2b-Sandbox-Id` and `E2b-Sandbox-Port` routing headers, so one local
    /// server can serve many sandboxes.
    pub fn sandbox_url(mut self, url: impl Into<String>) -> Self {
        self.sandbox_url = Some(url.into());
        self
    }

    /// Timeout of each control-plane and unary envd request (default 60 s), and of opening a
    /// stream (exec, attach and watch must get their response head and `start` event within
    /// it; a command's `request_timeout` overrides it for exec) or a transfer (the response
    /// head of `/files`, counted from the last byte of an upload). Once open, streams and
    /// transfers have no total limit, only the idle bounds below; a process's lifetime is set
    /// per command.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = Some(timeout);
        self
    }

    /// The Linux user for commands and files when a command names none (default: the
    /// sandbox's default user, in practice `user`).
    pub fn user(mut self, user: impl Into<String>) -> Self {
        self.user = Some(user.into());
        self
    }

    /// The longest pause between the checks of a build in [`E2bProvider::prepare_template`]
    /// (default 5 s): it checks at once, then after 25 ms, doubling up to this.
    pub fn template_poll_interval(mut self, interval: Duration) -> Self {
        self.template_poll_interval = Some(interval);
        self
    }

    /// How long [`E2bProvider::prepare_template`] waits for a build (default 30 min).
    pub fn template_build_timeout(mut self, timeout: Duration) -> Self {
        self.template_build_timeout = Some(timeout);
        self
    }

    /// The longest silence of an open process or watch stream before it ends with a
    /// `Transport` error (default [`DEFAULT_STREAM_IDLE_TIMEOUT`], 65 s: envd is asked for a
    /// keepalive after every 50 s without output, plus 15 s of margin). A bound under 50 s ends
    /// healthy streams of quiet processes; it is meant for tests.
    pub fn stream_idle_timeout(mut self, idle: Duration) -> Self {
        self.stream_idle_timeout = Some(idle);
        self
    }

    /// The longest silence between the chunks of a `/files` upload or download before it ends
    /// with a `Transport` error (default [`DEFAULT_TRANSFER_IDLE_TIMEOUT`], 60 s). Transfers
    /// have no total limit.
    pub fn transfer_idle_timeout(mut self, idle: Duration) -> Self {
        self.transfer_idle_timeout = Some(idle);
        self
    }

    /// How long and how often an ambiguous create's idempotency key is looked up before the
    /// create's error is returned (default: [`DEFAULT_CREATE_LOOKUP_WINDOW`], 30 s, checking at
    /// once, then 25 ms doubling to 1 s). See [`E2bProvider::create_sandbox`].
    pub fn create_lookup(mut self, lookup: CreateLookup) -> Self {
        self.create_lookup = Some(lookup);
        self
    }

    /// Trusts a PEM certificate authority (one or more certificates) besides the system roots,
    /// on the control plane and on envd: for a self-hosted E2B behind a private CA, or a
    /// loopback TLS server in tests. A PEM that does not parse fails [`E2bBuilder::build`] with
    /// `Validation`.
    pub fn root_certificate_pem(mut self, pem: &[u8]) -> Self {
        self.root_certificates.push(pem.to_vec());
        self
    }

    /// Asks for gzip on control-plane calls, unary envd calls and `/files` downloads, and decodes
    /// it (feature `gzip`; off unless called with `true`).
    #[cfg(feature = "gzip")]
    pub fn gzip(mut self, enabled: bool) -> Self {
        self.gzip = enabled;
        self
    }

    /// The domain the built provider uses: the one set (or `E2B_DOMAIN`), else `e2b.app`.
    pub fn domain_or_default(&self) -> &str {
        self.domain.as_deref().unwrap_or(DEFAULT_DOMAIN)
    }

    /// The control-plane base URL the built provider uses: the one set (or `E2B_API_URL`),
    /// else `https://api.{domain}`.
    pub fn api_url_or_default(&self) -> String {
        self.api_url
            .clone()
            .unwrap_or_else(|| format!("https://api.{}", self.domain_or_default()))
    }

    /// The envd base URL set with [`E2bBuilder::sandbox_url`] (or `E2B_SANDBOX_URL`), if any.
    pub fn sandbox_url_override(&self) -> Option<&str> {
        self.sandbox_url.as_deref()
    }

    /// Builds the provider. Fails with `Unauthorized` when no API key is set, and with
    /// `Validation` for a bad URL or domain. (The service itself refuses keys that do not start
    /// with `e2b_`; that is left to it, so test servers can use any key.)
    pub fn build(mut self) -> Result<E2bProvider> {
        let api_key = self.api_key.take().ok_or_else(|| {
            Error::new(
                ErrorKind::Unauthorized,
                format!("no E2B API key: set {} or call api_key()", env::API_KEY),
            )
            .with_provider(PROVIDER)
        })?;
        if api_key.trim().is_empty() {
            return Err(
                Error::new(ErrorKind::Unauthorized, "the E2B API key is empty")
                    .with_provider(PROVIDER),
            );
        }
        let domain = self.domain_or_default().to_owned();
        if domain.is_empty() || domain.contains(['/', ':', ' ']) {
            return Err(
                Error::validation(format!("invalid E2B domain {domain:?}")).with_provider(PROVIDER)
            );
        }
        let config = Config {
            api_key,
            api_url: self.api_url_or_default(),
            domain,
            sandbox_url: self.sandbox_url,
            user: self.user,
            request_timeout: self.request_timeout.unwrap_or(DEFAULT_REQUEST_TIMEOUT),
            template_poll_interval: self
                .template_poll_interval
                .unwrap_or(DEFAULT_TEMPLATE_POLL_INTERVAL),
            template_build_timeout: self
                .template_build_timeout
                .unwrap_or(DEFAULT_TEMPLATE_BUILD_TIMEOUT),
            create_lookup: self
                .create_lookup
                .unwrap_or(CreateLookup::new(DEFAULT_CREATE_LOOKUP_WINDOW)),
            stream_idle_timeout: self
                .stream_idle_timeout
                .unwrap_or(DEFAULT_STREAM_IDLE_TIMEOUT),
            transfer_idle_timeout: self
                .transfer_idle_timeout
                .unwrap_or(DEFAULT_TRANSFER_IDLE_TIMEOUT),
            root_certificates: self.root_certificates,
            #[cfg(feature = "gzip")]
            gzip: self.gzip,
        };
        Ok(E2bProvider::new(Api::new(config)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "e2b_0123456789abcdef0123456789abcdef01234567";

    #[test]
    fn from_lookup_reads_every_variable_and_ignores_empty_ones() {
        let b = E2bBuilder::from_lookup(|name| match name {
            "E2B_API_KEY" => Some(KEY.into()),
            "E2B_DOMAIN" => Some("example.test".into()),
            "E2B_API_URL" => Some(" ".into()),
            "E2B_SANDBOX_URL" => Some("http://127.0.0.1:9".into()),
            _ => None,
        });
        assert_eq!(b.api_key.as_deref(), Some(KEY));
        assert_eq!(b.domain.as_deref(), Some("example.test"));
        assert_eq!(b.api_url, None);
        assert_eq!(b.sandbox_url.as_deref(), Some("http://127.0.0.1:9"));
    }

    #[test]
    fn resolved_urls_follow_the_overrides_and_the_domain() {
        let b = E2bBuilder::new();
        assert_eq!(b.domain_or_default(), "e2b.app");
        assert_eq!(b.api_url_or_default(), "https://api.e2b.app");
        assert_eq!(b.sandbox_url_override(), None);
        let b = E2bBuilder::new().domain("example.test");
        assert_eq!(b.api_url_or_default(), "https://api.example.test");
        let b = b
            .api_url("http://127.0.0.1:1")
            .sandbox_url("http://127.0.0.1:2");
        assert_eq!(b.api_url_or_default(), "http://127.0.0.1:1");
        assert_eq!(b.sandbox_url_override(), Some("http://127.0.0.1:2"));
    }

    #[test]
    fn missing_or_empty_key_is_unauthorized() {
        let e = E2bBuilder::new().build().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unauthorized);
        assert!(e.to_string().contains("E2B_API_KEY"));
        let e = E2bBuilder::new().api_key(" ").build().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unauthorized);
    }

    #[test]
    fn bad_urls_and_domains_are_validation_errors() {
        let e = E2bBuilder::new()
            .api_key(KEY)
            .api_url("ftp://x")
            .build()
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Validation);
        let e = E2bBuilder::new()
            .api_key(KEY)
            .domain("a/b")
            .build()
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Validation);
    }

    #[test]
    fn a_root_certificate_that_does_not_parse_is_a_validation_error() {
        let e = E2bBuilder::new()
            .api_key(KEY)
            .root_certificate_pem(b"not a certificate")
            .build()
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Validation, "{e}");
    }

    #[test]
    fn debug_hides_the_key() {
        let b = E2bBuilder::new().api_key(KEY);
        assert!(!format!("{b:?}").contains("0123456789"));
        let p = b.build().unwrap();
        assert!(!format!("{p:?}").contains("0123456789"));
    }
}
