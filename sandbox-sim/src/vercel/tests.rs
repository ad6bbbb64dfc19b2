//! The Vercel simulator driven with plain HTTP, as PROTOCOL.md describes the wire.

use super::state::http_date;
use super::{PROJECT, TEAM, VercelSim, VercelSimBuilder};
use crate::{FaultPlan, Simulator};
use serde_json::{Value, json};
use std::io::Write;
use std::time::{Duration, SystemTime};

struct Client {
    http: reqwest::Client,
    base: String,
    token: String,
}

/// An answer: status, headers, body as JSON (or the text as a JSON string).
struct Answer {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: Value,
    raw: bytes::Bytes,
}

impl Client {
    fn new(sim: &VercelSim) -> Client {
        Client {
            http: reqwest::Client::new(),
            base: sim.url().to_owned(),
            token: sim.token().to_owned(),
        }
    }

    /// `path` with `teamId` added to its query.
    fn url(&self, path: &str) -> String {
        let sep = if path.contains('?') { '&' } else { '?' };
        format!("{}{path}{sep}teamId={TEAM}", self.base)
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Answer {
        let response = request.send().await.expect("request");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let raw = response.bytes().await.expect("body");
        let body = serde_json::from_slice(&raw)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&raw).into_owned()));
        Answer {
            status,
            headers,
            body,
            raw,
        }
    }

    async fn get(&self, path: &str) -> Answer {
        self.send(self.http.get(self.url(path)).bearer_auth(&self.token))
            .await
    }

    async fn post(&self, path: &str, body: Value) -> Answer {
        self.send(
            self.http
                .post(self.url(path))
                .bearer_auth(&self.token)
                .json(&body),
        )
        .await
    }

    async fn delete(&self, path: &str) -> Answer {
        self.send(self.http.delete(self.url(path)).bearer_auth(&self.token))
            .await
    }

    /// Creates a sandbox (`POST /v3/sandboxes`) with `extra` fields; its name and session id.
    async fn create(&self, extra: Value) -> (String, String) {
        let mut body = json!({ "projectId": PROJECT });
        for (k, v) in extra.as_object().cloned().unwrap_or_default() {
            body[k] = v;
        }
        let answer = self.post("/v3/sandboxes", body).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        (
            answer.body["sandbox"]["name"].as_str().unwrap().to_owned(),
            answer.body["session"]["id"].as_str().unwrap().to_owned(),
        )
    }

    /// Runs `sh -c script` waited with logs: (stdout, stderr, exit code, the NDJSON lines).
    async fn sh(&self, session: &str, script: &str) -> (String, String, i64, Vec<Value>) {
        let answer = self
            .post(
                &format!("/v2/sandboxes/sessions/{session}/cmd"),
                json!({ "command": "sh", "args": ["-c", script], "wait": true, "logs": true }),
            )
            .await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        assert_eq!(answer.headers["content-type"], "application/x-ndjson");
        let lines = ndjson(&answer.raw);
        let (mut out, mut err) = (String::new(), String::new());
        for line in &lines {
            match line["stream"].as_str() {
                Some("stdout") => out.push_str(line["data"].as_str().unwrap()),
                Some("stderr") => err.push_str(line["data"].as_str().unwrap()),
                _ => {}
            }
        }
        let exit = lines.last().unwrap()["command"]["exitCode"]
            .as_i64()
            .expect("a final command line with an exit code");
        (out, err, exit, lines)
    }
}

fn ndjson(raw: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(raw)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect()
}

/// A gzip tar of `files` (name, bytes, mode), as the SDKs send to `fs/write`.
fn gzip_tar(files: &[(&str, &[u8], u32)]) -> Vec<u8> {
    let mut tar = Vec::new();
    for (name, data, mode) in files {
        let mut header = [0u8; 512];
        header[..name.len()].copy_from_slice(name.as_bytes());
        header[100..107].copy_from_slice(format!("{mode:07o}").as_bytes());
        header[124..135].copy_from_slice(format!("{:011o}", data.len()).as_bytes());
        header[156] = b'0';
        header[257..262].copy_from_slice(b"ustar");
        tar.extend_from_slice(&header);
        tar.extend_from_slice(data);
        tar.resize(tar.len().div_ceil(512) * 512, 0);
    }
    tar.resize(tar.len() + 1024, 0);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&tar).unwrap();
    gz.finish().unwrap()
}

#[test]
fn http_dates_are_rfc_1123() {
    let t = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777);
    assert_eq!(http_date(t), "Sun, 06 Nov 1994 08:49:37 GMT");
    let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_764_561_600);
    assert_eq!(http_date(t), "Mon, 01 Dec 2025 04:00:00 GMT");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_team_project_and_routes_answer_with_vercels_envelope() {
    let sim = VercelSim::start().await.unwrap();
    let c = Client::new(&sim);
    let env = sim.env();
    let names: Vec<&str> = env.iter().map(|(k, _)| *k).collect();
    assert_eq!(
        names,
        [
            "VERCEL_TOKEN",
            "VERCEL_TEAM_ID",
            "VERCEL_PROJECT_ID",
            "VERCEL_API_URL"
        ]
    );
    let list = format!("/v2/sandboxes?project={PROJECT}");
    let wrong = c
        .send(c.http.get(c.url(&list)).bearer_auth("vcp_wrong"))
        .await;
    assert_eq!(wrong.status, 401);
    assert_eq!(wrong.body["error"]["code"], "unauthorized");
    assert!(wrong.headers.contains_key("date"));
    let other_team = c
        .send(
            c.http
                .get(format!("{}{list}&teamId=team_other", sim.url()))
                .bearer_auth(sim.token()),
        )
        .await;
    assert_eq!(other_team.status, 403);
    assert_eq!(other_team.body["error"]["code"], "forbidden");
    let other_project = c.get("/v2/sandboxes?project=prj_other").await;
    assert_eq!(other_project.status, 404);
    let missing = c
        .get(&format!("/v2/sandboxes/nope?projectId={PROJECT}"))
        .await;
    assert_eq!(missing.status, 404);
    assert_eq!(missing.body["error"]["code"], "not_found");
    assert_eq!(c.get("/v9/elsewhere").await.status, 404);
    assert_eq!(
        c.get("/v2/sandboxes/sessions/sbx_nope").await.body["error"]["code"],
        "not_found"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_names_duplicates_and_versions() {
    let sim = VercelSim::start().await.unwrap();
    let c = Client::new(&sim);
    let v2 = c
        .post(
            "/v2/sandboxes",
            json!({ "projectId": PROJECT, "name": "alpha", "runtime": "python3.13",
                    "ports": [3000, 8080], "tags": { "k": "v" }, "timeout": 60_000 }),
        )
        .await;
    assert_eq!(v2.status, 200, "{}", v2.body);
    let b = &v2.body;
    assert_eq!(b["sandbox"]["name"], "alpha");
    assert_eq!(b["sandbox"]["status"], "running");
    assert_eq!(b["sandbox"]["persistent"], true);
    assert_eq!(b["sandbox"]["runtime"], "python3.13");
    assert_eq!(b["session"]["status"], "running");
    assert_eq!(b["session"]["timeout"], 60_000);
    assert_eq!(b["session"]["cwd"], "/vercel/sandbox");
    assert!(b["session"]["id"].as_str().unwrap().starts_with("sbx_"));
    let routes = b["routes"].as_array().unwrap();
    assert_eq!(
        routes.iter().map(|r| r["port"].clone()).collect::<Vec<_>>(),
        [json!(3000), json!(8080)]
    );
    assert!(routes[0]["url"].as_str().unwrap().ends_with(".vercel.run"));
    let dup = c
        .post(
            "/v3/sandboxes",
            json!({ "projectId": PROJECT, "name": "alpha" }),
        )
        .await;
    assert_eq!(dup.status, 400);
    assert_eq!(
        dup.body["error"]["message"],
        "A sandbox with the name 'alpha' already exists for this project. Use GET /sandboxes/:name to resume it or delete it first."
    );
    let (generated, _) = c.create(json!({})).await;
    assert!(generated.starts_with("sandbox-"), "{generated}");
    for (path, body) in [
        (
            "/v3/sandboxes",
            json!({ "projectId": PROJECT, "runtime": "node24" }),
        ),
        (
            "/v3/sandboxes",
            json!({ "projectId": PROJECT, "name": "bad name" }),
        ),
        ("/v3/sandboxes", json!({ "name": "no-project" })),
        (
            "/v2/sandboxes",
            json!({ "projectId": PROJECT, "runtime": "ruby" }),
        ),
        (
            "/v3/sandboxes",
            json!({ "projectId": PROJECT, "ports": [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16] }),
        ),
        (
            "/v3/sandboxes",
            json!({ "projectId": PROJECT, "resources": { "vcpus": 3 } }),
        ),
    ] {
        let answer = c.post(path, body.clone()).await;
        assert_eq!(answer.status, 400, "{body}: {}", answer.body);
        assert_eq!(answer.body["error"]["code"], "bad_request");
    }
    assert_eq!(sim.sandboxes(), 2);
    let deleted = c
        .delete(&format!("/v2/sandboxes/alpha?projectId={PROJECT}"))
        .await;
    assert_eq!(deleted.status, 200);
    assert_eq!(deleted.body["sandbox"]["status"], "stopped");
    assert_eq!(
        c.get(&format!("/v2/sandboxes/alpha?projectId={PROJECT}"))
            .await
            .status,
        404
    );
    assert_eq!(sim.sandboxes(), 1);
    // The name is free again.
    c.create(json!({ "name": "alpha" })).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_page_with_cursors_and_filter() {
    let sim = VercelSim::start().await.unwrap();
    let c = Client::new(&sim);
    for name in ["b-one", "a-two", "b-three"] {
        c.create(json!({ "name": name, "tags": { "group": if name.starts_with('b') { "b" } else { "a" } } }))
            .await;
    }
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let query = match &cursor {
            Some(c) => format!("/v2/sandboxes?project={PROJECT}&limit=2&cursor={c}"),
            None => format!("/v2/sandboxes?project={PROJECT}&limit=2"),
        };
        let page = c.get(&query).await;
        assert_eq!(page.status, 200, "{}", page.body);
        for s in page.body["sandboxes"].as_array().unwrap() {
            seen.push(s["name"].as_str().unwrap().to_owned());
        }
        match page.body["pagination"]["next"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    // Newest first by default.
    assert_eq!(seen, ["b-three", "a-two", "b-one"]);
    let names = |v: &Value| -> Vec<String> {
        v["sandboxes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let by_name = c
        .get(&format!(
            "/v2/sandboxes?project={PROJECT}&sortBy=name&sortOrder=asc&namePrefix=b-"
        ))
        .await;
    assert_eq!(names(&by_name.body), ["b-one", "b-three"]);
    let tagged = c
        .get(&format!("/v2/sandboxes?project={PROJECT}&tags=group:a"))
        .await;
    assert_eq!(names(&tagged.body), ["a-two"]);
    let running = c
        .get(&format!("/v2/sandboxes?project={PROJECT}&status=running"))
        .await;
    assert_eq!(names(&running.body).len(), 3);
    for bad in [
        "limit=51",
        "limit=0",
        "namePrefix=b",
        "sortBy=name&status=running",
        "sortOrder=up",
        "cursor=nonsense!",
    ] {
        let answer = c
            .get(&format!("/v2/sandboxes?project={PROJECT}&{bad}"))
            .await;
        assert_eq!(answer.status, 400, "{bad}: {}", answer.body);
    }
    // The server's page cap answers fewer than asked, with a cursor.
    sim.server().set_page_cap(Some(1));
    let capped = c
        .get(&format!("/v2/sandboxes?project={PROJECT}&limit=50"))
        .await;
    assert_eq!(names(&capped.body).len(), 1);
    assert!(capped.body["pagination"]["next"].is_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_stream_ndjson_keep_streams_apart_and_replay_logs() {
    let sim = VercelSim::start().await.unwrap();
    let c = Client::new(&sim);
    let (_, session) = c.create(json!({ "env": { "FROM_SANDBOX": "yes" } })).await;
    let (out, err, exit, lines) = c
        .sh(
            &session,
            "printf out; printf err >&2; echo $FROM_SANDBOX; exit 3",
        )
        .await;
    assert_eq!((out.as_str(), err.as_str(), exit), ("outyes\n", "err", 3));
    assert!(lines[0]["command"]["exitCode"].is_null());
    assert_eq!(lines[0]["command"]["name"], "sh");
    assert!(lines.last().unwrap()["command"]["durationMs"].is_u64());
    // Without logs: the two command lines only.
    let quiet = c
        .post(
            &format!("/v2/sandboxes/sessions/{session}/cmd"),
            json!({ "command": "echo", "args": ["hi"], "wait": true }),
        )
        .await;
    assert_eq!(ndjson(&quiet.raw).len(), 2);
    // Detached, then logs (replayed from the start) and a waited get.
    let started = c
        .post(
            &format!("/v2/sandboxes/sessions/{session}/cmd"),
            json!({ "command": "sh", "args": ["-c", "echo one; sleep 0.2; echo two >&2"],
                    "env": { "X": "1" }, "cwd": "sub/../" }),
        )
        .await;
    assert_eq!(started.status, 200, "{}", started.body);
    let id = started.body["command"]["id"].as_str().unwrap().to_owned();
    assert_eq!(started.body["command"]["cwd"], "/vercel/sandbox");
    let logs = c
        .get(&format!("/v2/sandboxes/sessions/{session}/cmd/{id}/logs"))
        .await;
    assert_eq!(logs.headers["content-type"], "application/x-ndjson");
    let lines = ndjson(&logs.raw);
    assert_eq!(
        lines,
        [
            json!({ "stream": "stdout", "data": "one\n" }),
            json!({ "stream": "stderr", "data": "two\n" })
        ]
    );
    let again = c
        .get(&format!("/v2/sandboxes/sessions/{session}/cmd/{id}/logs"))
        .await;
    assert_eq!(
        ndjson(&again.raw),
        lines,
        "a second read replays everything"
    );
    let done = c
        .get(&format!(
            "/v2/sandboxes/sessions/{session}/cmd/{id}?wait=true"
        ))
        .await;
    assert_eq!(done.body["command"]["exitCode"], 0);
    let listed = c
        .get(&format!("/v2/sandboxes/sessions/{session}/cmd"))
        .await;
    assert_eq!(listed.body["commands"].as_array().unwrap().len(), 3);
    // A missing program, a missing cwd, a missing command.
    let missing = c
        .post(
            &format!("/v2/sandboxes/sessions/{session}/cmd"),
            json!({ "command": "no-such-program-xyz", "wait": true, "logs": true }),
        )
        .await;
    assert_eq!(
        ndjson(&missing.raw).last().unwrap()["command"]["exitCode"],
        127
    );
    let bad_cwd = c
        .post(
            &format!("/v2/sandboxes/sessions/{session}/cmd"),
            json!({ "command": "true", "cwd": "/no/such/dir" }),
        )
        .await;
    assert_eq!(bad_cwd.status, 400);
    assert_eq!(
        c.get(&format!("/v2/sandboxes/sessions/{session}/cmd/cmd_nope"))
            .await
            .status,
        404
    );
}

/// A detached command with `attachStdin`, its id.
async fn start_with_stdin(c: &Client, session: &str, script: &str, attach: bool) -> String {
    let started = c
        .post(
            &format!("/v2/sandboxes/sessions/{session}/cmd"),
            json!({ "command": "sh", "args": ["-c", script], "attachStdin": attach }),
        )
        .await;
    assert_eq!(started.status, 200, "{}", started.body);
    started.body["command"]["id"].as_str().unwrap().to_owned()
}

fn b64(data: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(data)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdin_takes_ordered_chunks_by_offset_delivers_at_once_and_closes() {
    let sim = VercelSim::start().await.unwrap();
    let c = Client::new(&sim);
    let (_, session) = c.create(json!({})).await;
    // `head -n 1` answers the first line before stdin closes: input arrives as it is sent.
    let id = start_with_stdin(&c, &session, "head -n 1; cat", true).await;
    let stdin = format!("/v2/sandboxes/sessions/{session}/cmd/{id}/stdin");
    let logs = format!("/v2/sandboxes/sessions/{session}/cmd/{id}/logs");
    // An empty request reads the count.
    let read = c.post(&stdin, json!({})).await;
    assert_eq!(read.status, 200, "{}", read.body);
    assert_eq!(read.body["bytesWritten"], 0);
    assert_eq!(read.body["command"]["id"], id.as_str());
    let first = c
        .post(&stdin, json!({ "data": b64(b"one\n"), "offset": 0 }))
        .await;
    assert_eq!(first.body["bytesWritten"], 4, "{}", first.body);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let mut stream = c
            .http
            .get(c.url(&logs))
            .bearer_auth(&c.token)
            .send()
            .await
            .unwrap();
        let chunk = tokio::time::timeout(Duration::from_millis(500), stream.chunk()).await;
        if let Ok(Ok(Some(chunk))) = chunk {
            assert_eq!(
                ndjson(&chunk)[0],
                json!({ "stream": "stdout", "data": "one\n" })
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the first line never came out"
        );
    }
    // A resend of the same chunk writes nothing; an overlapping one only its new bytes.
    let resent = c
        .post(&stdin, json!({ "data": b64(b"one\n"), "offset": 0 }))
        .await;
    assert_eq!(resent.body["bytesWritten"], 4);
    let overlap = c
        .post(&stdin, json!({ "data": b64(b"\ntwo\n"), "offset": 3 }))
        .await;
    assert_eq!(overlap.body["bytesWritten"], 8);
    // Past what was written: refused, with the count.
    let gap = c
        .post(&stdin, json!({ "data": b64(b"x"), "offset": 20 }))
        .await;
    assert_eq!(gap.status, 400);
    assert_eq!(gap.body["error"]["code"], "bad_request");
    assert_eq!(gap.body["error"]["bytesWritten"], 8);
    let bad = c.post(&stdin, json!({ "data": "not base64!" })).await;
    assert_eq!(bad.status, 400);
    // Close: the process reads end of file and exits; a resent close is answered again.
    let closed = c.post(&stdin, json!({ "offset": 8, "close": true })).await;
    assert_eq!(closed.status, 200, "{}", closed.body);
    assert_eq!(closed.body["bytesWritten"], 8);
    let again = c.post(&stdin, json!({ "offset": 8, "close": true })).await;
    assert_eq!(again.status, 200, "{}", again.body);
    let more = c
        .post(&stdin, json!({ "data": b64(b"late"), "offset": 8 }))
        .await;
    assert_eq!(more.status, 400);
    assert_eq!(more.body["error"]["code"], "command_stdin_unavailable");
    let done = c
        .get(&format!(
            "/v2/sandboxes/sessions/{session}/cmd/{id}?wait=true"
        ))
        .await;
    assert_eq!(done.body["command"]["exitCode"], 0);
    let out: String = ndjson(&c.get(&logs).await.raw)
        .iter()
        .filter_map(|l| l["data"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(out, "one\ntwo\n");
    // Exited: unavailable.
    let exited = c.post(&stdin, json!({ "offset": 8 })).await;
    assert_eq!(exited.body["error"]["code"], "command_stdin_unavailable");
    // Without attachStdin: unavailable; the process sees an empty stdin.
    let plain = start_with_stdin(&c, &session, "cat; echo end", false).await;
    let refused = c
        .post(
            &format!("/v2/sandboxes/sessions/{session}/cmd/{plain}/stdin"),
            json!({ "data": b64(b"x"), "offset": 0 }),
        )
        .await;
    assert_eq!(refused.status, 400);
    assert_eq!(refused.body["error"]["code"], "command_stdin_unavailable");
    // An unknown command is 404; a body over the cap 413; a wrong token 401 before anything.
    let unknown = c
        .post(
            &format!("/v2/sandboxes/sessions/{session}/cmd/cmd_nope/stdin"),
            json!({}),
        )
        .await;
    assert_eq!(unknown.status, 404);
    let big = c
        .post(
            &stdin,
            json!({ "data": "A".repeat(1_100_000), "offset": 8 }),
        )
        .await;
    assert_eq!(big.status, 413);
    assert_eq!(big.body["error"]["code"], "payload_too_large");
    let anonymous = c.send(c.http.post(c.url(&stdin)).json(&json!({}))).await;
    assert_eq!(anonymous.status, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_sends_the_signal_and_a_timeout_kills_with_137() {
    let sim = VercelSim::start().await.unwrap();
    let c = Client::new(&sim);
    let (_, session) = c.create(json!({})).await;
    for (signal, exit) in [(json!(null), 143), (json!(9), 137), (json!(2), 130)] {
        let started = c
            .post(
                &format!("/v2/sandboxes/sessions/{session}/cmd"),
                json!({ "command": "sleep", "args": ["30"] }),
            )
            .await;
        let id = started.body["command"]["id"].as_str().unwrap().to_owned();
        let body = if signal.is_null() {
            json!({})
        } else {
            json!({ "signal": signal })
        };
        let killed = c
            .post(
                &format!("/v2/sandboxes/sessions/{session}/cmd/{id}/kill"),
                body,
            )
            .await;
        assert_eq!(killed.status, 200, "{}", killed.body);
        let done = c
            .get(&format!(
                "/v2/sandboxes/sessions/{session}/cmd/{id}?wait=true"
            ))
            .await;
        assert_eq!(done.body["command"]["exitCode"], exit, "signal {signal}");
    }
    let timed = c
        .post(
            &format!("/v2/sandboxes/sessions/{session}/cmd"),
            json!({ "command": "sleep", "args": ["30"], "timeout": 200, "wait": true }),
        )
        .await;
    assert_eq!(
        ndjson(&timed.raw).last().unwrap()["command"]["exitCode"],
        137
    );
    let bad = c
        .post(
            &format!("/v2/sandboxes/sessions/{session}/cmd"),
            json!({ "command": "true", "timeout": 50 }),
        )
        .await;
    assert_eq!(bad.status, 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_are_written_as_gzip_tar_read_streamed_and_confined() {
    let sim = VercelSim::start().await.unwrap();
    let c = Client::new(&sim);
    let (name, session) = c.create(json!({})).await;
    let binary: Vec<u8> = (0..=255).collect();
    let body = gzip_tar(&[
        ("vercel/sandbox/dir/a.txt", b"hello", 0o644),
        ("vercel/sandbox/run.sh", b"#!/bin/sh\necho ran\n", 0o755),
        ("etc/passwd", b"not the host's", 0o644),
        ("tmp/data.bin", &binary, 0o600),
    ]);
    let written = c
        .send(
            c.http
                .post(c.url(&format!("/v2/sandboxes/sessions/{session}/fs/write")))
                .bearer_auth(sim.token())
                .header("content-type", "application/gzip")
                .header("x-cwd", "/")
                .body(body),
        )
        .await;
    assert_eq!(written.status, 200, "{}", written.body);
    assert_eq!(written.body, json!({}));
    let read_path = format!("/v2/sandboxes/sessions/{session}/fs/read");
    let read = |path: &str| c.post(&read_path, json!({ "path": path }));
    let a = read("dir/a.txt").await;
    assert_eq!(a.status, 200);
    assert_eq!(a.headers["content-type"], "application/octet-stream");
    assert!(a.headers.contains_key("content-disposition"));
    assert_eq!(&a.raw[..], b"hello");
    assert_eq!(&read("/tmp/data.bin").await.raw[..], &binary[..]);
    assert_eq!(&read("/etc/passwd").await.raw[..], b"not the host's");
    assert_ne!(
        std::fs::read("/etc/passwd").unwrap_or_default(),
        b"not the host's"
    );
    let missing = read("nope.txt").await;
    assert_eq!(missing.status, 404);
    assert_eq!(missing.body["error"]["code"], "file_not_found");
    assert_eq!(read("dir").await.status, 400);
    let dir = sim.sandbox_dir(&name).unwrap();
    assert_eq!(std::fs::read(dir.join("dir/a.txt")).unwrap(), b"hello");
    let (out, _, exit, _) = c.sh(&session, "./run.sh").await;
    assert_eq!((out.as_str(), exit), ("ran\n", 0), "the tar's mode is kept");
    let made = c
        .post(
            &format!("/v2/sandboxes/sessions/{session}/fs/mkdir"),
            json!({ "path": "x/y/z" }),
        )
        .await;
    assert_eq!(made.status, 200);
    assert!(dir.join("x/y/z").is_dir());
    let again = c
        .post(
            &format!("/v2/sandboxes/sessions/{session}/fs/mkdir"),
            json!({ "path": "/vercel/sandbox/x/y/z" }),
        )
        .await;
    assert_eq!(again.status, 200, "an existing directory is fine");
    let not_tar = c
        .send(
            c.http
                .post(c.url(&format!("/v2/sandboxes/sessions/{session}/fs/write")))
                .bearer_auth(sim.token())
                .body("plain text"),
        )
        .await;
    assert_eq!(not_tar.status, 400);
}

#[tokio::test(start_paused = true)]
async fn stop_takes_time_then_calls_answer_410_and_resume_starts_a_new_session() {
    let sim = VercelSim::builder()
        .stop_time(Duration::from_secs(2))
        .start()
        .await
        .unwrap();
    let c = Client::new(&sim);
    let (name, session) = c.create(json!({})).await;
    c.sh(&session, "echo kept > file").await;
    let stopped = c
        .post(&format!("/v2/sandboxes/sessions/{session}/stop"), json!({}))
        .await;
    assert_eq!(stopped.body["session"]["status"], "stopping");
    let during = c
        .post(
            &format!("/v2/sandboxes/sessions/{session}/cmd"),
            json!({ "command": "true" }),
        )
        .await;
    assert_eq!(during.status, 422);
    assert_eq!(during.body["error"]["code"], "sandbox_stopping");
    let sandbox = c
        .get(&format!("/v2/sandboxes/{name}?projectId={PROJECT}"))
        .await;
    assert_eq!(sandbox.body["sandbox"]["status"], "stopping");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(sim.session_status(&session), Some("stopped"));
    let after = c
        .post(
            &format!("/v2/sandboxes/sessions/{session}/cmd"),
            json!({ "command": "true" }),
        )
        .await;
    assert_eq!(after.status, 410);
    assert_eq!(after.body["error"]["code"], "sandbox_stopped");
    let got = c
        .get(&format!("/v2/sandboxes/{name}?projectId={PROJECT}"))
        .await;
    assert_eq!(got.body["sandbox"]["status"], "stopped");
    assert!(got.body["sandbox"]["currentSnapshotId"].is_string());
    let resumed = c
        .get(&format!(
            "/v2/sandboxes/{name}?projectId={PROJECT}&resume=true"
        ))
        .await;
    assert_eq!(resumed.body["resumed"], true);
    let new_session = resumed.body["session"]["id"].as_str().unwrap().to_owned();
    assert_ne!(new_session, session);
    assert_eq!(resumed.body["sandbox"]["currentSessionId"], new_session);
    let (out, _, _, _) = c.sh(&new_session, "cat file").await;
    assert_eq!(out, "kept\n", "a persistent sandbox keeps its disk");
    let again = c
        .get(&format!(
            "/v2/sandboxes/{name}?projectId={PROJECT}&resume=true"
        ))
        .await;
    assert_eq!(again.body["resumed"], false);
    let log = sim.server().log();
    assert_eq!(log.count("resume"), 2);
    assert_eq!(log.count("stop"), 1);
}

#[tokio::test(start_paused = true)]
async fn a_session_past_its_timeout_stops_and_extend_timeout_adds() {
    let sim = VercelSim::start().await.unwrap();
    let c = Client::new(&sim);
    let (_, session) = c.create(json!({ "timeout": 10_000 })).await;
    let extended = c
        .post(
            &format!("/v2/sandboxes/sessions/{session}/extend-timeout"),
            json!({ "duration": 5_000 }),
        )
        .await;
    assert_eq!(extended.body["session"]["timeout"], 15_000);
    let too_long = c
        .post(
            &format!("/v2/sandboxes/sessions/{session}/extend-timeout"),
            json!({ "duration": 48 * 3600 * 1000 }),
        )
        .await;
    assert_eq!(too_long.status, 400);
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert_eq!(sim.session_status(&session), Some("running"));
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(matches!(
        sim.session_status(&session),
        Some("stopping" | "stopped")
    ));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(sim.session_status(&session), Some("stopped"));
    let late = c
        .post(
            &format!("/v2/sandboxes/sessions/{session}/extend-timeout"),
            json!({ "duration": 5_000 }),
        )
        .await;
    assert_eq!(late.status, 410);
}

#[tokio::test(start_paused = true)]
async fn creates_over_the_vcpu_rate_answer_429_with_retry_after() {
    let sim = VercelSim::builder().vcpu_rate(4).start().await.unwrap();
    let c = Client::new(&sim);
    c.create(json!({})).await;
    c.create(json!({})).await;
    let over = c
        .post("/v3/sandboxes", json!({ "projectId": PROJECT }))
        .await;
    assert_eq!(over.status, 429);
    assert_eq!(over.body["error"]["code"], "rate_limited");
    assert_eq!(over.body["error"]["limit"]["total"], 4);
    assert_eq!(over.headers["retry-after"], "30");
    tokio::time::sleep(Duration::from_secs(30)).await;
    c.create(json!({})).await;
    sim.set_rate_limits(false);
    c.create(json!({})).await;
    c.create(json!({})).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_copy_the_disk_forks_start_from_them_and_a_deleted_one_is_410() {
    let sim = VercelSim::start().await.unwrap();
    let c = Client::new(&sim);
    let (name, session) = c
        .create(json!({ "env": { "E": "from-source" }, "tags": { "t": "1" } }))
        .await;
    c.sh(&session, "echo snap > f").await;
    let snap = c
        .post(
            &format!("/v2/sandboxes/sessions/{session}/snapshot"),
            json!({}),
        )
        .await;
    assert_eq!(snap.status, 200, "{}", snap.body);
    assert_eq!(snap.body["snapshot"]["creationMethod"], "manual");
    assert_eq!(snap.body["session"]["status"], "snapshotting");
    let id = snap.body["snapshot"]["id"].as_str().unwrap().to_owned();
    let fork = c
        .post(
            &format!("/v2/sandboxes/{name}/fork?projectId={PROJECT}"),
            json!({ "name": "child" }),
        )
        .await;
    assert_eq!(fork.status, 200, "{}", fork.body);
    assert_eq!(fork.body["sandbox"]["tags"], json!({ "t": "1" }));
    assert_eq!(fork.body["session"]["sourceSnapshotId"], id);
    let child_session = fork.body["session"]["id"].as_str().unwrap().to_owned();
    let (out, _, _, _) = c.sh(&child_session, "cat f; echo $E").await;
    assert_eq!(out, "snap\nfrom-source\n");
    let listed = c
        .get(&format!(
            "/v2/sandboxes/snapshots?project={PROJECT}&name={name}"
        ))
        .await;
    assert_eq!(listed.body["snapshots"].as_array().unwrap().len(), 1);
    assert_eq!(
        c.delete(&format!("/v2/sandboxes/snapshots/{id}"))
            .await
            .status,
        200
    );
    assert_eq!(
        c.get(&format!("/v2/sandboxes/snapshots/{id}")).await.status,
        404
    );
    // Wait for the snapshot's stop, then resuming has nothing to start from.
    for _ in 0..100 {
        if sim.session_status(&session) == Some("stopped") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let resumed = c
        .get(&format!(
            "/v2/sandboxes/{name}?projectId={PROJECT}&resume=true"
        ))
        .await;
    assert_eq!(resumed.status, 410, "{}", resumed.body);
    assert_eq!(resumed.body["error"]["code"], "snapshot_not_found");
    assert_eq!(
        resumed.body["error"]["message"],
        "Cannot resume sandbox: no snapshot available."
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_logs_stream_is_resumed_by_reading_logs_again_and_the_edge_cut_resets() {
    let sim = VercelSim::builder()
        .faults(FaultPlan::parse("exec.output=cut:20#1").unwrap())
        .edge_cut(Some(Duration::from_millis(300)))
        .start()
        .await
        .unwrap();
    let c = Client::new(&sim);
    let (_, session) = c.create(json!({})).await;
    let started = c
        .post(
            &format!("/v2/sandboxes/sessions/{session}/cmd"),
            json!({ "command": "sh", "args": ["-c", "echo first; echo second"] }),
        )
        .await;
    let id = started.body["command"]["id"].as_str().unwrap().to_owned();
    let logs = format!("/v2/sandboxes/sessions/{session}/cmd/{id}/logs");
    let cut = c
        .http
        .get(c.url(&logs))
        .bearer_auth(sim.token())
        .send()
        .await;
    let cut = match cut {
        Ok(r) => r.bytes().await.is_err(),
        Err(_) => true,
    };
    assert!(cut, "the first read is cut");
    let again = c.get(&logs).await;
    let text: String = ndjson(&again.raw)
        .iter()
        .map(|l| {
            format!(
                "{}:{}",
                l["stream"].as_str().unwrap(),
                l["data"].as_str().unwrap()
            )
        })
        .collect();
    // Output comes in the chunks the process wrote, not necessarily per line.
    assert_eq!(text.replace("stdout:", ""), "first\nsecond\n");
    // A command that outlives the edge's cut: its waited stream is reset.
    let long = c
        .http
        .post(c.url(&format!("/v2/sandboxes/sessions/{session}/cmd")))
        .bearer_auth(sim.token())
        .json(&json!({ "command": "sleep", "args": ["5"], "wait": true }))
        .send()
        .await
        .unwrap();
    assert!(long.bytes().await.is_err(), "the edge cuts the stream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_registry_starts_it_by_name_and_faults_use_the_shared_names() {
    let sim = crate::start("vercel", 0, FaultPlan::parse("create=503#1").unwrap())
        .await
        .unwrap();
    assert_eq!(sim.provider(), "vercel");
    let http = reqwest::Client::new();
    let create = || {
        http.post(format!("{}/v3/sandboxes?teamId={TEAM}", sim.url()))
            .bearer_auth(sim.api_key())
            .json(&json!({ "projectId": PROJECT }))
            .send()
    };
    let first = create().await.unwrap();
    assert_eq!(first.status(), 503);
    let body: Value = first.json().await.unwrap();
    assert_eq!(body["error"]["code"], "service_unavailable");
    assert_eq!(create().await.unwrap().status(), 200);
    assert_eq!(sim.server().log().count("create"), 2);
    assert_eq!(sim.sandboxes(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_pending_session_holds_commands_until_it_runs() {
    let sim = VercelSimBuilder::default()
        .start_time(Duration::from_secs(5))
        .start()
        .await
        .unwrap();
    let c = Client::new(&sim);
    let created = c
        .post("/v3/sandboxes", json!({ "projectId": PROJECT }))
        .await;
    assert_eq!(created.body["session"]["status"], "pending");
    let session = created.body["session"]["id"].as_str().unwrap().to_owned();
    let (out, _, _, _) = c.sh(&session, "echo up").await;
    assert_eq!(out, "up\n");
    assert_eq!(sim.session_status(&session), Some("running"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_network_policy_and_the_session_list() {
    let sim = VercelSim::start().await.unwrap();
    let c = Client::new(&sim);
    let (name, session) = c
        .create(json!({ "name": "patched", "tags": { "a": "1" } }))
        .await;
    let patched = c
        .send(
            c.http
                .patch(c.url(&format!("/v2/sandboxes/{name}?projectId={PROJECT}")))
                .bearer_auth(sim.token())
                .json(&json!({ "tags": { "b": "2" }, "timeout": 600_000, "persistent": false })),
        )
        .await;
    assert_eq!(patched.status, 200, "{}", patched.body);
    assert_eq!(patched.body["sandbox"]["tags"], json!({ "b": "2" }));
    assert_eq!(patched.body["sandbox"]["timeout"], 600_000);
    assert_eq!(patched.body["sandbox"]["persistent"], false);
    assert!(patched.body["routes"].is_array());
    let policy = c
        .post(
            &format!("/v2/sandboxes/sessions/{session}/network-policy"),
            json!({ "allow": ["*.npmjs.org"], "subnets": { "deny": ["10.0.0.0/8"] } }),
        )
        .await;
    assert_eq!(policy.status, 200, "{}", policy.body);
    assert_eq!(
        policy.body["session"]["networkPolicy"],
        json!({ "mode": "custom", "allowedDomains": ["*.npmjs.org"], "allowedCIDRs": [],
                "deniedCIDRs": ["10.0.0.0/8"] })
    );
    let sessions = c
        .get(&format!(
            "/v2/sandboxes/sessions?project={PROJECT}&name={name}"
        ))
        .await;
    assert_eq!(sessions.status, 200);
    assert_eq!(sessions.body["sessions"][0]["id"], session);
    assert_eq!(sessions.body["pagination"]["next"], Value::Null);
    // Not persistent: the next session starts from an empty disk.
    c.sh(&session, "echo gone > f").await;
    c.post(&format!("/v2/sandboxes/sessions/{session}/stop"), json!({}))
        .await;
    for _ in 0..100 {
        if sim.session_status(&session) == Some("stopped") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let resumed = c
        .get(&format!(
            "/v2/sandboxes/{name}?projectId={PROJECT}&resume=true"
        ))
        .await;
    let next = resumed.body["session"]["id"].as_str().unwrap().to_owned();
    let (_, _, exit, _) = c.sh(&next, "test -e f").await;
    assert_eq!(exit, 1, "the disk was not kept");
}

impl Client {
    /// `fs/write` of a gzip tar body under `x-cwd: /`.
    async fn write_tar(&self, session: &str, body: Vec<u8>) -> Answer {
        self.send(
            self.http
                .post(self.url(&format!("/v2/sandboxes/sessions/{session}/fs/write")))
                .bearer_auth(&self.token)
                .header("content-type", "application/gzip")
                .header("x-cwd", "/")
                .body(body),
        )
        .await
    }
}

/// The bytes of every file under `dir`.
fn tree_size(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => tree_size(&e.path()),
            _ => e.metadata().map(|m| m.len()).unwrap_or(0),
        })
        .sum()
}

/// Links planted in the working directory (a command's, to a host directory, absolute or
/// relative) resolve inside the sandbox: nothing outside it is read or written through them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_in_the_disk_resolve_inside_the_sandbox() {
    let sim = VercelSim::start().await.unwrap();
    let c = Client::new(&sim);
    let (name, session) = c.create(json!({})).await;
    let work = sim.sandbox_dir(&name).unwrap();
    let host = tempfile::tempdir().unwrap();
    std::fs::write(host.path().join("secret"), b"host").unwrap();
    let outside = host.path().to_string_lossy().into_owned();
    std::os::unix::fs::symlink(host.path(), work.join("abs")).unwrap();
    let up = "../".repeat(work.components().count()) + &outside[1..];
    std::os::unix::fs::symlink(&up, work.join("rel")).unwrap();
    let read_path = format!("/v2/sandboxes/sessions/{session}/fs/read");
    for link in ["abs", "rel"] {
        let read = c
            .post(&read_path, json!({ "path": format!("{link}/secret") }))
            .await;
        assert_eq!(read.status, 404, "{link}/secret was read from the host");
        let entry = format!("vercel/sandbox/{link}/x");
        let written = c
            .write_tar(&session, gzip_tar(&[(&entry, b"in", 0o644)]))
            .await;
        assert_eq!(written.status, 200, "{}", written.body);
        let read = c
            .post(&read_path, json!({ "path": format!("{link}/x") }))
            .await;
        assert_eq!(&read.raw[..], b"in");
        let made = c
            .post(
                &format!("/v2/sandboxes/sessions/{session}/fs/mkdir"),
                json!({ "path": format!("{link}/d") }),
            )
            .await;
        assert_eq!(made.status, 200);
    }
    let names: Vec<_> = std::fs::read_dir(host.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(names, ["secret"]);
}

/// A tar entry of kind `kind` (`b'2'` a symbolic link, `b'1'` a hard link) at `name` naming
/// `target`.
fn link_entry(name: &str, target: &str, kind: u8) -> Vec<u8> {
    let mut header = [0u8; 512];
    header[..name.len()].copy_from_slice(name.as_bytes());
    header[100..107].copy_from_slice(b"0000777");
    header[124..135].copy_from_slice(b"00000000000");
    header[156] = kind;
    header[157..157 + target.len()].copy_from_slice(target.as_bytes());
    header[257..262].copy_from_slice(b"ustar");
    header.to_vec()
}

/// A regular-file tar entry (its header and data blocks).
fn file_entry(name: &str, data: &[u8], size: usize) -> Vec<u8> {
    let mut header = [0u8; 512];
    header[..name.len()].copy_from_slice(name.as_bytes());
    header[100..107].copy_from_slice(b"0000644");
    header[124..135].copy_from_slice(format!("{size:011o}").as_bytes());
    header[156] = b'0';
    header[257..262].copy_from_slice(b"ustar");
    let mut block = header.to_vec();
    block.extend_from_slice(data);
    block.resize(block.len().div_ceil(512) * 512, 0);
    block
}

/// `entries` (raw tar blocks) gzipped, with the end-of-archive blocks.
fn gzip_blocks(entries: &[Vec<u8>]) -> Vec<u8> {
    let mut tar: Vec<u8> = entries.concat();
    tar.resize(tar.len() + 1024, 0);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&tar).unwrap();
    gz.finish().unwrap()
}

/// A link entry that leaves the disk (an absolute target, or `..` out of the tree it is in) is
/// refused with nothing of the archive written, so no host file is reached without a command
/// run; a link that stays inside is kept, and a hard link names a file of the sandbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tar_links_that_leave_the_disk_are_refused_and_nothing_is_written() {
    let sim = VercelSim::start().await.unwrap();
    let c = Client::new(&sim);
    let (name, session) = c.create(json!({})).await;
    let work = sim.sandbox_dir(&name).unwrap();
    let host = tempfile::tempdir().unwrap();
    std::fs::write(host.path().join("secret"), b"host").unwrap();
    let outside = host.path().to_string_lossy().into_owned();
    let up = "../".repeat(work.components().count() + 2) + &outside[1..];
    for (link, target, kind) in [
        ("vercel/sandbox/abs", outside.as_str(), b'2'),
        ("vercel/sandbox/rel", up.as_str(), b'2'),
        ("vercel/sandbox/climb", "../../etc", b'2'),
        ("tmp/abs", "/etc/passwd", b'2'),
        (
            "vercel/sandbox/hard",
            &format!("{outside}/secret")[1..],
            b'1',
        ),
    ] {
        let archive = gzip_blocks(&[
            file_entry("vercel/sandbox/before.txt", b"first", 5),
            link_entry(link, target, kind),
            file_entry(&format!("{link}/after"), b"through", 7),
        ]);
        let refused = c.write_tar(&session, archive).await;
        assert_eq!(refused.status, 400, "{link} -> {target}: {}", refused.body);
        assert!(
            !work.join("before.txt").exists(),
            "{link}: half the archive was written"
        );
        assert!(std::fs::symlink_metadata(work.join("abs")).is_err());
    }
    let names: Vec<_> = std::fs::read_dir(host.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(names, ["secret"]);
    assert_eq!(std::fs::read(host.path().join("secret")).unwrap(), b"host");
    // Links inside the tree they are in are kept; a hard link names a file of the sandbox.
    let kept = c
        .write_tar(
            &session,
            gzip_blocks(&[
                file_entry("vercel/sandbox/d/a.txt", b"inside", 6),
                link_entry("vercel/sandbox/d/b.txt", "a.txt", b'2'),
                link_entry("vercel/sandbox/c.txt", "d/a.txt", b'2'),
                link_entry("vercel/sandbox/h.txt", "vercel/sandbox/d/a.txt", b'1'),
            ]),
        )
        .await;
    assert_eq!(kept.status, 200, "{}", kept.body);
    let read_path = format!("/v2/sandboxes/sessions/{session}/fs/read");
    for path in ["d/b.txt", "c.txt", "h.txt"] {
        let read = c.post(&read_path, json!({ "path": path })).await;
        assert_eq!(&read.raw[..], b"inside", "{path}");
    }
    assert_eq!(
        std::fs::read_link(work.join("c.txt")).unwrap(),
        std::path::Path::new("d/a.txt")
    );
}

/// A gzip of `prefix` then `zeros` zero bytes, made in a moment whatever `zeros` is: one
/// deflated MiB of zeros repeated (its back-references reach only zeros), no valid trailer
/// (a decoder that stops at its cap never reads it).
fn gzip_bomb(prefix: &[u8], zeros_mib: usize) -> Vec<u8> {
    use flate2::{Compress, Compression, FlushCompress};
    let mut deflate = Compress::new(Compression::best(), false);
    let mut out = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
    let mut step = |input: &[u8]| {
        let mut chunk = Vec::with_capacity(input.len() + 1024);
        deflate
            .compress_vec(input, &mut chunk, FlushCompress::Sync)
            .unwrap();
        chunk
    };
    out.extend(step(prefix));
    let zeros = vec![0u8; 1 << 20];
    out.extend(step(&zeros));
    let repeated = step(&zeros);
    for _ in 1..zeros_mib {
        out.extend_from_slice(&repeated);
    }
    out
}

/// An upload that inflates past the cap (254 KiB of gzip holding a 256 MiB file) is refused
/// with Vercel's 413 as soon as the decoder passes the cap, and nothing of it is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_that_inflates_past_the_cap_is_refused_and_nothing_is_written() {
    let sim = VercelSim::start().await.unwrap();
    let c = Client::new(&sim);
    let (name, session) = c.create(json!({})).await;
    let work = sim.sandbox_dir(&name).unwrap();
    // A small file, then the header of a 256 MiB one whose data is the zeros.
    let mut prefix = file_entry("vercel/sandbox/small.txt", b"first", 5);
    prefix.extend(file_entry("vercel/sandbox/big.bin", b"", 256 << 20));
    let bomb = gzip_bomb(&prefix, 256);
    assert!(bomb.len() < 1 << 20, "{} bytes of gzip", bomb.len());
    let refused = c.write_tar(&session, bomb).await;
    assert_eq!(refused.status, 413, "{}", refused.body);
    assert_eq!(refused.body["error"]["code"], "payload_too_large");
    assert!(
        !work.join("small.txt").exists(),
        "half the archive was written"
    );
    assert_eq!(tree_size(work.parent().unwrap()), 0, "the disk stays empty");
}
