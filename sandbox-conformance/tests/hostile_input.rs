//! The kit's parsers against any input, as proptests in CI (the same inputs as the `cassette`
//! and `connect_envelope` fuzz targets that `cargo xtask fuzz` runs for longer): a cassette
//! file or a Connect stream, however malformed, is an error, never a panic.

use proptest::prelude::*;
use sandbox_conformance::cassette::{Cassette, Placeholders, connect_envelope, decode_connect};

/// Text that is often a cassette, or nearly one: a real cassette's skeleton with fields and
/// values drawn at random.
fn nearly_a_cassette() -> impl Strategy<Value = String> {
    (
        prop::sample::select(vec!["spec", "recorded", "", "bogus"]),
        prop::sample::select(vec!["GET", "POST", "", "X"]),
        "[/a-z{}0-9_.?=&%]{0,30}",
        0u16..700,
        "\\PC{0,40}",
        prop::sample::select(vec!["strict", "any", "", "9"]),
    )
        .prop_map(|(kind, method, path, status, body, order)| {
            format!(
                r#"{{"provenance": {{"kind": "{kind}", "source": "x"}}, "order": "{order}",
                   "interactions": [{{"request": {{"method": "{method}", "path": "{path}"}},
                   "response": {{"status": {status}, "body": {{"text": {body:?}}}}}}}]}}"#
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_text_as_a_cassette_is_parsed_or_refused(
        text in prop_oneof![nearly_a_cassette(), "\\PC{0,200}"],
    ) {
        if let Ok(cassette) = Cassette::from_json(&text) {
            let _ = cassette.check();
            let _ = cassette.substituted(&Placeholders::standard("http://127.0.0.1:9"));
            let _ = cassette.to_json_pretty();
        }
    }

    #[test]
    fn any_bytes_as_a_connect_stream_are_decoded_or_refused(
        bytes in prop::collection::vec(any::<u8>(), 0..256),
        message in "\\PC{0,40}",
        cut in 0usize..64,
    ) {
        let _ = decode_connect(&bytes);
        // A valid envelope cut anywhere is refused, not misread.
        let whole = connect_envelope(0, &serde_json::json!({"m": message}));
        let cut = cut.min(whole.len());
        if 0 < cut && cut < whole.len() {
            prop_assert!(decode_connect(&whole[..cut]).is_none());
        }
        prop_assert!(decode_connect(&whole).is_some());
    }
}
