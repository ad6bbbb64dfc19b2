//! NDJSON framing (PROTOCOL.md §6.2, §6.5): lines out of a byte stream, each at most
//! [`MAX_LINE`] bytes, so a server that never sends a newline cannot exhaust memory.

use crate::config::MAX_LINE;
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use sandbox_sdk_core::{ByteStream, Error, ErrorKind, Result};

/// Lines read lazily from a stream.
pub(crate) struct Lines {
    stream: ByteStream,
    buffer: BytesMut,
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
            buffer: BytesMut::new(),
            ended: false,
            max,
        }
    }

    /// The next non-empty line without its `\n` (a last line without one counts); `None` at
    /// the end; an error when the stream fails or a line passes the limit.
    pub async fn next_line(&mut self) -> Option<Result<Bytes>> {
        loop {
            if let Some(at) = self.buffer.iter().position(|b| *b == b'\n') {
                let line = self.buffer.split_to(at + 1);
                let line = trim(&line[..at]);
                if line.is_empty() {
                    continue;
                }
                return Some(Ok(Bytes::copy_from_slice(line)));
            }
            if self.buffer.len() > self.max {
                self.ended = true;
                self.buffer.clear();
                return Some(Err(Error::new(
                    ErrorKind::Provider,
                    format!("a line of the command stream passed {} bytes", self.max),
                )
                .with_retryable(false)));
            }
            if self.ended {
                let rest = self.buffer.split();
                let line = trim(&rest);
                return (!line.is_empty()).then(|| Ok(Bytes::copy_from_slice(line)));
            }
            match self.stream.next().await {
                Some(Ok(chunk)) => self.buffer.extend_from_slice(&chunk),
                Some(Err(e)) => {
                    self.ended = true;
                    self.buffer.clear();
                    return Some(Err(e));
                }
                None => self.ended = true,
            }
        }
    }
}

fn trim(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    line.trim_ascii()
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
