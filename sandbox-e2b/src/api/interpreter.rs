//! The code interpreter server on port 49999 of templates derived from `code-interpreter-v1`
//! (PROTOCOL.md §10): `/health`, `POST /execute` (an NDJSON stream), `/contexts`. Same HTTP/1.1
//! client as envd, so dropping a stream closes its connection and the server interrupts the
//! cell. Every call carries the routing headers, the access token and the traffic token.

use super::envd::{Envd, port_base_url};
use crate::config::PROVIDER;
use sandbox_sdk_core::ByteStream;
use sandbox_sdk_core::http::{HttpClient, Method, Request, idle_bounded};
use sandbox_sdk_core::{Error, ErrorKind, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// The interpreter server's port.
pub const INTERPRETER_PORT: u16 = 49999;

/// The largest answer of a context call.
const CONTEXT_MAX_BODY: usize = 1 << 20;

/// The interpreter server of one sandbox.
#[derive(Clone)]
pub(crate) struct Interpreter {
    http: HttpClient,
    sandbox_id: String,
    access_token: Option<String>,
    traffic_token: Option<String>,
    request_timeout: Option<Duration>,
    stream_idle: Duration,
}

impl fmt::Debug for Interpreter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Interpreter")
            .field("base_url", &self.http.base_url())
            .field("sandbox_id", &self.sandbox_id)
            .finish_non_exhaustive()
    }
}

/// `POST /execute`'s body: `context_id` and `language` are never both sent.
#[derive(Debug, Serialize)]
pub(crate) struct ExecuteRequest<'a> {
    pub code: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub language: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub env_vars: Option<&'a BTreeMap<String, String>>,
}

/// A context as the server shows it.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ContextWire {
    pub id: String,
    #[serde(default)]
    pub language: String,
    #[serde(default)]
    pub cwd: String,
}

#[derive(Serialize)]
struct NewContext<'a> {
    language: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    cwd: Option<&'a str>,
}

impl Interpreter {
    /// The interpreter of the sandbox `envd` reaches, in `domain`.
    pub fn new(
        envd: &Envd,
        sandbox_url: Option<&str>,
        domain: &str,
        traffic_token: Option<String>,
    ) -> Result<Interpreter> {
        let base = port_base_url(sandbox_url, domain, &envd.sandbox_id, INTERPRETER_PORT);
        Ok(Interpreter {
            http: envd.http.with_base_url(&base)?,
            sandbox_id: envd.sandbox_id.clone(),
            access_token: envd.access_token.clone(),
            traffic_token,
            request_timeout: envd.request_timeout,
            stream_idle: envd.stream_idle,
        })
    }

    fn request(&self, method: Method, path: &str, operation: &str) -> Request {
        let mut req = self
            .http
            .request(method, path)
            .operation(operation)
            .sandbox_id(&self.sandbox_id)
            .header("E2b-Sandbox-Id", &self.sandbox_id)
            .header("E2b-Sandbox-Port", &INTERPRETER_PORT.to_string());
        if let Some(token) = &self.access_token {
            req = req.sensitive_header("X-Access-Token", token);
        }
        if let Some(token) = &self.traffic_token {
            req = req.sensitive_header("E2B-Traffic-Access-Token", token);
        }
        req
    }

    /// Whether the server answers its health check: `Ok(false)` when the proxy or the sandbox
    /// answered with an error status (no server on the port), `Err` when nothing answered.
    pub async fn serves(&self) -> Result<bool> {
        let answer = self
            .request(Method::Get, "/health", "code.health")
            .timeout_opt(self.request_timeout)
            .max_body(1024)
            .send()
            .await;
        match answer {
            Ok(response) => Ok(response.status() == 200),
            Err(e) if e.status().is_some() => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Opens a cell's stream. The opening (to the response head) is bounded by `open`, else the
    /// request timeout; the open stream by the idle bound between chunks (the server writes a
    /// `keepalive` line every 5 s of silence).
    pub async fn execute(
        &self,
        body: &ExecuteRequest<'_>,
        open: Option<Duration>,
    ) -> Result<ByteStream> {
        let send = self
            .request(Method::Post, "/execute", "run_code")
            .json(body)
            .no_timeout()
            .send();
        let response = match open.or(self.request_timeout) {
            None => send.await?,
            Some(limit) => tokio::time::timeout(limit, send).await.map_err(|_| {
                Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "the interpreter did not answer within {}ms",
                        limit.as_millis()
                    ),
                )
                .with_provider(PROVIDER)
                .with_operation("run_code")
                .with_sandbox_id(&self.sandbox_id)
            })??,
        };
        Ok(idle_bounded(response.bytes_stream(), self.stream_idle))
    }

    /// `POST /contexts`.
    pub async fn create_context(&self, language: &str, cwd: Option<&str>) -> Result<ContextWire> {
        self.request(Method::Post, "/contexts", "create_code_context")
            .json(&NewContext { language, cwd })
            .timeout_opt(self.request_timeout)
            .max_body(CONTEXT_MAX_BODY)
            .send_json()
            .await
    }

    /// `GET /contexts`.
    pub async fn list_contexts(&self) -> Result<Vec<ContextWire>> {
        self.request(Method::Get, "/contexts", "list_code_contexts")
            .timeout_opt(self.request_timeout)
            .max_body(CONTEXT_MAX_BODY)
            .send_json()
            .await
    }

    /// `POST /contexts/{id}/restart`.
    pub async fn restart_context(&self, id: &str) -> Result<()> {
        let path = format!("/contexts/{}/restart", checked_id(id)?);
        self.request(Method::Post, &path, "restart_code_context")
            .timeout_opt(self.request_timeout)
            .max_body(CONTEXT_MAX_BODY)
            .send_empty()
            .await
    }

    /// `DELETE /contexts/{id}`.
    pub async fn remove_context(&self, id: &str) -> Result<()> {
        let path = format!("/contexts/{}", checked_id(id)?);
        self.request(Method::Delete, &path, "remove_code_context")
            .timeout_opt(self.request_timeout)
            .max_body(CONTEXT_MAX_BODY)
            .send_empty()
            .await
    }
}

/// A context id goes into a path: only the characters a kernel id has.
fn checked_id(id: &str) -> Result<&str> {
    let fine = !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if fine {
        Ok(id)
    } else {
        Err(Error::validation(format!(
            "code context id {id:?}: expected letters, digits, '-' or '_'"
        ))
        .with_provider(PROVIDER))
    }
}
