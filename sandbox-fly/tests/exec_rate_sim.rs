//! Fly paces `/exec` per machine (1 request/s, bursts of 3; PROTOCOL.md §3), whatever operation
//! the calls belong to. Against the simulator with that limit on, back-to-back uploads, downloads
//! and commands on one machine reach the caller without a 429: the adapter's one bucket per
//! machine keeps them within the rate, and an exec refused anyway (a second client of the same
//! machine) is sent again after the wait the 429 asks for.
//!
//! The tests run on a paused clock (the simulator keeps the API's time on it and runs the
//! machine's processes in real time), so the pacing and the retries' waits cost nothing.

use bytes::Bytes;
use sandbox_fly::FlyProvider;
use sandbox_sdk_core::prelude::*;
use sandbox_sdk_core::{Command, CreateSpec, Sandbox};
use sandbox_sim::Simulator;
use sandbox_sim::fly::{FlySim, FlySimBuilder};
use std::time::Duration;

fn adapter(sim: &FlySim) -> FlyProvider {
    FlyProvider::builder()
        .token(sim.token())
        .app(sim.app())
        .api_url(sim.url())
        // Three chunks per transfer, so every upload and download is several exec calls.
        .file_chunk(4 * 1024)
        .build()
        .unwrap()
}

fn data(seed: u8) -> Bytes {
    (0..10 * 1024)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

/// The 429s the simulator answered to `/exec`.
fn refused_execs(sim: &FlySim) -> usize {
    let log = sim.server().log().entries();
    log.iter()
        .filter(|e| e.operation == "exec" && e.status == Some(429))
        .count()
}

async fn transfers_and_commands(sandbox: &dyn Sandbox, seed: u8) {
    for i in 0..3u8 {
        let path = format!("f{seed}-{i}.bin");
        sandbox
            .write_file(&path, data(seed ^ i))
            .await
            .unwrap_or_else(|e| panic!("upload {path}: {e}"));
    }
    for i in 0..3u8 {
        let path = format!("f{seed}-{i}.bin");
        let back = sandbox
            .read_file(&path)
            .await
            .unwrap_or_else(|e| panic!("download {path}: {e}"));
        assert_eq!(back, data(seed ^ i), "{path}");
    }
    for i in 0..4 {
        let out = sandbox
            .run(&Command::shell(format!("echo {i}")).timeout(Duration::from_secs(10)))
            .await
            .unwrap_or_else(|e| panic!("exec {i}: {e}"));
        assert_eq!(out.stdout_lossy(), format!("{i}\n"));
    }
}

async fn sim(builder: FlySimBuilder) -> FlySim {
    builder.start_time(Duration::ZERO).start().await.unwrap()
}

#[tokio::test(start_paused = true)]
async fn back_to_back_transfers_and_execs_on_one_machine_stay_within_the_exec_rate() {
    let sim = sim(FlySim::builder()).await;
    let fly = adapter(&sim);
    let sandbox = fly.create(&CreateSpec::new()).await.unwrap();
    let begun = tokio::time::Instant::now();
    transfers_and_commands(sandbox.as_ref(), 1).await;
    // A second handle on the same machine shares its bucket.
    let again = fly.connect(sandbox.id()).await.unwrap();
    transfers_and_commands(again.as_ref(), 2).await;
    assert_eq!(refused_execs(&sim), 0, "paced calls are never refused");
    let execs = sim.server().log().count("exec");
    // 2 × (3 uploads of 3 chunks + 3 downloads of a stat and 3 blocks + 4 commands) = 50 calls
    // at 1/s after a burst of 3: the pacing took about the rate's time (on the paused clock).
    assert!(execs >= 50, "{execs} execs");
    assert!(begun.elapsed() >= Duration::from_secs(execs as u64 - 3));
    sandbox.destroy().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn execs_refused_for_another_clients_calls_are_sent_again_not_surfaced() {
    for retry_after in [false, true] {
        let sim = sim(FlySim::builder().retry_after(retry_after)).await;
        // Two providers: two clients that know nothing of each other's calls.
        let (one, two) = (adapter(&sim), adapter(&sim));
        let sandbox = one.create(&CreateSpec::new()).await.unwrap();
        let other = two.connect(sandbox.id()).await.unwrap();
        tokio::join!(
            transfers_and_commands(sandbox.as_ref(), 3),
            transfers_and_commands(other.as_ref(), 4)
        );
        assert!(
            refused_execs(&sim) > 0,
            "two clients on one machine overrun its rate (Retry-After sent: {retry_after})"
        );
        sandbox.destroy().await.unwrap();
    }
}
