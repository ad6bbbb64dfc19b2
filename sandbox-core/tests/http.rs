//! The shared HTTP transport against loopback servers (wiremock, and raw TCP where a server must
//! misbehave). Run with `cargo test -p sandbox-sdk-core --features http`.
#![cfg(feature = "http")]

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use sandbox_sdk_core::http::{ErrorResponse, HttpClient, Method, Multipart};
use sandbox_sdk_core::{ByteStream, Error, ErrorKind, UploadBody};
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wiremock::matchers::{body_json, header, method, path, query_param};
use wiremock::{Mock, MockServer, ResponseTemplate};

const SECRET: &str = "canary-5ecret-XYZ";

fn client(server: &MockServer) -> HttpClient {
    HttpClient::builder("testprov", &server.uri())
        .bearer(SECRET)
        .build()
        .unwrap()
}

fn assert_no_secret(text: &str) {
    assert!(!text.contains(SECRET), "secret leaked into: {text}");
}

/// Sends `GET /x` through the client `make` builds for a server that answers any GET with 200,
/// and returns the one request the server received.
async fn sent_get(make: impl FnOnce(&MockServer) -> HttpClient) -> wiremock::Request {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(200))
        .expect(1)
        .mount(&server)
        .await;
    make(&server)
        .request(Method::Get, "/x")
        .send_empty()
        .await
        .unwrap();
    server.received_requests().await.unwrap().remove(0)
}

#[tokio::test]
async fn bearer_auth_header_defaults_and_user_agent_are_sent() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/ping"))
        .and(header("authorization", format!("Bearer {SECRET}").as_str()))
        .and(header("x-api-key", "key-2"))
        .and(header("x-team", "agents"))
        .and(header("user-agent", "my-adapter/1.0"))
        .respond_with(ResponseTemplate::new(204))
        .expect(1)
        .mount(&server)
        .await;
    let client = HttpClient::builder("testprov", &server.uri())
        .bearer(SECRET)
        .auth_header("X-API-Key", "key-2")
        .header("X-Team", "agents")
        .user_agent("my-adapter/1.0")
        .build()
        .unwrap();
    client
        .request(Method::Get, "/ping")
        .send_empty()
        .await
        .unwrap();
}

#[tokio::test]
async fn default_user_agent_names_the_sdk() {
    let received = sent_get(client).await;
    let ua = received
        .headers
        .get("user-agent")
        .unwrap()
        .to_str()
        .unwrap();
    assert!(ua.starts_with("sandbox-sdk-rs/"), "{ua}");
}

#[tokio::test]
async fn base_path_prefix_is_kept_and_with_base_url_keeps_auth() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/v1/apps/my-app"))
        .and(header("authorization", format!("Bearer {SECRET}").as_str()))
        .respond_with(ResponseTemplate::new(200).set_body_string("ok"))
        .expect(2)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/other/thing"))
        .and(header("authorization", format!("Bearer {SECRET}").as_str()))
        .respond_with(ResponseTemplate::new(200).set_body_string("other"))
        .expect(1)
        .mount(&server)
        .await;
    let base = format!("{}/v1", server.uri());
    let client = HttpClient::builder("testprov", &base)
        .bearer(SECRET)
        .build()
        .unwrap();
    assert_eq!(client.base_url(), base);
    let text = client
        .request(Method::Get, "/apps/my-app")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(text, "ok");
    // No leading slash: still under the prefix.
    client
        .request(Method::Get, "apps/my-app")
        .send_empty()
        .await
        .unwrap();
    let other = client
        .with_base_url(&format!("{}/other/", server.uri()))
        .unwrap();
    assert_eq!(other.provider(), "testprov");
    let text = other
        .request(Method::Get, "/thing")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(text, "other");
}

#[derive(Serialize, Deserialize, Debug, PartialEq)]
struct Machine {
    id: String,
    cpus: u32,
    #[serde(default)]
    tags: Vec<String>,
}

#[tokio::test]
async fn json_round_trip() {
    let server = MockServer::start().await;
    let sent = Machine {
        id: "m-1".into(),
        cpus: 2,
        tags: vec!["a".into()],
    };
    Mock::given(method("POST"))
        .and(path("/machines"))
        .and(header("content-type", "application/json"))
        .and(body_json(&sent))
        .respond_with(
            ResponseTemplate::new(201)
                .insert_header("x-request-id", "req-42")
                .set_body_json(serde_json::json!({"id": "m-1", "cpus": 2, "extra": true})),
        )
        .expect(1)
        .mount(&server)
        .await;
    let got: Machine = client(&server)
        .request(Method::Post, "/machines")
        .json(&sent)
        .send_json()
        .await
        .unwrap();
    assert_eq!(
        got,
        Machine {
            id: "m-1".into(),
            cpus: 2,
            tags: vec![]
        }
    );
}

#[tokio::test]
async fn request_id_is_captured_on_success() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(200).insert_header("fly-request-id", "01HXYZ"))
        .mount(&server)
        .await;
    let client = HttpClient::builder("fly", &server.uri())
        .request_id_header("Fly-Request-Id")
        .build()
        .unwrap();
    let response = client.request(Method::Get, "/apps").send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.request_id(), Some("01HXYZ"));
    assert_eq!(response.header("FLY-REQUEST-ID"), Some("01HXYZ"));
}

#[tokio::test]
async fn query_params_are_encoded_and_repeatable() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/files"))
        .and(query_param("path", "/home/user/a b&c.txt"))
        .and(query_param("limit", "10"))
        .respond_with(ResponseTemplate::new(200))
        .expect(1)
        .mount(&server)
        .await;
    client(&server)
        .request(Method::Get, "/files")
        .query("path", "/home/user/a b&c.txt")
        .query("limit", 10)
        .query("state", "started")
        .query("state", "stopped")
        .send_empty()
        .await
        .unwrap();
    let received = server.received_requests().await.unwrap();
    let states: Vec<String> = received[0]
        .url
        .query_pairs()
        .filter(|(k, _)| k == "state")
        .map(|(_, v)| v.into_owned())
        .collect();
    assert_eq!(states, ["started", "stopped"]);
}

#[tokio::test]
async fn request_url_keeps_its_own_query_and_can_drop_auth() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/download"))
        .and(query_param("signature", "sig-1"))
        .and(query_param("path", "x"))
        .respond_with(ResponseTemplate::new(200).set_body_string("data"))
        .expect(2)
        .mount(&server)
        .await;
    let client = client(&server);
    let url = format!("{}/download?signature=sig-1", server.uri());
    let with = client
        .request_url(Method::Get, &url)
        .query("path", "x")
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(&with[..], b"data");
    client
        .request_url(Method::Get, &url)
        .query("path", "x")
        .without_auth()
        .send_empty()
        .await
        .unwrap();
    let received = server.received_requests().await.unwrap();
    assert!(received[0].headers.get("authorization").is_some());
    assert!(received[1].headers.get("authorization").is_none());
}

#[tokio::test]
async fn error_mapper_gets_status_body_and_request_id_and_context_is_filled() {
    let server = MockServer::start().await;
    Mock::given(method("DELETE"))
        .and(path("/sandboxes/sb-9"))
        .respond_with(
            ResponseTemplate::new(404)
                .insert_header("x-request-id", "req-404")
                .set_body_string(r#"{"code":"not_found","message":"no sandbox sb-9"}"#),
        )
        .expect(1)
        .mount(&server)
        .await;
    let seen: Arc<Mutex<Vec<ErrorResponse>>> = Arc::default();
    let seen_in_mapper = seen.clone();
    let client = HttpClient::builder("testprov", &server.uri())
        .bearer(SECRET)
        .error_mapper(move |response| {
            seen_in_mapper.lock().unwrap().push(response.clone());
            let kind = if response.body_text().contains("not_found") {
                ErrorKind::NotRunning
            } else {
                ErrorKind::Provider
            };
            Error::new(kind, "mapped by adapter")
        })
        .build()
        .unwrap();
    let error = client
        .request(Method::Delete, "/sandboxes/sb-9")
        .operation("destroy")
        .sandbox_id("sb-9")
        .send_empty()
        .await
        .unwrap_err();
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 1);
    let response = &seen[0];
    assert_eq!(response.status, 404);
    assert_eq!(response.request_id.as_deref(), Some("req-404"));
    assert_eq!(response.operation, "destroy");
    assert_eq!(response.sandbox_id.as_deref(), Some("sb-9"));
    assert_eq!(response.method, "DELETE");
    assert_eq!(response.path, "/sandboxes/sb-9");
    assert_eq!(response.header("X-Request-Id"), Some("req-404"));
    assert!(response.body_text().contains("no sandbox sb-9"));
    assert_eq!(error.kind(), ErrorKind::NotRunning);
    assert_eq!(error.message(), "mapped by adapter");
    assert_eq!(error.status(), Some(404));
    assert_eq!(error.request_id(), Some("req-404"));
    assert_eq!(error.provider(), Some("testprov"));
    assert_eq!(error.operation(), Some("destroy"));
    assert_eq!(error.sandbox_id(), Some("sb-9"));
}

#[tokio::test]
async fn default_mapper_maps_statuses_to_kinds_with_the_provider_message() {
    let server = MockServer::start().await;
    for (status, route) in [
        (400u16, "/s400"),
        (401, "/s401"),
        (403, "/s403"),
        (404, "/s404"),
        (409, "/s409"),
        (422, "/s422"),
        (500, "/s500"),
        (503, "/s503"),
    ] {
        Mock::given(path(route))
            .respond_with(
                ResponseTemplate::new(status)
                    .set_body_string(format!(r#"{{"message":"failure {status}"}}"#)),
            )
            .mount(&server)
            .await;
    }
    let client = client(&server);
    let cases = [
        ("/s400", ErrorKind::Validation, false),
        ("/s401", ErrorKind::Unauthorized, false),
        ("/s403", ErrorKind::Unauthorized, false),
        ("/s404", ErrorKind::NotFound, false),
        ("/s409", ErrorKind::Conflict, false),
        ("/s422", ErrorKind::Validation, false),
        ("/s500", ErrorKind::Provider, true),
        ("/s503", ErrorKind::Provider, true),
    ];
    for (route, kind, retryable) in cases {
        let error = client
            .request(Method::Get, route)
            .send_empty()
            .await
            .unwrap_err();
        assert_eq!(error.kind(), kind, "{route}");
        assert_eq!(error.is_retryable(), retryable, "{route}");
        let status = &route[2..];
        assert_eq!(error.status(), Some(status.parse().unwrap()));
        assert!(
            error.message().contains(&format!("failure {status}")),
            "{error}"
        );
        let text = error.to_string();
        assert!(text.contains("testprov") && text.contains(route), "{text}");
        assert_no_secret(&text);
        assert_no_secret(&format!("{error:?}"));
    }
}

#[tokio::test]
async fn retry_after_in_seconds_is_parsed() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(429)
                .insert_header("retry-after", "7")
                .set_body_string("slow down"),
        )
        .mount(&server)
        .await;
    let error = client(&server)
        .request(Method::Post, "/sandboxes")
        .operation("create")
        .send_empty()
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::QuotaExceeded);
    assert!(error.is_retryable());
    assert_eq!(error.retry_after(), Some(Duration::from_secs(7)));
    assert_eq!(error.operation(), Some("create"));
}

#[tokio::test]
async fn retry_after_as_http_date_is_parsed_and_filled_after_a_custom_mapper() {
    let server = MockServer::start().await;
    let at = SystemTime::now() + Duration::from_secs(120);
    Mock::given(method("GET"))
        .respond_with(
            ResponseTemplate::new(503).insert_header("retry-after", httpdate::fmt_http_date(at)),
        )
        .mount(&server)
        .await;
    let seen = Arc::new(Mutex::new(None));
    let seen_in_mapper = seen.clone();
    let client = HttpClient::builder("testprov", &server.uri())
        .error_mapper(move |response| {
            *seen_in_mapper.lock().unwrap() = response.retry_after();
            Error::new(ErrorKind::Provider, "busy")
        })
        .build()
        .unwrap();
    let error = client
        .request(Method::Get, "/x")
        .send_empty()
        .await
        .unwrap_err();
    let in_mapper = seen.lock().unwrap().expect("mapper saw a Retry-After");
    // The date has one-second resolution and some time passes; it is never more than asked.
    assert!(
        in_mapper <= Duration::from_secs(120) && in_mapper >= Duration::from_secs(60),
        "{in_mapper:?}"
    );
    let delay = error.retry_after().expect("filled in after the mapper");
    assert!(delay <= Duration::from_secs(120) && delay >= Duration::from_secs(60));
    assert_eq!(error.status(), Some(503));
}

#[tokio::test]
async fn connection_refused_is_a_retryable_transport_error_without_the_query() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let client = HttpClient::builder("testprov", &format!("http://127.0.0.1:{port}/v1"))
        .bearer(SECRET)
        .build()
        .unwrap();
    let error = client
        .request(Method::Get, "/apps/x")
        .query("token", SECRET)
        .operation("list")
        .send()
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Transport);
    assert!(error.is_retryable());
    let text = error.to_string();
    assert!(text.contains("GET /v1/apps/x"), "{text}");
    assert!(text.contains("testprov list"), "{text}");
    assert!(!text.contains("token="), "{text}");
    assert_no_secret(&text);
    assert_no_secret(&format!("{error:?}"));
    // The kept source must not carry the URL's query either.
    let mut source = std::error::Error::source(&error);
    while let Some(s) = source {
        assert_no_secret(&s.to_string());
        assert_no_secret(&format!("{s:?}"));
        source = s.source();
    }
}

/// A server that answers every connection with `head` and `body`, then closes.
async fn raw_server(head: &'static str, body: &'static [u8]) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = socket.write_all(head.as_bytes()).await;
                let _ = socket.write_all(body).await;
                let _ = socket.shutdown().await;
            });
        }
    });
    format!("http://{addr}")
}

#[tokio::test]
async fn body_cut_short_is_a_transport_error_from_bytes_stream() {
    let base = raw_server(
        "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\nContent-Type: application/octet-stream\r\n\r\n",
        b"only a few bytes",
    )
    .await;
    let client = HttpClient::builder("testprov", &base).build().unwrap();
    let response = client
        .request(Method::Get, "/files/big")
        .operation("read_file")
        .sandbox_id("sb-1")
        .send()
        .await
        .unwrap();
    assert_eq!(response.content_length(), Some(100000));
    let mut stream = response.bytes_stream();
    let mut received = Vec::new();
    let error = loop {
        match stream.next().await {
            Some(Ok(chunk)) => received.extend_from_slice(&chunk),
            Some(Err(e)) => break e,
            None => panic!("stream ended cleanly after {} bytes", received.len()),
        }
    };
    assert!(received.len() < 100000);
    assert_eq!(error.kind(), ErrorKind::Transport);
    assert!(error.is_retryable());
    assert_eq!(error.operation(), Some("read_file"));
    assert_eq!(error.sandbox_id(), Some("sb-1"));
    assert!(error.to_string().contains("GET /files/big"), "{error}");

    // The same through bytes().
    let error = client
        .request(Method::Get, "/files/big")
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Transport);
}

#[tokio::test]
async fn bad_json_is_a_provider_error_naming_the_operation_not_the_body() {
    let base = raw_server(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 23\r\nx-request-id: r-7\r\n\r\n",
        br#"{"id":"tok-1","cpus":"x"#,
    )
    .await;
    let client = HttpClient::builder("testprov", &base).build().unwrap();
    let error = client
        .request(Method::Get, "/machines/m")
        .operation("get_machine")
        .send_json::<Machine>()
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Provider);
    let text = error.to_string();
    assert!(text.contains("get_machine"), "{text}");
    assert!(text.contains("could not decode"), "{text}");
    assert!(!text.contains("tok-1"), "{text}");
    assert_eq!(error.request_id(), Some("r-7"));
    // The 200 says the server acted: a create answered this way may have made a sandbox
    // (`cargo xtask faults` found keyed creates orphaning one under `malformed`).
    assert!(error.is_ambiguous(), "{error:?}");
}

#[tokio::test]
async fn wrong_json_types_do_not_echo_values() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_string(format!(r#"{{"id":"m","cpus":"{SECRET}"}}"#)),
        )
        .mount(&server)
        .await;
    let error = client(&server)
        .request(Method::Get, "/m")
        .send_json::<Machine>()
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Provider);
    assert!(error.to_string().contains("invalid type"), "{error}");
    assert_no_secret(&error.to_string());
    assert_no_secret(&format!("{error:?}"));
}

#[tokio::test]
async fn request_timeout_is_a_timeout_error() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(200).set_delay(Duration::from_millis(200)))
        .mount(&server)
        .await;
    let client = HttpClient::builder("testprov", &server.uri())
        .timeout(Duration::from_millis(50))
        .build()
        .unwrap();
    let error = client
        .request(Method::Get, "/slow")
        .send()
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Timeout);
    assert!(error.is_retryable());
    assert!(error.to_string().contains("GET /slow"), "{error}");
    // A per-request timeout overrides the default in both directions.
    let error = HttpClient::builder("testprov", &server.uri())
        .build()
        .unwrap()
        .request(Method::Get, "/slow")
        .timeout(Duration::from_millis(50))
        .send()
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Timeout);
    client
        .request(Method::Get, "/slow")
        .no_timeout()
        .send_empty()
        .await
        .unwrap();
}

#[tokio::test]
async fn no_accept_encoding_unless_the_caller_asks_for_gzip() {
    let received = sent_get(client).await;
    let accept_encoding = received
        .headers
        .get("accept-encoding")
        .map(|v| v.to_str().unwrap().to_owned());
    assert_eq!(
        accept_encoding, None,
        "gzip was asked for without the caller asking"
    );
}

#[cfg(feature = "gzip")]
#[tokio::test]
async fn gzip_is_asked_for_when_the_caller_turns_it_on() {
    let received = sent_get(|server| {
        HttpClient::builder("test", &server.uri())
            .gzip(true)
            .build()
            .unwrap()
    })
    .await;
    let accept_encoding = received.headers.get("accept-encoding").unwrap();
    assert!(accept_encoding.to_str().unwrap().contains("gzip"));
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 % 251) as u8).collect()
}

#[tokio::test]
async fn streamed_upload_bodies_arrive_intact() {
    let server = MockServer::start().await;
    Mock::given(method("PUT"))
        .and(header("content-type", "application/octet-stream"))
        .respond_with(ResponseTemplate::new(200))
        .mount(&server)
        .await;
    let client = client(&server);
    let data = pattern(1 << 20);

    let chunks: Vec<sandbox_sdk_core::Result<Bytes>> = data
        .chunks(64 * 1024)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    let stream: ByteStream = futures::stream::iter(chunks).boxed();
    client
        .request(Method::Put, "/upload/stream")
        .body_stream(stream, "application/octet-stream")
        .send_empty()
        .await
        .unwrap();

    let reader: UploadBody = Box::pin(std::io::Cursor::new(data.clone()));
    client
        .request(Method::Put, "/upload/reader")
        .body_stream_with_length(reader, "application/octet-stream", data.len() as u64)
        .send_empty()
        .await
        .unwrap();

    let received = server.received_requests().await.unwrap();
    assert_eq!(received.len(), 2);
    for request in &received {
        assert_eq!(request.body.len(), data.len(), "{}", request.url.path());
        assert!(request.body == data, "{}", request.url.path());
    }
    let sized = received
        .iter()
        .find(|r| r.url.path() == "/upload/reader")
        .unwrap();
    assert_eq!(
        sized
            .headers
            .get("content-length")
            .unwrap()
            .to_str()
            .unwrap(),
        data.len().to_string()
    );
}

#[tokio::test]
async fn a_failing_upload_stream_fails_the_request() {
    let server = MockServer::start().await;
    Mock::given(method("PUT"))
        .respond_with(ResponseTemplate::new(200))
        .mount(&server)
        .await;
    let chunks: Vec<sandbox_sdk_core::Result<Bytes>> = vec![
        Ok(Bytes::from_static(b"first")),
        Err(Error::new(ErrorKind::Transport, "local file vanished")),
    ];
    let error = client(&server)
        .request(Method::Put, "/upload")
        .body_stream(futures::stream::iter(chunks).boxed(), "text/plain")
        .send_empty()
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Transport);
}

#[tokio::test]
async fn multipart_arrives_with_the_right_parts() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/files"))
        .respond_with(ResponseTemplate::new(200))
        .expect(1)
        .mount(&server)
        .await;
    let binary = pattern(3000);
    let streamed = pattern(70_000);
    let stream: ByteStream = futures::stream::iter(
        streamed
            .chunks(8192)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect::<Vec<_>>(),
    )
    .boxed();
    let form = Multipart::new()
        .text("path", "/home/user/ü.txt")
        .bytes(
            "file",
            "data.bin",
            "application/octet-stream",
            binary.clone(),
        )
        .byte_stream("big", "big.bin", "application/x-test", stream);
    client(&server)
        .request(Method::Post, "/files")
        .multipart(form)
        .send_empty()
        .await
        .unwrap();
    let received = server.received_requests().await.unwrap();
    let request = &received[0];
    let content_type = request
        .headers
        .get("content-type")
        .unwrap()
        .to_str()
        .unwrap();
    let boundary = content_type
        .strip_prefix("multipart/form-data; boundary=")
        .unwrap_or_else(|| panic!("{content_type}"));
    let parts = split_multipart(&request.body, boundary);
    assert_eq!(parts.len(), 3);
    assert!(parts[0].0.contains(r#"name="path""#), "{}", parts[0].0);
    assert_eq!(parts[0].1, "/home/user/ü.txt".as_bytes());
    // The two file parts: disposition, content type and content.
    let files = [
        (
            r#"name="file"; filename="data.bin""#,
            "application/octet-stream",
            &binary,
        ),
        (
            r#"name="big"; filename="big.bin""#,
            "application/x-test",
            &streamed,
        ),
    ];
    for ((headers, body), (disposition, content_type, content)) in parts[1..].iter().zip(files) {
        assert!(headers.contains(disposition), "{headers}");
        let content_type = format!("content-type: {content_type}");
        assert!(
            headers.to_ascii_lowercase().contains(&content_type),
            "{headers}"
        );
        assert_eq!(body, content);
    }
}

/// Splits a multipart body into (headers, content) pairs.
fn split_multipart(body: &[u8], boundary: &str) -> Vec<(String, Vec<u8>)> {
    let delimiter = format!("--{boundary}");
    let mut parts = Vec::new();
    let mut rest = body;
    // Skip to the first delimiter.
    let start = find(rest, delimiter.as_bytes()).expect("first boundary");
    rest = &rest[start + delimiter.len()..];
    while !rest.starts_with(b"--") {
        rest = rest.strip_prefix(b"\r\n").expect("CRLF after boundary");
        let end = find(rest, format!("\r\n{delimiter}").as_bytes()).expect("next boundary");
        let part = &rest[..end];
        let split = find(part, b"\r\n\r\n").expect("part headers");
        parts.push((
            String::from_utf8(part[..split].to_vec()).unwrap(),
            part[split + 4..].to_vec(),
        ));
        rest = &rest[end + 2 + delimiter.len()..];
    }
    parts
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[tokio::test]
async fn sensitive_headers_reach_the_server_but_not_debug() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(header("x-daytona-preview-token", SECRET))
        .and(header("x-trace", "visible-value"))
        .respond_with(ResponseTemplate::new(200))
        .expect(1)
        .mount(&server)
        .await;
    let request = client(&server)
        .request(Method::Get, "/p")
        .query("sig", SECRET)
        .sensitive_header("X-Daytona-Preview-Token", SECRET)
        .header("X-Trace", "visible-value");
    let debug = format!("{request:?}");
    assert_no_secret(&debug);
    assert!(
        debug.contains("visible-value") && debug.contains("sig"),
        "{debug}"
    );
    request.send_empty().await.unwrap();
}

#[tokio::test]
async fn bad_request_headers_fail_before_sending() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(200))
        .expect(0)
        .mount(&server)
        .await;
    let error = client(&server)
        .request(Method::Get, "/x")
        .sensitive_header("x-token", &format!("{SECRET}\r\nInjected: yes"))
        .operation("probe")
        .send_empty()
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Validation);
    assert_eq!(error.operation(), Some("probe"));
    assert_no_secret(&error.to_string());
    let error = client(&server)
        .request_url(Method::Get, "file:///etc/passwd")
        .send_empty()
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Validation);
}

#[tokio::test]
async fn redirects_are_never_followed() {
    let home = MockServer::start().await;
    let elsewhere = MockServer::start().await;
    Mock::given(path("/moved"))
        .respond_with(
            ResponseTemplate::new(302).insert_header("location", format!("{}/new", home.uri())),
        )
        .mount(&home)
        .await;
    Mock::given(path("/new"))
        .and(header("authorization", format!("Bearer {SECRET}").as_str()))
        .respond_with(ResponseTemplate::new(200).set_body_string("here"))
        .expect(0)
        .mount(&home)
        .await;
    Mock::given(path("/away"))
        .respond_with(
            ResponseTemplate::new(302)
                .insert_header("location", format!("{}/steal", elsewhere.uri())),
        )
        .mount(&home)
        .await;
    Mock::given(path("/steal"))
        .respond_with(ResponseTemplate::new(200))
        .expect(0)
        .mount(&elsewhere)
        .await;
    let client = HttpClient::builder("testprov", &home.uri())
        .bearer(SECRET)
        .auth_header("x-api-key", SECRET)
        .build()
        .unwrap();
    // Not even on the same origin: on a shared host (Daytona's toolbox) another path is another
    // sandbox, and its bytes must not come back as this one's.
    let error = client
        .request(Method::Get, "/moved")
        .send_empty()
        .await
        .unwrap_err();
    assert_eq!(error.status(), Some(302));
    assert!(error.to_string().contains("not followed"), "{error}");
    let error = client
        .request(Method::Get, "/away")
        .send_empty()
        .await
        .unwrap_err();
    assert_eq!(error.status(), Some(302));
    assert_eq!(error.kind(), ErrorKind::Provider);
}

#[tokio::test]
async fn debug_of_client_builder_request_and_error_response_hides_secrets() {
    let builder = HttpClient::builder("testprov", "https://api.example.com/v1")
        .bearer(SECRET)
        .auth_header("X-API-Key", SECRET)
        .header("X-Plain", "shown");
    let builder_debug = format!("{builder:?}");
    assert_no_secret(&builder_debug);
    assert!(builder_debug.contains("shown") && builder_debug.contains("x-api-key"));
    let client = builder.build().unwrap();
    assert_no_secret(&format!("{client:?}"));
    assert_no_secret(&format!(
        "{:?}",
        client.with_base_url("https://b.example").unwrap()
    ));
    let request = client
        .request_url(
            Method::Post,
            &format!("https://files.example.com/upload?signature={SECRET}"),
        )
        .sensitive_header("x-access-token", SECRET)
        .header("authorization", SECRET)
        .json(&serde_json::json!({ "password": SECRET }));
    assert_no_secret(&format!("{request:?}"));
    let response = ErrorResponse {
        status: 401,
        headers: vec![
            ("set-cookie".to_owned(), SECRET.to_owned()),
            ("www-authenticate".to_owned(), SECRET.to_owned()),
        ]
        .into(),
        body: Bytes::from(format!("bad token {SECRET}")),
        operation: "create".into(),
        sandbox_id: None,
        request_id: None,
        method: "POST".into(),
        path: "/sandboxes".into(),
        provider: "testprov".into(),
    };
    assert_no_secret(&format!("{response:?}"));
}

#[tokio::test]
async fn byte_stream_reads_lazily_in_chunks() {
    let server = MockServer::start().await;
    let data = pattern(256 * 1024);
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(200).set_body_bytes(data.clone()))
        .mount(&server)
        .await;
    let chunks: Vec<Bytes> = client(&server)
        .request(Method::Get, "/big")
        .no_timeout()
        .send()
        .await
        .unwrap()
        .bytes_stream()
        .try_collect()
        .await
        .unwrap();
    assert!(chunks.len() > 1);
    assert_eq!(chunks.concat(), data);
}

#[tokio::test]
async fn credentials_echoed_in_an_error_body_are_scrubbed() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(
            ResponseTemplate::new(401)
                .insert_header("x-echo", format!("Bearer {SECRET}"))
                .set_body_string(format!(
                    r#"{{"message":"token {SECRET} is not valid for key preview-5ecret-ABC"}}"#
                )),
        )
        .mount(&server)
        .await;
    let seen = Arc::new(Mutex::new(String::new()));
    let seen_in_mapper = seen.clone();
    let client = client(&server);
    let error = client
        .request(Method::Get, "/me")
        .sensitive_header("x-preview-token", "preview-5ecret-ABC")
        .send_empty()
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Unauthorized);
    assert!(
        error.message().contains("token <redacted> is not valid"),
        "{error}"
    );
    assert!(!error.to_string().contains("preview-5ecret-ABC"), "{error}");
    assert_no_secret(&error.to_string());

    let client = HttpClient::builder("testprov", &server.uri())
        .auth_header("x-api-key", SECRET)
        .error_mapper(move |response| {
            *seen_in_mapper.lock().unwrap() =
                format!("{} {:?}", response.body_text(), response.header("x-echo"));
            Error::new(ErrorKind::Unauthorized, response.body_text())
        })
        .build()
        .unwrap();
    let error = client
        .request(Method::Get, "/me")
        .send_empty()
        .await
        .unwrap_err();
    assert_no_secret(&seen.lock().unwrap());
    assert_no_secret(&error.to_string());
}

#[tokio::test]
async fn a_stalled_body_times_out_while_streaming() {
    // Headers and a first chunk, then silence on an open connection.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut buf = [0u8; 4096];
        let _ = socket.read(&mut buf).await;
        let _ = socket
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nfirst chunk")
            .await;
        let _ = released.await;
    });
    let client = HttpClient::builder("testprov", &format!("http://{addr}"))
        .build()
        .unwrap();
    let mut stream = client
        .request(Method::Get, "/stream")
        .timeout(Duration::from_millis(200))
        .send()
        .await
        .unwrap()
        .bytes_stream();
    let error = loop {
        match stream.next().await {
            Some(Ok(_)) => continue,
            Some(Err(e)) => break e,
            None => panic!("stream ended cleanly"),
        }
    };
    assert_eq!(error.kind(), ErrorKind::Timeout);
    assert!(
        error.to_string().contains("reading the response body"),
        "{error}"
    );
    let _ = release.send(());
}

/// A server that reads one request head, answers with `head`, then writes each of `chunks` after
/// its delay, and keeps the connection open until the test ends.
async fn paced_server(head: &'static str, chunks: Vec<(Duration, &'static [u8])>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut buf = [0u8; 4096];
        let _ = socket.read(&mut buf).await;
        let _ = socket.write_all(head.as_bytes()).await;
        for (delay, chunk) in chunks {
            tokio::time::sleep(delay).await;
            let _ = socket.write_all(chunk).await;
        }
        std::future::pending::<()>().await;
    });
    format!("http://{addr}")
}

#[tokio::test]
async fn an_idle_bounded_body_that_goes_silent_ends_with_a_transport_error() {
    let base = paced_server(
        "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n",
        vec![(Duration::ZERO, b"first chunk")],
    )
    .await;
    let client = HttpClient::builder("testprov", &base).build().unwrap();
    let mut stream = client
        .request(Method::Get, "/files")
        .idle_timeout(Duration::from_millis(200))
        .send()
        .await
        .unwrap()
        .bytes_stream();
    assert_eq!(&stream.next().await.unwrap().unwrap()[..], b"first chunk");
    let error = stream.next().await.unwrap().unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Transport);
    assert!(error.to_string().contains("went silent"), "{error}");
    assert!(error.to_string().contains("testprov"), "{error}");
    assert!(
        stream.next().await.is_none(),
        "the stream ends after the error"
    );
}

#[tokio::test]
async fn an_idle_bounded_request_whose_answer_never_starts_is_an_ambiguous_timeout() {
    let base = paced_server("", vec![]).await;
    let client = HttpClient::builder("testprov", &base)
        .timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let error = client
        .request(Method::Get, "/files")
        .idle_timeout(Duration::from_secs(60))
        .send()
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Timeout);
    assert!(error.is_ambiguous());
    assert!(error.to_string().contains("no response within"), "{error}");
}

#[tokio::test]
async fn an_idle_bound_is_no_total_limit_for_a_slow_but_steady_body() {
    // Five chunks 150 ms apart: 750 ms in all, past the client's 300 ms request timeout, but
    // never silent for the 2 s idle bound.
    let step = Duration::from_millis(150);
    let base = paced_server(
        "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n",
        vec![
            (step, b"ab"),
            (step, b"cd"),
            (step, b"ef"),
            (step, b"gh"),
            (step, b"ij"),
        ],
    )
    .await;
    let client = HttpClient::builder("testprov", &base)
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let body = client
        .request(Method::Get, "/files")
        .idle_timeout(Duration::from_secs(2))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(&body[..], b"abcdefghij");
}

#[tokio::test]
async fn a_slow_upload_counts_as_progress_for_the_head_bound() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200))
        .expect(1)
        .mount(&server)
        .await;
    // Five chunks 150 ms apart: the body takes longer than the 300 ms request timeout.
    let body: ByteStream = futures::stream::iter(0..5)
        .then(|i| async move {
            tokio::time::sleep(Duration::from_millis(150)).await;
            Ok(Bytes::from(vec![i as u8; 1024]))
        })
        .boxed();
    let client = HttpClient::builder("testprov", &server.uri())
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    client
        .request(Method::Post, "/files")
        .body_stream(body, "application/octet-stream")
        .idle_timeout(Duration::from_secs(2))
        .send()
        .await
        .unwrap();
    assert_eq!(
        server.received_requests().await.unwrap()[0].body.len(),
        5 * 1024
    );
}

#[tokio::test]
async fn only_failures_that_may_have_taken_effect_are_ambiguous() {
    let server = MockServer::start().await;
    for status in [408u16, 429, 500, 502, 503, 504, 404] {
        Mock::given(path(format!("/s{status}")))
            .respond_with(ResponseTemplate::new(status))
            .mount(&server)
            .await;
    }
    let client = client(&server);
    for (status, ambiguous) in [
        (408, true),
        (429, false),
        (500, true),
        (502, true),
        (503, false),
        (504, true),
        (404, false),
    ] {
        let error = client
            .request(Method::Post, &format!("/s{status}"))
            .send()
            .await
            .unwrap_err();
        assert_eq!(error.is_ambiguous(), ambiguous, "{status}");
    }
    // Refused: nothing reached a server.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let refused = HttpClient::builder("testprov", &format!("http://127.0.0.1:{port}"))
        .build()
        .unwrap()
        .request(Method::Post, "/x")
        .send()
        .await
        .unwrap_err();
    assert!(!refused.is_ambiguous());
    // Timed out after sending: it may have happened.
    let slow = paced_server("", vec![]).await;
    let timed_out = HttpClient::builder("testprov", &slow)
        .timeout(Duration::from_millis(100))
        .build()
        .unwrap()
        .request(Method::Post, "/x")
        .send()
        .await
        .unwrap_err();
    assert_eq!(timed_out.kind(), ErrorKind::Timeout);
    assert!(timed_out.is_ambiguous());
}

#[tokio::test]
async fn bodies_read_whole_are_capped_before_they_are_read() {
    let server = MockServer::start().await;
    Mock::given(path("/big"))
        .respond_with(ResponseTemplate::new(200).set_body_bytes(vec![b'x'; 4096]))
        .mount(&server)
        .await;
    let client = client(&server);
    // Announced with Content-Length: refused before reading.
    let error = client
        .request(Method::Get, "/big")
        .max_body(1024)
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Provider);
    assert!(
        error.to_string().contains("larger than the 1024 bytes"),
        "{error}"
    );
    assert!(!error.is_retryable());
    // Unannounced (chunked, no length): refused as soon as the bytes read pass the cap.
    let base = paced_server(
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
        vec![
            (Duration::ZERO, b"400\r\n"),
            (Duration::ZERO, &[b'y'; 1024]),
            (Duration::ZERO, b"\r\n400\r\n"),
            (Duration::ZERO, &[b'y'; 1024]),
            (Duration::ZERO, b"\r\n0\r\n\r\n"),
        ],
    )
    .await;
    let error = HttpClient::builder("testprov", &base)
        .build()
        .unwrap()
        .request(Method::Get, "/chunked")
        .max_body(1500)
        .send_json::<serde_json::Value>()
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("larger than the 1500 bytes"),
        "{error}"
    );
    // Within the cap, and the default for everything else.
    let body = client
        .request(Method::Get, "/big")
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(body.len(), 4096);
}

#[test]
fn addresses_from_answers_cannot_downgrade_or_carry_url_syntax() {
    use sandbox_sdk_core::http::{checked_answer_host, checked_answer_url, join_same_origin};
    let https = "https://api.example.com/v1";
    let loopback = "http://127.0.0.1:9000";
    assert_eq!(
        checked_answer_url("https://proxy.example.com/toolbox/", https).unwrap(),
        "https://proxy.example.com/toolbox"
    );
    assert!(checked_answer_url("http://127.0.0.1:9001/toolbox", loopback).is_ok());
    for bad in [
        "http://proxy.example.com/toolbox",
        "ftp://proxy.example.com",
        "https://user:pw@proxy.example.com",
        "https://proxy.example.com/toolbox?redirect=evil",
        "https://proxy.example.com/#x",
        "not a url",
        "javascript:alert(1)",
    ] {
        let error = checked_answer_url(bad, https).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Provider, "{bad}");
        assert!(!error.to_string().contains("pw"), "{error}");
    }
    assert_eq!(checked_answer_host("e2b.app").unwrap(), "e2b.app");
    for bad in [
        "",
        "evil.com/x",
        "a@b.com",
        "e2b.app:80",
        "-x.com",
        "x y",
        "é.com",
    ] {
        assert!(checked_answer_host(bad).is_err(), "{bad:?}");
    }
    let base = "https://3000-sb.proxy.example.com";
    assert_eq!(join_same_origin(base, "").unwrap(), base);
    for bad in [
        "@127.0.0.1:1/steal",
        ":1/x",
        ".evil.com/x",
        "//evil.com",
        "x",
    ] {
        let error = join_same_origin(base, bad).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Validation, "{bad}");
    }
}

#[tokio::test]
async fn a_path_secret_never_reaches_messages() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(404).set_body_string(format!("no link {SECRET} here")))
        .mount(&server)
        .await;
    let error = client(&server)
        .request(Method::Post, &format!("/links/{SECRET}/expire"))
        .path_secret(SECRET)
        .send_empty()
        .await
        .unwrap_err();
    let shown = format!("{error} {error:?}");
    assert_no_secret(&shown);
    assert!(shown.contains("/links/<redacted>/expire"), "{shown}");
}

// The same inputs as the `error_body` fuzz target (`cargo xtask fuzz`), as a proptest in CI:
// whatever a server answers, mapping it neither panics nor quotes more than the limits allow.
proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

    #[test]
    fn any_error_answer_maps_without_panicking_and_stays_bounded(
        status in 0u16..1000,
        retry_after in "\\PC{0,40}",
        body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..4096),
        json in "\\{\"(message|error|detail)\": *\"\\PC{0,300}\"\\}",
    ) {
        for body in [body, json.into_bytes()] {
            let response = ErrorResponse::new(status, body).with_header("retry-after", &retry_after);
            let _ = response.retry_after();
            let _ = response.provider_message();
            let error = sandbox_sdk_core::http::default_error_mapper(&response);
            let shown = format!("{error} {error:?}");
            proptest::prop_assert!(shown.len() < 16 * 1024, "{} bytes shown", shown.len());
        }
    }
}

/// An upload reader that fails with one of our errors (inside the io error `AsyncRead` must
/// return) fails the request with that error's kind, not a transport error.
#[tokio::test]
async fn an_upload_reader_failing_with_our_error_keeps_its_kind() {
    struct Failing;
    impl tokio::io::AsyncRead for Failing {
        fn poll_read(
            self: std::pin::Pin<&mut Self>,
            _cx: &mut std::task::Context<'_>,
            _buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            let ours = Error::new(
                ErrorKind::Unauthorized,
                "the source sandbox refused the read",
            );
            std::task::Poll::Ready(Err(ours.into()))
        }
    }
    let server = MockServer::start().await;
    Mock::given(method("PUT"))
        .respond_with(ResponseTemplate::new(200))
        .mount(&server)
        .await;
    let body: UploadBody = Box::pin(Failing);
    let e = client(&server)
        .request(Method::Put, "/up")
        .body_stream(body, "application/octet-stream")
        .send_empty()
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unauthorized, "{e}");
    assert!(e.to_string().contains("refused the read"), "{e}");
    // A byte stream failing with our error: the same.
    let stream: ByteStream = futures::stream::iter(vec![
        Ok(Bytes::from_static(b"part")),
        Err(Error::new(ErrorKind::NotFound, "the file went away")),
    ])
    .boxed();
    let e = client(&server)
        .request(Method::Put, "/up")
        .body_stream(stream, "application/octet-stream")
        .send_empty()
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
}

/// A hostile server answering an error with a body that never ends: the mapper gets at most
/// `ERROR_BODY_LIMIT` bytes and the error comes back, however much the server would send.
#[tokio::test]
async fn an_endless_error_body_is_read_up_to_its_cap() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let sent = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = sent.clone();
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut buf = [0u8; 4096];
        let _ = socket.read(&mut buf).await;
        let head = "HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n";
        if socket.write_all(head.as_bytes()).await.is_err() {
            return;
        }
        let chunk = format!("{:x}\r\n{}\r\n", 16 * 1024, "e".repeat(16 * 1024));
        // Until the client goes away (or 256 MiB, so a broken cap fails instead of hanging).
        for _ in 0..16 * 1024 {
            if socket.write_all(chunk.as_bytes()).await.is_err() {
                return;
            }
            counter.fetch_add(16 * 1024, std::sync::atomic::Ordering::Relaxed);
        }
    });
    let seen = Arc::new(Mutex::new(0usize));
    let seen_in_mapper = seen.clone();
    let client = HttpClient::builder("testprov", &format!("http://{addr}"))
        .error_mapper(move |response| {
            *seen_in_mapper.lock().unwrap() = response.body.len();
            Error::new(ErrorKind::Provider, "mapped")
        })
        .build()
        .unwrap();
    let error = client
        .request(Method::Get, "/endless")
        .send_empty()
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Provider);
    assert_eq!(
        *seen.lock().unwrap(),
        sandbox_sdk_core::http::ERROR_BODY_LIMIT
    );
    // The client stopped reading long before the server's 256 MiB (socket buffers aside).
    assert!(
        sent.load(std::sync::atomic::Ordering::Relaxed) < 64 * 1024 * 1024,
        "the client kept reading the error body"
    );
}
