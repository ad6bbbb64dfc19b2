//! A progress line for large copies, on stderr, only when stderr is a terminal (or
//! `SBOX_PROGRESS=always`); `SBOX_PROGRESS=never` turns it off. Small copies draw nothing.

use std::io::{IsTerminal, Write};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, ReadBuf};

/// Copies smaller than this draw no progress line.
pub const THRESHOLD: u64 = 4 * 1024 * 1024;
const REDRAW: Duration = Duration::from_millis(200);

/// Progress of one copy.
#[derive(Debug)]
pub struct Progress {
    label: String,
    total: Option<u64>,
    done: u64,
    enabled: bool,
    drawn: bool,
    last: Option<Instant>,
}

impl Progress {
    /// A copy called `label`, of `total` bytes when known.
    pub fn new(label: impl Into<String>, total: Option<u64>) -> Self {
        let enabled = match std::env::var("SBOX_PROGRESS").as_deref() {
            Ok("always") => true,
            Ok("never") => false,
            _ => std::io::stderr().is_terminal(),
        };
        Progress {
            label: sandbox_sdk_core::text::escape_controls(&label.into()).into_owned(),
            total,
            done: 0,
            enabled,
            drawn: false,
            last: None,
        }
    }

    /// Counts `n` more bytes, redrawing at most every 200 ms once past the threshold.
    pub fn advance(&mut self, n: u64) {
        self.done += n;
        if !self.enabled || self.done < THRESHOLD {
            return;
        }
        if self.last.is_some_and(|t| t.elapsed() < REDRAW) {
            return;
        }
        self.last = Some(Instant::now());
        self.draw();
    }

    /// Ends the line when one was drawn.
    pub fn finish(&mut self) {
        if self.drawn {
            self.draw();
            eprintln!();
            self.drawn = false;
        }
    }

    fn draw(&mut self) {
        self.drawn = true;
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r{}", line(&self.label, self.done, self.total));
        let _ = err.flush();
    }
}

/// `label  12.0 MiB / 40.0 MiB  30%`, or without a total `label  12.0 MiB`.
pub fn line(label: &str, done: u64, total: Option<u64>) -> String {
    match total {
        Some(total) if total > 0 => format!(
            "{label}  {} / {}  {:>3}%",
            size(done),
            size(total),
            done.saturating_mul(100) / total
        ),
        _ => format!("{label}  {}", size(done)),
    }
}

fn size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// A reader that counts what passes through it into a [`Progress`].
#[derive(Debug)]
pub struct Counting<R> {
    inner: R,
    progress: Progress,
}

impl<R> Counting<R> {
    /// Counts reads of `inner`.
    pub fn new(inner: R, progress: Progress) -> Self {
        Counting { inner, progress }
    }
}

impl<R> Drop for Counting<R> {
    fn drop(&mut self) {
        self.progress.finish();
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Counting<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let poll = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = &poll {
            let n = (buf.filled().len() - before) as u64;
            self.progress.advance(n);
        }
        poll
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[test]
    fn lines_show_sizes_and_percent() {
        assert_eq!(
            line("up", 12 * 1024 * 1024, Some(40 * 1024 * 1024)),
            "up  12.0 MiB / 40.0 MiB   30%"
        );
        assert_eq!(line("down", 1536, None), "down  1.5 KiB");
        assert_eq!(line("x", 10, Some(0)), "x  10 B");
    }

    #[tokio::test]
    async fn counting_reader_passes_bytes_through_and_counts_them() {
        let data = vec![7u8; 100_000];
        let mut reader = Counting::new(&data[..], Progress::new("t", Some(100_000)));
        let mut out = Vec::new();
        reader.read_to_end(&mut out).await.unwrap();
        assert_eq!(out, data);
        assert_eq!(reader.progress.done, 100_000);
    }
}
