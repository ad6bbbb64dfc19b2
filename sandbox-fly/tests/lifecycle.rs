//! Lifecycle, replayed from the `spec` cassettes in `tests/cassettes/fly/`: chained and timed-out
//! waits, and leases.

mod common;

use common::*;
use sandbox_fly::MachineConfig;
use sandbox_sdk_core::ErrorKind;
use sandbox_sdk_core::prelude::*;
use std::time::Duration;

#[tokio::test]
async fn a_wait_past_the_deadline_chains_calls_then_names_the_state_reached() {
    let r = Replay::start("fly_wait_timeout").await;
    let fly = r
        .builder()
        .start_timeout(Duration::from_secs(90))
        .build()
        .unwrap();
    let sandbox = fly.connect_machine(ID).await.unwrap();
    let err = sandbox.stop().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout);
    assert!(err.message().contains("stopping"), "{err}");
    assert!(err.message().contains("stopped"), "{err}");
    assert_eq!(err.status(), Some(408));
    assert_eq!(err.request_id(), Some(REQUEST_ID));
    assert_eq!(err.sandbox_id(), Some(ID));
    r.verify().await;
}

#[tokio::test]
async fn a_lease_nonce_is_sent_on_mutations_refresh_and_release() {
    let r = Replay::start("fly_lease").await;
    let sandbox = r.provider().connect_machine(ID).await.unwrap();
    let lease = sandbox
        .acquire_lease(Duration::from_secs(30), Some("sandbox-fly"))
        .await
        .unwrap();
    assert_eq!(lease.owner.as_deref(), Some("hello@fly.io"));
    assert_eq!(lease.expires_at, Some(1_764_562_200));
    assert_eq!(sandbox.lease_nonce().as_deref(), Some("5c35f65c9f95"));
    assert!(!format!("{sandbox:?}{lease:?}").contains("5c35f65c9f95"));
    sandbox
        .stop_with(Some("SIGKILL"), Some(Duration::from_secs(5)))
        .await
        .unwrap();
    assert_eq!(sandbox.machine().state.as_deref(), Some("stopped"));
    sandbox
        .refresh_lease(Duration::from_secs(60))
        .await
        .unwrap();
    sandbox.release_lease().await.unwrap();
    assert!(sandbox.lease_nonce().is_none());
    let err = sandbox.release_lease().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Validation);
    r.verify().await;
}

#[tokio::test]
async fn a_lease_held_by_someone_else_is_a_conflict_naming_the_holder() {
    let r = Replay::start("fly_lease_conflict").await;
    let sandbox = r.provider().connect_machine(ID).await.unwrap();
    let mut config: MachineConfig = sandbox.machine().config.unwrap();
    config.env.insert("MODE".into(), "2".into());
    let err = sandbox.update(config).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert!(
        err.message()
            .starts_with("machine is leased by hello@fly.io"),
        "{err}"
    );
    assert_eq!(err.request_id(), Some(REQUEST_ID));
    assert_eq!(err.operation(), Some("update"));
    let err = sandbox
        .acquire_lease(Duration::from_secs(30), None)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert!(err.message().contains("hello@fly.io"));
    let lease = sandbox.lease().await.unwrap();
    assert_eq!(lease.owner.as_deref(), Some("hello@fly.io"));
    assert!(lease.nonce.is_none());
    r.verify().await;
}
