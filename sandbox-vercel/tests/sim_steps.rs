//! The steps `tools/sim-check/vercel/check.mjs` drives the official SDK through, driven
//! through this adapter against the Vercel simulator, so both clients' request logs can be
//! compared (sandbox-sim/README.md lists where they differ). With `VERCEL_SIM_ADAPTER_LOG`
//! set, the simulator's request log is written there as JSON lines.

use sandbox_sdk_core::{
    Command, CreateSpec, ListFilter, Provider, ProviderExt, SandboxExt, SandboxState,
};
use sandbox_sim::Simulator;
use sandbox_sim::vercel::{PROJECT, TEAM, VercelSim};
use sandbox_vercel::VercelProvider;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_checks_steps_through_the_adapter() {
    let sim = VercelSim::start().await.unwrap();
    let provider = VercelProvider::builder()
        .token(sim.token())
        .team_id(TEAM)
        .project_id(PROJECT)
        .api_url(sim.url())
        .expose_port(3000)
        .build()
        .unwrap();
    let spec = CreateSpec::new()
        .metadata("suite", "sim-check")
        .env("GREETING", "hello")
        .timeout(Duration::from_secs(120));
    let sb = provider.create(&spec).await.unwrap();
    let out = sb.run(&Command::shell("exit 3")).await.unwrap();
    assert_eq!(out.status.code, Some(3));
    let out = sb
        .run(&Command::shell("printf out; printf err >&2"))
        .await
        .unwrap();
    assert_eq!(
        (&out.stdout[..], &out.stderr[..]),
        (&b"out"[..], &b"err"[..])
    );
    let out = sb
        .run(&Command::shell("printf \"$GREETING $ONLY\"").env("ONLY", "here"))
        .await
        .unwrap();
    assert_eq!(out.stdout_lossy(), "hello here");
    sb.mkdir("work/sub").await.unwrap();
    let out = sb
        .run(&Command::shell("pwd >/dev/null; echo here > marker").cwd("work/sub"))
        .await
        .unwrap();
    assert_eq!(out.status.code, Some(0));
    assert_eq!(
        sb.read_to_string("work/sub/marker").await.unwrap(),
        "here\n"
    );
    let background = sb
        .exec(&Command::shell("sleep 0.3; echo done; exit 4").background())
        .await
        .unwrap();
    let pid = background.pid().to_owned();
    let output = background.output().await.unwrap();
    assert_eq!(
        (output.status.code, output.stdout_lossy().as_ref()),
        (Some(4), "done\n")
    );
    let sleeper = sb
        .exec(&Command::new("sleep").args(["30"]).background())
        .await
        .unwrap();
    sb.kill_process(sleeper.pid()).await.unwrap();
    assert_ne!(sleeper.wait().await.unwrap().code, Some(0));
    assert!(!pid.is_empty());
    sb.write_file("files/hello.txt", "hello world".into())
        .await
        .unwrap();
    assert_eq!(
        sb.read_to_string("/vercel/sandbox/files/hello.txt")
            .await
            .unwrap(),
        "hello world"
    );
    assert!(sb.read_file("no/such/file").await.is_err());
    let listed = provider
        .list_all(&ListFilter::new().metadata("suite", "sim-check"))
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    let again = provider.connect(sb.id()).await.unwrap();
    assert_eq!(again.info().await.unwrap().state, SandboxState::Running);
    sb.set_timeout(Duration::from_secs(600)).await.unwrap();
    sb.stop().await.unwrap();
    assert_eq!(sb.info().await.unwrap().state, SandboxState::Stopped);
    sb.resume().await.unwrap();
    assert_eq!(
        sb.read_to_string("files/hello.txt").await.unwrap(),
        "hello world"
    );
    sb.snapshot(None).await.unwrap();
    let child = sb.fork().await.unwrap();
    child.destroy().await.unwrap();
    sb.destroy().await.unwrap();
    assert!(provider.connect(sb.id()).await.is_err());
    if let Ok(path) = std::env::var("VERCEL_SIM_ADAPTER_LOG") {
        std::fs::write(path, sim.server().log().to_json_lines()).unwrap();
    }
}
