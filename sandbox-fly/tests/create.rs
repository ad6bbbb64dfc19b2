//! Creates, replayed from the `spec` cassettes in `tests/cassettes/fly/`: a retried keyed
//! create adopts the machine made under its key, and the region and volume reach the body.

mod common;

use common::*;
use sandbox_sdk_core::CreateSpec;
use sandbox_sdk_core::prelude::*;
use std::time::Duration;

#[tokio::test]
async fn a_retried_create_adopts_the_machine_made_under_its_key() {
    let r = Replay::start("fly_idempotent_create").await;
    let fly = r.provider();
    let spec = CreateSpec::new()
        .metadata("suite", "conformance")
        .timeout(Duration::from_secs(300));
    let adopted = fly
        .create(&spec.clone().idempotency_key("job-42"))
        .await
        .unwrap();
    assert_eq!(adopted.id(), ID);
    let made = fly
        .create_machine(&spec.clone().idempotency_key("job-43"))
        .await
        .unwrap();
    assert_eq!(made.machine().state.as_deref(), Some("started"));
    // A machine found on its way down settles, then starts again.
    let restarted = fly
        .create_machine(&spec.idempotency_key("job-44"))
        .await
        .unwrap();
    assert_eq!(restarted.machine().state.as_deref(), Some("started"));
    r.verify().await;
}

#[tokio::test]
async fn create_sends_the_region() {
    let r = Replay::start("fly_region_create").await;
    let fly = r.builder().region("ord").build().unwrap();
    let spec = CreateSpec::new()
        .metadata("suite", "conformance")
        .timeout(Duration::from_secs(300));
    let sandbox = fly.create_machine(&spec).await.unwrap();
    assert_eq!(sandbox.machine().region.as_deref(), Some("ord"));
    r.verify().await;
}

#[tokio::test]
async fn create_mounts_the_volume() {
    let r = Replay::start("fly_volume_create").await;
    let fly = r
        .builder()
        .mount("vol_1234567890abcdef", "/data")
        .build()
        .unwrap();
    let spec = CreateSpec::new()
        .metadata("suite", "conformance")
        .timeout(Duration::from_secs(300));
    fly.create(&spec).await.unwrap();
    r.verify().await;
}
