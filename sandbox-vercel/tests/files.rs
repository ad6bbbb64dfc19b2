//! Files (PROTOCOL.md §7): writes as a gzip tar under `x-cwd: /` after making the parent,
//! streamed reads with 404 as `NotFound`, mkdir, and stat over a command.

mod common;

use common::*;
use flate2::read::GzDecoder;
use sandbox_sdk_core::prelude::*;
use sandbox_sdk_core::{ErrorKind, FileKind, upload_body};
use serde_json::json;
use std::io::Read;
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

async fn mount_ok(server: &MockServer, suffix: &str) {
    Mock::given(method("POST"))
        .and(path(session_path(suffix)))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({})))
        .mount(server)
        .await;
}

/// The one entry of a gzip tar: its name, mode and data.
fn unpack(gz: &[u8]) -> (String, u32, Vec<u8>) {
    let mut raw = Vec::new();
    GzDecoder::new(gz).read_to_end(&mut raw).unwrap();
    let name = String::from_utf8(
        raw[..100]
            .iter()
            .take_while(|b| **b != 0)
            .copied()
            .collect(),
    )
    .unwrap();
    let octal =
        |f: &[u8]| u64::from_str_radix(std::str::from_utf8(&f[..f.len() - 1]).unwrap(), 8).unwrap();
    let mode = octal(&raw[100..108]) as u32;
    let size = octal(&raw[124..136]) as usize;
    assert_eq!(raw.len() % 512, 0);
    (name, mode, raw[512..512 + size].to_vec())
}

#[tokio::test]
async fn a_write_makes_the_parent_and_sends_one_gzip_tar_entry() {
    let server = MockServer::start().await;
    let sb = connected(&server).await;
    mount_ok(&server, "/fs/mkdir").await;
    Mock::given(method("POST"))
        .and(path(session_path("/fs/write")))
        .and(header("content-type", "application/gzip"))
        .and(header("x-cwd", "/"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({})))
        .expect(2)
        .mount(&server)
        .await;
    let data: Vec<u8> = (0..=255u8).cycle().take(200_000).collect();
    let t = sb
        .write_file("out/data.bin", data.clone().into())
        .await
        .unwrap();
    assert_eq!((t.bytes, t.emulated), (200_000, false));
    let t = sb
        .upload("/tmp/x/../up.txt", upload_body(&b"streamed"[..]))
        .await
        .unwrap();
    assert_eq!(t.bytes, 8);
    assert_eq!(
        bodies(&server, "POST", &session_path("/fs/mkdir")).await,
        [
            json!({"path": "/vercel/sandbox/out", "recursive": true}),
            json!({"path": "/tmp", "recursive": true})
        ]
    );
    let writes: Vec<Vec<u8>> = server
        .received_requests()
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.url.path().ends_with("/fs/write"))
        .map(|r| r.body)
        .collect();
    assert_eq!(
        unpack(&writes[0]),
        ("vercel/sandbox/out/data.bin".to_owned(), 0o644, data)
    );
    assert_eq!(
        unpack(&writes[1]),
        ("tmp/up.txt".to_owned(), 0o644, b"streamed".to_vec())
    );
}

#[tokio::test]
async fn reads_stream_the_bytes_and_a_missing_file_is_not_found() {
    let server = MockServer::start().await;
    let sb = connected(&server).await;
    Mock::given(method("POST"))
        .and(path(session_path("/fs/read")))
        .respond_with(|r: &wiremock::Request| {
            let body: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
            match body["path"].as_str() {
                Some("/vercel/sandbox/a.bin") => ResponseTemplate::new(200)
                    .set_body_raw(vec![0u8, 1, 2, 255], "application/octet-stream"),
                Some("/vercel/sandbox/json") => {
                    ResponseTemplate::new(200).set_body_json(json!({"error": "odd"}))
                }
                _ => ResponseTemplate::new(404)
                    .set_body_json(error_json("not_found", "File not found")),
            }
        })
        .mount(&server)
        .await;
    assert_eq!(&sb.read_file("a.bin").await.unwrap()[..], [0, 1, 2, 255]);
    let err = sb.read_file("missing").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert_eq!(err.status(), Some(404));
    assert_eq!(
        sb.read_file("json").await.unwrap_err().kind(),
        ErrorKind::Provider
    );
}

/// stat runs the core's script as a command (the API has none, §7.4); its exit 44 is
/// `NotFound`.
#[tokio::test]
async fn stat_runs_over_a_command() {
    let server = MockServer::start().await;
    let sb = connected(&server).await;
    Mock::given(method("POST"))
        .and(path(session_path("/cmd")))
        .respond_with(|r: &wiremock::Request| {
            let body: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
            let lines = if body["args"][3] == "a.txt" {
                vec![
                    json!({"command": command_json("s1", None)}),
                    json!({"stream": "stdout", "data": "81a4 12 1700000000\n"}),
                    json!({"command": command_json("s1", Some(0))}),
                ]
            } else {
                vec![
                    json!({"command": command_json("s2", None)}),
                    json!({"stream": "stderr", "data": "no such file or directory\n"}),
                    json!({"command": command_json("s2", Some(44))}),
                ]
            };
            ResponseTemplate::new(200).set_body_raw(ndjson(&lines), "application/x-ndjson")
        })
        .mount(&server)
        .await;
    let info = sb.stat("a.txt").await.unwrap();
    assert_eq!(
        (info.kind, info.size, info.name.as_str()),
        (FileKind::File, 12, "a.txt")
    );
    assert_eq!(
        sb.stat("nope").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    let sent = &bodies(&server, "POST", &session_path("/cmd")).await[0];
    assert_eq!(sent["command"], "sh");
    assert_eq!(sent["args"][2], "sh");
    assert_eq!(sent["wait"], true);
}

#[tokio::test]
async fn mkdir_is_native_and_recursive() {
    let server = MockServer::start().await;
    let sb = connected(&server).await;
    mount_ok(&server, "/fs/mkdir").await;
    sb.mkdir("a/b").await.unwrap();
    assert_eq!(
        bodies(&server, "POST", &session_path("/fs/mkdir")).await,
        [json!({"path": "/vercel/sandbox/a/b", "recursive": true})]
    );
}
