//! The recorder: runs scenarios against a live service through a loopback proxy and writes
//! cassettes with credentials, sandbox ids, signed URL parameters and service addresses
//! scrubbed to placeholders.
//!
//! An adapter crate records by building its suite with [`Suite::record`](crate::Suite::record)
//! when [`crate::recording()`] is true (the [`RECORD_ENV`] variable is set), as the README's
//! `tests/conformance.rs` shows: `SANDBOX_CONFORMANCE_RECORD=1 cargo test --test conformance`
//! then records every scenario. [`RecordTarget::one_host`] builds the target for a service at one
//! base URL; [`SharedService`] starts an author's own service once per test binary, so every
//! scenario records from the same one.
//!
//! The proxy listens on `127.0.0.1` only and forwards only requests under a random path prefix
//! made for each recording session: the URL the adapter factory is given is
//! `http://127.0.0.1:PORT/<32 hex digits>`, so a factory must use it as a base URL that has a
//! path (append to it, do not replace its path). Any other request, from another local process
//! or a web page that found the port, is answered 403 and never reaches the live service with
//! our credentials.
//!
//! Each scenario that can run live gets a sandbox created directly against the service (not
//! recorded), connects to it through the proxy like replay does, and has that sandbox destroyed
//! afterwards (not recorded either). Only a scenario that passes is written. Interactions are
//! written in order with `"times": 1`, JSON request bodies compared exactly.
//!
//! The scenarios whose failure a live service will not produce on demand (`error_*` but
//! `error_not_found`, `no_duplicate_create`, `create_*`) are derived instead: the recorder makes
//! the live calls their cassettes are built from (`connect`, `create`, a download, two creates
//! under one idempotency key) and puts the failure in, writing provenance `spec` with a `source`
//! saying what it was derived from. An existing cassette of such a scenario is never overwritten.
//! A scenario whose cassette is still missing and cannot be derived fails the recording, saying
//! why, so a recording run ends by listing exactly the cassettes left to write by hand.
//!
//! WebSocket upgrades are relayed to the upstream's `ws://` (or `wss://`) endpoint and written
//! as WebSocket interactions (see [`cassette`](crate::cassette#websocket-exchanges)): the data
//! messages both ways and the close that ends the connection, in the order the proxy saw them.
//! Pings and pongs are not relayed nor written: the proxy answers each side's itself. A refused
//! upgrade is written as the ordinary answer it is.
//!
//! A target recording from a simulator instead of the live service
//! ([`RecordTarget::from_simulator`]) writes provenance `spec`, never `recorded`.
//!
//! Secrets are scrubbed in every form ([`SecretCheck`]): the credentials given with
//! [`RecordTarget::secret`], credentials the service hands out (fields named like `token`,
//! `secret`, `jwt`, lease `nonce`s) or the adapter sends in headers, and any value that looks
//! like a secret ([`SECRET_PATTERNS`](crate::scrub::SECRET_PATTERNS): JWTs, `sk_live_` keys, provider keys, long bearer
//! tokens) — plain, percent-encoded, inside base64, in WebSocket text frames or the bytes of
//! binary ones, or split across the chunks of a stream. A
//! cassette that would still hold one is not written (the scenario fails naming the line and
//! the kind, never the value). Review each cassette before committing it anyway; the same
//! check is public ([`SecretCheck::cassette`]) for an author's own CI.

use crate::cassette::{
    Body, Cassette, Frame, Interaction, Order, Provenance, ProvenanceKind, QueryValue, RequestSpec,
    ResponseSpec, WsMessage, WsStep,
};
use crate::proxy::{Exchange, Handler, LoggedRequest, Proxy};
use crate::scenarios::{self, Ctx, Factory, ScenarioInfo};
use crate::scrub::SecretCheck;

use crate::report::{Outcome, ScenarioReport};
use sandbox_sdk_core::Provider;
use sandbox_sdk_core::client::{Client, RetryPolicy};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// Set (to anything) to make generated conformance tests record instead of replay.
pub const RECORD_ENV: &str = "SANDBOX_CONFORMANCE_RECORD";

/// Picks the upstream base URL (`https://host[:port]`) a proxied request goes to, or `None`
/// when the request cannot be routed.
pub type Router = Arc<dyn Fn(&LoggedRequest) -> Option<String> + Send + Sync + 'static>;

/// What a [`RecordTarget`] records from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Upstream {
    /// The provider's live service: cassettes say provenance `recorded`.
    Live,
    /// A simulator of the service (such as one of `sandbox-sim`'s): cassettes say provenance
    /// `spec`, never `recorded`, since they show what the simulator answers, which follows the
    /// provider's documents, not what the live service does.
    Simulator,
}

/// Where and how to record.
pub struct RecordTarget {
    factory: Factory,
    direct: Arc<dyn Provider>,
    router: Router,
    secrets: Vec<String>,
    replacements: Vec<(String, String)>,
    out_dir: PathBuf,
    source: String,
    upstream: Upstream,
}

impl std::fmt::Debug for RecordTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordTarget")
            .field("provider", &self.direct.name())
            .field("out_dir", &self.out_dir)
            .field("secrets", &self.secrets.len())
            .finish()
    }
}

impl RecordTarget {
    /// Records with adapters built by `factory` against the proxy URL (a loopback base URL
    /// with a secret path prefix, see the [module docs](self)), routed upstream by `router`,
    /// which sees each request's path without the prefix; `direct` is the same adapter against the service itself, used to create and
    /// destroy the sandbox each scenario connects to. Cassettes go to `out_dir`.
    pub fn new<F, R>(
        factory: F,
        direct: Arc<dyn Provider>,
        router: R,
        out_dir: impl Into<PathBuf>,
    ) -> RecordTarget
    where
        F: Fn(&str) -> sandbox_sdk_core::Result<Arc<dyn Provider>> + Send + Sync + 'static,
        R: Fn(&LoggedRequest) -> Option<String> + Send + Sync + 'static,
    {
        RecordTarget {
            factory: Arc::new(factory),
            direct,
            router: Arc::new(router),
            secrets: Vec::new(),
            replacements: Vec::new(),
            out_dir: out_dir.into(),
            source: "recorded from the live service".into(),
            upstream: Upstream::Live,
        }
    }

    /// Records from a service that lives at one base URL (`upstream`): the adapter is built by
    /// `factory` for the proxy URL while recording, and for `upstream` itself to create and
    /// destroy the sandbox each scenario connects to; every request is forwarded to `upstream`.
    /// Add the credential with [`RecordTarget::secret`].
    pub fn one_host<F>(
        factory: F,
        upstream: &str,
        out_dir: impl Into<PathBuf>,
    ) -> sandbox_sdk_core::Result<RecordTarget>
    where
        F: Fn(&str) -> sandbox_sdk_core::Result<Arc<dyn Provider>> + Send + Sync + 'static,
    {
        let upstream = upstream.trim_end_matches('/').to_owned();
        let direct = factory(&upstream)?;
        Ok(RecordTarget::new(
            factory,
            direct,
            move |_request: &LoggedRequest| Some(upstream.clone()),
            out_dir,
        ))
    }

    /// A credential to scrub (replaced by `{{token}}` wherever it appears).
    pub fn secret(mut self, secret: impl Into<String>) -> RecordTarget {
        let secret = secret.into();
        if !secret.is_empty() {
            self.secrets.push(secret);
        }
        self
    }

    /// A value written as `with` wherever it appears: a name the live account uses that replay
    /// spells differently (a Fly app name, an organisation), so recorded cassettes replay with
    /// the replay factory's configuration.
    pub fn replace(mut self, value: impl Into<String>, with: impl Into<String>) -> RecordTarget {
        let value = value.into();
        if !value.is_empty() {
            self.replacements.push((value, with.into()));
        }
        self
    }

    /// The `provenance.source` written into each cassette.
    pub fn source(mut self, source: impl Into<String>) -> RecordTarget {
        self.source = source.into();
        self
    }

    /// Declares that the upstream is a simulator, not the live service: every cassette this
    /// target writes says provenance `spec` with `source` (which should name the simulator and
    /// the document it follows, and say it is not the live API), and none can say `recorded`.
    /// An empty `source` is replaced by a generic one saying so.
    ///
    /// ```no_run
    /// # fn demo(target: sandbox_conformance::RecordTarget) {
    /// let target = target.from_simulator(
    ///     "recorded through the kit's proxy from sandbox-sim's Sprites simulator, which follows \
    ///      sandbox-sprites/PROTOCOL.md; not from the live API",
    /// );
    /// # }
    /// ```
    pub fn from_simulator(mut self, source: impl Into<String>) -> RecordTarget {
        let source = source.into();
        self.source = if source.trim().is_empty() {
            "recorded through sandbox-conformance's proxy from a simulator; not from the live API"
                .to_owned()
        } else {
            source
        };
        self.upstream = Upstream::Simulator;
        self
    }

    /// What this target records from ([`RecordTarget::from_simulator`] makes it a simulator).
    pub fn upstream(&self) -> Upstream {
        self.upstream
    }

    /// The provenance kind of the cassettes this target writes: `recorded` for the live
    /// service, `spec` for a simulator.
    pub fn provenance_kind(&self) -> ProvenanceKind {
        match self.upstream {
            Upstream::Live => ProvenanceKind::Recorded,
            Upstream::Simulator => ProvenanceKind::Spec,
        }
    }

    pub(crate) fn describe(&self) -> Result<Arc<dyn Provider>, String> {
        Ok(self.direct.clone())
    }

    /// The provider's name.
    pub(crate) fn provider(&self) -> &str {
        self.direct.name()
    }

    /// Where cassettes are written.
    pub(crate) fn out_dir(&self) -> &Path {
        &self.out_dir
    }

    /// What recorded cassettes name as their source.
    pub(crate) fn source_text(&self) -> &str {
        &self.source
    }

    /// Creates a sandbox directly against the service (not recorded) and returns its id.
    pub(crate) async fn create_direct(&self) -> Result<String, String> {
        match self
            .direct
            .create(&crate::scenarios::conformance_spec())
            .await
        {
            Ok(sb) => Ok(sb.id().to_owned()),
            Err(e) => Err(format!("setup: create failed: {e}")),
        }
    }

    /// Destroys a sandbox directly against the service (not recorded); a failure is ignored,
    /// as the sandbox may be gone already.
    pub(crate) async fn destroy_direct(&self, id: &str) {
        if let Ok(sb) = self.direct.connect(id).await {
            let _ = sb.destroy().await;
        }
    }

    /// Direct access to the service (not recorded), for setting a sandbox up.
    pub(crate) fn direct(&self) -> &Arc<dyn Provider> {
        &self.direct
    }
}

/// A live service started once per test binary and shared by every scenario recorded from it.
///
/// Each generated conformance test runs on a tokio runtime of its own, so a service started
/// inside one test would stop with it. `SharedService` starts the service on a thread of its own
/// with a runtime that lives as long as the test binary, once, and hands every caller the same
/// base URL:
///
/// ```no_run
/// use sandbox_conformance::record::SharedService;
///
/// static SERVICE: SharedService = SharedService::new();
///
/// /// The author's own service: binds a loopback port, serves in the background, returns its URL.
/// async fn start_service() -> std::io::Result<String> {
///     let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
///     let url = format!("http://{}", listener.local_addr()?);
///     tokio::spawn(async move {
///         while let Ok((_stream, _)) = listener.accept().await { /* serve it */ }
///     });
///     Ok(url)
/// }
///
/// # fn demo() -> std::io::Result<()> {
/// let url = SERVICE.url(start_service)?; // started on the first call only
/// assert_eq!(SERVICE.url(start_service)?, url);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct SharedService {
    url: OnceLock<Result<String, String>>,
}

impl Default for SharedService {
    fn default() -> Self {
        SharedService::new()
    }
}

impl SharedService {
    /// A service not started yet (for a `static`).
    pub const fn new() -> SharedService {
        SharedService {
            url: OnceLock::new(),
        }
    }

    /// The service's base URL, starting it on the first call: `start` runs on the service's own
    /// thread and runtime, and returns once the service listens (tasks it spawns keep serving
    /// for the rest of the test binary). A start that failed fails every call, with its reason.
    pub fn url<F, Fut>(&self, start: F) -> std::io::Result<String>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: std::future::Future<Output = std::io::Result<String>> + 'static,
    {
        let url = self.url.get_or_init(|| {
            let (tx, rx) = std::sync::mpsc::channel();
            let spawned = std::thread::Builder::new()
                .name("sandbox-conformance-service".into())
                .spawn(move || {
                    let runtime = match tokio::runtime::Builder::new_multi_thread()
                        .worker_threads(2)
                        .enable_all()
                        .build()
                    {
                        Ok(rt) => rt,
                        Err(e) => {
                            let _ = tx.send(Err(format!("cannot build its runtime: {e}")));
                            return;
                        }
                    };
                    runtime.block_on(async move {
                        let started = start().await.map_err(|e| e.to_string());
                        let serving = started.is_ok();
                        let _ = tx.send(started);
                        if serving {
                            std::future::pending::<()>().await;
                        }
                    });
                });
            match spawned {
                Ok(_) => rx
                    .recv()
                    .unwrap_or_else(|_| Err("its thread ended before it listened".into())),
                Err(e) => Err(format!("cannot spawn its thread: {e}")),
            }
        });
        url.clone().map_err(|why| {
            std::io::Error::other(format!("the shared live service did not start: {why}"))
        })
    }
}

struct Recording {
    router: Router,
    /// Requests that arrived (an exchange is logged once its answer has been passed on).
    requests: AtomicUsize,
    exchanges: Mutex<Vec<Exchange>>,
    upstreams: Mutex<Vec<String>>,
}

impl Handler for Recording {
    fn on_request(&self, _request: &LoggedRequest) {
        self.requests.fetch_add(1, Ordering::SeqCst);
    }
    fn upgrade(&self, _request: &LoggedRequest) -> crate::proxy::Upgrade {
        crate::proxy::Upgrade::Relay
    }
    fn upstream(&self, request: &LoggedRequest) -> Result<String, String> {
        // The path only: a query may hold signed parameters, and this text reaches the
        // adapter (in the 502 body) and the report.
        let upstream = (self.router)(request).ok_or_else(|| {
            format!(
                "the recorder has no route for {} {}",
                request.method, request.path
            )
        })?;
        let mut seen = self.upstreams.lock().unwrap_or_else(|p| p.into_inner());
        if !seen.contains(&upstream) {
            seen.push(upstream.clone());
        }
        Ok(upstream)
    }
    fn on_exchange(&self, exchange: Exchange) {
        self.exchanges
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(exchange);
    }
}

pub(crate) async fn run_record(
    info: &'static ScenarioInfo,
    target: &RecordTarget,
) -> ScenarioReport {
    let mut report = ScenarioReport {
        provider: target.direct.name().to_owned(),
        scenario: info.name.to_owned(),
        outcome: Outcome::Passed,
        requests: None,
    };
    if !info.recordable {
        let path = Cassette::path_in(target.out_dir(), info.name);
        let needs = info
            .requires
            .filter(|c| !target.direct.capabilities().level(*c).is_available());
        report.outcome = if path.exists() || needs.is_some() {
            Outcome::Skipped("not recordable: its cassette is written from SCENARIOS.md".into())
        } else {
            Outcome::Failed(format!(
                "{} is missing and cannot be recorded (a live run makes its own fleet first): \
                 write it from SCENARIOS.md ({})",
                path.display(),
                info.name
            ))
        };
        return report;
    }
    let session = match Session::start(target).await {
        Ok(s) => s,
        Err(e) => {
            report.outcome = Outcome::Failed(e);
            return report;
        }
    };
    if let Some(cap) = info.requires.filter(|c| {
        !session
            .client(false)
            .capabilities()
            .level(*c)
            .is_available()
    }) {
        report.outcome = Outcome::Skipped(format!("{cap} is unsupported: nothing to record"));
        return report;
    }
    let sandbox_id = if info.needs_sandbox {
        match target.create_direct().await {
            Ok(id) => Some(id),
            Err(e) => {
                report.outcome = Outcome::Failed(e);
                return report;
            }
        }
    } else {
        None
    };
    let ctx = Ctx {
        retrying: session.client(true),
        client: session.client(false),
        raw: session.raw.clone(),
        sandbox_id: sandbox_id
            .clone()
            .unwrap_or_else(|| crate::cassette::SANDBOX_ID.to_owned()),
        live: true,
        requests: None,
    };
    let result = match scenarios::body(info.name) {
        Some(body) => body(&ctx).await,
        None => Err(format!("scenario {} has no body", info.name)),
    };
    drop(ctx);
    if let Some(id) = &sandbox_id {
        target.destroy_direct(id).await;
    }
    if let Err(e) = result {
        // The adapter's error may quote a URL (with its signed query) or an answer's text.
        report.outcome = Outcome::Failed(format!(
            "not recorded, the scenario failed live: {}",
            crate::proxy::redact_queries(&e)
        ));
        return report;
    }
    let cassette = match session
        .cassette(target, info.name, sandbox_id.as_deref(), &[])
        .await
    {
        Ok(c) => c,
        Err(e) => {
            report.outcome = Outcome::Failed(format!("not recorded: {e}"));
            return report;
        }
    };
    let path = Cassette::path_in(&target.out_dir, info.name);
    let written = std::fs::create_dir_all(&target.out_dir)
        .and_then(|()| std::fs::write(&path, cassette.to_json_pretty()));
    if let Err(e) = written {
        report.outcome = Outcome::Failed(format!("cannot write {}: {e}", path.display()));
    } else {
        println!(
            "recorded {} interaction(s) to {}",
            cassette.interactions.len(),
            path.display()
        );
    }
    report
}

/// One recording: a loopback proxy in front of the live service, the adapter built for the
/// proxy's URL, and the exchanges it has seen so far.
pub(crate) struct Session {
    handler: Arc<Recording>,
    _proxy: Proxy,
    /// The adapter under test, pointed at the proxy.
    pub(crate) raw: Arc<dyn Provider>,
}

impl Session {
    /// Starts the proxy and builds the adapter for it.
    pub(crate) async fn start(target: &RecordTarget) -> Result<Session, String> {
        let handler = Arc::new(Recording {
            router: target.router.clone(),
            requests: AtomicUsize::new(0),
            exchanges: Mutex::new(Vec::new()),
            upstreams: Mutex::new(Vec::new()),
        });
        let proxy = Proxy::start_private(handler.clone())
            .await
            .map_err(|e| format!("cannot start the recording proxy: {e}"))?;
        let raw = (target.factory)(proxy.url())
            .map_err(|e| format!("the adapter factory failed: {e}"))?;
        Ok(Session {
            handler,
            _proxy: proxy,
            raw,
        })
    }

    /// The adapter behind the client layer, with retries (no delay) or without.
    pub(crate) fn client(&self, retries: bool) -> Arc<dyn Provider> {
        let policy = if retries {
            RetryPolicy::default().no_delay(true)
        } else {
            RetryPolicy::never()
        };
        Arc::new(Client::builder(self.raw.clone()).retry(policy).build())
    }

    /// The number of exchanges so far, once every request that arrived has finished (an
    /// exchange is logged when its answer has been passed on, a moment after the adapter may
    /// have read it) and every relayed WebSocket has closed (its closing handshake is part of
    /// the exchange). Gives up waiting after two seconds: a socket the adapter holds open is
    /// written as far as it got.
    pub(crate) async fn mark(&self) -> usize {
        for _ in 0..400 {
            let exchanges = self.exchanges();
            let open_sockets = exchanges.iter().any(|ex| {
                ex.websocket
                    .as_ref()
                    .is_some_and(|t| !t.lock().unwrap_or_else(|p| p.into_inner()).finished)
            });
            if exchanges.len() >= self.handler.requests.load(Ordering::SeqCst) && !open_sockets {
                return exchanges.len();
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        self.exchanges().len()
    }

    fn exchanges(&self) -> Vec<Exchange> {
        self.handler
            .exchanges
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Every exchange so far as a cassette for `scenario`, with credentials, `sandbox_id` (as
    /// `{{sandbox_id}}`), service addresses, the target's replacements and `extra` ones
    /// scrubbed; refused when an exchange failed in the proxy or a secret is left.
    pub(crate) async fn cassette(
        &self,
        target: &RecordTarget,
        scenario: &str,
        sandbox_id: Option<&str>,
        extra: &[(String, String)],
    ) -> Result<Cassette, String> {
        self.mark().await;
        let exchanges = self.exchanges();
        if let Some(bad) = exchanges.iter().find(|ex| ex.error.is_some()) {
            return Err(format!(
                "{} failed in the proxy: {}",
                bad.request.line().split('?').next().unwrap_or_default(),
                bad.error.as_deref().unwrap_or_default()
            ));
        }
        let upstreams = self
            .handler
            .upstreams
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let replacements: Vec<(String, String)> =
            target.replacements.iter().chain(extra).cloned().collect();
        let scrub = Scrubber::new(
            &target.secrets,
            &replacements,
            sandbox_id,
            &upstreams,
            &exchanges,
        );
        let mut cassette = build_cassette(
            target.direct.name(),
            scenario,
            &target.source,
            &exchanges,
            &scrub,
        )?;
        // What a simulator answers is never presented as recorded from the live service.
        cassette.provenance.kind = target.provenance_kind();
        Ok(cassette)
    }
}

/// Replaces secrets, ids, service addresses and signed URL parameters by placeholders.
///
/// Secrets (the values scrubbed to `{{token}}`, and anything matching a
/// [`SECRET_PATTERNS`](crate::scrub::SECRET_PATTERNS) value pattern) are found in every form [`SecretCheck`] knows: plain,
/// percent-encoded, inside base64 (re-encoded after scrubbing) and, in a streamed answer, split
/// across chunks (the chunks are joined first). Ids and addresses are replaced where written
/// plainly.
pub struct Scrubber {
    secrets: SecretCheck,
    literal: Vec<(String, String)>,
    signed: regex::Regex,
}

impl std::fmt::Debug for Scrubber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scrubber")
            .field("secrets", &self.secrets)
            .field("rules", &self.literal.len())
            .finish()
    }
}

/// Query parameters that carry signatures or credentials in signed URLs.
const SIGNED_PARAMS: &str = r"(?i)([?&](?:x-amz-signature|x-amz-credential|x-amz-security-token|x-goog-signature|x-goog-credential|signature|sig|token|access_token|auth)=)[^&\s\x22]+";

/// Whether a query parameter of this name carries a signature or credential (the names
/// [`SIGNED_PARAMS`] scrubs inside URLs).
fn is_signed_param(name: &str) -> bool {
    [
        "x-amz-signature",
        "x-amz-credential",
        "x-amz-security-token",
        "x-goog-signature",
        "x-goog-credential",
        "signature",
        "sig",
        "token",
        "access_token",
        "auth",
    ]
    .iter()
    .any(|n| n.eq_ignore_ascii_case(name))
}

impl Scrubber {
    fn new(
        secrets: &[String],
        replacements: &[(String, String)],
        sandbox_id: Option<&str>,
        upstreams: &[String],
        exchanges: &[Exchange],
    ) -> Scrubber {
        let mut pairs = Vec::new();
        for s in secrets {
            pairs.push((s.clone(), "{{token}}".to_owned()));
        }
        pairs.extend(replacements.iter().cloned());
        // Credentials the adapter sent in headers (a key, a bearer token, Fly's
        // `fly-machine-lease-nonce` for a lease taken outside the recording) are scrubbed wherever
        // a body, path or query repeats them.
        for ex in exchanges {
            for secret in secret_headers(&ex.request.headers).chain(secret_headers(&ex.headers)) {
                pairs.push((secret, "{{token}}".to_owned()));
            }
        }
        // Sandbox ids: the one the scenario connected to, then ids the service handed out
        // (an `id`-like field of a JSON answer) that later requests use in their path.
        let mut ids: Vec<String> = sandbox_id.map(|id| vec![id.to_owned()]).unwrap_or_default();
        for ex in exchanges {
            // Credentials handed out in a WebSocket's JSON text frames.
            for step in transcript(ex) {
                if let WsStep::Server(WsMessage::Text(text)) = step
                    && let Ok(value) = serde_json::from_str::<Value>(&text)
                {
                    for secret in secret_fields(&value) {
                        pairs.push((secret, "{{token}}".to_owned()));
                    }
                }
            }
        }
        for (i, ex) in exchanges.iter().enumerate() {
            let Ok(body) = serde_json::from_slice::<Value>(&ex.chunks.concat()) else {
                continue;
            };
            // Credentials the service hands out (E2B's `envdAccessToken`, preview tokens, ...)
            // are scrubbed wherever they appear later, in bodies, paths or headers.
            for secret in secret_fields(&body) {
                pairs.push((secret, "{{token}}".to_owned()));
            }
            for id in id_fields(&body) {
                let used_later = exchanges[i + 1..]
                    .iter()
                    .any(|later| later.request.path.contains(id.as_str()));
                if used_later && id.len() >= 4 && !ids.contains(&id) {
                    ids.push(id);
                }
            }
        }
        for (id, name) in ids.into_iter().zip(["{{sandbox_id}}", "{{sandbox_id_2}}"]) {
            pairs.push((id, name.to_owned()));
        }
        pairs.push((
            crate::cassette::MISSING_ID.to_owned(),
            "{{missing_id}}".to_owned(),
        ));
        for u in upstreams {
            pairs.push((
                u.trim_end_matches('/').to_owned(),
                "{{base_url}}".to_owned(),
            ));
        }
        Scrubber::from_pairs(pairs)
    }

    /// A scrubber replacing each `(value, placeholder)` (longest values first), plus signed URL
    /// parameters (`X-Amz-Signature=…`, `token=…`, …) by `{{signature}}`. Values written as
    /// `{{token}}` are secrets: found in every form, like values matching [`SECRET_PATTERNS`](crate::scrub::SECRET_PATTERNS).
    pub fn from_pairs(mut pairs: Vec<(String, String)>) -> Scrubber {
        pairs.retain(|(v, _)| v.len() >= 3);
        pairs.sort_by_key(|(v, _)| std::cmp::Reverse(v.len()));
        let (secrets, literal): (Vec<_>, Vec<_>) =
            pairs.into_iter().partition(|(_, p)| p == "{{token}}");
        Scrubber {
            secrets: secrets
                .into_iter()
                .fold(SecretCheck::new(), |check, (v, p)| check.known_as(v, p)),
            literal,
            signed: regex::Regex::new(SIGNED_PARAMS).expect("SIGNED_PARAMS is a valid regex"),
        }
    }

    /// Scrubs one string.
    pub fn text(&self, text: &str) -> String {
        let mut out = self.secrets.scrub_text(text);
        for (value, placeholder) in &self.literal {
            out = out.replace(value.as_str(), placeholder);
        }
        self.signed
            .replace_all(&out, "${1}{{signature}}")
            .into_owned()
    }

    /// The secrets this scrubber knows, as a check (for what is left after scrubbing).
    pub fn check(&self) -> &SecretCheck {
        &self.secrets
    }

    fn value(&self, value: &mut Value) {
        match value {
            Value::String(s) => *s = self.text(s),
            Value::Array(items) => items.iter_mut().for_each(|v| self.value(v)),
            Value::Object(map) => {
                let entries = std::mem::take(map);
                for (k, mut v) in entries {
                    self.value(&mut v);
                    map.insert(self.text(&k), v);
                }
            }
            _ => {}
        }
    }
}

/// Whether a header of this name carries a credential or a lease nonce (a WebSocket
/// handshake's key is named like one but is a random nonce of the client library).
fn is_secret_header(name: &str) -> bool {
    sandbox_sdk_core::redact::is_credential_name(name) && !is_handshake_header(name)
}

/// Headers of the WebSocket handshake itself: made afresh by every client library, never
/// written into a cassette.
fn is_handshake_header(name: &str) -> bool {
    name.eq_ignore_ascii_case("upgrade") || name.to_ascii_lowercase().starts_with("sec-websocket-")
}

/// The values (8 bytes or more) of headers that carry a credential or a lease nonce, each also
/// without its auth scheme (`Bearer `, `FlyV1 `, ...).
fn secret_headers(headers: &[(String, String)]) -> impl Iterator<Item = String> + '_ {
    headers
        .iter()
        .filter(|(k, _)| is_secret_header(k))
        .flat_map(|(_, v)| {
            let v = v.trim();
            let bare = v
                .split_once(' ')
                .map(|(_, rest)| rest.trim())
                .filter(|rest| !rest.is_empty() && *rest != v);
            std::iter::once(v.to_owned()).chain(bare.map(str::to_owned))
        })
        .filter(|v| v.len() >= 8 && !v.contains("{{"))
}

/// String values, anywhere in a JSON answer, of fields whose names say they hold a credential
/// (`token`, `accessToken`, `secret`, `password`, `apiKey`, `exec_jwt`, ...) or a lease nonce
/// (Fly's lease answer `{"data": {"nonce": …}}` and `Machine.nonce`).
fn secret_fields(body: &Value) -> Vec<String> {
    let is_secret = |k: &str| {
        let k = k.to_ascii_lowercase().replace(['_', '-'], "");
        [
            "token",
            "secret",
            "password",
            "apikey",
            "privatekey",
            "credential",
            "jwt",
            "nonce",
        ]
        .iter()
        .any(|word| k.contains(word))
    };
    let mut out = Vec::new();
    let mut stack = vec![body];
    while let Some(value) = stack.pop() {
        match value {
            Value::Object(map) => {
                for (k, v) in map {
                    match v {
                        Value::String(s) if is_secret(k) && !s.is_empty() => out.push(s.clone()),
                        _ => stack.push(v),
                    }
                }
            }
            Value::Array(items) => stack.extend(items),
            _ => {}
        }
    }
    out
}

/// String values of id-like fields (`id`, `sandboxID`, `sandbox_id`, `machine_id`, ...) at the
/// top level of a JSON answer or of its top-level objects.
fn id_fields(body: &Value) -> Vec<String> {
    let is_id = |k: &str| {
        let k = k.to_ascii_lowercase().replace('_', "");
        k == "id" || k == "sandboxid" || k == "machineid"
    };
    let mut out = Vec::new();
    let mut visit = |map: &serde_json::Map<String, Value>| {
        for (k, v) in map {
            if let (true, Some(s)) = (is_id(k), v.as_str()) {
                out.push(s.to_owned());
            }
        }
    };
    if let Some(map) = body.as_object() {
        visit(map);
        for v in map.values() {
            if let Some(inner) = v.as_object() {
                visit(inner);
            }
        }
    }
    out
}

const KEEP_REQUEST_HEADERS: &[&str] = &[
    "content-type",
    "connect-protocol-version",
    "idempotency-key",
];
const KEEP_RESPONSE_HEADERS: &[&str] = &["content-type", "retry-after", "location"];

fn build_cassette(
    provider: &str,
    scenario: &str,
    source: &str,
    exchanges: &[Exchange],
    scrub: &Scrubber,
) -> Result<Cassette, String> {
    let interactions = exchanges
        .iter()
        .map(|ex| {
            let req = &ex.request;
            let mut query: BTreeMap<String, QueryValue> = BTreeMap::new();
            if let Some(q) = &req.query {
                for pair in q.split('&').filter(|p| !p.is_empty()) {
                    let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                    let (k, v) = (decode_component(k), decode_component(v));
                    match query.remove(&k) {
                        None => {
                            query.insert(k, QueryValue::One(v));
                        }
                        Some(QueryValue::One(first)) => {
                            query.insert(k, QueryValue::Many(vec![first, v]));
                        }
                        Some(QueryValue::Many(mut all)) => {
                            all.push(v);
                            query.insert(k, QueryValue::Many(all));
                        }
                    }
                }
            }
            let headers: BTreeMap<String, String> = req
                .headers
                .iter()
                .filter_map(|(k, v)| {
                    if KEEP_REQUEST_HEADERS.contains(&k.as_str()) {
                        return Some((k.clone(), v.clone()));
                    }
                    // The credential stays as a placeholder (`Bearer {{token}}`), so replay
                    // proves the adapter sends it on this request.
                    let scrubbed = match v.split_once(' ') {
                        Some((scheme, rest))
                            if scheme.bytes().all(|b| b.is_ascii_alphanumeric()) =>
                        {
                            format!("{scheme} {}", scrub.text(rest))
                        }
                        _ => scrub.text(v),
                    };
                    (is_secret_header(k) && scrubbed.contains("{{token}}"))
                        .then(|| (k.clone(), scrubbed))
                })
                .collect();
            let request = RequestSpec {
                method: req.method.clone(),
                path: req.path.clone(),
                query,
                headers,
                body: Body::from_bytes(&req.body, req.header("content-type")),
                json_match: Default::default(),
                auth: Default::default(),
            };
            if ex.websocket.is_some() {
                let steps = transcript(ex)
                    .into_iter()
                    .map(|step| scrub_binary(step, scrub))
                    .collect();
                return Interaction {
                    request,
                    response: ResponseSpec {
                        status: 101,
                        // The subprotocol the service chose: a client that asked for one
                        // needs it in the answer.
                        headers: ex
                            .headers
                            .iter()
                            .filter(|(k, _)| k == "sec-websocket-protocol")
                            .cloned()
                            .collect(),
                        body: None,
                        frames: None,
                        fault: None,
                        delay_ms: None,
                        websocket: Some(steps),
                    },
                    times: 1,
                };
            }
            let content_type = ex
                .headers
                .iter()
                .find(|(k, _)| k == "content-type")
                .map(|(_, v)| v.as_str());
            let streamed = ex.chunks.len() > 1
                || content_type
                    .is_some_and(|ct| ct.contains("connect+json") || ct.contains("event-stream"));
            let chunks: Vec<Vec<u8>> = ex.chunks.iter().map(|c| c.to_vec()).collect();
            // A secret split across two chunks would be two frames, each clean on its own.
            let chunks = scrub.secrets.regroup(&chunks);
            let (body, frames) = if streamed {
                (None, Some(Frame::from_chunks(&chunks, content_type)))
            } else {
                (Body::from_bytes(&chunks.concat(), content_type), None)
            };
            let response = ResponseSpec {
                status: ex.status,
                headers: ex
                    .headers
                    .iter()
                    .filter(|(k, _)| KEEP_RESPONSE_HEADERS.contains(&k.as_str()))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
                body,
                frames,
                fault: None,
                delay_ms: None,
                websocket: None,
            };
            Interaction {
                request,
                response,
                times: 1,
            }
        })
        .collect();
    let cassette = Cassette {
        provider: provider.to_owned(),
        scenario: scenario.to_owned(),
        provenance: Provenance {
            kind: ProvenanceKind::Recorded,
            date: today(),
            source: Some(source.to_owned()),
        },
        order: Order::Strict,
        interactions,
    };
    let mut value = serde_json::to_value(&cassette)
        .map_err(|e| format!("cannot serialise the cassette: {e}"))?;
    scrub.value(&mut value);
    // Never fall back to the unscrubbed cassette: a scrub that breaks the structure is an error.
    let mut cassette: Cassette = serde_json::from_value(value)
        .map_err(|e| format!("scrubbing left an invalid cassette ({e}); check the scrub rules"))?;
    // A signed parameter sits in the query map without its `?name=` prefix, so the URL rule
    // above cannot see it: scrub it by name unless a literal rule already made it a placeholder.
    // It becomes `{{any}}`: the adapter signs with the replay token, so the value differs.
    for interaction in &mut cassette.interactions {
        for (name, value) in interaction.request.query.iter_mut() {
            if !is_signed_param(name) {
                continue;
            }
            let scrub_one = |v: &mut String| {
                if !v.contains("{{") {
                    *v = crate::cassette::ANY.to_owned();
                }
            };
            match value {
                QueryValue::One(v) => scrub_one(v),
                QueryValue::Many(vs) => vs.iter_mut().for_each(scrub_one),
            }
        }
    }
    // Scrub or refuse: whatever still looks like a secret (split across JSON frames, in a form
    // no rule rewrites) keeps the cassette from being written.
    let left = scrub.secrets.cassette(&cassette.to_json_pretty());
    if let Some(first) = left.first() {
        return Err(format!(
            "the cassette would hold a secret the scrub rules could not remove (line {}, {} in all); \
             scrub it with RecordTarget::secret or RecordTarget::replace",
            first,
            left.len()
        ));
    }
    Ok(cassette)
}

/// The steps of a relayed WebSocket exchange so far (none for an HTTP one).
fn transcript(exchange: &Exchange) -> Vec<WsStep> {
    exchange
        .websocket
        .as_ref()
        .map(|t| t.lock().unwrap_or_else(|p| p.into_inner()).steps.clone())
        .unwrap_or_default()
}

/// A step with the secrets in a binary message's bytes replaced by their placeholders (text
/// messages are scrubbed with the rest of the cassette's strings).
fn scrub_binary(step: WsStep, scrub: &Scrubber) -> WsStep {
    let scrub_message = |message: WsMessage| match &message {
        WsMessage::BinaryBase64(_) => match message.bytes() {
            Ok(bytes) => WsMessage::from_frame(true, &scrub.secrets.scrub(&bytes)),
            Err(_) => message,
        },
        _ => message,
    };
    match step {
        WsStep::Server(m) => WsStep::Server(scrub_message(m)),
        WsStep::Client(m) => WsStep::Client(scrub_message(m)),
        other => other,
    }
}

fn decode_component(text: &str) -> String {
    crate::cassette::percent_decode(text, true)
}

/// Today's date as `YYYY-MM-DD` (UTC).
pub(crate) fn today() -> String {
    let mut date = sandbox_sdk_core::time::format_rfc3339(std::time::SystemTime::now());
    date.truncate(10);
    date
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_fields_of_answers_are_found_at_any_depth() {
        let body = serde_json::json!({
            "sandboxID": "isb1",
            "envdAccessToken": "tok-envd-123",
            "nested": [{"traffic_access_token": "tok-traffic-456", "name": "x"}],
            "apiKey": "",
        });
        let mut found = secret_fields(&body);
        found.sort();
        assert_eq!(found, ["tok-envd-123", "tok-traffic-456"]);
    }

    fn exchange(
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        status: u16,
        answer: Value,
    ) -> Exchange {
        Exchange {
            request: LoggedRequest {
                method: method.into(),
                path: path.into(),
                query: None,
                headers: headers
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
                body: bytes::Bytes::new(),
            },
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            chunks: vec![bytes::Bytes::from(answer.to_string())],
            error: None,
            websocket: None,
        }
    }

    fn record(exchanges: &[Exchange]) -> String {
        let scrub = Scrubber::new(
            &["live-api-token-0001".to_owned()],
            &[],
            Some("m-live-1234"),
            &["https://api.machines.dev".to_owned()],
            exchanges,
        );
        build_cassette("fly", "connect", "test", exchanges, &scrub)
            .expect("cassette")
            .to_json_pretty()
    }

    #[test]
    fn fly_lease_nonces_are_scrubbed_from_answers_and_headers() {
        let auth = ("authorization", "Bearer live-api-token-0001");
        let exchanges = vec![
            exchange(
                "POST",
                "/v1/apps/a/machines/m-live-1234/lease",
                &[auth],
                200,
                serde_json::json!({"status": "success", "data": {"nonce": "5c35f65c9f95", "expires_at": 1}}),
            ),
            exchange(
                "GET",
                "/v1/apps/a/machines/m-live-1234",
                &[auth],
                200,
                serde_json::json!({"id": "m-live-1234", "state": "started", "nonce": "7d41a0c2b8e3"}),
            ),
            // A lease taken outside the recording: only the header shows its nonce.
            exchange(
                "POST",
                "/v1/apps/a/machines/m-live-1234/stop",
                &[auth, ("fly-machine-lease-nonce", "9e8f7a6b5c4d")],
                409,
                serde_json::json!({"error": "lease nonce 9e8f7a6b5c4d does not match"}),
            ),
        ];
        let text = record(&exchanges);
        for nonce in ["5c35f65c9f95", "7d41a0c2b8e3", "9e8f7a6b5c4d"] {
            assert!(!text.contains(nonce), "nonce {nonce} survived: {text}");
        }
        assert!(text.contains(r#""nonce": "{{token}}""#), "{text}");
    }

    #[test]
    fn a_jwt_under_an_unknown_field_name_is_scrubbed_where_it_is_used_again() {
        let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJleGVjIn0.c2lnbmF0dXJlLWJ5dGVz";
        let exchanges = vec![
            exchange(
                "POST",
                "/v1/exec/session",
                &[],
                200,
                serde_json::json!({"exec_jwt": jwt}),
            ),
            exchange(
                "GET",
                &format!("/v1/exec/{jwt}/status"),
                &[],
                200,
                serde_json::json!({}),
            ),
        ];
        let text = record(&exchanges);
        assert!(!text.contains(jwt), "{text}");
    }

    #[test]
    fn scrubber_replaces_secrets_ids_and_signed_params() {
        let s = Scrubber::from_pairs(vec![
            ("e2b_0123456789abcdef0123".into(), "{{token}}".into()),
            ("isb123456".into(), "{{sandbox_id}}".into()),
        ]);
        let out = s.text("key e2b_0123456789abcdef0123 for isb123456 at https://x/f?X-Amz-Signature=abc123&a=1&token=zzz");
        assert_eq!(
            out,
            "key {{token}} for {{sandbox_id}} at https://x/f?X-Amz-Signature={{signature}}&a=1&token={{signature}}"
        );
    }

    #[test]
    fn streamed_answers_become_frames_and_ids_placeholders() {
        use bytes::Bytes;
        let start = crate::cassette::connect_envelope(
            0,
            &serde_json::json!({"event": {"start": {"pid": 7}}}),
        );
        let end = crate::cassette::connect_envelope(2, &serde_json::json!({}));
        let all = [start, end].concat();
        let exchange = |path: &str, ct: &str, chunks: Vec<Bytes>| Exchange {
            request: LoggedRequest {
                method: "POST".into(),
                path: path.into(),
                query: Some("path=a%2Fb&x=1&x=2".into()),
                headers: vec![
                    ("authorization".into(), "Bearer live-secret-token".into()),
                    ("content-type".into(), "application/json".into()),
                ],
                body: Bytes::from_static(br#"{"cmd":"sh"}"#),
            },
            status: 200,
            headers: vec![("content-type".into(), ct.into())],
            chunks,
            error: None,
            websocket: None,
        };
        let exchanges = vec![
            exchange(
                "/sandboxes",
                "application/json",
                vec![Bytes::from_static(br#"{"sandboxID":"sbxlive42"}"#)],
            ),
            exchange(
                "/sandboxes/sbxlive42/process",
                "application/connect+json",
                vec![
                    Bytes::copy_from_slice(&all[..4]),
                    Bytes::copy_from_slice(&all[4..]),
                ],
            ),
        ];
        let scrub = Scrubber::from_pairs(vec![
            ("live-secret-token".into(), "{{token}}".into()),
            ("sbxlive42".into(), "{{sandbox_id}}".into()),
        ]);
        let c = build_cassette("demo", "exec_exit_codes", "test", &exchanges, &scrub)
            .expect("cassette");
        let text = c.to_json_pretty();
        assert!(
            !text.contains("live-secret-token") && !text.contains("sbxlive42"),
            "{text}"
        );
        assert_eq!(
            c.interactions[1].request.path,
            "/sandboxes/{{sandbox_id}}/process"
        );
        assert_eq!(
            c.interactions[1].request.query["path"],
            QueryValue::One("a/b".into())
        );
        assert_eq!(
            c.interactions[1].request.query["x"],
            QueryValue::Many(vec!["1".into(), "2".into()])
        );
        // The credential stays, as a placeholder replay requires.
        assert_eq!(
            c.interactions[1].request.headers.get("authorization"),
            Some(&"Bearer {{token}}".to_owned())
        );
        assert_eq!(
            c.interactions[1].response.frames,
            Some(vec![
                Frame::Connect(serde_json::json!({"event": {"start": {"pid": 7}}})),
                Frame::ConnectEnd(serde_json::json!({})),
            ])
        );
        assert_eq!(c.provenance.kind, ProvenanceKind::Recorded);
    }

    #[test]
    fn signed_query_parameters_are_scrubbed_in_the_query_map() {
        use bytes::Bytes;
        let exchanges = vec![Exchange {
            request: LoggedRequest {
                method: "GET".into(),
                path: "/files".into(),
                query: Some(
                    "X-Amz-Signature=deadbeef1234&signature=v1_s3cr3tsig&access_token=opaque-live&page=2"
                        .into(),
                ),
                headers: Vec::new(),
                body: Bytes::new(),
            },
            status: 200,
            headers: Vec::new(),
            chunks: Vec::new(),
            error: None,
            websocket: None,
        }];
        let c = build_cassette(
            "demo",
            "files_roundtrip",
            "test",
            &exchanges,
            &Scrubber::from_pairs(Vec::new()),
        )
        .expect("cassette");
        let text = c.to_json_pretty();
        for secret in ["deadbeef1234", "v1_s3cr3tsig", "opaque-live"] {
            assert!(!text.contains(secret), "{secret} survived: {text}");
        }
        let query = &c.interactions[0].request.query;
        assert_eq!(query["signature"], QueryValue::One("{{any}}".into()));
        assert_eq!(query["page"], QueryValue::One("2".into()));
    }

    #[test]
    fn a_scrub_that_breaks_the_cassette_is_an_error_not_the_raw_recording() {
        use bytes::Bytes;
        let exchanges = vec![Exchange {
            request: LoggedRequest {
                method: "GET".into(),
                path: "/status".into(),
                query: None,
                headers: Vec::new(),
                body: Bytes::new(),
            },
            status: 200,
            headers: Vec::new(),
            chunks: Vec::new(),
            error: None,
            websocket: None,
        }];
        // A secret that happens to spell a structural key of the cassette.
        let scrub = Scrubber::from_pairs(vec![("status".into(), "{{token}}".into())]);
        let err = build_cassette("demo", "connect", "test", &exchanges, &scrub).unwrap_err();
        assert!(err.contains("scrubbing left an invalid cassette"), "{err}");
    }

    const LIVE: &str = "live-api-token-0001";

    fn streamed(path: &str, content_type: &str, chunks: Vec<Vec<u8>>) -> Exchange {
        let mut ex = exchange("GET", path, &[], 200, Value::Null);
        ex.headers = vec![("content-type".into(), content_type.into())];
        ex.chunks = chunks.into_iter().map(bytes::Bytes::from).collect();
        ex
    }

    #[test]
    fn secrets_in_base64_bodies_fields_and_frames_are_scrubbed() {
        use crate::cassette::encode_base64;
        let binary = |text: &str| [&[0xff, 0xfe][..], text.as_bytes(), &[0x00]].concat();
        let exchanges = vec![
            // A downloaded file that holds the credential: a base64 body.
            streamed(
                "/files/a",
                "application/octet-stream",
                vec![binary(&format!("key={LIVE}"))],
            ),
            // A JSON answer carrying output as base64 (E2B's envd, file reads).
            exchange(
                "GET",
                "/files/b",
                &[],
                200,
                serde_json::json!({"content": encode_base64(format!("export TOKEN={LIVE}\n").as_bytes())}),
            ),
            // A binary stream: base64 frames.
            streamed(
                "/files/c",
                "application/octet-stream",
                vec![binary("head"), binary(&format!("tail {LIVE}"))],
            ),
        ];
        let text = record(&exchanges);
        let check = SecretCheck::new().known(LIVE);
        assert!(check.cassette(&text).is_empty(), "{text}");
        let c = Cassette::from_json(&text).expect("valid cassette");
        let Some(Body::Base64(b)) = &c.interactions[0].response.body else {
            panic!("a base64 body: {text}");
        };
        assert!(
            String::from_utf8_lossy(&base64_decode(b)).contains("key={{token}}"),
            "{text}"
        );
    }

    fn base64_decode(text: &str) -> Vec<u8> {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .expect("base64")
    }

    #[test]
    fn a_secret_split_across_two_chunks_is_scrubbed() {
        let (a, b) = LIVE.split_at(9);
        let exchanges = vec![
            streamed(
                "/logs",
                "text/plain",
                vec![
                    format!("line 1 {a}").into_bytes(),
                    format!("{b} line 2\n").into_bytes(),
                ],
            ),
            streamed(
                "/bin",
                "application/octet-stream",
                vec![
                    [&[0xff][..], a.as_bytes()].concat(),
                    [b.as_bytes(), &[0xfe][..]].concat(),
                ],
            ),
        ];
        let text = record(&exchanges);
        assert!(
            SecretCheck::new().known(LIVE).cassette(&text).is_empty(),
            "{text}"
        );
        assert!(text.contains("line 1 {{token}} line 2"), "{text}");
    }

    #[test]
    fn a_percent_encoded_secret_in_a_path_is_scrubbed() {
        let secret = "tok/en+live=0001";
        let exchanges = vec![exchange(
            "GET",
            "/v1/preview/tok%2fen%2Blive%3D0001/index.html",
            &[],
            200,
            serde_json::json!({}),
        )];
        let scrub = Scrubber::from_pairs(vec![(secret.into(), "{{token}}".into())]);
        let c =
            build_cassette("demo", "preview_link", "test", &exchanges, &scrub).expect("cassette");
        assert_eq!(
            c.interactions[0].request.path,
            "/v1/preview/{{token}}/index.html"
        );
    }

    #[test]
    fn values_that_look_like_secrets_are_scrubbed_under_any_field_name() {
        let planted = [
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJleGVjIn0.c2lnbmF0dXJlLWJ5dGVz",
            "sk_live_4eC39HqLyjWDarjtT1zdp7dc",
            "sk_test_4eC39HqLyjWDarjtT1zdp7dc",
            "e2b_0123456789abcdef0123456789abcdef",
            "dtn_0123456789abcdefABCDEF0123456789",
            "fm2_lJPECAAAAAAAAAAAAxAQbWFjaGluZXM=",
            "opaque-bearer-value-0123456789abcdef",
        ];
        let exchanges = vec![exchange(
            "GET",
            "/v1/session",
            &[],
            200,
            serde_json::json!({
                "exec_grant": planted[0],
                "billing": {"stripe": planted[1], "test": planted[2]},
                "notes": [format!("key {} and {}", planted[3], planted[4])],
                "fly": format!("FlyV1 {}", planted[5]),
                "header_echo": format!("Authorization: Bearer {}", planted[6]),
            }),
        )];
        let text = record(&exchanges);
        for value in planted {
            assert!(!text.contains(value), "{value} survived: {text}");
        }
        assert!(text.contains("FlyV1 {{token}}"), "{text}");
        assert!(text.contains("Bearer {{token}}"), "{text}");
        assert!(SecretCheck::new().cassette(&text).is_empty(), "{text}");
    }

    #[test]
    fn a_secret_no_rule_can_rewrite_keeps_the_cassette_from_being_written() {
        use crate::cassette::{connect_envelope, encode_base64};
        // E2B-style output events, each base64 on its own: the key is split across two of them.
        let (a, b) = "sk_live_4eC39HqLyjWDarjtT1zdp7dc".split_at(15);
        let event = |text: &str| {
            connect_envelope(
                0,
                &serde_json::json!({"event": {"data": {"stdout": encode_base64(text.as_bytes())}}}),
            )
        };
        let exchanges = vec![streamed(
            "/process.Process/Start",
            "application/connect+json",
            vec![event(&format!("key {a}")), event(&format!("{b}\n"))],
        )];
        let err = build_cassette(
            "demo",
            "exec_streaming",
            "test",
            &exchanges,
            &Scrubber::from_pairs(Vec::new()),
        )
        .unwrap_err();
        assert!(err.contains("could not remove"), "{err}");
        assert!(err.contains("secret key, split across frames"), "{err}");
        assert!(!err.contains(a) && !err.contains(b), "{err}");
    }

    #[test]
    fn a_request_without_a_route_is_refused_without_its_query() {
        let recording = Recording {
            router: Arc::new(|_| None),
            requests: AtomicUsize::new(0),
            exchanges: Mutex::new(Vec::new()),
            upstreams: Mutex::new(Vec::new()),
        };
        let request = LoggedRequest {
            method: "GET".into(),
            path: "/files".into(),
            query: Some("path=a&signature=q-secret-sig".into()),
            headers: Vec::new(),
            body: bytes::Bytes::new(),
        };
        let err = recording.upstream(&request).unwrap_err();
        assert!(!err.contains("q-secret"), "{err}");
        assert!(err.contains("GET /files"), "{err}");
    }

    #[tokio::test]
    async fn the_recording_proxy_forwards_only_requests_under_the_secret_prefix_it_gave_the_adapter()
     {
        use wiremock::{Mock, MockServer, ResponseTemplate, matchers::any};
        let service = MockServer::start().await;
        Mock::given(any())
            .respond_with(ResponseTemplate::new(200).set_body_string("spent a live credential"))
            .mount(&service)
            .await;
        let given = Arc::new(Mutex::new(String::new()));
        let seen = given.clone();
        let dir = tempfile::tempdir().expect("tempdir");
        let target = RecordTarget::one_host(
            move |url| {
                *seen.lock().expect("lock") = url.to_owned();
                Ok(Arc::new(sandbox_sdk_core::local::LocalProvider::new()) as Arc<dyn Provider>)
            },
            &service.uri(),
            dir.path(),
        )
        .expect("target");
        let session = Session::start(&target).await.expect("session");
        let base = given.lock().expect("lock").clone();
        let origin = base
            .strip_prefix("http://127.0.0.1:")
            .and_then(|rest| rest.split('/').next())
            .map(|port| format!("http://127.0.0.1:{port}"))
            .unwrap_or_else(|| panic!("the proxy is not on loopback: {base}"));
        // Another local process knows the port (it can scan for it), not the prefix.
        let client = reqwest::Client::new();
        let answer = client
            .get(format!("{origin}/sandboxes"))
            .send()
            .await
            .expect("the proxy answers");
        assert_eq!(answer.status().as_u16(), 403, "forwarded without a prefix");
        let secret = base[origin.len()..].trim_start_matches('/');
        assert!(
            secret.len() >= 32 && secret.bytes().all(|b| b.is_ascii_hexdigit()),
            "the adapter's base URL has no secret prefix: {base}"
        );
        let wrong = "0".repeat(secret.len());
        let near = &secret[..secret.len() - 1];
        for path in [
            "/".to_owned(),
            format!("/{wrong}/sandboxes"),
            format!("/{near}/sandboxes"),
            format!("/{secret}x/sandboxes"),
        ] {
            let answer = client
                .get(format!("{origin}{path}"))
                .send()
                .await
                .expect("the proxy answers");
            assert_eq!(answer.status().as_u16(), 403, "{path}");
        }
        let reached = service.received_requests().await.expect("recorded");
        assert!(reached.is_empty(), "forwarded: {reached:?}");
        assert_eq!(session.mark().await, 0, "nothing was recorded");
        // The adapter's own requests go through, without the prefix.
        let answer = client
            .get(format!("{base}/sandboxes?limit=1"))
            .send()
            .await
            .expect("the proxy answers");
        assert_eq!(answer.status().as_u16(), 200);
        let reached = service.received_requests().await.expect("recorded");
        assert_eq!(reached.len(), 1);
        assert_eq!(reached[0].url.path(), "/sandboxes");
        assert_eq!(reached[0].url.query(), Some("limit=1"));
        assert_eq!(session.mark().await, 1);
        assert_eq!(session.exchanges()[0].request.path, "/sandboxes");
    }

    #[test]
    fn a_shared_service_starts_once_and_outlives_its_callers() {
        static STARTS: AtomicUsize = AtomicUsize::new(0);
        static SERVICE: SharedService = SharedService::new();
        async fn start() -> std::io::Result<String> {
            STARTS.fetch_add(1, Ordering::SeqCst);
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
            let url = format!("http://{}", listener.local_addr()?);
            tokio::spawn(async move {
                while let Ok((mut stream, _)) = listener.accept().await {
                    use tokio::io::AsyncWriteExt as _;
                    let _ = stream.write_all(b"up").await;
                }
            });
            Ok(url)
        }
        let urls: Vec<String> = (0..4)
            .map(|_| std::thread::spawn(|| SERVICE.url(start).expect("started")))
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().expect("thread"))
            .collect();
        assert!(urls.iter().all(|u| *u == urls[0]), "{urls:?}");
        assert_eq!(STARTS.load(Ordering::SeqCst), 1);
        // Every caller's thread is gone; the service still answers.
        let addr = urls[0].trim_start_matches("http://");
        let mut stream = std::net::TcpStream::connect(addr).expect("connect");
        let mut answer = String::new();
        std::io::Read::read_to_string(&mut stream, &mut answer).expect("read");
        assert_eq!(answer, "up");
    }

    #[test]
    fn a_shared_service_that_failed_to_start_fails_every_call_with_its_reason() {
        static SERVICE: SharedService = SharedService::new();
        let error = SERVICE
            .url(|| async { Err(std::io::Error::other("port 8080 is taken")) })
            .unwrap_err();
        assert!(
            error
                .to_string()
                .contains("the shared live service did not start: port 8080 is taken"),
            "{error}"
        );
        let again = SERVICE
            .url(|| async { Ok("http://127.0.0.1:1".to_owned()) })
            .unwrap_err();
        assert_eq!(again.to_string(), error.to_string());
    }

    #[test]
    fn today_is_an_iso_date() {
        let d = today();
        assert_eq!(d.len(), 10);
        assert!(d.starts_with("20"), "{d}");
        assert_eq!(&d[4..5], "-");
    }

    /// A loopback stand-in for a WebSocket exec endpoint: `/v1/sprites/live-sprite-1/exec`
    /// (with the live token) sends `session_info` (with a credential field) and a ping, echoes
    /// stdin frames (`0x00`) as stdout (`0x01`) until stdin EOF (`0x04`), then sends the exit
    /// frame and waits for the client to close; any other upgrade is refused 404.
    async fn ws_upstream() -> String {
        use futures::{SinkExt, StreamExt};
        use tokio_tungstenite::tungstenite::Message;
        use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    #[allow(clippy::result_large_err)] // the signature is tungstenite's
                    let check =
                        |req: &Request, resp: Response| -> Result<Response, ErrorResponse> {
                            let authorised = req
                                .headers()
                                .get("authorization")
                                .is_some_and(|v| v == format!("Bearer {LIVE}").as_str());
                            if req.uri().path() == "/v1/sprites/live-sprite-1/exec" && authorised {
                                return Ok(resp);
                            }
                            let mut refusal =
                                ErrorResponse::new(Some(r#"{"error":"not_found"}"#.to_owned()));
                            *refusal.status_mut() = http::StatusCode::NOT_FOUND;
                            Err(refusal)
                        };
                    let Ok(mut ws) = tokio_tungstenite::accept_hdr_async(stream, check).await
                    else {
                        return;
                    };
                    let info =
                        r#"{"type":"session_info","session_id":7,"token":"srv-issued-secret-99"}"#;
                    let _ = ws.send(Message::Text(info.into())).await;
                    let _ = ws.send(Message::Ping(b"keepalive".to_vec().into())).await;
                    while let Some(Ok(message)) = ws.next().await {
                        match message {
                            Message::Binary(b) if b.first() == Some(&0) => {
                                let mut out = vec![1u8];
                                out.extend_from_slice(&b[1..]);
                                let _ = ws.send(Message::Binary(out.into())).await;
                            }
                            Message::Binary(b) if b[..] == [4] => {
                                let _ = ws.send(Message::Binary(vec![3u8, 0].into())).await;
                                break;
                            }
                            Message::Ping(_) | Message::Pong(_) => {}
                            _ => return,
                        }
                    }
                    while let Some(Ok(_)) = ws.next().await {}
                });
            }
        });
        url
    }

    type WsClient = tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >;

    async fn ws_open(
        base: &str,
        path: &str,
        token: &str,
    ) -> Result<WsClient, tokio_tungstenite::tungstenite::Error> {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
        let mut request =
            format!("{}{path}", base.replacen("http://", "ws://", 1)).into_client_request()?;
        request.headers_mut().insert(
            "authorization",
            format!("Bearer {token}").parse().expect("header"),
        );
        tokio_tungstenite::connect_async(request)
            .await
            .map(|(ws, _)| ws)
    }

    /// One exec over the socket: waits for `session_info`, sends `stdin`, reads the echo,
    /// sends stdin EOF, reads the exit frame, closes with 1000. Returns what it read.
    async fn ws_exec(mut ws: WsClient, stdin: &[u8]) -> Vec<Vec<u8>> {
        use futures::{SinkExt, StreamExt};
        use tokio_tungstenite::tungstenite::Message;
        use tokio_tungstenite::tungstenite::protocol::CloseFrame;
        let mut read = Vec::new();
        let next = async |ws: &mut WsClient| loop {
            match ws.next().await.expect("a message").expect("no error") {
                Message::Ping(_) | Message::Pong(_) => {}
                Message::Text(t) => return t.as_bytes().to_vec(),
                Message::Binary(b) => return b.to_vec(),
                other => panic!("unexpected {other:?}"),
            }
        };
        read.push(next(&mut ws).await);
        let mut frame = vec![0u8];
        frame.extend_from_slice(stdin);
        ws.send(Message::Binary(frame.into())).await.expect("stdin");
        read.push(next(&mut ws).await);
        ws.send(Message::Binary(vec![4u8].into()))
            .await
            .expect("eof");
        read.push(next(&mut ws).await);
        ws.close(Some(CloseFrame {
            code: 1000.into(),
            reason: "".into(),
        }))
        .await
        .expect("close");
        while let Some(Ok(_)) = ws.next().await {}
        read
    }

    #[tokio::test]
    async fn a_websocket_exchange_is_recorded_scrubbed_in_order_and_replays() {
        use crate::cassette::{Placeholders, TOKEN, WsMessage, WsStep, encode_base64};
        let upstream = ws_upstream().await;
        let given = Arc::new(Mutex::new(String::new()));
        let seen = given.clone();
        let dir = tempfile::tempdir().expect("tempdir");
        let source =
            "recorded through the kit's proxy from a test simulator; not from the live API";
        let target = RecordTarget::one_host(
            move |url| {
                *seen.lock().expect("lock") = url.to_owned();
                Ok(Arc::new(sandbox_sdk_core::local::LocalProvider::new()) as Arc<dyn Provider>)
            },
            &upstream,
            dir.path(),
        )
        .expect("target")
        .secret(LIVE)
        .from_simulator(source);
        let session = Session::start(&target).await.expect("session");
        let base = given.lock().expect("lock").clone();
        let exec = "/v1/sprites/live-sprite-1/exec?cmd=cat&stdin=true";
        let stdin = format!("key={LIVE}\n");
        let ws = ws_open(&base, exec, LIVE).await.expect("relayed upgrade");
        let read = ws_exec(ws, stdin.as_bytes()).await;
        assert_eq!(read[1], [b"\x01", stdin.as_bytes()].concat());
        assert_eq!(read[2], b"\x03\x00");
        match ws_open(&base, "/v1/sprites/missing/exec", LIVE).await {
            Err(tokio_tungstenite::tungstenite::Error::Http(refusal)) => {
                assert_eq!(refusal.status().as_u16(), 404);
            }
            other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
        }
        let cassette = session
            .cassette(&target, "exec_stdin", Some("live-sprite-1"), &[])
            .await
            .expect("cassette");
        let text = cassette.to_json_pretty();
        for secret in [LIVE, "srv-issued-secret-99", "live-sprite-1"] {
            assert!(!text.contains(secret), "{secret} survived: {text}");
        }
        assert!(
            SecretCheck::new().known(LIVE).cassette(&text).is_empty(),
            "{text}"
        );
        assert_eq!(cassette.provenance.kind, ProvenanceKind::Spec);
        assert_eq!(cassette.provenance.source.as_deref(), Some(source));
        assert_eq!(
            crate::cassette::request_lines(&serde_json::from_str(&text).expect("json")),
            [
                "GET /v1/sprites/{{sandbox_id}}/exec",
                "GET /v1/sprites/missing/exec"
            ]
        );
        let ws_interaction = &cassette.interactions[0];
        assert_eq!(
            ws_interaction.request.headers["authorization"],
            "Bearer {{token}}"
        );
        let binary = |bytes: &[u8]| WsMessage::BinaryBase64(encode_base64(bytes));
        assert_eq!(
            ws_interaction.response.websocket,
            Some(vec![
                WsStep::Server(WsMessage::Text(
                    r#"{"type":"session_info","session_id":7,"token":"{{token}}"}"#.into()
                )),
                WsStep::Client(binary(b"\x00key={{token}}\n")),
                WsStep::Server(binary(b"\x01key={{token}}\n")),
                WsStep::Client(binary(b"\x04")),
                WsStep::Server(binary(b"\x03\x00")),
                WsStep::ClientClose(Some(1000)),
            ]),
            "{text}"
        );
        assert_eq!(cassette.interactions[1].response.status, 404);
        assert!(cassette.interactions[1].response.websocket.is_none());

        // The cassette replays: the same exchange against the replay server, with its token.
        let path = Cassette::path_in(dir.path(), "exec_stdin");
        std::fs::write(&path, &text).expect("written");
        let server = crate::replay::ReplayServer::start().await.expect("server");
        let replayed = Cassette::load(&path)
            .expect("loads")
            .substituted(&Placeholders::standard(server.url()))
            .expect("substituted");
        server.mount(&replayed, false).await.expect("mounted");
        let exec = format!(
            "/v1/sprites/{}/exec?cmd=cat&stdin=true",
            crate::cassette::SANDBOX_ID
        );
        let ws = ws_open(server.url(), &exec, TOKEN).await.expect("upgraded");
        let read = ws_exec(ws, b"key={{token}}\n").await;
        assert_eq!(read[1], b"\x01key={{token}}\n");
        assert!(
            ws_open(server.url(), "/v1/sprites/missing/exec", TOKEN)
                .await
                .is_err()
        );
        server.verify().await.expect("the recording replays");
    }

    #[test]
    fn a_simulator_target_never_writes_recorded() {
        let target = || {
            RecordTarget::one_host(
                |_| Ok(Arc::new(sandbox_sdk_core::local::LocalProvider::new()) as Arc<dyn Provider>),
                "http://127.0.0.1:9",
                "/nonexistent",
            )
            .expect("target")
        };
        assert_eq!(target().upstream(), Upstream::Live);
        assert_eq!(target().provenance_kind(), ProvenanceKind::Recorded);
        // Whatever is set after, the kind follows the upstream.
        let sim = target()
            .from_simulator("")
            .source("anything")
            .secret("k-123");
        assert_eq!(sim.upstream(), Upstream::Simulator);
        assert_eq!(sim.provenance_kind(), ProvenanceKind::Spec);
        assert_eq!(sim.source_text(), "anything");
        let sim = target().from_simulator("  ");
        assert!(
            sim.source_text().contains("not from the live API"),
            "{}",
            sim.source_text()
        );
    }

    #[test]
    fn a_secret_split_across_websocket_frames_is_found() {
        use crate::cassette::encode_base64;
        let (a, b) = "sk_live_4eC39HqLyjWDarjtT1zdp7dc".split_at(15);
        let text = serde_json::json!({
            "provider": "demo", "scenario": "exec_stdin",
            "provenance": {"kind": "spec", "date": "2026-12-01", "source": "test"},
            "interactions": [{
                "request": {"method": "GET", "path": "/exec"},
                "response": {"status": 101, "websocket": [
                    {"server": {"binary_base64": encode_base64(format!("\x01{a}").as_bytes())}},
                    {"client": {"text": "x"}},
                    {"server": {"binary_base64": encode_base64(format!("\x01{b}").as_bytes())}}
                ]}
            }]
        });
        let text = serde_json::to_string_pretty(&text).expect("json");
        let found = SecretCheck::new().cassette(&text);
        assert!(
            found
                .iter()
                .any(|f| f.to_string().contains("split across frames")),
            "{found:?}"
        );
    }
}
