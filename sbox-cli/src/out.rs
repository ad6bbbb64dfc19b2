//! Standard output as Unix tools treat theirs. When the reader goes away (`sbox ls | head -1`,
//! a closed MCP client), sbox ends at its next write, quietly (no message, no panic), with
//! status [`CLOSED_STATUS`]: 141, 128 + SIGPIPE, what a shell reports for `cat`, `ls` or `yes`
//! in the same place, so `set -o pipefail` sees the output was cut short exactly as it does
//! for them. A command that `sbox exec` or `sbox code` runs is stopped first.
//!
//! Rust ignores SIGPIPE, so a write to a closed pipe fails with `EPIPE` instead of ending the
//! process, and `println!` panics on it: every write to stdout goes through this module
//! ([`line()`], [`text()`], [`failed()`], [`Closing`]) instead. Other write errors (a full disk) are
//! sbox errors with status 1.

use crate::Fail;
use std::io::{self, Write};
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::AsyncWrite;

/// The status sbox exits with once its standard output is closed: 128 + SIGPIPE (13).
pub const CLOSED_STATUS: u8 = 141;

/// Whether a write failed because nobody reads the other end any more.
pub fn is_closed(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::BrokenPipe
}

/// Ends sbox quietly with [`CLOSED_STATUS`], as for a closed standard output.
pub fn exit_closed() -> ! {
    std::process::exit(CLOSED_STATUS.into())
}

/// What a failed write of output becomes: a quiet exit with [`CLOSED_STATUS`] when the reader
/// went away, else an error naming the failure.
pub fn failed(error: io::Error) -> Fail {
    if is_closed(&error) {
        exit_closed();
    }
    format!("cannot write the output: {error}")
}

/// Writes `text` to stdout and flushes it: `print!` that ends sbox quietly on a closed stdout.
pub fn text(text: &str) -> Result<(), Fail> {
    let mut stdout = io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(failed)
}

/// Writes `line` and a newline to stdout: `println!` that ends sbox quietly on a closed stdout.
pub fn line(line: impl std::fmt::Display) -> Result<(), Fail> {
    text(&format!("{line}\n"))
}

/// An async writer that ends sbox quietly with [`CLOSED_STATUS`] the first time a write or
/// flush finds its reader gone: for output written by code sbox does not control (the MCP
/// transport), which would otherwise only log the error and go on.
#[derive(Debug)]
pub struct Closing<W>(pub W);

impl<W> Closing<W> {
    fn check<T>(poll: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if let Poll::Ready(Err(e)) = &poll
            && is_closed(e)
        {
            exit_closed();
        }
        poll
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for Closing<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Self::check(Pin::new(&mut self.0).poll_write(cx, buf))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Self::check(Pin::new(&mut self.0).poll_flush(cx))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Self::check(Pin::new(&mut self.0).poll_shutdown(cx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_broken_pipe_counts_as_closed() {
        assert!(is_closed(&io::Error::from(io::ErrorKind::BrokenPipe)));
        let full = io::Error::from(io::ErrorKind::StorageFull);
        assert!(!is_closed(&full));
        assert!(failed(full).starts_with("cannot write the output: "));
    }
}
