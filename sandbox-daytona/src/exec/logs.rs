//! Reading a session command's non-follow logs incrementally, for [`LogFollow::Poll`].
//!
//! The logs endpoint (`GET T/process/session/{sid}/command/{cid}/logs`, PROTOCOL.md §6.2, §9)
//! takes no offset or range: every poll answers the whole log so far, as JSON
//! `{"output": <marked log>, "stdout": …, "stderr": …}` (or only `output` on older daemons, or
//! the raw marked log as `text/plain`). So each poll still downloads the whole log, but nothing
//! here keeps it: [`BodyScan`] reads the body chunk by chunk, decoding the JSON strings as they
//! stream past, skips the bytes a [`LogCursor`] has already passed on, and gives back only the
//! new ones. Memory stays at one chunk however long the log grows, and the marked `output`
//! continues through one [`LogDemux`] across polls.
//!
//! [`LogFollow::Poll`]: crate::LogFollow::Poll

use super::demux::{LogDemux, LogStream};
use bytes::Bytes;
use sandbox_sdk_core::{Error, ErrorKind, Result};

/// Which form of the log this command's answers use, fixed by the first field with content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    /// The marked log (`output`, or a `text/plain` body), split by the demultiplexer.
    Marked,
    /// `stdout` and `stderr` apart.
    Split,
}

/// What of one command's log has been passed on, across polls.
#[derive(Debug, Default)]
pub(crate) struct LogCursor {
    form: Option<Form>,
    seen_output: u64,
    seen_stdout: u64,
    seen_stderr: u64,
    demux: LogDemux,
}

impl LogCursor {
    /// Ends the log: marker bytes the demultiplexer still holds are data.
    pub(crate) fn finish(&mut self) -> Vec<(LogStream, Bytes)> {
        self.demux.finish()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Output,
    Stdout,
    Stderr,
    Other,
}

/// Where the JSON scanner is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before the opening `{`.
    Start,
    /// Before a key (or the closing `}`).
    BeforeKey,
    /// Inside a key.
    Key {
        escaped: bool,
    },
    /// After a key, before `:`.
    AfterKey,
    /// After `:`, before the value.
    BeforeValue,
    /// Inside a string value.
    Str,
    /// After a backslash in a string value.
    Escape,
    /// Reading the hex digits of `\uXXXX` (`count` read so far).
    Unicode {
        value: u32,
        count: u8,
    },
    /// After a high surrogate, expecting `\` then `u` of its low half.
    LowBackslash {
        high: u32,
    },
    LowU {
        high: u32,
    },
    LowHex {
        high: u32,
        value: u32,
        count: u8,
    },
    /// Inside a value that is not a string (number, literal, object, array), skipped.
    Other {
        depth: u32,
        in_string: bool,
        escaped: bool,
    },
    /// After a value, before `,` or `}`.
    AfterValue,
    /// After the closing `}`.
    Done,
}

/// Stdout and stderr bytes, apart.
pub type Split = (Vec<u8>, Vec<u8>);

/// Reads `data`, cut into `chunk`-byte pieces, the two ways a command's log arrives: as
/// marker-framed WebSocket frames through the demultiplexer, and as one polled logs body (JSON
/// when `json`). Returns the stdout and stderr bytes each way passed on (or the body's error):
/// the fuzz target `daytona_command_log` and its proptest drive it.
pub(crate) fn read_command_log(data: &[u8], chunk: usize, json: bool) -> (Split, Result<Split>) {
    let collect = |pieces: Vec<(LogStream, Bytes)>, into: &mut Split| {
        for (stream, bytes) in pieces {
            match stream {
                LogStream::Stdout => into.0.extend_from_slice(&bytes),
                LogStream::Stderr => into.1.extend_from_slice(&bytes),
            }
        }
    };
    let mut framed = (Vec::new(), Vec::new());
    let mut demux = LogDemux::new();
    for piece in data.chunks(chunk.max(1)) {
        collect(demux.feed(piece), &mut framed);
    }
    collect(demux.finish(), &mut framed);
    let polled = (|| {
        let mut out = (Vec::new(), Vec::new());
        let mut cursor = LogCursor::default();
        let content_type = if json {
            "application/json"
        } else {
            "text/plain"
        };
        let mut scan = BodyScan::new(Some(content_type));
        for piece in data.chunks(chunk.max(1)) {
            collect(scan.feed(&mut cursor, piece)?, &mut out);
        }
        scan.finish()?;
        collect(cursor.finish(), &mut out);
        Ok(out)
    })();
    (framed, polled)
}

/// One poll's logs body being read. Feed it the body's chunks in order, then `finish`.
#[derive(Debug)]
pub(crate) struct BodyScan {
    json: bool,
    state: State,
    key: Vec<u8>,
    field: Field,
    /// Decoded bytes of the current field so far in this body.
    position: u64,
    /// Bytes of a field decoded from the current chunk, waiting to be placed.
    decoded: Vec<u8>,
}

impl BodyScan {
    /// A scan of a body with this `Content-Type`: JSON when it names json, else the raw log.
    pub(crate) fn new(content_type: Option<&str>) -> Self {
        let json = content_type.is_some_and(|ct| ct.contains("json"));
        BodyScan {
            json,
            state: if json { State::Start } else { State::Str },
            key: Vec::new(),
            field: if json { Field::Other } else { Field::Output },
            position: 0,
            decoded: Vec::new(),
        }
    }

    /// Reads one chunk; returns the output in it that `cursor` had not passed on yet.
    pub(crate) fn feed(
        &mut self,
        cursor: &mut LogCursor,
        chunk: &[u8],
    ) -> Result<Vec<(LogStream, Bytes)>> {
        let mut out = Vec::new();
        if !self.json {
            self.decoded.extend_from_slice(chunk);
            self.place(cursor, &mut out);
            return Ok(out);
        }
        let mut at = 0;
        while at < chunk.len() {
            if self.state == State::Str {
                // The plain run of a string up to its next quote or backslash, in one go.
                let run = chunk[at..]
                    .iter()
                    .position(|b| *b == b'"' || *b == b'\\')
                    .unwrap_or(chunk.len() - at);
                if run > 0 {
                    self.decoded.extend_from_slice(&chunk[at..at + run]);
                    at += run;
                    if self.decoded.len() >= 64 * 1024 {
                        self.place(cursor, &mut out);
                    }
                    continue;
                }
            }
            self.step(chunk[at])?;
            at += 1;
            // A string ended (its bytes belong to its field), or the decode buffer is full.
            if (self.state == State::AfterValue && !self.decoded.is_empty())
                || self.decoded.len() >= 64 * 1024
            {
                self.place(cursor, &mut out);
            }
        }
        self.place(cursor, &mut out);
        Ok(out)
    }

    /// The body ended: a JSON body must have been a whole object.
    pub(crate) fn finish(self) -> Result<()> {
        if self.json && self.state != State::Done {
            return Err(Error::new(
                ErrorKind::Provider,
                "command logs are not the expected JSON (the body ended early)",
            ));
        }
        Ok(())
    }

    /// Places the decoded bytes of the current field: those before what the cursor passed on
    /// are skipped, the rest are new.
    fn place(&mut self, cursor: &mut LogCursor, out: &mut Vec<(LogStream, Bytes)>) {
        if self.decoded.is_empty() {
            return;
        }
        let data = std::mem::take(&mut self.decoded);
        let start = self.position;
        self.position += data.len() as u64;
        let form = match self.field {
            Field::Output => Form::Marked,
            Field::Stdout | Field::Stderr => Form::Split,
            Field::Other => return,
        };
        // The first field with content fixes the form: the others carry the same output.
        if *cursor.form.get_or_insert(form) != form {
            return;
        }
        let seen = match self.field {
            Field::Output => &mut cursor.seen_output,
            Field::Stdout => &mut cursor.seen_stdout,
            Field::Stderr => &mut cursor.seen_stderr,
            Field::Other => return,
        };
        let end = self.position;
        if end <= *seen {
            return;
        }
        let skip = seen.saturating_sub(start) as usize;
        *seen = end;
        let new = &data[skip..];
        match self.field {
            Field::Output => out.extend(cursor.demux.feed(new)),
            Field::Stdout => out.push((LogStream::Stdout, Bytes::copy_from_slice(new))),
            Field::Stderr => out.push((LogStream::Stderr, Bytes::copy_from_slice(new))),
            Field::Other => {}
        }
    }

    fn begin_value(&mut self) {
        self.field = match self.key.as_slice() {
            b"output" => Field::Output,
            b"stdout" => Field::Stdout,
            b"stderr" => Field::Stderr,
            _ => Field::Other,
        };
        self.position = 0;
    }

    fn push_char(&mut self, c: u32) {
        let c = char::from_u32(c).unwrap_or(char::REPLACEMENT_CHARACTER);
        let mut buf = [0u8; 4];
        self.decoded
            .extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
    }

    fn step(&mut self, byte: u8) -> Result<()> {
        let invalid = || {
            Err(Error::new(
                ErrorKind::Provider,
                "command logs are not the expected JSON",
            ))
        };
        self.state = match self.state {
            State::Start
            | State::BeforeKey
            | State::AfterKey
            | State::BeforeValue
            | State::AfterValue
            | State::Done
                if byte.is_ascii_whitespace() =>
            {
                self.state
            }
            State::Start if byte == b'{' => State::BeforeKey,
            State::BeforeKey if byte == b'"' => {
                self.key.clear();
                State::Key { escaped: false }
            }
            State::BeforeKey | State::AfterValue if byte == b'}' => State::Done,
            State::Key { escaped: false } if byte == b'"' => State::AfterKey,
            State::Key { escaped } => {
                if self.key.len() < 64 {
                    self.key.push(byte);
                }
                State::Key {
                    escaped: !escaped && byte == b'\\',
                }
            }
            State::AfterKey if byte == b':' => State::BeforeValue,
            State::BeforeValue if byte == b'"' => {
                self.begin_value();
                State::Str
            }
            State::BeforeValue => {
                self.field = Field::Other;
                match byte {
                    b'{' | b'[' => State::Other {
                        depth: 1,
                        in_string: false,
                        escaped: false,
                    },
                    b',' | b'}' | b']' | b':' => return invalid(),
                    _ => State::Other {
                        depth: 0,
                        in_string: false,
                        escaped: false,
                    },
                }
            }
            State::Str => match byte {
                b'"' => State::AfterValue,
                b'\\' => State::Escape,
                _ => {
                    self.decoded.push(byte);
                    State::Str
                }
            },
            State::Escape => {
                let plain = match byte {
                    b'"' => b'"',
                    b'\\' => b'\\',
                    b'/' => b'/',
                    b'b' => 0x08,
                    b'f' => 0x0c,
                    b'n' => b'\n',
                    b'r' => b'\r',
                    b't' => b'\t',
                    b'u' => return self.set(State::Unicode { value: 0, count: 0 }),
                    _ => return invalid(),
                };
                self.decoded.push(plain);
                State::Str
            }
            State::Unicode { value, count } => {
                let Some(digit) = (byte as char).to_digit(16) else {
                    return invalid();
                };
                let value = value * 16 + digit;
                if count < 3 {
                    State::Unicode {
                        value,
                        count: count + 1,
                    }
                } else if (0xD800..0xDC00).contains(&value) {
                    State::LowBackslash { high: value }
                } else {
                    self.push_char(value);
                    State::Str
                }
            }
            State::LowBackslash { high } if byte == b'\\' => State::LowU { high },
            State::LowU { high } if byte == b'u' => State::LowHex {
                high,
                value: 0,
                count: 0,
            },
            State::LowBackslash { .. } | State::LowU { .. } => {
                // A lone high surrogate; this byte is the string's again.
                self.push_char(0xFFFD);
                self.state = if matches!(self.state, State::LowU { .. }) {
                    // `\` was read: it starts an escape.
                    State::Escape
                } else {
                    State::Str
                };
                return self.step(byte);
            }
            State::LowHex { high, value, count } => {
                let Some(digit) = (byte as char).to_digit(16) else {
                    return invalid();
                };
                let value = value * 16 + digit;
                if count < 3 {
                    State::LowHex {
                        high,
                        value,
                        count: count + 1,
                    }
                } else if (0xDC00..0xE000).contains(&value) {
                    self.push_char(0x10000 + ((high - 0xD800) << 10) + (value - 0xDC00));
                    State::Str
                } else {
                    self.push_char(0xFFFD);
                    self.push_char(value);
                    State::Str
                }
            }
            State::Other {
                depth,
                in_string: true,
                escaped,
            } => State::Other {
                depth,
                in_string: byte != b'"' || escaped,
                escaped: !escaped && byte == b'\\',
            },
            State::Other { depth, .. } => match byte {
                b'"' => State::Other {
                    depth,
                    in_string: true,
                    escaped: false,
                },
                b'{' | b'[' => State::Other {
                    depth: depth + 1,
                    in_string: false,
                    escaped: false,
                },
                b'}' | b']' if depth > 0 => {
                    if depth == 1 {
                        State::AfterValue
                    } else {
                        State::Other {
                            depth: depth - 1,
                            in_string: false,
                            escaped: false,
                        }
                    }
                }
                b',' if depth == 0 => State::BeforeKey,
                b'}' if depth == 0 => State::Done,
                _ => State::Other {
                    depth,
                    in_string: false,
                    escaped: false,
                },
            },
            State::AfterValue if byte == b',' => State::BeforeKey,
            _ => return invalid(),
        };
        Ok(())
    }

    fn set(&mut self, state: State) -> Result<()> {
        self.state = state;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Reads `body` in `chunk`-byte pieces; returns (stdout, stderr).
    fn read(cursor: &mut LogCursor, ct: &str, body: &[u8], chunk: usize) -> (Vec<u8>, Vec<u8>) {
        let mut scan = BodyScan::new(Some(ct));
        let (mut out, mut err) = (Vec::new(), Vec::new());
        for piece in body.chunks(chunk.max(1)) {
            for (stream, bytes) in scan.feed(cursor, piece).unwrap() {
                match stream {
                    LogStream::Stdout => out.extend_from_slice(&bytes),
                    LogStream::Stderr => err.extend_from_slice(&bytes),
                }
            }
        }
        scan.finish().unwrap();
        (out, err)
    }

    fn json_body(output: &str, stdout: &str, stderr: &str) -> Vec<u8> {
        serde_json::to_vec(
            &serde_json::json!({"output": output, "stdout": stdout, "stderr": stderr}),
        )
        .unwrap()
    }

    #[test]
    fn each_poll_gives_only_the_new_bytes_of_the_marked_output() {
        let mut cursor = LogCursor::default();
        let first = json_body("\u{1}\u{1}\u{1}one\n\u{2}\u{2}", "one\n", "");
        assert_eq!(
            read(&mut cursor, "application/json", &first, 3),
            (b"one\n".to_vec(), b"".to_vec())
        );
        let second = json_body(
            "\u{1}\u{1}\u{1}one\n\u{2}\u{2}\u{2}warn \"é\" 😀\n",
            "one\n",
            "warn \"é\" 😀\n",
        );
        assert_eq!(
            read(&mut cursor, "application/json; charset=utf-8", &second, 1),
            (b"".to_vec(), "warn \"é\" 😀\n".as_bytes().to_vec())
        );
        // Nothing new: nothing again.
        assert_eq!(
            read(&mut cursor, "application/json", &second, 7),
            (vec![], vec![])
        );
    }

    #[test]
    fn split_fields_are_used_when_the_marked_output_is_empty() {
        let mut cursor = LogCursor::default();
        let body =
            br#"{"output":"","stdout":"a\nb","stderr":"c","exitCode":null,"x":{"y":[1,"}"]}}"#;
        assert_eq!(
            read(&mut cursor, "application/json", body, 2),
            (b"a\nb".to_vec(), b"c".to_vec())
        );
        let body = br#"{"output":"","stdout":"a\nbcd","stderr":"c"}"#;
        assert_eq!(
            read(&mut cursor, "application/json", body, 5),
            (b"cd".to_vec(), b"".to_vec())
        );
    }

    #[test]
    fn escaped_control_bytes_and_surrogates_decode() {
        let mut cursor = LogCursor::default();
        // Go's encoder writes the markers as \u0001 and may escape <, > and &.
        let body = br#"{"output":"\u0001\u0001\u0001\u003cok\u003e \ud83d\ude00 \/\t\n"}"#;
        assert_eq!(
            read(&mut cursor, "application/json", body, 1).0,
            "<ok> 😀 /\t\n".as_bytes()
        );
    }

    #[test]
    fn a_text_body_is_the_marked_log() {
        let mut cursor = LogCursor::default();
        let (out, err) = read(
            &mut cursor,
            "text/plain",
            b"\x01\x01\x01x\n\x02\x02\x02y\n",
            4,
        );
        assert_eq!((out, err), (b"x\n".to_vec(), b"y\n".to_vec()));
    }

    #[test]
    fn a_cut_or_broken_body_is_a_provider_error() {
        let mut cursor = LogCursor::default();
        let mut scan = BodyScan::new(Some("application/json"));
        scan.feed(&mut cursor, br#"{"output":"abc"#).unwrap();
        assert_eq!(scan.finish().unwrap_err().kind(), ErrorKind::Provider);
        let mut scan = BodyScan::new(Some("application/json"));
        assert!(scan.feed(&mut cursor, b"[1,2]").is_err());
    }

    #[test]
    fn a_polled_log_of_lone_marker_bytes_costs_linear_work() {
        // 2 MiB of `\u0001x` after a stdout marker, polled twice (the second poll reads it all
        // again and passes nothing on), in 16 KiB chunks: one copy of each new byte.
        let mut output = "\u{1}\u{1}\u{1}".to_owned();
        output.push_str(&"\u{1}x".repeat(1 << 20));
        let body = serde_json::to_vec(&serde_json::json!({ "output": output })).unwrap();
        let mut cursor = LogCursor::default();
        let (out, _) = read(&mut cursor, "application/json", &body, 16 * 1024);
        assert_eq!(out.len(), 2 << 20);
        let (again, _) = read(&mut cursor, "application/json", &body, 16 * 1024);
        assert!(again.is_empty());
        assert!(
            cursor.demux.copied() <= 2 * (output.len() as u64),
            "{} bytes copied for a {}-byte log",
            cursor.demux.copied(),
            output.len()
        );
    }

    proptest! {
        #[test]
        fn any_chunking_and_any_poll_points_give_the_log_once(
            lines in proptest::collection::vec((any::<bool>(), "[ -~é😀\\\\\"\t]{0,12}"), 0..12),
            polls in proptest::collection::vec(0usize..12, 0..4),
            chunk in 1usize..40,
        ) {
            let mut log = String::new();
            let (mut want_out, mut want_err) = (Vec::new(), Vec::new());
            let mut prefixes = Vec::new();
            for (i, (is_err, line)) in lines.iter().enumerate() {
                log.push_str(if *is_err { "\u{2}\u{2}\u{2}" } else { "\u{1}\u{1}\u{1}" });
                log.push_str(line);
                log.push('\n');
                let target = if *is_err { &mut want_err } else { &mut want_out };
                target.extend_from_slice(line.as_bytes());
                target.push(b'\n');
                if polls.contains(&i) {
                    prefixes.push(log.clone());
                }
            }
            prefixes.push(log.clone());
            let mut cursor = LogCursor::default();
            let (mut out, mut err) = (Vec::new(), Vec::new());
            for prefix in prefixes {
                let body = serde_json::to_vec(&serde_json::json!({"output": prefix})).unwrap();
                let (o, e) = read(&mut cursor, "application/json", &body, chunk);
                out.extend(o);
                err.extend(e);
            }
            for (stream, bytes) in cursor.finish() {
                match stream {
                    LogStream::Stdout => out.extend_from_slice(&bytes),
                    LogStream::Stderr => err.extend_from_slice(&bytes),
                }
            }
            prop_assert_eq!(out, want_out);
            prop_assert_eq!(err, want_err);
        }
    }
}
