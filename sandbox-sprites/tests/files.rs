//! Files (PROTOCOL.md §7, §18.12): the `fs/*` calls and their parameters.

mod common;

use common::*;
use sandbox_sdk_core::prelude::*;
use sandbox_sdk_core::{ErrorKind, FileKind, ListOptions};
use serde_json::json;
use wiremock::matchers::{body_bytes, body_json, method, path, query_param};
use wiremock::{Mock, MockServer, ResponseTemplate};

async fn sandbox(server: &MockServer) -> Box<dyn Sandbox> {
    mount_get(
        server,
        NAME,
        ResponseTemplate::new(200).set_body_json(sprite_json(NAME, "warm", &[])),
    )
    .await;
    provider(server).connect(NAME).await.unwrap()
}

fn fs(call: &str) -> String {
    format!("/v1/sprites/{NAME}/fs/{call}")
}

#[tokio::test]
async fn a_write_makes_parents_and_a_read_streams_back() {
    let server = MockServer::start().await;
    let sb = sandbox(&server).await;
    Mock::given(method("PUT"))
        .and(path(fs("write")))
        .and(query_param("path", "/home/sprite/data/a.bin"))
        .and(query_param("workingDir", "/home/sprite"))
        .and(query_param("mode", "0644"))
        .and(query_param("mkdirParents", "true"))
        .and(body_bytes(vec![0u8, 1, 2, 255]))
        .respond_with(ResponseTemplate::new(200))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(fs("read")))
        .and(query_param("path", "/tmp/x"))
        .respond_with(ResponseTemplate::new(200).set_body_bytes(vec![9u8, 8]))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(fs("read")))
        .and(query_param("path", "/tmp/missing"))
        .respond_with(ResponseTemplate::new(404).set_body_json(
            json!({"error": "no such file", "code": "ENOENT", "path": "/tmp/missing"}),
        ))
        .mount(&server)
        .await;
    let written = sb
        .write_file("data/a.bin", vec![0u8, 1, 2, 255].into())
        .await
        .unwrap();
    assert_eq!(written.bytes, 4);
    assert_eq!(&sb.read_file("/tmp/x").await.unwrap()[..], &[9, 8]);
    let err = sb.read_file("/tmp/missing").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert!(err.message().contains("ENOENT"));
}

#[tokio::test]
async fn list_stat_rename_and_remove() {
    let server = MockServer::start().await;
    let sb = sandbox(&server).await;
    Mock::given(method("GET"))
        .and(path(fs("list")))
        .and(query_param("path", "/home/sprite/w"))
        .respond_with(ResponseTemplate::new(200).set_body_json(
            json!({"path": "/home/sprite/w", "entries": [
                {"name": "a.txt", "path": "/home/sprite/w/a.txt", "type": "file", "size": 1,
                 "mode": "0644", "modTime": "2026-12-01T04:00:00Z", "isDir": false},
                {"name": "sub", "path": "/home/sprite/w/sub", "type": "dir", "size": 4096,
                 "mode": "0755", "modTime": "2026-12-01T04:00:00Z", "isDir": true}
            ]}),
        ))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(fs("rename")))
        .and(body_json(json!({"source": "/home/sprite/w/a.txt", "dest": "/home/sprite/w/b.txt", "workingDir": "/home/sprite"})))
        .respond_with(ResponseTemplate::new(200))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("DELETE"))
        .and(path(fs("delete")))
        .and(query_param("path", "/home/sprite/w/sub"))
        .and(query_param("recursive", "true"))
        .respond_with(ResponseTemplate::new(200))
        .expect(1)
        .mount(&server)
        .await;
    let entries = sb.list_files("w", ListOptions::default()).await.unwrap();
    let shape: Vec<_> = entries
        .iter()
        .map(|e| (e.name.as_str(), e.kind, e.size))
        .collect();
    assert_eq!(
        shape,
        [("a.txt", FileKind::File, 1), ("sub", FileKind::Dir, 4096)]
    );
    assert_eq!(entries[1].mode, Some(0o755));
    let sub = sb.stat("w/sub").await.unwrap();
    assert_eq!(sub.kind, FileKind::Dir);
    let err = sb.stat("w/nope").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    sb.rename("w/a.txt", "w/b.txt").await.unwrap();
    sb.remove("w/sub").await.unwrap();
}
