//! Any status, `Retry-After` header and body a server answers with: the error mapper, the
//! provider-message and retry-after parsers never panic, and the error they build never
//! carries more of the body than the truncation limit allows.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sandbox_sdk_core::http::{ErrorResponse, default_error_mapper};

fuzz_target!(|data: &[u8]| {
    let (status, rest) = match data {
        [a, b, rest @ ..] => (u16::from_be_bytes([*a, *b]) % 1000, rest),
        _ => return,
    };
    let (retry_after, body) = match rest.iter().position(|b| *b == b'\n') {
        Some(at) => (String::from_utf8_lossy(&rest[..at]).into_owned(), &rest[at + 1..]),
        None => (String::new(), rest),
    };
    let response = ErrorResponse::new(status, body.to_vec()).with_header("retry-after", &retry_after);
    let _ = response.retry_after();
    let _ = response.provider_message();
    let _ = response.body_text();
    let error = default_error_mapper(&response);
    let shown = format!("{error} {error:?}");
    assert!(shown.len() < 64 * 1024, "an error shows {} bytes", shown.len());
});
