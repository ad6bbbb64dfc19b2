//! Emulation of what a provider lacks, driven by its [`Capabilities`]:
//!
//! - **cwd/env** (`flags.per_command_env_cwd == false`): a command with a cwd or env is sent as
//!   `["sh", "-c", "cd -- 'CWD' && export K='V' && exec 'prog' 'arg'..."]` (see
//!   [`shell_script`](crate::shell::shell_script)); the quoting passes any string but NUL byte for byte.
//!   [`fold_env_cwd`] is that folding; an adapter whose flag is `false` calls it too, so a
//!   command sent to the adapter directly keeps its env and cwd (and is folded the same way).
//! - **exit codes** (`flags.exit_code_native == false`): the script first makes a random key
//!   in the sandbox and prints it as the first line of stdout ([`KEY_PROLOGUE`]), runs the
//!   command, then prints a marker with the key and `$?`; [`ExitMarker`] reads the key, strips
//!   every marker from the stream (also when split across chunks; [`MarkScanner`] is the one
//!   scanner for such mark lines) and the exit event becomes `ExitStatus { emulated: true, .. }`
//!   with the last marker's code. The key is in no argv or environment, so a program the
//!   command runs cannot read it from `/proc` and print a marker of its own (see
//!   [`KeyedMarks`] for what still can). If the process dies before printing the marker, or the
//!   sandbox could not make a key (no `od` or `/dev/urandom`: the script then says so on the
//!   first line, [`NO_KEY`], so nothing the command prints can announce a key instead), the
//!   provider's own exit status is passed on unchanged.
//! - **files** (`files_upload == Unsupported`): every file operation but `watch` runs over exec
//!   through [`files::FilesOverExec`] (POSIX `sh` scripts: `base64`, `dd`, `stat -c`, `find`),
//!   moving at most [`CHUNK`] raw bytes per exec; results are marked ([`Transfer::emulated`],
//!   [`Download::emulated`]) and `capabilities()` reports `files_upload: Emulated`. The sandbox
//!   needs `sh`, coreutils or busybox. Adapters whose provider has exec but no file API use
//!   [`files::FilesOverExec`] directly with their own [`files::ScriptRunner`] and chunk sizes.
//! - **usage** (`usage == Unsupported`): [`Provider::usage`] is [estimated](crate::fleet::estimate)
//!   from the sandbox's listing (creation and update times, state, CPUs and memory) and the
//!   price table ([`PriceTable::builtin`] unless [`EmulateProvider::with_prices`] says
//!   otherwise), marked `estimated`; `capabilities()` reports `usage: Emulated`. Nothing is sent.

use crate::access::{PreviewLink, SshAccess};
use crate::capability::{Capabilities, Level};
use crate::code::{CodeContext, CodeRun, ContextSpec, RunCode};
use crate::error::Result;
use crate::exec::{Command, EventStream, ExitStatus, Process, ProcessEvent, ProcessInfo};
use crate::files::{Download, FileInfo, ListOptions, Transfer, UploadBody};
use crate::fleet::{PrepareSpec, Prepared, PriceTable, Usage};
use crate::lifecycle::{CreateSpec, ListFilter, Metrics, SandboxInfo, SnapshotInfo};
use crate::provider::{FileEventStream, Provider, Sandbox, SandboxStream};
use crate::shell::{build_script, fold_into_shell, shell_quote};
use async_trait::async_trait;
use bytes::Bytes;
use futures::{StreamExt, stream};
use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

mod mark;

pub use mark::{
    ExitMarker, KEY_HEX, KEY_PREFIX, KEY_PROLOGUE, KeyedEnd, KeyedMarks, MARK_PREFIX, MarkScanner,
    NO_KEY, ValueRule,
};

/// Raw bytes moved per exec by emulated file transfers (base64 makes 64 KiB of it).
pub const CHUNK: usize = 48 * 1024;

fn emulated_caps(mut caps: Capabilities) -> Capabilities {
    if caps.files_upload == Level::Unsupported {
        caps.files_upload = Level::Emulated;
    }
    if caps.usage == Level::Unsupported {
        caps.usage = Level::Emulated;
    }
    caps
}

fn strip_marker(events: EventStream, marker: ExitMarker) -> EventStream {
    stream::unfold(Some((events, marker)), |state| async move {
        let (mut events, mut marker) = state?;
        loop {
            match events.next().await {
                Some(Ok(ProcessEvent::Stdout(chunk))) => {
                    let out = marker.push(&chunk);
                    if !out.is_empty() {
                        return Some((vec![Ok(ProcessEvent::Stdout(out))], Some((events, marker))));
                    }
                }
                Some(Ok(ProcessEvent::Exit(status))) => {
                    let (rest, code) = marker.finish();
                    let mut batch = Vec::new();
                    if !rest.is_empty() {
                        batch.push(Ok(ProcessEvent::Stdout(rest)));
                    }
                    let status = match code {
                        Some(code) => ExitStatus {
                            code: Some(code),
                            signal: None,
                            emulated: true,
                        },
                        None => status,
                    };
                    batch.push(Ok(ProcessEvent::Exit(status)));
                    return Some((batch, None));
                }
                Some(other) => return Some((vec![other], Some((events, marker)))),
                None => {
                    let (rest, _) = marker.finish();
                    if rest.is_empty() {
                        return None;
                    }
                    return Some((vec![Ok(ProcessEvent::Stdout(rest))], None));
                }
            }
        }
    })
    .flat_map(stream::iter)
    .boxed()
}

/// `command` as a provider without per-command env and cwd (`flags.per_command_env_cwd ==
/// false`) must run it: unchanged when it has neither, else with both folded into `sh -c` by
/// [`fold_into_shell`].
///
/// This is the one folding. Core's emulation ([`EmulateSandbox`], which the client layer puts
/// around every provider) applies it before the adapter is called; an adapter whose flag is
/// `false` applies it again at the top of its own exec, so that a command reaching the adapter
/// directly (without the client layer) keeps its env and cwd. A command folded already has
/// neither and passes unchanged, so nothing is folded twice and both paths send the same
/// request.
pub fn fold_env_cwd(command: &Command) -> Result<Cow<'_, Command>> {
    if command.cwd.is_none() && command.env.is_empty() {
        return Ok(Cow::Borrowed(command));
    }
    fold_into_shell(command).map(Cow::Owned)
}

/// Runs `command` on `inner`, folding cwd/env and adding an exit marker as its flags require.
async fn exec_on(inner: &dyn Sandbox, command: &Command) -> Result<Process> {
    let flags = inner.capabilities().flags;
    let fold = !flags.per_command_env_cwd && (command.cwd.is_some() || !command.env.is_empty());
    if flags.exit_code_native {
        if flags.per_command_env_cwd {
            return inner.exec(command).await;
        }
        let sent = fold_env_cwd(command)?;
        return inner.exec(&sent).await;
    }
    let mut sent = command.clone();
    if fold {
        // The env values now travel inside the script: keep them out of Debug and describe().
        sent.secret_args |= !command.env.is_empty();
        sent.cwd = None;
        sent.env.clear();
    }
    let marker = ExitMarker::new();
    let script = marker.wrap(&build_script(command, fold, false)?);
    sent.argv = vec!["sh".into(), "-c".into(), script];
    let process = inner.exec(&sent).await?;
    Ok(process.map_events(|events| strip_marker(events, marker)))
}

/// A provider whose sandboxes emulate what the provider lacks (see the module docs).
#[derive(Debug, Clone)]
pub struct EmulateProvider {
    inner: Arc<dyn Provider>,
    prices: Arc<PriceTable>,
}

impl EmulateProvider {
    /// Wraps `inner`; usage estimates use the shipped price table.
    pub fn new(inner: Arc<dyn Provider>) -> Self {
        EmulateProvider {
            inner,
            prices: Arc::new(PriceTable::builtin()),
        }
    }

    /// Prices usage estimates with `prices` instead of the shipped table.
    pub fn with_prices(mut self, prices: Arc<PriceTable>) -> Self {
        self.prices = prices;
        self
    }
}

#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl Provider for EmulateProvider {
    fn wrapped(&self) -> Option<&dyn Provider> {
        Some(self.inner.as_ref())
    }

    fn name(&self) -> &str {
        self.inner.name()
    }
    fn capabilities(&self) -> Capabilities {
        emulated_caps(self.inner.capabilities())
    }
    async fn create(&self, spec: &CreateSpec) -> Result<Box<dyn Sandbox>> {
        Ok(Box::new(EmulateSandbox::new(
            self.inner.create(spec).await?,
        )))
    }
    async fn connect(&self, id: &str) -> Result<Box<dyn Sandbox>> {
        Ok(Box::new(EmulateSandbox::new(self.inner.connect(id).await?)))
    }
    fn list(&self, filter: &ListFilter) -> SandboxStream<'_> {
        self.inner.list(filter)
    }
    async fn destroy(&self, id: &str) -> Result<()> {
        self.inner.destroy(id).await
    }
    async fn find_by_idempotency_key(&self, key: &str) -> Result<Option<SandboxInfo>> {
        self.inner.find_by_idempotency_key(key).await
    }
    async fn usage(&self, sandbox: &SandboxInfo, to: std::time::SystemTime) -> Result<Usage> {
        if self.inner.capabilities().usage.is_available() {
            return self.inner.usage(sandbox, to).await;
        }
        let prices = self.prices.get(self.inner.name());
        Ok(crate::fleet::estimate(sandbox, to, prices))
    }
    async fn prepare(&self, spec: &PrepareSpec) -> Result<Prepared> {
        self.inner.prepare(spec).await
    }
}

/// A sandbox that emulates what its provider lacks (see the module docs).
#[derive(Debug, Clone)]
pub struct EmulateSandbox {
    inner: Arc<dyn Sandbox>,
}

impl EmulateSandbox {
    /// Wraps `inner`.
    pub fn new(inner: Box<dyn Sandbox>) -> Self {
        EmulateSandbox {
            inner: Arc::from(inner),
        }
    }

    fn native_files(&self) -> bool {
        self.inner.capabilities().files_upload.is_available()
    }

    fn files(&self) -> files::FilesOverExec<SandboxScripts> {
        files::FilesOverExec::new(SandboxScripts {
            inner: self.inner.clone(),
        })
    }
}

/// Runs the file scripts through a wrapped sandbox's exec (cwd/env folded and exit markers
/// added as its flags require). Stdin travels inside the script (`printf '%s' DATA | sh -c …`),
/// since not every provider takes stdin; a [`CHUNK`] of base64 keeps it well under the kernel's
/// limit on one argument (128 KiB).
struct SandboxScripts {
    inner: Arc<dyn Sandbox>,
}

#[async_trait]
impl files::ScriptRunner for SandboxScripts {
    fn provider(&self) -> &str {
        self.inner.provider()
    }

    fn sandbox_id(&self) -> &str {
        self.inner.id()
    }

    async fn run(
        &self,
        _operation: &str,
        script: &str,
        args: &[&str],
        stdin: Option<String>,
    ) -> Result<files::ScriptOutput> {
        let command = match stdin {
            None => {
                let mut command = Command::new("sh").arg("-c").arg(script).arg("sh");
                for arg in args {
                    command = command.arg(*arg);
                }
                command
            }
            Some(data) => {
                let mut line = format!(
                    "printf '%s' {} | sh -c {} sh",
                    shell_quote(&data)?,
                    shell_quote(script)?
                );
                for arg in args {
                    line.push(' ');
                    line.push_str(&shell_quote(arg)?);
                }
                Command::shell(line)
            }
        };
        let output = exec_on(&*self.inner, &command).await?.output().await?;
        Ok(files::ScriptOutput {
            output,
            request_id: None,
        })
    }
}

#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl Sandbox for EmulateSandbox {
    fn wrapped(&self) -> Option<&dyn Sandbox> {
        Some(self.inner.as_ref())
    }

    fn id(&self) -> &str {
        self.inner.id()
    }
    fn provider(&self) -> &str {
        self.inner.provider()
    }
    fn capabilities(&self) -> Capabilities {
        emulated_caps(self.inner.capabilities())
    }
    async fn info(&self) -> Result<SandboxInfo> {
        self.inner.info().await
    }
    async fn exec(&self, command: &Command) -> Result<Process> {
        exec_on(&*self.inner, command).await
    }
    async fn processes(&self) -> Result<Vec<ProcessInfo>> {
        self.inner.processes().await
    }
    async fn attach(&self, pid: &str) -> Result<Process> {
        self.inner.attach(pid).await
    }
    async fn kill_process(&self, pid: &str) -> Result<()> {
        self.inner.kill_process(pid).await
    }
    async fn upload(&self, path: &str, body: UploadBody) -> Result<Transfer> {
        if self.native_files() {
            return self.inner.upload(path, body).await;
        }
        self.files().upload(path, body).await
    }
    async fn write_file(&self, path: &str, data: Bytes) -> Result<Transfer> {
        if self.native_files() {
            return self.inner.write_file(path, data).await;
        }
        self.files().write_file(path, data).await
    }
    async fn download(&self, path: &str) -> Result<Download> {
        if self.native_files() {
            return self.inner.download(path).await;
        }
        self.files().download(path).await
    }
    async fn list_files(&self, path: &str, options: ListOptions) -> Result<Vec<FileInfo>> {
        if self.native_files() {
            return self.inner.list_files(path, options).await;
        }
        self.files().list(path, options).await
    }
    async fn stat(&self, path: &str) -> Result<FileInfo> {
        if self.native_files() {
            return self.inner.stat(path).await;
        }
        self.files().stat(path).await
    }
    async fn mkdir(&self, path: &str) -> Result<()> {
        if self.native_files() {
            return self.inner.mkdir(path).await;
        }
        self.files().mkdir(path).await
    }
    async fn remove(&self, path: &str) -> Result<()> {
        if self.native_files() {
            return self.inner.remove(path).await;
        }
        self.files().remove(path).await
    }
    async fn rename(&self, from: &str, to: &str) -> Result<()> {
        if self.native_files() {
            return self.inner.rename(from, to).await;
        }
        self.files().rename(from, to).await
    }
    async fn watch(&self, path: &str, recursive: bool) -> Result<FileEventStream> {
        self.inner.watch(path, recursive).await
    }
    async fn stop(&self) -> Result<()> {
        self.inner.stop().await
    }
    async fn pause(&self) -> Result<()> {
        self.inner.pause().await
    }
    async fn resume(&self) -> Result<()> {
        self.inner.resume().await
    }
    async fn destroy(&self) -> Result<()> {
        self.inner.destroy().await
    }
    async fn set_timeout(&self, timeout: Duration) -> Result<()> {
        self.inner.set_timeout(timeout).await
    }
    async fn preview_link(&self, port: u16) -> Result<PreviewLink> {
        self.inner.preview_link(port).await
    }
    async fn ssh_access(&self, ttl: Duration) -> Result<SshAccess> {
        self.inner.ssh_access(ttl).await
    }
    async fn fork(&self) -> Result<Box<dyn Sandbox>> {
        Ok(Box::new(EmulateSandbox::new(self.inner.fork().await?)))
    }
    async fn snapshot(&self, name: Option<&str>) -> Result<SnapshotInfo> {
        self.inner.snapshot(name).await
    }
    async fn metrics(&self) -> Result<Metrics> {
        self.inner.metrics().await
    }
    async fn create_code_context(&self, spec: &ContextSpec) -> Result<CodeContext> {
        self.inner.create_code_context(spec).await
    }
    async fn list_code_contexts(&self) -> Result<Vec<CodeContext>> {
        self.inner.list_code_contexts().await
    }
    async fn restart_code_context(&self, id: &str) -> Result<()> {
        self.inner.restart_code_context(id).await
    }
    async fn remove_code_context(&self, id: &str) -> Result<()> {
        self.inner.remove_code_context(id).await
    }
    async fn run_code(&self, request: &RunCode) -> Result<CodeRun> {
        self.inner.run_code(request).await
    }
}

/// Files over exec, for any provider that can run `sh -c SCRIPT sh ARGS…` (Fly's `/exec`, or a
/// wrapped [`Sandbox`] through [`EmulateSandbox`]): the adapter supplies a [`ScriptRunner`](files::ScriptRunner),
/// [`FilesOverExec`](files::FilesOverExec) does the rest with the POSIX `sh` scripts below.
///
/// Every path and value reaches a script as a positional argument, never spliced into its
/// text. The scripts use only POSIX tools plus `base64`, `dd`, `stat -c` and
/// `find -mindepth/-maxdepth`, which both GNU coreutils and BusyBox provide. Uploads go through
/// the script's stdin as base64 in chunks, into a partial file beside the target that the last
/// chunk renames into place; downloads come back as base64 one block per call, each made only
/// when the caller polls for more, so any size moves in constant memory. Listings travel as
/// NUL-terminated records in base64, so a file name holding a newline cannot forge entries.
///
/// Exit statuses the scripts use: [`EXIT_MISSING`](files::EXIT_MISSING), [`EXIT_WRONG_KIND`](files::EXIT_WRONG_KIND), [`EXIT_PART_LOST`](files::EXIT_PART_LOST);
/// [`script_error`](files::script_error) turns them (and [`EXIT_TAKEN`](files::EXIT_TAKEN), for adapters' own scripts) into error kinds.
pub mod files {
    use crate::error::{Error, ErrorKind, Result};
    use crate::exec::Output;
    use crate::files::{
        Download, FileInfo, FileKind, ListOptions, Transfer, UploadBody, validate_path,
    };
    use async_trait::async_trait;
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD as BASE64;
    use bytes::{BufMut, Bytes, BytesMut};
    use futures::StreamExt;
    use std::sync::Arc;
    use std::time::{Duration, SystemTime};
    use tokio::io::AsyncReadExt;

    /// Exit status for "no such file, directory or process".
    pub const EXIT_MISSING: i32 = 44;
    /// Exit status for "wrong file type" (a directory where a file belongs, or the reverse).
    pub const EXIT_WRONG_KIND: i32 = 45;
    /// Exit status of an upload chunk whose partial file vanished.
    pub const EXIT_PART_LOST: i32 = 46;
    /// Exit status for "that name is taken" (adapters' own scripts: a process id in use).
    pub const EXIT_TAKEN: i32 = 47;

    /// `sh -c STAT sh PATH`: `HEXMODE SIZE MTIME`.
    pub const STAT: &str = r#"[ -e "$1" ] || [ -L "$1" ] || { echo "no such file or directory" >&2; exit 44; }
stat -c '%f %s %Y' "$1"
"#;

    /// `sh -c LIST sh DIR DEPTH`: for each batch of entries `find` hands over, one block of
    /// base64 followed by a `.` line; decoded, a block is `HEXMODE SIZE MTIME PATH` records,
    /// each ended by a NUL. A file name may hold any byte but NUL, so records are
    /// NUL-terminated and the bytes travel as base64, never as lines of text. `stat -c … %n`
    /// has no NUL terminator in BusyBox, so the names of a batch without a newline go through
    /// one `stat` whose line ends become NULs (`tr`), and the rare name with a newline gets a
    /// `stat` of its own without `%n`, its name printed by the shell. `find`'s own failure (an
    /// unreadable directory) stays the script's exit status.
    pub const LIST: &str = r#"[ -e "$1" ] || { echo "no such file or directory" >&2; exit 44; }
[ -d "$1" ] || { echo "not a directory" >&2; exit 45; }
find "$1" -mindepth 1 -maxdepth "$2" -exec sh -c '
nl="
"
{
  n=$#
  while [ "$n" -gt 0 ]; do
    f=$1; shift; n=$((n-1))
    case $f in
      *"$nl"*) s=$(stat -c "%f %s %Y" -- "$f") && printf "%s %s\0" "$s" "$f" ;;
      *) set -- "$@" "$f" ;;
    esac
  done
  [ "$#" = 0 ] || stat -c "%f %s %Y %n" -- "$@" | tr "\n" "\0"
} | base64
echo .' sh {} +
"#;

    /// `sh -c MKDIR sh PATH`.
    pub const MKDIR: &str = r#"mkdir -p "$1""#;

    /// `sh -c REMOVE sh PATH`.
    pub const REMOVE: &str = r#"[ -e "$1" ] || [ -L "$1" ] || { echo "no such file or directory" >&2; exit 44; }
rm -rf "$1"
"#;

    /// `sh -c RENAME sh FROM TO`.
    pub const RENAME: &str = r#"[ -e "$1" ] || [ -L "$1" ] || { echo "no such file or directory" >&2; exit 44; }
mv -f "$1" "$2"
"#;

    /// `sh -c UPLOAD sh PART FINAL FIRST LAST` with base64 on stdin: the first chunk creates
    /// the parent directories and the partial file, later chunks append, the last renames it
    /// into place.
    pub const UPLOAD: &str = r#"t=$1 f=$2
if [ "$3" = 1 ]; then
  [ -d "$f" ] && { echo "is a directory" >&2; exit 45; }
  mkdir -p "$(dirname "$f")" && base64 -d >"$t" || exit 1
else
  [ -f "$t" ] || { echo "partial upload file vanished" >&2; exit 46; }
  base64 -d >>"$t" || exit 1
fi
if [ "$4" = 1 ]; then mv -f "$t" "$f" || exit 1; fi
exit 0
"#;

    /// `sh -c DOWNLOAD sh PATH BLOCK INDEX`: block INDEX of size BLOCK in base64.
    pub const DOWNLOAD: &str = r#"dd if="$1" bs="$2" skip="$3" count=1 2>/dev/null | base64"#;

    /// `sh -c CLEANUP sh PART`: removes a partial upload after a failure.
    pub const CLEANUP: &str = r#"rm -f "$1""#;

    /// What one script printed, and the request id of the call that ran it, if any.
    #[derive(Debug, Clone)]
    pub struct ScriptOutput {
        /// Stdout, stderr and exit status.
        pub output: Output,
        /// The provider's request id, for error reports.
        pub request_id: Option<String>,
    }

    /// Runs one script in a sandbox: `sh -c SCRIPT sh ARGS…` with `stdin` (text; base64 for
    /// uploads) on its standard input. Nonzero exit statuses are answers, not errors.
    #[async_trait]
    pub trait ScriptRunner: Send + Sync {
        /// The provider's name, for error context.
        fn provider(&self) -> &str;
        /// The sandbox's id, for error context.
        fn sandbox_id(&self) -> &str;
        /// Runs `script` for `operation` (`upload`, `download`, `stat`, `list_files`, …).
        async fn run(
            &self,
            operation: &str,
            script: &str,
            args: &[&str],
            stdin: Option<String>,
        ) -> Result<ScriptOutput>;
    }

    /// A script's failure as an error: [`EXIT_MISSING`] is `NotFound`, [`EXIT_WRONG_KIND`]
    /// `Validation`, [`EXIT_TAKEN`] `Conflict`, permission problems `Unauthorized`, anything
    /// else `Provider`; the message names `what` and carries the script's stderr.
    pub fn script_error(
        out: &ScriptOutput,
        provider: &str,
        operation: &str,
        sandbox_id: &str,
        what: &str,
    ) -> Error {
        let stderr = String::from_utf8_lossy(&out.output.stderr);
        let stderr = stderr.trim();
        let code = out.output.status.code.unwrap_or(0);
        let kind = match code {
            EXIT_MISSING => ErrorKind::NotFound,
            EXIT_WRONG_KIND => ErrorKind::Validation,
            EXIT_TAKEN => ErrorKind::Conflict,
            _ if stderr.contains("No such file") => ErrorKind::NotFound,
            _ if stderr.contains("Permission denied") || stderr.contains("Read-only") => {
                ErrorKind::Unauthorized
            }
            _ if stderr.contains("Not a directory") || stderr.contains("Is a directory") => {
                ErrorKind::Validation
            }
            _ if stderr.contains("File exists") => ErrorKind::Conflict,
            _ => ErrorKind::Provider,
        };
        let detail = if stderr.is_empty() {
            match out.output.status.signal {
                Some(signal) => format!("signal {signal}"),
                None => format!("exit code {code}"),
            }
        } else {
            stderr.chars().take(300).collect()
        };
        let error = Error::new(kind, format!("{what}: {detail}"))
            .with_provider(provider)
            .with_operation(operation)
            .with_sandbox_id(sandbox_id);
        match &out.request_id {
            Some(id) => error.with_request_id(id.clone()),
            None => error,
        }
    }

    /// A path as passed to the scripts: checked, without a trailing `/`, and one starting with
    /// `-` gets `./` so no tool takes it for an option.
    pub fn arg_path(path: &str) -> Result<String> {
        validate_path(path)?;
        let trimmed = if path.len() > 1 {
            path.trim_end_matches('/')
        } else {
            path
        };
        let trimmed = if trimmed.is_empty() { "/" } else { trimmed };
        Ok(if trimmed.starts_with('-') {
            format!("./{trimmed}")
        } else {
            trimmed.to_owned()
        })
    }

    /// Parses [`STAT`]'s `HEXMODE SIZE MTIME [PATH]` (the path from the line when it has one,
    /// else `path`).
    pub fn parse_stat_line(line: &str, path: &str) -> Option<FileInfo> {
        let mut parts = line.splitn(4, ' ');
        let mode = u32::from_str_radix(parts.next()?.trim(), 16).ok()?;
        let size = parts.next()?.trim().parse().ok()?;
        let mtime: u64 = parts.next()?.trim().parse().ok()?;
        let path = parts
            .next()
            .map(str::to_owned)
            .unwrap_or_else(|| path.to_owned());
        let kind = match mode & 0o170000 {
            0o100000 => FileKind::File,
            0o040000 => FileKind::Dir,
            0o120000 => FileKind::Symlink,
            _ => FileKind::Other,
        };
        let name = path
            .trim_end_matches('/')
            .rsplit('/')
            .next()
            .filter(|n| !n.is_empty())
            .unwrap_or("/")
            .to_owned();
        Some(FileInfo {
            path,
            name,
            kind,
            size,
            mode: Some(mode & 0o7777),
            // Checked: the line comes from the sandbox, and `SystemTime + Duration` panics on
            // overflow.
            modified: SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(mtime)),
        })
    }

    /// Parses [`LIST`]'s answer: blocks of base64 each ended by a `.` line, decoding to
    /// NUL-terminated `HEXMODE SIZE MTIME PATH` records (bytes that are not UTF-8 are
    /// replaced). Sorted by path; `None` when a block is not base64 or the answer was cut short.
    pub fn parse_list(text: &str) -> Option<Vec<FileInfo>> {
        let mut entries = Vec::new();
        let mut block = String::new();
        for line in text.lines() {
            let line = line.trim();
            if line != "." {
                block.push_str(line);
                continue;
            }
            let bytes = BASE64.decode(std::mem::take(&mut block)).ok()?;
            for record in bytes.split(|b| *b == 0).filter(|r| !r.is_empty()) {
                let record = String::from_utf8_lossy(record);
                // A record the tools printed oddly is left out; it cannot become others.
                if let Some(info) = parse_stat_line(&record, "") {
                    entries.push(info);
                }
            }
        }
        if !block.is_empty() {
            return None;
        }
        entries.sort_by(|a, b| a.path.cmp(&b.path));
        Some(entries)
    }

    /// Files over exec through one [`ScriptRunner`] (see the module docs). Cheap to clone.
    pub struct FilesOverExec<R> {
        runner: Arc<R>,
        upload_chunk: usize,
        download_chunk: u64,
        part_suffix: String,
    }

    impl<R> Clone for FilesOverExec<R> {
        fn clone(&self) -> Self {
            FilesOverExec {
                runner: self.runner.clone(),
                upload_chunk: self.upload_chunk,
                download_chunk: self.download_chunk,
                part_suffix: self.part_suffix.clone(),
            }
        }
    }

    impl<R: ScriptRunner + 'static> FilesOverExec<R> {
        /// Files through `runner`, [`super::CHUNK`] raw bytes per call each way.
        pub fn new(runner: R) -> Self {
            FilesOverExec {
                runner: Arc::new(runner),
                upload_chunk: super::CHUNK,
                download_chunk: super::CHUNK as u64,
                part_suffix: ".sandbox-upload".to_owned(),
            }
        }

        /// Raw bytes per call: `upload` per upload chunk (sent as base64 on stdin), `download`
        /// per download block (answered as base64); each at least 3. A provider that counts
        /// every exec against a rate limit moves as many bytes per call as its limits allow.
        pub fn chunks(mut self, upload: usize, download: u64) -> Self {
            self.upload_chunk = upload.max(3);
            self.download_chunk = download.max(3);
            self
        }

        /// The suffix of the partial file an upload writes beside its target (default
        /// `.sandbox-upload`).
        pub fn part_suffix(mut self, suffix: impl Into<String>) -> Self {
            self.part_suffix = suffix.into();
            self
        }

        fn context(&self, error: Error, operation: &str) -> Error {
            error.or_context(
                self.runner.provider(),
                operation,
                Some(self.runner.sandbox_id()),
            )
        }

        /// Runs `script` and fails unless it exits 0.
        async fn checked(
            &self,
            operation: &str,
            script: &str,
            args: &[&str],
            stdin: Option<String>,
            what: &str,
        ) -> Result<ScriptOutput> {
            let out = self.runner.run(operation, script, args, stdin).await?;
            if out.output.status.success() {
                Ok(out)
            } else {
                Err(script_error(
                    &out,
                    self.runner.provider(),
                    operation,
                    self.runner.sandbox_id(),
                    what,
                ))
            }
        }

        /// Reads up to `size` bytes (fewer only at the end of the body).
        async fn read_chunk(&self, body: &mut UploadBody, size: usize) -> Result<Bytes> {
            let mut buf = BytesMut::with_capacity(size);
            while buf.len() < size {
                let left = size - buf.len();
                let mut room = (&mut buf).limit(left);
                let n = body
                    .read_buf(&mut room)
                    .await
                    .map_err(|e| self.context(Error::from(e), "upload"))?;
                if n == 0 {
                    break;
                }
            }
            Ok(buf.freeze())
        }

        /// Streams `body` to `path`: parents created, written to a partial file beside it,
        /// renamed into place after the last chunk. Holds at most two chunks in memory (the one
        /// being sent and the next, read ahead to know which chunk is last). On failure the
        /// partial file is removed.
        pub async fn upload(&self, path: &str, mut body: UploadBody) -> Result<Transfer> {
            let target = arg_path(path).map_err(|e| self.context(e, "upload"))?;
            // A fixed name beside the target (same filesystem, so the final rename is atomic);
            // two concurrent uploads to one path are as racy as two concurrent writes anyway.
            let part = format!("{target}{}", self.part_suffix);
            let chunk = self.upload_chunk;
            let mut current = self.read_chunk(&mut body, chunk).await?;
            let mut first = true;
            let mut total = 0u64;
            loop {
                let next = if current.len() < chunk {
                    Bytes::new()
                } else {
                    match self.read_chunk(&mut body, chunk).await {
                        Ok(next) => next,
                        Err(e) => {
                            // The caller's body failed after chunks were sent: no partial file.
                            if !first {
                                self.remove_part(&part).await;
                            }
                            return Err(e);
                        }
                    }
                };
                let last = next.is_empty();
                let args = [
                    part.as_str(),
                    target.as_str(),
                    if first { "1" } else { "0" },
                    if last { "1" } else { "0" },
                ];
                let sent = self
                    .checked(
                        "upload",
                        UPLOAD,
                        &args,
                        Some(BASE64.encode(&current)),
                        &format!("writing {path}"),
                    )
                    .await;
                if let Err(e) = sent {
                    // Even a failed first call may have created the partial file (a lost
                    // answer, a failed rename); `rm -f` of a missing file is harmless.
                    self.remove_part(&part).await;
                    return Err(e);
                }
                total += current.len() as u64;
                first = false;
                if last {
                    return Ok(Transfer {
                        bytes: total,
                        emulated: true,
                    });
                }
                current = next;
            }
        }

        /// Best effort removal of a partial file after a failure (the failure is what gets
        /// reported).
        pub async fn remove_part(&self, part: &str) {
            if let Err(e) = self.runner.run("upload", CLEANUP, &[part], None).await {
                tracing::debug!(error = %e, "could not remove a partial upload");
            }
        }

        /// Uploads a buffer.
        pub async fn write_file(&self, path: &str, data: Bytes) -> Result<Transfer> {
            let reader: UploadBody = Box::pin(std::io::Cursor::new(data));
            self.upload(path, reader).await
        }

        /// Stats `path` (a symlink itself, not its target).
        pub async fn stat(&self, path: &str) -> Result<FileInfo> {
            let p = arg_path(path).map_err(|e| self.context(e, "stat"))?;
            let out = self.checked("stat", STAT, &[&p], None, path).await?;
            let text = String::from_utf8_lossy(&out.output.stdout);
            let mut info = parse_stat_line(text.trim(), path).ok_or_else(|| {
                self.context(
                    Error::new(
                        ErrorKind::Provider,
                        format!("unreadable stat answer for {path}"),
                    ),
                    "stat",
                )
            })?;
            info.path = path.to_owned();
            Ok(info)
        }

        /// Lists the directory `path` down to `options.depth`, sorted by path.
        pub async fn list(&self, path: &str, options: ListOptions) -> Result<Vec<FileInfo>> {
            let p = arg_path(path).map_err(|e| self.context(e, "list_files"))?;
            let depth = options.depth.max(1).to_string();
            let out = self
                .checked("list_files", LIST, &[&p, &depth], None, path)
                .await?;
            parse_list(&String::from_utf8_lossy(&out.output.stdout)).ok_or_else(|| {
                self.context(
                    Error::new(ErrorKind::Provider, format!("unreadable listing of {path}")),
                    "list_files",
                )
            })
        }

        async fn simple(&self, operation: &str, script: &str, paths: &[&str]) -> Result<()> {
            let args: Vec<String> = paths
                .iter()
                .map(|p| arg_path(p))
                .collect::<Result<_>>()
                .map_err(|e| self.context(e, operation))?;
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            self.checked(operation, script, &refs, None, &paths.join(" -> "))
                .await
                .map(drop)
        }

        /// `mkdir -p`.
        pub async fn mkdir(&self, path: &str) -> Result<()> {
            self.simple("mkdir", MKDIR, &[path]).await
        }

        /// Removes a file or a directory tree; a missing path is `NotFound`.
        pub async fn remove(&self, path: &str) -> Result<()> {
            self.simple("remove", REMOVE, &[path]).await
        }

        /// Moves `from` to `to`, replacing a file there; a missing `from` is `NotFound`.
        pub async fn rename(&self, from: &str, to: &str) -> Result<()> {
            self.simple("rename", RENAME, &[from, to]).await
        }

        /// Streams the file at `path` in blocks of the download chunk, one call per block, each
        /// made only when the caller polls for more. A missing path is `NotFound` at once; a
        /// directory is `Validation`; a file that comes back shorter than its size was is an
        /// error, never a truncated file handed out as complete.
        pub async fn download(&self, path: &str) -> Result<Download> {
            let info = self.stat(path).await?;
            if info.kind == FileKind::Dir {
                return Err(self.context(
                    Error::validation(format!("{path} is a directory, not a file")),
                    "download",
                ));
            }
            let p = arg_path(path)?;
            let size = info.size;
            let block = self.download_chunk;
            let files = self.clone();
            let path = path.to_owned();
            let stream = futures::stream::try_unfold((0u64, false), move |(index, done)| {
                let (files, p, path) = (files.clone(), p.clone(), path.clone());
                async move {
                    if done || index * block >= size.max(1) && index > 0 {
                        return Ok(None);
                    }
                    let args = [p.as_str(), &block.to_string(), &index.to_string()];
                    let out = files
                        .checked("download", DOWNLOAD, &args, None, &path)
                        .await?;
                    let text: Vec<u8> = out
                        .output
                        .stdout
                        .iter()
                        .copied()
                        .filter(|b| !b.is_ascii_whitespace())
                        .collect();
                    let chunk = BASE64.decode(text).map_err(|_| {
                        files.context(
                            Error::new(
                                ErrorKind::Provider,
                                format!("unreadable base64 while reading {path}"),
                            ),
                            "download",
                        )
                    })?;
                    let short = (chunk.len() as u64) < block;
                    let got = index * block + chunk.len() as u64;
                    if short && got < size {
                        // `dd` failing (unreadable file) or the file shrinking both look like
                        // an early end: report it.
                        return Err(files.context(
                            Error::new(
                                ErrorKind::Provider,
                                format!(
                                    "read {got} of {size} bytes of {path}: the file shrank or \
                                     could not be read"
                                ),
                            ),
                            "download",
                        ));
                    }
                    if chunk.is_empty() {
                        return Ok(None);
                    }
                    Ok(Some((Bytes::from(chunk), (index + 1, short))))
                }
            })
            .boxed();
            Ok(Download::emulated(stream))
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn stat_lines_parse_kind_size_mode_and_time() {
            let f = parse_stat_line("81a4 12 1700000000", "/a/b.txt").unwrap();
            assert_eq!((f.kind, f.size, f.mode), (FileKind::File, 12, Some(0o644)));
            assert_eq!(f.name, "b.txt");
            assert_eq!(
                f.modified,
                Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000))
            );
            let d = parse_stat_line("41ed 4096 1700000000 /w/dir with space", "").unwrap();
            assert_eq!(
                (d.kind, d.path.as_str()),
                (FileKind::Dir, "/w/dir with space")
            );
            assert_eq!(d.name, "dir with space");
            let l = parse_stat_line("a1ff 7 1 /w/link", "").unwrap();
            assert_eq!(l.kind, FileKind::Symlink);
            assert!(parse_stat_line("zz 1 1", "x").is_none());
            // An absurd mtime from the sandbox is no time at all, not a panic.
            let f = parse_stat_line("81a4 1 18446744073709551615", "/a").unwrap();
            assert_eq!((f.modified, f.size), (None, 1));
        }

        #[test]
        fn paths_are_checked_and_made_safe_for_tools() {
            assert_eq!(arg_path("-rf").unwrap(), "./-rf");
            assert_eq!(arg_path("/a/b/").unwrap(), "/a/b");
            assert_eq!(arg_path("/").unwrap(), "/");
            assert!(arg_path("").is_err());
            assert!(arg_path("a\0b").is_err());
        }

        #[test]
        fn listings_cut_short_or_not_base64_are_refused() {
            let record = BASE64.encode(b"81a4 2 1 /d/a\0");
            let listed = parse_list(&format!("{record}\n.\n")).unwrap();
            assert_eq!(listed.len(), 1);
            assert_eq!(listed[0].name, "a");
            assert!(parse_list(&format!("{record}\n")).is_none());
            assert!(parse_list("!!\n.\n").is_none());
        }

        fn exit(code: i32, stderr: &str) -> ScriptOutput {
            ScriptOutput {
                output: Output {
                    stdout: Bytes::new(),
                    stderr: Bytes::from(stderr.to_owned()),
                    status: crate::exec::ExitStatus::code(code),
                },
                request_id: Some("req-1".into()),
            }
        }

        #[test]
        fn script_exit_statuses_become_error_kinds() {
            let e = script_error(&exit(EXIT_MISSING, "gone"), "p", "stat", "sb", "/a");
            assert_eq!(e.kind(), ErrorKind::NotFound);
            assert_eq!(e.message(), "/a: gone");
            assert_eq!(
                (e.request_id(), e.sandbox_id(), e.operation()),
                (Some("req-1"), Some("sb"), Some("stat"))
            );
            let kind = |code, stderr| script_error(&exit(code, stderr), "p", "o", "s", "w").kind();
            assert_eq!(kind(EXIT_WRONG_KIND, ""), ErrorKind::Validation);
            assert_eq!(kind(EXIT_TAKEN, ""), ErrorKind::Conflict);
            assert_eq!(kind(1, "x: Permission denied"), ErrorKind::Unauthorized);
            assert_eq!(kind(1, "boom"), ErrorKind::Provider);
            let e = script_error(&exit(2, ""), "p", "o", "s", "w");
            assert_eq!(e.message(), "w: exit code 2");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sandbox without native exit codes: runs the argv under this host's processes and
    /// reports output in chunks of 7 bytes and an exit with no code.
    #[derive(Debug)]
    struct NoExitCodes;

    struct NoControl;

    #[async_trait]
    impl crate::exec::ProcessControl for NoControl {
        async fn kill(&self) -> Result<()> {
            Ok(())
        }
        async fn resize(&self, _size: crate::exec::PtySize) -> Result<()> {
            Ok(())
        }
    }

    #[async_trait]
    impl Sandbox for NoExitCodes {
        fn id(&self) -> &str {
            "sb"
        }
        fn provider(&self) -> &str {
            "no-exit-codes"
        }
        fn capabilities(&self) -> Capabilities {
            let mut caps = Capabilities::NONE;
            caps.flags.exit_code_native = false;
            caps
        }
        async fn info(&self) -> Result<SandboxInfo> {
            unreachable!("not used")
        }
        async fn exec(&self, command: &Command) -> Result<Process> {
            let out = std::process::Command::new(&command.argv[0])
                .args(&command.argv[1..])
                .output()
                .map_err(crate::Error::from)?;
            let mut events: Vec<Result<ProcessEvent>> = out
                .stdout
                .chunks(7)
                .map(|c| Ok(ProcessEvent::Stdout(Bytes::copy_from_slice(c))))
                .collect();
            events.push(Ok(ProcessEvent::Stderr(out.stderr.into())));
            events.push(Ok(ProcessEvent::Exit(ExitStatus {
                code: None,
                signal: None,
                emulated: false,
            })));
            Ok(Process::new(
                "1",
                stream::iter(events).boxed(),
                None,
                Arc::new(NoControl),
            ))
        }
        async fn destroy(&self) -> Result<()> {
            Ok(())
        }
    }

    /// A program the command runs looks for the exit marker's token where any process can
    /// read it (its ancestors' command lines and environments) and prints a marker with exit code
    /// 0 for each candidate, then the command fails with 3: the code reported is 3, and the
    /// forged lines are output like any other.
    #[tokio::test]
    async fn a_program_the_command_runs_cannot_forge_its_exit_code() {
        let forge = r#"p=$PPID
while [ "$p" -gt 1 ]; do
  tr '\0' '\n' < /proc/$p/cmdline; tr '\0' '\n' < /proc/$p/environ
  p=$(sed -e 's/^.*) . //' -e 's/ .*//' /proc/$p/stat)
done 2>/dev/null | grep -o '__sandbox_[a-z]*_[0-9a-f]\{16,\}[_:]*' | sort -u |
while read -r t; do printf '%s0\n' "$t"; done"#;
        let line = format!("sh -c {} ; exit 3", shell_quote(forge).unwrap());
        let sandbox = EmulateSandbox::new(Box::new(NoExitCodes));
        let process = sandbox.exec(&Command::shell(&line)).await.unwrap();
        let out = process.output().await.unwrap();
        assert_eq!(
            out.status,
            ExitStatus {
                code: Some(3),
                signal: None,
                emulated: true
            },
            "stdout: {:?}",
            String::from_utf8_lossy(&out.stdout)
        );
        // The key line and the real marker are taken out; nothing else is.
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(!stdout.contains(KEY_PREFIX), "{stdout:?}");
        // A command that prints exactly its bytes keeps them, and a code of 0 reads as 0.
        let out = sandbox
            .exec(&Command::shell("printf 'a\\nb'"))
            .await
            .unwrap()
            .output()
            .await
            .unwrap();
        assert_eq!((&out.stdout[..], out.status.code), (&b"a\nb"[..], Some(0)));
    }

    #[test]
    fn only_commands_with_env_or_cwd_are_folded() {
        let plain = Command::new("true");
        assert!(matches!(fold_env_cwd(&plain).unwrap(), Cow::Borrowed(_)));
        let cmd = Command::new("pwd").cwd("/w d").env("K", "v'\"$x");
        let folded = fold_env_cwd(&cmd).unwrap();
        assert_eq!(
            folded.argv,
            [
                "sh",
                "-c",
                "cd -- '/w d' && export K='v'\\''\"$x' && exec 'pwd'"
            ]
        );
        assert!(folded.cwd.is_none() && folded.env.is_empty() && folded.secret_args);
        // Folding what is folded already changes nothing.
        assert_eq!(fold_env_cwd(&folded).unwrap().argv, folded.argv);
    }

    /// The folded command run for real, as an exec of its argv (no shell around it), under
    /// this host's `sh` and, where installed, BusyBox's: a program named `A=B` runs (not an
    /// assignment), a cwd named `-` is that directory (not `cd -`), and a program named `-l`
    /// runs (bash and BusyBox take `exec -l` for an option).
    #[test]
    fn hostile_program_and_cwd_names_run_as_given() {
        use std::os::unix::fs::PermissionsExt;
        let root = std::env::temp_dir().join(format!("core-env-cwd-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let (bin, work) = (root.join("bin"), root.join("work"));
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(work.join("-")).unwrap();
        for (name, body) in [
            ("A=B", "echo \"ran A=B K=$K\""),
            ("-l", "echo \"ran -l $1\""),
            ("where", "pwd"),
        ] {
            let path = bin.join(name);
            std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let mut shells = vec![("host", std::path::PathBuf::from("sh"))];
        if let Some(busybox) = ["/usr/bin/busybox", "/bin/busybox"]
            .iter()
            .find(|p| std::path::Path::new(p).exists())
        {
            let dir = root.join("busybox");
            std::fs::create_dir_all(&dir).unwrap();
            std::os::unix::fs::symlink(busybox, dir.join("sh")).unwrap();
            shells.push(("busybox", dir.join("sh")));
        }
        let cases: Vec<(Command, String)> = vec![
            (Command::new("A=B").env("K", "V"), "ran A=B K=V\n".into()),
            (
                Command::new("where").cwd("-"),
                format!("{}\n", work.join("-").display()),
            ),
            (Command::new("-l").arg("x").cwd("-"), "ran -l x\n".into()),
            (
                Command::new("-l").arg("x").env("K", "V"),
                "ran -l x\n".into(),
            ),
        ];
        let path = format!("{}:/usr/bin:/bin", bin.display());
        let mut failures = Vec::new();
        for (label, shell) in &shells {
            for (cmd, expected) in &cases {
                let argv = fold_env_cwd(cmd).unwrap().into_owned().argv;
                assert_eq!(argv[..2], ["sh", "-c"]);
                let out = std::process::Command::new(shell)
                    .args(&argv[1..])
                    .env_clear()
                    .env("PATH", &path)
                    .env("OLDPWD", "/")
                    .current_dir(&work)
                    .output()
                    .unwrap();
                let got = String::from_utf8_lossy(&out.stdout);
                if got != expected.as_str() {
                    failures.push(format!(
                        "{label}: {argv:?}: expected {expected:?}, got {got:?}"
                    ));
                }
            }
        }
        std::fs::remove_dir_all(&root).unwrap();
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }
}
