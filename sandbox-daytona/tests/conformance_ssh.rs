//! The conformance suite again, with the adapter configured for [`ExecTransport::Ssh`] and
//! reported as `daytona-ssh`: every foreground command (exit codes, stdout and stderr apart,
//! env and cwd, timeout, stdin, kill, pty, streaming) runs over SSH against the in-process
//! stand-in for Daytona's gateway in `tests/gateway/`, whose commands are real local processes.
//!
//! The HTTP side still replays `spec` cassettes: `tests/cassettes/ssh/` holds the scenarios
//! whose requests change under SSH (the sandbox fetch and one `ssh-access` mint per command),
//! laid over `tests/cassettes/` for the rest. The tokens those mints hand out expired before
//! any run, so the adapter's process-wide token cache (keyed by API URL and sandbox, while the
//! replay servers' URLs are reused between tests) never carries one into another scenario,
//! and each command mints exactly once, as the cassettes count. The API names the cloud
//! gateway in `sshCommand`; [`DaytonaBuilder::ssh_gateway`] points the adapter at the
//! loopback one, whose host key is pinned with [`DaytonaBuilder::ssh_host_key`].

mod gateway;

use sandbox_conformance::{Suite, cassette, conformance_tests};
use sandbox_daytona::{DaytonaProvider, ExecTransport, LogFollow};
use sandbox_sdk_core::{Capability, Provider};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

const CASSETTES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/cassettes");

fn suite() -> Suite {
    Suite::replay(
        |base_url| {
            let provider = DaytonaProvider::builder()
                .api_key(cassette::TOKEN)
                .api_url(format!("{base_url}/api"))
                .toolbox_url(format!("{base_url}/toolbox"))
                .log_follow(LogFollow::Poll)
                .poll_interval(Duration::ZERO)
                .exec_transport(ExecTransport::Ssh)
                .ssh_gateway("127.0.0.1", gateway::port())
                .request_timeout(sandbox_conformance::REPLAY_REQUEST_TIMEOUT)
                .create_lookup(sandbox_conformance::REPLAY_CREATE_LOOKUP)
                // Pinned, as a caller should: without a pin (or the first-use opt-in) the
                // adapter refuses the gateway before sending the token.
                .ssh_host_key(gateway::fingerprint())
                .build()?;
            Ok(Arc::new(provider) as Arc<dyn Provider>)
        },
        overlay(),
    )
    .label("daytona-ssh")
    .covered_elsewhere(Capability::Region, CREATE_OPTIONS)
    .covered_elsewhere(Capability::Volumes, CREATE_OPTIONS)
    .covered_elsewhere(Capability::EgressControl, CREATE_OPTIONS)
    .covered_elsewhere(Capability::Gpu, CREATE_OPTIONS)
    .covered_elsewhere(
        Capability::Usage,
        "lifecycle::limits_come_from_the_usage_endpoint",
    )
}

/// The test in `tests/create.rs` that proves the create-time capabilities.
const CREATE_OPTIONS: &str = "create::create_sends_region_resources_volumes_and_network_rules";

/// `tests/cassettes/*.json` with `tests/cassettes/ssh/*.json` over them, written once per
/// process under the target's temporary directory. Each file is written with its final
/// content only (the `ssh/` one where it exists), replaced atomically: concurrent test
/// processes write the same bytes, so none can read a base cassette another process is about
/// to replace (which once made `exec_env_cwd` replay the toolbox cassette under load).
fn overlay() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("daytona-ssh-cassettes");
        std::fs::create_dir_all(&dir).expect("create the cassette overlay");
        let mut chosen = std::collections::BTreeMap::new();
        let base = Path::new(CASSETTES);
        for source in [base.to_owned(), base.join("ssh")] {
            for entry in std::fs::read_dir(&source).expect("read the cassettes") {
                let path = entry.expect("cassette entry").path();
                if let Some(name) = path.file_name().filter(|_| path.is_file()) {
                    chosen.insert(name.to_owned(), path.clone());
                }
            }
        }
        for (name, path) in chosen {
            let staged = dir.join(format!(
                "{}.{}.tmp",
                name.to_string_lossy(),
                std::process::id()
            ));
            std::fs::copy(&path, &staged).expect("stage a cassette");
            std::fs::rename(&staged, dir.join(&name)).expect("place a cassette");
        }
        dir
    })
    .clone()
}

conformance_tests!(suite());
