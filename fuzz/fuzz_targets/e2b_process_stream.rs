//! Any bytes, cut anywhere, as the Connect body of an E2B process's output stream, read the way
//! `exec` reads one: events or an error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((first, rest)) = data.split_first() else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let _ = runtime.block_on(sandbox_e2b::testing::read_process_stream(rest, usize::from(*first) + 1));
});
