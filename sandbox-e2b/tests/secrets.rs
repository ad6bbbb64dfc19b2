//! A canary secret passed through the builder, the provider, a sandbox, a preview link and
//! errors never shows up in any `Debug` or `Display`.

use sandbox_e2b::E2bBuilder;
use sandbox_sdk_core::prelude::*;
use sandbox_sdk_core::{Command, ErrorKind};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const CANARY_KEY: &str = "e2b_canary0secret0key0000000000000000000000";
const CANARY_TOKEN: &str = "canary-envd-token-7f3a";
const CANARY_TRAFFIC: &str = "canary-traffic-token-91c2";

fn assert_clean(text: &str) {
    for secret in [CANARY_KEY, CANARY_TOKEN, CANARY_TRAFFIC, "canary"] {
        assert!(!text.contains(secret), "secret leaked: {text}");
    }
}

#[tokio::test]
async fn canary_secrets_never_appear_in_debug_or_display() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v2/sandboxes/isb/connect"))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "sandboxID": "isb",
            "templateID": "t",
            "envdAccessToken": CANARY_TOKEN,
            "trafficAccessToken": CANARY_TRAFFIC,
            "envdVersion": "0.6.13"
        })))
        .mount(&server)
        .await;
    // envd answers with a 401 that echoes nothing secret; the error must not add any.
    Mock::given(method("POST"))
        .and(path("/process.Process/Start"))
        .respond_with(ResponseTemplate::new(401).set_body_string(
            "{\"code\":401,\"message\":\"unauthorized access, please provide a valid access token or method signing if supported\"}\n",
        ))
        .mount(&server)
        .await;

    let builder = E2bBuilder::new()
        .api_key(CANARY_KEY)
        .api_url(server.uri())
        .sandbox_url(server.uri());
    assert_clean(&format!("{builder:?}"));
    let provider = builder.build().unwrap();
    assert_clean(&format!("{provider:?}"));

    let sandbox = provider.connect("isb").await.unwrap();
    assert_clean(&format!("{sandbox:?}"));

    let link = sandbox.preview_link(8080).await.unwrap();
    assert_eq!(link.token.as_deref(), Some(CANARY_TRAFFIC));
    assert_clean(&format!("{link:?}"));

    let err = sandbox.exec(&Command::new("true")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unauthorized);
    assert_clean(&format!("{err:?}"));
    assert_clean(&err.to_string());

    // A missing key names the variable, not a value.
    let err = E2bBuilder::from_lookup(|_| None).build().unwrap_err();
    assert_clean(&format!("{err:?} {err}"));
}
