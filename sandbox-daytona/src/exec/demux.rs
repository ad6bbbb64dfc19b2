//! The stdout/stderr demultiplexer for Daytona session logs.
//!
//! The daemon stores a session command's output as one log in which every line is preceded by a
//! 3-byte marker: `01 01 01` for stdout, `02 02 02` for stderr (PROTOCOL.md §8.1). Followed live
//! over the WebSocket, the log arrives in binary frames of up to 1024 bytes, so a marker can be
//! split across two or three frames, and one frame can hold lines of both streams (§8.2).
//!
//! [`LogDemux`] is an explicit state machine over the byte stream: the current stream is the one
//! named by the last complete marker; bytes before any marker are dropped; up to two trailing
//! marker bytes are held back until the next frame shows whether they start a marker. Bytes held
//! back that turn out not to be a marker are data of the current stream.

use bytes::Bytes;

/// Which stream a piece of output belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum LogStream {
    /// Standard output (marker `01 01 01`).
    Stdout,
    /// Standard error (marker `02 02 02`).
    Stderr,
}

impl LogStream {
    fn from_marker_byte(byte: u8) -> Option<LogStream> {
        match byte {
            STDOUT_BYTE => Some(LogStream::Stdout),
            STDERR_BYTE => Some(LogStream::Stderr),
            _ => None,
        }
    }
}

const STDOUT_BYTE: u8 = 0x01;
const STDERR_BYTE: u8 = 0x02;
/// Length of a stream marker.
const MARKER_LEN: usize = 3;

/// The demultiplexer's state between frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// No marker byte pending.
    Data,
    /// `count` (1 or 2) bytes equal to `byte` were seen at the end of the input so far.
    Marker { byte: u8, count: u8 },
}

/// Splits a marked log byte stream into stdout and stderr pieces. See the module docs.
#[derive(Debug, Clone)]
pub(crate) struct LogDemux {
    current: Option<LogStream>,
    state: State,
    dropped: u64,
    /// Bytes written into output buffers so far: the demultiplexer's work, which must stay
    /// linear in its input (a hostile log of lone marker bytes once made it quadratic).
    copied: u64,
}

impl Default for LogDemux {
    fn default() -> Self {
        Self::new()
    }
}

impl LogDemux {
    /// A demultiplexer at the start of a log.
    pub(crate) fn new() -> Self {
        LogDemux {
            current: None,
            state: State::Data,
            dropped: 0,
            copied: 0,
        }
    }

    /// Bytes written into output pieces so far (the work done; linear in the input).
    #[cfg(test)]
    pub(crate) fn copied(&self) -> u64 {
        self.copied
    }

    /// How many bytes were dropped because they came before any marker.
    #[cfg(test)]
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Feeds one frame; returns the pieces of output it completes, in order. Adjacent pieces of
    /// the same stream are merged.
    pub(crate) fn feed(&mut self, frame: &[u8]) -> Vec<(LogStream, Bytes)> {
        let mut out = Out::default();
        let mut run_start = 0;
        let mut i = 0;
        while i < frame.len() {
            let byte = frame[i];
            match self.state {
                State::Marker { byte: m, count } if byte == m => {
                    if usize::from(count) + 1 == MARKER_LEN {
                        self.current = LogStream::from_marker_byte(m);
                        self.state = State::Data;
                        run_start = i + 1;
                    } else {
                        self.state = State::Marker {
                            byte: m,
                            count: count + 1,
                        };
                    }
                    i += 1;
                }
                State::Marker { byte: m, count } => {
                    // Not a marker after all: the held bytes are data of the current stream.
                    self.emit_held(&mut out, m, count);
                    self.state = State::Data;
                    run_start = i;
                    // Re-examine this byte in the data state.
                }
                State::Data => {
                    // Skip the plain run up to the next marker byte in one go.
                    if byte != STDOUT_BYTE && byte != STDERR_BYTE {
                        i += frame[i..]
                            .iter()
                            .position(|b| *b == STDOUT_BYTE || *b == STDERR_BYTE)
                            .unwrap_or(frame.len() - i);
                        continue;
                    }
                    self.emit(&mut out, &frame[run_start..i]);
                    self.state = State::Marker { byte, count: 1 };
                    i += 1;
                    run_start = i;
                }
            }
        }
        if self.state == State::Data {
            self.emit(&mut out, &frame[run_start..]);
        }
        let (pieces, copied) = out.done();
        self.copied += copied;
        pieces
    }

    /// Ends the log: marker bytes still held back are data of the current stream.
    pub(crate) fn finish(&mut self) -> Vec<(LogStream, Bytes)> {
        let mut out = Out::default();
        if let State::Marker { byte, count } = self.state {
            self.emit_held(&mut out, byte, count);
        }
        self.state = State::Data;
        let (pieces, copied) = out.done();
        self.copied += copied;
        pieces
    }

    fn emit_held(&mut self, out: &mut Out, byte: u8, count: u8) {
        let held = [byte; MARKER_LEN];
        self.emit(out, &held[..usize::from(count)]);
    }

    fn emit(&mut self, out: &mut Out, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        match self.current {
            Some(stream) => out.push(stream, data),
            None => self.dropped += data.len() as u64,
        }
    }
}

/// The pieces one call produces. Adjacent bytes of one stream are appended to one growing
/// buffer (amortised linear), and only turned into [`Bytes`] once the call ends.
#[derive(Default)]
struct Out {
    pieces: Vec<(LogStream, Vec<u8>)>,
    /// Bytes appended: the work done, for [`LogDemux::copied`].
    copied: u64,
}

impl Out {
    fn push(&mut self, stream: LogStream, data: &[u8]) {
        self.copied += data.len() as u64;
        match self.pieces.last_mut() {
            Some((last, bytes)) if *last == stream => bytes.extend_from_slice(data),
            _ => self.pieces.push((stream, data.to_vec())),
        }
    }

    /// The pieces, and the bytes appended to make them.
    fn done(self) -> (Vec<(LogStream, Bytes)>, u64) {
        let pieces = self
            .pieces
            .into_iter()
            .map(|(stream, bytes)| (stream, Bytes::from(bytes)))
            .collect();
        (pieces, self.copied)
    }
}

/// Splits a non-follow session-logs answer into stdout and stderr: a JSON body (`content_type`
/// names json) carries `stdout`/`stderr`, or only the marked `output` of older daemons; any
/// other body is the raw marked log. A JSON body that does not parse is a `Provider` error.
pub(crate) fn session_logs(
    content_type: Option<&str>,
    body: &[u8],
) -> sandbox_sdk_core::Result<(Vec<u8>, Vec<u8>)> {
    if !content_type.is_some_and(|ct| ct.contains("json")) {
        return Ok(split_log(body));
    }
    let logs: crate::wire::SessionLogs = serde_json::from_slice(body).map_err(|_| {
        sandbox_sdk_core::Error::new(
            sandbox_sdk_core::ErrorKind::Provider,
            "command logs are not the expected JSON",
        )
    })?;
    Ok(match (logs.stdout, logs.stderr, logs.output) {
        (None, None, Some(output)) => split_log(output.as_bytes()),
        (out, err, _) => (
            out.unwrap_or_default().into_bytes(),
            err.unwrap_or_default().into_bytes(),
        ),
    })
}

/// Splits a whole marked log (as in the JSON `output` field) into stdout and stderr.
pub(crate) fn split_log(log: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let mut demux = LogDemux::new();
    let mut pieces = demux.feed(log);
    pieces.extend(demux.finish());
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    for (stream, bytes) in pieces {
        match stream {
            LogStream::Stdout => stdout.extend_from_slice(&bytes),
            LogStream::Stderr => stderr.extend_from_slice(&bytes),
        }
    }
    (stdout, stderr)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn collect(chunks: &[&[u8]]) -> (Vec<u8>, Vec<u8>) {
        let mut demux = LogDemux::new();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let mut pieces = Vec::new();
        for c in chunks {
            pieces.extend(demux.feed(c));
        }
        pieces.extend(demux.finish());
        for (s, b) in pieces {
            match s {
                LogStream::Stdout => out.extend_from_slice(&b),
                LogStream::Stderr => err.extend_from_slice(&b),
            }
        }
        (out, err)
    }

    fn encode(lines: &[(bool, Vec<u8>)]) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
        let (mut log, mut out, mut err) = (Vec::new(), Vec::new(), Vec::new());
        for (is_err, line) in lines {
            let marker = if *is_err { [2u8; 3] } else { [1u8; 3] };
            log.extend_from_slice(&marker);
            log.extend_from_slice(line);
            log.push(b'\n');
            let target = if *is_err { &mut err } else { &mut out };
            target.extend_from_slice(line);
            target.push(b'\n');
        }
        (log, out, err)
    }

    #[test]
    fn protocol_example_frames_split_a_marker() {
        let got = collect(&[b"\x01\x01\x01ok 1\n\x02\x02", b"\x02warn\n"]);
        assert_eq!(got, (b"ok 1\n".to_vec(), b"warn\n".to_vec()));
    }

    #[test]
    fn a_frame_that_is_exactly_one_marker_loses_nothing() {
        // The TypeScript SDK drops data in this case (PROTOCOL.md §8.2); pin that we do not.
        let got = collect(&[b"\x02\x02\x02", b"err\n", b"\x01\x01\x01", b"out\n"]);
        assert_eq!(got, (b"out\n".to_vec(), b"err\n".to_vec()));
    }

    #[test]
    fn a_marker_split_one_byte_per_frame() {
        let got = collect(&[b"\x01", b"\x01", b"\x01", b"a\n\x02", b"\x02", b"\x02b\n"]);
        assert_eq!(got, (b"a\n".to_vec(), b"b\n".to_vec()));
    }

    #[test]
    fn bytes_before_any_marker_are_dropped() {
        let mut demux = LogDemux::new();
        let out = demux.feed(b"junk\x01\x01\x01x");
        assert_eq!(out, vec![(LogStream::Stdout, Bytes::from_static(b"x"))]);
        assert_eq!(demux.dropped(), 4);
    }

    #[test]
    fn lone_marker_bytes_in_data_are_kept_as_data() {
        let got = collect(&[b"\x01\x01\x01a\x01b\x02\x02c\n"]);
        assert_eq!(got.0, b"a\x01b\x02\x02c\n".to_vec());
        // Held back at the end of the log, then released by finish().
        let got = collect(&[b"\x02\x02\x02x\x02\x02"]);
        assert_eq!(got.1, b"x\x02\x02".to_vec());
    }

    #[test]
    fn a_mixed_run_of_marker_bytes_is_resolved() {
        // 01 01 then 02 02 02: the first two bytes are stdout data only if a stream is current.
        let got = collect(&[b"\x01\x01\x01a", b"\x01\x01", b"\x02\x02\x02b"]);
        assert_eq!(got, (b"a\x01\x01".to_vec(), b"b".to_vec()));
    }

    /// A little xorshift, so the "random" log is the same on every run.
    fn noise(len: usize, mut seed: u64) -> Vec<u8> {
        (0..len)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect()
    }

    #[test]
    fn lone_marker_bytes_cost_linear_work() {
        // Every other byte a lone 0x01: each one ended a run, and the run was merged into the
        // piece before it by copying that whole piece again (quadratic; 1 MiB took 18.8 s).
        let mut log = b"\x01\x01\x01".to_vec();
        log.extend([0x01, b'a'].repeat(32 * 1024));
        let mut demux = LogDemux::new();
        let (out, _) = {
            let pieces = demux.feed(&log);
            (pieces, demux.finish())
        };
        let total: usize = out.iter().map(|(_, b)| b.len()).sum();
        assert_eq!(total, log.len() - MARKER_LEN);
        assert!(
            demux.copied <= 2 * log.len() as u64,
            "{} bytes copied for a {}-byte log",
            demux.copied,
            log.len()
        );
    }

    #[test]
    fn megabytes_of_hostile_logs_are_demultiplexed_in_linear_work() {
        let mut lone = b"\x02\x02\x02".to_vec();
        lone.extend([0x01, b'x', 0x02, 0x02, b'y'].repeat(600 * 1024));
        let random = noise(3 << 20, 0x9e37_79b9_7f4a_7c15);
        for (name, log) in [("lone marker bytes", lone), ("random bytes", random)] {
            let mut demux = LogDemux::new();
            let mut emitted = 0u64;
            // Whole, then again in WebSocket-sized frames.
            for piece in std::iter::once(&log[..]).chain(log.chunks(1024)) {
                for (_, bytes) in demux.feed(piece) {
                    emitted += bytes.len() as u64;
                }
            }
            for (_, bytes) in demux.finish() {
                emitted += bytes.len() as u64;
            }
            assert_eq!(demux.copied, emitted, "{name}");
            assert!(
                demux.copied + demux.dropped() <= 2 * log.len() as u64,
                "{name}: {} bytes copied for {} bytes of input",
                demux.copied,
                log.len()
            );
        }
    }

    #[test]
    fn split_log_splits_the_json_output_field() {
        let (out, err) = split_log(b"\x01\x01\x01ok 1\n\x02\x02\x02warn\n");
        assert_eq!(out, b"ok 1\n");
        assert_eq!(err, b"warn\n");
    }

    fn lines() -> impl Strategy<Value = Vec<(bool, Vec<u8>)>> {
        // Payload bytes exclude the marker bytes, which a real line cannot tell apart either.
        let byte = any::<u8>().prop_filter("not a marker byte", |b| *b != 1 && *b != 2);
        proptest::collection::vec(
            (any::<bool>(), proptest::collection::vec(byte, 0..12)),
            0..8,
        )
    }

    proptest! {
        #[test]
        fn every_single_split_point_gives_the_same_streams(lines in lines()) {
            let (log, out, err) = encode(&lines);
            for split in 0..=log.len() {
                let got = collect(&[&log[..split], &log[split..]]);
                prop_assert_eq!(&got.0, &out, "split at {}", split);
                prop_assert_eq!(&got.1, &err, "split at {}", split);
            }
        }

        #[test]
        fn every_pair_of_split_points_gives_the_same_streams(lines in lines()) {
            let (log, out, err) = encode(&lines);
            for a in 0..=log.len() {
                for b in a..=log.len() {
                    let got = collect(&[&log[..a], &log[a..b], &log[b..]]);
                    prop_assert_eq!(&got.0, &out);
                    prop_assert_eq!(&got.1, &err);
                }
            }
        }

        #[test]
        fn any_chunking_gives_the_same_streams(
            lines in lines(),
            sizes in proptest::collection::vec(1usize..5, 1..64),
        ) {
            let (log, out, err) = encode(&lines);
            let mut chunks = Vec::new();
            let mut at = 0;
            let mut i = 0;
            while at < log.len() {
                let n = sizes[i % sizes.len()].min(log.len() - at);
                chunks.push(&log[at..at + n]);
                at += n;
                i += 1;
            }
            let got = collect(&chunks);
            prop_assert_eq!(got.0, out);
            prop_assert_eq!(got.1, err);
        }
    }
}
