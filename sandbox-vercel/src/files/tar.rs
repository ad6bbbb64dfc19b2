//! The gzip-compressed tar `fs/write` takes (PROTOCOL.md §7.1), made as a stream: one regular
//! file entry, compressed as its bytes are read, so a file of any size moves in constant
//! memory.
//!
//! The ustar writer is ours (about a hundred lines) rather than the `tar` crate's: `tar`
//! writes to a `std::io::Write` and reads from a `std::io::Read`, which would mean either the
//! whole archive in memory or a blocking thread per upload, while this one is driven by the
//! HTTP body stream itself. Names longer than ustar's 100 bytes and sizes past its 8 GiB are
//! carried in a PAX extended header, which every tar since POSIX.1-2001 reads.

use bytes::Bytes;
use flate2::Compression;
use flate2::write::GzEncoder;
use futures::StreamExt;
#[cfg(test)]
use sandbox_sdk_core::Result;
use sandbox_sdk_core::{ByteStream, Error, ErrorKind};
use std::io::Write;
use tokio::io::{AsyncRead, AsyncReadExt};

const BLOCK: usize = 512;
/// Raw bytes read per step.
const READ_CHUNK: usize = 256 * 1024;
/// The largest size ustar's 11 octal digits hold.
const USTAR_MAX_SIZE: u64 = 0o77777777777;

/// One ustar header block.
fn header(name: &str, size: u64, mode: u32, mtime: u64, kind: u8) -> [u8; BLOCK] {
    let mut h = [0u8; BLOCK];
    let name = name.as_bytes();
    let n = name.len().min(100);
    h[..n].copy_from_slice(&name[..n]);
    let octal = |field: &mut [u8], value: u64| {
        let digits = field.len() - 1;
        let text = format!("{value:0digits$o}");
        let text = &text.as_bytes()[text.len().saturating_sub(digits)..];
        field[..digits].copy_from_slice(text);
        field[digits] = 0;
    };
    octal(&mut h[100..108], u64::from(mode & 0o7777));
    octal(&mut h[108..116], 0);
    octal(&mut h[116..124], 0);
    octal(&mut h[124..136], size.min(USTAR_MAX_SIZE));
    octal(&mut h[136..148], mtime.min(USTAR_MAX_SIZE));
    h[156] = kind;
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|b| u32::from(*b)).sum();
    let text = format!("{sum:06o}\0 ");
    h[148..156].copy_from_slice(text.as_bytes());
    h
}

/// One PAX record, `"<len> key=value\n"`, its length counting itself.
fn pax_record(key: &str, value: &str) -> String {
    let body = format!(" {key}={value}\n");
    let mut len = body.len() + 1;
    while len.to_string().len() + body.len() != len {
        len = len.to_string().len() + body.len();
    }
    format!("{len}{body}")
}

fn padding(size: u64) -> usize {
    (BLOCK - (size % BLOCK as u64) as usize) % BLOCK
}

/// The blocks before an entry's data: a PAX header when the name or size needs one, then the
/// ustar header.
pub(crate) fn entry_head(name: &str, size: u64, mode: u32, mtime: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(3 * BLOCK);
    let mut pax = String::new();
    if name.len() > 100 {
        pax.push_str(&pax_record("path", name));
    }
    if size > USTAR_MAX_SIZE {
        pax.push_str(&pax_record("size", &size.to_string()));
    }
    if !pax.is_empty() {
        out.extend_from_slice(&header(
            "././@PaxHeader",
            pax.len() as u64,
            0o644,
            mtime,
            b'x',
        ));
        out.extend_from_slice(pax.as_bytes());
        out.resize(out.len() + padding(pax.len() as u64), 0);
    }
    out.extend_from_slice(&header(name, size, mode, mtime, b'0'));
    out
}

/// Where the archive stream stands.
struct State<R> {
    reader: R,
    encoder: Option<GzEncoder<Vec<u8>>>,
    left: u64,
    size: u64,
    name: String,
}

fn io_error(e: std::io::Error) -> Error {
    Error::new(
        ErrorKind::Transport,
        format!("could not build the upload archive: {e}"),
    )
}

/// The gzip tar of one file `name` (relative to `/`) of `size` bytes read from `reader`, as a
/// stream. A reader that gives fewer or more than `size` bytes ends the stream with an error
/// (nothing half-written is sent as complete).
pub(crate) fn archive<R: AsyncRead + Send + Unpin + 'static>(
    name: String,
    size: u64,
    mode: u32,
    mtime: u64,
    reader: R,
) -> ByteStream {
    let mut encoder = GzEncoder::new(Vec::new(), Compression::fast());
    let head = encoder.write_all(&entry_head(&name, size, mode, mtime));
    let state = State {
        reader,
        encoder: Some(encoder),
        left: size,
        size,
        name,
    };
    let first = futures::stream::once(async move { head.map(|_| Bytes::new()).map_err(io_error) });
    let rest = futures::stream::try_unfold(state, |mut s| async move {
        let Some(encoder) = s.encoder.as_mut() else {
            return Ok(None);
        };
        if s.left > 0 {
            let want = (s.left as usize).min(READ_CHUNK);
            let mut buf = vec![0u8; want];
            let n = s.reader.read(&mut buf).await.map_err(io_error)?;
            if n == 0 {
                return Err(Error::new(
                    ErrorKind::Validation,
                    format!(
                        "the body of {} ended after {} of {} bytes",
                        s.name,
                        s.size - s.left,
                        s.size
                    ),
                ));
            }
            s.left -= n as u64;
            encoder.write_all(&buf[..n]).map_err(io_error)?;
        } else {
            let mut extra = [0u8; 1];
            if s.reader.read(&mut extra).await.map_err(io_error)? > 0 {
                return Err(Error::new(
                    ErrorKind::Validation,
                    format!("the body of {} is longer than {} bytes", s.name, s.size),
                ));
            }
            encoder
                .write_all(&vec![0u8; padding(s.size) + 2 * BLOCK])
                .map_err(io_error)?;
            let done = s
                .encoder
                .take()
                .map(|e| e.finish())
                .transpose()
                .map_err(io_error)?;
            return Ok(Some((Bytes::from(done.unwrap_or_default()), s)));
        }
        let out = std::mem::take(encoder.get_mut());
        Ok(Some((Bytes::from(out), s)))
    });
    first
        .chain(rest)
        .filter(|chunk| std::future::ready(!matches!(chunk, Ok(b) if b.is_empty())))
        .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::read::GzDecoder;
    use futures::TryStreamExt;
    use std::io::Read;

    async fn unpacked(name: &str, data: Vec<u8>, size: u64) -> Result<Vec<u8>> {
        let stream = archive(
            name.to_owned(),
            size,
            0o644,
            1_700_000_000,
            std::io::Cursor::new(data),
        );
        let chunks: Vec<bytes::Bytes> = stream.try_collect().await?;
        let gz: Vec<u8> = chunks.concat();
        let mut raw = Vec::new();
        GzDecoder::new(&gz[..]).read_to_end(&mut raw).unwrap();
        Ok(raw)
    }

    #[tokio::test]
    async fn one_file_in_ustar_with_valid_checksum_and_trailer() {
        let data: Vec<u8> = (0..=255u8).collect();
        let raw = unpacked("vercel/sandbox/a.bin", data.clone(), 256)
            .await
            .unwrap();
        assert_eq!(raw.len(), BLOCK + BLOCK + 2 * BLOCK);
        let h = &raw[..BLOCK];
        assert_eq!(&h[..20], b"vercel/sandbox/a.bin");
        assert_eq!(&h[257..263], b"ustar\0");
        assert_eq!(&h[124..136], b"00000000400\0");
        let stored = u32::from_str_radix(std::str::from_utf8(&h[148..154]).unwrap(), 8).unwrap();
        let mut copy = h.to_vec();
        copy[148..156].copy_from_slice(b"        ");
        assert_eq!(stored, copy.iter().map(|b| u32::from(*b)).sum::<u32>());
        assert_eq!(&raw[BLOCK..BLOCK + 256], &data[..]);
        assert!(raw[BLOCK + 256..].iter().all(|b| *b == 0));
    }

    #[tokio::test]
    async fn long_names_go_in_a_pax_header() {
        let name = format!("d/{}", "n".repeat(150));
        let raw = unpacked(&name, b"x".to_vec(), 1).await.unwrap();
        assert_eq!(raw[156], b'x');
        let pax = std::str::from_utf8(&raw[BLOCK..BLOCK + 200]).unwrap();
        let record = pax_record("path", &name);
        assert!(pax.starts_with(&record), "{pax}");
        let len: usize = record.split(' ').next().unwrap().parse().unwrap();
        assert_eq!(len, record.len());
        assert_eq!(raw[2 * BLOCK + 156], b'0');
    }

    #[tokio::test]
    async fn a_body_shorter_or_longer_than_announced_is_an_error() {
        assert_eq!(
            unpacked("a", b"abc".to_vec(), 5).await.unwrap_err().kind(),
            ErrorKind::Validation
        );
        assert_eq!(
            unpacked("a", b"abcdef".to_vec(), 5)
                .await
                .unwrap_err()
                .kind(),
            ErrorKind::Validation
        );
        assert!(unpacked("empty", Vec::new(), 0).await.is_ok());
    }
}
