//! One sprite: what it was created with, its disk (a `local` sandbox whose directory is the
//! sprite's `/`), its exec sessions, its checkpoints and its status (PROTOCOL.md §4, §18.5).

use super::session::Session;
use super::{HOME, ORG, Settings, lock};
use sandbox_sdk_core::local::LocalSandbox;
use sandbox_sdk_core::time::format_rfc3339;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

/// One checkpoint (PROTOCOL.md §8): its id, when and with what comment it was made.
#[derive(Clone)]
pub(crate) struct Checkpoint {
    pub id: String,
    pub created: SystemTime,
    pub comment: Option<String>,
    pub source: Option<String>,
}

impl Checkpoint {
    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "id": self.id,
            "create_time": format_rfc3339(self.created),
            "is_auto": false,
        });
        if let Some(c) = &self.comment {
            v["comment"] = json!(c);
        }
        if let Some(s) = &self.source {
            v["source_id"] = json!(s);
        }
        v
    }
}

/// What may change on a sprite after create.
pub(crate) struct Meta {
    pub labels: Vec<String>,
    pub url_settings: Value,
    pub updated_at: SystemTime,
    pub last_started_at: Option<SystemTime>,
    pub last_active_at: Option<SystemTime>,
}

/// Activity, for the status (PROTOCOL.md §18.5).
#[derive(Default)]
pub(crate) struct Activity {
    /// File calls in flight.
    pub busy: usize,
    /// When the last activity ended (or was seen).
    pub last: Option<Instant>,
}

/// One sprite.
pub(crate) struct Sprite {
    pub id: String,
    pub name: String,
    pub url: String,
    pub created_at: SystemTime,
    pub config: Option<Value>,
    pub environment: BTreeMap<String, String>,
    pub meta: Mutex<Meta>,
    pub local: LocalSandbox,
    pub sessions: Mutex<Vec<Arc<Session>>>,
    pub checkpoints: Mutex<Vec<Checkpoint>>,
    pub activity: Mutex<Activity>,
    /// Serialises checkpoint create and restore.
    pub disk_lock: tokio::sync::Mutex<()>,
}

impl Sprite {
    /// A sprite on `local`, its home made.
    pub fn new(
        name: String,
        local: LocalSandbox,
        config: Option<Value>,
        environment: BTreeMap<String, String>,
        labels: Vec<String>,
        url_settings: Value,
    ) -> std::io::Result<Sprite> {
        std::fs::create_dir_all(local.dir().join(&HOME[1..]))?;
        let now = SystemTime::now();
        let hex = crate::random_hex(32);
        let id = format!(
            "{}-{}-{}-{}-{}",
            &hex[..8],
            &hex[8..12],
            &hex[12..16],
            &hex[16..20],
            &hex[20..]
        );
        let url = format!("https://{name}-{}.sprites.app", crate::random_hex(4));
        Ok(Sprite {
            id,
            name,
            url,
            created_at: now,
            config,
            environment,
            meta: Mutex::new(Meta {
                labels,
                url_settings,
                updated_at: now,
                last_started_at: None,
                last_active_at: None,
            }),
            local,
            sessions: Mutex::default(),
            checkpoints: Mutex::default(),
            activity: Mutex::default(),
            disk_lock: tokio::sync::Mutex::new(()),
        })
    }

    /// The host directory behind the sprite's `/`.
    pub fn root(&self) -> &Path {
        self.local.dir()
    }

    /// Where the sprite's checkpoints are kept: beside its root, never inside it.
    pub fn checkpoint_dir(&self, id: &str) -> PathBuf {
        let base = self
            .root()
            .parent()
            .map(|p| p.join("checkpoints"))
            .unwrap_or_else(|| self.root().with_extension("checkpoints"));
        base.join(id)
    }

    /// `cold` until first used; `running` while a session runs or a file call is in flight and
    /// for the idle window after; then `warm` (PROTOCOL.md §18.5).
    pub fn status(&self, settings: &Settings) -> &'static str {
        let live = lock(&self.sessions).iter().any(|s| s.is_running());
        let activity = lock(&self.activity);
        if live || activity.busy > 0 {
            return "running";
        }
        let last = activity.last.max(
            lock(&self.sessions)
                .iter()
                .filter_map(|s| s.finished_at())
                .max(),
        );
        match last {
            None => "cold",
            Some(t) if t.elapsed() < settings.idle => "running",
            Some(_) => "warm",
        }
    }

    /// Marks the start of a call that wakes the sprite (an exec or a file call).
    pub fn wake(&self) {
        let mut meta = lock(&self.meta);
        let now = SystemTime::now();
        if meta.last_started_at.is_none() {
            meta.last_started_at = Some(now);
        }
        meta.last_active_at = Some(now);
        lock(&self.activity).last = Some(Instant::now());
    }

    /// A file call in flight: `running` until the guard drops (PROTOCOL.md §18.5).
    pub fn busy(self: &Arc<Self>) -> BusyGuard {
        self.wake();
        lock(&self.activity).busy += 1;
        BusyGuard(self.clone())
    }

    /// The sprite object (PROTOCOL.md §4.4).
    pub fn to_json(&self, settings: &Settings) -> Value {
        let meta = lock(&self.meta);
        let mut v = json!({
            "id": self.id,
            "name": self.name,
            "organization": ORG,
            "org_slug": ORG,
            "url": self.url,
            "url_settings": meta.url_settings,
            "status": self.status(settings),
            "created_at": format_rfc3339(self.created_at),
            "updated_at": format_rfc3339(meta.updated_at),
            "labels": meta.labels,
            "environment": self.environment,
        });
        if let Some(c) = &self.config {
            v["config"] = c.clone();
        }
        if let Some(t) = meta.last_started_at {
            v["last_started_at"] = json!(format_rfc3339(t));
            v["last_running_at"] = json!(format_rfc3339(t));
        }
        if let Some(t) = meta.last_active_at {
            v["last_active_at"] = json!(format_rfc3339(t));
        }
        v
    }

    /// The partial list entry (PROTOCOL.md §18.14).
    pub fn list_entry(&self) -> Value {
        json!({
            "name": self.name,
            "org_slug": ORG,
            "updated_at": format_rfc3339(lock(&self.meta).updated_at),
        })
    }

    /// Applies a `PUT` body's `labels` and `url_settings` (PROTOCOL.md §4.3).
    pub fn update(&self, labels: Option<Vec<String>>, url_settings: Option<&Map<String, Value>>) {
        let mut meta = lock(&self.meta);
        if let Some(labels) = labels {
            meta.labels = labels;
        }
        if let (Some(new), Some(old)) = (url_settings, meta.url_settings.as_object_mut()) {
            for (k, v) in new {
                old.insert(k.clone(), v.clone());
            }
        }
        meta.updated_at = SystemTime::now();
    }

    /// The session with PID `id`, running or finished and still attachable.
    pub fn session(&self, id: &str) -> Option<Arc<Session>> {
        let id: u32 = id.parse().ok()?;
        lock(&self.sessions).iter().find(|s| s.id == id).cloned()
    }

    /// Forgets sessions finished longer than `ttl` ago.
    pub fn expire_sessions(&self, ttl: Duration) {
        lock(&self.sessions).retain(|s| s.finished_at().is_none_or(|t| t.elapsed() < ttl));
    }

    /// Kills every session's process group (delete, restore, shutdown).
    pub fn kill_all(&self) {
        for session in lock(&self.sessions).iter() {
            session.signal(nix::sys::signal::Signal::SIGKILL);
        }
    }
}

/// A file call in flight (see [`Sprite::busy`]).
pub(crate) struct BusyGuard(Arc<Sprite>);

impl Drop for BusyGuard {
    fn drop(&mut self) {
        let mut activity = lock(&self.0.activity);
        activity.busy = activity.busy.saturating_sub(1);
        activity.last = Some(Instant::now());
    }
}
