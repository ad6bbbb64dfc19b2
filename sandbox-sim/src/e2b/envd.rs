//! The edge proxy in front of envd (routing headers, its error bodies, auto-resume) and envd's
//! plain HTTP side: the access-token gate, `/files`, `/health`, `/envs`, `/metrics`.

// A refusal is its whole HTTP answer, made once per request: boxing it buys nothing.
#![allow(clippy::result_large_err)]

use super::connect::{self, gunzip, offers_gzip};
use super::{ENVD_PORT, Phase, Sandbox, State, api, filesystem, lock, process};
use crate::{SimRequest, SimResponse};
use bytes::Bytes;
use http::Method;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// envd's control endpoints, which the public proxy refuses.
const CONTROL: &[&str] = &[
    "/init",
    "/freeze",
    "/unfreeze",
    "/fsfreeze",
    "/fsthaw",
    "/collapse",
    "/upgrade",
];

const RPC_PREFIXES: &[&str] = &["/process.Process/", "/filesystem.Filesystem/"];

/// Whether a request is for envd (through the proxy) rather than the control plane.
pub(crate) fn is_envd(request: &SimRequest) -> bool {
    request.header("e2b-sandbox-id").is_some()
        || request.header("e2b-sandbox-port").is_some()
        || RPC_PREFIXES.iter().any(|p| request.path.starts_with(p))
        || request.path == "/files"
        || request.path.starts_with("/files/")
        || request.path == "/envs"
        || CONTROL.contains(&request.path.as_str())
}

/// The operation name of an envd request.
pub(crate) fn operation(request: &SimRequest) -> &'static str {
    let path = request.path.as_str();
    if request.header("e2b-sandbox-port") == Some(&super::interpreter::PORT.to_string()) {
        match path {
            "/execute" => return "run_code",
            _ if path.starts_with("/contexts") => return "code_contexts",
            _ => {}
        }
    }
    match (request.method.as_str(), path) {
        ("GET", "/files") => return "files.read",
        ("POST", "/files") => return "files.write",
        (_, "/health") => return "health",
        _ => {}
    }
    match path.rsplit('/').next().unwrap_or("") {
        _ if !RPC_PREFIXES.iter().any(|p| path.starts_with(p)) => "other",
        "Start" => "exec",
        "Connect" => "exec.output",
        "SendInput" | "StreamInput" | "CloseStdin" => "stdin",
        "SendSignal" => "kill",
        "List" => "exec.list",
        "Update" => "exec.update",
        "ListDir" => "files.list",
        "Stat" => "files.stat",
        "MakeDir" => "files.mkdir",
        "Move" => "files.move",
        "Remove" => "files.remove",
        "WatchDir" | "CreateWatcher" | "GetWatcherEvents" | "RemoveWatcher" => "files.watch",
        _ => "other",
    }
}

/// A body of the edge proxy.
fn proxy_error(status: u16, body: Value) -> SimResponse {
    SimResponse::bytes(
        status,
        Some("application/json; charset=utf-8"),
        serde_json::to_vec(&body).unwrap_or_default().into(),
    )
}

fn not_found(id: &str) -> SimResponse {
    proxy_error(
        502,
        json!({"sandboxId": id, "message": "The sandbox was not found", "code": 502}),
    )
}

/// envd's own HTTP error: `{"code":N,"message":…}` and a newline.
pub(crate) fn envd_error(status: u16, message: &str) -> SimResponse {
    let mut body =
        serde_json::to_vec(&json!({"code": status, "message": message})).unwrap_or_default();
    body.push(b'\n');
    SimResponse::bytes(status, Some("application/json; charset=utf-8"), body.into())
        .header("x-content-type-options", "nosniff")
}

const UNAUTHORIZED: &str =
    "unauthorized access, please provide a valid access token or method signing if supported";

/// Admits an envd request from its head: the credentials of an existing sandbox (the traffic
/// token on a port other than envd's; on envd's, `X-Access-Token`, or on `/files` a valid
/// signature instead), then the body cap (an upload to `/files` and stdin up to
/// [`crate::MAX_REQUEST_BODY`], JSON elsewhere). A request the proxy refuses anyway (no
/// routing headers, no such sandbox) is let through to that answer, with a JSON cap. The
/// credentials come before the proxy's look at the sandbox's state, so a caller without them
/// neither wakes a paused sandbox nor makes the simulator read a body.
pub(crate) fn admit(state: &State, request: &SimRequest) -> Result<usize, SimResponse> {
    let json = Ok(crate::MAX_JSON_BODY);
    let (Some(id), Some(port)) = (
        request.header("e2b-sandbox-id"),
        request.header("e2b-sandbox-port"),
    ) else {
        return json;
    };
    let Some(sb) = state.get(id) else {
        return json;
    };
    let path = request.path.as_str();
    if port != ENVD_PORT.to_string() {
        return match traffic_refusal(&sb, request) {
            Some(refused) => Err(refused),
            None => json,
        };
    }
    if CONTROL.contains(&path) || path == "/health" {
        return json;
    }
    let token_ok = request.header("x-access-token") == Some(sb.envd_token.as_str());
    let refused = match (request.method.as_str(), path) {
        ("GET", "/files") => files_auth(&sb, request, token_ok, "read"),
        ("POST", "/files") => files_auth(&sb, request, token_ok, "write"),
        (_, "/files") => None,
        _ => (!token_ok).then(|| envd_error(401, UNAUTHORIZED)),
    };
    if let Some(refused) = refused {
        return Err(refused);
    }
    let stdin = path.ends_with("/SendInput") || path.ends_with("/StreamInput");
    Ok(match (request.method.as_str(), path) {
        ("POST", "/files") => crate::MAX_REQUEST_BODY,
        ("POST", _) if stdin => crate::MAX_REQUEST_BODY,
        _ => crate::MAX_JSON_BODY,
    })
}

/// The proxy's 403 for a port other than envd's of a sandbox secured with a traffic access
/// token, when the request does not carry it.
fn traffic_refusal(sb: &Sandbox, request: &SimRequest) -> Option<SimResponse> {
    let token = sb.traffic_token.as_ref()?;
    let problem = match request.header("e2b-traffic-access-token") {
        None => "is missing",
        Some(given) if given != token => "is invalid",
        Some(_) => return None,
    };
    Some(proxy_error(
        403,
        json!({"sandboxId": sb.id, "message": format!("Sandbox is secured with traffic access token. Token header 'e2b-traffic-access-token' {problem}"), "code": 403}),
    ))
}

/// Routes an admitted envd request ([`admit`] checked its credentials) through the proxy.
pub(crate) async fn handle(state: Arc<State>, request: SimRequest) -> SimResponse {
    let (id, port) = match (
        request.header("e2b-sandbox-id"),
        request.header("e2b-sandbox-port"),
    ) {
        (Some(id), Some(port)) => (id.to_owned(), port.to_owned()),
        (_, None) => return missing_header("E2b-Sandbox-Port"),
        (None, _) => return missing_header("E2b-Sandbox-Id"),
    };
    if id.is_empty()
        || !id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    {
        return proxy_error(
            400,
            json!({"message": format!("Invalid sandbox ID: {id}"), "code": 400}),
        );
    }
    let Some(sb) = state.get(&id) else {
        return not_found(&id);
    };
    match sb.phase() {
        Phase::Running => {}
        Phase::Pausing | Phase::Resuming => {
            return proxy_error(
                409,
                json!({"sandboxId": id, "message": "The sandbox is still transitioning. Try again in a moment.", "code": 409}),
            );
        }
        Phase::Paused if sb.auto_resume => {
            if let Err(answer) = api::resume_now(&state, &sb, None).await {
                return *answer;
            }
        }
        Phase::Paused => return not_found(&id),
    }
    if port != ENVD_PORT.to_string() {
        if port == super::interpreter::PORT.to_string() && sb.serves_interpreter() {
            return super::interpreter::handle(&sb, request).await;
        }
        let port: u64 = port.parse().unwrap_or(0);
        return proxy_error(
            502,
            json!({"sandboxId": id, "message": "The sandbox is running but port is not open", "port": port, "code": 502}),
        );
    }
    if CONTROL.contains(&request.path.as_str()) {
        return proxy_error(
            404,
            json!({"message": "This endpoint is reserved for the E2B control plane and is not reachable through the sandbox URL", "path": request.path, "code": 404}),
        );
    }
    if request.path == "/health" {
        return SimResponse::empty(204).header("cache-control", "no-store");
    }
    if request.path == "/files" {
        return files(&sb, &request).await;
    }
    match (request.method.as_str(), request.path.as_str()) {
        ("GET", "/envs") => SimResponse::json(200, &sb.env),
        ("GET", "/metrics") => SimResponse::json(200, &envd_metrics(&sb)),
        ("POST", path) if path.starts_with("/process.Process/") => {
            process::handle(&sb, request).await
        }
        ("POST", path) if path.starts_with("/filesystem.Filesystem/") => {
            filesystem::handle(&sb, request).await
        }
        _ if RPC_PREFIXES.iter().any(|p| request.path.starts_with(p)) => {
            SimResponse::empty(405).header("allow", "POST")
        }
        _ => envd_error(404, "Not Found"),
    }
}

fn missing_header(name: &str) -> SimResponse {
    proxy_error(
        400,
        json!({"message": format!("Missing header: {name}"), "code": 400}),
    )
}

/// `v1_` + base64 (no padding) of sha256 of `path:operation:user:token[:expiration]`.
pub(crate) fn signature(
    path: &str,
    operation: &str,
    user: &str,
    token: &str,
    expiration: Option<u64>,
) -> String {
    use base64::Engine;
    use sha2::Digest;
    let mut text = format!("{path}:{operation}:{user}:{token}");
    if let Some(exp) = expiration {
        text.push_str(&format!(":{exp}"));
    }
    let hash = sha2::Sha256::digest(text.as_bytes());
    format!(
        "v1_{}",
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(hash)
    )
}

/// The `/files` gate: the token, or else a valid signature.
fn files_auth(sb: &Sandbox, request: &SimRequest, token_ok: bool, op: &str) -> Option<SimResponse> {
    if request.header("x-access-token").is_some() {
        return (!token_ok).then(|| envd_error(401, UNAUTHORIZED));
    }
    let Some(given) = request.query_param("signature") else {
        return Some(envd_error(401, "missing signature query parameter"));
    };
    let expiration = request
        .query_param("signature_expiration")
        .and_then(|e| e.parse::<u64>().ok());
    if let Some(exp) = expiration {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        if exp < now {
            return Some(envd_error(401, "signature is already expired"));
        }
    }
    let path = request.query_param("path").unwrap_or_default();
    let user = request.query_param("username").unwrap_or_default();
    let want = signature(&path, op, &user, &sb.envd_token, expiration);
    (given != want).then(|| envd_error(401, "invalid signature"))
}

async fn files(sb: &Arc<Sandbox>, request: &SimRequest) -> SimResponse {
    let op = match request.method {
        Method::GET => "read",
        Method::POST => "write",
        _ => return SimResponse::empty(405).header("allow", "GET, POST"),
    };
    if let Some(user) = request.query_param("username").filter(|u| !u.is_empty())
        && connect::check_user(&user).is_err()
    {
        return envd_error(
            401,
            &format!("error looking up user '{user}': user: unknown user {user}"),
        );
    }
    if op == "read" {
        download(sb, request).await
    } else {
        upload(sb, request).await
    }
}

async fn download(sb: &Sandbox, request: &SimRequest) -> SimResponse {
    let path = request.query_param("path").unwrap_or_default();
    let (shown, host) = sb.resolve(&path);
    let host = match host {
        Ok(h) => h,
        Err(e) => return envd_error(500, &format!("error opening file '{shown}': {e}")),
    };
    let meta = match tokio::fs::metadata(&host).await {
        Ok(m) => m,
        Err(_) => return envd_error(404, &format!("path '{shown}' does not exist")),
    };
    if meta.is_dir() {
        return envd_error(400, &format!("path '{shown}' is a directory"));
    }
    let data = match tokio::fs::read(&host).await {
        Ok(d) => d,
        Err(e) => return envd_error(500, &format!("error opening file '{shown}': {e}")),
    };
    let name = Path::new(&shown)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let modified = meta.modified().unwrap_or(UNIX_EPOCH);
    let with_headers = |r: SimResponse| {
        r.header("accept-ranges", "bytes")
            .header(
                "content-disposition",
                &format!("inline; filename=\"{name}\""),
            )
            .header("last-modified", &http_date(modified))
            .header("vary", "Accept-Encoding")
    };
    let content_type = content_type(&name, &data);
    if let Some(range) = request.header("range") {
        return match byte_range(range, data.len()) {
            Some((start, end)) => with_headers(SimResponse::bytes(
                206,
                Some(content_type),
                Bytes::copy_from_slice(&data[start..end]),
            ))
            .header(
                "content-range",
                &format!("bytes {start}-{}/{}", end - 1, data.len()),
            ),
            None => {
                SimResponse::empty(416).header("content-range", &format!("bytes */{}", data.len()))
            }
        };
    }
    if offers_gzip(request.header("accept-encoding")) && !data.is_empty() {
        let body = futures::stream::once(async move { Ok(Bytes::from(connect::gzip(&data))) });
        return with_headers(SimResponse::stream(200, content_type, Box::pin(body)))
            .header("content-encoding", "gzip");
    }
    with_headers(SimResponse::bytes(200, Some(content_type), data.into()))
}

/// `bytes=a-b`, `bytes=a-` or `bytes=-n` → the half-open byte range, when satisfiable.
fn byte_range(header: &str, len: usize) -> Option<(usize, usize)> {
    let spec = header.trim().strip_prefix("bytes=")?;
    let (a, b) = spec.split_once('-')?;
    let (start, end) = match (a.trim(), b.trim()) {
        ("", n) => {
            let n: usize = n.parse().ok()?;
            (len.saturating_sub(n), len)
        }
        (a, "") => (a.parse().ok()?, len),
        (a, b) => (
            a.parse().ok()?,
            b.parse::<usize>().ok()?.saturating_add(1).min(len),
        ),
    };
    (start < end && start < len).then_some((start, end))
}

/// A content type by extension, else by a look at the bytes (as Go's `ServeContent`).
fn content_type(name: &str, data: &[u8]) -> &'static str {
    match name.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase()) {
        Some(e) if e == "txt" => "text/plain; charset=utf-8",
        Some(e) if e == "json" => "application/json",
        Some(e) if e == "html" || e == "htm" => "text/html; charset=utf-8",
        Some(e) if e == "png" => "image/png",
        Some(e) if e == "js" || e == "mjs" => "text/javascript; charset=utf-8",
        _ if !data.contains(&0) && std::str::from_utf8(&data[..data.len().min(512)]).is_ok() => {
            "text/plain; charset=utf-8"
        }
        _ => "application/octet-stream",
    }
}

/// An IMF-fixdate (`Mon, 02 Jan 2006 15:04:05 GMT`).
fn http_date(time: SystemTime) -> String {
    let iso = sandbox_sdk_core::time::format_rfc3339(time);
    let secs = time
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let day = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][((secs / 86_400) % 7) as usize];
    let month = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ][iso[5..7].parse::<usize>().unwrap_or(1) - 1];
    format!(
        "{day}, {} {month} {} {} GMT",
        &iso[8..10],
        &iso[0..4],
        &iso[11..19]
    )
}

/// The files of an upload: (destination as given, content).
fn upload_parts(request: &SimRequest) -> Result<Vec<(String, Vec<u8>)>, String> {
    let body = if request.header("content-encoding") == Some("gzip") {
        gunzip(&request.body).map_err(|e| format!("failed to decompress the body: {e}"))?
    } else {
        request.body.to_vec()
    };
    let content_type = request.header("content-type").unwrap_or("");
    let path = request.query_param("path").filter(|p| !p.is_empty());
    if content_type.starts_with("application/octet-stream") {
        let path = path.ok_or("path is required for application/octet-stream uploads")?;
        return Ok(vec![(path, body)]);
    }
    if !content_type.starts_with("multipart/form-data") {
        return Err(format!("unsupported content type: {content_type}"));
    }
    let boundary = content_type
        .split(';')
        .filter_map(|p| p.trim().strip_prefix("boundary="))
        .next()
        .map(|b| b.trim_matches('"').to_owned())
        .ok_or("multipart body without a boundary")?;
    let parts = multipart(&body, &boundary)?;
    let mut out = Vec::new();
    for (name, filename, data) in parts {
        if name != "file" {
            continue;
        }
        let dest = path
            .clone()
            .or(filename)
            .ok_or("a file part has neither a filename nor ?path")?;
        out.push((dest, data));
    }
    Ok(out)
}

/// One part of a multipart body: (field name, filename, content).
type Part = (String, Option<String>, Vec<u8>);

/// The parts of a multipart body.
fn multipart(body: &[u8], boundary: &str) -> Result<Vec<Part>, String> {
    let delimiter = format!("--{boundary}");
    let find = |hay: &[u8], needle: &[u8], from: usize| {
        hay[from.min(hay.len())..]
            .windows(needle.len())
            .position(|w| w == needle)
            .map(|i| i + from)
    };
    let mut pos = find(body, delimiter.as_bytes(), 0).ok_or("multipart body without parts")?;
    let mut parts = Vec::new();
    loop {
        pos += delimiter.len();
        if body[pos..].starts_with(b"--") {
            return Ok(parts);
        }
        let head_start = pos + 2;
        let head_end =
            find(body, b"\r\n\r\n", head_start).ok_or("multipart part without headers")?;
        let head = String::from_utf8_lossy(&body[head_start..head_end]).into_owned();
        let data_start = head_end + 4;
        let next = find(body, format!("\r\n{delimiter}").as_bytes(), data_start)
            .ok_or("multipart body without its closing boundary")?;
        let disposition = head
            .lines()
            .find(|l| l.to_ascii_lowercase().starts_with("content-disposition:"))
            .unwrap_or("");
        parts.push((
            param(disposition, "name").unwrap_or_default(),
            param(disposition, "filename"),
            body[data_start..next].to_vec(),
        ));
        pos = next + 2;
    }
}

/// A `key="value"` parameter of a header line.
fn param(line: &str, key: &str) -> Option<String> {
    line.split(';').skip(1).find_map(|p| {
        let (k, v) = p.trim().split_once('=')?;
        (k.eq_ignore_ascii_case(key)).then(|| v.trim().trim_matches('"').replace("\\\"", "\""))
    })
}

async fn upload(sb: &Sandbox, request: &SimRequest) -> SimResponse {
    let files = match upload_parts(request) {
        Ok(f) => f,
        Err(e) => return envd_error(400, &e),
    };
    let mut metadata = BTreeMap::new();
    for (name, value) in &request.headers {
        if let Some(key) = name.as_str().strip_prefix("x-metadata-") {
            match value.to_str() {
                Ok(v) => metadata.insert(key.to_owned(), v.to_owned()),
                Err(_) => return envd_error(400, "invalid metadata header value"),
            };
        }
    }
    let mut seen = std::collections::HashSet::new();
    let mut written = Vec::new();
    for (dest, data) in files {
        let (shown, host) = sb.resolve(&dest);
        let host = match host {
            Ok(h) => h,
            Err(e) => return envd_error(500, &format!("error writing file '{shown}': {e}")),
        };
        if !seen.insert(shown.clone()) {
            return envd_error(
                400,
                &format!("cannot upload multiple files to the same path '{shown}'"),
            );
        }
        if host.is_dir() {
            return envd_error(400, &format!("path '{shown}' is a directory"));
        }
        if let Some(parent) = host.parent()
            && let Err(e) = tokio::fs::create_dir_all(parent).await
        {
            return envd_error(
                400,
                &format!("error creating parent directories of '{shown}': {e}"),
            );
        }
        if let Err(e) = tokio::fs::write(&host, &data).await {
            let status = if e.raw_os_error() == Some(28) {
                507
            } else {
                500
            };
            return envd_error(status, &format!("error writing file '{shown}': {e}"));
        }
        if metadata.is_empty() {
            lock(&sb.file_meta).remove(&host);
        } else {
            lock(&sb.file_meta).insert(host.clone(), metadata.clone());
        }
        let mut entry = json!({
            "name": Path::new(&shown).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
            "path": shown,
            "type": "file",
        });
        if !metadata.is_empty() {
            entry["metadata"] = json!(metadata);
        }
        written.push(entry);
    }
    SimResponse::bytes(
        200,
        Some("text/plain; charset=utf-8"),
        serde_json::to_vec(&written).unwrap_or_default().into(),
    )
}

fn envd_metrics(sb: &Sandbox) -> Value {
    let (disk_used, mem_used) = super::api::usage(sb);
    json!({
        "ts": SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs(),
        "cpu_count": 2,
        "cpu_used_pct": 0.0,
        "mem_total": 512u64 << 20,
        "mem_used": mem_used,
        "mem_cache": 0,
        "mem_total_mib": 512,
        "mem_used_mib": mem_used >> 20,
        "disk_used": disk_used,
        "disk_total": 22_000u64 << 20,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_matches_the_protocol_example() {
        assert_eq!(
            signature("/home/user/a.txt", "read", "", "tok_envd_123", None),
            "v1_zpcfuBvTQ7Iw5iRRDlW6Y7v3hP25/WWkbW2cRaNfI4I"
        );
    }

    #[test]
    fn multipart_parts_keep_their_filenames() {
        let body = b"--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/home/user/a.txt\"\r\nContent-Type: application/octet-stream\r\n\r\nhello\r\n--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"b\"\r\n\r\n\r\n--b--\r\n";
        let parts = multipart(body, "b").unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].1.as_deref(), Some("/home/user/a.txt"));
        assert_eq!(parts[0].2, b"hello");
        assert_eq!(parts[1].2, b"");
    }

    #[test]
    fn ranges_and_dates() {
        assert_eq!(byte_range("bytes=0-1", 5), Some((0, 2)));
        assert_eq!(byte_range("bytes=3-", 5), Some((3, 5)));
        assert_eq!(byte_range("bytes=-2", 5), Some((3, 5)));
        assert_eq!(byte_range("bytes=9-", 5), None);
        assert_eq!(
            http_date(UNIX_EPOCH + std::time::Duration::from_secs(1_136_214_245)),
            "Mon, 02 Jan 2006 15:04:05 GMT"
        );
    }
}
