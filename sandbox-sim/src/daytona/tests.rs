//! The Daytona simulator driven with plain `reqwest` (and a WebSocket client) as PROTOCOL.md
//! describes the wire.

use super::*;
use crate::{Fault, FaultRule};
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use std::time::Instant;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

struct Client {
    http: reqwest::Client,
    url: String,
    key: String,
}

impl Client {
    fn of(sim: &DaytonaSim) -> Client {
        Client {
            http: reqwest::Client::new(),
            url: sim.url().to_owned(),
            key: sim.api_key().to_owned(),
        }
    }

    fn req(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.url))
            .bearer_auth(&self.key)
            .header("X-Daytona-SDK-Version", "0.218.0")
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut req = self.req(method, path);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let answer = req.send().await.unwrap();
        let status = answer.status().as_u16();
        let text = answer.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        self.call(reqwest::Method::GET, path, None).await
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    /// Creates a sandbox and waits until it is started.
    async fn started(&self, body: Value) -> String {
        let (status, sb) = self.post("/api/sandbox", body).await;
        assert_eq!(status, 200, "{sb}");
        let id = sb["id"].as_str().unwrap().to_owned();
        self.wait_for(&id, "started").await;
        id
    }

    async fn wait_for(&self, id: &str, state: &str) {
        for _ in 0..200 {
            let (_, sb) = self.get(&format!("/api/sandbox/{id}")).await;
            if sb["state"] == state {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("{id} never reached {state}");
    }
}

async fn sim() -> DaytonaSim {
    DaytonaSim::builder()
        .transition(Duration::from_millis(30))
        .follow_linger(Duration::from_millis(100))
        .start()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_answers_creating_after_the_transition_and_the_sandbox_then_is_started() {
    let sim = DaytonaSim::builder()
        .transition(Duration::from_millis(200))
        .start()
        .await
        .unwrap();
    let c = Client::of(&sim);
    let started = Instant::now();
    let (status, sb) = c
        .post(
            "/api/sandbox",
            json!({"name": "one", "labels": {"team": "x"}, "env": {"A": "1"}, "cpu": 2, "memory": 4}),
        )
        .await;
    assert_eq!(status, 200);
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "the API waits for the start"
    );
    assert_eq!(sb["state"], "creating");
    assert_eq!(sb["desiredState"], "started");
    assert_eq!(
        (sb["cpu"].clone(), sb["memory"].clone()),
        (json!(2), json!(4))
    );
    assert_eq!(sb["labels"], json!({"team": "x"}));
    assert_eq!(sb["toolboxProxyUrl"], format!("{}/toolbox", sim.url()));
    let (_, got) = c.get("/api/sandbox/one").await;
    assert_eq!(
        (got["state"].clone(), got["env"].clone()),
        (json!("started"), json!({"A": "1"}))
    );
    let (status, body) = c.post("/api/sandbox", json!({"name": "one"})).await;
    assert_eq!((status, body["error"].clone()), (409, json!("Conflict")));
    let (status, body) = c
        .post("/api/sandbox", json!({"snapshot": "s", "cpu": 2}))
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        body["message"],
        "Cannot specify Sandbox resources when using a snapshot"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_and_not_found_answer_the_api_error_bodies() {
    let sim = sim().await;
    let c = Client::of(&sim);
    let answer = reqwest::get(format!("{}/api/sandbox", sim.url()))
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 401);
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["statusCode"], 401);
    assert_eq!(body["path"], "/api/sandbox");
    let (status, body) = c.get("/api/sandbox/nope?verbose=true").await;
    assert_eq!(status, 404);
    assert_eq!(body["message"], "Sandbox with ID or name nope not found");
    assert_eq!(body["path"], "/api/sandbox/nope?verbose=true");
    assert_eq!(body["error"], "Not Found");
    let id = c.started(json!({})).await;
    let answer = reqwest::Client::new()
        .post(format!("{}/toolbox/{id}/process/execute", sim.url()))
        .bearer_auth("dtn_wrong")
        .json(&json!({"command": "true"}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 401);
    let body: Value = answer.json().await.unwrap();
    assert_eq!(
        body["message"],
        "authentication failed: Bearer token is invalid"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_moves_through_its_states_and_refuses_calls_mid_transition() {
    let sim = sim().await;
    let c = Client::of(&sim);
    let id = c.started(json!({})).await;
    let (status, sb) = c.post(&format!("/api/sandbox/{id}/stop"), json!({})).await;
    assert_eq!((status, sb["state"].clone()), (200, json!("stopping")));
    let (status, body) = c.post(&format!("/api/sandbox/{id}/start"), json!({})).await;
    assert_eq!(
        (status, body["message"].clone()),
        (409, json!("Sandbox state change in progress"))
    );
    c.wait_for(&id, "stopped").await;
    let answer = c
        .req(
            reqwest::Method::POST,
            &format!("/toolbox/{id}/process/execute"),
        )
        .json(&json!({"command": "true"}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        answer.status().as_u16(),
        502,
        "a stopped sandbox's daemon is unreachable"
    );
    let (status, body) = c.post(&format!("/api/sandbox/{id}/pause"), json!({})).await;
    assert_eq!(status, 400, "{body}");
    let (status, sb) = c
        .post(&format!("/api/sandbox/{id}/archive"), json!({}))
        .await;
    assert_eq!((status, sb["state"].clone()), (200, json!("archiving")));
    c.wait_for(&id, "archived").await;
    let (_, sb) = c.post(&format!("/api/sandbox/{id}/start"), json!({})).await;
    assert_eq!(sb["state"], "restoring");
    c.wait_for(&id, "started").await;
    let (_, sb) = c.post(&format!("/api/sandbox/{id}/pause"), json!({})).await;
    assert_eq!(sb["state"], "pausing");
    c.wait_for(&id, "paused").await;
    c.post(&format!("/api/sandbox/{id}/start"), json!({})).await;
    c.wait_for(&id, "started").await;
    let (status, sb) = c
        .call(reqwest::Method::DELETE, &format!("/api/sandbox/{id}"), None)
        .await;
    assert_eq!((status, sb["state"].clone()), (200, json!("destroying")));
    assert!(sb["name"].as_str().unwrap().starts_with("DESTROYED_"));
    for _ in 0..100 {
        if c.get(&format!("/api/sandbox/{id}")).await.0 == 404 {
            assert_eq!(sim.sandboxes(), 0);
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the sandbox was never gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_filters_by_labels_and_states_and_pages_with_a_cursor() {
    let sim = sim().await;
    let c = Client::of(&sim);
    for i in 0..5 {
        let team = if i % 2 == 0 { "even" } else { "odd" };
        c.post(
            "/api/sandbox",
            json!({"name": format!("sb{i}"), "labels": {"team": team}}),
        )
        .await;
    }
    let mut names = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut path = "/api/sandbox?limit=2".to_owned();
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={c}"));
        }
        let (_, page) = c.get(&path).await;
        assert!(page["items"].as_array().unwrap().len() <= 2);
        names.extend(
            page["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["name"].clone()),
        );
        assert!(
            page["items"][0].get("env").is_none(),
            "list items carry no env"
        );
        match page["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(names, ["sb0", "sb1", "sb2", "sb3", "sb4"]);
    // Capped, a page holds fewer than asked, with a cursor to the rest.
    sim.server().set_page_cap(Some(1));
    let (_, page) = c.get("/api/sandbox?limit=2").await;
    assert_eq!(page["items"].as_array().unwrap().len(), 1);
    assert!(page["nextCursor"].is_string());
    sim.server().set_page_cap(None);
    let (_, page) = c
        .get("/api/sandbox?labels=%7B%22team%22%3A%22odd%22%7D&states=started&states=creating")
        .await;
    let odd: Vec<_> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].clone())
        .collect();
    assert_eq!(odd, ["sb1", "sb3"]);
    let (status, _) = c.get("/api/sandbox?limit=500").await;
    assert_eq!(status, 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn labels_intervals_previews_and_ssh_tokens() {
    let sim = sim().await;
    let c = Client::of(&sim);
    let id = c.started(json!({})).await;
    let (status, body) = c
        .call(
            reqwest::Method::PUT,
            &format!("/api/sandbox/{id}/labels"),
            Some(json!({"labels": {"a": "b"}})),
        )
        .await;
    assert_eq!((status, body), (200, json!({"labels": {"a": "b"}})));
    let (_, sb) = c
        .post(&format!("/api/sandbox/{id}/autostop/42"), json!({}))
        .await;
    assert_eq!(sb["autoStopInterval"], 42);
    let (_, sb) = c
        .post(&format!("/api/sandbox/{id}/ttl/10"), json!({}))
        .await;
    assert!(sb["autoDestroyAt"].is_string());
    let (_, preview) = c
        .get(&format!("/api/sandbox/{id}/ports/3000/preview-url"))
        .await;
    let token = preview["token"].as_str().unwrap().to_owned();
    assert!(
        preview["url"]
            .as_str()
            .unwrap()
            .starts_with(&format!("http://3000-{id}."))
    );
    // The preview token is a toolbox credential, and a restart replaces it.
    let with_token = |token: &str| {
        reqwest::Client::new()
            .get(format!("{}/toolbox/{id}/work-dir", sim.url()))
            .header("X-Daytona-Preview-Token", token)
            .send()
    };
    assert_eq!(with_token(&token).await.unwrap().status().as_u16(), 200);
    c.post(&format!("/api/sandbox/{id}/stop"), json!({})).await;
    c.wait_for(&id, "stopped").await;
    c.post(&format!("/api/sandbox/{id}/start"), json!({})).await;
    c.wait_for(&id, "started").await;
    assert_eq!(with_token(&token).await.unwrap().status().as_u16(), 401);
    let (_, signed) = c
        .get(&format!(
            "/api/sandbox/{id}/ports/3000/signed-preview-url?expiresInSeconds=30"
        ))
        .await;
    assert_eq!(signed["port"], 3000);
    let (status, _) = c
        .get(&format!(
            "/api/sandbox/{id}/ports/3000/signed-preview-url?expiresInSeconds=0"
        ))
        .await;
    assert_eq!(status, 400);
    let (_, first) = c
        .post(
            &format!("/api/sandbox/{id}/ssh-access?expiresInMinutes=5"),
            json!({}),
        )
        .await;
    let first = first["token"].as_str().unwrap().to_owned();
    assert_eq!(first.len(), 32);
    assert!(first.chars().all(|ch| ch.is_ascii_alphanumeric()));
    let (_, second) = c
        .post(&format!("/api/sandbox/{id}/ssh-access"), json!({}))
        .await;
    let validate = |t: String| {
        let c = &c;
        async move {
            c.get(&format!("/api/sandbox/ssh-access/validate?token={t}"))
                .await
                .1
        }
    };
    assert_eq!(
        validate(first).await["valid"],
        false,
        "a new token revokes the old one"
    );
    let second = second["token"].as_str().unwrap().to_owned();
    assert_eq!(
        validate(second.clone()).await,
        json!({"valid": true, "sandboxId": id})
    );
    c.call(
        reqwest::Method::DELETE,
        &format!("/api/sandbox/{id}/ssh-access"),
        None,
    )
    .await;
    assert_eq!(validate(second).await["valid"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn execute_merges_output_and_times_out_with_408() {
    let sim = sim().await;
    let c = Client::of(&sim);
    let id = c.started(json!({"env": {"FROM_CREATE": "yes"}})).await;
    let t = format!("/toolbox/{id}");
    let (status, r) = c
        .post(
            &format!("{t}/process/execute"),
            json!({"command": "echo $FROM_CREATE $X; echo err >&2; exit 4", "envs": {"X": "x"}}),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(r, json!({"exitCode": 4, "result": "yes x\nerr\n"}));
    let started = Instant::now();
    let (status, r) = c
        .post(
            &format!("{t}/process/execute"),
            json!({"command": "sleep 30", "timeout": 1}),
        )
        .await;
    assert_eq!((status, r["code"].clone()), (408, json!("REQUEST_TIMEOUT")));
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_keep_state_split_streams_and_answer_by_sdk_version() {
    let sim = sim().await;
    let c = Client::of(&sim);
    let id = c.started(json!({})).await;
    let t = format!("/toolbox/{id}/process/session");
    let answer = c
        .req(reqwest::Method::POST, &t)
        .json(&json!({"sessionId": "s"}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 201);
    assert_eq!(c.post(&t, json!({"sessionId": "s"})).await.0, 409);
    let (status, r) = c
        .post(
            &format!("{t}/s/exec"),
            json!({"command": "mkdir -p d && cd d && export V=7"}),
        )
        .await;
    assert_eq!((status, r["exitCode"].clone()), (200, json!(0)));
    let (_, r) = c
        .post(
            &format!("{t}/s/exec"),
            json!({"command": "echo $V; basename $PWD; echo e >&2; printf tail"}),
        )
        .await;
    assert_eq!(
        r["stdout"], "7\nd\ntail\n",
        "the partial last line gets a newline"
    );
    assert_eq!(r["stderr"], "e\n");
    assert!(r["output"].as_str().unwrap().contains("\u{1}\u{1}\u{1}7\n"));
    let (status, r) = c
        .post(
            &format!("{t}/s/exec"),
            json!({"command": "sleep 0.2; echo done", "runAsync": true}),
        )
        .await;
    assert_eq!(status, 202);
    let cid = r["cmdId"].as_str().unwrap().to_owned();
    let (_, cmd) = c.get(&format!("{t}/s/command/{cid}")).await;
    assert!(cmd.get("exitCode").is_none(), "running: {cmd}");
    tokio::time::sleep(Duration::from_millis(400)).await;
    let (_, cmd) = c.get(&format!("{t}/s/command/{cid}")).await;
    assert_eq!(
        cmd,
        json!({"id": cid, "command": "sleep 0.2; echo done", "exitCode": 0})
    );
    let (_, logs) = c.get(&format!("{t}/s/command/{cid}/logs")).await;
    assert_eq!(logs["stdout"], "done\n");
    // Without a version the logs are plain text, markers stripped.
    let plain = reqwest::Client::new()
        .get(format!("{}{t}/s/command/{cid}/logs", sim.url()))
        .bearer_auth(sim.api_key())
        .send()
        .await
        .unwrap();
    assert!(
        plain.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    assert_eq!(plain.text().await.unwrap(), "done\n");
    let answer = c
        .req(reqwest::Method::DELETE, &format!("{t}/s"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 204);
    assert_eq!(c.get(&format!("{t}/s/command/{cid}")).await.0, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_websocket_sends_raw_chunks_and_closes_1000_after_the_linger() {
    let sim = sim().await;
    let c = Client::of(&sim);
    let id = c.started(json!({})).await;
    let t = format!("/toolbox/{id}/process/session");
    c.post(&t, json!({"sessionId": "w"})).await;
    let big = "x".repeat(3000);
    let (_, r) = c
        .post(
            &format!("{t}/w/exec"),
            // Lines of the two streams written back to back may reach the log in either order
            // (two labellers append to it), so the test spaces them.
            json!({"command": format!("echo a; sleep 0.3; echo b >&2; sleep 0.1; echo {big}"), "runAsync": true}),
        )
        .await;
    let cid = r["cmdId"].as_str().unwrap();
    let url = format!(
        "{}{t}/w/command/{cid}/logs?follow=true",
        sim.url().replace("http", "ws")
    );
    let mut request = url.into_client_request().unwrap();
    request.headers_mut().insert(
        "Authorization",
        format!("Bearer {}", sim.api_key()).parse().unwrap(),
    );
    request
        .headers_mut()
        .insert("X-Daytona-SDK-Version", "0.218.0".parse().unwrap());
    let (mut ws, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    let (mut raw, mut frames, mut close) = (Vec::new(), Vec::new(), None);
    let mut first_at = None;
    while let Some(message) = ws.next().await {
        match message.unwrap() {
            Message::Binary(b) => {
                first_at.get_or_insert_with(Instant::now);
                assert!(b.len() <= 1024);
                frames.push(Instant::now());
                raw.extend_from_slice(&b);
            }
            Message::Close(frame) => close = frame,
            _ => {}
        }
    }
    let expected = format!("\u{1}\u{1}\u{1}a\n\u{2}\u{2}\u{2}b\n\u{1}\u{1}\u{1}{big}\n");
    assert_eq!(String::from_utf8(raw).unwrap(), expected);
    assert!(
        frames.len() >= 4,
        "live, in chunks: {} frames",
        frames.len()
    );
    assert_eq!(close.unwrap().code, CloseCode::Normal);
    assert!(
        // 100 ms between the last read and the close; the last frame may have arrived late.
        Instant::now() - *frames.last().unwrap() >= Duration::from_millis(50),
        "the server lingers after the exit code"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_round_trip_through_bulk_upload_and_bulk_download() {
    let sim = sim().await;
    let c = Client::of(&sim);
    let id = c.started(json!({})).await;
    let t = format!("/toolbox/{id}/files");
    let data: Vec<u8> = (0..=255).collect();
    let form = reqwest::multipart::Form::new()
        .text("files[0].path", "dir/a.bin")
        .part(
            "files[0].file",
            reqwest::multipart::Part::bytes(data.clone()).file_name("dir/a.bin"),
        );
    let answer = c
        .req(reqwest::Method::POST, &format!("{t}/bulk-upload"))
        .multipart(form)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 200);
    let answer = c
        .req(reqwest::Method::POST, &format!("{t}/bulk-download"))
        .json(&json!({"paths": ["dir/a.bin", "dir/missing"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        answer.headers()["content-type"],
        "multipart/form-data; boundary=DAYTONA-FILE-BOUNDARY"
    );
    let body = answer.bytes().await.unwrap();
    let text = String::from_utf8_lossy(&body);
    assert!(text.contains("name=\"file\"; filename=\"dir/a.bin\""));
    assert!(text.contains("name=\"error\"; filename=\"dir/missing\""));
    assert!(body.windows(256).any(|w| w == data.as_slice()));
    let got = c
        .req(
            reqwest::Method::GET,
            &format!("{t}/download?path=dir/a.bin"),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(got.bytes().await.unwrap().as_ref(), data.as_slice());
    let (status, info) = c.get(&format!("{t}/info?path=dir/a.bin")).await;
    assert_eq!(
        (status, info["size"].clone(), info["isDir"].clone()),
        (200, json!(256), json!(false))
    );
    let (status, missing) = c.get(&format!("{t}/info?path=nope")).await;
    assert_eq!(
        (status, missing["code"].clone()),
        (404, json!("FILE_NOT_FOUND"))
    );
    assert_eq!(
        c.post(&format!("{t}/folder?path=dir/sub&mode=700"), json!({}))
            .await
            .0,
        201
    );
    let (_, list) = c.get(&format!("{t}?path=dir")).await;
    let names: Vec<_> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].clone())
        .collect();
    assert_eq!(names, ["a.bin", "sub"]);
    assert_eq!(
        c.post(
            &format!("{t}/move?source=dir/a.bin&destination=dir/b.bin"),
            json!({})
        )
        .await
        .0,
        200
    );
    let remove = |p: &str| {
        c.req(reqwest::Method::DELETE, &format!("{t}?path={p}"))
            .send()
    };
    assert_eq!(
        remove("dir").await.unwrap().status().as_u16(),
        400,
        "a directory needs recursive"
    );
    assert_eq!(
        remove("dir&recursive=true")
            .await
            .unwrap()
            .status()
            .as_u16(),
        204
    );
    assert_eq!(c.get(&format!("{t}/info?path=dir")).await.0, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_and_the_create_throttler() {
    let sim = DaytonaSim::builder()
        .transition(Duration::ZERO)
        .rate_limits(1000, 2, 1000)
        .start()
        .await
        .unwrap();
    let c = Client::of(&sim);
    sim.server().faults().add(
        FaultRule::new(
            "get",
            Fault::Status {
                code: 503,
                retry_after: None,
            },
        )
        .times(1),
    );
    let (status, body) = c.get("/api/sandbox/x").await;
    assert_eq!(
        (status, body["statusCode"].clone(), body["path"].clone()),
        (503, json!(503), json!("/api/sandbox/x"))
    );
    let answer = c
        .req(reqwest::Method::POST, "/api/sandbox")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.headers()["x-ratelimit-limit-sandbox-create"], "2");
    assert_eq!(
        answer.headers()["x-ratelimit-remaining-sandbox-create"],
        "1"
    );
    assert_eq!(c.post("/api/sandbox", json!({})).await.0, 200);
    let answer = c
        .req(reqwest::Method::POST, "/api/sandbox")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 429);
    assert!(answer.headers().contains_key("retry-after-sandbox-create"));
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["message"], "Rate limit exceeded");
    assert_eq!(sim.sandboxes(), 2, "a throttled create makes nothing");
    assert_eq!(sim.server().log().count("create"), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_in_a_session_ends_it_and_dropping_the_simulator_kills_what_runs() {
    let sim = sim().await;
    let c = Client::of(&sim);
    let id = c.started(json!({})).await;
    let t = format!("/toolbox/{id}/process/session");
    c.post(&t, json!({"sessionId": "e"})).await;
    // `exit` runs in the session's own shell, which ends: the command never gets an exit code.
    let (status, body) = c
        .post(&format!("{t}/e/exec"), json!({"command": "exit 3"}))
        .await;
    assert_eq!(
        (status, body["code"].clone()),
        (410, json!("SESSION_ENDED"))
    );
    let (status, _) = c
        .post(&format!("{t}/e/exec"), json!({"command": "true"}))
        .await;
    assert_eq!(status, 410);
    c.post(&t, json!({"sessionId": "bg"})).await;
    let (_, r) = c
        .post(
            &format!("{t}/bg/exec"),
            // (Its output redirected: a job holding the labellers' pipes holds the answer.)
            json!({"command": "sleep 300 >/dev/null 2>&1 & echo $!"}),
        )
        .await;
    let pid: u32 = r["stdout"].as_str().unwrap().trim().parse().unwrap();
    let alive = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| !s.split(") ").nth(1).unwrap_or("").starts_with('Z'))
    };
    assert!(alive(pid));
    drop(sim);
    for _ in 0..200 {
        if !alive(pid) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("sleep {pid} outlived the simulator");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_faults_use_the_toolbox_error_body_and_resets_close_the_connection() {
    let sim = sim().await;
    let c = Client::of(&sim);
    let id = c.started(json!({})).await;
    let faults = sim.server().faults();
    faults.add(
        FaultRule::new(
            "exec",
            Fault::Status {
                code: 429,
                retry_after: Some(2),
            },
        )
        .times(1),
    );
    faults.add(FaultRule::new("get", Fault::Reset).times(1));
    let answer = c
        .req(
            reqwest::Method::POST,
            &format!("/toolbox/{id}/process/execute"),
        )
        .json(&json!({"command": "true"}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 429);
    assert_eq!(answer.headers()["retry-after"], "2");
    let body: Value = answer.json().await.unwrap();
    assert_eq!(
        (body["path"].clone(), body["method"].clone()),
        (json!("/process/execute"), json!("POST"))
    );
    assert!(
        c.req(reqwest::Method::GET, &format!("/api/sandbox/{id}"))
            .send()
            .await
            .is_err()
    );
    assert_eq!(c.get(&format!("/api/sandbox/{id}")).await.0, 200);
    let log = sim.server().log().entries();
    assert_eq!(log.iter().filter(|e| e.fault.is_some()).count(), 2);
}

/// Runs one cell over the interpreter WebSocket: the frames' `(type, text or name)` and the
/// close code and reason.
async fn interpret(
    sim: &DaytonaSim,
    id: &str,
    first: Value,
) -> (Vec<(String, String)>, u16, String) {
    let url = format!(
        "{}/toolbox/{id}/process/interpreter/execute",
        sim.url().replace("http", "ws")
    );
    let mut request = url.into_client_request().unwrap();
    request.headers_mut().insert(
        "Authorization",
        format!("Bearer {}", sim.api_key()).parse().unwrap(),
    );
    let (mut ws, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    ws.send(Message::text(first.to_string())).await.unwrap();
    let mut frames = Vec::new();
    while let Some(message) = ws.next().await {
        match message.unwrap() {
            Message::Text(text) => {
                let v: Value = serde_json::from_str(&text).unwrap();
                for field in ["type", "text", "name", "value", "traceback"] {
                    assert!(v.get(field).is_some(), "every field is present: {v}");
                }
                let detail = if v["type"] == "error" {
                    &v["name"]
                } else {
                    &v["text"]
                };
                frames.push((
                    v["type"].as_str().unwrap().to_owned(),
                    detail.as_str().unwrap().to_owned(),
                ));
            }
            Message::Close(Some(frame)) => {
                return (frames, u16::from(frame.code), frame.reason.to_string());
            }
            _ => {}
        }
    }
    panic!("the socket ended without a close frame");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_interpreter_runs_cells_in_contexts_and_closes_with_the_daemons_codes() {
    let sim = sim().await;
    let c = Client::of(&sim);
    let id = c.started(json!({})).await;
    let (frames, code, _) = interpret(&sim, &id, json!({"code": "x = 6\nprint(x * 7)\nx"})).await;
    assert_eq!(
        frames,
        [
            ("stdout".into(), "42\n".into()),
            ("control".into(), "completed".into())
        ],
        "no result for the last expression: the daemon has none"
    );
    assert_eq!(code, 1000);
    let (frames, code, _) = interpret(&sim, &id, json!({"code": "1/0"})).await;
    assert_eq!(frames[0], ("error".into(), "ZeroDivisionError".into()));
    assert_eq!(code, 1000);
    let (frames, code, _) = interpret(
        &sim,
        &id,
        json!({"code": "import time\ntime.sleep(30)", "timeout": 1}),
    )
    .await;
    assert_eq!(
        frames.last().unwrap(),
        &("control".into(), "interrupted".into())
    );
    assert_eq!(code, 4008);
    let (_, code, reason) =
        interpret(&sim, &id, json!({"code": "print(x)", "contextId": "nope"})).await;
    assert_eq!((code, reason.as_str()), (1008, "context not found: nope"));
    let (_, code, reason) = interpret(&sim, &id, json!({"code": "  "})).await;
    assert_eq!((code, reason.as_str()), (1008, "code is required"));

    let t = format!("/toolbox/{id}/process/interpreter/context");
    let (status, made) = c.post(&t, json!({})).await;
    assert_eq!(status, 200);
    assert_eq!(
        (made["language"].clone(), made["active"].clone()),
        (json!("python"), json!(true))
    );
    let ctx = made["id"].as_str().unwrap().to_owned();
    let (frames, _, _) = interpret(&sim, &id, json!({"code": "print(x)", "contextId": ctx})).await;
    assert_eq!(
        frames[0],
        ("error".into(), "NameError".into()),
        "contexts are apart"
    );
    let (_, listed) = c.get(&t).await;
    assert_eq!(
        listed["contexts"].as_array().unwrap().len(),
        1,
        "the default is not listed"
    );
    assert_eq!(c.post(&t, json!({"language": "javascript"})).await.0, 400);
    for (which, status) in [("default", 400), (ctx.as_str(), 200), (ctx.as_str(), 404)] {
        let path = format!("{t}/{which}");
        assert_eq!(
            c.call(reqwest::Method::DELETE, &path, None).await.0,
            status,
            "{which}"
        );
    }
}

/// The toolbox proxy checks credentials from the head: a wrong preview token of a sandbox
/// that exists is 401 on an upload before any body byte is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_preview_token_is_refused_before_the_body_is_read() {
    let sim = sim().await;
    let c = Client::of(&sim);
    let id = c.started(json!({})).await;
    let (status, body) = crate::server::status_without_body(
        sim.server().addr(),
        "POST",
        &format!("/toolbox/{id}/files/upload-v2?path=/tmp/x"),
        "X-Daytona-Preview-Token: wrong\r\n",
        1 << 30,
    )
    .await;
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("preview token is invalid"), "{body}");
}

/// A client's absolute paths are the sandbox's own: a path naming a host directory (a
/// temporary one standing in for the host's home or `/tmp`) and links planted in the working
/// directory (to a host directory, absolute or relative) resolve inside the sandbox; nothing
/// outside it is read, written, listed, moved or removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absolute_paths_and_links_stay_inside_the_sandbox() {
    let sim = sim().await;
    let c = Client::of(&sim);
    let id = c.started(json!({})).await;
    let t = format!("/toolbox/{id}/files");
    let (_, dir) = c.get(&format!("/toolbox/{id}/work-dir")).await;
    let work = std::path::PathBuf::from(dir["dir"].as_str().unwrap());
    let host = tempfile::tempdir().unwrap();
    std::fs::write(host.path().join("secret"), b"host").unwrap();
    let outside = host.path().to_string_lossy().into_owned();
    std::os::unix::fs::symlink(host.path(), work.join("abs")).unwrap();
    let up = "../".repeat(work.components().count()) + &outside[1..];
    std::os::unix::fs::symlink(&up, work.join("rel")).unwrap();
    let q = |p: &str| url::form_urlencoded::byte_serialize(p.as_bytes()).collect::<String>();
    for (dir, name) in [
        (outside.clone(), "a"),
        (format!("{}/abs", work.display()), "b"),
        ("rel".to_owned(), "c"),
    ] {
        let path = format!("{dir}/{name}");
        let written = c
            .req(
                reqwest::Method::POST,
                &format!("{t}/upload-v2?path={}", q(&path)),
            )
            .body("inside")
            .send()
            .await
            .unwrap();
        assert_eq!(written.status().as_u16(), 200, "{path}");
        let read = c
            .req(
                reqwest::Method::GET,
                &format!("{t}/download?path={}", q(&path)),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(read.text().await.unwrap(), "inside", "{path}");
        assert!(
            !host.path().join(name).exists(),
            "{path} was written on the host"
        );
        let secret = format!("{dir}/secret");
        let (status, _) = c.get(&format!("{t}/download?path={}", q(&secret))).await;
        assert_eq!(status, 404, "{secret} was read from the host");
        let (_, listed) = c.get(&format!("{t}?path={}", q(&dir))).await;
        assert!(!listed.to_string().contains("secret"), "{dir}: {listed}");
        let moved = c
            .post(
                &format!("{t}/move?source={}&destination=stolen", q(&secret)),
                json!({}),
            )
            .await;
        assert_eq!(moved.0, 404, "{secret} was moved");
        let removed = c
            .req(reqwest::Method::DELETE, &format!("{t}?path={}", q(&secret)))
            .send()
            .await
            .unwrap();
        assert_eq!(removed.status().as_u16(), 404, "{secret} was removed");
    }
    let names: Vec<_> = std::fs::read_dir(host.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(names, ["secret"]);
    assert_eq!(std::fs::read(host.path().join("secret")).unwrap(), b"host");
}
