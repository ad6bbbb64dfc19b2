//! Lines out of a byte stream that arrives in arbitrary chunks, in linear time and bounded
//! memory: the line splitter for NDJSON answers (Vercel's command streams).
//!
//! Each byte is looked at once: a chunk is searched for `\n` only from where the last search
//! stopped, so a long line arriving in small chunks costs its length, not its length squared.
//! A line longer than the bound is dropped up to its end and reported once.
//!
//! ```
//! use sandbox_sdk_core::lines::{Line, LineReader};
//! use bytes::Bytes;
//!
//! let mut reader = LineReader::new(1024);
//! assert_eq!(reader.push(b"{\"a\":"), vec![]);
//! assert_eq!(reader.push(b"1}\n{\"b\""), vec![Line::Whole(Bytes::from_static(b"{\"a\":1}"))]);
//! assert_eq!(reader.push(b":2}"), vec![]);
//! assert_eq!(reader.finish(), Some(Bytes::from_static(b"{\"b\":2}")));
//! ```

use bytes::{Bytes, BytesMut};

/// Splits bytes into `\n`-terminated lines, scanning each byte once, refusing a line longer
/// than its bound (the bytes of such a line are dropped up to its end and reported once).
#[derive(Debug)]
pub struct LineReader {
    buffer: BytesMut,
    /// How much of `buffer` is known to hold no `\n`.
    searched: usize,
    max_line: usize,
    /// Inside an overlong line: drop bytes until its `\n`.
    skipping: bool,
    /// Bytes looked at while searching for line ends.
    scanned: u64,
}

/// What [`LineReader::push`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// A whole line, without its `\n`.
    Whole(Bytes),
    /// A line longer than the bound was dropped.
    TooLong,
}

impl LineReader {
    /// A reader that refuses lines over `max_line` bytes (not counting the `\n`).
    pub fn new(max_line: usize) -> Self {
        LineReader {
            buffer: BytesMut::new(),
            searched: 0,
            max_line,
            skipping: false,
            scanned: 0,
        }
    }

    /// Adds bytes and returns the lines they completed.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<Line> {
        let mut lines = Vec::new();
        let mut rest = bytes;
        while !rest.is_empty() {
            if self.skipping {
                match self.find_newline(rest) {
                    Some(end) => {
                        self.skipping = false;
                        rest = &rest[end + 1..];
                    }
                    None => return lines,
                }
                continue;
            }
            // Never hold more than the bound and the `\n` that would end the line.
            let room = self.max_line.saturating_sub(self.buffer.len()) + 1;
            let take = rest.len().min(room);
            self.buffer.extend_from_slice(&rest[..take]);
            rest = &rest[take..];
            while let Some(offset) = self.find_newline_in_buffer() {
                let end = self.searched + offset;
                let line = self.buffer.split_to(end + 1);
                self.searched = 0;
                lines.push(Line::Whole(line.freeze().slice(..end)));
            }
            self.searched = self.buffer.len();
            if self.buffer.len() > self.max_line {
                self.buffer.clear();
                self.searched = 0;
                self.skipping = true;
                lines.push(Line::TooLong);
            }
        }
        lines
    }

    /// Ends the input: the bytes after the last `\n` (a last line without its end), `None`
    /// when there are none or they belong to a line already reported as too long.
    pub fn finish(&mut self) -> Option<Bytes> {
        self.searched = 0;
        if std::mem::take(&mut self.skipping) || self.buffer.is_empty() {
            self.buffer.clear();
            return None;
        }
        Some(self.buffer.split().freeze())
    }

    /// Bytes held after the last `\n` (a line without its end).
    pub fn pending(&self) -> usize {
        self.buffer.len()
    }

    /// How many bytes were looked at while searching for line ends, over the reader's life:
    /// at most the bytes pushed, however they were cut into chunks (for tests that check the
    /// reader stays linear).
    pub fn scanned(&self) -> u64 {
        self.scanned
    }

    fn find_newline_in_buffer(&mut self) -> Option<usize> {
        let unsearched = &self.buffer[self.searched..];
        let found = unsearched.iter().position(|b| *b == b'\n');
        self.scanned += found.map_or(unsearched.len(), |at| at + 1) as u64;
        found
    }

    fn find_newline(&mut self, bytes: &[u8]) -> Option<usize> {
        let found = bytes.iter().position(|b| *b == b'\n');
        self.scanned += found.map_or(bytes.len(), |at| at + 1) as u64;
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn whole(text: &str) -> Line {
        Line::Whole(Bytes::copy_from_slice(text.as_bytes()))
    }

    #[test]
    fn an_overlong_line_is_dropped_and_reported_once() {
        let mut reader = LineReader::new(8);
        let mut lines = reader.push(b"short\n0123456789");
        lines.extend(reader.push(b"abcdef"));
        lines.extend(reader.push(b"ghi\nok\n"));
        assert_eq!(lines, vec![whole("short"), Line::TooLong, whole("ok")]);
        // A line of exactly the bound is whole.
        assert_eq!(reader.push(b"01234567\n"), vec![whole("01234567")]);
    }

    #[test]
    fn the_last_line_without_its_end_is_given_by_finish() {
        let mut reader = LineReader::new(8);
        assert!(reader.push(b"a\nbc").len() == 1);
        assert_eq!(reader.pending(), 2);
        assert_eq!(reader.finish(), Some(Bytes::from_static(b"bc")));
        assert_eq!(reader.finish(), None);
        // The tail of an overlong line is not a line.
        assert_eq!(reader.push(b"0123456789"), vec![Line::TooLong]);
        assert_eq!(reader.finish(), None);
        assert_eq!(reader.push(b"ok\n"), vec![whole("ok")]);
    }

    /// Issue 33 item 5: a 1 MiB line in 64-byte chunks is looked at once, not once per chunk.
    #[test]
    fn a_long_line_in_small_chunks_is_scanned_once() {
        let mut text = vec![b'x'; 1 << 20];
        text.extend_from_slice(b"\nnext\n");
        let mut reader = LineReader::new(4 << 20);
        let mut lines = Vec::new();
        for chunk in text.chunks(64) {
            lines.extend(reader.push(chunk));
        }
        assert_eq!(lines.len(), 2);
        assert_eq!(reader.scanned(), text.len() as u64);
        // The same when the line is too long and skipped.
        let mut reader = LineReader::new(1000);
        for chunk in text.chunks(64) {
            reader.push(chunk);
        }
        assert!(reader.scanned() <= text.len() as u64);
    }

    proptest! {
        /// However the bytes are cut into chunks, the lines come out the same, and no byte is
        /// looked at twice.
        #[test]
        fn chunking_does_not_change_the_lines(
            lines in proptest::collection::vec("[a-z]{0,20}", 0..20),
            tail in "[a-z]{0,5}",
            cuts in proptest::collection::vec(1usize..7, 1..50),
        ) {
            let text = lines.iter().map(|l| format!("{l}\n")).collect::<String>() + &tail;
            let mut reader = LineReader::new(12);
            let mut got = Vec::new();
            let mut rest = text.as_bytes();
            let mut cut = cuts.iter().cycle();
            while !rest.is_empty() {
                let n = (*cut.next().unwrap()).min(rest.len());
                got.extend(reader.push(&rest[..n]));
                rest = &rest[n..];
            }
            let want: Vec<Line> = lines
                .iter()
                .map(|l| if l.len() > 12 { Line::TooLong } else { whole(l) })
                .collect();
            prop_assert_eq!(got, want);
            prop_assert_eq!(reader.finish(), (!tail.is_empty()).then(|| Bytes::from(tail)));
            prop_assert!(reader.scanned() <= text.len() as u64);
        }
    }
}
