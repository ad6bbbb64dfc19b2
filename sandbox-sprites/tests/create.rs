//! Creates (PROTOCOL.md §4.1, §18.1–§18.4): the body, and keyed creates that adopt only a
//! sprite this create made.

mod common;

use common::*;
use sandbox_sdk_core::idempotency::{FINGERPRINT_LABEL, create_fingerprint};
use sandbox_sdk_core::prelude::*;
use sandbox_sdk_core::{CreateSpec, ErrorKind, Resources};
use sandbox_sprites::{SpritesSandbox, idempotency_name};
use serde_json::json;
use wiremock::matchers::{body_json, header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn keyed() -> CreateSpec {
    CreateSpec::new()
        .metadata("sandbox_sdk_owner", "ci")
        .idempotency_key("sandbox_sdk:ci/job-7")
}

fn labels_of(spec: &CreateSpec) -> Vec<String> {
    vec![
        format!("sandbox_sdk_owner=ci"),
        format!("{FINGERPRINT_LABEL}={}", create_fingerprint(spec).unwrap()),
    ]
}

fn duplicate() -> ResponseTemplate {
    ResponseTemplate::new(400).set_body_json(
        json!({"error": "invalid_request", "message": "sprite \"x\" already exists"}),
    )
}

#[tokio::test]
async fn a_create_sends_the_body_the_official_sdks_send() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/sprites"))
        .and(header("authorization", format!("Bearer {TOKEN}").as_str()))
        .and(body_json(json!({
            "name": "web-1",
            "config": {"cpus": 2, "ram_mb": 4096, "region": "ord"},
            "url_settings": {"auth": "public"},
            "labels": ["team=x"],
            "environment": {"A": "1"},
            "wait_for_capacity": true
        })))
        .respond_with(ResponseTemplate::new(201).set_body_json(sprite_json(
            "web-1",
            "cold",
            &["team=x"],
        )))
        .expect(1)
        .mount(&server)
        .await;
    let sb = builder(&server.uri())
        .public_url(true)
        .wait_for_capacity(true)
        .build()
        .unwrap()
        .create(
            &CreateSpec::new()
                .name("web-1")
                .metadata("team", "x")
                .env("A", "1")
                .region("ord")
                .resources(Resources {
                    cpus: Some(2),
                    memory_mb: Some(4096),
                    ..Resources::default()
                }),
        )
        .await
        .unwrap();
    assert_eq!(sb.id(), "web-1");
    let sprite = sb.downcast_ref::<SpritesSandbox>().unwrap().sprite();
    assert_eq!(sprite.status.as_deref(), Some("cold"));
    assert_eq!(sprite.labels, Some(vec!["team=x".to_owned()]));
}

#[tokio::test]
async fn a_keyed_create_is_named_after_the_key_and_adopts_what_it_made() {
    let server = MockServer::start().await;
    let spec = keyed();
    let name = idempotency_name("sandbox_sdk:ci/job-7");
    let labels = labels_of(&spec);
    let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
    // The look-up before sending finds nothing, the create answers "already exists" (an
    // earlier attempt made it), the second look-up finds it with this create's labels.
    Mock::given(method("GET"))
        .and(path(format!("/v1/sprites/{name}")))
        .respond_with(not_found())
        .up_to_n_times(1)
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/sprites"))
        .respond_with(duplicate())
        .expect(1)
        .mount(&server)
        .await;
    mount_get(
        &server,
        &name,
        ResponseTemplate::new(200).set_body_json(sprite_json(&name, "warm", &labels)),
    )
    .await;
    let provider = provider(&server);
    let sb = provider.create(&spec).await.unwrap();
    assert_eq!(sb.id(), name);
}

#[tokio::test]
async fn a_sprite_under_the_key_without_this_creates_fingerprint_is_a_conflict_and_untouched() {
    let server = MockServer::start().await;
    let name = idempotency_name("sandbox_sdk:ci/job-7");
    mount_get(
        &server,
        &name,
        ResponseTemplate::new(200).set_body_json(sprite_json(
            &name,
            "warm",
            &["sandbox_sdk_owner=ci"],
        )),
    )
    .await;
    // Neither a create nor a delete may be sent.
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(500))
        .expect(0)
        .mount(&server)
        .await;
    Mock::given(method("DELETE"))
        .respond_with(ResponseTemplate::new(500))
        .expect(0)
        .mount(&server)
        .await;
    let err = provider(&server).create(&keyed()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert!(err.message().contains(FINGERPRINT_LABEL), "{err}");
}

#[tokio::test]
async fn an_unkeyed_duplicate_is_a_conflict_and_bad_input_is_refused_before_sending() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(409).set_body_json(json!({"error": "already exists"})))
        .expect(1)
        .mount(&server)
        .await;
    let provider = provider(&server);
    let err = provider
        .create(&CreateSpec::new().name("taken"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
    for spec in [
        CreateSpec::new().name("Not A DNS Label"),
        CreateSpec::new().env("BAD NAME", "1"),
    ] {
        let err = provider.create(&spec).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Validation, "{err}");
    }
    let err = provider
        .create(&CreateSpec::new().template("ubuntu:24.04"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotSupported);
}

#[tokio::test]
async fn an_ambiguous_create_without_a_key_reads_the_name_it_made_up_instead_of_leaving_an_orphan()
{
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/sprites"))
        .respond_with(ResponseTemplate::new(502))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(wiremock::matchers::path_regex(
            "^/v1/sprites/sdk-[0-9a-f]{32}$",
        ))
        .respond_with(ResponseTemplate::new(200).set_body_json(sprite_json("made", "cold", &[])))
        .expect(1)
        .mount(&server)
        .await;
    let sb = provider(&server).create(&CreateSpec::new()).await.unwrap();
    assert_eq!(sb.id(), "made");
    // A name the caller chose may be someone else's: it is not read after an ambiguous failure.
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(502))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(200).set_body_json(sprite_json("theirs", "cold", &[])))
        .expect(0)
        .mount(&server)
        .await;
    let err = provider(&server)
        .create(&CreateSpec::new().name("theirs"))
        .await
        .unwrap_err();
    assert!(err.is_ambiguous(), "{err}");
}
