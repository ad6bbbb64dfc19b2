//! Sprites and their lifecycle (PROTOCOL.md §4, §8, §9): the [`Handle`] a sandbox keeps (its
//! name and what was last seen of it), create ([`create`]), states and labels ([`state`]), and
//! the lifecycle calls.
//!
//! Our sandbox id is the sprite's **name**. Decisions:
//!
//! - There is no start, stop or pause call (§4.3): a sprite wakes on any exec or file call and
//!   hibernates by itself after 30 s idle, keeping its disk (§4.5). `stop`, `pause`, `resume`
//!   and `set_timeout` are therefore not offered; `connect` and `info` only read.
//! - Listing pages through `GET /v1/sprites`; entries that come partial (no labels, no status, §18.14) are read one by one, at most
//!   [`LIST_CONCURRENCY`] at a time.
//! - A snapshot is a checkpoint (§8): its id is the newest of the list after the progress stream
//!   completed (§18.13). Restoring ([`crate::SpritesSandbox::restore`]) rewinds the disk in
//!   place and stops running commands; there is no fork.

pub(crate) mod create;
pub(crate) mod state;

use crate::api::Api;
use crate::config::{LIST_CONCURRENCY, PREVIEW_DOMAIN, PROVIDER};
use crate::wire::{Checkpoint, Sprite};
use futures::StreamExt;
use sandbox_sdk_core::http::checked_preview_url;
use sandbox_sdk_core::paging::pages;
use sandbox_sdk_core::{
    Error, ErrorKind, ListFilter, PreviewLink, Result, SandboxInfo, SandboxStream, SnapshotInfo,
};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// A sprite by name, with what was last seen of it (shared by clones).
#[derive(Debug, Clone)]
pub(crate) struct Handle {
    pub api: Api,
    pub name: String,
    seen: Arc<Mutex<Sprite>>,
}

impl Handle {
    pub fn new(api: Api, sprite: Sprite) -> Handle {
        Handle {
            api,
            name: sprite.name.clone(),
            seen: Arc::new(Mutex::new(sprite)),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Sprite> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes in a fresh answer.
    pub fn update(&self, sprite: Sprite) {
        *self.lock() = sprite;
    }

    /// The sprite as last seen.
    pub fn seen(&self) -> Sprite {
        self.lock().clone()
    }

    /// The info of what was last seen.
    pub fn info(&self) -> SandboxInfo {
        state::info(&self.lock())
    }
}

/// `connect(name)`: reads the sprite (which does not wake it).
pub(crate) async fn connect(api: &Api, name: &str) -> Result<Handle> {
    if !create::valid_name(name) {
        return Err(Error::new(
            ErrorKind::NotFound,
            format!("no sprite named {name:?}: {}", create::NAME_RULE),
        )
        .with_provider(PROVIDER)
        .with_operation("connect")
        .with_sandbox_id(name));
    }
    let sprite = api.get(name, "connect").await?;
    Ok(Handle::new(api.clone(), sprite))
}

/// Reads the sprite again and returns its info.
pub(crate) async fn refresh(handle: &Handle) -> Result<SandboxInfo> {
    let sprite = handle.api.get(&handle.name, "info").await?;
    handle.update(sprite);
    Ok(handle.info())
}

/// `list(filter)`: every page; partial entries are completed by a read, and the filter (labels,
/// states) applies here, as the API filters by name prefix only.
pub(crate) fn list(api: &Api, filter: &ListFilter) -> SandboxStream<'static> {
    let paging = api.clone();
    let sprites = pages(move |token: Option<String>| {
        let api = paging.clone();
        async move {
            let page = api.list(token.as_deref()).await?;
            let next = if page.has_more {
                page.next_continuation_token
            } else {
                None
            };
            Ok((page.sprites, next))
        }
    });
    let api = api.clone();
    let filter = filter.clone();
    sprites
        .map(move |item| {
            let api = api.clone();
            async move {
                let sprite = item?;
                if sprite.status.is_some() && sprite.labels.is_some() {
                    return Ok(Some(sprite));
                }
                match api.get(&sprite.name, "list").await {
                    Ok(full) => Ok(Some(full)),
                    // Deleted between the page and the read.
                    Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
                    Err(e) => Err(e),
                }
            }
        })
        .buffered(LIST_CONCURRENCY)
        .filter_map(move |item| {
            let kept = match item {
                Ok(Some(sprite)) => {
                    let info = state::info(&sprite);
                    filter.matches(&info).then_some(Ok(info))
                }
                Ok(None) => None,
                Err(e) => Some(Err(e)),
            };
            std::future::ready(kept)
        })
        .boxed()
}

/// `snapshot`: a checkpoint with `comment`, then its id from the list (§8, §18.13).
pub(crate) async fn snapshot(handle: &Handle, comment: Option<&str>) -> Result<SnapshotInfo> {
    let api = &handle.api;
    api.checkpoint(&handle.name, comment).await?;
    let newest = api
        .checkpoints(&handle.name, "snapshot")
        .await?
        .into_iter()
        .max_by_key(|c| (c.create_time.clone(), checkpoint_number(&c.id)))
        .ok_or_else(|| {
            crate::error::protocol_error(
                "snapshot",
                &handle.name,
                "the checkpoint completed but the list has none",
            )
        })?;
    Ok(snapshot_info(&newest, &handle.name))
}

/// The `N` of a checkpoint id `vN` (§3), for ordering ids made within one second.
fn checkpoint_number(id: &str) -> u64 {
    id.strip_prefix('v')
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

pub(crate) fn snapshot_info(checkpoint: &Checkpoint, sprite: &str) -> SnapshotInfo {
    SnapshotInfo {
        id: checkpoint.id.clone(),
        name: checkpoint.comment.clone(),
        sandbox_id: Some(sprite.to_owned()),
        created_at: checkpoint
            .create_time
            .as_deref()
            .and_then(sandbox_sdk_core::time::parse_rfc3339),
    }
}

/// `preview_link(port)`: the sprite's URL (§9), for the port it reaches, when that URL is
/// public. A token-guarded URL is refused: the token it needs is the organisation's, which a
/// preview link must never carry. Only `https://<name>-<suffix>.sprites.app` is handed out;
/// any other URL in the answer is a `Provider` error.
pub(crate) async fn preview_link(handle: &Handle, port: u16) -> Result<PreviewLink> {
    let refuse = |kind: ErrorKind, message: String| {
        Err(Error::new(kind, message)
            .with_provider(PROVIDER)
            .with_operation("preview_link")
            .with_sandbox_id(&handle.name))
    };
    let url_port = handle.api.settings.url_port;
    if port != url_port {
        return refuse(
            ErrorKind::Validation,
            format!(
                "a sprite's URL reaches port {url_port} only (SpritesBuilder::url_port), not {port}"
            ),
        );
    }
    let mut sprite = handle.seen();
    if sprite.url.is_none() {
        refresh(handle).await?;
        sprite = handle.seen();
    }
    let auth = sprite.url_settings.as_ref().and_then(|s| s.auth.as_deref());
    if auth != Some("public") {
        return refuse(
            ErrorKind::NotSupported,
            format!(
                "the URL of sprite {} needs the organisation's token (url_settings.auth = {}); \
                 make it public with SpritesSandbox::set_public_url or SpritesBuilder::public_url",
                handle.name,
                auth.unwrap_or("sprite")
            ),
        );
    }
    let Some(url) = sprite.url else {
        return refuse(
            ErrorKind::Provider,
            format!("sprite {} has no URL", handle.name),
        );
    };
    let url = checked_preview_url(&url, &[PREVIEW_DOMAIN])
        .map_err(|e| e.or_context(PROVIDER, "preview_link", Some(&handle.name)))?;
    Ok(PreviewLink {
        url,
        port,
        headers: BTreeMap::new(),
        token: None,
        expires_at: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_ids_sort_by_number() {
        assert_eq!(checkpoint_number("v12"), 12);
    }
}
