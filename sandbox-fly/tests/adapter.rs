//! Fly-specific behaviour beyond the conformance scenarios, replayed from the `spec` cassettes
//! in `tests/cassettes/fly/` (chained and timed-out waits, leases, chunked files, idempotent
//! create, every error body shape, direct exec, env and cwd folding, preview errors, region).

use bytes::Bytes;
use futures::TryStreamExt;
use sandbox_conformance::cassette::{self, Cassette, Placeholders};
use sandbox_conformance::replay::ReplayServer;
use sandbox_fly::{FlyBuilder, FlyProvider, MachineConfig};
use sandbox_sdk_core::prelude::*;
use sandbox_sdk_core::{Command, CreateSpec, ErrorKind};
use std::time::Duration;

struct Replay {
    server: ReplayServer,
}

impl Replay {
    async fn start(name: &str) -> Replay {
        let path = format!(
            "{}/tests/cassettes/fly/{name}.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let server = ReplayServer::start().await.expect("replay server");
        let cassette = Cassette::load(std::path::Path::new(&path))
            .expect("cassette")
            .substituted(&Placeholders::standard(server.url()))
            .expect("placeholders");
        server.mount(&cassette, false).await.expect("mount");
        Replay { server }
    }

    fn builder(&self) -> FlyBuilder {
        FlyProvider::builder()
            .token(cassette::TOKEN)
            .app("conformance-app")
            .api_url(self.server.url())
            .poll_interval(Duration::ZERO)
    }

    fn provider(&self) -> FlyProvider {
        self.builder().build().expect("provider")
    }

    async fn verify(&self) {
        self.server
            .verify()
            .await
            .expect("every interaction used as the cassette says");
    }
}

const ID: &str = cassette::SANDBOX_ID;
const REQUEST_ID: &str = "01JJRPZ859TZM6BZ1A9RN4AZ5N-ord";

#[tokio::test]
async fn a_wait_past_the_deadline_chains_calls_then_names_the_state_reached() {
    let r = Replay::start("fly_wait_timeout").await;
    let fly = r
        .builder()
        .start_timeout(Duration::from_secs(90))
        .build()
        .unwrap();
    let sandbox = fly.connect_machine(ID).await.unwrap();
    let err = sandbox.stop().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout);
    assert!(err.message().contains("stopping"), "{err}");
    assert!(err.message().contains("stopped"), "{err}");
    assert_eq!(err.status(), Some(408));
    assert_eq!(err.request_id(), Some(REQUEST_ID));
    assert_eq!(err.sandbox_id(), Some(ID));
    r.verify().await;
}

#[tokio::test]
async fn a_lease_nonce_is_sent_on_mutations_refresh_and_release() {
    let r = Replay::start("fly_lease").await;
    let sandbox = r.provider().connect_machine(ID).await.unwrap();
    let lease = sandbox
        .acquire_lease(Duration::from_secs(30), Some("sandbox-fly"))
        .await
        .unwrap();
    assert_eq!(lease.owner.as_deref(), Some("hello@fly.io"));
    assert_eq!(lease.expires_at, Some(1_764_562_200));
    assert_eq!(sandbox.lease_nonce().as_deref(), Some("5c35f65c9f95"));
    assert!(!format!("{sandbox:?}{lease:?}").contains("5c35f65c9f95"));
    sandbox
        .stop_with(Some("SIGKILL"), Some(Duration::from_secs(5)))
        .await
        .unwrap();
    assert_eq!(sandbox.machine().state.as_deref(), Some("stopped"));
    sandbox
        .refresh_lease(Duration::from_secs(60))
        .await
        .unwrap();
    sandbox.release_lease().await.unwrap();
    assert!(sandbox.lease_nonce().is_none());
    let err = sandbox.release_lease().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Validation);
    r.verify().await;
}

#[tokio::test]
async fn a_lease_held_by_someone_else_is_a_conflict_naming_the_holder() {
    let r = Replay::start("fly_lease_conflict").await;
    let sandbox = r.provider().connect_machine(ID).await.unwrap();
    let mut config: MachineConfig = sandbox.machine().config.unwrap();
    config.env.insert("MODE".into(), "2".into());
    let err = sandbox.update(config).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert!(
        err.message()
            .starts_with("machine is leased by hello@fly.io"),
        "{err}"
    );
    assert_eq!(err.request_id(), Some(REQUEST_ID));
    assert_eq!(err.operation(), Some("update"));
    let err = sandbox
        .acquire_lease(Duration::from_secs(30), None)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert!(err.message().contains("hello@fly.io"));
    let lease = sandbox.lease().await.unwrap();
    assert_eq!(lease.owner.as_deref(), Some("hello@fly.io"));
    assert!(lease.nonce.is_none());
    r.verify().await;
}

#[tokio::test]
async fn files_move_in_chunks_sized_by_the_builder() {
    let r = Replay::start("fly_chunked_files").await;
    let fly = r.builder().file_chunk(4).build().unwrap();
    let sandbox = fly.connect_machine(ID).await.unwrap();
    // A reader that hands out one byte at a time still yields full chunks.
    let body: sandbox_sdk_core::UploadBody = Box::pin(tokio::io::BufReader::with_capacity(
        1,
        std::io::Cursor::new(b"0123456789".to_vec()),
    ));
    let transfer = sandbox.upload("dir/ten.bin", body).await.unwrap();
    assert_eq!(transfer.bytes, 10);
    assert!(transfer.emulated);
    let download = sandbox.download("dir/ten.bin").await.unwrap();
    assert!(download.is_emulated());
    let chunks: Vec<Bytes> = download.try_collect().await.unwrap();
    assert_eq!(chunks.len(), 3, "one chunk per call");
    assert_eq!(chunks.concat(), b"0123456789");
    r.verify().await;
}

#[tokio::test]
async fn a_download_that_ends_before_the_stat_size_is_an_error_not_a_short_file() {
    let r = Replay::start("fly_short_download").await;
    let fly = r.builder().file_chunk(4).build().unwrap();
    let sandbox = fly.connect_machine(ID).await.unwrap();
    let download = sandbox.download("dir/shrunk.bin").await.unwrap();
    let err = download.try_collect::<Vec<Bytes>>().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Provider);
    assert!(
        err.message()
            .contains("read 6 of 10 bytes of dir/shrunk.bin"),
        "{err}"
    );
    assert_eq!(err.sandbox_id(), Some(ID));
    r.verify().await;
}

/// Hands out its bytes, then fails like a broken disk or socket.
struct FailingBody(std::io::Cursor<&'static [u8]>);

impl tokio::io::AsyncRead for FailingBody {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        use std::io::Read;
        let mut tmp = vec![0u8; buf.remaining()];
        let n = self.0.read(&mut tmp).unwrap_or(0);
        if n == 0 {
            return std::task::Poll::Ready(Err(std::io::Error::other("the body broke")));
        }
        buf.put_slice(&tmp[..n]);
        std::task::Poll::Ready(Ok(()))
    }
}

#[tokio::test]
async fn a_failed_upload_removes_its_partial_file() {
    let r = Replay::start("fly_upload_cleanup").await;
    let fly = r.builder().file_chunk(4).build().unwrap();
    let sandbox = fly.connect_machine(ID).await.unwrap();
    // The body fails after one chunk went out: the partial file is removed.
    let body: sandbox_sdk_core::UploadBody =
        Box::pin(FailingBody(std::io::Cursor::new(b"01234567")));
    let err = sandbox.upload("dir/broken.bin", body).await.unwrap_err();
    assert!(err.message().contains("the body broke"), "{err}");
    // The one and only chunk fails in the machine: removed too.
    let err = sandbox
        .write_file("dir/full.bin", Bytes::from_static(b"ab"))
        .await
        .unwrap_err();
    assert!(err.message().contains("No space left"), "{err}");
    r.verify().await;
}

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
async fn a_retried_create_adopts_the_machine_made_under_its_key() {
    let r = Replay::start("fly_idempotent_create").await;
    let fly = r.provider();
    let spec = CreateSpec::new()
        .metadata("suite", "conformance")
        .timeout(Duration::from_secs(300));
    let adopted = fly
        .create(&spec.clone().idempotency_key("job-42"))
        .await
        .unwrap();
    assert_eq!(adopted.id(), ID);
    let made = fly
        .create_machine(&spec.clone().idempotency_key("job-43"))
        .await
        .unwrap();
    assert_eq!(made.machine().state.as_deref(), Some("started"));
    // A machine found on its way down settles, then starts again.
    let restarted = fly
        .create_machine(&spec.idempotency_key("job-44"))
        .await
        .unwrap();
    assert_eq!(restarted.machine().state.as_deref(), Some("started"));
    r.verify().await;
}

#[tokio::test]
async fn create_sends_the_region() {
    let r = Replay::start("fly_region_create").await;
    let fly = r.builder().region("ord").build().unwrap();
    let spec = CreateSpec::new()
        .metadata("suite", "conformance")
        .timeout(Duration::from_secs(300));
    let sandbox = fly.create_machine(&spec).await.unwrap();
    assert_eq!(sandbox.machine().region.as_deref(), Some("ord"));
    r.verify().await;
}

#[tokio::test]
async fn every_error_shape_maps_through_one_function() {
    let r = Replay::start("fly_error_shapes").await;
    let fly = r.provider();
    let err = fly.connect_machine(ID).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Validation);
    assert_eq!(err.message(), "empty response body");
    assert_eq!(err.request_id(), Some(REQUEST_ID));
    let err = fly.connect_machine(ID).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Provider);
    assert!(err.is_retryable());
    assert!(err.message().contains("502 Bad Gateway"));
    assert_eq!(err.request_id(), Some(REQUEST_ID));
    let err = fly.connect_machine(ID).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::QuotaExceeded);
    assert_eq!(
        err.retry_after(),
        Some(Duration::from_millis(200)),
        "Get Machine: 5 req/s"
    );
    let sandbox = fly.connect_machine(ID).await.unwrap();
    let err = sandbox.resume().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert_eq!(err.status(), Some(412));
    assert!(err.message().contains("unable to start machine"));
    let err = sandbox.destroy().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
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
async fn preview_without_a_service_says_what_is_missing() {
    let r = Replay::start("fly_preview_missing").await;
    let sandbox = r.provider().connect_machine(ID).await.unwrap();
    let err = sandbox.preview_link(3000).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Validation);
    assert!(err.message().contains("no services"), "{err}");
    assert!(err.message().contains("expose_port(3000)"), "{err}");
    r.verify().await;
}

#[tokio::test]
async fn unsupported_operations_fail_fast_without_a_request() {
    let r = Replay::start("fly_preview_missing").await;
    let sandbox = r.provider().connect_machine(ID).await.unwrap();
    assert_eq!(
        sandbox
            .set_timeout(Duration::from_secs(5))
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::NotSupported
    );
    assert_eq!(
        sandbox
            .exec(&Command::new("id").user("root"))
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::NotSupported
    );
    assert_eq!(
        sandbox.kill_process("../etc").await.unwrap_err().kind(),
        ErrorKind::Validation
    );
    assert_eq!(
        r.server.request_count(),
        1,
        "only the connect reached the server"
    );
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

#[tokio::test]
async fn create_mounts_the_volume() {
    let r = Replay::start("fly_volume_create").await;
    let fly = r
        .builder()
        .mount("vol_1234567890abcdef", "/data")
        .build()
        .unwrap();
    let spec = CreateSpec::new()
        .metadata("suite", "conformance")
        .timeout(Duration::from_secs(300));
    fly.create(&spec).await.unwrap();
    r.verify().await;
}

#[tokio::test]
async fn errors_raised_from_an_exec_answer_keep_its_request_id() {
    let r = Replay::start("fly_missing_file").await;
    let sandbox = r.provider().connect_machine(ID).await.unwrap();
    let err = sandbox.stat("/etc/nope").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert_eq!(err.request_id(), Some(REQUEST_ID));
    assert_eq!(err.operation(), Some("stat"));
    assert!(err.message().contains("no such file"), "{err}");
    r.verify().await;
}
