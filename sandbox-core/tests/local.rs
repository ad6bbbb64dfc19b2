//! Behaviour of the embedded `local` provider, against real child processes and a real filesystem.
#![cfg(feature = "local")]

use futures::StreamExt;
use sandbox_sdk_core::local::{CAPABILITIES, LocalProvider, LocalSandbox};
use sandbox_sdk_core::prelude::*;
use sandbox_sdk_core::{
    Capability, Command, CreateSpec, ErrorKind, FileKind, Level, ListFilter, ListOptions,
    PreviewModel, Process, ProcessEvent, PtySize, SandboxState,
};
use std::time::Duration;
use tokio::io::AsyncWriteExt;

async fn sandbox() -> Cleanup {
    Cleanup(
        LocalProvider::new()
            .create_local(&CreateSpec::new())
            .await
            .expect("create a local sandbox"),
    )
}

/// A sandbox that is destroyed when the test ends, even when it fails half way, so a failing
/// test leaves no process or directory behind.
struct Cleanup(LocalSandbox);

impl std::ops::Deref for Cleanup {
    type Target = LocalSandbox;
    fn deref(&self) -> &LocalSandbox {
        &self.0
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let sandbox = self.0.clone();
        // Already destroyed by the test is fine (NotFound); run on a runtime of its own.
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for cleanup");
            let _ = runtime.block_on(sandbox.destroy());
        })
        .join();
    }
}

/// Whether process `pid` is gone (no entry in /proc, or a zombie awaiting its reaper).
fn gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

/// Whether process `pid` is stopped by a signal.
fn stopped(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('T'))
    })
}

/// Polls `condition` every 10ms for up to 10s.
async fn eventually(what: &str, condition: impl Fn() -> bool) {
    for _ in 0..1000 {
        if condition() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("still not true after 10s: {what}");
}

/// Reads stdout events until `lines` complete lines arrived; returns them.
async fn read_lines(process: &mut Process, lines: usize) -> Vec<String> {
    let mut text = String::new();
    while text.matches('\n').count() < lines {
        match process.next_event().await {
            Some(Ok(ProcessEvent::Stdout(b))) => text.push_str(&String::from_utf8_lossy(&b)),
            Some(Ok(ProcessEvent::Stderr(_))) => {}
            other => panic!("expected output, got {other:?}"),
        }
    }
    text.lines().map(str::to_owned).collect()
}

#[tokio::test]
async fn exec_keeps_stdout_and_stderr_apart_and_reports_the_exit_code() {
    let sb = sandbox().await;
    let out = sb
        .run(&Command::shell(
            "printf out1; printf err1 >&2; printf out2; exit 3",
        ))
        .await
        .unwrap();
    assert_eq!(&out.stdout[..], b"out1out2");
    assert_eq!(&out.stderr[..], b"err1");
    assert_eq!(out.status.code, Some(3));
    assert_eq!(out.status.signal, None);
    assert!(!out.status.emulated);
    sb.destroy().await.unwrap();
}

#[tokio::test]
async fn output_streams_before_the_process_ends() {
    let sb = sandbox().await;
    let mut p = sb
        .exec(&Command::shell("echo ready; exec sleep 100"))
        .await
        .unwrap();
    assert_eq!(read_lines(&mut p, 1).await, ["ready"]);
    p.kill().await.unwrap();
    let status = p.wait().await.unwrap();
    assert_eq!(status.signal, Some(9));
    assert_eq!(status.code, None);
    sb.destroy().await.unwrap();
}

#[tokio::test]
async fn env_and_cwd_apply_and_relative_paths_resolve_in_the_sandbox() {
    let sb = Cleanup(
        LocalProvider::new()
            .create_local(&CreateSpec::new().env("FROM_SPEC", "spec value"))
            .await
            .unwrap(),
    );
    sb.mkdir("sub/dir").await.unwrap();
    let out = sb
        .run(
            &Command::shell(
                "printf '%s|%s|' \"$FROM_SPEC\" \"$FROM_CMD\"; pwd; echo made > here.txt",
            )
            .cwd("sub/dir")
            .env("FROM_CMD", "it's $HOME `x` \"q\""),
        )
        .await
        .unwrap();
    let expected_dir = sb.dir().join("sub/dir").canonicalize().unwrap();
    assert_eq!(
        out.stdout_lossy(),
        format!(
            "spec value|it's $HOME `x` \"q\"|{}\n",
            expected_dir.display()
        )
    );
    assert_eq!(
        sb.read_to_string("sub/dir/here.txt").await.unwrap(),
        "made\n"
    );
    // The default cwd is the sandbox directory.
    let out = sb.run(&Command::new("pwd")).await.unwrap();
    assert_eq!(
        out.stdout_lossy().trim_end(),
        sb.dir().canonicalize().unwrap().display().to_string()
    );
    // Running as the current user, by name, is allowed.
    let me = sb.run(&Command::new("id").arg("-un")).await.unwrap();
    let me = me.stdout_lossy().trim_end().to_owned();
    let out = sb.run(&Command::new("true").user(me)).await.unwrap();
    assert!(out.status.success());
    // A missing cwd is NotFound naming it, and nothing runs.
    let err = sb
        .exec(&Command::new("pwd").cwd("no/such/dir"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert!(err.to_string().contains("no/such/dir"), "{err}");
    sb.destroy().await.unwrap();
}

#[tokio::test]
async fn stdin_round_trips_and_defaults_to_dev_null() {
    let sb = sandbox().await;
    let mut p = sb.exec(&Command::new("cat").stdin()).await.unwrap();
    let mut stdin = p.take_stdin().expect("stdin was asked for");
    stdin.write_all(b"hello\n\x00\xffworld").await.unwrap();
    stdin.shutdown().await.unwrap();
    drop(stdin);
    let out = p.output().await.unwrap();
    assert_eq!(&out.stdout[..], b"hello\n\x00\xffworld");
    assert!(out.status.success());

    let mut p = sb.exec(&Command::new("cat")).await.unwrap();
    assert!(p.take_stdin().is_none());
    let out = p.output().await.unwrap();
    assert!(out.stdout.is_empty());
    assert!(out.status.success());
    sb.destroy().await.unwrap();
}

#[tokio::test]
async fn kill_takes_down_the_whole_process_tree() {
    let sb = sandbox().await;
    let mut p = sb
        .exec(&Command::shell("sleep 100 & echo $!; echo $$; sleep 100"))
        .await
        .unwrap();
    let pids: Vec<i32> = read_lines(&mut p, 2)
        .await
        .iter()
        .map(|l| l.parse().unwrap())
        .collect();
    assert!(pids.iter().all(|pid| !gone(*pid)));
    p.kill().await.unwrap();
    let status = p.wait().await.unwrap();
    assert_eq!(status.signal, Some(9));
    for pid in pids {
        eventually(&format!("process {pid} is gone"), || gone(pid)).await;
    }
    sb.destroy().await.unwrap();
}

#[tokio::test]
async fn dropping_a_foreground_handle_kills_its_process_group() {
    let sb = sandbox().await;
    let mut p = sb
        .exec(&Command::shell("sleep 100 & echo $!; sleep 100"))
        .await
        .unwrap();
    let child: i32 = read_lines(&mut p, 1).await[0].parse().unwrap();
    let leader: i32 = p.pid().parse().unwrap();
    drop(p);
    eventually("the dropped process's group is gone", || {
        gone(child) && gone(leader)
    })
    .await;
    sb.destroy().await.unwrap();
}

#[tokio::test]
async fn the_process_timeout_kills_the_group_and_ends_with_a_timeout_error() {
    let sb = sandbox().await;
    let mut p = sb
        .exec(&Command::shell("sleep 100 & echo $!; sleep 100").timeout(Duration::from_millis(300)))
        .await
        .unwrap();
    let child: i32 = read_lines(&mut p, 1).await[0].parse().unwrap();
    let err = p.wait().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout);
    let text = err.to_string();
    assert!(
        text.contains("sleep 100") && text.contains("300ms"),
        "{text}"
    );
    eventually("the timed-out group is gone", || gone(child)).await;

    // A command that ends in time is not affected.
    let out = sb
        .run(&Command::new("true").timeout(Duration::from_secs(60)))
        .await
        .unwrap();
    assert!(out.status.success());
    sb.destroy().await.unwrap();
}

#[tokio::test]
async fn the_timeout_error_of_a_command_with_secret_args_does_not_show_them() {
    let sb = sandbox().await;
    let folded = sandbox_sdk_core::shell::fold_into_shell(
        &Command::new("sleep")
            .arg("100")
            .env("TOKEN", "canary-timeout-secret"),
    )
    .unwrap()
    .timeout(Duration::from_millis(100));
    let err = sb.exec(&folded).await.unwrap().wait().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout);
    let text = format!("{err} {err:?}");
    assert!(
        !text.contains("canary-timeout-secret") && text.contains("sh <2 arguments redacted>"),
        "{text}"
    );
    sb.destroy().await.unwrap();
}

#[tokio::test]
async fn background_processes_can_be_attached_and_killed_by_tag() {
    let sb = sandbox().await;
    let cmd = Command::shell("printf ready; sleep 100")
        .background()
        .tag("web");
    let pid: i32 = sb.exec(&cmd).await.unwrap().pid().parse().unwrap();
    let listed = sb.processes().await.unwrap();
    assert!(
        listed.iter().any(|p| p.tag.as_deref() == Some("web")),
        "{listed:?}"
    );
    let attached = sb.attach("web").await.unwrap();
    assert_eq!(attached.pid(), pid.to_string());
    sb.kill_process("web").await.unwrap();
    assert!(attached.wait().await.unwrap().signal.is_some());
    eventually("the tagged process is gone", || gone(pid)).await;
    let err = sb.attach("no-such-tag").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    sb.destroy().await.unwrap();
}

#[tokio::test]
async fn background_processes_outlive_their_handle_and_can_be_listed_attached_and_killed() {
    let sb = sandbox().await;
    let mut p = sb
        .exec(
            &Command::shell(
                "echo started; echo warn >&2; i=0; while [ $i -lt 3000 ]; do echo tick; i=$((i+1)); sleep 0.02; done",
            )
                .background()
                .tag("ticker"),
        )
        .await
        .unwrap();
    assert!(p.is_streaming_emulated());
    let pid = p.pid().to_owned();
    assert_eq!(read_lines(&mut p, 1).await[0], "started");
    drop(p);

    let listed = sb.processes().await.unwrap();
    let info = listed.iter().find(|i| i.pid == pid).expect("listed");
    assert!(info.running);
    assert_eq!(info.tag.as_deref(), Some("ticker"));
    assert_eq!(info.argv[0], "sh");

    // Nothing reads the output, yet the process keeps running: attach sees new ticks (and only
    // output from now on).
    let mut attached = sb.attach(&pid).await.unwrap();
    let lines = read_lines(&mut attached, 2).await;
    assert!(lines.iter().any(|l| l == "tick"), "{lines:?}");
    assert!(!lines.iter().any(|l| l == "started"), "{lines:?}");

    sb.kill_process(&pid).await.unwrap();
    let mut status = None;
    while let Some(event) = attached.next().await {
        if let ProcessEvent::Exit(s) = event.unwrap() {
            status = Some(s);
        }
    }
    assert_eq!(status.unwrap().signal, Some(9));
    let listed = sb.processes().await.unwrap();
    assert!(!listed.iter().find(|i| i.pid == pid).unwrap().running);

    // Attaching to a finished process gives its exit at once.
    let status = sb.attach(&pid).await.unwrap().wait().await.unwrap();
    assert_eq!(status.signal, Some(9));

    let err = sb.kill_process("999999999").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert!(err.to_string().contains("999999999"), "{err}");
    assert_eq!(
        sb.attach("not-a-pid").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    sb.destroy().await.unwrap();
}

#[tokio::test]
async fn a_background_handle_streams_the_whole_output_and_the_exit() {
    let sb = sandbox().await;
    let p = sb
        .exec(&Command::shell("echo one; echo two >&2; exit 4").background())
        .await
        .unwrap();
    let out = p.output().await.unwrap();
    assert_eq!(out.stdout_lossy(), "one\n");
    assert_eq!(out.stderr_lossy(), "two\n");
    assert_eq!(out.status.code, Some(4));

    let p = sb
        .exec(
            &Command::new("sleep")
                .arg("100")
                .background()
                .timeout(Duration::from_millis(200)),
        )
        .await
        .unwrap();
    assert_eq!(p.wait().await.unwrap_err().kind(), ErrorKind::Timeout);
    sb.destroy().await.unwrap();
}

#[tokio::test]
async fn files_round_trip_every_byte_value_and_large_streams() {
    let sb = sandbox().await;
    let all: Vec<u8> = (0..=255u8).collect();
    let t = sb
        .write_file("bin/all-bytes", Bytes::from(all.clone()))
        .await
        .unwrap();
    assert_eq!(t.bytes, 256);
    assert!(!t.emulated);
    assert_eq!(&sb.read_file("bin/all-bytes").await.unwrap()[..], &all[..]);
    // A command sees the same bytes.
    let out = sb
        .run(&Command::new("cat").arg("bin/all-bytes"))
        .await
        .unwrap();
    assert_eq!(&out.stdout[..], &all[..]);

    let big: Vec<u8> = (0..5 * 1024 * 1024 + 17)
        .map(|i: usize| (i * 31 % 251) as u8)
        .collect();
    let t = sb
        .upload(
            "deep/er/big.bin",
            Box::pin(std::io::Cursor::new(big.clone())),
        )
        .await
        .unwrap();
    assert_eq!(t.bytes, big.len() as u64);
    let mut download = sb.download("deep/er/big.bin").await.unwrap();
    assert!(!download.is_emulated());
    let mut got = Vec::new();
    let mut chunks = 0;
    while let Some(chunk) = download.next().await {
        let chunk = chunk.unwrap();
        assert!(chunk.len() <= 64 * 1024);
        chunks += 1;
        got.extend_from_slice(&chunk);
    }
    assert!(chunks > 1);
    assert!(got == big, "downloaded bytes differ");

    // Upload replaces an existing file.
    sb.write_file("deep/er/big.bin", Bytes::from_static(b"small"))
        .await
        .unwrap();
    assert_eq!(sb.read_to_string("deep/er/big.bin").await.unwrap(), "small");
    let info = sb.stat("deep/er/big.bin").await.unwrap();
    assert_eq!(
        (info.kind, info.size, info.name.as_str()),
        (FileKind::File, 5, "big.bin")
    );

    sb.rename("deep/er/big.bin", "moved/here.bin")
        .await
        .unwrap();
    assert!(!sb.exists("deep/er/big.bin").await.unwrap());
    assert_eq!(sb.read_to_string("moved/here.bin").await.unwrap(), "small");
    sb.remove("deep").await.unwrap();
    assert!(!sb.exists("deep/er").await.unwrap());
    sb.mkdir("moved").await.unwrap();
    // Writing over a directory, or mkdir over a file, is refused and says so.
    let err = sb.write_file("moved", Bytes::new()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Validation, "{err}");
    let err = sb.mkdir("moved/here.bin").await.unwrap_err();
    assert!(err.to_string().contains("moved/here.bin"), "{err}");
    sb.destroy().await.unwrap();
}

#[tokio::test]
async fn missing_files_are_not_found_naming_the_path() {
    let sb = sandbox().await;
    for err in [
        sb.read_file("missing/file.txt").await.unwrap_err(),
        sb.stat("missing/file.txt").await.unwrap_err(),
        sb.remove("missing/file.txt").await.unwrap_err(),
        sb.rename("missing/file.txt", "x").await.unwrap_err(),
        sb.list_files("missing/file.txt", ListOptions::default())
            .await
            .unwrap_err(),
    ] {
        assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
        assert!(err.to_string().contains("missing/file.txt"), "{err}");
        assert_eq!(err.provider(), Some("local"));
        assert_eq!(err.sandbox_id(), Some(sb.id()));
    }
    sb.destroy().await.unwrap();
}

#[tokio::test]
async fn list_files_descends_to_the_requested_depth() {
    let sb = sandbox().await;
    sb.write_file("a/b/c/deep.txt", Bytes::from_static(b"x"))
        .await
        .unwrap();
    sb.write_file("a/top.txt", Bytes::from_static(b"xy"))
        .await
        .unwrap();
    let paths = |infos: Vec<sandbox_sdk_core::FileInfo>| -> Vec<String> {
        infos.into_iter().map(|i| i.path).collect()
    };
    let one = sb.list_files("a", ListOptions { depth: 1 }).await.unwrap();
    assert_eq!(paths(one.clone()), ["a/b", "a/top.txt"]);
    assert_eq!(one[0].kind, FileKind::Dir);
    assert_eq!((one[1].kind, one[1].size), (FileKind::File, 2));
    let two = sb.list_files("a", ListOptions { depth: 2 }).await.unwrap();
    assert_eq!(paths(two), ["a/b", "a/b/c", "a/top.txt"]);
    let all = sb.list_files("a", ListOptions { depth: 10 }).await.unwrap();
    assert_eq!(paths(all), ["a/b", "a/b/c", "a/b/c/deep.txt", "a/top.txt"]);
    sb.destroy().await.unwrap();
}

#[tokio::test]
async fn a_non_utf8_file_name_is_a_validation_error_naming_it() {
    use std::os::unix::ffi::OsStrExt;
    let sb = sandbox().await;
    sb.mkdir("odd").await.unwrap();
    let name = std::ffi::OsStr::from_bytes(b"bad\xffname");
    std::fs::write(sb.dir().join("odd").join(name), b"x").unwrap();
    let err = sb
        .list_files("odd", ListOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Validation);
    assert!(err.to_string().contains("bad\u{fffd}name"), "{err}");
    sb.destroy().await.unwrap();
}

#[tokio::test]
async fn bad_commands_are_rejected_before_anything_runs() {
    let sb = sandbox().await;
    let cases = [
        (Command::default(), ErrorKind::Validation),
        (Command::new(""), ErrorKind::Validation),
        (Command::new("echo").arg("a\0b"), ErrorKind::Validation),
        (
            Command::new("echo").env("BAD-NAME", "v"),
            ErrorKind::Validation,
        ),
        (
            Command::new("echo").pty(PtySize::default()),
            ErrorKind::NotSupported,
        ),
        (
            Command::new("echo").user("no-such-user-here"),
            ErrorKind::NotSupported,
        ),
        (
            Command::new("definitely-not-a-program-xyz"),
            ErrorKind::NotFound,
        ),
    ];
    for (command, kind) in cases {
        let err = sb.exec(&command).await.unwrap_err();
        assert_eq!(err.kind(), kind, "{command:?}: {err}");
        assert_eq!(err.provider(), Some("local"));
        assert_eq!(err.sandbox_id(), Some(sb.id()));
    }
    let err = sb
        .exec(&Command::new("definitely-not-a-program-xyz"))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("definitely-not-a-program-xyz"),
        "{err}"
    );
    assert_eq!(
        sb.write_file("a\0b", Bytes::new())
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::Validation
    );
    assert_eq!(sb.stat("").await.unwrap_err().kind(), ErrorKind::Validation);
    sb.destroy().await.unwrap();
}

#[tokio::test]
async fn connect_finds_sandboxes_across_providers_and_rejects_unknown_ids() {
    let sb = Cleanup(
        LocalProvider::new()
            .create_local(&CreateSpec::new().metadata("suite", "connect-test"))
            .await
            .unwrap(),
    );
    sb.write_file("f", Bytes::from_static(b"shared"))
        .await
        .unwrap();
    let other: Box<dyn Sandbox> = LocalProvider::new().connect(sb.id()).await.unwrap();
    assert_eq!(other.read_to_string("f").await.unwrap(), "shared");
    let info = other.info().await.unwrap();
    assert_eq!(info.state, SandboxState::Running);
    assert_eq!(info.provider, "local");
    assert_eq!(info.template, None);
    assert!(info.created_at.is_some());
    assert_eq!(info.metadata["suite"], "connect-test");

    let listed = LocalProvider::new()
        .list_all(&ListFilter::new().metadata("suite", "connect-test"))
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id, sb.id());

    let err = LocalProvider::new()
        .connect("no-such-id")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert!(err.to_string().contains("no-such-id"), "{err}");
    other.destroy().await.unwrap();
    assert!(
        LocalProvider::new()
            .list_all(&ListFilter::new().metadata("suite", "connect-test"))
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn remove_refuses_the_host_root_and_the_sandbox_itself() {
    let sb = sandbox().await;
    for path in [
        "/",
        ".",
        "..",
        "a/../..",
        "../../../../../../../..",
        sb.dir().to_str().unwrap(),
    ] {
        let err = sb.remove(path).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Validation, "{path}: {err}");
    }
    assert!(sb.dir().exists());
    sb.destroy().await.unwrap();
}

#[tokio::test]
async fn destroy_kills_processes_a_finished_command_left_running() {
    let sb = sandbox().await;
    let out = sb
        .run(&Command::shell("sleep 1000 >/dev/null 2>&1 & echo $!"))
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let orphan: i32 = out.stdout_lossy().trim().parse().unwrap();
    assert!(!gone(orphan), "the orphan should still run before destroy");
    sb.destroy().await.unwrap();
    eventually("the orphaned sleep is gone", || gone(orphan)).await;
}

#[tokio::test]
async fn destroy_kills_everything_removes_the_directory_and_only_works_once() {
    let sb = sandbox().await;
    let dir = sb.dir().to_owned();
    let bg = sb
        .exec(&Command::new("sleep").arg("100").background())
        .await
        .unwrap();
    let bg_pid: i32 = bg.pid().parse().unwrap();
    let fg = sb.exec(&Command::new("sleep").arg("100")).await.unwrap();
    let fg_pid: i32 = fg.pid().parse().unwrap();
    sb.destroy().await.unwrap();
    assert!(!dir.exists());
    eventually("every process of the sandbox is gone", || {
        gone(bg_pid) && gone(fg_pid)
    })
    .await;
    assert_eq!(fg.wait().await.unwrap().signal, Some(9));

    let err = sb.destroy().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert!(err.to_string().contains("was destroyed"), "{err}");
    for err in [
        sb.exec(&Command::new("true")).await.unwrap_err(),
        sb.write_file("x", Bytes::new()).await.unwrap_err(),
        sb.read_file("x").await.unwrap_err(),
        sb.info().await.unwrap_err(),
        sb.processes().await.unwrap_err(),
    ] {
        assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
        assert!(err.to_string().contains(sb.id()), "{err}");
    }
    assert_eq!(
        LocalProvider::new()
            .connect(sb.id())
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );
}

#[tokio::test]
async fn waiting_for_a_paused_sandbox_with_a_huge_interval_times_out_without_panicking() {
    let sb = sandbox().await;
    sb.pause().await.unwrap();
    let err = sb
        .wait_until_running(Duration::MAX, Duration::from_secs(1))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    sb.destroy().await.unwrap();
}

#[tokio::test]
async fn pause_stops_every_process_and_resume_continues_them() {
    let sb = sandbox().await;
    let p = sb
        .exec(&Command::new("sleep").arg("100").background())
        .await
        .unwrap();
    let pid: i32 = p.pid().parse().unwrap();
    sb.pause().await.unwrap();
    assert_eq!(sb.info().await.unwrap().state, SandboxState::Paused);
    eventually("the process is stopped", || stopped(pid)).await;
    let err = sb.exec(&Command::new("true")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotRunning);
    sb.resume().await.unwrap();
    assert_eq!(sb.info().await.unwrap().state, SandboxState::Running);
    eventually("the process runs again", || !stopped(pid)).await;
    assert!(
        sb.run(&Command::new("true"))
            .await
            .unwrap()
            .status
            .success()
    );
    sb.destroy().await.unwrap();
    eventually("the process is gone", || gone(pid)).await;
}

#[tokio::test]
async fn capabilities_are_honest_and_unsupported_operations_fail_fast() {
    let sb = sandbox().await;
    assert_eq!(sb.capabilities(), CAPABILITIES);
    let caps = sb.capabilities();
    assert!(caps.flags.preserves_memory_on_pause);
    assert_eq!(caps.flags.preview_model, PreviewModel::Localhost);
    let native = [
        Capability::List,
        Capability::Pause,
        Capability::Background,
        Capability::Streaming,
        Capability::KillProcess,
        Capability::Stdin,
        Capability::FilesUpload,
        Capability::ExposePort,
    ];
    // The code interpreter is core's emulated kernel, run with the host's python3.
    let emulated = [Capability::CodeInterpreter, Capability::StatefulKernel];
    for cap in Capability::ALL {
        let expected = if native.contains(cap) {
            Level::Native
        } else if emulated.contains(cap) {
            Level::Emulated
        } else {
            Level::Unsupported
        };
        assert_eq!(caps.level(*cap), expected, "{cap}");
    }
    let link = sb.preview_link(8080).await.unwrap();
    assert_eq!(link.url, "http://127.0.0.1:8080");
    assert!(link.headers.is_empty() && link.token.is_none());

    let errors = [
        sb.watch(".", true).await.map(|_| ()).unwrap_err(),
        sb.stop().await.unwrap_err(),
        sb.set_timeout(Duration::from_secs(1)).await.unwrap_err(),
        sb.ssh_access(Duration::from_secs(1))
            .await
            .map(|_| ())
            .unwrap_err(),
        sb.fork().await.map(|_| ()).unwrap_err(),
        sb.snapshot(None).await.map(|_| ()).unwrap_err(),
        sb.metrics().await.map(|_| ()).unwrap_err(),
    ];
    for err in errors {
        assert_eq!(err.kind(), ErrorKind::NotSupported, "{err}");
        assert_eq!(err.provider(), Some("local"));
    }
    let err = LocalProvider::new()
        .create(&CreateSpec::new().template("python"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotSupported);
    sb.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotency_key_returns_the_sandbox_already_made() {
    let spec = CreateSpec::new().idempotency_key(format!("key-{}", std::process::id()));
    let provider = LocalProvider::new();
    let a = Cleanup(provider.create_local(&spec).await.unwrap());
    let b = provider.create_local(&spec).await.unwrap();
    assert_eq!(a.id(), b.id());
    // Concurrent creates under one new key agree on one sandbox.
    let key = format!("race-{}", std::process::id());
    let spec = CreateSpec::new().idempotency_key(key);
    let results = futures::future::join_all((0..8).map(|_| {
        let (provider, spec) = (provider.clone(), spec.clone());
        tokio::spawn(async move { provider.create_local(&spec).await.unwrap() })
    }))
    .await;
    let ids: std::collections::BTreeSet<String> = results
        .into_iter()
        .map(|r| r.unwrap().id().to_owned())
        .collect();
    assert_eq!(ids.len(), 1, "{ids:?}");
    let winner = provider.connect(ids.first().unwrap()).await.unwrap();
    winner.destroy().await.unwrap();
    a.destroy().await.unwrap();
}

#[tokio::test]
async fn sandboxes_are_private_directories_under_the_chosen_root() {
    use std::os::unix::fs::PermissionsExt;
    let root = tempfile::tempdir().unwrap();
    let sb = LocalProvider::with_root(root.path())
        .create_local(&CreateSpec::new())
        .await
        .unwrap();
    assert!(sb.dir().starts_with(root.path()));
    let mode = std::fs::metadata(sb.dir()).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    let other = LocalProvider::with_root(root.path())
        .create_local(&CreateSpec::new())
        .await
        .unwrap();
    assert_ne!(sb.id(), other.id());
    sb.destroy().await.unwrap();
    other.destroy().await.unwrap();
}

/// A field of /proc/{pid}/io.
fn io_counter(pid: i32, field: &str) -> Option<u64> {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
    io.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().parse().ok())
}

#[tokio::test]
async fn a_reader_that_does_not_read_holds_the_writer_back() {
    const TOTAL: usize = 8 * 1024 * 1024;
    let sb = sandbox().await;
    let mut p = sb
        .exec(&Command::new("head").args(["-c", &TOTAL.to_string(), "/dev/zero"]))
        .await
        .unwrap();
    let pid: i32 = p.pid().parse().unwrap();
    let mut received = match p.next_event().await {
        Some(Ok(ProcessEvent::Stdout(b))) => b.len(),
        other => panic!("expected stdout, got {other:?}"),
    };
    // With nobody reading, the child blocks on a full pipe: it sleeps having written far less
    // than everything (the pipe holds at most a few hundred KiB).
    eventually("the writer blocks on the full pipe", || {
        stopped_or_sleeping(pid)
    })
    .await;
    let written = io_counter(pid, "wchar").expect("read /proc/<pid>/io");
    assert!(
        written < (TOTAL / 2) as u64,
        "child wrote {written} bytes unread"
    );
    while let Some(event) = p.next_event().await {
        match event.unwrap() {
            ProcessEvent::Stdout(b) => received += b.len(),
            ProcessEvent::Stderr(b) => panic!("unexpected stderr {b:?}"),
            ProcessEvent::Exit(status) => {
                assert!(status.success());
                break;
            }
        }
    }
    assert_eq!(received, TOTAL);
    sb.destroy().await.unwrap();
}

/// Whether `pid` sleeps (state S), as a writer blocked on a full pipe does.
fn stopped_or_sleeping(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('S'))
    })
}

#[test]
fn a_background_exit_is_recorded_after_the_runtime_that_started_it_is_gone() {
    let first = tokio::runtime::Runtime::new().unwrap();
    let (sb, pid) = first.block_on(async {
        let sb = sandbox().await;
        let p = sb
            .exec(&Command::shell("while [ ! -e go ]; do sleep 0.01; done; exit 5").background())
            .await
            .unwrap();
        let pid = p.pid().to_owned();
        (sb, pid)
    });
    drop(first);
    let second = tokio::runtime::Runtime::new().unwrap();
    second.block_on(async {
        let attached = sb.attach(&pid).await.unwrap();
        sb.write_file("go", Bytes::new()).await.unwrap();
        assert_eq!(attached.wait().await.unwrap().code, Some(5));
        let listed = sb.processes().await.unwrap();
        assert!(!listed.iter().find(|i| i.pid == pid).unwrap().running);
        sb.destroy().await.unwrap();
    });
}

/// A link planted in the sandbox (by one of its processes, say) that points at a host directory:
/// `remove` takes the link away and leaves the directory and everything in it alone, however the
/// path spells the link (trailing slashes, a trailing `.`).
#[tokio::test]
async fn remove_of_a_symlink_removes_the_link_never_what_it_points_to() {
    let sb = sandbox().await;
    let host = tempfile::tempdir().unwrap();
    std::fs::write(host.path().join("precious.txt"), b"keep").unwrap();
    std::fs::create_dir(host.path().join("sub")).unwrap();
    std::fs::write(host.path().join("sub/also.txt"), b"keep").unwrap();
    sb.mkdir("d").await.unwrap();
    let cases = [
        ("link/", host.path().to_owned()),
        ("link//", host.path().to_owned()),
        ("link/.", host.path().to_owned()),
        ("link", host.path().to_owned()),
        ("d/link/", host.path().to_owned()),
        ("link/", host.path().join("precious.txt")),
    ];
    for (path, points_to) in cases {
        let link = sb.dir().join(path.trim_end_matches(['/', '.']));
        std::os::unix::fs::symlink(&points_to, &link).unwrap();
        sb.remove(path).await.unwrap();
        assert!(
            std::fs::symlink_metadata(&link).is_err(),
            "{path}: the link is still there"
        );
        assert_eq!(
            std::fs::read(host.path().join("precious.txt")).ok(),
            Some(b"keep".to_vec()),
            "{path}: the host directory was emptied"
        );
        assert_eq!(
            std::fs::read(host.path().join("sub/also.txt")).ok(),
            Some(b"keep".to_vec()),
            "{path}: the host directory was emptied"
        );
    }
    sb.destroy().await.unwrap();
}

/// The guards "never the sandbox's own directory, never a host root" hold for where a path leads
/// once its links are resolved, not only for how it is spelled.
#[tokio::test]
async fn remove_guards_hold_after_resolving_links() {
    let sb = sandbox().await;
    sb.write_file("keep.txt", Bytes::from_static(b"keep"))
        .await
        .unwrap();
    let base = sb.dir().parent().unwrap().to_owned();
    std::os::unix::fs::symlink(&base, sb.dir().join("up")).unwrap();
    std::os::unix::fs::symlink(sb.dir(), sb.dir().join("self")).unwrap();
    let absolute = format!("{}/up/work", sb.dir().display());
    for path in [
        "up/work",
        "up/work/",
        "up/./work",
        "self/..",
        "self/../work",
        absolute.as_str(),
    ] {
        let err = sb.remove(path).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Validation, "{path}: {err}");
        assert!(err.to_string().contains(path), "{path}: {err}");
        assert_eq!(
            sb.read_to_string("keep.txt").await.unwrap(),
            "keep",
            "{path}"
        );
    }
    sb.destroy().await.unwrap();
}

/// The uid of this test process, as the owner of a directory it just made.
fn my_uid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(tempfile::tempdir().unwrap().path())
        .unwrap()
        .uid()
}

/// Another user who can write to the root (or owns it) could plant a sandbox's working
/// directory: such a root is refused, with a Validation error naming it and the problem, before
/// anything is created in it.
#[tokio::test]
async fn a_root_others_can_write_to_or_that_another_user_owns_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    let refused = |root: std::path::PathBuf, problem: &'static str| async move {
        let err = LocalProvider::with_root(&root)
            .create_local(&CreateSpec::new())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Validation, "{err}");
        let text = err.to_string();
        assert!(
            text.contains(&root.display().to_string()) && text.contains(problem),
            "{text}"
        );
        if let Ok(entries) = std::fs::read_dir(&root) {
            assert_eq!(entries.count(), 0, "{text}");
        }
    };
    for mode in [0o777, 0o1777, 0o770, 0o702] {
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(mode)).unwrap();
        refused(shared.clone(), "writable by").await;
    }
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o700)).unwrap();
    if my_uid() == 0 {
        // The attack as reported: another user's directory, open to everyone.
        std::os::unix::fs::chown(&shared, Some(65534), Some(65534)).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
        refused(shared.clone(), "owned by uid 65534").await;
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o755)).unwrap();
        refused(shared.clone(), "owned by uid 65534").await;
        // A link to a private directory of ours, but the link belongs to someone else (who
        // could point it elsewhere later).
        let mine = dir.path().join("mine");
        std::fs::create_dir(&mine).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&mine, &link).unwrap();
        std::os::unix::fs::lchown(&link, Some(65534), Some(65534)).unwrap();
        refused(link, "owned by uid 65534").await;
        // A dangling link of someone else's: refused as such, and not followed.
        let target = dir.path().join("planted-target");
        let dangling = dir.path().join("dangling");
        std::os::unix::fs::symlink(&target, &dangling).unwrap();
        std::os::unix::fs::lchown(&dangling, Some(65534), Some(65534)).unwrap();
        refused(dangling, "owned by uid 65534").await;
        assert!(!target.exists(), "the link was followed");
    } else {
        // Not root: a directory root owns stands for another user's.
        refused("/".into(), "owned by uid 0").await;
    }
}

#[tokio::test]
async fn the_default_root_is_per_user_and_private() {
    use std::os::unix::fs::MetadataExt;
    let provider = LocalProvider::new();
    let expected = std::env::temp_dir().join(format!("sandbox-sdk-local-{}", my_uid()));
    assert_eq!(provider.root(), expected);
    let sb = Cleanup(provider.create_local(&CreateSpec::new()).await.unwrap());
    let meta = std::fs::metadata(provider.root()).unwrap();
    assert_eq!(meta.uid(), my_uid());
    assert_eq!(meta.mode() & 0o077, 0, "mode {:o}", meta.mode());
    sb.destroy().await.unwrap();
}

/// Set in the environment of the child test run that probes what the host environment gives.
const ENV_PROBE: &str = "LOCAL_TEST_ENV_PROBE";

/// The host's credentials (and anything else it holds) do not reach a sandbox's processes
/// unless the provider was told to pass them on. The host environment of a test process cannot
/// be changed safely, so this runs the probe below in a child test run with canaries set.
#[test]
fn the_host_environment_is_not_inherited_unless_asked() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "host_env_probe",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ENV_PROBE, "1")
        .env("E2B_API_KEY", "canary-e2b")
        .env("DAYTONA_API_KEY", "canary-daytona")
        .env("FLY_API_TOKEN", "canary-fly")
        .env("SOME_HOST_VAR", "canary-other")
        .env("LANG", "C.UTF-8")
        .env("TZ", "UTC")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("1 passed"),
        "the probe did not run:\n{stdout}"
    );
}

/// The environment a command of a sandbox made by `provider` sees, as `NAME=value` lines.
async fn env_seen(provider: LocalProvider) -> (String, String) {
    let sb = Cleanup(
        provider
            .create_local(&CreateSpec::new().env("FROM_SPEC", "spec"))
            .await
            .unwrap(),
    );
    let out = sb
        .run(&Command::new("env").env("FROM_CMD", "cmd"))
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let id = sb.id().to_owned();
    sb.destroy().await.unwrap();
    (out.stdout_lossy(), id)
}

/// Run by the test above, in a child process with canaries in its environment; does nothing
/// in an ordinary run.
#[tokio::test]
async fn host_env_probe() {
    if std::env::var_os(ENV_PROBE).is_none() {
        return;
    }
    let canaries = ["canary-e2b", "canary-daytona", "canary-fly", "canary-other"];
    let (env, id) = env_seen(LocalProvider::new()).await;
    for canary in canaries {
        assert!(
            !env.contains(canary),
            "{canary} reached the sandbox:\n{env}"
        );
    }
    let lines: Vec<&str> = env.lines().collect();
    let path = format!("PATH={}", std::env::var("PATH").unwrap());
    let home = format!("HOME={}", std::env::var("HOME").unwrap());
    let marker = format!("SANDBOX_SDK_LOCAL_SANDBOX={id}");
    for expected in [
        path.as_str(),
        home.as_str(),
        "LANG=C.UTF-8",
        "TZ=UTC",
        "FROM_SPEC=spec",
        "FROM_CMD=cmd",
        marker.as_str(),
    ] {
        assert!(lines.contains(&expected), "{expected} missing:\n{env}");
    }
    // Named variables on top of the default list; nothing else.
    let (env, _) =
        env_seen(LocalProvider::new().inherit_env(["E2B_API_KEY", "NOT_SET_ANYWHERE"])).await;
    assert!(env.lines().any(|l| l == "E2B_API_KEY=canary-e2b"), "{env}");
    assert!(env.lines().any(|l| l == "TZ=UTC"), "{env}");
    for canary in &canaries[1..] {
        assert!(
            !env.contains(canary),
            "{canary} reached the sandbox:\n{env}"
        );
    }
    // Everything, when asked.
    let (env, _) = env_seen(LocalProvider::new().inherit_all_env()).await;
    for canary in canaries {
        assert!(env.contains(canary), "{canary} missing:\n{env}");
    }
}

/// Starts `sleep 1000` in a process group of its own whose id is `pgid`, by steering the next
/// pid of this pid namespace; `None` where that is not allowed (it takes CAP_SYS_ADMIN), or when
/// other processes keep taking the pid first.
fn unrelated_group_with_id(pgid: i32) -> Option<std::process::Child> {
    use std::os::unix::process::CommandExt;
    for _ in 0..200 {
        std::fs::write("/proc/sys/kernel/ns_last_pid", (pgid - 1).to_string()).ok()?;
        let mut child = std::process::Command::new("sleep")
            .arg("1000")
            .process_group(0)
            .spawn()
            .unwrap();
        if child.id() == pgid as u32 {
            return Some(child);
        }
        child.kill().unwrap();
        child.wait().unwrap();
    }
    None
}

/// After a sandbox's process ended and was reaped, its group id is free and may be taken by an
/// unrelated process group of this user: neither destroy nor a process handle signals it.
#[tokio::test]
async fn destroy_and_kill_never_signal_a_group_whose_id_was_reused() {
    use std::os::unix::process::ExitStatusExt;
    let sb = sandbox().await;
    let p = sb
        .exec(&Command::shell("read line; true").stdin().background())
        .await
        .unwrap();
    let pid: i32 = p.pid().parse().unwrap();
    let attached = sb.attach(&pid.to_string()).await.unwrap();
    let mut p = p;
    drop(p.take_stdin());
    assert!(p.wait().await.unwrap().success());
    let Some(mut unrelated) = unrelated_group_with_id(pid) else {
        eprintln!("skipped: cannot make a process group with a chosen id here");
        return;
    };
    attached.kill().await.unwrap();
    sb.destroy().await.unwrap();
    // Had anything here sent it SIGKILL, that is how it ended; our SIGTERM comes later.
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGTERM).unwrap();
    let status = unrelated.wait().unwrap();
    assert_eq!(status.signal(), Some(15), "{status:?}");
}

/// Unsetting the marker variable does not take a process out of destroy's reach: it is still in
/// the group of the command that started it, or a child of a process of the sandbox.
#[tokio::test]
async fn destroy_kills_processes_that_unset_the_marker() {
    let sb = sandbox().await;
    // Left behind by a finished command, in its group.
    let out = sb
        .run(&Command::shell(
            "unset SANDBOX_SDK_LOCAL_SANDBOX; sleep 1000 >/dev/null 2>&1 & echo $!",
        ))
        .await
        .unwrap();
    let left: i32 = out.stdout_lossy().trim().parse().unwrap();
    // In a session of its own, under a command that still runs.
    let mut p = sb
        .exec(&Command::shell(
            "unset SANDBOX_SDK_LOCAL_SANDBOX; setsid sleep 1000 >/dev/null 2>&1 & echo $!; wait",
        ))
        .await
        .unwrap();
    let detached: i32 = read_lines(&mut p, 1).await[0].parse().unwrap();
    // The same from a background command.
    let mut bg = sb
        .exec(
            &Command::shell(
                "unset SANDBOX_SDK_LOCAL_SANDBOX; setsid sleep 1000 >/dev/null 2>&1 & echo $!; wait",
            )
            .background(),
        )
        .await
        .unwrap();
    let detached_bg: i32 = read_lines(&mut bg, 1).await[0].parse().unwrap();
    for pid in [left, detached, detached_bg] {
        assert!(!gone(pid), "{pid} should run before destroy");
    }
    sb.destroy().await.unwrap();
    for pid in [left, detached, detached_bg] {
        eventually(&format!("process {pid} is gone"), || gone(pid)).await;
    }
}

/// A host directory holding a file the sandbox must not reach, and a sandbox with links to it
/// (and to `/etc/passwd`, `/proc`, `/proc/self/environ`, and up out of the directory by a
/// relative link), as a process of the sandbox or a checked-out repository could plant them.
struct Planted {
    sb: Cleanup,
    host: tempfile::TempDir,
}

impl Planted {
    async fn new() -> Planted {
        let sb = sandbox().await;
        let host = tempfile::tempdir().unwrap();
        std::fs::write(host.path().join("secret.txt"), b"host secret").unwrap();
        std::fs::create_dir(sb.dir().join("sub")).unwrap();
        let links: [(&str, std::path::PathBuf); 6] = [
            ("to-file", host.path().join("secret.txt")),
            ("to-dir", host.path().to_owned()),
            ("to-passwd", "/etc/passwd".into()),
            ("to-environ", "/proc/self/environ".into()),
            ("to-proc", "/proc".into()),
            ("sub/up", "../..".into()),
        ];
        for (name, to) in links {
            std::os::unix::fs::symlink(to, sb.dir().join(name)).unwrap();
        }
        Planted { sb, host }
    }

    fn secret(&self) -> String {
        self.host.path().join("secret.txt").display().to_string()
    }

    /// The host file is untouched and nothing new appeared beside it or beside the work dir.
    fn host_untouched(&self, what: &str) {
        assert_eq!(
            std::fs::read(self.host.path().join("secret.txt")).ok(),
            Some(b"host secret".to_vec()),
            "{what}: the host file changed"
        );
        let names: Vec<_> = std::fs::read_dir(self.host.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            names,
            ["secret.txt"],
            "{what}: something was made on the host"
        );
        let beside: Vec<_> = std::fs::read_dir(self.sb.dir().parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        let mut beside = beside;
        beside.sort();
        assert_eq!(
            beside,
            ["state", "work"],
            "{what}: something was made beside work"
        );
    }
}

/// The error a file primitive must give for a path that leads outside the sandbox's directory.
fn refused(err: &sandbox_sdk_core::Error, sb: &LocalSandbox, path: &str) {
    assert_eq!(err.kind(), ErrorKind::Validation, "{path}: {err}");
    assert!(err.to_string().contains(path), "{path}: {err}");
    assert!(err.to_string().contains("outside"), "{path}: {err}");
    assert_eq!(err.sandbox_id(), Some(sb.id()), "{path}: {err}");
}

/// Reads resolve beneath the sandbox's directory: `..`, absolute host paths and symbolic links
/// that lead out (to a host file, `/etc/passwd`, `/proc/self/environ`, a host directory) are
/// refused with `Validation` naming the path, and nothing of the host is read or listed.
#[tokio::test]
async fn reads_never_leave_the_sandbox_directory() {
    let p = Planted::new().await;
    let sb = &p.sb;
    let secret = p.secret();
    let outside = [
        "../state",
        "sub/../../state",
        "/etc/passwd",
        "/proc/self/environ",
        "/",
        secret.as_str(),
        "to-file",
        "to-dir/secret.txt",
        "to-passwd",
        "to-environ",
        "to-proc/self/environ",
        "sub/up/state",
        "sub/up/work/to-file",
    ];
    for path in outside {
        refused(&sb.read_file(path).await.unwrap_err(), sb, path);
        let err = sb.download(path).await.expect_err(path);
        refused(&err, sb, path);
    }
    // stat and list look at a final link itself; only a path that goes through one is refused.
    for path in [
        "../state",
        "/etc/passwd",
        secret.as_str(),
        "to-dir/secret.txt",
        "to-proc/self/environ",
        "sub/up/state",
    ] {
        refused(&sb.stat(path).await.unwrap_err(), sb, path);
        let err = sb.exists(path).await.unwrap_err();
        refused(&err, sb, path);
    }
    for path in [
        "..", "/", "/etc", "/proc", "to-dir", "to-proc", "sub/up", "../..",
    ] {
        let err = sb
            .list_files(path, ListOptions { depth: 2 })
            .await
            .unwrap_err();
        refused(&err, sb, path);
    }
    // A link itself is listed and stat-ed as a link, without reading what it points at.
    let info = sb.stat("to-environ").await.unwrap();
    assert_eq!(info.kind, FileKind::Symlink);
    let listed = sb.list_files(".", ListOptions { depth: 3 }).await.unwrap();
    let names: Vec<&str> = listed.iter().map(|i| i.path.as_str()).collect();
    assert_eq!(
        names,
        [
            "./sub",
            "./sub/up",
            "./to-dir",
            "./to-environ",
            "./to-file",
            "./to-passwd",
            "./to-proc"
        ]
    );
    assert!(
        listed
            .iter()
            .filter(|i| i.name != "sub")
            .all(|i| i.kind == FileKind::Symlink)
    );
    p.host_untouched("reads");
    sb.destroy().await.unwrap();
}

/// Writes resolve beneath the sandbox's directory too: writing through a link to a host file,
/// into a linked host directory, up with `..` or at an absolute host path is refused with
/// `Validation` naming the path, and the host is left as it was. Removing a link removes only
/// the link.
#[tokio::test]
async fn writes_never_leave_the_sandbox_directory() {
    let p = Planted::new().await;
    let sb = &p.sb;
    let secret = p.secret();
    let beside_host = format!("{}/new.txt", p.host.path().display());
    let outside = [
        "../new.txt",
        "sub/../../new.txt",
        "to-file",
        "to-dir/new.txt",
        "to-dir/deeper/new.txt",
        "sub/up/new.txt",
        secret.as_str(),
        beside_host.as_str(),
    ];
    for path in outside {
        let err = sb
            .write_file(path, Bytes::from_static(b"written"))
            .await
            .unwrap_err();
        refused(&err, sb, path);
        let err = sb
            .upload(path, Box::pin(std::io::Cursor::new(b"uploaded".to_vec())))
            .await
            .unwrap_err();
        refused(&err, sb, path);
        p.host_untouched(path);
    }
    for path in [
        "../made",
        "to-dir/made",
        "sub/up/made",
        beside_host.as_str(),
    ] {
        refused(&sb.mkdir(path).await.unwrap_err(), sb, path);
    }
    for path in [
        "to-dir/secret.txt",
        "../state",
        "sub/up/state",
        secret.as_str(),
    ] {
        refused(&sb.remove(path).await.unwrap_err(), sb, path);
    }
    sb.write_file("mine.txt", Bytes::from_static(b"mine"))
        .await
        .unwrap();
    for (from, to) in [
        ("to-dir/secret.txt", "stolen.txt"),
        ("mine.txt", "to-dir/planted.txt"),
        ("mine.txt", "../planted.txt"),
        ("mine.txt", beside_host.as_str()),
    ] {
        let err = sb.rename(from, to).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Validation, "{from} -> {to}: {err}");
        assert!(err.to_string().contains("outside"), "{from} -> {to}: {err}");
    }
    p.host_untouched("mkdir, remove, rename");
    // The links themselves are the sandbox's own: removing one leaves its target alone.
    sb.remove("to-file").await.unwrap();
    sb.remove("to-dir").await.unwrap();
    p.host_untouched("removing the links");
    assert!(!sb.exists("to-file").await.unwrap());
    sb.destroy().await.unwrap();
}

/// Links and absolute paths that stay inside the sandbox's directory keep working: a relative
/// link, an absolute link to a file of the sandbox, `..` that stays inside, and the directory's
/// own absolute path (as created, and canonical as `pwd` prints it).
#[tokio::test]
async fn links_and_absolute_paths_inside_the_directory_work() {
    let sb = sandbox().await;
    sb.write_file("sub/file.txt", Bytes::from_static(b"inside"))
        .await
        .unwrap();
    let canonical = sb.dir().canonicalize().unwrap();
    std::os::unix::fs::symlink("sub/file.txt", sb.dir().join("rel-link")).unwrap();
    std::os::unix::fs::symlink(canonical.join("sub"), sb.dir().join("abs-link")).unwrap();
    std::os::unix::fs::symlink("../sub", sb.dir().join("sub/self")).unwrap();
    let as_created = format!("{}/sub/file.txt", sb.dir().display());
    let as_canonical = format!("{}/sub/file.txt", canonical.display());
    for path in [
        "rel-link",
        "abs-link/file.txt",
        "sub/self/self/file.txt",
        "sub/../sub/./file.txt",
        as_created.as_str(),
        as_canonical.as_str(),
    ] {
        assert_eq!(sb.read_to_string(path).await.unwrap(), "inside", "{path}");
    }
    // Writing through an inside link writes the file it points at.
    sb.write_file("rel-link", Bytes::from_static(b"changed"))
        .await
        .unwrap();
    assert_eq!(
        std::fs::read(sb.dir().join("sub/file.txt")).unwrap(),
        b"changed"
    );
    sb.write_file("abs-link/new/deep.txt", Bytes::from_static(b"deep"))
        .await
        .unwrap();
    assert_eq!(
        std::fs::read(sb.dir().join("sub/new/deep.txt")).unwrap(),
        b"deep"
    );
    let listed = sb
        .list_files(
            &as_canonical.replace("/file.txt", ""),
            ListOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(listed.len(), 3, "{listed:?}");
    // A link loop ends in an error, not a hang.
    std::os::unix::fs::symlink("loop", sb.dir().join("loop")).unwrap();
    assert!(sb.read_file("loop").await.is_err());
    sb.destroy().await.unwrap();
}

/// What the docs say about commands: exec is not confined. A command's cwd may be `..` or a
/// link out of the directory, and the command reads and writes what the user can.
#[tokio::test]
async fn commands_still_reach_outside_the_directory_as_documented() {
    let sb = sandbox().await;
    let host = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(host.path(), sb.dir().join("out")).unwrap();
    let out = sb.run(&Command::new("pwd").cwd("out")).await.unwrap();
    assert_eq!(
        out.stdout_lossy().trim_end(),
        host.path().canonicalize().unwrap().display().to_string()
    );
    let out = sb
        .run(&Command::shell("echo y > ../beside-work.txt"))
        .await
        .unwrap();
    assert!(out.status.success());
    assert!(sb.dir().parent().unwrap().join("beside-work.txt").exists());
    sb.destroy().await.unwrap();
}

/// The limit the docs state: a process that clears the marker, leaves its group and loses its
/// parent (a daemon's double fork) is out of destroy's reach.
#[tokio::test]
async fn a_daemonized_process_without_the_marker_escapes_destroy_as_documented() {
    let sb = sandbox().await;
    let out = sb
        .run(&Command::shell(
            "unset SANDBOX_SDK_LOCAL_SANDBOX; (setsid sleep 1000 >/dev/null 2>&1 & echo $!)",
        ))
        .await
        .unwrap();
    let escaped: i32 = out.stdout_lossy().trim().parse().unwrap();
    sb.destroy().await.unwrap();
    let survived = !gone(escaped);
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(escaped),
        nix::sys::signal::SIGKILL,
    );
    assert!(survived, "destroy reached it: update the module docs");
}

#[tokio::test]
async fn reopen_adopts_a_directory_an_earlier_process_left() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let id = "0b5a6a4e-3c1f-4d0e-9a53-0f4b3b7c2d11";
    for sub in ["work", "state"] {
        std::fs::create_dir_all(root.join(id).join(sub)).unwrap();
    }
    std::fs::write(root.join(id).join("work/left.txt"), "from before\n").unwrap();
    let provider = LocalProvider::with_root(&root);
    let sandbox = provider.reopen_local(id).await.expect("adopt");
    assert_eq!(sandbox.id(), id);
    let out = sandbox.run_shell("cat left.txt").await.unwrap();
    assert_eq!(out.stdout_lossy(), "from before\n");
    // Now registered: connect finds it, and a second reopen returns the same sandbox.
    assert_eq!(provider.connect(id).await.unwrap().id(), id);
    provider
        .reopen_local(id)
        .await
        .unwrap()
        .destroy()
        .await
        .unwrap();
    assert!(!root.join(id).exists());
}

#[tokio::test]
async fn reopen_refuses_what_is_not_a_sandbox_directory() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir_all(root.join("not-a-uuid/work")).unwrap();
    let provider = LocalProvider::with_root(&root);
    for id in ["not-a-uuid", "..", "../root", ""] {
        let err = provider.reopen_local(id).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotFound, "{id}");
    }
    // A uuid whose directory is incomplete, or a link to another directory, is not adopted.
    let half = "1c7e4a36-9d52-4f8e-b0a4-5e2f6c8d9a01";
    std::fs::create_dir_all(root.join(half).join("work")).unwrap();
    assert_eq!(
        provider.reopen_local(half).await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    let elsewhere = dir.path().join("elsewhere");
    for sub in ["work", "state"] {
        std::fs::create_dir_all(elsewhere.join(sub)).unwrap();
    }
    let linked = "2d8f5b47-ae63-4a9f-81b5-6f3a7d9e0b12";
    std::os::unix::fs::symlink(&elsewhere, root.join(linked)).unwrap();
    assert_eq!(
        provider.reopen_local(linked).await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    // An upper-case spelling of a real id is not another way in.
    let real = "3e9a6c58-bf74-4b0a-92c6-7a4b8e0f1c23";
    for sub in ["work", "state"] {
        std::fs::create_dir_all(root.join(real).join(sub)).unwrap();
    }
    assert_eq!(
        provider
            .reopen_local(&real.to_uppercase())
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );
}
