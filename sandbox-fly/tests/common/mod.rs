//! The one fixture style of the Fly tests: a provider built for app `conformance-app` against a
//! replay server that answers from one `spec` cassette in `tests/cassettes/fly/`, and checks at
//! the end that every interaction was used as the cassette says.

#![allow(dead_code)]

use sandbox_conformance::cassette::{self, Cassette, Placeholders};
use sandbox_conformance::replay::ReplayServer;
use sandbox_fly::{FlyBuilder, FlyProvider};
use std::time::Duration;

pub struct Replay {
    pub server: ReplayServer,
}

impl Replay {
    pub async fn start(name: &str) -> Replay {
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

    pub fn builder(&self) -> FlyBuilder {
        FlyProvider::builder()
            .token(cassette::TOKEN)
            .app("conformance-app")
            .api_url(self.server.url())
            .poll_interval(Duration::ZERO)
    }

    pub fn provider(&self) -> FlyProvider {
        self.builder().build().expect("provider")
    }

    pub async fn verify(&self) {
        self.server
            .verify()
            .await
            .expect("every interaction used as the cassette says");
    }
}

pub const ID: &str = cassette::SANDBOX_ID;
pub const REQUEST_ID: &str = "01JJRPZ859TZM6BZ1A9RN4AZ5N-ord";
