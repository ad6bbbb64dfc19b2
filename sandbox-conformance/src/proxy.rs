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

use crate::cassette::{WsMessage, WsStep};
use bytes::Bytes;
use futures::SinkExt;
use futures::StreamExt;
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role};

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
    /// A relayed WebSocket exchange: the messages so far, filled in while the connection
    /// lasts (the exchange is handed over when the upgrade succeeds, so it keeps its place
    /// among the HTTP exchanges).
    pub websocket: Option<Arc<Mutex<WsTranscript>>>,
}

/// The messages of one relayed WebSocket connection, in the order the proxy saw them (pings and
/// pongs left out: each side's are answered by the proxy).
#[derive(Debug, Default)]
pub(crate) struct WsTranscript {
    /// The steps, as a cassette writes them (binary payloads still unscrubbed).
    pub steps: Vec<WsStep>,
    /// Whether the connection has ended.
    pub finished: bool,
}

/// The server side of a WebSocket connection the proxy accepted.
pub(crate) type WsConn = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

/// Plays a WebSocket connection the proxy accepted.
pub(crate) type WsServe =
    Box<dyn FnOnce(WsConn) -> futures::future::BoxFuture<'static, ()> + Send + 'static>;

/// What the proxy does with a WebSocket upgrade request.
pub(crate) enum Upgrade {
    /// Forward it as a plain HTTP request, without its upgrade headers (replay: a refused
    /// upgrade, or the catch-all's explanation).
    Http,
    /// Accept it (status 101 with these extra headers, after `delay`) and hand the connection
    /// to `serve` (replay of a cassette's script).
    Serve {
        headers: Vec<(String, String)>,
        delay: Option<std::time::Duration>,
        serve: WsServe,
    },
    /// Relay it to the upstream's WebSocket endpoint (`ws://` or `wss://` of the upstream
    /// base URL) and transcribe the messages (the recorder).
    Relay,
}

/// What a proxy does with each request.
pub(crate) trait Handler: Send + Sync + 'static {
    /// Called when a request has arrived, before it is forwarded.
    fn on_request(&self, request: &LoggedRequest);
    /// The base URL (`scheme://host[:port]`, no trailing slash) to forward `request` to.
    fn upstream(&self, request: &LoggedRequest) -> Result<String, String>;
    /// Called once the response has been passed on completely (or failed); for a relayed
    /// WebSocket, as soon as the upgrade succeeded.
    fn on_exchange(&self, exchange: Exchange);
    /// What to do with a WebSocket upgrade request (called after `on_request`).
    fn upgrade(&self, _request: &LoggedRequest) -> Upgrade {
        Upgrade::Http
    }
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
                        .with_upgrades()
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

/// Logs `request` as failed at the gateway with `message` (query values redacted) and answers
/// it 502.
fn failed_exchange(
    handler: &dyn Handler,
    request: LoggedRequest,
    message: &str,
) -> hyper::Response<ProxyBody> {
    let message = redact_queries(message);
    handler.on_exchange(Exchange {
        request,
        status: 502,
        headers: Vec::new(),
        chunks: Vec::new(),
        error: Some(message.clone()),
        websocket: None,
    });
    gateway_error(message)
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
    if is_websocket_upgrade(&parts.headers) {
        match handler.upgrade(&logged) {
            Upgrade::Http => {}
            Upgrade::Serve {
                headers,
                delay,
                serve,
            } => {
                if let Some(delay) = delay {
                    tokio::time::sleep(delay).await;
                }
                let on_upgrade = hyper::upgrade::on(hyper::Request::from_parts(parts, ()));
                tokio::spawn(async move {
                    if let Ok(upgraded) = on_upgrade.await {
                        let ws = WebSocketStream::from_raw_socket(
                            TokioIo::new(upgraded),
                            Role::Server,
                            None,
                        )
                        .await;
                        serve(ws).await;
                    }
                });
                return switching_protocols(&logged, &headers);
            }
            Upgrade::Relay => return relay(parts, logged, handler).await,
        }
    }
    let base = match handler.upstream(&logged) {
        Ok(base) => base,
        Err(message) => {
            return Ok(failed_exchange(&*handler, logged, &message));
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
                websocket: None,
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
                websocket: None,
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
                websocket: None,
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
                    websocket: None,
                });
            });
            let body = BodyExt::boxed(StreamBody::new(tokio_stream_from(rx)));
            builder.body(body).map_err(std::io::Error::other)
        }
    }
}

/// Whether a request asks to be upgraded to a WebSocket (`Upgrade: websocket` with a key).
fn is_websocket_upgrade(headers: &hyper::HeaderMap) -> bool {
    let upgrade = headers.get_all(hyper::header::UPGRADE).iter().any(|v| {
        v.to_str()
            .is_ok_and(|v| v.to_ascii_lowercase().contains("websocket"))
    });
    upgrade && headers.contains_key(hyper::header::SEC_WEBSOCKET_KEY)
}

/// The `101 Switching Protocols` answer to a WebSocket upgrade, with `extra` headers.
fn switching_protocols(
    request: &LoggedRequest,
    extra: &[(String, String)],
) -> Result<hyper::Response<ProxyBody>, std::io::Error> {
    let key = request.header("sec-websocket-key").unwrap_or_default();
    let accept =
        tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.trim().as_bytes());
    let mut builder = hyper::Response::builder()
        .status(hyper::StatusCode::SWITCHING_PROTOCOLS)
        .header(hyper::header::CONNECTION, "upgrade")
        .header(hyper::header::UPGRADE, "websocket")
        .header(hyper::header::SEC_WEBSOCKET_ACCEPT, accept);
    for (k, v) in extra {
        builder = builder.header(k.as_str(), v.as_str());
    }
    builder
        .body(full(Bytes::new()))
        .map_err(std::io::Error::other)
}

/// Request headers not passed on to the upstream's WebSocket endpoint: the client library
/// makes its own handshake (key, version) and speaks no extension.
const WS_OWN_HEADERS: &[&str] = &[
    "sec-websocket-key",
    "sec-websocket-version",
    "sec-websocket-extensions",
    "sec-websocket-accept",
];

/// Relays a WebSocket upgrade to the upstream: on `101` the client gets its own `101` and every
/// message is passed on and transcribed; a refusal is passed on as an ordinary response.
async fn relay(
    parts: http::request::Parts,
    logged: LoggedRequest,
    handler: Arc<dyn Handler>,
) -> Result<hyper::Response<ProxyBody>, std::io::Error> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
    let fail =
        |logged: LoggedRequest, message: String| Ok(failed_exchange(&*handler, logged, &message));
    let base = match handler.upstream(&logged) {
        Ok(base) => base,
        Err(message) => return fail(logged, message),
    };
    let base = base.trim_end_matches('/');
    let ws_base = if let Some(rest) = base.strip_prefix("https://") {
        format!("wss://{rest}")
    } else if let Some(rest) = base.strip_prefix("http://") {
        format!("ws://{rest}")
    } else {
        base.to_owned()
    };
    let target = format!(
        "{ws_base}{}",
        logged.line().split_once(' ').map(|(_, p)| p).unwrap_or("/")
    );
    let mut upstream_req = match target.as_str().into_client_request() {
        Ok(r) => r,
        Err(e) => {
            let message = format!("bad upstream WebSocket URL {}: {e}", redact_url(&target));
            return fail(logged, message);
        }
    };
    for (k, v) in &logged.headers {
        if HOP_BY_HOP.contains(&k.as_str()) || WS_OWN_HEADERS.contains(&k.as_str()) {
            continue;
        }
        if let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(k.as_bytes()),
            http::HeaderValue::from_str(v),
        ) {
            upstream_req.headers_mut().append(name, value);
        }
    }
    let (upstream, response) = match tokio_tungstenite::connect_async(upstream_req).await {
        Ok(pair) => pair,
        Err(tokio_tungstenite::tungstenite::Error::Http(refusal)) => {
            // A refused upgrade: an ordinary answer, recorded and passed on as one.
            let status = refusal.status().as_u16();
            let headers = header_pairs(refusal.headers());
            let body = Bytes::from(refusal.body().clone().unwrap_or_default());
            let mut builder = hyper::Response::builder().status(status);
            for (k, v) in &headers {
                if !HOP_BY_HOP.contains(&k.as_str()) {
                    builder = builder.header(k.as_str(), v.as_str());
                }
            }
            handler.on_exchange(Exchange {
                request: logged,
                status,
                headers,
                chunks: if body.is_empty() {
                    Vec::new()
                } else {
                    vec![body.clone()]
                },
                error: None,
                websocket: None,
            });
            return builder.body(full(body)).map_err(std::io::Error::other);
        }
        Err(e) => {
            let message = format!(
                "proxy could not open a WebSocket to {}: {}",
                redact_url(&target),
                error_text(&e)
            );
            return fail(logged, message);
        }
    };
    let headers = header_pairs(response.headers());
    let protocol: Vec<(String, String)> = headers
        .iter()
        .filter(|(k, _)| k == "sec-websocket-protocol")
        .cloned()
        .collect();
    let transcript = Arc::new(Mutex::new(WsTranscript::default()));
    let answer = switching_protocols(&logged, &protocol);
    handler.on_exchange(Exchange {
        request: logged,
        status: 101,
        headers,
        chunks: Vec::new(),
        error: None,
        websocket: Some(transcript.clone()),
    });
    let on_upgrade = hyper::upgrade::on(hyper::Request::from_parts(parts, ()));
    tokio::spawn(async move {
        if let Ok(upgraded) = on_upgrade.await {
            let client =
                WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await;
            pump(client, upstream, &transcript).await;
        }
        lock_transcript(&transcript).finished = true;
    });
    answer
}

fn lock_transcript(t: &Mutex<WsTranscript>) -> std::sync::MutexGuard<'_, WsTranscript> {
    t.lock().unwrap_or_else(|p| p.into_inner())
}

fn header_pairs(headers: &http::HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_ascii_lowercase(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect()
}

/// The code of a close frame; a close without one is written as a normal closure.
fn close_code(frame: Option<&CloseFrame>) -> u16 {
    frame.map(|f| u16::from(f.code)).unwrap_or(1000)
}

/// Passes messages both ways until either side ends, transcribing data messages and the close
/// that ends the connection (its echo from the other side is not a step).
async fn pump<C, U>(
    mut client: WebSocketStream<C>,
    mut upstream: WebSocketStream<U>,
    transcript: &Mutex<WsTranscript>,
) where
    C: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    U: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let push = |step: WsStep| lock_transcript(transcript).steps.push(step);
    loop {
        tokio::select! {
            from_client = client.next() => match from_client {
                Some(Ok(message @ (Message::Text(_) | Message::Binary(_)))) => {
                    push(WsStep::Client(ws_message(&message)));
                    if upstream.send(message).await.is_err() {
                        push(WsStep::Reset);
                        return;
                    }
                }
                Some(Ok(Message::Close(frame))) => {
                    push(WsStep::ClientClose(Some(close_code(frame.as_ref()))));
                    let _ = upstream.send(Message::Close(frame)).await;
                    finish(client, upstream).await;
                    return;
                }
                Some(Ok(_)) => {}
                None | Some(Err(_)) => {
                    push(WsStep::ClientClose(None));
                    let _ = upstream.close(None).await;
                    return;
                }
            },
            from_upstream = upstream.next() => match from_upstream {
                Some(Ok(message @ (Message::Text(_) | Message::Binary(_)))) => {
                    push(WsStep::Server(ws_message(&message)));
                    if client.send(message).await.is_err() {
                        push(WsStep::ClientClose(None));
                        return;
                    }
                }
                Some(Ok(Message::Close(frame))) => {
                    let code = close_code(frame.as_ref());
                    match frame.as_ref().map(|f| f.reason.to_string()) {
                        Some(reason) if !reason.is_empty() => {
                            push(WsStep::CloseWithReason { code, reason });
                        }
                        _ => push(WsStep::Close(code)),
                    }
                    let _ = client.send(Message::Close(frame)).await;
                    finish(upstream, client).await;
                    return;
                }
                Some(Ok(_)) => {}
                None | Some(Err(_)) => {
                    // Gone without a close frame: the client's connection is dropped the same way.
                    push(WsStep::Reset);
                    return;
                }
            },
        }
    }
}

/// Completes both close handshakes after `closed` sent a close frame and `other` was sent one:
/// flushes the automatic reply to `closed` and reads `other`'s echo, for at most a second.
async fn finish<A, B>(mut closed: WebSocketStream<A>, mut other: WebSocketStream<B>)
where
    A: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    B: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let drain = async {
        let _ = closed.flush().await;
        while let Some(Ok(_)) = other.next().await {}
        while let Some(Ok(_)) = closed.next().await {}
    };
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), drain).await;
}

/// A data message as a cassette writes it.
fn ws_message(message: &Message) -> WsMessage {
    match message {
        Message::Binary(b) => WsMessage::from_frame(true, b),
        Message::Text(t) => WsMessage::from_frame(false, t.as_bytes()),
        _ => WsMessage::Text(String::new()),
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
