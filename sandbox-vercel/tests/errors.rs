//! Errors through the adapter (PROTOCOL.md §13): kinds from statuses and bodies, request ids,
//! `Retry-After`, and no token in any message even when the server echoes it.

mod common;

use common::*;
use sandbox_sdk_core::ErrorKind;
use sandbox_sdk_core::prelude::*;
use std::time::Duration;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

async fn answered(template: ResponseTemplate) -> sandbox_sdk_core::Error {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(template)
        .mount(&server)
        .await;
    provider(&server).connect(NAME).await.unwrap_err()
}

#[tokio::test]
async fn an_echoed_token_never_reaches_the_error() {
    let body = format!(
        r#"{{"error":{{"code":"forbidden","message":"token {TOKEN} (Bearer {TOKEN}) has no access"}}}}"#
    );
    let err = answered(
        ResponseTemplate::new(403)
            .insert_header("x-vercel-id", "iad1::abc-1")
            .set_body_string(body),
    )
    .await;
    assert_eq!(err.kind(), ErrorKind::Unauthorized);
    assert_eq!(err.request_id(), Some("iad1::abc-1"));
    for text in [err.to_string(), format!("{err:?}")] {
        assert!(!text.contains(TOKEN), "{text}");
        assert!(text.contains("has no access"), "{text}");
    }
}

/// Issue 33 item 6: a token echoed with JSON escapes (`\/`, `\u…`) passed the byte-level
/// scrub and came back whole once the body was decoded into the message.
#[tokio::test]
async fn an_echoed_token_in_json_escapes_never_reaches_the_error() {
    let escaped: String = TOKEN
        .chars()
        .map(|c| format!("\\u{:04x}", c as u32))
        .collect();
    let half = format!(
        "{}\\u{:04X}{}",
        &TOKEN[..6],
        TOKEN.as_bytes()[6],
        &TOKEN[7..]
    );
    let body = format!(
        r#"{{"error":{{"code":"forbidden","message":"token {escaped} or Bearer {half} has no access"}}}}"#
    );
    let err = answered(ResponseTemplate::new(403).set_body_string(body)).await;
    assert_eq!(err.kind(), ErrorKind::Unauthorized);
    for text in [err.to_string(), format!("{err:?}")] {
        assert!(!text.contains(TOKEN), "{text}");
        assert!(text.contains("has no access"), "{text}");
    }
}

#[tokio::test]
async fn rate_limits_and_server_errors_keep_their_kinds() {
    let err = answered(
        ResponseTemplate::new(429)
            .insert_header("retry-after", "7")
            .set_body_json(error_json("rate_limited", "slow down")),
    )
    .await;
    assert_eq!(err.kind(), ErrorKind::QuotaExceeded);
    assert_eq!(err.retry_after(), Some(Duration::from_secs(7)));
    let err =
        answered(ResponseTemplate::new(502).set_body_string("<html>bad gateway</html>")).await;
    assert_eq!(err.kind(), ErrorKind::Provider);
    assert!(err.is_retryable());
    let err = answered(
        ResponseTemplate::new(410)
            .set_body_json(error_json("sandbox_stopped", "The sandbox is stopped")),
    )
    .await;
    assert_eq!(err.kind(), ErrorKind::NotRunning);
}
