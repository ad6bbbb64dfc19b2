//! [`Toolbox`]: one sandbox's toolbox API (`{toolboxProxyUrl}/{sandboxId}/…`, PROTOCOL.md §6),
//! one function per endpoint, and [`Toolbox::explain`], the one place a toolbox failure is
//! checked against the sandbox's state.

use crate::api::client::Api;
use crate::config::{LARGE_ANSWER, PROVIDER, TOOLBOX_ANSWER};
use crate::error::is_empty_bad_gateway;
use crate::wire::{
    BulkUploadAnswer, ContextsAnswer, CreateContextBody, CreateSessionBody, ExecuteAnswer,
    ExecuteBody, FileInfoDto, InputBody, InterpreterContextDto, MatchDto, SandboxDto, SearchAnswer,
    SessionCommandDto, SessionDto, SessionExecAnswer, SessionExecBody, SystemMetricsDto,
};
use bytes::Bytes;
use sandbox_sdk_core::http::{
    Method, Multipart, Request, Response, StreamBody, encode_path_segment,
};
use sandbox_sdk_core::{ByteStream, Error, ErrorKind, Result};
use std::sync::Arc;
use std::time::Duration;

/// The toolbox of one sandbox.
pub(crate) struct Toolbox {
    pub api: Arc<Api>,
    pub sandbox_id: String,
    /// `{toolboxProxyUrl}/{sandboxId}`.
    pub base: String,
    http: sandbox_sdk_core::http::HttpClient,
}

/// `/process/session/{sid}`.
pub(crate) fn session_path(sid: &str) -> String {
    format!("/process/session/{}", encode_path_segment(sid))
}

/// `/process/session/{sid}/command/{cid}`.
pub(crate) fn command_path(sid: &str, cid: &str) -> String {
    format!("{}/command/{}", session_path(sid), encode_path_segment(cid))
}

impl Toolbox {
    /// The toolbox of the sandbox `dto` describes: the builder's toolbox URL, else the
    /// sandbox's `toolboxProxyUrl`, else the API's `toolbox-proxy-url` answer. A URL from an
    /// answer is checked: it may not downgrade to http (unless the API itself is plain http, as
    /// on loopback) nor carry user info, a query or a fragment, since the API key goes with
    /// every toolbox request.
    pub async fn open(api: Arc<Api>, dto: &SandboxDto) -> Result<Toolbox> {
        let id = dto.id.clone();
        let checked = |url: &str| api.checked_url(url, "connect", &id);
        let root = match (&api.config.toolbox_url, &dto.toolbox_proxy_url) {
            (Some(url), _) => url.clone(),
            (None, Some(url)) if !url.is_empty() => checked(url)?,
            _ => checked(&api.toolbox_proxy_url(&id).await?)?,
        };
        let base = format!(
            "{}/{}",
            root.trim_end_matches('/'),
            encode_path_segment(&id)
        );
        let http = api.http.with_base_url(&base)?;
        Ok(Toolbox {
            api,
            sandbox_id: id,
            base,
            http,
        })
    }

    /// A request to `path` below the toolbox base, for `operation`, with the default cap.
    fn request(&self, method: Method, path: &str, operation: &str) -> Request {
        self.http
            .request(method, path)
            .operation(operation)
            .sandbox_id(&self.sandbox_id)
            .max_body(TOOLBOX_ANSWER)
    }

    /// The one place a toolbox failure (HTTP answer or refused WebSocket upgrade, both mapped by
    /// [`map_error`](crate::error::map_error)) is checked against the sandbox's state: the
    /// proxy's empty-body 502, or a 400 that mapped to `Validation`, from a sandbox that is not
    /// `started`, or is gone, becomes `NotRunning`. Any other error, or one from a sandbox still
    /// `started`, is returned as is.
    pub async fn explain(&self, error: Error) -> Error {
        // The proxy's empty 502, and a 400 the mapping could not place (the proxy refuses a
        // request for a sandbox it cannot reach with 400, in wording that has changed).
        let unclear = is_empty_bad_gateway(&error)
            || (error.kind() == ErrorKind::Validation && error.status() == Some(400));
        if !unclear {
            return error;
        }
        let not_running = |message: String| {
            Error::new(ErrorKind::NotRunning, message)
                .with_status(error.status().unwrap_or(502))
                .or_context(
                    PROVIDER,
                    error.operation().unwrap_or("toolbox"),
                    Some(&self.sandbox_id),
                )
        };
        match self.api.get_sandbox(&self.sandbox_id, "check").await {
            Ok(dto) if dto.state.as_deref() != Some("started") => not_running(format!(
                "the toolbox proxy could not reach the sandbox: it is {}",
                dto.state.as_deref().unwrap_or("in an unknown state")
            )),
            Err(e) if e.kind() == ErrorKind::NotFound => not_running("the sandbox is gone".into()),
            _ => error,
        }
    }

    /// `result`, its error passed through [`Toolbox::explain`].
    pub async fn explained<T>(&self, result: Result<T>) -> Result<T> {
        match result {
            Err(e) => Err(self.explain(e).await),
            ok => ok,
        }
    }

    // ---- sessions (PROTOCOL.md §6.2) ----

    /// `POST /process/session`.
    pub async fn create_session(&self, sid: &str, operation: &str) -> Result<()> {
        self.request(Method::Post, "/process/session", operation)
            .json(&CreateSessionBody {
                session_id: sid.to_owned(),
            })
            .send_empty()
            .await
    }

    /// `POST /process/interpreter/context` (PROTOCOL.md §12).
    pub async fn create_interpreter_context(
        &self,
        cwd: Option<&str>,
    ) -> Result<InterpreterContextDto> {
        self.request(
            Method::Post,
            "/process/interpreter/context",
            "create_code_context",
        )
        .json(&CreateContextBody {
            cwd: cwd.map(str::to_owned),
            language: Some("python".into()),
        })
        .send_json()
        .await
    }

    /// `GET /process/interpreter/context`: every context but the default one.
    pub async fn list_interpreter_contexts(&self) -> Result<Vec<InterpreterContextDto>> {
        let answer: ContextsAnswer = self
            .request(
                Method::Get,
                "/process/interpreter/context",
                "list_code_contexts",
            )
            .max_body(LARGE_ANSWER)
            .send_json()
            .await?;
        Ok(answer.contexts)
    }

    /// `DELETE /process/interpreter/context/{id}`.
    pub async fn delete_interpreter_context(&self, id: &str) -> Result<()> {
        let path = format!("/process/interpreter/context/{}", encode_path_segment(id));
        self.request(Method::Delete, &path, "remove_code_context")
            .send_empty()
            .await
    }

    /// `GET /process/session`.
    pub async fn list_sessions(&self) -> Result<Vec<SessionDto>> {
        self.request(Method::Get, "/process/session", "sessions")
            .max_body(LARGE_ANSWER)
            .send_json()
            .await
    }

    /// `GET /process/session/{sid}`.
    pub async fn get_session(&self, sid: &str, operation: &str) -> Result<SessionDto> {
        self.request(Method::Get, &session_path(sid), operation)
            .max_body(LARGE_ANSWER)
            .send_json()
            .await
    }

    /// `DELETE /process/session/{sid}`: the daemon kills the session's shell.
    pub async fn delete_session(&self, sid: &str) -> Result<()> {
        self.request(Method::Delete, &session_path(sid), "kill_process")
            .send_empty()
            .await
    }

    /// `POST /process/session/{sid}/exec` with `runAsync: true`: answered at once with the
    /// command id.
    pub async fn session_exec_async(
        &self,
        sid: &str,
        line: &str,
        timeout: Option<Duration>,
        operation: &str,
    ) -> Result<SessionExecAnswer> {
        self.request(
            Method::Post,
            &format!("{}/exec", session_path(sid)),
            operation,
        )
        .json(&SessionExecBody {
            command: line.to_owned(),
            run_async: true,
        })
        .timeout_opt(timeout)
        .send_json()
        .await
    }

    /// `POST /process/session/{sid}/exec` with `runAsync: false`: answered when the command
    /// ends, with its exit code and output. The daemon's sync exec has no timeout of its own,
    /// so neither has the request; the caller bounds the wait.
    pub async fn session_exec_sync(
        &self,
        sid: &str,
        line: &str,
        operation: &str,
    ) -> Result<SessionExecAnswer> {
        self.request(
            Method::Post,
            &format!("{}/exec", session_path(sid)),
            operation,
        )
        .json(&SessionExecBody {
            command: line.to_owned(),
            run_async: false,
        })
        .no_timeout()
        .max_body(LARGE_ANSWER)
        .send_json()
        .await
    }

    /// `GET /process/session/{sid}/command/{cid}`.
    pub async fn command(
        &self,
        sid: &str,
        cid: &str,
        operation: &str,
    ) -> Result<SessionCommandDto> {
        self.request(Method::Get, &command_path(sid, cid), operation)
            .send_json()
            .await
    }

    /// `GET …/command/{cid}/logs` (not followed): the log so far, its body streamed with the
    /// idle bound, or read whole up to `cap` when `cap` is set.
    pub async fn command_logs(
        &self,
        sid: &str,
        cid: &str,
        cap: Option<usize>,
        operation: &str,
    ) -> Result<Response> {
        let request = self.request(
            Method::Get,
            &format!("{}/logs", command_path(sid, cid)),
            operation,
        );
        let request = match cap {
            Some(cap) => request.max_body(cap),
            None => request.idle_timeout(self.api.config.idle_timeout),
        };
        request.send().await
    }

    /// `POST …/command/{cid}/input`.
    pub async fn command_input(&self, sid: &str, cid: &str, data: &str) -> Result<()> {
        self.request(
            Method::Post,
            &format!("{}/input", command_path(sid, cid)),
            "session_input",
        )
        .json(&InputBody {
            data: data.to_owned(),
        })
        .send_empty()
        .await
    }

    /// `POST /process/execute` (PROTOCOL.md §6.1). With a timeout, the HTTP call gets five
    /// seconds more than the daemon's own limit.
    pub async fn execute(&self, body: &ExecuteBody) -> Result<ExecuteAnswer> {
        let mut request = self
            .request(Method::Post, "/process/execute", "execute")
            .max_body(LARGE_ANSWER)
            .json(body);
        if let Some(secs) = body.timeout {
            request = request.timeout(Duration::from_secs(secs + 5));
        }
        request.send_json().await
    }

    // ---- files (PROTOCOL.md §7) ----

    /// `POST /files/bulk-upload` of one streamed file.
    pub async fn upload_stream(
        &self,
        path: &str,
        name: &str,
        body: ByteStream,
    ) -> Result<BulkUploadAnswer> {
        let form = Multipart::new().text("files[0].path", path).stream(
            "files[0].file",
            name,
            "application/octet-stream",
            StreamBody::from(body),
            None,
        );
        self.bulk_upload(form).await
    }

    /// `POST /files/bulk-upload` of whole files (`(path, name, data)`), each `files[i].path`
    /// before its `files[i].file`, as the daemon expects.
    pub async fn upload_files(&self, files: &[(&str, &str, Bytes)]) -> Result<BulkUploadAnswer> {
        let mut form = Multipart::new();
        for (i, (path, name, data)) in files.iter().enumerate() {
            form = form.text(&format!("files[{i}].path"), *path).bytes(
                &format!("files[{i}].file"),
                name,
                "application/octet-stream",
                data.clone(),
            );
        }
        self.bulk_upload(form).await
    }

    async fn bulk_upload(&self, form: Multipart) -> Result<BulkUploadAnswer> {
        self.request(Method::Post, "/files/bulk-upload", "upload")
            .multipart(form)
            .idle_timeout(self.api.config.idle_timeout)
            .send_json()
            .await
    }

    /// `GET /files/download?path=`: the body streamed with the idle bound.
    pub async fn download(&self, path: &str) -> Result<Response> {
        self.request(Method::Get, "/files/download", "download")
            .query("path", path)
            .idle_timeout(self.api.config.idle_timeout)
            .send()
            .await
    }

    /// `GET /files?path=&depth=` (depth only when deeper than 1).
    pub async fn list_files(&self, path: &str, depth: u32) -> Result<Vec<FileInfoDto>> {
        let mut request = self
            .request(Method::Get, "/files", "list_files")
            .max_body(LARGE_ANSWER)
            .query("path", path);
        if depth > 1 {
            request = request.query("depth", depth);
        }
        request.send_json().await
    }

    /// `GET /files/info?path=`.
    pub async fn file_info(&self, path: &str) -> Result<FileInfoDto> {
        self.request(Method::Get, "/files/info", "stat")
            .query("path", path)
            .send_json()
            .await
    }

    /// `POST /files/folder?path=&mode=755`.
    pub async fn mkdir(&self, path: &str) -> Result<()> {
        self.request(Method::Post, "/files/folder", "mkdir")
            .query("path", path)
            .query("mode", "755")
            .send_empty()
            .await
    }

    /// `DELETE /files?path=&recursive=true`.
    pub async fn remove(&self, path: &str) -> Result<()> {
        self.request(Method::Delete, "/files", "remove")
            .query("path", path)
            .query("recursive", "true")
            .send_empty()
            .await
    }

    /// `POST /files/move?source=&destination=`.
    pub async fn rename(&self, from: &str, to: &str) -> Result<()> {
        self.request(Method::Post, "/files/move", "rename")
            .query("source", from)
            .query("destination", to)
            .send_empty()
            .await
    }

    /// `POST /files/permissions?path=&owner=&group=&mode=` (each only when set).
    pub async fn set_permissions(
        &self,
        path: &str,
        owner: Option<&str>,
        group: Option<&str>,
        mode: Option<&str>,
    ) -> Result<()> {
        let mut request = self
            .request(Method::Post, "/files/permissions", "set_permissions")
            .query("path", path);
        for (key, value) in [("owner", owner), ("group", group), ("mode", mode)] {
            if let Some(value) = value {
                request = request.query(key, value);
            }
        }
        request.send_empty().await
    }

    /// `GET /files/find?path=&pattern=` (content grep).
    pub async fn find(&self, path: &str, pattern: &str) -> Result<Vec<MatchDto>> {
        self.request(Method::Get, "/files/find", "find")
            .max_body(LARGE_ANSWER)
            .query("path", path)
            .query("pattern", pattern)
            .send_json()
            .await
    }

    /// `GET /files/search?path=&pattern=` (glob on names).
    pub async fn search(&self, path: &str, pattern: &str) -> Result<SearchAnswer> {
        self.request(Method::Get, "/files/search", "search")
            .max_body(LARGE_ANSWER)
            .query("path", path)
            .query("pattern", pattern)
            .send_json()
            .await
    }

    /// `GET /system/metrics` (newer daemons).
    pub async fn metrics(&self) -> Result<SystemMetricsDto> {
        self.request(Method::Get, "/system/metrics", "metrics")
            .send_json()
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_toolbox_url_from_the_api_may_not_downgrade_to_http() {
        let provider = crate::DaytonaProvider::builder()
            .api_key("dtn_k")
            .api_url("https://app.example.test/api")
            .build()
            .unwrap();
        let api = provider.api();
        let dto = |url: &str| SandboxDto {
            id: "sb1".into(),
            toolbox_proxy_url: Some(url.into()),
            ..Default::default()
        };
        let err = Toolbox::open(api.clone(), &dto("http://proxy.example.test/toolbox"))
            .await
            .err()
            .unwrap();
        assert_eq!(err.kind(), ErrorKind::Provider);
        assert!(err.message().contains("plain http"), "{err}");
        let ok = Toolbox::open(api, &dto("https://proxy.example.test/toolbox/"))
            .await
            .unwrap();
        assert_eq!(ok.base, "https://proxy.example.test/toolbox/sb1");
    }
}
