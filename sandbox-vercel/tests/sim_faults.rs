//! Broken answers from the Vercel simulator, through the adapter: a cut command stream is
//! recovered from `/logs` with every byte once, a cut file read is an error (never short
//! data), a lost create answer is settled by name with one sandbox, a silent stream ends within
//! the idle bound.

use sandbox_sdk_core::{Command, CreateSpec, ErrorKind, Provider, SandboxExt};
use sandbox_sim::vercel::{PROJECT, TEAM, VercelSim};
use sandbox_sim::{Fault, FaultRule, Simulator};
use sandbox_vercel::VercelProvider;
use std::sync::Arc;
use std::time::Duration;

async fn setup() -> (VercelSim, Arc<dyn Provider>) {
    let sim = VercelSim::start().await.unwrap();
    let provider = VercelProvider::builder()
        .token(sim.token())
        .team_id(TEAM)
        .project_id(PROJECT)
        .api_url(sim.url())
        .request_timeout(Duration::from_secs(2))
        .stream_idle_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    (sim, Arc::new(provider))
}

/// A script printing 200 numbered lines on stdout and every tenth on stderr.
const NOISY: &str = "i=0; while [ $i -lt 200 ]; do echo out$i; \
    [ $((i % 10)) -eq 0 ] && echo err$i >&2; i=$((i+1)); done; exit 5";

fn expected() -> (String, String) {
    let out: String = (0..200).map(|i| format!("out{i}\n")).collect();
    let err: String = (0..200)
        .filter(|i| i % 10 == 0)
        .map(|i| format!("err{i}\n"))
        .collect();
    (out, err)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_command_stream_is_recovered_from_the_logs_with_every_byte_once() {
    let (sim, provider) = setup().await;
    let sb = provider.create(&CreateSpec::new()).await.unwrap();
    for cut in [40, 300, 2000] {
        sim.server()
            .faults()
            .add(FaultRule::new("exec", Fault::Cut(cut)).times(1));
        let out = sb.run(&Command::shell(NOISY)).await.unwrap();
        let (stdout, stderr) = expected();
        assert_eq!(out.stdout_lossy(), stdout, "cut after {cut} bytes");
        assert_eq!(out.stderr_lossy(), stderr, "cut after {cut} bytes");
        assert_eq!(out.status.code, Some(5), "cut after {cut} bytes");
    }
    assert_eq!(sim.server().log().count("exec"), 3, "no command ran twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_logs_stream_of_a_background_command_is_read_again() {
    let (sim, provider) = setup().await;
    let sb = provider.create(&CreateSpec::new()).await.unwrap();
    sim.server()
        .faults()
        .add(FaultRule::new("exec.output", Fault::Cut(100)).times(1));
    let process = sb
        .exec(&Command::shell(format!("sleep 0.2; {NOISY}")).background())
        .await
        .unwrap();
    let out = process.output().await.unwrap();
    let (stdout, stderr) = expected();
    assert_eq!(out.stdout_lossy(), stdout);
    assert_eq!(out.stderr_lossy(), stderr);
    assert_eq!(out.status.code, Some(5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_file_read_is_an_error_not_short_data() {
    let (sim, provider) = setup().await;
    let sb = provider.create(&CreateSpec::new()).await.unwrap();
    let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    sb.write_file("big.bin", data.clone().into()).await.unwrap();
    sim.server()
        .faults()
        .add(FaultRule::new("files.read", Fault::Cut(1000)).times(1));
    match sb.read_file("big.bin").await {
        Ok(read) => assert_eq!(read.len(), data.len(), "a cut read came back short"),
        Err(e) => assert_ne!(e.kind(), ErrorKind::NotFound, "{e}"),
    }
    assert_eq!(&sb.read_file("big.bin").await.unwrap()[..], &data[..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_create_answer_is_settled_by_name_with_one_sandbox() {
    let (sim, provider) = setup().await;
    sim.server()
        .faults()
        .add(FaultRule::new("create", Fault::ResetAfter).times(1));
    let spec = CreateSpec::new().idempotency_key("lost-answer");
    let sb = provider.create(&spec).await;
    let again = provider.create(&spec).await.unwrap();
    if let Ok(sb) = &sb {
        assert_eq!(sb.id(), again.id());
    }
    assert_eq!(sim.sandboxes(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_command_stream_ends_within_the_idle_bound() {
    let (sim, provider) = setup().await;
    let sb = provider.create(&CreateSpec::new()).await.unwrap();
    sim.server()
        .faults()
        .add(FaultRule::new("exec", Fault::Silence).times(1));
    let started = std::time::Instant::now();
    let out = tokio::time::timeout(Duration::from_secs(20), sb.run(&Command::shell("echo hi")))
        .await
        .expect("no hang");
    assert!(started.elapsed() < Duration::from_secs(15));
    if let Ok(out) = out {
        assert_eq!(out.stdout_lossy(), "hi\n");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_whose_answer_is_lost_is_found_by_listing_and_never_sent_again() {
    let (sim, provider) = setup().await;
    let sb = provider.create(&CreateSpec::new()).await.unwrap();
    // The server ran the command and the connection dropped before any answer.
    sim.server()
        .faults()
        .add(FaultRule::new("exec", Fault::ResetAfter).times(1));
    let out = sb
        .run(&Command::shell("echo once >> ran; cat ran"))
        .await
        .unwrap();
    assert_eq!(out.stdout_lossy(), "once\n");
    assert_eq!(out.status.code, Some(0));
    assert_eq!(
        sim.server().log().count("exec"),
        1,
        "the command was not sent again"
    );
    assert_eq!(sim.server().log().count("exec.list"), 1);
    // Reset before the server acted: nothing to find, so the ambiguous error stands.
    sim.server()
        .faults()
        .add(FaultRule::new("exec", Fault::Reset).times(1));
    let e = sb
        .run(&Command::shell("echo twice >> ran"))
        .await
        .unwrap_err();
    assert!(e.is_ambiguous(), "{e}");
    assert_eq!(sb.read_to_string("ran").await.unwrap(), "once\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_starts_stops_and_snapshots_are_waited_out_or_named_not_running() {
    let sim = VercelSim::builder()
        .start_time(Duration::from_millis(500))
        .stop_time(Duration::from_millis(800))
        .start()
        .await
        .unwrap();
    let provider = VercelProvider::builder()
        .token(sim.token())
        .team_id(TEAM)
        .project_id(PROJECT)
        .api_url(sim.url())
        .build()
        .unwrap();
    let sb = provider.create(&CreateSpec::new()).await.unwrap();
    // The session is pending: the command waits for it.
    let out = sb.run(&Command::shell("echo up > f; cat f")).await.unwrap();
    assert_eq!(out.stdout_lossy(), "up\n");
    sb.stop().await.unwrap();
    assert_eq!(
        sb.info().await.unwrap().state,
        sandbox_sdk_core::SandboxState::Stopped
    );
    sb.resume().await.unwrap();
    assert_eq!(sb.read_to_string("f").await.unwrap(), "up\n");
    // A snapshot stops the session; until resumed, calls are NotRunning, not invalid.
    sb.snapshot(None).await.unwrap();
    let e = sb.run(&Command::shell("true")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotRunning, "{e}");
    sb.resume().await.unwrap();
    assert_eq!(sb.read_to_string("f").await.unwrap(), "up\n");
    sb.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_outlives_the_edges_cut_is_followed_to_its_end() {
    let sim = VercelSim::builder()
        .edge_cut(Some(Duration::from_millis(600)))
        .start()
        .await
        .unwrap();
    let provider = VercelProvider::builder()
        .token(sim.token())
        .team_id(TEAM)
        .project_id(PROJECT)
        .api_url(sim.url())
        .build()
        .unwrap();
    let sb = provider.create(&CreateSpec::new()).await.unwrap();
    let script = "echo start; sleep 1; echo middle >&2; sleep 1; echo end; exit 7";
    let out = sb.run(&Command::shell(script)).await.unwrap();
    assert_eq!(out.stdout_lossy(), "start\nend\n");
    assert_eq!(out.stderr_lossy(), "middle\n");
    assert_eq!(out.status.code, Some(7));
    let background = sb.exec(&Command::shell(script).background()).await.unwrap();
    let out = background.output().await.unwrap();
    assert_eq!(out.stdout_lossy(), "start\nend\n");
    assert_eq!(out.status.code, Some(7));
    assert_eq!(sim.server().log().count("exec"), 2, "nothing ran twice");
}
