//! [`VercelBuilder`]: configuration read from the environment or set in code, checked by a
//! fallible [`VercelBuilder::build`] into the resolved settings (`config::Settings`).

use crate::config::{
    DEFAULT_API_URL, DEFAULT_CREATE_LOOKUP_WINDOW, DEFAULT_MAX_RECONNECTS,
    DEFAULT_STREAM_IDLE_TIMEOUT, MAX_PORTS, PROVIDER, Settings, oidc_claims,
};
use crate::provider::VercelProvider;
use sandbox_sdk_core::idempotency::CreateLookup;
use sandbox_sdk_core::{Error, Result};
use std::fmt;
use std::time::Duration;

/// A Vercel Sandbox provider's configuration. `Debug` never shows the token.
///
/// Environment variables read by [`VercelBuilder::from_env`]:
///
/// | variable | meaning | default |
/// | --- | --- | --- |
/// | `VERCEL_TOKEN` | an access token (personal or team); needs the team and project below | one token required |
/// | `VERCEL_OIDC_TOKEN` | a project's OIDC token (a JWT, `vercel env pull`); its payload names the team (`owner_id`) and project (`project_id`). Read when `VERCEL_TOKEN` is unset | |
/// | `VERCEL_TEAM_ID` | the team (`team_…`), sent as `teamId` on every request | from the OIDC token |
/// | `VERCEL_PROJECT_ID` | the project sandboxes live in (`prj_…` or its slug) | from the OIDC token |
/// | `VERCEL_API_URL` | the REST API base URL | `https://api.vercel.com` |
/// | `VERCEL_REGION` | region of new sandboxes | Vercel's default |
///
/// The token is read once: an OIDC token is not refreshed (a development token from
/// `vercel env pull` lasts about 12 hours; rebuild the provider with a fresh one).
///
/// ```
/// use sandbox_vercel::VercelProvider;
///
/// let vercel = VercelProvider::builder()
///     .token("vercel-token")
///     .team_id("team_123")
///     .project_id("prj_456")
///     .expose_port(3000)
///     .build()
///     .unwrap();
/// assert_eq!(vercel.project_id(), "prj_456");
/// ```
#[derive(Clone)]
pub struct VercelBuilder {
    token: Option<String>,
    team_id: Option<String>,
    project_id: Option<String>,
    base_url: String,
    region: Option<String>,
    ports: Vec<u16>,
    request_timeout: Duration,
    stream_idle: Duration,
    max_reconnects: u32,
    stop_timeout: Duration,
    create_lookup: CreateLookup,
    file_mtime: Option<u64>,
}

impl VercelProvider {
    /// A builder with defaults and nothing read from the environment; see also
    /// [`VercelBuilder::from_env`] and [`VercelBuilder::from_lookup`].
    pub fn builder() -> VercelBuilder {
        VercelBuilder::empty()
    }
}

impl VercelBuilder {
    fn empty() -> Self {
        VercelBuilder {
            token: None,
            team_id: None,
            project_id: None,
            base_url: DEFAULT_API_URL.to_owned(),
            region: None,
            ports: Vec::new(),
            request_timeout: Duration::from_secs(30),
            stream_idle: DEFAULT_STREAM_IDLE_TIMEOUT,
            max_reconnects: DEFAULT_MAX_RECONNECTS,
            stop_timeout: Duration::from_secs(60),
            create_lookup: CreateLookup::new(DEFAULT_CREATE_LOOKUP_WINDOW),
            file_mtime: None,
        }
    }

    /// A builder filled from the environment variables listed on [`VercelBuilder`].
    pub fn from_env() -> Self {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Like [`VercelBuilder::from_env`], reading variables through `get` (for tests and
    /// embedding).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Self {
        let get = |name: &str| get(name).filter(|v| !v.trim().is_empty());
        let mut builder = Self::empty();
        builder.token = get("VERCEL_TOKEN").or_else(|| get("VERCEL_OIDC_TOKEN"));
        builder.team_id = get("VERCEL_TEAM_ID");
        builder.project_id = get("VERCEL_PROJECT_ID");
        if let Some(url) = get("VERCEL_API_URL") {
            builder.base_url = url;
        }
        builder.region = get("VERCEL_REGION");
        builder
    }

    /// Sets the token: an access token (then set the team and project too) or an OIDC token.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// Sets the team id (`team_…`); it wins over an OIDC token's.
    pub fn team_id(mut self, team_id: impl Into<String>) -> Self {
        self.team_id = Some(team_id.into());
        self
    }

    /// Sets the project (`prj_…` or its slug); it wins over an OIDC token's.
    pub fn project_id(mut self, project_id: impl Into<String>) -> Self {
        self.project_id = Some(project_id.into());
        self
    }

    /// Sets the API base URL (`https://api.vercel.com`, `https://vercel.com/api`, or a test
    /// server).
    pub fn api_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = url.into();
        self
    }

    /// Sets the region of new sandboxes (a create spec's region wins).
    pub fn region(mut self, region: impl Into<String>) -> Self {
        self.region = Some(region.into());
        self
    }

    /// Exposes `port` of every new sandbox at a public `https://<subdomain>.vercel.run` URL
    /// (PROTOCOL.md §8; at most 15). Ports are fixed when a sandbox is created.
    pub fn expose_port(mut self, port: u16) -> Self {
        if !self.ports.contains(&port) {
            self.ports.push(port);
        }
        self
    }

    /// Sets the timeout of ordinary API requests (default 30 s). Streams use the idle bound.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// The longest silence on a streamed answer (default [`DEFAULT_STREAM_IDLE_TIMEOUT`]): command
    /// output is then checked and reconnected, a file read fails.
    pub fn stream_idle_timeout(mut self, idle: Duration) -> Self {
        self.stream_idle = idle;
        self
    }

    /// How many fruitless reconnects in a row following a command allows (default
    /// [`DEFAULT_MAX_RECONNECTS`]).
    pub fn max_reconnects(mut self, reconnects: u32) -> Self {
        self.max_reconnects = reconnects;
        self
    }

    /// How long `stop` waits for the session to reach `stopped` (default 60 s).
    pub fn stop_timeout(mut self, timeout: Duration) -> Self {
        self.stop_timeout = timeout;
        self
    }

    /// How an ambiguous keyed create is settled (default: look the name up for
    /// [`DEFAULT_CREATE_LOOKUP_WINDOW`]). Vercel has no idempotency key; names are the dedupe
    /// key (PROTOCOL.md §4.2).
    pub fn create_lookup(mut self, lookup: CreateLookup) -> Self {
        self.create_lookup = lookup;
        self
    }

    /// The modification time (seconds since the epoch) written files carry in their tar
    /// header, instead of the time of the write (the default). Fixing it makes write requests
    /// byte for byte reproducible, as the replayed conformance suite needs.
    pub fn file_mtime(mut self, seconds: u64) -> Self {
        self.file_mtime = Some(seconds);
        self
    }

    /// Checks the configuration and builds the provider. A missing token, team or project is a
    /// `Validation` error naming the variable to set.
    pub fn build(self) -> Result<VercelProvider> {
        VercelProvider::new(self.settings()?)
    }

    fn settings(self) -> Result<Settings> {
        let invalid = |message: String| Error::validation(message).with_provider(PROVIDER);
        let Some(token) = self.token.filter(|t| !t.trim().is_empty()) else {
            return Err(invalid(
                "vercel: no token configured; set VERCEL_TOKEN (with VERCEL_TEAM_ID and \
                 VERCEL_PROJECT_ID) or VERCEL_OIDC_TOKEN, or call VercelBuilder::token"
                    .into(),
            ));
        };
        let token = token.trim().to_owned();
        let (oidc_team, oidc_project) = oidc_claims(&token).unwrap_or_default();
        let team_id = self.team_id.or(oidc_team).ok_or_else(|| {
            invalid(
                "vercel: no team configured; set VERCEL_TEAM_ID or call VercelBuilder::team_id \
                 (an OIDC token names its team itself)"
                    .into(),
            )
        })?;
        let project_id = self.project_id.or(oidc_project).ok_or_else(|| {
            invalid(
                "vercel: no project configured; set VERCEL_PROJECT_ID or call \
                 VercelBuilder::project_id (an OIDC token names its project itself)"
                    .into(),
            )
        })?;
        let base_url = self.base_url.trim().trim_end_matches('/').to_owned();
        if base_url.is_empty() {
            return Err(invalid("vercel: the API base URL is empty".into()));
        }
        if self.ports.len() > MAX_PORTS {
            return Err(invalid(format!(
                "vercel: {} ports exposed; a sandbox takes at most {MAX_PORTS}",
                self.ports.len()
            )));
        }
        if self.stream_idle.is_zero() {
            return Err(invalid(
                "vercel: the stream idle bound must not be zero".into(),
            ));
        }
        Ok(Settings {
            base_url,
            token,
            team_id,
            project_id,
            ports: self.ports,
            region: self.region,
            request_timeout: self.request_timeout,
            stream_idle: self.stream_idle,
            max_reconnects: self.max_reconnects,
            stop_timeout: self.stop_timeout,
            create_lookup: self.create_lookup,
            file_mtime: self.file_mtime,
        })
    }
}

impl fmt::Debug for VercelBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VercelBuilder")
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("team_id", &self.team_id)
            .field("project_id", &self.project_id)
            .field("base_url", &self.base_url)
            .field("region", &self.region)
            .field("ports", &self.ports)
            .field("request_timeout", &self.request_timeout)
            .field("stream_idle", &self.stream_idle)
            .field("max_reconnects", &self.max_reconnects)
            .field("stop_timeout", &self.stop_timeout)
            .field("create_lookup", &self.create_lookup)
            .field("file_mtime", &self.file_mtime)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;
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
        let s = VercelBuilder::from_lookup(vars(&[
            ("VERCEL_TOKEN", "tok"),
            ("VERCEL_TEAM_ID", "team_1"),
            ("VERCEL_PROJECT_ID", "prj_1"),
            ("VERCEL_API_URL", "https://vercel.com/api/"),
            ("VERCEL_REGION", "iad1"),
        ]))
        .settings()
        .unwrap();
        assert_eq!(s.token, "tok");
        assert_eq!(s.team_id, "team_1");
        assert_eq!(s.project_id, "prj_1");
        assert_eq!(s.base_url, "https://vercel.com/api");
        assert_eq!(s.region.as_deref(), Some("iad1"));
        let s = VercelBuilder::from_lookup(vars(&[
            ("VERCEL_TOKEN", "tok"),
            ("VERCEL_TEAM_ID", "t"),
            ("VERCEL_PROJECT_ID", "p"),
        ]))
        .settings()
        .unwrap();
        assert_eq!(s.base_url, DEFAULT_API_URL);
    }

    #[test]
    fn an_oidc_token_names_team_and_project_and_explicit_values_win() {
        let enc = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        let jwt = format!(
            "{}.{}.sig",
            enc("{}"),
            enc(r#"{"owner_id":"team_oidc","project_id":"prj_oidc"}"#)
        );
        let s = VercelBuilder::from_lookup(vars(&[("VERCEL_OIDC_TOKEN", &jwt)]))
            .settings()
            .unwrap();
        assert_eq!(
            (s.team_id.as_str(), s.project_id.as_str()),
            ("team_oidc", "prj_oidc")
        );
        let s = VercelBuilder::from_lookup(vars(&[
            ("VERCEL_OIDC_TOKEN", &jwt),
            ("VERCEL_PROJECT_ID", "prj_mine"),
        ]))
        .settings()
        .unwrap();
        assert_eq!(s.project_id, "prj_mine");
    }

    #[test]
    fn build_names_what_is_missing() {
        let e = VercelBuilder::empty().build().unwrap_err();
        assert!(e.message().contains("VERCEL_TOKEN"), "{e}");
        assert!(e.message().contains("VERCEL_OIDC_TOKEN"), "{e}");
        let e = VercelBuilder::empty().token("t").build().unwrap_err();
        assert!(e.message().contains("VERCEL_TEAM_ID"), "{e}");
        let e = VercelBuilder::empty()
            .token("t")
            .team_id("team")
            .build()
            .unwrap_err();
        assert!(e.message().contains("VERCEL_PROJECT_ID"), "{e}");
        assert_eq!(e.kind(), sandbox_sdk_core::ErrorKind::Validation);
        let mut b = VercelBuilder::empty()
            .token("t")
            .team_id("a")
            .project_id("b");
        for port in 1..=16 {
            b = b.expose_port(port);
        }
        assert!(b.build().unwrap_err().message().contains("at most 15"));
    }

    #[test]
    fn debug_hides_the_token() {
        let b = VercelBuilder::empty().token("canary-secret-token");
        assert!(!format!("{b:?}").contains("canary-secret-token"));
        let s = VercelBuilder::empty()
            .token("canary-secret-token")
            .team_id("t")
            .project_id("p")
            .settings()
            .unwrap();
        assert!(!format!("{s:?}").contains("canary-secret-token"));
    }
}
