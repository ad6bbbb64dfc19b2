//! Replay: a cassette mounted on a wiremock server, one mock per interaction with an exact call
//! count, strict or any order, and a lowest-priority catch-all whose answer explains the miss.
//!
//! Adapters talk to a small loopback proxy in front of wiremock ([`ReplayServer::url`]); it logs
//! every request (for the request-count checks and the insta snapshots) and turns the cassette's
//! `fault`s into real connection resets and truncated bodies.
//!
//! The same proxy plays the cassette's WebSocket exchanges (see
//! [`cassette`](crate::cassette#websocket-exchanges)): an upgrade request that matches a
//! WebSocket interaction (and is due, in strict order) is accepted there, on the same base URL
//! (`ws://127.0.0.1:PORT`), and its script played; any other upgrade request goes to wiremock as
//! a plain request, where a refused upgrade (an ordinary interaction) or the catch-all answers
//! it. [`ReplayServer::verify`] reports script failures with the HTTP ones.
//!
//! ```no_run
//! # async fn demo() -> Result<(), String> {
//! use sandbox_conformance::cassette::{Cassette, Placeholders};
//! use sandbox_conformance::replay::ReplayServer;
//!
//! let server = ReplayServer::start().await.map_err(|e| e.to_string())?;
//! let cassette = Cassette::load("tests/cassettes/connect.json".as_ref()).map_err(|e| e.to_string())?
//!     .substituted(&Placeholders::standard(server.url()))?;
//! server.mount(&cassette, false).await?;
//! // ... point an adapter at server.url() and drive it ...
//! server.verify().await?; // every interaction used exactly `times` times, nothing unmatched
//! # Ok(()) }
//! ```

use crate::cassette::{
    ANY, Auth, Body, Cassette, Fault, Frame, Interaction, JsonMatch, Order, RequestSpec, TOKEN,
    WsMessage, WsStep, decode_connect, describe_ws, json_matches,
};
use crate::proxy::{Exchange, FAULT_HEADER, Handler, LoggedRequest, Proxy, Upgrade, WsConn};
use futures::{SinkExt, StreamExt};
use sandbox_sdk_core::redact::is_credential_name;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::Notify;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_util::sync::CancellationToken;
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// How long [`ReplayServer::verify`] waits for WebSocket scripts still running to reach their
/// end (the client's last frames in flight) before it reports them unfinished.
const WS_SETTLE: Duration = Duration::from_secs(1);

/// The close code replay sends when a client's message is not the one the script expects.
const WS_MISMATCH_CLOSE: u16 = 1008;

/// The status the catch-all answers with: not retryable, and unlike anything a provider sends.
pub const MISS_STATUS: u16 = 418;

#[derive(Debug, Default)]
struct State {
    interactions: Vec<Interaction>,
    used: Vec<u64>,
    order: Order,
    lenient: bool,
    misses: Vec<String>,
    /// Every WebSocket connection accepted, in order.
    sessions: Vec<WsSession>,
}

/// One accepted WebSocket connection and how far its script got.
#[derive(Debug)]
struct WsSession {
    interaction: usize,
    /// The step being played (the script's length once it has ended).
    step: usize,
    /// Whether the script has ended (played through, failed or held silent).
    done: bool,
    failure: Option<String>,
}

impl State {
    fn available(&self, index: usize) -> Result<(), String> {
        if self.lenient {
            return Ok(());
        }
        let times = self.interactions[index].times;
        if self.used[index] >= times {
            return Err(format!(
                "it was already used {} of {} time(s)",
                self.used[index], times
            ));
        }
        if self.order == Order::Strict
            && let Some(prev) = (0..index).find(|j| self.used[*j] < self.interactions[*j].times)
        {
            return Err(format!(
                "strict order expects #{prev} {} first (used {} of {})",
                describe(&self.interactions[prev].request),
                self.used[prev],
                self.interactions[prev].times
            ));
        }
        Ok(())
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A wiremock server with a logging, fault-injecting, WebSocket-playing proxy in front.
pub struct ReplayServer {
    mock: MockServer,
    proxy: Proxy,
    state: Arc<Mutex<State>>,
    log: Arc<Mutex<Vec<LoggedRequest>>>,
    ws: Arc<WsShared>,
}

/// What the proxy's WebSocket scripts share with the server.
#[derive(Default)]
struct WsShared {
    /// Woken whenever a script ends.
    ended: Notify,
    /// Cancels every script still running (the server is being dropped or reset).
    cancel: CancellationToken,
}

impl Drop for ReplayServer {
    fn drop(&mut self) {
        self.ws.cancel.cancel();
    }
}

impl std::fmt::Debug for ReplayServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplayServer")
            .field("url", &self.proxy.url())
            .finish()
    }
}

struct Front {
    upstream: String,
    log: Arc<Mutex<Vec<LoggedRequest>>>,
    state: Arc<Mutex<State>>,
    ws: Arc<WsShared>,
}

impl Handler for Front {
    fn on_request(&self, request: &LoggedRequest) {
        self.log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(request.clone());
    }
    fn upstream(&self, _request: &LoggedRequest) -> Result<String, String> {
        Ok(self.upstream.clone())
    }
    fn on_exchange(&self, _exchange: Exchange) {}
    fn upgrade(&self, request: &LoggedRequest) -> Upgrade {
        let Some(request) = as_wiremock(request) else {
            return Upgrade::Http;
        };
        let mut state = lock(&self.state);
        // The first WebSocket interaction this upgrade matches and may use now; anything else
        // goes to wiremock (a refused upgrade, or the catch-all explaining the miss).
        let found = (0..state.interactions.len()).find(|&i| {
            state.interactions[i].response.websocket.is_some()
                && mismatch(&state.interactions[i].request, &request).is_none()
                && state.available(i).is_ok()
        });
        let Some(index) = found else {
            return Upgrade::Http;
        };
        state.used[index] += 1;
        let session = state.sessions.len();
        state.sessions.push(WsSession {
            interaction: index,
            step: 0,
            done: false,
            failure: None,
        });
        let response = &state.interactions[index].response;
        let steps = response.websocket.clone().unwrap_or_default();
        let headers = response
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let delay = response.delay_ms.map(Duration::from_millis);
        let (state, ws) = (self.state.clone(), self.ws.clone());
        Upgrade::Serve {
            headers,
            delay,
            serve: Box::new(move |conn| {
                Box::pin(async move {
                    let script = Script {
                        state: &state,
                        session,
                    };
                    tokio::select! {
                        () = script.play(conn, &steps) => {}
                        () = ws.cancel.cancelled() => {}
                    }
                    ws.ended.notify_waiters();
                })
            }),
        }
    }
}

/// A logged request as wiremock's matchers see one (no body: upgrade requests carry none).
fn as_wiremock(request: &LoggedRequest) -> Option<Request> {
    let target = request.line().split_once(' ').map(|(_, t)| t.to_owned())?;
    let url = wiremock::http::Url::parse(&format!("http://127.0.0.1{target}")).ok()?;
    let method = wiremock::http::Method::from_bytes(request.method.as_bytes()).ok()?;
    let mut headers = wiremock::http::HeaderMap::new();
    for (k, v) in &request.headers {
        if let (Ok(name), Ok(value)) = (
            wiremock::http::HeaderName::from_bytes(k.as_bytes()),
            wiremock::http::HeaderValue::from_str(v),
        ) {
            headers.append(name, value);
        }
    }
    Some(Request {
        url,
        method,
        headers,
        body: request.body.to_vec(),
    })
}

/// One WebSocket script being played on an accepted connection.
struct Script<'a> {
    state: &'a Mutex<State>,
    session: usize,
}

impl Script<'_> {
    fn at(&self, step: usize) {
        lock(self.state).sessions[self.session].step = step;
    }

    fn end(&self, failure: Option<String>) {
        let mut state = lock(self.state);
        let session = &mut state.sessions[self.session];
        session.done = true;
        if session.failure.is_none() {
            session.failure = failure;
        }
    }

    /// Plays `steps` on `conn`; a failure is kept for [`ReplayServer::verify`].
    async fn play(&self, mut conn: WsConn, steps: &[WsStep]) {
        for (n, step) in steps.iter().enumerate() {
            self.at(n);
            match step {
                WsStep::Server(message) => {
                    let Ok(frame) = to_frame(message) else {
                        return self.end(Some(format!("cannot send {}", message.describe())));
                    };
                    if conn.send(frame).await.is_err() {
                        return self.end(Some(format!(
                            "the client went away before the server could send {}",
                            message.describe()
                        )));
                    }
                }
                WsStep::Client(want) => {
                    let (binary, payload) = match next_data(&mut conn).await {
                        Ok(data) => data,
                        Err(ended) => {
                            return self.end(Some(format!(
                                "expected the client to send {}, but {ended}",
                                want.describe()
                            )));
                        }
                    };
                    if let Err(diff) = want.matches(binary, &payload) {
                        let failure = format!("client message: {diff}");
                        let reason: String = failure.chars().take(100).collect();
                        let _ = conn
                            .send(Message::Close(Some(CloseFrame {
                                code: WS_MISMATCH_CLOSE.into(),
                                reason: reason.into(),
                            })))
                            .await;
                        return self.end(Some(failure));
                    }
                }
                WsStep::Close(_) | WsStep::CloseWithReason { .. } => {
                    let (code, reason) = match step {
                        WsStep::CloseWithReason { code, reason } => (*code, reason.as_str()),
                        WsStep::Close(code) => (*code, ""),
                        _ => unreachable!("matched above"),
                    };
                    let _ = conn
                        .send(Message::Close(Some(CloseFrame {
                            code: code.into(),
                            reason: reason.to_owned().into(),
                        })))
                        .await;
                    self.end(None);
                    // Read the client's echo of the close.
                    let _ = tokio::time::timeout(Duration::from_secs(5), async {
                        while let Some(Ok(_)) = conn.next().await {}
                    })
                    .await;
                    return;
                }
                WsStep::ClientClose(want) => {
                    let failure = loop {
                        match conn.next().await {
                            Some(Ok(Message::Close(frame))) => {
                                let got = frame.as_ref().map(|f| u16::from(f.code));
                                break match (want, got) {
                                    (Some(w), Some(g)) if *w == g => None,
                                    (None, _) => None,
                                    (Some(w), got) => Some(format!(
                                        "expected the client to close with code {w}, it closed \
                                         with {}",
                                        got.map_or("no code".to_owned(), |g| g.to_string())
                                    )),
                                };
                            }
                            Some(Ok(Message::Text(t))) => {
                                break Some(format!(
                                    "expected the client to close, it sent {}",
                                    describe_ws(false, t.as_bytes())
                                ));
                            }
                            Some(Ok(Message::Binary(b))) => {
                                break Some(format!(
                                    "expected the client to close, it sent {}",
                                    describe_ws(true, &b)
                                ));
                            }
                            Some(Ok(_)) => {}
                            None | Some(Err(_)) => {
                                break want.map(|w| {
                                    format!(
                                        "expected the client to close with code {w}, it went \
                                         away without a close frame"
                                    )
                                });
                            }
                        }
                    };
                    let _ = conn.flush().await;
                    return self.end(failure);
                }
                WsStep::DelayMs(ms) => tokio::time::sleep(Duration::from_millis(*ms)).await,
                WsStep::Silent => {
                    self.end(None);
                    // Held, never read: pings go unanswered until the server goes.
                    std::future::pending::<()>().await;
                }
                WsStep::Reset => {
                    self.end(None);
                    drop(conn);
                    return;
                }
            }
        }
        self.at(steps.len());
        self.end(None);
        // Held open: pings are answered; a data message the script does not expect fails it.
        loop {
            match next_data(&mut conn).await {
                Ok((binary, payload)) => {
                    let mut state = lock(self.state);
                    let session = &mut state.sessions[self.session];
                    if session.failure.is_none() {
                        session.failure = Some(format!(
                            "the client sent {} after the script's last step",
                            describe_ws(binary, &payload)
                        ));
                    }
                }
                Err(_) => return,
            }
        }
    }
}

/// The client's next data message (`binary`, payload), pings and pongs skipped; or how the
/// connection ended instead.
async fn next_data(conn: &mut WsConn) -> Result<(bool, Vec<u8>), String> {
    loop {
        match conn.next().await {
            Some(Ok(Message::Text(t))) => return Ok((false, t.as_bytes().to_vec())),
            Some(Ok(Message::Binary(b))) => return Ok((true, b.to_vec())),
            Some(Ok(Message::Close(frame))) => {
                let code = frame.map_or("no code".to_owned(), |f| u16::from(f.code).to_string());
                return Err(format!("the client closed the connection ({code})"));
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(format!("the connection failed ({e})")),
            None => return Err("the client went away".to_owned()),
        }
    }
}

/// The frame a script's message sends.
fn to_frame(message: &WsMessage) -> Result<Message, String> {
    Ok(match message {
        WsMessage::Text(t) => Message::Text(t.as_str().into()),
        WsMessage::Json(v) => Message::Text(v.to_string().into()),
        WsMessage::BinaryBase64(_) => Message::Binary(message.bytes()?.into()),
    })
}

/// What a script step waits for or does, for messages.
fn describe_step(step: &WsStep) -> String {
    match step {
        WsStep::Server(m) => format!("sending {}", m.describe()),
        WsStep::Client(m) => format!("waiting for the client to send {}", m.describe()),
        WsStep::Close(code) => format!("closing with {code}"),
        WsStep::CloseWithReason { code, reason } => format!("closing with {code} ({reason})"),
        WsStep::ClientClose(Some(code)) => format!("waiting for the client to close with {code}"),
        WsStep::ClientClose(None) => "waiting for the client to close".to_owned(),
        WsStep::DelayMs(ms) => format!("pausing {ms} ms"),
        WsStep::Silent => "holding the connection silent".to_owned(),
        WsStep::Reset => "dropping the connection".to_owned(),
    }
}

impl ReplayServer {
    /// Starts wiremock and the proxy in front of it, both on loopback.
    pub async fn start() -> std::io::Result<ReplayServer> {
        let mock = MockServer::start().await;
        let log = Arc::new(Mutex::new(Vec::new()));
        let state = Arc::new(Mutex::new(State::default()));
        let ws = Arc::new(WsShared::default());
        let proxy = Proxy::start(Arc::new(Front {
            upstream: mock.uri(),
            log: log.clone(),
            state: state.clone(),
            ws: ws.clone(),
        }))
        .await?;
        Ok(ReplayServer {
            mock,
            proxy,
            state,
            log,
            ws,
        })
    }

    /// The base URL to point every adapter endpoint at (`http://127.0.0.1:PORT`).
    pub fn url(&self) -> &str {
        self.proxy.url()
    }

    /// Mounts a cassette whose placeholders are already substituted. `lenient` mounts every
    /// interaction for any number of uses in any order (used for the `connect` prelude of a
    /// not-supported probe). Mount one cassette per server.
    pub async fn mount(&self, cassette: &Cassette, lenient: bool) -> Result<(), String> {
        {
            let mut state = lock(&self.state);
            if !state.interactions.is_empty() {
                return Err("a cassette is already mounted on this server".into());
            }
            state.interactions = cassette.interactions.clone();
            state.used = vec![0; cassette.interactions.len()];
            state.order = cassette.order;
            state.lenient = lenient;
        }
        for (index, interaction) in cassette.interactions.iter().enumerate() {
            if interaction.response.websocket.is_some() {
                // Played by the proxy in front; a plain request for it reaches the catch-all.
                continue;
            }
            let template = response_template(interaction)?;
            let mut mock = Mock::given(InteractionMatch {
                index,
                state: self.state.clone(),
            })
            .respond_with(template)
            .named(format!("#{index} {}", describe(&interaction.request)));
            mock = if lenient {
                mock.expect(0..)
            } else {
                mock.expect(interaction.times)
            };
            self.mock.register(mock).await;
        }
        self.mock
            .register(
                Mock::given(wiremock::matchers::any())
                    .respond_with(CatchAll {
                        state: self.state.clone(),
                    })
                    .with_priority(u8::MAX)
                    .named("catch-all"),
            )
            .await;
        Ok(())
    }

    /// Every request that reached the server so far, in arrival order.
    pub fn requests(&self) -> Vec<LoggedRequest> {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// How many requests reached the server so far.
    pub fn request_count(&self) -> usize {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// The catch-all's explanations of requests that matched no interaction.
    pub fn misses(&self) -> Vec<String> {
        lock(&self.state).misses.clone()
    }

    /// Checks that nothing reached the catch-all, that every interaction was used exactly
    /// `times` times and that every WebSocket script played through with the client messages it
    /// expects (then runs wiremock's own `verify`). The error lists every problem.
    ///
    /// A script still running (the client's last frames in flight) gets a moment to end first.
    pub async fn verify(&self) -> Result<(), String> {
        self.settle_websockets().await;
        let problems = {
            let state = lock(&self.state);
            let mut problems: Vec<String> = state
                .misses
                .iter()
                .map(|m| format!("unmatched request:\n{m}"))
                .collect();
            if !state.lenient {
                for (i, interaction) in state.interactions.iter().enumerate() {
                    if state.used[i] != interaction.times {
                        problems.push(format!(
                            "interaction #{i} {} was used {} time(s), the cassette expects exactly {}",
                            describe_interaction(interaction),
                            state.used[i],
                            interaction.times
                        ));
                    }
                }
            }
            for session in &state.sessions {
                let interaction = &state.interactions[session.interaction];
                let steps = interaction
                    .response
                    .websocket
                    .as_deref()
                    .unwrap_or_default();
                let what = format!(
                    "interaction #{} {}",
                    session.interaction,
                    describe_interaction(interaction)
                );
                if let Some(failure) = &session.failure {
                    problems.push(format!("{what}, script step {}: {failure}", session.step));
                } else if !session.done {
                    let doing = steps
                        .get(session.step)
                        .map(describe_step)
                        .unwrap_or_default();
                    problems.push(format!(
                        "{what} did not finish its script: still at step {} ({doing}) when the \
                         scenario ended",
                        session.step
                    ));
                }
            }
            problems
        };
        if !problems.is_empty() {
            // Clear wiremock's expectations so dropping the server does not panic on top.
            self.mock.reset().await;
            return Err(problems.join("\n"));
        }
        self.mock.verify().await;
        Ok(())
    }

    /// Forgets every mock and expectation (call before dropping a server whose scenario failed).
    pub async fn reset(&self) {
        self.mock.reset().await;
    }

    /// Waits (at most [`WS_SETTLE`]) for every accepted WebSocket script to end.
    async fn settle_websockets(&self) {
        let deadline = tokio::time::Instant::now() + WS_SETTLE;
        loop {
            let ended = self.ws.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if lock(&self.state).sessions.iter().all(|s| s.done) {
                return;
            }
            if tokio::time::timeout_at(deadline, ended).await.is_err() {
                return;
            }
        }
    }
}

/// `METHOD /path?k=v` of an interaction, marked `(WebSocket)` for an upgrade with a script.
fn describe_interaction(interaction: &Interaction) -> String {
    let line = describe(&interaction.request);
    if interaction.response.websocket.is_some() {
        format!("{line} (WebSocket)")
    } else {
        line
    }
}

/// Whether a request (as wiremock sees it, after the proxy) asked for a WebSocket upgrade: the
/// proxy drops the `Upgrade` header but passes the key on.
fn is_upgrade(request: &Request) -> bool {
    request.headers.contains_key("sec-websocket-key")
}

/// [`mismatch`] for a whole interaction: a WebSocket interaction also needs an upgrade.
fn interaction_mismatch(interaction: &Interaction, request: &Request) -> Option<String> {
    if let Some(reason) = mismatch(&interaction.request, request) {
        return Some(reason);
    }
    if interaction.response.websocket.is_some() && !is_upgrade(request) {
        return Some(
            "the cassette expects a WebSocket upgrade here, the request is plain HTTP".to_owned(),
        );
    }
    None
}

struct InteractionMatch {
    index: usize,
    state: Arc<Mutex<State>>,
}

impl wiremock::Match for InteractionMatch {
    fn matches(&self, request: &Request) -> bool {
        let mut state = lock(&self.state);
        let Some(interaction) = state.interactions.get(self.index) else {
            return false;
        };
        if mismatch(&interaction.request, request).is_some() {
            return false;
        }
        if state.available(self.index).is_err() {
            return false;
        }
        state.used[self.index] += 1;
        true
    }
}

fn response_template(interaction: &Interaction) -> Result<ResponseTemplate, String> {
    let spec = &interaction.response;
    let mut template = ResponseTemplate::new(spec.status);
    let mut has_content_type = false;
    for (k, v) in &spec.headers {
        if let Some(why) = crate::cassette::header_problem(k, v) {
            return Err(format!("response header {k:?}: {why}"));
        }
        has_content_type |= k.eq_ignore_ascii_case("content-type");
        template = template.insert_header(k.as_str(), v.as_str());
    }
    let (bytes, default_ct) = match (&spec.body, &spec.frames) {
        (Some(body), _) => (body.bytes()?, Some(body.default_content_type())),
        (None, Some(frames)) => {
            let mut all = Vec::new();
            for frame in frames {
                all.extend(frame.bytes()?);
            }
            let ct = match frames.first() {
                Some(Frame::Connect(_) | Frame::ConnectEnd(_)) => "application/connect+json",
                Some(Frame::Jsonl(_)) => "application/x-ndjson",
                Some(Frame::Json(_)) => "application/json",
                Some(Frame::Text(_)) => "text/plain; charset=utf-8",
                _ => "application/octet-stream",
            };
            (all, Some(ct))
        }
        (None, None) => (Vec::new(), None),
    };
    if !has_content_type && !bytes.is_empty() {
        template = template.insert_header(
            "content-type",
            default_ct.unwrap_or("application/octet-stream"),
        );
    }
    match spec.fault {
        Some(Fault::Reset) => template = template.insert_header(FAULT_HEADER, "reset"),
        Some(Fault::Truncate) => template = template.insert_header(FAULT_HEADER, "truncate"),
        None => {}
    }
    if let Some(ms) = spec.delay_ms {
        template = template.set_delay(std::time::Duration::from_millis(ms));
    }
    Ok(template.set_body_bytes(bytes))
}

struct CatchAll {
    state: Arc<Mutex<State>>,
}

impl Respond for CatchAll {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let mut state = lock(&self.state);
        let explanation = explain_miss(&state, request);
        state.misses.push(explanation.clone());
        ResponseTemplate::new(MISS_STATUS).set_body_json(serde_json::json!({
            "message": explanation,
            "code": MISS_STATUS,
            "error": "sandbox-conformance: no cassette interaction matched this request",
        }))
    }
}

/// `METHOD /path?k=v` of a cassette request.
pub(crate) fn describe(spec: &RequestSpec) -> String {
    let mut out = format!("{} {}", spec.method.to_ascii_uppercase(), spec.path);
    if !spec.query.is_empty() {
        let pairs: Vec<String> = spec
            .query
            .iter()
            .flat_map(|(k, v)| v.values().into_iter().map(move |v| format!("{k}={v}")))
            .collect();
        out.push('?');
        out.push_str(&pairs.join("&"));
    }
    out
}

/// A value as a message may show it: credentials become `<redacted>`.
fn shown_value(name: &str, value: &str) -> String {
    if is_credential_name(name) {
        "<redacted>".to_owned()
    } else {
        value.to_owned()
    }
}

fn describe_request(request: &Request) -> String {
    let mut out = format!("{} {}", request.method, request.url.path());
    if request.url.query().is_some() {
        let pairs: Vec<String> = request
            .url
            .query_pairs()
            .map(|(k, v)| format!("{k}={}", shown_value(&k, &v)))
            .collect();
        out.push('?');
        out.push_str(&pairs.join("&"));
    }
    let body = preview_body(&request.body);
    if !body.is_empty() {
        out.push_str(&format!(" body: {body}"));
    }
    out
}

/// A short, one-line rendering of a body for messages.
pub(crate) fn preview_body(body: &[u8]) -> String {
    if body.is_empty() {
        return String::new();
    }
    if let Some(envelopes) = decode_connect(body) {
        let parts: Vec<String> = envelopes.iter().map(|(_, v)| v.to_string()).collect();
        return cut(&format!("connect[{}]", parts.join(", ")), 300);
    }
    match std::str::from_utf8(body) {
        Ok(text) => cut(text, 300),
        Err(_) => format!("<{} bytes>", body.len()),
    }
}

fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.replace('\n', "\\n")
    } else {
        let head: String = text.chars().take(max).collect();
        format!(
            "{}… ({} chars)",
            head.replace('\n', "\\n"),
            text.chars().count()
        )
    }
}

fn explain_miss(state: &State, request: &Request) -> String {
    let mut out = format!("  request: {}\n", describe_request(request));
    if state.interactions.is_empty() {
        out.push_str("  the cassette has no interactions");
        return out;
    }
    let mut next = None;
    if state.order == Order::Strict && !state.lenient {
        next =
            (0..state.interactions.len()).find(|i| state.used[*i] < state.interactions[*i].times);
        match next {
            Some(next) => out.push_str(&format!(
                "  next expected (strict order): #{next} {}\n",
                describe_interaction(&state.interactions[next])
            )),
            None => out.push_str("  every interaction of the cassette has been used up\n"),
        }
    }
    // Of equally near interactions, the one strict order expects next is the one to compare.
    let mut best: Option<(usize, u32)> = None;
    for (i, interaction) in state.interactions.iter().enumerate() {
        let score = similarity(interaction, request) * 2 + u32::from(next == Some(i));
        if best.is_none_or(|(_, s)| score > s) {
            best = Some((i, score));
        }
    }
    if let Some((i, _)) = best {
        let interaction = &state.interactions[i];
        let why = match interaction_mismatch(interaction, request) {
            Some(reason) => reason,
            None => match state.available(i) {
                Err(reason) => format!("it matches, but {reason}"),
                Ok(()) => "it matches".to_owned(),
            },
        };
        out.push_str(&format!(
            "  nearest: #{i} {}: {why}",
            describe_interaction(interaction)
        ));
    }
    out
}

fn similarity(interaction: &Interaction, request: &Request) -> u32 {
    let spec = &interaction.request;
    let mut score = 0;
    if spec.method.eq_ignore_ascii_case(request.method.as_str()) {
        score += 100;
    }
    let want: Vec<&str> = spec.path.split('/').collect();
    let got: Vec<&str> = request.url.path().split('/').collect();
    if want.len() == got.len() {
        score += 20;
    }
    for (w, g) in want.iter().zip(&got) {
        if w == g || *w == ANY {
            score += 10;
        } else {
            break;
        }
    }
    if interaction_mismatch(interaction, request).is_none() {
        score += 1000;
    }
    score
}

/// Why `request` does not match `spec`, or `None` when it does (ignoring counts and order).
pub(crate) fn mismatch(spec: &RequestSpec, request: &Request) -> Option<String> {
    if !spec.method.eq_ignore_ascii_case(request.method.as_str()) {
        return Some(format!(
            "method: expected {}, got {}",
            spec.method.to_ascii_uppercase(),
            request.method
        ));
    }
    let path = request.url.path();
    if !path_matches(&spec.path, path) {
        return Some(format!("path: expected {}, got {path}", spec.path));
    }
    if let Some(reason) = query_mismatch(spec, request) {
        return Some(reason);
    }
    for (name, want) in &spec.headers {
        let got: Vec<&str> = request
            .headers
            .get_all(name.as_str())
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        if got.is_empty() && is_credential_name(name) {
            return Some(format!(
                "credentials: the request carries no API key (header {name} is missing): the \
                 adapter must send its credentials on every request"
            ));
        }
        if got.is_empty() {
            return Some(format!("header {name}: missing"));
        }
        // A credential matches on the API key it carries, whatever its scheme (`Bearer`,
        // `FlyV1`, …: adapters pick it by the key's form, and the replay key has no form).
        if is_credential_name(name) && want.contains(TOKEN) {
            if got.iter().any(|g| g.contains(TOKEN)) {
                continue;
            }
            return Some(format!(
                "credentials: header {name} does not carry the API key (got <a different credential>)"
            ));
        }
        if want != ANY && !got.iter().any(|g| g == want) {
            let shown = if is_credential_name(name) {
                "<a different credential>".to_owned()
            } else {
                got.join(", ")
            };
            return Some(format!("header {name}: expected {want:?}, got {shown}"));
        }
    }
    if let Some(body) = &spec.body
        && let Err(reason) = body_matches(body, spec.json_match, &request.body)
    {
        return Some(format!("body: {reason}"));
    }
    if spec.auth == Auth::Required
        && !spec.headers.keys().any(|k| is_credential_name(k))
        && !carries_token(request)
    {
        return Some(
            "credentials: the request carries no API key (no authorization, x-api-key, \
             x-access-token or other credential header or query parameter holds it): the \
             adapter must send its credentials on every request (mark a request that is \
             authorised otherwise with \"auth\": \"none\" in the cassette)"
                .to_owned(),
        );
    }
    None
}

/// Whether a credential header or query parameter of `request` holds [`TOKEN`].
fn carries_token(request: &Request) -> bool {
    let in_headers = request.headers.iter().any(|(name, value)| {
        is_credential_name(name.as_str()) && value.to_str().is_ok_and(|v| v.contains(TOKEN))
    });
    in_headers
        || request
            .url
            .query_pairs()
            .any(|(name, value)| is_credential_name(&name) && value.contains(TOKEN))
}

fn path_matches(want: &str, got: &str) -> bool {
    if want == got {
        return true;
    }
    let decoded = crate::cassette::percent_decode(got, false);
    if want == decoded {
        return true;
    }
    let w: Vec<&str> = want.split('/').collect();
    let g: Vec<&str> = decoded.split('/').collect();
    w.len() == g.len() && w.iter().zip(&g).all(|(w, g)| w == g || *w == ANY)
}

fn query_mismatch(spec: &RequestSpec, request: &Request) -> Option<String> {
    let mut got: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (k, v) in request.url.query_pairs() {
        got.entry(k.into_owned()).or_default().push(v.into_owned());
    }
    for (name, want) in &spec.query {
        let Some(values) = got.remove(name) else {
            return Some(format!("query: parameter {name} missing"));
        };
        let mut values = values;
        let wanted = want.values();
        let shown = |values: &[String]| -> Vec<String> {
            values.iter().map(|v| shown_value(name, v)).collect()
        };
        if wanted.len() != values.len() {
            return Some(format!(
                "query {name}: expected {} value(s) {:?}, got {:?}",
                wanted.len(),
                wanted,
                shown(&values)
            ));
        }
        for w in wanted.iter().filter(|w| **w != ANY) {
            match values.iter().position(|v| v == w) {
                Some(pos) => {
                    values.remove(pos);
                }
                None => {
                    return Some(format!(
                        "query {name}: expected {w:?}, got {:?}",
                        shown(&values)
                    ));
                }
            }
        }
    }
    if let Some((name, values)) = got.into_iter().next() {
        let values: Vec<String> = values.iter().map(|v| shown_value(&name, v)).collect();
        return Some(format!(
            "query: unexpected parameter {name}={} (not in the cassette)",
            values.join(",")
        ));
    }
    None
}

fn body_matches(spec: &Body, mode: JsonMatch, actual: &[u8]) -> Result<(), String> {
    match spec {
        Body::Json(want) => {
            let got: serde_json::Value = serde_json::from_slice(actual)
                .map_err(|_| format!("expected JSON, got {}", preview_body(actual)))?;
            json_matches(want, &got, mode)
        }
        Body::Connect(want) => {
            let envelopes = decode_connect(actual).ok_or_else(|| {
                format!(
                    "expected one Connect envelope, got {}",
                    preview_body(actual)
                )
            })?;
            match envelopes.as_slice() {
                [(0, got)] => json_matches(want, got, mode),
                _ => Err(format!(
                    "expected one Connect data envelope, got {}",
                    envelopes.len()
                )),
            }
        }
        Body::Text(_) | Body::Base64(_) => {
            let want = spec.bytes()?;
            if want == actual {
                Ok(())
            } else {
                Err(format!(
                    "expected {}, got {}",
                    preview_body(&want),
                    preview_body(actual)
                ))
            }
        }
        Body::Contains(_) | Body::ContainsBase64(_) => {
            let want = spec.bytes()?;
            if want.is_empty() || actual.windows(want.len()).any(|w| w == want.as_slice()) {
                Ok(())
            } else {
                Err(format!(
                    "expected it to contain {}, got {}",
                    preview_body(&want),
                    preview_body(actual)
                ))
            }
        }
    }
}

/// Renders requests as the normalised text kept in insta snapshots: one block per request with
/// method, path and query, the headers that matter (no host, user agent, lengths or encodings;
/// a credential shows as `{{token}}` when it is the API key and `<redacted>` otherwise, so a
/// snapshot shows which credential each request carries), and the body (JSON pretty-printed
/// with sorted keys, Connect envelopes decoded, binary summarised), with ids, tokens and the
/// server address replaced by placeholders.
pub fn normalise_requests(
    requests: &[LoggedRequest],
    placeholders: &crate::cassette::Placeholders,
) -> String {
    const SKIP: &[&str] = &[
        "host",
        "user-agent",
        "content-length",
        "accept-encoding",
        "connection",
        "transfer-encoding",
        "x-daytona-source",
        "traceparent",
        "x-request-id",
        // A WebSocket handshake's key is random, the rest says nothing about the adapter.
        "upgrade",
        "sec-websocket-key",
        "sec-websocket-version",
        "sec-websocket-extensions",
    ];
    let mut out = String::new();
    for (i, request) in requests.iter().enumerate() {
        let mut boundary = None;
        out.push_str(&format!("#{i} {}\n", request.line()));
        let mut headers: Vec<&(String, String)> = request
            .headers
            .iter()
            .filter(|(k, _)| !SKIP.contains(&k.as_str()))
            .collect();
        headers.sort();
        for (k, v) in headers {
            let mut v = if is_credential_name(k) && !v.contains(TOKEN) {
                "<redacted>".to_owned()
            } else {
                v.clone()
            };
            if let Some((_, b)) = v.split_once("boundary=") {
                boundary = Some(b.trim_matches('"').to_owned());
            }
            if let Some(b) = &boundary {
                v = v.replace(b.as_str(), "{{boundary}}");
            }
            out.push_str(&format!("  {k}: {v}\n"));
        }
        // A multipart boundary is random: replace it in the raw bytes too, so a binary part
        // (not valid UTF-8, rendered as a base64 prefix) still snapshots deterministically.
        let raw_body = match &boundary {
            Some(b) if !b.is_empty() => replace_bytes(&request.body, b.as_bytes(), b"{{boundary}}"),
            _ => request.body.to_vec(),
        };
        let body = render_body(&raw_body);
        if !body.is_empty() {
            let body = match &boundary {
                Some(b) => body.replace(b.as_str(), "{{boundary}}"),
                None => body,
            };
            for line in body.lines() {
                out.push_str(&format!("  | {line}\n"));
            }
        }
    }
    placeholders.normalise(&out)
}

/// Every occurrence of `from` in `haystack` replaced by `to`.
fn replace_bytes(haystack: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(haystack.len());
    let mut i = 0;
    while i < haystack.len() {
        if haystack[i..].starts_with(from) {
            out.extend_from_slice(to);
            i += from.len();
        } else {
            out.push(haystack[i]);
            i += 1;
        }
    }
    out
}

fn render_body(body: &[u8]) -> String {
    if body.is_empty() {
        return String::new();
    }
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) {
        return serde_json::to_string_pretty(&v).unwrap_or_default();
    }
    if let Some(envelopes) = decode_connect(body) {
        return envelopes
            .iter()
            .map(|(flags, v)| {
                format!(
                    "connect flags={flags}: {}",
                    serde_json::to_string_pretty(v).unwrap_or_default()
                )
            })
            .collect::<Vec<_>>()
            .join("\n");
    }
    match std::str::from_utf8(body) {
        Ok(text) if text.len() <= 4096 => text.replace('\r', "\\r"),
        Ok(text) => format!("<{} bytes of text>", text.len()),
        Err(_) => {
            let head = &body[..body.len().min(48)];
            format!(
                "<{} bytes, starting {}>",
                body.len(),
                crate::cassette::encode_base64(head)
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cassette::Placeholders;

    fn cassette(order: &str) -> Cassette {
        let text = format!(
            r#"{{
              "provider": "demo", "scenario": "connect", "order": "{order}",
              "provenance": {{"kind": "spec", "date": "2026-12-01", "source": "test"}},
              "interactions": [
                {{"request": {{"method": "GET", "path": "/a/{{{{sandbox_id}}}}"}},
                  "response": {{"status": 200, "body": {{"json": {{"n": 1}}}}}}, "times": 2}},
                {{"request": {{"method": "POST", "path": "/b", "query": {{"k": "v"}},
                               "body": {{"json": {{"x": "{{{{any}}}}"}}}}}},
                  "response": {{"status": 201, "frames": [{{"text": "one "}}, {{"text": "two"}}]}}}}
              ]
            }}"#
        );
        Cassette::from_json(&text).expect("valid cassette")
    }

    async fn server(order: &str) -> ReplayServer {
        let server = ReplayServer::start().await.expect("server");
        let c = cassette(order)
            .substituted(&Placeholders::standard(server.url()))
            .expect("substituted");
        server.mount(&c, false).await.expect("mounted");
        server
    }

    async fn get(base: &str) -> (u16, String) {
        let r = reqwest::Client::new()
            .get(format!("{base}/a/{}", crate::cassette::SANDBOX_ID))
            .header("x-api-key", TOKEN)
            .send()
            .await
            .expect("get");
        (r.status().as_u16(), r.text().await.expect("body"))
    }

    async fn post(base: &str) -> (u16, String) {
        let r = reqwest::Client::new()
            .post(format!("{base}/b?k=v"))
            .bearer_auth(TOKEN)
            .json(&serde_json::json!({"x": [1, 2]}))
            .send()
            .await
            .expect("post");
        (r.status().as_u16(), r.text().await.expect("body"))
    }

    #[tokio::test]
    async fn strict_order_counts_and_streams_frames() {
        let s = server("strict").await;
        let (status, body) = post(s.url()).await;
        assert_eq!(status, MISS_STATUS);
        assert!(
            body.contains("strict order expects #0 GET /a/cfsbx0001 first"),
            "{body}"
        );
        assert_eq!(get(s.url()).await.0, 200);
        assert_eq!(get(s.url()).await.0, 200);
        assert_eq!(post(s.url()).await, (201, "one two".to_owned()));
        let err = s.verify().await.unwrap_err();
        assert!(err.starts_with("unmatched request:"), "{err}");
        assert_eq!(s.misses().len(), 1);
        assert_eq!(s.request_count(), 4);
    }

    #[tokio::test]
    async fn any_order_accepts_any_sequence_and_verify_checks_counts() {
        let s = server("any").await;
        assert_eq!(post(s.url()).await.0, 201);
        assert_eq!(get(s.url()).await.0, 200);
        let err = s.verify().await.unwrap_err();
        assert!(
            err.contains(
                "interaction #0 GET /a/cfsbx0001 was used 1 time(s), the cassette expects exactly 2"
            ),
            "{err}"
        );
    }

    #[tokio::test]
    async fn the_catch_all_never_shows_a_credential() {
        let text = r#"{
          "provider": "demo", "scenario": "connect",
          "provenance": {"kind": "spec", "date": "2026-12-01", "source": "test"},
          "interactions": [
            {"request": {"method": "GET", "path": "/a", "query": {"access_token": "{{token}}"},
                         "headers": {"x-api-key": "{{token}}", "x-access-token": "{{token}}"}},
             "response": {"status": 200}}
          ]
        }"#;
        let secret = "live-secret-0123456789";
        let server = ReplayServer::start().await.expect("server");
        let c = Cassette::from_json(text)
            .expect("valid cassette")
            .substituted(&Placeholders::standard(server.url()))
            .expect("substituted");
        server.mount(&c, false).await.expect("mounted");
        let client = reqwest::Client::new();
        let send = |url: String, key: &str, access: &str| {
            client
                .get(url)
                .header("x-api-key", key)
                .header("x-access-token", access)
                .send()
        };
        let token = crate::cassette::TOKEN;
        // A wrong API key, a wrong access token, a wrong token in the query string.
        for (query, key, access) in [
            (token, secret, token),
            (token, token, secret),
            (secret, token, token),
        ] {
            let r = send(
                format!("{}/a?access_token={query}", server.url()),
                key,
                access,
            )
            .await
            .expect("send");
            assert_eq!(r.status().as_u16(), MISS_STATUS);
            let body = r.text().await.expect("body");
            assert!(
                !body.contains(secret),
                "the catch-all shows a secret: {body}"
            );
        }
        let misses = server.misses().join("\n");
        assert!(!misses.contains(secret), "{misses}");
        assert!(misses.contains("header x-api-key"), "{misses}");
        server.reset().await;
    }

    #[tokio::test]
    async fn of_equally_near_interactions_the_next_expected_is_explained() {
        let text = r#"{
          "provider": "demo", "scenario": "exec_exit_codes",
          "provenance": {"kind": "spec", "date": "2026-12-01", "source": "test"},
          "interactions": [
            {"request": {"method": "POST", "path": "/run", "body": {"json": {"cmd": "exit 0"}}},
             "response": {"status": 200}},
            {"request": {"method": "POST", "path": "/run", "body": {"json": {"cmd": "exit 4"}}},
             "response": {"status": 200}}
          ]
        }"#;
        let server = ReplayServer::start().await.expect("server");
        let c = Cassette::from_json(text)
            .expect("valid cassette")
            .substituted(&Placeholders::standard(server.url()))
            .expect("substituted");
        server.mount(&c, false).await.expect("mounted");
        let run = |cmd: &'static str| {
            reqwest::Client::new()
                .post(format!("{}/run", server.url()))
                .bearer_auth(TOKEN)
                .json(&serde_json::json!({ "cmd": cmd }))
                .send()
        };
        assert_eq!(run("exit 0").await.expect("sent").status().as_u16(), 200);
        assert_eq!(
            run("exit 3").await.expect("sent").status().as_u16(),
            MISS_STATUS
        );
        let miss = server.misses().join("\n");
        assert!(
            miss.contains(r#"nearest: #1 POST /run: body: /cmd: expected "exit 4", got "exit 3""#),
            "{miss}"
        );
        server.reset().await;
    }

    #[tokio::test]
    async fn a_full_run_verifies_clean() {
        let s = server("strict").await;
        get(s.url()).await;
        get(s.url()).await;
        post(s.url()).await;
        assert_eq!(
            get(s.url()).await.0,
            MISS_STATUS,
            "a third GET is one too many"
        );
        let err = s.verify().await.unwrap_err();
        assert!(
            err.contains("it matches, but it was already used 2 of 2 time(s)"),
            "{err}"
        );
        let s = server("strict").await;
        get(s.url()).await;
        get(s.url()).await;
        post(s.url()).await;
        s.verify().await.expect("clean run verifies");
    }

    /// A cassette: `GET /a` over HTTP, then the WebSocket interaction `script` at `/exec`.
    fn ws_cassette(order: &str, script: serde_json::Value) -> Cassette {
        let text = serde_json::json!({
            "provider": "demo", "scenario": "exec_stdin", "order": order,
            "provenance": {"kind": "spec", "date": "2026-12-01", "source": "test"},
            "interactions": [
                {"request": {"method": "GET", "path": "/a"}, "response": {"status": 200}},
                {"request": {"method": "GET", "path": "/exec/{{sandbox_id}}",
                             "query": {"cmd": ["cat"], "stdin": "true"},
                             "headers": {"authorization": "Bearer {{token}}"}},
                 "response": {"status": 101, "websocket": script}}
            ]
        });
        Cassette::from_json(&text.to_string()).expect("valid cassette")
    }

    async fn ws_server(order: &str, script: serde_json::Value) -> ReplayServer {
        let server = ReplayServer::start().await.expect("server");
        let c = ws_cassette(order, script)
            .substituted(&Placeholders::standard(server.url()))
            .expect("substituted");
        server.mount(&c, false).await.expect("mounted");
        server
    }

    type Client = tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >;

    /// Opens the exec socket the way an adapter does: `ws://` of the HTTP base URL.
    async fn open(base: &str) -> Result<Client, tokio_tungstenite::tungstenite::Error> {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
        let url = format!(
            "{}/exec/{}?cmd=cat&stdin=true",
            base.replacen("http://", "ws://", 1),
            crate::cassette::SANDBOX_ID
        );
        let mut request = url.into_client_request()?;
        request.headers_mut().insert(
            "authorization",
            format!("Bearer {TOKEN}").parse().expect("header"),
        );
        tokio_tungstenite::connect_async(request)
            .await
            .map(|(ws, _)| ws)
    }

    /// The next data message, pings and pongs skipped.
    async fn data(ws: &mut Client) -> Message {
        loop {
            match ws.next().await.expect("a message").expect("no error") {
                Message::Ping(_) | Message::Pong(_) => {}
                other => return other,
            }
        }
    }

    fn exec_script() -> serde_json::Value {
        serde_json::json!([
            {"server": {"text": "{\"type\":\"session_info\",\"session_id\":7}"}},
            {"client": {"binary_base64": "AGhp"}},
            {"client": {"json": {"type": "signal", "signal": "{{any}}"}}},
            {"server": {"binary_base64": "AWhp"}},
            {"server": {"binary_base64": "AwA="}},
            {"client_close": 1000}
        ])
    }

    #[tokio::test]
    async fn a_websocket_script_plays_in_order_and_verifies() {
        let s = ws_server("strict", exec_script()).await;
        assert_eq!(get_a(s.url()).await, 200);
        let mut ws = open(s.url()).await.expect("upgraded");
        assert_eq!(
            data(&mut ws).await,
            Message::Text("{\"type\":\"session_info\",\"session_id\":7}".into())
        );
        ws.send(Message::Binary(b"\x00hi".to_vec().into()))
            .await
            .expect("sent");
        ws.send(Message::Text(r#"{"signal":"TERM","type":"signal"}"#.into()))
            .await
            .expect("sent");
        assert_eq!(
            data(&mut ws).await,
            Message::Binary(b"\x01hi".to_vec().into())
        );
        assert_eq!(
            data(&mut ws).await,
            Message::Binary(b"\x03\x00".to_vec().into())
        );
        ws.close(Some(CloseFrame {
            code: 1000.into(),
            reason: "".into(),
        }))
        .await
        .expect("closed");
        while let Some(Ok(_)) = ws.next().await {}
        s.verify().await.expect("the script played through");
        assert_eq!(s.request_count(), 2);
        let log = normalise_requests(&s.requests(), &Placeholders::standard(s.url()));
        assert!(
            log.contains("#1 GET /exec/{{sandbox_id}}?cmd=cat&stdin=true"),
            "{log}"
        );
        assert!(!log.contains("sec-websocket-key"), "{log}");
    }

    async fn get_a(base: &str) -> u16 {
        reqwest::Client::new()
            .get(format!("{base}/a"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .expect("get")
            .status()
            .as_u16()
    }

    #[tokio::test]
    async fn a_wrong_client_frame_fails_verification_naming_what_was_expected() {
        let s = ws_server("strict", exec_script()).await;
        get_a(s.url()).await;
        let mut ws = open(s.url()).await.expect("upgraded");
        data(&mut ws).await;
        ws.send(Message::Binary(b"\x00ho".to_vec().into()))
            .await
            .expect("sent");
        // The replayer closes with a policy-violation code, saying why.
        match data(&mut ws).await {
            Message::Close(Some(frame)) => {
                assert_eq!(u16::from(frame.code), WS_MISMATCH_CLOSE);
                assert!(
                    frame.reason.contains("expected binary AGhp"),
                    "{}",
                    frame.reason
                );
            }
            other => panic!("expected a close, got {other:?}"),
        }
        let err = s.verify().await.unwrap_err();
        assert!(
            err.contains(
                "interaction #1 GET /exec/cfsbx0001?cmd=cat&stdin=true (WebSocket), script step 1: \
                 client message: expected binary AGhp (\"\\x00hi\", 3 bytes), got binary AGhv"
            ),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_wrong_json_text_frame_names_the_field() {
        let s = ws_server("strict", exec_script()).await;
        get_a(s.url()).await;
        let mut ws = open(s.url()).await.expect("upgraded");
        data(&mut ws).await;
        ws.send(Message::Binary(b"\x00hi".to_vec().into()))
            .await
            .expect("sent");
        ws.send(Message::Text(r#"{"type":"resize","signal":"x"}"#.into()))
            .await
            .expect("sent");
        let _ = data(&mut ws).await;
        let err = s.verify().await.unwrap_err();
        assert!(
            err.contains(r#"script step 2: client message: text frame JSON /type: expected "signal", got "resize""#),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_missing_upgrade_fails_verification_like_an_unmet_call() {
        let s = ws_server("strict", exec_script()).await;
        get_a(s.url()).await;
        let err = s.verify().await.unwrap_err();
        assert!(
            err.contains(
                "interaction #1 GET /exec/cfsbx0001?cmd=cat&stdin=true (WebSocket) was used 0 \
                 time(s), the cassette expects exactly 1"
            ),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_client_that_leaves_early_or_never_sends_fails_verification() {
        let s = ws_server("strict", exec_script()).await;
        get_a(s.url()).await;
        let mut ws = open(s.url()).await.expect("upgraded");
        data(&mut ws).await;
        ws.close(None).await.expect("closed");
        while let Some(Ok(_)) = ws.next().await {}
        let err = s.verify().await.unwrap_err();
        assert!(
            err.contains(
                "script step 1: expected the client to send binary AGhp (\"\\x00hi\", 3 bytes), \
                 but the client closed the connection"
            ),
            "{err}"
        );
    }

    #[tokio::test]
    async fn strict_order_and_the_catch_all_cover_upgrades() {
        let s = ws_server("strict", exec_script()).await;
        // The upgrade before the HTTP call it must follow: refused with the catch-all's answer.
        match open(s.url()).await {
            Err(tokio_tungstenite::tungstenite::Error::Http(refusal)) => {
                assert_eq!(refusal.status().as_u16(), MISS_STATUS);
                let body = String::from_utf8_lossy(refusal.body().as_deref().unwrap_or_default())
                    .into_owned();
                assert!(
                    body.contains("strict order expects #0 GET /a first"),
                    "{body}"
                );
            }
            other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
        }
        // Plain HTTP where the cassette has an upgrade.
        get_a(s.url()).await;
        let r = reqwest::Client::new()
            .get(format!(
                "{}/exec/{}?cmd=cat&stdin=true",
                s.url(),
                crate::cassette::SANDBOX_ID
            ))
            .bearer_auth(TOKEN)
            .send()
            .await
            .expect("sent");
        assert_eq!(r.status().as_u16(), MISS_STATUS);
        let body = r.text().await.expect("body");
        assert!(
            body.contains("expects a WebSocket upgrade here, the request is plain HTTP"),
            "{body}"
        );
        assert!(s.verify().await.is_err());
    }

    #[tokio::test]
    async fn a_refused_upgrade_is_an_ordinary_interaction() {
        let text = serde_json::json!({
            "provider": "demo", "scenario": "exec_stdin",
            "provenance": {"kind": "spec", "date": "2026-12-01", "source": "test"},
            "interactions": [
                {"request": {"method": "GET", "path": "/exec/{{sandbox_id}}",
                             "query": {"cmd": "cat", "stdin": "true"}},
                 "response": {"status": 404, "body": {"json": {"error": "not_found"}}}}
            ]
        });
        let server = ReplayServer::start().await.expect("server");
        let c = Cassette::from_json(&text.to_string())
            .expect("valid")
            .substituted(&Placeholders::standard(server.url()))
            .expect("substituted");
        server.mount(&c, false).await.expect("mounted");
        match open(server.url()).await {
            Err(tokio_tungstenite::tungstenite::Error::Http(refusal)) => {
                assert_eq!(refusal.status().as_u16(), 404);
            }
            other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
        }
        server
            .verify()
            .await
            .expect("the refusal was the expected answer");
    }

    #[tokio::test]
    async fn a_held_socket_answers_pings_and_a_server_close_carries_its_code() {
        let s = ws_server(
            "strict",
            serde_json::json!([{"server": {"binary_base64": "AWE="}}]),
        )
        .await;
        get_a(s.url()).await;
        let mut ws = open(s.url()).await.expect("upgraded");
        assert_eq!(
            data(&mut ws).await,
            Message::Binary(b"\x01a".to_vec().into())
        );
        ws.send(Message::Ping(b"p".to_vec().into()))
            .await
            .expect("ping");
        match ws.next().await.expect("message").expect("ok") {
            Message::Pong(p) => assert_eq!(&p[..], b"p"),
            other => panic!("expected a pong, got {other:?}"),
        }
        // The script has ended: verification does not wait for the held socket.
        s.verify().await.expect("held open is fine");

        let s = ws_server("strict", serde_json::json!([{"close": 1011}])).await;
        get_a(s.url()).await;
        let mut ws = open(s.url()).await.expect("upgraded");
        match data(&mut ws).await {
            Message::Close(Some(frame)) => assert_eq!(u16::from(frame.code), 1011),
            other => panic!("expected a close, got {other:?}"),
        }
        s.verify().await.expect("closed as scripted");
    }

    #[test]
    fn bad_websocket_scripts_are_refused_naming_the_interaction() {
        let cases = [
            (
                serde_json::json!({"status": 200, "websocket": []}),
                "interaction 1: a websocket response has status 101, not 200",
            ),
            (
                serde_json::json!({"status": 101}),
                "interaction 1: status 101 needs a \"websocket\" script",
            ),
            (
                serde_json::json!({"status": 101, "websocket": [{"close": 1000}, {"server": {"text": "x"}}]}),
                "interaction 1: websocket step 0: close, client_close, silent and reset must be the last step",
            ),
            (
                serde_json::json!({"status": 101, "websocket": [{"server": {"binary_base64": "!!"}}]}),
                "interaction 1: websocket step 0: invalid base64",
            ),
            (
                serde_json::json!({"status": 101, "websocket": [{"close": 1006}]}),
                "interaction 1: websocket step 0: close code 1006 cannot be sent",
            ),
            (
                serde_json::json!({"status": 101, "websocket": [], "body": {"text": "x"}}),
                "interaction 1: a websocket response has no body",
            ),
        ];
        for (response, want) in cases {
            let text = serde_json::json!({
                "provider": "demo", "scenario": "exec_stdin",
                "provenance": {"kind": "spec", "date": "2026-12-01", "source": "test"},
                "interactions": [
                    {"request": {"method": "GET", "path": "/a"}, "response": {"status": 200}},
                    {"request": {"method": "GET", "path": "/exec"}, "response": response}
                ]
            });
            let err = Cassette::from_json(&text.to_string())
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{err}\nwanted: {want}");
        }
        let post = ws_cassette("strict", exec_script());
        let mut post = post;
        post.interactions[1].request.method = "POST".into();
        assert!(
            post.check()
                .unwrap_err()
                .contains("a WebSocket upgrade is a GET, not POST"),
            "POST accepted"
        );
        let unknown = r#"{"provider":"demo","scenario":"x","provenance":{"kind":"spec","date":"d","source":"s"},
          "interactions":[{"request":{"method":"GET","path":"/e"},"response":{"status":101,"websocket":[{"sever":{"text":"x"}}]}}]}"#;
        let err = Cassette::from_json(unknown).unwrap_err().to_string();
        assert!(err.contains("unknown variant `sever`"), "{err}");
    }
}
