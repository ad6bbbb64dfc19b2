//! URLs made without a request: signed `/files` URLs (host, signature, user, expiry) and preview
//! links (host, traffic token).

use sandbox_sdk_core::ErrorKind;
use sandbox_sdk_core::prelude::*;
use std::time::Duration;
use wiremock::{MockServer, ResponseTemplate};

mod support;
use support::*;

#[tokio::test]
async fn signed_urls_and_preview_links_use_the_port_host() {
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    let url = sandbox.download_url("/home/user/a.txt", None).unwrap();
    assert_eq!(
        url,
        format!(
            "https://49983-{SB}.e2b.app/files?path=%2Fhome%2Fuser%2Fa.txt&signature=v1_zpcfuBvTQ7Iw5iRRDlW6Y7v3hP25%2FWWkbW2cRaNfI4I"
        )
    );
    let link = sandbox.preview_link(8080).await.unwrap();
    assert_eq!(link.url, format!("https://8080-{SB}.e2b.app"));
    assert!(link.headers.is_empty());
}

#[tokio::test]
async fn absurd_durations_saturate_instead_of_panicking() {
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    let url = sandbox.download_url("/a.txt", Some(Duration::MAX)).unwrap();
    assert!(
        url.contains(&format!("signature_expiration={}", u64::MAX)),
        "{url}"
    );
    set_ttl_call(u64::MAX)
        .respond_with(
            ResponseTemplate::new(400)
                .set_body_string(r#"{"code":400,"message":"timeout out of range"}"#),
        )
        .expect(1)
        .mount(&server)
        .await;
    let e = sandbox.set_timeout(Duration::MAX).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Validation);
}

#[tokio::test]
async fn upload_urls_carry_user_and_expiration() {
    let server = MockServer::start().await;
    connect_call()
        .respond_with(ResponseTemplate::new(200).set_body_json(created_body(SB)))
        .mount(&server)
        .await;
    let sandbox = builder(&server)
        .user("root")
        .build()
        .unwrap()
        .connect_sandbox(SB, None)
        .await
        .unwrap();
    let url = url::Url::parse(
        &sandbox
            .upload_url("/tmp/x", Some(Duration::from_secs(60)))
            .unwrap(),
    )
    .unwrap();
    assert_eq!(url.host_str(), Some(format!("49983-{SB}.e2b.app").as_str()));
    let q: std::collections::HashMap<String, String> = url.query_pairs().into_owned().collect();
    assert_eq!(q["path"], "/tmp/x");
    assert_eq!(q["username"], "root");
    let exp: u64 = q["signature_expiration"].parse().unwrap();
    assert_eq!(
        q["signature"],
        sandbox_e2b::testing::file_signature("/tmp/x", "write", "root", TOKEN, Some(exp))
    );
}

#[tokio::test]
async fn private_preview_carries_the_traffic_token() {
    let server = MockServer::start().await;
    let mut body = created_body(SB);
    body["trafficAccessToken"] = "traffic-secret".into();
    body["domain"] = "example.test".into();
    connect_call()
        .respond_with(ResponseTemplate::new(200).set_body_json(body))
        .mount(&server)
        .await;
    let sandbox = provider(&server).connect(SB).await.unwrap();
    let link = sandbox.preview_link(3000).await.unwrap();
    assert_eq!(link.url, format!("https://3000-{SB}.example.test"));
    assert_eq!(link.headers["e2b-traffic-access-token"], "traffic-secret");
    assert!(!format!("{link:?}{sandbox:?}").contains("traffic-secret"));
}
