//! Preview links (PROTOCOL.md §5.4, §8): the public route of a port declared at create, no
//! token; an undeclared port is refused after one fresh read.

mod common;

use common::*;
use sandbox_sdk_core::prelude::*;
use sandbox_sdk_core::{CreateSpec, ErrorKind};
use serde_json::json;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

#[tokio::test]
async fn a_declared_port_has_a_public_link_and_another_is_refused() {
    let server = MockServer::start().await;
    let sb = connected(&server).await;
    let link = sb.preview_link(3000).await.unwrap();
    assert_eq!(link.url, "https://sb-1-3000.vercel.run");
    assert_eq!(link.port, 3000);
    assert!(link.token.is_none() && link.headers.is_empty());
    let before = server.received_requests().await.unwrap().len();
    let err = sb.preview_link(8080).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Validation);
    assert!(err.message().contains("expose_port"), "{err}");
    // One fresh read, in case the routes changed (a resumed session has new ones).
    assert_eq!(server.received_requests().await.unwrap().len(), before + 1);
}

/// A route given only by its subdomain is `https://<subdomain>.vercel.run`; system routes are
/// not the caller's.
#[tokio::test]
async fn a_route_without_a_url_is_built_from_its_subdomain() {
    let server = MockServer::start().await;
    let mut answer = envelope(NAME, "running", json!({}));
    answer["routes"] = json!([
        {"port": 5000, "subdomain": "abc-5000"},
        {"port": 6000, "subdomain": "sys", "system": true}
    ]);
    mount_get(&server, answer).await;
    let sb = provider(&server).connect_sandbox(NAME).await.unwrap();
    assert_eq!(
        sb.preview_link(5000).await.unwrap().url,
        "https://abc-5000.vercel.run"
    );
    assert!(sb.preview_link(6000).await.is_err());
}

/// Issue 33 item 7: a route's URL was handed out as the answer gave it: plain http, user info,
/// a query, or a host that only starts like a Vercel one.
#[tokio::test]
async fn a_route_off_the_documented_domain_is_refused() {
    let urls = [
        json!({"port": 5000, "url": "http://abc-5000.vercel.run"}),
        json!({"port": 5000, "url": "https://user:pw@abc-5000.vercel.run"}),
        json!({"port": 5000, "url": "https://abc-5000.vercel.run/?to=https://evil.example"}),
        json!({"port": 5000, "url": "https://abc-5000.vercel.run.evil.example"}),
        json!({"port": 5000, "url": "https://abc-5000.vercel.run@evil.example"}),
        json!({"port": 5000, "url": "https://evil.example/abc-5000.vercel.run"}),
        json!({"port": 5000, "url": "https://a.b.vercel.run"}),
        json!({"port": 5000, "url": "https://abc-5000.vercel.run:8443"}),
        json!({"port": 5000, "subdomain": "evil.example/x"}),
        json!({"port": 5000, "subdomain": "a.b"}),
    ];
    for route in urls {
        let server = MockServer::start().await;
        let mut answer = envelope(NAME, "running", json!({}));
        answer["routes"] = json!([route]);
        mount_get(&server, answer).await;
        let sb = provider(&server).connect_sandbox(NAME).await.unwrap();
        let err = sb.preview_link(5000).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Provider, "{route}: {err}");
        assert!(!err.to_string().contains("evil"), "{err}");
    }
    // The documented form, with the default port written out, is fine.
    let server = MockServer::start().await;
    let mut answer = envelope(NAME, "running", json!({}));
    answer["routes"] = json!([{"port": 5000, "url": "https://abc-5000.vercel.run:443/"}]);
    mount_get(&server, answer).await;
    let sb = provider(&server).connect_sandbox(NAME).await.unwrap();
    assert_eq!(
        sb.preview_link(5000).await.unwrap().url,
        "https://abc-5000.vercel.run/"
    );
}

#[tokio::test]
async fn the_builders_ports_are_declared_at_create() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v3/sandboxes"))
        .respond_with(ResponseTemplate::new(200).set_body_json(envelope(
            NAME,
            "running",
            json!({}),
        )))
        .mount(&server)
        .await;
    let vercel = builder(&server.uri())
        .expose_port(3000)
        .expose_port(5173)
        .build()
        .unwrap();
    vercel.create(&CreateSpec::new()).await.unwrap();
    assert_eq!(
        bodies(&server, "POST", "/v3/sandboxes").await[0]["ports"],
        json!([3000, 5173])
    );
}
