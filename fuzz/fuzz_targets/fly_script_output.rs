//! Any text as the answer of the Fly adapter's poll and process-list scripts: parsed or
//! refused, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = sandbox_fly::testing::read_script_answers(text);
    }
});
