//! Files over envd: the `/files` HTTP endpoint for bytes, the `filesystem.Filesystem` Connect
//! service for metadata and watches, and signed URLs.

use crate::envd::{ConnectStream, Envd, LIST_DIR_MAX_BODY, UNARY_MAX_BODY};
use crate::error::bad_response;
use crate::wire::{
    EntryInfo, EntryResponse, ListDirRequest, ListDirResponse, MoveRequest, PathRequest,
    WatchRequest, WatchResponse, WrittenEntry,
};
use base64::Engine as _;
use bytes::Bytes;
use futures::StreamExt;
use sandbox_sdk_core::http::{Method, Multipart};
use sandbox_sdk_core::time::parse_rfc3339;
use sandbox_sdk_core::{
    Download, ErrorKind, FileEvent, FileEventKind, FileEventStream, FileInfo, FileKind,
    ListOptions, Result, Transfer, UploadBody, validate_path,
};
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Our view of an envd `EntryInfo`.
pub fn file_info(entry: EntryInfo) -> FileInfo {
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

/// `v1_` + base64 (no padding) of `sha256("<path>:<operation>:<user>:<token>[:<expiration>]")`.
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

impl Envd {
    fn files_request(
        &self,
        method: Method,
        path: &str,
        operation: &str,
    ) -> sandbox_sdk_core::http::Request {
        let mut req = self
            .request(method, "/files", operation)
            .query("path", path);
        if let Some(user) = &self.user {
            req = req.query("username", user);
        }
        req
    }

    /// `POST /files` from a reader, streamed in constant memory through the transport's reader
    /// path (256 KiB reads): a raw `application/octet-stream` body when envd takes one
    /// (≥ 0.5.7), else one streamed multipart part. No total limit: the response head must come
    /// within the request timeout of the last byte sent, and the answer's body within
    /// `transfer_idle`. The transfer counts the bytes actually read.
    pub(crate) async fn upload_stream(
        &self,
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
        let request = self
            .files_request(Method::Post, path, "upload")
            .idle_timeout(self.transfer_idle);
        let request = if raw {
            request.body_stream(reader, "application/octet-stream")
        } else {
            request.multipart(Multipart::new().stream(
                "file",
                path,
                "application/octet-stream",
                reader,
                None,
            ))
        };
        let _written: Vec<WrittenEntry> = request.max_body(UNARY_MAX_BODY).send_json().await?;
        Ok(Transfer {
            bytes: counted.load(Ordering::Relaxed),
            emulated: false,
        })
    }

    /// `POST /files` as multipart (what both SDKs send by default): part `file`, filename = the
    /// full destination path.
    pub(crate) async fn upload_multipart(&self, path: &str, data: Bytes) -> Result<Transfer> {
        validate_path(path)?;
        let len = data.len() as u64;
        let form = Multipart::new().bytes("file", path, "application/octet-stream", data);
        let _written: Vec<WrittenEntry> = self
            .files_request(Method::Post, path, "write_file")
            .multipart(form)
            .max_body(UNARY_MAX_BODY)
            .send_json()
            .await?;
        Ok(Transfer {
            bytes: len,
            emulated: false,
        })
    }

    /// `GET /files`, streamed as it is read: the response head must arrive within the request
    /// timeout, then each chunk within `transfer_idle` of the previous one; no total limit.
    pub(crate) async fn download(&self, path: &str) -> Result<Download> {
        validate_path(path)?;
        let response = self
            .files_request(Method::Get, path, "download")
            .idle_timeout(self.transfer_idle)
            .send()
            .await?;
        Ok(Download::new(response.bytes_stream()))
    }

    pub(crate) async fn stat(&self, path: &str) -> Result<FileInfo> {
        validate_path(path)?;
        let r: EntryResponse = self
            .unary(
                "filesystem.Filesystem/Stat",
                "stat",
                &PathRequest { path: path.into() },
            )
            .await?;
        r.entry
            .map(file_info)
            .ok_or_else(|| bad_response("stat", Some(&self.sandbox_id), "no entry"))
    }

    pub(crate) async fn list_dir(&self, path: &str, options: ListOptions) -> Result<Vec<FileInfo>> {
        validate_path(path)?;
        let r: ListDirResponse = self
            .unary_capped(
                "filesystem.Filesystem/ListDir",
                "list_files",
                &ListDirRequest {
                    path: path.into(),
                    depth: options.depth.max(1),
                },
                LIST_DIR_MAX_BODY,
            )
            .await?;
        Ok(r.entries.into_iter().map(file_info).collect())
    }

    pub(crate) async fn make_dir(&self, path: &str) -> Result<()> {
        validate_path(path)?;
        let r: Result<EntryResponse> = self
            .unary(
                "filesystem.Filesystem/MakeDir",
                "mkdir",
                &PathRequest { path: path.into() },
            )
            .await;
        match r {
            Ok(_) => Ok(()),
            // An existing directory is not an error (a file in the way is invalid_argument).
            Err(e) if e.kind() == ErrorKind::Conflict => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// `Stat`, then `Remove`. envd's `Remove` is Go's `os.RemoveAll`, which answers `{}` for a
    /// path that does not exist; the trait wants `NotFound` there, and `Stat` gives it
    /// (`not_found`, PROTOCOL.md §2.4). One extra unary call per remove. `Stat` follows
    /// symlinks, so a dangling symlink is reported `NotFound` and left in place.
    pub(crate) async fn remove(&self, path: &str) -> Result<()> {
        validate_path(path)?;
        let _: EntryResponse = self
            .unary(
                "filesystem.Filesystem/Stat",
                "remove",
                &PathRequest { path: path.into() },
            )
            .await?;
        let _: serde_json::Value = self
            .unary(
                "filesystem.Filesystem/Remove",
                "remove",
                &PathRequest { path: path.into() },
            )
            .await?;
        Ok(())
    }

    pub(crate) async fn rename(&self, from: &str, to: &str) -> Result<()> {
        validate_path(from)?;
        validate_path(to)?;
        let _: EntryResponse = self
            .unary(
                "filesystem.Filesystem/Move",
                "rename",
                &MoveRequest {
                    source: from.into(),
                    destination: to.into(),
                },
            )
            .await?;
        Ok(())
    }

    /// `WatchDir`: waits for `start` (within the request timeout), then streams changes until
    /// the stream ends, with no timeout.
    pub(crate) async fn watch(&self, path: &str, recursive: bool) -> Result<FileEventStream> {
        validate_path(path)?;
        let open = async {
            let mut stream = self
                .server_stream(
                    "filesystem.Filesystem/WatchDir",
                    "watch",
                    &WatchRequest {
                        path: path.into(),
                        recursive,
                    },
                    None,
                    None,
                )
                .await?;
            loop {
                match stream.next_json::<WatchResponse>().await {
                    None => {
                        return Err(bad_response(
                            "watch",
                            Some(&self.sandbox_id),
                            "the watch ended before it started",
                        ));
                    }
                    Some(Err(e)) => return Err(e),
                    Some(Ok(r)) if r.start.is_some() => return Ok(stream),
                    Some(Ok(_)) => {}
                }
            }
        };
        let stream = self
            .establish(None, "watch", "the watch did not start", open)
            .await?;
        Ok(watch_events(stream, path.to_owned()))
    }
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
