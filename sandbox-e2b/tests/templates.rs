//! Templates against a loopback control plane: built once and reused by content hash, a failed
//! build built again, a build in progress waited for, the failure reason raised, and status checks
//! with backoff.

use sandbox_e2b::{E2bBuilder, TemplateSpec};
use sandbox_sdk_core::ErrorKind;
use std::time::Duration;
use wiremock::matchers::{body_json, method, path};
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
    Mock::given(method("GET"))
        .and(path(format!("/templates/aliases/{name}")))
        .respond_with(
            ResponseTemplate::new(404)
                .set_body_string(r#"{"code":404,"message":"template not found"}"#),
        )
        .up_to_n_times(1)
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v3/templates"))
        .and(body_json(
            serde_json::json!({"name": name, "cpuCount": 2, "memoryMB": 2048}),
        ))
        .respond_with(ResponseTemplate::new(202).set_body_json(serde_json::json!({
            "templateID": "tpl1", "buildID": "b1", "public": false, "names": [name], "tags": [], "aliases": [name]
        })))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v2/templates/tpl1/builds/b1"))
        .and(body_json(serde_json::json!({
            "fromImage": "ubuntu:24.04",
            "steps": [{"type": "RUN", "args": ["apt-get install -y curl"]}]
        })))
        .respond_with(ResponseTemplate::new(202))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/templates/tpl1/builds/b1/status"))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "templateID": "tpl1", "buildID": "b1", "status": "building", "logs": [], "logEntries": []
        })))
        .up_to_n_times(2)
        .expect(2)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/templates/tpl1/builds/b1/status"))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "templateID": "tpl1", "buildID": "b1", "status": "ready", "logs": [], "logEntries": []
        })))
        .expect(1)
        .mount(&server)
        .await;
    let p = fast_polling(&server);
    assert_eq!(p.prepare_template(&spec).await.unwrap(), "tpl1");
    Mock::given(method("GET"))
        .and(path(format!("/templates/aliases/{name}")))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(serde_json::json!({"templateID": "tpl1", "public": false})),
        )
        .expect(1)
        .mount(&server)
        .await;
    // The reused template's latest build is checked: ready, so nothing is built.
    Mock::given(method("GET"))
        .and(path("/templates/tpl1"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(template_with_builds(
                "tpl1",
                &[("b1", "ready", "2026-12-01T00:00:00Z")],
            )),
        )
        .expect(1)
        .mount(&server)
        .await;
    assert_eq!(p.prepare_template(&spec).await.unwrap(), "tpl1");
}

/// A `TemplateWithBuilds` answer with `(buildID, status, createdAt)` builds.
fn template_with_builds(id: &str, builds: &[(&str, &str, &str)]) -> serde_json::Value {
    serde_json::json!({
        "templateID": id, "public": false, "aliases": [], "names": [],
        "createdAt": "2026-12-01T00:00:00Z", "updatedAt": "2026-12-01T00:00:00Z",
        "lastSpawnedAt": null, "spawnCount": 0,
        "builds": builds.iter().map(|(b, status, at)| serde_json::json!({
            "buildID": b, "status": status, "createdAt": at, "updatedAt": at,
            "cpuCount": 2, "memoryMB": 2048
        })).collect::<Vec<_>>()
    })
}

#[tokio::test]
async fn a_template_whose_latest_build_failed_is_built_again_not_reused() {
    let server = MockServer::start().await;
    let spec = TemplateSpec::from_image("ubuntu:24.04").run("echo again");
    let name = spec.template_name();
    Mock::given(method("GET"))
        .and(path(format!("/templates/aliases/{name}")))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(serde_json::json!({"templateID": "tpl4", "public": false})),
        )
        .expect(1)
        .mount(&server)
        .await;
    // An older ready build does not make the template usable: the latest one failed.
    Mock::given(method("GET"))
        .and(path("/templates/tpl4"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(template_with_builds(
                "tpl4",
                &[
                    ("old", "ready", "2026-11-01T00:00:00Z"),
                    ("bad", "error", "2026-11-30T00:00:00Z"),
                ],
            )),
        )
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v3/templates"))
        .and(body_json(serde_json::json!({"name": name})))
        .respond_with(ResponseTemplate::new(202).set_body_json(serde_json::json!({
            "templateID": "tpl4", "buildID": "new", "public": false, "names": [name], "tags": [], "aliases": [name]
        })))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v2/templates/tpl4/builds/new"))
        .respond_with(ResponseTemplate::new(202))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/templates/tpl4/builds/new/status"))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "templateID": "tpl4", "buildID": "new", "status": "ready", "logs": [], "logEntries": []
        })))
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
    let name = spec.template_name();
    Mock::given(method("GET"))
        .and(path(format!("/templates/aliases/{name}")))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(serde_json::json!({"templateID": "tpl5", "public": false})),
        )
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/templates/tpl5"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(template_with_builds(
                "tpl5",
                &[("b5", "building", "2026-12-01T00:00:00Z")],
            )),
        )
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/templates/tpl5/builds/b5/status"))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "templateID": "tpl5", "buildID": "b5", "status": "building", "logs": [], "logEntries": []
        })))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/templates/tpl5/builds/b5/status"))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "templateID": "tpl5", "buildID": "b5", "status": "ready", "logs": [], "logEntries": []
        })))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
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
    Mock::given(method("GET"))
        .and(path(format!("/templates/aliases/{}", spec.template_name())))
        .respond_with(
            ResponseTemplate::new(404).set_body_string(r#"{"code":404,"message":"nope"}"#),
        )
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v3/templates"))
        .respond_with(ResponseTemplate::new(202).set_body_json(serde_json::json!({
            "templateID": "tpl2", "buildID": "b2", "public": false, "names": [], "tags": [], "aliases": []
        })))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v2/templates/tpl2/builds/b2"))
        .respond_with(ResponseTemplate::new(202))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/templates/tpl2/builds/b2/status"))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "templateID": "tpl2", "buildID": "b2", "status": "error",
            "reason": {"message": "step 1 failed: exit code 1"}, "logs": [], "logEntries": []
        })))
        .mount(&server)
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
    Mock::given(method("GET"))
        .and(path(format!("/templates/aliases/{}", spec.template_name())))
        .respond_with(
            ResponseTemplate::new(404).set_body_string(r#"{"code":404,"message":"nope"}"#),
        )
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v3/templates"))
        .respond_with(ResponseTemplate::new(202).set_body_json(serde_json::json!({
            "templateID": "tpl3", "buildID": "b3", "public": false, "names": [], "tags": [], "aliases": []
        })))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v2/templates/tpl3/builds/b3"))
        .respond_with(ResponseTemplate::new(202))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/templates/tpl3/builds/b3/status"))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "templateID": "tpl3", "buildID": "b3", "status": "building", "logs": [], "logEntries": []
        })))
        .mount(&server)
        .await;
    // A long poll interval and a short build timeout: a fixed sleep would check twice (at once
    // and after 30 s); the backoff checks at 0, 25, 75, 175 ms and at the 300 ms deadline.
    let provider = E2bBuilder::new()
        .api_key(KEY)
        .api_url(server.uri())
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
