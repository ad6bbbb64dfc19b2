//! Files (PROTOCOL.md §7): writes as a gzip tar (`fs/write`), reads streamed (`fs/read`),
//! directories made with `fs/mkdir`; stat, list, remove and rename, which the API lacks
//! (§7.4), run as commands through the core's files-over-exec scripts
//! ([`FilesOverExec`]).
//!
//! Paths: a relative path resolves against the session's working directory
//! (`/vercel/sandbox`), for the native calls here as for the scripts (whose commands start
//! there). `..` components are resolved before anything is sent, never past `/`.
//!
//! A write first makes the file's parent directory (`fs/mkdir`, recursive): whether `fs/write`
//! creates missing parents is unconfirmed (§7.1), so the adapter does not rely on it. An upload
//! whose length is not known up front (a reader) is spooled to a temporary file first, because
//! a tar header carries the size before the data; the archive is then compressed while it is
//! sent, so memory stays constant.

pub(crate) mod tar;

use crate::config::{PROVIDER, SCRIPT_OUTPUT_LIMIT};
use crate::exec;
use crate::lifecycle::{Handle, SessionRef};
use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use sandbox_sdk_core::emulate::files::{FilesOverExec, ScriptOutput, ScriptRunner};
use sandbox_sdk_core::{
    Command, Download, Error, ErrorKind, ExitStatus, Output, ProcessEvent, Result, Transfer,
    UploadBody,
};
use std::time::SystemTime;
use tokio::io::{AsyncSeekExt, AsyncWriteExt};

/// `path` made absolute against the session and normalised (`.` and `..` resolved, never above
/// `/`); a `Validation` error for an empty path or one with a NUL byte.
pub(crate) fn absolute(session: &SessionRef, path: &str) -> Result<String> {
    sandbox_sdk_core::validate_path(path)?;
    Ok(sandbox_sdk_core::absolute_path(&session.cwd, path))
}

/// How much of an upload's body is spooled (and read back) at a time.
const SPOOL_CHUNK: usize = 1 << 20;

fn parent(path: &str) -> Option<&str> {
    let (dir, _) = path.rsplit_once('/')?;
    (!dir.is_empty()).then_some(dir)
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Writes `data` to `path`.
pub(crate) async fn write_file(handle: &Handle, path: &str, data: Bytes) -> Result<Transfer> {
    let session = handle.session("write_file")?;
    let target = absolute(&session, path)?;
    let size = data.len() as u64;
    send(handle, &session, &target, size, std::io::Cursor::new(data)).await?;
    Ok(Transfer {
        bytes: size,
        emulated: false,
    })
}

/// Streams `body` to `path` (spooled to a temporary file to learn its size, see the module
/// docs).
pub(crate) async fn upload(handle: &Handle, path: &str, body: UploadBody) -> Result<Transfer> {
    let session = handle.session("upload")?;
    let target = absolute(&session, path)?;
    let spool_error = |e: std::io::Error| {
        Error::new(
            ErrorKind::Transport,
            format!("could not spool the upload of {path}: {e}"),
        )
        .with_provider(PROVIDER)
        .with_operation("upload")
        .with_sandbox_id(&handle.name)
    };
    let file = tokio::task::spawn_blocking(tempfile::tempfile)
        .await
        .map_err(|e| spool_error(std::io::Error::other(e)))?
        .map_err(spool_error)?;
    let mut file = tokio::fs::File::from_std(file);
    // 1 MiB at a time: each read and write of a tokio file is a blocking-pool round trip, and
    // `io::copy`'s 8 KiB made a spool of 8 MiB cost a thousand of each.
    let mut body = tokio::io::BufReader::with_capacity(SPOOL_CHUNK, body);
    let size = tokio::io::copy_buf(&mut body, &mut file)
        .await
        .map_err(spool_error)?;
    file.flush().await.map_err(spool_error)?;
    file.rewind().await.map_err(spool_error)?;
    send(handle, &session, &target, size, file).await?;
    Ok(Transfer {
        bytes: size,
        emulated: false,
    })
}

async fn send<R>(
    handle: &Handle,
    session: &SessionRef,
    target: &str,
    size: u64,
    reader: R,
) -> Result<()>
where
    R: tokio::io::AsyncRead + Send + Unpin + 'static,
{
    if let Some(dir) = parent(target) {
        handle.api.mkdir(&handle.name, &session.id, dir).await?;
    }
    let name = target.trim_start_matches('/').to_owned();
    let archive = tar::archive(
        name,
        size,
        0o644,
        handle.api.settings.file_mtime.unwrap_or_else(now_secs),
        reader,
    );
    handle
        .api
        .write_files(&handle.name, &session.id, archive)
        .await
}

/// Reads `path` as a stream; a missing file is `NotFound` (404, §7.2).
pub(crate) async fn download(handle: &Handle, path: &str) -> Result<Download> {
    let session = handle.session("read_file")?;
    let target = absolute(&session, path)?;
    let resp = handle
        .api
        .read_file(&handle.name, &session.id, &target)
        .await?;
    // A JSON answer with a 200 is an error the service reported that way (§7.2).
    if resp
        .header("content-type")
        .is_some_and(|t| t.trim_start().starts_with("application/json"))
    {
        return Err(Error::new(
            ErrorKind::Provider,
            format!("reading {path} answered JSON instead of the file's bytes"),
        )
        .with_provider(PROVIDER)
        .with_operation("read_file")
        .with_sandbox_id(&handle.name));
    }
    Ok(Download::new(resp.bytes_stream()))
}

/// `mkdir -p path`.
pub(crate) async fn mkdir(handle: &Handle, path: &str) -> Result<()> {
    let session = handle.session("mkdir")?;
    let target = absolute(&session, path)?;
    handle.api.mkdir(&handle.name, &session.id, &target).await
}

/// The scripts of [`FilesOverExec`], run as commands of the session.
pub(crate) struct Scripts {
    pub handle: Handle,
}

#[async_trait]
impl ScriptRunner for Scripts {
    fn provider(&self) -> &str {
        PROVIDER
    }

    fn sandbox_id(&self) -> &str {
        &self.handle.name
    }

    async fn run(
        &self,
        operation: &str,
        script: &str,
        args: &[&str],
        stdin: Option<String>,
    ) -> Result<ScriptOutput> {
        if stdin.is_some() {
            return Err(Error::new(
                ErrorKind::NotSupported,
                "vercel commands take no stdin; uploads go through fs/write",
            )
            .with_provider(PROVIDER)
            .with_operation(operation));
        }
        let command = Command::new("sh")
            .arg("-c")
            .arg(script)
            .arg("sh")
            .args(args.iter().copied());
        let mut process = exec::exec(&self.handle, &command).await?;
        let control = process.control();
        let (mut stdout, mut stderr) = (BytesMut::new(), BytesMut::new());
        let mut status = None;
        while let Some(event) = process.next().await {
            match event? {
                ProcessEvent::Stdout(b) => stdout.extend_from_slice(&b),
                ProcessEvent::Stderr(b) => stderr.extend_from_slice(&b),
                ProcessEvent::Exit(s) => {
                    status = Some(s);
                    break;
                }
            }
            if stdout.len() + stderr.len() > SCRIPT_OUTPUT_LIMIT {
                let _ = control.kill().await;
                return Err(Error::new(
                    ErrorKind::Provider,
                    format!(
                        "{operation} printed more than {SCRIPT_OUTPUT_LIMIT} bytes; stopped it"
                    ),
                )
                .with_provider(PROVIDER)
                .with_operation(operation)
                .with_sandbox_id(&self.handle.name)
                .with_retryable(false));
            }
        }
        Ok(ScriptOutput {
            output: Output {
                stdout: stdout.freeze(),
                stderr: stderr.freeze(),
                status: status.unwrap_or(ExitStatus {
                    code: None,
                    signal: None,
                    emulated: false,
                }),
            },
            request_id: None,
        })
    }
}

/// The emulated file operations of `handle`.
pub(crate) fn scripts(handle: &Handle) -> FilesOverExec<Scripts> {
    FilesOverExec::new(Scripts {
        handle: handle.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_resolve_against_the_session_and_never_climb_past_root() {
        let s = SessionRef {
            id: "sbx_1".into(),
            cwd: "/vercel/sandbox".into(),
        };
        assert_eq!(absolute(&s, "a/b.txt").unwrap(), "/vercel/sandbox/a/b.txt");
        assert_eq!(absolute(&s, "/etc/x").unwrap(), "/etc/x");
        assert_eq!(absolute(&s, "./a/../b").unwrap(), "/vercel/sandbox/b");
        assert_eq!(absolute(&s, "../../../../x").unwrap(), "/x");
        assert!(absolute(&s, "").is_err());
        assert!(absolute(&s, "a\0b").is_err());
        assert_eq!(parent("/vercel/sandbox/a"), Some("/vercel/sandbox"));
        assert_eq!(parent("/a"), None);
    }
}
