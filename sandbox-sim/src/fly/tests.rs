//! The Fly simulator driven with plain HTTP, as PROTOCOL.md describes the wire.

use super::{FlySim, FlySimBuilder};
use crate::{FaultPlan, Simulator};
use serde_json::{Value, json};
use std::time::Duration;

struct Client {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl Client {
    fn new(sim: &FlySim) -> Client {
        Client {
            http: reqwest::Client::new(),
            base: format!("{}/v1/apps/{}", sim.url(), sim.app()),
            token: sim.token().to_owned(),
        }
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
        nonce: Option<&str>,
    ) -> (u16, reqwest::header::HeaderMap, Value) {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        if let Some(nonce) = nonce {
            request = request.header("fly-machine-lease-nonce", nonce);
        }
        let response = request.send().await.expect("request");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.text().await.expect("body");
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, headers, value)
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        let (s, _, v) = self.call(reqwest::Method::GET, path, None, None).await;
        (s, v)
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let (s, _, v) = self
            .call(reqwest::Method::POST, path, Some(body), None)
            .await;
        (s, v)
    }

    async fn create(&self, config: Value) -> String {
        let (status, machine) = self.post("/machines", json!({ "config": config })).await;
        assert_eq!(status, 200, "{machine}");
        machine["id"].as_str().expect("id").to_owned()
    }

    async fn wait(&self, id: &str, state: &str) -> Value {
        let (status, answer) = self
            .get(&format!("/machines/{id}/wait?state={state}&timeout=30"))
            .await;
        assert_eq!(status, 200, "{answer}");
        answer
    }

    async fn exec(&self, id: &str, body: Value) -> (u16, Value) {
        self.post(&format!("/machines/{id}/exec"), body).await
    }

    async fn sh(&self, id: &str, script: &str) -> Value {
        let (status, answer) = self
            .exec(
                id,
                json!({ "command": ["sh", "-c", script], "timeout": 10 }),
            )
            .await;
        assert_eq!(status, 200, "{answer}");
        answer
    }
}

fn quiet() -> FlySimBuilder {
    FlySim::builder().rate_limits(false)
}

#[tokio::test]
async fn a_machine_is_created_started_used_stopped_and_destroyed() {
    let sim = quiet()
        .destroyed_linger(Duration::ZERO)
        .start()
        .await
        .unwrap();
    let fly = Client::new(&sim);
    let (status, machine) = fly
        .post(
            "/machines",
            json!({"region": "ams", "config": {"image": "ubuntu:24.04", "env": {"GREETING": "hi"},
                   "metadata": {"team": "a"}, "init": {"exec": ["sleep", "inf"]}}}),
        )
        .await;
    assert_eq!(status, 200, "{machine}");
    assert_eq!(machine["state"], "created");
    assert_eq!(machine["region"], "ams");
    assert_eq!(machine["config"]["metadata"]["team"], "a");
    assert_eq!(machine["image_ref"]["repository"], "library/ubuntu");
    assert_eq!(machine["instance_id"].as_str().unwrap().len(), 26);
    let id = machine["id"].as_str().unwrap().to_owned();
    let waited = fly.wait(&id, "started").await;
    assert_eq!(waited["ok"], true);
    assert_eq!(waited["state"], "started");
    assert_eq!(waited["version"], machine["instance_id"]);
    assert_eq!(sim.sandboxes(), 1);

    let out = fly.sh(&id, "echo $GREETING; echo oops >&2; exit 3").await;
    assert_eq!(
        out,
        json!({"stdout": "hi\n", "stderr": "oops\n", "exit_code": 3, "exit_signal": 0})
    );
    let (status, out) = fly
        .exec(&id, json!({"command": ["cat"], "stdin": "from stdin"}))
        .await;
    assert_eq!((status, out["stdout"].clone()), (200, json!("from stdin")));
    // The deprecated `cmd` is split on spaces, with no shell.
    let (_, out) = fly.exec(&id, json!({"cmd": "echo a && echo b"})).await;
    assert_eq!(out["stdout"], "a && echo b\n");
    let (_, out) = fly
        .exec(&id, json!({"command": ["no-such-program-xyz"]}))
        .await;
    assert_eq!(out["exit_code"], 127);

    // Stop: processes end, the machine's files are gone on the next boot.
    fly.sh(&id, "echo kept > f.txt").await;
    let (status, answer) = fly.post(&format!("/machines/{id}/stop"), json!({})).await;
    assert_eq!((status, answer), (200, json!({"ok": true})));
    fly.wait(&id, "stopped").await;
    let (status, answer) = fly.exec(&id, json!({"command": ["true"]})).await;
    assert_eq!(status, 412, "{answer}");
    let (status, _) = fly.post(&format!("/machines/{id}/stop"), json!({})).await;
    assert_eq!(status, 200, "stopping a stopped machine succeeds");
    let (status, answer) = fly
        .post(&format!("/machines/{id}/start"), json!(null))
        .await;
    assert_eq!(status, 200);
    assert_eq!(answer["previous_state"], "stopped");
    fly.wait(&id, "started").await;
    let out = fly.sh(&id, "cat f.txt 2>/dev/null || echo gone").await;
    assert_eq!(out["stdout"], "gone\n");
    let (status, answer) = fly
        .post(&format!("/machines/{id}/start"), json!(null))
        .await;
    assert_eq!(status, 412, "{answer}");
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .contains("unable to start machine from current state")
    );

    // A running machine is destroyed only with force; then it is `destroyed`, then gone.
    let (status, _, answer) = fly
        .call(
            reqwest::Method::DELETE,
            &format!("/machines/{id}"),
            None,
            None,
        )
        .await;
    assert_eq!(status, 412, "{answer}");
    let (status, _, answer) = fly
        .call(
            reqwest::Method::DELETE,
            &format!("/machines/{id}?force=true"),
            None,
            None,
        )
        .await;
    assert_eq!((status, answer), (200, json!({"ok": true})));
    fly.wait(&id, "destroyed").await;
    assert_eq!(fly.get(&format!("/machines/{id}")).await.0, 404);
    assert_eq!(sim.sandboxes(), 0);
    assert_eq!(sim.running(), 0);
    let (_, listed) = fly.get("/machines?include_deleted=true").await;
    assert_eq!(listed[0]["state"], "destroyed");
    let (_, listed) = fly.get("/machines").await;
    assert_eq!(listed, json!([]));
    let (status, _, _) = fly
        .call(
            reqwest::Method::DELETE,
            &format!("/machines/{id}?force=true"),
            None,
            None,
        )
        .await;
    assert_eq!(status, 404, "destroying a destroyed machine");
}

#[tokio::test]
async fn suspend_keeps_processes_and_files_and_start_resumes_them() {
    let sim = quiet().start().await.unwrap();
    let fly = Client::new(&sim);
    let id = fly.create(json!({"image": "ubuntu"})).await;
    fly.wait(&id, "started").await;
    fly.sh(&id, "echo 1 > n; (sleep 600 >/dev/null 2>&1 &) ; echo ok")
        .await;
    let (status, _) = fly
        .post(&format!("/machines/{id}/suspend"), json!(null))
        .await;
    assert_eq!(status, 200);
    let waited = fly.wait(&id, "suspended").await;
    assert_eq!(waited["state"], "suspended");
    let (status, _) = fly.exec(&id, json!({"command": ["true"]})).await;
    assert_eq!(status, 412);
    let (status, answer) = fly
        .post(&format!("/machines/{id}/start"), json!(null))
        .await;
    assert_eq!(
        (status, answer["previous_state"].clone()),
        (200, json!("suspended"))
    );
    fly.wait(&id, "started").await;
    assert_eq!(fly.sh(&id, "cat n").await["stdout"], "1\n");
    let (status, _) = fly
        .post(&format!("/machines/{id}/suspend"), json!(null))
        .await;
    assert_eq!(status, 200);
    fly.wait(&id, "suspended").await;
    let (status, answer) = fly
        .post(&format!("/machines/{id}/suspend"), json!(null))
        .await;
    assert_eq!(status, 200, "{answer}");
    // Stop from suspended discards the snapshot.
    fly.post(&format!("/machines/{id}/stop"), json!({})).await;
    fly.wait(&id, "stopped").await;
    let (status, answer) = fly
        .post(&format!("/machines/{id}/suspend"), json!(null))
        .await;
    assert_eq!(status, 412, "{answer}");
}

#[tokio::test]
async fn a_main_process_that_exits_stops_the_machine_with_an_exit_event() {
    let sim = quiet().start().await.unwrap();
    let fly = Client::new(&sim);
    let id = fly
        .create(json!({"image": "ubuntu", "init": {"exec": ["sh", "-c", "sleep 0.2; exit 3"]}, "restart": {"policy": "no"}}))
        .await;
    fly.wait(&id, "stopped").await;
    let (_, events) = fly.get(&format!("/machines/{id}/events?limit=1")).await;
    assert_eq!(events[0]["type"], "exit");
    assert_eq!(events[0]["status"], "stopped");
    assert_eq!(events[0]["request"]["exit_event"]["exit_code"], 3);
    assert!(events[0]["timestamp"].as_u64().unwrap() > 1_600_000_000_000);
}

#[tokio::test]
async fn auth_unknown_ids_routes_and_bad_bodies_answer_like_fly() {
    let sim = quiet().start().await.unwrap();
    let fly = Client::new(&sim);
    let http = reqwest::Client::new();
    let url = format!("{}/v1/apps/{}/machines", sim.url(), sim.app());
    let answer = http.get(&url).bearer_auth("wrong").send().await.unwrap();
    assert_eq!(answer.status().as_u16(), 401);
    let request_id = answer.headers()["fly-request-id"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        request_id.ends_with("-ord") && request_id.len() == 30,
        "{request_id}"
    );
    assert!(answer.json::<Value>().await.unwrap()["error"].is_string());
    let answer = http.get(&url).send().await.unwrap();
    assert_eq!(answer.status().as_u16(), 401);
    let macaroon = http
        .get(&url)
        .header("authorization", format!("FlyV1 {}", sim.token()))
        .send()
        .await
        .unwrap();
    assert_eq!(macaroon.status().as_u16(), 200);

    let (status, answer) = fly.get("/machines/0123456789abcd").await;
    assert_eq!(status, 404);
    assert!(answer["error"].as_str().unwrap().contains("not found"));
    let (status, answer) = fly.get("/nothing/here").await;
    assert_eq!((status, answer), (404, json!("404 page not found\n")));
    let other_app = http
        .get(format!("{}/v1/apps/someone-else/machines", sim.url()))
        .bearer_auth(sim.token())
        .send()
        .await
        .unwrap();
    assert_eq!(other_app.status().as_u16(), 404);

    let (status, answer) = fly.post("/machines", json!({"config": {}})).await;
    assert_eq!(status, 400, "{answer}");
    let (status, answer) = fly
        .post("/machines", json!({"config": {"image": "x"}, "region": 5}))
        .await;
    assert_eq!(status, 400);
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .starts_with("json: cannot unmarshal number")
    );
    let id = fly.create(json!({"image": "ubuntu"})).await;
    fly.wait(&id, "started").await;
    let (status, answer) = fly.post(&format!("/machines/{id}/stop"), json!([1])).await;
    assert_eq!(status, 400);
    assert_eq!(
        answer["error"],
        "json: cannot unmarshal array into Go value of type main.stopRequest"
    );
    let (status, _) = fly.get(&format!("/machines/{id}/wait?timeout=90")).await;
    assert_eq!(status, 400, "a wait over 60 s is invalid_argument");
    let (status, _) = fly.get(&format!("/machines/{id}/wait?state=running")).await;
    assert_eq!(status, 400);
}

#[tokio::test]
async fn leases_guard_mutations_until_released() {
    let sim = quiet().start().await.unwrap();
    let fly = Client::new(&sim);
    let id = fly.create(json!({"image": "ubuntu"})).await;
    fly.wait(&id, "started").await;
    let lease_path = format!("/machines/{id}/lease");
    let (status, lease) = fly
        .post(&lease_path, json!({"ttl": 30, "description": "mine"}))
        .await;
    assert_eq!(status, 201, "{lease}");
    assert_eq!(lease["status"], "success");
    assert_eq!(lease["data"]["description"], "mine");
    let nonce = lease["data"]["nonce"].as_str().unwrap().to_owned();
    assert!(lease["data"]["expires_at"].as_u64().unwrap() > 1_600_000_000);

    let (status, answer) = fly.post(&format!("/machines/{id}/stop"), json!({})).await;
    assert_eq!(status, 409);
    assert_eq!(answer["status"], "error");
    assert!(
        answer["message"]
            .as_str()
            .unwrap()
            .contains("lease currently held by")
    );
    let (status, _) = fly.post(&lease_path, json!({"ttl": 30})).await;
    assert_eq!(status, 409, "someone else cannot take the lease");
    let (status, _) = fly
        .post(
            &format!("/machines/{id}"),
            json!({"config": {"image": "ubuntu"}}),
        )
        .await;
    assert_eq!(status, 409);
    let (status, refreshed) = {
        let (s, _, v) = fly
            .call(
                reqwest::Method::POST,
                &lease_path,
                Some(json!({"ttl": 60})),
                Some(&nonce),
            )
            .await;
        (s, v)
    };
    assert_eq!(status, 201);
    assert_eq!(refreshed["data"]["nonce"], nonce.as_str());
    let (status, shown) = fly.get(&lease_path).await;
    assert_eq!(
        (status, shown["data"]["nonce"].clone()),
        (200, json!(nonce))
    );
    let (_, machine) = fly
        .get(&format!("/machines/{id}?include_leases=true"))
        .await;
    assert_eq!(machine["lease"]["nonce"], nonce.as_str());
    let (status, _, _) = fly
        .call(
            reqwest::Method::POST,
            &format!("/machines/{id}/stop"),
            Some(json!({})),
            Some(&nonce),
        )
        .await;
    assert_eq!(status, 200, "the holder may stop it");
    let (status, _, _) = fly
        .call(reqwest::Method::DELETE, &lease_path, None, Some("wrong"))
        .await;
    assert_eq!(status, 409);
    let (status, _, released) = fly
        .call(reqwest::Method::DELETE, &lease_path, None, Some(&nonce))
        .await;
    assert_eq!(
        (status, released),
        (200, json!({"status": "success", "data": {"ok": true}}))
    );
    assert_eq!(fly.get(&lease_path).await.0, 404);

    // A lease taken with the create: its nonce is in the answer.
    let (_, machine) = fly
        .post(
            "/machines",
            json!({"config": {"image": "ubuntu"}, "lease_ttl": 30, "skip_launch": true}),
        )
        .await;
    assert_eq!(machine["nonce"].as_str().unwrap().len(), 12);
    assert_eq!(machine["state"], "created");
}

#[tokio::test]
async fn lists_filter_by_metadata_state_and_region_and_metadata_can_change() {
    let sim = quiet().start().await.unwrap();
    let fly = Client::new(&sim);
    let a = fly
        .create(json!({"image": "ubuntu", "metadata": {"team": "a", "tier": "1"}}))
        .await;
    let (_, b) = fly
        .post(
            "/machines",
            json!({"region": "ams", "skip_launch": true, "config": {"image": "ubuntu", "metadata": {"team": "b"}}}),
        )
        .await;
    let b = b["id"].as_str().unwrap().to_owned();
    fly.wait(&a, "started").await;
    let ids = |list: Value| -> Vec<String> {
        list.as_array()
            .unwrap()
            .iter()
            .map(|m| m["id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        ids(fly.get("/machines?metadata.team=a").await.1),
        vec![a.clone()]
    );
    assert_eq!(
        ids(fly.get("/machines?metadata.team=a&metadata.tier=2").await.1),
        Vec::<String>::new()
    );
    assert_eq!(
        ids(fly.get("/machines?state=created,stopped").await.1),
        vec![b.clone()]
    );
    assert_eq!(
        ids(fly.get("/machines?region=ams").await.1),
        vec![b.clone()]
    );
    assert_eq!(ids(fly.get("/machines").await.1), [a.clone(), b.clone()]);
    let (_, summary) = fly.get("/machines?summary=true").await;
    assert!(summary[0].get("config").is_none() && summary[0].get("events").is_none());

    let (status, _, _) = fly
        .call(
            reqwest::Method::POST,
            &format!("/machines/{b}/metadata/team"),
            Some(json!({"value": "a"})),
            None,
        )
        .await;
    assert_eq!(status, 204);
    assert_eq!(
        ids(fly.get("/machines?metadata.team=a").await.1),
        [a.clone(), b.clone()]
    );
    let (_, value) = fly.get(&format!("/machines/{b}/metadata/team")).await;
    assert_eq!(value, json!({"value": "a"}));
    let (status, _, _) = fly
        .call(
            reqwest::Method::PATCH,
            &format!("/machines/{b}/metadata"),
            Some(json!({"metadata": {"team": null, "x": "y"}})),
            None,
        )
        .await;
    assert_eq!(status, 204);
    assert_eq!(
        fly.get(&format!("/machines/{b}/metadata")).await.1,
        json!({"x": "y"})
    );
    let (status, _, _) = fly
        .call(
            reqwest::Method::PUT,
            &format!("/machines/{b}/metadata"),
            Some(json!({"metadata": {"z": "1"}, "machine_version": "stale"})),
            None,
        )
        .await;
    assert_eq!(status, 412);
}

#[tokio::test]
async fn an_exec_past_its_timeout_is_killed_and_answered_408() {
    let sim = quiet()
        .exec_deadline(Duration::from_secs(1))
        .start()
        .await
        .unwrap();
    let fly = Client::new(&sim);
    let id = fly.create(json!({"image": "ubuntu"})).await;
    fly.wait(&id, "started").await;
    // The platform's cap wins over a longer timeout.
    let (status, answer) = fly
        .exec(
            &id,
            json!({"command": ["sh", "-c", "echo started > mark; sleep 30"], "timeout": 20}),
        )
        .await;
    assert_eq!(status, 408, "{answer}");
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .starts_with("deadline_exceeded")
    );
    assert_eq!(fly.sh(&id, "cat mark").await["stdout"], "started\n");
}

/// The API's clock is the test's (paused here), the machines' processes run in real time: a
/// 10 s boot and a 60 s wait pass at once, and exec still runs real commands.
#[tokio::test(start_paused = true)]
async fn a_paused_clock_runs_transitions_and_waits_while_processes_stay_real() {
    let sim = quiet()
        .start_time(Duration::from_secs(10))
        .start()
        .await
        .unwrap();
    let fly = Client::new(&sim);
    let begun = tokio::time::Instant::now();
    let id = fly.create(json!({"image": "ubuntu"})).await;
    assert_eq!(sim.state(&id).as_deref(), Some("starting"));
    let (status, answer) = fly
        .get(&format!("/machines/{id}/wait?state=started&timeout=5"))
        .await;
    assert_eq!(status, 408);
    assert_eq!(
        answer["error"],
        "machine failed to reach desired state, started, currently starting"
    );
    fly.wait(&id, "started").await;
    assert!(begun.elapsed() >= Duration::from_secs(10));
    assert_eq!(fly.sh(&id, "echo real").await["stdout"], "real\n");
    let (status, answer) = fly
        .get(&format!("/machines/{id}/wait?state=stopped&timeout=60"))
        .await;
    assert_eq!(status, 408);
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .ends_with("currently started")
    );
    let (_, answer) = fly
        .get(&format!(
            "/machines/{id}/wait?state=stopped,started&timeout=60"
        ))
        .await;
    assert_eq!(answer["state"], "started");
}

#[tokio::test(start_paused = true)]
async fn the_documented_rate_limits_answer_429() {
    let sim = FlySim::builder()
        .start_time(Duration::ZERO)
        .start()
        .await
        .unwrap();
    let fly = Client::new(&sim);
    let (_, machine) = fly
        .post(
            "/machines",
            json!({"config": {"image": "ubuntu"}, "skip_launch": true}),
        )
        .await;
    let id = machine["id"].as_str().unwrap();
    // Cordon: 1/s per machine with bursts of 3, no Retry-After (Fly documents none).
    for _ in 0..3 {
        assert_eq!(
            fly.post(&format!("/machines/{id}/cordon"), json!(null))
                .await
                .0,
            200
        );
    }
    let (status, headers, answer) = fly
        .call(
            reqwest::Method::POST,
            &format!("/machines/{id}/cordon"),
            None,
            None,
        )
        .await;
    assert_eq!(
        (status, answer),
        (429, json!({"error": "rate limit exceeded"}))
    );
    assert!(headers.get("retry-after").is_none());
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(
        fly.post(&format!("/machines/{id}/cordon"), json!(null))
            .await
            .0,
        200
    );
    // Get Machine: bursts of 10.
    for _ in 0..10 {
        assert_eq!(fly.get(&format!("/machines/{id}")).await.0, 200);
    }
    assert_eq!(fly.get(&format!("/machines/{id}")).await.0, 429);

    let sim = FlySim::builder().retry_after(true).start().await.unwrap();
    let fly = Client::new(&sim);
    for _ in 0..3 {
        assert_eq!(fly.get("/machines").await.0, 200);
    }
    let (status, headers, _) = fly
        .call(reqwest::Method::GET, "/machines", None, None)
        .await;
    assert_eq!(status, 429);
    assert_eq!(headers["retry-after"], "1");
}

#[tokio::test]
async fn faults_apply_by_operation_name() {
    let plan = FaultPlan::parse("create=429:3#1;exec=500#1").unwrap();
    let sim = quiet().faults(plan).start().await.unwrap();
    let fly = Client::new(&sim);
    let (status, headers, answer) = fly
        .call(
            reqwest::Method::POST,
            "/machines",
            Some(json!({"config": {"image": "u"}})),
            None,
        )
        .await;
    assert_eq!(status, 429);
    assert_eq!(headers["retry-after"], "3");
    assert!(headers.contains_key("fly-request-id"));
    assert!(answer["error"].is_string());
    assert_eq!(sim.sandboxes(), 0, "an injected status does not act");
    let id = fly.create(json!({"image": "ubuntu"})).await;
    fly.wait(&id, "started").await;
    assert_eq!(fly.exec(&id, json!({"command": ["true"]})).await.0, 500);
    assert_eq!(fly.exec(&id, json!({"command": ["true"]})).await.0, 200);
    let log = sim.server().log();
    assert_eq!(log.count("create"), 2);
    assert_eq!(log.count("wait"), 1);
    assert_eq!(log.count("exec"), 2);
}

#[tokio::test]
async fn the_registry_starts_it_by_name() {
    let sim = crate::start("fly", 0, FaultPlan::new()).await.unwrap();
    assert_eq!(sim.provider(), "fly");
    let env = sim.env();
    assert!(
        env.iter()
            .any(|(k, v)| *k == "FLY_API_HOSTNAME" && v == sim.url())
    );
    assert!(crate::PROVIDERS.contains(&"fly"));
}

#[tokio::test]
async fn apps_keep_their_machines_apart() {
    let sim = quiet().start().await.unwrap();
    let http = reqwest::Client::new();
    let apps = format!("{}/v1/apps", sim.url());
    let made = http
        .post(&apps)
        .bearer_auth(sim.token())
        .json(&json!({"name": "second", "org_slug": "personal"}))
        .send()
        .await
        .unwrap();
    assert_eq!(made.status().as_u16(), 201);
    let again = http
        .post(&apps)
        .bearer_auth(sim.token())
        .json(&json!({"name": "second", "org_slug": "personal"}))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status().as_u16(), 422);
    assert_eq!(again.json::<Value>().await.unwrap()["status"], "name_taken");
    let first = Client::new(&sim);
    let second = Client {
        base: format!("{apps}/second"),
        ..Client::new(&sim)
    };
    let id = second.create(json!({"image": "ubuntu"})).await;
    assert_eq!(first.get("/machines").await.1, json!([]));
    assert_eq!(first.get(&format!("/machines/{id}")).await.0, 404);
    assert_eq!(second.get(&format!("/machines/{id}")).await.0, 200);
    assert!(!sim.add_app("second") && sim.add_app("third"));
}

#[tokio::test]
async fn each_machine_has_its_own_tmp_where_the_host_allows_it() {
    let sim = quiet().start().await.unwrap();
    let fly = Client::new(&sim);
    let a = fly.create(json!({"image": "ubuntu"})).await;
    let b = fly.create(json!({"image": "ubuntu"})).await;
    fly.wait(&a, "started").await;
    fly.wait(&b, "started").await;
    fly.sh(&a, "echo a > /tmp/fly-sim-own-tmp").await;
    let seen = fly
        .sh(&b, "cat /tmp/fly-sim-own-tmp 2>/dev/null || echo none")
        .await;
    if !super::host::isolates_tmp() {
        println!("no mount namespaces here: machines share the host's /tmp");
        return;
    }
    assert_eq!(seen["stdout"], "none\n");
    assert_eq!(
        fly.sh(&a, "cat /tmp/fly-sim-own-tmp").await["stdout"],
        "a\n"
    );
    // A stop empties it, as a machine boots from its image again.
    fly.post(&format!("/machines/{a}/stop"), json!({})).await;
    fly.wait(&a, "stopped").await;
    fly.post(&format!("/machines/{a}/start"), json!(null)).await;
    fly.wait(&a, "started").await;
    let after = fly
        .sh(&a, "cat /tmp/fly-sim-own-tmp 2>/dev/null || echo none")
        .await;
    assert_eq!(after["stdout"], "none\n");
}
