//! [`FlyProvider`]: creates, finds and lists machines of one app.

use crate::api::Api;
use crate::builder::FlyBuilder;
use crate::capabilities::CAPABILITIES;
use crate::error::PROVIDER;
use crate::sandbox::FlySandbox;
use crate::state::{fly_states, map_state};
use crate::wire::{
    CreateMachineRequest, Guest, InitConfig, Machine, MachineConfig, Mount, RestartPolicy, Service,
    ServicePort,
};
use async_trait::async_trait;
use futures::StreamExt;
use sandbox_sdk_core::idempotency::create_once;
use sandbox_sdk_core::{
    Capabilities, CreateSpec, Error, ErrorKind, ListFilter, Provider, Result, Sandbox, SandboxInfo,
    SandboxState, SandboxStream,
};
use std::collections::BTreeMap;

/// Metadata label every machine made by this adapter carries (value `1`); lists filter on it.
pub const SANDBOX_LABEL: &str = "sandbox_sdk";

/// Metadata label carrying the caller's idempotency key; a retried create lists by it first.
pub const IDEMPOTENCY_LABEL: &str = "sandbox_sdk_idempotency_key";

/// Creates, connects to and lists Fly Machines in one app. Build it with [`FlyBuilder`].
#[derive(Debug, Clone)]
pub struct FlyProvider {
    pub(crate) api: Api,
}

impl FlyProvider {
    /// Same as `FlyBuilder::from_env().build()`.
    pub fn from_env() -> Result<FlyProvider> {
        FlyBuilder::from_env().build()
    }

    pub(crate) fn from_builder(builder: FlyBuilder) -> Result<FlyProvider> {
        Ok(FlyProvider {
            api: Api::new(builder)?,
        })
    }

    /// The app the machines live in.
    pub fn app(&self) -> &str {
        &self.api.app
    }

    /// The create request this provider sends for `spec` (image, guest, env, metadata with our
    /// labels, region, `auto_destroy: false`, services and mounts from the builder).
    ///
    /// `spec.timeout` becomes the machine's main process (`sleep SECONDS` with restart policy
    /// `no`), so the machine stops by itself when the time is up and gets the same time again
    /// on every start; it needs [`FlyBuilder::keep_alive`]. GPUs are not offered.
    pub fn create_request(&self, spec: &CreateSpec) -> Result<CreateMachineRequest> {
        let s = &self.api.settings;
        let fail = |kind: ErrorKind, msg: &str| {
            Error::new(kind, msg.to_owned())
                .with_provider(PROVIDER)
                .with_operation("create")
        };
        if spec.resources.gpus.is_some_and(|g| g > 0) {
            return Err(fail(
                ErrorKind::NotSupported,
                "fly: GPU machines are not offered by this adapter",
            ));
        }
        let mut metadata = spec.metadata.clone();
        metadata.insert(SANDBOX_LABEL.to_owned(), "1".to_owned());
        if let Some(key) = &spec.idempotency_key {
            if key.is_empty() {
                return Err(fail(
                    ErrorKind::Validation,
                    "fly: the idempotency key is empty",
                ));
            }
            metadata.insert(IDEMPOTENCY_LABEL.to_owned(), key.clone());
        }
        let cpus = spec.resources.cpus.or(s.cpus);
        let memory_mb = spec.resources.memory_mb.or(s.memory_mb);
        let guest =
            (cpus.is_some() || memory_mb.is_some() || s.cpu_kind.is_some()).then(|| Guest {
                cpu_kind: s.cpu_kind.clone(),
                cpus,
                memory_mb,
                ..Guest::default()
            });
        let (init, restart) = match (s.keep_alive, spec.timeout) {
            (true, None) => (Some(vec!["sleep".to_owned(), "inf".to_owned()]), None),
            (true, Some(ttl)) => (
                Some(vec!["sleep".to_owned(), ttl.as_secs().max(1).to_string()]),
                Some(RestartPolicy {
                    policy: Some("no".to_owned()),
                    ..RestartPolicy::default()
                }),
            ),
            (false, None) => (None, None),
            (false, Some(_)) => {
                return Err(fail(
                    ErrorKind::NotSupported,
                    "fly: a time to live needs keep_alive (the machine's main process enforces it); \
                     Fly Machines have no TTL of their own",
                ));
            }
        };
        let services = s
            .service_ports
            .iter()
            .map(|port| Service {
                protocol: Some("tcp".to_owned()),
                internal_port: Some(*port),
                ports: vec![
                    ServicePort {
                        port: Some(443),
                        handlers: vec!["tls".to_owned(), "http".to_owned()],
                        ..ServicePort::default()
                    },
                    ServicePort {
                        port: Some(80),
                        handlers: vec!["http".to_owned()],
                        force_https: Some(true),
                        ..ServicePort::default()
                    },
                ],
                autostart: Some(true),
                autostop: Some(crate::wire::Autostop::Off),
                ..Service::default()
            })
            .collect();
        let mounts = s
            .mounts
            .iter()
            .map(|(volume, path)| Mount {
                volume: Some(volume.clone()),
                path: Some(path.clone()),
                ..Mount::default()
            })
            .collect();
        let mut extra = serde_json::Map::new();
        if let Some(gb) = spec.resources.disk_gb {
            extra.insert("rootfs".to_owned(), serde_json::json!({ "size_gb": gb }));
        }
        Ok(CreateMachineRequest {
            config: MachineConfig {
                image: Some(spec.template.clone().unwrap_or_else(|| s.image.clone())),
                env: spec.env.clone(),
                guest,
                auto_destroy: Some(false),
                restart,
                init: init.map(|exec| InitConfig {
                    exec: Some(exec),
                    ..InitConfig::default()
                }),
                services,
                mounts,
                metadata,
                stop_config: None,
                extra,
            },
            region: spec.region.clone().or_else(|| s.region.clone()),
            name: spec.name.clone(),
            skip_launch: None,
            lease_ttl: None,
        })
    }

    /// Finds a live machine made under `key`, if any.
    async fn find_by_key(&self, key: &str) -> Result<Option<Machine>> {
        let query = vec![(format!("metadata.{IDEMPOTENCY_LABEL}"), key.to_owned())];
        let machines = self.api.list(&query).await?;
        Ok(machines.into_iter().find(|m| {
            m.metadata().get(IDEMPOTENCY_LABEL).map(String::as_str) == Some(key)
                && !matches!(
                    m.state.as_deref().map(map_state),
                    Some(SandboxState::Destroyed | SandboxState::Failed)
                )
        }))
    }

    /// Creates a machine and waits until it is `started` (chaining `/wait` calls within
    /// [`FlyBuilder::start_timeout`]). With an idempotency key, a machine already made under that
    /// key is adopted instead (started first if it was stopped or suspended), and a create whose
    /// answer was lost is settled by listing the key for [`FlyBuilder::create_lookup`]'s window
    /// before the error goes back: Fly has no idempotency header (PROTOCOL.md §1), so the
    /// metadata label is the only dedupe.
    pub async fn create_machine(&self, spec: &CreateSpec) -> Result<FlySandbox> {
        let request = self.create_request(spec)?;
        let key = spec.idempotency_key.as_deref();
        let machine = create_once(
            key,
            &self.api.settings.create_lookup,
            || self.api.create(&request),
            || async move {
                match key {
                    Some(key) => self.find_by_key(key).await,
                    None => Ok(None),
                }
            },
        )
        .await?;
        if machine.id.is_empty() {
            return Err(
                Error::new(ErrorKind::Provider, "create answered without a machine id")
                    .with_provider(PROVIDER)
                    .with_operation("create"),
            );
        }
        let sandbox = FlySandbox::new(self.api.clone(), machine);
        sandbox.ensure_started().await?;
        Ok(sandbox)
    }

    /// Connects to machine `id` (one GET; a stopped machine is not started).
    pub async fn connect_machine(&self, id: &str) -> Result<FlySandbox> {
        let machine = self.api.get(id).await?;
        Ok(FlySandbox::new(self.api.clone(), machine))
    }

    fn list_query(filter: &ListFilter) -> Vec<(String, String)> {
        let mut query = vec![(format!("metadata.{SANDBOX_LABEL}"), "1".to_owned())];
        for (k, v) in &filter.metadata {
            query.push((format!("metadata.{k}"), v.clone()));
        }
        let states: Vec<&str> = filter
            .states
            .iter()
            .flat_map(|s| fly_states(*s).iter().copied())
            .collect();
        if !states.is_empty() {
            query.push(("state".to_owned(), states.join(",")));
        }
        if filter.states.contains(&SandboxState::Destroyed) {
            query.push(("include_deleted".to_owned(), "true".to_owned()));
        }
        query
    }
}

/// A machine as the core model sees it.
pub(crate) fn to_info(machine: &Machine) -> SandboxInfo {
    let raw = machine.state.clone();
    let mut info = SandboxInfo::new(
        machine.id.clone(),
        PROVIDER,
        raw.as_deref()
            .map(map_state)
            .unwrap_or(SandboxState::Unknown),
    );
    info.raw_state = raw;
    info.template = machine.config.as_ref().and_then(|c| c.image.clone());
    info.metadata = machine.metadata();
    info.created_at = machine
        .created_at
        .as_deref()
        .and_then(sandbox_sdk_core::time::parse_rfc3339);
    info.updated_at = machine
        .updated_at
        .as_deref()
        .and_then(sandbox_sdk_core::time::parse_rfc3339);
    info.region = machine.region.clone();
    if let Some(guest) = machine.config.as_ref().and_then(|c| c.guest.as_ref()) {
        info.resources.cpus = guest.cpus;
        info.resources.memory_mb = guest.memory_mb;
    }
    // The machine's recent events (PROTOCOL.md §4: `status` is the state after the event,
    // `timestamp` Unix milliseconds), oldest first: the state history usage estimates use.
    let mut history: Vec<sandbox_sdk_core::StateChange> = machine
        .events
        .iter()
        .filter_map(|e| {
            let at = std::time::UNIX_EPOCH.checked_add(std::time::Duration::from_millis(
                u64::try_from(e.timestamp?).ok()?,
            ))?;
            let state = map_state(e.status.as_deref()?);
            (state != SandboxState::Unknown).then_some(sandbox_sdk_core::StateChange { at, state })
        })
        .collect();
    history.sort_by_key(|c| c.at);
    info.history = history;
    info
}

#[async_trait]
impl Provider for FlyProvider {
    fn name(&self) -> &str {
        PROVIDER
    }

    fn capabilities(&self) -> Capabilities {
        CAPABILITIES
    }

    async fn create(&self, spec: &CreateSpec) -> Result<Box<dyn Sandbox>> {
        Ok(Box::new(self.create_machine(spec).await?))
    }

    async fn connect(&self, id: &str) -> Result<Box<dyn Sandbox>> {
        Ok(Box::new(self.connect_machine(id).await?))
    }

    /// One `GET …/machines` with our label, the filter's labels and states (the API returns every
    /// match at once); the filter is applied again here, so it holds whatever the server honours.
    fn list(&self, filter: &ListFilter) -> SandboxStream<'_> {
        let query = Self::list_query(filter);
        let filter = filter.clone();
        let api = self.api.clone();
        futures::stream::once(async move { api.list(&query).await })
            .flat_map(move |result| {
                let items: Vec<Result<SandboxInfo>> = match result {
                    Ok(machines) => machines
                        .iter()
                        .filter(|m| m.metadata().contains_key(SANDBOX_LABEL))
                        .map(to_info)
                        .filter(|info| filter.matches(info))
                        .map(Ok)
                        .collect(),
                    Err(e) => vec![Err(e)],
                };
                futures::stream::iter(items)
            })
            .boxed()
    }

    /// `DELETE …/machines/{id}?force=true`: a running or suspended machine is destroyed where
    /// it is, without being started or leased first. A machine already gone is `NotFound`.
    async fn destroy(&self, id: &str) -> Result<()> {
        self.api.destroy(id, true, None).await
    }

    async fn find_by_idempotency_key(&self, key: &str) -> Result<Option<SandboxInfo>> {
        Ok(self.find_by_key(key).await?.as_ref().map(to_info))
    }

    /// Unsupported: the Machines API has no usage meter. The client's emulation estimates
    /// usage from the listing and the price table.
    async fn usage(
        &self,
        sandbox: &SandboxInfo,
        _to: std::time::SystemTime,
    ) -> Result<sandbox_sdk_core::fleet::Usage> {
        Err(Error::not_supported(PROVIDER, "usage").with_sandbox_id(&sandbox.id))
    }

    /// Unsupported: on Fly the image reference is the prepared form. Build the image (image and
    /// steps) with your own tooling, push it to a registry Fly can pull from, and pass its
    /// reference as [`CreateSpec::template`]; the Machines API has no image builder.
    async fn prepare(
        &self,
        _spec: &sandbox_sdk_core::fleet::PrepareSpec,
    ) -> Result<sandbox_sdk_core::fleet::Prepared> {
        Err(Error::not_supported(PROVIDER, "prepare"))
    }
}

/// Metadata of a machine without the adapter's own labels.
pub fn user_metadata(metadata: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    metadata
        .iter()
        .filter(|(k, _)| k.as_str() != SANDBOX_LABEL && k.as_str() != IDEMPOTENCY_LABEL)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn provider(b: FlyBuilder) -> FlyProvider {
        b.token("t")
            .app("app")
            .base_url("http://127.0.0.1:1")
            .build()
            .unwrap()
    }

    #[test]
    fn create_request_carries_labels_resources_and_keep_alive() {
        let p = provider(FlyBuilder::new().region("ord").cpu_kind("shared"));
        let spec = CreateSpec::new()
            .env("A", "1")
            .metadata("team", "x")
            .idempotency_key("job-1")
            .resources(sandbox_sdk_core::Resources {
                cpus: Some(2),
                memory_mb: Some(512),
                ..Default::default()
            });
        let body = serde_json::to_value(p.create_request(&spec).unwrap()).unwrap();
        assert_eq!(
            body,
            serde_json::json!({
                "region": "ord",
                "config": {
                    "image": "ubuntu:24.04",
                    "env": {"A": "1"},
                    "guest": {"cpu_kind": "shared", "cpus": 2, "memory_mb": 512},
                    "auto_destroy": false,
                    "init": {"exec": ["sleep", "inf"]},
                    "metadata": {"sandbox_sdk": "1", "sandbox_sdk_idempotency_key": "job-1", "team": "x"}
                }
            })
        );
    }

    #[test]
    fn ttl_services_and_mounts_shape_the_config() {
        let p = provider(
            FlyBuilder::new()
                .expose_port(8080)
                .mount("vol_123", "/data"),
        );
        let spec = CreateSpec::new()
            .timeout(Duration::from_secs(600))
            .template("alpine:3");
        let body = serde_json::to_value(p.create_request(&spec).unwrap()).unwrap();
        let c = &body["config"];
        assert_eq!(c["init"]["exec"], serde_json::json!(["sleep", "600"]));
        assert_eq!(c["restart"]["policy"], "no");
        assert_eq!(c["services"][0]["internal_port"], 8080);
        assert_eq!(c["services"][0]["autostop"], "off");
        assert_eq!(
            c["services"][0]["ports"][0]["handlers"],
            serde_json::json!(["tls", "http"])
        );
        assert_eq!(
            c["mounts"][0],
            serde_json::json!({"volume": "vol_123", "path": "/data"})
        );
        assert_eq!(c["image"], "alpine:3");
    }

    #[test]
    fn ttl_without_keep_alive_and_gpus_are_refused() {
        let p = provider(FlyBuilder::new().keep_alive(false));
        let e = p
            .create_request(&CreateSpec::new().timeout(Duration::from_secs(5)))
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotSupported);
        let spec = CreateSpec::new().resources(sandbox_sdk_core::Resources {
            gpus: Some(1),
            ..Default::default()
        });
        assert_eq!(
            p.create_request(&spec).unwrap_err().kind(),
            ErrorKind::NotSupported
        );
    }

    #[test]
    fn list_query_has_our_label_labels_and_states() {
        let q = FlyProvider::list_query(
            &ListFilter::new()
                .metadata("team", "x")
                .state(SandboxState::Running)
                .state(SandboxState::Paused),
        );
        assert_eq!(
            q,
            vec![
                ("metadata.sandbox_sdk".to_owned(), "1".to_owned()),
                ("metadata.team".to_owned(), "x".to_owned()),
                (
                    "state".to_owned(),
                    "started,suspending,suspended".to_owned()
                ),
            ]
        );
    }

    #[test]
    fn info_maps_state_metadata_and_time() {
        let m: Machine = serde_json::from_str(
            r#"{"id":"m1","state":"suspended","region":"ord","created_at":"2023-11-08T01:52:30Z","config":{"image":"ubuntu:24.04","metadata":{"sandbox_sdk":"1","team":"x"}}}"#,
        )
        .unwrap();
        let info = to_info(&m);
        assert_eq!(info.state, SandboxState::Paused);
        assert_eq!(info.raw_state.as_deref(), Some("suspended"));
        assert_eq!(info.template.as_deref(), Some("ubuntu:24.04"));
        assert_eq!(info.metadata.get("team").map(String::as_str), Some("x"));
        assert_eq!(user_metadata(&info.metadata).len(), 1);
        assert!(info.created_at.is_some());
    }

    #[test]
    fn machine_events_become_the_state_history_oldest_first() {
        let m: Machine = serde_json::from_str(
            r#"{"id":"m1","state":"stopped","created_at":"2023-11-08T01:52:30Z","config":{"guest":{"cpus":2,"memory_mb":4096}},"events":[
                {"type":"stop","status":"stopped","source":"user","timestamp":1699410000000},
                {"type":"start","status":"started","source":"user","timestamp":1699408800000},
                {"type":"launch","status":"created","source":"user","timestamp":1699408750000},
                {"type":"odd","status":"who-knows","timestamp":1699408760000},
                {"type":"start","status":"started"}
            ]}"#,
        )
        .unwrap();
        let info = to_info(&m);
        let states: Vec<SandboxState> = info.history.iter().map(|c| c.state).collect();
        assert_eq!(
            states,
            [
                SandboxState::Creating,
                SandboxState::Running,
                SandboxState::Stopped
            ]
        );
        assert!(info.history.windows(2).all(|w| w[0].at <= w[1].at));
        assert_eq!(info.resources.cpus, Some(2));
        // 20 minutes running between the start and the stop.
        let usage = sandbox_sdk_core::fleet::estimate(
            &info,
            std::time::UNIX_EPOCH + Duration::from_millis(1_699_411_200_000),
            None,
        );
        assert_eq!(usage.running, Duration::from_secs(1200));
        assert_eq!(usage.held, Duration::from_secs(1200));
    }
}
