//! Toolbox files (`/files…`, PROTOCOL.md §3.3): the sandbox's real files, every path resolved
//! inside the sandbox ([`crate::disk`]): relative ones against its working directory,
//! absolute ones outside it in a root of the sandbox's own, links followed as the sandbox
//! sees them.

// A refusal is its whole HTTP answer, made once per request: boxing it buys nothing.
#![allow(clippy::result_large_err)]

use super::api::json_answer;
use super::call::Call;
use crate::SimResponse;
use crate::disk::Disk;
use bytes::Bytes;
use futures::StreamExt;
use sandbox_sdk_core::time::format_rfc3339;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// The boundary of `bulk-download` answers.
const BOUNDARY: &str = "DAYTONA-FILE-BOUNDARY";

/// Answers `/files…` (`s`: the segments after `files`).
pub(crate) async fn handle(call: Call, s: &[&str]) -> SimResponse {
    let method = call.request.method.as_str().to_owned();
    let param = |name: &str| call.request.query_param(name);
    match (method.as_str(), s) {
        ("GET", []) => {
            let depth = param("depth")
                .and_then(|d| d.parse::<u32>().ok())
                .unwrap_or(1);
            if depth == 0 {
                return call.error(400, "depth must be at least 1");
            }
            list(&call, &param("path").unwrap_or_default(), depth)
        }
        ("DELETE", []) => remove(
            &call,
            param("path"),
            param("recursive").as_deref() == Some("true"),
        ),
        ("GET", ["info"]) => match param("path") {
            Some(p) => info(&call, &p),
            None => call.error(400, "path is required"),
        },
        ("GET", ["download"]) => match param("path") {
            Some(p) => download(&call, &p),
            None => call.error(400, "path is required"),
        },
        ("POST", ["bulk-download"]) => bulk_download(&call),
        ("POST", ["bulk-upload"]) => bulk_upload(&call),
        ("POST", ["upload-v2"]) => upload_v2(&call, param("path")),
        ("POST", ["folder"]) => folder(&call, param("path"), param("mode")),
        ("POST", ["move"]) => rename(&call, param("source"), param("destination")),
        _ => call.error(404, &format!("404 page not found: {}", call.request.path)),
    }
}

/// The host path of `path` with every link followed, or the daemon's answer to a path that
/// cannot be resolved (too many links).
fn resolve(call: &Call, path: &str) -> Result<PathBuf, SimResponse> {
    let (_, host) = call.disk.resolve(call.disk.mount(), path);
    host.map_err(|e| io_answer(call, &e, path))
}

/// Like [`resolve`], but a link in the last component is the entry itself.
fn entry(call: &Call, path: &str) -> Result<PathBuf, SimResponse> {
    let (_, host) = call.disk.entry(call.disk.mount(), path);
    host.map_err(|e| io_answer(call, &e, path))
}

/// The sandbox path of a host path [`resolve`] handed out.
fn shown(disk: &Disk, host: &Path) -> String {
    disk.shown(host)
        .unwrap_or_else(|| host.to_string_lossy().into_owned())
}

fn io_answer(call: &Call, error: &std::io::Error, path: &str) -> SimResponse {
    match error.kind() {
        std::io::ErrorKind::NotFound => call.coded(
            404,
            "FILE_NOT_FOUND",
            &format!("file not found: {path}: no such file or directory"),
        ),
        std::io::ErrorKind::PermissionDenied => call.coded(
            403,
            "FILE_ACCESS_DENIED",
            &format!("permission denied: {path}"),
        ),
        _ => call.error(400, &format!("{path}: {error}")),
    }
}

/// `FileInfo` of the entry at `full`, reported under `shown`: a link as what it names inside
/// the sandbox (as itself when that is nothing).
fn file_info(disk: &Disk, full: &Path, name: &str, shown: &str) -> std::io::Result<Value> {
    let meta = std::fs::symlink_metadata(full)?;
    let meta = if meta.file_type().is_symlink() {
        match disk.resolve("/", shown).1 {
            Ok(target) => std::fs::symlink_metadata(target).unwrap_or(meta),
            Err(_) => meta,
        }
    } else {
        meta
    };
    let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
    #[cfg(unix)]
    let (mode, uid, gid) = {
        use std::os::unix::fs::MetadataExt;
        (meta.mode(), meta.uid(), meta.gid())
    };
    #[cfg(not(unix))]
    let (mode, uid, gid) = (if meta.is_dir() { 0o40755 } else { 0o100644 }, 0, 0);
    Ok(json!({
        "name": name,
        "path": shown,
        "isDir": meta.is_dir(),
        "size": meta.len(),
        "mode": mode_string(meta.is_dir(), mode),
        "permissions": format!("{:04o}", mode & 0o7777),
        "owner": account_name("/etc/passwd", uid),
        "group": account_name("/etc/group", gid),
        "modTime": go_time(modified),
        "modifiedAt": format_rfc3339(modified),
    }))
}

/// Go's `FileMode.String()` for a directory or a regular file.
fn mode_string(dir: bool, mode: u32) -> String {
    let mut out = String::from(if dir { "d" } else { "-" });
    for shift in [6, 3, 0] {
        let bits = (mode >> shift) & 7;
        out.push(if bits & 4 != 0 { 'r' } else { '-' });
        out.push(if bits & 2 != 0 { 'w' } else { '-' });
        out.push(if bits & 1 != 0 { 'x' } else { '-' });
    }
    out
}

/// Go's `time.Time.String()` in UTC (`2006-01-02 15:04:05.999999999 +0000 UTC`).
fn go_time(time: SystemTime) -> String {
    let text = format_rfc3339(time);
    let (date, rest) = text.split_once('T').unwrap_or((&text, "00:00:00Z"));
    let clock = rest.trim_end_matches('Z');
    let nanos = time
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let clock = clock.split('.').next().unwrap_or(clock);
    let fraction = if nanos == 0 {
        String::new()
    } else {
        format!(".{nanos:09}").trim_end_matches('0').to_owned()
    };
    format!("{date} {clock}{fraction} +0000 UTC")
}

/// The name of account `id` in `file` (`/etc/passwd` or `/etc/group`), or the number.
fn account_name(file: &str, id: u32) -> String {
    std::fs::read_to_string(file)
        .ok()
        .and_then(|text| {
            text.lines().find_map(|line| {
                let mut fields = line.split(':');
                let name = fields.next()?;
                let number = fields.nth(1)?;
                (number == id.to_string()).then(|| name.to_owned())
            })
        })
        .unwrap_or_else(|| id.to_string())
}

fn list(call: &Call, path: &str, depth: u32) -> SimResponse {
    let root = match resolve(call, path) {
        Ok(r) => r,
        Err(answer) => return answer,
    };
    let mut out = Vec::new();
    if let Err(e) = walk(&call.disk, &root, depth, &mut out) {
        return io_answer(call, &e, path);
    }
    json_answer(200, &Value::Array(out))
}

/// The entries under `dir` down to `depth`; a link is listed, never walked into.
fn walk(disk: &Disk, dir: &Path, depth: u32, out: &mut Vec<Value>) -> std::io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let full = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        let Ok(info) = file_info(disk, &full, &name, &shown(disk, &full)) else {
            continue;
        };
        let walk_into = depth > 1 && entry.file_type().is_ok_and(|t| t.is_dir());
        out.push(info);
        if walk_into {
            walk(disk, &full, depth - 1, out)?;
        }
    }
    Ok(())
}

fn info(call: &Call, path: &str) -> SimResponse {
    let full = match entry(call, path) {
        Ok(f) => f,
        Err(answer) => return answer,
    };
    let name = full
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    match file_info(&call.disk, &full, &name, &shown(&call.disk, &full)) {
        Ok(v) => json_answer(200, &v),
        Err(e) => io_answer(call, &e, path),
    }
}

fn download(call: &Call, path: &str) -> SimResponse {
    let full = match resolve(call, path) {
        Ok(f) => f,
        Err(answer) => return answer,
    };
    match std::fs::metadata(&full) {
        Ok(m) if m.is_dir() => return call.error(400, &format!("{path} is a directory")),
        Ok(_) => {}
        Err(e) => return io_answer(call, &e, path),
    }
    let file = match std::fs::File::open(&full) {
        Ok(f) => tokio::fs::File::from_std(f),
        Err(e) => return io_answer(call, &e, path),
    };
    let name = full
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let body = tokio_util::io::ReaderStream::with_capacity(file, 64 * 1024).boxed();
    SimResponse::stream(200, "application/octet-stream", body).header(
        "content-disposition",
        &format!("attachment; filename=\"{name}\""),
    )
}

fn bulk_download(call: &Call) -> SimResponse {
    let paths: Vec<String> = match call.request.json::<Value>() {
        Ok(b) => match serde_json::from_value(b.get("paths").cloned().unwrap_or(Value::Null)) {
            Ok(p) => p,
            Err(_) => return call.coded(400, "INVALID_REQUEST_BODY", "paths is required"),
        },
        Err(e) => return call.coded(400, "INVALID_REQUEST_BODY", &e),
    };
    let mut body = Vec::new();
    for path in &paths {
        let read = match resolve(call, path).map(|full| (std::fs::metadata(&full), full)) {
            Err(answer) => Err(answer),
            Ok((Ok(m), _)) if m.is_dir() => Err(call.error(400, &format!("{path} is a directory"))),
            Ok((Ok(_), full)) => std::fs::read(&full).map_err(|e| io_answer(call, &e, path)),
            Ok((Err(e), _)) => Err(io_answer(call, &e, path)),
        };
        // Each part is named by the path exactly as the client asked for it.
        let (name, content_type, data) = match read {
            Ok(data) => ("file", "application/octet-stream", data),
            Err(answer) => match answer.body {
                crate::SimBody::Full(b) => ("error", "application/json", b.to_vec()),
                crate::SimBody::Stream(_) => continue,
            },
        };
        body.extend_from_slice(
            format!(
                "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"; filename=\"{}\"\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
                path.replace('"', "%22"),
                data.len()
            )
            .as_bytes(),
        );
        body.extend_from_slice(&data);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
    SimResponse::bytes(
        200,
        Some(&format!("multipart/form-data; boundary={BOUNDARY}")),
        body.into(),
    )
}

fn write_file(full: &Path, data: &[u8]) -> std::io::Result<()> {
    if let Some(parent) = full.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(full, data)
}

fn bulk_upload(call: &Call) -> SimResponse {
    let parts = match parse_multipart(call) {
        Ok(p) => p,
        Err(e) => return call.coded(400, "INVALID_REQUEST_BODY", &e),
    };
    let mut paths: std::collections::BTreeMap<String, String> = Default::default();
    let mut files: Vec<(String, Bytes)> = Vec::new();
    for part in parts {
        let Some(rest) = part.name.strip_prefix("files[") else {
            continue;
        };
        let Some((index, field)) = rest.split_once("].") else {
            continue;
        };
        match field {
            "path" => {
                paths.insert(
                    index.to_owned(),
                    String::from_utf8_lossy(&part.data).into_owned(),
                );
            }
            "file" => files.push((index.to_owned(), part.data)),
            _ => {}
        }
    }
    let (mut written, mut errors) = (Vec::new(), Vec::new());
    for (index, data) in files {
        let Some(path) = paths.get(&index) else {
            errors.push(json!(format!("files[{index}]: no path before the file")));
            continue;
        };
        match resolve(call, path).map(|full| write_file(&full, &data)) {
            Ok(Ok(())) => written.push(json!({ "path": path, "bytes": data.len() })),
            Ok(Err(e)) => errors.push(json!(format!("{path}: {e}"))),
            Err(_) => errors.push(json!(format!("{path}: too many levels of symbolic links"))),
        }
    }
    if errors.is_empty() {
        json_answer(200, &json!({ "files": written }))
    } else {
        json_answer(400, &json!({ "errors": errors, "files": written }))
    }
}

fn upload_v2(call: &Call, path: Option<String>) -> SimResponse {
    let Some(path) = path else {
        return call.error(400, "path is required");
    };
    let multipart = call
        .request
        .header("content-type")
        .is_some_and(|t| t.starts_with("multipart/"));
    let data = if multipart {
        match parse_multipart(call) {
            Ok(parts) => match parts.into_iter().find(|p| p.name == "file") {
                Some(p) => p.data,
                None => return call.error(400, "file is required"),
            },
            Err(e) => return call.coded(400, "INVALID_REQUEST_BODY", &e),
        }
    } else {
        call.request.body.clone()
    };
    let full = match resolve(call, &path) {
        Ok(f) => f,
        Err(answer) => return answer,
    };
    if let Err(e) = write_file(&full, &data) {
        return io_answer(call, &e, &path);
    }
    let name = full
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    json_answer(
        200,
        &json!({ "name": name, "path": shown(&call.disk, &full), "type": "file" }),
    )
}

fn folder(call: &Call, path: Option<String>, mode: Option<String>) -> SimResponse {
    let Some(path) = path else {
        return call.error(400, "path is required");
    };
    let mode = match mode.as_deref().map(|m| u32::from_str_radix(m, 8)) {
        None => 0o755,
        Some(Ok(m)) => m,
        Some(Err(_)) => {
            return call.error(400, &format!("invalid mode: {}", mode.unwrap_or_default()));
        }
    };
    let full = match resolve(call, &path) {
        Ok(f) => f,
        Err(answer) => return answer,
    };
    if let Err(e) = std::fs::create_dir_all(&full) {
        return io_answer(call, &e, &path);
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&full, std::fs::Permissions::from_mode(mode));
    }
    let _ = mode;
    SimResponse::empty(201)
}

fn rename(call: &Call, source: Option<String>, destination: Option<String>) -> SimResponse {
    let (Some(source), Some(destination)) = (source, destination) else {
        return call.error(400, "source and destination are required");
    };
    let (from, to) = match (entry(call, &source), entry(call, &destination)) {
        (Ok(from), Ok(to)) => (from, to),
        (Err(answer), _) | (_, Err(answer)) => return answer,
    };
    if let Err(e) = std::fs::symlink_metadata(&from) {
        return io_answer(call, &e, &source);
    }
    if std::fs::symlink_metadata(&to).is_ok() {
        return call.coded(
            409,
            "CONFLICT",
            &format!("destination already exists: {destination}"),
        );
    }
    match std::fs::rename(&from, &to) {
        Ok(()) => SimResponse::empty(200),
        Err(e) => io_answer(call, &e, &destination),
    }
}

fn remove(call: &Call, path: Option<String>, recursive: bool) -> SimResponse {
    let Some(path) = path else {
        return call.error(400, "path is required");
    };
    let full = match entry(call, &path) {
        Ok(f) => f,
        Err(answer) => return answer,
    };
    let result = match std::fs::symlink_metadata(&full) {
        Ok(m) if m.is_dir() && !recursive => {
            return call.error(400, &format!("{path} is a directory: set recursive=true"));
        }
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(&full),
        Ok(_) => std::fs::remove_file(&full),
        Err(e) => Err(e),
    };
    match result {
        Ok(()) => SimResponse::empty(204),
        Err(e) => io_answer(call, &e, &path),
    }
}

/// One part of a `multipart/form-data` body.
struct Part {
    name: String,
    data: Bytes,
}

/// The parts of the request's `multipart/form-data` body.
fn parse_multipart(call: &Call) -> Result<Vec<Part>, String> {
    let content_type = call.request.header("content-type").unwrap_or_default();
    let boundary = content_type
        .split(';')
        .find_map(|p| p.trim().strip_prefix("boundary="))
        .map(|b| b.trim_matches('"').to_owned())
        .ok_or("request Content-Type isn't multipart/form-data")?;
    let body = &call.request.body;
    let delimiter = format!("--{boundary}");
    let positions: Vec<usize> = find_all(body, delimiter.as_bytes());
    if positions.is_empty() {
        return Err("multipart: NextPart: EOF".into());
    }
    let mut parts = Vec::new();
    for pair in positions.windows(2) {
        let mut start = pair[0] + delimiter.len();
        if body[start..].starts_with(b"\r\n") {
            start += 2;
        }
        // The part ends before the CRLF that precedes the next delimiter.
        let end = pair[1].saturating_sub(2).max(start);
        let part = body.slice(start..end);
        let Some(split) = find_all(&part, b"\r\n\r\n").first().copied() else {
            return Err("multipart: malformed part".into());
        };
        let head = String::from_utf8_lossy(&part[..split]).into_owned();
        let name = head
            .lines()
            .find(|l| l.to_ascii_lowercase().starts_with("content-disposition"))
            .and_then(|l| l.split(';').find_map(|p| p.trim().strip_prefix("name=")))
            .map(|n| n.trim_matches('"').to_owned())
            .unwrap_or_default();
        parts.push(Part {
            name,
            data: part.slice(split + 4..),
        });
    }
    Ok(parts)
}

fn find_all(haystack: &[u8], needle: &[u8]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut i = 0;
    while i + needle.len() <= haystack.len() {
        if &haystack[i..i + needle.len()] == needle {
            out.push(i);
            i += needle.len();
        } else {
            i += 1;
        }
    }
    out
}
