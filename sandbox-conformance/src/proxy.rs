//! A small loopback HTTP/1.1 proxy, used in front of the wiremock server during replay (to log
//! requests and to produce connection resets and truncated streams, which wiremock cannot) and
//! as the recorder between an adapter and the live service.
//!
//! It is built on `hyper` (server side, already in the tree through wiremock) and `reqwest`
//! (client side, for TLS to live services): a raw TCP proxy would have to re-implement chunked
//! framing and keep-alive to split exchanges, and a full proxy framework is more than a test kit
//! should pull in. Responses are streamed through chunk by chunk, so a long-running exec stream
//! reaches the adapter while it is still being recorded.
//!
//! It listens on `127.0.0.1` only. The recorder's proxy ([`Proxy::start_private`]) forwards
//! with the live service's credentials, so it also answers only requests under a random path
//! prefix made for each run (`http://127.0.0.1:PORT/<32 hex digits>`), which only the adapter
//! it was made for is given: any other local process (or a web page) that finds the port gets
//! 403 and nothing is forwarded.

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// The response header by which the replayer asks the proxy for a transport fault.
pub(crate) const FAULT_HEADER: &str = "x-sandbox-conformance-fault";

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type ProxyBody = BoxBody<Bytes, BoxError>;

/// One request as the adapter sent it. Its `Debug` shows no credential: header values and
/// query parameters with credential-like names are redacted, the body is summarised.
#[derive(Clone, PartialEq, Eq)]
pub struct LoggedRequest {
    /// HTTP method.
    pub method: String,
    /// Path, percent-encoded as sent.
    pub path: String,
    /// The raw query string, if any.
    pub query: Option<String>,
    /// Headers in arrival order, names lower-case.
    pub headers: Vec<(String, String)>,
    /// The whole body.
    pub body: Bytes,
}

impl std::fmt::Debug for LoggedRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let headers: Vec<(&str, &str)> = self
            .headers
            .iter()
            .map(|(k, v)| {
                let v = if sandbox_sdk_core::redact::is_credential_name(k) {
                    "<redacted>"
                } else {
                    v.as_str()
                };
                (k.as_str(), v)
            })
            .collect();
        let query = self.query.as_deref().map(|q| {
            q.split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((k, _)) if sandbox_sdk_core::redact::is_credential_name(k) => {
                        format!("{k}=<redacted>")
                    }
                    _ => pair.to_owned(),
                })
                .collect::<Vec<_>>()
                .join("&")
        });
        f.debug_struct("LoggedRequest")
            .field("method", &self.method)
            .field("path", &self.path)
            .field("query", &query)
            .field("headers", &headers)
            .field("body", &format_args!("<{} bytes>", self.body.len()))
            .finish()
    }
}

impl LoggedRequest {
    /// The first value of a header (name case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// `METHOD /path?query`.
    pub fn line(&self) -> String {
        match &self.query {
            Some(q) => format!("{} {}?{}", self.method, self.path, q),
            None => format!("{} {}", self.method, self.path),
        }
    }
}

/// A finished exchange: the request and what came back, the body as the chunks that arrived.
#[derive(Debug, Clone)]
pub(crate) struct Exchange {
    pub request: LoggedRequest,
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub chunks: Vec<Bytes>,
    /// Set when the upstream could not be reached or its body failed part way.
    pub error: Option<String>,
}

/// What a proxy does with each request.
pub(crate) trait Handler: Send + Sync + 'static {
    /// Called when a request has arrived, before it is forwarded.
    fn on_request(&self, request: &LoggedRequest);
    /// The base URL (`scheme://host[:port]`, no trailing slash) to forward `request` to.
    fn upstream(&self, request: &LoggedRequest) -> Result<String, String>;
    /// Called once the response has been passed on completely (or failed).
    fn on_exchange(&self, exchange: Exchange);
}

/// A running proxy; stops when dropped.
pub(crate) struct Proxy {
    url: String,
    task: JoinHandle<()>,
}

/// A fresh secret path segment: 32 hex digits (128 bits) from the operating system's random
/// source.
fn secret_segment() -> std::io::Result<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)
        .map_err(|e| std::io::Error::other(format!("no randomness: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// `path` without its first segment when that segment is `secret` (compared in constant
/// time), as the upstream should see it; `None` for any other path.
fn under_secret(path: &str, secret: &str) -> Option<String> {
    let rest = path.strip_prefix('/')?;
    let (first, rest) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let same = first.len() == secret.len()
        && first
            .bytes()
            .zip(secret.bytes())
            .fold(0u8, |diff, (a, b)| diff | (a ^ b))
            == 0;
    same.then(|| if rest.is_empty() { "/" } else { rest }.to_owned())
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
    "accept-encoding",
];

impl Proxy {
    /// Starts a proxy on a free loopback port that forwards every request (the replayer's,
    /// in front of a local wiremock server: nothing behind it is worth a credential).
    pub async fn start(handler: Arc<dyn Handler>) -> std::io::Result<Proxy> {
        Proxy::serve(handler, None).await
    }

    /// Starts a proxy on a free loopback port that forwards only requests under a fresh
    /// secret path prefix, without the prefix; [`Proxy::url`] includes it. Any other request
    /// is answered 403 without reaching the handler.
    pub async fn start_private(handler: Arc<dyn Handler>) -> std::io::Result<Proxy> {
        Proxy::serve(handler, Some(secret_segment()?)).await
    }

    async fn serve(handler: Arc<dyn Handler>, secret: Option<String>) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let url = match &secret {
            Some(secret) => format!("http://{addr}/{secret}"),
            None => format!("http://{addr}"),
        };
        let secret: Option<Arc<str>> = secret.map(Into::into);
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .build()
            .map_err(std::io::Error::other)?;
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let handler = handler.clone();
                let client = client.clone();
                let secret = secret.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req| {
                        let handler = handler.clone();
                        let client = client.clone();
                        let secret = secret.clone();
                        async move { handle(req, handler, client, secret.as_deref()).await }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(Proxy { url, task })
    }

    /// `http://127.0.0.1:PORT`, followed by `/SECRET` for a private proxy.
    pub fn url(&self) -> &str {
        &self.url
    }
}

fn full(bytes: impl Into<Bytes>) -> ProxyBody {
    Full::new(bytes.into())
        .map_err(|never: Infallible| match never {})
        .boxed()
}

fn gateway_error(message: String) -> hyper::Response<ProxyBody> {
    let message = redact_queries(&message);
    let body = serde_json::json!({ "message": message, "code": 502 }).to_string();
    let mut resp = hyper::Response::new(full(body));
    *resp.status_mut() = hyper::StatusCode::BAD_GATEWAY;
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    resp
}

fn forbidden() -> hyper::Response<ProxyBody> {
    let body = serde_json::json!({
        "message": "this recording proxy forwards only its adapter's requests",
        "code": 403,
    })
    .to_string();
    let mut resp = hyper::Response::new(full(body));
    *resp.status_mut() = hyper::StatusCode::FORBIDDEN;
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    resp
}

async fn handle(
    req: hyper::Request<Incoming>,
    handler: Arc<dyn Handler>,
    client: reqwest::Client,
    secret: Option<&str>,
) -> Result<hyper::Response<ProxyBody>, std::io::Error> {
    let path = match secret {
        None => req.uri().path().to_owned(),
        Some(secret) => match under_secret(req.uri().path(), secret) {
            Some(path) => path,
            None => return Ok(forbidden()),
        },
    };
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map_err(std::io::Error::other)?
        .to_bytes();
    let logged = LoggedRequest {
        method: parts.method.as_str().to_owned(),
        path,
        query: parts.uri.query().map(str::to_owned),
        headers: parts
            .headers
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_ascii_lowercase(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body,
    };
    handler.on_request(&logged);
    let base = match handler.upstream(&logged) {
        Ok(base) => base,
        Err(message) => {
            let message = redact_queries(&message);
            handler.on_exchange(Exchange {
                request: logged,
                status: 502,
                headers: Vec::new(),
                chunks: Vec::new(),
                error: Some(message.clone()),
            });
            return Ok(gateway_error(message));
        }
    };
    let target = format!(
        "{}{}",
        base.trim_end_matches('/'),
        logged.line().split_once(' ').map(|(_, p)| p).unwrap_or("/")
    );
    let method =
        reqwest::Method::from_bytes(logged.method.as_bytes()).map_err(std::io::Error::other)?;
    let mut upstream_req = client.request(method, &target).body(logged.body.clone());
    for (k, v) in &logged.headers {
        if !HOP_BY_HOP.contains(&k.as_str()) {
            upstream_req = upstream_req.header(k.as_str(), v.as_str());
        }
    }
    let upstream = match upstream_req.send().await {
        Ok(resp) => resp,
        Err(e) => {
            // reqwest's text names the URL with its query (signed parameters, tokens).
            let message = format!(
                "proxy could not reach {}: {}",
                redact_url(&target),
                error_text(&e.without_url())
            );
            handler.on_exchange(Exchange {
                request: logged,
                status: 502,
                headers: Vec::new(),
                chunks: Vec::new(),
                error: Some(message.clone()),
            });
            return Ok(gateway_error(message));
        }
    };
    let status = upstream.status().as_u16();
    let headers: Vec<(String, String)> = upstream
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_ascii_lowercase(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let fault = headers
        .iter()
        .find(|(k, _)| k == FAULT_HEADER)
        .map(|(_, v)| v.clone());
    let mut builder = hyper::Response::builder().status(status);
    for (k, v) in &headers {
        if !HOP_BY_HOP.contains(&k.as_str()) && k != FAULT_HEADER {
            builder = builder.header(k.as_str(), v.as_str());
        }
    }
    match fault.as_deref() {
        Some("reset") => {
            handler.on_exchange(Exchange {
                request: logged,
                status,
                headers,
                chunks: Vec::new(),
                error: Some("connection reset (fault)".into()),
            });
            // An error from the service makes hyper close the connection without answering.
            Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "connection reset by the conformance replayer",
            ))
        }
        Some("truncate") => {
            let bytes = upstream.bytes().await.unwrap_or_default();
            let half = bytes.slice(..bytes.len() / 2);
            handler.on_exchange(Exchange {
                request: logged,
                status,
                headers,
                chunks: vec![half.clone()],
                error: Some("stream truncated (fault)".into()),
            });
            let frames: Vec<Result<Frame<Bytes>, BoxError>> = vec![
                Ok(Frame::data(half)),
                Err(BoxError::from(
                    "stream truncated by the conformance replayer".to_owned(),
                )),
            ];
            let body = BodyExt::boxed(StreamBody::new(futures::stream::iter(frames)));
            builder
                .header("content-length", bytes.len().to_string())
                .body(body)
                .map_err(std::io::Error::other)
        }
        _ => {
            let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, BoxError>>(16);
            let mut stream = upstream.bytes_stream();
            tokio::spawn(async move {
                let mut chunks = Vec::new();
                let mut error = None;
                while let Some(item) = stream.next().await {
                    match item {
                        Ok(chunk) => {
                            chunks.push(chunk.clone());
                            if tx.send(Ok(Frame::data(chunk))).await.is_err() {
                                error = Some("client went away".to_owned());
                                break;
                            }
                        }
                        Err(e) => {
                            let message =
                                format!("upstream body failed: {}", error_text(&e.without_url()));
                            let _ = tx.send(Err(BoxError::from(message.clone()))).await;
                            error = Some(message);
                            break;
                        }
                    }
                }
                drop(tx);
                handler.on_exchange(Exchange {
                    request: logged,
                    status,
                    headers,
                    chunks,
                    error,
                });
            });
            let body = BodyExt::boxed(StreamBody::new(tokio_stream_from(rx)));
            builder.body(body).map_err(std::io::Error::other)
        }
    }
}

fn tokio_stream_from<T: Send + 'static>(
    mut rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures::Stream<Item = T> + Send + 'static {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// The URL without its query string (which may hold signed parameters).
pub(crate) fn redact_url(url: &str) -> String {
    match url.split_once('?') {
        Some((base, _)) => format!("{base}?…"),
        None => url.to_owned(),
    }
}

/// `text` with every query string (a `?` followed by `name=value` pairs, in a URL or a bare
/// `/path?…`) replaced by `?…`: error text from HTTP libraries names URLs with their queries,
/// which carry signatures and tokens.
pub(crate) fn redact_queries(text: &str) -> String {
    static QUERY: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let re = QUERY
        .get_or_init(|| regex::Regex::new(r#"\?[^\s#"'<>?]*=[^\s#"'<>]*"#).expect("a valid regex"));
    re.replace_all(text, "?…").into_owned()
}

/// An error and its causes as one line, with no URL query in it (see [`redact_queries`]).
pub(crate) fn error_text(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = cause.source();
    }
    redact_queries(&out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_logged_request_debug_shows_no_credential() {
        let request = LoggedRequest {
            method: "GET".into(),
            path: "/files".into(),
            query: Some("path=a&access_token=q-secret-1&signature=q-secret-2".into()),
            headers: vec![
                ("authorization".into(), "Bearer h-secret-1".into()),
                ("x-api-key".into(), "h-secret-2".into()),
                ("x-access-token".into(), "h-secret-3".into()),
                ("fly-machine-lease-nonce".into(), "h-secret-4".into()),
                ("content-type".into(), "application/json".into()),
            ],
            body: Bytes::from_static(br#"{"password":"b-secret"}"#),
        };
        let shown = format!("{request:?}");
        assert!(!shown.contains("secret"), "{shown}");
        assert!(
            shown.contains("application/json") && shown.contains("path=a"),
            "{shown}"
        );
    }

    struct Collect {
        upstream: String,
        exchanges: std::sync::Mutex<Vec<Exchange>>,
    }

    impl Handler for Collect {
        fn on_request(&self, _request: &LoggedRequest) {}
        fn upstream(&self, _request: &LoggedRequest) -> Result<String, String> {
            Ok(self.upstream.clone())
        }
        fn on_exchange(&self, exchange: Exchange) {
            self.exchanges.lock().expect("lock").push(exchange);
        }
    }

    /// A loopback address nothing listens on: connecting to it is refused at once.
    fn closed_port_url() -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        drop(listener);
        format!("http://{addr}")
    }

    #[tokio::test]
    async fn an_unreachable_upstream_names_no_query_value_in_the_502_or_the_exchange() {
        let handler = Arc::new(Collect {
            upstream: closed_port_url(),
            exchanges: std::sync::Mutex::new(Vec::new()),
        });
        let proxy = Proxy::start(handler.clone()).await.expect("proxy");
        let answer = reqwest::Client::new()
            .get(format!(
                "{}/files?signature=q-secret-sig&X-Amz-Credential=q-secret-cred",
                proxy.url()
            ))
            .send()
            .await
            .expect("the proxy answers");
        assert_eq!(answer.status().as_u16(), 502);
        let body = answer.text().await.expect("body");
        assert!(!body.contains("q-secret"), "{body}");
        assert!(body.contains("proxy could not reach"), "{body}");
        let exchanges = handler.exchanges.lock().expect("lock").clone();
        let error = exchanges[0].error.clone().unwrap_or_default();
        assert!(!error.contains("q-secret"), "{error}");
        assert!(error.contains("/files?…"), "{error}");
    }

    #[test]
    fn queries_are_redacted_from_error_text() {
        let text = "error sending request for url (https://h.test/a/b?X-Amz-Signature=s3cr3t&x=1): \
                    no route for GET /files?path=a&token=t0k3n";
        let out = redact_queries(text);
        assert!(!out.contains("s3cr3t") && !out.contains("t0k3n"), "{out}");
        assert!(
            out.contains("https://h.test/a/b?…") && out.contains("GET /files?…"),
            "{out}"
        );
        assert_eq!(
            redact_queries("what? nothing = here"),
            "what? nothing = here"
        );
    }
}
