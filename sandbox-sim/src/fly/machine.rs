//! A simulated machine's record (what `GET …/machines/{id}` shows), its lease and events, and
//! the ids Fly hands out.

use sandbox_sdk_core::time::format_rfc3339;
use serde_json::{Value, json};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::Instant;

/// States no transition is under way from (PROTOCOL.md §5); `/wait?state=settled` waits for one.
pub(crate) const SETTLED: &[&str] = &[
    "created",
    "started",
    "stopped",
    "suspended",
    "failed",
    "destroyed",
];

pub(crate) use crate::random_u64;

/// `n` lowercase hex digits.
pub(crate) fn hex(n: usize) -> String {
    crate::random_hex(n)
}

/// A 26-character ULID (Crockford base32: 48 bits of Unix milliseconds, 80 random bits), the
/// form of machine versions, event ids and request ids.
pub(crate) fn ulid() -> String {
    const ALPHABET: &[u8] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
    let ms = unix_ms(SystemTime::now()) as u128 & ((1 << 48) - 1);
    let random = ((random_u64() as u128) << 16 | (random_u64() & 0xffff) as u128) & ((1 << 80) - 1);
    let mut value = ms << 80 | random;
    let mut out = [0u8; 26];
    for slot in out.iter_mut().rev() {
        *slot = ALPHABET[(value & 31) as usize];
        value >>= 5;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Milliseconds since the Unix epoch.
pub(crate) fn unix_ms(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
}

/// A generated machine name like Fly's (`aged-thunder-7371`).
pub(crate) fn machine_name() -> String {
    const ADJECTIVES: &[&str] = &["aged", "bold", "calm", "damp", "eager", "fancy", "quiet"];
    const NOUNS: &[&str] = &[
        "thunder", "river", "meadow", "forest", "pine", "sky", "frost",
    ];
    let r = random_u64();
    format!(
        "{}-{}-{}",
        ADJECTIVES[(r % 7) as usize],
        NOUNS[((r >> 8) % 7) as usize],
        (r >> 16) % 9000 + 1000
    )
}

/// One entry of a machine's event log.
#[derive(Clone, Debug)]
pub(crate) struct Event {
    pub id: String,
    pub kind: &'static str,
    pub status: String,
    pub source: &'static str,
    pub timestamp: u64,
    pub request: Option<Value>,
}

impl Event {
    pub fn new(kind: &'static str, status: &str, source: &'static str) -> Event {
        Event {
            id: ulid(),
            kind,
            status: status.to_owned(),
            source,
            timestamp: unix_ms(SystemTime::now()),
            request: None,
        }
    }

    fn to_json(&self) -> Value {
        let mut event = json!({
            "id": self.id,
            "type": self.kind,
            "status": self.status,
            "source": self.source,
            "timestamp": self.timestamp,
        });
        if let Some(request) = &self.request {
            event["request"] = request.clone();
        }
        event
    }
}

/// A lease on a machine.
#[derive(Clone, Debug)]
pub(crate) struct Lease {
    pub nonce: String,
    pub owner: String,
    pub description: String,
    pub version: String,
    /// Unix seconds, as the API shows it.
    pub expires_at: u64,
    /// When it runs out on the server's clock.
    pub expires: Instant,
}

impl Lease {
    pub fn new(ttl: Duration, owner: &str, description: &str, version: &str) -> Lease {
        Lease {
            nonce: hex(12),
            owner: owner.to_owned(),
            description: description.to_owned(),
            version: version.to_owned(),
            expires_at: (SystemTime::now() + ttl)
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs(),
            expires: Instant::now() + ttl,
        }
    }

    pub fn live(&self) -> bool {
        Instant::now() < self.expires
    }

    /// The lease object (`data` of the lease envelope).
    pub fn to_json(&self) -> Value {
        json!({
            "nonce": self.nonce,
            "expires_at": self.expires_at,
            "owner": self.owner,
            "description": self.description,
            "version": self.version,
        })
    }
}

/// One simulated machine.
#[derive(Debug)]
pub(crate) struct Machine {
    pub id: String,
    /// The app it belongs to.
    pub app: String,
    pub name: String,
    pub state: String,
    pub region: String,
    pub instance_id: String,
    pub private_ip: String,
    /// The whole config as the caller sent it; metadata lives in `config.metadata`.
    pub config: Value,
    pub created_at: SystemTime,
    pub updated_at: SystemTime,
    /// Oldest first.
    pub events: Vec<Event>,
    pub lease: Option<Lease>,
    pub cordoned: bool,
    /// Bumped by every transition; a transition's later steps apply only while it is current.
    pub generation: u64,
    /// Order of creation, for lists.
    pub seq: u64,
    /// When it reached `destroyed`, on the server's clock.
    pub destroyed: Option<Instant>,
}

impl Machine {
    pub fn new(seq: u64, app: String, name: String, region: String, config: Value) -> Machine {
        let now = SystemTime::now();
        let r = random_u64();
        Machine {
            id: hex(14),
            app,
            name,
            state: "created".to_owned(),
            region,
            instance_id: ulid(),
            private_ip: format!(
                "fdaa:0:{:x}:a7b:{:x}:{:x}:{:x}:2",
                r & 0xffff,
                (r >> 16) & 0xfff,
                (r >> 28) & 0xffff,
                (r >> 44) & 0xffff
            ),
            config,
            created_at: now,
            updated_at: now,
            events: vec![Event::new("launch", "created", "user")],
            lease: None,
            cordoned: false,
            generation: 0,
            seq,
            destroyed: None,
        }
    }

    /// Moves to `state`, logging an event of `kind` when there is one.
    pub fn set_state(&mut self, state: &str, event: Option<(&'static str, &'static str)>) {
        self.state = state.to_owned();
        self.updated_at = SystemTime::now();
        if let Some((kind, source)) = event {
            self.events.push(Event::new(kind, state, source));
        }
    }

    /// The live lease, if any.
    pub fn live_lease(&self) -> Option<&Lease> {
        self.lease.as_ref().filter(|l| l.live())
    }

    /// `config.metadata` as a map (empty when unset).
    pub fn metadata(&self) -> serde_json::Map<String, Value> {
        self.config["metadata"]
            .as_object()
            .cloned()
            .unwrap_or_default()
    }

    /// Replaces `config.metadata`.
    pub fn set_metadata(&mut self, metadata: serde_json::Map<String, Value>) {
        if !self.config.is_object() {
            self.config = json!({});
        }
        self.config["metadata"] = Value::Object(metadata);
        self.updated_at = SystemTime::now();
    }

    /// `config.env` as strings.
    pub fn env(&self) -> std::collections::BTreeMap<String, String> {
        self.config["env"]
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
            .collect()
    }

    /// The main process: `init.exec`, else `init.entrypoint` + `init.cmd` (`None`: the image's
    /// own command, which the simulator does not run).
    pub fn main_process(&self) -> Option<Vec<String>> {
        let init = &self.config["init"];
        let list = |v: &Value| -> Vec<String> {
            v.as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        };
        let exec = list(&init["exec"]);
        if !exec.is_empty() {
            return Some(exec);
        }
        let mut argv = list(&init["entrypoint"]);
        argv.extend(list(&init["cmd"]));
        (!argv.is_empty()).then_some(argv)
    }

    /// The machine as the API shows it. `summary` leaves out config, checks, events, host
    /// status and nonce; `include_lease` adds the lease.
    pub fn to_json(&self, summary: bool, include_lease: bool) -> Value {
        let mut machine = json!({
            "id": self.id,
            "name": self.name,
            "state": self.state,
            "region": self.region,
            "instance_id": self.instance_id,
            "private_ip": self.private_ip,
            "image_ref": image_ref(self.config["image"].as_str().unwrap_or_default()),
            "created_at": format_rfc3339(self.created_at),
            "updated_at": format_rfc3339(self.updated_at),
            "cordoned": self.cordoned,
        });
        if !summary {
            machine["config"] = self.config.clone();
            machine["events"] = self.events.iter().rev().map(Event::to_json).collect();
            machine["checks"] = json!([]);
            machine["host_status"] = json!("ok");
        }
        if include_lease && let Some(lease) = self.live_lease() {
            machine["lease"] = json!({
                "owner": lease.owner,
                "expires_at": lease.expires_at,
                "description": lease.description,
                "nonce": lease.nonce,
            });
        }
        machine
    }

    /// The newest `limit` events, newest first.
    pub fn events_json(&self, limit: usize) -> Value {
        self.events
            .iter()
            .rev()
            .take(limit)
            .map(Event::to_json)
            .collect()
    }
}

/// `image_ref` for an image name: `ubuntu:24.04` is `registry-1.docker.io`,
/// `library/ubuntu`, `24.04`, with a digest derived from the name.
pub(crate) fn image_ref(image: &str) -> Value {
    let (name, tag) = match image.rsplit_once(':') {
        Some((n, t)) if !t.contains('/') => (n, t),
        _ => (image, "latest"),
    };
    let (registry, repository) = match name.split_once('/') {
        Some((host, rest)) if host.contains('.') || host.contains(':') => {
            (host.to_owned(), rest.to_owned())
        }
        Some(_) => ("registry-1.docker.io".to_owned(), name.to_owned()),
        None => ("registry-1.docker.io".to_owned(), format!("library/{name}")),
    };
    use std::hash::Hasher;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    hasher.write(image.as_bytes());
    let seed = hasher.finish();
    json!({
        "registry": registry,
        "repository": repository,
        "tag": tag,
        "digest": format!("sha256:{}", format!("{seed:016x}").repeat(4)),
        "labels": {},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_have_fly_shapes() {
        let v = ulid();
        assert_eq!(v.len(), 26);
        assert!(
            v.chars()
                .all(|c| c.is_ascii_alphanumeric() && !c.is_ascii_lowercase())
        );
        assert_ne!(ulid(), v);
        let id = hex(14);
        assert_eq!(id.len(), 14);
        assert!(id.chars().all(|c| c.is_ascii_hexdigit()));
    }

    #[test]
    fn image_refs_follow_docker_naming() {
        let r = image_ref("ubuntu:24.04");
        assert_eq!(r["repository"], "library/ubuntu");
        assert_eq!(r["tag"], "24.04");
        let r = image_ref("registry.fly.io/app:deployment-1");
        assert_eq!(r["registry"], "registry.fly.io");
        assert_eq!(r["repository"], "app");
        let r = image_ref("python");
        assert_eq!(r["tag"], "latest");
    }
}
