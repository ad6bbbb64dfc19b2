//! The lifecycle of machines: the create request and the idempotent create, the list query,
//! Fly's states (PROTOCOL.md §5) mapped onto the core model, and a machine as
//! [`SandboxInfo`].

use crate::api::Api;
use crate::config::{IDEMPOTENCY_LABEL, PROVIDER, SANDBOX_LABEL, Settings};
use crate::wire::{
    CreateMachineRequest, Guest, InitConfig, Machine, MachineConfig, Mount, RestartPolicy, Service,
    ServicePort,
};
use sandbox_sdk_core::idempotency::{
    FINGERPRINT_LABEL, check_adoption, create_fingerprint, create_once, made_by,
};
use sandbox_sdk_core::{
    CreateSpec, Error, ErrorKind, ListFilter, Result, SandboxInfo, SandboxState,
};

/// Maps a raw Fly machine state onto the core model.
///
/// | Fly | core |
/// | --- | --- |
/// | `started` | `Running` |
/// | `created`, `creating`, `starting`, `restarting`, `updating`, `replacing` | `Creating` |
/// | `stopping`, `stopped` | `Stopped` |
/// | `suspending`, `suspended` | `Paused` |
/// | `failed`, `launch_failed` | `Failed` |
/// | `destroying`, `destroyed`, `replaced`, `migrated` | `Destroyed` |
/// | anything else | `Unknown` (the raw name stays in `SandboxInfo::raw_state`) |
///
/// `replaced` and `migrated` only describe an old version of a machine; that version is gone.
pub(crate) fn map_state(raw: &str) -> SandboxState {
    match raw {
        "started" => SandboxState::Running,
        "created" | "creating" | "starting" | "restarting" | "updating" | "replacing" => {
            SandboxState::Creating
        }
        "stopping" | "stopped" => SandboxState::Stopped,
        "suspending" | "suspended" => SandboxState::Paused,
        "failed" | "launch_failed" => SandboxState::Failed,
        "destroying" | "destroyed" | "replaced" | "migrated" => SandboxState::Destroyed,
        _ => SandboxState::Unknown,
    }
}

/// The raw Fly states that make up one core state, for the list endpoint's `state` filter.
pub(crate) fn fly_states(state: SandboxState) -> &'static [&'static str] {
    match state {
        SandboxState::Running => &["started"],
        SandboxState::Creating => &[
            "created",
            "creating",
            "starting",
            "restarting",
            "updating",
            "replacing",
        ],
        SandboxState::Stopped => &["stopping", "stopped"],
        SandboxState::Paused => &["suspending", "suspended"],
        SandboxState::Failed => &["failed", "launch_failed"],
        SandboxState::Destroyed => &["destroying", "destroyed"],
        _ => &[],
    }
}

/// The create request sent for `spec` (image, guest, env, metadata with our
/// labels, region, `auto_destroy: false`, services and mounts from the builder).
///
/// `spec.timeout` becomes the machine's main process (`sleep SECONDS` with restart policy
/// `no`), so the machine stops by itself when the time is up and gets the same time again
/// on every start; it needs [`crate::FlyBuilder::keep_alive`]. GPUs are not offered.
pub(crate) fn create_request(s: &Settings, spec: &CreateSpec) -> Result<CreateMachineRequest> {
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
    if let Some(fingerprint) = create_fingerprint(spec) {
        metadata.insert(FINGERPRINT_LABEL.to_owned(), fingerprint);
    }
    let cpus = spec.resources.cpus.or(s.cpus);
    let memory_mb = spec.resources.memory_mb.or(s.memory_mb);
    let guest = (cpus.is_some() || memory_mb.is_some() || s.cpu_kind.is_some()).then(|| Guest {
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

/// The live machines labelled with `key`, in a list sent after this call began (shared with
/// concurrent keyed creates: [`Api::list_for_key`]).
async fn keyed_machines(api: &Api, key: &str) -> Result<Vec<Machine>> {
    api.list_for_key(key, |machines| {
        machines
            .iter()
            .filter(|m| {
                m.metadata().get(IDEMPOTENCY_LABEL).map(String::as_str) == Some(key)
                    && !matches!(
                        m.state.as_deref().map(map_state),
                        Some(SandboxState::Destroyed | SandboxState::Failed)
                    )
            })
            .cloned()
            .collect()
    })
    .await
}

/// Finds a live machine made under `key`, if any (the first of [`keyed_machines`]).
pub(crate) async fn find_by_key(api: &Api, key: &str) -> Result<Option<Machine>> {
    Ok(keyed_machines(api, key).await?.into_iter().next())
}

/// The live machine a create of `spec` made under its key, if any: one of the key's machines
/// this create made ([`made_by`]). When the key's machines are all someone else's, the first is
/// a `Conflict` ([`check_adoption`]): none is adopted nor touched, and nothing is created.
async fn find_created(api: &Api, spec: &CreateSpec, key: &str) -> Result<Option<Machine>> {
    let machines = keyed_machines(api, key).await?;
    let found = machines
        .iter()
        .find(|m| made_by(spec, &m.metadata()))
        .or(machines.first());
    match found {
        Some(machine) => {
            check_adoption(spec, &machine.id, &machine.metadata())
                .map_err(|e| e.with_provider(PROVIDER))?;
            Ok(Some(machine.clone()))
        }
        None => Ok(None),
    }
}

/// Sends the create for `spec` once, or adopts the machine already made under its idempotency
/// key by this create ([`find_created`]); a create whose answer was lost is settled by listing the key for
/// [`crate::FlyBuilder::create_lookup`]'s window before the error goes back: Fly has no
/// idempotency header (PROTOCOL.md §1), so the metadata label is the only dedupe.
pub(crate) async fn create(api: &Api, spec: &CreateSpec) -> Result<Machine> {
    let request = create_request(&api.settings, spec)?;
    let key = spec.idempotency_key.as_deref();
    let machine = create_once(
        key,
        &api.settings.create_lookup,
        || api.create(&request),
        || async move {
            match key {
                Some(key) => find_created(api, spec, key).await,
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
    Ok(machine)
}

/// The list query for `filter`: our label, the filter's labels and states.
pub(crate) fn list_query(filter: &ListFilter) -> Vec<(String, String)> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FlyBuilder, FlyProvider};
    use std::time::Duration;

    const ALL: &[&str] = &[
        "created",
        "started",
        "stopped",
        "suspended",
        "failed",
        "creating",
        "starting",
        "stopping",
        "restarting",
        "suspending",
        "destroying",
        "updating",
        "replacing",
        "launch_failed",
        "destroyed",
        "replaced",
        "migrated",
    ];

    #[test]
    fn every_documented_state_has_a_known_mapping() {
        for raw in ALL {
            assert_ne!(map_state(raw), SandboxState::Unknown, "{raw}");
        }
        assert_eq!(map_state("started"), SandboxState::Running);
        assert_eq!(map_state("suspended"), SandboxState::Paused);
        assert_eq!(map_state("stopped"), SandboxState::Stopped);
        assert_eq!(map_state("launch_failed"), SandboxState::Failed);
        assert_eq!(map_state("destroyed"), SandboxState::Destroyed);
        assert_eq!(map_state("hibernating"), SandboxState::Unknown);
    }

    #[test]
    fn filter_states_map_back_to_the_same_core_state() {
        for state in [
            SandboxState::Running,
            SandboxState::Creating,
            SandboxState::Stopped,
            SandboxState::Paused,
            SandboxState::Failed,
            SandboxState::Destroyed,
        ] {
            for raw in fly_states(state) {
                assert_eq!(map_state(raw), state, "{raw}");
            }
        }
        assert!(fly_states(SandboxState::Archived).is_empty());
    }

    fn provider(b: FlyBuilder) -> FlyProvider {
        b.token("t")
            .app("app")
            .api_url("http://127.0.0.1:1")
            .build()
            .unwrap()
    }

    #[test]
    fn create_request_carries_labels_resources_and_keep_alive() {
        let p = provider(FlyProvider::builder().region("ord").cpu_kind("shared"));
        let spec = CreateSpec::new()
            .env("A", "1")
            .metadata("team", "x")
            .idempotency_key("job-1")
            .resources(sandbox_sdk_core::Resources {
                cpus: Some(2),
                memory_mb: Some(512),
                ..Default::default()
            });
        let body = serde_json::to_value(create_request(p.settings(), &spec).unwrap()).unwrap();
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
                    "metadata": {
                        "sandbox_sdk": "1",
                        "sandbox_sdk_idempotency_key": "job-1",
                        FINGERPRINT_LABEL: create_fingerprint(&spec),
                        "team": "x"
                    }
                }
            })
        );
    }

    #[test]
    fn ttl_services_and_mounts_shape_the_config() {
        let p = provider(
            FlyProvider::builder()
                .expose_port(8080)
                .mount("vol_123", "/data"),
        );
        let spec = CreateSpec::new()
            .timeout(Duration::from_secs(600))
            .template("alpine:3");
        let body = serde_json::to_value(create_request(p.settings(), &spec).unwrap()).unwrap();
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
        let p = provider(FlyProvider::builder().keep_alive(false));
        let e = create_request(
            p.settings(),
            &CreateSpec::new().timeout(Duration::from_secs(5)),
        )
        .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotSupported);
        let spec = CreateSpec::new().resources(sandbox_sdk_core::Resources {
            gpus: Some(1),
            ..Default::default()
        });
        assert_eq!(
            create_request(p.settings(), &spec).unwrap_err().kind(),
            ErrorKind::NotSupported
        );
    }

    #[test]
    fn list_query_has_our_label_labels_and_states() {
        let q = list_query(
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
