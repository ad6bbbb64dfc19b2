//! The client layer against a counting fake provider: retry, the idempotency rule, gating,
//! fallback, hooks and emulation (exec of the fake runs the received argv in a real `/bin/sh`).

use async_trait::async_trait;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt, stream};
use proptest::prelude::*;
use sandbox_sdk_core::client::{
    Client, FallbackEvent, FallbackProvider, Hooks, RetryEvent, RetryPolicy, RetryProvider,
};
use sandbox_sdk_core::emulate::{EmulateSandbox, ExitMarker, KEY_PREFIX, MARK_PREFIX};
use sandbox_sdk_core::shell::{fold_into_shell, shell_quote};
use sandbox_sdk_core::{
    Capabilities, Command, CreateSpec, Download, Error, ErrorKind, ExitStatus, FileEventStream,
    FileInfo, FileKind, Level, ListFilter, ListOptions, Metrics, PreviewLink, Process,
    ProcessControl, ProcessEvent, ProcessInfo, Provider, PtySize, Result, Sandbox, SandboxExt,
    SandboxInfo, SandboxState, SandboxStream, SnapshotInfo, SshAccess, Transfer, UploadBody,
};
use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncReadExt;

// ---------------------------------------------------------------- the fake

/// A scratch directory removed on drop.
#[derive(Debug)]
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "sandbox-client-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path.canonicalize().unwrap())
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[derive(Debug)]
struct State {
    name: &'static str,
    caps: Capabilities,
    calls: Mutex<Vec<String>>,
    /// `Debug` and `describe()` of every command exec received.
    sent: Mutex<Vec<String>>,
    errors: Mutex<VecDeque<Error>>,
    /// Stdout of exec is delivered in chunks of this many bytes.
    chunk: Mutex<usize>,
    dir: TempDir,
}

impl State {
    fn new(name: &'static str, caps: Capabilities) -> Arc<Self> {
        Arc::new(State {
            name,
            caps,
            calls: Mutex::new(Vec::new()),
            sent: Mutex::new(Vec::new()),
            errors: Mutex::new(VecDeque::new()),
            chunk: Mutex::new(4096),
            dir: TempDir::new(),
        })
    }

    /// Every call logs its name, then fails with the next scripted error, if any.
    fn call(&self, op: &str) -> Result<()> {
        self.calls.lock().unwrap().push(op.to_owned());
        match self.errors.lock().unwrap().pop_front() {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    fn fail(&self, errors: impl IntoIterator<Item = Error>) {
        self.errors.lock().unwrap().extend(errors);
    }

    fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }

    fn count(&self, op: &str) -> usize {
        self.calls().iter().filter(|c| *c == op).count()
    }
}

#[derive(Debug, Clone)]
struct FakeProvider(Arc<State>);

impl FakeProvider {
    fn dyn_new(state: &Arc<State>) -> Arc<dyn Provider> {
        Arc::new(FakeProvider(state.clone()))
    }
}

#[derive(Debug)]
struct FakeSandbox {
    state: Arc<State>,
    id: String,
}

struct NoControl;

#[async_trait]
impl ProcessControl for NoControl {
    async fn kill(&self) -> Result<()> {
        Ok(())
    }
    async fn resize(&self, _size: PtySize) -> Result<()> {
        Ok(())
    }
}

fn finished_process(events: Vec<ProcessEvent>) -> Process {
    Process::new(
        "1",
        stream::iter(events.into_iter().map(Ok)).boxed(),
        None,
        Arc::new(NoControl),
    )
}

#[async_trait]
impl Provider for FakeProvider {
    fn name(&self) -> &str {
        self.0.name
    }
    fn capabilities(&self) -> Capabilities {
        self.0.caps
    }
    async fn create(&self, _spec: &CreateSpec) -> Result<Box<dyn Sandbox>> {
        self.0.call("create")?;
        Ok(Box::new(FakeSandbox {
            state: self.0.clone(),
            id: format!("{}-1", self.0.name),
        }))
    }
    async fn connect(&self, id: &str) -> Result<Box<dyn Sandbox>> {
        self.0.call("connect")?;
        Ok(Box::new(FakeSandbox {
            state: self.0.clone(),
            id: id.to_owned(),
        }))
    }
    fn list(&self, _filter: &ListFilter) -> SandboxStream<'_> {
        let name = self.0.name;
        let state = self.0.clone();
        let pages = (0..3).map(move |i| {
            state
                .call("list")
                .map(|()| SandboxInfo::new(format!("sb-{i}"), name, SandboxState::Running))
        });
        stream::iter(pages).boxed()
    }
    async fn destroy(&self, _id: &str) -> Result<()> {
        self.0.call("destroy_by_id")
    }
    async fn find_by_idempotency_key(&self, _key: &str) -> Result<Option<SandboxInfo>> {
        self.0.call("find_by_idempotency_key")?;
        Ok(None)
    }
    async fn usage(
        &self,
        sandbox: &SandboxInfo,
        _to: std::time::SystemTime,
    ) -> Result<sandbox_sdk_core::fleet::Usage> {
        self.0.call("usage")?;
        Err(Error::not_supported(self.0.name, "usage").with_sandbox_id(&sandbox.id))
    }
    async fn prepare(
        &self,
        _spec: &sandbox_sdk_core::fleet::PrepareSpec,
    ) -> Result<sandbox_sdk_core::fleet::Prepared> {
        self.0.call("prepare")?;
        Err(Error::not_supported(self.0.name, "prepare"))
    }
}

#[async_trait]
impl Sandbox for FakeSandbox {
    fn id(&self) -> &str {
        &self.id
    }
    fn provider(&self) -> &str {
        self.state.name
    }
    fn capabilities(&self) -> Capabilities {
        self.state.caps
    }
    async fn info(&self) -> Result<SandboxInfo> {
        self.state.call("info")?;
        Ok(SandboxInfo::new(
            &self.id,
            self.state.name,
            SandboxState::Running,
        ))
    }
    /// Runs the argv in a real `sh`-capable process in the fake's directory.
    async fn exec(&self, command: &Command) -> Result<Process> {
        self.state.call("exec")?;
        self.state
            .sent
            .lock()
            .unwrap()
            .push(format!("{command:?} {}", command.describe()));
        let flags = self.state.caps.flags;
        if !flags.per_command_env_cwd && (command.cwd.is_some() || !command.env.is_empty()) {
            return Err(Error::validation(
                "the fake takes no per-command cwd or env",
            ));
        }
        let mut child = std::process::Command::new(&command.argv[0]);
        child
            .args(&command.argv[1..])
            .current_dir(&self.state.dir.0)
            .env_remove("PWD");
        if let Some(cwd) = &command.cwd {
            child.current_dir(self.state.dir.0.join(cwd));
        }
        child.envs(&command.env);
        let out = child.output().map_err(Error::from)?;
        let chunk = *self.state.chunk.lock().unwrap();
        let mut events: Vec<ProcessEvent> = out
            .stdout
            .chunks(chunk)
            .map(|c| ProcessEvent::Stdout(Bytes::copy_from_slice(c)))
            .collect();
        if !out.stderr.is_empty() {
            events.push(ProcessEvent::Stderr(out.stderr.into()));
        }
        let code = if flags.exit_code_native {
            out.status.code()
        } else {
            None
        };
        events.push(ProcessEvent::Exit(ExitStatus {
            code,
            signal: None,
            emulated: false,
        }));
        Ok(finished_process(events))
    }
    async fn processes(&self) -> Result<Vec<ProcessInfo>> {
        self.state.call("processes")?;
        Ok(Vec::new())
    }
    async fn attach(&self, _pid: &str) -> Result<Process> {
        self.state.call("attach")?;
        Ok(finished_process(vec![ProcessEvent::Exit(
            ExitStatus::code(0),
        )]))
    }
    async fn kill_process(&self, _pid: &str) -> Result<()> {
        self.state.call("kill_process")
    }
    async fn upload(&self, _path: &str, mut body: UploadBody) -> Result<Transfer> {
        self.state.call("upload")?;
        let mut buf = Vec::new();
        body.read_to_end(&mut buf).await?;
        Ok(Transfer {
            bytes: buf.len() as u64,
            emulated: false,
        })
    }
    async fn write_file(&self, _path: &str, data: Bytes) -> Result<Transfer> {
        self.state.call("write_file")?;
        Ok(Transfer {
            bytes: data.len() as u64,
            emulated: false,
        })
    }
    async fn download(&self, _path: &str) -> Result<Download> {
        self.state.call("download")?;
        Ok(Download::new(
            stream::once(async { Ok(Bytes::from_static(b"data")) }).boxed(),
        ))
    }
    async fn list_files(&self, _path: &str, _options: ListOptions) -> Result<Vec<FileInfo>> {
        self.state.call("list_files")?;
        Ok(Vec::new())
    }
    async fn stat(&self, path: &str) -> Result<FileInfo> {
        self.state.call("stat")?;
        Ok(FileInfo {
            path: path.to_owned(),
            name: path.to_owned(),
            kind: FileKind::File,
            size: 4,
            mode: None,
            modified: None,
        })
    }
    async fn mkdir(&self, _path: &str) -> Result<()> {
        self.state.call("mkdir")
    }
    async fn remove(&self, _path: &str) -> Result<()> {
        self.state.call("remove")
    }
    async fn rename(&self, _from: &str, _to: &str) -> Result<()> {
        self.state.call("rename")
    }
    async fn watch(&self, _path: &str, _recursive: bool) -> Result<FileEventStream> {
        self.state.call("watch")?;
        Ok(stream::empty().boxed())
    }
    async fn stop(&self) -> Result<()> {
        self.state.call("stop")
    }
    async fn pause(&self) -> Result<()> {
        self.state.call("pause")
    }
    async fn resume(&self) -> Result<()> {
        self.state.call("resume")
    }
    async fn destroy(&self) -> Result<()> {
        self.state.call("destroy")
    }
    async fn set_timeout(&self, _timeout: Duration) -> Result<()> {
        self.state.call("set_timeout")
    }
    async fn preview_link(&self, port: u16) -> Result<PreviewLink> {
        self.state.call("preview_link")?;
        Ok(PreviewLink {
            url: format!("http://127.0.0.1:{port}"),
            port,
            headers: BTreeMap::new(),
            token: None,
            expires_at: None,
        })
    }
    async fn ssh_access(&self, _ttl: Duration) -> Result<SshAccess> {
        self.state.call("ssh_access")?;
        Ok(SshAccess {
            host: "127.0.0.1".into(),
            port: 22,
            user: "u".into(),
            token: None,
            expires_at: None,
        })
    }
    async fn fork(&self) -> Result<Box<dyn Sandbox>> {
        self.state.call("fork")?;
        Ok(Box::new(FakeSandbox {
            state: self.state.clone(),
            id: format!("{}-fork", self.id),
        }))
    }
    async fn snapshot(&self, name: Option<&str>) -> Result<SnapshotInfo> {
        self.state.call("snapshot")?;
        Ok(SnapshotInfo {
            id: "snap-1".into(),
            name: name.map(str::to_owned),
            sandbox_id: Some(self.id.clone()),
            created_at: None,
        })
    }
    async fn metrics(&self) -> Result<Metrics> {
        self.state.call("metrics")?;
        Ok(Metrics::default())
    }
}

// ---------------------------------------------------------------- helpers

fn all_native() -> Capabilities {
    let mut caps = Capabilities::NONE;
    for cap in sandbox_sdk_core::Capability::ALL {
        caps.set(*cap, Level::Native);
    }
    caps
}

fn test_policy() -> RetryPolicy {
    RetryPolicy::default()
        .no_delay(true)
        .delays(Duration::from_millis(10), Duration::from_millis(50))
}

type Seen = Arc<Mutex<Vec<(u32, Duration, ErrorKind)>>>;

fn recording(inner: Arc<dyn Provider>, policy: RetryPolicy) -> (RetryProvider, Seen) {
    let seen: Seen = Arc::default();
    let sink = seen.clone();
    let provider =
        RetryProvider::new(inner, policy).on_retry(Arc::new(move |e: &RetryEvent<'_>| {
            sink.lock()
                .unwrap()
                .push((e.attempt, e.delay, e.error.kind()));
        }));
    (provider, seen)
}

fn transport() -> Error {
    Error::new(ErrorKind::Transport, "connection reset")
}

// ---------------------------------------------------------------- retry

#[tokio::test]
async fn a_destroy_retried_after_an_ambiguous_failure_that_finds_it_gone_succeeds() {
    let state = State::new("fake", all_native());
    let client = Client::builder(FakeProvider::dyn_new(&state))
        .retry(test_policy())
        .build();
    let sandbox = client.connect("sb").await.unwrap();
    // The first attempt's answer was lost, but it destroyed the sandbox.
    state.fail([
        Error::new(ErrorKind::Timeout, "timed out").with_ambiguous(true),
        Error::new(ErrorKind::NotFound, "gone").with_status(404),
    ]);
    sandbox.destroy().await.unwrap();
    assert_eq!(state.count("destroy"), 2);
    // A NotFound after an attempt that surely did nothing (503) is the truth: someone else did it.
    state.fail([
        Error::new(ErrorKind::Provider, "unavailable").with_status(503),
        Error::new(ErrorKind::NotFound, "gone").with_status(404),
    ]);
    let error = sandbox.destroy().await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NotFound);
    // A sandbox gone before any attempt is NotFound.
    state.fail([Error::new(ErrorKind::NotFound, "gone").with_status(404)]);
    assert_eq!(
        sandbox.destroy().await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
}

#[tokio::test]
async fn the_final_error_of_a_retried_call_says_how_many_attempts_over_how_long() {
    let state = State::new("fake", all_native());
    let client = Client::builder(FakeProvider::dyn_new(&state))
        .retry(test_policy().max_retries(2))
        .build();
    state.fail((0..3).map(|_| transport()));
    let error = client.connect("sb").await.unwrap_err();
    assert!(
        error.to_string().contains("gave up after 3 attempts over"),
        "{error}"
    );
    // A call that failed once and was not retried says nothing of attempts.
    state.fail([Error::new(ErrorKind::NotFound, "gone").with_status(404)]);
    let error = client.connect("sb").await.unwrap_err();
    assert!(!error.to_string().contains("attempts"), "{error}");
}

#[tokio::test]
async fn retry_follows_each_error_kind_retryability() {
    let cases: Vec<(Error, bool)> = vec![
        (Error::new(ErrorKind::NotFound, "x").with_status(404), false),
        (
            Error::new(ErrorKind::Unauthorized, "x").with_status(401),
            false,
        ),
        (Error::new(ErrorKind::Timeout, "x"), true),
        (
            Error::new(ErrorKind::QuotaExceeded, "x").with_status(429),
            true,
        ),
        (Error::new(ErrorKind::NotSupported, "x"), false),
        (Error::new(ErrorKind::Conflict, "x").with_status(409), false),
        (
            Error::new(ErrorKind::Validation, "x").with_status(400),
            false,
        ),
        (Error::new(ErrorKind::ProviderNotFound, "x"), false),
        (Error::all_providers_failed(Vec::new()), false),
        (Error::new(ErrorKind::Provider, "x").with_status(500), true),
        (Error::new(ErrorKind::Provider, "x").with_status(503), true),
        (Error::new(ErrorKind::Provider, "x").with_status(418), false),
        (Error::new(ErrorKind::Transport, "x"), true),
        (Error::new(ErrorKind::Cancelled, "x"), false),
        (
            Error::new(ErrorKind::NotRunning, "x").with_status(502),
            false,
        ),
        (
            Error::new(ErrorKind::Conflict, "state change in progress").with_retryable(true),
            true,
        ),
        (transport().with_retryable(false), false),
    ];
    for (error, retryable) in cases {
        let label = format!("{error:?}");
        let kind = error.kind();
        let state = State::new("fake", all_native());
        state.fail([error]);
        let (provider, seen) = recording(FakeProvider::dyn_new(&state), test_policy());
        let result = provider.connect("sb-1").await;
        if retryable {
            assert!(result.is_ok(), "{label}");
            assert_eq!(state.count("connect"), 2, "{label}");
            assert_eq!(seen.lock().unwrap().len(), 1, "{label}");
        } else {
            let error = result.unwrap_err();
            assert_eq!(error.kind(), kind, "{label}");
            assert!(!error.is_retryable(), "{label}");
            assert_eq!(state.count("connect"), 1, "{label}");
            assert!(seen.lock().unwrap().is_empty(), "{label}");
        }
    }
}

#[tokio::test]
async fn retry_counts_attempts_and_marks_the_final_error_not_retryable() {
    let state = State::new("fake", all_native());
    state.fail((0..10).map(|_| transport()));
    let (provider, seen) = recording(FakeProvider::dyn_new(&state), test_policy().max_retries(3));
    let error = provider.connect("sb-1").await.unwrap_err();
    assert_eq!(state.count("connect"), 4);
    assert_eq!(error.kind(), ErrorKind::Transport);
    assert!(!error.is_retryable(), "an outer layer must not retry again");
    assert_eq!(error.provider(), Some("fake"));
    assert_eq!(error.operation(), Some("connect"));
    let attempts: Vec<u32> = seen.lock().unwrap().iter().map(|s| s.0).collect();
    assert_eq!(attempts, [2, 3, 4]);
    for (_, delay, _) in seen.lock().unwrap().iter() {
        assert!(
            *delay >= Duration::from_millis(10) && *delay <= Duration::from_millis(50),
            "{delay:?} outside [base, cap]"
        );
    }
}

#[tokio::test]
async fn retry_honours_retry_after() {
    let state = State::new("fake", all_native());
    let slow_down = || {
        Error::new(ErrorKind::QuotaExceeded, "rate limited")
            .with_status(429)
            .with_retry_after(Duration::from_secs(7))
    };
    state.fail([slow_down(), slow_down()]);
    let (provider, seen) = recording(FakeProvider::dyn_new(&state), test_policy());
    provider.connect("sb-1").await.unwrap();
    assert_eq!(state.count("connect"), 3);
    let delays: Vec<Duration> = seen.lock().unwrap().iter().map(|s| s.1).collect();
    assert_eq!(delays, [Duration::from_secs(7), Duration::from_secs(7)]);
}

#[tokio::test]
async fn retry_stops_at_its_deadline_in_virtual_time() {
    let state = State::new("fake", all_native());
    state.fail((0..100).map(|_| transport()));
    let policy = test_policy()
        .max_retries(100)
        .delays(Duration::from_secs(1), Duration::from_secs(1))
        .deadline(Some(Duration::from_secs(5)));
    let (provider, seen) = recording(FakeProvider::dyn_new(&state), policy);
    let error = provider.connect("sb-1").await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Transport);
    assert!(!error.is_retryable());
    // Waits of 1 s each: the sixth failure would need a wait ending at 6 s > 5 s.
    assert_eq!(state.count("connect"), 6);
    let total: Duration = seen.lock().unwrap().iter().map(|s| s.1).sum();
    assert_eq!(total, Duration::from_secs(5));
}

#[tokio::test]
async fn a_retry_after_past_the_deadline_returns_the_error_at_once() {
    let state = State::new("fake", all_native());
    state.fail([
        Error::new(ErrorKind::QuotaExceeded, "busy").with_retry_after(Duration::from_secs(30))
    ]);
    let policy = test_policy().deadline(Some(Duration::from_secs(10)));
    let (provider, seen) = recording(FakeProvider::dyn_new(&state), policy);
    let error = provider.connect("sb-1").await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::QuotaExceeded);
    assert_eq!(state.count("connect"), 1);
    assert!(seen.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_create_without_idempotency_key_is_sent_exactly_once() {
    for error in [
        transport(),
        Error::new(ErrorKind::Timeout, "gateway timeout").with_status(504),
        Error::new(ErrorKind::Provider, "bad gateway").with_status(502),
    ] {
        let state = State::new("fake", all_native());
        state.fail([error]);
        let (provider, seen) = recording(FakeProvider::dyn_new(&state), test_policy());
        let result = provider.create(&CreateSpec::new()).await;
        assert!(result.is_err());
        assert_eq!(state.count("create"), 1);
        assert!(seen.lock().unwrap().is_empty());
    }
}

#[tokio::test]
async fn a_create_with_idempotency_key_is_retried() {
    let state = State::new("fake", all_native());
    state.fail([transport(), transport()]);
    let (provider, seen) = recording(FakeProvider::dyn_new(&state), test_policy());
    let sandbox = provider
        .create(&CreateSpec::new().idempotency_key("job-1"))
        .await
        .unwrap();
    assert_eq!(sandbox.id(), "fake-1");
    assert_eq!(state.count("create"), 3);
    assert_eq!(seen.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn sandbox_reads_are_retried_but_exec_and_one_shot_calls_are_not() {
    let state = State::new("fake", all_native());
    let (provider, _) = recording(FakeProvider::dyn_new(&state), test_policy());
    let sandbox = provider.create(&CreateSpec::new()).await.unwrap();

    state.fail([transport()]);
    sandbox.info().await.unwrap();
    assert_eq!(state.count("info"), 2);
    state.fail([transport()]);
    sandbox.stat("a").await.unwrap();
    assert_eq!(state.count("stat"), 2);
    state.fail([transport()]);
    sandbox.destroy().await.unwrap();
    assert_eq!(state.count("destroy"), 2);

    for (op, result) in [
        ("exec", {
            state.fail([transport()]);
            sandbox.exec(&Command::new("true")).await.map(drop)
        }),
        ("kill_process", {
            state.fail([transport()]);
            sandbox.kill_process("1").await
        }),
        ("fork", {
            state.fail([transport()]);
            sandbox.fork().await.map(drop)
        }),
        ("snapshot", {
            state.fail([transport()]);
            sandbox.snapshot(None).await.map(drop)
        }),
        ("ssh_access", {
            state.fail([transport()]);
            sandbox.ssh_access(Duration::from_secs(60)).await.map(drop)
        }),
        ("upload", {
            state.fail([transport()]);
            let body: UploadBody = Box::pin(std::io::Cursor::new(b"x".to_vec()));
            sandbox.upload("a", body).await.map(drop)
        }),
    ] {
        assert_eq!(result.unwrap_err().kind(), ErrorKind::Transport, "{op}");
        assert_eq!(state.count(op), 1, "{op} must be sent once");
    }
}

#[tokio::test]
async fn list_retries_only_before_the_first_item() {
    let state = State::new("fake", all_native());
    state.fail([transport()]);
    let (provider, _) = recording(FakeProvider::dyn_new(&state), test_policy());
    let items: Vec<_> = provider
        .list(&ListFilter::new())
        .try_collect()
        .await
        .unwrap();
    assert_eq!(items.len(), 3);

    // An error after the first item ends the stream as is.
    let state = State::new("fake", all_native());
    let (provider, _) = recording(FakeProvider::dyn_new(&state), test_policy());
    let mut items = provider.list(&ListFilter::new());
    assert!(items.next().await.unwrap().is_ok());
    state.fail([transport()]);
    assert_eq!(
        items.next().await.unwrap().unwrap_err().kind(),
        ErrorKind::Transport
    );
    assert_eq!(state.count("list"), 2);
}

// ---------------------------------------------------------------- gating

#[tokio::test]
async fn unsupported_operations_fail_before_reaching_the_provider() {
    let mut caps = Capabilities::NONE;
    caps.list = Level::Unsupported;
    let state = State::new("bare", caps);
    let client = Client::builder(FakeProvider::dyn_new(&state))
        .retry(test_policy())
        .emulate(false)
        .build();
    let sandbox = client.create(&CreateSpec::new()).await.unwrap();
    let before = state.calls();
    assert_eq!(before, ["create"]);

    let body = || -> UploadBody { Box::pin(std::io::Cursor::new(Vec::new())) };
    let refused: Vec<(&str, Result<()>)> = vec![
        (
            "stdin",
            sandbox.exec(&Command::new("cat").stdin()).await.map(drop),
        ),
        (
            "pty",
            sandbox
                .exec(&Command::new("sh").pty(PtySize::default()))
                .await
                .map(drop),
        ),
        (
            "background",
            sandbox
                .exec(&Command::new("sleep").background())
                .await
                .map(drop),
        ),
        ("background", sandbox.processes().await.map(drop)),
        ("background", sandbox.attach("1").await.map(drop)),
        ("kill_process", sandbox.kill_process("1").await),
        ("files", sandbox.upload("a", body()).await.map(drop)),
        (
            "files",
            sandbox.write_file("a", Bytes::new()).await.map(drop),
        ),
        ("files", sandbox.download("a").await.map(drop)),
        (
            "files",
            sandbox
                .list_files("a", ListOptions::default())
                .await
                .map(drop),
        ),
        ("files", sandbox.stat("a").await.map(drop)),
        ("files", sandbox.mkdir("a").await),
        ("files", sandbox.remove("a").await),
        ("files", sandbox.rename("a", "b").await),
        ("watch", sandbox.watch("a", true).await.map(drop)),
        ("stop", sandbox.stop().await),
        ("pause", sandbox.pause().await),
        ("resume", sandbox.resume().await),
        (
            "set_timeout",
            sandbox.set_timeout(Duration::from_secs(1)).await,
        ),
        ("preview_link", sandbox.preview_link(8080).await.map(drop)),
        (
            "ssh_access",
            sandbox.ssh_access(Duration::from_secs(1)).await.map(drop),
        ),
        ("fork", sandbox.fork().await.map(drop)),
        ("snapshot", sandbox.snapshot(None).await.map(drop)),
        ("metrics", sandbox.metrics().await.map(drop)),
        (
            "list",
            client
                .list(&ListFilter::new())
                .try_collect::<Vec<_>>()
                .await
                .map(drop),
        ),
    ];
    for (op, result) in refused {
        let error = result.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::NotSupported, "{op}");
        assert_eq!(error.provider(), Some("bare"), "{op}");
        assert_eq!(error.operation(), Some(op), "{op}");
        assert!(
            error
                .to_string()
                .contains(&format!("bare does not support {op}")),
            "{error}"
        );
    }
    assert_eq!(state.calls(), before, "the provider received nothing");

    // What is always allowed still goes through.
    sandbox.info().await.unwrap();
    sandbox
        .exec(&Command::new("true"))
        .await
        .unwrap()
        .wait()
        .await
        .unwrap();
    sandbox.destroy().await.unwrap();
    assert_eq!(state.calls(), ["create", "info", "exec", "destroy"]);
}

#[tokio::test]
async fn resume_is_allowed_by_stop_alone() {
    let mut caps = Capabilities::NONE;
    caps.stop = Level::Native;
    let state = State::new("stoppy", caps);
    let client = Client::builder(FakeProvider::dyn_new(&state))
        .emulate(false)
        .build();
    let sandbox = client.connect("sb-1").await.unwrap();
    sandbox.resume().await.unwrap();
    assert_eq!(
        sandbox.pause().await.unwrap_err().kind(),
        ErrorKind::NotSupported
    );
    assert_eq!(state.calls(), ["connect", "resume"]);
}

// ---------------------------------------------------------------- fallback

#[tokio::test]
async fn fallback_tries_providers_in_order_with_a_key() {
    let a = State::new("a", all_native());
    let b = State::new("b", all_native());
    a.fail([transport()]);
    let fallback =
        FallbackProvider::new(FakeProvider::dyn_new(&a), vec![FakeProvider::dyn_new(&b)]);
    assert_eq!(fallback.name(), "a");
    let sandbox = fallback
        .create(&CreateSpec::new().idempotency_key("k"))
        .await
        .unwrap();
    assert_eq!(sandbox.provider(), "b");
    assert_eq!((a.count("create"), b.count("create")), (1, 1));
}

#[tokio::test]
async fn all_providers_failed_lists_every_attempt_in_order() {
    let a = State::new("a", all_native());
    let b = State::new("b", all_native());
    a.fail([Error::new(ErrorKind::Provider, "down").with_status(503)]);
    b.fail([Error::new(ErrorKind::QuotaExceeded, "too many sandboxes").with_status(429)]);
    let client = Client::builder(FakeProvider::dyn_new(&a))
        .fallback(FakeProvider::dyn_new(&b))
        .retry(RetryPolicy::never())
        .build();
    let error = client
        .create(&CreateSpec::new().idempotency_key("k"))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::AllProvidersFailed);
    let attempts: Vec<(&str, ErrorKind)> = error
        .attempts()
        .iter()
        .map(|at| (at.provider.as_str(), at.error.kind()))
        .collect();
    assert_eq!(
        attempts,
        [("a", ErrorKind::Provider), ("b", ErrorKind::QuotaExceeded)]
    );
}

#[tokio::test]
async fn fallback_moves_on_only_when_the_provider_is_unavailable() {
    for (error, falls_back) in [
        (
            Error::new(ErrorKind::Unauthorized, "bad key").with_status(401),
            false,
        ),
        (
            Error::new(ErrorKind::Validation, "bad image").with_status(400),
            false,
        ),
        (Error::not_supported("a", "create"), false),
        (
            Error::new(ErrorKind::Conflict, "name taken").with_status(409),
            false,
        ),
        (
            Error::new(ErrorKind::NotFound, "no template").with_status(404),
            false,
        ),
        (
            Error::new(ErrorKind::Provider, "bad gateway").with_status(502),
            true,
        ),
        (
            Error::new(ErrorKind::QuotaExceeded, "slow down").with_status(429),
            true,
        ),
        (Error::new(ErrorKind::Timeout, "timed out"), true),
        (transport(), true),
    ] {
        let a = State::new("a", all_native());
        let b = State::new("b", all_native());
        let kind = error.kind();
        a.fail([error]);
        let recorder = Arc::new(Recorder::default());
        let client = Client::builder(FakeProvider::dyn_new(&a))
            .fallback(FakeProvider::dyn_new(&b))
            .retry(RetryPolicy::never())
            .hooks(recorder.clone())
            .build();
        let result = client.create(&CreateSpec::new().idempotency_key("k")).await;
        assert_eq!(b.count("create"), usize::from(falls_back), "{kind:?}");
        let fallbacks: Vec<String> = recorder
            .0
            .lock()
            .unwrap()
            .iter()
            .filter(|line| line.starts_with("on_fallback"))
            .cloned()
            .collect();
        if falls_back {
            assert_eq!(result.unwrap().provider(), "b");
            assert_eq!(fallbacks, [format!("on_fallback a -> b {kind}")]);
        } else {
            assert_eq!(result.unwrap_err().kind(), kind);
            assert!(fallbacks.is_empty(), "{kind:?}: {fallbacks:?}");
        }
    }
}

#[tokio::test]
async fn no_fallback_without_a_key() {
    let a = State::new("a", all_native());
    let b = State::new("b", all_native());
    a.fail([transport()]);
    let client = Client::builder(FakeProvider::dyn_new(&a))
        .fallback(FakeProvider::dyn_new(&b))
        .retry(test_policy())
        .build();
    let error = client.create(&CreateSpec::new()).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Transport);
    assert_eq!((a.count("create"), b.count("create")), (1, 0));
    // connect goes to the primary only.
    client.connect("x").await.unwrap();
    assert_eq!((a.count("connect"), b.count("connect")), (1, 0));
}

#[tokio::test]
async fn each_provider_is_retried_before_falling_back() {
    let a = State::new("a", all_native());
    let b = State::new("b", all_native());
    a.fail((0..10).map(|_| transport()));
    let client = Client::builder(FakeProvider::dyn_new(&a))
        .fallback(FakeProvider::dyn_new(&b))
        .retry(test_policy().max_retries(2))
        .build();
    let sandbox = client
        .create(&CreateSpec::new().idempotency_key("k"))
        .await
        .unwrap();
    assert_eq!(sandbox.provider(), "b");
    assert_eq!((a.count("create"), b.count("create")), (3, 1));
}

// ---------------------------------------------------------------- hooks

#[derive(Default)]
struct Recorder(Mutex<Vec<String>>);

impl Hooks for Recorder {
    fn before_create(&self, spec: &CreateSpec) {
        let key = spec.idempotency_key.clone().unwrap_or_default();
        self.0.lock().unwrap().push(format!("before_create {key}"));
    }
    fn after_create(&self, provider: &str, sandbox_id: &str) {
        self.0
            .lock()
            .unwrap()
            .push(format!("after_create {provider} {sandbox_id}"));
    }
    fn on_retry(&self, event: &RetryEvent<'_>) {
        self.0.lock().unwrap().push(format!(
            "on_retry {} attempt {} {}",
            event.operation,
            event.attempt,
            event.error.kind()
        ));
    }
    fn on_fallback(&self, event: &FallbackEvent<'_>) {
        self.0.lock().unwrap().push(format!(
            "on_fallback {} -> {} {}",
            event.from,
            event.to,
            event.error.kind()
        ));
    }
    fn on_error(&self, error: &Error) {
        self.0.lock().unwrap().push(format!(
            "on_error {} {} {} {}",
            error.provider().unwrap_or("-"),
            error.operation().unwrap_or("-"),
            error.sandbox_id().unwrap_or("-"),
            error.kind()
        ));
    }
}

#[tokio::test]
async fn hooks_are_called_in_order() {
    let state = State::new("fake", all_native());
    let recorder = Arc::new(Recorder::default());
    let client = Client::builder(FakeProvider::dyn_new(&state))
        .retry(test_policy())
        .hooks(recorder.clone())
        .build();
    state.fail([transport()]);
    let sandbox = client
        .create(&CreateSpec::new().idempotency_key("k1"))
        .await
        .unwrap();
    state.fail([Error::new(ErrorKind::NotFound, "gone").with_status(404)]);
    sandbox.info().await.unwrap_err();
    state.fail([transport()]);
    client.create(&CreateSpec::new()).await.unwrap_err();
    assert_eq!(
        *recorder.0.lock().unwrap(),
        [
            "before_create k1",
            "on_retry create attempt 2 transport error",
            "after_create fake fake-1",
            "on_error fake info fake-1 not found",
            "before_create ",
            "on_error fake create - transport error",
        ]
    );
}

#[tokio::test]
async fn an_adapters_own_types_are_reachable_under_every_layer() {
    let state = State::new("fake", all_native());
    let client = Client::builder(FakeProvider::dyn_new(&state))
        .retry(test_policy())
        .hooks(Arc::new(Recorder::default()))
        .owner(sandbox_sdk_core::fleet::Owner::new("team-a").unwrap())
        .build();
    let provider: &dyn Provider = &client;
    assert!(provider.downcast_ref::<FakeProvider>().is_some());
    assert!(provider.downcast_ref::<RetryProvider>().is_some());
    let sandbox = client.create(&CreateSpec::new()).await.unwrap();
    let fake: &FakeSandbox = sandbox.downcast_ref().expect("the fake under the layers");
    assert_eq!(fake.id, sandbox.id());
    assert!(
        sandbox
            .downcast_ref::<sandbox_sdk_core::local::LocalSandbox>()
            .is_none()
    );

    // A fallback client wraps several providers, so no single one is reachable through it.
    let other = State::new("other", all_native());
    let with_fallback = Client::builder(FakeProvider::dyn_new(&state))
        .fallback(FakeProvider::dyn_new(&other))
        .build();
    let provider: &dyn Provider = &with_fallback;
    assert!(provider.downcast_ref::<FakeProvider>().is_none());
}

// ---------------------------------------------------------------- emulation

fn shell_only(per_command_env_cwd: bool, exit_code_native: bool) -> Capabilities {
    let mut caps = Capabilities::NONE;
    caps.flags.per_command_env_cwd = per_command_env_cwd;
    caps.flags.exit_code_native = exit_code_native;
    caps
}

#[test]
fn exit_marker_is_found_across_every_chunk_boundary() {
    let marker = ExitMarker::new();
    // The key line the script prints first, some output that starts like the marker, and the
    // marker with the key and 7.
    let key = "00112233445566778899aabbccddeeff";
    let mut stream = format!("{KEY_PREFIX}{key}\n").into_bytes();
    stream.extend_from_slice(b"out __sandbox_exit_ and more\n");
    stream.extend_from_slice(format!("{MARK_PREFIX}{key}:7\n").as_bytes());
    for split in 0..=stream.len() {
        let mut m = marker.clone();
        let mut out = m.push(&stream[..split]).to_vec();
        out.extend_from_slice(&m.push(&stream[split..]));
        let (rest, code) = m.finish();
        out.extend_from_slice(&rest);
        assert_eq!(out, b"out __sandbox_exit_ and more\n", "split at {split}");
        assert_eq!(code, Some(7), "split at {split}");
    }
    // One byte at a time.
    let mut m = marker.clone();
    let mut out = Vec::new();
    for b in &stream {
        out.extend_from_slice(&m.push(std::slice::from_ref(b)));
    }
    let (rest, code) = m.finish();
    out.extend_from_slice(&rest);
    assert_eq!(
        (out.as_slice(), code),
        (&b"out __sandbox_exit_ and more\n"[..], Some(7))
    );
}

#[tokio::test]
async fn emulated_exit_codes_survive_any_chunking_through_real_sh() {
    let state = State::new("nocode", shell_only(false, false));
    std::fs::create_dir(state.dir.0.join("sub dir")).unwrap();
    let sandbox = EmulateSandbox::new(Box::new(FakeSandbox {
        state: state.clone(),
        id: "sb".into(),
    }));
    let command = Command::shell("printf 'a\\nb'; printf \"$GREETING\" >&2; exit 7")
        .cwd("sub dir")
        .env("GREETING", "it's me");
    for chunk in 1..=90 {
        *state.chunk.lock().unwrap() = chunk;
        let out = sandbox.run(&command).await.unwrap();
        assert_eq!(&out.stdout[..], b"a\nb", "chunk {chunk}");
        assert_eq!(&out.stderr[..], b"it's me", "chunk {chunk}");
        assert_eq!(
            out.status,
            ExitStatus {
                code: Some(7),
                signal: None,
                emulated: true
            },
            "chunk {chunk}"
        );
    }
}

#[tokio::test]
async fn env_values_folded_into_the_script_are_redacted_in_what_the_provider_receives() {
    for exit_code_native in [true, false] {
        let state = State::new("nocwd", shell_only(false, exit_code_native));
        let sandbox = EmulateSandbox::new(Box::new(FakeSandbox {
            state: state.clone(),
            id: "sb".into(),
        }));
        let out = sandbox
            .run(&Command::shell("printf '%s' \"$TOKEN\"").env("TOKEN", "canary-fold-secret"))
            .await
            .unwrap();
        assert_eq!(&out.stdout[..], b"canary-fold-secret");
        let sent = state.sent.lock().unwrap().clone();
        assert_eq!(sent.len(), 1);
        assert!(
            !sent[0].contains("canary-fold-secret"),
            "exit_code_native {exit_code_native}: {}",
            sent[0]
        );
    }
}

#[tokio::test]
async fn cwd_and_env_are_folded_only_when_the_provider_lacks_them() {
    let state = State::new("nocwd", shell_only(false, true));
    std::fs::create_dir(state.dir.0.join("-x")).unwrap();
    let sandbox = EmulateSandbox::new(Box::new(FakeSandbox {
        state: state.clone(),
        id: "sb".into(),
    }));
    let out = sandbox
        .run(
            &Command::shell("printf '%s|%s' \"${PWD##*/}\" \"$V\"")
                .cwd("-x")
                .env("V", "$HOME `x`"),
        )
        .await
        .unwrap();
    assert_eq!(out.stdout_lossy(), "-x|$HOME `x`");
    assert!(!out.status.emulated);
    // An invalid env name is refused before anything is sent.
    let calls = state.calls().len();
    let error = sandbox
        .exec(&Command::new("true").env("A=B", "1"))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Validation);
    assert_eq!(state.calls().len(), calls);
}

#[tokio::test]
async fn files_over_exec_round_trip_binary_data() {
    let state = State::new("nofiles", shell_only(true, false));
    let client = Client::builder(FakeProvider::dyn_new(&state))
        .retry(test_policy())
        .build();
    assert_eq!(client.capabilities().files_upload, Level::Emulated);
    let sandbox = client.create(&CreateSpec::new()).await.unwrap();
    assert_eq!(sandbox.capabilities().files_upload, Level::Emulated);

    let data: Vec<u8> = (0..(2 * sandbox_sdk_core::emulate::CHUNK + 1234))
        .map(|i| (i * 7 % 256) as u8)
        .collect();
    let transfer = sandbox
        .write_file("dir/it's a file.bin", Bytes::from(data.clone()))
        .await
        .unwrap();
    assert_eq!(
        transfer,
        Transfer {
            bytes: data.len() as u64,
            emulated: true
        }
    );
    assert_eq!(
        std::fs::read(state.dir.0.join("dir/it's a file.bin")).unwrap(),
        data
    );
    let download = sandbox.download("dir/it's a file.bin").await.unwrap();
    assert!(download.is_emulated());
    let chunks: Vec<Bytes> = download.try_collect().await.unwrap();
    assert!(chunks.len() >= 3);
    assert_eq!(chunks.concat(), data);

    let body: UploadBody = Box::pin(std::io::Cursor::new(b"streamed".to_vec()));
    let up = sandbox.upload("dir/small.txt", body).await.unwrap();
    assert_eq!(
        up,
        Transfer {
            bytes: 8,
            emulated: true
        }
    );
    assert_eq!(
        sandbox.read_to_string("dir/small.txt").await.unwrap(),
        "streamed"
    );
    sandbox.write_file("dir/empty", Bytes::new()).await.unwrap();
    assert!(sandbox.read_file("dir/empty").await.unwrap().is_empty());

    let info = sandbox.stat("dir/small.txt").await.unwrap();
    assert_eq!(
        (info.kind, info.size, info.name.as_str()),
        (FileKind::File, 8, "small.txt")
    );
    assert_eq!(sandbox.stat("dir").await.unwrap().kind, FileKind::Dir);

    sandbox.mkdir("dir/sub/deeper").await.unwrap();
    let mut names: Vec<String> = sandbox
        .list_files("dir", ListOptions::default())
        .await
        .unwrap()
        .into_iter()
        .map(|f| f.name)
        .collect();
    names.sort();
    assert_eq!(names, ["empty", "it's a file.bin", "small.txt", "sub"]);

    sandbox
        .rename("dir/small.txt", "dir/moved.txt")
        .await
        .unwrap();
    assert!(!sandbox.exists("dir/small.txt").await.unwrap());
    assert!(sandbox.exists("dir/moved.txt").await.unwrap());
    sandbox.remove("dir/moved.txt").await.unwrap();

    for error in [
        sandbox.stat("missing").await.unwrap_err(),
        sandbox.download("missing").await.unwrap_err(),
        sandbox.remove("missing").await.unwrap_err(),
        sandbox.rename("missing", "x").await.unwrap_err(),
        sandbox
            .list_files("missing", ListOptions::default())
            .await
            .unwrap_err(),
    ] {
        assert_eq!(error.kind(), ErrorKind::NotFound, "{error}");
        assert_eq!(error.sandbox_id(), Some("nofiles-1"));
    }
    assert_eq!(
        sandbox.download("dir").await.unwrap_err().kind(),
        ErrorKind::Validation
    );
    assert_eq!(
        sandbox
            .write_file("bad\0path", Bytes::new())
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::Validation
    );
}

// ---------------------------------------------------------------- quoting, proven against /bin/sh

fn nasty() -> impl Strategy<Value = String> {
    prop_oneof![
        "[^\u{0}]{0,40}",
        "[ '\"$`\\\\*?\\[\\]{}~#;&|<>()!\n\t=%-]{0,24}",
        "(-|'|\\$\\(|`|\\\\|\\*|é|日本|🦀|\n| ){0,12}",
    ]
}

fn dir_name() -> impl Strategy<Value = String> {
    prop_oneof![
        "[^\u{0}/]{1,24}",
        "[ '\"$`\\\\*?\\[\\]{}~#;&|<>()!\n\t-]{1,16}",
    ]
    .prop_filter("not . or ..", |s| s != "." && s != "..")
}

fn run_folded(dir: &Path, command: &Command) -> Vec<u8> {
    let folded = fold_into_shell(command).unwrap();
    assert_eq!(folded.argv[0], "sh");
    let out = std::process::Command::new("/bin/sh")
        .args(&folded.argv[1..])
        .current_dir(dir)
        .env_remove("PWD")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn sh_c_folding_passes_any_string_byte_for_byte(
        arg in nasty(),
        value in nasty(),
        name in dir_name(),
        absolute in any::<bool>(),
    ) {
        let base = TempDir::new();
        let dir = base.0.join(&name);
        std::fs::create_dir(&dir).unwrap();
        let cwd = if absolute { dir.to_str().unwrap().to_owned() } else { name.clone() };
        let command = Command::new("printf")
            .arg("%s\\0%s\\0%s")
            .arg(&arg)
            .arg("$V")
            .arg("-")
            .cwd(cwd)
            .env("V", &value);
        // printf's own arguments come back as given; then env and cwd, read by a second shell.
        let out = run_folded(&base.0, &command);
        let mut expected = arg.clone().into_bytes();
        expected.extend_from_slice(b"\0$V\0-");
        prop_assert_eq!(out, expected);

        let probe = Command::new("sh")
            .arg("-c")
            .arg("printf '%s\\0%s' \"$V\" \"$PWD\"")
            .cwd(if absolute { dir.to_str().unwrap().to_owned() } else { name.clone() })
            .env("V", &value);
        let out = run_folded(&base.0, &probe);
        let mut expected = value.clone().into_bytes();
        expected.push(0);
        expected.extend_from_slice(dir.to_str().unwrap().as_bytes());
        prop_assert_eq!(out, expected);
    }

    #[test]
    fn shell_quote_round_trips_through_echo_free_printf(word in nasty()) {
        let quoted = shell_quote(&word).unwrap();
        let out = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(format!("printf '%s' {quoted}"))
            .output()
            .unwrap();
        prop_assert_eq!(out.stdout, word.into_bytes());
    }
}

#[test]
fn nul_bytes_are_rejected_by_the_quoting() {
    assert_eq!(
        shell_quote("a\0").unwrap_err().kind(),
        ErrorKind::Validation
    );
    assert_eq!(
        fold_into_shell(&Command::new("echo").cwd("x").env("V", "\0"))
            .unwrap_err()
            .kind(),
        ErrorKind::Validation
    );
}

// ---------------------------------------------------------------- tracing

/// A minimal subscriber that keeps every span's fields as text, and the fields of events inside
/// a span as `event.NAME` on that span (it tracks entered spans; single-threaded tests only).
#[derive(Default)]
struct SpanCapture(
    Mutex<Vec<(String, BTreeMap<String, String>)>>,
    Mutex<Vec<tracing::span::Id>>,
);

struct FieldText<'a>(&'a mut BTreeMap<String, String>);

impl tracing::field::Visit for FieldText<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl tracing::Subscriber for SpanCapture {
    // `sometimes` makes tracing ask `enabled` on every call instead of caching an interest that a
    // test running on another thread without this subscriber may have registered first.
    fn register_callsite(
        &self,
        _metadata: &'static tracing::Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        tracing::subscriber::Interest::sometimes()
    }
    fn enabled(&self, _metadata: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, attrs: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        let mut fields = BTreeMap::new();
        attrs.record(&mut FieldText(&mut fields));
        let mut spans = self.0.lock().unwrap();
        spans.push((attrs.metadata().name().to_owned(), fields));
        tracing::span::Id::from_u64(spans.len() as u64)
    }
    fn record(&self, span: &tracing::span::Id, values: &tracing::span::Record<'_>) {
        let mut spans = self.0.lock().unwrap();
        if let Some((_, fields)) = spans.get_mut(span.into_u64() as usize - 1) {
            values.record(&mut FieldText(fields));
        }
    }
    fn record_follows_from(&self, _span: &tracing::span::Id, _follows: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let Some(current) = self.1.lock().unwrap().last().cloned() else {
            return;
        };
        let mut fields = BTreeMap::new();
        event.record(&mut FieldText(&mut fields));
        let mut spans = self.0.lock().unwrap();
        if let Some((_, span_fields)) = spans.get_mut(current.into_u64() as usize - 1) {
            for (k, v) in fields {
                span_fields.insert(format!("event.{k}"), v);
            }
        }
    }
    fn enter(&self, span: &tracing::span::Id) {
        self.1.lock().unwrap().push(span.clone());
    }
    fn exit(&self, _span: &tracing::span::Id) {
        self.1.lock().unwrap().pop();
    }
}

#[tokio::test]
async fn spans_carry_provider_operation_sandbox_and_attempt() {
    let capture = Arc::new(SpanCapture::default());
    let _guard = tracing::subscriber::set_default(capture.clone());
    let state = State::new("fake", all_native());
    let client = Client::builder(FakeProvider::dyn_new(&state))
        .retry(test_policy())
        .build();
    state.fail([transport()]);
    let sandbox = client.connect("sb-7").await.unwrap();
    sandbox.info().await.unwrap();
    let spans: Vec<BTreeMap<String, String>> = capture
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|(name, _)| name == "sandbox")
        .map(|(_, fields)| fields.clone())
        .collect();
    let field = |i: usize, k: &str| spans[i].get(k).cloned().unwrap_or_default();
    assert_eq!(spans.len(), 2, "{spans:?}");
    assert_eq!(
        [
            field(0, "provider"),
            field(0, "operation"),
            field(0, "sandbox_id"),
            field(0, "event.attempt")
        ],
        ["fake", "connect", "sb-7", "2"]
    );
    assert_eq!(
        [
            field(1, "provider"),
            field(1, "operation"),
            field(1, "sandbox_id"),
            field(1, "event.attempt")
        ],
        ["fake", "info", "sb-7", ""]
    );
    drop(sandbox);
    client.create(&CreateSpec::new()).await.unwrap();
    let spans = capture.0.lock().unwrap();
    let (_, created) = spans.last().unwrap();
    assert_eq!(created["operation"], "create");
    assert_eq!(created["sandbox_id"], "fake-1");
}
