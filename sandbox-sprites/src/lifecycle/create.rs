//! Creating sprites (PROTOCOL.md §4.1, §18.1–§18.4): [`SpritesCreate`], Sprites' create options,
//! and [`create`], which creates at most once per idempotency key.
//!
//! Sprites has no idempotency key, but a name is unique in the organisation and a second
//! create under it is refused as "already exists" (§4.1). So a keyed create names its sprite
//! after the key ([`idempotency_name`], unless the spec names it) and labels it with the create
//! fingerprint ([`FINGERPRINT_LABEL`]) beside the spec's metadata (the owner label among them).
//! Before sending, and after an ambiguous failure, it reads the name: a sprite there is adopted
//! only when [`check_adoption`] finds this create's fingerprint and every label the spec asks
//! for; anything else is a `Conflict` and is neither adopted nor touched. A create without a
//! key whose name the adapter made up is settled the same way after an ambiguous failure (the
//! random name is no one else's), so it leaves no orphan either.

use super::state::metadata_to_labels;
use crate::api::Api;
use crate::config::PROVIDER;
use crate::wire::{CreateBody, Sprite, SpriteConfig, UrlSettings};
use sandbox_sdk_core::idempotency::{
    FINGERPRINT_LABEL, check_adoption, create_fingerprint, create_once, look_up_within,
};
use sandbox_sdk_core::{CreateSpec, Error, ErrorKind, Result, SandboxInfo};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fmt;

/// The name rule this adapter checks before sending (§18.2: a DNS label).
pub(crate) const NAME_RULE: &str =
    "sprite names are 1 to 63 lowercase letters, digits and '-', not starting or ending with '-'";

/// Everything Sprites' create takes that the adapter sends (PROTOCOL.md §4.1). `Debug` shows
/// environment names only.
#[derive(Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct SpritesCreate {
    /// The sprite name (unique in the organisation). Unset: `sdk-` and a random suffix.
    pub name: Option<String>,
    /// Sizes and region (`config`; whether Sprites honours them is unconfirmed, §15).
    pub config: Option<SpriteConfig>,
    /// Base environment of every command (`environment`, §18.4).
    pub env: BTreeMap<String, String>,
    /// Labels as `key=value` (§18.3).
    pub labels: BTreeMap<String, String>,
    /// A public URL (`url_settings.auth = public`); unset: the builder's choice.
    pub public_url: Option<bool>,
}

impl fmt::Debug for SpritesCreate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpritesCreate")
            .field("name", &self.name)
            .field("config", &self.config)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("labels", &self.labels)
            .field("public_url", &self.public_url)
            .finish()
    }
}

impl SpritesCreate {
    /// Sprites' options for a core [`CreateSpec`]: metadata becomes labels, with the create
    /// fingerprint when the spec has an idempotency key; resources and region go in `config`;
    /// the key becomes the name [`idempotency_name`] unless the spec names the sprite. A
    /// template is refused by the create (every sprite starts from Fly's one base image), and
    /// `timeout` is not sent: sprites have no lifetime (they hibernate when idle, §4.5).
    pub fn from_spec(spec: &CreateSpec) -> Self {
        let mut labels = spec.metadata.clone();
        labels.remove(FINGERPRINT_LABEL);
        if let Some(fingerprint) = create_fingerprint(spec) {
            labels.insert(FINGERPRINT_LABEL.to_owned(), fingerprint);
        }
        let r = &spec.resources;
        let config = (r.cpus.is_some()
            || r.memory_mb.is_some()
            || r.disk_gb.is_some()
            || spec.region.is_some())
        .then(|| SpriteConfig {
            cpus: r.cpus,
            ram_mb: r.memory_mb,
            storage_gb: r.disk_gb,
            region: spec.region.clone(),
        });
        SpritesCreate {
            name: spec
                .name
                .clone()
                .or_else(|| spec.idempotency_key.as_deref().map(idempotency_name)),
            config,
            env: spec.env.clone(),
            labels,
            public_url: None,
        }
    }

    /// Refuses what Sprites would refuse, before anything is sent.
    pub(crate) fn check(&self) -> Result<()> {
        let invalid = |m: String| {
            Err(Error::validation(m)
                .with_provider(PROVIDER)
                .with_operation("create"))
        };
        if let Some(name) = &self.name
            && !valid_name(name)
        {
            return invalid(format!("invalid sprite name {name:?}: {NAME_RULE}"));
        }
        for (key, value) in &self.env {
            sandbox_sdk_core::validate_env_name(key)?;
            if value.contains('\0') {
                return invalid(format!("env {key} contains a NUL byte"));
            }
        }
        if let Some(key) = self.labels.keys().find(|k| k.is_empty() || k.contains('=')) {
            return invalid(format!(
                "label name {key:?}: labels are sent as key=value, so a name must be non-empty \
                 and hold no '='"
            ));
        }
        Ok(())
    }

    fn body(&self, api: &Api) -> CreateBody {
        let public = self.public_url.unwrap_or(api.settings.public_url);
        CreateBody {
            name: self
                .name
                .clone()
                .unwrap_or_else(|| match &api.settings.names {
                    Some(names) => names(),
                    None => random_name(),
                }),
            config: self.config.clone(),
            url_settings: Some(UrlSettings {
                auth: Some(if public { "public" } else { "sprite" }.to_owned()),
            }),
            labels: metadata_to_labels(&self.labels),
            environment: self.env.clone(),
            wait_for_capacity: api.settings.wait_for_capacity,
        }
    }
}

/// Whether Sprites takes `name` (§18.2).
pub(crate) fn valid_name(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

/// The sprite name an idempotency key gives a create that names none: `sdk-idem-` and the
/// first 32 hex digits (128 bits) of the key's SHA-256, so any key becomes a valid name, the
/// same from every process.
pub fn idempotency_name(key: &str) -> String {
    let digest = Sha256::digest(key.as_bytes());
    let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("sdk-idem-{hex}")
}

/// A fresh name for a create that names none and has no key.
fn random_name() -> String {
    format!("sdk-{}", uuid::Uuid::new_v4().simple())
}

/// Creates through [`create_once`] (see the module docs). `spec` is the core spec when the
/// create came through the core API (a template in it is refused); its key makes the create
/// keyed.
pub(crate) async fn create(
    api: &Api,
    options: &SpritesCreate,
    spec: Option<&CreateSpec>,
) -> Result<Sprite> {
    if let Some(template) = spec.and_then(|s| s.template.as_deref()) {
        return Err(Error::new(
            ErrorKind::NotSupported,
            format!(
                "sprites: every sprite starts from Fly's base image; template {template:?} \
                 cannot be used (restore a checkpoint instead)"
            ),
        )
        .with_provider(PROVIDER)
        .with_operation("create"));
    }
    options.check()?;
    let body = options.body(api);
    // A name this adapter made up (128 random bits) is no one else's: an ambiguous create
    // without a key is settled by reading it too, so a lost answer leaves no orphan.
    let generated = options.name.is_none();
    let keyed = spec.filter(|s| s.idempotency_key.is_some());
    let key = keyed.and_then(|s| s.idempotency_key.as_deref());
    let name = body.name.as_str();
    let lookup = || async move {
        match keyed {
            Some(spec) => find_created(api, name, spec).await,
            None => Ok(None),
        }
    };
    let send = || async {
        match api.create(&body).await {
            Err(e) if key.is_some() && e.kind() == ErrorKind::Conflict => match lookup().await? {
                Some(found) => {
                    tracing::info!(
                        sprite = %found.name,
                        "create: the name is taken by the sprite an earlier attempt made; adopting it"
                    );
                    Ok(found)
                }
                None => Err(e),
            },
            other => other,
        }
    };
    match create_once(key, &api.settings.create_lookup, send, lookup).await {
        Err(e) if key.is_none() && generated && e.is_ambiguous() => {
            let read = || async move {
                match api.get(name, "create").await {
                    Ok(sprite) => Ok(Some(sprite)),
                    Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
                    Err(e) => Err(e),
                }
            };
            match look_up_within(&api.settings.create_lookup, read).await {
                Some(sprite) => {
                    tracing::info!(sprite = %sprite.name, "create: the ambiguous create made the sprite; using it");
                    Ok(sprite)
                }
                None => Err(e),
            }
        }
        other => other,
    }
}

/// The sprite a create of `spec` made under `name`: `None` for a 404; the sprite when
/// [`check_adoption`] accepts its labels; a `Conflict` otherwise.
async fn find_created(api: &Api, name: &str, spec: &CreateSpec) -> Result<Option<Sprite>> {
    let found = match api.get(name, "create").await {
        Ok(found) => found,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let labels = super::state::labels_to_metadata(found.labels.as_deref().unwrap_or_default());
    check_adoption(spec, name, &labels).map_err(|e| e.with_provider(PROVIDER))?;
    Ok(Some(found))
}

/// The sprite a keyed create that named none made: the one named [`idempotency_name`]`(key)`,
/// or `None` for a 404.
pub(crate) async fn find_keyed(api: &Api, key: &str) -> Result<Option<SandboxInfo>> {
    match api
        .get(&idempotency_name(key), "find_by_idempotency_key")
        .await
    {
        Ok(found) => Ok(Some(super::state::info(&found))),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_maps_onto_sprites_options() {
        let spec = CreateSpec::new()
            .metadata("team", "x")
            .env("A", "1")
            .idempotency_key("job-1")
            .region("ord");
        let c = SpritesCreate::from_spec(&spec);
        assert_eq!(c.name.as_deref(), Some(idempotency_name("job-1").as_str()));
        assert_eq!(c.labels.get("team").map(String::as_str), Some("x"));
        assert_eq!(
            c.labels.get(FINGERPRINT_LABEL),
            create_fingerprint(&spec).as_ref()
        );
        assert_eq!(c.config.unwrap().region.as_deref(), Some("ord"));
        let c = SpritesCreate::from_spec(
            &CreateSpec::new()
                .name("mine")
                .metadata(FINGERPRINT_LABEL, "forged"),
        );
        assert_eq!(c.name.as_deref(), Some("mine"));
        assert!(c.labels.is_empty());
        assert!(c.config.is_none());
    }

    #[test]
    fn names_follow_the_dns_label_rule() {
        for ok in [
            "a",
            "web-1",
            &"x".repeat(63),
            &idempotency_name("Ünï / key"),
        ] {
            assert!(valid_name(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", "A", "a_b", "a.b", &"x".repeat(64)] {
            assert!(!valid_name(bad), "{bad}");
        }
        assert!(valid_name(&random_name()));
        let mut c = SpritesCreate::from_spec(&CreateSpec::new().name("Bad Name"));
        assert_eq!(c.check().unwrap_err().kind(), ErrorKind::Validation);
        c.name = None;
        c.labels.insert("a=b".into(), "c".into());
        assert!(c.check().is_err());
    }

    #[test]
    fn debug_hides_env_values() {
        let mut c = SpritesCreate::default();
        c.env.insert("TOKEN".into(), "canary-secret".into());
        assert!(!format!("{c:?}").contains("canary-secret"));
    }
}
