//! Creating sandboxes (PROTOCOL.md §2.1): [`DaytonaCreate`], Daytona's create options, and
//! [`create`], which creates at most once per idempotency key and waits until `started`.

use super::wait::wait_started;
use crate::api::client::Api;
use crate::config::{IDEMPOTENCY_LABEL, PROVIDER};
use crate::error::is_state_change_in_progress;
use crate::wire::{BuildInfo, CreateSandboxBody, SandboxDto, VolumeMount};
use sandbox_sdk_core::idempotency::{
    FINGERPRINT_LABEL, check_adoption, create_fingerprint, create_once,
};
use sandbox_sdk_core::{CreateSpec, Error, ErrorKind, Result};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fmt;

/// Everything Daytona's create takes (PROTOCOL.md §2.1). Unset fields keep Daytona's defaults.
/// `Debug` shows env names only.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct DaytonaCreate {
    /// Sandbox name (unique in the organization; a duplicate is `Conflict`).
    pub name: Option<String>,
    /// Snapshot id or name to start from.
    pub snapshot: Option<String>,
    /// A container image to build the sandbox from (sent as a one-line Dockerfile `FROM`);
    /// exclusive with `snapshot`.
    pub image: Option<String>,
    /// The user commands run as.
    pub user: Option<String>,
    /// Environment of every process.
    pub env: BTreeMap<String, String>,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// CPU cores (not allowed with a snapshot).
    pub cpu: Option<u32>,
    /// Memory in GB (not allowed with a snapshot).
    pub memory_gb: Option<u32>,
    /// Disk in GB (not allowed with a snapshot).
    pub disk_gb: Option<u32>,
    /// GPUs (not allowed with a snapshot).
    pub gpu: Option<u32>,
    /// Region; defaults to the builder's target.
    pub target: Option<String>,
    /// Minutes idle before auto-stop (0 = never).
    pub auto_stop_minutes: Option<i64>,
    /// Minutes stopped before auto-archive (0 = the maximum).
    pub auto_archive_minutes: Option<i64>,
    /// Minutes stopped before auto-delete (negative = never, 0 = on stop).
    pub auto_delete_minutes: Option<i64>,
    /// Wall-clock time to live in minutes (0 = none).
    pub ttl_minutes: Option<i64>,
    /// Volumes to mount.
    pub volumes: Vec<VolumeMount>,
    /// Block all outbound network traffic.
    pub network_block_all: Option<bool>,
    /// Allowed outbound CIDRs.
    pub network_allow_list: Vec<String>,
    /// Allowed outbound domains.
    pub domain_allow_list: Vec<String>,
    /// Make preview links public (no token needed).
    pub public: Option<bool>,
}

impl fmt::Debug for DaytonaCreate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DaytonaCreate")
            .field("name", &self.name)
            .field("snapshot", &self.snapshot)
            .field("image", &self.image)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("labels", &self.labels)
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

impl DaytonaCreate {
    /// Daytona's options for a core [`CreateSpec`]: template → snapshot, metadata → labels,
    /// memory rounded up to whole GB, timeout → `ttlMinutes` (rounded up), region → target,
    /// and the idempotency key kept as the label [`IDEMPOTENCY_LABEL`] (with the create
    /// fingerprint as [`FINGERPRINT_LABEL`]) and, when the spec names no sandbox, turned into
    /// the name [`idempotency_name`] (Daytona's dedupe key).
    pub fn from_spec(spec: &CreateSpec) -> Self {
        let mut labels = spec.metadata.clone();
        if let (Some(key), Some(fingerprint)) = (&spec.idempotency_key, create_fingerprint(spec)) {
            labels.insert(IDEMPOTENCY_LABEL.to_owned(), key.clone());
            labels.insert(FINGERPRINT_LABEL.to_owned(), fingerprint);
        }
        let name = spec
            .name
            .clone()
            .or_else(|| spec.idempotency_key.as_deref().map(idempotency_name));
        DaytonaCreate {
            name,
            snapshot: spec.template.clone(),
            env: spec.env.clone(),
            labels,
            cpu: spec.resources.cpus,
            memory_gb: spec.resources.memory_mb.map(|mb| mb.div_ceil(1024) as u32),
            disk_gb: spec.resources.disk_gb.map(|gb| gb as u32),
            gpu: spec.resources.gpus,
            target: spec.region.clone(),
            ttl_minutes: spec.timeout.map(|t| t.as_secs().div_ceil(60) as i64),
            ..Default::default()
        }
    }

    /// Refuses what Daytona would answer 400 to (PROTOCOL.md §2.1), before sending anything:
    /// resources with a snapshot (a snapshot fixes the size), and a snapshot with an image.
    fn check(&self) -> Result<()> {
        let Some(snapshot) = &self.snapshot else {
            return Ok(());
        };
        if self.image.is_some() {
            return Err(Error::validation(format!(
                "snapshot {snapshot:?} and image cannot both be set: Daytona starts a sandbox \
                 from one or the other; keep only one"
            ))
            .with_provider(PROVIDER)
            .with_operation("create"));
        }
        let resources: Vec<&str> = [
            ("cpu", self.cpu.is_some()),
            ("memory_gb", self.memory_gb.is_some()),
            ("disk_gb", self.disk_gb.is_some()),
            ("gpu", self.gpu.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, set)| set.then_some(name))
        .collect();
        if resources.is_empty() {
            return Ok(());
        }
        Err(Error::validation(format!(
            "snapshot {snapshot:?} cannot be combined with resources ({}): Daytona sizes a \
             sandbox from its snapshot; drop the resources, or set image instead of snapshot \
             (resources apply to an image build), or make a snapshot of that size with \
             DaytonaProvider::prepare",
            resources.join(", ")
        ))
        .with_provider(PROVIDER)
        .with_operation("create"))
    }

    fn body(&self, default_target: Option<&String>) -> CreateSandboxBody {
        let csv = |v: &Vec<String>| (!v.is_empty()).then(|| v.join(","));
        CreateSandboxBody {
            name: self.name.clone(),
            snapshot: self.snapshot.clone(),
            user: self.user.clone(),
            env: self.env.clone(),
            labels: self.labels.clone(),
            public: self.public,
            network_block_all: self.network_block_all,
            network_allow_list: csv(&self.network_allow_list),
            domain_allow_list: csv(&self.domain_allow_list),
            target: self.target.clone().or_else(|| default_target.cloned()),
            cpu: self.cpu,
            gpu: self.gpu,
            memory: self.memory_gb,
            disk: self.disk_gb,
            auto_stop_interval: self.auto_stop_minutes,
            auto_archive_interval: self.auto_archive_minutes,
            auto_delete_interval: self.auto_delete_minutes,
            ttl_minutes: self.ttl_minutes,
            volumes: self.volumes.clone(),
            build_info: self.image.as_ref().map(|image| BuildInfo {
                dockerfile_content: format!("FROM {image}\n"),
            }),
        }
    }
}

/// Creates through [`create_once`]: with `keyed`, the spec carrying an idempotency key (and so
/// a name, see [`idempotency_name`]), a sandbox already made under that name is adopted if
/// this create made it ([`check_adoption`]; anyone else's is a `Conflict`), a create that may
/// have happened is settled by looking the name up for the builder's
/// [`create_lookup`](crate::DaytonaBuilder::create_lookup) window, and a 409 "name exists" for a
/// sandbox this create made is that sandbox. Then waits until `started`.
pub(crate) async fn create(
    api: &Api,
    options: &DaytonaCreate,
    keyed: Option<&CreateSpec>,
) -> Result<SandboxDto> {
    options.check()?;
    let body = options.body(api.config.target.as_ref());
    let name = options.name.as_deref();
    let keyed = keyed.filter(|spec| spec.idempotency_key.is_some());
    let key = keyed.and_then(|spec| spec.idempotency_key.as_deref());
    let lookup = || async move {
        match (keyed, name) {
            (Some(spec), Some(name)) => find_created(api, name, spec).await,
            _ => Ok(None),
        }
    };
    let send = || async {
        let sent = api.create_sandbox(&body).await;
        match sent {
            // Daytona's dedupe: the name is taken. Ours (it carries the key) when an earlier
            // attempt got through; anyone else's is a real conflict.
            Err(e) if key.is_some() && is_name_taken(&e) => match lookup().await? {
                Some(dto) => {
                    tracing::info!(
                        sandbox_id = %dto.id,
                        "create: the name is taken by the sandbox an earlier attempt made; adopting it"
                    );
                    Ok(dto)
                }
                None => Err(e),
            },
            other => other,
        }
    };
    let dto = create_once(key, &api.config.create_lookup, send, lookup).await?;
    wait_started(api, &dto.id, dto.clone(), "create").await
}

/// The sandbox a create of `spec` (with its key) made, found by its `name`
/// (`GET /sandbox/{idOrName}`, PROTOCOL.md §2.2): `None` for a 404 and for a sandbox being
/// destroyed (delete renames it `DESTROYED_<name>_<ms>` and frees the name); a `Conflict`
/// ([`check_adoption`]) for a live sandbox of that name this create did not make (without the
/// key's label, the create fingerprint or the spec's labels: someone else's).
async fn find_created(api: &Api, name: &str, spec: &CreateSpec) -> Result<Option<SandboxDto>> {
    let key = spec.idempotency_key.as_deref().unwrap_or_default();
    let dto = match api.get_sandbox(name, "create").await {
        Ok(dto) => dto,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let going = matches!(dto.state.as_deref(), Some("destroying" | "destroyed"))
        || dto.desired_state.as_deref() == Some("destroyed")
        || dto
            .name
            .as_deref()
            .is_some_and(|n| n.starts_with("DESTROYED_"));
    if going {
        return Ok(None);
    }
    // A sandbox of this name without the key's label is judged as carrying no labels at all.
    let none = BTreeMap::new();
    let labels = dto
        .labels
        .as_ref()
        .filter(|l| l.get(IDEMPOTENCY_LABEL).map(String::as_str) == Some(key))
        .unwrap_or(&none);
    check_adoption(spec, &dto.id, labels).map_err(|e| e.with_provider(PROVIDER))?;
    Ok(Some(dto))
}

/// The sandbox name an idempotency key gives a create that names none: `sdk-idem-` and the
/// first 32 hex digits (128 bits) of the key's SHA-256, so any key (any length, any characters)
/// becomes a short name of lowercase letters, digits and `-`, the same from every process.
/// Daytona names are unique per organization (a duplicate is 409, PROTOCOL.md §2.1), which is
/// what makes a retried create find the first one.
pub fn idempotency_name(key: &str) -> String {
    let digest = Sha256::digest(key.as_bytes());
    let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("sdk-idem-{hex}")
}

/// Whether a create failed because the name is taken (409, not a state change in progress).
fn is_name_taken(error: &Error) -> bool {
    error.kind() == ErrorKind::Conflict
        && error.status() == Some(409)
        && !is_state_change_in_progress(error)
}

/// Checks a core spec before anything is sent: env names and values, and a template with
/// resources (see [`check_template_without_resources`]).
pub(crate) fn check_spec(spec: &CreateSpec) -> Result<()> {
    for (key, value) in &spec.env {
        sandbox_sdk_core::validate_env_name(key)?;
        if value.contains('\0') {
            return Err(Error::validation(format!("env {key} contains a NUL byte")));
        }
    }
    check_template_without_resources(spec)
}

/// The core spec's template becomes a Daytona snapshot, and Daytona refuses resources with a
/// snapshot (400 "Cannot specify Sandbox resources when using a snapshot", PROTOCOL.md §2.1),
/// so that pair is refused here, in the spec's own field names, before anything is sent.
fn check_template_without_resources(spec: &CreateSpec) -> Result<()> {
    let Some(template) = &spec.template else {
        return Ok(());
    };
    let r = &spec.resources;
    let set: Vec<&str> = [
        ("resources.cpus", r.cpus.is_some()),
        ("resources.memory_mb", r.memory_mb.is_some()),
        ("resources.disk_gb", r.disk_gb.is_some()),
        ("resources.gpus", r.gpus.is_some()),
    ]
    .into_iter()
    .filter_map(|(name, on)| on.then_some(name))
    .collect();
    if set.is_empty() {
        return Ok(());
    }
    Err(Error::validation(format!(
        "template {template:?} cannot be combined with {}: on Daytona a template is a snapshot, \
         which fixes the sandbox's size; drop the resources and use a snapshot of the size \
         wanted (DaytonaProvider::prepare makes one), or create from an image with \
         DaytonaProvider::create_sandbox and DaytonaCreate::image, where resources apply",
        set.join(", ")
    ))
    .with_provider(PROVIDER)
    .with_operation("create"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn create_spec_maps_onto_daytona_options() {
        let spec = CreateSpec::new()
            .template("snap")
            .metadata("team", "x")
            .env("A", "1")
            .timeout(Duration::from_secs(61))
            .idempotency_key("job-1")
            .region("eu");
        let create = DaytonaCreate::from_spec(&spec);
        let body = serde_json::to_value(create.body(Some(&"us".to_owned()))).unwrap();
        assert_eq!(
            body,
            serde_json::json!({
                "name": idempotency_name("job-1"),
                "snapshot": "snap",
                "env": {"A": "1"},
                "labels": {
                    "team": "x",
                    IDEMPOTENCY_LABEL: "job-1",
                    FINGERPRINT_LABEL: create_fingerprint(&spec),
                },
                "target": "eu",
                "ttlMinutes": 2
            })
        );
        let create = DaytonaCreate {
            image: Some("python:3.12".into()),
            network_allow_list: vec!["10.0.0.0/8".into(), "192.168.0.0/16".into()],
            ..Default::default()
        };
        let body = serde_json::to_value(create.body(Some(&"us".to_owned()))).unwrap();
        assert_eq!(body["buildInfo"]["dockerfileContent"], "FROM python:3.12\n");
        assert_eq!(body["networkAllowList"], "10.0.0.0/8,192.168.0.0/16");
        assert_eq!(body["target"], "us");
    }

    #[test]
    fn idempotency_names_are_stable_short_and_valid() {
        let a = idempotency_name("job-1");
        assert_eq!(a, idempotency_name("job-1"));
        assert_ne!(a, idempotency_name("job-2"));
        assert_eq!(a.len(), "sdk-idem-".len() + 32);
        let odd = idempotency_name(&format!("Ünïcode / spaces {}", "x".repeat(500)));
        assert!(
            odd.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
            "{odd}"
        );
        // A name the caller gave wins over the derived one.
        let spec = CreateSpec::new().name("mine").idempotency_key("job-1");
        assert_eq!(
            DaytonaCreate::from_spec(&spec).name.as_deref(),
            Some("mine")
        );
    }

    #[test]
    fn debug_hides_env_values() {
        let mut c = DaytonaCreate::default();
        c.env.insert("TOKEN".into(), "canary-secret".into());
        assert!(!format!("{c:?}").contains("canary-secret"));
    }
}
