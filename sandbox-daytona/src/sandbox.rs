//! [`DaytonaSandbox`]: one sandbox — lifecycle on the API, commands and files on its toolbox,
//! preview links, and Daytona's own extras as inherent methods.

use crate::error::{PROVIDER, is_empty_bad_gateway};
use crate::exec;
use crate::provider::{Inner, LifecycleRequest, info_from_dto};
use crate::state::{Phase, phase};
use crate::wire::{
    BulkUploadAnswer, CreateSessionBody, ExecuteAnswer, ExecuteBody, FileInfoDto, ForkBody,
    InputBody, Labels, MatchDto, PreviewUrlDto, ResizeBody, SandboxDto, SandboxSnapshotBody,
    SearchAnswer, SessionDto, SessionExecAnswer, SessionExecBody,
};
use bytes::Bytes;
use futures::StreamExt;
use sandbox_sdk_core::http::{
    HttpClient, Method, Multipart, Request, Response, StreamBody, checked_answer_url,
    encode_path_segment,
};
use sandbox_sdk_core::time::parse_rfc3339;
use sandbox_sdk_core::{
    Capabilities, Command, Download, Error, ErrorKind, FileEventStream, FileInfo, FileKind,
    ListOptions, Metrics, PreviewLink, Process, ProcessInfo, Result, Sandbox, SandboxInfo,
    SnapshotInfo, SshAccess, Transfer, UploadBody, validate_path,
};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

/// The cap on small JSON answers (a command's status, a file's metadata, metrics, a session,
/// an address): bigger is a hostile or broken server.
pub(crate) const SMALL_ANSWER: usize = 1024 * 1024;

/// The cap on toolbox answers read whole unless an endpoint says otherwise (a command's
/// status, file metadata, metrics, an upload's answer).
pub(crate) const TOOLBOX_ANSWER: usize = 4 * 1024 * 1024;

/// The cap on toolbox answers that grow with what is in the sandbox: listings, search results,
/// a session's command list, and a finished command's output (`execute`, a synchronous session
/// command).
pub(crate) const LARGE_ANSWER: usize = 16 * 1024 * 1024;

/// The cap on a command's whole log read by [`DaytonaSandbox::session_logs`] (following a
/// command streams its log instead and holds one chunk at a time).
pub(crate) const LOG_ANSWER: usize = 64 * 1024 * 1024;

/// A log body larger than this is decoded on a blocking thread, not on a runtime worker.
const BLOCKING_DECODE: usize = 1024 * 1024;

/// The toolbox of one sandbox: `{toolboxProxyUrl}/{sandboxId}`.
pub(crate) struct Toolbox {
    pub inner: Arc<Inner>,
    pub sandbox_id: String,
    pub http: HttpClient,
    pub base: String,
    /// The number of the next session this handle names (`sdk-exec-N`, `sdk-bg-N`).
    pub next_session: std::sync::atomic::AtomicU64,
    /// The number of the next command line this handle sends (its `$0`, `sdk-cmd-N`).
    pub next_command: std::sync::atomic::AtomicU64,
}

/// One Daytona sandbox. Cheap to clone.
#[derive(Clone)]
pub struct DaytonaSandbox {
    inner: Arc<Inner>,
    id: String,
    toolbox: Arc<Toolbox>,
    /// The caller's deadline for lifecycle calls on this handle (waits for a state change in
    /// progress and for the call's own transition); the builder's timeouts when unset.
    deadline: Option<Duration>,
}

impl fmt::Debug for DaytonaSandbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DaytonaSandbox")
            .field("id", &self.id)
            .field("toolbox", &self.toolbox.base)
            .finish()
    }
}

/// The answer of the one-shot [`DaytonaSandbox::execute`]: stdout and stderr merged, as the
/// endpoint gives them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExecuteResult {
    /// The exit code (`-1` when the command could not start).
    pub exit_code: i32,
    /// Stdout and stderr, merged.
    pub result: String,
}

/// A command run in a session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SessionCommand {
    /// The command's id.
    pub id: String,
    /// The command line.
    pub command: String,
    /// Its exit code once it finished.
    pub exit_code: Option<i32>,
}

/// A session and its commands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Session {
    /// The session id.
    pub id: String,
    /// Commands run in it.
    pub commands: Vec<SessionCommand>,
}

/// The answer of [`DaytonaSandbox::session_exec`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SessionExec {
    /// The command's id.
    pub command_id: String,
    /// Exit code (synchronous runs only).
    pub exit_code: Option<i32>,
    /// Stdout (synchronous runs only).
    pub stdout: Option<String>,
    /// Stderr (synchronous runs only).
    pub stderr: Option<String>,
}

/// One match of [`DaytonaSandbox::find`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileMatch {
    /// The file.
    pub file: String,
    /// The line number.
    pub line: u64,
    /// The matching line.
    pub content: String,
}

/// Daytona's file metadata, with owner and group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DaytonaFileInfo {
    /// The common metadata.
    pub info: FileInfo,
    /// Owner user name.
    pub owner: Option<String>,
    /// Owner group name.
    pub group: Option<String>,
}

impl DaytonaSandbox {
    pub(crate) async fn from_dto(inner: Arc<Inner>, dto: &SandboxDto) -> Result<Self> {
        let id = dto.id.clone();
        // The caller's own toolbox URL is trusted; one from an API answer is checked: it may not
        // downgrade to http (unless the API itself is plain http, as on loopback) nor carry user
        // info, a query or a fragment, since the API key goes with every toolbox request.
        let checked = |url: &str| {
            checked_answer_url(url, &inner.config.api_url)
                .map_err(|e| e.or_context(PROVIDER, "connect", Some(&id)))
        };
        let root = match (&inner.config.toolbox_url, &dto.toolbox_proxy_url) {
            (Some(url), _) => url.clone(),
            (None, Some(url)) if !url.is_empty() => checked(url)?,
            _ => {
                #[derive(serde::Deserialize)]
                struct Url {
                    url: String,
                }
                let answer: Url = inner
                    .http
                    .request(
                        Method::Get,
                        &format!("{}/toolbox-proxy-url", Inner::sandbox_path(&id)),
                    )
                    .operation("connect")
                    .sandbox_id(&id)
                    .max_body(SMALL_ANSWER)
                    .send_json()
                    .await?;
                checked(&answer.url)?
            }
        };
        let base = format!(
            "{}/{}",
            root.trim_end_matches('/'),
            encode_path_segment(&id)
        );
        let http = inner.http.with_base_url(&base)?;
        Ok(DaytonaSandbox {
            toolbox: Arc::new(Toolbox {
                inner: inner.clone(),
                sandbox_id: id.clone(),
                http,
                base,
                next_session: std::sync::atomic::AtomicU64::new(1),
                next_command: std::sync::atomic::AtomicU64::new(1),
            }),
            inner,
            id,
            deadline: None,
        })
    }

    /// This handle with its own deadline for every lifecycle call (start, stop, pause, archive,
    /// recover, resize, destroy, ...): how long a "state change in progress" is waited out and
    /// the call's transition is polled, instead of the builder's timeouts.
    ///
    /// ```no_run
    /// # async fn demo(sandbox: sandbox_daytona::DaytonaSandbox) -> sandbox_sdk_core::Result<()> {
    /// use sandbox_sdk_core::Sandbox;
    /// use std::time::Duration;
    /// sandbox.with_deadline(Duration::from_secs(20)).stop().await?;
    /// # Ok(()) }
    /// ```
    pub fn with_deadline(&self, deadline: Duration) -> DaytonaSandbox {
        DaytonaSandbox {
            deadline: Some(deadline),
            ..self.clone()
        }
    }

    fn deadline(&self) -> Instant {
        crate::time::instant_after(
            self.deadline
                .unwrap_or(self.inner.config.state_change_timeout),
        )
    }

    fn start_deadline(&self) -> Instant {
        crate::time::instant_after(self.deadline.unwrap_or(self.inner.config.start_timeout))
    }

    async fn lifecycle(
        &self,
        operation: &str,
        suffix: &str,
        query: &[(&str, String)],
        body: Option<&serde_json::Value>,
        deadline: Instant,
    ) -> Result<SandboxDto> {
        let request = LifecycleRequest {
            operation,
            method: Method::Post,
            suffix,
            query,
            body,
        };
        let response = self
            .inner
            .lifecycle_call(&self.id, request, deadline)
            .await?;
        let bytes = response.bytes().await?;
        Ok(
            serde_json::from_slice(&bytes).unwrap_or_else(|_| SandboxDto {
                id: self.id.clone(),
                ..Default::default()
            }),
        )
    }

    /// Polls after a lifecycle call until the sandbox reaches `target`.
    async fn settle(
        &self,
        operation: &str,
        first: SandboxDto,
        target: &str,
        deadline: Instant,
    ) -> Result<SandboxDto> {
        let first = if first.state.is_none() {
            self.inner.fetch(&self.id, operation).await?
        } else {
            first
        };
        self.inner
            .wait_until(&self.id, first, operation, deadline, |raw| raw == target)
            .await
    }

    /// A lifecycle call without query or body (`suffix`), then polls until `target`.
    async fn transition(
        &self,
        operation: &str,
        suffix: &str,
        target: &str,
        deadline: Instant,
    ) -> Result<()> {
        let dto = self
            .lifecycle(operation, suffix, &[], None, deadline)
            .await?;
        self.settle(operation, dto, target, deadline)
            .await
            .map(drop)
    }

    /// Starts (or resumes, or restores from archive) the sandbox and waits until `started`.
    pub async fn start(&self) -> Result<()> {
        self.transition("start", "/start", "started", self.start_deadline())
            .await
    }

    /// Stops the sandbox (`force` sends SIGKILL instead of SIGTERM) and waits until `stopped`.
    /// An ephemeral sandbox is deleted by its stop; that also counts as done.
    pub async fn stop_with(&self, force: bool) -> Result<()> {
        let deadline = self.deadline();
        let query = [("force", force.to_string())];
        let query: &[(&str, String)] = if force { &query } else { &[] };
        let dto = self
            .lifecycle("stop", "/stop", query, None, deadline)
            .await?;
        match self.settle("stop", dto, "stopped", deadline).await {
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            other => other.map(drop),
        }
    }

    /// Archives a stopped sandbox and waits until `archived`.
    pub async fn archive(&self) -> Result<()> {
        self.transition("archive", "/archive", "archived", self.deadline())
            .await
    }

    /// Recovers a sandbox in a recoverable `error` state and waits until `started`.
    pub async fn recover(&self) -> Result<()> {
        self.transition("recover", "/recover", "started", self.start_deadline())
            .await
    }

    /// Resizes CPU (cores), memory and disk (GB; disk only grows, only when stopped) and waits
    /// until the sandbox rests again.
    pub async fn resize(
        &self,
        cpu: Option<u32>,
        memory_gb: Option<u32>,
        disk_gb: Option<u32>,
    ) -> Result<()> {
        let deadline = self.deadline();
        let body = serde_json::to_value(ResizeBody {
            cpu,
            memory: memory_gb,
            disk: disk_gb,
        })
        .map_err(|e| Error::validation(e.to_string()))?;
        let dto = self
            .lifecycle("resize", "/resize", &[], Some(&body), deadline)
            .await?;
        self.inner
            .wait_until(&self.id, dto, "resize", deadline, |s| {
                phase(s) == Phase::Resting
            })
            .await
            .map(drop)
    }

    /// Replaces all labels.
    pub async fn set_labels(
        &self,
        labels: BTreeMap<String, String>,
    ) -> Result<BTreeMap<String, String>> {
        let answer: Labels = self
            .api_request(Method::Put, "/labels", "set_labels")
            .json(&Labels { labels })
            .send_json()
            .await?;
        Ok(answer.labels)
    }

    async fn interval_call(&self, operation: &str, what: &str, value: String) -> Result<()> {
        self.lifecycle(
            operation,
            &format!("/{what}/{}", encode_path_segment(&value)),
            &[],
            None,
            self.deadline(),
        )
        .await
        .map(drop)
    }

    /// Minutes idle before auto-stop (0 = never).
    pub async fn set_auto_stop(&self, minutes: u32) -> Result<()> {
        self.interval_call("set_auto_stop", "autostop", minutes.to_string())
            .await
    }

    /// Minutes stopped before auto-archive (0 = the maximum).
    pub async fn set_auto_archive(&self, minutes: u32) -> Result<()> {
        self.interval_call("set_auto_archive", "autoarchive", minutes.to_string())
            .await
    }

    /// Minutes stopped before auto-delete (negative = never, 0 = as soon as stopped).
    pub async fn set_auto_delete(&self, minutes: i32) -> Result<()> {
        self.interval_call("set_auto_delete", "autodelete", minutes.to_string())
            .await
    }

    /// Makes preview links public (no token) or private.
    pub async fn set_public(&self, public: bool) -> Result<()> {
        self.interval_call("set_public", "public", public.to_string())
            .await
    }

    /// Forks the running sandbox (disk and memory) into a new one named `name` (or a generated
    /// name) and waits until the fork is `started`.
    pub async fn fork_named(&self, name: Option<&str>) -> Result<DaytonaSandbox> {
        let body = serde_json::to_value(ForkBody {
            name: name.map(str::to_owned),
        })
        .map_err(|e| Error::validation(e.to_string()))?;
        // A fork is a state change of the source: a 409 "state change in progress" is waited
        // out like the other lifecycle calls.
        let request = LifecycleRequest {
            body: Some(&body),
            ..LifecycleRequest::new("fork", Method::Post, "/fork")
        };
        let dto: SandboxDto = self
            .inner
            .lifecycle_call(&self.id, request, self.deadline())
            .await?
            .json()
            .await?;
        let dto = self
            .inner
            .wait_started(&dto.id, dto.clone(), "fork")
            .await?;
        DaytonaSandbox::from_dto(self.inner.clone(), &dto).await
    }

    /// Runs `command` over SSH through Daytona's gateway, whatever the builder's transport:
    /// stdout, stderr and the exit status apart and byte-exact, stdin (with end of file), a pty
    /// of the command's size and resizes through [`Process::resize`]. The access token comes
    /// from the process-wide cache (minted on first use, renewed before expiry). A gateway that
    /// drops the connection is reported, after a look at the sandbox, as `NotRunning` or as an
    /// `Unauthorized` (invalid or expired) token.
    pub async fn ssh_exec(&self, command: &Command) -> Result<Process> {
        crate::ssh::exec(self.inner.clone(), &self.id, command).await
    }

    // ---- toolbox: one-shot execute and sessions ----

    /// `POST /process/execute`: runs a shell command line in one request with cwd, env and a
    /// server-side timeout (seconds; the daemon kills the process group and answers `Timeout`).
    /// This endpoint merges stdout and stderr; [`Sandbox::exec`] keeps them apart.
    pub async fn execute(
        &self,
        command: &str,
        cwd: Option<&str>,
        env: &BTreeMap<String, String>,
        timeout: Option<Duration>,
    ) -> Result<ExecuteResult> {
        if command.is_empty() || command.contains('\0') {
            return Err(Error::validation("command is empty or contains a NUL byte"));
        }
        for key in env.keys() {
            sandbox_sdk_core::validate_env_name(key)?;
        }
        let secs = timeout.map(|t| t.as_secs().max(1));
        let mut request = self
            .toolbox
            .request(Method::Post, "/process/execute", "execute")
            .max_body(LARGE_ANSWER)
            .json(&ExecuteBody {
                command: command.to_owned(),
                cwd: cwd.map(str::to_owned),
                envs: env.clone(),
                timeout: secs,
            });
        if let Some(secs) = secs {
            // The daemon enforces the timeout; give the HTTP call a little longer.
            request = request.timeout(Duration::from_secs(secs + 5));
        }
        let answer: ExecuteAnswer = self.toolbox_send(request).await?.json().await?;
        Ok(ExecuteResult {
            exit_code: answer.exit_code.or(answer.code).unwrap_or(-1),
            result: answer.result,
        })
    }

    /// Creates a session: a persistent shell where `cd` and exports carry over between commands.
    pub async fn create_session(&self, session_id: &str) -> Result<()> {
        let request = self
            .toolbox
            .request(Method::Post, "/process/session", "create_session")
            .json(&CreateSessionBody {
                session_id: session_id.to_owned(),
            });
        self.toolbox_send(request).await?.bytes().await.map(drop)
    }

    /// Runs a command in a session: synchronously (stdout, stderr and exit code in the answer)
    /// or with `run_async` (only the command id; follow it with [`DaytonaSandbox::attach`] on
    /// `{session}/{command}`).
    pub async fn session_exec(
        &self,
        session_id: &str,
        command: &str,
        run_async: bool,
    ) -> Result<SessionExec> {
        let request = self
            .toolbox
            .request(
                Method::Post,
                &format!("{}/exec", exec::session_path(session_id)),
                "session_exec",
            )
            .json(&SessionExecBody {
                command: command.to_owned(),
                run_async,
            });
        let request = if run_async {
            request
        } else {
            request.no_timeout().max_body(LARGE_ANSWER)
        };
        let answer: SessionExecAnswer = self.toolbox_send(request).await?.json().await?;
        Ok(SessionExec {
            command_id: answer.cmd_id,
            exit_code: answer.exit_code,
            stdout: answer.stdout,
            stderr: answer.stderr,
        })
    }

    /// A session command's status; `exit_code` is `None` while it runs.
    pub async fn session_command(
        &self,
        session_id: &str,
        command_id: &str,
    ) -> Result<SessionCommand> {
        let request = self.toolbox.request(
            Method::Get,
            &exec::command_path(session_id, command_id),
            "session_command",
        );
        let dto: crate::wire::SessionCommandDto = self.toolbox_send(request).await?.json().await?;
        Ok(SessionCommand {
            id: dto.id,
            command: dto.command,
            exit_code: dto.exit_code,
        })
    }

    /// Sends text to a running session command's stdin (a finished command is `Conflict`).
    pub async fn session_input(
        &self,
        session_id: &str,
        command_id: &str,
        data: &str,
    ) -> Result<()> {
        let request = self
            .toolbox
            .request(
                Method::Post,
                &format!("{}/input", exec::command_path(session_id, command_id)),
                "session_input",
            )
            .json(&InputBody {
                data: data.to_owned(),
            });
        self.toolbox_send(request).await?.bytes().await.map(drop)
    }

    /// A session command's output so far (non-follow logs), stdout and stderr apart. The bytes
    /// are the daemon's: each line ends with a newline (follow a command with `attach` for the
    /// exact output of commands this SDK started).
    pub async fn session_logs(&self, session_id: &str, command_id: &str) -> Result<(Bytes, Bytes)> {
        let request = self
            .toolbox
            .request(
                Method::Get,
                &format!("{}/logs", exec::command_path(session_id, command_id)),
                "session_logs",
            )
            .max_body(LOG_ANSWER);
        let response = self.toolbox_send(request).await?;
        let content_type = response.header("content-type").map(str::to_owned);
        let body = response.bytes().await?;
        let large = body.len() > BLOCKING_DECODE;
        let split = move || crate::demux::session_logs(content_type.as_deref(), &body);
        // Decoding a large log is CPU work: off the runtime's workers.
        let split = if large {
            tokio::task::spawn_blocking(split).await.map_err(|e| {
                Error::new(
                    ErrorKind::Provider,
                    format!("decoding the logs failed: {e}"),
                )
            })?
        } else {
            split()
        };
        let (stdout, stderr) =
            split.map_err(|e| e.or_context(PROVIDER, "session_logs", Some(&self.id)))?;
        Ok((Bytes::from(stdout), Bytes::from(stderr)))
    }

    /// Deletes a session, killing what runs in it.
    pub async fn delete_session(&self, session_id: &str) -> Result<()> {
        exec::delete_session(&self.toolbox, session_id).await
    }

    /// Every session and its commands.
    pub async fn sessions(&self) -> Result<Vec<Session>> {
        let request = self
            .toolbox
            .request(Method::Get, "/process/session", "sessions")
            .max_body(LARGE_ANSWER);
        let sessions: Vec<SessionDto> = self.toolbox_send(request).await?.json().await?;
        Ok(sessions
            .into_iter()
            .map(|s| Session {
                id: s.session_id,
                commands: s
                    .commands
                    .unwrap_or_default()
                    .into_iter()
                    .map(|c| SessionCommand {
                        id: c.id,
                        command: c.command,
                        exit_code: c.exit_code,
                    })
                    .collect(),
            })
            .collect())
    }

    // ---- toolbox: files beyond the core set ----

    /// Metadata with owner and group.
    pub async fn file_info(&self, path: &str) -> Result<DaytonaFileInfo> {
        validate_path(path)?;
        let request = self
            .toolbox
            .request(Method::Get, "/files/info", "stat")
            .query("path", path);
        let dto: FileInfoDto = self.toolbox_send(request).await?.json().await?;
        Ok(DaytonaFileInfo {
            owner: dto.owner.clone(),
            group: dto.group.clone(),
            info: file_info(path, None, &dto),
        })
    }

    /// Changes owner, group and/or mode (octal text such as `"755"`).
    pub async fn set_permissions(
        &self,
        path: &str,
        owner: Option<&str>,
        group: Option<&str>,
        mode: Option<&str>,
    ) -> Result<()> {
        validate_path(path)?;
        let mut request = self
            .toolbox
            .request(Method::Post, "/files/permissions", "set_permissions")
            .query("path", path);
        if let Some(owner) = owner {
            request = request.query("owner", owner);
        }
        if let Some(group) = group {
            request = request.query("group", group);
        }
        if let Some(mode) = mode {
            if mode.is_empty() || !mode.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
                return Err(Error::validation(format!("mode {mode:?} is not octal")));
            }
            request = request.query("mode", mode);
        }
        self.toolbox_send(request).await?.bytes().await.map(drop)
    }

    /// Lines matching `pattern` in the files under `path` (content grep).
    pub async fn find(&self, path: &str, pattern: &str) -> Result<Vec<FileMatch>> {
        validate_path(path)?;
        let request = self
            .toolbox
            .request(Method::Get, "/files/find", "find")
            .max_body(LARGE_ANSWER)
            .query("path", path)
            .query("pattern", pattern);
        let matches: Vec<MatchDto> = self.toolbox_send(request).await?.json().await?;
        Ok(matches
            .into_iter()
            .map(|m| FileMatch {
                file: m.file,
                line: m.line,
                content: m.content,
            })
            .collect())
    }

    /// Files under `path` whose names match the glob `pattern`.
    pub async fn search(&self, path: &str, pattern: &str) -> Result<Vec<String>> {
        validate_path(path)?;
        let request = self
            .toolbox
            .request(Method::Get, "/files/search", "search")
            .max_body(LARGE_ANSWER)
            .query("path", path)
            .query("pattern", pattern);
        let answer: SearchAnswer = self.toolbox_send(request).await?.json().await?;
        Ok(answer.files)
    }

    /// Uploads several files in one multipart request (`files[i].path` before `files[i].file`,
    /// as the daemon expects); parents are created and existing files replaced. Returns the
    /// bytes written per path, as the daemon reports them.
    pub async fn upload_many(&self, files: Vec<(String, Bytes)>) -> Result<Vec<(String, u64)>> {
        let mut form = Multipart::new();
        for (i, (path, data)) in files.iter().enumerate() {
            validate_path(path)?;
            form = form.text(&format!("files[{i}].path"), path.clone()).bytes(
                &format!("files[{i}].file"),
                file_name(path),
                "application/octet-stream",
                data.clone(),
            );
        }
        let request = self
            .toolbox
            .request(Method::Post, "/files/bulk-upload", "upload")
            .multipart(form)
            .idle_timeout(self.inner.config.idle_timeout);
        let answer: BulkUploadAnswer = self.toolbox_send(request).await?.json().await?;
        Ok(files
            .iter()
            .map(|(path, data)| {
                let reported = answer
                    .files
                    .iter()
                    .find(|f| &f.path == path)
                    .and_then(|f| f.bytes);
                (path.clone(), reported.unwrap_or(data.len() as u64))
            })
            .collect())
    }

    // ---- previews ----

    /// A signed preview URL for `port`, valid for `expires_in` (1 s to 24 h): no header needed,
    /// survives restarts.
    pub async fn signed_preview_link(
        &self,
        port: u16,
        expires_in: Duration,
    ) -> Result<PreviewLink> {
        let secs = expires_in.as_secs().clamp(1, 86_400);
        let dto: PreviewUrlDto = self
            .api_request(
                Method::Get,
                &format!("/ports/{port}/signed-preview-url"),
                "preview_link",
            )
            .query("expiresInSeconds", secs)
            .send_json()
            .await?;
        let mut headers = BTreeMap::new();
        headers.insert(
            "X-Daytona-Skip-Preview-Warning".to_owned(),
            "true".to_owned(),
        );
        Ok(PreviewLink {
            url: dto.url,
            port,
            headers,
            token: dto.token,
            expires_at: Some(SystemTime::now() + Duration::from_secs(secs)),
        })
    }

    /// Revokes a signed preview URL before it expires. The token travels in the request's
    /// path (the API has no other form), so an error never repeats it: every occurrence in the
    /// message (the path, or an answer that echoes it) is replaced by `<redacted>`.
    pub async fn expire_signed_preview_link(&self, port: u16, token: &str) -> Result<()> {
        let segment = encode_path_segment(token);
        self.api_request(
            Method::Post,
            &format!("/ports/{port}/signed-preview-url/{segment}/expire"),
            "preview_link",
        )
        .path_secret(token)
        .send_empty()
        .await
    }

    /// Sends `GET {link.url}{path}` with the link's headers and returns the answer. A request
    /// the preview proxy does not accept is redirected to the login page (307); that comes back
    /// as `Unauthorized`, like any refused credential.
    ///
    /// `path` must be empty or start with one `/`, and the joined URL must keep the link's
    /// scheme, host and port (`Validation` otherwise, before anything is sent): a path such as
    /// `@other-host/x` cannot carry the link's token to another host.
    pub async fn fetch_preview(&self, link: &PreviewLink, path: &str) -> Result<Response> {
        let url = sandbox_sdk_core::http::join_same_origin(&link.url, path)
            .map_err(|e| e.or_context(PROVIDER, "fetch_preview", Some(&self.id)))?;
        let mut request = self
            .inner
            .http
            .request_url(Method::Get, &url)
            .without_auth()
            .operation("fetch_preview")
            .sandbox_id(&self.id);
        for (name, value) in &link.headers {
            request = if name.to_ascii_lowercase().contains("token") {
                request.sensitive_header(name, value)
            } else {
                request.header(name, value)
            };
        }
        request.send().await
    }

    /// A control-plane request to `suffix` below this sandbox's path, for `operation`.
    fn api_request(&self, method: Method, suffix: &str, operation: &str) -> Request {
        self.inner
            .http
            .request(
                method,
                &format!("{}{suffix}", Inner::sandbox_path(&self.id)),
            )
            .operation(operation)
            .sandbox_id(&self.id)
    }

    /// Sends a toolbox request. The proxy's empty-body 502 is checked against the sandbox's
    /// state: a sandbox that is not `started` turns it into `NotRunning`.
    async fn toolbox_send(&self, request: Request) -> Result<Response> {
        match request.send().await {
            Err(e) => Err(self.toolbox.explain(e).await),
            ok => ok,
        }
    }
}

impl Toolbox {
    /// A toolbox request to `path` (below the toolbox base) for `operation`, aimed at this
    /// sandbox.
    pub(crate) fn request(&self, method: Method, path: &str, operation: &str) -> Request {
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
    pub(crate) async fn explain(&self, error: Error) -> Error {
        // The proxy's empty 502, and a 400 the mapping could not place (the proxy refuses a
        // request for a sandbox it cannot reach with 400, in wording that has changed).
        let unclear = is_empty_bad_gateway(&error)
            || (error.kind() == ErrorKind::Validation && error.status() == Some(400));
        if !unclear {
            return error;
        }
        match self.inner.fetch(&self.sandbox_id, "check").await {
            Ok(dto) if dto.state.as_deref() != Some("started") => Error::new(
                ErrorKind::NotRunning,
                format!(
                    "the toolbox proxy could not reach the sandbox: it is {}",
                    dto.state.as_deref().unwrap_or("in an unknown state")
                ),
            )
            .with_status(error.status().unwrap_or(502))
            .or_context(
                PROVIDER,
                error.operation().unwrap_or("toolbox"),
                Some(&self.sandbox_id),
            ),
            Err(e) if e.kind() == ErrorKind::NotFound => {
                Error::new(ErrorKind::NotRunning, "the sandbox is gone")
                    .with_status(error.status().unwrap_or(502))
                    .or_context(
                        PROVIDER,
                        error.operation().unwrap_or("toolbox"),
                        Some(&self.sandbox_id),
                    )
            }
            _ => error,
        }
    }
}

fn file_name(path: &str) -> &str {
    path.trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or(path)
}

/// Permission bits from `permissions` (octal text) or `mode` (`-rwxr-xr-x`).
fn mode_bits(dto: &FileInfoDto) -> Option<u32> {
    if let Some(p) = &dto.permissions
        && let Ok(bits) = u32::from_str_radix(p.trim(), 8)
    {
        return Some(bits & 0o7777);
    }
    let mode = dto.mode.as_deref()?;
    let perms = mode.get(mode.len().checked_sub(9)?..)?;
    let mut bits = 0u32;
    for (i, c) in perms.chars().enumerate() {
        if c != '-' {
            bits |= 1 << (8 - i);
        }
    }
    Some(bits)
}

fn file_info(requested: &str, parent: Option<&str>, dto: &FileInfoDto) -> FileInfo {
    let path = dto.path.clone().unwrap_or_else(|| match parent {
        Some(dir) => format!("{}/{}", dir.trim_end_matches('/'), dto.name),
        None => requested.to_owned(),
    });
    let kind = if dto.is_dir {
        FileKind::Dir
    } else if dto.mode.as_deref().is_some_and(|m| m.starts_with('L')) {
        FileKind::Symlink
    } else if dto.mode.as_deref().is_some_and(|m| m.starts_with('-')) || dto.mode.is_none() {
        FileKind::File
    } else {
        FileKind::Other
    };
    let name = if dto.name.is_empty() {
        file_name(&path).to_owned()
    } else {
        dto.name.clone()
    };
    FileInfo {
        path,
        name,
        kind,
        size: dto.size,
        mode: mode_bits(dto),
        modified: dto.modified_at.as_deref().and_then(parse_rfc3339),
    }
}

/// Counts bytes as an upload stream is read.
fn counted(body: UploadBody, counter: Arc<AtomicU64>) -> sandbox_sdk_core::ByteStream {
    tokio_util::io::ReaderStream::new(body)
        .map(move |chunk| {
            let chunk = chunk.map_err(Error::from)?;
            counter.fetch_add(chunk.len() as u64, Ordering::Relaxed);
            Ok(chunk)
        })
        .boxed()
}

#[async_trait::async_trait]
impl Sandbox for DaytonaSandbox {
    fn id(&self) -> &str {
        &self.id
    }

    fn provider(&self) -> &str {
        PROVIDER
    }

    fn capabilities(&self) -> Capabilities {
        crate::capabilities::capabilities_for(&self.inner.config)
    }

    async fn info(&self) -> Result<SandboxInfo> {
        Ok(info_from_dto(&self.inner.fetch(&self.id, "info").await?))
    }

    /// Runs a command: through a toolbox session, or over SSH when the builder chose
    /// [`ExecTransport::Ssh`](crate::ExecTransport::Ssh) (background commands always use a
    /// toolbox session, so they can be listed, reattached and killed).
    async fn exec(&self, command: &Command) -> Result<Process> {
        if self.inner.config.exec_transport == crate::builder::ExecTransport::Ssh
            && !command.background
        {
            return self.ssh_exec(command).await;
        }
        exec::start(self.toolbox.clone(), command).await
    }

    async fn processes(&self) -> Result<Vec<ProcessInfo>> {
        let sessions = self.sessions().await?;
        Ok(sessions
            .into_iter()
            .flat_map(|s| {
                let sid = s.id;
                let tag = sid.strip_prefix(exec::TAG_PREFIX).map(str::to_owned);
                s.commands.into_iter().map(move |c| ProcessInfo {
                    pid: format!("{sid}/{}", c.id),
                    tag: tag.clone(),
                    argv: vec![c.command],
                    cwd: None,
                    running: c.exit_code.is_none(),
                })
            })
            .collect())
    }

    /// Reattaches by pid (`{session}/{command}`) or by tag (the last command of the tag's
    /// session). The log is followed from its start.
    async fn attach(&self, pid: &str) -> Result<Process> {
        let (sid, cid) = if pid.contains('/') {
            let (sid, cid) = exec::split_pid(pid)?;
            // Fail early, with NotFound, for a pid that does not exist.
            self.session_command(sid, cid).await?;
            (sid.to_owned(), cid.to_owned())
        } else {
            let sid = exec::tag_session(pid)?;
            let request = self
                .toolbox
                .request(Method::Get, &exec::session_path(&sid), "attach")
                .max_body(LARGE_ANSWER);
            let session: SessionDto = self.toolbox_send(request).await?.json().await?;
            let last = session.commands.unwrap_or_default().pop().ok_or_else(|| {
                Error::new(
                    ErrorKind::NotFound,
                    format!("no command runs under tag {pid}"),
                )
                .or_context(PROVIDER, "attach", Some(&self.id))
            })?;
            (sid, last.id)
        };
        Ok(exec::process(self.toolbox.clone(), sid, cid, false, None))
    }

    /// Kills by pid or tag: deletes the command's session (the daemon kills its shell). A
    /// command run over SSH (pid `ssh/…`) is killed through its channel while its handle lives.
    async fn kill_process(&self, pid: &str) -> Result<()> {
        if pid.starts_with(crate::ssh::PID_PREFIX) {
            return crate::ssh::kill(pid, &self.id).await;
        }
        let sid = if pid.contains('/') {
            let (sid, cid) = exec::split_pid(pid)?;
            // A foreground session serves one command after another: once this command has
            // ended, its session may run another, which deleting it would kill.
            if sid.starts_with(exec::EXEC_PREFIX)
                && self.session_command(sid, cid).await?.exit_code.is_some()
            {
                return Ok(());
            }
            sid.to_owned()
        } else {
            exec::tag_session(pid)?
        };
        exec::delete_session(&self.toolbox, &sid).await
    }

    async fn upload(&self, path: &str, body: UploadBody) -> Result<Transfer> {
        validate_path(path)?;
        let counter = Arc::new(AtomicU64::new(0));
        let stream = counted(body, counter.clone());
        let form = Multipart::new().text("files[0].path", path).stream(
            "files[0].file",
            file_name(path),
            "application/octet-stream",
            StreamBody::from(stream),
            None,
        );
        let request = self
            .toolbox
            .request(Method::Post, "/files/bulk-upload", "upload")
            .multipart(form)
            .idle_timeout(self.inner.config.idle_timeout);
        let answer: BulkUploadAnswer = self.toolbox_send(request).await?.json().await?;
        let sent = counter.load(Ordering::Relaxed);
        let reported = answer
            .files
            .iter()
            .find(|f| f.path == path)
            .and_then(|f| f.bytes);
        Ok(Transfer {
            bytes: reported.unwrap_or(sent),
            emulated: false,
        })
    }

    async fn write_file(&self, path: &str, data: Bytes) -> Result<Transfer> {
        let written = self.upload_many(vec![(path.to_owned(), data)]).await?;
        Ok(Transfer {
            bytes: written.first().map(|(_, n)| *n).unwrap_or(0),
            emulated: false,
        })
    }

    async fn download(&self, path: &str) -> Result<Download> {
        validate_path(path)?;
        let request = self
            .toolbox
            .request(Method::Get, "/files/download", "download")
            .query("path", path)
            .idle_timeout(self.inner.config.idle_timeout);
        let response = self.toolbox_send(request).await?;
        Ok(Download::new(response.bytes_stream()))
    }

    async fn list_files(&self, path: &str, options: ListOptions) -> Result<Vec<FileInfo>> {
        validate_path(path)?;
        let mut request = self
            .toolbox
            .request(Method::Get, "/files", "list_files")
            .max_body(LARGE_ANSWER)
            .query("path", path);
        if options.depth > 1 {
            request = request.query("depth", options.depth);
        }
        let entries: Vec<FileInfoDto> = self.toolbox_send(request).await?.json().await?;
        Ok(entries
            .iter()
            .map(|e| file_info(path, Some(path), e))
            .collect())
    }

    async fn stat(&self, path: &str) -> Result<FileInfo> {
        Ok(self.file_info(path).await?.info)
    }

    async fn mkdir(&self, path: &str) -> Result<()> {
        validate_path(path)?;
        let request = self
            .toolbox
            .request(Method::Post, "/files/folder", "mkdir")
            .query("path", path)
            .query("mode", "755");
        self.toolbox_send(request).await?.bytes().await.map(drop)
    }

    async fn remove(&self, path: &str) -> Result<()> {
        validate_path(path)?;
        let request = self
            .toolbox
            .request(Method::Delete, "/files", "remove")
            .query("path", path)
            .query("recursive", "true");
        self.toolbox_send(request).await?.bytes().await.map(drop)
    }

    async fn rename(&self, from: &str, to: &str) -> Result<()> {
        validate_path(from)?;
        validate_path(to)?;
        let request = self
            .toolbox
            .request(Method::Post, "/files/move", "rename")
            .query("source", from)
            .query("destination", to);
        self.toolbox_send(request).await?.bytes().await.map(drop)
    }

    async fn watch(&self, _path: &str, _recursive: bool) -> Result<FileEventStream> {
        Err(Error::not_supported(PROVIDER, "watch"))
    }

    async fn stop(&self) -> Result<()> {
        self.stop_with(false).await
    }

    async fn pause(&self) -> Result<()> {
        self.transition("pause", "/pause", "paused", self.deadline())
            .await
    }

    /// Starts the sandbox again. Daytona keeps the time to live (`ttlMinutes`, wall-clock since
    /// creation) across stops, so nothing needs reapplying.
    async fn resume(&self) -> Result<()> {
        self.start().await
    }

    async fn destroy(&self) -> Result<()> {
        self.inner.destroy(&self.id, self.deadline()).await
    }

    /// Sets Daytona's TTL so the sandbox is destroyed `timeout` from now: `setTtl` re-anchors
    /// the TTL at the current time (api.json), so the minutes asked for are `timeout` rounded up.
    async fn set_timeout(&self, timeout: Duration) -> Result<()> {
        let minutes = timeout.as_secs().div_ceil(60).max(1);
        self.interval_call("set_timeout", "ttl", minutes.to_string())
            .await
    }

    /// The preview URL for `port` and the token it needs (sent as `x-daytona-preview-token`;
    /// the warning page is skipped with `X-Daytona-Skip-Preview-Warning`). The token changes on
    /// every start.
    async fn preview_link(&self, port: u16) -> Result<PreviewLink> {
        let dto: PreviewUrlDto = self
            .api_request(
                Method::Get,
                &format!("/ports/{port}/preview-url"),
                "preview_link",
            )
            .send_json()
            .await?;
        let mut headers = BTreeMap::new();
        if let Some(token) = &dto.token {
            headers.insert("x-daytona-preview-token".to_owned(), token.clone());
        }
        headers.insert(
            "X-Daytona-Skip-Preview-Warning".to_owned(),
            "true".to_owned(),
        );
        Ok(PreviewLink {
            url: dto.url,
            port,
            headers,
            token: dto.token,
            expires_at: None,
        })
    }

    /// SSH access through Daytona's gateway: the token is the user name (auth method `none`).
    /// One token per sandbox is kept for the whole process and reused while it stays valid for
    /// `ttl`, because minting a new one revokes the old.
    async fn ssh_access(&self, ttl: Duration) -> Result<SshAccess> {
        crate::ssh::access(&self.inner, &self.id, ttl).await
    }

    async fn fork(&self) -> Result<Box<dyn Sandbox>> {
        Ok(Box::new(self.fork_named(None).await?))
    }

    /// Snapshots the sandbox under `name` (or `sdk-snapshot-<uuid>`); the snapshot's name is its
    /// id for [`sandbox_sdk_core::CreateSpec::template`].
    async fn snapshot(&self, name: Option<&str>) -> Result<SnapshotInfo> {
        let name = name
            .map(str::to_owned)
            .unwrap_or_else(|| format!("sdk-snapshot-{}", uuid::Uuid::new_v4().simple()));
        let body = serde_json::to_value(SandboxSnapshotBody {
            name: name.clone(),
            include_memory: None,
        })
        .map_err(|e| Error::validation(e.to_string()))?;
        self.lifecycle("snapshot", "/snapshot", &[], Some(&body), self.deadline())
            .await?;
        Ok(SnapshotInfo {
            id: name.clone(),
            name: Some(name),
            sandbox_id: Some(self.id.clone()),
            created_at: None,
        })
    }

    /// The daemon's latest CPU, memory and disk sample (`GET /system/metrics`, newer daemons;
    /// CPU percent is of the sandbox's CPU limit, 0 until the first sample completes).
    async fn metrics(&self) -> Result<Metrics> {
        let request = self
            .toolbox
            .request(Method::Get, "/system/metrics", "metrics");
        let dto: crate::wire::SystemMetricsDto = self.toolbox_send(request).await?.json().await?;
        let timestamp = match (dto.timestamp_unix, dto.timestamp.as_deref()) {
            (Some(secs), _) if secs >= 0 => {
                Some(std::time::UNIX_EPOCH + Duration::from_secs(secs as u64))
            }
            (_, Some(text)) => parse_rfc3339(text),
            _ => None,
        };
        Ok(Metrics {
            timestamp,
            cpu_percent: dto.cpu_used_pct,
            cpu_count: dto.cpu_count,
            memory_used_bytes: dto.mem_used,
            memory_total_bytes: dto.mem_total,
            disk_used_bytes: dto.disk_used,
            disk_total_bytes: dto.disk_total,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_toolbox_url_from_the_api_may_not_downgrade_to_http() {
        let provider = crate::DaytonaBuilder::new()
            .api_key("dtn_k")
            .api_url("https://app.example.test/api")
            .build()
            .unwrap();
        let dto = |url: &str| SandboxDto {
            id: "sb1".into(),
            toolbox_proxy_url: Some(url.into()),
            ..Default::default()
        };
        let err = DaytonaSandbox::from_dto(
            provider.inner.clone(),
            &dto("http://proxy.example.test/toolbox"),
        )
        .await
        .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Provider);
        assert!(err.message().contains("plain http"), "{err}");
        let ok = DaytonaSandbox::from_dto(
            provider.inner.clone(),
            &dto("https://proxy.example.test/toolbox/"),
        )
        .await
        .unwrap();
        assert_eq!(ok.toolbox.base, "https://proxy.example.test/toolbox/sb1");
    }

    #[test]
    fn mode_bits_read_octal_permissions_or_the_mode_string() {
        let dto = FileInfoDto {
            permissions: Some("0644".into()),
            ..Default::default()
        };
        assert_eq!(mode_bits(&dto), Some(0o644));
        let dto = FileInfoDto {
            mode: Some("-rwxr-x--x".into()),
            ..Default::default()
        };
        assert_eq!(mode_bits(&dto), Some(0o751));
        let dto = FileInfoDto {
            mode: Some("drwxr-xr-x".into()),
            is_dir: true,
            name: "d".into(),
            ..Default::default()
        };
        let info = file_info("x/d", Some("x"), &dto);
        assert_eq!(info.kind, FileKind::Dir);
        assert_eq!(info.path, "x/d");
        assert_eq!(info.mode, Some(0o755));
    }

    #[test]
    fn file_names_are_the_last_component() {
        assert_eq!(file_name("a/b/c.txt"), "c.txt");
        assert_eq!(file_name("c.txt"), "c.txt");
        assert_eq!(file_name("a/b/"), "b");
    }
}
