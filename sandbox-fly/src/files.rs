//! Files over `/exec` (Fly has no file API): base64 through the exec request's `stdin` for
//! uploads and through its `stdout` for downloads, one chunk per call, so a file of any size
//! moves in constant memory.
//!
//! Chunk sizes: Fly documents no limit on an exec request or its stdin, and none on its output
//! (PROTOCOL.md §8), so the adapter keeps every exec body, request and answer, under its own cap
//! of [`MAX_EXEC_BODY`] (1 MiB) and fills it: [`UPLOAD_CHUNK`] raw bytes become 4/3 as much base64
//! in one JSON string, with room left for the script and two paths of up to 4 KiB; a download
//! answer carries [`DOWNLOAD_CHUNK`] bytes as base64 wrapped at 76 columns, each line break
//! escaped as two characters in the JSON string.
//!
//! Throughput: Fly allows 1 exec per second per machine sustained, in bursts of 3 (PROTOCOL.md
//! §3). Transfers take two calls at once and then one per [`crate::FlyBuilder::poll_interval`]
//! (default 1 s), so a file moves at about 0.7 MiB/s sustained whatever the network: 10 MiB takes
//! about 13 s.

use crate::api::Api;
use crate::error::PROVIDER;
use crate::exec::{run_script, script_error};
use crate::scripts;
use crate::wire::ExecResponse;
use base64::Engine;
use bytes::{BufMut, Bytes, BytesMut};
use futures::StreamExt;
use sandbox_sdk_core::{
    Download, Error, ErrorKind, FileInfo, FileKind, ListOptions, Result, Transfer, UploadBody,
    validate_path,
};
use std::time::{Duration, SystemTime};
use tokio::io::AsyncReadExt;

/// The largest exec request body the adapter sends (an upload chunk in base64 plus the script).
pub const MAX_EXEC_BODY: usize = 1024 * 1024;

/// Raw bytes per upload call: 760 KiB become 1,037,656 bytes of base64, leaving 10,920 bytes of
/// [`MAX_EXEC_BODY`] for the script, the two paths and the JSON around them.
pub const UPLOAD_CHUNK: usize = 760 * 1024;

/// Raw bytes per download call: 736 KiB become 1,004,888 bytes of base64, 1,031,332 with the
/// line breaks escaped in the JSON answer, under [`MAX_EXEC_BODY`].
pub const DOWNLOAD_CHUNK: u64 = 736 * 1024;

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

/// A path as passed to scripts: one starting with `-` gets `./` so no tool takes it for an option.
fn arg_path(path: &str) -> Result<String> {
    validate_path(path).map_err(|e| e.or_context(PROVIDER, "files", None))?;
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

fn check(resp: ExecResponse, op: &str, machine: &str, what: &str) -> Result<ExecResponse> {
    if resp.exit_code.unwrap_or(0) == 0 {
        Ok(resp)
    } else {
        Err(script_error(&resp, op, machine, what))
    }
}

/// Reads up to `size` bytes (fewer only at the end of the body).
async fn read_chunk(body: &mut UploadBody, size: usize) -> Result<Bytes> {
    let mut buf = BytesMut::with_capacity(size);
    while buf.len() < size {
        let left = size - buf.len();
        let mut room = (&mut buf).limit(left);
        let n = body
            .read_buf(&mut room)
            .await
            .map_err(|e| Error::from(e).or_context(PROVIDER, "upload", None))?;
        if n == 0 {
            break;
        }
    }
    Ok(buf.freeze())
}

/// Streams `body` to `path`: parents created, written to a partial file beside it, renamed into
/// place after the last chunk. Holds at most two chunks in memory (the one being sent and the
/// next, read ahead to know which chunk is last).
pub(crate) async fn upload(
    api: &Api,
    machine: &str,
    path: &str,
    mut body: UploadBody,
) -> Result<Transfer> {
    let target = arg_path(path)?;
    // A fixed name beside the target (same filesystem, so the final rename is atomic); two
    // concurrent uploads to one path are as racy as two concurrent writes anyway.
    let part = format!("{target}.sandbox-fly-upload");
    let chunk = api.settings.upload_chunk;
    let mut current = read_chunk(&mut body, chunk).await?;
    let mut first = true;
    let mut total = 0u64;
    loop {
        let next = if current.len() < chunk {
            Bytes::new()
        } else {
            match read_chunk(&mut body, chunk).await {
                Ok(next) => next,
                Err(e) => {
                    // The caller's body failed after chunks were sent: leave no partial file.
                    if !first {
                        remove_part(api, machine, &part).await;
                    }
                    return Err(e);
                }
            }
        };
        let last = next.is_empty();
        let sent = run_script(
            api,
            machine,
            scripts::UPLOAD,
            &[
                &part,
                &target,
                if first { "1" } else { "0" },
                if last { "1" } else { "0" },
            ],
            Some(b64().encode(&current)),
            0,
        )
        .await
        .and_then(|r| check(r, "upload", machine, &format!("writing {path}")));
        if let Err(e) = sent {
            // Even a failed first call may have created the partial file (a lost answer, a
            // failed rename of a one-chunk file); `rm -f` of a missing file is harmless.
            remove_part(api, machine, &part).await;
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

/// Best effort removal of a partial upload (or of a stdin file nobody will read) after a
/// failure; the failure is what gets reported.
pub(crate) async fn remove_part(api: &Api, machine: &str, part: &str) {
    if let Err(e) = run_script(api, machine, scripts::CLEANUP, &[part], None, 0).await {
        tracing::debug!(error = %e, "fly: could not remove a partial upload");
    }
}

/// Uploads a buffer (used for stdin files and `write_file`).
pub(crate) async fn upload_bytes(
    api: &Api,
    machine: &str,
    path: &str,
    data: Bytes,
) -> Result<Transfer> {
    let reader: UploadBody = Box::pin(std::io::Cursor::new(data));
    upload(api, machine, path, reader).await
}

/// Parses `HEXMODE SIZE MTIME` for `path`.
pub(crate) fn parse_stat_line(line: &str, path: &str) -> Option<FileInfo> {
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
        // Checked: the line comes from the machine, and `SystemTime + Duration` panics on overflow.
        modified: SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(mtime)),
    })
}

pub(crate) async fn stat(api: &Api, machine: &str, path: &str) -> Result<FileInfo> {
    let p = arg_path(path)?;
    let resp = run_script(api, machine, scripts::STAT, &[&p], None, 0).await?;
    let resp = check(resp, "stat", machine, path)?;
    let line = resp.stdout.as_deref().unwrap_or("").trim();
    let mut info = parse_stat_line(line, path).ok_or_else(|| {
        Error::new(
            ErrorKind::Provider,
            format!("unreadable stat answer for {path}"),
        )
        .with_provider(PROVIDER)
        .with_operation("stat")
        .with_sandbox_id(machine)
    })?;
    info.path = path.to_owned();
    Ok(info)
}

pub(crate) async fn list(
    api: &Api,
    machine: &str,
    path: &str,
    options: ListOptions,
) -> Result<Vec<FileInfo>> {
    let p = arg_path(path)?;
    let depth = options.depth.max(1).to_string();
    let resp = run_script(api, machine, scripts::LIST, &[&p, &depth], None, 0).await?;
    let resp = check(resp, "list_files", machine, path)?;
    parse_list(resp.stdout.as_deref().unwrap_or("")).ok_or_else(|| {
        Error::new(ErrorKind::Provider, format!("unreadable listing of {path}"))
            .with_provider(PROVIDER)
            .with_operation("list_files")
            .with_sandbox_id(machine)
    })
}

/// Parses [`scripts::LIST`]'s answer: blocks of base64 each ended by a `.` line, decoding to
/// NUL-terminated `HEXMODE SIZE MTIME PATH` records (a path may hold newlines and spaces; bytes
/// that are not UTF-8 are replaced). Sorted by path; `None` when a block is not base64.
pub(crate) fn parse_list(text: &str) -> Option<Vec<FileInfo>> {
    let mut entries = Vec::new();
    let mut block = String::new();
    for line in text.lines() {
        let line = line.trim();
        if line != "." {
            block.push_str(line);
            continue;
        }
        let bytes = b64().decode(std::mem::take(&mut block)).ok()?;
        for record in bytes.split(|b| *b == 0).filter(|r| !r.is_empty()) {
            let record = String::from_utf8_lossy(record);
            // A record the tools printed oddly is left out, as before; it cannot become others.
            if let Some(info) = parse_stat_line(&record, "") {
                entries.push(info);
            }
        }
    }
    if !block.is_empty() {
        // Output cut short after the last complete block.
        return None;
    }
    entries.sort_by(|a, b| a.path.cmp(&b.path));
    Some(entries)
}

pub(crate) async fn simple(
    api: &Api,
    machine: &str,
    op: &str,
    script: &str,
    paths: &[&str],
) -> Result<()> {
    let args: Vec<String> = paths.iter().map(|p| arg_path(p)).collect::<Result<_>>()?;
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let resp = run_script(api, machine, script, &refs, None, 0).await?;
    check(resp, op, machine, &paths.join(" -> ")).map(drop)
}

/// Streams the file at `path` in [`DOWNLOAD_CHUNK`]-byte blocks, one exec call per block,
/// each made only when the caller polls for more. A missing path is `NotFound` at once; a
/// directory is `Validation`.
pub(crate) async fn download(api: &Api, machine: &str, path: &str) -> Result<Download> {
    let info = stat(api, machine, path).await?;
    if info.kind == FileKind::Dir {
        return Err(
            Error::validation(format!("{path} is a directory, not a file"))
                .with_provider(PROVIDER)
                .with_operation("download")
                .with_sandbox_id(machine),
        );
    }
    let p = arg_path(path)?;
    let size = info.size;
    let block = api.settings.download_chunk;
    let api = api.clone();
    let machine = machine.to_owned();
    let path = path.to_owned();
    let stream = futures::stream::try_unfold((0u64, false), move |(index, done)| {
        let (api, machine, p, path) = (api.clone(), machine.clone(), p.clone(), path.clone());
        async move {
            if done || index * block >= size.max(1) && index > 0 {
                return Ok(None);
            }
            let resp = run_script(
                &api,
                &machine,
                scripts::DOWNLOAD,
                &[&p, &block.to_string(), &index.to_string()],
                None,
                0,
            )
            .await?;
            let resp = check(resp, "download", &machine, &path)?;
            let text: String = resp
                .stdout
                .as_deref()
                .unwrap_or("")
                .split_whitespace()
                .collect();
            let chunk = b64().decode(text).map_err(|_| {
                Error::new(
                    ErrorKind::Provider,
                    format!("unreadable base64 while reading {path}"),
                )
                .with_provider(PROVIDER)
                .with_operation("download")
                .with_sandbox_id(&machine)
            })?;
            let short = (chunk.len() as u64) < block;
            let got = index * block + chunk.len() as u64;
            if short && got < size {
                // `dd` failing (unreadable file) or the file shrinking both look like an
                // early end: report it instead of handing out a truncated file as complete.
                return Err(Error::new(
                    ErrorKind::Provider,
                    format!(
                        "read {got} of {size} bytes of {path}: the file shrank or could not be read"
                    ),
                )
                .with_provider(PROVIDER)
                .with_operation("download")
                .with_sandbox_id(&machine));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_parse_kind_size_mode_and_time() {
        let f = parse_stat_line("81a4 12 1700000000", "/a/b.txt").unwrap();
        assert_eq!(f.kind, FileKind::File);
        assert_eq!(f.size, 12);
        assert_eq!(f.mode, Some(0o644));
        assert_eq!(f.name, "b.txt");
        assert_eq!(
            f.modified,
            Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000))
        );
        let d = parse_stat_line("41ed 4096 1700000000 /w/dir with space", "").unwrap();
        assert_eq!(d.kind, FileKind::Dir);
        assert_eq!(d.path, "/w/dir with space");
        assert_eq!(d.name, "dir with space");
        let l = parse_stat_line("a1ff 7 1 /w/link", "").unwrap();
        assert_eq!(l.kind, FileKind::Symlink);
        assert!(parse_stat_line("zz 1 1", "x").is_none());
        // An absurd mtime from the machine is no time at all, not a panic.
        let f = parse_stat_line("81a4 1 18446744073709551615", "/a").unwrap();
        assert_eq!(f.modified, None);
        assert_eq!(f.size, 1);
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
    fn chunks_fill_but_stay_under_the_exec_body_limit() {
        // Upload: base64 in one JSON string, plus the script, two 4 KiB paths and the JSON.
        let encoded = UPLOAD_CHUNK.div_ceil(3) * 4;
        let request = encoded + scripts::UPLOAD.len() + 2 * 4096 + 256;
        assert!(request < MAX_EXEC_BODY, "{request}");
        assert!(
            request + 3 * 1024 * 4 / 3 > MAX_EXEC_BODY,
            "3 KiB more would not fit"
        );
        // Download: base64 wrapped at 76 columns, each `\n` escaped as two characters.
        let encoded = (DOWNLOAD_CHUNK as usize).div_ceil(3) * 4;
        let answer = encoded + encoded.div_ceil(76) * 2 + 256;
        assert!(answer < MAX_EXEC_BODY, "{answer}");
        assert!(
            answer + 24 * 1024 * 4 / 3 > MAX_EXEC_BODY,
            "24 KiB more would not fit"
        );
    }
}
