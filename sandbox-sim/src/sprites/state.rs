//! What the simulator holds: the sprites by name, the create rate limit, and the error answers
//! every endpoint shares (PROTOCOL.md §10, §11).

// An endpoint's refusal is its whole HTTP answer, made once per request: boxing it buys nothing.
#![allow(clippy::result_large_err)]

use super::sprite::Sprite;
use super::{Settings, lock};
use crate::{Backing, SimResponse};
use serde_json::{Value, json};
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::time::Instant;

/// The NDJSON content type of the kill and checkpoint streams.
pub(crate) const NDJSON: &str = "application/x-ndjson";

/// `{"error": code, "message"}` with `status` (PROTOCOL.md §10, the shape the SDK parses).
pub(crate) fn error(status: u16, code: &str, message: &str) -> SimResponse {
    SimResponse::json(status, &json!({ "error": code, "message": message }))
}

/// The code for `status` when nothing more precise applies.
pub(crate) fn code_of(status: u16) -> &'static str {
    match status {
        400 => "invalid_request",
        401 => "unauthorized",
        403 => "forbidden",
        404 => "not_found",
        409 => "conflict",
        413 => "payload_too_large",
        422 => "unprocessable_entity",
        429 => "rate_limited",
        500 => "internal_error",
        502 => "bad_gateway",
        503 => "service_unavailable",
        _ => "error",
    }
}

/// The 404 for an unknown sprite (PROTOCOL.md §4.2).
pub(crate) fn no_sprite(name: &str) -> SimResponse {
    error(404, "not_found", &format!("sprite \"{name}\" not found"))
}

/// The simulator's state.
pub(crate) struct State {
    pub settings: Settings,
    pub backing: Backing,
    sprites: Mutex<BTreeMap<String, Arc<Sprite>>>,
    /// When the creates of the current window arrived.
    creates: Mutex<VecDeque<Instant>>,
    /// Whether the create rate limit applies.
    pub limited: AtomicBool,
}

impl State {
    pub fn new(settings: Settings, backing: Backing) -> State {
        State {
            settings,
            backing,
            sprites: Mutex::default(),
            creates: Mutex::default(),
            limited: AtomicBool::new(true),
        }
    }

    /// The names of the sprites, sorted.
    pub fn names(&self) -> Vec<String> {
        lock(&self.sprites).keys().cloned().collect()
    }

    /// Sprite `name`, when it exists.
    pub fn sprite(&self, name: &str) -> Option<Arc<Sprite>> {
        lock(&self.sprites).get(name).cloned()
    }

    /// Every sprite, sorted by name.
    pub fn all(&self) -> Vec<Arc<Sprite>> {
        lock(&self.sprites).values().cloned().collect()
    }

    /// Adds `sprite` unless its name is taken (then gives it back).
    pub fn insert(&self, sprite: Arc<Sprite>) -> Result<(), Arc<Sprite>> {
        let mut sprites = lock(&self.sprites);
        if sprites.contains_key(&sprite.name) {
            return Err(sprite);
        }
        sprites.insert(sprite.name.clone(), sprite);
        Ok(())
    }

    /// Takes sprite `name` away.
    pub fn remove(&self, name: &str) -> Option<Arc<Sprite>> {
        lock(&self.sprites).remove(name)
    }

    /// Counts one create against the rate limit, or answers the 429 of PROTOCOL.md §11.
    pub fn admit_create(&self) -> Result<(), SimResponse> {
        if !self.limited.load(std::sync::atomic::Ordering::Relaxed) {
            return Ok(());
        }
        let (limit, window) = (self.settings.create_limit, self.settings.create_window);
        let now = Instant::now();
        let mut creates = lock(&self.creates);
        while creates
            .front()
            .is_some_and(|t| now.duration_since(*t) >= window)
        {
            creates.pop_front();
        }
        if creates.len() < limit as usize {
            creates.push_back(now);
            return Ok(());
        }
        let wait = creates
            .front()
            .map(|t| window.saturating_sub(now.duration_since(*t)))
            .unwrap_or(window);
        let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
        let reset = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0)
            + secs;
        let body = json!({
            "error": "sprite_creation_rate_limited",
            "message": format!(
                "rate limit exceeded: at most {limit} sprite creations per {} seconds",
                window.as_secs().max(1)
            ),
            "limit": limit,
            "window_seconds": window.as_secs().max(1),
            "retry_after_seconds": secs,
            "current_count": creates.len(),
            "upgrade_available": false,
            "upgrade_url": Value::Null,
        });
        Err(SimResponse::json(429, &body)
            .header("retry-after", &secs.to_string())
            .header("x-ratelimit-limit", &limit.to_string())
            .header("x-ratelimit-remaining", "0")
            .header("x-ratelimit-reset", &reset.to_string()))
    }

    /// Forgets finished sessions past their attach window (PROTOCOL.md §18.7).
    pub fn expire(&self) {
        for sprite in self.all() {
            sprite.expire_sessions(self.settings.finished_ttl);
        }
    }

    /// Kills every session (the simulator is going away).
    pub fn shutdown(&self) {
        for sprite in self.all() {
            sprite.kill_all();
        }
    }
}
