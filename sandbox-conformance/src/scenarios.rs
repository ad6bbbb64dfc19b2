//! The scenarios, written once against the core traits. `SCENARIOS.md` at the crate root says
//! exactly what each one calls and expects; keep the two in step.

use crate::cassette::{MISSING_ID, TOKEN};
use futures::future::BoxFuture;
use futures::{StreamExt, TryStreamExt};
use sandbox_sdk_core::client::{Client, RetryPolicy};
use sandbox_sdk_core::fleet::{
    self, Owner, PrepareSpec, Prepared, ReapPolicy, ReapReason, Shape, SkipReason,
};
use sandbox_sdk_core::{
    Capabilities, Capability, Command, CreateSpec, Error, ErrorKind, FileEventKind, FileKind,
    Level, ListFilter, ListOptions, ProcessEvent, Provider, PtySize, Sandbox, SandboxExt,
    SandboxInfo, SandboxState,
};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// Builds the adapter under test against a base URL (the replay server or the recording proxy).
/// Point every endpoint the adapter uses — control plane, envd, toolbox, exec host — at it.
pub type Factory =
    Arc<dyn Fn(&str) -> sandbox_sdk_core::Result<Arc<dyn Provider>> + Send + Sync + 'static>;

/// What one scenario needs, proves, and where it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScenarioInfo {
    /// The scenario's name: its test name and its cassette's file stem.
    pub name: &'static str,
    /// The capability it needs; when the adapter declares it unsupported the scenario checks that
    /// the probe call fails fast with `NotSupported` and sends nothing.
    pub requires: Option<Capability>,
    /// The capabilities it proves when it passes.
    pub exercises: &'static [Capability],
    /// Whether it also runs against live services (the `local` provider, and the recorder
    /// unless `recordable` is false).
    pub live: bool,
    /// Whether `cargo xtask record` can record its cassette (a live run of it makes other
    /// requests than its replay, as the fleet scenarios do: their cassettes are written from
    /// `SCENARIOS.md`).
    pub recordable: bool,
    /// Whether a live run creates a sandbox for it to connect to.
    pub needs_sandbox: bool,
    /// When its capability is unsupported: `true` checks the probe fails fast, `false` skips.
    pub probe: bool,
    /// One line on what it checks.
    pub summary: &'static str,
}

macro_rules! scenario {
    ($name:literal, $req:expr, [$($ex:ident),*], live: $live:literal, sandbox: $sb:literal, probe: $probe:literal, $summary:literal) => {
        scenario!($name, $req, [$($ex),*], live: $live, record: $live, sandbox: $sb, probe: $probe, $summary)
    };
    ($name:literal, $req:expr, [$($ex:ident),*], live: $live:literal, record: $record:literal, sandbox: $sb:literal, probe: $probe:literal, $summary:literal) => {
        ScenarioInfo {
            name: $name,
            requires: $req,
            exercises: &[$(Capability::$ex),*],
            live: $live,
            recordable: $record,
            needs_sandbox: $sb,
            probe: $probe,
            summary: $summary,
        }
    };
}

use Capability as C;

/// Every scenario, in the order the suite runs them.
pub const SCENARIOS: &[ScenarioInfo] = &[
    scenario!("connect", None, [], live: true, sandbox: true, probe: false, "connect by id, info says running"),
    scenario!("lifecycle", None, [], live: true, sandbox: false, probe: false, "create, info, destroy, info after destroy"),
    scenario!("stop_resume", Some(C::Stop), [Stop], live: true, sandbox: true, probe: true, "stop, info stopped, resume, info running"),
    scenario!("pause_resume", Some(C::Pause), [Pause], live: true, sandbox: true, probe: true, "pause, info paused, resume, info running"),
    scenario!("set_timeout", Some(C::SetTimeout), [SetTimeout], live: true, sandbox: true, probe: true, "set the time to live"),
    scenario!("exec_exit_codes", None, [], live: true, sandbox: true, probe: false, "exit codes 0 and 3"),
    scenario!("exec_stdout_stderr", None, [], live: true, sandbox: true, probe: false, "stdout and stderr kept apart"),
    scenario!("exec_env_cwd", None, [], live: true, sandbox: true, probe: false, "per-command env and relative cwd"),
    scenario!("exec_timeout", None, [], live: true, sandbox: true, probe: false, "a process outliving its timeout is stopped"),
    scenario!("exec_stdin", Some(C::Stdin), [Stdin], live: true, sandbox: true, probe: true, "stdin reaches cat and closes"),
    scenario!("exec_kill", Some(C::KillProcess), [KillProcess], live: true, sandbox: true, probe: true, "kill a running process by pid"),
    scenario!("exec_background", Some(C::Background), [Background], live: true, sandbox: true, probe: true, "background process listed and reattached"),
    scenario!("exec_pty", Some(C::Pty), [Pty], live: true, sandbox: true, probe: true, "pty of the requested size"),
    scenario!("exec_streaming", Some(C::Streaming), [Streaming], live: true, sandbox: true, probe: false, "output arrives as several events"),
    scenario!("files_roundtrip", Some(C::FilesUpload), [FilesUpload], live: true, sandbox: true, probe: true, "256 binary bytes written, read back, stat"),
    scenario!("files_streaming", Some(C::FilesUpload), [FilesUpload], live: true, sandbox: true, probe: true, "streamed upload and download"),
    scenario!("files_missing", Some(C::FilesUpload), [FilesUpload], live: true, sandbox: true, probe: true, "missing file is NotFound"),
    scenario!("files_list", Some(C::FilesUpload), [FilesUpload], live: true, sandbox: true, probe: true, "list a directory"),
    scenario!("files_manage", Some(C::FilesUpload), [FilesUpload], live: true, sandbox: true, probe: true, "rename, remove, stat"),
    scenario!("files_watch", Some(C::FilesWatch), [FilesWatch], live: true, sandbox: true, probe: true, "watch sees a new file"),
    scenario!("list", Some(C::List), [List], live: true, sandbox: true, probe: true, "list sandboxes"),
    scenario!("list_filters", Some(C::List), [List], live: true, sandbox: true, probe: true, "list with metadata and state filters"),
    scenario!("fork", Some(C::Fork), [Fork], live: true, sandbox: true, probe: true, "fork, child running, destroy child"),
    scenario!("snapshot", Some(C::Snapshot), [Snapshot], live: true, sandbox: true, probe: true, "take a snapshot"),
    scenario!("preview_link", Some(C::ExposePort), [ExposePort, PrivatePreview], live: true, sandbox: true, probe: true, "preview link for port 8080"),
    scenario!("ssh_access", Some(C::Ssh), [Ssh], live: true, sandbox: true, probe: true, "ssh access"),
    scenario!("metrics", Some(C::Metrics), [Metrics], live: true, sandbox: true, probe: true, "resource metrics"),
    scenario!("usage", Some(C::Usage), [Usage], live: true, record: false, sandbox: true, probe: false, "usage metered or estimated, and said which"),
    scenario!("owner_scope", Some(C::List), [List], live: true, record: false, sandbox: false, probe: false, "an owned client labels its create and lists only its owner's sandboxes"),
    scenario!("reap_dry_run", Some(C::List), [List], live: true, record: false, sandbox: false, probe: false, "the reaper's dry run plans from the owner's listing and destroys nothing"),
    scenario!("reap", Some(C::List), [List], live: true, record: false, sandbox: false, probe: false, "the reaper destroys the owner's sandbox outside the keep-set, nothing else"),
    scenario!("prepare_reuse", Some(C::Prepare), [Prepare], live: true, record: false, sandbox: false, probe: true, "a ready template is reused, one whose build failed is built again"),
    scenario!("prepare_failure", Some(C::Prepare), [Prepare], live: true, record: false, sandbox: false, probe: true, "a failed build is an error with the provider's reason"),
    scenario!("code_state", Some(C::CodeInterpreter), [CodeInterpreter], live: true, record: false, sandbox: true, probe: true, "state across cells, an error with traceback, display and the last expression"),
    scenario!("code_timeout", Some(C::CodeInterpreter), [CodeInterpreter], live: true, record: false, sandbox: true, probe: true, "a timed-out or dropped cell is interrupted and the state kept"),
    scenario!("code_contexts", Some(C::StatefulKernel), [StatefulKernel], live: true, record: false, sandbox: true, probe: true, "two contexts apart, listed, restarted, removed"),
    scenario!("code_output_bounded", Some(C::CodeInterpreter), [CodeInterpreter], live: true, record: false, sandbox: true, probe: true, "a flood of output is cut and reported"),
    scenario!("code_lost", Some(C::StatefulKernel), [StatefulKernel], live: true, record: false, sandbox: true, probe: true, "a killed kernel is ContextLost until restarted"),
    scenario!("error_unauthorized", None, [], live: false, sandbox: false, probe: false, "401 is Unauthorized, token not shown"),
    scenario!("error_not_found", None, [], live: true, sandbox: false, probe: false, "404 is NotFound"),
    scenario!("error_conflict", None, [], live: false, sandbox: false, probe: false, "409 is Conflict, not retryable"),
    scenario!("error_rate_limited", None, [], live: false, sandbox: false, probe: false, "429 is QuotaExceeded with Retry-After"),
    scenario!("error_server", None, [], live: false, sandbox: false, probe: false, "503 is a retryable Provider error, sent once"),
    scenario!("error_connection_reset", None, [], live: false, sandbox: false, probe: false, "a reset connection is Transport"),
    scenario!("error_truncated_stream", Some(C::FilesUpload), [], live: false, sandbox: true, probe: true, "a truncated download is Transport"),
    scenario!("no_duplicate_create", None, [], live: false, sandbox: false, probe: false, "a failed create without idempotency key is sent once"),
    scenario!("create_slow_answer", None, [], live: false, sandbox: false, probe: false, "a create answered after the timeout is looked up, not sent again"),
    scenario!("create_reset", None, [], live: false, sandbox: false, probe: false, "a create whose connection is reset is looked up, not sent again"),
    scenario!("create_unavailable", None, [], live: false, sandbox: false, probe: false, "a create refused with 503 is sent again and makes one sandbox"),
];

/// Why a replay skips `info` for an adapter whose kernel is core's emulated one, if it does:
/// that kernel talks to its sandbox through exec with stdin, with a random session key per
/// kernel, so no cassette can answer it; what it sends over the provider's wire is exec and
/// stdin, which `exec_stdin` replays, and the kernel itself runs these scenarios live (against
/// `local` and every simulator).
pub(crate) fn emulated_elsewhere(info: &ScenarioInfo, caps: &Capabilities) -> Option<String> {
    let cap = info.requires?;
    (matches!(cap, C::CodeInterpreter | C::StatefulKernel) && caps.level(cap) == Level::Emulated)
        .then(|| {
            format!(
                "{cap} is emulated (core's kernel over exec with stdin, keyed per kernel, which no \
                 cassette can answer): replayed as exec_stdin, run live against local and the \
                 simulators"
            )
        })
}

/// Whether a scenario's probe is a provider call made without connecting to a sandbox (so an
/// unsupported one needs no cassette at all).
pub(crate) fn provider_level(name: &str) -> bool {
    name.starts_with("list") || name.starts_with("prepare")
}

/// Looks a scenario up by name.
pub fn scenario(name: &str) -> Option<&'static ScenarioInfo> {
    SCENARIOS.iter().find(|s| s.name == name)
}

/// What a scenario body gets: the provider under test (behind the client layer with retries off),
/// the raw adapter, a retrying client, the id to connect to, and a request counter in replay.
pub(crate) struct Ctx {
    /// The adapter behind `sandbox_sdk_core::client::Client` (emulation and gating on, retries off).
    pub client: Arc<dyn Provider>,
    /// The adapter itself.
    pub raw: Arc<dyn Provider>,
    /// The adapter behind a client that retries (no delay), for `no_duplicate_create`.
    pub retrying: Arc<dyn Provider>,
    /// The sandbox scenarios connect to.
    pub sandbox_id: String,
    /// Whether this is a live run (no cassette, no request counts).
    pub live: bool,
    /// Counts requests that reached the replay server (replay only).
    pub requests: Option<Arc<dyn Fn() -> usize + Send + Sync>>,
}

impl Ctx {
    fn caps(&self) -> Capabilities {
        self.client.capabilities()
    }

    async fn connect(&self) -> Check<Box<dyn Sandbox>> {
        let sb = self
            .client
            .connect(&self.sandbox_id)
            .await
            .at(&format!("connect({:?})", self.sandbox_id))?;
        Ok(sb)
    }

    fn count(&self) -> Option<usize> {
        self.requests.as_ref().map(|f| f())
    }
}

pub(crate) type Check<T = ()> = Result<T, String>;
pub(crate) type Body = for<'a> fn(&'a Ctx) -> BoxFuture<'a, Check>;

trait At<T> {
    fn at(self, step: &str) -> Check<T>;
}

impl<T> At<T> for sandbox_sdk_core::Result<T> {
    fn at(self, step: &str) -> Check<T> {
        self.map_err(|e| format!("{step} failed: {e}"))
    }
}

macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

// After `ensure!`, which its scenarios use.
mod code;

fn expect_kind<T>(
    result: sandbox_sdk_core::Result<T>,
    kind: ErrorKind,
    step: &str,
) -> Check<Error> {
    match result {
        Ok(_) => Err(format!(
            "{step}: expected an error of kind {kind:?}, got Ok"
        )),
        Err(e) if e.kind() == kind => Ok(e),
        Err(e) => Err(format!(
            "{step}: expected kind {kind:?}, got {:?}: {e}",
            e.kind()
        )),
    }
}

/// The spec every scenario creates with (and live runs create their sandbox with).
pub(crate) fn conformance_spec() -> CreateSpec {
    CreateSpec::new()
        .metadata("suite", "conformance")
        .timeout(Duration::from_secs(300))
}

const LIMIT: Duration = Duration::from_secs(20);

async fn within<T>(step: &str, fut: impl std::future::Future<Output = T>) -> Check<T> {
    tokio::time::timeout(LIMIT, fut)
        .await
        .map_err(|_| format!("{step} did not finish within {}s", LIMIT.as_secs()))
}

/// The body of a scenario.
pub(crate) fn body(name: &str) -> Option<Body> {
    Some(match name {
        "connect" => |c| Box::pin(connect(c)),
        "lifecycle" => |c| Box::pin(lifecycle(c)),
        "stop_resume" => |c| Box::pin(stop_resume(c)),
        "pause_resume" => |c| Box::pin(pause_resume(c)),
        "set_timeout" => |c| Box::pin(set_timeout(c)),
        "exec_exit_codes" => |c| Box::pin(exec_exit_codes(c)),
        "exec_stdout_stderr" => |c| Box::pin(exec_stdout_stderr(c)),
        "exec_env_cwd" => |c| Box::pin(exec_env_cwd(c)),
        "exec_timeout" => |c| Box::pin(exec_timeout(c)),
        "exec_stdin" => |c| Box::pin(exec_stdin(c)),
        "exec_kill" => |c| Box::pin(exec_kill(c)),
        "exec_background" => |c| Box::pin(exec_background(c)),
        "exec_pty" => |c| Box::pin(exec_pty(c)),
        "exec_streaming" => |c| Box::pin(exec_streaming(c)),
        "files_roundtrip" => |c| Box::pin(files_roundtrip(c)),
        "files_streaming" => |c| Box::pin(files_streaming(c)),
        "files_missing" => |c| Box::pin(files_missing(c)),
        "files_list" => |c| Box::pin(files_list(c)),
        "files_manage" => |c| Box::pin(files_manage(c)),
        "files_watch" => |c| Box::pin(files_watch(c)),
        "list" => |c| Box::pin(list(c)),
        "list_filters" => |c| Box::pin(list_filters(c)),
        "fork" => |c| Box::pin(fork(c)),
        "snapshot" => |c| Box::pin(snapshot(c)),
        "preview_link" => |c| Box::pin(preview_link(c)),
        "ssh_access" => |c| Box::pin(ssh_access(c)),
        "metrics" => |c| Box::pin(metrics(c)),
        "usage" => |c| Box::pin(usage(c)),
        "owner_scope" => |c| Box::pin(owner_scope(c)),
        "reap_dry_run" => |c| Box::pin(reap_fleet(c, true)),
        "reap" => |c| Box::pin(reap_fleet(c, false)),
        "prepare_reuse" => |c| Box::pin(prepare_reuse(c)),
        "prepare_failure" => |c| Box::pin(prepare_failure(c)),
        "code_state" => |c| Box::pin(code::code_state(c)),
        "code_timeout" => |c| Box::pin(code::code_timeout(c)),
        "code_contexts" => |c| Box::pin(code::code_contexts(c)),
        "code_output_bounded" => |c| Box::pin(code::code_output_bounded(c)),
        "code_lost" => |c| Box::pin(code::code_lost(c)),
        "error_unauthorized" => |c| Box::pin(error_unauthorized(c)),
        "error_not_found" => |c| Box::pin(error_not_found(c)),
        "error_conflict" => |c| Box::pin(error_conflict(c)),
        "error_rate_limited" => |c| Box::pin(error_rate_limited(c)),
        "error_server" => |c| Box::pin(error_server(c)),
        "error_connection_reset" => |c| Box::pin(error_connection_reset(c)),
        "error_truncated_stream" => |c| Box::pin(error_truncated_stream(c)),
        "no_duplicate_create" => |c| Box::pin(no_duplicate_create(c)),
        "create_slow_answer" | "create_reset" | "create_unavailable" => {
            |c| Box::pin(create_settles(c))
        }
        _ => return None,
    })
}

async fn connect(ctx: &Ctx) -> Check {
    let sb = ctx.connect().await?;
    ensure!(
        sb.id() == ctx.sandbox_id,
        "sandbox.id() is {:?}, expected {:?}",
        sb.id(),
        ctx.sandbox_id
    );
    ensure!(
        sb.provider() == ctx.raw.name(),
        "sandbox.provider() is {:?}, the provider is {:?}",
        sb.provider(),
        ctx.raw.name()
    );
    let info = sb.info().await.at("info()")?;
    ensure!(
        info.id == ctx.sandbox_id,
        "info().id is {:?}, expected {:?}",
        info.id,
        ctx.sandbox_id
    );
    ensure!(
        info.state == SandboxState::Running,
        "info().state is {}, expected running",
        info.state
    );
    Ok(())
}

async fn lifecycle(ctx: &Ctx) -> Check {
    let sb = ctx
        .client
        .create(&conformance_spec())
        .await
        .at("create(suite=conformance, timeout 300s)")?;
    ensure!(!sb.id().is_empty(), "created sandbox has an empty id");
    let info = sb.info().await.at("info()")?;
    ensure!(
        info.state == SandboxState::Running,
        "info().state after create is {}, expected running",
        info.state
    );
    ensure!(
        info.id == sb.id(),
        "info().id {:?} differs from sandbox.id() {:?}",
        info.id,
        sb.id()
    );
    ensure!(
        info.metadata.get("suite").map(String::as_str) == Some("conformance"),
        "info().metadata is {:?}, expected suite=conformance",
        info.metadata
    );
    sb.destroy().await.at("destroy()")?;
    match sb.info().await {
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Ok(info) if info.state == SandboxState::Destroyed => Ok(()),
        Ok(info) => Err(format!(
            "info() after destroy says {}, expected NotFound or destroyed",
            info.state
        )),
        Err(e) => Err(format!(
            "info() after destroy: expected NotFound, got {:?}: {e}",
            e.kind()
        )),
    }
}

async fn state_cycle(ctx: &Ctx, pause: bool) -> Check {
    let sb = ctx.connect().await?;
    let (op, want) = if pause {
        (sb.pause().await.at("pause()"), SandboxState::Paused)
    } else {
        (sb.stop().await.at("stop()"), SandboxState::Stopped)
    };
    op?;
    let info = sb.info().await.at("info()")?;
    ensure!(
        info.state == want,
        "info().state is {}, expected {want}",
        info.state
    );
    sb.resume().await.at("resume()")?;
    let info = sb.info().await.at("info() after resume")?;
    ensure!(
        info.state == SandboxState::Running,
        "info().state after resume is {}, expected running",
        info.state
    );
    Ok(())
}

async fn stop_resume(ctx: &Ctx) -> Check {
    state_cycle(ctx, false).await
}

async fn pause_resume(ctx: &Ctx) -> Check {
    state_cycle(ctx, true).await
}

async fn set_timeout(ctx: &Ctx) -> Check {
    let sb = ctx.connect().await?;
    sb.set_timeout(Duration::from_secs(600))
        .await
        .at("set_timeout(600s)")
}

async fn run(sb: &dyn Sandbox, cmd: Command, step: &str) -> Check<sandbox_sdk_core::Output> {
    within(step, sb.run(&cmd)).await?.at(step)
}

async fn exec_exit_codes(ctx: &Ctx) -> Check {
    let sb = ctx.connect().await?;
    let out = run(sb.as_ref(), Command::shell("exit 0"), "run(sh -c 'exit 0')").await?;
    ensure!(out.status.code == Some(0), "exit 0 gave {}", out.status);
    ensure!(
        out.stdout.is_empty() && out.stderr.is_empty(),
        "exit 0 printed {:?} / {:?}",
        out.stdout_lossy(),
        out.stderr_lossy()
    );
    let out = run(sb.as_ref(), Command::shell("exit 3"), "run(sh -c 'exit 3')").await?;
    ensure!(out.status.code == Some(3), "exit 3 gave {}", out.status);
    Ok(())
}

async fn exec_stdout_stderr(ctx: &Ctx) -> Check {
    let sb = ctx.connect().await?;
    let out = run(
        sb.as_ref(),
        Command::shell("printf out; printf err >&2"),
        "run(printf out; printf err >&2)",
    )
    .await?;
    ensure!(
        &out.stdout[..] == b"out",
        "stdout is {:?}, expected \"out\"",
        out.stdout_lossy()
    );
    ensure!(
        &out.stderr[..] == b"err",
        "stderr is {:?}, expected \"err\"",
        out.stderr_lossy()
    );
    ensure!(out.status.code == Some(0), "exit status {}", out.status);
    Ok(())
}

/// The env value of `exec_env_cwd`: quotes, a dollar sign and spaces, to prove quoting.
pub const ENV_VALUE: &str = "it's a $HOME \"test\"";

async fn exec_env_cwd(ctx: &Ctx) -> Check {
    let sb = ctx.connect().await?;
    let out = run(
        sb.as_ref(),
        Command::new("mkdir").args(["-p", "conformance-cwd"]),
        "run(mkdir -p conformance-cwd)",
    )
    .await?;
    ensure!(
        out.status.code == Some(0),
        "mkdir gave {}: {}",
        out.status,
        out.stderr_lossy()
    );
    let cmd = Command::shell("printf '%s|%s' \"$CONFORMANCE_VAR\" \"${PWD##*/}\"")
        .cwd("conformance-cwd")
        .env("CONFORMANCE_VAR", ENV_VALUE);
    let out = run(sb.as_ref(), cmd, "run(printf env|cwd)").await?;
    let want = format!("{ENV_VALUE}|conformance-cwd");
    ensure!(
        out.stdout_lossy() == want,
        "stdout is {:?}, expected {want:?} (stderr {:?})",
        out.stdout_lossy(),
        out.stderr_lossy()
    );
    ensure!(out.status.code == Some(0), "exit status {}", out.status);
    Ok(())
}

async fn exec_timeout(ctx: &Ctx) -> Check {
    let sb = ctx.connect().await?;
    let cmd = Command::new("sleep")
        .arg("30")
        .timeout(Duration::from_secs(1));
    match within("run(sleep 30, timeout 1s)", sb.run(&cmd)).await? {
        Err(e) if e.kind() == ErrorKind::Timeout => Ok(()),
        Err(e) => Err(format!(
            "expected a Timeout error or a failed status, got {:?}: {e}",
            e.kind()
        )),
        Ok(out) if !out.status.success() => Ok(()),
        Ok(out) => Err(format!(
            "sleep 30 with a 1s timeout ended with {}",
            out.status
        )),
    }
}

async fn exec_stdin(ctx: &Ctx) -> Check {
    let sb = ctx.connect().await?;
    let mut process = sb
        .exec(&Command::new("cat").stdin())
        .await
        .at("exec(cat, stdin)")?;
    let mut stdin = process
        .take_stdin()
        .ok_or("take_stdin() is None for a command started with stdin")?;
    stdin
        .write_all(b"line one\nline two\n")
        .await
        .map_err(|e| format!("writing stdin: {e}"))?;
    stdin
        .shutdown()
        .await
        .map_err(|e| format!("closing stdin: {e}"))?;
    drop(stdin);
    let out = within("output() of cat", process.output())
        .await?
        .at("output() of cat")?;
    ensure!(
        &out.stdout[..] == b"line one\nline two\n",
        "cat printed {:?}",
        out.stdout_lossy()
    );
    ensure!(out.status.code == Some(0), "cat ended with {}", out.status);
    Ok(())
}

async fn exec_kill(ctx: &Ctx) -> Check {
    let sb = ctx.connect().await?;
    let process = sb
        .exec(&Command::new("sleep").arg("30"))
        .await
        .at("exec(sleep 30)")?;
    let pid = process.pid().to_owned();
    sb.kill_process(&pid)
        .await
        .at(&format!("kill_process({pid:?})"))?;
    let status = within("wait() after kill", process.wait())
        .await?
        .at("wait() after kill")?;
    ensure!(!status.success(), "killed process ended with {status}");
    Ok(())
}

async fn exec_background(ctx: &Ctx) -> Check {
    let sb = ctx.connect().await?;
    let cmd = Command::shell("sleep 2; printf done")
        .background()
        .tag("conformance-bg");
    let process = sb.exec(&cmd).await.at("exec(background)")?;
    let pid = process.pid().to_owned();
    drop(process);
    let list = sb.processes().await.at("processes()")?;
    ensure!(
        list.iter().any(|p| p.pid == pid && p.running),
        "processes() does not list pid {pid:?} as running: {list:?}"
    );
    let attached = sb.attach(&pid).await.at(&format!("attach({pid:?})"))?;
    let out = within("output() of attached process", attached.output())
        .await?
        .at("output() of attached process")?;
    ensure!(
        out.stdout.ends_with(b"done"),
        "attached output is {:?}, expected it to end with \"done\"",
        out.stdout_lossy()
    );
    ensure!(
        out.status.code == Some(0),
        "background process ended with {}",
        out.status
    );
    Ok(())
}

fn pty_command() -> Command {
    Command::shell("stty size").pty(PtySize {
        cols: 100,
        rows: 30,
    })
}

async fn exec_pty(ctx: &Ctx) -> Check {
    let sb = ctx.connect().await?;
    let out = run(sb.as_ref(), pty_command(), "run(stty size, pty 100x30)").await?;
    ensure!(
        out.stdout_lossy().contains("30 100"),
        "stty size printed {:?}, expected \"30 100\"",
        out.stdout_lossy()
    );
    ensure!(out.status.code == Some(0), "stty ended with {}", out.status);
    Ok(())
}

async fn exec_streaming(ctx: &Ctx) -> Check {
    let sb = ctx.connect().await?;
    let mut process = sb
        .exec(&Command::shell("printf one; sleep 1; printf two"))
        .await
        .at("exec(printf one; sleep 1; printf two)")?;
    let mut chunks = Vec::new();
    let mut exit = None;
    while let Some(event) = within("next_event()", process.next_event()).await? {
        match event.at("next_event()")? {
            ProcessEvent::Stdout(b) => chunks.push(b),
            ProcessEvent::Stderr(_) => {}
            ProcessEvent::Exit(status) => exit = Some(status),
        }
    }
    let stdout: Vec<u8> = chunks.concat();
    ensure!(
        stdout == b"onetwo",
        "stdout is {:?}, expected \"onetwo\"",
        String::from_utf8_lossy(&stdout)
    );
    ensure!(
        chunks.len() >= 2,
        "stdout came as {} event(s), expected at least 2 (output was buffered)",
        chunks.len()
    );
    ensure!(exit.and_then(|s| s.code) == Some(0), "exit status {exit:?}");
    if ctx.caps().streaming == Level::Native {
        ensure!(
            !process.is_streaming_emulated(),
            "streaming is declared native but the process says it is emulated"
        );
    }
    Ok(())
}

/// The 256 bytes of `files_roundtrip`.
pub fn binary_data() -> Vec<u8> {
    (0..=255u8).collect()
}

/// The 790 bytes of `files_streaming`.
pub fn stream_data() -> Vec<u8> {
    (0..100)
        .map(|i| format!("line {i}\n"))
        .collect::<String>()
        .into_bytes()
}

async fn files_roundtrip(ctx: &Ctx) -> Check {
    let sb = ctx.connect().await?;
    let path = "conformance/bin/data.bin";
    let t = sb
        .write_file(path, binary_data().into())
        .await
        .at("write_file(data.bin)")?;
    ensure!(
        t.bytes == 256,
        "write_file reported {} bytes, expected 256",
        t.bytes
    );
    let back = sb.read_file(path).await.at("read_file(data.bin)")?;
    ensure!(
        back[..] == binary_data()[..],
        "read back {} bytes that differ from the 256 written",
        back.len()
    );
    let info = sb.stat(path).await.at("stat(data.bin)")?;
    ensure!(
        info.kind == FileKind::File && info.size == 256 && info.name == "data.bin",
        "stat gave {info:?}"
    );
    Ok(())
}

async fn files_streaming(ctx: &Ctx) -> Check {
    let sb = ctx.connect().await?;
    let data = stream_data();
    let chunks: Vec<std::io::Result<bytes::Bytes>> = data
        .chunks(64)
        .map(|c| Ok(bytes::Bytes::copy_from_slice(c)))
        .collect();
    let reader = tokio_util::io::StreamReader::new(futures::stream::iter(chunks));
    let t = sb
        .upload("conformance/stream.txt", Box::pin(reader))
        .await
        .at("upload(stream.txt)")?;
    ensure!(
        t.bytes == data.len() as u64,
        "upload reported {} bytes, expected {}",
        t.bytes,
        data.len()
    );
    let download = sb
        .download("conformance/stream.txt")
        .await
        .at("download(stream.txt)")?;
    let got: Vec<bytes::Bytes> = within("reading the download", download.try_collect::<Vec<_>>())
        .await?
        .at("reading the download")?;
    let got = got.concat();
    ensure!(
        got == data,
        "downloaded {} bytes that differ from the {} uploaded",
        got.len(),
        data.len()
    );
    Ok(())
}

async fn files_missing(ctx: &Ctx) -> Check {
    let sb = ctx.connect().await?;
    expect_kind(
        sb.read_file("conformance/missing.txt").await,
        ErrorKind::NotFound,
        "read_file(missing.txt)",
    )?;
    expect_kind(
        sb.stat("conformance/missing.txt").await,
        ErrorKind::NotFound,
        "stat(missing.txt)",
    )?;
    Ok(())
}

async fn files_list(ctx: &Ctx) -> Check {
    let sb = ctx.connect().await?;
    sb.write_file("conformance/list/a.txt", "a".into())
        .await
        .at("write_file(list/a.txt)")?;
    sb.mkdir("conformance/list/sub")
        .await
        .at("mkdir(list/sub)")?;
    let mut entries = sb
        .list_files("conformance/list", ListOptions { depth: 1 })
        .await
        .at("list_files(conformance/list)")?;
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    let shape: Vec<(String, FileKind)> = entries.iter().map(|e| (e.name.clone(), e.kind)).collect();
    ensure!(
        shape
            == [
                ("a.txt".to_owned(), FileKind::File),
                ("sub".to_owned(), FileKind::Dir)
            ],
        "list_files gave {shape:?}, expected a.txt (file) and sub (dir)"
    );
    ensure!(
        entries[0].size == 1,
        "a.txt has size {}, expected 1",
        entries[0].size
    );
    Ok(())
}

async fn files_manage(ctx: &Ctx) -> Check {
    let sb = ctx.connect().await?;
    let (old, new) = ("conformance/manage/old.txt", "conformance/manage/new.txt");
    sb.write_file(old, "x".into())
        .await
        .at("write_file(old.txt)")?;
    sb.rename(old, new).await.at("rename(old.txt, new.txt)")?;
    expect_kind(
        sb.stat(old).await,
        ErrorKind::NotFound,
        "stat(old.txt) after rename",
    )?;
    let back = sb.read_file(new).await.at("read_file(new.txt)")?;
    ensure!(
        &back[..] == b"x",
        "new.txt holds {:?}",
        String::from_utf8_lossy(&back)
    );
    sb.remove(new).await.at("remove(new.txt)")?;
    expect_kind(
        sb.stat(new).await,
        ErrorKind::NotFound,
        "stat(new.txt) after remove",
    )?;
    Ok(())
}

async fn files_watch(ctx: &Ctx) -> Check {
    let sb = ctx.connect().await?;
    sb.mkdir("conformance/watch").await.at("mkdir(watch)")?;
    let mut events = sb
        .watch("conformance/watch", false)
        .await
        .at("watch(conformance/watch)")?;
    sb.write_file("conformance/watch/w.txt", "w".into())
        .await
        .at("write_file(watch/w.txt)")?;
    let event = tokio::time::timeout(Duration::from_secs(10), events.next())
        .await
        .map_err(|_| "no watch event within 10s".to_owned())?
        .ok_or("the watch stream ended without an event")?
        .at("watch event")?;
    ensure!(
        event.path.ends_with("w.txt")
            && matches!(event.kind, FileEventKind::Create | FileEventKind::Write),
        "first watch event is {event:?}, expected create or write of w.txt"
    );
    Ok(())
}

async fn list(ctx: &Ctx) -> Check {
    let all = ctx
        .client
        .list(&ListFilter::new())
        .try_collect::<Vec<_>>()
        .await
        .at("list(all)")?;
    ensure!(
        all.iter().any(|i| i.id == ctx.sandbox_id),
        "list() does not include {:?}: {:?}",
        ctx.sandbox_id,
        all.iter().map(|i| &i.id).collect::<Vec<_>>()
    );
    Ok(())
}

async fn list_filters(ctx: &Ctx) -> Check {
    let filter = ListFilter::new()
        .metadata("suite", "conformance")
        .state(SandboxState::Running);
    let found = ctx
        .client
        .list(&filter)
        .try_collect::<Vec<_>>()
        .await
        .at("list(suite=conformance, running)")?;
    ensure!(
        found.iter().any(|i| i.id == ctx.sandbox_id),
        "filtered list does not include {:?}",
        ctx.sandbox_id
    );
    if let Some(bad) = found.iter().find(|i| !filter.matches(i)) {
        return Err(format!(
            "filtered list includes {:?} ({}, {:?}), which fails the filter",
            bad.id, bad.state, bad.metadata
        ));
    }
    let none = ctx
        .client
        .list(&ListFilter::new().metadata("suite", "no-such-suite"))
        .try_collect::<Vec<_>>()
        .await
        .at("list(suite=no-such-suite)")?;
    ensure!(
        none.is_empty(),
        "list(suite=no-such-suite) returned {:?}",
        none.iter().map(|i| &i.id).collect::<Vec<_>>()
    );
    Ok(())
}

async fn fork(ctx: &Ctx) -> Check {
    let sb = ctx.connect().await?;
    let child = sb.fork().await.at("fork()")?;
    ensure!(
        child.id() != sb.id() && !child.id().is_empty(),
        "fork returned id {:?}",
        child.id()
    );
    let info = child.info().await.at("child.info()")?;
    ensure!(
        info.state == SandboxState::Running,
        "forked sandbox is {}, expected running",
        info.state
    );
    child.destroy().await.at("child.destroy()")
}

async fn snapshot(ctx: &Ctx) -> Check {
    let sb = ctx.connect().await?;
    let snap = sb
        .snapshot(Some("conformance-snap"))
        .await
        .at("snapshot(conformance-snap)")?;
    ensure!(!snap.id.is_empty(), "snapshot has an empty id");
    Ok(())
}

async fn preview_link(ctx: &Ctx) -> Check {
    let sb = ctx.connect().await?;
    let link = sb.preview_link(8080).await.at("preview_link(8080)")?;
    ensure!(link.port == 8080, "link.port is {}", link.port);
    ensure!(
        link.url.starts_with("http://") || link.url.starts_with("https://"),
        "link.url {:?} is not http(s)",
        link.url
    );
    if ctx.caps().private_preview.is_available() {
        ensure!(
            link.token.is_some() || !link.headers.is_empty(),
            "private_preview is declared but the link carries no token or headers"
        );
    }
    Ok(())
}

async fn ssh_access(ctx: &Ctx) -> Check {
    let sb = ctx.connect().await?;
    let ssh = sb
        .ssh_access(Duration::from_secs(600))
        .await
        .at("ssh_access(600s)")?;
    ensure!(
        !ssh.host.is_empty() && ssh.port != 0 && !ssh.user.is_empty(),
        "ssh access is incomplete: {ssh:?}"
    );
    Ok(())
}

async fn metrics(ctx: &Ctx) -> Check {
    let sb = ctx.connect().await?;
    let m = sb.metrics().await.at("metrics()")?;
    ensure!(
        m != sandbox_sdk_core::Metrics::default(),
        "metrics() has no field set"
    );
    Ok(())
}

async fn usage(ctx: &Ctx) -> Check {
    let sb = ctx.connect().await?;
    let info = sb.info().await.at("info()")?;
    // Replay measures up to a fixed time an hour after the cassettes' sandboxes were made, so
    // the request (Daytona sends the window) is the same on every run.
    let to = if ctx.live {
        std::time::SystemTime::now()
    } else {
        sandbox_sdk_core::time::parse_rfc3339(USAGE_UNTIL)
            .ok_or("USAGE_UNTIL is not an RFC 3339 time")?
    };
    let usage = ctx
        .client
        .usage(&info, to)
        .await
        .at(&format!("provider.usage(info, {USAGE_UNTIL})"))?;
    ensure!(
        usage.to == to,
        "usage runs until {:?}, asked until {to:?}",
        usage.to
    );
    ensure!(
        usage.sandbox_id == ctx.sandbox_id,
        "usage is for {:?}, expected {:?}",
        usage.sandbox_id,
        ctx.sandbox_id
    );
    ensure!(
        usage.provider == ctx.raw.name(),
        "usage names provider {:?}, the provider is {:?}",
        usage.provider,
        ctx.raw.name()
    );
    let native = ctx.raw.capabilities().usage == Level::Native;
    ensure!(
        usage.estimated != native,
        "usage is declared {} but the result says estimated = {} ({})",
        ctx.raw.capabilities().usage.as_str(),
        usage.estimated,
        usage.basis
    );
    ensure!(!usage.basis.is_empty(), "usage says nothing of its basis");
    if let Some(from) = usage.from {
        let window = usage.to.duration_since(from).unwrap_or_default();
        ensure!(
            usage.running + usage.held <= window + Duration::from_secs(1),
            "usage counts {:?} running and {:?} held in a window of {window:?}",
            usage.running,
            usage.held
        );
    }
    if let Some(cost) = usage.cost_usd {
        ensure!(cost.is_finite() && cost >= 0.0, "usage costs {cost}");
    }
    Ok(())
}

/// The end of the window the `usage` scenario asks for in replay.
pub const USAGE_UNTIL: &str = "2026-12-01T05:00:00Z";

/// The owner of the fleet scenarios in replay (in live runs each scenario gets its own, so
/// scenarios running at once in one process leave each other's sandboxes alone).
pub const OWNER_ID: &str = "conformance-owner";
/// Another owner, whose listing must not show the first one's sandboxes.
pub const OTHER_OWNER_ID: &str = "conformance-other";

/// The owners of one run of a fleet scenario: fixed in replay, unique per run live.
fn owners(ctx: &Ctx) -> Check<(Owner, Owner)> {
    let (ours, theirs) = if ctx.live {
        let n: u64 = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or_default()
            ^ u64::from(std::process::id());
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = n.wrapping_add(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        (
            format!("{OWNER_ID}-{n:x}"),
            format!("{OTHER_OWNER_ID}-{n:x}"),
        )
    } else {
        (OWNER_ID.to_owned(), OTHER_OWNER_ID.to_owned())
    };
    let owner = |id: &str| Owner::new(id).map_err(|e| format!("Owner::new({id:?}): {e}"));
    Ok((owner(&ours)?, owner(&theirs)?))
}

fn owned(ctx: &Ctx, owner: &Owner) -> Arc<dyn Provider> {
    // Live, the fleet calls meet the provider's rate limits (Fly lists: 1/s, bursts of 3) and
    // retry as a careful caller would; replayed, nothing is retried, so counts stay exact.
    let retry = if ctx.live {
        RetryPolicy::default()
    } else {
        RetryPolicy::never()
    };
    Arc::new(
        Client::builder(ctx.raw.clone())
            .retry(retry)
            .owner(owner.clone())
            .build(),
    )
}

async fn list_ids(provider: &dyn Provider, step: &str) -> Check<Vec<String>> {
    let infos: Vec<SandboxInfo> = provider
        .list(&ListFilter::new())
        .try_collect()
        .await
        .at(step)?;
    Ok(infos.into_iter().map(|i| i.id).collect())
}

async fn owner_scope(ctx: &Ctx) -> Check {
    let (ours, theirs) = owners(ctx)?;
    let client = owned(ctx, &ours);
    let sb = client
        .create(&conformance_spec())
        .await
        .at(&format!("create through a client owned by {ours}"))?;
    let id = sb.id().to_owned();
    let result = async {
        let info = sb.info().await.at("info()")?;
        ensure!(
            ours.owns(&info),
            "the created sandbox's metadata is {:?}, expected {ours}",
            info.metadata
        );
        let listed = list_ids(client.as_ref(), &format!("list() owned by {ours}")).await?;
        ensure!(
            listed.contains(&id),
            "the owner's listing {listed:?} does not include its sandbox {id:?}"
        );
        let others = list_ids(
            owned(ctx, &theirs).as_ref(),
            &format!("list() owned by {theirs}"),
        )
        .await?;
        ensure!(
            !others.contains(&id),
            "another owner's listing {others:?} includes {id:?}"
        );
        Ok(())
    }
    .await;
    let destroyed = ctx
        .client
        .destroy(&id)
        .await
        .at(&format!("provider.destroy({id:?})"));
    result.and(destroyed)
}

/// `reap_dry_run` and `reap`: in replay the owner's listing (the cassette) holds
/// `{{sandbox_id}}` and `{{sandbox_id_2}}`; live, the scenario makes that fleet first, plus a
/// sandbox without a label and one of another owner, which must survive. The policy keeps
/// `{{sandbox_id_2}}` and so picks the other one.
async fn reap_fleet(ctx: &Ctx, dry_run: bool) -> Check {
    let (ours, theirs) = owners(ctx)?;
    let mut made: Vec<String> = Vec::new();
    let (doomed, kept, bystanders) = if ctx.live {
        // Four creates in a row meet live providers' create rate limits (Fly: 1/s, bursts of
        // 3): the setup retries them, each under a key of its own, as a careful caller would.
        let setup = |owner: Option<&Owner>| {
            let mut builder = Client::builder(ctx.raw.clone()).retry(RetryPolicy::default());
            if let Some(owner) = owner {
                builder = builder.owner(owner.clone());
            }
            Arc::new(builder.build()) as Arc<dyn Provider>
        };
        let run = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let mut ids = Vec::new();
        for (n, (who, provider)) in [
            ("ours", setup(Some(&ours))),
            ("ours", setup(Some(&ours))),
            ("no owner", setup(None)),
            ("another owner", setup(Some(&theirs))),
        ]
        .into_iter()
        .enumerate()
        {
            let key = format!("{}-setup-{run}-{n}", ours.id());
            let sb = provider
                .create(&conformance_spec().idempotency_key(key))
                .await
                .at(&format!("setup: create ({who})"))?;
            made.push(sb.id().to_owned());
            ids.push(sb.id().to_owned());
        }
        (ids[0].clone(), ids[1].clone(), ids[2..].to_vec())
    } else {
        (
            crate::cassette::SANDBOX_ID.to_owned(),
            crate::cassette::SANDBOX_ID_2.to_owned(),
            Vec::new(),
        )
    };
    let result = reap_and_check(ctx, &ours, dry_run, &doomed, &kept, &bystanders).await;
    for id in made {
        let _ = ctx.raw.destroy(&id).await;
    }
    result
}

async fn reap_and_check(
    ctx: &Ctx,
    owner: &Owner,
    dry_run: bool,
    doomed: &str,
    kept: &str,
    bystanders: &[String],
) -> Check {
    let policy = ReapPolicy::new().keep_only([kept]).dry_run(dry_run);
    // The retrying client live (the reaper lists right after the setup's creates, within
    // the provider's rate limits); retries off in replay, so counts stay exact.
    let reaper = if ctx.live { &ctx.retrying } else { &ctx.client };
    let report = fleet::reap(reaper.as_ref(), owner, &policy)
        .await
        .at(&format!("reap(keep only {kept:?}, dry run {dry_run})"))?;
    let planned: Vec<&str> = report.planned.iter().map(|d| d.info.id.as_str()).collect();
    ensure!(
        planned == [doomed],
        "the reaper planned {planned:?}, expected [{doomed:?}] ({})",
        report.summary_line()
    );
    ensure!(
        report.planned[0].reasons == [ReapReason::NotKept],
        "the reasons are {:?}, expected [NotKept]",
        report.planned[0].reasons
    );
    ensure!(
        report
            .skipped
            .iter()
            .any(|s| s.id == kept && s.reason == SkipReason::Kept),
        "{kept:?} is not reported kept: {:?}",
        report.skipped
    );
    ensure!(
        report.failed.is_empty(),
        "destroys failed: {:?}",
        report.failed
    );
    if dry_run {
        ensure!(
            report.destroyed.is_empty(),
            "a dry run destroyed {:?}",
            report.destroyed
        );
    } else {
        ensure!(
            report.destroyed == [doomed],
            "the reaper destroyed {:?}, expected [{doomed:?}]",
            report.destroyed
        );
    }
    if ctx.live {
        // What must still be there is still there (and, after a real run, the doomed one not).
        let mut alive = vec![kept.to_owned()];
        alive.extend(bystanders.iter().cloned());
        if dry_run {
            alive.push(doomed.to_owned());
        }
        for id in &alive {
            ctx.raw
                .connect(id)
                .await
                .at(&format!("connect({id:?}) after the reap"))?;
        }
        if !dry_run {
            expect_kind(
                ctx.raw.connect(doomed).await,
                ErrorKind::NotFound,
                "connect to the reaped sandbox",
            )?;
        }
    }
    Ok(())
}

/// The shape of the prepare scenarios' templates.
pub const PREPARE_SHAPE: Shape = Shape::new(2, 4, 10);

/// `prepare_reuse`'s first spec: a template that exists and is ready.
pub fn prepare_ready_spec() -> PrepareSpec {
    PrepareSpec::new("ubuntu:24.04")
        .step("echo conformance")
        .shape(PREPARE_SHAPE)
}

/// `prepare_reuse`'s second spec: a template whose latest build failed.
pub fn prepare_rebuilt_spec() -> PrepareSpec {
    PrepareSpec::new("ubuntu:24.04")
        .step("echo conformance-rebuilt")
        .shape(PREPARE_SHAPE)
}

/// `prepare_failure`'s spec: its build fails.
pub fn prepare_failing_spec() -> PrepareSpec {
    PrepareSpec::new("ubuntu:24.04").step("exit 3")
}

/// The reason the `prepare_failure` cassettes give for the failed build.
pub const PREPARE_FAILURE_REASON: &str =
    "conformance: the command 'exit 3' returned a non-zero code: 3";

fn check_prepared(ctx: &Ctx, spec: &PrepareSpec, got: &Prepared, reused: bool) -> Check {
    ensure!(
        got.name == spec.name(),
        "prepared under {:?}, expected the content-hash name {:?}",
        got.name,
        spec.name()
    );
    ensure!(
        got.provider == ctx.raw.name(),
        "prepared by {:?}, the provider is {:?}",
        got.provider,
        ctx.raw.name()
    );
    ensure!(!got.template.is_empty(), "the prepared template is empty");
    ensure!(
        got.reused == reused,
        "prepare says reused = {}, expected {reused}",
        got.reused
    );
    Ok(())
}

async fn prepare_reuse(ctx: &Ctx) -> Check {
    let ready = prepare_ready_spec();
    let got = ctx
        .client
        .prepare(&ready)
        .await
        .at(&format!("prepare({})", ready.name()))?;
    check_prepared(ctx, &ready, &got, true)?;
    let failed_before = prepare_rebuilt_spec();
    let got = ctx
        .client
        .prepare(&failed_before)
        .await
        .at(&format!("prepare({})", failed_before.name()))?;
    check_prepared(ctx, &failed_before, &got, false)
}

async fn prepare_failure(ctx: &Ctx) -> Check {
    let spec = prepare_failing_spec();
    let e = expect_kind(
        ctx.client.prepare(&spec).await,
        ErrorKind::Provider,
        &format!("prepare({}) whose build fails", spec.name()),
    )?;
    if !ctx.live {
        ensure!(
            e.to_string().contains(PREPARE_FAILURE_REASON),
            "the error does not carry the provider's reason {PREPARE_FAILURE_REASON:?}: {e}"
        );
    }
    Ok(())
}

fn check_status(e: &Error, status: u16) -> Check {
    ensure!(
        e.status() == Some(status),
        "error status is {:?}, expected {status}: {e}",
        e.status()
    );
    Ok(())
}

async fn error_unauthorized(ctx: &Ctx) -> Check {
    let e = expect_kind(
        ctx.raw.connect(&ctx.sandbox_id).await,
        ErrorKind::Unauthorized,
        "connect answered 401",
    )?;
    check_status(&e, 401)?;
    let shown = format!("{e} {e:?}");
    ensure!(!shown.contains(TOKEN), "the error shows the token: {shown}");
    Ok(())
}

async fn error_not_found(ctx: &Ctx) -> Check {
    let e = expect_kind(
        ctx.raw.connect(MISSING_ID).await,
        ErrorKind::NotFound,
        "connect(missing id)",
    )?;
    if !ctx.live {
        check_status(&e, 404)?;
    }
    Ok(())
}

async fn error_conflict(ctx: &Ctx) -> Check {
    let e = expect_kind(
        ctx.raw.create(&conformance_spec()).await,
        ErrorKind::Conflict,
        "create answered 409",
    )?;
    check_status(&e, 409)?;
    ensure!(!e.is_retryable(), "a 409 conflict is marked retryable");
    Ok(())
}

async fn error_rate_limited(ctx: &Ctx) -> Check {
    let e = expect_kind(
        ctx.raw.connect(&ctx.sandbox_id).await,
        ErrorKind::QuotaExceeded,
        "connect answered 429",
    )?;
    check_status(&e, 429)?;
    ensure!(
        e.retry_after() == Some(Duration::from_secs(7)),
        "retry_after() is {:?}, expected 7s from Retry-After",
        e.retry_after()
    );
    ensure!(e.is_retryable(), "a 429 is marked not retryable");
    Ok(())
}

async fn error_server(ctx: &Ctx) -> Check {
    let e = match ctx.raw.connect(&ctx.sandbox_id).await {
        Ok(_) => return Err("connect answered 503 succeeded".into()),
        Err(e) => e,
    };
    ensure!(
        e.kind() == ErrorKind::Provider,
        "a 503 gave kind {:?}, expected Provider: {e}",
        e.kind()
    );
    check_status(&e, 503)?;
    ensure!(e.is_retryable(), "a 503 is marked not retryable: {e}");
    Ok(())
}

async fn error_connection_reset(ctx: &Ctx) -> Check {
    let e = expect_kind(
        ctx.raw.connect(&ctx.sandbox_id).await,
        ErrorKind::Transport,
        "connect on a reset connection",
    )?;
    ensure!(
        e.is_retryable(),
        "a reset connection is marked not retryable: {e}"
    );
    Ok(())
}

async fn error_truncated_stream(ctx: &Ctx) -> Check {
    let sb = ctx.connect().await?;
    let result = within("read_file(big.bin)", sb.read_file("conformance/big.bin")).await?;
    expect_kind(
        result,
        ErrorKind::Transport,
        "read_file of a truncated download",
    )?;
    Ok(())
}

async fn no_duplicate_create(ctx: &Ctx) -> Check {
    let before = ctx.count();
    let result = ctx.retrying.create(&conformance_spec()).await;
    ensure!(result.is_err(), "create answered 503 succeeded");
    if let (Some(before), Some(after)) = (before, ctx.count()) {
        ensure!(
            after - before == 1,
            "a failed create without idempotency key was sent {} times, expected exactly once",
            after - before
        );
    }
    Ok(())
}

/// The idempotency key of the `create_*` scenarios.
pub const CREATE_KEY: &str = "conformance-key-1";

/// `create_slow_answer`, `create_reset`, `create_unavailable`: a create with an idempotency key
/// through the retrying client, whose first attempt fails (late, reset, 503). The caller must end
/// up holding the one sandbox the cassette's look-ups find (`{{sandbox_id}}`); the cassette's
/// exact counts prove the create was not sent again after an ambiguous failure.
async fn create_settles(ctx: &Ctx) -> Check {
    let spec = conformance_spec().idempotency_key(CREATE_KEY);
    let sb = within("create", ctx.retrying.create(&spec))
        .await?
        .at(&format!("create(idempotency key {CREATE_KEY:?})"))?;
    ensure!(
        sb.id() == crate::cassette::SANDBOX_ID,
        "create returned sandbox {:?}, expected the one made under the key ({:?})",
        sb.id(),
        crate::cassette::SANDBOX_ID
    );
    Ok(())
}

/// The probe for a scenario whose capability is unsupported: the call must fail with
/// `NotSupported`, through the client (its gate) and on the adapter itself, sending nothing.
pub(crate) async fn probe(ctx: &Ctx, name: &str) -> Check {
    for (which, provider) in [("client", &ctx.client), ("adapter", &ctx.raw)] {
        let result = if name.starts_with("prepare") {
            let before = ctx.count();
            let r = match provider.prepare(&prepare_ready_spec()).await {
                Ok(_) => Err("prepare() succeeded".to_owned()),
                Err(e) => Ok(e),
            };
            (before, r)
        } else if name.starts_with("list") {
            let before = ctx.count();
            let r = provider.list(&ListFilter::new()).next().await;
            let r = match r {
                Some(Ok(_)) => Err("list() yielded a sandbox".to_owned()),
                Some(Err(e)) => Ok(e),
                None => Err("list() was empty".to_owned()),
            };
            (before, r)
        } else {
            let sb = provider
                .connect(&ctx.sandbox_id)
                .await
                .at(&format!("{which} connect"))?;
            let before = ctx.count();
            (before, probe_call(sb.as_ref(), name).await)
        };
        let (before, outcome) = result;
        let e = outcome.map_err(|m| format!("{which}: expected NotSupported, {m}"))?;
        ensure!(
            e.kind() == ErrorKind::NotSupported,
            "{which}: expected NotSupported, got {:?}: {e}",
            e.kind()
        );
        if let (Some(before), Some(after)) = (before, ctx.count()) {
            ensure!(
                after == before,
                "{which}: an unsupported call sent {} request(s)",
                after - before
            );
        }
    }
    Ok(())
}

async fn probe_call(sb: &dyn Sandbox, name: &str) -> Result<Error, String> {
    fn err<T>(r: sandbox_sdk_core::Result<T>) -> Result<Error, String> {
        match r {
            Ok(_) => Err("the call succeeded".into()),
            Err(e) => Ok(e),
        }
    }
    match name {
        "stop_resume" => err(sb.stop().await),
        "pause_resume" => err(sb.pause().await),
        "set_timeout" => err(sb.set_timeout(Duration::from_secs(600)).await),
        "exec_stdin" => err(sb.exec(&Command::new("cat").stdin()).await),
        "exec_kill" => err(sb.kill_process("1").await),
        "exec_background" => err(sb.processes().await),
        "exec_pty" => err(sb.exec(&pty_command()).await),
        "files_watch" => err(sb.watch("conformance/watch", false).await),
        "fork" => err(sb.fork().await),
        "snapshot" => err(sb.snapshot(Some("conformance-snap")).await),
        "preview_link" => err(sb.preview_link(8080).await),
        "ssh_access" => err(sb.ssh_access(Duration::from_secs(600)).await),
        "metrics" => err(sb.metrics().await),
        "code_contexts" | "code_lost" => err(sb.list_code_contexts().await),
        name if name.starts_with("code_") => err(sb
            .run_code(&sandbox_sdk_core::code::RunCode::python("1"))
            .await),
        _ => err(sb
            .write_file("conformance/bin/data.bin", binary_data().into())
            .await),
    }
}
