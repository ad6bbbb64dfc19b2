//! A canary token never appears in the Debug or Display of the builder, the provider or an
//! error, and a macaroon goes out with Fly's `FlyV1` scheme.

use sandbox_conformance::cassette::{Cassette, Placeholders};
use sandbox_conformance::replay::ReplayServer;
use sandbox_fly::FlyProvider;

const CANARY: &str = "fm2_canary-secret-0123456789";

#[tokio::test]
async fn the_token_never_shows() {
    let builder = FlyProvider::builder().token(CANARY).app("conformance-app");
    assert!(!format!("{builder:?}").contains("canary"));
    let err = FlyProvider::builder().app("x").build().unwrap_err();
    assert!(!format!("{err} {err:?}").contains("canary"));

    // A real request answered 401: neither the provider nor the error shows the token.
    let server = ReplayServer::start().await.unwrap();
    let cassette = Cassette::from_json(
        r#"{"provider":"fly","scenario":"secrets","provenance":{"kind":"spec","date":"2026-12-01","source":"specs/fly/PROTOCOL.md §2"},
           "interactions":[{"request":{"method":"GET","path":"/v1/apps/conformance-app/machines/m1","auth":"none"},
                            "response":{"status":401,"body":{"json":{"error":"bad token"}}}}]}"#,
    )
    .unwrap()
    .substituted(&Placeholders::standard(server.url()))
    .unwrap();
    server.mount(&cassette, false).await.unwrap();
    let fly = builder.api_url(server.url()).build().unwrap();
    assert!(!format!("{fly:?}").contains("canary"));
    let err = fly.connect_machine("m1").await.unwrap_err();
    assert_eq!(err.kind(), sandbox_sdk_core::ErrorKind::Unauthorized);
    assert!(!format!("{err} {err:?}").contains("canary"));
    // The macaroon went out with the FlyV1 scheme.
    let sent = server.requests();
    let auth = sent[0]
        .headers
        .iter()
        .find(|(k, _)| k == "authorization")
        .map(|(_, v)| v.clone())
        .unwrap();
    assert_eq!(auth, format!("FlyV1 {CANARY}"));
    server.verify().await.unwrap();
}
