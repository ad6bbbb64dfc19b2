//! The shared conformance suite live against the E2B simulator (`sandbox_sim::e2b`),
//! reported as `e2b-sim`: real processes and files behind a server that speaks E2B's control
//! plane and envd, so time, state and streams are exercised, not replayed. The adapter is pointed
//! at the simulator exactly as a user would point it at E2B: API key, API URL and sandbox URL.
//!
//! Sandboxes are created private (`network.allowPublicTraffic: false`, through
//! [`CreateOptions`]): E2B issues a traffic access token only then, and `private_preview`, which
//! the adapter declares, means preview links that need one. Created with the defaults, an E2B
//! sandbox's URLs are public and `preview_link` carries no token (the simulator, like E2B,
//! follows the OpenAPI default `allowPublicTraffic: true`).
//!
//! Each scenario gets a fresh simulator (`Suite::simulated`), and the simulator-only scenarios
//! (concurrent creates with one key, a late create answer, a silent stream, kill while
//! streaming, reattach, 1,000 sandboxes) run too.

use sandbox_conformance::simulated::SIM_STREAM_IDLE;
use sandbox_conformance::{
    REPLAY_CREATE_LOOKUP, REPLAY_REQUEST_TIMEOUT, Suite, sim_conformance_tests,
};
use sandbox_e2b::{CreateOptions, E2bBuilder, E2bProvider, NetworkConfig};
use sandbox_sdk_core::fleet::{PrepareSpec, Prepared, Usage};
use sandbox_sdk_core::{
    Capabilities, Capability, CreateSpec, ListFilter, Provider, Result, Sandbox, SandboxInfo,
    SandboxStream,
};
use sandbox_sim::e2b::E2bSim;
use std::sync::Arc;

/// The adapter, creating private sandboxes (see the module docs).
#[derive(Debug)]
struct Private(E2bProvider);

#[async_trait::async_trait]
impl Provider for Private {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }

    async fn create(&self, spec: &CreateSpec) -> Result<Box<dyn Sandbox>> {
        let options = CreateOptions {
            network: Some(NetworkConfig {
                allow_public_traffic: Some(false),
                ..NetworkConfig::default()
            }),
            ..CreateOptions::default()
        };
        Ok(Box::new(self.0.create_sandbox(spec, &options).await?))
    }

    async fn connect(&self, id: &str) -> Result<Box<dyn Sandbox>> {
        self.0.connect(id).await
    }

    fn list(&self, filter: &ListFilter) -> SandboxStream<'_> {
        self.0.list(filter)
    }

    async fn destroy(&self, id: &str) -> Result<()> {
        Provider::destroy(&self.0, id).await
    }

    async fn find_by_idempotency_key(&self, key: &str) -> Result<Option<SandboxInfo>> {
        self.0.find_by_idempotency_key(key).await
    }

    async fn usage(&self, sandbox: &SandboxInfo, to: std::time::SystemTime) -> Result<Usage> {
        self.0.usage(sandbox, to).await
    }

    async fn prepare(&self, spec: &PrepareSpec) -> Result<Prepared> {
        self.0.prepare(spec).await
    }
}

/// The adapter pointed at a simulator, as a user would point it at E2B (API key, API URL,
/// sandbox URL), with the kit's short timeouts.
fn adapter(url: &str, key: &str) -> Result<Arc<dyn Provider>> {
    let provider = E2bBuilder::new()
        .api_key(key)
        .api_url(url)
        .sandbox_url(url)
        .request_timeout(REPLAY_REQUEST_TIMEOUT)
        .create_lookup(REPLAY_CREATE_LOOKUP)
        .stream_idle_timeout(SIM_STREAM_IDLE)
        .build()?;
    Ok(Arc::new(Private(provider)))
}

/// Why the prepare scenarios do not run here.
const TEMPLATES: &str = "the simulator does not build templates (`/v3/templates`); prepare is \
    proven by the replayed prepare scenarios";

fn suite() -> Suite {
    Suite::simulated("e2b", adapter)
        .not_simulated("prepare_reuse", TEMPLATES)
        .not_simulated("prepare_failure", TEMPLATES)
        .covered_elsewhere(
            Capability::EgressControl,
            "create::create_options_send_egress_rules_and_volumes",
        )
        .covered_elsewhere(
            Capability::Volumes,
            "create::create_options_send_egress_rules_and_volumes",
        )
}

sim_conformance_tests!(suite());

/// The steps of `tools/sim-check/e2b/check.mjs` (the official JS SDK's check), taken by this
/// adapter against a simulator of its own, so the two request logs can be compared (run with
/// `--nocapture` to see this one; `cargo xtask sim-check` writes the SDK's to
/// `target/sim-check/e2b.jsonl`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_sdk_check_steps_through_the_adapter() {
    use futures::{StreamExt, TryStreamExt};
    use sandbox_sdk_core::{
        Command, ErrorKind, FileKind, ListOptions, ProcessEvent, PtySize, SandboxExt, SandboxState,
    };
    use sandbox_sim::Simulator;
    use std::time::Duration;
    use tokio::io::AsyncWriteExt;

    let sim = E2bSim::start().await.unwrap();
    let env: std::collections::BTreeMap<_, _> = sim.env().into_iter().collect();
    let provider = E2bBuilder::from_lookup(|name| env.get(name).cloned())
        .build()
        .unwrap();
    let spec = CreateSpec::new()
        .metadata("suite", "sim-check")
        .metadata("run", "adapter")
        .env("GREETING", "hello")
        .timeout(Duration::from_secs(120));
    let sbx = provider.create(&spec).await.unwrap();
    let info = sbx.info().await.unwrap();
    assert_eq!(info.metadata["run"], "adapter");

    let out = sbx.run(&Command::shell("echo $GREETING")).await.unwrap();
    assert_eq!(
        (out.stdout_lossy().as_str(), out.status.code),
        ("hello\n", Some(0))
    );
    let out = sbx
        .run(&Command::shell("echo oops >&2; exit 3"))
        .await
        .unwrap();
    assert_eq!(
        (out.stderr_lossy().as_str(), out.status.code),
        ("oops\n", Some(3))
    );
    sbx.mkdir("/home/user/work").await.unwrap();
    let cmd = Command::shell("printf '%s|%s' \"$X\" \"${PWD##*/}\"")
        .env("X", "y")
        .cwd("/home/user/work");
    assert_eq!(sbx.run(&cmd).await.unwrap().stdout_lossy(), "y|work");

    let mut p = sbx
        .exec(&Command::shell("printf one; sleep 0.5; printf two"))
        .await
        .unwrap();
    let mut chunks = 0;
    while let Some(event) = p.next_event().await {
        if let ProcessEvent::Stdout(_) = event.unwrap() {
            chunks += 1;
        }
    }
    assert!(chunks >= 2);

    let bg = sbx
        .exec(&Command::new("sleep").arg("30").background())
        .await
        .unwrap();
    let pid = bg.pid().to_owned();
    assert!(sbx.processes().await.unwrap().iter().any(|p| p.pid == pid));
    sbx.kill_process(&pid).await.unwrap();
    assert!(!bg.wait().await.unwrap().success());

    let bg = sbx
        .exec(&Command::shell("sleep 1; echo done").background())
        .await
        .unwrap();
    let joined = sbx.attach(bg.pid()).await.unwrap();
    assert_eq!(joined.output().await.unwrap().stdout_lossy(), "done\n");

    let mut cat = sbx.exec(&Command::new("cat").stdin()).await.unwrap();
    let mut stdin = cat.take_stdin().unwrap();
    stdin.write_all(b"abc\n").await.unwrap();
    stdin.shutdown().await.unwrap();
    drop(stdin);
    assert_eq!(cat.output().await.unwrap().stdout_lossy(), "abc\n");

    let pty = Command::shell("stty size").pty(PtySize {
        cols: 100,
        rows: 30,
    });
    assert!(
        sbx.run(&pty)
            .await
            .unwrap()
            .stdout_lossy()
            .contains("30 100")
    );

    sbx.write_file("/home/user/dir/a.txt", "hello".into())
        .await
        .unwrap();
    assert_eq!(
        &sbx.read_file("/home/user/dir/a.txt").await.unwrap()[..],
        b"hello"
    );
    let stat = sbx.stat("/home/user/dir/a.txt").await.unwrap();
    assert_eq!((stat.kind, stat.size), (FileKind::File, 5));
    sbx.mkdir("/home/user/dir/sub").await.unwrap();
    let listed = sbx
        .list_files("/home/user/dir", ListOptions { depth: 1 })
        .await
        .unwrap();
    assert_eq!(listed.len(), 2);
    let bytes: Vec<u8> = (0..=255u8).collect();
    sbx.write_file("/home/user/bin/data.bin", bytes.clone().into())
        .await
        .unwrap();
    assert_eq!(
        sbx.read_file("/home/user/bin/data.bin")
            .await
            .unwrap()
            .to_vec(),
        bytes
    );
    sbx.write_file("/home/user/m/old.txt", "x".into())
        .await
        .unwrap();
    sbx.rename("/home/user/m/old.txt", "/home/user/m/new.txt")
        .await
        .unwrap();
    sbx.remove("/home/user/m/new.txt").await.unwrap();
    let missing = sbx.read_file("/home/user/missing.txt").await.unwrap_err();
    assert_eq!(missing.kind(), ErrorKind::NotFound);

    sbx.mkdir("/home/user/watched").await.unwrap();
    let mut events = sbx.watch("/home/user/watched", false).await.unwrap();
    sbx.write_file("/home/user/watched/w.txt", "w".into())
        .await
        .unwrap();
    let event = events.next().await.unwrap().unwrap();
    assert!(event.path.ends_with("w.txt"));
    drop(events);

    sbx.set_timeout(Duration::from_secs(60)).await.unwrap();
    sbx.metrics().await.unwrap();
    sbx.pause().await.unwrap();
    assert_eq!(sbx.info().await.unwrap().state, SandboxState::Paused);
    sbx.resume().await.unwrap();
    assert_eq!(sbx.info().await.unwrap().state, SandboxState::Running);

    let second = provider.create(&spec).await.unwrap();
    let found: Vec<_> = provider
        .list(&ListFilter::new().metadata("run", "adapter"))
        .try_collect()
        .await
        .unwrap();
    assert_eq!(found.len(), 2);
    let missing = provider.connect("i00000000000000000000").await.unwrap_err();
    assert_eq!(missing.kind(), ErrorKind::NotFound);
    let wrong = E2bBuilder::from_lookup(|name| env.get(name).cloned())
        .api_key(format!("e2b_{}", "0".repeat(40)))
        .build()
        .unwrap();
    let refused = wrong.create(&CreateSpec::new()).await.unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Unauthorized);
    sbx.destroy().await.unwrap();
    second.destroy().await.unwrap();
    assert_eq!(sim.sandboxes(), 0);
    print!("{}", sim.server().log().to_json_lines());
}
