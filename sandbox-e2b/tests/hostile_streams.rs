//! A process's Connect output stream, whatever the daemon sends, read as `exec` reads it: the
//! same inputs as the `e2b_process_stream` fuzz target (`cargo xtask fuzz`), as a proptest in
//! CI. Garbage, cut envelopes and any chunking end in an error or events, never a panic, and a
//! well-formed stream decodes the same however it is cut.

use proptest::prelude::*;
use sandbox_e2b::testing::read_process_stream;
use sandbox_sdk_core::ProcessEvent;

fn envelope(flags: u8, json: &str) -> Vec<u8> {
    let mut out = vec![flags];
    out.extend_from_slice(&(json.len() as u32).to_be_bytes());
    out.extend_from_slice(json.as_bytes());
    out
}

fn run(data: &[u8], chunk: usize) -> Vec<Result<ProcessEvent, String>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime
        .block_on(read_process_stream(data, chunk))
        .into_iter()
        .map(|e| e.map_err(|e| e.kind().as_str().to_owned()))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn any_bytes_end_in_events_or_an_error(
        bytes in prop::collection::vec(any::<u8>(), 0..512),
        chunk in 1usize..64,
    ) {
        let _ = run(&bytes, chunk);
    }

    #[test]
    fn a_well_formed_stream_decodes_the_same_however_it_is_cut(
        output in prop::collection::vec(any::<u8>(), 0..200),
        code in 0i32..256,
        chunk in 1usize..40,
    ) {
        let data = sandbox_conformance::cassette::encode_base64(&output);
        let mut stream = envelope(0, r#"{"event":{"start":{"pid":7}}}"#);
        stream.extend(envelope(0, &format!(r#"{{"event":{{"data":{{"stdout":"{data}"}}}}}}"#)));
        stream.extend(envelope(0, &format!(r#"{{"event":{{"end":{{"exitCode":{code},"exited":true,"status":"exit status {code}"}}}}}}"#)));
        stream.extend(envelope(2, "{}"));
        let whole = run(&stream, stream.len());
        prop_assert_eq!(&run(&stream, chunk), &whole);
        let stdout: Vec<u8> = whole
            .iter()
            .filter_map(|e| match e {
                Ok(ProcessEvent::Stdout(b)) => Some(b.to_vec()),
                _ => None,
            })
            .flatten()
            .collect();
        prop_assert_eq!(stdout, output);
        prop_assert!(matches!(whole.last(), Some(Ok(ProcessEvent::Exit(_)))), "{:?}", whole.last());
    }
}
