//! Files (PROTOCOL.md §7): read, write, list, delete and rename are native `fs/*` calls; stat
//! reads the parent directory's listing; mkdir, which the API lacks, runs `mkdir -p` (the
//! official SDK writes and deletes a `.keep` file instead, which would delete a user's own
//! `.keep`).
//!
//! Paths: a relative path resolves against the sprite user's home (§18.11); `..` components are
//! resolved before anything is sent, never past `/`. Writes create missing parents and replace
//! the file (`fs/write` is atomic, §18.12); an upload streams its body (no spooling: the API
//! takes a body of any length).

use crate::config::HOME;
use crate::config::PROVIDER;
use crate::lifecycle::Handle;
use crate::wire::FsEntry;
use futures::StreamExt;
use sandbox_sdk_core::http::StreamBody;
use sandbox_sdk_core::time::parse_rfc3339;
use sandbox_sdk_core::{
    Command, Download, Error, ErrorKind, FileInfo, FileKind, ListOptions, Result, Transfer,
    UploadBody,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// `path` made absolute against the home directory and normalised (`.` and `..` resolved, never
/// above `/`); a `Validation` error for an empty path or one with a NUL byte.
pub(crate) fn absolute(path: &str) -> Result<String> {
    sandbox_sdk_core::validate_path(path)?;
    Ok(sandbox_sdk_core::absolute_path(HOME, path))
}

/// Writes `data` to `path`.
pub(crate) async fn write_file(
    handle: &Handle,
    path: &str,
    data: bytes::Bytes,
) -> Result<Transfer> {
    let target = absolute(path)?;
    let size = data.len() as u64;
    let body = StreamBody::Stream(futures::stream::once(async move { Ok(data) }).boxed());
    handle
        .api
        .write(&handle.name, &target, body, Some(size))
        .await?;
    Ok(Transfer {
        bytes: size,
        emulated: false,
    })
}

/// Streams `body` to `path`, counting what was sent.
pub(crate) async fn upload(handle: &Handle, path: &str, body: UploadBody) -> Result<Transfer> {
    let target = absolute(path)?;
    let sent = Arc::new(AtomicU64::new(0));
    let counter = sent.clone();
    let stream = StreamBody::Reader(body)
        .into_stream()
        .inspect(move |chunk| {
            if let Ok(chunk) = chunk {
                counter.fetch_add(chunk.len() as u64, Ordering::Relaxed);
            }
        })
        .boxed();
    handle
        .api
        .write(&handle.name, &target, StreamBody::Stream(stream), None)
        .await?;
    Ok(Transfer {
        bytes: sent.load(Ordering::Relaxed),
        emulated: false,
    })
}

/// Reads `path` as a stream; a missing file is `NotFound` (404, §7).
pub(crate) async fn download(handle: &Handle, path: &str) -> Result<Download> {
    let target = absolute(path)?;
    Ok(Download::new(handle.api.read(&handle.name, &target).await?))
}

fn parent_and_name(path: &str) -> (&str, &str) {
    match path.rsplit_once('/') {
        Some(("", name)) => ("/", name),
        Some((dir, name)) => (dir, name),
        None => ("/", path),
    }
}

fn file_info(entry: FsEntry, dir: &str) -> FileInfo {
    let path = entry
        .path
        .clone()
        .unwrap_or_else(|| format!("{}/{}", dir.trim_end_matches('/'), entry.name));
    let kind = match entry.kind.as_deref() {
        _ if entry.is_dir => FileKind::Dir,
        Some("dir" | "directory") => FileKind::Dir,
        Some("file") | None => FileKind::File,
        Some("symlink") => FileKind::Symlink,
        Some(_) => FileKind::Other,
    };
    FileInfo {
        name: if entry.name.is_empty() {
            parent_and_name(&path).1.to_owned()
        } else {
            entry.name
        },
        path,
        kind,
        size: entry.size,
        mode: entry
            .mode
            .as_deref()
            .and_then(|m| u32::from_str_radix(m.trim_start_matches("0o"), 8).ok()),
        modified: entry.mod_time.as_deref().and_then(parse_rfc3339),
    }
}

/// Lists directory `path`, `options.depth` levels down (a depth over 1 asks for a recursive
/// listing and keeps what lies within the depth).
pub(crate) async fn list(
    handle: &Handle,
    path: &str,
    options: ListOptions,
) -> Result<Vec<FileInfo>> {
    let dir = absolute(path)?;
    let depth = options.depth.max(1);
    let listing = handle
        .api
        .list_files(&handle.name, &dir, depth > 1, "list_files")
        .await?;
    let base = dir.trim_end_matches('/');
    let within = |info: &FileInfo| {
        let rest = info.path.strip_prefix(base).unwrap_or(&info.path);
        rest.trim_matches('/').split('/').count() as u32 <= depth
    };
    Ok(listing
        .entries
        .into_iter()
        .map(|e| file_info(e, &dir))
        .filter(|info| info.path != dir && within(info))
        .collect())
}

/// Metadata of `path`: its entry in its parent's listing; `NotFound` when there is none.
pub(crate) async fn stat(handle: &Handle, path: &str) -> Result<FileInfo> {
    let target = absolute(path)?;
    if target == "/" {
        return Ok(FileInfo {
            path: "/".into(),
            name: "/".into(),
            kind: FileKind::Dir,
            size: 0,
            mode: None,
            modified: None,
        });
    }
    let (dir, name) = parent_and_name(&target);
    let listing = handle
        .api
        .list_files(&handle.name, dir, false, "stat")
        .await?;
    listing
        .entries
        .into_iter()
        .find(|e| e.name == name || e.path.as_deref() == Some(target.as_str()))
        .map(|e| file_info(e, dir))
        .ok_or_else(|| {
            Error::new(
                ErrorKind::NotFound,
                format!("no such file or directory: {target}"),
            )
            .with_provider(PROVIDER)
            .with_operation("stat")
            .with_sandbox_id(&handle.name)
        })
}

/// Makes directory `path` and its parents with `mkdir -p` (the API has no mkdir call, §7); an
/// existing directory is fine, an existing file there is a `Validation` error.
pub(crate) async fn mkdir(handle: &Handle, path: &str) -> Result<()> {
    let dir = absolute(path)?;
    // Under the home directory the path is given relative to it (where commands start), so
    // the command names no absolute path it does not need to.
    let home = crate::config::HOME;
    let arg = match dir
        .strip_prefix(home)
        .filter(|rest| rest.is_empty() || rest.starts_with('/'))
    {
        Some(rest) => format!(".{rest}"),
        None => dir.clone(),
    };
    let command = Command::new("mkdir").args(["-p", "--", arg.as_str()]);
    let out = crate::exec::exec(handle, &command).await?.output().await?;
    if out.status.success() {
        return Ok(());
    }
    Err(Error::validation(format!(
        "mkdir {dir} failed ({}): {}",
        out.status,
        sandbox_sdk_core::http::truncate(out.stderr_lossy().trim(), 512)
    ))
    .with_provider(PROVIDER)
    .with_operation("mkdir")
    .with_sandbox_id(&handle.name))
}

/// Removes a file or a directory tree; a missing path is `NotFound`.
pub(crate) async fn remove(handle: &Handle, path: &str) -> Result<()> {
    let target = absolute(path)?;
    handle
        .api
        .delete_file(&handle.name, &target, "remove")
        .await
}

/// Renames `from` to `to`.
pub(crate) async fn rename(handle: &Handle, from: &str, to: &str) -> Result<()> {
    let (from, to) = (absolute(from)?, absolute(to)?);
    handle.api.rename(&handle.name, &from, &to).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_resolve_against_home_and_never_climb_past_root() {
        assert_eq!(absolute("a/b").unwrap(), "/home/sprite/a/b");
        assert_eq!(absolute("../../../../x").unwrap(), "/x");
        assert_eq!(absolute("/tmp/./y/../z").unwrap(), "/tmp/z");
        assert!(absolute("").is_err());
        assert_eq!(parent_and_name("/a"), ("/", "a"));
        assert_eq!(parent_and_name("/a/b"), ("/a", "b"));
    }

    #[test]
    fn entries_map_onto_file_info() {
        let entry: FsEntry = serde_json::from_str(
            r#"{"name":"a.txt","path":"/w/a.txt","type":"file","size":3,"mode":"0644",
                "modTime":"2026-01-01T00:00:00Z","isDir":false}"#,
        )
        .unwrap();
        let info = file_info(entry, "/w");
        assert_eq!(
            (info.kind, info.size, info.mode),
            (FileKind::File, 3, Some(0o644))
        );
        assert!(info.modified.is_some());
        let dir: FsEntry = serde_json::from_str(r#"{"name":"sub","isDir":true}"#).unwrap();
        let info = file_info(dir, "/w/");
        assert_eq!((info.kind, info.path.as_str()), (FileKind::Dir, "/w/sub"));
    }
}
