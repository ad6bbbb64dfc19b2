//! A command's stdin, collected whole: `/exec` takes stdin as one string, so what the caller
//! writes is gathered (up to [`STDIN_LIMIT`]) until the writer is shut down, then sent with the
//! command (direct) or uploaded to a file the launch reads (polled).

use crate::config::{PROVIDER, STDIN_LIMIT};
use bytes::{Bytes, BytesMut};
use sandbox_sdk_core::{Error, ErrorKind, Result};

/// Collects stdin on its own task, so that a caller who writes everything before reading any
/// output never blocks on the channel; the result is awaited when the command is sent.
pub(super) fn spawn_stdin_collector(
    rx: tokio::sync::mpsc::Receiver<Bytes>,
) -> impl std::future::Future<Output = Result<Bytes>> + Send + 'static {
    let task = tokio::spawn(collect_stdin(rx));
    async move {
        task.await.unwrap_or_else(|e| {
            Err(Error::new(
                ErrorKind::Cancelled,
                format!("stdin collection stopped: {e}"),
            )
            .with_provider(PROVIDER)
            .with_operation("exec"))
        })
    }
}

/// Collects a process's stdin until the writer is shut down, up to [`STDIN_LIMIT`].
async fn collect_stdin(mut rx: tokio::sync::mpsc::Receiver<Bytes>) -> Result<Bytes> {
    let mut buf = BytesMut::new();
    while let Some(chunk) = rx.recv().await {
        buf.extend_from_slice(&chunk);
        if buf.len() > STDIN_LIMIT {
            return Err(Error::validation(format!(
                "stdin is larger than {STDIN_LIMIT} bytes, the most fly sends with one command"
            ))
            .with_provider(PROVIDER)
            .with_operation("exec"));
        }
    }
    Ok(buf.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn stdin_over_the_cap_is_a_validation_error() {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let collected = spawn_stdin_collector(rx);
        let sender = tokio::spawn(async move {
            let chunk = Bytes::from(vec![b'x'; 256 * 1024]);
            for _ in 0..5 {
                if tx.send(chunk.clone()).await.is_err() {
                    return false;
                }
            }
            true
        });
        let err = collected.await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Validation);
        assert!(err.message().contains("1048576"), "{err}");
        // The collector stopped reading, so the writer sees a closed pipe instead of blocking.
        let _ = sender.await.unwrap();
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tx.send(Bytes::from_static(b"ok")).await.unwrap();
        drop(tx);
        assert_eq!(&spawn_stdin_collector(rx).await.unwrap()[..], b"ok");
    }
}
