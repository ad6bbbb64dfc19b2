//! Configuration: [`DaytonaBuilder`] with `from_env()`, typed setters and a fallible `build()`.

use crate::api::client::Api;
use crate::api::ssh::parse_fingerprint;
use crate::config::{
    Config, DEFAULT_API_URL, DEFAULT_CREATE_LOOKUP_WINDOW, DEFAULT_DIRECT_WINDOW,
    DEFAULT_PING_ANSWER, DEFAULT_PING_EVERY, DEFAULT_SDK_VERSION, DEFAULT_STREAM_IDLE_TIMEOUT,
    ExecTransport, LogFollow, MIN_SDK_VERSION, PROVIDER, parse_version,
};
use crate::provider::DaytonaProvider;
use sandbox_sdk_core::idempotency::CreateLookup;
use sandbox_sdk_core::{Error, Result};
use std::fmt;
use std::time::Duration;

/// Builds a [`DaytonaProvider`].
///
/// Environment variables read by [`DaytonaBuilder::from_env`]:
///
/// | variable | meaning |
/// | --- | --- |
/// | `DAYTONA_API_KEY` | API key (`dtn_…`), sent as `Authorization: Bearer` |
/// | `DAYTONA_JWT_TOKEN` | a JWT instead of an API key (needs an organization id) |
/// | `DAYTONA_ORGANIZATION_ID` | organization for JWT auth (`X-Daytona-Organization-ID`), also used for usage limits |
/// | `DAYTONA_API_URL` | control-plane base URL (default [`DEFAULT_API_URL`]); `DAYTONA_SERVER_URL` is read as an older alias |
/// | `DAYTONA_TARGET` | default region (`target`) for new sandboxes |
/// | `DAYTONA_TOOLBOX_URL` | toolbox proxy base URL, overriding each sandbox's `toolboxProxyUrl` |
///
/// `Debug` never shows the key or token.
///
/// ```
/// use sandbox_daytona::DaytonaProvider;
/// let provider = DaytonaProvider::builder()
///     .api_key("dtn_example")
///     .api_url("http://127.0.0.1:3000/api")
///     .target("us")
///     .build()
///     .unwrap();
/// # let _ = provider;
/// ```
#[derive(Clone)]
pub struct DaytonaBuilder {
    api_key: Option<String>,
    jwt_token: Option<String>,
    organization_id: Option<String>,
    api_url: String,
    toolbox_url: Option<String>,
    target: Option<String>,
    sdk_version: String,
    request_timeout: Duration,
    poll_interval: Duration,
    start_timeout: Duration,
    state_change_timeout: Duration,
    log_follow: LogFollow,
    exec_transport: ExecTransport,
    ssh_host_key: Option<String>,
    ssh_trust_first_use: bool,
    ssh_gateway: Option<(String, u16)>,
    create_lookup: CreateLookup,
    direct_window: Duration,
    idle_timeout: Duration,
    log_ping: (Duration, Duration),
}

impl DaytonaProvider {
    /// A builder with no credentials and the cloud defaults; [`DaytonaBuilder::from_env`]
    /// starts from the environment instead.
    pub fn builder() -> DaytonaBuilder {
        DaytonaBuilder::new()
    }
}

impl DaytonaBuilder {
    /// A builder with no credentials and the cloud defaults ([`DaytonaProvider::builder`]).
    pub(crate) fn new() -> Self {
        DaytonaBuilder {
            api_key: None,
            jwt_token: None,
            organization_id: None,
            api_url: DEFAULT_API_URL.to_owned(),
            toolbox_url: None,
            target: None,
            sdk_version: DEFAULT_SDK_VERSION.to_owned(),
            request_timeout: Duration::from_secs(60),
            poll_interval: Duration::from_millis(500),
            start_timeout: Duration::from_secs(300),
            state_change_timeout: Duration::from_secs(120),
            log_follow: LogFollow::WebSocket,
            exec_transport: ExecTransport::Toolbox,
            ssh_host_key: None,
            ssh_trust_first_use: false,
            ssh_gateway: None,
            create_lookup: CreateLookup::new(DEFAULT_CREATE_LOOKUP_WINDOW),
            direct_window: DEFAULT_DIRECT_WINDOW,
            idle_timeout: DEFAULT_STREAM_IDLE_TIMEOUT,
            log_ping: (DEFAULT_PING_EVERY, DEFAULT_PING_ANSWER),
        }
    }

    /// A builder filled from the environment (see the table above); unset variables keep the
    /// defaults.
    pub fn from_env() -> Self {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Like [`DaytonaBuilder::from_env`], reading variables through `lookup` (for tests).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Self {
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let mut builder = Self::new();
        builder.api_key = get("DAYTONA_API_KEY");
        builder.jwt_token = get("DAYTONA_JWT_TOKEN");
        builder.organization_id = get("DAYTONA_ORGANIZATION_ID");
        if let Some(url) = get("DAYTONA_API_URL").or_else(|| get("DAYTONA_SERVER_URL")) {
            builder.api_url = url;
        }
        builder.target = get("DAYTONA_TARGET");
        builder.toolbox_url = get("DAYTONA_TOOLBOX_URL");
        builder
    }

    /// Sets the API key (`dtn_…`).
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// Authenticates with a JWT instead of an API key; needs [`DaytonaBuilder::organization_id`].
    pub fn jwt_token(mut self, token: impl Into<String>) -> Self {
        self.jwt_token = Some(token.into());
        self
    }

    /// Sets the organization id (sent with JWT auth; used to read usage limits).
    pub fn organization_id(mut self, id: impl Into<String>) -> Self {
        self.organization_id = Some(id.into());
        self
    }

    /// Sets the control-plane base URL (e.g. `https://app.daytona.io/api`).
    pub fn api_url(mut self, url: impl Into<String>) -> Self {
        self.api_url = url.into();
        self
    }

    /// Sets the toolbox proxy base URL; each sandbox's toolbox is `{url}/{sandboxId}`. Without
    /// it the sandbox's own `toolboxProxyUrl` is used.
    pub fn toolbox_url(mut self, url: impl Into<String>) -> Self {
        self.toolbox_url = Some(url.into());
        self
    }

    /// Sets the default region for new sandboxes.
    pub fn target(mut self, target: impl Into<String>) -> Self {
        self.target = Some(target.into());
        self
    }

    /// Sets the `X-Daytona-SDK-Version` sent; must be at least 0.167.0 (see [`MIN_SDK_VERSION`]).
    pub fn sdk_version(mut self, version: impl Into<String>) -> Self {
        self.sdk_version = version.into();
        self
    }

    /// Sets the default timeout of each HTTP request (default 60 s).
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Sets how often state is polled while waiting (default 500 ms).
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// Sets how long create, start and fork wait for `started` (default 300 s).
    pub fn start_timeout(mut self, timeout: Duration) -> Self {
        self.start_timeout = timeout;
        self
    }

    /// Sets how long a lifecycle call waits out "state change in progress" and its own
    /// transition (default 120 s).
    pub fn state_change_timeout(mut self, timeout: Duration) -> Self {
        self.state_change_timeout = timeout;
        self
    }

    /// Sets how command output is followed (default [`LogFollow::WebSocket`]).
    pub fn log_follow(mut self, follow: LogFollow) -> Self {
        self.log_follow = follow;
        self
    }

    /// Sets where foreground commands run (default [`ExecTransport::Toolbox`]).
    pub fn exec_transport(mut self, transport: ExecTransport) -> Self {
        self.exec_transport = transport;
        self
    }

    /// Pins the SSH gateway's host key by its fingerprint (`SHA256:…` or `SHA512:…`, as
    /// `ssh-keygen -l -f KEY.pub` prints it): a gateway showing any other key is refused
    /// (`Unauthorized`) before the access token is sent. Daytona publishes no fingerprint; take
    /// it from a connection you trust (`ssh-keyscan HOST | ssh-keygen -l -f -`).
    ///
    /// Without a pin, SSH connections are refused unless
    /// [`DaytonaBuilder::ssh_trust_host_key_on_first_use`] is set; a pin wins over that
    /// setting. [`DaytonaBuilder::build`] fails with `Validation` on a malformed fingerprint.
    pub fn ssh_host_key(mut self, fingerprint: impl Into<String>) -> Self {
        self.ssh_host_key = Some(fingerprint.into());
        self
    }

    /// Opts into trusting the SSH gateway's host key on first use (default `false`): with no
    /// [`DaytonaBuilder::ssh_host_key`] pin, the first key a gateway shows in this process is
    /// accepted and remembered for the life of the process, and a different key later is
    /// refused.
    ///
    /// This is weaker than a pin: whoever answers the first connection of each process (a
    /// network attacker, a wrong DNS answer) is trusted and is sent the SSH access token,
    /// which grants a shell in the sandbox. Off, connections without a pin are refused before
    /// the token is sent.
    pub fn ssh_trust_host_key_on_first_use(mut self, trust: bool) -> Self {
        self.ssh_trust_first_use = trust;
        self
    }

    /// Connects to the SSH gateway at `host:port` instead of the one named by the API's
    /// `sshCommand` (a gateway reached through a tunnel, or a test server). Access tokens are
    /// still minted through the API, and [`SshAccess`](sandbox_sdk_core::SshAccess) reports this
    /// gateway.
    pub fn ssh_gateway(mut self, host: impl Into<String>, port: u16) -> Self {
        self.ssh_gateway = Some((host.into(), port));
        self
    }

    /// How long and how often a create that may have happened is looked up by its name before
    /// the error goes back to the caller (default [`DEFAULT_CREATE_LOOKUP_WINDOW`]: 60 s). Applies to
    /// creates with an idempotency key (see [`DaytonaProvider`]'s
    /// `create`).
    pub fn create_lookup(mut self, lookup: CreateLookup) -> Self {
        self.create_lookup = lookup;
        self
    }

    /// How long a foreground command is waited on in one synchronous request (default
    /// [`DEFAULT_DIRECT_WINDOW`], 1 s). A command that ends within it costs that one request
    /// (stdout, stderr and the exit code come in its answer); one still running is left
    /// running and followed from then on, its output so far included. Zero sends every command
    /// asynchronously and follows it from its first line.
    pub fn direct_window(mut self, window: Duration) -> Self {
        self.direct_window = window;
        self
    }

    /// The longest silence allowed between the chunks of a streamed upload's or download's
    /// body, and of a polled log (default [`DEFAULT_STREAM_IDLE_TIMEOUT`], 60 s). The answer's head
    /// must come within the request timeout after the last byte was sent; there is no total
    /// limit, so large transfers work at any speed that is not silence.
    pub fn stream_idle_timeout(mut self, idle: Duration) -> Self {
        self.idle_timeout = idle;
        self
    }

    /// Pings the log WebSocket after `every` of silence and ends the stream with a `Transport`
    /// error when nothing (no pong, no frame) answers within `answer_within` (defaults
    /// [`DEFAULT_PING_EVERY`], 20 s, and [`DEFAULT_PING_ANSWER`], 10 s).
    pub fn log_ping(mut self, every: Duration, answer_within: Duration) -> Self {
        self.log_ping = (every, answer_within);
        self
    }

    /// The control-plane base URL this builder will use (set, from the environment, or
    /// [`DEFAULT_API_URL`]).
    pub fn api_url_or_default(&self) -> &str {
        &self.api_url
    }

    /// The toolbox proxy base URL set on this builder, if any (without it each sandbox's own
    /// `toolboxProxyUrl` is used).
    pub fn toolbox_url_override(&self) -> Option<&str> {
        self.toolbox_url.as_deref()
    }

    /// Builds the provider. Fails with `Validation` when no credential is set, a JWT has no
    /// organization id, the SDK version is below 0.167.0, a URL is malformed, or the SSH host
    /// key pin is not a fingerprint.
    pub fn build(self) -> Result<DaytonaProvider> {
        let secret = match (&self.api_key, &self.jwt_token) {
            (Some(key), _) => key.clone(),
            (None, Some(jwt)) => {
                if self.organization_id.is_none() {
                    return Err(config_error(
                        "a JWT needs an organization id (DAYTONA_ORGANIZATION_ID)",
                    ));
                }
                jwt.clone()
            }
            (None, None) => {
                return Err(config_error(
                    "no credentials: set DAYTONA_API_KEY (or DAYTONA_JWT_TOKEN with DAYTONA_ORGANIZATION_ID)",
                ));
            }
        };
        match parse_version(&self.sdk_version) {
            Some(v) if v >= MIN_SDK_VERSION => {}
            _ => {
                return Err(config_error(format!(
                    "SDK version {:?} is below 0.167.0 or not a version: the daemon would merge stdout and stderr",
                    self.sdk_version
                )));
            }
        }
        if let Some(pin) = &self.ssh_host_key
            && parse_fingerprint(pin).is_none()
        {
            return Err(config_error(
                "the SSH host key pin is not a fingerprint such as SHA256:… (as ssh-keygen -l prints it)",
            ));
        }
        let config = Config {
            api_key: self.api_key.is_some(),
            organization_id: self.organization_id,
            api_url: self.api_url,
            toolbox_url: self.toolbox_url,
            target: self.target,
            sdk_version: self.sdk_version,
            request_timeout: self.request_timeout,
            poll_interval: self.poll_interval,
            start_timeout: self.start_timeout,
            state_change_timeout: self.state_change_timeout,
            log_follow: self.log_follow,
            exec_transport: self.exec_transport,
            ssh_host_key: self.ssh_host_key,
            ssh_trust_first_use: self.ssh_trust_first_use,
            ssh_gateway: self.ssh_gateway,
            create_lookup: self.create_lookup,
            direct_window: self.direct_window,
            idle_timeout: self.idle_timeout,
            log_ping: self.log_ping,
        };
        Ok(DaytonaProvider::from_api(Api::new(config, secret)?))
    }
}

fn config_error(message: impl Into<String>) -> Error {
    Error::validation(message)
        .with_provider(PROVIDER)
        .with_operation("build")
}

impl fmt::Debug for DaytonaBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DaytonaBuilder")
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("jwt_token", &self.jwt_token.as_ref().map(|_| "<redacted>"))
            .field("organization_id", &self.organization_id)
            .field("api_url", &self.api_url)
            .field("toolbox_url", &self.toolbox_url)
            .field("target", &self.target)
            .field("sdk_version", &self.sdk_version)
            .field("request_timeout", &self.request_timeout)
            .field("poll_interval", &self.poll_interval)
            .field("start_timeout", &self.start_timeout)
            .field("state_change_timeout", &self.state_change_timeout)
            .field("log_follow", &self.log_follow)
            .field("exec_transport", &self.exec_transport)
            .field("ssh_host_key", &self.ssh_host_key)
            .field("ssh_trust_first_use", &self.ssh_trust_first_use)
            .field("ssh_gateway", &self.ssh_gateway)
            .field("create_lookup", &self.create_lookup)
            .field("direct_window", &self.direct_window)
            .field("idle_timeout", &self.idle_timeout)
            .field("log_ping", &self.log_ping)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox_sdk_core::ErrorKind;

    #[test]
    fn from_lookup_reads_every_variable() {
        let b = DaytonaBuilder::from_lookup(|name| match name {
            "DAYTONA_API_KEY" => Some("dtn_k".into()),
            "DAYTONA_SERVER_URL" => Some("http://old/api".into()),
            "DAYTONA_TARGET" => Some("eu".into()),
            "DAYTONA_ORGANIZATION_ID" => Some("org1".into()),
            "DAYTONA_TOOLBOX_URL" => Some("http://tb/toolbox".into()),
            _ => None,
        });
        assert_eq!(b.api_key.as_deref(), Some("dtn_k"));
        assert_eq!(b.api_url, "http://old/api");
        assert_eq!(b.target.as_deref(), Some("eu"));
        assert_eq!(b.organization_id.as_deref(), Some("org1"));
        assert_eq!(b.toolbox_url.as_deref(), Some("http://tb/toolbox"));
        let b = DaytonaBuilder::from_lookup(|name| match name {
            "DAYTONA_API_URL" => Some("http://new/api".into()),
            "DAYTONA_SERVER_URL" => Some("http://old/api".into()),
            _ => None,
        });
        assert_eq!(b.api_url, "http://new/api");
    }

    #[test]
    fn build_needs_credentials_and_a_new_enough_version() {
        let e = DaytonaBuilder::new().build().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Validation);
        let e = DaytonaBuilder::new().jwt_token("jwt").build().unwrap_err();
        assert!(e.message().contains("organization"));
        assert!(
            DaytonaBuilder::new()
                .jwt_token("jwt")
                .organization_id("o")
                .build()
                .is_ok()
        );
        let e = DaytonaBuilder::new()
            .api_key("k")
            .sdk_version("0.27.0")
            .build()
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Validation);
        assert!(
            DaytonaBuilder::new()
                .api_key("k")
                .sdk_version("garbage")
                .build()
                .is_err()
        );
        assert!(
            DaytonaBuilder::new()
                .api_key("k")
                .sdk_version("0.167.0")
                .build()
                .is_ok()
        );
        let e = DaytonaBuilder::new()
            .api_key("k")
            .api_url("ftp://x")
            .build()
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Validation);
    }
}
