//! Mark lines in output: a script prints a unique token followed by a value and a newline after
//! the user's command (an exit code, a working directory, an end-of-output mark), and the
//! reader takes that line out of the stream and keeps its value.
//!
//! [`MarkScanner`] is the one state machine for it. It reads a stream cut at any byte, passes on
//! every byte as soon as it cannot belong to a mark line, holds back the rest (at most the token
//! and the longest value the rule allows), tells whether the mark was seen while the stream is
//! still open ([`MarkScanner::value`]), and gives back held bytes that were output after all
//! when the stream ends ([`MarkScanner::finish`]). [`ExitMarker`] is the exit-code mark built on
//! it.

use bytes::Bytes;
use rand::Rng;

/// The rule for what may stand between the token and the newline: `accept(value, whole)` is
/// asked with the value read so far (`whole == false`, while the newline has not come) and
/// with the whole value (`whole == true`). It must accept every beginning of a value it accepts
/// whole, and should refuse values past a small length, since everything from the token on is
/// held back while the rule accepts it.
pub type ValueRule = fn(value: &[u8], whole: bool) -> bool;

/// Finds one mark line, `TOKEN VALUE\n`, in a stream cut at any byte, and strips it from the
/// output (see the module docs).
///
/// By default the first mark line whose value the rule accepts counts, and every byte after it
/// is output; with [`MarkScanner::at_end`] only a mark line that ends the stream counts, and one
/// followed by more bytes was output after all. Bytes that looked like a mark line and were
/// not one (a value the rule refuses, a stream ending before the newline) are output,
/// unchanged and in order.
///
/// ```
/// use sandbox_sdk_core::emulate::MarkScanner;
///
/// let mut scan = MarkScanner::new("@@", |v, _| v.len() <= 3 && v.iter().all(u8::is_ascii_digit));
/// let mut out = scan.push(b"hello\n@").to_vec();
/// out.extend_from_slice(&scan.push(b"@42\nbye"));
/// assert_eq!(scan.value(), Some(&b"42"[..]));
/// out.extend_from_slice(&scan.finish());
/// assert_eq!(out, b"hello\nbye");
/// ```
#[derive(Debug, Clone)]
pub struct MarkScanner {
    token: Vec<u8>,
    accept: ValueRule,
    at_end: bool,
    /// Bytes not passed on yet: a possible beginning of the token, a mark line being read
    /// (from its token on), or, at the end only, the whole mark line.
    held: Vec<u8>,
    state: State,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// Looking for the token.
    Scanning,
    /// `held` starts with the token; the value is being read.
    Value,
    /// The mark line was read; with `at_end`, `held` is that line, taken back if more comes.
    Seen(Vec<u8>),
}

impl MarkScanner {
    /// A scanner for `token` (which must not be empty: an empty token never matches) whose
    /// values `accept` checks.
    pub fn new(token: impl Into<Vec<u8>>, accept: ValueRule) -> Self {
        MarkScanner {
            token: token.into(),
            accept,
            at_end: false,
            held: Vec::new(),
            state: State::Scanning,
        }
    }

    /// Counts only a mark line that ends the stream: a mark followed by more bytes is output.
    pub fn at_end(mut self) -> Self {
        self.at_end = true;
        self
    }

    /// The token.
    pub fn token(&self) -> &[u8] {
        &self.token
    }

    /// The mark's value, once its whole line has been read (with [`at_end`](Self::at_end):
    /// while it is the end of what was read so far).
    pub fn value(&self) -> Option<&[u8]> {
        match &self.state {
            State::Seen(value) => Some(value),
            _ => None,
        }
    }

    /// Feeds one chunk; returns the bytes that are certainly output.
    ///
    /// Linear in the chunk whatever it holds: every byte is looked at a bounded number of
    /// times (at most the token's length plus the longest value the rule accepts).
    pub fn push(&mut self, chunk: &[u8]) -> Bytes {
        self.held.extend_from_slice(chunk);
        let mut out = Vec::new();
        // `held[..at]` is passed on or taken out; the rest is still to be decided.
        let mut at = 0;
        let token = self.token.len();
        loop {
            let rest = &self.held[at..];
            match &self.state {
                State::Scanning => match find(rest, &self.token) {
                    Some(i) => {
                        out.extend_from_slice(&rest[..i]);
                        at += i;
                        self.state = State::Value;
                    }
                    None => {
                        let keep = longest_prefix_suffix(rest, &self.token);
                        out.extend_from_slice(&rest[..rest.len() - keep]);
                        at += rest.len() - keep;
                        break;
                    }
                },
                State::Value => match read_value(&rest[token..], self.accept) {
                    Read::Line(end) => {
                        self.state = State::Seen(rest[token..token + end].to_vec());
                        if !self.at_end {
                            at += token + end + 1;
                        }
                    }
                    Read::Partial => break,
                    Read::Refused => {
                        // The token began no mark line: its first byte is output, and scanning
                        // goes on from the next (another token may start inside this one).
                        out.push(rest[0]);
                        at += 1;
                        self.state = State::Scanning;
                    }
                },
                State::Seen(_) if !self.at_end => {
                    out.extend_from_slice(rest);
                    at = self.held.len();
                    break;
                }
                State::Seen(value) => {
                    if rest.len() == token + value.len() + 1 {
                        break;
                    }
                    // More after the mark line: it was output.
                    out.push(rest[0]);
                    at += 1;
                    self.state = State::Scanning;
                }
            }
        }
        self.held.drain(..at);
        Bytes::from(out)
    }

    /// How many bytes are held back: at most the token and the longest value the rule
    /// accepts, with its newline, whatever was pushed.
    pub fn held_len(&self) -> usize {
        self.held.len()
    }

    /// Ends the stream: returns the held-back bytes that were output. Whether a mark was seen,
    /// and its value, stays readable through [`value`](Self::value).
    pub fn finish(&mut self) -> Bytes {
        if matches!(self.state, State::Value) {
            self.state = State::Scanning;
        }
        if self.value().is_some() {
            // At the end the held bytes are exactly the mark line; otherwise none are held.
            self.held.clear();
        }
        Bytes::from(std::mem::take(&mut self.held))
    }
}

/// What the bytes after a token are.
enum Read {
    /// A whole value the rule accepts, ending at this index (the newline's).
    Line(usize),
    /// The beginning of a value the rule accepts; the newline has not come yet.
    Partial,
    /// Not a value the rule accepts.
    Refused,
}

/// Reads `value` (the bytes after a token) byte by byte, stopping at the first the rule
/// refuses, so a long run of bytes after a token is never read further than the rule allows.
fn read_value(value: &[u8], accept: ValueRule) -> Read {
    for (i, b) in value.iter().enumerate() {
        if *b == b'\n' {
            return if accept(&value[..i], true) {
                Read::Line(i)
            } else {
                Read::Refused
            };
        }
        if !accept(&value[..=i], false) {
            return Read::Refused;
        }
    }
    if accept(value, false) {
        Read::Partial
    } else {
        Read::Refused
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return None;
    }
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

/// Finds and strips the exit-code marker in a stdout stream: a [`MarkScanner`] whose value is
/// the decimal exit code (up to 10 digits, a carriage return before the newline allowed).
#[derive(Debug, Clone)]
pub struct ExitMarker {
    scan: MarkScanner,
}

impl Default for ExitMarker {
    fn default() -> Self {
        Self::new()
    }
}

/// Up to 10 digits (at least one when whole), and a `\r` before the newline (a terminal's
/// line end).
fn exit_code_rule(value: &[u8], whole: bool) -> bool {
    let digits = value.strip_suffix(b"\r").unwrap_or(value);
    digits.len() <= 10 && digits.iter().all(u8::is_ascii_digit) && !(whole && digits.is_empty())
}

impl ExitMarker {
    /// A marker with a fresh random token.
    pub fn new() -> Self {
        let n: u128 = rand::rng().random();
        Self::with_token(&format!("__sandbox_exit_{n:032x}_"))
    }

    /// A marker with a given token (for tests). It must not be empty.
    pub fn with_token(token: &str) -> Self {
        ExitMarker {
            scan: MarkScanner::new(token, exit_code_rule),
        }
    }

    /// The shell line that prints the marker and the exit status of the line before it.
    pub fn script_line(&self) -> String {
        let token = String::from_utf8_lossy(self.scan.token());
        format!("printf '%s%d\\n' '{token}' \"$?\"")
    }

    /// Feeds one stdout chunk; returns the bytes that are certainly output.
    pub fn push(&mut self, chunk: &[u8]) -> Bytes {
        self.scan.push(chunk)
    }

    /// Ends the stream: returns held-back output and the exit code, if the marker was complete.
    pub fn finish(&mut self) -> (Bytes, Option<i32>) {
        let rest = self.scan.finish();
        let code = self.scan.value().map(|value| {
            std::str::from_utf8(value.strip_suffix(b"\r").unwrap_or(value))
                .ok()
                .and_then(|d| d.parse().ok())
                .unwrap_or(-1)
        });
        (rest, code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn digits(value: &[u8], whole: bool) -> bool {
        value.len() <= 3 && value.iter().all(u8::is_ascii_digit) && !(whole && value.is_empty())
    }

    /// Feeds `input` cut at `cuts` (sorted, within the input) and returns (output, value).
    fn feed(mut scan: MarkScanner, input: &[u8], cuts: &[usize]) -> (Vec<u8>, Option<Vec<u8>>) {
        let mut out = Vec::new();
        let mut from = 0;
        for &cut in cuts.iter().chain(std::iter::once(&input.len())) {
            out.extend_from_slice(&scan.push(&input[from..cut]));
            from = cut;
        }
        out.extend_from_slice(&scan.finish());
        (out, scan.value().map(<[u8]>::to_vec))
    }

    fn whole(scan: MarkScanner, input: &[u8]) -> (Vec<u8>, Option<Vec<u8>>) {
        feed(scan, input, &[])
    }

    #[test]
    fn the_first_accepted_mark_line_is_taken_out() {
        let scan = || MarkScanner::new("@@", digits);
        assert_eq!(
            whole(scan(), b"a@@1\nb@@2\n"),
            (b"ab@@2\n".to_vec(), Some(b"1".to_vec()))
        );
        // A refused value, an unfinished line, an overlong value: output, not marks.
        assert_eq!(whole(scan(), b"@@x\n"), (b"@@x\n".to_vec(), None));
        assert_eq!(whole(scan(), b"a@@12"), (b"a@@12".to_vec(), None));
        assert_eq!(whole(scan(), b"@@1234\n"), (b"@@1234\n".to_vec(), None));
        // The token may start inside a token that began no mark.
        assert_eq!(
            whole(scan(), b"@@@7\n"),
            (b"@".to_vec(), Some(b"7".to_vec()))
        );
    }

    #[test]
    fn at_end_only_the_last_line_counts_and_is_seen_before_finishing() {
        let mut scan = MarkScanner::new("@@", digits).at_end();
        assert_eq!(&scan.push(b"x@@3\n")[..], b"x");
        assert_eq!(scan.value(), Some(&b"3"[..]));
        // More output takes it back; a later mark at the end counts.
        assert_eq!(&scan.push(b"more@@")[..], b"@@3\nmore");
        assert_eq!(scan.value(), None);
        assert!(scan.push(b"4\n").is_empty());
        assert_eq!(scan.value(), Some(&b"4"[..]));
        assert!(scan.finish().is_empty());
        assert_eq!(scan.value(), Some(&b"4"[..]));
    }

    /// Feeds `pieces` to an exit marker for `__m_`: (output, exit code).
    fn exit(pieces: &[&[u8]]) -> (Vec<u8>, Option<i32>) {
        let mut m = ExitMarker::with_token("__m_");
        let mut out = Vec::new();
        for piece in pieces {
            out.extend_from_slice(&m.push(piece));
        }
        let (rest, code) = m.finish();
        out.extend_from_slice(&rest);
        (out, code)
    }

    #[test]
    fn exit_markers_read_codes_and_terminal_line_ends() {
        assert_eq!(
            exit(&[b"hello __m world\n__m_42\r\n"]),
            (b"hello __m world\n".to_vec(), Some(42))
        );
        assert_eq!(
            exit(&[b"abc __m_4\r2\n"]),
            (b"abc __m_4\r2\n".to_vec(), None)
        );
        // A missing marker leaves output intact.
        assert_eq!(exit(&[b"abc __m"]), (b"abc __m".to_vec(), None));
    }

    #[test]
    fn marker_is_found_wherever_the_chunks_split() {
        let stream = b"hello __m world\n__m_42\n";
        for split in 0..=stream.len() {
            let (a, b) = stream.split_at(split);
            assert_eq!(
                exit(&[a, b]),
                (b"hello __m world\n".to_vec(), Some(42)),
                "split at {split}"
            );
        }
    }

    /// Output made of endless token beginnings, or a token followed by an endless value, is
    /// passed on: what is held stays within one mark line, and a large chunk of tokens is
    /// read in linear time.
    #[test]
    fn held_bytes_stay_within_one_mark_line() {
        let mut scan = MarkScanner::new("@@@@", digits);
        let bound = 4 + 3 + 1;
        for piece in [&b"@@@"[..], b"@@@@12", b"@@@@1234567", b"@"] {
            for _ in 0..1000 {
                scan.push(piece);
                assert!(scan.held_len() <= bound, "{}", scan.held_len());
            }
        }
        let tokens = b"@@@@".repeat(1 << 18);
        let before = scan.held_len();
        assert_eq!(
            scan.push(&tokens).len() + scan.held_len(),
            tokens.len() + before
        );
        assert!(scan.held_len() <= bound);
    }

    /// Streams made of pieces that look like the token, its beginnings, values and newlines.
    fn stream() -> impl Strategy<Value = Vec<u8>> {
        let piece = prop_oneof![
            Just(b"@@".to_vec()),
            Just(b"@".to_vec()),
            Just(b"\n".to_vec()),
            Just(b"\r".to_vec()),
            "[0-9]{0,4}".prop_map(String::into_bytes),
            "[a-z@]{0,3}".prop_map(String::into_bytes),
        ];
        prop::collection::vec(piece, 0..12).prop_map(|p| p.concat())
    }

    proptest! {
        /// Any cutting of a stream gives the output and value of the stream in one piece, in
        /// both modes; and what was taken out is exactly one mark line.
        #[test]
        fn any_chunking_gives_the_same_result(
            input in stream(),
            cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
            at_end in any::<bool>(),
        ) {
            let make = || {
                let scan = MarkScanner::new("@@", digits);
                if at_end { scan.at_end() } else { scan }
            };
            let mut cuts: Vec<usize> = cuts.iter().map(|i| i.index(input.len() + 1)).collect();
            cuts.sort_unstable();
            let (out, value) = whole(make(), &input);
            prop_assert_eq!(feed(make(), &input, &cuts), (out.clone(), value.clone()));
            match value {
                None => prop_assert_eq!(&out, &input),
                Some(v) => {
                    let removed = input.len() - out.len();
                    prop_assert_eq!(removed, 2 + v.len() + 1);
                    if at_end {
                        prop_assert!(input.ends_with(&[b"@@", &v[..], b"\n"].concat()));
                    }
                }
            }
        }

        /// The exit marker, cut anywhere, finds the code wherever it is.
        #[test]
        fn exit_markers_survive_any_chunking(
            before in "[a-z_ \n]{0,20}",
            code in 0i32..100_000,
            after in "[a-z\n]{0,10}",
            cut in any::<prop::sample::Index>(),
        ) {
            let input = format!("{before}__m_{code}\n{after}").into_bytes();
            let (a, b) = input.split_at(cut.index(input.len() + 1));
            prop_assert_eq!(exit(&[a, b]), (format!("{before}{after}").into_bytes(), Some(code)));
        }
    }
}
