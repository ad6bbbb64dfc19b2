//! The file endpoints (PROTOCOL.md §7): write a gzip tar under `x-cwd`, read one file
//! (streamed), make a directory. Paths are the sandbox's ([`crate::disk`]).
//!
//! An archive is written whole or not at all: it is inflated up to [`MAX_UNPACKED`] bytes
//! (past that, 413 `payload_too_large`, as soon as the decoder passes the cap), and every entry
//! is checked before the first is written. A symbolic link is kept only when its target is
//! relative and stays in the tree the link is in (the host follows it where the sandbox does);
//! one that leaves it (an absolute target, `..` out of `/vercel/sandbox` or of the rest of the
//! disk) refuses the archive with 400. A hard link must name a file of the sandbox (one
//! already there or earlier in the archive).

// An endpoint's refusal is its whole HTTP answer, made once per request: boxing it buys nothing.
#![allow(clippy::result_large_err)]

use super::CWD;
use super::state::{Disk, error};
use crate::SimResponse;
use bytes::Bytes;
use futures::StreamExt;
use serde_json::{Map, Value, json};
use std::io::Read;
use std::path::Path;

/// One tar entry worth writing.
enum Entry {
    File {
        name: String,
        mode: u32,
        data: Vec<u8>,
    },
    Dir {
        name: String,
        mode: u32,
    },
    Link {
        name: String,
        target: String,
    },
    HardLink {
        name: String,
        target: String,
    },
}

/// The most bytes the tar of one `fs/write` unpacks to. Vercel documents no limit (PROTOCOL.md
/// §7.1); this is the simulator's, twice the largest file the benchmarks move, so a small
/// archive cannot fill the host's disk (254 KiB of gzip can hold a 256 MiB file).
pub(crate) const MAX_UNPACKED: usize = 128 << 20;

/// An octal field of a tar header.
fn octal(field: &[u8]) -> Result<u64, String> {
    // GNU base-256 for large numbers.
    if field.first().is_some_and(|b| b & 0x80 != 0) {
        let mut n: u64 = u64::from(field[0] & 0x7f);
        for b in &field[1..] {
            n = n.checked_mul(256).ok_or("a tar number overflows")? + u64::from(*b);
        }
        return Ok(n);
    }
    let text: String = field
        .iter()
        .take_while(|b| **b != 0)
        .map(|b| char::from(*b))
        .collect();
    let text = text.trim();
    if text.is_empty() {
        return Ok(0);
    }
    u64::from_str_radix(text, 8).map_err(|_| format!("invalid tar number {text:?}"))
}

fn text(field: &[u8]) -> String {
    let end = field.iter().position(|b| *b == 0).unwrap_or(field.len());
    String::from_utf8_lossy(&field[..end]).into_owned()
}

/// The `path` record of a PAX extended header.
fn pax_path(data: &[u8]) -> Option<String> {
    let mut rest = data;
    let mut found = None;
    while !rest.is_empty() {
        let space = rest.iter().position(|b| *b == b' ')?;
        let len: usize = std::str::from_utf8(&rest[..space]).ok()?.parse().ok()?;
        if len == 0 || len > rest.len() {
            return found;
        }
        let record = &rest[space + 1..len];
        let record = record.strip_suffix(b"\n").unwrap_or(record);
        if let Some(value) = record.strip_prefix(b"path=") {
            found = Some(String::from_utf8_lossy(value).into_owned());
        }
        rest = &rest[len..];
    }
    found
}

/// The entries of an uncompressed tar.
fn entries(tar: &[u8]) -> Result<Vec<Entry>, String> {
    let mut out = Vec::new();
    let mut at = 0;
    let mut long_name: Option<String> = None;
    while at + 512 <= tar.len() {
        let header = &tar[at..at + 512];
        if header.iter().all(|b| *b == 0) {
            break;
        }
        let size = usize::try_from(octal(&header[124..136])?).map_err(|e| e.to_string())?;
        let mode = octal(&header[100..108])? as u32 & 0o7777;
        let kind = header[156];
        let data_at = at + 512;
        let end = data_at
            .checked_add(size)
            .ok_or("a tar entry is too large")?;
        if end > tar.len() {
            return Err("the tar archive ends inside an entry".into());
        }
        let data = &tar[data_at..end];
        let mut name = text(&header[0..100]);
        if &header[257..262] == b"ustar" {
            let prefix = text(&header[345..500]);
            if !prefix.is_empty() {
                name = format!("{prefix}/{name}");
            }
        }
        if let Some(long) = long_name.take() {
            name = long;
        }
        match kind {
            b'L' => long_name = Some(text(data)),
            b'x' => long_name = pax_path(data),
            b'g' => {}
            b'0' | 0 | b'7' => out.push(Entry::File {
                name,
                mode,
                data: data.to_vec(),
            }),
            b'5' => out.push(Entry::Dir { name, mode }),
            b'2' => out.push(Entry::Link {
                name,
                target: text(&header[157..257]),
            }),
            b'1' => out.push(Entry::HardLink {
                name,
                target: text(&header[157..257]),
            }),
            _ => {}
        }
        at = data_at + size.div_ceil(512) * 512;
    }
    Ok(out)
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    if mode != 0 {
        let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode));
    }
}

fn bad(message: &str) -> SimResponse {
    error(400, "bad_request", message)
}

/// Extracts the gzip tar `body` into `disk` under `base` (blocking), whole or not at all.
fn extract(disk: &Disk, base: &str, body: &[u8]) -> Result<(), SimResponse> {
    let mut tar = Vec::new();
    flate2::read::GzDecoder::new(body)
        .take(MAX_UNPACKED as u64 + 1)
        .read_to_end(&mut tar)
        .map_err(|e| {
            bad(&format!(
                "The body is not a gzip-compressed tar archive: {e}"
            ))
        })?;
    if tar.len() > MAX_UNPACKED {
        return Err(error(
            413,
            "payload_too_large",
            &format!("The archive unpacks to more than {MAX_UNPACKED} bytes."),
        ));
    }
    let entries = entries(&tar).map_err(|why| bad(&why))?;
    let files = &disk.files;
    let mut archived = std::collections::HashSet::new();
    for entry in &entries {
        match entry {
            Entry::File { name, .. } => {
                archived.insert(sandbox_sdk_core::absolute_path(base, name));
            }
            Entry::Link { name, target } => {
                let shown = sandbox_sdk_core::absolute_path(base, name);
                if !files.link_stays_in_its_tree(&shown, target) {
                    return Err(bad(&format!(
                        "The link {shown} -> {target} leads outside the directory it is in."
                    )));
                }
            }
            Entry::HardLink { name, target } => {
                let linked = sandbox_sdk_core::absolute_path(base, target);
                let exists = || disk.resolve(base, target).1.is_ok_and(|h| h.is_file());
                if !archived.contains(&linked) && !exists() {
                    let shown = sandbox_sdk_core::absolute_path(base, name);
                    return Err(bad(&format!(
                        "The hard link {shown} names {linked}, which is not a file of the sandbox."
                    )));
                }
            }
            Entry::Dir { .. } => {}
        }
    }
    for entry in entries {
        let (shown, host) = match &entry {
            Entry::Dir { name, .. } => disk.resolve(base, name),
            Entry::File { name, .. } | Entry::Link { name, .. } | Entry::HardLink { name, .. } => {
                files.entry(base, name)
            }
        };
        if shown == "/" {
            continue;
        }
        let io = |e: std::io::Error| bad(&format!("Cannot write {shown}: {e}"));
        let host = host.map_err(io)?;
        if let Some(parent) = host.parent() {
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        let replace = |host: &Path| {
            if std::fs::symlink_metadata(host).is_ok_and(|m| !m.is_dir()) {
                std::fs::remove_file(host)?;
            }
            Ok(())
        };
        match entry {
            Entry::Dir { mode, .. } => {
                std::fs::create_dir_all(&host).map_err(io)?;
                set_mode(&host, mode);
            }
            Entry::File { mode, data, .. } => {
                replace(&host).map_err(io)?;
                std::fs::write(&host, data).map_err(io)?;
                set_mode(&host, if mode == 0 { 0o644 } else { mode });
            }
            Entry::Link { target, .. } => {
                replace(&host).map_err(io)?;
                std::os::unix::fs::symlink(target, &host).map_err(io)?;
            }
            Entry::HardLink { target, .. } => {
                let linked = disk.resolve(base, &target).1.map_err(io)?;
                replace(&host).map_err(io)?;
                std::fs::hard_link(linked, &host).map_err(io)?;
            }
        }
    }
    Ok(())
}

/// `POST …/fs/write`: the gzip tar body under `x-cwd` (PROTOCOL.md §7.1) → `{}`.
pub(crate) async fn write(disk: &Disk, x_cwd: Option<&str>, body: Bytes) -> SimResponse {
    let base = match x_cwd.filter(|c| !c.is_empty()) {
        Some(c) => sandbox_sdk_core::absolute_path(CWD, c),
        None => CWD.to_owned(),
    };
    let disk = disk.clone();
    match tokio::task::spawn_blocking(move || extract(&disk, &base, &body)).await {
        Ok(Ok(())) => SimResponse::json(200, &json!({})),
        Ok(Err(refused)) => refused,
        Err(e) => error(500, "internal_server_error", &e.to_string()),
    }
}

/// The path a read or mkdir body names, against its `cwd` (default the session's).
fn target(
    disk: &Disk,
    body: &Map<String, Value>,
) -> Result<(String, std::path::PathBuf), SimResponse> {
    let Some(path) = body
        .get("path")
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty())
    else {
        return Err(error(400, "bad_request", "`path` is required."));
    };
    let base = match body
        .get("cwd")
        .and_then(Value::as_str)
        .filter(|c| !c.is_empty())
    {
        Some(c) => sandbox_sdk_core::absolute_path(CWD, c),
        None => CWD.to_owned(),
    };
    match disk.resolve(&base, path) {
        (shown, Ok(host)) => Ok((shown, host)),
        (shown, Err(e)) => Err(bad(&format!("{shown}: {e}"))),
    }
}

/// `POST …/fs/read` (PROTOCOL.md §7.2): the bytes streamed, 404 when there is no such file.
pub(crate) async fn read(disk: &Disk, body: &Map<String, Value>) -> SimResponse {
    let (shown, host) = match target(disk, body) {
        Ok(t) => t,
        Err(refused) => return refused,
    };
    let missing = || error(404, "file_not_found", &format!("File not found: {shown}"));
    match tokio::fs::metadata(&host).await {
        Ok(m) if m.is_dir() => {
            return error(400, "bad_request", &format!("{shown} is a directory"));
        }
        Ok(_) => {}
        Err(_) => return missing(),
    }
    let Ok(file) = tokio::fs::File::open(&host).await else {
        return missing();
    };
    let name = shown.rsplit('/').next().unwrap_or("file").replace('"', "");
    let stream = tokio_util::io::ReaderStream::new(file).boxed();
    SimResponse::stream(200, "application/octet-stream", stream).header(
        "content-disposition",
        &format!("attachment; filename=\"{name}\""),
    )
}

/// `POST …/fs/mkdir` (PROTOCOL.md §7.3): parents made by default; an existing directory is
/// fine.
pub(crate) async fn mkdir(disk: &Disk, body: &Map<String, Value>) -> SimResponse {
    let (shown, host) = match target(disk, body) {
        Ok(t) => t,
        Err(refused) => return refused,
    };
    let recursive = body
        .get("recursive")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    if host.is_dir() {
        return SimResponse::json(200, &json!({}));
    }
    if host.exists() {
        return error(
            400,
            "bad_request",
            &format!("{shown} exists and is not a directory"),
        );
    }
    let made = if recursive {
        tokio::fs::create_dir_all(&host).await
    } else {
        if let Some(parent) = host.parent()
            && shown.matches('/').count() > 1
            && !parent.is_dir()
        {
            return error(
                400,
                "bad_request",
                &format!("The parent directory of {shown} does not exist"),
            );
        }
        tokio::fs::create_dir_all(&host).await
    };
    match made {
        Ok(()) => SimResponse::json(200, &json!({})),
        Err(e) => error(400, "bad_request", &format!("Cannot create {shown}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-file ustar archive.
    pub(crate) fn tar_of(name: &str, data: &[u8], mode: u32) -> Vec<u8> {
        let mut header = [0u8; 512];
        header[..name.len()].copy_from_slice(name.as_bytes());
        header[100..107].copy_from_slice(format!("{mode:07o}").as_bytes());
        header[124..135].copy_from_slice(format!("{:011o}", data.len()).as_bytes());
        header[156] = b'0';
        header[257..262].copy_from_slice(b"ustar");
        let mut tar = header.to_vec();
        tar.extend_from_slice(data);
        tar.resize(tar.len().div_ceil(512) * 512 + 1024, 0);
        tar
    }

    #[test]
    fn entries_reads_ustar_files_and_pax_long_names() {
        let tar = tar_of("a/b.txt", b"hello", 0o755);
        let got = entries(&tar).unwrap();
        assert!(matches!(&got[..], [Entry::File { name, mode: 0o755, data }]
            if name == "a/b.txt" && data == b"hello"));
        let long = "d/".repeat(80) + "f";
        let record = format!("path={long}\n");
        let len = record.len() + 4;
        let pax = format!("{len} {record}");
        let mut header = tar_of("PaxHeader", pax.as_bytes(), 0o644);
        header.truncate(512 + pax.len().div_ceil(512) * 512);
        header[156] = b'x';
        header.extend(tar_of("short", b"x", 0o644));
        let got = entries(&header).unwrap();
        assert!(matches!(&got[..], [Entry::File { name, .. }] if *name == long));
    }

    #[test]
    fn a_truncated_archive_is_an_error() {
        let tar = tar_of("a", &[1; 600], 0o644);
        assert!(entries(&tar[..700]).is_err());
    }
}
