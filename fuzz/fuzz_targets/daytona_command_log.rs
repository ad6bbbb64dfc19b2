//! Any bytes, cut anywhere, as a Daytona command's log, read both ways the adapter reads one
//! (marker-framed WebSocket frames, a polled logs body as JSON or text): never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((first, rest)) = data.split_first() else {
        return;
    };
    let chunk = usize::from(*first >> 1) + 1;
    let _ = sandbox_daytona::testing::read_command_log(rest, chunk, first & 1 == 1);
});
