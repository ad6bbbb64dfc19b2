//! A command's log as the daemon stores it (each line behind a 3-byte stream marker) and the
//! answers the daemon derives from it, which depend on the client's SDK version (PROTOCOL.md
//! §4.1 and §4.3).

use crate::SimRequest;

/// The marker before each stdout line.
pub(crate) const STDOUT_MARKER: [u8; 3] = [1, 1, 1];
/// The marker before each stderr line.
pub(crate) const STDERR_MARKER: [u8; 3] = [2, 2, 2];

/// How the daemon answers a client, by its `X-Daytona-SDK-Version`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    /// No or an unparseable version, or one below 0.27.0: stdout and stderr merged, markers
    /// stripped (plain text logs).
    Combined,
    /// 0.27.0 up to 0.167.0, or no version with `X-Daytona-Split-Output: true`: the raw log,
    /// markers included (plain text logs).
    Raw,
    /// 0.167.0 and later, or a `dev` version: JSON logs with `output`, `stdout` and `stderr`.
    Json,
}

impl Shape {
    /// The shape for `request`: its `X-Daytona-SDK-Version` header, or the version a browser
    /// offers as WebSocket subprotocol `X-Daytona-SDK-Version~<version>`.
    pub fn of(request: &SimRequest) -> Shape {
        let from_protocol = request.header("sec-websocket-protocol").and_then(|list| {
            list.split(',')
                .find_map(|p| p.trim().strip_prefix("X-Daytona-SDK-Version~"))
                .map(str::to_owned)
        });
        let version = request
            .header("x-daytona-sdk-version")
            .map(str::to_owned)
            .or(from_protocol);
        let split = request
            .header("x-daytona-split-output")
            .is_some_and(|v| v.eq_ignore_ascii_case("true"));
        Shape::for_version(version.as_deref(), split)
    }

    fn for_version(version: Option<&str>, split: bool) -> Shape {
        let Some(version) = version else {
            return if split { Shape::Raw } else { Shape::Combined };
        };
        if version.contains("dev") {
            return Shape::Json;
        }
        match parse_version(version) {
            None if split => Shape::Raw,
            None => Shape::Combined,
            Some(v) if v < (0, 27, 0) => Shape::Combined,
            Some(v) if v < (0, 167, 0) => Shape::Raw,
            Some(_) => Shape::Json,
        }
    }
}

fn parse_version(text: &str) -> Option<(u64, u64, u64)> {
    let core = text.trim().trim_start_matches('v');
    let core = core.split(['-', '+']).next()?;
    let mut parts = core.split('.').map(|p| p.parse::<u64>().ok());
    Some((parts.next()??, parts.next()??, parts.next()??))
}

/// Which stream bytes belong to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stream {
    Stdout,
    Stderr,
}

/// Splits a log into its streams as it arrives: the current stream is the one whose marker was
/// seen last, bytes before any marker are dropped, and up to two trailing marker bytes wait for
/// the next chunk (a marker may be split between chunks).
#[derive(Debug, Default)]
pub(crate) struct Splitter {
    current: Option<Stream>,
    held: Vec<u8>,
}

impl Splitter {
    /// The stream pieces of `chunk` (with what was held before it).
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<(Stream, Vec<u8>)> {
        let mut data = std::mem::take(&mut self.held);
        data.extend_from_slice(chunk);
        let mut out: Vec<(Stream, Vec<u8>)> = Vec::new();
        let mut push = |stream: Option<Stream>, bytes: &[u8]| {
            if let (Some(s), false) = (stream, bytes.is_empty()) {
                match out.last_mut() {
                    Some((last, b)) if *last == s => b.extend_from_slice(bytes),
                    _ => out.push((s, bytes.to_vec())),
                }
            }
        };
        let mut start = 0;
        let mut i = 0;
        while i < data.len() {
            let rest = &data[i..];
            let marker = if rest.starts_with(&STDOUT_MARKER) {
                Some(Stream::Stdout)
            } else if rest.starts_with(&STDERR_MARKER) {
                Some(Stream::Stderr)
            } else {
                None
            };
            if let Some(stream) = marker {
                push(self.current, &data[start..i]);
                self.current = Some(stream);
                i += 3;
                start = i;
                continue;
            }
            // A possible marker cut by the chunk's end waits for the next chunk.
            if rest.len() < 3 && rest.iter().all(|b| *b == rest[0]) && matches!(rest[0], 1 | 2) {
                push(self.current, &data[start..i]);
                self.held = rest.to_vec();
                return out;
            }
            i += 1;
        }
        push(self.current, &data[start..]);
        out
    }

    /// What is still held at the end of the log (bytes that turned out not to be a marker).
    pub fn finish(&mut self) -> Vec<(Stream, Vec<u8>)> {
        let held = std::mem::take(&mut self.held);
        match self.current {
            Some(s) if !held.is_empty() => vec![(s, held)],
            _ => Vec::new(),
        }
    }
}

/// A whole log split: (stdout, stderr, both merged in order without markers).
pub(crate) fn split(log: &[u8]) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let mut splitter = Splitter::default();
    let (mut out, mut err, mut all) = (Vec::new(), Vec::new(), Vec::new());
    let mut pieces = splitter.feed(log);
    pieces.extend(splitter.finish());
    for (stream, bytes) in pieces {
        all.extend_from_slice(&bytes);
        match stream {
            Stream::Stdout => out.extend_from_slice(&bytes),
            Stream::Stderr => err.extend_from_slice(&bytes),
        }
    }
    (out, err, all)
}

/// Text of log bytes (the daemon's JSON strings are Go strings of the raw bytes).
pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_choose_the_shape() {
        assert_eq!(Shape::for_version(None, false), Shape::Combined);
        assert_eq!(Shape::for_version(None, true), Shape::Raw);
        assert_eq!(Shape::for_version(Some("0.26.9"), false), Shape::Combined);
        assert_eq!(Shape::for_version(Some("0.100.0"), false), Shape::Raw);
        assert_eq!(Shape::for_version(Some("0.167.0"), false), Shape::Json);
        assert_eq!(Shape::for_version(Some("0.0.0-dev"), false), Shape::Json);
        assert_eq!(Shape::for_version(Some("garbage"), false), Shape::Combined);
    }

    #[test]
    fn markers_split_across_chunks_are_held() {
        let log = b"junk\x01\x01\x01out\n\x02\x02\x02err\n\x01\x01\x01more\n";
        let whole = split(log);
        assert_eq!(whole.0, b"out\nmore\n");
        assert_eq!(whole.1, b"err\n");
        assert_eq!(whole.2, b"out\nerr\nmore\n");
        for cut in 0..log.len() {
            let mut s = Splitter::default();
            let mut pieces = s.feed(&log[..cut]);
            pieces.extend(s.feed(&log[cut..]));
            pieces.extend(s.finish());
            let out: Vec<u8> = pieces
                .iter()
                .filter(|(st, _)| *st == Stream::Stdout)
                .flat_map(|(_, b)| b.clone())
                .collect();
            assert_eq!(out, b"out\nmore\n", "cut at {cut}");
        }
    }
}
