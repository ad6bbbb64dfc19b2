//! The only code that speaks HTTP: [`Api`] holds the two clients (control plane and envd) and
//! the resolved settings; [`control`] has one method per control-plane endpoint, [`envd`] one per
//! envd RPC or `/files` call, and [`connect`] reads Connect server streams.

pub(crate) mod connect;
pub(crate) mod control;
pub(crate) mod envd;
pub(crate) mod interpreter;

use crate::config::{Config, PROVIDER};
use crate::error::{Failure, map_error};
use sandbox_sdk_core::Result;
use sandbox_sdk_core::http::{ErrorResponse, HttpClient};

/// The clients one provider and all its sandboxes share.
#[derive(Debug)]
pub(crate) struct Api {
    /// The control plane (`X-API-Key` on every request).
    pub control: HttpClient,
    /// envd, based at [`Config::envd_base`]; each sandbox re-bases it
    /// ([`envd::Envd::from_answer`]).
    pub envd: HttpClient,
    /// The settings both were built from.
    pub config: Config,
}

impl Api {
    /// Builds both clients; a bad URL or certificate is a `Validation` error.
    pub fn new(config: Config) -> Result<Api> {
        let mapper = |r: &ErrorResponse| {
            map_error(Failure {
                status: r.status,
                body: &r.body,
                retry_after: r.retry_after(),
                should_retry: r.headers.get("should-retry"),
                operation: &r.operation,
                sandbox_id: r.sandbox_id.as_deref(),
                request_id: r.request_id.as_deref(),
            })
        };
        let user_agent = concat!("sandbox-sdk-rs-e2b/", env!("CARGO_PKG_VERSION"));
        let mut control = HttpClient::builder(PROVIDER, &config.api_url)
            .auth_header("X-API-Key", config.api_key.clone())
            .timeout(config.request_timeout)
            .user_agent(user_agent)
            .error_mapper(mapper);
        for pem in &config.root_certificates {
            control = control.root_certificate_pem(pem);
        }
        #[cfg(feature = "gzip")]
        let control = control.gzip(config.gzip);
        let control = control.build()?;
        // HTTP/1.1 for all envd traffic (/files, Connect streams, unary calls): the sandbox
        // proxy pads responses with an empty HTTP/2 DATA frame about every 32 KiB, and h2
        // closes a connection with ENHANCE_YOUR_CALM after 100 of them over its lifetime,
        // failing a download past ~3 MiB and every stream sharing its connection
        // (PROTOCOL.md §3.4). The control plane keeps what it negotiates.
        let mut envd = HttpClient::builder(PROVIDER, &config.envd_base())
            .http1_only(true)
            .timeout(config.request_timeout)
            .user_agent(user_agent)
            .error_mapper(mapper);
        for pem in &config.root_certificates {
            envd = envd.root_certificate_pem(pem);
        }
        #[cfg(feature = "gzip")]
        let envd = envd.gzip(config.gzip);
        let envd = envd.build()?;
        Ok(Api {
            control,
            envd,
            config,
        })
    }
}
