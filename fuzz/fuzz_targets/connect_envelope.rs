//! Any bytes as a Connect stream of envelopes: the kit's decoder never panics and never
//! reads past its input.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = sandbox_conformance::cassette::decode_connect(data);
});
