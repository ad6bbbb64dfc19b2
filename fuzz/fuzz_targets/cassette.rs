//! Any text given as a cassette: parsing, the checks and placeholder substitution never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sandbox_conformance::cassette::{Cassette, Placeholders};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(cassette) = Cassette::from_json(text) {
        let _ = cassette.check();
        let _ = cassette.substituted(&Placeholders::standard("http://127.0.0.1:9"));
        let _ = cassette.to_json_pretty();
    }
});
