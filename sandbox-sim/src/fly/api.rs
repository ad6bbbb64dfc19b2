//! The Machines API's endpoints: routing, auth, rate limits, and each endpoint's behaviour.
//! State transitions run as tasks on the server's runtime (its clock), the machines' processes
//! on the [`Host`].

// An endpoint's refusal is its whole HTTP answer, made once per request: boxing it buys nothing.
#![allow(clippy::result_large_err)]

use super::Settings;
use super::host::{ExecEnd, Host};
use super::limits::Limits;
use super::machine::{Event, Lease, Machine, SETTLED, machine_name, ulid};
use crate::{Handler, SimRequest, SimResponse};
use futures::future::BoxFuture;
use http::Method;
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

/// The header carrying a lease's nonce.
const NONCE: &str = "fly-machine-lease-nonce";

/// `/wait`'s accepted target states.
const WAIT_STATES: &[&str] = &[
    "started",
    "stopped",
    "suspended",
    "destroyed",
    "failed",
    "settled",
];

/// A lifecycle step run in the background after the request that began it was answered.
#[derive(Clone, Copy, Debug)]
enum Step {
    Start,
    Stop,
    Suspend,
    Destroy,
    /// Restart, or an update of a started machine: a fresh boot with the (new) config.
    Reboot,
}

impl Step {
    /// The transient state, the final one, and the event kind.
    fn states(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Step::Start => ("starting", "started", "start"),
            Step::Stop => ("stopping", "stopped", "stop"),
            Step::Suspend => ("suspending", "suspended", "suspend"),
            Step::Destroy => ("destroying", "destroyed", "destroy"),
            Step::Reboot => ("restarting", "started", "restart"),
        }
    }
}

/// Where a request goes.
enum Route {
    Apps,
    App,
    Machines,
    Machine(String),
    Action(String, String),
    MetadataKey(String, String),
    NotFound,
}

fn route(request: &SimRequest) -> (Option<String>, Route) {
    let s = request.segments();
    let s: Vec<&str> = s.iter().map(String::as_str).collect();
    match s.as_slice() {
        ["v1", "apps"] => (None, Route::Apps),
        ["v1", "apps", app, rest @ ..] => {
            let app = Some((*app).to_owned());
            let route = match rest {
                [] => Route::App,
                ["machines"] => Route::Machines,
                ["machines", id] => Route::Machine((*id).to_owned()),
                ["machines", id, action] => Route::Action((*id).to_owned(), (*action).to_owned()),
                ["machines", id, "metadata", key] => {
                    Route::MetadataKey((*id).to_owned(), (*key).to_owned())
                }
                _ => Route::NotFound,
            };
            (app, route)
        }
        _ => (None, Route::NotFound),
    }
}

/// `{"error": message}` with `status`.
pub(crate) fn error(status: u16, message: &str) -> SimResponse {
    SimResponse::json(status, &json!({ "error": message }))
}

/// The lease family's error envelope.
fn lease_error(status: u16, message: &str) -> SimResponse {
    SimResponse::json(status, &json!({ "status": "error", "message": message }))
}

fn ok() -> SimResponse {
    SimResponse::json(200, &json!({ "ok": true }))
}

/// Go's own answer for a route it does not serve.
fn page_not_found() -> SimResponse {
    SimResponse::bytes(
        404,
        Some("text/plain; charset=utf-8"),
        "404 page not found\n".into(),
    )
}

fn not_found(id: &str) -> SimResponse {
    error(404, &format!("machine {id} not found"))
}

/// Go's message for a JSON value of the wrong type in a request body.
fn wrong_type(value: &Value, field: &str, want: &str) -> String {
    let got = match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    format!("json: cannot unmarshal {got} into Go struct field {field} of type {want}")
}

/// The request body as a JSON object (an empty body is an empty object), or a 400.
fn body_object(request: &SimRequest, go_type: &str) -> Result<Map<String, Value>, SimResponse> {
    if request.body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    match serde_json::from_slice::<Value>(&request.body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(error(
            400,
            &wrong_type(&other, "", go_type)
                .replace("Go struct field  of type", "Go value of type"),
        )),
        Err(e) => Err(error(400, &format!("invalid JSON body: {e}"))),
    }
}

/// Checks the types of known fields: `(name, "string" | "bool" | "integer" | "object")`.
fn check_fields(
    body: &Map<String, Value>,
    go_type: &str,
    fields: &[(&str, &str)],
) -> Result<(), SimResponse> {
    for (name, want) in fields {
        let Some(value) = body.get(*name) else {
            continue;
        };
        let fits = match *want {
            "string" => value.is_string(),
            "bool" => value.is_boolean(),
            "integer" => value.is_i64() || value.is_u64(),
            "object" => value.is_object(),
            _ => true,
        };
        if !fits && !value.is_null() {
            let go = match *want {
                "integer" => "int",
                "object" => "map",
                other => other,
            };
            return Err(error(
                400,
                &wrong_type(value, &format!("{go_type}.{name}"), go),
            ));
        }
    }
    Ok(())
}

/// The simulated API: settings, machines, rate limits and the hosts.
pub(crate) struct Fly {
    pub settings: Settings,
    apps: Mutex<std::collections::BTreeSet<String>>,
    machines: Mutex<HashMap<String, Machine>>,
    changed: tokio::sync::watch::Sender<u64>,
    limits: Limits,
    /// Whether the rate limits apply now (from the settings; switchable while running).
    pub limited: std::sync::atomic::AtomicBool,
    pub host: Host,
    seq: AtomicU64,
}

/// The [`Handler`] over a shared [`Fly`].
struct FlyHandler(Arc<Fly>);

impl Fly {
    pub fn new(settings: Settings) -> std::io::Result<Fly> {
        Ok(Fly {
            limited: std::sync::atomic::AtomicBool::new(settings.rate_limits),
            apps: Mutex::new([settings.app.clone()].into()),
            settings,
            machines: Mutex::default(),
            changed: tokio::sync::watch::channel(0).0,
            limits: Limits::default(),
            host: Host::new()?,
            seq: AtomicU64::new(0),
        })
    }

    pub fn handler(self: Arc<Self>) -> Arc<dyn Handler> {
        Arc::new(FlyHandler(self))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Machine>> {
        self.machines.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` on machine `id` (destroyed ones included) and wakes every `/wait`.
    fn with<T>(&self, id: &str, f: impl FnOnce(&mut Machine) -> T) -> Option<T> {
        let out = self.lock().get_mut(id).map(f);
        self.changed.send_modify(|n| *n += 1);
        out
    }

    /// Makes app `name` (`false` when it exists).
    pub fn add_app(&self, name: &str) -> bool {
        let mut apps = self.apps.lock().unwrap_or_else(|e| e.into_inner());
        apps.insert(name.to_owned())
    }

    fn has_app(&self, name: &str) -> bool {
        let apps = self.apps.lock().unwrap_or_else(|e| e.into_inner());
        apps.contains(name)
    }

    pub fn state_of(&self, id: &str) -> Option<String> {
        self.lock().get(id).map(|m| m.state.clone())
    }

    pub fn live_machines(&self) -> usize {
        self.lock()
            .values()
            // A destroy the API accepted counts as done, as for the caller.
            .filter(|m| !matches!(m.state.as_str(), "destroyed" | "destroying"))
            .count()
    }

    /// Begins `step` on `m` (its transient state and event); the caller then runs
    /// [`Fly::spawn_step`] with the generation returned, once the lock is released.
    fn begin(m: &mut Machine, step: Step) -> u64 {
        let (transient, _, kind) = step.states();
        m.generation += 1;
        m.set_state(transient, Some((kind, "user")));
        m.generation
    }

    /// Finishes `step` of generation `generation` unless another transition began since.
    fn finish(&self, id: &str, generation: u64, step: Step) {
        let (_, done, kind) = step.states();
        self.with(id, |m| {
            if m.generation == generation {
                m.set_state(done, Some((kind, "flyd")));
                if done == "destroyed" {
                    m.destroyed = Some(Instant::now());
                    m.lease = None;
                }
            }
        });
    }

    fn current(&self, id: &str, generation: u64) -> bool {
        self.lock()
            .get(id)
            .is_some_and(|m| m.generation == generation)
    }

    /// Runs the host side of `step`, then waits out the step's duration and finishes it.
    fn spawn_step(self: &Arc<Self>, id: String, generation: u64, step: Step) {
        let fly = self.clone();
        tokio::spawn(async move {
            let begun = Instant::now();
            let lock = fly.host.lock(&id);
            let guard = lock.lock().await;
            if !fly.current(&id, generation) {
                return;
            }
            let s = &fly.settings;
            let took = match step {
                Step::Start => s.start_time,
                Step::Reboot => s.stop_time + s.start_time,
                Step::Stop | Step::Suspend | Step::Destroy => s.stop_time,
            };
            let booted = match step {
                Step::Stop | Step::Destroy => {
                    fly.host.halt(&id).await;
                    Ok(())
                }
                Step::Suspend => {
                    fly.host.freeze(&id).await;
                    Ok(())
                }
                Step::Reboot => {
                    fly.host.halt(&id).await;
                    fly.boot(&id).await
                }
                Step::Start => fly.boot(&id).await,
            };
            drop(guard);
            if let Err(why) = booted {
                fly.with(&id, |m| {
                    if m.generation == generation {
                        m.set_state("failed", Some(("launch", "flyd")));
                        if let Some(event) = m.events.last_mut() {
                            event.request = Some(json!({ "error": why }));
                        }
                    }
                });
                return;
            }
            tokio::time::sleep_until(begun + took).await;
            fly.finish(&id, generation, step);
        });
    }

    /// Boots machine `id` (thaws a frozen one) and, on a fresh boot, starts its main process.
    async fn boot(self: &Arc<Self>, id: &str) -> Result<(), String> {
        let Some((env, main)) = self.with(id, |m| (m.env(), m.main_process())) else {
            return Err("machine vanished".into());
        };
        let fresh = self.host.boot(id, env).await?;
        let Some(argv) = main.filter(|_| fresh) else {
            return Ok(());
        };
        let boot = self.with(id, |m| m.generation).unwrap_or_default();
        let fly = Arc::downgrade(self);
        let machine = id.to_owned();
        let exited = move |status: sandbox_sdk_core::ExitStatus| {
            if let Some(fly) = Weak::upgrade(&fly) {
                fly.main_exited(&machine, boot, status);
            }
        };
        self.host.spawn_main(id, argv, exited).await
    }

    /// The main process of boot `boot` ended: a machine that was up stops, with an exit event.
    fn main_exited(self: &Arc<Self>, id: &str, boot: u64, status: sandbox_sdk_core::ExitStatus) {
        let stopped = self.with(id, |m| {
            let up = matches!(m.state.as_str(), "starting" | "started" | "restarting");
            // A start that is still under way carries the generation of the boot.
            if !up || m.generation != boot {
                return None;
            }
            m.generation += 1;
            m.set_state("stopped", Some(("exit", "flyd")));
            if let Some(event) = m.events.last_mut() {
                event.request = Some(json!({
                    "exit_event": {
                        "exit_code": status.code.unwrap_or(-1),
                        "guest_exit_code": status.code.unwrap_or(-1),
                        "guest_signal": status.signal.unwrap_or(-1),
                        "signal": status.signal.unwrap_or(-1),
                        "oom_killed": false,
                        "requested_stop": false,
                        "restarting": false,
                        "exited_at": sandbox_sdk_core::time::format_rfc3339(SystemTime::now()),
                    },
                    "restart_count": 0,
                }));
            }
            Some(m.generation)
        });
        if let Some(Some(generation)) = stopped {
            // The VM is down: its other processes go with it.
            let fly = self.clone();
            let id = id.to_owned();
            tokio::spawn(async move {
                let lock = fly.host.lock(&id);
                let _guard = lock.lock().await;
                if fly.current(&id, generation) {
                    fly.host.halt(&id).await;
                }
            });
        }
    }

    fn authorized(&self, request: &SimRequest) -> bool {
        let token = &self.settings.token;
        request.header("authorization").is_some_and(|h| {
            let h = h.trim();
            h.strip_prefix("Bearer ")
                .or_else(|| h.strip_prefix("FlyV1 "))
                .is_some_and(|t| t.trim() == token)
        })
    }

    /// 409 when a live lease is held and `request` does not carry its nonce.
    fn leased(m: &Machine, request: &SimRequest) -> Option<SimResponse> {
        let lease = m.live_lease()?;
        if request.header(NONCE) == Some(lease.nonce.as_str()) {
            return None;
        }
        let expires = sandbox_sdk_core::time::format_rfc3339(
            SystemTime::UNIX_EPOCH + Duration::from_secs(lease.expires_at),
        );
        Some(lease_error(
            409,
            &format!(
                "machine ID {} lease currently held by {}, expires at {expires}",
                m.id, lease.owner
            ),
        ))
    }

    /// Serves an admitted request ([`Handler::admit`] checked its token).
    async fn serve(self: Arc<Self>, op: &'static str, request: SimRequest) -> SimResponse {
        let (app, route) = route(&request);
        match (&route, &app) {
            (Route::NotFound, _) => return page_not_found(),
            (Route::Apps, _) if request.method == Method::POST => return self.create_app(&request),
            (Route::Apps, _) => return page_not_found(),
            (_, Some(app)) if self.has_app(app) => {}
            _ => return error(404, "app not found"),
        }
        let app = app.unwrap_or_default();
        let machine = match &route {
            Route::Machine(id) | Route::Action(id, _) | Route::MetadataKey(id, _) => Some(id),
            _ => None,
        };
        // A machine of another app is not found in this one.
        if let Some(id) = machine
            && self.lock().get(id).is_some_and(|m| m.app != app)
        {
            return not_found(id);
        }
        if self.limited.load(std::sync::atomic::Ordering::Relaxed) {
            let scope = machine.unwrap_or(&app);
            // Each endpoint is its own action: Create, Get and Release Lease are counted apart.
            let action = match op {
                "lease" | "metadata" => format!("{op} {}", request.method),
                _ => op.to_owned(),
            };
            if let Err(wait) = self.limits.take(&action, scope) {
                let response = error(429, "rate limit exceeded");
                return if self.settings.retry_after {
                    let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
                    response.header("retry-after", &secs.to_string())
                } else {
                    response
                };
            }
        }
        let method = request.method.clone();
        match (method, route) {
            (Method::GET, Route::App) => self.app(&app),
            (Method::GET, Route::Machines) => self.list(&app, &request),
            (Method::POST, Route::Machines) => self.create(&app, &request),
            (Method::GET, Route::Machine(id)) => self.get(&id, &request),
            (Method::POST, Route::Machine(id)) => self.update(&id, &request),
            (Method::DELETE, Route::Machine(id)) => self.destroy(&id, &request),
            (Method::GET, Route::Action(id, a)) if a == "wait" => self.wait(&id, &request).await,
            (Method::POST, Route::Action(id, a)) if a == "exec" => self.exec(&id, &request).await,
            (Method::GET, Route::Action(id, a)) if a == "events" => self.events(&id, &request),
            (m, Route::Action(id, a)) if a == "lease" => self.lease(&id, m, &request),
            (m, Route::Action(id, a)) if a == "metadata" => self.metadata(&id, m, &request),
            (m, Route::MetadataKey(id, key)) => self.metadata_key(&id, &key, m, &request),
            (Method::POST, Route::Action(id, a)) => self.action(&id, &a, &request),
            _ => page_not_found(),
        }
    }

    /// `POST /v1/apps` `{"name", "org_slug"}`: 201, or 422 `name_taken`.
    fn create_app(&self, request: &SimRequest) -> SimResponse {
        let body = match body_object(request, "main.CreateAppRequest") {
            Ok(b) => b,
            Err(response) => return response,
        };
        let name = body
            .get("name")
            .or_else(|| body.get("app_name"))
            .and_then(Value::as_str)
            .unwrap_or("");
        if name.is_empty() {
            return error(400, "app name is required");
        }
        if !self.add_app(name) {
            return SimResponse::json(
                422,
                &json!({ "error": "app name already taken", "status": "name_taken" }),
            );
        }
        SimResponse::json(
            201,
            &json!({
                "id": super::machine::hex(16),
                "created_at": super::machine::unix_ms(SystemTime::now()),
            }),
        )
    }

    fn app(&self, app: &str) -> SimResponse {
        let count = self
            .lock()
            .values()
            .filter(|m| m.app == app && m.state != "destroyed")
            .count();
        SimResponse::json(
            200,
            &json!({
                "id": format!("{:x}", super::machine::random_u64()),
                "name": app,
                "status": "deployed",
                "organization": { "name": "Personal", "slug": "personal" },
                "machine_count": count,
                "volume_count": 0,
            }),
        )
    }

    fn list(&self, app: &str, request: &SimRequest) -> SimResponse {
        let flag = |name: &str| request.query_param(name).as_deref() == Some("true");
        let (deleted, summary, leases) = (
            flag("include_deleted"),
            flag("summary"),
            flag("include_leases"),
        );
        let states: Vec<String> = request
            .query_all("state")
            .iter()
            .flat_map(|s| s.split(','))
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        let region = request.query_param("region").filter(|r| !r.is_empty());
        let wanted: Vec<(String, String)> = request
            .query_pairs()
            .filter_map(|(k, v)| Some((k.strip_prefix("metadata.")?.to_owned(), v)))
            .collect();
        let machines = self.lock();
        let mut found: Vec<&Machine> = machines
            .values()
            .filter(|m| m.app == app)
            .filter(|m| deleted || m.state != "destroyed")
            .filter(|m| states.is_empty() || states.contains(&m.state))
            .filter(|m| region.as_ref().is_none_or(|r| *r == m.region))
            .filter(|m| {
                let metadata = m.metadata();
                wanted
                    .iter()
                    .all(|(k, v)| metadata.get(k).and_then(Value::as_str) == Some(v.as_str()))
            })
            .collect();
        found.sort_by_key(|m| m.seq);
        let list: Vec<Value> = found.iter().map(|m| m.to_json(summary, leases)).collect();
        SimResponse::json(200, &list)
    }

    fn create(self: &Arc<Self>, app: &str, request: &SimRequest) -> SimResponse {
        let body = match body_object(request, "api.LaunchMachineInput") {
            Ok(b) => b,
            Err(response) => return response,
        };
        let fields = [
            ("config", "object"),
            ("name", "string"),
            ("region", "string"),
            ("skip_launch", "bool"),
            ("skip_service_registration", "bool"),
            ("lease_ttl", "integer"),
        ];
        if let Err(response) = check_fields(&body, "api.LaunchMachineInput", &fields) {
            return response;
        }
        let config = body.get("config").cloned().unwrap_or(Value::Null);
        if config["image"].as_str().is_none_or(|i| i.trim().is_empty()) {
            return error(400, "invalid config.image, cannot be empty");
        }
        let name = body
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .map(str::to_owned)
            .unwrap_or_else(machine_name);
        let region = body
            .get("region")
            .and_then(Value::as_str)
            .filter(|r| !r.is_empty())
            .unwrap_or(&self.settings.region)
            .to_owned();
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let mut machine = Machine::new(seq, app.to_owned(), name, region, config);
        let lease_ttl = body
            .get("lease_ttl")
            .and_then(Value::as_u64)
            .filter(|t| *t > 0);
        if let Some(ttl) = lease_ttl {
            machine.lease = Some(Lease::new(
                Duration::from_secs(ttl),
                &self.settings.owner,
                "",
                &machine.instance_id,
            ));
        }
        let mut answer = machine.to_json(false, false);
        if let Some(lease) = &machine.lease {
            answer["nonce"] = json!(lease.nonce);
        }
        let id = machine.id.clone();
        let launch = body.get("skip_launch").and_then(Value::as_bool) != Some(true);
        let generation = launch.then(|| Self::begin(&mut machine, Step::Start));
        self.lock().insert(id.clone(), machine);
        self.changed.send_modify(|n| *n += 1);
        if let Some(generation) = generation {
            self.spawn_step(id, generation, Step::Start);
        }
        SimResponse::json(200, &answer)
    }

    /// The machine, unless it is unknown or was destroyed longer ago than the linger.
    fn visible<T>(&self, id: &str, f: impl FnOnce(&mut Machine) -> T) -> Option<T> {
        let linger = self.settings.destroyed_linger;
        let mut machines = self.lock();
        let m = machines.get_mut(id)?;
        if m.destroyed.is_some_and(|at| at.elapsed() >= linger) {
            return None;
        }
        Some(f(m))
    }

    fn get(&self, id: &str, request: &SimRequest) -> SimResponse {
        let leases = request.query_param("include_leases").as_deref() == Some("true");
        match self.visible(id, |m| m.to_json(false, leases)) {
            Some(machine) => SimResponse::json(200, &machine),
            None => not_found(id),
        }
    }

    fn update(self: &Arc<Self>, id: &str, request: &SimRequest) -> SimResponse {
        let body = match body_object(request, "api.LaunchMachineInput") {
            Ok(b) => b,
            Err(response) => return response,
        };
        let fields = [
            ("config", "object"),
            ("current_version", "string"),
            ("skip_launch", "bool"),
        ];
        if let Err(response) = check_fields(&body, "api.LaunchMachineInput", &fields) {
            return response;
        }
        let config = body.get("config").cloned().unwrap_or(Value::Null);
        if config["image"].as_str().is_none_or(|i| i.trim().is_empty()) {
            return error(400, "invalid config.image, cannot be empty");
        }
        let skip_launch = body.get("skip_launch").and_then(Value::as_bool) == Some(true);
        let outcome = self.with(id, |m| {
            if m.state == "destroyed" || m.state == "destroying" {
                return Err(not_found(id));
            }
            if let Some(conflict) = Self::leased(m, request) {
                return Err(conflict);
            }
            if let Some(version) = body.get("current_version").and_then(Value::as_str)
                && version != m.instance_id
            {
                return Err(error(
                    409,
                    &format!("current version {version} does not match {}", m.instance_id),
                ));
            }
            m.config = config.clone();
            m.instance_id = ulid();
            m.events
                .push(Event::new("update", &m.state.clone(), "user"));
            let reboot = m.state == "started" && !skip_launch;
            let generation = reboot.then(|| Self::begin(m, Step::Reboot));
            Ok((m.to_json(false, false), generation))
        });
        match outcome {
            None => not_found(id),
            Some(Err(response)) => response,
            Some(Ok((machine, generation))) => {
                if let Some(generation) = generation {
                    self.spawn_step(id.to_owned(), generation, Step::Reboot);
                }
                SimResponse::json(200, &machine)
            }
        }
    }

    fn destroy(self: &Arc<Self>, id: &str, request: &SimRequest) -> SimResponse {
        let force = ["force", "kill"]
            .iter()
            .any(|k| request.query_param(k).as_deref() == Some("true"));
        let outcome = self.with(id, |m| {
            if m.state == "destroyed" || m.state == "destroying" {
                return Err(not_found(id));
            }
            if let Some(conflict) = Self::leased(m, request) {
                return Err(conflict);
            }
            let at_rest = matches!(
                m.state.as_str(),
                "stopped" | "suspended" | "failed" | "created"
            );
            if !force && !at_rest {
                return Err(error(
                    412,
                    &format!(
                        "unable to destroy machine from current state: '{}'; stop it first or set force=true",
                        m.state
                    ),
                ));
            }
            Ok(Self::begin(m, Step::Destroy))
        });
        match outcome {
            None => not_found(id),
            Some(Err(response)) => response,
            Some(Ok(generation)) => {
                self.spawn_step(id.to_owned(), generation, Step::Destroy);
                ok()
            }
        }
    }

    /// `start`, `stop`, `suspend`, `restart`, `signal`, `cordon`, `uncordon`.
    fn action(self: &Arc<Self>, id: &str, action: &str, request: &SimRequest) -> SimResponse {
        if !matches!(
            action,
            "start" | "stop" | "suspend" | "restart" | "signal" | "cordon" | "uncordon"
        ) {
            return page_not_found();
        }
        let body = match action {
            "stop" => match body_object(request, "main.stopRequest") {
                Ok(b) => b,
                Err(response) => return response,
            },
            "signal" => match body_object(request, "main.signalRequest") {
                Ok(b) => b,
                Err(response) => return response,
            },
            _ => Map::new(),
        };
        if action == "stop"
            && let Err(response) = check_fields(
                &body,
                "main.stopRequest",
                &[("signal", "string"), ("timeout", "string")],
            )
        {
            return response;
        }
        let outcome = self.with(id, |m| -> Result<(SimResponse, Option<(u64, Step)>), SimResponse> {
            if m.state == "destroyed" || m.state == "destroying" {
                return Err(not_found(id));
            }
            if let Some(conflict) = Self::leased(m, request) {
                return Err(conflict);
            }
            let state = m.state.clone();
            let refuse = |what: &str| {
                Err(error(
                    412,
                    &format!("unable to {what} machine from current state: '{state}'"),
                ))
            };
            match action {
                "start" => match state.as_str() {
                    "stopped" | "suspended" | "created" | "failed" => {
                        let generation = Self::begin(m, Step::Start);
                        let answer = SimResponse::json(
                            200,
                            &json!({ "previous_state": state, "migrated": false, "new_host": "" }),
                        );
                        Ok((answer, Some((generation, Step::Start))))
                    }
                    _ => refuse("start"),
                },
                "stop" => match state.as_str() {
                    "stopped" | "stopping" | "created" | "failed" => Ok((ok(), None)),
                    _ => Ok((ok(), Some((Self::begin(m, Step::Stop), Step::Stop)))),
                },
                "suspend" => match state.as_str() {
                    "started" => Ok((ok(), Some((Self::begin(m, Step::Suspend), Step::Suspend)))),
                    "suspended" | "suspending" => Ok((ok(), None)),
                    _ => refuse("suspend"),
                },
                "restart" => match state.as_str() {
                    "started" => Ok((ok(), Some((Self::begin(m, Step::Reboot), Step::Reboot)))),
                    _ => refuse("restart"),
                },
                "signal" => match state.as_str() {
                    "started" => Ok((ok(), None)),
                    _ => refuse("signal"),
                },
                _ => {
                    m.cordoned = action == "cordon";
                    Ok((ok(), None))
                }
            }
        });
        match outcome {
            None => not_found(id),
            Some(Err(response)) => response,
            Some(Ok((answer, step))) => {
                if let Some((generation, step)) = step {
                    self.spawn_step(id.to_owned(), generation, step);
                }
                if action == "signal" && signal_ends(&body) {
                    let fly = self.clone();
                    let id = id.to_owned();
                    tokio::spawn(async move { fly.host.kill_main(&id).await });
                }
                answer
            }
        }
    }

    async fn wait(&self, id: &str, request: &SimRequest) -> SimResponse {
        let mut targets: Vec<String> = request
            .query_all("state")
            .iter()
            .flat_map(|s| s.split(','))
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        if targets.is_empty() {
            targets.push("started".to_owned());
        }
        if let Some(bad) = targets.iter().find(|t| !WAIT_STATES.contains(&t.as_str())) {
            return error(400, &format!("invalid_argument: invalid state {bad:?}"));
        }
        let timeout = match request.query_param("timeout") {
            None => 60,
            Some(t) => match t.trim_end_matches('s').parse::<u64>() {
                Ok(secs) => secs,
                Err(_) => return error(400, &format!("invalid_argument: invalid timeout {t:?}")),
            },
        };
        if !(1..=60).contains(&timeout) {
            return error(400, "invalid_argument: timeout must be within [1s, 1m0s]");
        }
        let version = request
            .query_param("version")
            .or_else(|| request.query_param("instance_id"))
            .filter(|v| !v.is_empty());
        let deadline = Instant::now() + Duration::from_secs(timeout);
        let mut changes = self.changed.subscribe();
        loop {
            changes.mark_unchanged();
            let now = {
                let machines = self.lock();
                let Some(m) = machines.get(id) else {
                    return not_found(id);
                };
                let state = match &version {
                    Some(v) if *v != m.instance_id => "replaced".to_owned(),
                    _ => m.state.clone(),
                };
                let reached = targets
                    .iter()
                    .any(|t| *t == state || (t == "settled" && SETTLED.contains(&state.as_str())));
                if reached {
                    return SimResponse::json(
                        200,
                        &json!({
                            "ok": true,
                            "state": state,
                            "version": m.instance_id,
                            "event_id": m.events.last().map(|e| e.id.clone()),
                        }),
                    );
                }
                state
            };
            if tokio::time::timeout_at(deadline, changes.changed())
                .await
                .is_err()
            {
                return error(
                    408,
                    &format!(
                        "machine failed to reach desired state, {}, currently {now}",
                        targets.join(", ")
                    ),
                );
            }
        }
    }

    async fn exec(&self, id: &str, request: &SimRequest) -> SimResponse {
        let body = match body_object(request, "api.MachineExecRequest") {
            Ok(b) => b,
            Err(response) => return response,
        };
        let fields = [
            ("cmd", "string"),
            ("timeout", "integer"),
            ("stdin", "string"),
            ("container", "string"),
            ("machine", "bool"),
        ];
        if let Err(response) = check_fields(&body, "api.MachineExecRequest", &fields) {
            return response;
        }
        let command: Option<Vec<String>> = match body.get("command") {
            None | Some(Value::Null) => None,
            Some(Value::Array(items)) if items.iter().all(Value::is_string) => Some(
                items
                    .iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect(),
            ),
            Some(other) => {
                return error(
                    400,
                    &wrong_type(other, "api.MachineExecRequest.command", "[]string"),
                );
            }
        };
        let argv = command.filter(|c| !c.is_empty()).unwrap_or_else(|| {
            body.get("cmd")
                .and_then(Value::as_str)
                .unwrap_or("")
                .split_whitespace()
                .map(str::to_owned)
                .collect()
        });
        if argv.is_empty() {
            return error(400, "invalid_argument: command is required");
        }
        let cap = self.settings.exec_deadline;
        let deadline = match body.get("timeout").and_then(Value::as_u64) {
            Some(secs) if secs > 0 => Duration::from_secs(secs).min(cap),
            _ => cap,
        };
        let state = self.visible(id, |m| m.state.clone());
        match state.as_deref() {
            None | Some("destroyed") => return not_found(id),
            Some("started") => {}
            Some(other) => {
                return error(
                    412,
                    &format!("failed_precondition: machine is {other}, not started"),
                );
            }
        }
        let stdin = body.get("stdin").and_then(Value::as_str).map(str::to_owned);
        match self.host.exec(id, argv, stdin, deadline).await {
            ExecEnd::Done(output) => SimResponse::json(
                200,
                &json!({
                    "stdout": String::from_utf8_lossy(&output.stdout),
                    "stderr": String::from_utf8_lossy(&output.stderr),
                    "exit_code": output.status.code.unwrap_or(-1),
                    "exit_signal": output.status.signal.unwrap_or(0),
                }),
            ),
            ExecEnd::TimedOut => error(
                408,
                &format!(
                    "deadline_exceeded: command did not finish within {}s",
                    deadline.as_secs()
                ),
            ),
            ExecEnd::Failed(why) => error(412, &format!("failed_precondition: {why}")),
        }
    }

    fn events(&self, id: &str, request: &SimRequest) -> SimResponse {
        let limit = request
            .query_param("limit")
            .and_then(|l| l.parse::<usize>().ok())
            .unwrap_or(20)
            .clamp(1, 50);
        match self.visible(id, |m| m.events_json(limit)) {
            Some(events) => SimResponse::json(200, &events),
            None => not_found(id),
        }
    }

    fn lease(&self, id: &str, method: Method, request: &SimRequest) -> SimResponse {
        let owner = self.settings.owner.clone();
        let nonce = request.header(NONCE).map(str::to_owned);
        let body = match method {
            Method::POST => match body_object(request, "api.CreateLeaseRequest") {
                Ok(b) => b,
                Err(response) => return response,
            },
            Method::GET | Method::DELETE => Map::new(),
            _ => return page_not_found(),
        };
        let ttl = body
            .get("ttl")
            .and_then(Value::as_u64)
            .or_else(|| request.query_param("ttl").and_then(|t| t.parse().ok()))
            .filter(|t| *t > 0)
            .unwrap_or(30);
        let description = body
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let outcome = self.visible(id, |m| {
            if m.state == "destroyed" {
                return lease_error(404, "machine not found");
            }
            let envelope = |status: u16, data: Value| {
                SimResponse::json(status, &json!({ "status": "success", "data": data }))
            };
            match method {
                Method::GET => match m.live_lease() {
                    Some(lease) => envelope(200, lease.to_json()),
                    None => lease_error(404, "lease not found"),
                },
                Method::DELETE => match (m.live_lease(), nonce.as_deref()) {
                    (None, _) => lease_error(404, "lease not found"),
                    (Some(lease), Some(n)) if n == lease.nonce => {
                        m.lease = None;
                        envelope(200, json!({ "ok": true }))
                    }
                    (Some(_), _) => lease_error(409, "lease nonce does not match"),
                },
                _ => {
                    if let Some(conflict) = Self::leased(m, request) {
                        return conflict;
                    }
                    let ttl = Duration::from_secs(ttl);
                    let lease = match m.lease.take().filter(|l| l.live()) {
                        // The holder refreshes its lease: same nonce, new expiry.
                        Some(held) => Lease {
                            nonce: held.nonce,
                            ..Lease::new(ttl, &held.owner, &description, &m.instance_id)
                        },
                        None => Lease::new(ttl, &owner, &description, &m.instance_id),
                    };
                    let data = lease.to_json();
                    m.lease = Some(lease);
                    envelope(201, data)
                }
            }
        });
        outcome.unwrap_or_else(|| lease_error(404, "machine not found"))
    }

    fn metadata(&self, id: &str, method: Method, request: &SimRequest) -> SimResponse {
        let body = match method {
            Method::GET => Map::new(),
            Method::PUT | Method::PATCH => match body_object(request, "main.updateMetadataRequest")
            {
                Ok(b) => b,
                Err(response) => return response,
            },
            _ => return page_not_found(),
        };
        let outcome = self.visible(id, |m| {
            if method == Method::GET {
                return SimResponse::json(200, &m.metadata());
            }
            if let Some(version) = body.get("machine_version").and_then(Value::as_str)
                && version != m.instance_id
            {
                return error(412, "machine version mismatch");
            }
            let Some(changes) = body.get("metadata").and_then(Value::as_object) else {
                return error(400, "metadata is required");
            };
            let mut metadata = m.metadata();
            for (k, v) in changes {
                match v.as_str() {
                    Some(text) if !text.is_empty() => {
                        metadata.insert(k.clone(), json!(text));
                    }
                    _ => {
                        metadata.remove(k);
                    }
                }
            }
            m.set_metadata(metadata);
            SimResponse::empty(204)
        });
        outcome.unwrap_or_else(|| not_found(id))
    }

    fn metadata_key(
        &self,
        id: &str,
        key: &str,
        method: Method,
        request: &SimRequest,
    ) -> SimResponse {
        let value = match method {
            Method::POST => match body_object(request, "main.upsertMetadataKeyRequest") {
                Ok(b) => match b.get("value").and_then(Value::as_str) {
                    Some(v) => Some(v.to_owned()),
                    None => return error(400, "value is required"),
                },
                Err(response) => return response,
            },
            Method::GET | Method::DELETE => None,
            _ => return page_not_found(),
        };
        let outcome = self.visible(id, |m| {
            let mut metadata = m.metadata();
            match method {
                Method::GET => match metadata.get(key) {
                    Some(v) => SimResponse::json(200, &json!({ "value": v })),
                    None => error(404, &format!("metadata key {key:?} not found")),
                },
                Method::DELETE => {
                    metadata.remove(key);
                    m.set_metadata(metadata);
                    SimResponse::empty(204)
                }
                _ => {
                    metadata.insert(key.to_owned(), json!(value));
                    m.set_metadata(metadata);
                    SimResponse::empty(204)
                }
            }
        });
        outcome.unwrap_or_else(|| not_found(id))
    }
}

/// Whether a `/signal` body names a signal that ends a process (SIGKILL, SIGTERM, SIGINT,
/// SIGQUIT, SIGHUP, by name or number).
fn signal_ends(body: &Map<String, Value>) -> bool {
    match body.get("signal") {
        Some(Value::String(s)) => matches!(
            s.trim_start_matches("SIG"),
            "KILL" | "TERM" | "INT" | "QUIT" | "HUP"
        ),
        Some(Value::Number(n)) => matches!(n.as_u64(), Some(1 | 2 | 3 | 9 | 15)),
        _ => false,
    }
}

impl Handler for FlyHandler {
    /// The token, then the body cap: `/exec` carries the command's whole stdin (up to
    /// [`crate::MAX_REQUEST_BODY`]), every other body is JSON.
    fn admit(&self, head: &SimRequest) -> Result<usize, SimResponse> {
        if !self.0.authorized(head) {
            return Err(self.error(401, "You must be authenticated to view this."));
        }
        Ok(match route(head).1 {
            Route::Action(_, action) if action == "exec" => crate::MAX_REQUEST_BODY,
            _ => crate::MAX_JSON_BODY,
        })
    }

    fn operation(&self, request: &SimRequest) -> &'static str {
        let post = request.method == Method::POST;
        match route(request).1 {
            Route::Apps => "other",
            Route::Machines if post => "create",
            Route::Machines if request.method == Method::GET => "list",
            Route::Machine(_) => match request.method {
                Method::GET => "get",
                Method::POST => "update",
                Method::DELETE => "destroy",
                _ => "other",
            },
            Route::Action(_, action) => match action.as_str() {
                "start" => "start",
                "stop" => "stop",
                "suspend" => "pause",
                "restart" => "restart",
                "signal" => "signal",
                "cordon" => "cordon",
                "uncordon" => "uncordon",
                "wait" => "wait",
                "exec" => "exec",
                "lease" => "lease",
                "metadata" => "metadata",
                "events" => "events",
                _ => "other",
            },
            Route::MetadataKey(..) => "metadata",
            _ => "other",
        }
    }

    fn handle(&self, request: SimRequest) -> BoxFuture<'static, SimResponse> {
        let fly = self.0.clone();
        let op = self.operation(&request);
        Box::pin(async move {
            let region = fly.settings.region.clone();
            let response = fly.serve(op, request).await;
            response.header("fly-request-id", &format!("{}-{region}", ulid()))
        })
    }

    fn error(&self, status: u16, message: &str) -> SimResponse {
        error(status, message).header(
            "fly-request-id",
            &format!("{}-{}", ulid(), self.0.settings.region),
        )
    }
}
