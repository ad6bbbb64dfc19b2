//! Preview links, replayed from the `spec` cassettes in `tests/cassettes/fly/`.

mod common;

use common::*;
use sandbox_sdk_core::ErrorKind;
use sandbox_sdk_core::prelude::*;

#[tokio::test]
async fn preview_without_a_service_says_what_is_missing() {
    let r = Replay::start("fly_preview_missing").await;
    let sandbox = r.provider().connect_machine(ID).await.unwrap();
    let err = sandbox.preview_link(3000).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Validation);
    assert!(err.message().contains("no services"), "{err}");
    assert!(err.message().contains("expose_port(3000)"), "{err}");
    r.verify().await;
}
