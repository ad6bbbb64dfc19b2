//! Checkpoints (PROTOCOL.md §8, §18.13): a copy of the sprite's disk kept beside it, ids `v1`,
//! `v2`, …; create and restore answer NDJSON progress streams, restore kills every session.

use super::lock;
use super::sprite::{Checkpoint, Sprite};
use super::state::{NDJSON, error};
use crate::SimResponse;
use bytes::Bytes;
use futures::StreamExt;
use sandbox_sdk_core::time::format_rfc3339;
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

/// One NDJSON line `{"type", "data", "time"}` (`error` for the `error` type).
fn line(kind: &str, text: &str) -> Bytes {
    let field = if kind == "error" { "error" } else { "data" };
    let v = json!({ "type": kind, field: text, "time": format_rfc3339(SystemTime::now()) });
    Bytes::from(format!("{v}\n"))
}

fn stream(lines: Vec<Bytes>) -> SimResponse {
    SimResponse::stream(
        200,
        NDJSON,
        futures::stream::iter(lines.into_iter().map(Ok)).boxed(),
    )
}

/// `POST …/checkpoint` `{"comment"?}`: copies the disk, answers `info` lines then `complete`
/// with `Checkpoint vN created` (errors are an `error` line on the 200, §8).
pub(crate) async fn create(sprite: Arc<Sprite>, body: &[u8]) -> SimResponse {
    let comment = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v.get("comment").and_then(Value::as_str).map(str::to_owned))
        .filter(|c| !c.is_empty());
    let _disk = sprite.disk_lock.lock().await;
    let id = format!("v{}", lock(&sprite.checkpoints).len() + 1);
    let mut lines = vec![line("info", "Creating checkpoint")];
    let to = sprite.checkpoint_dir(&id);
    let root = sprite.root().to_owned();
    let copied = tokio::task::spawn_blocking(move || crate::copy_tree(&root, &to))
        .await
        .map_err(std::io::Error::other)
        .and_then(|r| r);
    match copied {
        Ok(()) => {
            let source = lock(&sprite.checkpoints).last().map(|c| c.id.clone());
            lock(&sprite.checkpoints).push(Checkpoint {
                id: id.clone(),
                created: SystemTime::now(),
                comment,
                source,
            });
            lines.push(line("info", "Filesystem copied"));
            lines.push(line("complete", &format!("Checkpoint {id} created")));
        }
        Err(e) => lines.push(line("error", &format!("checkpoint failed: {e}"))),
    }
    stream(lines)
}

/// `GET …/checkpoints`: the array, oldest first.
pub(crate) fn list(sprite: &Sprite) -> SimResponse {
    let all: Vec<Value> = lock(&sprite.checkpoints)
        .iter()
        .map(Checkpoint::to_json)
        .collect();
    SimResponse::json(200, &all)
}

/// `GET …/checkpoints/{id}`.
pub(crate) fn get(sprite: &Sprite, id: &str) -> SimResponse {
    match find(sprite, id) {
        Some(c) => SimResponse::json(200, &c.to_json()),
        None => missing(id),
    }
}

fn find(sprite: &Sprite, id: &str) -> Option<Checkpoint> {
    lock(&sprite.checkpoints)
        .iter()
        .find(|c| c.id == id)
        .cloned()
}

fn missing(id: &str) -> SimResponse {
    error(404, "not_found", &format!("checkpoint \"{id}\" not found"))
}

/// `POST …/checkpoints/{id}/restore`: kills every session, puts the disk back.
pub(crate) async fn restore(sprite: Arc<Sprite>, id: &str) -> SimResponse {
    if find(&sprite, id).is_none() {
        return missing(id);
    }
    let _disk = sprite.disk_lock.lock().await;
    let mut lines = vec![line("info", &format!("Restoring checkpoint {id}"))];
    sprite.kill_all();
    let from = sprite.checkpoint_dir(id);
    let root = sprite.root().to_owned();
    let restored = tokio::task::spawn_blocking(move || {
        wipe(&root)?;
        crate::copy_tree(&from, &root)
    })
    .await
    .map_err(std::io::Error::other)
    .and_then(|r| r);
    match restored {
        Ok(()) => {
            lines.push(line("info", "Processes stopped, filesystem restored"));
            lines.push(line("complete", &format!("Restored to checkpoint {id}")));
        }
        Err(e) => lines.push(line("error", &format!("restore failed: {e}"))),
    }
    stream(lines)
}

/// Empties `dir` (never following a link out of it).
fn wipe(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            std::fs::remove_dir_all(entry.path())?;
        } else {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}
