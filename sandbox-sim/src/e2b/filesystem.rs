//! `filesystem.Filesystem` (PROTOCOL.md §2.4): entries as protojson `EntryInfo`, and directory
//! watching (a stream, or a watcher polled with `GetWatcherEvents`) by comparing the
//! directory's listing every few milliseconds.

use super::connect::{self, RpcError, StreamTx};
use super::{HOME, Sandbox, lock, random_hex};
use crate::{SimRequest, SimResponse};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// How often a watch looks at its directory.
const POLL: Duration = Duration::from_millis(50);

/// Serves one `filesystem.Filesystem` call.
pub(crate) async fn handle(sb: &Arc<Sandbox>, request: SimRequest) -> SimResponse {
    let method = request.path.rsplit('/').next().unwrap_or("").to_owned();
    if let Err(e) = super::connect::user_of(&request) {
        return if method == "WatchDir" {
            connect::stream_error(&request, &e)
        } else {
            connect::unary_err(&e)
        };
    }
    let message = match connect::request_message(&request) {
        Ok(m) => m,
        Err(e) if method == "WatchDir" => return connect::stream_error(&request, &e),
        Err(e) => return connect::unary_err(&e),
    };
    let path = message["path"].as_str().unwrap_or("");
    let result = match method.as_str() {
        "Stat" => stat(sb, path),
        "ListDir" => list_dir(sb, path, message["depth"].as_u64().unwrap_or(1)),
        "MakeDir" => make_dir(sb, path),
        "Move" => move_entry(
            sb,
            message["source"].as_str().unwrap_or(""),
            message["destination"].as_str().unwrap_or(""),
        ),
        "Remove" => remove(sb, path),
        "WatchDir" => {
            return match watch_dir(sb, &request, &message) {
                Ok(r) => r,
                Err(e) => connect::stream_error(&request, &e),
            };
        }
        "CreateWatcher" => create_watcher(sb, &message),
        "GetWatcherEvents" => watcher_events(sb, &message),
        "RemoveWatcher" => remove_watcher(sb, &message),
        _ => Err(RpcError::new(
            "unimplemented",
            format!("filesystem.Filesystem/{method} is not implemented"),
        )),
    };
    match result {
        Ok(value) => connect::unary_ok(&request, &value),
        Err(e) => connect::unary_err(&e),
    }
}

/// RFC 3339 in UTC with 0, 3, 6 or 9 fractional digits, as protojson writes a Timestamp.
fn timestamp(time: SystemTime) -> String {
    let base = sandbox_sdk_core::time::format_rfc3339(time);
    let nanos = time
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    let fraction = match nanos {
        0 => String::new(),
        n if n % 1_000_000 == 0 => format!(".{:03}", n / 1_000_000),
        n if n % 1_000 == 0 => format!(".{:06}", n / 1_000),
        n => format!(".{n:09}"),
    };
    format!("{}{fraction}Z", base.trim_end_matches('Z'))
}

/// Go's `FileMode` bits and its `String()` form.
fn mode(meta: &std::fs::Metadata) -> (u32, String) {
    use std::os::unix::fs::PermissionsExt;
    let perm = meta.permissions().mode() & 0o777;
    let (bits, lead) = if meta.is_dir() {
        (1u32 << 31, 'd')
    } else if meta.file_type().is_symlink() {
        (1u32 << 27, 'L')
    } else {
        (0, '-')
    };
    let mut text = String::from(lead);
    for (i, c) in "rwxrwxrwx".chars().enumerate() {
        text.push(if perm & (1 << (8 - i)) != 0 { c } else { '-' });
    }
    (bits | perm, text)
}

/// The `EntryInfo` of a host path (its link, for a symbolic link).
pub(crate) fn entry(sb: &Sandbox, host: &Path) -> std::io::Result<Value> {
    let meta = std::fs::symlink_metadata(host)?;
    let kind = if meta.is_dir() {
        "FILE_TYPE_DIRECTORY"
    } else if meta.file_type().is_symlink() {
        "FILE_TYPE_SYMLINK"
    } else {
        "FILE_TYPE_FILE"
    };
    let (bits, permissions) = mode(&meta);
    let mut v = json!({
        "name": host.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        "type": kind,
        "path": sb.shown(host),
        "mode": bits,
        "permissions": permissions,
        "owner": "user",
        "group": "user",
        "modifiedTime": timestamp(meta.modified().unwrap_or(SystemTime::UNIX_EPOCH)),
    });
    if meta.len() != 0 {
        v["size"] = json!(meta.len().to_string());
    }
    if meta.file_type().is_symlink()
        && let Ok(target) = std::fs::read_link(host)
    {
        v["symlinkTarget"] = json!(target.to_string_lossy());
    }
    if let Some(m) = lock(&sb.file_meta).get(host).filter(|m| !m.is_empty()) {
        v["metadata"] = json!(m);
    }
    Ok(v)
}

/// The host path `path` names, or the error of a path that cannot be resolved (too many
/// links), with the path as envd shows it.
fn host_of(resolved: (String, std::io::Result<PathBuf>)) -> Result<(String, PathBuf), RpcError> {
    match resolved {
        (shown, Ok(host)) => Ok((shown, host)),
        (shown, Err(e)) => Err(RpcError::invalid(format!("{shown}: {e}"))),
    }
}

fn io_text(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file or directory".into(),
        _ => e.to_string(),
    }
}

fn stat(sb: &Sandbox, path: &str) -> Result<Value, RpcError> {
    let (shown, host) = host_of(sb.entry(path))?;
    entry(sb, &host)
        .map(|e| json!({ "entry": e }))
        .map_err(|e| RpcError::not_found(format!("file not found: stat {shown}: {}", io_text(&e))))
}

fn list_dir(sb: &Sandbox, path: &str, depth: u64) -> Result<Value, RpcError> {
    let (shown, host) = host_of(sb.resolve(path))?;
    match std::fs::metadata(&host) {
        Err(e) => {
            return Err(RpcError::not_found(format!(
                "directory not found: stat {shown}: {}",
                io_text(&e)
            )));
        }
        Ok(m) if !m.is_dir() => {
            return Err(RpcError::invalid(format!(
                "path is not a directory: {shown}"
            )));
        }
        Ok(_) => {}
    }
    let mut entries = Vec::new();
    walk(sb, &host, depth.max(1), &mut entries);
    Ok(json!({ "entries": entries }))
}

fn walk(sb: &Sandbox, dir: &Path, depth: u64, out: &mut Vec<Value>) {
    let mut children: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .collect();
    children.sort();
    for child in children {
        if let Ok(e) = entry(sb, &child) {
            out.push(e);
        }
        let is_dir = std::fs::symlink_metadata(&child).is_ok_and(|m| m.is_dir());
        if depth > 1 && is_dir {
            walk(sb, &child, depth - 1, out);
        }
    }
}

fn make_dir(sb: &Sandbox, path: &str) -> Result<Value, RpcError> {
    let (shown, host) = host_of(sb.resolve(path))?;
    match std::fs::metadata(&host) {
        Ok(m) if m.is_dir() => {
            return Err(RpcError::new(
                "already_exists",
                format!("directory already exists: {shown}"),
            ));
        }
        Ok(_) => {
            return Err(RpcError::invalid(format!(
                "path already exists but it is not a directory: {shown}"
            )));
        }
        Err(_) => {}
    }
    std::fs::create_dir_all(&host)
        .map_err(|e| RpcError::new("internal", format!("error making directory {shown}: {e}")))?;
    let e = entry(sb, &host).map_err(|e| RpcError::new("internal", e.to_string()))?;
    Ok(json!({ "entry": e }))
}

fn move_entry(sb: &Sandbox, source: &str, destination: &str) -> Result<Value, RpcError> {
    let (from_shown, from) = host_of(sb.entry(source))?;
    let (to_shown, to) = host_of(sb.entry(destination))?;
    if std::fs::symlink_metadata(&from).is_err() {
        return Err(RpcError::not_found(format!(
            "source file not found: stat {from_shown}: no such file or directory"
        )));
    }
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent).map_err(|e| {
            RpcError::new(
                "internal",
                format!("error making directory for {to_shown}: {e}"),
            )
        })?;
    }
    std::fs::rename(&from, &to).map_err(|e| {
        RpcError::new(
            "internal",
            format!("error renaming {from_shown} to {to_shown}: {e}"),
        )
    })?;
    if let Some(m) = lock(&sb.file_meta).remove(&from) {
        lock(&sb.file_meta).insert(to.clone(), m);
    }
    let e = entry(sb, &to).map_err(|e| RpcError::new("internal", e.to_string()))?;
    Ok(json!({ "entry": e }))
}

fn remove(sb: &Sandbox, path: &str) -> Result<Value, RpcError> {
    let (shown, host) = host_of(sb.entry(path))?;
    // Never the sandbox's `/` or what holds the home.
    if Path::new(HOME).starts_with(&shown) || sb.home().starts_with(&host) {
        return Err(RpcError::new(
            "permission_denied",
            format!("refusing to remove {shown}"),
        ));
    }
    let meta = std::fs::symlink_metadata(&host).map_err(|e| {
        RpcError::not_found(format!("file not found: stat {shown}: {}", io_text(&e)))
    })?;
    let removed = if meta.is_dir() {
        std::fs::remove_dir_all(&host)
    } else {
        std::fs::remove_file(&host)
    };
    removed.map_err(|e| RpcError::new("internal", format!("error removing {shown}: {e}")))?;
    lock(&sb.file_meta).retain(|p, _| !p.starts_with(&host));
    Ok(json!({}))
}

/// (is a directory, size, modified) of every entry under a directory.
type Listing = HashMap<PathBuf, (bool, u64, SystemTime)>;

fn scan(dir: &Path, recursive: bool, out: &mut Listing) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let Ok(meta) = e.metadata() else { continue };
        let path = e.path();
        out.insert(
            path.clone(),
            (
                meta.is_dir(),
                meta.len(),
                meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            ),
        );
        if recursive && meta.is_dir() {
            scan(&path, true, out);
        }
    }
}

/// The `FilesystemEvent`s between two listings, as inotify would order them.
fn changes(
    sb: &Sandbox,
    dir: &Path,
    old: &Listing,
    new: &Listing,
    include_entry: bool,
) -> Vec<Value> {
    let event = |path: &Path, kind: &str| {
        let name = path
            .strip_prefix(dir)
            .unwrap_or(path)
            .to_string_lossy()
            .into_owned();
        let mut v = json!({"name": name, "type": kind});
        if include_entry
            && kind != "EVENT_TYPE_REMOVE"
            && let Ok(e) = entry(sb, path)
        {
            v["entry"] = e;
        }
        v
    };
    let mut out = Vec::new();
    let mut paths: Vec<&PathBuf> = new.keys().chain(old.keys()).collect();
    paths.sort();
    paths.dedup();
    for path in paths {
        match (old.get(path), new.get(path)) {
            (None, Some((is_dir, len, _))) => {
                out.push(event(path, "EVENT_TYPE_CREATE"));
                if !is_dir && *len > 0 {
                    out.push(event(path, "EVENT_TYPE_WRITE"));
                }
            }
            (Some(_), None) => out.push(event(path, "EVENT_TYPE_REMOVE")),
            (Some((_, l0, m0)), Some((false, l1, m1))) if l0 != l1 || m0 != m1 => {
                out.push(event(path, "EVENT_TYPE_WRITE"));
            }
            _ => {}
        }
    }
    out
}

/// The watched directory of a `WatchDir`/`CreateWatcher` request.
fn watched(sb: &Sandbox, message: &Value) -> Result<PathBuf, RpcError> {
    let (shown, host) = host_of(sb.resolve(message["path"].as_str().unwrap_or("")))?;
    match std::fs::metadata(&host) {
        Err(e) => Err(RpcError::not_found(format!(
            "path {shown} not found: {}",
            io_text(&e)
        ))),
        Ok(m) if !m.is_dir() => Err(RpcError::invalid(format!("path {shown} not a directory"))),
        Ok(_) => Ok(host),
    }
}

fn watch_dir(
    sb: &Arc<Sandbox>,
    request: &SimRequest,
    message: &Value,
) -> Result<SimResponse, RpcError> {
    let dir = watched(sb, message)?;
    let recursive = message["recursive"].as_bool().unwrap_or(false);
    let include = message["includeEntry"].as_bool().unwrap_or(false);
    let (response, tx) = connect::stream(request);
    let keepalive = connect::keepalive_interval(request);
    let deadline = connect::deadline(request).map(|d| tokio::time::Instant::now() + d);
    let sb = Arc::downgrade(sb);
    tokio::spawn(async move {
        let mut listing = Listing::new();
        scan(&dir, recursive, &mut listing);
        if !tx.send(&json!({"start": {}})).await {
            return;
        }
        let mut quiet_since = tokio::time::Instant::now();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(POLL) => {}
                _ = tx.closed() => return,
            }
            let Some(sb) = sb.upgrade() else {
                return end(tx, "unavailable", "the sandbox is gone").await;
            };
            if deadline.is_some_and(|at| tokio::time::Instant::now() >= at) {
                return end(tx, "deadline_exceeded", "context deadline exceeded").await;
            }
            let mut now = Listing::new();
            scan(&dir, recursive, &mut now);
            for event in changes(&sb, &dir, &listing, &now, include) {
                if !tx.send(&json!({ "filesystem": event })).await {
                    return;
                }
                quiet_since = tokio::time::Instant::now();
            }
            listing = now;
            if quiet_since.elapsed() >= keepalive {
                if !tx.send(&json!({"keepalive": {}})).await {
                    return;
                }
                quiet_since = tokio::time::Instant::now();
            }
        }
    });
    Ok(response)
}

async fn end(tx: StreamTx, code: &'static str, message: &str) {
    tx.end(Some(&RpcError::new(code, message))).await
}

/// A watcher made by `CreateWatcher`: its events wait for `GetWatcherEvents`.
pub(crate) struct Watcher {
    events: Arc<Mutex<Vec<Value>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn create_watcher(sb: &Arc<Sandbox>, message: &Value) -> Result<Value, RpcError> {
    let dir = watched(sb, message)?;
    let recursive = message["recursive"].as_bool().unwrap_or(false);
    let include = message["includeEntry"].as_bool().unwrap_or(false);
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = events.clone();
    let weak = Arc::downgrade(sb);
    let task = tokio::spawn(async move {
        let mut listing = Listing::new();
        scan(&dir, recursive, &mut listing);
        loop {
            tokio::time::sleep(POLL).await;
            let Some(sb) = weak.upgrade() else { return };
            let mut now = Listing::new();
            scan(&dir, recursive, &mut now);
            lock(&sink).extend(changes(&sb, &dir, &listing, &now, include));
            listing = now;
        }
    });
    let id = random_hex(16);
    lock(&sb.watchers).insert(id.clone(), Watcher { events, task });
    Ok(json!({ "watcherId": id }))
}

fn watcher_id(message: &Value) -> String {
    message["watcherId"].as_str().unwrap_or("").to_owned()
}

fn watcher_events(sb: &Sandbox, message: &Value) -> Result<Value, RpcError> {
    let id = watcher_id(message);
    let watchers = lock(&sb.watchers);
    let w = watchers
        .get(&id)
        .ok_or_else(|| RpcError::not_found(format!("watcher with id {id} not found")))?;
    let events: Vec<Value> = std::mem::take(&mut *lock(&w.events));
    Ok(json!({ "events": events }))
}

fn remove_watcher(sb: &Sandbox, message: &Value) -> Result<Value, RpcError> {
    let id = watcher_id(message);
    match lock(&sb.watchers).remove(&id) {
        Some(_) => Ok(json!({})),
        None => Err(RpcError::not_found(format!(
            "watcher with id {id} not found"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_use_0_3_6_or_9_digits() {
        let t = SystemTime::UNIX_EPOCH + Duration::new(1_767_225_600, 0);
        assert_eq!(timestamp(t), "2026-01-01T00:00:00Z");
        assert_eq!(
            timestamp(t + Duration::from_millis(5)),
            "2026-01-01T00:00:00.005Z"
        );
        assert_eq!(
            timestamp(t + Duration::from_nanos(123_456_789)),
            "2026-01-01T00:00:00.123456789Z"
        );
    }
}
