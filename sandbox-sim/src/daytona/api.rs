//! The control plane (`/api`): sandboxes, their states and transitions, and the API's errors
//! and throttlers.

// A refusal is its whole HTTP answer, made once per request: boxing it buys nothing.
#![allow(clippy::result_large_err)]

use super::record::{Landing, Record, copy_tree, destroy_backing, kill_processes, settle};
use super::{Config, ORGANIZATION_ID, random_hex, random_token, random_uuid};
use crate::{Backing, SimRequest, SimResponse};
use http::Method;
use sandbox_sdk_core::time::format_rfc3339_millis;
use sandbox_sdk_core::{CreateSpec, Sandbox};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant, SystemTime};

/// How long the API keeps a create (and a start) open waiting for `started`.
const SERVER_WAIT: Duration = Duration::from_secs(30);

/// The snapshot a sandbox without one is created from.
const DEFAULT_SNAPSHOT: &str = "daytonaio/sandbox:0.5.0";

/// The operation name of an `/api` request (`segments` after `api`).
pub(crate) fn operation(method: &Method, s: &[&str]) -> &'static str {
    let post = method == Method::POST;
    match (s, method.as_str()) {
        (["config"], _) => "config",
        (["sandbox"], "POST") => "create",
        (["sandbox"], "GET") => "list",
        (["sandbox", "ssh-access", "validate"], _) => "ssh",
        (["sandbox", _], "GET") => "get",
        (["sandbox", _], "DELETE") => "destroy",
        (["sandbox", _, "start"], _) if post => "start",
        (["sandbox", _, "stop"], _) if post => "stop",
        (["sandbox", _, "pause"], _) if post => "pause",
        (["sandbox", _, "archive"], _) if post => "archive",
        (["sandbox", _, "labels"], _) => "labels",
        (["sandbox", _, "fork"], _) => "fork",
        (["sandbox", _, "snapshot"], _) => "snapshot",
        (["sandbox", _, "ssh-access"], _) => "ssh",
        (["sandbox", _, "ports", ..], _) => "preview",
        (
            [
                "sandbox",
                _,
                "autostop" | "autopause" | "autoarchive" | "autodelete" | "ttl",
                _,
            ],
            _,
        ) => "set_timeout",
        _ => "other",
    }
}

/// The API's error answer (NestJS `AllExceptionsFilter`): `path` is the request's path and
/// query as sent.
pub(crate) fn error(status: u16, path: &str, message: &str) -> SimResponse {
    let reason = http::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("Error");
    json_answer(
        status,
        &json!({
            "path": path,
            "timestamp": format_rfc3339_millis(SystemTime::now()),
            "statusCode": status,
            "error": reason,
            "message": message,
        }),
    )
}

/// A JSON answer with the API's content type.
pub(crate) fn json_answer(status: u16, value: &Value) -> SimResponse {
    SimResponse::bytes(
        status,
        Some("application/json; charset=utf-8"),
        serde_json::to_vec(value).unwrap_or_default().into(),
    )
}

/// The request's path and query as sent.
pub(crate) fn full_path(request: &SimRequest) -> String {
    match &request.query {
        Some(q) => format!("{}?{q}", request.path),
        None => request.path.clone(),
    }
}

/// The control plane's state.
pub(crate) struct Api {
    pub config: Config,
    backing: Backing,
    url: OnceLock<String>,
    sandboxes: Mutex<BTreeMap<String, Record>>,
    next_seq: Mutex<u64>,
    pub(super) snapshots: Mutex<Vec<String>>,
    throttles: Mutex<HashMap<&'static str, (Instant, u32)>>,
    /// Whether the rate limits apply now ([`Simulator::set_rate_limits`]).
    ///
    /// [`Simulator::set_rate_limits`]: crate::Simulator::set_rate_limits
    pub limited: std::sync::atomic::AtomicBool,
    /// The runtime the simulator serves on, for work that outlives a request.
    pub rt: tokio::runtime::Handle,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Api {
    pub fn new(config: Config, backing: Backing) -> Api {
        Api {
            config,
            backing,
            url: OnceLock::new(),
            sandboxes: Mutex::new(BTreeMap::new()),
            next_seq: Mutex::new(0),
            snapshots: Mutex::new(Vec::new()),
            throttles: Mutex::new(HashMap::new()),
            limited: std::sync::atomic::AtomicBool::new(true),
            rt: tokio::runtime::Handle::current(),
        }
    }

    pub fn set_url(&self, url: &str) {
        let _ = self.url.set(url.to_owned());
    }

    fn url(&self) -> &str {
        self.url
            .get()
            .map(String::as_str)
            .unwrap_or("http://127.0.0.1")
    }

    pub(super) fn port(&self) -> &str {
        self.url().rsplit(':').next().unwrap_or("80")
    }

    pub fn count(&self) -> usize {
        self.settled().len()
    }

    pub fn state_of(&self, id_or_name: &str) -> Option<String> {
        let mut all = self.settled();
        find(&mut all, id_or_name).map(|r| r.state.to_owned())
    }

    /// Forgets every sandbox and hands back their backings (to be destroyed).
    pub fn take_all(&self) -> Vec<sandbox_sdk_core::local::LocalSandbox> {
        let mut all = lock(&self.sandboxes);
        std::mem::take(&mut *all)
            .into_values()
            .map(|r| r.backing)
            .collect()
    }

    /// The sandboxes with every transition whose time has come applied.
    pub fn settled(&self) -> MutexGuard<'_, BTreeMap<String, Record>> {
        let mut all = lock(&self.sandboxes);
        let now = Instant::now();
        let mut gone = Vec::new();
        for (id, record) in all.iter_mut() {
            match settle(record, now) {
                Landing::Nothing => {}
                Landing::Gone => gone.push(id.clone()),
                Landing::Stopped => kill_processes(&self.rt, record),
                Landing::Expired => {
                    kill_processes(&self.rt, record);
                    destroy_backing(&self.rt, record.backing.clone());
                    gone.push(id.clone());
                }
            }
        }
        for id in gone {
            all.remove(&id);
        }
        all
    }

    /// Runs `f` on the sandbox with this id or name, settled.
    pub fn with<R>(&self, id_or_name: &str, f: impl FnOnce(&mut Record) -> R) -> Option<R> {
        let mut all = self.settled();
        find(&mut all, id_or_name).map(f)
    }

    /// Admits an `/api` request from its head: the API key (the config and the event
    /// stream's path need none), and JSON bodies only.
    pub fn admit(&self, request: &SimRequest) -> Result<usize, SimResponse> {
        let segments = request.segments();
        let s: Vec<&str> = segments.iter().skip(1).map(String::as_str).collect();
        let open = (operation(&request.method, &s) == "config" && request.method == Method::GET)
            || s.first() == Some(&"socket.io");
        if !open && !self.authorized(request) {
            return Err(error(401, &full_path(request), "Unauthorized"));
        }
        Ok(crate::MAX_JSON_BODY)
    }

    /// Answers an admitted `/api` request ([`Api::admit`] checked its key).
    pub async fn handle(self: Arc<Self>, request: SimRequest) -> SimResponse {
        let path = full_path(&request);
        let segments = request.segments();
        let s: Vec<&str> = segments.iter().skip(1).map(String::as_str).collect();
        let op = operation(&request.method, &s);
        if op == "config" && request.method == Method::GET {
            return json_answer(200, &self.config_body());
        }
        if s.first() == Some(&"socket.io") {
            // The event stream is not simulated; clients fall back to polling.
            return error(
                404,
                &path,
                &format!("Cannot {} {}", request.method, request.path),
            );
        }
        let throttlers = throttlers_of(op);
        let mut limits = Vec::new();
        for name in throttlers {
            match self.throttle(name) {
                Ok(headers) => limits.push(headers),
                Err(retry_after) => {
                    return error(429, &path, "Rate limit exceeded")
                        .header(&format!("retry-after-{name}"), &retry_after.to_string());
                }
            }
        }
        let mut response = self.route(&request, &s, &path).await;
        for (name, limit, remaining, reset) in limits {
            response = response
                .header(&format!("x-ratelimit-limit-{name}"), &limit.to_string())
                .header(
                    &format!("x-ratelimit-remaining-{name}"),
                    &remaining.to_string(),
                )
                .header(&format!("x-ratelimit-reset-{name}"), &reset.to_string());
        }
        response
    }

    fn authorized(&self, request: &SimRequest) -> bool {
        request
            .header("authorization")
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|key| key.trim() == self.config.api_key)
    }

    /// Counts a request against throttler `name`: `(name, limit, remaining, reset seconds)`,
    /// or the seconds to wait when the limit is spent.
    fn throttle(&self, name: &'static str) -> Result<(&'static str, u32, u32, u64), u64> {
        const WINDOW: Duration = Duration::from_secs(60);
        let limit = match name {
            "sandbox-create" => self.config.rate_limits.1,
            "sandbox-lifecycle" => self.config.rate_limits.2,
            _ => self.config.rate_limits.0,
        };
        if !self.limited.load(std::sync::atomic::Ordering::Relaxed) {
            return Ok((name, limit, limit, 60));
        }
        let mut all = lock(&self.throttles);
        let now = Instant::now();
        let entry = all.entry(name).or_insert((now, 0));
        if now.duration_since(entry.0) >= WINDOW {
            *entry = (now, 0);
        }
        let reset = (WINDOW.saturating_sub(now.duration_since(entry.0)))
            .as_secs()
            .max(1);
        if entry.1 >= limit {
            return Err(reset);
        }
        entry.1 += 1;
        Ok((name, limit, limit - entry.1, reset))
    }

    fn config_body(&self) -> Value {
        let (auth, create, lifecycle) = self.config.rate_limits;
        let limit = |n: u32| json!({ "ttl": 60, "limit": n });
        json!({
            "version": "0.205.1",
            "proxyTemplateUrl": format!("http://{{{{PORT}}}}-{{{{sandboxId}}}}.preview.localhost:{}", self.port()),
            "proxyToolboxUrl": format!("{}/toolbox", self.url()),
            "defaultSnapshot": DEFAULT_SNAPSHOT,
            "maxAutoArchiveInterval": 43200,
            "sshGatewayCommand": format!("ssh -p {} {{{{TOKEN}}}}@127.0.0.1", self.port()),
            "rateLimit": {
                "failedAuth": limit(auth),
                "authenticated": limit(auth),
                "sandboxCreate": limit(create),
                "sandboxLifecycle": limit(lifecycle),
                "sandboxList": limit(auth),
            },
        })
    }

    async fn route(self: &Arc<Self>, request: &SimRequest, s: &[&str], path: &str) -> SimResponse {
        let not_found = || {
            error(
                404,
                path,
                &format!("Cannot {} {}", request.method, request.path),
            )
        };
        let method = request.method.as_str();
        match s {
            ["sandbox"] if method == "POST" => self.create(request, path).await,
            ["sandbox"] if method == "GET" => self.list(request, path),
            ["sandbox", "ssh-access", "validate"] if method == "GET" => self.validate_ssh(request),
            ["sandbox", id] if method == "GET" => self.get(id, path),
            ["sandbox", id] if method == "DELETE" => self.delete(id, path),
            ["sandbox", id, "start"] if method == "POST" => self.start(id, path).await,
            ["sandbox", id, "stop"] if method == "POST" => self.stop(id, path),
            ["sandbox", id, "pause"] if method == "POST" => self.pause(id, path),
            ["sandbox", id, "archive"] if method == "POST" => self.archive(id, path),
            ["sandbox", id, "labels"] if method == "PUT" => self.labels(id, request, path),
            ["sandbox", id, "fork"] if method == "POST" => self.fork(id, request, path).await,
            ["sandbox", id, "snapshot"] if method == "POST" => self.snapshot(id, request, path),
            [
                "sandbox",
                id,
                which @ ("autostop" | "autopause" | "autoarchive" | "autodelete" | "ttl"),
                minutes,
            ] if method == "POST" => self.interval(id, which, minutes, path),
            ["sandbox", id, "ports", port, "preview-url"] if method == "GET" => {
                self.preview(id, port, path)
            }
            ["sandbox", id, "ports", port, "signed-preview-url"] if method == "GET" => {
                self.signed_preview(id, port, request, path)
            }
            [
                "sandbox",
                id,
                "ports",
                port,
                "signed-preview-url",
                token,
                "expire",
            ] if method == "POST" => self.expire_preview(id, port, token, path),
            ["sandbox", id, "ssh-access"] if method == "POST" => self.ssh_access(id, request, path),
            ["sandbox", id, "ssh-access"] if method == "DELETE" => {
                self.revoke_ssh(id, request, path)
            }
            ["sandbox", id, "toolbox-proxy-url"] if method == "GET" => self
                .with(id, |_| {
                    json_answer(200, &json!({ "url": format!("{}/toolbox", self.url()) }))
                })
                .unwrap_or_else(|| missing(id, path)),
            ["sandbox", id, "last-activity"] if method == "POST" => self
                .with(id, |r| {
                    r.touch();
                    SimResponse::empty(201)
                })
                .unwrap_or_else(|| missing(id, path)),
            _ => not_found(),
        }
    }

    async fn create(self: &Arc<Self>, request: &SimRequest, path: &str) -> SimResponse {
        let body: Map<String, Value> = match request.json::<Value>() {
            Ok(Value::Object(map)) => map,
            Ok(_) => return error(400, path, "request body must be a JSON object"),
            Err(e) => return error(400, path, &e),
        };
        let strings = |key: &str| -> Result<BTreeMap<String, String>, String> {
            match body.get(key) {
                None | Some(Value::Null) => Ok(BTreeMap::new()),
                Some(Value::Object(m)) => m
                    .iter()
                    .map(|(k, v)| match v {
                        Value::String(s) => Ok((k.clone(), s.clone())),
                        _ => Err(format!("{key}.{k} must be a string")),
                    })
                    .collect(),
                Some(_) => Err(format!("{key} must be an object")),
            }
        };
        let (labels, env) = match (strings("labels"), strings("env")) {
            (Ok(l), Ok(e)) => (l, e),
            (Err(e), _) | (_, Err(e)) => return error(400, path, &e),
        };
        let has_resources = ["cpu", "gpu", "memory", "disk", "gpuType"]
            .iter()
            .any(|k| body.get(*k).is_some_and(|v| !v.is_null()));
        let snapshot = body.get("snapshot").and_then(Value::as_str);
        if snapshot.is_some() && has_resources {
            return error(
                400,
                path,
                "Cannot specify Sandbox resources when using a snapshot",
            );
        }
        if snapshot.is_some() && body.get("buildInfo").is_some_and(|v| !v.is_null()) {
            return error(400, path, "Cannot specify both snapshot and buildInfo");
        }
        for key in [
            "autoStopInterval",
            "autoPauseInterval",
            "autoArchiveInterval",
            "ttlMinutes",
        ] {
            if body.get(key).and_then(Value::as_i64).is_some_and(|n| n < 0) {
                return error(400, path, &format!("{key} must not be less than 0"));
            }
        }
        let int =
            |key: &str, default: i64| body.get(key).and_then(Value::as_i64).unwrap_or(default);
        let backing = match self
            .backing
            .create(&CreateSpec {
                env: env.clone(),
                ..CreateSpec::new()
            })
            .await
        {
            Ok(b) => b,
            Err(e) => return error(500, path, &format!("An unexpected error occurred: {e}")),
        };
        let id = random_uuid();
        let name = body
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .map(str::to_owned)
            .unwrap_or_else(|| id.clone());
        let now = SystemTime::now();
        let mut spec = Map::new();
        spec.insert(
            "snapshot".into(),
            json!(if has_resources {
                None
            } else {
                Some(snapshot.unwrap_or(DEFAULT_SNAPSHOT))
            }),
        );
        for (key, default) in [("cpu", 1), ("gpu", 0), ("memory", 1), ("disk", 3)] {
            spec.insert(key.into(), json!(int(key, default)));
        }
        spec.insert(
            "user".into(),
            json!(
                body.get("user")
                    .and_then(Value::as_str)
                    .unwrap_or("daytona")
            ),
        );
        spec.insert(
            "target".into(),
            json!(body.get("target").and_then(Value::as_str).unwrap_or("us")),
        );
        spec.insert(
            "public".into(),
            json!(body.get("public").and_then(Value::as_bool).unwrap_or(false)),
        );
        spec.insert(
            "networkBlockAll".into(),
            json!(
                body.get("networkBlockAll")
                    .and_then(Value::as_bool)
                    .unwrap_or(false)
            ),
        );
        for key in ["networkAllowList", "domainAllowList", "gpuType"] {
            spec.insert(key.into(), body.get(key).cloned().unwrap_or(Value::Null));
        }
        spec.insert(
            "volumes".into(),
            body.get("volumes").cloned().unwrap_or(json!([])),
        );
        let ttl = int("ttlMinutes", 0);
        let mut record = Record::new(id, name, spec, labels, env, backing);
        record.auto_stop = int("autoStopInterval", 15);
        record.auto_pause = int("autoPauseInterval", 0);
        record.auto_archive = int("autoArchiveInterval", 10080);
        record.auto_delete = int("autoDeleteInterval", -1);
        record.auto_destroy_at = (ttl > 0).then(|| now + Duration::from_secs(ttl as u64 * 60));
        let transition = self.config.transition;
        let answer = match self.insert(record, path) {
            Ok(dto) => dto,
            Err(e) => return *e,
        };
        // The API waits (up to 30 s) for the sandbox to start and answers with what it had
        // before the wait.
        tokio::time::sleep(transition.min(SERVER_WAIT)).await;
        json_answer(200, &answer)
    }

    fn list(&self, request: &SimRequest, path: &str) -> SimResponse {
        let limit = match request.query_param("limit").map(|l| l.parse::<f64>()) {
            None => 100,
            Some(Ok(n)) if (1.0..=200.0).contains(&n) => n as usize,
            Some(_) => {
                return error(
                    400,
                    path,
                    "limit must not be less than 1, limit must not be greater than 200",
                );
            }
        };
        let labels: Option<BTreeMap<String, String>> = match request.query_param("labels") {
            None => None,
            Some(text) => match serde_json::from_str(&text) {
                Ok(map) => Some(map),
                Err(_) => return error(400, path, "labels must be a JSON object of strings"),
            },
        };
        let after: u64 = match request.query_param("cursor") {
            None => 0,
            Some(c) => match u64::from_str_radix(&c, 16) {
                Ok(n) => n,
                Err(_) => return error(400, path, "Invalid cursor"),
            },
        };
        let states = request.query_all("states");
        let snapshots = request.query_all("snapshots");
        let regions = request.query_all("regionIds");
        let prefix = |key: &str| request.query_param(key).map(|p| p.to_lowercase());
        let (id_prefix, name_prefix) = (prefix("id"), prefix("name"));
        let public = request.query_param("isPublic").map(|v| v == "true");
        let all = self.settled();
        let mut matching: Vec<&Record> = all
            .values()
            .filter(|r| r.seq > after)
            .filter(|r| r.desired != "destroyed")
            .filter(|r| {
                labels
                    .as_ref()
                    .is_none_or(|want| want.iter().all(|(k, v)| r.labels.get(k) == Some(v)))
            })
            .filter(|r| states.is_empty() || states.iter().any(|s| s == r.state))
            .filter(|r| {
                snapshots.is_empty()
                    || snapshots
                        .iter()
                        .any(|s| Some(s.as_str()) == r.spec["snapshot"].as_str())
            })
            .filter(|r| {
                regions.is_empty()
                    || regions
                        .iter()
                        .any(|s| Some(s.as_str()) == r.spec["target"].as_str())
            })
            .filter(|r| {
                id_prefix
                    .as_ref()
                    .is_none_or(|p| r.id.to_lowercase().starts_with(p))
            })
            .filter(|r| {
                name_prefix
                    .as_ref()
                    .is_none_or(|p| r.name.to_lowercase().starts_with(p))
            })
            .filter(|r| public.is_none_or(|p| r.spec["public"] == p))
            .collect();
        matching.sort_by_key(|r| r.seq);
        let limit = request.page_size(limit);
        let more = matching.len() > limit;
        matching.truncate(limit);
        let next = more.then(|| format!("{:x}", matching.last().map(|r| r.seq).unwrap_or(0)));
        let items: Vec<Value> = matching.iter().map(|r| self.dto(r, true)).collect();
        json_answer(200, &json!({ "items": items, "nextCursor": next }))
    }

    fn get(&self, id: &str, path: &str) -> SimResponse {
        self.with(id, |r| json_answer(200, &self.dto(r, false)))
            .unwrap_or_else(|| missing(id, path))
    }

    fn delete(&self, id: &str, path: &str) -> SimResponse {
        let transition = self.config.transition;
        self.with(id, |r| {
            if r.in_transition() {
                return conflict(path);
            }
            kill_processes(&self.rt, r);
            destroy_backing(&self.rt, r.backing.clone());
            let millis = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| d.as_millis())
                .unwrap_or(0);
            r.name = format!("DESTROYED_{}_{millis}", r.name);
            r.set_state("destroying", "destroyed", Some(("destroyed", transition)));
            json_answer(200, &self.dto(r, false))
        })
        .unwrap_or_else(|| missing(id, path))
    }

    async fn start(&self, id: &str, path: &str) -> SimResponse {
        let transition = self.config.transition;
        let answer = self.with(id, |r| {
            // Start is allowed while archiving (PROTOCOL.md §1), which it cuts short.
            if r.in_transition() && r.state != "archiving" {
                return Err(Box::new(conflict(path)));
            }
            let (via, wait) = match r.state {
                "started" => return Ok((self.dto(r, false), false)),
                "stopped" | "archiving" => ("starting", true),
                "archived" => ("restoring", false),
                "paused" => {
                    let backing = r.backing.clone();
                    tokio::spawn(async move { backing.resume().await });
                    ("resuming", true)
                }
                _ => return Err(Box::new(error(400, path, "Sandbox is not in valid state"))),
            };
            r.preview_token = random_token(32);
            r.touch();
            r.set_state(via, "started", Some(("started", transition)));
            Ok((self.dto(r, false), wait))
        });
        match answer {
            None => missing(id, path),
            Some(Err(e)) => *e,
            Some(Ok((dto, wait))) => {
                if wait {
                    tokio::time::sleep(transition.min(SERVER_WAIT)).await;
                }
                json_answer(200, &dto)
            }
        }
    }

    fn stop(&self, id: &str, path: &str) -> SimResponse {
        let transition = self.config.transition;
        self.with(id, |r| {
            if r.in_transition() {
                return conflict(path);
            }
            if !matches!(r.state, "started" | "paused") {
                return error(400, path, "Sandbox is not in a stoppable state");
            }
            if r.state == "paused" {
                let backing = r.backing.clone();
                tokio::spawn(async move { backing.resume().await });
            }
            kill_processes(&self.rt, r);
            r.set_state("stopping", "stopped", Some(("stopped", transition)));
            json_answer(200, &self.dto(r, false))
        })
        .unwrap_or_else(|| missing(id, path))
    }

    fn pause(&self, id: &str, path: &str) -> SimResponse {
        let transition = self.config.transition;
        self.with(id, |r| {
            if r.in_transition() {
                return conflict(path);
            }
            if r.state != "started" {
                return error(400, path, "Sandbox must be in started state to pause");
            }
            let backing = r.backing.clone();
            tokio::spawn(async move { backing.pause().await });
            r.set_state("pausing", "paused", Some(("paused", transition)));
            json_answer(200, &self.dto(r, false))
        })
        .unwrap_or_else(|| missing(id, path))
    }

    fn archive(&self, id: &str, path: &str) -> SimResponse {
        let transition = self.config.transition;
        self.with(id, |r| {
            if r.in_transition() {
                return conflict(path);
            }
            if r.state != "stopped" {
                return error(400, path, "Sandbox is not stopped");
            }
            if r.auto_delete == 0 {
                return error(400, path, "Ephemeral sandboxes cannot be archived");
            }
            r.set_state("archiving", "archived", Some(("archived", transition)));
            json_answer(200, &self.dto(r, false))
        })
        .unwrap_or_else(|| missing(id, path))
    }

    async fn fork(self: &Arc<Self>, id: &str, request: &SimRequest, path: &str) -> SimResponse {
        let name = request
            .json::<Value>()
            .ok()
            .and_then(|b| b.get("name").and_then(Value::as_str).map(str::to_owned));
        let source = self.with(id, |r| {
            if r.in_transition() {
                return Err(Box::new(conflict(path)));
            }
            if r.state != "started" {
                return Err(Box::new(error(
                    400,
                    path,
                    "Sandbox must be started to be forked",
                )));
            }
            Ok((
                r.backing.dir().to_owned(),
                r.env.clone(),
                r.labels.clone(),
                r.spec.clone(),
                r.name.clone(),
            ))
        });
        let (dir, env, labels, spec, source_name) = match source {
            None => return missing(id, path),
            Some(Err(e)) => return *e,
            Some(Ok(s)) => s,
        };
        let backing = match self
            .backing
            .create(&CreateSpec {
                env: env.clone(),
                ..CreateSpec::new()
            })
            .await
        {
            Ok(b) => b,
            Err(e) => return error(500, path, &format!("An unexpected error occurred: {e}")),
        };
        let target = backing.dir().to_owned();
        let copied = tokio::task::spawn_blocking(move || copy_tree(&dir, &target)).await;
        if !matches!(copied, Ok(Ok(()))) {
            destroy_backing(&self.rt, backing);
            return error(500, path, "An unexpected error occurred.");
        }
        let name = name.unwrap_or_else(|| format!("{source_name}-fork-{}", random_hex(6)));
        match self.insert(
            Record::new(random_uuid(), name, spec, labels, env, backing),
            path,
        ) {
            Ok(dto) => json_answer(200, &dto),
            Err(e) => *e,
        }
    }

    fn snapshot(&self, id: &str, request: &SimRequest, path: &str) -> SimResponse {
        let name = match request.json::<Value>() {
            Ok(b) => match b.get("name").and_then(Value::as_str) {
                Some(n) if !n.trim().is_empty() => n.to_owned(),
                _ => return error(400, path, "name should not be empty"),
            },
            Err(e) => return error(400, path, &e),
        };
        let transition = self.config.transition;
        self.with(id, |r| {
            if r.in_transition() {
                return conflict(path);
            }
            if r.state != "started" {
                return error(400, path, "Sandbox must be started to create a snapshot");
            }
            let mut snapshots = lock(&self.snapshots);
            if snapshots.contains(&name) {
                return error(
                    409,
                    path,
                    &format!("Snapshot with name \"{name}\" already exists"),
                );
            }
            snapshots.push(name);
            r.set_state("snapshotting", "started", Some(("started", transition)));
            json_answer(200, &self.dto(r, false))
        })
        .unwrap_or_else(|| missing(id, path))
    }

    /// Adds a new sandbox (`creating`, started after the transition time) and returns its
    /// DTO; 409 when its name is taken.
    fn insert(&self, mut record: Record, path: &str) -> Result<Value, Box<SimResponse>> {
        record.set_state(
            "creating",
            "started",
            Some(("started", self.config.transition)),
        );
        let mut all = self.settled();
        if all.values().any(|r| r.name == record.name) {
            drop(all);
            let message = format!("Sandbox with name {} already exists", record.name);
            destroy_backing(&self.rt, record.backing);
            return Err(Box::new(error(409, path, &message)));
        }
        let mut seq = lock(&self.next_seq);
        *seq += 1;
        record.seq = *seq;
        let dto = self.dto(&record, false);
        all.insert(record.id.clone(), record);
        Ok(dto)
    }

    /// The `Sandbox` DTO (or, for lists, `SandboxListItem`).
    pub(super) fn dto(&self, r: &Record, list_item: bool) -> Value {
        let time = |t: SystemTime| json!(format_rfc3339_millis(t));
        let mut out = Map::new();
        out.insert("id".into(), json!(r.id));
        out.insert("organizationId".into(), json!(ORGANIZATION_ID));
        out.insert("name".into(), json!(r.name));
        for (k, v) in &r.spec {
            if !(list_item && k == "volumes") {
                out.insert(k.clone(), v.clone());
            }
        }
        if !list_item {
            out.insert("env".into(), json!(r.env));
        }
        out.insert("labels".into(), json!(r.labels));
        out.insert("state".into(), json!(r.state));
        out.insert("desiredState".into(), json!(r.desired));
        out.insert("errorReason".into(), Value::Null);
        out.insert("recoverable".into(), json!(false));
        out.insert("backupState".into(), json!("None"));
        out.insert("autoStopInterval".into(), json!(r.auto_stop));
        out.insert("autoPauseInterval".into(), json!(r.auto_pause));
        out.insert("autoArchiveInterval".into(), json!(r.auto_archive));
        out.insert("autoDeleteInterval".into(), json!(r.auto_delete));
        out.insert(
            "autoDestroyAt".into(),
            r.auto_destroy_at.map(time).unwrap_or(Value::Null),
        );
        out.insert("sandboxClass".into(), json!("container"));
        out.insert("createdAt".into(), time(r.created_at));
        out.insert("updatedAt".into(), time(r.updated_at));
        out.insert("lastActivityAt".into(), time(r.last_activity));
        let daemon = if r.state == "creating" {
            Value::Null
        } else {
            json!("0.205.1")
        };
        out.insert("daemonVersion".into(), daemon);
        out.insert("runnerId".into(), json!("runner-sim-1"));
        out.insert(
            "toolboxProxyUrl".into(),
            json!(format!("{}/toolbox", self.url())),
        );
        out.insert("kvm".into(), json!(false));
        Value::Object(out)
    }
}

/// The throttlers a request of `operation` counts against.
fn throttlers_of(operation: &str) -> Vec<&'static str> {
    match operation {
        "create" | "fork" => vec!["authenticated", "sandbox-create"],
        "start" | "stop" | "pause" | "archive" | "destroy" => {
            vec!["authenticated", "sandbox-lifecycle"]
        }
        _ => vec!["authenticated"],
    }
}

fn find<'a>(all: &'a mut BTreeMap<String, Record>, id_or_name: &str) -> Option<&'a mut Record> {
    if all.contains_key(id_or_name) {
        return all.get_mut(id_or_name);
    }
    all.values_mut().find(|r| r.name == id_or_name)
}

pub(super) fn conflict(path: &str) -> SimResponse {
    error(409, path, "Sandbox state change in progress")
}

pub(super) fn missing(id: &str, path: &str) -> SimResponse {
    error(
        404,
        path,
        &format!("Sandbox with ID or name {id} not found"),
    )
}
