//! The one HTTP transport the provider adapters share (feature `http`).
//!
//! An [`HttpClient`] holds a provider name, a base URL, the credentials and default headers, the
//! default timeouts and the adapter's one error-mapping function. Each call is a [`Request`]
//! built from it and sent with [`Request::send`], [`Request::send_json`] or
//! [`Request::send_empty`]; a non-2xx answer becomes an [`Error`] through the adapter's mapper
//! (or [`default_error_mapper`]). No reqwest or `http` type appears in this API.
//!
//! Decisions, for adapters to rely on:
//!
//! - **No retries here.** Retrying belongs to the client layer ([`crate::client`]); this module
//!   sends each request once.
//! - **Errors.** Connection refused or reset, TLS failures and bodies cut short are
//!   [`ErrorKind::Transport`] (retryable); a request past its timeout is [`ErrorKind::Timeout`];
//!   an invalid URL, header or body is [`ErrorKind::Validation`] and nothing is sent. Messages
//!   name the method, the URL *path* (never the query string, which may hold a signature) and the
//!   provider; never a header value.
//! - **Secrets.** Credentials set with [`HttpClientBuilder::bearer`],
//!   [`HttpClientBuilder::auth_header`] and [`Request::sensitive_header`] are marked sensitive
//!   and are never shown by any `Debug`; headers whose names look like credentials (see
//!   [`crate::redact::is_credential_name`]) are redacted too. Query values are never shown.
//! - **Timeouts.** The client's default timeout covers the whole exchange, body included; use
//!   [`Request::no_timeout`] for long streams and [`Request::timeout`] to override.
//! - **Redirects are never followed**: a 3xx answer goes to the mapper as an error. No provider
//!   API redirects, and following one would let a hostile server move a request (and its
//!   credentials) to another host, or on a shared host to another sandbox's path.
//! - **Compression.** No `Accept-Encoding` is sent unless the caller asks with
//!   `HttpClientBuilder::gzip(true)` (feature `gzip`).
//! - **TLS** is rustls with the webpki roots. The usual proxy variables (`HTTPS_PROXY`, ...)
//!   are honoured.
//! - **Request ids** are read from the header set with [`HttpClientBuilder::request_id_header`]
//!   (default `x-request-id`) on success and on error.
//!
//! ```no_run
//! # async fn demo() -> sandbox_sdk_core::Result<()> {
//! use sandbox_sdk_core::http::{HttpClient, Method};
//! use std::time::Duration;
//!
//! let client = HttpClient::builder("fly", "https://api.machines.dev/v1")
//!     .bearer("fly-token")
//!     .request_id_header("fly-request-id")
//!     .timeout(Duration::from_secs(30))
//!     .build()?;
//! let apps: serde_json::Value = client
//!     .request(Method::Get, "/apps")
//!     .query("org_slug", "personal")
//!     .operation("list")
//!     .send_json()
//!     .await?;
//! # let _ = apps; Ok(()) }
//! ```

mod error_response;
mod multipart;
mod preview_url;

pub use error_response::{
    BODY_TEXT_LIMIT, ERROR_BODY_LIMIT, ErrorResponse, Headers, default_error_kind,
    default_error_mapper, truncate,
};
pub use multipart::Multipart;
pub use preview_url::checked_preview_url;

use crate::error::{Error, ErrorKind, Result};
use crate::files::{ByteStream, UploadBody};
use bytes::Bytes;
use error_response::{CallSite, Stage, redact_serde_message};
use futures::StreamExt;
use reqwest::header::{HeaderName, HeaderValue};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};
use url::Url;

/// The largest answer read whole unless a request says otherwise ([`Request::max_body`]).
pub const DEFAULT_MAX_BODY: usize = 16 * 1024 * 1024;

/// The user agent sent when the adapter sets none.
pub const DEFAULT_USER_AGENT: &str = concat!("sandbox-sdk-rs/", env!("CARGO_PKG_VERSION"));

/// The request-id header read when the adapter sets none.
pub const DEFAULT_REQUEST_ID_HEADER: &str = "x-request-id";

/// An HTTP method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    /// `GET`
    Get,
    /// `POST`
    Post,
    /// `PUT`
    Put,
    /// `PATCH`
    Patch,
    /// `DELETE`
    Delete,
    /// `HEAD`
    Head,
}

impl Method {
    /// The method's name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Patch => "PATCH",
            Method::Delete => "DELETE",
            Method::Head => "HEAD",
        }
    }

    fn to_reqwest(self) -> reqwest::Method {
        match self {
            Method::Get => reqwest::Method::GET,
            Method::Post => reqwest::Method::POST,
            Method::Put => reqwest::Method::PUT,
            Method::Patch => reqwest::Method::PATCH,
            Method::Delete => reqwest::Method::DELETE,
            Method::Head => reqwest::Method::HEAD,
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A streamed request body: a [`ByteStream`] or an [`UploadBody`] reader, read as it is sent.
pub enum StreamBody {
    /// Chunks from a stream.
    Stream(ByteStream),
    /// Bytes from an async reader.
    Reader(UploadBody),
}

/// How much of an [`UploadBody`] reader is read per body chunk. `ReaderStream`'s default of 4 KiB
/// made a file upload one blocking-pool read per 4 KiB, about 12x slower than 256 KiB reads
/// (`cargo xtask bench`, `BENCHMARKS.md`); memory stays constant either way.
const READER_CHUNK: usize = 256 * 1024;

impl StreamBody {
    /// The body as chunks; a reader is read 256 KiB at a time (use this, not
    /// `ReaderStream::new`, to wrap an [`UploadBody`], e.g. to count or inspect what is sent).
    pub fn into_stream(self) -> ByteStream {
        match self {
            StreamBody::Stream(stream) => stream,
            StreamBody::Reader(reader) => {
                tokio_util::io::ReaderStream::with_capacity(reader, READER_CHUNK)
                    .map(|chunk| chunk.map_err(Error::from))
                    .boxed()
            }
        }
    }

    /// The body for reqwest; each chunk taken counts as progress for an idle bound.
    fn into_reqwest(self, progress: Option<Progress>) -> reqwest::Body {
        let stream = self.into_stream();
        match progress {
            Some(progress) => reqwest::Body::wrap_stream(stream.inspect(move |_| progress.touch())),
            None => reqwest::Body::wrap_stream(stream),
        }
    }
}

impl From<ByteStream> for StreamBody {
    fn from(stream: ByteStream) -> Self {
        StreamBody::Stream(stream)
    }
}

impl From<UploadBody> for StreamBody {
    fn from(reader: UploadBody) -> Self {
        StreamBody::Reader(reader)
    }
}

impl fmt::Debug for StreamBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StreamBody::Stream(_) => "StreamBody::Stream",
            StreamBody::Reader(_) => "StreamBody::Reader",
        })
    }
}

type Mapper = Arc<dyn Fn(&ErrorResponse) -> Error + Send + Sync>;

/// One header line, checked and ready to send.
#[derive(Clone)]
struct HeaderLine {
    name: HeaderName,
    value: HeaderValue,
    /// Never shown.
    sensitive: bool,
    /// A credential: dropped by [`Request::without_auth`].
    auth: bool,
}

impl HeaderLine {
    fn new(name: &str, value: &str, sensitive: bool, auth: bool) -> Result<Self> {
        let header_name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
            Error::validation(format!(
                "invalid HTTP header name {:?}",
                name_for_message(name)
            ))
        })?;
        let mut header_value = HeaderValue::from_str(value).map_err(|_| {
            Error::validation(format!(
                "invalid value for HTTP header {header_name}: control characters or non-ASCII bytes"
            ))
        })?;
        let sensitive = sensitive || crate::redact::is_credential_name(name);
        header_value.set_sensitive(sensitive);
        Ok(HeaderLine {
            name: header_name,
            value: header_value,
            sensitive,
            auth,
        })
    }
}

/// A header name for an error message: cut short and stripped of control characters.
fn name_for_message(name: &str) -> String {
    error_response::truncate(
        &name.chars().filter(|c| !c.is_control()).collect::<String>(),
        64,
    )
}

/// Shows header names and non-sensitive values.
struct HeaderLines<'a>(&'a [HeaderLine]);

impl fmt::Debug for HeaderLines<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.iter().map(|h| {
                let shown = if h.sensitive {
                    "<redacted>"
                } else {
                    h.value.to_str().unwrap_or("<binary>")
                };
                (h.name.as_str(), shown)
            }))
            .finish()
    }
}

/// A URL for messages and `Debug`: scheme, host, port and path; no user info, no query.
fn redacted_url(url: &Url) -> String {
    let mut out = format!("{}://{}", url.scheme(), url.host_str().unwrap_or(""));
    if let Some(port) = url.port() {
        out.push_str(&format!(":{port}"));
    }
    out.push_str(url.path());
    out
}

fn parse_base_url(provider: &str, base: &str) -> Result<Url> {
    let trimmed = base.trim().trim_end_matches('/');
    let url = Url::parse(trimmed).map_err(|e| {
        Error::validation(format!("invalid base URL for {provider}: {e}")).with_provider(provider)
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(Error::validation(format!(
            "invalid base URL for {provider}: scheme {:?} is not http or https",
            url.scheme()
        ))
        .with_provider(provider));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(
            Error::validation(format!("invalid base URL for {provider}: no host"))
                .with_provider(provider),
        );
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(Error::validation(format!(
            "invalid base URL for {provider}: it must not have a query string or fragment"
        ))
        .with_provider(provider));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(Error::validation(format!(
            "invalid base URL for {provider}: credentials in the URL are not supported, use bearer() or auth_header()"
        ))
        .with_provider(provider));
    }
    Ok(url)
}

/// Builds an [`HttpClient`]; see [`HttpClient::builder`]. Setter errors (a bad header name or
/// value) are reported by [`HttpClientBuilder::build`].
pub struct HttpClientBuilder {
    provider: String,
    base_url: String,
    headers: Vec<std::result::Result<HeaderLine, String>>,
    timeout: Option<Duration>,
    connect_timeout: Option<Duration>,
    request_id_header: String,
    user_agent: String,
    mapper: Option<Mapper>,
    http1_only: bool,
    root_certificates: Vec<Vec<u8>>,
    #[cfg(feature = "gzip")]
    gzip: bool,
}

impl HttpClientBuilder {
    fn push_header(mut self, name: &str, value: &str, sensitive: bool, auth: bool) -> Self {
        // Replace an earlier line of the same name, so `bearer` twice keeps one Authorization.
        self.headers.retain(|h| match h {
            Ok(line) => !line.name.as_str().eq_ignore_ascii_case(name),
            Err(_) => true,
        });
        self.headers.push(
            HeaderLine::new(name, value, sensitive, auth).map_err(|e| e.message().to_owned()),
        );
        self
    }

    /// Sends `Authorization: Bearer <token>` on every request. The token is never shown.
    pub fn bearer(self, token: impl Into<String>) -> Self {
        let value = format!("Bearer {}", token.into());
        self.push_header("authorization", &value, true, true)
    }

    /// Sends a credential header (`X-API-Key`, ...) on every request. The value is never shown.
    pub fn auth_header(self, name: &str, secret: impl Into<String>) -> Self {
        let secret = secret.into();
        self.push_header(name, &secret, true, true)
    }

    /// Sends a header on every request.
    pub fn header(self, name: &str, value: &str) -> Self {
        self.push_header(name, value, false, false)
    }

    /// The timeout of each request, body included, unless the request sets its own. Default:
    /// none.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Asks for gzip responses and decodes them (feature `gzip`; off unless called with `true`).
    #[cfg(feature = "gzip")]
    #[cfg_attr(docsrs, doc(cfg(feature = "gzip")))]
    pub fn gzip(mut self, enabled: bool) -> Self {
        self.gzip = enabled;
        self
    }

    /// Speaks only HTTP/1.1, never HTTP/2, even where the server offers it. For servers whose
    /// HTTP/2 framing trips hyper's limits (E2B's sandbox proxy pads bodies with empty DATA
    /// frames, which hyper answers with `ENHANCE_YOUR_CALM` after 100). Default: off.
    pub fn http1_only(mut self, enabled: bool) -> Self {
        self.http1_only = enabled;
        self
    }

    /// Also trusts the certificate authorities in `pem` (one or more PEM certificates), besides
    /// the webpki roots:
    /// for self-hosted services behind a private CA, and for loopback TLS servers in tests.
    pub fn root_certificate_pem(mut self, pem: &[u8]) -> Self {
        self.root_certificates.push(pem.to_vec());
        self
    }

    /// How long to wait for a connection. Default: none (the OS decides).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// The response header that carries the provider's request id (default `x-request-id`).
    pub fn request_id_header(mut self, name: &str) -> Self {
        self.request_id_header = name.to_ascii_lowercase();
        self
    }

    /// The `User-Agent` to send (default [`DEFAULT_USER_AGENT`]).
    pub fn user_agent(mut self, user_agent: &str) -> Self {
        self.user_agent = user_agent.to_owned();
        self
    }

    /// The adapter's one mapping from a non-2xx answer to an [`Error`]. Provider, operation,
    /// sandbox id, status, request id and `Retry-After` are filled in afterwards where the
    /// mapper left them unset. Without a mapper, [`default_error_mapper`] is used.
    pub fn error_mapper(
        mut self,
        mapper: impl Fn(&ErrorResponse) -> Error + Send + Sync + 'static,
    ) -> Self {
        self.mapper = Some(Arc::new(mapper));
        self
    }

    /// Builds the client. Fails with [`ErrorKind::Validation`] for a bad base URL (not http or
    /// https, no host, a query string or credentials in it) or a bad header, and with
    /// [`ErrorKind::Transport`] when the TLS backend cannot start.
    pub fn build(self) -> Result<HttpClient> {
        let provider = self.provider;
        let base = parse_base_url(&provider, &self.base_url)?;
        let mut headers = Vec::with_capacity(self.headers.len());
        for header in self.headers {
            headers.push(
                header.map_err(|message| {
                    Error::validation(message).with_provider(provider.clone())
                })?,
            );
        }
        let user_agent = HeaderValue::from_str(&self.user_agent).map_err(|_| {
            Error::validation("invalid user agent: control characters or non-ASCII bytes")
                .with_provider(provider.clone())
        })?;
        let mut builder = reqwest::Client::builder()
            .use_rustls_tls()
            .user_agent(user_agent)
            .redirect(reqwest::redirect::Policy::none());
        // reqwest asks for gzip whenever its feature is compiled in; we ask only when told to.
        #[cfg(feature = "gzip")]
        {
            builder = builder.gzip(self.gzip);
        }
        if let Some(timeout) = self.connect_timeout {
            builder = builder.connect_timeout(timeout);
        }
        if self.http1_only {
            builder = builder.http1_only();
        }
        for pem in &self.root_certificates {
            let certificates = reqwest::Certificate::from_pem_bundle(pem)
                .ok()
                .filter(|c| !c.is_empty())
                .ok_or_else(|| {
                    Error::validation("the root certificate is not a PEM certificate")
                        .with_provider(provider.clone())
                })?;
            for certificate in certificates {
                builder = builder.add_root_certificate(certificate);
            }
        }
        let client = builder.build().map_err(|e| {
            Error::new(
                ErrorKind::Transport,
                format!("could not start the HTTP client for {provider}"),
            )
            .with_provider(provider.clone())
            .with_source(e.without_url())
        })?;
        Ok(HttpClient {
            inner: Arc::new(ClientInner {
                shared: Arc::new(Shared {
                    provider,
                    client,
                    headers,
                    timeout: self.timeout,
                    connect_timeout: self.connect_timeout,
                    request_id_header: self.request_id_header,
                    mapper: self.mapper,
                }),
                base,
            }),
        })
    }
}

impl fmt::Debug for HttpClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lines: Vec<HeaderLine> = self.headers.iter().filter_map(|h| h.clone().ok()).collect();
        f.debug_struct("HttpClientBuilder")
            .field("provider", &self.provider)
            .field(
                "base_url",
                &Url::parse(self.base_url.trim())
                    .map(|u| redacted_url(&u))
                    .unwrap_or_else(|_| "<invalid URL>".to_owned()),
            )
            .field("headers", &HeaderLines(&lines))
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_id_header", &self.request_id_header)
            .field("user_agent", &self.user_agent)
            .field("error_mapper", &self.mapper.is_some())
            .finish()
    }
}

/// What every client made from one builder shares.
struct Shared {
    provider: String,
    client: reqwest::Client,
    headers: Vec<HeaderLine>,
    timeout: Option<Duration>,
    connect_timeout: Option<Duration>,
    request_id_header: String,
    mapper: Option<Mapper>,
}

struct ClientInner {
    shared: Arc<Shared>,
    base: Url,
}

/// A configured HTTP client for one provider. Cheap to clone (one `Arc`); clones share the
/// connection pool. `Debug` never shows credentials.
#[derive(Clone)]
pub struct HttpClient {
    inner: Arc<ClientInner>,
}

impl HttpClient {
    /// Starts a builder for `provider` (used in error messages) talking to `base_url`. Request
    /// paths are appended to the base URL, keeping its path prefix.
    pub fn builder(provider: &str, base_url: &str) -> HttpClientBuilder {
        HttpClientBuilder {
            provider: provider.to_owned(),
            base_url: base_url.to_owned(),
            headers: Vec::new(),
            timeout: None,
            connect_timeout: None,
            request_id_header: DEFAULT_REQUEST_ID_HEADER.to_owned(),
            user_agent: DEFAULT_USER_AGENT.to_owned(),
            mapper: None,
            http1_only: false,
            root_certificates: Vec::new(),
            #[cfg(feature = "gzip")]
            gzip: false,
        }
    }

    /// A request to `path` under the base URL: `https://api.machines.dev/v1` and `/apps/x` give
    /// `https://api.machines.dev/v1/apps/x`. The path is used as given (encode ids with
    /// [`encode_path_segment`]); a `?query` in it is kept.
    pub fn request(&self, method: Method, path: &str) -> Request {
        let base = self.inner.base.as_str().trim_end_matches('/');
        let joined = if path.is_empty() {
            base.to_owned()
        } else if path.starts_with('/') {
            format!("{base}{path}")
        } else {
            format!("{base}/{path}")
        };
        let shown = || error_response::truncate(path.split('?').next().unwrap_or(""), 200);
        let url = if has_dot_segment(path) {
            Err(format!(
                "invalid request path {:?}: a `.` or `..` segment would leave the route (check the ids put into it)",
                shown()
            ))
        } else {
            Url::parse(&joined)
                .map_err(|e| format!("invalid request path {:?}: {e}", shown()))
                .and_then(|url| {
                    let base = &self.inner.base;
                    if url.origin() == base.origin() && url.path().starts_with(base.path()) {
                        Ok(url)
                    } else {
                        Err(format!(
                            "invalid request path {:?}: it leaves the base URL",
                            shown()
                        ))
                    }
                })
        };
        Request::new(self.clone(), method, url)
    }

    /// A request to an absolute URL (another host of the same provider, a signed URL), with the
    /// same credentials, headers and timeouts. Use [`Request::without_auth`] when the URL carries
    /// its own authorization.
    pub fn request_url(&self, method: Method, url: &str) -> Request {
        let url = Url::parse(url)
            .map_err(|e| format!("invalid request URL: {e}"))
            .and_then(|u| {
                if matches!(u.scheme(), "http" | "https") {
                    Ok(u)
                } else {
                    Err(format!(
                        "invalid request URL: scheme {:?} is not http or https",
                        u.scheme()
                    ))
                }
            });
        Request::new(self.clone(), method, url)
    }

    /// The base URL, without a trailing slash.
    pub fn base_url(&self) -> &str {
        self.inner.base.as_str().trim_end_matches('/')
    }

    /// The provider name.
    pub fn provider(&self) -> &str {
        &self.inner.shared.provider
    }

    /// The same client (credentials, headers, timeouts, mapper, connection pool) with another
    /// base URL, e.g. a sandbox's own host.
    pub fn with_base_url(&self, base: &str) -> Result<HttpClient> {
        let base = parse_base_url(&self.inner.shared.provider, base)?;
        Ok(HttpClient {
            inner: Arc::new(ClientInner {
                shared: self.inner.shared.clone(),
                base,
            }),
        })
    }

    /// The default timeout of each request, when set.
    pub fn timeout(&self) -> Option<Duration> {
        self.inner.shared.timeout
    }
}

impl fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shared = &self.inner.shared;
        f.debug_struct("HttpClient")
            .field("provider", &shared.provider)
            .field("base_url", &self.base_url())
            .field("headers", &HeaderLines(&shared.headers))
            .field("timeout", &shared.timeout)
            .field("connect_timeout", &shared.connect_timeout)
            .field("request_id_header", &shared.request_id_header)
            .field("error_mapper", &shared.mapper.is_some())
            .finish()
    }
}

/// Whether the path part of `path` has a `.` or `..` segment (also percent-encoded), which URL
/// parsing would resolve and so change the route.
fn has_dot_segment(path: &str) -> bool {
    let path = path.split(['?', '#']).next().unwrap_or("");
    path.split(['/', '\\']).any(|segment| {
        let decoded = segment.to_ascii_lowercase().replace("%2e", ".");
        decoded == "." || decoded == ".."
    })
}

/// Checks an address a provider's answer hands us (a toolbox proxy URL, a sandbox's envd URL)
/// before any credential is sent to it: it must parse, carry no user info, query or fragment,
/// and use `https` — or `http` only when `configured_base` (the address the caller chose) is
/// `http` too, as for loopback test servers. A hostile or broken answer cannot downgrade the
/// connection or smuggle URL syntax into later requests. Returns the address without a trailing
/// `/`.
///
/// ```
/// use sandbox_sdk_core::http::checked_answer_url;
/// let base = "https://app.daytona.io/api";
/// assert!(checked_answer_url("https://proxy.app.daytona.io/toolbox", base).is_ok());
/// assert!(checked_answer_url("http://proxy.app.daytona.io/toolbox", base).is_err());
/// assert!(checked_answer_url("https://x@evil.example/toolbox", base).is_err());
/// ```
pub fn checked_answer_url(candidate: &str, configured_base: &str) -> Result<String> {
    let refuse = |why: &str| {
        Error::new(
            ErrorKind::Provider,
            format!("the provider answered with an address this SDK will not use: {why}"),
        )
        .with_retryable(false)
    };
    let url = Url::parse(candidate.trim()).map_err(|_| refuse("it is not a URL"))?;
    let base_is_http = Url::parse(configured_base).is_ok_and(|b| b.scheme() == "http");
    match url.scheme() {
        "https" => {}
        "http" if base_is_http => {}
        "http" => return Err(refuse("it is plain http, where https was configured")),
        _ => return Err(refuse("its scheme is not https")),
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(refuse("it has no host"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(refuse("it carries user info"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(refuse("it carries a query string or fragment"));
    }
    Ok(url.as_str().trim_end_matches('/').to_owned())
}

/// Checks a host name a provider's answer hands us (E2B's sandbox `domain`): letters, digits,
/// `-` and `.` only, so it cannot carry a scheme, port, path, user info or another host.
pub fn checked_answer_host(candidate: &str) -> Result<&str> {
    let ok = !candidate.is_empty()
        && candidate.len() <= 253
        && candidate
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
        && !candidate.starts_with(['.', '-']);
    if ok {
        Ok(candidate)
    } else {
        Err(Error::new(
            ErrorKind::Provider,
            "the provider answered with a host name this SDK will not use: only letters, digits, '-' and '.' are allowed",
        )
        .with_retryable(false))
    }
}

/// Joins `path` onto `base` (a preview link's URL) and checks the result still has `base`'s
/// scheme, host and port, so a path such as `@other-host/x` cannot move the request (and the
/// link's token) to another host. `path` must be empty or start with `/`.
///
/// ```
/// use sandbox_sdk_core::http::join_same_origin;
/// let base = "https://3000-sb.proxy.example.com";
/// assert_eq!(join_same_origin(base, "/api?q=1").unwrap(), "https://3000-sb.proxy.example.com/api?q=1");
/// assert!(join_same_origin(base, "@127.0.0.1:9/steal").is_err());
/// assert!(join_same_origin(base, "//evil.example/x").is_err());
/// ```
pub fn join_same_origin(base: &str, path: &str) -> Result<String> {
    let refuse =
        |why: &str| Error::validation(format!("invalid path {:?}: {why}", name_for_message(path)));
    if !(path.is_empty() || path.starts_with('/')) || path.starts_with("//") {
        return Err(refuse("it must be empty or start with a single '/'"));
    }
    let base_url =
        Url::parse(base).map_err(|_| Error::validation("the link's URL is not a URL"))?;
    let joined = format!("{}{path}", base.trim_end_matches('/'));
    let url = Url::parse(&joined).map_err(|_| refuse("it does not make a URL"))?;
    let origin = |u: &Url| {
        (
            u.scheme().to_owned(),
            u.host_str().map(str::to_owned),
            u.port_or_known_default(),
        )
    };
    if origin(&url) != origin(&base_url) || !url.username().is_empty() || url.password().is_some() {
        return Err(refuse("it would leave the link's host"));
    }
    Ok(joined)
}

/// The WebSocket form of an API base URL: `https://` becomes `wss://`, `http://` becomes
/// `ws://`, a trailing `/` is dropped; anything else is a `Validation` error.
///
/// ```
/// use sandbox_sdk_core::http::websocket_base;
/// assert_eq!(websocket_base("https://api.example.com/").unwrap(), "wss://api.example.com");
/// assert_eq!(websocket_base("http://127.0.0.1:9/t").unwrap(), "ws://127.0.0.1:9/t");
/// assert!(websocket_base("ftp://x").is_err());
/// ```
pub fn websocket_base(base: &str) -> Result<String> {
    let swapped = if let Some(rest) = base.strip_prefix("https://") {
        format!("wss://{rest}")
    } else if let Some(rest) = base.strip_prefix("http://") {
        format!("ws://{rest}")
    } else {
        return Err(Error::validation(format!(
            "URL {base:?} is not http or https"
        )));
    };
    Ok(swapped.trim_end_matches('/').to_owned())
}

/// Percent-encodes one path segment: everything but `A-Z a-z 0-9 - . _ ~` is escaped, so a `/`
/// in an id cannot change the route. (An id of `.` or `..` cannot be escaped; [`HttpClient::request`]
/// rejects such paths.)
pub fn encode_path_segment(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for b in segment.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

enum Body {
    None,
    Bytes(Bytes, String),
    Json(std::result::Result<Vec<u8>, String>),
    Stream(StreamBody, String, Option<u64>),
    Multipart(Multipart),
}

#[derive(Clone, Copy, Debug)]
enum TimeoutChoice {
    Default,
    Fixed(Duration),
    Unlimited,
    /// No total limit: the head within the client's timeout of the last body chunk sent, then
    /// each response chunk within the given idle bound of the previous one.
    Idle(Duration),
}

/// When the last request-body chunk of an idle-bounded request was handed to the connection.
#[derive(Clone)]
pub(crate) struct Progress(Arc<std::sync::Mutex<tokio::time::Instant>>);

impl Progress {
    fn new() -> Self {
        Progress(Arc::new(std::sync::Mutex::new(tokio::time::Instant::now())))
    }

    fn touch(&self) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = tokio::time::Instant::now();
    }

    fn last(&self) -> tokio::time::Instant {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `future` until it ends, or `None` once `limit` passes with no progress.
    async fn bound<F: std::future::Future>(&self, limit: Duration, future: F) -> Option<F::Output> {
        tokio::pin!(future);
        loop {
            let deadline = self.last() + limit;
            tokio::select! {
                out = &mut future => return Some(out),
                () = tokio::time::sleep_until(deadline) => {
                    if self.last() + limit <= tokio::time::Instant::now() {
                        return None;
                    }
                }
            }
        }
    }
}

/// One request being built. Nothing is sent until [`Request::send`] (or `send_json`,
/// `send_empty`). Errors in the builder calls (a bad header, a body that fails to serialize)
/// are reported by `send` as [`ErrorKind::Validation`], and nothing is sent.
///
/// `Debug` shows the method, the URL without query values, header names and non-sensitive
/// values, and the body's kind.
pub struct Request {
    client: HttpClient,
    method: Method,
    url: std::result::Result<Url, String>,
    query: Vec<(String, String)>,
    headers: Vec<std::result::Result<HeaderLine, String>>,
    body: Body,
    timeout: TimeoutChoice,
    operation: Option<String>,
    sandbox_id: Option<String>,
    with_auth: bool,
    max_body: usize,
    /// Values in the URL path that messages and traces must not show.
    path_secrets: Vec<String>,
}

impl Request {
    fn new(client: HttpClient, method: Method, url: std::result::Result<Url, String>) -> Self {
        Request {
            client,
            method,
            url,
            query: Vec::new(),
            headers: Vec::new(),
            body: Body::None,
            timeout: TimeoutChoice::Default,
            operation: None,
            sandbox_id: None,
            with_auth: true,
            max_body: DEFAULT_MAX_BODY,
            path_secrets: Vec::new(),
        }
    }

    /// Adds a query parameter (repeatable: `?a=1&a=2`). Values are encoded; they are never shown
    /// in messages or `Debug`.
    pub fn query(mut self, key: &str, value: impl ToString) -> Self {
        self.query.push((key.to_owned(), value.to_string()));
        self
    }

    /// Adds a header to this request (after, and in addition to, the client's defaults).
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers
            .push(HeaderLine::new(name, value, false, false).map_err(|e| e.message().to_owned()));
        self
    }

    /// Adds a header whose value is a secret: never shown, marked sensitive on the wire.
    pub fn sensitive_header(mut self, name: &str, value: &str) -> Self {
        self.headers
            .push(HeaderLine::new(name, value, true, false).map_err(|e| e.message().to_owned()));
        self
    }

    /// Leaves out the client's credentials ([`HttpClientBuilder::bearer`],
    /// [`HttpClientBuilder::auth_header`]), e.g. for a signed URL on another host.
    pub fn without_auth(mut self) -> Self {
        self.with_auth = false;
        self
    }

    /// Sends `body` as JSON with `Content-Type: application/json`.
    pub fn json<T: Serialize + ?Sized>(mut self, body: &T) -> Self {
        self.body = Body::Json(serde_json::to_vec(body).map_err(|e| {
            format!(
                "could not encode the request body as JSON: {}",
                redact_serde_message(&e.to_string())
            )
        }));
        self
    }

    /// Sends `bytes` with the given content type.
    pub fn body(mut self, bytes: impl Into<Bytes>, content_type: &str) -> Self {
        self.body = Body::Bytes(bytes.into(), content_type.to_owned());
        self
    }

    /// Streams the body from a [`ByteStream`] or an [`UploadBody`] reader in constant memory,
    /// with chunked transfer encoding.
    pub fn body_stream(mut self, body: impl Into<StreamBody>, content_type: &str) -> Self {
        self.body = Body::Stream(body.into(), content_type.to_owned(), None);
        self
    }

    /// Streams the body like [`Request::body_stream`], announcing its exact length with
    /// `Content-Length` (for servers that refuse chunked uploads). The stream must yield exactly
    /// `length` bytes.
    pub fn body_stream_with_length(
        mut self,
        body: impl Into<StreamBody>,
        content_type: &str,
        length: u64,
    ) -> Self {
        self.body = Body::Stream(body.into(), content_type.to_owned(), Some(length));
        self
    }

    /// Sends a `multipart/form-data` body.
    pub fn multipart(mut self, form: Multipart) -> Self {
        self.body = Body::Multipart(form);
        self
    }

    /// The timeout of this request, body included, instead of the client's default.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = TimeoutChoice::Fixed(timeout);
        self
    }

    /// Overrides the timeout when `timeout` is `Some` (e.g. [`crate::Command::request_timeout`]).
    pub fn timeout_opt(self, timeout: Option<Duration>) -> Self {
        match timeout {
            Some(t) => self.timeout(t),
            None => self,
        }
    }

    /// No total timeout, but no silence either: for transfers and long-lived streams. The
    /// response head must arrive within the client's timeout (or `idle`, when the client has
    /// none) of the last request-body chunk being sent, and each response-body chunk within
    /// `idle` of the previous one. A silent head is [`ErrorKind::Timeout`]; a body that goes
    /// silent ends with [`ErrorKind::Transport`]. Large transfers still work: only silence ends
    /// them.
    pub fn idle_timeout(mut self, idle: Duration) -> Self {
        self.timeout = TimeoutChoice::Idle(idle);
        self
    }

    /// A value the URL path carries that must never be shown (a token the API takes only as a
    /// path segment): error messages and `tracing` events write `<redacted>` for it, plain or
    /// percent-encoded. It is also scrubbed from echoed error bodies.
    pub fn path_secret(mut self, value: &str) -> Self {
        self.path_secrets.push(value.to_owned());
        self
    }

    /// The largest answer [`Response::bytes`], [`Response::text`] and [`Response::json`] read
    /// whole (default [`DEFAULT_MAX_BODY`]); a larger one is an error before it is read, so a
    /// hostile server cannot exhaust memory. Streams ([`Response::bytes_stream`]) are not capped:
    /// their reader holds one chunk at a time.
    pub fn max_body(mut self, bytes: usize) -> Self {
        self.max_body = bytes;
        self
    }

    /// No timeout at all. Prefer [`Request::idle_timeout`]: a request without any bound waits
    /// forever on a silent server.
    pub fn no_timeout(mut self) -> Self {
        self.timeout = TimeoutChoice::Unlimited;
        self
    }

    /// The operation this request belongs to, for errors (`create`, `exec`, ...).
    pub fn operation(mut self, operation: &str) -> Self {
        self.operation = Some(operation.to_owned());
        self
    }

    /// The sandbox this request is aimed at, for errors.
    pub fn sandbox_id(mut self, id: &str) -> Self {
        self.sandbox_id = Some(id.to_owned());
        self
    }

    /// The credential values this request carries, to scrub from error bodies.
    fn secrets(&self) -> Vec<String> {
        let shared = &self.client.inner.shared;
        let mut secrets = Vec::new();
        let lines = shared
            .headers
            .iter()
            .filter(|h| !h.auth || self.with_auth)
            .chain(self.headers.iter().filter_map(|h| h.as_ref().ok()));
        for line in lines.filter(|h| h.sensitive) {
            let Ok(value) = line.value.to_str() else {
                continue;
            };
            secrets.push(value.to_owned());
            // `Bearer <token>`, `Basic <blob>`: the credential alone may be echoed too.
            if let Some((_, credential)) = value.rsplit_once(' ') {
                secrets.push(credential.to_owned());
            }
        }
        secrets.extend(self.path_secrets.iter().cloned());
        secrets.retain(|s| s.len() >= crate::redact::MIN_SECRET_LEN);
        // Longest first, so a whole `Bearer x` is replaced before its tail.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets
    }

    fn path_for_messages(&self) -> String {
        let mut path = match &self.url {
            Ok(url) => url.path().to_owned(),
            Err(_) => return "<invalid URL>".to_owned(),
        };
        for secret in &self.path_secrets {
            for form in [secret.clone(), encode_path_segment(secret)] {
                if !form.is_empty() {
                    path = path.replace(&form, "<redacted>");
                }
            }
        }
        path
    }

    fn call_site(&self) -> CallSite {
        CallSite {
            provider: self.client.inner.shared.provider.clone(),
            method: self.method.as_str(),
            path: self.path_for_messages(),
            operation: self.operation.clone(),
            sandbox_id: self.sandbox_id.clone(),
        }
    }

    /// Sends the request. A 2xx answer is returned as a [`Response`]; any other status goes
    /// through the client's error mapper, then provider, operation, sandbox id, status, request
    /// id and `Retry-After` are filled in where the mapper left them unset.
    pub async fn send(self) -> Result<Response> {
        let site = self.call_site();
        let shared = self.client.inner.shared.clone();
        let secrets = self.secrets();
        let idle = match self.timeout {
            TimeoutChoice::Idle(idle) => Some(idle),
            _ => None,
        };
        let max_body = self.max_body;
        let (prepared, progress) = self.prepare(&site, &shared)?;
        let started = Instant::now();
        let result = match (&progress, idle) {
            (Some(progress), Some(idle)) => {
                let head = shared.timeout.unwrap_or(idle);
                match progress.bound(head, prepared.send()).await {
                    Some(result) => result.map_err(|e| site.transport_error(Stage::Request, e)),
                    None => Err(site.context(
                        Error::new(
                            ErrorKind::Timeout,
                            format!(
                                "{} {}: no response within {head:?} of the request being sent",
                                site.method, site.path
                            ),
                        )
                        .with_ambiguous(true),
                    )),
                }
            }
            _ => prepared
                .send()
                .await
                .map_err(|e| site.transport_error(Stage::Request, e)),
        };
        let elapsed_ms = started.elapsed().as_millis() as u64;
        let response = match result {
            Ok(response) => response,
            Err(error) => {
                tracing::debug!(
                    provider = %site.provider,
                    method = site.method,
                    path = %site.path,
                    operation = site.operation.as_deref(),
                    elapsed_ms,
                    kind = %error.kind(),
                    "http request failed"
                );
                return Err(error);
            }
        };
        let status = response.status().as_u16();
        let headers = Headers::from_reqwest(response.headers());
        let request_id = headers.get(&shared.request_id_header).map(str::to_owned);
        tracing::debug!(
            provider = %site.provider,
            method = site.method,
            path = %site.path,
            operation = site.operation.as_deref(),
            status,
            elapsed_ms,
            "http response"
        );
        if (200..300).contains(&status) {
            return Ok(Response {
                inner: response,
                status,
                headers,
                request_id,
                site,
                idle,
                max_body,
            });
        }
        // A provider that echoes a credential in its error must not get it into our messages.
        let body = redact_secrets(&read_limited(response, ERROR_BODY_LIMIT).await, &secrets);
        let headers = Headers::from(
            headers
                .iter()
                .map(|(n, v)| {
                    let v = redact_secrets(v.as_bytes(), &secrets);
                    (n.to_owned(), String::from_utf8_lossy(&v).into_owned())
                })
                .collect::<Vec<_>>(),
        );
        let error_response = ErrorResponse {
            status,
            headers,
            body,
            operation: site.operation_or_route(),
            sandbox_id: site.sandbox_id.clone(),
            request_id,
            method: site.method.to_owned(),
            path: site.path.clone(),
            provider: site.provider.clone(),
        };
        let mapped = match &shared.mapper {
            Some(mapper) => mapper(&error_response),
            None => default_error_mapper(&error_response),
        };
        let mut error = site.context(mapped);
        if AMBIGUOUS_STATUSES.contains(&status) {
            error = error.with_ambiguous(true);
        }
        if error.status().is_none() {
            error = error.with_status(status);
        }
        if let (None, Some(id)) = (error.request_id(), &error_response.request_id) {
            error = error.with_request_id(id.clone());
        }
        if error.retry_after().is_none()
            && let Some(delay) = error_response.retry_after()
        {
            error = error.with_retry_after(delay);
        }
        Err(error)
    }

    /// Sends the request and decodes a 2xx body as JSON. A body that does not decode is a
    /// [`ErrorKind::Provider`] error naming the operation and serde's message (quoted values
    /// removed), never the body.
    pub async fn send_json<T: DeserializeOwned>(self) -> Result<T> {
        self.send().await?.json().await
    }

    /// Sends the request, expects a 2xx answer and reads and discards its body.
    pub async fn send_empty(self) -> Result<()> {
        self.send().await?.bytes().await.map(drop)
    }

    /// The reqwest request, and the progress clock of an idle-bounded one.
    fn prepare(
        self,
        site: &CallSite,
        shared: &Shared,
    ) -> Result<(reqwest::RequestBuilder, Option<Progress>)> {
        let progress = matches!(self.timeout, TimeoutChoice::Idle(_)).then(Progress::new);
        let invalid = |message: String| site.context(Error::validation(message));
        let mut url = self.url.map_err(invalid)?;
        if !self.query.is_empty() {
            let mut pairs = url.query_pairs_mut();
            for (k, v) in &self.query {
                pairs.append_pair(k, v);
            }
        }
        let mut builder = shared.client.request(self.method.to_reqwest(), url);
        let mut header_map = reqwest::header::HeaderMap::new();
        for line in &shared.headers {
            if line.auth && !self.with_auth {
                continue;
            }
            header_map.insert(line.name.clone(), line.value.clone());
        }
        let mut request_lines = Vec::with_capacity(self.headers.len());
        for line in self.headers {
            request_lines.push(line.map_err(invalid)?);
        }
        // A request header replaces a default of the same name; repeated request headers add up.
        for line in &request_lines {
            header_map.remove(&line.name);
        }
        for line in request_lines {
            header_map.append(line.name, line.value);
        }
        let content_type = |ct: &str| -> Result<HeaderValue> {
            HeaderValue::from_str(ct).map_err(|_| invalid(format!("invalid content type {ct:?}")))
        };
        match self.body {
            Body::None => {}
            Body::Bytes(bytes, ct) => {
                header_map.insert(reqwest::header::CONTENT_TYPE, content_type(&ct)?);
                builder = builder.body(bytes);
            }
            Body::Json(json) => {
                let json = json.map_err(invalid)?;
                header_map.insert(
                    reqwest::header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                builder = builder.body(json);
            }
            Body::Stream(stream, ct, length) => {
                header_map.insert(reqwest::header::CONTENT_TYPE, content_type(&ct)?);
                if let Some(length) = length {
                    header_map.insert(reqwest::header::CONTENT_LENGTH, HeaderValue::from(length));
                }
                builder = builder.body(stream.into_reqwest(progress.clone()));
            }
            Body::Multipart(form) => {
                header_map.remove(reqwest::header::CONTENT_TYPE);
                builder = builder.multipart(form.into_reqwest(progress.clone()).map_err(invalid)?);
            }
        }
        builder = builder.headers(header_map);
        let timeout = match self.timeout {
            TimeoutChoice::Default => shared.timeout,
            TimeoutChoice::Fixed(t) => Some(t),
            TimeoutChoice::Unlimited | TimeoutChoice::Idle(_) => None,
        };
        if let Some(timeout) = timeout {
            builder = builder.timeout(timeout);
        }
        Ok((builder, progress))
    }
}

impl fmt::Debug for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lines: Vec<HeaderLine> = self.headers.iter().filter_map(|h| h.clone().ok()).collect();
        let body = match &self.body {
            Body::None => "none".to_owned(),
            Body::Bytes(b, ct) => format!("{} bytes of {ct}", b.len()),
            Body::Json(Ok(j)) => format!("{} bytes of JSON", j.len()),
            Body::Json(Err(_)) => "invalid JSON".to_owned(),
            Body::Stream(_, ct, _) => format!("stream of {ct}"),
            Body::Multipart(m) => format!("multipart form of {} parts", m.len()),
        };
        f.debug_struct("Request")
            .field("provider", &self.client.inner.shared.provider)
            .field("method", &self.method)
            .field(
                "url",
                &self
                    .url
                    .as_ref()
                    .map(redacted_url)
                    .unwrap_or_else(|_| "<invalid URL>".into()),
            )
            .field(
                "query_keys",
                &self
                    .query
                    .iter()
                    .map(|(k, _)| k.as_str())
                    .collect::<Vec<_>>(),
            )
            .field("headers", &HeaderLines(&lines))
            .field("body", &body)
            .field("timeout", &self.timeout)
            .field("operation", &self.operation)
            .field("sandbox_id", &self.sandbox_id)
            .field("with_auth", &self.with_auth)
            .finish()
    }
}

/// Statuses after which the request may still have taken effect: a request timeout, an internal
/// error mid-way, or a gateway that lost (502) or gave up on (504) the server behind it.
const AMBIGUOUS_STATUSES: [u16; 4] = [408, 500, 502, 504];

/// Replaces every occurrence of each secret in `data` with `<redacted>`, as written or in any
/// JSON-escaped or percent-encoded spelling ([`crate::redact::scrub`]), longest secret first
/// (secrets under [`crate::redact::MIN_SECRET_LEN`] bytes are left alone).
/// For answers that do not come through [`HttpClient`], such as a refused WebSocket upgrade;
/// the client scrubs its own.
pub fn redact_secrets(data: &[u8], secrets: &[String]) -> Bytes {
    Bytes::from(crate::redact::scrub(data, secrets))
}

/// Reads at most `limit` bytes of an error body; a failure while reading keeps what arrived.
async fn read_limited(mut response: reqwest::Response, limit: usize) -> Bytes {
    let mut body = Vec::new();
    while body.len() < limit {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                let room = limit - body.len();
                body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            Ok(None) | Err(_) => break,
        }
    }
    Bytes::from(body)
}

/// A 2xx answer whose body has not been read yet.
pub struct Response {
    inner: reqwest::Response,
    status: u16,
    headers: Headers,
    request_id: Option<String>,
    site: CallSite,
    /// The longest silence allowed between body chunks, for idle-bounded requests.
    idle: Option<Duration>,
    /// The largest body read whole.
    max_body: usize,
}

impl Response {
    /// The HTTP status code.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The first value of a response header (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name)
    }

    /// Every response header.
    pub fn headers(&self) -> &Headers {
        &self.headers
    }

    /// The provider's request id, from the client's request-id header.
    pub fn request_id(&self) -> Option<&str> {
        self.request_id.as_deref()
    }

    /// The `Content-Length` the server announced, when it did.
    pub fn content_length(&self) -> Option<u64> {
        self.header("content-length")?.parse().ok()
    }

    /// Reads the whole body. A body cut short (or silent past an idle bound) is
    /// [`ErrorKind::Transport`]; one larger than the request's [`Request::max_body`] is
    /// [`ErrorKind::Provider`], found from `Content-Length` before anything is read, or as soon
    /// as the bytes read pass the cap.
    pub async fn bytes(self) -> Result<Bytes> {
        let max = self.max_body;
        let status = self.status;
        let site = self.site.clone();
        let too_large = || {
            site.context(
                Error::new(
                    ErrorKind::Provider,
                    format!(
                        "the response to {} {} is larger than the {max} bytes this call reads",
                        site.method, site.path
                    ),
                )
                .with_status(status)
                .with_retryable(false),
            )
        };
        if self.content_length().is_some_and(|len| len > max as u64) {
            return Err(too_large());
        }
        let capacity = self.content_length().map_or(0, |len| len as usize);
        let mut body = Vec::with_capacity(capacity);
        let mut chunks = self.bytes_stream();
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk?;
            if body.len() + chunk.len() > max {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Bytes::from(body))
    }

    /// Reads the whole body as UTF-8 text; invalid UTF-8 is [`ErrorKind::Provider`].
    pub async fn text(self) -> Result<String> {
        let site = self.site.clone();
        let bytes = self.bytes().await?;
        String::from_utf8(bytes.to_vec()).map_err(|_| {
            site.context(Error::new(
                ErrorKind::Provider,
                format!(
                    "the response to {} {} is not valid UTF-8",
                    site.method, site.path
                ),
            ))
        })
    }

    /// Reads the whole body and decodes it as JSON. A body that does not decode is
    /// [`ErrorKind::Provider`], naming the operation and serde's message (quoted values removed).
    /// After a 2xx status it is also [ambiguous](Error::is_ambiguous): the server said it acted,
    /// so a create answered this way is looked up by its key rather than left behind.
    pub async fn json<T: DeserializeOwned>(self) -> Result<T> {
        let site = self.site.clone();
        let status = self.status;
        let request_id = self.request_id.clone();
        let bytes = self.bytes().await?;
        serde_json::from_slice(&bytes).map_err(|e| {
            let mut error = Error::new(
                ErrorKind::Provider,
                format!(
                    "could not decode the response to {} ({} {}): {}",
                    site.operation_or_route(),
                    site.method,
                    site.path,
                    redact_serde_message(&e.to_string())
                ),
            )
            .with_status(status)
            .with_ambiguous((200..300).contains(&status));
            if let Some(id) = request_id {
                error = error.with_request_id(id);
            }
            site.context(error)
        })
    }

    /// The body as a lazy stream of chunks, read as the caller polls it, in constant memory. A
    /// body cut short ends the stream with an [`ErrorKind::Transport`] error; passing the
    /// request's timeout gives [`ErrorKind::Timeout`].
    ///
    /// For a request sent with [`Request::idle_timeout`], a silence longer than the bound ends
    /// the stream with an [`ErrorKind::Transport`] error naming the bound.
    pub fn bytes_stream(self) -> ByteStream {
        let site = self.site;
        let context = site.clone();
        let chunks = self
            .inner
            .bytes_stream()
            .map(move |chunk| chunk.map_err(|e| site.transport_error(Stage::ResponseBody, e)))
            .boxed();
        match self.idle {
            Some(idle) => idle_bounded(chunks, idle)
                .map(move |chunk| chunk.map_err(|e| context.context(e)))
                .boxed(),
            None => chunks,
        }
    }
}

/// Ends `stream` with an [`ErrorKind::Transport`] error when no item arrives for `idle`.
pub fn idle_bounded<T: Send + 'static>(
    stream: futures::stream::BoxStream<'static, Result<T>>,
    idle: Duration,
) -> futures::stream::BoxStream<'static, Result<T>> {
    futures::stream::unfold(Some(stream), move |state| async move {
        let mut stream = state?;
        match tokio::time::timeout(idle, stream.next()).await {
            Ok(Some(item)) => Some((item, Some(stream))),
            Ok(None) => None,
            Err(_) => Some((
                Err(Error::new(
                    ErrorKind::Transport,
                    format!("the stream went silent: no data for {idle:?}"),
                )
                .with_ambiguous(true)),
                None,
            )),
        }
    })
    .boxed()
}

impl fmt::Debug for Response {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Response")
            .field("provider", &self.site.provider)
            .field("method", &self.site.method)
            .field("path", &self.site.path)
            .field("status", &self.status)
            .field("headers", &self.headers)
            .field("request_id", &self.request_id)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls_are_checked() {
        for bad in [
            "",
            "not a url",
            "ftp://example.com",
            "https://example.com/v1?x=1",
            "https://user:pw@example.com",
            "unix:/tmp/sock",
        ] {
            let e = HttpClient::builder("t", bad).build().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Validation, "{bad}");
            assert!(!e.to_string().contains("pw@"), "{e}");
        }
        let c = HttpClient::builder("t", "https://api.example.com/v1/")
            .build()
            .unwrap();
        assert_eq!(c.base_url(), "https://api.example.com/v1");
        assert_eq!(c.provider(), "t");
    }

    #[test]
    fn paths_keep_the_base_prefix() {
        let c = HttpClient::builder("t", "https://api.example.com/v1")
            .build()
            .unwrap();
        let url = |r: Request| r.url.unwrap().to_string();
        assert_eq!(
            url(c.request(Method::Get, "/apps/x")),
            "https://api.example.com/v1/apps/x"
        );
        assert_eq!(
            url(c.request(Method::Get, "apps/x")),
            "https://api.example.com/v1/apps/x"
        );
        assert_eq!(
            url(c.request(Method::Get, "")),
            "https://api.example.com/v1"
        );
        for bad in [
            "/sandboxes/..",
            "/a/./b",
            "/a/%2E%2e/b",
            "..",
            "/a/..?x=1",
            "/a\\..\\b",
        ] {
            let message = c.request(Method::Get, bad).url.unwrap_err();
            assert!(message.contains("segment"), "{bad}: {message}");
        }
        assert!(c.request(Method::Get, "/a/..b/c.d?x=..").url.is_ok());
        let root = HttpClient::builder("t", "http://127.0.0.1:9")
            .build()
            .unwrap();
        assert_eq!(url(root.request(Method::Get, "/a")), "http://127.0.0.1:9/a");
    }

    #[test]
    fn bad_headers_fail_at_build() {
        let e = HttpClient::builder("t", "https://x.example")
            .header("bad header", "v")
            .build()
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Validation);
        let e = HttpClient::builder("t", "https://x.example")
            .bearer("line\nbreak-secret")
            .build()
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Validation);
        assert!(!e.to_string().contains("break-secret"), "{e}");
        let e = HttpClient::builder("t", "https://x.example")
            .root_certificate_pem(b"not a certificate")
            .build()
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Validation);
    }

    #[test]
    fn secrets_are_scrubbed_longest_first() {
        let secrets = vec!["Bearer tok-123456".to_owned(), "tok-123456".to_owned()];
        let out = redact_secrets(b"auth Bearer tok-123456 or tok-123456!", &secrets);
        assert_eq!(&out[..], b"auth <redacted> or <redacted>!");
        assert_eq!(&redact_secrets(b"", &secrets)[..], b"");
    }

    #[test]
    fn path_segments_are_encoded() {
        assert_eq!(encode_path_segment("a/b c?d"), "a%2Fb%20c%3Fd");
        assert_eq!(encode_path_segment("sb-1_x.y~"), "sb-1_x.y~");
        assert_eq!(encode_path_segment("é"), "%C3%A9");
    }
}
