//! [`SpritesBuilder`]: configuration read from the environment or set in code, checked by a
//! fallible [`SpritesBuilder::build`] into the resolved settings (`config::Settings`).

use crate::config::{
    DEFAULT_API_URL, DEFAULT_CREATE_LOOKUP_WINDOW, DEFAULT_CREATE_TIMEOUT, DEFAULT_DETACH_GRACE,
    DEFAULT_MAX_REATTACHES, DEFAULT_STREAM_IDLE_TIMEOUT, DEFAULT_URL_PORT, NameSource, PROVIDER,
    Settings,
};
use crate::provider::SpritesProvider;
use sandbox_sdk_core::idempotency::CreateLookup;
use sandbox_sdk_core::{Error, Result};
use std::fmt;
use std::time::Duration;

/// A Sprites provider's configuration. `Debug` never shows the token.
///
/// Environment variables read by [`SpritesBuilder::from_env`]:
///
/// | variable | meaning | default |
/// | --- | --- | --- |
/// | `SPRITES_TOKEN` | an organisation's Sprites API token (sprites.dev/account, `sprite org auth`) | required |
/// | `SPRITE_TOKEN` | read when `SPRITES_TOKEN` is unset (the name some docs use) | |
/// | `SPRITES_API_URL` | the API base URL | `https://api.sprites.dev` |
///
/// ```
/// use sandbox_sdk_core::Provider;
/// use sandbox_sprites::SpritesProvider;
///
/// let sprites = SpritesProvider::builder().token("sprites-token").build().unwrap();
/// assert_eq!(sprites.name(), "sprites");
/// ```
#[derive(Clone)]
pub struct SpritesBuilder {
    token: Option<String>,
    base_url: String,
    request_timeout: Duration,
    create_timeout: Duration,
    stream_idle: Duration,
    max_reattaches: u32,
    detach_grace: Duration,
    create_lookup: CreateLookup,
    public_url: bool,
    url_port: u16,
    wait_for_capacity: bool,
    names: Option<NameSource>,
}

impl SpritesProvider {
    /// A builder with defaults and nothing read from the environment; see also
    /// [`SpritesBuilder::from_env`] and [`SpritesBuilder::from_lookup`].
    pub fn builder() -> SpritesBuilder {
        SpritesBuilder::empty()
    }
}

impl SpritesBuilder {
    fn empty() -> Self {
        SpritesBuilder {
            token: None,
            base_url: DEFAULT_API_URL.to_owned(),
            request_timeout: Duration::from_secs(30),
            create_timeout: DEFAULT_CREATE_TIMEOUT,
            stream_idle: DEFAULT_STREAM_IDLE_TIMEOUT,
            max_reattaches: DEFAULT_MAX_REATTACHES,
            detach_grace: DEFAULT_DETACH_GRACE,
            create_lookup: CreateLookup::new(DEFAULT_CREATE_LOOKUP_WINDOW),
            public_url: false,
            url_port: DEFAULT_URL_PORT,
            wait_for_capacity: false,
            names: None,
        }
    }

    /// A builder filled from the environment variables listed on [`SpritesBuilder`].
    pub fn from_env() -> Self {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Like [`SpritesBuilder::from_env`], reading variables through `get` (for tests and
    /// embedding).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Self {
        let get = |name: &str| get(name).filter(|v| !v.trim().is_empty());
        let mut builder = Self::empty();
        builder.token = get("SPRITES_TOKEN").or_else(|| get("SPRITE_TOKEN"));
        if let Some(url) = get("SPRITES_API_URL") {
            builder.base_url = url;
        }
        builder
    }

    /// Sets the Sprites API token (it selects the organisation).
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// Sets the API base URL (`https://api.sprites.dev` or a test server); WebSockets use the
    /// same host with `ws`/`wss`.
    pub fn api_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = url.into();
        self
    }

    /// Sets the timeout of ordinary API requests (default 30 s). Streams use the idle bound,
    /// creates [`SpritesBuilder::create_timeout`].
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Sets how long a create may take (default [`DEFAULT_CREATE_TIMEOUT`], as the official
    /// SDKs allow); a keyed create that times out is then looked up, not sent again.
    pub fn create_timeout(mut self, timeout: Duration) -> Self {
        self.create_timeout = timeout;
        self
    }

    /// The longest silence on a command's socket or a streamed answer (default
    /// [`DEFAULT_STREAM_IDLE_TIMEOUT`]): a command is then re-attached, a file read fails.
    pub fn stream_idle_timeout(mut self, idle: Duration) -> Self {
        self.stream_idle = idle;
        self
    }

    /// How many fruitless re-attaches in a row following a command allows (default
    /// [`DEFAULT_MAX_REATTACHES`]).
    pub fn max_reattaches(mut self, reattaches: u32) -> Self {
        self.max_reattaches = reattaches;
        self
    }

    /// How long a foreground command outlives a dropped socket, so the adapter can re-attach
    /// (default [`DEFAULT_DETACH_GRACE`]; background commands run on until they end).
    pub fn detach_grace(mut self, grace: Duration) -> Self {
        self.detach_grace = grace;
        self
    }

    /// How an ambiguous keyed create is settled (default: look the name up for
    /// [`DEFAULT_CREATE_LOOKUP_WINDOW`]). Sprites has no idempotency key; names are the dedupe
    /// key (PROTOCOL.md §4.1).
    pub fn create_lookup(mut self, lookup: CreateLookup) -> Self {
        self.create_lookup = lookup;
        self
    }

    /// Makes new sprites' URLs public (`url_settings.auth = public`) so
    /// [`sandbox_sdk_core::Sandbox::preview_link`] can hand them out; by default a sprite's URL
    /// needs the organisation's token (PROTOCOL.md §9), which the adapter never gives away.
    pub fn public_url(mut self, public: bool) -> Self {
        self.public_url = public;
        self
    }

    /// The port a sprite's URL reaches (default [`DEFAULT_URL_PORT`], PROTOCOL.md §9).
    pub fn url_port(mut self, port: u16) -> Self {
        self.url_port = port;
        self
    }

    /// Makes creates wait for capacity instead of failing when the organisation's running
    /// limit is reached (`wait_for_capacity`, PROTOCOL.md §4.1).
    pub fn wait_for_capacity(mut self, wait: bool) -> Self {
        self.wait_for_capacity = wait;
        self
    }

    /// How a create that names no sprite names it (default: `sdk-` and 32 random hex digits).
    /// Fixed names make the requests reproducible, as the replayed conformance suite needs;
    /// each name must be new in the organisation.
    pub fn sprite_names(mut self, names: impl Fn() -> String + Send + Sync + 'static) -> Self {
        self.names = Some(std::sync::Arc::new(names));
        self
    }

    /// Checks the configuration and builds the provider. A missing token is a `Validation`
    /// error naming the variable to set.
    pub fn build(self) -> Result<SpritesProvider> {
        SpritesProvider::new(self.settings()?)
    }

    fn settings(self) -> Result<Settings> {
        let invalid = |message: String| Error::validation(message).with_provider(PROVIDER);
        let Some(token) = self.token.filter(|t| !t.trim().is_empty()) else {
            return Err(invalid(
                "sprites: no token configured; set SPRITES_TOKEN or call SpritesBuilder::token"
                    .into(),
            ));
        };
        let base_url = self.base_url.trim().trim_end_matches('/').to_owned();
        if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
            return Err(invalid(format!(
                "sprites: the API base URL {base_url:?} is not http(s)"
            )));
        }
        if self.stream_idle.is_zero() {
            return Err(invalid(
                "sprites: the stream idle bound must not be zero".into(),
            ));
        }
        Ok(Settings {
            base_url,
            token: token.trim().to_owned(),
            request_timeout: self.request_timeout,
            create_timeout: self.create_timeout,
            stream_idle: self.stream_idle,
            max_reattaches: self.max_reattaches,
            detach_grace: self.detach_grace,
            create_lookup: self.create_lookup,
            public_url: self.public_url,
            url_port: self.url_port,
            wait_for_capacity: self.wait_for_capacity,
            names: self.names,
        })
    }
}

impl fmt::Debug for SpritesBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpritesBuilder")
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("base_url", &self.base_url)
            .field("request_timeout", &self.request_timeout)
            .field("stream_idle", &self.stream_idle)
            .field("public_url", &self.public_url)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_comes_from_either_variable_and_is_required() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        let b = SpritesBuilder::from_lookup(env(&[("SPRITE_TOKEN", "t1")]));
        assert_eq!(b.settings().unwrap().token, "t1");
        let b = SpritesBuilder::from_lookup(env(&[
            ("SPRITE_TOKEN", "t1"),
            ("SPRITES_TOKEN", "t2"),
            ("SPRITES_API_URL", "http://127.0.0.1:9/"),
        ]));
        let s = b.settings().unwrap();
        assert_eq!(
            (s.token.as_str(), s.base_url.as_str()),
            ("t2", "http://127.0.0.1:9")
        );
        let err = SpritesBuilder::from_lookup(env(&[])).build().unwrap_err();
        assert!(err.message().contains("SPRITES_TOKEN"), "{err}");
        let debug = format!("{:?}", SpritesProvider::builder().token("canary-secret"));
        assert!(!debug.contains("canary-secret"));
    }
}
