//! The adapter against the Daytona simulator (`sandbox_conformance::sim::daytona`), for
//! behaviour only a live, stateful server shows.

use sandbox_conformance::sim::daytona::DaytonaSim;
use sandbox_daytona::DaytonaBuilder;
use sandbox_sdk_core::{Command, CreateSpec, Provider};
use std::time::Duration;

fn adapter(sim: &DaytonaSim) -> DaytonaBuilder {
    DaytonaBuilder::new()
        .api_key(sim.api_key())
        .api_url(sim.api_url())
        .poll_interval(Duration::from_millis(10))
}

/// Regression: a command whose session `kill_process` deleted before its log WebSocket opened
/// got the daemon's 404 on the upgrade and `wait()` failed with `NotFound`; it ends as killed,
/// as a 404 on the command's status already did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_killed_before_its_follow_opens_ends_as_killed() {
    let sim = DaytonaSim::builder()
        .transition(Duration::from_millis(10))
        .start()
        .await
        .unwrap();
    let provider = adapter(&sim)
        .direct_window(Duration::from_millis(50))
        .build()
        .unwrap();
    let sandbox = provider.create(&CreateSpec::new()).await.unwrap();
    let process = sandbox
        .exec(&Command::new("sleep").arg("30"))
        .await
        .unwrap();
    sandbox.kill_process(process.pid()).await.unwrap();
    let status = tokio::time::timeout(Duration::from_secs(20), process.wait())
        .await
        .expect("wait() returns")
        .expect("a killed command's wait() is its status, not an error");
    assert!(!status.success(), "{status}");
    assert_eq!(status.signal, Some(9));
    sandbox.destroy().await.unwrap();
}
