//! A canary secret passed through the builder, the provider, a sandbox handle, SSH access,
//! preview links and errors never shows in any `Debug` or `Display`.

mod common;

use sandbox_daytona::{DaytonaBuilder, DaytonaCreate, DaytonaProvider};
use sandbox_sdk_core::{ErrorKind, Sandbox};
use serde_json::json;
use std::time::Duration;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const CANARY: &str = "dtn_canary_5ecr3t_value_never_shown";

fn assert_hidden(what: &str, text: &str) {
    assert!(!text.contains(CANARY), "{what} leaked the canary: {text}");
    assert!(
        !text.contains("5ecr3t"),
        "{what} leaked part of the canary: {text}"
    );
}

#[test]
fn builder_and_provider_debug_hide_the_key_and_jwt() {
    let builder = DaytonaProvider::builder()
        .api_key(CANARY)
        .jwt_token(CANARY)
        .organization_id("org");
    assert_hidden("builder Debug", &format!("{builder:?}"));
    let provider = builder.build().unwrap();
    assert_hidden("provider Debug", &format!("{provider:?}"));
    let env_builder =
        DaytonaBuilder::from_lookup(|n| (n == "DAYTONA_API_KEY").then(|| CANARY.to_owned()));
    assert_hidden("from_env builder Debug", &format!("{env_builder:?}"));
    let mut create = DaytonaCreate::default();
    create.env.insert("TOKEN".into(), CANARY.into());
    assert_hidden("create options Debug", &format!("{create:?}"));
}

#[test]
fn build_errors_do_not_echo_credentials() {
    let err = DaytonaProvider::builder()
        .api_key(CANARY)
        .sdk_version("0.1.0")
        .build()
        .unwrap_err();
    assert_hidden("build error", &format!("{err} {err:?}"));
}

#[tokio::test]
async fn errors_tokens_and_links_hide_the_canary() {
    let server = MockServer::start().await;
    let base = common::builder(&server).api_key(CANARY);
    Mock::given(method("GET"))
        .and(path("/api/sandbox/sb1"))
        .respond_with(ResponseTemplate::new(200).set_body_json(common::sandbox("sb1", "started")))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/api/sandbox/missing"))
        .respond_with(ResponseTemplate::new(401).set_body_json(
            json!({"statusCode": 401, "message": "authentication failed: Bearer token is invalid"}),
        ))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/api/sandbox/sb1/ssh-access"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"id": "a", "sandboxId": "sb1", "token": CANARY, "expiresAt": "2099-01-01T00:00:00.000Z", "createdAt": "2026-01-01T00:00:00.000Z", "updatedAt": "2026-01-01T00:00:00.000Z", "sshCommand": format!("ssh {CANARY}@gw")})))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/api/sandbox/sb1/ports/80/preview-url"))
        .respond_with(ResponseTemplate::new(200).set_body_json(
            json!({"sandboxId": "sb1", "url": "https://80-sb1.proxy.example", "token": CANARY}),
        ))
        .mount(&server)
        .await;
    let provider = base.build().unwrap();
    let err = provider.get("missing").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unauthorized);
    assert_hidden("401 error", &format!("{err} {err:?}"));
    let sandbox = provider.get("sb1").await.unwrap();
    assert_hidden("sandbox Debug", &format!("{sandbox:?}"));
    let access = sandbox.ssh_access(Duration::from_secs(60)).await.unwrap();
    assert_hidden("ssh access Debug", &format!("{access:?}"));
    let link = sandbox.preview_link(80).await.unwrap();
    assert_hidden("preview link Debug", &format!("{link:?}"));
}

/// A `toolboxProxyUrl` in an API answer that carries URL syntax (user info, a query, a
/// fragment) is refused when the handle is made, so no toolbox request (with the API key) is
/// ever sent to it.
#[tokio::test]
async fn a_hostile_toolbox_proxy_url_gets_no_request() {
    use sandbox_sdk_core::SandboxExt;
    let server = MockServer::start().await;
    let elsewhere = MockServer::start().await;
    Mock::given(wiremock::matchers::any())
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"name": "x"})))
        .mount(&elsewhere)
        .await;
    let other = elsewhere.address();
    for hostile in [
        format!("http://user:pw@{other}/toolbox"),
        format!("http://{other}/toolbox?x="),
        format!("http://{other}/toolbox#"),
        format!("ftp://{other}/toolbox"),
    ] {
        let dto = common::with(
            common::sandbox("sb1", "started"),
            "toolboxProxyUrl",
            json!(hostile),
        );
        let _guard = Mock::given(method("GET"))
            .and(path("/api/sandbox/sb1"))
            .respond_with(ResponseTemplate::new(200).set_body_json(dto))
            .mount_as_scoped(&server)
            .await;
        let provider = DaytonaProvider::builder()
            .api_key(CANARY)
            .api_url(format!("{}/api", server.uri()))
            .build()
            .unwrap();
        let got = provider.get("sb1").await;
        if let Ok(sandbox) = &got {
            let _ = sandbox.read_file("/etc/hostname").await;
            let _ = sandbox.run(&sandbox_sdk_core::Command::new("true")).await;
        }
        assert!(
            elsewhere.received_requests().await.unwrap().is_empty(),
            "{hostile}: a toolbox request went to the answer's address"
        );
        let err = got.expect_err(&hostile);
        assert_eq!(err.kind(), ErrorKind::Provider, "{hostile}: {err}");
        assert_hidden("toolbox URL error", &format!("{err} {err:?}"));
    }
}

/// Expiring a signed preview link puts its token in the request path; a failure (here a 404
/// that echoes the token too) never shows it.
#[tokio::test]
async fn a_failed_signed_link_expiry_does_not_show_the_token() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/api/sandbox/sb1"))
        .respond_with(ResponseTemplate::new(200).set_body_json(common::sandbox("sb1", "started")))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(format!(
            "/api/sandbox/sb1/ports/3000/signed-preview-url/{CANARY}/expire"
        )))
        .respond_with(ResponseTemplate::new(404).set_body_json(json!({
            "statusCode": 404,
            "error": "Not Found",
            "message": format!("signed preview token {CANARY} not found"),
        })))
        .expect(1)
        .mount(&server)
        .await;
    let sandbox = common::provider(&server).get("sb1").await.unwrap();
    let err = sandbox
        .expire_signed_preview_link(3000, CANARY)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert_eq!(err.status(), Some(404));
    assert_hidden("expiry error", &format!("{err} {err:?}"));
    assert!(err.to_string().contains("<redacted>"), "{err}");
}
