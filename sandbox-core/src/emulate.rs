//! Emulation of what a provider lacks, driven by its [`Capabilities`]:
//!
//! - **cwd/env** (`flags.per_command_env_cwd == false`): a command with a cwd or env is sent as
//!   `["sh", "-c", "cd -- 'CWD' && export K='V' && exec 'prog' 'arg'..."]` (see
//!   [`shell_script`](crate::shell::shell_script)); the quoting passes any string but NUL byte for byte.
//! - **exit codes** (`flags.exit_code_native == false`): the script ends by printing a random
//!   marker and `$?` to stdout; [`ExitMarker`] strips it from the stream (also when it is split
//!   across chunks) and the exit event becomes `ExitStatus { emulated: true, .. }`. If the
//!   process dies before printing it, the provider's own exit status is passed on unchanged.
//! - **files** (`files_upload == Unsupported`): every file operation but `watch` runs over exec
//!   with POSIX tools (`base64`, `dd`, `stat -c`, `find`), moving at most [`CHUNK`] raw bytes per
//!   exec; results are marked ([`Transfer::emulated`], [`Download::emulated`]) and
//!   `capabilities()` reports `files_upload: Emulated`. The sandbox needs `sh`, coreutils or
//!   busybox.
//! - **usage** (`usage == Unsupported`): [`Provider::usage`] is [estimated](crate::fleet::estimate)
//!   from the sandbox's listing (creation and update times, state, CPUs and memory) and the
//!   price table ([`PriceTable::builtin`] unless [`EmulateProvider::with_prices`] says
//!   otherwise), marked `estimated`; `capabilities()` reports `usage: Emulated`. Nothing is sent.

use crate::access::{PreviewLink, SshAccess};
use crate::capability::{Capabilities, Level};
use crate::error::{Error, ErrorKind, Result};
use crate::exec::{Command, EventStream, ExitStatus, Output, Process, ProcessEvent, ProcessInfo};
use crate::files::{
    Download, FileInfo, FileKind, ListOptions, Transfer, UploadBody, validate_path,
};
use crate::fleet::{PrepareSpec, Prepared, PriceTable, Usage};
use crate::lifecycle::{CreateSpec, ListFilter, Metrics, SandboxInfo, SnapshotInfo};
use crate::provider::{FileEventStream, Provider, Sandbox, SandboxStream};
use crate::shell::{build_script, shell_quote};
use async_trait::async_trait;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use bytes::{Bytes, BytesMut};
use futures::{StreamExt, stream};
use rand::Rng;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::io::AsyncReadExt;

/// Raw bytes moved per exec by emulated file transfers (base64 makes 64 KiB of it).
pub const CHUNK: usize = 48 * 1024;

/// Exit status used by the emulation scripts for "no such file or directory".
const MISSING: i32 = 3;
/// Exit status used by the emulation scripts for "not a regular file / not a directory".
const WRONG_KIND: i32 = 4;

fn emulated_caps(mut caps: Capabilities) -> Capabilities {
    if caps.files_upload == Level::Unsupported {
        caps.files_upload = Level::Emulated;
    }
    if caps.usage == Level::Unsupported {
        caps.usage = Level::Emulated;
    }
    caps
}

/// Finds and strips the exit-code marker in a stdout stream.
///
/// The marker is a random token followed by the decimal exit code and a newline. Bytes that could
/// be the start of the marker are held back until the next chunk shows whether they are.
#[derive(Debug, Clone)]
pub struct ExitMarker {
    token: Vec<u8>,
    held: Vec<u8>,
    state: MarkerState,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum MarkerState {
    Scanning,
    Code(Vec<u8>),
    Done(i32),
}

impl Default for ExitMarker {
    fn default() -> Self {
        Self::new()
    }
}

impl ExitMarker {
    /// A marker with a fresh random token.
    pub fn new() -> Self {
        let n: u128 = rand::rng().random();
        Self::with_token(&format!("__sandbox_exit_{n:032x}_"))
    }

    /// A marker with a given token (for tests). It must not be empty.
    pub fn with_token(token: &str) -> Self {
        ExitMarker {
            token: token.as_bytes().to_vec(),
            held: Vec::new(),
            state: MarkerState::Scanning,
        }
    }

    /// The shell line that prints the marker and the exit status of the line before it.
    pub fn script_line(&self) -> String {
        let token = String::from_utf8_lossy(&self.token);
        format!("printf '%s%d\\n' '{token}' \"$?\"")
    }

    /// Feeds one stdout chunk; returns the bytes that are certainly output.
    pub fn push(&mut self, chunk: &[u8]) -> Bytes {
        let mut out = BytesMut::new();
        let mut data = std::mem::take(&mut self.held);
        data.extend_from_slice(chunk);
        let mut rest: &[u8] = &data;
        while !rest.is_empty() {
            match &mut self.state {
                MarkerState::Done(_) => {
                    out.extend_from_slice(rest);
                    rest = &[];
                }
                MarkerState::Code(digits) => {
                    let b = rest[0];
                    if b.is_ascii_digit() && digits.len() < 10 {
                        digits.push(b);
                        rest = &rest[1..];
                    } else if b == b'\r' {
                        rest = &rest[1..];
                    } else if b == b'\n' && !digits.is_empty() {
                        let code = std::str::from_utf8(digits)
                            .ok()
                            .and_then(|d| d.parse().ok())
                            .unwrap_or(-1);
                        self.state = MarkerState::Done(code);
                        rest = &rest[1..];
                    } else {
                        // Not our marker after all: it was output.
                        out.extend_from_slice(&self.token);
                        out.extend_from_slice(digits);
                        self.state = MarkerState::Scanning;
                    }
                }
                MarkerState::Scanning => {
                    if let Some(at) = find(rest, &self.token) {
                        out.extend_from_slice(&rest[..at]);
                        rest = &rest[at + self.token.len()..];
                        self.state = MarkerState::Code(Vec::new());
                    } else {
                        let keep = longest_prefix_suffix(rest, &self.token);
                        out.extend_from_slice(&rest[..rest.len() - keep]);
                        self.held = rest[rest.len() - keep..].to_vec();
                        rest = &[];
                    }
                }
            }
        }
        out.freeze()
    }

    /// Ends the stream: returns held-back output and the exit code, if the marker was complete.
    pub fn finish(&mut self) -> (Bytes, Option<i32>) {
        let mut out = BytesMut::new();
        out.extend_from_slice(&std::mem::take(&mut self.held));
        match std::mem::replace(&mut self.state, MarkerState::Scanning) {
            MarkerState::Done(code) => {
                self.state = MarkerState::Done(code);
                (out.freeze(), Some(code))
            }
            MarkerState::Code(digits) => {
                let mut all = BytesMut::from(&self.token[..]);
                all.extend_from_slice(&digits);
                all.extend_from_slice(&out);
                (all.freeze(), None)
            }
            MarkerState::Scanning => (out.freeze(), None),
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return None;
    }
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The length of the longest suffix of `data` that is a proper prefix of `token`.
fn longest_prefix_suffix(data: &[u8], token: &[u8]) -> usize {
    let max = data.len().min(token.len().saturating_sub(1));
    (1..=max)
        .rev()
        .find(|&n| data[data.len() - n..] == token[..n])
        .unwrap_or(0)
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

/// Runs `command` on `inner`, folding cwd/env and adding an exit marker as its flags require.
async fn exec_on(inner: &dyn Sandbox, command: &Command) -> Result<Process> {
    let flags = inner.capabilities().flags;
    let fold = !flags.per_command_env_cwd && (command.cwd.is_some() || !command.env.is_empty());
    let mark = !flags.exit_code_native;
    if !fold && !mark {
        return inner.exec(command).await;
    }
    let mut sent = command.clone();
    if fold {
        // The env values now travel inside the script: keep them out of Debug and describe().
        sent.secret_args |= !command.env.is_empty();
        sent.cwd = None;
        sent.env.clear();
    }
    if mark {
        let marker = ExitMarker::new();
        let script = format!(
            "{}\n{}",
            build_script(command, fold, false)?,
            marker.script_line()
        );
        sent.argv = vec!["sh".into(), "-c".into(), script];
        let process = inner.exec(&sent).await?;
        Ok(process.map_events(|events| strip_marker(events, marker)))
    } else {
        sent.argv = vec!["sh".into(), "-c".into(), build_script(command, true, true)?];
        inner.exec(&sent).await
    }
}

fn script_error(inner: &dyn Sandbox, operation: &str, path: &str, output: &Output) -> Error {
    let error = match output.status.code {
        Some(MISSING) => Error::new(
            ErrorKind::NotFound,
            format!("no such file or directory: {path}"),
        ),
        Some(WRONG_KIND) => Error::validation(format!(
            "{path} is not a {}",
            if operation == "list_files" {
                "directory"
            } else {
                "regular file"
            }
        )),
        _ => {
            let stderr = output.stderr_lossy();
            let stderr: String = stderr.trim().chars().take(200).collect();
            Error::new(
                ErrorKind::Provider,
                format!(
                    "{operation} of {path} over exec failed with {}: {stderr}",
                    output.status
                ),
            )
        }
    };
    error.or_context(inner.provider(), operation, Some(inner.id()))
}

/// Runs a shell script and fails unless it exits 0.
async fn run_script(
    inner: &dyn Sandbox,
    operation: &str,
    path: &str,
    script: String,
) -> Result<Output> {
    let output = exec_on(inner, &Command::shell(script))
        .await?
        .output()
        .await?;
    if output.status.success() {
        Ok(output)
    } else {
        Err(script_error(inner, operation, path, &output))
    }
}

fn exists_test(q: &str) -> String {
    format!("[ -e {q} ] || [ -L {q} ]")
}

/// A path safe to hand to tools that take options before operands (`find`, `dd if=`).
fn operand(path: &str) -> String {
    if path.starts_with('-') {
        format!("./{path}")
    } else {
        path.to_owned()
    }
}

async fn put_chunk(inner: &dyn Sandbox, path: &str, chunk: &[u8], first: bool) -> Result<()> {
    let q = shell_quote(path)?;
    let data = shell_quote(&BASE64.encode(chunk))?;
    let script = if first {
        format!("mkdir -p -- \"$(dirname -- {q})\" && printf '%s' {data} | base64 -d > {q}")
    } else {
        format!("printf '%s' {data} | base64 -d >> {q}")
    };
    run_script(inner, "write_file", path, script)
        .await
        .map(drop)
}

fn parse_info(line: &str, path: &str) -> Result<FileInfo> {
    let bad = || {
        Error::new(
            ErrorKind::Provider,
            format!("unexpected stat output for {path}: {line:?}"),
        )
    };
    let mut parts = line.splitn(4, '|');
    let kind = match parts.next().ok_or_else(bad)? {
        "regular file" | "regular empty file" => FileKind::File,
        "directory" => FileKind::Dir,
        "symbolic link" => FileKind::Symlink,
        _ => FileKind::Other,
    };
    let size = parts.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
    let mode = parts.next().and_then(|s| u32::from_str_radix(s, 8).ok());
    let modified = parts
        .next()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .and_then(|secs| SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(secs)));
    let trimmed = path.trim_end_matches('/');
    let name = trimmed.rsplit('/').next().unwrap_or(trimmed).to_owned();
    Ok(FileInfo {
        path: path.to_owned(),
        name,
        kind,
        size,
        mode,
        modified,
    })
}

const STAT_FORMAT: &str = "'%F|%s|%a|%Y'";

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

    async fn write_chunks(&self, path: &str, body: &mut UploadBody) -> Result<Transfer> {
        validate_path(path)?;
        let mut buf = vec![0u8; CHUNK];
        let mut total = 0u64;
        let mut first = true;
        loop {
            let mut filled = 0;
            while filled < CHUNK {
                let n = body.read(&mut buf[filled..]).await.map_err(|e| {
                    Error::from(e).or_context(
                        self.inner.provider(),
                        "upload",
                        Some(self.inner.id()),
                    )
                })?;
                if n == 0 {
                    break;
                }
                filled += n;
            }
            if filled > 0 || first {
                put_chunk(&*self.inner, path, &buf[..filled], first).await?;
                total += filled as u64;
                first = false;
            }
            if filled < CHUNK {
                return Ok(Transfer {
                    bytes: total,
                    emulated: true,
                });
            }
        }
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
    async fn upload(&self, path: &str, mut body: UploadBody) -> Result<Transfer> {
        if self.native_files() {
            return self.inner.upload(path, body).await;
        }
        self.write_chunks(path, &mut body).await
    }
    async fn write_file(&self, path: &str, data: Bytes) -> Result<Transfer> {
        if self.native_files() {
            return self.inner.write_file(path, data).await;
        }
        let mut body: UploadBody = Box::pin(std::io::Cursor::new(data));
        self.write_chunks(path, &mut body).await
    }
    async fn download(&self, path: &str) -> Result<Download> {
        if self.native_files() {
            return self.inner.download(path).await;
        }
        validate_path(path)?;
        let q = shell_quote(path)?;
        let check = format!(
            "if [ -f {q} ]; then :; elif {}; then exit {WRONG_KIND}; else exit {MISSING}; fi",
            exists_test(&q)
        );
        run_script(&*self.inner, "download", path, check).await?;
        let input = shell_quote(&format!("if={}", operand(path)))?;
        let inner = self.inner.clone();
        let path = path.to_owned();
        let chunks = stream::try_unfold(Some(0u64), move |block| {
            let inner = inner.clone();
            let input = input.clone();
            let path = path.clone();
            async move {
                let Some(block) = block else {
                    return Ok(None);
                };
                let script =
                    format!("dd {input} bs={CHUNK} skip={block} count=1 2>/dev/null | base64");
                let output = run_script(&*inner, "download", &path, script).await?;
                let text: Vec<u8> = output
                    .stdout
                    .iter()
                    .copied()
                    .filter(|b| !b.is_ascii_whitespace())
                    .collect();
                let data = BASE64.decode(&text).map_err(|_| {
                    Error::new(
                        ErrorKind::Transport,
                        format!("download of {path} over exec returned invalid base64"),
                    )
                    .or_context(inner.provider(), "download", Some(inner.id()))
                })?;
                if data.is_empty() {
                    return Ok(None);
                }
                let next = (data.len() == CHUNK).then_some(block + 1);
                Ok(Some((Bytes::from(data), next)))
            }
        });
        Ok(Download::emulated(chunks.boxed()))
    }
    async fn list_files(&self, path: &str, options: ListOptions) -> Result<Vec<FileInfo>> {
        if self.native_files() {
            return self.inner.list_files(path, options).await;
        }
        validate_path(path)?;
        let q = shell_quote(path)?;
        let start = shell_quote(&operand(path))?;
        let each = shell_quote(&format!(
            "for f; do printf '%s|' \"$(stat -c {STAT_FORMAT} -- \"$f\")\"; \
             printf '%s' \"$f\" | base64 | tr -d '\\n'; echo; done"
        ))?;
        let script = format!(
            "if [ -d {q} ]; then find {start} -mindepth 1 -maxdepth {} -exec sh -c {each} sh {{}} +; \
             elif {}; then exit {WRONG_KIND}; else exit {MISSING}; fi",
            options.depth.max(1),
            exists_test(&q)
        );
        let output = run_script(&*self.inner, "list_files", path, script).await?;
        let text = String::from_utf8_lossy(&output.stdout);
        let mut entries = Vec::new();
        for line in text.lines().filter(|l| !l.is_empty()) {
            let (meta, encoded) = line.rsplit_once('|').unwrap_or((line, ""));
            let name = BASE64
                .decode(encoded)
                .ok()
                .and_then(|b| String::from_utf8(b).ok())
                .ok_or_else(|| {
                    Error::new(
                        ErrorKind::Provider,
                        format!("unexpected listing output for {path}: {line:?}"),
                    )
                })?;
            let name = match name.strip_prefix("./") {
                Some(stripped) if operand(path) != path => stripped.to_owned(),
                _ => name,
            };
            entries.push(parse_info(meta, &name)?);
        }
        Ok(entries)
    }
    async fn stat(&self, path: &str) -> Result<FileInfo> {
        if self.native_files() {
            return self.inner.stat(path).await;
        }
        validate_path(path)?;
        let q = shell_quote(path)?;
        let script = format!(
            "if {}; then stat -c {STAT_FORMAT} -- {q}; else exit {MISSING}; fi",
            exists_test(&q)
        );
        let output = run_script(&*self.inner, "stat", path, script).await?;
        parse_info(String::from_utf8_lossy(&output.stdout).trim_end(), path)
    }
    async fn mkdir(&self, path: &str) -> Result<()> {
        if self.native_files() {
            return self.inner.mkdir(path).await;
        }
        validate_path(path)?;
        let script = format!("mkdir -p -- {}", shell_quote(path)?);
        run_script(&*self.inner, "mkdir", path, script)
            .await
            .map(drop)
    }
    async fn remove(&self, path: &str) -> Result<()> {
        if self.native_files() {
            return self.inner.remove(path).await;
        }
        validate_path(path)?;
        let q = shell_quote(path)?;
        let script = format!(
            "if {}; then rm -rf -- {q}; else exit {MISSING}; fi",
            exists_test(&q)
        );
        run_script(&*self.inner, "remove", path, script)
            .await
            .map(drop)
    }
    async fn rename(&self, from: &str, to: &str) -> Result<()> {
        if self.native_files() {
            return self.inner.rename(from, to).await;
        }
        validate_path(from)?;
        validate_path(to)?;
        let (qf, qt) = (shell_quote(from)?, shell_quote(to)?);
        let script = format!(
            "if {}; then mv -f -- {qf} {qt}; else exit {MISSING}; fi",
            exists_test(&qf)
        );
        run_script(&*self.inner, "rename", from, script)
            .await
            .map(drop)
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marker_is_found_wherever_the_chunks_split() {
        let token = "__m_";
        let stream = b"hello __m world\n__m_42\n";
        for split in 0..=stream.len() {
            let mut m = ExitMarker::with_token(token);
            let mut out = m.push(&stream[..split]).to_vec();
            out.extend_from_slice(&m.push(&stream[split..]));
            let (rest, code) = m.finish();
            out.extend_from_slice(&rest);
            assert_eq!(out, b"hello __m world\n", "split at {split}");
            assert_eq!(code, Some(42), "split at {split}");
        }
    }

    #[test]
    fn stat_output_with_an_unrepresentable_time_does_not_panic() {
        let info = parse_info("regular file|5|644|18446744073709551615", "/a/b").unwrap();
        assert_eq!(
            (info.name.as_str(), info.size, info.modified),
            ("b", 5, None)
        );
        let info = parse_info("directory|0|755|60", "/a").unwrap();
        assert_eq!(
            info.modified,
            Some(SystemTime::UNIX_EPOCH + Duration::from_secs(60))
        );
    }

    #[test]
    fn a_missing_marker_leaves_output_intact() {
        let mut m = ExitMarker::with_token("__m_");
        let mut out = m.push(b"abc __m").to_vec();
        let (rest, code) = m.finish();
        out.extend_from_slice(&rest);
        assert_eq!(out, b"abc __m");
        assert_eq!(code, None);
    }
}
