//! Keyed creates share their idempotency look-ups: Fly paces the machine list per app (1/s
//! after a burst of 3; PROTOCOL.md §3), so each keyed create listing on its own would make many
//! creates run at the list's rate. Against the simulator, on a paused clock (the simulator keeps
//! the API's time on it), many concurrent keyed creates send a handful of lists, still adopt a
//! machine already made under their key, and a lone keyed create sends the request it always
//! did. A machine someone else made under the key is never adopted.

use sandbox_fly::FlyProvider;
use sandbox_sdk_core::fleet::Owner;
use sandbox_sdk_core::idempotency::{FINGERPRINT_LABEL, create_fingerprint};
use sandbox_sdk_core::prelude::*;
use sandbox_sdk_core::{CreateSpec, ErrorKind, ListFilter};
use sandbox_sim::Simulator;
use sandbox_sim::fly::FlySim;
use std::time::Duration;

const LABEL: &str = "sandbox_sdk_idempotency_key";

fn adapter(sim: &FlySim) -> FlyProvider {
    FlyProvider::builder()
        .token(sim.token())
        .app(sim.app())
        .api_url(sim.url())
        .build()
        .unwrap()
}

/// A simulator without its own limits: the creates of this test would pass Fly's create rate;
/// the list pacing under test is the adapter's own.
async fn sim() -> FlySim {
    let sim = FlySim::builder()
        .start_time(Duration::ZERO)
        .rate_limits(false)
        .start()
        .await
        .unwrap();
    sim.server().log().clear();
    sim
}

fn lists(sim: &FlySim) -> Vec<String> {
    sim.server()
        .log()
        .entries()
        .iter()
        .filter(|e| e.operation == "list")
        .map(|e| e.query.clone().unwrap_or_default())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_lone_keyed_create_lists_its_key_only() {
    let sim = sim().await;
    let fly = adapter(&sim);
    fly.create(&CreateSpec::new().idempotency_key("job-1"))
        .await
        .unwrap();
    assert_eq!(
        lists(&sim),
        [format!("metadata.{LABEL}=job-1")],
        "the look-up a lone create sends is unchanged"
    );
}

#[tokio::test(start_paused = true)]
async fn concurrent_keyed_creates_share_few_lists_and_still_adopt_an_existing_key() {
    const N: usize = 40;
    let sim = sim().await;
    let fly = adapter(&sim);
    let existing = fly
        .create(&CreateSpec::new().idempotency_key("job-7"))
        .await
        .unwrap();
    let existing_id = existing.id().to_owned();
    sim.server().log().clear();
    let begun = tokio::time::Instant::now();
    let created = futures::future::join_all((0..N).map(|i| {
        let fly = &fly;
        async move {
            let spec = CreateSpec::new().idempotency_key(format!("job-{i}"));
            fly.create(&spec).await.unwrap().id().to_owned()
        }
    }))
    .await;
    let sent = lists(&sim);
    assert!(
        sent.len() <= 5,
        "{N} keyed creates sent {} lists: {sent:?}",
        sent.len()
    );
    // A shared list asks for every machine of the adapter's; each create found its own key.
    assert!(
        sent.iter().any(|q| q == "metadata.sandbox_sdk=1"),
        "{sent:?}"
    );
    assert_eq!(
        created[7], existing_id,
        "the machine made under job-7 is adopted"
    );
    let mut ids = created.clone();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), N, "one machine per key");
    assert_eq!(sim.sandboxes(), N, "no duplicate of job-7");
    assert_eq!(sim.server().log().count("create"), N - 1);
    // The lists went at Fly's rate, not one per create: a few seconds, not forty.
    assert!(
        begun.elapsed() < Duration::from_secs(10),
        "{:?}",
        begun.elapsed()
    );
    let listed = fly.list(&ListFilter::new()).collect::<Vec<_>>().await.len();
    assert_eq!(listed, N);
}

#[tokio::test(start_paused = true)]
async fn a_machine_someone_else_made_under_the_key_is_a_conflict_and_left_alone() {
    let sim = sim().await;
    let fly = adapter(&sim);
    let spec = Owner::new("me")
        .unwrap()
        .label(&CreateSpec::new().idempotency_key("job-sq"))
        .unwrap();
    let key = spec.idempotency_key.clone().unwrap();
    // Someone made machines carrying the key's label first: without this create's fingerprint,
    // and with it but another owner's label.
    let squatter = CreateSpec::new()
        .metadata(LABEL, key.as_str())
        .metadata("sandbox_sdk_owner", "me");
    let squat = fly.create_machine(&squatter).await.unwrap();
    let mut other_owner = spec.clone().metadata("sandbox_sdk_owner", "them");
    other_owner.idempotency_key = None;
    other_owner = other_owner
        .metadata(LABEL, key.as_str())
        .metadata(FINGERPRINT_LABEL, create_fingerprint(&spec).unwrap());
    let forged = fly.create_machine(&other_owner).await.unwrap();
    sim.server().log().clear();
    let e = match fly.create(&spec).await {
        Err(e) => e,
        Ok(sb) => panic!("adopted {}", sb.id()),
    };
    assert_eq!(e.kind(), ErrorKind::Conflict, "{e}");
    assert!(!e.is_retryable());
    assert!(e.to_string().contains(&format!("{key:?}")), "{e}");
    assert!(
        [squat.id(), forged.id()].contains(&e.sandbox_id().unwrap()),
        "{e}"
    );
    // Listed, and nothing else: no create, no start, no destroy.
    assert_eq!(
        sim.server().log().entries().len(),
        1,
        "{:?}",
        sim.server().log().entries()
    );
    assert_eq!(sim.sandboxes(), 2);
}
