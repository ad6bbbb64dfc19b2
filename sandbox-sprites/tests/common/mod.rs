//! The one fixture style of the Sprites wiremock tests: a provider built against a wiremock
//! server, and the JSON of a sprite and an error as PROTOCOL.md §4 and §10 give them.

#![allow(dead_code)]

use sandbox_sprites::{SpritesBuilder, SpritesProvider};
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

pub const TOKEN: &str = "sprites-test-token-0123456789";
pub const NAME: &str = "box-1";

pub fn builder(base_url: &str) -> SpritesBuilder {
    SpritesProvider::builder().token(TOKEN).api_url(base_url)
}

pub fn provider(server: &MockServer) -> SpritesProvider {
    builder(&server.uri()).build().unwrap()
}

pub fn sprite_json(name: &str, status: &str, labels: &[&str]) -> Value {
    json!({
        "id": "0b6a0c1e-0000-4000-8000-000000000001", "name": name, "organization": "acme",
        "url": format!("https://{name}-abcd.sprites.app"), "url_settings": {"auth": "sprite"},
        "status": status, "labels": labels, "created_at": "2026-12-01T04:00:00Z",
        "updated_at": "2026-12-01T04:00:05Z"
    })
}

pub async fn mount_get(server: &MockServer, name: &str, answer: ResponseTemplate) {
    Mock::given(method("GET"))
        .and(path(format!("/v1/sprites/{name}")))
        .respond_with(answer)
        .mount(server)
        .await;
}

pub fn not_found() -> ResponseTemplate {
    ResponseTemplate::new(404).set_body_json(json!({"error": "sprite not found"}))
}
