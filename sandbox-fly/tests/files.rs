//! Files, replayed from the `spec` cassettes in `tests/cassettes/fly/`: chunked transfers, short
//! downloads, and partial uploads removed.

mod common;

use bytes::Bytes;
use common::*;
use futures::TryStreamExt;
use sandbox_sdk_core::ErrorKind;
use sandbox_sdk_core::prelude::*;

#[tokio::test]
async fn files_move_in_chunks_sized_by_the_builder() {
    let r = Replay::start("fly_chunked_files").await;
    let fly = r.builder().file_chunk(4).build().unwrap();
    let sandbox = fly.connect_machine(ID).await.unwrap();
    // A reader that hands out one byte at a time still yields full chunks.
    let body: sandbox_sdk_core::UploadBody = Box::pin(tokio::io::BufReader::with_capacity(
        1,
        std::io::Cursor::new(b"0123456789".to_vec()),
    ));
    let transfer = sandbox.upload("dir/ten.bin", body).await.unwrap();
    assert_eq!(transfer.bytes, 10);
    assert!(transfer.emulated);
    let download = sandbox.download("dir/ten.bin").await.unwrap();
    assert!(download.is_emulated());
    let chunks: Vec<Bytes> = download.try_collect().await.unwrap();
    assert_eq!(chunks.len(), 3, "one chunk per call");
    assert_eq!(chunks.concat(), b"0123456789");
    r.verify().await;
}

#[tokio::test]
async fn a_download_that_ends_before_the_stat_size_is_an_error_not_a_short_file() {
    let r = Replay::start("fly_short_download").await;
    let fly = r.builder().file_chunk(4).build().unwrap();
    let sandbox = fly.connect_machine(ID).await.unwrap();
    let download = sandbox.download("dir/shrunk.bin").await.unwrap();
    let err = download.try_collect::<Vec<Bytes>>().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Provider);
    assert!(
        err.message()
            .contains("read 6 of 10 bytes of dir/shrunk.bin"),
        "{err}"
    );
    assert_eq!(err.sandbox_id(), Some(ID));
    r.verify().await;
}

/// Hands out its bytes, then fails like a broken disk or socket.
struct FailingBody(std::io::Cursor<&'static [u8]>);

impl tokio::io::AsyncRead for FailingBody {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        use std::io::Read;
        let mut tmp = vec![0u8; buf.remaining()];
        let n = self.0.read(&mut tmp).unwrap_or(0);
        if n == 0 {
            return std::task::Poll::Ready(Err(std::io::Error::other("the body broke")));
        }
        buf.put_slice(&tmp[..n]);
        std::task::Poll::Ready(Ok(()))
    }
}

#[tokio::test]
async fn a_failed_upload_removes_its_partial_file() {
    let r = Replay::start("fly_upload_cleanup").await;
    let fly = r.builder().file_chunk(4).build().unwrap();
    let sandbox = fly.connect_machine(ID).await.unwrap();
    // The body fails after one chunk went out: the partial file is removed.
    let body: sandbox_sdk_core::UploadBody =
        Box::pin(FailingBody(std::io::Cursor::new(b"01234567")));
    let err = sandbox.upload("dir/broken.bin", body).await.unwrap_err();
    assert!(err.message().contains("the body broke"), "{err}");
    // The one and only chunk fails in the machine: removed too.
    let err = sandbox
        .write_file("dir/full.bin", Bytes::from_static(b"ab"))
        .await
        .unwrap_err();
    assert!(err.message().contains("No space left"), "{err}");
    r.verify().await;
}
