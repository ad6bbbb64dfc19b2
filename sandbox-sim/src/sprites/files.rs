//! The filesystem endpoints (PROTOCOL.md §7, §18.11, §18.12): `fs/read`, `fs/write`,
//! `fs/list`, `fs/delete`, `fs/rename`. Paths resolve against `workingDir` (default the home,
//! §18.11) with [`sandbox_sdk_core::absolute_path`], then go through the sprite's `local` sandbox, whose
//! file primitives never leave its directory (`..`, absolute paths and symbolic links included).

// An endpoint's refusal is its whole HTTP answer, made once per request: boxing it buys nothing.
#![allow(clippy::result_large_err)]

use super::HOME;
use super::sprite::Sprite;
use crate::{SimRequest, SimResponse};
use bytes::Bytes;
use futures::StreamExt;
use sandbox_sdk_core::time::format_rfc3339;
use sandbox_sdk_core::{Error, ErrorKind, FileInfo, FileKind, ListOptions, Sandbox};
use serde_json::{Value, json};
use std::sync::Arc;

/// `{"error", "code", "path"}` (PROTOCOL.md §7): 404 for `ENOENT`, 400 for every other code.
pub(crate) fn fs_error(code: &str, message: &str, path: &str) -> SimResponse {
    let status = if code == "ENOENT" { 404 } else { 400 };
    SimResponse::json(
        status,
        &json!({ "error": message, "code": code, "path": path }),
    )
}

/// The errno-style answer for an error of the `local` provider about `path`.
fn from_local(e: &Error, path: &str) -> SimResponse {
    let text = e.to_string();
    let code = match e.kind() {
        ErrorKind::NotFound => "ENOENT",
        ErrorKind::Conflict => "EEXIST",
        _ if text.contains("outside") => "EACCES",
        _ if text.contains("not a directory") => "ENOTDIR",
        _ if text.contains("is a directory") => "EISDIR",
        _ if text.contains("not empty") => "ENOTEMPTY",
        _ if text.contains("ermission") => "EACCES",
        ErrorKind::Validation => "EINVAL",
        _ => "EIO",
    };
    let message = match code {
        "ENOENT" => format!("no such file or directory: {path}"),
        "EACCES" => format!("permission denied: {path} leads outside the sprite"),
        _ => format!("{path}: {text}"),
    };
    fs_error(code, &message, path)
}

/// `path` against `working_dir` (itself against `/`; default the home) as the sprite shows it.
pub(crate) fn shown(working_dir: Option<&str>, path: &str) -> String {
    let base =
        sandbox_sdk_core::absolute_path("/", working_dir.filter(|w| !w.is_empty()).unwrap_or(HOME));
    sandbox_sdk_core::absolute_path(&base, path)
}

/// The path the `local` sandbox takes for `shown`: relative to its directory, the sprite's `/`.
pub(crate) fn local_path(shown: &str) -> String {
    match shown.trim_start_matches('/') {
        "" => ".".to_owned(),
        rest => rest.to_owned(),
    }
}

/// The host directory of the sprite's directory `shown`, when it is one (a link to a
/// directory inside the sprite counts; nothing outside does).
pub(crate) async fn host_dir(sprite: &Sprite, shown: &str) -> Result<std::path::PathBuf, String> {
    let rel = local_path(shown);
    let info = sprite
        .local
        .stat(&rel)
        .await
        .map_err(|e| format!("{shown}: {e}"))?;
    let is_dir = match info.kind {
        FileKind::Dir => true,
        FileKind::Symlink => sprite
            .local
            .list_files(&rel, ListOptions::default())
            .await
            .is_ok(),
        _ => false,
    };
    if is_dir {
        Ok(sprite.root().join(&rel))
    } else {
        Err(format!("{shown} is not a directory"))
    }
}

/// One `fs/list` entry (PROTOCOL.md §18.12): `{name, path, type, size, mode, modTime, isDir}`.
fn entry(info: &FileInfo, shown: &str) -> Value {
    let kind = match info.kind {
        FileKind::File => "file",
        FileKind::Dir => "dir",
        FileKind::Symlink => "symlink",
        FileKind::Other => "other",
    };
    json!({
        "name": info.name,
        "path": shown,
        "type": kind,
        "size": info.size,
        "mode": format!("{:04o}", info.mode.unwrap_or(0o644) & 0o7777),
        "modTime": info.modified.map(format_rfc3339),
        "isDir": info.kind == FileKind::Dir,
    })
}

/// Whether a query flag is on (`true`, `1`).
fn flag(request: &SimRequest, name: &str) -> bool {
    request
        .query_param(name)
        .is_some_and(|v| v == "true" || v == "1")
}

/// The `path` query parameter resolved, or a 400.
fn path_param(request: &SimRequest) -> Result<String, SimResponse> {
    match request.query_param("path").filter(|p| !p.is_empty()) {
        Some(p) => Ok(shown(request.query_param("workingDir").as_deref(), &p)),
        None => Err(fs_error("EINVAL", "path is required", "")),
    }
}

/// `GET fs/read?path=&workingDir=`: the bytes (PROTOCOL.md §7).
pub(crate) async fn read(sprite: Arc<Sprite>, request: &SimRequest) -> SimResponse {
    let _busy = sprite.busy();
    let path = match path_param(request) {
        Ok(p) => p,
        Err(e) => return e,
    };
    let rel = local_path(&path);
    match sprite.local.stat(&rel).await {
        Ok(info) if info.kind == FileKind::Dir => {
            return fs_error("EISDIR", &format!("{path} is a directory"), &path);
        }
        Ok(_) => {}
        Err(e) => return from_local(&e, &path),
    }
    let download = match sprite.local.download(&rel).await {
        Ok(d) => d,
        Err(e) => return from_local(&e, &path),
    };
    let mut stream = download.into_stream();
    let mut body = Vec::new();
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(c) => body.extend_from_slice(&c),
            Err(e) => return from_local(&e, &path),
        }
    }
    SimResponse::bytes(200, Some("application/octet-stream"), Bytes::from(body))
}

/// `PUT fs/write?path=&workingDir=&mode=&mkdirParents=`: writes aside, then renames in place
/// (atomic, PROTOCOL.md §18.12); without `mkdirParents` the parent must exist.
pub(crate) async fn write(sprite: Arc<Sprite>, request: &SimRequest) -> SimResponse {
    let _busy = sprite.busy();
    let path = match path_param(request) {
        Ok(p) => p,
        Err(e) => return e,
    };
    if path == "/" {
        return fs_error("EISDIR", "/ is a directory", &path);
    }
    let mode = match request.query_param("mode").filter(|m| !m.is_empty()) {
        None => None,
        Some(m) => match u32::from_str_radix(&m, 8) {
            Ok(bits) if bits <= 0o7777 => Some(bits),
            _ => return fs_error("EINVAL", &format!("invalid mode {m:?}"), &path),
        },
    };
    let parent = sandbox_sdk_core::absolute_path(&path, "..");
    let name = path.rsplit('/').next().unwrap_or_default().to_owned();
    match sprite.local.stat(&local_path(&parent)).await {
        Ok(info) if info.kind == FileKind::Dir || info.kind == FileKind::Symlink => {}
        Ok(_) => return fs_error("ENOTDIR", &format!("{parent} is not a directory"), &path),
        Err(e) if e.kind() == ErrorKind::NotFound && flag(request, "mkdirParents") => {
            if let Err(e) = sprite.local.mkdir(&local_path(&parent)).await {
                return from_local(&e, &path);
            }
        }
        Err(e) => return from_local(&e, &path),
    }
    if let Ok(info) = sprite.local.stat(&local_path(&path)).await
        && info.kind == FileKind::Dir
    {
        return fs_error("EISDIR", &format!("{path} is a directory"), &path);
    }
    let aside = sandbox_sdk_core::absolute_path(
        &parent,
        &format!(".{name}.sprite-write-{}", crate::random_hex(8)),
    );
    if let Err(e) = sprite
        .local
        .write_file(&local_path(&aside), request.body.clone())
        .await
    {
        return from_local(&e, &path);
    }
    let host = sprite.root().join(local_path(&aside));
    let bits = mode.unwrap_or(0o644);
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&host, std::fs::Permissions::from_mode(bits));
    }
    if let Err(e) = sprite
        .local
        .rename(&local_path(&aside), &local_path(&path))
        .await
    {
        let _ = sprite.local.remove(&local_path(&aside)).await;
        return from_local(&e, &path);
    }
    SimResponse::json(
        200,
        &json!({ "path": path, "size": request.body.len(), "mode": format!("{bits:04o}") }),
    )
}

/// `GET fs/list?path=&workingDir=&recursive=`: `{"entries": [...]}`; a file lists as itself
/// (PROTOCOL.md §7, §18.12).
pub(crate) async fn list(sprite: Arc<Sprite>, request: &SimRequest) -> SimResponse {
    let _busy = sprite.busy();
    let path = match path_param(request) {
        Ok(p) => p,
        Err(e) => return e,
    };
    let rel = local_path(&path);
    let info = match sprite.local.stat(&rel).await {
        Ok(info) => info,
        Err(e) => return from_local(&e, &path),
    };
    let is_dir = info.kind == FileKind::Dir
        || (info.kind == FileKind::Symlink
            && sprite
                .local
                .list_files(&rel, ListOptions::default())
                .await
                .is_ok());
    if !is_dir {
        let mut info = info;
        info.name = path.rsplit('/').next().unwrap_or_default().to_owned();
        return SimResponse::json(200, &json!({ "entries": [entry(&info, &path)] }));
    }
    let depth = if flag(request, "recursive") { 64 } else { 1 };
    let infos = match sprite.local.list_files(&rel, ListOptions { depth }).await {
        Ok(infos) => infos,
        Err(e) => return from_local(&e, &path),
    };
    let entries: Vec<Value> = infos
        .iter()
        .map(|info| {
            let shown = sandbox_sdk_core::absolute_path("/", &info.path);
            entry(info, &shown)
        })
        .collect();
    SimResponse::json(200, &json!({ "entries": entries }))
}

/// `DELETE fs/delete?path=&workingDir=&recursive=`: a non-empty directory needs `recursive`;
/// `/` and the home are never removed.
pub(crate) async fn delete(sprite: Arc<Sprite>, request: &SimRequest) -> SimResponse {
    let _busy = sprite.busy();
    let path = match path_param(request) {
        Ok(p) => p,
        Err(e) => return e,
    };
    if path == "/" {
        return fs_error("EPERM", "the root cannot be removed", &path);
    }
    let rel = local_path(&path);
    let info = match sprite.local.stat(&rel).await {
        Ok(info) => info,
        Err(e) => return from_local(&e, &path),
    };
    if info.kind == FileKind::Dir && !flag(request, "recursive") {
        match sprite.local.list_files(&rel, ListOptions::default()).await {
            Ok(children) if !children.is_empty() => {
                return fs_error("ENOTEMPTY", &format!("directory not empty: {path}"), &path);
            }
            Ok(_) => {}
            Err(e) => return from_local(&e, &path),
        }
    }
    match sprite.local.remove(&rel).await {
        Ok(()) => SimResponse::json(200, &json!({ "path": path })),
        Err(e) => from_local(&e, &path),
    }
}

/// `POST fs/rename` `{source, dest, workingDir}`.
pub(crate) async fn rename(sprite: Arc<Sprite>, request: &SimRequest) -> SimResponse {
    let _busy = sprite.busy();
    let body: Value = match request.json() {
        Ok(v) => v,
        Err(e) => return fs_error("EINVAL", &e, ""),
    };
    let working = body.get("workingDir").and_then(Value::as_str);
    let (Some(source), Some(dest)) = (
        body.get("source").and_then(Value::as_str),
        body.get("dest").and_then(Value::as_str),
    ) else {
        return fs_error("EINVAL", "source and dest are required", "");
    };
    let (from, to) = (shown(working, source), shown(working, dest));
    if let Err(e) = sprite.local.stat(&local_path(&from)).await {
        return from_local(&e, &from);
    }
    match sprite
        .local
        .rename(&local_path(&from), &local_path(&to))
        .await
    {
        Ok(()) => SimResponse::json(200, &json!({ "source": from, "dest": to })),
        Err(e) => from_local(&e, &from),
    }
}
