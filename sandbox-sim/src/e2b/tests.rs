//! The E2B simulator driven with plain HTTP, as PROTOCOL.md describes the wire.

use super::*;
use crate::{Fault, FaultRule};
use serde_json::{Value, json};

struct Client {
    http: reqwest::Client,
    url: String,
    key: String,
}

impl Client {
    fn of(sim: &E2bSim) -> Client {
        Client {
            // The tests see bodies as sent: a reqwest built with its gzip feature (as in a
            // workspace build with every feature) would otherwise ask for and undo gzip itself.
            http: reqwest::Client::builder()
                .no_gzip()
                .build()
                .expect("a client"),
            url: sim.url().to_owned(),
            key: sim.api_key().to_owned(),
        }
    }

    fn api(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.url))
            .header("x-api-key", &self.key)
    }

    async fn create(&self, body: Value) -> Value {
        let answer = self
            .api(reqwest::Method::POST, "/v2/sandboxes")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 201);
        answer.json().await.unwrap()
    }

    fn envd(&self, sb: &Value, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.url))
            .header("e2b-sandbox-id", sb["sandboxID"].as_str().unwrap())
            .header("e2b-sandbox-port", "49983")
            .header("x-access-token", sb["envdAccessToken"].as_str().unwrap())
    }

    async fn unary(&self, sb: &Value, rpc: &str, body: Value) -> (u16, Value) {
        let answer = self
            .envd(sb, reqwest::Method::POST, &format!("/{rpc}"))
            .header("content-type", "application/json")
            .header("connect-protocol-version", "1")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        let status = answer.status().as_u16();
        (status, answer.json().await.unwrap())
    }

    /// A server-streaming call, read to its end: each envelope's flags and JSON.
    async fn stream(&self, sb: &Value, rpc: &str, body: Value) -> Vec<(u8, Value)> {
        let answer = self.stream_request(sb, rpc, body).send().await.unwrap();
        assert_eq!(answer.status(), 200);
        assert_eq!(answer.headers()["content-type"], "application/connect+json");
        frames(&answer.bytes().await.unwrap())
    }

    fn stream_request(&self, sb: &Value, rpc: &str, body: Value) -> reqwest::RequestBuilder {
        self.envd(sb, reqwest::Method::POST, &format!("/{rpc}"))
            .header("content-type", "application/connect+json")
            .header("connect-protocol-version", "1")
            .header("keepalive-ping-interval", "50")
            .body(connect::envelope(0, body.to_string().as_bytes()))
    }
}

fn frames(mut body: &[u8]) -> Vec<(u8, Value)> {
    let mut out = Vec::new();
    while body.len() >= 5 {
        let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
        out.push((body[0], serde_json::from_slice(&body[5..5 + len]).unwrap()));
        body = &body[5 + len..];
    }
    assert!(body.is_empty(), "trailing bytes");
    out
}

fn run(cmd: &str) -> Value {
    json!({"process": {"cmd": "/bin/bash", "args": ["-l", "-c", cmd]}, "stdin": false})
}

/// The stdout of a Start stream's data events, and its end event.
fn output(frames: &[(u8, Value)]) -> (String, String, Value) {
    use base64::Engine;
    let (mut out, mut err, mut end) = (Vec::new(), Vec::new(), Value::Null);
    for (_, f) in frames {
        let e = &f["event"];
        let d = |k: &str| {
            base64::engine::general_purpose::STANDARD
                .decode(e["data"][k].as_str().unwrap_or(""))
                .unwrap()
        };
        out.extend(d("stdout"));
        err.extend(d("stderr"));
        if !e["end"].is_null() {
            end = e["end"].clone();
        }
    }
    let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
    (text(out), text(err), end)
}

#[tokio::test]
async fn create_get_list_and_kill_follow_the_spec() {
    let sim = E2bSim::start().await.unwrap();
    let c = Client::of(&sim);
    let sb = c
        .create(json!({"templateID": "base", "metadata": {"k": "v w"}, "envVars": {"A": "1"}, "timeout": 120}))
        .await;
    let id = sb["sandboxID"].as_str().unwrap();
    assert!(id.starts_with('i') && id.len() == 21, "{id}");
    assert_eq!(sb["alias"], "base");
    assert_eq!(sb["clientID"], "6532622b");
    assert_eq!(sb["templateID"], BASE_TEMPLATE_ID);
    assert!(sb.get("domain").is_none());

    let detail: Value = c
        .api(reqwest::Method::GET, &format!("/sandboxes/{id}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(detail["state"], "running");
    assert_eq!(detail["metadata"]["k"], "v w");
    assert_eq!(detail["lifecycle"]["onTimeout"], "kill");

    c.create(json!({"templateID": "base", "metadata": {"k": "other"}}))
        .await;
    let listed = c
        .api(reqwest::Method::GET, "/v2/sandboxes")
        .query(&[("metadata", "k=v%20w"), ("state", "running,paused")])
        .send()
        .await
        .unwrap();
    assert_eq!(listed.headers()["x-total-running"], "1");
    let listed: Vec<Value> = listed.json().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["sandboxID"], id);

    let killed = c
        .api(reqwest::Method::DELETE, &format!("/sandboxes/{id}"))
        .send()
        .await
        .unwrap();
    assert_eq!(killed.status(), 204);
    let gone = c
        .api(reqwest::Method::GET, &format!("/sandboxes/{id}"))
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), 404);
    assert_eq!(
        gone.headers()["content-type"],
        "application/json; charset=utf-8"
    );
    assert_eq!(
        gone.text().await.unwrap(),
        format!(
            r#"{{"code":404,"message":"Sandbox \"{id}\" doesn't exist or you don't have access to it"}}"#
        )
    );
    assert_eq!(sim.sandboxes(), 1);
}

#[tokio::test]
async fn list_pages_with_next_token_newest_first() {
    let sim = E2bSim::start().await.unwrap();
    let c = Client::of(&sim);
    let mut made = Vec::new();
    for _ in 0..3 {
        made.push(c.create(json!({"templateID": "base"})).await["sandboxID"].clone());
    }
    let mut seen = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let mut request = c
            .api(reqwest::Method::GET, "/v2/sandboxes")
            .query(&[("limit", "2")]);
        if let Some(t) = &token {
            request = request.query(&[("nextToken", t)]);
        }
        let answer = request.send().await.unwrap();
        token = answer
            .headers()
            .get("x-next-token")
            .map(|v| v.to_str().unwrap().to_owned());
        let page: Vec<Value> = answer.json().await.unwrap();
        seen.extend(page.into_iter().map(|s| s["sandboxID"].clone()));
        if token.is_none() {
            break;
        }
    }
    made.reverse();
    assert_eq!(seen, made);
    // Capped, a page holds fewer than asked, with a token to the rest.
    sim.server().set_page_cap(Some(1));
    let answer = c
        .api(reqwest::Method::GET, "/v2/sandboxes")
        .query(&[("limit", "2")])
        .send()
        .await
        .unwrap();
    assert!(answer.headers().get("x-next-token").is_some());
    assert_eq!(answer.json::<Vec<Value>>().await.unwrap().len(), 1);
    sim.server().set_page_cap(None);
    let bad = c
        .api(reqwest::Method::GET, "/v2/sandboxes?nextToken=nonsense")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
}

#[tokio::test]
async fn keys_are_checked_and_an_idempotency_key_makes_one_sandbox() {
    let sim = E2bSim::start().await.unwrap();
    let c = Client::of(&sim);
    for key in [None, Some("wrong"), Some("e2b_0000")] {
        let mut request = c
            .http
            .post(format!("{}/v2/sandboxes", c.url))
            .json(&json!({"templateID": "base"}));
        if let Some(k) = key {
            request = request.header("x-api-key", k);
        }
        let answer = request.send().await.unwrap();
        assert_eq!(answer.status(), 401);
        let body: Value = answer.json().await.unwrap();
        assert_eq!(body["code"], 401);
    }
    let keyed = || {
        c.api(reqwest::Method::POST, "/v2/sandboxes")
            .header("idempotency-key", "key-1")
            .json(&json!({"templateID": "base"}))
            .send()
    };
    let (a, b) = tokio::join!(keyed(), keyed());
    let a: Value = a.unwrap().json().await.unwrap();
    let b: Value = b.unwrap().json().await.unwrap();
    assert_eq!(a["sandboxID"], b["sandboxID"]);
    assert_eq!(sim.sandboxes(), 1);
    let bad = c
        .api(reqwest::Method::POST, "/v2/sandboxes")
        .header("idempotency-key", "Not Valid")
        .json(&json!({"templateID": "base"}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
}

#[tokio::test]
async fn the_running_cap_answers_429() {
    let sim = E2bSim::builder().max_running(1).start().await.unwrap();
    let c = Client::of(&sim);
    c.create(json!({"templateID": "base"})).await;
    let answer = c
        .api(reqwest::Method::POST, "/v2/sandboxes")
        .json(&json!({"templateID": "base"}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 429);
    let body: Value = answer.json().await.unwrap();
    assert!(body["message"].as_str().unwrap().contains("(1)"));
}

#[tokio::test]
async fn start_streams_start_data_end_and_an_end_stream() {
    let sim = E2bSim::start().await.unwrap();
    let c = Client::of(&sim);
    let sb = c
        .create(json!({"templateID": "base", "envVars": {"GREETING": "hi"}}))
        .await;
    let frames = c
        .stream(&sb, "process.Process/Start", run("echo $GREETING"))
        .await;
    assert!(frames[0].1["event"]["start"]["pid"].as_u64().unwrap() > 0);
    assert_eq!(frames.last().unwrap(), &(2, json!({})));
    let (out, _, end) = output(&frames);
    assert_eq!(out, "hi\n");
    assert_eq!(end, json!({"exited": true, "status": "exit status 0"}));

    let frames = c
        .stream(&sb, "process.Process/Start", run("echo oops >&2; exit 3"))
        .await;
    let (_, err, end) = output(&frames);
    assert_eq!(err, "oops\n");
    assert_eq!(
        end,
        json!({"exitCode": 3, "exited": true, "status": "exit status 3", "error": "exit status 3"})
    );

    let mut with_env = run("printf '%s' \"$X\"; pwd");
    with_env["process"]["envs"] = json!({"X": "y"});
    with_env["process"]["cwd"] = json!("/home/user");
    let (out, _, _) = output(&c.stream(&sb, "process.Process/Start", with_env).await);
    let home = sim.sandbox_dir(sb["sandboxID"].as_str().unwrap()).unwrap();
    assert_eq!(out, format!("y{}\n", home.display()));

    let mut missing = run("ls");
    missing["process"]["cwd"] = json!("/nope");
    let frames = c.stream(&sb, "process.Process/Start", missing).await;
    assert_eq!(
        frames,
        vec![(
            2,
            json!({"error": {"code": "invalid_argument", "message": "cwd '/nope' does not exist"}})
        )]
    );
}

#[tokio::test]
async fn a_process_outlives_its_stream_and_can_be_listed_joined_and_killed() {
    let sim = E2bSim::start().await.unwrap();
    let c = Client::of(&sim);
    let sb = c.create(json!({"templateID": "base"})).await;
    let mut request = run("sleep 30");
    request["tag"] = json!("sleeper");
    let answer = c
        .stream_request(&sb, "process.Process/Start", request)
        .send()
        .await
        .unwrap();
    let mut body = answer.bytes_stream();
    use futures::StreamExt;
    let first = body.next().await.unwrap().unwrap();
    let pid = frames(&first)[0].1["event"]["start"]["pid"]
        .as_u64()
        .unwrap();
    drop(body);

    let (status, list) = c.unary(&sb, "process.Process/List", json!({})).await;
    assert_eq!(status, 200);
    assert_eq!(list["processes"][0]["pid"], pid);
    assert_eq!(list["processes"][0]["tag"], "sleeper");

    let joined = c
        .stream_request(
            &sb,
            "process.Process/Connect",
            json!({"process": {"tag": "sleeper"}}),
        )
        .send();
    let killer = async {
        // Connect answers `start` at once; the kill follows it.
        let (status, _) = c
            .unary(
                &sb,
                "process.Process/SendSignal",
                json!({"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"}),
            )
            .await;
        assert_eq!(status, 200);
    };
    let (joined, ()) = tokio::join!(joined, killer);
    let frames = frames(&joined.unwrap().bytes().await.unwrap());
    assert_eq!(frames[0].1["event"]["start"]["pid"], pid);
    let (_, _, end) = output(&frames);
    assert_eq!(
        end,
        json!({"exitCode": -1, "status": "signal: killed", "error": "signal: killed"})
    );
    // An ended process replays its end to a late Connect.
    let late = c
        .stream(
            &sb,
            "process.Process/Connect",
            json!({"process": {"pid": pid}}),
        )
        .await;
    assert_eq!(output(&late).2["status"], "signal: killed");
    let unknown = c
        .stream(
            &sb,
            "process.Process/Connect",
            json!({"process": {"pid": 999_999}}),
        )
        .await;
    assert_eq!(
        unknown,
        vec![(
            2,
            json!({"error": {"code": "not_found", "message": "process with pid 999999 not found"}})
        )]
    );
}

#[tokio::test]
async fn stdin_is_sent_by_message_and_closed() {
    let sim = E2bSim::start().await.unwrap();
    let c = Client::of(&sim);
    let sb = c.create(json!({"templateID": "base"})).await;
    let request = json!({"process": {"cmd": "cat"}, "stdin": true});
    let answer = c
        .stream_request(&sb, "process.Process/Start", request)
        .send()
        .await
        .unwrap();
    let mut body = answer.bytes_stream();
    use futures::StreamExt;
    let first = body.next().await.unwrap().unwrap();
    let pid = frames(&first)[0].1["event"]["start"]["pid"].clone();
    let (status, _) = c
        .unary(
            &sb,
            "process.Process/SendInput",
            json!({"process": {"pid": pid}, "input": {"stdin": "b25lCg=="}}),
        )
        .await;
    assert_eq!(status, 200);
    let more = [
        connect::envelope(
            0,
            json!({"start": {"process": {"pid": pid}}})
                .to_string()
                .as_bytes(),
        ),
        connect::envelope(0, br#"{"keepalive":{}}"#),
        connect::envelope(0, br#"{"data":{"input":{"stdin":"dHdvCg=="}}}"#),
    ]
    .concat();
    let streamed = c
        .envd(&sb, reqwest::Method::POST, "/process.Process/StreamInput")
        .header("content-type", "application/connect+json")
        .body(more)
        .send()
        .await
        .unwrap();
    assert_eq!(
        frames(&streamed.bytes().await.unwrap()),
        vec![(0, json!({})), (2, json!({}))]
    );
    let (status, _) = c
        .unary(
            &sb,
            "process.Process/CloseStdin",
            json!({"process": {"pid": pid}}),
        )
        .await;
    assert_eq!(status, 200);
    let mut rest = first.to_vec();
    while let Some(chunk) = body.next().await {
        rest.extend_from_slice(&chunk.unwrap());
    }
    let (out, _, end) = output(&frames(&rest));
    assert_eq!(out, "one\ntwo\n");
    assert_eq!(end["status"], "exit status 0");
}

#[tokio::test]
async fn the_gate_and_the_proxy_answer_with_their_own_bodies() {
    let sim = E2bSim::start().await.unwrap();
    let c = Client::of(&sim);
    let sb = c.create(json!({"templateID": "base"})).await;
    let id = sb["sandboxID"].as_str().unwrap();
    let answer = c
        .http
        .post(format!("{}/filesystem.Filesystem/Stat", c.url))
        .header("e2b-sandbox-id", id)
        .header("e2b-sandbox-port", "49983")
        .header("x-access-token", "wrong")
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 401);
    assert_eq!(
        answer.text().await.unwrap(),
        "{\"code\":401,\"message\":\"unauthorized access, please provide a valid access token or method signing if supported\"}\n"
    );
    let health = c
        .envd(&sb, reqwest::Method::GET, "/health")
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 204);
    let reserved = c
        .envd(&sb, reqwest::Method::POST, "/init")
        .send()
        .await
        .unwrap();
    assert_eq!(reserved.status(), 404);
    let no_port = c
        .http
        .post(format!("{}/filesystem.Filesystem/Stat", c.url))
        .header("e2b-sandbox-id", id)
        .send()
        .await
        .unwrap();
    assert_eq!(no_port.status(), 400);
    let other_port = c
        .http
        .get(format!("{}/", c.url))
        .header("e2b-sandbox-id", id)
        .header("e2b-sandbox-port", "8080")
        .send()
        .await
        .unwrap();
    assert_eq!(other_port.status(), 502);
    let body: Value = other_port.json().await.unwrap();
    assert_eq!(body["port"], 8080);
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("port is not open")
    );
    assert!(sb.get("trafficAccessToken").is_none(), "public by default");
    let private = c
        .create(json!({"templateID": "base", "network": {"allowPublicTraffic": false}}))
        .await;
    let token = private["trafficAccessToken"].as_str().unwrap();
    let to_port = |token: Option<&str>| {
        let mut r = c
            .http
            .get(format!("{}/", c.url))
            .header("e2b-sandbox-id", private["sandboxID"].as_str().unwrap())
            .header("e2b-sandbox-port", "8080");
        if let Some(t) = token {
            r = r.header("e2b-traffic-access-token", t);
        }
        r.send()
    };
    assert_eq!(to_port(None).await.unwrap().status(), 403);
    assert_eq!(to_port(Some(token)).await.unwrap().status(), 502);
    c.api(reqwest::Method::DELETE, &format!("/sandboxes/{id}"))
        .send()
        .await
        .unwrap();
    let gone = c
        .envd(&sb, reqwest::Method::GET, "/health")
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), 502);
    assert_eq!(
        gone.json::<Value>().await.unwrap(),
        json!({"sandboxId": id, "message": "The sandbox was not found", "code": 502})
    );
}

#[tokio::test]
async fn files_round_trip_through_multipart_octet_stream_and_gzip() {
    let sim = E2bSim::start().await.unwrap();
    let c = Client::of(&sim);
    let sb = c.create(json!({"templateID": "base"})).await;
    let form = reqwest::multipart::Form::new().part(
        "file",
        reqwest::multipart::Part::bytes(b"hello".to_vec()).file_name("/home/user/d/a.txt"),
    );
    let written = c
        .envd(&sb, reqwest::Method::POST, "/files")
        .header("x-metadata-owner", "me")
        .multipart(form)
        .send()
        .await
        .unwrap();
    assert_eq!(written.status(), 200);
    assert_eq!(
        written.text().await.unwrap(),
        r#"[{"metadata":{"owner":"me"},"name":"a.txt","path":"/home/user/d/a.txt","type":"file"}]"#
    );
    let raw = c
        .envd(&sb, reqwest::Method::POST, "/files?path=b.bin")
        .header("content-type", "application/octet-stream")
        .header("content-encoding", "gzip")
        .body(connect::gzip(&[0u8, 1, 2, 255]))
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status(), 200);
    let plain = c
        .envd(
            &sb,
            reqwest::Method::GET,
            "/files?path=%2Fhome%2Fuser%2Fb.bin",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(plain.headers()["content-length"], "4");
    assert_eq!(&plain.bytes().await.unwrap()[..], &[0u8, 1, 2, 255]);
    let zipped = c
        .envd(&sb, reqwest::Method::GET, "/files?path=d/a.txt")
        .header("accept-encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(zipped.headers()["content-encoding"], "gzip");
    assert_eq!(
        connect::gunzip(&zipped.bytes().await.unwrap()).unwrap(),
        b"hello"
    );
    let missing = c
        .envd(&sb, reqwest::Method::GET, "/files?path=nope.txt")
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    assert_eq!(
        missing.text().await.unwrap(),
        "{\"code\":404,\"message\":\"path '/home/user/nope.txt' does not exist\"}\n"
    );
    // A signed URL works without the token; a wrong signature does not.
    let signed = envd::signature(
        "d/a.txt",
        "read",
        "",
        sb["envdAccessToken"].as_str().unwrap(),
        None,
    );
    let by_signature = c
        .http
        .get(format!("{}/files", c.url))
        .query(&[("path", "d/a.txt"), ("signature", signed.as_str())])
        .header("e2b-sandbox-id", sb["sandboxID"].as_str().unwrap())
        .header("e2b-sandbox-port", "49983")
        .send()
        .await
        .unwrap();
    assert_eq!(by_signature.status(), 200);
    let unsigned = c
        .http
        .get(format!("{}/files?path=d/a.txt", c.url))
        .header("e2b-sandbox-id", sb["sandboxID"].as_str().unwrap())
        .header("e2b-sandbox-port", "49983")
        .send()
        .await
        .unwrap();
    assert_eq!(unsigned.status(), 401);
}

#[tokio::test]
async fn filesystem_rpcs_stat_list_make_move_and_remove() {
    let sim = E2bSim::start().await.unwrap();
    let c = Client::of(&sim);
    let sb = c.create(json!({"templateID": "base"})).await;
    let fs = |m: &str| format!("filesystem.Filesystem/{m}");
    let (status, made) = c.unary(&sb, &fs("MakeDir"), json!({"path": "dir"})).await;
    assert_eq!(status, 200);
    assert_eq!(made["entry"]["type"], "FILE_TYPE_DIRECTORY");
    assert_eq!(made["entry"]["path"], "/home/user/dir");
    assert_eq!(made["entry"]["permissions"].as_str().unwrap().len(), 10);
    let (status, again) = c.unary(&sb, &fs("MakeDir"), json!({"path": "dir"})).await;
    assert_eq!(
        (status, again["code"].as_str()),
        (409, Some("already_exists"))
    );
    std::fs::write(
        sim.sandbox_dir(sb["sandboxID"].as_str().unwrap())
            .unwrap()
            .join("dir/f"),
        "12345",
    )
    .unwrap();
    let (_, listed) = c
        .unary(
            &sb,
            &fs("ListDir"),
            json!({"path": "/home/user", "depth": 2}),
        )
        .await;
    let names: Vec<&str> = listed["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["/home/user/dir", "/home/user/dir/f"]);
    assert_eq!(listed["entries"][1]["size"], "5");
    assert_eq!(listed["entries"][1]["mode"].as_u64().unwrap() >> 31, 0);
    let (status, moved) = c
        .unary(
            &sb,
            &fs("Move"),
            json!({"source": "dir/f", "destination": "dir/g"}),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(moved["entry"]["name"], "g");
    let (status, missing) = c.unary(&sb, &fs("Stat"), json!({"path": "dir/f"})).await;
    assert_eq!(status, 404);
    assert_eq!(
        missing,
        json!({"code": "not_found", "message": "file not found: stat /home/user/dir/f: no such file or directory"})
    );
    let (status, _) = c.unary(&sb, &fs("Remove"), json!({"path": "dir"})).await;
    assert_eq!(status, 200);
    let (status, _) = c.unary(&sb, &fs("Stat"), json!({"path": "dir"})).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn watch_dir_streams_start_then_the_new_file() {
    let sim = E2bSim::start().await.unwrap();
    let c = Client::of(&sim);
    let sb = c.create(json!({"templateID": "base"})).await;
    let answer = c
        .stream_request(
            &sb,
            "filesystem.Filesystem/WatchDir",
            json!({"path": "/home/user"}),
        )
        .send()
        .await
        .unwrap();
    use futures::StreamExt;
    let mut body = answer.bytes_stream();
    let mut seen = Vec::new();
    let mut written = false;
    while seen.len() < 3 {
        let chunk = body.next().await.unwrap().unwrap();
        seen.extend(frames(&chunk));
        if !written {
            std::fs::write(
                sim.sandbox_dir(sb["sandboxID"].as_str().unwrap())
                    .unwrap()
                    .join("w.txt"),
                "w",
            )
            .unwrap();
            written = true;
        }
    }
    assert_eq!(seen[0].1, json!({"start": {}}));
    assert_eq!(
        seen[1].1,
        json!({"filesystem": {"name": "w.txt", "type": "EVENT_TYPE_CREATE"}})
    );
    assert_eq!(
        seen[2].1,
        json!({"filesystem": {"name": "w.txt", "type": "EVENT_TYPE_WRITE"}})
    );
}

#[tokio::test]
async fn pause_connect_timeout_and_expiry() {
    let sim = E2bSim::start().await.unwrap();
    let c = Client::of(&sim);
    let sb = c.create(json!({"templateID": "base"})).await;
    let id = sb["sandboxID"].as_str().unwrap();
    let post = |path: String, body: Value| c.api(reqwest::Method::POST, &path).json(&body).send();
    let paused = post(format!("/sandboxes/{id}/pause"), json!({}))
        .await
        .unwrap();
    assert_eq!(paused.status(), 204);
    let twice = post(format!("/sandboxes/{id}/pause"), json!({}))
        .await
        .unwrap();
    assert_eq!(twice.status(), 409);
    let envd = c
        .envd(&sb, reqwest::Method::GET, "/health")
        .send()
        .await
        .unwrap();
    assert_eq!(envd.status(), 502);
    let resumed = post(
        format!("/v2/sandboxes/{id}/connect"),
        json!({"timeout": 60}),
    )
    .await
    .unwrap();
    assert_eq!(resumed.status(), 201);
    let connected = post(format!("/v2/sandboxes/{id}/connect"), json!({}))
        .await
        .unwrap();
    assert_eq!(connected.status(), 200);
    let set = post(format!("/sandboxes/{id}/timeout"), json!({"timeout": 0}))
        .await
        .unwrap();
    assert_eq!(set.status(), 204);
    let gone = c
        .api(reqwest::Method::GET, &format!("/sandboxes/{id}"))
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), 404);
    assert_eq!(sim.sandboxes(), 0);
}

#[tokio::test]
async fn auto_pause_on_timeout_and_auto_resume_through_the_proxy() {
    let sim = E2bSim::start().await.unwrap();
    let c = Client::of(&sim);
    let sb = c
        .create(json!({"templateID": "base", "autoPause": true, "autoResume": {"enabled": true}}))
        .await;
    let id = sb["sandboxID"].as_str().unwrap();
    c.api(reqwest::Method::POST, &format!("/sandboxes/{id}/timeout"))
        .json(&json!({"timeout": 0}))
        .send()
        .await
        .unwrap();
    let detail: Value = c
        .api(reqwest::Method::GET, &format!("/sandboxes/{id}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(detail["state"], "paused");
    assert_eq!(
        detail["lifecycle"],
        json!({"autoResume": true, "onTimeout": "pause"})
    );
    let health = c
        .envd(&sb, reqwest::Method::GET, "/health")
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 204);
    let detail: Value = c
        .api(reqwest::Method::GET, &format!("/sandboxes/{id}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(detail["state"], "running");
}

#[tokio::test]
async fn envd_answers_409_while_a_pause_takes_its_time() {
    let sim = E2bSim::builder()
        .transition(Duration::from_millis(800))
        .start()
        .await
        .unwrap();
    let c = Client::of(&sim);
    let sb = c.create(json!({"templateID": "base"})).await;
    let id = sb["sandboxID"].as_str().unwrap();
    let pause = c
        .api(reqwest::Method::POST, &format!("/sandboxes/{id}/pause"))
        .send();
    let probe = async {
        // Until the pause has begun the proxy answers 204; then 409 for the transition.
        for _ in 0..1000 {
            let answer = c
                .envd(&sb, reqwest::Method::GET, "/health")
                .send()
                .await
                .unwrap();
            if answer.status() == 409 {
                let body: Value = answer.json().await.unwrap();
                return body["message"].as_str().unwrap().to_owned();
            }
            tokio::task::yield_now().await;
        }
        panic!("never saw the transition");
    };
    let (paused, message) = tokio::join!(pause, probe);
    assert_eq!(paused.unwrap().status(), 204);
    assert!(message.contains("still transitioning"), "{message}");
}

#[tokio::test]
async fn faults_apply_by_operation_and_are_logged() {
    let sim = E2bSim::builder()
        .faults(FaultPlan::parse("create=503#1").unwrap())
        .start()
        .await
        .unwrap();
    let c = Client::of(&sim);
    let refused = c
        .api(reqwest::Method::POST, "/v2/sandboxes")
        .json(&json!({"templateID": "base"}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.json::<Value>().await.unwrap()["code"], 503);
    assert_eq!(sim.sandboxes(), 0);
    let sb = c.create(json!({"templateID": "base"})).await;
    sim.server().faults().add(
        FaultRule::new(
            "exec",
            Fault::Status {
                code: 429,
                retry_after: Some(2),
            },
        )
        .times(1),
    );
    let limited = c
        .stream_request(&sb, "process.Process/Start", run("true"))
        .send()
        .await
        .unwrap();
    assert_eq!(limited.status(), 429);
    assert_eq!(limited.headers()["retry-after"], "2");
    let log = sim.server().log();
    assert_eq!(log.count("create"), 2);
    assert_eq!(log.count("exec"), 1);
}

#[tokio::test]
async fn fork_snapshot_and_metrics() {
    let sim = E2bSim::start().await.unwrap();
    let c = Client::of(&sim);
    let sb = c
        .create(json!({"templateID": "base", "metadata": {"m": "1"}}))
        .await;
    let id = sb["sandboxID"].as_str().unwrap();
    std::fs::write(sim.sandbox_dir(id).unwrap().join("kept.txt"), "kept").unwrap();
    let forks: Vec<Value> = c
        .api(reqwest::Method::POST, &format!("/sandboxes/{id}/fork"))
        .json(&json!({"count": 2}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(forks.len(), 2);
    let child = forks[0]["sandbox"]["sandboxID"].as_str().unwrap();
    assert!(sim.sandbox_dir(child).unwrap().join("kept.txt").exists());
    let snap = c
        .api(reqwest::Method::POST, &format!("/sandboxes/{id}/snapshots"))
        .json(&json!({"name": "snap"}))
        .send()
        .await
        .unwrap();
    assert_eq!(snap.status(), 201);
    let snap: Value = snap.json().await.unwrap();
    assert_eq!(snap["snapshotID"], "sim/snap:default");
    let from = c.create(json!({"templateID": "sim/snap:default"})).await;
    let from_id = from["sandboxID"].as_str().unwrap();
    assert!(sim.sandbox_dir(from_id).unwrap().join("kept.txt").exists());
    let metrics: Vec<Value> = c
        .api(reqwest::Method::GET, &format!("/sandboxes/{id}/metrics"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(metrics[0]["diskUsed"].as_u64().unwrap() >= 4);
    let many: Value = c
        .api(
            reqwest::Method::GET,
            &format!("/sandboxes/metrics?sandbox_ids={id},{child}"),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(many["sandboxes"].as_object().unwrap().len(), 2);
    let deleted = c
        .api(reqwest::Method::DELETE, "/templates/sim%2Fsnap:default")
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 204);
}

#[tokio::test]
async fn the_registry_starts_it_and_env_points_clients_at_it() {
    let sim = crate::start("e2b", 0, FaultPlan::new()).await.unwrap();
    let env: BTreeMap<_, _> = sim.env().into_iter().collect();
    assert_eq!(env["E2B_API_URL"], sim.url());
    assert_eq!(env["E2B_SANDBOX_URL"], sim.url());
    assert!(env["E2B_API_KEY"].starts_with("e2b_"));
    assert!(crate::PROVIDERS.contains(&"e2b"));
}

/// A request to the interpreter server of `sb` (port 49999), with its access token.
fn interpreter(
    client: &Client,
    sb: &Value,
    method: reqwest::Method,
    path: &str,
) -> reqwest::RequestBuilder {
    client
        .http
        .request(method, format!("{}{path}", client.url))
        .header("e2b-sandbox-id", sb["sandboxID"].as_str().unwrap())
        .header("e2b-sandbox-port", "49999")
        .header("x-access-token", sb["envdAccessToken"].as_str().unwrap())
}

#[tokio::test]
async fn the_interpreter_streams_ndjson_and_answers_its_errors_as_the_server_does() {
    let sim = E2bSim::start().await.unwrap();
    let client = Client::of(&sim);
    let base = client.create(json!({"templateID": "base"})).await;
    let answer = interpreter(&client, &base, reqwest::Method::GET, "/health")
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 502, "a base template opens no port 49999");

    let sb = client
        .create(json!({"templateID": "code-interpreter-v1"}))
        .await;
    let health = interpreter(&client, &sb, reqwest::Method::GET, "/health")
        .send()
        .await
        .unwrap();
    assert_eq!(health.text().await.unwrap(), "\"OK\"");
    let execute = |body: Value| {
        interpreter(&client, &sb, reqwest::Method::POST, "/execute")
            .json(&body)
            .send()
    };
    let answer = execute(json!({"code": "x = 2\nprint('hi')\nx * 21"}))
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let lines: Vec<Value> = answer
        .text()
        .await
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let types: Vec<&str> = lines.iter().map(|l| l["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        [
            "number_of_executions",
            "stdout",
            "result",
            "end_of_execution"
        ]
    );
    assert_eq!(lines[1]["text"], "hi\n");
    assert!(lines[1]["timestamp"].as_str().unwrap().contains('T'));
    assert_eq!(lines[2]["text"], "42");
    assert_eq!(lines[2]["is_main_result"], true);

    let both = execute(json!({"code": "1", "context_id": "c", "language": "python"}))
        .await
        .unwrap();
    assert_eq!(both.status(), 400);
    assert_eq!(
        both.text().await.unwrap(),
        "Only one of context_id or language can be provided"
    );
    let missing = execute(json!({"code": "1", "context_id": "nope"}))
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    assert_eq!(missing.text().await.unwrap(), "Context nope not found");
    let wrong = client
        .http
        .post(format!("{}/execute", client.url))
        .header("e2b-sandbox-id", sb["sandboxID"].as_str().unwrap())
        .header("e2b-sandbox-port", "49999")
        .header("x-access-token", "wrong")
        .json(&json!({"code": "1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    let listed: Value = interpreter(&client, &sb, reqwest::Method::GET, "/contexts")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed[0]["language"], "python");
    assert_eq!(listed[0]["cwd"], "/home/user");
    let other = interpreter(&client, &sb, reqwest::Method::POST, "/contexts")
        .json(&json!({"language": "r"}))
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 500, "only python kernels are simulated");
}

/// envd's credentials are checked from the head: a wrong access token (or a bad signature) on
/// an upload of a sandbox that exists is 401 before any body byte is read; with the token, a
/// JSON call over its cap is 413, unread, and an upload may be large.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envd_credentials_and_caps_are_checked_before_the_body_is_read() {
    let sim = E2bSim::start().await.unwrap();
    let c = Client::of(&sim);
    let sb = c.create(json!({"templateID": "base"})).await;
    let id = sb["sandboxID"].as_str().unwrap();
    let token = sb["envdAccessToken"].as_str().unwrap();
    let addr = sim.server().addr();
    let routed = format!("E2b-Sandbox-Id: {id}\r\nE2b-Sandbox-Port: 49983\r\n");
    let huge = 1 << 30;
    for head in [format!("{routed}X-Access-Token: wrong\r\n"), routed.clone()] {
        let (status, body) = crate::server::status_without_body(
            addr,
            "POST",
            "/files?path=/home/user/x&signature=v1_wrong",
            &head,
            huge,
        )
        .await;
        assert_eq!(status, 401, "{head:?}: {body}");
    }
    let (status, _) = crate::server::status_without_body(
        addr,
        "POST",
        "/process.Process/Start",
        &format!("{routed}X-Access-Token: wrong\r\n"),
        huge,
    )
    .await;
    assert_eq!(status, 401);
    let (status, _) = crate::server::status_without_body(
        addr,
        "POST",
        "/process.Process/Start",
        &format!("{routed}X-Access-Token: {token}\r\n"),
        (crate::MAX_JSON_BODY + 1) as u64,
    )
    .await;
    assert_eq!(status, 413);
    let big = vec![b'x'; crate::MAX_JSON_BODY * 2];
    let form = reqwest::multipart::Form::new().part(
        "file",
        reqwest::multipart::Part::bytes(big.clone()).file_name("x"),
    );
    let answer = c
        .envd(&sb, reqwest::Method::POST, "/files?path=/home/user/big")
        .multipart(form)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
}

/// A client's absolute paths are the sandbox's own: a path naming a host directory (here a
/// temporary one standing in for the host's home or `/tmp`), `..` climbing above `/`, and
/// links planted in the home (to a host directory, absolute or relative) all resolve inside
/// the sandbox, so nothing outside it is read, written, listed or removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absolute_paths_and_links_stay_inside_the_sandbox() {
    let sim = E2bSim::start().await.unwrap();
    let c = Client::of(&sim);
    let sb = c.create(json!({"templateID": "base"})).await;
    let home = sim.sandbox_dir(sb["sandboxID"].as_str().unwrap()).unwrap();
    let host = tempfile::tempdir().unwrap();
    std::fs::write(host.path().join("secret"), b"host").unwrap();
    let outside = host.path().to_string_lossy().into_owned();
    let climb = format!("/home/user/../../../..{outside}");
    std::os::unix::fs::symlink(host.path(), home.join("abs")).unwrap();
    let up = "../".repeat(home.components().count()) + &outside[1..];
    std::os::unix::fs::symlink(&up, home.join("rel")).unwrap();
    let upload = |path: String, data: &'static [u8]| {
        let form = reqwest::multipart::Form::new()
            .part("file", reqwest::multipart::Part::bytes(data).file_name("f"));
        c.envd(&sb, reqwest::Method::POST, "/files")
            .query(&[("path", path)])
            .multipart(form)
            .send()
    };
    let download = |path: String| {
        c.envd(&sb, reqwest::Method::GET, "/files")
            .query(&[("path", path)])
            .send()
    };
    for (dir, name) in [
        (outside.clone(), "a"),
        (climb.clone(), "b"),
        ("/home/user/abs".to_owned(), "c"),
        ("/home/user/rel".to_owned(), "d"),
    ] {
        let path = format!("{dir}/{name}");
        assert_eq!(
            upload(path.clone(), b"inside").await.unwrap().status(),
            200,
            "{path}"
        );
        let read = download(path.clone()).await.unwrap();
        assert_eq!(read.status(), 200, "{path}");
        assert_eq!(&read.bytes().await.unwrap()[..], b"inside", "{path}");
        assert!(
            !host.path().join(name).exists(),
            "{path} was written on the host"
        );
        let secret = download(format!("{dir}/secret")).await.unwrap();
        assert_eq!(secret.status(), 404, "{dir}/secret was read from the host");
        let (_, listed) = c
            .unary(&sb, "filesystem.Filesystem/ListDir", json!({"path": dir}))
            .await;
        assert!(
            !listed.to_string().contains("secret"),
            "{dir} listed the host: {listed}"
        );
        let (status, _) = c
            .unary(
                &sb,
                "filesystem.Filesystem/Remove",
                json!({"path": format!("{dir}/secret")}),
            )
            .await;
        assert_eq!(status, 404, "{dir}/secret");
    }
    assert_eq!(std::fs::read(host.path().join("secret")).unwrap(), b"host");
    let names: Vec<_> = std::fs::read_dir(host.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(names, ["secret"]);
    // Removing a link removes the link, never what it names.
    let (status, _) = c
        .unary(
            &sb,
            "filesystem.Filesystem/Remove",
            json!({"path": "/home/user/abs"}),
        )
        .await;
    assert_eq!(status, 200);
    assert!(host.path().join("secret").exists());
}
