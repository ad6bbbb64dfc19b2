//! The HTTP surface: authentication, routing, operation names, and the sprite endpoints
//! themselves (PROTOCOL.md §2, §4, §10, §18.1, §18.2, §18.14).

use super::sprite::Sprite;
use super::state::{State, code_of, error, no_sprite};
use super::{checkpoints, exec, files, lock};
use crate::{Handler, SimRequest, SimResponse};
use futures::future::BoxFuture;
use http::Method;
use sandbox_sdk_core::CreateSpec;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The Sprites API, served by [`crate::SimServer`].
pub(crate) struct SpritesHandler(pub Arc<State>);

impl Handler for SpritesHandler {
    /// The token (PROTOCOL.md §2), then the body cap: a file's bytes on `fs/write`, JSON
    /// elsewhere.
    fn admit(&self, head: &SimRequest) -> Result<usize, SimResponse> {
        if !authorized(&self.0, head) {
            return Err(error(401, "unauthorized", "missing or invalid token"));
        }
        let s = head.segments();
        let s: Vec<&str> = s.iter().map(String::as_str).collect();
        Ok(match s.as_slice() {
            ["v1", "sprites", _, "fs", "write"] => crate::MAX_REQUEST_BODY,
            _ => crate::MAX_JSON_BODY,
        })
    }

    fn operation(&self, request: &SimRequest) -> &'static str {
        let s = request.segments();
        let s: Vec<&str> = s.iter().map(String::as_str).collect();
        let m = &request.method;
        match s.as_slice() {
            ["v1", "sprites"] if m == Method::POST => "create",
            ["v1", "sprites"] if m == Method::GET => "list",
            ["v1", "sprites", _] if m == Method::GET => "get",
            ["v1", "sprites", _] if m == Method::PUT => "update",
            ["v1", "sprites", _] if m == Method::DELETE => "destroy",
            ["v1", "sprites", _, "exec"] if exec::is_websocket(request) => "exec",
            ["v1", "sprites", _, "exec"] if m == Method::GET => "exec.list",
            ["v1", "sprites", _, "exec", _] if exec::is_websocket(request) => "exec.output",
            ["v1", "sprites", _, "exec", _, "kill"] if m == Method::POST => "kill",
            ["v1", "sprites", _, "fs", "read"] => "files.read",
            ["v1", "sprites", _, "fs", "write"] => "files.write",
            ["v1", "sprites", _, "fs", "list"] => "files.list",
            ["v1", "sprites", _, "fs", "delete"] => "files.remove",
            ["v1", "sprites", _, "fs", "rename"] => "files.move",
            ["v1", "sprites", _, "checkpoint"] => "snapshot",
            ["v1", "sprites", _, "checkpoints"] => "snapshot",
            ["v1", "sprites", _, "checkpoints", _] => "snapshot",
            ["v1", "sprites", _, "checkpoints", _, "restore"] => "restore",
            _ => "other",
        }
    }

    fn handle(&self, request: SimRequest) -> BoxFuture<'static, SimResponse> {
        let state = self.0.clone();
        Box::pin(async move { route(state, request).await })
    }

    fn error(&self, status: u16, message: &str) -> SimResponse {
        error(status, code_of(status), message)
    }
}

/// Whether the request carries the simulator's token (PROTOCOL.md §2).
fn authorized(state: &State, request: &SimRequest) -> bool {
    request
        .header("authorization")
        .and_then(|h| h.strip_prefix("Bearer "))
        .is_some_and(|t| t.trim() == state.settings.token)
}

/// Serves an admitted request ([`Handler::admit`] checked its token).
async fn route(state: Arc<State>, request: SimRequest) -> SimResponse {
    let segments = request.segments();
    let s: Vec<&str> = segments.iter().map(String::as_str).collect();
    let method = request.method.clone();
    match s.as_slice() {
        ["v1", "sprites"] if method == Method::POST => return create(&state, &request).await,
        ["v1", "sprites"] if method == Method::GET => return list(&state, &request),
        ["v1", "sprites", ..] => {}
        _ => return error(404, "not_found", "no such endpoint"),
    }
    let name = s[2].to_owned();
    let Some(sprite) = state.sprite(&name) else {
        return no_sprite(&name);
    };
    let settings = &state.settings;
    match (&method, &s[3..]) {
        (&Method::GET, []) => SimResponse::json(200, &sprite.to_json(settings)),
        (&Method::PUT, []) => update(&state, &sprite, &request),
        (&Method::DELETE, []) => destroy(&state, &name).await,
        (&Method::GET, ["exec"]) if exec::is_websocket(&request) => {
            exec::spawn(settings, sprite, request).await
        }
        (&Method::GET, ["exec"]) => exec::list(&sprite),
        (&Method::GET, ["exec", id]) if exec::is_websocket(&request) => {
            let id = (*id).to_owned();
            exec::attach(settings, &sprite, &id, request)
        }
        (&Method::POST, ["exec", id, "kill"]) => exec::kill(&sprite, id, &request),
        (&Method::GET, ["fs", "read"]) => files::read(sprite, &request).await,
        (&Method::PUT | &Method::POST, ["fs", "write"]) => files::write(sprite, &request).await,
        (&Method::GET, ["fs", "list"]) => files::list(sprite, &request).await,
        (&Method::DELETE, ["fs", "delete"]) => files::delete(sprite, &request).await,
        (&Method::POST, ["fs", "rename"]) => files::rename(sprite, &request).await,
        (&Method::POST, ["checkpoint"]) => checkpoints::create(sprite, &request.body).await,
        (&Method::GET, ["checkpoints"]) => checkpoints::list(&sprite),
        (&Method::GET, ["checkpoints", id]) => checkpoints::get(&sprite, id),
        (&Method::POST, ["checkpoints", id, "restore"]) => {
            let id = (*id).to_owned();
            checkpoints::restore(sprite, &id).await
        }
        _ => error(404, "not_found", "no such endpoint"),
    }
}

/// Whether `name` is a valid sprite name (PROTOCOL.md §18.2):
/// `^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`.
pub(crate) fn valid_name(name: &str) -> bool {
    let b = name.as_bytes();
    let ok = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    (1..=63).contains(&b.len())
        && b.first().is_some_and(ok)
        && b.last().is_some_and(ok)
        && b.iter().all(|c| ok(c) || *c == b'-')
}

/// A list of strings from `value`, or `None` when it is not one.
fn strings(value: &Value) -> Option<Vec<String>> {
    value
        .as_array()?
        .iter()
        .map(|v| v.as_str().map(str::to_owned))
        .collect()
}

/// `POST /v1/sprites` (PROTOCOL.md §4.1, §18.1, §18.2, §18.4).
async fn create(state: &Arc<State>, request: &SimRequest) -> SimResponse {
    let bad = |m: &str| error(400, "invalid_request", m);
    let body: Map<String, Value> = match request.json::<Value>() {
        Ok(Value::Object(map)) => map,
        Ok(_) => return bad("the body must be a JSON object"),
        Err(e) => return bad(&e),
    };
    let Some(name) = body.get("name").and_then(Value::as_str) else {
        return SimResponse::json(400, &json!({ "errors": ["name is required"] }));
    };
    if !valid_name(name) {
        return SimResponse::json(
            400,
            &json!({ "errors": [format!(
                "name {name:?} is invalid: 1-63 lowercase letters, digits and '-', starting and ending with a letter or digit"
            )] }),
        );
    }
    let labels = match body.get("labels") {
        None | Some(Value::Null) => Vec::new(),
        Some(v) => match strings(v) {
            Some(l) => l,
            None => return bad("labels must be a list of strings"),
        },
    };
    let environment: BTreeMap<String, String> = match body.get("environment") {
        None | Some(Value::Null) => BTreeMap::new(),
        Some(v) => match serde_json::from_value(v.clone()) {
            Ok(env) => env,
            Err(_) => return bad("environment must be an object of strings"),
        },
    };
    let config = match body.get("config") {
        None | Some(Value::Null) => None,
        Some(v @ Value::Object(_)) => Some(v.clone()),
        Some(_) => return bad("config must be an object"),
    };
    let mut url_settings = json!({ "auth": "sprite" });
    match body.get("url_settings") {
        None | Some(Value::Null) => {}
        Some(Value::Object(given)) => {
            for (k, v) in given {
                url_settings[k] = v.clone();
            }
        }
        Some(_) => return bad("url_settings must be an object"),
    }
    if state.sprite(name).is_some() {
        return duplicate(name);
    }
    if let Err(limited) = state.admit_create() {
        return limited;
    }
    let local = match state.backing.create(&CreateSpec::default()).await {
        Ok(local) => local,
        Err(e) => return error(500, "internal_error", &e.to_string()),
    };
    let sprite = match Sprite::new(
        name.to_owned(),
        local,
        config,
        environment,
        labels,
        url_settings,
    ) {
        Ok(s) => Arc::new(s),
        Err(e) => return error(500, "internal_error", &e.to_string()),
    };
    match state.insert(sprite.clone()) {
        Ok(()) => SimResponse::json(201, &sprite.to_json(&state.settings)),
        Err(lost) => {
            let _ = sandbox_sdk_core::Sandbox::destroy(&lost.local).await;
            duplicate(name)
        }
    }
}

/// The duplicate-name 400 (PROTOCOL.md §18.1).
fn duplicate(name: &str) -> SimResponse {
    error(
        400,
        "invalid_request",
        &format!("sprite \"{name}\" already exists"),
    )
}

/// The most entries a list page holds (PROTOCOL.md §4.2: `max_results` 1–50).
const MAX_PAGE: usize = 50;

/// `GET /v1/sprites?prefix=&max_results=&continuation_token=` (PROTOCOL.md §4.2, §18.14). A
/// `max_results` over [`MAX_PAGE`] is capped, not refused: sprites-py 0.7.2 sends 100 on every
/// list, and a page may always hold fewer than asked.
fn list(state: &State, request: &SimRequest) -> SimResponse {
    let max = match request.query_param("max_results") {
        None => MAX_PAGE,
        Some(v) => match v.parse::<usize>() {
            Ok(n) if n >= 1 => n.min(MAX_PAGE),
            _ => {
                return SimResponse::json(
                    400,
                    &json!({ "errors": [format!("max_results must be a positive number, got {v:?}")] }),
                );
            }
        },
    };
    let page = request.page_size(max);
    let prefix = request.query_param("prefix").unwrap_or_default();
    let after = request
        .query_param("continuation_token")
        .filter(|t| !t.is_empty());
    let all = state.all();
    let mut matching = all
        .iter()
        .filter(|s| s.name.starts_with(&prefix))
        .filter(|s| after.as_deref().is_none_or(|a| s.name.as_str() > a));
    let entries: Vec<&Arc<Sprite>> = matching.by_ref().take(page).collect();
    let has_more = matching.next().is_some();
    let next = if has_more {
        entries.last().map(|s| json!(s.name)).unwrap_or(Value::Null)
    } else {
        Value::Null
    };
    let counts = |status: &str| {
        all.iter()
            .filter(|s| s.status(&state.settings) == status)
            .count()
    };
    SimResponse::json(
        200,
        &json!({
            "sprites": entries.iter().map(|s| s.list_entry()).collect::<Vec<_>>(),
            "has_more": has_more,
            "next_continuation_token": next,
            "name": super::ORG,
            "running": counts("running"),
            "warm": counts("warm"),
            "cold": counts("cold"),
        }),
    )
}

/// `PUT /v1/sprites/{name}` with `labels` and/or `url_settings` (PROTOCOL.md §4.3).
fn update(state: &State, sprite: &Sprite, request: &SimRequest) -> SimResponse {
    let bad = |m: &str| error(400, "invalid_request", m);
    let body: Map<String, Value> = match request.json::<Value>() {
        Ok(Value::Object(map)) => map,
        Ok(_) => return bad("the body must be a JSON object"),
        Err(e) => return bad(&e),
    };
    let labels = match body.get("labels") {
        None | Some(Value::Null) => None,
        Some(v) => match strings(v) {
            Some(l) => Some(l),
            None => return bad("labels must be a list of strings"),
        },
    };
    let url_settings = match body.get("url_settings") {
        None | Some(Value::Null) => None,
        Some(Value::Object(m)) => Some(m),
        Some(_) => return bad("url_settings must be an object"),
    };
    if labels.is_none() && url_settings.is_none() {
        return bad("url_settings or labels is required");
    }
    sprite.update(labels, url_settings);
    SimResponse::json(200, &sprite.to_json(&state.settings))
}

/// `DELETE /v1/sprites/{name}`: kills its sessions, removes its disk and checkpoints; the
/// name answers 404 from then on (PROTOCOL.md §4.3).
async fn destroy(state: &State, name: &str) -> SimResponse {
    let Some(sprite) = state.remove(name) else {
        return no_sprite(name);
    };
    sprite.kill_all();
    lock(&sprite.sessions).clear();
    let checkpoints = sprite.checkpoint_dir("x");
    if let Some(dir) = checkpoints.parent() {
        let _ = std::fs::remove_dir_all(dir);
    }
    let _ = sandbox_sdk_core::Sandbox::destroy(&sprite.local).await;
    SimResponse::empty(204)
}
