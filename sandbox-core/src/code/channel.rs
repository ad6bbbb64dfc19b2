//! How the SDK and the emulated kernel's driver talk: requests go in through an [`Inbox`] (the
//! process's stdin, or a [`Mailbox`] of numbered files where the provider's stdin does not
//! stream), frames come out on the driver's stdout, each one sealed ([`Seal`]).
//!
//! A sealed frame line is `SEQ MAC JSON`: `SEQ` counts up from 1, `MAC` is the first 16 bytes
//! of HMAC-SHA256 over `SEQ JSON` under the key the SDK sent in its first request, in hex. The
//! key never appears in a frame, so whoever can read the driver's output (on Fly Machines it
//! sits in a file in the machine) can neither forge a frame nor replay one: a line whose `SEQ`
//! is not past the last one opened is refused.

use crate::error::{Error, Result};
use crate::exec::Stdin;
use async_trait::async_trait;
use bytes::Bytes;
use sha2::{Digest, Sha256};
use std::fmt;
use std::sync::Arc;
use tokio::io::AsyncWriteExt;

/// Writes a whole file in the sandbox: what a [`Mailbox`] needs of its provider. An adapter
/// implements it on a handle that does not own the sandbox handle (no reference cycle).
#[async_trait]
pub trait MailboxWriter: Send + Sync {
    /// Writes `data` to `path` (relative to the sandbox's working directory), replacing any file
    /// there; a reader never sees the file half written under its final name.
    async fn write_file(&self, path: &str, data: Bytes) -> Result<()>;
}

/// Requests to the driver as numbered files (`DIR/00000000`, `DIR/00000001`, …), each one JSON
/// line, which the driver reads in order and removes (started with `--mailbox DIR`).
pub struct Mailbox {
    writer: Arc<dyn MailboxWriter>,
    dir: String,
    next: u64,
}

impl Mailbox {
    /// A mailbox in `dir`, written through `writer`.
    pub fn new(writer: Arc<dyn MailboxWriter>, dir: String) -> Self {
        Mailbox {
            writer,
            dir,
            next: 0,
        }
    }

    /// The directory the driver reads.
    pub fn dir(&self) -> &str {
        &self.dir
    }
}

/// Where requests to one driver go.
pub enum Inbox {
    /// The driver's stdin, streamed.
    Stdin(Stdin),
    /// Files the driver polls for.
    Mailbox(Mailbox),
}

impl fmt::Debug for Inbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Inbox::Stdin(_) => f.write_str("Inbox::Stdin"),
            Inbox::Mailbox(m) => write!(f, "Inbox::Mailbox({})", m.dir),
        }
    }
}

impl Inbox {
    /// Sends one request as a JSON line.
    pub async fn send(&mut self, value: &serde_json::Value) -> Result<()> {
        let mut line = serde_json::to_vec(value).map_err(|e| Error::validation(e.to_string()))?;
        line.push(b'\n');
        match self {
            Inbox::Stdin(stdin) => {
                stdin.write_all(&line).await.map_err(Error::from)?;
                stdin.flush().await.map_err(Error::from)
            }
            Inbox::Mailbox(mailbox) => {
                let path = format!("{}/{:08}", mailbox.dir, mailbox.next);
                mailbox.writer.write_file(&path, Bytes::from(line)).await?;
                mailbox.next += 1;
                Ok(())
            }
        }
    }
}

/// Opens sealed frame lines under one key.
#[derive(Debug)]
pub struct Seal {
    key: Vec<u8>,
    last: u64,
}

impl Seal {
    /// A seal under `key`, nothing opened yet.
    pub fn new(key: &str) -> Self {
        Seal {
            key: key.as_bytes().to_vec(),
            last: 0,
        }
    }

    /// The JSON of a line sealed under this key with a sequence number past the last one
    /// opened; `None` for anything else (not sealed, forged, replayed).
    pub fn open<'l>(&mut self, line: &'l [u8]) -> Option<&'l [u8]> {
        let space = line.iter().position(|b| *b == b' ')?;
        let seq: u64 = std::str::from_utf8(&line[..space]).ok()?.parse().ok()?;
        let rest = &line[space + 1..];
        let mac = rest.get(..MAC_HEX)?;
        if rest.get(MAC_HEX) != Some(&b' ') || seq <= self.last {
            return None;
        }
        let body = &rest[MAC_HEX + 1..];
        let expected = self.mac(seq, body);
        if !constant_time_eq(mac, expected.as_bytes()) {
            return None;
        }
        self.last = seq;
        Some(body)
    }

    /// Seals `body` as the driver does (for tests and simulators of the driver's side).
    pub fn seal(&self, seq: u64, body: &[u8]) -> Vec<u8> {
        let mut line = format!("{seq} {} ", self.mac(seq, body)).into_bytes();
        line.extend_from_slice(body);
        line
    }

    fn mac(&self, seq: u64, body: &[u8]) -> String {
        let mut message = format!("{seq} ").into_bytes();
        message.extend_from_slice(body);
        hmac_sha256(&self.key, &message)[..MAC_HEX / 2]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

/// Hex digits of the MAC on a sealed line.
const MAC_HEX: usize = 32;

/// HMAC-SHA256 (RFC 2104) of `message` under `key`.
fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    const BLOCK: usize = 64;
    let mut block = [0u8; BLOCK];
    if key.len() > BLOCK {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| block.map(|b| b ^ byte);
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(message)
        .finalize();
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .into()
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn hmac_matches_rfc_4231() {
        // Test cases 2 and 6 (a key longer than the block).
        assert_eq!(
            hex(&hmac_sha256(b"Jefe", b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert_eq!(
            hex(&hmac_sha256(
                &[0xaa; 131],
                b"Test Using Larger Than Block-Size Key - Hash Key First"
            )),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }

    #[test]
    fn only_fresh_lines_sealed_under_the_key_open() {
        let driver = Seal::new("k3y");
        let mut reader = Seal::new("k3y");
        let first = driver.seal(1, br#"{"type":"ready"}"#);
        assert_eq!(reader.open(&first), Some(&br#"{"type":"ready"}"#[..]));
        // Replayed, or an older number: refused.
        assert_eq!(reader.open(&first), None);
        // Under another key, tampered, or not sealed at all: refused.
        assert_eq!(reader.open(&Seal::new("other").seal(2, b"{}")), None);
        let mut tampered = driver.seal(2, br#"{"a":1}"#);
        *tampered.last_mut().unwrap() = b'2';
        assert_eq!(reader.open(&tampered), None);
        assert_eq!(reader.open(br#"{"type":"stdout"}"#), None);
        assert_eq!(reader.open(b"3 short {}"), None);
        // A gap is fine (a line the reader never got), going back is not.
        assert_eq!(reader.open(&driver.seal(5, b"{}")), Some(&b"{}"[..]));
        assert_eq!(reader.open(&driver.seal(4, b"{}")), None);
    }
}
