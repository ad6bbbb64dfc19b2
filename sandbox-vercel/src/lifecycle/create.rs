//! Creating sandboxes (PROTOCOL.md §4.1–§4.2): [`VercelCreate`], Vercel's create options, and
//! [`create`], which creates at most once per idempotency key.
//!
//! Vercel has no idempotency key; a sandbox name is unique per project and a second create
//! under it answers 400 "already exists" (§4.2). So a keyed create names its sandbox after the
//! key ([`idempotency_name`], unless the spec names it) and tags it with the create fingerprint
//! ([`FINGERPRINT_LABEL`]) beside the spec's metadata (the owner label among them). Before
//! sending, and after an ambiguous failure, it looks the name up: a sandbox there is adopted
//! only when [`check_adoption`] finds this create's fingerprint and every label the spec asks
//! for among its tags; anything else (a sandbox someone else named so, with no tags, or other
//! tags) is a `Conflict` and is neither adopted nor touched.

use super::state;
use crate::api::{Api, CreateVersion};
use crate::config::{MAX_PORTS, MAX_TAGS, PROVIDER};
use crate::wire::{CreateBody, ResourcesBody, SandboxEnvelope, Source};
use sandbox_sdk_core::idempotency::{
    FINGERPRINT_LABEL, check_adoption, create_fingerprint, create_once,
};
use sandbox_sdk_core::{CreateSpec, Error, ErrorKind, Result, SandboxInfo};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fmt;

/// The runtimes `POST /v2/sandboxes` takes (PROTOCOL.md §4.1); a template naming one of them
/// is sent as `runtime`, anything else as a container `image` to `/v3/sandboxes`.
pub const RUNTIMES: &[&str] = &["node26", "node24", "node22", "python3.13"];

/// Everything Vercel's create takes that the adapter sends (PROTOCOL.md §4.1). Unset fields
/// keep Vercel's defaults. `Debug` shows env names only.
#[derive(Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct VercelCreate {
    /// The sandbox name (unique per project; `[a-zA-Z0-9_-]`, at most 128). Unset: Vercel
    /// picks one.
    pub name: Option<String>,
    /// A runtime (`node24`, `python3.13`, ...): sent to `/v2/sandboxes`.
    pub runtime: Option<String>,
    /// A container image: sent to `/v3/sandboxes` (without runtime or image, v3 uses the
    /// default universal image).
    pub image: Option<String>,
    /// A snapshot to start from (`snap_…`).
    pub snapshot: Option<String>,
    /// vCPUs (1 or an even number up to 32).
    pub vcpus: Option<u32>,
    /// Memory in MB (2048 per vCPU by default).
    pub memory_mb: Option<u64>,
    /// Ports to expose; added to the builder's.
    pub ports: Vec<u16>,
    /// Session lifetime in milliseconds (Vercel's default is 5 minutes).
    pub timeout_ms: Option<u64>,
    /// Environment of every command.
    pub env: BTreeMap<String, String>,
    /// Tags (at most 5).
    pub tags: BTreeMap<String, String>,
    /// Region; defaults to the builder's.
    pub region: Option<String>,
    /// Snapshot on stop and restore on resume (Vercel's default: `true`).
    pub persistent: Option<bool>,
    /// The network policy as Vercel takes it (PROTOCOL.md §4.6), sent as given.
    pub network_policy: Option<Value>,
}

impl fmt::Debug for VercelCreate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VercelCreate")
            .field("name", &self.name)
            .field("runtime", &self.runtime)
            .field("image", &self.image)
            .field("snapshot", &self.snapshot)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("tags", &self.tags)
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

impl VercelCreate {
    /// Vercel's options for a core [`CreateSpec`]: a template is a snapshot (`snap_…`), a
    /// runtime ([`RUNTIMES`]) or an image; metadata becomes tags, with the create fingerprint
    /// ([`FINGERPRINT_LABEL`]) when the spec has an idempotency key; the timeout is sent in
    /// milliseconds; the key becomes the name [`idempotency_name`] unless the spec names the
    /// sandbox.
    pub fn from_spec(spec: &CreateSpec) -> Self {
        let mut tags = spec.metadata.clone();
        tags.remove(FINGERPRINT_LABEL);
        if let Some(fingerprint) = create_fingerprint(spec) {
            tags.insert(FINGERPRINT_LABEL.to_owned(), fingerprint);
        }
        let name = spec
            .name
            .clone()
            .or_else(|| spec.idempotency_key.as_deref().map(idempotency_name));
        let mut create = VercelCreate {
            name,
            vcpus: spec.resources.cpus,
            memory_mb: spec.resources.memory_mb,
            timeout_ms: spec
                .timeout
                .map(|t| t.as_millis().min(u64::MAX as u128) as u64),
            env: spec.env.clone(),
            tags,
            region: spec.region.clone(),
            ..VercelCreate::default()
        };
        match spec.template.as_deref() {
            Some(t) if t.starts_with("snap_") => create.snapshot = Some(t.to_owned()),
            Some(t) if RUNTIMES.contains(&t) => create.runtime = Some(t.to_owned()),
            Some(t) => create.image = Some(t.to_owned()),
            None => {}
        }
        create
    }

    /// Refuses what Vercel would refuse, before anything is sent.
    pub(crate) fn check(&self, builder_ports: &[u16]) -> Result<()> {
        let invalid = |m: String| {
            Err(Error::validation(m)
                .with_provider(PROVIDER)
                .with_operation("create"))
        };
        if let Some(name) = &self.name
            && !valid_name(name)
        {
            return invalid(format!(
                "invalid sandbox name {name:?}: Vercel takes 1 to 128 of [a-zA-Z0-9_-]"
            ));
        }
        if self.tags.len() > MAX_TAGS {
            return invalid(format!(
                "{} tags (metadata, owner label and create fingerprint together): a Vercel \
                 sandbox carries at most {MAX_TAGS}",
                self.tags.len()
            ));
        }
        let ports = self.ports(builder_ports);
        if ports.len() > MAX_PORTS {
            return invalid(format!(
                "{} ports: a Vercel sandbox exposes at most {MAX_PORTS}",
                ports.len()
            ));
        }
        let sources = [
            self.runtime.is_some(),
            self.image.is_some(),
            self.snapshot.is_some(),
        ];
        if sources.iter().filter(|s| **s).count() > 1 {
            return invalid("set one of runtime, image and snapshot, not several".into());
        }
        for (key, value) in &self.env {
            sandbox_sdk_core::validate_env_name(key)?;
            if value.contains('\0') {
                return invalid(format!("env {key} contains a NUL byte"));
            }
        }
        Ok(())
    }

    fn ports(&self, builder_ports: &[u16]) -> Vec<u16> {
        let mut ports = builder_ports.to_vec();
        for p in &self.ports {
            if !ports.contains(p) {
                ports.push(*p);
            }
        }
        ports
    }

    /// The endpoint and body (PROTOCOL.md §4.1): v2 when a runtime is given, else v3.
    pub(crate) fn body(&self, api: &Api) -> (CreateVersion, CreateBody) {
        let version = if self.runtime.is_some() {
            CreateVersion::V2
        } else {
            CreateVersion::V3
        };
        let resources =
            (self.vcpus.is_some() || self.memory_mb.is_some()).then_some(ResourcesBody {
                vcpus: self.vcpus,
                memory: self.memory_mb,
            });
        let body = CreateBody {
            project_id: Some(api.settings.project_id.clone()),
            name: self.name.clone(),
            source: self
                .snapshot
                .clone()
                .map(|snapshot_id| Source::Snapshot { snapshot_id }),
            runtime: self.runtime.clone(),
            image: self.image.clone(),
            resources,
            ports: self.ports(&api.settings.ports),
            timeout: self.timeout_ms,
            env: self.env.clone(),
            tags: self.tags.clone(),
            region: self.region.clone().or_else(|| api.settings.region.clone()),
            persistent: self.persistent,
            network_policy: self.network_policy.clone(),
        };
        (version, body)
    }
}

/// Whether Vercel takes `name` as a sandbox name (PROTOCOL.md §3).
pub(crate) fn valid_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The sandbox name an idempotency key gives a create that names none: `sdk-idem-` and the
/// first 32 hex digits (128 bits) of the key's SHA-256, so any key (an owner-scoped one holds
/// `:` and `/`) becomes a valid name, the same from every process.
pub fn idempotency_name(key: &str) -> String {
    let digest = Sha256::digest(key.as_bytes());
    let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("sdk-idem-{hex}")
}

/// Creates through [`create_once`]. With `keyed` (the spec, carrying an idempotency key), the
/// name is looked up first and a sandbox made by this create is adopted; an ambiguous failure
/// is settled by looking the name up for the builder's window; and a duplicate-name answer
/// adopts the sandbox only if this create made it (else the `Conflict` goes back). Without a
/// key the create is sent once and its answer returned.
pub(crate) async fn create(
    api: &Api,
    options: &VercelCreate,
    keyed: Option<&CreateSpec>,
) -> Result<SandboxEnvelope> {
    options.check(&api.settings.ports)?;
    let (version, body) = options.body(api);
    let keyed = keyed.filter(|spec| spec.idempotency_key.is_some());
    let key = keyed.and_then(|spec| spec.idempotency_key.as_deref());
    let name = options.name.as_deref();
    let lookup = || async move {
        match (keyed, name) {
            (Some(spec), Some(name)) => find_created(api, name, spec).await,
            _ => Ok(None),
        }
    };
    let send = || async {
        match api.create(version, &body).await {
            Err(e) if key.is_some() && is_duplicate_name(&e) => match lookup().await? {
                Some(found) => {
                    tracing::info!(
                        sandbox = %found.sandbox.name,
                        "create: the name is taken by the sandbox an earlier attempt made; adopting it"
                    );
                    Ok(found)
                }
                None => Err(e),
            },
            other => other,
        }
    };
    create_once(key, &api.settings.create_lookup, send, lookup).await
}

/// The sandbox a create of `spec` made under `name` (`GET /v2/sandboxes/{name}?resume=false`,
/// PROTOCOL.md §4.3): `None` for a 404; the sandbox when [`check_adoption`] accepts its tags;
/// a `Conflict` otherwise.
async fn find_created(api: &Api, name: &str, spec: &CreateSpec) -> Result<Option<SandboxEnvelope>> {
    let found = match api.get_sandbox(name, false, "create").await {
        Ok(found) => found,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let none = BTreeMap::new();
    let tags = found.sandbox.tags.as_ref().unwrap_or(&none);
    check_adoption(spec, name, tags).map_err(|e| e.with_provider(PROVIDER))?;
    Ok(Some(found))
}

/// The sandbox a keyed create that named none made: the one named [`idempotency_name`]`(key)`
/// (`GET /v2/sandboxes/{name}?resume=false`, PROTOCOL.md §4.3), in any state, or `None` for a
/// 404. Nothing is resumed. A keyed create whose spec named its sandbox is under that name,
/// which the key alone does not give: it is not found here.
pub(crate) async fn find_keyed(api: &Api, key: &str) -> Result<Option<SandboxInfo>> {
    let name = idempotency_name(key);
    match api
        .get_sandbox(&name, false, "find_by_idempotency_key")
        .await
    {
        Ok(found) => Ok(Some(state::info(&found.sandbox, found.session.as_ref()))),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether a create failed because the name is taken (PROTOCOL.md §4.2; `error::map_error`
/// makes that 400 a `Conflict`, and a 409 would be one too).
fn is_duplicate_name(error: &Error) -> bool {
    error.kind() == ErrorKind::Conflict
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_spec_maps_onto_vercel_options() {
        let spec = CreateSpec::new()
            .template("python3.13")
            .metadata("team", "x")
            .env("A", "1")
            .timeout(Duration::from_secs(61))
            .idempotency_key("job-1")
            .region("iad1");
        let c = VercelCreate::from_spec(&spec);
        assert_eq!(c.name.as_deref(), Some(idempotency_name("job-1").as_str()));
        assert_eq!(c.runtime.as_deref(), Some("python3.13"));
        assert_eq!(c.timeout_ms, Some(61_000));
        assert_eq!(c.tags.get("team").map(String::as_str), Some("x"));
        assert_eq!(
            c.tags.get(FINGERPRINT_LABEL),
            create_fingerprint(&spec).as_ref()
        );
        assert_eq!(
            VercelCreate::from_spec(&CreateSpec::new().template("snap_1"))
                .snapshot
                .as_deref(),
            Some("snap_1")
        );
        assert_eq!(
            VercelCreate::from_spec(&CreateSpec::new().template("repo/img:1"))
                .image
                .as_deref(),
            Some("repo/img:1")
        );
        // A name the caller gave wins over the derived one; no key, no fingerprint.
        let c = VercelCreate::from_spec(
            &CreateSpec::new()
                .name("mine")
                .metadata(FINGERPRINT_LABEL, "forged"),
        );
        assert_eq!(c.name.as_deref(), Some("mine"));
        assert!(c.tags.is_empty());
    }

    #[test]
    fn what_vercel_refuses_is_refused_before_sending() {
        let ok = VercelCreate::from_spec(&CreateSpec::new().idempotency_key("sandbox_sdk:me/job"));
        ok.check(&[]).unwrap();
        let mut bad = ok.clone();
        bad.name = Some("no spaces".into());
        assert_eq!(bad.check(&[]).unwrap_err().kind(), ErrorKind::Validation);
        let mut many = ok.clone();
        for i in 0..5 {
            many.tags.insert(format!("t{i}"), "v".into());
        }
        assert!(many.check(&[]).unwrap_err().message().contains("at most 5"));
        let mut both = ok;
        both.runtime = Some("node24".into());
        both.image = Some("img".into());
        assert!(both.check(&[]).is_err());
    }

    #[test]
    fn idempotency_names_are_stable_short_and_valid() {
        let a = idempotency_name("job-1");
        assert_eq!(a, idempotency_name("job-1"));
        assert_ne!(a, idempotency_name("job-2"));
        assert!(valid_name(&a));
        assert!(valid_name(&idempotency_name(&format!(
            "Ünï / {}",
            "x".repeat(500)
        ))));
    }

    #[test]
    fn debug_hides_env_values() {
        let mut c = VercelCreate::default();
        c.env.insert("TOKEN".into(), "canary-secret".into());
        assert!(!format!("{c:?}").contains("canary-secret"));
    }
}
