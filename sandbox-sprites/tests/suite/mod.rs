//! The Sprites adapter's conformance suite, declared once: the replay adapter, the variables
//! recording needs, and how recording reaches the service. `tests/conformance.rs` runs it.
//!
//! The replay adapter is built with a public URL (the `preview_link` scenario), the kit's
//! `REPLAY_REQUEST_TIMEOUT` (2 s) and `REPLAY_CREATE_LOOKUP` (the `create_*` scenarios answer a
//! create late on purpose).
//!
//! Recording (`cargo xtask record --provider sprites`) goes through the kit's proxy to
//! `SPRITES_API_URL` with `SPRITES_TOKEN`; the token is scrubbed. An upstream on loopback is
//! never the live service, so cassettes recorded from it (the Sprites simulator, `cargo xtask
//! sim --provider sprites`) say provenance `spec`, naming the simulator. The cassettes here were
//! made that way: none is recorded from the live API yet.

use sandbox_conformance::{
    AdapterSuite, REPLAY_CREATE_LOOKUP, REPLAY_REQUEST_TIMEOUT, RecordTarget, Vars, cassette,
};
use sandbox_sdk_core::{Capability, Provider};
use sandbox_sprites::{SpritesBuilder, SpritesProvider};
use std::path::Path;
use std::sync::Arc;

/// Where cassettes recorded from a loopback upstream say they come from.
const FROM_SIMULATOR: &str = "recorded through sandbox-conformance's proxy from sandbox-sim's \
    Sprites simulator (cargo xtask sim --provider sprites), which follows \
    sandbox-sprites/PROTOCOL.md (§4 sprites, §5 exec WebSocket, §7 files, §8 checkpoints, §18 \
    the choices where Fly's facts stop); not from the live API";

/// The name the replay adapter gives sprites a create does not name.
const REPLAY_NAME: &str = "sdk-conformance-replay";

/// The suite over the cassettes in `cassettes`.
pub fn sprites(cassettes: &Path) -> AdapterSuite {
    AdapterSuite::new("sprites", cassettes, |base_url| {
        let provider = SpritesProvider::builder()
            .token(cassette::TOKEN)
            .api_url(base_url)
            .public_url(true)
            .request_timeout(REPLAY_REQUEST_TIMEOUT)
            .create_timeout(REPLAY_REQUEST_TIMEOUT)
            .create_lookup(REPLAY_CREATE_LOOKUP)
            // The cassettes take any name; a fixed one keeps the request snapshots stable.
            .sprite_names(|| REPLAY_NAME.to_owned())
            .build()?;
        Ok(Arc::new(provider) as Arc<dyn Provider>)
    })
    .record_var(
        "SPRITES_TOKEN",
        "an organisation's Sprites API token (sprites.dev/account)",
    )
    .record(record)
    .covered_elsewhere(
        Capability::Region,
        "create::a_create_sends_the_body_the_official_sdks_send",
    )
}

fn record(vars: &Vars, out_dir: &Path) -> Result<RecordTarget, String> {
    let token = vars.require("SPRITES_TOKEN")?;
    let upstream = vars
        .get("SPRITES_API_URL")
        .unwrap_or_else(|| sandbox_sprites::DEFAULT_API_URL.to_owned());
    let proxied = SpritesBuilder::from_lookup(vars.lookup())
        .public_url(true)
        .request_timeout(REPLAY_REQUEST_TIMEOUT)
        .create_timeout(REPLAY_REQUEST_TIMEOUT);
    let target = RecordTarget::one_host(
        move |proxy| {
            let provider = proxied.clone().api_url(proxy).build()?;
            Ok(Arc::new(provider) as Arc<dyn Provider>)
        },
        &upstream,
        out_dir,
    )
    .map_err(|e| e.to_string())?
    .secret(token);
    Ok(if is_loopback(&upstream) {
        target.from_simulator(FROM_SIMULATOR)
    } else {
        target.source("recorded from the live Sprites API by cargo xtask record --provider sprites")
    })
}

/// Whether `url`'s host is this machine: the live Sprites API never is.
fn is_loopback(url: &str) -> bool {
    let rest = url.split("://").nth(1).unwrap_or(url);
    let host = rest.split(['/', ':']).next().unwrap_or_default();
    host == "localhost" || host.starts_with("127.") || rest.starts_with("[::1]")
}
