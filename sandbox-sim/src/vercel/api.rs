//! The REST API: routing, auth, operation names, and the sandbox, session and snapshot
//! endpoints (PROTOCOL.md §2–§5, §10). Commands are in [`super::command`], files in
//! [`super::files`].

// An endpoint's refusal is its whole HTTP answer, made once per request: boxing it buys nothing.
#![allow(clippy::result_large_err)]

use super::command;
use super::files;
use super::output::{Cmd, NDJSON};
use super::state::{
    Cfg, Disk, Sbx, Session, SessionSpec, State, body_object, code_of, error, http_date,
    is_terminal, stopped,
};
use super::{lock, now_ms};
use crate::{Handler, SimRequest, SimResponse};
use base64::Engine as _;
use futures::future::BoxFuture;
use http::Method;
use sandbox_sdk_core::CreateSpec;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// The runtimes `POST /v2/sandboxes` accepts (PROTOCOL.md §4.1).
const RUNTIMES: &[&str] = &["node26", "node24", "node22", "python3.13"];

/// The image a sandbox made without a runtime or image runs (digest-pinned, as answers show it).
const DEFAULT_IMAGE: &str = "vercel/sandbox/universal@sha256:0000000000000000000000000000000000000000000000000000000000000000";

/// The [`Handler`] over the shared state.
pub(crate) struct VercelHandler(pub Arc<State>);

/// Where a request goes.
enum Route {
    Sandboxes(String),
    Sandbox(String),
    Fork(String),
    Sessions,
    Session(String),
    SessionAction(String, String),
    Commands(String),
    Command(String, String),
    CommandAction(String, String, String),
    Fs(String, String),
    Snapshots,
    Snapshot(String),
    NotFound,
}

fn route(request: &SimRequest) -> Route {
    let s = request.segments();
    let s: Vec<&str> = s.iter().map(String::as_str).collect();
    let own = |x: &&str| (*x).to_owned();
    match s.as_slice() {
        [v @ ("v2" | "v3" | "v4"), "sandboxes"] => Route::Sandboxes(own(v)),
        ["v2", "sandboxes", "sessions"] => Route::Sessions,
        ["v2", "sandboxes", "snapshots"] => Route::Snapshots,
        ["v2", "sandboxes", "snapshots", id] => Route::Snapshot(own(id)),
        ["v2", "sandboxes", "sessions", id] => Route::Session(own(id)),
        ["v2", "sandboxes", "sessions", id, "cmd"] => Route::Commands(own(id)),
        ["v2", "sandboxes", "sessions", id, "cmd", cmd] => Route::Command(own(id), own(cmd)),
        ["v2", "sandboxes", "sessions", id, "cmd", cmd, action] => {
            Route::CommandAction(own(id), own(cmd), own(action))
        }
        ["v2", "sandboxes", "sessions", id, "fs", op] => Route::Fs(own(id), own(op)),
        ["v2", "sandboxes", "sessions", id, action] => Route::SessionAction(own(id), own(action)),
        ["v3", "sandboxes", "sessions", id, "snapshot"] => {
            Route::SessionAction(own(id), "snapshot".to_owned())
        }
        ["v2", "sandboxes", name] => Route::Sandbox(own(name)),
        ["v2" | "v3", "sandboxes", name, "fork"] => Route::Fork(own(name)),
        _ => Route::NotFound,
    }
}

fn not_found(what: &str) -> SimResponse {
    error(404, "not_found", what)
}

fn bad(message: &str) -> SimResponse {
    error(400, "bad_request", message)
}

fn no_route() -> SimResponse {
    not_found("The requested API endpoint was not found.")
}

/// The largest body of every route but a file upload: the API's 1 MB body limit (PROTOCOL.md
/// §6.6), under which the official SDK keeps its 512 KiB stdin chunks.
const MAX_API_BODY: usize = 1_000_000;

impl Handler for VercelHandler {
    /// The token, then the team (PROTOCOL.md §2, §13.1), then the body cap: the gzip tar of
    /// `fs/write` up to [`crate::MAX_REQUEST_BODY`], [`MAX_API_BODY`] elsewhere.
    fn admit(&self, head: &SimRequest) -> Result<usize, SimResponse> {
        let settings = &self.0.settings;
        let token = head
            .header("authorization")
            .and_then(|h| h.trim().strip_prefix("Bearer "))
            .map(str::trim);
        let refused = if token != Some(settings.token.as_str()) {
            error(
                401,
                "unauthorized",
                "The request is missing an authentication token or the token is invalid.",
            )
        } else if head.query_param("teamId").as_deref() != Some(settings.team_id.as_str()) {
            error(403, "forbidden", "Not authorized")
        } else if matches!(route(head), Route::Fs(_, op) if op == "write") {
            return Ok(crate::MAX_REQUEST_BODY);
        } else {
            return Ok(MAX_API_BODY);
        };
        Err(refused.header("date", &http_date(SystemTime::now())))
    }

    fn operation(&self, request: &SimRequest) -> &'static str {
        let m = &request.method;
        match route(request) {
            Route::Sandboxes(_) if m == Method::POST => "create",
            Route::Sandboxes(_) | Route::Sessions => "list",
            Route::Sandbox(_) => match *m {
                Method::GET if request.query_param("resume").as_deref() == Some("true") => "resume",
                Method::GET => "get",
                Method::PATCH => "update",
                Method::DELETE => "destroy",
                _ => "other",
            },
            Route::Fork(_) => "fork",
            Route::Session(_) => "get",
            Route::SessionAction(_, a) => match a.as_str() {
                "stop" => "stop",
                "extend-timeout" => "set_timeout",
                "network-policy" => "update",
                "snapshot" => "snapshot",
                _ => "other",
            },
            Route::Commands(_) if m == Method::POST => "exec",
            Route::Commands(_) => "exec.list",
            Route::Command(..) => "exec.output",
            Route::CommandAction(_, _, a) => match a.as_str() {
                "logs" => "exec.output",
                "kill" => "kill",
                "stdin" => "stdin",
                _ => "other",
            },
            Route::Fs(_, op) => match op.as_str() {
                "write" => "files.write",
                "read" => "files.read",
                "mkdir" => "files.mkdir",
                _ => "other",
            },
            Route::Snapshots | Route::Snapshot(_) => "snapshot",
            Route::NotFound => "other",
        }
    }

    fn handle(&self, request: SimRequest) -> BoxFuture<'static, SimResponse> {
        let state = self.0.clone();
        Box::pin(async move {
            let response = serve(&state, request).await;
            response.header("date", &http_date(SystemTime::now()))
        })
    }

    fn error(&self, status: u16, message: &str) -> SimResponse {
        error(status, code_of(status), message).header("date", &http_date(SystemTime::now()))
    }
}

/// Serves an admitted request ([`Handler::admit`] checked its token, team and body size).
async fn serve(state: &Arc<State>, request: SimRequest) -> SimResponse {
    let m = request.method.clone();
    match (m, route(&request)) {
        (Method::POST, Route::Sandboxes(v)) => create(state, &v, &request).await,
        (Method::GET, Route::Sandboxes(v)) if v == "v2" => list_sandboxes(state, &request),
        (Method::GET, Route::Sandbox(name)) => get_sandbox(state, &name, &request).await,
        (Method::PATCH, Route::Sandbox(name)) => update(state, &name, &request),
        (Method::DELETE, Route::Sandbox(name)) => delete(state, &name, &request).await,
        (Method::POST, Route::Fork(name)) => fork(state, &name, &request).await,
        (Method::GET, Route::Sessions) => list_sessions(state, &request),
        (Method::GET, Route::Session(id)) => match state.session(&id) {
            Some(s) => {
                SimResponse::json(200, &json!({ "session": s.to_json(), "routes": s.routes }))
            }
            None => session_not_found(&id),
        },
        (Method::POST, Route::SessionAction(id, action)) => {
            let Some(session) = state.session(&id) else {
                return session_not_found(&id);
            };
            session_action(state, &session, &action, &request).await
        }
        (Method::GET | Method::POST, Route::Commands(id)) => {
            let Some(session) = state.session(&id) else {
                return session_not_found(&id);
            };
            if request.method == Method::GET {
                if is_terminal(session.status()) {
                    return stopped();
                }
                let commands: Vec<Value> = lock(&session.commands)
                    .iter()
                    .map(|c| c.to_json())
                    .collect();
                return SimResponse::json(200, &json!({ "commands": commands }));
            }
            match body_object(&request.body) {
                Ok(body) => command::start(&state.settings, &session, &body).await,
                Err(refused) => refused,
            }
        }
        (Method::GET, Route::Command(id, cmd)) => {
            let cmd = match command_of(state, &id, &cmd) {
                Ok(c) => c,
                Err(refused) => return refused,
            };
            let wait = request.query_param("wait").as_deref() == Some("true");
            command::get(&state.settings, cmd, wait).await
        }
        (m, Route::CommandAction(id, cmd, action)) => {
            let cmd = match command_of(state, &id, &cmd) {
                Ok(c) => c,
                Err(refused) => return refused,
            };
            match (m, action.as_str()) {
                (Method::GET, "logs") => SimResponse::stream(
                    200,
                    NDJSON,
                    cmd.ndjson(false, true, false, state.settings.edge_cut),
                ),
                (Method::POST, "kill") => match body_object(&request.body) {
                    Ok(body) => command::kill(&cmd, &body),
                    Err(refused) => refused,
                },
                (Method::POST, "stdin") => command::stdin(&cmd, &request.body).await,
                _ => no_route(),
            }
        }
        (Method::POST, Route::Fs(id, op)) => {
            let Some(session) = state.session(&id) else {
                return session_not_found(&id);
            };
            if let Err(refused) = session.ready().await {
                return refused;
            }
            let disk = &session.disk;
            match op.as_str() {
                "write" => files::write(disk, request.header("x-cwd"), request.body.clone()).await,
                "read" | "mkdir" => match body_object(&request.body) {
                    Ok(body) if op == "read" => files::read(disk, &body).await,
                    Ok(body) => files::mkdir(disk, &body).await,
                    Err(refused) => refused,
                },
                _ => no_route(),
            }
        }
        (Method::GET, Route::Snapshots) => list_snapshots(state, &request),
        (Method::GET | Method::DELETE, Route::Snapshot(id)) => {
            let mut snaps = lock(&state.snapshots);
            let Some(snap) = snaps.get_mut(&id).filter(|s| !s.deleted) else {
                return error(
                    404,
                    "snapshot_not_found",
                    &format!("Snapshot {id} not found"),
                );
            };
            if request.method == Method::DELETE {
                snap.deleted = true;
                if let Some(dir) = snap.files.take() {
                    let _ = std::fs::remove_dir_all(dir);
                }
            }
            SimResponse::json(200, &json!({ "snapshot": snap.to_json() }))
        }
        _ => no_route(),
    }
}

fn session_not_found(id: &str) -> SimResponse {
    not_found(&format!("Session {id} not found"))
}

/// Command `cmd` of session `id`, unless the session is gone or stopped (PROTOCOL.md §5.3).
fn command_of(state: &State, id: &str, cmd: &str) -> Result<Arc<Cmd>, SimResponse> {
    let session = state.session(id).ok_or_else(|| session_not_found(id))?;
    if is_terminal(session.status()) {
        return Err(stopped());
    }
    command::find(&session, cmd)
}

/// Checks the project a by-name call names (`projectId`, or `project` on listings).
fn project_ok(state: &State, request: &SimRequest, param: &str) -> Result<(), SimResponse> {
    match request.query_param(param) {
        None => Err(bad(&format!("`{param}` is required."))),
        Some(p) if p == state.settings.project_id => Ok(()),
        Some(p) => Err(not_found(&format!("Project {p} not found"))),
    }
}

/// A sandbox name as PROTOCOL.md §3 allows it.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The fields create, fork and update share, read and checked.
#[derive(Default)]
struct Fields {
    vcpus: Option<u32>,
    memory: Option<u64>,
    ports: Option<Vec<u16>>,
    timeout: Option<u64>,
    env: Option<BTreeMap<String, String>>,
    tags: Option<BTreeMap<String, String>>,
    persistent: Option<bool>,
    network_policy: Option<Value>,
    region: Option<String>,
    image: Option<String>,
    snapshot_expiration: Option<u64>,
    keep_last: Option<Option<Value>>,
}

fn fields(state: &State, body: &Map<String, Value>) -> Result<Fields, SimResponse> {
    let mut f = Fields::default();
    let present = |k: &str| body.get(k).filter(|v| !v.is_null());
    if let Some(r) = present("resources") {
        let vcpus = r.get("vcpus").filter(|v| !v.is_null());
        if let Some(v) = vcpus {
            match v.as_u64() {
                Some(
                    n @ (1 | 2 | 4 | 6 | 8 | 10 | 12 | 14 | 16 | 18 | 20 | 22 | 24 | 26 | 28 | 30
                    | 32),
                ) => f.vcpus = Some(n as u32),
                _ => {
                    return Err(bad(
                        "`resources.vcpus` must be 1 or an even number from 2 to 32.",
                    ));
                }
            }
        }
        if let Some(m) = r.get("memory").filter(|v| !v.is_null()) {
            match m.as_u64() {
                Some(n) if n > 0 => f.memory = Some(n),
                _ => return Err(bad("`resources.memory` must be a positive integer (MB).")),
            }
        }
    }
    if let Some(p) = present("ports") {
        let ports: Option<Vec<u16>> = p.as_array().and_then(|a| {
            a.iter()
                .map(|v| {
                    v.as_u64()
                        .and_then(|n| u16::try_from(n).ok())
                        .filter(|n| *n > 0)
                })
                .collect()
        });
        match ports {
            Some(ports) if ports.len() <= 15 => f.ports = Some(ports),
            Some(_) => return Err(bad("At most 15 ports can be exposed.")),
            None => return Err(bad("`ports` must be an array of port numbers.")),
        }
    }
    if let Some(t) = present("timeout") {
        let max = state.settings.max_timeout.as_millis() as u64;
        match t.as_u64() {
            Some(ms) if ms > 0 && ms <= max => f.timeout = Some(ms),
            _ => {
                return Err(bad(&format!(
                    "`timeout` must be a positive number of milliseconds of at most {max}."
                )));
            }
        }
    }
    let strings = |k: &str| -> Result<Option<BTreeMap<String, String>>, SimResponse> {
        match present(k) {
            None => Ok(None),
            Some(v) => serde_json::from_value(v.clone())
                .map(Some)
                .map_err(|_| bad(&format!("`{k}` must be an object of strings."))),
        }
    };
    f.env = strings("env")?;
    f.tags = strings("tags")?;
    if f.tags.as_ref().is_some_and(|t| t.len() > 5) {
        return Err(bad("A sandbox can have at most 5 tags."));
    }
    if let Some(p) = present("persistent") {
        f.persistent = Some(
            p.as_bool()
                .ok_or_else(|| bad("`persistent` must be a boolean."))?,
        );
    }
    f.network_policy = present("networkPolicy").cloned();
    if let Some(r) = present("region") {
        f.region = Some(
            r.as_str()
                .ok_or_else(|| bad("`region` must be a string."))?
                .to_owned(),
        );
    }
    if let Some(i) = present("image") {
        f.image = Some(
            i.as_str()
                .ok_or_else(|| bad("`image` must be a string."))?
                .to_owned(),
        );
    }
    if let Some(e) = present("snapshotExpiration") {
        f.snapshot_expiration = Some(
            e.as_u64()
                .ok_or_else(|| bad("`snapshotExpiration` must be an integer."))?,
        );
    }
    if let Some(k) = body.get("keepLastSnapshots") {
        f.keep_last = Some(if k.is_null() { None } else { Some(k.clone()) });
    }
    Ok(f)
}

/// `POST /v2|v3|v4/sandboxes` (PROTOCOL.md §4.1).
async fn create(state: &Arc<State>, version: &str, request: &SimRequest) -> SimResponse {
    let body = match body_object(&request.body) {
        Ok(b) => b,
        Err(refused) => return refused,
    };
    match body.get("projectId").and_then(Value::as_str) {
        None => return bad("`projectId` is required."),
        Some(p) if p != state.settings.project_id => {
            return not_found(&format!("Project {p} not found"));
        }
        Some(_) => {}
    }
    let name = match body.get("name").filter(|v| !v.is_null()) {
        None => state.generated_name(),
        Some(Value::String(n)) if valid_name(n) => n.clone(),
        Some(_) => {
            return bad("`name` must be 1 to 128 characters of letters, digits, `_` and `-`.");
        }
    };
    let runtime = match body.get("runtime").filter(|v| !v.is_null()) {
        None => None,
        Some(_) if version != "v2" => {
            return bad(&format!(
                "`runtime` is not accepted by /{version}/sandboxes; use `image`."
            ));
        }
        Some(Value::String(r)) if RUNTIMES.contains(&r.as_str()) => Some(r.clone()),
        Some(_) => {
            return bad(&format!(
                "`runtime` must be one of {}.",
                RUNTIMES.join(", ")
            ));
        }
    };
    let f = match fields(state, &body) {
        Ok(f) => f,
        Err(refused) => return refused,
    };
    if runtime.is_some() && f.image.is_some() {
        return bad("`runtime` and `image` cannot be used together.");
    }
    let source = match body.get("source").filter(|v| !v.is_null()) {
        None => None,
        Some(s) => match (s["type"].as_str(), s["snapshotId"].as_str()) {
            (Some("snapshot"), Some(id)) => Some(id.to_owned()),
            (Some("git" | "tarball"), _) => {
                return bad("Git and tarball sources are not supported by the simulator.");
            }
            _ => return bad("`source` must be {type: \"snapshot\", snapshotId}."),
        },
    };
    if state.sandbox(&name).is_some() {
        return super::state::duplicate(&name);
    }
    let vcpus = f.vcpus.unwrap_or(2);
    if let Err(refused) = state.allocate(vcpus) {
        return refused;
    }
    let image = match (&runtime, &f.image, version) {
        (None, None, "v3" | "v4") if source.is_none() => Some(DEFAULT_IMAGE.to_owned()),
        (_, image, _) => image.clone(),
    };
    let cfg_runtime = runtime.clone();
    let env = f.env.unwrap_or_default();
    let spec = SessionSpec {
        name: name.clone(),
        region: f.region.unwrap_or_else(|| state.settings.region.clone()),
        vcpus,
        memory: f.memory.unwrap_or(u64::from(vcpus) * 2048),
        runtime: runtime.unwrap_or_else(|| "node24".to_owned()),
        timeout: f.timeout.unwrap_or(300_000),
        ports: f.ports.unwrap_or_default(),
        env,
        network_policy: f.network_policy,
        source_snapshot: source.clone(),
    };
    let version_defaults = version == "v4";
    let cfg = Partial {
        persistent: f.persistent.unwrap_or(true),
        runtime: cfg_runtime,
        image,
        tags: f.tags.unwrap_or_default(),
        snapshot_expiration: f
            .snapshot_expiration
            .or(version_defaults.then_some(7 * 24 * 3600 * 1000)),
        keep_last: match f.keep_last {
            Some(k) => k,
            None if version_defaults => Some(json!({ "count": 1, "deleteEvicted": true })),
            None => None,
        },
        current_snapshot: source.clone(),
    };
    make_sandbox(state, spec, cfg, source.as_deref()).await
}

/// The sandbox settings that are not the session's.
struct Partial {
    persistent: bool,
    runtime: Option<String>,
    image: Option<String>,
    tags: BTreeMap<String, String>,
    snapshot_expiration: Option<u64>,
    keep_last: Option<Value>,
    current_snapshot: Option<String>,
}

/// Makes a sandbox (disk filled from snapshot `from`, if any) and its first session; answers
/// the create envelope, or the duplicate-name 400.
async fn make_sandbox(
    state: &Arc<State>,
    spec: SessionSpec,
    p: Partial,
    from: Option<&str>,
) -> SimResponse {
    let local = match state.backing.create(&CreateSpec::new()).await {
        Ok(l) => l,
        Err(e) => return error(500, "internal_server_error", &e.to_string()),
    };
    let disk = Disk::new(local);
    if let Some(id) = from
        && let Err(refused) = state.fill_from(&disk, id).await
    {
        let _ = sandbox_sdk_core::Sandbox::destroy(&disk.local).await;
        return refused;
    }
    let session = state.new_session(&disk, &spec);
    let now = now_ms();
    let sbx = Arc::new(Sbx {
        name: spec.name.clone(),
        seq: state.next_seq(),
        created_at: now,
        disk: disk.clone(),
        cfg: Mutex::new(Cfg {
            persistent: p.persistent,
            region: spec.region.clone(),
            vcpus: spec.vcpus,
            memory: spec.memory,
            runtime: p.runtime,
            image: p.image,
            timeout: spec.timeout,
            ports: spec.ports.clone(),
            env: spec.env.clone(),
            tags: p.tags,
            network_policy: spec.network_policy.clone(),
            snapshot_expiration: p.snapshot_expiration,
            keep_last: p.keep_last,
            session: session.clone(),
            current_snapshot: p.current_snapshot,
            restore: None,
            updated_at: now,
            status_updated_at: now,
        }),
        resuming: tokio::sync::Mutex::new(()),
    });
    if let Err(refused) = state.insert(sbx.clone()) {
        state.forget_session(&session.id);
        let _ = sandbox_sdk_core::Sandbox::destroy(&disk.local).await;
        return refused;
    }
    SimResponse::json(200, &sbx.envelope())
}

/// `GET /v2/sandboxes/{name}` (PROTOCOL.md §4.3), resuming a stopped one with `resume=true`.
async fn get_sandbox(state: &Arc<State>, name: &str, request: &SimRequest) -> SimResponse {
    if let Err(refused) = project_ok(state, request, "projectId") {
        return refused;
    }
    let Some(sbx) = state.sandbox(name) else {
        return not_found("Sandbox not found");
    };
    if request.query_param("resume").as_deref() != Some("true") {
        return SimResponse::json(200, &sbx.envelope());
    }
    let _one = sbx.resuming.lock().await;
    let current = sbx.session();
    if !is_terminal(current.status()) {
        if matches!(current.status(), "pending" | "running") {
            let mut answer = sbx.envelope();
            answer["resumed"] = json!(false);
            return SimResponse::json(200, &answer);
        }
        current.settled().await;
    }
    let (snapshot, restore, persistent) = {
        let cfg = lock(&sbx.cfg);
        (
            cfg.current_snapshot.clone(),
            cfg.restore.clone(),
            cfg.persistent,
        )
    };
    let live = |id: &String| lock(&state.snapshots).get(id).is_some_and(|s| !s.deleted);
    if persistent && snapshot.as_ref().is_some_and(|id| !live(id)) {
        return error(
            410,
            "snapshot_not_found",
            "Cannot resume sandbox: no snapshot available.",
        );
    }
    let vcpus = lock(&sbx.cfg).vcpus;
    if let Err(refused) = state.allocate(vcpus) {
        return refused;
    }
    match &restore {
        Some(id) => {
            if let Err(refused) = state.fill_from(&sbx.disk, id).await {
                return refused;
            }
        }
        None if !persistent => {
            let disk = sbx.disk.clone();
            let _ = tokio::task::spawn_blocking(move || disk.wipe()).await;
        }
        None => {}
    }
    let spec = {
        let cfg = lock(&sbx.cfg);
        SessionSpec {
            name: sbx.name.clone(),
            region: cfg.region.clone(),
            vcpus: cfg.vcpus,
            memory: cfg.memory,
            runtime: cfg.runtime.clone().unwrap_or_else(|| "node24".to_owned()),
            timeout: cfg.timeout,
            ports: cfg.ports.clone(),
            env: cfg.env.clone(),
            network_policy: cfg.network_policy.clone(),
            source_snapshot: if persistent { snapshot } else { None },
        }
    };
    let session = state.new_session(&sbx.disk, &spec);
    {
        let mut cfg = lock(&sbx.cfg);
        cfg.session = session;
        cfg.restore = None;
        cfg.status_updated_at = now_ms();
        cfg.updated_at = now_ms();
    }
    let mut answer = sbx.envelope();
    answer["resumed"] = json!(true);
    SimResponse::json(200, &answer)
}

/// `PATCH /v2/sandboxes/{name}` (PROTOCOL.md §4.6): the fields given, for the next session
/// (network policy and timeout also for the current one).
fn update(state: &Arc<State>, name: &str, request: &SimRequest) -> SimResponse {
    if let Err(refused) = project_ok(state, request, "projectId") {
        return refused;
    }
    let Some(sbx) = state.sandbox(name) else {
        return not_found("Sandbox not found");
    };
    let body = match body_object(&request.body) {
        Ok(b) => b,
        Err(refused) => return refused,
    };
    let f = match fields(state, &body) {
        Ok(f) => f,
        Err(refused) => return refused,
    };
    let rollback = body
        .get("currentSnapshotId")
        .and_then(Value::as_str)
        .map(str::to_owned);
    if let Some(id) = &rollback
        && lock(&state.snapshots).get(id).is_none_or(|s| s.deleted)
    {
        return error(
            404,
            "snapshot_not_found",
            &format!("Snapshot {id} not found"),
        );
    }
    {
        let mut cfg = lock(&sbx.cfg);
        if let Some(v) = f.vcpus {
            cfg.vcpus = v;
            cfg.memory = f.memory.unwrap_or(u64::from(v) * 2048);
        }
        if let Some(t) = f.timeout {
            cfg.timeout = t;
        }
        if let Some(p) = f.ports {
            cfg.ports = p;
        }
        if let Some(e) = f.env {
            cfg.env = e;
        }
        if let Some(t) = f.tags {
            cfg.tags = t;
        }
        if let Some(p) = f.persistent {
            cfg.persistent = p;
        }
        if let Some(n) = f.network_policy {
            lock(&cfg.session.life).network_policy = Some(n.clone());
            cfg.network_policy = Some(n);
        }
        if let Some(r) = f.region {
            cfg.region = r;
        }
        if let Some(e) = f.snapshot_expiration {
            cfg.snapshot_expiration = Some(e);
        }
        if let Some(k) = f.keep_last {
            cfg.keep_last = k;
        }
        if let Some(id) = rollback {
            cfg.current_snapshot = Some(id.clone());
            cfg.restore = Some(id);
        }
        cfg.updated_at = now_ms();
    }
    let session = sbx.session();
    SimResponse::json(
        200,
        &json!({ "sandbox": sbx.to_json(), "routes": session.routes }),
    )
}

/// `DELETE /v2/sandboxes/{name}` (PROTOCOL.md §4.6): stops the session, deletes the sandbox.
async fn delete(state: &Arc<State>, name: &str, request: &SimRequest) -> SimResponse {
    if let Err(refused) = project_ok(state, request, "projectId") {
        return refused;
    }
    let Some(sbx) = state.remove(name) else {
        return not_found("Sandbox not found");
    };
    let session = sbx.session();
    session.kill_all();
    {
        let mut life = lock(&session.life);
        if !is_terminal(life.status) {
            life.status = "stopped";
            life.requested_stop_at = Some(now_ms());
            life.stopped_at = Some(now_ms());
        }
    }
    session.changed.send_modify(|n| *n += 1);
    let answer = json!({ "sandbox": sbx.to_json() });
    if request.query_param("deleteOrphanSnapshots").as_deref() == Some("true") {
        let mut snaps = lock(&state.snapshots);
        for snap in snaps.values_mut().filter(|s| s.sandbox == sbx.name) {
            snap.deleted = true;
            if let Some(dir) = snap.files.take() {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
    }
    state.forget_sessions(name);
    let _ = sandbox_sdk_core::Sandbox::destroy(&sbx.disk.local).await;
    SimResponse::json(200, &answer)
}

/// `POST /v2|v3/sandboxes/{name}/fork` (PROTOCOL.md §10.2): a new sandbox with the source's
/// settings, the body's overrides, and the source's latest snapshot as its disk.
async fn fork(state: &Arc<State>, name: &str, request: &SimRequest) -> SimResponse {
    if let Err(refused) = project_ok(state, request, "projectId") {
        return refused;
    }
    let Some(source) = state.sandbox(name) else {
        return not_found("Sandbox not found");
    };
    let body = match body_object(&request.body) {
        Ok(b) => b,
        Err(refused) => return refused,
    };
    if body.get("source").is_some_and(|v| !v.is_null())
        || body.get("runtime").is_some_and(|v| !v.is_null())
    {
        return bad("A fork takes neither `source` nor `runtime`.");
    }
    let child = match body.get("name").filter(|v| !v.is_null()) {
        None => state.generated_name(),
        Some(Value::String(n)) if valid_name(n) => n.clone(),
        Some(_) => {
            return bad("`name` must be 1 to 128 characters of letters, digits, `_` and `-`.");
        }
    };
    let f = match fields(state, &body) {
        Ok(f) => f,
        Err(refused) => return refused,
    };
    if state.sandbox(&child).is_some() {
        return super::state::duplicate(&child);
    }
    let (spec, partial, snapshot) = {
        let cfg = lock(&source.cfg);
        let snapshot = cfg
            .current_snapshot
            .clone()
            .filter(|id| lock(&state.snapshots).get(id).is_some_and(|s| !s.deleted));
        let vcpus = f.vcpus.unwrap_or(cfg.vcpus);
        let spec = SessionSpec {
            name: child.clone(),
            region: f.region.clone().unwrap_or_else(|| cfg.region.clone()),
            vcpus,
            memory: f.memory.unwrap_or(if f.vcpus.is_some() {
                u64::from(vcpus) * 2048
            } else {
                cfg.memory
            }),
            runtime: cfg.runtime.clone().unwrap_or_else(|| "node24".to_owned()),
            timeout: f.timeout.unwrap_or(cfg.timeout),
            ports: f.ports.clone().unwrap_or_else(|| cfg.ports.clone()),
            env: f.env.clone().unwrap_or_else(|| cfg.env.clone()),
            network_policy: f
                .network_policy
                .clone()
                .or_else(|| cfg.network_policy.clone()),
            source_snapshot: snapshot.clone(),
        };
        let partial = Partial {
            persistent: f.persistent.unwrap_or(cfg.persistent),
            runtime: cfg.runtime.clone(),
            image: f.image.clone().or_else(|| cfg.image.clone()),
            tags: f.tags.clone().unwrap_or_else(|| cfg.tags.clone()),
            snapshot_expiration: f.snapshot_expiration.or(cfg.snapshot_expiration),
            keep_last: match f.keep_last.clone() {
                Some(k) => k,
                None => cfg.keep_last.clone(),
            },
            current_snapshot: snapshot.clone(),
        };
        (spec, partial, snapshot)
    };
    if let Err(refused) = state.allocate(spec.vcpus) {
        return refused;
    }
    make_sandbox(state, spec, partial, snapshot.as_deref()).await
}

/// `stop`, `extend-timeout`, `network-policy`, `snapshot` on a session (PROTOCOL.md §5.1,
/// §4.6, §10.1).
async fn session_action(
    state: &Arc<State>,
    session: &Arc<Session>,
    action: &str,
    request: &SimRequest,
) -> SimResponse {
    let body = match body_object(&request.body) {
        Ok(b) => b,
        Err(refused) => return refused,
    };
    match action {
        "stop" => {
            state.stop(session, false);
            SimResponse::json(200, &json!({ "session": session.to_json() }))
        }
        "extend-timeout" => {
            let Some(duration) = body
                .get("duration")
                .and_then(Value::as_u64)
                .filter(|d| *d > 0)
            else {
                return bad("`duration` must be a positive number of milliseconds.");
            };
            if let Err(refused) = session.ready().await {
                return refused;
            }
            let max = state.settings.max_timeout.as_millis() as u64;
            {
                let mut life = lock(&session.life);
                let total = life.timeout.saturating_add(duration);
                if total > max {
                    return bad(&format!(
                        "The sandbox timeout cannot exceed {max} ms; it is {} ms now.",
                        life.timeout
                    ));
                }
                life.timeout = total;
                life.deadline += Duration::from_millis(duration);
            }
            SimResponse::json(200, &json!({ "session": session.to_json() }))
        }
        "network-policy" => {
            if let Err(refused) = session.ready().await {
                return refused;
            }
            lock(&session.life).network_policy = Some(policy_answer(&Value::Object(body)));
            SimResponse::json(200, &json!({ "session": session.to_json() }))
        }
        "snapshot" => {
            let expiration = match body.get("expiration").filter(|v| !v.is_null()) {
                None => None,
                Some(e) => match e.as_u64() {
                    Some(ms) => Some(ms),
                    None => return bad("`expiration` must be an integer (milliseconds)."),
                },
            };
            if let Err(refused) = session.ready().await {
                return refused;
            }
            let Some(sbx) = state
                .sandbox(&session.name)
                .filter(|s| s.session().id == session.id)
            else {
                return session_not_found(&session.id);
            };
            state.stop(session, true);
            match state.take_snapshot(&sbx, session, expiration).await {
                Ok(snapshot) => SimResponse::json(
                    200,
                    &json!({ "snapshot": snapshot, "session": session.to_json() }),
                ),
                Err(refused) => refused,
            }
        }
        _ => no_route(),
    }
}

/// A network policy as answers show it (the normalised form, PROTOCOL.md §4.6).
fn policy_answer(policy: &Value) -> Value {
    if policy.get("mode").is_some() {
        return policy.clone();
    }
    let domains: Vec<Value> = match policy.get("allow") {
        Some(Value::Array(a)) => a.clone(),
        Some(Value::Object(o)) => o.keys().map(|k| json!(k)).collect(),
        _ => Vec::new(),
    };
    json!({
        "mode": "custom",
        "allowedDomains": domains,
        "allowedCIDRs": policy["subnets"]["allow"].as_array().cloned().unwrap_or_default(),
        "deniedCIDRs": policy["subnets"]["deny"].as_array().cloned().unwrap_or_default(),
    })
}

/// `limit` (1–50, default 20) or a 400.
fn limit(request: &SimRequest) -> Result<usize, SimResponse> {
    match request.query_param("limit") {
        None => Ok(20),
        Some(l) => match l.parse::<usize>() {
            Ok(n) if (1..=50).contains(&n) => Ok(request.page_size(n)),
            _ => Err(bad("`limit` must be an integer from 1 to 50.")),
        },
    }
}

/// `asc` or `desc` (the default).
fn descending(request: &SimRequest) -> Result<bool, SimResponse> {
    match request.query_param("sortOrder").as_deref() {
        None | Some("desc") => Ok(true),
        Some("asc") => Ok(false),
        Some(_) => Err(bad("`sortOrder` must be `asc` or `desc`.")),
    }
}

fn cursor_of(key: &(String, u64)) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{}\0{}", key.1, key.0))
}

fn parse_cursor(cursor: &str) -> Option<(String, u64)> {
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(cursor)
        .ok()?;
    let text = String::from_utf8(raw).ok()?;
    let (seq, primary) = text.split_once('\0')?;
    Some((primary.to_owned(), seq.parse().ok()?))
}

/// One page of `items` (each with its sort key), sorted, after `cursor`: the page's values and
/// the `pagination` object.
fn page(
    mut items: Vec<((String, u64), Value)>,
    request: &SimRequest,
) -> Result<(Vec<Value>, Value), SimResponse> {
    let limit = limit(request)?;
    let desc = descending(request)?;
    items.sort_by(|a, b| a.0.cmp(&b.0));
    if desc {
        items.reverse();
    }
    if let Some(cursor) = request.query_param("cursor") {
        let Some(after) = parse_cursor(&cursor) else {
            return Err(bad("`cursor` is not a cursor this API gave."));
        };
        items.retain(|(k, _)| if desc { *k < after } else { *k > after });
    }
    let more = items.len() > limit;
    items.truncate(limit);
    let next = match (more, items.last()) {
        (true, Some((key, _))) => json!(cursor_of(key)),
        _ => Value::Null,
    };
    let count = items.len();
    Ok((
        items.into_iter().map(|(_, v)| v).collect(),
        json!({ "count": count, "next": next }),
    ))
}

/// `GET /v2/sandboxes` (PROTOCOL.md §4.4).
fn list_sandboxes(state: &Arc<State>, request: &SimRequest) -> SimResponse {
    if let Err(refused) = project_ok(state, request, "project") {
        return refused;
    }
    let sort = request
        .query_param("sortBy")
        .unwrap_or_else(|| "createdAt".to_owned());
    if !matches!(
        sort.as_str(),
        "createdAt" | "name" | "statusUpdatedAt" | "currentSnapshotId"
    ) {
        return bad("`sortBy` must be createdAt, name, statusUpdatedAt or currentSnapshotId.");
    }
    let prefix = request.query_param("namePrefix").filter(|p| !p.is_empty());
    if prefix.is_some() && sort != "name" {
        return bad("`namePrefix` can only be used with sortBy=name.");
    }
    let status = request.query_param("status").filter(|s| !s.is_empty());
    if let Some(s) = &status {
        if sort != "createdAt" {
            return bad("`status` can only be used with sortBy=createdAt.");
        }
        if !matches!(s.as_str(), "running" | "stopping" | "stopped") {
            return bad("`status` must be running, stopping or stopped.");
        }
    }
    let tag = match request.query_param("tags") {
        None => None,
        Some(t) => match t.split_once(':') {
            Some((k, v)) => Some((k.to_owned(), v.to_owned())),
            None => return bad("`tags` must be key:value."),
        },
    };
    let items = state
        .all_sandboxes()
        .into_iter()
        .filter(|s| {
            prefix
                .as_ref()
                .is_none_or(|p| s.name.starts_with(p.as_str()))
        })
        .filter(|s| status.as_ref().is_none_or(|st| s.status() == st.as_str()))
        .filter(|s| {
            tag.as_ref()
                .is_none_or(|(k, v)| lock(&s.cfg).tags.get(k) == Some(v))
        })
        .map(|s| {
            let primary = {
                let cfg = lock(&s.cfg);
                match sort.as_str() {
                    "name" => s.name.clone(),
                    "statusUpdatedAt" => format!("{:020}", cfg.status_updated_at),
                    "currentSnapshotId" => cfg.current_snapshot.clone().unwrap_or_default(),
                    _ => String::new(),
                }
            };
            ((primary, s.seq), s.to_json())
        })
        .collect();
    match page(items, request) {
        Ok((sandboxes, pagination)) => SimResponse::json(
            200,
            &json!({ "sandboxes": sandboxes, "pagination": pagination }),
        ),
        Err(refused) => refused,
    }
}

/// `GET /v2/sandboxes/sessions` (PROTOCOL.md §5.1).
fn list_sessions(state: &Arc<State>, request: &SimRequest) -> SimResponse {
    if let Err(refused) = project_ok(state, request, "project") {
        return refused;
    }
    let name = request.query_param("name");
    let items = state
        .all_sessions()
        .into_iter()
        .filter(|s| name.as_ref().is_none_or(|n| s.name == *n))
        .map(|s| ((String::new(), s.seq), s.to_json()))
        .collect();
    match page(items, request) {
        Ok((sessions, pagination)) => SimResponse::json(
            200,
            &json!({ "sessions": sessions, "pagination": pagination }),
        ),
        Err(refused) => refused,
    }
}

/// `GET /v2/sandboxes/snapshots` (PROTOCOL.md §10.1).
fn list_snapshots(state: &Arc<State>, request: &SimRequest) -> SimResponse {
    if let Err(refused) = project_ok(state, request, "project") {
        return refused;
    }
    let name = request.query_param("name");
    let items = lock(&state.snapshots)
        .values()
        .filter(|s| !s.deleted)
        .filter(|s| name.as_ref().is_none_or(|n| s.sandbox == *n))
        .map(|s| ((String::new(), s.seq), s.to_json()))
        .collect();
    match page(items, request) {
        Ok((snapshots, pagination)) => SimResponse::json(
            200,
            &json!({ "snapshots": snapshots, "pagination": pagination }),
        ),
        Err(refused) => refused,
    }
}
