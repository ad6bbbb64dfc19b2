//! Files against a loopback envd: `/files` uploads (multipart, raw octets, several files) and
//! downloads, missing files in both dialects, and the `filesystem.Filesystem` calls (list, mkdir,
//! move, remove, watch).

use bytes::Bytes;
use futures::TryStreamExt;
use sandbox_sdk_core::prelude::*;
use sandbox_sdk_core::{ErrorKind, FileEventKind, FileKind, ListOptions};
use wiremock::matchers::{body_json, body_string_contains, header, method, path, query_param};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

mod support;
use support::*;

#[tokio::test]
async fn write_file_is_multipart_with_the_full_path_as_filename() {
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    Mock::given(method("POST"))
        .and(path("/files"))
        .and(query_param("path", "/home/user/a.txt"))
        .and(header("x-access-token", TOKEN))
        .and(body_string_contains(
            r#"Content-Disposition: form-data; name="file"; filename="/home/user/a.txt""#,
        ))
        .and(body_string_contains("hello"))
        .and(|r: &Request| {
            r.headers
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with("multipart/form-data; boundary="))
        })
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_string(r#"[{"name":"a.txt","path":"/home/user/a.txt","type":"file"}]"#),
        )
        .expect(1)
        .mount(&server)
        .await;
    let t = sandbox
        .write_file("/home/user/a.txt", Bytes::from_static(b"hello"))
        .await
        .unwrap();
    assert_eq!(t.bytes, 5);
    assert!(!t.emulated);
}

#[tokio::test]
async fn upload_streams_raw_octets_and_download_streams_back() {
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    let data: Vec<u8> = (0..=255u8).cycle().take(100_000).collect();
    let expected = data.clone();
    Mock::given(method("POST"))
        .and(path("/files"))
        .and(query_param("path", "big.bin"))
        .and(header("content-type", "application/octet-stream"))
        .and(move |r: &Request| r.body == expected)
        .respond_with(
            ResponseTemplate::new(200).set_body_string(
                r#"[{"name":"big.bin","path":"/home/user/big.bin","type":"file"}]"#,
            ),
        )
        .expect(1)
        .mount(&server)
        .await;
    let reader: sandbox_sdk_core::UploadBody = Box::pin(std::io::Cursor::new(data.clone()));
    let t = sandbox.upload("big.bin", reader).await.unwrap();
    assert_eq!(t.bytes, 100_000);
    Mock::given(method("GET"))
        .and(path("/files"))
        .and(query_param("path", "big.bin"))
        .respond_with(
            ResponseTemplate::new(200).set_body_raw(data.clone(), "application/octet-stream"),
        )
        .expect(1)
        .mount(&server)
        .await;
    let got = sandbox.read_file("big.bin").await.unwrap();
    assert_eq!(&got[..], &data[..]);
}

#[tokio::test]
async fn upload_to_an_old_envd_streams_one_multipart_part() {
    let server = MockServer::start().await;
    let mut body = created_body(SB);
    body["envdVersion"] = "0.5.6".into();
    connect_call()
        .respond_with(ResponseTemplate::new(200).set_body_json(body))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/files"))
        .and(query_param("path", "/home/user/s.txt"))
        .and(body_string_contains(
            r#"name="file"; filename="/home/user/s.txt""#,
        ))
        .and(body_string_contains("streamed text"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_string(r#"[{"name":"s.txt","path":"/home/user/s.txt","type":"file"}]"#),
        )
        .expect(1)
        .mount(&server)
        .await;
    let sandbox = provider(&server).connect(SB).await.unwrap();
    let reader: sandbox_sdk_core::UploadBody =
        Box::pin(std::io::Cursor::new(b"streamed text".to_vec()));
    let t = sandbox.upload("/home/user/s.txt", reader).await.unwrap();
    assert_eq!(t.bytes, 13);
}

#[tokio::test]
async fn write_files_sends_one_part_per_file_and_sigterm_by_tag() {
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    Mock::given(method("POST"))
        .and(path("/files"))
        .and(|r: &Request| r.url.query().is_none())
        .and(body_string_contains(r#"filename="/tmp/a.txt""#))
        .and(body_string_contains(r#"filename="/tmp/b.txt""#))
        .respond_with(ResponseTemplate::new(200).set_body_string(
            r#"[{"name":"a.txt","path":"/tmp/a.txt","type":"file"},{"name":"b.txt","path":"/tmp/b.txt","type":"file"}]"#,
        ))
        .expect(1)
        .mount(&server)
        .await;
    let t = sandbox
        .write_files(vec![
            ("/tmp/a.txt".into(), Bytes::from_static(b"aa")),
            ("/tmp/b.txt".into(), Bytes::from_static(b"bbb")),
        ])
        .await
        .unwrap();
    assert_eq!(t.bytes, 5);
    Mock::given(method("POST"))
        .and(path("/process.Process/SendSignal"))
        .and(body_json(
            serde_json::json!({"process":{"tag":"web"},"signal":"SIGNAL_SIGTERM"}),
        ))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({})))
        .expect(1)
        .mount(&server)
        .await;
    sandbox.signal_process("web", true).await.unwrap();
}

#[tokio::test]
async fn missing_files_are_not_found_in_both_dialects() {
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    Mock::given(method("GET"))
        .and(path("/files"))
        .respond_with(ResponseTemplate::new(404).set_body_raw(
            "{\"code\":404,\"message\":\"path '/home/user/missing' does not exist\"}\n",
            "application/json; charset=utf-8",
        ))
        .expect(1)
        .mount(&server)
        .await;
    stat_call("/home/user/missing")
        .respond_with(stat_missing("/home/user/missing"))
        .expect(2)
        .mount(&server)
        .await;
    assert_eq!(
        sandbox.read_file("missing").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(
        sandbox.stat("/home/user/missing").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert!(!sandbox.exists("/home/user/missing").await.unwrap());
}

#[tokio::test]
async fn list_dir_mkdir_move_remove() {
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    Mock::given(method("POST"))
        .and(path("/filesystem.Filesystem/ListDir"))
        .and(body_json(serde_json::json!({"path":"/home/user","depth":2})))
        .respond_with(ResponseTemplate::new(200).set_body_raw(
            r#"{"entries":[{"name":"a.txt","type":"FILE_TYPE_FILE","path":"/home/user/a.txt","size":"5","mode":420,"permissions":"-rw-r--r--","owner":"user","group":"user","modifiedTime":"2026-01-01T00:00:00.123456789Z"},{"name":"d","type":"FILE_TYPE_DIRECTORY","path":"/home/user/d","size":"4096","mode":2147484141}]}"#,
            "application/json",
        ))
        .expect(1)
        .mount(&server)
        .await;
    let entries = sandbox
        .list_files("/home/user", ListOptions { depth: 2 })
        .await
        .unwrap();
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[0].kind, FileKind::File);
    assert_eq!(entries[0].size, 5);
    assert_eq!(entries[0].mode, Some(0o644));
    assert_eq!(entries[1].kind, FileKind::Dir);
    Mock::given(method("POST"))
        .and(path("/filesystem.Filesystem/MakeDir"))
        .respond_with(ResponseTemplate::new(409).set_body_raw(
            r#"{"code":"already_exists","message":"directory already exists"}"#,
            "application/json",
        ))
        .expect(1)
        .mount(&server)
        .await;
    sandbox.mkdir("/home/user/d").await.unwrap();
    Mock::given(method("POST"))
        .and(path("/filesystem.Filesystem/Move"))
        .and(body_json(
            serde_json::json!({"source":"a","destination":"b"}),
        ))
        .respond_with(ResponseTemplate::new(200).set_body_json(
            serde_json::json!({"entry":{"name":"b","type":"FILE_TYPE_FILE","path":"/home/user/b"}}),
        ))
        .expect(1)
        .mount(&server)
        .await;
    sandbox.rename("a", "b").await.unwrap();
    Mock::given(method("POST"))
        .and(path("/filesystem.Filesystem/Stat"))
        .and(body_json(serde_json::json!({"path":"b"})))
        .respond_with(ResponseTemplate::new(200).set_body_json(
            serde_json::json!({"entry":{"name":"b","type":"FILE_TYPE_FILE","path":"/home/user/b"}}),
        ))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/filesystem.Filesystem/Remove"))
        .and(body_json(serde_json::json!({"path":"b"})))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({})))
        .expect(1)
        .mount(&server)
        .await;
    sandbox.remove("b").await.unwrap();
}

#[tokio::test]
async fn removing_a_missing_path_is_not_found() {
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    stat_call("/home/user/nope")
        .respond_with(stat_missing("/home/user/nope"))
        .expect(1)
        .mount(&server)
        .await;
    // envd's Remove is os.RemoveAll: it answers {} for a path that does not exist.
    Mock::given(method("POST"))
        .and(path("/filesystem.Filesystem/Remove"))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({})))
        .expect(0)
        .mount(&server)
        .await;
    let e = sandbox.remove("/home/user/nope").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    assert_eq!(e.operation(), Some("remove"));
}

#[tokio::test]
async fn watch_streams_events_after_start() {
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    Mock::given(method("POST"))
        .and(path("/filesystem.Filesystem/WatchDir"))
        .and(|r: &Request| {
            request_envelope_json(r) == serde_json::json!({"path":"/home/user","recursive":true})
        })
        .respond_with(events(&[
            r#"{"start":{}}"#,
            r#"{"filesystem":{"name":"a.txt","type":"EVENT_TYPE_CREATE"}}"#,
            r#"{"keepalive":{}}"#,
            r#"{"filesystem":{"name":"a.txt","type":"EVENT_TYPE_WRITE"}}"#,
        ]))
        .expect(1)
        .mount(&server)
        .await;
    let events: Vec<_> = sandbox
        .watch("/home/user", true)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0].path, "/home/user/a.txt");
    assert_eq!(events[0].kind, FileEventKind::Create);
    assert_eq!(events[1].kind, FileEventKind::Write);
}
