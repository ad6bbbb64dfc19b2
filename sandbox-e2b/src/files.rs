//! Files over envd (PROTOCOL.md §6, §7): bytes through `/files` (multipart for buffers, raw
//! octets or one streamed part from readers, streamed downloads), metadata and watches through
//! `filesystem.Filesystem`, and signed `/files` URLs.

use crate::api::connect::ConnectStream;
use crate::api::envd::{Envd, port_host};
use crate::config::{ENVD_PORT, PROVIDER};
use crate::error::bad_response;
use crate::wire::{EntryInfo, WatchResponse, secs};
use base64::Engine as _;
use bytes::Bytes;
use futures::StreamExt;
use sandbox_sdk_core::http::Multipart;
use sandbox_sdk_core::time::parse_rfc3339;
use sandbox_sdk_core::{
    Download, Error, ErrorKind, FileEvent, FileEventKind, FileEventStream, FileInfo, FileKind,
    ListOptions, Result, Transfer, UploadBody, validate_path,
};
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Our view of an envd `EntryInfo`.
fn file_info(entry: EntryInfo) -> FileInfo {
    let kind = match entry.kind.as_deref() {
        Some("FILE_TYPE_FILE") => FileKind::File,
        Some("FILE_TYPE_DIRECTORY") => FileKind::Dir,
        Some("FILE_TYPE_SYMLINK") => FileKind::Symlink,
        _ => FileKind::Other,
    };
    FileInfo {
        path: entry.path,
        name: entry.name,
        kind,
        size: entry.size,
        // Go FileMode keeps type bits high; the low nine are the permissions.
        mode: entry.mode.map(|m| m & 0o777),
        modified: entry.modified_time.as_deref().and_then(parse_rfc3339),
    }
}

fn event_kind(kind: &str) -> Option<FileEventKind> {
    Some(match kind {
        "EVENT_TYPE_CREATE" => FileEventKind::Create,
        "EVENT_TYPE_WRITE" => FileEventKind::Write,
        "EVENT_TYPE_REMOVE" => FileEventKind::Remove,
        "EVENT_TYPE_RENAME" => FileEventKind::Rename,
        "EVENT_TYPE_CHMOD" => FileEventKind::Chmod,
        _ => return None,
    })
}

fn join(dir: &str, name: &str) -> String {
    if name.starts_with('/') {
        name.to_owned()
    } else if dir.ends_with('/') {
        format!("{dir}{name}")
    } else {
        format!("{dir}/{name}")
    }
}

/// `v1_` + base64 (no padding) of `sha256("<path>:<operation>:<user>:<token>[:<expiration>]")`
/// (PROTOCOL.md §7.3).
pub fn file_signature(
    path: &str,
    operation: &str,
    user: &str,
    access_token: &str,
    expiration: Option<u64>,
) -> String {
    let mut input = format!("{path}:{operation}:{user}:{access_token}");
    if let Some(exp) = expiration {
        input.push_str(&format!(":{exp}"));
    }
    let digest = Sha256::digest(input.as_bytes());
    format!(
        "v1_{}",
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(digest)
    )
}

/// Uploads a reader to `path` in constant memory: a raw `application/octet-stream` body when
/// envd takes one (`raw`: envd >= 0.5.7), else one streamed multipart part. The transfer counts
/// the bytes actually read.
pub(crate) async fn upload(
    envd: &Envd,
    path: &str,
    body: UploadBody,
    raw: bool,
) -> Result<Transfer> {
    validate_path(path)?;
    let counted = Arc::new(AtomicU64::new(0));
    let reader: UploadBody = Box::pin(Counted {
        inner: body,
        count: counted.clone(),
    });
    envd.upload(path, reader, raw).await?;
    Ok(Transfer {
        bytes: counted.load(Ordering::Relaxed),
        emulated: false,
    })
}

/// Writes `data` to `path` as one multipart part (what both SDKs send by default).
pub(crate) async fn write_file(envd: &Envd, path: &str, data: Bytes) -> Result<Transfer> {
    validate_path(path)?;
    let len = data.len() as u64;
    envd.write_file(path, data).await?;
    Ok(Transfer {
        bytes: len,
        emulated: false,
    })
}

/// Writes several files in one multipart request (one part per file, named by its path).
pub(crate) async fn write_files(envd: &Envd, files: Vec<(String, Bytes)>) -> Result<Transfer> {
    let mut form = Multipart::new();
    let mut total = 0u64;
    for (path, data) in files {
        validate_path(&path)?;
        total += data.len() as u64;
        form = form.bytes("file", &path, "application/octet-stream", data);
    }
    envd.write_files(form).await?;
    Ok(Transfer {
        bytes: total,
        emulated: false,
    })
}

/// Downloads `path`, streamed as it is read.
pub(crate) async fn download(envd: &Envd, path: &str) -> Result<Download> {
    validate_path(path)?;
    envd.download(path).await
}

/// The entry at `path`.
pub(crate) async fn stat(envd: &Envd, path: &str) -> Result<FileInfo> {
    validate_path(path)?;
    envd.stat(path, "stat")
        .await?
        .entry
        .map(file_info)
        .ok_or_else(|| bad_response("stat", Some(&envd.sandbox_id), "no entry"))
}

/// The entries under `path`, `options.depth` levels deep (at least 1).
pub(crate) async fn list_dir(
    envd: &Envd,
    path: &str,
    options: ListOptions,
) -> Result<Vec<FileInfo>> {
    validate_path(path)?;
    let r = envd.list_dir(path, options.depth.max(1)).await?;
    Ok(r.entries.into_iter().map(file_info).collect())
}

/// Makes directory `path` (and its parents); one that exists already is fine.
pub(crate) async fn mkdir(envd: &Envd, path: &str) -> Result<()> {
    validate_path(path)?;
    match envd.make_dir(path).await {
        Ok(_) => Ok(()),
        // An existing directory is not an error (a file in the way is invalid_argument).
        Err(e) if e.kind() == ErrorKind::Conflict => Ok(()),
        Err(e) => Err(e),
    }
}

/// `Stat`, then `Remove`. envd's `Remove` is Go's `os.RemoveAll`, which answers `{}` for a
/// path that does not exist; the trait wants `NotFound` there, and `Stat` gives it
/// (`not_found`, PROTOCOL.md §6.1). One extra unary call per remove. `Stat` follows symlinks,
/// so a dangling symlink is reported `NotFound` and left in place.
pub(crate) async fn remove(envd: &Envd, path: &str) -> Result<()> {
    validate_path(path)?;
    envd.stat(path, "remove").await?;
    envd.remove(path).await
}

/// Moves `from` to `to`.
pub(crate) async fn rename(envd: &Envd, from: &str, to: &str) -> Result<()> {
    validate_path(from)?;
    validate_path(to)?;
    envd.move_entry(from, to).await?;
    Ok(())
}

/// `WatchDir`: waits for `start` (within the request timeout), then streams changes until the
/// stream ends, with no timeout.
pub(crate) async fn watch(envd: &Envd, path: &str, recursive: bool) -> Result<FileEventStream> {
    validate_path(path)?;
    let open = async {
        let mut stream = envd.watch_dir(path, recursive).await?;
        loop {
            match stream.next_json::<WatchResponse>().await {
                None => {
                    return Err(bad_response(
                        "watch",
                        Some(&envd.sandbox_id),
                        "the watch ended before it started",
                    ));
                }
                Some(Err(e)) => return Err(e),
                Some(Ok(r)) if r.start.is_some() => return Ok(stream),
                Some(Ok(_)) => {}
            }
        }
    };
    let stream = envd
        .establish(None, "watch", "the watch did not start", open)
        .await?;
    Ok(watch_events(stream, path.to_owned()))
}

/// A signed `/files` URL for `path` on sandbox `envd` in `domain`: `operation` is `read` or
/// `write`, valid for `expires_in` when given (PROTOCOL.md §7.3). Always on the per-sandbox
/// host, since whoever uses it cannot add routing headers.
pub(crate) fn signed_url(
    envd: &Envd,
    domain: &str,
    path: &str,
    operation: &str,
    expires_in: Option<Duration>,
) -> Result<String> {
    validate_path(path)?;
    let token = envd.access_token.as_deref().ok_or_else(|| {
        Error::new(
            ErrorKind::NotSupported,
            "this sandbox has no envd access token, so its file URLs need no signature",
        )
        .with_provider(PROVIDER)
        .with_sandbox_id(&envd.sandbox_id)
    })?;
    let user = envd.user.as_deref();
    let expiration = expires_in.map(|d| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs()
            .saturating_add(secs(d))
    });
    let signature = file_signature(path, operation, user.unwrap_or(""), token, expiration);
    let mut url = url::Url::parse(&format!(
        "https://{}/files",
        port_host(ENVD_PORT, &envd.sandbox_id, domain)
    ))
    .map_err(|e| Error::validation(format!("invalid sandbox URL: {e}")))?;
    {
        let mut q = url.query_pairs_mut();
        q.append_pair("path", path);
        if let Some(user) = user {
            q.append_pair("username", user);
        }
        q.append_pair("signature", &signature);
        if let Some(exp) = expiration {
            q.append_pair("signature_expiration", &exp.to_string());
        }
    }
    Ok(url.into())
}

/// An upload reader that counts the bytes read from it, so the transfer reports what was sent.
struct Counted {
    inner: UploadBody,
    count: Arc<AtomicU64>,
}

impl tokio::io::AsyncRead for Counted {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = self.inner.as_mut().poll_read(cx, buf);
        let read = buf.filled().len() - before;
        self.count.fetch_add(read as u64, Ordering::Relaxed);
        polled
    }
}

fn watch_events(stream: ConnectStream, dir: String) -> FileEventStream {
    futures::stream::unfold(Some(stream), move |state| {
        let dir = dir.clone();
        async move {
            let mut stream = state?;
            loop {
                match stream.next_json::<WatchResponse>().await {
                    None => return None,
                    Some(Err(e)) => return Some((Err(e), None)),
                    Some(Ok(r)) => {
                        if let Some(event) = r.filesystem
                            && let Some(kind) = event_kind(&event.kind)
                        {
                            let path = join(&dir, &event.name);
                            return Some((Ok(FileEvent { path, kind }), Some(stream)));
                        }
                    }
                }
            }
        }
    })
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_matches_protocol_example() {
        assert_eq!(
            file_signature("/home/user/a.txt", "read", "", "tok_envd_123", None),
            "v1_zpcfuBvTQ7Iw5iRRDlW6Y7v3hP25/WWkbW2cRaNfI4I"
        );
    }

    #[test]
    fn entry_maps_kind_mode_and_time() {
        let e: EntryInfo = serde_json::from_str(
            r#"{"name":"d","type":"FILE_TYPE_DIRECTORY","path":"/home/user/d","size":"4096","mode":2147484141,"modifiedTime":"2026-01-01T00:00:00Z"}"#,
        )
        .unwrap();
        let info = file_info(e);
        assert_eq!(info.kind, FileKind::Dir);
        assert_eq!(info.mode, Some(0o755));
        assert_eq!(info.size, 4096);
        assert!(info.modified.is_some());
    }

    #[test]
    fn watch_paths_are_joined() {
        assert_eq!(join("/home/user", "a.txt"), "/home/user/a.txt");
        assert_eq!(join("/home/user/", "a.txt"), "/home/user/a.txt");
        assert_eq!(event_kind("EVENT_TYPE_CREATE"), Some(FileEventKind::Create));
        assert_eq!(event_kind("EVENT_TYPE_UNSPECIFIED"), None);
    }
}
