//! The code interpreter server of the `code-interpreter-v1` template, on port 49999 behind the
//! proxy (`specs/code-interpreter/PROTOCOL.md` §1): `/health`, `POST /execute` (NDJSON),
//! `/contexts`. Each context is a context of the backing `local` sandbox, so cells run in
//! core's emulated kernel over a real `python3`.
//!
//! As the server does: executions in one context run one at a time; a client that goes away
//! interrupts its cell and the context keeps its state (there is no interrupt endpoint); a
//! `keepalive` line goes out after 5 s of silence; `end_of_execution` ends every stream.
//! Differences, all on the side of refusing: only Python contexts exist (the server also has
//! JavaScript, R, Java and bash kernels: other languages answer 500 as a kernel that cannot
//! start does), the default JavaScript context is not listed, and per-call `env_vars` are set
//! and restored by the kernel instead of pasted into the cell (so a quote in a value cannot
//! break the cell here as it does on E2B). The access token, when sent, must be the sandbox's;
//! `/execute` needs it (the published SDKs send it there only).

use super::{HOME, Sandbox};
use crate::{SimRequest, SimResponse};
use bytes::Bytes;
use futures::StreamExt;
use sandbox_sdk_core::code::frames::result_to_wire;
use sandbox_sdk_core::code::{CodeEvent, ContextSpec, Language, RunCode};
use sandbox_sdk_core::time::format_rfc3339;
use sandbox_sdk_core::{ErrorKind, Sandbox as _};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The port the interpreter server listens on, as the routing header names it.
pub const PORT: u16 = 49999;

/// The template that serves it.
pub const TEMPLATE: &str = "code-interpreter-v1";

/// How long a silent cell goes before the server writes a `keepalive` line.
const KEEPALIVE: Duration = Duration::from_secs(5);

/// One context as the server shows it, and the backing sandbox's context behind it.
#[derive(Clone)]
struct Context {
    language: String,
    cwd: String,
    local_id: String,
}

/// The contexts of one sandbox.
#[derive(Default)]
pub(crate) struct Contexts {
    state: tokio::sync::Mutex<Known>,
}

#[derive(Default)]
struct Known {
    /// By the id the server shows.
    by_id: BTreeMap<String, Context>,
    /// The default context's id of each language started so far.
    defaults: BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct Execute {
    code: String,
    #[serde(default)]
    context_id: Option<String>,
    #[serde(default)]
    language: Option<String>,
    #[serde(default)]
    env_vars: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize, Default)]
struct NewContext {
    #[serde(default)]
    language: Option<String>,
    #[serde(default)]
    cwd: Option<String>,
}

fn text(status: u16, message: &str) -> SimResponse {
    SimResponse::bytes(
        status,
        Some("text/plain; charset=utf-8"),
        Bytes::from(message.to_owned()),
    )
}

/// `None` → python; `js` → javascript; `ts` → typescript (the server's normalisation).
fn language(name: Option<&str>) -> String {
    match name.map(str::to_ascii_lowercase).as_deref() {
        None | Some("") => "python".into(),
        Some("js") => "javascript".into(),
        Some("ts") => "typescript".into(),
        Some(other) => other.into(),
    }
}

/// Serves one interpreter request of `sb`.
pub(crate) async fn handle(sb: &Arc<Sandbox>, request: SimRequest) -> SimResponse {
    if request.path == "/health" {
        return SimResponse::json(200, &"OK");
    }
    match request.header("x-access-token") {
        Some(token) if token != sb.envd_token => return text(401, "Unauthorized"),
        None if request.path == "/execute" => return text(401, "Unauthorized"),
        _ => {}
    }
    let segments = request.segments();
    let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
    match (request.method.as_str(), segments.as_slice()) {
        ("POST", ["execute"]) => execute(sb, &request).await,
        ("POST", ["contexts"]) => create(sb, &request).await,
        ("GET", ["contexts"]) => list(sb).await,
        ("POST", ["contexts", id, "restart"]) => restart(sb, id).await,
        ("DELETE", ["contexts", id]) => remove(sb, id).await,
        _ => SimResponse::json(404, &json!({"detail": "Not Found"})),
    }
}

/// A new context of the backing sandbox, shown under an id of the server's shape.
async fn start(sb: &Sandbox, language: &str, cwd: &str) -> Result<(String, Context), SimResponse> {
    if language != "python" {
        return Err(text(
            500,
            &format!(
                "Failed to create context for language {language}: sandbox-sim runs only python kernels"
            ),
        ));
    }
    let host = sb
        .resolve(cwd)
        .1
        .map_err(|e| text(500, &format!("Failed to create context: {cwd}: {e}")))?;
    let spec = ContextSpec::new(Language::Python).cwd(host.to_string_lossy());
    let made = sb
        .local
        .create_code_context(&spec)
        .await
        .map_err(|e| text(500, &format!("Failed to create context: {e}")))?;
    let id = uuid_like();
    let context = Context {
        language: language.into(),
        cwd: cwd.into(),
        local_id: made.id,
    };
    Ok((id, context))
}

fn uuid_like() -> String {
    let hex = crate::random_from(b"0123456789abcdef", 32);
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

fn shown(id: &str, context: &Context) -> Value {
    json!({"id": id, "language": context.language, "cwd": context.cwd})
}

/// The default context of a language, started on first use (the server starts Python's when it
/// starts, which no client can tell apart).
async fn default_context(sb: &Sandbox, language: &str) -> Result<Context, SimResponse> {
    let mut known = sb.interpreter.state.lock().await;
    if let Some(found) = known
        .defaults
        .get(language)
        .and_then(|id| known.by_id.get(id))
    {
        return Ok(found.clone());
    }
    let (id, context) = start(sb, language, HOME).await?;
    known.by_id.insert(id.clone(), context.clone());
    known.defaults.insert(language.into(), id);
    Ok(context)
}

async fn create(sb: &Sandbox, request: &SimRequest) -> SimResponse {
    let new: NewContext = if request.body.is_empty() {
        NewContext::default()
    } else {
        match request.json() {
            Ok(new) => new,
            Err(e) => return SimResponse::json(422, &json!({"detail": e})),
        }
    };
    let language = language(new.language.as_deref());
    let cwd = new.cwd.unwrap_or_else(|| HOME.into());
    match start(sb, &language, &cwd).await {
        Ok((id, context)) => {
            let body = shown(&id, &context);
            sb.interpreter.state.lock().await.by_id.insert(id, context);
            SimResponse::json(200, &body)
        }
        Err(answer) => answer,
    }
}

async fn list(sb: &Sandbox) -> SimResponse {
    if let Err(answer) = default_context(sb, "python").await {
        return answer;
    }
    let known = sb.interpreter.state.lock().await;
    let all: Vec<Value> = known.by_id.iter().map(|(id, c)| shown(id, c)).collect();
    SimResponse::json(200, &all)
}

async fn restart(sb: &Sandbox, id: &str) -> SimResponse {
    let Some(context) = sb.interpreter.state.lock().await.by_id.get(id).cloned() else {
        return text(404, &format!("Context {id} not found"));
    };
    match sb.local.restart_code_context(&context.local_id).await {
        Ok(()) => SimResponse::json(200, &Value::Null),
        Err(_) => text(500, &format!("Failed to restart context {id}")),
    }
}

async fn remove(sb: &Sandbox, id: &str) -> SimResponse {
    let context = {
        let mut known = sb.interpreter.state.lock().await;
        known.defaults.retain(|_, default| default != id);
        known.by_id.remove(id)
    };
    let Some(context) = context else {
        return text(404, &format!("Context {id} not found"));
    };
    match sb.local.remove_code_context(&context.local_id).await {
        Ok(()) => SimResponse::json(200, &Value::Null),
        Err(_) => text(500, &format!("Failed to delete context {id}")),
    }
}

async fn execute(sb: &Arc<Sandbox>, request: &SimRequest) -> SimResponse {
    let body: Execute = match request.json() {
        Ok(body) => body,
        Err(e) => return SimResponse::json(422, &json!({"detail": e})),
    };
    let context = match (&body.context_id, &body.language) {
        (Some(_), Some(_)) => {
            return text(400, "Only one of context_id or language can be provided");
        }
        (Some(id), None) => match sb.interpreter.state.lock().await.by_id.get(id).cloned() {
            Some(context) => context,
            None => return text(404, &format!("Context {id} not found")),
        },
        (None, language_name) => {
            match default_context(sb, &language(language_name.as_deref())).await {
                Ok(context) => context,
                Err(answer) => return answer,
            }
        }
    };
    // No execution timeout: the client ends a cell by going away, as with the real server.
    let mut run_code = RunCode::python(body.code)
        .context(&context.local_id)
        .timeout(Duration::ZERO);
    for (key, value) in body.env_vars.unwrap_or_default() {
        run_code = run_code.env(key, value);
    }
    let run = match sb.local.run_code(&run_code).await {
        Ok(run) => run,
        Err(e) if e.kind() == ErrorKind::Validation => return text(400, &e.to_string()),
        Err(e) => return text(500, &e.to_string()),
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(16);
    tokio::spawn(async move {
        let mut run = run;
        loop {
            let next = tokio::select! {
                // The client went away: dropping the run interrupts the cell.
                () = tx.closed() => return,
                next = tokio::time::timeout(KEEPALIVE, run.next()) => next,
            };
            let line = match next {
                Err(_) => json!({"type": "keepalive"}),
                Ok(None) => break,
                Ok(Some(Ok(event))) => match wire(event) {
                    Some(line) => line,
                    None => continue,
                },
                Ok(Some(Err(e))) => {
                    let lost = json!({"type": "error", "name": "UnexpectedEndOfExecution", "value": e.to_string(), "traceback": ""});
                    let _ = tx.send(ndjson(&lost)).await;
                    break;
                }
            };
            if tx.send(ndjson(&line)).await.is_err() {
                return;
            }
        }
        let _ = tx.send(ndjson(&json!({"type": "end_of_execution"}))).await;
    });
    let body = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|line| (Ok(line), rx))
    })
    .boxed();
    SimResponse::stream(200, "application/x-ndjson", body)
}

/// One event as a line of the server's vocabulary (`None`: the server has no such line).
fn wire(event: CodeEvent) -> Option<Value> {
    let now = || format_rfc3339(std::time::SystemTime::now());
    Some(match event {
        CodeEvent::ExecutionCount(n) => {
            json!({"type": "number_of_executions", "execution_count": n})
        }
        CodeEvent::Stdout(text) => json!({"type": "stdout", "text": text, "timestamp": now()}),
        CodeEvent::Stderr(text) => json!({"type": "stderr", "text": text, "timestamp": now()}),
        CodeEvent::Result(result) => Value::Object(result_to_wire(&result)),
        CodeEvent::Error(error) => {
            json!({"type": "error", "name": error.name, "value": error.value, "traceback": error.traceback})
        }
        CodeEvent::Truncated { .. } => return None,
    })
}

fn ndjson(value: &Value) -> Bytes {
    let mut line = serde_json::to_vec(value).unwrap_or_default();
    line.push(b'\n');
    line.into()
}
