//! Mark lines in output: a script prints a unique token followed by a value and a newline after
//! the user's command (an exit code, a working directory, an end-of-output mark), and the
//! reader takes that line out of the stream and keeps its value.
//!
//! [`MarkScanner`] is the one state machine for it. It reads a stream cut at any byte, passes on
//! every byte as soon as it cannot belong to a mark line, holds back the rest (at most the token
//! and the longest value the rule allows), tells whether the mark was seen while the stream is
//! still open ([`MarkScanner::value`]), and gives back held bytes that were output after all
//! when the stream ends ([`MarkScanner::finish`]).
//!
//! A token written into the script is no secret: the script is the argv of a shell, and any
//! process in the sandbox can read `/proc/PID/cmdline` (and, as the same user, `environ`). A
//! program the command runs could print a mark line of its own and steer what the reader
//! concludes (an exit code, a working directory). [`KeyedMarks`] closes that: the script makes
//! the key itself, from `/dev/urandom`, into an unexported shell variable, and prints it as the
//! first line of stdout before anything else runs ([`KEY_PROLOGUE`]); mark lines carry it, and
//! the last one counts. The key is in no process's argv or environment, only in the shell's
//! memory and in the bytes on their way to the reader. [`ExitMarker`] is the exit-code mark
//! built on it; `sandbox-tools`' `bash` trailer is another; Daytona's end marks, which count
//! only as the last bytes of each stream, are [`KeyedMarks::at_end`] on stdout and
//! [`KeyedEnd`] on stderr, which has no key line of its own.
//!
//! What still can forge a mark: code running *in* that shell (its own script, and a line the
//! caller has it `eval` or source), which could just as well do what the mark reports; and a
//! process able to read the shell's memory (`ptrace`, `/proc/PID/mem`) or to read the shell's
//! stdout back before the reader does (opening `/proc/PID/fd/1` of a pipe for reading), which
//! needs the same user and, for the memory, ptrace rights. Nothing on a single output channel
//! can stop a process with those rights; the sandbox's own user separation can.

use bytes::Bytes;

/// The rule for what may stand between the token and the newline: `accept(value, whole)` is
/// asked with the value read so far (`whole == false`, while the newline has not come) and
/// with the whole value (`whole == true`). It must accept every beginning of a value it accepts
/// whole, and should refuse values past a small length, since everything from the token on is
/// held back while the rule accepts it.
pub type ValueRule = fn(value: &[u8], whole: bool) -> bool;

/// Finds one mark line, `TOKEN VALUE\n`, in a stream cut at any byte, and strips it from the
/// output (see the module docs).
///
/// By default every mark line whose value the rule accepts is taken out of the output and the
/// last one's value counts (an earlier one cannot override a later one); with
/// [`MarkScanner::at_end`] only a mark line that ends the stream counts, and one followed by
/// more bytes was output after all. Bytes that looked like a mark line and were
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
    /// The value of the last mark line taken out (not `at_end`).
    last: Option<Vec<u8>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// Looking for the token.
    Scanning,
    /// `held` starts with the token; the value is being read.
    Value,
    /// With `at_end`: the mark line was read and `held` is that line, taken back if more comes.
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
            last: None,
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

    /// The value of the last mark line read whole (with [`at_end`](Self::at_end): of the mark
    /// line that is the end of what was read so far).
    pub fn value(&self) -> Option<&[u8]> {
        match &self.state {
            State::Seen(value) => Some(value),
            _ if self.at_end => None,
            _ => self.last.as_deref(),
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
                        let value = rest[token..token + end].to_vec();
                        if self.at_end {
                            self.state = State::Seen(value);
                        } else {
                            // Taken out; a later mark line replaces its value.
                            self.last = Some(value);
                            at += token + end + 1;
                            self.state = State::Scanning;
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
        if matches!(self.state, State::Seen(_)) {
            // At the end the held bytes are exactly the mark line.
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

/// The start of the first line of stdout a keyed script prints: this, then the key in
/// [`KEY_HEX`] lowercase hex digits, then a newline.
pub const KEY_PREFIX: &str = "__sandbox_key_";

/// How many hex digits a key has (16 random bytes).
pub const KEY_HEX: usize = 32;

/// The start of a mark line's token, before the key (and after a newline for
/// [`KeyedMarks::on_own_line`]); a `:` follows the key, then the value.
pub const MARK_PREFIX: &str = "__sandbox_mark_";

/// The first line of stdout a keyed script prints when it could not make a key: [`KEY_PREFIX`]
/// then `none`. The reader takes it out and reads no mark from the stream.
pub const NO_KEY: &str = "none";

/// POSIX `sh` that makes a key from 16 bytes of `/dev/urandom` into the shell variable
/// `__sandbox_k` (unset first, so it is not exported even when the environment had one: no
/// child process gets it) and prints it on stdout as `__sandbox_key_HEX`. It must run before
/// anything else prints on stdout. Without `od` or `/dev/urandom` it leaves the variable empty,
/// so the mark lines print nothing, and prints the [`NO_KEY`] line instead: the first line is
/// the script's either way, so a program the command runs cannot announce a key of its own
/// there, and the reader, seeing no key, passes everything else on.
pub const KEY_PROLOGUE: &str = "unset __sandbox_k; __sandbox_k=$(printf %s $(od -An -N16 -tx1 /dev/urandom 2>/dev/null)); [ ${#__sandbox_k} = 32 ] && printf '__sandbox_key_%s\\n' \"$__sandbox_k\" || { __sandbox_k=; printf '__sandbox_key_none\\n'; }";

/// Mark lines whose token is a key the sandbox makes and announces on the first line of stdout
/// (see the module docs and [`KEY_PROLOGUE`]): a [`MarkScanner`] for `MARK_PREFIX KEY :`, made
/// once the key line has been read and taken out. Every mark line with the key is taken out,
/// and the last one's value counts.
///
/// A stream that does not start with a key line (the script could not make one, or something
/// printed first) is passed on whole (but for the [`NO_KEY`] line, taken out), and no value is
/// read from it. With [`KeyedMarks::at_end`] only a mark line that ends the stream counts.
///
/// ```
/// use sandbox_sdk_core::emulate::KeyedMarks;
///
/// let mut marks = KeyedMarks::new(|v, _| v.len() <= 3);
/// let key = "0123456789abcdef0123456789abcdef";
/// let mut out = marks.push(format!("__sandbox_key_{key}\nhi\n").as_bytes()).to_vec();
/// out.extend_from_slice(&marks.push(format!("__sandbox_mark_{key}:7\n").as_bytes()));
/// out.extend_from_slice(&marks.finish());
/// assert_eq!((out.as_slice(), marks.value()), (&b"hi\n"[..], Some(&b"7"[..])));
/// ```
#[derive(Debug, Clone)]
pub struct KeyedMarks {
    rule: ValueRule,
    own_line: bool,
    at_end: bool,
    phase: Phase,
}

#[derive(Debug, Clone)]
enum Phase {
    /// Reading the key line: the bytes so far, all of them a beginning of one.
    Key(Vec<u8>),
    /// The key was read: scanning for its mark lines.
    Marks(MarkScanner),
    /// No key line: everything is output.
    Plain,
}

/// What the first line of a keyed stream is, as far as it was read.
enum KeyLine {
    /// It may still become a key line or the [`NO_KEY`] line.
    More,
    /// A key line: the key ends at the first index, the line (with its newline) at the second.
    Key(usize, usize),
    /// The [`NO_KEY`] line, this long with its newline.
    NoKey(usize),
    /// Neither.
    Not,
}

/// How many of `bytes`' first `max` are lowercase hex digits, counted from the start.
fn hex_digits(bytes: &[u8], max: usize) -> usize {
    bytes
        .iter()
        .take(max)
        .take_while(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        .count()
}

fn read_key_line(line: &[u8]) -> KeyLine {
    let prefix = KEY_PREFIX.as_bytes();
    let head = line.len().min(prefix.len());
    if line[..head] != prefix[..head] {
        return KeyLine::Not;
    }
    let body = &line[head..];
    let none = NO_KEY.as_bytes();
    // `n` is no hex digit: the first byte tells the two lines apart.
    let (len, keyed) = if body.first() == Some(&none[0]) {
        let n = body.len().min(none.len());
        if body[..n] != none[..n] {
            return KeyLine::Not;
        }
        (none.len(), false)
    } else {
        if hex_digits(body, KEY_HEX) < body.len().min(KEY_HEX) {
            return KeyLine::Not;
        }
        (KEY_HEX, true)
    };
    let end = prefix.len() + len;
    let line_len = match &line[end.min(line.len())..] {
        [] | [b'\r'] => return KeyLine::More,
        [b'\n', ..] => end + 1,
        [b'\r', b'\n', ..] => end + 2,
        _ => return KeyLine::Not,
    };
    if keyed {
        KeyLine::Key(end, line_len)
    } else {
        KeyLine::NoKey(line_len)
    }
}

/// The shell line printing `{lead}__sandbox_mark_KEY:{value}\n` with the builtin `printf`, or
/// nothing when the script made no key.
fn printf_mark(lead: &str, value: &str) -> String {
    format!(
        "[ -z \"$__sandbox_k\" ] || printf '{lead}{MARK_PREFIX}%s:%s\\n' \"$__sandbox_k\" {value}"
    )
}

impl KeyedMarks {
    /// Marks whose values `rule` checks, printed right after the output they follow.
    pub fn new(rule: ValueRule) -> Self {
        KeyedMarks {
            rule,
            own_line: false,
            at_end: false,
            phase: Phase::Key(Vec::new()),
        }
    }

    /// Counts only a mark line that ends the stream (as [`MarkScanner::at_end`]): a mark line
    /// followed by more bytes was output, and [`value`](Self::value) is readable while the
    /// stream is open only as long as the mark is the last thing read.
    pub fn at_end(mut self) -> Self {
        self.at_end = true;
        self
    }

    /// Marks printed after a newline of their own, which is taken out with them: output that
    /// ends without a newline keeps exactly its bytes, and a line-oriented reader sees the mark
    /// on a line of its own.
    pub fn on_own_line(mut self) -> Self {
        self.own_line = true;
        self
    }

    /// The shell line printing a mark line with `value`, a shell word (such as `"$PWD"`), by the
    /// builtin `printf`, so the key is in no argv. It prints nothing when the script made no key.
    pub fn mark_line(&self, value: &str) -> String {
        printf_mark(if self.own_line { "\\n" } else { "" }, value)
    }

    /// Feeds one stdout chunk; returns the bytes that are certainly output.
    pub fn push(&mut self, chunk: &[u8]) -> Bytes {
        match &mut self.phase {
            Phase::Plain => Bytes::copy_from_slice(chunk),
            Phase::Marks(scan) => scan.push(chunk),
            Phase::Key(line) => {
                line.extend_from_slice(chunk);
                match read_key_line(line) {
                    KeyLine::More => Bytes::new(),
                    KeyLine::Not => {
                        let line = std::mem::take(line);
                        self.phase = Phase::Plain;
                        Bytes::from(line)
                    }
                    KeyLine::NoKey(len) => {
                        let rest = line.split_off(len);
                        self.phase = Phase::Plain;
                        Bytes::from(rest)
                    }
                    KeyLine::Key(hex_end, len) => {
                        let key = &line[KEY_PREFIX.len()..hex_end];
                        let mut token = Vec::new();
                        if self.own_line {
                            token.push(b'\n');
                        }
                        token.extend_from_slice(MARK_PREFIX.as_bytes());
                        token.extend_from_slice(key);
                        token.push(b':');
                        let rest = line.split_off(len);
                        let mut scan = MarkScanner::new(token, self.rule);
                        if self.at_end {
                            scan = scan.at_end();
                        }
                        let out = scan.push(&rest);
                        self.phase = Phase::Marks(scan);
                        out
                    }
                }
            }
        }
    }

    /// Ends the stream: returns the held-back output (a key line never finished is output).
    pub fn finish(&mut self) -> Bytes {
        match &mut self.phase {
            Phase::Plain => Bytes::new(),
            Phase::Marks(scan) => scan.finish(),
            Phase::Key(line) => {
                let line = std::mem::take(line);
                self.phase = Phase::Plain;
                Bytes::from(line)
            }
        }
    }

    /// Whether the stream began with a key line.
    pub fn keyed(&self) -> bool {
        matches!(self.phase, Phase::Marks(_))
    }

    /// The key the stream began with, once its line was read.
    pub fn key(&self) -> Option<&[u8]> {
        match &self.phase {
            Phase::Marks(scan) => {
                let from = usize::from(self.own_line) + MARK_PREFIX.len();
                scan.token().get(from..from + KEY_HEX)
            }
            _ => None,
        }
    }

    /// The last mark's value, once its whole line has been read.
    pub fn value(&self) -> Option<&[u8]> {
        match &self.phase {
            Phase::Marks(scan) => scan.value(),
            _ => None,
        }
    }

    /// How many bytes are held back: at most a key line, or a mark line.
    pub fn held_len(&self) -> usize {
        match &self.phase {
            Phase::Key(line) => line.len(),
            Phase::Marks(scan) => scan.held_len(),
            Phase::Plain => 0,
        }
    }
}

/// The keyed mark that ends a stream with no key line of its own, such as the stderr of a
/// script whose stdout announces the key: [`MARK_PREFIX`], the key, `:` and a newline, printed
/// by [`KeyedEnd::mark_line`] as the stream's last bytes. It counts only at the very end of the
/// stream (one followed by more bytes was output) and only with the key the other stream
/// announced ([`KeyedMarks::key`]). That key may be read after this stream's end, so a mark
/// line with any key is held back while it ends what was read (one line at most): the caller
/// compares [`KeyedEnd::key`] with the announced key, and [`KeyedEnd::finish`] gives the line
/// back as output unless its key is that one.
///
/// ```
/// use sandbox_sdk_core::emulate::KeyedEnd;
///
/// let key = "0123456789abcdef0123456789abcdef";
/// let mut end = KeyedEnd::new();
/// let mut out = end.push(format!("oops\n__sandbox_mark_{key}:\n").as_bytes()).to_vec();
/// assert_eq!(end.key(), Some(key.as_bytes()));
/// out.extend_from_slice(&end.finish(Some(key.as_bytes())));
/// assert_eq!(out, b"oops\n");
/// ```
#[derive(Debug, Clone)]
pub struct KeyedEnd {
    scan: MarkScanner,
}

impl Default for KeyedEnd {
    fn default() -> Self {
        Self::new()
    }
}

/// A key of [`KEY_HEX`] lowercase hex digits and a `:`, nothing after it.
fn key_colon(value: &[u8], whole: bool) -> bool {
    let digits = hex_digits(value, KEY_HEX);
    match value.len() {
        n if n <= KEY_HEX => digits == n && !whole,
        n if n == KEY_HEX + 1 => digits == KEY_HEX && value[KEY_HEX] == b':',
        _ => false,
    }
}

impl KeyedEnd {
    /// A reader for the mark ending a stream.
    pub fn new() -> Self {
        KeyedEnd {
            scan: MarkScanner::new(MARK_PREFIX, key_colon).at_end(),
        }
    }

    /// The shell line printing the mark on stdout (redirect it, as `… >&2`) with the builtin
    /// `printf`, so the key is in no argv; it prints nothing when the script made no key.
    pub fn mark_line() -> String {
        printf_mark("", "''")
    }

    /// Feeds one chunk; returns the bytes that are certainly output.
    pub fn push(&mut self, chunk: &[u8]) -> Bytes {
        self.scan.push(chunk)
    }

    /// The key of the mark line that ends what was read so far.
    pub fn key(&self) -> Option<&[u8]> {
        self.scan.value().and_then(|v| v.strip_suffix(b":"))
    }

    /// Ends the stream: returns the held-back output, with the mark line ending the stream
    /// unless its key is `key` (the one the other stream announced, if any).
    pub fn finish(&mut self, key: Option<&[u8]>) -> Bytes {
        let line = match (self.key(), key) {
            (Some(seen), Some(key)) if seen == key => None,
            (Some(seen), _) => Some([MARK_PREFIX.as_bytes(), seen, b":\n"].concat()),
            (None, _) => None,
        };
        let rest = self.scan.finish();
        match line {
            // A mark line ending the stream is all that was held.
            Some(line) => Bytes::from(line),
            None => rest,
        }
    }

    /// How many bytes are held back: at most one mark line.
    pub fn held_len(&self) -> usize {
        self.scan.held_len()
    }
}

/// Finds and strips the exit-code marker in a stdout stream: [`KeyedMarks`] whose value is the
/// decimal exit code (up to 10 digits, a carriage return before the newline allowed).
#[derive(Debug, Clone)]
pub struct ExitMarker {
    marks: KeyedMarks,
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
    /// A marker; its key is made by the script ([`ExitMarker::wrap`]) and read from the stream.
    pub fn new() -> Self {
        ExitMarker {
            marks: KeyedMarks::new(exit_code_rule),
        }
    }

    /// The POSIX `sh` script running `script` between the key's prologue and the marker: it
    /// makes and announces the key, runs `script`, prints the marker with its status and exits
    /// with that status.
    pub fn wrap(&self, script: &str) -> String {
        format!(
            "{KEY_PROLOGUE}\n{script}\n__sandbox_s=$?\n{}\nexit \"$__sandbox_s\"",
            self.marks.mark_line("\"$__sandbox_s\"")
        )
    }

    /// Feeds one stdout chunk; returns the bytes that are certainly output.
    pub fn push(&mut self, chunk: &[u8]) -> Bytes {
        self.marks.push(chunk)
    }

    /// Ends the stream: returns held-back output and the exit code, if a marker was complete.
    pub fn finish(&mut self) -> (Bytes, Option<i32>) {
        let rest = self.marks.finish();
        let code = self.marks.value().map(|value| {
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

    /// Every accepted mark line is taken out and the last one counts: a mark printed before the
    /// real one cannot override it.
    #[test]
    fn every_accepted_mark_line_is_taken_out_and_the_last_counts() {
        let scan = || MarkScanner::new("@@", digits);
        assert_eq!(
            whole(scan(), b"a@@1\nb@@2\n"),
            (b"ab".to_vec(), Some(b"2".to_vec()))
        );
        assert_eq!(
            whole(scan(), b"a@@1\nb@@x\n"),
            (b"ab@@x\n".to_vec(), Some(b"1".to_vec()))
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
        // A value is readable while the stream is open, and a later mark replaces it.
        let mut scan = scan();
        assert_eq!(&scan.push(b"x@@3\ny")[..], b"xy");
        assert_eq!(scan.value(), Some(&b"3"[..]));
        assert_eq!(&scan.push(b"@@4\n@")[..], b"");
        assert_eq!(scan.value(), Some(&b"4"[..]));
        assert_eq!(&scan.finish()[..], b"@");
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

    const KEY: &str = "0123456789abcdef0123456789abcdef";

    /// The key line of [`KEY`].
    fn key_line() -> Vec<u8> {
        format!("{KEY_PREFIX}{KEY}\n").into_bytes()
    }

    /// An exit-mark line of [`KEY`] with `code`.
    fn exit_line(code: &str) -> String {
        format!("{MARK_PREFIX}{KEY}:{code}\n")
    }

    /// Feeds `pieces` to an exit marker: (output, exit code).
    fn exit(pieces: &[&[u8]]) -> (Vec<u8>, Option<i32>) {
        let mut m = ExitMarker::new();
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
        let key = key_line();
        let stream = format!("hello __sandbox_mark_ world\n{}", exit_line("42\r"));
        assert_eq!(
            exit(&[&key, stream.as_bytes()]),
            (b"hello __sandbox_mark_ world\n".to_vec(), Some(42))
        );
        let broken = format!("abc {MARK_PREFIX}{KEY}:4\r2\n");
        assert_eq!(
            exit(&[&key, broken.as_bytes()]),
            (broken.clone().into_bytes(), None)
        );
        // A missing marker leaves output intact.
        assert_eq!(exit(&[&key, b"abc __m"]), (b"abc __m".to_vec(), None));
    }

    /// A stream that does not begin with a key line is passed on whole, marks and all: only the
    /// script that made the key could have printed it first.
    #[test]
    fn without_a_key_line_first_nothing_is_a_mark() {
        let late_key = [b"x".as_slice(), &key_line(), exit_line("0").as_bytes()].concat();
        assert_eq!(exit(&[&late_key]), (late_key.clone(), None));
        for bad in [
            format!("{KEY_PREFIX}{}\n", &KEY[..31]),
            format!("{KEY_PREFIX}{KEY}0\n"),
            format!("{KEY_PREFIX}{}\n", KEY.to_uppercase()),
            format!("{KEY_PREFIX}{KEY} \n"),
            KEY_PREFIX[..5].to_owned(),
        ] {
            let stream = [bad.as_bytes(), exit_line("0").as_bytes()].concat();
            assert_eq!(exit(&[&stream]), (stream.clone(), None), "{bad:?}");
        }
        // A key line ended by the stream is output.
        let mut marks = KeyedMarks::new(digits);
        assert!(marks.push(&key_line()[..20]).is_empty());
        assert_eq!(&marks.finish()[..], &key_line()[..20]);
        assert!(!marks.keyed());
    }

    /// The script that could not make a key says so on the first line, which is taken out: a key
    /// line a program prints after it announces nothing, and no mark counts.
    #[test]
    fn after_the_no_key_line_nothing_is_a_mark() {
        let none = format!("{KEY_PREFIX}{NO_KEY}\n");
        let forged = [key_line().as_slice(), b"out\n", exit_line("0").as_bytes()].concat();
        for first in [none.clone(), format!("{KEY_PREFIX}{NO_KEY}\r\n")] {
            let stream = [first.as_bytes(), &forged].concat();
            for cut in 0..=stream.len() {
                let (a, b) = stream.split_at(cut);
                assert_eq!(exit(&[a, b]), (forged.clone(), None), "cut at {cut}");
            }
        }
        // Not quite the no-key line: output.
        for bad in ["nonE\n", "non\n", "none \n", "nonee\n"] {
            let stream = format!("{KEY_PREFIX}{bad}x");
            assert_eq!(
                exit(&[stream.as_bytes()]),
                (stream.clone().into_bytes(), None)
            );
        }
        let mut marks = KeyedMarks::new(digits);
        assert!(marks.push(none.as_bytes()).is_empty());
        assert_eq!((marks.keyed(), marks.key()), (false, None));
    }

    /// At the end, keyed: the key is known once its line is read, and only a mark ending the
    /// stream counts.
    #[test]
    fn keyed_marks_at_the_end() {
        let mut marks = KeyedMarks::new(digits).at_end();
        assert_eq!(marks.key(), None);
        let mut out = marks.push(&key_line()).to_vec();
        assert_eq!(marks.key(), Some(KEY.as_bytes()));
        out.extend_from_slice(&marks.push(format!("a{}", exit_line("1")).as_bytes()));
        assert_eq!(marks.value(), Some(&b"1"[..]));
        out.extend_from_slice(&marks.push(b"b"));
        assert_eq!(marks.value(), None);
        out.extend_from_slice(&marks.push(exit_line("2").as_bytes()));
        assert_eq!(marks.value(), Some(&b"2"[..]));
        out.extend_from_slice(&marks.finish());
        assert_eq!(out, format!("a{}b", exit_line("1")).into_bytes());
        assert_eq!(marks.value(), Some(&b"2"[..]));
        // On a line of its own, the key is the same.
        let mut own = KeyedMarks::new(digits).on_own_line().at_end();
        own.push(&key_line());
        assert_eq!(own.key(), Some(KEY.as_bytes()));
    }

    /// The end mark of a stream without a key line: held back at the end whatever its key,
    /// judged with the key the other stream announced, output when anything follows it.
    #[test]
    fn keyed_ends_count_only_at_the_end_with_the_key() {
        let mark = format!("{MARK_PREFIX}{KEY}:\n");
        let other = format!("{MARK_PREFIX}{}:\n", "f".repeat(KEY_HEX));
        let feed = |input: &str, key: Option<&str>| {
            let mut end = KeyedEnd::new();
            let mut out = Vec::new();
            let mut seen = None;
            for byte in input.as_bytes().chunks(1) {
                out.extend_from_slice(&end.push(byte));
                seen = end.key().map(<[u8]>::to_vec);
                assert!(end.held_len() <= MARK_PREFIX.len() + KEY_HEX + 2);
            }
            out.extend_from_slice(&end.finish(key.map(str::as_bytes)));
            (String::from_utf8(out).unwrap(), seen)
        };
        let key = Some(KEY.as_bytes().to_vec());
        assert_eq!(
            feed(&format!("err{mark}"), Some(KEY)),
            ("err".into(), key.clone())
        );
        // Another key, no key known, or more after the mark: output.
        let guessed = Some("f".repeat(KEY_HEX).into_bytes());
        assert_eq!(
            feed(&format!("e{other}"), Some(KEY)),
            (format!("e{other}"), guessed)
        );
        assert_eq!(feed(&mark, None), (mark.clone(), key));
        assert_eq!(
            feed(&format!("{mark}x"), Some(KEY)),
            (format!("{mark}x"), None)
        );
        // Not a mark: a value, uppercase, a short key, a missing colon.
        for bad in [
            format!("{MARK_PREFIX}{KEY}:0\n"),
            format!("{MARK_PREFIX}{}:\n", KEY.to_uppercase()),
            format!("{MARK_PREFIX}{}:\n", &KEY[1..]),
            format!("{MARK_PREFIX}{KEY}\n"),
        ] {
            assert_eq!(feed(&bad, Some(KEY)), (bad.clone(), None), "{bad:?}");
        }
    }

    /// A mark with another key (one a process guessed, or read from an argv) is output, and a
    /// mark with the key printed before the last one does not count.
    #[test]
    fn only_the_key_counts_and_the_last_mark_wins() {
        let other = format!("{MARK_PREFIX}{}:0\n", "f".repeat(KEY_HEX));
        let stream = [
            key_line().as_slice(),
            other.as_bytes(),
            exit_line("0").as_bytes(),
            b"more\n",
            exit_line("3").as_bytes(),
        ]
        .concat();
        assert_eq!(
            exit(&[&stream]),
            ([other.as_bytes(), b"more\n"].concat(), Some(3))
        );
        // A carriage return before the key line's newline (a terminal) is part of it.
        let tty = [
            format!("{KEY_PREFIX}{KEY}\r\n").as_bytes(),
            b"a\r\n",
            exit_line("5\r").as_bytes(),
        ]
        .concat();
        assert_eq!(exit(&[&tty]), (b"a\r\n".to_vec(), Some(5)));
    }

    #[test]
    fn marker_is_found_wherever_the_chunks_split() {
        let stream = [
            key_line().as_slice(),
            b"hello __sandbox_mark_ world\n",
            exit_line("42").as_bytes(),
        ]
        .concat();
        for split in 0..=stream.len() {
            for second in split..=stream.len() {
                let (a, rest) = stream.split_at(split);
                let (b, c) = rest.split_at(second - split);
                assert_eq!(
                    exit(&[a, b, c]),
                    (b"hello __sandbox_mark_ world\n".to_vec(), Some(42)),
                    "split at {split}, {second}"
                );
            }
        }
    }

    /// The prologue and mark line run under this host's `sh` and, where installed, BusyBox's:
    /// the key is announced first, found in no argv or environment of the command (its own or
    /// its parent's), and the mark carries it; a command reading them finds nothing to forge
    /// with.
    #[test]
    fn the_script_makes_and_keeps_the_key_in_real_shells() {
        let mut shells = vec!["sh".to_owned()];
        if let Some(busybox) = ["/usr/bin/busybox", "/bin/busybox"]
            .iter()
            .find(|p| std::path::Path::new(p).exists())
        {
            shells.push(format!("{busybox} sh"));
        }
        let peek =
            "tr '\\0' '\\n' < /proc/$PPID/cmdline; tr '\\0' '\\n' < /proc/$PPID/environ; env";
        for shell in shells {
            let marker = ExitMarker::new();
            let script = marker.wrap(&format!(
                "sh -c {} && printf 'no newline'; (exit 7)",
                crate::shell::shell_quote(peek).unwrap()
            ));
            let mut argv = shell.split(' ').collect::<Vec<_>>();
            argv.extend(["-c", &script]);
            // A variable of that name in the environment does not make the key exported.
            let out = std::process::Command::new(argv[0])
                .args(&argv[1..])
                .env("__sandbox_k", "from-the-environment")
                .output()
                .unwrap();
            assert_eq!(out.status.code(), Some(7), "{shell}");
            let stdout = String::from_utf8(out.stdout).unwrap();
            let key = stdout
                .strip_prefix(KEY_PREFIX)
                .and_then(|rest| rest.get(..KEY_HEX))
                .unwrap_or_else(|| panic!("{shell}: no key line first: {stdout:?}"));
            assert!(key.bytes().all(|b| b.is_ascii_hexdigit()), "{shell}");
            let body = &stdout[KEY_PREFIX.len() + KEY_HEX + 1..];
            assert_eq!(
                body.matches(key).count(),
                1,
                "{shell}: the key shows only in the mark: {body:?}"
            );
            let mut m = marker.clone();
            let mut got = m.push(stdout.as_bytes()).to_vec();
            let (rest, code) = m.finish();
            got.extend_from_slice(&rest);
            assert_eq!(code, Some(7), "{shell}");
            assert!(
                String::from_utf8(got).unwrap().ends_with("no newline"),
                "{shell}"
            );
        }
    }

    /// Without `od` (here: a `PATH` with nothing in it) the script makes no key and says so first: the key line
    /// and marks a program prints then are output, and no exit code is read from them.
    #[test]
    fn without_od_the_script_says_no_key_and_no_mark_counts() {
        let marker = ExitMarker::new();
        let forged = format!("{KEY_PREFIX}{KEY}\n{}", exit_line("0"));
        let script = marker.wrap(&format!(
            "/bin/sh -c {}; (exit 7)",
            crate::shell::shell_quote(&format!("printf '%s' '{forged}'")).unwrap()
        ));
        let out = std::process::Command::new("/bin/sh")
            .args(["-c", &script])
            .env("PATH", "/nonexistent")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(7));
        assert_eq!(
            out.stdout,
            format!("{KEY_PREFIX}{NO_KEY}\n{forged}").into_bytes()
        );
        let mut m = marker.clone();
        let mut got = m.push(&out.stdout).to_vec();
        let (rest, code) = m.finish();
        got.extend_from_slice(&rest);
        assert_eq!((String::from_utf8(got).unwrap(), code), (forged, None));
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
        // The key line holds no more than itself.
        let mut marks = KeyedMarks::new(digits);
        marks.push(KEY_PREFIX.as_bytes());
        marks.push(KEY.as_bytes());
        assert_eq!(marks.held_len(), KEY_PREFIX.len() + KEY_HEX);
        assert_eq!(
            marks.push(&[b'x'; 1000]).len(),
            KEY_PREFIX.len() + KEY_HEX + 1000
        );
        assert_eq!(marks.held_len(), 0);
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
        /// both modes; what was taken out is whole mark lines (exactly one at the end).
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
                    if at_end {
                        prop_assert_eq!(removed, 2 + v.len() + 1);
                        prop_assert!(input.ends_with(&[b"@@", &v[..], b"\n"].concat()));
                    } else {
                        prop_assert!(removed > 2 + v.len(), "at least the last mark line");
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
            let input = [
                key_line(),
                format!("{before}{}{after}", exit_line(&code.to_string())).into_bytes(),
            ]
            .concat();
            let (a, b) = input.split_at(cut.index(input.len() + 1));
            prop_assert_eq!(exit(&[a, b]), (format!("{before}{after}").into_bytes(), Some(code)));
        }
    }
}
