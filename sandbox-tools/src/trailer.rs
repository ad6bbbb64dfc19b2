//! A trailer line taken off the end of a command's stdout: `TOKEN value\n`, printed by a
//! script after the user's command to report state back (the `bash` tool's working directory).
//!
//! The token is random per [`Trailer`], so output cannot forge it by chance. Bytes that could
//! be the start of the token are held back until the next chunk shows whether they are; once
//! the token is seen, bytes up to the next newline are the value and are not output.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};

/// The longest value accepted; a longer "value" was output after all.
const MAX_VALUE: usize = 16 * 1024;

/// Finds and strips one trailer line in a stdout stream.
#[derive(Debug, Clone)]
pub(crate) struct Trailer {
    token: Vec<u8>,
    held: Vec<u8>,
    state: State,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Scanning,
    Value(Vec<u8>),
    Done(Vec<u8>),
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
            token: token.as_bytes().to_vec(),
            held: Vec::new(),
            state: State::Scanning,
        }
    }

    /// The token without its leading newline, as the script prints it after `\n`.
    pub fn token_text(&self) -> String {
        String::from_utf8_lossy(self.token.strip_prefix(b"\n").unwrap_or(&self.token)).into_owned()
    }

    /// Feeds one chunk; returns the bytes that are certainly output.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut data = std::mem::take(&mut self.held);
        data.extend_from_slice(chunk);
        let mut rest: &[u8] = &data;
        while !rest.is_empty() {
            match &mut self.state {
                State::Done(_) => {
                    out.extend_from_slice(rest);
                    rest = &[];
                }
                State::Value(value) => match rest.iter().position(|b| *b == b'\n') {
                    Some(end) if value.len() + end <= MAX_VALUE => {
                        value.extend_from_slice(&rest[..end]);
                        let value = std::mem::take(value);
                        self.state = State::Done(value);
                        rest = &rest[end + 1..];
                    }
                    None if value.len() + rest.len() <= MAX_VALUE => {
                        value.extend_from_slice(rest);
                        rest = &[];
                    }
                    _ => {
                        // Too long for a value: it was output.
                        out.extend_from_slice(&self.token);
                        out.append(value);
                        self.state = State::Scanning;
                    }
                },
                State::Scanning => {
                    if let Some(at) = find(rest, &self.token) {
                        out.extend_from_slice(&rest[..at]);
                        rest = &rest[at + self.token.len()..];
                        self.state = State::Value(Vec::new());
                    } else {
                        let keep = longest_prefix_suffix(rest, &self.token);
                        out.extend_from_slice(&rest[..rest.len() - keep]);
                        self.held = rest[rest.len() - keep..].to_vec();
                        rest = &[];
                    }
                }
            }
        }
        out
    }

    /// Ends the stream: returns the held-back output (and a trailer that never ended, which
    /// was output after all).
    pub fn finish(&mut self) -> Vec<u8> {
        let mut out = std::mem::take(&mut self.held);
        if let State::Value(value) = &mut self.state {
            let mut all = self.token.clone();
            all.append(value);
            all.append(&mut out);
            out = all;
            self.state = State::Scanning;
        }
        out
    }

    /// The trailer's value, once its whole line has come.
    pub fn value(&self) -> Option<String> {
        match &self.state {
            State::Done(value) => Some(String::from_utf8_lossy(value).into_owned()),
            _ => None,
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The length of the longest suffix of `data` that is a proper prefix of `token`.
fn longest_prefix_suffix(data: &[u8], token: &[u8]) -> usize {
    let max = data.len().min(token.len().saturating_sub(1));
    (1..=max)
        .rev()
        .find(|&n| data[data.len() - n..] == token[..n])
        .unwrap_or(0)
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
        assert_ne!(a.token, b.token);
        assert!(a.token.starts_with(b"\n"));
        assert!(!a.token_text().starts_with('\n'));
    }
}
