//! The canary test (issue 2, item 4): a secret passed through every config, builder and error
//! type of the core must appear in none of their `Debug` (plain and `{:#?}`) or `Display` output.
//!
//! To cover a new type, build it with [`CANARY`] in every field that may hold a secret and call
//! [`assert_no_canary`] (and [`assert_display_no_canary`] when it implements `Display`). Types
//! behind a feature go in a `#[cfg(feature = "...")]` test, like the `http` ones below.
//! Adapter crates copy these two helpers into their own `tests/secrets.rs`.

use sandbox_sdk_core::{Attempt, Command, CreateSpec, Error, ErrorKind, PreviewLink, SshAccess};
use std::collections::BTreeMap;
use std::fmt::{Debug, Display};
use std::time::{Duration, SystemTime};

/// The secret every test threads through; it must never be printed.
const CANARY: &str = "canary-5ecret-XYZ";

/// Fails when `value`'s `Debug` or pretty `Debug` output contains [`CANARY`].
fn assert_no_canary(label: &str, value: &dyn Debug) {
    for text in [format!("{value:?}"), format!("{value:#?}")] {
        assert!(
            !text.contains(CANARY),
            "{label}: the canary leaked into Debug output: {text}"
        );
    }
}

/// Fails when `value`'s `Display` output contains [`CANARY`].
fn assert_display_no_canary(label: &str, value: &dyn Display) {
    let text = value.to_string();
    assert!(
        !text.contains(CANARY),
        "{label}: the canary leaked into Display output: {text}"
    );
}

/// The helpers themselves must catch a leak, or every test below passes vacuously.
#[test]
#[should_panic(expected = "the canary leaked")]
fn the_helper_catches_a_leak() {
    assert_no_canary("plain string", &format!("token={CANARY}"));
}

#[test]
fn create_spec_env_is_hidden() {
    let spec = CreateSpec::new()
        .template("python")
        .env("API_TOKEN", CANARY)
        .env("OTHER", format!("prefix-{CANARY}-suffix"));
    assert_no_canary("CreateSpec", &spec);
}

#[test]
fn command_env_is_hidden() {
    let command = Command::new("env")
        .env("API_TOKEN", CANARY)
        .cwd("/work")
        .timeout(Duration::from_secs(5));
    assert_no_canary("Command", &command);
}

#[test]
fn preview_link_token_and_headers_are_hidden() {
    let mut headers = BTreeMap::new();
    headers.insert("x-daytona-preview-token".to_owned(), CANARY.to_owned());
    headers.insert("authorization".to_owned(), format!("Bearer {CANARY}"));
    let link = PreviewLink {
        url: "https://3000-sb.example.com".into(),
        port: 3000,
        headers,
        token: Some(CANARY.into()),
        expires_at: Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_900_000_000)),
    };
    assert_no_canary("PreviewLink", &link);
    // Signed links carry the token in the host (Daytona) or a signature in the query.
    let signed = PreviewLink {
        url: format!("https://3000-{CANARY}.proxy.example.com/app?signature={CANARY}x"),
        ..link
    };
    assert_no_canary("a signed PreviewLink", &signed);
    assert!(format!("{signed:?}").contains("https://3000-<redacted>.proxy.example.com/app"));
}

#[test]
fn ssh_access_token_is_hidden_also_as_user() {
    let with_user = SshAccess {
        host: "ssh.example.com".into(),
        port: 22,
        user: "daytona".into(),
        token: Some(CANARY.into()),
        expires_at: None,
    };
    assert_no_canary("SshAccess", &with_user);
    let token_as_user = SshAccess {
        user: CANARY.into(),
        ..with_user
    };
    assert_no_canary("SshAccess with the token as user", &token_as_user);
}

#[test]
fn error_sources_are_not_shown() {
    let source = std::io::Error::other(format!("Authorization: Bearer {CANARY}"));
    let error = Error::new(ErrorKind::Transport, "connection reset")
        .with_provider("e2b")
        .with_operation("exec")
        .with_sandbox_id("sb-1")
        .with_source(source);
    assert_no_canary("Error with source", &error);
    assert_display_no_canary("Error with source", &error);

    let all = Error::all_providers_failed(vec![
        Attempt {
            provider: "e2b".into(),
            error,
        },
        Attempt {
            provider: "fly".into(),
            error: Error::new(ErrorKind::Unauthorized, "bad token")
                .with_source(std::io::Error::other(CANARY)),
        },
    ]);
    assert_no_canary("AllProvidersFailed", &all);
    assert_display_no_canary("AllProvidersFailed", &all);

    let io: std::io::Error = all.into();
    assert_no_canary("Error as io::Error", &io);
    assert_display_no_canary("Error as io::Error", &io);
}

#[cfg(feature = "http")]
mod http {
    use super::*;
    use bytes::Bytes;
    use sandbox_sdk_core::http::{
        ErrorResponse, Headers, HttpClient, Method, Multipart, default_error_mapper,
    };

    fn builder() -> sandbox_sdk_core::http::HttpClientBuilder {
        HttpClient::builder("canaryprov", "https://api.example.com/v1")
            .bearer(CANARY)
            .auth_header("X-API-Key", CANARY)
            .header("X-Custom-Token", CANARY)
    }

    #[test]
    fn http_client_and_builder_hide_credentials() {
        let builder = builder();
        assert_no_canary("HttpClientBuilder", &builder);
        let client = builder.build().unwrap();
        assert_no_canary("HttpClient", &client);
        let other = client.with_base_url("https://envd.example.com").unwrap();
        assert_no_canary("HttpClient::with_base_url", &other);
        let with_userinfo =
            HttpClient::builder("canaryprov", &format!("https://u:{CANARY}@h.example"));
        assert_no_canary(
            "HttpClientBuilder with credentials in the URL",
            &with_userinfo,
        );
        let error = with_userinfo.build().unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Validation);
        assert_display_no_canary("bad base URL error", &error);
    }

    #[test]
    fn http_request_hides_sensitive_headers_query_values_and_bodies() {
        let client = builder().build().unwrap();
        let request = client
            .request_url(
                Method::Put,
                &format!("https://files.example.com/f?signature={CANARY}"),
            )
            .query("token", CANARY)
            .sensitive_header("X-Daytona-Preview-Token", CANARY)
            .json(&serde_json::json!({ "env": { "KEY": CANARY } }));
        assert_no_canary("Request", &request);
        let multipart = Multipart::new().text("secret", CANARY).bytes(
            "file",
            "f.txt",
            "text/plain",
            CANARY.as_bytes().to_vec(),
        );
        assert_no_canary("Multipart", &multipart);
        let request = client.request(Method::Post, "/files").multipart(multipart);
        assert_no_canary("Request with multipart", &request);
    }

    #[test]
    fn error_response_hides_body_and_credential_headers() {
        let mut headers = Headers::new();
        headers.push("set-cookie", format!("session={CANARY}"));
        headers.push("www-authenticate", format!("Bearer realm={CANARY}"));
        let response = ErrorResponse {
            status: 401,
            headers,
            body: Bytes::from(format!("<html>invalid token {CANARY}</html>")),
            operation: "create".into(),
            sandbox_id: Some("sb-1".into()),
            request_id: Some("req-1".into()),
            method: "POST".into(),
            path: "/sandboxes".into(),
            provider: "canaryprov".into(),
        };
        assert_no_canary("ErrorResponse", &response);
        let error = default_error_mapper(&response);
        assert_eq!(error.kind(), ErrorKind::Unauthorized);
        assert_no_canary("default_error_mapper result", &error);
        assert_display_no_canary("default_error_mapper result", &error);
    }
}
