//! The Sprites simulator against PROTOCOL.md: REST lifecycle, exec over WebSocket (stdin,
//! exit codes, stderr apart, detach and replay, kill, TTY), files and their confinement,
//! checkpoints, rate limits.

use super::*;
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

async fn sim() -> SpritesSim {
    SpritesSim::builder()
        .linger(Duration::from_millis(50))
        .idle(Duration::from_millis(300))
        .start()
        .await
        .unwrap()
}

struct Client {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl Client {
    fn of(sim: &SpritesSim) -> Client {
        Client {
            http: reqwest::Client::new(),
            base: sim.url().to_owned(),
            token: sim.token().to_owned(),
        }
    }

    fn req(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.token)
    }

    async fn json(&self, method: reqwest::Method, path: &str, body: Value) -> (u16, Value) {
        let answer = self.req(method, path).json(&body).send().await.unwrap();
        let status = answer.status().as_u16();
        let text = answer.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    async fn create(&self, name: &str) -> Value {
        let (status, body) = self
            .json(
                reqwest::Method::POST,
                "/v1/sprites",
                json!({ "name": name }),
            )
            .await;
        assert_eq!(status, 201, "{body}");
        body
    }

    async fn ws(
        &self,
        path: &str,
    ) -> tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>
    {
        let url = format!("{}{path}", self.base.replacen("http", "ws", 1));
        let mut request = url.into_client_request().unwrap();
        request.headers_mut().insert(
            "authorization",
            format!("Bearer {}", self.token).parse().unwrap(),
        );
        tokio_tungstenite::connect_async(request).await.unwrap().0
    }
}

/// What a non-TTY connection received: the text frames and the bytes per stream, the exit.
#[derive(Default, Debug)]
struct Received {
    texts: Vec<Value>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    exit: Option<u8>,
    /// Stdout bytes that arrived before the first text frame.
    stdout_before_info: usize,
}

impl Received {
    fn take(&mut self, message: Message) {
        match message {
            Message::Text(t) => self.texts.push(serde_json::from_str(t.as_str()).unwrap()),
            Message::Binary(b) => match b.first() {
                Some(1) => {
                    self.stdout.extend_from_slice(&b[1..]);
                    if self.texts.is_empty() {
                        self.stdout_before_info += b.len() - 1;
                    }
                }
                Some(2) => self.stderr.extend_from_slice(&b[1..]),
                Some(3) => self.exit = Some(b[1]),
                _ => panic!("unexpected frame {b:?}"),
            },
            _ => {}
        }
    }
}

/// Reads until the exit frame (or `until` says stop).
async fn read_until<S>(ws: &mut S, got: &mut Received, until: impl Fn(&Received) -> bool)
where
    S: futures::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !until(got) {
        let message = tokio::time::timeout_at(deadline, ws.next())
            .await
            .expect("timed out")
            .expect("socket ended")
            .unwrap();
        got.take(message);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sprites_are_created_listed_updated_and_deleted_as_the_protocol_says() {
    let sim = sim().await;
    let c = Client::of(&sim);
    let anon = reqwest::get(format!("{}/v1/sprites", sim.url()))
        .await
        .unwrap();
    assert_eq!(anon.status(), 401);
    let body: Value = anon.json().await.unwrap();
    assert_eq!(body["error"], "unauthorized");

    let a = c.create("alpha-1").await;
    assert_eq!(a["status"], "cold");
    assert_eq!(a["name"], "alpha-1");
    assert!(a["url"].as_str().unwrap().starts_with("https://alpha-1-"));
    assert!(a["url"].as_str().unwrap().ends_with(".sprites.app"));
    let (status, dup) = c
        .json(
            reqwest::Method::POST,
            "/v1/sprites",
            json!({ "name": "alpha-1" }),
        )
        .await;
    assert_eq!(status, 400);
    assert!(dup["message"].as_str().unwrap().contains("already exists"));
    for bad in ["Upper", "-x", "x-", "a_b", ""] {
        let (status, body) = c
            .json(reqwest::Method::POST, "/v1/sprites", json!({ "name": bad }))
            .await;
        assert_eq!(status, 400, "{bad}");
        assert!(body["errors"].is_array(), "{bad}: {body}");
    }
    let (status, b) = c
        .json(
            reqwest::Method::POST,
            "/v1/sprites",
            json!({ "name": "alpha-2", "labels": ["owner=me"], "environment": {"A": "1"},
                    "config": {"cpus": 2} }),
        )
        .await;
    assert_eq!(status, 201);
    assert_eq!(b["labels"], json!(["owner=me"]));
    assert_eq!(b["environment"], json!({"A": "1"}));
    assert_eq!(b["config"], json!({"cpus": 2}));
    c.create("beta").await;

    let (_, page) = c
        .json(
            reqwest::Method::GET,
            "/v1/sprites?prefix=alpha&max_results=1",
            Value::Null,
        )
        .await;
    assert_eq!(
        page["sprites"],
        json!([{"name": "alpha-1", "org_slug": ORG,
        "updated_at": page["sprites"][0]["updated_at"]}])
    );
    assert_eq!(page["has_more"], true);
    let token = page["next_continuation_token"].as_str().unwrap().to_owned();
    let (_, page) = c
        .json(
            reqwest::Method::GET,
            &format!("/v1/sprites?prefix=alpha&max_results=1&continuation_token={token}"),
            Value::Null,
        )
        .await;
    assert_eq!(page["sprites"][0]["name"], "alpha-2");
    assert_eq!(page["has_more"], false);
    assert_eq!(page["next_continuation_token"], Value::Null);
    for bad in ["0", "-1", "x"] {
        let path = format!("/v1/sprites?max_results={bad}");
        let (status, _) = c.json(reqwest::Method::GET, &path, Value::Null).await;
        assert_eq!(status, 400, "{bad}");
    }

    let (status, updated) = c
        .json(
            reqwest::Method::PUT,
            "/v1/sprites/beta",
            json!({ "labels": ["x"] }),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(updated["labels"], json!(["x"]));

    let root = sim.sprite_root("beta").unwrap();
    assert!(root.exists());
    let answer = c
        .req(reqwest::Method::DELETE, "/v1/sprites/beta")
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 204);
    assert!(!root.exists());
    let (status, gone) = c
        .json(reqwest::Method::GET, "/v1/sprites/beta", Value::Null)
        .await;
    assert_eq!(status, 404);
    assert_eq!(gone["error"], "not_found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creates_over_the_limit_answer_429_with_the_fields_the_sdk_reads() {
    let sim = SpritesSim::builder().create_limit(1).start().await.unwrap();
    let c = Client::of(&sim);
    c.create("one").await;
    let answer = c
        .req(reqwest::Method::POST, "/v1/sprites")
        .json(&json!({ "name": "two" }))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 429);
    assert!(answer.headers().contains_key("retry-after"));
    assert_eq!(answer.headers()["x-ratelimit-remaining"], "0");
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["error"], "sprite_creation_rate_limited");
    assert_eq!(body["limit"], 1);
    assert!(body["retry_after_seconds"].as_u64().unwrap() >= 1);
    sim.set_rate_limits(false);
    c.create("two").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_round_trips_stdin_stdout_stderr_and_the_exit_code() {
    let sim = sim().await;
    let c = Client::of(&sim);
    c.create("ex").await;
    assert_eq!(sim.sprite_status("ex"), Some("cold"));
    let script = "read line; echo \"got $line in $PWD\"; echo oops >&2; cat; exit 3";
    let mut ws = c
        .ws(&format!(
            "/v1/sprites/ex/exec?cmd=sh&cmd=-c&cmd={}&path=sh&stdin=true",
            url::form_urlencoded::byte_serialize(script.as_bytes()).collect::<String>()
        ))
        .await;
    ws.send(Message::Binary(b"\x00hello\n".to_vec().into()))
        .await
        .unwrap();
    ws.send(Message::Binary(b"\x00rest".to_vec().into()))
        .await
        .unwrap();
    ws.send(Message::Binary(vec![4].into())).await.unwrap();
    let mut got = Received::default();
    read_until(&mut ws, &mut got, |g| g.exit.is_some()).await;
    assert_eq!(got.texts[0]["type"], "session_info");
    assert_eq!(got.texts[0]["tty"], false);
    assert_eq!(
        got.stdout_before_info, 0,
        "session_info comes first on spawn"
    );
    // PWD is the host directory behind /home/sprite (commands are not confined).
    assert!(String::from_utf8_lossy(&got.stdout).starts_with("got hello in "));
    assert!(String::from_utf8_lossy(&got.stdout).ends_with("home/sprite\nrest"));
    assert_eq!(got.stderr, b"oops\n");
    assert_eq!(got.exit, Some(3));
    assert_eq!(sim.sprite_status("ex"), Some("running"));
    // The server closes after the linger.
    let end = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(Ok(m)) = ws.next().await {
            if let Message::Close(_) = m {
                return;
            }
        }
    })
    .await;
    assert!(end.is_ok());
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(sim.sprite_status("ex"), Some("warm"));

    // Without stdin=true stdin frames are ignored and stdin is empty; env replaces the
    // environment; a missing program exits 127.
    let mut ws = c
        .ws("/v1/sprites/ex/exec?cmd=sh&cmd=-c&cmd=cat%3B%20echo%20%24A%2C%24HOME&env=A%3D7")
        .await;
    ws.send(Message::Binary(b"\x00ignored".to_vec().into()))
        .await
        .unwrap();
    let mut got = Received::default();
    read_until(&mut ws, &mut got, |g| g.exit.is_some()).await;
    assert_eq!(String::from_utf8_lossy(&got.stdout), "7,\n");
    assert_eq!(got.exit, Some(0));
    let mut ws = c.ws("/v1/sprites/ex/exec?cmd=no-such-program-here").await;
    let mut got = Received::default();
    read_until(&mut ws, &mut got, |g| g.exit.is_some()).await;
    assert_eq!(got.exit, Some(127));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_session_runs_on_replays_its_output_and_is_killed_by_signal() {
    let sim = sim().await;
    let c = Client::of(&sim);
    c.create("det").await;
    let script = "echo one; sleep 0.3; echo two; sleep 30";
    let mut ws = c
        .ws(&format!(
            "/v1/sprites/det/exec?cmd=sh&cmd=-c&cmd={}&max_run_after_disconnect=0",
            url::form_urlencoded::byte_serialize(script.as_bytes()).collect::<String>()
        ))
        .await;
    let mut got = Received::default();
    read_until(&mut ws, &mut got, |g| g.stdout.ends_with(b"one\n")).await;
    let id = got.texts[0]["session_id"].as_u64().unwrap();
    drop(ws);
    tokio::time::sleep(Duration::from_millis(600)).await;
    let (_, list) = c
        .json(reqwest::Method::GET, "/v1/sprites/det/exec", Value::Null)
        .await;
    let entry = &list["sessions"][0];
    assert_eq!(entry["id"], id);
    assert_eq!(entry["is_active"], false);
    assert_eq!(entry["tty"], false);
    assert!(entry["created"].as_str().unwrap().ends_with('Z'));

    let mut ws = c.ws(&format!("/v1/sprites/det/exec/{id}")).await;
    let mut got = Received::default();
    read_until(&mut ws, &mut got, |g| !g.texts.is_empty()).await;
    assert_eq!(
        got.stdout, b"one\ntwo\n",
        "the replay precedes session_info"
    );
    assert_eq!(got.stdout_before_info, 8);
    assert_eq!(got.texts[0]["session_id"], id);

    let answer = c
        .req(
            reqwest::Method::POST,
            &format!("/v1/sprites/det/exec/{id}/kill?signal=SIGTERM&timeout=5s"),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let text = answer.text().await.unwrap();
    let events: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events[0]["type"], "signal");
    assert_eq!(events[0]["pid"], id);
    assert_eq!(events.last().unwrap()["type"], "complete");
    assert_eq!(events.last().unwrap()["exit_code"], 128 + 15);
    read_until(&mut ws, &mut got, |g| g.exit.is_some()).await;
    assert_eq!(got.exit, Some(143));
    // Finished: out of the list, still attachable with replay, session_info and exit.
    let (_, list) = c
        .json(reqwest::Method::GET, "/v1/sprites/det/exec", Value::Null)
        .await;
    assert_eq!(list["sessions"], json!([]));
    let mut ws = c.ws(&format!("/v1/sprites/det/exec/{id}")).await;
    let mut got = Received::default();
    read_until(&mut ws, &mut got, |g| g.exit.is_some()).await;
    assert_eq!(got.stdout, b"one\ntwo\n");
    assert_eq!(got.texts.len(), 1);
    // Kill by JSON body of an unknown session: 404.
    let answer = c
        .req(reqwest::Method::POST, "/v1/sprites/det/exec/1/kill")
        .json(&json!({ "signal": "SIGKILL", "timeout": 1 }))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_tty_session_dies_after_max_run_after_disconnect() {
    let sim = sim().await;
    let c = Client::of(&sim);
    c.create("orphan").await;
    let mut ws = c
        .ws("/v1/sprites/orphan/exec?cmd=sleep&cmd=30&max_run_after_disconnect=200ms")
        .await;
    let mut got = Received::default();
    read_until(&mut ws, &mut got, |g| !g.texts.is_empty()).await;
    let id = got.texts[0]["session_id"].as_u64().unwrap();
    drop(ws);
    let sprite = sim.state.sprite("orphan").unwrap();
    let session = sprite.session(&id.to_string()).unwrap();
    let code = tokio::time::timeout(Duration::from_secs(5), session.wait())
        .await
        .unwrap();
    assert_eq!(code, 128 + 9);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tty_sessions_run_on_a_terminal_and_end_with_an_exit_message() {
    let sim = sim().await;
    let c = Client::of(&sim);
    c.create("term").await;
    let script = "stty size; read x; echo \"[$x]\"; exit 2";
    let mut ws = c
        .ws(&format!(
            "/v1/sprites/term/exec?cmd=sh&cmd=-c&cmd={}&tty=true&cols=100&rows=30",
            url::form_urlencoded::byte_serialize(script.as_bytes()).collect::<String>()
        ))
        .await;
    let mut raw = Vec::new();
    let mut texts = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut sent = false;
    loop {
        let m = tokio::time::timeout_at(deadline, ws.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        match m {
            Message::Binary(b) => raw.extend_from_slice(&b),
            Message::Text(t) => {
                let v: Value = serde_json::from_str(t.as_str()).unwrap();
                let done = v["type"] == "exit";
                texts.push(v);
                if done {
                    break;
                }
            }
            _ => {}
        }
        if !sent && String::from_utf8_lossy(&raw).contains("30 100") {
            ws.send(Message::Binary(b"hi\r".to_vec().into()))
                .await
                .unwrap();
            sent = true;
        }
    }
    assert_eq!(texts[0]["type"], "session_info");
    assert_eq!(texts[0]["tty"], true);
    assert_eq!(texts.last().unwrap()["exit_code"], 2);
    assert!(
        String::from_utf8_lossy(&raw).contains("[hi]"),
        "{:?}",
        String::from_utf8_lossy(&raw)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_round_trip_and_never_leave_the_sprite() {
    let sim = sim().await;
    let c = Client::of(&sim);
    c.create("fs").await;
    let put = |path: &str, body: &'static [u8]| {
        c.req(
            reqwest::Method::PUT,
            &format!("/v1/sprites/fs/fs/write?{path}"),
        )
        .body(body)
        .send()
    };
    let answer = put("path=a/b.txt&mkdirParents=true&mode=0600", b"\x00\xffdata")
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let answer = put("path=nodir/x.txt", b"x").await.unwrap();
    assert_eq!(answer.status(), 404, "no parents without mkdirParents");
    let read = c
        .req(
            reqwest::Method::GET,
            "/v1/sprites/fs/fs/read?path=/home/sprite/a/b.txt",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(read.bytes().await.unwrap().as_ref(), b"\x00\xffdata");
    let (status, list) = c
        .json(
            reqwest::Method::GET,
            "/v1/sprites/fs/fs/list?path=a&workingDir=/home/sprite",
            Value::Null,
        )
        .await;
    assert_eq!(status, 200);
    let e = &list["entries"][0];
    assert_eq!(
        (e["name"].as_str(), e["path"].as_str()),
        (Some("b.txt"), Some("/home/sprite/a/b.txt"))
    );
    assert_eq!(
        (e["type"].as_str(), e["isDir"].as_bool()),
        (Some("file"), Some(false))
    );
    assert_eq!(
        (e["size"].as_u64(), e["mode"].as_str()),
        (Some(6), Some("0600"))
    );
    let (_, one) = c
        .json(
            reqwest::Method::GET,
            "/v1/sprites/fs/fs/list?path=a/b.txt",
            Value::Null,
        )
        .await;
    assert_eq!(
        one["entries"].as_array().unwrap().len(),
        1,
        "a file lists as itself"
    );
    let (status, _) = c
        .json(
            reqwest::Method::POST,
            "/v1/sprites/fs/fs/rename",
            json!({ "source": "a/b.txt", "dest": "/tmp/c.txt", "workingDir": "/home/sprite" }),
        )
        .await;
    assert_eq!(status, 200);
    assert!(sim.sprite_root("fs").unwrap().join("tmp/c.txt").exists());
    let (status, err) = c
        .json(
            reqwest::Method::GET,
            "/v1/sprites/fs/fs/read?path=a/b.txt",
            Value::Null,
        )
        .await;
    assert_eq!((status, err["code"].as_str()), (404, Some("ENOENT")));
    let (status, err) = c
        .json(
            reqwest::Method::DELETE,
            "/v1/sprites/fs/fs/delete?path=/home/sprite",
            Value::Null,
        )
        .await;
    assert_eq!((status, err["code"].as_str()), (400, Some("ENOTEMPTY")));
    let (status, _) = c
        .json(
            reqwest::Method::DELETE,
            "/v1/sprites/fs/fs/delete?path=/home/sprite/a&recursive=true",
            Value::Null,
        )
        .await;
    assert_eq!(status, 200);

    // Confinement: `..` stops at the sprite's `/`, absolute paths are the sprite's, and a
    // link to a host directory leads nowhere.
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), b"host").unwrap();
    let home = sim.sprite_root("fs").unwrap().join("home/sprite");
    std::os::unix::fs::symlink(outside.path(), home.join("link")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret"), home.join("file-link")).unwrap();
    for path in [
        "../../../../../../../../etc/passwd".to_owned(),
        "/etc/passwd".to_owned(),
        outside.path().join("secret").to_string_lossy().into_owned(),
        "link/secret".to_owned(),
        "file-link".to_owned(),
    ] {
        let read = c
            .req(reqwest::Method::GET, "/v1/sprites/fs/fs/read")
            .query(&[("path", path.as_str())])
            .send()
            .await
            .unwrap();
        let status = read.status().as_u16();
        let body = read.bytes().await.unwrap();
        assert!(status == 404 || status == 400, "{path}: {status}");
        assert_ne!(body.as_ref(), b"host", "{path}");
        let write = c
            .req(reqwest::Method::PUT, "/v1/sprites/fs/fs/write")
            .query(&[
                ("path", format!("{path}-w").as_str()),
                ("mkdirParents", "true"),
            ])
            .body("evil")
            .send()
            .await
            .unwrap();
        let _ = write.status();
        let (_, list) = c
            .json(
                reqwest::Method::GET,
                &format!(
                    "/v1/sprites/fs/fs/list?path={}",
                    url::form_urlencoded::byte_serialize(path.as_bytes()).collect::<String>()
                ),
                Value::Null,
            )
            .await;
        let listed = list["entries"].as_array().cloned().unwrap_or_default();
        assert!(
            listed.iter().all(|e| e["name"] != "secret"),
            "{path}: {list}"
        );
    }
    let names: Vec<_> = std::fs::read_dir(outside.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["secret"], "nothing was written outside");
    assert_eq!(
        std::fs::read(outside.path().join("secret")).unwrap(),
        b"host"
    );
    assert!(!std::path::Path::new("/etc/passwd-w").exists());
    let write = c
        .req(
            reqwest::Method::PUT,
            "/v1/sprites/fs/fs/write?path=link/new",
        )
        .body("evil")
        .send()
        .await
        .unwrap();
    assert_eq!(write.status(), 400);
    assert!(!outside.path().join("new").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_copy_the_disk_and_restore_kills_sessions() {
    let sim = sim().await;
    let c = Client::of(&sim);
    c.create("cp").await;
    let write = |body: &'static str| {
        c.req(reqwest::Method::PUT, "/v1/sprites/cp/fs/write?path=f.txt")
            .body(body)
            .send()
    };
    write("before").await.unwrap();
    let answer = c
        .req(reqwest::Method::POST, "/v1/sprites/cp/checkpoint")
        .json(&json!({ "comment": "first" }))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.headers()["content-type"], "application/x-ndjson");
    let text = answer.text().await.unwrap();
    let last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], "complete");
    assert_eq!(last["data"], "Checkpoint v1 created");
    let (_, list) = c
        .json(
            reqwest::Method::GET,
            "/v1/sprites/cp/checkpoints",
            Value::Null,
        )
        .await;
    assert_eq!(list[0]["id"], "v1");
    assert_eq!(list[0]["comment"], "first");
    let (status, _) = c
        .json(
            reqwest::Method::GET,
            "/v1/sprites/cp/checkpoints/v1",
            Value::Null,
        )
        .await;
    assert_eq!(status, 200);
    let (status, _) = c
        .json(
            reqwest::Method::GET,
            "/v1/sprites/cp/checkpoints/v9",
            Value::Null,
        )
        .await;
    assert_eq!(status, 404);
    write("after").await.unwrap();
    let mut ws = c.ws("/v1/sprites/cp/exec?cmd=sleep&cmd=30").await;
    let mut got = Received::default();
    read_until(&mut ws, &mut got, |g| !g.texts.is_empty()).await;
    let text = c
        .req(
            reqwest::Method::POST,
            "/v1/sprites/cp/checkpoints/v1/restore",
        )
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(text.lines().last().unwrap().contains("complete"), "{text}");
    read_until(&mut ws, &mut got, |g| g.exit.is_some()).await;
    assert_eq!(got.exit, Some(137));
    let read = c
        .req(reqwest::Method::GET, "/v1/sprites/cp/fs/read?path=f.txt")
        .send()
        .await
        .unwrap();
    assert_eq!(read.text().await.unwrap(), "before");
}

#[test]
fn durations_and_signals_parse_as_go_and_posix_write_them() {
    use super::session::{parse_duration, parse_signal};
    assert_eq!(parse_duration("10s"), Some(Duration::from_secs(10)));
    assert_eq!(parse_duration("1m30s"), Some(Duration::from_secs(90)));
    assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
    assert_eq!(parse_duration("0"), Some(Duration::ZERO));
    assert_eq!(parse_duration("7"), Some(Duration::from_secs(7)));
    assert_eq!(parse_duration("soon"), None);
    assert_eq!(parse_duration("5x"), None);
    assert_eq!(
        parse_signal("SIGTERM"),
        Some(nix::sys::signal::Signal::SIGTERM)
    );
    assert_eq!(
        parse_signal("kill"),
        Some(nix::sys::signal::Signal::SIGKILL)
    );
    assert_eq!(parse_signal("2"), Some(nix::sys::signal::Signal::SIGINT));
    assert_eq!(parse_signal("NOPE"), None);
    assert!(api::valid_name("a"));
    assert!(api::valid_name("a-1"));
    assert!(!api::valid_name(&"a".repeat(64)));
}

/// A simulator whose exec sockets take `fault` (one rule on `exec`; attaching is `exec.output`).
async fn sim_with_exec_fault(fault: &str) -> SpritesSim {
    SpritesSim::builder()
        .linger(Duration::from_millis(50))
        .idle(Duration::from_millis(300))
        .faults(FaultPlan::parse(&format!("exec={fault}")).unwrap())
        .start()
        .await
        .unwrap()
}

/// The id of the one session running on `sprite` (listed from the moment its socket answers).
async fn running_session(c: &Client, sprite: &str) -> u64 {
    let (_, list) = c
        .json(
            reqwest::Method::GET,
            &format!("/v1/sprites/{sprite}/exec"),
            Value::Null,
        )
        .await;
    list["sessions"][0]["id"]
        .as_u64()
        .expect("a running session")
}

/// Reads `ws` to its end: whether it ended without a close frame, and what it carried.
async fn read_to_end<S>(ws: &mut S) -> (bool, Received)
where
    S: futures::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    let mut got = Received::default();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match tokio::time::timeout_at(deadline, ws.next())
            .await
            .expect("timed out")
        {
            Some(Ok(Message::Close(_))) => return (false, got),
            Some(Ok(message)) => got.take(message),
            Some(Err(_)) | None => return (true, got),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_exec_socket_breaks_mid_frame_and_the_session_runs_on_to_be_attached() {
    let sim = sim_with_exec_fault("cut:5").await;
    let c = Client::of(&sim);
    c.create("cut").await;
    let mut ws = c
        .ws("/v1/sprites/cut/exec?cmd=sh&cmd=-c&cmd=echo%20one%3B%20sleep%201%3B%20echo%20two")
        .await;
    let (broken, got) = read_to_end(&mut ws).await;
    assert!(broken, "the socket ends without a close frame");
    assert!(got.texts.is_empty() && got.exit.is_none(), "{got:?}");

    // The session acted: attaching (another operation, not faulted) replays it whole.
    let id = running_session(&c, "cut").await;
    let mut ws = c.ws(&format!("/v1/sprites/cut/exec/{id}")).await;
    let mut got = Received::default();
    read_until(&mut ws, &mut got, |g| g.exit.is_some()).await;
    assert_eq!(got.stdout, b"one\ntwo\n");
    assert_eq!(got.exit, Some(0));
    assert_eq!(sim.server().log().count("exec"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silenced_exec_socket_sends_no_frame_while_the_session_runs() {
    let sim = sim_with_exec_fault("silence").await;
    let c = Client::of(&sim);
    c.create("quiet").await;
    let mut silent = c
        .ws("/v1/sprites/quiet/exec?cmd=sh&cmd=-c&cmd=echo%20one%3B%20sleep%201")
        .await;
    // The session ran to its exit: attaching shows it.
    let id = running_session(&c, "quiet").await;
    let mut ws = c.ws(&format!("/v1/sprites/quiet/exec/{id}")).await;
    let (broken, got) = read_to_end(&mut ws).await;
    assert!(!broken, "the attached socket closes after the linger");
    assert_eq!(got.stdout, b"one\n");
    assert_eq!(got.exit, Some(0));
    // The linger has passed for the silenced socket too, yet it carried nothing (not
    // session_info, not the output, not the exit, not the close) and it is still open: only the
    // client's idle bound can end it.
    tokio::task::yield_now().await;
    assert!(
        futures::FutureExt::now_or_never(silent.next()).is_none(),
        "the silenced socket sent a frame or ended"
    );
}

/// sprites-py 0.7.2 asks for 100 per page on every list, over the documented 1–50: the page is
/// capped at 50, with a continuation token to the rest, never refused.
#[tokio::test]
async fn a_page_size_over_the_documented_maximum_is_capped_not_refused() {
    let sim = sim().await;
    sim.set_rate_limits(false);
    let c = Client::of(&sim);
    for i in 0..51 {
        c.create(&format!("s-{i:02}")).await;
    }
    let (status, page) = c
        .json(
            reqwest::Method::GET,
            "/v1/sprites?max_results=100",
            Value::Null,
        )
        .await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["sprites"].as_array().unwrap().len(), 50);
    assert_eq!(page["has_more"], true);
    assert_eq!(page["next_continuation_token"], "s-49");
    let (status, page) = c
        .json(
            reqwest::Method::GET,
            "/v1/sprites?max_results=100&continuation_token=s-49",
            Value::Null,
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(page["sprites"][0]["name"], "s-50");
    assert_eq!(page["has_more"], false);
}
