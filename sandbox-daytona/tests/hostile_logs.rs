//! A command's log, whatever the toolbox sends, read both ways the adapter reads one (marker
//! frames over the WebSocket, a polled logs body): the same inputs as the `daytona_command_log`
//! fuzz target (`cargo xtask fuzz`), as a proptest in CI. Garbage and any chunking give bytes
//! or an error, never a panic, and a well-formed log splits the same however it is cut.

use proptest::prelude::*;
use sandbox_daytona::testing::read_command_log;

/// A marked log: each line prefixed by its stream's marker (`01 01 01` or `02 02 02`).
fn marked(lines: &[(bool, Vec<u8>)]) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let (mut log, mut out, mut err) = (Vec::new(), Vec::new(), Vec::new());
    for (is_err, line) in lines {
        let marker: &[u8] = if *is_err { &[2, 2, 2] } else { &[1, 1, 1] };
        log.extend_from_slice(marker);
        log.extend_from_slice(line);
        if *is_err {
            err.extend_from_slice(line)
        } else {
            out.extend_from_slice(line)
        }
    }
    (log, out, err)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_bytes_give_output_or_an_error(
        bytes in prop::collection::vec(any::<u8>(), 0..512),
        chunk in 1usize..64,
        json in any::<bool>(),
    ) {
        let _ = read_command_log(&bytes, chunk, json);
    }

    #[test]
    fn a_marked_log_splits_the_same_however_it_is_cut(
        lines in prop::collection::vec((any::<bool>(), "[ -~]{1,12}\n".prop_map(String::into_bytes)), 0..10),
        chunk in 1usize..20,
    ) {
        let (log, out, err) = marked(&lines);
        let (framed, polled) = read_command_log(&log, chunk, false);
        prop_assert_eq!(&framed, &(out.clone(), err.clone()));
        prop_assert_eq!(polled.unwrap(), (out, err));
    }
}
