//! The E2B adapter's conformance suite, declared once: the replay adapter, the variables
//! recording needs, and how recording routes the adapter's requests to the live service.
//! `tests/conformance.rs` runs it; `tests/recording.rs` checks its recording wiring offline.

use sandbox_conformance::{
    AdapterSuite, LoggedRequest, REPLAY_CREATE_LOOKUP, REPLAY_REQUEST_TIMEOUT, RecordTarget, Vars,
    cassette,
};
use sandbox_e2b::E2bBuilder;
use sandbox_e2b::testing::{ENVD_PORT, envd_base_url};
use sandbox_sdk_core::{Capability, Provider};
use std::path::Path;
use std::sync::Arc;

/// The suite over the cassettes in `cassettes`.
pub fn e2b(cassettes: &Path) -> AdapterSuite {
    AdapterSuite::new("e2b", cassettes, |base_url| {
        let provider = E2bBuilder::new()
            .api_key(cassette::TOKEN)
            .api_url(base_url)
            .sandbox_url(base_url)
            .request_timeout(REPLAY_REQUEST_TIMEOUT)
            .create_lookup(REPLAY_CREATE_LOOKUP)
            .build()?;
        Ok(Arc::new(provider) as Arc<dyn Provider>)
    })
    .record_var(
        sandbox_e2b::env::API_KEY,
        "a live API key (and E2B_DOMAIN for a domain other than e2b.app)",
    )
    .record(record)
    // Capabilities no core trait operation reaches; E2B's inherent methods are proven in create.rs.
    .covered_elsewhere(
        Capability::EgressControl,
        "create::create_options_send_egress_rules_and_volumes",
    )
    .covered_elsewhere(
        Capability::Volumes,
        "create::create_options_send_egress_rules_and_volumes",
    )
}

/// Recording: the adapter built from `E2B_API_KEY`, `E2B_DOMAIN`, `E2B_API_URL` and
/// `E2B_SANDBOX_URL` with both base URLs pointed at the recording proxy, which sends
/// control-plane requests to the API host and envd requests (told apart by their routing
/// headers) to the sandbox's envd host. The API key is scrubbed from every cassette; envd
/// access tokens are scrubbed by the recorder itself.
fn record(vars: &Vars, out_dir: &Path) -> Result<RecordTarget, String> {
    let api_key = vars.require(sandbox_e2b::env::API_KEY)?;
    let builder = E2bBuilder::from_lookup(vars.lookup());
    let direct = builder
        .clone()
        .build()
        .map_err(|e| format!("cannot build the adapter from the environment: {e}"))?;
    let routes = Routes::of(&builder);
    Ok(RecordTarget::new(
        move |proxy| {
            let provider = builder.clone().api_url(proxy).sandbox_url(proxy).build()?;
            Ok(Arc::new(provider) as Arc<dyn Provider>)
        },
        Arc::new(direct),
        move |request| routes.route(request),
        out_dir,
    )
    .secret(api_key)
    .source("recorded from the live E2B service by cargo xtask record --provider e2b"))
}

/// Where the recording proxy forwards each request the adapter sends it.
#[derive(Debug, Clone)]
pub struct Routes {
    api_url: String,
    sandbox_url: Option<String>,
    domain: String,
}

impl Routes {
    pub fn of(builder: &E2bBuilder) -> Routes {
        Routes {
            api_url: builder
                .api_url_or_default()
                .trim_end_matches('/')
                .to_owned(),
            sandbox_url: builder.sandbox_url_override().map(str::to_owned),
            domain: builder.domain_or_default().to_owned(),
        }
    }

    /// envd requests (both routing headers) go to the sandbox's envd host, addressed as the
    /// adapter addresses it live (`sandbox.{domain}` with the headers for E2B's own domains,
    /// `49983-{id}.{domain}` for others, or `E2B_SANDBOX_URL`); requests without routing
    /// headers go to the control plane. One header without the other, a sandbox id that is not
    /// `[a-z0-9]+` or a port other than envd's has no route.
    pub fn route(&self, request: &LoggedRequest) -> Option<String> {
        match (
            request.header("e2b-sandbox-id"),
            request.header("e2b-sandbox-port"),
        ) {
            (None, None) => Some(self.api_url.clone()),
            (Some(id), Some(port)) => {
                let id_ok = !id.is_empty()
                    && id
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
                (id_ok && port.trim().parse::<u16>().ok() == Some(ENVD_PORT))
                    .then(|| envd_base_url(self.sandbox_url.as_deref(), &self.domain, id))
            }
            _ => None,
        }
    }
}
