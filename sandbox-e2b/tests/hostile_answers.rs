//! A hostile control plane or envd (issue 17): addresses taken from API answers cannot move
//! requests (and the envd token) elsewhere, oversized answers are refused before they are held,
//! and credentials a server echoes back never reach an error.

use sandbox_e2b::{E2bBuilder, E2bProvider};
use sandbox_sdk_core::prelude::*;
use sandbox_sdk_core::{Command, ErrorKind};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

mod support;
use support::envelope;

const KEY: &str = "e2b_0123456789abcdef0123456789abcdef01234567";
const SB: &str = "ilxb3ba8bnc0gpyx3i8ax";
const TOKEN: &str = "tok_envd_secret_4242";

/// A loopback listener that only counts the connections it is offered (and drops them).
async fn counting_listener() -> (u16, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(AtomicUsize::new(0));
    let count = seen.clone();
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            drop(conn);
        }
    });
    (port, seen)
}

fn answer(id: &str, domain: Option<&str>) -> serde_json::Value {
    let mut body = serde_json::json!({
        "sandboxID": id,
        "templateID": "t",
        "envdAccessToken": TOKEN,
        "envdVersion": "0.6.13",
    });
    if let Some(domain) = domain {
        body["domain"] = domain.into();
    }
    body
}

/// A provider whose envd address comes from the answers (no sandbox-URL override), with a
/// domain outside the shared-host list, so the id and domain form the envd host.
fn provider_without_override(server: &MockServer) -> E2bProvider {
    E2bBuilder::new()
        .api_key(KEY)
        .api_url(server.uri())
        .domain("example.test")
        .request_timeout(std::time::Duration::from_secs(5))
        .build()
        .unwrap()
}

async fn connect_answering(server: &MockServer, body: serde_json::Value) {
    Mock::given(method("POST"))
        .and(path(format!("/v2/sandboxes/{SB}/connect")))
        .respond_with(ResponseTemplate::new(200).set_body_json(body))
        .mount(server)
        .await;
}

#[tokio::test]
async fn a_hostile_domain_in_an_answer_is_refused_before_any_request_goes_there() {
    let (port, seen) = counting_listener().await;
    let hostile = [
        format!("a@127.0.0.1:{port}"),
        format!("127.0.0.1:{port}"),
        format!("http://127.0.0.1:{port}"),
        format!("127.0.0.1:{port}/x?"),
        "evil.com/x".to_owned(),
        "a@b".to_owned(),
        "evil.com#".to_owned(),
    ];
    for domain in hostile {
        let server = MockServer::start().await;
        connect_answering(&server, answer(SB, Some(&domain))).await;
        let provider = provider_without_override(&server);
        let outcome = match provider.connect_sandbox(SB, None).await {
            Ok(sandbox) => {
                // Before the fix the answer was taken: the envd call (with its token) went to
                // the address the answer named.
                let _ = sandbox.mkdir("/home/user/d").await;
                Err(format!("the domain {domain:?} was accepted"))
            }
            Err(e) => Ok(e),
        };
        let e = outcome.unwrap();
        assert_eq!(e.kind(), ErrorKind::Provider, "{domain:?}: {e}");
        assert!(!e.is_retryable(), "{domain:?}");
        assert!(!e.to_string().contains(TOKEN));
    }
    assert_eq!(
        seen.load(Ordering::SeqCst),
        0,
        "a request reached the hostile address"
    );
}

#[tokio::test]
async fn a_hostile_sandbox_id_in_an_answer_is_refused() {
    let (port, seen) = counting_listener().await;
    for id in [format!("x@127.0.0.1:{port}/"), "sb.evil.com".to_owned()] {
        let server = MockServer::start().await;
        connect_answering(&server, answer(&id, None)).await;
        let provider = provider_without_override(&server);
        match provider.connect_sandbox(SB, None).await {
            Ok(sandbox) => {
                let _ = sandbox.mkdir("/home/user/d").await;
                panic!("the sandbox id {id:?} was accepted");
            }
            Err(e) => assert_eq!(e.kind(), ErrorKind::Provider, "{id:?}: {e}"),
        }
    }
    assert_eq!(
        seen.load(Ordering::SeqCst),
        0,
        "a request reached the hostile address"
    );
}

#[tokio::test]
async fn a_resume_answering_a_hostile_domain_keeps_the_old_address() {
    let server = MockServer::start().await;
    // The first connect answers well; the resume answers a hostile domain.
    Mock::given(method("POST"))
        .and(path(format!("/v2/sandboxes/{SB}/connect")))
        .respond_with(ResponseTemplate::new(200).set_body_json(answer(SB, Some("eu.e2b.dev"))))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    connect_answering(&server, answer(SB, Some("evil.com/steal"))).await;
    let sandbox = provider_without_override(&server)
        .connect_sandbox(SB, None)
        .await
        .unwrap();
    let e = sandbox.resume().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Provider);
    assert_eq!(sandbox.domain(), "eu.e2b.dev");
    assert_eq!(
        sandbox.preview_link(8080).await.unwrap().url,
        format!("https://8080-{SB}.eu.e2b.dev")
    );
}

/// A provider with envd at the mock (the sandbox-URL override), connected to `SB`.
async fn connected(server: &MockServer) -> sandbox_e2b::E2bSandbox {
    connect_answering(server, answer(SB, None)).await;
    E2bBuilder::new()
        .api_key(KEY)
        .api_url(server.uri())
        .sandbox_url(server.uri())
        .build()
        .unwrap()
        .connect_sandbox(SB, None)
        .await
        .unwrap()
}

#[tokio::test]
async fn an_envd_that_echoes_the_access_token_does_not_get_it_into_errors() {
    // A stream that ends with an error quoting the token, a 200 that is not a stream quoting
    // it, and a unary error quoting it: all three reach the caller without it.
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    let quoted = format!(
        "{{\"error\":{{\"code\":\"unauthenticated\",\"message\":\"token {TOKEN} is not valid\"}}}}"
    );
    Mock::given(method("POST"))
        .and(path("/process.Process/Start"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_raw(envelope(2, &quoted), "application/connect+json"),
        )
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/process.Process/Start"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(
            format!("{{\"message\":\"bad token {TOKEN}\"}}"),
            "application/json",
        ))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/filesystem.Filesystem/MakeDir"))
        .respond_with(ResponseTemplate::new(401).set_body_raw(quoted.clone(), "application/json"))
        .mount(&server)
        .await;
    let first = sandbox.exec(&Command::new("true")).await.unwrap_err();
    assert_eq!(first.kind(), ErrorKind::Unauthorized);
    let second = sandbox.exec(&Command::new("true")).await.unwrap_err();
    let third = sandbox.mkdir("/home/user/d").await.unwrap_err();
    assert_eq!(third.kind(), ErrorKind::Unauthorized);
    for e in [first, second, third] {
        let text = format!("{e} {e:?}");
        assert!(!text.contains(TOKEN), "the envd token leaked: {text}");
        assert!(text.contains("<redacted>"), "{text}");
    }
}

#[tokio::test]
async fn an_oversized_unary_answer_is_refused() {
    // Stat answers with 2 MiB of JSON: far more than any entry needs, refused before decoding.
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    let padding = "x".repeat(2 * 1024 * 1024);
    Mock::given(method("POST"))
        .and(path("/filesystem.Filesystem/Stat"))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "entry": {"name": "f", "type": "FILE_TYPE_FILE", "path": "/f", "size": 1},
            "padding": padding,
        })))
        .mount(&server)
        .await;
    let e = sandbox.stat("/f").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Provider, "{e}");
    assert!(
        e.to_string().contains("limit") || e.to_string().contains("large"),
        "{e}"
    );
}

#[tokio::test]
async fn an_oversized_create_answer_is_refused() {
    let server = MockServer::start().await;
    let mut body = answer(SB, None);
    body["padding"] = "x".repeat(2 * 1024 * 1024).into();
    connect_answering(&server, body).await;
    let e = provider_without_override(&server)
        .connect_sandbox(SB, None)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Provider, "{e}");
}

/// A process start answered with something that is not a Connect stream is read whole only up
/// to 64 KiB (it is an error to report, not output): a 1 MiB one is refused before it is held.
#[tokio::test]
async fn an_oversized_answer_that_is_not_a_stream_is_refused() {
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    Mock::given(method("POST"))
        .and(path("/process.Process/Start"))
        .respond_with(
            ResponseTemplate::new(200).set_body_raw("x".repeat(1024 * 1024), "application/json"),
        )
        .mount(&server)
        .await;
    let e = sandbox.exec(&Command::new("true")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Provider, "{e}");
    assert!(e.to_string().contains("larger than the 65536 bytes"), "{e}");
}

/// A file listing is the largest unary answer allowed (64 MiB, a deep tree), but no more: an
/// envd announcing 70 MB is refused from its header, before a byte of the body is held.
#[tokio::test]
async fn an_oversized_file_listing_is_refused_from_its_length() {
    use tokio::io::AsyncWriteExt;
    let server = MockServer::start().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let envd = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (head, _) = support::read_request(&mut conn).await;
                assert!(head.contains("/filesystem.filesystem/listdir"), "{head}");
                let answer = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 70000000\r\n\r\n{\"entries\":[";
                let _ = conn.write_all(answer.as_bytes()).await;
                std::future::pending::<()>().await;
            });
        }
    });
    let sandbox = support::connected_to(&server, &envd).await;
    let e = sandbox
        .list_files("/", sandbox_sdk_core::ListOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Provider, "{e}");
    assert!(
        e.to_string().contains("larger than the 67108864 bytes"),
        "{e}"
    );
}
