//! The Machines API calls the adapter makes, one method per endpoint, over the shared
//! [`HttpClient`]. Errors all go through [`crate::error::map_error`].

mod lookups;
mod pace;
mod script;

pub(crate) use lookups::{KeyLookups, Scope};
pub(crate) use pace::{Action, Pace};
pub(crate) use script::{AnswerSize, ScriptCall, ScriptExec, script_output};

use crate::config::{
    EXEC_DEFAULT_SECS, IDEMPOTENCY_LABEL, LEASE_NONCE_HEADER, MAX_RATE_LIMIT_WAIT, MAX_WAIT,
    PROVIDER, RATE_LIMIT_ATTEMPTS, REQUEST_ID_HEADER, SANDBOX_LABEL, Settings,
};
use crate::error::{FailedResponse, documented_retry_after, map_error, reached_state};
use crate::wire::{
    CreateMachineRequest, ExecRequest, ExecResponse, Lease, LeaseEnvelope, LeaseRequest, Machine,
    StopRequest, UpdateMachineRequest, WaitResponse,
};
use sandbox_sdk_core::http::{HttpClient, Method, Request, encode_path_segment, truncate};
use sandbox_sdk_core::redact::scrub_text;
use sandbox_sdk_core::{Error, ErrorKind, Result};
use serde::de::DeserializeOwned;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// How a machine is destroyed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Destroy {
    /// `?force=true`: killed even when running.
    Force,
    /// Without `force`: Fly refuses a machine that is running.
    Plain,
}

/// Extra time the HTTP client gives a call beyond the server-side timeout it asked for.
const SLACK: Duration = Duration::from_secs(15);

/// The API client of one app.
#[derive(Debug, Clone)]
pub(crate) struct Api {
    pub http: HttpClient,
    pub settings: Arc<Settings>,
    /// The rate of each paced action, shared by every handle of the provider.
    pub pace: Pace,
    /// Idempotency-key look-ups gathered into shared lists, per provider.
    pub lookups: Arc<KeyLookups>,
}

impl Api {
    pub fn new(settings: Settings) -> Result<Api> {
        let http = HttpClient::builder(PROVIDER, &settings.api_root)
            .auth_header("authorization", settings.authorization.clone())
            .header("accept", "application/json")
            .request_id_header(REQUEST_ID_HEADER)
            .timeout(settings.request_timeout)
            .error_mapper(|r| {
                map_error(FailedResponse {
                    status: r.status,
                    body: &r.body,
                    request_id: r.request_id.as_deref(),
                    retry_after: r.retry_after(),
                    operation: Some(r.operation.as_str()),
                    sandbox_id: r.sandbox_id.as_deref(),
                })
            })
            .build()?;
        Ok(Api {
            http,
            pace: Pace::new(settings.poll_interval),
            lookups: Arc::default(),
            settings: Arc::new(settings),
        })
    }

    /// Sends a call Fly rate-limits per action and identifier (PROTOCOL.md §3): it first waits
    /// its turn in the bucket of `action` on `scope` ([`Pace`]), and one answered 429 anyway
    /// (another client of the same app or machine: nothing happened) is sent again, up to
    /// [`RATE_LIMIT_ATTEMPTS`] times, after the answer's `Retry-After` or the documented rate.
    async fn paced<T, F, Fut>(&self, action: Action, scope: &str, call: F) -> Result<T>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let mut attempt = 1;
        loop {
            self.pace.ready(action, scope).await;
            match call().await {
                Err(e) if e.status() == Some(429) && attempt < RATE_LIMIT_ATTEMPTS => {
                    let wait = e
                        .retry_after()
                        .unwrap_or_else(|| documented_retry_after(e.operation()))
                        .min(MAX_RATE_LIMIT_WAIT);
                    tracing::debug!(
                        scope,
                        attempt,
                        wait_ms = wait.as_millis() as u64,
                        "fly: rate limited (429), sending the call again"
                    );
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    fn machines(&self) -> String {
        format!("/apps/{}/machines", encode_path_segment(&self.settings.app))
    }

    fn machine(&self, id: &str) -> String {
        format!("{}/{}", self.machines(), encode_path_segment(id))
    }

    fn req(&self, method: Method, path: String, op: &str, id: Option<&str>) -> Request {
        let req = self.http.request(method, &path).operation(op);
        match id {
            Some(id) => req.sandbox_id(id),
            None => req,
        }
    }

    fn with_nonce(req: Request, nonce: Option<&str>) -> Request {
        match nonce {
            Some(nonce) => req.sensitive_header(LEASE_NONCE_HEADER, nonce),
            None => req,
        }
    }

    pub async fn create(&self, body: &CreateMachineRequest) -> Result<Machine> {
        self.req(Method::Post, self.machines(), "create", None)
            .json(body)
            .send_json()
            .await
    }

    pub async fn get(&self, id: &str) -> Result<Machine> {
        self.req(Method::Get, self.machine(id), "get", Some(id))
            .send_json()
            .await
    }

    /// `GET …/machines` with `query`, paced per app.
    pub async fn list(&self, query: &[(String, String)]) -> Result<Vec<Machine>> {
        self.list_asking(|| query.to_vec()).await
    }

    /// `GET …/machines` with the query `query()` gives right before each send (after the
    /// pace's turn), paced per app.
    async fn list_asking(&self, query: impl Fn() -> Vec<(String, String)>) -> Result<Vec<Machine>> {
        self.paced(Action::List, &self.settings.app, || {
            let mut req = self.req(Method::Get, self.machines(), "list", None);
            for (k, v) in query() {
                req = req.query(&k, &v);
            }
            req.send_json()
        })
        .await
    }

    /// The machines a create with idempotency key `key` looks among, handed to `pick`: a
    /// `GET …/machines` sent after this call began, shared with the look-ups of other keyed
    /// creates made meanwhile ([`KeyLookups`]). Alone, it asks for the key's label
    /// (`metadata.sandbox_sdk_idempotency_key=KEY`); shared, for every machine of ours
    /// (`metadata.sandbox_sdk=1`).
    pub async fn list_for_key<R>(
        &self,
        key: &str,
        pick: impl FnOnce(&[Machine]) -> R,
    ) -> Result<R> {
        let api = self.clone();
        let send = move |gather: lookups::Gather| async move {
            api.list_asking(|| match gather.close() {
                Scope::Key(key) => vec![(format!("metadata.{IDEMPOTENCY_LABEL}"), key)],
                Scope::All => vec![(format!("metadata.{SANDBOX_LABEL}"), "1".to_owned())],
            })
            .await
        };
        self.lookups.look_up(key, send, pick).await
    }

    pub async fn update(
        &self,
        id: &str,
        body: &UpdateMachineRequest,
        nonce: Option<&str>,
    ) -> Result<Machine> {
        let req = self.req(Method::Post, self.machine(id), "update", Some(id));
        Self::with_nonce(req, nonce).json(body).send_json().await
    }

    /// `POST …/{action}` with an optional JSON body; the answer's body (`{"ok":true}`, start's
    /// `{previous_state}`) is read and discarded.
    pub async fn action(
        &self,
        id: &str,
        action: &str,
        body: Option<&StopRequest>,
        nonce: Option<&str>,
    ) -> Result<()> {
        let path = format!("{}/{action}", self.machine(id));
        let mut req = Self::with_nonce(self.req(Method::Post, path, action, Some(id)), nonce);
        if let Some(body) = body {
            req = req.json(body);
        }
        req.send_empty().await
    }

    pub async fn destroy(&self, id: &str, mode: Destroy, nonce: Option<&str>) -> Result<()> {
        let mut req = self.req(Method::Delete, self.machine(id), "destroy", Some(id));
        if mode == Destroy::Force {
            req = req.query("force", "true");
        }
        Self::with_nonce(req, nonce).send_empty().await?;
        self.pace.forget(id);
        Ok(())
    }

    /// One `/wait` call of at most [`MAX_WAIT`], paced per machine.
    async fn wait_once(
        &self,
        id: &str,
        state: &str,
        version: Option<&str>,
        seconds: u64,
    ) -> Result<WaitResponse> {
        self.paced(Action::Wait, id, || {
            let path = format!("{}/wait", self.machine(id));
            let mut req = self
                .req(Method::Get, path, "wait", Some(id))
                .query("state", state)
                .query("timeout", seconds);
            if let Some(v) = version {
                req = req.query("version", v);
            }
            req.timeout(Duration::from_secs(seconds) + SLACK)
                .send_json()
        })
        .await
    }

    /// Waits until machine `id` reaches `state`, chaining `/wait` calls of at most 60 s within
    /// `deadline`. The budget is counted by the time each call asked the server for (and by the
    /// clock, whichever runs out first), so a chain is bounded even when answers come back early.
    /// A wait that runs out is a `Timeout` naming the state the machine was in; a machine that
    /// reaches a terminal state meanwhile is `NotRunning`.
    pub async fn wait_for(
        &self,
        id: &str,
        state: &str,
        version: Option<&str>,
        deadline: Duration,
    ) -> Result<WaitResponse> {
        let started = tokio::time::Instant::now();
        let mut budget = deadline.max(Duration::from_secs(1));
        let mut version = version.map(str::to_owned);
        let mut last_error: Option<Error> = None;
        loop {
            let left = budget.min(deadline.saturating_sub(started.elapsed()));
            if left < Duration::from_secs(1) {
                let reached = last_error
                    .as_ref()
                    .and_then(|e| reached_state(e.message()).map(str::to_owned))
                    .unwrap_or_else(|| "unknown".to_owned());
                let mut error = Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "machine did not reach {state} within {}s; it is {reached}",
                        deadline.as_secs()
                    ),
                )
                .with_provider(PROVIDER)
                .with_operation("wait")
                .with_sandbox_id(id);
                if let Some(e) = &last_error {
                    if let Some(rid) = e.request_id() {
                        error = error.with_request_id(rid);
                    }
                    if let Some(status) = e.status() {
                        error = error.with_status(status);
                    }
                }
                return Err(error);
            }
            let seconds = left.min(MAX_WAIT).as_secs().max(1);
            match self.wait_once(id, state, version.as_deref(), seconds).await {
                Ok(resp) => return Ok(resp),
                Err(e) if e.kind() == ErrorKind::Timeout && e.status() == Some(408) => {
                    let reached = reached_state(e.message()).map(str::to_owned);
                    match reached.as_deref() {
                        Some(s @ ("destroyed" | "failed")) if s != state => {
                            return Err(Error::new(
                                ErrorKind::NotRunning,
                                format!("machine is {s} and will not reach {state}"),
                            )
                            .with_provider(PROVIDER)
                            .with_operation("wait")
                            .with_sandbox_id(id)
                            .with_status(408));
                        }
                        Some("replaced") => {
                            // The machine was updated: follow its new version.
                            version = self.get(id).await?.instance_id;
                        }
                        _ => {}
                    }
                    budget = budget.saturating_sub(Duration::from_secs(seconds));
                    last_error = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// One `/exec` call. `timeout` is the server-side deadline in seconds; the call as a whole
    /// is bounded by that deadline plus the request timeout (the answer comes only once the
    /// command ended, so a silent server is a `Timeout` after that long, never a hang). An answer
    /// over `max_answer` bytes is an error before it is read whole.
    ///
    /// Paced per machine (one bucket shared by every operation), and sent again after a 429.
    pub async fn exec(
        &self,
        id: &str,
        body: &ExecRequest,
        max_answer: usize,
    ) -> Result<ExecResponse> {
        self.paced(Action::Exec, id, || self.exec_once(id, body, max_answer))
            .await
    }

    async fn exec_once(
        &self,
        id: &str,
        body: &ExecRequest,
        max_answer: usize,
    ) -> Result<ExecResponse> {
        let path = format!("{}/exec", self.machine(id));
        let server = Duration::from_secs(body.timeout.unwrap_or(EXEC_DEFAULT_SECS));
        let resp = self
            .req(Method::Post, path, "exec", Some(id))
            .json(body)
            .max_body(max_answer)
            .timeout(server + self.settings.request_timeout)
            .send()
            .await?;
        let request_id = resp.request_id().map(str::to_owned);
        let mut answer: ExecResponse = resp.json().await?;
        answer.request_id = request_id;
        Ok(answer)
    }

    /// A message from a 2xx answer, which the transport does not scrub, made safe to quote:
    /// the credential (and `also`, such as a lease nonce) scrubbed in any spelling, cut short.
    fn quoted(&self, message: Option<String>, otherwise: &str, also: &[&str]) -> String {
        let Some(message) = message else {
            return otherwise.to_owned();
        };
        let auth = &self.settings.authorization;
        let mut secrets = vec![auth.clone()];
        secrets.extend(
            auth.rsplit_once(' ')
                .map(|(_, credential)| credential.to_owned()),
        );
        secrets.extend(also.iter().map(|s| (*s).to_owned()));
        truncate(&scrub_text(&message, &secrets), 512)
    }

    async fn lease_call<T: DeserializeOwned>(&self, req: Request, op: &str, id: &str) -> Result<T> {
        let envelope: LeaseEnvelope<T> = req.send_json().await?;
        if envelope.status.as_deref() == Some("error") {
            return Err(Error::new(
                ErrorKind::Provider,
                self.quoted(
                    envelope.message,
                    "lease call answered with status error",
                    &[],
                ),
            )
            .with_provider(PROVIDER)
            .with_operation(op)
            .with_sandbox_id(id));
        }
        envelope.data.ok_or_else(|| {
            Error::new(ErrorKind::Provider, "lease answer has no data")
                .with_provider(PROVIDER)
                .with_operation(op)
                .with_sandbox_id(id)
        })
    }

    pub async fn acquire_lease(
        &self,
        id: &str,
        body: &LeaseRequest,
        nonce: Option<&str>,
    ) -> Result<Lease> {
        let op = if nonce.is_some() {
            "refresh_lease"
        } else {
            "acquire_lease"
        };
        let path = format!("{}/lease", self.machine(id));
        let req = Self::with_nonce(self.req(Method::Post, path, op, Some(id)), nonce).json(body);
        self.lease_call(req, op, id).await
    }

    pub async fn get_lease(&self, id: &str) -> Result<Lease> {
        let path = format!("{}/lease", self.machine(id));
        let req = self.req(Method::Get, path, "get_lease", Some(id));
        self.lease_call(req, "get_lease", id).await
    }

    /// Releases a lease. The answer's envelope is checked when there is one; an empty body
    /// (not documented, but harmless) is accepted.
    pub async fn release_lease(&self, id: &str, nonce: &str) -> Result<()> {
        let path = format!("{}/lease", self.machine(id));
        let body = self
            .req(Method::Delete, path, "release_lease", Some(id))
            .sensitive_header(LEASE_NONCE_HEADER, nonce)
            .send()
            .await?
            .bytes()
            .await?;
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(());
        }
        match serde_json::from_slice::<LeaseEnvelope<serde_json::Value>>(&body) {
            Ok(envelope) if envelope.status.as_deref() == Some("error") => Err(Error::new(
                ErrorKind::Provider,
                self.quoted(
                    envelope.message,
                    "lease release answered with status error",
                    &[nonce],
                ),
            )
            .with_provider(PROVIDER)
            .with_operation("release_lease")
            .with_sandbox_id(id)),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_encode_app_and_machine() {
        let api = Api::new(Settings::for_tests("my-app")).unwrap();
        assert_eq!(
            api.machine("1857156b526dd8"),
            "/apps/my-app/machines/1857156b526dd8"
        );
        assert_eq!(api.machine("a/b"), "/apps/my-app/machines/a%2Fb");
    }

    fn rate_limited(retry_after: Option<Duration>) -> Error {
        let error = Error::new(ErrorKind::QuotaExceeded, "rate limit exceeded")
            .with_status(429)
            .with_operation("list");
        match retry_after {
            Some(delay) => error.with_retry_after(delay),
            None => error,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_paced_call_waits_out_429s_with_their_retry_after() {
        let api = Api::new(Settings::for_tests("my-app")).unwrap();
        let calls = std::sync::atomic::AtomicU32::new(0);
        let start = tokio::time::Instant::now();
        let answer = api
            .paced(Action::List, "my-app", || async {
                match calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) {
                    0 => Err(rate_limited(Some(Duration::from_secs(2)))),
                    // No Retry-After: the documented rate (1 s).
                    1 => Err(rate_limited(None)),
                    n => Ok(n),
                }
            })
            .await
            .unwrap();
        assert_eq!(answer, 2);
        // 2 s + 1 s of waiting; the three calls fit the bucket's burst.
        assert_eq!(start.elapsed(), Duration::from_secs(3));
    }

    #[tokio::test(start_paused = true)]
    async fn a_paced_call_gives_up_after_its_attempts_and_other_errors_go_back_at_once() {
        let api = Api::new(Settings::for_tests("my-app")).unwrap();
        let calls = std::sync::atomic::AtomicU32::new(0);
        let error = api
            .paced(Action::Wait, "m1", || async {
                calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Err::<(), _>(rate_limited(Some(Duration::from_millis(10))))
            })
            .await
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::QuotaExceeded);
        assert_eq!(
            calls.load(std::sync::atomic::Ordering::SeqCst),
            RATE_LIMIT_ATTEMPTS
        );
        let calls = std::sync::atomic::AtomicU32::new(0);
        let error = api
            .paced(Action::Wait, "m2", || async {
                calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Err::<(), _>(Error::new(ErrorKind::Provider, "boom").with_status(500))
            })
            .await
            .unwrap_err();
        assert_eq!(error.status(), Some(500));
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn lists_beyond_the_burst_are_spaced_per_app() {
        let api = Api::new(Settings::for_tests("my-app")).unwrap();
        let start = tokio::time::Instant::now();
        for _ in 0..5 {
            api.paced(Action::List, "my-app", || async { Ok(()) })
                .await
                .unwrap();
        }
        // Fly's list limit: 3 at once, then 1 per second (PROTOCOL.md §3).
        assert_eq!(start.elapsed(), Duration::from_secs(2));
    }

    /// Issue 33 item 6: a lease answer with `status: error` is a 200, which the transport does
    /// not scrub; its message quoting the token must not reach the error.
    #[tokio::test]
    async fn a_lease_error_quoting_the_token_never_shows_it() {
        use wiremock::{Mock, MockServer, ResponseTemplate, matchers};
        let token = "fm2_lease-secret-0123456789";
        let server = MockServer::start().await;
        Mock::given(matchers::method("GET"))
            .respond_with(ResponseTemplate::new(200).set_body_string(format!(
                r#"{{"status":"error","message":"FlyV1 {} or {token} has no lease"}}"#,
                token.replace('-', "\\u002d")
            )))
            .mount(&server)
            .await;
        let mut settings = Settings::for_tests("my-app");
        settings.api_root = format!("{}/v1", server.uri());
        settings.authorization = crate::config::authorization(token);
        let api = Api::new(settings).unwrap();
        let e = api.get_lease("m1").await.unwrap_err();
        let text = format!("{e} {e:?}");
        assert!(!text.contains(token), "{text}");
        assert!(
            text.contains("<redacted> or <redacted> has no lease"),
            "{text}"
        );
    }
}
