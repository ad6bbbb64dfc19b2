//! Any text as what the files-over-exec scripts print for `stat` and a directory listing (the
//! core emulation Fly uses): parsed or refused, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sandbox_sdk_core::emulate::files::{parse_list, parse_stat_line};

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = parse_list(text);
        for line in text.lines() {
            let _ = parse_stat_line(line, "/fuzz");
        }
    }
});
