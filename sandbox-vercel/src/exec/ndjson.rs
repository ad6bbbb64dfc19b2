//! NDJSON framing (PROTOCOL.md §6.2, §6.5): lines out of a byte stream, each at most
//! [`MAX_LINE`] bytes, so a server that never sends a newline cannot exhaust memory.

use crate::config::MAX_LINE;
use bytes::Bytes;
use futures::StreamExt;
use sandbox_sdk_core::lines::{Line, LineReader};
use sandbox_sdk_core::{ByteStream, Error, ErrorKind, Result};
use std::collections::VecDeque;

/// Lines read lazily from a stream.
pub(crate) struct Lines {
    stream: ByteStream,
    reader: LineReader,
    /// Lines the last chunk completed, not handed out yet.
    ready: VecDeque<Line>,
    ended: bool,
    max: usize,
}

impl Lines {
    pub fn new(stream: ByteStream) -> Lines {
        Lines::with_max(stream, MAX_LINE)
    }

    pub fn with_max(stream: ByteStream, max: usize) -> Lines {
        Lines {
            stream,
            reader: LineReader::new(max),
            ready: VecDeque::new(),
            ended: false,
            max,
        }
    }

    /// The next non-empty line without its `\n` (a last line without one counts); `None` at
    /// the end; an error when the stream fails or a line passes the limit.
    pub async fn next_line(&mut self) -> Option<Result<Bytes>> {
        loop {
            match self.ready.pop_front() {
                Some(Line::Whole(line)) => match trimmed(line) {
                    Some(line) => return Some(Ok(line)),
                    None => continue,
                },
                Some(Line::TooLong) => {
                    self.ended = true;
                    self.ready.clear();
                    self.reader = LineReader::new(self.max);
                    return Some(Err(Error::new(
                        ErrorKind::Provider,
                        format!("a line of the command stream passed {} bytes", self.max),
                    )
                    .with_retryable(false)));
                }
                None => {}
            }
            if self.ended {
                return self.reader.finish().and_then(trimmed).map(Ok);
            }
            match self.stream.next().await {
                Some(Ok(chunk)) => self.ready.extend(self.reader.push(&chunk)),
                Some(Err(e)) => {
                    self.ended = true;
                    self.reader = LineReader::new(self.max);
                    return Some(Err(e));
                }
                None => self.ended = true,
            }
        }
    }

    /// Bytes examined looking for line ends.
    #[cfg(test)]
    fn scanned(&self) -> u64 {
        self.reader.scanned()
    }
}

/// The line without a trailing `\r` and surrounding blanks; `None` when nothing is left.
fn trimmed(line: Bytes) -> Option<Bytes> {
    let text = line.strip_suffix(b"\r").unwrap_or(&line).trim_ascii();
    if text.is_empty() {
        return None;
    }
    Some(line.slice_ref(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines_of(chunks: Vec<Result<&'static [u8]>>, max: usize) -> Lines {
        let stream = futures::stream::iter(
            chunks
                .into_iter()
                .map(|c| c.map(Bytes::from_static))
                .collect::<Vec<_>>(),
        )
        .boxed();
        Lines::with_max(stream, max)
    }

    #[tokio::test]
    async fn lines_split_across_chunks_and_a_last_line_without_newline() {
        let mut l = lines_of(vec![Ok(b"{\"a\":"), Ok(b"1}\n\n{\"b\""), Ok(b":2}")], 100);
        assert_eq!(&l.next_line().await.unwrap().unwrap()[..], b"{\"a\":1}");
        assert_eq!(&l.next_line().await.unwrap().unwrap()[..], b"{\"b\":2}");
        assert!(l.next_line().await.is_none());
    }

    #[tokio::test]
    async fn a_line_past_the_limit_is_an_error_not_memory() {
        let mut l = lines_of(vec![Ok(b"0123456789"), Ok(b"0123456789")], 15);
        let e = l.next_line().await.unwrap().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Provider);
        assert!(l.next_line().await.is_none());
    }

    /// Issue 33 item 5: a long line arriving in small chunks was searched for its end from
    /// its start on every chunk (a 1 MiB line in 64-byte chunks took seconds).
    #[tokio::test]
    async fn a_long_line_in_small_chunks_is_scanned_once() {
        let mut text = vec![b'x'; 256 * 1024];
        text.extend_from_slice(b"\n{}\n");
        let total = text.len() as u64;
        let chunks: Vec<Result<Bytes>> = text
            .chunks(64)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        let mut l = Lines::with_max(futures::stream::iter(chunks).boxed(), 1 << 20);
        assert_eq!(l.next_line().await.unwrap().unwrap().len(), 256 * 1024);
        assert_eq!(&l.next_line().await.unwrap().unwrap()[..], b"{}");
        assert!(l.next_line().await.is_none());
        assert!(
            l.scanned() <= total,
            "{} bytes scanned for {total}",
            l.scanned()
        );
    }

    /// However the stream is cut (at every pair of points), the same lines come out.
    #[tokio::test]
    async fn every_split_of_the_stream_gives_the_same_lines() {
        let text: &[u8] = b"{\"a\":1}\r\n\n  {\"b\":[2]}\n0123456789abcdef\n{\"c\":3}";
        let read = |cuts: &[usize]| {
            let mut chunks = Vec::new();
            let mut at = 0;
            for &cut in cuts.iter().chain([&text.len()]) {
                chunks.push(Ok(Bytes::copy_from_slice(&text[at..cut])));
                at = cut;
            }
            let mut l = Lines::with_max(futures::stream::iter(chunks).boxed(), 12);
            async move {
                let mut got = Vec::new();
                while let Some(line) = l.next_line().await {
                    got.push(line.map(|b| b.to_vec()).map_err(|e| e.kind()));
                }
                got
            }
        };
        let want = read(&[]).await;
        assert_eq!(
            want,
            vec![
                Ok(b"{\"a\":1}".to_vec()),
                Ok(b"{\"b\":[2]}".to_vec()),
                Err(ErrorKind::Provider),
            ]
        );
        for i in 0..=text.len() {
            for j in i..=text.len() {
                assert_eq!(read(&[i, j]).await, want, "cut at {i} and {j}");
            }
        }
    }

    #[tokio::test]
    async fn a_stream_error_ends_the_lines() {
        let mut l = lines_of(
            vec![Ok(b"{}\n"), Err(Error::new(ErrorKind::Transport, "cut"))],
            100,
        );
        assert!(l.next_line().await.unwrap().is_ok());
        assert_eq!(
            l.next_line().await.unwrap().unwrap_err().kind(),
            ErrorKind::Transport
        );
        assert!(l.next_line().await.is_none());
    }
}
