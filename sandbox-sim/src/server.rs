//! The loopback HTTP/1.1 server every simulator runs on: it refuses requests that do not come
//! from this machine's own programs (a `Host` that is not a loopback name, 421; an `Origin`
//! that is not a loopback origin, 403; neither reaches the handler, the faults or the log),
//! asks the simulator's [`Handler`] whether the request's head is admitted (its credentials,
//! its route's body cap) before reading any body byte, then reads the body whole, names the
//! operation, applies the [`FaultPlan`], logs the exchange and sends the answer (a whole body
//! or a stream).

use super::faults::{Fault, FaultPlan};
use super::upgrade::SimUpgrade;
use bytes::Bytes;
use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use http_body_util::{BodyExt, Full, Limited, StreamBody, combinators::UnsyncBoxBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The largest request body a simulator reads, on its upload routes only (file bytes, an
/// archive, a command's whole stdin); a request over it is answered 413.
pub const MAX_REQUEST_BODY: usize = 512 * 1024 * 1024;

/// The largest body every other route reads (JSON, or nothing): 1 MiB, Vercel's documented
/// limit for its API bodies, far over any JSON an SDK sends.
pub const MAX_JSON_BODY: usize = 1024 * 1024;

/// One request, read whole.
pub struct SimRequest {
    /// HTTP method.
    pub method: Method,
    /// Path, percent-encoded as sent.
    pub path: String,
    /// The raw query string, if any.
    pub query: Option<String>,
    /// Headers.
    pub headers: HeaderMap,
    /// The whole body.
    pub body: Bytes,
    upgrade: Option<SimUpgrade>,
    /// The most items a page may hold ([`SimServer::set_page_cap`]), when capped.
    page_cap: Option<usize>,
}

impl SimRequest {
    /// How many items a list page answering this request holds when the client asked for
    /// `asked`: `asked`, or fewer under the server's page cap ([`SimServer::set_page_cap`]). A
    /// paged API may always answer fewer items than asked and a next-page cursor, so a capped
    /// simulator is still the provider's protocol; a handler whose provider does not page
    /// ignores the cap.
    pub fn page_size(&self, asked: usize) -> usize {
        self.page_cap.map_or(asked, |cap| asked.min(cap.max(1)))
    }

    /// The first value of a header, when it is text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name)?.to_str().ok()
    }

    /// Every value of query parameter `name`, percent-decoded, in order.
    pub fn query_all(&self, name: &str) -> Vec<String> {
        self.query_pairs()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v)
            .collect()
    }

    /// The first value of query parameter `name`, percent-decoded.
    pub fn query_param(&self, name: &str) -> Option<String> {
        self.query_all(name).into_iter().next()
    }

    /// The query's `(name, value)` pairs, percent-decoded (`+` is a space).
    pub fn query_pairs(&self) -> impl Iterator<Item = (String, String)> + '_ {
        self.query
            .as_deref()
            .unwrap_or("")
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|pair| {
                let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                (decode(k), decode(v))
            })
    }

    /// The path's segments, percent-decoded (`/a/b%2Fc` is `["a", "b/c"]`).
    pub fn segments(&self) -> Vec<String> {
        self.path
            .split('/')
            .filter(|s| !s.is_empty())
            .map(decode)
            .collect()
    }

    /// The body as JSON, or a 400 answer saying why it is not.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, String> {
        serde_json::from_slice(&self.body).map_err(|e| format!("invalid JSON body: {e}"))
    }

    /// The connection upgrade of this request (a WebSocket), once, with the request's fault
    /// applied to the upgraded connection.
    pub fn take_upgrade(&mut self) -> Option<SimUpgrade> {
        self.upgrade.take()
    }
}

/// Percent-decodes `text` (`+` as a space); invalid escapes stay as written.
pub fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = |b: u8| (b as char).to_digit(16);
                match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                    (Some(hi), Some(lo)) => {
                        out.push((hi * 16 + lo) as u8);
                        i += 2;
                    }
                    _ => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A response body.
pub enum SimBody {
    /// The whole body at once (sent with `Content-Length`).
    Full(Bytes),
    /// Chunks as they come (sent chunked); the stream's end is the body's end, an `Err` item
    /// closes the connection mid-body.
    Stream(BoxStream<'static, Result<Bytes, std::io::Error>>),
}

/// One answer.
pub struct SimResponse {
    /// Status.
    pub status: StatusCode,
    /// Headers.
    pub headers: HeaderMap,
    /// Body.
    pub body: SimBody,
}

impl SimResponse {
    /// An empty answer.
    pub fn empty(status: u16) -> SimResponse {
        SimResponse::bytes(status, None, Bytes::new())
    }

    /// A JSON answer.
    pub fn json(status: u16, value: &impl serde::Serialize) -> SimResponse {
        let body = serde_json::to_vec(value).unwrap_or_default();
        SimResponse::bytes(status, Some("application/json"), body.into())
    }

    /// A whole body with an optional content type.
    pub fn bytes(status: u16, content_type: Option<&str>, body: Bytes) -> SimResponse {
        let response = SimResponse {
            status: StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            headers: HeaderMap::new(),
            body: SimBody::Full(body),
        };
        match content_type {
            Some(t) => response.header("content-type", t),
            None => response,
        }
    }

    /// A streamed body.
    pub fn stream(
        status: u16,
        content_type: &str,
        body: BoxStream<'static, Result<Bytes, std::io::Error>>,
    ) -> SimResponse {
        SimResponse {
            status: StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            headers: HeaderMap::new(),
            body: SimBody::Stream(body),
        }
        .header("content-type", content_type)
    }

    /// Adds a header (ignored when the name or value is not valid).
    pub fn header(mut self, name: &str, value: &str) -> SimResponse {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            self.headers.append(n, v);
        }
        self
    }
}

/// A provider's protocol, served by [`SimServer`].
pub trait Handler: Send + Sync + 'static {
    /// Whether a request goes on, decided from its head alone (`head.body` is empty: no body
    /// byte has been read): `Ok(cap)`, the most body bytes its route takes
    /// ([`MAX_JSON_BODY`] for JSON routes, at most [`MAX_REQUEST_BODY`] for uploads; a longer
    /// body is answered 413 by [`Handler::error`], unread when its length is declared), or
    /// `Err(answer)`, the refusal of a missing or wrong credential, sent without reading the
    /// body. Credentials are checked here, so [`Handler::handle`] only sees requests that
    /// carry them and nobody without them makes the simulator read a body.
    #[allow(clippy::result_large_err)] // the refusal is the whole answer, made once
    fn admit(&self, head: &SimRequest) -> Result<usize, SimResponse>;

    /// The operation a request is (`create`, `exec`, `files.read`, …): what fault rules and the
    /// log name it by. Unknown routes may answer `other`.
    fn operation(&self, request: &SimRequest) -> &'static str;

    /// Acts on the request and answers it.
    fn handle(&self, request: SimRequest) -> BoxFuture<'static, SimResponse>;

    /// The provider's error answer for `status` with `message` (used for injected statuses).
    fn error(&self, status: u16, message: &str) -> SimResponse;

    /// The provider's error answer to `request` (used for injected statuses): [`Handler::error`]
    /// unless the provider's error body depends on the request (its path, which service).
    fn error_for(&self, request: &SimRequest, status: u16, message: &str) -> SimResponse {
        let _ = request;
        self.error(status, message)
    }
}

/// One exchange the simulator saw.
#[derive(Clone, Debug, serde::Serialize)]
pub struct LogEntry {
    /// Milliseconds since the server started, when the request arrived.
    pub at_ms: u64,
    /// The operation's name.
    pub operation: &'static str,
    /// HTTP method.
    pub method: String,
    /// Path as sent.
    pub path: String,
    /// Query as sent, with credential-like values redacted.
    pub query: Option<String>,
    /// The status answered; `None` when the connection was closed instead.
    pub status: Option<u16>,
    /// The fault applied, as its SPEC text.
    pub fault: Option<String>,
    /// The request body as text (invalid UTF-8 replaced), when the log captures bodies
    /// ([`RequestLog::capture_bodies`]) and there was one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_body: Option<String>,
    /// The response body as text, when the log captures bodies and the answer was whole (not
    /// streamed) and not empty.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_body: Option<String>,
}

/// The requests a simulator saw, in arrival order.
#[derive(Clone, Debug, Default)]
pub struct RequestLog {
    entries: Arc<Mutex<Vec<LogEntry>>>,
    capture: Arc<std::sync::atomic::AtomicBool>,
}

impl RequestLog {
    /// Whether request and response bodies are kept in the entries from now on (default off:
    /// bodies can be large). For checking bodies against a schema.
    pub fn capture_bodies(&self, on: bool) {
        self.capture.store(on, std::sync::atomic::Ordering::SeqCst);
    }

    fn capturing(&self) -> bool {
        self.capture.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// A copy of every entry so far.
    pub fn entries(&self) -> Vec<LogEntry> {
        self.lock().clone()
    }

    /// How many requests of `operation` arrived.
    pub fn count(&self, operation: &str) -> usize {
        self.lock()
            .iter()
            .filter(|e| e.operation == operation)
            .count()
    }

    /// Forgets every entry.
    pub fn clear(&self) {
        self.lock().clear();
    }

    /// The log as JSON lines.
    pub fn to_json_lines(&self) -> String {
        self.lock()
            .iter()
            .map(|e| serde_json::to_string(e).unwrap_or_default() + "\n")
            .collect()
    }

    fn push(&self, entry: LogEntry) -> usize {
        let mut entries = self.lock();
        entries.push(entry);
        entries.len() - 1
    }

    fn set_status(&self, index: usize, status: Option<u16>) {
        if let Some(e) = self.lock().get_mut(index) {
            e.status = status;
        }
    }

    fn set_response_body(&self, index: usize, body: &Bytes) {
        if let Some(e) = self.lock().get_mut(index) {
            e.response_body = Some(String::from_utf8_lossy(body).into_owned());
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<LogEntry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A running simulator server; dropping it stops accepting connections.
pub struct SimServer {
    addr: SocketAddr,
    url: String,
    faults: FaultPlan,
    log: RequestLog,
    page_cap: PageCap,
    accept: JoinHandle<()>,
}

/// The page cap, shared with the connections (0: none).
type PageCap = Arc<std::sync::atomic::AtomicUsize>;

impl Drop for SimServer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl SimServer {
    /// Serves `handler` on `127.0.0.1:port` (0 for a free port) on the current runtime, to
    /// requests for a loopback name only (see [the simulators' module](crate)).
    pub async fn start(
        handler: Arc<dyn Handler>,
        port: u16,
        faults: FaultPlan,
    ) -> std::io::Result<SimServer> {
        let listener = TcpListener::bind(("127.0.0.1", port)).await?;
        let addr = listener.local_addr()?;
        let log = RequestLog::default();
        let page_cap = PageCap::default();
        let started = Instant::now();
        let shared = Arc::new(Shared {
            handler,
            faults: faults.clone(),
            log: log.clone(),
            page_cap: page_cap.clone(),
            started,
        });
        let accept = tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let _ = socket.set_nodelay(true);
                let shared = shared.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |request| shared.clone().serve(request));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .keep_alive(true)
                        .serve_connection(TokioIo::new(socket), service)
                        .with_upgrades()
                        .await;
                });
            }
        });
        Ok(SimServer {
            addr,
            url: format!("http://{addr}"),
            faults,
            log,
            page_cap,
            accept,
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The fault plan, changeable while the server runs.
    pub fn faults(&self) -> &FaultPlan {
        &self.faults
    }

    /// The request log.
    pub fn log(&self) -> &RequestLog {
        &self.log
    }

    /// Caps every list page at `cap` items (at least 1), or lifts the cap (`None`): the
    /// server then answers fewer items than asked, with a cursor to the rest, so a client's
    /// second page (and a fault on it) can be reached with two sandboxes. Simulators of paged
    /// lists honour it ([`SimRequest::page_size`]); Fly's machine list has no pages and
    /// ignores it.
    pub fn set_page_cap(&self, cap: Option<usize>) {
        self.page_cap.store(
            cap.map_or(0, |c| c.max(1)),
            std::sync::atomic::Ordering::Relaxed,
        );
    }
}

struct Shared {
    handler: Arc<dyn Handler>,
    faults: FaultPlan,
    log: RequestLog,
    page_cap: PageCap,
    started: Instant,
}

type Reply = hyper::Response<UnsyncBoxBody<Bytes, BoxError>>;

impl Shared {
    async fn serve(self: Arc<Self>, request: hyper::Request<Incoming>) -> Result<Reply, BoxError> {
        if let Some(refused) = refusal(&request) {
            return Ok(reply(refused, None));
        }
        let (mut parts, body) = request.into_parts();
        let upgrade = parts
            .extensions
            .remove::<hyper::upgrade::OnUpgrade>()
            .map(SimUpgrade::new);
        let mut request = SimRequest {
            method: parts.method,
            path: parts.uri.path().to_owned(),
            query: parts.uri.query().map(str::to_owned),
            headers: parts.headers,
            body: Bytes::new(),
            upgrade,
            page_cap: match self.page_cap.load(std::sync::atomic::Ordering::Relaxed) {
                0 => None,
                cap => Some(cap),
            },
        };
        let operation = self.handler.operation(&request);
        let declared = request
            .header("content-length")
            .and_then(|n| n.trim().parse::<u64>().ok());
        let cap = match self.handler.admit(&request) {
            Ok(cap) => cap,
            Err(refused) => {
                // A short declared body is read and dropped, so the connection stays usable
                // and the client reads the answer instead of a reset; a longer one never is.
                if declared.is_some_and(|n| n <= REFUSED_BODY_DRAINED as u64) {
                    let _ = Limited::new(body, REFUSED_BODY_DRAINED).collect().await;
                }
                return Ok(self.unread(&request, operation, refused));
            }
        };
        let read = match declared {
            Some(n) if n > cap as u64 => None,
            _ => match Limited::new(body, cap).collect().await {
                Ok(b) => Some(b.to_bytes()),
                Err(e) if e.is::<http_body_util::LengthLimitError>() => None,
                Err(e) => return Err(e),
            },
        };
        let Some(body) = read else {
            let too_big = self
                .handler
                .error_for(&request, 413, "request body too large");
            return Ok(self.unread(&request, operation, too_big));
        };
        request.body = body;
        let fault = self.faults.next(operation);
        if let (Some(fault), Some(upgrade)) = (&fault, request.upgrade.as_mut()) {
            upgrade.apply(fault);
        }
        let index = self.log.push(LogEntry {
            at_ms: self.started.elapsed().as_millis() as u64,
            operation,
            method: request.method.to_string(),
            path: request.path.clone(),
            query: request.query.as_deref().map(redact_query),
            status: None,
            fault: fault.as_ref().map(Fault::to_string),
            request_body: (self.log.capturing() && !request.body.is_empty())
                .then(|| String::from_utf8_lossy(&request.body).into_owned()),
            response_body: None,
        });
        let response = match fault {
            Some(Fault::Status { code, retry_after }) => {
                let response = self
                    .handler
                    .error_for(&request, code, "injected by the simulator");
                match retry_after {
                    Some(secs) => response.header("retry-after", &secs.to_string()),
                    None => response,
                }
            }
            Some(Fault::Reset) => return Err("connection reset by the simulator".into()),
            Some(Fault::Stall(d)) => {
                tokio::time::sleep(d).await;
                self.handler.handle(request).await
            }
            Some(Fault::ResetAfter) => {
                drop(self.handler.handle(request).await);
                return Err("connection reset by the simulator after acting".into());
            }
            Some(Fault::Delay(d)) => {
                let response = self.handler.handle(request).await;
                tokio::time::sleep(d).await;
                response
            }
            Some(Fault::Malformed) => {
                let mut response = self.handler.handle(request).await;
                response.body = SimBody::Full(Bytes::from_static(b"{\"malformed\": [tru"));
                response
            }
            _ => self.handler.handle(request).await,
        };
        let cut = match fault {
            Some(Fault::Cut(n)) => Some(Some(n)),
            Some(Fault::Silence) => Some(None),
            _ => None,
        };
        self.log.set_status(index, Some(response.status.as_u16()));
        if let SimBody::Full(body) = &response.body
            && self.log.capturing()
            && !body.is_empty()
        {
            self.log.set_response_body(index, body);
        }
        Ok(reply(response, cut))
    }
}

impl Shared {
    /// Logs and sends `answer` to `request`, which the handler does not see and no fault
    /// applies to (a refused credential, a body over its route's cap).
    fn unread(&self, request: &SimRequest, operation: &'static str, answer: SimResponse) -> Reply {
        self.log.push(LogEntry {
            at_ms: self.started.elapsed().as_millis() as u64,
            operation,
            method: request.method.to_string(),
            path: request.path.clone(),
            query: request.query.as_deref().map(redact_query),
            status: Some(answer.status.as_u16()),
            fault: None,
            request_body: None,
            response_body: None,
        });
        reply(answer, None)
    }
}

/// The most body bytes of a refused request that are read (and dropped) before its answer.
const REFUSED_BODY_DRAINED: usize = 64 * 1024;

/// The answer to a request that did not come from this machine's own programs, if it did not:
/// 421 when its `Host` (or an absolute request target) is not a loopback name, 403 when it
/// carries an `Origin` that is not a loopback origin. A page a browser loaded from a name
/// that now resolves to 127.0.0.1 (DNS rebinding) sends its own name in both; a program on
/// this machine sends a loopback name, and a browser page served from loopback a loopback
/// origin.
fn refusal(request: &hyper::Request<Incoming>) -> Option<SimResponse> {
    let headers = request.headers();
    let mut hosts = headers.get_all(http::header::HOST).iter();
    let host_ok = match (hosts.next(), hosts.next()) {
        (Some(host), None) => host.to_str().is_ok_and(is_loopback_authority),
        _ => false,
    };
    let target_ok = request
        .uri()
        .authority()
        .is_none_or(|a| is_loopback_authority(a.as_str()));
    if !host_ok || !target_ok {
        return Some(SimResponse::bytes(
            421,
            Some("text/plain; charset=utf-8"),
            Bytes::from_static(
                b"421 Misdirected Request: this simulator serves only loopback names \
                  (localhost, *.localhost, 127.0.0.0/8, [::1]) in Host\n",
            ),
        ));
    }
    let origin_ok = headers
        .get_all(http::header::ORIGIN)
        .iter()
        .all(|origin| origin.to_str().is_ok_and(is_loopback_origin));
    if !origin_ok {
        return Some(SimResponse::bytes(
            403,
            Some("text/plain; charset=utf-8"),
            Bytes::from_static(
                b"403 Forbidden: this simulator answers no web page other than one served \
                  from a loopback origin (Origin)\n",
            ),
        ));
    }
    None
}

/// Whether `origin` (an `Origin` header: `scheme://host[:port]`) is an `http` or `https`
/// origin on a loopback name; `null` and any other form are not.
fn is_loopback_origin(origin: &str) -> bool {
    origin.split_once("://").is_some_and(|(scheme, authority)| {
        matches!(scheme.to_ascii_lowercase().as_str(), "http" | "https")
            && is_loopback_authority(authority)
    })
}

/// Whether `authority` (`host[:port]`, the form of `Host`) names this machine's loopback:
/// `localhost` or a name under `.localhost` (which resolve to loopback and nothing else), an
/// address in 127.0.0.0/8, or `[::1]` (also as `[::ffff:127.x.y.z]`).
fn is_loopback_authority(authority: &str) -> bool {
    let is_port = |port: &str| {
        (1..=5).contains(&port.len())
            && port.bytes().all(|b| b.is_ascii_digit())
            && port.parse::<u16>().is_ok()
    };
    if let Some(rest) = authority.strip_prefix('[') {
        let Some((address, tail)) = rest.split_once(']') else {
            return false;
        };
        let port_ok = tail.is_empty() || tail.strip_prefix(':').is_some_and(is_port);
        return port_ok
            && address.parse::<std::net::Ipv6Addr>().is_ok_and(|ip| {
                ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
            });
    }
    let host = match authority.rsplit_once(':') {
        Some((host, port)) if is_port(port) => host,
        Some(_) => return false,
        None => authority,
    };
    let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    if let Ok(ip) = host.parse::<std::net::Ipv4Addr>() {
        return ip.is_loopback();
    }
    let labels_ok = host.split('.').all(|label| {
        !label.is_empty()
            && label.len() <= 63
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
    });
    labels_ok && (host == "localhost" || host.ends_with(".localhost"))
}

/// The hyper response for `response`, its body cut after `n` bytes (`Some(Some(n))`) or held
/// silent forever (`Some(None)`).
fn reply(response: SimResponse, cut: Option<Option<usize>>) -> Reply {
    let mut body: BoxStream<'static, Result<Bytes, std::io::Error>> = match response.body {
        SimBody::Full(bytes) if cut.is_none() => {
            let mut reply = hyper::Response::new(
                Full::new(bytes)
                    .map_err(|never| match never {})
                    .boxed_unsync(),
            );
            *reply.status_mut() = response.status;
            *reply.headers_mut() = response.headers;
            return reply;
        }
        SimBody::Full(bytes) => futures::stream::once(async move { Ok(bytes) }).boxed(),
        SimBody::Stream(stream) => stream,
    };
    match cut {
        Some(Some(limit)) => body = cut_after(body, limit),
        Some(None) => body = futures::stream::pending().boxed(),
        None => {}
    }
    let frames = body.map(|item| item.map(Frame::data).map_err(|e| Box::new(e) as BoxError));
    let mut reply = hyper::Response::new(BodyExt::boxed_unsync(StreamBody::new(frames)));
    *reply.status_mut() = response.status;
    let mut headers = response.headers;
    headers.remove(http::header::CONTENT_LENGTH);
    *reply.headers_mut() = headers;
    reply
}

/// `body`'s first `limit` bytes, then an error that closes the connection.
fn cut_after(
    body: BoxStream<'static, Result<Bytes, std::io::Error>>,
    limit: usize,
) -> BoxStream<'static, Result<Bytes, std::io::Error>> {
    futures::stream::unfold((body, limit, false), |(mut body, left, done)| async move {
        if done {
            return None;
        }
        let cut =
            || std::io::Error::new(std::io::ErrorKind::ConnectionReset, "cut by the simulator");
        if left == 0 {
            // Let the server flush what it has (the head, the bytes so far) before the reset.
            tokio::task::yield_now().await;
            return Some((Err(cut()), (body, 0, true)));
        }
        match body.next().await {
            Some(Ok(chunk)) if chunk.len() > left => {
                Some((Ok(chunk.slice(..left)), (body, 0, false)))
            }
            Some(Ok(chunk)) => {
                let left = left - chunk.len();
                Some((Ok(chunk), (body, left, false)))
            }
            Some(Err(e)) => Some((Err(e), (body, 0, true))),
            None => {
                tokio::task::yield_now().await;
                Some((Err(cut()), (body, 0, true)))
            }
        }
    })
    .boxed()
}

/// `query` with the values of credential-like names replaced by `<redacted>`.
fn redact_query(query: &str) -> String {
    query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((k, _)) if sandbox_sdk_core::redact::is_credential_name(k) => {
                format!("{k}=<redacted>")
            }
            _ => pair.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// Sends `method path` with header lines `head` (each ending in CRLF) and a declared
/// `Content-Length` of `length`, sends no body byte, and returns the answer's status and
/// body: a server that waits for the body before answering never answers (the guard's
/// timeout fails the test).
#[cfg(test)]
pub(crate) async fn status_without_body(
    addr: SocketAddr,
    method: &str,
    path: &str,
    head: &str,
    length: u64,
) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{head}Content-Length: {length}\r\n\r\n"
    );
    socket.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let mut chunk = [0u8; 4096];
    let read = async {
        // The head and a whole small body, or the close that ends them.
        loop {
            let n = socket.read(&mut chunk).await.unwrap_or(0);
            answer.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&answer).into_owned();
            let done = text.split_once("\r\n\r\n").is_some_and(|(head, body)| {
                let length = head.lines().find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                });
                length.is_some_and(|l| body.len() >= l)
            });
            if n == 0 || done {
                return text;
            }
        }
    };
    let text = tokio::time::timeout(std::time::Duration::from_secs(30), read)
        .await
        .unwrap_or_else(|_| panic!("{method} {path}: no answer while the body was not sent"));
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {text:?}"));
    (
        status,
        text.split_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or_default(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FaultRule;
    use std::time::Duration;

    /// Answers `{"n": <count>}` on every request, counting the ones it acted on.
    struct Counter(std::sync::atomic::AtomicUsize);

    impl Handler for Counter {
        fn admit(&self, head: &SimRequest) -> Result<usize, SimResponse> {
            match head.header("x-key") {
                Some("wrong") => Err(self.error(401, "wrong key")),
                _ => Ok(16),
            }
        }
        fn operation(&self, request: &SimRequest) -> &'static str {
            if request.path == "/stream" {
                "stream"
            } else {
                "count"
            }
        }
        fn handle(&self, request: SimRequest) -> BoxFuture<'static, SimResponse> {
            let n = self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
            Box::pin(async move {
                if request.path == "/stream" {
                    let chunks = (0..4).map(|_| Ok(Bytes::from_static(b"abcd")));
                    SimResponse::stream(200, "text/plain", futures::stream::iter(chunks).boxed())
                } else {
                    SimResponse::json(200, &serde_json::json!({ "n": n }))
                }
            })
        }
        fn error(&self, status: u16, message: &str) -> SimResponse {
            SimResponse::json(status, &serde_json::json!({ "message": message }))
        }
    }

    async fn start(spec: &str) -> (SimServer, Arc<Counter>) {
        let handler = Arc::new(Counter(Default::default()));
        let plan = FaultPlan::parse(spec).unwrap();
        let server = SimServer::start(handler.clone(), 0, plan).await.unwrap();
        (server, handler)
    }

    fn acted(handler: &Counter) -> usize {
        handler.0.load(std::sync::atomic::Ordering::SeqCst)
    }

    #[tokio::test]
    async fn an_injected_status_answers_without_acting_and_carries_retry_after() {
        let (server, handler) = start("count=429:7#1").await;
        let answer = reqwest::get(format!("{}/x", server.url())).await.unwrap();
        assert_eq!(answer.status().as_u16(), 429);
        assert_eq!(answer.headers()["retry-after"], "7");
        assert_eq!(acted(&handler), 0);
        let answer = reqwest::get(format!("{}/x", server.url())).await.unwrap();
        assert_eq!(answer.text().await.unwrap(), r#"{"n":1}"#);
        let log = server.log().entries();
        assert_eq!(log[0].fault.as_deref(), Some("429:7"));
        assert_eq!(
            log.iter().map(|e| e.status).collect::<Vec<_>>(),
            [Some(429), Some(200)]
        );
    }

    #[tokio::test]
    async fn reset_closes_before_acting_and_reset_after_closes_after_acting() {
        let (server, handler) = start("count=reset#1;count=reset-after#1").await;
        assert!(reqwest::get(format!("{}/x", server.url())).await.is_err());
        assert_eq!(acted(&handler), 0);
        assert!(reqwest::get(format!("{}/x", server.url())).await.is_err());
        assert_eq!(acted(&handler), 1);
        assert_eq!(server.log().entries()[1].status, None);
    }

    #[tokio::test]
    async fn cut_closes_mid_body_and_silence_sends_no_body_byte() {
        let (server, _) = start("stream=cut:6#1;stream=silence#1").await;
        let answer = reqwest::get(format!("{}/stream", server.url()))
            .await
            .unwrap();
        assert_eq!(answer.status().as_u16(), 200);
        assert!(answer.bytes().await.is_err());
        let answer = reqwest::get(format!("{}/stream", server.url()))
            .await
            .unwrap();
        let mut body = answer.bytes_stream();
        let next = tokio::time::timeout(Duration::from_millis(200), body.next()).await;
        assert!(next.is_err(), "a silent body yields nothing");
        let answer = reqwest::get(format!("{}/stream", server.url()))
            .await
            .unwrap();
        assert_eq!(answer.text().await.unwrap(), "abcdabcdabcdabcd");
    }

    #[tokio::test]
    async fn malformed_keeps_the_status_and_breaks_the_json() {
        let (server, handler) = start("").await;
        server
            .faults()
            .add(FaultRule::new("*", Fault::Malformed).times(1));
        let answer = reqwest::get(format!("{}/x", server.url())).await.unwrap();
        assert_eq!(answer.status().as_u16(), 200);
        let body = answer.bytes().await.unwrap();
        assert!(serde_json::from_slice::<serde_json::Value>(&body).is_err());
        assert_eq!(acted(&handler), 1);
    }

    #[tokio::test]
    async fn bodies_are_logged_only_when_asked() {
        let (server, _) = start("").await;
        let client = reqwest::Client::new();
        client
            .post(format!("{}/x", server.url()))
            .body("first")
            .send()
            .await
            .unwrap();
        server.log().capture_bodies(true);
        client
            .post(format!("{}/x", server.url()))
            .body("second")
            .send()
            .await
            .unwrap();
        let log = server.log().entries();
        assert_eq!(
            (
                log[0].request_body.as_deref(),
                log[0].response_body.as_deref()
            ),
            (None, None)
        );
        assert_eq!(log[1].request_body.as_deref(), Some("second"));
        assert_eq!(log[1].response_body.as_deref(), Some(r#"{"n":2}"#));
        assert!(
            !server
                .log()
                .to_json_lines()
                .lines()
                .next()
                .unwrap()
                .contains("body")
        );
    }

    /// Sends `GET /x` with `head` (header lines, each ending in CRLF) on a fresh connection,
    /// as a browser or any other client could, and returns the answer's status.
    async fn status_of_raw(server: &SimServer, head: &str) -> u16 {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut socket = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
        let request = format!("GET /x HTTP/1.1\r\n{head}Connection: close\r\n\r\n");
        socket.write_all(request.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        socket.read_to_end(&mut answer).await.unwrap();
        let answer = String::from_utf8_lossy(&answer);
        answer
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no status in {answer:?}"))
    }

    #[tokio::test]
    async fn a_request_for_a_host_that_is_not_loopback_is_refused_before_any_handler_runs() {
        let (server, handler) = start("").await;
        let port = server.addr().port();
        // What a DNS-rebinding page sends (its own name, now resolving to 127.0.0.1), and
        // names that only look like loopback.
        for host in [
            format!("Host: rebind.example:{port}\r\n"),
            "Host: rebind.example\r\n".to_owned(),
            format!("Host: 127.0.0.1.rebind.example:{port}\r\n"),
            "Host: localhost.rebind.example\r\n".to_owned(),
            format!("Host: 0.0.0.0:{port}\r\n"),
            format!("Host: [::2]:{port}\r\n"),
            format!("Host: 10.0.0.1:{port}\r\n"),
            "Host: \r\n".to_owned(),
            String::new(),
        ] {
            assert_eq!(status_of_raw(&server, &host).await, 421, "{host:?}");
        }
        assert_eq!(acted(&handler), 0);
        assert!(server.log().entries().is_empty());
        for host in [
            format!("127.0.0.1:{port}"),
            "127.0.0.1".to_owned(),
            format!("127.3.2.1:{port}"),
            format!("localhost:{port}"),
            "LocalHost".to_owned(),
            format!("localhost.:{port}"),
            format!("[::1]:{port}"),
            format!("49983-isb1.localhost:{port}"),
            format!("3000-abc.preview.localhost:{port}"),
        ] {
            assert_eq!(
                status_of_raw(&server, &format!("Host: {host}\r\n")).await,
                200,
                "{host:?}"
            );
        }
    }

    #[tokio::test]
    async fn a_request_from_a_page_that_is_not_loopback_is_refused_before_any_handler_runs() {
        let (server, handler) = start("").await;
        let host = format!("Host: {}\r\n", server.addr());
        for origin in [
            "http://rebind.example",
            "https://rebind.example:443",
            "http://127.0.0.1.rebind.example",
            "http://localhost.rebind.example:3000",
            "null",
            "file://",
        ] {
            let head = format!("{host}Origin: {origin}\r\n");
            assert_eq!(status_of_raw(&server, &head).await, 403, "{origin:?}");
        }
        assert_eq!(acted(&handler), 0);
        assert!(server.log().entries().is_empty());
        for origin in [
            "http://localhost:3000",
            "http://127.0.0.1",
            "https://[::1]:8443",
            "http://app.localhost:5173",
        ] {
            let head = format!("{host}Origin: {origin}\r\n");
            assert_eq!(status_of_raw(&server, &head).await, 200, "{origin:?}");
        }
    }

    #[tokio::test]
    async fn admission_refuses_from_the_head_and_caps_the_body_of_its_route() {
        let (server, handler) = start("").await;
        // A huge declared body with a wrong key: refused, not one byte read.
        let (status, body) =
            status_without_body(server.addr(), "POST", "/x", "x-key: wrong\r\n", 1 << 40).await;
        assert_eq!((status, body.as_str()), (401, r#"{"message":"wrong key"}"#));
        // Over the route's cap, declared or streamed: 413.
        let (status, _) = status_without_body(server.addr(), "POST", "/x", "", 17).await;
        assert_eq!(status, 413);
        let client = reqwest::Client::new();
        let chunks =
            futures::stream::iter([Ok::<_, std::io::Error>(vec![b'a'; 10]), Ok(vec![b'b'; 10])]);
        let streamed = client
            .post(format!("{}/x", server.url()))
            .body(reqwest::Body::wrap_stream(chunks))
            .send()
            .await
            .unwrap();
        assert_eq!(streamed.status().as_u16(), 413);
        // A short refused body is read and dropped: the client gets its answer, then the next.
        let refused = client
            .post(format!("{}/x", server.url()))
            .header("x-key", "wrong")
            .body("short")
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status().as_u16(), 401);
        let fine = client
            .post(format!("{}/x", server.url()))
            .body("0123456789abcdef")
            .send()
            .await
            .unwrap();
        assert_eq!(fine.text().await.unwrap(), r#"{"n":1}"#);
        assert_eq!(acted(&handler), 1);
        let statuses: Vec<_> = server.log().entries().iter().map(|e| e.status).collect();
        assert_eq!(
            statuses,
            [Some(401), Some(413), Some(413), Some(401), Some(200)]
        );
    }

    #[test]
    fn decode_handles_escapes_plus_and_broken_escapes() {
        assert_eq!(decode("a%2Fb+c"), "a/b c");
        assert_eq!(decode("%zz%4"), "%zz%4");
        assert_eq!(decode("%C3%A9"), "é");
    }
}
