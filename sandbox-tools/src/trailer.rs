//! A trailer line taken off the end of a command's stdout: `TOKEN value\n`, printed by a
//! script after the user's command to report state back (the `bash` tool's working directory).
//!
//! The token is random per [`Trailer`], so output cannot forge it by chance. Bytes that could
//! be the start of the token are held back until the next chunk shows whether they are; once
//! the token is seen, bytes up to the next newline are the value and are not output. The
//! scanning is core's [`MarkScanner`], the one scanner for such lines.

use sandbox_sdk_core::emulate::MarkScanner;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};

/// The longest value accepted; a longer "value" was output after all.
const MAX_VALUE: usize = 16 * 1024;

/// Finds and strips one trailer line in a stdout stream: core's [`MarkScanner`], with any value
/// up to [`MAX_VALUE`] bytes.
#[derive(Debug, Clone)]
pub(crate) struct Trailer {
    scan: MarkScanner,
}

impl Trailer {
    /// A trailer with a fresh random token, which starts with a newline so that the line
    /// before it keeps its own ending: the script prints `\nTOKEN` then the value.
    pub fn new() -> Trailer {
        let n = RandomState::new().build_hasher().finish();
        let m = RandomState::new().build_hasher().finish();
        Trailer::with_token(&format!("\n__sbox_trailer_{n:016x}{m:016x}__"))
    }

    /// A trailer with a given token (for tests). It must not be empty.
    pub fn with_token(token: &str) -> Trailer {
        Trailer {
            scan: MarkScanner::new(token, |value, _| value.len() <= MAX_VALUE),
        }
    }

    /// The token without its leading newline, as the script prints it after `\n`.
    pub fn token_text(&self) -> String {
        let token = self.scan.token();
        String::from_utf8_lossy(token.strip_prefix(b"\n").unwrap_or(token)).into_owned()
    }

    /// Feeds one chunk; returns the bytes that are certainly output.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        self.scan.push(chunk).to_vec()
    }

    /// Ends the stream: returns the held-back output (and a trailer that never ended, which
    /// was output after all).
    pub fn finish(&mut self) -> Vec<u8> {
        self.scan.finish().to_vec()
    }

    /// The trailer's value, once its whole line has come.
    pub fn value(&self) -> Option<String> {
        self.scan
            .value()
            .map(|value| String::from_utf8_lossy(value).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "\n@@T@@";

    /// Feeds `input` split at `cuts` and returns (output, value).
    fn feed(input: &[u8], cuts: &[usize]) -> (Vec<u8>, Option<String>) {
        let mut trailer = Trailer::with_token(TOKEN);
        let mut out = Vec::new();
        let mut from = 0;
        for &cut in cuts.iter().chain(std::iter::once(&input.len())) {
            out.extend(trailer.push(&input[from..cut]));
            from = cut;
        }
        out.extend(trailer.finish());
        (out, trailer.value())
    }

    /// Every way to split `input` in two and in three gives the same answer.
    fn at_every_boundary(input: &[u8], want_out: &[u8], want: Option<&str>) {
        for i in 0..=input.len() {
            for j in i..=input.len() {
                let (out, value) = feed(input, &[i, j]);
                assert_eq!(out, want_out, "split at {i}, {j}");
                assert_eq!(value.as_deref(), want, "split at {i}, {j}");
            }
        }
    }

    #[test]
    fn the_trailer_is_taken_off_and_its_value_returned() {
        at_every_boundary(b"hello\n\n@@T@@/work/src\n", b"hello\n", Some("/work/src"));
        // Output without a final newline keeps exactly its bytes.
        at_every_boundary(b"partial\n@@T@@/tmp\n", b"partial", Some("/tmp"));
        at_every_boundary(b"\n@@T@@/\n", b"", Some("/"));
    }

    #[test]
    fn output_like_the_token_stays_output() {
        at_every_boundary(b"a\n@@T x\n@@", b"a\n@@T x\n@@", None);
        // A token with no newline after it was output, not a trailer.
        at_every_boundary(b"x\n@@T@@/half", b"x\n@@T@@/half", None);
    }

    #[test]
    fn bytes_after_the_trailer_line_are_output() {
        at_every_boundary(b"a\n@@T@@/d\nlate\n", b"alate\n", Some("/d"));
    }

    #[test]
    fn an_overlong_value_is_output() {
        let mut input = b"\n@@T@@".to_vec();
        input.extend(std::iter::repeat_n(b'x', MAX_VALUE + 1));
        input.push(b'\n');
        let (out, value) = feed(&input, &[]);
        assert_eq!(value, None);
        assert_eq!(out, input);
    }

    #[test]
    fn fresh_tokens_differ_and_print_without_the_newline() {
        let (a, b) = (Trailer::new(), Trailer::new());
        assert_ne!(a.scan.token(), b.scan.token());
        assert!(a.scan.token().starts_with(b"\n"));
        assert!(!a.token_text().starts_with('\n'));
    }
}
