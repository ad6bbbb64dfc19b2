//! Access to a sandbox against wiremock on loopback: preview links (token header, signed URLs,
//! paths that cannot leave the host) and SSH access tokens.

mod common;

use common::*;
use sandbox_sdk_core::{ErrorKind, Sandbox};
use serde_json::json;
use std::time::Duration;
use wiremock::matchers::{header, method, path, query_param};
use wiremock::{Mock, MockServer, ResponseTemplate};

#[tokio::test]
async fn ssh_tokens_are_shared_and_renewed_before_expiry() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/api/sandbox/sb-ssh"))
        .respond_with(ok(sandbox("sb-ssh", "started")))
        .mount(&server)
        .await;
    // The first token expires in 30 minutes, the second in years.
    let soon = std::time::SystemTime::now() + Duration::from_secs(30 * 60);
    let soon = format_rfc3339(soon);
    Mock::given(method("POST"))
        .and(path("/api/sandbox/sb-ssh/ssh-access"))
        .respond_with(ok(json!({"id": "a1", "sandboxId": "sb-ssh", "token": "tokenAAAA", "expiresAt": soon, "createdAt": soon, "updatedAt": soon, "sshCommand": "ssh -p 2222 tokenAAAA@gw.example"})))
        .up_to_n_times(1)
        .with_priority(1)
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/api/sandbox/sb-ssh/ssh-access"))
        .respond_with(ok(json!({"id": "a2", "sandboxId": "sb-ssh", "token": "tokenBBBB", "expiresAt": "2099-01-01T00:00:00.000Z", "createdAt": soon, "updatedAt": soon, "sshCommand": "ssh tokenBBBB@gw.example"})))
        .expect(1)
        .mount(&server)
        .await;
    use sandbox_sdk_core::Sandbox;
    let provider = provider(&server);
    let a = provider.get("sb-ssh").await.unwrap();
    let b = provider.get("sb-ssh").await.unwrap();
    let first = a.ssh_access(Duration::from_secs(600)).await.unwrap();
    assert_eq!(
        (first.host.as_str(), first.port, first.user.as_str()),
        ("gw.example", 2222, "tokenAAAA")
    );
    assert!(!format!("{first:?}").contains("tokenAAAA"));
    // Another handle asking for 10 minutes reuses the token (no second POST yet).
    let shared = b.ssh_access(Duration::from_secs(600)).await.unwrap();
    assert_eq!(shared.token.as_deref(), Some("tokenAAAA"));
    // Asking for an hour renews it: the kept one would expire first.
    let renewed = b.ssh_access(Duration::from_secs(3600)).await.unwrap();
    assert_eq!(renewed.token.as_deref(), Some("tokenBBBB"));
    assert_eq!(renewed.port, 22);
    let kept = a.ssh_access(Duration::from_secs(600)).await.unwrap();
    assert_eq!(kept.token.as_deref(), Some("tokenBBBB"));
}

fn format_rfc3339(t: std::time::SystemTime) -> String {
    sandbox_sdk_core::time::format_rfc3339_millis(t)
}

#[tokio::test]
async fn previews_carry_the_token_header_and_signed_urls_expire() {
    let server = MockServer::start().await;
    mount_sandbox(&server, "started").await;
    Mock::given(method("GET")).and(path("/api/sandbox/sb1/ports/3000/preview-url"))
        .respond_with(ok(json!({"sandboxId": "sb1", "url": format!("{}/preview", server.uri()), "token": "ptok-123"})))
        .mount(&server).await;
    Mock::given(method("GET")).and(path("/api/sandbox/sb1/ports/3000/signed-preview-url")).and(query_param("expiresInSeconds", "120"))
        .respond_with(ok(json!({"sandboxId": "sb1", "port": 3000, "token": "stok", "url": "https://3000-stok.proxy.daytona.works"})))
        .mount(&server).await;
    Mock::given(method("POST"))
        .and(path(
            "/api/sandbox/sb1/ports/3000/signed-preview-url/stok/expire",
        ))
        .respond_with(ResponseTemplate::new(200))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/preview/health"))
        .and(header("x-daytona-preview-token", "ptok-123"))
        .and(header("x-daytona-skip-preview-warning", "true"))
        .respond_with(ResponseTemplate::new(200).set_body_string("ok"))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/preview/health"))
        .respond_with(ResponseTemplate::new(307).insert_header(
            "location",
            "https://login.daytona.example/authorize?state=x",
        ))
        .mount(&server)
        .await;
    let sandbox = provider(&server).get("sb1").await.unwrap();
    let link = sandbox.preview_link(3000).await.unwrap();
    assert_eq!(link.port, 3000);
    assert_eq!(link.token.as_deref(), Some("ptok-123"));
    assert_eq!(link.headers["x-daytona-preview-token"], "ptok-123");
    assert!(!format!("{link:?}").contains("ptok-123"));
    let response = sandbox.fetch_preview(&link, "/health").await.unwrap();
    assert_eq!(response.status(), 200);
    let mut bad = link.clone();
    bad.headers.remove("x-daytona-preview-token");
    let err = sandbox.fetch_preview(&bad, "/health").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unauthorized);
    assert_eq!(err.status(), Some(307));
    let signed = sandbox
        .signed_preview_link(3000, Duration::from_secs(120))
        .await
        .unwrap();
    assert_eq!(signed.url, "https://3000-stok.proxy.daytona.works");
    assert!(signed.expires_at.is_some());
    assert!(!signed.headers.contains_key("x-daytona-preview-token"));
    sandbox
        .expire_signed_preview_link(3000, "stok")
        .await
        .unwrap();
}

#[tokio::test]
async fn a_preview_path_cannot_send_the_token_to_another_host() {
    let server = MockServer::start().await;
    let elsewhere = MockServer::start().await;
    mount_sandbox(&server, "started").await;
    Mock::given(method("GET"))
        .and(path("/api/sandbox/sb1/ports/3000/preview-url"))
        .respond_with(ok(
            json!({"sandboxId": "sb1", "url": server.uri(), "token": "ptok-123"}),
        ))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(200).set_body_string("stolen"))
        .mount(&elsewhere)
        .await;
    let sandbox = provider(&server).get("sb1").await.unwrap();
    let link = sandbox.preview_link(3000).await.unwrap();
    let port = elsewhere.address().port();
    for hostile in [
        format!("@127.0.0.1:{port}/steal"),
        format!("//127.0.0.1:{port}/steal"),
        format!(":{port}/steal"),
        format!("x@127.0.0.1:{port}/steal"),
    ] {
        let err = sandbox.fetch_preview(&link, &hostile).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Validation, "{hostile}: {err}");
    }
    assert!(
        elsewhere.received_requests().await.unwrap().is_empty(),
        "a request (and the preview token) reached another host"
    );
    let preview_requests = server
        .received_requests()
        .await
        .unwrap()
        .into_iter()
        .filter(|r| !r.url.path().starts_with("/api/"))
        .count();
    assert_eq!(preview_requests, 0);
}
