//! Commands, replayed from the `spec` cassettes in `tests/cassettes/fly/`: direct exec, env and
//! cwd folding, stdin clean-up, and killed processes.

mod common;

use common::*;
use sandbox_sdk_core::prelude::*;
use sandbox_sdk_core::{Command, ErrorKind};
use std::time::Duration;

#[tokio::test]
async fn a_launch_that_fails_removes_the_stdin_file_it_uploaded() {
    let r = Replay::start("fly_stdin_cleanup").await;
    let sandbox = r.provider().connect_machine(ID).await.unwrap();
    let mut p = sandbox
        .exec(&Command::new("cat").stdin().tag("job"))
        .await
        .unwrap();
    let mut stdin = p.take_stdin().unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut stdin, b"hi")
        .await
        .unwrap();
    tokio::io::AsyncWriteExt::shutdown(&mut stdin)
        .await
        .unwrap();
    let err = p.output().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
    assert!(err.message().contains("process id job"), "{err}");
    r.verify().await;
}

#[tokio::test]
async fn short_commands_use_one_buffered_exec_with_stdin_and_signals() {
    let r = Replay::start("fly_direct_exec").await;
    let fly = r.builder().prefer_direct_exec(true).build().unwrap();
    let sandbox = fly.connect_machine(ID).await.unwrap();
    let mut p = sandbox
        .exec(&Command::new("wc").arg("-c").stdin())
        .await
        .unwrap();
    let mut stdin = p.take_stdin().unwrap();
    // More separate writes than the stdin channel holds, all before any output is read.
    for _ in 0..40 {
        tokio::io::AsyncWriteExt::write_all(&mut stdin, b"x")
            .await
            .unwrap();
    }
    tokio::io::AsyncWriteExt::shutdown(&mut stdin)
        .await
        .unwrap();
    let out = p.output().await.unwrap();
    assert_eq!(out.stdout_lossy(), "40\n");
    assert!(out.status.success());
    let mut p = sandbox
        .exec(&Command::new("cat").stdin().timeout(Duration::from_secs(10)))
        .await
        .unwrap();
    assert!(p.is_streaming_emulated());
    let mut stdin = p.take_stdin().unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut stdin, &[0xff, 0, 0x41])
        .await
        .unwrap();
    drop(stdin);
    assert_eq!(p.output().await.unwrap().stdout_lossy(), "A");
    let out = sandbox
        .exec_buffered(&Command::shell("kill -9 $$").timeout(Duration::from_secs(5)))
        .await
        .unwrap();
    assert_eq!(out.status.signal, Some(9));
    assert_eq!(out.status.code, None);
    r.verify().await;
}

/// `/exec` takes no env or cwd (the flag says `false`): a command sent to the sandbox directly
/// is folded by the adapter with core's `fold_env_cwd`, one sent through core's emulation layer
/// (what `Client` puts around every provider) is folded there and passed on unchanged: one and
/// the same request either way, folded once.
#[tokio::test]
async fn env_and_cwd_are_folded_once_with_or_without_the_client_layer() {
    let r = Replay::start("fly_direct_env_cwd").await;
    let fly = r.builder().prefer_direct_exec(true).build().unwrap();
    let sandbox = fly.connect_machine(ID).await.unwrap();
    sandbox_conformance::checks::env_cwd_folded_once(&sandbox).await;
    r.verify().await;
}

#[tokio::test]
async fn dropped_and_overdue_foreground_processes_are_killed() {
    let r = Replay::start("fly_process_kills").await;
    let fly = r
        .builder()
        .direct_exec_limit(Duration::from_millis(1))
        .poll_interval(Duration::from_millis(200))
        .build()
        .unwrap();
    let sandbox = fly.connect_machine(ID).await.unwrap();
    let process = sandbox
        .exec(&Command::new("sleep").arg("30"))
        .await
        .unwrap();
    assert_eq!(process.pid(), "p1");
    drop(process);
    // The kill runs on a spawned task: give it a moment to reach the server.
    for _ in 0..200 {
        if r.server.request_count() == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(r.server.request_count(), 3, "the drop sent a kill");
    // Longer than the direct limit, so polled; past its timeout it is killed and fails.
    let err = sandbox
        .run(
            &Command::new("sleep")
                .arg("30")
                .timeout(Duration::from_millis(100)),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout);
    assert!(err.message().contains("p2"), "{err}");
    r.verify().await;
}
