//! The control plane (`https://api.e2b.app`): sandboxes, their states and time to live,
//! listing with metadata filters and pagination, forks, snapshots and metrics.

// A refusal is its whole HTTP answer, made once per request: boxing it buys nothing.
#![allow(clippy::result_large_err)]

use super::{
    BASE_TEMPLATE_ID, ENVD_VERSION, Life, Phase, Sandbox, State, lock, process, random_from,
};
use crate::{SimRequest, SimResponse};
use http::Method;
use sandbox_sdk_core::CreateSpec;
use sandbox_sdk_core::time::format_rfc3339;
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// The deprecated `clientID` every sandbox carries.
const CLIENT_ID: &str = "6532622b";
/// The longest timeout accepted (24 h, the Pro tier's limit).
const MAX_TIMEOUT_SECS: u64 = 86_400;

/// The control plane's error: `{"code":N,"message":…}`, keys alphabetical, no newline.
pub(crate) fn error(status: u16, message: &str) -> SimResponse {
    body(status, &json!({"code": status, "message": message}))
}

fn body(status: u16, value: &Value) -> SimResponse {
    SimResponse::bytes(
        status,
        Some("application/json; charset=utf-8"),
        serde_json::to_vec(value).unwrap_or_default().into(),
    )
}

fn not_found(id: &str) -> SimResponse {
    error(
        404,
        &format!("Sandbox \"{id}\" doesn't exist or you don't have access to it"),
    )
}

fn too_many(state: &State) -> SimResponse {
    error(
        429,
        &format!(
            "you have reached the maximum number of concurrent E2B sandboxes ({}). If you need \
             more, please contact us at 'https://e2b.dev/docs/getting-help'",
            state.max_running
        ),
    )
}

/// The operation name of a control-plane request.
pub(crate) fn operation(request: &SimRequest) -> &'static str {
    let segments = request.segments();
    let s: Vec<&str> = segments.iter().map(String::as_str).collect();
    match (request.method.as_str(), s.as_slice()) {
        ("POST", ["v2", "sandboxes"]) => "create",
        ("GET", ["v2", "sandboxes"]) => "list",
        ("POST", ["v2", "sandboxes", _, "connect"]) | ("POST", ["sandboxes", _, "connect"]) => {
            "connect"
        }
        ("GET", ["sandboxes", "metrics"]) | ("GET", ["sandboxes", _, "metrics"]) => "metrics",
        ("GET", ["sandboxes", _]) => "get",
        ("DELETE", ["sandboxes", _]) => "destroy",
        ("POST", ["sandboxes", _, "pause"]) => "pause",
        ("POST", ["sandboxes", _, "resume"]) => "resume",
        ("POST", ["sandboxes", _, "timeout"]) => "set_timeout",
        ("POST", ["sandboxes", _, "refreshes"]) => "refresh",
        ("POST", ["sandboxes", _, "fork"]) => "fork",
        ("POST", ["sandboxes", _, "snapshots"]) | ("GET", ["snapshots"]) => "snapshot",
        ("DELETE", ["templates", _]) => "snapshot",
        _ => "other",
    }
}

/// Admits a control-plane request from its head: the key (`/health` needs none), and JSON
/// bodies only.
pub(crate) fn admit(state: &State, request: &SimRequest) -> Result<usize, SimResponse> {
    if request.method == Method::GET && request.path == "/health" {
        return Ok(crate::MAX_JSON_BODY);
    }
    match request.header("x-api-key") {
        None => Err(error(
            401,
            "Missing API key, please provide one in the X-API-Key header",
        )),
        Some(key) if !key.starts_with("e2b_") => Err(error(401, "Invalid API key format")),
        Some(key) if key != state.api_key => Err(error(401, "Invalid API key")),
        Some(_) => Ok(crate::MAX_JSON_BODY),
    }
}

/// Serves an admitted request ([`admit`] checked its key).
pub(crate) async fn handle(state: Arc<State>, request: SimRequest) -> SimResponse {
    if request.method == Method::GET && request.path == "/health" {
        return body(200, &json!({"message": "Health check successful"}));
    }
    let segments = request.segments();
    let s: Vec<&str> = segments.iter().map(String::as_str).collect();
    match (request.method.as_str(), s.as_slice()) {
        ("POST", ["v2", "sandboxes"]) => create(&state, &request).await,
        ("GET", ["v2", "sandboxes"]) => list(&state, &request),
        ("POST", ["v2", "sandboxes", id, "connect"]) => connect(&state, id, &request, false).await,
        ("POST", ["sandboxes", id, "connect"]) => connect(&state, id, &request, true).await,
        ("GET", ["sandboxes", "metrics"]) => metrics_many(&state, &request),
        ("GET", ["sandboxes", id]) => with(&state, id, |sb| body(200, &detail(&sb))),
        ("DELETE", ["sandboxes", id]) => match state.kill(id).await {
            true => SimResponse::empty(204),
            false => not_found(id),
        },
        ("POST", ["sandboxes", id, "pause"]) => pause(&state, id, &request).await,
        ("POST", ["sandboxes", id, "resume"]) => resume(&state, id, &request).await,
        ("POST", ["sandboxes", id, "timeout"]) => set_timeout(&state, id, &request, true),
        ("POST", ["sandboxes", id, "refreshes"]) => set_timeout(&state, id, &request, false),
        ("POST", ["sandboxes", id, "fork"]) => fork(&state, id, &request).await,
        ("POST", ["sandboxes", id, "snapshots"]) => snapshot(&state, id, &request).await,
        ("GET", ["snapshots"]) => list_snapshots(&state, &request),
        ("DELETE", ["templates", id]) => delete_snapshot(&state, id),
        ("GET", ["sandboxes", id, "metrics"]) => {
            with(&state, id, |sb| body(200, &json!([metric(&sb)])))
        }
        ("PUT", ["sandboxes", id, "network"]) => match request.json::<Value>() {
            Ok(network) => with(&state, id, |sb| {
                *lock(&sb.network) = Some(network.clone());
                SimResponse::empty(204)
            }),
            Err(e) => error(400, &e),
        },
        _ => error(
            404,
            &format!("no route for {} {}", request.method, request.path),
        ),
    }
}

fn with(state: &State, id: &str, f: impl FnOnce(Arc<Sandbox>) -> SimResponse) -> SimResponse {
    match state.get(id) {
        Some(sb) => f(sb),
        None => not_found(id),
    }
}

fn state_name(phase: Phase) -> &'static str {
    match phase {
        Phase::Running | Phase::Pausing => "running",
        Phase::Paused | Phase::Resuming => "paused",
    }
}

/// The `Sandbox` answer of create and connect (optional fields left out).
fn created(sb: &Sandbox) -> Value {
    let mut v = json!({
        "clientID": CLIENT_ID,
        "envdAccessToken": sb.envd_token,
        "envdVersion": ENVD_VERSION,
        "sandboxID": sb.id,
        "templateID": sb.template_id,
    });
    if let Some(alias) = &sb.alias {
        v["alias"] = json!(alias);
    }
    if let Some(token) = &sb.traffic_token {
        v["trafficAccessToken"] = json!(token);
    }
    v
}

fn listed(sb: &Sandbox) -> Value {
    let life = lock(&sb.life);
    let mut v = json!({
        "templateID": sb.template_id,
        "sandboxID": sb.id,
        "clientID": CLIENT_ID,
        "startedAt": format_rfc3339(sb.started_at),
        "endAt": format_rfc3339(life.end_at),
        "cpuCount": 2,
        "memoryMB": 512,
        "diskSizeMB": 22_000,
        "metadata": sb.metadata,
        "state": state_name(life.phase),
        "envdVersion": ENVD_VERSION,
        "volumeMounts": [],
    });
    if let Some(alias) = &sb.alias {
        v["alias"] = json!(alias);
    }
    v
}

fn detail(sb: &Sandbox) -> Value {
    let mut v = listed(sb);
    v["envdAccessToken"] = json!(sb.envd_token);
    v["lifecycle"] = json!({
        "autoResume": sb.auto_resume,
        "onTimeout": if sb.auto_pause { "pause" } else { "kill" },
    });
    if let Some(allow) = sb.allow_internet {
        v["allowInternetAccess"] = json!(allow);
    }
    if let Some(network) = lock(&sb.network).clone() {
        v["network"] = network;
    }
    v
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct NewSandbox {
    #[serde(rename = "templateID")]
    template_id: Option<String>,
    timeout: Option<u64>,
    #[serde(default)]
    auto_pause: bool,
    auto_resume: Option<AutoResume>,
    #[serde(default)]
    env_vars: BTreeMap<String, String>,
    #[serde(default)]
    metadata: BTreeMap<String, String>,
    #[serde(rename = "allow_internet_access")]
    allow_internet_access: Option<bool>,
    network: Option<Value>,
}

#[derive(Deserialize)]
struct AutoResume {
    #[serde(default)]
    enabled: bool,
}

fn valid_key(key: &str) -> bool {
    (1..=255).contains(&key.len())
        && key
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

async fn create(state: &Arc<State>, request: &SimRequest) -> SimResponse {
    let new: NewSandbox = match request.json() {
        Ok(n) => n,
        Err(e) => return error(400, &e),
    };
    let Some(template) = new.template_id.clone().filter(|t| !t.is_empty()) else {
        return error(400, "templateID is required");
    };
    let timeout = new.timeout.unwrap_or(300);
    if timeout > MAX_TIMEOUT_SECS {
        return error(
            400,
            &format!("timeout must be at most {MAX_TIMEOUT_SECS} seconds, got {timeout}"),
        );
    }
    let key = request.header("idempotency-key").map(str::to_owned);
    if let Some(k) = &key
        && !valid_key(k)
    {
        return error(
            400,
            "Idempotency-Key must be 1-255 characters of lowercase letters, digits and '-'",
        );
    }
    // A keyed create holds the key table, so concurrent creates with one key make one sandbox.
    let mut keys = match &key {
        Some(_) => Some(state.keys.lock().await),
        None => None,
    };
    if let (Some(k), Some(table)) = (&key, &keys)
        && let Some(sb) = table.get(k).and_then(|id| state.get(id))
    {
        return body(201, &created(&sb));
    }
    if !state.may_run_another() {
        return too_many(state);
    }
    let (template_id, alias, files) = match resolve_template(state, &template) {
        Some(t) => t,
        None => return error(404, &format!("template '{template}' not found")),
    };
    let sb = match make_sandbox(state, &new, timeout, template_id, alias, files.as_deref()).await {
        Ok(sb) => sb,
        Err(e) => return error(500, &format!("failed to create sandbox: {e}")),
    };
    if let (Some(k), Some(table)) = (key, keys.as_mut()) {
        table.insert(k, sb.id.clone());
    }
    body(201, &created(&sb))
}

/// (template id, alias, files to copy in) of a template name, id or snapshot.
fn resolve_template(
    state: &State,
    name: &str,
) -> Option<(String, Option<String>, Option<std::path::PathBuf>)> {
    if name == "base" || name == BASE_TEMPLATE_ID {
        return Some((BASE_TEMPLATE_ID.into(), Some("base".into()), None));
    }
    if name == super::interpreter::TEMPLATE || name == super::INTERPRETER_TEMPLATE_ID {
        return Some((
            super::INTERPRETER_TEMPLATE_ID.into(),
            Some(super::interpreter::TEMPLATE.into()),
            None,
        ));
    }
    let bare = name.strip_suffix(":default").unwrap_or(name);
    let snapshots = lock(&state.snapshots);
    snapshots
        .iter()
        .find(|(id, s)| {
            id.as_str() == bare || s.name.as_deref() == Some(bare.trim_start_matches("sim/"))
        })
        .map(|(id, s)| (id.clone(), s.name.clone(), Some(s.dir.clone())))
}

async fn make_sandbox(
    state: &Arc<State>,
    new: &NewSandbox,
    timeout: u64,
    template_id: String,
    alias: Option<String>,
    files: Option<&Path>,
) -> sandbox_sdk_core::Result<Arc<Sandbox>> {
    let mut spec = CreateSpec::new();
    spec.env = new.env_vars.clone();
    spec.env.insert("E2B_SANDBOX".into(), "true".into());
    let local = state.backing.create(&spec).await?;
    let id = format!(
        "i{}",
        random_from(b"abcdefghijklmnopqrstuvwxyz0123456789", 20)
    );
    if let Some(from) = files {
        let to = local.dir().to_owned();
        let from = from.to_owned();
        let _ = tokio::task::spawn_blocking(move || copy_dir(&from, &to)).await;
    }
    let now = SystemTime::now();
    let sb = Arc::new(Sandbox {
        id: id.clone(),
        template_id,
        alias,
        envd_token: random_from(b"abcdefghijklmnopqrstuvwxyz0123456789", 32),
        traffic_token: new
            .network
            .as_ref()
            .is_some_and(|n| n["allowPublicTraffic"] == json!(false))
            .then(|| random_from(b"abcdefghijklmnopqrstuvwxyz0123456789", 32)),
        metadata: new.metadata.clone(),
        env: new.env_vars.clone(),
        started_at: now,
        seq: state.seq.fetch_add(1, std::sync::atomic::Ordering::SeqCst),
        timeout: Duration::from_secs(timeout),
        auto_pause: new.auto_pause,
        auto_resume: new.auto_resume.as_ref().is_some_and(|a| a.enabled),
        allow_internet: new.allow_internet_access,
        network: Mutex::new(new.network.clone()),
        disk: crate::disk::Disk::new(local.dir(), super::HOME),
        local,
        life: Mutex::new(Life {
            phase: Phase::Running,
            end_at: now + Duration::from_secs(timeout),
        }),
        processes: Mutex::new(BTreeMap::new()),
        file_meta: Mutex::new(HashMap::new()),
        watchers: Mutex::new(HashMap::new()),
        interpreter: Default::default(),
    });
    lock(&state.sandboxes).insert(id, sb.clone());
    Ok(sb)
}

fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        let kind = entry.file_type()?;
        if kind.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else if kind.is_symlink() {
            let _ = std::os::unix::fs::symlink(std::fs::read_link(entry.path())?, &target);
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// Waits while a sandbox is pausing or resuming.
async fn settle(sb: &Sandbox) {
    while matches!(sb.phase(), Phase::Pausing | Phase::Resuming) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Pauses a running sandbox (taking the transition time); false when it was not running.
pub(crate) async fn pause_now(sb: &Sandbox, memory: bool, transition: Duration) -> bool {
    {
        let mut life = lock(&sb.life);
        if life.phase != Phase::Running {
            return false;
        }
        life.phase = Phase::Pausing;
    }
    if !transition.is_zero() {
        tokio::time::sleep(transition).await;
    }
    if !memory {
        process::end_all(sb);
    }
    let _ = sandbox_sdk_core::Sandbox::pause(&sb.local).await;
    lock(&sb.life).phase = Phase::Paused;
    true
}

/// Resumes a paused sandbox with a time to live of `timeout` (its create timeout when none);
/// the running cap's 429 when it is reached.
pub(crate) async fn resume_now(
    state: &State,
    sb: &Sandbox,
    timeout: Option<u64>,
) -> Result<(), Box<SimResponse>> {
    if !state.may_run_another() {
        return Err(Box::new(too_many(state)));
    }
    {
        let mut life = lock(&sb.life);
        if life.phase != Phase::Paused {
            return Ok(());
        }
        life.phase = Phase::Resuming;
    }
    if !state.transition.is_zero() {
        tokio::time::sleep(state.transition).await;
    }
    let _ = sandbox_sdk_core::Sandbox::resume(&sb.local).await;
    let ttl = timeout.map(Duration::from_secs).unwrap_or(sb.timeout);
    let mut life = lock(&sb.life);
    life.phase = Phase::Running;
    life.end_at = SystemTime::now() + ttl;
    Ok(())
}

#[derive(Deserialize, Default)]
struct TimeoutBody {
    timeout: Option<u64>,
    duration: Option<u64>,
    memory: Option<bool>,
}

fn optional_body(request: &SimRequest) -> Result<TimeoutBody, String> {
    if request.body.iter().all(u8::is_ascii_whitespace) {
        return Ok(TimeoutBody::default());
    }
    request.json()
}

async fn connect(state: &State, id: &str, request: &SimRequest, v1: bool) -> SimResponse {
    let b = match optional_body(request) {
        Ok(b) => b,
        Err(e) => return error(400, &e),
    };
    if v1 && b.timeout.is_none() {
        return error(400, "timeout is required");
    }
    let Some(sb) = state.get(id) else {
        return not_found(id);
    };
    settle(&sb).await;
    if sb.phase() == Phase::Paused {
        if let Err(answer) = resume_now(state, &sb, b.timeout).await {
            return *answer;
        }
        return body(201, &created(&sb));
    }
    if let Some(secs) = b.timeout {
        let mut life = lock(&sb.life);
        life.end_at = life
            .end_at
            .max(SystemTime::now() + Duration::from_secs(secs));
    }
    body(200, &created(&sb))
}

async fn pause(state: &State, id: &str, request: &SimRequest) -> SimResponse {
    let b = match optional_body(request) {
        Ok(b) => b,
        Err(e) => return error(400, &e),
    };
    let Some(sb) = state.get(id) else {
        return not_found(id);
    };
    settle(&sb).await;
    if pause_now(&sb, b.memory.unwrap_or(true), state.transition).await {
        SimResponse::empty(204)
    } else {
        error(409, &format!("Sandbox {id} is already paused"))
    }
}

async fn resume(state: &State, id: &str, request: &SimRequest) -> SimResponse {
    let b = match optional_body(request) {
        Ok(b) => b,
        Err(e) => return error(400, &e),
    };
    let Some(sb) = state.get(id) else {
        return not_found(id);
    };
    settle(&sb).await;
    if sb.phase() != Phase::Paused {
        return error(409, &format!("Sandbox {id} is already running"));
    }
    match resume_now(state, &sb, Some(b.timeout.unwrap_or(15))).await {
        Ok(()) => body(201, &created(&sb)),
        Err(answer) => *answer,
    }
}

/// `timeout` sets the end to now + timeout; `refreshes` only extends it.
fn set_timeout(state: &State, id: &str, request: &SimRequest, exact: bool) -> SimResponse {
    let b = match optional_body(request) {
        Ok(b) => b,
        Err(e) => return error(400, &e),
    };
    let secs = match (exact, b.timeout, b.duration) {
        (true, Some(t), _) => t,
        (true, None, _) => return error(400, "timeout is required"),
        (false, _, Some(d)) if d > 3600 => return error(400, "duration must be at most 3600"),
        (false, _, d) => d.unwrap_or(0),
    };
    if secs > MAX_TIMEOUT_SECS {
        return error(
            400,
            &format!("timeout must be at most {MAX_TIMEOUT_SECS} seconds"),
        );
    }
    // Both act on running sandboxes only, as the orchestrator's cache holds only those.
    let Some(sb) = state.get(id).filter(|sb| sb.phase() == Phase::Running) else {
        return not_found(id);
    };
    let end = SystemTime::now() + Duration::from_secs(secs);
    let mut life = lock(&sb.life);
    life.end_at = if exact { end } else { life.end_at.max(end) };
    SimResponse::empty(204)
}

fn list(state: &State, request: &SimRequest) -> SimResponse {
    let mut wanted = Vec::new();
    for value in request.query_all("state") {
        for s in value.split(',').filter(|s| !s.is_empty()) {
            match s {
                "running" | "paused" => wanted.push(s.to_owned()),
                other => return error(400, &format!("invalid state: {other}")),
            }
        }
    }
    let mut filter = Vec::new();
    if let Some(query) = request.query_param("metadata") {
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            filter.push((
                crate::decode(&crate::decode(k)),
                crate::decode(&crate::decode(v)),
            ));
        }
    }
    let desc = match request.query_param("order").as_deref() {
        None | Some("desc") => true,
        Some("asc") => false,
        Some(other) => return error(400, &format!("invalid order: {other}")),
    };
    let limit = match request.query_param("limit").map(|l| l.parse::<usize>()) {
        None => 100,
        Some(Ok(l)) if (1..=100).contains(&l) => l,
        Some(_) => return error(400, "limit must be between 1 and 100"),
    };
    let after = match request.query_param("nextToken") {
        None => None,
        Some(t) => match t.strip_prefix("seq-").and_then(|n| n.parse::<u64>().ok()) {
            Some(n) => Some(n),
            None => return error(400, "invalid next token"),
        },
    };
    let started_after = request
        .query_param("startedAfter")
        .and_then(|t| sandbox_sdk_core::time::parse_rfc3339(&t));
    let template = request.query_param("template");
    let mut found: Vec<Arc<Sandbox>> = lock(&state.sandboxes)
        .values()
        .filter(|sb| {
            (wanted.is_empty() || wanted.iter().any(|w| w == state_name(sb.phase())))
                && filter
                    .iter()
                    .all(|(k, v)| sb.metadata.get(k).is_some_and(|m| m == v))
                && started_after.is_none_or(|t| sb.started_at >= t)
                && template
                    .as_deref()
                    .is_none_or(|t| sb.template_id == t || sb.alias.as_deref() == Some(t))
        })
        .cloned()
        .collect();
    let running = found
        .iter()
        .filter(|sb| state_name(sb.phase()) == "running")
        .count();
    found.sort_by_key(|sb| sb.seq);
    if desc {
        found.reverse();
    }
    let page: Vec<&Arc<Sandbox>> = found
        .iter()
        .filter(|sb| after.is_none_or(|a| if desc { sb.seq < a } else { sb.seq > a }))
        .collect();
    let limit = request.page_size(limit);
    let more = page.len() > limit;
    let page = &page[..page.len().min(limit)];
    let items: Vec<Value> = page.iter().map(|sb| listed(sb)).collect();
    let mut answer = body(200, &json!(items));
    if more && let Some(last) = page.last() {
        answer = answer.header("x-next-token", &format!("seq-{}", last.seq));
    }
    if wanted.is_empty() || wanted.iter().any(|w| w == "running") {
        answer = answer.header("x-total-running", &running.to_string());
    }
    answer
}

async fn fork(state: &Arc<State>, id: &str, request: &SimRequest) -> SimResponse {
    #[derive(Deserialize, Default)]
    struct Fork {
        timeout: Option<u64>,
        count: Option<u32>,
    }
    let b: Fork = if request.body.iter().all(u8::is_ascii_whitespace) {
        Fork::default()
    } else {
        match request.json() {
            Ok(b) => b,
            Err(e) => return error(400, &e),
        }
    };
    let count = b.count.unwrap_or(1);
    if !(1..=100).contains(&count) {
        return error(400, "count must be between 1 and 100");
    }
    let Some(source) = state.get(id) else {
        return not_found(id);
    };
    if source.phase() != Phase::Running {
        return error(409, &format!("Sandbox {id} is not running"));
    }
    let mut results = Vec::new();
    for _ in 0..count {
        if !state.may_run_another() {
            results.push(json!({"error": {"code": 429, "message": "you have reached the maximum number of concurrent E2B sandboxes"}}));
            continue;
        }
        let new = NewSandbox {
            env_vars: source.env.clone(),
            metadata: source.metadata.clone(),
            auto_pause: source.auto_pause,
            network: lock(&source.network).clone(),
            ..NewSandbox::default()
        };
        let made = make_sandbox(
            state,
            &new,
            b.timeout.unwrap_or(15),
            source.template_id.clone(),
            source.alias.clone(),
            Some(source.home()),
        )
        .await;
        results.push(match made {
            Ok(sb) => json!({"sandbox": created(&sb)}),
            Err(e) => json!({"error": {"code": 500, "message": e.to_string()}}),
        });
    }
    body(201, &json!(results))
}

/// A snapshot: its files and its name.
pub(crate) struct Snapshot {
    pub name: Option<String>,
    pub source: String,
    pub dir: std::path::PathBuf,
}

fn snapshot_info(id: &str, s: &Snapshot) -> Value {
    let shown = match &s.name {
        Some(n) => format!("sim/{n}:default"),
        None => format!("{id}:default"),
    };
    json!({"snapshotID": shown, "names": [shown]})
}

async fn snapshot(state: &Arc<State>, id: &str, request: &SimRequest) -> SimResponse {
    #[derive(Deserialize, Default)]
    struct Req {
        name: Option<String>,
    }
    let req: Req = if request.body.iter().all(u8::is_ascii_whitespace) {
        Req::default()
    } else {
        match request.json() {
            Ok(r) => r,
            Err(e) => return error(400, &e),
        }
    };
    let Some(sb) = state.get(id) else {
        return not_found(id);
    };
    let existing = req.name.as_ref().and_then(|n| {
        lock(&state.snapshots)
            .iter()
            .find(|(_, s)| s.name.as_ref() == Some(n))
            .map(|(id, _)| id.clone())
    });
    let snap_id =
        existing.unwrap_or_else(|| random_from(b"abcdefghijklmnopqrstuvwxyz0123456789", 20));
    let dir = state.backing.root().join("snapshots").join(&snap_id);
    let (from, to) = (sb.home().to_owned(), dir.clone());
    let copied = tokio::task::spawn_blocking(move || {
        let _ = std::fs::remove_dir_all(&to);
        copy_dir(&from, &to)
    })
    .await;
    if !matches!(copied, Ok(Ok(()))) {
        return error(500, "failed to snapshot the sandbox's files");
    }
    let snap = Snapshot {
        name: req.name,
        source: id.to_owned(),
        dir,
    };
    let info = snapshot_info(&snap_id, &snap);
    lock(&state.snapshots).insert(snap_id, snap);
    body(201, &info)
}

fn list_snapshots(state: &State, request: &SimRequest) -> SimResponse {
    let source = request.query_param("sandboxID");
    let name = request.query_param("name");
    let items: Vec<Value> = lock(&state.snapshots)
        .iter()
        .filter(|(_, s)| source.as_deref().is_none_or(|id| s.source == id))
        .filter(|(id, s)| {
            name.as_deref()
                .is_none_or(|n| s.name.as_deref() == Some(n) || id.as_str() == n)
        })
        .map(|(id, s)| snapshot_info(id, s))
        .collect();
    body(200, &json!(items))
}

fn delete_snapshot(state: &State, id: &str) -> SimResponse {
    let bare = id.strip_suffix(":default").unwrap_or(id);
    let mut snapshots = lock(&state.snapshots);
    let key = snapshots
        .iter()
        .find(|(k, s)| {
            k.as_str() == bare || s.name.as_deref() == Some(bare.trim_start_matches("sim/"))
        })
        .map(|(k, _)| k.clone());
    match key.and_then(|k| snapshots.remove(&k)) {
        Some(s) => {
            let _ = std::fs::remove_dir_all(&s.dir);
            SimResponse::empty(204)
        }
        None => error(404, &format!("template '{id}' not found")),
    }
}

/// (disk used by the home directory, resident memory of the sandbox's processes), in bytes.
pub(crate) fn usage(sb: &Sandbox) -> (u64, u64) {
    fn size(dir: &Path) -> u64 {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| match e.file_type() {
                Ok(t) if t.is_dir() => size(&e.path()),
                _ => e.metadata().map(|m| m.len()).unwrap_or(0),
            })
            .sum()
    }
    let pids: Vec<u32> = lock(&sb.processes).keys().copied().collect();
    let memory = pids
        .iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/statm")).ok())
        .filter_map(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map(|pages| pages * 4096)
        .sum();
    (size(sb.home()), memory)
}

fn metric(sb: &Sandbox) -> Value {
    let (disk, memory) = usage(sb);
    let now = SystemTime::now();
    json!({
        "timestamp": format_rfc3339(now),
        "timestampUnix": now.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_secs(),
        "cpuCount": 2,
        "cpuUsedPct": 0.0,
        "memUsed": memory,
        "memTotal": 512u64 << 20,
        "memCache": 0,
        "diskUsed": disk,
        "diskTotal": 22_000u64 << 20,
    })
}

fn metrics_many(state: &State, request: &SimRequest) -> SimResponse {
    let Some(ids) = request.query_param("sandbox_ids") else {
        return error(400, "sandbox_ids is required");
    };
    let ids: Vec<&str> = ids.split(',').filter(|s| !s.is_empty()).collect();
    if ids.len() > 100 {
        return error(400, "at most 100 sandbox ids");
    }
    let mut out = serde_json::Map::new();
    for id in ids {
        if let Some(sb) = state.get(id).filter(|sb| sb.phase() == Phase::Running) {
            out.insert(id.to_owned(), metric(&sb));
        }
    }
    body(200, &json!({ "sandboxes": out }))
}
