//! Templates against a loopback control plane: built once and reused by content hash, a failed
//! build built again, a build in progress waited for, the failure reason raised, and status checks
//! with backoff.

use sandbox_e2b::TemplateSpec;
use sandbox_sdk_core::ErrorKind;
use std::time::Duration;
use wiremock::matchers::body_json;
use wiremock::{Mock, MockServer, ResponseTemplate};

mod support;
use support::*;

#[tokio::test]
async fn prepare_builds_once_then_reuses_by_content_hash() {
    let server = MockServer::start().await;
    let spec = TemplateSpec::from_image("ubuntu:24.04")
        .run("apt-get install -y curl")
        .cpu_count(2)
        .memory_mb(2048);
    let name = spec.template_name();
    template_alias(&name, None)
        .up_to_n_times(1)
        .expect(1)
        .mount(&server)
        .await;
    create_template_call()
        .and(body_json(
            serde_json::json!({"name": name, "cpuCount": 2, "memoryMB": 2048}),
        ))
        .respond_with(template_created("tpl1", "b1", &[&name]))
        .expect(1)
        .mount(&server)
        .await;
    start_build_call("tpl1", "b1")
        .and(body_json(serde_json::json!({
            "fromImage": "ubuntu:24.04",
            "steps": [{"type": "RUN", "args": ["apt-get install -y curl"]}]
        })))
        .respond_with(ResponseTemplate::new(202))
        .expect(1)
        .mount(&server)
        .await;
    build_status("tpl1", "b1", "building", None)
        .up_to_n_times(2)
        .expect(2)
        .mount(&server)
        .await;
    build_status("tpl1", "b1", "ready", None)
        .expect(1)
        .mount(&server)
        .await;
    let p = fast_polling(&server);
    assert_eq!(p.prepare_template(&spec).await.unwrap(), "tpl1");
    template_alias(&name, Some("tpl1"))
        .expect(1)
        .mount(&server)
        .await;
    // The reused template's latest build is checked: ready, so nothing is built.
    template_builds("tpl1", &[("b1", "ready", "2026-12-01T00:00:00Z")])
        .expect(1)
        .mount(&server)
        .await;
    assert_eq!(p.prepare_template(&spec).await.unwrap(), "tpl1");
}

#[tokio::test]
async fn a_template_whose_latest_build_failed_is_built_again_not_reused() {
    let server = MockServer::start().await;
    let spec = TemplateSpec::from_image("ubuntu:24.04").run("echo again");
    let name = spec.template_name();
    template_alias(&name, Some("tpl4"))
        .expect(1)
        .mount(&server)
        .await;
    // An older ready build does not make the template usable: the latest one failed.
    template_builds(
        "tpl4",
        &[
            ("old", "ready", "2026-11-01T00:00:00Z"),
            ("bad", "error", "2026-11-30T00:00:00Z"),
        ],
    )
    .expect(1)
    .mount(&server)
    .await;
    create_template_call()
        .and(body_json(serde_json::json!({"name": name})))
        .respond_with(template_created("tpl4", "new", &[&name]))
        .expect(1)
        .mount(&server)
        .await;
    start_build_call("tpl4", "new")
        .respond_with(ResponseTemplate::new(202))
        .expect(1)
        .mount(&server)
        .await;
    build_status("tpl4", "new", "ready", None)
        .expect(1)
        .mount(&server)
        .await;
    assert_eq!(
        fast_polling(&server).prepare_template(&spec).await.unwrap(),
        "tpl4"
    );
}

#[tokio::test]
async fn a_build_in_progress_is_waited_for_not_started_again() {
    let server = MockServer::start().await;
    let spec = TemplateSpec::from_image("ubuntu:24.04").run("echo wait");
    template_alias(&spec.template_name(), Some("tpl5"))
        .mount(&server)
        .await;
    template_builds("tpl5", &[("b5", "building", "2026-12-01T00:00:00Z")])
        .mount(&server)
        .await;
    build_status("tpl5", "b5", "building", None)
        .up_to_n_times(1)
        .mount(&server)
        .await;
    build_status("tpl5", "b5", "ready", None)
        .mount(&server)
        .await;
    Mock::given(wiremock::matchers::method("POST"))
        .respond_with(ResponseTemplate::new(500))
        .expect(0)
        .mount(&server)
        .await;
    assert_eq!(
        fast_polling(&server).prepare_template(&spec).await.unwrap(),
        "tpl5"
    );
}

#[tokio::test]
async fn prepare_raises_the_build_failure_reason() {
    let server = MockServer::start().await;
    let spec = TemplateSpec::from_image("ubuntu:24.04").run("false");
    let reason = Some("step 1 failed: exit code 1");
    mount_new_build(
        &server,
        &spec.template_name(),
        ("tpl2", "b2"),
        "error",
        reason,
    )
    .await;
    let e = fast_polling(&server)
        .prepare_template(&spec)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Provider);
    assert!(e.message().contains("step 1 failed"), "{e}");
}

#[tokio::test]
async fn a_build_is_checked_with_backoff_not_once_per_poll_interval() {
    let server = MockServer::start().await;
    let spec = TemplateSpec::from_image("ubuntu:24.04").run("sleep 999");
    mount_new_build(
        &server,
        &spec.template_name(),
        ("tpl3", "b3"),
        "building",
        None,
    )
    .await;
    // A long poll interval and a short build timeout: a fixed sleep would check twice (at once
    // and after 30 s); the backoff checks at 0, 25, 75, 175 ms and at the 300 ms deadline.
    let provider = builder(&server)
        .template_poll_interval(Duration::from_secs(30))
        .template_build_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let e = tokio::time::timeout(Duration::from_secs(20), provider.prepare_template(&spec))
        .await
        .expect("the build wait slept a whole poll interval")
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
    let checks = server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .filter(|r| r.url.path().ends_with("/status"))
        .count();
    assert!(checks >= 4, "{checks} checks");
}
