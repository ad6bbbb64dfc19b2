//! Each standard tool end to end against the embedded `local` provider.

mod common;

use common::{fixture, local};
use sandbox_sdk_core::CreateSpec;
use sandbox_sdk_core::prelude::*;
use sandbox_tools::ToolSet;
use serde_json::json;
use std::time::Duration;

#[tokio::test]
async fn create_is_idempotent_by_key_and_list_shows_only_ours() {
    let f = fixture("create-idem").await;
    let again = f
        .ok(
            "sandbox_create_v1",
            json!({"idempotency_key": "create-idem"}),
        )
        .await;
    assert_eq!(again.structured["sandbox_id"], f.sandbox_id.as_str());
    assert_eq!(again.structured["state"], "running");
    assert_eq!(
        again.structured["labels"]["sandbox_tools_owner"],
        "test-create-idem"
    );

    // A sandbox made outside the tools is not ours: not listed, not reachable.
    let foreign = f.provider.create(&CreateSpec::new()).await.unwrap();
    let listed = f.ok("sandbox_list_v1", json!({})).await;
    let ids: Vec<&str> = listed.structured["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["sandbox_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [f.sandbox_id.as_str()]);
    f.err(
        "sandbox_connect_v1",
        json!({"sandbox_id": foreign.id()}),
        "not_found",
    )
    .await;
    f.err(
        "sandbox_destroy_v1",
        json!({"sandbox_id": foreign.id()}),
        "not_found",
    )
    .await;
    f.err(
        "sandbox_run_v1",
        json!({"command": "true", "sandbox_id": foreign.id()}),
        "not_found",
    )
    .await;
    foreign.destroy().await.unwrap();
}

#[tokio::test]
async fn connect_switches_the_current_sandbox_and_destroy_forgets_it() {
    let f = fixture("connect-a").await;
    let first = f.sandbox_id.clone();
    let second = f
        .ok("sandbox_create_v1", json!({"idempotency_key": "connect-b"}))
        .await;
    let second = second.structured["sandbox_id"].as_str().unwrap().to_owned();
    assert_ne!(first, second);
    assert_eq!(f.tools.current_sandbox().unwrap().id(), second);

    let back = f
        .ok("sandbox_connect_v1", json!({"sandbox_id": first}))
        .await;
    assert!(
        back.text.contains("now the current sandbox"),
        "{}",
        back.text
    );
    assert_eq!(f.tools.current_sandbox().unwrap().id(), first);

    // A call may name another sandbox without switching.
    f.ok(
        "sandbox_file_write_v1",
        json!({"path": "where.txt", "content": "b", "sandbox_id": second}),
    )
    .await;
    f.err(
        "sandbox_file_read_v1",
        json!({"path": "where.txt"}),
        "not_found",
    )
    .await;

    f.ok("sandbox_destroy_v1", json!({"sandbox_id": first}))
        .await;
    assert!(f.tools.current_sandbox().is_none());
    let r = f
        .err(
            "sandbox_run_v1",
            json!({"command": "true"}),
            "invalid_input",
        )
        .await;
    assert!(r.text.contains("sandbox_create_v1"), "{}", r.text);
    f.err(
        "sandbox_connect_v1",
        json!({"sandbox_id": first}),
        "not_found",
    )
    .await;
    f.ok("sandbox_destroy_v1", json!({"sandbox_id": second}))
        .await;
}

#[tokio::test]
async fn run_keeps_stdout_and_stderr_apart_with_cwd_env_and_exit_code() {
    let f = fixture("run").await;
    f.ok("sandbox_file_mkdir_v1", json!({"path": "sub"})).await;
    let r = f
        .ok(
            "sandbox_run_v1",
            json!({
                "command": "echo out-$GREETING; echo err >&2; pwd; exit 3",
                "cwd": "sub",
                "env": {"GREETING": "hi"},
            }),
        )
        .await;
    assert_eq!(r.structured["exit_code"], 3);
    let stdout = r.structured["stdout"]["text"].as_str().unwrap();
    assert!(stdout.starts_with("out-hi\n"), "{stdout}");
    assert!(stdout.trim_end().ends_with("/sub"), "{stdout}");
    assert_eq!(r.structured["stderr"]["text"], "err\n");
    assert!(
        r.text.starts_with("exit code 3\n--- stdout ---\nout-hi\n"),
        "{}",
        r.text
    );
    assert!(r.text.contains("--- stderr ---\nerr\n"), "{}", r.text);

    f.err(
        "sandbox_run_v1",
        json!({"command": "true", "env": {"1BAD": "x"}}),
        "invalid_input",
    )
    .await;
    f.err("sandbox_run_v1", json!({"command": "  "}), "invalid_input")
        .await;
    f.err("sandbox_run_v1", json!({"cmd": "true"}), "invalid_input")
        .await;
}

#[tokio::test]
async fn run_kills_at_its_timeout_and_returns_the_output_so_far() {
    let f = fixture("run-timeout").await;
    let started = std::time::Instant::now();
    let r = f
        .ok(
            "sandbox_run_v1",
            json!({"command": "echo before; sleep 30; echo after", "timeout_secs": 0.5}),
        )
        .await;
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(r.structured["timed_out"], true);
    assert_eq!(r.structured["stdout"]["text"], "before\n");
    assert!(r.text.starts_with("timed out after 0.5s"), "{}", r.text);
}

#[tokio::test]
async fn run_output_is_capped_head_and_tail() {
    let f = common::fixture_with(
        "run-cap",
        sandbox_tools::ToolConfig {
            max_output_bytes: 100,
            ..Default::default()
        },
        |b| b,
    )
    .await;
    let r = f
        .ok(
            "sandbox_run_v1",
            json!({"command": "echo START; seq 1 20000; echo END; seq 1 5 >&2"}),
        )
        .await;
    let out = r.structured["stdout"]["text"].as_str().unwrap();
    assert!(out.starts_with("START\n"), "{out}");
    assert!(out.ends_with("END\n"), "{out}");
    assert!(out.contains("bytes cut from the middle of stdout"), "{out}");
    assert!(r.structured["stdout"]["cut_bytes"].as_u64().unwrap() > 100_000);
    assert_eq!(r.structured["stderr"]["text"], "1\n2\n3\n4\n5\n");
    assert_eq!(r.structured["stderr"]["cut_bytes"], 0);
}

#[tokio::test]
async fn background_processes_start_report_output_and_die() {
    let f = fixture("background").await;
    let started = f
        .ok(
            "sandbox_process_start_v1",
            json!({"command": "echo ready; echo warn >&2; sleep 30"}),
        )
        .await;
    let pid = started.structured["pid"].as_str().unwrap().to_owned();
    let mut seen = None;
    for _ in 0..200 {
        let r = f.ok("sandbox_process_output_v1", json!({"pid": pid})).await;
        if r.structured["stdout"]["text"] == "ready\n" && r.structured["stderr"]["text"] == "warn\n"
        {
            seen = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let seen = seen.expect("output never arrived");
    assert_eq!(seen.structured["running"], true);
    assert!(seen.text.contains("is running"), "{}", seen.text);

    f.ok("sandbox_process_kill_v1", json!({"pid": pid})).await;
    let mut ended = false;
    for _ in 0..200 {
        let r = f.ok("sandbox_process_output_v1", json!({"pid": pid})).await;
        if r.structured["running"] == false {
            assert!(r.text.contains("exited: killed by signal"), "{}", r.text);
            ended = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(ended, "process never ended");
    f.err(
        "sandbox_process_output_v1",
        json!({"pid": "999999"}),
        "not_found",
    )
    .await;
}

#[tokio::test]
async fn files_write_read_list_stat_move_remove() {
    let f = fixture("files").await;
    let w = f
        .ok(
            "sandbox_file_write_v1",
            json!({"path": "dir/a.txt", "content": "one\ntwo\nthree\n"}),
        )
        .await;
    assert_eq!(w.structured["bytes"], 14);

    let r = f
        .ok("sandbox_file_read_v1", json!({"path": "dir/a.txt"}))
        .await;
    assert_eq!(r.text, "one\ntwo\nthree\n");
    assert_eq!(r.structured["total_lines"], 3);
    let r = f
        .ok(
            "sandbox_file_read_v1",
            json!({"path": "dir/./a.txt", "start_line": 2, "end_line": 2}),
        )
        .await;
    assert_eq!(r.text, "two\n");
    let r = f
        .ok(
            "sandbox_file_read_v1",
            json!({"path": "dir/a.txt", "start_line": 2, "end_line": -1}),
        )
        .await;
    assert_eq!(r.text, "two\nthree\n");
    f.err(
        "sandbox_file_read_v1",
        json!({"path": "dir/a.txt", "start_line": 9}),
        "invalid_input",
    )
    .await;
    f.err(
        "sandbox_file_read_v1",
        json!({"path": "nope.txt"}),
        "not_found",
    )
    .await;

    f.ok(
        "sandbox_file_write_v1",
        json!({"path": "bin.dat", "content": "AAEC/w==", "encoding": "base64"}),
    )
    .await;
    let r = f
        .err(
            "sandbox_file_read_v1",
            json!({"path": "bin.dat"}),
            "invalid_input",
        )
        .await;
    assert!(r.text.contains("not UTF-8"), "{}", r.text);

    f.ok("sandbox_file_mkdir_v1", json!({"path": "dir/sub/deeper"}))
        .await;
    let l = f.ok("sandbox_file_list_v1", json!({"path": "dir"})).await;
    let names: Vec<&str> = l.structured["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a.txt", "sub"]);
    let l = f
        .ok("sandbox_file_list_v1", json!({"path": "dir", "depth": 3}))
        .await;
    assert_eq!(l.structured["total"], 3);

    let s = f
        .ok("sandbox_file_stat_v1", json!({"path": "dir/a.txt"}))
        .await;
    assert_eq!(s.structured["kind"], "file");
    assert_eq!(s.structured["size"], 14);
    let s = f
        .ok("sandbox_file_stat_v1", json!({"path": "missing"}))
        .await;
    assert_eq!(s.structured["exists"], false);

    f.ok(
        "sandbox_file_write_v1",
        json!({"path": "b.txt", "content": "b"}),
    )
    .await;
    f.err(
        "sandbox_file_move_v1",
        json!({"from": "dir/a.txt", "to": "b.txt"}),
        "conflict",
    )
    .await;
    f.ok(
        "sandbox_file_move_v1",
        json!({"from": "dir/a.txt", "to": "c.txt"}),
    )
    .await;
    let r = f.ok("sandbox_file_read_v1", json!({"path": "c.txt"})).await;
    assert_eq!(r.text, "one\ntwo\nthree\n");
    f.ok(
        "sandbox_file_move_v1",
        json!({"from": "c.txt", "to": "b.txt", "overwrite": true}),
    )
    .await;

    f.ok("sandbox_file_remove_v1", json!({"path": "dir"})).await;
    let s = f.ok("sandbox_file_stat_v1", json!({"path": "dir"})).await;
    assert_eq!(s.structured["exists"], false);
    f.err(
        "sandbox_file_remove_v1",
        json!({"path": "."}),
        "invalid_input",
    )
    .await;
    f.err(
        "sandbox_file_remove_v1",
        json!({"path": "dir"}),
        "not_found",
    )
    .await;
}

#[tokio::test]
async fn reads_are_cut_at_whole_lines_and_say_where_to_go_on() {
    let f = common::fixture_with(
        "read-cap",
        sandbox_tools::ToolConfig {
            max_output_bytes: 20,
            ..Default::default()
        },
        |b| b,
    )
    .await;
    let content: String = (1..=10).map(|i| format!("line {i}\n")).collect();
    f.ok(
        "sandbox_file_write_v1",
        json!({"path": "l.txt", "content": content}),
    )
    .await;
    let r = f.ok("sandbox_file_read_v1", json!({"path": "l.txt"})).await;
    assert_eq!(r.structured["content"], "line 1\nline 2\n");
    assert_eq!(r.structured["truncated"], true);
    assert!(r.text.contains("read on with start_line=3"), "{}", r.text);
}

#[tokio::test]
async fn preview_link_points_at_the_port() {
    let f = fixture("preview").await;
    let r = f.ok("sandbox_preview_link_v1", json!({"port": 8080})).await;
    assert_eq!(r.structured["url"], "http://127.0.0.1:8080");
    assert_eq!(r.structured["private"], false);
    f.err(
        "sandbox_preview_link_v1",
        json!({"port": 0}),
        "invalid_input",
    )
    .await;
    f.err(
        "sandbox_preview_link_v1",
        json!({"port": 70000}),
        "invalid_input",
    )
    .await;
}

#[tokio::test]
async fn a_set_built_from_a_sandbox_works_on_it_without_lifecycle_tools() {
    let (provider, _dir) = local();
    let sandbox: std::sync::Arc<dyn Sandbox> =
        std::sync::Arc::from(provider.create(&CreateSpec::new()).await.unwrap());
    let tools = ToolSet::for_sandbox(sandbox.clone()).unwrap();
    assert!(tools.get("sandbox_create_v1").is_none());
    assert!(tools.get("sandbox_destroy_v1").is_none());
    let r = tools
        .call("sandbox_run_v1", json!({"command": "echo ok"}))
        .await;
    assert_eq!(r.structured["stdout"]["text"], "ok\n", "{}", r.text);
    let r = tools
        .call(
            "sandbox_run_v1",
            json!({"command": "true", "sandbox_id": "other"}),
        )
        .await;
    assert_eq!(r.error_kind(), Some("not_found"));
    let r = tools.call("no_such_tool", json!({})).await;
    assert_eq!(r.error_kind(), Some("unknown_tool"));
    assert!(r.text.contains("sandbox_run_v1"), "{}", r.text);
    sandbox.destroy().await.unwrap();
}

#[tokio::test]
async fn without_an_implicit_sandbox_every_call_names_its_own() {
    // A set shared by clients that cannot be told apart: one client's create must not become
    // another's target.
    let config = sandbox_tools::ToolConfig {
        implicit_sandbox: false,
        ..sandbox_tools::ToolConfig::default()
    };
    let f = common::fixture_with("explicit", config, |b| b).await;
    let r = f
        .err(
            "sandbox_run_v1",
            json!({"command": "true"}),
            "invalid_input",
        )
        .await;
    assert!(r.text.contains("sandbox_id is required"), "{}", r.text);
    f.err(
        "sandbox_file_read_v1",
        json!({"path": "a.txt"}),
        "invalid_input",
    )
    .await;
    let named = f
        .ok(
            "sandbox_run_v1",
            json!({"command": "echo hi", "sandbox_id": f.sandbox_id}),
        )
        .await;
    assert_eq!(named.structured["stdout"]["text"], "hi\n");

    // A set built for one sandbox still sends unnamed calls there.
    let (provider, _dir) = local();
    let sandbox: std::sync::Arc<dyn Sandbox> =
        std::sync::Arc::from(provider.create(&CreateSpec::new()).await.unwrap());
    let bound = ToolSet::builder()
        .sandbox(sandbox)
        .config(sandbox_tools::ToolConfig {
            implicit_sandbox: false,
            ..sandbox_tools::ToolConfig::default()
        })
        .build()
        .unwrap();
    let r = bound
        .call("sandbox_run_v1", json!({"command": "echo bound"}))
        .await;
    assert!(!r.is_error, "{}", r.text);
}
