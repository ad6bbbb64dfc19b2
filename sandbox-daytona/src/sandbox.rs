//! [`DaytonaSandbox`]: one sandbox — the [`Sandbox`] trait and Daytona's own extras as
//! inherent methods, each a thin call into [`lifecycle`](crate::lifecycle),
//! [`exec`](crate::exec) or [`files`](crate::files).

use crate::api::client::Api;
use crate::api::toolbox::Toolbox;
use crate::code::Code;
use crate::config::{ExecTransport, LOG_ANSWER, PROVIDER, deadline_after};
use crate::exec::session::{SessionPool, Sessions};
use crate::files::{DaytonaFileInfo, FileMatch};
use crate::lifecycle::state::info_from_dto;
use crate::lifecycle::{calls, preview, wait};
use crate::wire::{ExecuteBody, ResizeBody, SandboxDto};
use crate::{exec, files};
use bytes::Bytes;
use sandbox_sdk_core::code::{CodeContext, CodeRun, ContextSpec, RunCode};
use sandbox_sdk_core::http::Response;
use sandbox_sdk_core::time::parse_rfc3339;
use sandbox_sdk_core::{
    Capabilities, Command, Download, Error, ErrorKind, FileInfo, ListOptions, Metrics, PreviewLink,
    Process, ProcessInfo, Result, Sandbox, SandboxInfo, SnapshotInfo, SshAccess, Transfer,
    UploadBody,
};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// A log body larger than this is decoded on a blocking thread, not on a runtime worker.
const BLOCKING_DECODE: usize = 1024 * 1024;

/// One Daytona sandbox. Cheap to clone.
#[derive(Clone)]
pub struct DaytonaSandbox {
    api: Arc<Api>,
    pool: Arc<SessionPool>,
    id: String,
    sessions: Arc<Sessions>,
    /// Code contexts: which have the prelude, which lost their state.
    code: Arc<Code>,
    /// The caller's deadline for lifecycle calls on this handle (waits for a state change in
    /// progress and for the call's own transition); the builder's timeouts when unset.
    deadline: Option<Duration>,
}

impl fmt::Debug for DaytonaSandbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DaytonaSandbox")
            .field("id", &self.id)
            .field("toolbox", &self.sessions.tb.base)
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

/// Deletes sandbox `id`, forgets its SSH token and idle sessions, then waits (within
/// `deadline`) until it is gone.
pub(crate) async fn destroy(
    api: &Api,
    pool: &SessionPool,
    id: &str,
    deadline: Instant,
) -> Result<()> {
    wait::delete(api, id, deadline).await?;
    exec::ssh::forget(api, id).await;
    pool.forget(id);
    wait::wait_gone(api, id, deadline).await
}

impl DaytonaSandbox {
    /// A handle to the sandbox `dto` describes (its toolbox found as [`Toolbox::open`] says).
    pub(crate) async fn open(
        api: Arc<Api>,
        pool: Arc<SessionPool>,
        dto: &SandboxDto,
    ) -> Result<Self> {
        let tb = Arc::new(Toolbox::open(api.clone(), dto).await?);
        Ok(DaytonaSandbox {
            sessions: Arc::new(Sessions::new(tb, pool.clone())),
            code: Arc::default(),
            api,
            pool,
            id: dto.id.clone(),
            deadline: None,
        })
    }

    fn tb(&self) -> &Toolbox {
        &self.sessions.tb
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
        deadline_after(
            self.deadline
                .unwrap_or(self.api.config.state_change_timeout),
        )
    }

    fn start_deadline(&self) -> Instant {
        deadline_after(self.deadline.unwrap_or(self.api.config.start_timeout))
    }

    /// Starts (or resumes, or restores from archive) the sandbox and waits until `started`.
    pub async fn start(&self) -> Result<()> {
        calls::transition(
            &self.api,
            &self.id,
            "start",
            "/start",
            "started",
            self.start_deadline(),
        )
        .await
    }

    /// Stops the sandbox (`force` sends SIGKILL instead of SIGTERM) and waits until `stopped`.
    /// An ephemeral sandbox is deleted by its stop; that also counts as done.
    pub async fn stop_with(&self, force: bool) -> Result<()> {
        calls::stop(&self.api, &self.id, force, self.deadline()).await
    }

    /// Archives a stopped sandbox and waits until `archived`.
    pub async fn archive(&self) -> Result<()> {
        calls::transition(
            &self.api,
            &self.id,
            "archive",
            "/archive",
            "archived",
            self.deadline(),
        )
        .await
    }

    /// Recovers a sandbox in a recoverable `error` state and waits until `started`.
    pub async fn recover(&self) -> Result<()> {
        calls::transition(
            &self.api,
            &self.id,
            "recover",
            "/recover",
            "started",
            self.start_deadline(),
        )
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
        let body = ResizeBody {
            cpu,
            memory: memory_gb,
            disk: disk_gb,
        };
        calls::resize(&self.api, &self.id, body, self.deadline()).await
    }

    /// Replaces all labels.
    pub async fn set_labels(
        &self,
        labels: BTreeMap<String, String>,
    ) -> Result<BTreeMap<String, String>> {
        self.api.set_labels(&self.id, labels).await
    }

    async fn set(&self, operation: &str, what: &str, value: String) -> Result<()> {
        calls::set(&self.api, &self.id, operation, what, value, self.deadline()).await
    }

    /// Minutes idle before auto-stop (0 = never).
    pub async fn set_auto_stop(&self, minutes: u32) -> Result<()> {
        self.set("set_auto_stop", "autostop", minutes.to_string())
            .await
    }

    /// Minutes stopped before auto-archive (0 = the maximum).
    pub async fn set_auto_archive(&self, minutes: u32) -> Result<()> {
        self.set("set_auto_archive", "autoarchive", minutes.to_string())
            .await
    }

    /// Minutes stopped before auto-delete (negative = never, 0 = as soon as stopped).
    pub async fn set_auto_delete(&self, minutes: i32) -> Result<()> {
        self.set("set_auto_delete", "autodelete", minutes.to_string())
            .await
    }

    /// Makes preview links public (no token) or private.
    pub async fn set_public(&self, public: bool) -> Result<()> {
        self.set("set_public", "public", public.to_string()).await
    }

    /// Forks the running sandbox (disk and memory) into a new one named `name` (or a generated
    /// name) and waits until the fork is `started`.
    pub async fn fork_named(&self, name: Option<&str>) -> Result<DaytonaSandbox> {
        let dto = calls::fork(&self.api, &self.id, name, self.deadline()).await?;
        DaytonaSandbox::open(self.api.clone(), self.pool.clone(), &dto).await
    }

    /// Runs `command` over SSH through Daytona's gateway, whatever the builder's transport:
    /// stdout, stderr and the exit status apart and byte-exact, stdin (with end of file), a pty
    /// of the command's size and resizes through [`Process::resize`]. The access token comes
    /// from the process-wide cache (minted on first use, renewed before expiry). A gateway that
    /// drops the connection is reported, after a look at the sandbox, as `NotRunning` or as an
    /// `Unauthorized` (invalid or expired) token.
    pub async fn ssh_exec(&self, command: &Command) -> Result<Process> {
        exec::ssh::exec(self.api.clone(), &self.id, command).await
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
        let body = ExecuteBody {
            command: command.to_owned(),
            cwd: cwd.map(str::to_owned),
            envs: env.clone(),
            timeout: timeout.map(|t| t.as_secs().max(1)),
        };
        let answer = self.tb().explained(self.tb().execute(&body).await).await?;
        Ok(ExecuteResult {
            exit_code: answer.exit_code.or(answer.code).unwrap_or(-1),
            result: answer.result,
        })
    }

    /// Creates a session: a persistent shell where `cd` and exports carry over between commands.
    pub async fn create_session(&self, session_id: &str) -> Result<()> {
        let tb = self.tb();
        tb.explained(tb.create_session(session_id, "create_session").await)
            .await
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
        let tb = self.tb();
        let answer = if run_async {
            tb.session_exec_async(session_id, command, None, "session_exec")
                .await
        } else {
            tb.session_exec_sync(session_id, command, "session_exec")
                .await
        };
        let answer = tb.explained(answer).await?;
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
        let tb = self.tb();
        let dto = tb
            .explained(tb.command(session_id, command_id, "session_command").await)
            .await?;
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
        let tb = self.tb();
        tb.explained(tb.command_input(session_id, command_id, data).await)
            .await
    }

    /// A session command's output so far (non-follow logs), stdout and stderr apart. The bytes
    /// are the daemon's: each line ends with a newline (follow a command with `attach` for the
    /// exact output of commands this SDK started).
    pub async fn session_logs(&self, session_id: &str, command_id: &str) -> Result<(Bytes, Bytes)> {
        let tb = self.tb();
        let response = tb
            .explained(
                tb.command_logs(session_id, command_id, Some(LOG_ANSWER), "session_logs")
                    .await,
            )
            .await?;
        let content_type = response.header("content-type").map(str::to_owned);
        let body = response.bytes().await?;
        let large = body.len() > BLOCKING_DECODE;
        let split = move || exec::session_logs(content_type.as_deref(), &body);
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
        self.sessions.delete(session_id).await
    }

    /// Every session and its commands.
    pub async fn sessions(&self) -> Result<Vec<Session>> {
        let tb = self.tb();
        let sessions = tb.explained(tb.list_sessions().await).await?;
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
        files::info(self.tb(), path).await
    }

    /// Changes owner, group and/or mode (octal text such as `"755"`).
    pub async fn set_permissions(
        &self,
        path: &str,
        owner: Option<&str>,
        group: Option<&str>,
        mode: Option<&str>,
    ) -> Result<()> {
        files::set_permissions(self.tb(), path, owner, group, mode).await
    }

    /// Lines matching `pattern` in the files under `path` (content grep).
    pub async fn find(&self, path: &str, pattern: &str) -> Result<Vec<FileMatch>> {
        files::find(self.tb(), path, pattern).await
    }

    /// Files under `path` whose names match the glob `pattern`.
    pub async fn search(&self, path: &str, pattern: &str) -> Result<Vec<String>> {
        files::search(self.tb(), path, pattern).await
    }

    /// Uploads several files in one multipart request (`files[i].path` before `files[i].file`,
    /// as the daemon expects); parents are created and existing files replaced. Returns the
    /// bytes written per path, as the daemon reports them.
    pub async fn upload_many(&self, files: Vec<(String, Bytes)>) -> Result<Vec<(String, u64)>> {
        files::upload_many(self.tb(), files).await
    }

    // ---- previews ----

    /// A signed preview URL for `port`, valid for `expires_in` (1 s to 24 h): no header needed,
    /// survives restarts.
    pub async fn signed_preview_link(
        &self,
        port: u16,
        expires_in: Duration,
    ) -> Result<PreviewLink> {
        preview::signed_link(&self.api, &self.id, port, expires_in).await
    }

    /// Revokes a signed preview URL before it expires. The token travels in the request's
    /// path (the API has no other form), so an error never repeats it: every occurrence in the
    /// message (the path, or an answer that echoes it) is replaced by `<redacted>`.
    pub async fn expire_signed_preview_link(&self, port: u16, token: &str) -> Result<()> {
        self.api
            .expire_signed_preview_url(&self.id, port, token)
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
        preview::fetch(&self.api, &self.id, link, path).await
    }
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
        crate::capabilities::capabilities_for(self.api.config.exec_transport)
    }

    async fn info(&self) -> Result<SandboxInfo> {
        Ok(info_from_dto(
            &self.api.get_sandbox(&self.id, "info").await?,
        ))
    }

    /// Runs a command: through a toolbox session, or over SSH when the builder chose
    /// [`ExecTransport::Ssh`] (background commands always use a toolbox session, so they can
    /// be listed, reattached and killed).
    async fn exec(&self, command: &Command) -> Result<Process> {
        if self.api.config.exec_transport == ExecTransport::Ssh && !command.background {
            return self.ssh_exec(command).await;
        }
        exec::start(self.sessions.clone(), command).await
    }

    async fn processes(&self) -> Result<Vec<ProcessInfo>> {
        exec::processes(&self.sessions).await
    }

    /// Reattaches by pid (`{session}/{command}`) or by tag (the last command of the tag's
    /// session). The log is followed from its start.
    async fn attach(&self, pid: &str) -> Result<Process> {
        exec::attach(&self.sessions, pid).await
    }

    /// Kills by pid or tag: deletes the command's session (the daemon kills its shell). A
    /// command run over SSH (pid `ssh/…`) is killed through its channel while its handle lives.
    async fn kill_process(&self, pid: &str) -> Result<()> {
        exec::kill(&self.sessions, pid).await
    }

    async fn upload(&self, path: &str, body: UploadBody) -> Result<Transfer> {
        files::upload(self.tb(), path, body).await
    }

    async fn write_file(&self, path: &str, data: Bytes) -> Result<Transfer> {
        let written = files::upload_many(self.tb(), vec![(path.to_owned(), data)]).await?;
        Ok(Transfer {
            bytes: written.first().map(|(_, n)| *n).unwrap_or(0),
            emulated: false,
        })
    }

    async fn download(&self, path: &str) -> Result<Download> {
        files::download(self.tb(), path).await
    }

    async fn list_files(&self, path: &str, options: ListOptions) -> Result<Vec<FileInfo>> {
        files::list(self.tb(), path, options).await
    }

    async fn stat(&self, path: &str) -> Result<FileInfo> {
        Ok(files::info(self.tb(), path).await?.info)
    }

    async fn mkdir(&self, path: &str) -> Result<()> {
        files::mkdir(self.tb(), path).await
    }

    async fn remove(&self, path: &str) -> Result<()> {
        files::remove(self.tb(), path).await
    }

    async fn rename(&self, from: &str, to: &str) -> Result<()> {
        files::rename(self.tb(), from, to).await
    }

    async fn stop(&self) -> Result<()> {
        self.stop_with(false).await
    }

    async fn pause(&self) -> Result<()> {
        calls::transition(
            &self.api,
            &self.id,
            "pause",
            "/pause",
            "paused",
            self.deadline(),
        )
        .await
    }

    /// Starts the sandbox again. Daytona keeps the time to live (`ttlMinutes`, wall-clock since
    /// creation) across stops, so nothing needs reapplying.
    async fn resume(&self) -> Result<()> {
        self.start().await
    }

    async fn destroy(&self) -> Result<()> {
        destroy(&self.api, &self.pool, &self.id, self.deadline()).await
    }

    /// Sets Daytona's TTL so the sandbox is destroyed `timeout` from now: `setTtl` re-anchors
    /// the TTL at the current time (api.json), so the minutes asked for are `timeout` rounded up.
    async fn set_timeout(&self, timeout: Duration) -> Result<()> {
        let minutes = timeout.as_secs().div_ceil(60).max(1);
        self.set("set_timeout", "ttl", minutes.to_string()).await
    }

    /// The preview URL for `port` and the token it needs (sent as `x-daytona-preview-token`;
    /// the warning page is skipped with `X-Daytona-Skip-Preview-Warning`). The token changes on
    /// every start.
    async fn preview_link(&self, port: u16) -> Result<PreviewLink> {
        preview::link(&self.api, &self.id, port).await
    }

    /// SSH access through Daytona's gateway: the token is the user name (auth method `none`).
    /// One token per sandbox is kept for the whole process and reused while it stays valid for
    /// `ttl`, because minting a new one revokes the old.
    async fn ssh_access(&self, ttl: Duration) -> Result<SshAccess> {
        exec::ssh::access(&self.api, &self.id, ttl).await
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
        calls::snapshot(&self.api, &self.id, name, self.deadline()).await
    }

    /// The daemon's latest CPU, memory and disk sample (`GET /system/metrics`, newer daemons;
    /// CPU percent is of the sandbox's CPU limit, 0 until the first sample completes).
    async fn metrics(&self) -> Result<Metrics> {
        let dto = self.tb().explained(self.tb().metrics().await).await?;
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

    async fn create_code_context(&self, spec: &ContextSpec) -> Result<CodeContext> {
        self.code.create(self.tb(), spec).await
    }

    async fn list_code_contexts(&self) -> Result<Vec<CodeContext>> {
        self.code.list(self.tb()).await
    }

    async fn restart_code_context(&self, id: &str) -> Result<()> {
        self.code.restart(self.tb(), id).await
    }

    async fn remove_code_context(&self, id: &str) -> Result<()> {
        self.code.remove(self.tb(), id).await
    }

    async fn run_code(&self, request: &RunCode) -> Result<CodeRun> {
        self.code
            .run(self, self.tb(), request)
            .await
            .map_err(|e| e.with_sandbox_id(&self.id))
    }
}
