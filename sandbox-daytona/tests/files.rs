//! Files through the toolbox against wiremock on loopback: uploads as the daemon expects them,
//! streamed downloads, list, stat, mkdir, move, remove.

mod common;

use common::*;
use sandbox_sdk_core::{ErrorKind, ListOptions, Sandbox, SandboxExt};
use serde_json::json;
use wiremock::matchers::{method, path, query_param};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

/// The raw body contains these bytes (multipart bodies with binary parts are not UTF-8).
struct BodyContains(&'static [u8]);

impl wiremock::Match for BodyContains {
    fn matches(&self, request: &Request) -> bool {
        request.body.windows(self.0.len()).any(|w| w == self.0)
    }
}

#[tokio::test]
async fn files_upload_as_the_daemon_expects_and_stream_back() {
    let server = MockServer::start().await;
    mount_sandbox(&server, "started").await;
    Mock::given(method("POST"))
        .and(path("/toolbox/sb1/files/bulk-upload"))
        .and(BodyContains(
            b"name=\"files[0].path\"\r\n\r\nconformance/bin/data.bin\r\n",
        ))
        .and(BodyContains(
            b"name=\"files[0].file\"; filename=\"data.bin\"",
        ))
        .respond_with(ok(
            json!({"files": [{"path": "conformance/bin/data.bin", "bytes": 256}]}),
        ))
        .expect(2)
        .mount(&server)
        .await;
    let data: Vec<u8> = (0..=255u8).collect();
    Mock::given(method("GET"))
        .and(path("/toolbox/sb1/files/download"))
        .and(query_param("path", "conformance/bin/data.bin"))
        .respond_with(
            ResponseTemplate::new(200).set_body_raw(data.clone(), "application/octet-stream"),
        )
        .mount(&server)
        .await;
    let sandbox = provider(&server).get("sb1").await.unwrap();
    let t = sandbox
        .write_file("conformance/bin/data.bin", data.clone().into())
        .await
        .unwrap();
    assert_eq!(t.bytes, 256);
    let reader: sandbox_sdk_core::UploadBody = Box::pin(std::io::Cursor::new(data.clone()));
    let t = sandbox
        .upload("conformance/bin/data.bin", reader)
        .await
        .unwrap();
    assert_eq!(t.bytes, 256);
    assert_eq!(
        sandbox
            .read_file("conformance/bin/data.bin")
            .await
            .unwrap()
            .to_vec(),
        data
    );
    // The path part comes before the file part.
    let req = server
        .received_requests()
        .await
        .unwrap()
        .into_iter()
        .find(|r| r.url.path().ends_with("bulk-upload"))
        .unwrap();
    let body = String::from_utf8_lossy(&req.body);
    assert!(body.find("files[0].path").unwrap() < body.find("files[0].file").unwrap());
}

#[tokio::test]
async fn files_list_stat_mkdir_move_remove_and_extras() {
    let server = MockServer::start().await;
    mount_sandbox(&server, "started").await;
    Mock::given(method("GET")).and(path("/toolbox/sb1/files")).and(query_param("path", "dir"))
        .respond_with(ok(json!([
            {"name": "a.txt", "isDir": false, "size": 1, "mode": "-rw-r--r--", "permissions": "0644", "owner": "daytona", "group": "daytona", "modTime": "x", "modifiedAt": "2026-08-20T10:00:00Z"},
            {"name": "sub", "isDir": true, "size": 4096, "mode": "drwxr-xr-x", "permissions": "0755", "owner": "daytona", "group": "daytona", "modTime": "x", "modifiedAt": "2026-08-20T10:00:00Z"}
        ]))).mount(&server).await;
    Mock::given(method("GET"))
        .and(path("/toolbox/sb1/files/info"))
        .and(query_param("path", "missing"))
        .respond_with(ResponseTemplate::new(404).set_body_json(
            json!({"statusCode": 404, "message": "file not found", "code": "FILE_NOT_FOUND"}),
        ))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/toolbox/sb1/files/folder"))
        .and(query_param("path", "dir/sub"))
        .and(query_param("mode", "755"))
        .respond_with(ResponseTemplate::new(201))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/toolbox/sb1/files/move"))
        .and(query_param("source", "a"))
        .and(query_param("destination", "b"))
        .respond_with(ResponseTemplate::new(200))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("DELETE"))
        .and(path("/toolbox/sb1/files"))
        .and(query_param("path", "b"))
        .and(query_param("recursive", "true"))
        .respond_with(ResponseTemplate::new(204))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/toolbox/sb1/files/permissions"))
        .and(query_param("path", "b"))
        .and(query_param("mode", "700"))
        .respond_with(ResponseTemplate::new(200))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/toolbox/sb1/files/find"))
        .and(query_param("pattern", "TODO"))
        .respond_with(ok(
            json!([{"file": "dir/a.txt", "line": 3, "content": "TODO: x"}]),
        ))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/toolbox/sb1/files/search"))
        .and(query_param("pattern", "*.txt"))
        .respond_with(ok(json!({"files": ["dir/a.txt"]})))
        .mount(&server)
        .await;
    let sandbox = provider(&server).get("sb1").await.unwrap();
    let entries = sandbox
        .list_files("dir", ListOptions::default())
        .await
        .unwrap();
    assert_eq!(entries.len(), 2);
    assert_eq!(
        (
            entries[0].name.as_str(),
            entries[0].path.as_str(),
            entries[0].size,
            entries[0].mode
        ),
        ("a.txt", "dir/a.txt", 1, Some(0o644))
    );
    assert_eq!(entries[1].kind, sandbox_sdk_core::FileKind::Dir);
    assert!(entries[0].modified.is_some());
    assert_eq!(
        sandbox.stat("missing").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert!(!sandbox.exists("missing").await.unwrap());
    sandbox.mkdir("dir/sub").await.unwrap();
    sandbox.rename("a", "b").await.unwrap();
    sandbox
        .set_permissions("b", None, None, Some("700"))
        .await
        .unwrap();
    assert!(
        sandbox
            .set_permissions("b", None, None, Some("9x"))
            .await
            .is_err()
    );
    sandbox.remove("b").await.unwrap();
    let found = sandbox.find("dir", "TODO").await.unwrap();
    assert_eq!(found[0].line, 3);
    assert_eq!(sandbox.search("dir", "*.txt").await.unwrap(), ["dir/a.txt"]);
}
