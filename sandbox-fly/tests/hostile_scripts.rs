//! The answers of the adapter's scripts, whatever a machine prints: the same inputs as the
//! `fly_script_output` fuzz target (`cargo xtask fuzz`), as a proptest in CI. Garbage and near
//! misses are refused or parsed, never a panic.

use proptest::prelude::*;
use sandbox_fly::testing::read_script_answers;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_text_is_parsed_or_refused(text in "\\PC{0,300}") {
        let _ = read_script_answers(&text);
    }

    #[test]
    fn near_miss_poll_answers_are_parsed_or_refused(
        alive in "[0-9a-z-]{0,3}",
        exit in "[-s0-9a-z]{0,6}",
        sizes in "[0-9 a-z-]{0,24}",
        out in "[A-Za-z0-9+/=\n. ]{0,80}",
        err in "[A-Za-z0-9+/=\n. ]{0,40}",
    ) {
        let text = format!("sandbox-fly-poll {alive} {exit} {sizes}\n{out}\n.\n{err}");
        let _ = read_script_answers(&text);
    }
}

#[test]
fn a_real_poll_answer_is_recognised() {
    let text = "sandbox-fly-poll 0 3 3 0\naGkK\n.\n\n";
    assert_eq!(read_script_answers(text), (true, 0));
}
