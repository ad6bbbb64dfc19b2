//! The shared conformance suite live against the E2B simulator (`sandbox_conformance::sim::e2b`),
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
//! The generated tests run each scenario on a runtime of its own, so the simulator runs on a
//! runtime of its own too, on a thread that lives as long as the test binary.

use sandbox_conformance::sim::e2b::E2bSim;
use sandbox_conformance::{Suite, conformance_tests};
use sandbox_e2b::wire::NetworkConfig;
use sandbox_e2b::{CreateOptions, E2bBuilder, E2bProvider};
use sandbox_sdk_core::{
    Capabilities, Capability, CreateSpec, ListFilter, Provider, Result, Sandbox, SandboxStream,
};
use std::sync::{Arc, OnceLock};

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
}

/// The simulator's URL and API key, started once for the whole binary.
fn simulator() -> &'static (String, String) {
    static SIM: OnceLock<(String, String)> = OnceLock::new();
    SIM.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("a runtime for the simulator");
            runtime.block_on(async move {
                let sim = E2bSim::start().await.expect("the E2B simulator starts");
                tx.send((sim.url().to_owned(), sim.api_key().to_owned()))
                    .expect("the test waits for the simulator");
                std::future::pending::<()>().await;
            });
        });
        rx.recv().expect("the simulator thread reports its URL")
    })
}

fn suite() -> Suite {
    let (url, key) = simulator();
    let provider = E2bBuilder::new()
        .api_key(key)
        .api_url(url)
        .sandbox_url(url)
        .build()
        .expect("the adapter builds for the simulator");
    Suite::live(Arc::new(Private(provider)) as Arc<dyn Provider>)
        .label("e2b-sim")
        .covered_elsewhere(
            Capability::EgressControl,
            "adapter::create_options_send_egress_rules_and_volumes",
        )
        .covered_elsewhere(
            Capability::Volumes,
            "adapter::create_options_send_egress_rules_and_volumes",
        )
}

conformance_tests!(suite());
