//! The Vercel adapter's conformance suite, declared once: the replay adapter, the variables
//! recording needs, and how recording reaches the live API. `tests/conformance.rs` runs it.
//!
//! The replay adapter is built for team `team_conformance` and project `prj_conformance`, with
//! port 8080 exposed (the `preview_link` scenario), the kit's `REPLAY_REQUEST_TIMEOUT` (2 s)
//! and `REPLAY_CREATE_LOOKUP` (the `create_*` scenarios answer a create late on purpose).
//!
//! Recording (`cargo xtask record --provider vercel`) uses the live REST API
//! (`VERCEL_API_URL`, default `https://api.vercel.com`) with `VERCEL_TOKEN`, `VERCEL_TEAM_ID`
//! and `VERCEL_PROJECT_ID`; the token is scrubbed and the team and project written as the
//! replay ones. The cassettes here are `spec` cassettes: none has been recorded yet.

use sandbox_conformance::{
    AdapterSuite, REPLAY_CREATE_LOOKUP, REPLAY_REQUEST_TIMEOUT, RecordTarget, Vars, cassette,
};
use sandbox_sdk_core::{Capability, Provider};
use sandbox_vercel::{VercelBuilder, VercelProvider};
use std::path::Path;
use std::sync::Arc;

/// The team and project the replay adapter is built for.
pub const REPLAY_TEAM: &str = "team_conformance";
pub const REPLAY_PROJECT: &str = "prj_conformance";

/// The mtime replayed writes carry (2025-12-01T04:00:00Z, the sandboxes' creation time in the cassettes), so their gzip tar bodies, and so
/// the snapshots, are the same on every run.
pub const REPLAY_FILE_MTIME: u64 = 1_764_561_600;

/// The suite over the cassettes in `cassettes`.
pub fn vercel(cassettes: &Path) -> AdapterSuite {
    AdapterSuite::new("vercel", cassettes, |base_url| {
        let provider = VercelProvider::builder()
            .token(cassette::TOKEN)
            .team_id(REPLAY_TEAM)
            .project_id(REPLAY_PROJECT)
            .api_url(base_url)
            .expose_port(8080)
            .file_mtime(REPLAY_FILE_MTIME)
            .request_timeout(REPLAY_REQUEST_TIMEOUT)
            .create_lookup(REPLAY_CREATE_LOOKUP)
            .build()?;
        Ok(Arc::new(provider) as Arc<dyn Provider>)
    })
    .record_var(
        "VERCEL_TOKEN",
        "an access token (vercel.com/account/tokens)",
    )
    .record_var("VERCEL_TEAM_ID", "the team the token works in (team_…)")
    .record_var(
        "VERCEL_PROJECT_ID",
        "the project sandboxes are made in (prj_…)",
    )
    .record(record)
    .covered_elsewhere(Capability::Region, "create::create_sends_the_region")
}

fn record(vars: &Vars, out_dir: &Path) -> Result<RecordTarget, String> {
    let token = vars.require("VERCEL_TOKEN")?;
    let team = vars.require("VERCEL_TEAM_ID")?;
    let project = vars.require("VERCEL_PROJECT_ID")?;
    let upstream = vars
        .get("VERCEL_API_URL")
        .unwrap_or_else(|| sandbox_vercel::DEFAULT_API_URL.to_owned());
    let proxied = VercelBuilder::from_lookup(vars.lookup())
        .expose_port(8080)
        .file_mtime(REPLAY_FILE_MTIME)
        .request_timeout(REPLAY_REQUEST_TIMEOUT);
    let target = RecordTarget::one_host(
        move |proxy| {
            let provider = proxied.clone().api_url(proxy).build()?;
            Ok(Arc::new(provider) as Arc<dyn Provider>)
        },
        &upstream,
        out_dir,
    )
    .map_err(|e| e.to_string())?;
    Ok(target
        .secret(token)
        .replace(team, REPLAY_TEAM)
        .replace(project, REPLAY_PROJECT)
        .source("recorded from the live Vercel Sandbox REST API by cargo xtask record --provider vercel"))
}
