//! Files in a sandbox: metadata, directory listings, watch events, and the byte streams used for
//! constant-memory uploads and downloads.

use crate::error::{Error, Result};
use bytes::Bytes;
use futures::Stream;
use futures::stream::BoxStream;
use serde::Serialize;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::SystemTime;
use tokio::io::AsyncRead;

/// What kind of entry a path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FileKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
    /// Anything else (device, socket, fifo).
    Other,
}

/// Metadata of one file or directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileInfo {
    /// The path as the sandbox knows it.
    pub path: String,
    /// The last path component.
    pub name: String,
    /// File, directory, link or other.
    pub kind: FileKind,
    /// Size in bytes.
    pub size: u64,
    /// Unix permission bits, when known.
    pub mode: Option<u32>,
    /// Last modification, when known.
    pub modified: Option<SystemTime>,
}

/// Options for [`crate::Sandbox::list_files`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListOptions {
    /// How deep to descend: 1 lists only the directory's own entries.
    pub depth: u32,
}

impl Default for ListOptions {
    fn default() -> Self {
        ListOptions { depth: 1 }
    }
}

/// What happened to a watched path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FileEventKind {
    /// Created.
    Create,
    /// Written to.
    Write,
    /// Removed.
    Remove,
    /// Renamed.
    Rename,
    /// Permissions changed.
    Chmod,
}

/// One change seen by a watch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileEvent {
    /// The path that changed.
    pub path: String,
    /// What happened.
    pub kind: FileEventKind,
}

/// A stream of byte chunks, read lazily.
pub type ByteStream = BoxStream<'static, Result<Bytes>>;

/// A body to upload: any async reader, read in chunks as it is sent.
pub type UploadBody = Pin<Box<dyn AsyncRead + Send>>;

/// An [`UploadBody`] from any reader, without `Box::pin` at the call site: an open
/// `tokio::fs::File`, a `&'static [u8]`, a `std::io::Cursor` over bytes you hold.
///
/// ```
/// let body = sandbox_sdk_core::upload_body(&b"hello"[..]);
/// # drop(body);
/// ```
pub fn upload_body(reader: impl AsyncRead + Send + 'static) -> UploadBody {
    Box::pin(reader)
}

/// The result of an upload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Transfer {
    /// Bytes written.
    pub bytes: u64,
    /// Moved over exec in chunks instead of the provider's file API.
    pub emulated: bool,
}

/// A download in progress: a stream of chunks, read as the caller polls it.
pub struct Download {
    stream: ByteStream,
    emulated: bool,
}

impl Download {
    /// Wraps a native download stream.
    pub fn new(stream: ByteStream) -> Self {
        Download {
            stream,
            emulated: false,
        }
    }

    /// Wraps a stream read over exec.
    pub fn emulated(stream: ByteStream) -> Self {
        Download {
            stream,
            emulated: true,
        }
    }

    /// Whether the bytes come over exec instead of the provider's file API.
    pub fn is_emulated(&self) -> bool {
        self.emulated
    }

    /// The underlying stream.
    pub fn into_stream(self) -> ByteStream {
        self.stream
    }
}

impl fmt::Debug for Download {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Download")
            .field("emulated", &self.emulated)
            .finish()
    }
}

impl Stream for Download {
    type Item = Result<Bytes>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.stream.as_mut().poll_next(cx)
    }
}

/// Checks a sandbox path: not empty and no NUL byte.
pub fn validate_path(path: &str) -> Result<()> {
    if path.is_empty() {
        return Err(Error::validation("empty path"));
    }
    if path.contains('\0') {
        return Err(Error::validation(format!(
            "path {:?} contains a NUL byte",
            path.replace('\0', "\\0")
        )));
    }
    Ok(())
}

/// `path` as a sandbox shows it: a relative path joined to `base` (itself absolute), `.` and
/// `..` resolved (`..` never climbs above `/`), always absolute. No I/O: what the path names
/// is the sandbox's business.
///
/// ```
/// use sandbox_sdk_core::absolute_path;
/// assert_eq!(absolute_path("/home/u", "a/./b/../c"), "/home/u/a/c");
/// assert_eq!(absolute_path("/home/u", "/tmp/x"), "/tmp/x");
/// assert_eq!(absolute_path("/home/u", "../../../../etc"), "/etc");
/// assert_eq!(absolute_path("/w", "/etc//x"), "/etc/x");
/// assert_eq!(absolute_path("/w", ""), "/w");
/// ```
pub fn absolute_path(base: &str, path: &str) -> String {
    let joined = if path.starts_with('/') {
        path.to_owned()
    } else {
        format!("{base}/{path}")
    };
    let mut parts: Vec<&str> = Vec::new();
    for part in joined.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            other => parts.push(other),
        }
    }
    format!("/{}", parts.join("/"))
}
