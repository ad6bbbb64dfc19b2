//! Error mapping, replayed from the `spec` cassettes in `tests/cassettes/fly/`: every error body
//! shape, request ids kept from exec answers, and unsupported operations refused locally.

mod common;

use common::*;
use sandbox_sdk_core::prelude::*;
use sandbox_sdk_core::{Command, ErrorKind};
use std::time::Duration;

#[tokio::test]
async fn every_error_shape_maps_through_one_function() {
    let r = Replay::start("fly_error_shapes").await;
    let fly = r.provider();
    let err = fly.connect_machine(ID).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Validation);
    assert_eq!(err.message(), "empty response body");
    assert_eq!(err.request_id(), Some(REQUEST_ID));
    let err = fly.connect_machine(ID).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Provider);
    assert!(err.is_retryable());
    assert!(err.message().contains("502 Bad Gateway"));
    assert_eq!(err.request_id(), Some(REQUEST_ID));
    let err = fly.connect_machine(ID).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::QuotaExceeded);
    assert_eq!(
        err.retry_after(),
        Some(Duration::from_millis(200)),
        "Get Machine: 5 req/s"
    );
    let sandbox = fly.connect_machine(ID).await.unwrap();
    let err = sandbox.resume().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert_eq!(err.status(), Some(412));
    assert!(err.message().contains("unable to start machine"));
    let err = sandbox.destroy().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    r.verify().await;
}

#[tokio::test]
async fn errors_raised_from_an_exec_answer_keep_its_request_id() {
    let r = Replay::start("fly_missing_file").await;
    let sandbox = r.provider().connect_machine(ID).await.unwrap();
    let err = sandbox.stat("/etc/nope").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert_eq!(err.request_id(), Some(REQUEST_ID));
    assert_eq!(err.operation(), Some("stat"));
    assert!(err.message().contains("no such file"), "{err}");
    r.verify().await;
}

#[tokio::test]
async fn unsupported_operations_fail_fast_without_a_request() {
    let r = Replay::start("fly_preview_missing").await;
    let sandbox = r.provider().connect_machine(ID).await.unwrap();
    assert_eq!(
        sandbox
            .set_timeout(Duration::from_secs(5))
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::NotSupported
    );
    assert_eq!(
        sandbox
            .exec(&Command::new("id").user("root"))
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::NotSupported
    );
    assert_eq!(
        sandbox.kill_process("../etc").await.unwrap_err().kind(),
        ErrorKind::Validation
    );
    assert_eq!(
        r.server.request_count(),
        1,
        "only the connect reached the server"
    );
    r.verify().await;
}
