//! Reading, listing and deleting sprites, and preview links (PROTOCOL.md §4.2–§4.5, §9, §18.14).

mod common;

use common::*;
use futures::TryStreamExt;
use sandbox_sdk_core::prelude::*;
use sandbox_sdk_core::{ErrorKind, ListFilter, SandboxState};
use serde_json::json;
use wiremock::matchers::{method, path, query_param, query_param_is_missing};
use wiremock::{Mock, MockServer, ResponseTemplate};

#[tokio::test]
async fn listing_pages_on_and_completes_partial_entries_by_reading_them() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/v1/sprites"))
        .and(query_param("max_results", "50"))
        .and(query_param_is_missing("continuation_token"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "sprites": [
                {"name": "a", "org_slug": "acme", "updated_at": "2026-12-01T04:00:00Z"},
                {"name": "gone", "org_slug": "acme", "updated_at": "2026-12-01T04:00:00Z"}
            ],
            "has_more": true, "next_continuation_token": "c2"
        })))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/v1/sprites"))
        .and(query_param("continuation_token", "c2"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "sprites": [sprite_json("b", "running", &["owner=me"])],
            "has_more": false, "next_continuation_token": null
        })))
        .expect(1)
        .mount(&server)
        .await;
    mount_get(
        &server,
        "a",
        ResponseTemplate::new(200).set_body_json(sprite_json("a", "cold", &["owner=me"])),
    )
    .await;
    // Deleted between the page and the read: skipped, not an error.
    mount_get(&server, "gone", not_found()).await;
    let provider = provider(&server);
    let filter = ListFilter::default().metadata("owner", "me");
    let found: Vec<_> = provider.list(&filter).try_collect().await.unwrap();
    let names: Vec<_> = found.iter().map(|i| i.id.as_str()).collect();
    assert_eq!(names, ["a", "b"]);
    assert!(found.iter().all(|i| i.state == SandboxState::Running));
    assert_eq!(found[0].raw_state.as_deref(), Some("cold"));
}

#[tokio::test]
async fn connect_reads_and_destroy_deletes_by_name() {
    let server = MockServer::start().await;
    mount_get(
        &server,
        NAME,
        ResponseTemplate::new(200).set_body_json(sprite_json(NAME, "warm", &[])),
    )
    .await;
    Mock::given(method("DELETE"))
        .and(path(format!("/v1/sprites/{NAME}")))
        .respond_with(ResponseTemplate::new(204))
        .expect(1)
        .mount(&server)
        .await;
    let provider = provider(&server);
    let sb = provider.connect(NAME).await.unwrap();
    assert_eq!(sb.info().await.unwrap().raw_state.as_deref(), Some("warm"));
    sb.destroy().await.unwrap();
    // A name Sprites could never have is not found without a request.
    let err = provider.connect("../admin").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
}

#[tokio::test]
async fn a_preview_link_is_handed_out_only_for_a_public_url_and_its_port() {
    let server = MockServer::start().await;
    let mut public = sprite_json(NAME, "warm", &[]);
    public["url_settings"] = json!({"auth": "public"});
    mount_get(
        &server,
        NAME,
        ResponseTemplate::new(200).set_body_json(public),
    )
    .await;
    mount_get(
        &server,
        "guarded",
        ResponseTemplate::new(200).set_body_json(sprite_json("guarded", "warm", &[])),
    )
    .await;
    let provider = provider(&server);
    let link = provider
        .connect(NAME)
        .await
        .unwrap()
        .preview_link(8080)
        .await
        .unwrap();
    assert_eq!(link.url, format!("https://{NAME}-abcd.sprites.app"));
    assert!(link.headers.is_empty() && link.token.is_none());
    let sb = provider.connect(NAME).await.unwrap();
    assert_eq!(
        sb.preview_link(3000).await.unwrap_err().kind(),
        ErrorKind::Validation
    );
    let guarded = provider.connect("guarded").await.unwrap();
    let err = guarded.preview_link(8080).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotSupported);
    assert!(!err.to_string().contains(TOKEN));
}

/// Issue 33 item 7: the sprite's `url` was checked by its host's characters only, so plain
/// http, a port, a query or a host outside `sprites.app` was handed out.
#[tokio::test]
async fn a_preview_url_off_the_documented_domain_is_refused() {
    for url in [
        "http://box-1-abcd.sprites.app",
        "https://box-1-abcd.sprites.app:8443",
        "https://box-1-abcd.sprites.app/?next=https://evil.example",
        "https://box-1-abcd.sprites.app#x",
        "https://evil.example",
        "https://sprites.app",
        "https://a.b.sprites.app",
        "https://box-1-abcd.sprites.app.evil.example",
        "https://box-1-abcd.sprites.dev",
        "https://127.0.0.1:8080/",
    ] {
        let server = MockServer::start().await;
        let mut public = sprite_json(NAME, "warm", &[]);
        public["url_settings"] = json!({"auth": "public"});
        public["url"] = json!(url);
        mount_get(
            &server,
            NAME,
            ResponseTemplate::new(200).set_body_json(public),
        )
        .await;
        let sb = provider(&server).connect(NAME).await.unwrap();
        let err = sb.preview_link(8080).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Provider, "{url}: {err}");
        assert!(!err.to_string().contains("evil"), "{err}");
    }
}

#[tokio::test]
async fn a_snapshot_is_a_checkpoint_whose_id_is_the_newest_listed() {
    let server = MockServer::start().await;
    mount_get(
        &server,
        NAME,
        ResponseTemplate::new(200).set_body_json(sprite_json(NAME, "warm", &[])),
    )
    .await;
    Mock::given(method("POST"))
        .and(path(format!("/v1/sprites/{NAME}/checkpoint")))
        .respond_with(ResponseTemplate::new(200).set_body_string(
            "{\"type\":\"info\",\"data\":\"Creating checkpoint\",\"time\":\"2026-12-01T04:00:00Z\"}\n\
             {\"type\":\"complete\",\"data\":\"Checkpoint v2 created\",\"time\":\"2026-12-01T04:00:01Z\"}\n",
        ))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(format!("/v1/sprites/{NAME}/checkpoints")))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!([
            {"id": "v1", "create_time": "2026-12-01T03:00:00Z"},
            {"id": "v2", "create_time": "2026-12-01T04:00:01Z", "comment": "before"}
        ])))
        .mount(&server)
        .await;
    let sb = provider(&server).connect(NAME).await.unwrap();
    let snap = sb.snapshot(Some("before")).await.unwrap();
    assert_eq!(
        (snap.id.as_str(), snap.name.as_deref()),
        ("v2", Some("before"))
    );
}

#[tokio::test]
async fn a_progress_stream_that_reports_an_error_fails_although_it_answered_200() {
    let server = MockServer::start().await;
    mount_get(
        &server,
        NAME,
        ResponseTemplate::new(200).set_body_json(sprite_json(NAME, "warm", &[])),
    )
    .await;
    Mock::given(method("POST"))
        .and(path(format!("/v1/sprites/{NAME}/checkpoint")))
        .respond_with(ResponseTemplate::new(200).set_body_string(
            "{\"type\":\"error\",\"error\":\"disk busy\",\"time\":\"2026-12-01T04:00:00Z\"}\n",
        ))
        .mount(&server)
        .await;
    let err = provider(&server)
        .connect(NAME)
        .await
        .unwrap()
        .snapshot(None)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Provider);
    assert!(err.message().contains("disk busy"), "{err}");
}

/// Issue 33 item 6: a progress `error` line comes on a 200, which the transport does not
/// scrub; a token it echoes (plain or JSON-escaped) must not reach the error.
#[tokio::test]
async fn a_progress_error_line_echoing_the_token_never_shows_it() {
    let server = MockServer::start().await;
    mount_get(
        &server,
        NAME,
        ResponseTemplate::new(200).set_body_json(sprite_json(NAME, "warm", &[])),
    )
    .await;
    let escaped = TOKEN.replace('-', "\\u002D");
    Mock::given(method("POST"))
        .and(path(format!("/v1/sprites/{NAME}/checkpoint")))
        .respond_with(ResponseTemplate::new(200).set_body_string(format!(
            "{{\"type\":\"error\",\"error\":\"token {TOKEN} or {escaped} is busy\"}}\n"
        )))
        .mount(&server)
        .await;
    let err = provider(&server)
        .connect(NAME)
        .await
        .unwrap()
        .snapshot(None)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Provider);
    let text = format!("{err} {err:?}");
    assert!(!text.contains(TOKEN), "{text}");
    assert!(text.contains("is busy"), "{text}");
}
