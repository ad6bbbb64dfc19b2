//! What every toolbox handler works with: [`Call`] (the request, its sandbox and the
//! simulator) and the daemon's error answers.

use super::api::{Api, json_answer};
use super::session::Session;
use crate::{SimRequest, SimResponse};
use http::Method;
use sandbox_sdk_core::local::LocalSandbox;
use sandbox_sdk_core::time::format_rfc3339;
use serde_json::json;
use std::sync::Arc;
use std::time::SystemTime;

/// The daemon's (and the toolbox proxy's) error answer.
pub(crate) fn error(status: u16, method: &Method, path: &str, message: &str) -> SimResponse {
    let code = match status {
        400 => "BAD_REQUEST",
        401 => "UNAUTHORIZED",
        403 => "FORBIDDEN",
        404 => "NOT_FOUND",
        408 => "REQUEST_TIMEOUT",
        409 => "CONFLICT",
        410 => "GONE",
        422 => "UNPROCESSABLE_ENTITY",
        _ => "INTERNAL_SERVER_ERROR",
    };
    coded_error(status, code, method, path, message)
}

/// A daemon error with a specific `code` (`FILE_NOT_FOUND`, `SESSION_ENDED`, …).
pub(crate) fn coded_error(
    status: u16,
    code: &str,
    method: &Method,
    path: &str,
    message: &str,
) -> SimResponse {
    // The daemon sees the path without the proxy's `/toolbox/{sandboxId}` prefix.
    let daemon_path = match path.strip_prefix("/toolbox/") {
        Some(rest) => rest.find('/').map(|i| &rest[i..]).unwrap_or("/"),
        None => path,
    };
    json_answer(
        status,
        &json!({
            "statusCode": status,
            "message": message,
            "code": code,
            "timestamp": format_rfc3339(SystemTime::now()),
            "path": daemon_path,
            "method": method.as_str(),
            "source": "DAYTONA_DAEMON",
        }),
    )
}

/// What a toolbox handler gets: the request, its sandbox and the simulator.
pub(crate) struct Call {
    pub api: Arc<Api>,
    pub request: SimRequest,
    pub sandbox_id: String,
    pub backing: LocalSandbox,
    /// The sandbox's files ([`crate::disk`]).
    pub disk: crate::disk::Disk,
}

impl Call {
    /// A daemon error answer to this request.
    pub fn error(&self, status: u16, message: &str) -> SimResponse {
        error(status, &self.request.method, &self.request.path, message)
    }

    /// A daemon error answer with a specific code.
    pub fn coded(&self, status: u16, code: &str, message: &str) -> SimResponse {
        coded_error(
            status,
            code,
            &self.request.method,
            &self.request.path,
            message,
        )
    }

    /// The session `id` of this call's sandbox, if it exists.
    pub fn session(&self, id: &str) -> Option<Arc<Session>> {
        self.api
            .with(&self.sandbox_id, |r| r.sessions.get(id).cloned())
            .flatten()
    }
}
