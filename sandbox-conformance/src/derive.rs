//! Derived cassettes: the scenarios whose failure a live service will not produce on demand
//! (`error_unauthorized`, `error_conflict`, `error_rate_limited`, `error_server`,
//! `error_connection_reset`, `error_truncated_stream`, `no_duplicate_create`, `create_*`) get
//! their cassettes from what the adapter really sends.
//!
//! In record mode each such scenario records, through the recording proxy, the live calls its
//! cassette is made of — `connect(id)`, `create(..)`, `read_file(..)` of a file it wrote first,
//! two creates under one idempotency key — plus `connect` of a missing id, whose error answer
//! gives the shape of the injected error bodies. It then puts the failure in: the first request
//! of `connect` answered 401, 429 (`Retry-After: 7`), 503 or with a reset connection; the create
//! answered 409 or 503; the download truncated; the create of the `create_*` scenarios answered
//! late, reset or refused, followed by the look-ups the adapter made. The cassette is written with
//! provenance `spec` and a `source` starting [`DERIVED`] that says what it was derived from.
//!
//! An existing cassette is never overwritten (it may be hand-written); delete a derived one to
//! derive it again. A scenario whose cassette is missing and cannot be derived (the adapter made
//! no look-up before a create with a key, say) fails the recording, saying why, so the run ends
//! by listing every cassette still to be written by hand.

use crate::cassette::{
    Body, Cassette, Fault, Interaction, MISSING_ID, Order, Provenance, ProvenanceKind, ResponseSpec,
};
use crate::record::{RecordTarget, Session};
use crate::report::{Outcome, ScenarioReport};
use crate::scenarios::{CREATE_KEY, ScenarioInfo, conformance_spec};
use sandbox_sdk_core::{ErrorKind, Provider, SandboxExt};
use serde_json::Value;
use std::io::Write as _;
use std::sync::Arc;

/// How the `provenance.source` of a derived cassette starts.
pub(crate) const DERIVED: &str = "derived by sandbox-conformance";

/// Whether `cassette` was derived by the kit (not written by hand nor recorded).
pub(crate) fn is_derived(cassette: &Cassette) -> bool {
    cassette.provenance.kind == ProvenanceKind::Spec
        && cassette
            .provenance
            .source
            .as_deref()
            .is_some_and(|s| s.starts_with(DERIVED))
}

/// The delay of the late create answer in `create_slow_answer`: past
/// [`crate::REPLAY_REQUEST_TIMEOUT`].
const LATE_MS: u64 = 3000;

/// The size of the file `error_truncated_stream` reads.
const BIG_FILE: usize = 1024;

/// The path `error_truncated_stream` reads.
const BIG_PATH: &str = "conformance/big.bin";

/// How a connect or create request fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    /// Answered with this status and an error body shaped like the service's own.
    Status(u16),
    /// The connection is closed before any answer.
    Reset,
}

/// Which `create_*` scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Settle {
    /// `create_slow_answer`: the create answered past the timeout.
    Late,
    /// `create_reset`: the create's connection reset.
    Reset,
    /// `create_unavailable`: the create refused with 503, sent again.
    Unavailable,
}

/// What a derived scenario is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Plan {
    /// The first request of `connect(id)` fails.
    Connect(Failure),
    /// The create request of `create(..)` (through the retrying client, or the adapter) fails.
    Create { status: u16, retrying: bool },
    /// `connect` through the client, then `read_file` of a file, its download truncated.
    Truncate,
    /// Two creates under one idempotency key.
    Settle(Settle),
}

fn plan(scenario: &str) -> Option<Plan> {
    Some(match scenario {
        "error_unauthorized" => Plan::Connect(Failure::Status(401)),
        "error_rate_limited" => Plan::Connect(Failure::Status(429)),
        "error_server" => Plan::Connect(Failure::Status(503)),
        "error_connection_reset" => Plan::Connect(Failure::Reset),
        "error_conflict" => Plan::Create {
            status: 409,
            retrying: false,
        },
        "no_duplicate_create" => Plan::Create {
            status: 503,
            retrying: true,
        },
        "error_truncated_stream" => Plan::Truncate,
        "create_slow_answer" => Plan::Settle(Settle::Late),
        "create_reset" => Plan::Settle(Settle::Reset),
        "create_unavailable" => Plan::Settle(Settle::Unavailable),
        _ => return None,
    })
}

/// Record mode for a scenario that runs only in replay: keeps an existing cassette, or derives
/// one from live calls, or fails saying why it cannot.
pub(crate) async fn run(info: &'static ScenarioInfo, target: &RecordTarget) -> ScenarioReport {
    let mut report = ScenarioReport {
        provider: target.provider().to_owned(),
        scenario: info.name.to_owned(),
        outcome: Outcome::Passed,
        requests: None,
    };
    let path = Cassette::path_in(target.out_dir(), info.name);
    if path.exists() {
        report.outcome = Outcome::Skipped(format!(
            "kept {}: the recorder never overwrites a cassette it did not record (delete it to \
             derive it again)",
            path.display()
        ));
        return report;
    }
    let missing = |why: String| {
        Outcome::Failed(format!(
            "no cassette: {} is missing and the recorder could not derive it: {why}\n  write it \
             by hand as SCENARIOS.md describes (### {})",
            path.display(),
            info.name
        ))
    };
    let Some(plan) = plan(info.name) else {
        report.outcome = missing("the kit has no way to derive this scenario".into());
        return report;
    };
    let session = match Session::start(target).await {
        Ok(s) => s,
        Err(e) => {
            report.outcome = missing(e);
            return report;
        }
    };
    let caps = session.client(false).capabilities();
    if let Some(cap) = info.requires.filter(|c| !caps.level(*c).is_available()) {
        report.outcome = Outcome::Skipped(format!(
            "{cap} is unsupported: nothing to record (the probe replays connect.json)"
        ));
        return report;
    }
    let derived = match derive_live(info.name, plan, target, &session).await {
        Ok(c) => c,
        Err(why) => {
            report.outcome = missing(crate::proxy::redact_queries(&why));
            return report;
        }
    };
    match write_new(&path, &derived) {
        Ok(true) => println!(
            "derived {} interaction(s) to {} ({})",
            derived.interactions.len(),
            path.display(),
            derived.provenance.source.as_deref().unwrap_or_default()
        ),
        Ok(false) => {
            report.outcome = Outcome::Skipped(format!(
                "kept {}: it appeared while deriving it",
                path.display()
            ));
        }
        Err(e) => {
            report.outcome = Outcome::Failed(format!("cannot write {}: {e}", path.display()));
        }
    }
    report
}

/// Writes `cassette` to `path` unless a file is there already (`Ok(false)`).
fn write_new(path: &std::path::Path, cassette: &Cassette) -> std::io::Result<bool> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path);
    match file {
        Ok(mut file) => {
            file.write_all(cassette.to_json_pretty().as_bytes())?;
            Ok(true)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e),
    }
}

/// A unique idempotency key for one live recording, so concurrent recordings and sandboxes
/// left by earlier ones cannot answer its look-ups; written as [`CREATE_KEY`] in the cassette.
fn live_key() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!(
        "{CREATE_KEY}-rec{:x}{:x}{:x}",
        std::process::id(),
        nanos & 0xffff_ffff,
        COUNTER.fetch_add(1, Ordering::SeqCst)
    )
}

/// The create fingerprint of `live` (a spec with a [`live_key`]) and the one the same spec has
/// with [`CREATE_KEY`], which replay computes.
fn replayed_fingerprint(live: &sandbox_sdk_core::CreateSpec) -> (String, String) {
    let fingerprint = sandbox_sdk_core::idempotency::create_fingerprint;
    let mut replayed = live.clone();
    replayed.idempotency_key = Some(CREATE_KEY.to_owned());
    (
        fingerprint(live).unwrap_or_default(),
        fingerprint(&replayed).unwrap_or_default(),
    )
}

/// `connect` of [`MISSING_ID`]: it must fail with `NotFound` (its answer is the error shape).
async fn connect_missing(raw: &Arc<dyn Provider>) -> Result<(), String> {
    match raw.connect(MISSING_ID).await {
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!(
            "connect({MISSING_ID:?}) failed live with {:?}, not NotFound, so its answer cannot \
             give the shape of an error body: {e}",
            e.kind()
        )),
        Ok(_) => Err(format!(
            "connect({MISSING_ID:?}) succeeded live, so no error answer gives the shape of an \
             error body"
        )),
    }
}

/// Runs the live calls of `plan` through `session` and derives the cassette from them.
async fn derive_live(
    scenario: &str,
    plan: Plan,
    target: &RecordTarget,
    session: &Session,
) -> Result<Cassette, String> {
    let raw = session.raw.clone();
    let (interactions, from) = match plan {
        Plan::Connect(failure) => {
            let id = target.create_direct().await?;
            let recorded = async {
                raw.connect(&id)
                    .await
                    .map_err(|e| format!("connect failed live: {e}"))?;
                let connected = session.mark().await;
                connect_missing(&raw).await?;
                let c = session.cassette(target, scenario, Some(&id), &[]).await?;
                Ok::<_, String>((c, connected))
            }
            .await;
            target.destroy_direct(&id).await;
            let (c, connected) = recorded?;
            let (connect, missing) = c.interactions.split_at(connected);
            let shape = error_shape(missing)?;
            (
                connect_failure(connect, &shape, failure)?,
                "the live answers to connect(id) and connect of a missing id",
            )
        }
        Plan::Create { status, retrying } => {
            let provider = if retrying {
                session.client(true)
            } else {
                raw.clone()
            };
            let created = provider
                .create(&conformance_spec())
                .await
                .map_err(|e| format!("create failed live: {e}"))?;
            let id = created.id().to_owned();
            drop(created);
            let recorded = async {
                let made = session.mark().await;
                connect_missing(&raw).await?;
                let c = session.cassette(target, scenario, Some(&id), &[]).await?;
                Ok::<_, String>((c, made))
            }
            .await;
            target.destroy_direct(&id).await;
            let (c, made) = recorded?;
            let (create, missing) = c.interactions.split_at(made);
            let shape = error_shape(missing)?;
            (
                create_failure(create, &shape, status)?,
                "the live answers to create(suite=conformance, timeout 300s) and connect of a \
                 missing id",
            )
        }
        Plan::Truncate => {
            let id = target.create_direct().await?;
            let recorded = async {
                let data = big_file();
                target
                    .direct()
                    .connect(&id)
                    .await
                    .map_err(|e| format!("setup: connect failed: {e}"))?
                    .write_file(BIG_PATH, data.clone().into())
                    .await
                    .map_err(|e| format!("setup: write_file({BIG_PATH}) failed: {e}"))?;
                let sb = session
                    .client(false)
                    .connect(&id)
                    .await
                    .map_err(|e| format!("connect failed live: {e}"))?;
                let connected = session.mark().await;
                let back = sb
                    .read_file(BIG_PATH)
                    .await
                    .map_err(|e| format!("read_file({BIG_PATH}) failed live: {e}"))?;
                if back[..] != data[..] {
                    return Err(format!(
                        "read_file({BIG_PATH}) read {} bytes that differ from the {BIG_FILE} \
                         written",
                        back.len()
                    ));
                }
                let c = session.cassette(target, scenario, Some(&id), &[]).await?;
                Ok((c, connected))
            }
            .await;
            target.destroy_direct(&id).await;
            let (c, connected) = recorded?;
            (
                truncated(&c.interactions, connected)?,
                "the live answers to connect(id) and read_file of a 1024-byte file",
            )
        }
        Plan::Settle(settle) => {
            let key = live_key();
            let spec = conformance_spec().idempotency_key(key.clone());
            let retrying = session.client(true);
            let first = retrying
                .create(&spec)
                .await
                .map_err(|e| format!("create with an idempotency key failed live: {e}"))?;
            let id = first.id().to_owned();
            drop(first);
            let recorded = async {
                let once = session.mark().await;
                let again = retrying.create(&spec).await.map_err(|e| {
                    format!("a second create with the same idempotency key failed live: {e}")
                })?;
                if again.id() != id {
                    target.destroy_direct(again.id()).await;
                    return Err(
                        "a second create with the same idempotency key made a second sandbox \
                         live: the adapter does not look the key up"
                            .to_owned(),
                    );
                }
                let twice = session.mark().await;
                connect_missing(&raw).await?;
                let replace = [
                    (key.clone(), CREATE_KEY.to_owned()),
                    // The create fingerprint (a label, and E2B's Idempotency-Key) hashes the
                    // key: the live key's is written as the replayed key's.
                    replayed_fingerprint(&spec),
                ];
                let c = session
                    .cassette(target, scenario, Some(&id), &replace)
                    .await?;
                Ok((c, once, twice))
            }
            .await;
            target.destroy_direct(&id).await;
            let (c, once, twice) = recorded?;
            let shape = error_shape(&c.interactions[twice..])?;
            (
                settles(
                    &c.interactions[..once],
                    &c.interactions[once..twice],
                    &shape,
                    settle,
                )?,
                "the live answers to two creates under one idempotency key and connect of a \
                 missing id",
            )
        }
    };
    Ok(Cassette {
        provider: target.provider().to_owned(),
        scenario: scenario.to_owned(),
        provenance: Provenance {
            kind: ProvenanceKind::Spec,
            date: crate::record::today(),
            source: Some(format!(
                "{DERIVED} from {from} ({}), as SCENARIOS.md describes {scenario}",
                target.source_text()
            )),
        },
        order: Order::Strict,
        interactions,
    })
}

/// The 1024 bytes of `error_truncated_stream`'s file.
fn big_file() -> Vec<u8> {
    b"0123456789abcdef".repeat(BIG_FILE / 16)
}

/// Whether an interaction's answer names the sandbox the scenario made.
fn names_sandbox(interaction: &Interaction) -> bool {
    // An error answer may quote the id it did not find (Sprites' 404 names the sprite): that
    // is a look-up that found nothing, not the sandbox.
    interaction.response.status < 400
        && serde_json::to_string(&interaction.response).is_ok_and(|t| t.contains("{{sandbox_id}}"))
}

/// The error answer of a recorded `connect` of a missing id: the last answer with an error
/// status.
fn error_shape(missing: &[Interaction]) -> Result<ResponseSpec, String> {
    missing
        .iter()
        .rev()
        .find(|i| i.response.status >= 400)
        .map(|i| i.response.clone())
        .ok_or_else(|| {
            format!(
                "connect({MISSING_ID:?}) got no error answer to take an error body's shape from"
            )
        })
}

fn reason(status: u16) -> &'static str {
    match status {
        401 => "unauthorized",
        409 => "conflict",
        429 => "too many requests",
        503 => "service unavailable",
        _ => "error",
    }
}

/// An error answer with `status`, shaped like the service's own `shape`: a JSON body keeps its
/// fields, with strings replaced by a message and the old status (number or string) by the new
/// one; a text body becomes the message. `429` gets `Retry-After: 7`.
fn error_answer(shape: &ResponseSpec, status: u16) -> ResponseSpec {
    let message = format!(
        "{status} {} (injected by sandbox-conformance)",
        reason(status)
    );
    fn reshape(value: &Value, old: u16, new: u16, message: &str) -> Value {
        match value {
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| (k.clone(), reshape(v, old, new, message)))
                    .collect(),
            ),
            Value::Array(items) => Value::Array(
                items
                    .iter()
                    .map(|v| reshape(v, old, new, message))
                    .collect(),
            ),
            Value::Number(n) if n.as_u64() == Some(u64::from(old)) => Value::from(new),
            Value::String(s) if s == &old.to_string() => Value::String(new.to_string()),
            Value::String(_) => Value::String(message.to_owned()),
            other => other.clone(),
        }
    }
    let body = match &shape.body {
        Some(Body::Json(v)) => Some(Body::Json(reshape(v, shape.status, status, &message))),
        Some(Body::Text(_)) => Some(Body::Text(message)),
        _ => None,
    };
    let mut headers: std::collections::BTreeMap<String, String> = shape
        .headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("content-type") && body.is_some())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if status == 429 {
        headers.insert("retry-after".into(), "7".into());
    }
    ResponseSpec {
        status,
        headers,
        body,
        frames: None,
        fault: None,
        delay_ms: None,
        websocket: None,
    }
}

/// `response` with its connection reset before any answer byte.
fn reset(response: &ResponseSpec) -> ResponseSpec {
    ResponseSpec {
        status: response.status,
        headers: Default::default(),
        body: None,
        frames: None,
        fault: Some(Fault::Reset),
        delay_ms: None,
        websocket: None,
    }
}

fn with_response(interaction: &Interaction, response: ResponseSpec) -> Interaction {
    Interaction {
        request: interaction.request.clone(),
        response,
        times: 1,
    }
}

/// The first request of a recorded `connect(id)`, failing.
fn connect_failure(
    connect: &[Interaction],
    shape: &ResponseSpec,
    failure: Failure,
) -> Result<Vec<Interaction>, String> {
    let first = connect
        .first()
        .ok_or("connect(id) sent no request live, so there is none to fail")?;
    let response = match failure {
        Failure::Status(status) => error_answer(shape, status),
        Failure::Reset => reset(&first.response),
    };
    Ok(vec![with_response(first, response)])
}

/// The index of the request that made the sandbox: the first whose answer names it.
fn create_index(call: &[Interaction], what: &str) -> Result<usize, String> {
    call.iter().position(names_sandbox).ok_or_else(|| {
        format!("no answer of the live {what} names the sandbox it made, so the create request cannot be told apart")
    })
}

/// A recorded `create(..)` up to its create request, which fails with `status`.
fn create_failure(
    create: &[Interaction],
    shape: &ResponseSpec,
    status: u16,
) -> Result<Vec<Interaction>, String> {
    let at = create_index(create, "create")?;
    let mut out: Vec<Interaction> = create[..at].to_vec();
    out.push(with_response(&create[at], error_answer(shape, status)));
    Ok(out)
}

/// A recorded `connect` and `read_file`, the download (the last request) truncated.
fn truncated(recorded: &[Interaction], connected: usize) -> Result<Vec<Interaction>, String> {
    let (last, before) = recorded
        .split_last()
        .filter(|_| recorded.len() > connected)
        .ok_or("read_file sent no request live, so there is no download to truncate")?;
    let whole = match (&last.response.body, &last.response.frames) {
        (Some(body), _) => body.bytes()?.len(),
        (None, Some(frames)) => frames
            .iter()
            .map(|f| f.bytes().map(|b| b.len()))
            .sum::<Result<usize, String>>()?,
        (None, None) => 0,
    };
    if whole < 2 {
        return Err(format!(
            "the last request of read_file ({} {}) was answered with {whole} byte(s): nothing to truncate",
            last.request.method, last.request.path
        ));
    }
    let mut out = before.to_vec();
    let mut response = last.response.clone();
    response.fault = Some(Fault::Truncate);
    out.push(with_response(last, response));
    Ok(out)
}

fn same_request(a: &Interaction, b: &Interaction) -> bool {
    a.request.method.eq_ignore_ascii_case(&b.request.method)
        && a.request.path == b.request.path
        && a.request.query == b.request.query
}

/// A `create_*` cassette from two live creates under one key: `first` looked the key up (nothing),
/// created; `second` looked it up and found the sandbox.
fn settles(
    first: &[Interaction],
    second: &[Interaction],
    shape: &ResponseSpec,
    settle: Settle,
) -> Result<Vec<Interaction>, String> {
    let at = create_index(first, "create with an idempotency key")?;
    let no_lookup = || {
        "the adapter made no look-up of the idempotency key before its create (a service-side \
         key needs no look-up, but then the ambiguous create cannot be derived)"
            .to_owned()
    };
    let lookup = at.checked_sub(1).map(|i| &first[i]).ok_or_else(no_lookup)?;
    if names_sandbox(lookup) {
        return Err(no_lookup());
    }
    let found = second
        .iter()
        .position(|i| same_request(i, lookup) && names_sandbox(i))
        .ok_or(
            "the second create with the same key did not look it up and find the sandbox \
             (no request like the first look-up named it)",
        )?;
    if found != at - 1
        || !second[..found]
            .iter()
            .zip(&first[..at - 1])
            .all(|(a, b)| same_request(a, b))
    {
        return Err(
            "the two creates under one key made different requests before their look-ups, so \
             the look-up cannot be told apart"
                .into(),
        );
    }
    let create = &first[at];
    let after_create = &first[at + 1..];
    let after_found = &second[found + 1..];
    let mut out: Vec<Interaction> = first[..at].to_vec();
    match settle {
        Settle::Late => {
            let mut late = create.response.clone();
            late.delay_ms = Some(LATE_MS);
            out.push(with_response(create, late));
            out.push(lookup.clone());
            out.push(second[found].clone());
            out.extend_from_slice(after_found);
        }
        Settle::Reset => {
            out.push(with_response(create, reset(&create.response)));
            out.push(second[found].clone());
            out.extend_from_slice(after_found);
        }
        Settle::Unavailable => {
            out.push(with_response(create, error_answer(shape, 503)));
            out.extend_from_slice(&first[..at]);
            out.push(create.clone());
            out.extend_from_slice(after_create);
        }
    }
    Ok(out
        .into_iter()
        .map(|i| Interaction { times: 1, ..i })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn interaction(method: &str, path: &str, status: u16, answer: Value) -> Interaction {
        serde_json::from_value(json!({
            "request": {"method": method, "path": path},
            "response": {"status": status, "headers": {"content-type": "application/json"},
                         "body": {"json": answer}}
        }))
        .expect("interaction")
    }

    fn not_found() -> ResponseSpec {
        interaction(
            "GET",
            "/s/{{missing_id}}",
            404,
            json!({"code": 404, "status": "404", "message": "no sandbox {{missing_id}}", "retry": false}),
        )
        .response
    }

    #[test]
    fn an_error_answer_keeps_the_services_shape() {
        let answer = error_answer(&not_found(), 429);
        assert_eq!(answer.status, 429);
        assert_eq!(answer.headers["retry-after"], "7");
        assert_eq!(answer.headers["content-type"], "application/json");
        assert_eq!(
            answer.body,
            Some(Body::Json(json!({
                "code": 429,
                "status": "429",
                "message": "429 too many requests (injected by sandbox-conformance)",
                "retry": false
            })))
        );
        let text = ResponseSpec {
            body: Some(Body::Text("not found".into())),
            ..not_found()
        };
        let answer = error_answer(&text, 401);
        assert_eq!(
            answer.body,
            Some(Body::Text(
                "401 unauthorized (injected by sandbox-conformance)".into()
            ))
        );
        assert!(!answer.headers.contains_key("retry-after"));
    }

    #[test]
    fn a_create_failure_keeps_what_came_before_the_create_and_drops_what_came_after() {
        let create = [
            interaction("GET", "/templates/base", 200, json!({"ok": true})),
            interaction("POST", "/s", 201, json!({"id": "{{sandbox_id}}"})),
            interaction(
                "GET",
                "/s/{{sandbox_id}}",
                200,
                json!({"id": "{{sandbox_id}}"}),
            ),
        ];
        let derived = create_failure(&create, &not_found(), 409).expect("derived");
        assert_eq!(derived.len(), 2);
        assert_eq!(derived[0], create[0]);
        assert_eq!(derived[1].request, create[1].request);
        assert_eq!(derived[1].response.status, 409);
        let error = create_failure(&create[..1], &not_found(), 409).unwrap_err();
        assert!(
            error.contains("no answer of the live create names the sandbox"),
            "{error}"
        );
    }

    #[test]
    fn a_connect_that_sends_nothing_cannot_fail() {
        let error = connect_failure(&[], &not_found(), Failure::Reset).unwrap_err();
        assert!(error.contains("sent no request"), "{error}");
        let connect = [interaction("GET", "/s/{{sandbox_id}}", 200, json!({}))];
        let derived = connect_failure(&connect, &not_found(), Failure::Reset).expect("derived");
        assert_eq!(derived[0].response.fault, Some(Fault::Reset));
        assert_eq!(derived[0].response.body, None);
    }

    #[test]
    fn settling_creates_follow_the_recorded_look_ups() {
        let empty = interaction("GET", "/s", 200, json!({"items": []}));
        let create = interaction("POST", "/s", 201, json!({"id": "{{sandbox_id}}"}));
        let found = interaction(
            "GET",
            "/s",
            200,
            json!({"items": [{"id": "{{sandbox_id}}"}]}),
        );
        let first = [empty.clone(), create.clone()];
        let second = [found.clone()];
        let lines = |derived: Vec<Interaction>| -> Vec<String> {
            derived
                .iter()
                .map(|i| {
                    let how = match (i.response.delay_ms, i.response.fault) {
                        (Some(ms), _) => format!(" late {ms}"),
                        (_, Some(Fault::Reset)) => " reset".to_owned(),
                        _ => String::new(),
                    };
                    let names = if names_sandbox(i) { " found" } else { "" };
                    format!("{} {}{how}{names}", i.request.method, i.response.status)
                })
                .collect()
        };
        let late = settles(&first, &second, &not_found(), Settle::Late).expect("late");
        assert_eq!(
            lines(late),
            [
                "GET 200",
                "POST 201 late 3000 found",
                "GET 200",
                "GET 200 found"
            ]
        );
        let reset = settles(&first, &second, &not_found(), Settle::Reset).expect("reset");
        assert_eq!(lines(reset), ["GET 200", "POST 201 reset", "GET 200 found"]);
        let refused =
            settles(&first, &second, &not_found(), Settle::Unavailable).expect("unavailable");
        assert_eq!(
            lines(refused),
            ["GET 200", "POST 503", "GET 200", "POST 201 found"]
        );
        // A create with no look-up before it (a key the service dedupes) cannot be derived.
        let error = settles(
            std::slice::from_ref(&create),
            &second,
            &not_found(),
            Settle::Late,
        )
        .unwrap_err();
        assert!(error.contains("made no look-up"), "{error}");
        let error = settles(&first, &[create], &not_found(), Settle::Late).unwrap_err();
        assert!(error.contains("did not look it up"), "{error}");
    }

    #[test]
    fn a_download_without_a_body_cannot_be_truncated() {
        let connect = interaction("GET", "/s/{{sandbox_id}}", 200, json!({}));
        let mut download = interaction("GET", "/s/{{sandbox_id}}/files", 200, json!(null));
        download.response.body = Some(Body::Text("0123456789abcdef".repeat(64)));
        let derived = truncated(&[connect.clone(), download.clone()], 1).expect("derived");
        assert_eq!(derived[1].response.fault, Some(Fault::Truncate));
        assert_eq!(derived[0], connect);
        download.response.body = None;
        let error = truncated(&[connect.clone(), download], 1).unwrap_err();
        assert!(error.contains("nothing to truncate"), "{error}");
        let error = truncated(&[connect], 1).unwrap_err();
        assert!(error.contains("sent no request"), "{error}");
    }

    #[test]
    fn a_live_keys_fingerprint_is_written_as_the_replayed_keys() {
        let live = conformance_spec().idempotency_key(live_key());
        let (recorded, written) = replayed_fingerprint(&live);
        assert_ne!(recorded, written);
        assert_eq!(
            Some(written),
            sandbox_sdk_core::idempotency::create_fingerprint(
                &conformance_spec().idempotency_key(CREATE_KEY)
            )
        );
    }

    #[test]
    fn live_keys_are_unique_and_start_with_the_replayed_key() {
        let (a, b) = (live_key(), live_key());
        assert_ne!(a, b);
        assert!(a.starts_with(&format!("{CREATE_KEY}-rec")), "{a}");
    }
}
